//! The cluster's state as etcd holds it, read in one range request: each shard's
//! assignment (`<prefix>/assign/<n>`, kept for good), its current owner
//! (`<prefix>/owner/<n>`, on the owner's lease: gone when the owner's lease expires)
//! and each live node's query address (`<prefix>/node/<name>`, on the same lease).
//! What the router's queries fan out to, and what `_cluster/health` and `_cat/shards`
//! report.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::etcd::{Etcd, KeyValue};
use crate::shard::VIRTUAL_SHARDS;

/// A shard's current owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The node holding it.
    pub node: String,
    /// The lease its key is on.
    pub lease: i64,
    /// The revision of the claim: its fencing token.
    pub revision: i64,
}

/// The state of every shard and node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    /// Shard → the node it is assigned to.
    pub assigned: BTreeMap<u32, String>,
    /// Shard → its owner while the owner's lease lives.
    pub owners: BTreeMap<u32, Owner>,
    /// Live node → the base URL of its HTTP API (`http://127.0.0.1:9200`).
    pub nodes: BTreeMap<String, String>,
}

/// The key of `node`'s query address.
pub fn node_key(prefix: &str, node: &str) -> String {
    format!("{prefix}/node/{node}")
}

impl Topology {
    /// Reads the cluster under `prefix` from etcd.
    ///
    /// # Errors
    /// [`crate::Error::Etcd`].
    pub fn read(etcd: &Etcd, prefix: &str) -> Result<Topology> {
        Ok(Topology::from_keys(
            prefix,
            &etcd.list(&format!("{prefix}/"))?,
        ))
    }

    /// The state the keys under `prefix` describe (other keys are ignored).
    pub fn from_keys(prefix: &str, kvs: &[KeyValue]) -> Topology {
        let mut t = Topology::default();
        for kv in kvs {
            let Some(rest) = kv
                .key
                .strip_prefix(prefix)
                .and_then(|r| r.strip_prefix('/'))
            else {
                continue;
            };
            let Some((kind, name)) = rest.split_once('/') else {
                continue;
            };
            let shard = name.parse::<u32>().ok().filter(|&s| s < VIRTUAL_SHARDS);
            match (kind, shard) {
                ("assign", Some(s)) => {
                    t.assigned.insert(s, kv.value.clone());
                }
                ("owner", Some(s)) => {
                    t.owners.insert(
                        s,
                        Owner {
                            node: kv.value.clone(),
                            lease: kv.lease,
                            revision: kv.mod_revision,
                        },
                    );
                }
                ("node", _) if !name.is_empty() => {
                    t.nodes.insert(name.to_owned(), kv.value.clone());
                }
                _ => {}
            }
        }
        t
    }

    /// The nodes that serve queries now, by base URL, with the shards each owns.
    pub fn serving(&self) -> BTreeMap<String, Vec<u32>> {
        let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (&s, o) in &self.owners {
            if let Some(url) = self.nodes.get(&o.node) {
                out.entry(url.clone()).or_default().push(s);
            }
        }
        out
    }

    /// The shards no live node serves: without an owner, or whose owner has not
    /// published its address.
    pub fn unserved(&self) -> Vec<u32> {
        (0..VIRTUAL_SHARDS)
            .filter(|s| {
                self.owners
                    .get(s)
                    .is_none_or(|o| !self.nodes.contains_key(&o.node))
            })
            .collect()
    }
}

/// `shards` (sorted) as ranges: `0-85,90,92-93`.
pub fn ranges(shards: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < shards.len() {
        let mut j = i;
        while j + 1 < shards.len() && shards[j + 1] == shards[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            shards[i].to_string()
        } else {
            format!("{}-{}", shards[i], shards[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, lease: i64, rev: i64) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: value.to_owned(),
            create_revision: rev,
            mod_revision: rev,
            lease,
        }
    }

    #[test]
    fn reads_owners_nodes_and_what_nobody_serves() {
        let mut kvs = vec![
            kv("c/node/a", "http://127.0.0.1:1", 7, 3),
            kv("c/node/", "ignored", 7, 3),
            kv("c2/owner/5", "other cluster", 9, 4),
            kv("c/owner/999", "out of range", 9, 4),
            kv("c/other/1", "x", 0, 1),
        ];
        for s in 0..VIRTUAL_SHARDS {
            kvs.push(kv(
                &format!("c/assign/{s}"),
                if s < 128 { "a" } else { "b" },
                0,
                1,
            ));
            if s != 7 {
                kvs.push(kv(
                    &format!("c/owner/{s}"),
                    if s < 128 { "a" } else { "b" },
                    7,
                    10,
                ));
            }
        }
        let t = Topology::from_keys("c", &kvs);
        assert_eq!(t.assigned.len(), 256);
        assert_eq!(t.owners.len(), 255);
        assert_eq!(t.nodes.len(), 1);
        let serving = t.serving();
        assert_eq!(serving.len(), 1);
        assert_eq!(serving["http://127.0.0.1:1"].len(), 127);
        // 7 has no owner; b's shards have an owner without an address.
        let unserved = t.unserved();
        assert_eq!(ranges(&unserved), "7,128-255");
    }

    #[test]
    fn ranges_compact_runs() {
        assert_eq!(ranges(&[]), "");
        assert_eq!(ranges(&[3]), "3");
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    }
}
