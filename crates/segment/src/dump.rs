//! A human-readable dump of a segment: layout, offsets, per-block sizes, decoded fields
//! and the first rows.

use std::fmt::Write as _;

use crate::codec::{
    CODEC_RAW, CODEC_ZSTD, PRESENCE_ROARING, decompress_block, describe_values, encoding_name,
};
use crate::error::{Place, Result};
use crate::format::{FOOTER_LEN, HEADER_LEN, SECTION_NAMES};
use crate::point::{Dim, MetricValue};
use crate::reader::Segment;

/// Rows, series and blocks listed at most.
const LIST_MAX: usize = 40;

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn dim(d: &Dim) -> String {
    match d {
        Dim::Keyword(s) => format!("{s:?}"),
        Dim::Int(v) => v.to_string(),
        Dim::UInt(v) => format!("{v}u"),
        Dim::Bool(v) => v.to_string(),
        Dim::Ip(ip) => ip.to_string(),
    }
}

fn metric(v: &MetricValue) -> String {
    match v {
        MetricValue::Gauge(g) => format!("{g:?}"),
        MetricValue::Counter(c) => format!("{c}i"),
    }
}

/// Dumps a segment's bytes as text: every section with offset, length and CRC, the
/// decoded footer, meta and series table, every block (offset, stored and decoded size,
/// codec, encoding), the bloom parameters and the first rows, with hex excerpts.
///
/// # Errors
/// The segment's open errors; block errors are printed in place instead.
pub fn dump(bytes: &[u8]) -> Result<String> {
    let seg = Segment::from_vec(bytes.to_vec())?;
    let f = seg.footer();
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(
        w,
        "segment: {} bytes, format version {}",
        bytes.len(),
        f.version
    );
    let _ = writeln!(
        w,
        "header @0 len {HEADER_LEN}: {}",
        hex(bytes.get(..HEADER_LEN).unwrap_or(&[]))
    );
    let fstart = bytes.len() - FOOTER_LEN;
    let _ = writeln!(w, "footer @{fstart} len {FOOTER_LEN}:");
    let _ = writeln!(
        w,
        "  rows {} series {} columns {}",
        f.row_count, f.series_count, f.column_count
    );
    let _ = writeln!(w, "  min_ts {} max_ts {}", f.min_ts, f.max_ts);
    let _ = writeln!(
        w,
        "  block_rows {} block_count {} flags {:#x}",
        f.block_rows, f.block_count, f.flags
    );
    for (name, s) in SECTION_NAMES.iter().zip(&f.sections) {
        let _ = writeln!(
            w,
            "  section {name:<9} @{} len {} crc {:#010x}",
            s.offset, s.len, s.crc
        );
    }
    let _ = writeln!(w, "  data_crc {:#010x}", f.data_crc);
    let _ = writeln!(
        w,
        "  tail (crc, magic): {}",
        hex(bytes.get(bytes.len() - 8..).unwrap_or(&[]))
    );

    let _ = writeln!(w, "meta:");
    if let Some((fpr, cap)) = seg.bloom_params() {
        let _ = writeln!(w, "  bloom sized for {cap} items at fpr {fpr}");
    }
    for (i, c) in seg.columns().iter().enumerate() {
        let _ = writeln!(
            w,
            "  column {i} {:?} {} span_shift {}",
            c.name,
            c.kind.name(),
            c.span_shift
        );
    }

    for (i, e) in seg.extra_columns().iter().enumerate() {
        let _ = writeln!(
            w,
            "  extra {i} {:?} {} span_shift {}",
            e.name,
            e.kind.name(),
            e.span_shift
        );
    }
    let _ = writeln!(w, "series table ({}):", seg.series_count());
    for (i, s) in seg.series().iter().take(LIST_MAX).enumerate() {
        let dims: Vec<String> = s
            .dims
            .iter()
            .map(|(n, v)| format!("{n}={}", dim(v)))
            .collect();
        let cols: Vec<String> = s
            .columns
            .iter()
            .map(|(c, p)| {
                format!(
                    "{c}:{}",
                    if *p == crate::Presence::Full {
                        "full"
                    } else {
                        "partial"
                    }
                )
            })
            .collect();
        let _ = writeln!(
            w,
            "  #{i} tsid {} rows {}+{} ts [{}, {}] dims {{{}}} columns [{}]{}",
            s.tsid,
            s.first_row,
            s.row_count,
            s.min_ts,
            s.max_ts,
            dims.join(", "),
            cols.join(" "),
            s.slots.as_ref().map_or(String::new(), |m| format!(
                " slots {}/{} of {} ms",
                m.occupied(),
                m.slots(),
                m.quantum()
            ))
        );
    }

    let _ = writeln!(w, "blocks:");
    let mut listed = 0usize;
    let ncols = seg.columns().len();
    for column in 0..=(ncols + seg.extra_columns().len()) as u32 {
        let name = match column.checked_sub(1).map(|c| c as usize) {
            None => "timestamps".to_owned(),
            Some(c) if c < ncols => seg
                .columns()
                .get(c)
                .map_or_else(String::new, |c| c.name.clone()),
            Some(c) => seg
                .extra_columns()
                .get(c - ncols)
                .map_or_else(String::new, |e| format!("extra {}", e.name)),
        };
        let span = seg.column_span_rows(column).unwrap_or(0);
        for block in 0..seg.column_block_count(column).unwrap_or(0) {
            if listed >= LIST_MAX {
                break;
            }
            listed += 1;
            let place = Place::Block { column, block };
            let e = match seg.block_ref(column, block) {
                Ok(e) => e,
                Err(err) => {
                    let _ = writeln!(w, "  {name} block {block}: {err}");
                    continue;
                }
            };
            if e.len == 0 {
                let _ = writeln!(w, "  {name} block {block}: empty");
                continue;
            }
            // The entry is unchecked here (the reader checks it on use): no overflow.
            let stored = e
                .offset
                .checked_add(u64::from(e.len))
                .and_then(|end| {
                    bytes.get(usize::try_from(e.offset).ok()?..usize::try_from(end).ok()?)
                })
                .unwrap_or(&[]);
            let codec = match stored.first() {
                Some(&CODEC_RAW) => "raw",
                Some(&CODEC_ZSTD) => "zstd",
                _ => "?",
            };
            let detail = match decompress_block(stored, u64::from(e.raw_len), 1 << 24, place) {
                Ok(raw) => {
                    if column == 0 {
                        format!("enc {}", encoding_name(raw.first().copied().unwrap_or(0)))
                    } else {
                        let presence = raw.first().copied().unwrap_or(0);
                        let enc_at = if presence == PRESENCE_ROARING {
                            let len = raw
                                .get(1..5)
                                .and_then(|b| b.try_into().ok())
                                .map_or(0, u32::from_le_bytes)
                                as usize;
                            5 + len
                        } else {
                            1
                        };
                        format!(
                            "presence {} enc {}{}",
                            if presence == PRESENCE_ROARING {
                                "roaring"
                            } else {
                                "series"
                            },
                            encoding_name(raw.get(enc_at).copied().unwrap_or(0)),
                            describe_values(raw.get(enc_at..).unwrap_or(&[]))
                        )
                    }
                }
                Err(err) => format!("error: {err}"),
            };
            let _ = writeln!(
                w,
                "  {name} block {block} rows {}+{span} @{} len {} raw {} crc {:#010x} {codec} {detail} | {}",
                u64::from(block) * span,
                e.offset,
                e.len,
                e.raw_len,
                e.crc,
                hex(stored.get(..8.min(stored.len())).unwrap_or(&[]))
            );
        }
    }

    if let Ok(Some(b)) = seg.bloom() {
        let _ = writeln!(
            w,
            "bloom: {} {} bits, {} hashes, {} items, fill {:.4}, {} bytes",
            b.layout(),
            b.num_bits(),
            b.num_hashes(),
            b.len(),
            b.fill_ratio(),
            b.size_bytes()
        );
    }
    if let Ok(Some(m)) = seg.id_index() {
        let _ = writeln!(
            w,
            "id index: fst with {} keys, {} bytes",
            m.len(),
            m.as_fst().size()
        );
    }

    let sizes = seg.size_breakdown();
    let _ = writeln!(
        w,
        "sizes: series {} timestamps {} metrics {} directory {} bloom {} id_index {} total {}",
        sizes.series_table,
        sizes.timestamps,
        sizes.metrics.iter().map(|(_, b)| b).sum::<u64>(),
        sizes.directory,
        sizes.bloom,
        sizes.id_index,
        sizes.total
    );

    let _ = writeln!(w, "first rows:");
    let mut shown = 0usize;
    let res = seg.scan_rows(0..LIST_MAX as u64, |r| {
        shown += 1;
        let vals: Vec<String> = seg
            .columns()
            .iter()
            .zip(r.metrics)
            .filter_map(|(c, v)| v.as_ref().map(|v| format!("{}={}", c.name, metric(v))))
            .collect();
        let _ = writeln!(
            w,
            "  row {} tsid {} ts {} {}",
            r.row,
            r.series.tsid,
            r.ts_millis,
            vals.join(" ")
        );
    });
    if let Err(e) = res {
        let _ = writeln!(w, "  error: {e}");
    }
    Ok(o)
}
