#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The workspace forbids unsafe code; this crate's one exception is `gunzip.rs`, the call
// into libdeflate (see its module docs).
#![deny(unsafe_code)]

pub mod api;
mod auth;
pub mod cli;
mod config;
mod delete;
pub mod disk;
mod error;
pub mod graphite;
mod gunzip;
pub mod http;
mod lake;
pub mod line_protocol;
mod metrics;
pub mod multi;
pub mod opentsdb;
pub mod otlp;
mod pit;
pub mod prom_api;
mod prom_metadata;
pub mod protocol;
mod registry;
pub mod remote_write;
pub mod search;
mod selfmon;
mod series_cache;
mod server;
pub mod snapshot;
mod tcp;
mod tsdb_status;
mod ui;
mod vm_api;
pub mod vm_format;

pub use auth::{Credentials, Principal, authenticate, authenticate_request, glob_match};
pub use config::{
    ApiKey, Config, DEFAULT_BODY_BYTES_IN_FLIGHT, DEFAULT_LISTEN, DEFAULT_MAX_CONTENT_LENGTH,
    DEFAULT_MAX_SERIES_PER_REQUEST, User,
};
pub use error::{Error, Result};
pub use registry::{INDICES_DIR, IndexHandle, IndexState, Registry, TEMPLATES_FILE};
pub use server::Server;
