//! The load and the check of `tests/cluster_e2e.sh`, against running routers and owners.
//!
//! `cluster_load load ROUTER_URL,... SECONDS OUT [REFERENCE_URL]`: writes batches of
//! remote write and Influx line protocol through the routers for SECONDS, retrying each
//! batch (through the next router) until it is acknowledged, and re-sending 10% of
//! acknowledged batches through another router; with REFERENCE_URL (a single-node
//! `tidemark serve`) every acknowledged batch is written there too, so that it holds
//! the same data as the cluster. Writes to OUT the distinct (series, timestamp) pairs
//! sent, one `series<TAB>timestamp` line each, and prints what happened.
//!
//! `cluster_load bench URL,... SECONDS THREADS SERIES`: a throughput run, not a check:
//! THREADS clients each send remote-write requests of SERIES series × 10 samples (new
//! timestamps every request, every series its own) round-robin over the URLs for
//! SECONDS, one request in flight per client; prints samples/s and the request
//! latency's median and 99th percentile.
//!
//! `cluster_load compare OUT ROUTER_URL,... REFERENCE_URL`: runs a set of PromQL
//! queries (instant and range, aggregations, rates, `*_over_time`, quantiles) and the
//! metadata endpoints over OUT's time span through every router and the reference;
//! fails unless every answer equals the reference's (same series, same timestamps,
//! values equal to 1e-9 relative: a single node may sum rollup buckets in another
//! order than raw samples).
//!
//! `cluster_load verify OUT OWNER_URL,... WAIT_SECONDS`: reads every owner's samples
//! (`/api/v1/export`) until they equal OUT's pairs or WAIT_SECONDS pass; fails unless
//! every pair is stored exactly once, nothing else is stored and no series is on two
//! owners.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use tidemark_server::metrics::remote_write::{Label, Sample, TimeSeries, WriteRequest, encode};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Series per batch and hosts: every batch writes each host's three series once.
const HOSTS: usize = 50;

