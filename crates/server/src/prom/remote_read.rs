//! Prometheus remote read 1.0 (`POST /api/v1/read`), the `SAMPLES` response type: a
//! snappy-compressed `prometheus.ReadRequest` of queries (label matchers and a time
//! range) in, one `QueryResult` of raw series per query out. Prometheus reads Tidemark
//! with it (`remote_read` in its configuration), and a cluster's router reads its
//! shard owners with it ([`encode_request`], [`decode_response`]) to evaluate PromQL
//! over every owner's series.
//!
//! The messages are prost derives written from the field numbers of Prometheus'
//! `prompb/remote.proto` and `types.proto`; the series reuse remote write's
//! [`TimeSeries`]. The chunked response type (`STREAMED_XOR_CHUNKS`) is not served: a
//! request that accepts only it is refused with `400`, one that lists none or lists
//! `SAMPLES` gets samples.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tidemark_promql::promql_parser::parser::token;
use tidemark_promql::{MatchOp, Matcher, Series, Storage};

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::http::{self, Caller};
use crate::metrics::remote_write::{self, Label, Sample, TimeSeries};
use crate::state::{AppState, blocking};

/// Most samples one read request may return (over all its queries), as Prometheus'
/// `--storage.remote.read-sample-limit` (50M there; the answer is one message held in
/// memory, so Tidemark keeps it lower): past it the request is refused with `400`.
pub const MAX_READ_SAMPLES: usize = 10_000_000;

/// Most queries in one read request.
pub const MAX_READ_QUERIES: usize = 64;

/// `prometheus.ReadRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadRequest {
    /// Field 1: the queries, answered in order.
    #[prost(message, repeated, tag = "1")]
    pub queries: Vec<Query>,
    /// Field 2: the response types the client accepts, in its order of preference
    /// (`0` `SAMPLES`, `1` `STREAMED_XOR_CHUNKS`); empty means `SAMPLES`.
    #[prost(int32, repeated, tag = "2")]
    pub accepted_response_types: Vec<i32>,
}

/// `prometheus.Query`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Query {
    /// Field 1: the first millisecond, inclusive.
    #[prost(int64, tag = "1")]
    pub start_timestamp_ms: i64,
    /// Field 2: the last millisecond, inclusive.
    #[prost(int64, tag = "2")]
    pub end_timestamp_ms: i64,
    /// Field 3: every series returned satisfies all of them.
    #[prost(message, repeated, tag = "3")]
    pub matchers: Vec<LabelMatcher>,
    /// Field 4: `prometheus.ReadHints` (step, function, grouping); accepted, not used.
    #[prost(bytes = "vec", optional, tag = "4")]
    pub hints: Option<Vec<u8>>,
}

/// `prometheus.LabelMatcher`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelMatcher {
    /// Field 1: `0` `=`, `1` `!=`, `2` `=~`, `3` `!~`.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    /// Field 2: the label name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Field 3: the value or the (fully anchored) regular expression.
    #[prost(string, tag = "3")]
    pub value: String,
}

/// `prometheus.ReadResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadResponse {
    /// Field 1: one result per query, in the request's order.
    #[prost(message, repeated, tag = "1")]
    pub results: Vec<QueryResult>,
}

/// `prometheus.QueryResult`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QueryResult {
    /// Field 1: the series, samples sorted by time.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// The wire matcher of `m`.
pub fn wire_matcher(m: &Matcher) -> LabelMatcher {
    let r#type = match m.op {
        MatchOp::Equal => 0,
        MatchOp::NotEqual => 1,
        MatchOp::Re(_) => 2,
        MatchOp::NotRe(_) => 3,
    };
    LabelMatcher {
        r#type,
        name: m.name.clone(),
        value: m.value.clone(),
    }
}

