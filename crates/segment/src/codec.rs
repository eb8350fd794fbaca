//! Column encodings and block compression.
//!
//! Every block is `codec u8 | body`; the body, once decompressed, starts with an encoding
//! byte. Decoders take the expected value count and never trust a length they have not
//! checked against the input.

use std::cell::RefCell;

use crate::error::{Error, Place, Result};
use crate::le::{Reader, put_u32, put_zigzag, unzigzag, zigzag};

/// Block codec: the body is stored as is.
pub const CODEC_RAW: u8 = 0;
/// Block codec: the body is one zstd frame.
pub const CODEC_ZSTD: u8 = 1;

/// Timestamps: per series run, first value as a zigzag delta from the previous run's
/// first value, then delta, then deltas of deltas.
pub const ENC_TS_DOD: u8 = 1;
/// Counter: zigzag varint deltas from the previous present value (the first from 0).
pub const ENC_DELTA: u8 = 2;
/// Counter: zigzag varint first value, first delta, then deltas of deltas.
pub const ENC_DOD: u8 = 3;
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
/// Counter: zigzag deltas as `u64`, split into 8 byte planes.
pub const ENC_DELTA_SPLIT: u8 = 9;

/// Gauge: every value is an integer-valued `f64`; zigzag deltas of the integers as `u64`,
/// split into 8 byte planes.
pub const ENC_INT_DELTA_SPLIT: u8 = 10;

/// Gauge: raw `f64` bits as 8 byte planes, each coded on its own (raw, constant or
/// zstd), so that the compressible high planes are not drowned by the random low ones.
pub const ENC_RAW64_PLANES: u8 = 11;
/// Gauge: XOR words as 8 separately coded byte planes.
pub const ENC_XOR_PLANES: u8 = 12;
/// Counter: zigzag deltas as 8 separately coded byte planes.
pub const ENC_DELTA_PLANES: u8 = 13;

/// Plane coding: `count` raw bytes follow.
pub const PLANE_RAW: u8 = 0;
/// Plane coding: one byte follows, repeated `count` times.
pub const PLANE_CONST: u8 = 1;
/// Plane coding: a varint length and a zstd frame of `count` bytes follow.
pub const PLANE_ZSTD: u8 = 2;

/// Extra keyword column: a per-block dictionary (count, then length-prefixed strings in
/// order of first appearance), then each value's dictionary index.
pub const ENC_DICT: u8 = 20;
/// Extra boolean column: values bit-packed, least significant bit first.
pub const ENC_BITS: u8 = 21;

/// Presence: implied by the series table (absent or full per series).
pub const PRESENCE_SERIES: u8 = 0;
/// Presence: a roaring bitmap of block-relative row offsets follows.
pub const PRESENCE_ROARING: u8 = 1;

/// Human name of an encoding code, for `dump`.
pub fn encoding_name(code: u8) -> &'static str {
    match code {
        ENC_TS_DOD => "ts-dod",
        ENC_TS_GRID => "ts-grid",
        ENC_DICT => "dict",
        ENC_BITS => "bits",
        ENC_DELTA => "delta",
        ENC_DOD => "dod",
        ENC_RAW64 => "raw64",
        ENC_XOR => "xor",
        ENC_INT_DELTA => "int-delta",
        ENC_RAW64_SPLIT => "raw64-split",
        ENC_XOR_SPLIT => "xor-split",
        ENC_DELTA_SPLIT => "delta-split",
        ENC_INT_DELTA_SPLIT => "int-delta-split",
        ENC_RAW64_PLANES => "raw64-planes",
        ENC_XOR_PLANES => "xor-planes",
        ENC_DELTA_PLANES => "delta-planes",
        _ => "unknown",
    }
}

/// A reusable zstd compression context (creating one per block costs more than
/// compressing a small block).
pub struct BlockCompressor {
    ctx: zstd::bulk::Compressor<'static>,
}

