//! Reads: `_mget`, `_search`, `_count` and `_msearch`, over one index or several, and
//! `_delete_by_query`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::es::dsl;
use crate::es::protocol;
use crate::es::source::SourceFilter;
use crate::http::{self, Caller, params, read_body};
use crate::state::{AppState, blocking, now_ms};

/// The read routes.
pub fn routes() -> crate::routes::Routes {
    crate::routes::Routes::new()
        .route("/_search", get(search_handler).post(search_handler))
        .route("/{index}/_search", get(search_handler).post(search_handler))
        .route("/_count", get(count_handler).post(count_handler))
        .route("/_resolve/index/{expr}", get(resolve_index))
        .route("/_msearch", get(msearch).post(msearch))
        .route("/{index}/_msearch", get(msearch).post(msearch))
        .route("/{index}/_count", get(count_handler).post(count_handler))
        .route("/{index}/_delete_by_query", post(delete_by_query))
}

type St = State<Arc<AppState>>;

/// Elasticsearch's JSON for an aggregation result.
pub fn agg_json(out: &tidemark::AggOutput) -> Value {
    use tidemark::{AggOutput, BucketKey};
    match out {
        AggOutput::Value(v) => json!({"value": v}),
        AggOutput::Buckets {
            buckets,
            sum_other_doc_count,
        } => {
            let is_terms = buckets
                .first()
                .is_some_and(|b| matches!(b.key, BucketKey::Term(_)));
            let list: Vec<Value> = buckets
                .iter()
                .map(|b| {
                    let mut o = Map::new();
                    match &b.key {
                        BucketKey::Time(t) => {
                            o.insert("key_as_string".into(), json!(tidemark::format_time(*t)));
                            o.insert("key".into(), json!(t));
                        }
                        BucketKey::Term(v) => {
                            o.insert("key".into(), v.clone());
                        }
                    }
                    o.insert("doc_count".into(), json!(b.doc_count));
                    for (n, a) in &b.aggs {
                        o.insert(n.clone(), agg_json(a));
                    }
                    Value::Object(o)
                })
                .collect();
            if is_terms || *sum_other_doc_count > 0 {
                json!({"doc_count_error_upper_bound": 0, "sum_other_doc_count": sum_other_doc_count, "buckets": list})
            } else {
                json!({"buckets": list})
            }
        }
    }
}

/// Merges the URL parameters `size`, `from`, `sort` into a search body; refuses `q`.
pub(crate) fn merge_params(mut body: Value, params: &HashMap<String, String>) -> Result<Value> {
    if params.contains_key("scroll") {
        return Err(Error::bad(
            "illegal_argument_exception",
            "[scroll] is not supported by Tidemark: page by time instead (a range on @timestamp, sorted by @timestamp), or with from and size up to 10,000 hits",
        ));
    }
    if params.contains_key("q") {
        return Err(Error::bad(
            "parsing_exception",
            "the [q] URL parameter (query string syntax) is not supported by Tidemark: send a query body",
        ));
    }
    if body.is_null() {
        body = json!({});
    }
    if let Value::Object(o) = &mut body {
        if let Some(r) = params.get("rollup") {
            o.insert("rollup".into(), json!(r));
        }
        for k in ["size", "from"] {
            if let Some(v) = params.get(k) {
                o.insert(k.into(), json!(v));
            }
        }
        if let Some(s) = params.get("sort") {
            o.insert("sort".into(), json!(s.split(',').collect::<Vec<_>>()));
        }
    }
    Ok(body)
}

/// The one index a request names (patterns must resolve to exactly one).
fn one_index(st: &AppState, who: &Principal, name: &str) -> Result<Arc<crate::IndexHandle>> {
    let handles = st.registry.scope(who).resolve(name)?;
    match handles.len() {
        1 => handles
            .into_iter()
            .next()
            .ok_or_else(|| Error::no_index(name)),
        0 => Err(Error::no_index(name)),
        n => Err(Error::bad(
            "illegal_argument_exception",
            format!("[{name}] matches {n} indices: this request takes one index in Tidemark"),
        )),
    }
}

