//! Time slots: which timestamps of a series' [min, max] range a segment holds, at the
//! series' own cadence, for series whose range has holes (format version 4).
//!
//! A series' range says "maybe" for every timestamp between its first and last row. When
//! points arrive out of order (a retry that overtakes earlier points, a device that
//! uploads its buffer late) a segment's range for a series covers timestamps it does not
//! hold, and every later point inside it would be verified in the column blocks for
//! nothing. A slot map removes those: with the series' smallest gap between two distinct
//! timestamps as the quantum `q`, timestamp `t` falls in slot `(t - min_ts) / q`; two
//! stored timestamps never share a slot, and a timestamp whose slot is empty is certainly
//! not in the segment. The map is one bit per slot, written only for series with holes
//! and only when it costs at most one byte per row, so in-order data pays nothing.
//!
//! Encoding, in the series table after the presence entries: a varint count of maps,
//! then per map the varint difference of its series index from the previous map's (the
//! first: the index itself; strictly increasing), the varint quantum (≥ 1, in ms) and the
//! bitmap, `ceil(slots / 8)` bytes with slot `i` in bit `i % 8` of byte `i / 8`, where
//! `slots = (max_ts - min_ts) / q + 1`. The first and last slots are set (the series' first
//! and last rows), padding bits are zero, and no more slots are set than the series has
//! rows.

use crate::error::{Error, Place, Result};
use crate::le::{Reader, put_varint};

/// Most timestamps of one series the writer keeps to build its slot map; a longer run
/// (only in large merged segments, whose holes have mostly been filled) gets none.
pub(crate) const MAX_SLOT_ROWS: usize = 1 << 16;

/// Most slots of one map (512 bytes): a series' range in a refreshed or lightly merged
/// segment, where out-of-order points leave holes; a day of 10 s points (8,640 slots) in a
/// large merged segment gets none, which bounds what maps cost in memory.
pub(crate) const MAX_SLOTS: u64 = 4096;

/// The slot map of one series in one segment. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeSlots {
    quantum: u64,
    slots: u64,
    bits: Box<[u8]>,
}

impl TimeSlots {
    /// The map of a series' sorted timestamps (ascending; equal ones allowed, as in event
    /// segments), or `None` when it would not pay: fewer than two distinct timestamps, no
    /// gap of two quanta or more (a regular series whose jitter only skips a slot now and
    /// then), more than [`MAX_SLOTS`] slots, or more than eight slots per row.
    pub(crate) fn build(ts: &[i64]) -> Option<TimeSlots> {
        let (&first, &last) = (ts.first()?, ts.last()?);
        let (mut quantum, mut widest) = (u64::MAX, 0u64);
        for w in ts.windows(2) {
            let gap = w[1].wrapping_sub(w[0]) as u64;
            if gap > 0 {
                quantum = quantum.min(gap);
                widest = widest.max(gap);
            }
        }
        if widest == 0 || widest / quantum < 2 {
            return None;
        }
        let slots = ((last.wrapping_sub(first) as u64) / quantum).checked_add(1)?;
        if slots > MAX_SLOTS || slots > 8 * ts.len() as u64 {
            return None;
        }
        let mut bits = vec![0u8; slots.div_ceil(8) as usize].into_boxed_slice();
        for &t in ts {
            let slot = (t.wrapping_sub(first) as u64) / quantum;
            if let Some(b) = bits.get_mut((slot / 8) as usize) {
                *b |= 1 << (slot % 8);
            }
        }
        Some(TimeSlots {
            quantum,
            slots,
            bits,
        })
    }

    /// The quantum: the series' smallest gap between distinct timestamps, in ms.
    pub fn quantum(&self) -> u64 {
        self.quantum
    }

    /// Number of slots in the series' range.
    pub fn slots(&self) -> u64 {
        self.slots
    }

    /// Number of slots holding a row.
    pub fn occupied(&self) -> u64 {
        self.bits.iter().map(|b| u64::from(b.count_ones())).sum()
    }

    /// Whether the segment may hold `ts` of a series whose first timestamp is `min_ts`:
    /// `false` is certain; callers check the range first.
    pub fn may_hold(&self, min_ts: i64, ts: i64) -> bool {
        if ts < min_ts {
            return false;
        }
        let slot = (ts.wrapping_sub(min_ts) as u64) / self.quantum;
        slot < self.slots
            && self
                .bits
                .get((slot / 8) as usize)
                .is_some_and(|b| b & (1 << (slot % 8)) != 0)
    }

    /// Bytes this map takes in the series table (before the table's compression), its
    /// series index delta excluded.
    pub(crate) fn encoded_len(&self) -> u64 {
        varint_len(self.quantum) + self.bits.len() as u64
    }

