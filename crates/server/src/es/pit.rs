//! Points in time and scrolls: paging past `index.max_result_window` over data that
//! holds still.
//!
//! `POST /<indices>/_pit?keep_alive=5m` opens a point in time: each index is refreshed
//! and snapshotted under its write lock ([`tidemark::Index::snapshot`]: hard links of
//! its immutable segments and a copy of its then empty write-ahead log, so no write is
//! half in and the copy holds no write buffer in memory)
//! into `DATA/pit/<id>/<index>` and opened there as an index that takes no writes. A
//! `_search` with `{"pit": {"id": …}}` reads those copies, so every page sees exactly
//! what had been acknowledged when the point in time was opened, whatever is written,
//! merged, deleted or dropped by retention meanwhile. Its hits carry
//! `sort: [timestamp, "<index>/<_id>"]`, a total order, to be sent back as
//! `search_after`. `DELETE /_pit` frees one; an unused one expires after its
//! `keep_alive` (at most a day); at most [`MAX_OPEN`] are open at once (a `429` past
//! that). The id is 122 random bits, and every use checks again that the caller may
//! read each of its indices.
//!
//! The scroll API rides on the same copies: `_search?scroll=1m` opens a point in time
//! over the request's indices and answers the first page with a `_scroll_id`;
//! `/_search/scroll` answers the next page (search after the last hit of the one
//! before); `DELETE /_search/scroll` frees it. Aggregations come with the first page
//! only, as in Elasticsearch.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::http::{Caller, params, read_body};
use crate::registry::IndexHandle;
use crate::state::{AppState, blocking};

/// The directory of the data directory that holds the points in time's copies.
pub const PIT_DIR: &str = "pit";
/// The most points in time (scrolls included) open at once.
pub const MAX_OPEN: usize = 64;
/// The longest `keep_alive` (Elasticsearch's `search.max_keep_alive`).
const MAX_KEEP_ALIVE: Duration = Duration::from_secs(24 * 3600);

/// Where a scroll is: the search it pages and the position after its last hit.
#[derive(Debug, Clone)]
pub(crate) struct ScrollState {
    /// The search body (`size`, `query`, `sort`; no aggregations after the first page).
    pub body: Value,
    /// The URL parameters of the first request (`_source`, `rest_total_hits_as_int`).
    pub params: HashMap<String, String>,
    /// The last hit answered: `(timestamp, index, _id)`; `None` before the first page
    /// or after the last.
    pub after: Option<(i64, String, String)>,
    /// Whether the last page came back empty (the scroll is done).
    pub done: bool,
}

/// One point in time: read-only copies of its indices.
pub(crate) struct Pit {
    dir: PathBuf,
    /// The copies, by index name.
    pub indices: Vec<Arc<IndexHandle>>,
    expires: Mutex<Instant>,
    /// The scroll this point in time serves, if it was opened by `?scroll=`.
    pub scroll: tokio::sync::Mutex<Option<ScrollState>>,
}

impl Pit {
    fn expired(&self, now: Instant) -> bool {
        self.expires.lock().map_or(true, |e| *e <= now)
    }

    fn extend(&self, keep_alive: Duration) {
        if let Ok(mut e) = self.expires.lock() {
            *e = Instant::now() + keep_alive;
        }
    }

    /// Closes the copies and removes their directory.
    fn free(&self) {
        for h in &self.indices {
            if let Err(e) = h.close() {
                tracing::warn!(index = %h.name(), error = %e, "closing a point in time's copy");
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "removing a point in time");
        }
    }
}

/// The open points in time of a server.
#[derive(Default)]
pub(crate) struct Pits {
    open: Mutex<HashMap<String, Arc<Pit>>>,
}

impl std::fmt::Debug for Pits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pits").field("open", &self.count()).finish()
    }
}

/// Reads a `keep_alive` (`30s`, `5m`, `1h`): positive, at most a day.
///
/// # Errors
/// `400` for anything else.
pub(crate) fn keep_alive(text: &str) -> Result<Duration> {
    let ms = tidemark::parse_interval(text).map_err(|e| {
        Error::bad(
            "illegal_argument_exception",
            format!("failed to parse [keep_alive] [{text}]: {e}"),
        )
    })?;
    let d = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    if d.is_zero() || d > MAX_KEEP_ALIVE {
        return Err(Error::bad(
            "illegal_argument_exception",
            format!(
                "[keep_alive] [{text}] must be positive and at most 24h (search.max_keep_alive)"
            ),
        ));
    }
    Ok(d)
}