/// The indices a search or count names, through the caller's scope: a comma list,
/// wildcards and `_all` (visible indices only). With `ignore_unavailable`, a part that
/// names a missing or forbidden index is skipped. An expression over several indices
/// may match none (an empty answer); an explicit name must exist.
pub(crate) fn search_indices(
    st: &AppState,
    who: &Principal,
    expr: &str,
    params: &HashMap<String, String>,
) -> Result<Vec<Arc<crate::IndexHandle>>> {
    let scope = st.registry.scope(who);
    let lenient = params
        .get("ignore_unavailable")
        .is_some_and(|v| v != "false");
    let handles = if lenient {
        let mut out = std::collections::BTreeMap::new();
        for part in expr.split(',') {
            if let Ok(hs) = scope.resolve(part) {
                for h in hs {
                    out.insert(h.name().to_owned(), h);
                }
            }
        }
        out.into_values().collect()
    } else {
        scope.resolve(expr)?
    };
    if handles.is_empty() && !lenient && !crate::registry::Scope::is_multi(expr) {
        return Err(Error::no_index(expr));
    }
    Ok(handles)
}

/// The index expression of a route: the path's, or every index the caller may see.
fn expr_of(index: Option<Path<String>>) -> String {
    index.map_or_else(|| "_all".to_owned(), |Path(i)| i)
}

async fn search_handler(
    State(st): St,
    Caller(who): Caller,
    index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let index = expr_of(index);
    let params = params(q.as_deref());
    // The indices are resolved before the body is read: an unknown or foreign index is
    // a 404 (or 403) whatever the body.
    search_indices(&st, &who, &index, &params)?;
    let bytes = read_body(&st, &headers, body).await?;
    let body = http::json_body(&bytes)?;
    let out = match params.get("scroll") {
        Some(keep) => {
            let keep = crate::es::pit::keep_alive(keep)?;
            crate::es::pit::scroll_first(&st, &who, &index, &params, body, keep).await?
        }
        None => search_value(&st, &who, &index, &params, body).await?,
    };
    Ok(crate::es::respond(200, out, &params))
}

/// A hit's JSON. With `tiebreak` (a point in time or `search_after` search) its `sort`
/// is `[timestamp, "<index>/<_id>"]`, the total order to send back as `search_after`.
fn hit_json(index: &str, hit: tidemark::Hit, filter: &SourceFilter, tiebreak: bool) -> Value {
    let mut o = Map::new();
    o.insert("_index".into(), json!(index));
    let sort = if tiebreak {
        json!([hit.ts_millis, format!("{index}/{}", hit.id)])
    } else {
        json!([hit.ts_millis])
    };
    o.insert("_id".into(), json!(hit.id));
    o.insert("_score".into(), Value::Null);
    let source = filter.apply(crate::es::documents::source_of(hit.doc));
    if !source.is_null() {
        o.insert("_source".into(), source);
    }
    o.insert("sort".into(), sort);
    Value::Object(o)
}

/// A `search_after` position as a request sends it back: `(timestamp, index, _id)`.
type After = (i64, String, String);

/// Reads `search_after`: `[timestamp, "<index>/<_id>"]`, as the hits of a point in time
/// or `search_after` search carry in `sort`.
fn read_search_after(v: &Value) -> Result<After> {
    let bad = |why: &str| {
        Error::bad(
            "illegal_argument_exception",
            format!(
                "[search_after] {why}: send back the [sort] values of the last hit, [timestamp, \"<index>/<_id>\"] (hits of a search with a point in time or search_after carry both; the _id breaks ties between series at one timestamp, so a page neither skips nor repeats a hit)"
            ),
        )
    };
    let Some(list) = v.as_array() else {
        return Err(bad("must be an array"));
    };
    let [ts, key] = list.as_slice() else {
        return Err(bad(&format!("has {} values, 2 expected", list.len())));
    };
    let ts = match ts {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| bad("must start with the timestamp in epoch milliseconds"))?;
    let (index, id) = key
        .as_str()
        .and_then(|k| k.split_once('/'))
        .ok_or_else(|| bad("must end with \"<index>/<_id>\""))?;
    Ok((ts, index.to_owned(), id.to_owned()))
}

/// The façade's cursor for index `name` from a cursor over several indices, whose hits
/// are ordered by `(timestamp, index, _id)`: in the cursor's own index, after its
/// `_id`; in an index that sorts before it, after its whole timestamp; after it,
/// from its timestamp on (mirrored for a descending order).
fn cursor_for(name: &str, order: tidemark::Order, after: &After) -> tidemark::SearchAfter {
    use std::cmp::Ordering::{Equal, Greater, Less};
    use tidemark::{Order, SearchAfter};
    let (ts, index, id) = after;
    let at = |ts_millis: i64, id: Option<&String>| SearchAfter {
        ts_millis,
        id: id.cloned(),
    };
    match (order, name.cmp(index.as_str())) {
        (_, Equal) => at(*ts, Some(id)),
        (Order::Asc, Less) => at(ts.saturating_add(1), None),
        (Order::Asc, Greater) | (Order::Desc, Less) => at(*ts, None),
        (Order::Desc, Greater) => at(ts.saturating_sub(1), None),
    }
}

