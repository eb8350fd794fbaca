//! The export through the public API: a small partitioned index (three sealed days, a
//! gauge, a counter, a sparse gauge and a keyword extra) exported to a lake and read back
//! with arrow-rs's Parquet reader: rows, distinct `_id`s, per-series count/min/max/sum
//! equal to the index's own aggregation, the `_id` bloom filter of every row group (no
//! false negative, few false positives on absent ids inside the row group's range),
//! bit-identical to arrow-rs's filter for the same keys and size; exactly-once
//! re-exports, and a late write's re-seal replacing its partition's file in one commit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Encoding;
use parquet::bloom_filter::Sbbf;
use parquet::file::properties::ReaderProperties;
use parquet::file::reader::FileReader;
use parquet::file::serialized_reader::{ReadOptionsBuilder, SerializedFileReader};
use serde_json::{Value, json};
use tidemark::dedup::{EngineConfig, PartitionConfig};
use tidemark::tsid::SyntheticId;
use tidemark::{AggQuery, BulkItem, Index, Mapping};
use tidemark_bloom::{Hash64, SplitBlockBloomFilter};
use tidemark_lake::{DeltaTable, ExportOptions, WriteOptions, export, shard_of};

const MIN: i64 = 60_000;
const DAY: i64 = 24 * 60 * MIN;
const HOSTS: u32 = 5;

fn mapping() -> Mapping {
    Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "rack": {"type": "long", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"},
        "temp": {"type": "double", "time_series_metric": "gauge"},
        "bytes": {"type": "long", "time_series_metric": "counter"},
        "status": {"type": "keyword"}}}}))
    .unwrap()
}

fn doc(host: u32, ts: i64) -> Value {
    let k = ts / MIN;
    let mut d = json!({
        "@timestamp": ts,
        "host": format!("h{host}"),
        "rack": i64::from(host % 2),
        "cpu": ((k * 7 + i64::from(host)) % 101) as f64 / 10.0 + 0.01,
        "bytes": k * 1000 + i64::from(host),
        "status": if k % 3 == 0 { "ok" } else { "degraded" },
    });
    // A sparse metric: every fourth row only.
    if k % 4 == 0 {
        d["temp"] = json!(20.0 + (k % 13) as f64 / 4.0);
    }
    d
}

/// Three sealed days of `HOSTS` series, a row every 5 minutes.
fn sealed_index(dir: &Path) -> Index {
    sealed_index_with_rollups(dir, Vec::new())
}

/// As [`sealed_index`], with rollups at these resolutions.
fn sealed_index_with_rollups(dir: &Path, rollups: Vec<i64>) -> Index {
    let mut index = Index::create_partitioned(
        dir,
        mapping(),
        EngineConfig::new().with_refresh_rows(1000),
        PartitionConfig::new()
            .with_width_ms(DAY)
            .with_rollups(rollups),
    )
    .unwrap();
    let mut docs = Vec::new();
    for day in 0..3 {
        for h in 0..HOSTS {
            for m in (0..DAY / MIN).step_by(5) {
                docs.push(BulkItem::create(doc(h, day * DAY + m * MIN)));
            }
        }
    }
    let out = index.bulk(docs).unwrap();
    assert!(out.iter().all(|o| o.http_status() == 201));
    for day in 0..3 {
        index.seal(day * DAY).unwrap();
    }
    index
}

fn options(row_group_rows: usize) -> ExportOptions {
    ExportOptions {
        write: WriteOptions {
            row_group_rows,
            ..WriteOptions::default()
        },
        ..ExportOptions::default()
    }
}

fn live_files(lake: &Path) -> Vec<PathBuf> {
    DeltaTable::local(lake)
        .unwrap()
        .state()
        .unwrap()
        .files
        .keys()
        .map(|p| lake.join(p))
        .collect()
}

/// The value of the Hive-style `name=value` component of a data file's path.
fn path_value(path: &Path, name: &str) -> i64 {
    path.components()
        .filter_map(|c| c.as_os_str().to_str())
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{} has no {name}=", path.display()))
        .parse()
        .unwrap()
}

