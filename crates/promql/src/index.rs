//! [`Storage`] over a mapped `tidemark::Index`: each (series, metric field) pair is a
//! Prometheus series whose labels are the series' dimensions and whose `__name__` is
//! the metric field's path. Names that are not valid Prometheus label names (dotted
//! paths such as `host.name`) have every other character replaced by `_`.

use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use roaring::RoaringBitmap;
use tidemark::Index;
use tidemark::dedup::Postings;
use tidemark::segment::Dim;
use tidemark::tsid::Tsid;
use tidemark::{FieldRole, FieldType};

use crate::error::{Error, Result};
use crate::eval::METRIC_NAME;
use crate::storage::{
    Labels, Matcher, Series, Storage, WindowRequest, WindowSeries, matches_all, window_span,
};
pub use crate::windows::ReadStats;

/// A mapped index read as Prometheus series.
#[derive(Debug)]
pub struct IndexStorage<'a> {
    index: &'a Index,
    /// `(field path, label-safe name)` of every metric or numeric field; no name in a
    /// label-keyed index, whose series carry their own `__name__` label.
    metrics: Vec<(String, Option<String>)>,
    /// Most samples one `select` gathers before it fails.
    max_points: usize,
    /// Most series, and about most samples, read from the segments as one group.
    group: (usize, u64),
    /// What reads took so far.
    stats: Cell<ReadStats>,
    /// Whether window aggregates may read rollups.
    rollups: bool,
    /// Threads a select reads on.
    threads: usize,
}

