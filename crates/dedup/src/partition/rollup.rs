//! Rollups: per series and bucket of a fixed resolution, `count`, `min`, `max` and `sum`
//! of every metric and the timestamp and value of its first point (`first_ms`,
//! `first_value`), plus `first`, `last` and the reset-aware `increase` of counters,
//! stored as an ordinary segment per partition and resolution (one row per series and
//! bucket, the bucket start as its timestamp, the dimensions unchanged, columns named
//! `<metric>.<stat>`). Built from a partition's deduplicated rows, so duplicates never
//! count, and rebuilt for the (series, bucket) pairs a late write changed.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tidemark_segment::{Dim, MetricValue, Point, Segment, SegmentOptions, SegmentWriter};
use tidemark_tsid::Tsid;

use crate::engine::Engine;
use crate::error::{Error, Result};

/// The rollup of one metric over one bucket of one series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RollupStats {
    /// Values in the bucket.
    pub count: u64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sum of the values, added in timestamp order.
    pub sum: f64,
    /// For counters: first and last value and the increase between them within the
    /// bucket, a drop counting as a reset to zero (Prometheus' rule).
    pub counter: Option<CounterStats>,
    /// The bucket's first value of the metric: its timestamp (ms) and value (a counter
    /// as `f64`). Set by the rollup build and read back from a rollup segment; `None`
    /// for stats not built from timestamped points, and for rollups written before the
    /// `first_ms`/`first_value` columns existed. PromQL reads it to answer a window
    /// `(t - r, t]` from buckets `[t - r, t)`: the point at `t - r` is excluded, the
    /// point at `t` (first of the next bucket) included.
    pub first_point: Option<(i64, f64)>,
}

/// The counter part of a [`RollupStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterStats {
    /// Value of the bucket's first point.
    pub first: i64,
    /// Value of its last point.
    pub last: i64,
    /// Increase from `first` to `last`, resets handled (saturating).
    pub increase: i64,
}

/// The increase from `prev` to `next` of a counter: a drop is a reset to zero.
pub fn counter_step(prev: i64, next: i64) -> i64 {
    if next >= prev {
        next.saturating_sub(prev)
    } else {
        next
    }
}

impl RollupStats {
    /// The stats of one value.
    pub fn of(v: MetricValue) -> RollupStats {
        let (f, counter) = match v {
            MetricValue::Gauge(f) => (f, None),
            MetricValue::Counter(i) => (
                i as f64,
                Some(CounterStats {
                    first: i,
                    last: i,
                    increase: 0,
                }),
            ),
        };
        RollupStats {
            count: 1,
            min: f,
            max: f,
            sum: f,
            counter,
            first_point: None,
        }
    }

    /// The stats of the value `v` at `ts_millis` (the first of a bucket).
    pub fn of_point(ts_millis: i64, v: MetricValue) -> RollupStats {
        let mut s = RollupStats::of(v);
        s.first_point = Some((ts_millis, s.sum));
        s
    }

    /// Adds the next value (in timestamp order).
    pub fn add(&mut self, v: MetricValue) {
        let f = match v {
            MetricValue::Gauge(f) => f,
            MetricValue::Counter(i) => {
                if let Some(c) = &mut self.counter {
                    c.increase = c.increase.saturating_add(counter_step(c.last, i));
                    c.last = i;
                }
                i as f64
            }
        };
        self.count += 1;
        self.min = self.min.min(f);
        self.max = self.max.max(f);
        self.sum += f;
    }
}

impl RollupStats {
    /// Folds in the stats of the bucket that follows (the same series, later in time):
    /// the counter increase adds the step from this bucket's last value to that one's
    /// first (a drop counting as a reset).
    pub fn then(&mut self, later: &RollupStats) {
        self.count += later.count;
        self.min = self.min.min(later.min);
        self.max = self.max.max(later.max);
        self.sum += later.sum;
        self.counter = match (self.counter, later.counter) {
            (Some(a), Some(b)) => Some(CounterStats {
                first: a.first,
                last: b.last,
                increase: a
                    .increase
                    .saturating_add(counter_step(a.last, b.first))
                    .saturating_add(b.increase),
            }),
            (a, b) => a.or(b),
        };
        self.first_point = self.first_point.or(later.first_point);
    }
}

/// The column holding the number of raw rows of each (series, bucket) of a rollup (as
/// Elasticsearch's downsampled documents have one).
pub const DOC_COUNT_COLUMN: &str = "_doc_count";

const STATS: [&str; 9] = [
    "count",
    "first",
    "increase",
    "last",
    "max",
    "min",
    "sum",
    "first_ms",
    "first_value",
];

/// File of the rollup at `resolution_ms` in partition directory `dir`.
pub(crate) fn rollup_path(dir: &Path, resolution_ms: i64) -> PathBuf {
    dir.join(format!("rollup-{resolution_ms}ms.tms"))
}

