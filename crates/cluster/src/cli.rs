//! The `tidemark router` command and `tidemark serve --cluster` (the owner mode), parsed
//! and run here so that the `tidemark` binary only names them.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::config::ClusterConfig;

/// Route writes to the shards' JetStream subjects (a stateless router).
#[derive(Debug, Clone, clap::Args)]
pub struct RouterArgs {
    /// The cluster file (TOML: `nats`, `etcd`, `listen`, ...; docs/cluster.md).
    #[arg(long)]
    pub config: PathBuf,
    /// The address to listen on; overrides the file's `listen`.
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// Write the bound address to this file once listening.
    #[arg(long)]
    pub port_file: Option<PathBuf>,
}

/// `tidemark serve`, and with `--cluster FILE` a shard owner as well.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterServeArgs {
    /// The server's own flags.
    #[command(flatten)]
    pub serve: tidemark_server::cli::ServeArgs,
    /// Own the shards this cluster file names (`node`, `shards`, `nats`, `etcd`): pull
    /// their JetStream subjects into this server's store.
    #[arg(long)]
    pub cluster: Option<PathBuf>,
}

/// Runs the router until SIGTERM or Ctrl-C.
///
/// # Errors
/// An invalid file, NATS not reachable for the streams, an address not bound.
pub fn run_router(args: &RouterArgs) -> Result<()> {
    let mut config = ClusterConfig::from_file(&args.config)?;
    if let Some(l) = args.listen {
        config.listen = l;
    }
    if let Some(p) = &args.port_file {
        config.port_file = Some(p.clone());
    }
    tidemark_server::cli::init_logging("info");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let router = crate::router::bind(config).await?;
        tracing::info!(addr = %router.local_addr()?, "router listening");
        router.run(tidemark_server::cli::shutdown_signal()).await?;
        Ok(())
    })
}

/// Runs `tidemark serve`, with the shard owner beside it when `--cluster` is given; on
/// SIGTERM the owner stops pulling before the server closes its indices.
///
/// # Errors
/// As `tidemark serve`; an invalid cluster file; etcd or NATS not reachable at start.
pub fn run_serve(args: &ClusterServeArgs) -> Result<()> {
    let Some(path) = &args.cluster else {
        return tidemark_server::cli::run(&args.serve);
    };
    let cluster = ClusterConfig::from_file(path)?;
    let config = args.serve.config()?;
    tidemark_server::cli::init_logging("info");
    let rt = tidemark_server::cli::runtime(&config)?;
    rt.block_on(async move {
        let server = tidemark_server::Server::bind(config).await?;
        tracing::info!(addr = %server.local_addr(), "listening");
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let url = cluster
            .advertise
            .clone()
            .unwrap_or_else(|| format!("http://{}", server.local_addr()));
        crate::owner::run(cluster, server.state(), url, stopped).await?;
        server
            .run(async move {
                tidemark_server::cli::shutdown_signal().await;
                let _ = stop.send(true);
                // The shard tasks see the stop between two batches.
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            })
            .await?;
        Ok(())
    })
}