impl BlockCompressor {
    /// A context at `level`.
    pub fn new(level: i32) -> Result<BlockCompressor> {
        Ok(BlockCompressor {
            ctx: zstd::bulk::Compressor::new(level)?,
        })
    }

    /// Compresses `data` as one zstd frame.
    pub fn compress_frame(&mut self, data: &[u8]) -> Result<Vec<u8>> {
        Ok(self.ctx.compress(data)?)
    }

    /// Wraps `raw` in a block: zstd when that is smaller, else raw.
    pub fn compress_block(&mut self, raw: &[u8]) -> Result<Vec<u8>> {
        let packed = self.ctx.compress(raw)?;
        let mut out = Vec::with_capacity(1 + packed.len().min(raw.len()));
        if packed.len() < raw.len() {
            out.push(CODEC_ZSTD);
            out.extend_from_slice(&packed);
        } else {
            out.push(CODEC_RAW);
            out.extend_from_slice(raw);
        }
        Ok(out)
    }
}

thread_local! {
    /// One decompression context per thread, reused by every block read.
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

fn zstd_into(body: &[u8], out: &mut Vec<u8>) -> std::io::Result<usize> {
    DECOMPRESSOR.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            if slot.is_none() {
                *slot = Some(zstd::bulk::Decompressor::new()?);
            }
            match slot.as_mut() {
                Some(d) => d.decompress_to_buffer(body, out),
                None => zstd::bulk::Decompressor::new()?.decompress_to_buffer(body, out),
            }
        }
        Err(_) => zstd::bulk::Decompressor::new()?.decompress_to_buffer(body, out),
    })
}

/// Unwraps a block into `out`; its decompressed size must be exactly `raw_len` (at most
/// `max_raw`).
pub fn decompress_block_into(
    block: &[u8],
    raw_len: u64,
    max_raw: u64,
    place: Place,
    out: &mut Vec<u8>,
) -> Result<()> {
    if raw_len > max_raw {
        return Err(Error::corrupt(
            place,
            format!("decoded length {raw_len} exceeds the limit {max_raw}"),
        ));
    }
    let raw_len = usize::try_from(raw_len)
        .map_err(|_| Error::corrupt(place, "decoded length does not fit memory"))?;
    let Some((&codec, body)) = block.split_first() else {
        return Err(Error::Truncated {
            place,
            needed: 1,
            available: 0,
        });
    };
    out.clear();
    match codec {
        CODEC_RAW => out.extend_from_slice(body),
        CODEC_ZSTD => {
            out.reserve_exact(raw_len);
            zstd_into(body, out).map_err(|e| Error::corrupt(place, format!("zstd: {e}")))?;
        }
        other => return Err(Error::corrupt(place, format!("unknown codec {other}"))),
    }
    if out.len() != raw_len {
        return Err(Error::corrupt(
            place,
            format!("decoded {} bytes, expected {raw_len}", out.len()),
        ));
    }
    Ok(())
}

/// Unwraps a block whose decompressed size must be exactly `raw_len` (at most `max_raw`).
pub fn decompress_block(block: &[u8], raw_len: u64, max_raw: u64, place: Place) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    decompress_block_into(block, raw_len, max_raw, place, &mut out)?;
    Ok(out)
}

/// Encodes timestamps of one block, split into runs (one per series part).
pub fn encode_timestamps(ts: &[i64], runs: &[usize], out: &mut Vec<u8>) {
    out.push(ENC_TS_DOD);
    let mut prev_first = 0i64;
    let mut at = 0usize;
    for &len in runs {
        let run = ts.get(at..at + len).unwrap_or(&[]);
        at += len;
        let mut prev = 0i64;
        let mut prev_delta = 0i64;
        for (i, &t) in run.iter().enumerate() {
            match i {
                0 => {
                    put_zigzag(out, t.wrapping_sub(prev_first));
                    prev_first = t;
                }
                1 => {
                    prev_delta = t.wrapping_sub(prev);
                    put_zigzag(out, prev_delta);
                }
                _ => {
                    let delta = t.wrapping_sub(prev);
                    put_zigzag(out, delta.wrapping_sub(prev_delta));
                    prev_delta = delta;
                }
            }
            prev = t;
        }
    }
}

