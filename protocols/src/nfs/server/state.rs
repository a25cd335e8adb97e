//! NFSv4.1 server state: clients, sessions with their slot tables and
//! reply caches, open and lock stateids, leases. Every table is bounded by
//! [`super::NfsServerConfig`]. Share reservations and byte-range locks
//! live in the daemon's lock table (`duet_locks`, shared with SMB): an
//! open stateid and a lock stateid are its holders (NFSv4, client id,
//! the stateid's kind and counter).
//!
//! Delegations (RFC 8881 10.4) are grants of the same lock table (an
//! NFSv4 holder, `Scope::Client`), so SMB sees them; their recall
//! (CB_RECALL on the session's back channel) is in `v4/deleg.rs`.
//!
//! Stateid `other` (12 bytes): the boot epoch (4), a kind byte (1 open,
//! 2 lock, 3 delegation), and a 7-byte counter; a stateid of another boot or unknown
//! here is NFS4ERR_BAD_STATEID, one with an older seqid
//! NFS4ERR_OLD_STATEID.

use std::collections::HashMap;
use std::sync::Arc;

use duet_fs::NodeId;
use duet_locks::{Holder, LockError, LockInfo, LockManager, Protocol, Range, Share};

use super::{ConnId, NfsServerConfig};
use crate::nfs::nfs4::{Nfsstat4, SessionId4, Stateid4};

pub const KIND_OPEN: u8 = 1;
pub const KIND_LOCK: u8 = 2;
pub const KIND_DELEG: u8 = 3;
/// Sessions one client may hold.
pub const MAX_SESSIONS_PER_CLIENT: usize = 16;
/// Connections remembered per session.
pub const MAX_CONNS_PER_SESSION: usize = 64;

pub type Other = [u8; 12];

/// Who made a client record (RFC 8881 2.4.3, 18.35.4): for AUTH_SYS and
/// AUTH_NONE, the uid and gid of the call's credential.
pub type Principal = (u32, u32);

/// Table sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub clients: usize,
    pub sessions: usize,
    pub opens: usize,
    pub lock_states: usize,
    pub byte_locks: usize,
}

#[derive(Debug)]
pub struct Client {
    pub id: u64,
    pub owner: Vec<u8>,
    pub verifier: [u8; 8],
    pub principal: Principal,
    pub confirmed: bool,
    /// The CREATE_SESSION sequence id expected next.
    pub cs_seq: u32,
    /// The last CREATE_SESSION result (encoded), for its replay.
    pub cs_cache: Option<Vec<u8>>,
    pub last_renew: i64,
    pub reclaim_done: bool,
    pub sessions: Vec<SessionId4>,
    /// Delegations of this client revoked and not yet freed: SEQUENCE
    /// says SEQ4_STATUS_RECALLABLE_STATE_REVOKED while any remain (RFC
    /// 8881 18.46.3).
    pub revoked_delegs: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotCache {
    Empty,
    /// The reply was not kept (cachethis false, or too big).
    Uncached,
    /// The COMPOUND4res bytes (no RPC header).
    Reply(Vec<u8>),
}

#[derive(Debug)]
pub struct Slot {
    pub seq: u32,
    pub in_progress: bool,
    pub cache: SlotCache,
}

#[derive(Debug)]
pub struct Session {
    pub id: SessionId4,
    pub client: u64,
    pub slots: Vec<Slot>,
    pub max_ops: u32,
    pub max_request: u32,
    pub max_response: u32,
    pub max_cached: u32,
    pub conns: Vec<ConnId>,
    /// The client asked for a back channel (CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
    /// RFC 8881 18.36.3, or BIND_CONN_TO_SESSION for the back direction,
    /// 18.34.3).
    pub back_chan: bool,
    /// The connections bound to the back channel, oldest first.
    pub back_conns: Vec<ConnId>,
    /// The callback program number and credential (CREATE_SESSION's
    /// csa_cb_program and csa_sec_parms, BACKCHANNEL_CTL, RFC 8881 18.33).
    pub cb_program: u32,
    pub cb_cred: crate::nfs::nfs4::callback::CbCred,
    /// The minor version of the session's CREATE_SESSION: CB_COMPOUND
    /// carries it (a Linux client matches its session by it).
    pub cb_minor: u32,
    /// CB_SEQUENCE's sequence id last sent on back-channel slot 0 (RFC
    /// 8881 2.10.6.1: the server is the requester there).
    pub cb_seq: u32,
    /// The callback in flight on slot 0: (xid, delegation, when sent,
    /// on which connection).
    pub cb_inflight: Option<(u32, Other, i64, ConnId)>,
    /// A callback lost with its connection: that delegation's recall goes
    /// again with this CB_SEQUENCE sequence id (a retry, RFC 8881
    /// 2.10.6.2).
    pub cb_retry: Option<(Other, u32)>,
}

#[derive(Debug, Clone)]
pub struct OpenState {
    pub seqid: u32,
    pub client: u64,
    pub owner: Vec<u8>,
    pub node: NodeId,
    pub fsid: u64,
    pub access: u32,
    pub deny: u32,
}

/// A delegation (RFC 8881 10.4): read, or write when the client asked
/// for one explicitly.
#[derive(Debug, Clone)]
pub struct Deleg {
    pub seqid: u32,
    pub write: bool,
    pub client: u64,
    pub node: NodeId,
    /// The file handle CB_RECALL names (RFC 8881 20.2.1).
    pub fh: Vec<u8>,
    pub grant: duet_locks::GrantId,
    /// When the recall was decided (None: not recalled).
    pub recalled: Option<i64>,
    /// Revoked (RFC 8881 8.5): NFS4ERR_DELEG_REVOKED until FREE_STATEID (18.38.3).
    pub revoked: bool,
}

#[derive(Debug, Clone)]
pub struct LockState {
    pub seqid: u32,
    pub client: u64,
    pub owner: Vec<u8>,
    pub node: NodeId,
    pub open: Other,
}

/// The conflicting lock of a DENIED answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub offset: u64,
    pub length: u64,
    pub write: bool,
    pub clientid: u64,
    pub owner: Vec<u8>,
}

