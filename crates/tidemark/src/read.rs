//! The façade's read side: which series have data in a range, their samples as column
//! slices, and the read plan over raw rows and rollups (see docs/architecture.md, "The
//! read path"). PromQL and the Elasticsearch queries read through these, not through the
//! engine.

use roaring::RoaringBitmap;
use tidemark_dedup::{Piece, Postings, RollupRow};
use tidemark_segment::Dim;
use tidemark_tsid::Tsid;

use crate::error::Result;
use crate::index::Index;

/// The step a read plan's rollups must divide so that every rollup bucket read lies
/// whole inside one bucket of each of `widths` (histogram intervals, window ranges,
/// window ends): their greatest common divisor, by magnitude. `None` when it is 0 (no
/// width, or only zeros): then only raw rows answer. The one alignment rule of the
/// rollup planner ([`Index::read_plan`]), for the Elasticsearch aggregations and
/// PromQL's windows alike.
pub fn rollup_step(widths: impl IntoIterator<Item = i64>) -> Option<i64> {
    let mut g = 0u64;
    for w in widths {
        let (mut a, mut b) = (g, w.unsigned_abs());
        while b != 0 {
            (a, b) = (b, a % b);
        }
        g = a;
    }
    i64::try_from(g).ok().filter(|g| *g > 0)
}

/// The time a piece covers, `[from, to]` inclusive.
fn piece_range(piece: &Piece) -> (i64, i64) {
    match *piece {
        Piece::Raw { from, to } | Piece::Rollup { from, to, .. } | Piece::Expired { from, to } => {
            (from, to)
        }
    }
}

/// The [`Piece::Expired`] ranges of a plan, `[from, to]` inclusive, in time order.
pub fn expired_pieces(pieces: &[Piece]) -> Vec<(i64, i64)> {
    pieces
        .iter()
        .filter_map(|p| match *p {
            Piece::Expired { from, to } => Some((from, to)),
            _ => None,
        })
        .collect()
}

/// One visit of [`Index::select_series`]: a series a live segment holds, or the
/// series of one buffered document.
#[derive(Debug, Clone, Copy)]
pub struct SeriesHit<'a> {
    /// The series id.
    pub tsid: &'a tidemark_tsid::Tsid,
    /// Its dimensions, sorted by name.
    pub dims: &'a [(String, tidemark_segment::Dim)],
    /// Its rows in that segment (1 for a buffered document).
    pub rows: u64,
}

impl Index {
    /// Visits the series with data in `from..=to` without reading a row: from each live
    /// segment, the series whose ordinals `select` picks from the segment's dimension
    /// index (cached per segment) and whose time range overlaps, once per segment
    /// holding them, with their rows there; from the buffer, the series of each
    /// buffered document in range, with one row. A series may be visited several
    /// times (the caller keeps the first, or adds the rows up).
    ///
    /// # Errors
    /// Segment read errors.
    pub fn select_series(
        &self,
        from: i64,
        to: i64,
        mut select: impl FnMut(&tidemark_dedup::Postings) -> roaring::RoaringBitmap,
        visit: impl FnMut(SeriesHit<'_>),
    ) -> Result<()> {
        let visit = std::cell::RefCell::new(visit);
        self.engine().search(from, to).series_indexed(
            |tsid, dims| {
                (visit.borrow_mut())(SeriesHit {
                    tsid,
                    dims,
                    rows: 1,
                });
                false
            },
            |p, seg| {
                for ord in &select(p) {
                    let Some(s) = seg.series().get(ord as usize) else {
                        continue;
                    };
                    if s.max_ts < from || s.min_ts > to {
                        continue;
                    }
                    (visit.borrow_mut())(SeriesHit {
                        tsid: &s.tsid,
                        dims: &s.dims,
                        rows: s.row_count,
                    });
                }
                roaring::RoaringBitmap::new()
            },
            |_, _| {},
        )?;
        Ok(())
    }

    /// A reader of the metric fields `fields` (by path) over `from..=to` (inclusive,
    /// milliseconds): for each series asked (by tsid, ascending for best effect), its
    /// samples per field as timestamp and value slices, across partitions, segments and
    /// the buffer, sorted and unique (see [`SeriesReader`](tidemark_dedup::SeriesReader)).
    /// One per reading thread; the index's read lock must be held while it is used.
    pub fn series_reader(
        &self,
        from: i64,
        to: i64,
        fields: &[&str],
    ) -> tidemark_dedup::SeriesReader<'_> {
        self.engine().search(from, to).series_reader(fields)
    }

