//! Property tests: the invariants the rest of Tidemark relies on.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use tidemark_tsid::{
    DimValue, MetricNames, SyntheticId, TSID_LEN, Tsid, TsidBuilder, TsidComputer,
};

/// A scalar dimension value as JSON and as a typed value.
#[derive(Debug, Clone)]
enum Scalar {
    Keyword(String),
    Int(i64),
    UInt(u64),
    Bool(bool),
}

impl Scalar {
    fn json(&self) -> String {
        match self {
            Scalar::Keyword(s) => serde_json::to_string(s).unwrap(),
            Scalar::Int(i) => i.to_string(),
            Scalar::UInt(u) => u.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }

    fn typed(&self) -> DimValue<'_> {
        match self {
            Scalar::Keyword(s) => DimValue::Keyword(s),
            Scalar::Int(i) => DimValue::I64(*i),
            Scalar::UInt(u) => DimValue::U64(*u),
            Scalar::Bool(b) => DimValue::Bool(*b),
        }
    }
}

fn scalar() -> impl Strategy<Value = Scalar> {
    prop_oneof![
        "[a-z0-9 é.-]{0,12}".prop_map(Scalar::Keyword),
        any::<i64>().prop_map(Scalar::Int),
        any::<u64>().prop_map(Scalar::UInt),
        any::<bool>().prop_map(Scalar::Bool),
    ]
}

/// Dimension sets with one- or two-segment names (`a`, `a.b`) that never
/// collide as a leaf and a parent (`a` with `a.b`).
fn dimension_set() -> impl Strategy<Value = BTreeMap<String, Scalar>> {
    prop::collection::btree_map("[a-e]{1,2}(\\.[x-z]{1,2})?", scalar(), 1..8).prop_filter(
        "a name is both a leaf and a parent",
        |m| {
            m.keys()
                .all(|k| !m.keys().any(|o| o.starts_with(&format!("{k}."))))
        },
    )
}

/// What a value means: an `i64` and a `u64` of equal value are equal.
#[derive(Debug, PartialEq)]
enum Meaning {
    Keyword(String),
    Int(i128),
    Bool(bool),
}

fn meaning(dims: &BTreeMap<String, Scalar>) -> Vec<(String, Meaning)> {
    dims.iter()
        .map(|(k, v)| {
            let m = match v {
                Scalar::Keyword(s) => Meaning::Keyword(s.clone()),
                Scalar::Int(i) => Meaning::Int(i128::from(*i)),
                Scalar::UInt(u) => Meaning::Int(i128::from(*u)),
                Scalar::Bool(b) => Meaning::Bool(*b),
            };
            (k.clone(), m)
        })
        .collect()
}

fn computer() -> TsidComputer {
    TsidBuilder::new()
        .metric_names(MetricNames::Off)
        .build()
        .unwrap()
}

