//! The evaluator: an expression tree from `promql-parser`, evaluated over every step of
//! a query at once (an instant query is a range query of one step), as Prometheus'
//! engine does. Selectors read each series once for the whole query range.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{
    AggregateExpr, AtModifier, BinModifier, BinaryExpr, Call, Expr, LabelModifier, MatrixSelector,
    Offset, SubqueryExpr, VectorMatchCardinality, VectorSelector,
};

use crate::error::{Error, Result};
use crate::functions;
use crate::storage::{Labels, Storage, Window, WindowAgg, WindowSeries, is_stale_nan};
use crate::value::{InstantSample, QueryValue, RangeSeries};

/// The label holding the metric name.
pub const METRIC_NAME: &str = "__name__";

/// A subquery's step when it names none (`x[5m:]`): Prometheus' default global
/// evaluation interval.
const DEFAULT_SUBQUERY_STEP_MS: i64 = 60_000;

/// A subquery's result: its series' samples at its own steps, and the selector times
/// of the outer steps whose windows `(t - range, t]` read them.
pub(crate) struct Subquery {
    pub(crate) series: Vec<SubquerySeries>,
    pub(crate) ends: Vec<i64>,
    pub(crate) range: i64,
}

/// One series of a subquery's result.
pub(crate) struct SubquerySeries {
    pub(crate) labels: Labels,
    /// Whether the inner expression dropped its name (delayed removal).
    pub(crate) drop_name: bool,
    pub(crate) ts: Vec<i64>,
    pub(crate) vs: Vec<f64>,
}

/// Limits and settings of one query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryOptions {
    /// How far back an instant selector looks for a sample (Prometheus: 5 minutes).
    pub lookback_ms: i64,
    /// Most series all selectors of a query may read together.
    pub max_series: usize,
    /// Most samples held at once (one series' of a selector, one group's of the index
    /// adapter: series stream, so the samples read over a long range may be many
    /// more), and most points a result may hold.
    pub max_points: usize,
    /// Longest evaluation time.
    pub timeout: Duration,
    /// Threads a query evaluates its series on (default: every core); the answer is the
    /// same whatever the number.
    pub threads: usize,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            lookback_ms: 300_000,
            max_series: 100_000,
            max_points: 50_000_000,
            timeout: Duration::from_secs(120),
            threads: crate::par::default_threads(),
        }
    }
}

/// Parses a query, once its text is within the limits of [`crate::limits`] (which
/// bound the depth of the tree, so parsing, evaluating and dropping it cannot overflow
/// a 2 MiB stack).
///
/// # Errors
/// [`Error::BadData`] naming the limit passed, or with the parser's message.
pub fn parse(query: &str) -> Result<Expr> {
    crate::limits::check(query)?;
    // promql-parser is a dependency: should another input make it panic as numeric
    // durations did (limits.rs), the query fails instead of the thread.
    std::panic::catch_unwind(|| promql_parser::parser::parse(query))
        .map_err(|_| Error::BadData("parse error: the PromQL parser failed on this query".into()))?
        .map_err(|e| Error::BadData(format!("parse error: {e}")))
}

/// Evaluates `query` at `t_ms` (an instant query).
///
/// # Errors
/// [`Error::BadData`] for a bad query, [`Error::Unsupported`] naming a feature this
/// engine lacks, [`Error::Execution`], a limit or the timeout.
pub fn instant_query(
    storage: &dyn Storage,
    query: &str,
    t_ms: i64,
    opts: &QueryOptions,
) -> Result<QueryValue> {
    let expr = parse(query)?;
    let mut ctx = Ctx::new(storage, t_ms, t_ms, 1, opts);
    let val = ctx.eval(&expr)?;
    ctx.into_instant(val, &expr)
}

/// Evaluates `query` at every `step_ms` from `start_ms` to `end_ms` (a range query).
///
/// # Errors
/// As [`instant_query`]; also [`Error::BadData`] for `end < start`, a step that is not
/// positive, more than 11,000 steps (Prometheus' limit), or an expression that is not
/// a scalar or an instant vector.
pub fn range_query(
    storage: &dyn Storage,
    query: &str,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    opts: &QueryOptions,
) -> Result<QueryValue> {
    if end_ms < start_ms {
        return Err(Error::BadData(
            "end timestamp must not be before start time".into(),
        ));
    }
    if step_ms <= 0 {
        return Err(Error::BadData(
            "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
        ));
    }
    if end_ms.saturating_sub(start_ms) / step_ms > 11_000 {
        return Err(Error::BadData(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)".into(),
        ));
    }
    let expr = parse(query)?;
    let mut ctx = Ctx::new(storage, start_ms, end_ms, step_ms, opts);
    let val = ctx.eval(&expr)?;
    ctx.into_range(val)
}

/// A value during evaluation: one entry per step.
pub(crate) enum Val {
    /// A scalar per step.
    Scalar(Vec<f64>),
    /// A string.
    Str(String),
    /// Series with a value at some steps.
    Vector(Vec<Row>),
    /// A range selector's raw samples (only as the result of an instant query).
    Matrix(Vec<RangeSeries>),
}

/// Samples (a series', or a window of it) as timestamp and value slices of one
/// length, sorted by time: what the readers hand over, evaluated without pairing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slices<'a> {
    /// Timestamps, milliseconds.
    pub(crate) ts: &'a [i64],
    /// One value per timestamp.
    pub(crate) vs: &'a [f64],
}

impl<'a> Slices<'a> {
    /// The samples `ts[i]`, `vs[i]` (cut to the shorter of the two).
    pub(crate) fn new(ts: &'a [i64], vs: &'a [f64]) -> Slices<'a> {
        let n = ts.len().min(vs.len());
        Slices {
            ts: ts.get(..n).unwrap_or(&[]),
            vs: vs.get(..n).unwrap_or(&[]),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ts.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    pub(crate) fn get(&self, i: usize) -> Option<(i64, f64)> {
        Some((*self.ts.get(i)?, *self.vs.get(i)?))
    }

    pub(crate) fn first(&self) -> Option<(i64, f64)> {
        self.get(0)
    }

    pub(crate) fn last(&self) -> Option<(i64, f64)> {
        self.get(self.len().checked_sub(1)?)
    }

    /// Samples `a..b` (clamped).
    pub(crate) fn window(&self, a: usize, b: usize) -> Slices<'a> {
        let b = b.min(self.len());
        let a = a.min(b);
        Slices {
            ts: self.ts.get(a..b).unwrap_or(&[]),
            vs: self.vs.get(a..b).unwrap_or(&[]),
        }
    }

    /// The samples as pairs.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (i64, f64)> + 'a {
        self.ts.iter().copied().zip(self.vs.iter().copied())
    }

    /// The values.
    pub(crate) fn values(&self) -> std::iter::Copied<std::slice::Iter<'a, f64>> {
        self.vs.iter().copied()
    }

    /// The samples without staleness markers, if there is one to remove.
    pub(crate) fn without_stale(&self) -> Option<(Vec<i64>, Vec<f64>)> {
        if !self.vs.iter().any(|&v| is_stale_nan(v)) {
            return None;
        }
        Some(self.iter().filter(|p| !is_stale_nan(p.1)).unzip())
    }
}

/// One step's window for the window aggregates: its samples, or its aggregates.
pub(crate) enum WindowInput<'a> {
    /// The samples, staleness markers removed.
    Samples(Slices<'a>),
    /// The aggregates, computed by the storage.
    Agg(&'a WindowAgg),
}

/// A series of an instant vector across the steps.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) labels: Labels,
    /// Drop `__name__` when the result is returned (Prometheus' delayed name removal).
    pub(crate) drop_name: bool,
    pub(crate) vals: Vec<Option<f64>>,
}

pub(crate) struct Ctx<'a> {
    storage: &'a dyn Storage,
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// The query's start and end, what `@ start()` and `@ end()` mean (also inside a
    /// subquery, whose steps are its own).
    query_start: i64,
    query_end: i64,
    pub(crate) step: i64,
    pub(crate) n: usize,
    opts: QueryOptions,
    deadline: Instant,
    series_read: usize,
    points_read: usize,
}

fn duration_ms(d: &Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn offset_ms(o: &Option<Offset>) -> i64 {
    match o {
        None => 0,
        Some(Offset::Pos(d)) => duration_ms(d),
        Some(Offset::Neg(d)) => -duration_ms(d),
    }
}

fn system_time_ms(t: &SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => duration_ms(&d),
        Err(e) => -duration_ms(&e.duration()),
    }
}

