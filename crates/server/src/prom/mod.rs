//! The Prometheus HTTP query API over the time-series indices, for Grafana and promtool:
//! `/api/v1/query`, `/api/v1/query_range`, `/api/v1/series`, `/api/v1/labels`,
//! `/api/v1/label/{name}/values`, `/api/v1/metadata`, `/api/v1/status/buildinfo`,
//! `/api/v1/query_exemplars` and remote read (`/api/v1/read`), each also under `/prometheus` (as VictoriaMetrics serves
//! Grafana). Parameters come from the query string and, for `POST`, a form-encoded
//! body. Evaluation is `tidemark-promql`'s; every time-series index of the registry is
//! read, its dimensions as labels and each metric field as a `__name__`.

pub(crate) mod delete;
pub(crate) mod metadata;
pub mod remote_read;
pub mod snapshot;
pub(crate) mod tsdb_status;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use tidemark::{FieldRole, IndexMode};
use tidemark_promql::{
    Error as PromError, IndexStorage, Matcher, QueryOptions, ReadStats, Series, Storage,
    WindowRequest, WindowSeries, api as papi,
};

use crate::auth::Principal;
use crate::http::{Caller, json, read_body};
use crate::registry::IndexHandle;
use crate::state::{AppState, blocking, now_ms};

/// The Prometheus version whose API and PromQL semantics this follows (Grafana picks
/// features by it): Prometheus 3's left-open range windows and lookback, and its `rate`
/// extrapolation, which the conformance run checks (docs/promql.md).
const PROMETHEUS_API_VERSION: &str = "3.0.0";
/// Longest query time, also the cap of a `timeout` parameter.
const MAX_TIMEOUT: Duration = Duration::from_secs(120);
/// Most series a `series`/`labels`/`label values` answer may cover.
const MAX_METADATA_SERIES: usize = 100_000;

type St = State<Arc<AppState>>;

/// The routes, under `/api/v1` and `/prometheus/api/v1`.
pub fn routes() -> crate::routes::Routes {
    let mut r = crate::routes::Routes::new();
    for prefix in ["", "/prometheus"] {
        r = r
            .route(&format!("{prefix}/api/v1/query"), get(query).post(query))
            .route(
                &format!("{prefix}/api/v1/query_range"),
                get(query_range).post(query_range),
            )
            .route(&format!("{prefix}/api/v1/series"), get(series).post(series))
            .route(&format!("{prefix}/api/v1/labels"), get(labels).post(labels))
            .route(
                &format!("{prefix}/api/v1/label/{{name}}/values"),
                get(label_values),
            )
            .route(&format!("{prefix}/api/v1/metadata"), get(metadata))
            .route(
                &format!("{prefix}/api/v1/read"),
                post(crate::prom::remote_read::handler),
            )
            .route(
                &format!("{prefix}/api/v1/admin/tsdb/delete_series"),
                post(crate::prom::delete::delete_series).put(crate::prom::delete::delete_series),
            )
            .route(
                &format!("{prefix}/api/v1/admin/tsdb/snapshot"),
                post(crate::prom::snapshot::handler).put(crate::prom::snapshot::handler),
            )
            .route(&format!("{prefix}/api/v1/status/buildinfo"), get(buildinfo))
            .route(
                &format!("{prefix}/api/v1/status/tsdb"),
                get(crate::prom::tsdb_status::status_tsdb)
                    .post(crate::prom::tsdb_status::status_tsdb),
            )
            .route(
                &format!("{prefix}/api/v1/query_exemplars"),
                get(exemplars).post(exemplars),
            );
    }
    r
}

/// Every time-series index, read as one Prometheus store; each index's read lock is
/// held only while one selector reads it.
struct RegistryStorage {
    /// The server: its lake cache reads back time retention removed before a read.
    state: Arc<AppState>,
    indices: Vec<Arc<IndexHandle>>,
    /// Whether window aggregates may read rollups (`tidemark_rollups=false` turns it
    /// off, for comparisons).
    rollups: bool,
    /// What the reads took, summed over the indices.
    stats: std::cell::Cell<ReadStats>,
}