fn read_batches(path: &Path) -> Vec<RecordBatch> {
    ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Per (tsid, day): count, min, max and sum of `metric` read from the lake's files.
type Stats = BTreeMap<(Vec<u8>, i64), (u64, f64, f64, f64)>;

fn lake_stats(files: &[PathBuf], metric: &str) -> (u64, BTreeSet<Vec<u8>>, Stats) {
    let mut rows = 0;
    let mut ids = BTreeSet::new();
    let mut stats = Stats::new();
    for f in files {
        for b in read_batches(f) {
            rows += b.num_rows() as u64;
            let ts = b
                .column_by_name("@timestamp")
                .unwrap()
                .as_primitive::<TimestampMillisecondType>();
            let tsid = b.column_by_name("_tsid").unwrap().as_binary::<i32>();
            let id = b.column_by_name("_id").unwrap().as_binary::<i32>();
            // `shard` is in the file; `partition` is a partition column: in the path.
            let shard = b
                .column_by_name("shard")
                .unwrap()
                .as_primitive::<Int32Type>();
            assert!(b.column_by_name("partition").is_none());
            let m = b.column_by_name(metric).unwrap();
            for r in 0..b.num_rows() {
                // `_id` is `_tsid` ‖ timestamp, and `shard` is the tsid's shard.
                let t = tidemark::tsid::Tsid::try_from_slice(tsid.value(r)).unwrap();
                let sid = SyntheticId::new(t, ts.value(r));
                assert_eq!(id.value(r), sid.to_bytes());
                assert_eq!(shard.value(r), shard_of(&t) as i32);
                assert!(ids.insert(id.value(r).to_vec()), "an _id twice");
                if m.is_null(r) {
                    continue;
                }
                let v = match m.data_type() {
                    arrow_schema::DataType::Float64 => m.as_primitive::<Float64Type>().value(r),
                    _ => m.as_primitive::<Int64Type>().value(r) as f64,
                };
                let e = stats
                    .entry((tsid.value(r).to_vec(), ts.value(r).div_euclid(DAY) * DAY))
                    .or_insert((0, f64::INFINITY, f64::NEG_INFINITY, 0.0));
                e.0 += 1;
                e.1 = e.1.min(v);
                e.2 = e.2.max(v);
                e.3 += v;
            }
        }
    }
    (rows, ids, stats)
}

fn index_stats(index: &Index, metric: &str) -> Stats {
    let result = index
        .aggregate(&AggQuery {
            metric: metric.to_owned(),
            interval_millis: DAY,
            raw_only: true,
            ..AggQuery::default()
        })
        .unwrap();
    let mut out = Stats::new();
    for s in &result.series {
        for b in &s.buckets {
            if b.count > 0 {
                out.insert(
                    (s.tsid.as_bytes().to_vec(), b.key),
                    (b.count, b.min, b.max, b.sum),
                );
            }
        }
    }
    out
}

fn assert_same_stats(lake: &Stats, index: &Stats) {
    assert_eq!(lake.len(), index.len());
    for ((k1, a), (k2, b)) in lake.iter().zip(index) {
        assert_eq!(k1, k2);
        let (&(c1, min1, max1, sum1), &(c2, min2, max2, sum2)) = (a, b);
        assert_eq!((c1, min1, max1), (c2, min2, max2), "series/day {k1:?}");
        assert!(
            (sum1 - sum2).abs() <= 1e-9 * sum2.abs().max(1.0),
            "{sum1} vs {sum2}"
        );
    }
}

#[test]
fn exported_rows_equal_the_index_per_series() {
    let dir = tempfile::tempdir().unwrap();
    let index = sealed_index(&dir.path().join("index"));
    let lake = dir.path().join("lake");
    let report = export(&index, &lake, &options(500), &mut |_| {}).unwrap();
    let expected_rows = 3 * u64::from(HOSTS) * (DAY / MIN / 5) as u64;
    assert_eq!(report.rows(), expected_rows);
    // One file per partition: small partitions are not split.
    let shards = index_shards(&index);
    assert!(shards.len() > 1, "the test needs series in several shards");
    assert_eq!((report.files(), report.committed()), (3, 3));
    let files = live_files(&lake);
    assert_eq!(files.len(), 3);
    for metric in ["cpu", "bytes", "temp"] {
        let (rows, ids, stats) = lake_stats(&files, metric);
        assert_eq!(rows, expected_rows);
        assert_eq!(ids.len() as u64, expected_rows);
        assert_same_stats(&stats, &index_stats(&index, metric));
    }
}

/// The virtual shards of the index's series (every series has `cpu`).
fn index_shards(index: &Index) -> BTreeSet<u32> {
    let result = index
        .aggregate(&AggQuery {
            metric: "cpu".to_owned(),
            interval_millis: DAY,
            raw_only: true,
            ..AggQuery::default()
        })
        .unwrap();
    result.series.iter().map(|s| shard_of(&s.tsid)).collect()
}

/// Per live file of the lake: its rows' (shard, tsid, timestamp) in file order, and
/// per row group its shard statistics (min, max) and rows.
type FileLayout = BTreeMap<String, (Vec<(i32, Vec<u8>, i64)>, Vec<(i32, i32, i64)>)>;

fn layout(lake: &Path) -> FileLayout {
    let state = DeltaTable::local(lake).unwrap().state().unwrap();
    let mut out = FileLayout::new();
    for (rel, live) in &state.files {
        let path = lake.join(rel);
        let start = path_value(&path, "partition");
        // The path and the add action's partitionValues agree.
        assert_eq!(live.partition_values["partition"], start.to_string());
        assert_eq!(live.partition_values.len(), 1);
        let mut rows = Vec::new();
        for b in read_batches(&path) {
            let ts = b
                .column_by_name("@timestamp")
                .unwrap()
                .as_primitive::<TimestampMillisecondType>();
            let tsid = b.column_by_name("_tsid").unwrap().as_binary::<i32>();
            let shard = b
                .column_by_name("shard")
                .unwrap()
                .as_primitive::<Int32Type>();
            for r in 0..b.num_rows() {
                assert_eq!(ts.value(r).div_euclid(DAY) * DAY, start);
                rows.push((shard.value(r), tsid.value(r).to_vec(), ts.value(r)));
            }
        }
        let reader = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        let meta = reader.metadata();
        let col = meta
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.name() == "shard")
            .unwrap();
        let groups = (0..meta.num_row_groups())
            .map(|g| {
                let rg = meta.row_group(g);
                match rg.column(col).statistics().unwrap() {
                    parquet::file::statistics::Statistics::Int32(s) => {
                        (*s.min_opt().unwrap(), *s.max_opt().unwrap(), rg.num_rows())
                    }
                    other => panic!("shard statistics {other:?}"),
                }
            })
            .collect();
        // The add action's statistics carry the file's shard range.
        let stats: Value = serde_json::from_str(live.stats.as_deref().unwrap()).unwrap();
        let (lo, hi) = (rows.first().unwrap().0, rows.last().unwrap().0);
        assert_eq!(
            (&stats["minValues"]["shard"], &stats["maxValues"]["shard"]),
            (&json!(lo), &json!(hi)),
            "{rel}"
        );
        out.insert(rel.clone(), (rows, groups));
    }
    out
}

