//! The metrics protocols' routes: Prometheus remote write (`POST /api/v1/write`), Influx
//! line protocol (`POST /write`, `POST /api/v2/write`, `GET /ping`, `GET /health`),
//! OTLP/HTTP metrics (`POST /v1/metrics`, protobuf and JSON), and what they share: choosing the label-keyed index, checking samples, writing them
//! through the index's writer (group-committed, fsynced before the answer) and counting
//! what happened.

pub mod graphite;
pub mod line_protocol;
pub mod opentsdb;
pub mod otlp;
pub mod remote_write;
pub(crate) mod series_cache;
pub(crate) mod tcp;
pub(crate) mod vm_api;
pub mod vm_format;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use tidemark::{LabelPoints, LabelSeries, SampleBatch, SampleMark, SampleTally, SampleValue};

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::http::{self, Caller, params};
use crate::metrics::series_cache::{LineCache, LineSeries, SeriesCache};
use crate::state::{AppState, admit, blocking, now_ms};
use line_protocol::{FieldValue, Precision};

type St = State<Arc<AppState>>;
/// The header naming the label-keyed index of a remote-write or OTLP request.
pub const INDEX_HEADER: &str = "x-tidemark-index";

/// The routes of the metrics protocols.
pub(crate) fn routes() -> crate::routes::Routes {
    crate::routes::Routes::new()
        .refusal(refusal)
        .route("/api/v1/write", post(remote_write_handler))
        .route("/write", post(influx_v1))
        .route("/api/v2/write", post(influx_v2))
        .route("/ping", get(ping).head(ping))
        .route("/health", get(influx_health))
        .route("/v1/metrics", post(otlp_metrics))
        .route("/api/put", post(opentsdb_put))
}

/// What a write of samples did (the façade's tally of a [`SampleBatch`]).
pub(crate) type Tally = SampleTally;

/// A request's samples, checked and held by series on its blocking thread.
pub(crate) struct Batch {
    points: LabelPoints,
    now_ms: i64,
    max_future_ms: i64,
    /// The samples to write, by series.
    pub samples: SampleBatch,
    /// How many distinct series the request may hold.
    max_series: usize,
    /// The request's distinct series, counted exactly only once its series slots reach
    /// `max_series` (below that, slots bound the distinct count).
    distinct: Option<HashSet<tidemark::tsid::Tsid>>,
    /// `max_labels_per_series`, `max_label_name_bytes`, `max_label_value_bytes`.
    label_limits: (usize, usize, usize),
}

impl Batch {
    pub(crate) fn new(config: &crate::Config) -> Result<Batch> {
        Ok(Batch {
            points: LabelPoints::new()?,
            samples: SampleBatch::new(config.metrics_op != "index"),
            now_ms: now_ms(),
            max_future_ms: i64::try_from(config.max_future_secs.saturating_mul(1000))
                .unwrap_or(i64::MAX),
            max_series: config.max_series_per_request,
            distinct: None,
            label_limits: (
                config.max_labels_per_series,
                config.max_label_name_bytes,
                config.max_label_value_bytes,
            ),
        })
    }

    /// Adds one sample; `what` names it in an error (a series, a line).
    ///
    /// # Errors
    /// `400` naming `what`: a timestamp too far in the future, invalid labels.
    pub(crate) fn push(
        &mut self,
        labels: &[(&str, &str)],
        ts_millis: i64,
        value: SampleValue,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        self.check_future(ts_millis, what)?;
        let series = self.series(labels, &value, what)?;
        self.push_sample(&series, ts_millis, value, what)
    }

    /// The series of `labels` for samples like `like` (see [`LabelPoints::series`]).
    ///
    /// # Errors
    /// `400` naming `what` for invalid labels.
    pub(crate) fn series(
        &mut self,
        labels: &[(&str, &str)],
        like: &SampleValue,
        what: &dyn Fn() -> String,
    ) -> Result<LabelSeries> {
        let (most, name_bytes, value_bytes) = self.label_limits;
        let bad = |reason: String| {
            Error::bad(
                "illegal_argument_exception",
                format!("{}: {reason}", what()),
            )
        };
        if labels.len() > most {
            return Err(bad(format!(
                "{} labels, more than {most} (max_labels_per_series)",
                labels.len()
            )));
        }
        for (n, v) in labels {
            if n.len() > name_bytes {
                return Err(bad(format!(
                    "a label name of {} bytes, more than {name_bytes} (max_label_name_bytes)",
                    n.len()
                )));
            }
            if v.len() > value_bytes {
                return Err(bad(format!(
                    "label {n} has a value of {} bytes, more than {value_bytes} (max_label_value_bytes)",
                    v.len()
                )));
            }
        }
        self.points
            .series(labels, like)
            .map_err(|e| Error::bad("illegal_argument_exception", format!("{}: {e}", what())))
    }

