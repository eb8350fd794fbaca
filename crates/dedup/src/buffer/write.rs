//! The buffer written as a segment, run by run: the runs in tsid order, a dense in-order
//! run's columns handed to [`SegmentStreamWriter::push_rows`] as they are, any other run's
//! live rows sorted and pushed one by one. Which columns are written, and where each
//! source column's values go, is the segment crate's [`ColumnPlan`], the one
//! [`write_batch`](tidemark_segment::write_batch) follows: the file is the one it writes
//! for the same points, byte for byte (the tests below check it).

use std::io::Write;
use std::sync::Arc;

use tidemark_segment::{
    ColumnPlan, Error, Extra, MetricValue, Presence, Result, SegmentMeta, SegmentOptions,
    SegmentStreamWriter, SeriesPresence, WrittenSeries,
};

use tidemark_segment::SharedDims;
use tidemark_tsid::Tsid;

use super::runs::{Run, Values};
use super::{Buffer, ColumnTable, SeriesTable};

/// Where [`write_segment`] finds a run's series: the engine's table, or a copy of the
/// runs' own entries taken when a refresh froze the buffer ([`RunSeries`]), so that the
/// segment is written on another thread while the table keeps growing.
pub(crate) trait SeriesOfRuns {
    /// The tsid and dimensions of run `run` (index into [`Buffer::runs`]), of series
    /// ref `series`.
    fn series_of_run(&self, run: usize, series: u32) -> Option<(&Tsid, &SharedDims)>;
}

impl SeriesOfRuns for SeriesTable {
    fn series_of_run(&self, _run: usize, series: u32) -> Option<(&Tsid, &SharedDims)> {
        self.entry(series).map(|e| (&e.tsid, &e.dims))
    }
}

/// Each run's tsid and dimensions, by run index: what writing a frozen buffer needs of
/// the series table (a pointer copy per run, not the table).
#[derive(Debug, Default)]
pub(crate) struct RunSeries(Vec<Option<(Tsid, SharedDims)>>);

impl RunSeries {
    /// The entries of `buffer`'s runs in `table`.
    pub(crate) fn of(buffer: &Buffer, table: &SeriesTable) -> RunSeries {
        RunSeries(
            buffer
                .runs()
                .iter()
                .map(|r| table.entry(r.series).map(|e| (e.tsid, Arc::clone(&e.dims))))
                .collect(),
        )
    }

    /// The tsid of run `run`.
    pub(crate) fn tsid(&self, run: usize) -> Option<&Tsid> {
        self.0.get(run)?.as_ref().map(|(t, _)| t)
    }
}

impl SeriesOfRuns for RunSeries {
    fn series_of_run(&self, run: usize, _series: u32) -> Option<(&Tsid, &SharedDims)> {
        self.0.get(run)?.as_ref().map(|(t, d)| (t, d))
    }
}

/// Writes the live points of `buffer` to `out` as a segment with `options`, returning the
/// writer's output, the segment's meta and its series table.
///
/// # Errors
/// Segment write errors (a point the writer refuses, I/O).
pub(crate) fn write_segment<W: Write>(
    buffer: &Buffer,
    series: &impl SeriesOfRuns,
    columns: &ColumnTable,
    options: SegmentOptions,
    out: W,
) -> Result<(W, SegmentMeta, WrittenSeries)> {
    let events = options.events();
    let plan = plan(buffer, columns, options.block_rows());
    let mut order = Vec::with_capacity(buffer.runs().len());
    for r in buffer.tsid_order() {
        let Some(run) = buffer.runs().get(r as usize).filter(|r| r.live() > 0) else {
            continue;
        };
        let Some(e) = series.series_of_run(r as usize, run.series) else {
            // Every run's series is in the table; a miss is a bug, never a file missing
            // rows.
            debug_assert!(false, "run of series {} missing from the table", run.series);
            return Err(Error::InvalidOption {
                name: "buffer",
                detail: format!("run of series {} missing from the table", run.series),
            });
        };
        order.push((run, e));
    }
    let mut writer =
        SegmentStreamWriter::new(out, options, plan.schema().clone(), buffer.len() as u64)?;
    let mut scratch = Scratch::new(&plan);
    for (run, e) in order {
        let presence = scratch.presence_of(run, &plan);
        writer.begin_series(*e.0, Arc::clone(e.1), presence)?;
        if let (Values::Dense { cols, columns }, true, 0, false) =
            (&run.values, run.sorted, run.dead, events)
        {
            let dense = cols.iter().copied().zip(columns.iter().map(|v| &v[..]));
            plan.renumber_metrics(dense, &mut scratch.dense)?;
            writer.push_rows(&run.ts, &scratch.dense)?;
            continue;
        }
        write_rows(run, &plan, events, &mut scratch, &mut writer)?;
    }
    writer.finish_with_series()
}