#[test]
fn a_partition_is_one_file_ordered_by_shard_then_segment_order() {
    let dir = tempfile::tempdir().unwrap();
    let index = sealed_index(&dir.path().join("index"));
    let lake = dir.path().join("lake");
    export(&index, &lake, &options(100), &mut |_| {}).unwrap();
    let state = DeltaTable::local(&lake).unwrap().state().unwrap();
    assert_eq!(state.partition_columns, ["partition"]);
    let files = layout(&lake);
    assert_eq!(files.len(), 3);
    let ranges = |s: i32| s >> 4;
    for (rel, (rows, groups)) in &files {
        assert!(rel.ends_with(".parquet") && rel.contains("-s"), "{rel}");
        assert_eq!(rows.len() as u64, u64::from(HOSTS) * 288);
        // (shard, tsid, timestamp) ascending, and the shard is the tsid's.
        assert!(rows.windows(2).all(|w| w[0] < w[1]), "{rel}: out of order");
        for (shard, tsid, _) in rows {
            let t = tidemark::tsid::Tsid::try_from_slice(tsid).unwrap();
            assert_eq!(*shard, shard_of(&t) as i32);
        }
        // Row groups of at most 100 rows, each inside one range of 16 shards, so a
        // reader of some shards prunes the others' row groups by statistics.
        let mut at = 0usize;
        for (lo, hi, n) in groups {
            assert!(*n <= 100 && *n > 0);
            assert_eq!(
                ranges(*lo),
                ranges(*hi),
                "{rel}: a row group spans two ranges"
            );
            let group = &rows[at..at + *n as usize];
            assert_eq!((group[0].0, group[group.len() - 1].0), (*lo, *hi));
            at += *n as usize;
        }
        assert_eq!(at, rows.len());
    }
}

