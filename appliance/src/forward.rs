//! Forwarding client batches from a follower to the leader (issue 12).
//!
//! Every node of a multi-node cluster serves SMB and NFS. A follower never
//! commits a batch itself: its engine sends the batch to the leader in a
//! `FrameKind::Forward` frame (payload: `duet_cluster::forward_wire`), the
//! leader's engine runs it exactly as a local client's batch (write log,
//! one raft proposal, chunk reads) and the result comes back in another
//! Forward frame on the leader's own outbound connection. Read-only
//! batches go to the leader too (it holds every extent an applied entry
//! names); the store answers reads only at a quorum-confirmed read index,
//! so a deposed leader that does not know it yet never answers stale.
//! The leader runs a forwarded metadata-only batch straight away (the
//! store refuses a change with `NotLeader` if it no longer leads); one
//! with file data is first checked against raft's view of who leads.
//!
//! - [`LeaderView`]: which node leads, as this node's raft sees it,
//!   polled from the store every [`VIEW_POLL`] by a std thread.
//! - [`Forwarder`]: request ids, the replies' waiters, at most
//!   `[cluster] forward_max` batches in flight, the timeout.
//! - [`serve_requests`]: the leader's side, the handler of Forward frames
//!   (it runs on the connection's thread and only queues work).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use duet_cluster::admin_wire::{self, AdminMsg, AdminOutcome, AdminRequestMsg, NodeStatus};
use duet_cluster::forward_wire::{self, ForwardMsg, ForwardOutcome};
use duet_cluster::peer_wire::FrameKind;
use duet_cluster_store::{Query, QueryAnswer, StoreHandle};
use duet_fs::{Batch, BatchResult};

use crate::engine::EngineRequest;
use crate::peers::{PeerHealth, PeerSender, PeersHandle};

/// How often the leader view asks the store who leads.
pub const VIEW_POLL: Duration = Duration::from_millis(20);
/// How often a waiting batch looks at the leader view again.
pub const ROUTE_POLL: Duration = Duration::from_millis(20);

/// Who leads, as this node's raft sees it (refreshed every [`VIEW_POLL`]).
pub struct LeaderView {
    /// The leader's id; 0 while there is none.
    leader: AtomicU64,
    stop: AtomicBool,
}

impl LeaderView {
    /// Starts the polling thread. Each poll also hands this node's raft
    /// progress to the transport, whose status frames carry it to the
    /// peers (`GET /v1/cluster` on any node shows every node's applied
    /// index).
    pub fn start(store: StoreHandle, health: Arc<PeerHealth>) -> std::io::Result<Arc<LeaderView>> {
        let view = Arc::new(LeaderView { leader: AtomicU64::new(0), stop: AtomicBool::new(false) });
        let v = view.clone();
        std::thread::Builder::new().name("duet-leader-view".into()).spawn(move || {
            while !v.stop.load(Ordering::Relaxed) {
                match store.query_blocking(Query::RaftStatus) {
                    Ok(QueryAnswer::Raft(s)) => {
                        v.leader.store(s.leader_id, Ordering::Relaxed);
                        health.set_local(NodeStatus {
                            applied: s.applied_index,
                            term: s.term,
                            commit: s.commit_index,
                            last_index: Some(s.last_index),
                            destage: Some(admin_wire::Destage { upto: s.destaged_upto, queue: s.destage_queue }),
                        });
                    }
                    Ok(_) => {}
                    // The store is shut down or failed: no leader known here.
                    Err(_) => v.leader.store(0, Ordering::Relaxed),
                }
                std::thread::sleep(VIEW_POLL);
            }
        })?;
        Ok(view)
    }

