//! Scalable filter semantics: growth, non-scaling, parameters, union.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tidemark_bloom::{Error, ScalableBloomFilter, Seed};

#[test]
fn defaults_match_redisbloom() {
    let f = ScalableBloomFilter::new(100, 0.01).unwrap();
    assert_eq!(f.expansion(), 2);
    assert!(!f.is_nonscaling());
    assert_eq!(f.num_layers(), 1);
    assert_eq!(f.capacity(), 100);
    let layer = f.layers()[0];
    assert_eq!(layer.capacity, 100);
    assert_eq!(layer.error_rate, 0.005);
    assert_eq!(layer.items, 0);
    assert_eq!(layer.size_bytes * 8, layer.num_bits);
}

#[test]
fn grows_only_when_a_new_item_meets_a_full_layer() {
    let mut f = ScalableBloomFilter::new(10, 0.01).unwrap();
    let mut added = 0;
    let mut i = 0u32;
    while added < 10 {
        added += u32::from(f.add(&i.to_be_bytes()).unwrap());
        i += 1;
    }
    assert_eq!(f.num_layers(), 1, "full, but no new item yet");
    // A present item does not grow it.
    assert!(!f.add(&0u32.to_be_bytes()).unwrap());
    assert_eq!(f.num_layers(), 1);
    while !f.add(&i.to_be_bytes()).unwrap() {
        i += 1;
    }
    assert_eq!(f.num_layers(), 2);
    let layers = f.layers();
    assert_eq!(layers[1].capacity, 20);
    assert_eq!(layers[1].error_rate, 0.0025);
    assert_eq!(layers[1].items, 1);
    assert_eq!(f.capacity(), 30);
    assert_eq!(f.len(), 11);
}

#[test]
fn expansion_one_keeps_the_layer_size() {
    // RedisBloom's own case: capacity 4, EXPANSION 1, items "0".."99".
    let mut f = ScalableBloomFilter::builder(4, 0.01)
        .expansion(1)
        .build()
        .unwrap();
    for i in 0..100 {
        f.add(i.to_string().as_bytes()).unwrap();
    }
    assert!(f.layers().iter().all(|l| l.capacity == 4));
    assert_eq!(f.num_layers() as u64, f.len().div_ceil(4));
    assert!(f.num_layers() >= 23 && f.num_layers() <= 25);
}

#[test]
fn nonscaling_filter_reports_full() {
    let mut f = ScalableBloomFilter::builder(3, 0.01)
        .nonscaling(true)
        .build()
        .unwrap();
    assert_eq!(
        f.layers()[0].error_rate,
        0.01,
        "no tightening without growth"
    );
    for item in ["a", "b", "c"] {
        assert!(f.add(item.as_bytes()).unwrap());
    }
    assert!(f.is_full());
    assert!(!f.add(b"a").unwrap(), "present items are still answered");
    assert_eq!(f.add(b"d"), Err(Error::Full { capacity: 3 }));
    assert_eq!(f.len(), 3);
    assert_eq!(f.num_layers(), 1);
}

#[test]
fn rejects_bad_parameters() {
    assert_eq!(
        ScalableBloomFilter::new(0, 0.01).unwrap_err(),
        Error::ZeroCapacity
    );
    for p in [0.0, 1.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            ScalableBloomFilter::new(100, p),
            Err(Error::InvalidFalsePositiveRate(_))
        ));
    }
    assert_eq!(
        ScalableBloomFilter::builder(100, 0.01)
            .expansion(0)
            .build()
            .unwrap_err(),
        Error::InvalidExpansion(0)
    );
    // Expansion 0 is harmless on a non-scaling filter: it never grows.
    assert!(
        ScalableBloomFilter::builder(100, 0.01)
            .expansion(0)
            .nonscaling(true)
            .build()
            .is_ok()
    );
    assert!(matches!(
        ScalableBloomFilter::new(u64::MAX, 0.01),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn growth_stops_with_an_error_not_an_overflow() {
    // The first layer alone would be too large; the error says so.
    assert!(matches!(
        ScalableBloomFilter::builder(1 << 40, 0.5).build(),
        Err(Error::TooLarge { .. })
    ));
    let mut f = ScalableBloomFilter::builder(1, 1e-300)
        .expansion(u32::MAX)
        .build()
        .unwrap();
    f.add(b"a").unwrap();
    // Layer 2 would hold 4 billion items at 2.5e-301: over the bit limit, refused
    // cleanly, and the filter keeps what it had.
    let err = f.add(b"b").unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { .. } | Error::CannotGrow { .. }),
        "{err}"
    );
    assert_eq!(f.len(), 1);
    assert!(f.contains(b"a"));
}

