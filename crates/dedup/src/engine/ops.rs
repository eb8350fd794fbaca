//! The write path: batches, appends by ref, points by value, deletes, log
//! commits.

use super::*;

impl Engine {
    /// Runs `ops` in order and returns one outcome per operation. Their log records are
    /// written with one `write` (and fsynced per the durability policy) before returning;
    /// then, if the buffer reached the refresh size, a refresh runs.
    ///
    /// # Errors
    /// [`Error::Poisoned`] after an earlier log failure; I/O errors of the log (which
    /// poison the engine); segment read errors naming the segment (the operations before
    /// the failing one are applied and logged).
    pub fn batch(&mut self, ops: impl IntoIterator<Item = Op>) -> Result<Vec<Outcome>> {
        self.check_poisoned()?;
        let applied = self.apply_all(ops);
        self.commit()?;
        let out = applied?;
        self.after_commit()?;
        Ok(out)
    }

    pub(super) fn apply_all(&mut self, ops: impl IntoIterator<Item = Op>) -> Result<Vec<Outcome>> {
        let mut out = Vec::new();
        for op in ops {
            out.push(self.apply(op, true)?);
        }
        Ok(out)
    }

    pub(super) fn commit(&mut self) -> Result<()> {
        let durability = self.config.durability;
        self.wal
            .commit(durability)
            .inspect_err(|_| self.poisoned = true)
    }

    pub(super) fn after_commit(&mut self) -> Result<()> {
        // With background refreshes the caller refreshes; four buffers' worth is the
        // bound on memory when it falls behind.
        let due = if self.background_refresh {
            self.config.refresh_rows.saturating_mul(4)
        } else {
            self.config.refresh_rows
        };
        if self.buffer.rows() >= due {
            self.refresh()?;
            if self.config.auto_merge && !self.background_merges {
                self.maybe_merge()?;
            }
        }
        Ok(())
    }

    /// Whether merges are left to the caller (a [`PartitionedEngine`](crate::PartitionedEngine)
    /// with background merges runs them on the caller's merge thread) instead of running
    /// after a refresh.
    pub(crate) fn set_background_merges(&mut self, on: bool) {
        self.background_merges = on;
    }

    /// `create` of one point: see [`batch`](Self::batch).
    ///
    /// # Errors
    /// As [`batch`](Self::batch).
    pub fn create_point(&mut self, point: Point) -> Result<Outcome> {
        self.one(Op::Create(point))
    }

    /// `index` of one point: see [`batch`](Self::batch).
    ///
    /// # Errors
    /// As [`batch`](Self::batch).
    pub fn index_point(&mut self, point: Point) -> Result<Outcome> {
        self.one(Op::Index(point))
    }

    /// Deletes the point `id`: see [`batch`](Self::batch).
    ///
    /// # Errors
    /// As [`batch`](Self::batch).
    pub fn delete(&mut self, id: SyntheticId) -> Result<Outcome> {
        self.one(Op::Delete(id))
    }

    pub(super) fn one(&mut self, op: Op) -> Result<Outcome> {
        let mut v = self.batch([op])?;
        v.pop().ok_or(Error::Poisoned)
    }

    /// Fsyncs the write-ahead log.
    ///
    /// # Errors
    /// I/O errors (which poison the engine).
    pub fn sync(&mut self) -> Result<()> {
        self.check_poisoned()?;
        self.wal.sync().inspect_err(|_| self.poisoned = true)
    }

    /// Syncs the log and closes the engine. Dropping it does the same, ignoring errors.
    ///
    /// # Errors
    /// As [`sync`](Self::sync).
    pub fn close(mut self) -> Result<()> {
        self.sync()
    }

    /// Registers series `tsid` with dimensions `dims` (in any order) and returns its ref,
    /// for [`append`](Self::append): the dimensions are checked and stored once, then
    /// every append names the series by its ref, as Prometheus' `Appender` does. Asking
    /// again for a known series returns the same ref.
    ///
    /// # Errors
    /// [`Error::Rejected`] for dimensions given twice or too long, or a tsid known with
    /// other dimensions (here or in a segment).
    pub fn series(&mut self, tsid: Tsid, dims: Vec<(String, Dim)>) -> Result<SeriesRef> {
        let dims = Engine::checked_dims(tsid, dims)?;
        self.series_ref(tsid, &dims)
            .map(SeriesRef)
            .map_err(|reason| Error::Rejected { reason })
    }

