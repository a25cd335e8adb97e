//! NFSv4.1 delegations and the back channel that recalls them
//! (issue 13): RFC 8881 10.4 (open delegation), 10.4.4 (recall), 10.4.6
//! (revocation), 18.33 BACKCHANNEL_CTL, 18.34 BIND_CONN_TO_SESSION (back
//! direction), 18.36 CREATE_SESSION (CONN_BACK_CHAN, csa_cb_program,
//! csa_sec_parms), 18.6 DELEGRETURN, 20.2 CB_RECALL and 20.9 CB_SEQUENCE.
//!
//! A delegation is a grant of the daemon's lock table (`duet_locks`,
//! `Level::R`, or `Level::RW` for a write one, `Scope::Client`, held by
//! an NFSv4 holder), so SMB opens, writes and renames see it as they see
//! SMB leases. OPEN offers a read delegation when the open is for reading
//! only, the client has a back channel, and the table grants read caching (nobody else has the file open for writing
//! or caches writes, no break in progress, not recalled in the last
//! `recall_backoff_ns`). A conflicting operation (another client's open
//! for writing, a WRITE, a size change, a REMOVE or RENAME of the file, an
//! SMB open for writing or write) breaks the grant to none in the table;
//! the break comes back here (an NFS operation's, in
//! `NfsServer::recalls`; an SMB connection's, through the driver and
//! [`NfsServer::on_recall`]) and becomes a CB_RECALL, queued per client
//! and sent on the newest connection bound to a session's back channel,
//! one at a time on back-channel slot 0. The conflicting NFS operation is
//! answered NFS4ERR_DELAY until DELEGRETURN, or until the recall has
//! lasted a lease period: the delegation is then revoked (the table drops
//! the grant, the stateid answers NFS4ERR_DELEG_REVOKED until
//! FREE_STATEID, SEQUENCE says SEQ4_STATUS_RECALLABLE_STATE_REVOKED).
//! Write delegations (RW in the table) go only to a writer that asks for
//! one (OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG / WANT_ANY_DELEG): without
//! CB_GETATTR other clients' GETATTRs would not see its cached writes;
//! any other client's open recalls it. Reclaims (CLAIM_PREVIOUS,
//! CLAIM_DELEGATE_PREV) get no delegation (RFC 8881 10.2.1 lets the
//! server refuse).
//!
//! CB_GETATTR (RFC 8881 10.4.3, 20.1): another client's GETATTR of the
//! change attribute or size of a file under a write delegation (named by
//! a file handle, not by a LOOKUP in the same batch) waits for the
//! holder's answer, the COMPOUND parked by the callback's xid (the
//! SEQUENCE slot stays busy, nothing blocks). An answer whose change
//! differs from the server's reports the file modified: the holder's
//! size and the server's change attribute plus one. No answer within
//! [`CB_GETATTR_WAIT_NS`], a holder without a free back-channel slot, or
//! a lost connection: the server's own attributes.
//!
//! Nothing here does I/O: a callback leaves as an [`Event::Reply`] for the
//! back-channel connection (a CALL, record-marked), its reply comes back
//! through [`NfsServer::on_call`] as a REPLY record, matched by xid.

use duet_fs::NodeId;
use duet_locks::{Break, Holder, Level};

use super::super::state::{self, Other, KIND_DELEG};
use super::super::{Event, FileHandle, NfsServer};
use super::{need_session, ok_status, Compound, Flow};
use crate::nfs::nfs4::attrs::fattr4 as fa;
use crate::nfs::nfs4::callback::{self, CbCred, CbGetattr4Args, CbGetattrAttrs, CbOp, CbRecall4Args, CbSequence4Args};
use crate::nfs::nfs4::*;
use crate::nfs::xdr::{Opaque, XdrEncode, XdrWriter};

/// why_no_delegation4 (RFC 8881 18.16.2) values duet answers with.
const WND4_NOT_WANTED: u32 = 0;
const WND4_CANCELLED: u32 = 7;