    /// The read plan of `[from, to]` (inclusive, milliseconds) for buckets of
    /// `interval_ms` (0: raw rows only): in time order, the pieces raw rows answer, the
    /// sealed partitions' rollup buckets whose resolution divides the interval, and the
    /// time whose raw rows retention dropped that no kept rollup answers
    /// ([`Piece::Expired`]).
    pub fn read_plan(&self, from: i64, to: i64, interval_ms: i64) -> Vec<Piece> {
        self.engine().search(from, to).plan(interval_ms)
    }

    /// The sealed partitions, oldest first, each readable as a whole in segment order
    /// (what `tidemark-lake` exports): see
    /// [`SealedPartition`](tidemark_dedup::SealedPartition). Empty for an index without
    /// time partitions. Each is a snapshot (shared segment files, copied tombstones),
    /// readable after the index's lock is released: a late write or retention meanwhile
    /// changes the index, never the snapshot.
    ///
    /// # Errors
    /// A sealed partition that is not merged into one segment.
    pub fn sealed_partitions(&self) -> Result<Vec<tidemark_dedup::SealedPartition>> {
        Ok(self.engine().sealed_partitions()?)
    }

    /// The first range in `[from, to]` (inclusive) whose raw rows retention dropped and
    /// no kept rollup answers at raw resolution, if any.
    pub fn first_expired(&self, from: i64, to: i64) -> Option<(i64, i64)> {
        self.expired_in(from, to).into_iter().next()
    }

    /// The ranges in `[from, to]` (inclusive), in time order, whose raw rows retention
    /// dropped and no kept rollup answers at raw resolution: what a raw read of the
    /// range leaves out.
    pub(crate) fn expired_in(&self, from: i64, to: i64) -> Vec<(i64, i64)> {
        expired_pieces(&self.read_plan(from, to, 0))
    }

    /// The partitions whose raw rows retention dropped (they keep only rollups), as
    /// `[start, end]` inclusive millisecond ranges in time order.
    pub fn raw_expired_partitions(&self) -> Vec<(i64, i64)> {
        // An attached partition (a lake's cache) holds the raw rows again.
        let attached = self.engine().attached_readable();
        self.engine()
            .partitions()
            .into_iter()
            .filter(|p| p.raw_expired && !attached.contains(&p.start_ms))
            .map(|p| (p.start_ms, p.end_ms.saturating_sub(1)))
            .collect()
    }

    /// Whether the rollup a [`Piece::Rollup`] reads counts its raw rows per bucket
    /// (rollups built before that count was kept do not; their doc counts must come
    /// from raw rows). False for any other piece.
    pub fn rollup_counts_rows(&self, piece: &Piece) -> bool {
        let Piece::Rollup {
            partition,
            resolution_ms,
            ..
        } = *piece
        else {
            return false;
        };
        self.engine()
            .rollup_of(partition, resolution_ms)
            .is_some_and(|(_, s)| {
                s.columns()
                    .iter()
                    .any(|c| c.name == tidemark_dedup::DOC_COUNT_COLUMN)
            })
    }

    /// Reads the rows of a [`Piece::Rollup`] of [`read_plan`](Self::read_plan): `visit`
    /// per series and bucket, in (tsid, bucket) order, for the series `select` picks
    /// from the rollup segment's dimension index and `keep_series` accepts. Any other
    /// piece, or one whose partition or rollup is gone, reads nothing.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn read_rollup(
        &self,
        piece: &Piece,
        keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        select: impl FnOnce(&Postings) -> RoaringBitmap,
        visit: impl FnMut(RollupRow<'_>),
    ) -> Result<()> {
        let (from, to) = piece_range(piece);
        Ok(self
            .engine()
            .search(from, to)
            .rollup_rows(piece, keep_series, select, visit)?)
    }
}

#[cfg(test)]
mod tests {
    use super::rollup_step;

    #[test]
    fn the_rollup_step_is_the_gcd_of_the_widths() {
        assert_eq!(rollup_step([60_000, 3_600_000]), Some(60_000));
        assert_eq!(
            rollup_step([300_000, 86_400_000, 7 * 86_400_000]),
            Some(300_000)
        );
        // Window ends may be negative or zero; the range keeps the step positive.
        assert_eq!(rollup_step([600_000, -1_200_000, 0]), Some(600_000));
        assert_eq!(rollup_step([45_000, 60_000]), Some(15_000));
        assert_eq!(rollup_step([]), None);
        assert_eq!(rollup_step([0, 0]), None);
        assert_eq!(rollup_step([i64::MIN]), None);
        assert_eq!(rollup_step([i64::MIN, 6]), Some(2));
    }
}
