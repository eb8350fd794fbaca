//! The load and the check of `tests/cluster_e2e.sh`, against running routers and owners.
//!
//! `cluster_load load ROUTER_URL,... SECONDS OUT`: writes batches of remote write and
//! Influx line protocol through the routers for SECONDS, retrying each batch (through
//! the next router) until it is acknowledged, and re-sending 10% of acknowledged batches
//! through another router; writes to OUT the distinct (series, timestamp) pairs sent,
//! one `series<TAB>timestamp` line each, and prints what happened.
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

fn load(routers: &[String], seconds: u64, out: &str) -> Res<()> {
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

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let list = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
    match args.get(1).map(String::as_str) {
        Some("load") if args.len() == 5 => load(&list(&args[2]), args[3].parse()?, &args[4]),
        Some("verify") if args.len() == 5 => verify(&args[2], &list(&args[3]), args[4].parse()?),
        _ => Err(
            "usage: cluster_load load ROUTERS SECONDS OUT | verify OUT OWNERS WAIT_SECONDS".into(),
        ),
    }
}
