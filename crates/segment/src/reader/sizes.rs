//! Size reports: the bytes of each part of a segment, and of its series-range structures.

use super::Segment;
use crate::format::{FOOTER_LEN, HEADER_LEN};

/// Bytes of each component of a segment, for disk-usage reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SizeBreakdown {
    /// Header (16 bytes).
    pub header: u64,
    /// Meta section: dictionaries of dimension names and metric columns.
    pub meta: u64,
    /// Series table: tsids, dimensions, row counts, time ranges, presence.
    pub series_table: u64,
    /// Timestamp blocks.
    pub timestamps: u64,
    /// Each metric column's blocks, by name, in column order.
    pub metrics: Vec<(String, u64)>,
    /// Each extra column's blocks, by name, in column order.
    pub extras: Vec<(String, u64)>,
    /// Block directory (20 bytes per column per block).
    pub directory: u64,
    /// Bloom filter section (0 when absent).
    pub bloom: u64,
    /// Id term index section (0 when absent).
    pub id_index: u64,
    /// Footer.
    pub footer: u64,
    /// The whole file.
    pub total: u64,
}

impl SizeBreakdown {
    /// Everything but the id/dedup structures (bloom and id index).
    pub fn data_bytes(&self) -> u64 {
        self.total - self.bloom - self.id_index
    }
}

impl Segment {
    /// Bytes of each component.
    pub fn size_breakdown(&self) -> SizeBreakdown {
        let s = &self.footer.sections;
        let mut timestamps = 0;
        let mut metrics: Vec<(String, u64)> = self
            .meta
            .columns
            .iter()
            .map(|c| (c.name.clone(), 0))
            .chain(self.meta.extras.iter().map(|e| (e.name.clone(), 0)))
            .collect();
        for column in 0..self.layout.len() as u32 {
            let mut sum = 0u64;
            for block in 0..self.column_block_count(column).unwrap_or(0) {
                if let Ok(e) = self.block_ref(column, block) {
                    sum += u64::from(e.len);
                }
            }
            match column.checked_sub(1) {
                None => timestamps = sum,
                Some(c) => {
                    if let Some(m) = metrics.get_mut(c as usize) {
                        m.1 = sum;
                    }
                }
            }
        }
        SizeBreakdown {
            extras: metrics.split_off(self.meta.columns.len().min(metrics.len())),
            header: HEADER_LEN as u64,
            meta: s[0].len,
            series_table: s[1].len,
            timestamps,
            metrics,
            directory: s[2].len,
            bloom: s[3].len,
            id_index: s[4].len,
            footer: FOOTER_LEN as u64,
            total: self.bytes().len() as u64,
        }
    }

    /// Bytes of the series table's `min_ts` and `span` columns and its time slot maps,
    /// before the table's compression: what the per-series [min, max] timestamps and the
    /// holes in them (the `series-range` dedup strategy's only structures) cost in this
    /// file's format version.
    pub fn series_range_bytes(&self) -> u64 {
        use crate::slots::varint_len;
        fn zigzag(v: i64) -> u64 {
            ((v << 1) ^ (v >> 63)) as u64
        }
        let (mut prev_min, mut prev_span, mut total) = (0i64, 0u64, 0u64);
        for s in &self.series {
            total += varint_len(zigzag(s.min_ts.wrapping_sub(prev_min)));
            let span = s.max_ts.wrapping_sub(s.min_ts) as u64;
            total += if self.footer.version >= 2 {
                varint_len(zigzag(span.wrapping_sub(prev_span) as i64))
            } else {
                varint_len(span)
            };
            prev_min = s.min_ts;
            prev_span = span;
        }
        if self.footer.version >= 4 {
            let mut maps = 0u64;
            let mut prev = 0usize;
            for (i, s) in self.series.iter().enumerate() {
                if let Some(m) = &s.slots {
                    maps += 1;
                    total += varint_len((i - prev) as u64) + m.encoded_len();
                    prev = i;
                }
            }
            total += varint_len(maps);
        }
        total
    }
}