/// What a stateid names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRef {
    Open(Other),
    Lock(Other),
    Deleg(Other),
}

pub struct State {
    /// Delete-pending files (MS-FSA 2.1.5.4, an SMB client's) an open of
    /// which was just removed (CLOSE, an expired or destroyed client):
    /// `NfsServer::pending_removals` removes those no open is left of.
    pub released_pending: Vec<NodeId>,
    epoch: u32,
    seed: u64,
    counter: u64,
    pub lease_ns: i64,
    max_clients: usize,
    max_sessions: usize,
    max_opens: usize,
    max_opens_per_client: usize,
    max_lock_states: usize,
    max_byte_locks: usize,
    pub clients: HashMap<u64, Client>,
    /// The confirmed record of each owner.
    by_owner: HashMap<Vec<u8>, u64>,
    /// The unconfirmed record of each owner (at most one, RFC 8881
    /// 18.35.4 case 4); it may stand beside a confirmed one (case 5).
    unconfirmed: HashMap<Vec<u8>, u64>,
    pub sessions: HashMap<SessionId4, Session>,
    pub opens: HashMap<Other, OpenState>,
    open_by_key: HashMap<(u64, Vec<u8>, NodeId), Other>,
    pub locks: HashMap<Other, LockState>,
    lock_by_key: HashMap<(u64, Vec<u8>, NodeId), Other>,
    /// The daemon's lock table (share reservations, byte-range locks).
    table: Arc<LockManager>,
    /// Byte-range locks the lock states of this server hold.
    n_byte_locks: usize,
    /// Opens holding deny bits: while there are any, OPEN's share check
    /// ends its batch (see v4).
    pub deny_opens: usize,
    /// Delegations by stateid, and by (client, file) and by lock-table
    /// grant.
    pub delegs: HashMap<Other, Deleg>,
    pub deleg_by_key: HashMap<(u64, NodeId), Other>,
    pub deleg_by_grant: HashMap<duet_locks::GrantId, Other>,
    /// Delegations whose CB_RECALL is still to be sent.
    pub cb_queue: std::collections::VecDeque<Other>,
    pub next_cb_xid: u32,
    /// The xids of the CB_GETATTRs in flight (`v4/deleg.rs`): one lost
    /// with its connection is not sent again (the GETATTR waiting for it
    /// is answered from the server's attributes at its deadline).
    pub cb_getattr_xids: std::collections::HashSet<u32>,
}

/// The exclusive end of a lock range (RFC 8881 18.10.4): length
/// all-ones means to the end; overflow and zero length are invalid.
pub fn range_end(offset: u64, length: u64) -> Result<u64, Nfsstat4> {
    if length == 0 {
        return Err(Nfsstat4::INVAL);
    }
    if length == u64::MAX {
        return Ok(u64::MAX);
    }
    offset.checked_add(length).ok_or(Nfsstat4::INVAL)
}

/// The lock-table range of [start, end) (end u64::MAX: to EOF).
fn span(start: u64, end: u64) -> Range {
    if end == u64::MAX {
        Range::from(start)
    } else {
        Range::nfs(start, end - start).unwrap_or(Range::from(start))
    }
}

/// The lock-table holder of an open or lock stateid of `client`.
pub fn holder(client: u64, other: &Other) -> Holder {
    let mut b = [0u8; 8];
    b.copy_from_slice(&other[4..12]);
    Holder::new(Protocol::Nfs4, client, u64::from_be_bytes(b))
}

