//! Configuring and computing tsids: [`TsidBuilder`] and [`TsidComputer`].

use std::net::IpAddr;

use serde_json::Value;
use siphasher::sip::SipHasher13;
use siphasher::sip128::SipHasher13 as SipHasher13x128;

use crate::error::{Error, Result};
use crate::path::{check_path, for_each_leaf, lookup};
use crate::synthetic::SyntheticId;
use crate::tsid::{
    NAMES_KEY, TSID_KEY, TSID_LEN, TSID_PREFIX_LEN, TSID_PREFIX_VALUES, Tsid, VALUES_KEY,
};
use crate::value::{
    DimValue, MAX_DIMENSIONS, check_name, encode_int, encode_ip, encode_keyword, encode_name,
    encode_uint, encode_value, json_type,
};

/// How a configured dimension reads JSON values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DimKind {
    /// The JSON type decides: string → keyword, integer → integer, boolean
    /// → boolean.
    #[default]
    Auto,
    /// A string holding an IPv4 or IPv6 address, normalised (IPv4 is mapped
    /// into IPv6), so `10.0.0.1` and `::ffff:10.0.0.1` are the same value.
    Ip,
}

/// Which metric names join the series identity.
///
/// Two documents with the same dimensions and timestamp but different
/// metrics (`{"cpu":1}` and `{"mem":2}`, sent separately) are different data
/// points. With metric names in the identity they get different tsids, so
/// neither is dropped as a duplicate of the other (an Elasticsearch TSDB
/// pitfall).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricNames {
    /// Metric names do not join the identity: the tsid is a function of the
    /// dimensions alone.
    Off,
    /// The listed metric paths that are present (and not `null`) join.
    Listed(Vec<String>),
    /// Every leaf field that is neither a dimension nor excluded is a metric
    /// and its name joins. The default, excluding `@timestamp`.
    AllOtherFields {
        /// Fields that are neither dimensions nor metrics (the timestamp,
        /// free-text labels).
        exclude: Vec<String>,
    },
}

impl Default for MetricNames {
    fn default() -> Self {
        MetricNames::AllOtherFields {
            exclude: vec!["@timestamp".to_owned()],
        }
    }
}

/// Configuration of a [`TsidComputer`]: which fields are dimensions and
/// which metric names join the identity.
///
/// ```
/// use tidemark_tsid::{MetricNames, TsidBuilder};
///
/// let mut tsids = TsidBuilder::new()
///     .dimension("host.name")
///     .ip_dimension("host.ip")
///     .metric_names(MetricNames::Off)
///     .build()?;
/// let doc = serde_json::json!({"host": {"name": "a", "ip": "10.0.0.1"}, "cpu": 0.5});
/// let tsid = tsids.tsid(&doc)?;
/// # Ok::<(), tidemark_tsid::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct TsidBuilder {
    dims: Vec<(String, DimKind)>,
    metrics: MetricNames,
}

impl TsidBuilder {
    /// A builder with no dimensions and the default [`MetricNames`].
    pub fn new() -> TsidBuilder {
        TsidBuilder::default()
    }

    /// Adds a dimension read by its JSON type ([`DimKind::Auto`]).
    pub fn dimension(self, path: impl Into<String>) -> TsidBuilder {
        self.dimension_of_kind(path, DimKind::Auto)
    }

    /// Adds an IP address dimension ([`DimKind::Ip`]).
    pub fn ip_dimension(self, path: impl Into<String>) -> TsidBuilder {
        self.dimension_of_kind(path, DimKind::Ip)
    }

    /// Adds a dimension of the given kind.
    pub fn dimension_of_kind(mut self, path: impl Into<String>, kind: DimKind) -> TsidBuilder {
        self.dims.push((path.into(), kind));
        self
    }

    /// Adds several [`DimKind::Auto`] dimensions.
    pub fn dimensions<I, S>(mut self, paths: I) -> TsidBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.dims
            .extend(paths.into_iter().map(|p| (p.into(), DimKind::Auto)));
        self
    }

    /// Sets which metric names join the identity (default:
    /// [`MetricNames::AllOtherFields`] excluding `@timestamp`).
    pub fn metric_names(mut self, metrics: MetricNames) -> TsidBuilder {
        self.metrics = metrics;
        self
    }

    /// Checks the configuration and returns a computer.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for an empty path or segment,
    /// [`Error::NameTooLong`], [`Error::DuplicatePath`] for a path given
    /// twice (as a dimension or a listed metric, or as both), and
    /// [`Error::TooMany`] past [`MAX_DIMENSIONS`].
    pub fn build(self) -> Result<TsidComputer> {
        let mut dims = self.dims;
        for (path, _) in &dims {
            check_path(path)?;
        }
        check_count("dimensions", dims.len())?;
        dims.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = dims.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::DuplicatePath {
                path: w[0].0.clone(),
            });
        }
        let metrics = match self.metrics {
            MetricNames::Off => MetricMode::Off,
            MetricNames::Listed(mut names) => {
                for name in &names {
                    check_path(name)?;
                    if dims.binary_search_by(|d| d.0.as_str().cmp(name)).is_ok() {
                        return Err(Error::DuplicatePath { path: name.clone() });
                    }
                }
                check_count("metric names", names.len())?;
                names.sort();
                if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
                    return Err(Error::DuplicatePath { path: w[0].clone() });
                }
                MetricMode::Listed(names)
            }
            MetricNames::AllOtherFields { mut exclude } => {
                exclude.sort();
                exclude.dedup();
                MetricMode::AllOther { exclude }
            }
        };
        Ok(TsidComputer {
            dims,
            metrics,
            scratch: Scratch::default(),
        })
    }
}

