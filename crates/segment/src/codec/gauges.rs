//! Gauge blocks: raw `f64` bits, Gorilla-style XOR, integer deltas, and their byte-plane
//! layouts; the decimal (ALP) candidates come from [`super::alp`].

use super::BlockCompressor;
use super::counters::{counter_sizes, delta_split, encode_counter, integrate};
use super::planes::{put_coded_planes, put_planes, read_coded_planes, read_planes};
use super::{ENC_DELTA, alp, unknown_encoding};
use crate::error::{Error, Result};
use crate::le::Reader;

/// Gauge: raw 8-byte little-endian `f64` bits.
pub const ENC_RAW64: u8 = 4;
/// Gauge: XOR with the previous value's bits, byte-trimmed (Gorilla on byte boundaries).
pub const ENC_XOR: u8 = 5;
/// Gauge: every value is an integer-valued `f64`; zigzag varint deltas of the integers.
pub const ENC_INT_DELTA: u8 = 6;

/// Gauge: raw `f64` bits split into 8 byte planes (all lowest bytes, ..., all highest).
pub const ENC_RAW64_SPLIT: u8 = 7;
/// Gauge: XOR with the previous value's bits, split into 8 byte planes.
pub const ENC_XOR_SPLIT: u8 = 8;
/// Gauge: every value is an integer-valued `f64`; zigzag deltas of the integers as `u64`,
/// split into 8 byte planes.
pub const ENC_INT_DELTA_SPLIT: u8 = 10;

/// Gauge: raw `f64` bits as 8 byte planes, each coded on its own (raw, constant or
/// zstd), so that the compressible high planes are not drowned by the random low ones.
pub const ENC_RAW64_PLANES: u8 = 11;
/// Gauge: XOR words as 8 separately coded byte planes.
pub const ENC_XOR_PLANES: u8 = 12;

pub(super) fn encode_xor(values: &[f64], out: &mut Vec<u8>) {
    out.push(ENC_XOR);
    // At most 9 bytes a value. Each value's 8 payload bytes are written whole (one store,
    // not a variable-length copy) and the cursor moves past the bytes that count; the
    // next value overwrites the rest, and the tail is cut at the end.
    let start = out.len();
    out.resize(start + values.len() * 9 + 8, 0);
    let mut pos = start;
    let mut prev = 0u64;
    for v in values {
        let bits = v.to_bits();
        let x = bits ^ prev;
        prev = bits;
        if x == 0 {
            if let Some(b) = out.get_mut(pos) {
                *b = 0x80;
            }
            pos += 1;
            continue;
        }
        let lz = x.leading_zeros() / 8;
        let tz = x.trailing_zeros() / 8;
        if let Some(b) = out.get_mut(pos) {
            *b = ((lz as u8) << 4) | tz as u8;
        }
        if let Some(slot) = out.get_mut(pos + 1..pos + 9) {
            slot.copy_from_slice(&(x >> (8 * tz)).to_le_bytes());
        }
        pos += 1 + (8 - lz - tz) as usize;
    }
    out.truncate(pos);
}

fn integral(values: &[f64]) -> Option<Vec<i64>> {
    values
        .iter()
        .map(|&v| {
            let i = v as i64;
            ((i as f64).to_bits() == v.to_bits()).then_some(i)
        })
        .collect()
}

/// Each value's bits XOR the previous value's (the first XOR 0).
fn xors(values: &[f64]) -> impl Iterator<Item = u64> + '_ {
    let mut prev = 0u64;
    values.iter().map(move |v| {
        let bits = v.to_bits();
        let x = bits ^ prev;
        prev = bits;
        x
    })
}

pub(super) fn xor_words(values: &[f64]) -> Vec<u64> {
    xors(values).collect()
}

