//! libFuzzer entry point of [`tidemark_fuzz::line_protocol`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer line_protocol`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::line_protocol(data));
