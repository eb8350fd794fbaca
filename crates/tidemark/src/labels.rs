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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use serde_json::json;
use tidemark_segment::{Extra, MetricValue, Point};
use tidemark_tsid::{DimValue, MAX_KEYWORD_LEN, MetricNames, Tsid, TsidBuilder, TsidComputer};

use crate::doc::ParsedDoc;
use crate::error::{Error, Result};
use crate::mapping::Mapping;
use crate::row::{DimRef, DimsWriter, Row};

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

/// The label mapping, built once and shared, so documents of every [`LabelPoints`] name
/// their value columns through the same mapping.
fn shared_label_mapping() -> Result<Arc<Mapping>> {
    static SHARED: OnceLock<Arc<Mapping>> = OnceLock::new();
    if let Some(m) = SHARED.get() {
        return Ok(Arc::clone(m));
    }
    let m = Arc::new(label_mapping()?);
    Ok(Arc::clone(SHARED.get_or_init(|| m)))
}

/// The value column a sample's type goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueColumn {
    F64,
    I64,
    Bool,
    Str,
}

impl ValueColumn {
    fn of(v: &SampleValue) -> ValueColumn {
        match v {
            SampleValue::F64(_) => ValueColumn::F64,
            SampleValue::I64(_) => ValueColumn::I64,
            SampleValue::Bool(_) => ValueColumn::Bool,
            SampleValue::Str(_) => ValueColumn::Str,
        }
    }

    /// The other numeric column: a float series' integer twin and back (`None` for
    /// booleans and strings).
    fn other_numeric(self) -> Option<ValueColumn> {
        match self {
            ValueColumn::F64 => Some(ValueColumn::I64),
            ValueColumn::I64 => Some(ValueColumn::F64),
            ValueColumn::Bool | ValueColumn::Str => None,
        }
    }

    /// The column's index among the four (`value`, `value_long`, `value_bool`,
    /// `value_keyword`: 0 to 3).
    fn slot(self) -> usize {
        match self {
            ValueColumn::F64 => 0,
            ValueColumn::I64 => 1,
            ValueColumn::Bool => 2,
            ValueColumn::Str => 3,
        }
    }

    /// The metric column that joins the series identity, if any.
    fn metric_name(self) -> Option<&'static str> {
        match self {
            ValueColumn::F64 => Some(VALUE_FIELD),
            ValueColumn::I64 => Some(VALUE_LONG_FIELD),
            ValueColumn::Bool | ValueColumn::Str => None,
        }
    }

    fn path(self) -> &'static str {
        match self {
            ValueColumn::F64 => VALUE_FIELD,
            ValueColumn::I64 => VALUE_LONG_FIELD,
            ValueColumn::Bool => VALUE_BOOL_FIELD,
            ValueColumn::Str => VALUE_KEYWORD_FIELD,
        }
    }
}

/// Makes documents of label-keyed samples: checks the labels, computes the series id, and
/// puts the value in its column. Holds reusable buffers: one per thread.
///
/// ```
/// use tidemark::{Action, Index, LabelPoints, PreparedItem, SampleValue, label_mapping};
///
/// let dir = tempfile::tempdir()?;
/// let mut index = Index::create(dir.path(), label_mapping()?)?;
/// let mut points = LabelPoints::new()?;
/// let labels = [("__name__", "up"), ("job", "node")];
/// // A series' labels are checked and hashed once, then each sample is cheap.
/// let series = points.series(&labels, &SampleValue::F64(0.0))?;
/// let items = vec![
///     PreparedItem::store(1, Action::Create, None, series.doc(1_700_000_000_000, SampleValue::F64(1.0))?),
///     PreparedItem::store(2, Action::Create, None, series.doc(1_700_000_010_000, SampleValue::F64(1.0))?),
///     PreparedItem::store(3, Action::Create, None, points.doc(&labels, 1_700_000_000_000, SampleValue::F64(1.0))?),
/// ];
/// let results = index.apply_prepared(items)?;
/// assert_eq!(results.iter().map(|r| r.http_status()).collect::<Vec<_>>(), [201, 201, 409]);
/// let p = points.point(&labels, 1_700_000_000_000, SampleValue::F64(1.0))?;
/// assert_eq!(p.dims.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LabelPoints {
    tsids: TsidComputer,
    order: Vec<usize>,
    mapping: Arc<Mapping>,
    dims_out: DimsWriter,
}

