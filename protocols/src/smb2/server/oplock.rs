//! Oplocks: granted on CREATE (MS-SMB2 3.3.5.9, RequestedOplockLevel of
//! 2.2.13, OplockLevel of 2.2.14), broken when another open or a write
//! contradicts them (3.3.4.6, OPLOCK_BREAK Notification 2.2.23.1), and
//! acknowledged by the holder (3.3.5.22.1: Acknowledgment 2.2.24.1,
//! Response 2.2.25.1).
//!
//! The decisions are the lock table's ([`duet_locks::grant`]): an oplock is
//! a grant of one open ([`duet_locks::Scope::Open`]) at level II = R,
//! exclusive = RW, batch = RWH. A break of another connection's open is an
//! [`Event::Recall`]: the driver routes it to the holder's connection,
//! which turns it into the notification ([`Connection::on_recall`]). A
//! CREATE that must wait for acknowledgements is answered STATUS_PENDING
//! with an AsyncId (3.3.4.2) and parked; [`Connection::poll_opens`] runs it
//! again, in the ASYNC form, once the breaks are acknowledged, the holders
//! closed their opens, or the break timeout revoked them.

use duet_fs::NodeId;
use duet_locks::{Break, Conflict, Level, Share};

use super::conn::Connection;
use super::plan::*;
use super::sharemode::holder;
use super::{Directory, Event};
use crate::smb2::create::oplock_level;
use crate::smb2::header::{Command, Header, HeaderFlags, HeaderIds};
use crate::smb2::message::Response;
use crate::smb2::oplock_break::{OplockBreak, OplockBreakMessage};
use crate::smb2::status::NtStatus;
use crate::smb2::FileId;
use super::state::*;

/// The caching a RequestedOplockLevel asks for (a lease request, 0xFF, is
/// not an oplock: `lease.rs` grants those).
pub(super) fn wanted(requested: u8) -> Option<Level> {
    match requested {
        oplock_level::II => Some(Level::R),
        oplock_level::EXCLUSIVE => Some(Level::RW),
        oplock_level::BATCH => Some(Level::RWH),
        _ => None,
    }
}

/// The oplock level of a grant level: batch needs all three, exclusive
/// read and write caching, level II read caching.
pub(super) fn oplock_of(l: Level) -> u8 {
    if l.has(Level::RWH) {
        oplock_level::BATCH
    } else if l.has(Level::RW) {
        oplock_level::EXCLUSIVE
    } else if l.has(Level::R) {
        oplock_level::II
    } else {
        oplock_level::NONE
    }
}

