//! libFuzzer entry point of [`tidemark_fuzz::manifest`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::manifest(data));
