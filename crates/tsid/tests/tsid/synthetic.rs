//! Synthetic ids: byte order, text round trip, edge timestamps.

use tidemark_tsid::{SYNTHETIC_ID_LEN, SYNTHETIC_ID_TEXT_LEN, SyntheticId, TSID_LEN, Tsid};

#[test]
fn bytes_are_tsid_then_flipped_big_endian_timestamp() {
    let t = Tsid::from_bytes([0xab; TSID_LEN]);
    let b = SyntheticId::new(t, 0).to_bytes();
    assert_eq!(b.len(), SYNTHETIC_ID_LEN);
    assert_eq!(&b[..TSID_LEN], t.as_bytes());
    assert_eq!(&b[TSID_LEN..], &[0x80, 0, 0, 0, 0, 0, 0, 0]);
    let b = SyntheticId::new(t, -1).to_bytes();
    assert_eq!(
        &b[TSID_LEN..],
        &[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
    );
}

#[test]
fn extreme_timestamps_round_trip() {
    let t = Tsid::from_bytes([0x01; TSID_LEN]);
    for ts in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX] {
        let id = SyntheticId::new(t, ts);
        let text = id.to_string();
        assert_eq!(text.len(), SYNTHETIC_ID_TEXT_LEN);
        let back: SyntheticId = text.parse().unwrap();
        assert_eq!(back, id);
        assert_eq!(back.ts_millis(), ts);
        assert_eq!(back.tsid(), t);
        assert_eq!(SyntheticId::from_bytes(&id.to_bytes()).unwrap(), id);
    }
}

#[test]
fn text_is_url_safe() {
    let id = SyntheticId::new(Tsid::from_bytes([0xff; TSID_LEN]), -1);
    let text = id.to_string();
    assert!(
        text.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    );
    assert!(text.contains('_') || text.contains('-'));
    let mut buf = [0u8; SYNTHETIC_ID_TEXT_LEN];
    assert_eq!(id.encode_text(&mut buf), text);
}