/// One label-keyed series, checked and hashed once ([`LabelPoints::series`]): makes the
/// documents of its samples, and carries the store's ref of the series once an index has
/// resolved it, so that a cached series costs the writer no lookup. Cloning it is one
/// reference-count increment.
#[derive(Debug, Clone)]
pub struct LabelSeries(Arc<SeriesInner>);

#[derive(Debug)]
struct SeriesInner {
    mapping: Arc<Mapping>,
    tsid: Tsid,
    /// For a numeric series, the id the same labels have with the other numeric type
    /// (the value column joins the id): an index that already holds that twin stores
    /// this series' samples in it, converted, so that `5i` by line protocol and `5.0`
    /// by remote write are one sample.
    twin_tsid: Option<Tsid>,
    dims: Arc<[u8]>,
    column: ValueColumn,
    /// The value column's field index in the label mapping.
    field: u32,
    /// The series' ref in the index that last resolved it: the index's id in bits 32 to
    /// 62, the ref in the low 32, bit 63 set when that index keeps it as its numeric
    /// twin; 0 before any (index ids start at 1).
    resolved: AtomicU64,
}

impl LabelSeries {
    /// The series id.
    pub fn tsid(&self) -> Tsid {
        self.0.tsid
    }

    /// The series' ref in the index whose id is `index_id`, if that index resolved it
    /// last, and whether that index keeps it as its numeric twin.
    pub(crate) fn resolved_in(&self, index_id: u32) -> Option<(u32, bool)> {
        let v = self.0.resolved.load(Ordering::Relaxed);
        (v != 0 && ((v >> 32) as u32 & 0x7fff_ffff) == index_id).then_some((v as u32, v >> 63 == 1))
    }

    /// Remembers the series' ref in the index `index_id` (ids below 2^31), and whether
    /// that index keeps it as its numeric twin.
    pub(crate) fn set_resolved(&self, index_id: u32, series_ref: u32, as_twin: bool) {
        self.0.resolved.store(
            (u64::from(as_twin) << 63)
                | (u64::from(index_id & 0x7fff_ffff) << 32)
                | u64::from(series_ref),
            Ordering::Relaxed,
        );
    }

    /// The id of the same labels with the other numeric type, for a numeric series.
    pub(crate) fn twin_tsid(&self) -> Option<Tsid> {
        self.0.twin_tsid
    }

    /// The document of one sample of the series.
    ///
    /// # Errors
    /// [`Error::Document`] for a value of another type than the one the series was made
    /// for (the value column is part of the series id).
    pub fn doc(&self, ts_millis: i64, value: SampleValue) -> Result<ParsedDoc> {
        if ValueColumn::of(&value) != self.0.column {
            return Err(Error::doc(
                self.0.column.path(),
                "a sample of another value type than its series was made for",
            ));
        }
        let mut row = Row {
            schema: Arc::clone(&self.0.mapping),
            tsid: self.0.tsid,
            ts_millis,
            dims: Arc::clone(&self.0.dims),
            values: Vec::new(),
            extras: Vec::new(),
        };
        match value {
            SampleValue::F64(v) => row.values.push((self.0.field, MetricValue::Gauge(v))),
            SampleValue::I64(v) => row.values.push((self.0.field, MetricValue::Counter(v))),
            SampleValue::Bool(b) => row.extras.push((self.0.field, Extra::Bool(b))),
            SampleValue::Str(s) => row.extras.push((self.0.field, Extra::Keyword(s))),
        }
        Ok(ParsedDoc {
            row,
            ignored_fields: 0,
        })
    }
}

/// Samples of label-keyed series held by series, as the metrics protocols read them: each
/// distinct series once (its id, dimensions and value column) and each sample as (series
/// slot, timestamp, value). [`Index::append_samples`](crate::Index::append_samples)
/// resolves a series to the store's ref once per batch, not once per sample, and answers
/// counts, not a result per sample: no document, item or result is made per sample.
///
/// ```
/// use tidemark::{Index, LabelPoints, SampleBatch, SampleValue, label_mapping};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let mut index = Index::create(dir.path(), label_mapping()?)?;
/// let mut points = LabelPoints::new()?;
/// let cpu = points.series(&[("__name__", "cpu"), ("host", "a")], &SampleValue::F64(0.0))?;
/// let mut batch = SampleBatch::new(true);
/// batch.push(&cpu, 1_000, SampleValue::F64(0.5))?;
/// batch.push(&cpu, 2_000, SampleValue::F64(0.7))?;
/// let tally = index.append_samples(&[&batch])?;
/// assert_eq!(tally[0].created, 2);
/// // A retry is a duplicate.
/// let tally = index.append_samples(&[&batch])?;
/// assert_eq!(tally[0].duplicates, 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SampleBatch {
    create: bool,
    /// The series of the samples, in order of appearance; a series repeated at once
    /// (samples of one remote-write timeseries) takes one slot.
    series: Vec<LabelSeries>,
    samples: Vec<(u32, i64, SampleValue)>,
}

