//! What a router answers besides writes: the Prometheus query API over every shard
//! owner ([`ClusterStorage`]: the owners' series read with remote read, evaluated
//! here with the same parameter handling as `tidemark serve`), and the cluster's state
//! as Elasticsearch reports a cluster's, `GET /_cluster/health` and `GET /_cat/shards`,
//! from etcd (who owns what) and JetStream (stream replicas, consumer backlog).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::future::join_all;
use serde_json::{Value, json};
use tidemark_promql::{Error as PromError, api as papi};
use tidemark_server::prom;

use crate::query::ClusterStorage;
use crate::router::{RouterState, St, now_ms};
use crate::shard::VIRTUAL_SHARDS;
use crate::topology::{Topology, ranges};

/// The routes, under `/api/v1` and `/prometheus/api/v1` for the query API.
pub(crate) fn routes() -> Router<Arc<RouterState>> {
    let mut r = Router::new()
        .route("/_cluster/health", get(health))
        .route("/_cat/shards", get(cat_shards));
    for prefix in ["", "/prometheus"] {
        r = r
            .route(
                &format!("{prefix}/api/v1/query"),
                get(instant).post(instant),
            )
            .route(
                &format!("{prefix}/api/v1/query_range"),
                get(range).post(range),
            )
            .route(&format!("{prefix}/api/v1/series"), get(series).post(series))
            .route(&format!("{prefix}/api/v1/labels"), get(labels).post(labels))
            .route(
                &format!("{prefix}/api/v1/label/{{name}}/values"),
                get(label_values),
            );
    }
    r
}

/// Which query endpoint.
#[derive(Clone)]
enum Call {
    Instant,
    Range,
    Series,
    Labels(Option<String>),
}

async fn instant(st: St, q: RawQuery, h: HeaderMap, b: Body) -> Response {
    query(st, Call::Instant, q, h, b).await
}

async fn range(st: St, q: RawQuery, h: HeaderMap, b: Body) -> Response {
    query(st, Call::Range, q, h, b).await
}

async fn series(st: St, q: RawQuery, h: HeaderMap, b: Body) -> Response {
    query(st, Call::Series, q, h, b).await
}

async fn labels(st: St, q: RawQuery, h: HeaderMap, b: Body) -> Response {
    query(st, Call::Labels(None), q, h, b).await
}

async fn label_values(st: St, Path(name): Path<String>, q: RawQuery, h: HeaderMap) -> Response {
    query(st, Call::Labels(Some(name)), q, h, Body::empty()).await
}

fn prom_error(e: &PromError) -> Response {
    tidemark_server::http::json(e.http_status(), &papi::error_json(e))
}

/// Reads the parameters (query string and form body), then reads the topology and
/// evaluates on a blocking thread: etcd's gateway and the owners are read with
/// blocking HTTP.
async fn query(
    State(st): St,
    call: Call,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let form_bytes = if form {
        let limit = usize::try_from(st.config.max_content_length).unwrap_or(usize::MAX);
        match axum::body::to_bytes(body, limit).await {
            Ok(b) => Some(b),
            Err(e) => {
                return prom_error(&PromError::BadData(format!("reading the form body: {e}")));
            }
        }
    } else {
        None
    };
    let params = prom::request_params(raw.as_deref(), form_bytes.as_deref());
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let st2 = Arc::clone(&st);
    let done = tokio::task::spawn_blocking(move || -> Result<(Value, Vec<String>), PromError> {
        let topology = Topology::read(&st2.etcd, &st2.config.prefix)
            .map_err(|e| PromError::Unavailable(e.to_string()))?;
        let partial = matches!(prom_param(&params, "partial_response"), Some("true" | "1"));
        let storage = ClusterStorage::new(
            &topology,
            authorization,
            Duration::from_secs(st2.config.query_timeout_secs),
            partial,
        )?;
        let data = match &call {
            Call::Instant => prom::instant_data(&storage, &params, now_ms())?,
            Call::Range => prom::range_data(&storage, &params)?,
            Call::Series => prom::series_data(&storage, &params)?,
            Call::Labels(name) => prom::labels_data(&storage, name.as_deref(), &params)?,
        };
        let warnings = if storage.unserved().is_empty() {
            Vec::new()
        } else {
            vec![format!(
                "partial response: shards {} have no live owner; their series are missing",
                ranges(storage.unserved())
            )]
        };
        Ok((data, warnings))
    })
    .await;
    match done {
        Ok(Ok((data, warnings))) => {
            let mut v = papi::success_json(data);
            if !warnings.is_empty() {
                v["warnings"] = json!(warnings);
            }
            tidemark_server::http::json(200, &v)
        }
        Ok(Err(e)) => prom_error(&e),
        Err(e) => prom_error(&PromError::Execution(format!("query worker failed: {e}"))),
    }
}

