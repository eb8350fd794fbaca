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
mod disk_full;
mod expectations;
mod metrics;
mod monitoring;
mod protocol_auth;
mod reads;
mod support;
mod tenants;
mod ui;
mod writes;
