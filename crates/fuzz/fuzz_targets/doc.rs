//! libFuzzer entry point of [`tidemark_fuzz::doc`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer doc`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::doc(data));
