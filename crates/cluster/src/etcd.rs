//! A small client of etcd's v3 JSON gateway (`/v3/kv/txn`, `/v3/kv/range`,
//! `/v3/lease/grant`, `/v3/lease/keepalive`, `/v3/lease/revoke`; etcd 3.4), and the
//! shard claims an owner makes with it.
//!
//! The gateway is etcd's own translation of its gRPC API to JSON over HTTP/1.1: keys and
//! values are base64, 64-bit integers are strings, fields equal to their default are
//! left out. Over it, a blocking HTTP client the workspace already has (`ureq`) is
//! enough, and no protobuf compiler is needed at build time.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// A key's value and revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value (UTF-8 here: Tidemark stores node names).
    pub value: String,
    /// The revision that created the key (0: absent).
    pub create_revision: i64,
    /// The revision of its last change: the fencing token of a claim.
    pub mod_revision: i64,
    /// The lease it is attached to (0: none).
    pub lease: i64,
}

/// What a claim on a shard's owner key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This node holds the key with its lease since `revision` (its fencing token).
    Held {
        /// The revision of the put.
        revision: i64,
    },
    /// Another node holds it.
    Busy {
        /// Its holder.
        holder: String,
    },
}

/// A client of one etcd cluster's JSON gateway.
#[derive(Debug, Clone)]
pub struct Etcd {
    endpoints: Vec<String>,
    agent: ureq::Agent,
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn b64(s: &str) -> String {
    B64.encode(s.as_bytes())
}

fn unb64(v: &Value) -> Result<String> {
    let text = v.as_str().unwrap_or("");
    let bytes = B64
        .decode(text)
        .map_err(|e| Error::Etcd(format!("bad base64 {text:?}: {e}")))?;
    String::from_utf8(bytes).map_err(|_| Error::Etcd("a key or value is not UTF-8".to_owned()))
}

/// The end of the range of every key starting with `prefix` (etcd's prefix range).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn kv_of(v: &Value) -> Result<KeyValue> {
    Ok(KeyValue {
        key: unb64(&v["key"])?,
        value: unb64(&v["value"])?,
        create_revision: int(&v["create_revision"]),
        mod_revision: int(&v["mod_revision"]),
        lease: int(&v["lease"]),
    })
}

