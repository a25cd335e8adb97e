//! The NFS server protocol state machines, sans-I/O: portmap/rpcbind
//! (RFC 1833), MOUNT v3 and NFSv3 (RFC 1813), NFSv4.1 (RFC 8881) and
//! NFSv4.2 (RFC 7862), and NLM v4 / NSM v1 for NFSv3 locks (`nlm.rs`).
//!
//! The driver (the appliance) owns sockets. Per connection it reassembles
//! RPC records with [`crate::nfs::rpc::RecordAssembler`] and hands each
//! whole record to [`NfsServer::on_call`]. The server answers with
//! [`Event`]s: a [`Event::Reply`] to write to the connection (already
//! record-marked), a [`Event::Run`] batch to execute (its result comes
//! back through [`NfsServer::on_batch_done`] with the same token), or
//! [`Event::Close`] when the stream is unusable. [`NfsServer::on_tick`]
//! expires NFSv4 leases.
//!
//! Merging, the product's core idea: one NFSv4 COMPOUND becomes one
//! [`duet_fs::Batch`] (with `stop_on_error`); one NFSv3 call becomes one
//! batch whose results also carry the post-op attributes and wcc data of
//! the reply. Operations that need no file system (SEQUENCE, PUTFH,
//! SAVEFH, session and lock-state operations) are answered from server
//! state. Only a few rare shapes take more than one batch; see [`v4`].
//!
//! Architecture Invariant: no I/O, no clock, no randomness here: time and
//! the boot seed come in as arguments. Hostile input never panics, and
//! every table has a bound (see [`NfsServerConfig`]).

pub mod attr;
pub mod cookies;
pub mod errors;
pub mod exports;
pub mod fh;
pub mod idmap;
mod mount;
pub mod nlm;
mod portmap;
pub mod state;
mod breaks;
mod v3;
pub mod v4;

use std::collections::HashMap;
use std::net::IpAddr;

use duet_fs::{Batch, BatchResult, Credentials};

use crate::nfs::rpc::{
    begin_record, end_record, AcceptedReplyData, CallBody, Credential, MismatchInfo, RejectedReply,
    ReplyHeader, PROGRAM_MOUNT, PROGRAM_NFS, PROGRAM_NLM, PROGRAM_NSM, PROGRAM_PORTMAP, RPC_VERSION,
};
use crate::nfs::xdr::{XdrDecode, XdrEncode, XdrReader, XdrWriter};

pub use exports::{client_matches, ExportEntry, Exports, NOBODY};
pub use fh::FileHandle;
pub use idmap::IdMap;

/// The driver's name for a connection.
pub type ConnId = u64;

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Write these bytes (one RPC record, with record marking) to `conn`.
    Reply { conn: ConnId, bytes: Vec<u8> },
    /// Execute this batch and call [`NfsServer::on_batch_done`] with
    /// `token` and its result.
    Run {
        token: u64,
        batch: Batch,
        tag: &'static str,
    },
    /// Close the connection: its framing is lost.
    Close(ConnId),
    /// Tell an SMB holder that its caching is broken (or revoked: `from`
    /// and `to` both none): an NFSv4 operation contradicted what an SMB
    /// lease or oplock caches. The driver routes it to the holder's SMB
    /// connection as an SMB connection's own `Event::Recall`.
    Recall(duet_locks::Break),
}

/// One portmap registration the server answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortMapping {
    pub prog: u32,
    pub vers: u32,
    /// IPPROTO_TCP (6) or IPPROTO_UDP (17).
    pub prot: u32,
    pub port: u16,
}

