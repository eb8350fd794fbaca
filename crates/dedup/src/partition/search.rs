//! The read side of a store as its own type, beside the writer (as VictoriaMetrics
//! pairs `partition.go` with `partition_search.go`): a [`PartitionSearch`] is made with
//! what to read, a time range `[from, to]` (inclusive), and reads from the partitions
//! it overlaps: live points (all rows, or the series a segment's dimension index
//! selects), the series themselves without rows, label names and values, the read plan
//! over raw rows and rollups ([`PartitionSearch::plan`]), rollup rows of a planned
//! [`Piece`], and series as column slices ([`PartitionSearch::series_reader`]). Nothing
//! here writes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tidemark_segment::{Dim, Point, RowId, Segment};
use tidemark_tsid::Tsid;

use super::manifest::PartState;
use super::{PartitionedEngine, Piece, Postings, RollupStats, dim_value_text, rollup};
use crate::engine::Engine;
use crate::error::Result;
use crate::read::SeriesReader;

/// What a store holds over one time range `[from, to]` (milliseconds, both ends
/// inclusive), read partition by partition, oldest first: the read side of a
/// [`PartitionedEngine`], made by [`PartitionedEngine::search`]. It borrows the store,
/// so no write changes what it reads meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct PartitionSearch<'a> {
    pub(super) store: &'a PartitionedEngine,
    pub(super) from: i64,
    pub(super) to: i64,
}

