//! The Parquet lake through the server: `POST /<index>/_tidemark/export` into
//! `--lake-dir`, exactly once, never outside it; and `--lake-auto`, which exports newly
//! sealed partitions without a call.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{TestServer, send};

/// 2025-01-01T00:00:00Z: the first of the three days.
const T0: i64 = 1_735_689_600_000;
const DAY: i64 = 86_400_000;
const HOUR: i64 = 3_600_000;
/// Documents on the three sealed days: two hosts, one point an hour.
const DOCS: u64 = 2 * 72;

/// Creates `name`, partitioned by day with a one-minute seal grace, and writes two hosts
/// every hour over three days, then one point on the fourth: the high-water mark is past
/// the third day by more than the grace, so the server's maintenance (every 10 s) seals
/// the three days.
fn load(s: &TestServer, name: &str) {
    let body = json!({
        "settings": {"index": {"tidemark": {"partitions": {"width": "1d", "seal_grace": "1m"}}}},
        "mappings": {"properties": {
            "@timestamp": {"type": "date"},
            "host": {"type": "keyword", "time_series_dimension": true},
            "cpu": {"type": "double", "time_series_metric": "gauge"}}}
    });
    let (status, resp) = s.put_json(&format!("/{name}"), &body);
    assert_eq!(status, 200, "{resp}");
    let mut bulk = Vec::new();
    for h in 0..72 {
        for host in ["a", "b"] {
            writeln!(bulk, "{{\"create\":{{}}}}").unwrap();
            writeln!(
                bulk,
                "{{\"@timestamp\":{},\"host\":\"{host}\",\"cpu\":{}}}",
                T0 + h * HOUR,
                h as f64 / 100.0
            )
            .unwrap();
        }
    }
    writeln!(bulk, "{{\"create\":{{}}}}").unwrap();
    writeln!(
        bulk,
        "{{\"@timestamp\":{},\"host\":\"a\",\"cpu\":1.0}}",
        T0 + 3 * DAY + HOUR
    )
    .unwrap();
    let (status, resp) = s.bulk(&format!("/{name}/_bulk"), &bulk);
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["errors"], false, "{resp}");
}

fn export(s: &TestServer, name: &str, body: &Value) -> (u16, Value) {
    s.post_json(&format!("/{name}/_tidemark/export"), body)
}

/// Polls until `ready` says yes (at most a minute: the maintenance runs every 10 s).
fn poll<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = ready() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The rows the Delta log's live `add` actions record (`numRecords`), and their files.
fn delta_rows(lake: &Path) -> (u64, Vec<String>) {
    let log = lake.join("_delta_log");
    let mut names: Vec<_> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    let (mut rows, mut files) = (0, Vec::new());
    for n in names {
        for line in std::fs::read_to_string(log.join(n)).unwrap().lines() {
            let action: Value = serde_json::from_str(line).unwrap();
            if let Some(add) = action.get("add") {
                let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
                rows += stats["numRecords"].as_u64().unwrap();
                files.push(add["path"].as_str().unwrap().to_owned());
            }
        }
    }
    (rows, files)
}

/// Files per day among `files` (`partition=…/part-….parquet`): a day of two series is
/// one file (its rows ordered by shard), so this is 1.
fn files_per_day(files: &[String]) -> usize {
    let days: std::collections::BTreeSet<&str> = files
        .iter()
        .map(|f| {
            let (day, name) = f.split_once('/').unwrap();
            assert!(
                day.starts_with("partition=") && name.starts_with("part-"),
                "{f}"
            );
            day
        })
        .collect();
    assert_eq!(days.len(), files.len(), "{files:?}");
    1
}

fn assert_parquet(lake: &Path, files: &[String]) {
    for f in files {
        let bytes = std::fs::read(lake.join(f)).unwrap();
        assert!(
            bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"),
            "{f}"
        );
    }
}

