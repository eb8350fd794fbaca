//! The routes and their handlers: each parses the request, calls the registry or the
//! façade (on a blocking thread when it touches disk or parses documents), and shapes
//! the answer with [`protocol`](crate::protocol).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use serde_json::{Map, Value, json};
use tidemark::{Action, ItemResult, PreparedItem};
use tokio::sync::Semaphore;

use crate::auth::Principal;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::http::{self, Caller, json, params, read_body};
use crate::protocol::{self, BulkLine, ItemOutcome};
use crate::registry::{IndexHandle, IndexState, Registry};

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The configuration.
    pub config: Config,
    /// The indices and templates.
    pub registry: Registry,
    /// The cluster id answered on `GET /` (kept in the data directory).
    pub cluster_uuid: String,
    /// Admission of write requests: one permit per request being parsed, queued or
    /// written (taken once its body is read); none left is a `429`.
    pub write_permits: Arc<Semaphore>,
    /// The bytes of request bodies being received (one permit a byte, see
    /// [`Config::body_bytes_in_flight`]).
    pub body_bytes: Arc<Semaphore>,
    /// Label-keyed series already resolved, shared by the metrics protocols' requests.
    pub(crate) series_cache: crate::series_cache::SeriesCache,
    /// Requests answered, by route template, for `GET /metrics`.
    pub(crate) http_stats: crate::selfmon::HttpStats,
    /// What the Graphite and OpenTSDB TCP listeners did, for `GET /metrics`.
    pub(crate) tcp_stats: crate::tcp::TcpStats,
    /// What the lake exports did, for `GET /metrics`.
    pub(crate) lake_stats: crate::lake::LakeStats,
    /// Metric metadata from remote write, for `GET /api/v1/metadata`.
    pub(crate) prom_metadata: crate::prom_metadata::MetadataStore,
    /// Open points in time and scrolls.
    pub(crate) pits: crate::pit::Pits,
}

type St = State<Arc<AppState>>;
/// A router under construction that records the path of every route it serves, so
/// that the routes can be enumerated ([`route_paths`]): the security tests call every
/// route of the server as a foreign tenant, and a route added here is covered without
/// editing them.
#[derive(Default)]
pub struct Routes {
    router: Router<Arc<AppState>>,
    paths: Vec<String>,
}

impl Routes {
    /// No routes yet.
    pub fn new() -> Routes {
        Routes::default()
    }

    /// Adds a route (as [`Router::route`]) and records its path.
    #[must_use]
    pub fn route(
        mut self,
        path: &str,
        methods: axum::routing::MethodRouter<Arc<AppState>>,
    ) -> Routes {
        self.router = self.router.route(path, methods);
        self.paths.push(path.to_owned());
        self
    }

    /// Adds every route of `other`.
    #[must_use]
    pub fn merge(mut self, other: Routes) -> Routes {
        self.router = self.router.merge(other.router);
        self.paths.extend(other.paths);
        self
    }
}

/// Every route of the server, from each protocol module.
fn all_routes() -> Routes {
    Routes::new()
        .route("/", get(info))
        .route("/metrics", any(metrics_or_index))
        .route("/-/healthy", get(crate::selfmon::healthy))
        .route("/-/ready", get(crate::selfmon::healthy))
        .route("/_license", get(license))
        .route("/_xpack", get(xpack))
        .route("/_xpack/usage", get(xpack))
        .route("/_cluster/health", get(health))
        .route("/_cluster/health/{index}", get(health))
        .route("/_ilm/policy/{name}", any(ilm_policy))
        .route("/_component_template/{name}", any(component_template))
        .route("/_component_template", get(list_component_templates))
        .route("/_index_template/{name}", any(index_template))
        .route("/_index_template", get(list_index_templates))
        .route("/_cat/indices", get(cat_indices))
        .route("/_cat/indices/{pattern}", get(cat_indices_pattern))
        .route("/_bulk", post(bulk).put(bulk))
        .route("/{index}/_bulk", post(bulk).put(bulk))
        .route("/{index}", any(index_admin))
        .route("/{index}/_doc", post(doc_auto))
        .route("/{index}/_doc/{id}", any(doc_by_id))
        .route("/{index}/_create/{id}", put(doc_create).post(doc_create))
        .route("/{index}/_stats", get(stats))
        .route("/_stats", get(stats_all))
        .route("/{index}/_mapping", get(mapping))
        .route("/_mapping", get(mapping_all))
        .route("/{index}/_field_caps", get(field_caps).post(field_caps))
        .route("/_field_caps", get(field_caps_all).post(field_caps_all))
        .route("/{index}/_disk_usage", post(disk_usage))
        .route("/{index}/_refresh", post(refresh).get(refresh))
        .route("/{index}/_forcemerge", post(forcemerge))
        .merge(crate::search::routes())
        .merge(crate::metrics::routes())
        .merge(crate::prom_api::routes())
        .merge(crate::vm_api::routes())
        .merge(crate::ui::routes())
        .merge(crate::lake::routes())
}