#[test]
fn large_partitions_split_into_files_at_shard_range_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let index = sealed_index(&dir.path().join("index"));
    let lake = dir.path().join("lake");
    // One shard per range and files of at most 600 rows (a series holds 288 a day).
    let mut opts = options(1000);
    opts.write.shard_range_bits = 8;
    opts.write.file_rows = 600;
    let report = export(&index, &lake, &opts, &mut |_| {}).unwrap();
    let shards = index_shards(&index);
    let files = layout(&lake);
    assert_eq!(files.len(), report.files());
    assert!(files.len() > 3, "{}", files.len());
    let mut per_day: BTreeMap<&str, Vec<(i32, i32)>> = BTreeMap::new();
    let mut held: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for (rel, (rows, groups)) in &files {
        let (lo, hi) = (rows[0].0, rows[rows.len() - 1].0);
        // A file holds whole shards: at most 600 rows unless one shard has more.
        assert!(rows.len() <= 600 || lo == hi, "{rel}: {} rows", rows.len());
        assert!(rows.windows(2).all(|w| w[0] < w[1]), "{rel}: out of order");
        assert!(groups.iter().all(|(a, b, _)| a == b), "{rel}: {groups:?}");
        assert!(rel.contains(&format!("-s{lo:03}-{hi:03}-")), "{rel}");
        let day = rel.split('/').next().unwrap();
        per_day.entry(day).or_default().push((lo, hi));
        held.entry(day)
            .or_default()
            .extend(rows.iter().map(|r| r.0 as u32));
    }
    // Per day, the files' shard ranges are disjoint and cover every shard.
    assert_eq!(per_day.len(), 3);
    for (day, ranges) in &mut per_day {
        ranges.sort();
        assert!(ranges.windows(2).all(|w| w[0].1 < w[1].0), "{ranges:?}");
        assert_eq!(held[day], shards);
    }
    // The report's per-file shards and rows say the same.
    let p = &report.partitions[0];
    let rows: u64 = p
        .files
        .iter()
        .flat_map(|f| f.shards.iter().map(|s| s.1))
        .sum();
    assert_eq!(rows, p.rows);
    // The whole lake still equals the index.
    let (rows, ids, stats) = lake_stats(&live_files(&lake), "cpu");
    assert_eq!((rows, ids.len() as u64), (3 * u64::from(HOSTS) * 288, rows));
    assert_same_stats(&stats, &index_stats(&index, "cpu"));
}

