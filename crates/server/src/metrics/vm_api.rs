//! VictoriaMetrics' bulk routes over the label-keyed indices, so that data moves between
//! VictoriaMetrics and Tidemark both ways: `GET|POST /api/v1/export` (JSON lines,
//! streamed), `POST /api/v1/import` (JSON lines), `POST /api/v1/import/prometheus`
//! (the Prometheus text format) and `POST /api/v1/import/csv` (CSV through a `format`),
//! each also under `/prometheus`.
//!
//! Imports are streamed: the body's frames go through a bounded channel to a blocking
//! thread that decodes gzip, splits lines (each at most [`MAX_LINE_BYTES`]), parses them
//! into a [`Batch`] and writes it through the index's writer every [`FLUSH_SAMPLES`]
//! samples, as remote write does (group commit, fsync before the answer), so a whole
//! request is never held and a resent sample is a duplicate. Exports choose the series
//! from the segments' dimension indexes (no row read), then read them a bounded group at
//! a time under the index's read lock, released before the group's lines are sent: a
//! slow reader never holds the lock, and memory is the series list plus one group.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::BodyExt;
use tidemark::tsid::Tsid;
use tidemark::{LabelSeries, SampleBatch, SampleTally, SampleValue};
use tidemark_promql::Matcher;
use tokio::sync::mpsc;

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::http::{Caller, params};
use crate::metrics::series_cache::SeriesCache;
use crate::metrics::vm_format::{self, CsvFormat, CsvRow, JsonLine, Labels, PromSample};
use crate::metrics::{Batch, no_content, rejected, store, tally_headers, target_index};
use crate::registry::IndexHandle;
use crate::state::{AppState, admit, blocking};

type St = State<Arc<AppState>>;

/// The longest line an import takes (VictoriaMetrics' `-import.maxLineLen` default).
pub const MAX_LINE_BYTES: usize = 10 << 20;
/// Samples parsed before they are written (one group-committed write each).
pub const FLUSH_SAMPLES: usize = 1 << 17;
/// Series parsed before they are written (also bounded by `max_series_per_request`).
const FLUSH_SERIES: usize = 1 << 14;
/// Body frames queued between the connection and the parsing thread.
const FRAMES_IN_FLIGHT: usize = 8;
/// Samples per exported line unless `max_rows_per_line` says otherwise.
pub const DEFAULT_ROWS_PER_LINE: usize = 10_000;
/// The largest `max_rows_per_line` taken.
const MAX_ROWS_PER_LINE: usize = 1_000_000;
/// Most series read under one hold of the read lock.
const GROUP_SERIES: usize = 1024;
/// About most samples read under one hold of the read lock (estimated from the
/// segments' series tables).
const GROUP_SAMPLES: u64 = 1 << 17;
/// Most series one export may select (VictoriaMetrics' `-search.maxExportSeries` plays
/// this role): the series list is held while the export runs.
pub const MAX_EXPORT_SERIES: usize = 1_000_000;
/// Largest piece of the answer sent at once.
const SEND_BYTES: usize = 256 << 10;

/// The routes, under `/api/v1` and `/prometheus/api/v1`.
pub(crate) fn routes() -> crate::routes::Routes {
    let mut r = crate::routes::Routes::new();
    for prefix in ["", "/prometheus"] {
        r = r
            .route(&format!("{prefix}/api/v1/export"), get(export).post(export))
            .route(&format!("{prefix}/api/v1/import"), post(import_json))
            .route(
                &format!("{prefix}/api/v1/import/prometheus"),
                post(import_prometheus),
            )
            .route(&format!("{prefix}/api/v1/import/csv"), post(import_csv));
    }
    r
}

// ---------------------------------------------------------------------------------------
// Imports

/// What an import's lines are.
enum Format {
    Json,
    Prometheus { default_ts: Option<i64> },
    Csv(CsvFormat),
}

/// `POST /api/v1/import`: JSON lines.
async fn import_json(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    import(st, who, q, headers, body, |_| Ok(Format::Json)).await
}

/// `POST /api/v1/import/prometheus`: the Prometheus text format; `timestamp` (unix
/// milliseconds) is the time of samples without one, else the request's time.
async fn import_prometheus(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    import(st, who, q, headers, body, |p| {
        let default_ts = match p.get("timestamp").map(|t| t.trim()) {
            None | Some("") => None,
            Some(t) => Some(t.parse::<i64>().map_err(|_| {
                Error::bad(
                    "illegal_argument_exception",
                    format!("the timestamp query arg {t:?} is not unix milliseconds"),
                )
            })?),
        };
        Ok(Format::Prometheus { default_ts })
    })
    .await
}

