//! `tidemark router`: the write protocols of `tidemark serve` in, one JetStream message
//! per shard out, `204` once JetStream acknowledged every one of them; and the queries
//! and cluster state of [`crate::cluster_api`] over every shard owner.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tidemark_server::metrics::line_protocol::Precision;
use tidemark_server::metrics::remote_write;

use crate::config::ClusterConfig;
use crate::error::{Error, Result};
use crate::shard::{Outgoing, ShardGroups, group_line_protocol, group_remote_write};

/// What a router did, for `GET /metrics` and tests.
#[derive(Debug, Default)]
pub struct RouterStats {
    /// Requests answered 2xx.
    pub requests_ok: AtomicU64,
    /// Requests answered 503 (a stream did not acknowledge).
    pub requests_unavailable: AtomicU64,
    /// Messages JetStream stored.
    pub messages: AtomicU64,
    /// Messages JetStream recognised as duplicates (a retry within its window).
    pub messages_duplicate: AtomicU64,
    /// Samples in acknowledged requests.
    pub samples: AtomicU64,
}

pub(crate) struct RouterState {
    pub(crate) config: ClusterConfig,
    pub(crate) js: jetstream::Context,
    /// Where the shard owners and their addresses are (queries, health).
    pub(crate) etcd: crate::etcd::Etcd,
    stats: RouterStats,
}

pub(crate) type St = State<Arc<RouterState>>;

/// A bound router, ready to [`run`](BoundRouter::run).
pub struct BoundRouter {
    state: Arc<RouterState>,
    listener: tokio::net::TcpListener,
}

impl std::fmt::Debug for BoundRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundRouter")
            .field("listen", &self.state.config.listen)
            .finish_non_exhaustive()
    }
}

/// Connects to NATS, makes sure every stream exists, and binds the listener (writing its
/// address to `port_file` when configured).
///
/// # Errors
/// [`Error::Nats`], [`Error::Io`] when the address cannot be bound.
pub async fn bind(config: ClusterConfig) -> Result<BoundRouter> {
    let js =
        crate::nats::connect(&config, Duration::from_millis(config.publish_timeout_ms)).await?;
    for group in 0..config.streams {
        crate::nats::ensure_stream(&js, &config, group).await?;
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| Error::Io {
            path: config.listen.to_string().into(),
            source,
        })?;
    if let Some(p) = &config.port_file {
        let addr = listener.local_addr().map_err(|source| Error::Io {
            path: p.clone(),
            source,
        })?;
        std::fs::write(p, format!("{addr}\n")).map_err(|source| Error::Io {
            path: p.clone(),
            source,
        })?;
    }
    Ok(BoundRouter {
        state: Arc::new(RouterState {
            etcd: crate::etcd::Etcd::new(&config.etcd, Duration::from_secs(5)),
            config,
            js,
            stats: RouterStats::default(),
        }),
        listener,
    })
}

impl BoundRouter {
    /// The bound address.
    ///
    /// # Errors
    /// [`Error::Io`] from the socket.
    pub fn local_addr(&self) -> Result<std::net::SocketAddr> {
        self.listener.local_addr().map_err(|source| Error::Io {
            path: "router listener".into(),
            source,
        })
    }

    /// Serves until `shutdown` resolves, then finishes the requests in flight.
    ///
    /// # Errors
    /// [`Error::Io`] when serving fails.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let app = Router::new()
            .route("/api/v1/write", post(remote_write_handler))
            .route("/write", post(influx_v1))
            .route("/api/v2/write", post(influx_v2))
            .route("/ping", get(ping).head(ping))
            .route("/-/healthy", get(|| async { "ok\n" }))
            .route("/metrics", get(metrics))
            .merge(crate::cluster_api::routes())
            .with_state(self.state);
        axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| Error::Io {
                path: "router".into(),
                source,
            })
    }
}

