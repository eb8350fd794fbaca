//! The dedup check: validation, the series and column tables, where an id is live (the
//! buffer, then each segment by strategy), and the insert of a checked point.

use super::*;

impl Engine {
    /// Where `id` is live, if anywhere: the buffer, then the segments (see
    /// [`locate_in_segments`]).
    pub(super) fn locate(
        &self,
        stats: &mut DedupStats,
        id: &SyntheticId,
        stream: Option<&Tsid>,
    ) -> Result<Option<Location>> {
        if let Some(key) = self.buffer_key(id) {
            if let Some(l) = self.locate_buffered(&key) {
                stats.live_map_hits += 1;
                return Ok(Some(l));
            }
        }
        locate_in_segments(
            &self.slots,
            self.config.strategy,
            stats,
            id,
            self.keyer.as_deref(),
            stream,
        )
    }

    /// Where the point of `key` is buffered, if it is: the live buffer, then the frozen
    /// buffer of a refresh in flight.
    pub(super) fn locate_buffered(&self, key: &Key) -> Option<Location> {
        if self.buffer.lookup(key).is_some() {
            return Some(Location::Buffer(*key));
        }
        let f = self.frozen.as_ref()?;
        f.lookup(key).map(|_| Location::Frozen(*key))
    }

    /// The live map key of `id`, if its series is known.
    pub(super) fn buffer_key(&self, id: &SyntheticId) -> Option<Key> {
        match self.keyer {
            Some(_) => Some(Key::Event(*id)),
            None => self
                .series
                .get(&id.tsid())
                .map(|s| Key::Point(s, id.ts_millis())),
        }
    }

    /// Checks a normalized point against itself: name and keyword lengths, names given
    /// twice — the segment format's own rules ([`tidemark_segment::validate_point`]), so
    /// that every point accepted here is one a refresh can write.
    pub(crate) fn validate(p: &Point) -> Option<Rejection> {
        tidemark_segment::validate_point(p)
            .err()
            .map(Rejection::from)
    }

    /// The series of `tsid` with dimensions `dims` (sorted, checked): known, or
    /// registered now. A tsid must name one dimension set, here and in the segments (or
    /// the segments could never be merged); with derived tsids a known tsid's dimensions
    /// are not compared again.
    pub(super) fn series_ref(
        &mut self,
        tsid: Tsid,
        dims: &[(String, Dim)],
    ) -> std::result::Result<u32, Rejection> {
        if let Some(s) = self.series.get(&tsid) {
            let same =
                self.config.derived_tsids || self.series.entry(s).is_some_and(|e| *e.dims == *dims);
            return if same {
                Ok(s)
            } else {
                Err(Rejection::InconsistentDimensions { tsid })
            };
        }
        let stored = self
            .slots
            .iter()
            .rev()
            .find_map(|s| s.segment.series_by_tsid(&tsid));
        if stored.is_some_and(|s| *s.dims != *dims) {
            return Err(Rejection::InconsistentDimensions { tsid });
        }
        let shared = self.interner.intern(tsid, dims.to_vec());
        let newest = self.stored_newest(&tsid);
        Ok(self.series.insert(tsid, shared, newest))
    }

    /// The newest timestamp of series `tsid` in the segments (`i64::MIN` if none holds it).
    pub(super) fn stored_newest(&self, tsid: &Tsid) -> i64 {
        self.slots
            .iter()
            .filter_map(|s| s.segment.series_by_tsid(tsid))
            .map(|s| s.max_ts)
            .max()
            .unwrap_or(i64::MIN)
    }

    /// The column `name` of `kind`: known, or registered now.
    pub(super) fn column_id(
        &mut self,
        name: &str,
        kind: ColumnKind,
    ) -> std::result::Result<ColumnId, Rejection> {
        match self.columns.get(name) {
            Some(id) => match self.columns.kind(id) {
                Some(k) if k == kind => Ok(id),
                k => Err(Rejection::KindConflict {
                    name: name.to_owned(),
                    expected: k.map_or("?", ColumnKind::name),
                    found: kind.name(),
                }),
            },
            None => {
                if name.len() > MAX_STRING_LEN {
                    return Err(Rejection::TooLong {
                        len_bytes: name.len(),
                    });
                }
                if self.columns.len() >= MAX_COLUMNS {
                    return Err(Rejection::TooManyColumns);
                }
                Ok(self.columns.insert(name, kind))
            }
        }
    }