/// A run's live rows, sorted (by timestamp, then id in an event segment), one by one.
fn write_rows<'a, W: Write>(
    run: &'a Run,
    plan: &ColumnPlan,
    events: bool,
    scratch: &mut Scratch<'a>,
    writer: &mut SegmentStreamWriter<W>,
) -> Result<()> {
    let Scratch {
        offs,
        source,
        metrics,
        extras,
        ..
    } = scratch;
    offs.clear();
    offs.extend(run.alive());
    if events {
        offs.sort_unstable_by_key(|&o| (run.ts.get(o), run.ids.get(o).map(|i| i.to_bytes())));
    } else if !run.sorted {
        offs.sort_unstable_by_key(|&o| run.ts.get(o));
    }
    for &o in offs.iter() {
        run.metrics_into(o, source);
        plan.renumber_metrics(source.iter().copied(), metrics)?;
        plan.renumber_extras(run.extras_of(o).iter().map(|(e, v)| (*e, v)), extras)?;
        let id = if events { run.ids.get(o) } else { None };
        let ts = run.ts.get(o).copied().unwrap_or(0);
        writer.push_row(ts, metrics, extras, id)?;
    }
    Ok(())
}

/// Buffers reused across runs.
struct Scratch<'a> {
    presence: SeriesPresence,
    dense: Vec<(u32, &'a [MetricValue])>,
    /// A run's live rows in write order.
    offs: Vec<usize>,
    /// A row's values by source column, then by output column.
    source: Vec<(u32, MetricValue)>,
    metrics: Vec<(u32, MetricValue)>,
    extras: Vec<(u32, &'a Extra)>,
}

impl Scratch<'_> {
    fn new(plan: &ColumnPlan) -> Self {
        Scratch {
            presence: SeriesPresence::new(plan),
            dense: Vec::new(),
            offs: Vec::new(),
            source: Vec::new(),
            metrics: Vec::new(),
            extras: Vec::new(),
        }
    }

    /// The presence of each output column in `run`'s live rows, for
    /// [`SegmentStreamWriter::begin_series`].
    fn presence_of(&mut self, run: &Run, plan: &ColumnPlan) -> &[(u32, Presence)] {
        let live = run.live() as u64;
        if let Values::Dense { cols, .. } = &run.values {
            // Every row has every column of the run.
            self.presence.add(plan, cols.iter().copied(), [], live);
            return self.presence.finish(live);
        }
        for o in run.alive() {
            run.metrics_into(o, &mut self.source);
            self.presence.add(
                plan,
                self.source.iter().map(|&(c, _)| c),
                run.extras_of(o).iter().map(|&(e, _)| e),
                1,
            );
        }
        self.presence.finish(live)
    }
}

/// The segment's column plan: the buffer's columns with their values counted in the live
/// rows of every run.
fn plan(buffer: &Buffer, columns: &ColumnTable, block_rows: u32) -> ColumnPlan {
    let nmetrics = columns.metrics.len();
    let mut present = vec![0u64; nmetrics + columns.extras.len()];
    let mut source = Vec::new();
    for run in buffer.runs() {
        count_present(run, nmetrics, &mut present, &mut source);
    }
    ColumnPlan::new(
        &columns.metrics,
        &columns.extras,
        &present,
        buffer.len() as u64,
        block_rows,
    )
}

