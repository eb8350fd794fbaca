//! The indices of one data directory, each with its single writer thread, and the index
//! templates that create indices on first write.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tidemark::{DocParser, Index, ItemResult, Mapping, PreparedItem, SampleBatch, SampleTally};
use tokio::sync::oneshot;

use crate::auth::{Principal, glob_match};
use crate::disk::FloodStage;
use crate::error::{Error, Result};
use crate::es::protocol;

/// The sub-directory of the data directory holding one directory per index.
pub const INDICES_DIR: &str = "indices";
/// The file holding the index and component templates.
pub const TEMPLATES_FILE: &str = "templates.json";

/// The most write requests one group commit takes from an index's queue.
const MAX_GROUP_JOBS: usize = 64;
/// The counters file is saved at most this often (each save is an fsync).
const COUNTERS_EVERY: Duration = Duration::from_secs(1);
/// Partitions are sealed and retention applied at most this often (`Index::maintain`: it
/// also seals a partition that had no write for its seal grace, by the wall clock).
const MAINTAIN_EVERY: Duration = Duration::from_secs(10);

/// Merges the tiered policy may have waiting while the merge thread runs others; past
/// this the writer merges inline after its group (a write stall: segments, and so the
/// cost of each dedup check and read, stay bounded when ingest outruns the merges).
const MAX_WAITING_MERGES: usize = 4;
/// The merge thread looks for due merges at least this often without being woken.
const MERGE_POLL: Duration = Duration::from_secs(1);

/// The longest a writer waits for the refresh thread, per group, while the buffers hold
/// more than it keeps up with (`Index::refresh_backlog`); past it the writer goes on and
/// the engine refreshes inline once they hold twice that again.
const MAX_BACKLOG_WAIT: Duration = Duration::from_secs(2);

/// The first wait before reopening an index whose write failed; doubled after each
/// failed attempt up to [`REOPEN_MAX`].
const REOPEN_FIRST: Duration = Duration::from_millis(250);
/// The longest wait between two reopen attempts.
const REOPEN_MAX: Duration = Duration::from_secs(4);

/// What a writer answers: the items' results, or why the index refused the whole group
/// for now (disk over the flood stage, or reopening after a failed write; nothing of
/// the group was acknowledged, and a retry later succeeds).
pub(crate) type WriteReply = std::result::Result<Vec<ItemResult>, String>;

/// Whether an index takes writes, as `_cat/indices` and `_stats` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexState {
    /// Writes are taken.
    Open,
    /// Writes are refused for the reason given (the disk is over the flood stage, or
    /// a write failed and the index waits for room to reopen); reads go on.
    ReadOnly(String),
    /// The index is being reopened from its log and segments after a failed write.
    Reopening,
}

impl IndexState {
    /// `open`, `read_only` or `reopening`.
    pub fn name(&self) -> &'static str {
        match self {
            IndexState::Open => "open",
            IndexState::ReadOnly(_) => "read_only",
            IndexState::Reopening => "reopening",
        }
    }

    /// Why writes are refused, when they are.
    pub fn reason(&self) -> Option<&str> {
        match self {
            IndexState::ReadOnly(r) => Some(r),
            IndexState::Open | IndexState::Reopening => None,
        }
    }
}

/// What a writer answers for a [`SampleBatch`]: its tally, or why the index refused the
/// group for now (as [`WriteReply`]).
pub(crate) type SampleReply = std::result::Result<SampleTally, String>;

/// A request queued for an index's writer.
enum WriteJob {
    /// Documents (`_bulk`, NDJSON): a result per item.
    Items {
        items: Vec<PreparedItem>,
        reply: oneshot::Sender<WriteReply>,
    },
    /// Samples of the metrics protocols: counts.
    Samples {
        batch: SampleBatch,
        reply: oneshot::Sender<SampleReply>,
    },
}

impl WriteJob {
    /// Answers the job with `reason`: the group was refused or failed.
    fn refuse(self, reason: &str) {
        match self {
            WriteJob::Items { reply, .. } => {
                let _ = reply.send(Err(reason.to_owned()));
            }
            WriteJob::Samples { reply, .. } => {
                let _ = reply.send(Err(reason.to_owned()));
            }
        }
    }
}

/// Parsers an index keeps between requests: as many as a few clients' requests parse at
/// once (a request that finds none makes a cold one). Each holds a series memo of at
/// most about 5 MiB, typically a few hundred KiB (2,000 k8s series: about 700 KiB).
const POOLED_PARSERS: usize = 4;