    /// Adds the float samples of a series already resolved: all or none (a timestamp too
    /// far ahead refuses them all, as the request is refused).
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub(crate) fn push_float_samples(
        &mut self,
        series: &LabelSeries,
        samples: &[(i64, f64)],
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        for &(ts_millis, _) in samples {
            self.check_future(ts_millis, what)?;
        }
        self.count_series(series)?;
        for &(ts_millis, v) in samples {
            self.samples
                .push(series, ts_millis, SampleValue::F64(v))
                .map_err(|e| {
                    Error::bad("illegal_argument_exception", format!("{}: {e}", what()))
                })?;
        }
        Ok(())
    }

    /// Adds one sample of a series already resolved.
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub(crate) fn push_sample(
        &mut self,
        series: &LabelSeries,
        ts_millis: i64,
        value: SampleValue,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        self.check_future(ts_millis, what)?;
        self.count_series(series)?;
        self.samples
            .push(series, ts_millis, value)
            .map_err(|e| Error::bad("illegal_argument_exception", format!("{}: {e}", what())))
    }

    /// `400` naming `what` for a timestamp too far ahead of the server's clock.
    fn check_future(&self, ts_millis: i64, what: &dyn Fn() -> String) -> Result<()> {
        if ts_millis.saturating_sub(self.now_ms) > self.max_future_ms {
            return Err(Error::bad(
                "illegal_argument_exception",
                format!(
                    "{}: timestamp {ts_millis} ({}) is more than {} s ahead of the server's clock",
                    what(),
                    tidemark::format_time(ts_millis),
                    self.max_future_ms / 1000
                ),
            ));
        }
        Ok(())
    }

    /// Counts `series` among the request's; `400` naming `max_series_per_request` when
    /// it is one too many. Checked as the request is read, so a request of a million
    /// series is refused before a million series' points are built.
    fn count_series(&mut self, series: &LabelSeries) -> Result<()> {
        if self.distinct.is_none() {
            if self.samples.series_len() < self.max_series {
                return Ok(());
            }
            self.distinct = Some(self.samples.series_ids().collect());
        }
        if let Some(set) = &mut self.distinct {
            if set.len() >= self.max_series && !set.contains(&series.tsid()) {
                return Err(series_limit(self.max_series));
            }
            set.insert(series.tsid());
        }
        Ok(())
    }

