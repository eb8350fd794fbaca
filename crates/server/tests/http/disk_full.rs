//! Faults survived without a restart. A real full filesystem (a 16 MiB tmpfs mounted by the test, which needs root): line
//! protocol and `_bulk` writers fill it, keep sending for 20 s, then space is freed and
//! writes succeed again within 30 s without a restart. Every refusal is a "retry later"
//! status (`503` with `Retry-After` for line protocol, `429 cluster_block_exception` for
//! `_bulk`), reads keep answering, `_cat/indices` shows the index read-only; after a
//! SIGKILL and a restart every acknowledged point is stored once and re-sending
//! everything stores nothing new. Then the same with an injected fsync failure of the
//! log (`TIDEMARK_FAULTS`, compiled into the binary the tests build).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{TestServer, k8s_bulk, k8s_mapping, send, send_raw, statuses};

const T0: i64 = 1_764_460_800_000;
const LINES: usize = 4_000;
const DOCS: usize = 2_000;

/// Unmounts on drop, so a failed assertion leaves no mount behind.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount_tmpfs(at: &Path, size: &str) -> Option<Mount> {
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(at)
        .status()
        .is_ok_and(|s| s.success());
    ok.then(|| Mount(at.to_path_buf()))
}

/// Line-protocol batch `b`: LINES distinct points (20 hosts, one point a second each).
fn lp_batch(b: usize) -> Vec<u8> {
    let mut out = String::new();
    for i in 0..LINES {
        let ts = T0 + ((b * LINES + i) / 20) as i64 * 1000;
        out.push_str(&format!(
            "disk,host=h{} used={}i,free={}i {}\n",
            i % 20,
            b * LINES + i,
            i,
            ts * 1_000_000
        ));
    }
    out.into_bytes()
}

/// `_bulk` batch `b`: DOCS distinct documents (20 pods, one every 10 s each).
fn bulk_batch(b: usize) -> Vec<u8> {
    k8s_bulk(DOCS, 20, T0 + (b * DOCS / 20) as i64 * 10_000, None)
}

/// What one write answered.
#[derive(Debug, PartialEq)]
enum Outcome {
    Stored,
    /// Refused whole with a retry-later status.
    Retry,
}

fn write_lp(s: &TestServer, b: usize) -> Outcome {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let resp = match agent
        .post(&s.url("/write?db=lp&precision=ns"))
        .send_bytes(&lp_batch(b))
    {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("line protocol batch {b}: {e}"),
    };
    let status = resp.status();
    let retry_after = resp.header("retry-after").map(str::to_owned);
    let text = resp.into_string().unwrap_or_default();
    match status {
        204 => Outcome::Stored,
        503 => {
            assert!(retry_after.is_some(), "503 without Retry-After: {text}");
            Outcome::Retry
        }
        other => panic!("line protocol batch {b}: {other} {text}"),
    }
}

fn write_bulk(s: &TestServer, b: usize) -> Outcome {
    let (status, v) = s.bulk("/k8s/_bulk", &bulk_batch(b));
    match status {
        200 => {
            let st = statuses(&v);
            assert_eq!(st.len(), DOCS);
            // A resend of an acknowledged batch finds duplicates (409); a first send or
            // a resend of a refused one creates what is missing: never an item error.
            assert!(
                st.iter().all(|&c| c == 201 || c == 409),
                "bulk batch {b}: {v}"
            );
            Outcome::Stored
        }
        429 => {
            assert_eq!(v["error"]["type"], "cluster_block_exception", "{v}");
            Outcome::Retry
        }
        other => panic!("bulk batch {b}: {other} {v}"),
    }
}

fn count(s: &TestServer, index: &str) -> u64 {
    let (status, v) = s.post_json(&format!("/{index}/_count"), &json!({}));
    assert_eq!(status, 200, "reads must keep working: {v}");
    v["count"].as_u64().unwrap()
}

