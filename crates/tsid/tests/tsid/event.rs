//! Fingerprints match the reference vectors; the canonical concatenation is
//! insensitive to key order and nesting; UUIDs have the right version.

use serde_json::json;
use tidemark_tsid::{
    FingerprintBuilder, FingerprintMethod, IdEncoding, TimestampPrefix, uuid_v4, uuid_v7,
    uuid_v7_at,
};

fn raw(method: FingerprintMethod, key: Option<&[u8]>, data: &[u8]) -> String {
    let mut b = FingerprintBuilder::new(method);
    if let Some(k) = key {
        b = b.key(k);
    }
    let mut out = String::new();
    b.build()
        .unwrap()
        .fingerprint_bytes_into(data, 0, &mut out)
        .unwrap();
    out
}

#[test]
fn cryptographic_hashes_match_reference_vectors() {
    use FingerprintMethod::*;
    // FIPS 180 / RFC 1321 "abc".
    assert_eq!(raw(Md5, None, b"abc"), "900150983cd24fb0d6963f7d28e17f72");
    assert_eq!(
        raw(Sha1, None, b"abc"),
        "a9993e364706816aba3e25717850c26c9cd0d89d"
    );
    assert_eq!(
        raw(Sha256, None, b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        raw(Sha512, None, b"abc"),
        "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
         2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
    );
}

#[test]
fn keyed_cryptographic_hashes_are_hmac() {
    use FingerprintMethod::*;
    // RFC 2202 and RFC 4231, test case 2.
    let (k, d): (&[u8], &[u8]) = (b"Jefe", b"what do ya want for nothing?");
    assert_eq!(raw(Md5, Some(k), d), "750c783e6ab0b503eaa86e310a5db738");
    assert_eq!(
        raw(Sha1, Some(k), d),
        "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
    );
    assert_eq!(
        raw(Sha256, Some(k), d),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(
        raw(Sha512, Some(k), d),
        "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554\
         9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
    );
}

#[test]
fn murmur3_matches_reference_vectors() {
    use FingerprintMethod::Murmur3x64_128 as M;
    // The reference implementation's output bytes (as Python mmh3.hash_bytes).
    assert_eq!(raw(M, None, b""), "00000000000000000000000000000000");
    assert_eq!(raw(M, None, b"hello"), "029bbd41b3a7d8cb191dae486a901e5b");
    assert_eq!(
        raw(M, None, b"The quick brown fox jumps over the lazy dog"),
        "6c1b07bc7bbc4be347939ac4a93c437a"
    );
    let bytes31: Vec<u8> = (0u8..31).collect();
    assert_eq!(raw(M, None, &bytes31), "94d02ca3e1d33d05905400b4ef9ae59e");
    let seed42 = 42u32.to_le_bytes();
    assert_eq!(
        raw(M, Some(&seed42), b""),
        "23851bfa7da72af0b9cb11da106601d1"
    );
    assert_eq!(
        raw(M, Some(&seed42), b"hello"),
        "086faf60c9b3b8c47abcefb075b83423"
    );
    let bytes17: Vec<u8> = (0u8..17).collect();
    assert_eq!(
        raw(M, Some(&seed42), &bytes17),
        "fba12a339df8088f6cdf19cd98b42b59"
    );
}

#[test]
fn siphash128_matches_reference_vectors() {
    // The SipHash reference's vectors_sip128: key 00..0f, messages 00..(n-1).
    let key: Vec<u8> = (0u8..16).collect();
    let s = |n: u8| {
        raw(
            FingerprintMethod::SipHash128,
            Some(&key),
            &(0..n).collect::<Vec<u8>>(),
        )
    };
    assert_eq!(s(0), "a3817f04ba25a8e66df67214c7550293");
    assert_eq!(s(1), "da87c1d86b99af44347659119b22fc45");
    assert_eq!(s(15), "5493e99933b0a8117e08ec0f97cfc3d9");
}

#[test]
fn output_lengths_and_encodings() {
    for m in FingerprintMethod::ALL {
        let hex = raw(m, None, b"x");
        assert_eq!(hex.len(), m.output_len() * 2, "{m:?}");
        let mut fp = FingerprintBuilder::new(m)
            .encoding(IdEncoding::Base64Url)
            .build()
            .unwrap();
        let mut b64 = String::new();
        fp.fingerprint_bytes_into(b"x", 0, &mut b64).unwrap();
        assert_eq!(b64.len(), (m.output_len() * 8).div_ceil(6), "{m:?}");
        assert!(
            b64.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        // Same doc, same id.
        let doc = json!({"a": 1});
        assert_eq!(
            fp.fingerprint(&doc, 0).unwrap(),
            fp.fingerprint(&doc, 0).unwrap()
        );
    }
}

#[test]
fn timestamp_prefix_is_fixed_width_hex() {
    let doc = json!({"message": "x"});
    let mut s = FingerprintBuilder::new(FingerprintMethod::Md5)
        .timestamp_prefix(TimestampPrefix::Seconds)
        .build()
        .unwrap();
    let id = s.fingerprint(&doc, 1_700_000_000_123).unwrap();
    assert_eq!(&id[..8], "6553f100");
    assert_eq!(id.len(), 8 + 32);
    assert_eq!(&s.fingerprint(&doc, 999).unwrap()[..8], "00000000");
    let mut ms = FingerprintBuilder::new(FingerprintMethod::Md5)
        .timestamp_prefix(TimestampPrefix::Millis)
        .build()
        .unwrap();
    let id = ms.fingerprint(&doc, 1_700_000_000_123).unwrap();
    assert_eq!(&id[..12], "018bcfe5687b");
    // Ids of later events sort after earlier ones, whatever the hash.
    let mut ids: Vec<String> = (0..100)
        .map(|i| ms.fingerprint(&json!({"i": i}), 1_000 * i).unwrap())
        .collect();
    let sorted = {
        let mut v = ids.clone();
        v.sort();
        v
    };
    assert_eq!(ids, sorted);
    ids.dedup();
    assert_eq!(ids.len(), 100);
}

#[test]
fn canonical_ignores_key_order_and_nesting() {
    let mut fp = FingerprintBuilder::new(FingerprintMethod::Sha256)
        .fields(["message", "user.name", "source.ip"])
        .build()
        .unwrap();
    let a = json!({"message": "m", "user": {"name": "alice"}, "source.ip": "10.1.2.3", "x": 1});
    let b = json!({"source": {"ip": "10.1.2.3"}, "user.name": "alice", "message": "m", "x": 2});
    assert_eq!(
        fp.fingerprint(&a, 0).unwrap(),
        fp.fingerprint(&b, 0).unwrap()
    );
    // A missing field and a null one are the same; a changed one is not.
    let c = json!({"message": "m", "user": {"name": "alice"}});
    let d = json!({"message": "m", "user": {"name": "alice"}, "source": {"ip": null}});
    assert_eq!(
        fp.fingerprint(&c, 0).unwrap(),
        fp.fingerprint(&d, 0).unwrap()
    );
    assert_ne!(
        fp.fingerprint(&a, 0).unwrap(),
        fp.fingerprint(&c, 0).unwrap()
    );
    // Types are tagged: "1" and 1 differ.
    let mut one = FingerprintBuilder::new(FingerprintMethod::Md5)
        .field("v")
        .build()
        .unwrap();
    assert_ne!(
        one.fingerprint(&json!({"v": 1}), 0).unwrap(),
        one.fingerprint(&json!({"v": "1"}), 0).unwrap()
    );
    assert_eq!(
        one.fingerprint(&json!({"v": 0.0}), 0).unwrap(),
        one.fingerprint(&json!({"v": -0.0}), 0).unwrap()
    );
    // Field boundaries are length-prefixed: ("ab","c") differs from ("a","bc").
    let mut two = FingerprintBuilder::new(FingerprintMethod::Md5)
        .fields(["p", "q"])
        .build()
        .unwrap();
    assert_ne!(
        two.fingerprint(&json!({"p": "ab", "q": "c"}), 0).unwrap(),
        two.fingerprint(&json!({"p": "a", "q": "bc"}), 0).unwrap()
    );
}

#[test]
fn whole_document_when_no_field_is_chosen() {
    let mut fp = FingerprintBuilder::new(FingerprintMethod::Murmur3x64_128)
        .build()
        .unwrap();
    let a: serde_json::Value =
        serde_json::from_str(r#"{"b": [1, {"y": 2, "x": 1}], "a": "z"}"#).unwrap();
    let b: serde_json::Value = serde_json::from_str(r#"{"a":"z","b":[1,{"x":1,"y":2}]}"#).unwrap();
    let c: serde_json::Value = serde_json::from_str(r#"{"a":"z","b":[{"x":1,"y":2},1]}"#).unwrap();
    assert_eq!(
        fp.fingerprint(&a, 0).unwrap(),
        fp.fingerprint(&b, 0).unwrap()
    );
    assert_ne!(
        fp.fingerprint(&a, 0).unwrap(),
        fp.fingerprint(&c, 0).unwrap()
    );
}

#[test]
fn uuids_have_their_version_and_time() {
    let v4 = uuid_v4();
    assert_eq!(v4.get_version_num(), 4);
    assert_ne!(v4, uuid_v4());
    let v7 = uuid_v7();
    assert_eq!(v7.get_version_num(), 7);
    // now_v7 is monotonic within the process.
    let later = uuid_v7();
    assert!(later > v7);
    let at = uuid_v7_at(1_700_000_000_123).unwrap();
    assert_eq!(at.get_version_num(), 7);
    let (secs, nanos) = at.get_timestamp().unwrap().to_unix();
    assert_eq!((secs, nanos), (1_700_000_000, 123_000_000));
    assert!(uuid_v7_at(1_700_000_000_124).unwrap() > at);
}
