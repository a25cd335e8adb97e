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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use duet_cluster::peer_wire::{FrameKind, Handshake, HandshakeStep, PeerWireError, Session, NONCE_LEN};
use duet_cluster::raft_node::RaftMessage;
use duet_cluster_store::{Outbox, StoreHandle};
use protobuf::Message as _;
use rand::RngCore;

/// Raft messages queued per peer before the transport drops new ones.
pub const PEER_QUEUE_MAX: usize = 1024;
/// Inbound connections served at once (authenticated or still in their
/// handshake); more are closed at once, so strangers cannot pile up
/// threads.
pub const INBOUND_MAX: usize = 64;
/// Messages written to one peer per batch (one flush).
const BATCH_MAX: usize = 64;
/// Backoff between connection attempts to a peer: doubles from the first
/// to the last.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// A TCP connect, or a handshake, that takes longer fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// An idle outbound connection sends a ping this often; an inbound one
/// that hears nothing for [`IDLE_TIMEOUT`] is dropped.
const PING_EVERY: Duration = Duration::from_secs(1);
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// A write to a peer that takes longer drops the connection (it is
/// retried with backoff; raft resends).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What goes to a peer: a raft message, or a frame of another kind whose
/// payload its owner encoded.
pub enum Outgoing {
    Raft(RaftMessage),
    Frame(FrameKind, Vec<u8>),
}

/// Takes an authenticated frame of one kind: (the peer that sent it, its
/// payload). Runs on the connection's thread: hand long work elsewhere.
pub type FrameHandler = Arc<dyn Fn(u64, Vec<u8>) + Send + Sync>;

type Handlers = Arc<RwLock<HashMap<FrameKind, FrameHandler>>>;

/// Queues frames to peers (cloneable, any thread).
#[derive(Clone)]
pub struct PeerSender {
    senders: HashMap<u64, flume::Sender<Outgoing>>,
}

impl PeerSender {
    /// Queues a frame to `to`. False when `to` is not a peer or its queue
    /// is full (the frame is dropped: the caller retries or gives up).
    pub fn send(&self, to: u64, kind: FrameKind, payload: Vec<u8>) -> bool {
        self.senders.get(&to).is_some_and(|tx| tx.try_send(Outgoing::Frame(kind, payload)).is_ok())
    }

    /// The peers' ids.
    pub fn peers(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.senders.keys().copied().collect();
        ids.sort_unstable();
        ids
    }
}

/// What this node knows of its connections, for `duetctl cluster status`.
#[derive(Debug, Default)]
pub struct PeerHealth {
    /// Per peer: whether this node's outbound connection is established
    /// (TCP up and the peer proved the secret).
    connected: Mutex<HashMap<u64, bool>>,
}

impl PeerHealth {
    /// Whether this node's connection to `id` is up.
    pub fn connected(&self, id: u64) -> bool {
        self.connected.lock().map(|m| m.get(&id).copied().unwrap_or(false)).unwrap_or(false)
    }

    fn set(&self, id: u64, up: bool) {
        if let Ok(mut m) = self.connected.lock() {
            m.insert(id, up);
        }
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
    senders: HashMap<u64, flume::Sender<Outgoing>>,
    receivers: Vec<(u64, SocketAddr, flume::Receiver<Outgoing>)>,
    handlers: Handlers,
    pub health: Arc<PeerHealth>,
}

/// The running transport; dropping it asks its threads to stop.
pub struct PeersHandle {
    stop: Arc<AtomicBool>,
    handlers: Handlers,
    sender: PeerSender,
    pub health: Arc<PeerHealth>,
    pub listen: SocketAddr,
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
        let others: Vec<(u64, SocketAddr)> = voters.iter().filter(|(id, _)| *id != node_id).copied().collect();
        let mut senders = HashMap::new();
        let mut receivers = Vec::new();
        for &(id, addr) in &others {
            let (tx, rx) = flume::bounded(PEER_QUEUE_MAX);
            senders.insert(id, tx);
            receivers.push((id, addr, rx));
        }
        Peers {
            node_id,
            listen,
            others,
            secret,
            senders,
            receivers,
            handlers: Default::default(),
            health: Arc::new(PeerHealth::default()),
        }
    }

    /// The store's outbox: each message to its peer's queue; a full queue
    /// (or an unknown peer) drops it, and raft sends again.
    pub fn outbox(&self) -> Outbox {
        let senders = self.senders.clone();
        Box::new(move |msgs: Vec<RaftMessage>| {
            for m in msgs {
                if let Some(tx) = senders.get(&m.to) {
                    if tx.try_send(Outgoing::Raft(m)).is_err() {
                        tracing::debug!("cluster: queue to a peer is full; a raft message is dropped");
                    }
                }
            }
        })
    }