/// What the indices of one search answered, merged.
struct Answer {
    shards: usize,
    total: u64,
    hits: Vec<(String, tidemark::Hit)>,
    aggs: Vec<(String, tidemark::AggOutput)>,
    expired: Vec<(i64, i64)>,
}

/// One search of the indices `index` names with the URL `params` and the request
/// `body`: the response body of `_search`, or of one item of `_msearch`. A body with a
/// `pit` reads that point in time's copies instead (and may not name indices).
async fn search_value(
    st: &Arc<AppState>,
    who: &Principal,
    index: &str,
    params: &HashMap<String, String>,
    body: Value,
) -> Result<Value> {
    let body = merge_params(body, params)?;
    match body.get("pit") {
        Some(pit) => {
            if index != "_all" {
                return Err(Error::bad(
                    "action_request_validation_exception",
                    "Validation Failed: 1: [indices] cannot be used with point in time. Do not specify any index with point in time.;",
                ));
            }
            let id = pit
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::bad("parsing_exception", "[pit] needs an [id]"))?;
            let keep = pit
                .get("keep_alive")
                .and_then(Value::as_str)
                .map(crate::es::pit::keep_alive)
                .transpose()?;
            let id = id.to_owned();
            let pit = st.pits.get(&id, who, keep)?;
            search_on(&pit.indices, params, body, Some(&id)).await
        }
        None => {
            let handles = search_indices(st, who, index, params)?;
            read_back(st, &handles, &body).await?;
            search_on(&handles, params, body, None).await
        }
    }
}

/// Reads back from each index's lake the time of the search's range that retention
/// removed (see [`crate::lake::LakeCache`]), so the search answers it as before the
/// eviction. Nothing to do without a lake cache or for a search without a lower time
/// bound reaching removed time.
async fn read_back(
    st: &Arc<AppState>,
    handles: &[Arc<crate::IndexHandle>],
    body: &Value,
) -> Result<()> {
    if st.lake_cache.is_none() || handles.is_empty() {
        return Ok(());
    }
    let mut body = body.clone();
    if let Value::Object(o) = &mut body {
        o.remove("search_after");
    }
    let now = now_ms();
    let mut wanted = Vec::with_capacity(handles.len());
    for h in handles {
        let range = dsl::search(&body, h.mapping(), now)?.filter.time_range();
        wanted.push((Arc::clone(h), range));
    }
    let st = Arc::clone(st);
    blocking(move || {
        let Some(cache) = &st.lake_cache else {
            return Ok(());
        };
        for (h, r) in wanted {
            cache.ensure(&st.registry, &h, r.first_ms, r.last_ms)?;
        }
        Ok(())
    })
    .await
}

