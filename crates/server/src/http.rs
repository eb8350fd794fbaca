//! Cross-cutting HTTP concerns, one place each: the `X-Elastic-Product` header, request
//! logs, authentication (a layer), and body reading with its limit, timeout and gzip
//! decoding; JSON responses and query parameters.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::auth::{Credentials, Principal, authenticate_request, influx_query_user, is_public};
use crate::error::Error;
use crate::es::protocol::error_body;
use crate::state::AppState;

/// The header every response carries; the official clients refuse a server without it.
pub const PRODUCT_HEADER: &str = "x-elastic-product";

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, kind) = self.status_and_kind();
        if status >= 500 {
            tracing::error!(error = %self, "request failed");
        }
        let mut resp = json(status, &error_body(status, kind, &self.reason()));
        retry_after(&mut resp, &self);
        if status == 401 {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"security\", charset=\"UTF-8\", ApiKey"),
            );
        }
        resp
    }
}

/// Adds `Retry-After` to `resp` when `e` is fixed by a retry later.
pub(crate) fn retry_after(resp: &mut Response, e: &Error) {
    if let Some(secs) = e.retry_after() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
}

/// A JSON response with `status`.
pub fn json(status: u16, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    json_bytes(status, bytes)
}

/// A response of JSON bytes already written.
pub fn json_bytes(status: u16, bytes: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A text response (the `_cat` APIs).
pub fn text(body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=UTF-8"),
    );
    resp
}

/// The layer around every request: authenticates (401 before any handler runs), adds
/// `X-Elastic-Product: Elasticsearch` and the content type clients negotiated, and logs
/// method, path, status and duration.
pub async fn layer(
    State((state, refusals)): State<(Arc<AppState>, Arc<crate::routes::Refusals>)>,
    mut req: Request,
    next: Next,
) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    // The route template (`/{index}/_bulk`), never the path itself: no index name or
    // id becomes a metric label.
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .cloned();
    let vendor_json = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.contains("vnd.elasticsearch+json").then(|| {
                v.split("compatible-with=")
                    .nth(1)
                    .map(|n| n.trim().to_owned())
            })
        })
        .flatten();
    let influx_user = matches!(path.as_str(), "/write" | "/query")
        .then(|| influx_query_user(req.uri().query()))
        .flatten();
    let auth = if is_public(&method, &path) {
        Ok(Principal::anonymous())
    } else {
        authenticate_request(
            &state.config,
            Credentials {
                authorization: req
                    .headers()
                    .get(header::AUTHORIZATION)
                    .map(HeaderValue::as_bytes),
                influx_user: influx_user.as_ref().map(|(u, p)| (u.as_str(), p.as_str())),
            },
        )
    };
    let mut resp = match auth {
        Ok(principal) => {
            let user = principal.name.clone();
            req.extensions_mut().insert(principal);
            let resp = answer_panics(next.run(req), &method, &path, &user).await;
            tracing::info!(
                %method, %path, status = resp.status().as_u16(), %user,
                millis = start.elapsed().as_millis() as u64, "request"
            );
            resp
        }
        Err(e) => {
            tracing::info!(%method, %path, status = 401, "request refused: authentication");
            let browser = crate::ui::from_browser(req.headers());
            let mut resp = refusals
                .shape(&path, req.headers(), &e)
                .unwrap_or_else(|| e.into_response());
            if browser && resp.status() == StatusCode::UNAUTHORIZED {
                // A browser prompts for credentials only on a challenge it can parse.
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(crate::ui::BROWSER_CHALLENGE),
                );
            }
            resp
        }
    };
    state.http_stats.record(
        route
            .as_ref()
            .map_or("unmatched", axum::extract::MatchedPath::as_str),
        method.as_str(),
        resp.status().as_u16(),
        start.elapsed(),
    );
    let headers = resp.headers_mut();
    headers.insert(PRODUCT_HEADER, HeaderValue::from_static("Elasticsearch"));
    if let Some(n) = vendor_json
        && headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"))
        && let Ok(v) = HeaderValue::from_str(&format!(
            "application/vnd.elasticsearch+json;compatible-with={}",
            n.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        ))
    {
        headers.insert(header::CONTENT_TYPE, v);
    }
    resp
}

