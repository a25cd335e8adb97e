//! The raft transport between duetd processes (issue 12): TCP on
//! `[cluster] listen`, each connection authenticated by the sans-I/O
//! [`duet_cluster::peer_wire`] handshake (both ends prove the cluster
//! secret), then tagged frames that carry raft-rs messages (protobuf, as
//! raft-rs encodes them).
//!
//! Plain std threads (no glommio: a handful of connections, and the
//! metadata thread they feed is a std thread too):
//!
//! - one *outbound* thread per peer owns the connection this node dialled
//!   and sends the messages the metadata thread queued for that peer
//!   (a bounded queue of [`PEER_QUEUE_MAX`] messages: a full queue drops
//!   the message, raft retries); it reconnects with backoff and tells raft
//!   when the peer is unreachable;
//! - the *listener* thread accepts; one thread per accepted connection
//!   runs the responder handshake and hands each authenticated, decoded
//!   message to the store ([`StoreHandle::step`]).
//!
//! Besides raft, a connection carries frames of other kinds (write-cache
//! data, forwarded batches): one-way messages, each queued to its peer
//! with [`PeerSender::send`] and handed on arrival to the handler
//! registered for its kind ([`PeersHandle::on`]). A request and its
//! reply are two such messages, each on its sender's outbound connection.
//!
//! A connection that fails the handshake (another secret, an unknown
//! node id, not the peer protocol) is refused and logged with its address.
//! A frame that fails its tag, or a raft message that does not decode or
//! claims another sender than the authenticated peer, drops the connection
//! and is logged: nothing unauthenticated or undecodable reaches raft.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use duet_cluster::admin_wire::{self, NodeStatus};
use duet_cluster::peer_wire::{FrameKind, Handshake, HandshakeStep, PeerWireError, Session, NONCE_LEN};
use duet_cluster::raft_node::RaftMessage;
use duet_cluster_store::{Outbox, Query, QueryAnswer, StoreHandle};
use protobuf::Message as _;
use rand::RngCore;

use crate::snapshot::Snapshots;

/// Raft messages queued per peer before the transport drops new ones
/// (`[cluster] peer_queue`'s default).
pub const PEER_QUEUE_MAX: usize = 1024;
/// Bytes of frames of every kind queued per peer before the transport
/// drops new ones (`[cluster] peer_queue_mib`'s default).
pub const PEER_QUEUE_BYTES_MAX: u64 = 256 << 20;
/// Inbound connections served at once (authenticated or still in their
/// handshake); more are closed at once, so strangers cannot pile up
/// threads (`[cluster] peer_connections`'s default).
pub const INBOUND_MAX: usize = 64;

/// The bounds of the cluster's queues, from `[cluster]` (docs/limits.md):
/// what a slow, dead or partitioned peer can make this node hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLimits {
    /// Raft messages queued per peer (`peer_queue`).
    pub queue: usize,
    /// Bytes of the frames queued per peer, of every kind
    /// (`peer_queue_mib`).
    pub queue_bytes: u64,
    /// Inbound peer connections served at once (`peer_connections`).
    pub inbound: usize,
    /// Raft snapshot images served at once (`snapshot_transfers`).
    pub snapshot_transfers: usize,
    /// Inbound write-cache frames queued (`replica_inbound`) and their
    /// bytes (`replica_inbound_mib`).
    pub replica_frames: usize,
    pub replica_bytes: u64,
    /// Admin changes forwarded by followers waiting for the leader's admin
    /// task (`forwarded_admin`).
    pub admin_forwarded: usize,
    /// Write-data bytes pushed to one peer and still queued for its
    /// connection or unacknowledged (`replica_push_mib`).
    pub replica_push_bytes: u64,
    /// Pushes logged and fetches answered at once (`replica_workers`).
    pub replica_workers: usize,
}

impl Default for PeerLimits {
    fn default() -> Self {
        PeerLimits {
            queue: PEER_QUEUE_MAX,
            queue_bytes: PEER_QUEUE_BYTES_MAX,
            inbound: INBOUND_MAX,
            snapshot_transfers: crate::snapshot::SERVE_MAX,
            replica_frames: crate::replica::INBOUND_MAX,
            replica_bytes: crate::replica::INBOUND_BYTES_MAX,
            admin_forwarded: crate::forward::ADMIN_INBOUND_MAX,
            replica_push_bytes: crate::replica::PUSH_BYTES_MAX,
            replica_workers: crate::replica::WORKERS as usize,
        }
    }
}
/// Messages written to one peer per batch (one flush).
const BATCH_MAX: usize = 64;
/// Backoff between connection attempts to a peer: doubles from the first
/// to the last.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// A TCP connect, or a handshake, that takes longer fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a connection carries this node's [`NodeStatus`] (applied
/// index, term, commit), busy or idle; it is the keep-alive too (the
/// empty Ping kind is still accepted). An inbound connection that hears
/// nothing for [`IDLE_TIMEOUT`] is dropped.
pub const STATUS_EVERY: Duration = Duration::from_millis(500);
/// A peer is healthy while an authenticated frame from it arrived within
/// this bound (it sends a status frame every [`STATUS_EVERY`]).
pub const HEARD_WITHIN: Duration = Duration::from_secs(3);
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// A write to a peer that takes longer drops the connection (it is
/// retried with backoff; raft resends).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// An outbound connection whose frames stay unacknowledged by the peer's
/// TCP this long fails (TCP_USER_TIMEOUT), and is dialled again with
/// backoff. Without it a silent partition (packets dropped, no reset)
/// leaves a connection that looks up: writes go into the send buffer
/// (status frames every 500 ms never fill it, so [`WRITE_TIMEOUT`] does
/// not fire), the follower's forwarder deems the leader reachable, and
/// after healing the link waits for the kernel's next retransmission,
/// which backs off exponentially (seconds after a short cut, about a
/// minute after a long one). Found by `tests/cluster_partition.rs`.
const UNACKED_TIMEOUT: Duration = Duration::from_secs(3);