/// The search of `body` (URL parameters already merged in) over `handles`; `pit_id`
/// names the point in time they belong to, if any, answered back as `pit_id`.
/// One index is asked the request as it is; several (or a `terms` order the façade
/// does not sort by) go through [`crate::es::multi`].
pub(crate) async fn search_on(
    handles: &[Arc<crate::IndexHandle>],
    params: &HashMap<String, String>,
    mut body: Value,
    pit_id: Option<&str>,
) -> Result<Value> {
    let mut after = None;
    if let Value::Object(o) = &mut body {
        o.remove("pit");
        if let Some(v) = o.remove("search_after") {
            after = Some(read_search_after(&v)?);
            let from = o.get("from").map(|f| match f {
                Value::String(t) => t.parse::<i64>().ok(),
                other => other.as_i64(),
            });
            if from.is_some_and(|f| f != Some(0) && f != Some(-1)) {
                return Err(Error::bad(
                    "illegal_argument_exception",
                    "[from] parameter must be set to 0 when [search_after] is used",
                ));
            }
            o.remove("from");
        }
    }
    let tiebreak = pit_id.is_some() || after.is_some();
    let start = std::time::Instant::now();
    let filter = match params.get("_source") {
        Some(_) => SourceFilter::from_params(params),
        None => SourceFilter::from_json(body.get("_source")),
    };
    let total_as_int = params
        .get("rest_total_hits_as_int")
        .is_some_and(|v| v != "false");
    let now = now_ms();
    let aggs_json = body.get("aggs").or_else(|| body.get("aggregations"));
    let answer = match handles {
        [] => {
            // No index: the request is still checked, and its aggregations answer empty.
            let mapping = tidemark::label_mapping()?;
            let req = dsl::search(&body, &mapping, now)?;
            let plan = crate::es::multi::plan(&req.aggs, aggs_json)?;
            Answer {
                shards: 0,
                total: 0,
                hits: Vec::new(),
                aggs: crate::es::multi::merge(&plan, &[])?,
                expired: Vec::new(),
            }
        }
        [one] => {
            let mut req = dsl::search(&body, one.mapping(), now)?;
            req.search_after = after.as_ref().map(|a| cursor_for(one.name(), req.order, a));
            let plan = crate::es::multi::plan(&req.aggs, aggs_json)?;
            if crate::es::multi::needs_merge(&plan) {
                several(handles, &body, plan, now, after.as_ref()).await?
            } else {
                let handle = Arc::clone(one);
                let name = handle.name().to_owned();
                let result = blocking(move || handle.read(|i| Ok(i.query(&req)?))).await?;
                Answer {
                    shards: 1,
                    total: result.total,
                    hits: result.hits.into_iter().map(|h| (name.clone(), h)).collect(),
                    aggs: result.aggs,
                    expired: result.expired,
                }
            }
        }
        [first, ..] => {
            let req = dsl::search(&body, first.mapping(), now)?;
            let plan = crate::es::multi::plan(&req.aggs, aggs_json)?;
            several(handles, &body, plan, now, after.as_ref()).await?
        }
    };
    let hits: Vec<Value> = answer
        .hits
        .into_iter()
        .map(|(name, h)| hit_json(&name, h, &filter, tiebreak))
        .collect();
    let total = if total_as_int {
        json!(answer.total)
    } else {
        json!({"value": answer.total, "relation": "eq"})
    };
    let mut out = json!({
        "took": start.elapsed().as_millis() as u64,
        "timed_out": false,
        "_shards": {"total": answer.shards, "successful": answer.shards, "skipped": 0, "failed": 0},
        "hits": {"total": total, "max_score": null, "hits": hits},
    });
    if !answer.expired.is_empty() {
        // Not Elasticsearch's: time the answer leaves out because retention dropped its
        // raw documents and no kept rollup answers there.
        out["tidemark_expired"] = json!(answer
            .expired
            .iter()
            .map(|(a, b)| json!({"from": tidemark::format_time(*a), "to": tidemark::format_time(*b), "from_ms": a, "to_ms": b}))
            .collect::<Vec<_>>());
    }
    if let Some(id) = pit_id {
        out["pit_id"] = json!(id);
    }
    if !answer.aggs.is_empty() {
        let mut aggs = Map::new();
        for (n, a) in &answer.aggs {
            aggs.insert(n.clone(), agg_json(a));
        }
        out["aggregations"] = Value::Object(aggs);
    }
    Ok(out)
}

/// The search over `handles` (one or more), merged: each index asked the same request
/// parsed against its own mapping, widened for an exact merge; hits merged in the
/// request's order (by timestamp, then index name, then `_id`), `from` and `size`
/// applied after the merge.
async fn several(
    handles: &[Arc<crate::IndexHandle>],
    body: &Value,
    plan: Vec<(String, crate::es::multi::Spec)>,
    now: i64,
    after: Option<&After>,
) -> Result<Answer> {
    let many = handles.len() > 1;
    let mut asks = Vec::with_capacity(handles.len());
    let (mut from, mut size, mut order) = (0, 0, tidemark::Order::Asc);
    for h in handles {
        let mut req = dsl::search(body, h.mapping(), now)?;
        if many {
            req.filter = crate::es::multi::prune(req.filter, h.mapping());
        }
        req.aggs = crate::es::multi::widen(&req.aggs, h.mapping(), many)?;
        req.search_after = after.map(|a| cursor_for(h.name(), req.order, a));
        (from, size, order) = (req.from, req.size, req.order);
        req.size = req.from.saturating_add(req.size);
        req.from = 0;
        asks.push((Arc::clone(h), req));
    }
    let results = blocking(move || {
        asks.into_iter()
            .map(|(h, req)| Ok((h.name().to_owned(), h.read(|i| Ok(i.query(&req)?))?)))
            .collect::<Result<Vec<_>>>()
    })
    .await?;
    let mut total = 0u64;
    let mut hits = Vec::new();
    let mut aggs = Vec::with_capacity(results.len());
    let mut expired = Vec::new();
    for (name, r) in results {
        total = total.saturating_add(r.total);
        hits.extend(r.hits.into_iter().map(|h| (name.clone(), h)));
        aggs.push(r.aggs);
        expired.extend(r.expired);
    }
    let key = |(n, h): &(String, tidemark::Hit)| (h.ts_millis, n.clone(), h.id.clone());
    match order {
        tidemark::Order::Asc => hits.sort_by_key(key),
        tidemark::Order::Desc => hits.sort_by_key(|x| std::cmp::Reverse(key(x))),
    }
    let hits = hits.into_iter().skip(from).take(size).collect();
    expired.sort_unstable();
    expired.dedup();
    Ok(Answer {
        shards: handles.len(),
        total,
        hits,
        aggs: crate::es::multi::merge(&plan, &aggs)?,
        expired,
    })
}