impl Etcd {
    /// A client of the gateways at `endpoints` (`http://127.0.0.1:2379`), tried in order.
    pub fn new(endpoints: &[String], timeout: Duration) -> Etcd {
        Etcd {
            endpoints: endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_owned())
                .collect(),
            agent: ureq::AgentBuilder::new().timeout(timeout).build(),
        }
    }

    /// POSTs `body` to `path` at the first endpoint that answers.
    fn call(&self, path: &str, body: &Value) -> Result<Value> {
        let mut last = String::from("no endpoint");
        for e in &self.endpoints {
            match self
                .agent
                .post(&format!("{e}{path}"))
                .set("content-type", "application/json")
                .send_string(&body.to_string())
            {
                Ok(resp) => {
                    let text = resp
                        .into_string()
                        .map_err(|err| Error::Etcd(format!("{e}{path}: {err}")))?;
                    let v: Value = serde_json::from_str(&text)
                        .map_err(|err| Error::Etcd(format!("{e}{path}: {err}: {text}")))?;
                    if let Some(err) = v.get("error") {
                        return Err(Error::Etcd(format!("{e}{path}: {err}")));
                    }
                    return Ok(v);
                }
                Err(ureq::Error::Status(code, resp)) => {
                    let text = resp.into_string().unwrap_or_default();
                    // A refusal is etcd's answer, not an unreachable endpoint.
                    return Err(Error::Etcd(format!("{e}{path}: {code} {text}")));
                }
                Err(err) => last = format!("{e}{path}: {err}"),
            }
        }
        Err(Error::Etcd(last))
    }

    /// Grants a lease of `ttl_secs`; its id.
    ///
    /// # Errors
    /// [`Error::Etcd`] when no endpoint grants it.
    pub fn grant(&self, ttl_secs: u64) -> Result<i64> {
        let v = self.call("/v3/lease/grant", &json!({ "TTL": ttl_secs }))?;
        let id = int(&v["ID"]);
        if id == 0 {
            return Err(Error::Etcd(format!("lease grant answered {v}")));
        }
        Ok(id)
    }

    /// Renews lease `id`; its remaining TTL in seconds, 0 when it has expired.
    ///
    /// # Errors
    /// [`Error::Etcd`] when no endpoint answers.
    pub fn keepalive(&self, id: i64) -> Result<i64> {
        let v = self.call("/v3/lease/keepalive", &json!({ "ID": id.to_string() }))?;
        Ok(int(&v["result"]["TTL"]))
    }

    /// Revokes lease `id` (its keys are deleted).
    ///
    /// # Errors
    /// [`Error::Etcd`] when no endpoint answers.
    pub fn revoke(&self, id: i64) -> Result<()> {
        self.call("/v3/lease/revoke", &json!({ "ID": id.to_string() }))
            .map(drop)
    }

    /// The key `key`, if present.
    ///
    /// # Errors
    /// [`Error::Etcd`].
    pub fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let v = self.call("/v3/kv/range", &json!({ "key": b64(key) }))?;
        match v["kvs"].as_array().and_then(|a| a.first()) {
            Some(kv) => kv_of(kv).map(Some),
            None => Ok(None),
        }
    }

    /// Every key starting with `prefix`, in key order.
    ///
    /// # Errors
    /// [`Error::Etcd`].
    pub fn list(&self, prefix: &str) -> Result<Vec<KeyValue>> {
        let v = self.call(
            "/v3/kv/range",
            &json!({ "key": b64(prefix), "range_end": B64.encode(prefix_end(prefix)) }),
        )?;
        v["kvs"]
            .as_array()
            .map(|a| a.iter().map(kv_of).collect())
            .unwrap_or_else(|| Ok(Vec::new()))
    }

    /// Puts `key = value`, attached to `lease` unless 0, whatever was there; the
    /// revision of the put.
    ///
    /// # Errors
    /// [`Error::Etcd`].
    pub fn put(&self, key: &str, value: &str, lease: i64) -> Result<i64> {
        let mut put = json!({ "key": b64(key), "value": b64(value) });
        if lease != 0 {
            put["lease"] = json!(lease.to_string());
        }
        let v = self.call("/v3/kv/put", &put)?;
        Ok(int(&v["header"]["revision"]))
    }

    /// Puts `key = value` (attached to `lease` unless 0) if the key is absent; else
    /// answers what is there. `Ok(Ok(revision))` when put, `Ok(Err(existing))` when not.
    ///
    /// # Errors
    /// [`Error::Etcd`].
    pub fn put_if_absent(
        &self,
        key: &str,
        value: &str,
        lease: i64,
    ) -> Result<std::result::Result<i64, KeyValue>> {
        self.put_if(key, value, lease, ("CREATE", "create_revision", 0))
    }

    /// Puts `key = value` with `lease` if the key's last change is `mod_revision`
    /// (taking a key over from a dead process of the same node).
    ///
    /// # Errors
    /// [`Error::Etcd`].
    pub fn put_if_unchanged(
        &self,
        key: &str,
        value: &str,
        lease: i64,
        mod_revision: i64,
    ) -> Result<std::result::Result<i64, KeyValue>> {
        self.put_if(key, value, lease, ("MOD", "mod_revision", mod_revision))
    }

    fn put_if(
        &self,
        key: &str,
        value: &str,
        lease: i64,
        (target, field, revision): (&str, &str, i64),
    ) -> Result<std::result::Result<i64, KeyValue>> {
        let mut put = json!({ "key": b64(key), "value": b64(value) });
        if lease != 0 {
            put["lease"] = json!(lease.to_string());
        }
        let mut compare = json!({ "key": b64(key), "target": target, "result": "EQUAL" });
        compare[field] = json!(revision.to_string());
        let v = self.call(
            "/v3/kv/txn",
            &json!({
                "compare": [compare],
                "success": [{ "request_put": put }],
                "failure": [{ "request_range": { "key": b64(key) } }],
            }),
        )?;
        if v["succeeded"].as_bool().unwrap_or(false) {
            return Ok(Ok(int(&v["header"]["revision"])));
        }
        let kv = v["responses"][0]["response_range"]["kvs"]
            .as_array()
            .and_then(|a| a.first())
            .map(kv_of)
            .transpose()?;
        match kv {
            Some(kv) => Ok(Err(kv)),
            // Deleted between the compare and the range: absent, try again.
            None => Ok(Err(KeyValue {
                key: key.to_owned(),
                value: String::new(),
                create_revision: 0,
                mod_revision: 0,
                lease: 0,
            })),
        }
    }

    /// Claims `shard` for `node` under `prefix` with `lease`:
    ///
    /// 1. its assignment (`<prefix>/assign/<shard>`, no lease, kept for good) is
    ///    created for `node` if absent; another node's assignment is
    ///    [`Error::AssignedElsewhere`]: a shard never moves silently, or its series would
    ///    live on two owners;
    /// 2. its owner key (`<prefix>/owner/<shard>`, on the lease) is put if absent, or
    ///    taken over if it names `node` (a previous process of this node, killed, whose
    ///    lease has not expired yet: the data directory's lock says it is gone).
    ///
    /// # Errors
    /// [`Error::AssignedElsewhere`], [`Error::Etcd`].
    pub fn claim_shard(&self, prefix: &str, node: &str, shard: u32, lease: i64) -> Result<Claim> {
        let assign = format!("{prefix}/assign/{shard}");
        if let Err(existing) = self.put_if_absent(&assign, node, 0)?
            && existing.value != node
            && existing.create_revision != 0
        {
            return Err(Error::AssignedElsewhere {
                shard,
                owner: existing.value,
                node: node.to_owned(),
            });
        }
        let owner = format!("{prefix}/owner/{shard}");
        match self.put_if_absent(&owner, node, lease)? {
            Ok(revision) => Ok(Claim::Held { revision }),
            Err(existing) if existing.value == node && existing.lease == lease => Ok(Claim::Held {
                revision: existing.mod_revision,
            }),
            Err(existing) if existing.value == node => {
                match self.put_if_unchanged(&owner, node, lease, existing.mod_revision)? {
                    Ok(revision) => Ok(Claim::Held { revision }),
                    Err(now) => Ok(Claim::Busy { holder: now.value }),
                }
            }
            Err(existing) => Ok(Claim::Busy {
                holder: existing.value,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end("a/"), b"a0".to_vec());
        assert_eq!(prefix_end("\u{7f}"), vec![0x80]);
    }

    #[test]
    fn reads_gateway_integers_as_strings_and_numbers() {
        assert_eq!(int(&json!("42")), 42);
        assert_eq!(int(&json!(7)), 7);
        assert_eq!(int(&Value::Null), 0);
    }

    #[test]
    fn an_unreachable_etcd_is_an_error_not_a_panic() {
        // Port 9 on 127.0.0.1 (discard) is closed on test machines: connection refused.
        let e = Etcd::new(
            &["http://127.0.0.1:9".to_owned()],
            Duration::from_millis(500),
        );
        assert!(matches!(e.grant(5), Err(Error::Etcd(_))));
    }
}
