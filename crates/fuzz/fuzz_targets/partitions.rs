//! libFuzzer entry point of [`tidemark_fuzz::partitions`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer partitions`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::partitions(data));
