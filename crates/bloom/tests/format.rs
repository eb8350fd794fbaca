//! The byte format: round trips, zero-copy views, corruption, snapshots and golden files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tidemark_bloom::{
    BlockedBloomFilter, BlockedBloomFilterRef, BloomFilter, BloomFilterRef, Error, Hash64,
    ScalableBloomFilter, ScalableBloomFilterRef, Seed, SplitBlockBloomFilter,
    SplitBlockBloomFilterRef, dump,
};

fn small_standard() -> BloomFilter {
    let mut f = BloomFilter::with_shape(128, 3).unwrap();
    for item in ["a", "b", "c"] {
        f.insert(item.as_bytes());
    }
    f
}

fn small_blocked() -> BlockedBloomFilter {
    let mut f = BlockedBloomFilter::with_shape(512, 4).unwrap();
    for item in ["a", "b", "c"] {
        f.insert(item.as_bytes());
    }
    f
}

fn small_scalable() -> ScalableBloomFilter {
    let mut f = ScalableBloomFilter::new(2, 0.1).unwrap();
    for item in ["a", "b", "c", "d", "e", "f", "g"] {
        f.add(item.as_bytes()).unwrap();
    }
    f
}

fn small_split_block() -> SplitBlockBloomFilter {
    let mut f = SplitBlockBloomFilter::with_num_blocks(2)
        .unwrap()
        .with_hasher(Hash64::PARQUET);
    for item in ["a", "b", "c"] {
        f.insert(item.as_bytes());
    }
    f
}

fn small_scalable_split_block() -> ScalableBloomFilter {
    let mut f = ScalableBloomFilter::builder(2, 0.1)
        .split_block(Hash64::XXH3)
        .build()
        .unwrap();
    for item in ["a", "b", "c", "d", "e", "f", "g"] {
        f.add(item.as_bytes()).unwrap();
    }
    f
}

#[test]
fn round_trips_the_split_block_kinds() {
    let f = small_split_block();
    let bytes = f.to_bytes();
    assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 2);
    assert_eq!(SplitBlockBloomFilter::from_bytes(&bytes).unwrap(), f);
    let view = SplitBlockBloomFilterRef::new(&bytes).unwrap();
    assert!(view.contains(b"a") && view.contains(b"b") && view.contains(b"c"));
    assert_eq!(view.hasher(), Hash64::PARQUET);
    assert_eq!(view.len(), 3);
    assert_eq!(view.fill_ratio(), f.fill_ratio());
    assert_eq!(view.estimated_fpr(), f.estimated_fpr());
    // The bitset sits at offset 64 and is Parquet's bytes.
    assert_eq!(&bytes[64..64 + 64], f.to_bitset_bytes().as_slice());
    assert_eq!(view.bitset_bytes(), f.to_bitset_bytes().as_slice());

    let f = small_scalable_split_block();
    assert!(f.num_layers() > 1);
    let bytes = f.to_bytes();
    assert_eq!(ScalableBloomFilter::from_bytes(&bytes).unwrap(), f);
    let view = ScalableBloomFilterRef::new(&bytes).unwrap();
    assert_eq!(view.layers(), f.layers());
    for item in ["a", "b", "c", "d", "e", "f", "g"] {
        assert!(view.contains(item.as_bytes()));
    }
}

#[test]
fn version_1_kinds_are_still_written_as_version_1() {
    // Segments embed blocked filters: their bytes must not change with the new kinds.
    for bytes in [
        small_standard().to_bytes(),
        small_blocked().to_bytes(),
        small_scalable().to_bytes(),
    ] {
        assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 1);
    }
}

#[test]
fn a_kind_under_the_wrong_version_is_refused() {
    let mut bytes = small_standard().to_bytes();
    bytes[4] = 2;
    assert!(matches!(
        BloomFilter::from_bytes(&bytes),
        Err(Error::Corrupt { field: "kind", .. })
    ));
    let mut bytes = small_split_block().to_bytes();
    bytes[4] = 1;
    assert!(matches!(
        SplitBlockBloomFilter::from_bytes(&bytes),
        Err(Error::Corrupt { field: "kind", .. })
    ));
}

