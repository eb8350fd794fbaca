//! libFuzzer entry point of [`tidemark_fuzz::otlp_proto`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer otlp_proto`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::otlp_proto(data));