#[test]
fn files_carry_types_encodings_metadata_and_id_filters() {
    let dir = tempfile::tempdir().unwrap();
    let index = sealed_index(&dir.path().join("index"));
    let lake = dir.path().join("lake");
    export(&index, &lake, &options(100), &mut |_| {}).unwrap();
    // The largest file (one per partition): several row groups of 100 rows.
    let file = live_files(&lake)
        .into_iter()
        .max_by_key(|f| std::fs::metadata(f).unwrap().len())
        .unwrap();

    let batches = read_batches(&file);
    let schema = batches[0].schema();
    let ty = |n: &str| schema.field_with_name(n).unwrap().data_type().clone();
    use arrow_schema::{DataType, TimeUnit};
    assert!(
        matches!(ty("@timestamp"), DataType::Timestamp(TimeUnit::Millisecond, Some(tz)) if &*tz == "UTC")
    );
    assert!(matches!(ty("host"), DataType::Dictionary(_, v) if *v == DataType::Utf8));
    assert_eq!(ty("rack"), DataType::Int64);
    assert_eq!(ty("cpu"), DataType::Float64);
    assert_eq!(ty("bytes"), DataType::Int64);
    assert!(matches!(ty("status"), DataType::Dictionary(_, v) if *v == DataType::Utf8));
    assert_eq!(ty("_id"), DataType::Binary);
    assert_eq!(ty("_tsid"), DataType::Binary);

    let reader = SerializedFileReader::new_with_options(
        File::open(&file).unwrap(),
        ReadOptionsBuilder::new()
            .with_reader_properties(
                ReaderProperties::builder()
                    .set_read_bloom_filter(true)
                    .build(),
            )
            .with_page_index()
            .build(),
    )
    .unwrap();
    let meta = reader.metadata();
    let kv: BTreeMap<String, Option<String>> = meta
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .iter()
        .map(|k| (k.key.clone(), k.value.clone()))
        .collect();
    assert_eq!(
        kv["tidemark.version"].as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let mapped: Value = serde_json::from_str(kv["tidemark.mapping"].as_deref().unwrap()).unwrap();
    assert_eq!(&mapped, index.mapping().source());

    // Deltas for timestamps and counters, byte-stream split for gauges, dictionaries for
    // dimensions (docs/results/lake.md).
    let encodings = |name: &str| -> Vec<Encoding> {
        let i = meta
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.name() == name)
            .unwrap();
        meta.row_group(0).column(i).encodings().collect()
    };
    assert!(encodings("@timestamp").contains(&Encoding::DELTA_BINARY_PACKED));
    assert!(encodings("bytes").contains(&Encoding::DELTA_BINARY_PACKED));
    assert!(encodings("cpu").contains(&Encoding::BYTE_STREAM_SPLIT));
    assert!(encodings("host").contains(&Encoding::RLE_DICTIONARY));

    let id_col = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.name() == "_id")
        .unwrap();
    let mut absent_hits = 0;
    let mut absent_probes = 0;
    let (_, all_ids, _) = lake_stats(std::slice::from_ref(&file), "cpu");
    for g in 0..meta.num_row_groups() {
        let chunk = meta.row_group(g).column(id_col);
        assert!(chunk.encodings().any(|e| e == Encoding::DELTA_BYTE_ARRAY));
        // The page index: every column chunk has a column index and an offset index.
        for c in meta.row_group(g).columns() {
            assert!(c.column_index_offset().is_some() && c.offset_index_offset().is_some());
        }
        let rg = reader.get_row_group(g).unwrap();
        let bloom: &Sbbf = rg
            .get_column_bloom_filter(id_col)
            .expect("an _id bloom filter");
        let stats = chunk.statistics().unwrap();
        let (lo, hi) = (
            stats.min_bytes_opt().unwrap().to_vec(),
            stats.max_bytes_opt().unwrap().to_vec(),
        );
        // Every id of the row group is in its filter (arrow-rs hashes and probes).
        let mut present = BTreeSet::new();
        let group = ParquetRecordBatchReaderBuilder::try_new(File::open(&file).unwrap())
            .unwrap()
            .with_row_groups(vec![g])
            .build()
            .unwrap();
        for b in group {
            let b = b.unwrap();
            let id = b.column_by_name("_id").unwrap().as_binary::<i32>();
            for r in 0..b.num_rows() {
                let v = id.value(r);
                assert!(v >= lo.as_slice() && v <= hi.as_slice());
                present.insert(v.to_vec());
            }
        }
        assert_eq!(present.len() as i64, meta.row_group(g).num_rows());
        assert!(present.iter().all(|v| bloom.check(v.as_slice())));
        // Absent ids inside the row group's [min, max]: a minute after each stored
        // point (rows are 5 minutes apart), mostly refused by the filter.
        for v in &present {
            let sid = SyntheticId::from_bytes(v).unwrap();
            let absent = SyntheticId::new(sid.tsid(), sid.ts_millis() + MIN).to_bytes();
            if absent.as_slice() < hi.as_slice() && !all_ids.contains(absent.as_slice()) {
                absent_probes += 1;
                absent_hits += usize::from(bloom.check(absent.as_slice()));
            }
        }
    }
    assert!(absent_probes > 150, "{absent_probes}");
    // The filters are sized for 1%: far fewer than 5% of absent ids may pass.
    assert!(
        absent_hits * 20 < absent_probes,
        "{absent_hits} of {absent_probes}"
    );
}

#[test]
fn split_block_filter_is_bit_identical_to_arrow_rs() {
    // Same size (a power of two, which arrow-rs requires) and same keys: same bytes.
    for (bytes, keys) in [(32usize, 10u64), (1024, 500), (8192, 7000)] {
        let mut ours = SplitBlockBloomFilter::with_num_blocks((bytes / 32) as u64)
            .unwrap()
            .with_hasher(Hash64::PARQUET);
        let mut theirs = Sbbf::new_with_num_of_bytes(bytes);
        for k in 0..keys {
            let id = SyntheticId::new(
                tidemark::tsid::Tsid::from_bytes([k as u8; 20]),
                k as i64 * 1000,
            )
            .to_bytes();
            ours.insert(&id);
            theirs.insert(id.as_slice());
        }
        let mut bitset = Vec::new();
        theirs.write_bitset(&mut bitset).unwrap();
        assert_eq!(ours.to_bitset_bytes(), bitset, "{bytes} bytes, {keys} keys");
        // And arrow-rs reads ours back as the same filter.
        let mut spliced = Vec::new();
        Sbbf::new(&ours.to_bitset_bytes())
            .write_bitset(&mut spliced)
            .unwrap();
        assert_eq!(spliced, bitset);
    }
}

