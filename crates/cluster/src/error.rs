//! The crate's error type.

/// What can go wrong in the router, the shard owner, the message format or the etcd client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid: what and why.
    #[error("invalid cluster configuration: {0}")]
    Config(String),
    /// A request the router refuses (a client error: not retried).
    #[error("{0}")]
    BadRequest(String),
    /// A shard message that is not in the format: where it breaks.
    #[error("invalid shard message: {0}")]
    Message(String),
    /// A shard message whose checksum does not match its bytes.
    #[error("shard message checksum mismatch: expected {expected:#010x}, got {got:#010x}")]
    ChecksumMismatch {
        /// The checksum the message carries.
        expected: u32,
        /// The checksum of its bytes.
        got: u32,
    },
    /// An etcd request failed (every endpoint tried) or answered something unexpected.
    #[error("etcd: {0}")]
    Etcd(String),
    /// A shard this node is configured to own was first assigned to another node: it is
    /// never moved silently (a series would then live on two owners).
    #[error("shard {shard} is assigned to node {owner:?}, not to this node ({node:?})")]
    AssignedElsewhere {
        /// The shard.
        shard: u32,
        /// The node etcd records as its owner.
        owner: String,
        /// This node.
        node: String,
    },
    /// A NATS or JetStream operation failed.
    #[error("nats: {0}")]
    Nats(String),
    /// The local store refused or failed a write.
    #[error("store: {0}")]
    Store(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