fn prom_param<'p>(params: &'p [(String, String)], name: &str) -> Option<&'p str> {
    params
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// One JetStream stream's replication state.
struct StreamState {
    name: String,
    /// Its leader, if it has one (no leader: no write is acknowledged).
    leader: Option<String>,
    /// Replicas up to date, the leader included.
    current: usize,
    /// Messages held.
    messages: u64,
    /// Why its state could not be read.
    error: Option<String>,
}

async fn stream_states(st: &RouterState) -> Vec<StreamState> {
    join_all((0..st.config.streams).map(|g| async move {
        let name = st.config.stream_name(g);
        let info = match st.js.get_stream(&name).await {
            Ok(mut s) => s.info().await.cloned().map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match info {
            Ok(info) => {
                let (leader, current) = match &info.cluster {
                    // A JetStream without clustering reports no peers: one copy, the
                    // server itself.
                    Some(c) if c.leader.is_some() || !c.replicas.is_empty() => (
                        c.leader.clone(),
                        usize::from(c.leader.is_some())
                            + c.replicas
                                .iter()
                                .filter(|p| p.current && !p.offline)
                                .count(),
                    ),
                    _ => (Some("(single server)".to_owned()), 1),
                };
                StreamState {
                    name,
                    leader,
                    current,
                    messages: info.state.messages,
                    error: None,
                }
            }
            Err(e) => StreamState {
                name,
                leader: None,
                current: 0,
                messages: 0,
                error: Some(e),
            },
        }
    }))
    .await
}

/// The topology, or the `503` to answer when etcd does not give it.
async fn read_topology(st: &Arc<RouterState>) -> Result<Topology, Response> {
    let st2 = Arc::clone(st);
    let read = tokio::task::spawn_blocking(move || Topology::read(&st2.etcd, &st2.config.prefix))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    read.map_err(|e| {
        es_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("etcd does not answer: {e}"),
        )
    })
}

fn es_error(status: StatusCode, reason: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"error": {"type": "master_not_discovered_exception", "reason": reason}, "status": status.as_u16()})
            .to_string(),
    )
        .into_response()
}

/// `GET /_cluster/health`: `red` when a shard has no live owner or a stream has no
/// leader (writes to it fail), `yellow` when a stream has fewer up-to-date replicas
/// than configured, `green` otherwise; the shards counted as Elasticsearch counts them
/// (the 256 virtual shards are primaries without replicas: JetStream holds the copies),
/// the streams under `tidemark`.
async fn health(State(st): St) -> Response {
    let topology = match read_topology(&st).await {
        Ok(t) => t,
        Err(answer) => return answer,
    };
    let streams = stream_states(&st).await;
    let unserved = topology.unserved();
    let active = VIRTUAL_SHARDS as usize - unserved.len();
    let leaderless = streams.iter().filter(|s| s.leader.is_none()).count();
    let degraded = streams
        .iter()
        .filter(|s| s.current < st.config.replicas)
        .count();
    let status = if !unserved.is_empty() || leaderless > 0 {
        "red"
    } else if degraded > 0 {
        "yellow"
    } else {
        "green"
    };
    let serving = topology.serving();
    let body = json!({
        "cluster_name": st.config.prefix,
        "status": status,
        "timed_out": false,
        "number_of_nodes": serving.len(),
        "number_of_data_nodes": serving.len(),
        "active_primary_shards": active,
        "active_shards": active,
        "relocating_shards": 0,
        "initializing_shards": 0,
        "unassigned_shards": unserved.len(),
        "delayed_unassigned_shards": 0,
        "number_of_pending_tasks": 0,
        "number_of_in_flight_fetch": 0,
        "task_max_waiting_in_queue_millis": 0,
        "active_shards_percent_as_number": active as f64 * 100.0 / f64::from(VIRTUAL_SHARDS),
        "tidemark": {
            "unserved_shards": ranges(&unserved),
            "replicas": st.config.replicas,
            "streams": streams.iter().map(|s| json!({
                "name": s.name,
                "leader": s.leader,
                "current_replicas": s.current,
                "messages": s.messages,
                "error": s.error,
            })).collect::<Vec<_>>(),
            "nodes": topology.nodes,
        },
    });
    tidemark_server::http::json(200, &body)
}