    /// Binds `[cluster] listen` and starts the threads.
    pub fn start(self, store: StoreHandle) -> std::io::Result<PeersHandle> {
        let listener = TcpListener::bind(self.listen).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on the cluster address {} ([cluster] listen): {e}", self.listen))
        })?;
        let listen = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let secret: Arc<[u8]> = self.secret.into();
        let mut members: Vec<u64> = self.others.iter().map(|(id, _)| *id).collect();
        members.sort_unstable();
        for (peer, addr, rx) in self.receivers {
            let ctx = Outbound {
                node_id: self.node_id,
                source: listen,
                peer,
                addr,
                secret: secret.clone(),
                rx,
                store: store.clone(),
                health: self.health.clone(),
                stop: stop.clone(),
            };
            std::thread::Builder::new().name(format!("duet-peer-{peer}")).spawn(move || ctx.run())?;
        }
        let inbound = Inbound {
            node_id: self.node_id,
            members,
            secret,
            store,
            handlers: self.handlers.clone(),
            stop: stop.clone(),
            open: AtomicUsize::new(0),
        };
        std::thread::Builder::new().name("duet-peer-listen".into()).spawn(move || inbound.accept(listener))?;
        tracing::info!(addr = %listen, node = self.node_id, "cluster transport listening");
        Ok(PeersHandle {
            stop,
            handlers: self.handlers,
            sender: PeerSender { senders: self.senders },
            health: self.health,
            listen,
        })
    }
}

fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
enum LinkError {
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
fn handshake(stream: &mut TcpStream, mut hs: Handshake) -> Result<Session, LinkError> {
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
fn dial(source: SocketAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    if source.ip().is_unspecified() || source.is_ipv4() != to.is_ipv4() {
        return TcpStream::connect_timeout(&to, CONNECT_TIMEOUT);
    }
    let sock = socket2::Socket::new(socket2::Domain::for_address(to), socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    sock.bind(&SocketAddr::new(source.ip(), 0).into())?;
    sock.connect_timeout(&to.into(), CONNECT_TIMEOUT)?;
    Ok(sock.into())
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
}

impl Outbound {
    fn run(self) {
        let mut backoff = BACKOFF_MIN;
        // Log a failing peer once per outage, not once per attempt.
        let mut logged_down = false;
        while !self.stop.load(Ordering::Relaxed) {
            match self.connect() {
                Ok((stream, session)) => {
                    tracing::info!(peer = self.peer, addr = %self.addr, "cluster: connected to node {}", self.peer);
                    self.health.set(self.peer, true);
                    backoff = BACKOFF_MIN;
                    let e = self.send_loop(stream, session);
                    self.health.set(self.peer, false);
                    if self.stop.load(Ordering::Relaxed) {
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
                if self.stop.load(Ordering::Relaxed) {
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

    /// Sends queued messages in batches (one write per batch), a ping when
    /// idle; returns why the connection ended.
    fn send_loop(&self, mut stream: TcpStream, mut session: Session) -> LinkError {
        let mut out = Vec::new();
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return LinkError::Closed;
            }
            out.clear();
            match self.rx.recv_timeout(PING_EVERY) {
                Ok(m) => {
                    let mut batch = vec![m];
                    while batch.len() < BATCH_MAX {
                        match self.rx.try_recv() {
                            Ok(m) => batch.push(m),
                            Err(_) => break,
                        }
                    }
                    for m in batch {
                        let (kind, bytes) = match m {
                            Outgoing::Raft(m) => match m.write_to_bytes() {
                                Ok(b) => (FrameKind::Raft, b),
                                Err(e) => return LinkError::Undecodable(e.to_string()),
                            },
                            Outgoing::Frame(kind, payload) => (kind, payload),
                        };
                        match session.sender.frame(kind, &bytes) {
                            Ok(f) => out.extend_from_slice(&f),
                            Err(e) => return e.into(),
                        }
                    }
                }
                Err(flume::RecvTimeoutError::Timeout) => match session.sender.frame(FrameKind::Ping, &[]) {
                    Ok(f) => out.extend_from_slice(&f),
                    Err(e) => return e.into(),
                },
                Err(flume::RecvTimeoutError::Disconnected) => return LinkError::Closed,
            }
            if let Err(e) = stream.write_all(&out) {
                return e.into();
            }
        }
    }
}

struct Inbound {
    node_id: u64,
    members: Vec<u64>,
    secret: Arc<[u8]>,
    store: StoreHandle,
    handlers: Handlers,
    stop: Arc<AtomicBool>,
    /// Inbound connections being served.
    open: AtomicUsize,
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
            if me.open.fetch_add(1, Ordering::Relaxed) >= INBOUND_MAX {
                me.open.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(addr = %addr, "cluster: refused a peer connection from {addr}: {INBOUND_MAX} inbound connections already");
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
        let hs = match Handshake::responder(&self.secret, self.node_id, &self.members, nonce()) {
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
        let e = self.receive_loop(&mut stream, session);
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
                match frame.kind {
                    FrameKind::Raft => {}
                    FrameKind::Ping => continue,
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
