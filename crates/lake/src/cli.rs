//! The `export` command's arguments and entry point, shared by `tidemark export` (the
//! `tidemark-cli` package) and the `tidemark-export` binary.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use crate::{
    DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_FILE_ROWS, DEFAULT_ID_BLOOM_FPR, DEFAULT_ROW_GROUP_ROWS,
    DEFAULT_SHARD_RANGE_BITS, ExportOptions, ExportProgress, ExportReport, LakeStore, WriteOptions,
    export_to, rollup_table_dir, vacuum,
};
use anyhow::{Context, Result};
use tidemark::{Index, format_time, parse_interval, parse_time};

/// Export the sealed time partitions of a Tidemark index as a Parquet lake (a Delta
/// table that DuckDB, DataFusion and Spark read), exactly once per partition.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// Index directory (a time-partitioned index).
    #[arg(long)]
    pub index: PathBuf,
    /// The lake: a Delta table directory (created if needed), `file:///dir`, or
    /// `s3://bucket/prefix` (a build with tidemark-lake's `s3` feature; endpoint, region
    /// and credentials from the AWS_* environment variables).
    #[arg(long)]
    pub to: PathBuf,
    /// Only the sealed partition starting at this time (RFC 3339 or epoch
    /// milliseconds; repeatable). Default: every sealed partition.
    #[arg(long = "partition")]
    pub partitions: Vec<String>,
    /// Rows per row group.
    #[arg(long, default_value_t = DEFAULT_ROW_GROUP_ROWS)]
    pub row_group_rows: usize,
    /// False-positive rate of each row group's `_id` bloom filter.
    #[arg(long, default_value_t = DEFAULT_ID_BLOOM_FPR)]
    pub id_bloom_fpr: f64,
    /// Leave the `_id` column out (to measure its cost; it is `_tsid` ‖ timestamp).
    #[arg(long)]
    pub without_id: bool,
    /// Most rows of a data file: a partition's shard ranges go to one file until the
    /// next would pass this (a larger shard range is a file of its own).
    #[arg(long, default_value_t = DEFAULT_FILE_ROWS)]
    pub file_rows: u64,
    /// The 256 virtual shards form 2^N ranges of consecutive shards that no file or row
    /// group spans (0..=8).
    #[arg(long, default_value_t = DEFAULT_SHARD_RANGE_BITS)]
    pub shard_range_bits: u32,
    /// Write a Delta checkpoint after every N commits of a table (0: never).
    #[arg(long, default_value_t = DEFAULT_CHECKPOINT_INTERVAL)]
    pub checkpoint_interval: u64,
    /// After the export, delete the files of each table that its commits removed at
    /// least this long ago (`7d`, `12h`, `30m`; Delta's VACUUM), and unreferenced files
    /// at least as old (and at least an hour old).
    #[arg(long, value_name = "RETENTION")]
    pub vacuum: Option<String>,
    /// The report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Exports what these arguments name and prints the report (a table, or JSON with
