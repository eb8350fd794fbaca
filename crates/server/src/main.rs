//! `tidemark-server`: the Elasticsearch-compatible HTTP server (also started as
//! `tidemark serve`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use tidemark_server::{Config, Server};

// The parsed documents make many small allocations (see docs/results/ingest.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Serve Tidemark indices over Elasticsearch's HTTP API.
#[derive(Debug, Parser)]
#[command(name = "tidemark-server", version, about)]
struct Cli {
    /// The data directory (one sub-directory per index); overrides the config file.
    #[arg(long)]
    data: Option<PathBuf>,
    /// The address to listen on (default 127.0.0.1:9200); overrides the config file.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// A TOML config file for what the flags do not cover (users, API keys, limits).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Write the bound address to this file once listening.
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// Write requests admitted at once before answering 429.
    #[arg(long)]
    write_queue: Option<usize>,
    /// The request body limit in bytes (http.max_content_length).
    #[arg(long)]
    max_content_length: Option<u64>,
    /// Bytes of request bodies being received at once before answering 429 (at least
    /// the body limit; 512 MiB).
    #[arg(long)]
    body_bytes_in_flight: Option<u64>,
    /// Distinct series one metrics write request may hold before answering 400
    /// (100,000).
    #[arg(long)]
    max_series_per_request: Option<usize>,
    /// Used share of the data filesystem, in percent, from which writes are refused
    /// until there is room (95; 100 turns it off).
    #[arg(long)]
    disk_flood_stage: Option<f64>,
    /// Series new to an index it takes per hour (0: no limit).
    #[arg(long)]
    max_new_series_per_hour: Option<u64>,
    /// How long the indices the metrics protocols create keep samples (`30d`; default:
    /// everything). They are then partitioned by time (`--partition-width`).
    #[arg(long)]
    retention: Option<String>,
    /// Partition width of those indices with `--retention` (`1d`).
    #[arg(long)]
    partition_width: Option<String>,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemark-server: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    let mut config = match &cli.config {
        Some(p) => Config::from_file(p)?,
        None => Config::default(),
    };
    if let Some(d) = cli.data {
        config.data = d;
    } else if cli.config.is_none() {
        anyhow::bail!("--data DIR is required (or a --config file that sets `data`)");
    }
    if let Some(l) = cli.listen {
        config.listen = l;
    }
    if let Some(p) = cli.port_file {
        config.port_file = Some(p);
    }
    if let Some(q) = cli.write_queue {
        config.write_queue = q;
    }
    if let Some(m) = cli.max_content_length {
        config.max_content_length = m;
    }
    if let Some(b) = cli.body_bytes_in_flight {
        config.body_bytes_in_flight = b;
    }
    if let Some(n) = cli.max_series_per_request {
        config.max_series_per_request = n;
    }
    if let Some(p) = cli.disk_flood_stage {
        config.disk_flood_stage = p;
    }
    if let Some(n) = cli.max_new_series_per_hour {
        config.max_new_series_per_hour = n;
    }
    if let Some(r) = cli.retention {
        config.metrics_retention = r;
    }
    if let Some(w) = cli.partition_width {
        config.metrics_partition_width = w;
    }
    config.check()?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TIDEMARK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if config.threads > 0 {
        rt.worker_threads(config.threads);
    }
    let rt = rt.enable_all().build().context("starting the runtime")?;
    rt.block_on(async move {
        let server = Server::bind(config).await?;
        tracing::info!(addr = %server.local_addr(), "listening");
        server.run(shutdown_signal()).await?;
        Ok(())
    })
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
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
