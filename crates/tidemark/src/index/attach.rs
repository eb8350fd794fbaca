//! Indexes attached read-only: another index of the same mapping whose sealed
//! partitions this index's queries read as their own where retention removed its own
//! (a local cache of partitions rebuilt from a Parquet lake; see
//! `PartitionedEngine::attach_read_only` for what reads see and why writes are never
//! affected).

use std::path::PathBuf;

use super::Index;
use crate::error::{Error, Result};

impl Index {
    /// Attaches `other`, an index of the same mapping and partition width whose
    /// partitions are all sealed: every query of this index (searches, aggregations,
    /// series reads, label lists, [`get`](Self::get)) also reads each partition of
    /// `other` whose time this index refuses writes to as past its raw retention and
    /// holds no partition for. `other` stays open (its lock held) until
    /// [`detach`](Self::detach) or [`close`](Self::close). Returns the starts of
    /// `other`'s partitions.
    ///
    /// # Errors
    /// [`Error::Mapping`] when the mappings differ; engine errors (`attach`) when either
    /// index is not time-partitioned, the widths differ, a partition of `other` is not
    /// sealed or is attached already; I/O errors saving `other`'s counters.
    pub fn attach_read_only(&mut self, other: Index) -> Result<Vec<i64>> {
        if other.mapping.source() != self.mapping.source() {
            return Err(Error::Mapping {
                field: "mappings".to_owned(),
                reason: format!(
                    "{} has another mapping than {}: only an index of the same mapping can be attached",
                    other.dir.display(),
                    self.dir.display()
                ),
            });
        }
        other.save_counters()?;
        let Index {
            dir,
            engine,
            _lock: lock,
            ..
        } = other;
        let starts = self.engine.attach_read_only(engine)?;
        self.attached.push((dir, lock));
        Ok(starts)
    }

    /// Detaches and closes the attached index holding the partition starting at
    /// `start`; answers its directory (the caller may remove it), or `None` when no
    /// attached index holds that partition.
    ///
    /// # Errors
    /// I/O errors closing it.
    pub fn detach(&mut self, start: i64) -> Result<Option<PathBuf>> {
        let Some(engine) = self.engine.detach(start) else {
            return Ok(None);
        };
        let dir = engine.dir().to_path_buf();
        engine.close()?;
        let found = self.attached.iter().position(|(d, _)| *d == dir);
        Ok(Some(match found {
            // Dropping the file releases the lock.
            Some(i) => self.attached.remove(i).0,
            None => dir,
        }))
    }

    /// The starts of the attached partitions, read or not, in time order.
    pub fn attached_partitions(&self) -> Vec<i64> {
        self.engine.attached_partitions()
    }
}
