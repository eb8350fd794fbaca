//! TCP listeners of the line protocols without acknowledgements: Graphite plaintext
//! (`graphite_listen`) and OpenTSDB's telnet-style `put` (`opentsdb_listen`).
//!
//! A connection's lines are gathered and written like one metrics request: parsed on a
//! blocking thread into a [`SampleBatch`](tidemark::SampleBatch), then written through
//! [`metrics::store`] (the index's writer, group-committed, fsynced), so a line sent
//! again is a duplicate and is stored once. Lines are written once
//! `tcp_flush_interval_ms` (1 s) passed since the first of them arrived, once
//! [`FLUSH_BYTES`] of them wait, and when the connection ends. Neither protocol
//! acknowledges anything: what a sender wrote before its connection dropped may or may
//! not have arrived, and lines received but not yet written when the server is killed
//! are lost (a SIGTERM writes them first). While a write is refused for a reason that
//! passes (a full disk, an index reopening), the connection is not read, so that the
//! sender's own buffer holds what follows.
//!
//! Memory: each connection holds at most [`FLUSH_BYTES`] of lines plus one line of
//! `tcp_max_line_bytes` (a longer line is skipped to its end and counted), and a
//! listener takes `tcp_max_connections` at once.
//!
//! Bad lines are counted (`tidemark_tcp_lines_total{result="bad"}` on `GET /metrics`)
//! and logged at most every [`LOG_EVERY_MS`] per protocol with how many went unlogged;
//! the connection goes on. OpenTSDB's sender also gets `put: <reason>` back for each,
//! as OpenTSDB answers, without ever waiting for it to read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::metrics::{self, Batch};
use crate::state::{AppState, blocking};

/// Bytes of complete lines a connection gathers before writing them (256 KiB, about
/// 4,000 collectd lines).
pub(crate) const FLUSH_BYTES: usize = 256 * 1024;
/// Bad lines are logged at most this often per protocol (10 s).
pub(crate) const LOG_EVERY_MS: i64 = 10_000;
/// The most `put: <reason>` bytes sent back after one write (64 KiB).
const MAX_REPLY_BYTES: usize = 64 * 1024;

/// A line protocol served over TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// Graphite plaintext: `path[;tag=value...] value timestamp`.
    Graphite,
    /// OpenTSDB telnet-style: `put metric timestamp value tag=value ...`.
    OpenTsdb,
}

impl Protocol {
    /// The protocol's name in logs and metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Protocol::Graphite => "graphite",
            Protocol::OpenTsdb => "opentsdb",
        }
    }
}

/// What one protocol's listener did, for `GET /metrics`.
#[derive(Debug, Default)]
pub(crate) struct LineStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections closed at once: `tcp_max_connections` were open.
    pub refused: AtomicU64,
    /// Connections closed for going `tcp_idle_timeout_secs` without completing a line.
    pub idle_closed: AtomicU64,
    /// Lines read into samples.
    pub lines_ok: AtomicU64,
    /// Lines skipped as malformed, too long or cut by the end of the server.
    pub lines_bad: AtomicU64,
    /// Samples stored for the first time.
    pub created: AtomicU64,
    /// Samples already stored (a line sent again).
    pub duplicates: AtomicU64,
    /// Samples that replaced a stored one (`metrics_op = "index"`).
    pub replaced: AtomicU64,
    /// Samples the index refused (too old for its retention, a series limit).
    pub rejected: AtomicU64,
    /// Samples of lines that were read but could not be written (the index refused
    /// the write for good, or the server stopped while it was refused).
    pub dropped: AtomicU64,
    last_log_ms: AtomicI64,
    unlogged: AtomicU64,
}