/// The path of every route the server serves, as written in the router (`{index}`,
/// `{id}`, `{name}` and `{pattern}` stand for path segments).
pub fn route_paths() -> Vec<String> {
    all_routes().paths
}

/// The router: every route of the Elasticsearch subset and the other protocols, the
/// layer around all of them, and a fallback answering `400` naming the unsupported
/// endpoint.
pub fn router(state: Arc<AppState>) -> Router {
    all_routes()
        .router
        .fallback(fallback)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            http::layer,
        ))
        .with_state(state)
}

async fn fallback(method: Method, uri: axum::http::Uri) -> Response {
    // The Prometheus API answers in its own shape, as Prometheus does for a path it
    // does not serve (a 404), so its clients read the error.
    let path = uri.path();
    if path.starts_with("/api/v1/") || path.starts_with("/prometheus/api/v1/") {
        return json(
            404,
            &serde_json::json!({
                "status": "error",
                "errorType": "not_found",
                "error": format!("no Prometheus API endpoint {path} (method {method})"),
            }),
        );
    }
    Error::bad(
        "illegal_argument_exception",
        format!(
            "no handler found for uri [{}] and method [{method}]: Tidemark does not support this endpoint",
            uri.path()
        ),
    )
    .into_response()
}

/// Runs blocking work (disk, parsing) off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::status(500, "exception", format!("worker failed: {e}")))?
}

/// `GET`/`HEAD /`: the handshake, or the web UI's page for a browser (its `Accept` names
/// `text/html`; API clients never send that, so their answer is unchanged).
async fn info(State(st): St, headers: HeaderMap) -> Response {
    if crate::ui::wants_html(&headers) {
        return crate::ui::page(&headers);
    }
    let mut resp = json(
        200,
        &protocol::info_body(
            "tidemark",
            &st.config.cluster_name,
            &st.cluster_uuid,
            &st.config.version,
        ),
    );
    // The answer depends on `Accept`: a cache must not hand the page to a client.
    resp.headers_mut().insert(
        axum::http::header::VARY,
        axum::http::HeaderValue::from_static("Accept"),
    );
    resp
}

async fn license(State(st): St) -> Response {
    json(200, &protocol::license_body(&st.cluster_uuid))
}

async fn xpack(State(st): St) -> Response {
    json(
        200,
        &json!({
            "build": {"hash": "tidemark", "date": "2026-01-01T00:00:00.000Z"},
            "license": {"uid": st.cluster_uuid, "type": "basic", "mode": "basic", "status": "active"},
            "features": {},
            "tagline": "You know, for X",
        }),
    )
}

async fn health(State(st): St, Caller(who): Caller) -> Response {
    json(
        200,
        &protocol::health_body(&st.config.cluster_name, st.registry.scope(&who).count()),
    )
}

async fn ilm_policy(
    State(st): St,
    method: Method,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    // Accepted so that shippers' setup steps pass (their policies roll over, which a
    // partitioned store has no use for); Tidemark keeps no lifecycle policies. A policy
    // that deletes data is refused: acknowledging it would promise a retention that
    // never happens.
    if method == Method::PUT || method == Method::POST {
        let v = http::json_body(&read_body(&st, &headers, body).await?)?;
        let phases = v.pointer("/policy/phases").and_then(Value::as_object);
        let deletes = phases.is_some_and(|p| {
            p.contains_key("delete") || p.values().any(|ph| ph.pointer("/actions/delete").is_some())
        });
        if deletes {
            return Err(Error::bad(
                "illegal_argument_exception",
                format!(
                    "ILM policy [{name}] has a delete phase, which Tidemark does not run: set retention on the index instead, with \"settings\": {{\"index\": {{\"tidemark\": {{\"partitions\": {{\"width\": \"1d\", \"retention\": \"30d\"}}}}}}}} (docs/partitions.md)"
                ),
            ));
        }
    }
    Ok(if method == Method::GET || method == Method::HEAD {
        json(
            200,
            &json!({ name: {"version": 1, "modified_date": "2026-01-01T00:00:00.000Z", "policy": {"phases": {}}} }),
        )
    } else {
        json(200, &json!({"acknowledged": true}))
    })
}

