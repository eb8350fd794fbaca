//! The `tidemark` binary on the fixtures in `fixtures/tidemark`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{Value, json};

/// `_id`s of fixture documents (time series: base64url of tsid ‖ timestamp).
const WEB1_T0: &str = "lcgjNRYSc_orpOCzHopD0ugVYOiAAAGa0g8oAA";
const DB1_T70: &str = "lcgjMgB5e0rBDfJ6s5dVQgnWUBmAAAGa0hA5cA";

fn tm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tidemark")
        .join(name)
}

/// Runs `tidemark args`, expecting exit code `code`; returns stdout.
fn run(args: &[&str], code: i32) -> String {
    let out = tm().args(args).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "tidemark {args:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    stdout
}

fn run_json(args: &[&str], code: i32) -> Value {
    serde_json::from_str(&run(args, code)).unwrap()
}

fn ndjson(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn k8s_index() -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("k8s").to_str().unwrap().to_owned();
    let mapping = fixture("k8s.mapping.json");
    run(&["create", &dir, "--mapping", mapping.to_str().unwrap()], 0);
    (tmp, dir)
}

fn counts(summary: &Value) -> [u64; 8] {
    [
        "created",
        "duplicates",
        "replaced",
        "updated",
        "deleted",
        "not_found",
        "errors",
        "ignored_fields",
    ]
    .map(|k| summary[k].as_u64().unwrap())
}

