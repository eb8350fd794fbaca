#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod config;
mod error;
pub mod etcd;
pub mod message;
pub mod query;
pub mod shard;
pub mod topology;

#[cfg(feature = "jetstream")]
pub mod cli;
#[cfg(feature = "jetstream")]
mod cluster_api;
#[cfg(feature = "jetstream")]
pub mod nats;
#[cfg(feature = "jetstream")]
pub mod owner;
#[cfg(feature = "jetstream")]
pub mod router;

pub use config::ClusterConfig;
pub use error::{Error, Result};
pub use message::{MessageWriter, ShardMessage, message_id};
pub use query::ClusterStorage;
pub use shard::{
    BadLines, Outgoing, ShardGroups, VIRTUAL_SHARDS, group_line_protocol, group_remote_write,
    shard_of_labels,
};
pub use topology::{Topology, node_key};
