//! `POST /api/v1/admin/tsdb/delete_series` (Prometheus' admin API): deletes the samples
//! of the series matching any `match[]` selector within `[start, end]` from a
//! label-keyed index (`?index=` or `X-Tidemark-Index`, else the metrics index), the
//! index the caller may write. Each sample is deleted by its synthetic id: a tombstone
//! in the write-ahead log at once, then in the segments, purged from them by merges; so
//! a delete survives a restart and a merge. The series are chosen under the index's
//! read lock and deleted a group at a time under its write lock: a sample written
//! between the two (a write racing the delete) is kept, as in Prometheus. Answers `204`
//! with `X-Tidemark-Deleted: N`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tidemark::tsid::SyntheticId;

use crate::error::{Error, Result};
use crate::http::Caller;
use crate::metrics::target_index;
use crate::state::{AppState, blocking};

/// Series whose samples are read, then deleted, at a time.
const GROUP_SERIES: usize = 1024;

/// The handler.
pub(crate) async fn delete_series(
    State(st): State<Arc<AppState>>,
    Caller(who): Caller,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let bad = |m: String| Error::bad("bad_data", m);
    let params = crate::prom::all_params(&st, raw, &headers, body)
        .await
        .map_err(|e| bad(e.to_string()))?;
    let (selectors, start, end) =
        crate::prom::selection(&params, true).map_err(|e| bad(e.to_string()))?;
    if start > end {
        return Err(bad("start is after end".into()));
    }
    let map: HashMap<String, String> = params.iter().cloned().collect();
    let name = target_index(&st.config, &headers, &map);
    let Some(handle) = st.registry.scope(&who).get(&name)? else {
        return Ok(answer(0));
    };
    if !handle.mapping().is_label_keyed() {
        return Err(Error::bad(
            "illegal_argument_exception",
            format!(
                "index [{name}] is not label-keyed: delete_series deletes from the indices the metrics protocols write"
            ),
        ));
    }
    let deleted = blocking(move || {
        let chosen =
            handle.read(|index| crate::metrics::vm_api::choose(index, &selectors, start, end))?;
        let mut deleted = 0u64;
        let mut cols = Vec::new();
        for group in chosen.chunks(GROUP_SERIES) {
            let ids = handle.read(|index| {
                let mut reader = index.series_reader(
                    start,
                    end,
                    &[tidemark::VALUE_FIELD, tidemark::VALUE_LONG_FIELD],
                );
                let mut ids = Vec::new();
                for (tsid, _, _) in group {
                    reader
                        .read(tsid, &mut cols)
                        .map_err(|e| Error::status(500, "exception", e.to_string()))?;
                    for c in &cols {
                        ids.extend(c.ts.iter().map(|t| SyntheticId::new(*tsid, *t)));
                    }
                }
                Ok(ids)
            })?;
            if ids.is_empty() {
                continue;
            }
            deleted += handle.exclusive(|index| {
                index
                    .delete_points(&ids)
                    .map_err(|e| Error::status(500, "exception", e.to_string()))
            })?;
        }
        Ok(deleted)
    })
    .await?;
    Ok(answer(deleted))
}

fn answer(deleted: u64) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    if let Ok(v) = HeaderValue::from_str(&deleted.to_string()) {
        r.headers_mut().insert("x-tidemark-deleted", v);
    }
    r
}
