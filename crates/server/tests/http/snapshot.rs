//! `POST /api/v1/admin/tsdb/snapshot` taken while a client writes: restored into a new
//! data directory and served, it holds exactly the batches acknowledged before the
//! snapshot began, none sent after it answered, and each batch whole or absent.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;

use crate::support::{TestServer, k8s_bulk, k8s_mapping, send, statuses};

const BASE: i64 = 1_764_460_800_000;
const PER_BATCH: usize = 100;
const BATCHES: usize = 80;

fn batch_start(b: usize) -> i64 {
    BASE + b as i64 * 100_000
}

fn count_in(server: &TestServer, b: usize) -> u64 {
    let q = json!({"query": {"range": {"@timestamp": {
        "gte": batch_start(b), "lt": batch_start(b + 1)}}}});
    let (status, v) = send(
        "POST",
        &server.url("/k8s/_count"),
        Some(q.to_string().as_bytes()),
        &[("content-type", "application/json")],
    );
    assert_eq!(status, 200, "{v}");
    v["count"].as_u64().unwrap()
}

#[test]
fn a_snapshot_during_writes_restores_to_exactly_the_acknowledged_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let server = TestServer::start(tmp.path(), &[]);
    let (status, v) = send(
        "PUT",
        &server.url("/k8s"),
        Some(k8s_mapping().to_string().as_bytes()),
        &[("content-type", "application/json")],
    );
    assert_eq!(status, 200, "{v}");
    // (sent, acknowledged) instants of each batch, written by the client thread.
    let times: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let url = server.url("/k8s/_bulk");
    let writer = {
        let times = Arc::clone(&times);
        std::thread::spawn(move || {
            for b in 0..BATCHES {
                let body = k8s_bulk(PER_BATCH, 10, batch_start(b), None);
                let sent = Instant::now();
                let (status, v) = send(
                    "POST",
                    &url,
                    Some(&body),
                    &[("content-type", "application/x-ndjson")],
                );
                assert_eq!(status, 200, "{v}");
                assert!(statuses(&v).iter().all(|s| *s == 201), "{v}");
                times.lock().unwrap().push((sent, Instant::now()));
            }
        })
    };
    while times.lock().unwrap().len() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let snap_sent = Instant::now();
    let (status, v) = send(
        "POST",
        &server.url("/api/v1/admin/tsdb/snapshot"),
        None,
        &[],
    );
    let snap_done = Instant::now();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "success", "{v}");
    let name = v["data"]["name"].as_str().unwrap().to_owned();
    writer.join().unwrap();
    let times = times.lock().unwrap().clone();
    let acked_before = times.iter().filter(|(_, a)| *a < snap_sent).count();
    let sent_before_done = times.iter().filter(|(s, _)| *s < snap_done).count();
    assert!(acked_before >= 30);
    drop(server);

    // Restore: the snapshot linked into a new data directory, served.
    let snapshot = tmp.path().join("data/snapshots").join(&name);
    assert!(
        snapshot.join("indices/k8s").is_dir(),
        "{}",
        snapshot.display()
    );
    let restored = tempfile::tempdir().unwrap();
    tidemark::copy_tree(&snapshot, &restored.path().join("data"), &[]).unwrap();
    let server = TestServer::start(restored.path(), &[]);
    let (status, v) = send("GET", &server.url("/k8s/_count"), None, &[]);
    assert_eq!(status, 200, "{v}");
    let total = v["count"].as_u64().unwrap();
    assert_eq!(total % PER_BATCH as u64, 0, "a batch was cut: {total}");
    let k = (total / PER_BATCH as u64) as usize;
    assert!(
        (acked_before..=sent_before_done).contains(&k),
        "snapshot holds {k} batches; {acked_before} were acknowledged before it began, {sent_before_done} sent before it answered"
    );
    // A prefix: the last batch it holds is whole, the next absent.
    assert_eq!(count_in(&server, k - 1), PER_BATCH as u64);
    assert_eq!(count_in(&server, k), 0);
    // The original kept everything; the snapshot is untouched by the restore's writes.
    let (status, v) = server.bulk("/k8s/_bulk", &k8s_bulk(PER_BATCH, 10, batch_start(k), None));
    assert_eq!(status, 200, "{v}");
    drop(server);
    let original = TestServer::start(tmp.path(), &[]);
    let (_, v) = send("GET", &original.url("/k8s/_count"), None, &[]);
    assert_eq!(v["count"].as_u64().unwrap(), (BATCHES * PER_BATCH) as u64);
}

#[test]
fn only_a_user_allowed_every_index_may_take_a_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("tm.toml");
    std::fs::write(
        &config,
        format!(
            "data = \"{}\"\n[[users]]\nname = \"admin\"\npassword = \"pw-admin\"\nindices = [\"*\"]\n[[users]]\nname = \"alice\"\npassword = \"pw-alice\"\nindices = [\"alice-*\"]\n",
            tmp.path().join("data").display()
        ),
    )
    .unwrap();
    let server = TestServer::start(tmp.path(), &["--config", config.to_str().unwrap()]);
    let basic = |u: &str, p: &str| {
        use base64::Engine as _;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        )
    };
    let url = server.url("/api/v1/admin/tsdb/snapshot");
    let (status, v) = send(
        "POST",
        &url,
        None,
        &[("authorization", &basic("alice", "pw-alice"))],
    );
    assert_eq!(status, 403, "{v}");
    let (status, _) = send("POST", &url, None, &[]);
    assert_eq!(status, 401);
    let (status, v) = send(
        "POST",
        &url,
        None,
        &[("authorization", &basic("admin", "pw-admin"))],
    );
    assert_eq!(status, 200, "{v}");
}
