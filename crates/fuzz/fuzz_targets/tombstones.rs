//! libFuzzer entry point of [`tidemark_fuzz::tombstones`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer tombstones`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::tombstones(data));
