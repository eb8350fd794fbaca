#!/usr/bin/env python3
"""The Spark half of lake_spark.sh (which starts the cluster and runs this).

Builds an index of three sealed days of six series (`tidemark create`, `ingest`),
exports it (`tidemark export --row-group-rows 100 --json`: several row groups a file),
lists the live files from the Delta log, and reads them on the standalone cluster:

- row count, distinct `_id` and per-shard row counts (the `shard` column; `partition`
  from the Hive-style paths) equal the export report's;
- an absent `_id` (a present id's timestamp + 1 minute, inside its row group's `_id`
  min/max) finds 0 rows, and the Parquet scan outputs 0 rows with the bloom filter on
  (`parquet.filter.bloom.enabled=true`, the default) but the whole row group with it off.

Usage: lake_spark.py TIDEMARK SPARK_MASTER_URL TMP_DIR
"""

import json
import os
import subprocess
import sys
import time

import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

DAY = 86_400_000
MIN = 60_000
BASE = 1_735_689_600_000  # 2025-01-01T00:00:00Z
HOSTS = 6
STEP = 5 * MIN
FAILED = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILED.append(what)


def run(args):
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def live_files(table):
    """The live data files of a Delta table, replaying its JSON log (no checkpoint:
    three commits)."""
    log = os.path.join(table, "_delta_log")
    live = set()
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json")):
        with open(os.path.join(log, name)) as f:
            for line in f:
                a = json.loads(line)
                if "add" in a:
                    live.add(a["add"]["path"])
                elif "remove" in a:
                    live.discard(a["remove"]["path"])
    return sorted(os.path.join(table, p) for p in live)


def scan_rows(df):
    """Rows the Parquet scan of `df`'s executed plan produced (its numOutputRows)."""
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    scan = leaves.apply(0)
    return int(scan.metrics().apply("numOutputRows").value())


def main():
    tidemark, master, tmp = sys.argv[1:4]
    idx, lake = os.path.join(tmp, "idx"), os.path.join(tmp, "lake")
    mapping = os.path.join(tmp, "mapping.json")
    with open(mapping, "w") as f:
        json.dump({"mappings": {"properties": {
            "host": {"type": "keyword", "time_series_dimension": True},
            "cpu": {"type": "double", "time_series_metric": "gauge"},
            "bytes": {"type": "long", "time_series_metric": "counter"}}}}, f)
    data = os.path.join(tmp, "docs.ndjson")
    def doc(h, t):
        k = (t - BASE) // MIN
        return json.dumps({"@timestamp": t, "host": f"h{h}", "cpu": (k % 97) / 10.0,
                           "bytes": k * 100 + h}) + "\n"

    with open(data, "w") as f:
        for d in range(3):
            for h in range(HOSTS):
                for t in range(BASE + d * DAY, BASE + (d + 1) * DAY, STEP):
                    f.write(doc(h, t))
        # A point on the fourth day, past the seal grace: the first three are sealed.
        f.write(doc(0, BASE + 3 * DAY + 2 * 3_600_000))
    run([tidemark, "create", idx, "--mapping", mapping, "--partition", "1d"])
    run([tidemark, "ingest", idx, data])
    rep = json.loads(run([tidemark, "export", "--index", idx, "--to", lake,
                          "--row-group-rows", "100", "--json"]))
    rows = rep["rows"]
    per_shard = {}
    for p in rep["partitions"]:
        for fr in p["files"]:
            for shard, n in fr["shards"].items():
                per_shard[int(shard)] = per_shard.get(int(shard), 0) + n
    files = live_files(lake)
    check(rep["committed"] == 3 and len(files) == rep["files"],
          f"tidemark: 3 partitions, {rows} rows, {len(files)} files")

    spark = (SparkSession.builder.master(master).appName("tidemark-lake")
             .config("spark.sql.adaptive.enabled", "false")
             .config("spark.executor.memory", "768m")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    started = time.time()
    df = spark.read.option("basePath", lake).parquet(*files)
    n = df.count()
    d = df.select(F.countDistinct("_id")).collect()[0][0]
    check(n == rows and d == rows, f"spark: {n} rows, {d} distinct _id (tidemark: {rows})")
    got = {int(r["shard"]): int(r["count"]) for r in df.groupBy("shard").count().collect()}
    check(got == per_shard, f"spark: per-shard rows equal the export report's ({len(got)} shards)")
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    check(executors == 2, f"spark: {executors} executors (two workers)")

    # An absent id inside a row group's [min, max] `_id` statistics.
    f0 = files[0]
    meta = pq.ParquetFile(f0).metadata
    col = [meta.schema.column(i).name for i in range(meta.num_columns)].index("_id")
    rg = meta.row_group(0).column(col).statistics
    ids = pq.read_table(f0, columns=["_id"]).column("_id").to_pylist()[: meta.row_group(0).num_rows]
    present = ids[len(ids) // 2]
    ts = int.from_bytes(present[20:], "big") ^ (1 << 63)
    absent = present[:20] + ((ts + MIN) ^ (1 << 63)).to_bytes(8, "big")
    check(rg.min < absent < rg.max and absent not in ids,
          "the absent _id lies inside row group 0's _id range")
    results = {}
    for bloom in ("true", "false"):
        one = (spark.read.option("basePath", lake)
               .option("parquet.filter.bloom.enabled", bloom)
               .parquet(f0))
        for name, key in (("present", present), ("absent", absent)):
            q = one.filter(F.col("_id") == F.lit(bytearray(key))).select("_id")
            found = len(q.collect())
            results[(bloom, name)] = (found, scan_rows(q))
    on, off = results[("true", "absent")], results[("false", "absent")]
    check(results[("true", "present")][0] == 1 and results[("false", "present")][0] == 1,
          f"spark: a present _id finds one row (scan rows: bloom on {results[('true', 'present')][1]}, "
          f"off {results[('false', 'present')][1]})")
    check(on == (0, 0), f"spark, bloom filter on: the absent _id finds {on[0]} rows, the scan outputs {on[1]}")
    check(off[0] == 0 and off[1] > 0,
          f"spark, bloom filter off: the absent _id finds {off[0]} rows, the scan outputs {off[1]}")
    print(f"spark: {time.time() - started:.1f} s of queries; files={len(files)} rows={rows} "
          f"absent scan rows on={on[1]} off={off[1]}", flush=True)
    spark.stop()
    print(f"lake_spark: {'FAILED ' + str(len(FAILED)) if FAILED else 'all passed'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