impl State {
    pub fn new(cfg: &NfsServerConfig) -> Self {
        State {
            released_pending: Vec::new(),
            epoch: (cfg.boot_seed ^ (cfg.boot_seed >> 32)) as u32,
            seed: cfg.boot_seed,
            counter: 0,
            lease_ns: i64::from(cfg.lease_time_s.max(1)) * 1_000_000_000,
            max_clients: cfg.max_clients.max(1),
            max_sessions: cfg.max_sessions.max(1),
            max_opens: cfg.max_opens.max(1),
            max_opens_per_client: cfg.max_opens_per_client.max(1),
            max_lock_states: cfg.max_lock_states.max(1),
            max_byte_locks: cfg.max_byte_locks.max(1),
            clients: HashMap::new(),
            by_owner: HashMap::new(),
            unconfirmed: HashMap::new(),
            sessions: HashMap::new(),
            opens: HashMap::new(),
            open_by_key: HashMap::new(),
            locks: HashMap::new(),
            lock_by_key: HashMap::new(),
            table: cfg.locks.clone(),
            n_byte_locks: 0,
            deny_opens: 0,
            delegs: HashMap::new(),
            deleg_by_key: HashMap::new(),
            deleg_by_grant: HashMap::new(),
            cb_queue: std::collections::VecDeque::new(),
            next_cb_xid: (cfg.boot_seed as u32) | 1,
            cb_getattr_xids: std::collections::HashSet::new(),
        }
    }

    pub fn counts(&self) -> Counts {
        Counts {
            clients: self.clients.len(),
            sessions: self.sessions.len(),
            opens: self.opens.len(),
            lock_states: self.locks.len(),
            byte_locks: self.n_byte_locks,
        }
    }

    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// A fresh stateid `other` of `kind`.
    pub fn new_other(&mut self, kind: u8) -> Other {
        let n = self.next();
        let mut o = [0u8; 12];
        o[..4].copy_from_slice(&self.epoch.to_be_bytes());
        o[4] = kind;
        o[5..].copy_from_slice(&n.to_be_bytes()[1..]);
        o
    }

    fn new_clientid(&mut self) -> u64 {
        (u64::from(self.epoch) << 32) | (self.next() & 0xffff_ffff)
    }

    fn new_sessionid(&mut self) -> SessionId4 {
        let n = self.next();
        let mut s = [0u8; 16];
        s[..4].copy_from_slice(&self.epoch.to_be_bytes());
        s[4..12].copy_from_slice(&n.to_be_bytes());
        let h = super::fh::siphash24(self.seed, n, b"session");
        s[12..].copy_from_slice(&h.to_be_bytes()[..4]);
        s
    }

    /// EXCHANGE_ID's record rules (RFC 8881 18.35.4), by the numbered
    /// cases there. Without `update`: a new owner gets a new unconfirmed
    /// record (case 1); the same owner, verifier and principal as the
    /// confirmed record keep it (case 2); another principal takes the
    /// owner over if the old record holds no state, else
    /// NFS4ERR_CLID_INUSE (case 3); an unconfirmed record is replaced
    /// (case 4); a new verifier (the client rebooted) gets a new
    /// unconfirmed record while the confirmed one lives on until
    /// CREATE_SESSION confirms the new one (case 5). With `update`
    /// (EXCHGID4_FLAG_UPD_CONFIRMED_REC_A): the confirmed record is kept
    /// (case 6), or NFS4ERR_NOT_SAME for another verifier, NFS4ERR_PERM for
    /// another principal, NFS4ERR_NOENT when there is none (cases 7-9).
    /// Returns (clientid, sequenceid, confirmed).
    pub fn exchange_id(
        &mut self,
        owner: &[u8],
        verifier: [u8; 8],
        principal: Principal,
        update: bool,
        now: i64,
    ) -> Result<(u64, u32, bool), Nfsstat4> {
        let conf = self.by_owner.get(owner).copied();
        if update {
            let c = conf
                .and_then(|id| self.clients.get_mut(&id))
                .ok_or(Nfsstat4::NOENT)?;
            if c.principal != principal {
                return Err(Nfsstat4::PERM);
            }
            if c.verifier != verifier {
                return Err(Nfsstat4::NOT_SAME);
            }
            c.last_renew = now;
            return Ok((c.id, c.cs_seq, true));
        }
        if let Some(id) = conf {
            let lease = self.lease_ns;
            let (same_principal, same_verifier, live) = match self.clients.get(&id) {
                Some(c) => (
                    c.principal == principal,
                    c.verifier == verifier,
                    now.saturating_sub(c.last_renew) <= lease,
                ),
                None => (false, false, false),
            };
            if !same_principal {
                if live && self.has_state(id) {
                    return Err(Nfsstat4::CLID_INUSE);
                }
                self.purge_client(id);
            } else if same_verifier {
                if let Some(c) = self.clients.get_mut(&id) {
                    c.last_renew = now;
                    return Ok((c.id, c.cs_seq, true));
                }
            }
        }
        if let Some(old) = self.unconfirmed.get(owner).copied() {
            self.purge_client(old);
        }
        if self.clients.len() >= self.max_clients {
            self.expire(now);
            // Drop an unconfirmed client first.
            if self.clients.len() >= self.max_clients {
                let victim = self
                    .clients
                    .values()
                    .filter(|c| !c.confirmed)
                    .map(|c| c.id)
                    .next();
                match victim {
                    Some(v) => self.purge_client(v),
                    None => return Err(Nfsstat4::DELAY),
                }
            }
        }
        let id = self.new_clientid();
        self.clients.insert(
            id,
            Client {
                id,
                owner: owner.to_vec(),
                verifier,
                principal,
                confirmed: false,
                cs_seq: 1,
                cs_cache: None,
                last_renew: now,
                reclaim_done: false,
                sessions: Vec::new(),
                revoked_delegs: 0,
            },
        );
        self.unconfirmed.insert(owner.to_vec(), id);
        Ok((id, 1, false))
    }

