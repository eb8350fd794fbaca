//! The `serve` command's arguments and entry point, shared by the `tidemark serve`
//! subcommand (the `tidemark-cli` package) and the `tidemark-server` binary, so that the
//! flags and their meaning live in one place.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::{Config, Server};

/// Serve Tidemark indices over Elasticsearch's HTTP API.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// The data directory (one sub-directory per index); overrides the config file.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The address to listen on (default 127.0.0.1:9200); overrides the config file.
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// A TOML config file for what the flags do not cover (users, API keys, limits).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Write the bound address to this file once listening.
    #[arg(long)]
    pub port_file: Option<PathBuf>,
    /// Write requests admitted at once before answering 429.
    #[arg(long)]
    pub write_queue: Option<usize>,
    /// The request body limit in bytes (http.max_content_length).
    #[arg(long)]
    pub max_content_length: Option<u64>,
    /// Bytes of request bodies being received at once before answering 429 (at least
    /// the body limit; 512 MiB).
    #[arg(long)]
    pub body_bytes_in_flight: Option<u64>,
    /// Distinct series one metrics write request may hold before answering 400
    /// (100,000).
    #[arg(long)]
    pub max_series_per_request: Option<usize>,
    /// Used share of the data filesystem, in percent, from which writes are refused
    /// until there is room (95; 100 turns it off).
    #[arg(long)]
    pub disk_flood_stage: Option<f64>,
    /// Series new to an index it takes per hour (0: no limit).
    #[arg(long)]
    pub max_new_series_per_hour: Option<u64>,
    /// How long the indices the metrics protocols create keep samples (`30d`; default:
    /// everything). They are then partitioned by time (`--partition-width`).
    #[arg(long)]
    pub retention: Option<String>,
    /// Partition width of those indices with `--retention` (`1d`).
    #[arg(long)]
    pub partition_width: Option<String>,
    /// Take the Graphite plaintext protocol over TCP on this address
    /// (`127.0.0.1:2003`; off by default; no authentication).
    #[arg(long)]
    pub graphite_listen: Option<std::net::SocketAddr>,
    /// The label-keyed index Graphite lines go to (default: the metrics index).
    #[arg(long)]
    pub graphite_index: Option<String>,
    /// Take OpenTSDB's telnet-style `put` lines over TCP on this address
    /// (`127.0.0.1:4242`; off by default; no authentication).
    #[arg(long)]
    pub opentsdb_listen: Option<std::net::SocketAddr>,
    /// The label-keyed index OpenTSDB points go to, over TCP and `POST /api/put`
    /// (default: the metrics index).
    #[arg(long)]
    pub opentsdb_index: Option<String>,
    /// The root of the Parquet lakes: `POST /<index>/_tidemark/export` writes only
    /// inside it (`<lake-dir>/<index>` by default).
    #[arg(long)]
    pub lake_dir: Option<PathBuf>,
    /// Export each time-partitioned index's newly sealed partitions to
    /// `<lake-dir>/<index>` in the background (needs --lake-dir).
    #[arg(long)]
    pub lake_auto: bool,
    /// Bytes of partitions read back from the lake kept in `<data>/lake-cache` for
    /// queries over time retention removed (default 4 GiB; 0: no reading back).
    #[arg(long)]
    pub lake_cache_bytes: Option<u64>,
}

impl ServeArgs {
    /// The configuration: the `--config` file (or the defaults), then the flags, checked.
    pub fn config(&self) -> Result<Config> {
        let mut config = match &self.config {
            Some(p) => Config::from_file(p)?,
            None => Config::default(),
        };
        if let Some(d) = &self.data {
            config.data = d.clone();
        } else if self.config.is_none() {
            anyhow::bail!("--data DIR is required (or a --config file that sets `data`)");
        }
        if let Some(l) = self.listen {
            config.listen = l;
        }
        if let Some(p) = &self.port_file {
            config.port_file = Some(p.clone());
        }
        if let Some(q) = self.write_queue {
            config.write_queue = q;
        }
        if let Some(m) = self.max_content_length {
            config.max_content_length = m;
        }
        if let Some(b) = self.body_bytes_in_flight {
            config.body_bytes_in_flight = b;
        }
        if let Some(n) = self.max_series_per_request {
            config.max_series_per_request = n;
        }
        if let Some(p) = self.disk_flood_stage {
            config.disk_flood_stage = p;
        }
        if let Some(n) = self.max_new_series_per_hour {
            config.max_new_series_per_hour = n;
        }
        if let Some(r) = &self.retention {
            config.metrics_retention = r.clone();
        }
        if let Some(w) = &self.partition_width {
            config.metrics_partition_width = w.clone();
        }
        if let Some(a) = self.graphite_listen {
            config.graphite_listen = Some(a);
        }
        if let Some(i) = &self.graphite_index {
            config.graphite_index = i.clone();
        }
        if let Some(a) = self.opentsdb_listen {
            config.opentsdb_listen = Some(a);
        }
        if let Some(i) = &self.opentsdb_index {
            config.opentsdb_index = i.clone();
        }
        if let Some(d) = &self.lake_dir {
            config.lake_dir = Some(d.clone());
        }
        if self.lake_auto {
            config.lake_auto = true;
        }
        if let Some(b) = self.lake_cache_bytes {
            config.lake_cache_bytes = b;
        }
        config.check()?;
        Ok(config)
    }
}

/// Starts the server these arguments describe and serves until SIGTERM or Ctrl-C: the
/// flags override the `--config` file, the configuration is checked, logs go to stderr
/// (filtered by `TIDEMARK_LOG`, `info` by default).
pub fn run(args: &ServeArgs) -> Result<()> {
    let config = args.config()?;
    init_logging("info");
    let rt = runtime(&config)?;
    rt.block_on(async move {
        let server = Server::bind(config).await?;
        tracing::info!(addr = %server.local_addr(), "listening");
        server.run(shutdown_signal()).await?;
        Ok(())
    })
}

/// Logs to stderr, filtered by `TIDEMARK_LOG` (`default` when it is unset, e.g. `info`);
/// a second call is a no-op.
pub fn init_logging(default: &str) {
    let _already_set = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TIDEMARK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// The multi-threaded runtime the server runs on (`threads` workers, or one a core).
pub fn runtime(config: &Config) -> Result<tokio::runtime::Runtime> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if config.threads > 0 {
        rt.worker_threads(config.threads);
    }
    rt.enable_all().build().context("starting the runtime")
}

/// Resolves at SIGTERM or Ctrl-C: the shutdown future [`Server::run`] takes.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
    tracing::info!("signal received");
}
