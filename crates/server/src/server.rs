//! The listener: accepts connections, serves HTTP/1.1 with header and body timeouts,
//! and shuts down gracefully (stop accepting, finish requests in flight, close the
//! indices).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::metrics::tcp::{LineListener, Protocol};
use crate::registry::Registry;
use crate::routes::router;
use crate::state::AppState;

/// The file in the data directory holding the cluster id.
const CLUSTER_UUID_FILE: &str = "cluster_uuid";

/// A bound server, ready to [`run`](Server::run).
///
/// ```no_run
/// # async fn demo() -> tidemark_server::Result<()> {
/// let config = tidemark_server::Config {
///     data: "data".into(),
///     ..tidemark_server::Config::default()
/// };
/// let server = tidemark_server::Server::bind(config).await?;
/// println!("listening on {}", server.local_addr());
/// server.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Server {
    state: Arc<AppState>,
    listener: TcpListener,
    addr: SocketAddr,
    /// The line protocols' listeners (`graphite_listen`, `opentsdb_listen`).
    lines: Vec<LineListener>,
}

impl Server {
    /// Opens the data directory (every index in it) and binds the listeners; writes the
    /// bound address to `port_file` when configured, and those of the Graphite and
    /// OpenTSDB listeners, when configured, to `<port_file>.graphite` and
    /// `<port_file>.opentsdb` before it.
    ///
    /// # Errors
    /// [`Error::Config`], I/O errors on the data directory, an index that does not open,
    /// [`Error::Net`] when the address cannot be bound.
    pub async fn bind(mut config: Config) -> Result<Server> {
        config.check()?;
        std::fs::create_dir_all(&config.data).map_err(Error::io(&config.data))?;
        if let Some(lake) = &config.lake_dir {
            std::fs::create_dir_all(lake).map_err(Error::io(lake))?;
            let real = lake.canonicalize().map_err(Error::io(lake))?;
            config.lake_dir = Some(real);
        }
        let data = config.data.clone();
        let flood = config.flood_stage();
        let per_hour =
            (config.max_new_series_per_hour > 0).then_some(config.max_new_series_per_hour);
        let label_partitions = config.metrics_partitions()?;
        let (registry, cluster_uuid) = tokio::task::spawn_blocking(move || {
            let uuid = cluster_uuid(&data)?;
            // Points in time do not outlive the process: copies a killed server left go.
            let pits = data.join(crate::es::pit::PIT_DIR);
            if pits.exists() {
                std::fs::remove_dir_all(&pits).map_err(Error::io(&pits))?;
            }
            let mut registry = Registry::open_with(&data, flood, per_hour)?;
            registry.set_label_partitions(label_partitions);
            Ok::<_, Error>((registry, uuid))
        })
        .await
        .map_err(|e| Error::status(500, "exception", e.to_string()))??;
        let listener = TcpListener::bind(config.listen).await.map_err(Error::Net)?;
        let addr = listener.local_addr().map_err(Error::Net)?;
        let mut lines = Vec::new();
        for (protocol, at, index) in [
            (
                Protocol::Graphite,
                config.graphite_listen,
                &config.graphite_index,
            ),
            (
                Protocol::OpenTsdb,
                config.opentsdb_listen,
                &config.opentsdb_index,
            ),
        ] {
            let Some(at) = at else { continue };
            let index = if index.is_empty() {
                config.metrics_index.clone()
            } else {
                index.clone()
            };
            let l = LineListener::bind(protocol, at, index).await?;
            if let Some(p) = &config.port_file {
                let mut name = p.clone().into_os_string();
                name.push(format!(".{}", protocol.name()));
                let path = std::path::PathBuf::from(name);
                std::fs::write(&path, format!("{}\n", l.local_addr())).map_err(Error::io(&path))?;
            }
            lines.push(l);
        }
        if let Some(p) = &config.port_file {
            std::fs::write(p, format!("{addr}\n")).map_err(Error::io(p))?;
        }
        let state = Arc::new(AppState {
            write_permits: Arc::new(Semaphore::new(config.write_queue)),
            body_bytes: Arc::new(Semaphore::new(config.body_budget())),
            lake_cache: crate::lake::LakeCache::new(&config),
            config,
            registry,
            cluster_uuid,
            series_cache: Default::default(),
            line_cache: Default::default(),
            http_stats: Default::default(),
            tcp_stats: Default::default(),
            lake_stats: Default::default(),
            prom_metadata: Default::default(),
            pits: Default::default(),
        });
        Ok(Server {
            state,
            listener,
            addr,
            lines,
        })
    }

