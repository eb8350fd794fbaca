//! Lookups: a series by tsid or row, a point by (tsid, timestamp) or by synthetic id
//! through the bloom filter and the id index.

use std::ops::Range;

use tidemark_tsid::{SyntheticId, Tsid};

use super::Segment;
use crate::bloom::{SegmentBloom, SegmentBloomRef};
use crate::error::{Error, Place, Result};
use crate::format::series::Series;
use crate::format::{FLAG_BLOOM, FLAG_ID_INDEX, section_bytes};
use crate::point::RowId;

impl Segment {
    /// The series with this tsid.
    pub fn series_by_tsid(&self, tsid: &Tsid) -> Option<&Series> {
        let i = self.series.binary_search_by(|s| s.tsid.cmp(tsid)).ok()?;
        self.series.get(i)
    }

    /// The series holding `row`.
    pub fn series_of_row(&self, row: RowId) -> Option<&Series> {
        if row >= self.footer.row_count {
            return None;
        }
        let i = self.series.partition_point(|s| s.first_row <= row);
        self.series.get(i.checked_sub(1)?)
    }

    /// Target false-positive rate and capacity the bloom filter was sized for.
    pub fn bloom_params(&self) -> Option<(f64, u64)> {
        (self.footer.flags & FLAG_BLOOM != 0)
            .then_some((self.meta.bloom_fpr, self.meta.bloom_capacity))
    }