    pub fn leader(&self) -> Option<u64> {
        let l = self.leader.load(Ordering::Relaxed);
        (l != 0).then_some(l)
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Counters of forwarding, for the log and tests.
#[derive(Debug, Default)]
pub struct ForwardCounters {
    pub sent: AtomicU64,
    pub answered: AtomicU64,
    /// Re-routed after the node asked said it was not the leader.
    pub not_leader: AtomicU64,
    /// Answered with the retry error: no leader in time, a full queue.
    pub unavailable: AtomicU64,
    /// Outcome unknown (the leader died or was cut off, a timeout).
    pub unknown: AtomicU64,
    /// Identified changes sent again after an unknown outcome (forwarded
    /// or a local proposal's timeout), same id (exactly-once resend).
    pub resent: AtomicU64,
    /// Changes answered the retry answer because their outcome stayed
    /// unknown until the leader wait ran out.
    pub gave_up: AtomicU64,
    /// Requests served as the leader.
    pub served: AtomicU64,
    /// Undecodable Forward payloads dropped.
    pub refused: AtomicU64,
}

/// What one forwarded call came to.
#[derive(Debug)]
pub enum Call {
    /// The leader ran it.
    Done(BatchResult),
    /// Not run (not the leader, its queue full, ours full): safe to route
    /// again.
    Again,
    /// Failed on the leader as a local batch fails.
    Failed(String),
    /// Sent, and no answer: it may have committed. Re-sent only with its
    /// request id (`Batch::request`: exactly-once resend), else never.
    Unknown(String),
}

/// The follower's side: sends batches to the leader and matches replies.
pub struct Forwarder {
    pub node_id: u64,
    sender: PeerSender,
    health: Arc<PeerHealth>,
    pub view: Arc<LeaderView>,
    pending: Mutex<HashMap<u64, flume::Sender<ForwardOutcome>>>,
    next_id: AtomicU64,
    /// Tokens: one per batch that may be in flight (`forward_max`).
    slots_tx: flume::Sender<()>,
    slots_rx: flume::Receiver<()>,
    pub timeout: Duration,
    pub leader_wait: Duration,
    /// `[cluster] smb_leader_wait_ms` (at least `leader_wait`): SMB
    /// requests are answered STATUS_PENDING while they wait.
    pub smb_leader_wait: Duration,
    pub counters: ForwardCounters,
    /// Exactly-once resend: this process's session, a random nonzero
    /// epoch drawn at start (`duet_fs::RequestId`), and the next batch
    /// sequence number (from 1).
    epoch: u64,
    next_seq: AtomicU64,
}

/// Gives a slot back when the call ends, however it ends.
struct Slot<'a>(&'a flume::Sender<()>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let _ = self.0.try_send(());
    }
}

impl Forwarder {
    pub fn new(
        node_id: u64,
        peers: &PeersHandle,
        view: Arc<LeaderView>,
        max: usize,
        timeout: Duration,
        leader_wait: Duration,
        smb_leader_wait: Duration,
    ) -> Arc<Forwarder> {
        let (slots_tx, slots_rx) = flume::bounded(max.max(1));
        for _ in 0..max.max(1) {
            let _ = slots_tx.try_send(());
        }
        // Request ids start at a random point so that a restarted node's
        // ids do not meet replies meant for its previous life.
        let start = {
            use rand::RngCore;
            rand::rngs::OsRng.next_u64() >> 1
        };
        Arc::new(Forwarder {
            node_id,
            sender: peers.sender(),
            health: peers.health.clone(),
            view,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(start),
            slots_tx,
            slots_rx,
            timeout,
            leader_wait,
            smb_leader_wait: smb_leader_wait.max(leader_wait),
            counters: ForwardCounters::default(),
            epoch: {
                use rand::RngCore;
                rand::rngs::OsRng.next_u64().max(1)
            },
            next_seq: AtomicU64::new(1),
        })
    }

    /// A new identity for a batch that may be resent (exactly-once resend;
    /// `duet_cluster::machine::sessions`).
    pub fn request_id(&self) -> duet_fs::RequestId {
        duet_fs::RequestId { origin: self.node_id, epoch: self.epoch, seq: self.next_seq.fetch_add(1, Ordering::Relaxed) }
    }

    /// Batches forwarded and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Whether `id` can take a batch and answer: this node's connection
    /// to it and its connection to this node are both up (a killed
    /// leader's closes at once, so a batch waits for the next leader
    /// instead of being sent into a dead socket).
    pub fn reachable(&self, id: u64) -> bool {
        self.health.reachable(id)
    }

    /// A slot, waiting asynchronously up to `deadline`.
    async fn slot(&self, deadline: Instant) -> Option<Slot<'_>> {
        if self.slots_rx.try_recv().is_ok() {
            return Some(Slot(&self.slots_tx));
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        let got = futures_lite::future::or(async { self.slots_rx.recv_async().await.is_ok() }, async {
            glommio::timer::sleep(left).await;
            false
        })
        .await;
        got.then(|| Slot(&self.slots_tx))
    }