impl RegistryStorage {
    fn new(st: &Arc<AppState>, who: &Principal) -> RegistryStorage {
        RegistryStorage {
            state: Arc::clone(st),
            indices: st
                .registry
                .scope(who)
                .list()
                .into_iter()
                .filter(|h| matches!(h.mapping().mode(), IndexMode::TimeSeries))
                .collect(),
            rollups: true,
            stats: std::cell::Cell::new(ReadStats::default()),
        }
    }

    fn storage<'i>(&self, index: &'i tidemark::Index) -> IndexStorage<'i> {
        let s = IndexStorage::new(index);
        if self.rollups { s } else { s.without_rollups() }
    }

    fn absorb(&self, s: ReadStats) {
        let mut t = self.stats.get();
        t.raw_samples += s.raw_samples;
        t.rollup_buckets += s.rollup_buckets;
        t.rollup_windows += s.rollup_windows;
        t.fallback_windows += s.fallback_windows;
        self.stats.set(t);
    }

    /// Runs `f` over each index's storage in turn, reading `[first_ms, last_ms]`
    /// (inclusive): what retention removed there is read back from the index's lake
    /// first, where it has one.
    fn each(
        &self,
        (first_ms, last_ms): (i64, i64),
        mut f: impl FnMut(&IndexStorage<'_>) -> tidemark_promql::Result<()>,
    ) -> tidemark_promql::Result<()> {
        for h in &self.indices {
            if let Some(cache) = &self.state.lake_cache {
                match cache.ensure(&self.state.registry, h, first_ms, last_ms) {
                    Ok(()) => {}
                    Err(e) if e.status_and_kind().0 == 404 => continue,
                    Err(e) => return Err(PromError::Storage(e.reason())),
                }
            }
            let out = h.read(|index| {
                let s = self.storage(index);
                let r = f(&s);
                self.absorb(s.read_stats());
                Ok(r)
            });
            match out {
                Ok(r) => r?,
                // An index deleted since the list was taken has no series.
                Err(e) if e.status_and_kind().0 == 404 => {}
                Err(e) => return Err(PromError::Storage(e.reason())),
            }
        }
        Ok(())
    }

    /// The read stats as `data.stats.tidemark` of an answer.
    fn stats_json(&self) -> Value {
        let s = self.stats.get();
        json!({"tidemark": {
            "rawSamples": s.raw_samples,
            "rollupBuckets": s.rollup_buckets,
            "rollupWindows": s.rollup_windows,
            "fallbackWindows": s.fallback_windows,
        }})
    }
}

impl Storage for RegistryStorage {
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(Series) -> tidemark_promql::Result<()>,
    ) -> tidemark_promql::Result<()> {
        self.each((start_ms, end_ms), |s| {
            s.select(matchers, start_ms, end_ms, visit)
        })
    }

    fn select_batches(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        prepare: Option<tidemark_promql::Prepare<'_>>,
        visit: &mut dyn FnMut(Vec<Series>) -> tidemark_promql::Result<()>,
    ) -> tidemark_promql::Result<()> {
        self.each((start_ms, end_ms), |s| {
            s.select_batches(matchers, start_ms, end_ms, prepare, visit)
        })
    }

    fn select_windows(
        &self,
        matchers: &[Matcher],
        req: &WindowRequest<'_>,
        prepare: Option<tidemark_promql::Prepare<'_>>,
        visit: &mut dyn FnMut(WindowSeries) -> tidemark_promql::Result<()>,
    ) -> tidemark_promql::Result<()> {
        let first = req
            .ends
            .iter()
            .min()
            .map_or(i64::MAX, |t| t.saturating_sub(req.range_ms));
        let last = req.ends.iter().max().copied().unwrap_or(i64::MIN);
        self.each((first, last), |s| {
            s.select_windows(matchers, req, prepare, visit)
        })
    }
}

/// The storage of a query request: `tidemark_rollups=false` reads raw samples only.
fn query_storage(
    st: &Arc<AppState>,
    who: &Principal,
    params: &[(String, String)],
) -> RegistryStorage {
    let mut s = RegistryStorage::new(st, who);
    s.rollups = !matches!(
        param(params, "tidemark_rollups"),
        Some("false" | "0" | "off")
    );
    s
}

