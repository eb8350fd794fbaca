//! The end of a streamed segment: the last blocks, then the meta, series, directory,
//! bloom and id-index sections and the footer.

use std::io::Write;

use super::{SegmentMeta, SegmentStreamWriter};
use crate::error::Result;
use crate::format::meta;
use crate::format::series::{self, SeriesOut, WrittenSeries};
use crate::format::{
    FLAG_BLOOM, FLAG_EVENTS, FLAG_ID_INDEX, FORMAT_VERSION, Footer, SECTION_COUNT, SectionRef,
    len_u32,
};

/// Position of the directory in the footer's sections (meta, series, directory, bloom,
/// id index).
const DIRECTORY_SECTION: usize = 2;

impl<W: Write> SegmentStreamWriter<W> {
    /// Writes the last blocks, the meta section, series table, directory, id sections and
    /// footer, and returns the writer and what was written.
    ///
    /// # Errors
    /// I/O errors; [`Error::TooLarge`](crate::Error::TooLarge) for counts the format cannot
    /// hold.
    pub fn finish(self) -> Result<(W, SegmentMeta)> {
        self.finish_sections().map(|(out, meta, _)| (out, meta))
    }

    /// As [`finish`](Self::finish), also returning the series table as a reader would
    /// decode it from the file, for [`Segment::open_written`](crate::Segment::open_written).
    ///
    /// # Errors
    /// As [`finish`](Self::finish).
    pub fn finish_with_series(self) -> Result<(W, SegmentMeta, WrittenSeries)> {
        self.finish_sections()
            .map(|(out, meta, series)| (out, meta, WrittenSeries::from_out(series)))
    }

    /// The steps of [`finish`](Self::finish); returns the series written.
    fn finish_sections(mut self) -> Result<(W, SegmentMeta, Vec<SeriesOut>)> {
        self.write_last_blocks()?;
        let sections = self.encode_sections()?;
        let refs = self.write_sections(&sections)?;
        self.write_footer(refs)
    }

    /// Step 1 of [`finish`](Self::finish): closes the last series and writes every
    /// column's open block.
    fn write_last_blocks(&mut self) -> Result<()> {
        self.close_series_slots();
        if self.series.last().is_some_and(|s| s.row_count == 0) {
            self.series.pop();
        }
        self.flush_ts_block()?;
        self.flush_column_blocks(true)?;
        debug_assert_eq!(self.dir.count(0), self.rows.div_ceil(self.block_rows));
        Ok(())
    }

    /// Step 2: the meta, series, directory, bloom and id-index sections, in footer order.
    fn encode_sections(&mut self) -> Result<[Vec<u8>; SECTION_COUNT]> {
        let dim_names = series::dim_names(&self.series);
        let bloom = self.options.bloom_rate().map(|f| (f, self.bloom_capacity));
        let meta = meta::encode(bloom, &dim_names, &self.schema.columns, &self.schema.extras)?;
        let series_section = series::encode(&self.series, &dim_names, &mut self.comp)?;
        // The directory is written from the columns' entries as they are (see
        // `write_sections`): no second copy of it is built.
        let dir = Vec::new();
        let bloom_section = match &self.bloom {
            Some(b) => b.to_bytes(),
            None => Vec::new(),
        };
        let id_section = self.encode_id_index()?;
        let sections = [meta, series_section, dir, bloom_section, id_section];
        debug_assert!(sections.get(DIRECTORY_SECTION).is_some_and(Vec::is_empty));
        Ok(sections)
    }

    /// The id-index section: the FST of synthetic ids to rows (time series stream their
    /// ids in; an event segment's are sorted here), empty without one.
    fn encode_id_index(&mut self) -> Result<Vec<u8>> {
        Ok(match self.fst.take() {
            Some(b) => b.into_inner()?,
            None if self.options.id_index() => {
                let mut ids = std::mem::take(&mut self.event_ids);
                ids.sort_unstable();
                let mut b = fst::MapBuilder::memory();
                for (id, row) in ids {
                    b.insert(id, row)?;
                }
                b.into_inner()?
            }
            None => Vec::new(),
        })
    }

    /// Step 3: writes the sections after the blocks; returns where each one is.
    fn write_sections(
        &mut self,
        sections: &[Vec<u8>; SECTION_COUNT],
    ) -> Result<[SectionRef; SECTION_COUNT]> {
        let mut refs = [SectionRef::default(); SECTION_COUNT];
        for (i, (slot, bytes)) in refs.iter_mut().zip(sections).enumerate() {
            let mut crc = crc32fast::Hasher::new();
            let offset = self.out.pos;
            let out = &mut self.out;
            let mut put = |b: &[u8]| {
                crc.update(b);
                out.put(b)
            };
            let len = if i == DIRECTORY_SECTION {
                self.dir.write_to(&mut put)?;
                self.dir.len()
            } else {
                put(bytes)?;
                bytes.len() as u64
            };
            *slot = SectionRef {
                offset: if len == 0 { 0 } else { offset },
                len,
                crc: if len == 0 { 0 } else { crc.finalize() },
            };
        }
        Ok(refs)
    }

    /// Step 4: writes the footer, flushes, and returns the output and what was written.
    fn write_footer(
        mut self,
        sections: [SectionRef; SECTION_COUNT],
    ) -> Result<(W, SegmentMeta, Vec<SeriesOut>)> {
        let n = self.rows;
        let mut flags = 0;
        if self.options.bloom_rate().is_some() {
            flags |= FLAG_BLOOM;
        }
        if self.options.id_index() {
            flags |= FLAG_ID_INDEX;
        }
        if self.options.events() {
            flags |= FLAG_EVENTS;
        }
        let empty = n == 0;
        let footer = Footer {
            row_count: n,
            series_count: self.series.len() as u64,
            min_ts: if empty { 0 } else { self.min_ts },
            max_ts: if empty { 0 } else { self.max_ts },
            block_rows: self.block_rows as u32,
            block_count: len_u32(n.div_ceil(self.block_rows) as usize, "blocks")?,
            column_count: len_u32(self.schema.columns.len(), "metric columns")?,
            flags,
            sections,
            data_crc: self.out.crc.clone().finalize(),
            version: FORMAT_VERSION,
        };
        self.out.put(&footer.encode())?;
        self.out.inner.flush()?;
        let meta = SegmentMeta {
            row_count: footer.row_count,
            series_count: footer.series_count,
            column_count: footer.column_count,
            min_ts: footer.min_ts,
            max_ts: footer.max_ts,
            len_bytes: self.out.pos,
        };
        Ok((self.out.inner, meta, self.series))
    }
}