    /// Sends `batch` to `leader` and waits for the outcome: at most
    /// `timeout`, less if the leader changes or its connection drops while
    /// waiting (then the outcome is unknown).
    pub async fn call(&self, leader: u64, batch: &Batch, slot_deadline: Instant) -> Call {
        let Some(_slot) = self.slot(slot_deadline).await else {
            return Call::Again;
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = flume::bounded(1);
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        let payload = forward_wire::encode_request(id, batch);
        if !self.sender.send(leader, FrameKind::Forward, payload) {
            // Its queue is full: never sent.
            self.forget(id);
            return Call::Again;
        }
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let outcome = loop {
            match answer_or_tick(&rx).await {
                Some(Some(o)) => break Some(o),
                None => break None, // the waiter was dropped
                Some(None) => {}
            }
            let moved = self.view.leader() != Some(leader) && self.view.leader().is_some();
            if started.elapsed() >= self.timeout || moved || !self.reachable(leader) {
                break None;
            }
        };
        self.forget(id);
        match outcome {
            Some(ForwardOutcome::Done(r)) => {
                self.counters.answered.fetch_add(1, Ordering::Relaxed);
                Call::Done(r)
            }
            Some(ForwardOutcome::NotLeader { .. }) | Some(ForwardOutcome::Busy) => {
                self.counters.not_leader.fetch_add(1, Ordering::Relaxed);
                Call::Again
            }
            Some(ForwardOutcome::Failed(t)) => Call::Failed(t),
            Some(ForwardOutcome::Unavailable(t)) => {
                self.counters.unknown.fetch_add(1, Ordering::Relaxed);
                Call::Unknown(t)
            }
            None => {
                self.counters.unknown.fetch_add(1, Ordering::Relaxed);
                Call::Unknown(format!(
                    "node {leader} did not answer a forwarded batch within {} ms (it died, was cut off or \
                     lost its leadership); the batch may have committed",
                    started.elapsed().as_millis()
                ))
            }
        }
    }

    fn forget(&self, id: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
        }
    }

    /// A reply arrived: wake its waiter (a late reply finds none and is
    /// dropped).
    fn on_reply(&self, id: u64, outcome: ForwardOutcome) {
        let w = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        if let Some(w) = w {
            let _ = w.try_send(outcome);
        }
    }
}

/// Registers the handler of Forward frames: replies go to `fwd`'s
/// waiters; requests are queued to the engine on the data executor
/// (`engine_tx`, bounded; a full queue answers Busy at once), whose task
/// runs the batch and sends the reply back to the requester.
pub fn serve_requests(peers: &PeersHandle, fwd: Arc<Forwarder>, engine_tx: flume::Sender<EngineRequest>) {
    let sender = peers.sender();
    peers.on(
        FrameKind::Forward,
        Arc::new(move |from: u64, payload: Vec<u8>| match forward_wire::decode(&payload) {
            Ok(ForwardMsg::Reply { id, outcome }) => fwd.on_reply(id, outcome),
            Ok(ForwardMsg::Request { id, batch }) => {
                fwd.counters.served.fetch_add(1, Ordering::Relaxed);
                let s = sender.clone();
                let reply: Box<dyn FnOnce(ForwardOutcome) + Send> = Box::new(move |outcome: ForwardOutcome| {
                    let _ = s.send(from, FrameKind::Forward, forward_wire::encode_reply(id, &outcome));
                });
                if let Err(e) = engine_tx.try_send(EngineRequest::Forwarded { batch, reply }) {
                    if let EngineRequest::Forwarded { reply, .. } = e.into_inner() {
                        reply(ForwardOutcome::Busy);
                    }
                }
            }
            Err(e) => {
                // Never acted on: dropped, and said once in a while.
                let n = fwd.counters.refused.fetch_add(1, Ordering::Relaxed);
                if n < 16 || n % 1000 == 0 {
                    tracing::warn!(peer = from, "cluster: dropped an undecodable forwarded message from node {from}: {e}");
                }
            }
        }),
    );
}

