//! Golden vectors: the tsids, synthetic ids and fingerprints of the fixture
//! documents under `fixtures/tsid/` are pinned by an insta snapshot. A
//! change here changes stored data: it needs a new format version, not a
//! snapshot update.

use std::fmt::Write;

use tidemark_tsid::{
    FingerprintBuilder, FingerprintMethod, IdEncoding, SyntheticId, TimestampPrefix,
};

use crate::{fixture, fixture_computer};

#[test]
fn fixture_documents_tsids() {
    let cases = fixture("documents.json");
    let mut c = fixture_computer();
    let mut out = String::new();
    for case in cases.as_array().unwrap() {
        let name = case["case"].as_str().unwrap();
        let ts = case["ts"].as_i64().unwrap();
        let id = c.synthetic_id(&case["doc"], ts).unwrap();
        writeln!(out, "{name}").unwrap();
        writeln!(out, "  tsid   {}", id.tsid()).unwrap();
        writeln!(out, "  ts     {ts}").unwrap();
        writeln!(out, "  id     {id}").unwrap();
        writeln!(out, "  route  {:016x}", id.routing_hash()).unwrap();
        assert_eq!(SyntheticId::parse(&id.to_string()).unwrap(), id);
    }
    insta::assert_snapshot!(out);
}

#[test]
fn fixture_events_fingerprints() {
    let cases = fixture("events.json");
    let mut out = String::new();
    for case in cases.as_array().unwrap() {
        let name = case["case"].as_str().unwrap();
        let ts = case["ts"].as_i64().unwrap();
        writeln!(out, "{name}").unwrap();
        for method in FingerprintMethod::ALL {
            let mut fp = FingerprintBuilder::new(method)
                .fields(["message", "user.name", "source.ip", "tags"])
                .build()
                .unwrap();
            writeln!(
                out,
                "  {:<16} {}",
                method.name(),
                fp.fingerprint(&case["doc"], ts).unwrap()
            )
            .unwrap();
        }
        let mut keyed = FingerprintBuilder::new(FingerprintMethod::Sha256)
            .key(&b"secret"[..])
            .fields(["message", "user.name", "source.ip", "tags"])
            .encoding(IdEncoding::Base64Url)
            .timestamp_prefix(TimestampPrefix::Seconds)
            .build()
            .unwrap();
        writeln!(
            out,
            "  {:<16} {}",
            "hmac-sha256/b64",
            keyed.fingerprint(&case["doc"], ts).unwrap()
        )
        .unwrap();
        let mut whole = FingerprintBuilder::new(FingerprintMethod::Murmur3x64_128)
            .timestamp_prefix(TimestampPrefix::Millis)
            .build()
            .unwrap();
        writeln!(
            out,
            "  {:<16} {}",
            "murmur3/whole",
            whole.fingerprint(&case["doc"], ts).unwrap()
        )
        .unwrap();
    }
    insta::assert_snapshot!(out);
}

/// The layout in `docs/tsid.md`, reimplemented independently in
/// `fixtures/tsid/reference_tsid.py` (plain Python, its own SipHash), gives
/// these bytes.
#[test]
fn matches_the_independent_reference_implementation() {
    let expected = fixture("reference_tsids.json");
    let mut c = fixture_computer();
    for case in expected.as_array().unwrap() {
        let tsid = c.tsid(&case["doc"]).unwrap();
        assert_eq!(
            tsid.to_string(),
            case["tsid"].as_str().unwrap(),
            "{}",
            case["doc"]
        );
    }
}
