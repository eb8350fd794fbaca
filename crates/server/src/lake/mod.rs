//! The Parquet lake from the server: `POST /<index>/_tidemark/export` exports an index's
//! sealed time partitions to a Delta table inside the configured `lake_dir`, and with
//! `lake_auto` a background task exports each partitioned index's newly sealed
//! partitions to `lake_dir/<index>` every `lake_interval_secs` (docs/lake.md).
//!
//! Both take a snapshot of the index's sealed partitions under its read lock (a moment:
//! shared segment files and copied tombstones, [`IndexSnapshot`]) and export it on a
//! blocking thread with the lock released, so neither searches nor the index's writer
//! wait for an export. The export is
//! idempotent (a partition already in the lake at its generation is skipped by its Delta
//! transaction id), so a retry or a re-check writes nothing twice.
//!
//! Queries over time retention removed read the lake's copy back (`cache.rs`).

mod cache;

pub(crate) use cache::{CACHE_DIR, CacheStats, LakeCache};

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use serde_json::Value;
use tidemark_lake::{ExportOptions, ExportReport, IndexSnapshot, LakeStore};

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::http::{Caller, json, json_body, params, read_body};
use crate::registry::IndexHandle;
use crate::routes::Routes;
use crate::state::{AppState, blocking};

/// What the lake exports did since the server started, for `GET /metrics` (never by
/// index: the counters are the server's).
#[derive(Debug, Default)]
pub(crate) struct LakeStats {
    /// Partitions committed to a lake by `POST /<index>/_tidemark/export`.
    pub(crate) request_partitions: AtomicU64,
    /// Exports by request that failed.
    pub(crate) request_failures: AtomicU64,
    /// Partitions committed to a lake by the automatic mode (`lake_auto`).
    pub(crate) auto_partitions: AtomicU64,
    /// Automatic exports (one index, one pass) that failed.
    pub(crate) auto_failures: AtomicU64,
}

/// The lake's routes.
pub(crate) fn routes() -> Routes {
    Routes::new().route("/{index}/_tidemark/export", post(export_handler))
}

/// `POST /<index>/_tidemark/export`: `to` (the lake directory, inside `lake_dir`;
/// default `lake_dir/<index>`) and `partition` (starts of sealed partitions, RFC 3339 or
/// epoch milliseconds; default every sealed partition), in the JSON body or the query
/// string. Answers the export's report (`ExportReport::to_json`) with the `index` and
/// the `lake` directory written.
async fn export_handler(
    State(st): State<Arc<AppState>>,
    Caller(who): Caller,
    UrlPath(index): UrlPath<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let handle = export_target(&st, &who, &index)?;
    let body = json_body(&read_body(&st, &headers, body).await?)?;
    let request = ExportRequest::parse(&params(query.as_deref()), &body)?;
    let Some(root) = st.config.lake_dir.clone() else {
        return Err(no_lake_dir());
    };
    let state = Arc::clone(&st);
    let (lake, report) = blocking(move || {
        let lake = lake_path(&root, handle.name(), request.to.as_deref())?;
        let options = ExportOptions {
            partitions: request.partitions,
            ..ExportOptions::default()
        };
        let report = export_index(&handle, &lake, &options);
        let stats = &state.lake_stats;
        match &report {
            Ok(r) => stats
                .request_partitions
                .fetch_add(r.committed() as u64, Ordering::Relaxed),
            Err(_) => stats.request_failures.fetch_add(1, Ordering::Relaxed),
        };
        Ok((lake, report?))
    })
    .await?;
    let mut answer = report.to_json();
    if let Some(obj) = answer.as_object_mut() {
        obj.insert("index".to_owned(), Value::String(index));
        obj.insert(
            "lake".to_owned(),
            Value::String(lake.to_string_lossy().into_owned()),
        );
    }
    Ok(json(200, &answer))
}

/// The one index an export names (a pattern or a list is refused): `403` when the caller
/// may not use it, `404` when it does not exist.
fn export_target(st: &AppState, who: &Principal, index: &str) -> Result<Arc<IndexHandle>> {
    if index.contains(['*', ',']) || index == "_all" {
        return Err(Error::bad(
            "illegal_argument_exception",
            format!("[{index}]: an export names one index, not a pattern or a list"),
        ));
    }
    st.registry.scope(who).require(index)
}

fn no_lake_dir() -> Error {
    Error::bad(
        "illegal_argument_exception",
        "no lake directory is configured: start the server with --lake-dir DIR (or `lake_dir` in its config file)",
    )
}

/// The parameters of an export request.
#[derive(Debug, Default, PartialEq)]
struct ExportRequest {
    /// The lake directory asked for (`None`: `lake_dir/<index>`).
    to: Option<String>,
    /// The sealed partitions asked for, milliseconds (`None`: all).
    partitions: Option<Vec<i64>>,
}

