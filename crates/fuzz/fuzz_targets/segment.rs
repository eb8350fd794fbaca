//! libFuzzer entry point of [`tidemark_fuzz::segment`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer segment`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::segment(data));
