//! Criterion benchmarks of the Tidemark crates against their peers; see `benches/`.
//!
//! Run `cargo bench -p tidemark-benches --bench bloom`, then `cargo xtask bloom-report`
//! to turn the medians into the table of `docs/results/bloom.md`.
