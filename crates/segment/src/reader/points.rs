//! Rows read back as owned [`Point`]s, extras included: one row, or every row of a range.

use std::ops::Range;

use super::Segment;
use crate::error::{Error, Place, Result};
use crate::format::blocks::DecodedBlock;
use crate::point::{Extra, Point, RowId};

impl Segment {
    /// The point at `row`: tsid, dimensions (by name), timestamp and metrics (by name).
    ///
    /// # Errors
    /// [`Error::RowOutOfRange`]; format errors of the blocks read.
    pub fn row(&self, row: RowId) -> Result<Point> {
        self.named(|| {
            let series = self.series_of_row(row).ok_or(Error::RowOutOfRange {
                row,
                row_count: self.footer.row_count,
            })?;
            let mut block = DecodedBlock::default();
            let b = (row / u64::from(self.footer.block_rows)) as u32;
            self.decode_block(b, &mut block)?;
            let i = (row % u64::from(self.footer.block_rows)) as usize;
            let ncols = self.meta.columns.len();
            let ts_millis = block.ts.get(i).copied().ok_or_else(|| {
                Error::corrupt(
                    Place::Block {
                        column: 0,
                        block: b,
                    },
                    "row missing from block",
                )
            })?;
            let values = block.metrics.get(i * ncols..(i + 1) * ncols).unwrap_or(&[]);
            let metrics = self
                .meta
                .columns
                .iter()
                .zip(values)
                .filter_map(|(c, v)| v.map(|v| (c.name.clone(), v)))
                .collect();
            let extras = if self.meta.extras.is_empty() {
                Vec::new()
            } else {
                self.row_extras(row)?
            };
            Ok(Point {
                tsid: series.tsid,
                dims: series.dims.to_vec(),
                ts_millis,
                metrics,
                extras,
            })
        })
    }

    /// Every row in `rows` (clamped to the segment) as a [`Point`], extras included, in
    /// row order; `keep` chooses the rows (e.g. not deleted). Each block is decoded once.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn points(&self, rows: Range<RowId>, keep: impl Fn(RowId) -> bool) -> Result<Vec<Point>> {
        self.named(|| {
            let mut out: Vec<(RowId, Point)> = Vec::new();
            let mut block = DecodedBlock::default();
            let end = rows.end.min(self.footer.row_count);
            let start = rows.start.min(end);
            self.scan_filtered(start..end, i64::MIN, i64::MAX, &mut block, &mut |rv| {
                if !keep(rv.row) {
                    return;
                }
                let mut p = Point::new(rv.series.tsid, rv.ts_millis);
                p.dims = rv.series.dims.to_vec();
                p.metrics = self
                    .meta
                    .columns
                    .iter()
                    .zip(rv.metrics)
                    .filter_map(|(c, v)| v.map(|v| (c.name.clone(), v)))
                    .collect();
                out.push((rv.row, p));
            })?;
            // Extra columns, one column block at a time.
            let base = self.meta.columns.len() as u32 + 1;
            for (e, info) in self.meta.extras.iter().enumerate() {
                let span = self.column_span_rows(base + e as u32).unwrap_or(1).max(1);
                let mut cached: Option<(u64, Vec<Option<Extra>>)> = None;
                for k in 0..out.len() {
                    let Some(&(row, _)) = out.get(k) else { break };
                    let cb = row / span;
                    if cached.as_ref().is_none_or(|(b, _)| *b != cb) {
                        // Rows of `out` in this column block are contiguous (row order).
                        let last = out
                            .get(k..)
                            .unwrap_or(&[])
                            .iter()
                            .take_while(|(r, _)| *r / span == cb)
                            .last()
                            .map_or(row, |(r, _)| *r);
                        let want = (row - cb * span) as usize..(last - cb * span) as usize + 1;
                        cached = Some((cb, self.decode_extra_block(e as u32, cb as u32, want)?));
                    }
                    let Some((row, p)) = out.get_mut(k) else {
                        break;
                    };
                    let value = cached
                        .as_ref()
                        .and_then(|(_, vals)| vals.get((*row - cb * span) as usize))
                        .and_then(Option::as_ref);
                    if let Some(v) = value {
                        p.extras.push((info.name.clone(), v.clone()));
                    }
                }
            }
            Ok(out.into_iter().map(|(_, p)| p).collect())
        })
    }

    /// The extra (keyword/boolean) fields of `row`, by name; empty when the segment has
    /// no extra column.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn row_extras(&self, row: RowId) -> Result<Vec<(String, Extra)>> {
        self.named(|| {
            let mut out = Vec::new();
            let base = self.meta.columns.len() as u32 + 1;
            for (e, info) in self.meta.extras.iter().enumerate() {
                let span = self.column_span_rows(base + e as u32).unwrap_or(1).max(1);
                let block = (row / span) as u32;
                let i = (row - u64::from(block) * span) as usize;
                let values = self.decode_extra_block(e as u32, block, i..i + 1)?;
                if let Some(Some(v)) = values.get(i) {
                    out.push((info.name.clone(), v.clone()));
                }
            }
            Ok(out)
        })
    }
}