impl PartitionedEngine {
    /// The read side of the store over `[from, to]` (inclusive, milliseconds).
    pub fn search(&self, from: i64, to: i64) -> PartitionSearch<'_> {
        PartitionSearch {
            store: self,
            from,
            to,
        }
    }

    /// The engines of the live partitions overlapping `[from, to]`, and of the attached
    /// ones reads see, oldest first.
    pub(crate) fn engines_overlapping(&self, from: i64, to: i64) -> impl Iterator<Item = &Engine> {
        let mut parts: Vec<&super::Part> = self
            .parts
            .values()
            .chain(self.readable_attached())
            .filter(move |p| p.end > from && p.start <= to)
            .collect();
        if !self.attached.is_empty() {
            parts.sort_by_key(|p| p.start);
        }
        parts.into_iter().map(|p| &p.engine)
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
            let live: HashSet<&Path> = self
                .segments()
                .into_iter()
                .chain(self.readable_attached().flat_map(|p| p.engine.segments()))
                .map(|(p, _, _)| p)
                .collect();
            cache.retain(|p, _| live.contains(p.as_path()));
        }
        let p = Arc::new(Postings::build(segment));
        cache.insert(path.to_path_buf(), p.clone());
        p
    }

    /// The rollup segment at `resolution_ms` of the partition starting at `partition`
    /// (sealed, or past the raw retention and keeping it), with its file.
    pub fn rollup_of(&self, partition: i64, resolution_ms: i64) -> Option<(PathBuf, &Segment)> {
        let live = self
            .parts
            .get(&partition)
            .or_else(|| self.readable_attached_at(partition));
        let (dir, rollups) = match live {
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
}

impl<'a> PartitionSearch<'a> {
    /// The range read, `(from, to)` inclusive.
    pub fn range(&self) -> (i64, i64) {
        (self.from, self.to)
    }

    /// The one scan behind [`rows`](Self::rows), [`rows_indexed`](Self::rows_indexed)
    /// and [`series_indexed`](Self::series_indexed): [`Engine::scan_live_selected`] over
    /// the partitions overlapping the range, oldest first (`select` answering `None`
    /// reads a segment's series through `keep_series`).
    fn scan_selected(
        &self,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut select: impl FnMut(&Path, &Segment) -> Option<roaring::RoaringBitmap>,
        mut f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        for engine in self.store.engines_overlapping(self.from, self.to) {
            engine.scan_live_selected(self.from, self.to, &mut keep_series, &mut select, &mut f)?;
        }
        Ok(())
    }

    /// The live rows in range of the series `keep_series` accepts ([`Engine::scan_live`]
    /// per partition), each with where it is stored.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn rows(
        &self,
        keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        self.scan_selected(keep_series, |_, _| None, f)
    }

    /// As [`rows`](Self::rows), with each segment's series chosen through its
    /// dimension index by `select` (only their rows are read); buffered points are
    /// chosen by `keep_series`, which must agree with `select`.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn rows_indexed(
        &self,
        keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut select: impl FnMut(&Postings) -> roaring::RoaringBitmap,
        f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        self.scan_selected(
            keep_series,
            |path, seg| Some(select(&self.store.postings(path, seg))),
            f,
        )
    }

    /// As [`rows_indexed`](Self::rows_indexed), with `select` also given the
    /// segment, whose series table (in tsid order) maps the chosen ordinals to tsids
    /// and series time ranges: a caller can choose series by tsid as well as by
    /// dimension (a bounded group of series per call, so a long range is read one group
    /// at a time), or only note the selected series and return an empty bitmap (then no
    /// row is read). Buffered points are chosen by `keep_series`, which must agree.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn series_indexed(
        &self,
        keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut select: impl FnMut(&Postings, &Segment) -> roaring::RoaringBitmap,
        f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        self.scan_selected(
            keep_series,
            |path, seg| Some(select(&self.store.postings(path, seg), seg)),
            f,
        )
    }

    /// The dimension names of the series with data in range (segments through their
    /// dimension indexes, buffered points directly).
    ///
    /// # Errors
    /// Segment read errors.
    pub fn label_names(&self) -> Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        let mut buffered = BTreeSet::new();
        self.each_label(
            &mut |p| out.extend(p.names().map(str::to_owned)),
            &mut |dims| buffered.extend(dims.iter().map(|(n, _)| n.clone())),
        )?;
        out.append(&mut buffered);
        Ok(out)
    }

    /// The values of dimension `name` in range, each with the number of series (per
    /// segment, summed) that have it.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn label_values(&self, name: &str) -> Result<BTreeMap<String, u64>> {
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
        self.each_label_series(&mut seg, &mut buf, &mut buffered)?;
        for v in buf_values {
            *out.entry(v).or_insert(0) += 1;
        }
        Ok(out)
    }

    fn each_label(&self, seg: &mut dyn FnMut(&Postings), buf: DimsSink<'_>) -> Result<()> {
        let mut seen = HashSet::new();
        self.each_label_series(seg, buf, &mut seen)
    }

    /// Calls `seg` for the index of each live segment overlapping the range and `buf`
    /// once per buffered series with points in the range.
    fn each_label_series(
        &self,
        seg: &mut dyn FnMut(&Postings),
        buf: DimsSink<'_>,
        seen: &mut HashSet<Tsid>,
    ) -> Result<()> {
        let (from, to) = (self.from, self.to);
        for engine in self.store.engines_overlapping(from, to) {
            for (path, segment, _) in engine.segments() {
                let overlaps = segment.min_timestamp().is_some_and(|lo| lo <= to)
                    && segment.max_timestamp().is_some_and(|hi| hi >= from);
                if overlaps {
                    seg(&self.store.postings(path, segment));
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
        for p in self.store.expired.values() {
            if p.end <= from || p.start > to || self.store.readable_attached_at(p.start).is_some() {
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
                    seg(&self
                        .store
                        .postings(&rollup::rollup_path(&p.dir, r), segment));
                }
            }
        }
        Ok(())
    }

    /// A reader of the metric columns `columns` (by name) over the range, across the
    /// partitions that overlap it (see [`SeriesReader`]).
    pub fn series_reader(&self, columns: &[&str]) -> SeriesReader<'a> {
        SeriesReader::new(self.store, self.from, self.to, columns, false)
    }

    /// As [`series_reader`](Self::series_reader), with one more output after the
    /// columns: every row's timestamp (value 0.0), whichever columns the row has — the
    /// documents, for what counts them.
    pub fn series_reader_with_rows(&self, columns: &[&str]) -> SeriesReader<'a> {
        SeriesReader::new(self.store, self.from, self.to, columns, true)
    }

    /// The rollup segment a [`Piece::Rollup`] reads, with its path and the piece's time
    /// range; `None` for another piece or a rollup no longer there.
    fn rollup_piece(&self, piece: &Piece) -> Option<(PathBuf, &'a Segment, i64, i64)> {
        let Piece::Rollup {
            partition,
            resolution_ms,
            from,
            to,
        } = *piece
        else {
            return None;
        };
        let (path, seg) = self.store.rollup_of(partition, resolution_ms)?;
        Some((path, seg, from, to))
    }

    /// Reads whole rollup rows of a [`Piece::Rollup`] of [`plan`](Self::plan) (every
    /// metric, and the row count):
    /// `f` per series and bucket, in (tsid, bucket) order, for the series `select`
    /// picks through the rollup segment's dimension index and `keep_series` accepts. A
    /// piece whose partition or rollup is gone reads nothing.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn rollup_rows(
        &self,
        piece: &Piece,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        select: impl FnOnce(&Postings) -> roaring::RoaringBitmap,
        mut f: impl FnMut(RollupRow<'_>),
    ) -> Result<()> {
        let Some((path, seg, from, to)) = self.rollup_piece(piece) else {
            return Ok(());
        };
        let chosen = select(&self.store.postings(&path, seg));
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

    /// Reads the rollup rows of a [`Piece::Rollup`] of [`plan`](Self::plan) for `metric`: `f(tsid, dims, bucket
    /// start, stats)` per series and bucket, in (tsid, bucket) order, for the series
    /// `keep_series` accepts. A piece whose partition or rollup is gone reads nothing.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn rollup_stats(
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
/// [`PartitionSearch::rollup_rows`] reads it.
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
