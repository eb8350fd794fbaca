//! What makes two documents the same series, and what does not.

use std::net::IpAddr;

use serde_json::json;
use tidemark_tsid::{DimValue, MetricNames, TsidBuilder};

use crate::fixture_computer;

#[test]
fn key_order_nesting_and_whitespace_do_not_matter() {
    let mut c = fixture_computer();
    let texts = [
        r#"{"host":{"name":"a","ip":"10.0.0.1"},"region":"eu","cpu":1}"#,
        r#"{ "cpu" : 2 , "region" : "eu" , "host.ip" : "10.0.0.1", "host.name" : "a" }"#,
        r#"{"region":"eu","host":{"ip":"10.0.0.1"},"host.name":"a","cpu":3}"#,
    ];
    let tsids: Vec<_> = texts
        .iter()
        .map(|t| c.tsid(&serde_json::from_str(t).unwrap()).unwrap())
        .collect();
    assert_eq!(tsids[0], tsids[1]);
    assert_eq!(tsids[0], tsids[2]);
}

#[test]
fn a_number_and_its_string_are_different_values() {
    let mut c = fixture_computer();
    let n = c.tsid(&json!({"pid": 1})).unwrap();
    let s = c.tsid(&json!({"pid": "1"})).unwrap();
    let b = c.tsid(&json!({"pid": true})).unwrap();
    assert_ne!(n, s);
    assert_ne!(n, b);
    assert_ne!(s, b);
}

#[test]
fn value_not_rust_type_is_hashed_for_integers() {
    let mut c = TsidBuilder::new().build().unwrap();
    let a = c
        .tsid_from_pairs(&[("pid", DimValue::I64(5))], &[])
        .unwrap();
    let b = c
        .tsid_from_pairs(&[("pid", DimValue::U64(5))], &[])
        .unwrap();
    assert_eq!(a, b);
    let big = c
        .tsid_from_pairs(&[("pid", DimValue::U64(u64::MAX))], &[])
        .unwrap();
    let minus_one = c
        .tsid_from_pairs(&[("pid", DimValue::I64(-1))], &[])
        .unwrap();
    assert_ne!(big, minus_one);
}

#[test]
fn ip_addresses_are_normalised() {
    let mut c = fixture_computer();
    let v4 = c.tsid(&json!({"host": {"ip": "10.0.0.1"}})).unwrap();
    let mapped = c.tsid(&json!({"host": {"ip": "::ffff:10.0.0.1"}})).unwrap();
    let long = c
        .tsid(&json!({"host": {"ip": "0:0:0:0:0:ffff:a00:1"}}))
        .unwrap();
    assert_eq!(v4, mapped);
    assert_eq!(v4, long);
    let v6a = c.tsid(&json!({"host": {"ip": "2001:db8::1"}})).unwrap();
    let v6b = c
        .tsid(&json!({"host": {"ip": "2001:0DB8:0:0:0:0:0:0001"}}))
        .unwrap();
    assert_eq!(v6a, v6b);
    // A keyword dimension keeps the text as written.
    let mut k = TsidBuilder::new().dimension("host.ip").build().unwrap();
    assert_ne!(
        k.tsid(&json!({"host.ip": "10.0.0.1"})).unwrap(),
        k.tsid(&json!({"host.ip": "::ffff:10.0.0.1"})).unwrap()
    );
}

#[test]
fn json_and_typed_pairs_agree() {
    let mut c = fixture_computer();
    let ip: IpAddr = "10.0.0.1".parse().unwrap();
    let from_json = c
        .tsid(&json!({"host": {"name": "a", "ip": "10.0.0.1"}, "pid": 7, "up": true, "cpu": 1, "mem": 2}))
        .unwrap();
    let from_pairs = c
        .tsid_from_pairs(
            &[
                ("up", DimValue::Bool(true)),
                ("host.ip", DimValue::Ip(ip)),
                ("pid", DimValue::U64(7)),
                ("host.name", DimValue::KeywordBytes(b"a")),
            ],
            &["mem", "cpu"],
        )
        .unwrap();
    assert_eq!(from_json, from_pairs);
}

#[test]
fn metric_names_join_the_identity_by_default() {
    let mut c = fixture_computer();
    let cpu = c
        .tsid(&json!({"@timestamp": 1, "host": {"name": "a"}, "cpu": 1}))
        .unwrap();
    let mem = c
        .tsid(&json!({"@timestamp": 1, "host": {"name": "a"}, "mem": 1}))
        .unwrap();
    let cpu_other_ts = c
        .tsid(&json!({"@timestamp": 2, "host": {"name": "a"}, "cpu": 9}))
        .unwrap();
    assert_ne!(cpu, mem);
    // The timestamp is excluded and metric values do not count.
    assert_eq!(cpu, cpu_other_ts);
    // Same dimensions: same sortable prefix, so the two sort together.
    assert_eq!(cpu.prefix(), mem.prefix());
}

