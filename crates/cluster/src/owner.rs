//! The shard owner: inside `tidemark serve`, holds etcd leases on its shards, pulls each
//! shard's subject with a durable consumer and applies the messages to the local store,
//! acknowledging each only after the store fsynced it.
//!
//! Exactly once comes from the store, not from the stream: JetStream delivers at least
//! once (a message whose acknowledgement was lost, or that was pulled before a crash, is
//! delivered again) and a redelivered message's samples have the synthetic ids of the
//! stored ones, so the store counts them as duplicates. What the lease adds is that only
//! one process applies a shard at a time, and the shard's assignment in etcd that its
//! series are only ever applied on one node.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind, consumer::pull};
use futures_util::{FutureExt as _, StreamExt as _};
use tidemark::{LabelPoints, SampleBatch};
use tidemark_server::Principal;
use tidemark_server::state::AppState;
use tokio::sync::watch;

use crate::config::ClusterConfig;
use crate::error::{Error, Result};
use crate::etcd::{Claim, Etcd};
use crate::message::ShardMessage;
use crate::shard::VIRTUAL_SHARDS;

/// What an owner did.
#[derive(Debug, Default)]
pub struct OwnerStats {
    /// Messages applied and acknowledged.
    pub messages: AtomicU64,
    /// Messages that are not shard messages, or not of their subject's shard
    /// (acknowledged as terminated, logged).
    pub messages_bad: AtomicU64,
    /// Samples stored for the first time.
    pub created: AtomicU64,
    /// Samples the store already held (redeliveries, client retries).
    pub duplicates: AtomicU64,
    /// Samples the store refused (too old for its partitions, ...).
    pub rejected: AtomicU64,
}

/// Which shards this process holds, and until when its lease surely holds.
#[derive(Debug)]
struct Fence {
    /// The fencing revision of each held shard (the put of its owner key), 0 if not held.
    held: Vec<AtomicI64>,
    /// Milliseconds after `start` until which the lease is known to be alive.
    valid_until_ms: AtomicI64,
    start: Instant,
}

impl Fence {
    fn new() -> Fence {
        Fence {
            held: (0..VIRTUAL_SHARDS).map(|_| AtomicI64::new(0)).collect(),
            valid_until_ms: AtomicI64::new(0),
            start: Instant::now(),
        }
    }

    fn elapsed_ms(&self, at: Instant) -> i64 {
        i64::try_from(at.saturating_duration_since(self.start).as_millis()).unwrap_or(i64::MAX)
    }

    fn slot(&self, shard: u32) -> Option<&AtomicI64> {
        self.held.get(usize::try_from(shard).ok()?)
    }

    /// Whether this process may apply `shard` now.
    fn ok(&self, shard: u32) -> bool {
        self.slot(shard)
            .is_some_and(|h| h.load(Ordering::Acquire) != 0)
            && self.elapsed_ms(Instant::now()) < self.valid_until_ms.load(Ordering::Acquire)
    }

    fn set(&self, shard: u32, revision: i64) {
        if let Some(h) = self.slot(shard) {
            h.store(revision, Ordering::Release);
        }
    }

    fn revision(&self, shard: u32) -> i64 {
        self.slot(shard).map_or(0, |h| h.load(Ordering::Acquire))
    }
}

