//! The web UI: a page for browsers at `/` and its static assets under `/_ui/`, built
//! into the binary from `crates/server/ui/`.
//!
//! The page holds no data: its script calls the same JSON APIs as any client
//! (`_stats`, `_mapping`, `_search`, `_disk_usage`, `/api/v1/query_range`), with the
//! browser's credentials, so every answer is scoped to the caller by the handlers those
//! APIs already have. `/` answers the page only to a request whose `Accept` names
//! `text/html` (what browsers send for a navigation); curl and the Elasticsearch clients
//! keep getting the JSON handshake.
//!
//! Assets live under `/_ui/` rather than `/ui/`: a name starting with `_` cannot be an
//! index, so no index's `/{index}/_search` (and the rest) is shadowed by an asset route.

use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::Error;
use crate::routes::Routes;

/// The page answered on `/` to browsers.
const INDEX_HTML: &str = include_str!("../ui/index.html");

/// The assets served under `/_ui/`: name, bytes, content type.
const ASSETS: &[(&str, &[u8], &str)] = &[
    (
        "app.js",
        include_bytes!("../ui/app.js"),
        "text/javascript; charset=utf-8",
    ),
    (
        "app.css",
        include_bytes!("../ui/app.css"),
        "text/css; charset=utf-8",
    ),
    (
        "favicon.svg",
        include_bytes!("../ui/favicon.svg"),
        "image/svg+xml",
    ),
];

/// The page's security policy: its own scripts, styles and images only (no inline
/// script, no external fetch), API calls to this origin, never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The `WWW-Authenticate` challenge answered to browsers on `401`, on every route: one
/// `Basic` challenge alone, which browsers turn into a login prompt, always with the same
/// realm, since a browser replays the credentials it has only to challenges of their
/// realm (the page's stylesheet, script and API calls are challenged like the page).
/// The API clients' challenge (`Basic realm="security", charset="UTF-8", ApiKey`, as
/// Elasticsearch words it) is one header value with two schemes, which Chromium does
/// not take as a `Basic` challenge.
pub(crate) const BROWSER_CHALLENGE: &str = "Basic realm=\"tidemark\", charset=\"UTF-8\"";

/// The UI's routes: the assets.
pub(crate) fn routes() -> Routes {
    Routes::new().route("/_ui/{name}", get(asset))
}

/// Whether a request comes from a browser: a navigation (its `Accept` names
/// `text/html`) or any request a browser makes, which carries `Sec-Fetch-Mode` (the
/// page's assets and API calls); API clients send neither.
pub(crate) fn from_browser(headers: &HeaderMap) -> bool {
    wants_html(headers) || headers.contains_key("sec-fetch-mode")
}

/// Whether a request asks for a page: its `Accept` names `text/html`.
pub(crate) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/html"))
}

/// The page, for `GET`/`HEAD /` from a browser.
pub(crate) fn page(request: &HeaderMap) -> Response {
    let mut resp = cached(request, INDEX_HTML.as_bytes(), "text/html; charset=utf-8");
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

/// `GET /_ui/{name}`: an asset, or `404`.
async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, bytes, content_type)) => cached(&headers, bytes, content_type),
        None => Error::status(
            404,
            "resource_not_found_exception",
            format!("no UI asset [{name}]"),
        )
        .into_response(),
    }
}

/// `bytes` as `content_type`, revalidated on every use (`no-cache` with an `ETag`, so a
/// new binary's assets are never stale and an unchanged one costs a `304`); `private`,
/// since the server may require credentials.
fn cached(request: &HeaderMap, bytes: &'static [u8], content_type: &'static str) -> Response {
    let etag = format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(bytes));
    let fresh = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim() == etag || t.trim() == "*");
    let mut resp = if fresh {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(Body::from(bytes));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    let headers = resp.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-cache"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn only_html_accepting_requests_are_browsers() {
        assert!(wants_html(&accept(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        )));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&accept("application/json")));
        assert!(!wants_html(&accept(
            "application/vnd.elasticsearch+json; compatible-with=9"
        )));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn page_refers_only_to_served_assets() {
        for (attr, prefix) in [("src=\"", "/_ui/"), ("href=\"", "/_ui/")] {
            for part in INDEX_HTML.split(attr).skip(1) {
                let url = part.split('"').next().unwrap_or_default();
                let name = url.strip_prefix(prefix).unwrap_or_else(|| panic!("{url}"));
                assert!(ASSETS.iter().any(|(n, _, _)| *n == name), "{url}");
            }
        }
    }
}