#[test]
fn re_exports_are_exactly_once_and_a_late_write_replaces_its_partition() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = sealed_index(&dir.path().join("index"));
    let lake = dir.path().join("lake");
    let first = export(&index, &lake, &options(100_000), &mut |_| {}).unwrap();
    assert_eq!(first.committed(), 3);
    let again = export(&index, &lake, &options(100_000), &mut |_| {}).unwrap();
    assert_eq!(
        (again.committed(), again.skipped(), again.rows()),
        (0, 3, 0)
    );
    let state = DeltaTable::local(&lake).unwrap().state().unwrap();
    assert_eq!(state.version, Some(2));
    let files_before = state.files.len();
    let day1_before = state
        .files
        .keys()
        .filter(|p| p.starts_with(&format!("partition={DAY}/")))
        .count();

    // A late point into day 1 (between two stored ones), then the re-seal.
    let late = doc(0, DAY + 2 * MIN);
    let out = index.bulk(vec![BulkItem::create(late)]).unwrap();
    assert_eq!(out[0].http_status(), 201);
    index.seal(DAY).unwrap();
    let third = export(&index, &lake, &options(100_000), &mut |_| {}).unwrap();
    assert_eq!((third.committed(), third.skipped()), (1, 2));
    let p = third
        .partitions
        .iter()
        .find(|p| p.version.is_some())
        .unwrap();
    assert_eq!(
        (p.start_ms, p.replaced, p.rows),
        (DAY, day1_before, u64::from(HOSTS) * 288 + 1)
    );
    let state = DeltaTable::local(&lake).unwrap().state().unwrap();
    assert_eq!(state.files.len(), files_before);
    let (rows, ids, stats) = lake_stats(&live_files(&lake), "cpu");
    assert_eq!(rows, 3 * u64::from(HOSTS) * 288 + 1);
    assert_eq!(ids.len() as u64, rows);
    assert_same_stats(&stats, &index_stats(&index, "cpu"));
}

fn value_at(column: &dyn Array, r: usize) -> Option<f64> {
    if column.is_null(r) {
        return None;
    }
    Some(match column.data_type() {
        arrow_schema::DataType::Float64 => column.as_primitive::<Float64Type>().value(r),
        _ => column.as_primitive::<Int64Type>().value(r) as f64,
    })
}