/// Whether a label goes with the metric name: `__name__`, and the `__type__` and
/// `__unit__` metadata labels that Prometheus drops together with it.
pub(crate) fn is_schema_label(name: &str) -> bool {
    matches!(name, METRIC_NAME | "__type__" | "__unit__")
}

/// Labels without `__name__` (and its `__type__`/`__unit__` companions).
pub(crate) fn without_name(labels: &[(String, String)]) -> Labels {
    labels
        .iter()
        .filter(|(n, _)| !is_schema_label(n))
        .cloned()
        .collect()
}

fn label_value<'l>(labels: &'l [(String, String)], name: &str) -> Option<&'l str> {
    labels
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Sets (or, for an empty value, removes) a label, keeping the set sorted.
pub(crate) fn set_label(labels: &mut Labels, name: &str, value: &str) {
    match labels.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
        Ok(i) => {
            if value.is_empty() {
                labels.remove(i);
            } else if let Some(l) = labels.get_mut(i) {
                l.1 = value.to_owned();
            }
        }
        Err(i) => {
            if !value.is_empty() {
                labels.insert(i, (name.to_owned(), value.to_owned()));
            }
        }
    }
}

/// The `{a="b", ...}` text of a label set, for messages.
pub(crate) fn labels_text(labels: &[(String, String)]) -> String {
    let inner: Vec<String> = labels.iter().map(|(n, v)| format!("{n}={v:?}")).collect();
    format!("{{{}}}", inner.join(", "))
}

fn unwrap_parens(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unwrap_parens(&p.expr),
        other => other,
    }
}

