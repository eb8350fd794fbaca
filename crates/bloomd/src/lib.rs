#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod bf;
pub mod cmd;
pub mod config;
mod error;
pub mod glob;
pub mod persist;
pub mod resp;
pub mod server;
pub mod store;

pub use config::{AppendFsync, Config};
pub use error::{Error, Result};
pub use server::run;
