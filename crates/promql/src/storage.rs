//! The storage the evaluator reads: series selected by label matchers and a time range,
//! handed over one series at a time with its samples sorted by timestamp.

use crate::error::Result;
pub use promql_parser::label::{MatchOp, Matcher};

/// A label set, sorted by label name, names unique. `__name__` is the metric name.
pub type Labels = Vec<(String, String)>;

/// The bit pattern Prometheus writes as a staleness marker (a NaN that no arithmetic
/// produces): a series with this sample ends there.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Whether `v` is a staleness marker (compared bitwise: other NaNs are ordinary values).
pub fn is_stale_nan(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// One series: labels and samples `(timestamp ms, value)` sorted by timestamp.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The labels, sorted by name.
    pub labels: Labels,
    /// The samples, oldest first, timestamps unique.
    pub samples: Vec<(i64, f64)>,
}

/// Whether `labels` satisfy every matcher (a missing label matches as the empty string,
/// as in Prometheus).
pub fn matches_all(labels: &[(String, String)], matchers: &[Matcher]) -> bool {
    matchers.iter().all(|m| {
        let v = labels
            .iter()
            .find(|(n, _)| *n == m.name)
            .map_or("", |(_, v)| v.as_str());
        m.is_match(v)
    })
}

/// A window-aggregate read: the windows `(t - range_ms, t]` for each `t` of `ends`, and
/// which aggregates the caller uses (a storage answering from pre-aggregated buckets
/// only needs exact `min`/`max`/`sum` where they are used; `count` always).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRequest<'a> {
    /// The window ends (selector times, `offset` and `@` applied), one per step.
    pub ends: &'a [i64],
    /// The range of the selector, milliseconds.
    pub range_ms: i64,
    /// Whether `sum` is used (`sum_over_time`, `avg_over_time`).
    pub sum: bool,
    /// Whether `min` is used.
    pub min: bool,
    /// Whether `max` is used.
    pub max: bool,
}

/// The aggregates of one window's samples, staleness markers excluded, every value
/// finite: what `count/sum/avg/min/max_over_time` need.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowAgg {
    /// Samples in the window (more than zero).
    pub count: u64,
    /// Their sum (meaningful when the request asked for it).
    pub sum: f64,
    /// Their minimum (meaningful when asked for).
    pub min: f64,
    /// Their maximum (meaningful when asked for).
    pub max: f64,
}

/// One window of a [`WindowSeries::Windows`].
#[derive(Debug, Clone, PartialEq)]
pub enum Window {
    /// No sample in the window.
    Empty,
    /// The window's aggregates, equal to those of its raw samples.
    Agg(WindowAgg),
    /// The window's raw samples, sorted (staleness markers may be present; the caller
    /// drops them), where the aggregates could not be computed exactly.
    Samples(Vec<(i64, f64)>),
}

/// One series of a [`Storage::select_windows`] answer.
#[derive(Debug, Clone, PartialEq)]
pub enum WindowSeries {
    /// The series' raw samples over the span of all windows: the caller windows them.
    Samples(Series),
    /// One [`Window`] per window end of the request.
    Windows {
        /// The labels, sorted by name.
        labels: Labels,
        /// One entry per `ends` element.
        windows: Vec<Window>,
    },
}

/// What [`Storage::select_batches`] applies to each series on the thread that read it:
/// given its labels and its samples as timestamp and value slices (sorted by time), the
/// samples the batch holds for it instead.
pub type Prepare<'p> = &'p (dyn Fn(&Labels, &[i64], &[f64]) -> Result<Vec<(i64, f64)>> + Sync);

/// Series per batch of [`Storage::select_batches`]' default.
pub const BATCH_SERIES: usize = 64;

