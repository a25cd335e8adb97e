//! NFSv4 operations that contradict what SMB clients cache (issue 13):
//! an OPEN, a REMOVE or RENAME of the file, a WRITE or a SETATTR of its
//! size ask the daemon's lock table ([`duet_locks::Table::break_for`])
//! which SMB leases and oplocks they break, hand the breaks to the driver
//! as [`Event::Recall`](super::super::Event::Recall) (routed to the
//! holder's SMB connection, which sends the LEASE_BREAK or OPLOCK_BREAK
//! notification, MS-SMB2 3.3.4.6 / 3.3.4.7), and answer NFS4ERR_DELAY
//! (RFC 8881 15.1.1.3) while a break the holder must acknowledge is
//! outstanding: the client retries, and the retry goes on once the holder
//! flushed and acknowledged or the break timeout revoked its grant. The
//! reply is never held: nothing waits on a thread.
//!
//! OPEN, REMOVE and RENAME name the file by its directory and name, and
//! the node is known only after a lookup: when any grant exists, such an
//! operation is first a *gate*, a hidden lookup that ends its batch
//! ([`Flow::Gate`]); the gate's step asks the table once the node is known
//! and either answers DELAY for the operation or lets it be translated
//! again, this time past the gate. Without grants (no SMB client caches
//! anything) nothing changes. WRITE and SETATTR break without waiting (as
//! an SMB WRITE breaks level II: MS-SMB2 3.3.4.6, MS-FSA 2.1.5.4).

use duet_fs::{Batch, ObjRef, Op, OpResult};
use duet_locks::{Holder, Protocol};

use super::super::breaks::{self as shared, BreakKind};
use super::{Compound, Flow, NfsServer, Step};
use crate::nfs::nfs4::Nfsstat4;

/// What a gated operation would do to the file it names (shared with
/// NFSv3: `server::breaks`).
pub(super) type GateKind = BreakKind;

/// A gate's step: the hidden lookups (batch op indices) whose nodes the
/// operation `opnum` affects.
pub(super) struct GateStep {
    pub opnum: u32,
    pub ops: Vec<usize>,
    pub kind: GateKind,
    pub client: u64,
}

/// The lock-table holder an NFSv4 client's operations break as (no grant
/// is ever its own: SMB grants are held by SMB holders).
fn opener(client: u64) -> Holder {
    Holder::new(Protocol::Nfs4, client, 0)
}

/// Whether the operation at `c.next_op` must pass a gate: a grant of
/// someone else than this client exists (its own delegations never break
/// for it) and it has not passed one yet.
pub(super) fn gate_needed(srv: &NfsServer, c: &Compound) -> bool {
    c.gated != Some(c.next_op)
        && srv.cfg.locks.table().has_grants_of_others(Protocol::Nfs4, c.clientid.unwrap_or(0))
}

/// As [`gate_needed`] for an OPEN, which also passes a gate while any
/// file is delete-pending: the gate refuses a new open of one before
/// anything (a truncation) happens.
pub(super) fn open_gate_needed(srv: &NfsServer, c: &Compound) -> bool {
    gate_needed(srv, c) || (c.gated != Some(c.next_op) && shared::any_delete_pending(srv))
}

/// Asks the table about `node` for NFSv4 client `client`: true when the
/// operation must wait ([`shared::break_node`]).
pub(super) fn break_node(srv: &mut NfsServer, node: duet_fs::NodeId, client: u64, kind: GateKind, now: i64) -> bool {
    shared::break_node(srv, node, &opener(client), kind, now)
}

/// The gate of an operation on the files `targets` name (each a directory
/// and a name to look up, or an object): a known node is asked at once
/// (Err(DELAY) when it must wait); otherwise the lookups go into the batch
/// with a [`GateStep`] and the batch ends there.
pub(super) fn gate(
    srv: &mut NfsServer,
    c: &mut Compound,
    b: &mut Batch,
    opnum: u32,
    targets: Vec<Op>,
    kind: GateKind,
    now: i64,
) -> Result<Option<Flow>, Nfsstat4> {
    let client = c.clientid.unwrap_or(0);
    let mut ops = Vec::new();
    for t in targets {
        if let Op::GetAttr { obj: ObjRef::Id(node) } = t {
            if opnum == crate::nfs::nfs4::opnum::OPEN && shared::delete_pending(srv, node) {
                return Err(Nfsstat4::ACCESS);
            }
            if break_node(srv, node, client, kind, now) {
                return Err(Nfsstat4::DELAY);
            }
            continue;
        }
        b.push(t);
        ops.push(b.ops.len() - 1);
    }
    c.gated = Some(c.next_op);
    if ops.is_empty() {
        return Ok(None);
    }
    c.steps.push(Step::Gate(Box::new(GateStep { opnum, ops, kind, client })));
    Ok(Some(Flow::Gate))
}

/// After the gate's batch: Ok when the operation may go on (the lookups
/// that failed name nothing to break; the operation itself then reports
/// its own error), Err(DELAY) while breaks are outstanding; for an OPEN
/// of a delete-pending file Err(ACCESS) (docs/locks.md, "Delete-on-close
/// and NFS").
pub(super) fn finish_gate(srv: &mut NfsServer, g: &GateStep, results: &[OpResult], now: i64) -> Result<(), Nfsstat4> {
    if g.opnum == crate::nfs::nfs4::opnum::OPEN && shared::delete_pending_found(srv, results, &g.ops) {
        return Err(Nfsstat4::ACCESS);
    }
    let wait = shared::break_found(srv, results, &g.ops, &opener(g.client), g.kind, now);
    if wait {
        Err(Nfsstat4::DELAY)
    } else {
        Ok(())
    }
}

/// A WRITE, a SETATTR of the size or a LOCK of a known node: SMB read
/// caching of others goes (`Conflict::Write`, as an SMB write breaks level II), sent
/// without waiting.
pub(super) fn break_for_write(srv: &mut NfsServer, c: &Compound, obj: ObjRef, now: i64) {
    if let ObjRef::Id(node) = obj {
        break_node(srv, node, c.clientid.unwrap_or(0), GateKind::write(), now);
    }
}

/// After a WRITE's or size change's break: NFS4ERR_DELAY while another
/// client's delegation of the file is not returned or revoked (RFC 8881
/// 10.4.4: the server recalls it before the conflicting change).
pub(super) fn deleg_wait(srv: &NfsServer, c: &Compound, obj: ObjRef) -> Result<(), Nfsstat4> {
    match obj {
        ObjRef::Id(node) if srv.state.deleg_of_other(node, c.clientid.unwrap_or(0)) => Err(Nfsstat4::DELAY),
        _ => Ok(()),
    }
}