/// Timestamps: per series run, first value as a zigzag delta from the previous run's
/// first value, then the run's most common step `d`, then each value's zigzag residual
/// from a grid `anchor + k·d`; a residual larger than |d|/2 re-anchors the grid there.
pub const ENC_TS_GRID: u8 = 14;

fn most_common_delta(run: &[i64]) -> i64 {
    let mut deltas: Vec<i64> = run.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    deltas.sort_unstable();
    let mut best = (0usize, deltas.first().copied().unwrap_or(0));
    let mut i = 0usize;
    while let Some(&d) = deltas.get(i) {
        let n = deltas
            .get(i..)
            .map_or(0, |rest| rest.iter().take_while(|&&x| x == d).count());
        if n > best.0 {
            best = (n, d);
        }
        i += n.max(1);
    }
    best.1
}

/// Encodes timestamps of one block on a per-run grid (see [`ENC_TS_GRID`]).
pub fn encode_timestamps_grid(ts: &[i64], runs: &[usize], out: &mut Vec<u8>) {
    out.push(ENC_TS_GRID);
    let mut prev_first = 0i64;
    let mut at = 0usize;
    for &len in runs {
        let run = ts.get(at..at + len).unwrap_or(&[]);
        at += len;
        let Some((&first, rest)) = run.split_first() else {
            continue;
        };
        put_zigzag(out, first.wrapping_sub(prev_first));
        prev_first = first;
        if rest.is_empty() {
            continue;
        }
        let d = most_common_delta(run);
        put_zigzag(out, d);
        let (mut anchor, mut k) = (first, 0i64);
        for &t in rest {
            k += 1;
            let residual = t.wrapping_sub(anchor.wrapping_add(k.wrapping_mul(d)));
            put_zigzag(out, residual);
            if residual.unsigned_abs() > d.unsigned_abs() / 2 {
                anchor = t;
                k = 0;
            }
        }
    }
}

/// Decodes the values after a run's first one.
fn decode_run_rest(
    r: &mut Reader<'_>,
    enc: u8,
    first: i64,
    len: usize,
    out: &mut Vec<i64>,
) -> Result<()> {
    if len < 2 {
        return Ok(());
    }
    if enc == ENC_TS_GRID {
        let d = r.zigzag()?;
        let (mut anchor, mut k) = (first, 0i64);
        for _ in 1..len {
            k += 1;
            let residual = r.zigzag()?;
            let t = anchor
                .wrapping_add(k.wrapping_mul(d))
                .wrapping_add(residual);
            if residual.unsigned_abs() > d.unsigned_abs() / 2 {
                anchor = t;
                k = 0;
            }
            out.push(t);
        }
    } else {
        let mut prev = first;
        let mut prev_delta = 0i64;
        for i in 1..len {
            let v = r.zigzag()?;
            prev_delta = if i == 1 {
                v
            } else {
                prev_delta.wrapping_add(v)
            };
            prev = prev.wrapping_add(prev_delta);
            out.push(prev);
        }
    }
    Ok(())
}

fn timestamp_encoding(r: &mut Reader<'_>) -> Result<u8> {
    match r.u8()? {
        enc @ (ENC_TS_DOD | ENC_TS_GRID) => Ok(enc),
        enc => Err(Error::corrupt(
            r.place(),
            format!("timestamp encoding {enc}, expected {ENC_TS_DOD} or {ENC_TS_GRID}"),
        )),
    }
}

/// Decodes a timestamp block, given its runs.
pub fn decode_timestamps(r: &mut Reader<'_>, runs: &[usize], out: &mut Vec<i64>) -> Result<()> {
    let enc = timestamp_encoding(r)?;
    let mut prev_first = 0i64;
    for &len in runs {
        if len == 0 {
            continue;
        }
        prev_first = prev_first.wrapping_add(r.zigzag()?);
        out.push(prev_first);
        decode_run_rest(r, enc, prev_first, len, out)?;
    }
    Ok(())
}