/// `--json`) on stdout, progress on stderr.
pub fn run(cli: &ExportArgs) -> Result<()> {
    let partitions = if cli.partitions.is_empty() {
        None
    } else {
        Some(
            cli.partitions
                .iter()
                .map(|p| parse_time(p).with_context(|| format!("--partition {p}")))
                .collect::<Result<Vec<i64>>>()?,
        )
    };
    let options = ExportOptions {
        write: WriteOptions {
            row_group_rows: cli.row_group_rows,
            id_bloom_fpr: cli.id_bloom_fpr,
            write_id: !cli.without_id,
            file_rows: cli.file_rows,
            shard_range_bits: cli.shard_range_bits,
            ..WriteOptions::default()
        },
        partitions,
        checkpoint_interval: cli.checkpoint_interval,
    };
    let retention_ms = cli
        .vacuum
        .as_deref()
        .map(|r| parse_interval(r).with_context(|| format!("--vacuum {r}")))
        .transpose()?;
    let index = Index::open(&cli.index)
        .with_context(|| format!("opening the index {}", cli.index.display()))?;
    let terminal = std::io::stderr().is_terminal();
    let mut last = std::time::Instant::now();
    let mut on_progress = |p: &ExportProgress| {
        let done = p.rows.0 == p.rows.1;
        if !terminal && !done {
            return;
        }
        if terminal && !done && last.elapsed().as_millis() < 200 {
            return;
        }
        last = std::time::Instant::now();
        let line = format!(
            "{} partition {}/{} {}: {}/{} rows",
            table_name(p.rollup_ms),
            p.partition.0 + 1,
            p.partition.1,
            format_time(p.start_ms),
            p.rows.0,
            p.rows.1
        );
        if terminal {
            eprint!("\r\x1b[2K{line}");
            if done {
                eprintln!();
            }
        } else {
            eprintln!("{line}");
        }
    };
    let lake = match cli.to.to_str() {
        Some(url) if url.contains("://") => LakeStore::open(url),
        _ => LakeStore::local(&cli.to),
    }
    .with_context(|| format!("opening the lake {}", cli.to.display()))?;
    let report = export_to(&index, &lake, &options, &mut on_progress)
        .with_context(|| format!("exporting {} to {}", cli.index.display(), cli.to.display()))?;
    let vacuumed = match retention_ms {
        Some(r) => {
            Some(vacuum(&lake, r).with_context(|| format!("vacuuming {}", cli.to.display()))?)
        }
        None => None,
    };
    let mut out = std::io::stdout().lock();
    if cli.json {
        let mut json = report.to_json();
        if let (Some(v), serde_json::Value::Object(o)) = (&vacuumed, &mut json) {
            o.insert(
                "vacuum".to_owned(),
                v.iter()
                    .map(|(table, r)| {
                        serde_json::json!({"table": table, "deleted": r.deleted, "bytes": r.bytes})
                    })
                    .collect(),
            );
        }
        writeln!(out, "{json}")?;
    } else {
        write_report(&mut out, &report)?;
        for (table, r) in vacuumed.iter().flatten() {
            writeln!(
                out,
                "vacuum {table}: deleted {} files, {} bytes",
                r.deleted.len(),
                r.bytes
            )?;
        }
    }
    Ok(())
}

/// `raw` for the raw rows' table, `rollup 5m` for a rollup table.
fn table_name(rollup_ms: Option<i64>) -> String {
    match rollup_ms {
        None => "raw".to_owned(),
        Some(r) => format!(
            "rollup {}",
            rollup_table_dir(r).trim_start_matches("_rollups/")
        ),
    }
}

fn write_report(out: &mut impl Write, r: &ExportReport) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<10} {:<26} {:>10} {:>12} {:>12} {:>6} {:>9}  files",
        "table", "partition", "generation", "rows", "bytes", "groups", "version"
    )?;
    for p in &r.partitions {
        let version = p
            .version
            .map_or_else(|| "skipped".to_owned(), |v| v.to_string());
        writeln!(
            out,
            "{:<10} {:<26} {:>10} {:>12} {:>12} {:>6} {:>9}  {}",
            table_name(p.rollup_ms),
            format_time(p.start_ms),
            p.generation,
            p.rows,
            p.bytes,
            p.row_groups,
            version,
            match (p.version, p.files.as_slice()) {
                (None, _) => "already in the lake".to_owned(),
                (Some(_), []) => "(empty)".to_owned(),
                (Some(_), [one]) => one.path.clone(),
                (Some(_), files) => format!(
                    "{} files (by shard range) under partition={}/",
                    files.len(),
                    p.start_ms
                ),
            }
        )?;
    }
    writeln!(
        out,
        "exported {} partitions ({} skipped, already in the lake): {} rows, {} files, {} bytes ({:.2} bytes/row) in {:.2} s, {:.0} rows/s",
        r.committed(),
        r.skipped(),
        r.rows(),
        r.files(),
        r.bytes(),
        if r.rows() > 0 {
            r.bytes() as f64 / r.rows() as f64
        } else {
            0.0
        },
        r.seconds,
        r.rows_per_second()
    )
}