/// The callback credential of csa_sec_parms / bca_sec_parms: the first
/// flavour duet can send (AUTH_NONE or AUTH_SYS; RPCSEC_GSS is not).
pub(super) fn cb_cred(parms: &[CallbackSecParms4<'_>]) -> Option<CbCred> {
    parms.iter().find_map(|p| match p {
        CallbackSecParms4::None => Some(CbCred::None),
        CallbackSecParms4::Sys(s) => {
            let mut w = XdrWriter::new();
            s.encode(&mut w);
            Some(CbCred::Sys(w.into_inner()))
        }
        CallbackSecParms4::Gss(_) => None,
    })
}

/// CREATE_SESSION made session `id` on `conn`: with CONN_BACK_CHAN the
/// connection carries the back channel too (RFC 8881 18.36.3); the
/// callback program and credential are kept either way.
pub(super) fn setup_session(srv: &mut NfsServer, id: &SessionId4, conn: super::ConnId, minor: u32, a: &CreateSession4Args<'_>) {
    let back = a.flags & create_session4_flag::CONN_BACK_CHAN != 0;
    let cred = cb_cred(&a.sec_parms.0);
    if let Some(s) = srv.state.sessions.get_mut(id) {
        s.cb_minor = minor;
        s.cb_program = a.cb_program;
        s.cb_cred = cred.clone().unwrap_or_default();
    }
    if back && cred.is_some() {
        srv.state.bind_back(id, conn);
    } else if back {
        if let Some(s) = srv.state.sessions.get_mut(id) {
            s.back_chan = true;
        }
    }
}

/// BACKCHANNEL_CTL (RFC 8881 18.33): a new callback program and
/// credential for the session of this COMPOUND.
pub(super) fn op_backchannel_ctl(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &BackchannelCtl4Args<'_>,
) -> Result<Flow, Nfsstat4> {
    need_session(c)?;
    let (sid, _, _) = c.session.ok_or(Nfsstat4::OP_NOT_IN_SESSION)?;
    // 18.33.3: none of the flavours acceptable: NFS4ERR_INVAL.
    let cred = cb_cred(&a.sec_parms.0).ok_or(Nfsstat4::INVAL)?;
    let s = srv.state.sessions.get_mut(&sid).ok_or(Nfsstat4::BADSESSION)?;
    s.cb_program = a.cb_program;
    s.cb_cred = cred;
    Ok(ok_status(c, opnum::BACKCHANNEL_CTL))
}

/// DELEGRETURN (RFC 8881 18.6): the client gives the delegation of the
/// current file back; the lock table's grant goes, and whoever waited for
/// the recall goes on at its next try.
pub(super) fn op_delegreturn(srv: &mut NfsServer, c: &mut Compound, a: &DelegReturn4Args) -> Result<Flow, Nfsstat4> {
    let client = need_session(c)?;
    let (_, node) = c.node()?;
    let mut sid = a.deleg_stateid;
    if sid == Stateid4::CURRENT {
        sid = c.cur_sid.ok_or(Nfsstat4::BAD_STATEID)?;
    }
    let d = srv.state.delegs.get(&sid.other).ok_or(Nfsstat4::BAD_STATEID)?;
    if d.client != client || d.node != node {
        return Err(Nfsstat4::BAD_STATEID);
    }
    if sid.seqid != 0 && sid.seqid != d.seqid {
        return Err(if sid.seqid < d.seqid { Nfsstat4::OLD_STATEID } else { Nfsstat4::BAD_STATEID });
    }
    if d.revoked {
        return Err(Nfsstat4::DELEG_REVOKED);
    }
    srv.state.remove_deleg(&sid.other);
    Ok(ok_status(c, opnum::DELEGRETURN))
}

/// sr_status_flags of a SEQUENCE on session `sid` of `client` (RFC 8881
/// 18.46.3): revoked delegations not yet freed, and a back channel asked
/// for but without a connection (CB_PATH_DOWN_SESSION for this session,
/// CB_PATH_DOWN when no session of the client has one).
pub(super) fn status_flags(srv: &NfsServer, sid: &SessionId4, client: u64) -> u32 {
    let mut f = 0;
    if srv.state.clients.get(&client).is_some_and(|c| c.revoked_delegs > 0) {
        f |= seq4_status::RECALLABLE_STATE_REVOKED;
    }
    if let Some(s) = srv.state.sessions.get(sid) {
        if s.back_chan && s.back_conns.is_empty() {
            f |= seq4_status::CB_PATH_DOWN_SESSION;
            if !srv.state.has_back_channel(client) {
                f |= seq4_status::CB_PATH_DOWN;
            }
        }
    }
    f
}

/// What an OPEN asked about delegations and what it opened.
pub(super) struct Offer {
    pub client: u64,
    pub node: NodeId,
    pub fsid: u64,
    /// share_access & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK.
    pub want: u32,
    pub access: u32,
    /// A reclaim (CLAIM_PREVIOUS): only the delegation it reclaims.
    pub reclaim: bool,
    /// The delegation type a CLAIM_PREVIOUS names (RFC 8881 10.2.1).
    pub reclaim_deleg: Option<OpenDelegationType4>,
}

fn none_ext(want: u32, why: OpenNoneDelegation4) -> OpenDelegation4<'static> {
    if want == share::WANT_NO_PREFERENCE {
        OpenDelegation4::None
    } else {
        OpenDelegation4::NoneExt(why)
    }
}

