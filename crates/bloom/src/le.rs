//! Little-endian field reading and writing: the one [`LeReader`] every crate of the
//! workspace decodes its fixed-width fields with. Reads return [`Truncated`] on short
//! input instead of panicking; each crate wraps it to name its own place in errors.

use std::fmt;

use crate::error::{Error, Result};

/// Input ended before a field: `needed` bytes were asked for at `offset`, `available`
/// were left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated {
    /// Offset of the field from the start of the reader's bytes.
    pub offset: usize,
    /// Bytes the field needs.
    pub needed: usize,
    /// Bytes left at `offset`.
    pub available: usize,
}

impl fmt::Display for Truncated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "truncated at offset {}: needed {} bytes, {} available",
            self.offset, self.needed, self.available
        )
    }
}

impl std::error::Error for Truncated {}

/// A cursor over borrowed bytes reading little-endian fields.
///
/// ```
/// use tidemark_bloom::le::{LeReader, Truncated};
/// let mut r = LeReader::new(&[1, 0, 2, 0, 0]);
/// assert_eq!(r.u16(), Ok(1));
/// assert_eq!(r.u32(), Err(Truncated { offset: 2, needed: 4, available: 3 }));
/// assert_eq!(r.position(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct LeReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

// The readers are `#[inline]`: they sit in the decode loops of other crates (a varint
// reads bytes one `u8` at a time), where each crate's own copy used to be inlinable.
impl<'a> LeReader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        LeReader { bytes, pos: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// True when every byte was read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The bytes not read yet (the position does not move).
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or(&[])
    }

    /// The next `n` bytes.
    ///
    /// # Errors
    /// [`Truncated`] when fewer are left (the position does not move).
    #[inline]
    pub fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], Truncated> {
        let end = self.pos.checked_add(n);
        match end.and_then(|end| self.bytes.get(self.pos..end)) {
            Some(out) => {
                self.pos += n;
                Ok(out)
            }
            None => Err(Truncated {
                offset: self.pos,
                needed: n,
                available: self.remaining(),
            }),
        }
    }

    /// The next `N` bytes as an array.
    ///
    /// # Errors
    /// [`Truncated`].
    #[inline]
    pub fn array<const N: usize>(&mut self) -> std::result::Result<[u8; N], Truncated> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A byte.
    ///
    /// # Errors
    /// [`Truncated`].
    #[inline]
    pub fn u8(&mut self) -> std::result::Result<u8, Truncated> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }

    /// A little-endian `u16`.
    ///
    /// # Errors
    /// [`Truncated`].
    #[inline]
    pub fn u16(&mut self) -> std::result::Result<u16, Truncated> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// A little-endian `u32`.
    ///
    /// # Errors
    /// [`Truncated`].
    #[inline]
    pub fn u32(&mut self) -> std::result::Result<u32, Truncated> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian `u64`.
    ///
    /// # Errors
    /// [`Truncated`].
    #[inline]
    pub fn u64(&mut self) -> std::result::Result<u64, Truncated> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A little-endian `i64`.
    ///
    /// # Errors
    /// [`Truncated`].
    #[inline]
    pub fn i64(&mut self) -> std::result::Result<i64, Truncated> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// An `f64` from its little-endian bits.
    ///
    /// # Errors
    /// [`Truncated`].
    #[inline]
    pub fn f64(&mut self) -> std::result::Result<f64, Truncated> {
        Ok(f64::from_bits(self.u64()?))
    }
}

/// Appends `v` little-endian.
#[inline]
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian.
#[inline]
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian.
#[inline]
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian.
#[inline]
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// This crate's reader: an [`LeReader`] naming the section in its errors.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a>(LeReader<'a>);

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader(LeReader::new(bytes))
    }

    pub(crate) fn position(&self) -> usize {
        self.0.position()
    }

    pub(crate) fn take(&mut self, n: usize, section: &'static str) -> Result<&'a [u8]> {
        self.0.take(n).map_err(in_section(section))
    }

    pub(crate) fn magic(&mut self, section: &'static str) -> Result<[u8; 4]> {
        self.0.array().map_err(in_section(section))
    }

    pub(crate) fn u8(&mut self, section: &'static str) -> Result<u8> {
        self.0.u8().map_err(in_section(section))
    }

    pub(crate) fn u16(&mut self, section: &'static str) -> Result<u16> {
        self.0.u16().map_err(in_section(section))
    }

    pub(crate) fn u32(&mut self, section: &'static str) -> Result<u32> {
        self.0.u32().map_err(in_section(section))
    }

    pub(crate) fn u64(&mut self, section: &'static str) -> Result<u64> {
        self.0.u64().map_err(in_section(section))
    }

    pub(crate) fn f64(&mut self, section: &'static str) -> Result<f64> {
        self.0.f64().map_err(in_section(section))
    }
}

fn in_section(section: &'static str) -> impl Fn(Truncated) -> Error {
    move |t| Error::Truncated {
        section,
        needed: t.needed as u64,
        available: t.available as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_input_is_an_error() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16("x").unwrap(), 0x0201);
        assert_eq!(
            r.u32("field"),
            Err(Error::Truncated {
                section: "field",
                needed: 4,
                available: 1
            })
        );
        assert_eq!(r.u8("y").unwrap(), 3);
    }

    #[test]
    fn every_field_errors_on_truncated_input_and_keeps_its_place() {
        let bytes: Vec<u8> = (1..=8).collect();
        for len in 0..8 {
            let mut r = LeReader::new(&bytes[..len]);
            let want = Truncated {
                offset: 0,
                needed: 8,
                available: len,
            };
            assert_eq!(r.u64(), Err(want));
            assert_eq!(r.i64(), Err(want));
            assert!(r.f64().is_err());
            assert_eq!(r.position(), 0);
            assert_eq!(r.u32().is_err(), len < 4);
        }
        let mut r = LeReader::new(&bytes);
        assert_eq!(r.u64(), Ok(u64::from_le_bytes([1, 2, 3, 4, 5, 6, 7, 8])));
        assert!(r.is_empty());
        assert_eq!(
            r.u8(),
            Err(Truncated {
                offset: 8,
                needed: 1,
                available: 0
            })
        );
        assert_eq!(
            r.take(usize::MAX).map(<[u8]>::len).unwrap_err().needed,
            usize::MAX
        );
    }

    #[test]
    fn puts_round_trip_through_the_reader() {
        let mut out = Vec::new();
        put_u16(&mut out, 0xbeef);
        put_u32(&mut out, u32::MAX - 1);
        put_u64(&mut out, 1 << 40);
        put_i64(&mut out, -7);
        let mut r = LeReader::new(&out);
        assert_eq!(r.u16(), Ok(0xbeef));
        assert_eq!(r.u32(), Ok(u32::MAX - 1));
        assert_eq!(r.u64(), Ok(1 << 40));
        assert_eq!(r.i64(), Ok(-7));
        assert!(r.is_empty());
    }
}
