//! Leases: asked for on CREATE with RequestedOplockLevel
//! SMB2_OPLOCK_LEVEL_LEASE (0xFF) and an SMB2_CREATE_REQUEST_LEASE context
//! (MS-SMB2 2.2.13.2.8, v1, 2.1 and 3.x) or _V2 (2.2.13.2.10, 3.x),
//! granted per 3.3.5.9.8 / 3.3.5.9.11 and answered with
//! SMB2_CREATE_RESPONSE_LEASE(_V2) (2.2.14.2.10 / 2.2.14.2.11); broken with
//! a Lease Break Notification (2.2.23.2, 3.3.4.7), acknowledged by the
//! client (2.2.24.2, 3.3.5.22.2) and answered with a Lease Break Response
//! (2.2.25.2).
//!
//! A lease belongs to the client (ClientGuid) and its LeaseKey; several
//! opens made with one key share it. The decisions are the lock table's
//! ([`duet_locks::Table::request_lease`], [`duet_locks::Scope::Lease`]):
//! the lease is a holder of its own, (connection, [`LEASE_OWNER`] | n),
//! whose members are its opens, so that an open by the same key never
//! breaks it and the frontend routes its breaks to this connection like
//! an oplock's. The lease table is the client's (MS-SMB2 3.3.1.13
//! LeaseTable, one per ClientGuid), kept in [`Leases`] inside the shared
//! [`super::ShareModes`]: every connection that negotiated the same
//! ClientGuid finds a lease by its key, joins it with its opens and may
//! acknowledge its breaks. A lease's lock-table holder is (the client's
//! route key, [`LEASE_OWNER`] | n): the frontend routes its breaks to a
//! live connection of that client (3.3.4.7), see
//! [`Connection::client_route`]. A client that sent a zero ClientGuid gets
//! a table of its connection alone.
//!
//! Directory leases (SMB2_GLOBAL_CAP_DIRECTORY_LEASING, 3.x, v2 contexts
//! only): read and handle caching at most. A change inside the directory
//! (a name created, removed, renamed; a file written and then closed), by
//! either protocol, breaks its leases to none without making the change
//! wait (MS-FSA 2.1.4.13; the driver breaks them for every committed
//! batch, `Conflict::Child`, except the lease the changing open named as
//! its ParentLeaseKey, 3.3.4.7); an SMB WRITE breaks them only when its
//! open closes ([`Connection::break_parent_on_close`]).


use duet_fs::NodeId;
use duet_locks::{Break, Holder, Level};

use super::conn::Connection;
use super::plan::*;
use super::sharemode::holder;
use super::Event;
use crate::smb2::create_context::{Lease, LeaseV2};
use crate::smb2::message::Response;
use crate::smb2::negotiate::dialect;
use crate::smb2::oplock_break::{LeaseBreakAck, LeaseBreakNotification, OplockBreakMessage};
use crate::smb2::status::NtStatus;
use super::state::*;

impl Leases {
    /// Connection `conn` is gone: its opens leave their leases, and a
    /// lease with no open left ends (the lock table drops its grant with
    /// its last member).
    pub(super) fn forget_connection(&mut self, conn: u64) {
        self.by_key.retain(|_, r| {
            r.opens.retain(|k| k.0 != conn);
            !r.opens.is_empty()
        });
    }

    /// Open `old` is now `new` (a durable open kept, or reconnected:
    /// `durable.rs`); with `session`, the lease's breaks go to that
    /// session of the new connection.
    pub(super) fn rekey_open(&mut self, lease: Option<([u8; 16], [u8; 16])>, old: (u64, u64), new: (u64, u64), session: Option<u64>) {
        let Some(r) = lease.and_then(|l| self.by_key.get_mut(&l)) else { return };
        for k in r.opens.iter_mut().filter(|k| **k == old) {
            *k = new;
        }
        if let Some(s) = session {
            r.session = (new.0, s);
        }
    }

    /// Open `open` left lease `lease`, which ends with its last open.
    pub(super) fn forget_open(&mut self, lease: Option<([u8; 16], [u8; 16])>, open: (u64, u64)) {
        let Some(l) = lease else { return };
        let Some(r) = self.by_key.get_mut(&l) else { return };
        r.opens.retain(|k| *k != open);
        if r.opens.is_empty() {
            self.by_key.remove(&l);
        }
    }

    /// The opens of the lease whose lock-table owner is `owner`.
    pub(super) fn opens_of_owner(&self, owner: u64) -> Option<Vec<(u64, u64)>> {
        self.by_key.values().find(|r| r.owner == owner).map(|r| r.opens.clone())
    }

