//! What a server's data directory holds on disk, and waiting for it to settle.

use std::path::Path;
use std::time::{Duration, Instant};

/// The bytes of every file below `p` (0 for what cannot be read: a server may delete
/// files while this walks).
pub(crate) fn dir_bytes(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Poll `size` until it has not changed for `quiet`, at most `max`.
pub(crate) fn wait_stable(size: impl Fn() -> u64, quiet: Duration, max: Duration) -> u64 {
    let until = Instant::now() + max;
    let mut last = size();
    let mut since = Instant::now();
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(500));
        let now = size();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            break;
        }
    }
    last
}
