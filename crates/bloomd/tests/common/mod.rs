//! Test harness: starts the real `tidemark-bloomd` binary on a free loopback port in a
//! fresh temporary directory, and a raw RESP client for byte-exact checks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh, empty directory unique to this process and call.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tidemark-bloomd-test-{}-{}-{name}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub const BIN: &str = env!("CARGO_BIN_EXE_tidemark-bloomd");

/// A running server.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    pub args: Vec<String>,
}

impl Server {
    /// Starts the binary with `--port 0` in `dir` plus `extra` flags; waits until it accepts
    /// connections (10 s at most).
    pub fn start_in(dir: &Path, extra: &[&str]) -> Server {
        let port_file = dir.join("port");
        let _ = std::fs::remove_file(&port_file);
        let mut args: Vec<String> = vec![
            "--port".into(),
            "0".into(),
            "--dir".into(),
            dir.display().to_string(),
            "--port-file".into(),
            port_file.display().to_string(),
            "--threads".into(),
            "2".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .unwrap();
        let mut child = Command::new(BIN)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawning tidemark-bloomd");
        let deadline = Instant::now() + Duration::from_secs(10);
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                if let Ok(p) = text.trim().parse::<u16>() {
                    break p;
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "tidemark-bloomd exited early ({status}): {}",
                    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "server did not start in 10 s");
            std::thread::sleep(Duration::from_millis(20));
        };
        let server = Server {
            child: Some(child),
            port,
            dir: dir.to_path_buf(),
            args,
        };
        // Connect with retries until PING answers.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = server.try_raw() {
                let pong = c.cmd(&["PING"]);
                if pong == "+PONG\r\n" || pong.starts_with("-NOAUTH") {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "server did not answer PING");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// A handle on a server another handle started (dropping it does not stop the server).
    pub fn attach(port: u16, dir: &Path) -> Server {
        Server {
            child: None,
            port,
            dir: dir.to_path_buf(),
            args: Vec::new(),
        }
    }

    /// Starts a server in a new temporary directory.
    pub fn start(name: &str, extra: &[&str]) -> Server {
        Server::start_in(&temp_dir(name), extra)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A `redis` crate connection.
    pub fn client(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match client.get_connection_with_timeout(Duration::from_secs(5)) {
                Ok(c) => {
                    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    return c;
                }
                Err(e) => {
                    assert!(Instant::now() < deadline, "connect: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    fn try_raw(&self) -> std::io::Result<Raw> {
        let s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.set_nodelay(true)?;
        Ok(Raw {
            reader: BufReader::new(s.try_clone()?),
            stream: s,
        })
    }

    /// A raw RESP connection.
    pub fn raw(&self) -> Raw {
        self.try_raw().unwrap()
    }

    /// Kills the process without letting it save (a crash).
    pub fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits (10 s at most) for the process to exit by itself; its exit status.
    pub fn wait_exit(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("server did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs the binary with `args` and expects it to fail at start; its stderr.
pub fn start_fails(dir: &Path, extra: &[&str]) -> String {
    let mut args: Vec<String> = vec![
        "--port".into(),
        "0".into(),
        "--dir".into(),
        dir.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut child = Command::new(BIN)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "start should have failed");
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return err;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("server started although it should have refused");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A raw RESP client: sends commands, returns each reply's exact bytes as text.
pub struct Raw {
    pub stream: TcpStream,
    reader: BufReader<TcpStream>,
}

pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

impl Raw {
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Sends one command and returns its reply.
    pub fn cmd(&mut self, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd_bytes(&args)
    }

    pub fn cmd_bytes(&mut self, args: &[&[u8]]) -> String {
        self.send(&encode(args));
        self.reply()
    }

    /// Reads one complete reply (nested aggregates included), as raw text.
    pub fn reply(&mut self) -> String {
        let mut out = Vec::new();
        self.read_value(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Reads one reply as raw bytes.
    pub fn reply_bytes(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.read_value(&mut out);
        out
    }

    fn read_line(&mut self, out: &mut Vec<u8>) -> Vec<u8> {
        let mut line = Vec::new();
        let n = self.reader.read_until(b'\n', &mut line).unwrap();
        assert!(n > 0, "connection closed while a reply was expected");
        out.extend_from_slice(&line);
        line
    }

    fn read_value(&mut self, out: &mut Vec<u8>) {
        let line = self.read_line(out);
        let body = std::str::from_utf8(&line[1..line.len() - 2]).unwrap_or("");
        match line[0] {
            b'+' | b'-' | b':' | b'_' | b'#' | b',' => {}
            b'$' => {
                let n: i64 = body.parse().unwrap();
                if n >= 0 {
                    let mut data = vec![0u8; n as usize + 2];
                    self.reader.read_exact(&mut data).unwrap();
                    out.extend_from_slice(&data);
                }
            }
            b'*' | b'%' => {
                let n: i64 = body.parse().unwrap();
                let items = if line[0] == b'%' { n * 2 } else { n };
                for _ in 0..items.max(0) {
                    self.read_value(out);
                }
            }
            other => panic!("unexpected reply type {:?}", other as char),
        }
    }

    /// True when the server closed the connection (reads EOF within the timeout).
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.reader.read(&mut b), Ok(0) | Err(_))
    }
}
