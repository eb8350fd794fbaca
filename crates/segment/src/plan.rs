//! How a batch of rows becomes a segment: the [`RowBatch`] trait (rows in any order, as
//! a writer's caller holds them), the [`ColumnPlan`] (which source columns are written,
//! in name order, with their span shifts, and where each source column's values go), the
//! [`SeriesPresence`] of each column in a series' run, and the row order, (tsid,
//! timestamp). [`write_batch`](crate::write_batch) follows the plan for any `RowBatch`;
//! the dedup engine's refresh follows the same plan for its buffer's runs.

use tidemark_tsid::{SyntheticId, Tsid};

use crate::error::{Error, Result};
use crate::format::meta::{ColumnInfo, ExtraInfo};
use crate::format::series::Presence;
use crate::intern::SharedDims;
use crate::point::{Dim, Extra, ExtraKind, MetricKind, MetricValue};
use crate::stream::{StreamSchema, span_shift};

/// Rows to be written as one segment, in any order: what [`write_batch`] sorts and
/// streams. Rows are numbered `0..rows()`, series `0..series_count()`, metric and extra
/// columns by their positions in [`columns`](Self::columns) and
/// [`extra_columns`](Self::extra_columns) (a column no written row has a value in is left
/// out of the segment). Implemented by [`SegmentWriter`].
///
/// [`write_batch`]: crate::write_batch
/// [`SegmentWriter`]: crate::SegmentWriter
pub trait RowBatch {
    /// Metric columns: name and kind.
    fn columns(&self) -> &[(String, MetricKind)];
    /// Extra columns: name and kind.
    fn extra_columns(&self) -> &[(String, ExtraKind)];
    /// Number of series.
    fn series_count(&self) -> usize;
    /// Series `s`: its tsid and dimensions, sorted by name.
    fn series(&self, s: u32) -> Option<(Tsid, &[(String, Dim)])>;
    /// Series `s`'s dimensions as a shared list, for the segment's series table: a copy
    /// of [`series`](Self::series)' by default; a batch that holds them shared (interned)
    /// hands out its own.
    fn shared_dims(&self, s: u32) -> Option<SharedDims> {
        self.series(s).map(|(_, dims)| SharedDims::from(dims))
    }
    /// Number of rows (including any that [`include`](Self::include) leaves out).
    fn rows(&self) -> usize;
    /// Whether row `row` is written.
    fn include(&self, row: u32) -> bool;
    /// Series of row `row`.
    fn row_series(&self, row: u32) -> u32;
    /// Timestamp of row `row`.
    fn row_ts(&self, row: u32) -> i64;
    /// Metric values of row `row`: `(column, value)`, ascending by column, each column at
    /// most once (other orders make [`write_batch`](crate::write_batch) fail).
    fn row_metrics(&self, row: u32) -> &[(u32, MetricValue)];
    /// Extra values of row `row`: `(extra column, value)`, each column at most once.
    fn row_extras(&self, row: u32) -> &[(u32, Extra)];
    /// An event segment's row id (ignored in a time-series segment).
    fn row_id(&self, row: u32) -> Option<&SyntheticId>;
}

/// Where each source column of a batch goes in the segment: the used columns (those
/// holding a value) in name order, metrics and extras each, with the span shift their
/// share of the rows calls for ([`span_shift`](crate::span_shift)). Source columns are
/// numbered by the caller (a [`RowBatch`]'s positions, the engine's column refs); output
/// columns are the [`schema`](Self::schema)'s, extra column `r` being column number
/// `metric_count() + r` in a series' presence list.
#[derive(Debug, Clone)]
pub struct ColumnPlan {
    schema: StreamSchema,
    metric_rank: Vec<Option<u32>>,
    extra_rank: Vec<Option<u32>>,
    /// Source metric order is name order: the ranks keep a row's values sorted.
    metrics_monotonic: bool,
    /// Every source metric column is used, in name order: output numbering is the
    /// source's, so rows' values go out as they are.
    metrics_identity: bool,
}