#[test]
fn metric_names_off_gives_a_function_of_dimensions() {
    let mut c = TsidBuilder::new()
        .dimension("host.name")
        .metric_names(MetricNames::Off)
        .build()
        .unwrap();
    let cpu = c.tsid(&json!({"host": {"name": "a"}, "cpu": 1})).unwrap();
    let mem = c.tsid(&json!({"host": {"name": "a"}, "mem": 1})).unwrap();
    assert_eq!(cpu, mem);
    let pairs = c
        .tsid_from_pairs(&[("host.name", "a".into())], &["ignored"])
        .unwrap();
    assert_eq!(cpu, pairs);
}

#[test]
fn listed_metric_names_ignore_other_fields() {
    let mut c = TsidBuilder::new()
        .dimension("host.name")
        .metric_names(MetricNames::Listed(vec!["cpu".into(), "mem.used".into()]))
        .build()
        .unwrap();
    let a = c
        .tsid(&json!({"host": {"name": "a"}, "cpu": 1, "label": "x"}))
        .unwrap();
    let b = c
        .tsid(&json!({"host": {"name": "a"}, "cpu": 2, "label": "y"}))
        .unwrap();
    let m = c
        .tsid(&json!({"host": {"name": "a"}, "mem": {"used": 5}}))
        .unwrap();
    let both = c
        .tsid(&json!({"host": {"name": "a"}, "cpu": 2, "mem.used": 5}))
        .unwrap();
    assert_eq!(a, b);
    assert_ne!(a, m);
    assert_ne!(a, both);
    // Without metrics it is the dimensions' tsid, as with metrics off.
    let mut off = TsidBuilder::new()
        .dimension("host.name")
        .metric_names(MetricNames::Off)
        .build()
        .unwrap();
    assert_eq!(
        c.tsid(&json!({"host": {"name": "a"}})).unwrap(),
        off.tsid(&json!({"host": {"name": "a"}})).unwrap()
    );
}

#[test]
fn absent_and_null_dimensions_are_skipped() {
    let mut c = fixture_computer();
    let a = c.tsid(&json!({"host": {"name": "a"}})).unwrap();
    let b = c
        .tsid(&json!({"host": {"name": "a", "ip": null}, "region": null}))
        .unwrap();
    assert_eq!(a, b);
}

#[test]
fn prefix_groups_series_by_names_and_leading_values() {
    let mut c = TsidBuilder::new()
        .dimensions(["a", "b", "c", "d"])
        .build()
        .unwrap();
    let x = c
        .tsid(&json!({"a": "1", "b": "2", "c": "3", "d": "4"}))
        .unwrap();
    let y = c
        .tsid(&json!({"a": "1", "b": "2", "c": "3", "d": "5"}))
        .unwrap();
    let z = c
        .tsid(&json!({"a": "1", "b": "2", "c": "9", "d": "4"}))
        .unwrap();
    assert_ne!(x, y);
    // The fourth value is not in the prefix; the third is.
    assert_eq!(x.prefix(), y.prefix());
    assert_eq!(x.prefix()[..3], z.prefix()[..3]);
    // The names byte depends on names only.
    let w = c
        .tsid(&json!({"a": "7", "b": "8", "c": "9", "d": "0"}))
        .unwrap();
    assert_eq!(x.prefix()[0], w.prefix()[0]);
}

#[test]
fn batch_matches_single_calls() {
    let mut c = fixture_computer();
    let docs: Vec<_> = (0..50)
        .map(|i| json!({"host": {"name": format!("h{i}")}, "pid": i, "cpu": 1}))
        .collect();
    let mut out = Vec::with_capacity(docs.len());
    c.tsid_batch(&docs, &mut out).unwrap();
    let single: Vec<_> = docs.iter().map(|d| c.tsid(d).unwrap()).collect();
    assert_eq!(out, single);

    let mut ids = Vec::new();
    c.synthetic_id_batch(docs.iter().zip(0i64..), &mut ids)
        .unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(id.tsid(), single[i]);
        assert_eq!(id.ts_millis(), i as i64);
    }
}

