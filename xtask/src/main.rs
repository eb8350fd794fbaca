//! `cargo xtask`: the workspace's development tasks (see `cargo xtask help`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bench_report;
mod bloom_demo;
mod bloom_report;
mod datasets;
mod fuzz;
mod harness;
mod partition_soak;
mod peers;
mod promql_bench;
mod promql_conformance;
mod rollup_bench;
mod server_soak;
mod soak;
mod storage_chart;
mod storage_compare;
mod storage_points;
#[cfg(feature = "tantivy")]
mod storage_tantivy;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The workspace root (xtask lives one level below it).
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

const HELP: &str = "\
cargo xtask <task> [options]

tasks:
  storage-compare [--datasets k8s,otel,events] [--strategies inverted,bloom,series-range]
      [--points N] [--series N] [--small] [--refresh-rows N]
      [--reps N] [--batch N] [--seed N] [--dup-rate F] [--late-rate F] [--disorder F] [--out DIR]
      [--json FILE] [--markdown FILE] [--svg FILE] [--with-tantivy]
      ingest the same generated documents under each dedup strategy (inverted baseline,
      bloom, series-range), merge, and print bytes per document (total and id/dedup
      structures), the reduction against inverted, ingest docs/s and the ratio against
      inverted, duplicates found; fails if a duplicate count is wrong or series-range is
      not smaller than inverted. Writes storage.{json,md,svg} to --out (default
      target/xtask/storage-compare). --small: a few seconds, for CI. --with-tantivy needs
      `--features tantivy` (cargo run -p xtask --release --features tantivy -- ...)
  bench-report [--out FILE] [--bench PACKAGE:BENCH]... [--full] [--no-run]
      run the criterion benches (default: all four) in a short mode (1 s warm-up, 2 s
      measurement; --full: criterion's own) and write a Markdown summary of
      <target>/criterion/**/new/estimates.json to stdout or FILE (--no-run: only the
      summary of what is on disk); for CI job summaries
  bloom-demo [--items N] [--fpr P] [--absent N]
      build each bloom filter type from N time-series keys, then print its size,
      bits per item and the false-positive rate measured over absent keys
  bloom-report [--write]
      summarize `cargo bench -p tidemark-benches --bench bloom` (criterion medians and
      the size/rate table) as Markdown; --write puts it in docs/results/bloom.md
  gen [k8s|otel|events|all] [--points N] [--series N] [--seed N] [--dup-rate F]
      [--late-rate F] [--disorder F] [--shuffle-keys] [--out DIR]
      write a deterministic dataset as NDJSON with its mapping and the exact unique and
      duplicate counts (default out: target/xtask/datasets)
  peers [--dataset k8s|otel] [--points N] [--series N] [--systems LIST] [--clients N]
      [--batch N] [--dup-rate F] [--late-rate F] [--changed-rate F] [--seed N] [--small]
      [--json FILE] [--markdown FILE] [--tidemark-bin PATH] [--keep-data DIR] [--rounds N]
      (--rounds: the systems N times on one dataset, alternate rounds in reverse order,
      the report led by each system's median)
      write the same generated dataset (retries, late points, retries with another value)
      through each system's own protocol on loopback: tidemark (line protocol; tidemark:rw
      remote write), victoria-metrics (line protocol, or :rw; -dedup.minScrapeInterval=1ms),
      prometheus (remote write, out-of-order window on), influxdb (1.x, line protocol);
      each installed with apt-get when missing, started on a free 127.0.0.1 port with its
      own temp dir, stopped after. Prints ingest samples/s, bytes/sample after each
      system's compaction, peak RSS, stored count and which copy of a retry was kept.
      Needs target/release/tidemark-server (cargo build --release -p tidemark-server)
  soak [--dataset k8s|otel] [--points N] [--strategy S] [--batch N] [--every N]
      [--refresh-rows N] [--series N] [--seed N] [--dup-rate F] [--late-rate F] [--disorder F]
      [--merge-threads N] [--merge-stall N|off] [--api refs|points] [--out DIR] [--data DIR]
      generate points on the fly (retries and late points included) and ingest them through
      the store with background merges (--api: by series refs, the default, or as whole
      points, dimensions and metric names in each); every --every points (default 1,000,000) record
      peak RSS (VmHWM), RSS, points/s, bytes per point on disk, segments and write stalls
      (as the server: a PartitionedEngine with --merge-threads merge threads, default 1,
      and inline merges once more than --merge-stall merges wait, default 4); then merge
      everything into one segment and report that merge's own peak RSS. Prints a table,
      writes soak-<dataset>-<points>.{csv,svg} to --out (default target/xtask/soak);
      fails if a retry is stored or a point lost
  rollup-bench [--days N] [--series N] [--reps N] [--metric NAME] [--out DIR]
      [--markdown FILE]
      generate N days (default 30) of k8s-shaped points at 10 s (default 50 series) into a
      partitioned index with 5m and 1h rollups, then time an hourly avg over the whole range
      from rollups and from raw rows (medians of --reps runs, default 5); fails unless the
      answers are identical (sums within 1e-9 relative); prints Markdown (--markdown FILE
      writes it, e.g. docs/results/rollups.md)
  partition-soak [--points N] [--series N] [--every N] [--width-min N] [--retention-min N]
      generate k8s points (default 200 series) on the fly (2% retries, 1% late) into a partitioned store (1 h
      partitions, 5 m rollups, 6 h retention by default), run maintain every --every points
      and print peak RSS, RSS, partitions alive and dropped; fails if a point is lost or a
      retry stored
  promql-conformance --prometheus-checkout DIR [--markdown FILE] [--failures FILE]
      run the PromQL test files of a Prometheus checkout (promql/promqltest/testdata)
      against tidemark-promql; print passed/failed/skipped eval cases per file
  promql-bench [--series N] [--hours N] [--interval-secs N] [--sites N] [--step-secs N]
      [--reps N] [--clients N] [--batch-series N] [--skip-memory] [--rollups] [--json FILE]
      [--tidemark-bin PATH] [--buckets N] [--queries] [--keep DIR]
      `sum by (site) (rate(x[5m]))` as query_range (default 10,000 counters x 24 h at 10 s,
      1-minute step) on tidemark-server and VictoriaMetrics (apt-get install when missing),
      both loaded through remote write with data generated on the fly; prints load time,
      query medians, the answers compared, and Tidemark's VmHWM per query range in a freshly
      started server. --queries: also avg_over_time, max by, topk, histogram_quantile (with
      --buckets N bucket series) and instant queries, on both, answers compared series by
      series; --keep DIR: keep both data directories in DIR and reuse them next time. With --rollups: Tidemark only, the `metrics` index partitioned
      with 5 m and 1 h rollups, `sum/avg/max_over_time(x[1h])` by site with a 1 h step read
      from rollups and from raw samples (`tidemark_rollups=false`), answers compared.
      Needs target/release/tidemark-server
  fuzz [--seconds N] [--target NAME[,NAME...]] [--mode libfuzzer|stable] [--seed N]
      [--markdown FILE]
      fuzz the decoders of tidemark-fuzz (wire protocols, query languages, file formats)
      for N seconds in total (default 60), split evenly over the targets (default all).
      libfuzzer (the default when `cargo +nightly fuzz` is installed): coverage-guided,
      binaries built once by `cargo +nightly fuzz build` in target/fuzz and each run as
      `cargo fuzz run` runs it, corpus in target/fuzz-corpus/<target> seeded from real
      inputs; stable: seeded mutations of the seeds in-process, panics caught.
      Prints execs, execs/s, coverage, corpus size and crashes per target; crashing
      inputs go to crates/fuzz/regressions/<target>/ (a test from then on) and fail
      the task
  server-soak [--minutes N] [--kills N] [--pause-ms N] [--tidemark-bin PATH] [--markdown FILE]
      the server on loopback for N minutes (default 30, at most 180): _bulk, line protocol,
      remote write and OTLP/JSON writers (batches of 500 distinct points, re-sent until
      acknowledged), PromQL query_range and _search readers, --kills SIGKILLs (default 2)
      at even intervals with a restart on the same data; prints RSS per server life and
      p50/p99 per endpoint, and fails unless every acknowledged point is stored once and
      re-sending every batch stores nothing new
  help
      this text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("bloom-demo") => bloom_demo::run(&args[1..]),
        Some("bloom-report") => bloom_report::run(&args[1..]),
        Some("gen") => datasets::run(&args[1..]),
        Some("storage-compare") => storage_compare::run(&args[1..]),
        Some("bench-report") => bench_report::run(&args[1..]),
        Some("peers") => peers::run(&args[1..]),
        Some("soak") => soak::run(&args[1..]),
        Some("promql-conformance") => promql_conformance::run(&args[1..]),
        Some("promql-bench") => promql_bench::run(&args[1..]),
        Some("soak-merge") => soak::merge_only(&args[1..]),
        Some("rollup-bench") => rollup_bench::run(&args[1..]),
        Some("partition-soak") => partition_soak::run(&args[1..]),
        Some("server-soak") => server_soak::run(&args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("help" | "--help" | "-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(anyhow::anyhow!("unknown task {other:?}\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