fn series_key(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Batch `b`: its body, content type, path and the pairs it holds.
fn batch(b: u64, base_ms: i64) -> (Vec<u8>, &'static str, &'static str, Vec<(String, i64)>) {
    let ts = base_ms + i64::try_from(b).unwrap_or(0) * 1000;
    let mut pairs = Vec::new();
    if b.is_multiple_of(2) {
        let mut req = WriteRequest::default();
        for h in 0..HOSTS {
            let labels = BTreeMap::from([
                ("__name__".to_owned(), "load_rw".to_owned()),
                ("host".to_owned(), format!("h{h}")),
            ]);
            pairs.push((series_key(&labels), ts));
            req.timeseries.push(TimeSeries {
                labels: labels
                    .into_iter()
                    .map(|(name, value)| Label { name, value })
                    .collect(),
                samples: vec![Sample {
                    value: (b as f64) + h as f64 / 100.0,
                    timestamp: ts,
                }],
                ..TimeSeries::default()
            });
        }
        (
            encode(&req),
            "application/x-protobuf",
            "/api/v1/write",
            pairs,
        )
    } else {
        let mut body = String::new();
        for h in 0..HOSTS {
            body.push_str(&format!("load_lp,host=h{h} v={}.5,n={b}i {ts}\n", b));
            for f in ["v", "n"] {
                let labels = BTreeMap::from([
                    ("__name__".to_owned(), format!("load_lp_{f}")),
                    ("host".to_owned(), format!("h{h}")),
                ]);
                pairs.push((series_key(&labels), ts));
            }
        }
        (
            body.into_bytes(),
            "text/plain",
            "/write?db=metrics&precision=ms",
            pairs,
        )
    }
}

/// Sends one body; `Ok(true)` for a 2xx, `Ok(false)` for what a retry may fix.
fn send(agent: &ureq::Agent, url: &str, path: &str, ctype: &str, body: &[u8]) -> Res<bool> {
    let mut req = agent
        .post(&format!("{url}{path}"))
        .set("content-type", ctype);
    if path.starts_with("/api/v1/write") {
        req = req
            .set("content-encoding", "snappy")
            .set("x-prometheus-remote-write-version", "0.1.0");
    }
    match req.send_bytes(body) {
        Ok(r) if r.status() < 300 => Ok(true),
        Ok(r) => Err(format!("{url}{path}: {}", r.status()).into()),
        Err(ureq::Error::Status(code, r)) if code >= 500 || code == 429 => {
            let _ = r.into_string();
            Ok(false)
        }
        Err(ureq::Error::Status(code, r)) => Err(format!(
            "{url}{path}: {code} {}",
            r.into_string().unwrap_or_default()
        )
        .into()),
        // Connection refused, reset, timed out: unknown outcome, retry.
        Err(_) => Ok(false),
    }
}

fn load(routers: &[String], seconds: u64, out: &str, reference: Option<&str>) -> Res<()> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let base_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64
        - 86_400_000;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut sent: BTreeSet<(String, i64)> = BTreeSet::new();
    let (mut acked, mut retries, mut resent, mut samples) = (0u64, 0u64, 0u64, 0u64);
    let mut b = 0u64;
    let mut turn = 0usize;
    while Instant::now() < deadline {
        let (body, ctype, path, pairs) = batch(b, base_ms);
        sent.extend(pairs.iter().cloned());
        // Retried until acknowledged (bounded: 60 s per batch), through the next router
        // each time: a router never re-routes a shard, so any router will do.
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            let url = &routers[turn % routers.len()];
            turn += 1;
            if send(&agent, url, path, ctype, &body)? {
                break;
            }
            retries += 1;
            if Instant::now() > give_up {
                return Err(format!("batch {b} not acknowledged in 60 s").into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        acked += 1;
        samples += pairs.len() as u64;
        if let Some(r) = reference {
            let give_up = Instant::now() + Duration::from_secs(60);
            while !send(&agent, r, path, ctype, &body)? {
                if Instant::now() > give_up {
                    return Err(format!("batch {b} not stored by the reference in 60 s").into());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // 10% of acknowledged batches again, through another router.
        if b % 10 == 3 {
            let url = &routers[turn % routers.len()];
            turn += 1;
            if send(&agent, url, path, ctype, &body)? {
                resent += 1;
            }
        }
        b += 1;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(out)?);
    for (k, ts) in &sent {
        writeln!(f, "{k}\t{ts}")?;
    }
    f.flush()?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "load: {acked} batches acknowledged ({samples} samples, {:.0} samples/s), {retries} retries, {resent} acknowledged batches re-sent, {} distinct pairs",
        samples as f64 / secs,
        sent.len()
    );
    Ok(())
}

/// Every owner's samples: series key → (owner, timestamps).
fn stored(owners: &[String]) -> Res<Vec<(usize, String, Vec<i64>)>> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let mut out = Vec::new();
    for (i, url) in owners.iter().enumerate() {
        let resp = agent
            .get(&format!("{url}/api/v1/export"))
            .query("match[]", "{__name__=~\"load_.*\"}")
            .call()?;
        for line in std::io::BufReader::new(resp.into_reader()).lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(&line)?;
            let labels: BTreeMap<String, String> = v["metric"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                        .collect()
                })
                .unwrap_or_default();
            let ts: Vec<i64> = v["timestamps"]
                .as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_i64).collect())
                .unwrap_or_default();
            out.push((i, series_key(&labels), ts));
        }
    }
    Ok(out)
}

