//! Server processes: the binary (installed with apt-get when missing), a free port, the
//! spawn with its log, the readiness wait, and the stop.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};

use super::http::agent;

/// The first file named `bin` in a `PATH` directory.
fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(bin))
            .find(|p| p.is_file())
    })
}

/// The binary, installed with apt-get (package `pkg`) when missing.
pub(crate) fn ensure_installed(bin: &str, pkg: &str) -> Result<PathBuf> {
    if let Some(p) = which(bin) {
        return Ok(p);
    }
    eprintln!("peers: {bin} missing, apt-get install -y {pkg}");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", pkg])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        let _ = Command::new("apt-get")
            .arg("update")
            .stdout(Stdio::null())
            .status();
        install();
    }
    which(bin)
        .ok_or_else(|| anyhow!("{bin} not found and `apt-get install {pkg}` did not provide it"))
}

/// The `tidemark-server` binary: `explicit` (a task's `--tidemark-bin`), else the
/// workspace's release build.
///
/// # Errors
///
/// When that file does not exist, naming the command that builds it.
pub(crate) fn tidemark_server_bin(explicit: Option<&Path>) -> Result<PathBuf> {
    let bin = match explicit {
        Some(b) => b.to_path_buf(),
        None => crate::project_root().join("target/release/tidemark-server"),
    };
    if !bin.is_file() {
        bail!(
            "{} missing: cargo build --release -p tidemark-server",
            bin.display()
        );
    }
    Ok(bin)
}

/// The installed Debian package's version (`dpkg-query`), or the binary's name.
pub(crate) fn package_version(pkg: &str) -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", pkg])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || pkg.to_owned(),
            |o| format!("{pkg} {}", String::from_utf8_lossy(&o.stdout).trim()),
        )
}

/// A 127.0.0.1 port free at the time of the call (the listener is closed before the
/// server binds it, so another process could take it in between; none does here).
pub(crate) fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// A server process, stopped when dropped: SIGTERM, up to `grace` to exit (a server
/// flushes on SIGTERM), then SIGKILL.
pub(crate) struct Process {
    child: Child,
    grace: Duration,
}

impl Process {
    /// Spawns `cmd` with stdin closed and stdout and stderr written to `log`.
    ///
    /// # Errors
    ///
    /// The spawn's, or cloning `log`'s.
    pub(crate) fn spawn(cmd: &mut Command, log: File, grace: Duration) -> std::io::Result<Process> {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Process { child, grace })
    }

    /// Waits until a GET of `url` answers 2xx, at most 60 s.
    ///
    /// # Errors
    ///
    /// When the process exits first or `url` is not ready after 60 s; the process is
    /// left running, for the caller to read its log and stop it.
    pub(crate) fn wait_ready(&mut self, url: &str) -> Result<()> {
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("exited before it was ready: {status}");
            }
            if agent(2).get(url).call().is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!("not ready at {url} after 60 s")
    }

    /// The process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL now, without the grace of a drop (a crash, or a server that never got
    /// ready), and reap it.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let until = Instant::now() + self.grace;
        while Instant::now() < until {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
