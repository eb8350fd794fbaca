//! Single documents: `/<index>/_doc`, `/<index>/_doc/<id>` (index, get, head, delete),
//! `/<index>/_create/<id>`, through the bulk pipeline.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use axum::routing::{any, get, post, put};
use serde_json::Value;
use tidemark::{Action, PreparedItem};

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::es::bulk::{BulkLine, ItemOutcome, bulk_item_json};
use crate::es::bulk::{check_refresh, execute, plan};
use crate::es::protocol::{self, error_body};
use crate::es::respond;
use crate::es::source::SourceFilter;
use crate::http::{self, Caller, json, params, read_body};
use crate::routes::Routes;
use crate::state::{AppState, St, admit, blocking};

/// The single-document routes.
pub(crate) fn routes() -> Routes {
    Routes::new()
        .route("/_mget", get(mget).post(mget))
        .route("/{index}/_mget", get(mget).post(mget))
        .route("/{index}/_doc", post(doc_auto))
        .route("/{index}/_doc/{id}", any(doc_by_id))
        .route("/{index}/_create/{id}", put(doc_create).post(doc_create))
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
    let (status, v) = doc_write_json(&name, &outcome);
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
            let (status, v) = doc_write_json(&index, &ItemOutcome::Done { result, kind: None });
            Ok(json(status, &v))
        }
        Method::GET | Method::HEAD => {
            let handle = st.registry.scope(&who).require(&index)?;
            let params = params(q.as_deref());
            let filter = crate::es::source::SourceFilter::from_params(&params);
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
            let source = doc.map(|d| filter.apply(source_of(d)));
            Ok(json(
                if found { 200 } else { 404 },
                &get_body(&index, &id, source),
            ))
        }
        _ => Err(Error::status(
            405,
            "illegal_argument_exception",
            format!("Incorrect HTTP method for uri [/{index}/_doc/{id}] and method [{method}]"),
        )),
    }
}

/// The single-document answer of `PUT /<index>/_create/<id>`, `POST /<index>/_doc` and
/// `DELETE /<index>/_doc/<id>` (the bulk item's inner object), with its HTTP status.
pub fn doc_write_json(index: &str, outcome: &ItemOutcome) -> (u16, Value) {
    let (item, _) = bulk_item_json(index, outcome);
    let inner = item
        .as_object()
        .and_then(|o| o.values().next())
        .cloned()
        .unwrap_or(Value::Null);
    let status = inner
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .unwrap_or(500);
    match inner.get("error") {
        Some(e) => {
            let kind = e.get("type").and_then(Value::as_str).unwrap_or("exception");
            let reason = e.get("reason").and_then(Value::as_str).unwrap_or("");
            (status, error_body(status, kind, reason))
        }
        None => {
            let mut o = inner.as_object().cloned().unwrap_or_default();
            o.remove("status");
            (status, Value::Object(o))
        }
    }
}

/// `_source` of a stored document: the façade's rebuilt document without its `_id` and
/// `_tsid` (Elasticsearch keeps those out of `_source`).
pub fn source_of(mut doc: Value) -> Value {
    if let Value::Object(o) = &mut doc {
        o.remove("_id");
        o.remove("_tsid");
    }
    doc
}

/// `GET /<index>/_doc/<id>`.
pub fn get_body(index: &str, id: &str, source: Option<Value>) -> Value {
    match source {
        Some(s) => serde_json::json!({
            "_index": index, "_id": id, "_version": 1, "_seq_no": 0, "_primary_term": 1,
            "found": true, "_source": s,
        }),
        None => serde_json::json!({"_index": index, "_id": id, "found": false}),
    }
}

/// `_mget`: `{"docs": [{"_index", "_id", "_source"}]}` or `{"ids": [..]}` with the
/// path's index.
async fn mget(
    State(st): St,
    Caller(who): Caller,
    index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    // `/_mget` and `/{index}/_mget` alike: the path's index, when there is one.
    let index = index.map(|Path(i)| i);
    let params = params(q.as_deref());
    let default_filter = SourceFilter::from_params(&params);
    let bytes = read_body(&st, &headers, body).await?;
    let v = http::json_body(&bytes)?;
    let mut wanted: Vec<(String, String, SourceFilter)> = Vec::new();
    if let Some(docs) = v.get("docs").and_then(Value::as_array) {
        for d in docs {
            let idx = d
                .get("_index")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| index.clone())
                .ok_or_else(|| {
                    Error::bad(
                        "action_request_validation_exception",
                        "Validation Failed: 1: index is missing for doc 0;",
                    )
                })?;
            let id = match d.get("_id") {
                Some(Value::String(s)) => s.clone(),
                _ => {
                    return Err(Error::bad(
                        "action_request_validation_exception",
                        "Validation Failed: 1: id is missing;",
                    ));
                }
            };
            let filter = match d.get("_source") {
                None => default_filter.clone(),
                some => SourceFilter::from_json(some),
            };
            wanted.push((idx, id, filter));
        }
    } else if let Some(ids) = v.get("ids").and_then(Value::as_array) {
        let idx = index.ok_or_else(|| {
            Error::bad(
                "action_request_validation_exception",
                "Validation Failed: 1: index is missing;",
            )
        })?;
        for id in ids {
            let Some(id) = id.as_str() else {
                return Err(Error::bad("parse_exception", "ids must be strings"));
            };
            wanted.push((idx.clone(), id.to_owned(), default_filter.clone()));
        }
    } else {
        return Err(Error::bad(
            "action_request_validation_exception",
            "Validation Failed: 1: no documents to get;",
        ));
    }
    let docs = blocking(move || {
        let mut out = Vec::with_capacity(wanted.len());
        for (idx, id, filter) in wanted {
            let h = match st.registry.scope(&who).get(&idx) {
                Ok(h) => h,
                Err(e) => {
                    out.push(serde_json::json!({"_index": idx, "_id": id, "error": {"type": "security_exception", "reason": e.reason()}}));
                    continue;
                }
            };
            let Some(h) = h else {
                out.push(serde_json::json!({"_index": idx, "_id": id, "error": {"type": "index_not_found_exception", "reason": format!("no such index [{idx}]")}}));
                continue;
            };
            let doc = h.read(|i| match i.get(&id) {
                Ok(d) => Ok(d),
                Err(tidemark::Error::InvalidId { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            })?;
            let source = doc.map(|d| filter.apply(crate::es::documents::source_of(d)));
            out.push(crate::es::documents::get_body(&idx, &id, source));
        }
        Ok(out)
    })
    .await?;
    Ok(json(200, &serde_json::json!({"docs": docs})))
}
