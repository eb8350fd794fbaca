//! Every bad input is a typed error naming the field, never a panic.

use serde_json::json;
use tidemark_tsid::{
    DimValue, Error, FingerprintBuilder, FingerprintMethod, MAX_DIMENSIONS, MAX_KEYWORD_LEN,
    MAX_NAME_LEN, MetricNames, SyntheticId, TimestampPrefix, TsidBuilder, uuid_v7_at,
};

use crate::fixture_computer;

#[test]
fn rejects_document_without_dimensions() {
    let mut c = fixture_computer();
    assert_eq!(
        c.tsid(&json!({"cpu": 1, "host": {"os": "linux"}})),
        Err(Error::NoDimensions { expected: 6 })
    );
    assert_eq!(
        c.tsid_from_pairs(&[], &[]),
        Err(Error::NoDimensions { expected: 0 })
    );
}

#[test]
fn rejects_document_that_is_not_an_object() {
    let mut c = fixture_computer();
    assert_eq!(
        c.tsid(&json!([1, 2])),
        Err(Error::NotAnObject { found: "array" })
    );
}

#[test]
fn rejects_object_or_array_dimension() {
    let mut c = fixture_computer();
    assert_eq!(
        c.tsid(&json!({"region": {"name": "eu"}})),
        Err(Error::NotAScalar {
            name: "region".into(),
            found: "object"
        })
    );
    assert_eq!(
        c.tsid(&json!({"host": {"name": ["a", "b"]}})),
        Err(Error::NotAScalar {
            name: "host.name".into(),
            found: "array"
        })
    );
}

