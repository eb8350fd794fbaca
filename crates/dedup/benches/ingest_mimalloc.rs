//! Engine-level ingest with mimalloc as the global allocator (see
//! `ingest_suite/mod.rs`): the engine's per-point work is dominated by freeing the
//! points' strings at refresh, which glibc's malloc makes costly (consolidation of its
//! fast bins); an application such as the `tidemark` CLI can choose its allocator.
//!
//! `cargo bench -p tidemark-dedup --bench ingest_mimalloc`; results in
//! `docs/results/dedup.md`.
#![allow(missing_docs)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "ingest_suite/mod.rs"]
mod suite;

fn bench(c: &mut criterion::Criterion) {
    suite::bench(c, "ingest-mimalloc", false);
}

criterion::criterion_group!(benches, bench);
criterion::criterion_main!(benches);
