//! Server configuration: defaults, a TOML file for what flags do not cover, and checks.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};

/// The default address: loopback only, Elasticsearch's port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9200";
/// The default request body limit, Elasticsearch's `http.max_content_length` (100 MB).
pub const DEFAULT_MAX_CONTENT_LENGTH: u64 = 100 * 1024 * 1024;

/// The default budget of request-body bytes being received at once (512 MiB).
pub const DEFAULT_BODY_BYTES_IN_FLIGHT: u64 = 512 * 1024 * 1024;

/// Default `max_series_per_request`: 100,000 distinct series in one metrics write, 12x
/// the largest batch a real sender makes (the OpenTelemetry Collector's batch processor
/// sends 8,192 points, Prometheus 2,000 samples per request).
pub const DEFAULT_MAX_SERIES_PER_REQUEST: usize = 100_000;

/// Everything the server needs to run. Built from [`Config::default`], then a TOML file
/// ([`Config::from_toml`]), then command-line flags.
///
/// ```
/// let config = tidemark_server::Config::from_toml(r#"
///     data = "/var/lib/tidemark"
///     listen = "127.0.0.1:9201"
///     [[users]]
///     name = "tenant-a"
///     password = "secret"
///     indices = ["metrics-a-*"]
/// "#)?;
/// assert_eq!(config.listen.port(), 9201);
/// assert_eq!(config.max_content_length, 100 * 1024 * 1024);
/// # Ok::<(), tidemark_server::Error>(())
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The data directory: one sub-directory per index under `indices/`, the index
    /// templates in `templates.json`.
    pub data: PathBuf,
    /// The address to listen on (`127.0.0.1:9200`); port 0 picks a free port.
    pub listen: SocketAddr,
    /// `version.number` answered on `GET /` (clients refuse servers older than
    /// themselves).
    pub version: String,
    /// `cluster_name` answered on `GET /`.
    pub cluster_name: String,
    /// The largest request body, compressed or not, in bytes (`413` beyond).
    pub max_content_length: u64,
    /// Write requests admitted at once (parsing, queued or being written; a request is
    /// admitted once its body is read); one more is refused with `429
    /// es_rejected_execution_exception`.
    pub write_queue: usize,
    /// Bytes of request bodies being received at once, over all connections (at least
    /// `max_content_length`; 512 MiB). A body takes its bytes as they arrive, so a slow
    /// sender holds only what it sent; a body that finds the budget spent is refused with
    /// `429`. With `write_queue`, this bounds the memory of requests in flight.
    pub body_bytes_in_flight: u64,
    /// Distinct series one remote-write, line-protocol or OTLP request may write
    /// (100,000). A request with more is refused whole with `400` naming the limit, as
    /// it is read, before its points are built: each new series costs the engine a few
    /// KiB, so this bounds what one request can take (docs/results/memory.md).
    pub max_series_per_request: usize,
    /// Most labels one series may carry, `__name__` included (64); more is `400`
    /// naming the limit (Mimir's `max_label_names_per_series`, 30 there).
    pub max_labels_per_series: usize,
    /// Series new to an index (first seen since it opened) it takes per clock hour; the
    /// samples of further new series are refused naming the limit while known series go
    /// on (VictoriaMetrics' `-storage.maxHourlySeries`). 0, the default, is no limit.
    pub max_new_series_per_hour: u64,
    /// How long the indices the metrics protocols create (remote write, line protocol,
    /// OTLP) keep samples, as a duration (`30d`); empty, the default, keeps everything
    /// (VictoriaMetrics' `-retentionPeriod`). With it those indices are created
    /// partitioned by time, each partition dropped whole once past the retention, and a
    /// sample older than the retention is refused naming the rule. Indices created by
    /// `PUT /<index>` take their own `settings.index.tidemark.partitions`.
    pub metrics_retention: String,
    /// The partition width of those indices when `metrics_retention` is set (`1d`;
    /// 1 h to 7 d).
    pub metrics_partition_width: String,
    /// Longest label name in bytes (256); longer is `400` naming the limit.
    pub max_label_name_bytes: usize,
    /// Longest label value in bytes (1,024, the most a dimension holds; at most that).
    /// Longer is `400` naming the limit: VictoriaMetrics truncates at
    /// `-maxLabelValueLen`, Tidemark refuses, as a cut value would be another series.
    pub max_label_value_bytes: usize,
    /// Used share of a data filesystem, in percent, from which writes to its indices
    /// are refused (`429`/`503` with `Retry-After`) until there is room again
    /// (Elasticsearch's flood stage, 95; 100 turns it off).
    pub disk_flood_stage: f64,
    /// The most free bytes `disk_flood_stage` may require (1 GiB), like Elasticsearch's
    /// `flood_stage.max_headroom`.
    pub disk_flood_stage_max_headroom: u64,
    /// Seconds a client may take to send a request's headers or body (`408` beyond), and
    /// that an idle keep-alive connection stays open.
    pub client_timeout_secs: u64,
    /// Seconds SIGTERM waits for requests in flight before closing the indices anyway.
    pub shutdown_timeout_secs: u64,
    /// Tokio worker threads; 0 means one per core.
    pub threads: usize,
    /// A file the bound address is written to once listening (for scripts and tests).
    pub port_file: Option<PathBuf>,
    /// Basic-authentication users. With no users and no API keys, no authentication.
    pub users: Vec<User>,
    /// API keys (`Authorization: ApiKey base64(id:key)`).
    pub api_keys: Vec<ApiKey>,
    /// The label-keyed index that Prometheus remote write and OTLP write to when the
    /// request names none (`?index=` or the `X-Tidemark-Index` header); created on
    /// first write.
    pub metrics_index: String,
    /// What a metrics sample whose (series, timestamp) is already stored does:
    /// `"create"` (the first value is kept, the sample counted as a duplicate) or
    /// `"index"` (the new value replaces it).
    pub metrics_op: String,
    /// Samples more than this many seconds ahead of the server's clock are refused
    /// (`400`): a far-future timestamp is a sender's bug, and would sit in the buffer.
    pub max_future_secs: u64,
    /// Where to take the Graphite plaintext protocol over TCP (`127.0.0.1:2003`); unset,
    /// the default, takes none. The protocol has no authentication: whoever reaches the
    /// port writes to `graphite_index` (and only there), so bind it where only senders
    /// reach it.
    pub graphite_listen: Option<SocketAddr>,
    /// The label-keyed index Graphite lines go to; empty, the default, is
    /// `metrics_index`.
    pub graphite_index: String,
    /// Where to take OpenTSDB's telnet-style `put` lines over TCP (`127.0.0.1:4242`);
    /// unset, the default, takes none. No authentication, as `graphite_listen`.
    pub opentsdb_listen: Option<SocketAddr>,
    /// The label-keyed index OpenTSDB points go to (the TCP listener, and `POST
    /// /api/put` when the request names none); empty, the default, is `metrics_index`.
    pub opentsdb_index: String,
    /// Longest line the TCP line protocols take, in bytes (64 KiB); a longer one is
    /// skipped to its end and counted as a bad line.
    pub tcp_max_line_bytes: usize,
    /// Connections the TCP line protocols take at once, each listener (1,024); one more
    /// is closed at once and counted.
    pub tcp_max_connections: usize,
    /// Milliseconds the TCP line protocols hold received lines before writing them (1,000):
    /// a connection's lines are written, group-committed and fsynced, once this long
    /// after the first of them arrived, or once 256 KiB of lines are waiting, or when
    /// the connection ends.
    pub tcp_flush_interval_ms: u64,
    /// Seconds a TCP line-protocol connection may go without completing a line before
    /// it is closed (300; its complete lines are written first): an idle or trickling
    /// connection does not hold one of the `tcp_max_connections` slots for ever.
    /// Senders that keep a connection open (collectd, carbon relays) reconnect on their
    /// next write.
    pub tcp_idle_timeout_secs: u64,
    /// The root of the Parquet lakes (`--lake-dir`): `POST /<index>/_tidemark/export`
    /// writes only inside it (`lake_dir/<index>` by default), and `lake_auto` exports to
    /// `lake_dir/<index>`. Unset, the default, the endpoint answers `400`.
    pub lake_dir: Option<PathBuf>,
    /// Export each time-partitioned index's newly sealed partitions to `lake_dir/<index>`
    /// in the background (`--lake-auto`; needs `lake_dir`; off by default).
    pub lake_auto: bool,
    /// Seconds between two passes of `lake_auto` over the indices (10).
    pub lake_interval_secs: u64,
    /// Bytes of partitions read back from `lake_dir/<index>` kept in the data
    /// directory's `lake-cache/` (`--lake-cache-bytes`; 4 GiB): a search, aggregation or
    /// PromQL query over time retention removed restores the lake's copy of those
    /// partitions there once, whole partitions least recently read going first when
    /// the budget is passed. 0 turns reading back off.
    pub lake_cache_bytes: u64,
}

