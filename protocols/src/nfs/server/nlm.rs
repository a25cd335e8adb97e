//! NLM version 4 (program 100021; RFC 1813 appendix II, section 6; XNFS
//! NLM) and NSM version 1 (program 100024; XNFS NSM), served on the NFS
//! port beside NFS, MOUNT and portmap: NFSv3 clients' byte-range locks and
//! DOS share reservations, kept in the daemon's one lock table
//! (`duet_locks`) so that they conflict with NFSv4 LOCK and SMB locks both
//! ways.
//!
//! * **Hosts.** A client host is named by `caller_name` (what its status
//!   monitor's SM_NOTIFY names again after it reboots); each gets a
//!   lock-table client id of its own ([`Protocol::Nlm`], never 0: the
//!   NFSv3 server's break holder is client 0). A lock owner is (host,
//!   `svid`), as the client's kernel keys its lock owners; `oh` is kept
//!   only to be given back. A share reservation's owner is (host, `oh`).
//! * **Locks.** `l_len` 0 = to the end of the file and beyond (RFC 1813
//!   6.3.1); an `l_offset + l_len` past 2^64 is to the end too. POSIX
//!   rules (an owner's new lock replaces its overlapping ranges, UNLOCK
//!   splits) are the table's. TEST answers the first conflicting lock: an
//!   NLM holder's own svid and oh, and for a holder of another protocol a
//!   synthetic one (svid 0, oh `"smb"` or `"nfs4"`).
//! * **Blocking.** A LOCK with `block` that conflicts is queued in the
//!   table and answered NLM4_BLOCKED; when the table grants it (an unlock
//!   of any protocol, a released host), the server builds an NLMPROC4_GRANTED
//!   call for the client's lock manager and hands it to the driver as an
//!   [`NlmCallback`] (the driver finds the client's NLM port through the
//!   client's portmapper and sends it: this module does no I/O). Granted
//!   waiters are collected after every NLM call and at every tick, so a
//!   lock freed by SMB or NFSv4 is granted within a tick. A retransmitted
//!   LOCK of a queued request answers BLOCKED again, of a granted one
//!   GRANTED. CANCEL withdraws a queued request, or releases the lock it
//!   got meanwhile when the client has not asked for it since (a CANCEL
//!   crossing the GRANTED call).
//! * **Grace** (RFC 1813 6.3 and XNFS: locks are reclaimed after a server
//!   restart): when the driver says hosts held locks before the restart
//!   ([`super::NfsServerConfig::nlm_hosts`]), LOCK and SHARE without
//!   `reclaim` and TEST answer NLM4_DENIED_GRACE_PERIOD for the grace
//!   period (`grace_s`, the NFSv4 one, from the first request), reclaims
//!   are served.
//! * **Reboots of clients.** SM_NOTIFY (NSM) and FREE_ALL (NLM) naming a
//!   host release everything it holds; so does a LOCK carrying a status
//!   number (`state`) other than the one the host last sent (both
//!   non-zero): the host rebooted and its old locks are stale.
//! * **Reboots of the server.** At start the driver sends SM_NOTIFY
//!   ([`NfsServer::nsm_reboot_notices`]) to the status monitor of every
//!   host that held state before, so that its lock manager reclaims.
//! * **NSM.** SM_STAT and SM_MON answer `stat_succ` with this server's
//!   state number (odd, from the boot seed); SM_MON registrations are
//!   remembered (bounded) but never called back: duet is the monitored
//!   side. SM_UNMON, SM_UNMON_ALL, SM_SIMU_CRASH are answered.
//! * **Not served:** the asynchronous _MSG/_RES procedures other than
//!   GRANTED_RES (PROC_UNAVAIL: Linux clients over TCP use the synchronous
//!   ones), NLM versions 1-3, UDP.
//!
//! Architecture Invariant: no I/O and no clock here; hostile arguments
//! are answered GARBAGE_ARGS, and every table is bounded.

use std::collections::HashMap;
use std::net::IpAddr;

use duet_locks::{Holder, LockError, LockInfo, Outcome, Protocol, Range, Share, WaiterId};

use super::{accepted, reply_with, CallCtx, Event, Exports, FileHandle, NfsServer};
use crate::nfs::nlm::*;
use crate::nfs::rpc::{
    begin_record, end_record, AcceptedReplyData, AuthSysParms, CallBody, OpaqueAuth, AUTH_SYS,
    PROGRAM_NLM, PROGRAM_NSM, RPC_VERSION,
};
use crate::nfs::xdr::{Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};

