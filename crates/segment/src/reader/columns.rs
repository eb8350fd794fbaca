//! Column reads: one series' rows handed over as plain per-column slices (timestamps
//! and `f64` values), not as one [`RowView`](super::RowView) per row. What a query
//! engine's read side wants: a window function or an aggregation runs over the slices.
//!
//! A [`SeriesCursor`] keeps the last decoded timestamp block and each column's last
//! decoded block of one segment, so reading the series of a segment in table order
//! decodes every block at most once even though blocks span series.

use super::Segment;
use crate::error::{Error, Place, Result};
use crate::format::blocks::{self, FloatBlock};
use crate::point::MetricKind;
use crate::tombstone::Tombstones;

/// One metric column's samples of one series, oldest first: `ts[i]` holds `values[i]`.
/// Counter values are converted to `f64` (exact below 2^53).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ColumnSamples {
    /// Timestamps, milliseconds.
    pub ts: Vec<i64>,
    /// The values, one per timestamp.
    pub values: Vec<f64>,
}

impl ColumnSamples {
    /// Empties both vectors, keeping their capacity.
    pub fn clear(&mut self) {
        self.ts.clear();
        self.values.clear();
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.ts.len()
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    /// Appends one sample.
    pub fn push(&mut self, ts: i64, value: f64) {
        self.ts.push(ts);
        self.values.push(value);
    }
}

/// What one output of a column read receives (see [`Segment::read_series_columns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnRead {
    /// The values of metric column `i` (an index into [`Segment::columns`]).
    Metric(usize),
    /// Nothing: a column the segment does not have.
    Absent,
    /// Every row's timestamp, with 0.0 as its value: the documents themselves (what a
    /// document count needs, whichever columns the rows have).
    Rows,
}

/// Decoding state of one segment read series by series (see the module docs). Reuse one
/// per segment and reading thread; it is only valid with the segment it was first used
/// with.
#[derive(Debug, Default)]
pub struct SeriesCursor {
    ts_block: Option<u32>,
    ts: Vec<i64>,
    columns: Vec<(Option<u32>, FloatBlock)>,
}

impl Segment {
    /// Decodes timestamp block `b` into the cursor unless it holds it already.
    fn cursor_ts(&self, cursor: &mut SeriesCursor, b: u64) -> Result<u32> {
        let block = u32::try_from(b)
            .map_err(|_| Error::corrupt(Place::SeriesTable, "row beyond the blocks"))?;
        if cursor.ts_block != Some(block) {
            cursor.ts_block = None;
            cursor.ts.clear();
            self.decode_ts_block(block, &mut cursor.ts)?;
            cursor.ts_block = Some(block);
        }
        Ok(block)
    }

