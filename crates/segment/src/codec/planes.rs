//! Byte planes: 64-bit words stored as 8 planes (all lowest bytes, ..., all highest), as
//! one run or with each plane coded on its own. Gauges and counters both use them.

use super::{BlockCompressor, zstd_into};
use crate::error::{Error, Result};
use crate::le::Reader;

/// Plane coding: `count` raw bytes follow.
pub const PLANE_RAW: u8 = 0;
/// Plane coding: one byte follows, repeated `count` times.
pub const PLANE_CONST: u8 = 1;
/// Plane coding: a varint length and a zstd frame of `count` bytes follow.
pub const PLANE_ZSTD: u8 = 2;

/// Appends `words` as 8 byte planes: byte 0 of every word, then byte 1, ... (the
/// transposition of Parquet's BYTE_STREAM_SPLIT), so that zstd sees the slowly varying
/// high bytes of similar numbers side by side.
pub(super) fn put_planes(words: &[u64], out: &mut Vec<u8>) {
    out.reserve(words.len() * 8);
    for plane in 0..8 {
        out.extend(words.iter().map(|w| (w >> (8 * plane)) as u8));
    }
}

/// Appends `words` as 8 byte planes, each coded on its own: constant, zstd or raw,
/// whichever is smallest.
pub(super) fn put_coded_planes(
    words: &[u64],
    enc: u8,
    comp: &mut BlockCompressor,
) -> Result<Vec<u8>> {
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
        match comp.compress_frame(&plane_bytes)? {
            Some(z) if z.len() + 10 < plane_bytes.len() => {
                out.push(PLANE_ZSTD);
                crate::le::put_varint(&mut out, z.len() as u64);
                out.extend_from_slice(&z);
            }
            _ => {
                out.push(PLANE_RAW);
                out.extend_from_slice(&plane_bytes);
            }
        }
    }
    Ok(out)
}

/// Reads `count` words written by [`put_coded_planes`].
pub(super) fn read_coded_planes(r: &mut Reader<'_>, count: usize) -> Result<Vec<u64>> {
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
pub(super) fn read_planes(r: &mut Reader<'_>, count: usize) -> Result<Vec<u64>> {
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