async fn template_admin(
    st: Arc<AppState>,
    who: Principal,
    method: Method,
    name: String,
    headers: HeaderMap,
    body: Body,
    component: bool,
) -> Result<Response> {
    let key = if component {
        "component_templates"
    } else {
        "index_templates"
    };
    let inner = if component {
        "component_template"
    } else {
        "index_template"
    };
    match method {
        Method::PUT | Method::POST => {
            let bytes = read_body(&st, &headers, body).await?;
            let v = http::json_body(&bytes)?;
            let st2 = Arc::clone(&st);
            blocking(move || st2.registry.scope(&who).put_template(&name, v, component)).await?;
            Ok(json(200, &json!({"acknowledged": true})))
        }
        Method::DELETE => {
            let removed = {
                let st2 = Arc::clone(&st);
                let n = name.clone();
                blocking(move || st2.registry.scope(&who).delete_template(&n, component)).await?
            };
            if removed {
                Ok(json(200, &json!({"acknowledged": true})))
            } else {
                Err(Error::status(
                    404,
                    "resource_not_found_exception",
                    format!("{inner} matching [{name}] not found"),
                ))
            }
        }
        _ => {
            let found = st.registry.scope(&who).templates(&name, component);
            if found.is_empty() {
                return Err(Error::status(
                    404,
                    "resource_not_found_exception",
                    format!("{inner} matching [{name}] not found"),
                ));
            }
            let list: Vec<Value> = found
                .into_iter()
                .map(|(n, b)| json!({"name": n, inner: b}))
                .collect();
            Ok(json(200, &json!({ key: list })))
        }
    }
}

async fn index_template(
    State(st): St,
    Caller(who): Caller,
    method: Method,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    template_admin(st, who, method, name, headers, body, false).await
}

async fn component_template(
    State(st): St,
    Caller(who): Caller,
    method: Method,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    template_admin(st, who, method, name, headers, body, true).await
}

async fn list_index_templates(State(st): St, Caller(who): Caller) -> Response {
    let list: Vec<Value> = st
        .registry
        .scope(&who)
        .templates("*", false)
        .into_iter()
        .map(|(n, b)| json!({"name": n, "index_template": b}))
        .collect();
    json(200, &json!({ "index_templates": list }))
}

async fn list_component_templates(State(st): St, Caller(who): Caller) -> Response {
    let list: Vec<Value> = st
        .registry
        .scope(&who)
        .templates("*", true)
        .into_iter()
        .map(|(n, b)| json!({"name": n, "component_template": b}))
        .collect();
    json(200, &json!({ "component_templates": list }))
}

async fn cat_indices(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    cat(st, who, "*".to_owned(), q).await
}

async fn cat_indices_pattern(
    State(st): St,
    Caller(who): Caller,
    Path(pattern): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    cat(st, who, pattern, q).await
}

async fn cat(
    st: Arc<AppState>,
    who: Principal,
    pattern: String,
    q: Option<String>,
) -> Result<Response> {
    let params = params(q.as_deref());
    let rows = blocking(move || {
        let mut rows = Vec::new();
        for h in st.registry.scope(&who).resolve(&pattern)? {
            // An index reopening after a failed write has no figures for a moment.
            let (docs, bytes) = h
                .read(|i| Ok(i.stats()?))
                .map_or((0, 0), |s| (s.documents, s.bytes));
            rows.push((h.name().to_owned(), h.state(), docs, bytes));
        }
        Ok(rows)
    })
    .await?;
    // `status` is the index's write state: `open`, `read_only` (disk over the flood
    // stage, or a failed write waiting to reopen) or `reopening`; health is yellow
    // while it is not open.
    let health = |s: &IndexState| {
        if *s == IndexState::Open {
            "green"
        } else {
            "yellow"
        }
    };
    if params.get("format").map(String::as_str) == Some("json") {
        let list: Vec<Value> = rows
            .iter()
            .map(|(n, state, docs, bytes)| {
                json!({
                    "health": health(state), "status": state.name(), "index": n, "uuid": n,
                    "status.reason": state.reason(),
                    "pri": "1", "rep": "0", "docs.count": docs.to_string(),
                    "docs.deleted": "0", "store.size": format!("{bytes}b"),
                    "pri.store.size": format!("{bytes}b"), "dataset.size": format!("{bytes}b"),
                })
            })
            .collect();
        return Ok(json(200, &Value::Array(list)));
    }
    let verbose = params.contains_key("v");
    let mut out = String::new();
    if verbose {
        out.push_str(
            "health status index uuid pri rep docs.count docs.deleted store.size pri.store.size\n",
        );
    }
    for (n, state, docs, bytes) in rows {
        out.push_str(&format!(
            "{:<6} {:<6} {n} {n} 1 0 {docs} 0 {bytes}b {bytes}b\n",
            health(&state),
            state.name()
        ));
    }
    Ok(http::text(out))
}

