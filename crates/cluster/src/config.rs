//! One configuration file per node (TOML): the NATS and etcd endpoints every node names,
//! the router's listener and the shards an owner holds.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::shard::VIRTUAL_SHARDS;

/// A node's cluster configuration.
///
/// ```
/// let config = tidemark_cluster::ClusterConfig::from_toml(r#"
///     node = "owner-1"
///     nats = ["nats://127.0.0.1:4222"]
///     etcd = ["http://127.0.0.1:2379"]
///     shards = "0-127"
/// "#)?;
/// assert_eq!(config.owned_shards()?.len(), 128);
/// assert_eq!(config.stream_of(200), 12);
/// # Ok::<(), tidemark_cluster::Error>(())
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// This node's name: an owner's identity in etcd (it must stay the same across
    /// restarts of the same data directory).
    pub node: String,
    /// NATS server URLs (`nats://127.0.0.1:4222`); the client fails over between them.
    pub nats: Vec<String>,
    /// etcd client URLs of its JSON gateway (`http://127.0.0.1:2379`).
    pub etcd: Vec<String>,
    /// The prefix of the cluster's etcd keys, JetStream streams and subjects, so that
    /// several clusters share one NATS and one etcd.
    pub prefix: String,
    /// The shards this node owns, as ranges (`"0-127"`, `"0-63,128-191"`); empty on a
    /// router.
    pub shards: String,
    /// JetStream streams the 256 shards are spread over (each holds a contiguous range
    /// of shards, one subject per shard); a divisor of 256. Fixed for a cluster's life.
    pub streams: u32,
    /// Replicas of each stream (3 where there are 3 NATS servers).
    pub replicas: usize,
    /// How long a stream keeps messages, in seconds: the window a new owner replays
    /// (7 days).
    pub stream_max_age_secs: u64,
    /// JetStream's message-id dedup window, in seconds: a router retry within it is
    /// dropped by JetStream itself (2 minutes, JetStream's default).
    pub duplicate_window_secs: u64,
    /// The TTL of an owner's etcd lease, in seconds.
    pub lease_ttl_secs: u64,
    /// The router's HTTP listener (127.0.0.1:9201).
    pub listen: SocketAddr,
    /// Write the router's bound address to this file once listening.
    pub port_file: Option<PathBuf>,
    /// The label-keyed index a write goes to when the request names none.
    pub metrics_index: String,
    /// The largest request body the router reads, in bytes.
    pub max_content_length: u64,
    /// How long the router waits for JetStream's acknowledgements of a request's
    /// messages before answering 503, in milliseconds.
    pub publish_timeout_ms: u64,
    /// Samples more than this many seconds ahead of the router's clock are refused
    /// (as `tidemark serve` refuses them).
    pub max_future_secs: u64,
    /// Messages an owner pulls from a shard at once (its store group-commits them).
    pub fetch_batch: usize,
    /// The base URL at which routers reach this owner's HTTP API for queries
    /// (`http://10.0.0.5:9200`); by default `http://` and the address `tidemark serve`
    /// bound.
    pub advertise: Option<String>,
    /// How long a router's query waits for an owner's answer, in seconds.
    pub query_timeout_secs: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node: String::new(),
            nats: vec!["nats://127.0.0.1:4222".to_owned()],
            etcd: vec!["http://127.0.0.1:2379".to_owned()],
            prefix: "tidemark".to_owned(),
            shards: String::new(),
            streams: 16,
            replicas: 1,
            stream_max_age_secs: 7 * 24 * 3600,
            duplicate_window_secs: 120,
            lease_ttl_secs: 10,
            listen: SocketAddr::from(([127, 0, 0, 1], 9201)),
            port_file: None,
            metrics_index: "metrics".to_owned(),
            max_content_length: 100 * 1024 * 1024,
            publish_timeout_ms: 5000,
            max_future_secs: 3600,
            fetch_batch: 256,
            advertise: None,
            query_timeout_secs: 120,
        }
    }
}

