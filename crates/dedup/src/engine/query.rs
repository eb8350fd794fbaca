//! Read-only queries over the engine's live data (segments, scans), kept apart from the
//! write path in `engine.rs`.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use tidemark_segment::{Dim, Point, RowId, Segment};
use tidemark_tsid::Tsid;

use super::Engine;
use crate::error::{Error, Result};

impl Engine {
    /// The live segments, oldest first, with their file paths and deleted-row counts.
    pub fn segments(&self) -> Vec<(&Path, &Segment, u64)> {
        self.slots
            .iter()
            .map(|s| (s.path.as_path(), s.segment.as_ref(), s.tombstones.len()))
            .collect()
    }

    /// The live segments with their ids and a copy of their tombstones, oldest first
    /// (what a sealed partition's export reads, without the engine: see
    /// `SealedPartition`).
    pub(crate) fn sealed_source(&self) -> Vec<(u64, Arc<Segment>, tidemark_segment::Tombstones)> {
        self.slots
            .iter()
            .map(|s| (s.id, Arc::clone(&s.segment), s.tombstones.clone()))
            .collect()
    }

    /// The buffered points in `[from, to]` of the series `keep_series` keeps, to `f`.
    fn scan_buffer(
        &self,
        from: i64,
        to: i64,
        keep_series: &mut impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        f: &mut impl FnMut(Point, Option<(&Segment, RowId)>),
    ) {
        let frozen = self.frozen.as_ref();
        let rows = frozen
            .into_iter()
            .flat_map(|fr| fr.live().map(move |i| (&*fr.buffer, i)))
            .chain(self.buffer.live().map(|i| (&self.buffer, i)));
        for (buffer, i) in rows {
            let ts = buffer.ts_of(i);
            let Some(e) = self.series.entry(buffer.series_of(i)) else {
                continue;
            };
            if ts >= from && ts <= to && keep_series(&e.tsid, &e.dims) {
                if let Some(p) = buffer.point(i, &self.series, &self.columns) {
                    f(p, None);
                }
            }
        }
    }

    /// Calls `f` for every live point whose timestamp is in `from..=to` and whose series
    /// `keep_series` accepts (asked once per series and segment, or once per buffered
    /// point): buffered points first (in no particular order), then segment rows, oldest
    /// segment first, in (tsid, timestamp) order within a segment. The second argument
    /// of `f` is `None` for a buffered point (complete, extras included) and the segment
    /// and row of a stored one (whose per-row extra columns, if the segment has any, are
    /// read with `Segment::row_extras`). Segments whose
    /// [min, max] timestamp misses the range are skipped without reading, and so are
    /// series whose range misses it. Dimensions and metrics come sorted by name.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn scan_live(
        &self,
        from: i64,
        to: i64,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        self.scan_buffer(from, to, &mut keep_series, &mut f);
        scan_slots(&self.slots, from, to, &mut keep_series, &mut f)
    }

    /// As [`scan_live`](Self::scan_live), but each segment's series are chosen by
    /// `select` (ordinals in its series table, e.g. from its dimension index) and only
    /// their rows are read; buffered points are chosen by `keep_series` as before.
    /// `select` returning `None` scans the segment with `keep_series`.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn scan_live_selected(
        &self,
        from: i64,
        to: i64,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut select: impl FnMut(&Path, &Segment) -> Option<roaring::RoaringBitmap>,
        mut f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        self.scan_buffer(from, to, &mut keep_series, &mut f);
        for slot in &self.slots {
            if slot.max_ts < from || slot.min_ts > to {
                continue;
            }
            let segment = slot.segment.as_ref();
            let Some(chosen) = select(&slot.path, segment) else {
                let one = std::slice::from_ref(slot);
                scan_slots(one, from, to, &mut keep_series, &mut f)?;
                continue;
            };
            let names: Vec<&str> = segment.columns().iter().map(|c| c.name.as_str()).collect();
            for ord in &chosen {
                let Some(s) = segment.series().get(ord as usize) else {
                    continue;
                };
                if s.max_ts < from || s.min_ts > to {
                    continue;
                }
                segment
                    .scan_series(&s.tsid, from, to, |rv| {
                        if !slot.tombstones.is_deleted(rv.row) {
                            f(row_point(&names, &rv), Some((segment, rv.row)));
                        }
                    })
                    .map_err(|e| Error::Segment(segment.name_error(e)))?;
            }
        }
        Ok(())
    }

    /// Distinct series (tsids) among the buffered points and the live segments' series
    /// tables (a series whose rows are all deleted still counts until a merge drops it).
    pub fn series_count(&self) -> u64 {
        let mut seen: HashSet<Tsid> = self
            .buffer
            .live()
            .filter_map(|i| self.series.entry(self.buffer.series_of(i)).map(|e| e.tsid))
            .collect();
        if let Some(f) = &self.frozen {
            seen.extend(
                f.live()
                    .filter_map(|i| self.series.entry(f.buffer.series_of(i)).map(|e| e.tsid)),
            );
        }
        for slot in &self.slots {
            seen.extend(slot.segment.series().iter().map(|s| s.tsid));
        }
        seen.len() as u64
    }

    /// Total deleted (tombstoned) rows in the live segments.
    pub fn deleted_rows(&self) -> u64 {
        self.slots.iter().map(|s| s.tombstones.len()).sum()
    }
}

/// A stored row as a point (dimensions and metrics sorted by name).
fn row_point(names: &[&str], rv: &tidemark_segment::RowView<'_>) -> Point {
    // Built field by field: `Point` may gain fields upstream.
    let mut p = Point::new(rv.series.tsid, rv.ts_millis);
    p.dims = rv.series.dims.to_vec();
    p.metrics = names
        .iter()
        .zip(rv.metrics)
        .filter_map(|(n, v)| v.map(|v| ((*n).to_owned(), v)))
        .collect();
    p.normalized()
}

/// The segment part of [`Engine::scan_live`].
fn scan_slots(
    slots: &[super::Slot],
    from: i64,
    to: i64,
    keep_series: &mut impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
    f: &mut impl FnMut(Point, Option<(&Segment, RowId)>),
) -> Result<()> {
    for slot in slots {
        if slot.max_ts < from || slot.min_ts > to {
            continue;
        }
        let segment = slot.segment.as_ref();
        let names: Vec<&str> = segment.columns().iter().map(|c| c.name.as_str()).collect();
        // Series verdicts by first row (a series' rows are contiguous).
        let mut verdict: Option<(u64, bool)> = None;
        segment
            .scan_time_range(from, to, |rv| {
                if slot.tombstones.is_deleted(rv.row) {
                    return;
                }
                let keep = match verdict {
                    Some((first, k)) if first == rv.series.first_row => k,
                    _ => {
                        let k = keep_series(&rv.series.tsid, &rv.series.dims);
                        verdict = Some((rv.series.first_row, k));
                        k
                    }
                };
                if keep {
                    f(row_point(&names, &rv), Some((segment, rv.row)));
                }
            })
            .map_err(|e| Error::Segment(segment.name_error(e)))?;
    }
    Ok(())
}