/// Encoded candidates for a gauge block's values (after the presence header).
pub fn gauge_candidates(values: &[f64], comp: &mut BlockCompressor) -> Result<Vec<Vec<u8>>> {
    let mut raw = Vec::with_capacity(values.len() * 8 + 1);
    raw.push(ENC_RAW64);
    for v in values {
        raw.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    let mut xor = Vec::with_capacity(values.len() * 3 + 1);
    encode_xor(values, &mut xor);
    let mut raw_split = Vec::with_capacity(values.len() * 8 + 1);
    raw_split.push(ENC_RAW64_SPLIT);
    put_planes(
        &values.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        &mut raw_split,
    );
    let mut xor_split = Vec::with_capacity(values.len() * 8 + 1);
    xor_split.push(ENC_XOR_SPLIT);
    put_planes(&xor_words(values), &mut xor_split);
    let bits: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
    let raw_planes = put_coded_planes(&bits, ENC_RAW64_PLANES, comp)?;
    let xor_planes = put_coded_planes(&xor_words(values), ENC_XOR_PLANES, comp)?;
    let mut out = vec![raw, xor, raw_split, xor_split, raw_planes, xor_planes];
    if let Some(ints) = integral(values) {
        let mut d = Vec::with_capacity(values.len() * 2 + 1);
        encode_counter(&ints, ENC_DELTA, &mut d);
        if let Some(first) = d.first_mut() {
            *first = ENC_INT_DELTA;
        }
        out.push(d);
        out.push(delta_split(&ints, ENC_INT_DELTA_SPLIT));
    }
    out.extend(alp::candidates(values));
    Ok(out)
}

/// The cheap candidates for a gauge block, for fast writes (no byte-plane layouts, which
/// need a zstd pass each): XOR, integer deltas when every value is an integer, and the
/// smaller ALP layout when the values are decimals. Of these only the smallest is
/// encoded (the first of XOR, integer deltas, ALP on a tie), sized first.
pub fn gauge_candidates_fast(values: &[f64]) -> Vec<Vec<u8>> {
    let xor_len = xor_size(values);
    // Most gauges are not integers, and the test fails at the first that is not.
    let ints = integral(values);
    let delta_len = ints.as_ref().map(|ints| counter_sizes(ints).0);
    let alp = alp::smallest(values);
    let alp_len = alp.as_ref().map(|(_, len)| len - 1);
    let best_other = delta_len.map_or(xor_len, |d| d.min(xor_len));
    if let (Some((body, _)), Some(len)) = (alp, alp_len)
        && len < best_other
    {
        return vec![body];
    }
    if let (Some(ints), Some(len)) = (ints, delta_len)
        && len < xor_len
    {
        let mut d = Vec::with_capacity(values.len() * 2 + 1);
        encode_counter(&ints, ENC_DELTA, &mut d);
        if let Some(first) = d.first_mut() {
            *first = ENC_INT_DELTA;
        }
        return vec![d];
    }
    let mut xor = Vec::with_capacity(values.len() * 3 + 1);
    encode_xor(values, &mut xor);
    vec![xor]
}

/// The length of [`encode_xor`]'s output for `values`, without the encoding byte.
fn xor_size(values: &[f64]) -> usize {
    xors(values)
        .map(|x| {
            if x == 0 {
                1
            } else {
                1 + 8 - (x.leading_zeros() / 8 + x.trailing_zeros() / 8) as usize
            }
        })
        .sum()
}

/// The values whose XOR with the previous value's bits (from 0) are `words`.
fn unxor(words: Vec<u64>) -> Vec<f64> {
    let mut prev = 0u64;
    words
        .into_iter()
        .map(|x| {
            prev ^= x;
            f64::from_bits(prev)
        })
        .collect()
}

/// Reads `count` values written by [`encode_xor`].
fn read_xor(r: &mut Reader<'_>, count: usize) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(count);
    let mut prev = 0u64;
    for _ in 0..count {
        let control = r.u8()?;
        let lz = u32::from(control >> 4);
        let tz = u32::from(control & 0x0f);
        if lz + tz > 8 || (lz + tz == 8 && control != 0x80) {
            return Err(Error::corrupt(
                r.place(),
                format!("xor control byte {control:#04x}"),
            ));
        }
        let n = (8 - lz - tz) as usize;
        let mut buf = [0u8; 8];
        if let Some(dst) = buf.get_mut(..n) {
            dst.copy_from_slice(r.take(n)?);
        }
        let x = u64::from_le_bytes(buf).checked_shl(8 * tz).unwrap_or(0);
        prev ^= x;
        out.push(f64::from_bits(prev));
    }
    Ok(out)
}

/// Decodes `count` values of gauge encoding `enc`.
pub(super) fn decode(r: &mut Reader<'_>, enc: u8, count: usize) -> Result<Vec<f64>> {
    let bits = |words: Vec<u64>| words.into_iter().map(f64::from_bits).collect();
    let floats = |ints: Vec<i64>| ints.into_iter().map(|v| v as f64).collect();
    Ok(match enc {
        ENC_INT_DELTA => {
            // `read_deltas` without DOD, each integer made a float as it is summed (one
            // pass, no integer vector).
            let mut out = Vec::with_capacity(count);
            let mut prev = 0i64;
            r.zigzags(count, |z| {
                prev = prev.wrapping_add(z);
                out.push(prev as f64);
            })?;
            out
        }
        ENC_RAW64_PLANES => bits(read_coded_planes(r, count)?),
        ENC_XOR_PLANES => unxor(read_coded_planes(r, count)?),
        ENC_RAW64_SPLIT => bits(read_planes(r, count)?),
        ENC_XOR_SPLIT => unxor(read_planes(r, count)?),
        ENC_INT_DELTA_SPLIT => floats(integrate(read_planes(r, count)?)),
        ENC_RAW64 => {
            let mut out = Vec::with_capacity(count);
            for _ in 0..count {
                out.push(r.f64()?);
            }
            out
        }
        ENC_XOR => read_xor(r, count)?,
        other => return Err(unknown_encoding(r, other)),
    })
}