    /// The dedup check and the insert of a point by refs (values sorted by column ref):
    /// its id, where that id is live, then the outcome of `create` (conflict or store) or
    /// `index` (replace or store). `point` is the same point, when the caller has it
    /// (events need one for the fingerprint).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn insert(
        &mut self,
        create: bool,
        s: u32,
        ts: i64,
        values: &[(u32, MetricValue)],
        extras: &[(u32, Extra)],
        point: Option<&Point>,
        log: bool,
    ) -> Result<Outcome> {
        let Some((tsid, newest)) = self.series.entry(s).map(|e| (e.tsid, e.newest)) else {
            return Err(Error::Poisoned);
        };
        let (id, key, hint) = match self.keyer.as_deref() {
            None => (SyntheticId::new(tsid, ts), Key::Point(s, ts), None),
            Some(k) => {
                let built;
                let p = match point {
                    Some(p) => p,
                    None => {
                        built = self.point_of(s, ts, values, extras);
                        &built
                    }
                };
                match k.id_of(p) {
                    Ok(id) => (id, Key::Event(id), k.covers_dims(p).then_some(tsid)),
                    Err(detail) => {
                        return Ok(Outcome::Rejected {
                            id: SyntheticId::new(tsid, ts),
                            reason: Rejection::EventId { detail },
                        });
                    }
                }
            }
        };
        let strategy = self.config.strategy;
        let loc = if strategy == Strategy::None {
            None
        } else {
            self.stats.checks += 1;
            let series_newest =
                matches!(strategy, Strategy::SeriesRange | Strategy::SeriesRangeBloom)
                    && self.keyer.is_none();
            if series_newest && ts > newest {
                // After every timestamp the engine holds for the series: new. (The
                // series range of the whole engine; in-order points end here.)
                self.stats.newest_negatives += 1;
                None
            } else if let Some(l) = self.locate_buffered(&key) {
                self.stats.live_map_hits += 1;
                Some(l)
            } else {
                locate_in_segments(
                    &self.slots,
                    strategy,
                    &mut self.stats,
                    &id,
                    self.keyer.as_deref(),
                    hint.as_ref(),
                )?
            }
        };
        if create && loc.is_some() {
            return Ok(Outcome::Conflict { id });
        }
        if log {
            self.log_definitions(s, values, extras);
            self.wal
                .append_with(|out| record::encode_append(out, create, s, ts, values, extras));
        }
        self.wal_records += 1;
        if let Some(l) = loc {
            self.kill(id, l)?;
        }
        if self.buffer.rows() == 0 {
            let per_series = self.config.refresh_rows / self.series.entries.len().max(1);
            self.buffer
                .expect_rows_per_run(per_series, self.config.refresh_rows);
        }
        self.buffer.push(key, s, &tsid, ts, values, extras);
        if let Some(e) = self.series.entry_mut(s) {
            e.newest = e.newest.max(ts);
        }
        Ok(if create {
            Outcome::Created { id }
        } else {
            Outcome::Indexed {
                id,
                replaced: loc.is_some(),
            }
        })
    }

    /// Logs the definitions of a point's series and columns not yet defined in the
    /// current log file.
    pub(super) fn log_definitions(
        &mut self,
        s: u32,
        values: &[(u32, MetricValue)],
        extras: &[(u32, Extra)],
    ) {
        let generation = self.wal.generation();
        let Engine {
            series,
            columns,
            wal,
            ..
        } = self;
        if let Some(e) = series.entry_mut(s) {
            if e.logged != generation {
                wal.append_with(|out| record::encode_series(out, s, &e.tsid, &e.dims));
                e.logged = generation;
            }
        }
        let ids = values
            .iter()
            .map(|(c, _)| ColumnId::Metric(*c))
            .chain(extras.iter().map(|(c, _)| ColumnId::Extra(*c)));
        for id in ids {
            if columns.logged(id) == generation {
                continue;
            }
            let (Some(kind), Some(name)) = (columns.kind(id), columns.name(id)) else {
                continue;
            };
            let logged_ref = match id {
                ColumnId::Metric(c) => c,
                ColumnId::Extra(c) => c | record::EXTRA_REF_BIT,
            };
            wal.append_with(|out| record::encode_column(out, logged_ref, kind, name));
            columns.set_logged(id, generation);
        }
    }

    /// A point built from refs (events: the fingerprint needs names and values).
    pub(super) fn point_of(
        &self,
        s: u32,
        ts: i64,
        values: &[(u32, MetricValue)],
        extras: &[(u32, Extra)],
    ) -> Point {
        let mut p = match self.series.entry(s) {
            Some(e) => {
                let mut p = Point::new(e.tsid, ts);
                p.dims = e.dims.to_vec();
                p
            }
            None => Point::new(Tsid::from_bytes([0; tidemark_tsid::TSID_LEN]), ts),
        };
        for (c, v) in values {
            if let Some(name) = self.columns.name(ColumnId::Metric(*c)) {
                p.metrics.push((name.to_owned(), *v));
            }
        }
        for (c, v) in extras {
            if let Some(name) = self.columns.name(ColumnId::Extra(*c)) {
                p.extras.push((name.to_owned(), v.clone()));
            }
        }
        p.normalized()
    }
}

