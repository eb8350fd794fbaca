//! Merges of a partitioned store off the write path: each partition's engine plans its
//! tiered merges as before, but with background merges on, nothing runs them after a
//! refresh; a caller's merge thread takes them one at a time with
//! [`PartitionedEngine::plan_merge`], runs them without the store
//! ([`PartMergeJob::run`]: the inputs are immutable segments) and installs the result
//! with [`PartitionedEngine::install_merge`] (a manifest switch in that partition).

use crate::engine::{MergeJob, MergedSegment};
use crate::error::{Error, Result};

use super::PartitionedEngine;

/// A merge of one partition's segments, planned by [`PartitionedEngine::plan_merge`],
/// to [`run`](Self::run) on any thread while the store keeps ingesting.
#[derive(Debug)]
pub struct PartMergeJob {
    start: i64,
    job: MergeJob,
}

/// A merged segment of one partition, written by [`PartMergeJob::run`], not yet part of
/// the store until [`PartitionedEngine::install_merge`].
#[derive(Debug)]
pub struct PartMerged {
    start: i64,
    merged: Result<MergedSegment>,
}

impl PartMergeJob {
    /// The number of segments merged.
    pub fn len(&self) -> usize {
        self.job.len()
    }

    /// Whether the job merges nothing.
    pub fn is_empty(&self) -> bool {
        self.job.is_empty()
    }

    /// Writes the merged segment (the live rows of the inputs as of planning); an error
    /// is carried to [`PartitionedEngine::install_merge`], which releases the inputs. A
    /// panic in the merge (a bug) is caught and carried the same way, so a merge thread
    /// never leaves inputs marked as merging forever.
    pub fn run(self) -> PartMerged {
        let job = self.job;
        let merged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || job.run()))
            .unwrap_or(Err(Error::MergePanicked));
        PartMerged {
            start: self.start,
            merged,
        }
    }
}

impl PartMerged {
    /// Removes the merged file of a merge that will not be installed (its store was
    /// closed meanwhile); a failed merge left no file.
    pub fn discard(self) {
        if let Ok(m) = self.merged {
            m.discard();
        }
    }
}

impl PartitionedEngine {
    /// Merges each partition into one segment.
    ///
    /// # Errors
    /// Engine errors.
    pub fn merge_all(&mut self) -> Result<()> {
        self.parts.values_mut().try_for_each(|p| {
            p.engine.refresh()?;
            p.engine.merge_all()
        })
    }

    /// Whether merges run off the write path: on, a refresh no longer runs the tiered
    /// merges after it, and the caller runs them with [`plan_merge`](Self::plan_merge),
    /// [`PartMergeJob::run`] and [`install_merge`](Self::install_merge) (partitions
    /// created later inherit the setting). Off (the default), merges run after the
    /// refresh that makes them due, on the writing thread.
    pub fn set_background_merges(&mut self, on: bool) {
        self.background_merges = on;
        for p in self.parts.values_mut() {
            p.engine.set_background_merges(on);
        }
    }

    /// Merges the tiered policy wants that no job runs yet, over every partition: what a
    /// writer compares with a bound to fall back to merging inline when background
    /// merges fall behind.
    pub fn waiting_merges(&self) -> usize {
        self.parts.values().map(|p| p.engine.waiting_merges()).sum()
    }

    /// Plans the next merge the tiered policy wants, in the oldest partition that wants
    /// one (its inputs are marked, so the next call plans another), or `None`.
    pub fn plan_merge(&mut self) -> Option<PartMergeJob> {
        self.parts
            .iter_mut()
            .find_map(|(&start, p)| p.engine.plan_merge().map(|job| PartMergeJob { start, job }))
    }

    /// Installs a merge run by [`PartMergeJob::run`]: its partition's manifest switches
    /// to the merged segment. A merge whose partition was dropped meanwhile (retention),
    /// or whose inputs were merged away (a seal), is discarded and its file removed.
    ///
    /// # Errors
    /// The merge's own error (its inputs stay live); segment and I/O errors of the
    /// install.
    pub fn install_merge(&mut self, merged: PartMerged) -> Result<()> {
        match self.parts.get_mut(&merged.start) {
            Some(p) => p.engine.install_merge(merged.merged),
            None => {
                merged.discard();
                Ok(())
            }
        }
    }
}