/// `POST /api/v1/import/csv?format=...`: CSV read through the column rules.
async fn import_csv(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    import(st, who, q, headers, body, |p| {
        let spec = p.get("format").map_or("", String::as_str);
        vm_format::parse_csv_format(spec)
            .map(Format::Csv)
            .map_err(|e| Error::bad("illegal_argument_exception", e))
    })
    .await
}

/// The `extra_label=name=value` query args, in order.
fn extra_labels(raw: Option<&str>) -> Result<Labels> {
    let mut out = Labels::new();
    for (k, v) in raw
        .map(|q| form_urlencoded::parse(q.as_bytes()))
        .into_iter()
        .flatten()
    {
        if k != "extra_label" {
            continue;
        }
        match v.split_once('=') {
            Some((n, val)) if !n.is_empty() => out.push((n.to_owned(), val.to_owned())),
            _ => {
                return Err(Error::bad(
                    "illegal_argument_exception",
                    format!("extra_label {v:?} is not name=value"),
                ));
            }
        }
    }
    Ok(out)
}

/// Whether the body is gzip (`Content-Encoding`).
///
/// # Errors
/// `415` for another encoding.
fn gzip_body(headers: &HeaderMap) -> Result<bool> {
    match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("" | "identity") => Ok(false),
        Some("gzip" | "x-gzip") => Ok(true),
        Some(other) => Err(Error::status(
            415,
            "illegal_argument_exception",
            format!("unsupported Content-Encoding [{other}]: expected gzip"),
        )),
    }
}

async fn import(
    st: Arc<AppState>,
    who: Principal,
    q: Option<String>,
    headers: HeaderMap,
    body: Body,
    format: impl FnOnce(&HashMap<String, String>) -> Result<Format>,
) -> Result<Response> {
    let params = params(q.as_deref());
    let format = format(&params)?;
    let name = target_index(&st.config, &headers, &params);
    who.check(&name)?;
    crate::es::protocol::check_index_name(&name)?;
    let extra = extra_labels(q.as_deref())?;
    let gzip = gzip_body(&headers)?;
    let _permit = admit(&st)?;
    let (tx, rx) = mpsc::channel(FRAMES_IN_FLIGHT);
    let rt = tokio::runtime::Handle::current();
    let st2 = Arc::clone(&st);
    let worker = tokio::task::spawn_blocking(move || -> Result<Outcome> {
        let frames = FrameReader {
            rx,
            cur: Bytes::new(),
        };
        let input: Box<dyn Read> = if gzip {
            Box::new(flate2::read::MultiGzDecoder::new(frames))
        } else {
            Box::new(frames)
        };
        let mut job = Import::new(&st2, format, extra)?;
        let mut flush = |batch: SampleBatch| rt.block_on(store(&st2, &who, name.clone(), batch));
        job.run(BufReader::with_capacity(64 << 10, input), &mut flush)?;
        Ok(job.outcome())
    });
    let ((), joined) = tokio::join!(pump(&st, body, tx), worker);
    let outcome =
        joined.map_err(|e| Error::status(500, "exception", format!("worker failed: {e}")))??;
    outcome.answer()
}

/// A read error of the request body itself (not of its gzip stream).
#[derive(Debug)]
struct BodyError(String);

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BodyError {}

/// Sends the body's frames to the parsing thread, each awaited at most the client
/// timeout; a broken or slow body ends with an error item. Stops when the parser is
/// gone (it answered already).
async fn pump(st: &AppState, mut body: Body, tx: mpsc::Sender<io::Result<Bytes>>) {
    let timeout = st.config.client_timeout();
    loop {
        let item = match tokio::time::timeout(timeout, body.frame()).await {
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                BodyError("the client did not send the request body in time".into()),
            )),
            Ok(None) => return,
            Ok(Some(Err(e))) => Err(io::Error::other(BodyError(format!(
                "reading the body: {e}"
            )))),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(d) => Ok(d),
                Err(_) => continue,
            },
        };
        let end = item.is_err();
        if tx.send(item).await.is_err() || end {
            return;
        }
    }
}

