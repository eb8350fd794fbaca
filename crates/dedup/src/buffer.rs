//! What the engine holds in memory: the series table (each series' dimensions once, kept
//! across refreshes so that [`SeriesRef`]s stay valid), the column table (each metric and
//! extra column's name and kind once), and the buffer of points not yet in a segment, as
//! columns (series ref, timestamp, values by column ref), with the live version map keyed
//! on (series ref, timestamp) — on the event id in events mode. No string is held per
//! point: a k8s point with eight metrics costs about 250 bytes here, against about 1.1 KB
//! as an owned `Point`.

use std::collections::HashMap;
use std::sync::Arc;

use tidemark_segment::{
    Dim, Extra, ExtraKind, FoldBuildHasher, MetricKind, MetricValue, Point, RowBatch,
};
use tidemark_tsid::{SyntheticId, Tsid};

type FastHash = FoldBuildHasher;

/// A series registered with [`Engine::series`](crate::Engine::series): appends name it
/// instead of repeating its dimensions. Valid for the engine that returned it, for as
/// long as it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesRef(pub(crate) u32);

/// A metric or extra column registered with [`Engine::column`](crate::Engine::column).
/// Valid for the engine that returned it, for as long as it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ColumnRef(pub(crate) ColumnId);

/// A column's place in its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum ColumnId {
    Metric(u32),
    Extra(u32),
}

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnKind {
    /// `f64` gauge readings.
    Gauge,
    /// `i64` counter readings.
    Counter,
    /// Keyword extras (a per-row string that is not a dimension).
    Keyword,
    /// Boolean extras.
    Bool,
}

impl ColumnKind {
    /// `"gauge"`, `"counter"`, `"keyword"` or `"bool"`.
    pub fn name(self) -> &'static str {
        match self {
            ColumnKind::Gauge => "gauge",
            ColumnKind::Counter => "counter",
            ColumnKind::Keyword => "keyword",
            ColumnKind::Bool => "bool",
        }
    }

    pub(crate) fn of_metric_kind(k: MetricKind) -> ColumnKind {
        match k {
            MetricKind::Gauge => ColumnKind::Gauge,
            MetricKind::Counter => ColumnKind::Counter,
        }
    }

    pub(crate) fn of_extra_kind(k: ExtraKind) -> ColumnKind {
        match k {
            ExtraKind::Keyword => ColumnKind::Keyword,
            ExtraKind::Bool => ColumnKind::Bool,
        }
    }

    pub(crate) fn of_metric(v: &MetricValue) -> ColumnKind {
        match v {
            MetricValue::Gauge(_) => ColumnKind::Gauge,
            MetricValue::Counter(_) => ColumnKind::Counter,
        }
    }

    pub(crate) fn of_extra(v: &Extra) -> ColumnKind {
        match v {
            Extra::Keyword(_) => ColumnKind::Keyword,
            Extra::Bool(_) => ColumnKind::Bool,
        }
    }
}

/// A registered series.
#[derive(Debug)]
pub(crate) struct SeriesEntry {
    pub tsid: Tsid,
    /// Sorted by name; shared with the segments' series tables.
    pub dims: tidemark_segment::SharedDims,
    /// Log generation whose file defines this series' ref (0: none yet).
    pub logged: u64,
    /// An upper bound of the series' timestamps anywhere in the engine (buffer and
    /// segments), `i64::MIN` when it holds none: a point after it is certainly new.
    /// Deletes leave it as it is (a bound, not the maximum).
    pub newest: i64,
}

/// Every series seen since the engine opened.
#[derive(Debug, Default)]
pub(crate) struct SeriesTable {
    by_tsid: HashMap<Tsid, u32, FastHash>,
    pub entries: Vec<SeriesEntry>,
}

impl SeriesTable {
    pub fn get(&self, tsid: &Tsid) -> Option<u32> {
        self.by_tsid.get(tsid).copied()
    }