impl ColumnPlan {
    /// The plan of a batch of `rows` rows whose source columns are `columns` and
    /// `extras` (name and kind, in the caller's order) holding `present[i]` values each
    /// (metrics, then extras), written in blocks of `block_rows` rows.
    pub fn new(
        columns: &[(String, MetricKind)],
        extras: &[(String, ExtraKind)],
        present: &[u64],
        rows: u64,
        block_rows: u32,
    ) -> ColumnPlan {
        let used = |i: usize| present.get(i).is_some_and(|&p| p > 0);
        let (metric_rank, sorted_columns) = rank_by_name(columns, used);
        let (extra_rank, sorted_extras) = rank_by_name(extras, |e| used(columns.len() + e));
        let shift = |i: usize| span_shift(rows, present.get(i).copied().unwrap_or(0), block_rows);
        let schema = StreamSchema {
            columns: sorted_columns
                .iter()
                .map(|&(src, (name, kind))| ColumnInfo {
                    name: name.clone(),
                    kind: *kind,
                    span_shift: shift(src),
                })
                .collect(),
            extras: sorted_extras
                .iter()
                .map(|&(src, (name, kind))| ExtraInfo {
                    name: name.clone(),
                    kind: *kind,
                    span_shift: shift(columns.len() + src),
                })
                .collect(),
        };
        let metrics_monotonic = metric_rank
            .iter()
            .flatten()
            .collect::<Vec<_>>()
            .windows(2)
            .all(|w| w[0] < w[1]);
        let metrics_identity = metric_rank
            .iter()
            .enumerate()
            .all(|(c, r)| *r == Some(c as u32));
        ColumnPlan {
            schema,
            metric_rank,
            extra_rank,
            metrics_monotonic,
            metrics_identity,
        }
    }

    /// The used columns, metrics and extras each in name order, with their span shifts:
    /// the schema of the [`SegmentStreamWriter`](crate::SegmentStreamWriter) to write.
    pub fn schema(&self) -> &StreamSchema {
        &self.schema
    }

    /// Used metric columns: extra output column `r` is presence column `metric_count() + r`.
    pub fn metric_count(&self) -> u32 {
        self.schema.columns.len() as u32
    }

    /// The output column of source metric column `c`; `None` when unused.
    pub fn metric(&self, c: u32) -> Option<u32> {
        self.metric_rank.get(c as usize).copied().flatten()
    }

    /// The output extra column of source extra column `e`; `None` when unused.
    pub fn extra(&self, e: u32) -> Option<u32> {
        self.extra_rank.get(e as usize).copied().flatten()
    }

    /// Whether source metric order is name order: renumbered, a row's values stay sorted.
    pub fn metrics_monotonic(&self) -> bool {
        self.metrics_monotonic
    }

    /// Whether every source metric column is used, in name order: a row's metric values
    /// go out as they are, without renumbering.
    pub fn metrics_identity(&self) -> bool {
        self.metrics_identity
    }

    /// A row's metric values (or a run's metric columns) by source column, into `out` by
    /// output column, ascending.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a source column the plan left out: the counts the
    /// plan was made from missed a value (a bug in the caller, never a file missing it).
    pub fn renumber_metrics<T>(
        &self,
        source: impl IntoIterator<Item = (u32, T)>,
        out: &mut Vec<(u32, T)>,
    ) -> Result<()> {
        renumber(&self.metric_rank, "metric", source, out)?;
        if !self.metrics_monotonic {
            out.sort_unstable_by_key(|(c, _)| *c);
        }
        Ok(())
    }

