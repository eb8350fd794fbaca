//! Partitions of other stores attached read-only: a store's sealed partitions (a local
//! cache of partitions retention removed, rebuilt from a lake) read by every query of
//! this store as if they were its own, and nothing else. An attached partition is never
//! in this store's manifest, never sealed, merged, written or dropped by it; it is read
//! only where this store holds no partition of its own and refuses writes as past the
//! raw retention, so no write can ever need to meet a point it holds (exactly-once is
//! untouched) and no time is read twice.

use std::collections::HashSet;

use super::manifest::PartState;
use super::{Part, PartitionedEngine};
use crate::error::{Error, Result};

impl PartitionedEngine {
    /// Attaches `other`, a time-partitioned store of the same partition width whose
    /// partitions are all sealed: from now on reads of this store (its
    /// [`search`](Self::search) side, [`get`](Self::get)) see each partition of `other`
    /// whose time this store has no partition for and refuses writes to as past its raw
    /// retention. `other` is held until [`detach`](Self::detach) or
    /// [`close`](Self::close). Returns the starts of `other`'s partitions.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] (`attach`) when either store is not partitioned, the
    /// widths differ, a partition of `other` is not sealed, or one is attached already.
    pub fn attach_read_only(&mut self, other: PartitionedEngine) -> Result<Vec<i64>> {
        let refuse = |detail: String| Error::InvalidConfig {
            name: "attach",
            detail,
        };
        let (Some(mine), Some(theirs)) = (&self.manifest, &other.manifest) else {
            return Err(refuse(
                "only a time-partitioned store attaches another's partitions".to_owned(),
            ));
        };
        if mine.width_ms != theirs.width_ms {
            return Err(refuse(format!(
                "{} has partitions of {} ms, this store of {} ms",
                other.dir.display(),
                theirs.width_ms,
                mine.width_ms
            )));
        }
        if let Some(p) = other.parts.values().find(|p| p.state != PartState::Sealed) {
            return Err(refuse(format!(
                "the partition starting at {} of {} is not sealed",
                p.start,
                other.dir.display()
            )));
        }
        let held: HashSet<i64> = self.attached_partitions().into_iter().collect();
        if let Some(s) = other.parts.keys().find(|s| held.contains(s)) {
            return Err(refuse(format!(
                "a partition starting at {s} is attached already"
            )));
        }
        let starts = other.parts.keys().copied().collect();
        self.attached.push(other);
        Ok(starts)
    }

    /// Detaches the attached store holding the partition starting at `start` and hands
    /// it back (to close it, or remove its files); `None` when none holds it.
    pub fn detach(&mut self, start: i64) -> Option<PartitionedEngine> {
        let i = self
            .attached
            .iter()
            .position(|a| a.parts.contains_key(&start))?;
        Some(self.attached.remove(i))
    }

    /// The starts of every attached partition, read or not, in time order.
    pub fn attached_partitions(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self
            .attached
            .iter()
            .flat_map(|a| a.parts.keys().copied())
            .collect();
        out.sort_unstable();
        out
    }

    /// The starts of the attached partitions reads see now, in time order.
    pub fn attached_readable(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self.readable_attached().map(|p| p.start).collect();
        out.sort_unstable();
        out
    }

    /// Whether this store refuses every write to the partition starting at `start` as
    /// past its raw retention (so it holds no raw rows there and never will): what an
    /// attached partition must be for reads to see it.
    pub fn is_past_raw_retention(&self, start: i64) -> bool {
        self.manifest
            .as_ref()
            .is_some_and(|m| self.past_raw_retention(start.saturating_add(m.width_ms)))
    }

    /// Whether this store refuses every write to a partition ending at `end` as past
    /// its raw retention.
    fn past_raw_retention(&self, end: i64) -> bool {
        self.manifest.as_ref().is_some_and(|m| {
            m.high_water_ms != i64::MIN
                && m.retention_ms
                    .is_some_and(|r| end <= m.high_water_ms.saturating_sub(r))
        })
    }

    /// The attached partitions reads see (see [`attach_read_only`](Self::attach_read_only)).
    pub(super) fn readable_attached(&self) -> impl Iterator<Item = &Part> {
        self.attached
            .iter()
            .flat_map(|a| a.parts.values())
            .filter(|p| !self.parts.contains_key(&p.start) && self.past_raw_retention(p.end))
    }

    /// The attached partition starting at `start`, if reads see it.
    pub(super) fn readable_attached_at(&self, start: i64) -> Option<&Part> {
        if self.parts.contains_key(&start) {
            return None;
        }
        self.attached
            .iter()
            .find_map(|a| a.parts.get(&start))
            .filter(|p| self.past_raw_retention(p.end))
    }
}
