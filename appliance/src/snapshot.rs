//! Raft snapshot transfer between duetd processes (issue 12).
//!
//! A follower that lags past the leader's retained log (`[cluster]
//! log_retain`), or whose data directory was emptied, is sent a
//! `MsgSnapshot` by raft-rs. Its data is empty: the transport takes the
//! message before raft sees it ([`Snapshots::wanted`]) and a thread of its
//! own dials the sender on a connection of its own (the same `peer_wire`
//! handshake), asks for the image (`FrameKind::Snapshot`), and receives it
//! in pieces of at most 1 MiB into `<data>/snapshot/image.partial` (bounded
//! memory; chunk files are 4 MiB). The whole image is then checked
//! (structure, length, SHA-256: `duet_cluster_store::snapshot`); a bad one
//! is refused loudly, deleted, and the leader told (`report_snapshot`
//! failure, so raft sends another). A good one is synced and renamed to
//! `snapshot/image`, the leader told (success), and duetd re-executes
//! itself in place (same pid, same arguments): at start, before the store
//! and the data path open, `snapshot::install_pending` installs the image
//! crash-atomically, and raft goes on from its index (the leader probes
//! the follower from there and sends the log after it).
//!
//! The leader side ([`Snapshots::serve`]) makes a RocksDB checkpoint on
//! the metadata thread and streams the image from it on the requesting
//! connection's thread; at most [`SERVE_MAX`] at once. It first makes the
//! follower's refusal of an image that would drop its destaged copies
//! itself, from the destage progress the follower's status frames report,
//! and sends nothing then (REFUSED). A `MsgSnapshot`
//! whose follower never asks (the message was lost) is reported failed
//! after [`ASK_WITHIN`], so raft does not keep that follower paused.
//!
//! Frames of kind `Snapshot` carry a version byte (1) and a tag: REQUEST
//! (follower: index u64), DATA (leader: image bytes), END (leader: the
//! image is whole), REFUSED (leader: a reason, UTF-8), VERDICT (follower:
//! 1 accepted, 0 refused).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use duet_cluster::peer_wire::{FrameKind, Handshake, Session};
use duet_cluster::raft_node::RaftMessage;
use duet_cluster_store::snapshot as image;
use duet_cluster_store::{Query, QueryAnswer, StoreHandle};

/// Images served at once by this node.
pub const SERVE_MAX: usize = 2;
/// A follower sent a `MsgSnapshot` that has not asked for the image
/// within this is reported failed (raft then probes it and sends again).
pub const ASK_WITHIN: Duration = Duration::from_secs(15);
/// A transfer that makes no progress for this long fails.
const STALL: Duration = Duration::from_secs(30);

const V1: u8 = 1;
const T_REQUEST: u8 = 1;
const T_DATA: u8 = 2;
const T_END: u8 = 3;
const T_REFUSED: u8 = 4;
const T_VERDICT: u8 = 5;

/// Counters for `/metrics` and tests.
/// How often a running fetch logs how much of the image it has.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct SnapshotCounters {
    /// Images this node served whole (the follower accepted them).
    pub served: AtomicU64,
    /// Images this node received, checked and staged.
    pub received: AtomicU64,
    /// Images this node refused (corrupt, truncated) or whose transfer
    /// failed.
    pub failed: AtomicU64,
    /// Images this node did not send (counted in `failed` too): the
    /// follower's status said it had destaged data records the image
    /// still queues, and it would refuse the image once it had it whole
    /// ([`image::refuse_checkpoint_for`]).
    pub withheld: AtomicU64,
}

/// Both ends of snapshot transfers for one node.
pub struct Snapshots {
    node_id: u64,
    data_dir: PathBuf,
    secret: Arc<[u8]>,
    /// This node's `[cluster] listen` (connections leave from its address).
    source: SocketAddr,
    addrs: Mutex<HashMap<u64, SocketAddr>>,
    store: StoreHandle,
    /// A fetch is running (one at a time).
    fetching: AtomicBool,
    serving: AtomicUsize,
    /// `[cluster] snapshot_transfers`.
    serve_max: usize,
    /// `MsgSnapshot`s sent and not yet asked for, by follower.
    sent: Mutex<HashMap<u64, Instant>>,
    /// Test-only (`[testing] snapshot_corrupt`): the next this-many images
    /// served have one byte flipped.
    corrupt: AtomicU32,
    pub counters: SnapshotCounters,
    /// The image being received: (from, bytes so far, started).
    receiving: Mutex<Option<(u64, u64, Instant)>>,
    /// The peers' last status frames (their destage progress).
    health: Arc<crate::peers::PeerHealth>,
    /// By follower: this node's destage progress when it last withheld an
    /// image from it. Until this node destages further, another image
    /// would be withheld too: refused without making a checkpoint.
    withheld_at: Mutex<HashMap<u64, u64>>,
}