/// Runs a handler's future; a panic in it (a bug: handlers return errors) answers `500`
/// and is logged with the request, and the other requests never notice.
async fn answer_panics(
    run: impl std::future::Future<Output = Response>,
    method: &axum::http::Method,
    path: &str,
    user: &str,
) -> Response {
    match futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run)).await {
        Ok(resp) => resp,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(%method, %path, %user, panic = %what, "request handler panicked");
            Error::status(
                500,
                "exception",
                "the request failed inside the server (a bug; the server log has it)",
            )
            .into_response()
        }
    }
}

/// The principal the authentication [`layer`] put on a request: how a handler learns
/// who calls, and so the only way it reaches the registry
/// ([`Registry::scope`](crate::Registry::scope) takes the principal).
///
/// A request the layer did not see has no principal, and is refused with `500` rather
/// than served as anyone.
#[derive(Debug, Clone)]
pub struct Caller(pub Principal);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = Error;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Error> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .map(Caller)
            .ok_or_else(|| {
                Error::status(
                    500,
                    "exception",
                    "the request has no principal: the authentication layer did not run",
                )
            })
    }
}

/// Reads a request body: `413` past `max_content_length` (checked on `Content-Length`
/// first, then while reading, then on the gunzipped size), `408` when the client is
/// slower than the client timeout, gzip decoded when `Content-Encoding: gzip`.
///
/// # Errors
/// `413`, `408`, `400` for a broken gzip stream or an unknown content encoding.
pub async fn read_body(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Bytes, Error> {
    let bytes = read_raw_body(state, headers, body).await?;
    decode_body(state, headers, bytes)
}

fn too_large(limit: u64) -> Error {
    Error::status(
        413,
        "content_too_long_exception",
        format!("request body is larger than http.max_content_length [{limit} bytes]"),
    )
}

/// Reads a request body as sent, whatever its `Content-Encoding` (remote write's
/// snappy is decoded by its protocol module): `413` past `max_content_length`, `408`
/// when the client is slower than the client timeout.
///
/// # Errors
/// `413`, `408`, `400` when the connection breaks.
pub async fn read_raw_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, Error> {
    let limit = state.config.max_content_length;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let collected = tokio::time::timeout(
        state.config.client_timeout(),
        collect_limited(body, limit, declared, &state.body_bytes),
    )
    .await;
    let bytes = match collected {
        Err(_) => {
            return Err(Error::status(
                408,
                "timeout_exception",
                "the client did not send the request body in time",
            ));
        }
        Ok(Err(CollectError::TooLarge)) => return Err(too_large(limit)),
        Ok(Err(CollectError::Budget)) => {
            return Err(Error::status(
                429,
                "es_rejected_execution_exception",
                format!(
                    "rejected execution: request bodies being received hold the whole body_bytes_in_flight budget [{} bytes]; retry later",
                    state.config.body_budget()
                ),
            ));
        }
        Ok(Err(CollectError::Read(e))) => {
            return Err(Error::bad(
                "parse_exception",
                format!("reading the body: {e}"),
            ));
        }
        Ok(Ok(b)) => b,
    };
    Ok(bytes)
}

/// Decodes a body read by [`read_raw_body`] per its `Content-Encoding` (gzip or none).
///
/// # Errors
/// `400` for a broken gzip stream, `413` past the limit once gunzipped, `415` for
/// another encoding.
pub fn decode_body(state: &AppState, headers: &HeaderMap, bytes: Bytes) -> Result<Bytes, Error> {
    let limit = state.config.max_content_length;
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    match encoding.as_deref() {
        None | Some("identity") | Some("") => Ok(bytes),
        Some("gzip") | Some("x-gzip") => {
            let max = usize::try_from(limit).unwrap_or(usize::MAX);
            match crate::gunzip::gunzip(&bytes, max) {
                Ok(out) => Ok(Bytes::from(out)),
                Err(crate::gunzip::GunzipError::TooLarge) => Err(too_large(limit)),
                Err(crate::gunzip::GunzipError::Malformed(why)) => Err(Error::bad(
                    "parse_exception",
                    format!("malformed gzip body: {why}"),
                )),
                Err(crate::gunzip::GunzipError::OutOfMemory) => Err(Error::status(
                    503,
                    "out_of_memory_error",
                    "could not allocate a gzip decoder",
                )),
            }
        }
        Some(other) => Err(Error::status(
            415,
            "illegal_argument_exception",
            format!("unsupported Content-Encoding [{other}]: expected gzip"),
        )),
    }
}

/// Bytes of an oversized body still read (and dropped) before answering `413`, so a
/// client that writes its whole body before reading gets the answer instead of a reset.
const DRAIN_BYTES: u64 = 16 * 1024 * 1024;

enum CollectError {
    TooLarge,
    /// The server-wide budget of body bytes being received is spent.
    Budget,
    Read(axum::Error),
}

/// Bytes of the body budget one body holds; given back when the body is read (or the
/// read is abandoned: a timeout, a broken connection).
struct Held<'a> {
    budget: &'a tokio::sync::Semaphore,
    bytes: usize,
}

