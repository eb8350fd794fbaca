//! `GET /metrics`: the server's own metrics in the Prometheus text exposition format
//! (version 0.0.4), for Prometheus or any scraper to collect first.
//!
//! What is exposed, metric by metric, is in `docs/monitoring.md`. Per-index figures come
//! from the indices the caller may read (its [`Scope`](crate::registry::Scope)): with
//! authentication on, a tenant's scrape names only its own indices. Request counts and
//! latencies are kept per route *template* (`/{index}/_bulk`, never an index name) and
//! method; process figures come from `/proc/self`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::Response;

use crate::error::Result;
use crate::http::Caller;
use crate::state::{AppState, blocking};

/// Upper bounds of the request-duration histogram, in seconds.
const DURATION_BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Requests served, counted as they are answered (see [`HttpStats::record`]).
#[derive(Debug, Default)]
pub struct HttpStats {
    inner: Mutex<HttpInner>,
}

/// Requests by (route template, method, status code), as a scrape reads them.
type Requests = BTreeMap<(String, String, u16), u64>;
/// Durations by (route template, method), as a scrape reads them.
type Durations = BTreeMap<(String, String), Histogram>;

/// Per route template, per method: looked up by `&str`, so that counting a request
/// allocates only the first time a route and method are seen.
#[derive(Debug, Default)]
struct HttpInner {
    routes: BTreeMap<String, BTreeMap<String, MethodStats>>,
}

#[derive(Debug, Default)]
struct MethodStats {
    codes: BTreeMap<u16, u64>,
    durations: Histogram,
}

#[derive(Debug, Default, Clone)]
struct Histogram {
    /// Counts per bucket of [`DURATION_BUCKETS`] (not cumulative), then above the last.
    buckets: [u64; DURATION_BUCKETS.len() + 1],
    sum_seconds: f64,
    count: u64,
}

impl HttpStats {
    /// Counts one answered request: `route` is the template the router matched
    /// (`unmatched` for none), so that no index name or id becomes a label.
    pub fn record(&self, route: &str, method: &str, status: u16, took: Duration) {
        let Ok(mut s) = self.inner.lock() else {
            return;
        };
        if !s.routes.contains_key(route) {
            s.routes.insert(route.to_owned(), BTreeMap::new());
        }
        let Some(methods) = s.routes.get_mut(route) else {
            return;
        };
        if !methods.contains_key(method) {
            methods.insert(method.to_owned(), MethodStats::default());
        }
        let Some(m) = methods.get_mut(method) else {
            return;
        };
        *m.codes.entry(status).or_default() += 1;
        let h = &mut m.durations;
        let secs = took.as_secs_f64();
        let slot = DURATION_BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(DURATION_BUCKETS.len());
        if let Some(b) = h.buckets.get_mut(slot) {
            *b += 1;
        }
        h.sum_seconds += secs;
        h.count += 1;
    }

    fn snapshot(&self) -> (Requests, Durations) {
        let (mut requests, mut durations) = (Requests::new(), Durations::new());
        if let Ok(s) = self.inner.lock() {
            for (route, methods) in &s.routes {
                for (method, m) in methods {
                    for (code, n) in &m.codes {
                        requests.insert((route.clone(), method.clone(), *code), *n);
                    }
                    durations.insert((route.clone(), method.clone()), m.durations.clone());
                }
            }
        }
        (requests, durations)
    }
}

