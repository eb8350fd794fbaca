//! Little-endian and varint field codecs over the workspace's one little-endian reader
//! ([`tidemark_bloom::le`]). Readers return [`Error::Truncated`] or [`Error::Corrupt`] on
//! short or malformed input instead of panicking.

use tidemark_bloom::le::{LeReader, Truncated};
pub(crate) use tidemark_bloom::le::{put_i64, put_u16, put_u32, put_u64};

use crate::error::{Error, Place, Result};

/// A cursor over encoded bytes, naming its [`Place`] in errors: the workspace's
/// [`LeReader`] plus this format's varints.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    inner: LeReader<'a>,
    place: Place,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], place: Place) -> Self {
        Reader {
            inner: LeReader::new(bytes),
            place,
        }
    }

    pub(crate) fn place(&self) -> Place {
        self.place
    }

    pub(crate) fn remaining(&self) -> usize {
        self.inner.remaining()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        self.inner.take(n).map_err(truncated(self.place))
    }

    pub(crate) fn magic(&mut self) -> Result<[u8; 4]> {
        self.inner.array().map_err(truncated(self.place))
    }

    #[inline]
    pub(crate) fn u8(&mut self) -> Result<u8> {
        self.inner.u8().map_err(truncated(self.place))
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        self.inner.u16().map_err(truncated(self.place))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        self.inner.u32().map_err(truncated(self.place))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        self.inner.u64().map_err(truncated(self.place))
    }

    pub(crate) fn i64(&mut self) -> Result<i64> {
        self.inner.i64().map_err(truncated(self.place))
    }

    pub(crate) fn f64(&mut self) -> Result<f64> {
        self.inner.f64().map_err(truncated(self.place))
    }

    /// An unsigned LEB128 varint of at most 10 bytes.
    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for i in 0..10u32 {
            let byte = self.u8()?;
            if i == 9 && byte > 1 {
                return Err(Error::corrupt(self.place, "varint overflows 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::corrupt(self.place, "varint longer than 10 bytes"))
    }

    /// Reads `n` zigzag varints, handing each to `f` in order: one pass over the bytes in
    /// which a one-byte varint (the small deltas the codecs mostly write) costs one
    /// comparison, longer ones going through [`varint`](Self::varint)'s checks.
    #[inline]
    pub(crate) fn zigzags(&mut self, n: usize, mut f: impl FnMut(i64)) -> Result<()> {
        let rest = self.inner.rest();
        let mut at = 0usize;
        let mut left = n;
        while left > 0 {
            // Eight one-byte varints at once when no byte of the next eight continues.
            if left >= 8
                && let Some(word) = rest
                    .get(at..at + 8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(u64::from_le_bytes)
                    .filter(|w| w & 0x8080_8080_8080_8080 == 0)
            {
                for k in 0..8 {
                    f(unzigzag((word >> (8 * k)) & 0x7f));
                }
                at += 8;
                left -= 8;
                continue;
            }
            match rest.get(at) {
                Some(&b) if b < 0x80 => {
                    at += 1;
                    f(unzigzag(u64::from(b)));
                }
                Some(_) => {
                    let mut sub = Reader::new(rest.get(at..).unwrap_or(&[]), self.place);
                    let v = sub.varint()?;
                    at = rest.len() - sub.remaining();
                    f(unzigzag(v));
                }
                None => {
                    return Err(Error::Truncated {
                        place: self.place,
                        needed: left as u64,
                        available: 0,
                    });
                }
            }
            left -= 1;
        }
        self.take(at)?;
        Ok(())
    }

    /// Consumes the zero bytes (each the varint 0) at the cursor, at most `max`, and
    /// returns how many: the runs of zero deltas-of-deltas or grid residuals that
    /// regular timestamps are made of, counted eight bytes at a time.
    #[inline]
    pub(crate) fn zero_run(&mut self, max: usize) -> Result<usize> {
        let rest = self.inner.rest();
        let limit = max.min(rest.len());
        let mut n = 0usize;
        while n + 8 <= limit {
            match rest.get(n..n + 8) {
                Some(w) if w.iter().all(|&b| b == 0) => n += 8,
                _ => break,
            }
        }
        while n < limit && rest.get(n) == Some(&0) {
            n += 1;
        }
        self.take(n)?;
        Ok(n)
    }

    /// Skips `n` varints.
    pub(crate) fn skip_varints(&mut self, n: usize) -> Result<()> {
        let rest = self.inner.rest();
        let mut left = n;
        let mut used = 0usize;
        for &b in rest {
            if left == 0 {
                break;
            }
            used += 1;
            if b & 0x80 == 0 {
                left -= 1;
            }
        }
        if left > 0 {
            return Err(Error::Truncated {
                place: self.place,
                needed: left as u64,
                available: 0,
            });
        }
        self.take(used)?;
        Ok(())
    }

    /// A zigzag-encoded signed varint.
    #[inline]
    pub(crate) fn zigzag(&mut self) -> Result<i64> {
        Ok(unzigzag(self.varint()?))
    }

    /// A varint that must fit `usize` and be at most `max`.
    pub(crate) fn count(&mut self, what: &str, max: u64) -> Result<usize> {
        let v = self.varint()?;
        if v > max {
            return Err(Error::corrupt(
                self.place,
                format!("{what} {v} exceeds the limit {max}"),
            ));
        }
        usize::try_from(v).map_err(|_| Error::corrupt(self.place, format!("{what} {v} too large")))
    }
}

/// The error of a read past the end, in `place`.
fn truncated(place: Place) -> impl Fn(Truncated) -> Error {
    move |t| Error::Truncated {
        place,
        needed: t.needed as u64,
        available: t.available as u64,
    }
}

/// Appends `v` as an unsigned LEB128 varint.
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `v` takes as a varint.
#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    // 1 byte per 7 significant bits, at least one: ceil(bits / 7) is
    // (9 * bits + 64) / 64 for bits in 1..=64, without a division.
    let bits = (64 - (v | 1).leading_zeros()) as usize;
    (9 * bits + 64) / 64
}

/// Appends `v` zigzag-encoded as a varint.
#[inline]
pub(crate) fn put_zigzag(out: &mut Vec<u8>, v: i64) {
    put_varint(out, zigzag(v));
}

#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_len_is_the_length_put_varint_writes() {
        let mut probes = vec![0u64, 1, u64::MAX];
        for shift in 0..64 {
            let p = 1u64 << shift;
            probes.extend([p - 1, p, p + 1]);
        }
        for v in probes {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(varint_len(v), out.len(), "{v}");
        }
    }

    #[test]
    fn varints_round_trip_extremes() {
        let values = [0u64, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX];
        let mut out = Vec::new();
        for v in values {
            put_varint(&mut out, v);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            put_zigzag(&mut out, v);
        }
        let mut r = Reader::new(&out, Place::Meta);
        for v in values {
            assert_eq!(r.varint().unwrap(), v);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(r.zigzag().unwrap(), v);
        }
        assert!(r.is_empty());
        assert!(r.u8().is_err());
    }

    #[test]
    fn rejects_overlong_varint() {
        let bytes = [0xffu8; 11];
        assert!(Reader::new(&bytes, Place::Meta).varint().is_err());
        let bytes = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(Reader::new(&bytes, Place::Meta).varint().is_err());
    }
}
