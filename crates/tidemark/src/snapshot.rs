//! Consistent snapshots of an index directory, as Prometheus and VictoriaMetrics take
//! them: every file Tidemark writes is either immutable once renamed into place
//! (segments, tombstones, manifests, the mapping, counters: written to a temporary name
//! and renamed, so a later change is a new inode) or the write-ahead log, which is
//! appended in place. A snapshot hard-links the first kind (no bytes copied, and the
//! link keeps the inode it saw even when the index later replaces the file) and copies
//! the log; it leaves out the index's lock file and temporary files of writes in
//! progress. Taken while no write can run ([`Index::snapshot`] borrows the index, so
//! its writers wait), it holds exactly what had been acknowledged.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use crate::error::{Error, Result};
use crate::index::{Index, LOCK_FILE};

/// What a snapshot (or a restore) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Files hard-linked (no bytes copied).
    pub files_linked: u64,
    /// Files copied (write-ahead logs, and files on another filesystem).
    pub files_copied: u64,
    /// Bytes of the linked files.
    pub bytes_linked: u64,
    /// Bytes copied.
    pub bytes_copied: u64,
}

impl SnapshotStats {
    fn add(&mut self, other: SnapshotStats) {
        self.files_linked += other.files_linked;
        self.files_copied += other.files_copied;
        self.bytes_linked += other.bytes_linked;
        self.bytes_copied += other.bytes_copied;
    }
}

/// Whether `name` is a write-ahead log, the one kind of file appended in place.
fn appended_in_place(name: &str) -> bool {
    name.starts_with("wal-") && name.ends_with(".log")
}

/// Copies the tree at `src` into `dest`, which must not exist: directories recreated,
/// write-ahead logs copied and synced, every other file hard-linked (copied when a link
/// is impossible, e.g. across filesystems), lock and temporary files left out. A file
/// that vanishes while the tree is walked is skipped: with writes held off, only files
/// no manifest names (a merge's output not yet installed) can vanish. `skip` names
/// top-level entries of `src` to leave out (a data directory's own `snapshots`).
///
/// # Errors
/// [`Error::Io`] naming the path: `dest` exists, a read, link, copy or sync failed.
pub fn copy_tree(src: &Path, dest: &Path, skip: &[&str]) -> Result<SnapshotStats> {
    if dest.exists() {
        return Err(Error::io(dest)(std::io::Error::new(
            ErrorKind::AlreadyExists,
            "the snapshot destination already exists",
        )));
    }
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(Error::io(parent))?;
    }
    let stats = copy_dir(src, dest, skip)?;
    if let Some(parent) = dest.parent() {
        tidemark_segment::sync_dir(parent).map_err(Error::io(parent))?;
    }
    Ok(stats)
}

fn copy_dir(src: &Path, dest: &Path, skip: &[&str]) -> Result<SnapshotStats> {
    fs::create_dir(dest).map_err(Error::io(dest))?;
    let mut stats = SnapshotStats::default();
    let entries = fs::read_dir(src).map_err(Error::io(src))?;
    for entry in entries {
        let entry = entry.map_err(Error::io(src))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if skip.contains(&name) || name == LOCK_FILE || tidemark_segment::is_temp_name(name) {
            continue;
        }
        let from = entry.path();
        let to = dest.join(name);
        let meta = match fs::symlink_metadata(&from) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&from)(e)),
        };
        if meta.is_dir() {
            stats.add(copy_dir(&from, &to, &[])?);
        } else if meta.is_file() {
            if appended_in_place(name) {
                copy_file(&from, &to, &mut stats)?;
                continue;
            }
            match fs::hard_link(&from, &to) {
                Ok(()) => {
                    stats.files_linked += 1;
                    stats.bytes_linked += meta.len();
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                // Another filesystem, or links not permitted: copy.
                Err(_) => copy_file(&from, &to, &mut stats)?,
            }
        }
    }
    tidemark_segment::sync_dir(dest).map_err(Error::io(dest))?;
    Ok(stats)
}

fn copy_file(from: &Path, to: &Path, stats: &mut SnapshotStats) -> Result<()> {
    let n = match fs::copy(from, to) {
        Ok(n) => n,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(from)(e)),
    };
    fs::File::open(to)
        .and_then(|f| f.sync_all())
        .map_err(Error::io(to))?;
    stats.files_copied += 1;
    stats.bytes_copied += n;
    Ok(())
}

impl Index {
    /// Writes a consistent snapshot of this index to `dest` (which must not exist):
    /// segments and the other immutable files hard-linked, the write-ahead log copied,
    /// so it holds exactly what the index had acknowledged. Opening `dest` as an index
    /// (or a copy of it) restores it; a snapshot is never modified by the index it was
    /// taken from. The borrow keeps writes out while it runs; it reads no data and
    /// copies only the log, so it takes milliseconds.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path.
    pub fn snapshot(&self, dest: &Path) -> Result<SnapshotStats> {
        copy_tree(self.dir(), dest, &[])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::{BulkItem, Mapping};
    use serde_json::json;

    fn mapping() -> Mapping {
        Mapping::from_value(json!({"mappings": {"properties": {
            "host": {"type": "keyword", "time_series_dimension": true},
            "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))
        .unwrap()
    }

    fn docs(range: std::ops::Range<i64>) -> Vec<BulkItem> {
        range
            .map(|i| BulkItem::create(json!({"@timestamp": i * 1000, "host": "a", "cpu": 0.5})))
            .collect()
    }

    #[test]
    fn a_snapshot_holds_what_was_acknowledged_and_nothing_written_later() {
        let tmp = tempfile::tempdir().unwrap();
        let mut index = Index::create(tmp.path().join("idx"), mapping()).unwrap();
        index.bulk(docs(0..100)).unwrap();
        index.refresh().unwrap();
        index.bulk(docs(100..150)).unwrap(); // in the log only
        let snap = tmp.path().join("snap");
        let stats = index.snapshot(&snap).unwrap();
        assert!(stats.files_linked > 0, "{stats:?}");
        assert!(stats.files_copied > 0, "{stats:?}");
        assert!(!snap.join(LOCK_FILE).exists());
        // Later writes and a merge do not reach the snapshot.
        index.bulk(docs(150..300)).unwrap();
        index.refresh().unwrap();
        index.merge().unwrap();
        assert_eq!(index.stats().unwrap().documents, 300);
        index.close().unwrap();
        let restored = Index::open(&snap).unwrap();
        assert_eq!(restored.stats().unwrap().documents, 150);
        // Retries of the snapshot's documents are duplicates there.
        let mut restored = restored;
        let r = restored.bulk(docs(0..200)).unwrap();
        let created = r.iter().filter(|x| x.http_status() == 201).count();
        assert_eq!(created, 50);
        // A second snapshot to the same place is refused.
        let e = restored.snapshot(&snap).unwrap_err();
        assert!(e.to_string().contains("exists"), "{e}");
    }
}
