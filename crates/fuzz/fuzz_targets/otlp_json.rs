//! libFuzzer entry point of [`tidemark_fuzz::otlp_json`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer otlp_json`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::otlp_json(data));