/// Decodes only run `target` of a timestamp block (skipping the varints of the runs
/// before it), as `find` needs.
pub fn decode_timestamps_run(
    r: &mut Reader<'_>,
    runs: &[usize],
    target: usize,
    out: &mut Vec<i64>,
) -> Result<()> {
    let enc = timestamp_encoding(r)?;
    let mut prev_first = 0i64;
    for (k, &len) in runs.iter().enumerate() {
        if len == 0 {
            continue;
        }
        prev_first = prev_first.wrapping_add(r.zigzag()?);
        if k < target {
            // DOD: len - 1 more varints; grid: the step and len - 1 residuals.
            let more = if enc == ENC_TS_GRID && len >= 2 {
                len
            } else {
                len - 1
            };
            r.skip_varints(more)?;
            continue;
        }
        out.push(prev_first);
        return decode_run_rest(r, enc, prev_first, len, out);
    }
    Err(Error::corrupt(r.place(), format!("run {target} missing")))
}

fn encode_counter(values: &[i64], enc: u8, out: &mut Vec<u8>) {
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

fn encode_xor(values: &[f64], out: &mut Vec<u8>) {
    out.push(ENC_XOR);
    let mut prev = 0u64;
    for v in values {
        let bits = v.to_bits();
        let x = bits ^ prev;
        prev = bits;
        if x == 0 {
            out.push(0x80);
            continue;
        }
        let lz = x.leading_zeros() / 8;
        let tz = x.trailing_zeros() / 8;
        out.push(((lz as u8) << 4) | tz as u8);
        let bytes = (x >> (8 * tz)).to_le_bytes();
        out.extend_from_slice(bytes.get(..(8 - lz - tz) as usize).unwrap_or(&[]));
    }
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

/// Appends `words` as 8 byte planes: byte 0 of every word, then byte 1, ... (the
/// transposition of Parquet's BYTE_STREAM_SPLIT), so that zstd sees the slowly varying
/// high bytes of similar numbers side by side.
fn put_planes(words: &[u64], out: &mut Vec<u8>) {
    out.reserve(words.len() * 8);
    for plane in 0..8 {
        out.extend(words.iter().map(|w| (w >> (8 * plane)) as u8));
    }
}

/// Appends `words` as 8 byte planes, each coded on its own: constant, zstd or raw,
/// whichever is smallest.
fn put_coded_planes(words: &[u64], enc: u8, comp: &mut BlockCompressor) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(words.len() * 8 + 32);
    out.push(enc);
    let mut plane_bytes = Vec::with_capacity(words.len());
    for plane in 0..8 {
        plane_bytes.clear();
        plane_bytes.extend(words.iter().map(|w| (w >> (8 * plane)) as u8));
        let first = plane_bytes.first().copied().unwrap_or(0);
        if plane_bytes.iter().all(|&b| b == first) {
            out.push(PLANE_CONST);
            out.push(first);
            continue;
        }
        let z = comp.compress_frame(&plane_bytes)?;
        if z.len() + 10 < plane_bytes.len() {
            out.push(PLANE_ZSTD);
            crate::le::put_varint(&mut out, z.len() as u64);
            out.extend_from_slice(&z);
        } else {
            out.push(PLANE_RAW);
            out.extend_from_slice(&plane_bytes);
        }
    }
    Ok(out)
}

/// Reads `count` words written by [`put_coded_planes`].
fn read_coded_planes(r: &mut Reader<'_>, count: usize) -> Result<Vec<u64>> {
    let mut out = vec![0u64; count];
    let mut buf = Vec::new();
    for plane in 0..8 {
        let shift = 8 * plane;
        match r.u8()? {
            PLANE_RAW => {
                for (w, &b) in out.iter_mut().zip(r.take(count)?) {
                    *w |= u64::from(b) << shift;
                }
            }
            PLANE_CONST => {
                let b = u64::from(r.u8()?) << shift;
                for w in &mut out {
                    *w |= b;
                }
            }
            PLANE_ZSTD => {
                let len = r.count("plane frame length", r.remaining() as u64)?;
                let frame = r.take(len)?;
                buf.clear();
                buf.reserve_exact(count);
                zstd_into(frame, &mut buf)
                    .map_err(|e| Error::corrupt(r.place(), format!("zstd plane: {e}")))?;
                if buf.len() != count {
                    return Err(Error::corrupt(
                        r.place(),
                        format!("plane of {} bytes, expected {count}", buf.len()),
                    ));
                }
                for (w, &b) in out.iter_mut().zip(&buf) {
                    *w |= u64::from(b) << shift;
                }
            }
            other => return Err(Error::corrupt(r.place(), format!("plane coding {other}"))),
        }
    }
    Ok(out)
}

/// Reads `count` words written by [`put_planes`].
fn read_planes(r: &mut Reader<'_>, count: usize) -> Result<Vec<u64>> {
    let len = count
        .checked_mul(8)
        .ok_or_else(|| Error::corrupt(r.place(), "value count overflows"))?;
    let bytes = r.take(len)?;
    let mut out = vec![0u64; count];
    for (plane, chunk) in bytes.chunks_exact(count.max(1)).enumerate().take(8) {
        for (w, &b) in out.iter_mut().zip(chunk) {
            *w |= u64::from(b) << (8 * plane);
        }
    }
    Ok(out)
}

fn xor_words(values: &[f64]) -> Vec<u64> {
    let mut prev = 0u64;
    values
        .iter()
        .map(|v| {
            let bits = v.to_bits();
            let x = bits ^ prev;
            prev = bits;
            x
        })
        .collect()
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

fn delta_split(values: &[i64], enc: u8) -> Vec<u8> {
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
    Ok(out)
}

/// The cheap candidates for a gauge block, for fast writes (no byte-plane layouts, which
/// need a zstd pass each): XOR, and integer deltas when every value is an integer.
pub fn gauge_candidates_fast(values: &[f64]) -> Vec<Vec<u8>> {
    let mut xor = Vec::with_capacity(values.len() * 3 + 1);
    encode_xor(values, &mut xor);
    let mut out = vec![xor];
    if let Some(ints) = integral(values) {
        let mut d = Vec::with_capacity(values.len() * 2 + 1);
        encode_counter(&ints, ENC_DELTA, &mut d);
        if let Some(first) = d.first_mut() {
            *first = ENC_INT_DELTA;
        }
        out.push(d);
    }
    out
}

/// The cheap candidates for a counter block, for fast writes: deltas and deltas of
/// deltas.
pub fn counter_candidates_fast(values: &[i64]) -> Vec<Vec<u8>> {
    let mut delta = Vec::with_capacity(values.len() * 2 + 1);
    encode_counter(values, ENC_DELTA, &mut delta);
    let mut dod = Vec::with_capacity(values.len() * 2 + 1);
    encode_counter(values, ENC_DOD, &mut dod);
    vec![delta, dod]
}

/// Writes a presence header: series-implied, or a roaring bitmap of block-relative rows.
pub fn encode_presence(bitmap: Option<&roaring::RoaringBitmap>, out: &mut Vec<u8>) -> Result<()> {
    match bitmap {
        None => out.push(PRESENCE_SERIES),
        Some(b) => {
            out.push(PRESENCE_ROARING);
            let len = u32::try_from(b.serialized_size()).map_err(|_| Error::TooLarge {
                what: "presence bitmap bytes",
                found: b.serialized_size() as u64,
                max: u64::from(u32::MAX),
            })?;
            put_u32(out, len);
            b.serialize_into(&mut *out)?;
        }
    }
    Ok(())
}

/// Encodes the values of an extra block (after the presence header).
pub fn encode_extras<'a>(
    kind: crate::point::ExtraKind,
    values: impl Iterator<Item = &'a crate::point::Extra>,
    out: &mut Vec<u8>,
) {
    use crate::point::{Extra, ExtraKind};
    match kind {
        ExtraKind::Keyword => {
            out.push(ENC_DICT);
            let mut dict: Vec<&str> = Vec::new();
            let mut index: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
            let mut ids = Vec::new();
            for v in values {
                let s = match v {
                    Extra::Keyword(s) => s.as_str(),
                    Extra::Bool(_) => "",
                };
                let id = *index.entry(s).or_insert_with(|| {
                    dict.push(s);
                    dict.len() as u64 - 1
                });
                ids.push(id);
            }
            crate::le::put_varint(out, dict.len() as u64);
            for s in dict {
                crate::le::put_varint(out, s.len() as u64);
                out.extend_from_slice(s.as_bytes());
            }
            for id in ids {
                crate::le::put_varint(out, id);
            }
        }
        ExtraKind::Bool => {
            out.push(ENC_BITS);
            let mut byte = 0u8;
            let mut n = 0usize;
            for v in values {
                if matches!(v, Extra::Bool(true)) {
                    byte |= 1 << (n % 8);
                }
                n += 1;
                if n % 8 == 0 {
                    out.push(byte);
                    byte = 0;
                }
            }
            if n % 8 != 0 {
                out.push(byte);
            }
        }
    }
}

/// Decodes `count` values of an extra block of `kind`.
pub fn decode_extras(
    r: &mut Reader<'_>,
    kind: crate::point::ExtraKind,
    count: usize,
    want: std::ops::Range<usize>,
) -> Result<Vec<crate::point::Extra>> {
    use crate::point::{Extra, ExtraKind};
    let enc = r.u8()?;
    // Every value is checked; only those at positions `want` are materialized (a
    // verification reads a few rows of a block: cloning all its strings dominated).
    let want = want.start.min(count)..want.end.min(count);
    let mut out = Vec::with_capacity(want.len().min(r.remaining().saturating_mul(8)));
    match (kind, enc) {
        (ExtraKind::Keyword, ENC_DICT) => {
            let n = r.count("dictionary size", count as u64)?;
            let mut dict: Vec<&str> = Vec::with_capacity(n.min(r.remaining()));
            for _ in 0..n {
                let len = r.count("keyword length", r.remaining() as u64)?;
                let bytes = r.take(len)?;
                dict.push(
                    std::str::from_utf8(bytes)
                        .map_err(|_| Error::corrupt(r.place(), "keyword is not UTF-8"))?,
                );
            }
            for i in 0..count {
                let id = r.varint()?;
                let s = usize::try_from(id)
                    .ok()
                    .and_then(|i| dict.get(i))
                    .ok_or_else(|| Error::corrupt(r.place(), format!("dictionary index {id}")))?;
                if want.contains(&i) {
                    out.push(Extra::Keyword((*s).to_owned()));
                }
            }
        }
        (ExtraKind::Bool, ENC_BITS) => {
            let bytes = r.take(count.div_ceil(8))?;
            for i in want {
                let byte = bytes.get(i / 8).copied().unwrap_or(0);
                out.push(Extra::Bool(byte & (1 << (i % 8)) != 0));
            }
        }
        _ => {
            return Err(Error::corrupt(
                r.place(),
                format!("encoding {enc} does not fit a {} column", kind.name()),
            ));
        }
    }
    Ok(out)
}

/// Decoded values of one metric block.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// Gauge readings.
    Gauge(Vec<f64>),
    /// Counter readings.
    Counter(Vec<i64>),
}