/// `/metrics`: `GET` is the server's own metrics (what every scraper asks for); the
/// other methods are the index API of an index named `metrics`, which stays a valid
/// name (its `GET` is answered by `GET /_cat/indices/metrics` or `/metrics/_mapping`).
async fn metrics_or_index(
    st: St,
    who: Caller,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    if method == Method::GET {
        crate::selfmon::metrics(st, who).await
    } else {
        index_admin(st, who, method, Path("metrics".to_owned()), headers, body).await
    }
}

async fn index_admin(
    State(st): St,
    Caller(who): Caller,
    method: Method,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    if method == Method::PUT {
        protocol::check_index_name(&name)?;
        who.check(&name)?;
        let bytes = read_body(&st, &headers, body).await?;
        let v = http::json_body(&bytes)?;
        let n = name.clone();
        blocking(move || st.registry.scope(&who).create(&n, &v).map(|_| ())).await?;
        return Ok(json(
            200,
            &json!({"acknowledged": true, "shards_acknowledged": true, "index": name}),
        ));
    }
    if method == Method::DELETE {
        let targets: Vec<String> = st
            .registry
            .scope(&who)
            .resolve(&name)?
            .into_iter()
            .map(|h| h.name().to_owned())
            .collect();
        blocking(move || {
            for t in targets {
                st.registry.scope(&who).delete(&t)?;
            }
            Ok(())
        })
        .await?;
        return Ok(json(200, &json!({"acknowledged": true})));
    }
    if method != Method::GET && method != Method::HEAD {
        return Err(Error::status(
            405,
            "illegal_argument_exception",
            format!(
                "Incorrect HTTP method for uri [/{name}] and method [{method}], allowed: [GET, HEAD, PUT, DELETE]"
            ),
        ));
    }
    let handles = st.registry.scope(&who).resolve(&name)?;
    let mut out = Map::new();
    for h in handles {
        let source = h.mapping().source().clone();
        let mut settings = source
            .pointer("/settings/index")
            .cloned()
            .unwrap_or_else(|| json!({}));
        if let Value::Object(s) = &mut settings {
            s.insert("number_of_shards".into(), json!("1"));
            s.insert("number_of_replicas".into(), json!("0"));
            s.insert("provided_name".into(), json!(h.name()));
            s.insert("uuid".into(), json!(h.name()));
        }
        out.insert(
            h.name().to_owned(),
            json!({
                "aliases": {},
                "mappings": source.get("mappings").cloned().unwrap_or_else(|| json!({})),
                "settings": {"index": settings},
            }),
        );
    }
    Ok(json(200, &Value::Object(out)))
}

/// The bulk items of one index: the handle, the prepared items, and where each item's
/// result goes in the response (with the error type of items failed while parsing).
struct Group {
    handle: Arc<IndexHandle>,
    items: Vec<PreparedItem>,
    slots: Vec<usize>,
    kinds: Vec<Option<&'static str>>,
}

/// A bulk request read and parsed: the outcomes known before writing, and one group per
/// index for the writers.
struct Plan {
    outcomes: Vec<Option<(String, ItemOutcome)>>,
    names: Vec<String>,
    groups: Vec<Group>,
}

fn refuse(line: &BulkLine<'_>, e: &Error) -> ItemOutcome {
    let (status, kind) = e.status_and_kind();
    ItemOutcome::Refused {
        action: line.action,
        id: line.id.clone(),
        status,
        kind,
        reason: e.reason(),
    }
}

/// Reads and parses every item (on the calling blocking thread): resolves and checks its
/// index (creating it from a template), parses its document through the index's
/// mapping.
fn plan(registry: &Registry, who: &Principal, lines: Vec<BulkLine<'_>>) -> Plan {
    let scope = registry.scope(who);
    let n = lines.len();
    let mut plan = Plan {
        outcomes: (0..n).map(|_| None).collect(),
        names: vec![String::new(); n],
        groups: Vec::new(),
    };
    let mut by_index: HashMap<String, usize> = HashMap::new();
    let mut parsers: Vec<tidemark::DocParser> = Vec::new();
    for (slot, line) in lines.into_iter().enumerate() {
        let name = line.index.clone().unwrap_or_default();
        plan.names[slot] = name.clone();
        if name.is_empty() {
            let e = Error::bad(
                "action_request_validation_exception",
                "Validation Failed: 1: index is missing;",
            );
            plan.outcomes[slot] = Some((name, refuse(&line, &e)));
            continue;
        }
        let g = match by_index.get(&name) {
            Some(&g) => g,
            None => {
                let resolved = scope.get_or_create(&name);
                match resolved {
                    Ok(handle) => {
                        parsers.push(handle.parser());
                        // Most requests write one index: size for all the items once.
                        let expect = if plan.groups.is_empty() { n } else { 0 };
                        plan.groups.push(Group {
                            handle,
                            items: Vec::with_capacity(expect),
                            slots: Vec::with_capacity(expect),
                            kinds: Vec::with_capacity(expect),
                        });
                        by_index.insert(name.clone(), plan.groups.len() - 1);
                        plan.groups.len() - 1
                    }
                    Err(e) => {
                        plan.outcomes[slot] = Some((name, refuse(&line, &e)));
                        continue;
                    }
                }
            }
        };
        let (Some(group), Some(parser)) = (plan.groups.get_mut(g), parsers.get_mut(g)) else {
            continue;
        };
        let (item, kind) = prepare(parser, &line);
        group.items.push(item);
        group.slots.push(slot);
        group.kinds.push(kind);
    }
    plan
}

