//! Dedup counters.

use crate::config::Strategy;

/// Counters of the dedup check, for the engine's strategy, since the engine was opened.
///
/// A *check* is one `create` or `index` asking whether its point is already stored
/// (`delete` and `get` look points up the same way but are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DedupStats {
    /// The strategy these counters describe.
    pub strategy: Strategy,
    /// Dedup checks.
    pub checks: u64,
    /// Checks answered by the live version map (the point is buffered, not yet in a segment).
    pub live_map_hits: u64,
    /// `series-range` (and `series-range+bloom`): checks answered without looking at any
    /// segment or the live version map, the point being newer than every timestamp the
    /// engine holds for its series (in-order points).
    pub newest_negatives: u64,
    /// Segments skipped because their [min, max] timestamp cannot hold the point.
    pub segments_pruned_by_time: u64,
    /// `series-range` (and `series-range+bloom`): segments ruled out because the series is absent or the timestamp is
    /// outside the series' range in them.
    pub series_range_negatives: u64,
    /// `series-range` (and `series-range+bloom`): segments ruled out by the series' time
    /// slot map: the timestamp is inside the series' range there, in a slot that holds no
    /// row (a range widened by out-of-order points; see `tidemark_segment::TimeSlots`).
    pub slot_negatives: u64,
    /// `bloom`, `series-range+bloom`: segments whose bloom filter answered "no".
    pub bloom_negatives: u64,
    /// "Maybe" answers that verification found false: a bloom filter's (`bloom`), a
    /// series range holding the timestamp where the point is absent (`series-range`), or
    /// both (`series-range+bloom`).
    pub false_positives: u64,
    /// Exact lookups in a segment: a binary search in a series' timestamp block, or a
    /// lookup in the FST id index (`inverted`).
    pub verifications: u64,
    /// Checks that found the point live in a segment (live-map hits are counted apart).
    pub true_duplicates: u64,
    /// Time spent in verifications, in nanoseconds.
    pub verification_nanos: u64,
    /// Merges (with a bloom strategy) whose bloom filter is the OR of their inputs'
    /// filters: possible when the inputs' filters have one shape and the OR's estimated
    /// false-positive rate stays within the configured target.
    pub bloom_filters_ored: u64,
    /// Merges (with a bloom strategy) whose bloom filter was rebuilt from the rows.
    pub bloom_filters_rebuilt: u64,
}

impl DedupStats {
    pub(crate) fn new(strategy: Strategy) -> DedupStats {
        DedupStats {
            strategy,
            ..DedupStats::default()
        }
    }

    /// False positives per check (0 when there was no check).
    pub fn false_positive_rate(&self) -> f64 {
        if self.checks == 0 {
            0.0
        } else {
            self.false_positives as f64 / self.checks as f64
        }
    }
}

/// Counters of merges, since the engine was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Merges installed (synchronous and background).
    pub merges: u64,
    /// Merges that failed or were discarded because their inputs were merged away
    /// meanwhile (their inputs stay live).
    pub merges_abandoned: u64,
    /// The most live segments seen at once.
    pub peak_segments: u64,
}