impl Snapshots {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node_id: u64,
        data_dir: PathBuf,
        secret: Arc<[u8]>,
        source: SocketAddr,
        addrs: HashMap<u64, SocketAddr>,
        store: StoreHandle,
        corrupt: u32,
        serve_max: usize,
        health: Arc<crate::peers::PeerHealth>,
    ) -> Snapshots {
        // Checkpoints left by a transfer a crash interrupted.
        let _ = std::fs::remove_dir_all(data_dir.join("snapshot-out"));
        Snapshots {
            node_id,
            data_dir,
            secret,
            source,
            addrs: Mutex::new(addrs),
            store,
            fetching: AtomicBool::new(false),
            serving: AtomicUsize::new(0),
            serve_max,
            sent: Mutex::new(HashMap::new()),
            corrupt: AtomicU32::new(corrupt),
            counters: SnapshotCounters::default(),
            receiving: Mutex::new(None),
            health,
            withheld_at: Mutex::new(HashMap::new()),
        }
    }

    /// The image this node is receiving, if any (`GET /v1/cluster`).
    pub fn progress(&self) -> Option<duet_admin_api::SnapshotProgress> {
        let r = self.receiving.lock().ok()?;
        let (from, bytes, started) = (*r)?;
        Some(duet_admin_api::SnapshotProgress { from, bytes, seconds: started.elapsed().as_secs() })
    }

    /// `peer`'s cluster address (a voter a membership change added).
    pub fn set_addr(&self, peer: u64, addr: SocketAddr) {
        if let Ok(mut a) = self.addrs.lock() {
            a.insert(peer, addr);
        }
    }

    /// The outbound connection to `to` sent a `MsgSnapshot`.
    pub fn sent_to(&self, to: u64) {
        if let Ok(mut s) = self.sent.lock() {
            s.entry(to).or_insert_with(Instant::now);
        }
    }

    /// Called now and then by the outbound thread of `peer`: a
    /// `MsgSnapshot` it never asked for is reported failed.
    pub fn check_unasked(&self, peer: u64) {
        let expired = self
            .sent
            .lock()
            .map(|mut s| {
                let old = s.get(&peer).is_some_and(|t| t.elapsed() >= ASK_WITHIN);
                if old {
                    s.remove(&peer);
                }
                old
            })
            .unwrap_or(false);
        if expired {
            tracing::warn!(peer, "raft snapshot: node {peer} never asked for the image it was sent; raft will send again");
            self.store.report_snapshot(peer, false);
        }
    }

    /// A `MsgSnapshot` from `from` (the leader) arrived: the image is
    /// fetched by a thread of its own, unless one is running or this node
    /// already applied past its index (then raft takes the message, and
    /// answers the leader where this node is).
    pub fn wanted(self: &Arc<Self>, from: u64, m: RaftMessage) {
        let index = m.get_snapshot().get_metadata().index;
        let applied = match self.store.query_blocking(Query::RaftStatus) {
            Ok(QueryAnswer::Raft(r)) => r.applied_index,
            _ => 0,
        };
        if applied >= index {
            let _ = self.store.step(m);
            return;
        }
        if self.fetching.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::info!(leader = from, index, applied, "raft snapshot: node {from} sends a snapshot of index {index}; this node applied {applied}: fetching the image");
        let me = self.clone();
        let spawned = std::thread::Builder::new().name("duet-snap-fetch".into()).spawn(move || {
            let fetched = me.fetch(from, index);
            if let Ok(mut r) = me.receiving.lock() {
                *r = None;
            }
            match fetched {
                Ok(h) => {
                    me.counters.received.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        index = h.index,
                        term = h.term,
                        "raft snapshot: image of index {} (term {}) received and checked; duetd restarts in place to install it",
                        h.index,
                        h.term
                    );
                    restart_in_place();
                }
                Err(e) => {
                    me.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(leader = from, "raft snapshot: the image from node {from} is refused or its transfer failed: {e}; raft sends another");
                    let _ = std::fs::remove_dir_all(image::staging_dir(&me.data_dir));
                }
            }
            me.fetching.store(false, Ordering::Release);
        });
        if spawned.is_err() {
            self.fetching.store(false, Ordering::Release);
        }
    }

    /// Receives the image of at least `index` from `from` and stages it
    /// (checked, synced) for the next start.
    fn fetch(&self, from: u64, index: u64) -> Result<image::ImageHeader, String> {
        let addr = self.addrs.lock().ok().and_then(|a| a.get(&from).copied()).ok_or_else(|| format!("node {from} is not a peer"))?;
        let mut stream = crate::peers::dial(self.source, addr).map_err(|e| format!("connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        stream.set_write_timeout(Some(STALL)).map_err(|e| e.to_string())?;
        let hs = Handshake::initiator(&self.secret, self.node_id, from, crate::peers::nonce()).map_err(|e| e.to_string())?;
        let mut session = crate::peers::handshake(&mut stream, hs).map_err(|e| format!("handshake: {e}"))?;
        stream.set_read_timeout(Some(STALL)).map_err(|e| e.to_string())?;
        let mut req = vec![V1, T_REQUEST];
        req.extend_from_slice(&index.to_be_bytes());
        send(&mut stream, &mut session, &req)?;
        let dir = image::staging_dir(&self.data_dir);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let partial = dir.join("image.partial");
        let mut file = std::fs::File::create(&partial).map_err(|e| format!("create {}: {e}", partial.display()))?;
        let mut bytes = 0u64;
        let started = Instant::now();
        let mut logged = started;
        loop {
            let payload = recv(&mut stream, &mut session)?;
            match (payload.first(), payload.get(1)) {
                (Some(&V1), Some(&T_DATA)) => {
                    file.write_all(&payload[2..]).map_err(|e| format!("write {}: {e}", partial.display()))?;
                    bytes += payload.len() as u64 - 2;
                    if let Ok(mut r) = self.receiving.lock() {
                        *r = Some((from, bytes, started));
                    }
                    if logged.elapsed() >= PROGRESS_EVERY {
                        logged = Instant::now();
                        tracing::info!(leader = from, bytes, "raft snapshot: {} MiB of the image received from node {from} in {} s", bytes >> 20, started.elapsed().as_secs());
                    }
                }
                (Some(&V1), Some(&T_END)) => break,
                (Some(&V1), Some(&T_REFUSED)) => {
                    return Err(format!("node {from} refused: {}", String::from_utf8_lossy(&payload[2..])));
                }
                _ => return Err("an undecodable snapshot frame".into()),
            }
        }
        drop(file);
        // Checked against this node's destage progress now, and again at
        // the install (it only grows meanwhile): an image that would drop
        // this node's copies is refused here, without a restart.
        let verdict = match self.store.query_blocking(Query::DestagedUpto) {
            Ok(QueryAnswer::Count(destaged_here)) => {
                image::stage_verified(&self.data_dir, &partial, destaged_here).map_err(|e| format!("{e} ({bytes} bytes received)"))
            }
            Ok(_) => Err("this node's destage progress: an unexpected answer".to_string()),
            Err(e) => Err(format!("this node's destage progress: {e}")),
        };
        let ok = verdict.is_ok();
        let _ = send(&mut stream, &mut session, &[V1, T_VERDICT, ok as u8]);
        let h = verdict?;
        if h.index < index {
            return Err(format!("the image is of index {}, raft asked for {index}", h.index));
        }
        Ok(h)
    }

    /// On the connection thread of an inbound peer connection whose first
    /// frame of kind `Snapshot` is `payload`: serves the image and reports
    /// the outcome to raft.
    pub fn serve(&self, stream: &mut TcpStream, session: &mut Session, payload: &[u8]) {
        let peer = session.peer_id;
        if let Ok(mut s) = self.sent.lock() {
            s.remove(&peer);
        }
        let index = match payload {
            [V1, T_REQUEST, rest @ ..] if rest.len() == 8 => u64::from_be_bytes(rest.try_into().unwrap_or_default()),
            _ => {
                tracing::warn!(peer, "raft snapshot: an undecodable request from node {peer} is dropped");
                return;
            }
        };
        if self.serving.fetch_add(1, Ordering::AcqRel) >= self.serve_max {
            self.serving.fetch_sub(1, Ordering::AcqRel);
            let _ = refuse(stream, session, "too many snapshot transfers at once");
            self.store.report_snapshot(peer, false);
            return;
        }
        let r = self.stream_image(stream, session, peer, index);
        self.serving.fetch_sub(1, Ordering::AcqRel);
        match r {
            Ok(h) => {
                self.counters.served.fetch_add(1, Ordering::Relaxed);
                tracing::info!(peer, index = h.index, "raft snapshot: node {peer} accepted the image of index {}", h.index);
                self.store.report_snapshot(peer, true);
            }
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer, "raft snapshot: sending the image to node {peer} failed: {e}");
                self.store.report_snapshot(peer, false);
            }
        }
    }

    fn stream_image(&self, stream: &mut TcpStream, session: &mut Session, peer: u64, index: u64) -> Result<image::ImageHeader, String> {
        let _ = stream.set_write_timeout(Some(STALL));
        let _ = stream.set_read_timeout(Some(STALL));
        // The follower's own check, made here first from the destage
        // progress its last status frame reported (it only grows): an
        // image it would refuse is not sent at all, a whole image of
        // chunk files saved. Raft sends another later; by then this node
        // has destaged further (until it has, no checkpoint is even
        // made). A follower on an older version reports none and checks
        // the whole image itself.
        let theirs = self.health.peer(peer).status.and_then(|s| s.destage).map(|d| d.upto);
        let here = match self.store.query_blocking(Query::DestagedUpto) {
            Ok(QueryAnswer::Count(n)) => Some(n),
            _ => None,
        };
        if let (Some(t), Some(h)) = (theirs, here) {
            if t > h && self.withheld_at.lock().ok().and_then(|w| w.get(&peer).copied()) == Some(h) {
                self.counters.withheld.fetch_add(1, Ordering::Relaxed);
                let why = format!(
                    "not sent: node {peer} destaged up to {t}, this node up to {h}, no further than when it last withheld an image from it"
                );
                let _ = refuse(stream, session, &why);
                return Err(why);
            }
        }
        let out = self.data_dir.join("snapshot-out");
        std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let cp = out.join(format!("{peer}-{nanos}"));
        let (applied, _) = self.store.checkpoint_blocking(&cp).map_err(|e| format!("checkpoint: {e}"))?;
        let result = (|| {
            if applied < index {
                let why = format!("this node applied {applied}, the snapshot is of {index}");
                let _ = refuse(stream, session, &why);
                return Err(why);
            }
            if let Some(t) = theirs {
                if let Err(e) = image::refuse_checkpoint_for(&cp, t) {
                    self.counters.withheld.fetch_add(1, Ordering::Relaxed);
                    if let (Some(h), Ok(mut w)) = (here, self.withheld_at.lock()) {
                        w.insert(peer, h);
                    }
                    let why = format!("not sent: node {peer} destaged up to {t} and would refuse it: {e}");
                    let _ = refuse(stream, session, &why);
                    return Err(why);
                }
            }
            let mut corrupt = self.corrupt.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok();
            let mut sent = 0u64;
            let mut sink = |piece: &[u8]| -> std::io::Result<()> {
                let mut p = Vec::with_capacity(piece.len() + 2);
                p.extend_from_slice(&[V1, T_DATA]);
                p.extend_from_slice(piece);
                if corrupt && piece.len() > 100 {
                    // Test-only: one byte past the header flipped.
                    p[2 + 60] ^= 0x5a;
                    corrupt = false;
                    tracing::warn!(peer, "raft snapshot: corrupting the image sent to node {peer} ([testing] snapshot_corrupt)");
                }
                sent += piece.len() as u64;
                send(stream, session, &p).map_err(std::io::Error::other)
            };
            let chunks = self.data_dir.join("chunks");
            let h = image::write_image(&cp, &chunks, &mut sink).map_err(|e| e.to_string())?;
            send(stream, session, &[V1, T_END])?;
            tracing::info!(peer, index = h.index, bytes = sent, "raft snapshot: sent the image of index {} to node {peer} ({sent} bytes)", h.index);
            let v = recv(stream, session)?;
            match v[..] {
                [V1, T_VERDICT, 1] => Ok(h),
                [V1, T_VERDICT, 0] => Err("the follower refused the image (its check failed)".into()),
                _ => Err("an undecodable verdict".into()),
            }
        })();
        let _ = std::fs::remove_dir_all(&cp);
        result
    }
}