/// One item through the mapping; a document that does not parse becomes a failed item
/// with its Elasticsearch error type.
fn prepare(
    parser: &mut tidemark::DocParser,
    line: &BulkLine<'_>,
) -> (PreparedItem, Option<&'static str>) {
    let failed = |kind: &'static str, reason: String| {
        (
            PreparedItem::failed(line.line, line.action, line.id.clone(), reason),
            Some(kind),
        )
    };
    match line.action {
        Action::Delete => (
            PreparedItem::delete(line.line, line.id.clone().unwrap_or_default()),
            None,
        ),
        Action::Update => {
            let doc: Value = match serde_json::from_slice(line.doc.unwrap_or_default()) {
                Ok(v) => v,
                Err(e) => {
                    return failed(
                        "document_parsing_exception",
                        format!("[{}:{}] failed to parse: {e}", line.line + 1, e.column()),
                    );
                }
            };
            let Some(inner) = doc.get("doc") else {
                return failed(
                    "action_request_validation_exception",
                    "Validation Failed: 1: an update needs a partial document in [doc] (scripts and upserts are not supported);".to_owned(),
                );
            };
            match PreparedItem::update(
                parser,
                line.line,
                line.id.clone().unwrap_or_default(),
                inner,
            ) {
                Ok(item) => (item, None),
                Err(e) => failed("document_parsing_exception", e.to_string()),
            }
        }
        Action::Create | Action::Index => {
            let text = match std::str::from_utf8(line.doc.unwrap_or_default()) {
                Ok(t) => t,
                Err(e) => {
                    return failed(
                        "document_parsing_exception",
                        format!("not valid UTF-8: {e}"),
                    );
                }
            };
            match parser.parse_line(text) {
                Ok(doc) => (
                    PreparedItem::store(line.line, line.action, line.id.clone(), doc),
                    None,
                ),
                Err(tidemark::Error::Json(e)) => failed(
                    "document_parsing_exception",
                    format!("[{}:{}] failed to parse: {e}", line.line + 1, e.column()),
                ),
                Err(e) => failed(
                    "document_parsing_exception",
                    format!("[{}:1] failed to parse: {e}", line.line + 1),
                ),
            }
        }
    }
}

/// Runs a planned request: every group goes to its index's writer at once, and the
/// answer waits for all of them (each fsynced).
async fn execute(plan: Plan) -> Result<Vec<(String, ItemOutcome)>> {
    let Plan {
        mut outcomes,
        names,
        groups,
    } = plan;
    let mut waits = Vec::new();
    for g in groups {
        let Group {
            handle,
            items,
            slots,
            kinds,
        } = g;
        let rx = handle.submit(items);
        waits.push((rx, handle, slots, kinds));
    }
    for (rx, handle, slots, kinds) in waits {
        let results: Vec<ItemResult> = handle.wait(rx?).await?;
        for ((result, slot), kind) in results.into_iter().zip(slots).zip(kinds) {
            if let Some(o) = outcomes.get_mut(slot) {
                let name = names.get(slot).cloned().unwrap_or_default();
                *o = Some((name, ItemOutcome::Done { result, kind }));
            }
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|o| {
            o.unwrap_or_else(|| {
                (
                    String::new(),
                    ItemOutcome::Refused {
                        action: Action::Create,
                        id: None,
                        status: 500,
                        kind: "exception",
                        reason: "no result".to_owned(),
                    },
                )
            })
        })
        .collect())
}

pub(crate) fn admit(st: &AppState) -> Result<tokio::sync::OwnedSemaphorePermit> {
    Arc::clone(&st.write_permits).try_acquire_owned().map_err(|_| {
        Error::status(
            429,
            "es_rejected_execution_exception",
            format!(
                "rejected execution of coordinating operation: the write queue is full ({} requests in flight)",
                st.config.write_queue
            ),
        )
    })
}