impl ClusterConfig {
    /// Reads and checks a TOML file.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read, [`Error::Config`] when it is invalid.
    pub fn from_file(path: &Path) -> Result<ClusterConfig> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
    }

    /// Parses and checks TOML text.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field at fault.
    pub fn from_toml(text: &str) -> Result<ClusterConfig> {
        let config: ClusterConfig =
            toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        config.check()?;
        Ok(config)
    }

    /// Checks the values.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field at fault.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.streams == 0 || !VIRTUAL_SHARDS.is_multiple_of(self.streams) {
            return bad(format!(
                "streams = {}: must divide the {VIRTUAL_SHARDS} shards",
                self.streams
            ));
        }
        if self.prefix.is_empty()
            || !self
                .prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return bad(format!(
                "prefix = {:?}: letters, digits, '_' and '-' only (it names streams and subjects)",
                self.prefix
            ));
        }
        if self.nats.is_empty() {
            return bad("nats: at least one NATS server URL".to_owned());
        }
        if self.etcd.is_empty() {
            return bad("etcd: at least one etcd URL".to_owned());
        }
        if let Some(e) = self.etcd.iter().find(|e| !e.starts_with("http://")) {
            return bad(format!(
                "etcd = {e:?}: an http:// URL of etcd's JSON gateway (TLS is not supported yet)"
            ));
        }
        if self.replicas == 0 || self.replicas > 5 {
            return bad(format!("replicas = {}: 1 to 5", self.replicas));
        }
        if self.lease_ttl_secs < 2 {
            return bad(format!(
                "lease_ttl_secs = {}: at least 2",
                self.lease_ttl_secs
            ));
        }
        if self.fetch_batch == 0 {
            return bad("fetch_batch: at least 1".to_owned());
        }
        if let Some(a) = self
            .advertise
            .as_ref()
            .filter(|a| !(a.starts_with("http://") || a.starts_with("https://")))
        {
            return bad(format!(
                "advertise = {a:?}: an http:// or https:// base URL"
            ));
        }
        if self.query_timeout_secs == 0 {
            return bad("query_timeout_secs: at least 1".to_owned());
        }
        if !self.shards.is_empty() && self.node.is_empty() {
            return bad("shards are set but node is empty: an owner needs a name".to_owned());
        }
        self.owned_shards().map(drop)
    }

    /// The shards [`shards`](Self::shards) names, sorted, each once.
    ///
    /// # Errors
    /// [`Error::Config`] for a malformed range or a shard past 255.
    pub fn owned_shards(&self) -> Result<Vec<u32>> {
        parse_shards(&self.shards)
    }

    /// The stream (`0..streams`) holding `shard`.
    pub fn stream_of(&self, shard: u32) -> u32 {
        let per = VIRTUAL_SHARDS / self.streams.max(1);
        shard / per.max(1)
    }

    /// The name of stream `stream` (`TIDEMARK_03`).
    pub fn stream_name(&self, stream: u32) -> String {
        format!("{}_{stream:02}", self.prefix.to_ascii_uppercase())
    }

    /// The subject of `shard` (`tidemark.shard.200`).
    pub fn subject(&self, shard: u32) -> String {
        format!("{}.shard.{shard}", self.prefix)
    }

    /// The subjects of stream `stream`: its shards' subjects.
    pub fn stream_subjects(&self, stream: u32) -> Vec<String> {
        (0..VIRTUAL_SHARDS)
            .filter(|&s| self.stream_of(s) == stream)
            .map(|s| self.subject(s))
            .collect()
    }

    /// The durable consumer of `shard` (named by the shard, not the node, so that the
    /// node that next holds its lease continues from where the last one acknowledged).
    pub fn consumer_name(&self, shard: u32) -> String {
        format!("shard-{shard}")
    }
}

/// Parses `"0-127,200,250-255"` into sorted, distinct shards.
fn parse_shards(text: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .ok()
                .filter(|&n| n < VIRTUAL_SHARDS)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "shards: {s:?} is not a shard (0 to {})",
                        VIRTUAL_SHARDS - 1
                    ))
                })
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi {
            return Err(Error::Config(format!("shards: range {part:?} is empty")));
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_shard_ranges() {
        assert_eq!(parse_shards("3, 0-1,2").ok(), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_shards("").ok(), Some(vec![]));
        assert!(parse_shards("5-2").is_err());
        assert!(parse_shards("256").is_err());
        assert!(parse_shards("a").is_err());
    }

    #[test]
    fn streams_cover_every_shard_once() {
        let c = ClusterConfig {
            streams: 16,
            ..ClusterConfig::default()
        };
        let mut all: Vec<String> = (0..16).flat_map(|g| c.stream_subjects(g)).collect();
        assert_eq!(all.len(), 256);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 256);
        assert_eq!(c.stream_of(0), 0);
        assert_eq!(c.stream_of(255), 15);
        assert_eq!(c.stream_name(3), "TIDEMARK_03");
    }

    #[test]
    fn rejects_bad_values() {
        for text in [
            "streams = 3",
            "prefix = \"a.b\"",
            "etcd = [\"https://x\"]",
            "shards = \"0-9\"",
            "lease_ttl_secs = 1",
            "unknown = 1",
        ] {
            assert!(ClusterConfig::from_toml(text).is_err(), "{text}");
        }
    }
}
