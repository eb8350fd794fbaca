//! `count/sum/avg/min/max_over_time` over a mapped index answered from the partitions'
//! rollups where they are exact (see `docs/results/promql.md`, "Rollups").
//!
//! A window is `(t - r, t]` (left-open, right-closed, as Prometheus 3). When `r` and every
//! window end `t` are multiples of a rollup resolution `w` of a sealed (or raw-expired)
//! partition, the window is the buckets `[t - r, t)` of that rollup, minus the point at
//! exactly `t - r` (the first point of bucket `t - r`, when its timestamp is `t - r`),
//! plus the point at exactly `t` (the first point of bucket `t`): each rollup row
//! records its first point's timestamp and value (`first_ms`, `first_value`). Time the
//! plan gives to raw rows (active partitions) is read raw. A window is answered from the
//! buckets only when that is exact; otherwise its raw samples are read (or, where
//! retention dropped them, the query fails naming the window):
//!
//! - a bucket whose sum, min or max is not finite (a NaN — a staleness marker or a
//!   stored NaN — or an infinity in it: rollups cannot tell a staleness marker, which
//!   the window must skip, from a NaN value, which it must count);
//! - a rollup without the first-point columns at a window edge;
//! - `min`/`max` when the excluded point at `t - r` equals the bucket's min/max (the
//!   rest of the bucket's min/max is unknown);
//! - `sum`/`avg` when the rounding bound of the summation order, `(n + 4) · ε · Σ|v|`
//!   (`Σ|v|` bounded by each bucket's `count · max(|min|, |max|)`), exceeds `1e-10` of
//!   the sum's magnitude: the answer then equals the raw one within 1e-9 relative.

use std::collections::{HashMap, HashSet};

use tidemark::dedup::Piece;
use tidemark::tsid::Tsid;

use crate::error::{Error, Result};
use crate::eval::METRIC_NAME;
use crate::index::IndexStorage;
use crate::storage::{
    Labels, Matcher, Window, WindowAgg, WindowRequest, WindowSeries, is_stale_nan, window_span,
};

/// What a storage read took, counted over its life (tests and benchmarks read it to see
/// which path a query took).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Raw samples gathered (by `select`, and by window reads for raw time and
    /// fallbacks).
    pub raw_samples: u64,
    /// Rollup rows (series × bucket × metric) read by window reads.
    pub rollup_buckets: u64,
    /// Windows answered from rollup buckets (possibly with raw points at raw time).
    pub rollup_windows: u64,
    /// Windows the buckets could not answer exactly, read from raw samples instead.
    pub fallback_windows: u64,
}

/// One item of a series' time line: a raw sample or a rollup bucket.
#[derive(Debug, Clone, Copy)]
enum Item {
    Point(i64, f64),
    Bucket {
        start: i64,
        count: u64,
        sum: f64,
        min: f64,
        max: f64,
        first: Option<(i64, f64)>,
    },
}

impl Item {
    fn key(&self) -> i64 {
        match self {
            Item::Point(t, _) => *t,
            Item::Bucket { start, .. } => *start,
        }
    }
}

/// Adds `x` to a Kahan-compensated sum `(sum, c)`.
fn kahan_add(acc: &mut (f64, f64), x: f64) {
    let (sum, c) = acc;
    let t = *sum + x;
    if sum.abs() >= x.abs() {
        *c += (*sum - t) + x;
    } else {
        *c += (x - t) + *sum;
    }
    *sum = t;
}

/// A window's aggregates while its items are added.
struct Acc {
    count: u64,
    /// Kahan-compensated: `(sum, compensation)`.
    sum: (f64, f64),
    min: f64,
    max: f64,
    /// An upper bound of the sum of the values' magnitudes.
    abs_bound: f64,
}

