//! What every handler shares: the server's state, the blocking-work runner and the
//! write admission.

use std::sync::Arc;

use axum::extract::State;
use tokio::sync::Semaphore;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::registry::Registry;

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The configuration.
    pub config: Config,
    /// The indices and templates.
    pub registry: Registry,
    /// The cluster id answered on `GET /` (kept in the data directory).
    pub cluster_uuid: String,
    /// Admission of write requests: one permit per request being parsed, queued or
    /// written (taken once its body is read); none left is a `429`.
    pub write_permits: Arc<Semaphore>,
    /// The bytes of request bodies being received (one permit a byte, see
    /// [`Config::body_bytes_in_flight`]).
    pub body_bytes: Arc<Semaphore>,
    /// Label-keyed series already resolved, shared by the metrics protocols' requests.
    pub(crate) series_cache: crate::metrics::series_cache::SeriesCache,
    /// Line protocol's resolved series, one entry per measurement and tag set.
    pub(crate) line_cache: crate::metrics::series_cache::LineCache,
    /// Requests answered, by route template, for `GET /metrics`.
    pub(crate) http_stats: crate::selfmon::HttpStats,
    /// What the Graphite and OpenTSDB TCP listeners did, for `GET /metrics`.
    pub(crate) tcp_stats: crate::metrics::tcp::TcpStats,
    /// What the lake exports did, for `GET /metrics`.
    pub(crate) lake_stats: crate::lake::LakeStats,
    /// Copies of lake partitions that queries over removed time read (`None`: no
    /// `lake_dir`, or `lake_cache_bytes` 0).
    pub(crate) lake_cache: Option<crate::lake::LakeCache>,
    /// Metric metadata from remote write, for `GET /api/v1/metadata`.
    pub(crate) prom_metadata: crate::prom::metadata::MetadataStore,
    /// Open points in time and scrolls.
    pub(crate) pits: crate::es::pit::Pits,
}

/// The state extractor every handler takes.
pub(crate) type St = State<Arc<AppState>>;

/// Runs blocking work (disk, parsing) off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::status(500, "exception", format!("worker failed: {e}")))?
}

pub(crate) fn admit(st: &AppState) -> Result<tokio::sync::OwnedSemaphorePermit> {
    Arc::clone(&st.write_permits).try_acquire_owned().map_err(|_| {
        Error::status(
            429,
            "es_rejected_execution_exception",
            format!(
                "rejected execution of coordinating operation: the write queue is full ({} requests in flight)",
                st.config.write_queue
            ),
        )
    })
}

/// Milliseconds since the epoch, now: the server's one clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
