//! libFuzzer entry point of [`tidemark_fuzz::wal`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer wal`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::wal(data));
