//! Fixtures shared by the integration tests. Each test file is its own crate and uses
//! the part of this module it needs (`mod support;`); the point builders of each file
//! stay there, since their dimensions and metrics are what that file's tests check.

// Every test crate compiles all of this module and uses part of it.
#![allow(dead_code)]

use std::fmt::Display;
use std::time::Duration;

use tidemark_dedup::{Durability, EngineConfig, Outcome, Strategy};
use tidemark_segment::Point;
use tidemark_tsid::Tsid;

/// One hour in milliseconds.
pub const HOUR: i64 = 3_600_000;
/// One day in milliseconds.
pub const DAY: i64 = 24 * HOUR;

/// The tsid whose 20 bytes are all `byte`.
pub fn tsid(byte: u8) -> Tsid {
    Tsid::from_bytes([byte; 20])
}

/// A point of series `s` at `ts` with the one dimension `pod = p{s}`; callers add the
/// metrics.
pub fn pod_point(tsid: Tsid, ts: i64, s: impl Display) -> Point {
    Point::new(tsid, ts).dim("pod", format!("p{s}"))
}

/// The engine settings of the model tests: refreshes every `refresh_rows` points and
/// 4-row blocks, so a few dozen steps cross refreshes, merges and block edges; an fsync
/// once an hour, since the models reopen but never crash.
pub fn model_config(strategy: Strategy, refresh_rows: usize, merge_factor: usize) -> EngineConfig {
    EngineConfig::new()
        .with_strategy(strategy)
        .with_refresh_rows(refresh_rows)
        .with_block_rows(4)
        .with_merge_factor(merge_factor)
        .with_durability(Durability::Interval(Duration::from_secs(3600)))
}

/// Asserts that every outcome is a conflict: what re-ingesting stored points must give.
pub fn assert_all_conflicts(outcomes: impl IntoIterator<Item = Outcome>) {
    for o in outcomes {
        assert!(matches!(o, Outcome::Conflict { .. }), "{o:?}");
    }
}
