//! Streaming NDJSON and `_bulk` ingest in bounded memory, with parsing spread over
//! threads when there are cores for it.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::bulk::{Action, BulkItem, ItemResult, ItemStatus, looks_like_action, parse_action};
use crate::counters::ItemCounts;
use crate::doc::DocParser;
use crate::error::{Error, Result};
use crate::index::{Index, Prepared};

/// The input format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputFormat {
    /// One JSON document per line.
    #[default]
    Ndjson,
    /// Elasticsearch `_bulk`: an action line, then (except for `delete`) a document line.
    Bulk,
}

/// How [`Index::ingest`] runs.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Input format.
    pub format: InputFormat,
    /// For NDJSON: [`Action::Create`] (default: duplicates are 409 no-ops) or
    /// [`Action::Index`] (replace).
    pub op: Action,
    /// Parsing threads for NDJSON: 1 parses on the calling thread; more start that many
    /// parser threads, a reader thread, and apply on the calling thread; 0 (the default)
    /// starts one parser per core (none on a single core): parsing a document costs about
    /// twice what applying it does, so the applying thread shares a core with a parser
    /// rather than leaving one core to itself. Results are the same whatever the count:
    /// documents are applied in input order.
    pub threads: usize,
    /// Lines read, parsed and applied together (one engine batch, one log write).
    pub chunk_lines: usize,
    /// Errors kept in full in the summary; the others are counted.
    pub max_reported_errors: usize,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            format: InputFormat::Ndjson,
            op: Action::Create,
            threads: 0,
            chunk_lines: 4096,
            max_reported_errors: 10,
        }
    }
}

/// Where an ingest stands, for a progress bar.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// Input bytes applied.
    pub bytes: u64,
    /// Input lines applied.
    pub lines: u64,
    /// Items applied.
    pub items: u64,
}

/// What an ingest did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IngestSummary {
    /// Input lines read (blank ones included).
    pub lines: u64,
    /// Items (documents, or bulk actions).
    pub items: u64,
    /// The items by result.
    pub counts: ItemCounts,
    /// The first errors: `(line, reason)`.
    pub first_errors: Vec<(u64, String)>,
    /// Wall time.
    pub elapsed: Duration,
}

impl IngestSummary {
    /// Items per second of wall time.
    pub fn docs_per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 { self.items as f64 / s } else { 0.0 }
    }

    /// Adds one item result.
    pub fn add(&mut self, r: &ItemResult, max_reported: usize) {
        self.items += 1;
        self.counts.count(&r.status);
        if let ItemStatus::Error(reason) = &r.status
            && self.first_errors.len() < max_reported
        {
            self.first_errors.push((r.line, reason.clone()));
        }
    }

    /// Adds another summary (of the next file).
    pub fn merge(&mut self, o: &IngestSummary, max_reported: usize) {
        self.lines += o.lines;
        self.items += o.items;
        self.counts.add(&o.counts);
        self.elapsed += o.elapsed;
        for e in &o.first_errors {
            if self.first_errors.len() < max_reported {
                self.first_errors.push(e.clone());
            }
        }
    }

    /// The summary as one JSON object.
    pub fn to_json(&self) -> Value {
        let mut out = json!({
            "lines": self.lines,
            "items": self.items,
            "first_errors": self.first_errors.iter().map(|(l, r)| json!({"line": l, "reason": r})).collect::<Vec<_>>(),
            "elapsed_ms": self.elapsed.as_millis() as u64,
            "docs_per_sec": self.docs_per_sec().round(),
        });
        if let Value::Object(o) = &mut out {
            for (name, n) in self.counts.pairs() {
                o.insert(name.to_owned(), json!(n));
            }
        }
        out
    }
}

/// A chunk of input lines: their bytes and where each ends.
struct Chunk {
    first_line: u64,
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Chunk {
    fn lines(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let mut start = 0;
        self.ends.iter().enumerate().map(move |(i, &end)| {
            let line = self.bytes.get(start..end).unwrap_or_default();
            start = end;
            (self.first_line + i as u64, trim_line(line))
        })
    }
}

fn trim_line(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., b'\n' | b'\r'] = line {
        line = rest;
    }
    line
}

