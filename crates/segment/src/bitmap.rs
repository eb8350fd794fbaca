//! Roaring bitmaps read from files: the presence bitmaps of sparse blocks and the dead
//! rows of a tombstone file.
//!
//! `roaring` 0.10's `deserialize_from` checks the values inside each container (arrays
//! sorted and unique, a bitset's count equal to its header) but not the containers
//! themselves: keys may repeat or come out of order, and in the format with run
//! containers a run container may hold no run at all or overlapping runs that make an
//! array of more than 4,096 values. Such a bitmap gives wrong answers (`contains` and
//! `max` assume sorted, non-empty containers) and is serialized again into bytes that do
//! not decode, or not at all (an empty container's cardinality minus one underflows).
//! Found by fuzzing tombstone files (`crates/fuzz`, target `tombstones`); every bitmap
//! read from bytes comes through here.
//!
//! The checks read the format's header only, not the values (RoaringFormatSpec: a
//! cookie, the container count, then a key and a cardinality per container): Tidemark's
//! bitmaps are written by roaring 0.10's `serialize_into`, which never writes run
//! containers, so the run-container form is refused, and in the other form an array
//! holds at most 4,096 values and a bitset more, by the cardinality in the header.

use std::io;

use roaring::RoaringBitmap;

/// The cookie of the portable format without run containers.
const COOKIE_NO_RUNS: u32 = 12_346;

/// Reads a portable roaring bitmap that fills `bytes`, refusing the run-container form,
/// containers out of order or repeated, and trailing bytes; the values inside each
/// container are checked by roaring. Cost: the header, then roaring's own read (no walk
/// over the values).
pub(crate) fn read_bitmap(bytes: &[u8]) -> io::Result<RoaringBitmap> {
    let word = |at: usize| -> io::Result<u32> {
        bytes
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| invalid("truncated header"))
    };
    if word(0)? != COOKIE_NO_RUNS {
        return Err(invalid(
            "not the form without run containers that Tidemark writes",
        ));
    }
    let containers = word(4)? as usize;
    let header = bytes
        .get(8..)
        .and_then(|rest| rest.get(..containers.checked_mul(4)?))
        .ok_or_else(|| invalid("truncated header"))?;
    let mut previous: Option<u16> = None;
    for entry in header.chunks_exact(4) {
        let key = u16::from_le_bytes([entry[0], entry[1]]);
        if previous.is_some_and(|p| key <= p) {
            return Err(invalid("containers out of order or repeated"));
        }
        previous = Some(key);
    }
    let mut rest = bytes;
    let bitmap = RoaringBitmap::deserialize_from(&mut rest)?;
    if !rest.is_empty() {
        return Err(invalid("bytes after the bitmap"));
    }
    Ok(bitmap)
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("roaring bitmap: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(b: &RoaringBitmap) -> Vec<u8> {
        let mut out = Vec::new();
        b.serialize_into(&mut out).unwrap();
        out
    }

    #[test]
    fn reads_what_roaring_writes() {
        for b in [
            RoaringBitmap::new(),
            (0..10).collect(),
            [1, 70_000, 1 << 31].into_iter().collect(),
            (0..100_000).step_by(3).collect(),
            (0..200_000).chain(300_000..300_010).collect(),
            (0..u32::MAX).step_by(65_537).collect(),
        ] {
            assert_eq!(read_bitmap(&bytes(&b)).unwrap(), b);
        }
    }

    #[test]
    fn rejects_empty_run_containers() {
        // Cookie 12347 with one container, a run container holding zero runs: roaring
        // accepts it, then panics serializing it.
        let mut raw = Vec::new();
        raw.extend_from_slice(&12347u32.to_le_bytes());
        raw.push(1); // run bitmap: container 0 is a run container
        raw.extend_from_slice(&[0, 0, 0, 0]); // key 0, cardinality - 1 = 0
        raw.extend_from_slice(&[0, 0]); // no runs
        assert!(RoaringBitmap::deserialize_from(&raw[..]).is_ok());
        assert!(read_bitmap(&raw).is_err());
    }

    #[test]
    fn rejects_an_array_container_past_4096_values() {
        // From a tombstone file the `tombstones` fuzz target made: one run container of
        // the runs 0..=0, 0..=4096 and 0..=0, which roaring keeps as an array of 4,097
        // values and serializes as such, a form it then reads as a bitset.
        let raw = [
            0x3b, 0x30, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0xe8, 0x03, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let b = RoaringBitmap::deserialize_from(&raw[..]).unwrap();
        let mut out = Vec::new();
        b.serialize_into(&mut out).unwrap();
        assert!(RoaringBitmap::deserialize_from(&out[..]).is_err());
        assert!(read_bitmap(&raw).is_err());
    }

    #[test]
    fn rejects_a_bitset_whose_count_is_not_its_header() {
        let mut raw = bytes(&(0..5_000).collect());
        // The bitset of container 0 starts after the cookie, count, key/cardinality and
        // offset: clear one of its bits.
        raw[16] &= !1;
        assert!(read_bitmap(&raw).is_err());
    }

    #[test]
    fn rejects_truncated_headers() {
        let raw = bytes(&(0..10).collect());
        for cut in 0..12 {
            assert!(read_bitmap(&raw[..cut]).is_err(), "{cut}");
        }
    }

    #[test]
    fn rejects_trailing_bytes() {
        let mut raw = bytes(&(0..10).collect());
        raw.push(0);
        assert!(RoaringBitmap::deserialize_from(&raw[..]).is_ok());
        assert!(read_bitmap(&raw).is_err());
    }

    #[test]
    fn rejects_repeated_and_unsorted_keys() {
        // No-run format: two array containers of one value each.
        let two = |k0: u16, k1: u16| {
            let mut raw = Vec::new();
            raw.extend_from_slice(&12346u32.to_le_bytes());
            raw.extend_from_slice(&2u32.to_le_bytes());
            for k in [k0, k1] {
                raw.extend_from_slice(&k.to_le_bytes());
                raw.extend_from_slice(&0u16.to_le_bytes());
            }
            raw.extend_from_slice(&24u32.to_le_bytes());
            raw.extend_from_slice(&26u32.to_le_bytes());
            raw.extend_from_slice(&5u16.to_le_bytes());
            raw.extend_from_slice(&9u16.to_le_bytes());
            raw
        };
        assert!(read_bitmap(&two(0, 1)).is_ok());
        assert!(read_bitmap(&two(0, 0)).is_err());
        assert!(read_bitmap(&two(1, 0)).is_err());
    }
}