    /// Whether a client holds sessions, opens or locks (RFC 8881 18.35.4
    /// case 3, 18.50.3).
    pub fn has_state(&self, id: u64) -> bool {
        self.clients.get(&id).is_some_and(|c| !c.sessions.is_empty())
            || self.opens.values().any(|o| o.client == id)
            || self.locks.values().any(|l| l.client == id)
            || self.delegs.values().any(|d| d.client == id)
    }

    /// CREATE_SESSION confirmed `client` (RFC 8881 18.36.4): it becomes
    /// its owner's confirmed record, and the record it replaces (case 5
    /// of EXCHANGE_ID: the client rebooted) goes with all its state.
    fn confirm(&mut self, client: u64) {
        let Some(owner) = self
            .clients
            .get(&client)
            .filter(|c| !c.confirmed)
            .map(|c| c.owner.clone())
        else {
            return;
        };
        if self.unconfirmed.get(&owner) == Some(&client) {
            self.unconfirmed.remove(&owner);
        }
        if let Some(old) = self.by_owner.get(&owner).copied() {
            if old != client {
                self.purge_client(old);
            }
        }
        if let Some(c) = self.clients.get_mut(&client) {
            c.confirmed = true;
        }
        self.by_owner.insert(owner, client);
    }

    /// Creates a session for a client whose CREATE_SESSION sequence was
    /// checked by the caller.
    #[allow(clippy::too_many_arguments)]
    pub fn add_session(
        &mut self,
        client: u64,
        slots: u32,
        max_ops: u32,
        max_request: u32,
        max_response: u32,
        max_cached: u32,
        conn: ConnId,
    ) -> Result<SessionId4, Nfsstat4> {
        let per_client = self.clients.get(&client).map_or(0, |c| c.sessions.len());
        if per_client >= MAX_SESSIONS_PER_CLIENT || self.sessions.len() >= self.max_sessions {
            return Err(Nfsstat4::DELAY);
        }
        let id = self.new_sessionid();
        let slots = (0..slots.max(1))
            .map(|_| Slot {
                seq: 0,
                in_progress: false,
                cache: SlotCache::Empty,
            })
            .collect();
        self.sessions.insert(
            id,
            Session {
                id,
                client,
                slots,
                max_ops,
                max_request,
                max_response,
                max_cached,
                conns: vec![conn],
                back_chan: false,
                back_conns: Vec::new(),
                cb_program: 0,
                cb_cred: Default::default(),
                cb_minor: 1,
                cb_seq: 0,
                cb_inflight: None,
                cb_retry: None,
            },
        );
        self.confirm(client);
        if let Some(c) = self.clients.get_mut(&client) {
            c.sessions.push(id);
        }
        Ok(id)
    }

    pub fn destroy_session(&mut self, id: &SessionId4) -> bool {
        match self.sessions.remove(id) {
            Some(s) => {
                if let Some(c) = self.clients.get_mut(&s.client) {
                    c.sessions.retain(|x| x != id);
                }
                true
            }
            None => false,
        }
    }

    /// Removes a client and everything it holds.
    pub fn purge_client(&mut self, id: u64) {
        if let Some(c) = self.clients.remove(&id) {
            if self.by_owner.get(&c.owner) == Some(&id) {
                self.by_owner.remove(&c.owner);
            }
            if self.unconfirmed.get(&c.owner) == Some(&id) {
                self.unconfirmed.remove(&c.owner);
            }
            for s in &c.sessions {
                self.sessions.remove(s);
            }
        }
        let locks: Vec<Other> = self
            .locks
            .iter()
            .filter(|(_, l)| l.client == id)
            .map(|(o, _)| *o)
            .collect();
        for o in locks {
            self.drop_lock_state(&o);
        }
        let opens: Vec<Other> = self
            .opens
            .iter()
            .filter(|(_, s)| s.client == id)
            .map(|(o, _)| *o)
            .collect();
        for o in opens {
            self.remove_open(&o);
        }
        let delegs: Vec<Other> = self.delegs.iter().filter(|(_, d)| d.client == id).map(|(o, _)| *o).collect();
        for o in delegs {
            self.remove_deleg(&o);
        }
    }

