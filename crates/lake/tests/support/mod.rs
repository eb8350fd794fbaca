//! What the lake's integration tests share.
#![allow(dead_code)]

/// One day in milliseconds.
pub const DAY: i64 = 86_400_000;

/// Serializes a test binary's tests. Each opens an index (taking its OS lock) while the
/// other may be spawning a child: between fork and exec the child holds a copy of every
/// open file, the lock file's included, so a lock released by one test can still look
/// held to the other's child for a moment.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the binary's test lock until dropped.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
