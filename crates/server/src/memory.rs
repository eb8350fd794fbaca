//! Process-wide memory settings for the binaries that run the server.

/// Turns transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`;
/// inherited by child processes), on Linux; elsewhere it does nothing. Call it first
/// thing in `main`, before the allocator has faulted in much memory.
///
/// The reason is measured. mimalloc asks for huge pages on its arenas with
/// `madvise(MADV_HUGEPAGE)`, so a fault of such a region makes the kernel zero a whole
/// 2 MiB page however little of it is then used, and the page stays resident. Under the
/// k8s line-protocol load of 11.52 M samples, peak RSS fell from 157–167 MiB to 105–125
/// MiB with huge pages off. Ingest rate and server CPU time did not change beyond the
/// machine's noise (docs/results/ingest.md, "transparent huge pages").
///
/// Returns the error of the call. A caller may log it and go on: the setting only
/// affects memory use, never results.
///
/// # Errors
/// The `prctl` error (for instance in a sandbox that filters it).
pub fn disable_transparent_huge_pages() -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        rustix::thread::disable_transparent_huge_pages(true).map_err(std::io::Error::from)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_reports_huge_pages_off() {
        super::disable_transparent_huge_pages().unwrap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("THP_enabled:"));
        // Kernels before 6.x do not print the field; the prctl's own readback covers them.
        if let Some(line) = line {
            assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
        }
        assert!(rustix::thread::transparent_huge_pages_are_disabled().unwrap());
    }
}
