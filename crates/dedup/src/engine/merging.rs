//! Merges: the tiered policy, merge jobs (planned on the engine thread, run anywhere,
//! installed back), and the synchronous `merge` built from them.

use super::*;

impl Engine {
    /// Runs the tiered merge policy until no tier holds
    /// [`merge_factor`](EngineConfig::with_merge_factor) segments, and returns the number
    /// of merges done. A segment's tier is ⌊log_factor(live rows)⌋; when a tier holds
    /// `factor` segments, its `factor` oldest are merged into one.
    ///
    /// # Errors
    /// As [`merge`](Self::merge).
    pub fn maybe_merge(&mut self) -> Result<usize> {
        let mut merges = 0;
        while let Some(group) = self.merge_candidates() {
            self.run_merge(&group, false)?;
            merges += 1;
        }
        Ok(merges)
    }

    pub(super) fn merge_candidates(&self) -> Option<Vec<usize>> {
        self.merge_groups().into_iter().next().map(|(_, g)| g)
    }

    /// The size tier of a segment with `live` rows: ⌊log_factor(live)⌋.
    fn tier_of(&self, live: u64) -> u32 {
        live.max(1).ilog(self.config.merge_factor as u64)
    }

    /// Every merge the tiered policy would start now, lowest tier first, as (tier,
    /// positions): each full tier's segments not already in a merge, `factor` at a time,
    /// oldest first.
    fn merge_groups(&self) -> Vec<(u32, Vec<usize>)> {
        let factor = self.config.merge_factor;
        let mut tiers: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
        for (i, s) in self.slots.iter().enumerate().filter(|(_, s)| !s.merging) {
            let live = s.segment.row_count().saturating_sub(s.tombstones.len());
            tiers.entry(self.tier_of(live)).or_default().push(i);
        }
        let mut groups = Vec::new();
        for (tier, positions) in tiers {
            for chunk in positions.chunks_exact(factor) {
                groups.push((tier, chunk.to_vec()));
            }
        }
        groups
    }

    /// Merges the policy wants that no merge job runs yet: what a caller running merges
    /// off the write path compares with its backlog bound.
    pub(crate) fn waiting_merges(&self) -> usize {
        self.merge_groups().len()
    }

    /// Picks segments for a merge by the tiered policy (ignoring segments already in a
    /// merge) and prepares a [`MergeJob`] to run on another thread, or `None`.
    pub fn plan_merge(&mut self) -> Option<MergeJob> {
        let positions = self.merge_candidates()?;
        self.plan_positions(&positions, false)
    }

    /// A merge job for the segments at `positions` (sorted, deduplicated, those past the
    /// end ignored), or `None` when that leaves none. A `final_merge` (asked for, not
    /// started by the tiered policy) writes at the configured merge level whatever its
    /// size (see `EngineConfig::merge_options`).
    pub(super) fn plan_positions(
        &mut self,
        positions: &[usize],
        final_merge: bool,
    ) -> Option<MergeJob> {
        let mut positions: Vec<usize> = positions
            .iter()
            .copied()
            .filter(|&i| i < self.slots.len())
            .collect();
        positions.sort_unstable();
        positions.dedup();
        if positions.is_empty() {
            return None;
        }
        let id = self.next_segment;
        self.next_segment = id.saturating_add(1);
        let mut ids = Vec::new();
        let mut inputs = Vec::new();
        let mut rows = 0u64;
        for &i in &positions {
            if let Some(s) = self.slots.get_mut(i) {
                s.merging = true;
                ids.push(s.id);
                rows += s.segment.row_count().saturating_sub(s.tombstones.len());
                inputs.push((Arc::clone(&s.segment), s.tombstones.clone()));
            }
        }
        Some(MergeJob {
            ids,
            inputs,
            new_id: id,
            path: segment_path(&self.dir, id),
            options: self.config.merge_options(rows, final_merge),
            keyer: self.keyer.clone(),
            bloom_fpr: self.config.bloom_strategy_fpr(),
        })
    }