impl ExportRequest {
    /// From the query string (`to`, `partition` comma-separated) and the JSON body (`to`,
    /// `partition` as a string, a number or a list of them); the body wins. Other query
    /// parameters are ignored; other body keys are a `400`.
    fn parse(query: &HashMap<String, String>, body: &Value) -> Result<ExportRequest> {
        let bad = |reason: String| Error::bad("illegal_argument_exception", reason);
        let mut to = query.get("to").cloned();
        let mut partition: Option<Vec<Value>> = query.get("partition").map(|p| {
            p.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()))
                .collect()
        });
        match body {
            Value::Null => {}
            Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("to", Value::String(s)) => to = Some(s.clone()),
                        ("partition" | "partitions", Value::Array(list)) => {
                            partition = Some(list.clone());
                        }
                        (
                            "partition" | "partitions",
                            one @ (Value::String(_) | Value::Number(_)),
                        ) => {
                            partition = Some(vec![one.clone()]);
                        }
                        ("to" | "partition" | "partitions", other) => {
                            return Err(bad(format!("[{k}] has the wrong type: {other}")));
                        }
                        (other, _) => {
                            return Err(bad(format!(
                                "unknown key [{other}]: an export takes [to] and [partition]"
                            )));
                        }
                    }
                }
            }
            other => {
                return Err(bad(format!(
                    "the body must be a JSON object, found {other}"
                )));
            }
        }
        if to.as_deref().is_some_and(str::is_empty) {
            return Err(bad("[to] is empty".to_owned()));
        }
        let partitions = match partition {
            None => None,
            Some(list) if list.is_empty() => None,
            Some(list) => Some(
                list.iter()
                    .map(|v| match v {
                        Value::Number(n) => n
                            .as_i64()
                            .ok_or_else(|| bad(format!("[partition] {n} is not in milliseconds"))),
                        Value::String(s) => tidemark::parse_time(s)
                            .map_err(|e| bad(format!("[partition] {s}: {e}"))),
                        other => Err(bad(format!("[partition] {other} is not a time"))),
                    })
                    .collect::<Result<Vec<i64>>>()?,
            ),
        };
        Ok(ExportRequest { to, partitions })
    }
}

/// The lake directory an export writes: `to` (relative to `root`, or absolute) or
/// `root/<index>`, which must lie strictly inside `root` (the canonical `lake_dir`) once
/// symbolic links are resolved: no `..`, no link out of it. Creates `root` if needed.
///
/// # Errors
/// `400` for a path outside `root`; I/O errors resolving it.
pub(crate) fn lake_path(root: &Path, index: &str, to: Option<&str>) -> Result<PathBuf> {
    let outside = |what: &str| {
        Error::bad(
            "illegal_argument_exception",
            format!("[to] {what}: the lake must be a directory inside the server's lake_dir"),
        )
    };
    let asked = match to {
        None => root.join(index),
        Some(t) => {
            let p = Path::new(t);
            if p.components()
                .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
            {
                return Err(outside(&format!("{t} names a parent directory")));
            }
            root.join(p)
        }
    };
    std::fs::create_dir_all(root).map_err(Error::io(root))?;
    let root = root.canonicalize().map_err(Error::io(root))?;
    // The deepest part that exists, with its links resolved, then the rest as named.
    let mut existing = asked.as_path();
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(existing).is_err() {
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
            return Err(outside(&format!("{} does not exist", asked.display())));
        };
        rest.push(name);
        existing = parent;
    }
    let mut real = existing
        .canonicalize()
        .map_err(|_| outside(&format!("{} does not resolve", asked.display())))?;
    for name in rest.iter().rev() {
        real.push(name);
    }
    if real == root || !real.starts_with(&root) {
        return Err(outside(&format!("{} is not inside it", asked.display())));
    }
    Ok(real)
}

/// Exports `handle`'s sealed partitions to `lake`: a snapshot taken under its read lock,
/// written with the lock released.
fn export_index(
    handle: &IndexHandle,
    lake: &Path,
    options: &ExportOptions,
) -> Result<ExportReport> {
    let snapshot = handle.read(|index| Ok(IndexSnapshot::of(index)?))?;
    let store = LakeStore::local(lake)?;
    Ok(tidemark_lake::export_snapshot(
        &snapshot,
        &store,
        options,
        &mut |_| {},
    )?)
}

