#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
// A target reports a broken invariant by panicking: that is what libFuzzer, the stable
// loop of `cargo xtask fuzz` and the regression test catch and report.
#![allow(clippy::panic)]

mod checksums;
mod es;
mod files;
mod metrics;
mod promql;
mod resp;
mod scratch;
mod seeds;

pub use es::{bulk, doc, ingest, mapping, search_dsl};
pub use files::{
    bloom, bloomd_aof, bloomd_snapshot, manifest, partitions, segment, tombstones, wal,
};
pub use metrics::{line_protocol, otlp_json, otlp_proto, remote_write, remote_write_proto};
pub use promql::promql;
pub use resp::resp;
pub use seeds::seeds;

/// A fuzz target: a function that must never panic, whatever the bytes.
pub type Target = fn(&[u8]);

/// Every target by name, in the order `cargo xtask fuzz` runs them. Each name is also a
/// libFuzzer binary in `fuzz_targets/` and a directory of regression inputs in
/// `regressions/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("remote_write", remote_write),
    ("remote_write_proto", remote_write_proto),
    ("line_protocol", line_protocol),
    ("otlp_proto", otlp_proto),
    ("otlp_json", otlp_json),
    ("bulk", bulk),
    ("ingest", ingest),
    ("doc", doc),
    ("mapping", mapping),
    ("search_dsl", search_dsl),
    ("promql", promql),
    ("resp", resp),
    ("segment", segment),
    ("tombstones", tombstones),
    ("wal", wal),
    ("manifest", manifest),
    ("partitions", partitions),
    ("bloom", bloom),
    ("bloomd_snapshot", bloomd_snapshot),
    ("bloomd_aof", bloomd_aof),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// The longest input worth trying on target `name` (libFuzzer's `-max_len`, and the cap
/// of the stable loop's mutations): long enough for several records of the format,
/// short enough that a run explores structure rather than size.
pub fn max_len(name: &str) -> usize {
    match name {
        "tombstones" | "manifest" | "partitions" | "promql" => 4 << 10,
        "segment" | "wal" | "bloom" | "bloomd_snapshot" | "ingest" => 64 << 10,
        _ => 16 << 10,
    }
}
