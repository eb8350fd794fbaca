//! Configuring and computing tsids: [`TsidBuilder`] and [`TsidComputer`].

use std::net::IpAddr;

use serde_json::{Map, Value};
use siphasher::sip::SipHasher13;
use siphasher::sip128::SipHasher13 as SipHasher13x128;

use crate::error::{Error, Result};
use crate::path::{check_path, lookup};
use crate::synthetic::SyntheticId;
use crate::tsid::{
    NAMES_KEY, TSID_KEY, TSID_LEN, TSID_PREFIX_LEN, TSID_PREFIX_VALUES, Tsid, VALUES_KEY,
};
use crate::value::{
    DimValue, MAX_DIMENSIONS, MAX_NAME_LEN, check_name, encode_int, encode_ip, encode_keyword,
    encode_name, encode_uint, encode_value, json_type,
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
        for (path, _) in &self.dims {
            check_path(path)?;
        }
        check_count("dimensions", self.dims.len())?;
        let mut dims = Vec::with_capacity(self.dims.len());
        for (declared, (path, kind)) in self.dims.into_iter().enumerate() {
            let mut name_enc = Vec::with_capacity(path.len() + 2);
            encode_name(&path, &mut name_enc)?;
            dims.push(Dim {
                path,
                kind,
                name_enc,
                declared,
            });
        }
        dims.sort_by(|a, b| a.path.cmp(&b.path));
        if let Some(w) = dims.windows(2).find(|w| w[0].path == w[1].path) {
            return Err(Error::DuplicatePath {
                path: w[0].path.clone(),
            });
        }
        let mut sorted_of_declared = vec![0; dims.len()];
        for (sorted, d) in dims.iter().enumerate() {
            if let Some(slot) = sorted_of_declared.get_mut(d.declared) {
                *slot = sorted;
            }
        }
        let is_dim = |name: &str| dims.binary_search_by(|d| d.path.as_str().cmp(name)).is_ok();
        let mut skip = Vec::new();
        let metrics = match self.metrics {
            MetricNames::Off => MetricMode::Off,
            MetricNames::Listed(mut names) => {
                for name in &names {
                    check_path(name)?;
                    if is_dim(name) {
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
            MetricNames::AllOtherFields { exclude } => {
                // One sorted list of the leaves that are not metrics, so a
                // leaf costs one binary search.
                skip.extend(
                    dims.iter()
                        .enumerate()
                        .map(|(i, d)| (d.path.clone(), Skip::Dim(i))),
                );
                for e in exclude {
                    if !is_dim(&e) {
                        skip.push((e, Skip::Excluded));
                    }
                }
                skip.sort_by(|a, b| a.0.cmp(&b.0));
                skip.dedup_by(|a, b| a.0 == b.0);
                MetricMode::AllOther
            }
        };
        Ok(TsidComputer {
            dims,
            sorted_of_declared,
            metrics,
            skip: PathTrie::new(skip),
            names_memo: Vec::new(),
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

/// What a field of the `skip` table is.
#[derive(Debug, Clone, Copy)]
enum Skip {
    /// The configured dimension at this sorted index.
    Dim(usize),
    /// Neither a dimension nor a metric.
    Excluded,
}

#[derive(Debug, Clone)]
enum MetricMode {
    Off,
    Listed(Vec<String>),
    AllOther,
}

/// A configured dimension.
#[derive(Debug, Clone)]
struct Dim {
    path: String,
    kind: DimKind,
    /// The name as the canonical form writes it: `u16` length, then bytes.
    name_enc: Vec<u8>,
    /// Its position in the builder's declaration order.
    declared: usize,
}

/// Reusable buffers: after the first few calls, computing a tsid allocates
/// nothing.
#[derive(Debug, Clone, Default)]
struct Scratch {
    /// The canonical form being hashed.
    canon: Vec<u8>,
    /// The sorted dimension names, length-prefixed, for the names digest.
    names: Vec<u8>,
    /// Spans of the leading values in `canon`.
    leading: [(usize, usize); TSID_PREFIX_VALUES],
    /// Sorted indices of the configured dimensions present.
    present: Vec<usize>,
    /// Metric names found, back to back, and their spans.
    metric_buf: Vec<u8>,
    metric_spans: Vec<(usize, usize)>,
    /// Sort order of typed pairs.
    order: Vec<usize>,
    /// The names section of the previous `tsid_from_pairs` call and its
    /// digest.
    last_names: Vec<u8>,
    last_digest: [u8; 16],
    /// Value encodings found by the one-pass walk, and each configured
    /// dimension's span in it (`NO_SPAN` when absent).
    vals: Vec<u8>,
    slots: Vec<(usize, usize)>,
    /// The metric names of the previous successful call, as given (each
    /// `u32` length-prefixed), and the metrics section they encoded to:
    /// documents of one stream mostly carry the same metrics, so the sort and
    /// checks are skipped when the names repeat.
    last_metric_input: Vec<u8>,
    last_metric_section: Vec<u8>,
}

const NO_SPAN: (usize, usize) = (usize::MAX, 0);

/// Start of the canonical form: room for the 16-byte names digest, then the
/// `u16` dimension count.
const CANON_HEADER: [u8; 18] = [0; 18];
/// Offset of the dimension count in the canonical form.
const COUNT_AT: usize = 16;

/// Most distinct sets of present dimensions whose names digest is memoised.
const NAMES_MEMO_CAP: usize = 256;

/// Computes tsids and synthetic ids, reusing its buffers between calls.
///
/// Built by [`TsidBuilder`]. One computer per thread: it is `Send` and
/// `Clone` but its methods take `&mut self`.
#[derive(Debug, Clone)]
pub struct TsidComputer {
    /// Dimensions sorted by path, so documents are read in canonical order
    /// and need no sort per call.
    dims: Vec<Dim>,
    /// Declaration index → index in `dims`.
    sorted_of_declared: Vec<usize>,
    metrics: MetricMode,
    /// Dimension paths and excluded fields (`AllOther` mode).
    skip: PathTrie,
    /// Names digest of each set of present dimensions seen (as a bit mask of
    /// sorted indices, for configurations of at most 64 dimensions): the
    /// set is usually the same from one document to the next.
    names_memo: Vec<(u64, [u8; 16])>,
    scratch: Scratch,
}

impl TsidComputer {
    /// The configured dimension paths, in the order they were declared
    /// (the order [`tsid_from_values`](Self::tsid_from_values) reads).
    pub fn dimension_paths(&self) -> impl Iterator<Item = &str> {
        self.sorted_of_declared
            .iter()
            .filter_map(|&i| self.dims.get(i).map(|d| d.path.as_str()))
    }

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
        if matches!(self.metrics, MetricMode::AllOther) {
            return self.tsid_one_pass(obj);
        }
        let s = &mut self.scratch;
        s.canon.clear();
        s.present.clear();
        s.canon.extend_from_slice(&CANON_HEADER);
        for (i, dim) in self.dims.iter().enumerate() {
            let Some(v) = lookup(obj, &dim.path)? else {
                continue;
            };
            let start = s.canon.len();
            encode_json(&dim.path, dim.kind, v, &mut s.canon)?;
            if let Some(span) = s.leading.get_mut(s.present.len()) {
                *span = (start, s.canon.len());
            }
            s.present.push(i);
        }
        let count = s.present.len();
        if count == 0 {
            return Err(Error::NoDimensions {
                expected: self.dims.len(),
            });
        }
        write_count(&mut s.canon, COUNT_AT, count)?;

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
            // Handled by `tsid_one_pass`.
            MetricMode::AllOther => {}
        }
        let names = memo_names_digest(&self.dims, &mut self.names_memo, &mut self.scratch);
        Ok(finish(&mut self.scratch, count, names))
    }

    /// [`tsid`](Self::tsid) when every other field is a metric: one walk
    /// over the document finds the dimensions and the metric names, instead
    /// of a lookup per dimension and then a walk.
    fn tsid_one_pass(&mut self, obj: &Map<String, Value>) -> Result<Tsid> {
        let s = &mut self.scratch;
        s.vals.clear();
        s.slots.clear();
        s.slots.resize(self.dims.len(), NO_SPAN);
        s.metric_buf.clear();
        s.metric_spans.clear();
        let mut walk = Walk {
            dims: &self.dims,
            skip: &self.skip,
            vals: &mut s.vals,
            slots: &mut s.slots,
            metric_buf: &mut s.metric_buf,
            metric_spans: &mut s.metric_spans,
        };
        walk.object(obj, Some(0), None, false)?;

        s.canon.clear();
        s.present.clear();
        s.canon.extend_from_slice(&CANON_HEADER);
        for (i, &(start, end)) in s.slots.iter().enumerate() {
            let Some(v) = s.vals.get(start..end) else {
                continue;
            };
            let at = s.canon.len();
            s.canon.extend_from_slice(v);
            if let Some(span) = s.leading.get_mut(s.present.len()) {
                *span = (at, s.canon.len());
            }
            s.present.push(i);
        }
        let count = s.present.len();
        if count == 0 {
            return Err(Error::NoDimensions {
                expected: self.dims.len(),
            });
        }
        write_count(&mut s.canon, COUNT_AT, count)?;
        let metrics_at = s.canon.len();
        s.canon.extend_from_slice(&[0, 0]);
        encode_metric_names(s, metrics_at)?;
        let names = memo_names_digest(&self.dims, &mut self.names_memo, &mut self.scratch);
        Ok(finish(&mut self.scratch, count, names))
    }

    /// The tsid of values for the configured dimensions, given in
    /// declaration order ([`dimension_paths`](Self::dimension_paths)), `None`
    /// for an absent one, and of the given metric names (unless metric names
    /// are [`MetricNames::Off`]). The fastest path: names are encoded once
    /// at build time and nothing is sorted. Equal to [`tsid`](Self::tsid) of
    /// a document holding the same values, and to
    /// [`tsid_from_pairs`](Self::tsid_from_pairs). A [`DimKind::Ip`]
    /// dimension takes a [`DimValue::Ip`] here: values are already typed.
    ///
    /// # Errors
    ///
    /// [`Error::WrongValueCount`] unless there is one value per configured
    /// dimension; [`Error::NoDimensions`] when all are `None`; the value
    /// errors of [`tsid_from_pairs`](Self::tsid_from_pairs).
    pub fn tsid_from_values(
        &mut self,
        values: &[Option<DimValue<'_>>],
        metric_names: &[&str],
    ) -> Result<Tsid> {
        if values.len() != self.dims.len() {
            return Err(Error::WrongValueCount {
                expected: self.dims.len(),
                found: values.len(),
            });
        }
        let s = &mut self.scratch;
        s.canon.clear();
        s.present.clear();
        s.canon.extend_from_slice(&CANON_HEADER);
        for (i, dim) in self.dims.iter().enumerate() {
            let Some(Some(v)) = values.get(dim.declared) else {
                continue;
            };
            let start = s.canon.len();
            encode_value(&dim.path, *v, &mut s.canon)?;
            if let Some(span) = s.leading.get_mut(s.present.len()) {
                *span = (start, s.canon.len());
            }
            s.present.push(i);
        }
        let count = s.present.len();
        if count == 0 {
            return Err(Error::NoDimensions {
                expected: self.dims.len(),
            });
        }
        write_count(&mut s.canon, COUNT_AT, count)?;
        self.push_metric_names(metric_names)?;
        let names = memo_names_digest(&self.dims, &mut self.names_memo, &mut self.scratch);
        Ok(finish(&mut self.scratch, count, names))
    }

    /// The tsid of typed `(name, value)` dimension pairs and, unless metric
    /// names are [`MetricNames::Off`], the given metric names. Pairs and
    /// names may come in any order; dotted names match the dotted paths of
    /// JSON documents, so `[("host.name", "a".into())]` gives the same tsid
    /// as `{"host":{"name":"a"}}`. Needs no configured dimension.
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
        // Callers often pass pairs already sorted: checking is cheaper than
        // sorting.
        if !dims.is_sorted_by(|a, b| a.0 <= b.0) {
            s.order
                .sort_unstable_by_key(|&i| dims.get(i).map(|(name, _)| *name));
        }
        s.canon.clear();
        s.names.clear();
        s.canon.extend_from_slice(&CANON_HEADER);
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
            encode_name(name, &mut s.names)?;
            let start = s.canon.len();
            encode_value(name, value, &mut s.canon)?;
            if let Some(span) = s.leading.get_mut(count) {
                *span = (start, s.canon.len());
            }
        }
        write_count(&mut s.canon, COUNT_AT, dims.len())?;
        self.push_metric_names(metric_names)?;
        // Pairs usually repeat the previous call's names: comparing bytes is
        // cheaper than hashing them.
        let s = &mut self.scratch;
        let names = if s.names == s.last_names {
            s.last_digest
        } else {
            let d = names_digest(&s.names);
            s.last_names.clear();
            s.last_names.extend_from_slice(&s.names);
            s.last_digest = d;
            d
        };
        Ok(finish(&mut self.scratch, dims.len(), names))
    }

    /// Appends the metric section for explicitly given metric names.
    fn push_metric_names(&mut self, metric_names: &[&str]) -> Result<()> {
        let s = &mut self.scratch;
        let metrics_at = s.canon.len();
        if matches!(self.metrics, MetricMode::Off) {
            s.canon.extend_from_slice(&[0, 0]);
            return Ok(());
        }
        if !s.last_metric_section.is_empty() && same_names(&s.last_metric_input, metric_names) {
            s.canon.extend_from_slice(&s.last_metric_section);
            return Ok(());
        }
        s.canon.extend_from_slice(&[0, 0]);
        s.metric_buf.clear();
        s.metric_spans.clear();
        for name in metric_names {
            check_name(name)?;
            let start = s.metric_buf.len();
            s.metric_buf.extend_from_slice(name.as_bytes());
            s.metric_spans.push((start, s.metric_buf.len()));
        }
        encode_metric_names(s, metrics_at)?;
        s.last_metric_input.clear();
        for name in metric_names {
            s.last_metric_input
                .extend_from_slice(&(name.len() as u32).to_le_bytes());
            s.last_metric_input.extend_from_slice(name.as_bytes());
        }
        s.last_metric_section.clear();
        s.last_metric_section
            .extend_from_slice(s.canon.get(metrics_at..).unwrap_or_default());
        Ok(())
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

    /// Appends the tsid of each row of values (as in
    /// [`tsid_from_values`](Self::tsid_from_values), with the same metric
    /// names for every row) to `out`. Allocation-free once warm, with enough
    /// capacity in `out`.
    ///
    /// # Errors
    ///
    /// [`Error::InBatch`] with the first failing row's index.
    pub fn tsid_values_batch<'r, 'v: 'r, I>(
        &mut self,
        rows: I,
        metric_names: &[&str],
        out: &mut Vec<Tsid>,
    ) -> Result<()>
    where
        I: IntoIterator<Item = &'r [Option<DimValue<'v>>]>,
    {
        for (index, row) in rows.into_iter().enumerate() {
            match self.tsid_from_values(row, metric_names) {
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

/// The names digest of the configured dimensions in `s.present`,
/// memoised by presence mask when the configuration has at most 64
/// dimensions.
/// Whether `names` are, in order, the names `memo` holds (each `u32` LE
/// length-prefixed).
fn same_names(mut memo: &[u8], names: &[&str]) -> bool {
    for name in names {
        let Some((len, rest)) = memo.split_first_chunk::<4>() else {
            return false;
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len != name.len() || rest.get(..len) != Some(name.as_bytes()) {
            return false;
        }
        memo = rest.get(len..).unwrap_or_default();
    }
    memo.is_empty()
}

fn memo_names_digest(dims: &[Dim], memo: &mut Vec<(u64, [u8; 16])>, s: &mut Scratch) -> [u8; 16] {
    let mask = if dims.len() <= 64 {
        Some(
            s.present
                .iter()
                .fold(0u64, |m, &i| m | 1u64.checked_shl(i as u32).unwrap_or(0)),
        )
    } else {
        None
    };
    if let Some(mask) = mask
        && let Some(&(_, d)) = memo.iter().find(|(m, _)| *m == mask)
    {
        return d;
    }
    s.names.clear();
    for &i in &s.present {
        if let Some(d) = dims.get(i) {
            s.names.extend_from_slice(&d.name_enc);
        }
    }
    let d = names_digest(&s.names);
    if let Some(mask) = mask
        && memo.len() < NAMES_MEMO_CAP
    {
        memo.push((mask, d));
    }
    d
}

/// SipHash-1-3-128 of the sorted, length-prefixed dimension names.
fn names_digest(names: &[u8]) -> [u8; 16] {
    SipHasher13x128::new_with_key(&NAMES_KEY)
        .hash(names)
        .as_bytes()
}

/// The configured paths (dimensions, excluded fields) as a trie of their
/// dot-separated segments, walked along with the document: a field under an
/// object that no configured path enters (the metrics, usually) is known to
/// be a metric without any lookup, and the others cost a few comparisons of
/// short segments.
#[derive(Debug, Clone)]
struct PathTrie {
    /// Node 0 is the root.
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Clone, Default)]
struct TrieNode {
    children: Vec<(String, usize)>,
    kind: Option<Skip>,
}

impl PathTrie {
    fn new(entries: Vec<(String, Skip)>) -> PathTrie {
        let mut trie = PathTrie {
            nodes: vec![TrieNode::default()],
        };
        for (path, kind) in entries {
            let mut node = 0;
            for seg in path.split('.') {
                node = match trie.child(node, seg) {
                    Some(c) => c,
                    None => {
                        let c = trie.nodes.len();
                        trie.nodes.push(TrieNode::default());
                        if let Some(n) = trie.nodes.get_mut(node) {
                            n.children.push((seg.to_owned(), c));
                        }
                        c
                    }
                };
            }
            if let Some(n) = trie.nodes.get_mut(node) {
                n.kind = Some(kind);
            }
        }
        trie
    }

    fn child(&self, node: usize, seg: &str) -> Option<usize> {
        let children = &self.nodes.get(node)?.children;
        children
            .iter()
            .find(|(s, _)| segment_eq(s.as_bytes(), seg.as_bytes()))
            .map(|&(_, c)| c)
    }

    /// The node reached from `node` along the segments of `key` (which may
    /// itself hold dots), if any configured path goes there.
    fn descend(&self, node: Option<usize>, key: &str) -> Option<usize> {
        let mut n = node?;
        let mut rest = key;
        // A byte scan: keys are short, and `str::split` costs more here
        // than the lookups.
        loop {
            match rest.as_bytes().iter().position(|&b| b == b'.') {
                None => return self.child(n, rest),
                Some(i) => {
                    n = self.child(n, rest.get(..i)?)?;
                    rest = rest.get(i + 1..)?;
                }
            }
        }
    }

    fn kind(&self, node: Option<usize>) -> Option<Skip> {
        self.nodes.get(node?)?.kind
    }
}

/// Equality of short segments, testing the length and the last byte first:
/// sibling names tend to share prefixes (`dim00`, `dim01`) and differ at
/// the end.
fn segment_eq(a: &[u8], b: &[u8]) -> bool {
    // A byte loop rather than `==`, which calls `memcmp`: segments are a
    // few bytes long.
    a.len() == b.len() && a.last() == b.last() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// State of the one-pass walk over a document.
struct Walk<'a> {
    dims: &'a [Dim],
    skip: &'a PathTrie,
    vals: &'a mut Vec<u8>,
    slots: &'a mut [(usize, usize)],
    metric_buf: &'a mut Vec<u8>,
    metric_spans: &'a mut Vec<(usize, usize)>,
}

/// The dotted path of the field being visited, as a chain of keys on the
/// stack: building it costs nothing until a metric name needs it.
struct PathLink<'k> {
    key: &'k str,
    parent: Option<&'k PathLink<'k>>,
}

impl PathLink<'_> {
    /// Appends the dotted path to `out`.
    fn write(&self, out: &mut Vec<u8>) {
        if let Some(p) = self.parent {
            p.write(out);
            out.push(b'.');
        }
        out.extend_from_slice(self.key.as_bytes());
    }
}

impl Walk<'_> {
    /// Visits the fields of `obj`, whose path is `parent` and trie node
    /// `node` (`None` when no configured path goes there). Under an excluded
    /// object, dimensions still count but other fields are not metrics.
    fn object(
        &mut self,
        obj: &Map<String, Value>,
        node: Option<usize>,
        parent: Option<&PathLink<'_>>,
        excluded: bool,
    ) -> Result<()> {
        for (key, v) in obj {
            if v.is_null() {
                continue;
            }
            let link = PathLink { key, parent };
            let child = self.skip.descend(node, key);
            self.field(v, child, &link, excluded)?;
        }
        Ok(())
    }

    fn field(
        &mut self,
        v: &Value,
        node: Option<usize>,
        link: &PathLink<'_>,
        excluded: bool,
    ) -> Result<()> {
        match (self.skip.kind(node), v) {
            (Some(Skip::Dim(i)), _) => {
                let (Some(dim), Some(slot)) = (self.dims.get(i), self.slots.get_mut(i)) else {
                    return Ok(());
                };
                if *slot != NO_SPAN {
                    // Reached before under another nesting style.
                    return Err(Error::DuplicatePath {
                        path: dim.path.clone(),
                    });
                }
                let start = self.vals.len();
                encode_json(&dim.path, dim.kind, v, self.vals)?;
                *slot = (start, self.vals.len());
            }
            (Some(Skip::Excluded), Value::Object(inner)) if node.is_some() => {
                // A configured dimension may lie below an excluded object.
                self.object(inner, node, Some(link), true)?;
            }
            (Some(Skip::Excluded), _) => {}
            (None, Value::Object(inner)) => self.object(inner, node, Some(link), excluded)?,
            (None, _) if excluded => {}
            (None, _) => {
                let start = self.metric_buf.len();
                link.write(self.metric_buf);
                let name = self.metric_buf.get(start..).unwrap_or_default();
                if name.is_empty() {
                    return Err(Error::InvalidPath {
                        path: String::new(),
                    });
                }
                if name.len() > MAX_NAME_LEN {
                    return Err(Error::NameTooLong {
                        name_start: crate::error::cut(&String::from_utf8_lossy(name), 64),
                        len: name.len(),
                        max: MAX_NAME_LEN,
                    });
                }
                self.metric_spans.push((start, self.metric_buf.len()));
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

/// Writes the names digest into the canonical form and hashes it into a
/// tsid.
fn finish(s: &mut Scratch, count: usize, names: [u8; 16]) -> Tsid {
    if let Some(head) = s.canon.get_mut(..16) {
        head.copy_from_slice(&names);
    }
    let mut out = [0u8; TSID_LEN];
    out[0] = names[0];
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
