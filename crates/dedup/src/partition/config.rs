//! [`PartitionConfig`]: the settings of a partitioned store, their checks, and their
//! round trip through the `PARTITIONS` manifest that keeps them.

use super::PartitionedEngine;
use super::manifest::{self, PartManifest};
use crate::error::{Error, Result};

pub(super) const HOUR_MS: i64 = 3_600_000;
pub(super) const DAY_MS: i64 = 24 * HOUR_MS;

/// Settings of a partitioned store, fixed at creation and kept in its manifest.
///
/// Time in these rules is *event time*: the store's clock is the newest timestamp it has
/// accepted (its high-water mark), so replaying old data behaves as live data did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionConfig {
    width_ms: i64,
    retention_ms: Option<i64>,
    late_window_ms: Option<i64>,
    seal_grace_ms: i64,
    rollups: Vec<i64>,
    /// `(resolution, retention)`: rollups kept longer than the raw rows.
    rollup_retention: Vec<(i64, i64)>,
}

impl Default for PartitionConfig {
    fn default() -> Self {
        PartitionConfig {
            width_ms: DAY_MS,
            retention_ms: None,
            late_window_ms: None,
            seal_grace_ms: HOUR_MS,
            rollups: Vec::new(),
            rollup_retention: Vec::new(),
        }
    }
}

impl PartitionConfig {
    /// Defaults: partitions of one day, no retention, no late window, sealed one hour
    /// (of event time) after their end, no rollups.
    pub fn new() -> PartitionConfig {
        PartitionConfig::default()
    }

    /// Partition width (1 hour to 7 days); partitions start at multiples of it since the
    /// Unix epoch.
    pub fn with_width_ms(mut self, ms: i64) -> PartitionConfig {
        self.width_ms = ms;
        self
    }

    /// Drop partitions that end this long before the high-water mark.
    pub fn with_retention_ms(mut self, ms: Option<i64>) -> PartitionConfig {
        self.retention_ms = ms;
        self
    }

    /// Reject points older than the high-water mark minus this.
    pub fn with_late_window_ms(mut self, ms: Option<i64>) -> PartitionConfig {
        self.late_window_ms = ms;
        self
    }

    /// Seal a partition once the high-water mark is this far past its end.
    pub fn with_seal_grace_ms(mut self, ms: i64) -> PartitionConfig {
        self.seal_grace_ms = ms;
        self
    }

    /// Rollup resolutions; each must divide the partition width.
    pub fn with_rollups(mut self, mut resolutions_ms: Vec<i64>) -> PartitionConfig {
        resolutions_ms.sort_unstable();
        resolutions_ms.dedup();
        self.rollups = resolutions_ms;
        self
    }

    /// Keeps the rollup at `resolution_ms` for `retention_ms` (longer than the raw
    /// retention): a partition past the raw retention but within this one keeps that
    /// rollup and loses its raw rows and the rollups not kept as long. Setting a
    /// resolution again replaces its retention.
    pub fn with_rollup_retention_ms(
        mut self,
        resolution_ms: i64,
        retention_ms: i64,
    ) -> PartitionConfig {
        self.rollup_retention.retain(|(r, _)| *r != resolution_ms);
        self.rollup_retention.push((resolution_ms, retention_ms));
        self.rollup_retention.sort_unstable();
        self
    }

    /// How long the rollup at `resolution_ms` is kept when longer than the raw rows.
    pub fn rollup_retention_ms(&self, resolution_ms: i64) -> Option<i64> {
        self.rollup_retention
            .iter()
            .find(|(r, _)| *r == resolution_ms)
            .map(|(_, ms)| *ms)
    }

    /// Partition width in milliseconds.
    pub fn width_ms(&self) -> i64 {
        self.width_ms
    }

    /// Retention in milliseconds, if any.
    pub fn retention_ms(&self) -> Option<i64> {
        self.retention_ms
    }

    /// Late window in milliseconds, if any.
    pub fn late_window_ms(&self) -> Option<i64> {
        self.late_window_ms
    }