impl<'a> Ctx<'a> {
    fn new(
        storage: &'a dyn Storage,
        start: i64,
        end: i64,
        step: i64,
        opts: &QueryOptions,
    ) -> Ctx<'a> {
        let n = usize::try_from(end.saturating_sub(start) / step.max(1) + 1).unwrap_or(1);
        Ctx {
            storage,
            start,
            end,
            query_start: start,
            query_end: end,
            step: step.max(1),
            n,
            opts: *opts,
            deadline: Instant::now() + opts.timeout,
            series_read: 0,
            points_read: 0,
        }
    }

    pub(crate) fn ts(&self, i: usize) -> i64 {
        self.start + i as i64 * self.step
    }

    pub(crate) fn check_deadline(&self) -> Result<()> {
        if Instant::now() > self.deadline {
            return Err(Error::Timeout {
                millis: self.opts.timeout.as_millis(),
            });
        }
        Ok(())
    }

    /// The evaluation time of step `i` for a selector with these modifiers.
    fn selector_time(&self, at: &Option<AtModifier>, offset: &Option<Offset>, i: usize) -> i64 {
        let t = match at {
            None => self.ts(i),
            Some(AtModifier::Start) => self.query_start,
            Some(AtModifier::End) => self.query_end,
            Some(AtModifier::At(t)) => system_time_ms(t),
        };
        t.saturating_sub(offset_ms(offset))
    }

    fn matchers(vs: &VectorSelector) -> Result<Vec<Matcher>> {
        if !vs.matchers.or_matchers.is_empty() {
            return Err(Error::Unsupported("`or` inside a label matcher set".into()));
        }
        let mut m = vs.matchers.matchers.clone();
        if let Some(name) = &vs.name {
            m.push(Matcher::new(MatchOp::Equal, METRIC_NAME, name));
        }
        Ok(m)
    }

    /// Streams the series of a selector within `lo..=hi` to `f`, one at a time as the
    /// storage reads them, counting them against the limits (series, points, timeout).
    fn select_each(
        &mut self,
        vs: &VectorSelector,
        lo: i64,
        hi: i64,
        mut f: impl FnMut(crate::Series) -> Result<()>,
    ) -> Result<()> {
        let matchers = Self::matchers(vs)?;
        let (max_series, max_points) = (self.opts.max_series, self.opts.max_points);
        let deadline = self.deadline;
        let timeout = self.opts.timeout;
        let mut series_read = self.series_read;
        let mut points_read = self.points_read;
        self.storage.select(&matchers, lo, hi, &mut |s| {
            series_read += 1;
            points_read += s.samples.len();
            if series_read > max_series {
                return Err(Error::TooManySeries { limit: max_series });
            }
            // Series stream: the limit is on samples held at once (as Prometheus'
            // `query.max-samples`), not on samples read over the whole range.
            if s.samples.len() > max_points {
                return Err(Error::TooManyPoints { limit: max_points });
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    millis: timeout.as_millis(),
                });
            }
            f(s)
        })?;
        self.series_read = series_read;
        self.points_read = points_read;
        Ok(())
    }

    /// As [`select_each`](Self::select_each), a batch of series at a time (as the
    /// storage reads them), each series counted against the limits and then prepared
    /// by `prepare` on the thread that read it (see [`Storage::select_batches`]).
    fn select_batches_each(
        &mut self,
        vs: &VectorSelector,
        lo: i64,
        hi: i64,
        prepare: crate::storage::Prepare<'_>,
        mut f: impl FnMut(Vec<crate::Series>) -> Result<()>,
    ) -> Result<()> {
        let matchers = Self::matchers(vs)?;
        let (max_series, max_points) = (self.opts.max_series, self.opts.max_points);
        let deadline = self.deadline;
        let timeout = self.opts.timeout;
        let mut series_read = self.series_read;
        let points_read = std::sync::atomic::AtomicUsize::new(self.points_read);
        let counted = |labels: &Labels, ts: &[i64], vs: &[f64]| -> Result<Vec<(i64, f64)>> {
            // Series stream: the limit is on samples held at once (as Prometheus'
            // `query.max-samples`), not on samples read over the whole range.
            if ts.len() > max_points {
                return Err(Error::TooManyPoints { limit: max_points });
            }
            points_read.fetch_add(ts.len(), std::sync::atomic::Ordering::Relaxed);
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    millis: timeout.as_millis(),
                });
            }
            prepare(labels, ts, vs)
        };
        self.storage
            .select_batches(&matchers, lo, hi, Some(&counted), &mut |batch| {
                series_read += batch.len();
                if series_read > max_series {
                    return Err(Error::TooManySeries { limit: max_series });
                }
                f(batch)
            })?;
        self.series_read = series_read;
        self.points_read = points_read.into_inner();
        Ok(())
    }

    pub(crate) fn eval(&mut self, expr: &Expr) -> Result<Val> {
        self.check_deadline()?;
        match expr {
            Expr::NumberLiteral(n) => Ok(Val::Scalar(vec![n.val; self.n])),
            Expr::StringLiteral(s) => Ok(Val::Str(s.val.clone())),
            Expr::Paren(p) => self.eval(&p.expr),
            Expr::Unary(u) => match self.eval(&u.expr)? {
                Val::Scalar(v) => Ok(Val::Scalar(v.into_iter().map(|x| -x).collect())),
                Val::Vector(rows) => Ok(Val::Vector(
                    rows.into_iter()
                        .map(|mut r| {
                            r.vals.iter_mut().flatten().for_each(|x| *x = -*x);
                            r.drop_name = true;
                            r
                        })
                        .collect(),
                )),
                _ => Err(Error::BadData(
                    "unary expression only allowed on expressions of type scalar or instant vector"
                        .into(),
                )),
            },
            Expr::VectorSelector(vs) => Ok(Val::Vector(self.eval_vector_selector(vs, false)?)),
            Expr::MatrixSelector(ms) => self.eval_matrix_literal(ms),
            Expr::Subquery(sq) => self.eval_subquery_literal(sq),
            Expr::Extension(_) => Err(Error::Unsupported("extension expressions".into())),
            Expr::Aggregate(a) => self.eval_aggregate(a),
            Expr::Binary(b) => self.eval_binary(b),
            Expr::Call(c) => self.eval_call(c),
        }
    }

    /// An instant selector: per step, the newest sample within the lookback window,
    /// unless it is a staleness marker. With `sample_ts` the value is the sample's
    /// timestamp in seconds (for `timestamp()`).
    pub(crate) fn eval_vector_selector(
        &mut self,
        vs: &VectorSelector,
        sample_ts: bool,
    ) -> Result<Vec<Row>> {
        let mut rows = Vec::new();
        self.vector_selector_each(vs, sample_ts, &mut |r| {
            rows.push(r);
            Ok(())
        })?;
        Ok(rows)
    }

    /// [`eval_vector_selector`](Self::eval_vector_selector), each series' row handed to
    /// `sink` as soon as the series is read.
    fn vector_selector_each(
        &mut self,
        vs: &VectorSelector,
        sample_ts: bool,
        sink: &mut dyn FnMut(Row) -> Result<()>,
    ) -> Result<()> {
        let times = self.selector_times(vs);
        let lookback = self.opts.lookback_ms;
        let lo = times
            .iter()
            .copied()
            .min()
            .unwrap_or(self.start)
            .saturating_sub(lookback - 1);
        let hi = times.iter().copied().max().unwrap_or(self.end);
        self.map_series(
            vs,
            lo,
            hi,
            sample_ts,
            |_, samples| {
                let mut any = false;
                let vals: Vec<Option<f64>> = window_ranges(samples.ts, &times, lookback)
                    .into_iter()
                    .map(|(a, b)| {
                        // The newest sample at or before t, if newer than t - lookback.
                        let (ts, v) = samples.get(b.checked_sub(1)?).filter(|_| b > a)?;
                        if is_stale_nan(v) {
                            return None;
                        }
                        any = true;
                        Some(if sample_ts { ts as f64 / 1000.0 } else { v })
                    })
                    .collect();
                any.then_some(vals)
            },
            sink,
        )
    }

    /// A range selector as a query result (instant queries only).
    fn eval_matrix_literal(&mut self, ms: &MatrixSelector) -> Result<Val> {
        if self.n != 1 {
            return Err(Error::BadData(
                "invalid expression type \"range vector\" for range query, must be Scalar or instant Vector".into(),
            ));
        }
        let mut out = Vec::new();
        self.for_each_window(ms, |labels, windows| {
            if let Some(w) = windows.first()
                && !w.is_empty()
            {
                out.push(RangeSeries {
                    labels: labels.clone(),
                    points: w.to_vec(),
                });
            }
            Ok(())
        })?;
        Ok(Val::Matrix(out))
    }

    /// A subquery as a query result (instant queries only): each series' samples at the
    /// subquery's steps in `(t - range, t]`.
    fn eval_subquery_literal(&mut self, sq: &SubqueryExpr) -> Result<Val> {
        if self.n != 1 {
            return Err(Error::BadData(
                "invalid expression type \"range vector\" for range query, must be Scalar or instant Vector".into(),
            ));
        }
        let sub = self.eval_subquery(sq)?;
        let mut out = Vec::new();
        for s in &sub.series {
            let windows = window_ranges(&s.ts, &sub.ends, sub.range);
            if let Some(&(a, b)) = windows.first()
                && a < b
            {
                out.push(RangeSeries {
                    labels: if s.drop_name {
                        without_name(&s.labels)
                    } else {
                        s.labels.clone()
                    },
                    points: s
                        .ts
                        .iter()
                        .copied()
                        .zip(s.vs.iter().copied())
                        .take(b)
                        .skip(a)
                        .collect(),
                });
            }
        }
        Ok(Val::Matrix(out))
    }

    /// Evaluates a subquery `expr[range:step]` as Prometheus does: `expr` as a range
    /// query whose steps are the multiples of `step` (default 1 minute, Prometheus'
    /// default evaluation interval) after the first selector time minus `range`, up to
    /// the last selector time (`@` and `offset` of the subquery applied). The windows
    /// `(t - range, t]` at the selector times `ends` are the caller's.
    pub(crate) fn eval_subquery(&mut self, sq: &SubqueryExpr) -> Result<Subquery> {
        let range = duration_ms(&sq.range);
        let step = sq
            .step
            .as_ref()
            .map_or(DEFAULT_SUBQUERY_STEP_MS, duration_ms)
            .max(1);
        let ends: Vec<i64> = (0..self.n)
            .map(|i| self.selector_time(&sq.at, &sq.offset, i))
            .collect();
        let lo = ends.iter().copied().min().unwrap_or(self.start);
        let hi = ends.iter().copied().max().unwrap_or(self.end);
        // The first multiple of the step after `lo - range` (Go's truncating division).
        let from = lo.saturating_sub(range);
        let mut start = from / step * step;
        if start <= from {
            start = start.saturating_add(step);
        }
        let mut sub = Subquery {
            series: Vec::new(),
            ends,
            range,
        };
        if start > hi {
            return Ok(sub);
        }
        let n = (hi.saturating_sub(start) / step).saturating_add(1);
        if usize::try_from(n).map_or(true, |n| n > self.opts.max_points) {
            return Err(Error::TooManyPoints {
                limit: self.opts.max_points,
            });
        }
        let mut inner = Ctx::new(self.storage, start, hi, step, &self.opts);
        inner.query_start = self.query_start;
        inner.query_end = self.query_end;
        inner.deadline = self.deadline;
        inner.series_read = self.series_read;
        inner.points_read = self.points_read;
        let val = inner.eval(&sq.expr);
        self.series_read = inner.series_read;
        self.points_read = inner.points_read;
        let rows = match val? {
            Val::Vector(rows) => rows,
            _ => {
                return Err(Error::BadData(
                    "subquery is only allowed on instant vector".into(),
                ));
            }
        };
        let mut held = 0usize;
        for r in rows {
            let (ts, vs): (Vec<i64>, Vec<f64>) = r
                .vals
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.map(|v| (inner.ts(i), v)))
                .unzip();
            held = held.saturating_add(ts.len());
            if held > self.opts.max_points {
                return Err(Error::TooManyPoints {
                    limit: self.opts.max_points,
                });
            }
            if !ts.is_empty() {
                sub.series.push(SubquerySeries {
                    labels: r.labels,
                    drop_name: r.drop_name,
                    ts,
                    vs,
                });
            }
        }
        Ok(sub)
    }

    /// The selector time of `vs` (its `@` and `offset` applied) at every step.
    fn selector_times(&self, vs: &VectorSelector) -> Vec<i64> {
        (0..self.n)
            .map(|i| self.selector_time(&vs.at, &vs.offset, i))
            .collect()
    }

    /// The first and last millisecond the windows of a range selector cover, its
    /// selector times and its range.
    fn window_span(&self, ms: &MatrixSelector) -> (i64, i64, Vec<i64>, i64) {
        let range = duration_ms(&ms.range);
        let times = self.selector_times(&ms.vs);
        let lo = times
            .iter()
            .copied()
            .min()
            .unwrap_or(self.start)
            .saturating_sub(range.saturating_sub(1));
        let hi = times.iter().copied().max().unwrap_or(self.end);
        (lo, hi, times, range)
    }

    /// Reads a range selector's series and calls `f` with each series' labels and its
    /// window of samples (staleness markers removed) at every step: the samples in
    /// `(t - range, t]` for the step's selector time `t`.
    pub(crate) fn for_each_window(
        &mut self,
        ms: &MatrixSelector,
        mut f: impl FnMut(&Labels, &[&[(i64, f64)]]) -> Result<()>,
    ) -> Result<()> {
        let (lo, hi, times, range) = self.window_span(ms);
        self.select_each(&ms.vs, lo, hi, |mut s| {
            s.samples.retain(|p| !is_stale_nan(p.1));
            let ts: Vec<i64> = s.samples.iter().map(|p| p.0).collect();
            let windows: Vec<&[(i64, f64)]> = window_ranges(&ts, &times, range)
                .into_iter()
                .map(|(a, b)| s.samples.get(a..b).unwrap_or(&[]))
                .collect();
            f(&s.labels, &windows)
        })
    }

    /// Reads a selector's series in `lo..=hi` and maps each one to its value at every
    /// step on the thread that read it, while its samples are in the cache (see
    /// [`Storage::select_batches`]): `map` gets the series' labels and samples and
    /// returns one value per step, `None` for a series with no value at any. The rows
    /// go to `sink` in the storage's series order, so the answer does not depend on the
    /// number of threads.
    fn map_series(
        &mut self,
        vs: &VectorSelector,
        lo: i64,
        hi: i64,
        drop_name: bool,
        map: impl Fn(&Labels, Slices<'_>) -> Option<Vec<Option<f64>>> + Sync,
        sink: &mut dyn FnMut(Row) -> Result<()>,
    ) -> Result<()> {
        let n = self.n;
        let prepare = |labels: &Labels, ts: &[i64], vs: &[f64]| -> Result<Vec<(i64, f64)>> {
            Ok(steps_to_samples(map(labels, Slices::new(ts, vs))))
        };
        self.select_batches_each(vs, lo, hi, &prepare, |batch| {
            for s in batch {
                if let Some(row) = samples_to_row(s, n, drop_name) {
                    sink(row)?;
                }
            }
            Ok(())
        })
    }

    /// [`map_series`](Self::map_series) for a range selector: `map` gets the series'
    /// labels, its samples (staleness markers removed) and, per step, the index range
    /// of its window `(t - range, t]` for the step's selector time `t` (found by two
    /// pointers moving forward, O(samples + steps)).
    pub(crate) fn map_windows(
        &mut self,
        ms: &MatrixSelector,
        drop_name: bool,
        map: impl Fn(&Labels, Slices<'_>, &[(usize, usize)]) -> Option<Vec<Option<f64>>> + Sync,
        sink: &mut dyn FnMut(Row) -> Result<()>,
    ) -> Result<()> {
        let (lo, hi, times, range) = self.window_span(ms);
        self.map_series(
            &ms.vs,
            lo,
            hi,
            drop_name,
            |labels, samples| {
                let kept = samples.without_stale();
                let samples = kept.as_ref().map_or(samples, |(t, v)| Slices::new(t, v));
                map(labels, samples, &window_ranges(samples.ts, &times, range))
            },
            sink,
        )
    }

    /// As [`map_windows`](Self::map_windows) for the window aggregates
    /// (`count/sum/avg/min/max_over_time`): the storage answers through
    /// [`Storage::select_windows`], each window either aggregated (`Agg`, from a
    /// store's pre-aggregated buckets) or as its samples (staleness markers removed
    /// here), and `map` gets one [`WindowInput`] per step and returns one value per
    /// step. Series read raw are mapped on the thread that read them.
    pub(crate) fn map_window_aggs(
        &mut self,
        ms: &MatrixSelector,
        need: (bool, bool, bool),
        drop_name: bool,
        map: impl Fn(&[WindowInput<'_>]) -> Option<Vec<Option<f64>>> + Sync,
        sink: &mut dyn FnMut(Row) -> Result<()>,
    ) -> Result<()> {
        let vs = &ms.vs;
        let range = duration_ms(&ms.range);
        let times = self.selector_times(vs);
        let matchers = Self::matchers(vs)?;
        let (max_series, max_points) = (self.opts.max_series, self.opts.max_points);
        let deadline = self.deadline;
        let timeout = self.opts.timeout;
        let n = self.n;
        let mut series_read = self.series_read;
        let points_read = std::sync::atomic::AtomicUsize::new(self.points_read);
        let req = crate::storage::WindowRequest {
            ends: &times,
            range_ms: range,
            sum: need.0,
            min: need.1,
            max: need.2,
        };
        let check = |held: usize| -> Result<()> {
            if held > max_points {
                return Err(Error::TooManyPoints { limit: max_points });
            }
            points_read.fetch_add(held, std::sync::atomic::Ordering::Relaxed);
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    millis: timeout.as_millis(),
                });
            }
            Ok(())
        };
        let to_row = |labels: Labels, vals: Option<Vec<Option<f64>>>| {
            vals.filter(|v| v.iter().any(Option::is_some))
                .map(|vals| Row {
                    labels,
                    drop_name,
                    vals,
                })
        };
        // Raw series: mapped where they are read; the answer replaces the samples.
        let prepare = |_: &Labels, ts: &[i64], vs: &[f64]| -> Result<Vec<(i64, f64)>> {
            check(ts.len())?;
            let samples = Slices::new(ts, vs);
            let kept = samples.without_stale();
            let samples = kept.as_ref().map_or(samples, |(t, v)| Slices::new(t, v));
            let inputs: Vec<WindowInput<'_>> = window_ranges(samples.ts, &times, range)
                .into_iter()
                .map(|(a, b)| WindowInput::Samples(samples.window(a, b)))
                .collect();
            Ok(steps_to_samples(map(&inputs)))
        };
        self.storage
            .select_windows(&matchers, &req, Some(&prepare), &mut |ws| {
                series_read += 1;
                if series_read > max_series {
                    return Err(Error::TooManySeries { limit: max_series });
                }
                let row = match ws {
                    WindowSeries::Samples(s) => samples_to_row(s, n, drop_name),
                    WindowSeries::Windows {
                        labels,
                        mut windows,
                    } => {
                        let held: usize = windows
                            .iter()
                            .map(|w| match w {
                                Window::Samples(v) => v.len(),
                                _ => 1,
                            })
                            .sum();
                        check(held)?;
                        // A window's raw samples as slices, staleness markers removed.
                        let raw: Vec<(Vec<i64>, Vec<f64>)> = windows
                            .iter_mut()
                            .map(|w| match w {
                                Window::Samples(v) => {
                                    v.retain(|p| !is_stale_nan(p.1));
                                    v.iter().copied().unzip()
                                }
                                _ => (Vec::new(), Vec::new()),
                            })
                            .collect();
                        let inputs: Vec<WindowInput<'_>> = windows
                            .iter()
                            .zip(&raw)
                            .map(|(w, (t, v))| match w {
                                Window::Agg(a) => WindowInput::Agg(a),
                                _ => WindowInput::Samples(Slices::new(t, v)),
                            })
                            .collect();
                        let vals = map(&inputs);
                        to_row(labels, vals)
                    }
                };
                match row {
                    Some(r) => sink(r),
                    None => Ok(()),
                }
            })?;
        self.series_read = series_read;
        self.points_read = points_read.into_inner();
        Ok(())
    }

    /// The selector time at each step of a range selector (for extrapolation).
    pub(crate) fn window_ends(&self, ms: &MatrixSelector) -> Vec<i64> {
        (0..self.n)
            .map(|i| self.selector_time(&ms.vs.at, &ms.vs.offset, i))
            .collect()
    }

    pub(crate) fn eval_scalar_arg(&mut self, e: &Expr, what: &str) -> Result<Vec<f64>> {
        match self.eval(e)? {
            Val::Scalar(v) => Ok(v),
            _ => Err(Error::BadData(format!("expected a scalar for {what}"))),
        }
    }

    pub(crate) fn eval_vector_arg(&mut self, e: &Expr, what: &str) -> Result<Vec<Row>> {
        match self.eval(e)? {
            Val::Vector(v) => Ok(v),
            _ => Err(Error::BadData(format!(
                "expected an instant vector for {what}"
            ))),
        }
    }

    pub(crate) fn eval_string_arg(&mut self, e: &Expr, what: &str) -> Result<String> {
        match self.eval(e)? {
            Val::Str(s) => Ok(s),
            _ => Err(Error::BadData(format!("expected a string for {what}"))),
        }
    }

    fn eval_call(&mut self, c: &Call) -> Result<Val> {
        if c.func.name == "timestamp"
            && let Some(arg) = c.args.args.first()
            && let Expr::VectorSelector(vs) = unwrap_parens(arg)
        {
            return Ok(Val::Vector(self.eval_vector_selector(vs, true)?));
        }
        functions::call(self, c)
    }

    /// Evaluates a per-series expression (an instant selector or a range function of a
    /// range selector), handing each result row to `sink` as soon as its series is
    /// read; `None` (nothing evaluated) when `e` is not one.
    fn eval_each(
        &mut self,
        e: &Expr,
        sink: &mut dyn FnMut(Row) -> Result<()>,
    ) -> Result<Option<()>> {
        match e {
            Expr::Paren(p) => self.eval_each(&p.expr, sink),
            Expr::VectorSelector(vs) => self.vector_selector_each(vs, false, sink).map(Some),
            Expr::Call(c) => functions::range_call_each(self, c, sink),
            _ => Ok(None),
        }
    }

    /// `sum`, `min`, `max`, `count` and `group` folded as the argument's series stream
    /// in (one series' samples and one accumulator per group and step in memory, never
    /// the whole argument vector), with the same arithmetic as
    /// [`aggregate_simple`](Self::aggregate_simple) in the same order; `None` when the
    /// argument does not stream.
    fn aggregate_streaming(
        &mut self,
        op: &str,
        arg: &Expr,
        grouping: &dyn Fn(&Labels) -> Labels,
    ) -> Result<Option<Vec<Row>>> {
        let n = self.n;
        let mut index: HashMap<Labels, usize> = HashMap::new();
        let mut groups: Vec<(Labels, bool, Vec<Acc>)> = Vec::new();
        let handled = self.eval_each(arg, &mut |row| {
            let key = grouping(&row.labels);
            let g = match index.get(&key) {
                Some(&g) => g,
                None => {
                    index.insert(key.clone(), groups.len());
                    groups.push((key, false, vec![Acc::default(); n]));
                    groups.len() - 1
                }
            };
            if let Some((_, drop_name, accs)) = groups.get_mut(g) {
                *drop_name |= row.drop_name;
                for (acc, v) in accs.iter_mut().zip(&row.vals) {
                    if let Some(x) = *v {
                        acc.add(op, x);
                    }
                }
            }
            Ok(())
        })?;
        if handled.is_none() {
            return Ok(None);
        }
        let mut out = Vec::new();
        for (labels, drop_name, accs) in groups {
            let vals: Vec<Option<f64>> = accs.iter().map(|a| a.value(op)).collect();
            if vals.iter().any(Option::is_some) {
                out.push(Row {
                    labels,
                    drop_name,
                    vals,
                });
            }
        }
        Ok(Some(out))
    }

    // ---- aggregations ----

    fn eval_aggregate(&mut self, a: &AggregateExpr) -> Result<Val> {
        let op = a.op.to_string();
        let param = match &a.param {
            Some(p) => Some(self.eval(p)?),
            None => None,
        };
        let grouping = |labels: &Labels| -> Labels {
            match &a.modifier {
                None => Vec::new(),
                Some(LabelModifier::Include(ls)) => labels
                    .iter()
                    .filter(|(n, _)| ls.labels.iter().any(|l| l == n))
                    .cloned()
                    .collect(),
                Some(LabelModifier::Exclude(ls)) => labels
                    .iter()
                    .filter(|(n, _)| n != METRIC_NAME && !ls.labels.iter().any(|l| l == n))
                    .cloned()
                    .collect(),
            }
        };
        if matches!(op.as_str(), "sum" | "min" | "max" | "count" | "group")
            && let Some(rows) = self.aggregate_streaming(&op, &a.expr, &grouping)?
        {
            return Ok(Val::Vector(rows));
        }
        if matches!(op.as_str(), "topk" | "bottomk")
            && let Some(Val::Scalar(k)) = &param
            && let Some(rows) = self.topk_streaming(op == "topk", k, &a.expr, &grouping)?
        {
            return Ok(Val::Vector(rows));
        }
        let rows = self.eval_vector_arg(&a.expr, &format!("the argument of {op}"))?;
        match op.as_str() {
            "sum" | "avg" | "min" | "max" | "count" | "group" | "stddev" | "stdvar" => {
                Ok(Val::Vector(self.aggregate_simple(&op, &rows, &grouping)?))
            }
            "quantile" => {
                let q = match param {
                    Some(Val::Scalar(q)) => q,
                    _ => return Err(Error::BadData("quantile needs a scalar parameter".into())),
                };
                Ok(Val::Vector(self.aggregate_quantile(&q, &rows, &grouping)))
            }
            "topk" | "bottomk" => {
                let k = match param {
                    Some(Val::Scalar(k)) => k,
                    _ => return Err(Error::BadData(format!("{op} needs a scalar parameter"))),
                };
                Ok(Val::Vector(Self::aggregate_topk(
                    self.n,
                    op == "topk",
                    &k,
                    rows,
                    &grouping,
                )?))
            }
            "count_values" => {
                let label = match param {
                    Some(Val::Str(s)) => s,
                    _ => {
                        return Err(Error::BadData(
                            "count_values needs a string parameter".into(),
                        ));
                    }
                };
                Ok(Val::Vector(
                    self.aggregate_count_values(&label, &rows, &grouping)?,
                ))
            }
            other => Err(Error::Unsupported(format!("aggregation `{other}`"))),
        }
    }

    /// Groups rows by their grouping labels; returns the groups' labels and members.
    fn group_rows(rows: &[Row], grouping: &dyn Fn(&Labels) -> Labels) -> Vec<(Labels, Vec<usize>)> {
        let mut index: HashMap<Labels, usize> = HashMap::new();
        let mut groups: Vec<(Labels, Vec<usize>)> = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let key = grouping(&r.labels);
            match index.get(&key) {
                Some(&g) => {
                    if let Some(grp) = groups.get_mut(g) {
                        grp.1.push(i);
                    }
                }
                None => {
                    index.insert(key.clone(), groups.len());
                    groups.push((key, vec![i]));
                }
            }
        }
        groups
    }

    fn aggregate_simple(
        &mut self,
        op: &str,
        rows: &[Row],
        grouping: &dyn Fn(&Labels) -> Labels,
    ) -> Result<Vec<Row>> {
        let mut out = Vec::new();
        for (labels, members) in Self::group_rows(rows, grouping) {
            self.check_deadline()?;
            let drop_name = members
                .iter()
                .any(|&m| rows.get(m).is_some_and(|r| r.drop_name));
            let mut vals = vec![None; self.n];
            for (i, slot) in vals.iter_mut().enumerate() {
                let xs = members
                    .iter()
                    .filter_map(|&m| rows.get(m).and_then(|r| r.vals.get(i).copied().flatten()));
                *slot = functions::aggregate_values(op, xs);
            }
            if vals.iter().any(Option::is_some) {
                out.push(Row {
                    labels,
                    drop_name,
                    vals,
                });
            }
        }
        Ok(out)
    }

    fn aggregate_quantile(
        &self,
        q: &[f64],
        rows: &[Row],
        grouping: &dyn Fn(&Labels) -> Labels,
    ) -> Vec<Row> {
        let mut out = Vec::new();
        for (labels, members) in Self::group_rows(rows, grouping) {
            let mut vals = vec![None; self.n];
            for (i, slot) in vals.iter_mut().enumerate() {
                let mut xs: Vec<f64> = members
                    .iter()
                    .filter_map(|&m| rows.get(m).and_then(|r| r.vals.get(i).copied().flatten()))
                    .collect();
                if !xs.is_empty() {
                    *slot = Some(functions::quantile(
                        q.get(i).copied().unwrap_or(f64::NAN),
                        &mut xs,
                    ));
                }
            }
            if vals.iter().any(Option::is_some) {
                out.push(Row {
                    labels,
                    drop_name: false,
                    vals,
                });
            }
        }
        out
    }

    fn aggregate_topk(
        n: usize,
        top: bool,
        k: &[f64],
        rows: Vec<Row>,
        grouping: &dyn Fn(&Labels) -> Labels,
    ) -> Result<Vec<Row>> {
        let groups = Self::group_rows(&rows, grouping);
        let mut keep: Vec<Vec<bool>> = vec![vec![false; n]; rows.len()];
        for i in 0..n {
            let kf = k.get(i).copied().unwrap_or(0.0);
            if kf.is_nan() {
                return Err(Error::Execution("Parameter value is NaN".into()));
            }
            if kf < 1.0 {
                continue;
            }
            let kk = if kf >= rows.len() as f64 {
                rows.len()
            } else {
                kf as usize
            };
            for (_, members) in &groups {
                let mut cand: Vec<(usize, f64)> = members
                    .iter()
                    .filter_map(|&m| {
                        rows.get(m)
                            .and_then(|r| r.vals.get(i).copied().flatten())
                            .map(|v| (m, v))
                    })
                    .collect();
                // NaN sorts last in both directions, as in Prometheus.
                cand.sort_by(|a, b| nan_last(a.1, b.1, top));
                for (m, _) in cand.into_iter().take(kk) {
                    if let Some(slot) = keep.get_mut(m).and_then(|r| r.get_mut(i)) {
                        *slot = true;
                    }
                }
            }
        }
        let mut group_of = vec![0usize; rows.len()];
        for (g, (_, members)) in groups.iter().enumerate() {
            for &m in members {
                if let Some(slot) = group_of.get_mut(m) {
                    *slot = g;
                }
            }
        }
        let mut out = Vec::new();
        for ((mut r, kept), g) in rows.into_iter().zip(keep).zip(group_of) {
            for (v, k) in r.vals.iter_mut().zip(kept) {
                if !k {
                    *v = None;
                }
            }
            if r.vals.iter().any(Option::is_some) {
                out.push((g, r));
            }
        }
        // Instant queries show topk's order: groups in order, by value within each
        // (NaN last).
        if n == 1 {
            out.sort_by(|(ga, a), (gb, b)| {
                let x = a.vals.first().copied().flatten().unwrap_or(f64::NAN);
                let y = b.vals.first().copied().flatten().unwrap_or(f64::NAN);
                ga.cmp(gb).then(nan_last(x, y, top))
            });
        }
        Ok(out.into_iter().map(|(_, r)| r).collect())
    }

    /// `topk`/`bottomk` folded as the argument's series stream in: per group and step
    /// the best `k` so far (ties to the series that came first, NaN last, as the
    /// materialized [`aggregate_topk`](Self::aggregate_topk) sorts), and only the
    /// series that are among them at some step, each with its values at those steps.
    /// Memory is O(groups × steps × k), not series × steps; `None` when the argument
    /// does not stream.
    fn topk_streaming(
        &mut self,
        top: bool,
        k: &[f64],
        arg: &Expr,
        grouping: &dyn Fn(&Labels) -> Labels,
    ) -> Result<Option<Vec<Row>>> {
        if k.iter().any(|x| x.is_nan()) {
            return Err(Error::Execution("Parameter value is NaN".into()));
        }
        let n = self.n;
        let ks: Vec<usize> = (0..n)
            .map(|i| {
                let kf = k.get(i).copied().unwrap_or(0.0);
                if kf < 1.0 { 0 } else { kf as usize }
            })
            .collect();
        let mut index: HashMap<Labels, usize> = HashMap::new();
        // Per group, per step: (series number, value), best first.
        let mut best: Vec<Vec<Vec<(usize, f64)>>> = Vec::new();
        // The series kept so far, by arrival: group, row (values only where kept).
        let mut kept: std::collections::BTreeMap<usize, (usize, Row)> = Default::default();
        let mut seen = 0usize;
        let handled = self.eval_each(arg, &mut |row| {
            let me = seen;
            seen += 1;
            let key = grouping(&row.labels);
            let g = match index.get(&key) {
                Some(&g) => g,
                None => {
                    index.insert(key, best.len());
                    best.push(vec![Vec::new(); n]);
                    best.len() - 1
                }
            };
            let Some(lists) = best.get_mut(g) else {
                return Ok(());
            };
            let mut mine = vec![None; n];
            let mut evicted: Vec<(usize, usize)> = Vec::new();
            for (i, (list, &kk)) in lists.iter_mut().zip(&ks).enumerate() {
                let Some(v) = row.vals.get(i).copied().flatten() else {
                    continue;
                };
                // After every entry that sorts before or equal to it (earlier wins ties).
                let at =
                    list.partition_point(|e| nan_last(e.1, v, top) != std::cmp::Ordering::Greater);
                if at >= kk {
                    continue;
                }
                list.insert(at, (me, v));
                if let Some(slot) = mine.get_mut(i) {
                    *slot = Some(v);
                }
                if list.len() > kk
                    && let Some((out, _)) = list.pop()
                {
                    evicted.push((out, i));
                }
            }
            for (out, i) in evicted {
                if out == me {
                    if let Some(slot) = mine.get_mut(i) {
                        *slot = None;
                    }
                    continue;
                }
                let empty = kept.get_mut(&out).is_some_and(|(_, r)| {
                    if let Some(slot) = r.vals.get_mut(i) {
                        *slot = None;
                    }
                    r.vals.iter().all(Option::is_none)
                });
                if empty {
                    kept.remove(&out);
                }
            }
            if mine.iter().any(Option::is_some) {
                kept.insert(
                    me,
                    (
                        g,
                        Row {
                            labels: row.labels,
                            drop_name: row.drop_name,
                            vals: mine,
                        },
                    ),
                );
            }
            Ok(())
        })?;
        if handled.is_none() {
            return Ok(None);
        }
        let mut out: Vec<(usize, Row)> = kept.into_values().collect();
        // Instant queries show topk's order: groups in order, by value within each
        // (NaN last).
        if n == 1 {
            out.sort_by(|(ga, a), (gb, b)| {
                let x = a.vals.first().copied().flatten().unwrap_or(f64::NAN);
                let y = b.vals.first().copied().flatten().unwrap_or(f64::NAN);
                ga.cmp(gb).then(nan_last(x, y, top))
            });
        }
        Ok(Some(out.into_iter().map(|(_, r)| r).collect()))
    }

    fn aggregate_count_values(
        &self,
        label: &str,
        rows: &[Row],
        grouping: &dyn Fn(&Labels) -> Labels,
    ) -> Result<Vec<Row>> {
        if !is_valid_label_name(label) {
            return Err(Error::BadData(format!("invalid label name {label:?}")));
        }
        let mut index: HashMap<Labels, usize> = HashMap::new();
        let mut out: Vec<Row> = Vec::new();
        for r in rows {
            for i in 0..self.n {
                let Some(v) = r.vals.get(i).copied().flatten() else {
                    continue;
                };
                let mut key = grouping(&r.labels);
                set_label(&mut key, label, &crate::api::format_value(v));
                let idx = *index.entry(key.clone()).or_insert_with(|| {
                    out.push(Row {
                        labels: key,
                        drop_name: false,
                        vals: vec![None; self.n],
                    });
                    out.len() - 1
                });
                if let Some(slot) = out.get_mut(idx).and_then(|o| o.vals.get_mut(i)) {
                    *slot = Some(slot.unwrap_or(0.0) + 1.0);
                }
            }
        }
        Ok(out)
    }

    // ---- binary operators ----

    fn eval_binary(&mut self, b: &BinaryExpr) -> Result<Val> {
        let op = b.op.to_string();
        if let Some(m) = &b.modifier
            && (m.fill_values.lhs.is_some() || m.fill_values.rhs.is_some())
        {
            return Err(Error::Unsupported(
                "fill modifiers of binary operators".into(),
            ));
        }
        let return_bool = b.modifier.as_ref().is_some_and(|m| m.return_bool);
        let lhs = self.eval(&b.lhs)?;
        let rhs = self.eval(&b.rhs)?;
        match (lhs, rhs) {
            (Val::Scalar(l), Val::Scalar(r)) => {
                let vals = l
                    .iter()
                    .zip(&r)
                    .map(|(&x, &y)| {
                        let (v, keep) = elem_binop(&op, x, y)?;
                        Ok(if is_comparison(&op) {
                            if keep { 1.0 } else { 0.0 }
                        } else {
                            v
                        })
                    })
                    .collect::<Result<Vec<f64>>>()?;
                Ok(Val::Scalar(vals))
            }
            (Val::Vector(l), Val::Scalar(r)) => {
                Ok(Val::Vector(vector_scalar(&op, l, &r, false, return_bool)?))
            }
            (Val::Scalar(l), Val::Vector(r)) => {
                Ok(Val::Vector(vector_scalar(&op, r, &l, true, return_bool)?))
            }
            (Val::Vector(l), Val::Vector(r)) => {
                let default = BinModifier::default();
                let m = b.modifier.as_ref().unwrap_or(&default);
                match op.as_str() {
                    "and" | "or" | "unless" => Ok(Val::Vector(self.set_op(&op, l, r, m))),
                    _ => Ok(Val::Vector(self.vector_binop(&op, l, r, m, return_bool)?)),
                }
            }
            _ => Err(Error::BadData(format!(
                "binary operator `{op}` needs scalar or instant vector operands"
            ))),
        }
    }

    fn set_op(&self, op: &str, l: Vec<Row>, r: Vec<Row>, m: &BinModifier) -> Vec<Row> {
        let sig = |labels: &Labels| signature(labels, m.matching.as_ref());
        let lsig: Vec<Labels> = l.iter().map(|x| sig(&x.labels)).collect();
        let rsig: Vec<Labels> = r.iter().map(|x| sig(&x.labels)).collect();
        let presence =
            |rows: &[Row], sigs: &[Labels], i: usize| -> std::collections::HashSet<Labels> {
                rows.iter()
                    .zip(sigs)
                    .filter(|(row, _)| row.vals.get(i).copied().flatten().is_some())
                    .map(|(_, s)| s.clone())
                    .collect()
            };
        let mut lout = l;
        let mut rout = if op == "or" { r.clone() } else { Vec::new() };
        for i in 0..self.n {
            match op {
                "and" | "unless" => {
                    let present = presence(&r, &rsig, i);
                    for (row, s) in lout.iter_mut().zip(&lsig) {
                        let found = present.contains(s);
                        if (op == "and") != found
                            && let Some(v) = row.vals.get_mut(i)
                        {
                            *v = None;
                        }
                    }
                }
                _ => {
                    let present = presence(&lout, &lsig, i);
                    for (row, s) in rout.iter_mut().zip(&rsig) {
                        if present.contains(s)
                            && let Some(v) = row.vals.get_mut(i)
                        {
                            *v = None;
                        }
                    }
                }
            }
        }
        lout.extend(rout);
        lout.retain(|r| r.vals.iter().any(Option::is_some));
        lout
    }

    fn vector_binop(
        &mut self,
        op: &str,
        l: Vec<Row>,
        r: Vec<Row>,
        m: &BinModifier,
        return_bool: bool,
    ) -> Result<Vec<Row>> {
        let (one_to_many, include) = match &m.card {
            VectorMatchCardinality::OneToOne | VectorMatchCardinality::ManyToMany => (false, None),
            VectorMatchCardinality::ManyToOne(ls) => (false, Some(ls.labels.clone())),
            VectorMatchCardinality::OneToMany(ls) => (true, Some(ls.labels.clone())),
        };
        // The "many" side is `lhs` below; for group_right the sides swap and the
        // operands swap back when the operator is applied.
        let (many, one) = if one_to_many { (r, l) } else { (l, r) };
        let msig: Vec<Labels> = many
            .iter()
            .map(|x| signature(&x.labels, m.matching.as_ref()))
            .collect();
        let osig: Vec<Labels> = one
            .iter()
            .map(|x| signature(&x.labels, m.matching.as_ref()))
            .collect();
        let comparison = is_comparison(op);
        let mut out: Vec<Row> = Vec::new();
        let mut out_index: HashMap<Labels, usize> = HashMap::new();
        let mut label_cache: HashMap<(usize, usize), Labels> = HashMap::new();
        for i in 0..self.n {
            self.check_deadline()?;
            let mut one_at: HashMap<&Labels, usize> = HashMap::new();
            for (j, (row, s)) in one.iter().zip(&osig).enumerate() {
                if row.vals.get(i).copied().flatten().is_none() {
                    continue;
                }
                if let Some(&prev) = one_at.get(s) {
                    let side = if one_to_many { "left" } else { "right" };
                    let (mut a, mut b) = (
                        labels_text(&row.labels),
                        one.get(prev)
                            .map(|p| labels_text(&p.labels))
                            .unwrap_or_default(),
                    );
                    if a > b {
                        std::mem::swap(&mut a, &mut b);
                    }
                    return Err(Error::Execution(format!(
                        "found duplicate series for the match group {} on the {side} hand-side of the operation: [{a}, {b}];many-to-many matching not allowed: matching labels must be unique on one side",
                        labels_text(s)
                    )));
                }
                one_at.insert(s, j);
            }
            let mut matched: HashMap<&Labels, ()> = HashMap::new();
            let mut inserted: std::collections::HashSet<Labels> = std::collections::HashSet::new();
            for (li, (row, s)) in many.iter().zip(&msig).enumerate() {
                let Some(lv) = row.vals.get(i).copied().flatten() else {
                    continue;
                };
                let Some(&ri) = one_at.get(s) else {
                    continue;
                };
                let Some(other) = one.get(ri) else { continue };
                let Some(rv) = other.vals.get(i).copied().flatten() else {
                    continue;
                };
                let (x, y) = if one_to_many { (rv, lv) } else { (lv, rv) };
                let (mut v, keep) = elem_binop(op, x, y)?;
                if return_bool {
                    v = if keep { 1.0 } else { 0.0 };
                }
                let labels = label_cache
                    .entry((li, ri))
                    .or_insert_with(|| {
                        result_labels(&row.labels, &other.labels, op, m, include.as_deref())
                    })
                    .clone();
                if include.is_none() {
                    if matched.insert(s, ()).is_some() {
                        return Err(Error::Execution(
                            "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)".into(),
                        ));
                    }
                } else if !inserted.insert(labels.clone()) {
                    return Err(Error::Execution(
                        "multiple matches for labels: grouping labels must ensure unique matches"
                            .into(),
                    ));
                }
                if !keep && !return_bool {
                    continue;
                }
                let idx = *out_index.entry(labels.clone()).or_insert_with(|| {
                    out.push(Row {
                        labels,
                        drop_name: return_bool || (comparison && row.drop_name),
                        vals: vec![None; self.n],
                    });
                    out.len() - 1
                });
                if let Some(slot) = out.get_mut(idx).and_then(|o| o.vals.get_mut(i)) {
                    *slot = Some(v);
                }
            }
        }
        Ok(out)
    }

    // ---- results ----

    fn finish_rows(rows: Vec<Row>) -> Result<Vec<Row>> {
        let mut seen: HashMap<Labels, usize> = HashMap::new();
        let mut out: Vec<Row> = Vec::with_capacity(rows.len());
        for mut r in rows {
            if r.drop_name {
                r.labels.retain(|(n, _)| !is_schema_label(n));
            }
            // Series that collide once names are dropped merge when they never hold a
            // value at the same step (as Prometheus merges them); otherwise it is an error.
            match seen.get(&r.labels) {
                None => {
                    seen.insert(r.labels.clone(), out.len());
                    out.push(r);
                }
                Some(&j) => {
                    let Some(prev) = out.get_mut(j) else { continue };
                    for (a, b) in prev.vals.iter_mut().zip(r.vals) {
                        if b.is_some() {
                            if a.is_some() {
                                return Err(Error::Execution(
                                    "vector cannot contain metrics with the same labelset".into(),
                                ));
                            }
                            *a = b;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    fn into_instant(self, val: Val, _expr: &Expr) -> Result<QueryValue> {
        let t = self.start;
        Ok(match val {
            Val::Scalar(v) => QueryValue::Scalar {
                t_ms: t,
                v: v.first().copied().unwrap_or(f64::NAN),
            },
            Val::Str(s) => QueryValue::String { t_ms: t, s },
            Val::Matrix(m) => QueryValue::Matrix(m),
            Val::Vector(rows) => {
                let rows: Vec<Row> = rows
                    .into_iter()
                    .filter(|r| r.vals.first().copied().flatten().is_some())
                    .collect();
                let rows = Self::finish_rows(rows)?;
                if rows.len() > self.opts.max_points {
                    return Err(Error::TooManyPoints {
                        limit: self.opts.max_points,
                    });
                }
                QueryValue::Vector(
                    rows.into_iter()
                        .filter_map(|r| {
                            r.vals.first().copied().flatten().map(|v| InstantSample {
                                labels: r.labels,
                                t_ms: t,
                                v,
                            })
                        })
                        .collect(),
                )
            }
        })
    }

    fn into_range(self, val: Val) -> Result<QueryValue> {
        let rows = match val {
            Val::Scalar(v) => vec![Row {
                labels: Vec::new(),
                drop_name: false,
                vals: v.into_iter().map(Some).collect(),
            }],
            Val::Vector(rows) => rows,
            Val::Str(_) | Val::Matrix(_) => {
                return Err(Error::BadData(
                    "invalid expression type for range query, must be Scalar or instant Vector"
                        .into(),
                ));
            }
        };
        let rows = Self::finish_rows(rows)?;
        let mut total = 0usize;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let points: Vec<(i64, f64)> = r
                .vals
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.map(|v| (self.ts(i), v)))
                .collect();
            total += points.len();
            if total > self.opts.max_points {
                return Err(Error::TooManyPoints {
                    limit: self.opts.max_points,
                });
            }
            if !points.is_empty() {
                out.push(RangeSeries {
                    labels: r.labels,
                    points,
                });
            }
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(QueryValue::Matrix(out))
    }
}

/// Orders values ascending (or descending), NaN last either way.
/// A series' per-step answer as the samples of a prepared series: `(step, value)`
/// where it has one (see [`Storage::select_batches`]).
fn steps_to_samples(vals: Option<Vec<Option<f64>>>) -> Vec<(i64, f64)> {
    vals.map_or_else(Vec::new, |vals| {
        vals.iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i as i64, v)))
            .collect()
    })
}

/// The row of a prepared series over `n` steps, `None` when it has no value.
fn samples_to_row(s: crate::Series, n: usize, drop_name: bool) -> Option<Row> {
    if s.samples.is_empty() {
        return None;
    }
    let mut vals = vec![None; n];
    for (i, v) in s.samples {
        if let Some(slot) = usize::try_from(i).ok().and_then(|i| vals.get_mut(i)) {
            *slot = Some(v);
        }
    }
    Some(Row {
        labels: s.labels,
        drop_name,
        vals,
    })
}

/// The index range in `s` (sorted by timestamp) of the window `(t - range, t]` of each
/// time `t` in `times`: two pointers that only move forward while the times ascend (the
/// usual case, O(samples + steps)), a binary search for a time that goes back.
pub(crate) fn window_ranges(s: &[i64], times: &[i64], range: i64) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(times.len());
    let (mut a, mut b) = (0usize, 0usize);
    // How far each pointer moved at the last step: for evenly spaced samples and steps
    // the next move is the same, so a guess checked by two comparisons replaces a loop
    // whose exit the branch predictor misses at every step.
    let (mut da, mut db) = (0usize, 0usize);
    let mut prev = i64::MIN;
    for &t in times {
        let lo = t.saturating_sub(range);
        if t < prev {
            a = s.partition_point(|&p| p <= lo);
            b = s.partition_point(|&p| p <= t);
            (da, db) = (0, 0);
        } else {
            let na = advance(s, a, da, lo);
            let nb = advance(s, b.max(na), db, t);
            (da, db) = (na - a, nb - b);
            (a, b) = (na, nb);
        }
        prev = t;
        out.push((a, b.max(a)));
    }
    out
}

