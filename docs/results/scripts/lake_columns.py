"""Bytes per row of each column of the lakes' Parquet files, their `_id` bloom filters and
the rest (footer, page index), from the files' footers (docs/results/lake.md).
Usage: lake_columns.py LAKE_DIR...   (every partition=*/**/*.parquet: run it on a fresh export)"""
import collections, glob, os, sys
import pyarrow.parquet as pq
for lake in sys.argv[1:]:
    files = sorted(glob.glob(f"{lake}/partition=*/**/*.parquet", recursive=True))
    rows = total = bloom = 0
    col = collections.Counter()
    for f in files:
        md = pq.ParquetFile(f).metadata
        rows += md.num_rows
        total += os.path.getsize(f)
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                cc = rg.column(c)
                col[cc.path_in_schema] += cc.total_compressed_size
                bloom += cc.to_dict().get("bloom_filter_length") or 0
    print(f"{lake}: {rows} rows, {total} bytes, {total / rows:.2f} B/row; _id bloom filters {bloom / rows:.3f} B/row; footer, page index {(total - sum(col.values()) - bloom) / rows:.3f} B/row")
    for k, v in col.most_common():
        print(f"  {k:36} {v / rows:.3f}")