/// What goes to a peer: a raft message, or a frame of another kind whose
/// payload its owner encoded; each counted in its peer's queue bytes
/// ([`PeerQueue`]) until written or dropped.
pub enum Outgoing {
    Raft(RaftMessage, Queued),
    /// The payload, and what counts it while it is queued (dropped with
    /// the frame: once written to the connection, or discarded).
    Frame(FrameKind, Vec<u8>, Option<Queued>, Queued),
}

/// Bytes counted against a bound while a frame waits in a peer's queue:
/// the count goes back down when the frame leaves the queue, written or
/// dropped (a peer that is stopped or cut off holds the bytes until its
/// connection fails and its queue is emptied).
pub struct Queued {
    counter: Arc<AtomicU64>,
    bytes: u64,
}

impl Queued {
    /// Counts `bytes` in `counter` until dropped.
    pub fn new(counter: &Arc<AtomicU64>, bytes: u64) -> Queued {
        counter.fetch_add(bytes, Ordering::AcqRel);
        Queued { counter: counter.clone(), bytes }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Takes an authenticated frame of one kind: (the peer that sent it, its
/// payload). Runs on the connection's thread: hand long work elsewhere.
pub type FrameHandler = Arc<dyn Fn(u64, Vec<u8>) + Send + Sync>;

type Handlers = Arc<RwLock<HashMap<FrameKind, FrameHandler>>>;

/// One peer's queue: at most `PeerLimits::queue` frames and, counted in
/// `bytes` while they wait, `max` bytes of them.
#[derive(Clone)]
pub struct PeerQueue {
    tx: flume::Sender<Outgoing>,
    bytes: Arc<AtomicU64>,
    max: u64,
}

impl PeerQueue {
    fn new(limits: &PeerLimits) -> (PeerQueue, flume::Receiver<Outgoing>) {
        let (tx, rx) = flume::bounded(limits.queue);
        (PeerQueue { tx, bytes: Arc::new(AtomicU64::new(0)), max: limits.queue_bytes }, rx)
    }

    /// Queues what `make` builds around the count of its `size` bytes;
    /// false (nothing queued, nothing counted) when the queue holds its
    /// most frames, or its bytes would pass the bound. An empty queue
    /// takes one frame of any size, so a frame larger than the bound
    /// still goes when the peer keeps up.
    fn offer(&self, size: u64, make: impl FnOnce(Queued) -> Outgoing) -> bool {
        let before = self.bytes.fetch_add(size, Ordering::AcqRel);
        let held = Queued { counter: self.bytes.clone(), bytes: size };
        if before > 0 && before.saturating_add(size) > self.max {
            return false; // `held` gives the bytes back
        }
        self.tx.try_send(make(held)).is_ok()
    }

    /// Bytes queued now.
    pub fn queued_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }
}

/// Each peer's queue, by id (peers come and go with membership changes).
type Senders = Arc<RwLock<HashMap<u64, PeerQueue>>>;

/// Queues frames to peers (cloneable, any thread).
#[derive(Clone)]
pub struct PeerSender {
    senders: Senders,
    health: Arc<PeerHealth>,
}

impl PeerSender {
    /// Queues a frame to `to`. False when `to` is not a peer or its queue
    /// is full (the frame is dropped: the caller retries or gives up).
    pub fn send(&self, to: u64, kind: FrameKind, payload: Vec<u8>) -> bool {
        self.send_counted(to, kind, payload, None)
    }

    /// As [`PeerSender::send`], the frame counted by `queued` while it
    /// waits in the peer's queue (a refused frame is not counted).
    pub fn send_counted(&self, to: u64, kind: FrameKind, payload: Vec<u8>, queued: Option<Queued>) -> bool {
        let Some(q) = self.senders.read().ok().and_then(|m| m.get(&to).cloned()) else { return false };
        let size = payload.len() as u64;
        let ok = q.offer(size, |held| Outgoing::Frame(kind, payload, queued, held));
        if !ok {
            self.health.with(to, |p| p.dropped += 1);
        }
        ok
    }

    /// Bytes queued to `to` now (0 for a peer it does not know).
    pub fn queued_bytes(&self, to: u64) -> u64 {
        self.senders.read().ok().and_then(|m| m.get(&to).map(PeerQueue::queued_bytes)).unwrap_or(0)
    }

    /// The peers' ids.
    pub fn peers(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.senders.read().map(|m| m.keys().copied().collect()).unwrap_or_default();
        ids.sort_unstable();
        ids
    }
}

/// What this node knows of one peer (`duetctl cluster status`,
/// `/metrics`).
#[derive(Clone, Debug, Default)]
pub struct PeerState {
    /// This node's outbound connection is established (TCP up and the
    /// peer proved the secret).
    pub connected: bool,
    /// Outbound connections established since start.
    pub connects: u64,
    /// Its authenticated connections to this node now open (a killed
    /// peer's close at once, before a write to it fails).
    pub inbound: u32,
    /// When the last authenticated frame from it arrived.
    pub heard: Option<Instant>,
    /// Its last status frame: its own applied index, term, commit, last
    /// log index; and when it arrived.
    pub status: Option<NodeStatus>,
    pub status_at: Option<Instant>,
    /// Frames (raft messages and others) and their payload bytes written
    /// to it, and read from it.
    pub sent_frames: u64,
    pub sent_bytes: u64,
    pub received_frames: u64,
    pub received_bytes: u64,
    /// Messages for it dropped because its queue was full.
    pub dropped: u64,
    /// Frames from it refused as undecodable (status frames; other kinds
    /// count in their owners).
    pub refused: u64,
}

impl PeerState {
    /// Whether its connection to this node is open and it was heard from
    /// within [`HEARD_WITHIN`] of `now` (a killed peer is unhealthy at
    /// once, a stopped or cut-off one after the bound).
    pub fn healthy(&self, now: Instant) -> bool {
        self.inbound > 0 && self.heard.is_some_and(|h| now.saturating_duration_since(h) <= HEARD_WITHIN)
    }
}

/// What this node knows of its peers, and this node's own status that the
/// connections carry to them.
#[derive(Debug, Default)]
pub struct PeerHealth {
    peers: Mutex<HashMap<u64, PeerState>>,
    local: Mutex<NodeStatus>,
}

impl PeerHealth {
    /// Whether this node's connection to `id` is up.
    pub fn connected(&self, id: u64) -> bool {
        self.peers.lock().map(|m| m.get(&id).is_some_and(|p| p.connected)).unwrap_or(false)
    }

    /// Whether `id` can be sent a request and answer it: both directions'
    /// connections are up.
    pub fn reachable(&self, id: u64) -> bool {
        self.peers.lock().map(|m| m.get(&id).is_some_and(|p| p.connected && p.inbound > 0)).unwrap_or(false)
    }

    /// What this node knows of `id` (default: nothing yet).
    pub fn peer(&self, id: u64) -> PeerState {
        self.peers.lock().ok().and_then(|m| m.get(&id).cloned()).unwrap_or_default()
    }

    /// Every peer's state, by id.
    pub fn snapshot(&self) -> Vec<(u64, PeerState)> {
        let mut v: Vec<(u64, PeerState)> =
            self.peers.lock().map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect()).unwrap_or_default();
        v.sort_by_key(|p| p.0);
        v
    }

    /// This node's raft progress, sent to the peers (set by the leader
    /// view's poller, forward.rs).
    pub fn set_local(&self, s: NodeStatus) {
        if let Ok(mut l) = self.local.lock() {
            *l = s;
        }
    }

    fn local(&self) -> NodeStatus {
        self.local.lock().map(|l| *l).unwrap_or_default()
    }

    fn with(&self, id: u64, f: impl FnOnce(&mut PeerState)) {
        if let Ok(mut m) = self.peers.lock() {
            f(m.entry(id).or_default());
        }
    }

    fn set(&self, id: u64, up: bool) {
        self.with(id, |p| {
            p.connected = up;
            if up {
                p.connects += 1;
            }
        });
    }
}

/// The transport before the store exists: its queues (for the store's
/// [`Outbox`]) and what [`Peers::start`] needs.
pub struct Peers {
    node_id: u64,
    listen: SocketAddr,
    /// The other voters and their cluster addresses.
    others: Vec<(u64, SocketAddr)>,
    secret: Vec<u8>,
    senders: Senders,
    receivers: Vec<(u64, SocketAddr, flume::Receiver<Outgoing>)>,
    handlers: Handlers,
    pub health: Arc<PeerHealth>,
    pub limits: PeerLimits,
}

/// The running transport; dropping it asks its threads to stop.
pub struct PeersHandle {
    /// Snapshot transfers (None: not enabled).
    pub snapshots: Option<Arc<Snapshots>>,
    stop: Arc<AtomicBool>,
    handlers: Handlers,
    sender: PeerSender,
    pub health: Arc<PeerHealth>,
    pub listen: SocketAddr,
    pub limits: PeerLimits,
}

impl PeersHandle {
    /// Hands every frame of `kind` that arrives from then on to `handler`
    /// (one per kind; a later one replaces it). Frames of a kind without
    /// a handler are dropped (logged at debug).
    pub fn on(&self, kind: FrameKind, handler: FrameHandler) {
        if let Ok(mut h) = self.handlers.write() {
            h.insert(kind, handler);
        }
    }