fn read_deleg(stateid: Stateid4) -> OpenDelegation4<'static> {
    OpenDelegation4::Read(OpenReadDelegation4 {
        stateid,
        recall: false,
        // RFC 8881 18.16.3: an ACE with an empty mask: the client asks
        // ACCESS as usual.
        permissions: NfsAce4 { type_: 0, flag: 0, access_mask: 0, who: Opaque(b"EVERYONE@") },
    })
}

/// The delegation an OPEN gets (RFC 8881 10.4, 18.16.3): a read
/// delegation when the open is for reading only (a write one for a writer
/// that asks), the client did not ask for none, has a back channel and
/// the lock table grants the caching;
/// otherwise none (OPEN_DELEGATE_NONE_EXT with the reason when the client
/// said what it wants).
pub(super) fn offer(srv: &mut NfsServer, o: &Offer, now: i64) -> OpenDelegation4<'static> {
    let want = o.want & share::WANT_DELEG_MASK;
    match want {
        share::WANT_NO_DELEG => return OpenDelegation4::NoneExt(OpenNoneDelegation4::Other(WND4_NOT_WANTED)),
        share::WANT_CANCEL => return OpenDelegation4::NoneExt(OpenNoneDelegation4::Other(WND4_CANCELLED)),
        _ => {}
    }
    if o.reclaim {
        return reclaim(srv, o, now);
    }
    // A write delegation only to a writer that asks for one (WANT_WRITE or
    // WANT_ANY): duet sends no CB_GETATTR (RFC 8881 10.4.3), so other
    // clients' GETATTRs do not see what the holder has cached; a client
    // that did not ask gets none for a write open.
    let writer = o.access & share::ACCESS_WRITE != 0;
    let write = writer && matches!(want, share::WANT_WRITE_DELEG | share::WANT_ANY_DELEG);
    if (writer && !write) || (want == share::WANT_WRITE_DELEG && !writer) {
        return none_ext(want, OpenNoneDelegation4::Contention(false));
    }
    if !srv.state.has_back_channel(o.client) {
        return none_ext(want, OpenNoneDelegation4::Resource(false));
    }
    match grant(srv, o, write, now) {
        Granted::Yes(d) => d,
        Granted::Full => none_ext(want, OpenNoneDelegation4::Resource(false)),
        Granted::Refused => none_ext(want, OpenNoneDelegation4::Contention(false)),
    }
}

