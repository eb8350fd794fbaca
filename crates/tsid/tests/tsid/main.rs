//! Integration tests of tidemark-tsid, one binary with a module per area.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod dimensions;
mod errors;
mod event;
mod golden;
mod props;
mod synthetic;

use tidemark_tsid::{TsidBuilder, TsidComputer};

/// The configuration the fixtures under `fixtures/tsid/` are computed with.
pub fn fixture_computer() -> TsidComputer {
    TsidBuilder::new()
        .dimensions(["host.name", "region", "zone.id", "pid", "up"])
        .ip_dimension("host.ip")
        .build()
        .unwrap()
}

/// Reads a fixture file of the workspace's `fixtures/tsid/`.
pub fn fixture(name: &str) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tsid")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}
