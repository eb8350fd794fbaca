//! Routing: which partition a timestamp goes to, ids, and the write path that sends each
//! operation to the engine of its partition (creating the partition on its first write,
//! rebuilding the rollups of a sealed one that a late write changed).

use std::collections::BTreeMap;

use tidemark_segment::Point;
use tidemark_tsid::{SyntheticId, Tsid};

use super::failpoint::failpoint;
use super::manifest::PartState;
use super::{Part, PartitionedEngine, append, part_dir_name};
use crate::engine::{Engine, Op, Outcome, Rejection};
use crate::error::{Error, Result};

impl PartitionedEngine {
    /// The id of `point` (see [`Engine::id_of`]).
    ///
    /// # Errors
    /// [`Error::EventId`].
    pub fn id_of(&self, point: &Point) -> Result<SyntheticId> {
        match &self.keyer.0 {
            None => Ok(SyntheticId::new(point.tsid, point.ts_millis)),
            Some(k) => k.id_of(point).map_err(|detail| Error::EventId { detail }),
        }
    }

    /// The `_id` text of `id` (see [`Engine::format_id`]).
    pub fn format_id(&self, id: &SyntheticId) -> String {
        match &self.keyer.0 {
            None => id.to_string(),
            Some(k) => k.format(id),
        }
    }

    /// Parses an `_id` text (see [`Engine::parse_id`]).
    ///
    /// # Errors
    /// [`Error::BadId`].
    pub fn parse_id(&self, text: &str) -> Result<SyntheticId> {
        match &self.keyer.0 {
            None => SyntheticId::parse(text).map_err(|e| Error::BadId {
                text: text.to_owned(),
                detail: e.to_string(),
            }),
            Some(k) => k.parse(text),
        }
    }

