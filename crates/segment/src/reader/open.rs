//! Opening a segment: the bytes behind it (a memory map or a vector), the checks of
//! [`Segment::open`] and the full [`Segment::verify`], and the release of mapped pages.

use std::fs::File;
use std::path::{Path, PathBuf};

use roaring::RoaringBitmap;

use super::Segment;
use super::lookup::guard_fst;
use crate::bloom::SegmentBloomRef;
use crate::error::{Error, Place, Result};
use crate::format::blocks::DecodedBlock;
use crate::format::directory;
use crate::format::meta;
use crate::format::series::{self, Series, WrittenSeries};
use crate::format::{
    FLAG_BLOOM, FLAG_ID_INDEX, FOOTER_LEN, Footer, HEADER_LEN, MAGIC, SECTION_PLACES, check_header,
    section,
};
use crate::intern::DimsInterner;
use crate::le::Reader;

pub(super) enum Backing {
    Vec(Vec<u8>),
    Mmap(memmap2::Mmap),
}

impl Backing {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Backing::Vec(v) => v,
            Backing::Mmap(m) => m,
        }
    }
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backing::Vec(v) => write!(f, "Vec({} bytes)", v.len()),
            Backing::Mmap(m) => write!(f, "Mmap({} bytes)", m.len()),
        }
    }
}

/// Where [`Segment::new`] takes the series table from.
enum SeriesSource<'a> {
    /// Decoded from the file, dimension lists shared through the interner.
    Decode(&'a mut DimsInterner),
    /// Handed over by the writer that just wrote the file.
    Written(Vec<Series>),
}

/// Memory-maps the file at `path`, refusing one too short for a header and footer.
fn map_file(path: &Path) -> Result<memmap2::Mmap> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len < (HEADER_LEN + FOOTER_LEN) as u64 {
        return Err(Error::Truncated {
            place: Place::Footer,
            needed: (HEADER_LEN + FOOTER_LEN) as u64,
            available: len,
        });
    }
    Ok(crate::mmap::map(&file)?)
}

