//! Little-endian field reading that reports short input as an error instead of panicking.

use crate::error::{Error, Result};

/// A cursor over encoded bytes.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn take(&mut self, n: usize, section: &'static str) -> Result<&'a [u8]> {
        let available = self.bytes.len() - self.pos;
        if n > available {
            return Err(Error::Truncated {
                section,
                needed: n as u64,
                available: available as u64,
            });
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, section: &'static str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, section)?);
        Ok(out)
    }

    pub(crate) fn magic(&mut self, section: &'static str) -> Result<[u8; 4]> {
        self.array(section)
    }

    pub(crate) fn u8(&mut self, section: &'static str) -> Result<u8> {
        Ok(self.array::<1>(section)?[0])
    }

    pub(crate) fn u16(&mut self, section: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(section)?))
    }

    pub(crate) fn u32(&mut self, section: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(section)?))
    }

    pub(crate) fn u64(&mut self, section: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(section)?))
    }

    pub(crate) fn f64(&mut self, section: &'static str) -> Result<f64> {
        Ok(f64::from_bits(self.u64(section)?))
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
}