fn check_count(what: &'static str, count: usize) -> Result<()> {
    if count > MAX_DIMENSIONS {
        return Err(Error::TooMany {
            what,
            count,
            max: MAX_DIMENSIONS,
        });
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum MetricMode {
    Off,
    Listed(Vec<String>),
    AllOther { exclude: Vec<String> },
}

/// Reusable buffers: after the first few calls, computing a tsid allocates
/// nothing.
#[derive(Debug, Clone, Default)]
struct Scratch {
    /// The canonical form being hashed.
    canon: Vec<u8>,
    /// The sorted dimension names, length-prefixed, for the names byte.
    names: Vec<u8>,
    /// Spans of the leading values in `canon`.
    leading: [(usize, usize); TSID_PREFIX_VALUES],
    /// Metric names found, back to back, and their spans.
    metric_buf: Vec<u8>,
    metric_spans: Vec<(usize, usize)>,
    /// Dotted name of the leaf being visited.
    path: String,
    /// Sort order of typed pairs.
    order: Vec<usize>,
}

/// Computes tsids and synthetic ids, reusing its buffers between calls.
///
/// Built by [`TsidBuilder`]. One computer per thread: it is `Send` and
/// `Clone` but its methods take `&mut self`.
#[derive(Debug, Clone)]
pub struct TsidComputer {
    /// Dimensions sorted by path, so documents are read in canonical order
    /// and need no sort per call.
    dims: Vec<(String, DimKind)>,
    metrics: MetricMode,
    scratch: Scratch,
}

impl TsidComputer {
    /// The tsid of a JSON document.
    ///
    /// Absent and `null` dimensions are skipped; at least one must be
    /// present.
    ///
    /// # Errors
    ///
    /// [`Error::NotAnObject`], [`Error::NoDimensions`],
    /// [`Error::NotAScalar`], [`Error::FloatDimension`],
    /// [`Error::ValueTooLong`], [`Error::InvalidIp`],
    /// [`Error::DuplicatePath`] (a field held both dotted and nested), and
    /// [`Error::NameTooLong`] or [`Error::TooMany`] for metric names.
    pub fn tsid(&mut self, doc: &Value) -> Result<Tsid> {
        let Value::Object(obj) = doc else {
            return Err(Error::NotAnObject {
                found: json_type(doc),
            });
        };
        let s = &mut self.scratch;
        s.canon.clear();
        s.names.clear();
        s.canon.extend_from_slice(&[0, 0]);
        let mut count: usize = 0;
        for (path, kind) in &self.dims {
            let Some(v) = lookup(obj, path)? else {
                continue;
            };
            encode_name(path, &mut s.canon)?;
            encode_name(path, &mut s.names)?;
            let start = s.canon.len();
            encode_json(path, *kind, v, &mut s.canon)?;
            if let Some(span) = s.leading.get_mut(count) {
                *span = (start, s.canon.len());
            }
            count += 1;
        }
        if count == 0 {
            return Err(Error::NoDimensions {
                expected: self.dims.len(),
            });
        }
        write_count(&mut s.canon, 0, count)?;

        let metrics_at = s.canon.len();
        s.canon.extend_from_slice(&[0, 0]);
        match &self.metrics {
            MetricMode::Off => {}
            MetricMode::Listed(names) => {
                let mut n = 0;
                for name in names {
                    if lookup(obj, name)?.is_some() {
                        encode_name(name, &mut s.canon)?;
                        n += 1;
                    }
                }
                write_count(&mut s.canon, metrics_at, n)?;
            }
            MetricMode::AllOther { exclude } => {
                s.metric_buf.clear();
                s.metric_spans.clear();
                let dims = &self.dims;
                let (buf, spans) = (&mut s.metric_buf, &mut s.metric_spans);
                s.path.clear();
                for_each_leaf(obj, &mut s.path, &mut |name, _| {
                    let is_dim = dims.binary_search_by(|d| d.0.as_str().cmp(name)).is_ok();
                    let excluded = exclude.binary_search_by(|e| e.as_str().cmp(name)).is_ok();
                    if !is_dim && !excluded {
                        check_name(name)?;
                        let start = buf.len();
                        buf.extend_from_slice(name.as_bytes());
                        spans.push((start, buf.len()));
                    }
                    Ok(())
                })?;
                encode_metric_names(s, metrics_at)?;
            }
        }
        Ok(finish(s, count))
    }

    /// The tsid of typed `(name, value)` dimension pairs and, unless metric
    /// names are [`MetricNames::Off`], the given metric names. Pairs and
    /// names may come in any order; dotted names match the dotted paths of
    /// JSON documents, so `[("host.name", "a".into())]` gives the same tsid
    /// as `{"host":{"name":"a"}}`.
    ///
    /// # Errors
    ///
    /// [`Error::NoDimensions`] for no pair, [`Error::DuplicatePath`] for a
    /// name given twice, [`Error::InvalidPath`], [`Error::NameTooLong`],
    /// [`Error::ValueTooLong`], [`Error::InvalidUtf8`],
    /// [`Error::FloatDimension`], [`Error::NotANumber`] and
    /// [`Error::TooMany`].
    pub fn tsid_from_pairs(
        &mut self,
        dims: &[(&str, DimValue<'_>)],
        metric_names: &[&str],
    ) -> Result<Tsid> {
        if dims.is_empty() {
            return Err(Error::NoDimensions { expected: 0 });
        }
        check_count("dimensions", dims.len())?;
        let s = &mut self.scratch;
        s.order.clear();
        s.order.extend(0..dims.len());
        s.order
            .sort_unstable_by_key(|&i| dims.get(i).map(|(name, _)| *name));
        s.canon.clear();
        s.names.clear();
        s.canon.extend_from_slice(&[0, 0]);
        let mut previous: Option<&str> = None;
        for (count, &i) in s.order.iter().enumerate() {
            let Some(&(name, value)) = dims.get(i) else {
                continue;
            };
            if previous == Some(name) {
                return Err(Error::DuplicatePath {
                    path: name.to_owned(),
                });
            }
            previous = Some(name);
            check_path(name)?;
            encode_name(name, &mut s.canon)?;
            encode_name(name, &mut s.names)?;
            let start = s.canon.len();
            encode_value(name, value, &mut s.canon)?;
            if let Some(span) = s.leading.get_mut(count) {
                *span = (start, s.canon.len());
            }
        }
        write_count(&mut s.canon, 0, dims.len())?;

        let metrics_at = s.canon.len();
        s.canon.extend_from_slice(&[0, 0]);
        if !matches!(self.metrics, MetricMode::Off) {
            s.metric_buf.clear();
            s.metric_spans.clear();
            for name in metric_names {
                check_path(name)?;
                let start = s.metric_buf.len();
                s.metric_buf.extend_from_slice(name.as_bytes());
                s.metric_spans.push((start, s.metric_buf.len()));
            }
            encode_metric_names(s, metrics_at)?;
        }
        Ok(finish(s, dims.len()))
    }

    /// The synthetic `_id` of a document: its tsid and `ts_millis`.
    ///
    /// # Errors
    ///
    /// As [`tsid`](Self::tsid).
    pub fn synthetic_id(&mut self, doc: &Value, ts_millis: i64) -> Result<SyntheticId> {
        Ok(SyntheticId::new(self.tsid(doc)?, ts_millis))
    }

    /// Appends the tsid of each document to `out`. With enough capacity
    /// reserved in `out`, this allocates nothing once the computer's buffers
    /// have grown to fit the documents.
    ///
    /// # Errors
    ///
    /// [`Error::InBatch`] with the first failing document's index; `out`
    /// then holds the tsids of the documents before it.
    pub fn tsid_batch<'d, I>(&mut self, docs: I, out: &mut Vec<Tsid>) -> Result<()>
    where
        I: IntoIterator<Item = &'d Value>,
    {
        for (index, doc) in docs.into_iter().enumerate() {
            match self.tsid(doc) {
                Ok(t) => out.push(t),
                Err(e) => return Err(in_batch(index, e)),
            }
        }
        Ok(())
    }

    /// Appends the synthetic id of each `(document, ts_millis)` to `out`;
    /// allocation and errors as [`tsid_batch`](Self::tsid_batch).
    ///
    /// # Errors
    ///
    /// [`Error::InBatch`] with the first failing document's index.
    pub fn synthetic_id_batch<'d, I>(&mut self, docs: I, out: &mut Vec<SyntheticId>) -> Result<()>
    where
        I: IntoIterator<Item = (&'d Value, i64)>,
    {
        for (index, (doc, ts_millis)) in docs.into_iter().enumerate() {
            match self.synthetic_id(doc, ts_millis) {
                Ok(id) => out.push(id),
                Err(e) => return Err(in_batch(index, e)),
            }
        }
        Ok(())
    }
}

fn in_batch(index: usize, e: Error) -> Error {
    Error::InBatch {
        index,
        source: Box::new(e),
    }
}

/// Writes `count` as `u16` big-endian at `at` in `canon`.
fn write_count(canon: &mut [u8], at: usize, count: usize) -> Result<()> {
    check_count("dimensions", count)?;
    let bytes = u16::try_from(count)
        .map_err(|_| Error::TooMany {
            what: "dimensions",
            count,
            max: MAX_DIMENSIONS,
        })?
        .to_be_bytes();
    if let Some(slot) = canon.get_mut(at..at + 2) {
        slot.copy_from_slice(&bytes);
    }
    Ok(())
}

/// Sorts the collected metric names, rejects a name seen twice and appends
/// them to the canonical form with their count at `at`.
fn encode_metric_names(s: &mut Scratch, at: usize) -> Result<()> {
    let buf = &s.metric_buf;
    let name_of = |span: &(usize, usize)| buf.get(span.0..span.1).unwrap_or_default();
    s.metric_spans
        .sort_unstable_by(|a, b| name_of(a).cmp(name_of(b)));
    check_count("metric names", s.metric_spans.len())?;
    let mut previous: Option<&[u8]> = None;
    for span in &s.metric_spans {
        let name = name_of(span);
        if previous == Some(name) {
            return Err(Error::DuplicatePath {
                path: String::from_utf8_lossy(name).into_owned(),
            });
        }
        previous = Some(name);
        // Names were checked when collected; they are at most
        // MAX_NAME_LEN bytes, so the length fits u16.
        let len = u16::try_from(name.len()).unwrap_or(u16::MAX);
        s.canon.extend_from_slice(&len.to_be_bytes());
        s.canon.extend_from_slice(name);
    }
    let count = s.metric_spans.len();
    let bytes = u16::try_from(count).unwrap_or(u16::MAX).to_be_bytes();
    if let Some(slot) = s.canon.get_mut(at..at + 2) {
        slot.copy_from_slice(&bytes);
    }
    Ok(())
}

/// Hashes the canonical form into a tsid.
fn finish(s: &Scratch, count: usize) -> Tsid {
    let mut out = [0u8; TSID_LEN];
    let names = SipHasher13::new_with_key(&NAMES_KEY).hash(&s.names);
    out[0] = names.to_be_bytes()[0];
    let values = SipHasher13::new_with_key(&VALUES_KEY);
    for (i, span) in s.leading.iter().enumerate().take(count) {
        let v = s.canon.get(span.0..span.1).unwrap_or_default();
        if let Some(b) = out.get_mut(1 + i) {
            *b = values.hash(v).to_be_bytes()[0];
        }
    }
    let h = SipHasher13x128::new_with_key(&TSID_KEY).hash(&s.canon);
    out[TSID_PREFIX_LEN..].copy_from_slice(&h.as_bytes());
    Tsid::from_bytes(out)
}

/// Encodes a JSON dimension value (never `null`: lookups skip it).
fn encode_json(name: &str, kind: DimKind, v: &Value, out: &mut Vec<u8>) -> Result<()> {
    match (kind, v) {
        (_, Value::Array(_) | Value::Object(_)) => Err(Error::NotAScalar {
            name: name.to_owned(),
            found: json_type(v),
        }),
        (DimKind::Ip, Value::String(s)) => match s.parse::<IpAddr>() {
            Ok(ip) => {
                encode_ip(ip, out);
                Ok(())
            }
            Err(_) => Err(invalid_ip(name, v)),
        },
        (DimKind::Ip, _) => Err(invalid_ip(name, v)),
        (_, Value::String(s)) => encode_keyword(name, s.as_bytes(), out),
        (_, Value::Bool(b)) => encode_value(name, DimValue::Bool(*b), out),
        (_, Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                encode_int(i, out);
                Ok(())
            } else if let Some(u) = n.as_u64() {
                encode_uint(u, out);
                Ok(())
            } else {
                encode_value(name, DimValue::F64(n.as_f64().unwrap_or(f64::NAN)), out)
            }
        }
        (_, Value::Null) => Err(Error::NotAScalar {
            name: name.to_owned(),
            found: "null",
        }),
    }
}

fn invalid_ip(name: &str, v: &Value) -> Error {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Error::InvalidIp {
        name: name.to_owned(),
        value: crate::error::cut(&text, 64),
    }
}
