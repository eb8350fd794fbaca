//! The handshake Elasticsearch clients make before anything else: `GET /`, the
//! license, `_xpack`, `_cluster/health`.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};

use crate::error::Result;
use crate::http::{Caller, json};
use crate::routes::Routes;
use crate::state::{St, blocking};

/// The handshake routes.
pub(crate) fn routes() -> Routes {
    Routes::new()
        .route("/", get(info))
        .route("/_license", get(license))
        .route("/_xpack", get(xpack))
        .route("/_xpack/usage", get(xpack))
        .route("/_cluster/health", get(health))
        .route("/_cluster/health/{index}", get(health))
        .route("/_nodes", get(nodes_info))
        .route("/_nodes/stats", get(nodes_stats))
}

/// `GET`/`HEAD /`: the handshake, or the web UI's page for a browser (its `Accept` names
/// `text/html`; API clients never send that, so their answer is unchanged).
async fn info(State(st): St, headers: HeaderMap) -> Response {
    if crate::ui::wants_html(&headers) {
        return crate::ui::page(&headers);
    }
    let mut resp = json(
        200,
        &info_body(
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
    json(200, &license_body(&st.cluster_uuid))
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
        &health_body(&st.config.cluster_name, st.registry.scope(&who).count()),
    )
}

/// `GET /`: the cluster's name, id, version and tagline, as clients check them.
pub fn info_body(node_name: &str, cluster_name: &str, cluster_uuid: &str, version: &str) -> Value {
    json!({
        "name": node_name,
        "cluster_name": cluster_name,
        "cluster_uuid": cluster_uuid,
        "version": {
            "number": version,
            "build_flavor": "default",
            "build_type": "tidemark",
            "build_hash": "tidemark",
            "build_date": "2026-01-01T00:00:00.000Z",
            "build_snapshot": false,
            "lucene_version": "10.0.0",
            "minimum_wire_compatibility_version": "8.18.0",
            "minimum_index_compatibility_version": "8.0.0",
        },
        "tagline": "You Know, for Search",
    })
}

/// `GET /_license`: an active basic license.
pub fn license_body(cluster_uuid: &str) -> Value {
    json!({"license": {
        "status": "active",
        "uid": cluster_uuid,
        "type": "basic",
        "issue_date": "2026-01-01T00:00:00.000Z",
        "issue_date_in_millis": 1_767_225_600_000_i64,
        "max_nodes": 1000,
        "max_resource_units": null,
        "issued_to": "tidemark",
        "issuer": "elasticsearch",
        "start_date_in_millis": -1,
    }})
}

/// `GET /_cluster/health`: green, one node.
pub fn health_body(cluster_name: &str, indices: usize) -> Value {
    json!({
        "cluster_name": cluster_name,
        "status": "green",
        "timed_out": false,
        "number_of_nodes": 1,
        "number_of_data_nodes": 1,
        "active_primary_shards": indices,
        "active_shards": indices,
        "relocating_shards": 0,
        "initializing_shards": 0,
        "unassigned_shards": 0,
        "unassigned_primary_shards": 0,
        "delayed_unassigned_shards": 0,
        "number_of_pending_tasks": 0,
        "number_of_in_flight_fetch": 0,
        "task_max_waiting_in_queue_millis": 0,
        "active_shards_percent_as_number": 100.0,
    })
}

/// The one node's entry: its id is the cluster id.
fn node_entry(st: &crate::state::AppState, extra: Value) -> Value {
    let mut node = json!({
        "name": "tidemark",
        "transport_address": st.config.listen.to_string(),
        "host": st.config.listen.ip().to_string(),
        "ip": st.config.listen.ip().to_string(),
        "version": st.config.version,
        "build_flavor": "default",
        "build_type": "tidemark",
        "roles": ["data", "ingest", "master"],
    });
    if let (Value::Object(n), Value::Object(e)) = (&mut node, extra) {
        n.extend(e);
    }
    json!({
        "_nodes": {"total": 1, "successful": 1, "failed": 0},
        "cluster_name": st.config.cluster_name,
        "nodes": {st.cluster_uuid.clone(): node},
    })
}

/// `GET /_nodes`: the one node, as clients list nodes before sniffing or monitoring.
async fn nodes_info(State(st): St) -> Response {
    let http = json!({"http": {"publish_address": st.config.listen.to_string()}});
    json(200, &node_entry(&st, http))
}

/// `GET /_nodes/stats`: the one node's indices (totals over the indices the caller may
/// see: documents, bytes, segments, items indexed and failed) and its process (memory
/// from `/proc/self/status`, open file descriptors), in Elasticsearch's shape. The
/// Prometheus view of the same and more is `GET /metrics`.
async fn nodes_stats(State(st): St, Caller(who): Caller) -> Result<Response> {
    let handles = st.registry.scope(&who).list();
    let totals = blocking(move || {
        let (mut docs, mut deleted, mut bytes, mut segments, mut indexed, mut failed) =
            (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        for h in handles {
            // A closed or reopening index is left out of the totals, not an error.
            if let Ok(s) = h.read(|i| Ok(i.stats()?)) {
                docs += s.documents;
                deleted += s.deleted_rows;
                bytes += s.bytes;
                segments += s.segments;
                indexed += s.counters.items.created + s.counters.items.replaced;
                failed += s.counters.items.errors;
            }
        }
        Ok(json!({
            "docs": {"count": docs, "deleted": deleted},
            "store": {"size_in_bytes": bytes},
            "segments": {"count": segments},
            "indexing": {"index_total": indexed, "index_failed": failed},
        }))
    })
    .await?;
    let process = crate::selfmon::process_memory();
    let extra = json!({
        "indices": totals,
        "process": {
            "open_file_descriptors": process.open_fds,
            "mem": {
                "resident_in_bytes": process.resident_bytes,
                "peak_resident_in_bytes": process.peak_resident_bytes,
                "total_virtual_in_bytes": process.virtual_bytes,
            },
        },
    });
    Ok(json(200, &node_entry(&st, extra)))
}
