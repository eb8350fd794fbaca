//! [`RowCursor`]: a segment's live rows in row order, block by block, for streaming
//! merges.

use roaring::RoaringBitmap;

use super::Segment;
use crate::error::{Error, Place, Result};
use crate::format::blocks::DecodedBlock;
use crate::format::series::Series;
use crate::point::{Extra, MetricValue, RowId};

/// A cursor over a segment's rows in row order — (tsid, timestamp) order — skipping the
/// rows of a tombstone set. Each block is decoded once as the cursor enters it, and a
/// block whose rows are all dead is skipped undecoded, so a pass over a segment holds one
/// block per column in memory. Made by [`Segment::cursor`]; drives streaming merges.
#[derive(Debug)]
pub struct RowCursor<'a> {
    seg: &'a Segment,
    dead: Option<&'a RoaringBitmap>,
    /// The current row (`row_count` once exhausted).
    row: u64,
    started: bool,
    block: DecodedBlock,
    /// Per extra column, its decoded column block.
    extras: Vec<(Option<u32>, Vec<Option<Extra>>)>,
    /// Index of the series holding `row`.
    series: usize,
}

impl Segment {
    /// A cursor over the rows not in `dead` (row numbers of this segment), in row order.
    /// Call [`RowCursor::advance`] to reach the first row.
    pub fn cursor<'a>(&'a self, dead: Option<&'a RoaringBitmap>) -> RowCursor<'a> {
        RowCursor {
            seg: self,
            dead,
            row: 0,
            started: false,
            block: DecodedBlock::default(),
            extras: Vec::new(),
            series: 0,
        }
    }
}

impl<'a> RowCursor<'a> {
    /// Moves to the next live row (the first on the first call); `false` at the end.
    ///
    /// # Errors
    /// Format errors of the blocks read, naming the segment.
    pub fn advance(&mut self) -> Result<bool> {
        self.seg.named(|| {
            let seg = self.seg;
            let n = seg.footer.row_count;
            let br = u64::from(seg.footer.block_rows).max(1);
            let mut next = if self.started {
                self.row.saturating_add(1)
            } else {
                0
            };
            self.started = true;
            loop {
                if next >= n {
                    self.row = n;
                    return Ok(false);
                }
                let b = next / br;
                if self.block.block != Some(b as u32) {
                    let (lo, hi) = (next, ((b + 1) * br).min(n));
                    if let (Some(dead), Ok(l), Ok(h)) =
                        (self.dead, u32::try_from(lo), u32::try_from(hi))
                    {
                        if dead.range_cardinality(l..h) == hi - lo {
                            next = hi;
                            continue;
                        }
                    }
                    // Format 3 lays blocks out in row order: every block before this
                    // one's timestamps covers earlier rows only, and is done with.
                    if let Ok(r) = seg.block_ref(0, b as u32) {
                        seg.release_before(r.offset);
                    }
                    seg.decode_block(b as u32, &mut self.block)?;
                }
                if self
                    .dead
                    .is_some_and(|d| next <= u64::from(u32::MAX) && d.contains(next as u32))
                {
                    next += 1;
                    continue;
                }
                break;
            }
            self.row = next;
            while seg
                .series
                .get(self.series)
                .is_some_and(|s| s.first_row + s.row_count <= next)
            {
                self.series += 1;
            }
            if self.series >= seg.series.len() {
                return Err(Error::corrupt(
                    Place::SeriesTable,
                    format!("row {next} belongs to no series"),
                ));
            }
            // Extra columns: the block holding this row, decoded once.
            let base = seg.meta.columns.len() as u32 + 1;
            self.extras
                .resize_with(seg.meta.extras.len(), || (None, Vec::new()));
            for (e, (cached, values)) in self.extras.iter_mut().enumerate() {
                let span = seg.column_span_rows(base + e as u32).unwrap_or(1).max(1);
                let cb = (next / span) as u32;
                if *cached != Some(cb) {
                    *cached = None;
                    let rows = seg.rows_in(base + e as u32, cb);
                    *values = seg.decode_extra_block(e as u32, cb, 0..rows)?;
                    *cached = Some(cb);
                }
            }
            Ok(true)
        })
    }