/// Hosts the server keeps state for (each is a few hundred bytes).
pub const MAX_NLM_HOSTS: usize = 4096;
/// Blocked LOCK requests waiting, all hosts together (the lock table's
/// own waiter limits apply too).
pub const MAX_NLM_BLOCKED: usize = 4096;
/// Granted callbacks waiting for the driver to take them.
pub const MAX_NLM_CALLBACKS: usize = 4096;
/// SM_MON registrations remembered.
pub const MAX_NSM_MONITORS: usize = 4096;

/// A call the driver must make to a client's lock manager: find its port
/// by asking the portmapper (port 111, TCP) at `addr` for (`prog`,
/// `vers`, TCP), connect, send `record` (one record-marked RPC call) and
/// read one reply. Failures are the client's loss: a Linux client polls
/// a blocked lock again by itself (every 30 s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NlmCallback {
    pub addr: IpAddr,
    pub prog: u32,
    pub vers: u32,
    pub xid: u32,
    pub record: Vec<u8>,
}

/// A host that held NLM state, as the driver keeps it across restarts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NlmHost {
    pub name: String,
    pub addr: IpAddr,
}

struct Host {
    id: u64,
    name: String,
    addr: IpAddr,
    /// The last non-zero NSM state number its LOCKs carried.
    nsm_state: i32,
}

/// The alock of a blocked request, as the GRANTED call gives it back.
#[derive(Clone, Debug)]
struct Alock {
    caller_name: Vec<u8>,
    fh: Vec<u8>,
    oh: Vec<u8>,
    svid: i32,
    l_offset: u64,
    l_len: u64,
}

impl Alock {
    fn of(l: &Nlm4Lock<'_>) -> Alock {
        Alock {
            caller_name: l.caller_name.0.to_vec(),
            fh: l.fh.0.to_vec(),
            oh: l.oh.0.to_vec(),
            svid: l.svid,
            l_offset: l.l_offset,
            l_len: l.l_len,
        }
    }

    fn wire(&self) -> Nlm4Lock<'_> {
        Nlm4Lock {
            caller_name: Opaque(&self.caller_name),
            fh: Opaque(&self.fh),
            oh: Opaque(&self.oh),
            svid: self.svid,
            l_offset: self.l_offset,
            l_len: self.l_len,
        }
    }
}

struct Blocked {
    file: u64,
    holder: Holder,
    range: Range,
    exclusive: bool,
    addr: IpAddr,
    cookie: Vec<u8>,
    alock: Alock,
}

/// The NLM and NSM state of the server.
pub(crate) struct NlmState {
    hosts: HashMap<String, Host>,
    by_id: HashMap<u64, String>,
    next_host: u64,
    blocked: HashMap<WaiterId, Blocked>,
    /// Requests granted by a callback lately (file, owner, range), so that
    /// a CANCEL that crossed its GRANTED call still undoes it.
    granted: std::collections::VecDeque<(u64, Holder, Range)>,
    callbacks: Vec<NlmCallback>,
    next_xid: u32,
    /// This server's NSM state number (odd: up).
    nsm_state: i32,
    monitors: HashMap<Vec<u8>, [u8; 16]>,
    /// Whether hosts held locks before this start (a grace period is due).
    reclaimers: bool,
    grace_end: Option<i64>,
}

impl NlmState {
    pub(crate) fn new(boot_seed: u64, reclaimers: bool) -> NlmState {
        NlmState {
            hosts: HashMap::new(),
            by_id: HashMap::new(),
            next_host: 1,
            blocked: HashMap::new(),
            granted: std::collections::VecDeque::new(),
            callbacks: Vec::new(),
            next_xid: (boot_seed as u32) | 1,
            nsm_state: (((boot_seed >> 33) as i32) & 0x3fff_ffff) | 1,
            monitors: HashMap::new(),
            reclaimers,
            grace_end: None,
        }
    }
}

fn host_key(name: &[u8]) -> String {
    String::from_utf8_lossy(name).to_ascii_lowercase()
}

/// RFC 1813 6.3.1: l_len 0 locks to the end of the file and beyond; so
/// does a range whose end does not fit in 64 bits.
fn range_of(offset: u64, len: u64) -> Range {
    if len == 0 {
        return Range::from(offset);
    }
    Range::nfs(offset, len).unwrap_or_else(|| Range::from(offset))
}

