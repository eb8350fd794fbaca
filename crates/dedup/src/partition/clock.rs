//! The store's clocks: event time (the high-water mark, the newest timestamp accepted,
//! which the late window, sealing and retention are measured against) and the wall
//! clock (for sealing a partition that stopped receiving writes).

use super::PartitionedEngine;
use crate::engine::Engine;
use crate::error::Result;

impl PartitionedEngine {
    /// The newest timestamp accepted (`None` before the first, or for a single engine).
    pub fn high_water_ms(&self) -> Option<i64> {
        self.manifest
            .as_ref()
            .map(|m| m.high_water_ms)
            .filter(|h| *h != i64::MIN)
    }

    /// The store's clock: the newest timestamp accepted (`i64::MIN` before any, and for
    /// the single-engine layout).
    pub(super) fn high_water(&self) -> i64 {
        self.manifest.as_ref().map_or(i64::MIN, |m| m.high_water_ms)
    }

    /// Moves the clock to `high` if that is later. The clock is kept in memory and
    /// persisted with the next manifest switch (a new partition, a seal, retention) or by
    /// refresh and close: a crash may set it back to then, which only widens the late
    /// window for a moment.
    pub(super) fn advance_clock(&mut self, high: i64) {
        if let Some(m) = &mut self.manifest
            && high > m.high_water_ms
        {
            m.high_water_ms = high;
            self.clock_unsaved = true;
        }
    }

    /// Writes the manifest if the clock moved since it was last written.
    pub(super) fn save_clock(&mut self) -> Result<()> {
        if let Some(m) = &self.manifest
            && self.clock_unsaved
        {
            m.write(&self.dir)?;
            self.clock_unsaved = false;
        }
        Ok(())
    }
}

/// What tells whether a partition was written to between two `maintain` calls: any
/// write (create, index, delete) moves one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WriteMark {
    checks: u64,
    live: u64,
    deleted: u64,
    buffered: usize,
}

impl WriteMark {
    pub(super) fn of(e: &Engine) -> WriteMark {
        WriteMark {
            checks: e.stats().checks,
            live: e.live_count(),
            deleted: e.deleted_rows(),
            buffered: e.buffered(),
        }
    }
}

/// The wall-clock time, epoch milliseconds (0 if the clock is before the epoch).
pub(super) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