/// Server configuration and table bounds.
#[derive(Clone, Debug)]
pub struct NfsServerConfig {
    /// Random per boot (from the caller): write verifier, stateid and
    /// session-id epoch.
    pub boot_seed: u64,
    /// Stable across restarts: keys the file-handle check and the READDIR
    /// cookie verifier.
    pub handle_key: u64,
    /// What portmap GETPORT / rpcbind GETADDR / DUMP answer.
    pub portmap: Vec<PortMapping>,
    /// The host part of rpcbind universal addresses (None: 0.0.0.0 / ::).
    pub uaddr_host: Option<IpAddr>,
    /// NFSv4 lease, seconds.
    pub lease_time_s: u32,
    /// The grace period after a restart (RFC 8881 8.4.2), seconds: while
    /// it lasts, the clients in `reclaimers` reclaim their opens and locks
    /// (CLAIM_PREVIOUS, LOCK reclaim) and nobody gets new ones
    /// (NFS4ERR_GRACE). It ends early once every one of them has sent
    /// RECLAIM_COMPLETE.
    pub grace_s: u32,
    /// The client owners that held state before the restart (the driver
    /// keeps [`NfsServer::state_owners`] on stable storage). Empty: no
    /// grace period, and reclaims get NFS4ERR_NO_GRACE.
    pub reclaimers: Vec<Vec<u8>>,
    /// Largest READ / WRITE payload (rtmax, wtmax, maxread, maxwrite).
    pub max_io: u32,
    /// CREATE_SESSION limits the server offers (at least 256 operations
    /// and 1 MiB requests: vNFS compounds).
    pub max_ops: u32,
    pub max_request: u32,
    pub max_response: u32,
    pub max_response_cached: u32,
    pub max_slots: u32,
    pub max_clients: usize,
    pub max_sessions: usize,
    pub max_opens: usize,
    /// Open stateids one client (client id) may hold; an OPEN over it
    /// gets NFS4ERR_RESOURCE.
    pub max_opens_per_client: usize,
    /// Largest READDIR / READDIRPLUS reply body (v3 count/maxcount and
    /// v4 maxcount are capped to it; the listing continues by cookie).
    pub max_readdir: u32,
    pub max_lock_states: usize,
    pub max_byte_locks: usize,
    pub max_cookies: usize,
    pub max_pending: usize,
    pub max_mounts: usize,
    /// Reported by FSSTAT (RFC 1813 3.3.18: tbytes, fbytes, abytes) and
    /// the space_total/space_free/space_avail attributes (RFC 8881
    /// 5.8.2): the appliance keeps it current.
    pub space: std::sync::Arc<crate::space::Space>,
    pub files_total: u64,
    pub files_free: u64,
    /// EXCHANGE_ID server_owner major id and server_scope.
    pub server_owner: Vec<u8>,
    /// The daemon's lock table, shared with SMB (share reservations and
    /// byte-range locks of both protocols); the default is a private one.
    pub locks: std::sync::Arc<duet_locks::LockManager>,
    /// The NLM hosts that held locks or shares before this start (the
    /// driver keeps [`NfsServer::nlm_hosts`] on stable storage): when
    /// there are any, NLM has a grace period of `grace_s` (`nlm.rs`).
    pub nlm_hosts: Vec<nlm::NlmHost>,
}

impl Default for NfsServerConfig {
    fn default() -> Self {
        NfsServerConfig {
            boot_seed: 1,
            handle_key: 0x6475_6574,
            portmap: Vec::new(),
            uaddr_host: None,
            lease_time_s: 90,
            grace_s: 90,
            reclaimers: Vec::new(),
            max_io: 1 << 20,
            max_ops: 1024,
            max_request: (1 << 20) + (64 << 10),
            max_response: (1 << 20) + (64 << 10),
            max_response_cached: 64 << 10,
            max_slots: 64,
            max_clients: 1024,
            max_sessions: 2048,
            max_opens: 1 << 16,
            max_opens_per_client: 1 << 16,
            max_readdir: 1 << 20,
            max_lock_states: 1 << 16,
            max_byte_locks: 1 << 16,
            max_cookies: 1 << 16,
            max_pending: 4096,
            max_mounts: 4096,
            space: std::sync::Arc::new(crate::space::Space::default()),
            files_total: 1 << 40,
            files_free: 1 << 39,
            server_owner: b"duet".to_vec(),
            locks: std::sync::Arc::new(duet_locks::LockManager::default()),
            nlm_hosts: Vec::new(),
        }
    }
}

/// Work waiting for a batch result.
enum Pending {
    V3(v3::V3Pending),
    V4(Box<v4::Compound>),
}

/// The server: shared state of all connections.
pub struct NfsServer {
    cfg: NfsServerConfig,
    write_verf: [u8; 8],
    cookieverf: [u8; 8],
    next_token: u64,
    pending: HashMap<u64, Pending>,
    cookies: cookies::CookieTable,
    state: state::State,
    /// MOUNT's list of (client address, path), for DUMP.
    mounts: Vec<(String, String)>,
    /// Owners still expected to reclaim (grace period).
    reclaim_pending: std::collections::HashSet<Vec<u8>>,
    /// When the grace period ends (set by the first request after start).
    grace_end: Option<i64>,
    /// Breaks decided by NFSv4 operations: an SMB holder's are handed out
    /// as [`Event::Recall`] with the events of the call that decided them,
    /// an NFSv4 delegation's become a CB_RECALL (`v4/deleg.rs`).
    recalls: Vec<duet_locks::Break>,
    /// Events an operation decided for other connections (a callback on a
    /// newly bound back channel), sent with the call's own.
    deferred: Vec<Event>,
    /// COMPOUNDs waiting for a CB_GETATTR's answer, by its xid, with when
    /// it was sent (`v4/deleg.rs`).
    cb_parked: HashMap<u32, (Box<v4::Compound>, i64)>,
    /// NLM hosts, blocked locks, GRANTED callbacks and NSM (`nlm.rs`).
    nlm: nlm::NlmState,
    /// Owner strings: users' names and the NFSv4 domain (`idmap.rs`).
    ids: IdMap,
}

