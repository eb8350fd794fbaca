//! Sealing: a partition the clock has passed is merged into one segment and its rollups
//! are built; a late write reopens it (Dirty) and rebuilds the buckets it touched.
//! `maintain` decides what is due.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use tidemark_tsid::Tsid;

use super::clock::wall_clock_ms;
use super::manifest::PartState;
use super::{PartitionedEngine, WriteMark, rollup};
use crate::error::{Error, Result};

/// What [`PartitionedEngine::maintain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintainReport {
    /// Partitions sealed.
    pub sealed: usize,
    /// Partitions dropped by retention.
    pub dropped: usize,
    /// Rows they held.
    pub dropped_rows: u64,
    /// Partitions whose raw rows were dropped, a rollup kept.
    pub raw_expired: usize,
}

impl PartitionedEngine {
    /// Seals the partition starting at `start`: refresh, merge into one segment, build
    /// its rollups, mark it sealed in the manifest. Sealing again rebuilds the rollups.
    ///
    /// # Errors
    /// Engine and I/O errors; [`Error::InvalidConfig`] for a single-engine store.
    pub fn seal(&mut self, start: i64) -> Result<()> {
        let Some(m) = &self.manifest else {
            return Err(Error::InvalidConfig {
                name: "partition",
                detail: "a single-engine store has no partitions to seal".to_owned(),
            });
        };
        let resolutions = m.rollups.clone();
        let Some(part) = self.parts.get_mut(&start) else {
            return Ok(());
        };
        part.engine.refresh()?;
        part.engine.merge_all()?;
        part.engine.release_buffer();
        let mut rollups = Vec::new();
        for r in resolutions {
            let seg = rollup::build(&part.engine, r, &rollup::rollup_path(&part.dir, r))?;
            rollups.push((r, seg));
        }
        part.rollups = rollups;
        let dir = part.dir.clone();
        self.forget_rollup_postings(&dir);
        self.set_state(start, PartState::Sealed)
    }

    /// Seals every active partition the high-water mark is past by the seal grace, or
    /// that the high-water mark is past and that has had no write for the seal grace of
    /// wall-clock time (see [`maintain_at`](Self::maintain_at)), and applies retention.
    ///
    /// # Errors
    /// As [`seal`](Self::seal) and [`enforce_retention`](Self::enforce_retention).
    pub fn maintain(&mut self) -> Result<MaintainReport> {
        self.maintain_at(wall_clock_ms())
    }

    /// [`maintain`](Self::maintain) with the wall-clock time given (epoch milliseconds;
    /// tests inject it). A partition counts as without writes from the first call that
    /// saw its current write fingerprint (rows, checks, deletes): so the wall-clock rule
    /// seals it one seal grace after the first call that followed its last write, at the
    /// granularity of the calls (the server calls this every few seconds).
    ///
    /// # Errors
    /// As [`maintain`](Self::maintain).
    pub fn maintain_at(&mut self, now_ms: i64) -> Result<MaintainReport> {
        let Some(m) = &self.manifest else {
            return Ok(MaintainReport::default());
        };
        let high = m.high_water_ms;
        let grace = m.seal_grace_ms;
        let mut due = Vec::new();
        let mut idle = HashMap::new();
        for p in self.parts.values() {
            if p.state != PartState::Active {
                continue;
            }
            let mark = WriteMark::of(&p.engine);
            let since = match self.idle.get(&p.start) {
                Some((m, t)) if *m == mark => *t,
                _ => now_ms,
            };
            idle.insert(p.start, (mark, since));
            let by_event_time = p.end.saturating_add(grace) <= high;
            let by_wall_clock = p.end <= high && now_ms.saturating_sub(since) >= grace;
            if by_event_time || by_wall_clock {
                due.push(p.start);
            }
        }
        self.idle = idle;
        let report = self.retention_pass()?;
        let mut sealed = 0;
        for start in due {
            if self.parts.contains_key(&start) {
                self.seal(start)?;
                self.idle.remove(&start);
                sealed += 1;
            }
        }
        Ok(MaintainReport { sealed, ..report })
    }

    pub(super) fn set_state(&mut self, start: i64, state: PartState) -> Result<()> {
        let Some(m) = &mut self.manifest else {
            return Ok(());
        };
        let mut next = m.clone();
        for (s, st) in &mut next.partitions {
            if *s == start {
                *st = state;
            }
        }
        next.write(&self.dir)?;
        self.clock_unsaved = false;
        *m = next;
        if let Some(p) = self.parts.get_mut(&start) {
            p.state = state;
        }
        Ok(())
    }

    pub(super) fn rebuild_rollups(&mut self, start: i64, touched: &[(Tsid, i64)]) -> Result<()> {
        let Some(part) = self.parts.get_mut(&start) else {
            return Ok(());
        };
        part.engine.refresh()?;
        part.engine.merge_all()?;
        let mut next = Vec::new();
        for (r, old) in &part.rollups {
            let pairs: HashSet<(Tsid, i64)> = touched
                .iter()
                .map(|(t, ts)| (*t, ts.div_euclid(*r) * r))
                .collect();
            let seg = rollup::rebuild(
                &part.engine,
                *r,
                old.as_deref(),
                &pairs,
                &rollup::rollup_path(&part.dir, *r),
            )?;
            next.push((*r, seg));
        }
        part.rollups = next;
        let dir = part.dir.clone();
        self.forget_rollup_postings(&dir);
        Ok(())
    }

    /// Drops the cached dimension indexes of the rollups of partition directory `dir`:
    /// a rollup file is rewritten in place (same path) when it is rebuilt, unlike
    /// segment files, so its cached index would describe the old series table.
    fn forget_rollup_postings(&self, dir: &Path) {
        let mut cache = match self.postings.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        cache.retain(|p, _| p.parent() != Some(dir));
    }
}