fn lock_owner(host: u64, svid: i32) -> Holder {
    Holder::new(Protocol::Nlm, host, u64::from(svid as u32))
}

fn share_owner(host: u64, oh: &[u8]) -> Holder {
    Holder::new(Protocol::Nlm, host, (1 << 63) | super::fh::siphash24(0x6e6c_6d, 0x6f68, oh))
}

impl NfsServer {
    /// Whether the NLM grace period lasts at `now_ns`.
    pub fn nlm_in_grace(&mut self, now_ns: i64) -> bool {
        let nlm = &mut self.nlm;
        if !nlm.reclaimers {
            return false;
        }
        let end = *nlm
            .grace_end
            .get_or_insert(now_ns.saturating_add(i64::from(self.cfg.grace_s) * 1_000_000_000));
        if now_ns < end {
            true
        } else {
            nlm.reclaimers = false;
            false
        }
    }

    /// The calls to clients' lock managers decided since the last take
    /// (NLMPROC4_GRANTED for blocked locks now granted).
    pub fn take_nlm_callbacks(&mut self) -> Vec<NlmCallback> {
        std::mem::take(&mut self.nlm.callbacks)
    }

    /// The hosts that hold NLM locks, shares or blocked requests now: what
    /// the driver keeps on stable storage for the grace period after a
    /// restart.
    pub fn nlm_hosts(&self) -> Vec<NlmHost> {
        let t = self.cfg.locks.table();
        let mut v: Vec<NlmHost> = self
            .nlm
            .hosts
            .values()
            .filter(|h| t.holds_anything(Protocol::Nlm, h.id))
            .map(|h| NlmHost { name: h.name.clone(), addr: h.addr })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// This server's NSM state number.
    pub fn nsm_state(&self) -> i32 {
        self.nlm.nsm_state
    }

    /// SM_NOTIFY calls (XNFS NSM: `stat_chge` naming this server as
    /// `mon_name`, with its new state number) for the status monitors of
    /// the hosts that held NLM state before this start
    /// ([`super::NfsServerConfig::nlm_hosts`]): told of the restart, their
    /// lock managers reclaim their locks in the grace period. The driver
    /// sends them once, at start, like [`NlmCallback`]s.
    pub fn nsm_reboot_notices(&mut self, mon_name: &str) -> Vec<NlmCallback> {
        let hosts = self.cfg.nlm_hosts.clone();
        let state = self.nlm.nsm_state;
        let mut out = Vec::new();
        for h in hosts.iter().take(MAX_NLM_HOSTS) {
            let xid = self.nlm.next_xid;
            self.nlm.next_xid = self.nlm.next_xid.wrapping_add(1);
            let args = SmStatChge { mon_name: Opaque(mon_name.as_bytes()), state };
            let record = rpc_call(xid, PROGRAM_NSM, NSM_VERSION_1, nsm_proc::NOTIFY, |w| args.encode(w));
            out.push(NlmCallback { addr: h.addr, prog: PROGRAM_NSM, vers: NSM_VERSION_1, xid, record });
        }
        out
    }

    /// The host record for `name`, made if new (None: the host table is
    /// full).
    fn nlm_host(&mut self, name: &[u8], addr: IpAddr) -> Option<u64> {
        let key = host_key(name);
        if let Some(h) = self.nlm.hosts.get_mut(&key) {
            h.addr = addr;
            return Some(h.id);
        }
        if self.nlm.hosts.len() >= MAX_NLM_HOSTS {
            // Forget a host that holds nothing any more.
            let t = self.cfg.locks.table();
            let idle = self
                .nlm
                .hosts
                .iter()
                .find(|(_, h)| !t.holds_anything(Protocol::Nlm, h.id))
                .map(|(k, h)| (k.clone(), h.id));
            drop(t);
            let (k, id) = idle?;
            self.nlm.hosts.remove(&k);
            self.nlm.by_id.remove(&id);
        }
        let id = self.nlm.next_host;
        self.nlm.next_host += 1;
        self.nlm.by_id.insert(id, key.clone());
        self.nlm.hosts.insert(key, Host { id, name: String::from_utf8_lossy(name).into_owned(), addr, nsm_state: 0 });
        Some(id)
    }

    fn nlm_host_id(&self, name: &[u8]) -> Option<u64> {
        self.nlm.hosts.get(&host_key(name)).map(|h| h.id)
    }

    /// Releases everything a host holds (SM_NOTIFY, FREE_ALL, a reboot
    /// seen in a LOCK's state number) and forgets it.
    fn nlm_free_host(&mut self, id: u64) {
        let locks = self.cfg.locks.clone();
        locks.table().release_client(Protocol::Nlm, id);
        self.nlm.blocked.retain(|_, b| b.holder.client != id);
        self.nlm.granted.retain(|g| g.1.client != id);
        if let Some(k) = self.nlm.by_id.remove(&id) {
            self.nlm.hosts.remove(&k);
        }
    }

    /// SM_NOTIFY / FREE_ALL naming `name`: the hosts of that name, and
    /// those whose address reads as `name`, are freed.
    fn nlm_free_named(&mut self, name: &[u8]) -> usize {
        let key = host_key(name);
        let ids: Vec<u64> = self
            .nlm
            .hosts
            .iter()
            .filter(|(k, h)| **k == key || h.addr.to_string() == key)
            .map(|(_, h)| h.id)
            .collect();
        for id in &ids {
            self.nlm_free_host(*id);
        }
        ids.len()
    }

    /// Collects the outcomes of blocked requests (granted by an unlock of
    /// any protocol, dropped, expired) and turns grants into GRANTED
    /// callbacks.
    pub(crate) fn nlm_poll(&mut self) {
        if self.nlm.blocked.is_empty() {
            return;
        }
        let mut hosts: Vec<u64> = self.nlm.blocked.values().map(|b| b.holder.client).collect();
        hosts.sort_unstable();
        hosts.dedup();
        let locks = self.cfg.locks.clone();
        let mut outcomes = Vec::new();
        {
            let mut t = locks.table();
            for h in hosts {
                outcomes.extend(t.take_outcomes(Protocol::Nlm, h));
            }
        }
        for o in outcomes {
            let Some(b) = self.nlm.blocked.remove(&o.id()) else { continue };
            if let Outcome::Granted { .. } = o {
                self.nlm_granted_callback(&b);
            }
        }
    }

    fn nlm_granted_callback(&mut self, b: &Blocked) {
        if self.nlm.granted.len() >= MAX_NLM_CALLBACKS {
            self.nlm.granted.pop_front();
        }
        self.nlm.granted.push_back((b.file, b.holder, b.range));
        if self.nlm.callbacks.len() >= MAX_NLM_CALLBACKS {
            return;
        }
        let xid = self.nlm.next_xid;
        self.nlm.next_xid = self.nlm.next_xid.wrapping_add(1);
        let args = Nlm4TestArgs { cookie: Opaque(&b.cookie), exclusive: b.exclusive, alock: b.alock.wire() };
        let record = rpc_call(xid, PROGRAM_NLM, NLM_VERSION_4, nlm_proc::GRANTED, |w| args.encode(w));
        self.nlm.callbacks.push(NlmCallback { addr: b.addr, prog: PROGRAM_NLM, vers: NLM_VERSION_4, xid, record });
    }

    /// The file a handle names (the export must let the peer in).
    fn nlm_file(&self, ctx: &CallCtx, fh: &[u8], exports: &dyn Exports) -> Result<u64, Nlm4Stat> {
        match FileHandle::decode(self.cfg.handle_key, fh) {
            Ok(FileHandle::Object { fsid, id }) => {
                let list = exports.exports();
                let e = list.iter().find(|e| e.fsid == fsid).ok_or(Nlm4Stat::StaleFh)?;
                if !e.allows(ctx.peer) {
                    return Err(Nlm4Stat::Failed);
                }
                Ok(id)
            }
            _ => Err(Nlm4Stat::StaleFh),
        }
    }
}

/// An RPC call record (record-marked) with an AUTH_SYS credential of uid
/// and gid 0 naming the server "duet".
fn rpc_call(xid: u32, prog: u32, vers: u32, proc_: u32, args: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
    let mut cw = XdrWriter::new();
    AuthSysParms { stamp: 0, machine_name: Opaque(b"duet"), uid: 0, gid: 0, gids: Vec::new() }.encode(&mut cw);
    let cred = cw.into_inner();
    let mut w = XdrWriter::new();
    let at = begin_record(&mut w);
    CallBody {
        xid,
        rpcvers: RPC_VERSION,
        prog,
        vers,
        proc_,
        cred: OpaqueAuth { flavor: AUTH_SYS, body: &cred },
        verf: OpaqueAuth::NONE,
    }
    .encode(&mut w);
    args(&mut w);
    end_record(&mut w, at);
    w.into_inner()
}

/// The holder a TEST reports (RFC 1813 6.1.4 nlm4_holder).
fn holder_of(k: &LockInfo) -> (i32, &'static [u8], u64, u64) {
    let oh: &'static [u8] = match k.holder.proto {
        Protocol::Smb => b"smb",
        Protocol::Nfs4 => b"nfs4",
        Protocol::Nlm => b"",
    };
    let svid = if k.holder.proto == Protocol::Nlm { k.holder.owner as u32 as i32 } else { 0 };
    let len = if k.range.last() == u64::MAX {
        0
    } else {
        k.range.last() - k.range.first() + 1
    };
    (svid, oh, k.range.first(), len)
}

