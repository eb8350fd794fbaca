//! Appends by reference across partitions: the store's own series and column refs, valid
//! for every partition, translated to each partition engine's refs the first time a
//! series or column reaches that partition.
//!
//! A caller names a series once ([`PartitionedEngine::series`]) and then appends points
//! of it by ref, whatever partition their timestamps fall in, as Prometheus' `Appender`
//! does; the dimensions are checked and copied once per series (and once more per
//! partition that receives it), never per point.

use std::collections::HashMap;
use std::sync::Arc;

use tidemark_segment::{Dim, Extra, MetricValue};
use tidemark_tsid::{SyntheticId, Tsid};

use super::PartitionedEngine;
use super::manifest::PartState;
use crate::buffer::{ColumnId, ColumnKind, ColumnRef, SeriesRef};
use crate::engine::{AppendBatch, Engine, MAX_COLUMNS, MAX_STRING_LEN, Outcome, Rejection};
use crate::error::{Error, Result};

/// A series' dimensions, sorted by name.
type Dims = Arc<[(String, Dim)]>;

/// The store's series and columns, by the refs it hands out.
#[derive(Debug, Default)]
pub(super) struct Catalog {
    series: Vec<(Tsid, Dims)>,
    by_tsid: HashMap<Tsid, u32>,
    columns: Vec<(String, ColumnKind)>,
    by_name: HashMap<String, u32>,
}

impl Catalog {
    /// The tsid of store series `g`.
    pub(super) fn tsid(&self, g: u32) -> Option<Tsid> {
        self.series.get(g as usize).map(|(t, _)| *t)
    }
}

/// One partition's translation of the store's refs to its engine's (filled lazily).
#[derive(Debug, Default)]
pub(super) struct PartRefs {
    series: Vec<Option<SeriesRef>>,
    columns: Vec<Option<ColumnRef>>,
}

/// Scratch of [`PartitionedEngine::append`], kept to reuse its memory.
#[derive(Debug, Default)]
pub(super) struct AppendScratch {
    /// (partition start, position in the batch) of each accepted append.
    pub(super) routed: Vec<(i64, usize)>,
    /// Positions of the appends of the partition being written.
    kept: Vec<usize>,
    sub: AppendBatch,
    values: Vec<(ColumnRef, MetricValue)>,
    extras: Vec<(ColumnRef, Extra)>,
}

fn is_metric(kind: ColumnKind) -> bool {
    matches!(kind, ColumnKind::Gauge | ColumnKind::Counter)
}

impl PartRefs {
    /// This partition's ref of store series `g`, registering it with `engine` first.
    pub(super) fn series(
        &mut self,
        engine: &mut Engine,
        catalog: &Catalog,
        g: u32,
    ) -> Result<std::result::Result<SeriesRef, Rejection>> {
        let i = g as usize;
        if let Some(Some(s)) = self.series.get(i) {
            return Ok(Ok(*s));
        }
        let Some((tsid, dims)) = catalog.series.get(i) else {
            return Ok(Err(Rejection::UnknownRef { what: "series" }));
        };
        let s = match engine.series(*tsid, dims.to_vec()) {
            Ok(s) => s,
            Err(Error::Rejected { reason }) => return Ok(Err(reason)),
            Err(e) => return Err(e),
        };
        if self.series.len() <= i {
            self.series.resize(i + 1, None);
        }
        if let Some(slot) = self.series.get_mut(i) {
            *slot = Some(s);
        }
        Ok(Ok(s))
    }

    /// This partition's ref of store column `c`, registering it with `engine` first.
    pub(super) fn column(
        &mut self,
        engine: &mut Engine,
        catalog: &Catalog,
        c: ColumnRef,
    ) -> Result<std::result::Result<ColumnRef, Rejection>> {
        let (ColumnRef(ColumnId::Metric(g)) | ColumnRef(ColumnId::Extra(g))) = c;
        let i = g as usize;
        if let Some(Some(local)) = self.columns.get(i) {
            return Ok(Ok(*local));
        }
        let Some((name, kind)) = catalog.columns.get(i) else {
            return Ok(Err(Rejection::UnknownRef { what: "column" }));
        };
        let local = match engine.column(name, *kind) {
            Ok(l) => l,
            Err(Error::Rejected { reason }) => return Ok(Err(reason)),
            Err(e) => return Err(e),
        };
        if self.columns.len() <= i {
            self.columns.resize(i + 1, None);
        }
        if let Some(slot) = self.columns.get_mut(i) {
            *slot = Some(local);
        }
        Ok(Ok(local))
    }
}

