//! The rows of one sealed partition's consecutive virtual shards written as one Parquet
//! file, ordered by shard then in segment order (tsid, timestamp), read block by block
//! through a cursor per shard, gathered in Arrow batches and encoded column by column
//! into row groups of a configurable number of rows that never span a shard range (so
//! the `shard` column's statistics tell a reader of some shards which row groups to
//! read). A row group's encoded pages are the only thing held in memory; the `_id`
//! column's bloom filter is Tidemark's split-block filter (XXH64 seed 0, Parquet's
//! layout), sized from the row group's row count and spliced into the column chunk.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::num::NonZeroU32;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, StringBuilder,
};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, RecordBatch, TimestampMillisecondArray};
use arrow_schema::Schema;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::bloom_filter::Sbbf;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;
use roaring::RoaringBitmap;
use tidemark::dedup::{SealedPartition, dim_value_text};
use tidemark::segment::{Dim, Extra, MetricValue, RowCursor, Segment};
use tidemark::tsid::SyntheticId;
use tidemark_bloom::{Hash64, SplitBlockBloomFilter};

use crate::VIRTUAL_SHARDS;
use crate::error::{Error, Result};
use crate::schema::{ColumnType, LakeSchema, Role};

/// Default rows per row group (about a million, as the issue and Parquet practice ask).
pub const DEFAULT_ROW_GROUP_ROWS: usize = 1 << 20;
/// Default false-positive rate of the `_id` bloom filter of each row group.
pub const DEFAULT_ID_BLOOM_FPR: f64 = 0.01;
/// Default most rows of a file: a partition's shard ranges go to one file until the
/// next one would pass this (a shard range larger than this is a file of its own), so
/// a small partition is one file and a large one a few of about this size (8 Mi rows,
/// about 200 MB at the k8s set's 25 bytes a row).
pub const DEFAULT_FILE_ROWS: u64 = 1 << 23;
/// Default number of bits of a shard range: the 256 virtual shards form 2^4 = 16 ranges
/// of 16, and neither a file nor a row group spans two, so a cluster of up to 16 nodes
/// (each owning the shards `shard >> (8 - k)` names) reads whole row groups.
pub const DEFAULT_SHARD_RANGE_BITS: u32 = 4;
/// Rows gathered per Arrow batch before they are encoded.
const BATCH_ROWS: usize = 64 * 1024;

/// How partitions are written.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteOptions {
    /// Rows per row group (the last one of a file holds the rest).
    pub row_group_rows: usize,
    /// False-positive rate of each row group's `_id` bloom filter, in (0, 1).
    pub id_bloom_fpr: f64,
    /// zstd level of every column chunk.
    pub zstd_level: i32,
    /// Whether the `_id` column is written (off only to measure what it costs: it can be
    /// recomputed from `_tsid` and `@timestamp`).
    pub write_id: bool,
    /// Most rows of a file, unless one shard range alone holds more (see
    /// [`DEFAULT_FILE_ROWS`]).
    pub file_rows: u64,
    /// The virtual shards form `2^shard_range_bits` ranges of consecutive shards (0: one
    /// range, at most 8: one shard per range); no file or row group spans two ranges.
    pub shard_range_bits: u32,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            row_group_rows: DEFAULT_ROW_GROUP_ROWS,
            id_bloom_fpr: DEFAULT_ID_BLOOM_FPR,
            zstd_level: 3,
            write_id: true,
            file_rows: DEFAULT_FILE_ROWS,
            shard_range_bits: DEFAULT_SHARD_RANGE_BITS,
        }
    }
}

impl WriteOptions {
    /// Checks the options.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for zero rows per row group or file, a rate outside
    /// (0, 1), more shard range bits than the virtual shards have or a zstd level zstd
    /// refuses.
    pub fn check(&self) -> Result<()> {
        if self.row_group_rows == 0 {
            return Err(Error::InvalidOption {
                name: "row_group_rows",
                detail: "must be at least 1".to_owned(),
            });
        }
        if self.file_rows == 0 {
            return Err(Error::InvalidOption {
                name: "file_rows",
                detail: "must be at least 1".to_owned(),
            });
        }
        if self.shard_range_bits > shard_bits() {
            return Err(Error::InvalidOption {
                name: "shard_range_bits",
                detail: format!(
                    "{} is more than the {} bits of the {VIRTUAL_SHARDS} virtual shards",
                    self.shard_range_bits,
                    shard_bits()
                ),
            });
        }
        if !(self.id_bloom_fpr > 0.0 && self.id_bloom_fpr < 1.0) {
            return Err(Error::InvalidOption {
                name: "id_bloom_fpr",
                detail: format!("{} is not in (0, 1)", self.id_bloom_fpr),
            });
        }
        ZstdLevel::try_new(self.zstd_level).map_err(|e| Error::InvalidOption {
            name: "zstd_level",
            detail: e.to_string(),
        })?;
        Ok(())
    }