/// `_msearch` (`POST /_msearch`, `POST /<index>/_msearch`): NDJSON pairs of a header
/// (`{"index": "…"}` — a name, a comma list, wildcards, a list — or `{}` for the path's
/// index, or every index the caller may see; `ignore_unavailable`) and a search body,
/// as Grafana's Elasticsearch data source sends them; each search answers in
/// `responses`, in order, with its own `status`, and one that fails answers its error
/// there without failing the others, as Elasticsearch does.
async fn msearch(
    State(st): St,
    Caller(who): Caller,
    default_index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let default_index = expr_of(default_index);
    let params = params(q.as_deref());
    let bytes = read_body(&st, &headers, body).await?;
    let start = std::time::Instant::now();
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| Error::bad("parse_exception", format!("the body is not UTF-8: {e}")))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let mut responses = Vec::new();
    while let Some(header_line) = lines.next() {
        let header = http::json_body(header_line.as_bytes())?;
        let Some(body_line) = lines.next() else {
            return Err(Error::bad(
                "illegal_argument_exception",
                "the last _msearch header has no search body after it (each search is a header line, then a body line)",
            ));
        };
        let body = http::json_body(body_line.as_bytes())?;
        let index = match header.get("index") {
            Some(Value::String(i)) => i.clone(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(","),
            _ => default_index.clone(),
        };
        let mut item_params = params.clone();
        if let Some(v) = header.get("ignore_unavailable") {
            let on = v == &Value::Bool(true) || v.as_str() == Some("true");
            item_params.insert("ignore_unavailable".into(), on.to_string());
        }
        let answer = search_value(&st, &who, &index, &item_params, body).await;
        responses.push(match answer {
            Ok(mut v) => {
                v["status"] = json!(200);
                v
            }
            Err(e) => {
                let (status, kind) = e.status_and_kind();
                protocol::error_body(status, kind, &e.reason())
            }
        });
    }
    let out = json!({"took": start.elapsed().as_millis() as u64, "responses": responses});
    Ok(crate::es::respond(200, out, &params))
}

/// `_count` over the indices the path names (or every index the caller may see): the
/// query parsed against each index's own mapping, the counts summed.
async fn count_handler(
    State(st): St,
    Caller(who): Caller,
    index: Option<Path<String>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let index = expr_of(index);
    let params = params(q.as_deref());
    let handles = search_indices(&st, &who, &index, &params)?;
    let bytes = read_body(&st, &headers, body).await?;
    let body = http::json_body(&bytes)?;
    if params.contains_key("q") {
        return Err(Error::bad(
            "parsing_exception",
            "the [q] URL parameter is not supported by Tidemark: send a query body",
        ));
    }
    let now = now_ms();
    let many = handles.len() > 1;
    let mut asks = Vec::with_capacity(handles.len());
    for h in &handles {
        let mut req = tidemark::SearchRequest {
            size: 0,
            ..tidemark::SearchRequest::default()
        };
        if let Value::Object(o) = &body {
            for (k, v) in o {
                match k.as_str() {
                    "query" => req.filter = dsl::query(v, h.mapping(), now)?,
                    other => {
                        return Err(Error::bad(
                            "parsing_exception",
                            format!("request does not support [{other}]"),
                        ));
                    }
                }
            }
        }
        if many {
            req.filter = crate::es::multi::prune(req.filter, h.mapping());
        }
        asks.push((Arc::clone(h), req));
    }
    let n = asks.len();
    let count = blocking(move || {
        let mut total = 0u64;
        for (h, req) in asks {
            total = total.saturating_add(h.read(|i| Ok(i.query(&req)?))?.total);
        }
        Ok(total)
    })
    .await?;
    Ok(crate::es::respond(
        200,
        json!({"count": count, "_shards": {"total": n, "successful": n, "skipped": 0, "failed": 0}}),
        &params,
    ))
}

