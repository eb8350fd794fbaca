//! Every route of the server, gathered from each protocol's module, the layer around
//! them and the fallback.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};

use crate::error::{Error, Result};
use crate::http::{self, Caller, json};
use crate::state::{AppState, St};

/// A router under construction that records the path of every route it serves, so
/// that the routes can be enumerated ([`route_paths`]): the security tests call every
/// route of the server as a foreign tenant, and a route added here is covered without
/// editing them.
#[derive(Default)]
pub struct Routes {
    router: Router<Arc<AppState>>,
    paths: Vec<String>,
    refusals: Vec<Refusal>,
}

/// How a protocol shapes a refused authentication for its own paths (a `401` its
/// clients read): `None` for a path that is not its own. The layer asks each
/// protocol's in turn ([`Routes::refusal`]) and answers in Elasticsearch's shape when
/// none claims the path, so the layer knows no protocol.
pub type Refusal = fn(&str, &axum::http::HeaderMap, &crate::error::Error) -> Option<Response>;

/// The refusal shapes of every protocol, for the layer.
#[derive(Default)]
pub struct Refusals(Vec<Refusal>);

impl Refusals {
    /// The first protocol's answer for `path`, if one claims it.
    pub fn shape(
        &self,
        path: &str,
        headers: &axum::http::HeaderMap,
        e: &crate::error::Error,
    ) -> Option<Response> {
        self.0.iter().find_map(|f| f(path, headers, e))
    }
}

impl Routes {
    /// No routes yet.
    pub fn new() -> Routes {
        Routes::default()
    }

    /// Adds a route (as [`Router::route`]) and records its path.
    #[must_use]
    pub fn route(
        mut self,
        path: &str,
        methods: axum::routing::MethodRouter<Arc<AppState>>,
    ) -> Routes {
        self.router = self.router.route(path, methods);
        self.paths.push(path.to_owned());
        self
    }

    /// Adds how these routes' protocol shapes a refused authentication.
    #[must_use]
    pub fn refusal(mut self, shape: Refusal) -> Routes {
        self.refusals.push(shape);
        self
    }

    /// Adds every route of `other`.
    #[must_use]
    pub fn merge(mut self, other: Routes) -> Routes {
        self.router = self.router.merge(other.router);
        self.paths.extend(other.paths);
        self.refusals.extend(other.refusals);
        self
    }
}

/// Every route of the server, from each protocol module.
fn all_routes() -> Routes {
    Routes::new()
        .route("/metrics", any(metrics_or_index))
        .route("/-/healthy", get(crate::selfmon::healthy))
        .route("/-/ready", get(crate::selfmon::healthy))
        .merge(crate::es::routes())
        .merge(crate::metrics::routes())
        .merge(crate::metrics::vm_api::routes())
        .merge(crate::prom::routes())
        .merge(crate::ui::routes())
        .merge(crate::lake::routes())
}

/// The path of every route the server serves, as written in the router (`{index}`,
/// `{id}`, `{name}` and `{pattern}` stand for path segments).
pub fn route_paths() -> Vec<String> {
    all_routes().paths
}

/// The router: every route of the Elasticsearch subset and the other protocols, the
/// layer around all of them, and a fallback answering `400` naming the unsupported
/// endpoint.
pub fn router(state: Arc<AppState>) -> Router {
    let routes = all_routes();
    let refusals = Arc::new(Refusals(routes.refusals));
    routes
        .router
        .fallback(fallback)
        .layer(axum::middleware::from_fn_with_state(
            (Arc::clone(&state), refusals),
            http::layer,
        ))
        .with_state(state)
}

async fn fallback(method: Method, uri: axum::http::Uri) -> Response {
    // The Prometheus API answers in its own shape, as Prometheus does for a path it
    // does not serve (a 404), so its clients read the error.
    let path = uri.path();
    if path.starts_with("/api/v1/") || path.starts_with("/prometheus/api/v1/") {
        return json(
            404,
            &serde_json::json!({
                "status": "error",
                "errorType": "not_found",
                "error": format!("no Prometheus API endpoint {path} (method {method})"),
            }),
        );
    }
    Error::bad(
        "illegal_argument_exception",
        format!(
            "no handler found for uri [{}] and method [{method}]: Tidemark does not support this endpoint",
            uri.path()
        ),
    )
    .into_response()
}

/// `/metrics`: `GET` is the server's own metrics (what every scraper asks for); the
/// other methods are the index API of an index named `metrics`, which stays a valid
/// name (its `GET` is answered by `GET /_cat/indices/metrics` or `/metrics/_mapping`).
async fn metrics_or_index(
    st: St,
    who: Caller,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    if method == Method::GET {
        crate::selfmon::metrics(st, who).await
    } else {
        crate::es::admin::index_admin(st, who, method, Path("metrics".to_owned()), headers, body)
            .await
    }
}