    /// Whether lease `lease` holds handle caching and is not breaking
    /// (MS-SMB2 3.3.7.1: what keeps a leased durable open).
    pub(super) fn handle_held(&self, lease: ([u8; 16], [u8; 16])) -> bool {
        self.by_key.get(&lease).is_some_and(|r| r.state.has(Level::H) && r.breaking_to.is_none())
    }

    /// The response context of lease `lease` as it stands (a reconnected
    /// durable open's CREATE response, MS-SMB2 3.3.5.9.7).
    pub(super) fn response(&self, lease: ([u8; 16], [u8; 16])) -> Option<Lease> {
        let r = self.by_key.get(&lease)?;
        Some(Lease {
            lease_key: lease.1,
            lease_state: u32::from(r.state.0),
            lease_flags: if r.breaking_to.is_some() { Lease::BREAK_IN_PROGRESS } else { 0 }
                | if r.parent.is_some() && r.v2 { Lease::PARENT_LEASE_KEY_SET } else { 0 },
            lease_duration: 0,
            v2: r.v2.then(|| LeaseV2 { parent_lease_key: r.parent.unwrap_or_default(), epoch: r.epoch }),
        })
    }

    /// The file at `node` was renamed to share-mode path `path`.
    pub(super) fn renamed(&mut self, node: NodeId, path: &str) {
        for r in self.by_key.values_mut().filter(|r| r.node == node) {
            r.path = path.to_string();
        }
    }
}

/// A lease request a CREATE carries, once the dialect allows it
/// (3.3.5.9.8: 2.1 or 3.x for v1; 3.3.5.9.11: 3.x for v2).
pub(super) fn usable(requested_oplock: u8, l: &Lease, dialect_rev: u16) -> bool {
    requested_oplock == crate::smb2::create::oplock_level::LEASE
        && dialect_rev >= dialect::SMB2_1
        && (l.v2.is_none() || dialect_rev >= dialect::SMB3_0)
}

fn state_of(bits: u32) -> Level {
    Level((bits & 0x7) as u8)
}

impl Connection {
    /// The ClientGuid this connection's leases are kept under: the
    /// negotiated one, or, when the client sent zeros (or before
    /// NEGOTIATE), one of this connection alone.
    pub(super) fn lease_client(&self) -> [u8; 16] {
        match self.negotiated.as_ref().map(|n| n.client_guid) {
            Some(g) if g != [0; 16] => g,
            _ => {
                let mut g = [0u8; 16];
                g[..8].copy_from_slice(&self.conn_key.to_le_bytes());
                g[8] = 0xFF;
                g
            }
        }
    }

    /// The key under which breaks of this client's leases are routed (the
    /// `client` of their lock-table holders): a hash of the ClientGuid,
    /// or this connection's own key when the ClientGuid is zero. The
    /// driver registers the connection under it too, once negotiated.
    pub fn client_route(&self) -> Option<u64> {
        let g = self.negotiated.as_ref()?.client_guid;
        if g == [0; 16] {
            return Some(self.conn_key);
        }
        // FNV-1a over the GUID (a routing name, not a secret).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in g {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        Some(h)
    }

    pub(super) fn lease_holder(&self, owner: u64) -> Holder {
        holder((self.client_route().unwrap_or(self.conn_key), owner))
    }

    /// The lock-table holder a CREATE asking for lease `key` on the file
    /// at `path` opens as: the lease itself when it is held on that file
    /// (its own opens never break it).
    pub(super) fn lease_opener(&self, key: &[u8; 16], path: &str) -> Option<Holder> {
        let owner = {
            let t = self.cfg.share_modes.leases();
            t.by_key.get(&(self.lease_client(), *key)).filter(|r| r.path == path).map(|r| r.owner)
        };
        owner.map(|o| self.lease_holder(o))
    }

    /// 3.3.5.9.8: a lease key already used for another file is
    /// STATUS_INVALID_PARAMETER.
    /// A key held on a file with hard links is let through here; the grant
    /// then joins the lease if the open reached the same file, and gives
    /// this open no lease if not ([`Connection::grant_lease`]).
    pub(super) fn lease_key_conflicts(&self, key: &[u8; 16], path: &str) -> bool {
        let t = self.cfg.share_modes.leases();
        // An empty path: the file moved where the opens could not follow
        // (`ShareModes::moved`); the next open names it again.
        t.by_key.get(&(self.lease_client(), *key)).is_some_and(|r| r.path != path && !r.linked && !r.path.is_empty())
    }

