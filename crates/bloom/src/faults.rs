//! Fault injection at the workspace's file write sites, for tests: make a create, a
//! write, an fsync, a rename or a truncation of a matching path fail with `ENOSPC` or
//! `EIO`, or write only part of a buffer, on demand.
//!
//! Every durable write of the store goes through [`AtomicFile`](crate::AtomicFile),
//! [`sync_dir`](crate::sync_dir) or the write-ahead log, and each calls
//! [`check`] (or [`allowance`] for a write) first, naming the file and the operation.
//! Without the `fault-injection` feature these are inlined no-ops; with it, rules come
//! from [`inject`] (tests in one process: each matches its own temporary directory, so
//! tests running at once do not see each other's) or from the `TIDEMARK_FAULTS`
//! environment variable, read once (a real binary under test):
//!
//! ```text
//! TIDEMARK_FAULTS="sync:eio:/wal-:skip=3:times=1;write:enospc:/seg-"
//! ```
//!
//! is `op:fault:path-substring[:skip=N][:times=N]` rules separated by `;` (ops
//! `create`, `write`, `sync`, `rename`, `truncate`, `syncdir`; faults `enospc`, `eio`,
//! `short`; `times=0`, the default, is every time).

use std::io;
use std::path::Path;

/// A file operation that can be made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Creating or opening a file for writing.
    Create,
    /// Writing bytes.
    Write,
    /// `fsync`/`fdatasync` of a file.
    Sync,
    /// Renaming a written file into place.
    Rename,
    /// Truncating a file (the log's torn tail at recovery).
    Truncate,
    /// `fsync` of a directory.
    SyncDir,
}

/// How an operation fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// `ENOSPC`: no space left on device.
    NoSpace,
    /// `EIO`: an I/O error.
    Io,
    /// A write of half the buffer, then `ENOSPC` (as a filesystem filling mid-write).
    ShortWrite,
}

/// One rule: `op` on a path containing `path_contains` fails with `fault`, after
/// `skip` matching operations succeeded, `times` times (0: every time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The operation.
    pub op: Op,
    /// The failure.
    pub fault: Fault,
    /// A substring of the path (a test's temporary directory, `/wal-`, `/seg-`).
    pub path_contains: String,
    /// Matching operations let through first.
    pub skip: u32,
    /// Failures before the rule is spent (0: never spent).
    pub times: u32,
}

impl Rule {
    /// A rule failing `op` on paths containing `path_contains` with `fault`, every time.
    pub fn new(op: Op, fault: Fault, path_contains: impl Into<String>) -> Rule {
        Rule {
            op,
            fault,
            path_contains: path_contains.into(),
            skip: 0,
            times: 0,
        }
    }

    /// The same rule, letting `n` matching operations through first.
    pub fn skip(mut self, n: u32) -> Rule {
        self.skip = n;
        self
    }

    /// The same rule, spent after `n` failures.
    pub fn times(mut self, n: u32) -> Rule {
        self.times = n;
        self
    }

    /// Parses one `op:fault:path[:skip=N][:times=N]` rule.
    ///
    /// # Errors
    /// What is wrong with the text.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let mut parts = text.split(':');
        let op = match parts.next().unwrap_or("") {
            "create" => Op::Create,
            "write" => Op::Write,
            "sync" => Op::Sync,
            "rename" => Op::Rename,
            "truncate" => Op::Truncate,
            "syncdir" => Op::SyncDir,
            other => return Err(format!("unknown operation {other:?} in {text:?}")),
        };
        let fault = match parts.next().unwrap_or("") {
            "enospc" => Fault::NoSpace,
            "eio" => Fault::Io,
            "short" => Fault::ShortWrite,
            other => return Err(format!("unknown fault {other:?} in {text:?}")),
        };
        let path = parts
            .next()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("no path in {text:?}"))?;
        let mut rule = Rule::new(op, fault, path);
        for p in parts {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("expected key=value, got {p:?} in {text:?}"))?;
            let n: u32 = v
                .parse()
                .map_err(|_| format!("{k} takes a number, got {v:?} in {text:?}"))?;
            match k {
                "skip" => rule.skip = n,
                "times" => rule.times = n,
                other => return Err(format!("unknown key {other:?} in {text:?}")),
            }
        }
        Ok(rule)
    }
}

/// The error `fault` makes.
pub fn error_of(fault: Fault) -> io::Error {
    match fault {
        Fault::NoSpace | Fault::ShortWrite => io::Error::from_raw_os_error(28),
        Fault::Io => io::Error::from_raw_os_error(5),
    }
}

#[cfg(feature = "fault-injection")]
mod active {
    use std::sync::{Mutex, MutexGuard, OnceLock};

    use super::{Fault, Op, Rule};

    pub(super) struct Armed {
        pub(super) rule: Rule,
        pub(super) seen: u32,
        pub(super) failed: u32,
    }