fn verify(out: &str, owners: &[String], wait: u64) -> Res<()> {
    let mut want: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for line in std::io::BufReader::new(std::fs::File::open(out)?).lines() {
        let line = line?;
        let (k, ts) = line.split_once('\t').ok_or("bad line")?;
        want.entry(k.to_owned()).or_default().insert(ts.parse()?);
    }
    let want_pairs: usize = want.values().map(BTreeSet::len).sum();
    let deadline = Instant::now() + Duration::from_secs(wait);
    loop {
        let got = stored(owners)?;
        let mut owner_of: HashMap<&str, usize> = HashMap::new();
        let mut problems = Vec::new();
        let mut have: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        let mut per_owner = vec![0usize; owners.len()];
        for (o, k, ts) in &got {
            if let Some(prev) = owner_of.insert(k, *o)
                && prev != *o
            {
                problems.push(format!("series {k} on owners {prev} and {o}"));
            }
            per_owner[*o] += ts.len();
            have.entry(k).or_default().extend(ts);
        }
        let mut stored_pairs = 0usize;
        let mut missing = 0usize;
        for (k, ts) in &mut have {
            ts.sort_unstable();
            let n = ts.len();
            ts.dedup();
            if ts.len() != n {
                problems.push(format!("series {k}: {} samples stored twice", n - ts.len()));
            }
            stored_pairs += n;
            let w = want.get(*k);
            let extra = ts
                .iter()
                .filter(|t| w.is_none_or(|w| !w.contains(t)))
                .count();
            if extra > 0 {
                problems.push(format!("series {k}: {extra} samples never sent"));
            }
        }
        for (k, ts) in &want {
            let h = have.get(k.as_str());
            missing += ts
                .iter()
                .filter(|t| h.is_none_or(|h| h.binary_search(t).is_err()))
                .count();
        }
        if !problems.is_empty() {
            return Err(format!("verify failed: {}", problems.join("; ")).into());
        }
        if missing == 0 && stored_pairs == want_pairs {
            println!(
                "verify: {stored_pairs} samples stored = {want_pairs} distinct pairs sent, none twice, {} series each on one owner (samples per owner: {per_owner:?})",
                have.len()
            );
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "verify failed: {missing} of {want_pairs} pairs missing after {wait} s ({stored_pairs} stored)"
            )
            .into());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn bench(urls: &[String], seconds: u64, threads: usize, series: usize) -> Res<()> {
    let base_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64
        - 2 * 86_400_000;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    type Run = Result<(u64, Vec<Duration>), String>;
    let results: Vec<Run> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> Run {
                    let agent = ureq::AgentBuilder::new()
                        .timeout(Duration::from_secs(30))
                        .build();
                    let (mut samples, mut lat) = (0u64, Vec::new());
                    let mut k = 0i64;
                    while Instant::now() < deadline {
                        let mut req = WriteRequest::default();
                        for i in 0..series {
                            req.timeseries.push(TimeSeries {
                                labels: vec![
                                    Label {
                                        name: "__name__".into(),
                                        value: "bench_value".into(),
                                    },
                                    Label {
                                        name: "host".into(),
                                        value: format!("t{t}-{i}"),
                                    },
                                ],
                                samples: (0..10)
                                    .map(|j| Sample {
                                        value: (k * 10 + j) as f64,
                                        // 1 ms apart: a fast run stays behind the clock.
                                        timestamp: base_ms + k * 10 + j,
                                    })
                                    .collect(),
                                ..TimeSeries::default()
                            });
                        }
                        let body = encode(&req);
                        let url = &urls[(t + k as usize) % urls.len()];
                        let sent = Instant::now();
                        if send(
                            &agent,
                            url,
                            "/api/v1/write",
                            "application/x-protobuf",
                            &body,
                        )
                        .map_err(|e| e.to_string())?
                        {
                            lat.push(sent.elapsed());
                            samples += (series * 10) as u64;
                            k += 1;
                        }
                    }
                    Ok((samples, lat))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a client failed".to_owned()))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let (mut samples, mut lat) = (0u64, Vec::new());
    for r in results {
        let (s, l) = r?;
        samples += s;
        lat.extend(l);
    }
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "bench: {samples} samples in {secs:.1} s = {:.0} samples/s; {} requests of {} samples, latency p50 {:.1} ms, p99 {:.1} ms",
        samples as f64 / secs,
        lat.len(),
        series * 10,
        pct(0.5),
        pct(0.99)
    );
    Ok(())
}

/// A query answer's `data`, normalised for comparison: series sorted by labels.
fn normalised(v: &serde_json::Value) -> Res<serde_json::Value> {
    if v["status"] != "success" {
        return Err(format!("not a success: {v}").into());
    }
    let mut data = v["data"].clone();
    if let Some(r) = data
        .get_mut("result")
        .and_then(serde_json::Value::as_array_mut)
    {
        r.sort_by_key(|s| s["metric"].to_string());
    } else if let Some(a) = data.as_array_mut() {
        a.sort_by_key(ToString::to_string);
    }
    Ok(data)
}

/// Whether two answers are equal, sample values to 1e-9 relative; counts the values
/// compared and those bit-identical.
fn same(a: &serde_json::Value, b: &serde_json::Value, n: &mut (u64, u64)) -> bool {
    use serde_json::Value as V;
    match (a, b) {
        (V::String(x), V::String(y)) if x == y => {
            n.0 += 1;
            n.1 += 1;
            true
        }
        (V::String(x), V::String(y)) => match (x.parse::<f64>(), y.parse::<f64>()) {
            (Ok(p), Ok(q)) => {
                n.0 += 1;
                (p - q).abs() <= 1e-9 * p.abs().max(q.abs())
            }
            _ => false,
        },
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q, n))
        }
        (V::Object(x), V::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| same(p, q, n)))
        }
        _ => a == b,
    }
}

