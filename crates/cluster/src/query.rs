//! Queries across nodes: a PromQL [`Storage`] whose series come from every node that
//! serves shards, read with Prometheus remote read (`POST /api/v1/read`) in parallel.
//!
//! A series lives on one shard and a shard on one owner, so the nodes' answers are
//! disjoint and their union is what one node holding everything would select; the
//! evaluator then runs once, over that union, exactly as `tidemark serve` runs it. (A
//! series reported by two nodes, which a handover could leave for a moment, is merged
//! by timestamp, never counted twice.) Aggregations are not pushed down to the owners
//! yet: every selected sample crosses the network once per selector (docs/cluster.md).

use std::collections::BTreeMap;
use std::time::Duration;

use tidemark_promql::{Error as PromError, Labels, Matcher, Series, Storage};
use tidemark_server::prom::remote_read;

use crate::topology::{Topology, ranges};

/// The largest remote-read answer accepted from one node, decompressed.
const MAX_ANSWER_BYTES: u64 = 1 << 30;

/// The series of the nodes of a [`Topology`], as one PromQL store.
#[derive(Debug, Clone)]
pub struct ClusterStorage {
    urls: Vec<String>,
    agent: ureq::Agent,
    authorization: Option<String>,
    unserved: Vec<u32>,
}

impl ClusterStorage {
    /// A store over the nodes serving shards in `topology`. `authorization` (the
    /// caller's `Authorization` header) is sent to every node, so that each one
    /// authorises the read as the caller. With `partial` false, a topology with shards
    /// no node serves is refused ([`PromError::Unavailable`], a 503): an answer without
    /// them would silently miss their series.
    ///
    /// # Errors
    /// [`PromError::Unavailable`] naming the unserved shards.
    pub fn new(
        topology: &Topology,
        authorization: Option<String>,
        timeout: Duration,
        partial: bool,
    ) -> Result<ClusterStorage, PromError> {
        let unserved = topology.unserved();
        if !unserved.is_empty() && !partial {
            return Err(PromError::Unavailable(format!(
                "shards {} have no live owner (partial_response=true answers without them)",
                ranges(&unserved)
            )));
        }
        Ok(ClusterStorage {
            urls: topology.serving().into_keys().collect(),
            agent: ureq::AgentBuilder::new().timeout(timeout).build(),
            authorization,
            unserved,
        })
    }

    /// The shards this store does not read (empty unless built with `partial`).
    pub fn unserved(&self) -> &[u32] {
        &self.unserved
    }

    /// The nodes it reads.
    pub fn nodes(&self) -> &[String] {
        &self.urls
    }

    fn read_one(&self, url: &str, body: &[u8]) -> Result<Vec<Series>, PromError> {
        let mut req = self
            .agent
            .post(&format!("{url}/api/v1/read"))
            .set("content-type", "application/x-protobuf")
            .set("content-encoding", "snappy")
            .set("x-prometheus-remote-read-version", "0.1.0");
        if let Some(a) = &self.authorization {
            req = req.set("authorization", a);
        }
        let resp = match req.send_bytes(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let text = r.into_string().unwrap_or_default();
                let msg = format!("node {url} answered {code}: {}", text.trim());
                return Err(match code {
                    400 => PromError::BadData(msg),
                    401 | 403 => PromError::Execution(msg),
                    _ => PromError::Unavailable(msg),
                });
            }
            Err(e) => {
                return Err(PromError::Unavailable(format!(
                    "node {url} did not answer: {e}"
                )));
            }
        };
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(resp.into_reader(), MAX_ANSWER_BYTES),
            &mut bytes,
        )
        .map_err(|e| PromError::Unavailable(format!("reading node {url}'s answer: {e}")))?;
        let mut results = remote_read::decode_response(&bytes, MAX_ANSWER_BYTES)
            .map_err(|e| PromError::Storage(format!("node {url}: {}", e.reason())))?;
        if results.len() != 1 {
            return Err(PromError::Storage(format!(
                "node {url} answered {} results to one query",
                results.len()
            )));
        }
        Ok(results.pop().unwrap_or_default())
    }
}

/// Adds `more` (sorted, unique timestamps) into `into` (the same), keeping `into`'s
/// sample where both have a timestamp.
fn merge_samples(into: &mut Vec<(i64, f64)>, more: Vec<(i64, f64)>) {
    if into.is_empty() {
        *into = more;
        return;
    }
    let old = std::mem::take(into);
    let (mut a, mut b) = (old.into_iter().peekable(), more.into_iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0 < y.0 => into.extend(a.next()),
            (Some(x), Some(y)) if x.0 > y.0 => into.extend(b.next()),
            (Some(_), Some(_)) => {
                into.extend(a.next());
                b.next();
            }
            (Some(_), None) => into.extend(a.by_ref()),
            (None, Some(_)) => into.extend(b.by_ref()),
            (None, None) => break,
        }
    }
}

impl Storage for ClusterStorage {
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        visit: &mut dyn FnMut(Series) -> tidemark_promql::Result<()>,
    ) -> tidemark_promql::Result<()> {
        let body = remote_read::encode_request(&[(matchers, start_ms, end_ms)]);
        let answers: Vec<Result<Vec<Series>, PromError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .urls
                .iter()
                .map(|url| scope.spawn(|| self.read_one(url, &body)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(PromError::Execution("a node reader failed".to_owned()))
                    })
                })
                .collect()
        });
        let mut merged: BTreeMap<Labels, Vec<(i64, f64)>> = BTreeMap::new();
        for answer in answers {
            for s in answer? {
                merge_samples(merged.entry(s.labels).or_default(), s.samples);
            }
        }
        for (labels, samples) in merged {
            visit(Series { labels, samples })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_one_sample_per_timestamp() {
        let mut a = vec![(1, 1.0), (3, 3.0), (5, 5.0)];
        merge_samples(&mut a, vec![(2, 20.0), (3, 30.0), (6, 60.0)]);
        assert_eq!(a, vec![(1, 1.0), (2, 20.0), (3, 3.0), (5, 5.0), (6, 60.0)]);
        let mut e = Vec::new();
        merge_samples(&mut e, vec![(1, 1.0)]);
        assert_eq!(e, vec![(1, 1.0)]);
    }

    #[test]
    fn a_topology_with_unserved_shards_is_refused_unless_partial() {
        let t = Topology::default();
        let e = ClusterStorage::new(&t, None, Duration::from_secs(1), false)
            .expect_err("no shard is served");
        assert_eq!(e.http_status(), 503);
        assert!(e.to_string().contains("0-255"), "{e}");
        let s = ClusterStorage::new(&t, None, Duration::from_secs(1), true).expect("partial");
        assert_eq!(s.unserved().len(), 256);
        assert!(s.nodes().is_empty());
    }
}
