//! Refresh: the buffer written as a segment, tombstones persisted, a new log generation,
//! the manifest switched, in three steps so that the segment can be written off the
//! write path.
//!
//! 1. **Freeze** (on the writer, cheap): the buffer becomes the *frozen* buffer, shared
//!    read-only; appends go on into a fresh buffer and a new log generation. The frozen
//!    buffer's records stay in the older generations, which the manifest still names.
//! 2. **Write** ([`RefreshJob::run`], on any thread): the frozen buffer as a segment,
//!    fsynced, and opened.
//! 3. **Install** ([`Engine::install_refresh`], on the writer, cheap): the rows deleted
//!    from the frozen buffer meanwhile become the new segment's tombstones, changed
//!    tombstones are written, the manifest switches to the new segment and the newest
//!    log generation, and the older generations are deleted.
//!
//! Between 1 and 3 every check, read and query sees the frozen buffer between the
//! segments and the live buffer; a crash replays every log generation from the
//! manifest's on, so nothing acknowledged is lost at any step. [`Engine::refresh`] runs
//! the three steps inline.

use super::*;

use crate::buffer::{KilledRows, Row, RunSeries};

/// The buffer of a refresh in flight: frozen (never changed again, shared with the job
/// writing it), with the rows deleted since the freeze kept beside it.
#[derive(Debug)]
pub(super) struct Frozen {
    pub(super) buffer: Arc<Buffer>,
    /// Its runs' series, for the writer and for ids of killed rows.
    series: Arc<RunSeries>,
    columns: Arc<ColumnTable>,
    /// Rows deleted (or replaced) since the freeze.
    pub(super) killed: KilledRows,
    /// The job allowed to install it: a job handed out earlier (superseded by an inline
    /// refresh, say) is discarded when it comes back.
    epoch: u64,
    /// Whether a job is out.
    in_flight: bool,
}

impl Frozen {
    /// Where the live point of `key` is in the frozen buffer, if there.
    pub(super) fn lookup(&self, key: &Key) -> Option<Row> {
        self.buffer
            .lookup(key)
            .filter(|row| !self.killed.contains(row))
    }

    /// Its live points (buffered at the freeze, not deleted since).
    pub(super) fn live(&self) -> impl Iterator<Item = Row> + '_ {
        self.buffer.live().filter(|row| !self.killed.contains(row))
    }

    /// How many live points it holds.
    pub(super) fn len(&self) -> usize {
        self.buffer.len().saturating_sub(self.killed.len())
    }

    /// The killed rows, or `None` when there are none (the common case: reads skip the
    /// lookups).
    pub(super) fn killed(&self) -> Option<&KilledRows> {
        (!self.killed.is_empty()).then_some(&self.killed)
    }

    /// The id of a frozen row.
    fn id_of(&self, row: Row, events: bool) -> Option<SyntheticId> {
        let run = self.buffer.run_of_row(row)?;
        let off = row.off();
        if events {
            return run.ids.get(off).copied();
        }
        let tsid = self.series.tsid(row.run())?;
        Some(SyntheticId::new(*tsid, *run.ts.get(off)?))
    }
}

/// The writing of a frozen buffer as a segment, planned by [`Engine::plan_refresh`], to
/// [`run`](Self::run) on any thread while the engine keeps ingesting, then installed
/// with [`Engine::install_refresh`].
#[derive(Debug)]
pub struct RefreshJob {
    epoch: u64,
    dir: PathBuf,
    /// The new segment's id; `None` when the frozen buffer is empty (only tombstones
    /// and the log switch to persist).
    id: Option<u64>,
    buffer: Arc<Buffer>,
    series: Arc<RunSeries>,
    columns: Arc<ColumnTable>,
    options: tidemark_segment::SegmentOptions,
}

/// A segment written by [`RefreshJob::run`], not yet part of its engine.
#[derive(Debug)]
pub struct RefreshedSegment {
    epoch: u64,
    path: Option<PathBuf>,
    written: Result<Option<Slot>>,
}

impl RefreshJob {
    /// Points the segment will hold.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether the job writes no segment.
    pub fn is_empty(&self) -> bool {
        self.id.is_none()
    }

    /// Writes the segment, fsyncs it and opens it. An error (or a panic, a bug) is
    /// carried to [`Engine::install_refresh`], which keeps the buffer frozen for the next
    /// attempt.
    pub fn run(self) -> RefreshedSegment {
        let path = self.id.map(|id| segment_path(&self.dir, id));
        let epoch = self.epoch;
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.write()))
            .unwrap_or(Err(Error::RefreshPanicked));
        if written.is_err() {
            if let Some(p) = &path {
                let _ = std::fs::remove_file(p);
            }
        }
        RefreshedSegment {
            epoch,
            path,
            written,
        }
    }

    fn write(self) -> Result<Option<Slot>> {
        let Some(id) = self.id else {
            return Ok(None);
        };
        let path = segment_path(&self.dir, id);
        let file = AtomicFile::create(&path).map_err(Error::io(&path))?;
        let (file, meta, series) = write_segment(
            &self.buffer,
            self.series.as_ref(),
            &self.columns,
            self.options,
            file,
        )
        .map_err(|e| Error::Segment(e.in_file(&path)))?;
        file.commit().map_err(Error::io(&path))?;
        let entry = SegmentEntry {
            id,
            rows: meta.row_count,
            tombstones: None,
        };
        Slot::open_written(&self.dir, &entry, series).map(Some)
    }
}

