//! The metrics protocols' routes: Prometheus remote write (`POST /api/v1/write`), and
//! what they share: choosing the label-keyed index, checking samples, writing them
//! through the index's writer (group-committed, fsynced before the answer) and counting
//! what happened.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use tidemark::{Action, ItemStatus, LabelPoints, ParsedDoc, PreparedItem, SampleValue};

use crate::api::{AppState, admit, blocking};
use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::http::{self, params};
use crate::remote_write;

type St = State<Arc<AppState>>;
type Who = Option<Extension<Principal>>;

/// The header naming the label-keyed index of a remote-write or OTLP request.
pub const INDEX_HEADER: &str = "x-tidemark-index";

/// The routes of the metrics protocols.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/api/v1/write", post(remote_write))
}

/// What a write of samples did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Samples stored.
    pub created: u64,
    /// Samples already stored (retries): nothing written.
    pub duplicates: u64,
    /// Samples that replaced a stored value (`metrics_op = "index"`).
    pub replaced: u64,
    /// Samples the engine refused, with the reason of the first.
    pub rejected: u64,
    /// The first rejection.
    pub first_rejection: Option<String>,
}

/// Samples made into index items on a request's blocking thread.
pub(crate) struct Batch {
    points: LabelPoints,
    action: Action,
    now_ms: i64,
    max_future_ms: i64,
    /// The items to write.
    pub items: Vec<PreparedItem>,
}

impl Batch {
    pub(crate) fn new(config: &crate::Config) -> Result<Batch> {
        Ok(Batch {
            points: LabelPoints::new()?,
            action: if config.metrics_op == "index" {
                Action::Index
            } else {
                Action::Create
            },
            now_ms: now_ms(),
            max_future_ms: i64::try_from(config.max_future_secs.saturating_mul(1000))
                .unwrap_or(i64::MAX),
            items: Vec::new(),
        })
    }