/// The body's frames as a blocking `Read`, on the parsing thread.
struct FrameReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    cur: Bytes,
}

impl Read for FrameReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(item) => self.cur = item?,
            }
        }
        let n = buf.len().min(self.cur.len());
        let piece = self.cur.split_to(n);
        if let Some(dst) = buf.get_mut(..n) {
            dst.copy_from_slice(&piece);
        }
        Ok(n)
    }
}

/// The answer to a failed read of the body: `408` for a slow client, `400` for a broken
/// connection or a malformed gzip stream.
fn read_error(e: &io::Error) -> Error {
    match e.get_ref().and_then(|x| x.downcast_ref::<BodyError>()) {
        Some(b) if e.kind() == io::ErrorKind::TimedOut => {
            Error::status(408, "timeout_exception", b.0.clone())
        }
        Some(b) => Error::bad("parse_exception", b.0.clone()),
        None => Error::bad("parse_exception", format!("malformed gzip body: {e}")),
    }
}

/// Adds `extra` to `labels`, each replacing a label of the same name.
fn apply_extra(labels: &mut Labels, extra: &Labels) {
    for (n, v) in extra {
        labels.retain(|(name, _)| name != n);
        labels.push((n.clone(), v.clone()));
    }
}

/// The float series of `labels`, from the shared cache or resolved (labels checked
/// against the limits) and cached. Keys start with `0xfe`, which neither UTF-8 nor the
/// other protocols' keys start with, so an import never hands remote write a series
/// that skipped its stricter label-name checks.
fn resolve(
    batch: &mut Batch,
    cache: &SeriesCache,
    key: &mut Vec<u8>,
    labels: &Labels,
    what: &dyn Fn() -> String,
) -> std::result::Result<LabelSeries, String> {
    key.clear();
    key.push(0xfe);
    for (n, v) in labels {
        key.extend_from_slice(n.as_bytes());
        key.push(0xff);
        key.extend_from_slice(v.as_bytes());
        key.push(0xff);
    }
    if let Some(s) = cache.get(key) {
        return Ok(s);
    }
    let refs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let s = batch
        .series(&refs, &SampleValue::F64(0.0), what)
        .map_err(|e| e.reason())?;
    cache.put(key, &s);
    Ok(s)
}

/// One import: its format, the batch being filled and what was written so far.
struct Import<'a> {
    st: &'a AppState,
    format: Format,
    extra: Labels,
    batch: Batch,
    /// The request's time: samples without a timestamp get it.
    now_ms: i64,
    line_no: u64,
    bad_lines: u64,
    first_bad: Option<String>,
    tally: SampleTally,
    key: Vec<u8>,
    json: JsonLine,
    prom: PromSample,
    csv: CsvRow,
    fields: Vec<String>,
    labels: Labels,
    pairs: Vec<(i64, f64)>,
}

/// What an import did, for its answer.
struct Outcome {
    tally: SampleTally,
    bad_lines: u64,
    first_bad: Option<String>,
}

impl Outcome {
    /// `204` with the tally headers; `400` naming the first bad line (the other lines
    /// stored) or the samples the index refused.
    fn answer(self) -> Result<Response> {
        let t = self.tally;
        if let Some(first) = self.first_bad {
            let e = Error::bad(
                "parse_exception",
                format!(
                    "{first}; {} bad lines skipped, the other lines' {} samples stored ({} duplicates)",
                    self.bad_lines,
                    t.created + t.replaced,
                    t.duplicates
                ),
            );
            let mut resp = e.into_response();
            tally_headers(&mut resp, &t);
            return Ok(resp);
        }
        if t.rejected > 0 {
            let mut resp = rejected(&t).into_response();
            tally_headers(&mut resp, &t);
            return Ok(resp);
        }
        Ok(no_content(&t))
    }
}