fn refuse(stream: &mut TcpStream, session: &mut Session, why: &str) -> Result<(), String> {
    let mut p = vec![V1, T_REFUSED];
    p.extend_from_slice(why.as_bytes());
    send(stream, session, &p)
}

fn send(stream: &mut TcpStream, session: &mut Session, payload: &[u8]) -> Result<(), String> {
    let f = session.sender.frame(FrameKind::Snapshot, payload).map_err(|e| e.to_string())?;
    stream.write_all(&f).map_err(|e| format!("write: {e}"))
}

/// The next `Snapshot` frame's payload (other kinds are skipped).
fn recv(stream: &mut TcpStream, session: &mut Session) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match session.receiver.next_frame() {
            Ok(Some(f)) if f.kind == FrameKind::Snapshot => return Ok(f.payload),
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        let n = stream.read(&mut buf).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed".into());
        }
        session.receiver.feed(&buf[..n]);
    }
}

/// Re-executes duetd with the same arguments (the pid stays): the staged
/// image is installed at start. Files and sockets are close-on-exec.
fn restart_in_place() {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("raft snapshot: cannot find duetd's executable ({e}); exiting so that it is restarted");
            std::process::exit(75);
        }
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let e = std::process::Command::new(&exe).args(&args).exec();
    tracing::error!("raft snapshot: cannot re-execute {} ({e}); exiting so that it is restarted", exe.display());
    std::process::exit(75);
}
