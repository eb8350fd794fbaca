//! libFuzzer entry point of [`tidemark_fuzz::remote_write_proto`]:
//! `cargo +nightly fuzz run --fuzz-dir crates/fuzz --features libfuzzer remote_write_proto`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::remote_write_proto(data));