/// Admin requests forwarded from followers and not yet taken by the admin
/// task (more are answered Busy: nothing done, the follower retries
/// until its `leader_wait_ms`).
pub const ADMIN_INBOUND_MAX: usize = 64;

/// A leader not heard from for this long (it sends a status frame every
/// 500 ms) while another is elected will not answer a forwarded change.
pub const ADMIN_SILENT: Duration = Duration::from_millis(1500);

/// Counters of admin forwarding (`/metrics`).
#[derive(Debug, Default)]
pub struct AdminCounters {
    /// Requests this node sent to the leader.
    pub sent: AtomicU64,
    /// Answered by the leader (whatever its HTTP status).
    pub answered: AtomicU64,
    /// Sent and not answered in time: 504 outcome_unknown.
    pub unknown: AtomicU64,
    /// No leader within leader_wait_ms: 503 no_leader.
    pub no_leader: AtomicU64,
    /// Re-routed: the node asked did not lead, or was busy.
    pub rerouted: AtomicU64,
    /// Requests this node ran for a follower.
    pub served: AtomicU64,
    /// Undecodable admin payloads dropped.
    pub refused: AtomicU64,
}

/// A forwarded admin request as the leader's admin task takes it.
pub struct IncomingAdmin {
    pub from: u64,
    pub request: AdminRequestMsg,
    /// Sends the outcome back to `from`.
    pub reply: Box<dyn FnOnce(AdminOutcome) + Send>,
}

/// What one forwarded admin call came to.
#[derive(Debug)]
pub enum AdminCall {
    /// The leader answered: its audit text and HTTP response, verbatim.
    Done { audit: String, http: Vec<u8> },
    /// Nothing was done (not the leader, busy, our queue to it full):
    /// safe to route again.
    Again,
    /// Sent and not answered in time: never sent again.
    Unknown(String),
}

/// Mutating admin API requests between followers and the leader over the
/// peer links (`FrameKind::Admin`, `duet_cluster::admin_wire`): a
/// follower authenticates the caller, then sends the request (method,
/// target, body; never the credentials) to the leader, whose admin code
/// runs it as its own caller's and returns the HTTP response.
pub struct AdminLink {
    pub node_id: u64,
    sender: PeerSender,
    health: Arc<PeerHealth>,
    pub view: Arc<LeaderView>,
    pending: Mutex<HashMap<u64, flume::Sender<AdminOutcome>>>,
    next_id: AtomicU64,
    incoming_tx: flume::Sender<IncomingAdmin>,
    incoming_rx: flume::Receiver<IncomingAdmin>,
    /// `[cluster] forward_timeout_ms`.
    pub timeout: Duration,
    /// `[cluster] leader_wait_ms`.
    pub leader_wait: Duration,
    pub counters: AdminCounters,
}

impl AdminLink {
    /// Registers the handler of Admin frames on the transport.
    pub fn start(node_id: u64, peers: &PeersHandle, view: Arc<LeaderView>, timeout: Duration, leader_wait: Duration) -> Arc<AdminLink> {
        let (incoming_tx, incoming_rx) = flume::bounded(peers.limits.admin_forwarded);
        let start = {
            use rand::RngCore;
            rand::rngs::OsRng.next_u64() >> 1
        };
        let link = Arc::new(AdminLink {
            node_id,
            sender: peers.sender(),
            health: peers.health.clone(),
            view,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(start),
            incoming_tx,
            incoming_rx,
            timeout,
            leader_wait,
            counters: AdminCounters::default(),
        });
        let l = link.clone();
        let sender = peers.sender();
        peers.on(
            FrameKind::Admin,
            Arc::new(move |from: u64, payload: Vec<u8>| match admin_wire::decode(&payload) {
                Ok(AdminMsg::Reply { id, outcome }) => {
                    let w = l.pending.lock().ok().and_then(|mut p| p.remove(&id));
                    if let Some(w) = w {
                        let _ = w.try_send(outcome);
                    }
                }
                Ok(AdminMsg::Request { id, request }) => {
                    let s = sender.clone();
                    let reply: Box<dyn FnOnce(AdminOutcome) + Send> = Box::new(move |o: AdminOutcome| {
                        let _ = s.send(from, FrameKind::Admin, admin_wire::encode_reply(id, &o));
                    });
                    if let Err(e) = l.incoming_tx.try_send(IncomingAdmin { from, request, reply }) {
                        (e.into_inner().reply)(AdminOutcome::Busy);
                    }
                }
                Err(e) => {
                    let n = l.counters.refused.fetch_add(1, Ordering::Relaxed);
                    if n < 16 || n % 1000 == 0 {
                        tracing::warn!(peer = from, "cluster: dropped an undecodable admin message from node {from}: {e}");
                    }
                }
            }),
        );
        link
    }