impl Held<'_> {
    /// Takes `n` more bytes of the budget, without waiting.
    fn take(&mut self, n: usize) -> Result<(), CollectError> {
        let n32 = u32::try_from(n).map_err(|_| CollectError::Budget)?;
        match self.budget.try_acquire_many(n32) {
            Ok(permit) => {
                permit.forget();
                self.bytes += n;
                Ok(())
            }
            Err(_) => Err(CollectError::Budget),
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.add_permits(self.bytes);
    }
}

/// Collects at most `limit` bytes; past it (or when `declared` says so), drains up to
/// [`DRAIN_BYTES`] more and reports [`CollectError::TooLarge`]. Each frame takes its
/// bytes from `budget` as it arrives (a slow sender holds only what it sent), all given
/// back once the body is read; a frame that finds the budget spent ends the read with
/// [`CollectError::Budget`].
///
/// The frames are kept as they come (no growing buffer copied as it doubles: that held
/// up to twice the limit at once; no buffer of the declared length allocated before the
/// bytes arrive, which a sender could claim without sending) and joined once the body is
/// complete, each frame freed as it is copied; past the limit they are dropped at once.
async fn collect_limited(
    mut body: Body,
    limit: u64,
    declared: Option<u64>,
    budget: &tokio::sync::Semaphore,
) -> Result<Bytes, CollectError> {
    let mut held = Held { budget, bytes: 0 };
    let mut over = declared.is_some_and(|n| n > limit);
    if over && declared.is_some_and(|n| n > limit.saturating_add(DRAIN_BYTES)) {
        return Err(CollectError::TooLarge);
    }
    let mut frames: std::collections::VecDeque<Bytes> = std::collections::VecDeque::new();
    let mut seen = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(CollectError::Read)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len() as u64);
        if seen > limit && !over {
            over = true;
            frames = std::collections::VecDeque::new();
        }
        if over {
            if seen > limit.saturating_add(DRAIN_BYTES) {
                break;
            }
            continue;
        }
        held.take(data.len())?;
        frames.push_back(data);
    }
    if over {
        return Err(CollectError::TooLarge);
    }
    if frames.len() == 1
        && let Some(only) = frames.pop_front()
    {
        return Ok(only);
    }
    let mut buf = Vec::with_capacity(usize::try_from(seen).unwrap_or(0));
    while let Some(f) = frames.pop_front() {
        buf.extend_from_slice(&f);
    }
    Ok(Bytes::from(buf))
}

/// Parses a body as JSON; an empty body is `null`.
///
/// # Errors
/// `400 parse_exception` for malformed JSON.
pub fn json_body(bytes: &[u8]) -> Result<Value, Error> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(bytes).map_err(|e| {
        Error::bad(
            "parse_exception",
            format!("request body is not valid JSON: {e}"),
        )
    })
}

/// Query-string parameters (later duplicates win).
pub fn params(raw: Option<&str>) -> HashMap<String, String> {
    raw.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_answers_500_and_the_next_request_is_served() {
        let get = axum::http::Method::GET;
        let boom = async {
            if std::hint::black_box(true) {
                panic!("handler bug");
            }
            text(String::new())
        };
        let resp = answer_panics(boom, &get, "/x", "bob").await;
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("failed inside the server"));
        let fine = answer_panics(async { text("ok".into()) }, &get, "/y", "bob").await;
        assert_eq!(fine.status(), StatusCode::OK);
    }
}