impl NfsServer {
    pub fn new(cfg: NfsServerConfig) -> Self {
        let write_verf = fh::siphash24(cfg.boot_seed, 0x7665_7266, b"write").to_be_bytes();
        let mut cookieverf = fh::siphash24(cfg.handle_key, 0x636f_6f6b, b"cookie").to_be_bytes();
        if cookieverf == [0; 8] {
            cookieverf[7] = 1;
        }
        let cfg_reclaimers = cfg.reclaimers.iter().cloned().collect();
        NfsServer {
            nlm: nlm::NlmState::new(cfg.boot_seed, !cfg.nlm_hosts.is_empty()),
            ids: IdMap::default(),
            cookies: cookies::CookieTable::new(cfg.max_cookies),
            state: state::State::new(&cfg),
            cfg,
            write_verf,
            cookieverf,
            next_token: 1,
            pending: HashMap::new(),
            mounts: Vec::new(),
            reclaim_pending: cfg_reclaimers,
            grace_end: None,
            recalls: Vec::new(),
            deferred: Vec::new(),
            cb_parked: HashMap::new(),
        }
    }

    /// The users and NFSv4 domain owner strings are written and read by
    /// (`idmap.rs`); the driver sets it when its users change.
    pub fn set_ids(&mut self, ids: IdMap) {
        self.ids = ids;
    }

    /// The owner-string map in use.
    pub fn ids(&self) -> &IdMap {
        &self.ids
    }

    /// Whether the grace period lasts at `now_ns` (it starts with the
    /// first request this server sees).
    pub fn in_grace(&mut self, now_ns: i64) -> bool {
        if self.reclaim_pending.is_empty() {
            return false;
        }
        let end = *self
            .grace_end
            .get_or_insert(now_ns.saturating_add(i64::from(self.cfg.grace_s) * 1_000_000_000));
        if now_ns < end {
            true
        } else {
            self.reclaim_pending.clear();
            false
        }
    }

    /// Whether `owner` may still reclaim (in grace, listed, not done).
    pub(crate) fn may_reclaim(&mut self, owner: &[u8], now_ns: i64) -> bool {
        self.in_grace(now_ns) && self.reclaim_pending.contains(owner)
    }

    /// RECLAIM_COMPLETE from `owner`: the grace period ends when nobody
    /// is left to reclaim.
    pub(crate) fn reclaim_complete(&mut self, owner: &[u8]) {
        self.reclaim_pending.remove(owner);
    }

