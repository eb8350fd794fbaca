//! [`SegmentOptions`]: how a segment is written (block size, zstd level, id sections,
//! event mode, fast encoding), shared by both writers, and the bloom filter's sizing
//! headroom.

use crate::error::{Error, Result};
use crate::format::{DEFAULT_BLOCK_ROWS, MAX_BLOCK_ROWS};

/// Sizing headroom of the bloom filter: it is built for `rows × 5 / 4` items so that its
/// bit set stays under half full, which lets merges OR bit sets of equal shape.
pub const BLOOM_HEADROOM_NUM: u64 = 5;
/// Denominator of [`BLOOM_HEADROOM_NUM`].
pub const BLOOM_HEADROOM_DEN: u64 = 4;

/// How a segment is written.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentOptions {
    block_rows: u32,
    zstd_level: i32,
    bloom_fpr: Option<f64>,
    id_index: bool,
    events: bool,
    fast: bool,
}

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            block_rows: DEFAULT_BLOCK_ROWS,
            zstd_level: 3,
            bloom_fpr: None,
            id_index: false,
            events: false,
            fast: false,
        }
    }
}

impl SegmentOptions {
    /// Default options: 1024 rows per block, zstd level 3, no id sections.
    pub fn new() -> SegmentOptions {
        SegmentOptions::default()
    }

    /// Rows per block (1..=65536): finding one row decodes one block of this many rows.
    pub fn with_block_rows(mut self, rows: u32) -> SegmentOptions {
        self.block_rows = rows;
        self
    }

    /// zstd level of every block (see [`is_zstd_level`]: zstd's negative "fast" levels
    /// trade size for speed; 1..=22 are its usual ones).
    pub fn with_zstd_level(mut self, level: i32) -> SegmentOptions {
        self.zstd_level = level;
        self
    }

    /// Adds a bloom filter of the synthetic ids with the given target false-positive rate.
    pub fn with_bloom(mut self, fpr: f64) -> SegmentOptions {
        self.bloom_fpr = Some(fpr);
        self
    }

    /// Adds (or not) the id term index: an FST from synthetic id bytes to row.
    pub fn with_id_index(mut self, on: bool) -> SegmentOptions {
        self.id_index = on;
        self
    }

    /// Makes (or not) an *event segment*: rows of a series may share a timestamp, each
    /// row has its own id (given with [`SegmentWriter::push_with_id`]; a plain push uses
    /// the (tsid, timestamp) synthetic id), rows are ordered by (tsid, timestamp, id) and
    /// the bloom filter and id index hold these ids.
    ///
    /// [`SegmentWriter::push_with_id`]: crate::SegmentWriter::push_with_id
    pub fn with_events(mut self, on: bool) -> SegmentOptions {
        self.events = on;
        self
    }

    /// Fast encoding (or not): each block picks among the cheap encodings (timestamps:
    /// delta-of-delta or grid; gauges: XOR or integer deltas; counters: deltas or deltas
    /// of deltas) by their size before compression, and is compressed once, instead of
    /// compressing every candidate (byte-plane layouts included) and keeping the smallest.
    /// For short-lived segments (the engine's refreshes, which merges rewrite): several
    /// times faster to write, somewhat larger.
    pub fn with_fast_encoding(mut self, on: bool) -> SegmentOptions {
        self.fast = on;
        self
    }

    /// Whether blocks get the fast encoding (see
    /// [`with_fast_encoding`](Self::with_fast_encoding)).
    pub fn fast_encoding(&self) -> bool {
        self.fast
    }

    /// Whether this writes an event segment (see [`with_events`](Self::with_events)).
    pub fn events(&self) -> bool {
        self.events
    }

    /// Rows per block.
    pub fn block_rows(&self) -> u32 {
        self.block_rows
    }

    /// zstd level of every block.
    pub fn zstd_level(&self) -> i32 {
        self.zstd_level
    }

    /// Target false-positive rate of the bloom section, if one is written.
    pub fn bloom_rate(&self) -> Option<f64> {
        self.bloom_fpr
    }

    /// Whether the id term index (FST) is written.
    pub fn id_index(&self) -> bool {
        self.id_index
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.block_rows == 0 || self.block_rows > MAX_BLOCK_ROWS {
            return Err(Error::InvalidOption {
                name: "block_rows",
                detail: format!("expected 1..={MAX_BLOCK_ROWS}, found {}", self.block_rows),
            });
        }
        if !is_zstd_level(self.zstd_level) {
            return Err(Error::InvalidOption {
                name: "zstd_level",
                detail: format!("expected -7..=22 (0: stored), found {}", self.zstd_level),
            });
        }
        if let Some(fpr) = self.bloom_fpr {
            if !(fpr > 0.0 && fpr < 1.0) {
                return Err(Error::InvalidOption {
                    name: "bloom_fpr",
                    detail: format!("expected a rate in (0, 1), found {fpr}"),
                });
            }
        }
        Ok(())
    }
}

/// Whether a segment's blocks may be written with zstd `level`: zstd's negative ("fast")
/// levels down to -7, 1..=22, and 0, which here means no zstd at all (blocks stored with
/// their codecs' own packing: for segments that are soon merged; zstd's own level 0, an
/// alias of its default, is not offered, so that a level names one setting).
pub fn is_zstd_level(level: i32) -> bool {
    (-7..=22).contains(&level)
}
