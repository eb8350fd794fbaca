//! Several writer threads on one engine: a documented single-writer design fed by a
//! channel, with group commit.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::config::Durability;
use tidemark_segment::Dim;
use tidemark_tsid::Tsid;

use crate::buffer::{ColumnKind, ColumnRef, SeriesRef};
use crate::engine::{Answer, AppendBatch, Engine, MergeJob, MergedSegment, Op, Outcome, Writes};
use crate::error::{Error, Result};
use crate::stats::MergeStats;

/// The most batches one group commit takes from the queue.
const MAX_GROUP: usize = 64;

/// A batch and where its outcomes go.
type BatchRequest = (Writes, Sender<Answer>);

enum Request {
    Batch(Writes, Sender<Answer>),
    Series(Tsid, Vec<(String, Dim)>, Sender<Result<SeriesRef>>),
    Column(String, ColumnKind, Sender<Result<ColumnRef>>),
    Refresh(Sender<Result<()>>),
    Stats(Sender<MergeStats>),
    MergeDone {
        worker: usize,
        ids: Vec<u64>,
        result: Result<MergedSegment>,
    },
    Shutdown,
}

/// An [`Engine`] owned by one engine thread, shared by any number of [`Writer`]s.
///
/// Every operation runs on the engine thread, in the order the requests reach it, so two
/// threads writing the same point at once cannot both store it: one gets `Created`, the
/// other `Conflict`. Batches waiting in the queue are committed together: their log
/// records go out with one `write` and at most one fsync (group commit), which is what
/// makes [`Durability::PerRequest`](crate::Durability::PerRequest) cheap under
/// concurrency.
///
/// Merges (when [`EngineConfig::with_auto_merge`](crate::EngineConfig::with_auto_merge)
/// is on) run on long-lived merge threads,
/// [`merge_threads`](crate::EngineConfig::with_merge_threads) of them at most (one kept
/// for merges of freshly refreshed segments): the engine thread only plans them and
/// installs the result (tombstoning rows deleted meanwhile), so ingest is not blocked
/// while a merged segment is written. When ingest outruns the merges anyway, writes
/// stall (see [`EngineConfig::with_merge_stall`](crate::EngineConfig::with_merge_stall)):
/// the engine thread holds new batches, in order, until enough merges are done, so the
/// live segment count, and the memory that comes with each segment, stays bounded.
///
/// With [`Durability::Interval`], the engine thread also fsyncs the log when it has been
/// idle for the interval, so an acknowledged write reaches stable storage within about
/// one interval even if no other write follows.
///
/// ```
/// use tidemark_dedup::{Engine, EngineConfig, Op, SharedEngine};
/// use tidemark_segment::Point;
/// use tidemark_tsid::Tsid;
///
/// let dir = tempfile::tempdir()?;
/// let shared = SharedEngine::new(Engine::create(dir.path(), EngineConfig::new())?);
/// let handles: Vec<_> = (0..4)
///     .map(|_| {
///         let w = shared.writer();
///         std::thread::spawn(move || {
///             let p = Point::new(Tsid::from_bytes([1; 20]), 5).dim("a", "b");
///             w.batch(vec![Op::Create(p)])
///         })
///     })
///     .collect();
/// for h in handles {
///     h.join().expect("writer thread")?;
/// }
/// let engine = shared.into_inner()?;
/// assert_eq!(engine.live_count(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SharedEngine {
    tx: Option<Sender<Request>>,
    thread: Option<JoinHandle<Engine>>,
}

/// A handle sending batches to a [`SharedEngine`]'s thread; cheap to clone, `Send`.
#[derive(Debug, Clone)]
pub struct Writer {
    tx: Sender<Request>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Batch(writes, _) => write!(f, "Batch({} writes)", writes.len()),
            Request::Series(tsid, _, _) => write!(f, "Series({tsid:?})"),
            Request::Column(name, _, _) => write!(f, "Column({name:?})"),
            Request::Refresh(_) => f.write_str("Refresh"),
            Request::Stats(_) => f.write_str("Stats"),
            Request::MergeDone { worker, .. } => write!(f, "MergeDone(worker {worker})"),
            Request::Shutdown => f.write_str("Shutdown"),
        }
    }
}