/// What [`grant`] decided.
enum Granted {
    Yes(OpenDelegation4<'static>),
    /// No room for another delegation.
    Full,
    /// The lock table refused the caching.
    Refused,
}

/// The delegation of `o`'s file to its client, read or `write`: the one
/// the client already holds, or a new grant of the lock table.
fn grant(srv: &mut NfsServer, o: &Offer, write: bool, now: i64) -> Granted {
    if let Some(other) = srv.state.deleg_by_key.get(&(o.client, o.node)).copied() {
        if let Some(d) = srv.state.delegs.get(&other) {
            return Granted::Yes(delegation(Stateid4 { seqid: d.seqid, other }, d.write));
        }
    }
    if srv.state.delegs.len() >= srv.cfg.max_opens {
        return Granted::Full;
    }
    let other = srv.state.new_other(KIND_DELEG);
    let h: Holder = state::holder(o.client, &other);
    let locks = srv.cfg.locks.clone();
    let level = if write { Level::RW } else { Level::R };
    let got = locks.table().request_grant(o.node, h, level, now);
    match got {
        Some((g, l)) if l == level => {
            let fh = srv.handle(FileHandle::Object { fsid: o.fsid, id: o.node });
            Granted::Yes(delegation(srv.state.add_deleg(other, o.client, o.node, fh, g, write), write))
        }
        Some((g, _)) => {
            locks.table().release_grant(g);
            Granted::Refused
        }
        None => Granted::Refused,
    }
}

/// A delegation reclaimed after a restart (RFC 8881 10.2.1, 18.16.3:
/// CLAIM_PREVIOUS with the delegate_type the client held): granted again
/// as it was, whatever the client's OPEN would get today, since the client
/// may hold data or opens cached under it. During the grace period no
/// other client's new open can have taken the file, so the lock table
/// normally grants it; if it does not (an SMB client's open meanwhile:
/// SMB knows no grace period), none. A client without a back channel
/// gets it with `recall` set: it is to return it at once, since it could
/// not be recalled later.
fn reclaim(srv: &mut NfsServer, o: &Offer, now: i64) -> OpenDelegation4<'static> {
    let write = match o.reclaim_deleg {
        Some(OpenDelegationType4::Read) => false,
        Some(OpenDelegationType4::Write) => true,
        _ => return OpenDelegation4::None,
    };
    let Granted::Yes(mut d) = grant(srv, o, write, now) else {
        return OpenDelegation4::None;
    };
    if !srv.state.has_back_channel(o.client) {
        match &mut d {
            OpenDelegation4::Read(r) => r.recall = true,
            OpenDelegation4::Write(w) => w.recall = true,
            _ => {}
        }
    }
    d
}

fn delegation(stateid: Stateid4, write: bool) -> OpenDelegation4<'static> {
    if !write {
        return read_deleg(stateid);
    }
    OpenDelegation4::Write(OpenWriteDelegation4 {
        stateid,
        recall: false,
        // RFC 8881 18.16.2: no limit on how far the client may extend the
        // file under the delegation.
        space_limit: SpaceLimit4::Size(u64::MAX),
        permissions: NfsAce4 { type_: 0, flag: 0, access_mask: 0, who: Opaque(b"EVERYONE@") },
    })
}

impl NfsServer {
    /// Breaks of NFSv4 holders (delegations) become recalls here; the
    /// others (SMB holders) are returned for the driver.
    pub(crate) fn take_deleg_breaks(&mut self, breaks: Vec<Break>, now: i64) -> (Vec<Break>, Vec<Event>) {
        let mut smb = Vec::new();
        let mut any = false;
        for b in breaks {
            if b.holder.proto != duet_locks::Protocol::Nfs4 {
                smb.push(b);
                continue;
            }
            any = true;
            self.deleg_break(b, now);
        }
        let ev = if any { self.cb_pump(now) } else { Vec::new() };
        (smb, ev)
    }

