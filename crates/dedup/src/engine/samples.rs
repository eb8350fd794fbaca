//! Samples by ref, as columns, with counts instead of an outcome per sample: the write
//! path of the metrics protocols (one value per sample, many samples per request).
//!
//! A [`Samples`] batch holds, per sample, the batch it came from (its *owner*: a request,
//! say), a series ref, a timestamp, a column ref and one value; [`Engine::append_samples`]
//! and [`PartitionedEngine::append_samples`](crate::PartitionedEngine::append_samples)
//! run the same checks and the same exactly-once rules as [`Engine::append`], and answer
//! one [`Tally`] per owner. Nothing is built per sample beyond the log record and the
//! buffered row.

use super::*;

/// One sample's value in a [`Samples`] batch.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleCell {
    /// A gauge or counter value, for a metric column.
    Metric(MetricValue),
    /// A keyword or boolean value, for an extra column.
    Extra(Extra),
}

/// A batch of single-value samples by ref, held as columns (see the module docs).
///
/// ```
/// use tidemark_dedup::{ColumnKind, Engine, EngineConfig, SampleCell, Samples};
/// use tidemark_segment::MetricValue;
/// use tidemark_tsid::Tsid;
///
/// let dir = tempfile::tempdir()?;
/// let mut engine = Engine::create(dir.path(), EngineConfig::new())?;
/// let s = engine.series(Tsid::from_bytes([1; 20]), vec![("host".into(), "a".into())])?;
/// let cpu = engine.column("cpu", ColumnKind::Gauge)?;
/// let mut samples = Samples::new();
/// let first = samples.owner(true);
/// samples.push(first, s, 1_000, cpu, SampleCell::Metric(MetricValue::Gauge(0.5)));
/// let retry = samples.owner(true);
/// samples.push(retry, s, 1_000, cpu, SampleCell::Metric(MetricValue::Gauge(0.5)));
/// let tallies = engine.append_samples(&samples)?;
/// assert_eq!((tallies[0].created, tallies[1].duplicates), (1, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Per owner: `create` (a sample already stored is a duplicate) or `index` (replaced).
    creates: Vec<bool>,
    owner: Vec<u32>,
    series: Vec<SeriesRef>,
    ts: Vec<i64>,
    column: Vec<ColumnRef>,
    cell: Vec<SampleCell>,
}

impl Samples {
    /// An empty batch.
    pub fn new() -> Samples {
        Samples::default()
    }

    /// Adds an owner: the samples pushed under it are counted in its own [`Tally`].
    /// `create` on, a sample already stored is a duplicate and keeps the stored value
    /// (Elasticsearch's `create`); off, it replaces it (`index`). Owners are numbered
    /// from 0 in the order they are added.
    pub fn owner(&mut self, create: bool) -> u32 {
        self.creates.push(create);
        u32::try_from(self.creates.len() - 1).unwrap_or(u32::MAX)
    }

    /// Adds a sample of `series` at `ts_millis`: `value` in `column`, counted for
    /// `owner` (from [`owner`](Self::owner); an unknown owner's sample is rejected).
    pub fn push(
        &mut self,
        owner: u32,
        series: SeriesRef,
        ts_millis: i64,
        column: ColumnRef,
        value: SampleCell,
    ) {
        self.owner.push(owner);
        self.series.push(series);
        self.ts.push(ts_millis);
        self.column.push(column);
        self.cell.push(value);
    }

    /// Samples in the batch.
    pub fn len(&self) -> usize {
        self.ts.len()
    }

    /// Whether the batch holds no sample.
    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    /// Owners added.
    pub fn owners(&self) -> usize {
        self.creates.len()
    }

    /// Empties the batch (samples and owners), keeping its memory.
    pub fn clear(&mut self) {
        self.creates.clear();
        self.clear_samples();
    }

    /// Empties the samples and keeps the owners.
    fn clear_samples(&mut self) {
        self.owner.clear();
        self.series.clear();
        self.ts.clear();
        self.column.clear();
        self.cell.clear();
    }

    /// Sample `i`: owner, series, timestamp, column, value.
    pub(crate) fn get(&self, i: usize) -> Option<(u32, SeriesRef, i64, ColumnRef, &SampleCell)> {
        Some((
            *self.owner.get(i)?,
            *self.series.get(i)?,
            *self.ts.get(i)?,
            *self.column.get(i)?,
            self.cell.get(i)?,
        ))
    }

    /// Whether `owner`'s samples are `create`s.
    pub(crate) fn create_of(&self, owner: u32) -> Option<bool> {
        self.creates.get(owner as usize).copied()
    }
}

/// What became of one owner's samples in [`Engine::append_samples`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Samples stored (new, or `index` of one not stored before).
    pub created: u64,
    /// Samples that replaced a stored one (`index`).
    pub replaced: u64,
    /// Samples already stored (`create`: a retry), left as they were.
    pub duplicates: u64,
    /// Samples refused.
    pub rejected: u64,
    /// Why the first refused sample was refused.
    pub first_rejection: Option<Rejection>,
}

impl Tally {
    /// Counts one refused sample.
    pub(crate) fn reject(&mut self, reason: Rejection) {
        self.rejected += 1;
        if self.first_rejection.is_none() {
            self.first_rejection = Some(reason);
        }
    }

