//! The read side of sealed partitions as whole units: what an export (the Parquet lake,
//! `tidemark-lake`) reads. A sealed partition is merged into one segment, so its rows
//! are that segment's live rows in (tsid, timestamp) order, read block by block through
//! a [`RowCursor`]: memory does not grow with the partition.
//!
//! A [`SealedPartition`] is a snapshot: it shares the partition's segments (immutable,
//! memory-mapped files) and copies their tombstones, so it is read without the store,
//! e.g. after the index's lock is released, while writes, seals and retention go on (a
//! segment file removed meanwhile stays mapped until the snapshot is dropped).

use std::sync::Arc;

use tidemark_segment::{RowCursor, Segment, Tombstones};

use super::{PartState, PartitionedEngine};
use crate::error::{Error, Result};

/// One sealed partition, as [`PartitionedEngine::sealed_partitions`] lists it: its time
/// range, its generation, its rows and its rollups (a snapshot: see the module).
#[derive(Debug, Clone)]
pub struct SealedPartition {
    /// First millisecond of the partition.
    pub start_ms: i64,
    /// First millisecond after it.
    pub end_ms: i64,
    /// The id of its merged segment (0 when it holds no segment). Segment ids only grow
    /// within a partition's engine, and a late write re-seals the partition into a new
    /// segment, so a larger generation means newer rows: an export keyed on it (a Delta
    /// transaction version) skips what it already wrote and replaces what changed.
    pub generation: u64,
    /// Its merged segment and a copy of the segment's tombstones, if it holds any row.
    source: Option<(Arc<Segment>, Tombstones)>,
    /// Its rollup segments by resolution (milliseconds), ascending; a rollup built
    /// empty is left out.
    rollups: Vec<(i64, Arc<Segment>)>,
}

impl SealedPartition {
    /// The merged segment (its series table, columns and extra columns describe every
    /// row), or `None` for a partition with no rows.
    pub fn segment(&self) -> Option<&Segment> {
        self.source.as_ref().map(|(s, _)| s.as_ref())
    }

    /// Live rows: the segment's rows less its tombstones.
    pub fn rows(&self) -> u64 {
        self.source
            .as_ref()
            .map_or(0, |(s, t)| s.row_count().saturating_sub(t.len()))
    }

    /// The rollup segments by resolution (milliseconds), ascending: one row per series
    /// and bucket (the bucket start as its timestamp), built from the rows above when the
    /// partition was sealed (docs/partitions.md, "Rollups").
    pub fn rollups(&self) -> &[(i64, Arc<Segment>)] {
        &self.rollups
    }

    /// The merged segment's tombstones (its dead rows), or `None` for a partition with no
    /// rows. With [`Segment::cursor`] a reader walks a subset of the live rows in one
    /// pass, e.g. the series of one shard: their dead rows plus every other row.
    pub fn tombstones(&self) -> Option<&Tombstones> {
        self.source.as_ref().map(|(_, t)| t)
    }

    /// A cursor over the live rows in (tsid, timestamp) order (call
    /// [`RowCursor::advance`] first), or `None` for a partition with no rows.
    pub fn cursor(&self) -> Option<RowCursor<'_>> {
        self.source.as_ref().map(|(s, t)| s.cursor(Some(t.dead())))
    }
}

impl PartitionedEngine {
    /// The sealed partitions, oldest first (active, dirty and raw-expired ones are left
    /// out: their rows may still change, or are gone). Empty for a single-engine store.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if a sealed partition holds buffered rows or more than
    /// one segment (sealing merges it into one; this would be a bug, never silently
    /// read as a partial partition).
    pub fn sealed_partitions(&self) -> Result<Vec<SealedPartition>> {
        let mut out = Vec::new();
        for p in self.parts.values() {
            if p.state != PartState::Sealed || self.manifest.is_none() {
                continue;
            }
            let slots = p.engine.sealed_source();
            if p.engine.buffered() > 0 || slots.len() > 1 {
                return Err(Error::InvalidConfig {
                    name: "partition",
                    detail: format!(
                        "sealed partition {} holds {} segments and {} buffered rows: expected one merged segment",
                        p.start,
                        slots.len(),
                        p.engine.buffered()
                    ),
                });
            }
            let first = slots.into_iter().next();
            let mut rollups: Vec<(i64, Arc<Segment>)> = p
                .rollups
                .iter()
                .filter_map(|(r, s)| s.as_ref().map(|s| (*r, Arc::clone(s))))
                .collect();
            rollups.sort_by_key(|(r, _)| *r);
            out.push(SealedPartition {
                start_ms: p.start,
                end_ms: p.end,
                generation: first.as_ref().map_or(0, |(id, _, _)| *id),
                source: first.map(|(_, s, t)| (s, t)),
                rollups,
            });
        }
        out.sort_by_key(|p| p.start_ms);
        Ok(out)
    }
}