    fn deleg_break(&mut self, b: Break, now: i64) {
        let Some(other) = self.state.deleg_by_grant.get(&b.grant).copied() else { return };
        if b.from.is_none() && b.to.is_none() && !b.ack_needed {
            // Revoked by the table (the recall outlasted its deadline).
            self.state.revoke_deleg(&other);
            return;
        }
        let lease = self.state.lease_ns;
        let Some(d) = self.state.delegs.get_mut(&other) else { return };
        if d.recalled.is_some() || d.revoked {
            return;
        }
        d.recalled = Some(now);
        // RFC 8881 10.4.5/10.4.6: a client that does not return the
        // delegation within a lease period loses it.
        self.cfg.locks.table().set_break_deadline(b.grant, now.saturating_add(lease));
        self.state.cb_queue.push_back(other);
    }

    /// A break an SMB connection decided for an NFSv4 delegation (the
    /// driver routes [`duet_locks::Break`]s whose holder is NFSv4 here):
    /// the CB_RECALL to send, if any.
    pub fn on_recall(&mut self, b: Break, now: i64) -> Vec<Event> {
        let (smb, mut ev) = self.take_deleg_breaks(vec![b], now);
        ev.extend(smb.into_iter().map(Event::Recall));
        ev
    }

    /// Sends the queued recalls that can go: one callback in flight per
    /// session (back-channel slot 0), on its newest back connection. A
    /// client without a back channel keeps its recall queued (SEQUENCE
    /// tells it CB_PATH_DOWN) until it binds one or the lease period
    /// revokes the delegation.
    pub(crate) fn cb_pump(&mut self, now: i64) -> Vec<Event> {
        let mut out = Vec::new();
        let mut keep = std::collections::VecDeque::new();
        while let Some(other) = self.state.cb_queue.pop_front() {
            let Some(d) = self.state.delegs.get(&other).filter(|d| !d.revoked).cloned() else { continue };
            let sessions = self.state.clients.get(&d.client).map(|c| c.sessions.clone()).unwrap_or_default();
            let free = sessions.iter().find(|s| {
                self.state.sessions.get(*s).is_some_and(|s| !s.back_conns.is_empty() && s.cb_inflight.is_none())
            });
            let Some(sid) = free.copied() else {
                keep.push_back(other);
                continue;
            };
            let xid = self.state.next_cb_xid;
            self.state.next_cb_xid = xid.wrapping_add(1).max(1);
            let Some(s) = self.state.sessions.get_mut(&sid) else { continue };
            let Some(conn) = s.back_conns.last().copied() else { continue };
            match s.cb_retry.take() {
                Some((o, seq)) if o == other => s.cb_seq = seq,
                _ => s.cb_seq = s.cb_seq.wrapping_add(1).max(1),
            }
            s.cb_inflight = Some((xid, other, now, conn));
            let seq = CbSequence4Args {
                sessionid: sid,
                sequenceid: s.cb_seq,
                slotid: 0,
                highest_slotid: 0,
                cachethis: false,
            };
            let rc = CbRecall4Args { stateid: Stateid4 { seqid: d.seqid, other }, truncate: false, fh: d.fh.clone() };
            let bytes = callback::encode_cb_recall(xid, s.cb_program, s.cb_minor, &s.cb_cred, &seq, &rc);
            out.push(Event::Reply { conn, bytes });
        }
        self.state.cb_queue = keep;
        out
    }

