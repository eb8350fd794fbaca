//! libFuzzer entry point of [`tidemark_fuzz::search_dsl`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer search_dsl`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::search_dsl(data));