    /// Counts an outcome of the insert; whether it stored the sample.
    pub(crate) fn count(&mut self, outcome: Outcome) -> bool {
        match outcome {
            Outcome::Created { .. }
            | Outcome::Indexed {
                replaced: false, ..
            } => {
                self.created += 1;
                true
            }
            Outcome::Indexed { replaced: true, .. } => {
                self.replaced += 1;
                true
            }
            Outcome::Conflict { .. } => {
                self.duplicates += 1;
                false
            }
            Outcome::Rejected { reason, .. } => {
                self.reject(reason);
                false
            }
            Outcome::Deleted { .. } | Outcome::NotFound { .. } | Outcome::Found(_) => false,
        }
    }
}

impl Engine {
    /// Appends `samples` (refs of this engine, see [`series`](Self::series) and
    /// [`column`](Self::column)) with the checks and exactly-once rules of
    /// [`append`](Self::append), and answers one [`Tally`] per owner of the batch. Logged
    /// with one `write` (and fsynced per the durability policy) before returning, then
    /// a refresh if due.
    ///
    /// # Errors
    /// As [`append`](Self::append); a ref of another engine, a value of the wrong kind
    /// for its column or an unknown owner is a rejected sample.
    pub fn append_samples(&mut self, samples: &Samples) -> Result<Vec<Tally>> {
        let mut tallies = vec![Tally::default(); samples.owners()];
        let same = |_: &mut Engine, s, c| Ok(Ok((s, c)));
        self.append_samples_into(samples, 0..samples.len(), same, &mut tallies, None)?;
        Ok(tallies)
    }

    /// [`append_samples`](Self::append_samples) of the samples at positions `picks`,
    /// their refs translated to this engine's by `translate` (which may register them,
    /// or refuse them: a rejected sample), counting into `tallies` (by owner) and, when
    /// given, noting the (tsid, timestamp) of every sample stored in `touched`.
    pub(crate) fn append_samples_into(
        &mut self,
        samples: &Samples,
        picks: impl Iterator<Item = usize>,
        mut translate: impl FnMut(
            &mut Engine,
            SeriesRef,
            ColumnRef,
        )
            -> Result<std::result::Result<(SeriesRef, ColumnRef), Rejection>>,
        tallies: &mut [Tally],
        mut touched: Option<&mut Vec<(Tsid, i64)>>,
    ) -> Result<()> {
        self.check_poisoned()?;
        let applied = (|| -> Result<()> {
            for i in picks {
                let Some((owner, series, ts, column, cell)) = samples.get(i) else {
                    break;
                };
                let Some(tally) = tallies.get_mut(owner as usize) else {
                    continue;
                };
                let Some(create) = samples.create_of(owner) else {
                    tally.reject(Rejection::UnknownRef { what: "owner" });
                    continue;
                };
                let (series, column) = match translate(self, series, column)? {
                    Ok(refs) => refs,
                    Err(reason) => {
                        tally.reject(reason);
                        continue;
                    }
                };
                let outcome = self.append_sample(create, series, ts, column, cell)?;
                if tally.count(outcome) {
                    if let Some(t) = touched.as_deref_mut() {
                        if let Some(e) = self.series.entry(series.0) {
                            t.push((e.tsid, ts));
                        }
                    }
                }
            }
            Ok(())
        })();
        self.commit()?;
        applied?;
        self.after_commit()
    }

    /// Checks one sample's refs and value, then inserts it.
    fn append_sample(
        &mut self,
        create: bool,
        SeriesRef(s): SeriesRef,
        ts: i64,
        ColumnRef(c): ColumnRef,
        cell: &SampleCell,
    ) -> Result<Outcome> {
        let Some(tsid) = self.series.entry(s).map(|e| e.tsid) else {
            let id = SyntheticId::new(Tsid::from_bytes([0; tidemark_tsid::TSID_LEN]), ts);
            let reason = Rejection::UnknownRef { what: "series" };
            return Ok(Outcome::Rejected { id, reason });
        };
        let reject = |reason| {
            Ok(Outcome::Rejected {
                id: SyntheticId::new(tsid, ts),
                reason,
            })
        };
        let found = match cell {
            SampleCell::Metric(v) => ColumnKind::of_metric(v),
            SampleCell::Extra(v) => ColumnKind::of_extra(v),
        };
        match self.columns.kind(c) {
            Some(k) if k == found => {}
            Some(k) => {
                return reject(Rejection::KindConflict {
                    name: self.columns.name(c).unwrap_or("?").to_owned(),
                    expected: k.name(),
                    found: found.name(),
                });
            }
            None => return reject(Rejection::UnknownRef { what: "column" }),
        }
        match (c, cell) {
            (ColumnId::Metric(m), SampleCell::Metric(v)) => {
                self.insert(create, s, ts, &[(m, *v)], &[], None, true)
            }
            (ColumnId::Extra(e), SampleCell::Extra(v)) => {
                if let Extra::Keyword(k) = v {
                    if k.len() > MAX_STRING_LEN {
                        return reject(Rejection::TooLong { len_bytes: k.len() });
                    }
                }
                self.insert(create, s, ts, &[], &[(e, v.clone())], None, true)
            }
            _ => reject(Rejection::UnknownRef { what: "column" }),
        }
    }
}
