"""`_id` lookups in a lake with DuckDB (docs/results/lake.md): row groups scanned for 50
present ids of the second live file and for 50 absent ids inside a row group's [min, max]
(a present id's timestamp + 1 ms). Usage: lake_lookup.py LAKE_DIR"""
import json, os, sys, tempfile, time
import duckdb, deltalake, pyarrow.parquet as pq
lake = sys.argv[1]
files = sorted(deltalake.DeltaTable(lake).file_uris())
prof = os.path.join(tempfile.mkdtemp(), "profile.json")
con = duckdb.connect()
con.execute("CREATE VIEW lake AS SELECT * FROM read_parquet([" + ",".join(f"'{f}'" for f in files) + "])")
ids = pq.read_table(files[1], columns=["_id"]).column("_id").to_pylist()
def q(idb):
    con.execute("SET enable_profiling='json'"); con.execute(f"SET profiling_output='{prof}'")
    t = time.perf_counter(); n = con.sql(f"SELECT count(*) FROM lake WHERE _id = from_hex('{idb.hex()}')").fetchall()[0][0]; dt = time.perf_counter() - t
    con.execute("RESET enable_profiling")
    with open(prof) as f:
        p = json.load(f)["query"]
    return n, p["total_row_groups_scanned"], p["total_row_groups_to_scan"], dt
present = [ids[i] for i in range(1000, len(ids), len(ids) // 50)][:50]
absent = []
for raw in present:
    ts = int.from_bytes(raw[20:], "big") ^ (1 << 63)
    absent.append(raw[:20] + ((ts + 1) ^ (1 << 63)).to_bytes(8, "big"))
for name, batch in (("present", present), ("absent", absent)):
    r = [q(x) for x in batch]
    print(f"{name}: {len(r)} lookups, rows found {sum(x[0] for x in r)}, row groups scanned {sum(x[1] for x in r)} of {sum(x[2] for x in r)}, median {sorted(x[3] for x in r)[len(r)//2]*1000:.1f} ms")