    /// Drops clients whose lease ran out, unless a request of theirs is in
    /// progress: an unconfirmed record after one lease period (RFC 8881
    /// 18.35.4: it SHOULD go), a confirmed one after two. Between one and
    /// two lease periods without a SEQUENCE a confirmed client is a
    /// courtesy client: it keeps its state until another client asks for
    /// locking state ([`State::revoke_courtesy`]).
    pub fn expire(&mut self, now: i64) {
        self.expire_after(now, self.lease_ns.saturating_mul(2));
    }

    /// Ends the courtesy of clients whose lease ran out (RFC 8881 8.3: the
    /// server may then release their state): called before an OPEN, LOCK
    /// or LOCKT, so that state an expired client held no longer stands in
    /// the way of a live one.
    pub fn revoke_courtesy(&mut self, now: i64) {
        self.expire_after(now, self.lease_ns);
    }

    fn expire_after(&mut self, now: i64, confirmed_limit: i64) {
        let lease = self.lease_ns;
        let dead: Vec<u64> = self
            .clients
            .values()
            .filter(|c| {
                let limit = if c.confirmed { confirmed_limit } else { lease };
                now.saturating_sub(c.last_renew) > limit
            })
            .filter(|c| {
                !c.sessions.iter().any(|s| {
                    self.sessions
                        .get(s)
                        .is_some_and(|s| s.slots.iter().any(|sl| sl.in_progress))
                })
            })
            .map(|c| c.id)
            .collect();
        for id in dead {
            self.purge_client(id);
        }
    }

    /// The connection is gone: a callback in flight on it is sent again
    /// (with the same CB_SEQUENCE sequence id, RFC 8881 2.10.6.2: a retry)
    /// once the session has a back connection again.
    pub fn unbind_conn(&mut self, conn: ConnId) {
        for s in self.sessions.values_mut() {
            s.conns.retain(|c| *c != conn);
            s.back_conns.retain(|c| *c != conn);
            if let Some((xid, other, _, c)) = s.cb_inflight {
                if c == conn {
                    s.cb_inflight = None;
                    if !self.cb_getattr_xids.remove(&xid) {
                        s.cb_retry = Some((other, s.cb_seq));
                        self.cb_queue.push_front(other);
                    }
                }
            }
        }
    }

    /// Binds `conn` to the back channel of session `id` (RFC 8881 18.34.3,
    /// 18.36.3).
    pub fn bind_back(&mut self, id: &SessionId4, conn: ConnId) {
        if let Some(s) = self.sessions.get_mut(id) {
            s.back_chan = true;
            if !s.back_conns.contains(&conn) {
                if s.back_conns.len() >= MAX_CONNS_PER_SESSION {
                    s.back_conns.remove(0);
                }
                s.back_conns.push(conn);
            }
        }
    }

    /// Whether some session of `client` has a connection for callbacks.
    pub fn has_back_channel(&self, client: u64) -> bool {
        self.clients.get(&client).is_some_and(|c| {
            c.sessions.iter().any(|s| self.sessions.get(s).is_some_and(|s| !s.back_conns.is_empty()))
        })
    }

    /// Records a delegation granted as `grant`; returns its stateid.
    pub fn add_deleg(&mut self, other: Other, client: u64, node: NodeId, fh: Vec<u8>, grant: duet_locks::GrantId, write: bool) -> Stateid4 {
        self.delegs.insert(other, Deleg { seqid: 1, write, client, node, fh, grant, recalled: None, revoked: false });
        self.deleg_by_key.insert((client, node), other);
        self.deleg_by_grant.insert(grant, other);
        Stateid4 { seqid: 1, other }
    }

    /// Forgets a delegation (DELEGRETURN, FREE_STATEID of a revoked one,
    /// the client's end) and gives its grant back to the lock table.
    pub fn remove_deleg(&mut self, other: &Other) {
        if let Some(d) = self.delegs.remove(other) {
            if self.deleg_by_key.get(&(d.client, d.node)) == Some(other) {
                self.deleg_by_key.remove(&(d.client, d.node));
            }
            self.deleg_by_grant.remove(&d.grant);
            if d.revoked {
                if let Some(c) = self.clients.get_mut(&d.client) {
                    c.revoked_delegs = c.revoked_delegs.saturating_sub(1);
                }
            } else {
                self.table.table().release_grant(d.grant);
            }
        }
    }