fn res(ctx: &CallCtx, cookie: &[u8], stat: Nlm4Stat) -> Vec<Event> {
    vec![reply_with(ctx.conn, ctx.xid, |w| Nlm4Res { cookie: Opaque(cookie), stat }.encode(w))]
}

fn garbage(ctx: &CallCtx) -> Vec<Event> {
    vec![accepted(ctx.conn, ctx.xid, AcceptedReplyData::GarbageArgs)]
}

fn decode_args<'a, T: XdrDecode<'a>>(r: &mut XdrReader<'a>) -> Option<T> {
    let v = T::decode(r).ok()?;
    r.finish().ok()?;
    Some(v)
}

/// One NLM version 4 call.
pub(super) fn call(
    srv: &mut NfsServer,
    ctx: &CallCtx,
    proc_: u32,
    mut r: XdrReader<'_>,
    exports: &dyn Exports,
) -> Vec<Event> {
    let out = match proc_ {
        nlm_proc::NULL => vec![reply_with(ctx.conn, ctx.xid, |_| {})],
        nlm_proc::TEST => match decode_args::<Nlm4TestArgs>(&mut r) {
            Some(a) => test(srv, ctx, &a, exports),
            None => garbage(ctx),
        },
        nlm_proc::LOCK | nlm_proc::NM_LOCK => match decode_args::<Nlm4LockArgs>(&mut r) {
            Some(mut a) => {
                // NM_LOCK: a host that is not monitored never blocks.
                if proc_ == nlm_proc::NM_LOCK {
                    a.block = false;
                }
                let stat = lock(srv, ctx, &a, exports);
                res(ctx, a.cookie.0, stat)
            }
            None => garbage(ctx),
        },
        nlm_proc::CANCEL => match decode_args::<Nlm4CancArgs>(&mut r) {
            Some(a) => {
                let stat = cancel(srv, ctx, &a, exports);
                res(ctx, a.cookie.0, stat)
            }
            None => garbage(ctx),
        },
        nlm_proc::UNLOCK => match decode_args::<Nlm4UnlockArgs>(&mut r) {
            Some(a) => {
                let stat = unlock(srv, ctx, &a, exports);
                res(ctx, a.cookie.0, stat)
            }
            None => garbage(ctx),
        },
        // The answer to a GRANTED_MSG: duet sends synchronous GRANTED
        // calls, so there is nothing to match; accepted and dropped.
        nlm_proc::GRANTED_RES => match decode_args::<Nlm4Res>(&mut r) {
            Some(_) => vec![reply_with(ctx.conn, ctx.xid, |_| {})],
            None => garbage(ctx),
        },
        // A GRANTED call is for a client's lock manager, not a server's.
        nlm_proc::GRANTED => match decode_args::<Nlm4TestArgs>(&mut r) {
            Some(a) => res(ctx, a.cookie.0, Nlm4Stat::Denied),
            None => garbage(ctx),
        },
        nlm_proc::SHARE | nlm_proc::UNSHARE => match decode_args::<Nlm4ShareArgs>(&mut r) {
            Some(a) => {
                let stat = share(srv, ctx, &a, proc_ == nlm_proc::SHARE, exports);
                vec![reply_with(ctx.conn, ctx.xid, |w| {
                    Nlm4ShareRes { cookie: a.cookie, stat, sequence: 0 }.encode(w)
                })]
            }
            None => garbage(ctx),
        },
        nlm_proc::FREE_ALL => match decode_args::<Nlm4Notify>(&mut r) {
            Some(a) => {
                srv.nlm_free_named(a.name.0);
                vec![reply_with(ctx.conn, ctx.xid, |_| {})]
            }
            None => garbage(ctx),
        },
        _ => vec![accepted(ctx.conn, ctx.xid, AcceptedReplyData::ProcUnavail)],
    };
    srv.nlm_poll();
    out
}

