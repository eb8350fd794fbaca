//! Persistence: the snapshot file and the append-only log.
//!
//! Snapshot (`dump.tmbd`), all integers little-endian:
//!
//! ```text
//! "TMBDSNAP" | u32 version (1) | u64 aof_id | u64 aof_offset | u64 count
//! count × ( u32 key_len | key | i64 expire_ms (i64::MAX: none) | u8 kind (1 filter, 2 string)
//!           | u64 value_len | value: the filter in tidemark-bloom's checksummed format, or the string )
//! u32 CRC32 of every byte before it | "TMBDSNAP"
//! ```
//!
//! It is written to a temporary file, `fsync`ed and renamed over the old one, then the
//! directory is `fsync`ed, so a crash leaves either the old or the new snapshot.
//!
//! Append-only log (`appendonly.tmbd`): `"TMBDAOF1" | u64 id`, then records
//! `u32 len | u32 CRC32(payload) | payload`, the payload being the write command as a RESP
//! request. A snapshot names the log's id and the offset it covers; at start the log is
//! replayed from that offset (or from its start when its id differs, i.e. it was begun after
//! the snapshot). A record cut short at the end (a crash mid-write) is dropped with a
//! warning; a checksum mismatch anywhere stops the start.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use tidemark_bloom::AtomicFile;
use tidemark_bloom::le::{LeReader, Truncated};

use crate::config::AppendFsync;
use crate::error::{Error, Result};
use crate::resp;
use crate::store::{Db, Slot, Value};

/// First and last bytes of a snapshot.
pub const SNAPSHOT_MAGIC: &[u8; 8] = b"TMBDSNAP";
/// Snapshot format version.
pub const SNAPSHOT_VERSION: u32 = 1;
/// First bytes of the append-only log.
pub const AOF_MAGIC: &[u8; 8] = b"TMBDAOF1";
const AOF_HEADER_LEN: u64 = 16;
const KIND_BLOOM: u8 = 1;
const KIND_STRING: u8 = 2;

/// A key's saved form.
#[derive(Debug)]
pub struct SavedEntry {
    /// The key.
    pub key: Vec<u8>,
    /// Expiry in Unix ms or `i64::MAX`.
    pub expire_ms: i64,
    /// 1 filter, 2 string.
    pub kind: u8,
    /// The encoded value.
    pub bytes: Vec<u8>,
}

/// A consistent copy of the keyspace, ready to be written.
#[derive(Debug)]
pub struct Image {
    /// The entries.
    pub entries: Vec<SavedEntry>,
    /// The log this image continues from.
    pub aof_id: u64,
    /// Bytes of that log the image covers.
    pub aof_offset: u64,
}

/// Copies the keyspace with every writer paused (filters are encoded while copied), and
/// notes the log position it corresponds to.
pub fn capture(db: &Db) -> Image {
    let _gate = db.gate_exclusive();
    let mut entries = Vec::new();
    for entry in db.entries() {
        let slot = entry.lock();
        let (kind, bytes) = match &*slot {
            Slot::Live(Value::Bloom(f)) => (KIND_BLOOM, f.to_bytes()),
            Slot::Live(Value::Str(s)) => (KIND_STRING, s.clone()),
            // A half-restored filter is not saved: BF.LOADCHUNK is resent by the client.
            _ => continue,
        };
        entries.push(SavedEntry {
            key: entry.key().to_vec(),
            expire_ms: entry.expire_ms(),
            kind,
            bytes,
        });
    }
    let aof = db
        .aof
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let (aof_id, aof_offset) = match aof {
        Some(aof) => aof.mark(),
        None => (0, 0),
    };
    Image {
        entries,
        aof_id,
        aof_offset,
    }
}

