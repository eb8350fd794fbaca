//! Roaring bitmaps read from files: the presence bitmaps of sparse blocks and the dead
//! rows of a tombstone file.
//!
//! `roaring` 0.10's `deserialize_from` checks the values inside each container but not
//! the containers themselves: keys may repeat or come out of order, a run container may
//! hold no run at all, a run container may become an array of more than 4,096 values,
//! and bytes after the bitmap are ignored. Such a bitmap gives wrong answers (`contains`
//! and `max` assume sorted, non-empty containers) and is serialized again into bytes
//! that do not decode, or not at all (an empty container's cardinality minus one
//! underflows). Found by fuzzing tombstone files (`crates/fuzz`,
//! target `tombstones`); every bitmap read from bytes comes through here.

use std::io;

use roaring::RoaringBitmap;

/// Reads a portable roaring bitmap that fills `bytes`, refusing one whose containers are
/// out of order, repeated, empty or not in the form roaring writes for their size (one
/// pass over the values, no allocation beyond the bitmap's own).
pub(crate) fn read_bitmap(bytes: &[u8]) -> io::Result<RoaringBitmap> {
    let mut rest = bytes;
    let bitmap = RoaringBitmap::deserialize_from(&mut rest)?;
    if !rest.is_empty() {
        return Err(invalid("bytes after the bitmap"));
    }
    // Per container (a run of values sharing their high 16 bits): how many there are,
    // and how many of them, holding how many values, are small enough to be arrays.
    let mut containers = Counts::default();
    let mut run: Option<(u32, u64)> = None;
    let mut last: Option<u32> = None;
    for v in &bitmap {
        if last.is_some_and(|prev| v <= prev) {
            return Err(invalid("values out of order"));
        }
        last = Some(v);
        run = match run {
            Some((key, n)) if key == v >> 16 => Some((key, n + 1)),
            Some((_, n)) => {
                containers.add(n);
                Some((v >> 16, 1))
            }
            None => Some((v >> 16, 1)),
        };
    }
    if let Some((_, n)) = run {
        containers.add(n);
    }
    let stats = bitmap.statistics();
    if containers.all != u64::from(stats.n_containers) {
        return Err(invalid("a container is empty or repeated"));
    }
    // roaring stores a container of at most 4,096 values as an array and a larger one as
    // a bitset, and serializes it by that rule; a run container from the bytes can break
    // it (an array of 4,097 values), and its next serialization then does not decode.
    // The small containers must be exactly the arrays: their count and values match.
    if (containers.small, containers.small_values)
        != (
            u64::from(stats.n_array_containers),
            u64::from(stats.n_values_array_containers),
        )
    {
        return Err(invalid(
            "a container is stored in the wrong form for its size",
        ));
    }
    Ok(bitmap)
}

/// Containers seen, and those of at most [`ARRAY_MAX`] values and their values.
#[derive(Default)]
struct Counts {
    all: u64,
    small: u64,
    small_values: u64,
}

/// The most values roaring keeps in an array container.
const ARRAY_MAX: u64 = 4096;

impl Counts {
    fn add(&mut self, values: u64) {
        self.all += 1;
        if values <= ARRAY_MAX {
            self.small += 1;
            self.small_values += values;
        }
    }
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