    /// The owners of the confirmed NFSv4 clients: what the driver keeps on
    /// stable storage so that they may reclaim after a restart.
    pub fn state_owners(&self) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = self
            .state
            .clients
            .values()
            .filter(|c| c.confirmed)
            .map(|c| c.owner.clone())
            .collect();
        v.sort();
        v
    }

    pub fn config(&self) -> &NfsServerConfig {
        &self.cfg
    }

    /// The write verifier of this boot (WRITE/COMMIT).
    pub fn write_verifier(&self) -> [u8; 8] {
        self.write_verf
    }

    /// Batches submitted and not yet answered.
    pub fn pending_batches(&self) -> usize {
        self.pending.len()
    }

    /// NFSv4 state counts, for statistics and tests.
    pub fn state_counts(&self) -> state::Counts {
        self.state.counts()
    }

    /// The file handle of an object of an export (for tests and tools).
    pub fn handle(&self, fh: FileHandle) -> Vec<u8> {
        fh.encode(self.cfg.handle_key).to_vec()
    }

    /// One whole RPC record (record marking removed) from `conn`.
    pub fn on_call(
        &mut self,
        conn: ConnId,
        peer: IpAddr,
        record: &[u8],
        now_ns: i64,
        exports: &dyn Exports,
    ) -> Vec<Event> {
        let ev = self.call_inner(conn, peer, record, now_ns, exports);
        self.with_recalls(ev, now_ns)
    }

    /// The breaks decided meanwhile go first: the SMB holder is told (and
    /// a delegation's CB_RECALL sent) before the NFS client hears
    /// NFS4ERR_DELAY.
    fn with_recalls(&mut self, ev: Vec<Event>, now_ns: i64) -> Vec<Event> {
        if self.recalls.is_empty() && self.deferred.is_empty() {
            return ev;
        }
        let breaks: Vec<duet_locks::Break> = self.recalls.drain(..).collect();
        let (smb, cb) = self.take_deleg_breaks(breaks, now_ns);
        let mut out: Vec<Event> = smb.into_iter().map(Event::Recall).collect();
        out.append(&mut self.deferred);
        out.extend(cb);
        out.extend(ev);
        out
    }

    fn call_inner(
        &mut self,
        conn: ConnId,
        peer: IpAddr,
        record: &[u8],
        now_ns: i64,
        exports: &dyn Exports,
    ) -> Vec<Event> {
        let mut r = XdrReader::new(record);
        let call = match CallBody::decode(&mut r) {
            Ok(c) => c,
            Err(_) => {
                // A REPLY answers a callback (matched by xid, or dropped);
                // a message that does not even have a header cannot be
                // answered: the stream is not RPC.
                if v4::is_cb_reply(record) {
                    return self.on_cb_reply(record, now_ns);
                }
                return vec![Event::Close(conn)];
            }
        };
        let xid = call.xid;
        if call.rpcvers != RPC_VERSION {
            return vec![denied(
                conn,
                xid,
                RejectedReply::RpcMismatch(MismatchInfo { low: 2, high: 2 }),
            )];
        }
        let (low, high) = match call.prog {
            PROGRAM_PORTMAP => (2, 4),
            PROGRAM_MOUNT => (3, 3),
            PROGRAM_NFS => (3, 4),
            PROGRAM_NLM => (4, 4),
            PROGRAM_NSM => (1, 1),
            _ => return vec![accepted(conn, xid, AcceptedReplyData::ProgUnavail)],
        };
        if call.vers < low || call.vers > high {
            return vec![accepted(
                conn,
                xid,
                AcceptedReplyData::ProgMismatch(MismatchInfo { low, high }),
            )];
        }
        // NULL takes any credential; everything else AUTH_NONE or AUTH_SYS.
        let cred = match Credential::parse(&call.cred) {
            Ok(c) => credentials(&c),
            Err(_) if call.proc_ == 0 => nobody(),
            Err(stat) => return vec![denied(conn, xid, RejectedReply::AuthError(stat))],
        };
        let ctx = CallCtx {
            conn,
            xid,
            peer,
            cred,
            now_ns,
            record_len: record.len(),
        };
        match call.prog {
            PROGRAM_PORTMAP => portmap::call(self, &ctx, call.vers, call.proc_, r),
            PROGRAM_MOUNT => mount::call(self, &ctx, call.proc_, r, exports),
            PROGRAM_NLM => nlm::call(self, &ctx, call.proc_, r, exports),
            PROGRAM_NSM => nlm::nsm_call(self, &ctx, call.proc_, r),
            _ => {
                if call.proc_ != 0 && self.pending.len() >= self.cfg.max_pending {
                    return vec![accepted(conn, xid, AcceptedReplyData::SystemErr)];
                }
                if call.vers == 3 {
                    v3::call(self, &ctx, call.proc_, r, exports)
                } else {
                    v4::call(self, &ctx, call.proc_, r, record, exports)
                }
            }
        }
    }

    /// The result of the batch submitted with `token`.
    pub fn on_batch_done(&mut self, token: u64, result: BatchResult, now_ns: i64) -> Vec<Event> {
        let ev = match self.pending.remove(&token) {
            Some(Pending::V3(p)) => vec![v3::finish(self, p, result.results, now_ns)],
            Some(Pending::V4(c)) => v4::batch_done(self, c, result.results, now_ns),
            None => Vec::new(),
        };
        self.with_recalls(ev, now_ns)
    }

    /// Expires NFSv4 clients whose lease ran out (their sessions, opens,
    /// locks and delegations go with them), revokes what outlasted its
    /// recall, and sends recalls that were waiting for a back channel or
    /// a free callback slot. The driver sends the events (callbacks for
    /// back-channel connections, revocations for SMB holders).
    pub fn on_tick(&mut self, now_ns: i64) -> Vec<Event> {
        self.state.expire(now_ns);
        self.nlm_poll();
        let mut ev = self.deleg_tick(now_ns);
        // The delete-pending files whose last open went with an expired
        // client (or was left by a COMPOUND): removed now, as root (the
        // deletion was allowed when the SMB client opened the file for
        // DELETE). The driver runs the batch; its result is nobody's.
        if let Some(batch) = self.pending_removals(Credentials { uid: 0, gid: 0, groups: Vec::new() }, now_ns) {
            let token = self.next_token;
            self.next_token = self.next_token.wrapping_add(1).max(1);
            ev.push(Event::Run { token, batch, tag: "nfs4.delete-pending" });
        }
        ev
    }

    /// The batch removing the delete-pending files (an SMB client's
    /// delete-on-close, MS-FSA 2.1.5.4) whose last open an NFSv4 CLOSE or
    /// an expired or destroyed client just ended, as `cred`: each removal
    /// is taken from the lock table
    /// (`Table::take_delete_pending_if_unopened`), so that it runs once and
    /// not while another open (SMB or NFS) is left. None when there is
    /// none (docs/locks.md, "Delete-on-close and NFS").
    pub(crate) fn pending_removals(&mut self, cred: Credentials, now_ns: i64) -> Option<Batch> {
        if self.state.released_pending.is_empty() {
            return None;
        }
        let mut b = Batch::new(cred, now_ns);
        b.stop_on_error = false;
        let mut nodes = std::mem::take(&mut self.state.released_pending);
        nodes.sort_unstable();
        nodes.dedup();
        for node in nodes {
            let Some(d) = self.cfg.locks.table().take_delete_pending_if_unopened(node) else { continue };
            b.push(match d.name.strip_prefix(':') {
                Some(stream) => duet_fs::Op::RemoveStream { obj: duet_fs::ObjRef::Id(d.parent), name: stream.to_string() },
                None => duet_fs::Op::Remove { dir: duet_fs::ObjRef::Id(d.parent), name: d.name, dir_only: Some(d.is_dir) },
            });
        }
        (!b.ops.is_empty()).then_some(b)
    }

    /// The driver closed `conn`: forget its session bindings.
    pub fn on_conn_closed(&mut self, conn: ConnId) {
        self.state.unbind_conn(conn);
    }

    fn submit(&mut self, batch: Batch, tag: &'static str, p: Pending) -> Event {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        self.pending.insert(token, p);
        Event::Run { token, batch, tag }
    }
}