/// One open index: its mapping and parser (cloned onto request threads), the index
/// itself behind a read-write lock (searches share it, the writer takes it to apply a
/// group) and the queue of its writer thread.
pub struct IndexHandle {
    name: String,
    parser: DocParser,
    /// Parsers handed back by requests, kept for the next ones: each keeps its memo of
    /// the series it has read (at most [`POOLED_PARSERS`]).
    parsers: Mutex<Vec<DocParser>>,
    index: Arc<RwLock<Option<Index>>>,
    state: Arc<Mutex<IndexState>>,
    tx: Mutex<Option<Sender<WriteJob>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for IndexHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexHandle")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl IndexHandle {
    fn start(
        name: String,
        index: Index,
        flood: FloodStage,
        new_series_per_hour: Option<u64>,
    ) -> IndexHandle {
        let mut index = index;
        index.set_background_merges(true);
        index.set_background_refresh(true);
        let parser = index.parser();
        let dir = index.dir().to_path_buf();
        let index = Arc::new(RwLock::new(Some(index)));
        let state = Arc::new(Mutex::new(IndexState::Open));
        let (tx, rx) = mpsc::channel();
        let writer = Writer {
            name: name.clone(),
            dir,
            index: Arc::clone(&index),
            state: Arc::clone(&state),
            flood,
            new_series_per_hour,
        };
        let thread_name = format!("writer-{name}");
        let thread = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || writer.run(&rx))
            .ok();
        IndexHandle {
            name,
            parser,
            parsers: Mutex::new(Vec::new()),
            index,
            state,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(thread),
        }
    }

    /// An index that takes no writes (a point in time's copy): searches, gets and
    /// stats only; a write is refused as to a closed index.
    pub(crate) fn frozen(name: String, index: Index) -> IndexHandle {
        IndexHandle {
            name,
            parser: index.parser(),
            parsers: Mutex::new(Vec::new()),
            index: Arc::new(RwLock::new(Some(index))),
            state: Arc::new(Mutex::new(IndexState::Open)),
            tx: Mutex::new(None),
            thread: Mutex::new(None),
        }
    }

    /// The index name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A parser for this index's mapping (one per request thread): one a finished
    /// request handed back ([`give_back_parser`](Self::give_back_parser)), warm with the
    /// series it has read, or a new one.
    pub fn parser(&self) -> DocParser {
        if let Ok(mut pool) = self.parsers.lock()
            && let Some(p) = pool.pop()
        {
            return p;
        }
        self.parser.clone()
    }

    /// Keeps `parser` (from [`parser`](Self::parser)) for a later request, unless
    /// [`POOLED_PARSERS`] are kept already.
    pub fn give_back_parser(&self, parser: DocParser) {
        if let Ok(mut pool) = self.parsers.lock()
            && pool.len() < POOLED_PARSERS
        {
            pool.push(parser);
        }
    }

    /// The mapping.
    pub fn mapping(&self) -> &Arc<Mapping> {
        self.parser.mapping()
    }

    /// Queues `items` for the writer; [`wait`](Self::wait) on the receiver gives the
    /// results, which come back only after the write-ahead log holding them is fsynced
    /// (one fsync for all the requests the writer found queued).
    ///
    /// # Errors
    /// `503` when the index was closed or deleted meanwhile.
    pub fn submit(&self, items: Vec<PreparedItem>) -> Result<oneshot::Receiver<WriteReply>> {
        let (reply, rx) = oneshot::channel();
        let sent = match self.tx.lock() {
            Ok(guard) => guard
                .as_ref()
                .is_some_and(|tx| tx.send(WriteJob::Items { items, reply }).is_ok()),
            Err(_) => false,
        };
        if sent { Ok(rx) } else { Err(self.closed()) }
    }

    /// Queues the samples of a metrics request for the writer, which appends them with
    /// the other requests of its group (one log write and fsync);
    /// [`wait_samples`](Self::wait_samples) on the receiver gives the tally once the log
    /// holding them is fsynced.
    ///
    /// # Errors
    /// `503` when the index was closed or deleted meanwhile.
    pub fn submit_samples(&self, batch: SampleBatch) -> Result<oneshot::Receiver<SampleReply>> {
        let (reply, rx) = oneshot::channel();
        let sent = match self.tx.lock() {
            Ok(guard) => guard
                .as_ref()
                .is_some_and(|tx| tx.send(WriteJob::Samples { batch, reply }).is_ok()),
            Err(_) => false,
        };
        if sent { Ok(rx) } else { Err(self.closed()) }
    }

    /// Waits for the tally of a [`submit_samples`](Self::submit_samples).
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    pub async fn wait_samples(&self, rx: oneshot::Receiver<SampleReply>) -> Result<SampleTally> {
        match rx.await {
            Ok(Ok(tally)) => Ok(tally),
            Ok(Err(reason)) => Err(Error::Blocked {
                index: self.name.clone(),
                reason,
                status: 429,
            }),
            Err(_) => Err(self.closed()),
        }
    }

    /// Waits for the results of a [`submit`](Self::submit).
    ///
    /// # Errors
    /// `503` when the index was closed meanwhile; [`Error::Blocked`] (`429`) when the
    /// index refused the group for now: its disk is over the flood stage, or a write
    /// failed and it is reopening (nothing acknowledged: the client retries, and what
    /// did reach the log is then a duplicate).
    pub async fn wait(&self, rx: oneshot::Receiver<WriteReply>) -> Result<Vec<ItemResult>> {
        match rx.await {
            Ok(Ok(results)) => Ok(results),
            Ok(Err(reason)) => Err(Error::Blocked {
                index: self.name.clone(),
                reason,
                status: 429,
            }),
            Err(_) => Err(self.closed()),
        }
    }

    /// Whether the index takes writes now.
    pub fn state(&self) -> IndexState {
        self.state
            .lock()
            .map_or(IndexState::Reopening, |s| s.clone())
    }

    fn closed(&self) -> Error {
        Error::status(
            503,
            "index_closed_exception",
            format!("index [{}] is closed", self.name),
        )
    }

    /// Runs `f` on the index under the read lock (searches, gets and stats run at once).
    ///
    /// # Errors
    /// `404` when the index was deleted meanwhile; the errors of `f`.
    pub fn read<T>(&self, f: impl FnOnce(&Index) -> Result<T>) -> Result<T> {
        let guard: RwLockReadGuard<'_, Option<Index>> = self
            .index
            .read()
            .map_err(|_| Error::status(500, "exception", "index lock poisoned"))?;
        match guard.as_ref() {
            Some(index) => f(index),
            None => Err(Error::no_index(&self.name)),
        }
    }

    /// Runs `f` on the index under the write lock (refresh, force-merge).
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn exclusive<T>(&self, f: impl FnOnce(&mut Index) -> Result<T>) -> Result<T> {
        let mut guard = self
            .index
            .write()
            .map_err(|_| Error::status(500, "exception", "index lock poisoned"))?;
        match guard.as_mut() {
            Some(index) => f(index),
            None => Err(Error::no_index(&self.name)),
        }
    }

    /// Stops the writer once the queued requests are done, then closes the index
    /// (counters saved, log synced, lock released).
    ///
    /// # Errors
    /// The façade's close errors.
    pub fn close(&self) -> Result<()> {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
        let index = self.index.write().ok().and_then(|mut g| g.take());
        match index {
            Some(index) => Ok(index.close()?),
            None => Ok(()),
        }
    }
}

/// An index's writer thread and what it needs to recover the index by itself.
struct Writer {
    name: String,
    dir: PathBuf,
    index: Arc<RwLock<Option<Index>>>,
    state: Arc<Mutex<IndexState>>,
    flood: FloodStage,
    new_series_per_hour: Option<u64>,
}

/// Why an index takes no writes, in the writer.
enum Block {
    /// The disk is over the flood stage; lifted when it is not.
    Disk(String),
    /// A write failed: the engine is not trusted until it is reopened from what is
    /// durable (its log and segments), which is tried at `next` once the disk has room.
    Failed {
        reason: String,
        next: Instant,
        wait: Duration,
    },
}

