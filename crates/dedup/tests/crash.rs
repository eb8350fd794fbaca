//! Crash safety: a child process ingests a generated stream (with retried duplicates and
//! refreshes) and records each acknowledged point in a file; it is killed with SIGKILL at
//! random moments, several times per seed. After reopening: every acknowledged point is
//! present exactly once, nothing is duplicated, and re-ingesting the stream adds nothing.
//! Time-series points under each strategy, and events (fingerprint ids, many events per
//! timestamp) under series-range and bloom.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tidemark_dedup::{Durability, Engine, EngineConfig, EventIds, Mode, Op, Outcome, Strategy};
use tidemark_segment::Point;
use tidemark_tsid::{FingerprintMethod, SyntheticId, Tsid};

mod support;
use support::{assert_all_conflicts, pod_point, tsid};

const CHILD_ENV: &str = "TIDEMARK_DEDUP_CRASH_CHILD";
const STREAM: u64 = 20_000;
const SERIES: u64 = 17;

/// Point `i` of the stream: a time-series point, or (`events`) an event of one of 3
/// streams, 50 events per timestamp.
fn point(i: u64, events: bool) -> Point {
    if events {
        let s = i % 3;
        return Point::new(tsid(s as u8 + 1), (i / 50) as i64 * 1000)
            .dim("host", format!("h{s}"))
            .keyword("message", format!("event number {i}"))
            .flag("ok", i % 2 == 0);
    }
    let s = i % SERIES;
    let mut b = [0u8; 20];
    b[..8].copy_from_slice(&s.to_be_bytes());
    b[12..20].copy_from_slice(&(s * 7919).to_le_bytes());
    pod_point(Tsid::from_bytes(b), (i / SERIES) as i64 * 1000, s).counter("n", i as i64)
}

fn config(strategy: Strategy, events: bool) -> EngineConfig {
    let mode = if events {
        Mode::Events(EventIds::new(FingerprintMethod::Md5))
    } else {
        Mode::TimeSeries
    };
    EngineConfig::new()
        .with_mode(mode)
        .with_strategy(strategy)
        .with_refresh_rows(700)
        .with_block_rows(64)
        .with_durability(Durability::PerRequest)
}

/// The child: ingests the stream in batches, each point followed later by a retry, and
/// appends the indexes of acknowledged points to `acks`.
fn child(dir: &Path, strategy: Strategy, events: bool) {
    let mut engine = Engine::open_or_create(dir, config(strategy, events)).unwrap();
    let mut acks = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.with_extension("acks"))
        .unwrap();
    let mut i = 0;
    while i < STREAM {
        let end = (i + 50).min(STREAM);
        let mut ops: Vec<Op> = (i..end).map(|k| Op::Create(point(k, events))).collect();
        // Retries of earlier points.
        ops.extend(
            (i.saturating_sub(300)..i)
                .step_by(7)
                .map(|k| Op::Create(point(k, events))),
        );
        let out = engine.batch(ops).unwrap();
        let mut line = String::new();
        for (k, o) in (i..end).zip(&out) {
            assert!(matches!(
                o,
                Outcome::Created { .. } | Outcome::Conflict { .. }
            ));
            line.push_str(&format!("{k}\n"));
        }
        acks.write_all(line.as_bytes()).unwrap();
        i = end;
    }
}

#[test]
fn child_process_entry() {
    // Only does something when the crash test starts this binary as its child.
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (mode, rest) = spec.split_once(':').unwrap();
        let (strategy, dir) = rest.split_once(':').unwrap();
        child(Path::new(dir), strategy.parse().unwrap(), mode == "events");
    }
}

fn read_acks(path: &Path) -> HashSet<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // A line torn by the kill has no newline yet.
    let complete = text.rsplit_once('\n').map_or("", |(a, _)| a);
    complete.lines().map(|l| l.parse().unwrap()).collect()
}

fn crash_and_recover(strategy: Strategy, seed: u64, events: bool) {
    let mode = if events { "events" } else { "series" };
    let spec = |dir: &Path| format!("{mode}:{}:{}", strategy.name(), dir.display());
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("engine");
    let acks_path = dir.with_extension("acks");
    let exe = std::env::current_exe().unwrap();
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut interrupted = 0;
    for _ in 0..4 {
        let mut c = Command::new(&exe)
            .args(["--exact", "child_process_entry", "--test-threads", "1"])
            .env(CHILD_ENV, spec(&dir))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Kill once the child has acknowledged a random amount more (the ack file grows
        // by ~6 bytes per point), whatever the speed of the machine and its fsyncs.
        let start = std::fs::metadata(&acks_path).map_or(0, |m| m.len());
        let target = start + 600 + rng % 60_000;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while c.try_wait().unwrap().is_none()
            && std::fs::metadata(&acks_path).map_or(0, |m| m.len()) < target
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        c.kill().unwrap(); // SIGKILL on Unix
        c.wait().unwrap();
        // Every acknowledged point survived the kill, exactly once.
        let acked = read_acks(&acks_path);
        if (acked.len() as u64) < STREAM {
            interrupted += 1;
        }
        let engine = Engine::open(&dir, config(strategy, events)).unwrap();
        let points = engine.points().unwrap();
        let ids: HashSet<SyntheticId> = points.iter().map(|p| engine.id_of(p).unwrap()).collect();
        assert_eq!(ids.len(), points.len(), "a duplicate slipped in");
        for k in &acked {
            assert!(
                ids.contains(&engine.id_of(&point(*k, events)).unwrap()),
                "{mode} {strategy:?} seed {seed}: acked {k} lost"
            );
        }
        assert_eq!(engine.live_count(), points.len() as u64);
    }
    // A last run completes the stream; re-ingesting it then adds nothing.
    let status = Command::new(&exe)
        .args(["--exact", "child_process_entry", "--test-threads", "1"])
        .env(CHILD_ENV, spec(&dir))
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let mut engine = Engine::open(&dir, config(strategy, events)).unwrap();
    assert_eq!(engine.live_count(), STREAM);
    let out = engine
        .batch((0..STREAM).map(|k| Op::Create(point(k, events))))
        .unwrap();
    assert_all_conflicts(out);
    assert_eq!(engine.live_count(), STREAM);
    assert!(interrupted > 0, "the child always finished before its kill");
}

#[test]
fn acknowledged_points_survive_sigkill_exactly_once() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    for (seed, strategy) in [
        (1, Strategy::SeriesRange),
        (2, Strategy::Bloom),
        (3, Strategy::Inverted),
        (4, Strategy::SeriesRange),
    ] {
        crash_and_recover(strategy, seed, false);
    }
}

#[test]
fn acknowledged_events_survive_sigkill_exactly_once() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    for (seed, strategy) in [(5, Strategy::SeriesRange), (6, Strategy::Bloom)] {
        crash_and_recover(strategy, seed, true);
    }
}
