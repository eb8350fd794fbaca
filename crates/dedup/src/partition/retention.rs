//! Retention: partitions past it are dropped in one manifest switch, or keep some
//! rollups (past the raw retention) and lose their raw rows.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tidemark_segment::Segment;

use super::failpoint::failpoint;
use super::info::absorb;
use super::manifest::{PartManifest, PartState};
use super::{DOC_COUNT_COLUMN, ExpiredPart, MaintainReport, Part, PartitionedEngine, rollup};
use crate::error::{Error, Result};

impl PartitionedEngine {
    /// Applies retention, in **one** manifest switch: drops every partition that ends at
    /// least the retention before the high-water mark, except that a partition within
    /// a rollup's own retention (see
    /// [`PartitionConfig::with_rollup_retention_ms`](super::PartitionConfig::with_rollup_retention_ms))
    /// keeps those rollups and loses its raw rows and other rollups instead (sealed
    /// first if it was not), and a partition so kept is dropped once past every kept
    /// rollup's retention. A crash before the switch keeps everything as it was, a crash
    /// after it leaves the new state (files no longer listed are removed on open).
    /// Returns the partitions dropped whole and the raw rows they held.
    ///
    /// Failpoints (see [`FAILPOINT_ENV`](super::FAILPOINT_ENV)): `retention-before-manifest`,
    /// `retention-after-manifest`, `retention-mid-remove` (here; and
    /// `late-write-before-rebuild` in [`batch`](Self::batch)).
    ///
    /// # Errors
    /// I/O errors; seal errors.
    pub fn enforce_retention(&mut self) -> Result<(usize, u64)> {
        let r = self.retention_pass()?;
        Ok((r.dropped, r.dropped_rows))
    }

    /// The mask of the rollups (over the manifest's resolutions) a partition ending at
    /// `end` keeps when past the raw cutoff.
    fn kept_mask(m: &PartManifest, end: i64) -> u32 {
        let mut mask = 0u32;
        for (i, keep) in m.rollup_retention_ms.iter().enumerate().take(32) {
            if let Some(k) = keep
                && end > m.high_water_ms.saturating_sub(*k)
            {
                mask |= 1 << i;
            }
        }
        mask
    }