#[test]
fn rollups_are_their_own_tables_equal_to_the_raw_rows() {
    let dir = tempfile::tempdir().unwrap();
    let index = sealed_index_with_rollups(&dir.path().join("index"), vec![60 * MIN]);
    let lake = dir.path().join("lake");
    let report = export(&index, &lake, &options(100_000), &mut |_| {}).unwrap();
    // Three raw commits and three to the 1 h rollup table.
    assert_eq!(report.committed(), 6);
    let rolled: Vec<_> = report
        .partitions
        .iter()
        .filter(|p| p.rollup_ms.is_some())
        .collect();
    assert_eq!(rolled.len(), 3);
    // One row per series and hour; a host has two series, since metric names are part of
    // the series identity and `temp` is in every fourth row only.
    assert!(
        rolled.iter().all(|p| p.rows == 2 * u64::from(HOSTS) * 24),
        "{rolled:?}"
    );
    assert_eq!(tidemark_lake::rollup_table_dir(60 * MIN), "_rollups/1h");
    let table = lake.join("_rollups/1h");
    let files = live_files(&table);
    assert_eq!(files.len(), 3);
    // Per series and day: the rollup's counts, minima, maxima and sums fold to the raw
    // rows' (count exact, extremes exact, sums within 1e-9).
    for metric in ["cpu", "bytes", "temp"] {
        let mut folded = Stats::new();
        for f in &files {
            for b in read_batches(f) {
                let ts = b
                    .column_by_name("@timestamp")
                    .unwrap()
                    .as_primitive::<TimestampMillisecondType>();
                let tsid = b.column_by_name("_tsid").unwrap().as_binary::<i32>();
                let col = |s: &str| b.column_by_name(&format!("{metric}.{s}")).unwrap().clone();
                let (count, min, max, sum) = (col("count"), col("min"), col("max"), col("sum"));
                for r in 0..b.num_rows() {
                    let Some(n) = value_at(count.as_ref(), r) else {
                        continue;
                    };
                    if n == 0.0 {
                        continue;
                    }
                    let e = folded
                        .entry((tsid.value(r).to_vec(), ts.value(r).div_euclid(DAY) * DAY))
                        .or_insert((0, f64::INFINITY, f64::NEG_INFINITY, 0.0));
                    e.0 += n as u64;
                    e.1 = e.1.min(value_at(min.as_ref(), r).unwrap());
                    e.2 = e.2.max(value_at(max.as_ref(), r).unwrap());
                    e.3 += value_at(sum.as_ref(), r).unwrap();
                }
            }
        }
        assert_same_stats(&folded, &index_stats(&index, metric));
    }
    // Again: nothing written, to either table.
    let again = export(&index, &lake, &options(100_000), &mut |_| {}).unwrap();
    assert_eq!((again.committed(), again.skipped()), (0, 6));
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let index = sealed_index(&dir.path().join("index"));
    let lake = dir.path().join("lake");
    let mut opts = options(0);
    assert!(matches!(
        export(&index, &lake, &opts, &mut |_| {}),
        Err(tidemark_lake::Error::InvalidOption { .. })
    ));
    opts = options(10);
    opts.partitions = Some(vec![5 * DAY]);
    let e = export(&index, &lake, &opts, &mut |_| {}).unwrap_err();
    assert!(
        e.to_string().contains("no sealed partition starts at"),
        "{e}"
    );

    let single = Index::create(dir.path().join("single"), mapping()).unwrap();
    assert!(matches!(
        export(&single, &lake, &options(10), &mut |_| {}),
        Err(tidemark_lake::Error::NotPartitioned { .. })
    ));
}

/// The parts of a table state a reader sees, whether read from a checkpoint or by
/// replaying every commit.
fn visible(s: &tidemark_lake::TableState) -> impl PartialEq + std::fmt::Debug {
    (
        s.version,
        s.protocol,
        s.id.clone(),
        s.schema_string.clone(),
        s.partition_columns.clone(),
        s.configuration.clone(),
        s.files.clone(),
        s.txns.clone(),
        s.removed.clone(),
    )
}

