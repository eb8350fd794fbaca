//! libFuzzer entry point of [`tidemark_fuzz::bloomd_snapshot`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer bloomd_snapshot`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::bloomd_snapshot(data));
