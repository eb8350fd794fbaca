//! Scans: every row of a range, of a time range or of some series, handed to a callback
//! as a borrowed [`RowView`].

use std::ops::Range;

use tidemark_tsid::Tsid;

use super::Segment;
use crate::error::Result;
use crate::format::blocks::DecodedBlock;
use crate::format::series::Series;
use crate::point::{MetricValue, RowId};

/// A row as seen during a scan: borrowed, no allocation per row.
#[derive(Debug, Clone, Copy)]
pub struct RowView<'a> {
    /// Row number.
    pub row: RowId,
    /// The row's series.
    pub series: &'a Series,
    /// Timestamp in milliseconds.
    pub ts_millis: i64,
    /// One entry per metric column (see [`Segment::columns`]), `None` where absent.
    pub metrics: &'a [Option<MetricValue>],
}

impl Segment {
    /// Calls `f` for every row in `rows` (clamped to the segment), in row order.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn scan_rows(&self, rows: Range<RowId>, mut f: impl FnMut(RowView<'_>)) -> Result<()> {
        self.named(|| {
            let mut block = DecodedBlock::default();
            self.scan_filtered(rows, i64::MIN, i64::MAX, &mut block, &mut f)
        })
    }

    /// Calls `f` for every row whose timestamp is in `from..=to`, in row order.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn scan_time_range(
        &self,
        from: i64,
        to: i64,
        mut f: impl FnMut(RowView<'_>),
    ) -> Result<()> {
        self.named(|| {
            let mut block = DecodedBlock::default();
            if self.row_count() == 0 || to < self.footer.min_ts || from > self.footer.max_ts {
                return Ok(());
            }
            for s in &self.series {
                self.scan_in_series(s, from, to, &mut block, &mut f)?;
            }
            Ok(())
        })
    }

    /// Calls `f` for every row of series `tsid` whose timestamp is in `from..=to`.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn scan_series(
        &self,
        tsid: &Tsid,
        from: i64,
        to: i64,
        mut f: impl FnMut(RowView<'_>),
    ) -> Result<()> {
        self.named(|| {
            let Some(s) = self.series_by_tsid(tsid) else {
                return Ok(());
            };
            let mut block = DecodedBlock::default();
            self.scan_in_series(s, from, to, &mut block, &mut f)
        })
    }

    /// As [`scan_series`](Self::scan_series) for several series, given by their indices
    /// in [`series`](Self::series) (ascending for best effect): one decoded block is kept
    /// across them, so neighbouring series that share a row block decode it once
    /// instead of once each. Indices out of range are skipped.
    ///
    /// # Errors
    /// As [`scan_series`](Self::scan_series).
    pub fn scan_series_many(
        &self,
        indices: impl IntoIterator<Item = usize>,
        from: i64,
        to: i64,
        mut f: impl FnMut(RowView<'_>),
    ) -> Result<()> {
        self.named(|| {
            let mut block = DecodedBlock::default();
            for i in indices {
                if let Some(s) = self.series.get(i) {
                    self.scan_in_series(s, from, to, &mut block, &mut f)?;
                }
            }
            Ok(())
        })
    }

    /// Visits the rows of series `s` whose timestamp is in `from..=to`; none, without a
    /// block decoded, when the series' time range misses it.
    fn scan_in_series(
        &self,
        s: &Series,
        from: i64,
        to: i64,
        block: &mut DecodedBlock,
        f: &mut impl FnMut(RowView<'_>),
    ) -> Result<()> {
        if s.max_ts < from || s.min_ts > to {
            return Ok(());
        }
        self.scan_filtered(s.first_row..s.first_row + s.row_count, from, to, block, f)
    }

    /// Visits rows of `rows` whose timestamp is in `from..=to`. Blocks whose rows all fall
    /// outside the range are skipped after decoding their timestamps only. When `rows` is
    /// one series (timestamps ascending), the scan stops past `to`.
    pub(super) fn scan_filtered(
        &self,
        rows: Range<RowId>,
        from: i64,
        to: i64,
        block: &mut DecodedBlock,
        f: &mut impl FnMut(RowView<'_>),
    ) -> Result<()> {
        let end = rows.end.min(self.footer.row_count);
        let br = u64::from(self.footer.block_rows);
        let ncols = self.meta.columns.len();
        let one_series = self
            .series_of_row(rows.start)
            .map(|s| s.first_row + s.row_count)
            >= Some(end);
        let mut row = rows.start;
        while row < end {
            let b = row / br;
            if block.block != Some(b as u32) {
                block.fill_timestamps(b as u32, |ts| self.decode_ts_block(b as u32, ts))?;
            }
            let block_end = ((b + 1) * br).min(end);
            let local = (row - b * br) as usize..(block_end - b * br) as usize;
            let in_block = block.ts.get(local).unwrap_or(&[]);
            if one_series && in_block.first().is_some_and(|&t| t > to) {
                return Ok(());
            }
            if !in_block.iter().any(|&t| t >= from && t <= to) {
                row = block_end;
                continue;
            }
            if block.metrics_block != Some(b as u32) {
                self.decode_block_metrics(b as u32, block)?;
            }
            let mut series = self.series_of_row(row);
            while row < block_end {
                let i = (row - b * br) as usize;
                let (Some(&ts), Some(s)) = (block.ts.get(i), series) else {
                    break;
                };
                if row >= s.first_row + s.row_count {
                    series = self.series_of_row(row);
                    continue;
                }
                if ts >= from && ts <= to {
                    let metrics = block.metrics.get(i * ncols..(i + 1) * ncols).unwrap_or(&[]);
                    f(RowView {
                        row,
                        series: s,
                        ts_millis: ts,
                        metrics,
                    });
                }
                row += 1;
            }
            row = row.max(block_end);
        }
        Ok(())
    }
}