    /// Marks a delegation revoked (its recall ran past the lease period,
    /// RFC 8881 10.4.6, or its grant is gone from the table): the stateid
    /// stays, answering NFS4ERR_DELEG_REVOKED, until FREE_STATEID.
    pub fn revoke_deleg(&mut self, other: &Other) {
        let Some(d) = self.delegs.get_mut(other) else { return };
        if d.revoked {
            return;
        }
        d.revoked = true;
        let (client, node, grant) = (d.client, d.node, d.grant);
        if self.deleg_by_key.get(&(client, node)) == Some(other) {
            self.deleg_by_key.remove(&(client, node));
        }
        self.deleg_by_grant.remove(&grant);
        self.table.table().release_grant(grant);
        if let Some(c) = self.clients.get_mut(&client) {
            c.revoked_delegs += 1;
        }
    }

    /// Whether another client than `client` holds a live delegation of
    /// `node` (a WRITE or size change must then wait for its recall).
    pub fn deleg_of_other(&self, node: NodeId, client: u64) -> bool {
        !self.delegs.is_empty() && self.delegs.values().any(|d| d.node == node && d.client != client && !d.revoked)
    }

    pub fn bind_conn(&mut self, id: &SessionId4, conn: ConnId) -> bool {
        match self.sessions.get_mut(id) {
            Some(s) => {
                if !s.conns.contains(&conn) {
                    if s.conns.len() >= MAX_CONNS_PER_SESSION {
                        s.conns.remove(0);
                    }
                    s.conns.push(conn);
                }
                true
            }
            None => false,
        }
    }

    /// Resolves a (non-special) stateid of `client`.
    pub fn check_stateid(&self, sid: &Stateid4, client: Option<u64>) -> Result<StateRef, Nfsstat4> {
        let check = |seqid: u32, owner: u64| {
            if client.is_some_and(|c| c != owner) {
                return Err(Nfsstat4::BAD_STATEID);
            }
            if sid.seqid == 0 || sid.seqid == seqid {
                Ok(())
            } else if sid.seqid < seqid {
                Err(Nfsstat4::OLD_STATEID)
            } else {
                Err(Nfsstat4::BAD_STATEID)
            }
        };
        if let Some(o) = self.opens.get(&sid.other) {
            check(o.seqid, o.client)?;
            return Ok(StateRef::Open(sid.other));
        }
        if let Some(l) = self.locks.get(&sid.other) {
            check(l.seqid, l.client)?;
            return Ok(StateRef::Lock(sid.other));
        }
        if let Some(d) = self.delegs.get(&sid.other) {
            check(d.seqid, d.client)?;
            if d.revoked {
                return Err(Nfsstat4::DELEG_REVOKED);
            }
            return Ok(StateRef::Deleg(sid.other));
        }
        Err(Nfsstat4::BAD_STATEID)
    }

    /// Share reservation check (RFC 8881 9.7) of a new open against the
    /// other opens of `node`, by NFS and SMB clients alike.
    pub fn share_conflict(
        &self,
        client: u64,
        owner: &[u8],
        node: NodeId,
        access: u32,
        deny: u32,
    ) -> bool {
        let mine = self
            .open_by_key
            .get(&(client, owner.to_vec(), node))
            .map(|o| holder(client, o));
        self.table
            .table()
            .share_conflict(node, mine.as_ref(), Share::nfs(access, deny))
    }

    /// Records an open (or upgrades the owner's existing open of the
    /// file). Returns the stateid to hand out.
    #[allow(clippy::too_many_arguments)]
    pub fn upsert_open(
        &mut self,
        reserved: Other,
        client: u64,
        owner: &[u8],
        node: NodeId,
        fsid: u64,
        access: u32,
        deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let key = (client, owner.to_vec(), node);
        if let Some(other) = self.open_by_key.get(&key).copied() {
            if let Some(o) = self.opens.get_mut(&other) {
                match self.table.table().open(node, holder(client, &other), Share::nfs(access, deny)) {
                    Ok(()) => {}
                    Err(false) => return Err(Nfsstat4::SHARE_DENIED),
                    Err(true) => return Err(Nfsstat4::DELAY),
                }
                let had_deny = o.deny != 0;
                o.access |= access;
                o.deny |= deny;
                o.seqid = o.seqid.wrapping_add(1).max(1);
                let sid = Stateid4 {
                    seqid: o.seqid,
                    other,
                };
                if !had_deny && o.deny != 0 {
                    self.deny_opens += 1;
                }
                return Ok(sid);
            }
        }
        if self.opens.len() >= self.max_opens {
            return Err(Nfsstat4::DELAY);
        }
        // NFS4ERR_RESOURCE (RFC 8881 15.1): this client used up what the
        // server gives one client; counted only when that many exist at all.
        if self.opens.len() >= self.max_opens_per_client
            && self.opens.values().filter(|o| o.client == client).count() >= self.max_opens_per_client
        {
            return Err(Nfsstat4::RESOURCE);
        }
        match self.table.table().open(node, holder(client, &reserved), Share::nfs(access, deny)) {
            Ok(()) => {}
            Err(false) => return Err(Nfsstat4::SHARE_DENIED),
            Err(true) => return Err(Nfsstat4::DELAY),
        }
        self.opens.insert(
            reserved,
            OpenState {
                seqid: 1,
                client,
                owner: owner.to_vec(),
                node,
                fsid,
                access,
                deny,
            },
        );
        if deny != 0 {
            self.deny_opens += 1;
        }
        self.open_by_key.insert(key, reserved);
        Ok(Stateid4 {
            seqid: 1,
            other: reserved,
        })
    }

