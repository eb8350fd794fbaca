//! The read side of a store: live points over the partitions a time range overlaps (all
//! rows, or the series a segment's dimension index selects), label names and values,
//! and rollup rows of a planned [`Piece`]. Nothing here writes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tidemark_segment::{Dim, Point, RowId, Segment};
use tidemark_tsid::Tsid;

use super::manifest::PartState;
use super::{PartitionedEngine, Piece, Postings, RollupStats, dim_value_text, rollup};
use crate::engine::Engine;
use crate::error::Result;

impl PartitionedEngine {
    /// The engines of the live partitions overlapping `[from, to]`, oldest first.
    pub(crate) fn engines_overlapping(&self, from: i64, to: i64) -> impl Iterator<Item = &Engine> {
        self.parts
            .values()
            .filter(move |p| p.end > from && p.start <= to)
            .map(|p| &p.engine)
    }

    /// The one scan behind the `scan_live*` variants: [`Engine::scan_live_selected`] over
    /// the partitions overlapping `[from, to]`, oldest first (`select` answering `None`
    /// reads a segment's series through `keep_series`).
    fn scan_selected(
        &self,
        from: i64,
        to: i64,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut select: impl FnMut(&Path, &Segment) -> Option<roaring::RoaringBitmap>,
        mut f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        for engine in self.engines_overlapping(from, to) {
            engine.scan_live_selected(from, to, &mut keep_series, &mut select, &mut f)?;
        }
        Ok(())
    }

    /// The dimension index of a live segment (cached).
    pub fn postings(&self, path: &Path, segment: &Segment) -> Arc<Postings> {
        let mut cache = match self.postings.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(p) = cache.get(path) {
            return p.clone();
        }
        // Segments replaced by merges or dropped by retention leave the cache here.
        if cache.len() > 4 * self.segment_count().max(16) {
            let live: HashSet<&Path> = self.segments().iter().map(|(p, _, _)| *p).collect();
            cache.retain(|p, _| live.contains(p.as_path()));
        }
        let p = Arc::new(Postings::build(segment));
        cache.insert(path.to_path_buf(), p.clone());
        p
    }