impl RefreshedSegment {
    /// Removes the file of a refresh that will not be installed.
    pub(crate) fn discard(self) {
        if let (Some(p), Ok(_)) = (&self.path, &self.written) {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Engine {
    /// Writes the buffer as a new segment, persists changed tombstones, starts a new
    /// write-ahead log generation and switches the manifest to name them, then deletes
    /// the old log and tombstone files. Does nothing when there is nothing to persist.
    /// A refresh in flight ([`plan_refresh`](Self::plan_refresh)) is completed here first
    /// (its job, when it comes back, is discarded).
    ///
    /// On error the files written so far are removed; the points stay buffered (frozen)
    /// and in the log, and the next refresh writes them again. A failed log fsync
    /// poisons the engine ([`Error::Poisoned`] until reopened, which replays the log).
    ///
    /// # Errors
    /// [`Error::Poisoned`]; segment write errors; I/O errors.
    pub fn refresh(&mut self) -> Result<()> {
        self.check_poisoned()?;
        if self.frozen.is_some() {
            let job = self.refresh_job()?;
            self.install_refresh(job.run())?;
        }
        if self.freeze()? {
            let job = self.refresh_job()?;
            self.install_refresh(job.run())?;
        }
        Ok(())
    }

    /// Whether refreshes run off the write path: on, an append no longer refreshes when
    /// the buffer reaches `refresh_rows` (unless it holds four times that, a bound on
    /// memory when the refreshing thread falls behind), and the caller runs them with
    /// [`plan_refresh`](Self::plan_refresh), [`RefreshJob::run`] and
    /// [`install_refresh`](Self::install_refresh).
    pub(crate) fn set_background_refresh(&mut self, on: bool) {
        self.background_refresh = on;
    }

    /// Points buffered and not frozen: what the next freeze takes.
    pub(crate) fn unfrozen_rows(&self) -> usize {
        self.buffer.rows()
    }

    /// Whether a refresh is frozen and not yet installed.
    pub(crate) fn refresh_in_flight(&self) -> bool {
        self.frozen.is_some()
    }

    /// The refresh to run now, if one is due (the buffer reached `refresh_rows`, or
    /// `force` and there is something to persist) or a frozen buffer's earlier attempt
    /// failed: the buffer is frozen (a new log generation starts) and the job that
    /// writes it returned. `None` while a job is out.
    ///
    /// # Errors
    /// I/O errors creating the next log generation (nothing changed); a failed fsync of
    /// the current one (which poisons the engine).
    pub fn plan_refresh(&mut self, force: bool) -> Result<Option<RefreshJob>> {
        self.check_poisoned()?;
        match &self.frozen {
            Some(f) if f.in_flight => return Ok(None),
            Some(_) => return self.refresh_job().map(Some),
            None => {}
        }
        if !force && self.buffer.rows() < self.config.refresh_rows {
            return Ok(None);
        }
        if !self.freeze()? {
            return Ok(None);
        }
        self.refresh_job().map(Some)
    }

    /// Freezes the buffer: it moves aside (shared, read-only) and a new log generation
    /// takes the appends from here on. False when there is nothing to persist.
    fn freeze(&mut self) -> Result<bool> {
        let dirty = self.slots.iter().any(|s| s.dirty);
        if self.frozen.is_some() || (self.buffer.is_empty() && !dirty && self.wal_records == 0) {
            return Ok(false);
        }
        let generation = self.wal.generation().saturating_add(1);
        let stale = wal_path(&self.dir, generation);
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(Error::io(&stale))?;
        }
        let mut wal = Wal::create(&self.dir, generation)?;
        // The frozen points' only copy is the older log: it is synced before appends
        // move on (a no-op when every commit synced).
        if let Err(e) = self.wal.sync() {
            self.poisoned = true;
            drop(wal);
            let _ = std::fs::remove_file(&stale);
            return Err(e);
        }
        wal.recycle_buffer(&mut self.wal);
        self.wal = wal;
        self.wal_records = 0;
        let fresh = self.spare.take().unwrap_or_default();
        let buffer = std::mem::replace(&mut self.buffer, fresh);
        let series = RunSeries::of(&buffer, &self.series);
        self.frozen = Some(Frozen {
            buffer: Arc::new(buffer),
            series: Arc::new(series),
            columns: Arc::new(self.columns.clone()),
            killed: KilledRows::default(),
            epoch: 0,
            in_flight: false,
        });
        Ok(true)
    }

    /// A job writing the frozen buffer (a new segment id each time, so that a job
    /// superseded while it ran never writes the file of its successor).
    fn refresh_job(&mut self) -> Result<RefreshJob> {
        self.refresh_epoch = self.refresh_epoch.wrapping_add(1);
        let epoch = self.refresh_epoch;
        let options = self.config.refresh_options();
        let f = self.frozen.as_mut().ok_or(Error::Poisoned)?;
        let id = if f.buffer.is_empty() {
            None
        } else {
            let id = self.next_segment;
            self.next_segment = id.saturating_add(1);
            Some(id)
        };
        f.epoch = epoch;
        f.in_flight = true;
        Ok(RefreshJob {
            epoch,
            dir: self.dir.clone(),
            id,
            buffer: Arc::clone(&f.buffer),
            series: Arc::clone(&f.series),
            columns: Arc::clone(&f.columns),
            options,
        })
    }

    /// Installs a refresh run by [`RefreshJob::run`]: the rows deleted from the frozen
    /// buffer since it froze are tombstoned in the new segment, changed tombstones are
    /// written, the manifest switches to the new segment and the current log
    /// generation, and the frozen buffer and the older log generations go. A job
    /// superseded meanwhile is discarded.
    ///
    /// On error the buffer stays frozen (its points readable, its log kept) and the next
    /// [`plan_refresh`](Self::plan_refresh) writes it again.
    ///
    /// # Errors
    /// The job's own error; tombstone, manifest and log I/O errors.
    pub fn install_refresh(&mut self, done: RefreshedSegment) -> Result<()> {
        let current = self
            .frozen
            .as_mut()
            .filter(|f| f.epoch == done.epoch && f.in_flight && !self.poisoned);
        let Some(f) = current else {
            done.discard();
            return Ok(());
        };
        f.in_flight = false;
        let path = done.path.clone();
        let mut created: Vec<PathBuf> = path.iter().cloned().collect();
        let result = match done.written {
            Ok(slot) => self.install_refreshed(slot, &mut created),
            Err(e) => Err(e),
        };
        if result.is_err() {
            for p in created {
                let _ = std::fs::remove_file(p);
            }
        }
        result
    }

    fn install_refreshed(
        &mut self,
        mut new_slot: Option<Slot>,
        created: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let events = self.keyer.is_some();
        let keyer = self.keyer.clone();
        let f = self.frozen.as_ref().ok_or(Error::Poisoned)?;
        // 1. The frozen rows deleted since the freeze.
        if let Some(slot) = new_slot.as_mut() {
            for &row in &f.killed {
                let Some(id) = f.id_of(row, events) else {
                    continue;
                };
                let hint = f.buffer.run_of_row(row).map(|run| run.series);
                let hint = hint.and_then(|s| self.series.entry(s)).map(|e| e.tsid);
                if let Some(r) = find_row(slot, &id, keyer.as_deref(), hint.as_ref())? {
                    slot.tombstones
                        .delete(r)
                        .map_err(|_| Error::BadRow { id, row: r })?;
                }
            }
            if !slot.tombstones.is_empty() {
                let next = slot.tombstones.next_generation();
                created.push(next.write_beside(&slot.path)?);
                slot.tomb_generation = Some(next.generation());
                slot.tombstones = next;
            }
        }
        // 2. Changed tombstones, as their next generation.
        let mut new_tombs = Vec::new();
        for (i, s) in self.slots.iter().enumerate().filter(|(_, s)| s.dirty) {
            let next = s.tombstones.next_generation();
            let written = next.write_beside(&s.path)?;
            created.push(written);
            new_tombs.push((i, next));
        }
        // 3. What the tombstones record is in the current log: durable before they are.
        if let Err(e) = self.wal.sync() {
            self.poisoned = true;
            return Err(e);
        }
        // 4. The manifest switch: from here on the new files are the engine.
        let mut segments: Vec<SegmentEntry> = self.slots.iter().map(Slot::entry).collect();
        for (i, t) in &new_tombs {
            if let Some(e) = segments.get_mut(*i) {
                e.tombstones = Some(t.generation());
            }
        }
        segments.extend(new_slot.as_ref().map(Slot::entry));
        let generation = self.wal.generation();
        Manifest {
            next_segment: self.next_segment,
            wal_generation: generation,
            segments,
        }
        .write(&self.dir)?;
        created.clear();
        // 5. Memory follows; then the old files go (best effort: open removes orphans).
        let mut obsolete: Vec<PathBuf> = (self.wal_base..generation)
            .map(|g| wal_path(&self.dir, g))
            .collect();
        self.wal_base = generation;
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
        if let Some(f) = self.frozen.take() {
            // The job dropped its reference when it ended: the buffer's memory is kept
            // for the next fill.
            if let Ok(mut buffer) = Arc::try_unwrap(f.buffer) {
                buffer.clear();
                if self.buffer.rows() == 0 {
                    // Nothing came in meanwhile (an inline refresh): one buffer, as
                    // before the freeze.
                    self.buffer = buffer;
                } else {
                    self.spare = Some(buffer);
                }
            }
        }
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