fn to_point(
    tsid: Tsid,
    dims: &[(String, Dim)],
    bucket: i64,
    rows: u64,
    stats: &[(String, RollupStats)],
) -> Point {
    let mut p = Point::new(tsid, bucket);
    p.dims = dims.to_vec();
    p.metrics.push((
        DOC_COUNT_COLUMN.to_owned(),
        MetricValue::Counter(i64::try_from(rows).unwrap_or(i64::MAX)),
    ));
    for (name, s) in stats {
        p.metrics.push((
            format!("{name}.count"),
            MetricValue::Counter(s.count as i64),
        ));
        p.metrics
            .push((format!("{name}.min"), MetricValue::Gauge(s.min)));
        p.metrics
            .push((format!("{name}.max"), MetricValue::Gauge(s.max)));
        p.metrics
            .push((format!("{name}.sum"), MetricValue::Gauge(s.sum)));
        if let Some((ts, v)) = s.first_point {
            p.metrics
                .push((format!("{name}.first_ms"), MetricValue::Counter(ts)));
            p.metrics
                .push((format!("{name}.first_value"), MetricValue::Gauge(v)));
        }
        if let Some(c) = s.counter {
            p.metrics
                .push((format!("{name}.first"), MetricValue::Counter(c.first)));
            p.metrics
                .push((format!("{name}.last"), MetricValue::Counter(c.last)));
            p.metrics
                .push((format!("{name}.increase"), MetricValue::Counter(c.increase)));
        }
    }
    p
}

/// The (series, bucket) being accumulated: tsid, dimensions, bucket start.
type Current = (Tsid, Vec<(String, Dim)>, i64);

/// Computes the rollup rows of `engine` at `resolution` over `[from, to]` for the series
/// `keep` accepts, calling `emit` once per (series, bucket) in (tsid, bucket) order. The
/// engine must hold one segment and an empty buffer (a sealed partition), so that its
/// rows come in (tsid, timestamp) order: sums then add in timestamp order, as a raw scan
/// of the same partition does.
pub(crate) fn compute(
    engine: &Engine,
    resolution: i64,
    from: i64,
    to: i64,
    keep: &dyn Fn(&Tsid) -> bool,
    emit: &mut dyn FnMut(Point),
) -> Result<()> {
    if engine.buffered() > 0 || engine.segment_count() > 1 {
        return Err(Error::InvalidConfig {
            name: "rollup",
            detail: "rollups are built from a merged partition".to_owned(),
        });
    }
    // The (series, bucket) being accumulated: its metrics by name.
    let mut cur: Option<Current> = None;
    let mut acc: BTreeMap<String, RollupStats> = BTreeMap::new();
    let mut rows = 0u64;
    let flush = |cur: &Option<Current>,
                 acc: &mut BTreeMap<String, RollupStats>,
                 rows: &mut u64,
                 emit: &mut dyn FnMut(Point)| {
        if let Some((tsid, dims, bucket)) = cur
            && *rows > 0
        {
            let stats: Vec<(String, RollupStats)> = std::mem::take(acc).into_iter().collect();
            emit(to_point(*tsid, dims, *bucket, *rows, &stats));
        }
        acc.clear();
        *rows = 0;
    };
    engine.scan_live(
        from,
        to,
        |tsid, _| keep(tsid),
        |p, _| {
            let bucket = p.ts_millis.div_euclid(resolution) * resolution;
            let same = cur
                .as_ref()
                .is_some_and(|(t, _, b)| *t == p.tsid && *b == bucket);
            if !same {
                flush(&cur, &mut acc, &mut rows, emit);
                cur = Some((p.tsid, p.dims.clone(), bucket));
            }
            rows += 1;
            for (name, v) in p.metrics {
                match acc.get_mut(&name) {
                    Some(s) => s.add(v),
                    None => {
                        acc.insert(name, RollupStats::of_point(p.ts_millis, v));
                    }
                }
            }
        },
    )?;
    flush(&cur, &mut acc, &mut rows, emit);
    Ok(())
}

/// Writes `points` (any order) as the rollup file `path`, or removes it when there are
/// none. Returns the segment written.
pub(crate) fn write(path: &Path, points: Vec<Point>) -> Result<Option<Arc<Segment>>> {
    if points.is_empty() {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path)(e)),
        }
        return Ok(None);
    }
    let mut w = SegmentWriter::new(SegmentOptions::new())?;
    for p in points {
        w.push(p)?;
    }
    w.write_file(path)?;
    Ok(Some(Arc::new(Segment::open(path)?)))
}

/// Builds the rollup of a whole sealed partition.
pub(crate) fn build(engine: &Engine, resolution: i64, path: &Path) -> Result<Option<Arc<Segment>>> {
    let mut points = Vec::new();
    compute(
        engine,
        resolution,
        i64::MIN,
        i64::MAX,
        &|_| true,
        &mut |p| points.push(p),
    )?;
    write(path, points)
}

