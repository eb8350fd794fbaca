//! [`write_batch`]: a [`RowBatch`] sorted and streamed through a [`SegmentStreamWriter`],
//! following its [`ColumnPlan`].

use std::io::Write;

use crate::bloom::SegmentBloom;
use crate::error::{Error, Result};
use crate::format::series::{Presence, WrittenSeries};
use crate::intern::SharedDims;
use crate::options::SegmentOptions;
use crate::plan::{ColumnPlan, RowBatch, SeriesPresence, count_present, order_rows};
use crate::point::{Extra, MetricValue};
use crate::stream::{SegmentMeta, SegmentStreamWriter};

/// Sorts the rows of `batch` and streams them through a [`SegmentStreamWriter`] to
/// `out`: columns in name order (those with no value left out), series in tsid order,
/// rows in (tsid, timestamp[, id]) order, each series' column presence counted exactly
/// before its rows go out. `bloom` is a filter to write instead of one built from the
/// rows, with the capacity it was sized for. Memory: the sort order (4 bytes a row) and
/// the writer's open blocks, beside the batch itself.
///
/// # Errors
/// [`Error::DuplicatePoint`] when two rows share tsid and timestamp (and id, in an event
/// segment); [`Error::InvalidOption`] for bad options; I/O errors.
pub fn write_batch<B: RowBatch + ?Sized, W: Write>(
    batch: &B,
    options: SegmentOptions,
    bloom: Option<(SegmentBloom, u64)>,
    out: W,
) -> Result<(W, SegmentMeta)> {
    stream_batch(batch, options, bloom, out)?.finish()
}

/// As [`write_batch`], also returning the series table as a reader would decode it, so
/// that the caller can open the file with [`Segment::open_written`](crate::Segment::open_written)
/// without decoding it again (the engine's refresh does).
///
/// # Errors
/// As [`write_batch`].
pub fn write_batch_with_series<B: RowBatch + ?Sized, W: Write>(
    batch: &B,
    options: SegmentOptions,
    bloom: Option<(SegmentBloom, u64)>,
    out: W,
) -> Result<(W, SegmentMeta, WrittenSeries)> {
    stream_batch(batch, options, bloom, out)?.finish_with_series()
}

/// The rows of `batch` streamed to a new writer over `out`, which is left to finish.
fn stream_batch<B: RowBatch + ?Sized, W: Write>(
    batch: &B,
    options: SegmentOptions,
    bloom: Option<(SegmentBloom, u64)>,
    out: W,
) -> Result<SegmentStreamWriter<W>> {
    let events = options.events();
    let rows: Vec<u32> = (0..batch.rows() as u32)
        .filter(|&r| batch.include(r))
        .collect();
    let n = rows.len() as u64;
    let present = count_present(batch, &rows);
    let plan = ColumnPlan::new(
        batch.columns(),
        batch.extra_columns(),
        &present,
        n,
        options.block_rows(),
    );
    let order = order_rows(batch, rows, events);
    let mut writer = SegmentStreamWriter::new(out, options, plan.schema().clone(), n)?;
    if let Some((filter, capacity)) = bloom {
        writer.set_bloom_filter(filter, capacity);
    }
    write_rows(batch, &order, &plan, events, &mut writer)?;
    Ok(writer)
}

