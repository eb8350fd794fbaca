//! The TCP server: start-up (loading the snapshot and the log), connections with
//! pipelining, background tasks (expiry, log fsync, save points) and shutdown.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::cmd::{Session, execute};
use crate::config::{AppendFsync, Config};
use crate::error::{Error, Result};
use crate::persist::{self, Aof};
use crate::resp::{self, Out};
use crate::store::{Db, now_ms};

/// State shared by every connection.
#[derive(Debug)]
pub struct Shared {
    /// The keyspace.
    pub db: Db,
    /// The configuration it was started with.
    pub config: Config,
    started: Instant,
    port: AtomicU16,
    next_id: AtomicU64,
    connected: AtomicU64,
    total_connections: AtomicU64,
    total_commands: AtomicU64,
    /// Unix seconds of the last successful save.
    pub lastsave: AtomicI64,
    last_save_at: Mutex<Instant>,
    bgsave_running: AtomicBool,
    last_bgsave_ok: AtomicBool,
    save_lock: Mutex<()>,
    shutdown: watch::Sender<bool>,
}

impl Shared {
    fn new(config: Config) -> Self {
        let (shutdown, _) = watch::channel(false);
        Shared {
            db: Db::new(config.maxmemory, config.bloom_layout),
            config,
            started: Instant::now(),
            port: AtomicU16::new(0),
            next_id: AtomicU64::new(1),
            connected: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            total_commands: AtomicU64::new(0),
            lastsave: AtomicI64::new(now_ms() / 1000),
            last_save_at: Mutex::new(Instant::now()),
            bgsave_running: AtomicBool::new(false),
            last_bgsave_ok: AtomicBool::new(true),
            save_lock: Mutex::new(()),
            shutdown,
        }
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port.load(Ordering::Relaxed)
    }

    fn aof(&self) -> Option<Arc<Aof>> {
        self.db
            .aof
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn save_now(&self) -> Result<()> {
        let _one = self
            .save_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let dirty = self.db.dirty.load(Ordering::Relaxed);
        let image = persist::capture(&self.db);
        persist::write_snapshot(&image, &self.config.snapshot_path())?;
        self.db.dirty.fetch_sub(dirty, Ordering::Relaxed);
        self.lastsave.store(now_ms() / 1000, Ordering::Relaxed);
        *self
            .last_save_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        if let Some(aof) = self.aof() {
            aof.rewrite_after(image.aof_id, image.aof_offset)?;
        }
        Ok(())
    }

    /// `SAVE`: a snapshot now, in the caller's thread.
    ///
    /// # Errors
    /// [`Error::Io`], or [`Error::Config`] when a background save is running.
    pub fn save(&self) -> Result<()> {
        if self.bgsave_running.load(Ordering::Relaxed) {
            return Err(Error::Config("Background save already in progress".into()));
        }
        self.save_now()
    }

    /// `BGSAVE`: a snapshot in a background thread; false when one is already running.
    pub fn bgsave(self: &Arc<Self>) -> bool {
        if self.bgsave_running.swap(true, Ordering::AcqRel) {
            return false;
        }
        let sh = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("bgsave".into())
            .spawn(move || {
                let ok = match sh.save_now() {
                    Ok(()) => true,
                    Err(e) => {
                        eprintln!("tidemark-bloomd: background save failed: {e}");
                        false
                    }
                };
                sh.last_bgsave_ok.store(ok, Ordering::Relaxed);
                sh.bgsave_running.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.bgsave_running.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// Saves as `SHUTDOWN` asks (`Some(true)` SAVE, `Some(false)` NOSAVE, `None`: when save
    /// points are configured), syncs the log and tells every task to stop.
    ///
    /// # Errors
    /// The save's error; the server keeps running then.
    pub fn prepare_shutdown(&self, save: Option<bool>) -> Result<()> {
        while self.bgsave_running.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if save.unwrap_or(!self.config.save.is_empty()) {
            self.save_now()?;
        }
        if let Some(aof) = self.aof() {
            aof.sync()
                .map_err(|e| Error::io("syncing the append-only log", e))?;
        }
        self.shutdown.send_replace(true);
        Ok(())
    }
}

fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}G", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.2}M", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.2}K", b / 1024.0)
    } else {
        format!("{bytes}B")
    }
}

