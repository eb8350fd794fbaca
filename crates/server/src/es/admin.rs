//! Index administration: create, get, delete, templates, ILM policies, `_cat`,
//! `_stats`, `_mapping`, `_field_caps`, `_disk_usage`, `_refresh`, `_forcemerge`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use axum::routing::{any, get, post};
use serde_json::{Map, Value, json};

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::es::protocol::{self};
use crate::http::{self, Caller, json, params, read_body};
use crate::registry::{IndexHandle, IndexState};
use crate::routes::Routes;
use crate::state::{AppState, St, blocking};

/// The index administration routes.
pub(crate) fn routes() -> Routes {
    Routes::new()
        .route("/_ilm/policy/{name}", any(ilm_policy))
        .route("/_component_template/{name}", any(component_template))
        .route("/_component_template", get(list_component_templates))
        .route("/_index_template/{name}", any(index_template))
        .route("/_index_template", get(list_index_templates))
        .route("/_cat/indices", get(cat_indices))
        .route("/_cat/indices/{pattern}", get(cat_indices_pattern))
        .route("/{index}", any(index_admin))
        .route("/{index}/_stats", get(stats))
        .route("/_stats", get(stats_all))
        .route("/{index}/_mapping", get(mapping))
        .route("/_mapping", get(mapping_all))
        .route("/{index}/_field_caps", get(field_caps).post(field_caps))
        .route("/_field_caps", get(field_caps_all).post(field_caps_all))
        .route("/{index}/_disk_usage", post(disk_usage))
        .route("/{index}/_refresh", post(refresh).get(refresh))
        .route("/{index}/_forcemerge", post(forcemerge))
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

pub(crate) async fn index_admin(
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
                "indexing": {"index_total": s.counters.items.created, "index_failed": s.counters.items.errors},
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
    on_each_index(&st, &who, &index, |i| Ok(i.refresh()?)).await
}

async fn forcemerge(
    State(st): St,
    Caller(who): Caller,
    Path(index): Path<String>,
) -> Result<Response> {
    on_each_index(&st, &who, &index, |i| Ok(i.merge()?)).await
}

/// Runs `op` on each index the pattern names, under its write lock, on a blocking
/// thread; answers Elasticsearch's `_shards` summary (one shard an index).
async fn on_each_index(
    st: &AppState,
    who: &Principal,
    pattern: &str,
    op: fn(&mut tidemark::Index) -> Result<()>,
) -> Result<Response> {
    let handles = targets(st, who, pattern)?;
    let n = handles.len();
    blocking(move || {
        for h in handles {
            h.exclusive(op)?;
        }
        Ok(())
    })
    .await?;
    Ok(json(
        200,
        &json!({"_shards": {"total": n, "successful": n, "failed": 0}}),
    ))
}
