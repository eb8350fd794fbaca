//! libFuzzer entry point of [`tidemark_fuzz::promql`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer promql`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::promql(data));