/// `_bulk`: the response is sent only once every item is in the fsynced log.
async fn bulk(
    State(st): St,
    Caller(who): Caller,
    index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    // `/_bulk` and `/{index}/_bulk` alike: the path's index, when there is one.
    let index = index.map(|Path(i)| i);
    let start = Instant::now();
    let params = params(q.as_deref());
    check_refresh(&params)?;
    // Read as sent here; gunzipped with the parsing, on a blocking thread, so a large
    // gzip body does not hold up the async workers' other connections. The write slot
    // is taken once the body is here: a slow sender holds none.
    let raw = http::read_raw_body(&st, &headers, body).await?;
    let _permit = admit(&st)?;
    let st2 = Arc::clone(&st);
    let plan = blocking(move || {
        let bytes = http::decode_body(&st2, &headers, raw)?;
        let lines = protocol::split_bulk(&bytes, index.as_deref())?;
        Ok(plan(&st2.registry, &who, lines))
    })
    .await?;
    let outcomes = execute(plan).await?;
    let took = start.elapsed().as_millis() as u64;
    match params.get("filter_path") {
        Some(spec) if !spec.is_empty() => {
            let mut errors = false;
            let items: Vec<Value> = outcomes
                .iter()
                .map(|(name, o)| {
                    let (v, failed) = protocol::bulk_item_json(name, o);
                    errors |= failed;
                    v
                })
                .collect();
            let body = json!({"errors": errors, "took": took, "items": items});
            Ok(respond(200, body, &params))
        }
        _ => Ok(http::json_bytes(
            200,
            protocol::bulk_response_bytes(took, &outcomes),
        )),
    }
}

/// `refresh`: `true`, `wait_for` and `false` are all honoured as they are: an
/// acknowledged write is already visible to searches and gets (they read the engine's
/// buffer too).
fn check_refresh(params: &HashMap<String, String>) -> Result<()> {
    match params.get("refresh").map(String::as_str) {
        None | Some("") | Some("true") | Some("false") | Some("wait_for") => Ok(()),
        Some(other) => Err(Error::bad(
            "illegal_argument_exception",
            format!("Unknown value for refresh: [{other}]."),
        )),
    }
}

/// A JSON response, through `filter_path` when asked.
pub(crate) fn respond(status: u16, body: Value, params: &HashMap<String, String>) -> Response {
    let body = match params.get("filter_path") {
        Some(spec) if !spec.is_empty() => protocol::filter_path(body, spec),
        _ => body,
    };
    json(status, &body)
}

/// One document write (`_doc`, `_create`), as a one-item bulk.
/// The document a `_doc` or `_create` request names.
struct DocTarget {
    index: String,
    action: Action,
    id: Option<String>,
}

async fn single(
    st: Arc<AppState>,
    who: Principal,
    target: DocTarget,
    q: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let DocTarget { index, action, id } = target;
    let params = params(q.as_deref());
    check_refresh(&params)?;
    protocol::check_index_name(&index)?;
    who.check(&index)?;
    let action = match params.get("op_type").map(String::as_str) {
        Some("create") => Action::Create,
        _ => action,
    };
    let bytes = read_body(&st, &headers, body).await?;
    let _permit = admit(&st)?;
    let st2 = Arc::clone(&st);
    let plan = blocking(move || {
        let line = BulkLine {
            line: 1,
            action,
            index: Some(index),
            id,
            doc: (action != Action::Delete).then_some(&bytes[..]),
        };
        Ok(plan(&st2.registry, &who, vec![line]))
    })
    .await?;
    let outcomes = execute(plan).await?;
    let Some((name, outcome)) = outcomes.into_iter().next() else {
        return Err(Error::status(500, "exception", "no result"));
    };
    let (status, v) = protocol::doc_write_json(&name, &outcome);
    Ok(respond(status, v, &params))
}

async fn doc_auto(
    State(st): St,
    Caller(who): Caller,
    Path(index): Path<String>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    single(
        st,
        who,
        DocTarget {
            index,
            action: Action::Index,
            id: None,
        },
        q,
        headers,
        body,
    )
    .await
}

async fn doc_create(
    State(st): St,
    Caller(who): Caller,
    Path((index, id)): Path<(String, String)>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    single(
        st,
        who,
        DocTarget {
            index,
            action: Action::Create,
            id: Some(id),
        },
        q,
        headers,
        body,
    )
    .await
}