impl PartitionedEngine {
    /// Registers series `tsid` with dimensions `dims` (in any order) and returns the
    /// store's ref for it, valid in every partition for as long as the store is open:
    /// then [`append`](Self::append) names the series by that ref. The dimensions are
    /// checked now and copied into a partition's engine the first time a point of the
    /// series reaches it. Asking again for a known series returns the same ref.
    ///
    /// # Errors
    /// [`Error::Rejected`] for dimensions given twice or too long, or a tsid known with
    /// other dimensions; a partition holding the tsid with other dimensions rejects the
    /// append instead.
    pub fn series(&mut self, tsid: Tsid, dims: Vec<(String, Dim)>) -> Result<SeriesRef> {
        let dims = Engine::checked_dims(tsid, dims)?;
        if let Some(&g) = self.catalog.by_tsid.get(&tsid) {
            let same = self.engine_config.derived_tsids
                || self
                    .catalog
                    .series
                    .get(g as usize)
                    .is_some_and(|(_, d)| **d == *dims);
            return if same {
                Ok(SeriesRef(g))
            } else {
                Err(Error::Rejected {
                    reason: Rejection::InconsistentDimensions { tsid },
                })
            };
        }
        let g = u32::try_from(self.catalog.series.len()).map_err(|_| Error::Rejected {
            reason: Rejection::UnknownRef { what: "series" },
        })?;
        self.catalog.series.push((tsid, dims.into()));
        self.catalog.by_tsid.insert(tsid, g);
        Ok(SeriesRef(g))
    }

    /// The store's ref of a series registered by [`series`](Self::series).
    pub fn series_by_tsid(&self, tsid: &Tsid) -> Option<SeriesRef> {
        self.catalog.by_tsid.get(tsid).map(|&g| SeriesRef(g))
    }

    /// Registers the metric or extra column `name` holding `kind` values and returns the
    /// store's ref for it, for [`append`](Self::append).
    ///
    /// # Errors
    /// [`Error::Rejected`] for a name known with another kind, too long, or past
    /// [`MAX_COLUMNS`].
    pub fn column(&mut self, name: &str, kind: ColumnKind) -> Result<ColumnRef> {
        let make = |g: u32| {
            if is_metric(kind) {
                ColumnRef(ColumnId::Metric(g))
            } else {
                ColumnRef(ColumnId::Extra(g))
            }
        };
        if let Some(&g) = self.catalog.by_name.get(name) {
            let known = self.catalog.columns.get(g as usize).map(|(_, k)| *k);
            return match known {
                Some(k) if k == kind => Ok(make(g)),
                k => Err(Error::Rejected {
                    reason: Rejection::KindConflict {
                        name: name.to_owned(),
                        expected: k.map_or("?", ColumnKind::name),
                        found: kind.name(),
                    },
                }),
            };
        }
        if name.len() > MAX_STRING_LEN {
            return Err(Error::Rejected {
                reason: Rejection::TooLong {
                    len_bytes: name.len(),
                },
            });
        }
        if self.catalog.columns.len() >= 2 * MAX_COLUMNS {
            return Err(Error::Rejected {
                reason: Rejection::TooManyColumns,
            });
        }
        let g = self.catalog.columns.len() as u32;
        self.catalog.columns.push((name.to_owned(), kind));
        self.catalog.by_name.insert(name.to_owned(), g);
        Ok(make(g))
    }

