//! The dimension index of a segment: for each dimension name, its distinct values in
//! sorted order, each with a roaring bitmap of the series (ordinals in the segment's
//! series table) that have it. A filter evaluates once per distinct value, not per
//! series: a term is a binary search, a prefix a range of the sorted table, a regex or
//! any predicate a pass over one dimension's values; negation is a bitmap difference.

use std::collections::BTreeMap;

use roaring::RoaringBitmap;
use tidemark_segment::{Dim, Segment};

/// The text of a dimension value, as filters compare it: keywords as they are, numbers
/// and booleans in decimal, IPv4-mapped addresses as IPv4.
pub fn dim_value_text(d: &Dim) -> String {
    match d {
        Dim::Keyword(s) => s.clone(),
        Dim::Int(i) => i.to_string(),
        Dim::UInt(u) => u.to_string(),
        Dim::Bool(b) => b.to_string(),
        Dim::Ip(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => ip.to_string(),
        },
    }
}

/// A segment's postings from (dimension, value) to series ordinals.
#[derive(Debug, Clone, Default)]
pub struct Postings {
    /// By name: (value text, series) sorted by value text.
    dims: BTreeMap<String, Vec<(String, RoaringBitmap)>>,
    series: u32,
}

impl Postings {
    /// Builds the postings of `segment` from its series table (one pass, no row read).
    pub fn build(segment: &Segment) -> Postings {
        let mut dims: BTreeMap<String, BTreeMap<String, RoaringBitmap>> = BTreeMap::new();
        let series = segment.series();
        for (ord, s) in series.iter().enumerate() {
            for (name, value) in s.dims.iter() {
                dims.entry(name.clone())
                    .or_default()
                    .entry(dim_value_text(value))
                    .or_default()
                    .insert(ord as u32);
            }
        }
        Postings {
            dims: dims
                .into_iter()
                .map(|(n, values)| (n, values.into_iter().collect()))
                .collect(),
            series: series.len() as u32,
        }
    }

    /// Every series of the segment.
    pub fn all(&self) -> RoaringBitmap {
        let mut b = RoaringBitmap::new();
        b.insert_range(0..self.series);
        b
    }

    /// The dimension names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.dims.keys().map(String::as_str)
    }

    /// The distinct values of `name`, sorted, with their series counts.
    pub fn values(&self, name: &str) -> impl Iterator<Item = (&str, u64)> {
        self.dims
            .get(name)
            .into_iter()
            .flatten()
            .map(|(v, b)| (v.as_str(), b.len()))
    }

    /// Series whose `name` is `value`.
    pub fn term(&self, name: &str, value: &str) -> RoaringBitmap {
        let Some(values) = self.dims.get(name) else {
            return RoaringBitmap::new();
        };
        match values.binary_search_by(|(v, _)| v.as_str().cmp(value)) {
            Ok(i) => values.get(i).map(|(_, b)| b.clone()).unwrap_or_default(),
            Err(_) => RoaringBitmap::new(),
        }
    }

    /// Series whose `name` starts with `prefix`.
    pub fn prefix(&self, name: &str, prefix: &str) -> RoaringBitmap {
        let mut out = RoaringBitmap::new();
        let Some(values) = self.dims.get(name) else {
            return out;
        };
        let lo = values.partition_point(|(v, _)| v.as_str() < prefix);
        for (v, b) in values.iter().skip(lo) {
            if !v.starts_with(prefix) {
                break;
            }
            out |= b;
        }
        out
    }

    /// Series whose `name` has a value `pred` accepts (asked once per distinct value).
    pub fn matching(&self, name: &str, mut pred: impl FnMut(&str) -> bool) -> RoaringBitmap {
        let mut out = RoaringBitmap::new();
        for (v, b) in self.dims.get(name).into_iter().flatten() {
            if pred(v) {
                out |= b;
            }
        }
        out
    }

    /// Series that have dimension `name` at all.
    pub fn has(&self, name: &str) -> RoaringBitmap {
        self.matching(name, |_| true)
    }
}