#[test]
fn union_requires_the_same_parameters() {
    let a = ScalableBloomFilter::new(100, 0.01).unwrap();
    for other in [
        ScalableBloomFilter::new(101, 0.01).unwrap(),
        ScalableBloomFilter::new(100, 0.02).unwrap(),
        ScalableBloomFilter::builder(100, 0.01)
            .expansion(4)
            .build()
            .unwrap(),
        ScalableBloomFilter::builder(100, 0.01)
            .nonscaling(true)
            .build()
            .unwrap(),
        ScalableBloomFilter::builder(100, 0.01)
            .seed(Seed::new(1, 1))
            .build()
            .unwrap(),
    ] {
        let mut a = a.clone();
        assert!(matches!(
            a.union(&other),
            Err(Error::IncompatibleFilters { .. })
        ));
        assert_eq!(a, ScalableBloomFilter::new(100, 0.01).unwrap());
    }
}

#[test]
fn union_of_disjoint_halves_answers_for_both() {
    let mut a = ScalableBloomFilter::new(1_000, 0.01).unwrap();
    let mut b = ScalableBloomFilter::new(1_000, 0.01).unwrap();
    for i in 0..3_000u32 {
        if i % 2 == 0 {
            a.add(&i.to_be_bytes()).unwrap();
        } else {
            b.add(&i.to_be_bytes()).unwrap();
        }
    }
    let mut u = a.clone();
    u.union(&b).unwrap();
    for i in 0..3_000u32 {
        assert!(u.contains(&i.to_be_bytes()));
    }
    assert!(u.len() >= 2_900 && u.len() <= 3_000, "{}", u.len());
    // The union keeps answering under its rate for absent items.
    let hits = (10_000u32..110_000)
        .filter(|i| u.contains(&i.to_be_bytes()))
        .count();
    // Two full first layers of different items stay side by side: the union's rate is
    // at most the sum of the two rates (2 × 1%), not the 10% an OR would give.
    assert_eq!(u.num_layers(), 3);
    assert!(hits < 2_000, "{hits} false positives in 100k");
    assert!(u.estimated_fpr() < 0.02);
}

#[test]
fn union_of_nonscaling_filters_keeps_one_layer() {
    let build = || {
        ScalableBloomFilter::builder(100, 0.01)
            .nonscaling(true)
            .build()
            .unwrap()
    };
    let (mut a, mut b) = (build(), build());
    for i in 0..80u32 {
        a.add(&i.to_be_bytes()).unwrap();
        b.add(&(1_000 + i).to_be_bytes()).unwrap();
    }
    a.union(&b).unwrap();
    assert_eq!(a.num_layers(), 1);
    assert!(a.is_full(), "160 items in a 100-item filter");
    assert!(matches!(a.add(b"new"), Err(Error::Full { .. })));
    for i in 0..80u32 {
        assert!(a.contains(&i.to_be_bytes()) && a.contains(&(1_000 + i).to_be_bytes()));
    }
    let back = ScalableBloomFilter::from_bytes(&a.to_bytes()).unwrap();
    assert_eq!(back, a);
}
