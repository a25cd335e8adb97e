//! The write cache in several copies (multi-node clusters): the leader
//! pushes each extent it logs to the other voters and proposes the entry
//! naming it only once a majority (itself counted) holds it durably; a
//! node that applies an entry naming an extent it lacks fetches it from
//! a peer. Messages are `duet_cache::replica::Message`, carried one way
//! in `FrameKind::Data` peer frames (a reply is another one-way frame on
//! the replier's own connection).
//!
//! Lives on the data executor (`Rc`); the transport's connection threads
//! hand it frames through a bounded channel (see [`link`]).
//!
//! Bounds (docs/limits.md, "The cluster's queues"): push bytes per peer
//! still queued for its connection or not yet acknowledged (`[cluster]
//! replica_push_mib`, default [`PUSH_BYTES_MAX`]; past it a push to that
//! peer is not sent, and the peer just does not acknowledge: the others'
//! copies make the majority, and it fetches the extent later), inbound
//! frames queued (`replica_inbound`, `replica_inbound_mib`; past them a
//! frame is dropped), pushes being logged and fetches being answered at
//! once (`replica_workers`, default [`WORKERS`]; more wait in the inbound
//! queue).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use duet_cache::replica::{acks_needed, FetchRange, Message};
use duet_cluster::peer_wire::FrameKind;
use duet_fs::ExtentId;

use crate::datapath::DataPath;
use crate::peers::{PeerSender, PeersHandle};

/// How long the leader waits for a majority to hold a batch's extents;
/// then the batch fails (nothing proposed) with a retryable error.
pub const PUSH_WAIT: Duration = Duration::from_secs(5);
/// How long a fetch waits for one peer's answer before asking the next.
pub const FETCH_WAIT: Duration = Duration::from_secs(3);
/// The default of `[cluster] replica_push_mib`: push bytes to one peer
/// still in its queue, or sent and not yet acknowledged (or given up).
pub const PUSH_BYTES_MAX: u64 = 64 << 20;
/// Data frames received and not yet taken by the data executor.
pub const INBOUND_MAX: usize = 256;
pub const INBOUND_BYTES_MAX: u64 = 128 << 20;
/// The default of `[cluster] replica_workers`: pushes being logged and
/// fetches being answered at once.
pub const WORKERS: u64 = 16;

/// Counters of replication, per node (`duetctl status` / metrics read
/// them; tests too).
#[derive(Debug)]
pub struct ReplicaCounters {
    /// How long batches waited for a majority to hold their extents
    /// (seconds; `/metrics` `duet_replica_majority_wait_seconds`).
    pub majority_wait: prometheus_client::metrics::histogram::Histogram,
    pub pushes_sent: AtomicU64,
    pub push_bytes_sent: AtomicU64,
    /// Pushes not sent to a peer: its queued or unacknowledged bytes
    /// were at their bound (`replica_push_mib`), or its queue was full.
    pub pushes_skipped: AtomicU64,
    pub acks_received: AtomicU64,
    /// Batches that failed: no majority within [`PUSH_WAIT`].
    pub majority_timeouts: AtomicU64,
    pub pushes_logged: AtomicU64,
    pub fetches_sent: AtomicU64,
    pub fetches_answered: AtomicU64,
    /// Fetches that no peer answered with the bytes.
    pub fetches_failed: AtomicU64,
    /// Inbound frames dropped (bounds full, or undecodable).
    pub inbound_dropped: AtomicU64,
}

impl Default for ReplicaCounters {
    fn default() -> Self {
        ReplicaCounters {
            // 100 us .. 6.5 s, doubling (the wait is bounded by PUSH_WAIT).
            majority_wait: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(100e-6, 2.0, 17),
            ),
            pushes_sent: Default::default(),
            push_bytes_sent: Default::default(),
            pushes_skipped: Default::default(),
            acks_received: Default::default(),
            majority_timeouts: Default::default(),
            pushes_logged: Default::default(),
            fetches_sent: Default::default(),
            fetches_answered: Default::default(),
            fetches_failed: Default::default(),
            inbound_dropped: Default::default(),
        }
    }
}

