#!/usr/bin/env python3
"""Parity of the Parquet lake with the index, read by DuckDB, DataFusion and deltalake.

Runs the real binaries: `tidemark create` (1-day partitions), `tidemark ingest` of three
days of six series (plus one point on a fourth day, so the three are sealed),
`tidemark export --index IDX --to LAKE` (which runs `tidemark-export`), twice. Then:

- deltalake (delta-rs) opens the table: 3 commits, one live file per day, the rows,
  partitioned by `partition`;
- per shard, the rows DuckDB, DataFusion (over delta-rs' dataset) and delta-rs count
  equal the export report's and `tidemark agg --raw`'s series counts summed by shard,
  the shard computed from the tsid as docs/lake.md says (byte 4); rows are ordered by
  shard and a query on one shard range reads only its row groups (DuckDB);
- DuckDB and DataFusion over the live files: row count, distinct `_id`, and per series
  and day count/min/max exactly and sum within 1e-9 of `tidemark agg --raw`, for a gauge
  and a counter;
- a present `_id` finds one row (DuckDB scans one row group of all);
- absent `_id`s inside a row group's [min, max] `_id` statistics find nothing and are
  pruned by the split-block bloom filter: DuckDB's `total_row_groups_scanned` is 0 and
  DataFusion's `row_groups_pruned_bloom_filter` counts them;
- the 1h rollup table, read by DuckDB and DataFusion, equals Tidemark's own rollup
  answers (`tidemark agg --interval 1h`, served from the rollups) per series and hour:
  count/min/max exactly, sums within 1e-9; folded per day it equals the raw rows';
- checkpoints and vacuum: a lake checkpointed every 2 commits, re-exported after a late
  write and vacuumed reads the same in delta-rs from the checkpoint alone and after the
  vacuum, which deletes exactly what delta-rs' own vacuum would, leaving the live files.

Usage: lake_duckdb.py TARGET_DIR/debug/tidemark   (tidemark-export beside it)
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import datafusion
import deltalake
import duckdb
import pyarrow.parquet as pq

DAY = 86_400_000
MIN = 60_000
BASE = 1_735_689_600_000  # 2025-01-01T00:00:00Z
HOSTS = 6
STEP = 5 * MIN
ROWS_PER_DAY = HOSTS * (DAY // STEP)
ROW_GROUP_ROWS = 500
FAILED = []
PASSED = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    (PASSED if cond else FAILED).append(what)


def run(args, **kw):
    out = subprocess.run(args, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def doc(host, ts):
    k = (ts - BASE) // MIN
    return {
        "@timestamp": ts,
        "host": f"h{host}",
        "region": "eu" if host % 2 == 0 else "us",
        "cpu": ((k * 7 + host) % 101) / 10.0 + 0.001 * host,
        "bytes": k * 1000 + host,
    }


def agg(tidemark, idx, metric, interval="1d", raw=True):
    """(tsid hex, bucket start) -> (count, min, max, sum) from `tidemark agg` (`--raw`:
    raw rows only; else rollups where they answer, as `read.rollup_rows` shows)."""
    out = run([tidemark, "agg", idx, "--metric", metric, "--interval", interval]
              + (["--raw"] if raw else [])
              + ["--from", str(BASE), "--to", str(BASE + 3 * DAY)])
    res = json.loads(out.stdout)
    if not raw:
        read = res.get("read", {})
        check(read.get("rollup_rows", 0) > 0 and read.get("raw_rows", 1) == 0,
              f"tidemark agg {metric} --interval {interval} is answered from rollups ({read})")
    stats = {}
    for s in res["series"]:
        for b in s["buckets"]:
            if b["count"] > 0:
                stats[(s["_tsid"], b["key"])] = (b["count"], b["min"], b["max"], b["sum"])
    return stats


PER_SERIES = """
SELECT lower(hex(_tsid)) AS tsid,
       CAST(floor(epoch_ms("@timestamp") / {day}) * {day} AS BIGINT) AS day,
       count({m}) AS n, min({m}) AS lo, max({m}) AS hi, sum({m}) AS total
FROM lake WHERE {m} IS NOT NULL GROUP BY 1, 2
"""

PER_SERIES_DF = """
SELECT lower(encode(_tsid, 'hex')) AS tsid,
       CAST(floor(CAST(to_unixtime("@timestamp") AS DOUBLE) * 1000 / {day}) * {day} AS BIGINT) AS day,
       count({m}) AS n, min({m}) AS lo, max({m}) AS hi, sum({m}) AS total