fn pit_missing(id: &str) -> Error {
    Error::status(
        404,
        "search_context_missing_exception",
        format!("No search context found for id [{id}]: it expired, was freed, or never existed"),
    )
}

impl Pits {
    /// Frees the points in time whose keep-alive has passed.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        let gone: Vec<Arc<Pit>> = match self.open.lock() {
            Ok(mut open) => {
                let ids: Vec<String> = open
                    .iter()
                    .filter(|(_, p)| p.expired(now))
                    .map(|(id, _)| id.clone())
                    .collect();
                ids.iter().filter_map(|id| open.remove(id)).collect()
            }
            Err(_) => Vec::new(),
        };
        for p in gone {
            p.free();
        }
    }

    /// How many are open.
    pub(crate) fn count(&self) -> usize {
        self.open.lock().map_or(0, |o| o.len())
    }

    /// Opens a point in time over `handles` under `root/pit/<id>`; returns its id. Runs
    /// on a blocking thread (snapshots and opens are file work).
    ///
    /// # Errors
    /// `429` past [`MAX_OPEN`]; `500` naming the file when a snapshot or an open fails
    /// (nothing is left behind).
    pub(crate) fn open(
        &self,
        root: &std::path::Path,
        handles: &[Arc<IndexHandle>],
        keep_alive: Duration,
        scroll: Option<ScrollState>,
    ) -> Result<String> {
        self.sweep();
        if self.count() >= MAX_OPEN {
            return Err(Error::status(
                429,
                "es_rejected_execution_exception",
                format!(
                    "Trying to create too many point-in-time contexts: at most {MAX_OPEN} may be open; free some with DELETE /_pit or DELETE /_search/scroll"
                ),
            ));
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = root.join(PIT_DIR).join(&id);
        let made = (|| -> Result<Vec<Arc<IndexHandle>>> {
            let mut out = Vec::with_capacity(handles.len());
            for h in handles {
                let to = dir.join(h.name());
                // Refreshed first, under the same lock, so the copy's log is empty and
                // opening it replays nothing: a point in time holds no copy of the
                // index's write buffer in memory, only its segments (mapped).
                h.exclusive(|index| {
                    index.refresh()?;
                    index.snapshot(&to).map_err(|e| {
                        Error::status(
                            500,
                            "exception",
                            format!("point in time of [{}]: {e}", h.name()),
                        )
                    })
                })?;
                let mut copy = tidemark::Index::open(&to)?;
                copy.set_background_merges(false);
                out.push(Arc::new(IndexHandle::frozen(h.name().to_owned(), copy)));
            }
            Ok(out)
        })();
        let indices = match made {
            Ok(indices) => indices,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let pit = Arc::new(Pit {
            dir,
            indices,
            expires: Mutex::new(Instant::now() + keep_alive),
            scroll: tokio::sync::Mutex::new(scroll),
        });
        match self.open.lock() {
            Ok(mut open) => {
                open.insert(id.clone(), pit);
                Ok(id)
            }
            Err(_) => {
                pit.free();
                Err(Error::status(
                    500,
                    "exception",
                    "point-in-time table poisoned",
                ))
            }
        }
    }

    /// The point in time `id`, its keep-alive extended when `keep_alive` is given,
    /// after checking that `who` may read each of its indices.
    ///
    /// # Errors
    /// `404 search_context_missing_exception` for an unknown or expired id; `403` when
    /// the caller may not read one of its indices.
    pub(crate) fn get(
        &self,
        id: &str,
        who: &Principal,
        keep_alive: Option<Duration>,
    ) -> Result<Arc<Pit>> {
        self.sweep();
        let pit = self
            .open
            .lock()
            .ok()
            .and_then(|o| o.get(id).cloned())
            .ok_or_else(|| pit_missing(id))?;
        for h in &pit.indices {
            who.check(h.name())?;
        }
        if let Some(k) = keep_alive {
            pit.extend(k);
        }
        Ok(pit)
    }

    /// Frees the point in time `id` if `who` may read its indices; whether it was open.
    ///
    /// # Errors
    /// `403` when the caller may not read one of its indices.
    pub(crate) fn free(&self, id: &str, who: &Principal) -> Result<bool> {
        let pit = self.open.lock().ok().and_then(|o| o.get(id).cloned());
        let Some(pit) = pit else {
            return Ok(false);
        };
        for h in &pit.indices {
            who.check(h.name())?;
        }
        let removed = self.open.lock().ok().and_then(|mut o| o.remove(id));
        if let Some(p) = removed {
            p.free();
        }
        Ok(true)
    }

    /// Frees every point in time (at shutdown), and the copies a killed server left.
    pub(crate) fn free_all(&self, root: &std::path::Path) {
        let all: Vec<Arc<Pit>> = self
            .open
            .lock()
            .map(|mut o| o.drain().map(|(_, p)| p).collect())
            .unwrap_or_default();
        for p in all {
            p.free();
        }
        let dir = root.join(PIT_DIR);
        if dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&dir)
        {
            tracing::warn!(dir = %dir.display(), error = %e, "removing old points in time");
        }
    }
}

