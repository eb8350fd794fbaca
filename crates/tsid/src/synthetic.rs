//! The synthetic `_id`: a tsid and a timestamp in one sortable key.
//!
//! ```text
//! bytes  0..20  tsid
//! bytes 20..28  (ts_millis as u64) ^ (1 << 63), big-endian
//! ```
//!
//! Flipping the sign bit maps `i64::MIN..=i64::MAX` onto `0..=u64::MAX` in
//! order, so the bytes compare exactly as `(tsid, ts_millis)` do, negative
//! timestamps included. The text form is the 28 bytes in unpadded base64url
//! (38 characters); it round-trips but does not sort like the bytes.

use std::fmt;
use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::{Error, Result};
use crate::tsid::{TSID_LEN, Tsid};

/// Length of a synthetic id in bytes: a tsid and an 8-byte timestamp.
pub const SYNTHETIC_ID_LEN: usize = TSID_LEN + 8;

/// Length of a synthetic id's text form: `ceil(28 * 8 / 6)` base64url
/// characters, no padding.
pub const SYNTHETIC_ID_TEXT_LEN: usize = (SYNTHETIC_ID_LEN * 8).div_ceil(6);

const SIGN_BIT: u64 = 1 << 63;

/// A document id computed from its series and timestamp, never stored.
///
/// Its `Ord` is `(tsid, ts_millis)`, which is also the order of
/// [`to_bytes`](Self::to_bytes). `Display` writes the text form and
/// [`parse`](Self::parse) reads it back.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SyntheticId {
    tsid: Tsid,
    ts_millis: i64,
}

impl SyntheticId {
    /// The id of the point of series `tsid` at `ts_millis` (milliseconds
    /// since the Unix epoch; any `i64`).
    pub const fn new(tsid: Tsid, ts_millis: i64) -> SyntheticId {
        SyntheticId { tsid, ts_millis }
    }

    /// The series id.
    pub const fn tsid(&self) -> Tsid {
        self.tsid
    }

    /// The timestamp, in milliseconds since the Unix epoch.
    pub const fn ts_millis(&self) -> i64 {
        self.ts_millis
    }

    /// The bytes, which sort as `(tsid, ts_millis)`.
    pub fn to_bytes(&self) -> [u8; SYNTHETIC_ID_LEN] {
        let mut out = [0u8; SYNTHETIC_ID_LEN];
        let (t, ts) = out.split_at_mut(TSID_LEN);
        t.copy_from_slice(self.tsid.as_bytes());
        ts.copy_from_slice(&((self.ts_millis as u64) ^ SIGN_BIT).to_be_bytes());
        out
    }

    /// Reads the bytes written by [`to_bytes`](Self::to_bytes).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidIdLength`] unless `bytes` is [`SYNTHETIC_ID_LEN`]
    /// long; every value of that length is a valid id.
    pub fn from_bytes(bytes: &[u8]) -> Result<SyntheticId> {
        if bytes.len() != SYNTHETIC_ID_LEN {
            return Err(Error::InvalidIdLength {
                expected: SYNTHETIC_ID_LEN,
                found: bytes.len(),
            });
        }
        let (t, ts) = bytes.split_at(TSID_LEN);
        let tsid = Tsid::try_from_slice(t)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(ts);
        let ts_millis = (u64::from_be_bytes(raw) ^ SIGN_BIT) as i64;
        Ok(SyntheticId { tsid, ts_millis })
    }

    /// Writes the text form into `buf` and returns it, without allocating.
    pub fn encode_text<'b>(&self, buf: &'b mut [u8; SYNTHETIC_ID_TEXT_LEN]) -> &'b str {
        let n = URL_SAFE_NO_PAD
            .encode_slice(self.to_bytes(), buf)
            .unwrap_or_default();
        // base64 output is ASCII.
        std::str::from_utf8(buf.get(..n).unwrap_or_default()).unwrap_or_default()
    }

    /// The text form as a `String` (what `Display` writes).
    pub fn to_text(&self) -> String {
        let mut buf = [0u8; SYNTHETIC_ID_TEXT_LEN];
        self.encode_text(&mut buf).to_owned()
    }

    /// Parses the text form.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidIdLength`] unless `text` is
    /// [`SYNTHETIC_ID_TEXT_LEN`] characters; [`Error::InvalidIdText`] for a
    /// character outside the base64url alphabet, padding, or non-zero
    /// trailing bits (so each id has exactly one text form).
    pub fn parse(text: &str) -> Result<SyntheticId> {
        if text.len() != SYNTHETIC_ID_TEXT_LEN {
            return Err(Error::InvalidIdLength {
                expected: SYNTHETIC_ID_TEXT_LEN,
                found: text.len(),
            });
        }
        // The decoder's own size estimate wants a little slack.
        let mut buf = [0u8; SYNTHETIC_ID_LEN + 3];
        let n = URL_SAFE_NO_PAD
            .decode_slice(text, &mut buf)
            .map_err(|e| Error::InvalidIdText {
                text: crate::error::cut(text, 64),
                reason: e.to_string(),
            })?;
        SyntheticId::from_bytes(buf.get(..n).unwrap_or_default())
    }

    /// The routing hash of the series (see [`Tsid::routing_hash`]): all
    /// points of a series go to the same shard.
    pub fn routing_hash(&self) -> u64 {
        self.tsid.routing_hash()
    }

    /// The shard of the series (see [`Tsid::shard`]).
    pub fn shard(&self, num_shards: NonZeroU32) -> u32 {
        self.tsid.shard(num_shards)
    }
}

impl fmt::Display for SyntheticId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; SYNTHETIC_ID_TEXT_LEN];
        f.write_str(self.encode_text(&mut buf))
    }
}

impl fmt::Debug for SyntheticId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SyntheticId({self}: {}@{})", self.tsid, self.ts_millis)
    }
}

impl std::str::FromStr for SyntheticId {
    type Err = Error;

    fn from_str(s: &str) -> Result<SyntheticId> {
        SyntheticId::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_length_is_38() {
        assert_eq!(SYNTHETIC_ID_TEXT_LEN, 38);
        let id = SyntheticId::new(Tsid::from_bytes([7; TSID_LEN]), -5);
        assert_eq!(id.to_text().len(), 38);
        assert_eq!(SyntheticId::parse(&id.to_text()).unwrap(), id);
    }

    #[test]
    fn sign_flip_orders_negative_timestamps_first() {
        let t = Tsid::from_bytes([0; TSID_LEN]);
        let ids = [i64::MIN, -1, 0, 1, i64::MAX].map(|ts| SyntheticId::new(t, ts).to_bytes());
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn non_canonical_trailing_bits_are_rejected() {
        let id = SyntheticId::new(Tsid::from_bytes([0; TSID_LEN]), 0).to_text();
        // 28 bytes leave 4 unused bits in the last character; 'B' sets one.
        let mut bad = id[..37].to_owned();
        bad.push('B');
        assert!(matches!(
            SyntheticId::parse(&bad),
            Err(Error::InvalidIdText { .. })
        ));
    }
}