    /// Queues frames to peers.
    pub fn sender(&self) -> PeerSender {
        self.sender.clone()
    }
}

impl Drop for PeersHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the listener's accept.
        let _ = TcpStream::connect_timeout(&self.listen, Duration::from_millis(200));
    }
}

impl Peers {
    /// `voters` with their addresses (this node among them).
    pub fn new(node_id: u64, listen: SocketAddr, voters: &[(u64, SocketAddr)], secret: Vec<u8>) -> Peers {
        Peers::with_limits(node_id, listen, voters, secret, PeerLimits::default())
    }

    /// [`Peers::new`] with the queues bounded by `limits`.
    pub fn with_limits(node_id: u64, listen: SocketAddr, voters: &[(u64, SocketAddr)], secret: Vec<u8>, limits: PeerLimits) -> Peers {
        let others: Vec<(u64, SocketAddr)> = voters.iter().filter(|(id, _)| *id != node_id).copied().collect();
        let mut senders = HashMap::new();
        let mut receivers = Vec::new();
        for &(id, addr) in &others {
            let (tx, rx) = PeerQueue::new(&limits);
            senders.insert(id, tx);
            receivers.push((id, addr, rx));
        }
        Peers {
            node_id,
            listen,
            others,
            secret,
            senders: Arc::new(RwLock::new(senders)),
            receivers,
            handlers: Default::default(),
            health: Arc::new(PeerHealth::default()),
            limits,
        }
    }