/// Rebuilds the rows of the `(tsid, bucket)` pairs in `touched` of the rollup `old`.
pub(crate) fn rebuild(
    engine: &Engine,
    resolution: i64,
    old: Option<&Segment>,
    touched: &HashSet<(Tsid, i64)>,
    path: &Path,
) -> Result<Option<Arc<Segment>>> {
    let mut points = match old {
        Some(seg) => seg
            .points(0..seg.row_count(), |_| true)?
            .into_iter()
            .filter(|p| !touched.contains(&(p.tsid, p.ts_millis)))
            .collect(),
        None => Vec::new(),
    };
    let tsids: HashSet<Tsid> = touched.iter().map(|(t, _)| *t).collect();
    let lo = touched.iter().map(|(_, b)| *b).min().unwrap_or(0);
    let hi = touched
        .iter()
        .map(|(_, b)| b.saturating_add(resolution - 1))
        .max()
        .unwrap_or(-1);
    compute(
        engine,
        resolution,
        lo,
        hi,
        &|t| tsids.contains(t),
        &mut |p| {
            if touched.contains(&(p.tsid, p.ts_millis)) {
                points.push(p);
            }
        },
    )?;
    write(path, points)
}

/// Column numbers of one metric's stats in a rollup segment (indexes into a row's
/// metric values), `None` where the segment lacks the column.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StatColumns([Option<usize>; 9]);

impl StatColumns {
    pub(crate) fn of(seg: &Segment, metric: &str) -> StatColumns {
        let mut out = [None; 9];
        for (i, c) in seg.columns().iter().enumerate() {
            if let Some((m, stat)) = c.name.rsplit_once('.')
                && m == metric
                && let Some(k) = STATS.iter().position(|s| *s == stat)
            {
                out[k] = Some(i);
            }
        }
        StatColumns(out)
    }

    /// The stats of a row, `None` when the series has no value of the metric there.
    pub(crate) fn read(&self, values: &[Option<MetricValue>]) -> Option<RollupStats> {
        let get = |k: usize| self.0[k].and_then(|i| values.get(i).copied().flatten());
        let int = |k: usize| match get(k) {
            Some(MetricValue::Counter(i)) => Some(i),
            _ => None,
        };
        let float = |k: usize| match get(k) {
            Some(MetricValue::Gauge(f)) => Some(f),
            _ => None,
        };
        let count = int(0)?;
        let counter = match (int(1), int(3), int(2)) {
            (Some(first), Some(last), Some(increase)) => Some(CounterStats {
                first,
                last,
                increase,
            }),
            _ => None,
        };
        let first_point = match (int(7), float(8)) {
            (Some(ts), Some(v)) => Some((ts, v)),
            _ => None,
        };
        Some(RollupStats {
            count: u64::try_from(count).ok()?,
            min: float(5)?,
            max: float(4)?,
            sum: float(6)?,
            counter,
            first_point,
        })
    }
}

/// How to read every metric of a rollup segment's rows: the stat columns of each
/// metric, and the row-count column.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowColumns {
    metrics: Vec<(String, StatColumns)>,
    doc_count: Option<usize>,
}

impl RowColumns {
    pub(crate) fn of(seg: &Segment) -> RowColumns {
        let mut names: Vec<&str> = seg
            .columns()
            .iter()
            .filter_map(|c| c.name.rsplit_once('.'))
            .filter(|(_, stat)| *stat == "count")
            .map(|(m, _)| m)
            .collect();
        names.sort_unstable();
        names.dedup();
        RowColumns {
            metrics: names
                .into_iter()
                .map(|m| (m.to_owned(), StatColumns::of(seg, m)))
                .collect(),
            doc_count: seg
                .columns()
                .iter()
                .position(|c| c.name == DOC_COUNT_COLUMN),
        }
    }

    /// The raw rows of the bucket (`None` for a rollup built before the column existed)
    /// and the stats of every metric it has a value of.
    pub(crate) fn read(
        &self,
        values: &[Option<MetricValue>],
    ) -> (Option<u64>, Vec<(String, RollupStats)>) {
        let rows = self.doc_count.and_then(|i| match values.get(i) {
            Some(Some(MetricValue::Counter(n))) => u64::try_from(*n).ok(),
            _ => None,
        });
        let stats = self
            .metrics
            .iter()
            .filter_map(|(m, c)| c.read(values).map(|s| (m.clone(), s)))
            .collect();
        (rows, stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_increase_handles_resets() {
        let mut s = RollupStats::of(MetricValue::Counter(10));
        for v in [15, 3, 7] {
            s.add(MetricValue::Counter(v));
        }
        let c = s.counter.unwrap();
        assert_eq!((c.first, c.last, c.increase), (10, 7, 5 + 3 + 4));
        assert_eq!(s.count, 4);
        assert_eq!(s.sum, 35.0);
    }
}