#[test]
fn export_writes_the_sealed_days_once_and_only_inside_the_lake_dir() {
    let dir = tempfile::tempdir().unwrap();
    let lakes = dir.path().join("lakes");
    let s = TestServer::start(dir.path(), &["--lake-dir", lakes.to_str().unwrap()]);
    load(&s, "cpu");

    // The three days once sealed (the fourth stays active: never exported).
    let report = poll("the three days to be sealed", || {
        let (status, r) = export(&s, "cpu", &json!({}));
        assert_eq!(status, 200, "{r}");
        (!r["partitions"].as_array().unwrap().is_empty()).then_some(r)
    });
    let lake = lakes.join("cpu");
    assert_eq!(report["committed"], 3, "{report}");
    assert_eq!(report["skipped"], 0, "{report}");
    assert_eq!(report["rows"], DOCS, "{report}");
    let starts: Vec<i64> = report["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["start_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(starts, vec![T0, T0 + DAY, T0 + 2 * DAY]);
    for p in report["partitions"].as_array().unwrap() {
        assert_eq!(p["rows"], 48, "{p}");
        assert_eq!(p["table"], ".");
    }
    assert_eq!(
        Path::new(report["lake"].as_str().unwrap()),
        lake.canonicalize().unwrap()
    );
    let (rows, files) = delta_rows(&lake);
    // One file per day, holding both hosts' series.
    assert_eq!(rows, DOCS);
    assert_eq!(report["files"], files.len(), "{report}");
    assert!(files.len() == 3 * files_per_day(&files), "{files:?}");
    assert_parquet(&lake, &files);
    for v in 0..3 {
        assert!(lake.join(format!("_delta_log/{v:020}.json")).is_file());
    }

    // Again: everything is already in the lake.
    let (status, again) = export(&s, "cpu", &json!({}));
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (&again["committed"], &again["skipped"], &again["rows"]),
        (&json!(0), &json!(3), &json!(0)),
        "{again}"
    );
    assert!(!lake.join(format!("_delta_log/{:020}.json", 3)).exists());
    assert_eq!(delta_rows(&lake).0, DOCS);

    // One partition, named in the query string, to another lake inside the root.
    let (status, one) = send(
        "POST",
        &s.url("/cpu/_tidemark/export?to=one/day&partition=2025-01-02T00:00:00Z"),
        None,
        &[],
    );
    assert_eq!(status, 200, "{one}");
    assert_eq!((&one["committed"], &one["rows"]), (&json!(1), &json!(48)));
    let (rows, files) = delta_rows(&lakes.join("one/day"));
    assert_eq!((rows, files_per_day(&files)), (48, files.len()));
    assert_parquet(&lakes.join("one/day"), &files);

    // Never outside the lake root: absolute paths elsewhere, `..`, the root itself.
    let outside = dir.path().join("outside");
    for to in [
        outside.to_str().unwrap(),
        "../outside",
        "a/../../outside",
        lakes.to_str().unwrap(),
        "/",
    ] {
        let (status, resp) = export(&s, "cpu", &json!({"to": to}));
        assert_eq!(status, 400, "{to}: {resp}");
        assert!(
            resp["error"]["reason"]
                .as_str()
                .unwrap()
                .contains("lake_dir"),
            "{resp}"
        );
    }
    assert!(!outside.exists());
    // A partition that is not sealed, a bad body, an index without partitions, a
    // missing index.
    let (status, resp) = export(&s, "cpu", &json!({"partition": T0 + 3 * DAY}));
    assert_eq!(status, 400, "{resp}");
    let (status, resp) = export(&s, "cpu", &json!({"colour": "red"}));
    assert_eq!(status, 400, "{resp}");
    let (status, resp) = s.put_json(
        "/flat",
        &json!({"mappings": {"properties": {
            "host": {"type": "keyword", "time_series_dimension": true},
            "cpu": {"type": "double", "time_series_metric": "gauge"}}}}),
    );
    assert_eq!(status, 200, "{resp}");
    let (status, resp) = export(&s, "flat", &json!({}));
    assert_eq!(status, 400, "{resp}");
    assert!(!lakes.join("flat/_delta_log").exists());
    let (status, _) = export(&s, "nope", &json!({}));
    assert_eq!(status, 404);

    // Counted on /metrics.
    let (_, metrics) = s.get("/metrics");
    let text = metrics.as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("tidemark_lake_partitions_exported_total{mode=\"request\"} 4"),
        "{text}"
    );
}

#[test]
fn without_a_lake_dir_the_export_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    load(&s, "cpu");
    let (status, resp) = export(&s, "cpu", &json!({"to": "/tmp"}));
    assert_eq!(status, 400, "{resp}");
    assert!(resp.to_string().contains("--lake-dir"), "{resp}");
}

#[test]
fn lake_auto_exports_sealed_partitions_without_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let lakes = dir.path().join("lakes");
    let config = dir.path().join("tidemark.toml");
    std::fs::write(&config, "lake_interval_secs = 1\n").unwrap();
    let s = TestServer::start(
        dir.path(),
        &[
            "--lake-dir",
            lakes.to_str().unwrap(),
            "--lake-auto",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    load(&s, "cpu");
    let lake = lakes.join("cpu");
    poll("the automatic export", || {
        lake.join(format!("_delta_log/{:020}.json", 2))
            .is_file()
            .then_some(())
    });
    let (rows, files) = delta_rows(&lake);
    assert_eq!((rows, files.len()), (DOCS, 3 * files_per_day(&files)));
    assert_parquet(&lake, &files);
    // Nothing more comes of further passes; a call finds everything there.
    std::thread::sleep(Duration::from_secs(3));
    assert!(!lake.join(format!("_delta_log/{:020}.json", 3)).exists());
    let (status, again) = export(&s, "cpu", &json!({}));
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (&again["committed"], &again["skipped"]),
        (&json!(0), &json!(3))
    );
    let (_, metrics) = s.get("/metrics");
    let text = metrics.as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("tidemark_lake_partitions_exported_total{mode=\"auto\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("tidemark_lake_export_failures_total{mode=\"auto\"} 0"),
        "{text}"
    );
}