    pub(super) fn rules() -> MutexGuard<'static, Vec<Armed>> {
        static RULES: OnceLock<Mutex<Vec<Armed>>> = OnceLock::new();
        let m = RULES.get_or_init(|| {
            let mut v = Vec::new();
            if let Ok(text) = std::env::var("TIDEMARK_FAULTS") {
                for part in text.split(';').filter(|p| !p.trim().is_empty()) {
                    match Rule::parse(part.trim()) {
                        Ok(rule) => v.push(Armed {
                            rule,
                            seen: 0,
                            failed: 0,
                        }),
                        Err(e) => eprintln!("TIDEMARK_FAULTS: {e}"),
                    }
                }
            }
            Mutex::new(v)
        });
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The fault `op` on `path` meets now, if any (and counts it).
    pub(super) fn hit(path: &str, op: Op) -> Option<Fault> {
        let mut rules = rules();
        for a in rules.iter_mut() {
            if a.rule.op != op || !path.contains(&a.rule.path_contains) {
                continue;
            }
            if a.rule.times != 0 && a.failed >= a.rule.times {
                continue;
            }
            a.seen += 1;
            if a.seen > a.rule.skip {
                a.failed += 1;
                return Some(a.rule.fault);
            }
        }
        None
    }
}

/// Adds a rule (with the `fault-injection` feature; without it, rules are ignored).
pub fn inject(rule: Rule) {
    #[cfg(feature = "fault-injection")]
    active::rules().push(active::Armed {
        rule,
        seen: 0,
        failed: 0,
    });
    #[cfg(not(feature = "fault-injection"))]
    let _ = rule;
}

/// Removes every rule whose path substring contains `path_contains` (a test's
/// directory removes its own); returns how many times the removed rules failed an
/// operation.
pub fn clear(path_contains: &str) -> u32 {
    #[cfg(feature = "fault-injection")]
    {
        let mut rules = active::rules();
        let mut failed = 0;
        rules.retain(|a| {
            let keep = !a.rule.path_contains.contains(path_contains);
            if !keep {
                failed += a.failed;
            }
            keep
        });
        failed
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = path_contains;
        0
    }
}

/// Whether this build injects faults (the `fault-injection` feature).
pub const ENABLED: bool = cfg!(feature = "fault-injection");

/// Fails `op` on `path` when a rule says so.
///
/// # Errors
/// The injected error.
#[inline]
pub fn check(path: &Path, op: Op) -> io::Result<()> {
    #[cfg(feature = "fault-injection")]
    if let Some(f) = active::hit(&path.to_string_lossy(), op) {
        return Err(error_of(f));
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = (path, op);
    Ok(())
}

/// How many of `len` bytes a write to `path` may write: `len`, or half of it for a
/// short write (the caller writes that much, then fails with [`short_write_error`]).
///
/// # Errors
/// An injected `ENOSPC` or `EIO` before anything is written.
#[inline]
pub fn allowance(path: &Path, len: usize) -> io::Result<usize> {
    #[cfg(feature = "fault-injection")]
    match active::hit(&path.to_string_lossy(), Op::Write) {
        Some(Fault::ShortWrite) => return Ok(len / 2),
        Some(f) => return Err(error_of(f)),
        None => {}
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = path;
    Ok(len)
}

/// The error after a short write.
pub fn short_write_error() -> io::Error {
    error_of(Fault::ShortWrite)
}

/// Writes all of `buf` to `w`, as [`allowance`] lets it: `write_all`, or half of it and
/// `ENOSPC`.
///
/// # Errors
/// The writer's errors; an injected one.
pub fn write_all(path: &Path, w: &mut impl io::Write, buf: &[u8]) -> io::Result<()> {
    let n = allowance(path, buf.len())?;
    w.write_all(buf.get(..n).unwrap_or(buf))?;
    if n < buf.len() {
        w.flush()?;
        return Err(short_write_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_refuse_bad_text() {
        let r = Rule::parse("sync:eio:/wal-:skip=3:times=1").unwrap();
        assert_eq!(r, Rule::new(Op::Sync, Fault::Io, "/wal-").skip(3).times(1));
        assert_eq!(
            Rule::parse("write:short:seg").unwrap().fault,
            Fault::ShortWrite
        );
        for bad in [
            "",
            "fsync:eio:x",
            "sync:boom:x",
            "sync:eio",
            "sync:eio:x:n=1",
            "sync:eio:x:skip=a",
        ] {
            assert!(Rule::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(error_of(Fault::NoSpace).raw_os_error(), Some(28));
        assert_eq!(error_of(Fault::Io).raw_os_error(), Some(5));
    }

    #[cfg(feature = "fault-injection")]
    #[test]
    fn a_rule_fails_matching_operations_after_skip_for_times() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().to_string_lossy().into_owned();
        let p = dir.path().join("x");
        inject(Rule::new(Op::Sync, Fault::Io, key.clone()).skip(1).times(2));
        assert!(check(&p, Op::Sync).is_ok());
        assert_eq!(check(&p, Op::Sync).unwrap_err().raw_os_error(), Some(5));
        assert!(check(&p, Op::Write).is_ok(), "another op");
        assert_eq!(check(&p, Op::Sync).unwrap_err().raw_os_error(), Some(5));
        assert!(check(&p, Op::Sync).is_ok(), "spent");
        assert!(check(Path::new("/elsewhere"), Op::Sync).is_ok());
        assert_eq!(clear(&key), 2);
        inject(Rule::new(Op::Write, Fault::ShortWrite, key.clone()).times(1));
        let mut out = Vec::new();
        let e = write_all(&p, &mut out, b"abcdef").unwrap_err();
        assert_eq!((e.raw_os_error(), out.as_slice()), (Some(28), &b"abc"[..]));
        assert_eq!(clear(&key), 1);
    }
}