    /// Installs a merged segment in place of its inputs: rows deleted since the job was
    /// planned are tombstoned in it (and written at once, as the log may no longer hold
    /// those deletes), then the manifest switches atomically and the inputs' files go. A
    /// merge whose inputs were merged away meanwhile is discarded; so is a failed one.
    ///
    /// # Errors
    /// The error of a failed merge (its inputs stay); segment and I/O errors.
    pub fn install_merge(&mut self, merged: Result<MergedSegment>) -> Result<()> {
        let m = match merged {
            Ok(m) => m,
            Err(e) => {
                self.merge_stats.merges_abandoned += 1;
                self.slots.iter_mut().for_each(|s| s.merging = false);
                return Err(e);
            }
        };
        let result = self.install_inner(&m);
        if matches!(result, Ok(true)) {
            self.count_bloom_merge(m.bloom_ored);
            self.merge_stats.merges += 1;
        } else {
            self.merge_stats.merges_abandoned += 1;
        }
        for s in &mut self.slots {
            if m.ids.contains(&s.id) {
                s.merging = false;
            }
        }
        if !matches!(result, Ok(true)) {
            let _ = std::fs::remove_file(&m.path);
            let _ = std::fs::remove_file(Tombstones::path_for(&m.path, 1));
        }
        result.map(|_| ())
    }

    /// `Ok(false)` when discarded.
    pub(super) fn install_inner(&mut self, m: &MergedSegment) -> Result<bool> {
        self.check_poisoned()?;
        let mut positions = Vec::new();
        for id in &m.ids {
            match self.slots.iter().position(|s| s.id == *id) {
                Some(i) => positions.push(i),
                None => return Ok(false),
            }
        }
        let mut new_slot = None;
        if m.rows > 0 {
            let entry = SegmentEntry {
                id: m.new_id,
                rows: m.rows,
                tombstones: None,
            };
            let mut slot = Slot::open(&self.dir, &entry, &mut self.interner)?;
            // Deletes that happened while the merge ran.
            for (&i, snapshot) in positions.iter().zip(&m.snapshots) {
                let Some(old) = self.slots.get(i) else {
                    continue;
                };
                for row in old.tombstones.dead().iter() {
                    let row = u64::from(row);
                    if snapshot.is_deleted(row) {
                        continue;
                    }
                    let p = old.segment.row(row).map_err(|e| old.err(e))?;
                    let id = self.id_of(&p)?;
                    let found = find_row(&slot, &id, self.keyer.as_deref(), Some(&p.tsid))?;
                    if let Some(r) = found {
                        slot.tombstones
                            .delete(r)
                            .map_err(|_| Error::BadRow { id, row: r })?;
                    }
                }
            }
            if !slot.tombstones.is_empty() {
                let next = slot.tombstones.next_generation();
                next.write_beside(&slot.path)?;
                slot.tomb_generation = Some(next.generation());
                slot.tombstones = next;
            }
            new_slot = Some(slot);
        }
        positions.sort_unstable();
        let first = positions.first().copied().unwrap_or(0);
        let mut segments = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if i == first {
                segments.extend(new_slot.as_ref().map(Slot::entry));
            }
            if positions.binary_search(&i).is_err() {
                segments.push(s.entry());
            }
        }
        Manifest {
            next_segment: self.next_segment,
            wal_generation: self.wal_base,
            segments,
        }
        .write(&self.dir)?;
        let old: Vec<Slot> = positions
            .iter()
            .rev()
            .map(|&i| self.slots.remove(i))
            .collect();
        if let Some(slot) = new_slot {
            self.slots.insert(first.min(self.slots.len()), slot);
        }
        for s in old {
            remove_slot_files(s);
        }
        // Series only the merged-away segments held are gone from memory too.
        self.interner.prune();
        Ok(true)
    }

    /// Merges every live segment into one (a no-op with fewer than two, unless one has
    /// dead rows to drop).
    ///
    /// # Errors
    /// As [`merge`](Self::merge).
    pub fn merge_all(&mut self) -> Result<()> {
        let all: Vec<usize> = (0..self.slots.len()).collect();
        let single_clean =
            all.len() == 1 && self.slots.first().is_some_and(|s| s.tombstones.is_empty());
        if all.is_empty() || single_clean {
            return Ok(());
        }
        self.merge(&all)
    }

    /// Merges the segments at `positions` (indexes into the live list, oldest first;
    /// positions past its end are ignored) into
    /// one new segment holding their live rows, written with the current strategy's
    /// sections (the bloom filter or id index is rebuilt), placed where the oldest of
    /// them was. The manifest then names it instead of them, atomically; their files and
    /// tombstones are deleted. Tombstones not yet persisted are applied by leaving the
    /// dead rows out; the write-ahead log is kept, since replaying it over the merged
    /// segment gives the same state.
    ///
    /// On error nothing changes. Ingest refuses points that would make segments
    /// unmergeable (a tsid with other dimensions than a stored series, a column name
    /// with another kind than a stored column): such segments come only from files
    /// written elsewhere, and merging them is an [`Error::Segment`].
    ///
    /// # Errors
    /// [`Error::Poisoned`]; segment read and write errors; I/O errors.
    pub fn merge(&mut self, positions: &[usize]) -> Result<()> {
        self.run_merge(positions, true)
    }

    fn run_merge(&mut self, positions: &[usize], final_merge: bool) -> Result<()> {
        self.check_poisoned()?;
        let Some(job) = self.plan_positions(positions, final_merge) else {
            return Ok(());
        };
        let merged = job.run();
        self.install_merge(merged)
    }

    pub(super) fn count_bloom_merge(&mut self, ored: Option<bool>) {
        match ored {
            Some(true) => self.stats.bloom_filters_ored += 1,
            Some(false) => self.stats.bloom_filters_rebuilt += 1,
            None => {}
        }
    }
}