/// What the data executor needs of the transport: a sender, and the
/// frames of kind Data that arrive.
pub struct ReplicaLink {
    pub sender: PeerSender,
    pub inbound: flume::Receiver<(u64, Vec<u8>)>,
    inbound_bytes: Arc<AtomicU64>,
    counters: Arc<ReplicaCounters>,
    /// `[cluster] replica_push_mib` in bytes, and `replica_workers`.
    push_max: u64,
    workers: usize,
    /// What the transport knows of the peers (their status frames).
    health: Arc<crate::peers::PeerHealth>,
}

/// Registers the Data frame handler on the transport: frames go to a
/// bounded channel (frames and bytes) that [`Replica::serve`] drains.
pub fn link(peers: &PeersHandle) -> ReplicaLink {
    let (frames, max_bytes) = (peers.limits.replica_frames, peers.limits.replica_bytes);
    let (tx, rx) = flume::bounded::<(u64, Vec<u8>)>(frames);
    let bytes = Arc::new(AtomicU64::new(0));
    let counters = Arc::new(ReplicaCounters::default());
    let (b, c) = (bytes.clone(), counters.clone());
    peers.on(
        FrameKind::Data,
        Arc::new(move |from: u64, payload: Vec<u8>| {
            let n = payload.len() as u64;
            if b.fetch_add(n, Ordering::AcqRel) + n > max_bytes || tx.try_send((from, payload)).is_err() {
                b.fetch_sub(n, Ordering::AcqRel);
                c.inbound_dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(from, "replica: inbound data frames at their bound; one dropped");
            }
        }),
    );
    ReplicaLink {
        sender: peers.sender(),
        inbound: rx,
        inbound_bytes: bytes,
        counters,
        push_max: peers.limits.replica_push_bytes,
        workers: peers.limits.replica_workers.max(1),
        health: peers.health.clone(),
    }
}

impl ReplicaLink {
    /// The replication counters (for `/metrics`).
    pub fn counters(&self) -> Arc<ReplicaCounters> {
        self.counters.clone()
    }
}

struct PushWait {
    len: u64,
    sent: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    done: flume::Sender<()>,
    rx: flume::Receiver<()>,
}

/// This node's side of replication.
pub struct Replica {
    sender: PeerSender,
    waits: RefCell<HashMap<ExtentId, PushWait>>,
    /// Per peer: push bytes sent and not acknowledged or given up.
    unacked: RefCell<HashMap<u64, u64>>,
    /// Per peer: push bytes still in its queue (not yet written to its
    /// connection): a stopped peer's stay counted after the batch gave up
    /// waiting for it, until its connection fails and the queue empties.
    queued: RefCell<HashMap<u64, Arc<AtomicU64>>>,
    /// The bound of both, per peer (`replica_push_mib`).
    push_max: u64,
    /// Peers whose last push was skipped at that bound (logged once per
    /// stretch of skips).
    at_bound: RefCell<BTreeSet<u64>>,
    fetches: RefCell<HashMap<(ExtentId, u64), Vec<flume::Sender<Option<Vec<u8>>>>>>,
    work: Rc<glommio::sync::Semaphore>,
    inbound_bytes: Arc<AtomicU64>,
    pub counters: Arc<ReplicaCounters>,
    health: Arc<crate::peers::PeerHealth>,
    /// The store: raft's voter sets (`StoreHandle::voter_halves`).
    store: duet_cluster_store::StoreHandle,
}