    /// The store's outbox: each message to its peer's queue; a full queue
    /// (or an unknown peer) drops it, and raft sends again.
    pub fn outbox(&self) -> Outbox {
        let senders = self.senders.clone();
        let health = self.health.clone();
        Box::new(move |msgs: Vec<RaftMessage>| {
            for m in msgs {
                let tx = senders.read().ok().and_then(|s| s.get(&m.to).cloned());
                if let Some(tx) = tx {
                    let to = m.to;
                    let size = u64::from(m.compute_size());
                    if !tx.offer(size, |held| Outgoing::Raft(m, held)) {
                        health.with(to, |p| p.dropped += 1);
                        tracing::debug!("cluster: queue to a peer is full; a raft message is dropped");
                    }
                }
            }
        })
    }

    /// Binds `[cluster] listen` and starts the threads, without snapshot
    /// transfers.
    pub fn start(self, store: StoreHandle) -> std::io::Result<PeersHandle> {
        self.start_with(store, None)
    }

    /// Binds `[cluster] listen` and starts the threads; with `snapshots`
    /// (the data directory and the test-only corruption count), raft
    /// snapshots are served and fetched (`snapshot.rs`).
    pub fn start_with(self, store: StoreHandle, snapshots: Option<(std::path::PathBuf, u32)>) -> std::io::Result<PeersHandle> {
        let listener = TcpListener::bind(self.listen).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on the cluster address {} ([cluster] listen): {e}", self.listen))
        })?;
        let listen = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let secret: Arc<[u8]> = self.secret.into();
        let members: Arc<RwLock<Vec<u64>>> = Arc::new(RwLock::new(Vec::new()));
        let snapshots = snapshots.map(|(dir, corrupt)| {
            Arc::new(Snapshots::new(
                self.node_id,
                dir,
                secret.clone(),
                listen,
                self.others.iter().copied().collect(),
                store.clone(),
                corrupt,
                self.limits.snapshot_transfers,
                self.health.clone(),
            ))
        });
        let dynamic = Arc::new(Membership {
            node_id: self.node_id,
            source: listen,
            secret: secret.clone(),
            store: store.clone(),
            health: self.health.clone(),
            stop: stop.clone(),
            snapshots: snapshots.clone(),
            senders: self.senders.clone(),
            members: members.clone(),
            peer_stops: Mutex::new(HashMap::new()),
            addrs: Mutex::new(self.others.iter().copied().collect()),
            limits: self.limits,
        });
        for (peer, addr, rx) in self.receivers {
            dynamic.start_peer(peer, addr, rx)?;
        }
        {
            let d = dynamic.clone();
            std::thread::Builder::new().name("duet-peer-members".into()).spawn(move || d.watch())?;
        }
        let inbound = Inbound {
            node_id: self.node_id,
            members,
            secret,
            store,
            handlers: self.handlers.clone(),
            health: self.health.clone(),
            stop: stop.clone(),
            open: AtomicUsize::new(0),
            inbound_max: self.limits.inbound,
            snapshots: snapshots.clone(),
        };
        std::thread::Builder::new().name("duet-peer-listen".into()).spawn(move || inbound.accept(listener))?;
        tracing::info!(addr = %listen, node = self.node_id, "cluster transport listening");
        Ok(PeersHandle {
            snapshots,
            stop,
            handlers: self.handlers,
            sender: PeerSender { senders: self.senders, health: self.health.clone() },
            health: self.health,
            listen,
            limits: self.limits,
        })
    }
}

pub(crate) fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Wire(#[from] PeerWireError),
    #[error("undecodable raft message: {0}")]
    Undecodable(String),
    #[error("raft message from node {claimed} to node {to} on the connection of node {peer}")]
    WrongSender { claimed: u64, to: u64, peer: u64 },
    #[error("connection closed")]
    Closed,
}

/// Runs a handshake on `stream` to its end: the session and any bytes of
/// frames that followed the peer's proof (already in the receiver).
pub(crate) fn handshake(stream: &mut TcpStream, mut hs: Handshake) -> Result<Session, LinkError> {
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.write_all(&hs.hello())?;
    let mut buf = [0u8; 512];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            hs.finish()?;
            return Err(LinkError::Closed);
        }
        let mut step = hs.feed(&buf[..n])?;
        // Our proof goes out before the peer's is checked (so a peer
        // without the secret learns, and logs, that its proof failed).
        loop {
            match step {
                HandshakeStep::Continue { send } if send.is_empty() => break,
                HandshakeStep::Continue { send } => {
                    stream.write_all(&send)?;
                    step = hs.feed(&[])?;
                }
                HandshakeStep::Established { send, session } => {
                    if !send.is_empty() {
                        stream.write_all(&send)?;
                    }
                    return Ok(session);
                }
            }
        }
    }
}

