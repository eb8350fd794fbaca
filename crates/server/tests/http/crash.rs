//! SIGKILL safety: four clients bulk-write while the server is killed three times and
//! restarted; every item acknowledged with a 2xx is stored exactly once, and re-sending
//! everything stores nothing new.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{TestServer, k8s_mapping, send};

const CLIENTS: usize = 4;
const BATCHES: usize = 60;
const BATCH: usize = 200;

/// Client `c`'s batch `b`: documents no other batch has (pod per client, time per batch).
fn batch(c: usize, b: usize) -> Vec<u8> {
    let mut out = String::new();
    for i in 0..BATCH {
        let ts = 1_764_460_800_000_i64 + ((b * BATCH + i) as i64) * 1000;
        out.push_str("{\"create\":{}}\n");
        out.push_str(&format!(
            "{{\"@timestamp\":{ts},\"k8s\":{{\"cluster\":{{\"name\":\"prod\"}},\"namespace\":{{\"name\":\"crash\"}},\"pod\":{{\"name\":\"client-{c}\",\"ip\":\"10.9.0.{c}\",\"cpu\":{{\"utilization\":0.5}}}}}}}}\n"
        ));
    }
    out.into_bytes()
}

/// Sends a batch; `Some(ids)` when the answer was a 2xx whose items are each 201 or 409.
fn try_send(addr: &str, body: &[u8]) -> Option<Vec<String>> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(20))
        .build();
    let resp = agent
        .post(&format!("http://{addr}/k8s/_bulk"))
        .set("content-type", "application/x-ndjson")
        .send_bytes(body)
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&resp.into_string().ok()?).ok()?;
    let mut ids = Vec::new();
    for item in v["items"].as_array()? {
        let inner = &item["create"];
        let status = inner["status"].as_u64()?;
        assert!(status == 201 || status == 409, "unexpected item {inner}");
        ids.push(inner["_id"].as_str()?.to_owned());
    }
    Some(ids)
}

#[test]
fn sigkill_loses_nothing_acknowledged_and_retries_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestServer::start(dir.path(), &[]);
    assert_eq!(server.put_json("/k8s", &k8s_mapping()).0, 200);
    let addr = Arc::new(RwLock::new(server.addr.clone()));
    let acked: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(HashSet::new()));
    let failures = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(180);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (addr, acked) = (Arc::clone(&addr), Arc::clone(&acked));
            let failures = Arc::clone(&failures);
            std::thread::spawn(move || {
                for b in 0..BATCHES {
                    let body = batch(c, b);
                    // Retry until acknowledged, as shippers do: a retry of a batch that
                    // did reach the log is a duplicate (409), never a second copy.
                    loop {
                        assert!(
                            Instant::now() < deadline,
                            "client {c} did not finish in time"
                        );
                        let a = addr.read().unwrap().clone();
                        if let Some(ids) = try_send(&a, &body) {
                            acked.lock().unwrap().extend(ids);
                            break;
                        }
                        failures.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(30));
                    }
                }
            })
        })
        .collect();
    // Three kills at pseudo-random moments (a fixed-seed LCG: reproducible) while the
    // clients are writing: after a random share of each quarter of the documents.
    let mut seed = 0x2545_f491_u64;
    let sent = CLIENTS * BATCHES * BATCH;
    for k in 1..=3 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let at = sent / 4 * k - (seed >> 33) as usize % (sent / 8);
        while acked.lock().unwrap().len() < at {
            assert!(Instant::now() < deadline, "the clients stalled");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis((seed >> 40) % 20));
        server.kill();
        server = TestServer::start(dir.path(), &[]);
        *addr.write().unwrap() = server.addr.clone();
    }
    for c in clients {
        c.join().unwrap();
    }
    // The kills hit the clients mid-stream: some requests went unanswered.
    assert!(
        failures.load(Ordering::SeqCst) > 0,
        "no request was interrupted"
    );
    let acked = acked.lock().unwrap().clone();
    assert_eq!(acked.len(), sent, "every batch was acknowledged in the end");
    // Exactly once: as many documents as distinct documents sent, each acknowledged id
    // among them.
    let (_, count) = server.get("/k8s/_count");
    assert_eq!(count["count"], sent as u64);
    let ids: Vec<&String> = acked.iter().collect();
    for chunk in ids.chunks(2000) {
        let (_, c) = server.post_json("/k8s/_count", &json!({"query": {"ids": {"values": chunk}}}));
        assert_eq!(c["count"], chunk.len() as u64);
    }
    // Re-sending everything stores nothing new: every item is a 409.
    for c in 0..CLIENTS {
        for b in 0..BATCHES {
            let (status, resp) = send(
                "POST",
                &server.url("/k8s/_bulk"),
                Some(&batch(c, b)),
                &[("content-type", "application/x-ndjson")],
            );
            assert_eq!(status, 200);
            assert!(crate::support::statuses(&resp).iter().all(|&s| s == 409));
        }
    }
    assert_eq!(server.get("/k8s/_count").1["count"], sent as u64);
    // A clean stop after all that.
    assert!(server.terminate().success());
}