    /// The shard range of a virtual shard: its top `shard_range_bits` bits.
    pub fn shard_range(&self, shard: u32) -> u32 {
        shard
            .checked_shr(shard_bits().saturating_sub(self.shard_range_bits))
            .unwrap_or(0)
    }
}

/// Bits of a virtual shard number (8 for 256 shards).
fn shard_bits() -> u32 {
    VIRTUAL_SHARDS.trailing_zeros()
}

/// What writing one file did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileStats {
    /// Rows written.
    pub rows: u64,
    /// Row groups written.
    pub row_groups: u64,
    /// Bytes of the file.
    pub bytes: u64,
    /// Smallest timestamp (milliseconds).
    pub min_ts: i64,
    /// Largest timestamp (milliseconds).
    pub max_ts: i64,
    /// Smallest virtual shard of a row (0 for an empty file).
    pub min_shard: u32,
    /// Largest virtual shard of a row (0 for an empty file).
    pub max_shard: u32,
}

/// The rows one file is written from: a segment's rows that are not in a set of
/// skipped rows (its tombstones, and for one shard the other shards' rows), in segment
/// order.
#[derive(Debug, Clone)]
pub struct Source<'e> {
    /// First millisecond of the partition (for errors).
    pub start_ms: i64,
    /// The segment, if there are rows.
    segment: Option<&'e Segment>,
    /// Rows of the segment that are not written.
    skip: Option<RoaringBitmap>,
    /// Rows written.
    rows: u64,
}