/// Publishes every message (each with its id, to the stream its subject belongs to) and
/// waits for every acknowledgement: (messages, duplicates).
///
/// # Errors
/// [`Error::Nats`] when a publish fails or is not acknowledged in time: the request is
/// answered 503 and the client retries; what did reach a stream is then a duplicate
/// (JetStream's window, else the owner's store).
async fn publish(st: &RouterState, messages: Vec<Outgoing>) -> Result<(u64, u64)> {
    let mut acks = Vec::with_capacity(messages.len());
    for m in messages {
        let subject = st.config.subject(m.shard);
        let stream = st.config.stream_name(st.config.stream_of(m.shard));
        let msg = PublishMessage::build()
            .payload(m.payload.into())
            .message_id(&m.id)
            .expected_stream(&stream);
        let ack = st
            .js
            .send_publish(subject, msg)
            .await
            .map_err(|e| Error::Nats(format!("publishing to shard {}: {e}", m.shard)))?;
        acks.push((m.shard, ack));
    }
    let total = acks.len() as u64;
    let mut duplicates = 0;
    for (shard, ack) in acks {
        let ack = ack
            .await
            .map_err(|e| Error::Nats(format!("shard {shard}'s stream did not acknowledge: {e}")))?;
        if ack.duplicate {
            duplicates += 1;
        }
    }
    Ok((total, duplicates))
}