/// Resident set size of this process, from `/proc/self/statm` (0 where unavailable).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The text of `INFO [section ...]`.
pub fn info_text(sh: &Shared, sections: &[&[u8]]) -> String {
    let want = |name: &str| {
        sections.is_empty()
            || sections.iter().any(|s| {
                s.eq_ignore_ascii_case(name.as_bytes())
                    || s.eq_ignore_ascii_case(b"all")
                    || s.eq_ignore_ascii_case(b"default")
                    || s.eq_ignore_ascii_case(b"everything")
            })
    };
    let mut t = String::new();
    if want("server") {
        t.push_str(&format!(
            "# Server\r\nredis_version:7.0.0\r\ntidemark_bloomd_version:{}\r\nredis_mode:standalone\r\n\
             os:{}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\
             executable:tidemark-bloomd\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::process::id(),
            sh.port(),
            sh.started.elapsed().as_secs()
        ));
    }
    if want("clients") {
        t.push_str(&format!(
            "# Clients\r\nconnected_clients:{}\r\n\r\n",
            sh.connected.load(Ordering::Relaxed)
        ));
    }
    if want("memory") {
        let used = sh.db.used_memory();
        let rss = rss_bytes();
        t.push_str(&format!(
            "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\n\
             used_memory_rss_human:{}\r\nmaxmemory:{}\r\nmaxmemory_human:{}\r\n\
             maxmemory_policy:noeviction\r\n\r\n",
            human(used),
            human(rss),
            sh.config.maxmemory,
            human(sh.config.maxmemory)
        ));
    }
    if want("persistence") {
        let aof = sh.aof();
        t.push_str(&format!(
            "# Persistence\r\nloading:{}\r\nrdb_changes_since_last_save:{}\r\n\
             rdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\n\
             aof_enabled:{}\r\naof_current_size:{}\r\n\r\n",
            u8::from(sh.db.loading.load(Ordering::Relaxed)),
            sh.db.dirty.load(Ordering::Relaxed),
            u8::from(sh.bgsave_running.load(Ordering::Relaxed)),
            sh.lastsave.load(Ordering::Relaxed),
            if sh.last_bgsave_ok.load(Ordering::Relaxed) {
                "ok"
            } else {
                "err"
            },
            u8::from(aof.is_some()),
            aof.map_or(0, |a| a.len()),
        ));
    }
    if want("stats") {
        t.push_str(&format!(
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\r\n",
            sh.total_connections.load(Ordering::Relaxed),
            sh.total_commands.load(Ordering::Relaxed)
        ));
    }
    if want("keyspace") {
        t.push_str("# Keyspace\r\n");
        let keys = sh.db.len();
        if keys > 0 {
            t.push_str(&format!(
                "db0:keys={keys},expires={},avg_ttl=0\r\n",
                sh.db.expiring_keys()
            ));
        }
    }
    t
}