    /// Appends the rows of series `index` (its position in [`series`](Self::series))
    /// whose timestamp is in `from..=to`, column by column: for each `j`, what
    /// `columns[j]` names goes to `out[j]`: a metric column's values with their
    /// timestamps (rows without a value of that column left out), or every row's
    /// timestamp ([`ColumnRead::Rows`]). Rows in `deleted` are skipped. Returns
    /// the rows of the series in the range that are not deleted. Blocks are decoded through `cursor`
    /// (kept across calls, so neighbouring series decode a shared block once) and their
    /// checksums checked on first use, as every read does.
    ///
    /// # Errors
    /// Format errors of the blocks read, naming the segment.
    #[allow(clippy::too_many_arguments)]
    pub fn read_series_columns(
        &self,
        index: usize,
        from: i64,
        to: i64,
        columns: &[ColumnRead],
        deleted: Option<&Tombstones>,
        cursor: &mut SeriesCursor,
        out: &mut [ColumnSamples],
    ) -> Result<u64> {
        self.named(|| {
            let Some(s) = self.series.get(index) else {
                return Ok(0);
            };
            if s.max_ts < from || s.min_ts > to || from > to {
                return Ok(0);
            }
            let deleted = deleted.filter(|d| !d.is_empty());
            // The wanted columns this series has: (output slot, column index, rows per block).
            let br = u64::from(self.footer.block_rows).max(1);
            let row_outputs: Vec<usize> = columns
                .iter()
                .enumerate()
                .filter(|(_, c)| **c == ColumnRead::Rows)
                .map(|(j, _)| j)
                .collect();
            let wanted: Vec<(usize, usize, u64)> = columns
                .iter()
                .enumerate()
                .filter_map(|(j, c)| {
                    let ColumnRead::Metric(c) = *c else {
                        return None;
                    };
                    s.presence(c as u32)?;
                    let span = self.layout.get(c + 1).map_or(br, |l| l.span).max(br);
                    Some((j, c, span))
                })
                .collect();
            if cursor.columns.len() < self.meta.columns.len() {
                cursor
                    .columns
                    .resize_with(self.meta.columns.len(), || (None, FloatBlock::default()));
            }
            let end = (s.first_row + s.row_count).min(self.footer.row_count);
            if end <= s.first_row {
                return Ok(0);
            }
            // The first block whose rows of the series reach `from`: found by bisection over
            // the series' blocks (a few timestamp blocks decoded, not every one before it).
            let mut row = s.first_row;
            if from > s.min_ts {
                let (mut lo, mut hi) = (s.first_row / br, (end - 1) / br);
                // First probe where the series would reach `from` if its samples were evenly
                // spaced (they mostly are: one decode then), then bisection.
                if lo < hi && s.max_ts > s.min_ts {
                    let frac =
                        (from.saturating_sub(s.min_ts)) as f64 / (s.max_ts - s.min_ts) as f64;
                    let guess_row = s.first_row + ((s.row_count - 1) as f64 * frac.min(1.0)) as u64;
                    let g = (guess_row / br).clamp(lo, hi);
                    let first = (g * br).max(s.first_row);
                    let last = ((g + 1) * br).min(end) - 1;
                    self.cursor_ts(cursor, g)?;
                    let at = |r: u64| cursor.ts.get((r - g * br) as usize).copied();
                    match (at(first), at(last)) {
                        (_, Some(l)) if l < from => lo = g + 1,
                        (Some(f), _) if f < from => (lo, hi) = (g, g),
                        _ => hi = g,
                    }
                }
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    let last = ((mid + 1) * br).min(end) - 1;
                    self.cursor_ts(cursor, mid)?;
                    match cursor.ts.get((last - mid * br) as usize) {
                        Some(&t) if t < from => lo = mid + 1,
                        _ => hi = mid,
                    }
                }
                row = row.max(lo * br);
            }
            let mut read = 0u64;
            while row < end {
                let b = row / br;
                let block = self.cursor_ts(cursor, b)?;
                let block_lo = b * br;
                let block_end = ((b + 1) * br).min(end);
                let local = (row - block_lo) as usize..(block_end - block_lo) as usize;
                let Some(ts) = cursor.ts.get(local.clone()) else {
                    return Err(Error::corrupt(
                        Place::Block { column: 0, block },
                        "fewer timestamps than rows",
                    ));
                };
                // A series' timestamps ascend: the rows in range are one run.
                let a = ts.partition_point(|&t| t < from);
                let z = ts.partition_point(|&t| t <= to);
                if a < z {
                    let first = row + a as u64;
                    let ts = ts.get(a..z).unwrap_or(&[]);
                    read += match deleted {
                        None => ts.len() as u64,
                        Some(d) => (first..first + ts.len() as u64)
                            .filter(|&r| !d.is_deleted(r))
                            .count() as u64,
                    };
                    for &j in &row_outputs {
                        let Some(o) = out.get_mut(j) else { continue };
                        for (k, &t) in ts.iter().enumerate() {
                            if !deleted.is_some_and(|d| d.is_deleted(first + k as u64)) {
                                o.push(t, 0.0);
                            }
                        }
                    }
                    for &(j, c, span) in &wanted {
                        let (Some(o), Some((cached, vals))) =
                            (out.get_mut(j), cursor.columns.get_mut(c))
                        else {
                            continue;
                        };
                        let cb = first / span;
                        let cbu = u32::try_from(cb).map_err(|_| {
                            Error::corrupt(Place::SeriesTable, "row beyond the blocks")
                        })?;
                        if *cached != Some(cbu) {
                            *cached = None;
                            let kind = self
                                .meta
                                .columns
                                .get(c)
                                .map_or(MetricKind::Gauge, |i| i.kind);
                            blocks::metric_values_f64(
                                &self.block_at(c as u32 + 1, cbu)?,
                                c as u32,
                                kind,
                                vals,
                            )?;
                            *cached = Some(cbu);
                        }
                        let off = (first - cb * span) as usize;
                        let range = off..off + ts.len();
                        let Some(vs) = vals.values.get(range.clone()) else {
                            return Err(Error::corrupt(
                                Place::Block {
                                    column: c as u32 + 1,
                                    block: cbu,
                                },
                                "fewer values than rows",
                            ));
                        };
                        let present = vals.present.get(range).unwrap_or(&[]);
                        if deleted.is_none() && present.is_empty() {
                            // Every row has a value: two copies.
                            o.ts.extend_from_slice(ts);
                            o.values.extend_from_slice(vs);
                            continue;
                        }
                        for (k, (&t, &v)) in ts.iter().zip(vs).enumerate() {
                            if deleted.is_some_and(|d| d.is_deleted(first + k as u64))
                                || present.get(k) == Some(&false)
                            {
                                continue;
                            }
                            o.push(t, v);
                        }
                    }
                }
                if z < local.len() {
                    break;
                }
                row = block_end;
            }
            Ok(read)
        })
    }
}