    /// A row's extra values by source extra column, into `out` by output extra column,
    /// ascending.
    ///
    /// # Errors
    /// As [`renumber_metrics`](Self::renumber_metrics).
    pub fn renumber_extras<T>(
        &self,
        source: impl IntoIterator<Item = (u32, T)>,
        out: &mut Vec<(u32, T)>,
    ) -> Result<()> {
        renumber(&self.extra_rank, "extra", source, out)?;
        if out.len() > 1 {
            out.sort_unstable_by_key(|(c, _)| *c);
        }
        Ok(())
    }
}

/// `source`'s values into `out` with their columns renumbered by `rank` (a
/// [`ColumnPlan`]'s, of `what` columns), in `source`'s order.
fn renumber<T>(
    rank: &[Option<u32>],
    what: &str,
    source: impl IntoIterator<Item = (u32, T)>,
    out: &mut Vec<(u32, T)>,
) -> Result<()> {
    out.clear();
    for (c, v) in source {
        let r = rank.get(c as usize).copied().flatten();
        out.push((r.ok_or_else(|| unplanned(what, c))?, v));
    }
    Ok(())
}

/// A source column no plan holds: a bug in the counts the plan was made from, never a
/// file missing values.
fn unplanned(what: &str, c: u32) -> Error {
    debug_assert!(false, "{what} column {c} not in the plan");
    Error::InvalidOption {
        name: "plan",
        detail: format!("{what} column {c} not in the plan"),
    }
}

/// Counts the values of a series' run per output column, for the presence list its
/// [`begin_series`](crate::SegmentStreamWriter::begin_series) declares; its buffers are
/// reused across runs.
#[derive(Debug, Clone)]
pub struct SeriesPresence {
    counts: Vec<u64>,
    touched: Vec<u32>,
    presence: Vec<(u32, Presence)>,
}

impl SeriesPresence {
    /// A counter for the output columns of `plan`.
    pub fn new(plan: &ColumnPlan) -> SeriesPresence {
        SeriesPresence {
            counts: vec![0; plan.schema.columns.len() + plan.schema.extras.len()],
            touched: Vec::new(),
            presence: Vec::new(),
        }
    }

    /// Counts `rows` rows that each hold a value in source metric columns `metrics` and
    /// source extra columns `extras` (columns the plan left out are not counted).
    pub fn add(
        &mut self,
        plan: &ColumnPlan,
        metrics: impl IntoIterator<Item = u32>,
        extras: impl IntoIterator<Item = u32>,
        rows: u64,
    ) {
        let nmetrics = plan.metric_count();
        let cols = metrics.into_iter().filter_map(|c| plan.metric(c)).chain(
            extras
                .into_iter()
                .filter_map(|e| plan.extra(e).map(|r| nmetrics + r)),
        );
        for c in cols {
            if let Some(k) = self.counts.get_mut(c as usize) {
                if *k == 0 {
                    self.touched.push(c);
                }
                *k += rows;
            }
        }
    }

    /// The presence of each output column counted since the last call, in a run of
    /// `rows` rows (output column numbering, sorted): [`Presence::Full`] for a column
    /// every row holds. Starts the count afresh.
    pub fn finish(&mut self, rows: u64) -> &[(u32, Presence)] {
        self.touched.sort_unstable();
        self.presence.clear();
        for &c in &self.touched {
            if let Some(k) = self.counts.get_mut(c as usize) {
                let p = if *k == rows {
                    Presence::Full
                } else {
                    Presence::Partial
                };
                self.presence.push((c, p));
                *k = 0;
            }
        }
        self.touched.clear();
        &self.presence
    }
}

/// Values per source column (metrics, then extras) in `rows`: for the span of each
/// column's blocks and to leave out columns no row uses.
pub(crate) fn count_present<B: RowBatch + ?Sized>(batch: &B, rows: &[u32]) -> Vec<u64> {
    let ncols = batch.columns().len();
    let mut present = vec![0u64; ncols + batch.extra_columns().len()];
    for &r in rows {
        for &(c, _) in batch.row_metrics(r) {
            if let Some(p) = present.get_mut(c as usize) {
                *p += 1;
            }
        }
        for (e, _) in batch.row_extras(r) {
            if let Some(p) = present.get_mut(ncols + *e as usize) {
                *p += 1;
            }
        }
    }
    present
}