fn compare(out: &str, routers: &[String], reference: &str) -> Res<()> {
    let (mut t0, mut t1) = (i64::MAX, i64::MIN);
    for line in std::io::BufReader::new(std::fs::File::open(out)?).lines() {
        let line = line?;
        let (_, ts) = line.split_once('\t').ok_or("bad line")?;
        let ts: i64 = ts.parse()?;
        t0 = t0.min(ts);
        t1 = t1.max(ts);
    }
    if t0 > t1 {
        return Err("nothing was sent".into());
    }
    let (s0, s1, mid) = (
        t0 as f64 / 1000.0,
        t1 as f64 / 1000.0,
        (t0 + t1) as f64 / 2000.0,
    );
    let instant = [
        "count({__name__=~\"load_.*\"})",
        "sum by (__name__) (load_rw)",
        // Values distinct per host: a tie would make topk pick by order.
        "topk(3, load_rw)",
        "bottomk(2, load_rw)",
        "max_over_time(load_rw[1m])",
        "sum by (host) (count_over_time({__name__=~\"load_.*\"}[10m]))",
        "sum(load_lp_n) / count(load_lp_n)",
    ];
    let ranged = [
        "rate(load_lp_n[1m])",
        "sum by (host) (rate(load_lp_n[2m]))",
        "avg_over_time(load_rw[1m])",
        "sum_over_time(load_lp_v[5m])",
        "load_lp_v",
        "quantile(0.9, load_rw)",
        "count by (__name__) ({__name__=~\"load_.*\"})",
    ];
    let mut calls: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for q in instant {
        for t in [mid, s1] {
            calls.push((
                "/api/v1/query".into(),
                vec![
                    ("query".into(), q.into()),
                    ("time".into(), format!("{t:.3}")),
                ],
            ));
        }
    }
    for q in ranged {
        calls.push((
            "/api/v1/query_range".into(),
            vec![
                ("query".into(), q.into()),
                ("start".into(), format!("{s0:.3}")),
                ("end".into(), format!("{s1:.3}")),
                ("step".into(), "15s".into()),
            ],
        ));
    }
    let span = vec![
        ("start".to_owned(), format!("{s0:.3}")),
        ("end".to_owned(), format!("{s1:.3}")),
    ];
    let mut with = |path: &str, extra: &[(&str, &str)]| {
        let mut p = span.clone();
        p.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        calls.push((path.to_owned(), p));
    };
    with("/api/v1/series", &[("match[]", "{__name__=~\"load_.*\"}")]);
    with("/api/v1/labels", &[]);
    with("/api/v1/label/host/values", &[]);
    with("/api/v1/label/__name__/values", &[]);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let get = |url: &str, path: &str, params: &[(String, String)]| -> Res<serde_json::Value> {
        let mut req = agent.get(&format!("{url}{path}"));
        for (k, v) in params {
            req = req.query(k, v);
        }
        let text = match req.call() {
            Ok(r) => r.into_string()?,
            Err(ureq::Error::Status(code, r)) => {
                return Err(format!("{url}{path}: {code} {}", r.into_string()?).into());
            }
            Err(e) => return Err(format!("{url}{path}: {e}").into()),
        };
        Ok(serde_json::from_str(&text)?)
    };
    let (mut values, mut exact, mut series) = (0u64, 0u64, 0usize);
    for (path, params) in &calls {
        let want = normalised(&get(reference, path, params)?)?;
        let what = params
            .iter()
            .find(|(k, _)| k == "query" || k == "match[]")
            .map_or(path.as_str(), |(_, v)| v.as_str());
        series += want
            .get("result")
            .and_then(serde_json::Value::as_array)
            .map_or(0, Vec::len);
        for r in routers {
            let got = normalised(&get(r, path, params)?)?;
            let mut n = (0, 0);
            if !same(&got, &want, &mut n) {
                let cut =
                    |v: &serde_json::Value| v.to_string().chars().take(400).collect::<String>();
                return Err(format!(
                    "{path} {what} through {r} differs from the single node:\n  router: {}\n  single: {}",
                    cut(&got),
                    cut(&want)
                )
                .into());
            }
            values += n.0;
            exact += n.1;
        }
    }
    println!(
        "compare: {} answers through {} routers equal the single node's ({series} result series, {values} values compared, {exact} identical as text)",
        calls.len(),
        routers.len()
    );
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let list = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
    match args.get(1).map(String::as_str) {
        Some("load") if args.len() == 5 || args.len() == 6 => load(
            &list(&args[2]),
            args[3].parse()?,
            &args[4],
            args.get(5).map(String::as_str),
        ),
        Some("verify") if args.len() == 5 => verify(&args[2], &list(&args[3]), args[4].parse()?),
        Some("compare") if args.len() == 5 => compare(&args[2], &list(&args[3]), &args[4]),
        Some("bench") if args.len() == 6 => bench(
            &list(&args[2]),
            args[3].parse()?,
            args[4].parse()?,
            args[5].parse()?,
        ),
        _ => Err(
            "usage: cluster_load load ROUTERS SECONDS OUT [REFERENCE] | verify OUT OWNERS WAIT_SECONDS | compare OUT ROUTERS REFERENCE | bench URLS SECONDS THREADS SERIES".into(),
        ),
    }
}
