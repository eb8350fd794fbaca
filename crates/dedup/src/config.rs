//! Engine configuration: the dedup strategy, the WAL durability policy and refresh size.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::events::Mode;

/// How the engine decides whether a point is already stored in a segment.
///
/// Every strategy first looks in the live version map (points not yet in a segment) and
/// skips segments whose [min, max] timestamp cannot hold the point, newest segment first.
/// They differ in what each remaining segment is asked, and in what a segment stores:
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Strategy {
    /// The baseline: segments carry an FST term index of their synthetic ids (as tantivy
    /// and Lucene index an `_id` field); a lookup in it is exact.
    Inverted,
    /// The Elasticsearch 9.4 design: segments carry a bloom filter of their synthetic ids;
    /// "no" means new, "maybe" is verified in the segment's columns.
    Bloom,
    /// The default: the segment's series table gives each series' [min, max] timestamp; a
    /// series absent from the segment, or a timestamp outside its range, is certainly new
    /// there. Otherwise one timestamp block of that series is searched. No per-point
    /// structure is stored.
    #[default]
    SeriesRange,
    /// `series-range`, plus a per-segment bloom filter asked when a point falls inside its
    /// series' range, before verification: for late and out-of-order data, where a
    /// series-range "maybe" is often false. Costs the filter's bytes (see
    /// `docs/results/dedup.md` for whether it pays).
    SeriesRangeBloom,
    /// No dedup check at all, for measurement only: `create` and `index` store every
    /// point without looking for its id, so the cost of deduplication can be stated
    /// against doing nothing. Duplicates are stored (a duplicate within the buffer
    /// replaces the buffered point; across segments both stay, and a merge of segments
    /// holding the same id fails with the duplicate named). `get` and `delete` still
    /// find points by verifying each segment.
    None,
}

impl Strategy {
    /// All strategies, in a stable order.
    pub const ALL: [Strategy; 4] = [
        Strategy::Inverted,
        Strategy::Bloom,
        Strategy::SeriesRange,
        Strategy::SeriesRangeBloom,
    ];

    /// `"inverted"`, `"bloom"`, `"series-range"`, `"series-range+bloom"` or `"none"`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Inverted => "inverted",
            Strategy::Bloom => "bloom",
            Strategy::SeriesRange => "series-range",
            Strategy::SeriesRangeBloom => "series-range+bloom",
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Strategy> {
        Strategy::ALL
            .into_iter()
            .chain([Strategy::None])
            .find(|st| st.name() == s)
            .ok_or_else(|| Error::InvalidConfig {
                name: "strategy",
                detail: format!(
                    "expected inverted, bloom, series-range, series-range+bloom or none, found {s:?}"
                ),
            })
    }
}

/// When the write-ahead log is flushed to stable storage (`fsync`).
///
/// Every write call appends its records to the log file with one `write` before it
/// returns, so a crash of the *process* never loses an acknowledged write whatever the
/// policy; the policy decides what survives a crash of the *machine* (power loss).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// The default: `fsync` before every write call (a single operation or a whole batch) returns: an
    /// acknowledged write survives power loss.
    #[default]
    PerRequest,
    /// `fsync` during a write call when the last one is at least this old, and on
    /// [`Engine::sync`](crate::Engine::sync), refresh and drop. Power loss may lose the
    /// writes acknowledged in the last interval, and (the engine has no timer) those
    /// since its last write call.
    Interval(Duration),
}

/// Configuration of an [`Engine`](crate::Engine), built with the `with_*` methods.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    pub(crate) strategy: Strategy,
    pub(crate) durability: Durability,
    pub(crate) refresh_rows: usize,
    pub(crate) bloom_fpr: f64,
    pub(crate) block_rows: u32,
    pub(crate) merge_factor: usize,
    pub(crate) auto_merge: bool,
    pub(crate) refresh_zstd_level: i32,
    pub(crate) merge_zstd_level: i32,
    pub(crate) mode: Mode,
    pub(crate) derived_tsids: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            strategy: Strategy::default(),
            durability: Durability::default(),
            refresh_rows: 100_000,
            bloom_fpr: 0.01,
            block_rows: tidemark_segment::DEFAULT_BLOCK_ROWS,
            merge_factor: 10,
            auto_merge: true,
            refresh_zstd_level: 0,
            merge_zstd_level: 3,
            mode: Mode::TimeSeries,
            derived_tsids: false,
        }
    }
}

impl EngineConfig {
    /// Defaults: `series-range`, fsync per request, a refresh every 100,000 buffered
    /// points, a 1% bloom filter (for `bloom`), 1024 rows per segment block, a merge
    /// when 10 segments share a size tier.
    pub fn new() -> EngineConfig {
        EngineConfig::default()
    }

