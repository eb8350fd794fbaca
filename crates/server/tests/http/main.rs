//! The server over a real socket on 127.0.0.1: the `tidemark-server` binary started on
//! a temporary data directory, driven with an HTTP client.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::zombie_processes
)]

mod admin;
mod body_limits;
mod cardinality;
mod crash;
mod deep_inputs;
mod delete;
mod disk_full;
mod expectations;
mod lake;
mod line_protocols;
mod metrics;
mod monitoring;
mod multi_search;
mod pit;
mod protocol_auth;
mod reads;
mod snapshot;
mod support;
mod tenants;
mod tsdb_status;
mod ui;
mod vm_bulk;
mod writes;
