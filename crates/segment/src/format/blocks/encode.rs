//! Encoding column blocks: presence headers, each family's candidate bodies, and the
//! choice of the smallest compressed candidate.

use roaring::RoaringBitmap;

use crate::codec::{
    BlockCompressor, counter_candidates, counter_candidates_fast, encode_extras, encode_presence,
    encode_timestamps, encode_timestamps_grid, gauge_candidates, gauge_candidates_fast,
};
use crate::error::Result;
use crate::point::{Extra, ExtraKind, MetricKind, MetricValue};

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
