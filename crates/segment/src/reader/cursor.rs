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