    /// Whether an open's lock owners still hold byte ranges.
    pub fn open_has_locks(&self, open: &Other) -> bool {
        let t = self.table.table();
        self.locks
            .iter()
            .any(|(lo, l)| &l.open == open && t.has_locks(l.node, &holder(l.client, lo)))
    }

    /// Removes an open and its (lock-free) lock states.
    pub fn remove_open(&mut self, other: &Other) {
        if let Some(o) = self.opens.remove(other) {
            if o.deny != 0 {
                self.deny_opens = self.deny_opens.saturating_sub(1);
            }
            self.open_by_key.remove(&(o.client, o.owner, o.node));
            self.table.table().release(o.node, &holder(o.client, other));
            // Maybe the last open of a delete-pending file: its removal is
            // looked at after the COMPOUND or at the tick
            // (`NfsServer::pending_removals`).
            if self.table.table().is_delete_pending(o.node) {
                self.released_pending.push(o.node);
            }
            let locks: Vec<Other> = self
                .locks
                .iter()
                .filter(|(_, l)| &l.open == other)
                .map(|(k, _)| *k)
                .collect();
            for l in locks {
                self.drop_lock_state(&l);
            }
        }
    }

    /// OPEN_DOWNGRADE (RFC 8881 18.18): the new modes must be a subset.
    pub fn downgrade(
        &mut self,
        other: &Other,
        access: u32,
        deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let o = self.opens.get_mut(other).ok_or(Nfsstat4::BAD_STATEID)?;
        if access & !o.access != 0 || deny & !o.deny != 0 || access & 3 == 0 {
            return Err(Nfsstat4::INVAL);
        }
        let had_deny = o.deny != 0;
        o.access = access;
        o.deny = deny;
        self.table
            .table()
            .set_share(o.node, &holder(o.client, other), Share::nfs(access, deny));
        o.seqid = o.seqid.wrapping_add(1).max(1);
        let sid = Stateid4 {
            seqid: o.seqid,
            other: *other,
        };
        if had_deny && deny == 0 {
            self.deny_opens = self.deny_opens.saturating_sub(1);
        }
        Ok(sid)
    }

    fn drop_lock_state(&mut self, other: &Other) {
        if let Some(l) = self.locks.remove(other) {
            self.lock_by_key.remove(&(l.client, l.owner, l.node));
            let h = holder(l.client, other);
            let mut t = self.table.table();
            self.n_byte_locks -= t.lock_count(l.node, &h);
            t.unlock_all(l.node, &h);
        }
    }

    /// The DENIED answer for a conflicting lock of the table: an NFS
    /// lock names its client and owner; an SMB lock names no NFS client
    /// (client id 0, owner "smb").
    fn conflict_of(&self, k: &LockInfo) -> Conflict {
        let (clientid, owner) = match k.holder.proto {
            Protocol::Nfs4 => {
                let mut other = [0u8; 12];
                other[..4].copy_from_slice(&self.epoch.to_be_bytes());
                other[4..].copy_from_slice(&k.holder.owner.to_be_bytes());
                self.locks
                    .get(&other)
                    .map(|l| (l.client, l.owner.clone()))
                    .unwrap_or((k.holder.client, Vec::new()))
            }
            _ => (0, b"smb".to_vec()),
        };
        Conflict {
            offset: k.range.offset,
            length: k.range.nfs_length(),
            write: k.exclusive,
            clientid,
            owner,
        }
    }

    /// LOCKT: the first lock of another owner (of either protocol) that
    /// conflicts.
    pub fn test_lock(
        &self,
        node: NodeId,
        client: u64,
        owner: &[u8],
        start: u64,
        end: u64,
        write: bool,
    ) -> Option<Conflict> {
        // An owner without a lock state on the file holds nothing there.
        let h = self
            .lock_by_key
            .get(&(client, owner.to_vec(), node))
            .map_or(Holder::new(Protocol::Nfs4, client, u64::MAX), |o| holder(client, o));
        let k = self.table.table().test_lock(node, &h, &span(start, end), write)?;
        Some(self.conflict_of(&k))
    }