impl Replica {
    pub fn new(link: &ReplicaLink, store: duet_cluster_store::StoreHandle) -> Rc<Replica> {
        tracing::info!(
            "write cache replication: replica_push_mib = {}, replica_workers = {}",
            link.push_max >> 20,
            link.workers
        );
        Rc::new(Replica {
            sender: link.sender.clone(),
            waits: Default::default(),
            unacked: Default::default(),
            queued: Default::default(),
            push_max: link.push_max,
            at_bound: Default::default(),
            fetches: Default::default(),
            work: Rc::new(glommio::sync::Semaphore::new(link.workers as u64)),
            inbound_bytes: link.inbound_bytes.clone(),
            counters: link.counters.clone(),
            health: link.health.clone(),
            store,
        })
    }

    /// `peer`'s last status frame, and when it arrived.
    pub fn peer_status(&self, peer: u64) -> Option<(duet_cluster::admin_wire::NodeStatus, Instant)> {
        let p = self.health.peer(peer);
        Some((p.status?, p.status_at?))
    }

    /// Acknowledgements a majority needs besides this node, for the voters
    /// the transport has now (membership changes add and remove peers).
    fn needed(&self) -> usize {
        acks_needed(self.sender.peers().len() + 1)
    }

    /// Whether this node and the voters in `acked` hold a majority of
    /// every voter set of raft's configuration (both halves of a joint
    /// one, and a change not yet applied: `StoreHandle::voter_halves`);
    /// before the store published them, a majority of the transport's
    /// peers and this node.
    fn held(&self, acked: &BTreeSet<u64>) -> bool {
        let halves = self.store.voter_halves();
        if halves.is_empty() {
            return acked.len() >= self.needed();
        }
        let mut holders = acked.clone();
        holders.insert(self.store.node_id());
        duet_cluster::raft_node::held_by_majorities(&holders, &halves)
    }