struct CrcWriter<W: Write> {
    inner: W,
    hasher: crc32fast::Hasher,
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes `image` to `path` atomically (temporary file, fsync, rename, directory fsync).
///
/// # Errors
/// [`Error::Io`].
pub fn write_snapshot(image: &Image, path: &Path) -> Result<()> {
    let ctx = |what: &str| format!("{what} {}", path.display());
    let file = AtomicFile::create(path).map_err(|e| Error::io(ctx("creating"), e))?;
    let mut w = CrcWriter {
        inner: file,
        hasher: crc32fast::Hasher::new(),
    };
    let write = |w: &mut CrcWriter<AtomicFile>| -> std::io::Result<()> {
        w.write_all(SNAPSHOT_MAGIC)?;
        w.write_all(&SNAPSHOT_VERSION.to_le_bytes())?;
        w.write_all(&image.aof_id.to_le_bytes())?;
        w.write_all(&image.aof_offset.to_le_bytes())?;
        w.write_all(&(image.entries.len() as u64).to_le_bytes())?;
        for e in &image.entries {
            let key_len = u32::try_from(e.key.len())
                .map_err(|_| std::io::Error::other("key longer than 4 GiB"))?;
            w.write_all(&key_len.to_le_bytes())?;
            w.write_all(&e.key)?;
            w.write_all(&e.expire_ms.to_le_bytes())?;
            w.write_all(&[e.kind])?;
            w.write_all(&(e.bytes.len() as u64).to_le_bytes())?;
            w.write_all(&e.bytes)?;
        }
        Ok(())
    };
    // On any error the dropped `AtomicFile` removes its temporary file and `path` keeps
    // the old snapshot; `commit` fsyncs, renames and fsyncs the directory.
    write(&mut w)
        .and_then(|()| {
            let crc = w.hasher.clone().finalize();
            let mut inner = w.inner;
            inner.write_all(&crc.to_le_bytes())?;
            inner.write_all(SNAPSHOT_MAGIC)?;
            inner.commit()
        })
        .map_err(|e| Error::io(ctx("writing"), e))
}

/// The workspace's little-endian reader, naming the field and its file offset in errors.
struct Reader<'a> {
    inner: LeReader<'a>,
    /// File offset of the reader's first byte.
    base: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> std::result::Result<&'a [u8], String> {
        self.inner.take(n).map_err(truncated(self.base, what))
    }
    fn u8(&mut self, what: &str) -> std::result::Result<u8, String> {
        self.inner.u8().map_err(truncated(self.base, what))
    }
    fn u32(&mut self, what: &str) -> std::result::Result<u32, String> {
        self.inner.u32().map_err(truncated(self.base, what))
    }
    fn u64(&mut self, what: &str) -> std::result::Result<u64, String> {
        self.inner.u64().map_err(truncated(self.base, what))
    }
    fn i64(&mut self, what: &str) -> std::result::Result<i64, String> {
        self.inner.i64().map_err(truncated(self.base, what))
    }
}

/// The message of a read past the end of `what`, at its file offset.
fn truncated(base: usize, what: &str) -> impl Fn(Truncated) -> String + '_ {
    move |t| format!("truncated {what} at offset {}", base + t.offset)
}

/// What a snapshot held, before it is put into a [`Db`].
#[derive(Debug)]
pub struct LoadedSnapshot {
    /// The entries, values decoded.
    pub entries: Vec<(Vec<u8>, i64, Value)>,
    /// The log id the snapshot continues.
    pub aof_id: u64,
    /// The log offset it covers.
    pub aof_offset: u64,
}