async fn doc_by_id(
    State(st): St,
    Caller(who): Caller,
    method: Method,
    Path((index, id)): Path<(String, String)>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    match method {
        Method::PUT | Method::POST => {
            single(
                st,
                who,
                DocTarget {
                    index,
                    action: Action::Index,
                    id: Some(id),
                },
                q,
                headers,
                body,
            )
            .await
        }
        Method::DELETE => {
            let handle = st.registry.scope(&who).require(&index)?;
            let _permit = admit(&st)?;
            let rx = handle.submit(vec![PreparedItem::delete(1, id)])?;
            let results = handle.wait(rx).await?;
            let Some(result) = results.into_iter().next() else {
                return Err(Error::status(500, "exception", "no result"));
            };
            let (status, v) =
                protocol::doc_write_json(&index, &ItemOutcome::Done { result, kind: None });
            Ok(json(status, &v))
        }
        Method::GET | Method::HEAD => {
            let handle = st.registry.scope(&who).require(&index)?;
            let params = params(q.as_deref());
            let filter = crate::search::SourceFilter::from_params(&params);
            let doc = {
                let id = id.clone();
                blocking(move || {
                    handle.read(|i| match i.get(&id) {
                        Ok(d) => Ok(d),
                        // An `_id` that cannot be one of ours names no document.
                        Err(tidemark::Error::InvalidId { .. }) => Ok(None),
                        Err(e) => Err(e.into()),
                    })
                })
                .await?
            };
            let found = doc.is_some();
            let source = doc.map(|d| filter.apply(protocol::source_of(d)));
            Ok(json(
                if found { 200 } else { 404 },
                &protocol::get_body(&index, &id, source),
            ))
        }
        _ => Err(Error::status(
            405,
            "illegal_argument_exception",
            format!("Incorrect HTTP method for uri [/{index}/_doc/{id}] and method [{method}]"),
        )),
    }
}

fn targets(st: &AppState, who: &Principal, name: &str) -> Result<Vec<Arc<IndexHandle>>> {
    st.registry.scope(who).resolve(name)
}

async fn stats(State(st): St, Caller(who): Caller, Path(index): Path<String>) -> Result<Response> {
    stats_of(&st, &who, &index).await
}

/// `GET /_stats`: every index the caller may read.
async fn stats_all(State(st): St, Caller(who): Caller) -> Result<Response> {
    stats_of(&st, &who, "*").await
}

async fn stats_of(st: &AppState, who: &Principal, index: &str) -> Result<Response> {
    let handles = targets(st, who, index)?;
    let body = blocking(move || {
        let mut indices = Map::new();
        let (mut docs, mut bytes) = (0u64, 0u64);
        for h in handles {
            let s = h.read(|i| Ok(i.stats()?))?;
            let state = h.state();
            docs += s.documents;
            bytes += s.bytes;
            let totals = json!({
                "docs": {"count": s.documents, "deleted": s.deleted_rows},
                "store": {"size_in_bytes": s.bytes},
                "segments": {"count": s.segments},
                "indexing": {"index_total": s.counters.created, "index_failed": s.counters.errors},
            });
            indices.insert(
                h.name().to_owned(),
                json!({"uuid": h.name(), "primaries": totals, "total": totals,
                       "status": state.name(), "status_reason": state.reason(),
                       "tidemark": s.to_json()}),
            );
        }
        let all = json!({"docs": {"count": docs}, "store": {"size_in_bytes": bytes}});
        Ok(json!({
            "_shards": {"total": indices.len(), "successful": indices.len(), "failed": 0},
            "_all": {"primaries": all, "total": all},
            "indices": indices,
        }))
    })
    .await?;
    Ok(json(200, &body))
}

/// `GET /<index>/_mapping`: each matching index's mappings, as Elasticsearch answers
/// (`{"<index>": {"mappings": {...}}}`), for Grafana and Kibana listing fields.
async fn mapping(
    State(st): St,
    Caller(who): Caller,
    Path(index): Path<String>,
) -> Result<Response> {
    mapping_of(&st, &who, &index)
}

/// `GET /_mapping`: every index the caller may read.
async fn mapping_all(State(st): St, Caller(who): Caller) -> Result<Response> {
    mapping_of(&st, &who, "*")
}

fn mapping_of(st: &AppState, who: &Principal, index: &str) -> Result<Response> {
    let mut out = Map::new();
    for h in targets(st, who, index)? {
        let source = h.mapping().source();
        let mappings = source.get("mappings").cloned().unwrap_or_else(|| json!({}));
        out.insert(h.name().to_owned(), json!({ "mappings": mappings }));
    }
    Ok(json(200, &Value::Object(out)))
}

/// `GET`/`POST /_field_caps` and `/<index>/_field_caps` (`?fields=` a comma list,
/// `*` wildcards; all fields when absent): each mapped field's type, across the
/// matching indices the caller may read, as Kibana and scripts ask for it. A field of
/// several types lists, under each type, the indices holding it so. The fields of a
/// label-keyed index (the metrics protocols') are its declared ones: its labels have no
/// mapping entry.
async fn field_caps(
    State(st): St,
    Caller(who): Caller,
    Path(index): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    field_caps_of(&st, &who, &index, q.as_deref())
}

