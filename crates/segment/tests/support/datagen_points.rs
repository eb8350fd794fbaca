//! tidemark-datagen records as segment points, shared by this crate's tests, benches and
//! examples (each includes this file with `#[path]`: the conversion needs both crates,
//! and neither library may depend on the other).
#![allow(dead_code)]

use tidemark_datagen::{Dataset, Dim as GenDim, MetricVal, Record};
use tidemark_segment::{Dim, MetricValue, Point};
use tidemark_tsid::{Tsid, TsidComputer};

/// The record as a segment point with the given tsid.
pub fn to_point(r: &Record, tsid: Tsid) -> Point {
    Point {
        tsid,
        dims: r
            .dims
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    GenDim::Keyword(s) => Dim::Keyword(s.clone()),
                    GenDim::Int(i) => Dim::Int(*i),
                };
                ((*k).to_owned(), v)
            })
            .collect(),
        ts_millis: r.ts_millis,
        metrics: r
            .metrics
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    MetricVal::Gauge(g) => MetricValue::Gauge(*g),
                    MetricVal::Counter(c) => MetricValue::Counter(*c),
                };
                ((*k).to_owned(), v)
            })
            .collect(),
        extras: Vec::new(),
    }
}

/// Computes each series' tsid once.
pub struct TsidCache {
    computer: TsidComputer,
    by_series: Vec<Option<Tsid>>,
}

impl TsidCache {
    /// A cache for the dataset's series.
    pub fn new(ds: &Dataset) -> tidemark_tsid::Result<Self> {
        Ok(TsidCache {
            computer: ds.tsid_computer()?,
            by_series: vec![None; ds.series_count() as usize],
        })
    }

    /// The tsid of the record's series.
    pub fn tsid(&mut self, r: &Record) -> tidemark_tsid::Result<Tsid> {
        let i = r.series as usize;
        if self.by_series.len() <= i {
            self.by_series.resize(i + 1, None);
        }
        if let Some(Some(t)) = self.by_series.get(i) {
            return Ok(*t);
        }
        let t = r.tsid(&mut self.computer)?;
        self.by_series[i] = Some(t);
        Ok(t)
    }

    /// The record as a point.
    pub fn point(&mut self, r: &Record) -> tidemark_tsid::Result<Point> {
        Ok(to_point(r, self.tsid(r)?))
    }
}

/// The dataset's distinct documents (retries skipped) as points, in emission order.
pub fn unique_points(ds: &Dataset) -> tidemark_tsid::Result<Vec<Point>> {
    let mut cache = TsidCache::new(ds)?;
    ds.records()
        .filter(|r| !r.duplicate)
        .map(|r| cache.point(&r))
        .collect()
}
