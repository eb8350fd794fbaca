//! `cargo xtask bench-report`: runs the workspace's criterion benches in a short mode
//! and summarizes `<target>/criterion/**/new/estimates.json` as Markdown, one table per
//! benchmark group (median time per iteration, its 95% interval, and the throughput when
//! the bench declares one). Meant for a CI job summary: the figures of a short run on a
//! shared runner are indicative, the careful ones are in `docs/results/`.
//!
//! Options: `--out FILE` (default: stdout), `--bench PACKAGE:BENCH` (repeatable; default:
//! every bench of the workspace), `--full` (criterion's own warm-up and measurement
//! times), `--no-run` (summarize the estimates already on disk).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Every criterion bench of the workspace, as `(package, bench)`.
const BENCHES: [(&str, &str); 4] = [
    ("tidemark-dedup", "ingest"),
    ("tidemark-segment", "segment"),
    ("tidemark-tsid", "tsid"),
    ("tidemark-benches", "bloom"),
];

struct Args {
    out: Option<PathBuf>,
    benches: Vec<(String, String)>,
    full: bool,
    run: bool,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut a = Args {
        out: None,
        benches: Vec::new(),
        full: false,
        run: true,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--out" => a.out = Some(PathBuf::from(it.next().context("--out needs a value")?)),
            "--bench" => {
                let v = it.next().context("--bench needs PACKAGE:BENCH")?;
                let (p, b) = v
                    .split_once(':')
                    .with_context(|| format!("--bench {v:?}: expected PACKAGE:BENCH"))?;
                a.benches.push((p.to_owned(), b.to_owned()));
            }
            "--full" => a.full = true,
            "--no-run" => a.run = false,
            other => bail!("unknown option {other:?} (see `cargo xtask help`)"),
        }
    }
    if a.benches.is_empty() {
        a.benches = BENCHES
            .iter()
            .map(|(p, b)| ((*p).to_owned(), (*b).to_owned()))
            .collect();
    }
    Ok(a)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| {
            if p.is_absolute() {
                p
            } else {
                crate::project_root().join(p)
            }
        })
        .unwrap_or_else(|| crate::project_root().join("target"))
}

/// One benchmark's estimates.
#[derive(Debug, Clone, PartialEq)]
struct Estimate {
    group: String,
    name: String,
    median_ns: f64,
    low_ns: f64,
    high_ns: f64,
    /// `(elements or bytes per iteration, "elem" | "B")`.
    throughput: Option<(f64, &'static str)>,
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Reads `<bench dir>/new/{estimates,benchmark}.json`.
fn estimate(new_dir: &Path) -> Result<Estimate> {
    let est = read_json(&new_dir.join("estimates.json"))?;
    let meta = read_json(&new_dir.join("benchmark.json"))?;
    let median = &est["median"];
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let mut name = text(&meta["function_id"]);
    let value = text(&meta["value_str"]);
    if !value.is_empty() {
        if !name.is_empty() {
            name.push('/');
        }
        name.push_str(&value);
    }
    let throughput = match &meta["throughput"] {
        Value::Object(m) => m.iter().next().and_then(|(k, v)| {
            let unit = if k.starts_with("Bytes") || k.starts_with("BytesDecimal") {
                "B"
            } else {
                "elem"
            };
            v.as_f64().map(|n| (n, unit))
        }),
        _ => None,
    };
    Ok(Estimate {
        group: text(&meta["group_id"]),
        name,
        median_ns: num(&median["point_estimate"]),
        low_ns: num(&median["confidence_interval"]["lower_bound"]),
        high_ns: num(&median["confidence_interval"]["upper_bound"]),
        throughput,
    })
}

/// Every `new/` directory under `dir` holding an `estimates.json` modified since `since`.
fn find_new_dirs(dir: &Path, since: Option<SystemTime>, out: &mut Vec<PathBuf>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") {
            let est = path.join("estimates.json");
            let fresh = match (since, std::fs::metadata(&est).and_then(|m| m.modified())) {
                (_, Err(_)) => false,
                (None, Ok(_)) => true,
                (Some(t), Ok(m)) => m >= t,
            };
            if fresh && path.join("benchmark.json").is_file() {
                out.push(path);
            }
        } else if path.file_name().is_none_or(|n| n != "report") {
            find_new_dirs(&path, since, out)?;
        }
    }
    Ok(())
}

fn time(ns: f64) -> String {
    if !ns.is_finite() {
        "—".to_owned()
    } else if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.2} ns")
    }
}

