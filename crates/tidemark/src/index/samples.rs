//! The metrics protocols' write path: a [`SampleBatch`] appended by series ref, with one
//! lookup of each distinct series (and its value column) per batch and counts instead of
//! a result per sample.

use tidemark_dedup::{ColumnKind, ColumnRef, Outcome, SampleCell, Samples, SeriesRef};
use tidemark_segment::{Extra, MetricValue};

use super::{Index, rejection_text};
use crate::bulk::ItemStatus;
use crate::counters::ItemCounts;
use crate::error::{Error, Result};
use crate::labels::{SampleBatch, SampleTally, SampleValue};
use crate::row::decode_dims;

impl Index {
    /// Appends the samples of `batches` to this label-keyed index in one engine call
    /// (one log write and, by the index's durability, one fsync for them all) and
    /// answers one [`SampleTally`] per batch. Each distinct series of a batch is looked
    /// up (or registered) once, with its value column.
    ///
    /// # Errors
    /// [`Error::Mapping`] when the index is not label-keyed; engine errors (nothing of
    /// the batches is acknowledged: the engine refuses writes until reopened after a
    /// log failure).
    pub fn append_samples(&mut self, batches: &[&SampleBatch]) -> Result<Vec<SampleTally>> {
        if !self.mapping.is_label_keyed() || !self.by_ref {
            return Err(Error::Mapping {
                field: "settings.index.mode".to_owned(),
                reason: "samples go to a label-keyed index (mode: labels)".to_owned(),
            });
        }
        // The scratch keeps its memory from one call to the next: the writer calls this
        // for every group of requests.
        let mut scratch = std::mem::take(&mut self.samples_scratch);
        let result = self.append_samples_with(batches, &mut scratch);
        self.samples_scratch = scratch;
        result
    }

    fn append_samples_with(
        &mut self,
        batches: &[&SampleBatch],
        scratch: &mut SampleScratch,
    ) -> Result<Vec<SampleTally>> {
        let mut tallies = vec![SampleTally::default(); batches.len()];
        let SampleScratch {
            samples,
            refs,
            reasons,
        } = scratch;
        samples.clear();
        let mut refused = ItemCounts::default();
        for (b, batch) in batches.iter().enumerate() {
            // Owner `b` of the engine's batch is `batches[b]`.
            let owner = samples.owner(batch.create());
            // Each slot's refs, or the index in `reasons` of why the series is refused:
            // resolved once per slot.
            refs.clear();
            refs.resize(batch.series_len(), None);
            reasons.clear();
            for (slot, ts_millis, value) in batch.samples() {
                let at = *slot as usize;
                let resolved = match refs.get(at).copied() {
                    Some(Some(r)) => r,
                    Some(None) => {
                        let r = self.sample_refs(batch, at, value)?.map_err(|reason| {
                            reasons.push(reason);
                            reasons.len() - 1
                        });
                        if let Some(cell) = refs.get_mut(at) {
                            *cell = Some(r);
                        }
                        r
                    }
                    None => {
                        reasons.push("a sample of an unknown series slot".to_owned());
                        Err(reasons.len() - 1)
                    }
                };
                let SampleRefs {
                    series,
                    column,
                    as_twin,
                } = match resolved {
                    Ok(refs) => refs,
                    Err(why) => {
                        if let Some(t) = tallies.get_mut(b) {
                            t.rejected += 1;
                            if t.first_rejection.is_none() {
                                t.first_rejection = reasons.get(why).cloned();
                            }
                        }
                        refused.errors += 1;
                        continue;
                    }
                };
                let cell = match (value, as_twin) {
                    (SampleValue::F64(v), false) => SampleCell::Metric(MetricValue::Gauge(*v)),
                    (SampleValue::I64(v), false) => SampleCell::Metric(MetricValue::Counter(*v)),
                    // The index holds these labels as integers: a float that is one is
                    // stored as such (a retry of `5i` sent as `5.0` is its duplicate).
                    (SampleValue::F64(v), true) => match exact_i64(*v) {
                        Some(i) => SampleCell::Metric(MetricValue::Counter(i)),
                        None => {
                            let reason = format!(
                                "this index holds the series as integers (first written so): {v} is not one"
                            );
                            if let Some(t) = tallies.get_mut(b) {
                                t.rejected += 1;
                                t.first_rejection.get_or_insert(reason);
                            }
                            refused.errors += 1;
                            continue;
                        }
                    },
                    // The index holds these labels as floats: as every float-only store
                    // does (exact up to 2^53).
                    (SampleValue::I64(v), true) => {
                        SampleCell::Metric(MetricValue::Gauge(*v as f64))
                    }
                    (SampleValue::Bool(v), _) => SampleCell::Extra(Extra::Bool(*v)),
                    (SampleValue::Str(v), _) => SampleCell::Extra(Extra::Keyword(v.clone())),
                };
                samples.push(owner, series, *ts_millis, column, cell);
            }
        }
        self.counters.items.add(&refused);
        if samples.is_empty() {
            return Ok(tallies);
        }
        let counted = self.engine.append_samples(samples)?;
        let mut stored = ItemCounts::default();
        for (t, c) in tallies.iter_mut().zip(counted) {
            t.created += c.created;
            t.replaced += c.replaced;
            t.duplicates += c.duplicates;
            t.rejected += c.rejected;
            stored.created += c.created;
            stored.replaced += c.replaced;
            stored.duplicates += c.duplicates;
            stored.errors += c.rejected;
            if let Some(reason) = c.first_rejection {
                t.first_rejection
                    .get_or_insert_with(|| rejection_text(&reason));
            }
        }
        self.counters.items.add(&stored);
        Ok(tallies)
    }