impl Acc {
    /// Adds one raw point; `None` for a value that is not finite.
    fn point(&mut self, v: f64) -> Option<()> {
        if !v.is_finite() {
            return None;
        }
        self.count += 1;
        kahan_add(&mut self.sum, v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.abs_bound += v.abs();
        Some(())
    }
}

/// The aggregate of one window built from items; `None` when it cannot be exact.
fn window_from_items(
    items: &[Item],
    t: i64,
    range: i64,
    req: &WindowRequest<'_>,
) -> Option<Window> {
    let left = t.saturating_sub(range);
    let lo = items.partition_point(|i| i.key() < left);
    let hi = items.partition_point(|i| i.key() <= t);
    let mut acc = Acc {
        count: 0,
        sum: (0.0, 0.0),
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        abs_bound: 0.0,
    };
    let mut buckets = false;
    for item in items.get(lo..hi).unwrap_or(&[]) {
        match *item {
            Item::Point(ts, v) => {
                if ts <= left || is_stale_nan(v) {
                    continue;
                }
                acc.point(v)?;
            }
            Item::Bucket {
                start,
                count: n,
                sum: s,
                min: bmin,
                max: bmax,
                first,
            } => {
                buckets = true;
                if start == t {
                    // Only its first point can be in the window, at exactly `t`.
                    match first? {
                        (ts, v) if ts == t => acc.point(v)?,
                        _ => {}
                    }
                    continue;
                }
                if !(s.is_finite() && bmin.is_finite() && bmax.is_finite()) {
                    return None;
                }
                let (mut n, mut s) = (n, s);
                if start == left {
                    let (ts, v) = first?;
                    if ts == left {
                        n = n.saturating_sub(1);
                        s -= v;
                        if n > 0 && ((req.min && v <= bmin) || (req.max && v >= bmax)) {
                            return None;
                        }
                    }
                }
                if n == 0 {
                    continue;
                }
                acc.count += n;
                kahan_add(&mut acc.sum, s);
                acc.min = acc.min.min(bmin);
                acc.max = acc.max.max(bmax);
                acc.abs_bound += n as f64 * bmin.abs().max(bmax.abs());
            }
        }
    }
    if acc.count == 0 {
        return Some(Window::Empty);
    }
    let total = acc.sum.0 + acc.sum.1;
    if !total.is_finite() {
        return None;
    }
    if req.sum && buckets {
        let bound = (acc.count as f64 + 4.0) * f64::EPSILON * acc.abs_bound;
        if bound > 1e-10 * total.abs() {
            return None;
        }
    }
    Some(Window::Agg(WindowAgg {
        count: acc.count,
        sum: total,
        min: acc.min,
        max: acc.max,
    }))
}

use crate::index::Chosen;

impl IndexStorage<'_> {
    /// The window read over rollups; `None` when no rollup piece fits (then the caller
    /// reads raw samples).
    pub(crate) fn rollup_windows(
        &self,
        matchers: &[Matcher],
        req: &WindowRequest<'_>,
        visit: &mut dyn FnMut(WindowSeries) -> Result<()>,
    ) -> Result<Option<()>> {
        let range = req.range_ms;
        if req.ends.is_empty() || range <= 0 {
            return Ok(None);
        }
        // The one alignment rule of the façade's rollup planner: every bucket read lies
        // whole inside the window's range and on its ends.
        let Some(g) = tidemark::rollup_step(std::iter::once(range).chain(req.ends.iter().copied()))
        else {
            return Ok(None);
        };
        let t_min = req.ends.iter().copied().min().unwrap_or(0);
        let t_max = req.ends.iter().copied().max().unwrap_or(0);
        let (Some(lo), Some(hi)) = (t_min.checked_sub(range), t_max.checked_add(g - 1)) else {
            return Ok(None);
        };
        let index = self.index();
        let pieces = index.read_plan(lo, hi, g);
        if !pieces.iter().any(|p| matches!(p, Piece::Rollup { .. })) {
            return Ok(None);
        }
        // Time without raw rows: expired pieces, and partitions past the raw retention
        // (whose rollups the plan reads).
        let mut no_raw: Vec<(i64, i64)> = tidemark::expired_pieces(&pieces);
        let expired_parts: HashSet<i64> = index
            .raw_expired_partitions()
            .into_iter()
            .map(|(start, end)| {
                no_raw.push((start, end));
                start
            })
            .collect();
        // Windows that touch time no piece can read cannot be answered at all.
        for &t in req.ends {
            let (a, b) = (t.saturating_sub(range - 1), t);
            if let Some((x, y)) = pieces.iter().find_map(|p| match *p {
                Piece::Expired { from, to } if from <= b && to >= a => Some((from, to)),
                _ => None,
            }) {
                return Err(expired_error(a, b, x, y));
            }
        }
        let mut chosen = self.choose_series(matchers, lo, hi)?;
        // Series of raw-expired partitions exist only in their rollups.
        for p in &pieces {
            if let Piece::Rollup { partition, .. } = p
                && expired_parts.contains(partition)
            {
                let mut found: Vec<(Tsid, Labels, Vec<usize>)> = Vec::new();
                index
                    .read_rollup(
                        p,
                        |tsid, dims| {
                            if !chosen.contains_key(tsid) {
                                let base = Self::series_labels_of(dims);
                                let m = self.matching_metrics(&base, matchers);
                                if !m.is_empty() {
                                    found.push((*tsid, base, m));
                                }
                            }
                            false
                        },
                        |postings| self.candidates(postings, matchers),
                        |_| {},
                    )
                    .map_err(|e| Error::Storage(e.to_string()))?;
                for (t, base, m) in found {
                    chosen.entry(t).or_insert((base, m, 0));
                }
            }
        }
        // Items per series: its buckets plus the raw rows of raw time (estimated).
        let span = (hi - lo).max(1) as u64;
        let raw_span: u64 = pieces
            .iter()
            .filter_map(|p| match *p {
                Piece::Raw { from, to } => Some((to - from + 1).max(0) as u64),
                _ => None,
            })
            .sum();
        let buckets_per_series: u64 = pieces
            .iter()
            .filter_map(|p| match *p {
                Piece::Rollup {
                    resolution_ms,
                    from,
                    to,
                    ..
                } => Some(((to - from + 1) / resolution_ms.max(1)).max(0) as u64),
                _ => None,
            })
            .sum();
        let tsids: Vec<Tsid> = chosen.keys().copied().collect();
        let mut from = 0usize;
        while from < tsids.len() {
            let mut to = from;
            let mut est = 0u64;
            let (max_series, max_est) = self.group_limits();
            while to < tsids.len() && to - from < max_series && (to == from || est < max_est) {
                let n = tsids.get(to).and_then(|t| chosen.get(t)).map_or(0, |e| {
                    (e.2.saturating_mul(raw_span) / span + buckets_per_series) * e.1.len() as u64
                });
                est = est.saturating_add(n);
                to += 1;
            }
            let group = tsids.get(from..to).unwrap_or(&[]);
            from = to;
            self.window_group(matchers, req, &pieces, &no_raw, &chosen, group, visit)?;
        }
        Ok(Some(()))
    }

