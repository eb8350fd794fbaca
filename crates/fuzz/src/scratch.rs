//! A scratch directory per thread for the targets that read files through a path (the
//! engine's manifest and log, bloomd's append-only log, an index): emptied before each
//! input, on `/dev/shm` when there is one, so that a run does not wear a disk.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

const PREFIX: &str = "tidemark-fuzz-";

thread_local! {
    static DIR: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// This thread's scratch directory, emptied; `None` if it cannot be made.
pub(crate) fn dir() -> Option<PathBuf> {
    DIR.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = create();
        }
        let dir = cell.as_ref()?;
        empty(dir).ok()?;
        Some(dir.clone())
    })
}

fn base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A new directory named for this process and thread. libFuzzer ends a run with
/// `exit()`, which skips thread-local destructors, so the directories of processes that
/// are gone are swept here instead.
fn create() -> Option<PathBuf> {
    let base = base();
    sweep(&base);
    let thread = format!("{:?}", std::thread::current().id());
    let name: String = thread.chars().filter(char::is_ascii_digit).collect();
    let dir = base.join(format!("{PREFIX}{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

fn sweep(base: &Path) {
    // Without /proc there is no telling a live process from a gone one.
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn empty(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}