    /// The store's refs of the series in slot `at` of `batch` and of its value column
    /// (registered on first sight), or why the index refuses the series. A series this
    /// index resolved before carries its ref (see [`LabelSeries`]): no lookup then.
    ///
    /// [`LabelSeries`]: crate::LabelSeries
    fn sample_refs(
        &mut self,
        batch: &SampleBatch,
        at: usize,
        value: &SampleValue,
    ) -> Result<std::result::Result<SampleRefs, String>> {
        let Some(series) = batch.series().get(at) else {
            return Ok(Err("a sample of an unknown series slot".to_owned()));
        };
        let (series_ref, as_twin) = match series.resolved_in(self.id) {
            Some((r, as_twin)) => (SeriesRef::from_u32(r), as_twin),
            None => {
                let tsid = series.tsid();
                let found = match self.engine.series_by_tsid(&tsid) {
                    Some(s) => Some((s, false)),
                    // The same labels stored with the other numeric type (the value
                    // column joins the id): keep writing there, converted.
                    None => series
                        .twin_tsid()
                        .and_then(|twin| self.engine.series_by_tsid(&twin))
                        .map(|s| (s, true)),
                };
                let (r, as_twin) = match found {
                    Some(f) => f,
                    None => {
                        if let Err(reason) = self.take_new_series() {
                            return Ok(Err(reason));
                        }
                        match self.engine.series(tsid, decode_dims(series.dims())?) {
                            Ok(s) => (s, false),
                            Err(tidemark_dedup::Error::Rejected { reason }) => {
                                return Ok(Err(rejection_text(&reason)));
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                };
                series.set_resolved(self.id, r.as_u32(), as_twin);
                (r, as_twin)
            }
        };
        let slot = series.value_slot(as_twin);
        if let Some(Some(c)) = self.value_columns.get(slot) {
            return Ok(Ok(SampleRefs {
                series: series_ref,
                column: *c,
                as_twin,
            }));
        }
        let kind = match (value, as_twin) {
            (SampleValue::F64(_), false) | (SampleValue::I64(_), true) => ColumnKind::Gauge,
            (SampleValue::I64(_), false) | (SampleValue::F64(_), true) => ColumnKind::Counter,
            (SampleValue::Bool(_), _) => ColumnKind::Bool,
            (SampleValue::Str(_), _) => ColumnKind::Keyword,
        };
        match self.engine.column(series.value_column_as(as_twin), kind) {
            Ok(c) => {
                if let Some(cell) = self.value_columns.get_mut(slot) {
                    *cell = Some(c);
                }
                Ok(Ok(SampleRefs {
                    series: series_ref,
                    column: c,
                    as_twin,
                }))
            }
            Err(tidemark_dedup::Error::Rejected { reason }) => Ok(Err(rejection_text(&reason))),
            Err(e) => Err(e.into()),
        }
    }
}

/// Memory [`Index::append_samples`] keeps from one call to the next.
#[derive(Debug, Default)]
pub(super) struct SampleScratch {
    /// The samples of a call, owner `b` for the call's batch `b`.
    samples: Samples,
    /// Per series slot of the batch being read: its refs, or why it is refused.
    refs: Vec<Option<std::result::Result<SampleRefs, usize>>>,
    /// Why series of the batch being read are refused.
    reasons: Vec<String>,
}

/// Where one series' samples go in an index.
#[derive(Debug, Clone, Copy)]
struct SampleRefs {
    /// The series.
    series: SeriesRef,
    /// Its value column.
    column: ColumnRef,
    /// Whether the index holds the labels with the other numeric type (samples are
    /// converted: integers to floats, integral floats to integers).
    as_twin: bool,
}

/// `v` as an integer when it is one exactly (no fraction, within `i64`).
fn exact_i64(v: f64) -> Option<i64> {
    // 2^63 is exactly representable; every float below it in magnitude converts exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    (v.fract() == 0.0 && (-LIMIT..LIMIT).contains(&v)).then_some(v as i64)
}

impl Index {
    /// Deletes the points `ids` (series id and timestamp) in one engine batch, each
    /// leaving a tombstone that merges purge: the base of Prometheus'
    /// `delete_series`. Returns how many existed; an absent id is no error.
    ///
    /// # Errors
    /// Engine errors (nothing is acknowledged then).
    pub fn delete_points(&mut self, ids: &[tidemark_tsid::SyntheticId]) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let ops = ids
            .iter()
            .map(|id| tidemark_dedup::Op::Delete(*id))
            .collect();
        let mut deleted = 0;
        for outcome in self.engine.batch(ops)? {
            let status = match outcome {
                Outcome::Deleted { .. } => {
                    deleted += 1;
                    ItemStatus::Deleted
                }
                Outcome::NotFound { .. } => ItemStatus::NotFound,
                Outcome::Rejected { reason, .. } => ItemStatus::Error(rejection_text(&reason)),
                other => ItemStatus::Error(format!("unexpected engine outcome {other:?}")),
            };
            self.counters.count(&status);
        }
        Ok(deleted)
    }
}
