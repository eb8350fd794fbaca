//! Cumulative counters of an index, kept across processes in `counters.json`.

use std::path::Path;

use serde_json::{Map, Value, json};
use tidemark_dedup::DedupStats;

use crate::bulk::ItemStatus;
use crate::error::{Error, Result};

/// What an index has done since it was created: per-item results and the engine's dedup
/// counters. Saved after every write call; a process killed between two saves loses the
/// counts of its last call (never documents).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Documents created (by `create`, or by `index` of a new `_id`).
    pub created: u64,
    /// `create`s of a stored `_id`: idempotent no-ops (409).
    pub duplicates: u64,
    /// `index`es that replaced a stored document.
    pub replaced: u64,
    /// Partial updates.
    pub updated: u64,
    /// Deletes.
    pub deleted: u64,
    /// Deletes and updates of an absent `_id`.
    pub not_found: u64,
    /// Items that failed (malformed line, wrong type, ...).
    pub errors: u64,
    /// Undeclared fields dropped (`"dynamic": "ignore"`).
    pub ignored_fields: u64,
    /// Engine dedup checks.
    pub dedup_checks: u64,
    /// Checks answered by the live version map.
    pub live_map_hits: u64,
    /// Checks answered by the series' newest timestamp (an in-order point).
    pub newest_negatives: u64,
    /// Segments skipped by their time range.
    pub segments_pruned_by_time: u64,
    /// Segments ruled out by the series range.
    pub series_range_negatives: u64,
    /// Segments ruled out by a series' time slot map (inside its range, in a hole).
    pub slot_negatives: u64,
    /// Segments ruled out by their bloom filter.
    pub bloom_negatives: u64,
    /// "Maybe" answers that verification found false.
    pub false_positives: u64,
    /// Exact lookups in segments.
    pub verifications: u64,
    /// Checks that found the document in a segment.
    pub true_duplicates: u64,
}

const NAMES: [&str; 18] = [
    "created",
    "duplicates",
    "replaced",
    "updated",
    "deleted",
    "not_found",
    "errors",
    "ignored_fields",
    "dedup_checks",
    "live_map_hits",
    "newest_negatives",
    "segments_pruned_by_time",
    "series_range_negatives",
    "slot_negatives",
    "bloom_negatives",
    "false_positives",
    "verifications",
    "true_duplicates",
];

impl Counters {
    fn slots(&mut self) -> [&mut u64; 18] {
        [
            &mut self.created,
            &mut self.duplicates,
            &mut self.replaced,
            &mut self.updated,
            &mut self.deleted,
            &mut self.not_found,
            &mut self.errors,
            &mut self.ignored_fields,
            &mut self.dedup_checks,
            &mut self.live_map_hits,
            &mut self.newest_negatives,
            &mut self.segments_pruned_by_time,
            &mut self.series_range_negatives,
            &mut self.slot_negatives,
            &mut self.bloom_negatives,
            &mut self.false_positives,
            &mut self.verifications,
            &mut self.true_duplicates,
        ]
    }

    /// Counts one item result.
    pub fn count(&mut self, status: &ItemStatus) {
        match status {
            ItemStatus::Created | ItemStatus::Indexed { replaced: false } => self.created += 1,
            ItemStatus::Duplicate => self.duplicates += 1,
            ItemStatus::Indexed { replaced: true } => self.replaced += 1,
            ItemStatus::Updated => self.updated += 1,
            ItemStatus::Deleted => self.deleted += 1,
            ItemStatus::NotFound => self.not_found += 1,
            ItemStatus::Error(_) => self.errors += 1,
        }
    }

    /// These counters plus an engine's dedup counters.
    pub fn with_dedup(mut self, s: &DedupStats) -> Counters {
        self.dedup_checks += s.checks;
        self.live_map_hits += s.live_map_hits;
        self.newest_negatives += s.newest_negatives;
        self.segments_pruned_by_time += s.segments_pruned_by_time;
        self.series_range_negatives += s.series_range_negatives;
        self.slot_negatives += s.slot_negatives;
        self.bloom_negatives += s.bloom_negatives;
        self.false_positives += s.false_positives;
        self.verifications += s.verifications;
        self.true_duplicates += s.true_duplicates;
        self
    }

    /// The counters as a JSON object.
    pub fn to_json(&self) -> Value {
        let mut copy = *self;
        let mut m = Map::new();
        for (name, v) in NAMES.iter().zip(copy.slots()) {
            m.insert((*name).to_owned(), json!(*v));
        }
        Value::Object(m)
    }

    /// `(name, value)` pairs, in a fixed order.
    pub fn pairs(&self) -> Vec<(&'static str, u64)> {
        let mut copy = *self;
        NAMES
            .iter()
            .copied()
            .zip(copy.slots().map(|v| *v))
            .collect()
    }

    pub(crate) fn load(path: &Path) -> Result<Counters> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Counters::default()),
            Err(e) => return Err(Error::io(path)(e)),
        };
        // A damaged counters file is not worth refusing the index for: counting restarts.
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let mut c = Counters::default();
        for (name, slot) in NAMES.iter().zip(c.slots()) {
            *slot = v.get(*name).and_then(Value::as_u64).unwrap_or(0);
        }
        Ok(c)
    }

    pub(crate) fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.to_json()).map_err(Error::Json)?;
        crate::index::write_atomic(path, format!("{text}\n").as_bytes())
    }
}