/// What every handler needs about the call.
pub(crate) struct CallCtx {
    pub conn: ConnId,
    pub xid: u32,
    pub peer: IpAddr,
    pub cred: Credentials,
    pub now_ns: i64,
    pub record_len: usize,
}

pub(crate) fn nobody() -> Credentials {
    Credentials {
        uid: NOBODY,
        gid: NOBODY,
        groups: Vec::new(),
    }
}

fn credentials(c: &Credential<'_>) -> Credentials {
    match c {
        Credential::None => nobody(),
        Credential::Sys(s) => Credentials {
            uid: s.uid,
            gid: s.gid,
            groups: s.gids.clone(),
        },
    }
}

/// The credential a call runs with on `export` (root squash).
pub(crate) fn squash(cred: &Credentials, export: &ExportEntry) -> Credentials {
    if export.root_squash && cred.uid == 0 {
        nobody()
    } else {
        cred.clone()
    }
}

/// A SUCCESS reply whose results `body` writes.
pub(crate) fn reply_with(conn: ConnId, xid: u32, body: impl FnOnce(&mut XdrWriter)) -> Event {
    let mut w = XdrWriter::new();
    let at = begin_record(&mut w);
    ReplyHeader::success(xid).encode(&mut w);
    body(&mut w);
    end_record(&mut w, at);
    Event::Reply {
        conn,
        bytes: w.into_inner(),
    }
}

pub(crate) fn accepted(conn: ConnId, xid: u32, data: AcceptedReplyData) -> Event {
    let mut w = XdrWriter::new();
    let at = begin_record(&mut w);
    ReplyHeader::accepted(xid, data).encode(&mut w);
    end_record(&mut w, at);
    Event::Reply {
        conn,
        bytes: w.into_inner(),
    }
}

pub(crate) fn denied(conn: ConnId, xid: u32, rej: RejectedReply) -> Event {
    let mut w = XdrWriter::new();
    let at = begin_record(&mut w);
    ReplyHeader::denied(xid, rej).encode(&mut w);
    end_record(&mut w, at);
    Event::Reply {
        conn,
        bytes: w.into_inner(),
    }
}
