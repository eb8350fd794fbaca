//! The write-ahead log: one file per generation, `wal-<generation>.log`.
//!
//! ```text
//! header: magic "TMWL" | version u32 | generation u64            (16 bytes)
//! frame:  len u32 | crc32 u32 of the payload | payload (len bytes)  (repeated)
//! payload (version 4): record count u32 | (record len u32 | record)*
//! payload (versions 2 and 3): one record
//! ```
//! Since version 4 a frame holds the records of one commit (split into frames of about
//! [`FRAME_TARGET`] bytes when a commit is larger), so a batch of a thousand appends
//! costs one CRC and one frame header, not a thousand. A frame that is incomplete, whose
//! length exceeds [`MAX_RECORD_LEN`], whose CRC does not match or whose records do not
//! fill it exactly ends the log: replay truncates the file there and reports a
//! [`Warning::TornWalTail`](crate::Warning::TornWalTail). A commit is acknowledged only
//! after its `write` (and fsync, per the durability policy), so a torn frame holds no
//! acknowledged record unless the policy allowed acknowledging before the fsync. A
//! refresh starts the next generation and deletes the previous file once the manifest
//! names the new one.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::Instant;

use tidemark_bloom::faults::{self, Op};

use crate::Warning;
use crate::config::Durability;
use crate::error::{Error, Result};
use crate::le::{Reader, put_u32, put_u64};

/// Magic at the start of a WAL file.
pub const WAL_MAGIC: [u8; 4] = *b"TMWL";
/// WAL format version written. Version 4 frames a commit's records together; version 3
/// added the series, column and by-ref point records (see `record.rs`); version 2 and 3
/// logs (one record per frame) are still read.
pub const WAL_VERSION: u32 = 4;

/// The first version whose frames hold several records.
const GROUPED_VERSION: u32 = 4;

/// Oldest WAL format version read.
pub const MIN_WAL_VERSION: u32 = 2;
/// Bytes of the WAL file header.
pub const WAL_HEADER_LEN: u64 = 16;
/// The largest frame payload accepted; a longer length field is treated as a torn tail.
pub const MAX_RECORD_LEN: u32 = 64 << 20;

/// A frame is closed once its payload reaches this many bytes (a commit larger than this
/// spans several frames).
pub const FRAME_TARGET: usize = 1 << 20;

/// The largest record buffer a log hands on to the next generation (see
/// [`Wal::recycle_buffer`]): a few frames' worth.
const MAX_KEPT_BUFFER: usize = 8 * FRAME_TARGET;

/// Bytes of a frame header (length and CRC) and of a version-4 payload's record count.
const FRAME_HEADER: usize = 8;
const COUNT_LEN: usize = 4;

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
    /// The open frame in `pending`: where it starts and how many records it holds.
    frame: Option<(usize, u32)>,
    last_sync: Instant,
    unsynced: bool,
}

