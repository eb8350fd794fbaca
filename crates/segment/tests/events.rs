#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Event segments: rows of a series may share a timestamp, each row has its own id.

use proptest::prelude::*;
use tidemark_segment::{Error, Extra, Point, Segment, SegmentOptions, SegmentWriter};
use tidemark_tsid::{SyntheticId, Tsid};

fn event_id(n: u32, ts: i64) -> SyntheticId {
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&n.wrapping_mul(2_654_435_761).to_be_bytes());
    b[19] = 0xE7;
    SyntheticId::new(Tsid::from_bytes(b), ts)
}

fn stream(i: u8) -> Tsid {
    Tsid::from_bytes([i; 20])
}

fn event(n: u32, s: u8, ts: i64) -> Point {
    Point::new(stream(s), ts)
        .dim("host", format!("h{s}"))
        .keyword("message", format!("event {n} happened"))
        .keyword("user", format!("u{}", n % 7))
        .flag("ok", n % 3 == 0)
        .counter("bytes", i64::from(n) * 10)
}

fn write(events: &[(u32, u8, i64)], options: SegmentOptions) -> Segment {
    let mut w = SegmentWriter::new(options.with_events(true)).unwrap();
    for &(n, s, ts) in events {
        w.push_with_id(event(n, s, ts), event_id(n, ts)).unwrap();
    }
    let (bytes, meta) = w.to_vec().unwrap();
    assert_eq!(meta.row_count, events.len() as u64);
    Segment::from_vec(bytes).unwrap()
}

#[test]
fn rows_sharing_a_timestamp_are_all_kept_and_found() {
    // 3 streams, 20 timestamps, 5 events per (stream, timestamp), pushed shuffled.
    let mut events = Vec::new();
    let mut n = 0;
    for s in 0..3u8 {
        for t in 0..20i64 {
            for _ in 0..5 {
                events.push((n, s, 1_000 + t * 7));
                n += 1;
            }
        }
    }
    events.reverse();
    events.swap(3, 200);
    let seg = write(
        &events,
        SegmentOptions::new()
            .with_block_rows(16)
            .with_bloom(0.01)
            .with_id_index(true),
    );
    assert!(seg.is_events());
    assert_eq!(seg.row_count(), 300);
    assert_eq!(seg.series_count(), 3);
    seg.verify().unwrap();
    let all = seg.points(0..seg.row_count(), |_| true).unwrap();
    assert_eq!(all.len(), 300);
    // Rows are ordered by (tsid, ts, id).
    let keys: Vec<_> = all
        .iter()
        .map(|p| {
            let n: u32 = p.extras[0].1.clone().keyword_number();
            (p.tsid, p.ts_millis, event_id(n, p.ts_millis).to_bytes())
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    for &(n, s, ts) in &events {
        let id = event_id(n, ts);
        assert!(seg.may_contain_id(&id).unwrap());
        let row = seg.lookup_id(&id).unwrap().expect("in the id index");
        let p = seg.row(row).unwrap();
        assert_eq!(p, event(n, s, ts).normalized());
        let run = seg.find_all(&stream(s), ts).unwrap();
        assert_eq!(run.end - run.start, 5, "stream {s} ts {ts}");
        assert!(run.contains(&row));
    }
    assert_eq!(seg.find_all(&stream(0), 1_001).unwrap(), 0..0);
    assert_eq!(seg.find_all(&stream(9), 1_000).unwrap(), 0..0);
}

trait KeywordNumber {
    fn keyword_number(self) -> u32;
}

impl KeywordNumber for Extra {
    fn keyword_number(self) -> u32 {
        match self {
            Extra::Keyword(k) => k
                .trim_start_matches("event ")
                .trim_end_matches(" happened")
                .parse()
                .unwrap(),
            Extra::Bool(_) => panic!("not a message"),
        }
    }
}

#[test]
fn the_same_id_twice_is_a_duplicate_point() {
    let mut w = SegmentWriter::new(SegmentOptions::new().with_events(true)).unwrap();
    w.push_with_id(event(1, 0, 5), event_id(1, 5)).unwrap();
    w.push_with_id(event(2, 0, 5), event_id(1, 5)).unwrap();
    assert!(matches!(
        w.to_vec(),
        Err(Error::DuplicatePoint { ts_millis: 5, .. })
    ));
}

#[test]
fn a_time_series_segment_still_refuses_a_shared_timestamp() {
    let mut w = SegmentWriter::new(SegmentOptions::new()).unwrap();
    w.push_with_id(event(1, 0, 5), event_id(1, 5)).unwrap();
    w.push_with_id(event(2, 0, 5), event_id(2, 5)).unwrap();
    assert!(matches!(
        w.to_vec(),
        Err(Error::DuplicatePoint { ts_millis: 5, .. })
    ));
}

#[test]
fn extras_of_points_survive_a_round_trip_and_a_rewrite() {
    let mut w = SegmentWriter::new(SegmentOptions::new().with_block_rows(8)).unwrap();
    for i in 0..100i64 {
        let mut p = Point::new(stream(1), i).gauge("g", i as f64);
        if i % 4 != 0 {
            p = p.keyword("status", if i % 2 == 0 { "ok" } else { "error" });
        }
        w.push(p.flag("f", i % 5 == 0)).unwrap();
    }
    let seg = Segment::from_vec(w.to_vec().unwrap().0).unwrap();
    let pts = seg.points(0..100, |r| r % 10 != 3).unwrap();
    assert_eq!(pts.len(), 90);
    for p in &pts {
        assert_eq!(seg.row(p.ts_millis as u64).unwrap(), *p);
        assert_eq!(p.extras.len(), if p.ts_millis % 4 != 0 { 2 } else { 1 });
    }
    // Rewriting the points (as a merge does) keeps them identical.
    let mut w = SegmentWriter::new(SegmentOptions::new()).unwrap();
    w.extend(pts.clone()).unwrap();
    let again = Segment::from_vec(w.to_vec().unwrap().0).unwrap();
    assert_eq!(again.points(0..90, |_| true).unwrap(), pts);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn every_event_is_found_by_its_id(
        evs in proptest::collection::vec((0u8..3, 0i64..40), 1..300),
        block_rows in 1u32..40,
    ) {
        let events: Vec<(u32, u8, i64)> =
            evs.iter().enumerate().map(|(n, &(s, t))| (n as u32, s, t)).collect();
        let seg = write(&events, SegmentOptions::new().with_block_rows(block_rows).with_id_index(true));
        for &(n, s, ts) in &events {
            let same = events.iter().filter(|e| e.1 == s && e.2 == ts).count() as u64;
            let run = seg.find_all(&stream(s), ts).unwrap();
            prop_assert_eq!(run.end - run.start, same);
            let row = seg.lookup_id(&event_id(n, ts)).unwrap().unwrap();
            prop_assert!(run.contains(&row));
            prop_assert_eq!(seg.row(row).unwrap(), event(n, s, ts).normalized());
        }
    }
}