    /// Grants open `file` of `node` (at share-mode path `path`) the lease
    /// `req` asks for, as far as the other opens and leases allow; returns
    /// the response context (its LeaseState possibly none).
    pub(super) fn grant_lease(
        &mut self,
        node: NodeId,
        file: u64,
        path: &str,
        session_id: u64,
        req: &Lease,
        nlink: u32,
        now_ns: i64,
    ) -> Lease {
        let client = self.lease_client();
        let lkey = (client, req.lease_key);
        let me = self.conn_key;
        let locks = self.cfg.share_modes.locks().clone();
        // The lease table's lock, then the lock table's.
        let mut t = self.cfg.share_modes.leases();
        if t.by_key.get(&lkey).is_some_and(|r| r.node != node) {
            // The key of a lease on another file (reached through a name
            // that was a hard link of the lease's file when the check was
            // made): this open gets no lease rather than a wrong one.
            return Lease { lease_key: req.lease_key, lease_state: 0, lease_flags: 0, lease_duration: 0, v2: req.v2 };
        }
        let owner = match t.by_key.get(&lkey) {
            Some(r) => r.owner,
            None => {
                t.next += 1;
                LEASE_OWNER | t.next
            }
        };
        let lease_h = self.lease_holder(owner);
        let rec = t.by_key.entry(lkey).or_insert_with(|| LeaseRec {
            owner,
            path: path.to_string(),
            node,
            linked: false,
            grant: None,
            state: Level::NONE,
            breaking_to: None,
            epoch: req.v2.map_or(0, |v| v.epoch),
            v2: req.v2.is_some(),
            parent: None,
            opens: Vec::new(),
            session: (me, session_id),
        });
        rec.linked = nlink > 1;
        if rec.path.is_empty() {
            // Moved where its path was not known (`ShareModes::moved`).
            rec.path = path.to_string();
        }
        let fresh = rec.opens.is_empty() && rec.grant.is_none();
        if !rec.opens.contains(&(me, file)) {
            rec.opens.push((me, file));
        }
        rec.session = (me, session_id);
        if let Some(v2) = req.v2 {
            if req.lease_flags & Lease::PARENT_LEASE_KEY_SET != 0 {
                rec.parent = Some(v2.parent_lease_key);
            }
        }
        let members: Vec<Holder> = rec.opens.iter().map(|k| holder(*k)).collect();
        let before = rec.state;
        let got = locks.table().request_lease(node, lease_h, &members, state_of(req.lease_state), now_ns);
        let mut breaking = false;
        match got {
            Some((g, l, b)) => {
                rec.grant = Some(g);
                rec.state = l;
                breaking = b;
            }
            None if rec.grant.is_none() => rec.state = Level::NONE,
            None => {}
        }
        // 3.3.5.9.11: a new lease's epoch is the client's plus one, and
        // every change of the state counts one more.
        if rec.v2 && (fresh || rec.state != before) {
            rec.epoch = rec.epoch.wrapping_add(1);
        }
        // The answer has the lease's version (Lease.Version, set by the
        // CREATE that made it), whichever context this one sent.
        let resp = Lease {
            lease_key: req.lease_key,
            lease_state: u32::from(rec.state.0),
            lease_flags: if breaking { Lease::BREAK_IN_PROGRESS } else { 0 }
                | if rec.parent.is_some() && rec.v2 { Lease::PARENT_LEASE_KEY_SET } else { 0 },
            lease_duration: 0,
            v2: rec.v2.then(|| LeaseV2 { parent_lease_key: rec.parent.unwrap_or_default(), epoch: rec.epoch }),
        };
        drop(t);
        if let Some(o) = self.opens.get_mut(&file) {
            o.lease = Some(req.lease_key);
        }
        resp
    }

    /// The lock-table holder of this client's lease that `req` names as
    /// its ParentLeaseKey (v2, PARENT_LEASE_KEY_SET), if that lease exists.
    pub(super) fn parent_lease_holder(&self, req: &Lease) -> Option<Holder> {
        let v2 = req.v2?;
        if req.lease_flags & Lease::PARENT_LEASE_KEY_SET == 0 {
            return None;
        }
        let owner = self.cfg.share_modes.leases().by_key.get(&(self.lease_client(), v2.parent_lease_key))?.owner;
        Some(self.lease_holder(owner))
    }

    /// Open `o`, which wrote, closed: the leases of its directory are
    /// broken (but the one its lease names as parent), as a listing
    /// cached under them shows its old size and times (MS-FSA 2.1.5.4).
    pub(super) fn break_parent_on_close(&mut self, o: &super::state::Open, now_ns: i64) {
        if !o.written || !self.cfg.share_modes.directory_leases() {
            return;
        }
        let exempt = o.lease.and_then(|k| {
            let t = self.cfg.share_modes.leases();
            let parent = t.by_key.get(&(self.lease_client(), k))?.parent?;
            t.by_key.get(&(self.lease_client(), parent)).map(|r| r.owner)
        });
        let exempt = exempt.map_or(Holder::new(duet_locks::Protocol::Smb, 0, 0), |owner| self.lease_holder(owner));
        let locks = self.cfg.share_modes.locks().clone();
        let none = duet_locks::Share { access: 0, deny: 0 };
        let (breaks, _) = locks.table().break_for(o.parent, &exempt, none, duet_locks::Conflict::Child, now_ns);
        self.outbox.extend(breaks.into_iter().map(Event::Recall));
    }