    /// The current row and the live rows after it that stay in its block and its series,
    /// cut at the first timestamp not below `below` (no cut when `None`): their timestamps
    /// and their metric values, row-major, one per column of [`Segment::columns`] per row.
    /// Empty once the cursor is exhausted. A merge copies such a run with one
    /// [`SegmentStreamWriter::push_rows`](crate::SegmentStreamWriter::push_rows) and
    /// moves past it with [`skip`](Self::skip).
    pub fn run(&self, below: Option<i64>) -> (&[i64], &[Option<MetricValue>]) {
        let seg = self.seg;
        let n = seg.footer.row_count;
        if !self.started || self.row >= n {
            return (&[], &[]);
        }
        let br = u64::from(seg.footer.block_rows).max(1);
        let block_end = ((self.row / br).saturating_add(1))
            .saturating_mul(br)
            .min(n);
        let series_end = seg
            .series
            .get(self.series)
            .map_or(self.row, |s| s.first_row.saturating_add(s.row_count));
        let mut end = block_end.min(series_end);
        if let (Some(dead), Ok(r)) = (self.dead, u32::try_from(self.row)) {
            // The current row is live, so the dead rows up to it are those before it, and
            // the next one in the set is the first dead row after it.
            let before = u32::try_from(dead.rank(r)).unwrap_or(u32::MAX);
            if let Some(d) = dead.select(before) {
                end = end.min(u64::from(d));
            }
        }
        let i = (self.row % br) as usize;
        let len = end.saturating_sub(self.row) as usize;
        let ts = self.block.ts.get(i..i + len).unwrap_or(&[]);
        let len = below.map_or(ts.len(), |b| ts.partition_point(|&t| t < b));
        let ncols = seg.meta.columns.len();
        (
            ts.get(..len).unwrap_or(&[]),
            self.block
                .metrics
                .get(i * ncols..(i + len) * ncols)
                .unwrap_or(&[]),
        )
    }

    /// Moves past the first `rows` rows of [`run`](Self::run)`(None)` (at most all of
    /// them), as that many calls of [`advance`](Self::advance) would; `false` at the end.
    ///
    /// # Errors
    /// As [`advance`](Self::advance).
    pub fn skip(&mut self, rows: usize) -> Result<bool> {
        let rows = rows.min(self.run(None).0.len());
        if rows > 1 {
            self.row += rows as u64 - 1;
        }
        if rows == 0 {
            return Ok(self.started && self.row < self.seg.footer.row_count);
        }
        self.advance()
    }

    /// The current row's number.
    pub fn row(&self) -> RowId {
        self.row
    }

    /// Index (in [`Segment::series`]) of the current row's series.
    pub fn series_index(&self) -> usize {
        self.series
    }

    /// The current row's series.
    pub fn series(&self) -> Option<&'a Series> {
        self.seg.series.get(self.series)
    }

    /// The current row's timestamp.
    pub fn ts_millis(&self) -> i64 {
        let br = u64::from(self.seg.footer.block_rows).max(1);
        let i = (self.row % br) as usize;
        self.block.ts.get(i).copied().unwrap_or(0)
    }

    /// The current row's metric values, one per column of [`Segment::columns`].
    pub fn metrics(&self) -> &[Option<MetricValue>] {
        let br = u64::from(self.seg.footer.block_rows).max(1);
        let ncols = self.seg.meta.columns.len();
        let i = (self.row % br) as usize;
        self.block
            .metrics
            .get(i * ncols..(i + 1) * ncols)
            .unwrap_or(&[])
    }

    /// The current row's value of extra column `extra` (index in
    /// [`Segment::extra_columns`]).
    pub fn extra(&self, extra: usize) -> Option<&Extra> {
        let base = self.seg.meta.columns.len() as u32 + 1;
        let span = self
            .seg
            .column_span_rows(base + extra as u32)
            .unwrap_or(1)
            .max(1);
        let (_, values) = self.extras.get(extra)?;
        values.get((self.row % span) as usize)?.as_ref()
    }
}