fn test(srv: &mut NfsServer, ctx: &CallCtx, a: &Nlm4TestArgs<'_>, exports: &dyn Exports) -> Vec<Event> {
    let stat = (|| {
        let file = srv.nlm_file(ctx, a.alock.fh.0, exports).map_err(Nlm4TestRply::Other)?;
        if srv.nlm_in_grace(ctx.now_ns) {
            return Err(Nlm4TestRply::Other(Nlm4Stat::DeniedGracePeriod));
        }
        // An unknown host holds nothing: no lock of its own to exclude.
        let host = srv.nlm_host_id(a.alock.caller_name.0).unwrap_or(0);
        let me = lock_owner(host, a.alock.svid);
        let range = range_of(a.alock.l_offset, a.alock.l_len);
        let t = srv.cfg.locks.table();
        match t.test_lock(file, &me, &range, a.exclusive) {
            None => Ok(()),
            Some(k) => {
                let (svid, oh, off, len) = holder_of(&k);
                Err(Nlm4TestRply::Denied(Nlm4Holder {
                    exclusive: k.exclusive,
                    svid,
                    oh: Opaque(oh),
                    l_offset: off,
                    l_len: len,
                }))
            }
        }
    })();
    let stat = match stat {
        Ok(()) => Nlm4TestRply::Other(Nlm4Stat::Granted),
        Err(s) => s,
    };
    vec![reply_with(ctx.conn, ctx.xid, |w| Nlm4TestRes { cookie: a.cookie, stat }.encode(w))]
}