/// The dedup check in the segments: where `id` is live there, if anywhere, newest
/// segment first. Counts into `stats` (callers pass a scratch value for lookups that are
/// not dedup checks).
pub(super) fn locate_in_segments(
    slots: &[Slot],
    strategy: Strategy,
    stats: &mut DedupStats,
    id: &SyntheticId,
    keyer: Option<&EventKeyer>,
    stream: Option<&Tsid>,
) -> Result<Option<Location>> {
    let tsid = id.tsid();
    let ts = id.ts_millis();
    for (i, slot) in slots.iter().enumerate().rev() {
        if ts < slot.min_ts || ts > slot.max_ts {
            stats.segments_pruned_by_time += 1;
            continue;
        }
        let seg = &slot.segment;
        let row = match strategy {
            Strategy::Inverted if slot.has_id_index => {
                let start = Instant::now();
                let row = seg.lookup_id(id).map_err(|e| slot.err(e))?;
                stats.verifications += 1;
                stats.verification_nanos += start.elapsed().as_nanos() as u64;
                row
            }
            Strategy::Bloom if slot.has_bloom => {
                if !seg.may_contain_id(id).map_err(|e| slot.err(e))? {
                    stats.bloom_negatives += 1;
                    continue;
                }
                let row = verify(slot, stats, id, keyer, stream)?;
                if row.is_none() {
                    stats.false_positives += 1;
                }
                row
            }
            Strategy::SeriesRange | Strategy::SeriesRangeBloom => {
                // (inside the series' range, and in an occupied time slot).
                let held = |s: &tidemark_segment::Series| {
                    let in_range = (s.min_ts..=s.max_ts).contains(&ts);
                    (in_range, in_range && s.may_hold(ts))
                };
                let (in_range, maybe) = match (keyer, stream) {
                    // An event id does not name its stream: any stream covering ts,
                    // unless the caller knows it.
                    (Some(_), None) => seg.series().iter().fold((false, false), |acc, s| {
                        let (r, m) = held(s);
                        (acc.0 || r, acc.1 || m)
                    }),
                    (Some(_), Some(t)) => seg.series_by_tsid(t).map_or((false, false), held),
                    (None, _) => seg.series_by_tsid(&tsid).map_or((false, false), held),
                };
                if !in_range {
                    stats.series_range_negatives += 1;
                    continue;
                }
                if !maybe {
                    stats.slot_negatives += 1;
                    continue;
                }
                if strategy == Strategy::SeriesRangeBloom
                    && slot.has_bloom
                    && !seg.may_contain_id(id).map_err(|e| slot.err(e))?
                {
                    stats.bloom_negatives += 1;
                    continue;
                }
                let row = verify(slot, stats, id, keyer, stream)?;
                if row.is_none() {
                    stats.false_positives += 1;
                }
                row
            }
            // A segment written under another strategy lacks the section: verify.
            _ => verify(slot, stats, id, keyer, stream)?,
        };
        if let Some(row) = row {
            if slot.tombstones.is_deleted(row) {
                // At most one copy of an id is live, and this one is dead; an older
                // segment may only hold dead copies, but looking costs little.
                continue;
            }
            stats.true_duplicates += 1;
            return Ok(Some(Location::Segment { slot: i, row }));
        }
    }
    Ok(None)
}

pub(super) fn verify(
    slot: &Slot,
    stats: &mut DedupStats,
    id: &SyntheticId,
    keyer: Option<&EventKeyer>,
    stream: Option<&Tsid>,
) -> Result<Option<RowId>> {
    let start = Instant::now();
    let row = find_row(slot, id, keyer, stream)?;
    stats.verifications += 1;
    stats.verification_nanos += start.elapsed().as_nanos() as u64;
    Ok(row)
}

/// The row of `id` in the slot's columns: a time-series id names its series and
/// timestamp; an event id is matched by recomputing the fingerprints of the rows of its
/// timestamp, in its stream when known (`stream`), else in every stream covering it.
pub(super) fn find_row(
    slot: &Slot,
    id: &SyntheticId,
    keyer: Option<&EventKeyer>,
    stream: Option<&Tsid>,
) -> Result<Option<RowId>> {
    let seg = &slot.segment;
    let Some(k) = keyer else {
        return seg
            .find(&id.tsid(), id.ts_millis())
            .map_err(|e| slot.err(e));
    };
    let ts = id.ts_millis();
    let candidates: Vec<&tidemark_segment::Series> = match stream {
        Some(t) => seg.series_by_tsid(t).into_iter().collect(),
        None => seg.series().iter().collect(),
    };
    for s in candidates {
        if !s.may_hold(ts) {
            continue;
        }
        let rows = seg.find_all(&s.tsid, ts).map_err(|e| slot.err(e))?;
        if rows.is_empty() {
            continue;
        }
        // The run's rows decoded together: each block once. (Keeping decoded blocks
        // per segment did not pay: 32 blocks per segment thrash across 100 streams.)
        let points = seg.points(rows.clone(), |_| true)?;
        for (row, p) in rows.zip(points) {
            // Decoded points come normalized (names in column order).
            if k.id_of(&p).as_ref() == Ok(id) {
                return Ok(Some(row));
            }
        }
    }
    Ok(None)
}