impl Writer {
    /// Takes every request queued (up to [`MAX_GROUP_JOBS`]), applies them as one group
    /// (one log write, one fsync) and answers each; refuses them while the index is
    /// blocked, and lifts the block by itself: a disk back under the flood stage, or a
    /// reopen after a failed write (with backoff).
    fn run(&self, rx: &Receiver<WriteJob>) {
        let merger = Worker::start("merge", &self.name, &self.index, merge_loop);
        let refresher = Worker::start("refresh", &self.name, &self.index, refresh_loop);
        let mut last_save = Instant::now();
        let mut last_maintain = Instant::now();
        let mut unsaved = false;
        let mut block: Option<Block> = None;
        loop {
            block = self.recover(block);
            if block.is_none() && last_maintain.elapsed() >= MAINTAIN_EVERY {
                maintain(&self.index);
                last_maintain = Instant::now();
            }
            let tick = match &block {
                None => COUNTERS_EVERY,
                Some(Block::Disk(_)) => REOPEN_FIRST,
                Some(Block::Failed { next, .. }) => next
                    .saturating_duration_since(Instant::now())
                    .clamp(Duration::from_millis(10), REOPEN_MAX),
            };
            let first = match rx.recv_timeout(tick) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if unsaved && block.is_none() {
                        save_counters(&self.index);
                        unsaved = false;
                        last_save = Instant::now();
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let mut jobs = vec![first];
            while jobs.len() < MAX_GROUP_JOBS {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            if block.is_none()
                && let Some(reason) = self.flood.blocked(&self.dir)
            {
                tracing::warn!(index = %self.name, %reason, "writes blocked");
                self.set(IndexState::ReadOnly(reason.clone()));
                block = Some(Block::Disk(reason));
            }
            if let Some(b) = &block {
                let reason = match b {
                    Block::Disk(r) | Block::Failed { reason: r, .. } => r.clone(),
                };
                for job in jobs {
                    job.refuse(&reason);
                }
                continue;
            }
            let mut sizes = Vec::new();
            let mut replies = Vec::new();
            let mut items = Vec::new();
            let mut batches = Vec::new();
            let mut sample_replies = Vec::new();
            for job in jobs {
                match job {
                    WriteJob::Items { items: i, reply } => {
                        sizes.push(i.len());
                        replies.push(reply);
                        items.extend(i);
                    }
                    WriteJob::Samples { batch, reply } => {
                        batches.push(batch);
                        sample_replies.push(reply);
                    }
                }
            }
            let outcome = match self.index.write() {
                Ok(mut guard) => match guard.as_mut() {
                    Some(index) => {
                        let applied = apply_group(index, items, &batches);
                        if applied.is_ok() {
                            merge_backlog(&self.name, index);
                        }
                        applied
                    }
                    None => Err("the index is closed".to_owned()),
                },
                Err(_) => Err("index lock poisoned".to_owned()),
            };
            merger.wake();
            refresher.wake();
            if outcome.is_ok() {
                wait_for_refresh(&self.index, &refresher);
            }
            match outcome {
                Ok((results, tallies)) => {
                    let mut results = results.into_iter();
                    for (n, reply) in sizes.into_iter().zip(replies) {
                        let part: Vec<ItemResult> = results.by_ref().take(n).collect();
                        let _ = reply.send(Ok(part));
                    }
                    for (tally, reply) in tallies.into_iter().zip(sample_replies) {
                        let _ = reply.send(Ok(tally));
                    }
                }
                Err(e) => {
                    // Nothing of the group is acknowledged, and what the engine holds
                    // in memory is not trusted past a failed log write or fsync (it is
                    // never retried): the index reopens from what is durable.
                    let reason = format!("a write failed ({e}); reopening from the log");
                    tracing::error!(index = %self.name, error = %e, "write failed; the index takes no writes until it is reopened");
                    self.set(IndexState::ReadOnly(reason.clone()));
                    for reply in replies {
                        let _ = reply.send(Err(reason.clone()));
                    }
                    for reply in sample_replies {
                        let _ = reply.send(Err(reason.clone()));
                    }
                    block = Some(Block::Failed {
                        reason,
                        next: Instant::now() + REOPEN_FIRST,
                        wait: REOPEN_FIRST,
                    });
                }
            }
            unsaved = true;
            if last_save.elapsed() >= COUNTERS_EVERY {
                save_counters(&self.index);
                unsaved = false;
                last_save = Instant::now();
            }
        }
        merger.stop();
        refresher.stop();
        if unsaved && block.is_none() {
            save_counters(&self.index);
        }
    }

    fn set(&self, state: IndexState) {
        if let Ok(mut s) = self.state.lock() {
            *s = state;
        }
    }

    /// Lifts `block` when it can: a disk block once the disk has room, a failed write
    /// once the index reopens (attempted when due and the disk has room; a failed
    /// attempt doubles the wait).
    fn recover(&self, block: Option<Block>) -> Option<Block> {
        match block {
            None => None,
            Some(Block::Disk(reason)) => match self.flood.blocked(&self.dir) {
                Some(now) => {
                    if now != reason {
                        self.set(IndexState::ReadOnly(now.clone()));
                    }
                    Some(Block::Disk(now))
                }
                None => {
                    tracing::info!(index = %self.name, "the disk has room again: writes resume");
                    self.set(IndexState::Open);
                    None
                }
            },
            Some(Block::Failed { reason, next, wait }) => {
                if Instant::now() < next {
                    return Some(Block::Failed { reason, next, wait });
                }
                let outcome = match self.flood.blocked(&self.dir) {
                    Some(disk) => Err(disk),
                    None => self.reopen(),
                };
                match outcome {
                    Ok(()) => {
                        tracing::info!(index = %self.name, "reopened from its log and segments: writes resume");
                        self.set(IndexState::Open);
                        None
                    }
                    Err(why) => {
                        let wait = (wait * 2).min(REOPEN_MAX);
                        let reason = format!("a write failed; reopening: {why}");
                        tracing::warn!(index = %self.name, %why, retry_in_ms = wait.as_millis() as u64, "reopen deferred");
                        self.set(IndexState::ReadOnly(reason.clone()));
                        Some(Block::Failed {
                            reason,
                            next: Instant::now() + wait,
                            wait,
                        })
                    }
                }
            }
        }
    }

    /// Closes the index and opens it again from its directory, as at a restart (the
    /// log replayed), then refreshes it: what was replayed is written into a new
    /// segment and synced, so it is durable even if the pages of the failed write are
    /// lost (an fsync that failed is never trusted, nor retried). Reads wait while this
    /// runs; when it fails they answer `404` until an attempt succeeds.
    fn reopen(&self) -> std::result::Result<(), String> {
        self.set(IndexState::Reopening);
        let mut guard = self
            .index
            .write()
            .map_err(|_| "index lock poisoned".to_owned())?;
        if let Some(old) = guard.take() {
            // Its log and segments stay as they are on disk; a close that fails to save
            // counters or sync loses nothing acknowledged.
            if let Err(e) = old.close() {
                tracing::warn!(index = %self.name, error = %e, "closing the failed index");
            }
        }
        let mut index = Index::open(&self.dir).map_err(|e| e.to_string())?;
        index.limit_new_series_per_hour(self.new_series_per_hour);
        index.set_background_merges(true);
        index.set_background_refresh(true);
        let refreshed = index.refresh().map_err(|e| e.to_string());
        *guard = Some(index);
        refreshed
    }
}

/// Applies a group: its documents (a result per item), then its sample batches (a
/// tally per batch), each kind in one engine call.
fn apply_group(
    index: &mut Index,
    items: Vec<PreparedItem>,
    batches: &[SampleBatch],
) -> std::result::Result<(Vec<ItemResult>, Vec<SampleTally>), String> {
    let results = if items.is_empty() {
        Vec::new()
    } else {
        index.apply_prepared(items).map_err(|e| e.to_string())?
    };
    let tallies = if batches.is_empty() {
        Vec::new()
    } else {
        let refs: Vec<&SampleBatch> = batches.iter().collect();
        index.append_samples(&refs).map_err(|e| e.to_string())?
    };
    Ok((results, tallies))
}

/// Runs merges inline while more are waiting than [`MAX_WAITING_MERGES`]: the merge
/// thread has fallen behind the refreshes.
fn merge_backlog(name: &str, index: &mut Index) {
    while index.waiting_merges() > MAX_WAITING_MERGES {
        let Some(job) = index.plan_merge() else {
            return;
        };
        if let Err(e) = index.install_merge(job.run()) {
            tracing::warn!(index = %name, error = %e, "inline merge failed");
            return;
        }
    }
}

/// The body of an index's background thread: its name, the index, the wake-ups, and
/// where it tells the writer it installed something.
type WorkerLoop = fn(&str, &RwLock<Option<Index>>, &Receiver<()>, &mpsc::SyncSender<()>);

/// One of an index's background threads, the merge thread and the refresh thread:
/// their work runs off the write path, with the index lock held only to plan a job and
/// to install it (a manifest switch), never while its segment is written, so writes and
/// searches go on meanwhile.
struct Worker {
    wake: Option<mpsc::SyncSender<()>>,
    /// A message after each install (at most one pending).
    installed: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    fn start(
        what: &str,
        name: &str,
        index: &Arc<RwLock<Option<Index>>>,
        body: WorkerLoop,
    ) -> Worker {
        let (wake, woken) = mpsc::sync_channel(1);
        let (done, installed) = mpsc::sync_channel(1);
        let index = Arc::clone(index);
        let label = name.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("{what}-{name}"))
            .spawn(move || body(&label, &index, &woken, &done))
            .ok();
        Worker {
            wake: Some(wake),
            installed,
            thread,
        }
    }

    /// Tells the thread a group was applied (a refresh or merge may be due); a wake
    /// already pending is enough.
    fn wake(&self) {
        if let Some(w) = &self.wake {
            let _ = w.try_send(());
        }
    }

    /// Waits up to `timeout` for the thread's next install; false if none came.
    fn wait_installed(&self, timeout: Duration) -> bool {
        self.installed.recv_timeout(timeout).is_ok()
    }

    /// Ends the thread after the merge it runs (installed, or discarded if the index
    /// is gone).
    fn stop(mut self) {
        self.wake.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// While the index's buffers hold more than the refresh thread keeps up with, the
/// writer waits for its installs (up to [`MAX_BACKLOG_WAIT`] per group) before it takes
/// the next group: requests queue, as Elasticsearch throttles indexing when refreshes
/// fall behind, instead of the buffers growing.
fn wait_for_refresh(index: &RwLock<Option<Index>>, refresher: &Worker) {
    let backlog = || {
        index
            .read()
            .ok()
            .is_some_and(|g| g.as_ref().is_some_and(Index::refresh_backlog))
    };
    let until = Instant::now() + MAX_BACKLOG_WAIT;
    while backlog() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            tracing::debug!("refresh backlog: the writer goes on");
            return;
        }
        refresher.wake();
        refresher.wait_installed(left.min(Duration::from_millis(50)));
    }
}

/// One kind of background job of an index: how it is planned (under the write lock),
/// run (without it), installed (under the lock) or discarded when the index is gone.
struct JobKind<P, R, I, D> {
    plan: P,
    run: R,
    install: I,
    discard: D,
    /// What a failed install logs.
    failed: &'static str,
    /// How long the thread waits after a failed install before it tries again.
    backoff: Duration,
}

/// The body of an index's background thread: woken (or every [`MERGE_POLL`]), it runs
/// the jobs `kind` plans until none is due, telling the writer after each install.
fn job_loop<J, W, P, R, I, D>(
    name: &str,
    index: &RwLock<Option<Index>>,
    woken: &Receiver<()>,
    done: &mpsc::SyncSender<()>,
    kind: &JobKind<P, R, I, D>,
) where
    P: Fn(&mut Index) -> Option<J>,
    R: Fn(J) -> W,
    I: Fn(&mut Index, W) -> Result<()>,
    D: Fn(W),
{
    loop {
        match woken.recv_timeout(MERGE_POLL) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        loop {
            let job = match index.write() {
                Ok(mut guard) => guard.as_mut().and_then(&kind.plan),
                Err(_) => return,
            };
            let Some(job) = job else { break };
            let written = (kind.run)(job);
            let installed = match index.write() {
                Ok(mut guard) => match guard.as_mut() {
                    Some(index) => (kind.install)(index, written),
                    None => {
                        (kind.discard)(written);
                        Ok(())
                    }
                },
                Err(_) => return,
            };
            let _ = done.try_send(());
            if let Err(e) = installed {
                tracing::warn!(index = %name, error = %e, "{}", kind.failed);
                // Not again at once: the writer wakes this thread after every group.
                std::thread::sleep(kind.backoff);
                break;
            }
            if matches!(woken.try_recv(), Err(mpsc::TryRecvError::Disconnected)) {
                return;
            }
        }
    }
}

/// An index's refresh thread: buffers that reached the budget are frozen (under the
/// lock, cheap), written as segments here, and installed (under the lock, cheap).
fn refresh_loop(
    name: &str,
    index: &RwLock<Option<Index>>,
    woken: &Receiver<()>,
    done: &mpsc::SyncSender<()>,
) {
    let plan = |index: &mut Index| match index.plan_refresh() {
        Ok(job) => job,
        Err(e) => {
            tracing::warn!(index = %name, error = %e, "planning a refresh failed");
            None
        }
    };
    let kind = JobKind {
        plan,
        run: tidemark::dedup::PartRefreshJob::run,
        install: |index: &mut Index, w| Ok(index.install_refresh(w)?),
        discard: tidemark::dedup::PartRefreshed::discard,
        failed: "background refresh failed; its points stay buffered and logged",
        backoff: REOPEN_FIRST,
    };
    job_loop(name, index, woken, done, &kind);
}

/// An index's merge thread (see [`Worker`]).
fn merge_loop(
    name: &str,
    index: &RwLock<Option<Index>>,
    woken: &Receiver<()>,
    done: &mpsc::SyncSender<()>,
) {
    let kind = JobKind {
        plan: Index::plan_merge,
        run: tidemark::dedup::PartMergeJob::run,
        install: |index: &mut Index, m| Ok(index.install_merge(m)?),
        discard: tidemark::dedup::PartMerged::discard,
        failed: "background merge failed; its segments stay",
        backoff: Duration::ZERO,
    };
    job_loop(name, index, woken, done, &kind);
}

/// Seals partitions and applies retention (a no-op for an unpartitioned index).
fn maintain(index: &RwLock<Option<Index>>) {
    if let Ok(mut guard) = index.write()
        && let Some(index) = guard.as_mut()
        && index.engine().is_partitioned()
    {
        match index.maintain() {
            Ok(r) if r.sealed + r.dropped + r.raw_expired > 0 => {
                tracing::info!(
                    sealed = r.sealed,
                    dropped = r.dropped,
                    raw_expired = r.raw_expired,
                    "partitions maintained"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "partition maintenance failed"),
        }
    }
}

fn save_counters(index: &RwLock<Option<Index>>) {
    if let Ok(guard) = index.read()
        && let Some(index) = guard.as_ref()
        && let Err(e) = index.save_counters()
    {
        tracing::warn!(error = %e, "saving counters failed");
    }
}

/// Index and component templates, as given (`PUT /_index_template/<name>`).
#[derive(Debug, Default)]
struct Templates {
    index: BTreeMap<String, Value>,
    component: BTreeMap<String, Value>,
}

/// All indices of a data directory, and the templates.
///
/// Handlers reach indices and templates only through [`scope`](Self::scope): the
/// lookups, listings, creations and deletions are methods of [`Scope`], which carries
/// the caller's [`Principal`] and sees only the indices its patterns allow. A new
/// endpoint therefore cannot list or open an index without naming who asks.
#[derive(Debug)]
pub struct Registry {
    root: PathBuf,
    flood: FloodStage,
    new_series_per_hour: Option<u64>,
    /// Partitions of the label-keyed indices created by the metrics protocols.
    label_partitions: Option<tidemark::dedup::PartitionConfig>,
    indices: RwLock<BTreeMap<String, Arc<IndexHandle>>>,
    templates: Mutex<Templates>,
    /// Serializes creation and deletion, so two first writes create an index once.
    admin: Mutex<()>,
}

impl Registry {
    /// Opens every index under `root/indices` (creating the directories if needed).
    ///
    /// # Errors
    /// I/O errors; an index that does not open (locked by another process, damaged).
    pub fn open(root: &Path) -> Result<Registry> {
        Registry::open_with(root, FloodStage::default(), None)
    }

    /// [`open`](Self::open) with the free-space watermark under which each index
    /// refuses writes until there is room again, and the most series new to an index
    /// it takes per hour ([`Index::limit_new_series_per_hour`]; `None`: no limit).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(
        root: &Path,
        flood: FloodStage,
        new_series_per_hour: Option<u64>,
    ) -> Result<Registry> {
        let dir = root.join(INDICES_DIR);
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        let mut indices = BTreeMap::new();
        let entries = std::fs::read_dir(&dir).map_err(Error::io(&dir))?;
        for entry in entries {
            let entry = entry.map_err(Error::io(&dir))?;
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                continue;
            };
            if !path.is_dir() || protocol::check_index_name(&name).is_err() {
                continue;
            }
            if !path.join(tidemark::MAPPING_FILE).is_file() {
                // A creation that crashed before writing the mapping: nothing was stored.
                tracing::warn!(index = %name, "removing an index directory without a mapping");
                std::fs::remove_dir_all(&path).map_err(Error::io(&path))?;
                continue;
            }
            let mut index = Index::open(&path)?;
            index.limit_new_series_per_hour(new_series_per_hour);
            tracing::info!(index = %name, documents = index.engine().live_count(), "opened");
            indices.insert(
                name.clone(),
                Arc::new(IndexHandle::start(name, index, flood, new_series_per_hour)),
            );
        }
        let templates = load_templates(&root.join(TEMPLATES_FILE))?;
        Ok(Registry {
            root: root.to_path_buf(),
            flood,
            new_series_per_hour,
            label_partitions: None,
            indices: RwLock::new(indices),
            templates: Mutex::new(templates),
            admin: Mutex::new(()),
        })
    }