fn lock(srv: &mut NfsServer, ctx: &CallCtx, a: &Nlm4LockArgs<'_>, exports: &dyn Exports) -> Nlm4Stat {
    let file = match srv.nlm_file(ctx, a.alock.fh.0, exports) {
        Ok(f) => f,
        Err(s) => return s,
    };
    if srv.nlm_in_grace(ctx.now_ns) && !a.reclaim {
        return Nlm4Stat::DeniedGracePeriod;
    }
    // A host whose status number changed rebooted: what it held before
    // is stale (its SM_NOTIFY may never reach us).
    if a.state != 0 {
        let key = host_key(a.alock.caller_name.0);
        let rebooted = srv
            .nlm
            .hosts
            .get(&key)
            .filter(|h| h.nsm_state != 0 && h.nsm_state != a.state)
            .map(|h| h.id);
        if let Some(id) = rebooted {
            srv.nlm_free_host(id);
        }
    }
    let Some(host) = srv.nlm_host(a.alock.caller_name.0, ctx.peer) else {
        return Nlm4Stat::DeniedNolocks;
    };
    if a.state != 0 {
        if let Some(h) = srv.nlm.hosts.get_mut(&host_key(a.alock.caller_name.0)) {
            h.nsm_state = a.state;
        }
    }
    let me = lock_owner(host, a.alock.svid);
    let range = range_of(a.alock.l_offset, a.alock.l_len);
    // Grants decided since the last call first (a request of this owner
    // granted meanwhile leaves the queue with its callback).
    srv.nlm_poll();
    // A retransmission (or a client's poll) of a request still queued.
    let queued = srv
        .nlm
        .blocked
        .iter()
        .find(|(_, b)| b.file == file && b.holder == me && b.range == range && b.exclusive == a.exclusive)
        .map(|(id, _)| *id);
    if let Some(id) = queued {
        if srv.cfg.locks.table().is_waiting(id) {
            return Nlm4Stat::Blocked;
        }
    }
    // The client asks again for what a callback granted: it knows now.
    srv.nlm.granted.retain(|g| *g != (file, me, range));
    let locks = srv.cfg.locks.clone();
    let mut t = locks.table();
    if !a.block {
        return match t.lock(file, me, range, a.exclusive) {
            Ok(()) => Nlm4Stat::Granted,
            Err(LockError::Conflict(_)) => Nlm4Stat::Denied,
            Err(LockError::Limit) => Nlm4Stat::DeniedNolocks,
        };
    }
    if srv.nlm.blocked.len() >= MAX_NLM_BLOCKED {
        return match t.lock(file, me, range, a.exclusive) {
            Ok(()) => Nlm4Stat::Granted,
            Err(_) => Nlm4Stat::DeniedNolocks,
        };
    }
    match t.lock_or_wait(file, me, range, a.exclusive, None, 0) {
        Ok(None) => Nlm4Stat::Granted,
        Ok(Some(id)) => {
            drop(t);
            srv.nlm.blocked.insert(
                id,
                Blocked {
                    file,
                    holder: me,
                    range,
                    exclusive: a.exclusive,
                    addr: ctx.peer,
                    cookie: a.cookie.0.to_vec(),
                    alock: Alock::of(&a.alock),
                },
            );
            Nlm4Stat::Blocked
        }
        Err(LockError::Conflict(_)) => Nlm4Stat::Denied,
        Err(LockError::Limit) => Nlm4Stat::DeniedNolocks,
    }
}