/// Decodes `count` values of the given encoding.
pub fn decode_values(r: &mut Reader<'_>, count: usize) -> Result<(u8, Values)> {
    let enc = r.u8()?;
    // Each value takes at least one byte, so a count beyond the input is corrupt (coded
    // planes excepted: a constant plane takes two bytes for any count, and callers bound
    // `count` by the block's rows).
    let planes = matches!(enc, ENC_RAW64_PLANES | ENC_XOR_PLANES | ENC_DELTA_PLANES);
    if !planes && count > r.remaining() {
        return Err(Error::corrupt(
            r.place(),
            format!("{count} values cannot fit in {} bytes", r.remaining()),
        ));
    }
    let values = match enc {
        ENC_DELTA | ENC_DOD | ENC_INT_DELTA => {
            let mut out = Vec::with_capacity(count);
            let mut prev = 0i64;
            let mut prev_delta = 0i64;
            for i in 0..count {
                let z = r.zigzag()?;
                let delta = if enc == ENC_DOD && i >= 2 {
                    prev_delta.wrapping_add(z)
                } else {
                    z
                };
                prev = prev.wrapping_add(delta);
                prev_delta = delta;
                out.push(prev);
            }
            if enc == ENC_INT_DELTA {
                Values::Gauge(out.into_iter().map(|v| v as f64).collect())
            } else {
                Values::Counter(out)
            }
        }
        ENC_RAW64_PLANES => Values::Gauge(
            read_coded_planes(r, count)?
                .into_iter()
                .map(f64::from_bits)
                .collect(),
        ),
        ENC_XOR_PLANES => {
            let mut prev = 0u64;
            let words = read_coded_planes(r, count)?;
            Values::Gauge(
                words
                    .into_iter()
                    .map(|x| {
                        prev ^= x;
                        f64::from_bits(prev)
                    })
                    .collect(),
            )
        }
        ENC_DELTA_PLANES => {
            let mut prev = 0i64;
            let words = read_coded_planes(r, count)?;
            Values::Counter(
                words
                    .into_iter()
                    .map(|z| {
                        prev = prev.wrapping_add(unzigzag(z));
                        prev
                    })
                    .collect(),
            )
        }
        ENC_RAW64_SPLIT => Values::Gauge(
            read_planes(r, count)?
                .into_iter()
                .map(f64::from_bits)
                .collect(),
        ),
        ENC_XOR_SPLIT => {
            let mut prev = 0u64;
            let words = read_planes(r, count)?;
            Values::Gauge(
                words
                    .into_iter()
                    .map(|x| {
                        prev ^= x;
                        f64::from_bits(prev)
                    })
                    .collect(),
            )
        }
        ENC_DELTA_SPLIT | ENC_INT_DELTA_SPLIT => {
            let mut prev = 0i64;
            let words = read_planes(r, count)?;
            let ints = words.into_iter().map(|z| {
                prev = prev.wrapping_add(unzigzag(z));
                prev
            });
            if enc == ENC_INT_DELTA_SPLIT {
                Values::Gauge(ints.map(|v| v as f64).collect())
            } else {
                Values::Counter(ints.collect())
            }
        }
        ENC_RAW64 => {
            let mut out = Vec::with_capacity(count);
            for _ in 0..count {
                out.push(r.f64()?);
            }
            Values::Gauge(out)
        }
        ENC_XOR => {
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
            Values::Gauge(out)
        }
        other => {
            return Err(Error::corrupt(
                r.place(),
                format!("unknown value encoding {other}"),
            ));
        }
    };
    Ok((enc, values))
}

