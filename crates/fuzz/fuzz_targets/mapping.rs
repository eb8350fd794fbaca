//! libFuzzer entry point of [`tidemark_fuzz::mapping`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer mapping`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::mapping(data));