impl SharedEngine {
    /// Moves `engine` to a new engine thread.
    pub fn new(engine: Engine) -> SharedEngine {
        SharedEngine::start(engine, Gate::default())
    }

    fn start(mut engine: Engine, gate: Gate) -> SharedEngine {
        let (tx, rx) = mpsc::channel();
        let background = engine.config().auto_merge;
        engine.set_background_merges(background);
        let merge_tx = tx.clone();
        let thread = std::thread::spawn(move || {
            let mut pool = background.then(|| MergePool::new(&engine, merge_tx, gate));
            serve(&mut engine, &rx, pool.as_mut());
            if let Some(pool) = pool {
                pool.stop();
            }
            engine.set_background_merges(false);
            engine
        });
        SharedEngine {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    /// A new writer handle.
    ///
    /// # Errors
    /// None: a writer of a stopped engine reports [`Error::Stopped`] on use.
    pub fn writer(&self) -> Writer {
        match &self.tx {
            Some(tx) => Writer { tx: tx.clone() },
            None => Writer {
                tx: mpsc::channel().0,
            },
        }
    }

    /// Stops the engine thread once the requests already queued are done (and the merges
    /// in flight are installed), and returns the engine. A write stall ends: batches held
    /// by it are applied and answered. Writers used afterwards get [`Error::Stopped`].
    ///
    /// # Errors
    /// [`Error::Stopped`] if the engine thread panicked.
    pub fn into_inner(mut self) -> Result<Engine> {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Request::Shutdown);
        }
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| Error::Stopped),
            None => Err(Error::Stopped),
        }
    }
}

impl Drop for SharedEngine {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Request::Shutdown);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Writer {
    /// Runs `ops` on the engine thread, as [`Engine::batch`] does, and waits for the
    /// outcomes (one per operation, in order).
    ///
    /// # Errors
    /// As [`Engine::batch`]; [`Error::Shared`] for an error of the group commit this batch
    /// was part of; [`Error::Stopped`].
    pub fn batch(&self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        self.send_writes(Writes::Ops(ops)).and_then(|a| a.result)
    }

    /// Registers a series on the engine thread, as [`Engine::series`] does, and returns
    /// its ref for [`append`](Self::append). Refs are the engine's: every writer of the
    /// same [`SharedEngine`] may use them, for as long as it runs.
    ///
    /// # Errors
    /// As [`Engine::series`]; [`Error::Stopped`].
    pub fn series(&self, tsid: Tsid, dims: Vec<(String, Dim)>) -> Result<SeriesRef> {
        self.ask(|tx| Request::Series(tsid, dims, tx))?
    }

    /// Registers a metric or extra column on the engine thread, as [`Engine::column`]
    /// does.
    ///
    /// # Errors
    /// As [`Engine::column`]; [`Error::Stopped`].
    pub fn column(&self, name: &str, kind: ColumnKind) -> Result<ColumnRef> {
        self.ask(|tx| Request::Column(name.to_owned(), kind, tx))?
    }