/// The routes: `POST /<indices>/_pit`, `DELETE /_pit`, `GET`/`POST /_search/scroll`,
/// `DELETE /_search/scroll`.
pub fn routes() -> crate::routes::Routes {
    use axum::routing::{delete, post};
    crate::routes::Routes::new()
        .route("/{index}/_pit", post(open_pit))
        .route("/_pit", delete(close_pit))
        .route(
            "/_search/scroll",
            post(scroll_next).get(scroll_next).delete(clear_scroll),
        )
}

/// `POST /<indices>/_pit?keep_alive=5m`: `{"id": …}`.
async fn open_pit(
    State(st): State<Arc<AppState>>,
    Caller(who): Caller,
    Path(index): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response> {
    let params = params(q.as_deref());
    let keep = params.get("keep_alive").ok_or_else(|| {
        Error::bad(
            "action_request_validation_exception",
            "Validation Failed: 1: [keep_alive] is not specified;",
        )
    })?;
    let keep = keep_alive(keep)?;
    let handles = crate::es::search::search_indices(&st, &who, &index, &params)?;
    let shards = handles.len();
    let st2 = Arc::clone(&st);
    let id = blocking(move || st2.pits.open(st2.registry.root(), &handles, keep, None)).await?;
    Ok(crate::es::respond(
        200,
        json!({"id": id, "_shards": {"total": shards, "successful": shards, "skipped": 0, "failed": 0}}),
        &params,
    ))
}

/// Frees each of `ids` the caller may; `(found, freed)` as Elasticsearch answers it.
async fn free_ids(st: &Arc<AppState>, who: &Principal, ids: Vec<String>) -> Result<Response> {
    let st2 = Arc::clone(st);
    let who = who.clone();
    let freed = blocking(move || {
        let mut n = 0u64;
        for id in &ids {
            if st2.pits.free(id, &who)? {
                n += 1;
            }
        }
        Ok(n)
    })
    .await?;
    let status = if freed == 0 { 404 } else { 200 };
    Ok(crate::http::json(
        status,
        &json!({"succeeded": true, "num_freed": freed}),
    ))
}

/// `DELETE /_pit` with `{"id": …}`.
async fn close_pit(
    State(st): State<Arc<AppState>>,
    Caller(who): Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let bytes = read_body(&st, &headers, body).await?;
    let v = crate::http::json_body(&bytes)?;
    let id = v.get("id").and_then(Value::as_str).ok_or_else(|| {
        Error::bad(
            "action_request_validation_exception",
            "Validation Failed: 1: [id] is not specified;",
        )
    })?;
    free_ids(&st, &who, vec![id.to_owned()]).await
}

/// The first page of a scroll (`_search?scroll=1m`): a point in time over the
/// request's indices, then [`page`].
pub(crate) async fn scroll_first(
    st: &Arc<AppState>,
    who: &Principal,
    index: &str,
    params: &HashMap<String, String>,
    body: Value,
    keep: Duration,
) -> Result<Value> {
    let mut params = params.clone();
    params.remove("scroll");
    let body = crate::es::search::merge_params(body, &params)?;
    for (key, why) in [
        (
            "search_after",
            "[search_after] cannot be used in a scroll context",
        ),
        ("pit", "[pit] cannot be used in a scroll context"),
    ] {
        if body.get(key).is_some() {
            return Err(Error::bad("action_request_validation_exception", why));
        }
    }
    let from = body.get("from").map(|f| match f {
        Value::String(t) => t.parse::<u64>().ok(),
        other => other.as_u64(),
    });
    if from.is_some_and(|f| f != Some(0)) {
        return Err(Error::bad(
            "action_request_validation_exception",
            "Validation Failed: 1: using [from] is not allowed in a scroll context;",
        ));
    }
    let handles = crate::es::search::search_indices(st, who, index, &params)?;
    let state = ScrollState {
        body,
        params,
        after: None,
        done: false,
    };
    let st2 = Arc::clone(st);
    let id = blocking(move || {
        st2.pits
            .open(st2.registry.root(), &handles, keep, Some(state))
    })
    .await?;
    let pit = st.pits.get(&id, who, None)?;
    page(&pit, &id).await
}

/// The next page of scroll `id`: the search after the last hit answered.
async fn page(pit: &Pit, id: &str) -> Result<Value> {
    let mut guard = pit.scroll.lock().await;
    let Some(state) = guard.as_mut() else {
        return Err(Error::bad(
            "illegal_argument_exception",
            format!(
                "[{id}] is a point in time, not a scroll: search it with {{\"pit\": {{\"id\": …}}}}"
            ),
        ));
    };
    let mut body = state.body.clone();
    let first = state.after.is_none() && !state.done;
    if let Value::Object(o) = &mut body {
        o.remove("from");
        if !first {
            o.remove("aggs");
            o.remove("aggregations");
        }
        if let Some((ts, index, doc)) = &state.after {
            o.insert("search_after".into(), json!([ts, format!("{index}/{doc}")]));
        }
        if state.done {
            o.insert("size".into(), json!(0));
        }
    }
    let mut out = crate::es::search::search_on(&pit.indices, &state.params, body, Some(id)).await?;
    let last = out
        .pointer("/hits/hits")
        .and_then(Value::as_array)
        .and_then(|h| h.last())
        .map(|h| {
            let ts = h.pointer("/sort/0").and_then(Value::as_i64);
            let index = h.get("_index").and_then(Value::as_str);
            let doc = h.get("_id").and_then(Value::as_str);
            match (ts, index, doc) {
                (Some(ts), Some(i), Some(d)) => Ok((ts, i.to_owned(), d.to_owned())),
                _ => Err(Error::status(
                    500,
                    "exception",
                    "a scroll hit without its sort values",
                )),
            }
        })
        .transpose()?;
    match last {
        Some(after) => state.after = Some(after),
        None => state.done = true,
    }
    if let Value::Object(o) = &mut out {
        o.remove("pit_id");
        o.insert("_scroll_id".into(), json!(id));
    }
    Ok(out)
}

/// The `scroll_id` and `scroll` of a scroll request: from the body, else the URL.
fn scroll_args(
    params: &HashMap<String, String>,
    body: &Value,
) -> Result<(String, Option<Duration>)> {
    let id = body
        .get("scroll_id")
        .and_then(Value::as_str)
        .or_else(|| params.get("scroll_id").map(String::as_str))
        .ok_or_else(|| {
            Error::bad(
                "action_request_validation_exception",
                "Validation Failed: 1: scrollId is missing;",
            )
        })?;
    let keep = body
        .get("scroll")
        .and_then(Value::as_str)
        .or_else(|| params.get("scroll").map(String::as_str))
        .map(keep_alive)
        .transpose()?;
    Ok((id.to_owned(), keep))
}

/// `POST /_search/scroll` (`{"scroll": "1m", "scroll_id": …}`, or the same in the URL).
async fn scroll_next(
    State(st): State<Arc<AppState>>,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let params = params(q.as_deref());
    let bytes = read_body(&st, &headers, body).await?;
    let v = crate::http::json_body(&bytes)?;
    let (id, keep) = scroll_args(&params, &v)?;
    let pit = st.pits.get(&id, &who, keep)?;
    let mut out = page(&pit, &id).await?;
    if params
        .get("rest_total_hits_as_int")
        .is_some_and(|v| v != "false")
        && let Some(total) = out.pointer("/hits/total/value").cloned()
    {
        out["hits"]["total"] = total;
    }
    Ok(crate::es::respond(200, out, &params))
}

/// `DELETE /_search/scroll` with `{"scroll_id": id or [ids]}`.
async fn clear_scroll(
    State(st): State<Arc<AppState>>,
    Caller(who): Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let params = params(q.as_deref());
    let bytes = read_body(&st, &headers, body).await?;
    let v = crate::http::json_body(&bytes)?;
    let ids: Vec<String> = match v.get("scroll_id") {
        Some(Value::String(id)) => vec![id.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => params
            .get("scroll_id")
            .map(|s| s.split(',').map(str::to_owned).collect())
            .unwrap_or_default(),
    };
    if ids.is_empty() {
        return Err(Error::bad(
            "action_request_validation_exception",
            "Validation Failed: 1: no scroll ids specified;",
        ));
    }
    free_ids(&st, &who, ids).await
}