    /// Seal grace in milliseconds.
    pub fn seal_grace_ms(&self) -> i64 {
        self.seal_grace_ms
    }

    /// Rollup resolutions in milliseconds, ascending.
    pub fn rollups(&self) -> &[i64] {
        &self.rollups
    }

    /// Checks the configuration as opening a partitioned store does, so that a caller
    /// holding one for later (a server's default for the indices it creates) can refuse
    /// it at startup.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the setting: a width outside 1 h–7 d, a rollup
    /// resolution that does not divide it, a retention or late window that is not
    /// positive, a negative seal grace, too many rollups.
    pub fn check(&self) -> Result<()> {
        let bad = |name, detail: String| Err(Error::InvalidConfig { name, detail });
        if !(HOUR_MS..=7 * DAY_MS).contains(&self.width_ms) {
            return bad(
                "partition",
                format!("the width must be 1h to 7d, found {} ms", self.width_ms),
            );
        }
        for r in &self.rollups {
            if *r <= 0 || self.width_ms % r != 0 {
                return bad(
                    "rollups",
                    format!(
                        "a resolution must divide the partition width {} ms, found {r} ms",
                        self.width_ms
                    ),
                );
            }
        }
        for (name, v) in [
            ("retention", self.retention_ms),
            ("late_window", self.late_window_ms),
        ] {
            if v.is_some_and(|v| v <= 0) {
                return bad(name, "must be positive".to_owned());
            }
        }
        if self.seal_grace_ms < 0 {
            return bad("seal_grace", "must not be negative".to_owned());
        }
        if self.rollups.len() > manifest::MAX_ROLLUPS {
            return bad(
                "rollups",
                format!(
                    "at most {} resolutions, found {}",
                    manifest::MAX_ROLLUPS,
                    self.rollups.len()
                ),
            );
        }
        for (r, ms) in &self.rollup_retention {
            if !self.rollups.contains(r) {
                return bad(
                    "rollup_retention",
                    format!(
                        "{r} ms is not one of the rollup resolutions {:?}",
                        self.rollups
                    ),
                );
            }
            match self.retention_ms {
                None => {
                    return bad(
                        "rollup_retention",
                        "needs a retention for the raw rows (rollups outlive it)".to_owned(),
                    );
                }
                Some(raw) if *ms <= raw => {
                    return bad(
                        "rollup_retention",
                        format!(
                            "the rollup at {r} ms must be kept longer than the raw rows ({raw} ms), found {ms} ms"
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

impl PartitionConfig {
    /// A new store's manifest: these settings, no partition, no clock yet.
    pub(super) fn into_manifest(self) -> PartManifest {
        PartManifest {
            width_ms: self.width_ms,
            retention_ms: self.retention_ms,
            late_window_ms: self.late_window_ms,
            seal_grace_ms: self.seal_grace_ms,
            high_water_ms: i64::MIN,
            dropped_partitions: 0,
            dropped_rows: 0,
            expired_partitions: 0,
            expired_rows: 0,
            rollup_retention_ms: self
                .rollups
                .iter()
                .map(|r| self.rollup_retention_ms(*r))
                .collect(),
            rollups: self.rollups,
            partitions: Vec::new(),
        }
    }

    /// The settings a manifest keeps.
    pub(super) fn of_manifest(m: &PartManifest) -> PartitionConfig {
        PartitionConfig {
            width_ms: m.width_ms,
            retention_ms: m.retention_ms,
            late_window_ms: m.late_window_ms,
            seal_grace_ms: m.seal_grace_ms,
            rollups: m.rollups.clone(),
            rollup_retention: m
                .rollups
                .iter()
                .zip(&m.rollup_retention_ms)
                .filter_map(|(r, k)| k.map(|k| (*r, k)))
                .collect(),
        }
    }
}

impl PartitionedEngine {
    /// The partition settings (`None` for a single-engine store).
    pub fn partition_config(&self) -> Option<PartitionConfig> {
        self.manifest.as_ref().map(PartitionConfig::of_manifest)
    }
}