    /// [`Engine::scan_live`] over the partitions overlapping `[from, to]`, oldest first.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn scan_live(
        &self,
        from: i64,
        to: i64,
        keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        self.scan_selected(from, to, keep_series, |_, _| None, f)
    }

    /// As [`scan_live`](Self::scan_live), with each segment's series chosen through its
    /// dimension index by `select` (only their rows are read); buffered points are
    /// chosen by `keep_series`, which must agree with `select`.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn scan_live_indexed(
        &self,
        from: i64,
        to: i64,
        keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut select: impl FnMut(&Postings) -> roaring::RoaringBitmap,
        f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        self.scan_selected(
            from,
            to,
            keep_series,
            |path, seg| Some(select(&self.postings(path, seg))),
            f,
        )
    }

    /// As [`scan_live_indexed`](Self::scan_live_indexed), with `select` also given the
    /// segment, whose series table (in tsid order) maps the chosen ordinals to tsids
    /// and series time ranges: a caller can choose series by tsid as well as by
    /// dimension (a bounded group of series per call, so a long range is read one group
    /// at a time), or only note the selected series and return an empty bitmap (then no
    /// row is read). Buffered points are chosen by `keep_series`, which must agree.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn scan_live_indexed_segments(
        &self,
        from: i64,
        to: i64,
        keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut select: impl FnMut(&Postings, &Segment) -> roaring::RoaringBitmap,
        f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        self.scan_selected(
            from,
            to,
            keep_series,
            |path, seg| Some(select(&self.postings(path, seg), seg)),
            f,
        )
    }

    /// The dimension names of the series with data in `[from, to]` (segments through
    /// their dimension indexes, buffered points directly).
    ///
    /// # Errors
    /// Segment read errors.
    pub fn label_names(&self, from: i64, to: i64) -> Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        let mut buffered = BTreeSet::new();
        self.each_label(
            from,
            to,
            &mut |p| out.extend(p.names().map(str::to_owned)),
            &mut |dims| buffered.extend(dims.iter().map(|(n, _)| n.clone())),
        )?;
        out.append(&mut buffered);
        Ok(out)
    }

    /// The values of dimension `name` in `[from, to]`, each with the number of series
    /// (per segment, summed) that have it.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn label_values(&self, name: &str, from: i64, to: i64) -> Result<BTreeMap<String, u64>> {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        let mut buffered: HashSet<Tsid> = HashSet::new();
        let mut seg = |p: &Postings| {
            for (v, n) in p.values(name) {
                *out.entry(v.to_owned()).or_insert(0) += n;
            }
        };
        let mut buf_values: Vec<String> = Vec::new();
        let mut buf = |dims: &[(String, Dim)]| {
            if let Some((_, d)) = dims.iter().find(|(n, _)| n == name) {
                buf_values.push(dim_value_text(d));
            }
        };
        self.each_label_series(from, to, &mut seg, &mut buf, &mut buffered)?;
        for v in buf_values {
            *out.entry(v).or_insert(0) += 1;
        }
        Ok(out)
    }

    fn each_label(
        &self,
        from: i64,
        to: i64,
        seg: &mut dyn FnMut(&Postings),
        buf: DimsSink<'_>,
    ) -> Result<()> {
        let mut seen = HashSet::new();
        self.each_label_series(from, to, seg, buf, &mut seen)
    }

    /// Calls `seg` for the index of each live segment overlapping `[from, to]` and `buf`
    /// once per buffered series with points in the range.
    fn each_label_series(
        &self,
        from: i64,
        to: i64,
        seg: &mut dyn FnMut(&Postings),
        buf: DimsSink<'_>,
        seen: &mut HashSet<Tsid>,
    ) -> Result<()> {
        for engine in self.engines_overlapping(from, to) {
            for (path, segment, _) in engine.segments() {
                let overlaps = segment.min_timestamp().is_some_and(|lo| lo <= to)
                    && segment.max_timestamp().is_some_and(|hi| hi >= from);
                if overlaps {
                    seg(&self.postings(path, segment));
                }
            }
            if engine.buffered() > 0 {
                // Segments answer `None`: nothing of them is read twice (the buffered
                // series are listed once).
                engine.scan_live_selected(
                    from,
                    to,
                    |t, dims| {
                        if seen.insert(*t) {
                            buf(dims);
                        }
                        false
                    },
                    |_, _| Some(roaring::RoaringBitmap::new()),
                    |_, _| {},
                )?;
            }
        }
        // Past the raw retention, the series are those of a kept rollup (the same
        // dimensions, one row per series and bucket).
        for p in self.expired.values() {
            if p.end <= from || p.start > to {
                continue;
            }
            let finest = p
                .rollups
                .iter()
                .find_map(|(r, s)| s.as_ref().map(|s| (*r, s)));
            if let Some((r, segment)) = finest {
                let lo = from.div_euclid(r) * r;
                let overlaps = segment.min_timestamp().is_some_and(|a| a <= to)
                    && segment.max_timestamp().is_some_and(|b| b >= lo);
                if overlaps {
                    seg(&self.postings(&rollup::rollup_path(&p.dir, r), segment));
                }
            }
        }
        Ok(())
    }

    /// The rollup segment at `resolution_ms` of the partition starting at `partition`
    /// (sealed, or past the raw retention and keeping it), with its file.
    pub fn rollup_of(&self, partition: i64, resolution_ms: i64) -> Option<(PathBuf, &Segment)> {
        let (dir, rollups) = match self.parts.get(&partition) {
            Some(p) if p.state == PartState::Sealed => (&p.dir, &p.rollups),
            Some(_) => return None,
            None => {
                let p = self.expired.get(&partition)?;
                (&p.dir, &p.rollups)
            }
        };
        let (_, seg) = rollups.iter().find(|(r, _)| *r == resolution_ms)?;
        seg.as_deref()
            .map(|s| (rollup::rollup_path(dir, resolution_ms), s))
    }

    /// The rollup segment a [`Piece::Rollup`] reads, with its path and the piece's time
    /// range; `None` for another piece or a rollup no longer there.
    fn rollup_piece(&self, piece: &Piece) -> Option<(PathBuf, &Segment, i64, i64)> {
        let Piece::Rollup {
            partition,
            resolution_ms,
            from,
            to,
        } = *piece
        else {
            return None;
        };
        let (path, seg) = self.rollup_of(partition, resolution_ms)?;
        Some((path, seg, from, to))
    }

    /// Reads whole rollup rows of a [`Piece::Rollup`] (every metric, and the row count):
    /// `f` per series and bucket, in (tsid, bucket) order, for the series `select`
    /// picks through the rollup segment's dimension index and `keep_series` accepts. A
    /// piece whose partition or rollup is gone reads nothing.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn scan_rollup_rows(
        &self,
        piece: &Piece,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        select: impl FnOnce(&Postings) -> roaring::RoaringBitmap,
        mut f: impl FnMut(RollupRow<'_>),
    ) -> Result<()> {
        let Some((path, seg, from, to)) = self.rollup_piece(piece) else {
            return Ok(());
        };
        let chosen = select(&self.postings(&path, seg));
        let cols = rollup::RowColumns::of(seg);
        let series = seg.series();
        let kept: Vec<usize> = chosen
            .iter()
            .map(|ord| ord as usize)
            .filter(|&i| {
                series.get(i).is_some_and(|s| {
                    s.max_ts >= from && s.min_ts <= to && keep_series(&s.tsid, &s.dims)
                })
            })
            .collect();
        // One decoded block kept across series (neighbours share blocks).
        seg.scan_series_many(kept, from, to, |rv| {
            let (doc_count, metrics) = cols.read(rv.metrics);
            f(RollupRow {
                tsid: &rv.series.tsid,
                dims: &rv.series.dims,
                bucket_ms: rv.ts_millis,
                doc_count,
                metrics,
            });
        })?;
        Ok(())
    }

    /// Reads the rollup rows of a [`Piece::Rollup`] for `metric`: `f(tsid, dims, bucket
    /// start, stats)` per series and bucket, in (tsid, bucket) order, for the series
    /// `keep_series` accepts. A piece whose partition or rollup is gone reads nothing.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn scan_rollup(
        &self,
        piece: &Piece,
        metric: &str,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut f: impl FnMut(&Tsid, &[(String, Dim)], i64, RollupStats),
    ) -> Result<()> {
        let Some((_, seg, from, to)) = self.rollup_piece(piece) else {
            return Ok(());
        };
        let cols = rollup::StatColumns::of(seg, metric);
        let mut verdict: Option<(u64, bool)> = None;
        seg.scan_time_range(from, to, |rv| {
            let keep = match verdict {
                Some((first, k)) if first == rv.series.first_row => k,
                _ => {
                    let k = keep_series(&rv.series.tsid, &rv.series.dims);
                    verdict = Some((rv.series.first_row, k));
                    k
                }
            };
            if keep && let Some(s) = cols.read(rv.metrics) {
                f(&rv.series.tsid, &rv.series.dims, rv.ts_millis, s);
            }
        })?;
        Ok(())
    }
}

/// One row of a rollup (a series and bucket), as
/// [`PartitionedEngine::scan_rollup_rows`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RollupRow<'a> {
    /// The series.
    pub tsid: &'a Tsid,
    /// Its dimensions.
    pub dims: &'a [(String, Dim)],
    /// The bucket start.
    pub bucket_ms: i64,
    /// Raw rows in the bucket (`None`: a rollup built before this count was kept).
    pub doc_count: Option<u64>,
    /// The stats of each metric with values in the bucket, by name.
    pub metrics: Vec<(String, RollupStats)>,
}

/// A callback given a series' dimensions.
type DimsSink<'a> = &'a mut dyn FnMut(&[(String, Dim)]);
