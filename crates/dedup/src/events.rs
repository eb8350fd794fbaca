//! Event mode: ids for data without a natural key.
//!
//! An event's id is a content fingerprint (a `tidemark-tsid` [`Fingerprinter`] over the
//! event's fields) with its timestamp. Inside the engine it is a [`SyntheticId`] whose
//! 20 "tsid" bytes are the digest's first 20 bytes (zero-padded for 16-byte methods):
//! the live map, bloom filters and id indexes take it as they take a time-series id.
//! The id is never stored: a verification recomputes the fingerprint of the candidate
//! rows (those of the same timestamp) from their stored fields.
//!
//! Its text form (`_id`) is the timestamp prefix, 16 lowercase hex digits of
//! `ts_millis XOR 2^63` (so ids sort by time over the whole `i64` range), then the
//! digest's bytes (at most 20) in lowercase hex.

use std::sync::Mutex;

use serde_json::{Map, Value};
use tidemark_segment::{Dim, Extra, MetricValue, Point};
use tidemark_tsid::{FingerprintBuilder, FingerprintMethod, Fingerprinter, TSID_LEN, Tsid};

use crate::error::{Error, Result};
use tidemark_tsid::SyntheticId;

/// What the engine stores: time series (the id is the series' tsid and the timestamp)
/// or events (the id is a fingerprint of the event's content and its timestamp).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Data points of time series: `id = (tsid, timestamp)`; one point per series and
    /// timestamp.
    #[default]
    TimeSeries,
    /// Events without a natural key. A point's `tsid` names its *stream* (the tsid of
    /// its dimensions; no dimensions is fine) and many events of a stream may share a
    /// timestamp; the id is the fingerprint of the fields [`EventIds`] names.
    Events(EventIds),
}

/// How event ids are computed: a fingerprint method, an optional key (HMAC, seed) and
/// the fields hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventIds {
    method: FingerprintMethod,
    key: Option<Vec<u8>>,
    fields: Vec<String>,
}

impl EventIds {
    /// Fingerprints with `method`, over every field of the event (dimensions, metrics
    /// and extras, by name; the timestamp is part of the id apart).
    pub fn new(method: FingerprintMethod) -> EventIds {
        EventIds {
            method,
            key: None,
            fields: Vec::new(),
        }
    }

    /// A key: HMAC key for the cryptographic methods, 4-byte seed for MurmurHash3,
    /// 16-byte key for SipHash.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> EventIds {
        self.key = Some(key.into());
        self
    }

    /// Hashes only these fields (flat names, as in the point: `"user.name"`); an event
    /// lacking one of them hashes it as missing.
    pub fn fields<I, S>(mut self, fields: I) -> EventIds
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.fields = fields.into_iter().map(Into::into).collect();
        self
    }

    /// The method.
    pub fn method(&self) -> FingerprintMethod {
        self.method
    }

    /// The fields hashed (empty: all).
    pub fn field_names(&self) -> &[String] {
        &self.fields
    }

    pub(crate) fn keyer(&self) -> Result<EventKeyer> {
        let mut b = FingerprintBuilder::new(self.method).fields(self.fields.iter().cloned());
        if let Some(k) = &self.key {
            b = b.key(k.clone());
        }
        let fp = b.build().map_err(|e| Error::InvalidConfig {
            name: "event_ids",
            detail: e.to_string(),
        })?;
        let mut fields = self.fields.clone();
        fields.sort();
        Ok(EventKeyer {
            digest_len: self.method.output_len().min(TSID_LEN),
            fields,
            fp: Mutex::new(fp),
        })
    }
}

/// Computes event ids (a [`Fingerprinter`] behind a lock: it reuses a buffer).
#[derive(Debug)]
pub(crate) struct EventKeyer {
    digest_len: usize,
    /// Fields hashed, sorted (empty: all).
    fields: Vec<String>,
    fp: Mutex<Fingerprinter>,
}

impl EventKeyer {
    /// The id of an event, or why it has none.
    pub(crate) fn id_of(&self, p: &Point) -> std::result::Result<SyntheticId, String> {
        let doc = event_doc(p);
        let mut key = [0u8; TSID_LEN];
        let mut fp = self
            .fp
            .lock()
            .map_err(|_| "fingerprinter lock poisoned".to_owned())?;
        fp.digest_into(&doc, &mut key).map_err(|e| e.to_string())?;
        Ok(SyntheticId::new(Tsid::from_bytes(key), p.ts_millis))
    }

    /// Whether every dimension of `p` is hashed: then two events with one id have the
    /// same dimensions, so the same stream.
    pub(crate) fn covers_dims(&self, p: &Point) -> bool {
        self.fields.is_empty()
            || p.dims
                .iter()
                .all(|(name, _)| self.fields.binary_search(name).is_ok())
    }