    /// Open `file` closed: it leaves its lease, which ends with its last
    /// open (the lock table drops the grant itself).
    pub(super) fn lease_forget_open(&mut self, key: Option<[u8; 16]>, file: u64) {
        let Some(key) = key else { return };
        let lkey = (self.lease_client(), key);
        let mut t = self.cfg.share_modes.leases();
        let Some(rec) = t.by_key.get_mut(&lkey) else { return };
        rec.opens.retain(|k| *k != (self.conn_key, file));
        if rec.opens.is_empty() {
            t.by_key.remove(&lkey);
        }
    }

    /// A break of one of this client's leases (MS-SMB2 3.3.4.7), routed to
    /// this connection of the client: the Lease Break Notification,
    /// MessageId 0xFFFFFFFFFFFFFFFF, SessionId 0 (encrypted when the
    /// lease's last session is this connection's and encrypts). A
    /// revocation (the break timed out: `from` and `to` none) leaves the
    /// lease at none and sends nothing.
    pub(super) fn on_lease_recall(&mut self, b: Break) -> Vec<Event> {
        let client = self.lease_client();
        let (note, session) = {
            let mut t = self.cfg.share_modes.leases();
            let Some((key, rec)) =
                t.by_key.iter_mut().find(|((c, _), r)| *c == client && r.owner == b.holder.owner)
            else {
                return Vec::new();
            };
            let key = key.1;
            if rec.grant != Some(b.grant) {
                return Vec::new();
            }
            if b.from.is_none() && b.to.is_none() {
                rec.grant = None;
                rec.state = Level::NONE;
                rec.breaking_to = None;
                return Vec::new();
            }
            let current = rec.state;
            if b.ack_needed {
                rec.breaking_to = Some(b.to);
            } else {
                rec.state = b.to;
                rec.breaking_to = None;
                if b.to.is_none() {
                    rec.grant = None;
                }
            }
            if rec.v2 {
                rec.epoch = rec.epoch.wrapping_add(1);
            }
            let note = LeaseBreakNotification {
                new_epoch: if rec.v2 { rec.epoch } else { 0 },
                flags: if b.ack_needed { LeaseBreakNotification::ACK_REQUIRED } else { 0 },
                lease_key: key,
                current_lease_state: u32::from(current.0),
                new_lease_state: u32::from(b.to.0),
                break_reason: 0,
                access_mask_hint: 0,
                share_mask_hint: 0,
            };
            let session = if rec.session.0 == self.conn_key { rec.session.1 } else { 0 };
            (note, session)
        };
        self.break_message(session, |m| note.encode(m))
    }

    /// Lease Break Acknowledgment (MS-SMB2 3.3.5.22.2), on any connection
    /// of the lease's client: an unknown key is
    /// STATUS_OBJECT_NAME_NOT_FOUND, a lease not breaking
    /// STATUS_UNSUCCESSFUL, a state the break did not leave
    /// STATUS_REQUEST_NOT_ACCEPTED; otherwise the lease takes the state
    /// and the Lease Break Response (2.2.25.2) echoes it.
    pub(super) fn lease_ack(&mut self, ack: &LeaseBreakAck) -> Plan {
        let client = self.lease_client();
        let locks = self.cfg.share_modes.locks().clone();
        let mut t = self.cfg.share_modes.leases();
        let Some(rec) = t.by_key.get_mut(&(client, ack.lease_key)) else {
            return done(NtStatus::OBJECT_NAME_NOT_FOUND);
        };
        let Some(to) = rec.breaking_to else {
            return done(NtStatus::UNSUCCESSFUL);
        };
        let level = state_of(ack.lease_state);
        if ack.lease_state & !0x7 != 0 || !level.within(to) {
            return done(NtStatus::REQUEST_NOT_ACCEPTED);
        }
        rec.breaking_to = None;
        rec.state = level;
        let grant = rec.grant;
        if level.is_none() {
            rec.grant = None;
        }
        if let Some(g) = grant {
            // Revoked meanwhile (the timeout passed): nothing to lower.
            let _ = locks.table().ack(g, level);
        }
        drop(t);
        ok(Response::OplockBreak(OplockBreakMessage::LeaseAck(LeaseBreakAck {
            flags: 0,
            lease_key: ack.lease_key,
            lease_state: u32::from(level.0),
            lease_duration: 0,
        })))
    }
}
