//! A bounded loopback load test for `_bulk`: N clients send an NDJSON file as `create`
//! batches (each batch once), plain or gzip, and report documents per second and the
//! p50/p99 request latency.
//!
//! ```text
//! cargo run --release -p tidemark-server --example load -- \
//!     --addr 127.0.0.1:9200 --index k8s --file k8s.ndjson [--clients 4] [--batch 1000] \
//!     [--gzip] [--seconds 60]
//! ```
//!
//! Bodies are built (and compressed) before the clock starts, as a shipper's output
//! buffer would be. Only loopback addresses are accepted: this is a local benchmark.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Args {
    addr: String,
    index: String,
    file: String,
    clients: usize,
    batch: usize,
    gzip: bool,
    seconds: u64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:9200".into(),
        index: "k8s".into(),
        file: String::new(),
        clients: 4,
        batch: 1000,
        gzip: false,
        seconds: 60,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => a.addr = value()?,
            "--index" => a.index = value()?,
            "--file" => a.file = value()?,
            "--clients" => a.clients = value()?.parse().map_err(|e| format!("--clients: {e}"))?,
            "--batch" => a.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--seconds" => a.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--gzip" => a.gzip = true,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.file.is_empty() {
        return Err("--file NDJSON is required".into());
    }
    let ip: std::net::SocketAddr = a.addr.parse().map_err(|e| format!("--addr: {e}"))?;
    if !ip.ip().is_loopback() {
        return Err("--addr must be a loopback address".into());
    }
    if a.clients == 0 || a.batch == 0 || a.seconds == 0 || a.seconds > 600 {
        return Err("--clients and --batch must be positive, --seconds in 1..=600".into());
    }
    Ok(a)
}

/// `(documents, body)` of each batch.
type Batches = Vec<(usize, Vec<u8>)>;

fn bodies(a: &Args) -> Result<Batches, Box<dyn std::error::Error>> {
    let reader = std::io::BufReader::new(std::fs::File::open(&a.file)?);
    let mut out = Vec::new();
    let mut body = Vec::new();
    let mut n = 0;
    let mut push = |body: &mut Vec<u8>, n: &mut usize| -> std::io::Result<()> {
        let bytes = if a.gzip {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(body)?;
            e.finish()?
        } else {
            body.clone()
        };
        out.push((*n, bytes));
        body.clear();
        *n = 0;
        Ok(())
    };
    for line in reader.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        body.extend_from_slice(b"{\"create\":{}}\n");
        body.extend_from_slice(line.as_bytes());
        body.push(b'\n');
        n += 1;
        if n == a.batch {
            push(&mut body, &mut n)?;
        }
    }
    if n > 0 {
        push(&mut body, &mut n)?;
    }
    Ok(out)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = parse()?;
    let batches = Arc::new(bodies(&a)?);
    let url = format!("http://{}/{}/_bulk", a.addr, a.index);
    let next = Arc::new(AtomicUsize::new(0));
    let stats = Arc::new(Mutex::new((
        Vec::<Duration>::new(),
        0usize,
        0usize,
        0usize,
        0usize,
    )));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(a.seconds);
    let threads: Vec<_> = (0..a.clients)
        .map(|_| {
            let (batches, next, stats, url) = (
                Arc::clone(&batches),
                Arc::clone(&next),
                Arc::clone(&stats),
                url.clone(),
            );
            let gzip = a.gzip;
            std::thread::spawn(move || -> Result<(), String> {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(60))
                    .build();
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some((docs, body)) = batches.get(i) else {
                        break;
                    };
                    let mut req = agent.post(&url).set("content-type", "application/x-ndjson");
                    if gzip {
                        req = req.set("content-encoding", "gzip");
                    }
                    let t = Instant::now();
                    let resp = req.send_bytes(body).map_err(|e| e.to_string())?;
                    let text = resp.into_string().map_err(|e| e.to_string())?;
                    let took = t.elapsed();
                    let created = text.matches("\"status\":201").count();
                    let dups = text.matches("\"status\":409").count();
                    let mut s = stats.lock().map_err(|e| e.to_string())?;
                    s.0.push(took);
                    s.1 += docs;
                    s.2 += created;
                    s.3 += dups;
                    s.4 += docs - created - dups;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "client panicked")??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut s = stats.lock().map_err(|e| e.to_string())?;
    s.0.sort();
    println!(
        "{{\"clients\": {}, \"batch\": {}, \"gzip\": {}, \"docs\": {}, \"created\": {}, \"duplicates\": {}, \"errors\": {}, \"seconds\": {:.3}, \"docs_per_sec\": {:.0}, \"requests\": {}, \"p50_ms\": {:.2}, \"p99_ms\": {:.2}}}",
        a.clients,
        a.batch,
        a.gzip,
        s.1,
        s.2,
        s.3,
        s.4,
        elapsed,
        s.1 as f64 / elapsed,
        s.0.len(),
        percentile(&s.0, 0.5),
        percentile(&s.0, 0.99)
    );
    if s.4 > 0 {
        return Err(format!("{} items failed", s.4).into());
    }
    Ok(())
}