/// The automatic mode: every `lake_interval_secs` until `stop` turns true, each
/// partitioned index whose sealed partitions changed since its last successful export
/// is exported to `lake_dir/<index>`. Failures are logged with the index and counted,
/// and retried at the next pass.
pub(crate) async fn auto_export(st: Arc<AppState>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Some(root) = st.config.lake_dir.clone() else {
        return;
    };
    let every = Duration::from_secs(st.config.lake_interval_secs.max(1));
    // Per index, the (start, generation) of its sealed partitions at its last export.
    let mut seen: HashMap<String, Vec<(i64, u64)>> = HashMap::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        let state = Arc::clone(&st);
        let root = root.clone();
        let pass = tokio::task::spawn_blocking(move || {
            auto_pass(&state, &root, &mut seen);
            seen
        })
        .await;
        match pass {
            Ok(s) => seen = s,
            Err(e) => {
                tracing::error!(error = %e, "automatic lake export failed");
                seen = HashMap::new();
            }
        }
    }
}

/// One pass of the automatic mode over every index.
fn auto_pass(st: &AppState, root: &Path, seen: &mut HashMap<String, Vec<(i64, u64)>>) {
    let everyone = Principal::anonymous();
    let handles = st.registry.scope(&everyone).list();
    seen.retain(|name, _| handles.iter().any(|h| h.name() == name));
    for handle in handles {
        let name = handle.name().to_owned();
        let sealed = handle.read(|index| {
            if !index.engine().is_partitioned() {
                return Ok(Vec::new());
            }
            Ok(index
                .sealed_partitions()?
                .iter()
                .map(|p| (p.start_ms, p.generation))
                .collect::<Vec<_>>())
        });
        let sealed = match sealed {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(index = %name, error = %e, "automatic lake export: listing sealed partitions failed");
                st.lake_stats.auto_failures.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        if sealed.is_empty() || seen.get(&name) == Some(&sealed) {
            continue;
        }
        let result = lake_path(root, &name, None)
            .and_then(|lake| export_index(&handle, &lake, &ExportOptions::default()));
        match result {
            Ok(report) => {
                let committed = report.committed();
                st.lake_stats
                    .auto_partitions
                    .fetch_add(committed as u64, Ordering::Relaxed);
                if committed > 0 {
                    tracing::info!(index = %name, partitions = committed, rows = report.rows(), "exported to the lake");
                }
                seen.insert(name, sealed);
            }
            Err(e) => {
                st.lake_stats.auto_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(index = %name, error = %e, "automatic lake export failed; retried at the next pass");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lake_paths_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lake");
        let real_root = {
            std::fs::create_dir_all(&root).unwrap();
            root.canonicalize().unwrap()
        };
        assert_eq!(lake_path(&root, "ix", None).unwrap(), real_root.join("ix"));
        assert_eq!(
            lake_path(&root, "ix", Some("a/b")).unwrap(),
            real_root.join("a/b")
        );
        let inside = real_root.join("c");
        assert_eq!(
            lake_path(&root, "ix", inside.to_str()).unwrap(),
            real_root.join("c")
        );
        let outside = dir.path().join("elsewhere");
        for bad in [
            outside.to_str().unwrap(),
            "/tmp/x",
            "../x",
            "a/../../x",
            ".",
            real_root.to_str().unwrap(),
        ] {
            let e = lake_path(&root, "ix", Some(bad)).unwrap_err();
            assert_eq!(e.status_and_kind().0, 400, "{bad}: {e}");
        }
        // A link out of the root is refused once resolved.
        std::os::unix::fs::symlink(dir.path(), real_root.join("link")).unwrap();
        assert!(lake_path(&root, "ix", Some("link/x")).is_err());
        assert!(!dir.path().join("x").exists());
    }

    #[test]
    fn export_requests_parse_from_the_query_and_the_body() {
        let q: HashMap<String, String> = [
            ("to".to_owned(), "a".to_owned()),
            ("partition".to_owned(), "0,86400000".to_owned()),
        ]
        .into();
        let r = ExportRequest::parse(&q, &Value::Null).unwrap();
        assert_eq!(r.to.as_deref(), Some("a"));
        assert_eq!(r.partitions, Some(vec![0, 86_400_000]));
        let body = json!({"to": "b", "partition": ["1970-01-02T00:00:00Z", 0]});
        let r = ExportRequest::parse(&q, &body).unwrap();
        assert_eq!(r.to.as_deref(), Some("b"));
        assert_eq!(r.partitions, Some(vec![86_400_000, 0]));
        let r = ExportRequest::parse(&HashMap::new(), &json!({})).unwrap();
        assert_eq!(r, ExportRequest::default());
        for bad in [
            json!({"to": 1}),
            json!({"to": ""}),
            json!({"colour": "red"}),
            json!({"partition": ["yesterday-ish"]}),
            json!([1]),
        ] {
            assert!(
                ExportRequest::parse(&HashMap::new(), &bad).is_err(),
                "{bad}"
            );
        }
    }
}