    /// The data directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The index `name`, if it exists (whoever asks: callers go through [`Scope`]; the
    /// lake cache, which evicts copies of any index, is the one other caller).
    pub(crate) fn get(&self, name: &str) -> Option<Arc<IndexHandle>> {
        self.indices.read().ok()?.get(name).cloned()
    }

    /// Every index, by name (whoever asks: callers go through [`Scope`]).
    fn list(&self) -> Vec<Arc<IndexHandle>> {
        self.indices
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The view of the registry that `who` may use: the only door to its indices and
    /// templates.
    pub fn scope<'a>(&'a self, who: &'a Principal) -> Scope<'a> {
        Scope {
            registry: self,
            who,
        }
    }

    /// Creates index `name` from an Elasticsearch create-index body (`settings`,
    /// `mappings`).
    ///
    /// # Errors
    /// `400 invalid_index_name_exception`, `400 resource_already_exists_exception`,
    /// `400 mapper_parsing_exception`; I/O errors.
    fn create(&self, name: &str, body: &Value) -> Result<Arc<IndexHandle>> {
        protocol::check_index_name(name)?;
        let mapping = protocol::mapping_from_body(body)?;
        let partitions = partitions_from_body(body)?;
        let _admin = self.admin.lock();
        if self.get(name).is_some() {
            return Err(already_exists(name));
        }
        self.create_locked_with(name, mapping, partitions)
    }

    fn create_locked(&self, name: &str, mapping: Mapping) -> Result<Arc<IndexHandle>> {
        self.create_locked_with(name, mapping, None)
    }

    fn create_locked_with(
        &self,
        name: &str,
        mapping: Mapping,
        partitions: Option<tidemark::dedup::PartitionConfig>,
    ) -> Result<Arc<IndexHandle>> {
        let dir = self.root.join(INDICES_DIR).join(name);
        if dir.exists() {
            return Err(already_exists(name));
        }
        let index = match partitions {
            None => Index::create(&dir, mapping)?,
            Some(p) => {
                match Index::create_partitioned(
                    &dir,
                    mapping,
                    tidemark::dedup::EngineConfig::new(),
                    p,
                ) {
                    Ok(index) => index,
                    Err(e) => {
                        // Refused settings (or a failed creation) leave no index behind:
                        // the directory did not exist before.
                        let _ = std::fs::remove_dir_all(&dir);
                        return Err(e.into());
                    }
                }
            }
        };
        tracing::info!(index = %name, "created");
        let mut index = index;
        index.limit_new_series_per_hour(self.new_series_per_hour);
        let handle = Arc::new(IndexHandle::start(
            name.to_owned(),
            index,
            self.flood,
            self.new_series_per_hour,
        ));
        if let Ok(mut m) = self.indices.write() {
            m.insert(name.to_owned(), Arc::clone(&handle));
        }
        Ok(handle)
    }

    /// The index `name`, created from the matching index template of highest priority
    /// if it does not exist (how data streams such as `metrics-system.cpu-default` come
    /// to exist on first write).
    ///
    /// # Errors
    /// `404 index_not_found_exception` when no template matches; the errors of
    /// [`create`](Self::create).
    fn get_or_create(&self, name: &str) -> Result<Arc<IndexHandle>> {
        if let Some(h) = self.get(name) {
            return Ok(h);
        }
        protocol::check_index_name(name)?;
        let _admin = self.admin.lock();
        if let Some(h) = self.get(name) {
            return Ok(h);
        }
        let body = {
            let t = self
                .templates
                .lock()
                .map_err(|_| Error::status(500, "exception", "template lock poisoned"))?;
            protocol::template_for(name, &t.index, &t.component)?
        };
        let Some(body) = body else {
            return Err(Error::status(
                404,
                "index_not_found_exception",
                format!(
                    "no such index [{name}] and no index template matches it: create it with PUT /{name} (settings and mappings) or PUT /_index_template/<name> with a matching index_patterns"
                ),
            ));
        };
        let mapping = protocol::mapping_from_body(&body)?;
        self.create_locked(name, mapping)
    }

    /// The label-keyed index `name` (metrics protocols write there), created with
    /// [`tidemark::label_mapping`] if it does not exist.
    ///
    /// # Errors
    /// `400 illegal_argument_exception` when `name` exists with a declared mapping (it
    /// cannot take labelled samples); the errors of [`create`](Self::create).
    fn get_or_create_labels(&self, name: &str) -> Result<Arc<IndexHandle>> {
        let check = |h: Arc<IndexHandle>| {
            if h.mapping().is_label_keyed() {
                Ok(h)
            } else {
                Err(Error::bad(
                    "illegal_argument_exception",
                    format!(
                        "index [{name}] has a declared mapping: metrics protocols write labelled samples to label-keyed indices (settings.index.mode \"labels\"); name another index"
                    ),
                ))
            }
        };
        if let Some(h) = self.get(name) {
            return check(h);
        }
        protocol::check_index_name(name)?;
        let _admin = self.admin.lock();
        if let Some(h) = self.get(name) {
            return check(h);
        }
        self.create_locked_with(
            name,
            tidemark::label_mapping()?,
            self.label_partitions.clone(),
        )
    }

    /// The partitions (and retention) of the label-keyed indices the metrics protocols
    /// create from now on (`metrics_retention`); `None` leaves them unpartitioned.
    pub fn set_label_partitions(&mut self, p: Option<tidemark::dedup::PartitionConfig>) {
        self.label_partitions = p;
    }

    /// Deletes index `name`: waits for its queued writes, closes it, removes its
    /// directory.
    ///
    /// # Errors
    /// `404`; I/O errors.
    fn delete(&self, name: &str) -> Result<()> {
        let _admin = self.admin.lock();
        let handle = self
            .indices
            .write()
            .ok()
            .and_then(|mut m| m.remove(name))
            .ok_or_else(|| Error::no_index(name))?;
        handle.close()?;
        let dir = self.root.join(INDICES_DIR).join(name);
        std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))?;
        // Its copies of lake partitions (closed with it) go too.
        let copies = self.root.join(crate::lake::CACHE_DIR).join(name);
        if copies.exists() {
            std::fs::remove_dir_all(&copies).map_err(Error::io(&copies))?;
        }
        tracing::info!(index = %name, "deleted");
        Ok(())
    }

    /// Stores an index template (`component` false) or a component template.
    ///
    /// # Errors
    /// `400` for a body that is not an object or an index template without
    /// `index_patterns`; I/O errors saving the templates file.
    fn put_template(&self, name: &str, body: Value, component: bool) -> Result<()> {
        if !body.is_object() {
            return Err(Error::bad(
                "parse_exception",
                "a template body must be an object",
            ));
        }
        if !component && protocol::template_patterns(&body).is_empty() {
            return Err(Error::bad(
                "action_request_validation_exception",
                "Validation Failed: 1: index patterns are missing;",
            ));
        }
        let mut t = self
            .templates
            .lock()
            .map_err(|_| Error::status(500, "exception", "template lock poisoned"))?;
        if component {
            t.component.insert(name.to_owned(), body);
        } else {
            t.index.insert(name.to_owned(), body);
        }
        save_templates(&self.root.join(TEMPLATES_FILE), &t)
    }

    /// The templates whose names match `pattern` (`*` for all), as `(name, body)`.
    fn templates(&self, pattern: &str, component: bool) -> Vec<(String, Value)> {
        let Ok(t) = self.templates.lock() else {
            return Vec::new();
        };
        let map = if component { &t.component } else { &t.index };
        map.iter()
            .filter(|(n, _)| glob_match(pattern, n))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect()
    }

    /// Deletes a template; returns whether it existed.
    ///
    /// # Errors
    /// I/O errors saving the templates file.
    fn delete_template(&self, name: &str, component: bool) -> Result<bool> {
        let mut t = self
            .templates
            .lock()
            .map_err(|_| Error::status(500, "exception", "template lock poisoned"))?;
        let removed = if component {
            t.component.remove(name).is_some()
        } else {
            t.index.remove(name).is_some()
        };
        save_templates(&self.root.join(TEMPLATES_FILE), &t)?;
        Ok(removed)
    }

    /// Closes every index (after its queued writes).
    pub fn close_all(&self) {
        for h in self.list() {
            if let Err(e) = h.close() {
                tracing::error!(index = %h.name(), error = %e, "closing failed");
            }
        }
    }
}