    pub fn entry(&self, s: u32) -> Option<&SeriesEntry> {
        self.entries.get(s as usize)
    }

    pub fn entry_mut(&mut self, s: u32) -> Option<&mut SeriesEntry> {
        self.entries.get_mut(s as usize)
    }

    /// Registers a new series (the caller checked it is not known).
    /// Registers series `tsid`, whose timestamps in the segments are at most `newest`.
    pub fn insert(&mut self, tsid: Tsid, dims: tidemark_segment::SharedDims, newest: i64) -> u32 {
        let s = self.entries.len() as u32;
        self.entries.push(SeriesEntry {
            tsid,
            dims,
            logged: 0,
            newest,
        });
        self.by_tsid.insert(tsid, s);
        s
    }

    /// Forgets which log defines each series (a reopened log's refs are not this
    /// process's).
    pub fn unlog(&mut self) {
        self.entries.iter_mut().for_each(|e| e.logged = 0);
    }
}

/// Every metric and extra column seen: in the buffer, the segments, or ever since the
/// engine opened (a name keeps its kind even once its rows are gone).
#[derive(Debug, Default)]
pub(crate) struct ColumnTable {
    by_name: HashMap<String, ColumnId, FastHash>,
    pub metrics: Vec<(String, MetricKind)>,
    pub extras: Vec<(String, ExtraKind)>,
    /// Log generation defining each metric / extra column's ref (0: none yet).
    pub metrics_logged: Vec<u64>,
    pub extras_logged: Vec<u64>,
}

impl ColumnTable {
    pub fn len(&self) -> usize {
        self.metrics.len() + self.extras.len()
    }

    pub fn get(&self, name: &str) -> Option<ColumnId> {
        self.by_name.get(name).copied()
    }

    pub fn kind(&self, id: ColumnId) -> Option<ColumnKind> {
        match id {
            ColumnId::Metric(i) => self
                .metrics
                .get(i as usize)
                .map(|(_, k)| ColumnKind::of_metric_kind(*k)),
            ColumnId::Extra(i) => self
                .extras
                .get(i as usize)
                .map(|(_, k)| ColumnKind::of_extra_kind(*k)),
        }
    }

    pub fn name(&self, id: ColumnId) -> Option<&str> {
        match id {
            ColumnId::Metric(i) => self.metrics.get(i as usize).map(|(n, _)| n.as_str()),
            ColumnId::Extra(i) => self.extras.get(i as usize).map(|(n, _)| n.as_str()),
        }
    }

    /// Registers a new column (the caller checked the name is not known).
    pub fn insert(&mut self, name: &str, kind: ColumnKind) -> ColumnId {
        let id = match kind {
            ColumnKind::Gauge | ColumnKind::Counter => {
                let k = if kind == ColumnKind::Gauge {
                    MetricKind::Gauge
                } else {
                    MetricKind::Counter
                };
                self.metrics.push((name.to_owned(), k));
                self.metrics_logged.push(0);
                ColumnId::Metric(self.metrics.len() as u32 - 1)
            }
            ColumnKind::Keyword | ColumnKind::Bool => {
                let k = if kind == ColumnKind::Keyword {
                    ExtraKind::Keyword
                } else {
                    ExtraKind::Bool
                };
                self.extras.push((name.to_owned(), k));
                self.extras_logged.push(0);
                ColumnId::Extra(self.extras.len() as u32 - 1)
            }
        };
        self.by_name.insert(name.to_owned(), id);
        id
    }

    pub fn logged(&self, id: ColumnId) -> u64 {
        match id {
            ColumnId::Metric(i) => self.metrics_logged.get(i as usize).copied(),
            ColumnId::Extra(i) => self.extras_logged.get(i as usize).copied(),
        }
        .unwrap_or(0)
    }

