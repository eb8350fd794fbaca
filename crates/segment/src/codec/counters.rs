//! Counter blocks: zigzag deltas, deltas of deltas, and deltas as byte planes.

use super::BlockCompressor;
use super::planes::{put_coded_planes, put_planes, read_coded_planes, read_planes};
use crate::error::Result;
use crate::le::{Reader, put_zigzag, unzigzag, varint_len, zigzag};

/// Counter: zigzag varint deltas from the previous present value (the first from 0).
pub const ENC_DELTA: u8 = 2;
/// Counter: zigzag varint first value, first delta, then deltas of deltas.
pub const ENC_DOD: u8 = 3;
/// Counter: zigzag deltas as `u64`, split into 8 byte planes.
pub const ENC_DELTA_SPLIT: u8 = 9;
/// Counter: zigzag deltas as 8 separately coded byte planes.
pub const ENC_DELTA_PLANES: u8 = 13;

pub(super) fn encode_counter(values: &[i64], enc: u8, out: &mut Vec<u8>) {
    out.push(enc);
    let mut prev = 0i64;
    let mut prev_delta = 0i64;
    for (i, &v) in values.iter().enumerate() {
        let delta = v.wrapping_sub(prev);
        if enc == ENC_DOD && i >= 2 {
            put_zigzag(out, delta.wrapping_sub(prev_delta));
        } else {
            put_zigzag(out, delta);
        }
        prev_delta = delta;
        prev = v;
    }
}

/// Encoded candidates for a counter block's values (after the presence header).
pub fn counter_candidates(values: &[i64], comp: &mut BlockCompressor) -> Result<Vec<Vec<u8>>> {
    let mut delta = Vec::with_capacity(values.len() * 2 + 1);
    encode_counter(values, ENC_DELTA, &mut delta);
    let mut dod = Vec::with_capacity(values.len() * 2 + 1);
    encode_counter(values, ENC_DOD, &mut dod);
    let mut prev = 0i64;
    let deltas: Vec<u64> = values
        .iter()
        .map(|&v| {
            let d = zigzag(v.wrapping_sub(prev));
            prev = v;
            d
        })
        .collect();
    let planes = put_coded_planes(&deltas, ENC_DELTA_PLANES, comp)?;
    Ok(vec![
        delta,
        dod,
        delta_split(values, ENC_DELTA_SPLIT),
        planes,
    ])
}

pub(super) fn delta_split(values: &[i64], enc: u8) -> Vec<u8> {
    let mut split = Vec::with_capacity(values.len() * 8 + 1);
    split.push(enc);
    let mut prev = 0i64;
    let words: Vec<u64> = values
        .iter()
        .map(|&v| {
            let d = zigzag(v.wrapping_sub(prev));
            prev = v;
            d
        })
        .collect();
    put_planes(&words, &mut split);
    split
}

/// The cheap candidate for a counter block, for fast writes: deltas or deltas of deltas,
/// whichever is smaller (deltas on a tie), sized in one pass and encoded once.
pub fn counter_candidates_fast(values: &[i64]) -> Vec<Vec<u8>> {
    let (delta, dod) = counter_sizes(values);
    let enc = if dod < delta { ENC_DOD } else { ENC_DELTA };
    let mut out = Vec::with_capacity(1 + delta.min(dod));
    encode_counter(values, enc, &mut out);
    vec![out]
}

/// The encoded lengths of `values` as deltas and as deltas of deltas (without the
/// encoding byte).
pub(super) fn counter_sizes(values: &[i64]) -> (usize, usize) {
    let (mut delta, mut dod) = (0usize, 0usize);
    let mut prev = 0i64;
    let mut prev_delta = 0i64;
    let split = values.len().min(2);
    let (head, tail) = values.split_at(split);
    for &v in head {
        let d = v.wrapping_sub(prev);
        let n = varint_len(zigzag(d));
        delta += n;
        dod += n;
        prev_delta = d;
        prev = v;
    }
    for &v in tail {
        let d = v.wrapping_sub(prev);
        delta += varint_len(zigzag(d));
        dod += varint_len(zigzag(d.wrapping_sub(prev_delta)));
        prev_delta = d;
        prev = v;
    }
    (delta, dod)
}

/// Reads `count` zigzag varint deltas from 0 (deltas of deltas from the third value on
/// when `dod`) and returns the values.
pub(super) fn read_deltas(r: &mut Reader<'_>, count: usize, dod: bool) -> Result<Vec<i64>> {
    let mut out = Vec::with_capacity(count);
    let mut prev = 0i64;
    let mut prev_delta = 0i64;
    let mut i = 0usize;
    r.zigzags(count, |z| {
        let delta = if dod && i >= 2 {
            prev_delta.wrapping_add(z)
        } else {
            z
        };
        i += 1;
        prev = prev.wrapping_add(delta);
        prev_delta = delta;
        out.push(prev);
    })?;
    Ok(out)
}

/// The values whose zigzag deltas from 0 are `words`.
pub(super) fn integrate(words: Vec<u64>) -> Vec<i64> {
    let mut prev = 0i64;
    words
        .into_iter()
        .map(|z| {
            prev = prev.wrapping_add(unzigzag(z));
            prev
        })
        .collect()
}

/// Decodes `count` values of counter encoding `enc`.
pub(super) fn decode(r: &mut Reader<'_>, enc: u8, count: usize) -> Result<Vec<i64>> {
    match enc {
        ENC_DELTA | ENC_DOD => read_deltas(r, count, enc == ENC_DOD),
        ENC_DELTA_SPLIT => Ok(integrate(read_planes(r, count)?)),
        ENC_DELTA_PLANES => Ok(integrate(read_coded_planes(r, count)?)),
        other => Err(super::unknown_encoding(r, other)),
    }
}