    /// Runs a batch of appends by the store's refs (see [`series`](Self::series) and
    /// [`column`](Self::column)): each goes to the partition of its timestamp, with the
    /// same checks and outcomes as [`batch`](Self::batch) gives points — one outcome per
    /// append, in order; too-old points [`Outcome::Rejected`] with
    /// [`Rejection::TooOld`]; a write into a sealed partition rebuilds the rollup buckets
    /// it touched before the call returns.
    ///
    /// ```
    /// use tidemark_dedup::{AppendBatch, ColumnKind, EngineConfig, Outcome, PartitionConfig, PartitionedEngine};
    /// use tidemark_segment::MetricValue;
    /// use tidemark_tsid::Tsid;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let parts = PartitionConfig::new().with_width_ms(3_600_000);
    /// let mut store = PartitionedEngine::create(dir.path(), EngineConfig::new(), parts)?;
    /// let s = store.series(Tsid::from_bytes([1; 20]), vec![("host".into(), "a".into())])?;
    /// let cpu = store.column("cpu", ColumnKind::Gauge)?;
    /// let mut batch = AppendBatch::new();
    /// batch.create(s, 1_000, &[(cpu, MetricValue::Gauge(0.5))]);
    /// batch.create(s, 7_200_000, &[(cpu, MetricValue::Gauge(0.7))]); // the next-but-one hour
    /// batch.create(s, 1_000, &[(cpu, MetricValue::Gauge(0.5))]); // a retry
    /// let out = store.append(&batch)?;
    /// assert!(matches!(out[1], Outcome::Created { .. }));
    /// assert!(matches!(out[2], Outcome::Conflict { .. }));
    /// assert_eq!(store.partitions().len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// Engine and I/O errors.
    pub fn append(&mut self, batch: &AppendBatch) -> Result<Vec<Outcome>> {
        let n = batch.len();
        let mut out: Vec<Option<Outcome>> = vec![None; n];
        let mut scratch = std::mem::take(&mut self.append_scratch);
        // The partition of every accepted append; most batches fall in one partition,
        // which then needs no sort.
        let routed = &mut scratch.routed;
        routed.clear();
        let mut one_partition = true;
        let mut high = self.high_water();
        for (i, slot) in out.iter_mut().enumerate() {
            let Some(item) = batch.get(i) else { break };
            let Some((tsid, _)) = self.catalog.series.get(item.series.0 as usize) else {
                *slot = Some(Outcome::Rejected {
                    id: SyntheticId::new(Tsid::from_bytes([0; 20]), item.ts),
                    reason: Rejection::UnknownRef { what: "series" },
                });
                continue;
            };
            if let Some(reason) = self.too_old(item.ts, high) {
                self.rejected_too_old += 1;
                *slot = Some(Outcome::Rejected {
                    id: SyntheticId::new(*tsid, item.ts),
                    reason,
                });
                continue;
            }
            high = high.max(item.ts);
            let start = self.part_start(item.ts);
            one_partition &= routed.first().is_none_or(|&(s, _)| s == start);
            routed.push((start, i));
        }
        if !one_partition {
            // Stable: each partition's appends keep their order.
            routed.sort_by_key(|&(start, _)| start);
        }
        self.advance_clock(high);
        let result = self.append_groups(batch, &mut out, &mut scratch);
        self.append_scratch = scratch;
        result?;
        self.keep_buffer_budget()?;
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or(Outcome::Rejected {
                    id: SyntheticId::new(Tsid::from_bytes([0; 20]), 0),
                    reason: Rejection::UnknownRef { what: "partition" },
                })
            })
            .collect())
    }

    /// Writes the appends of `scratch.routed` (sorted by partition) partition by
    /// partition, translating the store's refs to each partition engine's.
    fn append_groups(
        &mut self,
        batch: &AppendBatch,
        out: &mut [Option<Outcome>],
        scratch: &mut AppendScratch,
    ) -> Result<()> {
        let routed = std::mem::take(&mut scratch.routed);
        let result = (|| {
            for group in routed.chunk_by(|a, b| a.0 == b.0) {
                let Some(&(start, _)) = group.first() else {
                    continue;
                };
                self.append_group(batch, start, group, out, scratch)?;
            }
            Ok(())
        })();
        scratch.routed = routed;
        result
    }

    fn append_group(
        &mut self,
        batch: &AppendBatch,
        start: i64,
        group: &[(i64, usize)],
        out: &mut [Option<Outcome>],
        scratch: &mut AppendScratch,
    ) -> Result<()> {
        self.ensure_part(start)?;
        let Some(part) = self.parts.get_mut(&start) else {
            return Ok(());
        };
        // A write into a sealed partition rebuilds the rollups it touched: only then are
        // the appends' ids needed.
        let sealed = part.state == PartState::Sealed;
        // Translate the store's refs to the partition engine's; an item whose series or
        // column the partition refuses is rejected here, the others go on.
        scratch.sub.clear();
        scratch.kept.clear();
        let mut keys: Vec<Option<(Tsid, i64)>> = Vec::new();
        for &(_, i) in group {
            let Some(item) = batch.get(i) else { continue };
            let reject = |catalog: &Catalog, reason| Outcome::Rejected {
                id: SyntheticId::new(
                    catalog
                        .series
                        .get(item.series.0 as usize)
                        .map_or(Tsid::from_bytes([0; 20]), |(t, _)| *t),
                    item.ts,
                ),
                reason,
            };
            let s = match part
                .refs
                .series(&mut part.engine, &self.catalog, item.series.0)?
            {
                Ok(s) => s,
                Err(reason) => {
                    out[i] = Some(reject(&self.catalog, reason));
                    continue;
                }
            };
            scratch.values.clear();
            scratch.extras.clear();
            let mut refused = None;
            for &(c, v) in item.values {
                match part.refs.column(&mut part.engine, &self.catalog, c)? {
                    Ok(local) => scratch.values.push((local, v)),
                    Err(reason) => {
                        refused = Some(reason);
                        break;
                    }
                }
            }
            if refused.is_none() {
                for (c, v) in item.extras {
                    match part.refs.column(&mut part.engine, &self.catalog, *c)? {
                        Ok(local) => scratch.extras.push((local, v.clone())),
                        Err(reason) => {
                            refused = Some(reason);
                            break;
                        }
                    }
                }
            }
            if let Some(reason) = refused {
                out[i] = Some(reject(&self.catalog, reason));
                continue;
            }
            scratch
                .sub
                .push(item.create, s, item.ts, &scratch.values, &scratch.extras);
            scratch.kept.push(i);
            if sealed {
                let tsid = self
                    .catalog
                    .series
                    .get(item.series.0 as usize)
                    .map(|(t, _)| *t);
                keys.push(tsid.map(|t| (t, item.ts)));
            }
        }
        if scratch.kept.is_empty() {
            return Ok(());
        }
        let sub = &scratch.sub;
        let outcomes = self.write_part(start, keys, |engine| engine.append(sub))?;
        for (&i, o) in scratch.kept.iter().zip(outcomes) {
            if let Some(slot) = out.get_mut(i) {
                *slot = Some(o);
            }
        }
        Ok(())
    }
}