    pub fn set_logged(&mut self, id: ColumnId, generation: u64) {
        let slot = match id {
            ColumnId::Metric(i) => self.metrics_logged.get_mut(i as usize),
            ColumnId::Extra(i) => self.extras_logged.get_mut(i as usize),
        };
        if let Some(g) = slot {
            *g = generation;
        }
    }

    pub fn unlog(&mut self) {
        self.metrics_logged.iter_mut().for_each(|g| *g = 0);
        self.extras_logged.iter_mut().for_each(|g| *g = 0);
    }
}

/// The live version map's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// A time-series point: its series and timestamp.
    Point(u32, i64),
    /// An event: its id.
    Event(SyntheticId),
}

/// Buffered points, as columns.
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    series: Vec<u32>,
    ts: Vec<i64>,
    /// End of each point's values in `values` / `extra_values`.
    value_end: Vec<u32>,
    extra_end: Vec<u32>,
    alive: Vec<bool>,
    /// Events: each point's id.
    ids: Vec<SyntheticId>,
    values: Vec<(u32, MetricValue)>,
    extra_values: Vec<(u32, Extra)>,
    /// `Some(k)` while every point pushed since the last clear has `k` metric values and
    /// no extras: point `i`'s values are then at `i * k`, an address a reader computes
    /// without first loading `value_end` (a refresh reads the points in series order,
    /// and each load it waits for is a cache miss).
    width: Option<u32>,
    map: HashMap<Key, u32, FastHash>,
}

impl Buffer {
    /// A buffer with room for `points` points (and one metric value each) before any
    /// vector grows: a fresh engine's first refresh otherwise copies every column again
    /// at each doubling.
    pub fn with_capacity(points: usize) -> Buffer {
        Buffer {
            series: Vec::with_capacity(points),
            ts: Vec::with_capacity(points),
            value_end: Vec::with_capacity(points),
            extra_end: Vec::with_capacity(points),
            alive: Vec::with_capacity(points),
            values: Vec::with_capacity(points),
            map: HashMap::with_capacity_and_hasher(points, FastHash::default()),
            ..Buffer::default()
        }
    }

    /// Live points.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Points pushed since the last clear, live or not (what the memory holds).
    pub fn rows(&self) -> usize {
        self.ts.len()
    }

    pub fn lookup(&self, key: &Key) -> Option<u32> {
        self.map.get(key).copied()
    }

    /// Adds a point (the caller checked its key is not live).
    pub fn push(
        &mut self,
        key: Key,
        series: u32,
        ts: i64,
        values: &[(u32, MetricValue)],
        extras: &[(u32, Extra)],
    ) {
        let i = self.ts.len() as u32;
        let k = values.len() as u32;
        self.width = match self.width {
            _ if !extras.is_empty() => None,
            None if i == 0 => Some(k),
            Some(w) if w == k => Some(w),
            _ => None,
        };
        self.series.push(series);
        self.ts.push(ts);
        self.values.extend_from_slice(values);
        self.value_end.push(self.values.len() as u32);
        self.extra_values.extend(extras.iter().cloned());
        self.extra_end.push(self.extra_values.len() as u32);
        self.alive.push(true);
        if let Key::Event(id) = key {
            self.ids.push(id);
        }
        self.map.insert(key, i);
    }

    /// Removes a live point.
    pub fn kill(&mut self, key: &Key) {
        if let Some(i) = self.map.remove(key) {
            if let Some(a) = self.alive.get_mut(i as usize) {
                *a = false;
            }
        }
    }

    pub fn clear(&mut self) {
        self.series.clear();
        self.ts.clear();
        self.value_end.clear();
        self.extra_end.clear();
        self.alive.clear();
        self.ids.clear();
        self.values.clear();
        self.extra_values.clear();
        self.width = None;
        self.map.clear();
    }

