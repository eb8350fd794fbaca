//! Parsing on several threads gives exactly what parsing on one gives: same summary,
//! same error lines, same stored documents.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use tidemark::{Action, Index, IngestOptions, Mapping, Query};
use tidemark_datagen::{Dataset, Options};

fn input() -> Vec<u8> {
    let ds = Dataset::k8s(
        Options::default()
            .points(6_000)
            .series(300)
            .dup_rate(0.1)
            .shuffle_keys(true),
    );
    let mut out = Vec::new();
    for (i, line) in ds.ndjson().enumerate() {
        // Some malformed and invalid lines among the documents.
        match i % 997 {
            13 => out.extend_from_slice(b"{\"@timestamp\": 1, \"broken\"\n"),
            500 => out.extend_from_slice(b"{\"@timestamp\": \"soon\", \"k8s\": {}}\n"),
            _ => {}
        }
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out
}

fn mapping() -> Mapping {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tidemark/k8s-datagen.mapping.json");
    Mapping::from_json_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn parallel_parsing_equals_serial() {
    let input = input();
    let mut results = Vec::new();
    for threads in [1, 2, 5] {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::create(dir.path().join("ix"), mapping()).unwrap();
        let options = IngestOptions {
            op: Action::Create,
            threads,
            chunk_lines: 97,
            max_reported_errors: 100,
            ..IngestOptions::default()
        };
        let mut progress_calls = 0;
        let mut s = index
            .ingest(&input[..], &options, &mut |_| progress_calls += 1)
            .unwrap();
        assert!(progress_calls > 50);
        s.elapsed = Default::default();
        let docs = index.search(&Query::default()).unwrap();
        results.push((threads, s, docs));
    }
    let (_, first, first_docs) = &results[0];
    assert!(
        first.counts.duplicates > 0 && first.counts.errors > 0,
        "{first:?}"
    );
    assert_eq!(
        first.counts.created + first.counts.duplicates + first.counts.errors,
        first.items
    );
    for (threads, s, docs) in &results[1..] {
        assert_eq!(s, first, "threads {threads}");
        assert_eq!(docs, first_docs, "threads {threads}");
    }
}

/// A reader that fails after `ok` bytes.
struct FailingReader {
    data: Vec<u8>,
    pos: usize,
    ok: usize,
}

impl std::io::Read for FailingReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.ok {
            return Err(std::io::Error::other("disk on fire"));
        }
        let n = buf
            .len()
            .min(self.ok - self.pos)
            .min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[test]
fn a_read_error_stops_the_ingest_without_hanging_and_keeps_what_went_in() {
    let input = input();
    for threads in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let mut index = Index::create(dir.path().join("ix"), mapping()).unwrap();
        let reader = std::io::BufReader::with_capacity(
            4096,
            FailingReader {
                ok: input.len() / 2,
                data: input.clone(),
                pos: 0,
            },
        );
        let options = IngestOptions {
            threads,
            chunk_lines: 50,
            ..IngestOptions::default()
        };
        let err = index.ingest(reader, &options, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("disk on fire"), "{err}");
        // The chunks read before the error are stored.
        let stored = index.search(&Query::default()).unwrap().len();
        assert!(stored > 1_000, "threads {threads}: {stored}");
    }
}

/// With a small refresh budget the parallel ingest writes its segments on its refresh
/// thread: the summary and the stored documents equal a serial ingest's (whose
/// refreshes run inline), segments were written, and all of it is there after reopening.
#[test]
fn refreshes_off_the_applying_thread_store_what_inline_refreshes_store() {
    let input = input();
    let config = || tidemark::dedup::EngineConfig::new().with_refresh_rows(700);
    let mut results = Vec::new();
    for threads in [1, 2, 4] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ix");
        let mut index = Index::create_with_config(&path, mapping(), config()).unwrap();
        let options = IngestOptions {
            threads,
            chunk_lines: 113,
            max_reported_errors: 100,
            ..IngestOptions::default()
        };
        let mut s = index.ingest(&input[..], &options, &mut |_| {}).unwrap();
        s.elapsed = Default::default();
        assert!(!index.background_refresh(), "threads {threads}: restored");
        let segments = index.stats().unwrap().segments;
        assert!(segments >= 3, "threads {threads}: {segments} segments");
        let docs = index.search(&Query::default()).unwrap();
        drop(index);
        let reopened = Index::open_with_config(&path, config()).unwrap();
        assert_eq!(
            reopened.search(&Query::default()).unwrap(),
            docs,
            "threads {threads}: after reopening"
        );
        results.push((threads, s, docs));
    }
    let (_, first, first_docs) = &results[0];
    assert!(first.counts.created > 5_000, "{first:?}");
    for (threads, s, docs) in &results[1..] {
        assert_eq!(s, first, "threads {threads}");
        assert_eq!(docs, first_docs, "threads {threads}");
    }
}