/// What the evaluator reads.
pub trait Storage {
    /// Calls `visit` once per series that satisfies every matcher and has samples in
    /// `start_ms..=end_ms`, with only those samples, sorted by timestamp. A series is
    /// handed over complete before the next one starts; `visit` may stop the scan by
    /// returning an error, which `select` returns.
    ///
    /// # Errors
    /// Storage read errors, or the error `visit` returned.
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(Series) -> Result<()>,
    ) -> Result<()>;

    /// As [`select`](Self::select), with the series handed over in batches, in the same
    /// order: a store that reads several series at once (on several threads) hands
    /// each batch over when it is read. `prepare`, if given, is applied to each series
    /// on the thread that read it, right after reading it (while its samples are in
    /// the cache), and the batch holds the prepared series: an evaluator reduces a
    /// series' samples to its per-step answer there, so what a batch holds is small and
    /// the work runs on every reading thread. A `prepare` error ends the select. The
    /// default batches what `select` gives, [`BATCH_SERIES`] series at a time, preparing
    /// them on the calling thread.
    ///
    /// # Errors
    /// As [`select`](Self::select), and `prepare`'s errors.
    fn select_batches(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        prepare: Option<Prepare<'_>>,
        visit: &mut dyn FnMut(Vec<Series>) -> Result<()>,
    ) -> Result<()> {
        let mut batch = Vec::new();
        self.select(matchers, start_ms, end_ms, &mut |mut s| {
            if let Some(p) = prepare {
                let (ts, vs): (Vec<i64>, Vec<f64>) = s.samples.iter().copied().unzip();
                s.samples = p(&s.labels, &ts, &vs)?;
            }
            batch.push(s);
            if batch.len() >= BATCH_SERIES {
                visit(std::mem::take(&mut batch))?;
            }
            Ok(())
        })?;
        if batch.is_empty() {
            return Ok(());
        }
        visit(batch)
    }

    /// Calls `visit` with the labels of every series that satisfies the matchers and
    /// has samples in `start_ms..=end_ms`. The default goes through
    /// [`select`](Self::select); stores with a series index answer without samples.
    ///
    /// # Errors
    /// As [`select`](Self::select).
    fn series_labels(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(&Labels) -> Result<()>,
    ) -> Result<()> {
        self.select(matchers, start_ms, end_ms, &mut |s| visit(&s.labels))
    }

    /// Calls `visit` once per series that satisfies the matchers and has samples in
    /// the windows of `req`, either with its raw samples over the windows' span (the
    /// default, through [`select`](Self::select)) or with one [`Window`] per window end,
    /// each equal to what the raw samples give (a store with pre-aggregated buckets, such
    /// as a partition's rollups, answers whole buckets from them). `prepare` is applied
    /// to each series handed over as [`WindowSeries::Samples`], as
    /// [`select_batches`](Self::select_batches) applies it.
    ///
    /// # Errors
    /// As [`select`](Self::select).
    fn select_windows(
        &self,
        matchers: &[Matcher],
        req: &WindowRequest<'_>,
        prepare: Option<Prepare<'_>>,
        visit: &mut dyn FnMut(WindowSeries) -> Result<()>,
    ) -> Result<()> {
        let (lo, hi) = window_span(req);
        self.select_batches(matchers, lo, hi, prepare, &mut |batch| {
            batch
                .into_iter()
                .try_for_each(|s| visit(WindowSeries::Samples(s)))
        })
    }
}

/// The first and last millisecond the windows of `req` cover, `(min end - range, max
/// end]` as an inclusive range.
pub fn window_span(req: &WindowRequest<'_>) -> (i64, i64) {
    let lo = req.ends.iter().copied().min().unwrap_or(0);
    let hi = req.ends.iter().copied().max().unwrap_or(0);
    (lo.saturating_sub(req.range_ms.saturating_sub(1)), hi)
}

/// Series held in memory: the conformance harness's and the tests' storage.
#[derive(Debug, Clone, Default)]
pub struct MemStorage {
    series: Vec<Series>,
}

impl MemStorage {
    /// An empty storage.
    pub fn new() -> MemStorage {
        MemStorage::default()
    }

    /// Adds samples to the series with these labels (created if new); labels are
    /// sorted here, samples kept sorted, a repeated timestamp replaced.
    pub fn add(&mut self, mut labels: Labels, samples: impl IntoIterator<Item = (i64, f64)>) {
        labels.sort();
        let idx = match self.series.iter().position(|s| s.labels == labels) {
            Some(i) => i,
            None => {
                self.series.push(Series {
                    labels,
                    samples: Vec::new(),
                });
                self.series.len() - 1
            }
        };
        if let Some(s) = self.series.get_mut(idx) {
            for (t, v) in samples {
                match s.samples.binary_search_by_key(&t, |p| p.0) {
                    Ok(i) => s.samples[i] = (t, v),
                    Err(i) => s.samples.insert(i, (t, v)),
                }
            }
        }
    }

    /// Removes every series.
    pub fn clear(&mut self) {
        self.series.clear();
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// Whether there are no series.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

impl Storage for MemStorage {
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(Series) -> Result<()>,
    ) -> Result<()> {
        for s in &self.series {
            if !matches_all(&s.labels, matchers) {
                continue;
            }
            let lo = s.samples.partition_point(|p| p.0 < start_ms);
            let hi = s.samples.partition_point(|p| p.0 <= end_ms);
            if lo < hi {
                visit(Series {
                    labels: s.labels.clone(),
                    samples: s.samples[lo..hi].to_vec(),
                })?;
            }
        }
        Ok(())
    }
}