    /// Live point numbers, in no particular order.
    pub fn live(&self) -> impl Iterator<Item = u32> + '_ {
        self.map.values().copied()
    }

    pub fn series_of(&self, i: u32) -> u32 {
        self.series.get(i as usize).copied().unwrap_or(0)
    }

    pub fn ts_of(&self, i: u32) -> i64 {
        self.ts.get(i as usize).copied().unwrap_or(0)
    }

    pub fn values_of(&self, i: u32) -> &[(u32, MetricValue)] {
        let (lo, hi) = match self.width {
            Some(k) => {
                let lo = i as usize * k as usize;
                (lo, lo + k as usize)
            }
            None => range(&self.value_end, i),
        };
        debug_assert_eq!((lo, hi), range(&self.value_end, i));
        self.values.get(lo..hi).unwrap_or(&[])
    }

    pub fn extras_of(&self, i: u32) -> &[(u32, Extra)] {
        if self.width.is_some() {
            // No point since the last clear has extras.
            return &[];
        }
        let (lo, hi) = range(&self.extra_end, i);
        self.extra_values.get(lo..hi).unwrap_or(&[])
    }

    pub fn id_of(&self, i: u32) -> Option<&SyntheticId> {
        self.ids.get(i as usize)
    }

    /// Buffered point `i` as a [`Point`], names sorted as a segment returns them.
    pub fn point(&self, i: u32, series: &SeriesTable, columns: &ColumnTable) -> Option<Point> {
        let e = series.entry(self.series_of(i))?;
        let mut p = Point::new(e.tsid, self.ts_of(i));
        p.dims = e.dims.to_vec();
        for &(c, v) in self.values_of(i) {
            let name = columns.name(ColumnId::Metric(c))?;
            p.metrics.push((name.to_owned(), v));
        }
        for (c, v) in self.extras_of(i) {
            let name = columns.name(ColumnId::Extra(*c))?;
            p.extras.push((name.to_owned(), v.clone()));
        }
        Some(p.normalized())
    }
}

fn range(ends: &[u32], i: u32) -> (usize, usize) {
    let hi = ends.get(i as usize).copied().unwrap_or(0) as usize;
    let lo = match i.checked_sub(1) {
        Some(j) => ends.get(j as usize).copied().unwrap_or(0) as usize,
        None => 0,
    };
    (lo, hi.max(lo))
}

/// The buffer with its tables, as the rows of the next segment.
pub(crate) struct BufferView<'a> {
    pub buffer: &'a Buffer,
    pub series: &'a SeriesTable,
    pub columns: &'a ColumnTable,
}

impl RowBatch for BufferView<'_> {
    fn columns(&self) -> &[(String, MetricKind)] {
        &self.columns.metrics
    }
    fn extra_columns(&self) -> &[(String, ExtraKind)] {
        &self.columns.extras
    }
    fn series_count(&self) -> usize {
        self.series.entries.len()
    }
    fn series(&self, s: u32) -> Option<(Tsid, &[(String, Dim)])> {
        self.series.entry(s).map(|e| (e.tsid, &e.dims[..]))
    }
    fn shared_dims(&self, s: u32) -> Option<tidemark_segment::SharedDims> {
        self.series.entry(s).map(|e| Arc::clone(&e.dims))
    }
    fn rows(&self) -> usize {
        self.buffer.rows()
    }
    fn include(&self, row: u32) -> bool {
        self.buffer
            .alive
            .get(row as usize)
            .copied()
            .unwrap_or(false)
    }
    fn row_series(&self, row: u32) -> u32 {
        self.buffer.series_of(row)
    }
    fn row_ts(&self, row: u32) -> i64 {
        self.buffer.ts_of(row)
    }
    fn row_metrics(&self, row: u32) -> &[(u32, MetricValue)] {
        self.buffer.values_of(row)
    }
    fn row_extras(&self, row: u32) -> &[(u32, Extra)] {
        self.buffer.extras_of(row)
    }
    fn row_id(&self, row: u32) -> Option<&SyntheticId> {
        self.buffer.id_of(row)
    }
}
