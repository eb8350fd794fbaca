//! `tidemark`: serve a data directory (Elasticsearch `_bulk` and search, Prometheus
//! remote write and PromQL, Influx line protocol, OTLP), run a demo, create an index
//! from an Elasticsearch-style mapping, ingest NDJSON or `_bulk` files exactly once,
//! query, inspect and measure it, and export it as a Parquet lake — one binary.

mod demo;

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use tidemark::{
    Action, AggQuery, Index, IngestOptions, IngestSummary, InputFormat, Mapping, Order, Query,
    parse_interval, parse_time,
};

// glibc malloc spends about a third of ingest time consolidating the small allocations of
// parsed documents; mimalloc does not (docs/results/ingest.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exactly-once storage of time-series documents.
#[derive(Debug, Parser)]
#[command(name = "tidemark", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OpArg {
    /// Store unless the `_id` is stored (duplicates are counted, not errors).
    Create,
    /// Store, replacing a stored document with the same `_id`.
    Index,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    /// One JSON document per line.
    Ndjson,
    /// Elasticsearch `_bulk` (action line, then document line).
    Bulk,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create an index in DIR with a mapping.
    Create {
        /// Index directory (created if needed).
        dir: PathBuf,
        /// Elasticsearch-style mapping (JSON).
        #[arg(long)]
        mapping: PathBuf,
        /// Split the index into time partitions of this width (1h to 7d, e.g. `1d`):
        /// each document goes to the partition of its own timestamp.
        #[arg(long)]
        partition: Option<String>,
        /// Drop whole partitions this much older than the newest document (e.g. `30d`;
        /// needs `--partition`).
        #[arg(long)]
        retention: Option<String>,
        /// Reject documents this much older than the newest one (needs `--partition`).
        #[arg(long)]
        late_window: Option<String>,
        /// Seal a partition (merge it, build its rollups) once the newest document is
        /// this far past its end (default 1h; needs `--partition`).
        #[arg(long)]
        seal_grace: Option<String>,
        /// Rollup resolutions, comma-separated (e.g. `5m,1h`; each divides the
        /// partition width; needs `--partition`).
        #[arg(long, value_delimiter = ',')]
        rollups: Vec<String>,
        /// Keep a rollup longer than the raw rows, `resolution=retention`
        /// comma-separated (e.g. `1h=365d,5m=90d`; each resolution one of `--rollups`,
        /// each retention longer than `--retention`): a partition past `--retention` but
        /// within a rollup's keeps that rollup, its raw rows and other rollups dropped.
        #[arg(long, value_delimiter = ',')]
        rollup_retention: Vec<String>,
    },
    /// List the dimension names of the series with data in a time range.
    Labels {
        /// Index directory.
        dir: PathBuf,
        /// From this time (inclusive).
        #[arg(long)]
        from: Option<String>,
        /// To this time (exclusive).
        #[arg(long)]
        to: Option<String>,
    },
    /// List the values of a dimension (with their series counts) in a time range.
    LabelValues {
        /// Index directory.
        dir: PathBuf,
        /// The dimension.
        dim: String,
        /// From this time (inclusive).
        #[arg(long)]
        from: Option<String>,
        /// To this time (exclusive).
        #[arg(long)]
        to: Option<String>,
        /// JSON out (`{"value": series}`).
        #[arg(long)]
        json: bool,
    },
    /// List the partitions of an index: time range, rows, bytes, sealed, rollups.
    Partitions {
        /// Index directory.
        dir: PathBuf,
        /// JSON out (one object per line).
        #[arg(long)]
        json: bool,
    },
    /// Ingest NDJSON or `_bulk` files (`-` for standard input).
    Ingest {
        /// Index directory.
        dir: PathBuf,
        /// Input files; none or `-` reads standard input.
        files: Vec<PathBuf>,
        /// What to do with each NDJSON document.
        #[arg(long, value_enum, default_value = "create")]
        op: OpArg,
        /// Input format.
        #[arg(long, value_enum, default_value = "ndjson")]
        format: FormatArg,
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
        /// Print each item's result as NDJSON, as the items of an Elasticsearch bulk
        /// response (the summary then goes to standard error).
        #[arg(long)]
        items: bool,
        /// Parsing threads (0: from the cores available).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Errors printed in full; the others are counted.
        #[arg(long, default_value_t = 10)]
        max_errors: usize,
        /// Leave the last documents in the write-ahead log instead of writing a segment.
        #[arg(long)]
        no_refresh: bool,
        /// Write a segment whenever this many documents are buffered (engine default:
        /// 100,000).
        #[arg(long)]
        refresh_rows: Option<usize>,
    },
    /// Print a document by `_id`.
    Get {
        /// Index directory.
        dir: PathBuf,
        /// The `_id`.
        id: String,
    },
    /// Delete a document by `_id`.
    Delete {
        /// Index directory.
        dir: PathBuf,
        /// The `_id`.
        id: String,
    },
    /// Search documents (NDJSON out, sorted by time).
    Search {
        /// Index directory.
        dir: PathBuf,
        /// From this time (inclusive): RFC 3339 or epoch milliseconds.
        #[arg(long)]
        from: Option<String>,
        /// To this time (exclusive).
        #[arg(long)]
        to: Option<String>,
        /// A dimension term filter, `name=value` (repeatable; all must match).
        #[arg(long = "filter")]
        filters: Vec<String>,
        /// A dimension matcher: `name=value`, `name!=value`, `name=~regex`,
        /// `name!~regex` or `name^=prefix` (repeatable; all must match).
        #[arg(long = "match")]
        matchers: Vec<String>,
        /// Only `_id`s starting with this.
        #[arg(long)]
        id_prefix: Option<String>,
        /// At most this many documents.
        #[arg(long)]
        limit: Option<usize>,
        /// Newest first.
        #[arg(long)]
        desc: bool,
        /// Search the rollup documents of this resolution (one of the index's
        /// rollups, e.g. `1h`) instead of raw documents: per series and bucket, the
        /// dimensions, the bucket start, `_doc_count` and per metric its stats.
        #[arg(long)]
        rollup: Option<String>,
    },
    /// Aggregate a metric per interval: min, max, sum, count, avg, overall and per series (JSON out).
    Agg {
        /// Index directory.
        dir: PathBuf,
        /// The metric field.
        #[arg(long)]
        metric: String,
        /// Bucket width: 500ms, 10s, 1m, 1h, 1d.
        #[arg(long, default_value = "1m")]
        interval: String,
        /// From this time (inclusive).
        #[arg(long)]
        from: Option<String>,
        /// To this time (exclusive).
        #[arg(long)]
        to: Option<String>,
        /// A dimension term filter, `name=value` (repeatable).
        #[arg(long = "filter")]
        filters: Vec<String>,
        /// A dimension matcher (as for `search --match`; repeatable).
        #[arg(long = "match")]
        matchers: Vec<String>,
        /// Group series by these dimensions (comma-separated or repeated) instead of
        /// printing every series.
        #[arg(long, value_delimiter = ',')]
        group_by: Vec<String>,
        /// Read raw rows only, never rollups (to compare).
        #[arg(long)]
        raw: bool,
    },
    /// Documents, series, segments, bytes and the dedup counters.
    Stats {
        /// Index directory.
        dir: PathBuf,
        /// JSON out.
        #[arg(long)]
        json: bool,
    },
    /// Bytes per component, per field and per document.
    DiskUsage {
        /// Index directory.
        dir: PathBuf,
        /// JSON out.
        #[arg(long)]
        json: bool,
    },
    /// Write buffered documents as a segment.
    Refresh {
        /// Index directory.
        dir: PathBuf,
    },
    /// Merge all segments into one.
    Merge {
        /// Index directory.
        dir: PathBuf,
    },
    /// Restore a snapshot (`POST /api/v1/admin/tsdb/snapshot` wrote it under
    /// `DATA/snapshots/NAME`) into a new data directory to serve: immutable files
    /// hard-linked, write-ahead logs copied, so the snapshot itself is never changed.
    Restore {
        /// The snapshot directory.
        snapshot: PathBuf,
        /// The new data directory (must not exist).
        #[arg(long)]
        data: PathBuf,
    },
    /// Dump a segment file: every section, decoded.
    Inspect {
        /// A `seg-*.tms` file.
        segment: PathBuf,
    },
    /// Export the sealed time partitions as a Parquet lake, a Delta table that DuckDB,
    /// DataFusion and Spark read, exactly once per partition.
    Export(tidemark_lake::cli::ExportArgs),
    /// Serve a data directory over HTTP: Elasticsearch's API, Prometheus remote write
    /// and query API, InfluxDB line protocol, OTLP (`tidemark-server` is the same).
    #[cfg(not(feature = "cluster"))]
    Serve(Box<tidemark_server::cli::ServeArgs>),
    /// Serve a data directory over HTTP: Elasticsearch's API, Prometheus remote write
    /// and query API, InfluxDB line protocol, OTLP; with `--cluster FILE`, also own the
    /// shards the file names (docs/cluster.md).
    #[cfg(feature = "cluster")]
    Serve(Box<tidemark_cluster::cli::ClusterServeArgs>),
    /// Route writes (remote write, line protocol) to the shards' NATS JetStream subjects,
    /// answering once JetStream acknowledged them (docs/cluster.md).
    #[cfg(feature = "cluster")]
    Router(tidemark_cluster::cli::RouterArgs),
    /// Serve a fresh data directory, send it a generated dataset twice (line protocol,
    /// then the same samples as remote write), show what it kept and where to look.
    Demo(demo::DemoArgs),
}