/// `data` with `stats` added when the request asked for them (`stats=all`, as
/// Prometheus; Tidemark's read counters under `stats.tidemark`).
fn with_stats(mut data: Value, params: &[(String, String)], storage: &RegistryStorage) -> Value {
    if param(params, "stats").is_some_and(|v| !v.is_empty())
        && let Value::Object(m) = &mut data
    {
        m.insert("stats".into(), storage.stats_json());
    }
    data
}

/// The parameters of a request: the query string, then a form body's pairs.
pub(crate) async fn all_params(
    st: &AppState,
    raw: Option<String>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Vec<(String, String)>, PromError> {
    let form = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let bytes = if form {
        Some(
            read_body(st, headers, body)
                .await
                .map_err(|e| PromError::BadData(e.reason()))?,
        )
    } else {
        None
    };
    Ok(request_params(raw.as_deref(), bytes.as_deref()))
}

/// The parameters of a Prometheus API request: the query string's pairs, then those of
/// its form-encoded body (`form`, when the request has one), in that order; where a
/// name repeats, the API reads the last (`match[]` reads them all).
pub fn request_params(raw: Option<&str>, form: Option<&[u8]>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = raw
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    if let Some(f) = form {
        out.extend(form_urlencoded::parse(f).into_owned());
    }
    out
}

pub(crate) fn param<'p>(params: &'p [(String, String)], name: &str) -> Option<&'p str> {
    params
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn required<'p>(params: &'p [(String, String)], name: &str) -> Result<&'p str, PromError> {
    param(params, name)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| PromError::BadData(format!("invalid parameter \"{name}\": missing")))
}

fn time_param(params: &[(String, String)], name: &str, default: i64) -> Result<i64, PromError> {
    match param(params, name) {
        None | Some("") => Ok(default),
        Some(t) => papi::parse_time(name, t),
    }
}

fn options(params: &[(String, String)]) -> Result<QueryOptions, PromError> {
    let mut opts = QueryOptions {
        timeout: MAX_TIMEOUT,
        ..QueryOptions::default()
    };
    if let Some(t) = param(params, "timeout").filter(|t| !t.is_empty()) {
        let ms = papi::parse_duration("timeout", t)?;
        if ms <= 0 {
            return Err(PromError::BadData(
                "invalid parameter \"timeout\": must be positive".into(),
            ));
        }
        opts.timeout = opts.timeout.min(Duration::from_millis(ms.unsigned_abs()));
    }
    Ok(opts)
}

/// The API's answer to `result`: `{"status":"success","data":..}` with 200, or the
/// error's `errorType` with its status (400, 422, 503, 500).
pub fn api_answer(result: Result<Value, PromError>) -> Response {
    answer(result)
}

fn answer(result: Result<Value, PromError>) -> Response {
    match result {
        Ok(data) => json(200, &papi::success_json(data)),
        Err(e) => json(e.http_status(), &papi::error_json(&e)),
    }
}

async fn run_blocking(
    f: impl FnOnce() -> Result<Value, PromError> + Send + 'static,
) -> Result<Value, PromError> {
    match blocking(move || Ok(f())).await {
        Ok(r) => r,
        Err(e) => Err(PromError::Execution(e.reason())),
    }
}

/// The `data` of `/api/v1/query` with these parameters over `storage` (`time`
/// defaults to `now_ms`): the one reading of the parameters `tidemark serve` and a
/// cluster's router share.
///
/// # Errors
/// `bad_data` for missing or invalid parameters; the evaluation's errors.
pub fn instant_data(
    storage: &dyn Storage,
    params: &[(String, String)],
    now_ms: i64,
) -> Result<Value, PromError> {
    let q = required(params, "query")?;
    let t = time_param(params, "time", now_ms)?;
    let opts = options(params)?;
    let v = tidemark_promql::instant_query(storage, q, t, &opts)?;
    Ok(papi::data_json(&v))
}

/// The `data` of `/api/v1/query_range` with these parameters over `storage`.
///
/// # Errors
/// As [`instant_data`].
pub fn range_data(storage: &dyn Storage, params: &[(String, String)]) -> Result<Value, PromError> {
    let q = required(params, "query")?;
    let start = papi::parse_time("start", required(params, "start")?)?;
    let end = papi::parse_time("end", required(params, "end")?)?;
    let step = papi::parse_duration("step", required(params, "step")?)?;
    let opts = options(params)?;
    let v = tidemark_promql::range_query(storage, q, start, end, step, &opts)?;
    Ok(papi::data_json(&v))
}