impl Segment {
    /// Memory-maps and opens the segment at `path`.
    ///
    /// # Errors
    /// I/O errors and every format error of [`from_vec`](Self::from_vec), wrapped in
    /// [`Error::InFile`] naming the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Segment> {
        Segment::open_interned(path, &mut DimsInterner::new())
    }

    /// As [`open`](Self::open), sharing each series' dimensions with the other segments
    /// opened through `interner` (a store with many segments then holds them once).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_interned(path: impl AsRef<Path>, interner: &mut DimsInterner) -> Result<Segment> {
        Segment::open_mapped(path.as_ref(), SeriesSource::Decode(interner))
    }

    /// Memory-maps and opens the segment at `path` that was just written, taking its
    /// series table from the writer ([`SegmentStreamWriter::finish_with_series`])
    /// instead of decoding it: every other section is read and checked as
    /// [`open`](Self::open) does, and the table's length must equal the footer's series
    /// count. (Debug builds also decode the table and require it to equal the one handed
    /// in.)
    ///
    /// # Errors
    /// As [`open`](Self::open), and [`Error::Corrupt`] when `series` does not fit the
    /// footer.
    ///
    /// [`SegmentStreamWriter::finish_with_series`]:
    /// crate::SegmentStreamWriter::finish_with_series
    pub fn open_written(path: impl AsRef<Path>, series: WrittenSeries) -> Result<Segment> {
        Segment::open_mapped(path.as_ref(), SeriesSource::Written(series.series))
    }

    /// Memory-maps the file at `path` and opens it with its series table from `source`,
    /// every error naming the file.
    fn open_mapped(path: &Path, source: SeriesSource<'_>) -> Result<Segment> {
        map_file(path)
            .and_then(|map| Segment::new(Backing::Mmap(map), Some(path.to_path_buf()), source))
            .map_err(|e| e.in_file(path))
    }

    /// Opens a segment held in memory.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::Truncated`],
    /// [`Error::OutOfBounds`], [`Error::ChecksumMismatch`] and [`Error::Corrupt`].
    pub fn from_vec(bytes: Vec<u8>) -> Result<Segment> {
        Segment::new(
            Backing::Vec(bytes),
            None,
            SeriesSource::Decode(&mut DimsInterner::new()),
        )
    }

    fn new(data: Backing, path: Option<PathBuf>, source: SeriesSource<'_>) -> Result<Segment> {
        let bytes = data.bytes();
        // The header's magic is checked before the footer, its version after.
        let magic = Reader::new(bytes, Place::Header).magic()?;
        if magic != MAGIC {
            return Err(Error::BadMagic {
                place: Place::Header,
                expected: MAGIC,
                found: magic,
            });
        }
        let footer = Footer::decode(bytes)?;
        check_header(bytes, &footer)?;
        let meta_bytes = section(bytes, &footer, 0)?;
        let meta = meta::decode(meta_bytes, &footer)?;
        let series_bytes = section(bytes, &footer, 1)?;
        let series = match source {
            SeriesSource::Decode(interner) => {
                series::decode(series_bytes, &footer, &meta, interner)?
            }
            SeriesSource::Written(series) => {
                if series.len() as u64 != footer.series_count {
                    return Err(Error::corrupt(
                        Place::SeriesTable,
                        format!(
                            "{} series written, footer says {}",
                            series.len(),
                            footer.series_count
                        ),
                    ));
                }
                debug_assert_eq!(
                    series::decode(series_bytes, &footer, &meta, &mut DimsInterner::new()).ok(),
                    Some(series.clone()),
                    "the writer's series table differs from the file's"
                );
                series
            }
        };
        let layout = directory::layout(&footer, &meta, section(bytes, &footer, 2)?.len())?;
        if footer.flags & FLAG_BLOOM != 0 {
            SegmentBloomRef::new(section(bytes, &footer, 3)?, true)?;
        }
        if footer.flags & FLAG_ID_INDEX != 0 {
            fst::Map::new(section(bytes, &footer, 4)?)?;
        }
        Ok(Segment {
            data,
            path,
            footer,
            meta,
            series,
            layout,
        })
    }

    /// Full check: the CRC of every byte before the footer, every section, every block
    /// (checksum and decoding), the bloom filter's own checksum and the FST.
    ///
    /// # Errors
    /// The first problem found.
    pub fn verify(&self) -> Result<()> {
        self.named(|| {
            let bytes = self.bytes();
            let data = bytes.get(..bytes.len() - FOOTER_LEN).unwrap_or(&[]);
            Error::check_crc(Place::Data, data, self.footer.data_crc)?;
            for i in 0..SECTION_PLACES.len() {
                section(bytes, &self.footer, i)?;
            }
            let mut block = DecodedBlock::default();
            for b in 0..self.footer.block_count {
                self.decode_block(b, &mut block)?;
            }
            let base = self.meta.columns.len() as u32 + 1;
            for e in 0..self.meta.extras.len() as u32 {
                for b in 0..self.column_block_count(base + e).unwrap_or(0) {
                    self.decode_extra_block(e, b, 0..usize::MAX)?;
                }
            }
            if let Some(bloom) = self.bloom()? {
                bloom.verify()?;
            }
            if let Some(map) = self.id_index()? {
                if map.len() as u64 != self.footer.row_count {
                    return Err(Error::corrupt(
                        Place::IdIndex,
                        "key count differs from row count",
                    ));
                }
                // The walk reaches every node of the FST (under the guard), and each key
                // must name a row of its own.
                let rows = self.footer.row_count;
                guard_fst(|| {
                    use fst::Streamer;
                    let mut stream = map.stream();
                    let mut seen = RoaringBitmap::new();
                    while let Some((_, row)) = stream.next() {
                        let fresh = u32::try_from(row).is_ok_and(|r| row < rows && seen.insert(r));
                        if !fresh {
                            return Err(Error::corrupt(
                                Place::IdIndex,
                                format!(
                                    "a key names row {row}: past the {rows} rows or named twice"
                                ),
                            ));
                        }
                    }
                    Ok(())
                })??;
            }
            Ok(())
        })
    }
}

impl Segment {
    /// Drops every resident page of a memory-mapped segment from this process's resident
    /// set (they stay in the page cache, and come back on the next access). Lookups touch
    /// pages all over a segment, and with blocks in row order a timestamp block shares its
    /// pages with metric blocks: a store calls this now and then (the dedup engine does at
    /// each refresh) so that its resident set holds what it touched lately, not every
    /// page it ever touched. A no-op for a segment held in memory.
    pub fn release_resident(&self) {
        if let Backing::Mmap(m) = &self.data {
            crate::mmap::release_before(m, m.len());
        }
    }

    /// Drops the resident pages of the file's bytes before `offset` (a memory-mapped
    /// segment of format version 3 or later, where the blocks of earlier rows lie before
    /// those of later rows): what a streaming pass is done with leaves the resident set.
    pub(super) fn release_before(&self, offset: u64) {
        if let Backing::Mmap(m) = &self.data {
            if self.footer.version >= 3 {
                crate::mmap::release_before(m, offset as usize);
            }
        }
    }
}