/// Connects to `to` from `source`'s address (not its port) when this node
/// listens on one address: the peer sees, and logs, the node's cluster
/// address.
pub(crate) fn dial(source: SocketAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let stream: TcpStream = if source.ip().is_unspecified() || source.is_ipv4() != to.is_ipv4() {
        TcpStream::connect_timeout(&to, CONNECT_TIMEOUT)?
    } else {
        let sock = socket2::Socket::new(socket2::Domain::for_address(to), socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
        sock.bind(&SocketAddr::new(source.ip(), 0).into())?;
        sock.connect_timeout(&to.into(), CONNECT_TIMEOUT)?;
        sock.into()
    };
    set_unacked_timeout(&stream, UNACKED_TIMEOUT)?;
    Ok(stream)
}

/// Sets TCP_USER_TIMEOUT (Linux tcp(7)): a connection whose sent data
/// stays unacknowledged this long fails with ETIMEDOUT.
fn set_unacked_timeout(stream: &TcpStream, t: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let ms: libc::c_uint = t.as_millis().try_into().unwrap_or(libc::c_uint::MAX);
    // SAFETY: setsockopt on a descriptor `stream` owns, with a pointer to
    // a local c_uint and its size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            &ms as *const libc::c_uint as *const libc::c_void,
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The transport's peers follow raft's configuration: a voter added by a
/// membership change (its address recorded with it) gets a queue and an
/// outbound connection, and may connect in; a removed one loses them.
struct Membership {
    node_id: u64,
    source: SocketAddr,
    secret: Arc<[u8]>,
    store: StoreHandle,
    health: Arc<PeerHealth>,
    stop: Arc<AtomicBool>,
    snapshots: Option<Arc<Snapshots>>,
    senders: Senders,
    members: Arc<RwLock<Vec<u64>>>,
    peer_stops: Mutex<HashMap<u64, Arc<AtomicBool>>>,
    /// Every address known: the configured peers, then those membership
    /// changes recorded.
    addrs: Mutex<HashMap<u64, SocketAddr>>,
    /// The queues' bounds.
    limits: PeerLimits,
}

impl Membership {
    fn start_peer(&self, peer: u64, addr: SocketAddr, rx: flume::Receiver<Outgoing>) -> std::io::Result<()> {
        let peer_stop = Arc::new(AtomicBool::new(false));
        if let Ok(mut m) = self.members.write() {
            if !m.contains(&peer) {
                m.push(peer);
                m.sort_unstable();
            }
        }
        if let Some(s) = &self.snapshots {
            s.set_addr(peer, addr);
        }
        if let Ok(mut p) = self.peer_stops.lock() {
            p.insert(peer, peer_stop.clone());
        }
        let ctx = Outbound {
            node_id: self.node_id,
            source: self.source,
            peer,
            addr,
            secret: self.secret.clone(),
            rx,
            store: self.store.clone(),
            health: self.health.clone(),
            stop: self.stop.clone(),
            peer_stop,
            snapshots: self.snapshots.clone(),
        };
        std::thread::Builder::new().name(format!("duet-peer-{peer}")).spawn(move || ctx.run())?;
        Ok(())
    }

    fn add(&self, peer: u64, addr: SocketAddr) {
        let (tx, rx) = PeerQueue::new(&self.limits);
        if let Ok(mut s) = self.senders.write() {
            s.insert(peer, tx);
        }
        tracing::info!(peer, addr = %addr, "cluster: node {peer} is a voter now: connecting to {addr}");
        if let Err(e) = self.start_peer(peer, addr, rx) {
            tracing::error!(peer, "cluster: cannot start the connection to node {peer}: {e}");
        }
    }

    fn remove(&self, peer: u64) {
        tracing::info!(peer, "cluster: node {peer} is no longer a voter: its connections close");
        if let Some(stop) = self.peer_stops.lock().ok().and_then(|mut p| p.remove(&peer)) {
            stop.store(true, Ordering::Relaxed);
        }
        if let Ok(mut s) = self.senders.write() {
            s.remove(&peer);
        }
        if let Ok(mut m) = self.members.write() {
            m.retain(|p| *p != peer);
        }
    }

    /// Every second: the peers are raft's voters (both halves of a joint
    /// configuration), this node aside.
    fn watch(&self) {
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_secs(1));
            let Ok(QueryAnswer::Raft(raft)) = self.store.query_blocking(Query::RaftStatus) else { continue };
            if let Ok(QueryAnswer::Members(m)) = self.store.query_blocking(Query::Members) {
                if let Ok(mut addrs) = self.addrs.lock() {
                    for (id, a) in m {
                        if let Ok(a) = a.parse() {
                            addrs.insert(id, a);
                        }
                    }
                }
            }
            let target: Vec<u64> = raft.voters.iter().copied().filter(|v| *v != self.node_id).collect();
            if target.is_empty() {
                continue;
            }
            let have: Vec<u64> = self.senders.read().map(|s| s.keys().copied().collect()).unwrap_or_default();
            for id in target.iter().filter(|id| !have.contains(id)) {
                let addr = self.addrs.lock().ok().and_then(|a| a.get(id).copied());
                match addr {
                    Some(a) => self.add(*id, a),
                    None => tracing::warn!(peer = id, "cluster: node {id} is a voter but its address is unknown here"),
                }
            }
            for id in have.iter().filter(|id| !target.contains(id)) {
                self.remove(*id);
            }
        }
    }
}

struct Outbound {
    node_id: u64,
    /// This node's `[cluster] listen` (connections leave from its address).
    source: SocketAddr,
    peer: u64,
    addr: SocketAddr,
    secret: Arc<[u8]>,
    rx: flume::Receiver<Outgoing>,
    store: StoreHandle,
    health: Arc<PeerHealth>,
    stop: Arc<AtomicBool>,
    /// This peer left the configuration.
    peer_stop: Arc<AtomicBool>,
    snapshots: Option<Arc<Snapshots>>,
}