/// Decodes a snapshot, checking its checksum and every filter.
///
/// # Errors
/// A message saying what is wrong (the caller wraps it in [`Error::CorruptFile`]).
pub fn decode_snapshot(bytes: &[u8]) -> std::result::Result<LoadedSnapshot, String> {
    let min = 8 + 4 + 8 + 8 + 8 + 4 + 8;
    if bytes.len() < min {
        return Err(format!(
            "{} bytes, shorter than the {min}-byte minimum",
            bytes.len()
        ));
    }
    if &bytes[..8] != SNAPSHOT_MAGIC || &bytes[bytes.len() - 8..] != SNAPSHOT_MAGIC {
        return Err("bad magic (not a tidemark-bloomd snapshot, or truncated)".to_string());
    }
    let body_end = bytes.len() - 12;
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&bytes[body_end..body_end + 4]);
    let stored = u32::from_le_bytes(crc);
    let computed = crc32fast::hash(&bytes[..body_end]);
    if stored != computed {
        return Err(format!(
            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        ));
    }
    let mut r = Reader {
        inner: LeReader::new(&bytes[8..body_end]),
        base: 8,
    };
    let version = r.u32("version")?;
    if version != SNAPSHOT_VERSION {
        return Err(format!(
            "unsupported version {version} (this build reads {SNAPSHOT_VERSION})"
        ));
    }
    let aof_id = r.u64("aof id")?;
    let aof_offset = r.u64("aof offset")?;
    let count = r.u64("key count")?;
    let mut entries = Vec::new();
    for i in 0..count {
        let key_len = r.u32("key length")? as usize;
        let key = r.take(key_len, "key")?.to_vec();
        let expire = r.i64("expiry")?;
        let kind = r.u8("kind")?;
        let len = usize::try_from(r.u64("value length")?)
            .map_err(|_| format!("value length of key #{i} too large"))?;
        let value = r.take(len, "value")?;
        let value = match kind {
            KIND_BLOOM => Value::Bloom(Box::new(
                tidemark_bloom::ScalableBloomFilter::from_bytes(value).map_err(|e| {
                    format!("filter of key {:?}: {e}", String::from_utf8_lossy(&key))
                })?,
            )),
            KIND_STRING => Value::Str(value.to_vec()),
            k => return Err(format!("unknown value kind {k} for key #{i}")),
        };
        entries.push((key, expire, value));
    }
    if !r.inner.is_empty() {
        return Err(format!(
            "{} unexpected bytes after the last key",
            r.inner.remaining()
        ));
    }
    Ok(LoadedSnapshot {
        entries,
        aof_id,
        aof_offset,
    })
}

/// Reads and decodes the snapshot at `path`; `Ok(None)` when there is none.
///
/// # Errors
/// [`Error::CorruptFile`] or [`Error::Io`].
pub fn load_snapshot(path: &Path) -> Result<Option<LoadedSnapshot>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    decode_snapshot(&bytes)
        .map(Some)
        .map_err(|detail| Error::CorruptFile {
            kind: "snapshot",
            path: path.to_path_buf(),
            detail,
        })
}

struct AofFile {
    file: File,
    id: u64,
    len: u64,
    unsynced: bool,
}

/// The append-only log: records are appended to a shared buffer in the order commands
/// change keys, and written out before the replies that follow them.
#[derive(Debug)]
pub struct Aof {
    path: PathBuf,
    fsync: AppendFsync,
    pending: Mutex<Vec<u8>>,
    has_pending: AtomicBool,
    file: Mutex<AofFileBox>,
}

#[derive(Debug)]
struct AofFileBox(Option<AofFile>);

impl std::fmt::Debug for AofFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AofFile")
            .field("id", &self.id)
            .field("len", &self.len)
            .finish()
    }
}

fn new_aof_id() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (t ^ (u64::from(std::process::id()) << 32)) | 1
}

fn create_aof(path: &Path, id: u64, body: &[u8]) -> Result<AofFile> {
    let ctx = |what: &str| format!("{what} {}", path.display());
    let mut file = AtomicFile::create(path).map_err(|e| Error::io(ctx("creating"), e))?;
    file.write_all(AOF_MAGIC)
        .and_then(|()| file.write_all(&id.to_le_bytes()))
        .and_then(|()| file.write_all(body))
        .and_then(|()| file.commit())
        .map_err(|e| Error::io(ctx("writing"), e))?;
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let len = file
        .seek(SeekFrom::End(0))
        .map_err(|e| Error::io(format!("seeking {}", path.display()), e))?;
    Ok(AofFile {
        file,
        id,
        len,
        unsynced: false,
    })
}