fn throughput(e: &Estimate) -> String {
    match e.throughput {
        Some((n, unit)) if e.median_ns > 0.0 => {
            let per_s = n / (e.median_ns / 1e9);
            let (v, prefix) = if per_s >= 1e9 {
                (per_s / 1e9, "G")
            } else if per_s >= 1e6 {
                (per_s / 1e6, "M")
            } else if per_s >= 1e3 {
                (per_s / 1e3, "k")
            } else {
                (per_s, "")
            };
            format!("{v:.2} {prefix}{unit}/s")
        }
        _ => "—".to_owned(),
    }
}

fn markdown(estimates: &[Estimate], header: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## Benchmark report\n\n{header}\n");
    if estimates.is_empty() {
        let _ = writeln!(o, "No criterion estimates found.");
        return o;
    }
    let mut groups: Vec<&str> = estimates.iter().map(|e| e.group.as_str()).collect();
    groups.dedup();
    let mut seen = Vec::new();
    for g in groups {
        if seen.contains(&g) {
            continue;
        }
        seen.push(g);
        let _ = writeln!(
            o,
            "### {g}\n\n| benchmark | median | 95% interval | throughput |\n|---|---:|---:|---:|"
        );
        for e in estimates.iter().filter(|e| e.group == g) {
            let _ = writeln!(
                o,
                "| {} | {} | {} – {} | {} |",
                e.name,
                time(e.median_ns),
                time(e.low_ns),
                time(e.high_ns),
                throughput(e)
            );
        }
        o.push('\n');
    }
    o
}

pub fn run(raw: &[String]) -> Result<()> {
    let args = parse(raw)?;
    let started = SystemTime::now();
    if args.run {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        for (package, bench) in &args.benches {
            eprintln!("bench-report: cargo bench -p {package} --bench {bench}");
            let mut cmd = Command::new(&cargo);
            cmd.current_dir(crate::project_root())
                .args(["bench", "--locked", "-p", package, "--bench", bench, "--"])
                .stdout(Stdio::from(std::io::stderr()));
            if !args.full {
                cmd.args(["--warm-up-time", "1", "--measurement-time", "2"]);
            }
            let status = cmd
                .status()
                .with_context(|| format!("running cargo bench -p {package}"))?;
            if !status.success() {
                bail!("cargo bench -p {package} --bench {bench} failed: {status}");
            }
        }
    }
    let mut dirs = Vec::new();
    find_new_dirs(
        &target_dir().join("criterion"),
        args.run.then_some(started),
        &mut dirs,
    )?;
    let mut estimates = dirs
        .iter()
        .map(|d| estimate(d))
        .collect::<Result<Vec<_>>>()?;
    estimates.sort_by(|a, b| (&a.group, &a.name).cmp(&(&b.group, &b.name)));
    let mode = if args.full {
        "criterion defaults"
    } else {
        "short mode: 1 s warm-up, 2 s measurement"
    };
    let header = format!(
        "{} ({mode}), {}; median time per iteration. Indicative on shared runners; the \
         careful figures are in `docs/results/`.",
        crate::storage_compare::utc_date(),
        args.benches
            .iter()
            .map(|(p, b)| format!("`{p}:{b}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let md = markdown(&estimates, &header);
    match &args.out {
        Some(p) => {
            std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
            eprintln!(
                "bench-report: {} benchmarks -> {}",
                estimates.len(),
                p.display()
            );
        }
        None => print!("{md}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_criterion_estimates_into_a_table() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("criterion/ingest/in-order/inverted/new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(
            new.join("estimates.json"),
            r#"{"median":{"point_estimate":2.5e8,"confidence_interval":{"lower_bound":2.4e8,"upper_bound":2.6e8}}}"#,
        )
        .unwrap();
        std::fs::write(
            new.join("benchmark.json"),
            r#"{"group_id":"ingest","function_id":"in-order","value_str":"inverted","throughput":{"Elements":200000}}"#,
        )
        .unwrap();
        let mut dirs = Vec::new();
        find_new_dirs(&dir.path().join("criterion"), None, &mut dirs).unwrap();
        assert_eq!(dirs.len(), 1);
        let e = estimate(&dirs[0]).unwrap();
        assert_eq!(e.name, "in-order/inverted");
        assert_eq!(throughput(&e), "800.00 kelem/s");
        let md = markdown(&[e], "test");
        assert!(
            md.contains(
                "| in-order/inverted | 250.000 ms | 240.000 ms – 260.000 ms | 800.00 kelem/s |"
            ),
            "{md}"
        );
        assert!(parse(&["--bench".into(), "nocolon".into()]).is_err());
    }
}