/// A user for basic authentication, allowed the indices matching `indices`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The password (the config file should be readable by the server's user only).
    pub password: String,
    /// Index name patterns (`*` matches any run of characters): `["metrics-a-*"]`.
    pub indices: Vec<String>,
}

/// An API key, allowed the indices matching `indices`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// The key id (the part before `:` in the encoded credential).
    pub id: String,
    /// The secret.
    pub key: String,
    /// Index name patterns.
    pub indices: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data: PathBuf::from("data"),
            listen: SocketAddr::from(([127, 0, 0, 1], 9200)),
            version: "9.1.0".to_owned(),
            cluster_name: "tidemark".to_owned(),
            max_content_length: DEFAULT_MAX_CONTENT_LENGTH,
            write_queue: 64,
            body_bytes_in_flight: DEFAULT_BODY_BYTES_IN_FLIGHT,
            max_series_per_request: DEFAULT_MAX_SERIES_PER_REQUEST,
            max_labels_per_series: 64,
            max_new_series_per_hour: 0,
            metrics_retention: String::new(),
            metrics_partition_width: "1d".to_owned(),
            max_label_name_bytes: 256,
            max_label_value_bytes: 1024,
            disk_flood_stage: crate::disk::FloodStage::default().used_percent,
            disk_flood_stage_max_headroom: crate::disk::FloodStage::default().max_headroom,
            client_timeout_secs: 60,
            shutdown_timeout_secs: 30,
            threads: 0,
            port_file: None,
            users: Vec::new(),
            api_keys: Vec::new(),
            metrics_index: "metrics".to_owned(),
            metrics_op: "create".to_owned(),
            max_future_secs: 3600,
            graphite_listen: None,
            graphite_index: String::new(),
            opentsdb_listen: None,
            opentsdb_index: String::new(),
            tcp_max_line_bytes: 64 * 1024,
            tcp_max_connections: 1024,
            tcp_flush_interval_ms: 1000,
            tcp_idle_timeout_secs: 300,
            lake_dir: None,
            lake_auto: false,
            lake_interval_secs: 10,
            lake_cache_bytes: 4 << 30,
        }
    }
}