impl<'e> Source<'e> {
    /// A sealed partition's live raw rows.
    pub fn raw(part: &'e SealedPartition) -> Source<'e> {
        Source {
            start_ms: part.start_ms,
            segment: part.segment(),
            skip: part.tombstones().map(|t| t.dead().clone()),
            rows: part.rows(),
        }
    }

    /// The rows of one of a sealed partition's rollup segments (one per series and
    /// bucket).
    pub fn rollup(part: &SealedPartition, rollup: &'e Segment) -> Source<'e> {
        Source {
            start_ms: part.start_ms,
            segment: Some(rollup),
            skip: None,
            rows: rollup.row_count(),
        }
    }

    /// Rows written.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// These rows split by the virtual shard of their series
    /// ([`Tsid::shard`](tidemark::tsid::Tsid::shard) of `shards`): per shard holding a
    /// row, ascending, the source of its rows, still in segment order. Each is read in
    /// its own pass over the segment, which skips undecoded the blocks holding none of
    /// its rows (series are contiguous runs of rows), so memory stays one file's row
    /// group while the files are written one after the other.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a segment too large for 32-bit row numbers (the
    /// segment format's own limit, so never in practice).
    pub fn split_by_shard(&self, shards: NonZeroU32) -> Result<Vec<(u32, Source<'e>)>> {
        let Some(seg) = self.segment else {
            return Ok(Vec::new());
        };
        let too_large = || Error::InvalidOption {
            name: "segment",
            detail: format!(
                "partition {}: {} rows do not fit 32-bit row numbers",
                self.start_ms,
                seg.row_count()
            ),
        };
        let all = u32::try_from(seg.row_count()).map_err(|_| too_large())?;
        // Per shard: the row ranges of its series and their live rows.
        let mut by_shard: BTreeMap<u32, (Vec<std::ops::Range<u32>>, u64)> = BTreeMap::new();
        for s in seg.series() {
            let lo = u32::try_from(s.first_row).map_err(|_| too_large())?;
            let hi = s
                .first_row
                .checked_add(s.row_count)
                .and_then(|h| u32::try_from(h).ok())
                .ok_or_else(too_large)?;
            let dead = self
                .skip
                .as_ref()
                .map_or(0, |d| d.range_cardinality(lo..hi));
            let live = u64::from(hi - lo).saturating_sub(dead);
            if live == 0 {
                continue;
            }
            let e = by_shard.entry(s.tsid.shard(shards)).or_default();
            e.0.push(lo..hi);
            e.1 += live;
        }
        let mut out = Vec::with_capacity(by_shard.len());
        for (shard, (ranges, rows)) in by_shard {
            let mut skip = RoaringBitmap::new();
            skip.insert_range(0..all);
            for r in ranges {
                skip.remove_range(r);
            }
            if let Some(d) = &self.skip {
                skip |= d;
            }
            out.push((
                shard,
                Source {
                    start_ms: self.start_ms,
                    segment: Some(seg),
                    skip: Some(skip),
                    rows,
                },
            ));
        }
        Ok(out)
    }
}

/// The rows of one data file: whole virtual shards of a partition, ascending, each
/// with the source of its rows (from [`Source::split_by_shard`]), written in that order.
#[derive(Debug, Clone, Default)]
pub struct FileRows<'e> {
    shards: Vec<(u32, Source<'e>)>,
    rows: u64,
}

impl<'e> FileRows<'e> {
    /// The files a partition's shards (ascending, as [`Source::split_by_shard`] returns
    /// them) are written as: consecutive shard ranges (see
    /// [`WriteOptions::shard_range_bits`]) gathered into one file until the next range
    /// would take it past [`WriteOptions::file_rows`]. A partition smaller than that is
    /// one file.
    pub fn plan(shards: Vec<(u32, Source<'e>)>, options: &WriteOptions) -> Vec<FileRows<'e>> {
        // Per range, its shards in order.
        let mut ranges: Vec<(u32, FileRows<'e>)> = Vec::new();
        for (shard, source) in shards {
            let range = options.shard_range(shard);
            match ranges.last_mut() {
                Some((r, f)) if *r == range => f.push(shard, source),
                _ => {
                    let mut f = FileRows::default();
                    f.push(shard, source);
                    ranges.push((range, f));
                }
            }
        }
        let mut files: Vec<FileRows<'e>> = Vec::new();
        for (_, range) in ranges {
            match files.last_mut() {
                Some(f) if f.rows.saturating_add(range.rows) <= options.file_rows => {
                    f.rows += range.rows;
                    f.shards.extend(range.shards);
                }
                _ => files.push(range),
            }
        }
        files
    }

    fn push(&mut self, shard: u32, source: Source<'e>) {
        self.rows += source.rows;
        self.shards.push((shard, source));
    }

    /// Rows of the file.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The virtual shards of the file and their rows, ascending.
    pub fn shards(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.shards.iter().map(|(s, src)| (*s, src.rows))
    }

    /// The first and last virtual shard of the file (`None` when it has none).
    pub fn shard_bounds(&self) -> Option<(u32, u32)> {
        Some((self.shards.first()?.0, self.shards.last()?.0))
    }
}

/// Writes the rows of `input` to `out` as one Parquet file of the file columns of
/// `schema` (the table's, partition columns left out), ordered by shard then in segment
/// order, with `metadata` in the file's key-value metadata; `progress` gets the rows
/// written so far after each batch. A row group holds at most
/// [`WriteOptions::row_group_rows`] rows of one shard range. Returns the writer and
/// what was written.
///
/// # Errors
/// Segment read errors, Parquet and Arrow errors, bloom sizing errors, and
/// [`Error::RowCountMismatch`] if the rows read are not the sources' live rows.
pub fn write_partition<W: Write + Send>(
    out: W,
    input: FileRows<'_>,
    schema: &LakeSchema,
    options: &WriteOptions,
    metadata: Vec<KeyValue>,
    progress: &mut dyn FnMut(u64),
) -> Result<(W, FileStats)> {
    options.check()?;
    let start_ms = input.shards.first().map_or(0, |(_, s)| s.start_ms);
    // Rows per shard range, to size each row group's `_id` filter.
    let mut range_rows: BTreeMap<u32, u64> = BTreeMap::new();
    for (shard, source) in &input.shards {
        *range_rows.entry(options.shard_range(*shard)).or_default() += source.rows;
    }
    let schema = &schema.file_schema();
    let arrow_schema = schema.arrow_schema();
    let level = ZstdLevel::try_new(options.zstd_level)?;
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        // Page-level statistics: the column index (page index) and the offset index.
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_key_value_metadata(Some(metadata))
        // Whole row groups are cut here, never by the writer's own limits.
        .set_max_row_group_row_count(None);
    for c in schema.columns() {
        if let Some(encoding) = column_encoding(c.ty, &c.role) {
            let path = ColumnPath::from(c.name.as_str());
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, encoding);
        }
    }
    let out = CountingWrite {
        inner: out,
        bytes: 0,
    };
    let writer = ArrowWriter::try_new(out, arrow_schema.clone(), Some(props.build()))?;
    let (file, factory) = writer.into_serialized_writer()?;
    let mut w = PartitionWriter {
        file,
        factory,
        arrow_schema,
        schema,
        options,
        row_group: None,
        batch: Batch::new(schema),
        stats: FileStats {
            min_ts: i64::MAX,
            max_ts: i64::MIN,
            min_shard: u32::MAX,
            max_shard: 0,
            ..FileStats::default()
        },
        expected: input.rows,
        range: None,
        range_left: 0,
    };
    for (shard, source) in &input.shards {
        let range = options.shard_range(*shard);
        if w.range != Some(range) {
            // A row group never spans two shard ranges.
            w.flush_batch()?;
            w.close_row_group()?;
            w.range = Some(range);
            w.range_left = range_rows.get(&range).copied().unwrap_or(0);
        }
        let Some(seg) = source.segment else {
            continue;
        };
        let shard_value = i32::try_from(*shard).map_err(|_| Error::InvalidOption {
            name: "shard",
            detail: format!("{shard} does not fit the INT32 shard column"),
        })?;
        let mut cursor: RowCursor<'_> = seg.cursor(source.skip.as_ref());
        let sources = Sources::new(schema, seg);
        let mut series_at = usize::MAX;
        let mut series: Option<SeriesValues> = None;
        while cursor.advance()? {
            if cursor.series_index() != series_at {
                series_at = cursor.series_index();
                series = cursor.series().map(|s| SeriesValues::of(schema, s));
                w.batch.new_series();
            }
            // The cursor always has a series for a row it stands on (it fails otherwise).
            if let Some(series) = &series {
                w.push_row(&sources, series, &cursor, shard_value)?;
                w.stats.min_shard = w.stats.min_shard.min(*shard);
                w.stats.max_shard = w.stats.max_shard.max(*shard);
            }
            if w.batch.rows >= BATCH_ROWS {
                w.flush_batch()?;
                progress(w.stats.rows);
            }
        }
    }
    w.flush_batch()?;
    w.close_row_group()?;
    progress(w.stats.rows);
    if w.stats.rows != w.expected {
        return Err(Error::RowCountMismatch {
            start_ms,
            written: w.stats.rows,
            expected: w.expected,
        });
    }
    let mut stats = w.stats;
    // Writes the footer.
    let out = w.file.into_inner()?;
    stats.bytes = out.bytes;
    if stats.rows == 0 {
        stats.min_ts = 0;
        stats.max_ts = 0;
        stats.min_shard = 0;
        stats.max_shard = 0;
    }
    Ok((out.inner, stats))
}

/// Counts the bytes written through it (the file's size, footer included).
struct CountingWrite<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for CountingWrite<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The encoding of a column whose values rarely repeat (a dictionary would not pay),
/// chosen for what sorted time series look like (docs/results/lake.md measures it);
/// `None`: the writer's default (dictionary, falling back to plain).
fn column_encoding(ty: ColumnType, role: &Role) -> Option<Encoding> {
    match (ty, role) {
        // Ids of one series share their 20-byte prefix and grow by small steps: prefix
        // (delta) encoding stores a few bytes per row.
        (_, Role::Id) => Some(Encoding::DELTA_BYTE_ARRAY),
        // Timestamps and counters grow by similar steps within a series: deltas,
        // bit-packed per miniblock.
        (ColumnType::TimestampMillis, _) | (ColumnType::Long, Role::Metric) => {
            Some(Encoding::DELTA_BINARY_PACKED)
        }
        // Gauges: each byte of the doubles in its own stream, which zstd then
        // compresses far better than interleaved bytes.
        (ColumnType::Double, Role::Metric) => Some(Encoding::BYTE_STREAM_SPLIT),
        _ => None,
    }
}

/// An open row group: its column writers, its rows so far and its `_id` filter.
struct RowGroup {
    writers: Vec<ArrowColumnWriter>,
    rows: usize,
    bloom: Option<SplitBlockBloomFilter>,
}

struct PartitionWriter<'s, W: Write + Send> {
    file: SerializedFileWriter<CountingWrite<W>>,
    factory: ArrowRowGroupWriterFactory,
    arrow_schema: Arc<Schema>,
    schema: &'s LakeSchema,
    options: &'s WriteOptions,
    row_group: Option<RowGroup>,
    batch: Batch,
    stats: FileStats,
    /// Live rows of the file.
    expected: u64,
    /// The shard range of the rows being written.
    range: Option<u32>,
    /// Rows of that range not yet written.
    range_left: u64,
}

impl<W: Write + Send> PartitionWriter<'_, W> {
    /// Adds the cursor's row to the batch (and the `_id` filter of its row group).
    fn push_row(
        &mut self,
        sources: &Sources,
        series: &SeriesValues,
        cursor: &tidemark::segment::RowCursor<'_>,
        shard: i32,
    ) -> Result<()> {
        if self.row_group.is_none() {
            self.open_row_group()?;
        }
        let ts = cursor.ts_millis();
        self.stats.min_ts = self.stats.min_ts.min(ts);
        self.stats.max_ts = self.stats.max_ts.max(ts);
        let id = SyntheticId::new(series.tsid, ts).to_bytes();
        if let Some(rg) = self.row_group.as_mut() {
            if let Some(b) = rg.bloom.as_mut() {
                b.insert(&id);
            }
            rg.rows += 1;
        }
        self.range_left = self.range_left.saturating_sub(1);
        self.batch
            .push(self.schema, sources, series, cursor, (ts, shard), &id);
        if self
            .row_group
            .as_ref()
            .is_some_and(|rg| rg.rows >= self.options.row_group_rows)
        {
            self.flush_batch()?;
            self.close_row_group()?;
        }
        Ok(())
    }

    fn open_row_group(&mut self) -> Result<()> {
        let index = self.file.flushed_row_groups().len();
        let writers = self.factory.create_column_writers(index)?;
        // The rows of this shard range not yet written, this one included.
        let rows = self
            .range_left
            .min(self.options.row_group_rows as u64)
            .max(1);
        let bloom = if self.options.write_id {
            Some(
                SplitBlockBloomFilter::with_rate(rows, self.options.id_bloom_fpr)?
                    .with_hasher(Hash64::PARQUET),
            )
        } else {
            None
        };
        self.row_group = Some(RowGroup {
            writers,
            rows: 0,
            bloom,
        });
        Ok(())
    }

    /// Encodes the gathered rows into the open row group's column writers.
    fn flush_batch(&mut self) -> Result<()> {
        if self.batch.rows == 0 {
            return Ok(());
        }
        let rows = self.batch.rows as u64;
        let arrays = self.batch.finish(self.schema)?;
        let batch = RecordBatch::try_new(self.arrow_schema.clone(), arrays)?;
        let Some(rg) = self.row_group.as_mut() else {
            return Ok(());
        };
        let mut writers = rg.writers.iter_mut();
        for (array, field) in batch.columns().iter().zip(self.arrow_schema.fields()) {
            for leaf in compute_leaves(field, array)? {
                if let Some(w) = writers.next() {
                    w.write(&leaf)?;
                }
            }
        }
        self.stats.rows += rows;
        Ok(())
    }

    /// Closes the open row group, if any: each column chunk (the `_id` one with its
    /// split-block filter) appended to the file.
    fn close_row_group(&mut self) -> Result<()> {
        let Some(rg) = self.row_group.take() else {
            return Ok(());
        };
        let mut group = self.file.next_row_group()?;
        for (writer, column) in rg.writers.into_iter().zip(self.schema.columns()) {
            let mut chunk = writer.close()?;
            if column.role == Role::Id {
                chunk.close_mut().bloom_filter =
                    rg.bloom.as_ref().map(|b| Sbbf::new(&b.to_bitset_bytes()));
            }
            chunk.append_to_row_group(&mut group)?;
        }
        group.close()?;
        self.stats.row_groups += 1;
        Ok(())
    }
}

/// Where each metric and extra column of the schema is in one segment.
struct Sources {
    /// Per schema column: its index among the segment's metric or extra columns.
    index: Vec<Option<usize>>,
}

impl Sources {
    fn new(schema: &LakeSchema, seg: &Segment) -> Sources {
        let index = schema
            .columns()
            .iter()
            .map(|c| match c.role {
                Role::Metric => seg.columns().iter().position(|m| m.name == c.name),
                Role::Extra => seg.extra_columns().iter().position(|e| e.name == c.name),
                _ => None,
            })
            .collect();
        Sources { index }
    }
}

/// A dimension's value in its column's type.
#[derive(Debug, Clone, PartialEq)]
enum DimCell {
    Long(i64),
    Boolean(bool),
    Text(String),
}

/// The per-series values of the current series, computed once per series.
#[derive(Debug)]
struct SeriesValues {
    tsid: tidemark::tsid::Tsid,
    /// Per schema column: the series' dimension value (dimension columns only).
    dims: Vec<Option<DimCell>>,
}

impl SeriesValues {
    fn of(schema: &LakeSchema, s: &tidemark::segment::Series) -> SeriesValues {
        let dims = schema
            .columns()
            .iter()
            .map(|c| {
                if c.role != Role::Dimension {
                    return None;
                }
                let (_, d) = s.dims.iter().find(|(n, _)| *n == c.name)?;
                Some(match (c.ty, d) {
                    (ColumnType::Long, Dim::Int(v)) => DimCell::Long(*v),
                    (ColumnType::Boolean, Dim::Bool(v)) => DimCell::Boolean(*v),
                    _ => DimCell::Text(dim_value_text(d)),
                })
            })
            .collect();
        SeriesValues { tsid: s.tsid, dims }
    }
}

/// A dictionary-encoded string column being built: keys per row, each distinct value
/// once per batch. `memo` remembers the key of the current series' value, so a
/// dimension is looked up once per series and batch, not per row.
#[derive(Debug, Default)]
struct DictBuilder {
    keys: Int32Builder,
    values: StringBuilder,
    index: HashMap<String, i32>,
    memo: Option<Option<i32>>,
}

impl DictBuilder {
    fn key_of(&mut self, value: &str) -> i32 {
        if let Some(k) = self.index.get(value) {
            return *k;
        }
        let k = self.index.len() as i32;
        self.values.append_value(value);
        self.index.insert(value.to_owned(), k);
        k
    }

    fn push(&mut self, value: Option<&str>) {
        let key = value.map(|v| self.key_of(v));
        self.keys.append_option(key);
    }

    fn push_series(&mut self, value: Option<&str>) {
        let key = match self.memo {
            Some(k) => k,
            None => {
                let k = value.map(|v| self.key_of(v));
                self.memo = Some(k);
                k
            }
        };
        self.keys.append_option(key);
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        let keys = self.keys.finish();
        let values = Arc::new(self.values.finish());
        self.index.clear();
        self.memo = None;
        Ok(Arc::new(DictionaryArray::<Int32Type>::try_new(
            keys, values,
        )?))
    }
}

/// One column's values of the batch being gathered.
#[derive(Debug)]
enum ColumnBuf {
    Timestamp(Vec<i64>),
    Text(DictBuilder),
    Long(Int64Builder),
    Double(Float64Builder),
    Boolean(BooleanBuilder),
    Binary(BinaryBuilder),
    Int(Int32Builder),
}

/// The rows gathered since the last flush, column by column.
struct Batch {
    columns: Vec<ColumnBuf>,
    rows: usize,
}

impl Batch {
    fn new(schema: &LakeSchema) -> Batch {
        let columns = schema
            .columns()
            .iter()
            .map(|c| match c.ty {
                ColumnType::TimestampMillis => ColumnBuf::Timestamp(Vec::new()),
                ColumnType::Text => ColumnBuf::Text(DictBuilder::default()),
                ColumnType::Long => ColumnBuf::Long(Int64Builder::new()),
                ColumnType::Double => ColumnBuf::Double(Float64Builder::new()),
                ColumnType::Boolean => ColumnBuf::Boolean(BooleanBuilder::new()),
                ColumnType::Binary => ColumnBuf::Binary(BinaryBuilder::new()),
                ColumnType::Int => ColumnBuf::Int(Int32Builder::new()),
            })
            .collect();
        Batch { columns, rows: 0 }
    }

    /// A new series starts: the dimension keys remembered for the last one go.
    fn new_series(&mut self) {
        for c in &mut self.columns {
            if let ColumnBuf::Text(d) = c {
                d.memo = None;
            }
        }
    }

    fn push(
        &mut self,
        schema: &LakeSchema,
        sources: &Sources,
        series: &SeriesValues,
        cursor: &tidemark::segment::RowCursor<'_>,
        (ts, shard): (i64, i32),
        id: &[u8],
    ) {
        let metrics = cursor.metrics();
        for (i, (column, buf)) in schema.columns().iter().zip(&mut self.columns).enumerate() {
            let source = sources.index.get(i).copied().flatten();
            match (&column.role, buf) {
                (Role::Timestamp, ColumnBuf::Timestamp(v)) => v.push(ts),
                (Role::Dimension, ColumnBuf::Text(d)) => {
                    let text = match series.dims.get(i) {
                        Some(Some(DimCell::Text(t))) => Some(t.as_str()),
                        _ => None,
                    };
                    d.push_series(text);
                }
                (Role::Dimension, ColumnBuf::Long(b)) => {
                    b.append_option(match series.dims.get(i) {
                        Some(Some(DimCell::Long(v))) => Some(*v),
                        _ => None,
                    })
                }
                (Role::Dimension, ColumnBuf::Boolean(b)) => {
                    b.append_option(match series.dims.get(i) {
                        Some(Some(DimCell::Boolean(v))) => Some(*v),
                        _ => None,
                    });
                }
                (Role::Metric, ColumnBuf::Double(b)) => {
                    b.append_option(source.and_then(|s| match metrics.get(s) {
                        Some(Some(MetricValue::Gauge(v))) => Some(*v),
                        _ => None,
                    }));
                }
                (Role::Metric, ColumnBuf::Long(b)) => {
                    b.append_option(source.and_then(|s| match metrics.get(s) {
                        Some(Some(MetricValue::Counter(v))) => Some(*v),
                        _ => None,
                    }));
                }
                (Role::Extra, ColumnBuf::Text(d)) => {
                    d.push(source.and_then(|s| match cursor.extra(s) {
                        Some(Extra::Keyword(k)) => Some(k.as_str()),
                        _ => None,
                    }));
                }
                (Role::Extra, ColumnBuf::Boolean(b)) => {
                    b.append_option(source.and_then(|s| match cursor.extra(s) {
                        Some(Extra::Bool(v)) => Some(*v),
                        _ => None,
                    }));
                }
                (Role::Tsid, ColumnBuf::Binary(b)) => b.append_value(series.tsid.as_bytes()),
                (Role::Id, ColumnBuf::Binary(b)) => b.append_value(id),
                (Role::Shard, ColumnBuf::Int(b)) => b.append_value(shard),
                (_, ColumnBuf::Timestamp(v)) => v.push(ts),
                (_, ColumnBuf::Text(d)) => d.push(None),
                (_, ColumnBuf::Long(b)) => b.append_null(),
                (_, ColumnBuf::Double(b)) => b.append_null(),
                (_, ColumnBuf::Boolean(b)) => b.append_null(),
                (_, ColumnBuf::Binary(b)) => b.append_null(),
                (_, ColumnBuf::Int(b)) => b.append_null(),
            }
        }
        self.rows += 1;
    }

    /// The gathered columns as Arrow arrays; the batch is empty afterwards.
    fn finish(&mut self, schema: &LakeSchema) -> Result<Vec<ArrayRef>> {
        self.rows = 0;
        let mut out = Vec::with_capacity(self.columns.len());
        for (c, buf) in schema.columns().iter().zip(&mut self.columns) {
            let array: ArrayRef = match buf {
                ColumnBuf::Timestamp(v) => {
                    let a = TimestampMillisecondArray::from(std::mem::take(v));
                    Arc::new(a.with_timezone("UTC"))
                }
                ColumnBuf::Text(d) => d.finish()?,
                ColumnBuf::Long(b) => Arc::new(b.finish()),
                ColumnBuf::Double(b) => Arc::new(b.finish()),
                ColumnBuf::Boolean(b) => Arc::new(b.finish()),
                ColumnBuf::Binary(b) => Arc::new(b.finish()),
                ColumnBuf::Int(b) => Arc::new(b.finish()),
            };
            debug_assert_eq!(array.data_type(), &c.ty.arrow());
            out.push(array);
        }
        Ok(out)
    }
}