    /// The dedup strategy. Segments are written with the section it needs (bloom filter
    /// or id index); a segment lacking it (written under another strategy) is verified in
    /// its columns instead, so reopening with another strategy stays correct.
    pub fn with_strategy(mut self, strategy: Strategy) -> EngineConfig {
        self.strategy = strategy;
        self
    }

    /// The WAL `fsync` policy.
    pub fn with_durability(mut self, durability: Durability) -> EngineConfig {
        self.durability = durability;
        self
    }

    /// Buffered points that trigger a refresh at the end of a write call (at least 1).
    pub fn with_refresh_rows(mut self, rows: usize) -> EngineConfig {
        self.refresh_rows = rows;
        self
    }

    /// Target false-positive rate of the per-segment bloom filter, in (0, 1).
    pub fn with_bloom_fpr(mut self, fpr: f64) -> EngineConfig {
        self.bloom_fpr = fpr;
        self
    }

    /// Rows per segment block (1..=65536): a verification decodes one such block.
    pub fn with_block_rows(mut self, rows: u32) -> EngineConfig {
        self.block_rows = rows;
        self
    }

    /// Segments of one size tier that trigger a merge (at least 2; default 10). See
    /// [`Engine::maybe_merge`](crate::Engine::maybe_merge).
    pub fn with_merge_factor(mut self, factor: usize) -> EngineConfig {
        self.merge_factor = factor;
        self
    }

    /// Whether the merge policy runs after each size-triggered refresh (default true).
    /// The merges run on the calling thread, unless a
    /// [`PartitionedEngine`](crate::PartitionedEngine) leaves them to the caller
    /// ([`set_background_merges`](crate::PartitionedEngine::set_background_merges)).
    pub fn with_auto_merge(mut self, on: bool) -> EngineConfig {
        self.auto_merge = on;
        self
    }

    /// zstd levels (-7..=22, 0 for none; see `tidemark_segment::is_zstd_level`) of the
    /// segments a refresh writes (default 0: no zstd, blocks keep only their codecs'
    /// packing; they are small and soon merged, and skipping zstd takes 13–22% of the
    /// instructions per point for about twice the bytes until the merge, see
    /// docs/results/dedup.md) and of merged segments (default 3).
    pub fn with_zstd_levels(mut self, refresh: i32, merge: i32) -> EngineConfig {
        self.refresh_zstd_level = refresh;
        self.merge_zstd_level = merge;
        self
    }

    /// Time series (the default) or events (see [`Mode`]). An engine must always be
    /// opened with the mode (and event-id settings) it was created with: segments record
    /// whether they hold events and opening refuses a mismatch, but a change of
    /// fingerprint method or fields cannot be detected and would let duplicates in.
    pub fn with_mode(mut self, mode: Mode) -> EngineConfig {
        self.mode = mode;
        self
    }

    /// Declares that every point's tsid is computed from its dimensions (as
    /// `tidemark_tsid::TsidComputer` does; the `tidemark` façade always does): then a
    /// point whose tsid is already buffered is not compared, dimension by dimension,
    /// with the buffered ones (10% of the façade's ingest). The first point of a tsid
    /// since the last refresh is still checked against the stored series. Default off:
    /// points built by hand may give one tsid two dimension sets, which is rejected.
    pub fn with_derived_tsids(mut self, on: bool) -> EngineConfig {
        self.derived_tsids = on;
        self
    }