/// The first index at or after `from` whose timestamp is past `bound` (timestamps
/// ascending), starting from the guess `from + step`.
fn advance(s: &[i64], from: usize, step: usize, bound: i64) -> usize {
    let mut i = from.saturating_add(step).min(s.len());
    while i > from && s.get(i - 1).is_some_and(|&p| p > bound) {
        i -= 1;
    }
    while s.get(i).is_some_and(|&p| p <= bound) {
        i += 1;
    }
    i
}

pub(crate) fn nan_last(x: f64, y: f64, desc: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ if desc => y.total_cmp(&x),
        _ => x.total_cmp(&y),
    }
}

/// Whether a label name is valid (`[a-zA-Z_][a-zA-Z0-9_]*`).
pub(crate) fn is_valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_comparison(op: &str) -> bool {
    matches!(op, "==" | "!=" | ">" | "<" | ">=" | "<=")
}

/// The matching signature of a label set: the `on` labels, or all but the `ignoring`
/// labels and `__name__`.
fn signature(labels: &Labels, matching: Option<&LabelModifier>) -> Labels {
    match matching {
        Some(LabelModifier::Include(ls)) => labels
            .iter()
            .filter(|(n, _)| ls.labels.iter().any(|l| l == n))
            .cloned()
            .collect(),
        Some(LabelModifier::Exclude(ls)) => labels
            .iter()
            .filter(|(n, _)| n != METRIC_NAME && !ls.labels.iter().any(|l| l == n))
            .cloned()
            .collect(),
        None => without_name(labels),
    }
}