fn cancel(srv: &mut NfsServer, ctx: &CallCtx, a: &Nlm4CancArgs<'_>, exports: &dyn Exports) -> Nlm4Stat {
    let file = match srv.nlm_file(ctx, a.alock.fh.0, exports) {
        Ok(f) => f,
        Err(s) => return s,
    };
    if srv.nlm_in_grace(ctx.now_ns) {
        return Nlm4Stat::DeniedGracePeriod;
    }
    let Some(host) = srv.nlm_host_id(a.alock.caller_name.0) else {
        return Nlm4Stat::Denied;
    };
    let me = lock_owner(host, a.alock.svid);
    let range = range_of(a.alock.l_offset, a.alock.l_len);
    // Outcomes decided meanwhile first: a request granted since is
    // answered by releasing what it got.
    srv.nlm_poll();
    let id = srv
        .nlm
        .blocked
        .iter()
        .find(|(_, b)| b.file == file && b.holder == me && b.range == range && b.exclusive == a.exclusive)
        .map(|(id, _)| *id);
    match id {
        Some(id) => {
            srv.nlm.blocked.remove(&id);
            srv.cfg.locks.table().cancel(id);
            Nlm4Stat::Granted
        }
        None => {
            // Granted already (its GRANTED call not sent yet, or crossing
            // this CANCEL): the lock it got goes, as if the request never
            // was.
            if let Some(i) = srv.nlm.callbacks.iter().position(|c| c.addr == ctx.peer && callback_names(c, a)) {
                srv.nlm.callbacks.remove(i);
            }
            match srv.nlm.granted.iter().position(|g| *g == (file, me, range)) {
                Some(i) => {
                    srv.nlm.granted.remove(i);
                    srv.cfg.locks.table().unlock_range(file, &me, &range);
                    Nlm4Stat::Granted
                }
                None => Nlm4Stat::Denied,
            }
        }
    }
}

/// Whether a pending GRANTED callback is for the lock `a` cancels.
fn callback_names(c: &NlmCallback, a: &Nlm4CancArgs<'_>) -> bool {
    let Some(body) = c.record.get(4..) else { return false };
    let mut r = XdrReader::new(body);
    if CallBody::decode(&mut r).is_err() {
        return false;
    }
    match Nlm4TestArgs::decode(&mut r) {
        Ok(g) => {
            g.alock.fh.0 == a.alock.fh.0
                && g.alock.svid == a.alock.svid
                && g.alock.l_offset == a.alock.l_offset
                && g.alock.l_len == a.alock.l_len
                && host_key(g.alock.caller_name.0) == host_key(a.alock.caller_name.0)
        }
        Err(_) => false,
    }
}

fn unlock(srv: &mut NfsServer, ctx: &CallCtx, a: &Nlm4UnlockArgs<'_>, exports: &dyn Exports) -> Nlm4Stat {
    let file = match srv.nlm_file(ctx, a.alock.fh.0, exports) {
        Ok(f) => f,
        Err(s) => return s,
    };
    if srv.nlm_in_grace(ctx.now_ns) {
        return Nlm4Stat::DeniedGracePeriod;
    }
    // Unlocking what is not held succeeds (XNFS: UNLOCK of an unlocked
    // range is not an error).
    let Some(host) = srv.nlm_host_id(a.alock.caller_name.0) else {
        return Nlm4Stat::Granted;
    };
    let me = lock_owner(host, a.alock.svid);
    let range = range_of(a.alock.l_offset, a.alock.l_len);
    srv.nlm.granted.retain(|g| !(g.0 == file && g.1 == me && g.2.overlaps(&range)));
    srv.cfg.locks.table().unlock_range(file, &me, &range);
    Nlm4Stat::Granted
}

