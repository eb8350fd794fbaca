//! Little-endian field encoding for the manifest and WAL records. Readers return errors
//! on short input, never panic.

use std::path::Path;

use tidemark_bloom::le::{LeReader, Truncated};
pub(crate) use tidemark_bloom::le::{put_i64, put_u32, put_u64};

use crate::error::{Error, Result};

pub(crate) fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

/// A length-prefixed (u32) byte string.
pub(crate) fn put_bytes(out: &mut Vec<u8>, v: &[u8]) {
    // Names and keywords are far below 4 GiB; the point validation caps them.
    put_u32(out, v.len() as u32);
    out.extend_from_slice(v);
}

/// A cursor over borrowed bytes that names its file and absolute offset in errors: the
/// workspace's [`LeReader`] with this crate's error context.
pub(crate) struct Reader<'a> {
    inner: LeReader<'a>,
    base: u64,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    /// `base` is the file offset of `bytes[0]`, for error messages.
    pub(crate) fn new(bytes: &'a [u8], base: u64, path: &'a Path) -> Reader<'a> {
        Reader {
            inner: LeReader::new(bytes),
            base,
            path,
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        self.base + self.inner.position() as u64
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.inner.remaining()
    }

    fn truncated(&self, t: Truncated) -> Error {
        Error::Truncated {
            path: self.path.to_path_buf(),
            offset: self.base + t.offset as u64,
            needed: t.needed as u64,
            available: t.available as u64,
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        self.inner.take(n).map_err(|t| self.truncated(t))
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.inner.array().map_err(|t| self.truncated(t))
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        self.inner.u8().map_err(|t| self.truncated(t))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        self.inner.u32().map_err(|t| self.truncated(t))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        self.inner.u64().map_err(|t| self.truncated(t))
    }

    pub(crate) fn i64(&mut self) -> Result<i64> {
        self.inner.i64().map_err(|t| self.truncated(t))
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
