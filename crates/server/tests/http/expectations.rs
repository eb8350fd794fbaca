//! What users of Prometheus and Elasticsearch expect on day one: health probes, and
//! requests Tidemark cannot honour refused with a reason instead of acknowledged and
//! ignored (a `scroll` that never pages, an ILM delete phase that never deletes).

use serde_json::{Value, json};

use crate::support::*;

#[test]
fn health_probes_answer_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tidemark.toml");
    std::fs::write(
        &cfg,
        "[[users]]\nname = \"u\"\npassword = \"p\"\nindices = [\"*\"]\n",
    )
    .unwrap();
    let s = TestServer::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    for (path, text) in [
        ("/-/healthy", "Tidemark is Healthy.\n"),
        ("/-/ready", "Tidemark is Ready.\n"),
    ] {
        let (status, _, body) = send_raw("GET", &s.url(path), None, &[]);
        assert_eq!((status, body.as_str()), (200, text), "{path}");
    }
    // Everything else still needs the credentials.
    assert_eq!(send("GET", &s.url("/_cat/indices"), None, &[]).0, 401);
}

#[test]
fn scroll_is_refused_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    assert_eq!(
        s.bulk("/k8s/_bulk", &k8s_bulk(10, 2, 1_764_460_800_000, None))
            .0,
        200
    );
    let (status, v) = send(
        "POST",
        &s.url("/k8s/_search?scroll=1m"),
        Some(br#"{"size": 2}"#),
        &[("content-type", "application/json")],
    );
    assert_eq!(status, 400, "{v}");
    let reason = v.pointer("/error/reason").and_then(Value::as_str).unwrap();
    assert!(reason.contains("[scroll] is not supported"), "{reason}");
    // Without it the same search pages normally.
    let (status, v) = s.post_json("/k8s/_search", &json!({"size": 2}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v.pointer("/hits/hits")
            .and_then(Value::as_array)
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn an_ilm_policy_that_deletes_is_refused_one_that_rolls_over_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    // What Metricbeat installs: rollover only, accepted (a partitioned store has no use
    // for rollover).
    let beats =
        json!({"policy": {"phases": {"hot": {"actions": {"rollover": {"max_age": "30d"}}}}}});
    assert_eq!(s.put_json("/_ilm/policy/metricbeat", &beats).0, 200);
    for policy in [
        json!({"policy": {"phases": {"hot": {"actions": {}}, "delete": {"min_age": "30d", "actions": {"delete": {}}}}}}),
        json!({"policy": {"phases": {"warm": {"actions": {"delete": {}}}}}}),
    ] {
        let (status, v) = s.put_json("/_ilm/policy/p1", &policy);
        assert_eq!(status, 400, "{v}");
        let reason = v.pointer("/error/reason").and_then(Value::as_str).unwrap();
        assert!(
            reason.contains("delete phase") && reason.contains("retention"),
            "{reason}"
        );
    }
}