/// The registry as one principal sees it (from [`Registry::scope`]).
///
/// The rule, on every API: an index the principal's patterns do not allow does not
/// exist for it. A wildcard, `_all` or a listing leaves foreign indices out without a
/// sign (an empty answer when only foreign indices match); an explicit foreign name is
/// `403 security_exception`, whether or not that index exists, so the answer does not
/// tell either.
///
/// Templates are cluster configuration that shape other tenants' indices: a principal
/// limited to some index patterns sees and manages only the index templates whose every
/// `index_patterns` entry its own patterns cover, and no component templates (which name
/// no indices); an unrestricted principal manages all of them.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    registry: &'a Registry,
    who: &'a Principal,
}

impl<'a> Scope<'a> {
    /// Who this scope is for.
    pub fn principal(&self) -> &'a Principal {
        self.who
    }

    /// The indices the principal may see, by name.
    pub fn list(&self) -> Vec<Arc<IndexHandle>> {
        self.registry
            .list()
            .into_iter()
            .filter(|h| self.who.allows(h.name()))
            .collect()
    }

    /// How many indices the principal may see.
    pub fn count(&self) -> usize {
        self.list().len()
    }

    /// Whether `expr` (a path's index part) is an expression over several indices: a
    /// comma-separated list, a `*` wildcard or `_all`.
    pub fn is_multi(expr: &str) -> bool {
        expr.contains('*') || expr.contains(',') || expr == "_all"
    }

    /// The indices a comma-separated expression names, each once, by name: wildcard parts
    /// and `_all` match the visible indices only; an explicit name must be allowed and
    /// exist.
    ///
    /// # Errors
    /// `403` for an explicit name the principal may not use, `404` for an explicit name
    /// that does not exist.
    pub fn resolve(&self, expr: &str) -> Result<Vec<Arc<IndexHandle>>> {
        let mut out: BTreeMap<String, Arc<IndexHandle>> = BTreeMap::new();
        let visible = self.list();
        for part in expr.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "_all" || part.contains('*') {
                for h in visible
                    .iter()
                    .filter(|h| part == "_all" || glob_match(part, h.name()))
                {
                    out.insert(h.name().to_owned(), Arc::clone(h));
                }
            } else {
                let h = self.require(part)?;
                out.insert(h.name().to_owned(), h);
            }
        }
        Ok(out.into_values().collect())
    }

    /// The index `name`.
    ///
    /// # Errors
    /// `403` when the principal may not use `name` (checked first), `404` when it does
    /// not exist.
    pub fn require(&self, name: &str) -> Result<Arc<IndexHandle>> {
        self.get(name)?.ok_or_else(|| Error::no_index(name))
    }

    /// The index `name`, if it exists.
    ///
    /// # Errors
    /// `403` when the principal may not use `name`.
    pub fn get(&self, name: &str) -> Result<Option<Arc<IndexHandle>>> {
        self.who.check(name)?;
        Ok(self.registry.get(name))
    }

    /// Creates index `name` from an Elasticsearch create-index body.
    ///
    /// # Errors
    /// `403`; the errors of index creation (`400` for a bad name, an existing index or
    /// a bad mapping; I/O errors).
    pub fn create(&self, name: &str, body: &Value) -> Result<Arc<IndexHandle>> {
        protocol::check_index_name(name)?;
        self.who.check(name)?;
        self.registry.create(name, body)
    }

    /// The index `name`, created from the matching index template if it does not exist.
    ///
    /// # Errors
    /// `403`; `404` when it does not exist and no template matches; creation errors.
    pub fn get_or_create(&self, name: &str) -> Result<Arc<IndexHandle>> {
        self.who.check(name)?;
        self.registry.get_or_create(name)
    }

    /// The label-keyed index `name`, created if it does not exist.
    ///
    /// # Errors
    /// `403`; `400` when `name` has a declared mapping; creation errors.
    pub fn get_or_create_labels(&self, name: &str) -> Result<Arc<IndexHandle>> {
        self.who.check(name)?;
        self.registry.get_or_create_labels(name)
    }

    /// Deletes index `name`.
    ///
    /// # Errors
    /// `403`, `404`; I/O errors.
    pub fn delete(&self, name: &str) -> Result<()> {
        self.who.check(name)?;
        self.registry.delete(name)
    }

    /// Whether the principal may see and manage this template (see the type's docs).
    fn template_visible(&self, body: &Value, component: bool) -> bool {
        if self.who.unrestricted() {
            return true;
        }
        if component {
            return false;
        }
        let patterns = protocol::template_patterns(body);
        !patterns.is_empty() && patterns.iter().all(|p| self.who.covers(p))
    }

    /// The templates matching `pattern` that the principal may see, as `(name, body)`.
    pub fn templates(&self, pattern: &str, component: bool) -> Vec<(String, Value)> {
        self.registry
            .templates(pattern, component)
            .into_iter()
            .filter(|(_, body)| self.template_visible(body, component))
            .collect()
    }

    /// Stores a template; it must be visible to the principal, and so must the template
    /// it replaces.
    ///
    /// # Errors
    /// `403 security_exception` otherwise; the errors of storing it.
    pub fn put_template(&self, name: &str, body: Value, component: bool) -> Result<()> {
        let replaced = self.registry.templates(name, component);
        let own = |b: &Value| self.template_visible(b, component);
        if !own(&body) || replaced.iter().any(|(n, b)| n == name && !own(b)) {
            return Err(self.template_forbidden(name));
        }
        self.registry.put_template(name, body, component)
    }

    /// Deletes a template the principal may see; returns whether it existed (a template
    /// it may not see does not exist for it).
    ///
    /// # Errors
    /// I/O errors saving the templates file.
    pub fn delete_template(&self, name: &str, component: bool) -> Result<bool> {
        let visible = self
            .templates(name, component)
            .iter()
            .any(|(n, _)| n == name);
        if !visible {
            return Ok(false);
        }
        self.registry.delete_template(name, component)
    }

    fn template_forbidden(&self, name: &str) -> Error {
        Error::status(
            403,
            "security_exception",
            format!(
                "action [cluster:admin/template] is unauthorized for user [{}] on template [{name}]: its index patterns must lie within the user's own",
                self.who.name
            ),
        )
    }
}

