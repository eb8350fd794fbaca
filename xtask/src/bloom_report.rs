//! `cargo xtask bloom-report`: turns the medians of `cargo bench -p tidemark-benches
//! --bench bloom` (criterion's `target/criterion/*/new/estimates.json`) and the size/rate
//! table that bench writes into the Markdown of `docs/results/bloom.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

const OPS: [&str; 3] = ["insert", "lookup-present", "lookup-absent"];

/// (items, rate) → filter → median ns of [insert, lookup present, lookup absent].
type Table = BTreeMap<(u64, String), BTreeMap<String, [Option<f64>; 3]>>;

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Median in ns of one criterion benchmark.
fn median_ns(dir: &Path) -> Result<f64> {
    let path = dir.join("new/estimates.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    json["median"]["point_estimate"]
        .as_f64()
        .with_context(|| format!("no median in {}", path.display()))
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub fn run(args: &[String]) -> Result<()> {
    let write = match args {
        [] => false,
        [flag] if flag == "--write" => true,
        _ => bail!("usage: cargo xtask bloom-report [--write]"),
    };
    let root = project_root();
    let criterion = root.join("target/criterion");
    let mut table: Table = BTreeMap::new();
    let entries = std::fs::read_dir(&criterion).with_context(|| {
        format!(
            "{} is missing: run `cargo bench -p tidemark-benches --bench bloom` first",
            criterion.display()
        )
    })?;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((op_index, rest)) = OPS
            .iter()
            .enumerate()
            .find_map(|(i, op)| name.strip_prefix(&format!("{op}_")).map(|r| (i, r)))
        else {
            continue;
        };
        let Some((n, p)) = rest.split_once('_') else {
            continue;
        };
        let n_items = match n.strip_suffix('M') {
            Some(m) => m.parse::<u64>()? * 1_000_000,
            None => n.trim_end_matches('k').parse::<u64>()? * 1_000,
        };
        for bench in std::fs::read_dir(entry.path())? {
            let bench = bench?;
            if !bench.path().join("new/estimates.json").exists() {
                continue;
            }
            let subject = bench.file_name().to_string_lossy().into_owned();
            let ns = median_ns(&bench.path())?;
            table
                .entry((n_items, p.to_string()))
                .or_default()
                .entry(subject)
                .or_default()[op_index] = Some(ns);
        }
    }
    if table.is_empty() {
        bail!("no bloom benchmark results under {}", criterion.display());
    }

    let mut md = String::new();
    let fmt = |v: Option<f64>| v.map_or("—".to_string(), |ns| format!("{ns:.1}"));
    for ((n, p), subjects) in &table {
        let _ = writeln!(
            md,
            "\n### {} items at {p} (median ns per operation)\n",
            if *n >= 1_000_000 {
                format!("{}M", n / 1_000_000)
            } else {
                format!("{}k", n / 1_000)
            }
        );
        let _ = writeln!(md, "| filter | insert | lookup present | lookup absent |");
        let _ = writeln!(md, "|---|---|---|---|");
        for (subject, [ins, pres, abs]) in subjects {
            let _ = writeln!(
                md,
                "| {subject} | {} | {} | {} |",
                fmt(*ins),
                fmt(*pres),
                fmt(*abs)
            );
        }
        if let (Some(ours), Some(theirs)) = (
            subjects.get("tidemark-blocked"),
            subjects.get("fastbloom-equal-bits"),
        ) {
            let ratio = |i: usize| match (ours[i], theirs[i]) {
                (Some(a), Some(b)) => format!("{:.2}×", b / a),
                _ => "—".to_string(),
            };
            let _ = writeln!(
                md,
                "\nBlocked vs fastbloom at equal bits per item (fastbloom time / ours, >1 means \
                 ours is faster): insert {}, present {}, absent {}.",
                ratio(0),
                ratio(1),
                ratio(2)
            );
        }
    }
    let sizes = criterion.join("bloom-sizes.md");
    let sizes = std::fs::read_to_string(&sizes).unwrap_or_default();

    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64
        / 86_400;
    let (y, m, d) = civil_date(days);
    let report = format!(
        "# tidemark-bloom benchmarks\n\n\
         Measured {y:04}-{m:02}-{d:02} on the 2-core development machine (shared and noisy: \
         compare ratios within one run). 16-byte time-series keys (8-byte series hash + \
         8-byte big-endian timestamp); lookups walk the whole key set so the filter is \
         read from wherever it lives in the cache hierarchy.\n\n\
         Reproduce:\n\n```sh\ncargo bench -p tidemark-benches --bench bloom\n\
         cargo xtask bloom-report --write\n```\n{md}\n## Sizes and measured rates\n\n\
         Measured rate: hits among 1,000,000 absent keys after inserting the full capacity.\n\n\
         {sizes}"
    );
    if write {
        let out = root.join("docs/results/bloom.md");
        std::fs::write(&out, &report)?;
        println!("wrote {}", out.display());
    } else {
        print!("{report}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::civil_date;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(20_422), (2025, 11, 30));
        assert_eq!(civil_date(20_787), (2026, 11, 30));
    }
}
