//! `POST /api/v1/admin/tsdb/snapshot` (Prometheus' admin API): a consistent snapshot of
//! the data directory under `DATA/snapshots/<name>/`, answered with its name. Each
//! index is snapshotted under its read lock, which keeps its writer and merge installs
//! out, so it holds exactly the writes that index had acknowledged
//! ([`tidemark::Index::snapshot`]: segments hard-linked, the write-ahead log copied);
//! indices are taken one after the other, not at one instant. The templates and the
//! cluster id are linked beside them. Restore by pointing a server at a copy:
//! `tidemark restore DATA/snapshots/<name> --data NEW_DATA` (links, copies the logs).
//!
//! Only a principal allowed every index may take one (a snapshot holds every tenant's
//! data); others get `403`.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::response::Response;
use serde_json::json;

use crate::error::{Error, Result};
use crate::http::{Caller, json};
use crate::registry::INDICES_DIR;
use crate::state::{AppState, blocking};

/// The directory of snapshots inside the data directory.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// A snapshot's name as Prometheus spells them: `20261204T215500Z-<16 hex digits>`.
fn snapshot_name() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let stamp: String = tidemark::format_time(now)
        .chars()
        .take(19)
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    let random = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_i64(now);
        h.finish()
    };
    format!("{stamp}Z-{random:016x}")
}

/// Takes a snapshot of the whole data directory into `SNAPSHOTS_DIR/<name>`; returns
/// the name.
///
/// # Errors
/// `500` naming the file when a link, copy or sync fails (the partial snapshot is
/// removed).
pub fn take(st: &AppState, who: &crate::auth::Principal) -> Result<String> {
    let root = st.registry.root();
    let name = snapshot_name();
    let dest = root.join(SNAPSHOTS_DIR).join(&name);
    let result = (|| -> Result<()> {
        tidemark::copy_tree(root, &dest, &[SNAPSHOTS_DIR, INDICES_DIR])
            .map_err(|e| io_error(&dest, &e))?;
        let indices = dest.join(INDICES_DIR);
        std::fs::create_dir_all(&indices).map_err(|e| io_error(&indices, &e))?;
        for h in st.registry.scope(who).list() {
            let to = indices.join(h.name());
            let taken = h.read(|index| {
                index
                    .snapshot(&to)
                    .map_err(|e| Error::status(500, "exception", e.to_string()))
            });
            if let Err(e) = taken {
                // A closed index has no writer: its directory is copied as it is.
                let from = root.join(INDICES_DIR).join(h.name());
                if to.exists() || !from.is_dir() {
                    return Err(e);
                }
                tidemark::copy_tree(&from, &to, &[]).map_err(|e| io_error(&to, &e))?;
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&dest);
        return Err(e);
    }
    Ok(name)
}

fn io_error(path: &Path, e: &dyn std::fmt::Display) -> Error {
    Error::status(
        500,
        "exception",
        format!("snapshot {}: {e}", path.display()),
    )
}

/// The handler: `{"status":"success","data":{"name":"…"}}`, or Prometheus' error shape.
pub(crate) async fn handler(State(st): State<Arc<AppState>>, Caller(who): Caller) -> Response {
    if !who.unrestricted() {
        return json(
            403,
            &json!({"status": "error", "errorType": "forbidden",
                    "error": "a snapshot holds every index: it needs a user allowed every index"}),
        );
    }
    let st2 = Arc::clone(&st);
    match blocking(move || take(&st2, &who)).await {
        Ok(name) => json(200, &json!({"status": "success", "data": {"name": name}})),
        Err(e) => json(
            500,
            &json!({"status": "error", "errorType": "internal", "error": e.to_string()}),
        ),
    }
}
