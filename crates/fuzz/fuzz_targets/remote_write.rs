//! libFuzzer entry point of [`tidemark_fuzz::remote_write`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer remote_write`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::remote_write(data));