    /// Runs a batch of appends by ref on the engine thread, as [`Engine::append`] does
    /// (group-committed with the other writers' batches), and waits for the outcomes.
    /// `batch` comes back empty with its memory kept, so that a writer that refills it
    /// allocates nothing per batch.
    ///
    /// ```
    /// use tidemark_dedup::{AppendBatch, ColumnKind, Engine, EngineConfig, Outcome, SharedEngine};
    /// use tidemark_segment::MetricValue;
    /// use tidemark_tsid::Tsid;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let shared = SharedEngine::new(Engine::create(dir.path(), EngineConfig::new())?);
    /// let w = shared.writer();
    /// let s = w.series(Tsid::from_bytes([7; 20]), vec![("host".into(), "a".into())])?;
    /// let cpu = w.column("cpu", ColumnKind::Gauge)?;
    /// let mut batch = AppendBatch::with_capacity(2, 2);
    /// for round in 0..2 {
    ///     batch.create(s, 1_000, &[(cpu, MetricValue::Gauge(0.5))]);
    ///     batch.create(s, 2_000, &[(cpu, MetricValue::Gauge(0.7))]);
    ///     let out = w.append(&mut batch)?;
    ///     // The first round stores both points; the retry finds them.
    ///     let created = out.iter().filter(|o| matches!(o, Outcome::Created { .. })).count();
    ///     assert_eq!(created, if round == 0 { 2 } else { 0 });
    ///     assert!(batch.is_empty());
    /// }
    /// drop(w);
    /// assert_eq!(shared.into_inner()?.live_count(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Engine::append`]; [`Error::Shared`] for an error of the group commit this
    /// batch was part of; [`Error::Stopped`] (then `batch` is left empty).
    pub fn append(&self, batch: &mut AppendBatch) -> Result<Vec<Outcome>> {
        let answer = self.send_writes(Writes::Appends(std::mem::take(batch)))?;
        if let Some(back) = answer.appends {
            *batch = back;
        }
        answer.result
    }

    fn send_writes(&self, writes: Writes) -> Result<Answer> {
        self.ask(|tx| Request::Batch(writes, tx))
    }

    /// Sends the request `make` builds around a reply channel, and waits for the reply.
    fn ask<T>(&self, make: impl FnOnce(Sender<T>) -> Request) -> Result<T> {
        let (tx, rx) = mpsc::channel();
        self.tx.send(make(tx)).map_err(|_| Error::Stopped)?;
        rx.recv().map_err(|_| Error::Stopped)
    }

    /// The engine's [`MergeStats`] (merges, peak segments, write stalls), asked of the
    /// engine thread (answered during a stall too).
    ///
    /// # Errors
    /// [`Error::Stopped`].
    pub fn merge_stats(&self) -> Result<MergeStats> {
        self.ask(Request::Stats)
    }

    /// Runs [`Engine::refresh`] on the engine thread.
    ///
    /// # Errors
    /// As [`Engine::refresh`]; [`Error::Stopped`].
    pub fn refresh(&self) -> Result<()> {
        self.ask(Request::Refresh)?
    }
}

/// A test hook that holds merge threads before each job: a closed gate makes merges
/// "slow" on demand, so that stalls can be tested without timing luck.
#[derive(Debug, Clone, Default)]
struct Gate {
    #[cfg(test)]
    shut: Option<std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>>,
    /// Holds only merges above the refresh tier.
    #[cfg(test)]
    large_only: bool,
}

