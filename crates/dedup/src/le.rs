//! Little-endian field encoding for the manifest and WAL records. Readers return errors
//! on short input, never panic.

use std::path::Path;

use crate::error::{Error, Result};

pub(crate) fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A length-prefixed (u32) byte string.
pub(crate) fn put_bytes(out: &mut Vec<u8>, v: &[u8]) {
    // Names and keywords are far below 4 GiB; the point validation caps them.
    put_u32(out, v.len() as u32);
    out.extend_from_slice(v);
}

/// A cursor over borrowed bytes that names its file and absolute offset in errors.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: u64,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    /// `base` is the file offset of `bytes[0]`, for error messages.
    pub(crate) fn new(bytes: &'a [u8], base: u64, path: &'a Path) -> Reader<'a> {
        Reader {
            bytes,
            pos: 0,
            base,
            path,
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n);
        match end.and_then(|e| self.bytes.get(self.pos..e)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(Error::Truncated {
                path: self.path.to_path_buf(),
                offset: self.offset(),
                needed: n as u64,
                available: self.remaining() as u64,
            }),
        }
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    pub(crate) fn string(&mut self) -> Result<String> {
        let at = self.offset();
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.corrupt_at(at, "string is not UTF-8"))
    }

    pub(crate) fn corrupt_at(&self, offset: u64, detail: impl Into<String>) -> Error {
        Error::Corrupt {
            path: self.path.to_path_buf(),
            offset,
            detail: detail.into(),
        }
    }
}