/// A name made safe as a Prometheus label or metric name (`[a-zA-Z_][a-zA-Z0-9_]*`; a
/// metric name may also hold `:`).
pub fn label_safe(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

impl<'a> IndexStorage<'a> {
    /// Reads `index`. In a mapped index its metric fields and numeric value fields (not
    /// dates) become metric names; in a label-keyed index (`"mode": "labels"`) every
    /// series already has its labels and `__name__`, and its numeric value columns are
    /// read as they are.
    pub fn new(index: &'a Index) -> IndexStorage<'a> {
        if index.mapping().is_label_keyed() {
            let metrics = [tidemark::VALUE_FIELD, tidemark::VALUE_LONG_FIELD]
                .into_iter()
                .map(|f| (f.to_owned(), None))
                .collect();
            return IndexStorage {
                index,
                metrics,
                max_points: crate::QueryOptions::default().max_points,
                group: (GROUP_SERIES, GROUP_POINTS),
                stats: Cell::new(ReadStats::default()),
                rollups: true,
                threads: crate::par::default_threads(),
            };
        }
        let metrics = index
            .mapping()
            .fields()
            .iter()
            .filter(|f| {
                matches!(f.role, FieldRole::Metric(_))
                    || (f.role == FieldRole::Value && f.ty != FieldType::Date)
            })
            .map(|f| (f.path.clone(), Some(label_safe(&f.path))))
            .collect();
        IndexStorage {
            index,
            metrics,
            max_points: crate::QueryOptions::default().max_points,
            group: (GROUP_SERIES, GROUP_POINTS),
            stats: Cell::new(ReadStats::default()),
            rollups: true,
            threads: crate::par::default_threads(),
        }
    }

    /// Reads on at most `threads` threads (default: every core); 1 reads on the
    /// calling thread only.
    pub fn with_threads(mut self, threads: usize) -> IndexStorage<'a> {
        self.threads = threads.max(1);
        self
    }

    /// Reads raw samples only, never rollups (for comparisons: the answers are the
    /// same, see [`Storage::select_windows`]).
    pub fn without_rollups(mut self) -> IndexStorage<'a> {
        self.rollups = false;
        self
    }

    /// What this storage's reads took so far: raw samples gathered, rollup buckets
    /// read, windows answered from rollups and windows read raw instead.
    pub fn read_stats(&self) -> ReadStats {
        self.stats.get()
    }

    pub(crate) fn set_read_stats(&self, s: ReadStats) {
        self.stats.set(s);
    }

    pub(crate) fn index(&self) -> &Index {
        self.index
    }

    pub(crate) fn group_limits(&self) -> (usize, u64) {
        self.group
    }

    pub(crate) fn max_points_limit(&self) -> usize {
        self.max_points
    }

    /// The field path of metric `mi`.
    pub(crate) fn metric_path(&self, mi: usize) -> Option<&str> {
        self.metrics.get(mi).map(|(p, _)| p.as_str())
    }

    /// The `__name__` of metric `mi` (a mapped index), `None` in a label-keyed one.
    pub(crate) fn metric_name(&self, mi: usize) -> Option<&str> {
        self.metrics.get(mi).and_then(|(_, n)| n.as_deref())
    }

    /// Sets how much one group of a streaming `select` reads at once: at most `series`
    /// series and, past the first series, about `points` samples (estimated from the
    /// segments' series tables). Defaults: [`GROUP_SERIES`] and [`GROUP_POINTS`].
    /// Smaller groups bound memory tighter at the cost of more passes over the
    /// segments' series tables.
    pub fn with_group_limits(mut self, series: usize, points: u64) -> IndexStorage<'a> {
        self.group = (series.max(1), points.max(1));
        self
    }

    /// Caps the samples one group of a `select` gathers (default: [`QueryOptions`]'s
    /// `max_points`): past it the scan keeps no more samples and `select` fails with
    /// [`Error::TooManyPoints`], so memory stays bounded even before the evaluator
    /// counts the points.
    ///
    /// [`QueryOptions`]: crate::QueryOptions
    pub fn with_max_points(mut self, max_points: usize) -> IndexStorage<'a> {
        self.max_points = max_points;
        self
    }

    /// The labels of a series without the metric name, sorted.
    pub(crate) fn series_labels_of(dims: &[(String, Dim)]) -> Labels {
        let mut labels: Labels = dims
            .iter()
            .map(|(n, d)| (label_safe(n), d.text()))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        labels.sort();
        labels
    }

    /// Which metrics of a series (by index into `self.metrics`) satisfy the matchers.
    pub(crate) fn matching_metrics(&self, base: &Labels, matchers: &[Matcher]) -> Vec<usize> {
        (0..self.metrics.len())
            .filter(|&i| {
                let Some((_, name)) = self.metrics.get(i) else {
                    return false;
                };
                let mut labels = base.clone();
                if let Some(name) = name {
                    crate::eval::set_label(&mut labels, METRIC_NAME, name);
                }
                matches_all(&labels, matchers)
            })
            .collect()
    }
}

/// Series chosen for one select: tsid → (labels without the metric name, the matching
/// metrics (indices into `IndexStorage::metrics`), estimated samples in range).
pub(crate) type Chosen = BTreeMap<Tsid, ChosenSeries>;

/// One chosen series: labels without the metric name, the matching metrics (indices
/// into `IndexStorage::metrics`), estimated samples in range.
pub(crate) type ChosenSeries = (Labels, Vec<usize>, u64);

/// Most samples (estimated from the segments' series tables) one group of series
/// gathers before it is handed over, by default: bounds a select's memory whatever the
/// range (about 16 MB of samples).
pub const GROUP_POINTS: u64 = 1 << 20;
/// Most series in one group, by default.
pub const GROUP_SERIES: usize = 4096;