impl Gate {
    /// Waits while the gate is closed (never, outside tests).
    fn pass(&self, _small: bool) {
        #[cfg(test)]
        if let Some(g) = &self.shut
            && !(self.large_only && _small)
        {
            let (lock, open) = &**g;
            let mut closed = lock.lock().unwrap_or_else(|e| e.into_inner());
            while *closed {
                closed = open.wait(closed).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

/// A long-lived merge thread, and the merge it runs.
struct Worker {
    jobs: Sender<MergeJob>,
    handle: JoinHandle<()>,
    /// The merge in flight: its inputs and whether it is small (at or below the refresh
    /// tier).
    busy: Option<(Vec<u64>, bool)>,
}

/// The merge threads of a shared engine, started as merges need them. Long-lived, not
/// one per merge: a thread per merge made the allocator give each its own arena, and the
/// freed memory of every arena stayed resident (a 50M-point soak peaked at 2.4x a 10M
/// one).
struct MergePool {
    threads: usize,
    workers: Vec<Option<Worker>>,
    done: Sender<Request>,
    gate: Gate,
}

impl MergePool {
    fn new(engine: &Engine, done: Sender<Request>, gate: Gate) -> MergePool {
        let threads = engine.config().merge_threads().max(1);
        MergePool {
            threads,
            workers: (0..threads).map(|_| None).collect(),
            done,
            gate,
        }
    }

    fn busy(&self) -> impl Iterator<Item = &(Vec<u64>, bool)> {
        self.workers
            .iter()
            .filter_map(|w| w.as_ref().and_then(|w| w.busy.as_ref()))
    }

    /// Merges in flight.
    fn running(&self) -> usize {
        self.busy().count()
    }

    /// Starts the merges the policy wants on idle threads: lowest tier first, and, with
    /// two threads or more, merges above the refresh tier on all but one of them.
    fn schedule(&mut self, engine: &mut Engine) {
        loop {
            let Some(idle) = self
                .workers
                .iter()
                .position(|w| w.as_ref().is_none_or(|w| w.busy.is_none()))
            else {
                return;
            };
            let large = self.busy().filter(|(_, small)| !small).count();
            let small_only = self.threads >= 2 && large + 1 >= self.threads;
            let Some(job) = engine.plan_background_merge(small_only) else {
                return;
            };
            let ids = job.ids().to_vec();
            let small = job.is_small();
            let worker = match self.workers.get_mut(idle) {
                Some(w) => w.get_or_insert_with(|| spawn_worker(idle, &self.done, &self.gate)),
                None => return,
            };
            if worker.jobs.send(job).is_ok() {
                worker.busy = Some((ids, small));
            } else {
                // The thread is gone (it cannot be: merges are run under catch_unwind).
                // Release the job's inputs, and start a new thread with the next merge.
                engine.abandon_merge(&ids);
                if let Some(w) = self.workers.get_mut(idle) {
                    *w = None;
                }
                return;
            }
        }
    }

    /// Marks `worker` idle.
    fn finished(&mut self, worker: usize) {
        if let Some(Some(w)) = self.workers.get_mut(worker) {
            w.busy = None;
        }
    }

    /// Ends the threads (after their merges).
    fn stop(self) {
        for w in self.workers.into_iter().flatten() {
            drop(w.jobs);
            let _ = w.handle.join();
        }
    }
}

fn spawn_worker(index: usize, done: &Sender<Request>, gate: &Gate) -> Worker {
    let (jobs, queue) = mpsc::channel::<MergeJob>();
    let done = done.clone();
    let gate = gate.clone();
    let handle = std::thread::spawn(move || {
        for job in queue {
            gate.pass(job.is_small());
            let ids = job.ids().to_vec();
            // A panic in a merge (a bug) must not leave the engine thread waiting for a
            // merge that never ends: it becomes a failed merge, whose inputs stay live.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()))
                .unwrap_or(Err(Error::Stopped));
            let done_msg = Request::MergeDone {
                worker: index,
                ids,
                result,
            };
            if done.send(done_msg).is_err() {
                return;
            }
        }
    });
    Worker {
        jobs,
        handle,
        busy: None,
    }
}

/// Serves requests until shutdown (and the merges in flight are installed) or until
/// every sender is gone.
fn serve(engine: &mut Engine, rx: &Receiver<Request>, mut pool: Option<&mut MergePool>) {
    let mut pending: Option<Request> = None;
    // Batches held by a write stall, in arrival order, and when the first was held.
    let mut held: VecDeque<BatchRequest> = VecDeque::new();
    let mut held_since: Option<Instant> = None;
    // A failed merge lifts the stall until a merge succeeds: a merge that keeps failing
    // (a full disk) must not block writes for good.
    let mut merge_failed = false;
    let mut stopping = false;
    let tick = match engine.config().durability() {
        Durability::Interval(every) => Some(every),
        _ => None,
    };
    loop {
        let running = pool.as_ref().map_or(0, |p| p.running());
        if stopping && running == 0 && held.is_empty() {
            return;
        }
        // Stalled: merges are running (so the stall ends when one finishes) and more
        // than the bound wait for a thread.
        let stalled = !stopping
            && !merge_failed
            && running > 0
            && engine
                .config()
                .merge_stall()
                .is_some_and(|bound| engine.waiting_merges() > bound);
        if !stalled && let Some(since) = held_since.take() {
            engine.count_stall(since.elapsed());
        }
        let first = if !stalled && let Some((ops, reply)) = held.pop_front() {
            Request::Batch(ops, reply)
        } else if let Some(r) = pending.take() {
            r
        } else {
            let got = match tick {
                Some(every) => rx.recv_timeout(every),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match got {
                Ok(Request::Batch(_, reply)) if stopping => {
                    // Sent after the shutdown request.
                    let _ = reply.send(Answer {
                        result: Err(Error::Stopped),
                        appends: None,
                    });
                    continue;
                }
                Ok(Request::Batch(ops, reply)) if stalled => {
                    held.push_back((ops, reply));
                    held_since.get_or_insert_with(Instant::now);
                    continue;
                }
                Ok(r) => r,
                Err(RecvTimeoutError::Timeout) => {
                    // Idle for an interval: make what was acknowledged durable. A failure
                    // poisons the engine, and the next batch reports it.
                    let _ = engine.sync();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    if held.is_empty() && running == 0 {
                        return;
                    }
                    // Every sender is gone, but merges will still report (the pool
                    // holds a sender): treat it as a shutdown.
                    stopping = true;
                    continue;
                }
            }
        };
        match first {
            Request::Shutdown => stopping = true,
            Request::MergeDone {
                worker,
                ids,
                result,
            } => {
                if let Some(p) = pool.as_deref_mut() {
                    p.finished(worker);
                }
                // A failed or discarded merge leaves its inputs in place: nothing is
                // lost, and the policy will try again.
                merge_failed = match result {
                    Ok(merged) => engine.install_merge(Ok(merged)).is_err(),
                    Err(_) => {
                        engine.abandon_merge(&ids);
                        true
                    }
                };
            }
            Request::Refresh(reply) => {
                let _ = reply.send(engine.refresh());
            }
            Request::Stats(reply) => {
                let _ = reply.send(*engine.merge_stats());
            }
            Request::Series(tsid, dims, reply) => {
                let _ = reply.send(engine.series(tsid, dims));
            }
            Request::Column(name, kind, reply) => {
                let _ = reply.send(engine.column(&name, kind));
            }
            Request::Batch(ops, reply) => {
                let mut ops_group = vec![ops];
                let mut replies = vec![reply];
                // Held batches first (they came first), then the queue; batches sent
                // after a shutdown request are not part of any group.
                while ops_group.len() < MAX_GROUP {
                    if let Some((ops, reply)) = held.pop_front() {
                        ops_group.push(ops);
                        replies.push(reply);
                        continue;
                    }
                    if stopping {
                        break;
                    }
                    match rx.try_recv() {
                        Ok(Request::Batch(ops, reply)) => {
                            ops_group.push(ops);
                            replies.push(reply);
                        }
                        Ok(other) => {
                            pending = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                for (answer, reply) in engine.group(ops_group).into_iter().zip(replies) {
                    let _ = reply.send(answer);
                }
            }
        }
        if let Some(p) = pool.as_deref_mut()
            && !stopping
        {
            p.schedule(engine);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::RecvTimeoutError;
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    use tidemark_segment::Point;
    use tidemark_tsid::Tsid;

    use super::*;
    use crate::config::EngineConfig;

    const WAIT: Duration = Duration::from_secs(20);

    /// A closed gate and the handle that opens it.
    fn closed_gate(large_only: bool) -> (Gate, impl Fn()) {
        let shut = Arc::new((Mutex::new(true), Condvar::new()));
        let opener = Arc::clone(&shut);
        let open = move || {
            let (lock, cv) = &*opener;
            *lock.lock().unwrap() = false;
            cv.notify_all();
        };
        (
            Gate {
                shut: Some(shut),
                large_only,
            },
            open,
        )
    }

    /// Ten new points, one refresh's worth.
    fn batch(n: u64) -> Vec<Op> {
        (0..10)
            .map(|i| {
                let p = Point::new(Tsid::from_bytes([i as u8 + 1; 20]), n as i64 * 1000)
                    .dim("pod", format!("p{i}"))
                    .gauge("v", n as f64);
                Op::Create(p)
            })
            .collect()
    }

    fn config() -> EngineConfig {
        EngineConfig::new()
            .with_refresh_rows(10)
            .with_merge_factor(2)
            .with_merge_threads(1)
            .with_merge_stall(Some(0))
            .with_durability(Durability::Interval(Duration::from_secs(3600)))
    }

    /// A writer thread that sends `batches` one at a time and reports each answer.
    fn writer_thread(
        w: Writer,
        batches: std::ops::Range<u64>,
    ) -> Receiver<(u64, Result<Vec<Outcome>>)> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for n in batches {
                if tx.send((n, w.batch(batch(n)))).is_err() {
                    return;
                }
            }
        });
        rx
    }

    fn all_created(r: Result<Vec<Outcome>>) {
        let outcomes = r.unwrap();
        assert_eq!(outcomes.len(), 10);
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Outcome::Created { .. }))
        );
    }

    #[test]
    fn a_stall_holds_writes_until_merges_progress() {
        let dir = tempfile::tempdir().unwrap();
        let (gate, open) = closed_gate(false);
        let shared = SharedEngine::start(Engine::create(dir.path(), config()).unwrap(), gate);
        let answers = writer_thread(shared.writer(), 0..8);
        // Batches 0 and 1 make two segments, whose merge is held at the gate; 2 and 3
        // make a second merge that waits for the merge thread: more than 0 wait.
        for n in 0..4 {
            let (got, r) = answers.recv_timeout(WAIT).unwrap();
            assert_eq!(got, n);
            all_created(r);
        }
        // Batch 4 is held by the stall; the engine thread still answers other requests.
        assert!(matches!(
            answers.recv_timeout(Duration::from_millis(300)),
            Err(RecvTimeoutError::Timeout)
        ));
        let during = shared.writer().merge_stats().unwrap();
        assert_eq!(during.merges, 0);
        assert_eq!(during.write_stalls, 0, "the stall has not ended yet");
        assert!(during.peak_segments >= 4);
        open();
        for n in 4..8 {
            let (got, r) = answers.recv_timeout(WAIT).unwrap();
            assert_eq!(got, n);
            all_created(r);
        }
        let w = shared.writer();
        let again = w.batch(batch(3)).unwrap();
        assert!(again.iter().all(|o| matches!(o, Outcome::Conflict { .. })));
        let mut engine = shared.into_inner().unwrap();
        let stats = *engine.merge_stats();
        assert!(stats.write_stalls >= 1, "{stats:?}");
        assert!(stats.write_stall_nanos >= 300_000_000, "{stats:?}");
        assert!(stats.merges >= 2, "{stats:?}");
        assert_eq!(engine.live_count(), 80);
        engine.refresh().unwrap();
        drop(engine);
        let engine = Engine::open(dir.path(), config()).unwrap();
        assert_eq!(engine.live_count(), 80);
    }

    #[test]
    fn shutdown_while_stalled_answers_the_held_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (gate, open) = closed_gate(false);
        let shared = SharedEngine::start(Engine::create(dir.path(), config()).unwrap(), gate);
        let answers = writer_thread(shared.writer(), 0..6);
        for n in 0..4 {
            assert_eq!(answers.recv_timeout(WAIT).unwrap().0, n);
        }
        assert!(matches!(
            answers.recv_timeout(Duration::from_millis(300)),
            Err(RecvTimeoutError::Timeout)
        ));
        let stopper = std::thread::spawn(move || shared.into_inner());
        // The shutdown lifts the stall: batch 4 (sent before it) is applied, although
        // the merge is still held; batch 5 (sent after it) is refused.
        let (n, r) = answers.recv_timeout(WAIT).unwrap();
        assert_eq!(n, 4);
        all_created(r);
        let (n, r) = answers.recv_timeout(WAIT).unwrap();
        assert_eq!(n, 5);
        assert!(matches!(r, Err(Error::Stopped)), "{r:?}");
        assert!(!stopper.is_finished(), "it waits for the merge in flight");
        open();
        let engine = stopper.join().unwrap().unwrap();
        assert_eq!(engine.live_count(), 50);
        assert_eq!(engine.merge_stats().write_stalls, 1);
        assert_eq!(engine.merge_stats().merges, 1);
    }

    #[test]
    fn small_merges_do_not_wait_behind_a_large_one() {
        let dir = tempfile::tempdir().unwrap();
        let (gate, open) = closed_gate(true);
        let config = config().with_merge_threads(2).with_merge_stall(None);
        let shared = SharedEngine::start(Engine::create(dir.path(), config).unwrap(), gate);
        let w = shared.writer();
        let merges = || w.merge_stats().unwrap().merges;
        let wait_for = |n: u64| {
            let start = Instant::now();
            while merges() < n {
                assert!(start.elapsed() < WAIT, "{} merges, expected {n}", merges());
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        // Segments of 10 rows are at the refresh tier; a merge of two is small. Two
        // merged segments (20 rows, a tier up) make a large merge, held at the gate.
        let mut n = 0;
        for expected in 1..=5 {
            for _ in 0..2 {
                all_created(w.batch(batch(n)));
                n += 1;
            }
            // The 3rd and 4th small merges leave two merged segments: a second large
            // merge, which must not take the thread kept for small merges, or the 5th
            // small merge would wait behind it.
            wait_for(expected);
        }
        assert_eq!(merges(), 5, "the large merges are still held");
        open();
        drop(w);
        let engine = shared.into_inner().unwrap();
        assert_eq!(engine.live_count(), 100);
        assert!(engine.merge_stats().merges >= 6);
    }

    /// Ten appends by ref of the points `batch(n)` makes.
    fn refs_batch(w: &Writer, n: u64, into: &mut AppendBatch) {
        let v = w.column("v", ColumnKind::Gauge).unwrap();
        for i in 0..10u8 {
            let tsid = Tsid::from_bytes([i + 1; 20]);
            let s = w
                .series(tsid, vec![("pod".into(), format!("p{i}").into())])
                .unwrap();
            into.create(
                s,
                n as i64 * 1000,
                &[(v, tidemark_segment::MetricValue::Gauge(n as f64))],
            );
        }
    }

    #[test]
    fn writers_append_by_ref_and_get_their_batch_back() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedEngine::new(Engine::create(dir.path(), config()).unwrap());
        // Two threads append the same 40 points by ref: each is created once, whichever
        // thread comes first, and found by the other (refs are the engine's, not a
        // writer's); points by ref and points as `Op`s are the same points.
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let w = shared.writer();
                std::thread::spawn(move || {
                    let mut b = AppendBatch::new();
                    let mut outcomes = Vec::new();
                    for n in 0..4 {
                        refs_batch(&w, n, &mut b);
                        assert_eq!(b.len(), 10);
                        outcomes.extend(w.append(&mut b).unwrap());
                        assert!(b.is_empty(), "the batch comes back emptied");
                    }
                    outcomes
                })
            })
            .collect();
        let outcomes: Vec<Outcome> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let created = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Created { .. }))
            .count();
        let conflicts = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Conflict { .. }))
            .count();
        assert_eq!((created, conflicts), (40, 40), "{outcomes:?}");
        let w = shared.writer();
        assert!(
            w.batch(batch(2))
                .unwrap()
                .iter()
                .all(|o| matches!(o, Outcome::Conflict { .. }))
        );
        all_created(w.batch(batch(4)));
        // A column asked for again with another kind is refused.
        assert!(matches!(
            w.column("v", ColumnKind::Counter),
            Err(Error::Rejected { .. })
        ));
        drop(w);
        let engine = shared.into_inner().unwrap();
        assert_eq!(engine.live_count(), 50);
        drop(engine);
        let engine = Engine::open(dir.path(), config()).unwrap();
        assert_eq!(engine.live_count(), 50, "appends by ref were logged");
    }

    #[test]
    fn appends_after_shutdown_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedEngine::new(Engine::create(dir.path(), config()).unwrap());
        let w = shared.writer();
        let mut b = AppendBatch::new();
        refs_batch(&w, 0, &mut b);
        drop(shared);
        assert!(matches!(w.append(&mut b), Err(Error::Stopped)));
        assert!(matches!(
            w.series(Tsid::from_bytes([1; 20]), Vec::new()),
            Err(Error::Stopped)
        ));
    }
}
