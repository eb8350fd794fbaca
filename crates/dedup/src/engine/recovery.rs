//! Creating and opening an engine: the manifest, the segments, orphan files, and the replay
//! of the write-ahead log.

use super::*;

impl Engine {
    /// Creates an engine in `dir` (created if needed), which must not hold one already.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`], [`Error::AlreadyExists`], I/O errors.
    pub fn create(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Engine> {
        config.check()?;
        let keyer = keyer_of(&config)?;
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        if dir.join(MANIFEST_NAME).exists() {
            return Err(Error::AlreadyExists { path: dir });
        }
        // A log left by an interrupted `create` is not named by any manifest.
        let stale = wal_path(&dir, 1);
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(Error::io(&stale))?;
        }
        let wal = Wal::create(&dir, 1)?;
        Manifest {
            next_segment: 1,
            wal_generation: 1,
            segments: Vec::new(),
        }
        .write(&dir)?;
        Ok(Engine::assemble(
            dir,
            config,
            Vec::new(),
            wal,
            1,
            keyer,
            DimsInterner::new(),
        ))
    }

    /// Opens the engine in `dir`: reads the manifest, opens its segments and tombstones,
    /// removes files an interrupted refresh left behind, and replays the write-ahead log.
    /// A torn log tail is truncated and reported in [`warnings`](Self::warnings).
    ///
    /// # Errors
    /// [`Error::NoManifest`], manifest and log format errors, segment errors naming the
    /// segment file, I/O errors.
    pub fn open(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Engine> {
        config.check()?;
        let keyer = keyer_of(&config)?;
        let dir = dir.as_ref().to_path_buf();
        let manifest = Manifest::read(&dir)?;
        let mut interner = DimsInterner::new();
        let slots = manifest
            .segments
            .iter()
            .map(|e| Slot::open(&dir, e, &mut interner))
            .collect::<Result<Vec<_>>>()?;
        if let Some(s) = slots
            .iter()
            .find(|s| s.segment.is_events() != keyer.is_some())
        {
            let (held, mode) = if keyer.is_some() {
                ("time-series points", "events")
            } else {
                ("events", "time series")
            };
            return Err(Error::InvalidConfig {
                name: "mode",
                detail: format!(
                    "{} holds {held} but the engine is configured for {mode}",
                    s.path.display()
                ),
            });
        }
        let mut removed = remove_orphans(&dir, &manifest)?;
        // The manifest's log generation, then any later ones: a refresh in flight at the
        // crash had frozen the points of the earlier ones, and appends had moved on.
        let mut logs = Vec::new();
        let mut torn = Vec::new();
        let mut last = None;
        for generation in log_generations(&dir, manifest.wal_generation, &mut removed)? {
            let mut records = Vec::new();
            let (wal, t) = Wal::open(&dir, generation, |payload, offset, path| {
                records.push((record::decode(payload, offset, path)?, offset));
                Ok(())
            })?;
            torn.extend(t);
            logs.push((records, wal.path().to_path_buf()));
            last = Some(wal);
        }
        let wal = last.ok_or_else(|| Error::MissingWal {
            path: wal_path(&dir, manifest.wal_generation),
        })?;
        let mut engine = Engine::assemble(
            dir,
            config,
            slots,
            wal,
            manifest.next_segment,
            keyer,
            interner,
        );
        for slot in &engine.slots {
            let kinds = slot
                .segment
                .columns()
                .iter()
                .map(|c| (c.name.as_str(), ColumnKind::of_metric_kind(c.kind)))
                .chain(
                    slot.segment
                        .extra_columns()
                        .iter()
                        .map(|e| (e.name.as_str(), ColumnKind::of_extra_kind(e.kind))),
                );
            for (name, kind) in kinds {
                if engine.columns.get(name).is_none() {
                    engine.columns.insert(name, kind);
                }
            }
        }
        engine.wal_base = manifest.wal_generation;
        engine.warnings.extend(removed);
        engine.warnings.extend(torn);
        for (records, path) in logs {
            engine.replay(records, &path)?;
        }
        // Replay is not ingest: count only what happens from now on.
        engine.stats = DedupStats::new(engine.config.strategy);
        Ok(engine)
    }

    /// Opens the engine in `dir`, or creates one if `dir` holds none.
    ///
    /// # Errors
    /// As [`open`](Self::open) and [`create`](Self::create).
    pub fn open_or_create(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Engine> {
        match Engine::open(dir.as_ref(), config.clone()) {
            Err(Error::NoManifest { .. }) => Engine::create(dir, config),
            other => other,
        }
    }

    pub(super) fn assemble(
        dir: PathBuf,
        config: EngineConfig,
        slots: Vec<Slot>,
        wal: Wal,
        next_segment: u64,
        keyer: Option<Arc<EventKeyer>>,
        interner: DimsInterner,
    ) -> Engine {
        Engine {
            dir,
            stats: DedupStats::new(config.strategy),
            merge_stats: MergeStats {
                peak_segments: slots.len() as u64,
                ..MergeStats::default()
            },
            config,
            slots,
            // Runs size themselves at their first point of a fill (`Buffer::take_room`).
            buffer: Buffer::default(),
            frozen: None,
            spare: None,
            background_refresh: false,
            refresh_epoch: 0,
            wal_base: wal.generation(),
            series: SeriesTable::default(),
            columns: ColumnTable::default(),
            scratch: (Vec::new(), Vec::new()),
            interner,
            wal,
            wal_records: 0,
            next_segment,
            warnings: Vec::new(),
            poisoned: false,
            background_merges: false,
            keyer,
        }
    }

    /// Replays the log's records on open: points by value and by ref (refs mapped
    /// through the definitions before them), deletes.
    pub(super) fn replay(&mut self, records: Vec<(Record, u64)>, path: &Path) -> Result<()> {
        let mut series_map: HashMap<u32, u32> = HashMap::new();
        let mut column_map: HashMap<u32, ColumnId> = HashMap::new();
        let path = path.to_path_buf();
        let corrupt = |offset: u64, detail: String| Error::Corrupt {
            path: path.clone(),
            offset,
            detail,
        };
        let mut values = Vec::new();
        let mut extras = Vec::new();
        for (r, offset) in records {
            match r {
                Record::Create(p) => {
                    self.insert_point(true, p, false)?;
                }
                Record::Index(p) => {
                    self.insert_point(false, p, false)?;
                }
                Record::Delete(id) => {
                    self.apply(Op::Delete(id), false)?;
                }
                Record::Series { series, tsid, dims } => {
                    let s = match self.series.get(&tsid) {
                        Some(s) => s,
                        None => {
                            let shared = self.interner.intern(tsid, dims);
                            let newest = self.stored_newest(&tsid);
                            self.series.insert(tsid, shared, newest)
                        }
                    };
                    series_map.insert(series, s);
                }
                Record::Column { column, kind, name } => {
                    let id = self
                        .column_id(&name, kind)
                        .map_err(|r| corrupt(offset, format!("column `{name}`: {r}")))?;
                    column_map.insert(column, id);
                }
                Record::Append {
                    create,
                    series,
                    ts_millis,
                    metrics,
                    extras: logged_extras,
                } => {
                    let s = *series_map
                        .get(&series)
                        .ok_or_else(|| corrupt(offset, format!("undefined series ref {series}")))?;
                    values.clear();
                    for (c, v) in metrics {
                        match column_map.get(&c) {
                            Some(ColumnId::Metric(m)) => values.push((*m, v)),
                            _ => return Err(corrupt(offset, format!("undefined column ref {c}"))),
                        }
                    }
                    extras.clear();
                    for (c, v) in logged_extras {
                        match column_map.get(&(c | record::EXTRA_REF_BIT)) {
                            Some(ColumnId::Extra(e)) => extras.push((*e, v)),
                            _ => return Err(corrupt(offset, format!("undefined column ref {c}"))),
                        }
                    }
                    values.sort_unstable_by_key(|(c, _)| *c);
                    extras.sort_unstable_by_key(|(c, _)| *c);
                    self.insert(create, s, ts_millis, &values, &extras, None, false)?;
                }
            }
        }
        // The refs logged from here on are this process's: define them again.
        self.series.unlog();
        self.columns.unlog();
        Ok(())
    }
}

/// The event-id keyer of an events-mode config.
pub(crate) fn keyer_of(config: &EngineConfig) -> Result<Option<Arc<EventKeyer>>> {
    match config.mode() {
        Mode::TimeSeries => Ok(None),
        Mode::Events(ids) => Ok(Some(Arc::new(ids.keyer()?))),
    }
}

/// The log generations to replay: `base` (which must exist: opening it reports it
/// missing otherwise), then every later one in the directory, ascending. A later one
/// shorter than a log header is what a crash inside its creation leaves (a log takes
/// records only once its header is synced): it is removed as an orphan.
fn log_generations(dir: &Path, base: u64, removed: &mut Vec<Warning>) -> Result<Vec<u64>> {
    let mut out = vec![base];
    for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
        let entry = entry.map_err(Error::io(dir))?;
        let Some(g) = entry.file_name().to_str().and_then(parse_wal_name) else {
            continue;
        };
        if g <= base {
            continue;
        }
        let path = entry.path();
        let len = entry.metadata().map_err(Error::io(&path))?.len();
        if len < crate::wal::WAL_HEADER_LEN {
            std::fs::remove_file(&path).map_err(Error::io(&path))?;
            crate::fsutil::sync_dir(dir)?;
            removed.push(Warning::RemovedOrphan { path });
        } else {
            out.push(g);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Removes files of this engine's naming patterns that the manifest does not name: a
/// segment, tombstone or log written by a refresh that did not reach its manifest
/// switch, the manifest's temporary file, and writers' temporary files.
pub(super) fn remove_orphans(dir: &Path, manifest: &Manifest) -> Result<Vec<Warning>> {
    let live_segments: HashSet<u64> = manifest.segments.iter().map(|s| s.id).collect();
    let live_tombs: HashSet<(u64, u64)> = manifest
        .segments
        .iter()
        .filter_map(|s| s.tombstones.map(|g| (s.id, g)))
        .collect();
    let mut removed = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(Error::io(dir))?;
    for entry in entries {
        let entry = entry.map_err(Error::io(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // `MANIFEST.tmp`: the temporary name of manifests written before the
        // workspace's one atomic write; the others are `AtomicFile`'s.
        let temporary = name == "MANIFEST.tmp" || tidemark_segment::is_temp_name(name);
        let orphan = if temporary {
            true
        } else if let Some(g) = parse_wal_name(name) {
            // Later generations hold appends made while a refresh was in flight.
            g < manifest.wal_generation
        } else if let Some(id) = parse_segment_name(name) {
            !live_segments.contains(&id)
        } else if let Some((seg, g)) = name.split_once(".del.") {
            match (parse_segment_name(seg), g.parse::<u64>()) {
                (Some(id), Ok(g)) => !live_tombs.contains(&(id, g)),
                _ => false,
            }
        } else {
            false
        };
        if orphan {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(Error::io(&path))?;
            removed.push(Warning::RemovedOrphan { path });
        }
    }
    if !removed.is_empty() {
        crate::fsutil::sync_dir(dir)?;
    }
    Ok(removed)
}
