//! Starting the binary and talking to it.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The k8s mapping and `_bulk` fixture shared with the façade's tests.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tidemark")
        .join(name)
}

/// The server binary: `TIDEMARK_TEST_SERVER` when set (a copy taken right after the
/// build, when several worktrees share one target directory and its uplifted
/// `tidemark-server` is whichever worktree linked last), else cargo's.
pub fn server_binary() -> PathBuf {
    std::env::var_os("TIDEMARK_TEST_SERVER").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_tidemark-server")),
        PathBuf::from,
    )
}

/// A running server; killed when dropped.
pub struct TestServer {
    child: Child,
    pub addr: String,
}

impl TestServer {
    /// Starts `tidemark-server --data DIR --listen 127.0.0.1:0` with `extra` arguments and
    /// waits until it listens.
    pub fn start(dir: &Path, extra: &[&str]) -> TestServer {
        TestServer::start_with_env(dir, extra, &[])
    }

    /// [`start`](Self::start) with environment variables (`TIDEMARK_FAULTS`).
    pub fn start_with_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> TestServer {
        let port_file = dir.join(format!("port-{}", std::process::id()));
        let _ = std::fs::remove_file(&port_file);
        let child = Command::new(server_binary())
            .arg("--data")
            .arg(dir.join("data"))
            .args(["--listen", "127.0.0.1:0", "--port-file"])
            .arg(&port_file)
            .args(extra)
            .env("TIDEMARK_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&port_file)
                && text.ends_with('\n')
            {
                return TestServer {
                    child,
                    addr: text.trim().to_owned(),
                };
            }
            assert!(Instant::now() < deadline, "server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap()
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        send("GET", &self.url(path), None, &[])
    }

    pub fn put_json(&self, path: &str, body: &Value) -> (u16, Value) {
        send(
            "PUT",
            &self.url(path),
            Some(body.to_string().as_bytes()),
            &[("content-type", "application/json")],
        )
    }

    pub fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        send(
            "POST",
            &self.url(path),
            Some(body.to_string().as_bytes()),
            &[("content-type", "application/json")],
        )
    }

    pub fn bulk(&self, path: &str, body: &[u8]) -> (u16, Value) {
        send(
            "POST",
            &self.url(path),
            Some(body),
            &[("content-type", "application/x-ndjson")],
        )
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends a request; any status is an answer (`(status, body as JSON or a string)`).
pub fn send(
    method: &str,
    url: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let (status, _, text) = send_raw(method, url, body, headers);
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

/// Sends a request; returns status, the `X-Elastic-Product` header and the body text.
pub fn send_raw(
    method: &str,
    url: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, String) {
    let (status, answered, text) = send_headers(method, url, body, headers);
    let product = answered
        .into_iter()
        .find(|(k, _)| k == "x-elastic-product")
        .map(|(_, v)| v);
    (status, product, text)
}

/// Sends a request; returns status, every response header (lowercase names, in order)
/// and the body text.
pub fn send_headers(
    method: &str,
    url: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let mut req = agent.request(method, url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let result = match body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = resp.status();
    let mut names = resp.headers_names();
    names.sort();
    names.dedup();
    let answered = names
        .iter()
        .flat_map(|name| {
            resp.all(name)
                .into_iter()
                .map(move |v| (name.to_ascii_lowercase(), v.to_owned()))
        })
        .collect();
    let text = resp.into_string().unwrap_or_default();
    (status, answered, text)
}

/// The k8s mapping as JSON.
pub fn k8s_mapping() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("k8s.mapping.json")).unwrap()).unwrap()
}

/// `n` distinct k8s documents as `_bulk` create lines (`pods` pods, one sample per pod
/// every 10 s from `start_ms`), with an optional `_index`.
pub fn k8s_bulk(n: usize, pods: usize, start_ms: i64, index: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let pod = i % pods;
        let ts = start_ms + (i / pods) as i64 * 10_000;
        match index {
            Some(ix) => writeln!(out, "{{\"create\":{{\"_index\":\"{ix}\"}}}}").unwrap(),
            None => writeln!(out, "{{\"create\":{{}}}}").unwrap(),
        }
        writeln!(
            out,
            "{{\"@timestamp\":{ts},\"k8s\":{{\"cluster\":{{\"name\":\"prod\"}},\"namespace\":{{\"name\":\"ns-{}\"}},\"pod\":{{\"name\":\"pod-{pod}\",\"ip\":\"10.0.{}.{}\",\"status\":\"Running\",\"cpu\":{{\"utilization\":{}}},\"memory\":{{\"usage_bytes\":{}}},\"restarts\":0}}}}}}",
            pod % 3,
            pod / 250,
            pod % 250,
            (i % 100) as f64 / 100.0,
            1_000_000 + i
        )
        .unwrap();
    }
    out
}

/// The statuses of a bulk response's items.
pub fn statuses(resp: &Value) -> Vec<u64> {
    resp["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|it| {
            it.as_object().unwrap().values().next().unwrap()["status"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// The samples of a `/metrics` exposition, by the line's name and labels as written;
/// checks every line's form and that each sampled family was declared with `# TYPE`
/// before.
pub fn parse_exposition(text: &str) -> HashMap<String, f64> {
    let mut declared = std::collections::HashSet::new();
    let mut out = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let name = it.next().unwrap();
            let kind = it.next().unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(declared.insert(name.to_owned()), "{name} declared twice");
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| declared.contains(*f)))
            .unwrap_or(name);
        assert!(
            declared.contains(family),
            "{name} sampled before its # TYPE"
        );
        assert!(
            out.insert(series.to_owned(), value).is_none(),
            "{series} twice"
        );
    }
    out
}

/// `GET /metrics` with `headers`: the status, the content type and, for a 200, the
/// samples ([`parse_exposition`]).
pub fn scrape(s: &TestServer, headers: &[(&str, &str)]) -> (u16, String, HashMap<String, f64>) {
    let agent = ureq::AgentBuilder::new().build();
    let mut req = agent.get(&s.url("/metrics"));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{e}"),
    };
    let status = resp.status();
    let kind = resp.header("content-type").unwrap_or_default().to_owned();
    let text = resp.into_string().unwrap();
    let samples = if status == 200 {
        parse_exposition(&text)
    } else {
        HashMap::new()
    };
    (status, kind, samples)
}
