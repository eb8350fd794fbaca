//! What the lake's integration tests share.
#![allow(dead_code)]

/// One day in milliseconds.
pub const DAY: i64 = 86_400_000;

/// A new index partitioned by day whose documents have one keyword dimension `host`
/// and one gauge `cpu`.
pub fn host_cpu_index(dir: &std::path::Path) -> tidemark::Index {
    let mapping = tidemark::Mapping::from_value(serde_json::json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))
    .unwrap();
    tidemark::Index::create_partitioned(
        dir,
        mapping,
        tidemark::dedup::EngineConfig::new(),
        tidemark::dedup::PartitionConfig::new().with_width_ms(DAY),
    )
    .unwrap()
}

/// Serializes a test binary's tests. Each opens an index (taking its OS lock) while the
/// other may be spawning a child: between fork and exec the child holds a copy of every
/// open file, the lock file's included, so a lock released by one test can still look
/// held to the other's child for a moment.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the binary's test lock until dropped.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