/// The commands an existing log holds after `from_offset`, for replay.
#[derive(Debug)]
pub struct AofReplay {
    /// Each command's arguments.
    pub commands: Vec<Vec<Vec<u8>>>,
    /// The log's id.
    pub id: u64,
    /// Length of the valid part (a torn tail is cut off there).
    pub valid_len: u64,
    /// Bytes dropped from a torn tail.
    pub dropped: u64,
}

/// Reads the log at `path`; replays from `offset` when its id is `snapshot_id`, else from
/// its start. `Ok(None)` when there is no log.
///
/// # Errors
/// [`Error::CorruptFile`] or [`Error::Io`].
pub fn read_aof(path: &Path, snapshot_id: u64, offset: u64) -> Result<Option<AofReplay>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
    }
    let corrupt = |detail: String| Error::CorruptFile {
        kind: "append-only",
        path: path.to_path_buf(),
        detail,
    };
    if bytes.len() < AOF_HEADER_LEN as usize || &bytes[..8] != AOF_MAGIC {
        return Err(corrupt(
            "bad header (not a tidemark-bloomd append-only log)".into(),
        ));
    }
    let Ok(id) = LeReader::new(&bytes[8..]).u64() else {
        return Err(corrupt("truncated header".into()));
    };
    let start = if id == snapshot_id {
        usize::try_from(offset.max(AOF_HEADER_LEN)).unwrap_or(usize::MAX)
    } else {
        AOF_HEADER_LEN as usize
    };
    if start > bytes.len() {
        return Err(corrupt(format!(
            "the snapshot covers {start} bytes but the log has only {}",
            bytes.len()
        )));
    }
    let mut pos = start;
    let mut commands = Vec::new();
    let mut ranges = Vec::new();
    while pos < bytes.len() {
        // A header cut short at the end is a torn write: dropped, as a short payload is.
        let mut h = LeReader::new(&bytes[pos..]);
        let (Ok(len), Ok(crc)) = (h.u32(), h.u32()) else {
            break;
        };
        let len = len as usize;
        if bytes.len() - pos - 8 < len {
            break;
        }
        let payload = &bytes[pos + 8..pos + 8 + len];
        if crc32fast::hash(payload) != crc {
            return Err(corrupt(format!(
                "checksum mismatch in the record at offset {pos}"
            )));
        }
        match resp::parse(payload, usize::MAX, &mut ranges) {
            Ok(Some(n)) if n == payload.len() && !ranges.is_empty() => {}
            _ => return Err(corrupt(format!("undecodable record at offset {pos}"))),
        }
        commands.push(ranges.iter().map(|r| payload[r.clone()].to_vec()).collect());
        pos += 8 + len;
    }
    Ok(Some(AofReplay {
        commands,
        id,
        valid_len: pos as u64,
        dropped: (bytes.len() - pos) as u64,
    }))
}