    /// The mode.
    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The durability policy.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.refresh_rows == 0 {
            return Err(Error::InvalidConfig {
                name: "refresh_rows",
                detail: "expected at least 1, found 0".into(),
            });
        }
        if self.merge_factor < 2 {
            return Err(Error::InvalidConfig {
                name: "merge_factor",
                detail: format!("expected at least 2, found {}", self.merge_factor),
            });
        }
        if !(self.bloom_fpr > 0.0 && self.bloom_fpr < 1.0) {
            return Err(Error::InvalidConfig {
                name: "bloom_fpr",
                detail: format!("expected a rate in (0, 1), found {}", self.bloom_fpr),
            });
        }
        for (name, level) in [
            ("refresh_zstd_level", self.refresh_zstd_level),
            ("merge_zstd_level", self.merge_zstd_level),
        ] {
            if !tidemark_segment::is_zstd_level(level) {
                return Err(Error::InvalidConfig {
                    name,
                    detail: format!("expected -7..=22 (0: stored), found {level}"),
                });
            }
        }
        if self.block_rows == 0 || self.block_rows > tidemark_segment::MAX_BLOCK_ROWS {
            return Err(Error::InvalidConfig {
                name: "block_rows",
                detail: format!(
                    "expected 1..={}, found {}",
                    tidemark_segment::MAX_BLOCK_ROWS,
                    self.block_rows
                ),
            });
        }
        Ok(())
    }

    /// The bloom filter's target rate when the strategy writes one.
    pub(crate) fn bloom_strategy_fpr(&self) -> Option<f64> {
        match self.strategy {
            Strategy::Bloom | Strategy::SeriesRangeBloom => Some(self.bloom_fpr),
            Strategy::Inverted | Strategy::SeriesRange | Strategy::None => None,
        }
    }

    /// How a refresh writes its segment: short-lived (merges rewrite it), so fast
    /// encodings and [`refresh_zstd_level`](Self::with_zstd_levels).
    pub(crate) fn refresh_options(&self) -> tidemark_segment::SegmentOptions {
        self.segment_options(self.refresh_zstd_level, true)
    }

    /// How a merge writing `rows` rows writes its segment. A merge the caller asked for
    /// (`final_merge`: a force merge, sealing a partition) and a policy merge whose
    /// output is at least [`TIER_TOP_ROWS`] are written as data meant to stay: the
    /// smallest encodings and the configured merge level. A smaller policy merge writes a
    /// segment the next tier rewrites, so it gets fast encodings and a lower zstd level
    /// (see [`tier_zstd_level`]): the tiered merges during ingest cost about as much CPU
    /// as the whole write path, and zstd plus the encoding search were 71% of it.
    pub(crate) fn merge_options(
        &self,
        rows: u64,
        final_merge: bool,
    ) -> tidemark_segment::SegmentOptions {
        if final_merge || rows >= TIER_TOP_ROWS {
            self.segment_options(self.merge_zstd_level, false)
        } else {
            self.segment_options(tier_zstd_level(rows, self.merge_zstd_level), true)
        }
    }

    fn segment_options(&self, level: i32, fast: bool) -> tidemark_segment::SegmentOptions {
        let o = tidemark_segment::SegmentOptions::new()
            .with_block_rows(self.block_rows)
            .with_zstd_level(level)
            .with_fast_encoding(fast)
            .with_events(matches!(self.mode, Mode::Events(_)));
        match self.strategy {
            Strategy::Inverted => o.with_id_index(true),
            Strategy::Bloom => o.with_bloom(self.bloom_fpr),
            Strategy::SeriesRange | Strategy::None => o,
            Strategy::SeriesRangeBloom => o.with_bloom(self.bloom_fpr),
        }
    }
}

/// Rows from which a policy merge writes its output as data meant to stay (the smallest
/// encodings, the configured zstd level): 2^22, about 4.2 M rows. With the default
/// refresh of 100,000 rows and merge factor 10, the first tier's merges (about 1 M rows)
/// are below it and the second tier's (about 10 M) above.
pub(crate) const TIER_TOP_ROWS: u64 = 1 << 22;

/// The zstd level of a policy merge of `rows` rows below [`TIER_TOP_ROWS`], never above
/// the configured merge level `top` (and none when `top` is 0, "no zstd"). The scale
/// follows VictoriaMetrics, which picks its zstd level by the rows a merge writes,
/// negative levels for small parts (`getCompressLevel` in `lib/mergeset/table.go`):
/// zstd's level -1 compresses several times faster than level 3, and these segments
/// are rewritten by the next tier anyway.
pub(crate) fn tier_zstd_level(rows: u64, top: i32) -> i32 {
    if top == 0 {
        return 0;
    }
    let level = if rows <= 1 << 20 { -1 } else { 1 };
    level.min(top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_merges_below_the_top_tier_write_fast_and_light() {
        assert_eq!(tier_zstd_level(1_000_000, 3), -1);
        assert_eq!(tier_zstd_level(2_000_000, 3), 1);
        // Never above the configured level, and no zstd when none is configured.
        assert_eq!(tier_zstd_level(2_000_000, -3), -3);
        assert_eq!(tier_zstd_level(1_000, 0), 0);
        let c = EngineConfig::new();
        let small = c.merge_options(1_000_000, false);
        assert_eq!(small.zstd_level(), -1);
        assert!(small.fast_encoding());
        let top = c.merge_options(TIER_TOP_ROWS, false);
        assert_eq!(top.zstd_level(), 3);
        assert!(!top.fast_encoding());
        // A merge asked for writes data meant to stay, whatever its size.
        let forced = c.merge_options(10, true);
        assert_eq!(forced.zstd_level(), 3);
        assert!(!forced.fast_encoding());
        assert_eq!(c.refresh_options().zstd_level(), 0);
    }
}