    /// A REPLY record on an NFS connection: the answer to a callback (by
    /// xid). Its slot is free again; the next queued recall goes. A reply
    /// that does not decode, or to nothing sent, is dropped.
    pub(crate) fn on_cb_reply(&mut self, record: &[u8], now: i64) -> Vec<Event> {
        let Ok(r) = callback::decode_cb_reply(record) else { return Vec::new() };
        let mut found = false;
        for s in self.state.sessions.values_mut() {
            if s.cb_inflight.is_some_and(|(x, _, _, _)| x == r.xid) {
                s.cb_inflight = None;
                found = true;
                break;
            }
        }
        if !found {
            return Vec::new();
        }
        let mut out = Vec::new();
        if self.cb_parked.contains_key(&r.xid) {
            // A reply that does not decode is no answer: the server's
            // own attributes.
            let seen = callback::decode_cb_getattr_reply(record).ok().flatten();
            out = self.resume_cb_getattr(r.xid, seen, now);
        }
        out.extend(self.cb_pump(now));
        out
    }

    /// The COMPOUND parked on CB_GETATTR `xid` goes on, with the holder's
    /// answer when there is one.
    fn resume_cb_getattr(&mut self, xid: u32, seen: Option<CbGetattrAttrs>, now: i64) -> Vec<Event> {
        self.state.cb_getattr_xids.remove(&xid);
        let Some((mut c, _)) = self.cb_parked.remove(&xid) else { return Vec::new() };
        if let Some(g) = c.cb_getattr.as_mut() {
            g.2 = seen;
        }
        super::drive(self, c, Vec::new(), now)
    }

    /// The timer's part: grants whose break ran out are revoked (an SMB
    /// holder is told, a delegation is marked revoked), a delegation whose
    /// grant the table no longer has (an SMB connection revoked it) too;
    /// a callback unanswered for a lease period frees its slot.
    pub(crate) fn deleg_tick(&mut self, now: i64) -> Vec<Event> {
        let locks = self.cfg.locks.clone();
        let mut out = Vec::new();
        let overdue = {
            let mut t = locks.table();
            if t.has_grants() {
                t.revoke_overdue(now)
            } else {
                Vec::new()
            }
        };
        for (grant, holder) in overdue {
            let b = Break { grant, holder, from: Level::NONE, to: Level::NONE, ack_needed: false };
            if holder.proto == duet_locks::Protocol::Nfs4 {
                self.deleg_break(b, now);
            } else {
                out.push(Event::Recall(b));
            }
        }
        if !self.state.delegs.is_empty() {
            let gone: Vec<Other> = {
                let t = locks.table();
                self.state
                    .delegs
                    .iter()
                    .filter(|(_, d)| !d.revoked && t.grant(d.grant).is_none())
                    .map(|(o, _)| *o)
                    .collect()
            };
            for o in gone {
                self.state.revoke_deleg(&o);
            }
        }
        // GETATTRs waiting too long for CB_GETATTR: answered from the
        // server's attributes, the slot freed.
        let overdue: Vec<u32> = self
            .cb_parked
            .iter()
            .filter(|(_, (_, at))| now.saturating_sub(*at) >= CB_GETATTR_WAIT_NS)
            .map(|(x, _)| *x)
            .collect();
        for xid in overdue {
            for s in self.state.sessions.values_mut() {
                if s.cb_inflight.is_some_and(|(x, _, _, _)| x == xid) {
                    s.cb_inflight = None;
                }
            }
            out.extend(self.resume_cb_getattr(xid, None, now));
        }
        let lease = self.state.lease_ns;
        for s in self.state.sessions.values_mut() {
            if s.cb_inflight.is_some_and(|(_, _, at, _)| now.saturating_sub(at) > lease) {
                s.cb_inflight = None;
            }
        }
        out.extend(self.cb_pump(now));
        out
    }
}

/// Whether a REPLY record is a callback's answer (the server sends CALLs
/// only for callbacks).
pub(crate) fn is_reply(record: &[u8]) -> bool {
    callback::is_reply(record)
}

/// How long a GETATTR waits for the write delegation holder's CB_GETATTR
/// answer before it is answered from the server's attributes (checked by
/// the timer, so up to a tick more).
pub(crate) const CB_GETATTR_WAIT_NS: i64 = 2_000_000_000;