/// Reads up to `max` lines into a chunk; `None` at end of input.
fn read_chunk(r: &mut impl BufRead, first_line: u64, max: usize) -> Result<Option<Chunk>> {
    let mut c = Chunk {
        first_line,
        bytes: Vec::with_capacity(max * 256),
        ends: Vec::with_capacity(max),
    };
    Ok(refill(r, &mut c, first_line, max)?.then_some(c))
}

/// Refills `c` with up to `max` lines, reusing its buffers; `false` at end of input.
fn refill(r: &mut impl BufRead, c: &mut Chunk, first_line: u64, max: usize) -> Result<bool> {
    c.first_line = first_line;
    c.bytes.clear();
    c.ends.clear();
    while c.ends.len() < max {
        let n = r.read_until(b'\n', &mut c.bytes).map_err(Error::Input)?;
        if n == 0 {
            break;
        }
        c.ends.push(c.bytes.len());
    }
    Ok(!c.ends.is_empty())
}

/// The chunk's documents, parsed; `ids`: whether their results carry the `_id` text
/// (only a caller that reads each item's result needs it).
/// The applying thread's side of an ingest's refresh thread: one refresh at a time, its
/// segment installed by the applying thread (the index is its alone).
struct Refresher<'r> {
    jobs: std::sync::mpsc::SyncSender<tidemark_dedup::PartRefreshJob>,
    written: &'r Receiver<tidemark_dedup::PartRefreshed>,
    running: bool,
}

impl Refresher<'_> {
    /// After a chunk: installs a finished refresh, starts the next one due, and waits
    /// for the one running while the buffers hold more than it keeps up with (memory
    /// stays bounded as with inline refreshes).
    fn keep_up(&mut self, index: &mut Index) -> Result<()> {
        if self.running
            && let Ok(done) = self.written.try_recv()
        {
            self.running = false;
            index.install_refresh(done)?;
        }
        while self.running && index.refresh_backlog() {
            self.wait(index)?;
        }
        if !self.running
            && let Some(job) = index.plan_refresh()?
        {
            self.jobs.send(job).map_err(|_| refresher_gone())?;
            self.running = true;
        }
        Ok(())
    }

    /// Waits for the refresh running and installs it.
    fn wait(&mut self, index: &mut Index) -> Result<()> {
        let done = self.written.recv().map_err(|_| refresher_gone())?;
        self.running = false;
        index.install_refresh(done)
    }

    /// Installs the refresh still running, and ends the thread.
    fn finish(mut self, index: &mut Index) -> Result<()> {
        if self.running {
            self.wait(index)?;
        }
        Ok(())
    }
}

fn refresher_gone() -> Error {
    Error::ThreadStopped("refresh")
}

fn prepare_ndjson(parser: &mut DocParser, chunk: &Chunk, op: Action, ids: bool) -> Vec<Prepared> {
    // Sized once: a filtered iterator's `collect` would grow it by doubling.
    let mut out = Vec::with_capacity(chunk.ends.len());
    out.extend(
        chunk
            .lines()
            .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
            .map(|(n, l)| Prepared::of_line(parser, n, op, l, ids)),
    );
    out
}

impl Index {
    /// Ingests NDJSON documents from `reader` with `op` (`create` or `index`), streaming
    /// in bounded memory. See [`ingest`](Self::ingest).
    ///
    /// # Errors
    /// As [`ingest`](Self::ingest).
    pub fn ingest_ndjson(
        &mut self,
        reader: impl BufRead + Send,
        op: Action,
    ) -> Result<IngestSummary> {
        let options = IngestOptions {
            op,
            ..IngestOptions::default()
        };
        self.ingest(reader, &options, &mut |_| {})
    }