/// Runs the owner of `config.shards` over `store` until `stop` turns true: one thread
/// keeps the etcd lease, the claims and this node's query address `url` (published on
/// the lease, for the routers' queries), one task per shard pulls and applies.
///
/// # Errors
/// [`Error::Config`] for an owner without shards or name, [`Error::Etcd`] when no lease
/// can be granted at start, [`Error::Nats`] when the streams cannot be made.
pub async fn run(
    config: ClusterConfig,
    store: Arc<AppState>,
    url: String,
    stop: watch::Receiver<bool>,
) -> Result<Arc<OwnerStats>> {
    let shards = config.owned_shards()?;
    if shards.is_empty() || config.node.is_empty() {
        return Err(Error::Config(
            "an owner needs `node` and `shards` in its cluster file".to_owned(),
        ));
    }
    let js = crate::nats::connect(&config, Duration::from_secs(10)).await?;
    let groups: HashSet<u32> = shards.iter().map(|&s| config.stream_of(s)).collect();
    let mut streams = BTreeMap::new();
    for g in groups {
        streams.insert(g, crate::nats::ensure_stream(&js, &config, g).await?);
    }
    let fence = Arc::new(Fence::new());
    let stats = Arc::new(OwnerStats::default());
    let config = Arc::new(config);
    let etcd = Etcd::new(&config.etcd, Duration::from_secs(5));
    // The first lease before anything is pulled: an etcd that does not answer stops the
    // start, visibly.
    let sent = Instant::now();
    let etcd2 = etcd.clone();
    let ttl = config.lease_ttl_secs;
    let lease = tokio::task::spawn_blocking(move || etcd2.grant(ttl))
        .await
        .map_err(|e| Error::Etcd(format!("lease thread: {e}")))??;
    extend(&fence, sent, i64::try_from(ttl).unwrap_or(i64::MAX));
    tracing::info!(node = %config.node, lease, shards = shards.len(), "owner started");
    {
        let (config, fence, stop, shards) = (
            Arc::clone(&config),
            Arc::clone(&fence),
            stop.clone(),
            shards.clone(),
        );
        std::thread::Builder::new()
            .name("tidemark-lease".to_owned())
            .spawn(move || {
                let me = Member {
                    config: &config,
                    fence: &fence,
                    shards: &shards,
                    url: &url,
                };
                keep_lease(&etcd, &me, lease, &stop);
            })
            .map_err(|source| Error::Io {
                path: "lease thread".into(),
                source,
            })?;
    }
    for shard in shards {
        let Some(stream) = streams.get(&config.stream_of(shard)).cloned() else {
            continue;
        };
        let task = ShardTask {
            shard,
            config: Arc::clone(&config),
            store: Arc::clone(&store),
            fence: Arc::clone(&fence),
            stats: Arc::clone(&stats),
            stop: stop.clone(),
        };
        tokio::spawn(async move { task.run(stream).await });
    }
    {
        let (stats, mut stop) = (Arc::clone(&stats), stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                    _ = stop.changed() => return,
                }
                tracing::info!(
                    messages = stats.messages.load(Ordering::Relaxed),
                    created = stats.created.load(Ordering::Relaxed),
                    duplicates = stats.duplicates.load(Ordering::Relaxed),
                    rejected = stats.rejected.load(Ordering::Relaxed),
                    bad = stats.messages_bad.load(Ordering::Relaxed),
                    "owner applied"
                );
            }
        });
    }
    Ok(stats)
}

/// The lease is alive until at least `sent + ttl - 1 s` (etcd renewed it after `sent`).
fn extend(fence: &Fence, sent: Instant, ttl_secs: i64) {
    let until = fence
        .elapsed_ms(sent)
        .saturating_add(ttl_secs.saturating_sub(1).saturating_mul(1000));
    fence.valid_until_ms.store(until, Ordering::Release);
}

/// What the lease thread keeps in etcd for this node.
struct Member<'a> {
    config: &'a ClusterConfig,
    fence: &'a Fence,
    shards: &'a [u32],
    /// The node's query address.
    url: &'a str,
}

