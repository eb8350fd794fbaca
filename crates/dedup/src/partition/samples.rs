//! Samples by the store's refs across partitions (see [`Samples`]): routed by timestamp
//! as [`append`](PartitionedEngine::append) routes appends, with one [`Tally`] per owner
//! instead of an outcome per sample.

use super::PartitionedEngine;
use crate::buffer::{ColumnRef, SeriesRef};
use crate::engine::{Engine, Rejection, Samples, Tally};
use crate::error::Result;

impl PartitionedEngine {
    /// Appends `samples` (by the store's refs: [`series`](Self::series),
    /// [`column`](Self::column)) to the partitions of their timestamps, with the checks
    /// and outcomes of [`append`](Self::append) counted per owner: too-old samples are
    /// rejected with [`Rejection::TooOld`]; a write into a sealed partition rebuilds the
    /// rollup buckets it touched before the call returns.
    ///
    /// ```
    /// use tidemark_dedup::{ColumnKind, EngineConfig, PartitionConfig, PartitionedEngine, SampleCell, Samples};
    /// use tidemark_segment::MetricValue;
    /// use tidemark_tsid::Tsid;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let parts = PartitionConfig::new().with_width_ms(3_600_000);
    /// let mut store = PartitionedEngine::create(dir.path(), EngineConfig::new(), parts)?;
    /// let s = store.series(Tsid::from_bytes([1; 20]), vec![("host".into(), "a".into())])?;
    /// let cpu = store.column("cpu", ColumnKind::Gauge)?;
    /// let mut samples = Samples::new();
    /// let request = samples.owner(true);
    /// for ts in [1_000, 7_200_000, 1_000] {
    ///     samples.push(request, s, ts, cpu, SampleCell::Metric(MetricValue::Gauge(0.5)));
    /// }
    /// let tally = &store.append_samples(&samples)?[0];
    /// assert_eq!((tally.created, tally.duplicates), (2, 1));
    /// assert_eq!(store.partitions().len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// Engine and I/O errors.
    pub fn append_samples(&mut self, samples: &Samples) -> Result<Vec<Tally>> {
        let mut tallies = vec![Tally::default(); samples.owners()];
        let mut scratch = std::mem::take(&mut self.append_scratch);
        let mut routed = std::mem::take(&mut scratch.routed);
        routed.clear();
        let mut one_partition = true;
        let mut high = self.high_water();
        for i in 0..samples.len() {
            let Some((owner, series, ts, _, _)) = samples.get(i) else {
                break;
            };
            let Some(tally) = tallies.get_mut(owner as usize) else {
                continue;
            };
            if self.catalog.tsid(series.0).is_none() {
                tally.reject(Rejection::UnknownRef { what: "series" });
                continue;
            }
            if let Some(reason) = self.too_old(ts, high) {
                self.rejected_too_old += 1;
                tally.reject(reason);
                continue;
            }
            high = high.max(ts);
            let start = self.part_start(ts);
            one_partition &= routed.first().is_none_or(|&(s, _)| s == start);
            routed.push((start, i));
        }
        if !one_partition {
            // Stable: each partition's samples keep their order.
            routed.sort_by_key(|&(start, _)| start);
        }
        self.advance_clock(high);
        let result = (|| -> Result<()> {
            for group in routed.chunk_by(|a, b| a.0 == b.0) {
                let Some(&(start, _)) = group.first() else {
                    continue;
                };
                self.samples_group(samples, start, group, &mut tallies)?;
            }
            Ok(())
        })();
        scratch.routed = routed;
        self.append_scratch = scratch;
        result?;
        self.keep_buffer_budget()?;
        Ok(tallies)
    }

    /// Writes the samples `group` of `samples` into the partition at `start`, by its
    /// engine's refs (a series or column the partition refuses is a rejected sample).
    fn samples_group(
        &mut self,
        samples: &Samples,
        start: i64,
        group: &[(i64, usize)],
        tallies: &mut [Tally],
    ) -> Result<()> {
        self.ensure_part(start)?;
        let picks = group.iter().map(|&(_, i)| i);
        self.write_part_with(start, |engine, refs, catalog, sealed| {
            let mut touched = Vec::new();
            let translate = |engine: &mut Engine, s: SeriesRef, c: ColumnRef| {
                Ok(match refs.series(engine, catalog, s.0)? {
                    Ok(s) => refs.column(engine, catalog, c)?.map(|c| (s, c)),
                    Err(reason) => Err(reason),
                })
            };
            engine.append_samples_into(
                samples,
                picks,
                translate,
                tallies,
                sealed.then_some(&mut touched),
            )?;
            Ok(((), touched))
        })
    }
}