    /// Ingests NDJSON or `_bulk` input from `reader`, a chunk of lines at a time (memory
    /// is bounded by the chunk size and the queue depth, not the input). A malformed or
    /// invalid line is an error item with its line number; the rest still goes in.
    /// `progress` is called after each chunk.
    ///
    /// # Errors
    /// Input read errors and engine errors (the items of the chunks applied before stay
    /// applied).
    pub fn ingest(
        &mut self,
        reader: impl BufRead + Send,
        options: &IngestOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<IngestSummary> {
        // Nobody reads the items' results: their `_id` texts are not made.
        self.ingest_with(reader, options, progress, None)
    }

    /// [`ingest`](Self::ingest), also handing each item's result to `on_item`, in input
    /// order (as the items of an Elasticsearch bulk response).
    ///
    /// # Errors
    /// As [`ingest`](Self::ingest).
    pub fn ingest_items(
        &mut self,
        reader: impl BufRead + Send,
        options: &IngestOptions,
        progress: &mut dyn FnMut(Progress),
        on_item: &mut dyn FnMut(&ItemResult),
    ) -> Result<IngestSummary> {
        self.ingest_with(reader, options, progress, Some(on_item))
    }

    fn ingest_with(
        &mut self,
        mut reader: impl BufRead + Send,
        options: &IngestOptions,
        progress: &mut dyn FnMut(Progress),
        on_item: Option<&mut dyn FnMut(&ItemResult)>,
    ) -> Result<IngestSummary> {
        let ids = on_item.is_some();
        let mut ignore = |_: &ItemResult| {};
        let on_item: &mut dyn FnMut(&ItemResult) = match on_item {
            Some(f) => f,
            None => &mut ignore,
        };
        let start = Instant::now();
        let chunk_lines = options.chunk_lines.max(1);
        // Parser threads; 0 means serial parsing on this thread.
        let parsers = match options.threads {
            0 => match std::thread::available_parallelism().map_or(1, |n| n.get()) {
                1 => 0,
                n => n,
            },
            1 => 0,
            n => n,
        };
        let mut summary = IngestSummary::default();
        let ignored_before = self.counters().items.ignored_fields;
        let result = match options.format {
            InputFormat::Bulk => self.ingest_bulk(
                &mut reader,
                chunk_lines,
                options,
                &mut summary,
                progress,
                on_item,
            ),
            InputFormat::Ndjson if parsers == 0 => self.ingest_serial(
                &mut reader,
                chunk_lines,
                options,
                ids,
                &mut summary,
                progress,
                on_item,
            ),
            InputFormat::Ndjson => self.ingest_parallel(
                reader,
                parsers,
                options,
                ids,
                &mut summary,
                progress,
                on_item,
            ),
        };
        summary.counts.ignored_fields = self.counters().items.ignored_fields - ignored_before;
        summary.elapsed = start.elapsed();
        self.save_counters()?;
        result.map(|()| summary)
    }

    fn apply_into(
        &mut self,
        prepared: Vec<Prepared>,
        summary: &mut IngestSummary,
        max_reported: usize,
        on_item: &mut dyn FnMut(&ItemResult),
    ) -> Result<()> {
        self.apply(prepared, &mut |r| {
            summary.add(&r, max_reported);
            on_item(&r);
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn ingest_serial(
        &mut self,
        reader: &mut impl BufRead,
        chunk_lines: usize,
        options: &IngestOptions,
        ids: bool,
        summary: &mut IngestSummary,
        progress: &mut dyn FnMut(Progress),
        on_item: &mut dyn FnMut(&ItemResult),
    ) -> Result<()> {
        let mut parser = self.parser();
        let mut done = Progress::default();
        let mut chunk = Chunk {
            first_line: 1,
            bytes: Vec::new(),
            ends: Vec::new(),
        };
        while refill(reader, &mut chunk, summary.lines + 1, chunk_lines)? {
            summary.lines += chunk.ends.len() as u64;
            let prepared = prepare_ndjson(&mut parser, &chunk, options.op, ids);
            self.apply_into(prepared, summary, options.max_reported_errors, on_item)?;
            done.bytes += chunk.bytes.len() as u64;
            done.lines = summary.lines;
            done.items = summary.items;
            progress(done);
        }
        Ok(())
    }

    /// A reader thread fills chunks, `threads` parser threads turn them into points, and
    /// the calling thread applies them in input order; a refresh thread writes the
    /// segments (unless the caller runs refreshes off the write path already), so the
    /// applying thread, which every chunk passes through, never stops for one.
    #[allow(clippy::too_many_arguments)]
    fn ingest_parallel<R: BufRead + Send>(
        &mut self,
        mut reader: R,
        threads: usize,
        options: &IngestOptions,
        ids: bool,
        summary: &mut IngestSummary,
        progress: &mut dyn FnMut(Progress),
        on_item: &mut dyn FnMut(&ItemResult),
    ) -> Result<()> {
        let chunk_lines = options.chunk_lines.max(1);
        let (chunk_tx, chunk_rx) = sync_channel::<(u64, Chunk)>(threads * 2);
        let chunk_rx: Arc<Mutex<Receiver<(u64, Chunk)>>> = Arc::new(Mutex::new(chunk_rx));
        let (done_tx, done_rx) = sync_channel::<(u64, u64, u64, Vec<Prepared>)>(threads * 2);
        let read_error: Mutex<Option<Error>> = Mutex::new(None);
        let parser = self.parser();
        let op = options.op;
        let mut apply_error = None;
        let own_refresh = !self.background_refresh();
        if own_refresh {
            self.set_background_refresh(true);
        }
        let (job_tx, job_rx) = sync_channel::<tidemark_dedup::PartRefreshJob>(1);
        let (written_tx, written_rx) = sync_channel::<tidemark_dedup::PartRefreshed>(1);
        std::thread::scope(|s| {
            let read_error = &read_error;
            if own_refresh {
                s.spawn(move || {
                    for job in job_rx.iter() {
                        if written_tx.send(job.run()).is_err() {
                            return;
                        }
                    }
                });
            } else {
                drop((job_rx, written_tx));
            }
            let mut refresher = own_refresh.then(|| Refresher {
                jobs: job_tx,
                written: &written_rx,
                running: false,
            });
            s.spawn(move || {
                let mut seq = 0u64;
                let mut line = 1u64;
                loop {
                    match read_chunk(&mut reader, line, chunk_lines) {
                        Ok(Some(chunk)) => {
                            line += chunk.ends.len() as u64;
                            if chunk_tx.send((seq, chunk)).is_err() {
                                return;
                            }
                            seq += 1;
                        }
                        Ok(None) => return,
                        Err(e) => {
                            if let Ok(mut slot) = read_error.lock() {
                                *slot = Some(e);
                            }
                            return;
                        }
                    }
                }
            });
            for _ in 0..threads {
                let rx = Arc::clone(&chunk_rx);
                let tx = done_tx.clone();
                let mut parser = parser.clone();
                s.spawn(move || {
                    loop {
                        let job = match rx.lock() {
                            Ok(guard) => guard.recv(),
                            Err(_) => return,
                        };
                        let Ok((seq, chunk)) = job else { return };
                        let prepared = prepare_ndjson(&mut parser, &chunk, op, ids);
                        let sizes = (chunk.ends.len() as u64, chunk.bytes.len() as u64);
                        if tx.send((seq, sizes.0, sizes.1, prepared)).is_err() {
                            return;
                        }
                    }
                });
            }
            drop(done_tx);
            // Only the parsers hold the chunk receiver now: once they stop (the writer
            // failed), the reader's sends fail and it stops too.
            drop(chunk_rx);
            let mut next = 0u64;
            let mut waiting: BTreeMap<u64, (u64, u64, Vec<Prepared>)> = BTreeMap::new();
            let mut done = Progress::default();
            'recv: for (seq, lines, bytes, prepared) in done_rx.iter() {
                waiting.insert(seq, (lines, bytes, prepared));
                while let Some((lines, bytes, prepared)) = waiting.remove(&next) {
                    next += 1;
                    summary.lines += lines;
                    let applied = self
                        .apply_into(prepared, summary, options.max_reported_errors, on_item)
                        .and_then(|()| match &mut refresher {
                            Some(r) => r.keep_up(self),
                            None => Ok(()),
                        });
                    if let Err(e) = applied {
                        apply_error = Some(e);
                        break 'recv;
                    }
                    done.bytes += bytes;
                    done.lines = summary.lines;
                    done.items = summary.items;
                    progress(done);
                }
            }
            // Dropping the receiver stops the parsers, whose failed sends stop the reader.
            drop(done_rx);
            // The refresh under way is installed; dropping the job sender ends the thread.
            if let Some(r) = refresher.take()
                && let Err(e) = r.finish(self)
                && apply_error.is_none()
            {
                apply_error = Some(e);
            }
        });
        if own_refresh {
            self.set_background_refresh(false);
        }
        if let Some(e) = apply_error {
            return Err(e);
        }
        match read_error.into_inner() {
            Ok(Some(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// `_bulk` input: pairs of action and document lines (a `delete` has no document).
    fn ingest_bulk(
        &mut self,
        reader: &mut impl BufRead,
        chunk_lines: usize,
        options: &IngestOptions,
        summary: &mut IngestSummary,
        progress: &mut dyn FnMut(Progress),
        on_item: &mut dyn FnMut(&ItemResult),
    ) -> Result<()> {
        let mut parser = self.parser();
        let mut done = Progress::default();
        // An action whose document line is in the next chunk.
        let mut carry: Option<(u64, Action, Option<String>)> = None;
        while let Some(chunk) = read_chunk(reader, summary.lines + 1, chunk_lines)? {
            summary.lines += chunk.ends.len() as u64;
            let mut prepared = Vec::new();
            let mut lines = chunk.lines().peekable();
            while let Some((n, line)) = lines.next() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let text = match std::str::from_utf8(line) {
                    Ok(t) => t,
                    Err(e) => {
                        carry = None;
                        prepared.push(Prepared::failed(
                            n,
                            Action::Create,
                            format!("not valid UTF-8: {e}"),
                        ));
                        continue;
                    }
                };
                if let Some((action_line, action, id)) = carry.take() {
                    let item = match crate::doc::strict_value(text) {
                        Ok(doc) => BulkItem {
                            line: action_line,
                            action,
                            id,
                            doc: Some(doc),
                        },
                        Err(e) => {
                            prepared.push(Prepared::failed(
                                n,
                                action,
                                format!("malformed JSON: {e}"),
                            ));
                            continue;
                        }
                    };
                    prepared.push(Prepared::of_item(&mut parser, item));
                    continue;
                }
                match parse_action(text) {
                    Ok((Action::Delete, id)) => prepared.push(Prepared::of_item(
                        &mut parser,
                        BulkItem {
                            line: n,
                            action: Action::Delete,
                            id,
                            doc: None,
                        },
                    )),
                    Ok((action, id)) => carry = Some((n, action, id)),
                    Err(e) => {
                        prepared.push(Prepared::failed(n, Action::Create, e.to_string()));
                        // Skip the document line that followed the broken action, if any.
                        if let Some((_, next)) = lines.peek() {
                            let next_is_action = looks_like_action(next);
                            if !next_is_action {
                                lines.next();
                            }
                        }
                    }
                }
            }
            self.apply_into(prepared, summary, options.max_reported_errors, on_item)?;
            done.bytes += chunk.bytes.len() as u64;
            done.lines = summary.lines;
            done.items = summary.items;
            progress(done);
        }
        if let Some((line, action, id)) = carry {
            let r = Prepared::failed(
                line,
                action,
                format!("`{}` action without a document line", action.name()),
            );
            let _ = id;
            self.apply_into(vec![r], summary, options.max_reported_errors, on_item)?;
        }
        Ok(())
    }
}