    /// Reads and answers one group of series.
    #[allow(clippy::too_many_arguments)]
    fn window_group(
        &self,
        matchers: &[Matcher],
        req: &WindowRequest<'_>,
        pieces: &[Piece],
        no_raw: &[(i64, i64)],
        chosen: &Chosen,
        group: &[Tsid],
        visit: &mut dyn FnMut(WindowSeries) -> Result<()>,
    ) -> Result<()> {
        let index = self.index();
        let in_group: HashSet<Tsid> = group.iter().copied().collect();
        let mut items: HashMap<(Tsid, usize), Vec<Item>> = HashMap::new();
        let mut held = 0usize;
        let max_points = self.max_points_limit();
        let mut stats = self.read_stats();
        for piece in pieces {
            match *piece {
                Piece::Rollup { .. } => {
                    index
                        .read_rollup(
                            piece,
                            |tsid, _| in_group.contains(tsid),
                            |postings| self.candidates(postings, matchers),
                            |row| {
                                let Some((_, wanted, _)) = chosen.get(row.tsid) else {
                                    return;
                                };
                                for &mi in wanted {
                                    let Some(path) = self.metric_path(mi) else {
                                        continue;
                                    };
                                    let Some((_, s)) = row.metrics.iter().find(|(n, _)| n == path)
                                    else {
                                        continue;
                                    };
                                    held += 1;
                                    stats.rollup_buckets += 1;
                                    items
                                        .entry((*row.tsid, mi))
                                        .or_default()
                                        .push(Item::Bucket {
                                            start: row.bucket_ms,
                                            count: s.count,
                                            sum: s.sum,
                                            min: s.min,
                                            max: s.max,
                                            first: s.first_point,
                                        });
                                }
                            },
                        )
                        .map_err(|e| Error::Storage(e.to_string()))?;
                }
                Piece::Raw { from, to } => {
                    // Only what some window covers.
                    let (a, b) = window_span(req);
                    let (from, to) = (from.max(a), to.min(b));
                    if from > to {
                        continue;
                    }
                    self.scan_group_raw(from, to, group, chosen, &mut |key, ts, v| {
                        held += 1;
                        stats.raw_samples += 1;
                        items.entry(key).or_default().push(Item::Point(ts, v));
                    })?;
                }
                Piece::Expired { .. } => {}
            }
            if held > max_points {
                return Err(Error::TooManyPoints { limit: max_points });
            }
        }
        let range = req.range_ms;
        // Per series: the windows, and the steps to read raw.
        let mut answers: Vec<(Tsid, usize, Vec<Window>, Vec<usize>)> = Vec::new();
        for t in group {
            let Some((_, wanted, _)) = chosen.get(t) else {
                continue;
            };
            for &mi in wanted {
                let Some(mut its) = items.remove(&(*t, mi)) else {
                    continue;
                };
                its.sort_by_key(Item::key);
                its.dedup_by_key(|i| i.key());
                let mut windows = Vec::with_capacity(req.ends.len());
                let mut fallback = Vec::new();
                for (k, &end) in req.ends.iter().enumerate() {
                    match window_from_items(&its, end, range, req) {
                        Some(w) => {
                            if matches!(w, Window::Agg(_)) {
                                stats.rollup_windows += 1;
                            }
                            windows.push(w);
                        }
                        None => {
                            fallback.push(k);
                            windows.push(Window::Empty);
                        }
                    }
                }
                answers.push((*t, mi, windows, fallback));
            }
        }
        // Windows the buckets could not answer: their raw samples.
        let need: Vec<(Tsid, usize, i64, i64)> = answers
            .iter()
            .filter(|a| !a.3.is_empty())
            .map(|(t, mi, _, fb)| {
                let a = fb
                    .iter()
                    .filter_map(|&k| req.ends.get(k))
                    .min()
                    .copied()
                    .unwrap_or(0);
                let b = fb
                    .iter()
                    .filter_map(|&k| req.ends.get(k))
                    .max()
                    .copied()
                    .unwrap_or(0);
                (*t, *mi, a.saturating_sub(range - 1), b)
            })
            .collect();
        if !need.is_empty() {
            for (t, mi, a, b) in &need {
                if let Some(&(x, y)) = no_raw.iter().find(|(x, y)| x <= b && y >= a) {
                    let labels = self.labels_of(chosen, t, *mi);
                    return Err(Error::Execution(format!(
                        "{}: a window in [{a}, {b}] ms cannot be answered exactly from rollups (a NaN or staleness marker in a bucket, an excluded edge point equal to the bucket's min/max, a rollup without first-point columns, or a sum whose rounding bound exceeds 1e-10) and its raw rows ({x} to {y} ms) were dropped by retention",
                        crate::eval::labels_text(&labels),
                    )));
                }
            }
            let lo = need.iter().map(|n| n.2).min().unwrap_or(0);
            let hi = need.iter().map(|n| n.3).max().unwrap_or(0);
            let ts: Vec<Tsid> = {
                let mut v: Vec<Tsid> = need.iter().map(|n| n.0).collect();
                v.sort();
                v.dedup();
                v
            };
            let wanted: HashSet<(Tsid, usize)> = need.iter().map(|n| (n.0, n.1)).collect();
            let mut raw: HashMap<(Tsid, usize), Vec<(i64, f64)>> = HashMap::new();
            let mut raw_held = 0usize;
            self.scan_group_raw(lo, hi, &ts, chosen, &mut |key, ts, v| {
                if wanted.contains(&key) {
                    raw_held += 1;
                    stats.raw_samples += 1;
                    raw.entry(key).or_default().push((ts, v));
                }
            })?;
            if raw_held > max_points {
                return Err(Error::TooManyPoints { limit: max_points });
            }
            for (t, mi, windows, fb) in &mut answers {
                if fb.is_empty() {
                    continue;
                }
                let mut samples = raw.remove(&(*t, *mi)).unwrap_or_default();
                samples.sort_by_key(|p| p.0);
                samples.dedup_by_key(|p| p.0);
                for &k in fb.iter() {
                    let Some(&end) = req.ends.get(k) else {
                        continue;
                    };
                    let a = samples.partition_point(|p| p.0 <= end.saturating_sub(range));
                    let b = samples.partition_point(|p| p.0 <= end);
                    let w: Vec<(i64, f64)> = samples.get(a..b).unwrap_or(&[]).to_vec();
                    stats.fallback_windows += 1;
                    if let Some(slot) = windows.get_mut(k) {
                        *slot = if w.is_empty() {
                            Window::Empty
                        } else {
                            Window::Samples(w)
                        };
                    }
                }
            }
        }
        self.set_read_stats(stats);
        for (t, mi, windows, _) in answers {
            if windows.iter().all(|w| matches!(w, Window::Empty)) {
                continue;
            }
            let labels = self.labels_of(chosen, &t, mi);
            visit(WindowSeries::Windows { labels, windows })?;
        }
        Ok(())
    }

