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