    /// A series' dimensions sorted by name and checked as a point's are.
    ///
    /// # Errors
    /// [`Error::Rejected`] for a dimension given twice or too long.
    pub(crate) fn checked_dims(
        tsid: Tsid,
        mut dims: Vec<(String, Dim)>,
    ) -> Result<Vec<(String, Dim)>> {
        dims.sort_by(|a, b| a.0.cmp(&b.0));
        let probe = Point {
            tsid,
            dims,
            ts_millis: 0,
            metrics: Vec::new(),
            extras: Vec::new(),
        };
        match Engine::validate(&probe) {
            Some(reason) => Err(Error::Rejected { reason }),
            None => Ok(probe.dims),
        }
    }

    /// The ref of a series already registered (by [`series`](Self::series) or by a
    /// point), without its dimensions.
    pub fn series_by_tsid(&self, tsid: &Tsid) -> Option<SeriesRef> {
        self.series.get(tsid).map(SeriesRef)
    }

    /// Registers the metric or extra column `name` holding `kind` values and returns its
    /// ref, for [`append`](Self::append).
    ///
    /// # Errors
    /// [`Error::Rejected`] for a name known with another kind, too long, or past
    /// [`MAX_COLUMNS`].
    pub fn column(&mut self, name: &str, kind: ColumnKind) -> Result<ColumnRef> {
        self.column_id(name, kind)
            .map(ColumnRef)
            .map_err(|reason| Error::Rejected { reason })
    }

    /// Runs a batch of appends by ref (see [`AppendBatch`]) with `create` or `index`
    /// semantics per item, and returns one outcome per append, exactly as
    /// [`batch`](Self::batch) does for points: logged with one `write` (and fsynced per
    /// the durability policy) before returning, then a refresh if due.
    ///
    /// # Errors
    /// As [`batch`](Self::batch); a ref of another engine is rejected per item.
    pub fn append(&mut self, batch: &AppendBatch) -> Result<Vec<Outcome>> {
        self.check_poisoned()?;
        let applied = self.append_all(batch);
        self.commit()?;
        let out = applied?;
        self.after_commit()?;
        Ok(out)
    }

    pub(super) fn append_all(&mut self, batch: &AppendBatch) -> Result<Vec<Outcome>> {
        let mut out = Vec::with_capacity(batch.len());
        let mut values = std::mem::take(&mut self.scratch.0);
        let mut extras = std::mem::take(&mut self.scratch.1);
        let result = (|| {
            for i in 0..batch.len() {
                let Some(item) = batch.get(i) else { break };
                out.push(self.append_one(&item, &mut values, &mut extras, true)?);
            }
            Ok(())
        })();
        self.scratch = (values, extras);
        result.map(|()| out)
    }

    /// Checks one append's refs and values, then inserts it.
    pub(super) fn append_one(
        &mut self,
        item: &AppendItem<'_>,
        values: &mut Vec<(u32, MetricValue)>,
        extras: &mut Vec<(u32, Extra)>,
        log: bool,
    ) -> Result<Outcome> {
        let SeriesRef(s) = item.series;
        let Some(tsid) = self.series.entry(s).map(|e| e.tsid) else {
            let id = SyntheticId::new(Tsid::from_bytes([0; tidemark_tsid::TSID_LEN]), item.ts);
            let reason = Rejection::UnknownRef { what: "series" };
            return Ok(Outcome::Rejected { id, reason });
        };
        let reject = |reason| {
            Ok(Outcome::Rejected {
                id: SyntheticId::new(tsid, item.ts),
                reason,
            })
        };
        values.clear();
        for &(ColumnRef(c), v) in item.values {
            let ColumnId::Metric(m) = c else {
                return reject(Rejection::UnknownRef {
                    what: "metric column",
                });
            };
            match self.columns.kind(c) {
                Some(k) if k == ColumnKind::of_metric(&v) => values.push((m, v)),
                Some(k) => {
                    return reject(Rejection::KindConflict {
                        name: self.columns.name(c).unwrap_or("?").to_owned(),
                        expected: k.name(),
                        found: ColumnKind::of_metric(&v).name(),
                    });
                }
                None => {
                    return reject(Rejection::UnknownRef {
                        what: "metric column",
                    });
                }
            }
        }
        extras.clear();
        for (ColumnRef(c), v) in item.extras {
            let ColumnId::Extra(e) = *c else {
                return reject(Rejection::UnknownRef {
                    what: "extra column",
                });
            };
            if let Extra::Keyword(k) = v {
                if k.len() > MAX_STRING_LEN {
                    return reject(Rejection::TooLong { len_bytes: k.len() });
                }
            }
            match self.columns.kind(*c) {
                Some(k) if k == ColumnKind::of_extra(v) => extras.push((e, v.clone())),
                Some(k) => {
                    return reject(Rejection::KindConflict {
                        name: self.columns.name(*c).unwrap_or("?").to_owned(),
                        expected: k.name(),
                        found: ColumnKind::of_extra(v).name(),
                    });
                }
                None => {
                    return reject(Rejection::UnknownRef {
                        what: "extra column",
                    });
                }
            }
        }
        if let Some(name) = self.sort_refs(values, extras) {
            return reject(Rejection::DuplicateMetric { name });
        }
        self.insert(item.create, s, item.ts, values, extras, None, log)
    }