#[test]
fn round_trips_every_kind() {
    let f = small_standard();
    let bytes = f.to_bytes();
    assert_eq!(BloomFilter::from_bytes(&bytes).unwrap(), f);
    let view = BloomFilterRef::new(&bytes).unwrap();
    assert!(view.contains(b"a") && view.contains(b"b") && view.contains(b"c"));
    assert_eq!(view.len(), 3);
    assert_eq!(view.num_bits(), 128);
    assert_eq!(view.fill_ratio(), f.fill_ratio());

    let f = small_blocked();
    let bytes = f.to_bytes();
    assert_eq!(BlockedBloomFilter::from_bytes(&bytes).unwrap(), f);
    let view = BlockedBloomFilterRef::new(&bytes).unwrap();
    assert!(view.contains(b"a") && view.contains(b"c"));
    assert_eq!(view.estimated_fpr(), f.estimated_fpr());

    let f = small_scalable();
    assert_eq!(f.num_layers(), 3);
    let bytes = f.to_bytes();
    assert_eq!(ScalableBloomFilter::from_bytes(&bytes).unwrap(), f);
    let view = ScalableBloomFilterRef::new(&bytes).unwrap();
    assert_eq!(view.len(), 7);
    assert_eq!(view.layers(), f.layers());
    for item in ["a", "b", "c", "d", "e", "f", "g"] {
        assert!(view.contains(item.as_bytes()));
    }
}

#[test]
fn custom_seed_survives_the_round_trip() {
    let mut f = BloomFilter::with_capacity(100, 0.01)
        .unwrap()
        .with_seed(Seed::new(1, 2));
    f.insert(b"x");
    let g = BloomFilter::from_bytes(&f.to_bytes()).unwrap();
    assert_eq!(g.seed(), Seed::new(1, 2));
    assert!(g.contains(b"x"));
}

#[test]
fn rejects_the_wrong_kind() {
    let bytes = small_standard().to_bytes();
    assert!(matches!(
        BlockedBloomFilter::from_bytes(&bytes),
        Err(Error::WrongKind { found: 1, .. })
    ));
    assert!(matches!(
        ScalableBloomFilter::from_bytes(&bytes),
        Err(Error::WrongKind { found: 1, .. })
    ));
    let bytes = small_scalable().to_bytes();
    assert!(matches!(
        BloomFilter::from_bytes(&bytes),
        Err(Error::WrongKind { found: 3, .. })
    ));
}

#[test]
fn rejects_foreign_bytes() {
    assert!(matches!(
        BloomFilter::from_bytes(b""),
        Err(Error::Truncated { .. })
    ));
    let junk = vec![0x42u8; 200];
    assert!(matches!(
        BloomFilter::from_bytes(&junk),
        Err(Error::BadMagic { .. })
    ));
    let mut bytes = small_standard().to_bytes();
    bytes[4] = 9; // version
    assert!(matches!(
        BloomFilter::from_bytes(&bytes),
        Err(Error::UnsupportedVersion { found: 9, .. })
    ));
}

/// Every prefix and every single-byte change of a small encoding is an error, never a
/// panic, for every decoder.
fn assert_every_corruption_is_an_error(bytes: &[u8]) {
    type Decoder = (&'static str, fn(&[u8]) -> bool);
    let decoders: [Decoder; 8] = [
        ("standard", |b| BloomFilter::from_bytes(b).is_ok()),
        ("blocked", |b| BlockedBloomFilter::from_bytes(b).is_ok()),
        ("scalable", |b| ScalableBloomFilter::from_bytes(b).is_ok()),
        ("split-block", |b| {
            SplitBlockBloomFilter::from_bytes(b).is_ok()
        }),
        ("standard view", |b| BloomFilterRef::new(b).is_ok()),
        ("blocked view", |b| BlockedBloomFilterRef::new(b).is_ok()),
        ("scalable view", |b| ScalableBloomFilterRef::new(b).is_ok()),
        ("split-block view", |b| {
            SplitBlockBloomFilterRef::new(b).is_ok()
        }),
    ];
    let accepted = decoders.iter().filter(|(_, ok)| ok(bytes)).count();
    assert_eq!(accepted, 2, "exactly the owned decoder and its view accept");
    for len in 0..bytes.len() {
        for (name, ok) in &decoders {
            assert!(!ok(&bytes[..len]), "{name} accepted a {len}-byte prefix");
        }
        assert!(dump(&bytes[..len]).is_err());
    }
    let mut damaged = bytes.to_vec();
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            damaged[i] ^= flip;
            for (name, ok) in &decoders {
                assert!(!ok(&damaged), "{name} accepted byte {i} ^ {flip:#x}");
            }
            // The listing never panics; it may succeed (it reports a bad checksum).
            let _ = dump(&damaged);
            damaged[i] ^= flip;
        }
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    for (name, ok) in &decoders {
        assert!(!ok(&longer), "{name} accepted a trailing byte");
    }
}