    /// The bloom filter of the synthetic ids, read in place, when the segment has one.
    ///
    /// # Errors
    /// Bloom format errors (its checksum was verified on open).
    pub fn bloom(&self) -> Result<Option<SegmentBloomRef<'_>>> {
        if self.footer.flags & FLAG_BLOOM == 0 {
            return Ok(None);
        }
        let bytes = section_bytes(self.bytes(), &self.footer, 3)?;
        Ok(Some(SegmentBloomRef::new(bytes, false)?))
    }

    /// An owned copy of the bloom filter, when the segment has one (to OR filters of
    /// merged segments).
    ///
    /// # Errors
    /// Bloom format errors.
    pub fn bloom_filter(&self) -> Result<Option<SegmentBloom>> {
        if self.footer.flags & FLAG_BLOOM == 0 {
            return Ok(None);
        }
        let bytes = section_bytes(self.bytes(), &self.footer, 3)?;
        Ok(Some(SegmentBloom::from_bytes(bytes)?))
    }

    /// The id term index (synthetic id bytes → row), when the segment has one.
    ///
    /// # Errors
    /// FST format errors.
    pub fn id_index(&self) -> Result<Option<fst::Map<&[u8]>>> {
        if self.footer.flags & FLAG_ID_INDEX == 0 {
            return Ok(None);
        }
        let bytes = section_bytes(self.bytes(), &self.footer, 4)?;
        Ok(Some(fst::Map::new(bytes)?))
    }

    /// Whether the bloom filter may hold `id` (`true` when there is no filter).
    ///
    /// # Errors
    /// As [`bloom`](Self::bloom).
    pub fn may_contain_id(&self, id: &SyntheticId) -> Result<bool> {
        Ok(match self.bloom()? {
            Some(b) => b.contains(&id.to_bytes()),
            None => true,
        })
    }

    /// The row of `id` through the id term index; `None` when absent or without index.
    ///
    /// # Errors
    /// As [`id_index`](Self::id_index).
    pub fn lookup_id(&self, id: &SyntheticId) -> Result<Option<RowId>> {
        let Some(map) = self.id_index()? else {
            return Ok(None);
        };
        let key = id.to_bytes();
        guard_fst(|| map.get(key))
    }

    /// Whether the segment holds the point `id` (exact: series table, then timestamps).
    ///
    /// # Errors
    /// As [`find`](Self::find).
    pub fn contains_id(&self, id: &SyntheticId) -> Result<bool> {
        Ok(self.find(&id.tsid(), id.ts_millis())?.is_some())
    }

    /// The row of (`tsid`, `ts_millis`): a binary search in the series table, then in the
    /// series' timestamps, decoding one block (rarely two).
    ///
    /// # Errors
    /// Format errors of the timestamp block read.
    pub fn find(&self, tsid: &Tsid, ts_millis: i64) -> Result<Option<RowId>> {
        self.named(|| {
            let Ok(index) = self.series.binary_search_by(|s| s.tsid.cmp(tsid)) else {
                return Ok(None);
            };
            let Some(s) = self.series.get(index) else {
                return Ok(None);
            };
            if ts_millis < s.min_ts || ts_millis > s.max_ts {
                return Ok(None);
            }
            let br = u64::from(self.footer.block_rows);
            let last = s.first_row + s.row_count - 1;
            let (first_block, last_block) = (s.first_row / br, last / br);
            // Guess the block by interpolation: series are mostly regular.
            let span = u128::from(s.max_ts.wrapping_sub(s.min_ts) as u64);
            let into = u128::from(ts_millis.wrapping_sub(s.min_ts) as u64);
            let guess = (into * u128::from(s.row_count - 1))
                .checked_div(span)
                .map_or(s.first_row, |off| s.first_row + off as u64);
            let mut block = (guess / br).clamp(first_block, last_block);
            let mut moved_left = false;
            let mut moved_right = false;
            let mut body = Vec::new();
            let mut part = Vec::new();
            loop {
                part.clear();
                self.decode_ts_run(block as u32, index, &mut body, &mut part)?;
                let lo = s.first_row.max(block * br);
                match (part.first(), part.last()) {
                    (Some(&f), _) if ts_millis < f => {
                        // Between this part and the previous block's: absent.
                        if block == first_block || moved_right {
                            return Ok(None);
                        }
                        block -= 1;
                        moved_left = true;
                    }
                    (_, Some(&l)) if ts_millis > l => {
                        if block == last_block || moved_left {
                            return Ok(None);
                        }
                        block += 1;
                        moved_right = true;
                    }
                    (Some(_), Some(_)) => {
                        return Ok(part.binary_search(&ts_millis).ok().map(|i| lo + i as u64));
                    }
                    _ => return Ok(None),
                }
            }
        })
    }

    /// The rows of series `tsid` whose timestamp is `ts_millis`: at most one row in a
    /// time-series segment, possibly several in an event segment.
    ///
    /// # Errors
    /// Format errors of the timestamp blocks read.
    pub fn find_all(&self, tsid: &Tsid, ts_millis: i64) -> Result<Range<RowId>> {
        self.named(|| {
            let Some(hit) = self.find(tsid, ts_millis)? else {
                return Ok(0..0);
            };
            if !self.is_events() {
                return Ok(hit..hit + 1);
            }
            let Some(s) = self.series_by_tsid(tsid) else {
                return Ok(hit..hit + 1);
            };
            let (first, end) = (s.first_row, s.first_row + s.row_count);
            let br = u64::from(self.footer.block_rows);
            let mut ts = Vec::new();
            let mut cached: Option<u64> = None;
            let mut ts_at = |row: RowId, ts: &mut Vec<i64>| -> Result<Option<i64>> {
                let b = row / br;
                if cached != Some(b) {
                    cached = None;
                    ts.clear();
                    self.decode_ts_block(b as u32, ts)?;
                    cached = Some(b);
                }
                Ok(ts.get((row - b * br) as usize).copied())
            };
            let mut lo = hit;
            while lo > first && ts_at(lo - 1, &mut ts)? == Some(ts_millis) {
                lo -= 1;
            }
            let mut hi = hit + 1;
            while hi < end && ts_at(hi, &mut ts)? == Some(ts_millis) {
                hi += 1;
            }
            Ok(lo..hi)
        })
    }
}

/// Runs an `fst` read. `fst` 0.4 trusts the structure of the bytes it is given, and a
/// malformed FST that passes the section CRC (a file forged with its checksums
/// recomputed, found by `cargo xtask fuzz`) makes it index out of bounds: that panic is
/// caught here and becomes [`Error::Corrupt`] for the id index.
pub(super) fn guard_fst<T>(read: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read))
        .map_err(|_| Error::corrupt(Place::IdIndex, "the id index is not a well-formed FST"))
}
