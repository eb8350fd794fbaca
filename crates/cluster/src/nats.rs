//! The NATS side both roles share: the connection and the JetStream streams.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::config::ClusterConfig;
use crate::error::{Error, Result};

/// Connects to the configured NATS servers (retrying the first connection, failing over
/// between servers afterwards) and opens JetStream with `timeout` for its requests (a
/// publish not acknowledged by then is an error).
///
/// # Errors
/// [`Error::Nats`] for a URL that does not parse.
pub async fn connect(config: &ClusterConfig, timeout: Duration) -> Result<jetstream::Context> {
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(2))
        .name(if config.node.is_empty() {
            "tidemark-router".to_owned()
        } else {
            format!("tidemark-{}", config.node)
        })
        .connect(config.nats.as_slice())
        .await
        .map_err(|e| Error::Nats(format!("connecting to {:?}: {e}", config.nats)))?;
    let mut js = jetstream::new(client);
    js.set_timeout(timeout);
    Ok(js)
}

/// The configuration of stream `group`: its shards' subjects, file storage, the
/// configured replicas, age limit and dedup window.
pub fn stream_config(config: &ClusterConfig, group: u32) -> stream::Config {
    stream::Config {
        name: config.stream_name(group),
        subjects: config.stream_subjects(group),
        storage: stream::StorageType::File,
        num_replicas: config.replicas,
        max_age: Duration::from_secs(config.stream_max_age_secs),
        duplicate_window: Duration::from_secs(config.duplicate_window_secs),
        ..stream::Config::default()
    }
}

/// Creates stream `group` if it does not exist (an existing stream is left as it is).
///
/// # Errors
/// [`Error::Nats`] when JetStream does not answer or refuses the stream.
pub async fn ensure_stream(
    js: &jetstream::Context,
    config: &ClusterConfig,
    group: u32,
) -> Result<stream::Stream> {
    js.get_or_create_stream(stream_config(config, group))
        .await
        .map_err(|e| Error::Nats(format!("stream {}: {e}", config.stream_name(group))))
}
