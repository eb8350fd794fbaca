//! Tombstones: a separate, generation-versioned file of dead rows beside a segment.
//!
//! ```text
//! magic "TMTB" | version u32 | generation u64 | segment rows u64 | bitmap len u32
//! | roaring bitmap (portable format) | crc32 u32 of every byte before it | magic "TMTB"
//! ```

use std::path::{Path, PathBuf};

use roaring::RoaringBitmap;

use crate::error::{Error, Place, Result};
use crate::le::{Reader, put_u32, put_u64};
use crate::point::RowId;

/// Magic at both ends of a tombstone file.
pub const TOMBSTONE_MAGIC: [u8; 4] = *b"TMTB";

/// Tombstone format version written and read.
pub const TOMBSTONE_VERSION: u32 = 1;

/// Dead rows of one segment. Deletes never touch the segment itself: each change writes
/// a new tombstone file with the next generation, atomically.
///
/// ```
/// use tidemark_segment::Tombstones;
///
/// let mut t = Tombstones::new(100);
/// assert!(t.delete(7)?);
/// let t2 = Tombstones::from_bytes(&t.to_bytes()?)?;
/// assert!(t2.is_deleted(7) && !t2.is_deleted(8));
/// # Ok::<(), tidemark_segment::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Tombstones {
    generation: u64,
    segment_rows: u64,
    dead: RoaringBitmap,
}

impl Tombstones {
    /// No dead row yet, generation 0, for a segment of `segment_rows` rows.
    pub fn new(segment_rows: u64) -> Tombstones {
        Tombstones {
            generation: 0,
            segment_rows,
            dead: RoaringBitmap::new(),
        }
    }

    /// The generation: incremented by [`next_generation`](Self::next_generation).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A copy with the generation incremented, to record further deletes.
    pub fn next_generation(&self) -> Tombstones {
        Tombstones {
            generation: self.generation.saturating_add(1),
            ..self.clone()
        }
    }

    /// Marks `row` dead; returns whether it was alive.
    ///
    /// # Errors
    /// [`Error::RowOutOfRange`].
    pub fn delete(&mut self, row: RowId) -> Result<bool> {
        let r = u32::try_from(row)
            .ok()
            .filter(|_| row < self.segment_rows)
            .ok_or(Error::RowOutOfRange {
                row,
                row_count: self.segment_rows,
            })?;
        Ok(self.dead.insert(r))
    }

    /// Whether `row` is dead.
    pub fn is_deleted(&self, row: RowId) -> bool {
        u32::try_from(row).is_ok_and(|r| self.dead.contains(r))
    }

    /// Number of dead rows.
    pub fn len(&self) -> u64 {
        self.dead.len()
    }

    /// Whether no row is dead.
    pub fn is_empty(&self) -> bool {
        self.dead.is_empty()
    }

    /// The dead rows.
    pub fn dead(&self) -> &RoaringBitmap {
        &self.dead
    }

    /// The file name of generation `generation` beside `segment`: `<segment>.del.<gen>`.
    pub fn path_for(segment: &Path, generation: u64) -> PathBuf {
        let mut name = segment.as_os_str().to_owned();
        name.push(format!(".del.{generation:08}"));
        PathBuf::from(name)
    }

    /// Encodes the tombstone file.
    ///
    /// # Errors
    /// I/O errors of the bitmap serializer.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(&TOMBSTONE_MAGIC);
        put_u32(&mut out, TOMBSTONE_VERSION);
        put_u64(&mut out, self.generation);
        put_u64(&mut out, self.segment_rows);
        let len = u32::try_from(self.dead.serialized_size()).map_err(|_| Error::TooLarge {
            what: "tombstone bitmap bytes",
            found: self.dead.serialized_size() as u64,
            max: u64::from(u32::MAX),
        })?;
        put_u32(&mut out, len);
        self.dead.serialize_into(&mut out)?;
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        out.extend_from_slice(&TOMBSTONE_MAGIC);
        Ok(out)
    }

    /// Decodes a tombstone file.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::Truncated`],
    /// [`Error::ChecksumMismatch`] and [`Error::Corrupt`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Tombstones> {
        let place = Place::Tombstones;
        if bytes.len() < 36 {
            return Err(Error::Truncated {
                place,
                needed: 36,
                available: bytes.len() as u64,
            });
        }
        let (body, tail) = bytes.split_at(bytes.len() - 8);
        let mut t = Reader::new(tail, place);
        let stored = t.u32()?;
        let end_magic = t.magic()?;
        let mut r = Reader::new(body, place);
        let magic = r.magic()?;
        for m in [magic, end_magic] {
            if m != TOMBSTONE_MAGIC {
                return Err(Error::BadMagic {
                    place,
                    expected: TOMBSTONE_MAGIC,
                    found: m,
                });
            }
        }
        Error::check_crc(place, body, stored)?;
        let version = r.u32()?;
        if version != TOMBSTONE_VERSION {
            return Err(Error::UnsupportedVersion {
                place,
                found: version,
                min: TOMBSTONE_VERSION,
                max: TOMBSTONE_VERSION,
            });
        }
        let generation = r.u64()?;
        let segment_rows = r.u64()?;
        let len = r.u32()? as usize;
        let dead = crate::bitmap::read_bitmap(r.take(len)?)
            .map_err(|e| Error::corrupt(place, format!("bitmap: {e}")))?;
        if !r.is_empty() {
            return Err(Error::corrupt(
                place,
                format!("{} trailing bytes", r.remaining()),
            ));
        }
        if dead.max().is_some_and(|m| u64::from(m) >= segment_rows) {
            return Err(Error::corrupt(place, "dead row beyond the segment"));
        }
        Ok(Tombstones {
            generation,
            segment_rows,
            dead,
        })
    }

    /// Writes [`path_for`](Self::path_for)`(segment, generation)` atomically and returns
    /// its path.
    ///
    /// # Errors
    /// I/O errors naming the file.
    pub fn write_beside(&self, segment: &Path) -> Result<PathBuf> {
        let path = Tombstones::path_for(segment, self.generation);
        tidemark_bloom::AtomicFile::write_all_to(&path, &self.to_bytes()?)
            .map_err(|e| Error::from(e).in_file(&path))?;
        Ok(path)
    }

    /// Reads a tombstone file.
    ///
    /// # Errors
    /// I/O and format errors naming the file.
    pub fn read_file(path: &Path) -> Result<Tombstones> {
        let bytes = std::fs::read(path).map_err(|e| Error::from(e).in_file(path))?;
        Tombstones::from_bytes(&bytes).map_err(|e| e.in_file(path))
    }
}
