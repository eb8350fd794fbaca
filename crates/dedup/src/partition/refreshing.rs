//! Refreshes of a partitioned store off the write path: with background refreshes on,
//! an append no longer writes a segment when the buffers reach the budget; a caller's
//! refresh thread takes them with [`PartitionedEngine::plan_refresh`] (the partition
//! buffering the most freezes its buffer, and appends go on into a fresh one), writes
//! the segment without the store ([`PartRefreshJob::run`]) and installs it with
//! [`PartitionedEngine::install_refresh`] (a manifest switch in that partition). See
//! `engine/refresh.rs` for what a freeze keeps readable and durable.

use crate::engine::{RefreshJob, RefreshedSegment};
use crate::error::Result;

use super::PartitionedEngine;

/// How many budgets' worth the buffers may hold, with background refreshes on, before
/// an append refreshes inline: the bound on memory when the refresh thread falls behind.
const INLINE_REFRESH_BUDGETS: usize = 4;

/// How many budgets' worth the buffers may hold, with background refreshes on, before
/// [`PartitionedEngine::refresh_backlog`] tells the writer to wait for the refresh thread.
const BACKLOG_BUDGETS: usize = 2;

/// The writing of one partition's frozen buffer, planned by
/// [`PartitionedEngine::plan_refresh`], to [`run`](Self::run) on any thread while the
/// store keeps ingesting.
#[derive(Debug)]
pub struct PartRefreshJob {
    start: i64,
    job: RefreshJob,
}

/// A refreshed segment of one partition, written by [`PartRefreshJob::run`], not yet
/// part of the store until [`PartitionedEngine::install_refresh`].
#[derive(Debug)]
pub struct PartRefreshed {
    start: i64,
    done: RefreshedSegment,
}

impl PartRefreshJob {
    /// Points the segment will hold.
    pub fn len(&self) -> usize {
        self.job.len()
    }

    /// Whether the job writes no segment (only tombstones and a log switch).
    pub fn is_empty(&self) -> bool {
        self.job.is_empty()
    }

    /// Writes the segment; an error is carried to
    /// [`PartitionedEngine::install_refresh`].
    pub fn run(self) -> PartRefreshed {
        PartRefreshed {
            start: self.start,
            done: self.job.run(),
        }
    }
}

impl PartRefreshed {
    /// Removes the file of a refresh that will not be installed (its store was closed
    /// meanwhile).
    pub fn discard(self) {
        self.done.discard();
    }
}

impl PartitionedEngine {
    /// Whether refreshes run off the write path (see the module doc); partitions created
    /// later inherit the setting. Off (the default), an append that fills the budget
    /// refreshes inline.
    pub fn set_background_refresh(&mut self, on: bool) {
        self.background_refresh = on;
        for p in self.parts.values_mut() {
            p.engine.set_background_refresh(on);
        }
    }

    /// Whether refreshes run off the write path ([`set_background_refresh`](Self::set_background_refresh)).
    pub fn background_refresh(&self) -> bool {
        self.background_refresh
    }

    /// The refresh to run now, if any: a frozen buffer whose earlier attempt failed, or,
    /// once the partitions' unfrozen buffers hold the budget (`refresh_rows`), the
    /// partition buffering the most (not already refreshing) freezes its buffer. `None`
    /// when nothing is due.
    ///
    /// # Errors
    /// Engine errors of the freeze (a new log generation; the old one's fsync).
    pub fn plan_refresh(&mut self) -> Result<Option<PartRefreshJob>> {
        for (&start, p) in self.parts.iter_mut() {
            if p.engine.refresh_in_flight() {
                if let Some(job) = p.engine.plan_refresh(false)? {
                    return Ok(Some(PartRefreshJob { start, job }));
                }
            }
        }
        if self.unfrozen_rows() < self.engine_config.refresh_rows {
            return Ok(None);
        }
        let Some(start) = self
            .parts
            .iter()
            .filter(|(_, p)| !p.engine.refresh_in_flight() && p.engine.unfrozen_rows() > 0)
            .max_by_key(|(_, p)| p.engine.unfrozen_rows())
            .map(|(s, _)| *s)
        else {
            return Ok(None);
        };
        let Some(p) = self.parts.get_mut(&start) else {
            return Ok(None);
        };
        Ok(p.engine
            .plan_refresh(true)?
            .map(|job| PartRefreshJob { start, job }))
    }

    /// Installs a refresh run by [`PartRefreshJob::run`]. A partition other than the
    /// newest then gives its buffer's memory back; a refresh whose partition was dropped
    /// meanwhile (retention) is discarded.
    ///
    /// # Errors
    /// The job's own error (the points stay frozen and are written again by the next
    /// plan); tombstone, manifest and log I/O errors.
    pub fn install_refresh(&mut self, done: PartRefreshed) -> Result<()> {
        let newest = self.parts.keys().next_back().copied();
        match self.parts.get_mut(&done.start) {
            Some(p) => {
                p.engine.install_refresh(done.done)?;
                if Some(done.start) != newest {
                    p.engine.release_buffer();
                }
                Ok(())
            }
            None => {
                done.discard();
                Ok(())
            }
        }
    }

    /// Whether the unfrozen buffers hold more than the refresh thread keeps up with
    /// (twice the budget): a writer waits for a refresh to install before it takes more.
    pub fn refresh_backlog(&self) -> bool {
        self.background_refresh
            && self.unfrozen_rows()
                >= self
                    .engine_config
                    .refresh_rows
                    .saturating_mul(BACKLOG_BUDGETS)
    }

    /// Points pushed into the partitions' buffers and not frozen by a refresh.
    pub(super) fn unfrozen_rows(&self) -> usize {
        self.parts.values().map(|p| p.engine.unfrozen_rows()).sum()
    }

    /// The buffered rows past which an append refreshes inline.
    pub(super) fn inline_refresh_rows(&self) -> usize {
        let budget = self.engine_config.refresh_rows;
        if self.background_refresh {
            budget.saturating_mul(INLINE_REFRESH_BUDGETS)
        } else {
            budget
        }
    }
}
