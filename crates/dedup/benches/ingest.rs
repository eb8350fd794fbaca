//! Engine-level ingest with the system allocator (see `ingest_suite/mod.rs`); the dedup
//! counters of one run of each case are printed first.
//!
//! `cargo bench -p tidemark-dedup --bench ingest`; results in `docs/results/dedup.md`.
#![allow(missing_docs)]

#[path = "ingest_suite/mod.rs"]
mod suite;

fn bench(c: &mut criterion::Criterion) {
    suite::bench(c, "ingest", true);
}

criterion::criterion_group!(benches, bench);
criterion::criterion_main!(benches);