fn pairs_tsid(c: &mut TsidComputer, dims: &BTreeMap<String, Scalar>) -> Tsid {
    let pairs: Vec<(&str, DimValue<'_>)> =
        dims.iter().map(|(k, v)| (k.as_str(), v.typed())).collect();
    c.tsid_from_pairs(&pairs, &[]).unwrap()
}

/// Writes `dims` as JSON text: keys in the order of `perm`, each
/// two-segment name either dotted or nested as `nest` says, with
/// whitespace as `spaces` says.
fn json_text(
    dims: &BTreeMap<String, Scalar>,
    perm: &[usize],
    nest: &[bool],
    spaces: bool,
) -> String {
    let sp = if spaces { " \n\t" } else { "" };
    let entries: Vec<(&String, &Scalar)> = dims.iter().collect();
    let mut flat: Vec<String> = Vec::new();
    let mut nested: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (i, &p) in perm.iter().enumerate() {
        let (k, v) = entries[p];
        match k.split_once('.') {
            Some((head, tail)) if nest[i] => nested
                .entry(head)
                .or_default()
                .push(format!("\"{tail}\"{sp}:{sp}{}", v.json())),
            _ => flat.push(format!("\"{k}\"{sp}:{sp}{}", v.json())),
        }
    }
    for (head, inner) in nested {
        flat.push(format!(
            "\"{head}\"{sp}:{sp}{{{}}}",
            inner.join(&format!(",{sp}"))
        ));
    }
    format!("{{{sp}{}{sp}}}", flat.join(&format!("{sp},")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn byte_order_is_tsid_then_timestamp_order(
        a in prop::array::uniform20(0u8..3), ta in any::<i64>(),
        b in prop::array::uniform20(0u8..3), tb in any::<i64>(),
        same_tsid in any::<bool>(),
    ) {
        let b = if same_tsid { a } else { b };
        let x = SyntheticId::new(Tsid::from_bytes(a), ta);
        let y = SyntheticId::new(Tsid::from_bytes(b), tb);
        prop_assert_eq!(x.to_bytes().cmp(&y.to_bytes()), (a, ta).cmp(&(b, tb)));
        prop_assert_eq!(x.cmp(&y), (a, ta).cmp(&(b, tb)));
    }

    #[test]
    fn text_round_trips(bytes in prop::array::uniform20(any::<u8>()), ts in any::<i64>()) {
        let id = SyntheticId::new(Tsid::from_bytes(bytes), ts);
        let back = SyntheticId::parse(&id.to_string()).unwrap();
        prop_assert_eq!(back, id);
        prop_assert_eq!(*back.tsid().as_bytes(), bytes);
        prop_assert_eq!(back.ts_millis(), ts);
        prop_assert_eq!(Tsid::from_hex(&id.tsid().to_string()).unwrap(), id.tsid());
    }

    #[test]
    fn parse_never_panics(text in ".{0,40}") {
        // Whatever the input, parse answers Ok or Err; an Ok round-trips.
        if let Ok(id) = SyntheticId::parse(&text) {
            prop_assert_eq!(id.to_string(), text);
        }
    }

    #[test]
    fn key_order_and_nesting_do_not_change_the_tsid(
        (dims, perm, nest) in dimension_set().prop_flat_map(|d| {
            let n = d.len();
            (
                Just(d),
                Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
                prop::collection::vec(any::<bool>(), n),
            )
        }),
        spaces in any::<bool>(),
        rev in any::<bool>(),
    ) {
        let text = json_text(&dims, &perm, &nest, spaces);
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let names: Vec<&String> = dims.keys().collect();
        let mut c = TsidBuilder::new()
            .dimensions(names.iter().map(|s| s.as_str()))
            .metric_names(MetricNames::Off)
            .build()
            .unwrap();
        let from_json = c.tsid(&doc).unwrap();
        let mut pairs: Vec<(&str, DimValue<'_>)> = dims.iter().map(|(k, v)| (k.as_str(), v.typed())).collect();
        if rev {
            pairs.reverse();
        }
        let from_pairs = c.tsid_from_pairs(&pairs, &[]).unwrap();
        prop_assert_eq!(from_json, from_pairs, "{}", text);
    }

    #[test]
    fn distinct_dimension_sets_give_distinct_tsids(a in dimension_set(), b in dimension_set()) {
        let mut c = computer();
        let (ta, tb) = (pairs_tsid(&mut c, &a), pairs_tsid(&mut c, &b));
        prop_assert_eq!(ta == tb, meaning(&a) == meaning(&b));
    }
}

/// A large deterministic sample: 300,000 distinct dimension sets (values,
/// names, types and set sizes all vary) give 300,000 distinct tsids, and
/// distinct 128-bit hash parts.
#[test]
fn no_collision_over_a_large_sample() {
    let mut c = computer();
    let mut tsids = HashSet::new();
    let mut hashes = HashSet::new();
    let mut n = 0;
    let hosts: Vec<String> = (0..1000).map(|i| format!("host-{i}")).collect();
    for (i, host) in hosts.iter().enumerate() {
        for j in 0..100u64 {
            let i = i as i64;
            let sets: [Vec<(&str, DimValue<'_>)>; 3] = [
                vec![("host", DimValue::Keyword(host)), ("pid", DimValue::U64(j))],
                vec![
                    ("host", DimValue::Keyword(host)),
                    ("port", DimValue::I64(-(j as i64) - 1)),
                    ("up", DimValue::Bool(i % 2 == 0)),
                ],
                vec![
                    ("node", DimValue::Keyword(host)),
                    ("pid", DimValue::U64(j)),
                    ("rack", DimValue::I64(i)),
                ],
            ];
            for set in &sets {
                let t = c.tsid_from_pairs(set, &[]).unwrap();
                assert!(tsids.insert(t), "collision at {set:?}");
                hashes.insert(t.hash128());
                n += 1;
            }
        }
    }
    assert_eq!(n, 300_000);
    assert_eq!(tsids.len(), n);
    assert_eq!(hashes.len(), n);
    assert_eq!(TSID_LEN, 20);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The one-pass walk (metric names discovered) equals the lookup path
    /// (metric names listed) and typed pairs: fast path against models.
    #[test]
    fn one_pass_walk_equals_lookups_and_pairs(
        dims in dimension_set(),
        metrics in prop::collection::btree_set("m[a-c]{1,2}(\\.[x-z])?", 0..4),
        nest in any::<bool>(),
    ) {
        let mut doc = serde_json::Map::new();
        for (k, v) in &dims {
            let value: serde_json::Value = serde_json::from_str(&v.json()).unwrap();
            match k.split_once('.') {
                Some((head, tail)) if nest => {
                    let inner = doc.entry(head.to_owned()).or_insert_with(|| serde_json::json!({}));
                    inner[tail] = value;
                }
                _ => { doc.insert(k.clone(), value); }
            }
        }
        let metrics: Vec<&String> = metrics.iter().filter(|m| !metrics.iter().any(|o| o.starts_with(&format!("{m}.")))).collect();
        for m in &metrics {
            doc.insert((*m).clone(), serde_json::json!(1.5));
        }
        let doc = serde_json::Value::Object(doc);
        let names: Vec<&str> = dims.keys().map(String::as_str).collect();
        let mut walk = TsidBuilder::new().dimensions(names.iter().copied()).build().unwrap();
        let mut listed = TsidBuilder::new()
            .dimensions(names.iter().copied())
            .metric_names(MetricNames::Listed(metrics.iter().map(|m| (*m).clone()).collect()))
            .build()
            .unwrap();
        let metric_refs: Vec<&str> = metrics.iter().map(|m| m.as_str()).collect();
        let pairs: Vec<(&str, DimValue<'_>)> = dims.iter().map(|(k, v)| (k.as_str(), v.typed())).collect();
        let t = walk.tsid(&doc).unwrap();
        prop_assert_eq!(t, listed.tsid(&doc).unwrap());
        prop_assert_eq!(t, walk.tsid_from_pairs(&pairs, &metric_refs).unwrap());
        let values: Vec<Option<DimValue<'_>>> = dims.values().map(|v| Some(v.typed())).collect();
        prop_assert_eq!(t, walk.tsid_from_values(&values, &metric_refs).unwrap());
    }
}