/// The labels of a vector-vector result (Prometheus' `resultMetric`).
fn result_labels(
    many: &Labels,
    one: &Labels,
    op: &str,
    m: &BinModifier,
    include: Option<&[String]>,
) -> Labels {
    let mut labels = if is_comparison(op) {
        many.clone()
    } else {
        without_name(many)
    };
    if include.is_none() {
        match &m.matching {
            Some(LabelModifier::Include(ls)) => {
                labels.retain(|(n, _)| ls.labels.iter().any(|l| l == n));
            }
            Some(LabelModifier::Exclude(ls)) => {
                labels.retain(|(n, _)| !ls.labels.iter().any(|l| l == n));
            }
            None => {}
        }
    }
    for name in include.unwrap_or(&[]) {
        let v = label_value(one, name).unwrap_or("").to_owned();
        set_label(&mut labels, name, &v);
    }
    labels
}

fn vector_scalar(
    op: &str,
    rows: Vec<Row>,
    scalar: &[f64],
    swap: bool,
    return_bool: bool,
) -> Result<Vec<Row>> {
    if matches!(op, "and" | "or" | "unless") {
        return Err(Error::BadData(format!(
            "set operator `{op}` not allowed in binary scalar expression"
        )));
    }
    let comparison = is_comparison(op);
    let mut out = Vec::with_capacity(rows.len());
    for mut r in rows {
        for (slot, &s) in r.vals.iter_mut().zip(scalar) {
            let Some(v) = *slot else { continue };
            let (x, y) = if swap { (s, v) } else { (v, s) };
            let (res, keep) = elem_binop(op, x, y)?;
            *slot = if return_bool {
                Some(if keep { 1.0 } else { 0.0 })
            } else if comparison {
                keep.then_some(v)
            } else {
                Some(res)
            };
        }
        if !comparison || return_bool {
            r.drop_name = true;
        }
        if r.vals.iter().any(Option::is_some) {
            out.push(r);
        }
    }
    Ok(out)
}