/// A position in a [`SampleBatch`] to [`truncate`](SampleBatch::truncate) back to (a
/// line that failed half way leaves nothing behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleMark {
    samples: usize,
    series: usize,
}

/// What became of a [`SampleBatch`]'s samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SampleTally {
    /// Samples stored for the first time.
    pub created: u64,
    /// Samples that replaced a stored one (`create` off).
    pub replaced: u64,
    /// Samples already stored (`create` on: a retry).
    pub duplicates: u64,
    /// Samples the index refused (too old for its partitions, a new-series limit, ...).
    pub rejected: u64,
    /// Why the first refused sample was refused.
    pub first_rejection: Option<String>,
}

impl SampleBatch {
    /// An empty batch; `create` on, a sample already stored is a duplicate and keeps the
    /// stored value (Elasticsearch's `create`); off, it replaces it (`index`).
    pub fn new(create: bool) -> SampleBatch {
        SampleBatch {
            create,
            series: Vec::new(),
            samples: Vec::new(),
        }
    }

    /// Whether a sample already stored is a duplicate (`true`) or replaced.
    pub fn create(&self) -> bool {
        self.create
    }

    /// Adds a sample of `series`.
    ///
    /// # Errors
    /// [`Error::Document`] for a value of another type than the one the series was made
    /// for (the value column is part of the series id).
    pub fn push(&mut self, series: &LabelSeries, ts_millis: i64, value: SampleValue) -> Result<()> {
        if ValueColumn::of(&value) != series.0.column {
            return Err(Error::doc(
                series.0.column.path(),
                "a sample of another value type than its series was made for",
            ));
        }
        let slot = self.slot(series);
        self.samples.push((slot, ts_millis, value));
        Ok(())
    }

    /// The slot of `series`: the last one if it is the same series, else a new one.
    fn slot(&mut self, series: &LabelSeries) -> u32 {
        let last = self.series.len().checked_sub(1);
        if let Some(at) = last
            && self
                .series
                .get(at)
                .is_some_and(|s| s.0.tsid == series.0.tsid)
        {
            return u32::try_from(at).unwrap_or(u32::MAX);
        }
        self.series.push(series.clone());
        u32::try_from(self.series.len() - 1).unwrap_or(u32::MAX)
    }

    /// The series slots of the batch: at least the number of distinct series (a series
    /// whose samples are not adjacent takes a slot each time).
    pub fn series_len(&self) -> usize {
        self.series.len()
    }

    /// The ids of the series slots, in order (for an exact distinct count where
    /// [`series_len`](Self::series_len) is not enough).
    pub fn series_ids(&self) -> impl Iterator<Item = Tsid> + '_ {
        self.series.iter().map(|s| s.0.tsid)
    }

    /// The samples of the batch.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether the batch holds no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Where the batch ends now.
    pub fn mark(&self) -> SampleMark {
        SampleMark {
            samples: self.samples.len(),
            series: self.series.len(),
        }
    }

    /// Drops the samples and series added since `mark`.
    pub fn truncate(&mut self, mark: SampleMark) {
        self.samples.truncate(mark.samples);
        self.series.truncate(mark.series);
    }

    /// The series in slot order.
    pub(crate) fn series(&self) -> &[LabelSeries] {
        &self.series
    }

    /// The samples: (series slot, timestamp, value).
    pub(crate) fn samples(&self) -> &[(u32, i64, SampleValue)] {
        &self.samples
    }
}

impl LabelSeries {
    /// The series' encoded dimensions.
    pub(crate) fn dims(&self) -> &[u8] {
        &self.0.dims
    }

    /// The series' value column as an index (`value`, `value_long`, `value_bool`,
    /// `value_keyword`: 0 to 3), for a cache of column refs by kind; with `as_twin`,
    /// the other numeric column's.
    pub(crate) fn value_slot(&self, as_twin: bool) -> usize {
        self.column(as_twin).slot()
    }