/// The OR of the bloom filters of `inputs` when they all have one, of one shape, and the
/// OR's estimated false-positive rate is at most `fpr`; `None` means "rebuild". Returns
/// the filter and the sum of the inputs' capacities.
pub(crate) fn ored_bloom<'a>(
    inputs: impl IntoIterator<Item = &'a Segment>,
    fpr: f64,
) -> Result<Option<(tidemark_segment::SegmentBloom, u64)>> {
    let mut acc: Option<(tidemark_segment::SegmentBloom, u64)> = None;
    for seg in inputs {
        let (Some(filter), Some((_, capacity))) = (
            seg.bloom_filter().map_err(|e| seg.name_error(e))?,
            seg.bloom_params(),
        ) else {
            return Ok(None);
        };
        acc = match acc {
            None => Some((filter, capacity)),
            Some((mut a, c)) => {
                if a.union(&filter).is_err() {
                    return Ok(None);
                }
                Some((a, c.saturating_add(capacity)))
            }
        };
    }
    Ok(acc.filter(|(f, _)| f.estimated_fpr() <= fpr))
}

/// A merge prepared by [`Engine::plan_merge`], to run on any thread with
/// [`run`](Self::run) while the engine keeps ingesting, then installed with
/// [`Engine::install_merge`].
#[derive(Debug)]
pub struct MergeJob {
    ids: Vec<u64>,
    inputs: Vec<(Arc<Segment>, Tombstones)>,
    new_id: u64,
    path: PathBuf,
    options: tidemark_segment::SegmentOptions,
    keyer: Option<Arc<EventKeyer>>,
    /// Target rate of the strategy's bloom filter, if it uses one.
    bloom_fpr: Option<f64>,
}

/// A merged segment written by [`MergeJob::run`], not yet installed.
#[derive(Debug)]
pub struct MergedSegment {
    ids: Vec<u64>,
    snapshots: Vec<Tombstones>,
    new_id: u64,
    path: PathBuf,
    rows: u64,
    /// Whether its bloom filter is the OR of the inputs' (`None`: no bloom strategy).
    bloom_ored: Option<bool>,
}

impl MergeJob {
    /// Segments merged.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the job merges nothing.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Writes the merged segment (the live rows of the inputs as of
    /// [`Engine::plan_merge`]). It is not part of the engine until installed.
    ///
    /// # Errors
    /// Segment read and write errors (the partial file is removed).
    pub fn run(self) -> Result<MergedSegment> {
        let merged = crate::merge::merge_segments(
            &self.inputs,
            &self.path,
            self.options,
            self.keyer.as_deref(),
            self.bloom_fpr,
        )?;
        Ok(MergedSegment {
            ids: self.ids,
            snapshots: self.inputs.into_iter().map(|(_, t)| t).collect(),
            new_id: self.new_id,
            path: self.path,
            rows: merged.rows,
            bloom_ored: merged.bloom_ored,
        })
    }
}

impl MergedSegment {
    /// Removes the files of a merge that will not be installed (its store is gone).
    pub(crate) fn discard(self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(Tombstones::path_for(&self.path, 1));
    }
}

/// Deletes a replaced segment's files (best effort: open removes orphans). Readers of a
/// background merge may still map it; on Unix the mapping outlives the name.
pub(super) fn remove_slot_files(s: Slot) {
    let path = s.path.clone();
    let tombs = s.tomb_generation;
    drop(s);
    let _ = std::fs::remove_file(&path);
    if let Some(g) = tombs {
        let _ = std::fs::remove_file(Tombstones::path_for(&path, g));
    }
}