    /// Adds one float sample of the series `name{tags}`, for the protocols whose lines
    /// name a metric and its tags and carry one float (Graphite, OpenTSDB). `cache`
    /// keeps the series resolved for the next line that names it; `key` is a buffer.
    ///
    /// # Errors
    /// The reason, for a line's error: invalid labels, a far-future timestamp, too many
    /// series.
    pub(crate) fn push_named(
        &mut self,
        cache: &SeriesCache,
        key: &mut Vec<u8>,
        name: &str,
        tags: &[(String, std::borrow::Cow<'_, str>)],
        ts_millis: i64,
        value: f64,
    ) -> std::result::Result<(), String> {
        // The cache key: 0xfe (never in UTF-8, so never the first byte of the other
        // protocols' keys, which start with a name), then the name and each tag's name
        // and value, each followed by 0xff (never in UTF-8 either).
        key.clear();
        key.push(0xfe);
        key.extend_from_slice(name.as_bytes());
        key.push(0xff);
        for (k, v) in tags {
            key.extend_from_slice(k.as_bytes());
            key.push(0xff);
            key.extend_from_slice(v.as_bytes());
            key.push(0xff);
        }
        let what = || format!("metric {name}");
        let value = SampleValue::F64(value);
        let series = match cache.get(key) {
            Some(s) => s,
            None => {
                let mut labels: Vec<(&str, &str)> = Vec::with_capacity(tags.len() + 1);
                labels.push((tidemark::METRIC_NAME_LABEL, name));
                labels.extend(tags.iter().map(|(k, v)| (k.as_str(), v.as_ref())));
                let s = self
                    .series(&labels, &value, &what)
                    .map_err(|e| e.reason())?;
                cache.put(key, &s);
                s
            }
        };
        self.push_sample(&series, ts_millis, value, &what)
            .map_err(|e| e.reason())
    }

    /// The server's time when the batch was started: the time of a sample sent
    /// without one.
    pub(crate) fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Where the samples end now, for [`truncate`](Self::truncate).
    pub(crate) fn mark(&self) -> SampleMark {
        self.samples.mark()
    }

    /// Drops what was added since `mark` (a line that failed half way).
    pub(crate) fn truncate(&mut self, mark: SampleMark) {
        self.samples.truncate(mark);
        self.distinct = None;
    }
}

/// The label-keyed index a request writes: `?index=`, else the `X-Tidemark-Index`
/// header, else the configured `metrics_index`.
pub(crate) fn target_index(
    config: &crate::Config,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> String {
    requested_index(headers, params).unwrap_or_else(|| config.metrics_index.clone())
}

/// The index a metrics write names: `?index=`, else the `X-Tidemark-Index` header (a
/// router in front of the server reads it the same way).
pub fn requested_index(headers: &HeaderMap, params: &HashMap<String, String>) -> Option<String> {
    params
        .get("index")
        .filter(|s| !s.is_empty())
        .cloned()
        .or_else(|| {
            headers
                .get(INDEX_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
}

/// [`target_index`], with `default` (when not empty) before `metrics_index`: the
/// index a protocol's own setting names (`opentsdb_index`).
pub(crate) fn target_index_or(
    config: &crate::Config,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
    default: &str,
) -> String {
    let explicit = params.get("index").is_some_and(|s| !s.is_empty())
        || headers
            .get(INDEX_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| !v.trim().is_empty());
    if explicit || default.is_empty() {
        target_index(config, headers, params)
    } else {
        default.to_owned()
    }
}

/// Writes `items` to the label-keyed index `name` (created if needed), after checking
/// that `who` may; the answer comes once they are in the fsynced log.
///
/// # Errors
/// `403`, `400` for an invalid name or an index with a declared mapping, `500`/`503`
/// when the write fails (a retry is safe: what reached the log is then a duplicate).
pub(crate) async fn store(
    st: &Arc<AppState>,
    who: &Principal,
    name: String,
    samples: SampleBatch,
) -> Result<Tally> {
    who.check(&name)?;
    if samples.is_empty() {
        return Ok(Tally::default());
    }
    let st2 = Arc::clone(st);
    let who = who.clone();
    let handle = blocking(move || st2.registry.scope(&who).get_or_create_labels(&name)).await?;
    let rx = handle.submit_samples(samples).map_err(Error::for_metrics)?;
    handle.wait_samples(rx).await.map_err(Error::for_metrics)
}

/// Adds the tally as response headers (`X-Tidemark-Samples-Created`, `-Duplicate`,
/// `-Replaced`), for senders' logs and tests.
pub(crate) fn tally_headers(resp: &mut Response, t: &Tally) {
    let h = resp.headers_mut();
    for (name, n) in [
        ("x-tidemark-samples-created", t.created),
        ("x-tidemark-samples-duplicate", t.duplicates),
        ("x-tidemark-samples-replaced", t.replaced),
    ] {
        h.insert(name, HeaderValue::from(n));
    }
}

pub(crate) fn no_content(t: &Tally) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    tally_headers(&mut resp, t);
    resp
}

/// `400` for samples the engine refused after the others were stored.
pub(crate) fn rejected(t: &Tally) -> Error {
    Error::bad(
        "illegal_argument_exception",
        format!(
            "{} samples rejected (the other {} stored, {} duplicates): {}",
            t.rejected,
            t.created + t.replaced,
            t.duplicates,
            t.first_rejection.as_deref().unwrap_or("")
        ),
    )
}

/// `POST /api/v1/write`: Prometheus remote write 1.0. `204` once every sample is in
/// the fsynced log (a retry's samples are counted as duplicates); `400` (not retried)
/// for a body that is not a snappy `WriteRequest` or holds an invalid series, with
/// nothing stored; `429`/`5xx` only for what a retry fixes.
async fn remote_write_handler(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    remote_write::check_content_type(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    )?;
    match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("snappy") => {}
        Some(other) => {
            return Err(Error::status(
                415,
                "illegal_argument_exception",
                format!("unsupported Content-Encoding [{other}]: remote write bodies are snappy"),
            ));
        }
    }
    if let Some(v) = headers
        .get("x-prometheus-remote-write-version")
        .and_then(|v| v.to_str().ok())
        && v.trim().starts_with('2')
    {
        return Err(Error::status(
            415,
            "media_type_header_exception",
            format!("remote write version {v} is not supported: this receiver speaks 1.0"),
        ));
    }
    let name = target_index(&st.config, &headers, &params(q.as_deref()));
    let bytes = http::read_raw_body(&st, &headers, body).await?;
    let _permit = admit(&st)?;
    let st2 = Arc::clone(&st);
    let items = blocking(move || {
        let raw = remote_write::decompress(&bytes, st2.config.max_content_length)?;
        too_many_series(&raw, st2.config.max_series_per_request)?;
        let mut batch = Batch::new(&st2.config)?;
        // A series' cache key: its label entries as sent (`SeriesView::key`). Cached
        // series passed decoding, check_view's label checks and LabelPoints::series,
        // which depend on the label bytes alone; only a series not cached has its labels
        // decoded.
        remote_write::for_each_series_by_key(&raw, |ts| {
            let cached = if ts.histograms > 0 || ts.samples.is_empty() {
                None
            } else {
                st2.series_cache.get(&ts.key)
            };
            let series = match cached {
                Some(s) => s,
                None => {
                    ts.decode_labels()?;
                    remote_write::check_view(ts)?;
                    if ts.samples.is_empty() {
                        // Nothing to store, but a bad series still refuses the request.
                        return Ok(());
                    }
                    let what = || remote_write::view_text(ts);
                    let s = batch.series(&ts.labels, &SampleValue::F64(0.0), &what)?;
                    st2.series_cache.put(&ts.key, &s);
                    s
                }
            };
            let what = || remote_write::view_text(ts);
            batch.push_float_samples(&series, &ts.samples, &what)
        })?;
        let mut metadata = Vec::new();
        remote_write::for_each_metadata(&raw, |m| {
            metadata.push((
                m.family.to_owned(),
                (m.kind.to_owned(), m.help.to_owned(), m.unit.to_owned()),
            ));
        })?;
        Ok((batch.samples, metadata))
    })
    .await?;
    let (items, metadata) = items;
    if !metadata.is_empty() {
        // Only into an index the caller may write, created as samples would create it.
        who.check(&name)?;
        let dir = st.registry.root().join(crate::INDICES_DIR).join(&name);
        if dir.is_dir() {
            let st2 = Arc::clone(&st);
            let n = name.clone();
            blocking(move || st2.prom_metadata.record(&n, &dir, metadata)).await?;
        }
    }
    let tally = store(&st, &who, name, items).await?;
    if tally.rejected > 0 {
        return Err(rejected(&tally));
    }
    Ok(no_content(&tally))
}

/// Refuses a remote-write request of more than `max` distinct series before any of its
/// points is built: entries are counted by skipping them (cheap), and only a request
/// with more entries than `max` has its label sets hashed to count the distinct ones
/// (a sender may split one series over several entries).
///
/// # Errors
/// `400` naming `max_series_per_request`; `400` for a body that is not a
/// `WriteRequest`.
fn too_many_series(raw: &[u8], max: usize) -> Result<()> {
    if remote_write::series_entries(raw)? <= max {
        return Ok(());
    }
    let mut seen: HashSet<u64> = HashSet::with_capacity(max.min(1 << 20) + 1);
    let hasher = std::hash::RandomState::new();
    remote_write::for_each_series(raw, |ts| {
        if ts.samples.is_empty() {
            return Ok(());
        }
        let mut h = std::hash::BuildHasher::build_hasher(&hasher);
        for (n, v) in &ts.labels {
            std::hash::Hash::hash(n, &mut h);
            std::hash::Hash::hash(v, &mut h);
        }
        seen.insert(std::hash::Hasher::finish(&h));
        if seen.len() > max {
            return Err(series_limit(max));
        }
        Ok(())
    })
}

/// `400` for a request of more than `max` distinct series.
fn series_limit(max: usize) -> Error {
    Error::bad(
        "illegal_argument_exception",
        format!(
            "the request writes more than {max} distinct series (max_series_per_request): send it in smaller batches"
        ),
    )
}

/// The InfluxDB version `GET /ping` answers (clients only log it).
const INFLUX_VERSION: &str = "1.8.10";

/// `GET /ping`, `HEAD /ping`: `204` with `X-Influxdb-Version`, as InfluxDB answers.
async fn ping() -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    let h = resp.headers_mut();
    h.insert(
        "x-influxdb-version",
        HeaderValue::from_static(INFLUX_VERSION),
    );
    h.insert("x-influxdb-build", HeaderValue::from_static("OSS"));
    resp
}

/// `GET /health`: InfluxDB's health answer.
async fn influx_health() -> Response {
    http::json(
        200,
        &serde_json::json!({"name": "influxdb", "message": "ready for queries and writes",
                            "status": "pass", "checks": [], "version": INFLUX_VERSION}),
    )
}

/// An error in the InfluxDB API's shape: v1 `{"error": ..}`, v2 `{"code", "message"}`.
fn influx_error(status: u16, message: &str, v1: bool) -> Response {
    let code = match status {
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not found",
        413 => "request too large",
        429 => "too many requests",
        s if s >= 500 => "internal error",
        _ => "invalid",
    };
    let body = if v1 {
        serde_json::json!({ "error": message })
    } else {
        serde_json::json!({ "code": code, "message": message })
    };
    let mut resp = http::json(status, &body);
    if v1 {
        resp.headers_mut().insert(
            "x-influxdb-error",
            HeaderValue::from_str(message).unwrap_or(HeaderValue::from_static("error")),
        );
    }
    resp
}

fn influx_from(e: &Error, v1: bool) -> Response {
    let mut resp = influx_error(e.status_and_kind().0, &e.reason(), v1);
    http::retry_after(&mut resp, e);
    resp
}

/// `POST /write?db=..&precision=..&rp=..` (InfluxDB 1.x): the database is the index.
async fn influx_v1(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let params = params(q.as_deref());
    let Some(db) = params.get("db").filter(|d| !d.is_empty()) else {
        return influx_error(400, "database is required", true);
    };
    let Some(precision) =
        Precision::parse(params.get("precision").map_or("", String::as_str), true)
    else {
        return influx_error(
            400,
            "invalid precision: expected ns, u, ms, s, m or h",
            true,
        );
    };
    influx_write(st, who, db.clone(), precision, headers, body, true).await
}

/// `POST /api/v2/write?org=..&bucket=..&precision=..` (InfluxDB 2.x): the bucket is the
/// index; `org` is accepted and not used.
async fn influx_v2(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let params = params(q.as_deref());
    let Some(bucket) = params.get("bucket").filter(|d| !d.is_empty()) else {
        return influx_error(400, "bucket is required", false);
    };
    let Some(precision) =
        Precision::parse(params.get("precision").map_or("", String::as_str), false)
    else {
        return influx_error(400, "invalid precision: expected ns, us, ms or s", false);
    };
    influx_write(st, who, bucket.clone(), precision, headers, body, false).await
}

/// The first bad line of a line-protocol body, and how many there were.
#[derive(Debug, Default)]
struct BadLines {
    count: u64,
    first: Option<String>,
}

impl BadLines {
    /// Counts line `n` (`raw`) as refused for `reason`; the first one is kept to show.
    fn record(&mut self, n: usize, raw: &[u8], reason: &str) {
        self.count += 1;
        if self.first.is_none() {
            let text = String::from_utf8_lossy(raw);
            let shown: String = text.chars().take(200).collect();
            self.first = Some(format!("unable to parse '{shown}' (line {n}): {reason}"));
        }
    }
}

/// The byte that tells a cached series' value type apart in its key.
fn value_tag(v: &SampleValue) -> u8 {
    match v {
        SampleValue::F64(_) => 0,
        SampleValue::I64(_) => 1,
        SampleValue::Bool(_) => 2,
        SampleValue::Str(_) => 3,
    }
}

/// Line protocol into `batch`: one sample per field, named `measurement_field`, the
/// tags as labels. A bad line is skipped whole (none of its fields stored) and counted.
fn influx_lines(
    body: &[u8],
    precision: Precision,
    batch: &mut Batch,
    cache: &LineCache,
) -> BadLines {
    let mut bad = BadLines::default();
    // Series of this line's fields not in its cache entry yet.
    let mut added: Vec<(Box<str>, u8, LabelSeries)> = Vec::new();
    let mut fields = Vec::new();
    for (n, raw) in line_protocol::lines(body) {
        let mark = batch.mark();
        // A line whose series key is cached with every field it has: only its fields
        // and timestamp are read.
        match known_line(raw, precision, batch, cache, &mut fields) {
            Ok(true) => continue,
            Ok(false) => batch.truncate(mark),
            Err(reason) => {
                batch.truncate(mark);
                bad.record(n, raw, &reason);
                continue;
            }
        }
        let outcome = line_protocol::parse_line_keyed(raw).and_then(|(line, key_len)| {
            let ts = match line.timestamp {
                Some(t) => precision
                    .to_millis(t)
                    .ok_or_else(|| format!("timestamp {t} is out of range"))?,
                None => batch.now_ms,
            };
            // The line's series key: its measurement and tags as sent.
            let key = raw.get(..key_len).unwrap_or_default();
            let entry = cache.get(key);
            added.clear();
            for (field, value) in &line.fields {
                let value = sample_value(field, value.clone())?;
                let what = || format!("field {field:?}");
                let tag = value_tag(&value);
                let cached = entry.as_deref().and_then(|e| e.field(field, tag));
                let series = match cached {
                    Some(s) => s.clone(),
                    None => {
                        let name = format!("{}_{}", line.measurement, field);
                        let mut labels: Vec<(&str, &str)> = Vec::with_capacity(line.tags.len() + 1);
                        labels.push((tidemark::METRIC_NAME_LABEL, name.as_str()));
                        labels.extend(line.tags.iter().map(|(k, v)| (k.as_ref(), v.as_ref())));
                        let s = batch
                            .series(&labels, &value, &what)
                            .map_err(|e| e.reason())?;
                        added.push((field.as_ref().into(), tag, s.clone()));
                        s
                    }
                };
                batch
                    .push_sample(&series, ts, value, &what)
                    .map_err(|e| e.reason())?;
            }
            if !added.is_empty() {
                let grown = match &entry {
                    Some(e) => e.with(std::mem::take(&mut added)),
                    None => LineSeries::default().with(std::mem::take(&mut added)),
                };
                cache.put(key, &Arc::new(grown));
            }
            Ok(())
        });
        if let Err(reason) = outcome {
            batch.truncate(mark);
            bad.record(n, raw, &reason);
        }
    }
    bad
}

/// A line-protocol field's value as a sample value.
fn sample_value(field: &str, value: FieldValue) -> std::result::Result<SampleValue, String> {
    Ok(match value {
        FieldValue::Float(v) => SampleValue::F64(v),
        FieldValue::Int(v) => SampleValue::I64(v),
        FieldValue::UInt(v) => SampleValue::I64(i64::try_from(v).map_err(|_| {
            format!(
                "unsigned value {v} of field {field:?} is above the 2^63-1 Tidemark stores exactly"
            )
        })?),
        FieldValue::Bool(b) => SampleValue::Bool(b),
        FieldValue::Str(s) => SampleValue::Str(s),
    })
}

/// Adds the samples of line `raw` to `batch` when its series key is cached with every
/// field the line has (`Ok(true)`); `Ok(false)` when it is not (the caller parses the
/// whole line, and truncates what this added); the error of a line that cannot be
/// stored.
fn known_line<'a>(
    raw: &'a [u8],
    precision: Precision,
    batch: &mut Batch,
    cache: &LineCache,
    fields: &mut Vec<(std::borrow::Cow<'a, str>, FieldValue)>,
) -> std::result::Result<bool, String> {
    let Some(key_len) = line_protocol::series_key_len(raw) else {
        return Ok(false);
    };
    let (Some(key), Some(rest)) = (raw.get(..key_len), raw.get(key_len..)) else {
        return Ok(false);
    };
    let Some(entry) = cache.get(key) else {
        return Ok(false);
    };
    let timestamp = line_protocol::parse_after_key(rest, fields)?;
    let ts = match timestamp {
        Some(t) => precision
            .to_millis(t)
            .ok_or_else(|| format!("timestamp {t} is out of range"))?,
        None => batch.now_ms,
    };
    for (field, value) in fields.drain(..) {
        let value = sample_value(&field, value)?;
        let Some(series) = entry.field(&field, value_tag(&value)) else {
            return Ok(false);
        };
        batch
            .push_sample(series, ts, value, &|| format!("field {field:?}"))
            .map_err(|e| e.reason())?;
    }
    Ok(true)
}

async fn influx_write(
    st: Arc<AppState>,
    who: Principal,
    index: String,
    precision: Precision,
    headers: HeaderMap,
    body: Body,
    v1: bool,
) -> Response {
    if let Err(e) = who
        .check(&index)
        .and_then(|()| crate::es::protocol::check_index_name(&index))
    {
        return influx_from(&e, v1);
    }
    let bytes = match http::read_body(&st, &headers, body).await {
        Ok(b) => b,
        Err(e) => return influx_from(&e, v1),
    };
    let _permit = match admit(&st) {
        Ok(p) => p,
        Err(e) => return influx_from(&e, v1),
    };
    let st2 = Arc::clone(&st);
    let parsed = blocking(move || {
        let mut batch = Batch::new(&st2.config)?;
        let bad = influx_lines(&bytes, precision, &mut batch, &st2.line_cache);
        Ok((batch.samples, bad))
    })
    .await;
    let (items, bad) = match parsed {
        Ok(p) => p,
        Err(e) => return influx_from(&e, v1),
    };
    let tally = match store(&st, &who, index, items).await {
        Ok(t) => t,
        Err(e) => return influx_from(&e, v1),
    };
    let mut resp = if let Some(first) = &bad.first {
        influx_error(
            400,
            &format!(
                "partial write: {first}; {} bad lines dropped, the other lines' {} points stored ({} duplicates)",
                bad.count,
                tally.created + tally.replaced,
                tally.duplicates
            ),
            v1,
        )
    } else if tally.rejected > 0 {
        influx_from(&rejected(&tally), v1)
    } else {
        no_content(&tally)
    };
    tally_headers(&mut resp, &tally);
    resp
}

/// A `401` in the shape the clients of a metrics protocol's path read: InfluxDB 1.x
/// `{"error"}` on `/write` and `/query`, InfluxDB 2.x `{"code":"unauthorized",
/// "message"}` on `/api/v2/write`, a text reason on `/api/v1/write` (Prometheus logs the
/// body of a refused request), a `google.rpc.Status` (`UNAUTHENTICATED`, protobuf or JSON
/// as the request) on `/v1/metrics`; `None` for the Elasticsearch paths.
fn refusal(path: &str, headers: &HeaderMap, e: &Error) -> Option<Response> {
    let mut resp = match path {
        "/write" | "/query" => influx_from(e, true),
        "/api/v2/write" => influx_from(e, false),
        "/api/v1/write" => {
            let (status, _) = e.status_and_kind();
            let mut r = Response::new(Body::from(format!("{}\n", e.reason())));
            *r.status_mut() =
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
        "/api/put" => opentsdb_error(e),
        "/v1/metrics" => {
            let json = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| {
                    v.trim_start()
                        .to_ascii_lowercase()
                        .starts_with("application/json")
                });
            otlp_error(e, json)
        }
        _ => return None,
    };
    if e.status_and_kind().0 == 401 {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"tidemark\", Bearer, Token"),
        );
    }
    Some(resp)
}

/// An error in OpenTSDB's shape: `{"error": {"code", "message"}}`.
fn opentsdb_error(e: &Error) -> Response {
    let (status, _) = e.status_and_kind();
    let mut resp = http::json(
        status,
        &serde_json::json!({"error": {"code": status, "message": e.reason()}}),
    );
    http::retry_after(&mut resp, e);
    resp
}

/// Per-point errors listed in a `/api/put` answer at most (the count is always whole).
const MAX_PUT_ERRORS: usize = 100;

/// What became of the data points of a `/api/put` body, before they are stored.
#[derive(Debug, Default)]
struct PutOutcome {
    /// Points that failed, with the first [`MAX_PUT_ERRORS`] of them and their reasons.
    failed: u64,
    errors: Vec<serde_json::Value>,
}

/// Calls `f` with each data point of a `/api/put` body, one object or an array of
/// them, each read as it comes: the points are never all held as JSON values at once.
struct EachPoint<'f, F>(&'f mut F);