FROM lake WHERE {m} IS NOT NULL GROUP BY 1, 2
"""


def compare(engine, rows, expected):
    got = {(r[0], int(r[1])): (int(r[2]), float(r[3]), float(r[4]), float(r[5])) for r in rows}
    check(set(got) == set(expected), f"{engine}: the same (series, day) groups ({len(got)} vs {len(expected)})")
    bad = []
    for k, (n, lo, hi, total) in expected.items():
        g = got.get(k)
        if g is None or g[0] != n or g[1] != lo or g[2] != hi or abs(g[3] - total) > 1e-9 * max(abs(total), 1.0):
            bad.append((k, g, (n, lo, hi, total)))
    check(not bad, f"{engine}: per-series count/min/max exact, sums within 1e-9 {bad[:2]}")


def absent_ids_inside_row_groups(files, how_many):
    """Absent `_id`s (a present id's timestamp + 1 minute: points are 5 minutes apart),
    each strictly inside its row group's [min, max] `_id` statistics, so that only the
    bloom filter can skip the row group."""
    out = []
    not_delta = []
    for f in files:
        meta = pq.ParquetFile(f).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        col = names.index("_id")
        table = pq.read_table(f, columns=["_id"])
        ids = table.column("_id").to_pylist()
        start = 0
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            st = rg.column(col).statistics
            if "DELTA_BYTE_ARRAY" not in (rg.column(col).encodings or ()):
                not_delta.append(f"{os.path.basename(f)} row group {g}")
            group_ids = set(ids[start:start + rg.num_rows])
            for i in range(start + 10, start + rg.num_rows - 10, max(rg.num_rows // 8, 1)):
                raw = ids[i]
                ts = int.from_bytes(raw[20:], "big") ^ (1 << 63)
                cand = raw[:20] + ((ts + MIN) ^ (1 << 63)).to_bytes(8, "big")
                if st.min < cand < st.max and cand not in group_ids:
                    out.append((cand, raw))
            start += rg.num_rows
    check(not not_delta, f"_id is DELTA_BYTE_ARRAY in every row group of every file {not_delta[:3]}")
    return out[:how_many]


def duckdb_row_groups(con, sql, prof):
    con.execute("SET enable_profiling='json'")
    con.execute(f"SET profiling_output='{prof}'")
    n = con.sql(sql).fetchall()[0][0]
    con.execute("RESET enable_profiling")
    with open(prof) as f:
        q = json.load(f)["query"]
    return n, q["total_row_groups_scanned"], q["total_row_groups_to_scan"]


def sorted_rows(table):
    """A Delta table's rows as delta-rs reads them, in `_id` order, as Python values."""
    t = table.to_pyarrow_table()
    return t.sort_by("_id").to_pylist()


def checkpoints_and_vacuum(tidemark, tmp, idx):
    """A lake exported with a checkpoint every 2 commits, a late write's re-export and a
    vacuum: delta-rs reads the same rows from the checkpoint (also with the JSON commits
    before it gone), and after the vacuum, which deletes exactly the files delta-rs'
    own vacuum (dry run) names, leaving only the live files."""
    lake = os.path.join(tmp, "lake-checkpoints")
    log = os.path.join(lake, "_delta_log")
    rep = json.loads(run([tidemark, "export", "--index", idx, "--to", lake,
                          "--checkpoint-interval", "2", "--json"]).stdout)
    raw = [p for p in rep["partitions"] if p["rollup_ms"] is None]
    check([p["checkpoint"] for p in raw] == [False, True, False],
          f"checkpoint after the second commit ({[p['checkpoint'] for p in raw]})")
    with open(os.path.join(log, "_last_checkpoint")) as f:
        last = json.load(f)
    check(last["version"] == 1 and os.path.isfile(os.path.join(log, f"{1:020}.checkpoint.parquet")),
          f"_last_checkpoint names version 1 ({last})")
    # A late point into the second day; ingest's maintenance re-seals the partition.
    late = os.path.join(tmp, "late.ndjson")
    with open(late, "w") as f:
        f.write(json.dumps(doc(0, BASE + DAY + 2 * MIN)) + "\n")
    run([tidemark, "ingest", idx, late])
    rep = json.loads(run([tidemark, "export", "--index", idx, "--to", lake,
                          "--checkpoint-interval", "2", "--json"]).stdout)
    redone = [p for p in rep["partitions"] if p["rollup_ms"] is None and p["version"] is not None]
    check(len(redone) == 1 and redone[0]["version"] == 3 and redone[0]["checkpoint"]
          and redone[0]["replaced"] > 0,
          "the late write's re-export is version 3, replaces the day's files, checkpoints "
          f"({[(p['version'], p['replaced'], p['checkpoint']) for p in redone]})")
    dt = deltalake.DeltaTable(lake)
    before = sorted_rows(dt)
    check(dt.version() == 3 and len(before) == 3 * ROWS_PER_DAY + 1,
          f"delta-rs: version 3, {len(before)} rows with the late one")
    # delta-rs from the checkpoint alone: a copy without the JSON commits it covers.
    alone = os.path.join(tmp, "lake-checkpoint-only")
    shutil.copytree(lake, alone)
    for v in range(4):
        os.remove(os.path.join(alone, "_delta_log", f"{v:020}.json"))
    check(sorted_rows(deltalake.DeltaTable(alone)) == before,
          "delta-rs reads the same rows from the checkpoint without the commits before it")
    would = {os.path.basename(p) for p in
             deltalake.DeltaTable(lake).vacuum(retention_hours=0, enforce_retention_duration=False,
                                               dry_run=True)}
    rep = json.loads(run([tidemark, "export", "--index", idx, "--to", lake,
                          "--vacuum", "1ms", "--json"]).stdout)
    raw_vacuum = next(v for v in rep["vacuum"] if v["table"] == ".")
    deleted = {os.path.basename(p) for p in raw_vacuum["deleted"]}
    check(deleted == would and len(deleted) == redone[0]["replaced"],
          f"vacuum deletes the {len(deleted)} replaced files, as delta-rs' vacuum would ({len(would)})")
    check(not any(os.path.exists(os.path.join(lake, p)) for p in raw_vacuum["deleted"]),
          "the vacuumed files are gone")
    dt = deltalake.DeltaTable(lake)
    check(sorted_rows(dt) == before, "delta-rs reads the same rows after the vacuum")
    on_disk = set()
    for root, dirs, names in os.walk(lake):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        on_disk |= {os.path.relpath(os.path.join(root, n), lake) for n in names}
    live = {os.path.relpath(u.removeprefix("file://"), lake) for u in dt.file_uris()}
    check(on_disk == live, f"after the vacuum the table's directories hold its live files only "
                           f"({len(on_disk)} files, {len(live)} live)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tidemark = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="tidemark-lake-")
    idx, lake = os.path.join(tmp, "idx"), os.path.join(tmp, "lake")
    mapping = os.path.join(tmp, "mapping.json")
    with open(mapping, "w") as f:
        json.dump({"mappings": {"properties": {
            "host": {"type": "keyword", "time_series_dimension": True},
            "region": {"type": "keyword", "time_series_dimension": True},
            "cpu": {"type": "double", "time_series_metric": "gauge"},
            "bytes": {"type": "long", "time_series_metric": "counter"}}}}, f)
    data = os.path.join(tmp, "docs.ndjson")
    with open(data, "w") as f:
        for d in range(3):
            for h in range(HOSTS):
                for t in range(BASE + d * DAY, BASE + (d + 1) * DAY, STEP):
                    f.write(json.dumps(doc(h, t)) + "\n")
        # A point on the fourth day: the first three are past the seal grace.
        f.write(json.dumps(doc(0, BASE + 3 * DAY + 2 * 3_600_000)) + "\n")
    run([tidemark, "create", idx, "--mapping", mapping, "--partition", "1d", "--rollups", "1h"])
    run([tidemark, "ingest", idx, data])
    parts = [json.loads(l) for l in run([tidemark, "partitions", idx, "--json"]).stdout.splitlines()]
    sealed = [p for p in parts if p.get("sealed")]
    check(len(sealed) == 3, f"three sealed partitions ({len(sealed)})")

    # A bad invocation is an error with a message, not a panic.
    bad = subprocess.run([tidemark, "export", "--index", os.path.join(tmp, "nope"), "--to", lake],
                         capture_output=True, text=True)
    check(bad.returncode == 2 and "error:" in bad.stderr and "panicked" not in bad.stderr,
          f"export of a missing index fails cleanly ({bad.returncode}: {bad.stderr.strip()[:120]})")

    first = run([tidemark, "export", "--index", idx, "--to", lake,
                 "--row-group-rows", str(ROW_GROUP_ROWS), "--json"])
    rep = json.loads(first.stdout)
    raw_rows = sum(p["rows"] for p in rep["partitions"] if p["rollup_ms"] is None)
    check(rep["committed"] == 6 and raw_rows == 3 * ROWS_PER_DAY,
          f"export: 3 partitions to the raw and the 1h table, {3 * ROWS_PER_DAY} raw rows ({rep['committed']}, {raw_rows})")
    again = json.loads(run([tidemark, "export", "--index", idx, "--to", lake, "--json"]).stdout)
    check(again["committed"] == 0 and again["skipped"] == 6 and again["rows"] == 0,
          "export again: every partition skipped (exactly once)")
    text = run([tidemark, "export", "--index", idx, "--to", lake]).stdout
    check("skipped" in text and "rows/s" in text, "the text report names skips and speed")

    dt = deltalake.DeltaTable(lake)
    files = sorted(dt.file_uris())
    report_files = [f for p in rep["partitions"] if p["rollup_ms"] is None for f in p["files"]]
    check(dt.version() == 2 and len(files) == len(report_files) == 3,
          f"delta-rs: version 2, one file per day ({dt.version()}, {len(files)}, report {len(report_files)})")
    check(dt.metadata().partition_columns == ["partition"],
          f"delta-rs: partitioned by partition ({dt.metadata().partition_columns})")
    check(all(("/" + f["path"]).startswith(f"/partition={int(p['start_ms'])}/part-")
              for p in rep["partitions"] for f in p["files"]), "file paths are partition=…/part-…")
    check(dt.to_pyarrow_table().num_rows == 3 * ROWS_PER_DAY, "delta-rs reads every row")
    txns = set()
    for v in range(3):
        with open(os.path.join(lake, "_delta_log", f"{v:020}.json")) as f:
            for line in f:
                a = json.loads(line)
                if "txn" in a:
                    txns.add(a["txn"]["appId"])
    check(len(txns) == 3, "one txn app id per partition")

    expected = {m: agg(tidemark, idx, m) for m in ("cpu", "bytes")}
    # What Tidemark says per shard: the report's files, and the series' counts (every row
    # has cpu) summed by the shard computed from each tsid: Tsid::shard(256) is byte 4.
    by_report = {}
    for f in report_files:
        for shard, n in f["shards"].items():
            by_report[int(shard)] = by_report.get(int(shard), 0) + n
    by_agg = {}
    for (tsid, _day), (n, _lo, _hi, _sum) in expected["cpu"].items():
        shard = bytes.fromhex(tsid)[4]
        by_agg[shard] = by_agg.get(shard, 0) + n
    check(by_report == by_agg and len(by_report) > 1,
          f"per shard: the export report equals tidemark agg by tsid byte 4 ({len(by_report)} shards)")
    delta_counts = dt.to_pyarrow_table(columns=["shard"]).column("shard").value_counts().to_pylist()
    delta_counts = {int(c["values"]): int(c["counts"]) for c in delta_counts}
    check(delta_counts == by_report, f"delta-rs: per-shard rows equal the report's {delta_counts}")
    file_list = "[" + ", ".join(f"'{f}'" for f in files) + "]"

    # DuckDB.
    con = duckdb.connect()
    con.execute(f"CREATE VIEW lake AS SELECT * FROM read_parquet({file_list})")
    n, distinct = con.sql("SELECT count(*), count(DISTINCT _id) FROM lake").fetchall()[0]
    check(n == 3 * ROWS_PER_DAY and distinct == n, f"duckdb: {n} rows, {distinct} distinct _id")
    # The partition columns come from the Hive-style paths.
    per_shard = dict(con.sql("SELECT shard, count(*) FROM lake GROUP BY shard").fetchall())
    check(per_shard == by_report, f"duckdb: per-shard rows (the shard column) equal the report's")
    shard_of = con.sql("SELECT count(*) FROM lake WHERE shard <> "
                       "CAST(('0x' || substr(hex(_tsid), 9, 2)) AS INTEGER)").fetchall()[0][0]
    check(shard_of == 0, f"duckdb: every row's shard is byte 4 of its _tsid ({shard_of} are not)")
    # Rows are ordered by shard within a file, and a row group holds one range of 16
    # shards: a query on one range reads its row groups only.
    for f in files:
        shards = pq.read_table(f, columns=["shard"]).column("shard").to_pylist()
        check(shards == sorted(shards), f"rows ordered by shard in {os.path.basename(f)}")
        meta = pq.ParquetFile(f).metadata
        col = [meta.schema.column(i).name for i in range(meta.num_columns)].index("shard")
        spans = [(meta.row_group(g).column(col).statistics.min >> 4,
                  meta.row_group(g).column(col).statistics.max >> 4) for g in range(meta.num_row_groups)]
        check(all(a == b for a, b in spans), f"no row group spans two shard ranges in {os.path.basename(f)}")
    one_range = min(by_report) >> 4
    n, scanned, total = duckdb_row_groups(
        con, f"SELECT count(*) FROM lake WHERE shard >= {one_range * 16} AND shard < {one_range * 16 + 16}",
        os.path.join(tmp, "profile-shard.json"))
    expect = sum(v for k, v in by_report.items() if k >> 4 == one_range)
    check(n == expect and 0 < scanned < total,
          f"duckdb: shard range {one_range}: {n} rows, {scanned} of {total} row groups scanned")
    days = con.sql(f"SELECT count(*) FROM lake WHERE partition <> "
                   f"CAST(floor(epoch_ms(\"@timestamp\") / {DAY}) * {DAY} AS BIGINT)").fetchall()[0][0]
    check(days == 0, f"duckdb: every row lies in its partition=… ({days} do not)")
    for m in ("cpu", "bytes"):
        compare(f"duckdb {m}", con.sql(PER_SERIES.format(day=DAY, m=m)).fetchall(), expected[m])
    kv = pq.ParquetFile(files[0]).metadata.metadata
    check(b"tidemark.mapping" in kv and b"tidemark.version" in kv, "file metadata: mapping and version")

    absent = absent_ids_inside_row_groups(files, 24)
    check(len(absent) >= 20, f"{len(absent)} absent ids inside row groups' _id ranges")
    prof = os.path.join(tmp, "profile.json")
    present = absent[0][1]
    n, scanned, total = duckdb_row_groups(con, f"SELECT count(*) FROM lake WHERE _id = from_hex('{present.hex()}')", prof)
    check(n == 1 and scanned == 1, f"duckdb: a present _id finds one row, scanning {scanned} of {total} row groups")
    pruned = 0
    for cand, _ in absent:
        n, scanned, total = duckdb_row_groups(con, f"SELECT count(*) FROM lake WHERE _id = from_hex('{cand.hex()}')", prof)
        if n != 0:
            check(False, f"duckdb: the absent _id {cand.hex()} finds {n} rows")
        pruned += scanned == 0
    check(pruned >= len(absent) - 2, f"duckdb: {pruned} of {len(absent)} absent ids skip every row group (bloom filter)")

    # The 1h rollup table (delta-rs lists its files), folded per series and day.
    rollup_dt = deltalake.DeltaTable(os.path.join(lake, "_rollups", "1h"))
    rollup_files = sorted(rollup_dt.file_uris())
    check(len(rollup_files) == len(files), f"delta-rs: the 1h rollup table has a file per day ({len(rollup_files)})")
    rl = "[" + ", ".join(f"'{f}'" for f in rollup_files) + "]"
    con.execute(f"CREATE VIEW rollup AS SELECT * FROM read_parquet({rl})")
    hourly = {m: agg(tidemark, idx, m, interval="1h", raw=False) for m in ("cpu", "bytes")}
    for m in ("cpu", "bytes"):
        rows = con.sql(f"""
            SELECT lower(hex(_tsid)), CAST(floor(epoch_ms("@timestamp") / {DAY}) * {DAY} AS BIGINT),
                   sum("{m}.count"), min("{m}.min"), max("{m}.max"), sum("{m}.sum")
            FROM rollup WHERE "{m}.count" > 0 GROUP BY 1, 2""").fetchall()
        compare(f"duckdb 1h rollup table {m}, folded per day, vs raw rows", rows, expected[m])
        # Per series and hour: the table's rows are Tidemark's own rollup answers.
        rows = con.sql(f"""
            SELECT lower(hex(_tsid)), epoch_ms("@timestamp"),
                   "{m}.count", "{m}.min", "{m}.max", "{m}.sum"
            FROM rollup WHERE "{m}.count" > 0""").fetchall()
        compare(f"duckdb 1h rollup table {m} vs tidemark agg --interval 1h", rows, hourly[m])

    # DataFusion.
    ctx = datafusion.SessionContext()
    for i, f in enumerate(files):
        ctx.register_parquet(f"f{i}", f)
    ctx.sql("CREATE VIEW lake AS " + " UNION ALL ".join(f"SELECT * FROM f{i}" for i in range(len(files))))
    row = ctx.sql("SELECT count(*) AS n, count(DISTINCT _id) AS d FROM lake").to_pylist()[0]
    check(row["n"] == 3 * ROWS_PER_DAY and row["d"] == row["n"], f"datafusion: {row['n']} rows, {row['d']} distinct _id")
    # The Delta table as delta-rs lists it (partition values from the log).
    ctx.register_dataset("delta", dt.to_pyarrow_dataset())
    rows = ctx.sql("SELECT shard, count(*) AS n FROM delta GROUP BY shard").to_pylist()
    df_shards = {int(r["shard"]): int(r["n"]) for r in rows}
    check(df_shards == by_report, f"datafusion over delta-rs: per-shard rows equal the report's")
    for m in ("cpu", "bytes"):
        rows = [tuple(r.values()) for r in ctx.sql(PER_SERIES_DF.format(day=DAY, m=m)).to_pylist()]
        compare(f"datafusion {m}", rows, expected[m])
    # The rollup table's files registered one by one: through delta-rs' pyarrow dataset
    # a filter on a dotted column name ("cpu.count") is pushed down as a nested field
    # and matches nothing (pyarrow 26 / DataFusion 55).
    for i, f in enumerate(rollup_files):
        ctx.register_parquet(f"r{i}", f)
    ctx.sql("CREATE VIEW rollup AS " + " UNION ALL ".join(f"SELECT * FROM r{i}" for i in range(len(rollup_files))))
    for m in ("cpu", "bytes"):
        rows = [tuple(r.values()) for r in ctx.sql(f"""
            SELECT lower(encode(_tsid, 'hex')) AS tsid,
                   CAST(CAST(to_unixtime("@timestamp") AS DOUBLE) * 1000 AS BIGINT) AS hour,
                   "{m}.count" AS n, "{m}.min" AS lo, "{m}.max" AS hi, "{m}.sum" AS total
            FROM rollup WHERE "{m}.count" > 0""").to_pylist()]
        compare(f"datafusion 1h rollup table {m} vs tidemark agg --interval 1h", rows, hourly[m])
    one = ctx.sql(f"SELECT count(*) AS n FROM lake WHERE _id = X'{present.hex()}'").to_pylist()[0]["n"]
    check(one == 1, "datafusion: a present _id finds one row")
    bloom_pruned = 0
    for cand, raw in absent:
        # The file holding the candidate's neighbour: one scan, its row groups.
        fi = next(i for i, f in enumerate(files) if pq.read_table(f, columns=["_id"], filters=[("_id", "=", raw)]).num_rows)
        plan = ctx.sql(f"EXPLAIN ANALYZE SELECT count(*) FROM f{fi} WHERE _id = X'{cand.hex()}'").to_pylist()
        text = "\n".join(str(v) for r in plan for v in r.values())
        m = re.search(r"row_groups_pruned_bloom_filter=(\d+) total \u2192 (\d+) matched", text) \
            or re.search(r"row_groups_pruned_bloom_filter=(\d+)", text)
        if m is None:
            check(False, f"datafusion: no row_groups_pruned_bloom_filter in EXPLAIN ANALYZE:\n{text[:2000]}")
            break
        if m.lastindex == 2:
            bloom_pruned += int(m.group(1)) > 0 and int(m.group(2)) == 0
        else:
            bloom_pruned += int(m.group(1)) > 0
    check(bloom_pruned >= len(absent) - 2,
          f"datafusion: the bloom filter prunes the row group of {bloom_pruned} of {len(absent)} absent ids")

    checkpoints_and_vacuum(tidemark, tmp, idx)

    print(f"lake: {len(PASSED)} passed, {len(FAILED)} failed")
    if FAILED:
        print(f"(the index and lakes are left in {tmp})")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