impl IndexStorage<'_> {
    /// Whether `__name__` names a metric field here (a mapped index) rather than being
    /// a stored label (a label-keyed index).
    fn names_are_fields(&self) -> bool {
        self.metrics.iter().any(|(_, n)| n.is_some())
    }

    /// The series of a segment that may satisfy the matchers, from its dimension index:
    /// a superset (labels whose names were made label-safe are not narrowed here), which
    /// [`matching_metrics`](Self::matching_metrics) then checks exactly.
    pub(crate) fn candidates(&self, p: &Postings, matchers: &[Matcher]) -> RoaringBitmap {
        let mut out = p.all();
        for m in matchers {
            if out.is_empty() {
                break;
            }
            if m.name == METRIC_NAME && self.names_are_fields() {
                continue;
            }
            let dims: Vec<&str> = p.names().filter(|n| label_safe(n) == m.name).collect();
            let chosen = match dims.as_slice() {
                [] if m.is_match("") => continue,
                [] => RoaringBitmap::new(),
                [d] if *d == m.name => {
                    let mut b = p.matching(d, |v| m.is_match(v));
                    if m.is_match("") {
                        b |= p.all() - p.has(d);
                    }
                    b
                }
                _ => continue,
            };
            out &= chosen;
        }
        out
    }

    /// Phase one of a select: the series that satisfy the matchers and have data in
    /// range, chosen through each segment's dimension index and series table (no row is
    /// read), buffered series by their dimensions.
    pub(crate) fn choose_series(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Chosen> {
        let mut chosen: Chosen = BTreeMap::new();
        let mut rejected: HashSet<Tsid> = HashSet::new();
        self.index
            .select_series(
                start_ms,
                end_ms,
                |p| self.candidates(p, matchers),
                |hit| {
                    if let Some(e) = chosen.get_mut(hit.tsid) {
                        e.2 += hit.rows;
                    } else if !rejected.contains(hit.tsid) {
                        let base = Self::series_labels_of(hit.dims);
                        let m = self.matching_metrics(&base, matchers);
                        if m.is_empty() {
                            rejected.insert(*hit.tsid);
                        } else {
                            chosen.insert(*hit.tsid, (base, m, hit.rows));
                        }
                    }
                },
            )
            .map_err(|e| Error::Storage(e.to_string()))?;
        Ok(chosen)
    }
}

