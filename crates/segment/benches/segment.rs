//! Criterion benchmarks of the segment format (filled in below).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
fn main() {}