/// Applies an arithmetic or comparison operator: the value and, for comparisons,
/// whether it holds.
fn elem_binop(op: &str, x: f64, y: f64) -> Result<(f64, bool)> {
    Ok(match op {
        "+" => (x + y, true),
        "-" => (x - y, true),
        "*" => (x * y, true),
        "/" => (x / y, true),
        "%" => (x % y, true),
        "^" => (x.powf(y), true),
        "atan2" => (x.atan2(y), true),
        "==" => (x, x == y),
        "!=" => (x, x != y),
        ">" => (x, x > y),
        "<" => (x, x < y),
        ">=" => (x, x >= y),
        "<=" => (x, x <= y),
        other => return Err(Error::Unsupported(format!("binary operator `{other}`"))),
    })
}

/// One group's running `sum` (Kahan-compensated, as `functions::kahan_sum`), `min`,
/// `max`, `count` or `group` at one step.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    sum: f64,
    c: f64,
    n: usize,
    m: f64,
}

impl Acc {
    fn add(&mut self, op: &str, x: f64) {
        match op {
            "sum" => {
                let t = self.sum + x;
                if t.is_infinite() {
                    self.c = 0.0;
                } else if self.sum.abs() >= x.abs() {
                    self.c += (self.sum - t) + x;
                } else {
                    self.c += (x - t) + self.sum;
                }
                self.sum = t;
            }
            "min" if self.n == 0 || x < self.m || self.m.is_nan() => self.m = x,
            "max" if self.n == 0 || x > self.m || self.m.is_nan() => self.m = x,
            _ => {}
        }
        self.n += 1;
    }

