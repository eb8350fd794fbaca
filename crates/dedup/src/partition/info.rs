//! What a store holds: its partitions, counts and counters.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use tidemark_segment::Segment;
use tidemark_tsid::Tsid;

use super::manifest::PartState;
use super::{PartitionedEngine, rollup};
use crate::stats::DedupStats;

/// One partition, as listed by [`PartitionedEngine::partitions`].
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionInfo {
    /// First millisecond of the partition.
    pub start_ms: i64,
    /// First millisecond after it.
    pub end_ms: i64,
    /// Live rows (buffered included).
    pub rows: u64,
    /// Segments.
    pub segments: usize,
    /// Bytes of its segments and rollups on disk.
    pub bytes: u64,
    /// Whether it is sealed (merged, rollups built).
    pub sealed: bool,
    /// Whether retention dropped its raw rows and other rollups, keeping `rollups`.
    pub raw_expired: bool,
    /// Its rollups: `(resolution_ms, rows, bytes)`.
    pub rollups: Vec<(i64, u64, u64)>,
}

/// Counters of a partitioned store: cumulative ones from the manifest and this session's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionStats {
    /// Partitions dropped by retention, ever.
    pub dropped_partitions: u64,
    /// Rows they held.
    pub dropped_rows: u64,
    /// Partitions whose raw rows retention dropped while keeping a rollup, ever.
    pub expired_partitions: u64,
    /// Raw rows those held.
    pub expired_rows: u64,
    /// Points rejected this session as older than the late window or the retention.
    pub rejected_too_old: u64,
    /// Late writes that changed a sealed partition (its rollups rebuilt) this session.
    pub rollup_rebuilds: u64,
}

impl PartitionedEngine {
    /// Partition counters.
    pub fn partition_stats(&self) -> PartitionStats {
        PartitionStats {
            dropped_partitions: self.manifest.as_ref().map_or(0, |m| m.dropped_partitions),
            dropped_rows: self.manifest.as_ref().map_or(0, |m| m.dropped_rows),
            expired_partitions: self.manifest.as_ref().map_or(0, |m| m.expired_partitions),
            expired_rows: self.manifest.as_ref().map_or(0, |m| m.expired_rows),
            rejected_too_old: self.rejected_too_old,
            rollup_rebuilds: self.rollup_rebuilds,
        }
    }

    /// The partitions, oldest first.
    pub fn partitions(&self) -> Vec<PartitionInfo> {
        let mut list = self
            .parts
            .values()
            .map(|p| {
                let seg_bytes: u64 = p
                    .engine
                    .segments()
                    .iter()
                    .map(|(path, _, _)| std::fs::metadata(path).map_or(0, |m| m.len()))
                    .sum();
                let rollups = rollup_infos(&p.dir, &p.rollups);
                PartitionInfo {
                    start_ms: p.start,
                    end_ms: p.end,
                    rows: p.engine.live_count(),
                    segments: p.engine.segment_count(),
                    bytes: seg_bytes + rollups.iter().map(|r| r.2).sum::<u64>(),
                    sealed: p.state == PartState::Sealed,
                    raw_expired: false,
                    rollups,
                }
            })
            .chain(self.expired.values().map(|p| {
                let rollups = rollup_infos(&p.dir, &p.rollups);
                PartitionInfo {
                    start_ms: p.start,
                    end_ms: p.end,
                    rows: 0,
                    segments: 0,
                    bytes: rollups.iter().map(|r| r.2).sum(),
                    sealed: true,
                    raw_expired: true,
                    rollups,
                }
            }))
            .collect::<Vec<PartitionInfo>>();
        list.sort_by_key(|p| p.start_ms);
        list
    }

    /// Dedup counters summed over the partitions (and those dropped this session).
    pub fn stats(&self) -> DedupStats {
        let mut s = self.retired;
        s.strategy = self.engine_config.strategy();
        for p in self.parts.values() {
            absorb(&mut s, p.engine.stats());
        }
        s
    }

    /// Live points in all partitions.
    pub fn live_count(&self) -> u64 {
        self.parts.values().map(|p| p.engine.live_count()).sum()
    }

    /// Segments in all partitions.
    pub fn segment_count(&self) -> usize {
        self.parts.values().map(|p| p.engine.segment_count()).sum()
    }

    /// Buffered points in all partitions.
    pub fn buffered(&self) -> usize {
        self.parts.values().map(|p| p.engine.buffered()).sum()
    }

    /// Deleted rows in all partitions.
    pub fn deleted_rows(&self) -> u64 {
        self.parts.values().map(|p| p.engine.deleted_rows()).sum()
    }

    /// Distinct series over all partitions.
    pub fn series_count(&self) -> u64 {
        if self.parts.len() == 1 {
            return self.parts.values().map(|p| p.engine.series_count()).sum();
        }
        let mut seen: HashSet<Tsid> = HashSet::new();
        for p in self.parts.values() {
            for (_, seg, _) in p.engine.segments() {
                seen.extend(seg.series().iter().map(|s| s.tsid));
            }
            if p.engine.buffered() > 0 {
                // Asked once per buffered point (and per series and segment): collects
                // the buffered series without reading a row.
                let _ = p.engine.scan_live(
                    i64::MIN,
                    i64::MAX,
                    |t, _| {
                        seen.insert(*t);
                        false
                    },
                    |_, _| {},
                );
            }
        }
        seen.len() as u64
    }

    /// Live segments of all partitions, oldest partition first (see [`Engine::segments`](crate::Engine::segments)).
    pub fn segments(&self) -> Vec<(&Path, &Segment, u64)> {
        self.parts
            .values()
            .flat_map(|p| p.engine.segments())
            .collect()
    }

    /// Rollup files of all partitions, with their segments.
    pub fn rollup_segments(&self) -> Vec<(i64, i64, &Segment)> {
        let mut out: Vec<(i64, i64, &Segment)> = self
            .parts
            .values()
            .map(|p| (p.start, &p.rollups))
            .chain(self.expired.values().map(|p| (p.start, &p.rollups)))
            .flat_map(|(start, rollups)| {
                rollups
                    .iter()
                    .filter_map(move |(r, s)| s.as_deref().map(|s| (start, *r, s)))
            })
            .collect();
        out.sort_by_key(|(start, r, _)| (*start, *r));
        out
    }
}

pub(super) fn absorb(into: &mut DedupStats, s: &DedupStats) {
    into.checks += s.checks;
    into.live_map_hits += s.live_map_hits;
    into.segments_pruned_by_time += s.segments_pruned_by_time;
    into.series_range_negatives += s.series_range_negatives;
    into.bloom_negatives += s.bloom_negatives;
    into.false_positives += s.false_positives;
    into.verifications += s.verifications;
    into.true_duplicates += s.true_duplicates;
    into.verification_nanos += s.verification_nanos;
    into.bloom_filters_ored += s.bloom_filters_ored;
    into.bloom_filters_rebuilt += s.bloom_filters_rebuilt;
}

/// `(resolution_ms, rows, bytes)` of each rollup of the partition in `dir`.
fn rollup_infos(dir: &Path, rollups: &[(i64, Option<Arc<Segment>>)]) -> Vec<(i64, u64, u64)> {
    rollups
        .iter()
        .map(|(r, seg)| match seg {
            Some(s) => (
                *r,
                s.row_count(),
                std::fs::metadata(rollup::rollup_path(dir, *r)).map_or(0, |m| m.len()),
            ),
            None => (*r, 0, 0),
        })
        .collect()
}