async fn field_caps_all(
    State(st): St,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    field_caps_of(&st, &who, "*", q.as_deref())
}

fn field_caps_of(st: &AppState, who: &Principal, index: &str, q: Option<&str>) -> Result<Response> {
    let params = params(q);
    let patterns: Vec<String> = params.get("fields").map_or_else(
        || vec!["*".to_owned()],
        |f| f.split(',').map(str::to_owned).collect(),
    );
    let wanted = |path: &str| {
        patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => p == path,
        })
    };
    let handles = targets(st, who, index)?;
    let mut names: Vec<String> = handles.iter().map(|h| h.name().to_owned()).collect();
    names.sort();
    // path → type → (capabilities, indices)
    let mut fields: std::collections::BTreeMap<
        String,
        std::collections::BTreeMap<&'static str, (Value, Vec<String>)>,
    > = Default::default();
    for h in &handles {
        for f in h.mapping().fields() {
            if !wanted(&f.path) {
                continue;
            }
            let mut caps = json!({"type": f.ty.name(), "metadata_field": false,
                "searchable": true, "aggregatable": true});
            match f.role {
                tidemark::FieldRole::Dimension => caps["time_series_dimension"] = json!(true),
                tidemark::FieldRole::Metric(m) => caps["time_series_metric"] = json!(m.name()),
                _ => {}
            }
            let entry = fields
                .entry(f.path.clone())
                .or_default()
                .entry(f.ty.name())
                .or_insert_with(|| (caps, Vec::new()));
            entry.1.push(h.name().to_owned());
        }
    }
    let mut out = Map::new();
    for (path, types) in fields {
        let several = types.len() > 1;
        let mut t = Map::new();
        for (ty, (mut caps, mut indices)) in types {
            if several {
                indices.sort();
                caps["indices"] = json!(indices);
            }
            t.insert(ty.to_owned(), caps);
        }
        out.insert(path, Value::Object(t));
    }
    Ok(json(200, &json!({"indices": names, "fields": out})))
}

async fn disk_usage(
    State(st): St,
    Caller(who): Caller,
    Path(index): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let params = params(q.as_deref());
    if params.get("run_expensive_tasks").map(String::as_str) != Some("true") {
        return Err(Error::bad(
            "illegal_argument_exception",
            "analyzing the disk usage of an index is expensive and resource-intensive, the parameter [run_expensive_tasks] must be set to [true] in order for the task to be performed.",
        ));
    }
    let handles = targets(&st, &who, &index)?;
    let body = blocking(move || {
        let mut out = Map::new();
        out.insert(
            "_shards".into(),
            json!({"total": handles.len(), "successful": handles.len(), "failed": 0}),
        );
        for h in handles {
            let u = h.read(|i| Ok(i.disk_usage()?))?;
            let mut fields = Map::new();
            for f in &u.fields {
                fields.insert(
                    f.name.clone(),
                    json!({"total": format!("{}b", f.bytes), "total_in_bytes": f.bytes}),
                );
            }
            let mut components = Map::new();
            for c in &u.components {
                components.insert(c.name.clone(), json!(c.bytes));
            }
            out.insert(
                h.name().to_owned(),
                json!({
                    "store_size": format!("{}b", u.total_bytes),
                    "store_size_in_bytes": u.total_bytes,
                    "all_fields": {"total": format!("{}b", u.segment_bytes), "total_in_bytes": u.segment_bytes},
                    "fields": fields,
                    "tidemark": {"components_in_bytes": components, "detail": u.to_json()},
                }),
            );
        }
        Ok(Value::Object(out))
    })
    .await?;
    Ok(json(200, &body))
}

async fn refresh(
    State(st): St,
    Caller(who): Caller,
    Path(index): Path<String>,
) -> Result<Response> {
    let handles = targets(&st, &who, &index)?;
    let n = handles.len();
    blocking(move || {
        for h in handles {
            h.exclusive(|i| Ok(i.refresh()?))?;
        }
        Ok(())
    })
    .await?;
    Ok(json(
        200,
        &json!({"_shards": {"total": n, "successful": n, "failed": 0}}),
    ))
}

async fn forcemerge(
    State(st): St,
    Caller(who): Caller,
    Path(index): Path<String>,
) -> Result<Response> {
    let handles = targets(&st, &who, &index)?;
    let n = handles.len();
    blocking(move || {
        for h in handles {
            h.exclusive(|i| Ok(i.merge()?))?;
        }
        Ok(())
    })
    .await?;
    Ok(json(
        200,
        &json!({"_shards": {"total": n, "successful": n, "failed": 0}}),
    ))
}
