//! Column blocks: each block is `codec u8 | body` (`crate::codec`), its body a presence
//! header (metric and extra columns) and the values in one of the family's encodings.
//! The writer tries each candidate encoding and keeps the smallest compressed block; the
//! reader checks a block's bounds and CRC against its directory entry before decoding.

use roaring::RoaringBitmap;

use super::directory::BlockRef;
use super::{FOOTER_LEN, HEADER_LEN};
use crate::codec::{
    BlockCompressor, counter_candidates, counter_candidates_fast, encode_extras, encode_presence,
    encode_timestamps, encode_timestamps_grid, gauge_candidates, gauge_candidates_fast,
};
use crate::error::{Error, Place, Result};
use crate::point::{Extra, ExtraKind, MetricKind, MetricValue};
use crate::validate::MAX_NAME_LEN;

/// A block's presence header: a bitmap of its rows with a value when a series partial
/// for the column has rows in it, else none (every row of a full series has one).
pub(crate) fn presence_header(partial: bool, rows: &[u32], out: &mut Vec<u8>) -> Result<()> {
    if partial {
        let bitmap: RoaringBitmap = rows.iter().copied().collect();
        encode_presence(Some(&bitmap), out)
    } else {
        encode_presence(None, out)
    }
}

/// The candidate bodies of a timestamp block of `runs` (one per series part).
pub(crate) fn timestamp_candidates(ts: &[i64], runs: &[usize]) -> Vec<Vec<u8>> {
    let mut dod = Vec::new();
    encode_timestamps(ts, runs, &mut dod);
    let mut grid = Vec::new();
    encode_timestamps_grid(ts, runs, &mut grid);
    vec![dod, grid]
}

/// The candidate value encodings of a metric block of `kind` (after its presence
/// header); `fast` keeps the cheap ones.
pub(crate) fn metric_candidates(
    kind: MetricKind,
    values: &[MetricValue],
    fast: bool,
    comp: &mut BlockCompressor,
) -> Result<Vec<Vec<u8>>> {
    Ok(match kind {
        MetricKind::Gauge => {
            let v: Vec<f64> = values
                .iter()
                .map(|v| match v {
                    MetricValue::Gauge(g) => *g,
                    MetricValue::Counter(c) => *c as f64,
                })
                .collect();
            if fast {
                gauge_candidates_fast(&v)
            } else {
                gauge_candidates(&v, comp)?
            }
        }
        MetricKind::Counter => {
            let v: Vec<i64> = values
                .iter()
                .map(|v| match v {
                    MetricValue::Counter(c) => *c,
                    MetricValue::Gauge(g) => *g as i64,
                })
                .collect();
            if fast {
                counter_candidates_fast(&v)
            } else {
                counter_candidates(&v, comp)?
            }
        }
    })
}

/// The body of an extra block: presence header, then the values.
pub(crate) fn extra_body(
    kind: ExtraKind,
    rows: &[u32],
    values: &[Extra],
    partial: bool,
) -> Result<Vec<u8>> {
    let mut raw = Vec::new();
    presence_header(partial, rows, &mut raw)?;
    encode_extras(kind, values.iter(), &mut raw);
    Ok(raw)
}

/// Compresses each candidate body after `header` and returns the smallest block and its
/// decoded length (with `fast`: compresses only the candidate smallest before
/// compression); `None` without candidates. `scratch` is a reusable buffer.
pub(crate) fn best(
    header: &[u8],
    mut candidates: Vec<Vec<u8>>,
    fast: bool,
    comp: &mut BlockCompressor,
    scratch: &mut Vec<u8>,
) -> Result<Option<(Vec<u8>, usize)>> {
    if fast && candidates.len() > 1 {
        if let Some(i) = (0..candidates.len()).min_by_key(|&i| candidates[i].len()) {
            candidates.swap(0, i);
            candidates.truncate(1);
        }
    }
    let mut best: Option<(Vec<u8>, usize)> = None;
    for cand in candidates {
        scratch.clear();
        scratch.extend_from_slice(header);
        scratch.extend_from_slice(&cand);
        let block = comp.compress_block(scratch)?;
        if best.as_ref().is_none_or(|(b, _)| block.len() < b.len()) {
            best = Some((block, scratch.len()));
        }
    }
    Ok(best)
}

/// The largest decoded size a block of `rows` rows may claim. A timestamp or metric
/// block holds at most 10 bytes per row (varints) or 8 per value (byte planes), a
/// presence bitmap and headers; an extra block (`extra`) keyword strings of up to
/// [`MAX_NAME_LEN`] bytes.
pub(crate) fn max_raw_len(rows: u64, extra: bool) -> u64 {
    if extra {
        rows * (10 + MAX_NAME_LEN as u64) + 8 * 1024 + 64
    } else {
        rows * 10 + 8 * 1024 + 64
    }
}

/// The stored bytes of the block of entry `e` in `file`, after checking them against the
/// entry (inside the data, CRC); `None` for an empty entry.
pub(crate) fn stored<'a>(file: &'a [u8], e: &BlockRef, place: Place) -> Result<Option<&'a [u8]>> {
    if e.len == 0 {
        if e.raw_len != 0 || e.crc != 0 {
            return Err(Error::corrupt(
                place,
                "empty block with a length or checksum",
            ));
        }
        return Ok(None);
    }
    let data_end = file.len() as u64 - FOOTER_LEN as u64;
    let end = e.offset.checked_add(u64::from(e.len));
    if e.offset < HEADER_LEN as u64 || end.is_none_or(|end| end > data_end) {
        return Err(Error::OutOfBounds {
            place,
            offset: e.offset,
            len: u64::from(e.len),
            start: HEADER_LEN as u64,
            end: data_end,
        });
    }
    let stored = file
        .get(e.offset as usize..(e.offset + u64::from(e.len)) as usize)
        .unwrap_or(&[]);
    let got = crc32fast::hash(stored);
    if got != e.crc {
        return Err(Error::ChecksumMismatch {
            place,
            expected: e.crc,
            got,
        });
    }
    Ok(Some(stored))
}