impl Storage for IndexStorage<'_> {
    /// Label sets without reading samples: series are chosen through each segment's
    /// dimension index and series table, so memory is O(matching series). A series is
    /// listed with every metric field the matchers accept, even one that holds no value
    /// in the range (a sparse metric column).
    fn series_labels(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(&Labels) -> Result<()>,
    ) -> Result<()> {
        for (base, metrics, _) in self.choose_series(matchers, start_ms, end_ms)?.values() {
            for &mi in metrics {
                let Some((_, name)) = self.metrics.get(mi) else {
                    continue;
                };
                let mut labels = base.clone();
                if let Some(name) = name {
                    crate::eval::set_label(&mut labels, METRIC_NAME, name);
                }
                visit(&labels)?;
            }
        }
        Ok(())
    }

    /// Streams the matching series, one at a time, through
    /// [`select_batches`](Storage::select_batches).
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(Series) -> Result<()>,
    ) -> Result<()> {
        self.select_batches(matchers, start_ms, end_ms, None, &mut |batch| {
            batch.into_iter().try_for_each(&mut *visit)
        })
    }

    /// Streams the matching series: chosen first (dimension index, no rows read), then
    /// read a bounded group at a time (at most [`GROUP_SERIES`] series and about
    /// [`GROUP_POINTS`] samples), each group by the index's
    /// [`SeriesReader`](tidemark::dedup::SeriesReader) on every thread of
    /// [`with_threads`](IndexStorage::with_threads) (each thread a contiguous run of the
    /// group's series, in tsid order, each series prepared on the thread that read it)
    /// and handed over as one batch, in tsid order, before the next group is read.
    fn select_batches(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        prepare: Option<crate::storage::Prepare<'_>>,
        visit: &mut dyn FnMut(Vec<Series>) -> Result<()>,
    ) -> Result<()> {
        // Never a silent partial answer: raw rows retention dropped cannot be read.
        if let Some((x, y)) = self.index.first_expired(start_ms, end_ms) {
            return Err(crate::windows::expired_error(start_ms, end_ms, x, y));
        }
        let chosen: Vec<(Tsid, ChosenSeries)> = self
            .choose_series(matchers, start_ms, end_ms)?
            .into_iter()
            .collect();
        let columns: Vec<&str> = self.metrics.iter().map(|(p, _)| p.as_str()).collect();
        // The groups: series until the estimated samples reach the budget.
        let mut groups = Vec::new();
        let mut from = 0usize;
        while from < chosen.len() {
            let mut to = from;
            let mut est = 0u64;
            while to < chosen.len()
                && to - from < self.group.0
                && (to == from || est < self.group.1)
            {
                let n = chosen.get(to).map_or(0, |(_, e)| e.2 * e.1.len() as u64);
                est = est.saturating_add(n);
                to += 1;
            }
            groups.push(from..to);
            from = to;
        }
        // Raw samples gathered by the groups in flight; each group's are counted
        // against the cap (a group's samples are held together unless prepared).
        let (max_points, index, metrics) = (self.max_points, self.index, &self.metrics);
        let gathered = AtomicUsize::new(0);
        let held: Vec<AtomicUsize> = groups.iter().map(|_| AtomicUsize::new(0)).collect();
        let read_group = |gi: usize, chunk: &[(Tsid, ChosenSeries)]| -> Result<Vec<Vec<Series>>> {
            let mut reader = index.series_reader(start_ms, end_ms, &columns);
            let mut cols = Vec::new();
            let mut out: Vec<Vec<Series>> = Vec::with_capacity(chunk.len());
            for (tsid, (base, wanted, _)) in chunk {
                let mut series = Vec::with_capacity(wanted.len());
                reader
                    .read(tsid, &mut cols)
                    .map_err(|e| Error::Storage(e.to_string()))?;
                for &mi in wanted {
                    let Some(c) = cols.get(mi).filter(|c| !c.is_empty()) else {
                        continue;
                    };
                    gathered.fetch_add(c.len(), Ordering::Relaxed);
                    let in_group = held
                        .get(gi)
                        .map_or(0, |h| h.fetch_add(c.len(), Ordering::Relaxed))
                        + c.len();
                    if in_group > max_points {
                        return Err(Error::TooManyPoints { limit: max_points });
                    }
                    let mut labels = base.clone();
                    if let Some((_, Some(name))) = metrics.get(mi) {
                        crate::eval::set_label(&mut labels, METRIC_NAME, name);
                    }
                    // Prepared from the column slices as read; pairs only without.
                    let samples = match prepare {
                        Some(p) => p(&labels, &c.ts, &c.values)?,
                        None => c.ts.iter().copied().zip(c.values.iter().copied()).collect(),
                    };
                    series.push(Series { labels, samples });
                }
                out.push(series);
            }
            Ok(out)
        };
        let result = crate::par::pipeline(&chosen, &groups, self.threads, read_group, |batch| {
            visit(batch.into_iter().flatten().collect())
        });
        let mut st = self.stats.get();
        st.raw_samples += gathered.load(Ordering::Relaxed) as u64;
        self.stats.set(st);
        result
    }

    /// Answers whole rollup buckets where the partitions' rollups fit the windows
    /// exactly (see the `windows` module), otherwise reads raw samples.
    fn select_windows(
        &self,
        matchers: &[Matcher],
        req: &WindowRequest<'_>,
        prepare: Option<crate::storage::Prepare<'_>>,
        visit: &mut dyn FnMut(WindowSeries) -> Result<()>,
    ) -> Result<()> {
        if self.rollups && self.rollup_windows(matchers, req, visit)?.is_some() {
            return Ok(());
        }
        let (lo, hi) = window_span(req);
        self.select_batches(matchers, lo, hi, prepare, &mut |batch| {
            batch
                .into_iter()
                .try_for_each(|s| visit(WindowSeries::Samples(s)))
        })
    }
}