impl Outbound {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.peer_stop.load(Ordering::Relaxed)
    }

    fn run(self) {
        let mut backoff = BACKOFF_MIN;
        // Log a failing peer once per outage, not once per attempt.
        let mut logged_down = false;
        while !self.stopped() {
            match self.connect() {
                Ok((stream, session)) => {
                    tracing::info!(peer = self.peer, addr = %self.addr, "cluster: connected to node {}", self.peer);
                    self.health.set(self.peer, true);
                    backoff = BACKOFF_MIN;
                    let e = self.send_loop(stream, session);
                    self.health.set(self.peer, false);
                    if self.stopped() {
                        break;
                    }
                    tracing::warn!(peer = self.peer, addr = %self.addr, "cluster: connection to node {} lost: {e}", self.peer);
                    logged_down = true;
                    self.store.report_unreachable(self.peer);
                }
                Err(e) => {
                    self.store.report_unreachable(self.peer);
                    let refused = matches!(e, LinkError::Wire(_));
                    if refused {
                        // The peer answered but did not prove the secret (or is
                        // another node): always worth a line.
                        tracing::warn!(peer = self.peer, addr = %self.addr, "cluster: refused node {} at {}: {e}", self.peer, self.addr);
                    } else if !logged_down {
                        tracing::warn!(peer = self.peer, addr = %self.addr, "cluster: cannot reach node {} at {}: {e} (retrying)", self.peer, self.addr);
                        logged_down = true;
                    }
                }
            }
            // Messages queued while the peer is away are stale: drop them
            // (raft sends what is still needed).
            let deadline = Instant::now() + backoff;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                if self.stopped() {
                    return;
                }
                let _ = self.rx.recv_timeout(left.min(Duration::from_millis(100)));
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    fn connect(&self) -> Result<(TcpStream, Session), LinkError> {
        let mut stream = dial(self.source, self.addr)?;
        stream.set_nodelay(true)?;
        // A peer that stops reading (stopped, or cut off without a reset)
        // fails the write instead of holding this thread forever.
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let hs = Handshake::initiator(&self.secret, self.node_id, self.peer, nonce())?;
        let session = handshake(&mut stream, hs)?;
        Ok((stream, session))
    }

    /// Sends queued messages in batches (one write per batch), this node's
    /// status every [`STATUS_EVERY`] (busy or idle); returns why the
    /// connection ended.
    fn send_loop(&self, mut stream: TcpStream, mut session: Session) -> LinkError {
        let mut out = Vec::new();
        // The first status goes out at once (a follower learns the others'
        // applied index as soon as it connects).
        let mut last_status: Option<Instant> = None;
        let (mut frames, mut bytes) = (0u64, 0u64);
        // The counts of the frames in `out` (see [`Queued`]).
        let mut held: Vec<Queued> = Vec::new();
        loop {
            if self.stopped() {
                return LinkError::Closed;
            }
            out.clear();
            let status_due = last_status.is_none_or(|t| t.elapsed() >= STATUS_EVERY);
            if status_due {
                if let Some(s) = &self.snapshots {
                    s.check_unasked(self.peer);
                }
                let payload = admin_wire::encode_status(&self.health.local());
                match session.sender.frame(FrameKind::Status, &payload) {
                    Ok(f) => out.extend_from_slice(&f),
                    Err(e) => return e.into(),
                }
                last_status = Some(Instant::now());
                frames += 1;
                bytes += payload.len() as u64;
            }
            // A status just queued goes out at once; otherwise wait for
            // messages until the next status is due.
            let wait = match last_status {
                Some(t) if !status_due => STATUS_EVERY.saturating_sub(t.elapsed()),
                _ => Duration::ZERO,
            };
            match self.rx.recv_timeout(wait) {
                Ok(m) => {
                    let mut batch = vec![m];
                    while batch.len() < BATCH_MAX {
                        match self.rx.try_recv() {
                            Ok(m) => batch.push(m),
                            Err(_) => break,
                        }
                    }
                    for m in batch {
                        let (kind, payload) = match m {
                            Outgoing::Raft(m, queued) => match m.write_to_bytes() {
                                Ok(b) if m.get_msg_type() == duet_cluster::raft_node::RaftMessageType::MsgSnapshot => {
                                    if let Some(s) = &self.snapshots {
                                        s.sent_to(self.peer);
                                    }
                                    held.push(queued);
                                    (FrameKind::Raft, b)
                                }
                                Ok(b) => {
                                    held.push(queued);
                                    (FrameKind::Raft, b)
                                }
                                Err(e) => return LinkError::Undecodable(e.to_string()),
                            },
                            Outgoing::Frame(kind, payload, queued, in_queue) => {
                                // Counted until written (the encrypted copy
                                // in `out` holds the same bytes).
                                held.extend(queued);
                                held.push(in_queue);
                                (kind, payload)
                            }
                        };
                        match session.sender.frame(kind, &payload) {
                            Ok(f) => out.extend_from_slice(&f),
                            Err(e) => return e.into(),
                        }
                        frames += 1;
                        bytes += payload.len() as u64;
                    }
                }
                // Idle: the status frame (due every STATUS_EVERY, which is
                // far shorter than IDLE_TIMEOUT) keeps the connection alive.
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => return LinkError::Closed,
            }
            if out.is_empty() {
                continue;
            }
            let written = stream.write_all(&out);
            held.clear();
            if let Err(e) = written {
                return e.into();
            }
            let (f, b) = (std::mem::take(&mut frames), std::mem::take(&mut bytes));
            self.health.with(self.peer, |p| {
                p.sent_frames += f;
                p.sent_bytes += b;
            });
        }
    }
}

struct Inbound {
    node_id: u64,
    members: Arc<RwLock<Vec<u64>>>,
    secret: Arc<[u8]>,
    store: StoreHandle,
    handlers: Handlers,
    health: Arc<PeerHealth>,
    stop: Arc<AtomicBool>,
    /// Inbound connections being served, and their bound.
    open: AtomicUsize,
    inbound_max: usize,
    snapshots: Option<Arc<Snapshots>>,
}

impl Inbound {
    fn accept(self, listener: TcpListener) {
        let me = Arc::new(self);
        for conn in listener.incoming() {
            if me.stop.load(Ordering::Relaxed) {
                return;
            }
            let stream = match conn {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("cluster: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let addr = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "an unknown address".into());
            if me.open.fetch_add(1, Ordering::Relaxed) >= me.inbound_max {
                me.open.fetch_sub(1, Ordering::Relaxed);
                let max = me.inbound_max;
                tracing::warn!(addr = %addr, "cluster: refused a peer connection from {addr}: {max} inbound connections already ([cluster] peer_connections)");
                continue;
            }
            let me2 = me.clone();
            let spawned = std::thread::Builder::new().name("duet-peer-in".into()).spawn(move || {
                me2.serve(stream, addr);
                me2.open.fetch_sub(1, Ordering::Relaxed);
            });
            if let Err(e) = spawned {
                me.open.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!("cluster: cannot start a thread for an inbound peer connection: {e}");
            }
        }
    }

    fn serve(&self, mut stream: TcpStream, addr: String) {
        let _ = stream.set_nodelay(true);
        let members = self.members.read().map(|m| m.clone()).unwrap_or_default();
        let hs = match Handshake::responder(&self.secret, self.node_id, &members, nonce()) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!("cluster: {e}");
                return;
            }
        };
        let session = match handshake(&mut stream, hs) {
            Ok(s) => s,
            Err(e) => {
                if !self.stop.load(Ordering::Relaxed) {
                    tracing::warn!(addr = %addr, "cluster: refused a peer connection from {addr}: {e}");
                }
                return;
            }
        };
        let peer = session.peer_id;
        tracing::info!(addr = %addr, peer, "cluster: node {peer} connected from {addr}");
        self.health.with(peer, |p| p.inbound += 1);
        let e = self.receive_loop(&mut stream, session);
        self.health.with(peer, |p| p.inbound = p.inbound.saturating_sub(1));
        if !self.stop.load(Ordering::Relaxed) {
            tracing::warn!(addr = %addr, peer, "cluster: dropped the connection from node {peer} ({addr}): {e}");
        }
    }

    /// Authenticated frames to raft until the connection ends or a frame
    /// is refused.
    fn receive_loop(&self, stream: &mut TcpStream, mut session: Session) -> LinkError {
        let peer = session.peer_id;
        if let Err(e) = stream.set_read_timeout(Some(IDLE_TIMEOUT)) {
            return e.into();
        }
        let mut buf = vec![0u8; 64 << 10];
        loop {
            loop {
                let frame = match session.receiver.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => return e.into(),
                };
                let len = frame.payload.len() as u64;
                self.health.with(peer, |p| {
                    p.heard = Some(Instant::now());
                    p.received_frames += 1;
                    p.received_bytes += len;
                });
                match frame.kind {
                    FrameKind::Raft => {}
                    FrameKind::Ping => continue,
                    FrameKind::Snapshot => {
                        // A follower's request for an image: this
                        // connection is the transfer's, and ends with it.
                        if let Some(s) = &self.snapshots {
                            s.serve(stream, &mut session, &frame.payload);
                        }
                        return LinkError::Closed;
                    }
                    FrameKind::Status => {
                        // Never acted on when undecodable: dropped, counted.
                        match admin_wire::decode_status(&frame.payload) {
                            Ok(st) => {
                                // The leader leaves a removal's joint
                                // configuration only once the voters that
                                // stay report having destaged everything.
                                if let Some(d) = st.destage {
                                    self.store.peer_destaged(peer, d.upto);
                                }
                                self.health.with(peer, |p| {
                                    p.status = Some(st);
                                    p.status_at = Some(Instant::now());
                                })
                            }
                            Err(e) => {
                                let mut n = 0;
                                self.health.with(peer, |p| {
                                    p.refused += 1;
                                    n = p.refused;
                                });
                                if n < 16 || n % 1000 == 0 {
                                    tracing::warn!(peer, "cluster: dropped an undecodable status frame from node {peer}: {e}");
                                }
                            }
                        }
                        continue;
                    }
                    kind => {
                        let handler = self.handlers.read().ok().and_then(|h| h.get(&kind).cloned());
                        match handler {
                            Some(h) => h(peer, frame.payload),
                            None => tracing::debug!(peer, ?kind, "cluster: a frame without a handler is dropped"),
                        }
                        continue;
                    }
                }
                let m = match RaftMessage::parse_from_bytes(&frame.payload) {
                    Ok(m) => m,
                    Err(e) => return LinkError::Undecodable(e.to_string()),
                };
                if m.from != peer || m.to != self.node_id {
                    return LinkError::WrongSender { claimed: m.from, to: m.to, peer };
                }
                if m.get_msg_type() == duet_cluster::raft_node::RaftMessageType::MsgSnapshot {
                    // Its data is a token: the image comes on a connection
                    // of its own, and is installed at the next start.
                    match &self.snapshots {
                        Some(s) => s.wanted(peer, m),
                        None => tracing::warn!(peer, "cluster: a raft snapshot from node {peer} is dropped: snapshots are not enabled"),
                    }
                    continue;
                }
                // A full store queue drops it; raft retries.
                let _ = self.store.step(m);
            }
            if self.stop.load(Ordering::Relaxed) {
                return LinkError::Closed;
            }
            let n = match stream.read(&mut buf) {
                Ok(n) => n,
                Err(e) => return e.into(),
            };
            if n == 0 {
                return match session.receiver.finish() {
                    Ok(()) => LinkError::Closed,
                    Err(e) => e.into(),
                };
            }
            session.receiver.feed(&buf[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_needs_an_open_connection_and_a_recent_frame() {
        let now = Instant::now();
        let mut p = PeerState { heard: Some(now), ..Default::default() };
        assert!(!p.healthy(now), "heard, but its connection is closed (a killed peer)");
        p.inbound = 1;
        assert!(p.healthy(now));
        assert!(p.healthy(now + HEARD_WITHIN));
        assert!(!p.healthy(now + HEARD_WITHIN + Duration::from_millis(1)), "silent past the bound (stopped, cut off)");
        assert!(!PeerState { inbound: 1, ..Default::default() }.healthy(now), "never heard");
    }

    #[test]
    fn reachable_needs_both_directions_and_drops_are_counted() {
        let h = PeerHealth::default();
        assert!(!h.reachable(2));
        h.set(2, true);
        assert!(h.connected(2) && !h.reachable(2), "outbound up, no inbound connection");
        h.with(2, |p| p.inbound += 1);
        assert!(h.reachable(2));
        h.set(2, false);
        h.set(2, true);
        assert_eq!(h.peer(2).connects, 2);
        // A full queue drops and counts; an unknown peer is refused.
        let limits = PeerLimits { queue: 1, ..PeerLimits::default() };
        let (q, _rx) = PeerQueue::new(&limits);
        let health = Arc::new(PeerHealth::default());
        let s = PeerSender { senders: Arc::new(RwLock::new(HashMap::from([(3u64, q)]))), health: health.clone() };
        assert!(s.send(3, FrameKind::Admin, vec![1]));
        assert!(!s.send(3, FrameKind::Admin, vec![2]));
        assert!(!s.send(9, FrameKind::Admin, vec![3]));
        assert_eq!(health.peer(3).dropped, 1);
        assert_eq!(s.queued_bytes(3), 1, "the refused frame is not counted");
        h.set_local(NodeStatus { applied: 5, term: 2, commit: 5, last_index: Some(5), destage: None });
        assert_eq!(h.local().applied, 5);
    }

    #[test]
    fn a_peers_queue_is_bounded_in_bytes_and_gives_them_back_when_frames_leave() {
        let limits = PeerLimits { queue: 100, queue_bytes: 1000, ..PeerLimits::default() };
        let (q, rx) = PeerQueue::new(&limits);
        let health = Arc::new(PeerHealth::default());
        let s = PeerSender { senders: Arc::new(RwLock::new(HashMap::from([(2u64, q)]))), health: health.clone() };
        // An empty queue takes one frame of any size.
        assert!(s.send(2, FrameKind::Admin, vec![0; 5000]));
        assert_eq!(s.queued_bytes(2), 5000);
        assert!(!s.send(2, FrameKind::Admin, vec![0; 1]), "past the bound");
        assert_eq!(s.queued_bytes(2), 5000);
        // Written (or dropped with its connection's queue): counted no more.
        drop(rx.try_recv().unwrap());
        assert_eq!(s.queued_bytes(2), 0);
        for _ in 0..4 {
            assert!(s.send(2, FrameKind::Admin, vec![0; 250]));
        }
        assert!(!s.send(2, FrameKind::Admin, vec![0; 1]), "1000 bytes queued");
        assert_eq!(s.queued_bytes(2), 1000);
        assert_eq!(health.peer(2).dropped, 2);
        // Raft messages count too, by their encoded size.
        let outbox_peers = Peers::with_limits(
            1,
            "127.0.0.1:0".parse().unwrap(),
            &[(1, "127.0.0.1:1".parse().unwrap()), (2, "127.0.0.1:2".parse().unwrap())],
            vec![7; 32],
            PeerLimits { queue: 100, queue_bytes: 64, ..PeerLimits::default() },
        );
        let sender = PeerSender { senders: outbox_peers.senders.clone(), health: outbox_peers.health.clone() };
        let mut outbox = outbox_peers.outbox();
        let mut m = RaftMessage::default();
        m.to = 2;
        let mut e = duet_cluster::raft_node::RaftEntry::default();
        e.data = vec![1u8; 40].into();
        m.entries = vec![e.clone()].into();
        let one = u64::from(m.compute_size());
        outbox(vec![m.clone(), m.clone()]);
        assert_eq!(sender.queued_bytes(2), one, "the second message is past 64 bytes");
        assert_eq!(outbox_peers.health.peer(2).dropped, 1);
        let (_, _, peer_rx) = &outbox_peers.receivers[0];
        assert!(matches!(peer_rx.try_recv(), Ok(Outgoing::Raft(..))));
        assert_eq!(sender.queued_bytes(2), 0, "taken from the queue");
    }
}