impl Config {
    /// Parses a TOML configuration; unset keys keep their defaults.
    ///
    /// # Errors
    /// [`Error::Config`] for malformed TOML, an unknown key or an invalid value.
    pub fn from_toml(text: &str) -> Result<Config> {
        let config: Config =
            toml::from_str(text).map_err(|e| Error::config("config file", e.to_string()))?;
        config.check()?;
        Ok(config)
    }

    /// Reads [`from_toml`](Self::from_toml) from a file.
    ///
    /// # Errors
    /// [`Error::Io`]; as [`from_toml`](Self::from_toml).
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        Config::from_toml(&text).map_err(|e| match e {
            Error::Config { field, reason } => Error::Config {
                field: format!("{} ({field})", path.display()),
                reason,
            },
            other => other,
        })
    }

    /// The free-space watermark of `disk_flood_stage` and its headroom.
    pub fn flood_stage(&self) -> crate::disk::FloodStage {
        crate::disk::FloodStage {
            used_percent: self.disk_flood_stage,
            max_headroom: self.disk_flood_stage_max_headroom,
        }
    }

    /// The budget of body bytes being received at once: `body_bytes_in_flight`, raised to
    /// `max_content_length` so that one largest body always fits (in a `usize`, within
    /// what a semaphore holds).
    pub fn body_budget(&self) -> usize {
        let bytes = self.body_bytes_in_flight.max(self.max_content_length);
        usize::try_from(bytes)
            .unwrap_or(usize::MAX)
            .min(tokio::sync::Semaphore::MAX_PERMITS)
    }

    /// The partitions of the indices the metrics protocols create: `None` without
    /// `metrics_retention`.
    ///
    /// # Errors
    /// [`Error::Config`] naming `metrics_retention` or `metrics_partition_width`.
    pub fn metrics_partitions(&self) -> Result<Option<tidemark::dedup::PartitionConfig>> {
        if self.metrics_retention.is_empty() {
            return Ok(None);
        }
        let retention = tidemark::parse_interval(&self.metrics_retention)
            .map_err(|e| Error::config("metrics_retention", e.to_string()))?;
        let width = tidemark::parse_interval(&self.metrics_partition_width)
            .map_err(|e| Error::config("metrics_partition_width", e.to_string()))?;
        let p = tidemark::dedup::PartitionConfig::new()
            .with_width_ms(width)
            .with_retention_ms(Some(retention));
        p.check().map_err(|e| {
            Error::config("metrics_retention / metrics_partition_width", e.to_string())
        })?;
        Ok(Some(p))
    }

    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`Error::Config`] naming the setting.
    pub fn check(&self) -> Result<()> {
        self.metrics_partitions()?;
        if self.max_content_length == 0 {
            return Err(Error::config("max_content_length", "must be positive"));
        }
        if self.write_queue == 0 {
            return Err(Error::config("write_queue", "must be positive"));
        }
        if self.max_series_per_request == 0 {
            return Err(Error::config("max_series_per_request", "must be positive"));
        }
        if !(0.0..=100.0).contains(&self.disk_flood_stage) {
            return Err(Error::config(
                "disk_flood_stage",
                "must be a percentage from 0 to 100",
            ));
        }
        if self.client_timeout_secs == 0 {
            return Err(Error::config("client_timeout_secs", "must be positive"));
        }
        if self.version.split('.').count() < 3 {
            return Err(Error::config(
                "version",
                format!("expected MAJOR.MINOR.PATCH, found {:?}", self.version),
            ));
        }
        if !matches!(self.metrics_op.as_str(), "create" | "index") {
            return Err(Error::config(
                "metrics_op",
                format!(
                    "expected \"create\" or \"index\", found {:?}",
                    self.metrics_op
                ),
            ));
        }
        if self.metrics_index.is_empty() {
            return Err(Error::config("metrics_index", "must be non-empty"));
        }
        for (key, index) in [
            ("graphite_index", &self.graphite_index),
            ("opentsdb_index", &self.opentsdb_index),
        ] {
            if !index.is_empty() {
                crate::es::protocol::check_index_name(index)
                    .map_err(|e| Error::config(key, e.reason()))?;
            }
        }
        if self.lake_auto && self.lake_dir.is_none() {
            return Err(Error::config(
                "lake_auto",
                "needs lake_dir (--lake-dir DIR)",
            ));
        }
        if self.lake_interval_secs == 0 {
            return Err(Error::config("lake_interval_secs", "must be positive"));
        }
        if self.tcp_max_line_bytes < 64 {
            return Err(Error::config("tcp_max_line_bytes", "must be at least 64"));
        }
        if self.tcp_max_connections == 0 {
            return Err(Error::config("tcp_max_connections", "must be positive"));
        }
        if self.tcp_idle_timeout_secs == 0 {
            return Err(Error::config("tcp_idle_timeout_secs", "must be positive"));
        }
        if !(1..=60_000).contains(&self.tcp_flush_interval_ms) {
            return Err(Error::config(
                "tcp_flush_interval_ms",
                "must be from 1 to 60,000",
            ));
        }
        for u in &self.users {
            if u.name.is_empty() || u.name.contains(':') {
                return Err(Error::config(
                    "users.name",
                    "must be non-empty, without ':'",
                ));
            }
        }
        for k in &self.api_keys {
            if k.id.is_empty() || k.id.contains(':') {
                return Err(Error::config(
                    "api_keys.id",
                    "must be non-empty, without ':'",
                ));
            }
        }
        Ok(())
    }

    /// Whether requests must authenticate (some user or API key is configured).
    pub fn security_enabled(&self) -> bool {
        !self.users.is_empty() || !self.api_keys.is_empty()
    }

    /// [`client_timeout_secs`](Self::client_timeout_secs) as a duration.
    pub fn client_timeout(&self) -> Duration {
        Duration::from_secs(self.client_timeout_secs)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn metrics_retention_is_checked_at_startup() {
        let with = |retention: &str, width: &str| Config {
            metrics_retention: retention.to_owned(),
            metrics_partition_width: width.to_owned(),
            ..Config::default()
        };
        assert!(with("", "1d").metrics_partitions().unwrap().is_none());
        let p = with("30d", "1d").metrics_partitions().unwrap().unwrap();
        assert_eq!(p.retention_ms(), Some(30 * 86_400_000));
        for (r, w) in [("5x", "1d"), ("30d", "10d"), ("30d", "1m")] {
            let e = with(r, w).check().unwrap_err().to_string();
            assert!(e.contains("metrics_"), "{r} {w}: {e}");
        }
    }

    use super::*;

    #[test]
    fn defaults_bind_loopback_9200() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert!(!c.security_enabled());
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        assert!(Config::from_toml("lisen = \"127.0.0.1:1\"").is_err());
        assert!(Config::from_toml("write_queue = 0").is_err());
        assert!(Config::from_toml("version = \"9\"").is_err());
        assert!(Config::from_toml("listen = \"nowhere\"").is_err());
    }

    #[test]
    fn line_listeners_are_off_unless_configured() {
        let c = Config::from_toml("").unwrap();
        assert_eq!((c.graphite_listen, c.opentsdb_listen), (None, None));
        let c = Config::from_toml(
            "graphite_listen = \"127.0.0.1:2003\"\nopentsdb_listen = \"127.0.0.1:4242\"\ngraphite_index = \"carbon\"\n",
        )
        .unwrap();
        assert_eq!(c.graphite_listen.map(|a| a.port()), Some(2003));
        assert_eq!(c.opentsdb_listen.map(|a| a.port()), Some(4242));
        assert_eq!(c.graphite_index, "carbon");
        for bad in [
            "graphite_index = \"Bad*\"",
            "tcp_max_line_bytes = 1",
            "tcp_max_connections = 0",
            "tcp_flush_interval_ms = 0",
            "tcp_idle_timeout_secs = 0",
        ] {
            assert!(Config::from_toml(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_users_and_keys() {
        let c = Config::from_toml("[[api_keys]]\nid = \"k1\"\nkey = \"s\"\nindices = [\"a-*\"]\n")
            .unwrap();
        assert!(c.security_enabled());
        assert_eq!(c.api_keys[0].indices, vec!["a-*".to_owned()]);
    }
}
