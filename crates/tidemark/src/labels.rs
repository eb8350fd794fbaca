//! Label-keyed indices, for metrics protocols (Prometheus remote write, Influx line
//! protocol, OTLP): no predeclared mapping, every label a keyword dimension, the metric
//! name (`__name__`) one of them, and one value per sample.
//!
//! How it maps onto the façade and the engine: a label-keyed index is a
//! [`IndexMode::TimeSeries`](crate::IndexMode::TimeSeries) index whose mapping
//! (`"settings": {"index": {"mode": "labels"}}`, made by [`label_mapping`]) declares only
//! the timestamp and the value columns; [`Mapping::field`] answers every other path as a
//! keyword dimension, so the search, aggregation and Elasticsearch query paths work
//! unchanged. A sample becomes a [`Point`] whose dimensions are its labels (stored once
//! per series by the segments) and whose single metric is the value column of its type:
//! every float sample of every series shares the one `value` gauge column, so a sample
//! costs a timestamp and a value, as in the mapped modes. The series id is the hash of the
//! labels (with `__name__`) and of the value column's name, so `_id` = `_tsid` ‖
//! timestamp and the engine's dedup applies as for any time series.

use serde_json::json;
use tidemark_segment::{Dim, Extra, MetricValue, Point};
use tidemark_tsid::{DimValue, MAX_KEYWORD_LEN, MetricNames, TsidBuilder, TsidComputer};

use crate::error::{Error, Result};
use crate::mapping::Mapping;

/// `settings.index.mode` of a label-keyed index.
pub const LABELS_MODE: &str = "labels";
/// The label holding the metric name (Prometheus' convention).
pub const METRIC_NAME_LABEL: &str = "__name__";
/// The `path` of the field template [`Mapping::field`] answers for a label.
pub const LABEL_FIELD_PATH: &str = "(label)";
/// The timestamp field of a label-keyed index.
pub const LABELS_TIMESTAMP_FIELD: &str = "@timestamp";
/// The gauge column of float samples.
pub const VALUE_FIELD: &str = "value";
/// The counter column of integer samples (Influx `i`/`u`, OTLP `as_int`), kept exact.
pub const VALUE_LONG_FIELD: &str = "value_long";
/// The extra column of boolean samples (Influx booleans).
pub const VALUE_BOOL_FIELD: &str = "value_bool";
/// The extra column of string samples (Influx string fields).
pub const VALUE_KEYWORD_FIELD: &str = "value_keyword";

/// Names a label may not take: the timestamp and the value columns.
const RESERVED: [&str; 5] = [
    LABELS_TIMESTAMP_FIELD,
    VALUE_FIELD,
    VALUE_LONG_FIELD,
    VALUE_BOOL_FIELD,
    VALUE_KEYWORD_FIELD,
];

/// The mapping of a label-keyed index.
///
/// # Errors
/// None in practice (the mapping is fixed); a [`Error::Mapping`] would be a bug.
pub fn label_mapping() -> Result<Mapping> {
    Mapping::from_value(json!({
        "settings": {"index": {"mode": LABELS_MODE}},
        "mappings": {"properties": {
            LABELS_TIMESTAMP_FIELD: {"type": "date"},
            VALUE_FIELD: {"type": "double", "time_series_metric": "gauge"},
            VALUE_LONG_FIELD: {"type": "long", "time_series_metric": "counter"},
            VALUE_BOOL_FIELD: {"type": "boolean"},
            VALUE_KEYWORD_FIELD: {"type": "keyword"},
        }},
    }))
}

/// One sample's value.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleValue {
    /// A float (Prometheus samples, Influx floats, OTLP doubles): kept bit for bit, so a
    /// Prometheus stale marker (a NaN with a special payload) reads back as itself.
    F64(f64),
    /// An integer, kept exact.
    I64(i64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Str(String),
}

/// Makes points of label-keyed samples: checks the labels, computes the series id, and
/// puts the value in its column. Holds reusable buffers: one per thread.
///
/// ```
/// use tidemark::{Index, LabelPoints, SampleValue, label_mapping};
///
/// let dir = tempfile::tempdir()?;
/// let mut index = Index::create(dir.path(), label_mapping()?)?;
/// let mut points = LabelPoints::new()?;
/// let labels = [("__name__", "up"), ("job", "node")];
/// let p = points.point(&labels, 1_700_000_000_000, SampleValue::F64(1.0))?;
/// assert_eq!(p.dims.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LabelPoints {
    tsids: TsidComputer,
    order: Vec<usize>,
}

impl LabelPoints {
    /// A point maker.
    ///
    /// # Errors
    /// None in practice ([`Error::Tsid`] would be a bug).
    pub fn new() -> Result<LabelPoints> {
        let tsids = TsidBuilder::new()
            .metric_names(MetricNames::Listed(Vec::new()))
            .build()?;
        Ok(LabelPoints {
            tsids,
            order: Vec::new(),
        })
    }