/// `rows` in output order: (series in tsid order, timestamp), and the row id after
/// them in an event segment.
pub(crate) fn order_rows<B: RowBatch + ?Sized>(
    batch: &B,
    mut rows: Vec<u32>,
    events: bool,
) -> Vec<u32> {
    let series_count = batch.series_count();
    // Sorted once by a key read once per series.
    let mut series_order: Vec<(Option<(u128, u32)>, u32)> = (0..series_count as u32)
        .map(|s| (batch.series(s).map(|(t, _)| t.sort_key()), s))
        .collect();
    series_order.sort_unstable();
    let mut series_rank = vec![0u32; series_count];
    for (rank, &(_, s)) in series_order.iter().enumerate() {
        series_rank[s as usize] = rank as u32;
    }
    // A row's series is one of the batch's series.
    let rank_of = |s: u32| {
        debug_assert!(
            (s as usize) < series_count,
            "row of series {s} of {series_count}"
        );
        series_rank[s as usize]
    };
    if events {
        rows.sort_unstable_by_key(|&i| {
            (
                rank_of(batch.row_series(i)),
                batch.row_ts(i),
                batch.row_id(i).map(SyntheticId::to_bytes),
            )
        });
        rows
    } else {
        group_by_series(
            &rows,
            series_count,
            |i| rank_of(batch.row_series(i)),
            |i| batch.row_ts(i),
        )
    }
}

/// `rows` in (series rank, timestamp) order: a counting sort by rank (stable, so each
/// series keeps its arrival order), then a sort of each series' run only where its rows
/// arrived out of order — linear time for in-order data, where a comparison sort of the
/// whole buffer was a tenth of a refresh.
fn group_by_series(
    rows: &[u32],
    series: usize,
    rank: impl Fn(u32) -> u32,
    ts: impl Fn(u32) -> i64,
) -> Vec<u32> {
    let mut starts = vec![0usize; series + 1];
    for &i in rows {
        if let Some(n) = starts.get_mut(rank(i) as usize + 1) {
            *n += 1;
        }
    }
    for k in 1..starts.len() {
        starts[k] += starts[k - 1];
    }
    let mut next = starts.clone();
    let mut out = vec![0u32; rows.len()];
    for &i in rows {
        if let Some(at) = next.get_mut(rank(i) as usize) {
            if let Some(slot) = out.get_mut(*at) {
                *slot = i;
            }
            *at += 1;
        }
    }
    for w in starts.windows(2) {
        if let Some(run) = out.get_mut(w[0]..w[1]) {
            if !run.windows(2).all(|p| ts(p[0]) < ts(p[1])) {
                run.sort_unstable_by_key(|&i| ts(i));
            }
        }
    }
    out
}

/// Used columns sorted by name, each with its source position.
type SortedColumns<'a, K> = Vec<(usize, &'a (String, K))>;

/// Each used column's rank in name order (`None` for unused ones), indexed by source
/// position, and the used columns sorted by name with their source positions.
fn rank_by_name<K>(
    columns: &[(String, K)],
    used: impl Fn(usize) -> bool,
) -> (Vec<Option<u32>>, SortedColumns<'_, K>) {
    let mut sorted: Vec<(usize, &(String, K))> = columns
        .iter()
        .enumerate()
        .filter(|(i, _)| used(*i))
        .collect();
    sorted.sort_by(|a, b| a.1.0.cmp(&b.1.0));
    let mut rank = vec![None; columns.len()];
    for (r, &(src, _)) in sorted.iter().enumerate() {
        if let Some(slot) = rank.get_mut(src) {
            *slot = Some(r as u32);
        }
    }
    (rank, sorted)
}