/// The matcher `m` names, its regular expression compiled as PromQL compiles one.
///
/// # Errors
/// `400` for an unknown type or a regular expression that does not compile.
pub fn matcher_of(m: &LabelMatcher) -> Result<Matcher> {
    let id = match m.r#type {
        0 => token::T_EQL,
        1 => token::T_NEQ,
        2 => token::T_EQL_REGEX,
        3 => token::T_NEQ_REGEX,
        other => {
            return Err(Error::bad(
                "bad_data",
                format!("label matcher type {other} is not one of 0 (=), 1 (!=), 2 (=~), 3 (!~)"),
            ));
        }
    };
    Matcher::new_matcher(id, m.name.clone(), m.value.clone())
        .map_err(|e| Error::bad("bad_data", format!("label matcher on {:?}: {e}", m.name)))
}

/// A snappy-compressed `ReadRequest` of `queries` (matchers, first and last
/// millisecond, inclusive), accepting `SAMPLES`: the body a client posts.
pub fn encode_request(queries: &[(&[Matcher], i64, i64)]) -> Vec<u8> {
    let req = ReadRequest {
        queries: queries
            .iter()
            .map(|(ms, start, end)| Query {
                start_timestamp_ms: *start,
                end_timestamp_ms: *end,
                matchers: ms.iter().map(wire_matcher).collect(),
                hints: None,
            })
            .collect(),
        accepted_response_types: vec![0],
    };
    snappy(&prost::Message::encode_to_vec(&req))
}

fn snappy(raw: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(raw)
        .unwrap_or_default()
}

/// The series of each query of a snappy-compressed `ReadResponse`, labels sorted by
/// name, as the PromQL evaluator reads them.
///
/// # Errors
/// `400` for a body that is not snappy or not a `ReadResponse`, `413` when it
/// decompresses past `limit` bytes.
pub fn decode_response(body: &[u8], limit: u64) -> Result<Vec<Vec<Series>>> {
    let raw = remote_write::decompress(body, limit)?;
    let resp = <ReadResponse as prost::Message>::decode(raw.as_slice()).map_err(|e| {
        Error::bad(
            "parse_exception",
            format!("the body is not a prometheus.ReadResponse: {e}"),
        )
    })?;
    Ok(resp
        .results
        .into_iter()
        .map(|r| {
            r.timeseries
                .into_iter()
                .map(|ts| {
                    let mut labels: Vec<(String, String)> =
                        ts.labels.into_iter().map(|l| (l.name, l.value)).collect();
                    labels.sort();
                    Series {
                        labels,
                        samples: ts
                            .samples
                            .into_iter()
                            .map(|s| (s.timestamp, s.value))
                            .collect(),
                    }
                })
                .collect()
        })
        .collect())
}

/// `POST /api/v1/read`.
pub(crate) async fn handler(
    State(st): State<Arc<AppState>>,
    Caller(who): Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    remote_write::check_content_type(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    )?;
    let bytes = http::read_raw_body(&st, &headers, body).await?;
    let limit = st.config.max_content_length;
    let st2 = Arc::clone(&st);
    let out = blocking(move || {
        let raw = remote_write::decompress(&bytes, limit)?;
        let req = <ReadRequest as prost::Message>::decode(raw.as_slice()).map_err(|e| {
            Error::bad(
                "parse_exception",
                format!("the body is not a prometheus.ReadRequest: {e}"),
            )
        })?;
        answer(&st2, &who, &req)
    })
    .await?;
    let mut resp = snappy(&out).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("snappy"));
    Ok(resp)
}