/// Tidemark's time-partition settings in a create-index body, if any:
/// `settings.index.tidemark.partitions` (or `settings["index.tidemark.partitions"]`) =
/// `{"width": "1d", "retention": "30d", "late_window": "2d", "seal_grace": "1h",
/// "rollups": ["5m", "1h"], "rollup_retention": {"1h": "365d"}}` (`width` required).
///
/// # Errors
/// `400 illegal_argument_exception` naming the bad setting.
fn partitions_from_body(body: &Value) -> Result<Option<tidemark::dedup::PartitionConfig>> {
    let settings = body.get("settings");
    let spec = settings
        .and_then(|s| s.get("index"))
        .and_then(|i| i.get("tidemark"))
        .and_then(|t| t.get("partitions"))
        .or_else(|| settings.and_then(|s| s.get("index.tidemark.partitions")))
        .or_else(|| {
            settings
                .and_then(|s| s.get("tidemark"))
                .and_then(|t| t.get("partitions"))
        });
    let Some(spec) = spec else {
        return Ok(None);
    };
    let bad = |detail: String| {
        Error::bad(
            "illegal_argument_exception",
            format!("[index.tidemark.partitions] {detail}"),
        )
    };
    let Value::Object(spec) = spec else {
        return Err(bad("must be an object".to_owned()));
    };
    let duration = |key: &str, v: &Value| -> Result<i64> {
        let text = v
            .as_str()
            .ok_or_else(|| bad(format!("[{key}] must be a duration such as \"1d\"")))?;
        tidemark::parse_interval(text).map_err(|e| bad(format!("[{key}]: {e}")))
    };
    let mut p = tidemark::dedup::PartitionConfig::new();
    let mut width = None;
    for (k, v) in spec {
        match k.as_str() {
            "width" => width = Some(duration(k, v)?),
            "retention" => p = p.with_retention_ms(Some(duration(k, v)?)),
            "late_window" => p = p.with_late_window_ms(Some(duration(k, v)?)),
            "seal_grace" => p = p.with_seal_grace_ms(duration(k, v)?),
            "rollups" => {
                let list = v
                    .as_array()
                    .ok_or_else(|| bad("[rollups] must be a list".to_owned()))?;
                let r = list
                    .iter()
                    .map(|x| duration(k, x))
                    .collect::<Result<Vec<i64>>>()?;
                p = p.with_rollups(r);
            }
            "rollup_retention" => {
                let map = v.as_object().ok_or_else(|| {
                    bad("[rollup_retention] must map resolutions to retentions".to_owned())
                })?;
                for (res, keep) in map {
                    let res = tidemark::parse_interval(res)
                        .map_err(|e| bad(format!("[rollup_retention]: {e}")))?;
                    p = p.with_rollup_retention_ms(res, duration(k, keep)?);
                }
            }
            other => return Err(bad(format!("unknown setting [{other}]"))),
        }
    }
    let width = width.ok_or_else(|| bad("needs [width]".to_owned()))?;
    Ok(Some(p.with_width_ms(width)))
}

fn already_exists(name: &str) -> Error {
    Error::bad(
        "resource_already_exists_exception",
        format!("index [{name}] already exists"),
    )
}

fn load_templates(path: &Path) -> Result<Templates> {
    if !path.exists() {
        return Ok(Templates::default());
    }
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| Error::config(path.display().to_string(), e.to_string()))?;
    let section = |key: &str| -> BTreeMap<String, Value> {
        match v.get(key) {
            Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            _ => BTreeMap::new(),
        }
    };
    Ok(Templates {
        index: section("index_templates"),
        component: section("component_templates"),
    })
}

fn save_templates(path: &Path, t: &Templates) -> Result<()> {
    let to_map = |m: &BTreeMap<String, Value>| -> Map<String, Value> {
        m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let mut root = Map::new();
    root.insert("index_templates".into(), Value::Object(to_map(&t.index)));
    root.insert(
        "component_templates".into(),
        Value::Object(to_map(&t.component)),
    );
    let text = serde_json::to_string_pretty(&Value::Object(root))
        .map_err(|e| Error::status(500, "exception", e.to_string()))?;
    tidemark::segment::AtomicFile::write_all_to(path, text.as_bytes()).map_err(Error::io(path))
}
