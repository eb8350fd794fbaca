//! Cumulative counters of an index, kept across processes in `counters.json`.

use std::path::Path;

use serde_json::{Map, Value, json};
use tidemark_dedup::DedupStats;

use crate::bulk::ItemStatus;
use crate::error::{Error, Result};

/// What write items did, by result: the one list of them, kept by an index's
/// [`Counters`] and by an ingest's [`IngestSummary`](crate::IngestSummary).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemCounts {
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
}

impl ItemCounts {
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

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &ItemCounts) {
        let mut other = *other;
        for ((_, mine), (_, theirs)) in self.slots().into_iter().zip(other.slots()) {
            *mine += *theirs;
        }
    }

    /// Every count with its name, in a fixed order.
    pub fn pairs(&self) -> Vec<(&'static str, u64)> {
        let mut copy = *self;
        copy.slots().into_iter().map(|(n, v)| (n, *v)).collect()
    }

    fn slots(&mut self) -> [(&'static str, &mut u64); 8] {
        [
            ("created", &mut self.created),
            ("duplicates", &mut self.duplicates),
            ("replaced", &mut self.replaced),
            ("updated", &mut self.updated),
            ("deleted", &mut self.deleted),
            ("not_found", &mut self.not_found),
            ("errors", &mut self.errors),
            ("ignored_fields", &mut self.ignored_fields),
        ]
    }
}

/// What an index has done since it was created: per-item results and the engine's dedup
/// counters. Saved after every write call; a process killed between two saves loses the
/// counts of its last call (never documents).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Write items by result.
    pub items: ItemCounts,
    /// The engine's dedup counters, summed over the index's life (its `strategy` and
    /// timing fields are not kept across processes).
    pub dedup: DedupStats,
}

impl Counters {
    /// Every saved counter with its name in `counters.json` (and on `/metrics`, `_stats`),
    /// in a fixed order.
    fn slots(&mut self) -> Vec<(&'static str, &mut u64)> {
        let d = &mut self.dedup;
        let mut out: Vec<(&'static str, &mut u64)> = self.items.slots().into_iter().collect();
        out.extend([
            ("dedup_checks", &mut d.checks),
            ("live_map_hits", &mut d.live_map_hits),
            ("newest_negatives", &mut d.newest_negatives),
            ("segments_pruned_by_time", &mut d.segments_pruned_by_time),
            ("series_range_negatives", &mut d.series_range_negatives),
            ("slot_negatives", &mut d.slot_negatives),
            ("bloom_negatives", &mut d.bloom_negatives),
            ("false_positives", &mut d.false_positives),
            ("verifications", &mut d.verifications),
            ("true_duplicates", &mut d.true_duplicates),
        ]);
        out
    }

    /// Counts one item result.
    pub fn count(&mut self, status: &ItemStatus) {
        self.items.count(status);
    }

    /// These counters plus an engine's dedup counters.
    pub fn with_dedup(mut self, s: &DedupStats) -> Counters {
        let mut theirs = Counters {
            items: ItemCounts::default(),
            dedup: *s,
        };
        for ((_, mine), (_, add)) in self.slots().into_iter().zip(theirs.slots()) {
            *mine += *add;
        }
        self
    }

    /// The counters as a JSON object.
    pub fn to_json(&self) -> Value {
        let mut copy = *self;
        let mut m = Map::new();
        for (name, v) in copy.slots() {
            m.insert(name.to_owned(), json!(*v));
        }
        Value::Object(m)
    }

    /// `(name, value)` pairs, in a fixed order.
    pub fn pairs(&self) -> Vec<(&'static str, u64)> {
        let mut copy = *self;
        copy.slots().into_iter().map(|(n, v)| (n, *v)).collect()
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
        for (name, slot) in c.slots() {
            *slot = v.get(name).and_then(Value::as_u64).unwrap_or(0);
        }
        Ok(c)
    }

    pub(crate) fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.to_json()).map_err(Error::Json)?;
        crate::index::write_atomic(path, format!("{text}\n").as_bytes())
    }
}
