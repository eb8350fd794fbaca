//! End-to-end NDJSON ingest: bytes of Kubernetes documents (8 metrics, from
//! `tidemark-datagen`) → mapping → points → the engine (write-ahead log, dedup check,
//! refreshes), with one parsing thread and with the cores available, fsyncing the log at
//! most once a second as `tidemark ingest` does.
//!
//! `cargo bench -p tidemark --bench ingest`; `TIDEMARK_BENCH_DOCS` sets the document
//! count (default 200,000). `parse_line_k8s` times the document parser alone on the
//! first 50,000 lines.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tidemark::dedup::{Durability, EngineConfig};
use tidemark::{Action, Index, IngestOptions, Mapping};
use tidemark_datagen::{Dataset, Options};

// As the `tidemark` binary: see docs/results/ingest.md.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn documents(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for line in Dataset::k8s(Options::default().points(n)).ndjson() {
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out
}

fn mapping() -> Mapping {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tidemark/k8s-datagen.mapping.json");
    Mapping::from_json_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn bench(c: &mut Criterion) {
    let n: u64 = std::env::var("TIDEMARK_BENCH_DOCS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let input = documents(n);
    let mut group = c.benchmark_group("ingest_ndjson_k8s");
    group.throughput(Throughput::Elements(n));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    for (name, threads) in [("1_thread", 1), ("auto_threads", 0)] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().unwrap();
                    // As `tidemark ingest`: the log is fsynced at most once a second.
                    let config = EngineConfig::new()
                        .with_durability(Durability::Interval(Duration::from_secs(1)));
                    let index = Index::create_with_config(dir.path().join("ix"), mapping(), config)
                        .unwrap();
                    (dir, index)
                },
                |(dir, mut index)| {
                    let options = IngestOptions {
                        op: Action::Create,
                        threads,
                        ..IngestOptions::default()
                    };
                    let s = index.ingest(&input[..], &options, &mut |_| {}).unwrap();
                    assert_eq!(s.counts.created, n);
                    black_box(s);
                    (dir, index)
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();

    // Parsing alone (the scanner's fast path): one document line into a point.
    let lines: Vec<&str> = std::str::from_utf8(&input)
        .unwrap()
        .lines()
        .take(50_000)
        .collect();
    let mut parser = tidemark::DocParser::new(mapping().into()).unwrap();
    let mut group = c.benchmark_group("parse_line_k8s");
    group.throughput(Throughput::Elements(lines.len() as u64));
    group.sample_size(20);
    group.bench_function("fast_path", |b| {
        b.iter(|| {
            for line in &lines {
                black_box(parser.parse_line(line).unwrap());
            }
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