    /// The stored point `id`.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn get(&self, id: &SyntheticId) -> Result<Option<Point>> {
        let start = self.part_start(id.ts_millis());
        match self
            .parts
            .get(&start)
            .or_else(|| self.readable_attached_at(start))
        {
            Some(p) => p.engine.get(id),
            None => Ok(None),
        }
    }

    pub(super) fn part_start(&self, ts: i64) -> i64 {
        match &self.manifest {
            None => i64::MIN,
            Some(m) => ts.div_euclid(m.width_ms) * m.width_ms,
        }
    }

    /// Why a point at `ts` is refused, if it is: older than the late window, or in a
    /// partition retention has dropped or would drop.
    pub(super) fn too_old(&self, ts: i64, high_water_ms: i64) -> Option<Rejection> {
        let m = self.manifest.as_ref()?;
        if high_water_ms == i64::MIN {
            return None;
        }
        if let Some(w) = m.late_window_ms {
            let oldest = high_water_ms.saturating_sub(w);
            if ts < oldest {
                return Some(Rejection::TooOld {
                    ts_millis: ts,
                    oldest_millis: oldest,
                    rule: "late_window",
                });
            }
        }
        if let Some(r) = m.retention_ms {
            // Partitions ending at or before the cutoff are dropped; the first one kept
            // is the one holding the cutoff.
            let cutoff = high_water_ms.saturating_sub(r);
            let oldest = self.part_start(cutoff);
            if self.part_start(ts).saturating_add(m.width_ms) <= cutoff {
                return Some(Rejection::TooOld {
                    ts_millis: ts,
                    oldest_millis: oldest,
                    rule: "retention",
                });
            }
        }
        None
    }

    /// Runs a batch: each operation goes to the partition of its timestamp (a point's,
    /// or the one in the id of a `get`/`delete`); one outcome per operation, in order.
    /// A point older than the late window or the retention is [`Outcome::Rejected`]
    /// with [`Rejection::TooOld`]. A write that changes a sealed partition rebuilds the
    /// rollup buckets it touched before the call returns.
    ///
    /// # Errors
    /// Engine and I/O errors.
    pub fn batch(&mut self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        let n = ops.len();
        let mut out: Vec<Option<Outcome>> = vec![None; n];
        // Operations by partition, keeping their order within each.
        let mut groups: BTreeMap<i64, (Vec<usize>, Vec<Op>)> = BTreeMap::new();
        let mut high = self.high_water();
        for (i, op) in ops.into_iter().enumerate() {
            let ts = match &op {
                Op::Create(p) | Op::Index(p) => {
                    // The clock moves within the batch too: a point is judged against
                    // the newest one before it.
                    if let Some(reason) = self.too_old(p.ts_millis, high) {
                        self.rejected_too_old += 1;
                        let id = self
                            .id_of(p)
                            .unwrap_or(SyntheticId::new(p.tsid, p.ts_millis));
                        out[i] = Some(Outcome::Rejected { id, reason });
                        continue;
                    }
                    high = high.max(p.ts_millis);
                    p.ts_millis
                }
                Op::Delete(id) | Op::Get(id) => {
                    let start = self.part_start(id.ts_millis());
                    if !self.parts.contains_key(&start) {
                        out[i] = Some(Outcome::NotFound { id: *id });
                        continue;
                    }
                    id.ts_millis()
                }
            };
            let g = groups.entry(self.part_start(ts)).or_default();
            g.0.push(i);
            g.1.push(op);
        }
        self.advance_clock(high);
        for (start, (idx, ops)) in groups {
            self.ensure_part(start)?;
            // Points a write may change, for the rollup rebuild.
            let keys: Vec<Option<(Tsid, i64)>> = ops
                .iter()
                .map(|op| match op {
                    Op::Create(p) | Op::Index(p) => Some((p.tsid, p.ts_millis)),
                    Op::Delete(id) => Some((id.tsid(), id.ts_millis())),
                    Op::Get(_) => None,
                })
                .collect();
            let outcomes = self.write_part(start, keys, |engine| engine.batch(ops))?;
            for (i, o) in idx.iter().zip(outcomes) {
                if let Some(slot) = out.get_mut(*i) {
                    *slot = Some(o);
                }
            }
        }
        self.keep_buffer_budget()?;
        Ok(out
            .into_iter()
            .zip(0..)
            .map(|(o, _)| {
                o.unwrap_or(Outcome::Rejected {
                    id: SyntheticId::new(Tsid::from_bytes([0; 20]), 0),
                    reason: Rejection::UnknownRef { what: "partition" },
                })
            })
            .collect())
    }

    pub(super) fn ensure_part(&mut self, start: i64) -> Result<()> {
        if self.parts.contains_key(&start) {
            return Ok(());
        }
        let Some(m) = &mut self.manifest else {
            return Ok(());
        };
        let pdir = self.dir.join(part_dir_name(start));
        // An orphan of a crash before its listing: start over.
        if pdir.exists() {
            std::fs::remove_dir_all(&pdir).map_err(Error::io(&pdir))?;
        }
        let mut engine = Engine::create(pdir.join("engine"), self.engine_config.clone())?;
        engine.set_background_merges(self.background_merges);
        engine.set_background_refresh(self.background_refresh);
        crate::fsutil::sync_dir(&pdir)?;
        crate::fsutil::sync_dir(&self.dir)?;
        let mut next = m.clone();
        next.partitions.push((start, PartState::Active));
        next.partitions.sort_by_key(|(s, _)| *s);
        next.write(&self.dir)?;
        self.clock_unsaved = false;
        *m = next;
        self.parts.insert(
            start,
            Part {
                start,
                end: start.saturating_add(m.width_ms),
                dir: pdir,
                engine,
                state: PartState::Active,
                rollups: Vec::new(),
                refs: append::PartRefs::default(),
            },
        );
        Ok(())
    }

    /// Runs `write` on the engine of the (existing) partition at `start`. `keys` names
    /// the point each operation may change, in order; a write that changes a sealed
    /// partition marks it Dirty first (a crash before the rebuild rebuilds on open),
    /// then rebuilds the rollup buckets of the points changed and seals it again.
    pub(super) fn write_part(
        &mut self,
        start: i64,
        keys: Vec<Option<(Tsid, i64)>>,
        write: impl FnOnce(&mut Engine) -> Result<Vec<Outcome>>,
    ) -> Result<Vec<Outcome>> {
        self.write_part_with(start, |engine, _, _, sealed| {
            let outcomes = write(engine)?;
            let touched = if sealed {
                outcomes
                    .iter()
                    .zip(keys.iter().chain(std::iter::repeat(&None)))
                    .filter(|(o, _)| {
                        matches!(
                            o,
                            Outcome::Created { .. }
                                | Outcome::Indexed { .. }
                                | Outcome::Deleted { .. }
                        )
                    })
                    .filter_map(|(_, k)| *k)
                    .collect()
            } else {
                Vec::new()
            };
            Ok((outcomes, touched))
        })
    }

    /// [`write_part`](Self::write_part) for a writer that names the points it changed
    /// itself: `write` is given the partition's engine and ref translation, the store's
    /// catalog and whether the partition is sealed (only then are the changed points
    /// needed), and answers its result and those points.
    pub(super) fn write_part_with<T: Default>(
        &mut self,
        start: i64,
        write: impl FnOnce(
            &mut Engine,
            &mut append::PartRefs,
            &append::Catalog,
            bool,
        ) -> Result<(T, Vec<(Tsid, i64)>)>,
    ) -> Result<T> {
        let sealed = self
            .parts
            .get(&start)
            .is_some_and(|p| p.state == PartState::Sealed);
        if sealed {
            self.set_state(start, PartState::Dirty)?;
        }
        let Some(part) = self.parts.get_mut(&start) else {
            return Ok(T::default());
        };
        let (result, touched) = write(&mut part.engine, &mut part.refs, &self.catalog, sealed)?;
        if sealed {
            if !touched.is_empty() {
                failpoint("late-write-before-rebuild");
                self.rebuild_rollups(start, &touched)?;
                self.rollup_rebuilds += 1;
            }
            self.set_state(start, PartState::Sealed)?;
        }
        Ok(result)
    }
}