    /// The labels of a chosen series and metric.
    fn labels_of(&self, chosen: &Chosen, t: &Tsid, mi: usize) -> Labels {
        let mut labels = chosen.get(t).map(|e| e.0.clone()).unwrap_or_default();
        if let Some(name) = self.metric_name(mi) {
            crate::eval::set_label(&mut labels, METRIC_NAME, name);
        }
        labels
    }

    /// The raw samples of `group` in `[from, to]`: `f((tsid, metric), ts, value)`.
    pub(crate) fn scan_group_raw(
        &self,
        from: i64,
        to: i64,
        group: &[Tsid],
        chosen: &Chosen,
        f: &mut dyn FnMut((Tsid, usize), i64, f64),
    ) -> Result<()> {
        // One reader for the group: members read in tsid order decode a block they
        // share once.
        let columns: Vec<&str> = (0..).map_while(|mi| self.metric_path(mi)).collect();
        let mut reader = self.index().series_reader(from, to, &columns);
        let mut cols = Vec::new();
        for tsid in group {
            let Some((_, wanted, _)) = chosen.get(tsid) else {
                continue;
            };
            reader
                .read(tsid, &mut cols)
                .map_err(|e| Error::Storage(e.to_string()))?;
            for &mi in wanted {
                let Some(c) = cols.get(mi) else { continue };
                for (&ts, &v) in c.ts.iter().zip(&c.values) {
                    f((*tsid, mi), ts, v);
                }
            }
        }
        Ok(())
    }
}

pub(crate) fn expired_error(a: i64, b: i64, x: i64, y: i64) -> Error {
    Error::Execution(format!(
        "the window [{a}, {b}] ms reaches time whose raw rows retention dropped ({x} to {y} ms) and no kept rollup answers it (the range and every step must be multiples of a kept rollup resolution, and only count/sum/avg/min/max_over_time read rollups)"
    ))
}