    /// The name of the value column, or with `as_twin` the other numeric column's.
    pub(crate) fn value_column_as(&self, as_twin: bool) -> &'static str {
        self.column(as_twin).path()
    }

    fn column(&self, as_twin: bool) -> ValueColumn {
        match self.0.column.other_numeric() {
            Some(other) if as_twin => other,
            _ => self.0.column,
        }
    }
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
            mapping: shared_label_mapping()?,
            dims_out: DimsWriter::default(),
        })
    }

    /// The series of `labels` (as `(name, value)` in any order; labels with an empty
    /// value are absent, as in Prometheus) for samples of `like`'s type: labels checked,
    /// series id computed, dimensions encoded, once for all its samples.
    ///
    /// # Errors
    /// [`Error::Document`] naming the label: no label left, an empty or reserved name
    /// (`@timestamp`, `value`, `value_long`, `value_bool`, `value_keyword`), a name
    /// given twice, a name with an empty dotted segment, a value longer than
    /// 1024 bytes.
    pub fn series(&mut self, labels: &[(&str, &str)], like: &SampleValue) -> Result<LabelSeries> {
        self.order.clear();
        self.order
            .extend((0..labels.len()).filter(|&i| labels.get(i).is_some_and(|l| !l.1.is_empty())));
        self.order
            .sort_unstable_by_key(|&i| labels.get(i).map(|l| l.0));
        let mut pairs: Vec<(&str, DimValue<'_>)> = Vec::with_capacity(self.order.len());
        let mut previous: Option<&str> = None;
        self.dims_out.clear();
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
            self.dims_out.push(name, DimRef::Keyword(v));
        }
        if pairs.is_empty() {
            return Err(Error::doc("(labels)", "a series needs at least one label"));
        }
        let column = ValueColumn::of(like);
        let metric = column.metric_name();
        let names: &[&str] = match &metric {
            Some(c) => std::slice::from_ref(c),
            None => &[],
        };
        let tsid = self
            .tsids
            .tsid_from_pairs(&pairs, names)
            .map_err(|e| Error::doc("(labels)", e.to_string()))?;
        let twin_tsid = match column.other_numeric().and_then(ValueColumn::metric_name) {
            Some(twin) => Some(
                self.tsids
                    .tsid_from_pairs(&pairs, std::slice::from_ref(&twin))
                    .map_err(|e| Error::doc("(labels)", e.to_string()))?,
            ),
            None => None,
        };
        let field = self
            .mapping
            .fields()
            .iter()
            .position(|f| f.path == column.path())
            .ok_or_else(|| Error::doc(column.path(), "missing from the label mapping"))?;
        Ok(LabelSeries(Arc::new(SeriesInner {
            mapping: Arc::clone(&self.mapping),
            tsid,
            twin_tsid,
            dims: self.dims_out.finish(),
            column,
            field: field as u32,
            resolved: AtomicU64::new(0),
        })))
    }

    /// The document of one sample: [`series`](Self::series), then
    /// [`LabelSeries::doc`].
    ///
    /// # Errors
    /// As [`series`](Self::series).
    pub fn doc(
        &mut self,
        labels: &[(&str, &str)],
        ts_millis: i64,
        value: SampleValue,
    ) -> Result<ParsedDoc> {
        self.series(labels, &value)?.doc(ts_millis, value)
    }

    /// The point of one sample (dimensions, value and names spelled out), as
    /// [`doc`](Self::doc) makes it.
    ///
    /// # Errors
    /// As [`series`](Self::series).
    pub fn point(
        &mut self,
        labels: &[(&str, &str)],
        ts_millis: i64,
        value: SampleValue,
    ) -> Result<Point> {
        self.doc(labels, ts_millis, value)?.to_point()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Filter, Index, PreparedItem, SearchRequest};

    fn store(index: &mut Index, docs: Vec<ParsedDoc>) -> Vec<u16> {
        let items = docs
            .into_iter()
            .enumerate()
            .map(|(i, doc)| PreparedItem::store(i as u64, Action::Create, None, doc))
            .collect();
        index
            .apply_prepared(items)
            .unwrap()
            .iter()
            .map(|r| r.http_status())
            .collect()
    }

    #[test]
    fn sample_batches_append_by_series_and_count_what_became_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::create(dir.path(), label_mapping().unwrap()).unwrap();
        index.limit_new_series_per_hour(Some(2));
        let mut lp = LabelPoints::new().unwrap();
        let f = SampleValue::F64(0.0);
        let a = lp.series(&[("__name__", "a"), ("h", "1")], &f).unwrap();
        let b = lp.series(&[("__name__", "b"), ("h", "1")], &f).unwrap();
        let c = lp.series(&[("__name__", "c"), ("h", "1")], &f).unwrap();
        let long = lp
            .series(&[("__name__", "n"), ("h", "1")], &SampleValue::I64(0))
            .unwrap();
        let mut first = SampleBatch::new(true);
        first.push(&a, 1000, SampleValue::F64(1.5)).unwrap();
        first.push(&a, 2000, SampleValue::F64(2.5)).unwrap();
        // A value of another type than the series': refused at once.
        assert!(first.push(&a, 3000, SampleValue::I64(3)).is_err());
        // A line that failed half way leaves nothing behind, its new series included.
        let mark = first.mark();
        first.push(&c, 1000, SampleValue::F64(9.0)).unwrap();
        first.truncate(mark);
        assert_eq!((first.len(), first.series_len()), (2, 1));
        assert!(!first.series_ids().any(|t| t == c.tsid()));
        let mut second = SampleBatch::new(true);
        second.push(&b, 1000, SampleValue::F64(7.0)).unwrap();
        second.push(&a, 1000, SampleValue::F64(1.5)).unwrap();
        // The third new series this hour is over the limit of 2.
        second.push(&long, 1000, SampleValue::I64(5)).unwrap();
        let tallies = index.append_samples(&[&first, &second]).unwrap();
        assert_eq!(
            (
                tallies[0].created,
                tallies[0].duplicates,
                tallies[0].rejected
            ),
            (2, 0, 0)
        );
        assert_eq!(
            (
                tallies[1].created,
                tallies[1].duplicates,
                tallies[1].rejected
            ),
            (1, 1, 1)
        );
        assert!(
            tallies[1]
                .first_rejection
                .as_deref()
                .is_some_and(|r| r.contains("max_new_series_per_hour")),
            "{tallies:?}"
        );
        // `index`: a sample stored again replaces the stored one.
        let mut again = SampleBatch::new(false);
        again.push(&a, 1000, SampleValue::F64(4.0)).unwrap();
        let t = index.append_samples(&[&again]).unwrap();
        assert_eq!((t[0].created, t[0].replaced), (0, 1));
        let counters = index.counters();
        assert_eq!(
            (
                counters.items.created,
                counters.items.duplicates,
                counters.items.replaced
            ),
            (3, 1, 1)
        );
        let res = index
            .query(&SearchRequest {
                filter: Filter::Terms {
                    field: METRIC_NAME_LABEL.into(),
                    values: vec!["a".into()],
                },
                size: 10,
                ..SearchRequest::default()
            })
            .unwrap();
        assert_eq!(res.total, 2);
    }

    #[test]
    fn an_integer_and_a_float_of_the_same_labels_are_one_series() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::create(dir.path(), label_mapping().unwrap()).unwrap();
        let mut lp = LabelPoints::new().unwrap();
        let labels = [("__name__", "restarts"), ("pod", "a")];
        let as_int = lp.series(&labels, &SampleValue::I64(0)).unwrap();
        let as_float = lp.series(&labels, &SampleValue::F64(0.0)).unwrap();
        let one = |s: &LabelSeries, ts: i64, v: SampleValue| {
            let mut b = SampleBatch::new(true);
            b.push(s, ts, v).unwrap();
            b
        };
        // Line protocol's `5i` first, then remote write's 5.0: one sample.
        let t = index
            .append_samples(&[&one(&as_int, 1000, SampleValue::I64(5))])
            .unwrap();
        assert_eq!(t[0].created, 1);
        let t = index
            .append_samples(&[&one(&as_float, 1000, SampleValue::F64(5.0))])
            .unwrap();
        assert_eq!((t[0].created, t[0].duplicates), (0, 1), "{t:?}");
        // A new float sample that is an integer joins the integer series; one that is
        // not is refused naming why, nothing stored.
        let t = index
            .append_samples(&[&one(&as_float, 2000, SampleValue::F64(6.0))])
            .unwrap();
        assert_eq!(t[0].created, 1);
        let t = index
            .append_samples(&[&one(&as_float, 3000, SampleValue::F64(6.5))])
            .unwrap();
        assert_eq!(t[0].rejected, 1);
        assert!(
            t[0].first_rejection
                .as_deref()
                .is_some_and(|r| r.contains("integers")),
            "{t:?}"
        );
        // The other way round in a fresh index: floats first, integers converted.
        let dir2 = tempfile::tempdir().unwrap();
        let mut other = Index::create(dir2.path(), label_mapping().unwrap()).unwrap();
        let (as_int2, as_float2) = (
            lp.series(&labels, &SampleValue::I64(0)).unwrap(),
            lp.series(&labels, &SampleValue::F64(0.0)).unwrap(),
        );
        other
            .append_samples(&[&one(&as_float2, 1000, SampleValue::F64(5.0))])
            .unwrap();
        let t = other
            .append_samples(&[&one(&as_int2, 1000, SampleValue::I64(5))])
            .unwrap();
        assert_eq!((t[0].created, t[0].duplicates), (0, 1), "{t:?}");
        let t = other
            .append_samples(&[&one(&as_int2, 2000, SampleValue::I64(7))])
            .unwrap();
        assert_eq!(t[0].created, 1);
        // Each index holds one series of these labels: 3 samples and 2.
        for (index, n) in [(&index, 2), (&other, 2)] {
            let res = index
                .query(&SearchRequest {
                    filter: Filter::Terms {
                        field: METRIC_NAME_LABEL.into(),
                        values: vec!["restarts".into()],
                    },
                    size: 10,
                    ..SearchRequest::default()
                })
                .unwrap();
            assert_eq!(res.total, n);
            assert_eq!(index.stats().unwrap().series, 1);
        }
    }

    #[test]
    fn a_series_resolved_in_one_index_is_looked_up_again_in_another() {
        let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut a = Index::create(da.path(), label_mapping().unwrap()).unwrap();
        let mut b = Index::create(db.path(), label_mapping().unwrap()).unwrap();
        let mut lp = LabelPoints::new().unwrap();
        let f = SampleValue::F64(0.0);
        let s1 = lp.series(&[("__name__", "one")], &f).unwrap();
        let s2 = lp.series(&[("__name__", "two")], &f).unwrap();
        let batch = |series: &[&LabelSeries]| {
            let mut out = SampleBatch::new(true);
            for s in series {
                out.push(s, 1000, SampleValue::F64(1.0)).unwrap();
            }
            out
        };
        // In a, s1 gets the first ref; in b, s2 does, so the refs s1 carries from a
        // would name s2 in b.
        a.append_samples(&[&batch(&[&s1, &s2])]).unwrap();
        b.append_samples(&[&batch(&[&s2])]).unwrap();
        let t = b.append_samples(&[&batch(&[&s1, &s2])]).unwrap();
        assert_eq!((t[0].created, t[0].duplicates), (1, 1));
        let names = |index: &Index, name: &str| {
            index
                .query(&SearchRequest {
                    filter: Filter::Terms {
                        field: METRIC_NAME_LABEL.into(),
                        values: vec![name.into()],
                    },
                    size: 10,
                    ..SearchRequest::default()
                })
                .unwrap()
                .total
        };
        assert_eq!((names(&b, "one"), names(&b, "two")), (1, 1));
        // A reopened index is another index: its refs are looked up again.
        b.close().unwrap();
        let mut b = Index::open(db.path()).unwrap();
        let t = b.append_samples(&[&batch(&[&s1, &s2])]).unwrap();
        assert_eq!(t[0].duplicates, 2);
        assert_eq!((names(&b, "one"), names(&b, "two")), (1, 1));
    }

    #[test]
    fn samples_dedup_and_are_found_by_label_filters() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::create(dir.path(), label_mapping().unwrap()).unwrap();
        let mut lp = LabelPoints::new().unwrap();
        let stale = f64::from_bits(0x7ff0_0000_0000_0002);
        let a = lp
            .doc(
                &[("job", "x"), ("__name__", "up")],
                1000,
                SampleValue::F64(1.0),
            )
            .unwrap();
        let b = lp
            .doc(
                &[("__name__", "up"), ("job", "x")],
                2000,
                SampleValue::F64(stale),
            )
            .unwrap();
        let c = lp
            .doc(
                &[("__name__", "up"), ("job", "y"), ("empty", "")],
                1000,
                SampleValue::I64(7),
            )
            .unwrap();
        assert_eq!(a.tsid(), b.tsid(), "label order does not change the series");
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
