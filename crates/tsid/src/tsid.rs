//! The `_tsid` value and its byte layout.
//!
//! ```text
//! byte  0      names byte: byte 0 of the names digest,
//!              SipHash-1-3-128(NAMES_KEY, sorted length-prefixed names)
//! bytes 1..4   value bytes: top byte of SipHash-1-3-64(VALUES_KEY, value i)
//!              for the first 3 dimensions in name order, 0x00 when absent
//! bytes 4..20  SipHash-1-3-128(TSID_KEY, canonical form), h1 LE then h2 LE
//! ```
//!
//! The canonical form starts with the names digest, then the tagged values
//! (see `docs/tsid.md`).

use std::fmt;
use std::num::NonZeroU32;

use crate::error::{Error, Result};
use crate::hex;

/// Length of a `_tsid` in bytes: [`TSID_PREFIX_LEN`] sortable bytes, then a
/// [`TSID_HASH_LEN`]-byte hash of the canonical dimensions.
pub const TSID_LEN: usize = TSID_PREFIX_LEN + TSID_HASH_LEN;

/// Length of the sortable prefix: one byte for the dimension names and one
/// for each of the first [`TSID_PREFIX_VALUES`] values.
pub const TSID_PREFIX_LEN: usize = 1 + TSID_PREFIX_VALUES;

/// How many leading dimension values (in name order) give a prefix byte.
pub const TSID_PREFIX_VALUES: usize = 3;

/// Length of the hash part of a `_tsid` (128 bits).
pub const TSID_HASH_LEN: usize = 16;

/// SipHash key of the 128-bit hash over the canonical form. Changing it
/// changes every tsid: it is part of the format.
pub(crate) const TSID_KEY: [u8; 16] = *b"tidemark:tsid:v1";
/// SipHash key of the names digest.
pub(crate) const NAMES_KEY: [u8; 16] = *b"tidemark:name:v1";
/// SipHash key of the value bytes.
pub(crate) const VALUES_KEY: [u8; 16] = *b"tidemark:valu:v1";

/// A time-series id: [`TSID_LEN`] bytes that are equal for equal dimension
/// sets (and metric names, when they join the identity) and sort related
/// series together.
///
/// Its `Ord` is the bytewise order. `Display` writes lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tsid([u8; TSID_LEN]);

impl Tsid {
    /// Wraps raw tsid bytes (as stored in a segment).
    pub const fn from_bytes(bytes: [u8; TSID_LEN]) -> Tsid {
        Tsid(bytes)
    }

    /// Reads a tsid from a slice.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidIdLength`] when the slice is not [`TSID_LEN`] bytes.
    pub fn try_from_slice(bytes: &[u8]) -> Result<Tsid> {
        <[u8; TSID_LEN]>::try_from(bytes)
            .map(Tsid)
            .map_err(|_| Error::InvalidIdLength {
                expected: TSID_LEN,
                found: bytes.len(),
            })
    }

    /// Parses the hex form written by `Display`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidHex`] on a wrong length or a non-hex character.
    pub fn from_hex(text: &str) -> Result<Tsid> {
        let mut bytes = [0u8; TSID_LEN];
        hex::decode(text, &mut bytes)?;
        Ok(Tsid(bytes))
    }

    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; TSID_LEN] {
        &self.0
    }

    /// The tsid as two integers whose order is the tsid's byte order: a sort of many
    /// tsids compares these instead of calling `memcmp` on 20 bytes.
    pub fn sort_key(&self) -> (u128, u32) {
        let [h @ .., l0, l1, l2, l3] = self.0;
        (u128::from_be_bytes(h), u32::from_be_bytes([l0, l1, l2, l3]))
    }

    /// The sortable prefix: names byte, then the leading values' bytes.
    pub fn prefix(&self) -> [u8; TSID_PREFIX_LEN] {
        let mut p = [0u8; TSID_PREFIX_LEN];
        p.copy_from_slice(self.0.split_at(TSID_PREFIX_LEN).0);
        p
    }

    /// The 128-bit hash of the canonical form, as a little-endian `u128`
    /// (`h1 | h2 << 64`).
    pub fn hash128(&self) -> u128 {
        let mut h = [0u8; TSID_HASH_LEN];
        h.copy_from_slice(self.0.split_at(TSID_PREFIX_LEN).1);
        u128::from_le_bytes(h)
    }

    /// A 64-bit hash for choosing a shard or partition: the first 8 bytes
    /// of the 128-bit hash part, big-endian. It is uniform (unlike the
    /// prefix, which clusters on purpose) and stable across versions.
    pub fn routing_hash(&self) -> u64 {
        let mut h = [0u8; 8];
        h.copy_from_slice(self.0.split_at(TSID_PREFIX_LEN).1.split_at(8).0);
        u64::from_be_bytes(h)
    }

    /// The shard in `0..num_shards` for this series, by multiply-shift on
    /// the high 32 bits of [`routing_hash`](Self::routing_hash) (no modulo
    /// bias beyond 2^-32, no division).
    pub fn shard(&self, num_shards: NonZeroU32) -> u32 {
        let high = self.routing_hash() >> 32;
        // high < 2^32 and num_shards < 2^32, so the product fits in u64 and
        // the shifted result is < num_shards.
        ((high * u64::from(num_shards.get())) >> 32) as u32
    }
}

impl fmt::Display for Tsid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; TSID_LEN * 2];
        f.write_str(hex::encode(&self.0, &mut buf))
    }
}

impl fmt::Debug for Tsid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tsid({self})")
    }
}

impl std::str::FromStr for Tsid {
    type Err = Error;

    fn from_str(s: &str) -> Result<Tsid> {
        Tsid::from_hex(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_key_orders_as_the_bytes() {
        let mut tsids: Vec<Tsid> = (0u32..200)
            .map(|i| {
                let mut b = [0u8; TSID_LEN];
                let x = i.wrapping_mul(0x9e37_79b9);
                b[(i % 20) as usize] = x as u8;
                b[19 - (i % 7) as usize] ^= (x >> 8) as u8;
                Tsid::from_bytes(b)
            })
            .collect();
        let mut by_key = tsids.clone();
        tsids.sort();
        by_key.sort_by_key(Tsid::sort_key);
        assert_eq!(tsids, by_key);
    }

    #[test]
    fn hex_round_trip() {
        let mut b = [0u8; TSID_LEN];
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i * 13) as u8;
        }
        let t = Tsid::from_bytes(b);
        assert_eq!(t.to_string().len(), 2 * TSID_LEN);
        assert_eq!(Tsid::from_hex(&t.to_string()).unwrap(), t);
        assert_eq!(t.to_string().parse::<Tsid>().unwrap(), t);
        assert!(Tsid::from_hex("zz").is_err());
    }

    #[test]
    fn shard_is_in_range() {
        let t = Tsid::from_bytes([0xff; TSID_LEN]);
        for n in [1u32, 2, 3, 7, 1000, u32::MAX] {
            let n = NonZeroU32::new(n).unwrap();
            assert!(t.shard(n) < n.get());
        }
    }
}
