//! A human-readable listing of encoded filter bytes, field by field, for debugging and for
//! the snapshot tests that pin the format.

use std::fmt::Write as _;

use crate::error::Result;
use crate::format::{
    self, FILTER_BODY_LEN, FilterRef, HEADER_LEN, KIND_SCALABLE, KIND_SCALABLE_SPLIT_BLOCK,
    KIND_SPLIT_BLOCK, LAYER_RECORD_LEN, SCALABLE_BODY_LEN, SCALABLE_SPLIT_BODY_LEN, TRAILER_LEN,
};
use crate::layout::{Blocked, Standard};
use crate::le::Reader;
use crate::split::{SPLIT_BODY_LEN, SplitBlockBloomFilterRef};
use crate::words::{LeWords, Words};

/// Lists every field of an encoded filter (any kind) with its offset and decoded value,
/// a short excerpt of each bit array, and whether the checksum matches.
///
/// # Errors
/// The structural errors of the decoders (bad magic, version, kind, truncation, corrupt
/// fields). A checksum mismatch is reported in the listing, not as an error, so that a
/// damaged file can still be inspected.
pub fn dump(bytes: &[u8]) -> Result<String> {
    let (header, _) = format::read_header(bytes)?;
    let mut out = String::new();
    let kind_name = match header.kind {
        1 => "standard",
        2 => "blocked",
        KIND_SCALABLE => "scalable",
        KIND_SPLIT_BLOCK => "split-block",
        KIND_SCALABLE_SPLIT_BLOCK => "scalable split-block",
        _ => "unknown",
    };
    let hash_name = if header.version == format::VERSION_1 {
        "SipHash-1-3, 128-bit"
    } else {
        header.hash64()?.name()
    };
    let _ = writeln!(out, "tidemark bloom filter: {} bytes", bytes.len());
    let _ = writeln!(out, "@{:<6} magic       {:?}", 0, "TMBL");
    let _ = writeln!(out, "@{:<6} version     {}", 4, header.version);
    let _ = writeln!(out, "@{:<6} kind        {} ({kind_name})", 8, header.kind);
    let _ = writeln!(out, "@{:<6} hash        {} ({hash_name})", 9, header.hash);
    let _ = writeln!(out, "@{:<6} flags       {:#06x}", 10, header.flags);
    let _ = writeln!(out, "@{:<6} reserved    0", 12);
    let _ = writeln!(out, "@{:<6} seed.k0     {:#018x}", 16, header.seed.k0);
    let _ = writeln!(out, "@{:<6} seed.k1     {:#018x}", 24, header.seed.k1);
    match header.kind {
        1 => dump_filter(
            &mut out,
            FilterRef::<Standard>::new_without_checksum(bytes)?,
        ),
        2 => dump_filter(&mut out, FilterRef::<Blocked>::new_without_checksum(bytes)?),
        KIND_SPLIT_BLOCK => dump_split(
            &mut out,
            SplitBlockBloomFilterRef::new_without_checksum(bytes)?,
        ),
        _ => dump_scalable(&mut out, bytes)?,
    }
    let crc_at = bytes.len() - TRAILER_LEN;
    let mut r = Reader::new(&bytes[crc_at..]);
    let stored = r.u32("checksum")?;
    let computed = crc32fast::hash(&bytes[..crc_at]);
    let status = if stored == computed {
        "ok".to_string()
    } else {
        format!("MISMATCH, computed {computed:#010x}")
    };
    let _ = writeln!(out, "@{crc_at:<6} crc32       {stored:#010x} ({status})");
    let _ = writeln!(out, "@{:<6} magic       {:?}", crc_at + 4, "TMBL");
    Ok(out)
}

fn words_line(out: &mut String, offset: usize, words: LeWords<'_>) {
    let n = words.num_words();
    let shown: Vec<String> = (0..n.min(4))
        .map(|i| format!("{:016x}", words.word(i)))
        .collect();
    let more = if n > 4 { " …" } else { "" };
    let _ = writeln!(
        out,
        "@{offset:<6} words       {n} × u64 ({} bytes), {} bits set: {}{more}",
        n * 8,
        words.count_ones(),
        shown.join(" ")
    );
}

fn dump_filter<L: crate::Layout>(out: &mut String, view: FilterRef<'_, L>) {
    let at = HEADER_LEN;
    let _ = writeln!(out, "@{:<6} num_bits    {}", at, view.num_bits());
    let _ = writeln!(out, "@{:<6} num_hashes  {}", at + 8, view.num_hashes());
    let _ = writeln!(out, "@{:<6} reserved    0", at + 12);
    let _ = writeln!(out, "@{:<6} len         {}", at + 16, view.len());
    words_line(out, at + FILTER_BODY_LEN, view.words());
}

fn dump_split(out: &mut String, view: SplitBlockBloomFilterRef<'_>) {
    let at = HEADER_LEN;
    let _ = writeln!(out, "@{:<6} num_bits    {}", at, view.num_bits());
    let _ = writeln!(out, "@{:<6} num_hashes  8", at + 8);
    let _ = writeln!(out, "@{:<6} reserved    0", at + 12);
    let _ = writeln!(out, "@{:<6} len         {}", at + 16, view.len());
    let _ = writeln!(out, "@{:<6} reserved    0", at + 24);
    bitset_line(out, at + SPLIT_BODY_LEN, view.bitset_bytes());
}

/// A split-block bitset: its size, set bits, and the first block's eight words.
fn bitset_line(out: &mut String, offset: usize, bitset: &[u8]) {
    let blocks = bitset.len() / 32;
    let ones: u32 = bitset.iter().map(|b| b.count_ones()).sum();
    let first: Vec<String> = bitset
        .chunks_exact(4)
        .take(8)
        .map(|c| format!("{:08x}", u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    let more = if blocks > 1 { " …" } else { "" };
    let _ = writeln!(
        out,
        "@{offset:<6} bitset      {blocks} × 256-bit block ({} bytes), {ones} bits set: {}{more}",
        bitset.len(),
        first.join(" ")
    );
}

fn dump_scalable(out: &mut String, bytes: &[u8]) -> Result<()> {
    let parts = format::decode_scalable(bytes, false)?;
    let p = parts.params;
    let at = HEADER_LEN;
    let split = matches!(p.layout, format::ScalableLayout::SplitBlock(_));
    let _ = writeln!(out, "@{:<6} capacity    {}", at, p.capacity);
    let _ = writeln!(out, "@{:<6} error       {}", at + 8, p.error);
    let _ = writeln!(out, "@{:<6} expansion   {}", at + 16, p.expansion);
    let _ = writeln!(out, "@{:<6} layers      {}", at + 20, parts.layers.len());
    let mut rec = at + SCALABLE_BODY_LEN;
    if split {
        let _ = writeln!(out, "@{:<6} tightening  {}", at + 24, p.tightening);
        let _ = writeln!(out, "@{:<6} reserved    0", at + 32);
        rec = at + SCALABLE_SPLIT_BODY_LEN;
    }
    for (i, l) in parts.layers.iter().enumerate() {
        let _ = writeln!(
            out,
            "@{rec:<6} layer {i}     capacity {} error {} len {} num_bits {} num_hashes {}",
            l.capacity, l.error, l.len, l.num_bits, l.num_hashes
        );
        rec += LAYER_RECORD_LEN;
    }
    let mut data = rec;
    for l in &parts.layers {
        if split {
            bitset_line(out, data, l.words.0);
        } else {
            words_line(out, data, l.words);
        }
        data += l.words.0.len();
    }
    Ok(())
}