/// `GET /_resolve/index/<expr>`: the caller's indices the expression names, as
/// Elasticsearch lists them (no aliases or data streams in Tidemark).
async fn resolve_index(
    State(st): St,
    Caller(who): Caller,
    Path(expr): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let params = params(q.as_deref());
    let handles = search_indices(&st, &who, &expr, &params)?;
    let indices: Vec<Value> = handles
        .iter()
        .map(|h| json!({"name": h.name(), "attributes": ["open"]}))
        .collect();
    Ok(crate::es::respond(
        200,
        json!({"indices": indices, "aliases": [], "data_streams": []}),
        &params,
    ))
}

/// Documents found, then deleted, per round of `_delete_by_query`.
const DELETE_BATCH: usize = 10_000;

/// `POST /<index>/_delete_by_query` with `{"query": …}` (and `max_docs`): the matching
/// documents found 10,000 at a time under the read lock and deleted by `_id` under the
/// write lock (tombstones in the fsynced log, purged by merges), until none match.
/// Answers in Elasticsearch's shape (`total`, `deleted`, `batches`, `failures`). A
/// document written while it runs and matching is deleted too if a later round finds
/// it, as Elasticsearch's scroll-based delete may or may not.
async fn delete_by_query(
    State(st): St,
    Caller(who): Caller,
    Path(index): Path<String>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let params = params(q.as_deref());
    let handle = one_index(&st, &who, &index)?;
    let bytes = read_body(&st, &headers, body).await?;
    let body = http::json_body(&bytes)?;
    let mut filter = None;
    let mut max_docs = u64::MAX;
    if let Value::Object(o) = &body {
        for (k, v) in o {
            match k.as_str() {
                "query" => filter = Some(dsl::query(v, handle.mapping(), now_ms())?),
                "max_docs" => {
                    max_docs = v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                        Error::bad("parsing_exception", "[max_docs] must be a positive integer")
                    })?;
                }
                other => {
                    return Err(Error::bad(
                        "parsing_exception",
                        format!("request does not support [{other}]"),
                    ));
                }
            }
        }
    }
    let Some(filter) = filter else {
        return Err(Error::bad(
            "action_request_validation_exception",
            "Validation Failed: 1: query is missing;",
        ));
    };
    let start = std::time::Instant::now();
    let (total, deleted, batches) = blocking(move || {
        let (mut total, mut deleted, mut batches) = (None, 0u64, 0u64);
        while deleted < max_docs {
            let size = usize::try_from(max_docs - deleted)
                .unwrap_or(usize::MAX)
                .min(DELETE_BATCH);
            let req = tidemark::SearchRequest {
                filter: filter.clone(),
                size,
                ..tidemark::SearchRequest::default()
            };
            let found = handle.read(|i| Ok(i.query(&req)?))?;
            total.get_or_insert(found.total.min(max_docs));
            if found.hits.is_empty() {
                break;
            }
            let items = found
                .hits
                .into_iter()
                .map(|h| tidemark::BulkItem::delete(h.id))
                .collect();
            let results = handle.exclusive(|i| Ok(i.bulk(items)?))?;
            batches += 1;
            let n = results
                .iter()
                .filter(|r| matches!(r.status, tidemark::ItemStatus::Deleted))
                .count() as u64;
            if n == 0 {
                break;
            }
            deleted += n;
        }
        Ok((total.unwrap_or(0), deleted, batches))
    })
    .await?;
    Ok(crate::es::respond(
        200,
        json!({
            "took": start.elapsed().as_millis() as u64,
            "timed_out": false,
            "total": total,
            "deleted": deleted,
            "batches": batches,
            "version_conflicts": 0,
            "noops": 0,
            "retries": {"bulk": 0, "search": 0},
            "throttled_millis": 0,
            "requests_per_second": -1.0,
            "throttled_until_millis": 0,
            "failures": [],
        }),
        &params,
    ))
}