    pub(super) fn retention_pass(&mut self) -> Result<MaintainReport> {
        let mut report = MaintainReport::default();
        let Some(m) = &self.manifest else {
            return Ok(report);
        };
        let Some(r) = m.retention_ms else {
            return Ok(report);
        };
        if m.high_water_ms == i64::MIN {
            return Ok(report);
        }
        let cutoff = m.high_water_ms.saturating_sub(r);
        let mut doomed: Vec<i64> = Vec::new();
        let mut expiring: Vec<(i64, u32)> = Vec::new();
        for p in self.parts.values().filter(|p| p.end <= cutoff) {
            match Self::kept_mask(m, p.end) {
                0 => doomed.push(p.start),
                mask => expiring.push((p.start, mask)),
            }
        }
        let mut doomed_expired: Vec<i64> = Vec::new();
        let mut shrinking: Vec<(i64, u32)> = Vec::new();
        for p in self.expired.values() {
            match Self::kept_mask(m, p.end) & p.kept {
                0 => doomed_expired.push(p.start),
                mask if mask != p.kept => shrinking.push((p.start, mask)),
                _ => {}
            }
        }
        if doomed.is_empty()
            && expiring.is_empty()
            && doomed_expired.is_empty()
            && shrinking.is_empty()
        {
            return Ok(report);
        }
        // A partition that keeps rollups has them built first (its own manifest switch:
        // a crash after it leaves a sealed partition, still past the retention).
        // Rollups written before they counted their rows are rebuilt too, as nothing
        // could count them once the raw rows are gone.
        for (start, _) in &expiring {
            let stale = self.parts.get(start).is_some_and(|p| {
                p.state != PartState::Sealed
                    || p.rollups.iter().any(|(_, s)| {
                        s.as_ref().is_some_and(|s| {
                            !s.columns().iter().any(|c| c.name == DOC_COUNT_COLUMN)
                        })
                    })
            });
            if stale {
                self.seal(*start)?;
            }
        }
        let Some(m) = &self.manifest else {
            return Ok(report);
        };
        let rows_of = |starts: &mut dyn Iterator<Item = &i64>| -> u64 {
            starts
                .filter_map(|s| self.parts.get(s))
                .map(|p| p.engine.live_count())
                .sum()
        };
        let dropped_rows = rows_of(&mut doomed.iter());
        let expired_rows = rows_of(&mut expiring.iter().map(|(s, _)| s));
        let mut next = m.clone();
        next.partitions
            .retain(|(s, _)| !doomed.contains(s) && !doomed_expired.contains(s));
        for (s, st) in &mut next.partitions {
            if let Some((_, kept)) = expiring.iter().chain(&shrinking).find(|(x, _)| x == s) {
                *st = PartState::RawExpired { kept: *kept };
            }
        }
        next.dropped_partitions += (doomed.len() + doomed_expired.len()) as u64;
        next.dropped_rows += dropped_rows;
        next.expired_partitions += expiring.len() as u64;
        next.expired_rows += expired_rows;
        failpoint("retention-before-manifest");
        next.write(&self.dir)?;
        self.clock_unsaved = false;
        self.manifest = Some(next.clone());
        failpoint("retention-after-manifest");
        let mut first = true;
        for start in &doomed {
            if let Some(part) = self.parts.remove(start) {
                absorb(&mut self.retired, part.engine.stats());
                let dir = part.dir.clone();
                part.engine.close()?;
                if std::mem::take(&mut first) {
                    // Half of one partition's files gone: still invisible, still dropped.
                    remove_some(&dir.join("engine"))?;
                    failpoint("retention-mid-remove");
                }
                std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))?;
            }
        }
        for (start, kept) in &expiring {
            if let Some(part) = self.parts.remove(start) {
                absorb(&mut self.retired, part.engine.stats());
                let Part { dir, engine, .. } = part;
                engine.close()?;
                if std::mem::take(&mut first) {
                    remove_some(&dir.join("engine"))?;
                    failpoint("retention-mid-remove");
                }
                let expired = self.open_expired(&next, *start, dir, *kept)?;
                self.expired.insert(*start, expired);
            }
        }
        for start in &doomed_expired {
            if let Some(part) = self.expired.remove(start) {
                std::fs::remove_dir_all(&part.dir).map_err(Error::io(&part.dir))?;
            }
        }
        for (start, kept) in &shrinking {
            if let Some(part) = self.expired.remove(start) {
                let expired = self.open_expired(&next, *start, part.dir, *kept)?;
                self.expired.insert(*start, expired);
            }
        }
        crate::fsutil::sync_dir(&self.dir)?;
        report.dropped = doomed.len() + doomed_expired.len();
        report.dropped_rows = dropped_rows;
        report.raw_expired = expiring.len();
        Ok(report)
    }

    /// Opens a partition past the raw retention that keeps the rollups in `kept`,
    /// finishing what a crash after its manifest switch left: its raw engine and the
    /// rollup files it does not keep are removed.
    pub(super) fn open_expired(
        &self,
        m: &PartManifest,
        start: i64,
        dir: PathBuf,
        kept: u32,
    ) -> Result<ExpiredPart> {
        let engine_dir = dir.join("engine");
        if engine_dir.exists() {
            std::fs::remove_dir_all(&engine_dir).map_err(Error::io(&engine_dir))?;
        }
        let mut rollups = Vec::new();
        for (i, r) in m.rollups.iter().enumerate() {
            let path = rollup::rollup_path(&dir, *r);
            let keep = i < 32 && kept & (1 << i) != 0;
            if keep {
                let seg = if path.exists() {
                    Some(Arc::new(Segment::open(&path)?))
                } else {
                    None
                };
                rollups.push((*r, seg));
            } else if path.exists() {
                std::fs::remove_file(&path).map_err(Error::io(&path))?;
            }
        }
        crate::fsutil::sync_dir(&dir)?;
        Ok(ExpiredPart {
            start,
            end: start.saturating_add(m.width_ms),
            dir,
            rollups,
            kept,
        })
    }
}

/// Removes about half of the files of `dir` (the retention crash test's "half-deleted
/// partition").
fn remove_some(dir: &Path) -> Result<()> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(Error::io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    for path in names.iter().step_by(2) {
        std::fs::remove_file(path).map_err(Error::io(path))?;
    }
    Ok(())
}
