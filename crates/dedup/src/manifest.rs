//! The manifest: the engine's list of live segments, switched atomically.
//!
//! ```text
//! magic "TMMF" | version u32 | next_segment u64 | wal_generation u64 | segments u32
//! | segments × (id u64 | rows u64 | has_tombstones u8 | tombstone generation u64)
//! | crc32 u32 of every byte before it | magic "TMMF"
//! ```
//! Written to `MANIFEST.tmp`, fsynced, renamed over `MANIFEST`, directory fsynced.

use std::path::Path;

use crate::error::{Error, Result};
use crate::le::{Reader, put_u8, put_u32, put_u64};

/// Magic at both ends of the manifest.
pub const MANIFEST_MAGIC: [u8; 4] = *b"TMMF";
/// Manifest format version written and read.
pub const MANIFEST_VERSION: u32 = 1;
/// File name of the manifest in the engine directory.
pub const MANIFEST_NAME: &str = "MANIFEST";

/// One live segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentEntry {
    pub(crate) id: u64,
    pub(crate) rows: u64,
    /// Generation of its tombstone file, if it has one.
    pub(crate) tombstones: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub(crate) next_segment: u64,
    pub(crate) wal_generation: u64,
    /// Oldest first.
    pub(crate) segments: Vec<SegmentEntry>,
}

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36 + self.segments.len() * 25);
        out.extend_from_slice(&MANIFEST_MAGIC);
        put_u32(&mut out, MANIFEST_VERSION);
        put_u64(&mut out, self.next_segment);
        put_u64(&mut out, self.wal_generation);
        put_u32(&mut out, self.segments.len() as u32);
        for s in &self.segments {
            put_u64(&mut out, s.id);
            put_u64(&mut out, s.rows);
            put_u8(&mut out, u8::from(s.tombstones.is_some()));
            put_u64(&mut out, s.tombstones.unwrap_or(0));
        }
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        out.extend_from_slice(&MANIFEST_MAGIC);
        out
    }

    pub(crate) fn decode(bytes: &[u8], path: &Path) -> Result<Manifest> {
        let mut r = open_frame(bytes, path, MANIFEST_MAGIC, MANIFEST_VERSION, 8 + 8 + 4)?;
        let next_segment = r.u64()?;
        let wal_generation = r.u64()?;
        let count = r.u32()?;
        let mut segments = Vec::new();
        for _ in 0..count {
            let id = r.u64()?;
            let rows = r.u64()?;
            let has = r.u8()?;
            let generation = r.u64()?;
            segments.push(SegmentEntry {
                id,
                rows,
                tombstones: (has != 0).then_some(generation),
            });
        }
        if !r.is_empty() {
            return Err(r.corrupt_at(r.offset(), format!("{} trailing bytes", r.remaining())));
        }
        Ok(Manifest {
            next_segment,
            wal_generation,
            segments,
        })
    }

    pub(crate) fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST_NAME);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NoManifest {
                    path: dir.to_path_buf(),
                });
            }
            Err(e) => return Err(Error::io(&path)(e)),
        };
        Manifest::decode(&bytes, &path)
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<()> {
        crate::fsutil::write_atomic(&dir.join(MANIFEST_NAME), &self.encode())
    }
}

/// The body of a framed file — `magic ‖ version u32 ‖ fields ‖ crc32 ‖ magic`, the frame of
/// this manifest and of the partition manifest — after its magic (both ends), CRC and
/// version are checked: a reader at the first field. `fields_min` is the fewest bytes the
/// fields take.
pub(crate) fn open_frame<'a>(
    bytes: &'a [u8],
    path: &'a Path,
    magic: [u8; 4],
    version: u32,
    fields_min: usize,
) -> Result<Reader<'a>> {
    let min = 4 + 4 + fields_min + 4 + 4;
    if bytes.len() < min {
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            offset: 0,
            needed: min as u64,
            available: bytes.len() as u64,
        });
    }
    let (body, tail) = bytes.split_at(bytes.len() - 8);
    let mut t = Reader::new(tail, body.len() as u64, path);
    let stored = t.u32()?;
    let end_magic = t.array::<4>()?;
    let mut r = Reader::new(body, 0, path);
    let start_magic = r.array::<4>()?;
    for found in [start_magic, end_magic] {
        if found != magic {
            return Err(Error::BadMagic {
                path: path.to_path_buf(),
                expected: magic,
                found,
            });
        }
    }
    let got = crc32fast::hash(body);
    if got != stored {
        return Err(Error::ChecksumMismatch {
            path: path.to_path_buf(),
            expected: stored,
            got,
        });
    }
    let found = r.u32()?;
    if found != version {
        return Err(Error::UnsupportedVersion {
            path: path.to_path_buf(),
            expected: version,
            found,
        });
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            next_segment: 9,
            wal_generation: 4,
            segments: vec![
                SegmentEntry {
                    id: 3,
                    rows: 100,
                    tombstones: None,
                },
                SegmentEntry {
                    id: 8,
                    rows: 7,
                    tombstones: Some(2),
                },
            ],
        }
    }

    #[test]
    fn round_trips() {
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode(), Path::new("M")).unwrap(), m);
    }

    #[test]
    fn rejects_every_truncation_and_flipped_byte() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..len], Path::new("M")).is_err());
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(Manifest::decode(&b, Path::new("M")).is_err(), "byte {i}");
        }
    }
}