#[test]
fn routing_hash_and_shard_follow_the_series() {
    let mut c = fixture_computer();
    let a = c.synthetic_id(&json!({"host": {"name": "a"}}), 1).unwrap();
    let b = c.synthetic_id(&json!({"host": {"name": "a"}}), 2).unwrap();
    assert_eq!(a.routing_hash(), b.routing_hash());
    let n = std::num::NonZeroU32::new(7).unwrap();
    assert_eq!(a.shard(n), b.shard(n));
    // Shards spread: 7 shards over 7000 series all get some.
    let mut counts = [0u32; 7];
    for i in 0..7000 {
        let t = c.tsid(&json!({"host": {"name": format!("h{i}")}})).unwrap();
        counts[t.shard(n) as usize] += 1;
    }
    assert!(
        counts.iter().all(|&k| (800..1200).contains(&k)),
        "{counts:?}"
    );
}

#[test]
fn values_in_declaration_order_match_documents_and_pairs() {
    let mut c = TsidBuilder::new()
        .dimension("zone")
        .ip_dimension("host.ip")
        .dimension("host.name")
        .build()
        .unwrap();
    assert_eq!(
        c.dimension_paths().collect::<Vec<_>>(),
        ["zone", "host.ip", "host.name"]
    );
    let ip: IpAddr = "10.0.0.1".parse().unwrap();
    let from_values = c
        .tsid_from_values(
            &[
                Some(DimValue::I64(3)),
                Some(DimValue::Ip(ip)),
                Some("a".into()),
            ],
            &["cpu"],
        )
        .unwrap();
    let from_doc = c
        .tsid(&json!({"host": {"name": "a", "ip": "10.0.0.1"}, "zone": 3, "cpu": 0.5}))
        .unwrap();
    let from_pairs = c
        .tsid_from_pairs(
            &[
                ("host.name", "a".into()),
                ("zone", DimValue::U64(3)),
                ("host.ip", DimValue::Ip(ip)),
            ],
            &["cpu"],
        )
        .unwrap();
    assert_eq!(from_values, from_doc);
    assert_eq!(from_values, from_pairs);
    // None is absent.
    let partial = c
        .tsid_from_values(&[None, None, Some("a".into())], &[])
        .unwrap();
    assert_eq!(partial, c.tsid(&json!({"host": {"name": "a"}})).unwrap());
    assert_eq!(
        c.tsid_from_values(&[None, None, None], &[]),
        Err(tidemark_tsid::Error::NoDimensions { expected: 3 })
    );
    assert_eq!(
        c.tsid_from_values(&[None], &[]),
        Err(tidemark_tsid::Error::WrongValueCount {
            expected: 3,
            found: 1
        })
    );
}

#[test]
fn excluding_an_object_excludes_its_fields() {
    let mut c = TsidBuilder::new()
        .dimension("host")
        .metric_names(MetricNames::AllOtherFields {
            exclude: vec!["@timestamp".into(), "labels".into()],
        })
        .build()
        .unwrap();
    let a = c
        .tsid(&json!({"host": "a", "cpu": 1, "labels": {"team": "x"}}))
        .unwrap();
    let b = c
        .tsid(&json!({"host": "a", "cpu": 2, "labels": {"owner": "y"}}))
        .unwrap();
    assert_eq!(a, b);
}

#[test]
fn repeated_and_changing_metric_names_give_the_tsids_of_a_fresh_computer() {
    // One computer remembers the previous metric names; a fresh one per call cannot.
    let build = || {
        TsidBuilder::new()
            .dimension("host")
            .metric_names(MetricNames::Listed(Vec::new()))
            .build()
            .unwrap()
    };
    let mut reused = build();
    let calls: [&[&str]; 8] = [
        &["cpu", "mem"],
        &["cpu", "mem"],
        &["mem", "cpu"],
        &["cpu"],
        &[],
        &[],
        &["cpu", "mem", "disk"],
        &["cpu", "mem"],
    ];
    for (i, names) in calls.iter().enumerate() {
        let host = if i % 2 == 0 { "a" } else { "b" };
        let got = reused
            .tsid_from_values(&[Some(host.into())], names)
            .unwrap();
        let want = build()
            .tsid_from_values(&[Some(host.into())], names)
            .unwrap();
        assert_eq!(got, want, "call {i}: {names:?}");
    }
    // A failed call (a duplicate name) is not remembered as a success.
    assert!(
        reused
            .tsid_from_values(&[Some("a".into())], &["x", "x"])
            .is_err()
    );
    assert!(
        reused
            .tsid_from_values(&[Some("a".into())], &["x", "x"])
            .is_err()
    );
    assert_ne!(
        reused
            .tsid_from_values(&[Some("a".into())], &["cpu"])
            .unwrap(),
        reused.tsid_from_values(&[Some("a".into())], &[]).unwrap()
    );
}