/// `GET /_cat/shards[?v][&format=json]`: one row per virtual shard: its stream, state
/// (`STARTED` with a live owner, else `UNASSIGNED`), owner, the owner's address, the
/// assigned node, and the messages its consumer has not yet delivered (`pending`) or
/// delivered without an acknowledgement yet (`ack_pending`).
async fn cat_shards(State(st): St, RawQuery(raw): RawQuery) -> Response {
    let params = prom::request_params(raw.as_deref(), None);
    let topology = match read_topology(&st).await {
        Ok(t) => t,
        Err(answer) => return answer,
    };
    let backlog = join_all((0..VIRTUAL_SHARDS).map(|s| {
        let st = &st;
        async move {
            let stream = st.config.stream_name(st.config.stream_of(s));
            match st.js.get_stream(&stream).await {
                Ok(h) => h
                    .consumer_info(st.config.consumer_name(s))
                    .await
                    .ok()
                    .map(|i| (i.num_pending, i.num_ack_pending as u64)),
                Err(_) => None,
            }
        }
    }))
    .await;
    let rows: Vec<Value> = (0..VIRTUAL_SHARDS)
        .zip(backlog)
        .map(|(s, b)| {
            let owner = topology.owners.get(&s);
            let url = owner.and_then(|o| topology.nodes.get(&o.node));
            let cell = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |n| n.to_string());
            json!({
                "shard": s.to_string(),
                "stream": st.config.stream_name(st.config.stream_of(s)),
                "state": if url.is_some() { "STARTED" } else { "UNASSIGNED" },
                "node": owner.map_or("-", |o| o.node.as_str()),
                "url": url.map_or("-", String::as_str),
                "assigned": topology.assigned.get(&s).map_or("-", String::as_str),
                "pending": cell(b.map(|b| b.0)),
                "ack_pending": cell(b.map(|b| b.1)),
            })
        })
        .collect();
    if prom_param(&params, "format") == Some("json") {
        return tidemark_server::http::json(200, &Value::Array(rows));
    }
    let cols = [
        "shard",
        "stream",
        "state",
        "node",
        "url",
        "assigned",
        "pending",
        "ack_pending",
    ];
    let cell = |r: &Value, c: &str| r[c].as_str().unwrap_or("").to_owned();
    let widths: Vec<usize> = cols
        .iter()
        .map(|c| {
            rows.iter()
                .map(|r| cell(r, c).len())
                .chain(std::iter::once(c.len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        let mut l = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join(" ");
        l.truncate(l.trim_end().len());
        l.push('\n');
        l
    };
    let mut out = String::new();
    if prom_param(&params, "v").is_some() {
        out.push_str(&line(cols.iter().map(|c| (*c).to_owned()).collect()));
    }
    for r in &rows {
        out.push_str(&line(cols.iter().map(|c| cell(r, c)).collect()));
    }
    ([(header::CONTENT_TYPE, "text/plain; charset=UTF-8")], out).into_response()
}