/// A GETATTR waiting for CB_GETATTR: the file and the write delegation.
pub(crate) struct CbGetattrStep {
    node: NodeId,
    other: Other,
}

/// RFC 8881 10.4.3: a GETATTR of the change attribute or size of `obj`,
/// a file another client holds a write delegation of (not recalled), asks
/// that client first, once per operation.
pub(super) fn cb_getattr_needed(srv: &NfsServer, c: &Compound, obj: duet_fs::ObjRef, req: &Bitmap4) -> Option<CbGetattrStep> {
    let duet_fs::ObjRef::Id(node) = obj else { return None };
    if srv.state.delegs.is_empty() || !(req.is_set(fa::CHANGE) || req.is_set(fa::SIZE)) {
        return None;
    }
    if matches!(c.cb_getattr, Some((op, n, _)) if op == c.next_op && n == node) {
        return None;
    }
    let client = c.clientid.unwrap_or(0);
    let (other, _) = srv
        .state
        .delegs
        .iter()
        .find(|(_, d)| d.node == node && d.write && d.client != client && !d.revoked && d.recalled.is_none())?;
    Some(CbGetattrStep { node, other: *other })
}

/// Sends CB_GETATTR for step `g` on a free back-channel slot of the
/// holder and parks the COMPOUND (Ok: the callback to send); Err gives
/// it back to go on without an answer (no session with a free slot).
pub(super) fn send_cb_getattr(srv: &mut NfsServer, mut c: Box<Compound>, g: CbGetattrStep, now: i64) -> Result<Vec<Event>, Box<Compound>> {
    c.cb_getattr = Some((c.next_op, g.node, None));
    let Some(d) = srv.state.delegs.get(&g.other).cloned() else { return Err(c) };
    let sessions = srv.state.clients.get(&d.client).map(|cl| cl.sessions.clone()).unwrap_or_default();
    let free = sessions
        .iter()
        .find(|s| srv.state.sessions.get(*s).is_some_and(|s| !s.back_conns.is_empty() && s.cb_inflight.is_none()))
        .copied();
    let Some(sid) = free else { return Err(c) };
    let xid = srv.state.next_cb_xid;
    let Some(s) = srv.state.sessions.get_mut(&sid) else { return Err(c) };
    let Some(conn) = s.back_conns.last().copied() else { return Err(c) };
    srv.state.next_cb_xid = xid.wrapping_add(1).max(1);
    s.cb_seq = s.cb_seq.wrapping_add(1).max(1);
    s.cb_inflight = Some((xid, g.other, now, conn));
    let seq = CbSequence4Args { sessionid: sid, sequenceid: s.cb_seq, slotid: 0, highest_slotid: 0, cachethis: false };
    let op = CbOp::Getattr(CbGetattr4Args { fh: d.fh.clone(), attr_request: Bitmap4::from_bits(&[fa::CHANGE, fa::SIZE]) });
    let bytes = callback::encode_cb_compound(xid, s.cb_program, s.cb_minor, &s.cb_cred, &seq, &op);
    srv.state.cb_getattr_xids.insert(xid);
    srv.cb_parked.insert(xid, (c, now));
    Ok(vec![Event::Reply { conn, bytes }])
}

/// The attributes a GETATTR reports for `a` after the holder answered
/// CB_GETATTR (RFC 8881 10.4.3): when its change attribute differs from
/// the server's, the file was modified there: its size, and a change
/// attribute above the server's. None: the server's own.
pub(super) fn holder_view(c: &Compound, a: &duet_fs::Attrs) -> Option<duet_fs::Attrs> {
    let (_, node, Some(seen)) = c.cb_getattr.as_ref()? else { return None };
    if *node != a.id || seen.change.is_none_or(|ch| ch == a.change) {
        return None;
    }
    let mut v = a.clone();
    v.change = a.change.wrapping_add(1);
    if let Some(size) = seen.size {
        v.size = size;
    }
    Some(v)
}