/// The encoded `ReadResponse` to `req`, read as the PromQL endpoints read (every
/// time-series index the caller may read).
fn answer(st: &Arc<AppState>, who: &Principal, req: &ReadRequest) -> Result<Vec<u8>> {
    if !req.accepted_response_types.is_empty() && !req.accepted_response_types.contains(&0) {
        return Err(Error::bad(
            "bad_data",
            format!(
                "none of the accepted response types {:?} is served: this server answers SAMPLES (0)",
                req.accepted_response_types
            ),
        ));
    }
    if req.queries.len() > MAX_READ_QUERIES {
        return Err(Error::bad(
            "bad_data",
            format!(
                "{} queries in one read request: at most {MAX_READ_QUERIES}",
                req.queries.len()
            ),
        ));
    }
    let storage = super::RegistryStorage::new(st, who);
    let mut results = Vec::with_capacity(req.queries.len());
    let mut samples = 0usize;
    for q in &req.queries {
        let matchers = q
            .matchers
            .iter()
            .map(matcher_of)
            .collect::<Result<Vec<_>>>()?;
        let mut timeseries = Vec::new();
        storage
            .select(
                &matchers,
                q.start_timestamp_ms,
                q.end_timestamp_ms,
                &mut |s| {
                    samples += s.samples.len();
                    if samples > MAX_READ_SAMPLES {
                        return Err(tidemark_promql::Error::TooManyPoints {
                            limit: MAX_READ_SAMPLES,
                        });
                    }
                    timeseries.push(TimeSeries {
                        labels: s
                            .labels
                            .into_iter()
                            .map(|(name, value)| Label { name, value })
                            .collect(),
                        samples: s
                            .samples
                            .into_iter()
                            .map(|(timestamp, value)| Sample { value, timestamp })
                            .collect(),
                        exemplars: Vec::new(),
                        histograms: Vec::new(),
                    });
                    Ok(())
                },
            )
            .map_err(|e| match e {
                tidemark_promql::Error::TooManyPoints { limit } => Error::bad(
                    "bad_data",
                    format!(
                        "exceeded sample limit ({limit}): narrow the matchers or the time range"
                    ),
                ),
                tidemark_promql::Error::Storage(m) => Error::status(500, "storage_exception", m),
                other => Error::bad("bad_data", other.to_string()),
            })?;
        results.push(QueryResult { timeseries });
    }
    Ok(prost::Message::encode_to_vec(&ReadResponse { results }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matchers_survive_the_wire() {
        let ms = tidemark_promql::selector_matchers(r#"up{job=~"a|b.*",i!="x",k!~"z+"}"#)
            .expect("selector");
        for m in &ms {
            let back = matcher_of(&wire_matcher(m)).expect("matcher");
            assert_eq!(back.name, m.name);
            assert_eq!(back.value, m.value);
            for probe in ["a", "b", "bcd", "x", "zz", "", "up"] {
                assert_eq!(back.is_match(probe), m.is_match(probe), "{m} on {probe:?}");
            }
        }
        let bad = LabelMatcher {
            r#type: 7,
            name: "a".into(),
            value: "b".into(),
        };
        assert!(matcher_of(&bad).is_err());
        let bad_re = LabelMatcher {
            r#type: 2,
            name: "a".into(),
            value: "(".into(),
        };
        assert!(matcher_of(&bad_re).is_err());
    }

    #[test]
    fn a_response_decodes_to_sorted_series_and_corruption_is_an_error() {
        let resp = ReadResponse {
            results: vec![QueryResult {
                timeseries: vec![TimeSeries {
                    labels: vec![
                        Label {
                            name: "z".into(),
                            value: "1".into(),
                        },
                        Label {
                            name: "__name__".into(),
                            value: "m".into(),
                        },
                    ],
                    samples: vec![
                        Sample {
                            value: 1.5,
                            timestamp: 10,
                        },
                        Sample {
                            value: f64::from_bits(tidemark_promql::STALE_NAN_BITS),
                            timestamp: 20,
                        },
                    ],
                    exemplars: Vec::new(),
                    histograms: Vec::new(),
                }],
            }],
        };
        let body = snappy(&prost::Message::encode_to_vec(&resp));
        let got = decode_response(&body, 1 << 20).expect("decodes");
        assert_eq!(got.len(), 1);
        let s = &got[0][0];
        assert_eq!(s.labels[0].0, "__name__");
        assert_eq!(s.samples[0], (10, 1.5));
        assert!(tidemark_promql::is_stale_nan(s.samples[1].1));
        for cut in [1, body.len() / 2, body.len() - 1] {
            assert!(decode_response(&body[..cut], 1 << 20).is_err(), "cut {cut}");
        }
        assert!(decode_response(&body, 4).is_err(), "past the limit");
    }
}