/// `GET`/`HEAD /-/healthy` and `/-/ready`, as Prometheus answers them (without
/// credentials, for probes): the process answers, and it listens only once every index
/// has been opened, so being able to answer is being ready.
pub(crate) async fn healthy(uri: axum::http::Uri) -> Response {
    let text = if uri.path().ends_with("ready") {
        "Tidemark is Ready.\n"
    } else {
        "Tidemark is Healthy.\n"
    };
    let mut resp = Response::new(Body::from(text));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// `GET /metrics`.
pub(crate) async fn metrics(
    State(st): State<std::sync::Arc<AppState>>,
    Caller(who): Caller,
) -> Result<Response> {
    let handles = st.registry.scope(&who).list();
    let st2 = std::sync::Arc::clone(&st);
    let text = blocking(move || {
        let mut indices = Vec::new();
        for h in handles {
            let stats = h.read(|i| Ok(i.stats()?))?;
            indices.push((h.name().to_owned(), h.state().name(), stats));
        }
        indices.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(render(&st2, &indices))
    })
    .await?;
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(resp)
}

/// The exposition text.
fn render(st: &AppState, indices: &[(String, &'static str, tidemark::IndexStats)]) -> String {
    let mut out = Exposition::default();
    out.family(
        "tidemark_build_info",
        "gauge",
        "Always 1; the version is a label.",
    );
    out.sample(
        "tidemark_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );

    let (requests, durations) = st.http_stats.snapshot();
    out.family(
        "tidemark_requests_total",
        "counter",
        "HTTP requests answered, by route template, method and status code.",
    );
    for ((route, method, code), n) in &requests {
        let code = code.to_string();
        out.sample(
            "tidemark_requests_total",
            &[("route", route), ("method", method), ("code", &code)],
            *n as f64,
        );
    }
    out.family(
        "tidemark_request_duration_seconds",
        "histogram",
        "Time from a request's arrival to its answer, by route template and method.",
    );
    for ((route, method), h) in &durations {
        let labels = [("route", route.as_str()), ("method", method.as_str())];
        let mut cumulative = 0u64;
        for (i, n) in h.buckets.iter().enumerate() {
            cumulative += n;
            let le = DURATION_BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
            out.sample(
                "tidemark_request_duration_seconds_bucket",
                &[labels[0], labels[1], ("le", &le)],
                cumulative as f64,
            );
        }
        out.sample(
            "tidemark_request_duration_seconds_sum",
            &labels,
            h.sum_seconds,
        );
        out.sample(
            "tidemark_request_duration_seconds_count",
            &labels,
            h.count as f64,
        );
    }

    out.family(
        "tidemark_write_permits_available",
        "gauge",
        "Write requests that may still be admitted before the server answers 429.",
    );
    out.sample(
        "tidemark_write_permits_available",
        &[],
        st.write_permits.available_permits() as f64,
    );
    out.family(
        "tidemark_body_bytes_available",
        "gauge",
        "Request-body bytes that may still be in flight (body_bytes_in_flight).",
    );
    out.sample(
        "tidemark_body_bytes_available",
        &[],
        st.body_bytes.available_permits() as f64,
    );
    if let Ok(space) = crate::disk::space(st.registry.root()) {
        out.family(
            "tidemark_data_disk_available_bytes",
            "gauge",
            "Bytes available to the server on the data directory's filesystem.",
        );
        out.sample(
            "tidemark_data_disk_available_bytes",
            &[],
            space.available as f64,
        );
        out.family(
            "tidemark_data_disk_total_bytes",
            "gauge",
            "Size of the data directory's filesystem.",
        );
        out.sample("tidemark_data_disk_total_bytes", &[], space.total as f64);
    }

    tcp_families(&mut out, &st.tcp_stats);
    lake_families(&mut out, &st.lake_stats);
    if let Some(cache) = &st.lake_cache {
        readback_families(&mut out, &cache.stats);
    }
    index_families(&mut out, indices);
    process_families(&mut out);
    out.text
}

/// The lake exports' counters (by mode: `request` for `POST /<index>/_tidemark/export`,
/// `auto` for `lake_auto`; never by index).
fn lake_families(out: &mut Exposition, stats: &crate::lake::LakeStats) {
    use std::sync::atomic::Ordering::Relaxed;
    out.family(
        "tidemark_lake_partitions_exported_total",
        "counter",
        "Partitions committed to a Parquet lake (skipped ones, already there, are not counted).",
    );
    for (mode, n) in [
        ("request", &stats.request_partitions),
        ("auto", &stats.auto_partitions),
    ] {
        out.sample(
            "tidemark_lake_partitions_exported_total",
            &[("mode", mode)],
            n.load(Relaxed) as f64,
        );
    }
    out.family(
        "tidemark_lake_export_failures_total",
        "counter",
        "Exports to a Parquet lake that failed (an automatic one is retried at its next pass).",
    );
    for (mode, n) in [
        ("request", &stats.request_failures),
        ("auto", &stats.auto_failures),
    ] {
        out.sample(
            "tidemark_lake_export_failures_total",
            &[("mode", mode)],
            n.load(Relaxed) as f64,
        );
    }
}

/// What reading back from the lakes did (queries over time retention removed).
fn readback_families(out: &mut Exposition, stats: &crate::lake::CacheStats) {
    use std::sync::atomic::Ordering::Relaxed;
    out.family(
        "tidemark_lake_readback_partitions_total",
        "counter",
        "Partitions a query read back from a lake: restored from its files, or a finished local copy attached again.",
    );
    for (how, n) in [
        ("restored", &stats.restored),
        ("reattached", &stats.reattached),
    ] {
        out.sample(
            "tidemark_lake_readback_partitions_total",
            &[("how", how)],
            n.load(Relaxed) as f64,
        );
    }
    for (name, help, n) in [
        (
            "tidemark_lake_readback_rows_total",
            "Rows restored from lakes.",
            &stats.restored_rows,
        ),
        (
            "tidemark_lake_readback_evictions_total",
            "Local copies of lake partitions removed to stay within lake_cache_bytes.",
            &stats.evicted,
        ),
        (
            "tidemark_lake_readback_failures_total",
            "Read-backs that failed (the query answered an error).",
            &stats.failures,
        ),
    ] {
        out.family(name, "counter", help);
        out.sample(name, &[], n.load(Relaxed) as f64);
    }
}

/// The Graphite and OpenTSDB listeners' counters (by protocol, never by index).
fn tcp_families(out: &mut Exposition, stats: &crate::metrics::tcp::TcpStats) {
    use crate::metrics::tcp::Protocol;
    use std::sync::atomic::Ordering::Relaxed;
    let protocols = [Protocol::Graphite, Protocol::OpenTsdb];
    out.family(
        "tidemark_tcp_connections_total",
        "counter",
        "Connections to the Graphite and OpenTSDB listeners: accepted, refused (tcp_max_connections), closed idle (tcp_idle_timeout_secs).",
    );
    for p in protocols {
        let s = stats.of(p);
        for (result, n) in [
            ("accepted", &s.connections),
            ("refused", &s.refused),
            ("idle_closed", &s.idle_closed),
        ] {
            out.sample(
                "tidemark_tcp_connections_total",
                &[("protocol", p.name()), ("result", result)],
                n.load(Relaxed) as f64,
            );
        }
    }
    out.family(
        "tidemark_tcp_lines_total",
        "counter",
        "Lines received by the Graphite and OpenTSDB listeners: ok, or bad (malformed, too long, cut), skipped.",
    );
    for p in protocols {
        let s = stats.of(p);
        for (result, n) in [("ok", &s.lines_ok), ("bad", &s.lines_bad)] {
            out.sample(
                "tidemark_tcp_lines_total",
                &[("protocol", p.name()), ("result", result)],
                n.load(Relaxed) as f64,
            );
        }
    }
    out.family(
        "tidemark_tcp_samples_total",
        "counter",
        "Samples of the Graphite and OpenTSDB listeners' lines, by what became of them.",
    );
    for p in protocols {
        let s = stats.of(p);
        for (result, n) in [
            ("created", &s.created),
            ("duplicate", &s.duplicates),
            ("replaced", &s.replaced),
            ("rejected", &s.rejected),
            ("dropped", &s.dropped),
        ] {
            out.sample(
                "tidemark_tcp_samples_total",
                &[("protocol", p.name()), ("result", result)],
                n.load(Relaxed) as f64,
            );
        }
    }
}

/// One gauge or counter per index figure.
fn index_families(out: &mut Exposition, indices: &[(String, &'static str, tidemark::IndexStats)]) {
    type Get = fn(&tidemark::IndexStats) -> u64;
    let gauges: [(&str, &str, Get); 7] = [
        (
            "tidemark_index_documents",
            "Live documents (points or events).",
            |s| s.documents,
        ),
        ("tidemark_index_series", "Series (distinct tsids).", |s| {
            s.series
        }),
        ("tidemark_index_segments", "Segments on disk.", |s| {
            s.segments
        }),
        (
            "tidemark_index_buffered_documents",
            "Documents in memory, not yet in a segment.",
            |s| s.buffered,
        ),
        (
            "tidemark_index_deleted_rows",
            "Rows deleted in segments, not yet merged away.",
            |s| s.deleted_rows,
        ),
        (
            "tidemark_index_bytes",
            "Bytes of every file in the index directory.",
            |s| s.bytes,
        ),
        (
            "tidemark_index_partitions",
            "Time partitions (1 for an index without partitions).",
            |s| s.partitions,
        ),
    ];
    for (name, help, get) in gauges {
        out.family(name, "gauge", help);
        for (index, _, s) in indices {
            out.sample(name, &[("index", index)], get(s) as f64);
        }
    }
    out.family(
        "tidemark_index_writable",
        "gauge",
        "1 when the index takes writes; 0 when read-only (disk over the flood stage) or reopening.",
    );
    for (index, state, _) in indices {
        out.sample(
            "tidemark_index_writable",
            &[("index", index), ("state", state)],
            f64::from(u8::from(*state == "open")),
        );
    }
    out.family(
        "tidemark_index_items_total",
        "counter",
        "Write items by result: created, duplicate (an idempotent retry), replaced, updated, deleted, not_found, error.",
    );
    for (index, _, s) in indices {
        let c = &s.counters;
        for (result, n) in [
            ("created", c.items.created),
            ("duplicate", c.items.duplicates),
            ("replaced", c.items.replaced),
            ("updated", c.items.updated),
            ("deleted", c.items.deleted),
            ("not_found", c.items.not_found),
            ("error", c.items.errors),
        ] {
            out.sample(
                "tidemark_index_items_total",
                &[("index", index), ("result", result)],
                n as f64,
            );
        }
    }
    type Count = fn(&tidemark::Counters) -> u64;
    let counters: [(&str, &str, Count); 10] = [
        (
            "tidemark_index_ignored_fields_total",
            "Undeclared fields dropped (dynamic: ignore).",
            |c| c.items.ignored_fields,
        ),
        (
            "tidemark_dedup_checks_total",
            "Exactly-once checks of incoming points.",
            |c| c.dedup.checks,
        ),
        (
            "tidemark_dedup_live_map_hits_total",
            "Checks answered by the in-memory version map.",
            |c| c.dedup.live_map_hits,
        ),
        (
            "tidemark_dedup_newest_negatives_total",
            "Checks answered by the series' newest timestamp (an in-order point).",
            |c| c.dedup.newest_negatives,
        ),
        (
            "tidemark_dedup_segments_pruned_by_time_total",
            "Segments skipped by their time range.",
            |c| c.dedup.segments_pruned_by_time,
        ),
        (
            "tidemark_dedup_series_range_negatives_total",
            "Segments ruled out by the series range.",
            |c| c.dedup.series_range_negatives,
        ),
        (
            "tidemark_dedup_slot_negatives_total",
            "Segments ruled out by a series' time slot map.",
            |c| c.dedup.slot_negatives,
        ),
        (
            "tidemark_dedup_bloom_negatives_total",
            "Segments ruled out by their bloom filter.",
            |c| c.dedup.bloom_negatives,
        ),
        (
            "tidemark_dedup_false_positives_total",
            "Maybe answers that verification in the sorted columns found false.",
            |c| c.dedup.false_positives,
        ),
        (
            "tidemark_dedup_true_duplicates_total",
            "Checks that found the point already stored in a segment.",
            |c| c.dedup.true_duplicates,
        ),
    ];
    for (name, help, get) in counters {
        out.family(name, "counter", help);
        for (index, _, s) in indices {
            out.sample(name, &[("index", index)], get(&s.counters) as f64);
        }
    }
}

/// The process's memory and file descriptors, from `/proc/self` (`None` where it cannot
/// be read): what `/metrics` and `_nodes/stats` report.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProcessMemory {
    /// Resident memory (`VmRSS`).
    pub resident_bytes: Option<u64>,
    /// Peak resident memory since start (`VmHWM`).
    pub peak_resident_bytes: Option<u64>,
    /// Virtual memory (`VmSize`).
    pub virtual_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
}

/// Reads [`ProcessMemory`] now.
pub(crate) fn process_memory() -> ProcessMemory {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let bytes = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    ProcessMemory {
        resident_bytes: bytes("VmRSS:"),
        peak_resident_bytes: bytes("VmHWM:"),
        virtual_bytes: bytes("VmSize:"),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64),
    }
}

/// The standard `process_*` families, from `/proc/self` (absent where it cannot be read).
fn process_families(out: &mut Exposition) {
    let mem = process_memory();
    if let Some(rss) = mem.resident_bytes {
        out.family(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
        );
        out.sample("process_resident_memory_bytes", &[], rss as f64);
    }
    if let Some(peak) = mem.peak_resident_bytes {
        out.family(
            "tidemark_process_peak_resident_memory_bytes",
            "gauge",
            "Peak resident memory size in bytes since the process started (VmHWM).",
        );
        out.sample(
            "tidemark_process_peak_resident_memory_bytes",
            &[],
            peak as f64,
        );
    }
    if let Some(vsz) = mem.virtual_bytes {
        out.family(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
        );
        out.sample("process_virtual_memory_bytes", &[], vsz as f64);
    }
    if let Some(fds) = mem.open_fds {
        out.family("process_open_fds", "gauge", "Open file descriptors.");
        out.sample("process_open_fds", &[], fds as f64);
    }
    // /proc/self/stat: fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th fields, starttime the 22nd, in clock ticks (USER_HZ, 100 on
    // Linux for every architecture Tidemark builds for).
    const TICKS: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    if let (Some(u), Some(s)) = (field(14), field(15)) {
        out.family(
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent in seconds.",
        );
        out.sample("process_cpu_seconds_total", &[], (u + s) / TICKS);
    }
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    if let (Some(start), Some(boot)) = (field(22), boot) {
        out.family(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since the Unix epoch in seconds.",
        );
        out.sample("process_start_time_seconds", &[], boot + start / TICKS);
    }
}

/// The text being written: `# HELP` and `# TYPE` once per family, then its samples.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(k);
                self.text.push_str("=\"");
                for c in v.chars() {
                    match c {
                        '\\' => self.text.push_str("\\\\"),
                        '"' => self.text.push_str("\\\""),
                        '\n' => self.text.push_str("\\n"),
                        c => self.text.push(c),
                    }
                }
                self.text.push('"');
            }
            self.text.push('}');
        }
        let _ = if value.is_finite() && value.fract() == 0.0 && value.abs() < 9.0e15 {
            writeln!(self.text, " {}", value as i64)
        } else {
            writeln!(self.text, " {value}")
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_escape_label_values_and_write_integers_plainly() {
        let mut e = Exposition::default();
        e.family("m", "gauge", "Help.");
        e.sample("m", &[("a", "x\"y\\z\nw"), ("b", "c")], 3.0);
        e.sample("m", &[], 0.25);
        assert_eq!(
            e.text,
            "# HELP m Help.\n# TYPE m gauge\nm{a=\"x\\\"y\\\\z\\nw\",b=\"c\"} 3\nm 0.25\n"
        );
    }

    #[test]
    fn durations_fall_in_their_bucket() {
        let s = HttpStats::default();
        s.record("/r", "GET", 200, Duration::from_micros(900));
        s.record("/r", "GET", 200, Duration::from_millis(30));
        s.record("/r", "GET", 404, Duration::from_secs(9));
        let (requests, durations) = s.snapshot();
        assert_eq!(requests[&("/r".into(), "GET".into(), 200)], 2);
        let h = &durations[&("/r".into(), "GET".into())];
        assert_eq!(h.count, 3);
        assert_eq!(h.buckets[0], 1);
        assert_eq!(h.buckets[5], 1, "30 ms is in the 50 ms bucket");
        assert_eq!(h.buckets[DURATION_BUCKETS.len()], 1, "above the last bound");
    }
}