    fn value(&self, op: &str) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        Some(match op {
            "sum" if self.sum.is_infinite() => self.sum,
            "sum" => self.sum + self.c,
            "min" | "max" => self.m,
            "count" => self.n as f64,
            _ => 1.0,
        })
    }
}

#[cfg(test)]
mod window_tests {
    use super::window_ranges;

    /// The windows by binary search, as the definition reads.
    fn by_search(s: &[(i64, f64)], times: &[i64], range: i64) -> Vec<(usize, usize)> {
        times
            .iter()
            .map(|&t| {
                let a = s.partition_point(|p| p.0 <= t - range);
                let b = s.partition_point(|p| p.0 <= t);
                (a, b.max(a))
            })
            .collect()
    }

    #[test]
    fn pointer_windows_equal_the_binary_search() {
        let mut x = 17u64;
        let mut next = |n: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 33) % n
        };
        for case in 0..300 {
            // Evenly spaced, with holes, bursts and repeats of the spacing.
            let mut ts = next(50) as i64;
            let s: Vec<(i64, f64)> = (0..next(200))
                .map(|_| {
                    ts += match next(6) {
                        0 => next(500) as i64 + 1,
                        _ => 10,
                    };
                    (ts, 0.0)
                })
                .collect();
            let step = next(40) as i64 + 1;
            let mut times: Vec<i64> = (0..next(80)).map(|i| i as i64 * step).collect();
            if case % 5 == 0 && times.len() > 3 {
                times.swap(1, 3); // a time that goes back (`@`, or a shuffled list)
            }
            let range = next(120) as i64 + 1;
            assert_eq!(
                window_ranges(&s.iter().map(|p| p.0).collect::<Vec<_>>(), &times, range),
                by_search(&s, &times, range),
                "case {case}"
            );
        }
    }
}