/// Reads a presence header; returns the bitmap when one is stored.
pub fn decode_presence(
    r: &mut Reader<'_>,
    block_rows: u32,
) -> Result<Option<roaring::RoaringBitmap>> {
    match r.u8()? {
        PRESENCE_SERIES => Ok(None),
        PRESENCE_ROARING => {
            let len = r.u32()? as usize;
            let bytes = r.take(len)?;
            let bitmap = roaring::RoaringBitmap::deserialize_from(bytes)
                .map_err(|e| Error::corrupt(r.place(), format!("presence bitmap: {e}")))?;
            if let Some(max) = bitmap.max() {
                if max >= block_rows {
                    return Err(Error::corrupt(
                        r.place(),
                        format!("presence bit {max} beyond the block's {block_rows} rows"),
                    ));
                }
            }
            Ok(Some(bitmap))
        }
        other => Err(Error::corrupt(
            r.place(),
            format!("unknown presence kind {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_takes_one_residual_per_jitter() {
        let ts = [
            0i64,
            60_000,
            120_002,
            180_000,
            240_000,
            400_000,
            460_000,
            i64::MAX,
            i64::MIN,
        ];
        let runs = [ts.len()];
        let mut out = Vec::new();
        encode_timestamps_grid(&ts, &runs, &mut out);
        let mut got = Vec::new();
        decode_timestamps(&mut Reader::new(&out, Place::Meta), &runs, &mut got).unwrap();
        assert_eq!(got, ts);
        // first, step, then residuals 0, 2, 0, 0, gap, 0, ...
        assert_eq!(&out[..3], &[ENC_TS_GRID, 0, 0xc0]);
    }

    #[test]
    fn decodes_one_run_alone() {
        let ts = [5i64, 7, 9, 100, 90, 80, 70, -3];
        let runs = [3, 4, 1];
        let mut out = Vec::new();
        encode_timestamps(&ts, &runs, &mut out);
        for (k, want) in [(0usize, &ts[0..3]), (1, &ts[3..7]), (2, &ts[7..8])] {
            let mut got = Vec::new();
            decode_timestamps_run(&mut Reader::new(&out, Place::Meta), &runs, k, &mut got).unwrap();
            assert_eq!(got, want);
        }
        assert!(
            decode_timestamps_run(
                &mut Reader::new(&out, Place::Meta),
                &runs,
                3,
                &mut Vec::new()
            )
            .is_err()
        );
    }

    fn round_trip_gauges(values: &[f64]) {
        let mut comp = BlockCompressor::new(3).unwrap();
        for cand in gauge_candidates(values, &mut comp).unwrap() {
            let mut r = Reader::new(&cand, Place::Meta);
            let (_, got) = decode_values(&mut r, values.len()).unwrap();
            let Values::Gauge(got) = got else { panic!() };
            let a: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
            let b: Vec<u64> = got.iter().map(|v| v.to_bits()).collect();
            assert_eq!(a, b, "encoding {}", cand[0]);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn gauges_round_trip_bit_exact() {
        round_trip_gauges(&[0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.5]);
        round_trip_gauges(&[1.0, 2.0, 3.0, 1e18, -1e18, 9.2e18]);
        round_trip_gauges(&[f64::MIN_POSITIVE, f64::MAX, f64::MIN, 5e-324]);
        round_trip_gauges(&[]);
    }

    #[test]
    fn constant_planes_round_trip() {
        round_trip_gauges(&[42.0; 1000]);
        let mut comp = BlockCompressor::new(3).unwrap();
        let values = vec![7i64; 1000];
        for cand in counter_candidates(&values, &mut comp).unwrap() {
            let mut r = Reader::new(&cand, Place::Meta);
            let (_, got) = decode_values(&mut r, values.len()).unwrap();
            assert_eq!(got, Values::Counter(values.clone()));
        }
    }

    #[test]
    fn counters_round_trip_extremes() {
        let values = [0, i64::MAX, i64::MIN, -1, 1, i64::MAX, 5, 10, 15];
        let mut comp = BlockCompressor::new(3).unwrap();
        for cand in counter_candidates(&values, &mut comp).unwrap() {
            let mut r = Reader::new(&cand, Place::Meta);
            let (_, got) = decode_values(&mut r, values.len()).unwrap();
            assert_eq!(got, Values::Counter(values.to_vec()));
        }
    }

    #[test]
    fn timestamps_round_trip_runs() {
        let ts = [i64::MIN, i64::MAX, 0, 10, 20, 30, 5, -5, 1_700_000_000_000];
        let runs = [2, 4, 1, 2];
        for grid in [false, true] {
            let mut out = Vec::new();
            if grid {
                encode_timestamps_grid(&ts, &runs, &mut out);
            } else {
                encode_timestamps(&ts, &runs, &mut out);
            }
            let mut got = Vec::new();
            decode_timestamps(&mut Reader::new(&out, Place::Meta), &runs, &mut got).unwrap();
            assert_eq!(got, ts);
        }
    }
}