    /// The state every handler shares (the registry of indices, the configuration), for
    /// work that runs beside the server in the same process: a cluster's shard owner
    /// writes to the registry through it.
    pub fn state(&self) -> Arc<AppState> {
        Arc::clone(&self.state)
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound address of the Graphite listener, when configured.
    pub fn graphite_addr(&self) -> Option<SocketAddr> {
        self.line_addr(Protocol::Graphite)
    }

    /// The bound address of the OpenTSDB listener, when configured.
    pub fn opentsdb_addr(&self) -> Option<SocketAddr> {
        self.line_addr(Protocol::OpenTsdb)
    }

    fn line_addr(&self, protocol: Protocol) -> Option<SocketAddr> {
        self.lines
            .iter()
            .find(|l| l.protocol() == protocol)
            .map(LineListener::local_addr)
    }

    /// Serves until `shutdown` completes, then stops accepting, waits for the requests
    /// in flight and for the line protocols' connections to write what they read (up to
    /// `shutdown_timeout_secs`) and closes every index (queued writes applied, counters
    /// saved, log synced).
    ///
    /// # Errors
    /// None in practice: accept errors are logged and retried.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let Server {
            state,
            listener,
            lines,
            ..
        } = self;
        let (stop_lines, stopping) = tokio::sync::watch::channel(false);
        let mut line_tasks = tokio::task::JoinSet::new();
        for l in lines {
            line_tasks.spawn(l.run(Arc::clone(&state), stopping.clone()));
        }
        let lake_auto = state.config.lake_auto.then(|| {
            tokio::spawn(crate::lake::auto_export(
                Arc::clone(&state),
                stopping.clone(),
            ))
        });
        let app = router(Arc::clone(&state));
        let graceful = GracefulShutdown::new();
        let timeout = state.config.client_timeout();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // Out of file descriptors and the like: wait, do not spin.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let service = TowerToHyperService::new(app.clone());
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(timeout)
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service);
                    let conn = graceful.watch(conn);
                    tokio::spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                    });
                }
                () = &mut shutdown => break,
            }
        }
        drop(listener);
        let _ = stop_lines.send(true);
        tracing::info!("shutting down: finishing requests in flight");
        let wait = Duration::from_secs(state.config.shutdown_timeout_secs);
        let lines_done = async { while line_tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(wait, async {
            tokio::join!(graceful.shutdown(), lines_done)
        })
        .await
        .is_err()
        {
            tracing::warn!("requests still in flight after the shutdown timeout");
        }
        if let Some(task) = lake_auto {
            // An export under way finishes (it holds an index's read lock) before the
            // indices close.
            if tokio::time::timeout(wait, task).await.is_err() {
                tracing::warn!(
                    "the automatic lake export is still running after the shutdown timeout"
                );
            }
        }
        let st = Arc::clone(&state);
        let _ = tokio::task::spawn_blocking(move || {
            st.pits.free_all(st.registry.root());
            st.registry.close_all();
        })
        .await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// The cluster id of a data directory, made on first start.
fn cluster_uuid(data: &std::path::Path) -> Result<String> {
    let path = data.join(CLUSTER_UUID_FILE);
    if let Ok(text) = std::fs::read_to_string(&path) {
        let t = text.trim();
        if !t.is_empty() {
            return Ok(t.to_owned());
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = nanos ^ (u128::from(std::process::id()) << 64);
    let mut x = (seed as u64) ^ ((seed >> 64) as u64) ^ 0x9e37_79b9_7f4a_7c15;
    let mut out = String::new();
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for _ in 0..22 {
        // xorshift64*: an id, not a secret.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        out.push(char::from(ALPHABET[(v >> 58) as usize & 63]));
    }
    std::fs::write(&path, format!("{out}\n")).map_err(Error::io(&path))?;
    Ok(out)
}
