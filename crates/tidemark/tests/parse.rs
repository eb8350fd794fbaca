//! The streaming parser (NDJSON lines) equals the `serde_json::Value` parser (`_bulk`
//! documents, the library API) on every fixture line: same point, or the same error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;

use tidemark::{DocParser, Mapping};

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tidemark")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

fn parser(mapping: &str) -> DocParser {
    DocParser::new(Arc::new(Mapping::from_json_str(&fixture(mapping)).unwrap())).unwrap()
}

#[test]
fn streaming_and_value_parsers_agree_on_fixtures() {
    let extra = [
        r#"{"@timestamp": 1, "k8s": {"pod": {"name": "a", "cpu": {"utilization": [1]}}}}"#,
        r#"{"@timestamp": 1, "k8s": {"pod": {"name": "a", "cpu": {"utilization": {"x": 1}}}}}"#,
        r#"{"@timestamp": 1, "k8s": {"pod": "flat", "cluster": {"name": "c"}}}"#,
        r#"{"@timestamp": 1, "k8s.pod.name.deeper": "x", "k8s.cluster.name": "a"}"#,
        r#"{"@timestamp": 1, "k8s": {"pod": {"name": "a\"b\u00e9"}}, "extra": {"a": [1, 2], "b": null}}"#,
        r#"{"@timestamp": 18446744073709551615, "k8s.pod.name": "a"}"#,
        r#"{"@timestamp": 1.0, "k8s.pod.name": "a", "k8s.pod.memory.usage_bytes": 2.5}"#,
        r#"[1, 2]"#,
        r#"null"#,
    ];
    for (mapping, files) in [
        (
            "k8s.mapping.json",
            vec!["k8s.ndjson", "k8s-variants.ndjson", "malformed.ndjson"],
        ),
        ("events.mapping.json", vec!["events.ndjson"]),
    ] {
        let mut p = parser(mapping);
        let mut lines: Vec<(String, bool)> = files
            .iter()
            .flat_map(|f| {
                fixture(f)
                    .lines()
                    .map(|l| (l.to_owned(), true))
                    .collect::<Vec<_>>()
            })
            .collect();
        // Lines with several problems may report another one first (a Value's keys are
        // sorted; a stream's are in document order): compare outcomes, not messages.
        lines.extend(extra.iter().map(|s| ((*s).to_owned(), false)));
        let mut compared = 0;
        for (line, exact) in &lines {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
                assert!(p.parse_line(line).is_err(), "{line}");
                continue;
            };
            let streamed = p.parse_line(line).map_err(|e| e.to_string());
            let walked = p.parse_value(&value).map_err(|e| e.to_string());
            if *exact || streamed.is_ok() || walked.is_ok() {
                assert_eq!(streamed, walked, "{mapping}: {line}");
            }
            compared += 1;
        }
        assert!(compared >= 7);
    }
}

/// A key given twice in one object is refused on every path, as Elasticsearch refuses
/// it: `serde_json::Value` would keep the last object and a stream could merge both, so
/// the document `{"k8s":{"namespace":{"name":"shop"},"namespace":{"x":1}},…}` would get
/// a series id with `k8s.namespace.name` on one path and without it on the other.
#[test]
fn a_key_given_twice_in_one_object_is_refused_on_every_path() {
    let lines = [
        // A mapped object twice (found by `cargo xtask fuzz`, docs/results/fuzz.md).
        r#"{"@timestamp":1,"k8s":{"pod":{"name":"a"},"namespace":{"name":"shop"},"namespace":{"x":1}}}"#,
        // A mapped value twice, the same value.
        r#"{"@timestamp":1,"k8s":{"pod":{"name":"a"}},"@timestamp":1}"#,
        // Unmapped keys, ignored under "dynamic": false: still refused.
        r#"{"@timestamp":1,"k8s":{"pod":{"name":"a"}},"agent":{"v":1,"v":2}}"#,
        r#"{"@timestamp":1,"k8s":{"pod":{"name":"a"}},"agent":[{"v":1,"v":2}]}"#,
        // Through the serde path (an escape ends the fast path first).
        r#"{"@timestamp":1,"k8s":{"pod":{"name":"a\"b"},"pod":{"ip":"10.0.0.1"}}}"#,
    ];
    let mut p = parser("k8s.mapping.json");
    for line in lines {
        let e = p.parse_line(line).unwrap_err().to_string();
        assert!(e.contains("given twice in one object"), "{line}: {e}");
    }
    // Keys spelled differently are not repeats: nested and dotted is its own error.
    let ok = r#"{"@timestamp":1,"k8s":{"pod":{"name":"a"},"namespace":{"name":"shop"}},"agent":{"v":1,"w":1}}"#;
    assert!(p.parse_line(ok).is_ok());

    // The `_bulk` input of `Index::ingest` (documents read as a whole `Value`).
    let dir = tempfile::tempdir().unwrap();
    let mapping = Mapping::from_json_str(&fixture("k8s.mapping.json")).unwrap();
    let mut index = tidemark::Index::create(dir.path().join("ix"), mapping).unwrap();
    let mut bulk = String::new();
    for line in lines.iter().chain([&ok]) {
        bulk.push_str("{\"create\":{}}\n");
        bulk.push_str(line);
        bulk.push('\n');
    }
    let options = tidemark::IngestOptions {
        format: tidemark::InputFormat::Bulk,
        max_reported_errors: 100,
        ..tidemark::IngestOptions::default()
    };
    let mut reasons = Vec::new();
    let summary = index
        .ingest_items(bulk.as_bytes(), &options, &mut |_| {}, &mut |r| {
            if let tidemark::ItemStatus::Error(reason) = &r.status {
                reasons.push(reason.clone());
            }
        })
        .unwrap();
    assert_eq!(
        (summary.counts.errors, summary.counts.created),
        (5, 1),
        "{reasons:?}"
    );
    for r in &reasons {
        assert!(r.contains("given twice in one object"), "{r}");
    }
}
