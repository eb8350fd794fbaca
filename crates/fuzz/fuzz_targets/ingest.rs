//! libFuzzer entry point of [`tidemark_fuzz::ingest`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer ingest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::ingest(data));
