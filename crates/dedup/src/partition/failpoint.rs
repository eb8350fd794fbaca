//! Crash-test failpoints: named places where the process aborts when told to.

/// The environment variable naming a failpoint at which the process aborts (crash tests;
/// see [`PartitionedEngine::enforce_retention`](super::PartitionedEngine::enforce_retention)).
/// Unset in normal runs.
pub const FAILPOINT_ENV: &str = "TIDEMARK_FAILPOINT";

/// Aborts the process (no unwinding, no destructors: as a crash) when the failpoint
/// environment variable names `name`.
pub(super) fn failpoint(name: &str) {
    if std::env::var_os(FAILPOINT_ENV).is_some_and(|v| v == name) {
        std::process::abort();
    }
}
