//! Starts a server on a temporary data directory (127.0.0.1, a free port), creates a
//! time-series index, sends the same `_bulk` twice (201s, then 409s) and shuts down.
//!
//! `cargo run -p tidemark-server --example serve`

use std::time::Duration;

use tidemark_server::{Config, Server};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = Config {
        data: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse()?,
        ..Config::default()
    };
    let rt = tokio::runtime::Runtime::new()?;
    let server = rt.block_on(Server::bind(config))?;
    let base = format!("http://{}", server.local_addr());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = rt.spawn(server.run(async {
        let _ = stop_rx.await;
    }));

    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let mapping = r#"{"settings": {"index": {"mode": "time_series"}}, "mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"}}}}"#;
    agent
        .put(&format!("{base}/metrics"))
        .set("content-type", "application/json")
        .send_string(mapping)?;
    let bulk = "{\"create\":{}}\n{\"@timestamp\":\"2025-11-30T00:00:00Z\",\"host\":\"a\",\"cpu\":0.5}\n\
                {\"create\":{}}\n{\"@timestamp\":\"2025-11-30T00:00:00Z\",\"host\":\"b\",\"cpu\":0.7}\n";
    for attempt in ["first", "retry"] {
        let resp = agent
            .post(&format!(
                "{base}/metrics/_bulk?filter_path=errors,items.*.status"
            ))
            .set("content-type", "application/x-ndjson")
            .send_string(bulk)?
            .into_string()?;
        println!("{attempt}: {resp}");
    }
    let _ = stop_tx.send(());
    rt.block_on(running)??;
    Ok(())
}