#[test]
fn rejects_float_dimension() {
    let mut c = fixture_computer();
    assert_eq!(
        c.tsid(&json!({"pid": 1.5})),
        Err(Error::FloatDimension {
            name: "pid".into(),
            value: 1.5
        })
    );
    // 1.0 in JSON text is a float too: it would otherwise alias 1.
    let doc: serde_json::Value = serde_json::from_str(r#"{"pid": 1.0}"#).unwrap();
    assert!(matches!(c.tsid(&doc), Err(Error::FloatDimension { .. })));
    assert_eq!(
        c.tsid_from_pairs(&[("load", DimValue::F64(0.25))], &[]),
        Err(Error::FloatDimension {
            name: "load".into(),
            value: 0.25
        })
    );
}

#[test]
fn rejects_nan_dimension() {
    let mut c = fixture_computer();
    assert_eq!(
        c.tsid_from_pairs(&[("load", DimValue::F64(f64::NAN))], &[]),
        Err(Error::NotANumber {
            name: "load".into()
        })
    );
}

#[test]
fn rejects_name_over_limit() {
    let long = "n".repeat(MAX_NAME_LEN + 1);
    let err = TsidBuilder::new()
        .dimension(long.clone())
        .build()
        .unwrap_err();
    assert!(
        matches!(err, Error::NameTooLong { len, max, .. } if len == MAX_NAME_LEN + 1 && max == MAX_NAME_LEN)
    );
    let mut c = fixture_computer();
    assert!(matches!(
        c.tsid_from_pairs(&[(long.as_str(), "v".into())], &[]),
        Err(Error::NameTooLong { .. })
    ));
    // A metric name over the limit, found in a document.
    let mut doc = json!({"host": {"name": "a"}});
    doc[long.as_str()] = json!(1);
    assert!(matches!(c.tsid(&doc), Err(Error::NameTooLong { .. })));
    // At the limit is fine.
    let at_limit = "n".repeat(MAX_NAME_LEN);
    assert!(TsidBuilder::new().dimension(at_limit).build().is_ok());
}

#[test]
fn rejects_keyword_over_limit() {
    let mut c = fixture_computer();
    let ok = "v".repeat(MAX_KEYWORD_LEN);
    assert!(c.tsid(&json!({"region": ok})).is_ok());
    let long = "v".repeat(MAX_KEYWORD_LEN + 1);
    assert_eq!(
        c.tsid(&json!({"region": long})),
        Err(Error::ValueTooLong {
            name: "region".into(),
            len: MAX_KEYWORD_LEN + 1,
            max: MAX_KEYWORD_LEN
        })
    );
    // The limit is in bytes, not characters.
    let wide = "é".repeat(MAX_KEYWORD_LEN / 2 + 1);
    assert!(matches!(
        c.tsid(&json!({"region": wide})),
        Err(Error::ValueTooLong { len, .. }) if len == MAX_KEYWORD_LEN + 2
    ));
}

#[test]
fn rejects_duplicate_paths() {
    let dup = |path: &str| Err::<(), _>(Error::DuplicatePath { path: path.into() });
    assert_eq!(
        TsidBuilder::new()
            .dimensions(["a", "b", "a"])
            .build()
            .map(|_| ()),
        dup("a")
    );
    assert_eq!(
        TsidBuilder::new()
            .dimension("a")
            .metric_names(MetricNames::Listed(vec!["a".into()]))
            .build()
            .map(|_| ()),
        dup("a")
    );
    let mut c = fixture_computer();
    assert_eq!(
        c.tsid_from_pairs(&[("x", "1".into()), ("x", "2".into())], &[])
            .map(|_| ()),
        dup("x")
    );
    // The same field dotted and nested in one document.
    assert_eq!(
        c.tsid(&json!({"host.name": "a", "host": {"name": "b"}}))
            .map(|_| ()),
        dup("host.name")
    );
    // The same metric dotted and nested.
    assert_eq!(
        c.tsid(&json!({"region": "eu", "mem.used": 1, "mem": {"used": 2}}))
            .map(|_| ()),
        dup("mem.used")
    );
    assert_eq!(
        c.tsid_from_pairs(&[("x", "1".into())], &["m", "m"])
            .map(|_| ()),
        dup("m")
    );
    assert_eq!(
        FingerprintBuilder::new(FingerprintMethod::Md5)
            .fields(["a", "a"])
            .build()
            .map(|_| ()),
        dup("a")
    );
}

#[test]
fn rejects_empty_field_name_in_document() {
    let mut c = fixture_computer();
    assert_eq!(
        c.tsid(&json!({"": 1, "host": {"name": "a"}})),
        Err(Error::InvalidPath { path: "".into() })
    );
}

#[test]
fn rejects_invalid_paths() {
    for bad in ["", "a..b", ".a", "a."] {
        assert_eq!(
            TsidBuilder::new().dimension(bad).build().map(|_| ()),
            Err(Error::InvalidPath { path: bad.into() })
        );
    }
}

#[test]
fn rejects_invalid_utf8() {
    let mut c = fixture_computer();
    assert_eq!(
        c.tsid_from_pairs(&[("host.name", DimValue::KeywordBytes(b"ab\xff"))], &[]),
        Err(Error::InvalidUtf8 {
            name: "host.name".into(),
            valid_up_to: 2
        })
    );
}

#[test]
fn rejects_invalid_ip() {
    let mut c = fixture_computer();
    assert_eq!(
        c.tsid(&json!({"host": {"ip": "10.0.0.256"}})),
        Err(Error::InvalidIp {
            name: "host.ip".into(),
            value: "10.0.0.256".into()
        })
    );
    assert_eq!(
        c.tsid(&json!({"host": {"ip": 167772161}})),
        Err(Error::InvalidIp {
            name: "host.ip".into(),
            value: "167772161".into()
        })
    );
}

#[test]
fn rejects_too_many_dimensions() {
    let names: Vec<String> = (0..=MAX_DIMENSIONS).map(|i| format!("d{i}")).collect();
    assert_eq!(
        TsidBuilder::new()
            .dimensions(names.clone())
            .build()
            .map(|_| ()),
        Err(Error::TooMany {
            what: "dimensions",
            count: MAX_DIMENSIONS + 1,
            max: MAX_DIMENSIONS
        })
    );
    let pairs: Vec<(&str, tidemark_tsid::DimValue<'_>)> = names
        .iter()
        .map(|n| (n.as_str(), DimValue::Bool(true)))
        .collect();
    let mut c = fixture_computer();
    assert!(matches!(
        c.tsid_from_pairs(&pairs, &[]),
        Err(Error::TooMany { .. })
    ));
}

#[test]
fn batch_error_names_the_document() {
    let mut c = fixture_computer();
    let docs = [json!({"pid": 1}), json!({"pid": 2}), json!({"pid": 2.5})];
    let mut out = Vec::new();
    let err = c.tsid_batch(&docs, &mut out).unwrap_err();
    assert_eq!(
        err,
        Error::InBatch {
            index: 2,
            source: Box::new(Error::FloatDimension {
                name: "pid".into(),
                value: 2.5
            })
        }
    );
    assert_eq!(out.len(), 2);
    assert_eq!(
        err.to_string(),
        "document 2 of the batch: dimension `pid` is a float (2.5): expected keyword, integer, boolean or ip"
    );
}

#[test]
fn rejects_malformed_synthetic_id_text() {
    let good = SyntheticId::new(tidemark_tsid::Tsid::from_bytes([9; 20]), 42).to_string();
    assert_eq!(
        SyntheticId::parse(""),
        Err(Error::InvalidIdLength {
            expected: 38,
            found: 0
        })
    );
    assert!(matches!(
        SyntheticId::parse(&good[..37]),
        Err(Error::InvalidIdLength { found: 37, .. })
    ));
    assert!(matches!(
        SyntheticId::parse(&format!("{good}A")),
        Err(Error::InvalidIdLength { found: 39, .. })
    ));
    // Standard base64's '+' and '/' are not base64url, nor is padding.
    for bad_char in ['+', '/', '=', ' ', '!'] {
        let bad = format!("{bad_char}{}", &good[1..]);
        assert!(
            matches!(SyntheticId::parse(&bad), Err(Error::InvalidIdText { .. })),
            "{bad:?}"
        );
    }
    // Non-ASCII of the right byte length.
    let bad = format!("é{}", &good[2..]);
    assert!(SyntheticId::parse(&bad).is_err());
    assert!(SyntheticId::from_bytes(&[0; 27]).is_err());
}

#[test]
fn rejects_wrong_key_length() {
    assert_eq!(
        FingerprintBuilder::new(FingerprintMethod::SipHash128)
            .key(vec![0u8; 15])
            .build()
            .map(|_| ()),
        Err(Error::InvalidKeyLength {
            method: "siphash-2-4-128",
            expected: 16,
            found: 15
        })
    );
    assert_eq!(
        FingerprintBuilder::new(FingerprintMethod::Murmur3x64_128)
            .key(vec![0u8; 8])
            .build()
            .map(|_| ()),
        Err(Error::InvalidKeyLength {
            method: "murmur3-x64-128",
            expected: 4,
            found: 8
        })
    );
    // HMAC takes any key length.
    for len in [0, 1, 64, 200] {
        assert!(
            FingerprintBuilder::new(FingerprintMethod::Sha256)
                .key(vec![1u8; len])
                .build()
                .is_ok()
        );
    }
}

#[test]
fn rejects_timestamp_outside_prefix_range() {
    let mut fp = FingerprintBuilder::new(FingerprintMethod::Md5)
        .timestamp_prefix(TimestampPrefix::Seconds)
        .build()
        .unwrap();
    let doc = json!({"a": 1});
    assert!(matches!(
        fp.fingerprint(&doc, -1),
        Err(Error::TimestampOutOfRange {
            ts_millis: -1,
            unit: "s",
            ..
        })
    ));
    assert!(matches!(
        fp.fingerprint(&doc, (i64::from(u32::MAX) + 1) * 1000),
        Err(Error::TimestampOutOfRange { .. })
    ));
    assert!(
        fp.fingerprint(&doc, i64::from(u32::MAX) * 1000 + 999)
            .is_ok()
    );
    let mut ms = FingerprintBuilder::new(FingerprintMethod::Md5)
        .timestamp_prefix(TimestampPrefix::Millis)
        .build()
        .unwrap();
    assert!(matches!(
        ms.fingerprint(&doc, 1 << 48),
        Err(Error::TimestampOutOfRange { max, unit: "ms", .. }) if max == (1 << 48) - 1
    ));
    assert!(matches!(
        uuid_v7_at(-5),
        Err(Error::TimestampOutOfRange { ts_millis: -5, .. })
    ));
    assert!(matches!(
        fp.fingerprint(&json!("text"), 0),
        Err(Error::NotAnObject { found: "string" })
    ));
}