    /// Appends the quantum and the bitmap (the index delta is the caller's).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.quantum);
        out.extend_from_slice(&self.bits);
    }

    /// Reads the quantum and bitmap of a series spanning `min_ts..=max_ts` with `rows`
    /// rows, and checks them against it.
    pub(crate) fn decode(r: &mut Reader<'_>, min_ts: i64, max_ts: i64, rows: u64) -> Result<Self> {
        let place = Place::SeriesTable;
        let quantum = r.varint()?;
        if quantum == 0 {
            return Err(Error::corrupt(place, "time slot quantum 0"));
        }
        let slots = ((max_ts.wrapping_sub(min_ts) as u64) / quantum).saturating_add(1);
        if slots > MAX_SLOTS || slots > rows.saturating_mul(8) {
            return Err(Error::corrupt(
                place,
                format!("{slots} time slots for {rows} rows"),
            ));
        }
        let bits: Box<[u8]> = r.take(slots.div_ceil(8) as usize)?.into();
        let map = TimeSlots {
            quantum,
            slots,
            bits,
        };
        let padding = match map.bits.last() {
            Some(b) if slots % 8 != 0 => b >> (slots % 8),
            _ => 0,
        };
        if !map.bit(0) || !map.bit(slots - 1) || padding != 0 || map.occupied() > rows {
            return Err(Error::corrupt(
                place,
                "time slots disagree with the series' range or rows",
            ));
        }
        Ok(map)
    }

    fn bit(&self, slot: u64) -> bool {
        self.bits
            .get((slot / 8) as usize)
            .is_some_and(|b| b & (1 << (slot % 8)) != 0)
    }
}

/// Length of `v` as a LEB128 varint.
pub(crate) fn varint_len(mut v: u64) -> u64 {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn in_order_series_need_no_map() {
        let ts: Vec<i64> = (0..360).map(|i| 1_000 + i * 10_000 + (i % 3) - 1).collect();
        assert_eq!(TimeSlots::build(&ts), None);
    }

    #[test]
    fn jitter_that_skips_a_slot_is_no_reason_for_a_map() {
        // 4 ms of jitter on 10 s: the smallest gap is 9,996 ms, and the grid slips a
        // slot every ~2,500 points.
        let ts: Vec<i64> = (0..4000)
            .map(|i| i * 10_000 + [0, 2, -2][i as usize % 3])
            .collect();
        assert_eq!(TimeSlots::build(&ts), None);
        // One missing point is.
        let gappy: Vec<i64> = (0..400).filter(|&i| i != 200).map(|i| i * 10_000).collect();
        let map = TimeSlots::build(&gappy).unwrap();
        assert!(!map.may_hold(0, 200 * 10_000));
        // Past the largest map: none.
        let long: Vec<i64> = (0..5000)
            .filter(|&i| i != 200)
            .map(|i| i * 10_000)
            .collect();
        assert_eq!(TimeSlots::build(&long), None);
    }

    #[test]
    fn a_retry_ahead_of_its_series_leaves_holes_that_answer_no() {
        let mut ts: Vec<i64> = (0..50).map(|i| i * 10_000).collect();
        ts.push(59 * 10_000);
        let map = TimeSlots::build(&ts).unwrap();
        assert_eq!(map.quantum(), 10_000);
        assert_eq!(map.slots(), 60);
        assert_eq!(map.occupied(), 51);
        for &t in &ts {
            assert!(map.may_hold(0, t), "{t}");
        }
        for t in (50..59).map(|i| i * 10_000) {
            assert!(!map.may_hold(0, t), "{t}");
        }
        assert!(!map.may_hold(0, 60 * 10_000));
        assert!(!map.may_hold(0, -1));
    }

    #[test]
    fn encoding_round_trips_and_rejects_what_disagrees() {
        let ts = [0, 7, 14, 70, 77];
        let map = TimeSlots::build(&ts).unwrap();
        let mut out = Vec::new();
        map.encode(&mut out);
        assert_eq!(out.len() as u64, map.encoded_len());
        let mut r = Reader::new(&out, Place::SeriesTable);
        assert_eq!(TimeSlots::decode(&mut r, 0, 77, 5).unwrap(), map);
        // Another range, too few rows, a zero quantum, a truncated bitmap.
        for (min, max, rows) in [(0, 84, 5), (0, 77, 1), (1, 77, 5)] {
            let mut r = Reader::new(&out, Place::SeriesTable);
            assert!(TimeSlots::decode(&mut r, min, max, rows).is_err());
        }
        let mut r = Reader::new(&[0u8, 0xff], Place::SeriesTable);
        assert!(TimeSlots::decode(&mut r, 0, 77, 5).is_err());
        let mut r = Reader::new(&out[..out.len() - 1], Place::SeriesTable);
        assert!(TimeSlots::decode(&mut r, 0, 77, 5).is_err());
    }
}