    pub(crate) fn format(&self, id: &SyntheticId) -> String {
        let mut out = format!("{:016x}", (id.ts_millis() as u64) ^ (1 << 63));
        for b in id.tsid().as_bytes().iter().take(self.digest_len) {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    pub(crate) fn parse(&self, text: &str) -> Result<SyntheticId> {
        let bad = |detail: String| Error::BadId {
            text: text.to_owned(),
            detail,
        };
        let want = 16 + 2 * self.digest_len;
        if text.len() != want || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(format!(
                "expected {want} hex digits (16 of timestamp, then the fingerprint)"
            )));
        }
        if text.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(bad("expected lowercase hex".into()));
        }
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|e| bad(e.to_string()));
        let ts = (hex(text.get(..16).unwrap_or_default())? ^ (1 << 63)) as i64;
        let mut key = [0u8; TSID_LEN];
        for (i, k) in key.iter_mut().enumerate().take(self.digest_len) {
            let at = 16 + 2 * i;
            *k = hex(text.get(at..at + 2).unwrap_or_default())? as u8;
        }
        Ok(SyntheticId::new(Tsid::from_bytes(key), ts))
    }
}

/// The event as the flat JSON object its fingerprint hashes: every dimension, metric
/// and extra by name (the timestamp is not in it).
pub(crate) fn event_doc(p: &Point) -> Value {
    let mut map = Map::new();
    for (name, d) in &p.dims {
        let v = match d {
            Dim::Keyword(s) => Value::from(s.as_str()),
            Dim::Int(i) => Value::from(*i),
            Dim::UInt(u) => Value::from(*u),
            Dim::Bool(b) => Value::from(*b),
            Dim::Ip(ip) => Value::from(ip.to_string()),
        };
        map.insert(name.clone(), v);
    }
    for (name, m) in &p.metrics {
        let v = match m {
            // Non-finite gauges have no JSON number: their bits keep them apart.
            MetricValue::Gauge(g) => serde_json::Number::from_f64(*g).map_or_else(
                || Value::from(format!("f64:{:016x}", g.to_bits())),
                Value::Number,
            ),
            MetricValue::Counter(c) => Value::from(*c),
        };
        map.insert(name.clone(), v);
    }
    for (name, e) in &p.extras {
        let v = match e {
            Extra::Keyword(s) => Value::from(s.as_str()),
            Extra::Bool(b) => Value::from(*b),
        };
        map.insert(name.clone(), v);
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyer() -> EventKeyer {
        EventIds::new(FingerprintMethod::SipHash128)
            .keyer()
            .unwrap()
    }

    #[test]
    fn id_text_round_trips_over_the_whole_timestamp_range() {
        let k = keyer();
        for ts in [i64::MIN, -1, 0, 1, 1_700_000_000_000, i64::MAX] {
            let p = Point::new(Tsid::from_bytes([0; 20]), ts).keyword("message", "x");
            let id = k.id_of(&p).unwrap();
            let text = k.format(&id);
            assert_eq!(text.len(), 48);
            assert_eq!(k.parse(&text).unwrap(), id);
        }
        assert!(k.parse("zz").is_err());
        assert!(k.parse(&"G".repeat(48)).is_err());
    }

    #[test]
    fn ids_depend_on_content_and_time_not_on_field_order() {
        let k = keyer();
        let t = Tsid::from_bytes([0; 20]);
        let a = Point::new(t, 5)
            .keyword("user", "ann")
            .keyword("action", "login");
        let b = Point::new(t, 5)
            .keyword("action", "login")
            .keyword("user", "ann");
        let c = Point::new(t, 5)
            .keyword("action", "logout")
            .keyword("user", "ann");
        let d = Point::new(t, 6)
            .keyword("user", "ann")
            .keyword("action", "login");
        assert_eq!(k.id_of(&a).unwrap(), k.id_of(&b).unwrap());
        assert_ne!(k.id_of(&a).unwrap(), k.id_of(&c).unwrap());
        assert_ne!(k.id_of(&a).unwrap().tsid(), k.id_of(&c).unwrap().tsid());
        assert_eq!(k.id_of(&a).unwrap().tsid(), k.id_of(&d).unwrap().tsid());
    }

    #[test]
    fn named_fields_only_are_hashed() {
        let k = EventIds::new(FingerprintMethod::Sha256)
            .fields(["message"])
            .keyer()
            .unwrap();
        let t = Tsid::from_bytes([0; 20]);
        let a = Point::new(t, 5)
            .keyword("message", "m")
            .keyword("user", "a");
        let b = Point::new(t, 5)
            .keyword("message", "m")
            .keyword("user", "b");
        assert_eq!(k.id_of(&a).unwrap(), k.id_of(&b).unwrap());
        assert_eq!(k.format(&k.id_of(&a).unwrap()).len(), 56);
    }

    #[test]
    fn a_bad_key_is_a_config_error() {
        let e = EventIds::new(FingerprintMethod::SipHash128)
            .key(vec![1, 2, 3])
            .keyer();
        assert!(matches!(e, Err(Error::InvalidConfig { .. })));
    }
}
