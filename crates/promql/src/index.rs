//! [`Storage`] over a mapped `tidemark::Index`: each (series, metric field) pair is a
//! Prometheus series whose labels are the series' dimensions and whose `__name__` is
//! the metric field's path. Names that are not valid Prometheus label names (dotted
//! paths such as `host.name`) have every other character replaced by `_`.

use std::cell::RefCell;
use std::collections::HashMap;

use tidemark::Index;
use tidemark::segment::{Dim, MetricValue};
use tidemark::tsid::Tsid;
use tidemark::{FieldRole, FieldType};

use crate::error::{Error, Result};
use crate::eval::METRIC_NAME;
use crate::storage::{Labels, Matcher, Series, Storage, matches_all};

/// A mapped index read as Prometheus series.
#[derive(Debug)]
pub struct IndexStorage<'a> {
    index: &'a Index,
    /// `(field path, label-safe name)` of every metric or numeric field; no name in a
    /// label-keyed index, whose series carry their own `__name__` label.
    metrics: Vec<(String, Option<String>)>,
    /// Most samples one `select` gathers before it fails.
    max_points: usize,
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

fn dim_text(d: &Dim) -> String {
    match d {
        Dim::Keyword(s) => s.clone(),
        Dim::Int(i) => i.to_string(),
        Dim::UInt(u) => u.to_string(),
        Dim::Bool(b) => b.to_string(),
        Dim::Ip(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => ip.to_string(),
        },
    }
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
        }
    }

    /// Caps the samples one `select` gathers (default: [`QueryOptions`]'s
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
    fn series_labels_of(dims: &[(String, Dim)]) -> Labels {
        let mut labels: Labels = dims
            .iter()
            .map(|(n, d)| (label_safe(n), dim_text(d)))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        labels.sort();
        labels
    }

    /// Which metrics of a series (by index into `self.metrics`) satisfy the matchers.
    fn matching_metrics(&self, base: &Labels, matchers: &[Matcher]) -> Vec<usize> {
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

impl Storage for IndexStorage<'_> {
    /// Label sets without reading samples: the scan only asks for each series'
    /// dimensions, so memory is O(series). A series is listed with every metric field
    /// the matchers accept, even one that holds no value in the range (a sparse metric
    /// column).
    fn series_labels(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(&Labels) -> Result<()>,
    ) -> Result<()> {
        let mut seen: HashMap<Tsid, (Labels, Vec<usize>)> = HashMap::new();
        self.index
            .engine()
            .scan_live(
                start_ms,
                end_ms,
                |tsid, dims| {
                    seen.entry(*tsid).or_insert_with(|| {
                        let base = Self::series_labels_of(dims);
                        let m = self.matching_metrics(&base, matchers);
                        (base, m)
                    });
                    false
                },
                |_, _| {},
            )
            .map_err(|e| Error::Storage(e.to_string()))?;
        let mut tsids: Vec<Tsid> = seen.keys().copied().collect();
        tsids.sort();
        for tsid in tsids {
            let Some((base, metrics)) = seen.get(&tsid) else {
                continue;
            };
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

    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(Series) -> Result<()>,
    ) -> Result<()> {
        // One scan of the live data; points arrive grouped by segment, so each series'
        // samples are gathered, then sorted and handed over one series at a time.
        let verdicts: RefCell<HashMap<Tsid, (Labels, Vec<usize>)>> = RefCell::new(HashMap::new());
        let mut samples: HashMap<(Tsid, usize), Vec<(i64, f64)>> = HashMap::new();
        let mut gathered = 0usize;
        self.index
            .engine()
            .scan_live(
                start_ms,
                end_ms,
                |tsid, dims| {
                    let mut v = verdicts.borrow_mut();
                    let entry = v.entry(*tsid).or_insert_with(|| {
                        let base = Self::series_labels_of(dims);
                        let m = self.matching_metrics(&base, matchers);
                        (base, m)
                    });
                    !entry.1.is_empty()
                },
                |p, _| {
                    let v = verdicts.borrow();
                    let Some((_, wanted)) = v.get(&p.tsid) else {
                        return;
                    };
                    for &mi in wanted {
                        let Some((path, _)) = self.metrics.get(mi) else {
                            continue;
                        };
                        if gathered > self.max_points {
                            return;
                        }
                        if let Some((_, v)) = p.metrics.iter().find(|(n, _)| n == path) {
                            gathered += 1;
                            let v = match v {
                                MetricValue::Gauge(f) => *f,
                                MetricValue::Counter(i) => *i as f64,
                            };
                            samples
                                .entry((p.tsid, mi))
                                .or_default()
                                .push((p.ts_millis, v));
                        }
                    }
                },
            )
            .map_err(|e| Error::Storage(e.to_string()))?;
        if gathered > self.max_points {
            return Err(Error::TooManyPoints {
                limit: self.max_points,
            });
        }
        let verdicts = verdicts.into_inner();
        let mut keys: Vec<(Tsid, usize)> = samples.keys().copied().collect();
        keys.sort();
        for key in keys {
            let Some(mut s) = samples.remove(&key) else {
                continue;
            };
            let Some((base, _)) = verdicts.get(&key.0) else {
                continue;
            };
            s.sort_by_key(|p| p.0);
            s.dedup_by_key(|p| p.0);
            let mut labels = base.clone();
            if let Some((_, Some(name))) = self.metrics.get(key.1) {
                crate::eval::set_label(&mut labels, METRIC_NAME, name);
            }
            visit(Series { labels, samples: s })?;
        }
        Ok(())
    }
}