    /// Adds one sample; `what` names it in an error (a series, a line).
    ///
    /// # Errors
    /// `400` naming `what`: a timestamp too far in the future, invalid labels.
    pub(crate) fn push(
        &mut self,
        labels: &[(&str, &str)],
        ts_millis: i64,
        value: SampleValue,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        if ts_millis.saturating_sub(self.now_ms) > self.max_future_ms {
            return Err(Error::bad(
                "illegal_argument_exception",
                format!(
                    "{}: timestamp {ts_millis} ({}) is more than {} s ahead of the server's clock",
                    what(),
                    tidemark::format_time(ts_millis),
                    self.max_future_ms / 1000
                ),
            ));
        }
        let point = self
            .points
            .point(labels, ts_millis, value)
            .map_err(|e| Error::bad("illegal_argument_exception", format!("{}: {e}", what())))?;
        let line = self.items.len() as u64;
        self.items.push(PreparedItem::store(
            line,
            self.action,
            None,
            ParsedDoc {
                point,
                ignored_fields: 0,
            },
        ));
        Ok(())
    }
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The label-keyed index a request writes: `?index=`, else the `X-Tidemark-Index`
/// header, else the configured `metrics_index`.
pub(crate) fn target_index(
    config: &crate::Config,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> String {
    params
        .get("index")
        .filter(|s| !s.is_empty())
        .cloned()
        .or_else(|| {
            headers
                .get(INDEX_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| config.metrics_index.clone())
}

/// Writes `items` to the label-keyed index `name` (created if needed), after checking
/// that `who` may; the answer comes once they are in the fsynced log.
///
/// # Errors
/// `403`, `400` for an invalid name or an index with a declared mapping, `500`/`503`
/// when the write fails (a retry is safe: what reached the log is then a duplicate).
pub(crate) async fn store(
    st: &Arc<AppState>,
    who: &Principal,
    name: String,
    items: Vec<PreparedItem>,
) -> Result<Tally> {
    who.check(&name)?;
    let mut tally = Tally::default();
    if items.is_empty() {
        return Ok(tally);
    }
    let st2 = Arc::clone(st);
    let handle = blocking(move || st2.registry.get_or_create_labels(&name)).await?;
    let rx = handle.submit(items)?;
    for r in handle.wait(rx).await? {
        match r.status {
            ItemStatus::Created | ItemStatus::Indexed { replaced: false } => tally.created += 1,
            ItemStatus::Indexed { replaced: true } => tally.replaced += 1,
            ItemStatus::Duplicate => tally.duplicates += 1,
            ItemStatus::Error(reason) => {
                tally.rejected += 1;
                tally.first_rejection.get_or_insert(reason);
            }
            _ => {}
        }
    }
    Ok(tally)
}

/// Adds the tally as response headers (`X-Tidemark-Samples-Created`, `-Duplicate`,
/// `-Replaced`), for senders' logs and tests.
pub(crate) fn tally_headers(resp: &mut Response, t: &Tally) {
    let h = resp.headers_mut();
    for (name, n) in [
        ("x-tidemark-samples-created", t.created),
        ("x-tidemark-samples-duplicate", t.duplicates),
        ("x-tidemark-samples-replaced", t.replaced),
    ] {
        h.insert(name, HeaderValue::from(n));
    }
}

fn no_content(t: &Tally) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    tally_headers(&mut resp, t);
    resp
}

/// `400` for samples the engine refused after the others were stored.
fn rejected(t: &Tally) -> Error {
    Error::bad(
        "illegal_argument_exception",
        format!(
            "{} samples rejected (the other {} stored, {} duplicates): {}",
            t.rejected,
            t.created + t.replaced,
            t.duplicates,
            t.first_rejection.as_deref().unwrap_or("")
        ),
    )
}

/// `POST /api/v1/write`: Prometheus remote write 1.0. `204` once every sample is in
/// the fsynced log (a retry's samples are counted as duplicates); `400` (not retried)
/// for a body that is not a snappy `WriteRequest` or holds an invalid series, with
/// nothing stored; `429`/`5xx` only for what a retry fixes.
async fn remote_write(
    State(st): St,
    p: Who,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let _permit = admit(&st)?;
    let who = http::principal(p.as_ref().map(|e| &e.0));
    remote_write::check_content_type(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    )?;
    match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("snappy") => {}
        Some(other) => {
            return Err(Error::status(
                415,
                "illegal_argument_exception",
                format!("unsupported Content-Encoding [{other}]: remote write bodies are snappy"),
            ));
        }
    }
    if let Some(v) = headers
        .get("x-prometheus-remote-write-version")
        .and_then(|v| v.to_str().ok())
        && v.trim().starts_with('2')
    {
        return Err(Error::status(
            415,
            "media_type_header_exception",
            format!("remote write version {v} is not supported: this receiver speaks 1.0"),
        ));
    }
    let name = target_index(&st.config, &headers, &params(q.as_deref()));
    let bytes = http::read_raw_body(&st, &headers, body).await?;
    let st2 = Arc::clone(&st);
    let items = blocking(move || {
        let req = remote_write::decode(&bytes, st2.config.max_content_length)?;
        let mut batch = Batch::new(&st2.config)?;
        let mut labels: Vec<(&str, &str)> = Vec::new();
        for ts in &req.timeseries {
            remote_write::check_series(ts)?;
            labels.clear();
            labels.extend(
                ts.labels
                    .iter()
                    .map(|l| (l.name.as_str(), l.value.as_str())),
            );
            for s in &ts.samples {
                batch.push(&labels, s.timestamp, SampleValue::F64(s.value), &|| {
                    remote_write::series_text(ts)
                })?;
            }
        }
        Ok(batch.items)
    })
    .await?;
    let tally = store(&st, &who, name, items).await?;
    if tally.rejected > 0 {
        return Err(rejected(&tally));
    }
    Ok(no_content(&tally))
}