fn params(q: Option<&str>) -> HashMap<String, String> {
    q.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

fn target_index(
    config: &ClusterConfig,
    headers: &HeaderMap,
    p: &HashMap<String, String>,
) -> String {
    tidemark_server::metrics::requested_index(headers, p)
        .unwrap_or_else(|| config.metrics_index.clone())
}

fn max_ts(config: &ClusterConfig) -> i64 {
    now_ms().saturating_add(
        i64::try_from(config.max_future_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
    )
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How an answer is shaped: remote write (text), InfluxDB 1.x or 2.x (JSON).
#[derive(Clone, Copy)]
enum Shape {
    Prometheus,
    Influx1,
    Influx2,
}

fn answer(status: u16, message: &str, shape: Shape) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = match shape {
        Shape::Prometheus => (code, format!("{message}\n")).into_response(),
        Shape::Influx1 => (
            code,
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::json!({ "error": message }).to_string(),
        )
            .into_response(),
        Shape::Influx2 => {
            let kind = match status {
                413 => "request too large",
                s if s >= 500 => "unavailable",
                _ => "invalid",
            };
            (
                code,
                [(header::CONTENT_TYPE, "application/json")],
                serde_json::json!({ "code": kind, "message": message }).to_string(),
            )
                .into_response()
        }
    };
    if status == 503 {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

fn error_answer(st: &RouterState, e: &Error, shape: Shape) -> Response {
    match e {
        Error::BadRequest(m) | Error::Message(m) => answer(400, m, shape),
        Error::Nats(m) => {
            st.stats
                .requests_unavailable
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %m, "answering 503");
            answer(503, m, shape)
        }
        other => answer(500, &other.to_string(), shape),
    }
}

async fn read_body(
    st: &RouterState,
    body: Body,
    shape: Shape,
) -> std::result::Result<Bytes, Response> {
    let limit = usize::try_from(st.config.max_content_length).unwrap_or(usize::MAX);
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        answer(
            413,
            &format!("the body is larger than {limit} bytes or was cut: {e}"),
            shape,
        )
    })
}

/// Publishes `groups` and shapes the 204 (with what was done as headers).
async fn publish_answer(st: &RouterState, groups: ShardGroups, shape: Shape) -> Response {
    let samples = groups.samples() as u64;
    match publish(st, groups.finish()).await {
        Ok((messages, duplicates)) => {
            st.stats.requests_ok.fetch_add(1, Ordering::Relaxed);
            st.stats
                .messages
                .fetch_add(messages - duplicates, Ordering::Relaxed);
            st.stats
                .messages_duplicate
                .fetch_add(duplicates, Ordering::Relaxed);
            st.stats.samples.fetch_add(samples, Ordering::Relaxed);
            let mut resp = StatusCode::NO_CONTENT.into_response();
            let h = resp.headers_mut();
            h.insert("x-tidemark-messages", HeaderValue::from(messages));
            h.insert(
                "x-tidemark-messages-duplicate",
                HeaderValue::from(duplicates),
            );
            h.insert("x-tidemark-samples", HeaderValue::from(samples));
            resp
        }
        Err(e) => error_answer(st, &e, shape),
    }
}

/// `POST /api/v1/write`: Prometheus remote write 1.0 (snappy protobuf).
async fn remote_write_handler(
    State(st): St,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let shape = Shape::Prometheus;
    if let Err(e) = remote_write::check_content_type(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    ) {
        return answer(e.status_and_kind().0, &e.reason(), shape);
    }
    let index = target_index(&st.config, &headers, &params(q.as_deref()));
    let bytes = match read_body(&st, body, shape).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let st2 = Arc::clone(&st);
    let grouped = tokio::task::spawn_blocking(move || -> Result<ShardGroups> {
        let raw = remote_write::decompress(&bytes, st2.config.max_content_length)
            .map_err(|e| Error::BadRequest(e.reason()))?;
        let mut groups = ShardGroups::new(&index, true, max_ts(&st2.config))?;
        group_remote_write(&raw, &mut groups)?;
        Ok(groups)
    })
    .await;
    match grouped {
        Ok(Ok(groups)) => publish_answer(&st, groups, shape).await,
        Ok(Err(e)) => error_answer(&st, &e, shape),
        Err(e) => answer(500, &format!("worker failed: {e}"), shape),
    }
}

/// `POST /write?db=..&precision=..` (InfluxDB 1.x).
async fn influx_v1(State(st): St, RawQuery(q): RawQuery, body: Body) -> Response {
    let p = params(q.as_deref());
    let Some(db) = p.get("db").filter(|d| !d.is_empty()).cloned() else {
        return answer(400, "database is required", Shape::Influx1);
    };
    let Some(precision) = Precision::parse(p.get("precision").map_or("", String::as_str), true)
    else {
        return answer(
            400,
            "invalid precision: expected ns, u, ms, s, m or h",
            Shape::Influx1,
        );
    };
    influx(st, db, precision, body, Shape::Influx1).await
}

/// `POST /api/v2/write?bucket=..&precision=..` (InfluxDB 2.x).
async fn influx_v2(State(st): St, RawQuery(q): RawQuery, body: Body) -> Response {
    let p = params(q.as_deref());
    let Some(bucket) = p.get("bucket").filter(|d| !d.is_empty()).cloned() else {
        return answer(400, "bucket is required", Shape::Influx2);
    };
    let Some(precision) = Precision::parse(p.get("precision").map_or("", String::as_str), false)
    else {
        return answer(
            400,
            "invalid precision: expected ns, us, ms or s",
            Shape::Influx2,
        );
    };
    influx(st, bucket, precision, body, Shape::Influx2).await
}

async fn influx(
    st: Arc<RouterState>,
    index: String,
    precision: Precision,
    body: Body,
    shape: Shape,
) -> Response {
    let bytes = match read_body(&st, body, shape).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let st2 = Arc::clone(&st);
    let grouped = tokio::task::spawn_blocking(move || -> Result<_> {
        let mut groups = ShardGroups::new(&index, true, max_ts(&st2.config))?;
        let bad = group_line_protocol(&bytes, precision, now_ms(), &mut groups);
        Ok((groups, bad))
    })
    .await;
    let (groups, bad) = match grouped {
        Ok(Ok(g)) => g,
        Ok(Err(e)) => return error_answer(&st, &e, shape),
        Err(e) => return answer(500, &format!("worker failed: {e}"), shape),
    };
    let resp = publish_answer(&st, groups, shape).await;
    match bad.first {
        // As `tidemark serve`: the good lines are stored, the answer says which were not.
        Some(first) if resp.status().is_success() => answer(
            400,
            &format!(
                "partial write: {first}; {} bad lines dropped, the other lines published",
                bad.count
            ),
            shape,
        ),
        _ => resp,
    }
}

/// `GET /ping`: `204`, as InfluxDB answers.
async fn ping() -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut()
        .insert("x-influxdb-version", HeaderValue::from_static("1.8.10"));
    resp
}

/// `GET /metrics`: the router's counters in Prometheus' text format.
async fn metrics(State(st): St) -> Response {
    let s = &st.stats;
    let mut out = String::new();
    for (name, help, v) in [
        (
            "tidemark_router_requests_ok_total",
            "Requests answered 2xx.",
            &s.requests_ok,
        ),
        (
            "tidemark_router_requests_unavailable_total",
            "Requests answered 503.",
            &s.requests_unavailable,
        ),
        (
            "tidemark_router_messages_total",
            "Messages JetStream stored.",
            &s.messages,
        ),
        (
            "tidemark_router_messages_duplicate_total",
            "Messages JetStream dropped as duplicates.",
            &s.messages_duplicate,
        ),
        (
            "tidemark_router_samples_total",
            "Samples in acknowledged requests.",
            &s.samples,
        ),
    ] {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
            v.load(Ordering::Relaxed)
        ));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_query_parameters() {
        let p = params(Some("db=a%20b&precision=ms&x"));
        assert_eq!(p.get("db").map(String::as_str), Some("a b"));
        assert_eq!(p.get("x").map(String::as_str), Some(""));
    }
}