/// Adds the values per source column (metrics, then extras) in the live rows of `run`
/// (`source`: a reused buffer).
fn count_present(
    run: &Run,
    nmetrics: usize,
    present: &mut [u64],
    source: &mut Vec<(u32, MetricValue)>,
) {
    let live = run.live() as u64;
    if live == 0 {
        return;
    }
    if let Values::Dense { cols, .. } = &run.values {
        for &c in cols {
            if let Some(p) = present.get_mut(c as usize) {
                *p += live;
            }
        }
        return;
    }
    for o in run.alive() {
        run.metrics_into(o, source);
        for &(c, _) in source.iter() {
            if let Some(p) = present.get_mut(c as usize) {
                *p += 1;
            }
        }
        for (e, _) in run.extras_of(o) {
            if let Some(p) = present.get_mut(nmetrics + *e as usize) {
                *p += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use proptest::prelude::*;
    use tidemark_segment::{SegmentWriter, SharedDims, write_batch};
    use tidemark_tsid::{SyntheticId, Tsid};

    use super::*;
    use crate::buffer::{ColumnKind, Key};

    /// One buffered operation: series, timestamp, which of the four metric columns and
    /// the extra it has, whether it kills the point of (series, timestamp) first.
    type Op = (u8, u8, u8, bool, bool);

    fn tsid(s: u8) -> Tsid {
        let mut b = [0u8; 20];
        // Series numbers not in tsid order.
        b[0] = s.wrapping_mul(97);
        b[19] = s;
        Tsid::from_bytes(b)
    }

    /// The buffer the operations leave, and the same points in a [`SegmentWriter`].
    /// The tables a test buffer uses: four metric columns registered out of name order
    /// (refs are not ranks) and a keyword extra.
    fn tables() -> (Buffer, SeriesTable, ColumnTable) {
        let mut columns = ColumnTable::default();
        columns.insert("m.z", ColumnKind::Gauge);
        columns.insert("m.a", ColumnKind::Counter);
        columns.insert("m.k", ColumnKind::Gauge);
        columns.insert("m.b", ColumnKind::Counter);
        columns.insert("x.note", ColumnKind::Keyword);
        (Buffer::default(), SeriesTable::default(), columns)
    }

    /// Applies the operations to the buffer (over `nseries` series), and returns the
    /// buffer's live points in a [`SegmentWriter`].
    fn build(
        (buffer, series, columns): &mut (Buffer, SeriesTable, ColumnTable),
        ops: &[Op],
        nseries: u8,
        events: bool,
        options: &SegmentOptions,
    ) -> SegmentWriter {
        for (n, &(s, ts, mask, extra, kill)) in ops.iter().enumerate() {
            let t = tsid(s % nseries);
            let s = match series.get(&t) {
                Some(r) => r,
                None => {
                    let dims: SharedDims = SharedDims::from(vec![(
                        "host".to_owned(),
                        tidemark_segment::Dim::from(format!("h{}", s % nseries)),
                    )]);
                    series.insert(t, dims, i64::MIN)
                }
            };
            let ts = 1_000 + i64::from(ts % 24) * 10;
            let key = if events {
                let mut b = [0u8; 20];
                b[..8]
                    .copy_from_slice(&(n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
                Key::Event(SyntheticId::new(Tsid::from_bytes(b), ts))
            } else {
                Key::Point(s, ts)
            };
            if kill || buffer.lookup(&key).is_some() {
                buffer.kill(&key);
                if kill {
                    continue;
                }
            }
            let values: Vec<(u32, MetricValue)> = (0..4u32)
                .filter(|c| mask & (1 << c) != 0)
                .map(|c| {
                    let v = if c % 2 == 0 {
                        MetricValue::Gauge(f64::from(n as u32) * 0.5 + f64::from(c))
                    } else {
                        MetricValue::Counter(n as i64 * 3 + i64::from(c))
                    };
                    (c, v)
                })
                .collect();
            let extras: Vec<(u32, Extra)> = if extra {
                vec![(0, Extra::Keyword(format!("n{n}")))]
            } else {
                Vec::new()
            };
            buffer.push(key, s, &t, ts, &values, &extras);
        }
        let mut writer = SegmentWriter::new(options.clone()).unwrap();
        for row in buffer.live() {
            let p = buffer.point(row, series, columns).unwrap();
            if events {
                let run = &buffer.runs()[row.run as usize];
                writer.push_with_id(p, run.ids[row.off as usize]).unwrap();
            } else {
                writer.push(p).unwrap();
            }
        }
        writer
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            (
                any::<u8>(),
                any::<u8>(),
                0u8..16,
                prop::bool::weighted(0.05),
                prop::bool::weighted(0.05),
            ),
            0..300,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The refresh's writer and `write_batch` write the same file for the same points:
        /// in-order and out-of-order runs, column sets that change within a run, extras,
        /// killed points, events, small blocks, a bloom filter.
        #[test]
        fn the_buffer_writes_the_file_write_batch_writes(
            ops in ops(),
            in_order in any::<bool>(),
            events in prop::bool::weighted(0.2),
            bloom in any::<bool>(),
            block_rows in prop::sample::select(vec![4u32, 16, 128]),
        ) {
            let mut ops = ops;
            if in_order {
                // Ascending timestamps per series, the common case: dense runs.
                ops.sort_by_key(|o| o.1 % 24);
                ops.dedup_by_key(|o| (o.0 % 6, o.1 % 24));
            }
            let mut options = SegmentOptions::new()
                .with_block_rows(block_rows)
                .with_fast_encoding(true)
                .with_events(events);
            if bloom {
                options = options.with_bloom(0.01);
            }
            // Two fills, the second over more series, with a clear between them: runs
            // kept, dropped and created keep the tsid order.
            let mut state = tables();
            let half = ops.len() / 2;
            for (fill, (part, nseries)) in [(&ops[..half], 6u8), (&ops[half..], 10)].into_iter().enumerate() {
                let writer = build(&mut state, part, nseries, events, &options);
                let (buffer, series, columns) = &state;
                if !buffer.is_empty() {
                    let (ours, meta, _) =
                        write_segment(buffer, series, columns, options.clone(), Vec::new()).unwrap();
                    let (theirs, their_meta) =
                        write_batch(&writer, options.clone(), None, Vec::new()).unwrap();
                    prop_assert_eq!(meta.row_count, their_meta.row_count);
                    prop_assert_eq!(meta.row_count, buffer.len() as u64);
                    prop_assert!(
                        ours == theirs,
                        "fill {}: files differ ({} and {} bytes)", fill, ours.len(), theirs.len()
                    );
                }
                state.0.clear();
            }
        }
    }
}