    /// Sorts a point's values by column ref; the name of a column given twice.
    pub(super) fn sort_refs(
        &self,
        values: &mut [(u32, MetricValue)],
        extras: &mut [(u32, Extra)],
    ) -> Option<String> {
        if !values.windows(2).all(|w| w[0].0 < w[1].0) {
            values.sort_unstable_by_key(|(c, _)| *c);
            if let Some(w) = values.windows(2).find(|w| w[0].0 == w[1].0) {
                return Some(self.columns.name(ColumnId::Metric(w[0].0))?.to_owned());
            }
        }
        if !extras.windows(2).all(|w| w[0].0 < w[1].0) {
            extras.sort_unstable_by_key(|(c, _)| *c);
            if let Some(w) = extras.windows(2).find(|w| w[0].0 == w[1].0) {
                return Some(self.columns.name(ColumnId::Extra(w[0].0))?.to_owned());
            }
        }
        None
    }

    /// A `create` or `index` of a point: validated, resolved to refs, then inserted.
    pub(super) fn insert_point(&mut self, create: bool, p: Point, log: bool) -> Result<Outcome> {
        let p = p.normalized();
        let fallback_id = SyntheticId::new(p.tsid, p.ts_millis);
        let reject = |reason| {
            Ok(Outcome::Rejected {
                id: fallback_id,
                reason,
            })
        };
        if let Some(reason) = Engine::validate(&p) {
            return reject(reason);
        }
        let s = match self.series_ref(p.tsid, &p.dims) {
            Ok(s) => s,
            Err(reason) => return reject(reason),
        };
        let mut values = std::mem::take(&mut self.scratch.0);
        let mut extras = std::mem::take(&mut self.scratch.1);
        values.clear();
        extras.clear();
        let mut rejection = None;
        for (name, v) in &p.metrics {
            match self.column_id(name, ColumnKind::of_metric(v)) {
                Ok(ColumnId::Metric(c)) => values.push((c, *v)),
                Ok(ColumnId::Extra(_)) => {}
                Err(r) => {
                    rejection = Some(r);
                    break;
                }
            }
        }
        if rejection.is_none() {
            for (name, v) in &p.extras {
                match self.column_id(name, ColumnKind::of_extra(v)) {
                    Ok(ColumnId::Extra(c)) => extras.push((c, v.clone())),
                    Ok(ColumnId::Metric(_)) => {}
                    Err(r) => {
                        rejection = Some(r);
                        break;
                    }
                }
            }
        }
        let result = match rejection {
            Some(reason) => reject(reason),
            None => {
                values.sort_unstable_by_key(|(c, _)| *c);
                extras.sort_unstable_by_key(|(c, _)| *c);
                self.insert(create, s, p.ts_millis, &values, &extras, Some(&p), log)
            }
        };
        self.scratch = (values, extras);
        result
    }

    pub(super) fn kill(&mut self, id: SyntheticId, loc: Location) -> Result<()> {
        match loc {
            Location::Buffer(key) => {
                self.buffer.kill(&key);
            }
            Location::Frozen(key) => {
                if let Some(f) = self.frozen.as_mut() {
                    if let Some(row) = f.lookup(&key) {
                        f.killed.insert(row);
                    }
                }
            }
            Location::Segment { slot, row } => {
                let s = self.slots.get_mut(slot).ok_or(Error::BadRow { id, row })?;
                s.tombstones
                    .delete(row)
                    .map_err(|_| Error::BadRow { id, row })?;
                s.dirty = true;
            }
        }
        Ok(())
    }

    /// Applies one operation; `log` appends its record to the pending log batch.
    pub(super) fn apply(&mut self, op: Op, log: bool) -> Result<Outcome> {
        match op {
            Op::Create(p) => self.insert_point(true, p, log),
            Op::Index(p) => self.insert_point(false, p, log),
            Op::Delete(id) => {
                let mut scratch = DedupStats::default();
                let Some(l) = self.locate(&mut scratch, &id, None)? else {
                    return Ok(Outcome::NotFound { id });
                };
                if log {
                    self.wal.append_with(|out| record::encode_delete(out, &id));
                }
                self.wal_records += 1;
                self.kill(id, l)?;
                Ok(Outcome::Deleted { id })
            }
            Op::Get(id) => Ok(match self.get(&id)? {
                Some(p) => Outcome::Found(p),
                None => Outcome::NotFound { id },
            }),
        }
    }
}