fn state_of(s: &TestServer, index: &str) -> String {
    let (status, v) = send("GET", &s.url("/_cat/indices?format=json"), None, &[]);
    assert_eq!(status, 200, "{v}");
    v.as_array()
        .unwrap()
        .iter()
        .find(|r| r["index"] == index)
        .map(|r| r["status"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[test]
fn a_full_disk_refuses_writes_to_retry_and_recovers_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = mount_tmpfs(dir.path(), "16m") else {
        eprintln!("disk_full: skipped, mounting a tmpfs needs root (CI runs as root)");
        return;
    };
    // Ballast to free later: a third of the filesystem.
    let ballast = dir.path().join("ballast");
    std::fs::write(&ballast, vec![0x5au8; 5 << 20]).unwrap();
    // The flood stage off: the writes meet ENOSPC itself.
    let mut s = TestServer::start(dir.path(), &["--disk-flood-stage", "100"]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);

    let mut lp_sent = 0usize;
    let mut bulk_sent = 0usize;
    let (mut lp_acked, mut bulk_acked) = (Vec::new(), Vec::new());
    let mut full_at: Option<Instant> = None;
    let mut read_only_seen = false;
    let fill_deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let lp = write_lp(&s, lp_sent);
        if lp == Outcome::Stored {
            lp_acked.push(lp_sent);
        }
        lp_sent += 1;
        let bulk = write_bulk(&s, bulk_sent);
        if bulk == Outcome::Stored {
            bulk_acked.push(bulk_sent);
        }
        bulk_sent += 1;
        if full_at.is_none() && (lp == Outcome::Retry || bulk == Outcome::Retry) {
            full_at = Some(Instant::now());
        }
        if let Some(t) = full_at {
            // Reads go on while writes are refused.
            let _ = count(&s, "lp");
            let _ = count(&s, "k8s");
            read_only_seen |= ["lp", "k8s"].iter().any(|i| state_of(&s, i) == "read_only");
            if t.elapsed() >= Duration::from_secs(20) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(
            Instant::now() < fill_deadline,
            "the disk never filled: {lp_sent} line batches, {bulk_sent} bulk batches"
        );
    }
    assert!(read_only_seen, "_cat/indices never showed read_only");
    let (_, v) = send("GET", &s.url("/lp/_stats"), None, &[]);
    eprintln!(
        "disk_full: full after {} line and {} bulk batches; lp state {}",
        lp_acked.len(),
        bulk_acked.len(),
        v["indices"]["lp"]["status"]
    );

    // Free space: writes succeed again within 30 s, without a restart.
    std::fs::remove_file(&ballast).unwrap();
    let freed = Instant::now();
    let mut next = (0usize, 0usize);
    loop {
        // Resend every batch not yet acknowledged, oldest first.
        let lp_todo: Vec<usize> = (0..lp_sent).filter(|b| !lp_acked.contains(b)).collect();
        let bulk_todo: Vec<usize> = (0..bulk_sent).filter(|b| !bulk_acked.contains(b)).collect();
        if lp_todo.is_empty() && bulk_todo.is_empty() {
            break;
        }
        if let Some(&b) = lp_todo.first()
            && write_lp(&s, b) == Outcome::Stored
        {
            lp_acked.push(b);
            next.0 += 1;
        }
        if let Some(&b) = bulk_todo.first()
            && write_bulk(&s, b) == Outcome::Stored
        {
            bulk_acked.push(b);
            next.1 += 1;
        }
        if next == (0, 0) {
            assert!(
                freed.elapsed() < Duration::from_secs(30),
                "writes still refused 30 s after space was freed"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let recovered_in = freed.elapsed();
    eprintln!("disk_full: every batch stored {recovered_in:?} after space was freed");
    assert_eq!(state_of(&s, "lp"), "open");

    let lp_points = (lp_sent * LINES * 2) as u64; // two fields per line
    let docs = (bulk_sent * DOCS) as u64;
    assert_eq!(count(&s, "lp"), lp_points);
    assert_eq!(count(&s, "k8s"), docs);

    // SIGKILL, restart (flood stage at its default), re-send everything: nothing new.
    s.kill();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(count(&s, "lp"), lp_points);
    assert_eq!(count(&s, "k8s"), docs);
    for b in 0..lp_sent {
        let (status, _, text) = send_raw(
            "POST",
            &s.url("/write?db=lp&precision=ns"),
            Some(&lp_batch(b)),
            &[],
        );
        assert_eq!(status, 204, "{text}");
    }
    for b in 0..bulk_sent {
        let (status, v) = s.bulk("/k8s/_bulk", &bulk_batch(b));
        assert_eq!(status, 200, "{v}");
        assert!(statuses(&v).iter().all(|&c| c == 409), "batch {b}: {v}");
    }
    assert_eq!(count(&s, "lp"), lp_points);
    assert_eq!(count(&s, "k8s"), docs);
    let v: Value = send("GET", &s.url("/_cat/indices?format=json"), None, &[]).1;
    assert!(
        v.as_array().unwrap().iter().all(|r| r["status"] == "open"),
        "{v}"
    );

    // The flood stage (default 95 %): with the disk filled to within 2 % of the end,
    // writes are refused before ENOSPC, naming the watermark, and resume by
    // themselves once space is freed.
    let free = free_bytes(dir.path());
    let total = total_bytes(dir.path());
    let keep = total / 50;
    std::fs::write(&ballast, vec![0x5au8; (free - keep) as usize]).unwrap();
    let b = lp_sent;
    assert_eq!(write_lp(&s, b), Outcome::Retry);
    let (status, v) = s.bulk("/k8s/_bulk", &bulk_batch(bulk_sent));
    assert_eq!(status, 429, "{v}");
    assert!(
        v["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("flood-stage watermark"),
        "{v}"
    );
    assert_eq!(state_of(&s, "lp"), "read_only");
    let (_, v) = send("GET", &s.url("/lp/_stats"), None, &[]);
    assert!(
        v["indices"]["lp"]["status_reason"]
            .as_str()
            .unwrap()
            .contains("disk_flood_stage 95"),
        "{v}"
    );
    std::fs::remove_file(&ballast).unwrap();
    let freed = Instant::now();
    while write_lp(&s, b) == Outcome::Retry {
        assert!(freed.elapsed() < Duration::from_secs(30), "still blocked");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(count(&s, "lp"), lp_points + (LINES * 2) as u64);
    assert_eq!(state_of(&s, "lp"), "open");
}

fn df(dir: &Path, field: &str) -> u64 {
    let out = Command::new("df")
        .args(["-B1", &format!("--output={field}")])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn free_bytes(dir: &Path) -> u64 {
    df(dir, "avail")
}

fn total_bytes(dir: &Path) -> u64 {
    df(dir, "size")
}

#[test]
fn an_injected_fsync_failure_reopens_the_index_from_its_log() {
    let dir = tempfile::tempdir().unwrap();
    // The sixth fsync of the line-protocol index's log fails with EIO, once.
    let mut s = TestServer::start_with_env(
        dir.path(),
        &[],
        &[(
            "TIDEMARK_FAULTS",
            "sync:eio:/indices/lp/wal-:skip=5:times=1",
        )],
    );
    let mut acked = Vec::new();
    let mut refused = Vec::new();
    let mut resumed_after = None;
    for b in 0..40 {
        match write_lp(&s, b) {
            Outcome::Stored => {
                acked.push(b);
                if !refused.is_empty() && resumed_after.is_none() {
                    resumed_after = Some(b);
                }
            }
            Outcome::Retry => refused.push(b),
        }
        if resumed_after.is_some() && acked.len() >= 20 {
            break;
        }
        if !refused.is_empty() && resumed_after.is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert!(
        !refused.is_empty(),
        "the injected fsync failure was not met"
    );
    assert!(
        resumed_after.is_some(),
        "writes did not resume: {refused:?}"
    );
    eprintln!("fsync failure: refused {refused:?}, writes resumed at batch {resumed_after:?}");
    assert_eq!(state_of(&s, "lp"), "open");
    let sent = acked.len().max(refused.iter().max().map_or(0, |m| m + 1));
    // A refused batch's points may have reached the log before the fsync failed: the
    // count is between the acknowledged points and all of them, and re-sending the
    // refused ones completes it exactly.
    let per = (LINES * 2) as u64;
    let n = count(&s, "lp");
    assert!(
        n >= acked.len() as u64 * per && n <= (acked.len() + refused.len()) as u64 * per,
        "{n}"
    );
    for &b in &refused {
        assert_eq!(write_lp(&s, b), Outcome::Stored);
    }
    let all = (acked.len() + refused.len()) as u64 * per;
    assert_eq!(count(&s, "lp"), all);

    s.kill();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(count(&s, "lp"), all);
    for b in 0..sent {
        assert_eq!(write_lp(&s, b), Outcome::Stored);
    }
    assert_eq!(
        count(&s, "lp"),
        all,
        "re-sending everything stored something new"
    );
}