    /// The requests followers forwarded, for the admin task.
    pub fn incoming(&self) -> flume::Receiver<IncomingAdmin> {
        self.incoming_rx.clone()
    }

    /// Whether `id` can take a request and answer: this node's connection
    /// to it and its connection to this node are both up.
    pub fn reachable(&self, id: u64) -> bool {
        self.health.reachable(id)
    }

    /// Whether `id` was not heard from within [`ADMIN_SILENT`] (stopped,
    /// or cut off without a reset): a request is not sent to it.
    pub fn silent(&self, id: u64) -> bool {
        self.health.peer(id).heard.is_none_or(|h| h.elapsed() > ADMIN_SILENT)
    }

    /// Sends `request` to `leader` and waits for its answer, at most
    /// `wait` (less if the leader changes or its connection drops: then
    /// the outcome is unknown).
    pub async fn call(&self, leader: u64, request: &AdminRequestMsg, wait: Duration) -> AdminCall {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = flume::bounded(1);
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        if !self.sender.send(leader, FrameKind::Admin, admin_wire::encode_request(id, request)) {
            self.forget(id);
            return AdminCall::Again;
        }
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let outcome = loop {
            match answer_or_tick(&rx).await {
                Some(Some(o)) => break Some(o),
                None => break None, // the waiter was dropped
                Some(None) => {}
            }
            // Another leader and the one asked silent (stopped, cut off):
            // no answer will come. A leader that moved but still talks
            // answers within its own bound (a transfer moves it on
            // purpose).
            let moved = self.view.leader().is_some_and(|l| l != leader);
            if started.elapsed() >= wait || (moved && self.silent(leader)) || !self.reachable(leader) {
                break None;
            }
        };
        self.forget(id);
        match outcome {
            Some(AdminOutcome::Response { audit, http }) => {
                self.counters.answered.fetch_add(1, Ordering::Relaxed);
                AdminCall::Done { audit, http }
            }
            Some(AdminOutcome::NotLeader { .. }) | Some(AdminOutcome::Busy) => {
                self.counters.rerouted.fetch_add(1, Ordering::Relaxed);
                AdminCall::Again
            }
            None => {
                self.counters.unknown.fetch_add(1, Ordering::Relaxed);
                AdminCall::Unknown(format!(
                    "node {leader}, the leader, did not answer the forwarded change within {} ms (it died, was cut \
                     off or lost its leadership); the change may or may not have been applied and was not sent \
                     again: look (duetctl share list / user list) before retrying",
                    started.elapsed().as_millis()
                ))
            }
        }
    }

    fn forget(&self, id: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_bound_the_calls_in_flight() {
        // The bound is a channel of tokens: forward_max tokens, one taken
        // per call, given back when the call ends.
        let (tx, rx) = flume::bounded::<()>(3);
        for _ in 0..3 {
            tx.try_send(()).unwrap();
        }
        let held: Vec<super::Slot<'_>> = (0..3).map(|_| {
            rx.try_recv().unwrap();
            super::Slot(&tx)
        }).collect();
        assert!(rx.try_recv().is_err(), "a fourth call would find no slot");
        drop(held);
        assert_eq!(rx.len(), 3, "ended calls give their slots back");
        assert!(tx.try_send(()).is_err(), "never more than forward_max slots");
    }
}

/// The answer to a forwarded call if it comes within 50 ms (`Some(Some)`),
/// a tick after 50 ms without one (`Some(None)`: the caller checks the
/// leader and its deadline), or `None` when the waiter was dropped.
async fn answer_or_tick<T>(rx: &flume::Receiver<T>) -> Option<Option<T>> {
    futures_lite::future::or(async { rx.recv_async().await.ok().map(Some) }, async {
        glommio::timer::sleep(Duration::from_millis(50)).await;
        Some(None)
    })
    .await
}