impl<'de, F: FnMut(serde_json::Value)> serde::de::Visitor<'de> for EachPoint<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a data point object or an array of data points")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<(), A::Error> {
        while let Some(v) = seq.next_element::<serde_json::Value>()? {
            (self.0)(v);
        }
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> std::result::Result<(), A::Error> {
        let v = <serde_json::Value as serde::Deserialize>::deserialize(
            serde::de::value::MapAccessDeserializer::new(map),
        )?;
        (self.0)(v);
        Ok(())
    }
}

/// `POST /api/put`: OpenTSDB data points as JSON, one object or an array, into the
/// label-keyed index of `?index=`, the `X-Tidemark-Index` header, `opentsdb_index` or
/// else `metrics_index`. As OpenTSDB answers: `204` when every point is stored (a
/// retried point is a duplicate, stored once); with `?summary` `{"failed", "success"}`
/// and with `?details` also `"errors"` (each failed point and why), `200`, or `400` when
/// some point failed, the others being stored; `400` naming the problem for a body that
/// is not JSON, with nothing stored. `sync` and `sync_timeout` are accepted: every
/// answer already waits for the fsynced log.
async fn opentsdb_put(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let params = params(q.as_deref());
    let (details, summary) = (
        params.contains_key("details"),
        params.contains_key("summary"),
    );
    let name = target_index_or(&st.config, &headers, &params, &st.config.opentsdb_index);
    let bytes = match http::read_body(&st, &headers, body).await {
        Ok(b) => b,
        Err(e) => return opentsdb_error(&e),
    };
    let _permit = match admit(&st) {
        Ok(p) => p,
        Err(e) => return opentsdb_error(&e),
    };
    let st2 = Arc::clone(&st);
    let parsed = blocking(move || {
        let mut batch = Batch::new(&st2.config)?;
        let mut out = PutOutcome::default();
        let mut key = Vec::with_capacity(256);
        let mut each = |v: serde_json::Value| {
            let mark = batch.mark();
            let pushed = crate::metrics::opentsdb::point_from_json(&v).and_then(|p| {
                batch.push_named(
                    &st2.series_cache,
                    &mut key,
                    &p.name,
                    &p.tags,
                    p.ts_millis,
                    p.value,
                )
            });
            if let Err(reason) = pushed {
                batch.truncate(mark);
                out.failed += 1;
                if out.errors.len() < MAX_PUT_ERRORS {
                    out.errors
                        .push(serde_json::json!({"datapoint": v, "error": reason}));
                }
            }
        };
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        serde::Deserializer::deserialize_any(&mut de, EachPoint(&mut each))
            .and_then(|()| de.end())
            .map_err(|e| {
                Error::bad(
                    "parse_exception",
                    format!("the body is not OpenTSDB data points as JSON: {e}"),
                )
            })?;
        Ok((batch.samples, out))
    })
    .await;
    let (items, mut out) = match parsed {
        Ok(p) => p,
        Err(e) => return opentsdb_error(&e),
    };
    let tally = match store(&st, &who, name, items).await {
        Ok(t) => t,
        Err(e) => return opentsdb_error(&e),
    };
    if tally.rejected > 0 {
        out.failed += tally.rejected;
        out.errors.push(serde_json::json!({
            "datapoint": null,
            "error": format!("{} data points refused by the index: {}", tally.rejected,
                tally.first_rejection.as_deref().unwrap_or("")),
        }));
    }
    let success = tally.created + tally.replaced + tally.duplicates;
    let status = if out.failed > 0 { 400 } else { 200 };
    let mut resp = if details {
        http::json(
            status,
            &serde_json::json!({"errors": out.errors, "failed": out.failed, "success": success}),
        )
    } else if summary {
        http::json(
            status,
            &serde_json::json!({"failed": out.failed, "success": success}),
        )
    } else if out.failed > 0 {
        http::json(
            400,
            &serde_json::json!({"error": {
                "code": 400,
                "message": format!("One or more data points had errors: {} failed, {success} stored", out.failed),
                "details": out.errors.first().and_then(|e| e["error"].as_str()).unwrap_or(""),
                "errors": out.errors,
            }}),
        )
    } else {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        r
    };
    tally_headers(&mut resp, &tally);
    resp
}