impl Aof {
    /// Opens the log for appending: continues `existing` (after cutting a torn tail) or
    /// starts a new one.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn open(path: &Path, fsync: AppendFsync, existing: Option<&AofReplay>) -> Result<Self> {
        let file = match existing {
            Some(r) => {
                let file = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
                file.set_len(r.valid_len)
                    .map_err(|e| Error::io(format!("truncating {}", path.display()), e))?;
                drop(file);
                let mut file = OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
                let len = file
                    .seek(SeekFrom::End(0))
                    .map_err(|e| Error::io(format!("seeking {}", path.display()), e))?;
                AofFile {
                    file,
                    id: r.id,
                    len,
                    unsynced: false,
                }
            }
            None => create_aof(path, new_aof_id(), &[])?,
        };
        Ok(Aof {
            path: path.to_path_buf(),
            fsync,
            pending: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
            file: Mutex::new(AofFileBox(Some(file))),
        })
    }

    /// Buffers one command.
    pub fn append(&self, args: &[&[u8]]) {
        let mut payload = Vec::new();
        resp::encode_command(args, &mut payload);
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let crc = crc32fast::hash(&payload);
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.extend_from_slice(&len.to_le_bytes());
        pending.extend_from_slice(&crc.to_le_bytes());
        pending.extend_from_slice(&payload);
        self.has_pending.store(true, Ordering::Release);
    }

    /// True when buffered records wait to be written.
    pub fn has_pending(&self) -> bool {
        self.has_pending.load(Ordering::Acquire)
    }

    fn write_pending(&self, file: &mut AofFile) -> std::io::Result<()> {
        let data = {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            self.has_pending.store(false, Ordering::Release);
            std::mem::take(&mut *pending)
        };
        if !data.is_empty() {
            file.file.write_all(&data)?;
            file.len += data.len() as u64;
            file.unsynced = true;
        }
        if self.fsync == AppendFsync::Always && file.unsynced {
            file.file.sync_data()?;
            file.unsynced = false;
        }
        Ok(())
    }

    /// Writes the buffered records (and fsyncs under `appendfsync always`). Called before
    /// replies are sent.
    ///
    /// # Errors
    /// The write's I/O error.
    pub fn flush(&self) -> std::io::Result<()> {
        let mut guard = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.0.as_mut() {
            Some(f) => self.write_pending(f),
            None => Ok(()),
        }
    }

    /// Flushes and fsyncs (the once-a-second task, and shutdown).
    ///
    /// # Errors
    /// The I/O error.
    pub fn sync(&self) -> std::io::Result<()> {
        let mut guard = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.0.as_mut() {
            Some(f) => {
                self.write_pending(f)?;
                if f.unsynced {
                    f.file.sync_data()?;
                    f.unsynced = false;
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Flushes and returns `(id, length)`: the position a snapshot taken now covers.
    pub fn mark(&self) -> (u64, u64) {
        let mut guard = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.0.as_mut() {
            Some(f) => {
                if let Err(e) = self.write_pending(f) {
                    eprintln!("tidemark-bloomd: append-only log write failed: {e}");
                }
                (f.id, f.len)
            }
            None => (0, 0),
        }
    }

    /// After a snapshot covering `(id, offset)` is on disk, starts a new log holding only
    /// the records written since.
    ///
    /// # Errors
    /// [`Error::Io`]; the old log is kept then.
    pub fn rewrite_after(&self, id: u64, offset: u64) -> Result<()> {
        let mut guard = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(f) = guard.0.as_mut() else {
            return Ok(());
        };
        if f.id != id {
            return Ok(());
        }
        self.write_pending(f)
            .map_err(|e| Error::io(format!("writing {}", self.path.display()), e))?;
        let mut tail = Vec::new();
        let mut old = File::open(&self.path)
            .map_err(|e| Error::io(format!("opening {}", self.path.display()), e))?;
        old.seek(SeekFrom::Start(offset.max(AOF_HEADER_LEN)))
            .and_then(|_| old.read_to_end(&mut tail))
            .map_err(|e| Error::io(format!("reading {}", self.path.display()), e))?;
        let new = create_aof(&self.path, new_aof_id(), &tail)?;
        guard.0 = Some(new);
        Ok(())
    }

    /// Current length in bytes.
    pub fn len(&self) -> u64 {
        let guard = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        guard.0.as_ref().map_or(0, |f| f.len)
    }

    /// True when the log holds only its header.
    pub fn is_empty(&self) -> bool {
        self.len() <= AOF_HEADER_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trip_and_corruption() {
        let mut f = tidemark_bloom::ScalableBloomFilter::new(10, 0.01).unwrap();
        f.add(b"x").unwrap();
        let image = Image {
            entries: vec![SavedEntry {
                key: b"k".to_vec(),
                expire_ms: i64::MAX,
                kind: KIND_BLOOM,
                bytes: f.to_bytes(),
            }],
            aof_id: 7,
            aof_offset: 16,
        };
        let dir = std::env::temp_dir().join(format!("bloomd-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dump.tmbd");
        write_snapshot(&image, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let loaded = decode_snapshot(&bytes).unwrap();
        assert_eq!(loaded.entries.len(), 1);
        assert_eq!(loaded.aof_id, 7);
        for cut in 0..bytes.len() {
            assert!(decode_snapshot(&bytes[..cut]).is_err());
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(decode_snapshot(&b).is_err(), "flip at {i}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