#[test]
fn rejects_every_truncation_and_byte_flip() {
    assert_every_corruption_is_an_error(&small_standard().to_bytes());
    assert_every_corruption_is_an_error(&small_blocked().to_bytes());
    assert_every_corruption_is_an_error(&small_scalable().to_bytes());
    assert_every_corruption_is_an_error(&small_split_block().to_bytes());
    assert_every_corruption_is_an_error(&small_scalable_split_block().to_bytes());
    for name in [
        "v1-standard.bin",
        "v1-blocked.bin",
        "v1-scalable.bin",
        "v2-split-block.bin",
        "v2-scalable-split-block.bin",
    ] {
        assert_every_corruption_is_an_error(&std::fs::read(fixture(name)).unwrap());
    }
}

#[test]
fn scalable_view_without_checksum_defers_to_verify() {
    let mut bytes = small_scalable().to_bytes();
    let at = bytes.len() - 20; // inside the last layer's words
    bytes[at] ^= 0x01;
    let view = ScalableBloomFilterRef::new_without_checksum(&bytes).unwrap();
    assert!(matches!(view.verify(), Err(Error::ChecksumMismatch { .. })));
    let good = small_scalable().to_bytes();
    ScalableBloomFilterRef::new_without_checksum(&good)
        .unwrap()
        .verify()
        .unwrap();
}

#[test]
fn view_without_checksum_defers_to_verify() {
    let mut bytes = small_standard().to_bytes();
    bytes[60] ^= 0x10; // a bit of the array
    let view = BloomFilterRef::new_without_checksum(&bytes).unwrap();
    assert!(matches!(view.verify(), Err(Error::ChecksumMismatch { .. })));
    assert!(matches!(
        BloomFilterRef::new(&bytes),
        Err(Error::ChecksumMismatch { .. })
    ));
}

#[test]
fn dump_snapshots_pin_the_layout() {
    insta::assert_snapshot!("standard", dump(&small_standard().to_bytes()).unwrap());
    insta::assert_snapshot!("blocked", dump(&small_blocked().to_bytes()).unwrap());
    insta::assert_snapshot!("scalable", dump(&small_scalable().to_bytes()).unwrap());
    insta::assert_snapshot!(
        "split_block",
        dump(&small_split_block().to_bytes()).unwrap()
    );
    insta::assert_snapshot!(
        "scalable_split_block",
        dump(&small_scalable_split_block().to_bytes()).unwrap()
    );
}

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/bloom")
        .join(name)
}

/// Files written by format versions 1 and 2 must open, bit for bit, in every later build. To
/// regenerate after a deliberate format change (which must bump the version and keep the
/// old files), run with `TIDEMARK_BLESS=1`.
#[test]
fn golden_files_of_every_version_still_open() {
    let cases: [(&str, Vec<u8>); 5] = [
        ("v1-standard.bin", small_standard().to_bytes()),
        ("v1-blocked.bin", small_blocked().to_bytes()),
        ("v1-scalable.bin", small_scalable().to_bytes()),
        ("v2-split-block.bin", small_split_block().to_bytes()),
        (
            "v2-scalable-split-block.bin",
            small_scalable_split_block().to_bytes(),
        ),
    ];
    for (name, fresh) in cases {
        let path = fixture(name);
        if std::env::var_os("TIDEMARK_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &fresh).unwrap();
        }
        let golden = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(golden, fresh, "{name}: this build writes different bytes");
    }
    let golden = std::fs::read(fixture("v1-standard.bin")).unwrap();
    let f = BloomFilter::from_bytes(&golden).unwrap();
    assert!(f.contains(b"a") && f.contains(b"b") && f.contains(b"c"));
    let golden = std::fs::read(fixture("v1-scalable.bin")).unwrap();
    let f = ScalableBloomFilter::from_bytes(&golden).unwrap();
    assert_eq!(f.len(), 7);
    let golden = std::fs::read(fixture("v1-blocked.bin")).unwrap();
    let f = BlockedBloomFilter::from_bytes(&golden).unwrap();
    assert!(f.contains(b"a") && f.contains(b"b") && f.contains(b"c"));
    let golden = std::fs::read(fixture("v2-split-block.bin")).unwrap();
    let f = SplitBlockBloomFilter::from_bytes(&golden).unwrap();
    assert!(f.contains(b"a") && f.contains(b"b") && f.contains(b"c"));
    assert_eq!(f.hasher(), Hash64::PARQUET);
    let golden = std::fs::read(fixture("v2-scalable-split-block.bin")).unwrap();
    let f = ScalableBloomFilter::from_bytes(&golden).unwrap();
    assert_eq!(f.len(), 7);
    for item in ["a", "b", "c", "d", "e", "f", "g"] {
        assert!(f.contains(item.as_bytes()));
    }
}
