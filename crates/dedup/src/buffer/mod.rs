//! What the engine holds in memory: the series table (each series' dimensions once, kept
//! across refreshes so that [`SeriesRef`]s stay valid), the column table (each metric and
//! extra column's name and kind once), and the buffer of points not yet in a segment
//! ([`runs`]: one run of columns per series), which a refresh writes as a segment
//! ([`write`]). No string is held per point.

mod runs;
mod write;

pub(crate) use runs::{Buffer, KilledRows, Row};
pub(crate) use write::{RunSeries, write_segment};

use std::collections::HashMap;

use tidemark_segment::{Extra, ExtraKind, FoldBuildHasher, MetricKind, MetricValue};
use tidemark_tsid::{SyntheticId, Tsid};

type FastHash = FoldBuildHasher;

/// A series registered with [`Engine::series`](crate::Engine::series): appends name it
/// instead of repeating its dimensions. Valid for the engine that returned it, for as
/// long as it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesRef(pub(crate) u32);

impl SeriesRef {
    /// The ref as a number, for a caller that caches it beside its own key of the
    /// series (and rebuilds it with [`from_u32`](Self::from_u32)).
    pub fn as_u32(self) -> u32 {
        self.0
    }

    /// A ref from [`as_u32`](Self::as_u32). A number the engine did not hand out is
    /// rejected by the append that names it (`Rejection::UnknownRef`), never misread.
    pub fn from_u32(n: u32) -> SeriesRef {
        SeriesRef(n)
    }
}

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
#[derive(Debug, Default, Clone)]
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