#[test]
fn ingest_twice_then_queries_and_stats_are_exact() {
    let (_tmp, dir) = k8s_index();
    let file = fixture("k8s.ndjson");
    let file = file.to_str().unwrap();

    let first = run_json(&["ingest", &dir, file, "--json"], 0);
    assert_eq!(counts(&first), [12, 0, 0, 0, 0, 0, 0, 4], "{first}");
    // The same file again: nothing created, every document a duplicate, exit status 0.
    let second = run_json(&["ingest", &dir, file, "--json"], 0);
    assert_eq!(counts(&second), [0, 12, 0, 0, 0, 0, 0, 0], "{second}");
    // The same documents with keys reordered and nesting flipped (dotted ↔ nested).
    let variants = fixture("k8s-variants.ndjson");
    let third = run_json(&["ingest", &dir, variants.to_str().unwrap(), "--json"], 0);
    assert_eq!(counts(&third), [0, 12, 0, 0, 0, 0, 0, 0], "{third}");

    // get: the document rebuilt from the columns, nested, with _id, _tsid, @timestamp.
    let doc: Value = serde_json::from_str(&run(&["get", &dir, WEB1_T0], 0)).unwrap();
    assert_eq!(
        doc,
        json!({
            "@timestamp": "2025-11-30T00:00:00.000Z",
            "_id": WEB1_T0,
            "_tsid": "95c82335161273fa2ba4e0b31e8a43d2e81560e8",
            "k8s": {"cluster": {"name": "prod"}, "namespace": {"name": "shop"},
                    "pod": {"name": "web-1", "ip": "10.0.0.1", "status": "Running", "ready": true,
                            "cpu": {"utilization": 0.5}, "memory": {"usage_bytes": 100000000},
                            "restarts": 0}}
        })
    );

    // search: time range [from, to), a dimension filter, sorted by time.
    let hits = ndjson(&run(
        &[
            "search",
            &dir,
            "--filter",
            "k8s.pod.name=db-1",
            "--from",
            "2025-11-30T00:01:00Z",
        ],
        0,
    ));
    let cpu: Vec<f64> = hits
        .iter()
        .map(|h| h["k8s"]["pod"]["cpu"]["utilization"].as_f64().unwrap())
        .collect();
    assert_eq!(cpu, [6.0, 8.0]);
    let hits = ndjson(&run(
        &[
            "search",
            &dir,
            "--from",
            "1764460800000",
            "--to",
            "2025-11-30T00:00:10Z",
        ],
        0,
    ));
    assert_eq!(hits.len(), 3);
    let newest = ndjson(&run(&["search", &dir, "--desc", "--limit", "2"], 0));
    assert_eq!(newest.len(), 2);
    assert!(
        newest
            .iter()
            .all(|h| h["@timestamp"] == json!("2025-11-30T00:01:10.000Z"))
    );
    // An _id prefix of the tsid part selects the series.
    let series = ndjson(&run(&["search", &dir, "--id-prefix", &WEB1_T0[..26]], 0));
    assert_eq!(series.len(), 4);
    assert!(
        series
            .iter()
            .all(|h| h["k8s"]["pod"]["name"] == json!("web-1"))
    );
    let one = ndjson(&run(&["search", &dir, "--id-prefix", WEB1_T0], 0));
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["_id"], json!(WEB1_T0));
    let ip = ndjson(&run(
        &["search", &dir, "--filter", "k8s.pod.ip=::ffff:10.0.1.1"],
        0,
    ));
    assert_eq!(ip.len(), 4);

    // agg: per-minute buckets, overall and per series.
    let agg = run_json(
        &[
            "agg",
            &dir,
            "--metric",
            "k8s.pod.cpu.utilization",
            "--interval",
            "1m",
        ],
        0,
    );
    let b = &agg["buckets"];
    assert_eq!(b[0]["key_as_string"], json!("2025-11-30T00:00:00.000Z"));
    assert_eq!(
        [
            &b[0]["count"],
            &b[0]["min"],
            &b[0]["max"],
            &b[0]["sum"],
            &b[0]["avg"]
        ],
        [
            &json!(6),
            &json!(0.125),
            &json!(4.0),
            &json!(7.125),
            &json!(1.1875)
        ]
    );
    assert_eq!(
        [
            &b[1]["count"],
            &b[1]["min"],
            &b[1]["max"],
            &b[1]["sum"],
            &b[1]["avg"]
        ],
        [
            &json!(6),
            &json!(0.5),
            &json!(8.0),
            &json!(17.25),
            &json!(2.875)
        ]
    );
    let series = agg["series"].as_array().unwrap();
    assert_eq!(series.len(), 3);
    let db1 = series
        .iter()
        .find(|s| s["dimensions"]["k8s"]["pod"]["name"] == json!("db-1"))
        .unwrap();
    assert_eq!(db1["buckets"][0]["avg"], json!(3.0));
    assert_eq!(db1["buckets"][1]["avg"], json!(7.0));
    let filtered = run_json(
        &[
            "agg",
            &dir,
            "--metric",
            "k8s.pod.cpu.utilization",
            "--interval",
            "10s",
            "--filter",
            "k8s.pod.name=web-2",
            "--from",
            "2025-11-30T00:01:00Z",
        ],
        0,
    );
    let sums: Vec<f64> = filtered["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["sum"].as_f64().unwrap())
        .collect();
    assert_eq!(sums, [0.5, 1.0]);

    // stats: exact documents, series and counters.
    let stats = run_json(&["stats", &dir, "--json"], 0);
    assert_eq!(stats["documents"], json!(12));
    assert_eq!(stats["series"], json!(3));
    let c = &stats["counters"];
    assert_eq!(
        [
            &c["created"],
            &c["duplicates"],
            &c["errors"],
            &c["ignored_fields"]
        ],
        [&json!(12), &json!(24), &json!(0), &json!(4)]
    );
    assert_eq!(c["dedup_checks"], json!(36));
    let human = run(&["stats", &dir], 0);
    assert!(human.contains("documents"), "{human}");

    // disk usage: components, fields and bytes per document.
    let du = run_json(&["disk-usage", &dir, "--json"], 0);
    assert_eq!(du["documents"], json!(12));
    assert!(du["components"]["timestamps"]["bytes"].as_u64().unwrap() > 0);
    assert!(
        du["fields"]["k8s.pod.cpu.utilization"]["bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(du["fields"]["k8s.pod.status"]["bytes"].as_u64().unwrap() > 0);
    assert!(du["bytes_per_doc"].as_f64().unwrap() > 0.0);

    // merge keeps everything; inspect dumps the merged segment.
    run(&["merge", &dir], 0);
    let stats = run_json(&["stats", &dir, "--json"], 0);
    assert_eq!(
        (stats["documents"].clone(), stats["segments"].clone()),
        (json!(12), json!(1))
    );
    let segment = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tms"))
        .unwrap();
    let dump = run(&["inspect", segment.to_str().unwrap()], 0);
    assert!(dump.contains("rows"), "{dump}");
    let again = run_json(&["ingest", &dir, file, "--json"], 0);
    assert_eq!(counts(&again), [0, 12, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn bulk_file_with_all_four_actions() {
    let (_tmp, dir) = k8s_index();
    let docs = fixture("k8s.ndjson");
    run(&["ingest", &dir, docs.to_str().unwrap()], 0);
    // The fixture is a request Elasticsearch accepts, with two items that fail alone;
    // a file also reports lines the server would refuse the whole request for (an
    // unknown action, a delete without `_id`), each as its own error, so four errors
    // and exit status 1.
    let bulk_tmp = tempfile::tempdir().unwrap();
    let bulk = bulk_tmp.path().join("k8s.bulk");
    let mut text = std::fs::read(fixture("k8s.bulk")).unwrap();
    text.extend_from_slice(b"{\"upsert\": {}}\n{\"k8s\":{}}\n{\"delete\":{}}\n");
    std::fs::write(&bulk, text).unwrap();
    let summary = run_json(
        &[
            "ingest",
            &dir,
            bulk.to_str().unwrap(),
            "--format",
            "bulk",
            "--json",
        ],
        1,
    );
    assert_eq!(counts(&summary), [2, 1, 1, 1, 1, 2, 4, 0], "{summary}");
    let lines: Vec<u64> = summary["first_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [15, 17, 19, 21]);
    let reasons = summary["first_errors"].to_string();
    assert!(
        reasons.contains("differs from the document's _id"),
        "{reasons}"
    );
    assert!(reasons.contains("field `k8s.pod.name`"), "{reasons}");
    assert!(reasons.contains("but found [upsert]"), "{reasons}");

    // The same file with per-item results, as an Elasticsearch bulk response's items.
    let (_tmp2, dir2) = k8s_index();
    run(&["ingest", &dir2, docs.to_str().unwrap()], 0);
    let out = tm()
        .args([
            "ingest",
            &dir2,
            bulk.to_str().unwrap(),
            "--format",
            "bulk",
            "--items",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let items = ndjson(&String::from_utf8(out.stdout).unwrap());
    let statuses: Vec<u64> = items
        .iter()
        .map(|i| {
            i.as_object().unwrap().values().next().unwrap()["status"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        statuses,
        [201, 409, 200, 201, 200, 200, 404, 404, 400, 400, 400, 400]
    );
    assert_eq!(
        items[1]["create"]["error"]["reason"],
        json!("document already exists")
    );
    assert_eq!(items[4]["update"]["_id"], json!(WEB1_T0));
    assert_eq!(items[10]["create"]["line"], json!(19));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("\"created\":2"), "{stderr}");

    // The update changed a metric and an extra field, and nothing else.
    let doc: Value = serde_json::from_str(&run(&["get", &dir, WEB1_T0], 0)).unwrap();
    assert_eq!(doc["k8s"]["pod"]["cpu"]["utilization"], json!(0.9));
    assert_eq!(doc["k8s"]["pod"]["status"], json!("Terminating"));
    assert_eq!(doc["k8s"]["pod"]["memory"]["usage_bytes"], json!(100000000));
    // The deleted document is gone.
    run(&["get", &dir, DB1_T70], 1);
    // The `index` replaced web-2's first point.
    let web2 = ndjson(&run(
        &[
            "search",
            &dir,
            "--filter",
            "k8s.pod.name=web-2",
            "--limit",
            "1",
        ],
        0,
    ));
    assert_eq!(web2[0]["k8s"]["pod"]["cpu"]["utilization"], json!(0.625));
    let stats = run_json(&["stats", &dir, "--json"], 0);
    assert_eq!(stats["documents"], json!(13));

    // delete through the CLI, twice.
    let out = run_json(&["delete", &dir, WEB1_T0], 0);
    assert_eq!(out["result"], json!("deleted"));
    let out = run_json(&["delete", &dir, WEB1_T0], 0);
    assert_eq!(out["result"], json!("not_found"));
    let stats = run_json(&["stats", &dir, "--json"], 0);
    assert_eq!(stats["documents"], json!(12));
    assert_eq!(stats["counters"]["deleted"], json!(2));
}

#[test]
fn events_mode_dedups_by_fingerprint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("events").to_str().unwrap().to_owned();
    let mapping = fixture("events.mapping.json");
    run(&["create", &dir, "--mapping", mapping.to_str().unwrap()], 0);
    let file = fixture("events.ndjson");
    let file = file.to_str().unwrap();
    // Line 4 repeats line 1's message and user (its level differs, but only message
    // and user.name make the fingerprint); line 7 is line 1 with keys reordered.
    let first = run_json(&["ingest", &dir, file, "--json"], 0);
    assert_eq!(counts(&first), [5, 2, 0, 0, 0, 0, 0, 0], "{first}");
    let second = run_json(&["ingest", &dir, file, "--json"], 0);
    assert_eq!(counts(&second), [0, 7, 0, 0, 0, 0, 0, 0], "{second}");
    let hits = ndjson(&run(&["search", &dir], 0));
    assert_eq!(hits.len(), 5);
    // Three events share host a and one millisecond, with distinct ids.
    let same_ms: Vec<&Value> = hits
        .iter()
        .filter(|h| {
            h["@timestamp"] == json!("2025-11-30T00:00:00.000Z") && h["host"]["name"] == json!("a")
        })
        .collect();
    assert_eq!(same_ms.len(), 3);
    // Event ids start with the timestamp, so they sort by time; get reads one back.
    let id = same_ms[0]["_id"].as_str().unwrap();
    assert!(id.starts_with("8000019ad20f2800"), "{id}");
    let doc: Value = serde_json::from_str(&run(&["get", &dir, id], 0)).unwrap();
    assert_eq!(&doc, same_ms[0]);
    let filtered = ndjson(&run(&["search", &dir, "--filter", "host.name=a"], 0));
    assert_eq!(filtered.len(), 4);
    // An _id prefix of an event is a time prefix: the millisecond of 00:00:00.001.
    let later = ndjson(&run(
        &["search", &dir, "--id-prefix", "8000019ad20f2801"],
        0,
    ));
    assert_eq!(later.len(), 1);
    assert_eq!(later[0]["@timestamp"], json!("2025-11-30T00:00:00.001Z"));
    let all = ndjson(&run(&["search", &dir, "--id-prefix", "8000019ad20f28"], 0));
    assert_eq!(all.len(), 5);
    // The mapping is strict: an undeclared field is an error naming it.
    let out = tm()
        .args(["ingest", &dir, "-"])
        .write_stdin("{\"@timestamp\": 1, \"message\": \"x\", \"colour\": \"red\"}\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("line 1: field `colour`"), "{stderr}");
    let stats = run_json(&["stats", &dir, "--json"], 0);
    assert_eq!(stats["documents"], json!(5));
}

#[test]
fn malformed_lines_are_reported_with_line_numbers_and_the_rest_goes_in() {
    let (_tmp, dir) = k8s_index();
    let file = fixture("malformed.ndjson");
    let out = tm()
        .args(["ingest", &dir, file.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(counts(&summary), [2, 0, 0, 0, 0, 0, 7, 0], "{summary}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    for expected in [
        "line 2: malformed JSON",
        "line 3: field `k8s.pod.cpu.utilization`: expected a number (double), found a string",
        "line 4: field `@timestamp`: missing",
        "line 5: malformed JSON",
        "line 7: field `k8s.pod.ip`: expected an IP address",
        "line 8: field `@timestamp`: invalid time `yesterday`",
        "line 9: field `k8s.pod.name`: given twice",
    ] {
        assert!(stderr.contains(expected), "no {expected:?} in\n{stderr}");
    }
    assert!(!stderr.contains("line 6"), "{stderr}");

    // Only the first N in full, then a count.
    let (_tmp2, dir2) = k8s_index();
    let out = tm()
        .args(["ingest", &dir2, file.to_str().unwrap(), "--max-errors", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 3, "{stderr}");
    assert!(stderr.contains("... and 5 more errors"), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("2 created") && stdout.contains("7 errors"),
        "{stdout}"
    );
}

#[test]
fn stdin_and_parallel_parsing_give_the_same_results() {
    let (_tmp, dir) = k8s_index();
    let text = std::fs::read_to_string(fixture("k8s.ndjson")).unwrap();
    let out = tm()
        .args(["ingest", &dir, "-", "--json", "--threads", "3"])
        .write_stdin(text.clone())
        .output()
        .unwrap();
    assert!(out.status.success());
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(counts(&summary), [12, 0, 0, 0, 0, 0, 0, 4]);
    let out = tm()
        .args(["ingest", &dir, "--json", "--op", "index"])
        .write_stdin(text)
        .output()
        .unwrap();
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(counts(&summary), [0, 0, 12, 0, 0, 0, 0, 4]);
}

#[test]
fn helpful_errors_for_missing_index_bad_mapping_and_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let out = tm()
        .args(["stats", missing.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("no index in") && stderr.contains("tidemark create"),
        "{stderr}"
    );

    let bad = tmp.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"mappings": {"properties": {"host": {"type": "keyword", "time_series_dimension": true}, "cpu": {"type": "double", "time_series_metric": "rate"}}}}"#,
    )
    .unwrap();
    let dir = tmp.path().join("ix");
    let out = tm()
        .args([
            "create",
            dir.to_str().unwrap(),
            "--mapping",
            bad.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("invalid mapping: `cpu`"), "{stderr}");

    let mapping = fixture("k8s.mapping.json");
    let d = dir.to_str().unwrap();
    run(&["create", d, "--mapping", mapping.to_str().unwrap()], 0);
    let out = tm()
        .args(["create", d, "--mapping", mapping.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("already holds an index")
    );

    // While this process holds the index, the CLI is refused with the holder's pid.
    let index = tidemark::Index::open(&dir).unwrap();
    let out = tm().args(["stats", d]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "locked by another process (pid {})",
            std::process::id()
        )),
        "{stderr}"
    );
    drop(index);
    // Released at once, except that a child another test thread is spawning at this
    // moment holds a copy of our descriptor (and so the lock) until it execs: retry.
    let mut released = false;
    for _ in 0..100 {
        if tm().args(["stats", d]).output().unwrap().status.success() {
            released = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(released);

    let out = tm().args(["get", d, "not-an-id"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("invalid _id `not-an-id`")
    );
}
