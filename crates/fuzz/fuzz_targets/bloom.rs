//! libFuzzer entry point of [`tidemark_fuzz::bloom`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer bloom`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::bloom(data));