/// The lease thread: renews the lease every third of its TTL, publishes the node's
/// query address on it, claims the shards not yet held, and checks every held shard's
/// owner key still carries this lease (its fencing revision unchanged); on a lost lease
/// it drops every shard and starts over.
fn keep_lease(etcd: &Etcd, me: &Member<'_>, mut lease: i64, stop: &watch::Receiver<bool>) {
    let (config, fence, shards) = (me.config, me.fence, me.shards);
    let node_key = crate::topology::node_key(&config.prefix, &config.node);
    let ttl = i64::try_from(config.lease_ttl_secs).unwrap_or(i64::MAX);
    let period = Duration::from_millis(config.lease_ttl_secs.saturating_mul(1000) / 3);
    let mut refused: HashSet<u32> = HashSet::new();
    let mut busy_logged: HashSet<u32> = HashSet::new();
    let mut first = true;
    while !*stop.borrow() {
        if !first {
            let sent = Instant::now();
            match etcd.keepalive(lease) {
                Ok(left) if left > 0 => extend(fence, sent, left.min(ttl)),
                Ok(_) => {
                    tracing::warn!(lease, "lease expired: every shard dropped, claiming again");
                    for &s in shards {
                        fence.set(s, 0);
                    }
                    match etcd.grant(config.lease_ttl_secs) {
                        Ok(l) => {
                            lease = l;
                            extend(fence, sent, ttl);
                        }
                        Err(e) => tracing::warn!(error = %e, "lease grant failed"),
                    }
                }
                Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
            }
        }
        first = false;
        // The address on the lease: it disappears with the lease, so a router reads
        // only live nodes (put every round: a new lease after an expiry needs it again).
        if let Err(e) = etcd.put(&node_key, me.url, lease) {
            tracing::warn!(error = %e, "publishing the query address failed");
        }
        for &s in shards {
            if fence.revision(s) != 0 || refused.contains(&s) {
                continue;
            }
            match etcd.claim_shard(&config.prefix, &config.node, s, lease) {
                Ok(Claim::Held { revision }) => {
                    fence.set(s, revision);
                    busy_logged.remove(&s);
                }
                Ok(Claim::Busy { holder }) => {
                    if busy_logged.insert(s) {
                        tracing::warn!(shard = s, %holder, "shard held by another process: waiting");
                    }
                }
                Err(e @ Error::AssignedElsewhere { .. }) => {
                    tracing::error!(error = %e, "shard not taken");
                    refused.insert(s);
                }
                Err(e) => {
                    tracing::warn!(shard = s, error = %e, "claim failed");
                    break;
                }
            }
        }
        // The fence: each held shard's key must still be this lease's, at the revision
        // of the claim (a key put by anyone since then is another claim).
        match etcd.list(&format!("{}/owner/", config.prefix)) {
            Ok(kvs) => {
                let mine: std::collections::HashMap<u32, (i64, i64, String)> = kvs
                    .into_iter()
                    .filter_map(|kv| {
                        let shard = kv.key.rsplit('/').next()?.parse::<u32>().ok()?;
                        Some((shard, (kv.mod_revision, kv.lease, kv.value)))
                    })
                    .collect();
                for &s in shards {
                    let rev = fence.revision(s);
                    if rev == 0 {
                        continue;
                    }
                    let still = mine
                        .get(&s)
                        .is_some_and(|(m, l, v)| *m == rev && *l == lease && v == &config.node);
                    if !still {
                        tracing::warn!(shard = s, "shard's owner key changed: dropped");
                        fence.set(s, 0);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "fence check failed"),
        }
        let until = Instant::now() + period;
        while Instant::now() < until && !*stop.borrow() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // A clean stop gives the shards up at once rather than at the lease's expiry.
    for &s in shards {
        fence.set(s, 0);
    }
    if let Err(e) = etcd.revoke(lease) {
        tracing::warn!(error = %e, "lease revoke failed");
    }
}

struct ShardTask {
    shard: u32,
    config: Arc<ClusterConfig>,
    store: Arc<AppState>,
    fence: Arc<Fence>,
    stats: Arc<OwnerStats>,
    stop: watch::Receiver<bool>,
}

impl ShardTask {
    async fn run(mut self, stream: jetstream::stream::Stream) {
        let mut points = match LabelPoints::new() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "label mapping");
                return;
            }
        };
        while !*self.stop.borrow() {
            if !self.fence.ok(self.shard) {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = self.stop.changed() => {}
                }
                continue;
            }
            if let Err(e) = self.pull(&stream, &mut points).await {
                tracing::warn!(shard = self.shard, error = %e, "pulling stopped; starting again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }

    /// Pulls and applies while this process holds the shard.
    async fn pull(
        &mut self,
        stream: &jetstream::stream::Stream,
        points: &mut LabelPoints,
    ) -> Result<()> {
        let name = self.config.consumer_name(self.shard);
        let consumer = stream
            .get_or_create_consumer(
                &name,
                pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: self.config.subject(self.shard),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(30),
                    max_ack_pending: i64::try_from(self.config.fetch_batch.saturating_mul(4))
                        .unwrap_or(i64::MAX),
                    ..pull::Config::default()
                },
            )
            .await
            .map_err(|e| Error::Nats(format!("consumer {name}: {e}")))?;
        let mut messages = consumer
            .stream()
            .max_messages_per_batch(self.config.fetch_batch)
            .messages()
            .await
            .map_err(|e| Error::Nats(format!("consumer {name}: {e}")))?;
        loop {
            let first = tokio::select! {
                m = messages.next() => m,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    if !self.fence.ok(self.shard) || *self.stop.borrow() {
                        return Ok(());
                    }
                    continue;
                }
                _ = self.stop.changed() => return Ok(()),
            };
            let Some(first) = first else {
                return Err(Error::Nats(format!("consumer {name} ended")));
            };
            let mut batch = vec![first.map_err(|e| Error::Nats(format!("consumer {name}: {e}")))?];
            // Whatever else has already arrived, without waiting: one store commit for all.
            while batch.len() < self.config.fetch_batch {
                match messages.next().now_or_never() {
                    Some(Some(Ok(m))) => batch.push(m),
                    Some(Some(Err(e))) => {
                        tracing::debug!(error = %e, "pull status");
                        break;
                    }
                    _ => break,
                }
            }
            if !self.fence.ok(self.shard) {
                // Not ours any more: put them back for whoever holds the shard next.
                for m in &batch {
                    let _ = m.ack_with(AckKind::Nak(None)).await;
                }
                return Ok(());
            }
            self.apply(&batch, points).await;
        }
    }

    /// Applies a batch of messages to the store, then acknowledges each: applied ones
    /// after the store's fsync, malformed ones as terminated; a store failure that a retry
    /// may fix leaves them to be delivered again.
    async fn apply(&self, batch: &[jetstream::Message], points: &mut LabelPoints) {
        let mut by_index: BTreeMap<(String, bool), (SampleBatch, Vec<usize>)> = BTreeMap::new();
        let mut bad: Vec<usize> = Vec::new();
        for (i, m) in batch.iter().enumerate() {
            let decoded = ShardMessage::decode(&m.payload).and_then(|msg| {
                if msg.shard != self.shard {
                    return Err(Error::Message(format!(
                        "a message of shard {} on shard {}'s subject",
                        msg.shard, self.shard
                    )));
                }
                let (samples, members) = by_index
                    .entry((msg.index.to_owned(), msg.create))
                    .or_insert_with(|| (SampleBatch::new(msg.create), Vec::new()));
                let mark = samples.mark();
                if let Err(e) = msg.append_to(points, samples) {
                    samples.truncate(mark);
                    return Err(e);
                }
                members.push(i);
                Ok(())
            });
            if let Err(e) = decoded {
                tracing::error!(shard = self.shard, error = %e, "message dropped");
                bad.push(i);
            }
        }
        let mut done: Vec<usize> = bad.clone();
        let mut retry: Vec<usize> = Vec::new();
        for ((index, _), (samples, members)) in by_index {
            match self.write(index.clone(), samples).await {
                Ok(tally) => {
                    self.stats
                        .created
                        .fetch_add(tally.created + tally.replaced, Ordering::Relaxed);
                    self.stats
                        .duplicates
                        .fetch_add(tally.duplicates, Ordering::Relaxed);
                    if tally.rejected > 0 {
                        self.stats
                            .rejected
                            .fetch_add(tally.rejected, Ordering::Relaxed);
                        tracing::warn!(
                            shard = self.shard, %index, rejected = tally.rejected,
                            first = tally.first_rejection.as_deref().unwrap_or(""),
                            "samples refused by the store"
                        );
                    }
                    done.extend(members);
                }
                Err((permanent, e)) => {
                    tracing::warn!(shard = self.shard, %index, error = %e, permanent, "store write failed");
                    if permanent {
                        bad.extend(&members);
                        done.extend(members);
                    } else {
                        retry.extend(members);
                    }
                }
            }
        }
        for i in done {
            let Some(m) = batch.get(i) else { continue };
            let kind = if bad.contains(&i) {
                AckKind::Term
            } else {
                AckKind::Ack
            };
            if let Err(e) = m.ack_with(kind).await {
                // The message comes again after its ack wait: a duplicate then.
                tracing::warn!(shard = self.shard, error = %e, "ack failed");
            } else if !bad.contains(&i) {
                self.stats.messages.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !bad.is_empty() {
            self.stats
                .messages_bad
                .fetch_add(bad.len() as u64, Ordering::Relaxed);
        }
        for i in retry {
            if let Some(m) = batch.get(i) {
                let _ = m.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await;
            }
        }
    }

    /// Writes `samples` to the label-keyed index `index` (created as the server creates
    /// it) and waits for the fsync; on failure, whether it is permanent (a 4xx).
    async fn write(
        &self,
        index: String,
        samples: SampleBatch,
    ) -> std::result::Result<tidemark::SampleTally, (bool, String)> {
        let store = Arc::clone(&self.store);
        let handle = tokio::task::spawn_blocking(move || {
            store
                .registry
                .scope(&Principal::anonymous())
                .get_or_create_labels(&index)
        })
        .await
        .map_err(|e| (false, format!("worker failed: {e}")))?
        .map_err(refusal)?;
        let rx = handle.submit_samples(samples).map_err(refusal)?;
        handle.wait_samples(rx).await.map_err(refusal)
    }
}

/// A store error as (permanent, reason): a 4xx other than 429 will not pass on a retry.
fn refusal(e: tidemark_server::Error) -> (bool, String) {
    let status = e.status_and_kind().0;
    ((400..500).contains(&status) && status != 429, e.reason())
}
