//! libFuzzer entry point of [`tidemark_fuzz::resp`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer resp`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::resp(data));
