#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The workspace forbids unsafe code; this crate's one exception is `gunzip.rs`, the call
// into libdeflate (see its module docs).
#![deny(unsafe_code)]

mod auth;
pub mod cli;
mod config;
pub mod disk;
mod error;
pub mod es;
mod gunzip;
pub mod http;
mod lake;
pub mod memory;
pub mod metrics;
pub mod prom;
mod registry;
pub mod routes;
mod selfmon;
mod server;
pub mod state;
mod ui;

pub use auth::{Credentials, Principal, authenticate, authenticate_request, glob_match};
pub use config::{
    ApiKey, Config, DEFAULT_BODY_BYTES_IN_FLIGHT, DEFAULT_LISTEN, DEFAULT_MAX_CONTENT_LENGTH,
    DEFAULT_MAX_SERIES_PER_REQUEST, User,
};
pub use error::{Error, Result};
pub use registry::{INDICES_DIR, IndexHandle, IndexState, Registry, TEMPLATES_FILE};
pub use server::Server;
