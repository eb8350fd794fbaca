//! libFuzzer entry point of [`tidemark_fuzz::bulk`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer bulk`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::bulk(data));