impl Connection {
    /// Before a CREATE of the file at `path` (a share-mode path key) runs:
    /// breaks what other opens' oplocks cache that this open contradicts.
    /// Returns the files concerned and, when acknowledgements are awaited,
    /// until when.
    /// `truncate`: the CREATE replaces the data (SUPERSEDE, OVERWRITE,
    /// OVERWRITE_IF), which breaks read caching too. `delete`: it asks for
    /// delete-on-close, which takes handle caching from other holders'
    /// leases as a delete does (MS-FSA 2.1.5.14.3).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn break_for_create(
        &mut self,
        path: &str,
        share: Share,
        truncate: bool,
        delete: bool,
        lease: Option<&[u8; 16]>,
        now_ns: i64,
    ) -> (Vec<NodeId>, Option<i64>) {
        let why = if truncate {
            Conflict::Write
        } else if delete {
            Conflict::Namespace
        } else {
            Conflict::SmbOpen
        };
        let nodes = self.cfg.share_modes.nodes_at(path);
        if nodes.is_empty() {
            return (nodes, None);
        }
        // An open by a lease's own key breaks nothing of that lease.
        let opener = lease
            .and_then(|k| self.lease_opener(k, path))
            .unwrap_or_else(|| holder((self.conn_key, OPENER)));
        let locks = self.cfg.share_modes.locks().clone();
        let mut breaks = Vec::new();
        let mut wait: Option<i64> = None;
        {
            let mut t = locks.table();
            for n in &nodes {
                let (b, w) = t.break_for(*n, &opener, share, why, now_ns);
                breaks.extend(b);
                wait = match (wait, w) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        // A break for a kept durable open closes it instead (`durable.rs`);
        // its delete-on-close file is removed before this CREATE runs
        // again (it waits for that batch, `park_after`).
        let mut closed_kept = false;
        for b in breaks {
            match self.cfg.share_modes.break_kept(&b, now_ns) {
                Some(batches) => {
                    closed_kept = true;
                    for batch in batches {
                        let token = self.side_run(batch, "durable-close");
                        self.park_after.push(token);
                    }
                }
                None => self.outbox.push(Event::Recall(b)),
            }
        }
        if closed_kept {
            let t = locks.table();
            wait = nodes.iter().filter_map(|n| t.break_deadline(*n, &opener)).max();
        }
        (nodes, wait)
    }

    /// A WRITE through open `file`: level II oplocks of the other opens
    /// are broken to none, without waiting (MS-SMB2 3.3.4.6, MS-FSA
    /// 2.1.5.4).
    pub(super) fn break_for_write(&mut self, file: u64, now_ns: i64) {
        let Some(node) = self.opens.get(&file).map(|o| o.node) else { return };
        let locks = self.cfg.share_modes.locks().clone();
        let (breaks, _) = locks.table().break_for(
            node,
            &holder((self.conn_key, file)),
            Share { access: duet_locks::share::WRITE, deny: 0 },
            Conflict::Write,
            now_ns,
        );
        self.outbox.extend(breaks.into_iter().map(Event::Recall));
        // The writer's own level II goes too (what Windows does; smbtorture
        // smb2.oplock.batch1 "a self break to none"): no ack.
        let own = self.opens.get(&file).filter(|o| o.oplock == oplock_level::II).and_then(|o| o.grant);
        if let Some(g) = own {
            locks.table().release_grant(g);
            self.outbox.push(Event::Recall(Break {
                grant: g,
                holder: holder((self.conn_key, file)),
                from: Level::R,
                to: Level::NONE,
                ack_needed: false,
            }));
        }
    }

    /// A byte-range LOCK through open `file` (MS-FSA 2.1.5.7, which asks
    /// 2.1.4.12 with Operation BYTE_RANGE_LOCK): the read caching of
    /// other opens' oplocks and other leases goes (level II to none, R and
    /// RH leases to none), the locker's own lease keeps its caching; the
    /// LOCK does not wait for acknowledgements (smbtorture
    /// smb2.lease.lock1, smb2.oplock.brl1-3).
    pub(super) fn break_for_lock(&mut self, file: u64, now_ns: i64) {
        let Some(node) = self.opens.get(&file).map(|o| o.node) else { return };
        let h = holder((self.conn_key, file));
        let locks = self.cfg.share_modes.locks().clone();
        let mut t = locks.table();
        let (breaks, _) = t.break_for(
            node,
            &h,
            Share { access: duet_locks::share::WRITE, deny: 0 },
            Conflict::Write,
            now_ns,
        );
        self.outbox.extend(breaks.into_iter().map(Event::Recall));
        // The locker's own level II goes too while other opens of the file
        // exist (what Windows does: smbtorture smb2.oplock.brl1 / brl3; a
        // lone open keeps its oplock, brl2).
        let own = self.opens.get(&file).filter(|o| o.oplock == oplock_level::II).and_then(|o| o.grant);
        if let Some(g) = own.filter(|_| t.other_opens(node, &h) > 0) {
            t.release_grant(g);
            self.outbox.push(Event::Recall(Break { grant: g, holder: h, from: Level::R, to: Level::NONE, ack_needed: false }));
        }
    }

    /// A rename or delete through open `file` (MS-FSA 2.1.5.14.2,
    /// 2.1.5.14.3): the other holders' leases lose handle caching.
    /// Returns the file and when the breaks to wait for run out, if any.
    pub(super) fn break_for_namespace(&mut self, file: u64, now_ns: i64) -> Option<(NodeId, Option<i64>)> {
        let node = self.opens.get(&file).map(|o| o.node)?;
        let locks = self.cfg.share_modes.locks().clone();
        let (breaks, wait) = locks.table().break_for(
            node,
            &holder((self.conn_key, file)),
            Share { access: 0, deny: 0 },
            Conflict::Namespace,
            now_ns,
        );
        self.outbox.extend(breaks.into_iter().map(Event::Recall));
        Some((node, wait))
    }

    /// Grants open `file` of `node` the oplock it asked for, as far as
    /// the other opens allow; returns the OplockLevel to answer.
    pub(super) fn grant_oplock(&mut self, node: NodeId, file: u64, requested: u8, now_ns: i64) -> u8 {
        let Some(want) = wanted(requested) else { return oplock_level::NONE };
        let h = holder((self.conn_key, file));
        let locks = self.cfg.share_modes.locks().clone();
        let mut t = locks.table();
        let mut got = t.request_open_grant(node, h, want, now_ns);
        // Read and handle caching is no oplock level: level II is.
        if let Some((g, l)) = got {
            if oplock_of(l) == oplock_level::II && l != Level::R {
                t.release_grant(g);
                got = t.request_open_grant(node, h, Level::R, now_ns);
            }
        }
        drop(t);
        let level = got.map_or(oplock_level::NONE, |(_, l)| oplock_of(l));
        if let Some(o) = self.opens.get_mut(&file) {
            o.grant = got.filter(|_| level != oplock_level::NONE).map(|(g, _)| g);
            o.oplock = level;
            o.breaking_to = None;
        }
        level
    }

    /// A break of one of this connection's oplocks, decided by another
    /// connection (or this one): the OPLOCK_BREAK Notification (MS-SMB2
    /// 3.3.4.6: MessageId 0xFFFFFFFFFFFFFFFF, no session or tree, not
    /// signed; encrypted when the open's session encrypts). A break with
    /// `from` and `to` both none is a revocation (the break timed out): the
    /// open forgets its oplock and nothing is sent.
    pub fn on_recall(&mut self, b: Break, now_ns: i64) -> Vec<Event> {
        let _ = now_ns;
        if self.is_closed() {
            return Vec::new();
        }
        if b.holder.owner & super::state::LEASE_OWNER != 0 && b.holder.owner != OPENER {
            return self.on_lease_recall(b);
        }
        let id = b.holder.owner;
        let Some(o) = self.opens.get_mut(&id) else { return Vec::new() };
        if o.grant != Some(b.grant) {
            return Vec::new();
        }
        if b.from.is_none() && b.to.is_none() {
            o.grant = None;
            o.oplock = oplock_level::NONE;
            o.breaking_to = None;
            return Vec::new();
        }
        let new = if b.to.has(Level::R) { oplock_level::II } else { oplock_level::NONE };
        if b.ack_needed {
            o.breaking_to = Some(new);
        } else {
            o.oplock = new;
            o.breaking_to = None;
            if new == oplock_level::NONE {
                o.grant = None;
            }
        }
        let session = o.session_id;
        let body = OplockBreak { oplock_level: new, file_id: FileId { persistent: id, volatile: id } };
        self.break_message(session, |m| body.encode(m))
    }

    /// A server-to-client break (OPLOCK_BREAK command; MS-SMB2 3.3.4.6 and
    /// 3.3.4.7): MessageId 0xFFFFFFFFFFFFFFFF, SessionId 0, the body
    /// `encode` writes; sealed when the holder's session encrypts.
    pub(super) fn break_message(&mut self, session: u64, encode: impl FnOnce(&mut Vec<u8>)) -> Vec<Event> {
        let hdr = Header {
            credit_charge: 0,
            status: NtStatus::SUCCESS,
            command: Command::OPLOCK_BREAK,
            credit: 0,
            flags: HeaderFlags(HeaderFlags::SERVER_TO_REDIR),
            next_command: 0,
            message_id: u64::MAX,
            ids: HeaderIds::Sync { process_id: 0, tree_id: 0 },
            session_id: 0,
            signature: [0; 16],
        };
        let mut msg = Vec::with_capacity(108);
        hdr.encode(&mut msg);
        encode(&mut msg);
        let key = self
            .sessions
            .get(&session)
            .filter(|s| s.encrypt)
            .and_then(|s| s.keys.as_ref())
            .and_then(|k| k.encrypt.clone());
        if let Some(key) = key {
            match self.seal(session, &key, &msg) {
                Some(f) => msg = f,
                None => return Vec::new(),
            }
        }
        transport(msg).map(Event::Send).into_iter().collect()
    }

    /// OPLOCK_BREAK Acknowledgment (MS-SMB2 3.3.5.22.1): the holder keeps
    /// level II or none, as the break allowed. An acknowledgment of an
    /// open whose oplock is not breaking, or one that keeps more than the
    /// break left, is STATUS_INVALID_OPLOCK_PROTOCOL (the oplock goes in
    /// the second case).
    pub(super) fn oplock_ack(&mut self, hdr: &Header, ack: &OplockBreak) -> Plan {
        let id = ack.file_id.volatile;
        let locks = self.cfg.share_modes.locks().clone();
        let Some(o) = self
            .opens
            .get_mut(&id)
            .filter(|o| ack.file_id.persistent == id && o.session_id == hdr.session_id)
        else {
            return done(NtStatus::FILE_CLOSED);
        };
        let Some(to) = o.breaking_to else {
            return done(NtStatus::INVALID_OPLOCK_PROTOCOL);
        };
        let level = ack.oplock_level;
        let grant = o.grant;
        o.breaking_to = None;
        if !(level == oplock_level::NONE || (level == oplock_level::II && to == oplock_level::II)) {
            o.oplock = oplock_level::NONE;
            o.grant = None;
            if let Some(g) = grant {
                locks.table().release_grant(g);
            }
            return done(NtStatus::INVALID_OPLOCK_PROTOCOL);
        }
        o.oplock = level;
        if level == oplock_level::NONE {
            o.grant = None;
        }
        if let Some(g) = grant {
            let keep = if level == oplock_level::II { Level::R } else { Level::NONE };
            // Revoked meanwhile (the timeout passed): nothing to lower.
            let _ = locks.table().ack(g, keep);
        }
        ok(Response::OplockBreak(OplockBreakMessage::Oplock(OplockBreak {
            oplock_level: level,
            file_id: ack.file_id,
        })))
    }

    /// CREATEs waiting for oplock breaks: the driver calls
    /// [`Connection::poll_opens`] now and then while there are any.
    pub fn parked_opens(&self) -> usize {
        self.parked.len()
    }

    /// Runs again the CREATEs whose breaks are over: acknowledged, their
    /// holders' opens closed, or revoked by the timeout (this call revokes
    /// what is overdue, and returns the revocations to route to their
    /// holders first).
    pub fn poll_opens(&mut self, now_ns: i64, dir: &dyn Directory) -> Vec<Event> {
        let mut out = Vec::new();
        if self.parked.is_empty() {
            return out;
        }
        let opener = holder((self.conn_key, OPENER));
        let locks = self.cfg.share_modes.locks().clone();
        let ready: Vec<u64> = {
            let mut t = locks.table();
            if t.poll_timeout().is_some_and(|d| d <= now_ns) {
                for (grant, h) in t.handle_timeout(now_ns).revoked {
                    out.push(Event::Recall(Break {
                        grant,
                        holder: h,
                        from: Level::NONE,
                        to: Level::NONE,
                        ack_needed: false,
                    }));
                }
            }
            let mut ready: Vec<u64> = self
                .parked
                .iter()
                .filter(|(_, p)| p.nodes.iter().all(|n| t.break_deadline(*n, &opener).is_none()))
                .filter(|(_, p)| p.after.iter().all(|k| !self.side_runs.contains(k)))
                .filter(|(_, p)| p.gone.is_none_or(|(k, until)| until <= now_ns || !self.cfg.share_modes.has_open(k)))
                .filter(|(_, p)| {
                    p.removal.as_ref().is_none_or(|(k, until)| *until <= now_ns || !self.cfg.share_modes.removing_at(k))
                })
                .map(|(k, _)| *k)
                .collect();
            ready.sort();
            ready
        };
        for async_id in ready {
            let Some(p) = self.parked.remove(&async_id) else { continue };
            self.resuming = Some(async_id);
            // It answers through the channel it came through, if any.
            self.via = p.channel.map(|channel| super::state::Via { channel, grants: Vec::new() });
            out.extend(self.process(&p.frame, p.encrypted_by, now_ns, dir));
            self.via = None;
            self.resuming = None;
        }
        out
    }
}
