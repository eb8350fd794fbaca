//! Blocks: where each column's blocks are (the directory), and their decoding into
//! timestamps, metric and extra values.

use super::Segment;
use crate::error::{Error, Place, Result};
use crate::format::blocks::{self, BlockAt, DecodedBlock};
use crate::format::directory::{self, BlockRef};
use crate::format::section_bytes;
use crate::point::{Extra, ExtraKind, MetricKind, MetricValue};

impl Segment {
    /// The directory entry of `column` (0 = timestamps) in row block `block`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for a column or block beyond the segment.
    pub fn block_ref(&self, column: u32, block: u32) -> Result<BlockRef> {
        let place = Place::Block { column, block };
        let Some(l) = self
            .layout
            .get(column as usize)
            .filter(|l| block < l.blocks)
        else {
            return Err(Error::OutOfBounds {
                place,
                offset: u64::from(block),
                len: 1,
                start: 0,
                end: self.column_block_count(column).map_or(0, u64::from),
            });
        };
        let dir = section_bytes(self.bytes(), &self.footer, 2)?;
        directory::entry(dir, l.first_entry + u64::from(block))
    }

    /// Number of blocks of column number `column` (0 = timestamps).
    pub fn column_block_count(&self, column: u32) -> Option<u32> {
        self.layout.get(column as usize).map(|l| l.blocks)
    }

    /// Rows spanned by each block of column number `column` (0 = timestamps).
    pub fn column_span_rows(&self, column: u32) -> Option<u64> {
        self.layout.get(column as usize).map(|l| l.span)
    }

    /// Rows `lo..hi` of block `block` of column number `column`.
    fn block_rows_range(&self, column: u32, block: u32) -> (u64, u64) {
        let span = self
            .layout
            .get(column as usize)
            .map_or(u64::from(self.footer.block_rows), |l| l.span);
        let lo = u64::from(block).saturating_mul(span);
        (
            lo.min(self.footer.row_count),
            self.footer.row_count.min(lo.saturating_add(span)),
        )
    }

    pub(super) fn rows_in(&self, column: u32, block: u32) -> usize {
        let (lo, hi) = self.block_rows_range(column, block);
        (hi - lo) as usize
    }

    /// Block `block` of column number `column`, located for the decoders of
    /// [`blocks`]: its directory entry and the rows it covers.
    pub(super) fn block_at(&self, column: u32, block: u32) -> Result<BlockAt<'_>> {
        let (lo, hi) = self.block_rows_range(column, block);
        Ok(BlockAt {
            file: self.bytes(),
            entry: self.block_ref(column, block)?,
            place: Place::Block { column, block },
            lo,
            hi,
            series: &self.series,
        })
    }

    /// Appends the timestamps of row block `block` to `out`.
    pub(super) fn decode_ts_block(&self, block: u32, out: &mut Vec<i64>) -> Result<()> {
        blocks::timestamps(&self.block_at(0, block)?, out)
    }

    /// Decodes the timestamps of series `series` (index) within `block`.
    pub(super) fn decode_ts_run(
        &self,
        block: u32,
        series: usize,
        body: &mut Vec<u8>,
        out: &mut Vec<i64>,
    ) -> Result<()> {
        blocks::series_timestamps(&self.block_at(0, block)?, series, body, out)
    }

    /// Decodes metric column `column` (0-based) of `block` into `out`, one entry per row.
    fn decode_metric_block(
        &self,
        column: u32,
        block: u32,
        out: &mut Vec<Option<MetricValue>>,
    ) -> Result<()> {
        let kind = self
            .meta
            .columns
            .get(column as usize)
            .map_or(MetricKind::Gauge, |c| c.kind);
        blocks::metric_values(&self.block_at(column + 1, block)?, column, kind, out)
    }

    /// Decodes extra column `extra` (0-based) of its block `block`, one entry per row;
    /// only rows in `rows` (relative to the block) get their values, though every value
    /// is checked.
    pub(super) fn decode_extra_block(
        &self,
        extra: u32,
        block: u32,
        rows: std::ops::Range<usize>,
    ) -> Result<Vec<Option<Extra>>> {
        let index = self.meta.columns.len() as u32 + extra;
        let kind = self
            .meta
            .extras
            .get(extra as usize)
            .map_or(ExtraKind::Keyword, |e| e.kind);
        blocks::extra_values(&self.block_at(index + 1, block)?, index, kind, rows)
    }

    /// Decodes row block `block` (timestamps and metrics) into `out`.
    pub(super) fn decode_block(&self, block: u32, out: &mut DecodedBlock) -> Result<()> {
        out.fill_timestamps(block, |ts| self.decode_ts_block(block, ts))?;
        self.decode_block_metrics(block, out)
    }

    /// Decodes the metric columns of row block `block` (whose timestamps are in `out.ts`).
    pub(super) fn decode_block_metrics(&self, block: u32, out: &mut DecodedBlock) -> Result<()> {
        let block_rows = u64::from(self.footer.block_rows);
        let span = |c: usize| self.layout.get(c + 1).map_or(block_rows, |l| l.span);
        out.fill_metrics(
            block,
            u64::from(block) * block_rows,
            self.meta.columns.len(),
            span,
            |c, cb, values| self.decode_metric_block(c, cb, values),
        )
    }
}