/// An OTLP/HTTP answer: `message` encoded as the request was (protobuf or JSON).
fn otlp_response(
    status: u16,
    json_body: serde_json::Value,
    proto: Vec<u8>,
    json: bool,
) -> Response {
    if json {
        return http::json(status, &json_body);
    }
    let mut resp = Response::new(Body::from(proto));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    resp
}

/// An OTLP/HTTP error: a `google.rpc.Status`. A write failure is `503` (OTLP senders
/// retry 429, 502, 503 and 504, not 500).
fn otlp_error(e: &Error, json: bool) -> Response {
    let (mut status, _) = e.status_and_kind();
    if status == 500 {
        status = 503;
    }
    let code = match status {
        400 | 413 | 415 => 3,
        401 => 16,
        403 => 7,
        429 => 8,
        _ => 14,
    };
    let message = e.reason();
    let proto = prost::Message::encode_to_vec(&otlp::Status {
        code,
        message: message.clone(),
    });
    let mut resp = otlp_response(
        status,
        serde_json::json!({"code": code, "message": message}),
        proto,
        json,
    );
    http::retry_after(&mut resp, e);
    resp
}

/// `POST /v1/metrics`: OTLP/HTTP metrics, `application/x-protobuf` or
/// `application/json`, gzip or not. `200` with `partial_success` counting the data
/// points refused (invalid labels, far-future times, exponential histograms) while the
/// others are stored; `400` for a body that does not decode, with nothing stored.
async fn otlp_metrics(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let json = match ctype.as_str() {
        "application/json" => true,
        "application/x-protobuf" => false,
        other => {
            return otlp_error(
                &Error::status(
                    415,
                    "media_type_header_exception",
                    format!(
                        "unsupported Content-Type [{other}]: OTLP/HTTP takes application/x-protobuf or application/json"
                    ),
                ),
                false,
            );
        }
    };
    let name = target_index(&st.config, &headers, &params(q.as_deref()));
    let bytes = match http::read_body(&st, &headers, body).await {
        Ok(b) => b,
        Err(e) => return otlp_error(&e, json),
    };
    let _permit = match admit(&st) {
        Ok(p) => p,
        Err(e) => return otlp_error(&e, json),
    };
    let st2 = Arc::clone(&st);
    let prepared = blocking(move || {
        let bad = |m: String| Error::bad("parse_exception", m);
        let req = if json {
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| bad(format!("the body is not valid JSON: {e}")))?;
            otlp::from_json(&v)
                .map_err(|e| bad(format!("not an OTLP ExportMetricsServiceRequest: {e}")))?
        } else {
            <otlp::ExportMetricsServiceRequest as prost::Message>::decode(&bytes[..]).map_err(
                |e| {
                    bad(format!(
                        "the body is not a valid OTLP ExportMetricsServiceRequest: {e}"
                    ))
                },
            )?
        };
        // Protobuf skips unknown fields, so bytes of another message can decode as an
        // empty export: a body that is not empty must carry field 1, resource_metrics.
        if !json && !bytes.is_empty() && req.resource_metrics.is_empty() {
            return Err(bad(
                "the body is not an OTLP ExportMetricsServiceRequest: it has no resource_metrics (field 1)"
                    .into(),
            ));
        }
        let mut t = otlp::translate(&req, st2.config.max_labels_per_series);
        let mut batch = Batch::new(&st2.config)?;
        for point in std::mem::take(&mut t.points) {
            let mark = batch.mark();
            for s in point {
                let labels: Vec<(&str, &str)> = s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let name = s.labels.first().map(|l| l.1.clone()).unwrap_or_default();
                if let Err(e) =
                    batch.push(&labels, s.ts_millis, s.value, &|| format!("metric {name}"))
                {
                    batch.truncate(mark);
                    t.rejected += 1;
                    t.first_error.get_or_insert(e.reason());
                    break;
                }
            }
        }
        Ok((batch.samples, t.rejected, t.first_error))
    })
    .await;
    let (items, mut rejected, mut first) = match prepared {
        Ok(p) => p,
        Err(e) => return otlp_error(&e, json),
    };
    let tally = match store(&st, &who, name, items).await {
        Ok(t) => t,
        Err(e) => return otlp_error(&e, json),
    };
    rejected += i64::try_from(tally.rejected).unwrap_or(i64::MAX);
    if first.is_none() {
        first = tally.first_rejection.clone();
    }
    let partial = (rejected > 0).then(|| otlp::ExportMetricsPartialSuccess {
        rejected_data_points: rejected,
        error_message: first.clone().unwrap_or_default(),
    });
    let json_body = match &partial {
        Some(p) => serde_json::json!({"partialSuccess": {
            "rejectedDataPoints": p.rejected_data_points.to_string(),
            "errorMessage": p.error_message}}),
        None => serde_json::json!({}),
    };
    let proto = prost::Message::encode_to_vec(&otlp::ExportMetricsServiceResponse {
        partial_success: partial,
    });
    let mut resp = otlp_response(200, json_body, proto, json);
    tally_headers(&mut resp, &tally);
    resp
}
