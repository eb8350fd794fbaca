//! The handshake Elasticsearch clients make before anything else: `GET /`, the
//! license, `_xpack`, `_cluster/health`.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};

use crate::http::{Caller, json};
use crate::routes::Routes;
use crate::state::St;

/// The handshake routes.
pub(crate) fn routes() -> Routes {
    Routes::new()
        .route("/", get(info))
        .route("/_license", get(license))
        .route("/_xpack", get(xpack))
        .route("/_xpack/usage", get(xpack))
        .route("/_cluster/health", get(health))
        .route("/_cluster/health/{index}", get(health))
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