impl<'a> Import<'a> {
    fn new(st: &'a AppState, format: Format, extra: Labels) -> Result<Import<'a>> {
        let batch = Batch::new(&st.config)?;
        Ok(Import {
            st,
            format,
            extra,
            batch,
            now_ms: crate::state::now_ms(),
            line_no: 0,
            bad_lines: 0,
            first_bad: None,
            tally: SampleTally::default(),
            key: Vec::with_capacity(256),
            json: JsonLine::default(),
            prom: PromSample::default(),
            csv: CsvRow::default(),
            fields: Vec::new(),
            labels: Labels::new(),
            pairs: Vec::new(),
        })
    }

    fn outcome(self) -> Outcome {
        Outcome {
            tally: self.tally,
            bad_lines: self.bad_lines,
            first_bad: self.first_bad,
        }
    }

    /// Reads every line of `input`, writing the samples through `flush` as batches fill
    /// and at the end.
    ///
    /// # Errors
    /// A failed read of the body (`400`, `408`) or a failed write; what was written
    /// before stays written (a retry finds it as duplicates).
    fn run(
        &mut self,
        mut input: impl BufRead,
        flush: &mut dyn FnMut(SampleBatch) -> Result<SampleTally>,
    ) -> Result<()> {
        let mut line: Vec<u8> = Vec::new();
        let mut too_long = false;
        loop {
            let buf = input.fill_buf().map_err(|e| read_error(&e))?;
            if buf.is_empty() {
                break;
            }
            let (take, newline) = match memchr::memchr(b'\n', buf) {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            if !too_long {
                if line.len() + take > MAX_LINE_BYTES {
                    too_long = true;
                    line = Vec::new();
                } else {
                    line.extend_from_slice(buf.get(..take).unwrap_or_default());
                }
            }
            input.consume(take + usize::from(newline));
            if newline {
                self.line(&line, too_long);
                line.clear();
                too_long = false;
                let limit = FLUSH_SERIES.min(self.st.config.max_series_per_request);
                if self.batch.samples.len() >= FLUSH_SAMPLES
                    || self.batch.samples.series_len() >= limit
                {
                    self.flush(flush)?;
                }
            }
        }
        if !line.is_empty() || too_long {
            self.line(&line, too_long);
        }
        self.flush(flush)
    }

    /// Writes the batch so far.
    fn flush(&mut self, flush: &mut dyn FnMut(SampleBatch) -> Result<SampleTally>) -> Result<()> {
        if self.batch.samples.is_empty() {
            return Ok(());
        }
        let full = std::mem::replace(&mut self.batch, Batch::new(&self.st.config)?);
        let t = flush(full.samples)?;
        self.tally.created += t.created;
        self.tally.replaced += t.replaced;
        self.tally.duplicates += t.duplicates;
        self.tally.rejected += t.rejected;
        if self.tally.first_rejection.is_none() {
            self.tally.first_rejection = t.first_rejection;
        }
        Ok(())
    }

    /// One line: its samples into the batch, or all of them left out and the line
    /// counted as bad.
    fn line(&mut self, raw: &[u8], too_long: bool) {
        self.line_no += 1;
        let n = self.line_no;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let mark = self.batch.mark();
        let outcome = if too_long {
            Err(format!(
                "the line is longer than {MAX_LINE_BYTES} bytes, the longest line an import takes"
            ))
        } else {
            match std::str::from_utf8(raw) {
                Ok(text) => self.parse(text, n),
                Err(e) => Err(format!("not valid UTF-8: {e}")),
            }
        };
        if let Err(reason) = outcome {
            self.batch.truncate(mark);
            self.bad_lines += 1;
            if self.first_bad.is_none() {
                let shown: String = String::from_utf8_lossy(raw).chars().take(200).collect();
                self.first_bad = Some(format!("line {n} ({shown:?}): {reason}"));
            }
        }
    }

    fn parse(&mut self, text: &str, n: u64) -> std::result::Result<(), String> {
        let what = || format!("line {n}");
        let cache = &self.st.series_cache;
        match &self.format {
            Format::Json => {
                if text.trim().is_empty() {
                    return Ok(());
                }
                vm_format::parse_json_line(text, &mut self.json)?;
                apply_extra(&mut self.json.labels, &self.extra);
                let series = resolve(
                    &mut self.batch,
                    cache,
                    &mut self.key,
                    &self.json.labels,
                    &what,
                )?;
                self.pairs.clear();
                self.pairs.extend(
                    self.json
                        .timestamps
                        .iter()
                        .copied()
                        .zip(self.json.values.iter().copied()),
                );
                self.batch
                    .push_float_samples(&series, &self.pairs, &what)
                    .map_err(|e| e.reason())
            }
            Format::Prometheus { default_ts } => {
                if !vm_format::parse_prom_line(text, &mut self.prom)? {
                    return Ok(());
                }
                apply_extra(&mut self.prom.labels, &self.extra);
                let ts = self.prom.ts_millis.or(*default_ts).unwrap_or(self.now_ms);
                let series = resolve(
                    &mut self.batch,
                    cache,
                    &mut self.key,
                    &self.prom.labels,
                    &what,
                )?;
                self.batch
                    .push_sample(&series, ts, SampleValue::F64(self.prom.value), &what)
                    .map_err(|e| e.reason())
            }
            Format::Csv(format) => {
                if text.trim().is_empty() {
                    return Ok(());
                }
                vm_format::parse_csv_line(format, text, &mut self.fields, &mut self.csv)?;
                let ts = self.csv.ts_millis.unwrap_or(self.now_ms);
                for (metric, value) in &self.csv.metrics {
                    self.labels.clear();
                    self.labels
                        .push((tidemark::METRIC_NAME_LABEL.to_owned(), metric.clone()));
                    self.labels.extend(self.csv.labels.iter().cloned());
                    apply_extra(&mut self.labels, &self.extra);
                    let series =
                        resolve(&mut self.batch, cache, &mut self.key, &self.labels, &what)?;
                    self.batch
                        .push_sample(&series, ts, SampleValue::F64(*value), &what)
                        .map_err(|e| e.reason())?;
                }
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Export

/// A series chosen for an export: its id, labels (sorted) and estimated samples.
pub(crate) type Chosen = (Tsid, Labels, u64);

/// `GET|POST /api/v1/export`: the series matching any `match[]` selector with samples
/// in `[start, end]`, as JSON lines, streamed.
async fn export(
    State(st): St,
    Caller(who): Caller,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let bad = |m: String| Error::bad("bad_data", m);
    let params = crate::prom::all_params(&st, raw, &headers, body)
        .await
        .map_err(|e| bad(e.to_string()))?;
    let selectors: Vec<Vec<Matcher>> = params
        .iter()
        .filter(|(k, _)| k == "match[]" || k == "match")
        .map(|(_, v)| tidemark_promql::selector_matchers(v))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if selectors.is_empty() {
        return Err(bad(
            "missing match[] query arg: a series selector such as {__name__!=\"\"}".into(),
        ));
    }
    let time = |name: &str, default: i64| -> Result<i64> {
        match crate::prom::param(&params, name) {
            None | Some("") => Ok(default),
            Some(t) => tidemark_promql::api::parse_time(name, t).map_err(|e| bad(e.to_string())),
        }
    };
    let (start, end) = (time("start", i64::MIN / 2)?, time("end", i64::MAX / 2)?);
    if start > end {
        return Err(bad("start is after end".into()));
    }
    let rows = match crate::prom::param(&params, "max_rows_per_line") {
        None | Some("" | "0") => DEFAULT_ROWS_PER_LINE,
        Some(t) => t
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_ROWS_PER_LINE).contains(n))
            .ok_or_else(|| {
                bad(format!(
                    "max_rows_per_line {t:?} is not a number from 1 to {MAX_ROWS_PER_LINE}"
                ))
            })?,
    };
    let map: HashMap<String, String> = params.iter().cloned().collect();
    let name = target_index(&st.config, &headers, &map);
    let Some(handle) = st.registry.scope(&who).get(&name)? else {
        // No index yet: no series.
        return Ok(stream_response(Body::empty()));
    };
    if !handle.mapping().is_label_keyed() {
        return Err(Error::bad(
            "illegal_argument_exception",
            format!(
                "index [{name}] is not label-keyed: /api/v1/export reads the indices the metrics protocols write"
            ),
        ));
    }
    let h = Arc::clone(&handle);
    let chosen = blocking(move || h.read(|index| choose(index, &selectors, start, end))).await?;
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || produce(&handle, &chosen, start, end, rows, &tx));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(stream_response(Body::from_stream(stream)))
}

fn stream_response(body: Body) -> Response {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/stream+json; charset=utf-8"),
    );
    resp
}

/// The series of a segment that may match any selector, from its dimension index: a
/// superset that [`choose`] checks exactly on the labels.
fn candidates(p: &tidemark::dedup::Postings, selectors: &[Vec<Matcher>]) -> roaring::RoaringBitmap {
    let mut any = roaring::RoaringBitmap::new();
    for sel in selectors {
        let mut out = p.all();
        for m in sel {
            if out.is_empty() {
                break;
            }
            let mut b = p.matching(&m.name, |v| m.is_match(v));
            if m.is_match("") {
                b |= p.all() - p.has(&m.name);
            }
            out &= b;
        }
        any |= out;
    }
    any
}

/// The series matching any selector with data in `[start, end]`, in tsid order.
///
/// # Errors
/// `400` past [`MAX_EXPORT_SERIES`]; read errors.
pub(crate) fn choose(
    index: &tidemark::Index,
    selectors: &[Vec<Matcher>],
    start: i64,
    end: i64,
) -> Result<Vec<Chosen>> {
    let mut chosen: BTreeMap<Tsid, (Labels, u64)> = BTreeMap::new();
    let mut rejected: HashSet<Tsid> = HashSet::new();
    let mut too_many = false;
    index.select_series(
        start,
        end,
        |p| candidates(p, selectors),
        |hit| {
            if let Some(e) = chosen.get_mut(hit.tsid) {
                e.1 += hit.rows;
            } else if !too_many && !rejected.contains(hit.tsid) {
                let labels: Labels = hit
                    .dims
                    .iter()
                    .map(|(n, d)| (n.clone(), tidemark::dedup::dim_value_text(d)))
                    .filter(|(_, v)| !v.is_empty())
                    .collect();
                if selectors
                    .iter()
                    .any(|s| tidemark_promql::matches_all(&labels, s))
                {
                    if chosen.len() >= MAX_EXPORT_SERIES {
                        too_many = true;
                    } else {
                        chosen.insert(*hit.tsid, (labels, hit.rows));
                    }
                } else {
                    rejected.insert(*hit.tsid);
                }
            }
        },
    )?;
    if too_many {
        return Err(Error::bad(
            "bad_data",
            format!(
                "the selectors match more than {MAX_EXPORT_SERIES} series: export them in parts (narrower match[] selectors)"
            ),
        ));
    }
    Ok(chosen
        .into_iter()
        .map(|(tsid, (labels, rows))| (tsid, labels, rows))
        .collect())
}

/// Reads the chosen series a group at a time (the read lock held per group only) and
/// sends each group's lines; stops when the client is gone. A read error ends the
/// stream with an error, so the client sees a broken answer, never a short one.
fn produce(
    handle: &IndexHandle,
    chosen: &[Chosen],
    start: i64,
    end: i64,
    rows: usize,
    tx: &mpsc::Sender<io::Result<Bytes>>,
) {
    let mut from = 0usize;
    while from < chosen.len() {
        let mut to = from;
        let mut est = 0u64;
        while to < chosen.len() && to - from < GROUP_SERIES && (to == from || est < GROUP_SAMPLES) {
            est = est.saturating_add(chosen.get(to).map_or(0, |c| c.2));
            to += 1;
        }
        let group = chosen.get(from..to).unwrap_or_default();
        from = to;
        let lines = handle.read(|index| {
            let mut reader = index.series_reader(
                start,
                end,
                &[tidemark::VALUE_FIELD, tidemark::VALUE_LONG_FIELD],
            );
            let (mut cols, mut out) = (Vec::new(), Vec::new());
            let (mut ts, mut vs): (Vec<i64>, Vec<f64>) = (Vec::new(), Vec::new());
            for (tsid, labels, _) in group {
                reader
                    .read(tsid, &mut cols)
                    .map_err(|e| Error::status(500, "exception", e.to_string()))?;
                for c in &cols {
                    ts.clear();
                    vs.clear();
                    // Staleness markers are not samples: VictoriaMetrics exports none.
                    for (t, v) in c.ts.iter().zip(&c.values) {
                        if !tidemark_promql::is_stale_nan(*v) {
                            ts.push(*t);
                            vs.push(*v);
                        }
                    }
                    for (tc, vc) in ts.chunks(rows).zip(vs.chunks(rows)) {
                        vm_format::write_json_line(&mut out, labels, tc, vc);
                    }
                }
            }
            Ok(out)
        });
        match lines {
            Ok(out) => {
                let mut rest = Bytes::from(out);
                while !rest.is_empty() {
                    let piece = rest.split_to(rest.len().min(SEND_BYTES));
                    if tx.blocking_send(Ok(piece)).is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::error!(index = handle.name(), error = %e, "export failed");
                let _ = tx.blocking_send(Err(io::Error::other(e.reason())));
                return;
            }
        }
    }
}