    /// Sends `extent` to every other voter (those within their bound of
    /// queued and of unacknowledged bytes); [`Replica::wait_majority`]
    /// waits for the acks.
    pub fn push(&self, extent: ExtentId, data: &[u8]) {
        let len = data.len() as u64;
        let payload = Message::Push { extent, data: data.to_vec() }.encode();
        let mut sent = BTreeSet::new();
        {
            let mut unacked = self.unacked.borrow_mut();
            let mut queued = self.queued.borrow_mut();
            for p in self.sender.peers() {
                let u = unacked.entry(p).or_default();
                let q = queued.entry(p).or_default();
                let in_queue = q.load(Ordering::Acquire);
                if *u + len > self.push_max || in_queue + len > self.push_max {
                    self.counters.pushes_skipped.fetch_add(1, Ordering::Relaxed);
                    if self.at_bound.borrow_mut().insert(p) {
                        tracing::warn!(
                            peer = p,
                            "write cache: pushes to node {p} at their bound ({in_queue} bytes queued, {} unacknowledged, \
                             [cluster] replica_push_mib = {}): skipped until it takes them; it fetches what it lacks later",
                            *u,
                            self.push_max >> 20
                        );
                    }
                    continue;
                }
                self.at_bound.borrow_mut().remove(&p);
                let counted = crate::peers::Queued::new(q, len);
                if self.sender.send_counted(p, FrameKind::Data, payload.clone(), Some(counted)) {
                    *u += len;
                    sent.insert(p);
                    self.counters.pushes_sent.fetch_add(1, Ordering::Relaxed);
                    self.counters.push_bytes_sent.fetch_add(len, Ordering::Relaxed);
                } else {
                    self.counters.pushes_skipped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let (done, rx) = flume::bounded(1);
        self.waits.borrow_mut().insert(extent, PushWait { len, sent, acked: BTreeSet::new(), done, rx });
    }

    /// Waits until a majority (this node counted) of every voter set of
    /// raft's configuration holds every one of `extents` durably, at most
    /// [`PUSH_WAIT`] in all; the voters that hold them all (this node
    /// included), for the store to check against the configuration the
    /// proposal meets (`StoreHandle::batch_held`). The extents are no
    /// longer waited for afterwards, whatever the outcome.
    pub async fn wait_majority(&self, extents: &[ExtentId]) -> io::Result<BTreeSet<u64>> {
        let started = Instant::now();
        let deadline = started + PUSH_WAIT;
        let mut result = Ok(());
        for e in extents {
            let rx = {
                let waits = self.waits.borrow();
                match waits.get(e) {
                    Some(w) if self.held(&w.acked) => continue,
                    Some(w) => w.rx.clone(),
                    None => continue,
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let got = futures_lite::future::or(async { rx.recv_async().await.is_ok() }, async {
                glommio::timer::sleep(left).await;
                false
            })
            .await;
            if !got {
                let (acked, held) =
                    self.waits.borrow().get(e).map(|w| (w.acked.len(), self.held(&w.acked))).unwrap_or((0, false));
                if !held {
                    self.counters.majority_timeouts.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        origin = e.origin,
                        seq = e.seq,
                        acked,
                        needed = self.needed(),
                        "write cache: no majority holds the extent within {PUSH_WAIT:?}; the batch fails, nothing proposed"
                    );
                    result = Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "write data not durable on a majority within {PUSH_WAIT:?} ({acked} of {} other voters acknowledged; voter sets {:?})",
                            self.needed(),
                            self.store.voter_halves()
                        ),
                    ));
                    break;
                }
            }
        }
        // The voters holding every extent: this node and those that
        // acknowledged them all.
        let mut holders: Option<BTreeSet<u64>> = None;
        {
            let waits = self.waits.borrow();
            for e in extents {
                let acked = waits.get(e).map(|w| w.acked.clone()).unwrap_or_default();
                holders = Some(match holders {
                    None => acked,
                    Some(h) => h.intersection(&acked).copied().collect(),
                });
            }
        }
        let mut holders = holders.unwrap_or_default();
        holders.insert(self.store.node_id());
        self.finish(extents);
        if !extents.is_empty() {
            self.counters.majority_wait.observe(started.elapsed().as_secs_f64());
        }
        result.map(|()| holders)
    }

    /// Stops waiting for `extents`: the bytes sent and not acknowledged
    /// no longer count against their peers.
    pub fn finish(&self, extents: &[ExtentId]) {
        let mut waits = self.waits.borrow_mut();
        let mut unacked = self.unacked.borrow_mut();
        for e in extents {
            if let Some(w) = waits.remove(e) {
                for p in w.sent.difference(&w.acked) {
                    if let Some(u) = unacked.get_mut(p) {
                        *u = u.saturating_sub(w.len);
                    }
                }
            }
        }
    }

    fn on_ack(&self, from: u64, extent: ExtentId) {
        self.counters.acks_received.fetch_add(1, Ordering::Relaxed);
        let mut waits = self.waits.borrow_mut();
        let Some(w) = waits.get_mut(&extent) else { return };
        if !w.sent.contains(&from) || !w.acked.insert(from) {
            return;
        }
        if let Some(u) = self.unacked.borrow_mut().get_mut(&from) {
            *u = u.saturating_sub(w.len);
        }
        if self.held(&w.acked) {
            let _ = w.done.try_send(());
        }
    }

    /// Asks peers for an extent this node lacks: its origin first, then
    /// the others, [`FETCH_WAIT`] each. The bytes, or an error when none
    /// sent them (the caller retries later).
    pub async fn fetch(&self, extent: ExtentId, range: FetchRange) -> io::Result<Vec<u8>> {
        let peers = self.sender.peers();
        let mut order: Vec<u64> = peers.iter().copied().filter(|p| *p == extent.origin).collect();
        order.extend(peers.iter().copied().filter(|p| *p != extent.origin));
        let payload = Message::Fetch { extent, range }.encode();
        let mut tried = Vec::new();
        for p in order {
            let (tx, rx) = flume::bounded(1);
            self.fetches.borrow_mut().entry((extent, p)).or_default().push(tx);
            self.counters.fetches_sent.fetch_add(1, Ordering::Relaxed);
            let answer = if self.sender.send(p, FrameKind::Data, payload.clone()) {
                futures_lite::future::or(async { rx.recv_async().await.ok() }, async {
                    glommio::timer::sleep(FETCH_WAIT).await;
                    None
                })
                .await
            } else {
                None
            };
            self.fetches.borrow_mut().remove(&(extent, p));
            match answer {
                Some(Some(d)) if d.len() as u64 == range.len => {
                    tracing::info!(origin = extent.origin, seq = extent.seq, from = p, "write cache: fetched a missing extent");
                    return Ok(d);
                }
                Some(Some(d)) => {
                    tracing::warn!(from = p, got = d.len(), want = range.len, "write cache: a fetched extent has the wrong length");
                    tried.push(format!("{p}: wrong length"));
                }
                Some(None) => tried.push(format!("{p}: missing")),
                None => tried.push(format!("{p}: no answer")),
            }
        }
        self.counters.fetches_failed.fetch_add(1, Ordering::Relaxed);
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "extent {}:{} is not in this node's write log and no peer sent it ({})",
                extent.origin,
                extent.seq,
                tried.join(", ")
            ),
        ))
    }

    fn on_answer(&self, from: u64, extent: ExtentId, data: Option<Vec<u8>>) {
        let waiting = self.fetches.borrow_mut().remove(&(extent, from));
        for tx in waiting.into_iter().flatten() {
            let _ = tx.try_send(data.clone());
        }
    }

    /// Takes the Data frames that arrive, until the transport goes away.
    pub async fn serve(self: Rc<Self>, data: Rc<DataPath>, inbound: flume::Receiver<(u64, Vec<u8>)>) {
        while let Ok((from, payload)) = inbound.recv_async().await {
            self.inbound_bytes.fetch_sub(payload.len() as u64, Ordering::AcqRel);
            let msg = match Message::decode(&payload) {
                Ok(m) => m,
                Err(e) => {
                    // Authenticated, but not understood: never acted on.
                    self.counters.inbound_dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(from, "write cache: a data frame does not decode ({e}); dropped");
                    continue;
                }
            };
            drop(payload);
            match msg {
                Message::Push { extent, data: bytes } => {
                    if extent.origin != from {
                        tracing::warn!(from, origin = extent.origin, "write cache: a push of another node's extent; dropped");
                        continue;
                    }
                    let Ok(permit) = self.work.acquire_static_permit(1).await else { break };
                    let (me, dp) = (self.clone(), data.clone());
                    glommio::spawn_local(async move {
                        match dp.replica_append(extent, &bytes).await {
                            Ok(()) => {
                                me.counters.pushes_logged.fetch_add(1, Ordering::Relaxed);
                                let _ = me.sender.send(from, FrameKind::Data, Message::Ack { extent }.encode());
                            }
                            Err(e) => tracing::error!(
                                from,
                                origin = extent.origin,
                                seq = extent.seq,
                                "write cache: cannot log a pushed extent (not acknowledged): {e}"
                            ),
                        }
                        drop(permit);
                    })
                    .detach();
                }
                Message::Ack { extent } => self.on_ack(from, extent),
                Message::Fetch { extent, range } => {
                    let Ok(permit) = self.work.acquire_static_permit(1).await else { break };
                    let (me, dp) = (self.clone(), data.clone());
                    glommio::spawn_local(async move {
                        let answer = match dp.answer_fetch(extent, range).await {
                            Ok(Some(d)) => Message::Have { extent, data: d },
                            Ok(None) => Message::Missing { extent },
                            Err(e) => {
                                tracing::warn!(from, "write cache: cannot read an extent a peer asked for: {e}");
                                Message::Missing { extent }
                            }
                        };
                        me.counters.fetches_answered.fetch_add(1, Ordering::Relaxed);
                        let _ = me.sender.send(from, FrameKind::Data, answer.encode());
                        drop(permit);
                    })
                    .detach();
                }
                Message::Have { extent, data: d } => self.on_answer(from, extent, Some(d)),
                Message::Missing { extent } => self.on_answer(from, extent, None),
            }
        }
    }
}
