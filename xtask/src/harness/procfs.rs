//! What `/proc` says about a server process and the machine: memory from
//! `/proc/<pid>/status`, the load average.

/// A `kB` field of a `/proc/*/status` text (`key` with its colon, as `VmHWM:`), in KiB.
pub(crate) fn status_field_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A `kB` field of `/proc/<pid>/status` (`VmHWM:`, `VmRSS:`, ...), in KiB; `None` when
/// the process is gone or has no such field.
pub(crate) fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field_kib(&s, key)
}

/// The peak resident set size (`VmHWM`) of process `pid`, in KiB.
pub(crate) fn vm_hwm_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` has them (empty if
/// unreadable): the machine is shared, so reports state its load.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
