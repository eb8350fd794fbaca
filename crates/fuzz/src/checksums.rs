//! Checksum repair for the file-format targets.
//!
//! Every Tidemark file is checksummed, so almost every mutation of a valid file is
//! refused at the first CRC and the decoders behind it are never reached. Each file
//! target therefore reads the input twice: as given (the checks themselves are under
//! test) and with every CRC recomputed over the mutated bytes, which lets the fuzzer
//! explore the structure behind the checks. The layouts are those of `docs/format.md`,
//! `docs/bloom-format.md` and the module docs of the WAL, manifests and bloomd's files;
//! a repair never changes a byte other than a checksum, and never panics.

/// `bytes` with the CRC32 of a trailer `crc u32 | magic` (the CRC over every byte before
/// it) recomputed, or `None` when it already matches or the input is too short.
pub(crate) fn trailer(bytes: &[u8], magic_len: usize) -> Option<Vec<u8>> {
    let at = bytes.len().checked_sub(4 + magic_len)?;
    let mut out = bytes.to_vec();
    set_crc(&mut out, 0..at, at).then_some(out)
}

/// Writes the CRC32 of `range` at `at` (little-endian); whether a byte changed.
fn set_crc(bytes: &mut [u8], range: std::ops::Range<usize>, at: usize) -> bool {
    let Some(crc) = bytes.get(range).map(crc32fast::hash) else {
        return false;
    };
    match bytes.get_mut(at..at + 4) {
        Some(slot) if slot != crc.to_le_bytes() => {
            slot.copy_from_slice(&crc.to_le_bytes());
            true
        }
        _ => false,
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

/// A byte range `offset..offset + len` inside `limit`, from untrusted fields.
fn range(offset: u64, len: u64, limit: usize) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    (end <= limit).then_some(start..end)
}

/// A segment with its block CRCs (through the directory), the bloom filter's own
/// trailer, the section CRCs, the data CRC and the footer CRC recomputed, in that order
/// (each covers bytes the previous ones may have changed).
pub(crate) fn segment(bytes: &[u8]) -> Option<Vec<u8>> {
    const FOOTER_LEN: usize = tidemark_segment::FOOTER_LEN;
    const SECTIONS_AT: usize = 48;
    const SECTION_LEN: usize = 20;
    const DIRECTORY: usize = 2;
    const BLOOM: usize = 3;
    const SECTION_COUNT: usize = 5;
    let footer = bytes.len().checked_sub(FOOTER_LEN)?;
    let mut out = bytes.to_vec();
    let mut changed = false;
    let section = |out: &[u8], i: usize| {
        let at = footer + SECTIONS_AT + i * SECTION_LEN;
        range(u64_at(out, at)?, u64_at(out, at + 8)?, footer).map(|r| (r, at + 16))
    };
    if let Some((dir, _)) = section(&out, DIRECTORY) {
        let entries = dir.len() / tidemark_segment::DIR_ENTRY_LEN;
        for e in 0..entries {
            let at = dir.start + e * tidemark_segment::DIR_ENTRY_LEN;
            let block = u64_at(&out, at)
                .zip(u32_at(&out, at + 8))
                .and_then(|(offset, len)| range(offset, u64::from(len), footer));
            if let Some(block) = block.filter(|b| !b.is_empty()) {
                changed |= set_crc(&mut out, block, at + 16);
            }
        }
    }
    if let Some((bloom, _)) = section(&out, BLOOM)
        && let Some(fixed) = out.get(bloom.clone()).and_then(|b| trailer(b, 4))
        && let Some(slot) = out.get_mut(bloom)
    {
        slot.copy_from_slice(&fixed);
        changed = true;
    }
    for i in 0..SECTION_COUNT {
        if let Some((r, crc_at)) = section(&out, i).filter(|(r, _)| !r.is_empty()) {
            changed |= set_crc(&mut out, r, crc_at);
        }
    }
    changed |= set_crc(&mut out, 0..footer, footer + 148);
    changed |= set_crc(&mut out, footer..footer + 156, footer + 156);
    changed.then_some(out)
}

/// A write-ahead log with each frame's CRC (`len u32 | crc u32 | payload`, after the
/// 16-byte header) recomputed, up to the first frame that runs past the end.
pub(crate) fn wal(bytes: &[u8]) -> Option<Vec<u8>> {
    frames(bytes, 16)
}

/// A bloomd append-only log with each record's CRC recomputed (the same framing as
/// the WAL after a 16-byte header).
pub(crate) fn aof(bytes: &[u8]) -> Option<Vec<u8>> {
    frames(bytes, 16)
}

fn frames(bytes: &[u8], header: usize) -> Option<Vec<u8>> {
    let mut out = bytes.to_vec();
    let mut changed = false;
    let mut at = header;
    while let Some(len) = u32_at(&out, at) {
        let start = at + 8;
        let Some(end) = start.checked_add(len as usize) else {
            break;
        };
        if end > out.len() {
            break;
        }
        changed |= set_crc(&mut out, start..end, at + 4);
        at = end;
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_repairs_only_the_crc() {
        let mut file = b"body".to_vec();
        file.extend_from_slice(&crc32fast::hash(b"body").to_le_bytes());
        file.extend_from_slice(b"MAGC");
        assert_eq!(trailer(&file, 4), None);
        let mut broken = file.clone();
        broken[0] = b'B';
        let fixed = trailer(&broken, 4).unwrap_or_default();
        assert_eq!(fixed.len(), file.len());
        assert_eq!(&fixed[..4], b"Body");
        assert_eq!(&fixed[8..], b"MAGC");
        assert_eq!(trailer(b"ab", 4), None);
    }

    #[test]
    fn repairs_never_panic_on_short_or_wild_input() {
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let _ = segment(&bytes);
            let _ = wal(&bytes);
            let _ = aof(&bytes);
            let _ = trailer(&bytes, 8);
        }
    }
}