/// Loads the snapshot and replays the log into `sh.db`, then opens the log for appending.
fn load(sh: &Arc<Shared>) -> Result<()> {
    let c = &sh.config;
    sh.db.loading.store(true, Ordering::Relaxed);
    let (aof_id, aof_offset) = match persist::load_snapshot(&c.snapshot_path())? {
        Some(snap) => {
            let n = snap.entries.len();
            for (key, expire, value) in snap.entries {
                sh.db.put(&key, value, expire);
            }
            eprintln!(
                "tidemark-bloomd: loaded {n} keys from {}",
                c.snapshot_path().display()
            );
            (snap.aof_id, snap.aof_offset)
        }
        None => (0, 0),
    };
    if c.appendonly {
        let replay = persist::read_aof(&c.aof_path(), aof_id, aof_offset)?;
        if let Some(r) = &replay {
            let mut sess = Session {
                authed: true,
                replay: true,
                ..Session::default()
            };
            let mut out = Out::default();
            for command in &r.commands {
                let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
                execute(sh, &mut sess, &args, &mut out);
                out.buf.clear();
            }
            eprintln!(
                "tidemark-bloomd: replayed {} writes from {}",
                r.commands.len(),
                c.aof_path().display()
            );
            if r.dropped > 0 {
                eprintln!(
                    "tidemark-bloomd: dropped a torn record of {} bytes at the end of {}",
                    r.dropped,
                    c.aof_path().display()
                );
            }
        }
        let aof = Aof::open(&c.aof_path(), c.appendfsync, replay.as_ref())?;
        *sh.db.aof.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(aof));
    }
    sh.db.dirty.store(0, Ordering::Relaxed);
    sh.db.loading.store(false, Ordering::Relaxed);
    Ok(())
}

async fn connection(sh: Arc<Shared>, mut stream: TcpStream, mut stop: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    let mut sess = Session {
        id: sh.next_id.fetch_add(1, Ordering::Relaxed),
        authed: sh.config.requirepass.is_none(),
        ..Session::default()
    };
    let max_bulk = sh.config.max_request_bytes;
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut start = 0usize;
    let mut out = Out::default();
    let mut parser = resp::Parser::default();
    loop {
        let mut shutdown = false;
        let mut protocol_error = None;
        let mut commands = 0u64;
        loop {
            match parser.parse(&buf[start..], max_bulk) {
                Ok(Some(n)) => {
                    let base = start;
                    start += n;
                    let ranges = parser.args();
                    if ranges.is_empty() {
                        continue;
                    }
                    let mut args: Vec<&[u8]> = Vec::with_capacity(ranges.len());
                    args.extend(ranges.iter().map(|r| &buf[base + r.start..base + r.end]));
                    commands += 1;
                    shutdown = execute(&sh, &mut sess, &args, &mut out);
                    if shutdown || sess.close || out.buf.len() > (1 << 20) {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    protocol_error = Some(e);
                    break;
                }
            }
        }
        sh.total_commands.fetch_add(commands, Ordering::Relaxed);
        if let Some(aof) = sh.aof() {
            if aof.has_pending() {
                if let Err(e) = aof.flush() {
                    eprintln!("tidemark-bloomd: append-only log write failed: {e}");
                }
            }
        }
        if shutdown {
            return;
        }
        if let Some(e) = &protocol_error {
            out.error(&format!("ERR Protocol error: {}", e.0));
        }
        if !out.buf.is_empty() {
            if stream.write_all(&out.buf).await.is_err() {
                return;
            }
            out.buf.clear();
            if out.buf.capacity() > (4 << 20) {
                out.buf.shrink_to(64 * 1024);
            }
        }
        if protocol_error.is_some() || sess.close {
            let _ = stream.shutdown().await;
            // Drain what the client still sends for a moment, so that closing does not
            // reset the connection before it has read the reply.
            let mut sink = [0u8; 8192];
            let drain = async {
                while let Ok(n) = stream.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_millis(200), drain).await;
            return;
        }
        if start == buf.len() {
            buf.clear();
            start = 0;
            if buf.capacity() > (4 << 20) {
                buf.shrink_to(16 * 1024);
            }
        } else if start > 0 && (start > buf.len() / 2 || buf.capacity() - buf.len() < 4096) {
            buf.drain(..start);
            start = 0;
        }
        // A pending bulk string may be large: let the buffer grow in proportion.
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(buf.len().max(16 * 1024));
        }
        tokio::select! {
            r = stream.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = stop.changed() => return,
        }
    }
}