    /// The point of one sample: `labels` as `(name, value)` in any order (labels with an
    /// empty value are absent, as in Prometheus), `ts_millis`, and `value`.
    ///
    /// # Errors
    /// [`Error::Document`] naming the label: no label left, an empty or reserved name
    /// (`@timestamp`, `value`, `value_long`, `value_bool`, `value_keyword`), a name
    /// given twice, a name with an empty dotted segment, a value longer than
    /// 1024 bytes.
    pub fn point(
        &mut self,
        labels: &[(&str, &str)],
        ts_millis: i64,
        value: SampleValue,
    ) -> Result<Point> {
        self.order.clear();
        self.order
            .extend((0..labels.len()).filter(|&i| labels.get(i).is_some_and(|l| !l.1.is_empty())));
        self.order
            .sort_unstable_by_key(|&i| labels.get(i).map(|l| l.0));
        let mut pairs: Vec<(&str, DimValue<'_>)> = Vec::with_capacity(self.order.len());
        let mut previous: Option<&str> = None;
        for &i in &self.order {
            let Some(&(name, v)) = labels.get(i) else {
                continue;
            };
            if name.is_empty() {
                return Err(Error::doc("(label)", "a label name is empty"));
            }
            if RESERVED.contains(&name) {
                return Err(Error::doc(
                    name,
                    "is a reserved name in a label-keyed index (the timestamp or a value column)",
                ));
            }
            if previous == Some(name) {
                return Err(Error::doc(name, "label given twice in one series"));
            }
            if v.len() > MAX_KEYWORD_LEN {
                return Err(Error::doc(
                    name,
                    format!(
                        "label value of {} bytes is longer than the {MAX_KEYWORD_LEN} bytes a dimension holds",
                        v.len()
                    ),
                ));
            }
            previous = Some(name);
            pairs.push((name, DimValue::Keyword(v)));
        }
        if pairs.is_empty() {
            return Err(Error::doc("(labels)", "a series needs at least one label"));
        }
        let column = match &value {
            SampleValue::F64(_) => Some(VALUE_FIELD),
            SampleValue::I64(_) => Some(VALUE_LONG_FIELD),
            SampleValue::Bool(_) | SampleValue::Str(_) => None,
        };
        let names: &[&str] = match &column {
            Some(c) => std::slice::from_ref(c),
            None => &[],
        };
        let tsid = self
            .tsids
            .tsid_from_pairs(&pairs, names)
            .map_err(|e| Error::doc("(labels)", e.to_string()))?;
        let mut point = Point::new(tsid, ts_millis);
        point.dims = pairs
            .iter()
            .map(|(n, v)| {
                let text = match v {
                    DimValue::Keyword(s) => (*s).to_owned(),
                    _ => String::new(),
                };
                ((*n).to_owned(), Dim::Keyword(text))
            })
            .collect();
        match value {
            SampleValue::F64(v) => point
                .metrics
                .push((VALUE_FIELD.to_owned(), MetricValue::Gauge(v))),
            SampleValue::I64(v) => point
                .metrics
                .push((VALUE_LONG_FIELD.to_owned(), MetricValue::Counter(v))),
            SampleValue::Bool(b) => point
                .extras
                .push((VALUE_BOOL_FIELD.to_owned(), Extra::Bool(b))),
            SampleValue::Str(s) => point
                .extras
                .push((VALUE_KEYWORD_FIELD.to_owned(), Extra::Keyword(s))),
        }
        Ok(point)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Filter, Index, ParsedDoc, PreparedItem, SearchRequest};

    fn store(index: &mut Index, points: Vec<Point>) -> Vec<u16> {
        let items = points
            .into_iter()
            .enumerate()
            .map(|(i, point)| {
                PreparedItem::store(
                    i as u64,
                    Action::Create,
                    None,
                    ParsedDoc {
                        point,
                        ignored_fields: 0,
                    },
                )
            })
            .collect();
        index
            .apply_prepared(items)
            .unwrap()
            .iter()
            .map(|r| r.http_status())
            .collect()
    }

    #[test]
    fn samples_dedup_and_are_found_by_label_filters() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::create(dir.path(), label_mapping().unwrap()).unwrap();
        let mut lp = LabelPoints::new().unwrap();
        let stale = f64::from_bits(0x7ff0_0000_0000_0002);
        let a = lp
            .point(
                &[("job", "x"), ("__name__", "up")],
                1000,
                SampleValue::F64(1.0),
            )
            .unwrap();
        let b = lp
            .point(
                &[("__name__", "up"), ("job", "x")],
                2000,
                SampleValue::F64(stale),
            )
            .unwrap();
        let c = lp
            .point(
                &[("__name__", "up"), ("job", "y"), ("empty", "")],
                1000,
                SampleValue::I64(7),
            )
            .unwrap();
        assert_eq!(a.tsid, b.tsid, "label order does not change the series");
        assert_eq!(
            store(&mut index, vec![a.clone(), b.clone(), c]),
            [201, 201, 201]
        );
        assert_eq!(store(&mut index, vec![a, b]), [409, 409]);
        index.refresh().unwrap();
        let req = SearchRequest {
            filter: Filter::Terms {
                field: "job".into(),
                values: vec!["x".into()],
            },
            size: 10,
            ..SearchRequest::default()
        };
        let res = index.query(&req).unwrap();
        assert_eq!(res.total, 2);
        let stored = index
            .engine()
            .get(
                &index
                    .id_of(
                        &lp.point(
                            &[("__name__", "up"), ("job", "x")],
                            2000,
                            SampleValue::F64(0.0),
                        )
                        .unwrap(),
                    )
                    .unwrap(),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            stored.metrics,
            vec![(VALUE_FIELD.to_owned(), MetricValue::Gauge(stale))],
            "the stale marker keeps its bits"
        );
    }

    #[test]
    fn rejects_bad_labels_naming_them() {
        let mut lp = LabelPoints::new().unwrap();
        let long = "x".repeat(2000);
        let bad: [(&[(&str, &str)], &str); 5] = [
            (&[], "at least one label"),
            (&[("", "a")], "empty"),
            (&[("value", "a")], "`value`"),
            (&[("a", "1"), ("a", "2")], "twice"),
            (&[("a", long.as_str())], "2000 bytes"),
        ];
        for (labels, needle) in bad {
            let e = lp
                .point(labels, 0, SampleValue::F64(0.0))
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{e} lacks {needle}");
        }
    }
}
