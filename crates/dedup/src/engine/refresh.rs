//! Refresh: the buffer written as a segment, tombstones persisted, a new log generation,
//! the manifest switched.

use super::*;

impl Engine {
    /// Writes the buffer as a new segment, persists changed tombstones, starts a new
    /// write-ahead log generation and switches the manifest to name them, then deletes
    /// the old log and tombstone files. Does nothing when there is nothing to persist.
    ///
    /// On error the files written so far are removed and the old manifest and log still
    /// describe the engine; an error after the buffer went to the segment writer poisons
    /// the engine ([`Error::Poisoned`] until reopened, which replays the log).
    ///
    /// # Errors
    /// [`Error::Poisoned`]; segment write errors; I/O errors.
    pub fn refresh(&mut self) -> Result<()> {
        self.check_poisoned()?;
        let dirty = self.slots.iter().any(|s| s.dirty);
        if self.buffer.is_empty() && !dirty && self.wal_records == 0 {
            return Ok(());
        }
        let mut created = Vec::new();
        let result = self.refresh_inner(&mut created);
        if result.is_err() {
            // The buffer and the log are untouched: the engine stays as it was.
            for path in created {
                let _ = std::fs::remove_file(path);
            }
        }
        result
    }

    pub(super) fn refresh_inner(&mut self, created: &mut Vec<PathBuf>) -> Result<()> {
        // 1. The new segment.
        let mut new_slot = None;
        let mut next_segment = self.next_segment;
        if !self.buffer.is_empty() {
            let id = self.next_segment;
            let path = segment_path(&self.dir, id);
            let file = AtomicFile::create(&path).map_err(Error::io(&path))?;
            let (file, meta, series) = write_segment(
                &self.buffer,
                &self.series,
                &self.columns,
                self.config.refresh_options(),
                file,
            )
            .map_err(|e| Error::Segment(e.in_file(&path)))?;
            created.push(path.clone());
            file.commit().map_err(Error::io(&path))?;
            let entry = SegmentEntry {
                id,
                rows: meta.row_count,
                tombstones: None,
            };
            new_slot = Some(Slot::open_written(&self.dir, &entry, series)?);
            next_segment = id.saturating_add(1);
        }
        // 2. Changed tombstones, as their next generation.
        let mut new_tombs = Vec::new();
        for (i, s) in self.slots.iter().enumerate().filter(|(_, s)| s.dirty) {
            let next = s.tombstones.next_generation();
            let written = next.write_beside(&s.path)?;
            created.push(written);
            new_tombs.push((i, next));
        }
        // 3. The next log generation.
        let wal_gen = self.wal.generation().saturating_add(1);
        let stale = wal_path(&self.dir, wal_gen);
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(Error::io(&stale))?;
        }
        created.push(stale);
        let mut wal = Wal::create(&self.dir, wal_gen)?;
        // 4. The manifest switch: from here on the new files are the engine.
        let mut segments: Vec<SegmentEntry> = self.slots.iter().map(Slot::entry).collect();
        for (i, t) in &new_tombs {
            if let Some(e) = segments.get_mut(*i) {
                e.tombstones = Some(t.generation());
            }
        }
        segments.extend(new_slot.as_ref().map(Slot::entry));
        Manifest {
            next_segment,
            wal_generation: wal_gen,
            segments,
        }
        .write(&self.dir)?;
        created.clear();
        // 5. Memory follows; then the old files go (best effort: open removes orphans).
        let mut obsolete = vec![self.wal.path().to_path_buf()];
        for (i, t) in new_tombs {
            if let Some(s) = self.slots.get_mut(i) {
                if let Some(g) = s.tomb_generation {
                    obsolete.push(Tombstones::path_for(&s.path, g));
                }
                s.tomb_generation = Some(t.generation());
                s.tombstones = t;
                s.dirty = false;
            }
        }
        self.slots.extend(new_slot);
        self.note_segments();
        self.next_segment = next_segment;
        wal.recycle_buffer(&mut self.wal);
        self.wal = wal;
        self.wal_records = 0;
        self.buffer.clear();
        // Pages that lookups and merges touched since the last refresh leave the resident
        // set (they stay in the page cache).
        for s in &self.slots {
            s.segment.release_resident();
        }
        for path in obsolete {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }
}