fn share(srv: &mut NfsServer, ctx: &CallCtx, a: &Nlm4ShareArgs<'_>, on: bool, exports: &dyn Exports) -> Nlm4Stat {
    let file = match srv.nlm_file(ctx, a.share.fh.0, exports) {
        Ok(f) => f,
        Err(s) => return s,
    };
    if srv.nlm_in_grace(ctx.now_ns) && !(on && a.reclaim) {
        return Nlm4Stat::DeniedGracePeriod;
    }
    if !on {
        if let Some(host) = srv.nlm_host_id(a.share.caller_name.0) {
            srv.cfg.locks.table().close(file, &share_owner(host, a.share.oh.0));
        }
        return Nlm4Stat::Granted;
    }
    let Some(host) = srv.nlm_host(a.share.caller_name.0, ctx.peer) else {
        return Nlm4Stat::DeniedNolocks;
    };
    // fsh4_access R/W and fsh4_mode DR/DW use the bits of the table's
    // share::READ / share::WRITE.
    let s = Share { access: a.share.access.as_u32() as u8 & 3, deny: a.share.mode.as_u32() as u8 & 3 };
    match srv.cfg.locks.table().open(file, share_owner(host, a.share.oh.0), s) {
        Ok(()) => Nlm4Stat::Granted,
        Err(false) => Nlm4Stat::Denied,
        Err(true) => Nlm4Stat::DeniedNolocks,
    }
}

/// One NSM version 1 call.
pub(super) fn nsm_call(srv: &mut NfsServer, ctx: &CallCtx, proc_: u32, mut r: XdrReader<'_>) -> Vec<Event> {
    let state = srv.nlm.nsm_state;
    match proc_ {
        nsm_proc::NULL => vec![reply_with(ctx.conn, ctx.xid, |_| {})],
        nsm_proc::STAT => match decode_args::<SmName>(&mut r) {
            Some(_) => vec![reply_with(ctx.conn, ctx.xid, |w| {
                SmStatRes { res_stat: SmRes::Succ, state }.encode(w)
            })],
            None => garbage(ctx),
        },
        nsm_proc::MON => match decode_args::<SmMon>(&mut r) {
            Some(m) => {
                let name = m.mon_id.mon_name.0.to_ascii_lowercase();
                let ok = srv.nlm.monitors.len() < MAX_NSM_MONITORS || srv.nlm.monitors.contains_key(&name);
                if ok {
                    srv.nlm.monitors.insert(name, m.private);
                }
                let res_stat = if ok { SmRes::Succ } else { SmRes::Fail };
                vec![reply_with(ctx.conn, ctx.xid, |w| SmStatRes { res_stat, state }.encode(w))]
            }
            None => garbage(ctx),
        },
        nsm_proc::UNMON => match decode_args::<SmMonId>(&mut r) {
            Some(m) => {
                srv.nlm.monitors.remove(&m.mon_name.0.to_ascii_lowercase());
                vec![reply_with(ctx.conn, ctx.xid, |w| SmStat { state }.encode(w))]
            }
            None => garbage(ctx),
        },
        nsm_proc::UNMON_ALL => match decode_args::<SmMyId>(&mut r) {
            Some(_) => {
                srv.nlm.monitors.clear();
                vec![reply_with(ctx.conn, ctx.xid, |w| SmStat { state }.encode(w))]
            }
            None => garbage(ctx),
        },
        nsm_proc::SIMU_CRASH => {
            if !r.is_empty() {
                return garbage(ctx);
            }
            srv.nlm.nsm_state = srv.nlm.nsm_state.wrapping_add(2) | 1;
            vec![reply_with(ctx.conn, ctx.xid, |_| {})]
        }
        // The named host rebooted: its locks, shares and blocked requests
        // go (others waiting on them may be granted now).
        nsm_proc::NOTIFY => match decode_args::<SmStatChge>(&mut r) {
            Some(c) => {
                srv.nlm_free_named(c.mon_name.0);
                srv.nlm_poll();
                vec![reply_with(ctx.conn, ctx.xid, |_| {})]
            }
            None => garbage(ctx),
        },
        _ => vec![accepted(ctx.conn, ctx.xid, AcceptedReplyData::ProcUnavail)],
    }
}