#[test]
fn checkpoints_read_back_as_the_replayed_log_and_vacuum_deletes_replaced_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = sealed_index(&dir.path().join("index"));
    let lake = dir.path().join("lake");
    let opts = ExportOptions {
        checkpoint_interval: 2,
        ..options(100_000)
    };
    let first = export(&index, &lake, &opts, &mut |_| {}).unwrap();
    // Versions 0, 1, 2: a checkpoint after version 1.
    let flags: Vec<bool> = first.partitions.iter().map(|p| p.checkpoint).collect();
    assert_eq!(flags, [false, true, false]);
    let log = lake.join("_delta_log");
    assert!(
        log.join("00000000000000000001.checkpoint.parquet")
            .is_file()
    );
    let last: Value =
        serde_json::from_slice(&std::fs::read(log.join("_last_checkpoint")).unwrap()).unwrap();
    assert_eq!(last["version"], 1);
    let table = DeltaTable::local(&lake).unwrap();
    let from_checkpoint = table.state().unwrap();
    assert_eq!(from_checkpoint.checkpoint, Some(1));

    // A late write re-seals day 1: version 3 replaces its files, checkpoint 3 follows.
    let out = index
        .bulk(vec![BulkItem::create(doc(0, DAY + 2 * MIN))])
        .unwrap();
    assert_eq!(out[0].http_status(), 201);
    index.seal(DAY).unwrap();
    let late = export(&index, &lake, &opts, &mut |_| {}).unwrap();
    let p = late
        .partitions
        .iter()
        .find(|p| p.version.is_some())
        .unwrap();
    assert_eq!((p.version, p.checkpoint), (Some(3), true));
    let state = table.state().unwrap();
    assert_eq!(state.checkpoint, Some(3));
    assert_eq!(state.removed.len(), p.replaced);
    assert!(p.replaced > 0);

    // The same state without the checkpoints: every commit replayed from version 0.
    let replay = dir.path().join("replay");
    std::fs::create_dir_all(replay.join("_delta_log")).unwrap();
    for e in std::fs::read_dir(&log).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if name.ends_with(".json") {
            std::fs::copy(e.path(), replay.join("_delta_log").join(&name)).unwrap();
        }
    }
    let replayed = DeltaTable::local(&replay).unwrap().state().unwrap();
    assert_eq!(replayed.checkpoint, None);
    assert_eq!(visible(&state), visible(&replayed));
    // And a table whose commits before the checkpoint are gone still reads (a reader
    // starts from the checkpoint).
    for v in 0..=3 {
        std::fs::remove_file(log.join(format!("{v:020}.json"))).unwrap();
    }
    assert_eq!(visible(&table.state().unwrap()), visible(&replayed));

    // Vacuum: a day's retention keeps the replaced files; none keeps nothing of them.
    let on_disk = |p: &str| lake.join(p).is_file();
    let replaced: Vec<String> = state.removed.keys().cloned().collect();
    assert!(replaced.iter().all(|p| on_disk(p)));
    let kept =
        tidemark_lake::vacuum(&tidemark_lake::LakeStore::local(&lake).unwrap(), DAY).unwrap();
    assert!(kept.iter().all(|(_, r)| r.deleted.is_empty()), "{kept:?}");
    // An untracked file just written (an export under way) survives any retention.
    std::fs::write(lake.join("partition=0/in-flight.parquet"), b"x").unwrap();
    let gone = tidemark_lake::vacuum(&tidemark_lake::LakeStore::local(&lake).unwrap(), 0).unwrap();
    assert_eq!(gone[0].0, ".");
    let mut deleted = gone[0].1.deleted.clone();
    deleted.sort();
    assert_eq!(deleted, replaced);
    assert!(replaced.iter().all(|p| !on_disk(p)));
    assert!(lake.join("partition=0/in-flight.parquet").is_file());
    assert!(state.files.keys().all(|p| on_disk(p)));
    // The lake still holds every row once, and a re-export skips everything.
    let (rows, ids, stats) = lake_stats(&live_files(&lake), "cpu");
    assert_eq!(
        (rows, ids.len() as u64),
        (3 * u64::from(HOSTS) * 288 + 1, rows)
    );
    assert_same_stats(&stats, &index_stats(&index, "cpu"));
    let again = export(&index, &lake, &opts, &mut |_| {}).unwrap();
    assert_eq!(again.committed(), 0);
}

#[test]
fn a_snapshot_exports_what_it_saw_while_the_index_moves_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut index = sealed_index(&dir.path().join("index"));
    let lake = dir.path().join("lake");
    // Taken under the index's lock (here: a borrow that ends), written without it.
    let snapshot = tidemark_lake::IndexSnapshot::of(&index).unwrap();
    let generations: Vec<u64> = snapshot.sealed().iter().map(|p| p.generation).collect();
    // Meanwhile a late write re-seals day 1: its old segment file is replaced.
    let out = index
        .bulk(vec![BulkItem::create(doc(0, DAY + 2 * MIN))])
        .unwrap();
    assert_eq!(out[0].http_status(), 201);
    index.seal(DAY).unwrap();
    let store = tidemark_lake::LakeStore::local(&lake).unwrap();
    let first =
        tidemark_lake::export_snapshot(&snapshot, &store, &options(100_000), &mut |_| {}).unwrap();
    drop(snapshot);
    // The snapshot's rows: three days without the late point.
    assert_eq!(first.rows(), 3 * u64::from(HOSTS) * 288);
    let committed: Vec<u64> = first.partitions.iter().map(|p| p.generation).collect();
    assert_eq!(committed, generations);
    // The next export sees the re-sealed day and replaces it.
    let second = export(&index, &lake, &options(100_000), &mut |_| {}).unwrap();
    assert_eq!((second.committed(), second.skipped()), (1, 2));
    let (rows, ids, stats) = lake_stats(&live_files(&lake), "cpu");
    assert_eq!(
        (rows, ids.len() as u64),
        (3 * u64::from(HOSTS) * 288 + 1, rows)
    );
    assert_same_stats(&stats, &index_stats(&index, "cpu"));
}
