//! The write-ahead log: one file per generation, `wal-<generation>.log`.
//!
//! ```text
//! header: magic "TMWL" | version u32 | generation u64            (16 bytes)
//! record: len u32 | crc32 u32 of the payload | payload (len bytes)  (repeated)
//! ```
//! A record whose frame is incomplete, whose length exceeds [`MAX_RECORD_LEN`] or whose
//! CRC does not match ends the log: replay truncates the file there and reports a
//! [`Warning::TornWalTail`](crate::Warning::TornWalTail). A refresh starts the next
//! generation and deletes the previous file once the manifest names the new one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::Warning;
use crate::config::Durability;
use crate::error::{Error, Result};
use crate::le::{Reader, put_u32, put_u64};

/// Magic at the start of a WAL file.
pub const WAL_MAGIC: [u8; 4] = *b"TMWL";
/// WAL format version written. Version 3 adds the series, column and by-ref point
/// records (see `record.rs`); version 2 logs (full points) are still read.
pub const WAL_VERSION: u32 = 3;

/// Oldest WAL format version read.
pub const MIN_WAL_VERSION: u32 = 2;
/// Bytes of the WAL file header.
pub const WAL_HEADER_LEN: u64 = 16;
/// The largest record payload accepted; a longer length field is treated as a torn tail.
pub const MAX_RECORD_LEN: u32 = 64 << 20;

pub(crate) fn wal_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("wal-{generation:020}.log"))
}

/// Parses `wal-<generation>.log`.
pub(crate) fn parse_wal_name(name: &str) -> Option<u64> {
    name.strip_prefix("wal-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

#[derive(Debug)]
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    generation: u64,
    pending: Vec<u8>,
    last_sync: Instant,
    unsynced: bool,
}

impl Wal {
    /// Creates generation `generation` (failing if it exists), durably: header, file
    /// fsync, directory fsync.
    pub(crate) fn create(dir: &Path, generation: u64) -> Result<Wal> {
        let path = wal_path(dir, generation);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(Error::io(&path))?;
        let mut header = Vec::with_capacity(WAL_HEADER_LEN as usize);
        header.extend_from_slice(&WAL_MAGIC);
        put_u32(&mut header, WAL_VERSION);
        put_u64(&mut header, generation);
        file.write_all(&header).map_err(Error::io(&path))?;
        file.sync_all().map_err(Error::io(&path))?;
        crate::fsutil::sync_dir(dir)?;
        Ok(Wal {
            file,
            path,
            generation,
            pending: Vec::new(),
            last_sync: Instant::now(),
            unsynced: false,
        })
    }

    /// Opens generation `generation` and calls `apply` on each record payload (with its
    /// file offset), in order. A torn tail is truncated and reported.
    pub(crate) fn open(
        dir: &Path,
        generation: u64,
        mut apply: impl FnMut(&[u8], u64, &Path) -> Result<()>,
    ) -> Result<(Wal, Option<Warning>)> {
        let path = wal_path(dir, generation);
        if !path.exists() {
            return Err(Error::MissingWal { path });
        }
        let bytes = std::fs::read(&path).map_err(Error::io(&path))?;
        let mut r = Reader::new(&bytes, 0, &path);
        let magic = r.array::<4>()?;
        if magic != WAL_MAGIC {
            return Err(Error::BadMagic {
                path,
                expected: WAL_MAGIC,
                found: magic,
            });
        }
        let version = r.u32()?;
        if !(MIN_WAL_VERSION..=WAL_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                path,
                expected: WAL_VERSION,
                found: version,
            });
        }
        let found_gen = r.u64()?;
        if found_gen != generation {
            return Err(Error::Corrupt {
                path,
                offset: 8,
                detail: format!("expected generation {generation}, found {found_gen}"),
            });
        }
        let mut good_end = r.offset();
        let mut torn = None;
        while !r.is_empty() {
            let start = r.offset();
            match next_frame(&mut r) {
                Some(payload) => {
                    apply(payload, start + 8, &path)?;
                    good_end = r.offset();
                }
                None => {
                    torn = Some(start);
                    break;
                }
            }
        }
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(Error::io(&path))?;
        let mut warning = None;
        if let Some(offset) = torn {
            debug_assert_eq!(offset, good_end);
            let dropped = bytes.len() as u64 - good_end;
            file.set_len(good_end).map_err(Error::io(&path))?;
            file.sync_all().map_err(Error::io(&path))?;
            warning = Some(Warning::TornWalTail {
                path: path.clone(),
                offset: good_end,
                dropped_bytes: dropped,
            });
        }
        let mut wal = Wal {
            file,
            path,
            generation,
            pending: Vec::new(),
            last_sync: Instant::now(),
            unsynced: false,
        };
        // Appends go after the last good record.
        use std::io::Seek;
        wal.file
            .seek(std::io::SeekFrom::Start(good_end))
            .map_err(Error::io(&wal.path))?;
        Ok((wal, warning))
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Frames `payload` into the pending batch; nothing reaches the file before
    /// [`commit`](Self::commit).
    pub(crate) fn append_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        let start = self.pending.len();
        self.pending.extend_from_slice(&[0; 8]);
        encode(&mut self.pending);
        let payload = self.pending.get(start + 8..).unwrap_or(&[]);
        let len = payload.len() as u32;
        let crc = crc32fast::hash(payload);
        if let Some(frame) = self.pending.get_mut(start..start + 8) {
            frame[..4].copy_from_slice(&len.to_le_bytes());
            frame[4..].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Writes the pending records with one `write`, then fsyncs as `durability` says.
    pub(crate) fn commit(&mut self, durability: Durability) -> Result<()> {
        if !self.pending.is_empty() {
            let result = self.file.write_all(&self.pending);
            self.pending.clear();
            result.map_err(Error::io(&self.path))?;
            self.unsynced = true;
        }
        match durability {
            Durability::PerRequest => self.sync(),
            Durability::Interval(every) => {
                if self.unsynced && self.last_sync.elapsed() >= every {
                    self.sync()
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Fsyncs what was written, if anything.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if self.unsynced {
            self.file.sync_data().map_err(Error::io(&self.path))?;
            self.unsynced = false;
            self.last_sync = Instant::now();
        }
        Ok(())
    }
}

/// The next record payload, or `None` for a torn or corrupt frame.
fn next_frame<'a>(r: &mut Reader<'a>) -> Option<&'a [u8]> {
    let len = r.u32().ok()?;
    if len > MAX_RECORD_LEN {
        return None;
    }
    let crc = r.u32().ok()?;
    let payload = r.take(len as usize).ok()?;
    (crc32fast::hash(payload) == crc).then_some(payload)
}
