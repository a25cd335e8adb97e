//! Byte-range LOCK (MS-SMB2 3.3.5.14): locks in the daemon's lock table,
//! SMB's mandatory checks on I/O, lock sequences of resilient and durable
//! opens, blocking locks answered STATUS_PENDING and completed when
//! granted.

use duet_fs::NodeId;

use super::Event;
use crate::smb2::header::{Header, HeaderIds, HEADER_SIZE};
use crate::smb2::lock::{LockElement, LockRequest, LockResponse};
use duet_locks::{LockError, Range};
use crate::smb2::message::Response;
use crate::smb2::status::NtStatus;
use super::plan::*;
use super::state::*;
use super::conn::Connection;

impl Connection {
    /// The lock-table holder of one of this connection's opens.
    pub(super) fn lock_holder(&self, file: u64) -> duet_locks::Holder {
        super::sharemode::holder((self.conn_key, file))
    }

    /// Applies the elements of a LOCK request to the daemon's lock table
    /// (MS-SMB2 3.3.5.14). Unlocks (3.3.5.14.1) go one by one and stop at
    /// the first that fails; locks (3.3.5.14.2) are all granted or, at the
    /// first that is not, the ones taken before it are released again.
    /// `wait`: queue a single blocking element instead of failing it
    /// (Ok(Some) is the queued request).
    pub(super) fn apply_locks(
        &mut self,
        file: u64,
        elements: &[LockElement],
        wait: bool,
    ) -> Result<Option<duet_locks::WaiterId>, NtStatus> {
        let Some(o) = self.opens.get(&file) else {
            return Err(NtStatus::FILE_CLOSED);
        };
        // MS-FSA 2.1.5.8 / 2.1.5.9: no byte-range locks on directories.
        if o.is_dir {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        let node = o.node;
        let h = self.lock_holder(file);
        let locks = self.cfg.share_modes.locks().clone();
        let mut t = locks.table();
        if elements[0].flags == LockElement::UNLOCK {
            for e in elements {
                if e.flags != LockElement::UNLOCK {
                    return Err(NtStatus::INVALID_PARAMETER);
                }
                let r = Range::smb(e.offset, e.length).ok_or(NtStatus::INVALID_LOCK_RANGE)?;
                if t.unlock_exact(node, &h, &r).is_err() {
                    return Err(NtStatus::RANGE_NOT_LOCKED);
                }
            }
            return Ok(None);
        }
        let mut added: Vec<Range> = Vec::new();
        let mut status = NtStatus::SUCCESS;
        let mut queued = None;
        for e in elements {
            // A lock that may wait stands alone (MS-SMB2 3.3.5.14.2): in a
            // request of several, every element must fail immediately.
            if elements.len() > 1 && e.flags & LockElement::FAIL_IMMEDIATELY == 0 {
                status = NtStatus::INVALID_PARAMETER;
                break;
            }
            let exclusive = match e.flags & !LockElement::FAIL_IMMEDIATELY {
                LockElement::SHARED_LOCK => false,
                LockElement::EXCLUSIVE_LOCK => true,
                _ => {
                    status = NtStatus::INVALID_PARAMETER;
                    break;
                }
            };
            let Some(r) = Range::smb(e.offset, e.length) else {
                status = NtStatus::INVALID_LOCK_RANGE;
                break;
            };
            let blocking = wait && elements.len() == 1 && e.flags & LockElement::FAIL_IMMEDIATELY == 0;
            let got = if blocking {
                t.lock_or_wait(node, h, r, exclusive, None, file).map(|w| {
                    queued = w;
                })
            } else {
                t.lock(node, h, r, exclusive)
            };
            match got {
                Ok(()) => added.push(r),
                Err(LockError::Conflict(_)) => {
                    status = NtStatus::LOCK_NOT_GRANTED;
                    break;
                }
                Err(LockError::Limit) => {
                    status = NtStatus::INSUFFICIENT_RESOURCES;
                    break;
                }
            }
        }
        if status != NtStatus::SUCCESS {
            for r in added.iter().rev() {
                let _ = t.unlock_exact(node, &h, r);
            }
            return Err(status);
        }
        Ok(queued)
    }

    /// Whether another open's lock forbids this access (MS-FSA 2.1.4.10),
    /// by any client of either protocol.
    pub(super) fn lock_conflict(
        &self,
        file: u64,
        node: NodeId,
        offset: u64,
        length: u64,
        write: bool,
    ) -> bool {
        let h = self.lock_holder(file);
        self.cfg
            .share_modes
            .locks()
            .table()
            .check_io(node, &h, &Range::io(offset, length), write)
            .is_some()
    }

    pub(super) fn plan_lock(&mut self, fp: &mut FramePlan, hdr: &Header, t: Target, req: &LockRequest<'_>) -> Plan {
        let elements: Vec<LockElement> = req.locks().collect();
        if elements.is_empty() {
            return done(NtStatus::INVALID_PARAMETER);
        }
        // A lock may wait only when it is the frame's one request: an
        // interim answer inside a compound is not what clients expect.
        let alone = fp.slots.is_empty() && hdr.next_command == 0 && !hdr.flags.is_async();
        if let (Target::Table(id), false) = (t, elements[0].flags == LockElement::UNLOCK) {
            // Other opens' read caching goes (MS-FSA 2.1.5.7 with 2.1.4.12,
            // BYTE_RANGE_LOCK); the lock does not wait for it.
            self.break_for_lock(id, fp.now_ns);
        }
        // Lock sequence verification (MS-SMB2 3.3.5.14) on resilient and
        // durable opens, as Windows does (note <314>), and on every open
        // once multichannel is offered: a request whose
        // LockSequenceNumber the open's entry at LockSequenceIndex (1 to
        // 64) already holds is a replay, answered success without being
        // applied again; otherwise the entry is invalid until the request
        // succeeds.
        let seq = match t {
            Target::Table(id) => self.lock_seq_slot(id, req.lock_sequence),
            Target::Pending(_) => None,
        };
        if let (Target::Table(id), Some((slot, number))) = (t, seq) {
            let o = self.opens.get_mut(&id).expect("lock_seq_slot found the open");
            if o.lock_seq[slot] == number {
                return ok(Response::Lock(LockResponse));
            }
            o.lock_seq[slot] = NO_LOCK_SEQ;
        }
        match t {
            Target::Table(id) => match self.apply_locks(id, &elements, alone) {
                Ok(None) => {
                    if let Some((slot, number)) = seq {
                        if let Some(o) = self.opens.get_mut(&id) {
                            o.lock_seq[slot] = number;
                        }
                    }
                    ok(Response::Lock(LockResponse))
                }
                Ok(Some(waiter)) => {
                    let async_id = self.new_async_id();
                    let mut h = *hdr;
                    h.ids = HeaderIds::Async { async_id };
                    self.last_async = Some(AsyncLock { waiter, hdr: h, sign: None, encrypt: None, channel: None });
                    done(NtStatus::PENDING)
                }
                Err(s) => done(s),
            },
            Target::Pending(_) => Plan::Fs(FsPlan::Lock {
                target: t,
                elements,
            }),
        }
    }

    /// The entry of open `id`'s LockSequenceArray a LOCK with
    /// `lock_sequence` uses, and its LockSequenceNumber: None when the
    /// open is neither resilient nor durable nor on a 3.x connection
    /// offering multichannel, or the index is not 1 to 64 (MS-SMB2
    /// 2.2.26, 3.3.5.14).
    pub(super) fn lock_seq_slot(&self, id: u64, lock_sequence: u32) -> Option<(usize, u8)> {
        let o = self.opens.get(&id)?;
        // Every open of a 3.x connection offering multichannel, whose
        // LOCKs may be replayed on another channel (3.3.5.14).
        let multichannel = self
            .negotiated
            .as_ref()
            .is_some_and(|n| n.dialect >= crate::smb2::negotiate::dialect::SMB3_0 && n.server_caps & crate::smb2::negotiate::capabilities::MULTI_CHANNEL != 0);
        if o.resilient_ms.is_none() && o.durable.is_none() && !multichannel {
            return None;
        }
        if self.dialect().unwrap_or(0) < crate::smb2::negotiate::dialect::SMB2_1 {
            return None;
        }
        let index = (lock_sequence >> 4) as usize;
        let number = (lock_sequence & 0xF) as u8;
        (1..=64).contains(&index).then(|| (index - 1, number))
    }

    /// Whether blocking LOCKs of this connection wait in the lock table:
    /// the driver then calls [`Connection::poll_locks`] now and then.
    pub fn waiting_locks(&self) -> usize {
        self.async_locks.len()
    }

    /// Completes the blocking LOCKs whose fate the lock table decided
    /// (granted when another holder let go; dropped when their open
    /// closed: STATUS_RANGE_NOT_LOCKED).
    pub fn poll_locks(&mut self, now_ns: i64) -> Vec<Event> {
        let _ = now_ns;
        if self.async_locks.is_empty() {
            return Vec::new();
        }
        let outcomes = {
            let mut t = self.cfg.share_modes.locks().table();
            // Looking changes nothing (a mutable use of the table wakes
            // every waiting connection: `LockManager::on_change`).
            if !t.has_outcomes(duet_locks::Protocol::Smb, self.conn_key) {
                return Vec::new();
            }
            t.take_outcomes(duet_locks::Protocol::Smb, self.conn_key)
        };
        let mut out = Vec::new();
        for o in outcomes {
            let Some(async_id) = self
                .async_locks
                .iter()
                .find(|(_, a)| a.waiter == o.id())
                .map(|(k, _)| *k)
            else {
                continue;
            };
            let Some(a) = self.async_locks.remove(&async_id) else { continue };
            let (status, body) = match o {
                duet_locks::Outcome::Granted { .. } => (NtStatus::SUCCESS, lock_body()),
                duet_locks::Outcome::Expired { .. } => (NtStatus::LOCK_NOT_GRANTED, error_body()),
                duet_locks::Outcome::Dropped { .. } => (NtStatus::RANGE_NOT_LOCKED, error_body()),
            };
            out.extend(self.send_async(&a, status, &body));
        }
        out
    }
}

/// The body of a LOCK response (MS-SMB2 2.2.27).
fn lock_body() -> Vec<u8> {
    let mut out = vec![0u8; HEADER_SIZE];
    Response::Lock(LockResponse).encode(&mut out);
    out.split_off(HEADER_SIZE)
}