fn main() -> ExitCode {
    // Huge pages off: peak RSS about 30% lower under ingest (see the function).
    if let Err(e) = tidemark_server::memory::disable_transparent_huge_pages() {
        eprintln!("tidemark: transparent huge pages stay on: {e}");
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            let mut msg = format!("error: {e}");
            for cause in e.chain().skip(1) {
                msg.push_str(&format!("\n  caused by: {cause}"));
            }
            eprintln!("{msg}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn time_arg(t: &Option<String>) -> Result<Option<i64>> {
    t.as_deref().map(parse_time).transpose().map_err(Into::into)
}

/// The range of `--from` (inclusive) and `--to` (exclusive), either open.
fn range_arg(from: &Option<String>, to: &Option<String>) -> Result<tidemark::TimeRange> {
    Ok(tidemark::TimeRange::half_open(
        time_arg(from)?,
        time_arg(to)?,
    ))
}

fn filters_arg(filters: &[String]) -> Result<Vec<(String, String)>> {
    filters
        .iter()
        .map(|f| match f.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => bail!("invalid filter `{f}`: expected name=value"),
        })
        .collect()
}

fn matchers_arg(matchers: &[String]) -> Result<Vec<tidemark::Filter>> {
    matchers
        .iter()
        .map(|m| tidemark::Filter::parse_matcher(m).map_err(Into::into))
        .collect()
}

fn run(cli: Cli) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match cli.command {
        #[cfg(not(feature = "cluster"))]
        Command::Serve(args) => {
            tidemark_server::cli::run(&args)?;
            return Ok(ExitCode::SUCCESS);
        }
        #[cfg(feature = "cluster")]
        Command::Serve(args) => {
            tidemark_cluster::cli::run_serve(&args)?;
            return Ok(ExitCode::SUCCESS);
        }
        #[cfg(feature = "cluster")]
        Command::Router(args) => {
            tidemark_cluster::cli::run_router(&args)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Export(args) => {
            tidemark_lake::cli::run(&args)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Demo(args) => {
            demo::run(&args)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Create {
            dir,
            mapping,
            partition,
            retention,
            late_window,
            seal_grace,
            rollups,
            rollup_retention,
        } => {
            let text = std::fs::read_to_string(&mapping)
                .with_context(|| format!("reading the mapping {}", mapping.display()))?;
            let m = Mapping::from_json_str(&text)
                .with_context(|| format!("in {}", mapping.display()))?;
            let index = match partition {
                None => {
                    if retention.is_some()
                        || late_window.is_some()
                        || seal_grace.is_some()
                        || !rollups.is_empty()
                        || !rollup_retention.is_empty()
                    {
                        bail!(
                            "--retention, --late-window, --seal-grace, --rollups and --rollup-retention need --partition"
                        );
                    }
                    Index::create(&dir, m)?
                }
                Some(width) => {
                    let opt = |t: &Option<String>| t.as_deref().map(parse_interval).transpose();
                    let mut p = tidemark::dedup::PartitionConfig::new()
                        .with_width_ms(parse_interval(&width)?)
                        .with_retention_ms(opt(&retention)?)
                        .with_late_window_ms(opt(&late_window)?)
                        .with_rollups(
                            rollups
                                .iter()
                                .map(|r| parse_interval(r))
                                .collect::<tidemark::Result<Vec<i64>>>()?,
                        );
                    if let Some(g) = opt(&seal_grace)? {
                        p = p.with_seal_grace_ms(g);
                    }
                    for spec in &rollup_retention {
                        let Some((res, keep)) = spec.split_once('=') else {
                            bail!(
                                "invalid --rollup-retention `{spec}`: expected resolution=retention, e.g. 1h=365d"
                            );
                        };
                        p = p.with_rollup_retention_ms(
                            parse_interval(res.trim())?,
                            parse_interval(keep.trim())?,
                        );
                    }
                    Index::create_partitioned(&dir, m, tidemark::dedup::EngineConfig::new(), p)?
                }
            };
            index.close()?;
            writeln!(out, "created index {}", dir.display())?;
        }
        Command::Labels { dir, from, to } => {
            let index = Index::open(&dir)?;
            for name in index.labels(range_arg(&from, &to)?)? {
                writeln!(out, "{name}")?;
            }
        }
        Command::LabelValues {
            dir,
            dim,
            from,
            to,
            json,
        } => {
            let index = Index::open(&dir)?;
            let values = index.label_values(&dim, range_arg(&from, &to)?)?;
            if json {
                let map: serde_json::Map<String, serde_json::Value> = values
                    .into_iter()
                    .map(|(v, n)| (v, serde_json::Value::from(n)))
                    .collect();
                writeln!(out, "{}", serde_json::Value::Object(map))?;
            } else {
                for (v, n) in values {
                    writeln!(out, "{v}\t{n}")?;
                }
            }
        }
        Command::Partitions { dir, json } => {
            let index = Index::open(&dir)?;
            let parts = index.engine().partitions();
            if !index.engine().is_partitioned() {
                writeln!(
                    out,
                    "{} is not partitioned: one engine holds all time",
                    dir.display()
                )?;
            } else if json {
                for p in &parts {
                    writeln!(out, "{}", partition_json(p))?;
                }
            } else {
                writeln!(
                    out,
                    "{:<22}{:<22}{:>12}{:>10}{:>14}  {:<13}rollups (resolution:rows)",
                    "start", "end", "rows", "segments", "bytes", "state"
                )?;
                for p in &parts {
                    let rollups: Vec<String> = p
                        .rollups
                        .iter()
                        .map(|(r, rows, _)| format!("{}:{rows}", format_duration(*r)))
                        .collect();
                    writeln!(
                        out,
                        "{:<22}{:<22}{:>12}{:>10}{:>14}  {:<13}{}",
                        tidemark::format_time(p.start_ms),
                        tidemark::format_time(p.end_ms),
                        p.rows,
                        p.segments,
                        p.bytes,
                        if p.raw_expired {
                            "rollups-only"
                        } else if p.sealed {
                            "sealed"
                        } else {
                            "active"
                        },
                        rollups.join(" ")
                    )?;
                }
                let s = index.engine().partition_stats();
                writeln!(
                    out,
                    "{} partitions; dropped by retention: {} partitions, {} rows; raw rows expired (rollups kept): {} partitions, {} rows",
                    parts.len(),
                    s.dropped_partitions,
                    s.dropped_rows,
                    s.expired_partitions,
                    s.expired_rows
                )?;
            }
        }
        Command::Ingest {
            dir,
            files,
            op,
            format,
            json,
            items,
            threads,
            max_errors,
            no_refresh,
            refresh_rows,
        } => {
            // The command acknowledges only at the end, after `close` syncs the log, so
            // fsyncing every chunk buys nothing: a killed process loses nothing written
            // (the log is written before each chunk's results), and power loss before
            // the summary is printed means the ingest did not finish.
            let mut config = tidemark::dedup::EngineConfig::new().with_durability(
                tidemark::dedup::Durability::Interval(std::time::Duration::from_secs(1)),
            );
            if let Some(rows) = refresh_rows {
                config = config.with_refresh_rows(rows);
            }
            let mut index = Index::open_with_config(&dir, config)?;
            let options = IngestOptions {
                format: match format {
                    FormatArg::Ndjson => InputFormat::Ndjson,
                    FormatArg::Bulk => InputFormat::Bulk,
                },
                op: match op {
                    OpArg::Create => Action::Create,
                    OpArg::Index => Action::Index,
                },
                threads,
                max_reported_errors: max_errors,
                ..IngestOptions::default()
            };
            let files = if files.is_empty() {
                vec![PathBuf::from("-")]
            } else {
                files
            };
            let mut total = IngestSummary::default();
            let mut printed = 0usize;
            let several = files.len() > 1;
            for file in &files {
                let summary = ingest_file(&mut index, file, &options, items)?;
                for (line, reason) in &summary.first_errors {
                    if printed < max_errors {
                        if several {
                            eprintln!("{}:{line}: {reason}", file.display());
                        } else {
                            eprintln!("line {line}: {reason}");
                        }
                        printed += 1;
                    }
                }
                total.merge(&summary, max_errors);
            }
            if total.counts.errors > printed as u64 {
                eprintln!(
                    "... and {} more errors",
                    total.counts.errors - printed as u64
                );
            }
            if !no_refresh {
                index.refresh()?;
                // Seal the partitions the stream has moved past, apply retention.
                index.maintain()?;
            }
            index.close()?;
            let mut err = std::io::stderr();
            let summary_out: &mut dyn Write = if items { &mut err } else { &mut out };
            if json {
                writeln!(summary_out, "{}", total.to_json())?;
            } else {
                writeln!(
                    summary_out,
                    "{} documents: {} created, {} duplicates, {} replaced, {} updated, {} deleted, {} not found, {} errors, {} ignored fields ({:.0} docs/s)",
                    total.items,
                    total.counts.created,
                    total.counts.duplicates,
                    total.counts.replaced,
                    total.counts.updated,
                    total.counts.deleted,
                    total.counts.not_found,
                    total.counts.errors,
                    total.counts.ignored_fields,
                    total.docs_per_sec()
                )?;
            }
            if total.counts.errors > 0 {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Get { dir, id } => {
            let index = Index::open(&dir)?;
            match index.get(&id)? {
                Some(doc) => writeln!(out, "{doc}")?,
                None => {
                    eprintln!("document {id} not found");
                    return Ok(ExitCode::from(1));
                }
            }
        }
        Command::Delete { dir, id } => {
            let mut index = Index::open(&dir)?;
            let existed = index.delete(&id)?;
            index.close()?;
            let result = if existed { "deleted" } else { "not_found" };
            writeln!(out, "{}", serde_json::json!({"_id": id, "result": result}))?;
        }
        Command::Search {
            dir,
            from,
            to,
            filters,
            matchers,
            id_prefix,
            limit,
            desc,
            rollup,
        } => {
            let index = Index::open(&dir)?;
            let raw_expired = if rollup.is_none() {
                index.expired_ranges(range_arg(&from, &to)?)
            } else {
                Vec::new()
            };
            for (a, b) in raw_expired {
                eprintln!(
                    "note: raw data from {} to {} has expired (retention): no documents there",
                    tidemark::format_time(a),
                    tidemark::format_time(b)
                );
            }
            let query = Query {
                from: time_arg(&from)?,
                to: time_arg(&to)?,
                filters: filters_arg(&filters)?,
                matchers: matchers_arg(&matchers)?,
                id_prefix,
                limit,
                order: if desc { Order::Desc } else { Order::Asc },
            };
            match rollup {
                None => {
                    for doc in index.search(&query)? {
                        writeln!(out, "{doc}")?;
                    }
                }
                Some(r) => {
                    let found = index.search_rollup(&query, parse_interval(&r)?)?;
                    for doc in &found.docs {
                        writeln!(out, "{doc}")?;
                    }
                    for (a, b) in &found.expired {
                        eprintln!(
                            "note: raw data from {} to {} has expired (retention) and no kept rollup is as fine as {r}: no documents there",
                            tidemark::format_time(*a),
                            tidemark::format_time(*b)
                        );
                    }
                }
            }
        }
        Command::Agg {
            dir,
            metric,
            interval,
            from,
            to,
            filters,
            matchers,
            group_by,
            raw,
        } => {
            let index = Index::open(&dir)?;
            let query = AggQuery {
                metric,
                interval_millis: parse_interval(&interval)?,
                from: time_arg(&from)?,
                to: time_arg(&to)?,
                filters: filters_arg(&filters)?,
                matchers: matchers_arg(&matchers)?,
                group_by,
                raw_only: raw,
            };
            let result = index.aggregate(&query)?;
            writeln!(out, "{}", serde_json::to_string_pretty(&result.to_json())?)?;
            for (from, to) in &result.expired {
                eprintln!(
                    "note: raw data from {} to {} has expired (retention) and no kept rollup answers a {interval} interval there: left out of the answer",
                    tidemark::format_time(*from),
                    tidemark::format_time(*to)
                );
            }
        }
        Command::Stats { dir, json } => {
            let index = Index::open(&dir)?;
            let s = index.stats()?;
            if json {
                writeln!(out, "{}", s.to_json())?;
            } else {
                writeln!(out, "documents                 {}", s.documents)?;
                writeln!(out, "series                    {}", s.series)?;
                writeln!(out, "segments                  {}", s.segments)?;
                writeln!(out, "buffered                  {}", s.buffered)?;
                writeln!(out, "deleted rows              {}", s.deleted_rows)?;
                writeln!(out, "bytes                     {}", s.bytes)?;
                writeln!(out, "bytes per document        {:.2}", s.bytes_per_document)?;
                writeln!(out, "partitions                {}", s.partitions)?;
                writeln!(
                    out,
                    "dropped by retention      {} partitions, {} rows",
                    s.partition_stats.dropped_partitions, s.partition_stats.dropped_rows
                )?;
                writeln!(
                    out,
                    "raw expired, rollups kept {} partitions, {} rows",
                    s.partition_stats.expired_partitions, s.partition_stats.expired_rows
                )?;
                for (name, v) in s.counters.pairs() {
                    writeln!(out, "{:<26}{v}", name.replace('_', " "))?;
                }
            }
        }
        Command::DiskUsage { dir, json } => {
            let index = Index::open(&dir)?;
            let d = index.disk_usage()?;
            if json {
                writeln!(out, "{}", d.to_json())?;
            } else {
                let docs = d.documents.max(1) as f64;
                writeln!(
                    out,
                    "{} documents, {} bytes, {:.2} bytes per document",
                    d.documents,
                    d.total_bytes,
                    d.bytes_per_document()
                )?;
                for (title, list) in [
                    ("component", &d.components),
                    ("field", &d.fields),
                    ("file", &d.files),
                ] {
                    writeln!(out, "\n{title:<40}{:>12}{:>12}", "bytes", "bytes/doc")?;
                    for c in list.iter() {
                        writeln!(
                            out,
                            "{:<40}{:>12}{:>12.2}",
                            c.name,
                            c.bytes,
                            c.bytes as f64 / docs
                        )?;
                    }
                }
            }
        }
        Command::Refresh { dir } => {
            let mut index = Index::open(&dir)?;
            index.refresh()?;
            index.close()?;
            writeln!(out, "refreshed {}", dir.display())?;
        }
        Command::Merge { dir } => {
            let mut index = Index::open(&dir)?;
            index.merge()?;
            let segments = index.engine().segment_count();
            index.close()?;
            writeln!(out, "merged {}: {segments} segment(s)", dir.display())?;
        }
        Command::Restore { snapshot, data } => {
            if !snapshot.join(tidemark_server::INDICES_DIR).is_dir() {
                bail!(
                    "{} is not a snapshot of a data directory (no `{}` directory in it)",
                    snapshot.display(),
                    tidemark_server::INDICES_DIR
                );
            }
            let s = tidemark::copy_tree(&snapshot, &data, &[])?;
            writeln!(
                out,
                "restored {} into {}: {} files linked ({} bytes), {} copied ({} bytes); serve it with `tidemark serve --data {}`",
                snapshot.display(),
                data.display(),
                s.files_linked,
                s.bytes_linked,
                s.files_copied,
                s.bytes_copied,
                data.display()
            )?;
        }
        Command::Inspect { segment } => {
            let bytes = std::fs::read(&segment)
                .with_context(|| format!("reading {}", segment.display()))?;
            let text = tidemark::segment::dump(&bytes)
                .with_context(|| format!("in {}", segment.display()))?;
            write!(out, "{text}")?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A partition as one JSON object.
fn partition_json(p: &tidemark::dedup::PartitionInfo) -> serde_json::Value {
    serde_json::json!({
        "start": tidemark::format_time(p.start_ms),
        "end": tidemark::format_time(p.end_ms),
        "start_ms": p.start_ms,
        "end_ms": p.end_ms,
        "rows": p.rows,
        "segments": p.segments,
        "bytes": p.bytes,
        "sealed": p.sealed,
        "raw_expired": p.raw_expired,
        "rollups": p.rollups.iter().map(|(r, rows, bytes)| serde_json::json!({
            "resolution": format_duration(*r), "resolution_ms": r, "rows": rows, "bytes": bytes,
        })).collect::<Vec<_>>(),
    })
}

/// `300000` → `5m`: the largest unit that divides the duration.
fn format_duration(ms: i64) -> String {
    for (unit, f) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms % f == 0 {
            return format!("{}{unit}", ms / f);
        }
    }
    format!("{ms}ms")
}

fn ingest_file(
    index: &mut Index,
    file: &Path,
    options: &IngestOptions,
    items: bool,
) -> Result<IngestSummary> {
    let stdin = file.as_os_str() == "-";
    let (reader, len): (Box<dyn BufRead + Send>, Option<u64>) = if stdin {
        (
            Box::new(BufReader::with_capacity(1 << 20, std::io::stdin())),
            None,
        )
    } else {
        let f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(BufReader::with_capacity(1 << 20, f)), len)
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = match len {
            Some(n) => indicatif::ProgressBar::new(n),
            None => indicatif::ProgressBar::new_spinner(),
        };
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} {bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        ) {
            bar.set_style(style);
        }
        bar
    });
    let mut on_progress = |p: tidemark::Progress| {
        if let Some(bar) = &bar {
            bar.set_position(p.bytes);
            bar.set_message(format!("{} docs", p.items));
        }
    };
    let mut stdout = std::io::stdout().lock();
    let mut write_error = None;
    let mut on_item = |r: &tidemark::ItemResult| {
        if items
            && write_error.is_none()
            && let Err(e) = writeln!(stdout, "{}", r.to_json())
        {
            write_error = Some(e);
        }
    };
    // Without `--items` nobody reads the results one by one: their `_id`s are not made.
    let summary = if items {
        index.ingest_items(reader, options, &mut on_progress, &mut on_item)
    } else {
        index.ingest(reader, options, &mut on_progress)
    }
    .with_context(|| format!("ingesting {}", file.display()))?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(summary)
}