    /// Whether a READ (or WRITE) of [offset, offset + len) runs into a
    /// lock that binds NFS I/O: an SMB client's (RFC 8881 9.4: mandatory
    /// where the server enforces it; NFS locks among NFS clients stay
    /// advisory). NFS4ERR_LOCKED.
    pub fn io_conflict(&self, node: NodeId, offset: u64, len: u64, write: bool) -> bool {
        let h = Holder::new(Protocol::Nfs4, 0, u64::MAX);
        self.table
            .table()
            .check_io(node, &h, &Range::io(offset, len), write)
            .is_some()
    }

    /// The lock state for (client, owner, file) under `open`, made if new.
    pub fn lock_state_for(&mut self, open: &Other, owner: &[u8]) -> Result<Other, Nfsstat4> {
        let o = self.opens.get(open).ok_or(Nfsstat4::BAD_STATEID)?.clone();
        let key = (o.client, owner.to_vec(), o.node);
        if let Some(l) = self.lock_by_key.get(&key) {
            return Ok(*l);
        }
        if self.locks.len() >= self.max_lock_states {
            return Err(Nfsstat4::DELAY);
        }
        let other = self.new_other(KIND_LOCK);
        self.locks.insert(
            other,
            LockState {
                seqid: 0,
                client: o.client,
                owner: owner.to_vec(),
                node: o.node,
                open: *open,
            },
        );
        self.lock_by_key.insert(key, other);
        Ok(other)
    }

    /// LOCK: grants [start, end) to the lock state or says who holds it.
    /// A new lock replaces the owner's overlapping ranges (POSIX).
    pub fn lock(
        &mut self,
        lock: &Other,
        start: u64,
        end: u64,
        write: bool,
    ) -> Result<Stateid4, Result<Conflict, Nfsstat4>> {
        let l = self
            .locks
            .get(lock)
            .ok_or(Err(Nfsstat4::BAD_STATEID))?
            .clone();
        let h = holder(l.client, lock);
        let got = {
            let mut t = self.table.table();
            let before = t.lock_count(l.node, &h);
            match t.test_lock(l.node, &h, &span(start, end), write) {
                Some(k) => Err(Some(k)),
                None if self.n_byte_locks >= self.max_byte_locks => Err(None),
                None => match t.lock(l.node, h, span(start, end), write) {
                    Ok(()) => Ok(t.lock_count(l.node, &h) as isize - before as isize),
                    Err(LockError::Conflict(k)) => Err(Some(k)),
                    Err(LockError::Limit) => Err(None),
                },
            }
        };
        match got {
            Ok(delta) => {
                self.n_byte_locks = (self.n_byte_locks as isize + delta).max(0) as usize;
                Ok(self.bump_lock(lock))
            }
            Err(Some(k)) => Err(Ok(self.conflict_of(&k))),
            Err(None) => Err(Err(Nfsstat4::DELAY)),
        }
    }

    fn bump_lock(&mut self, lock: &Other) -> Stateid4 {
        match self.locks.get_mut(lock) {
            Some(l) => {
                l.seqid = l.seqid.wrapping_add(1).max(1);
                Stateid4 {
                    seqid: l.seqid,
                    other: *lock,
                }
            }
            None => Stateid4 {
                seqid: 0,
                other: *lock,
            },
        }
    }

    /// LOCKU.
    pub fn unlock(&mut self, lock: &Other, start: u64, end: u64) -> Result<Stateid4, Nfsstat4> {
        let l = self.locks.get(lock).ok_or(Nfsstat4::BAD_STATEID)?;
        let (node, h) = (l.node, holder(l.client, lock));
        {
            let mut t = self.table.table();
            let before = t.lock_count(node, &h);
            // Queued lock requests this frees are granted in the table;
            // their owners (SMB connections) collect them there.
            t.unlock_range(node, &h, &span(start, end));
            let after = t.lock_count(node, &h);
            self.n_byte_locks = (self.n_byte_locks + after).saturating_sub(before);
        }
        Ok(self.bump_lock(lock))
    }

    /// FREE_STATEID (RFC 8881 18.38).
    pub fn free_stateid(&mut self, other: &Other) -> Nfsstat4 {
        if self.opens.contains_key(other) {
            return Nfsstat4::LOCKS_HELD;
        }
        // A revoked delegation goes (RFC 8881 8.5, 18.38.3); a live one
        // must be returned with DELEGRETURN.
        if let Some(d) = self.delegs.get(other) {
            if !d.revoked {
                return Nfsstat4::LOCKS_HELD;
            }
            self.remove_deleg(other);
            return Nfsstat4::OK;
        }
        match self.locks.get(other) {
            Some(l) => {
                if self.table.table().has_locks(l.node, &holder(l.client, other)) {
                    Nfsstat4::LOCKS_HELD
                } else {
                    self.drop_lock_state(other);
                    Nfsstat4::OK
                }
            }
            None => Nfsstat4::BAD_STATEID,
        }
    }

    pub fn renew(&mut self, client: u64, now: i64) {
        if let Some(c) = self.clients.get_mut(&client) {
            c.last_renew = now;
        }
    }
}