/// The `data` of `/api/v1/series` with these parameters over `storage`.
///
/// # Errors
/// `bad_data` without `match[]` or with invalid times; read errors; more than
/// 100,000 series.
pub fn series_data(storage: &dyn Storage, params: &[(String, String)]) -> Result<Value, PromError> {
    let (sel, start, end) = selection(params, true)?;
    let s = tidemark_promql::series(storage, &sel, start, end, MAX_METADATA_SERIES)?;
    Ok(Value::Array(s.iter().map(papi::labels_json).collect()))
}

/// The `data` of `/api/v1/labels` (`name` None) or `/api/v1/label/{name}/values` with
/// these parameters over `storage`, read from the series it selects.
///
/// # Errors
/// As [`series_data`] (`match[]` is optional here); an invalid `limit`.
pub fn labels_data(
    storage: &dyn Storage,
    name: Option<&str>,
    params: &[(String, String)],
) -> Result<Value, PromError> {
    let (sel, start, end) = selection(params, false)?;
    let limit = limit_param(params)?;
    let mut out = match name {
        None => tidemark_promql::label_names(storage, &sel, start, end, MAX_METADATA_SERIES)?,
        Some(n) => {
            tidemark_promql::label_values(storage, n, &sel, start, end, MAX_METADATA_SERIES)?
        }
    };
    out.truncate(limit);
    Ok(json!(out))
}

async fn query(
    State(st): St,
    Caller(who): Caller,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let params = all_params(&st, raw, &headers, body).await?;
        let storage = query_storage(&st, &who, &params);
        run_blocking(move || {
            let data = instant_data(&storage, &params, now_ms())?;
            Ok(with_stats(data, &params, &storage))
        })
        .await
    }
    .await;
    answer(result)
}

async fn query_range(
    State(st): St,
    Caller(who): Caller,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let params = all_params(&st, raw, &headers, body).await?;
        let storage = query_storage(&st, &who, &params);
        run_blocking(move || {
            let data = range_data(&storage, &params)?;
            Ok(with_stats(data, &params, &storage))
        })
        .await
    }
    .await;
    answer(result)
}

/// `match[]`, `start` and `end` of the metadata endpoints.
pub(crate) fn selection(
    params: &[(String, String)],
    need_match: bool,
) -> Result<(Vec<Vec<Matcher>>, i64, i64), PromError> {
    let selectors = params
        .iter()
        .filter(|(k, _)| k == "match[]")
        .map(|(_, v)| tidemark_promql::selector_matchers(v))
        .collect::<Result<Vec<_>, _>>()?;
    if need_match && selectors.is_empty() {
        return Err(PromError::BadData("no match[] parameter provided".into()));
    }
    let start = time_param(params, "start", i64::MIN / 2)?;
    let end = time_param(params, "end", i64::MAX / 2)?;
    Ok((selectors, start, end))
}

/// `limit`: at most this many entries (Prometheus 2.49's parameter; 0 or absent: all).
fn limit_param(params: &[(String, String)]) -> Result<usize, PromError> {
    match param(params, "limit") {
        None | Some("" | "0") => Ok(usize::MAX),
        Some(t) => t.parse::<usize>().map_err(|_| {
            PromError::BadData(format!("invalid limit {t:?}: not a non-negative integer"))
        }),
    }
}

/// Label names (`name` None) or the values of label `name`, sorted, straight from each
/// index's dimension index, without listing series: so the metric browser's calls
/// answer at any cardinality. Only without `match[]` and when every index read is
/// label-keyed (a mapped index's metric names are its fields, which the series path
/// names); `None` otherwise.
fn from_postings(
    storage: &RegistryStorage,
    selectors: &[Vec<Matcher>],
    name: Option<&str>,
    start: i64,
    end: i64,
) -> Option<Result<Vec<String>, PromError>> {
    if !selectors.is_empty() || !storage.indices.iter().all(|h| h.mapping().is_label_keyed()) {
        return None;
    }
    // The API's range is inclusive, as the façade's is.
    let range = tidemark::TimeRange::new(start, end);
    let mut out = std::collections::BTreeSet::new();
    for h in &storage.indices {
        let read = h.read(|index| {
            match name {
                None => out.extend(index.labels(range)?),
                Some(n) => out.extend(index.label_values(n, range)?.into_iter().map(|(v, _)| v)),
            }
            Ok(())
        });
        if let Err(e) = read {
            return Some(Err(PromError::Storage(e.reason())));
        }
    }
    Some(Ok(out.into_iter().collect()))
}