impl Wal {
    /// Creates generation `generation` (failing if it exists), durably: header, file
    /// fsync, directory fsync.
    pub(crate) fn create(dir: &Path, generation: u64) -> Result<Wal> {
        let path = wal_path(dir, generation);
        faults::check(&path, Op::Create).map_err(Error::io(&path))?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(Error::io(&path))?;
        let mut header = Vec::with_capacity(WAL_HEADER_LEN as usize);
        header.extend_from_slice(&WAL_MAGIC);
        put_u32(&mut header, WAL_VERSION);
        put_u64(&mut header, generation);
        faults::write_all(&path, &mut file, &header).map_err(Error::io(&path))?;
        faults::check(&path, Op::Sync).map_err(Error::io(&path))?;
        file.sync_all().map_err(Error::io(&path))?;
        crate::fsutil::sync_dir(dir)?;
        Ok(Wal {
            file,
            path,
            generation,
            pending: Vec::new(),
            frame: None,
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
            let payload_at = start + FRAME_HEADER as u64;
            let records = next_frame(&mut r).and_then(|payload| {
                if version >= GROUPED_VERSION {
                    split_records(payload, payload_at)
                } else {
                    Some(vec![(payload, payload_at)])
                }
            });
            match records {
                Some(records) => {
                    for (record, offset) in records {
                        apply(record, offset, &path)?;
                    }
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
            faults::check(&path, Op::Truncate).map_err(Error::io(&path))?;
            file.set_len(good_end).map_err(Error::io(&path))?;
            faults::check(&path, Op::Sync).map_err(Error::io(&path))?;
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
            frame: None,
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

    /// Takes over `old`'s record buffer (emptied) when this log has nothing pending, so
    /// that a log that rolls over at each refresh does not grow a new buffer of a
    /// commit's size every time (and free the old one): the allocator sees one buffer for
    /// the engine's life, not a megabyte-sized allocation and free per refresh. A buffer
    /// grown past [`MAX_KEPT_BUFFER`] by an unusually large group commit is let go.
    pub(crate) fn recycle_buffer(&mut self, old: &mut Wal) {
        if !self.pending.is_empty() || old.pending.capacity() > MAX_KEPT_BUFFER {
            return;
        }
        let mut buffer = std::mem::take(&mut old.pending);
        buffer.clear();
        old.frame = None;
        self.pending = buffer;
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Adds the record `encode` writes to the open frame of the pending commit; nothing
    /// reaches the file before [`commit`](Self::commit).
    pub(crate) fn append_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        let (start, count) = match self.frame {
            Some(f) => f,
            None => {
                let start = self.pending.len();
                self.pending
                    .extend_from_slice(&[0; FRAME_HEADER + COUNT_LEN]);
                (start, 0)
            }
        };
        let at = self.pending.len();
        self.pending.extend_from_slice(&[0; 4]);
        encode(&mut self.pending);
        let len = (self.pending.len() - at - 4) as u32;
        if let Some(slot) = self.pending.get_mut(at..at + 4) {
            slot.copy_from_slice(&len.to_le_bytes());
        }
        self.frame = Some((start, count + 1));
        if self.pending.len() - start >= FRAME_TARGET {
            self.close_frame();
        }
    }

    /// Writes the open frame's header: payload length, CRC and record count.
    fn close_frame(&mut self) {
        let Some((start, count)) = self.frame.take() else {
            return;
        };
        let count_at = start + FRAME_HEADER;
        if let Some(slot) = self.pending.get_mut(count_at..count_at + COUNT_LEN) {
            slot.copy_from_slice(&count.to_le_bytes());
        }
        let payload = self.pending.get(count_at..).unwrap_or(&[]);
        let len = payload.len() as u32;
        let crc = crc32fast::hash(payload);
        if let Some(header) = self.pending.get_mut(start..count_at) {
            header[..4].copy_from_slice(&len.to_le_bytes());
            header[4..].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Writes the pending records with one `write`, then fsyncs as `durability` says.
    pub(crate) fn commit(&mut self, durability: Durability) -> Result<()> {
        self.close_frame();
        if !self.pending.is_empty() {
            let result = faults::write_all(&self.path, &mut self.file, &self.pending);
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
            faults::check(&self.path, Op::Sync).map_err(Error::io(&self.path))?;
            self.file.sync_data().map_err(Error::io(&self.path))?;
            self.unsynced = false;
            self.last_sync = Instant::now();
        }
        Ok(())
    }
}

/// A version-4 frame payload's records with their file offsets, or `None` when they do
/// not fill it exactly (which a CRC match makes a writer's bug or a forged file; replay
/// treats it as the end of the log).
fn split_records(payload: &[u8], at: u64) -> Option<Vec<(&[u8], u64)>> {
    let (count, mut rest) = payload.split_first_chunk::<COUNT_LEN>()?;
    let count = u32::from_le_bytes(*count) as usize;
    let mut offset = at + COUNT_LEN as u64;
    let mut out = Vec::with_capacity(count.min(rest.len() / 5));
    for _ in 0..count {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        if len > tail.len() {
            return None;
        }
        let (record, tail) = tail.split_at(len);
        out.push((record, offset + 4));
        offset += 4 + len as u64;
        rest = tail;
    }
    rest.is_empty().then_some(out)
}

/// The next frame payload, or `None` for a torn or corrupt frame.
fn next_frame<'a>(r: &mut Reader<'a>) -> Option<&'a [u8]> {
    let len = r.u32().ok()?;
    if len > MAX_RECORD_LEN {
        return None;
    }
    let crc = r.u32().ok()?;
    let payload = r.take(len as usize).ok()?;
    (crc32fast::hash(payload) == crc).then_some(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record replayed from generation 1 of `dir`, with the file's bytes at its
    /// offset checked to be the record.
    fn replay(dir: &Path) -> (Vec<Vec<u8>>, Option<Warning>) {
        let bytes = std::fs::read(wal_path(dir, 1)).unwrap_or_default();
        let mut seen = Vec::new();
        let (_, warning) = Wal::open(dir, 1, |payload, offset, _| {
            let at = offset as usize;
            assert_eq!(bytes.get(at..at + payload.len()), Some(payload));
            seen.push(payload.to_vec());
            Ok(())
        })
        .unwrap();
        (seen, warning)
    }

    fn record(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|k| (i * 31 + k) as u8).collect()
    }

    #[test]
    fn the_next_generation_takes_over_the_record_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = Wal::create(dir.path(), 1).unwrap();
        let r = record(1, 100_000);
        first.append_with(|out| out.extend_from_slice(&r));
        first.commit(Durability::PerRequest).unwrap();
        let grown = first.pending.capacity();
        assert!(grown >= 100_000);
        let mut second = Wal::create(dir.path(), 2).unwrap();
        second.recycle_buffer(&mut first);
        assert_eq!(second.pending.capacity(), grown);
        assert!(second.pending.is_empty() && second.frame.is_none());
        assert_eq!(first.pending.capacity(), 0);
        // The recycled buffer writes the next generation's records as a fresh one would.
        second.append_with(|out| out.extend_from_slice(&r));
        second.commit(Durability::PerRequest).unwrap();
        assert_eq!(second.pending.capacity(), grown, "no reallocation");
        let mut seen = Vec::new();
        Wal::open(dir.path(), 2, |payload, _, _| {
            seen.push(payload.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![r.clone()]);
        // A log with records of its own keeps its buffer; an outsized one is let go.
        let mut third = Wal::create(dir.path(), 3).unwrap();
        third.append_with(|out| out.extend_from_slice(&r));
        let own = third.pending.capacity();
        third.recycle_buffer(&mut second);
        assert_eq!(third.pending.capacity(), own);
        assert_eq!(second.pending.capacity(), grown);
        let mut huge = Wal::create(dir.path(), 4).unwrap();
        huge.pending.reserve(MAX_KEPT_BUFFER + 1);
        let mut fourth = Wal::create(dir.path(), 5).unwrap();
        fourth.recycle_buffer(&mut huge);
        assert_eq!(fourth.pending.capacity(), 0);
    }

    #[test]
    fn a_commit_is_one_frame_and_a_large_one_several() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::create(dir.path(), 1).unwrap();
        let mut expected = Vec::new();
        for i in 0..3 {
            let r = record(i, 10 + i);
            wal.append_with(|out| out.extend_from_slice(&r));
            expected.push(r);
        }
        wal.commit(Durability::PerRequest).unwrap();
        let one_commit = std::fs::metadata(wal.path()).unwrap().len();
        // Header, one frame header, the count, and a length per record.
        let payload: usize = expected.iter().map(|r| r.len() + 4).sum();
        assert_eq!(
            one_commit,
            WAL_HEADER_LEN + (FRAME_HEADER + COUNT_LEN + payload) as u64
        );
        // A commit of 3 MB spans frames of about FRAME_TARGET bytes.
        for i in 3..3 + 3 * 1024 {
            let r = record(i, 1_000);
            wal.append_with(|out| out.extend_from_slice(&r));
            expected.push(r);
        }
        wal.commit(Durability::PerRequest).unwrap();
        drop(wal);
        let (seen, warning) = replay(dir.path());
        assert!(warning.is_none());
        assert!(
            seen == expected,
            "{} records of {}",
            seen.len(),
            expected.len()
        );
    }

    #[test]
    fn version_3_logs_one_record_per_frame_are_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = Vec::new();
        file.extend_from_slice(&WAL_MAGIC);
        put_u32(&mut file, 3);
        put_u64(&mut file, 1);
        let records: Vec<Vec<u8>> = (0..4).map(|i| record(i, 5 + i)).collect();
        for r in &records {
            put_u32(&mut file, r.len() as u32);
            put_u32(&mut file, crc32fast::hash(r));
            file.extend_from_slice(r);
        }
        std::fs::write(wal_path(dir.path(), 1), &file).unwrap();
        let (seen, warning) = replay(dir.path());
        assert!(warning.is_none());
        assert_eq!(seen, records);
    }

    #[test]
    fn a_frame_whose_records_do_not_fill_it_ends_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = Wal::create(dir.path(), 1).unwrap();
        wal.append_with(|out| out.extend_from_slice(b"first"));
        wal.commit(Durability::PerRequest).unwrap();
        drop(wal);
        let path = wal_path(dir.path(), 1);
        let good = std::fs::metadata(&path).unwrap().len();
        // A frame with a valid CRC that claims two records and holds one, then one
        // whose record length runs past its end.
        let mut file = std::fs::read(&path).unwrap();
        for (count, len) in [(2u32, 3u32), (1, 9)] {
            let mut payload = Vec::new();
            put_u32(&mut payload, count);
            put_u32(&mut payload, len);
            payload.extend_from_slice(b"abc");
            put_u32(&mut file, payload.len() as u32);
            put_u32(&mut file, crc32fast::hash(&payload));
            file.extend_from_slice(&payload);
            std::fs::write(&path, &file).unwrap();
            let (seen, warning) = replay(dir.path());
            assert_eq!(seen, vec![b"first".to_vec()]);
            assert!(
                matches!(warning, Some(Warning::TornWalTail { offset, .. }) if offset == good),
                "{warning:?}"
            );
            file.truncate(good as usize);
        }
    }
}