async fn background(sh: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut last_sync = Instant::now();
    loop {
        tick.tick().await;
        let s = Arc::clone(&sh);
        let _ = tokio::task::spawn_blocking(move || {
            s.db.expire_due();
        })
        .await;
        if sh.config.appendfsync == AppendFsync::Everysec
            && last_sync.elapsed() >= Duration::from_secs(1)
        {
            last_sync = Instant::now();
            if let Some(aof) = sh.aof() {
                let _ = tokio::task::spawn_blocking(move || {
                    if let Err(e) = aof.sync() {
                        eprintln!("tidemark-bloomd: append-only log fsync failed: {e}");
                    }
                })
                .await;
            }
        }
        let dirty = sh.db.dirty.load(Ordering::Relaxed);
        let since = sh
            .last_save_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .elapsed()
            .as_secs();
        if dirty > 0
            && sh
                .config
                .save
                .iter()
                .any(|&(secs, changes)| dirty >= changes && since >= secs)
        {
            sh.bgsave();
        }
    }
}

async fn serve(sh: Arc<Shared>) -> Result<()> {
    let addr = format!("{}:{}", sh.config.bind, sh.config.port);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|e| Error::io(format!("binding {addr}"), e))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io("reading the bound address", e))?;
    sh.port.store(local.port(), Ordering::Relaxed);
    if let Some(path) = &sh.config.port_file {
        tidemark_bloom::AtomicFile::write_all_to(path, format!("{}\n", local.port()).as_bytes())
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    }
    eprintln!("tidemark-bloomd: ready to accept connections on {local}");
    tokio::spawn(background(Arc::clone(&sh)));
    let mut stop = sh.shutdown.subscribe();
    let mut sigterm = term_signal()?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                sh.connected.fetch_add(1, Ordering::Relaxed);
                sh.total_connections.fetch_add(1, Ordering::Relaxed);
                let s = Arc::clone(&sh);
                let rx = sh.shutdown.subscribe();
                tokio::spawn(async move {
                    connection(Arc::clone(&s), stream, rx).await;
                    s.connected.fetch_sub(1, Ordering::Relaxed);
                });
            }
            _ = stop.changed() => break,
            () = term_recv(&mut sigterm) => {
                eprintln!("tidemark-bloomd: SIGTERM received, shutting down");
                shutdown_from_signal(&sh);
                break;
            }
            _ = tokio::signal::ctrl_c() => {
                eprintln!("tidemark-bloomd: SIGINT received, shutting down");
                shutdown_from_signal(&sh);
                break;
            }
        }
    }
    eprintln!("tidemark-bloomd: bye");
    Ok(())
}

#[cfg(unix)]
type Term = tokio::signal::unix::Signal;
#[cfg(not(unix))]
type Term = ();

#[cfg(unix)]
fn term_signal() -> Result<Term> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::io("installing the SIGTERM handler", e))
}

#[cfg(not(unix))]
fn term_signal() -> Result<Term> {
    Ok(())
}

#[cfg(unix)]
async fn term_recv(term: &mut Term) {
    term.recv().await;
}

/// No SIGTERM outside Unix: only Ctrl-C and `SHUTDOWN` stop the server there.
#[cfg(not(unix))]
async fn term_recv(_term: &mut Term) {
    std::future::pending::<()>().await
}

fn shutdown_from_signal(sh: &Shared) {
    if let Err(e) = sh.prepare_shutdown(None) {
        eprintln!("tidemark-bloomd: saving on shutdown failed: {e}");
    }
}

/// Loads the data, listens and serves until `SHUTDOWN`, SIGTERM or SIGINT.
///
/// # Errors
/// A corrupt snapshot or log, a bind failure, or a runtime error.
pub fn run(config: Config) -> Result<()> {
    std::fs::create_dir_all(&config.dir)
        .map_err(|e| Error::io(format!("creating {}", config.dir.display()), e))?;
    let threads = if config.threads == 0 {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    } else {
        config.threads
    };
    let sh = Arc::new(Shared::new(config));
    load(&sh)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the runtime", e))?;
    let result = runtime.block_on(serve(Arc::clone(&sh)));
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}