/// Streams the rows in `order` to `writer`, one series run at a time: the run's column
/// presence counted exactly first, then its rows with their values renumbered to the
/// output columns.
fn write_rows<B: RowBatch + ?Sized, W: Write>(
    batch: &B,
    order: &[u32],
    plan: &ColumnPlan,
    events: bool,
    writer: &mut SegmentStreamWriter<W>,
) -> Result<()> {
    let mut metrics: Vec<(u32, MetricValue)> = Vec::new();
    let mut extras: Vec<(u32, &Extra)> = Vec::new();
    let mut presence = SeriesPresence::new(plan);
    let mut dense_run = DenseRun::default();
    let mut at = 0usize;
    while let Some(&first) = order.get(at) {
        let s = batch.row_series(first);
        let end = at
            + order
                .get(at..)
                .unwrap_or(&[])
                .iter()
                .take_while(|&&i| batch.row_series(i) == s)
                .count();
        let run = order.get(at..end).unwrap_or(&[]);
        let Some((tsid, dims)) = batch.series(s) else {
            // Every row's series is in the batch; a miss is a bug in the batch, never a
            // file missing rows.
            debug_assert!(false, "row of series {s} missing from the batch");
            return Err(Error::InvalidOption {
                name: "batch",
                detail: format!("row of series {s} missing from the batch"),
            });
        };
        let dims = batch
            .shared_dims(s)
            .unwrap_or_else(|| SharedDims::from(dims));
        for &i in run {
            presence.add(
                plan,
                batch.row_metrics(i).iter().map(|&(c, _)| c),
                batch.row_extras(i).iter().map(|&(e, _)| e),
                1,
            );
        }
        let declared = presence.finish(run.len() as u64);
        let dense = !events
            && plan.metrics_monotonic()
            && declared
                .iter()
                .all(|&(c, p)| p == Presence::Full && c < plan.metric_count());
        writer.begin_series(tsid, dims, declared)?;
        if dense && dense_run.gather(batch, run, plan) {
            writer.push_rows(&dense_run.ts, dense_run.columns())?;
            at = end;
            continue;
        }
        for &i in run {
            let row_metrics = if plan.metrics_identity() {
                batch.row_metrics(i)
            } else {
                plan.renumber_metrics(batch.row_metrics(i).iter().copied(), &mut metrics)?;
                &metrics[..]
            };
            plan.renumber_extras(
                batch.row_extras(i).iter().map(|(e, v)| (*e, v)),
                &mut extras,
            )?;
            let id = if events { batch.row_id(i) } else { None };
            writer.push_row(batch.row_ts(i), row_metrics, &extras, id)?;
        }
        at = end;
    }
    Ok(())
}

/// A series run whose rows all have values in the same metric columns and no extras,
/// gathered into columns for [`SegmentStreamWriter::push_rows`]: one pass over the
/// run's rows, each read once for all its columns, instead of a writer call per row.
/// Buffers are reused across runs.
#[derive(Default)]
struct DenseRun {
    ts: Vec<i64>,
    /// The first `width` hold the run: each gathered column's output column and values.
    columns: Vec<(u32, Vec<MetricValue>)>,
    width: usize,
}

impl DenseRun {
    /// Gathers `run`; false (nothing to push) when a row's columns differ from the
    /// first row's or it has extras, which the caller's presence check rules out.
    fn gather<B: RowBatch + ?Sized>(&mut self, batch: &B, run: &[u32], plan: &ColumnPlan) -> bool {
        let Some(&first) = run.first() else {
            return false;
        };
        let source = batch.row_metrics(first);
        let k = source.len();
        if self.columns.len() < k {
            self.columns.resize_with(k, || (0, Vec::new()));
        }
        self.width = 0;
        for (&(c, _), (out, values)) in source.iter().zip(self.columns.iter_mut()) {
            let Some(r) = plan.metric(c) else {
                return false;
            };
            *out = r;
            values.clear();
        }
        self.ts.clear();
        for &i in run {
            let row = batch.row_metrics(i);
            if row.len() != k || !batch.row_extras(i).is_empty() {
                return false;
            }
            for ((&(c, v), &(c0, _)), (_, out)) in
                row.iter().zip(source).zip(self.columns.iter_mut())
            {
                if c != c0 {
                    return false;
                }
                out.push(v);
            }
            self.ts.push(batch.row_ts(i));
        }
        self.width = k;
        true
    }

    /// The gathered columns as [`SegmentStreamWriter::push_rows`] takes them.
    fn columns(&self) -> &[(u32, Vec<MetricValue>)] {
        self.columns.get(..self.width).unwrap_or(&[])
    }
}