impl LineStats {
    /// Counts `n` bad lines and logs the first reason, unless a bad line was logged
    /// less than [`LOG_EVERY_MS`] ago (then the count waits for the next log line).
    fn bad_lines(&self, protocol: Protocol, peer: SocketAddr, n: u64, first: &str) {
        if n == 0 {
            return;
        }
        self.lines_bad.fetch_add(n, Ordering::Relaxed);
        let now = crate::state::now_ms();
        let last = self.last_log_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= LOG_EVERY_MS
            && self
                .last_log_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let unlogged = self.unlogged.swap(0, Ordering::Relaxed);
            tracing::warn!(
                protocol = protocol.name(),
                %peer,
                bad_lines = n,
                unlogged_before = unlogged,
                first = first,
                "bad lines skipped"
            );
        } else {
            self.unlogged.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// The listeners' counters, by protocol.
#[derive(Debug, Default)]
pub(crate) struct TcpStats {
    /// Graphite's.
    pub graphite: LineStats,
    /// OpenTSDB's.
    pub opentsdb: LineStats,
}

impl TcpStats {
    /// The counters of `protocol`.
    pub(crate) fn of(&self, protocol: Protocol) -> &LineStats {
        match protocol {
            Protocol::Graphite => &self.graphite,
            Protocol::OpenTsdb => &self.opentsdb,
        }
    }
}

/// A bound listener of one line protocol.
#[derive(Debug)]
pub(crate) struct LineListener {
    protocol: Protocol,
    listener: TcpListener,
    addr: SocketAddr,
    index: String,
}

impl LineListener {
    /// Binds `addr` for `protocol`, writing to `index`.
    ///
    /// # Errors
    /// [`Error::Net`] when the address cannot be bound.
    pub(crate) async fn bind(
        protocol: Protocol,
        addr: SocketAddr,
        index: String,
    ) -> Result<LineListener> {
        let listener = TcpListener::bind(addr).await.map_err(Error::Net)?;
        let addr = listener.local_addr().map_err(Error::Net)?;
        Ok(LineListener {
            protocol,
            listener,
            addr,
            index,
        })
    }

    /// The protocol.
    pub(crate) fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The bound address.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accepts connections until `shutdown` turns true, then waits for every connection
    /// to write what it read (each stops reading at once).
    pub(crate) async fn run(self, st: Arc<AppState>, mut shutdown: watch::Receiver<bool>) {
        let LineListener {
            protocol,
            listener,
            index,
            addr,
        } = self;
        tracing::info!(protocol = protocol.name(), %addr, %index, "listening");
        let who = Principal::listener(&format!("_{}", protocol.name()), &index);
        let index: Arc<str> = Arc::from(index);
        let slots = Arc::new(Semaphore::new(st.config.tcp_max_connections));
        let stats = st.tcp_stats.of(protocol);
        let mut conns = JoinSet::new();
        loop {
            while conns.try_join_next().is_some() {}
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.wait_for(|stop| *stop) => break,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(protocol = protocol.name(), error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    protocol = protocol.name(), %peer,
                    max = st.config.tcp_max_connections,
                    "connection refused: tcp_max_connections are open"
                );
                drop(stream);
                continue;
            };
            stats.connections.fetch_add(1, Ordering::Relaxed);
            let conn = Connection {
                st: Arc::clone(&st),
                protocol,
                index: Arc::clone(&index),
                who: who.clone(),
                peer,
                shutdown: shutdown.clone(),
            };
            conns.spawn(async move {
                conn.serve(stream).await;
                drop(slot);
            });
        }
        drop(listener);
        while conns.join_next().await.is_some() {}
    }
}

/// One connection of a line protocol.
struct Connection {
    st: Arc<AppState>,
    protocol: Protocol,
    index: Arc<str>,
    who: Principal,
    peer: SocketAddr,
    shutdown: watch::Receiver<bool>,
}

/// How a read ended.
enum Event {
    Data(usize),
    Eof,
    Failed(std::io::Error),
    FlushDue,
    Idle,
    Stop,
}

impl Connection {
    /// Reads lines until the sender closes, an `exit`, an error or the server's
    /// shutdown, writing them as they gather (see the module docs).
    async fn serve(mut self, mut stream: TcpStream) {
        let max_line = self.st.config.tcp_max_line_bytes;
        let interval = Duration::from_millis(self.st.config.tcp_flush_interval_ms);
        let idle = Duration::from_secs(self.st.config.tcp_idle_timeout_secs);
        // When the connection last completed a line (or opened): bytes that never end
        // a line do not count, so a trickle cannot hold the slot either.
        let mut progress = Instant::now();
        let st = Arc::clone(&self.st);
        let stats = st.tcp_stats.of(self.protocol);
        // `buf[..complete]` holds whole lines, each with its newline; the rest is the
        // start of the next line.
        let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
        let mut complete = 0usize;
        let mut skipping = false;
        let mut too_long = 0u64;
        let mut oldest: Option<Instant> = None;
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let event = {
                let read = stream.read(&mut chunk);
                tokio::select! {
                    r = read => match r {
                        Ok(0) => Event::Eof,
                        Ok(n) => Event::Data(n),
                        Err(e) => Event::Failed(e),
                    },
                    () = sleep_until(oldest.map(|t| t + interval)) => Event::FlushDue,
                    () = tokio::time::sleep_until(progress + idle) => Event::Idle,
                    _ = self.shutdown.wait_for(|stop| *stop) => Event::Stop,
                }
            };
            let n = match event {
                Event::Data(n) => n,
                Event::FlushDue => {
                    let lines = take_lines(&mut buf, &mut complete, &mut oldest);
                    if !self.flush(&mut stream, lines, &mut too_long).await {
                        return;
                    }
                    continue;
                }
                Event::Eof => {
                    // A last line without its newline is a line.
                    if !skipping && buf.len() > complete {
                        buf.push(b'\n');
                        complete = buf.len();
                    }
                    let lines = take_lines(&mut buf, &mut complete, &mut oldest);
                    self.flush(&mut stream, lines, &mut too_long).await;
                    return;
                }
                Event::Failed(e) => {
                    tracing::debug!(protocol = self.protocol.name(), peer = %self.peer, error = %e, "connection failed");
                    let lines = take_lines(&mut buf, &mut complete, &mut oldest);
                    self.flush(&mut stream, lines, &mut too_long).await;
                    return;
                }
                Event::Idle => {
                    stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        protocol = self.protocol.name(), peer = %self.peer,
                        idle_secs = idle.as_secs(),
                        "closing a connection that completed no line for tcp_idle_timeout_secs"
                    );
                    if buf.len() > complete {
                        stats.bad_lines(
                            self.protocol,
                            self.peer,
                            1,
                            "a line cut by the idle timeout",
                        );
                    }
                    let lines = take_lines(&mut buf, &mut complete, &mut oldest);
                    self.flush(&mut stream, lines, &mut too_long).await;
                    return;
                }
                Event::Stop => {
                    if buf.len() > complete {
                        stats.bad_lines(
                            self.protocol,
                            self.peer,
                            1,
                            "a line cut by the server's shutdown",
                        );
                    }
                    let lines = take_lines(&mut buf, &mut complete, &mut oldest);
                    self.flush(&mut stream, lines, &mut too_long).await;
                    return;
                }
            };
            for piece in chunk
                .get(..n)
                .unwrap_or_default()
                .split_inclusive(|&b| b == b'\n')
            {
                let ends = piece.last() == Some(&b'\n');
                if skipping {
                    skipping = !ends;
                    continue;
                }
                buf.extend_from_slice(piece);
                // The line's length without its newline.
                let len = buf.len() - complete - usize::from(ends);
                if len > max_line {
                    buf.truncate(complete);
                    too_long += 1;
                    skipping = !ends;
                } else if ends {
                    complete = buf.len();
                    oldest.get_or_insert_with(Instant::now);
                }
                if ends {
                    progress = Instant::now();
                }
            }
            if complete >= FLUSH_BYTES {
                let lines = take_lines(&mut buf, &mut complete, &mut oldest);
                if !self.flush(&mut stream, lines, &mut too_long).await {
                    return;
                }
            }
        }
    }

    /// Parses and writes `lines`, counting what happened; sends OpenTSDB's replies.
    /// `false` when the connection should end (`exit`).
    async fn flush(&mut self, stream: &mut TcpStream, lines: Vec<u8>, too_long: &mut u64) -> bool {
        let stats = self.st.tcp_stats.of(self.protocol);
        let long = std::mem::take(too_long);
        if long > 0 {
            stats.bad_lines(
                self.protocol,
                self.peer,
                long,
                &format!(
                    "a line longer than {} bytes (tcp_max_line_bytes)",
                    self.st.config.tcp_max_line_bytes
                ),
            );
        }
        if lines.is_empty() {
            return true;
        }
        let st = Arc::clone(&self.st);
        let protocol = self.protocol;
        let parsed = blocking(move || parse_lines(&st, protocol, &lines)).await;
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(protocol = self.protocol.name(), error = %e, "lines not read");
                return true;
            }
        };
        stats.lines_ok.fetch_add(parsed.ok, Ordering::Relaxed);
        if let Some(first) = &parsed.first_bad {
            stats.bad_lines(self.protocol, self.peer, parsed.bad, first);
        }
        if !parsed.replies.is_empty() {
            // Best effort, never waiting: a sender that does not read (collectd) must
            // not stall its own connection.
            let _ = stream.try_write(&parsed.replies);
        }
        self.write(parsed.samples).await;
        !parsed.exit
    }

    /// Writes `samples`, waiting out refusals that pass (a full disk, a reopening
    /// index: `429`, `5xx`) while the server runs; counts the outcome.
    async fn write(&mut self, samples: tidemark::SampleBatch) {
        let stats = self.st.tcp_stats.of(self.protocol);
        let n = samples.len() as u64;
        let mut wait = Duration::from_millis(250);
        loop {
            match metrics::store(&self.st, &self.who, self.index.to_string(), samples.clone()).await
            {
                Ok(t) => {
                    stats.created.fetch_add(t.created, Ordering::Relaxed);
                    stats.duplicates.fetch_add(t.duplicates, Ordering::Relaxed);
                    stats.replaced.fetch_add(t.replaced, Ordering::Relaxed);
                    stats.rejected.fetch_add(t.rejected, Ordering::Relaxed);
                    if let Some(why) = &t.first_rejection {
                        tracing::warn!(protocol = self.protocol.name(), peer = %self.peer, rejected = t.rejected, first = %why, "samples refused by the index");
                    }
                    return;
                }
                Err(e) => {
                    let status = e.status_and_kind().0;
                    let passes = status == 429 || status >= 500;
                    if !passes || *self.shutdown.borrow() {
                        stats.dropped.fetch_add(n, Ordering::Relaxed);
                        tracing::warn!(protocol = self.protocol.name(), peer = %self.peer, index = %self.index, samples = n, error = %e.reason(), "samples not written");
                        return;
                    }
                    tracing::warn!(protocol = self.protocol.name(), index = %self.index, error = %e.reason(), retry_ms = wait.as_millis() as u64, "write refused for now; the connection waits");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        _ = self.shutdown.wait_for(|stop| *stop) => {}
                    }
                    wait = (wait * 2).min(Duration::from_secs(4));
                }
            }
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Takes the complete lines out of `buf`, leaving the start of the next one.
fn take_lines(buf: &mut Vec<u8>, complete: &mut usize, oldest: &mut Option<Instant>) -> Vec<u8> {
    let rest = buf.split_off((*complete).min(buf.len()));
    *complete = 0;
    *oldest = None;
    std::mem::replace(buf, rest)
}

/// What a run of lines became.
struct Parsed {
    samples: tidemark::SampleBatch,
    ok: u64,
    bad: u64,
    first_bad: Option<String>,
    /// Bytes to send back (OpenTSDB: `version` answers, `put:` errors).
    replies: Vec<u8>,
    /// The sender asked to close (OpenTSDB `exit`).
    exit: bool,
}

/// Parses `lines` (each ending with a newline) into samples. A bad line is skipped
/// whole and counted; blank lines are ignored.
fn parse_lines(st: &AppState, protocol: Protocol, lines: &[u8]) -> Result<Parsed> {
    let mut batch = Batch::new(&st.config)?;
    let mut out = Parsed {
        samples: tidemark::SampleBatch::new(true),
        ok: 0,
        bad: 0,
        first_bad: None,
        replies: Vec::new(),
        exit: false,
    };
    let mut key = Vec::with_capacity(256);
    for raw in lines.split(|&b| b == b'\n') {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.trim_ascii().is_empty() {
            continue;
        }
        let mark = batch.mark();
        let outcome = match protocol {
            Protocol::Graphite => crate::metrics::graphite::parse_line(raw).and_then(|l| {
                let ts = l.ts_millis.unwrap_or(batch.now_ms());
                batch.push_named(&st.series_cache, &mut key, &l.name, &l.tags, ts, l.value)
            }),
            Protocol::OpenTsdb => match crate::metrics::opentsdb::parse_command(raw) {
                Ok(Some(crate::metrics::opentsdb::Command::Put(p))) => batch.push_named(
                    &st.series_cache,
                    &mut key,
                    &p.name,
                    &p.tags,
                    p.ts_millis,
                    p.value,
                ),
                Ok(Some(crate::metrics::opentsdb::Command::Version)) => {
                    out.replies.extend_from_slice(
                        format!(
                            "tidemark {} (OpenTSDB put over TCP)\n",
                            env!("CARGO_PKG_VERSION")
                        )
                        .as_bytes(),
                    );
                    continue;
                }
                Ok(Some(crate::metrics::opentsdb::Command::Exit)) => {
                    out.exit = true;
                    break;
                }
                Ok(None) => continue,
                Err(e) => Err(e),
            },
        };
        match outcome {
            Ok(()) => out.ok += 1,
            Err(reason) => {
                batch.truncate(mark);
                out.bad += 1;
                if out.first_bad.is_none() {
                    let text = String::from_utf8_lossy(raw);
                    let shown: String = text.chars().take(200).collect();
                    out.first_bad = Some(format!("{shown:?}: {reason}"));
                }
                if protocol == Protocol::OpenTsdb && out.replies.len() < MAX_REPLY_BYTES {
                    out.replies
                        .extend_from_slice(format!("put: {reason}\n").as_bytes());
                }
            }
        }
    }
    out.samples = batch.samples;
    Ok(out)
}