async fn series(
    State(st): St,
    Caller(who): Caller,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let params = all_params(&st, raw, &headers, body).await?;
        let storage = RegistryStorage::new(&st, &who);
        run_blocking(move || series_data(&storage, &params)).await
    }
    .await;
    answer(result)
}

/// `labels` and `label/{name}/values`: from the dimension indices where
/// [`from_postings`] can answer, else from the series.
async fn names_or_values(
    st: Arc<AppState>,
    who: Principal,
    name: Option<String>,
    params: Result<Vec<(String, String)>, PromError>,
) -> Response {
    let result = async {
        let params = params?;
        let storage = RegistryStorage::new(&st, &who);
        run_blocking(move || {
            let (sel, start, end) = selection(&params, false)?;
            match from_postings(&storage, &sel, name.as_deref(), start, end) {
                Some(out) => {
                    let mut out = out?;
                    out.truncate(limit_param(&params)?);
                    Ok(json!(out))
                }
                None => labels_data(&storage, name.as_deref(), &params),
            }
        })
        .await
    }
    .await;
    answer(result)
}

async fn labels(
    State(st): St,
    Caller(who): Caller,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let params = all_params(&st, raw, &headers, body).await;
    names_or_values(st, who, None, params).await
}

async fn label_values(
    State(st): St,
    Caller(who): Caller,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let params = all_params(&st, raw, &headers, body).await;
    names_or_values(st, who, Some(name), params).await
}

/// Metric names and types from the mapped indices' mappings (`counter` or `gauge`;
/// numeric value fields are `unknown`). Label-keyed indices carry no types: their
/// metric names are listed by `label/__name__/values`.
async fn metadata(State(st): St, Caller(who): Caller, RawQuery(raw): RawQuery) -> Response {
    let params: Vec<(String, String)> = raw
        .as_deref()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let only = param(&params, "metric").map(tidemark_promql::label_safe);
    let mut out = Map::new();
    for h in st.registry.scope(&who).list() {
        // A label-keyed index's metadata is what Prometheus sent with remote write.
        if h.mapping().is_label_keyed() {
            let dir = st.registry.root().join(crate::INDICES_DIR).join(h.name());
            for (family, (ty, help, unit)) in st.prom_metadata.get(h.name(), &dir) {
                if only.as_ref().is_some_and(|o| *o != family) {
                    continue;
                }
                out.entry(family)
                    .or_insert_with(|| json!([{"type": ty, "help": help, "unit": unit}]));
            }
            continue;
        }
        // A label-keyed index's fields are its value columns, not metric names.
        if !matches!(h.mapping().mode(), IndexMode::TimeSeries) {
            continue;
        }
        for f in h.mapping().fields() {
            let ty = match f.role {
                FieldRole::Metric(t) => t.name(),
                FieldRole::Value => "unknown",
                _ => continue,
            };
            let name = tidemark_promql::label_safe(&f.path);
            if only.as_ref().is_some_and(|o| *o != name) {
                continue;
            }
            out.entry(name)
                .or_insert_with(|| json!([{"type": ty, "help": "", "unit": ""}]));
        }
    }
    answer(Ok(Value::Object(out)))
}

async fn buildinfo() -> Response {
    answer(Ok(json!({
        "version": PROMETHEUS_API_VERSION,
        "revision": format!(
            "tidemark-{} (PromQL as Prometheus {PROMETHEUS_API_VERSION})",
            env!("CARGO_PKG_VERSION")
        ),
        "branch": "",
        "buildUser": "",
        "buildDate": "",
        "goVersion": "",
    })))
}

/// Exemplars are not stored: always an empty list (after checking the parameters).
async fn exemplars(
    State(st): St,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let params = all_params(&st, raw, &headers, body).await?;
        tidemark_promql::parse(required(&params, "query")?)?;
        Ok(json!([]))
    }
    .await;
    answer(result)
}
