//! What NFSv3 and NFSv4 operations share when they contradict what SMB
//! clients cache (issue 13): the kind of change an operation makes, the
//! question to the daemon's lock table ([`duet_locks::Table::break_for`])
//! about one node, and the nodes a hidden lookup found. The breaks go to
//! `NfsServer::recalls` and leave as [`Event::Recall`](super::Event::Recall)
//! with the call's other events; the caller answers "try again"
//! (NFS4ERR_DELAY, RFC 8881 15.1.1.3; NFS3ERR_JUKEBOX, RFC 1813 2.6) while
//! a break the holder must acknowledge is outstanding. Nothing waits.

use duet_fs::{NodeId, OpResult};
use duet_locks::{Break, Conflict, Holder, Level, Share};

use super::NfsServer;

/// What an operation would do to the file it names.
#[derive(Clone, Copy, Debug)]
pub(super) struct BreakKind {
    pub share: Share,
    pub why: Conflict,
}

impl BreakKind {
    /// An NFSv4 OPEN with these share_access / share_deny bits (RFC 8881
    /// 18.16.3): for reading it takes write caching, for writing
    /// everything (RFC 8881 10.4.1 as the table's `Conflict::Open` reads
    /// it), and a deny the holder's own opens refuse takes handle caching.
    pub fn open(access: u32, deny: u32) -> BreakKind {
        BreakKind { share: Share::nfs(access, deny), why: Conflict::Open }
    }

    /// A REMOVE or RENAME of the file (MS-FSA 2.1.5.14.2 / 2.1.5.14.3 as
    /// SMB's own rename and delete see it): other leases' handle caching.
    pub fn namespace() -> BreakKind {
        BreakKind { share: Share { access: 0, deny: 0 }, why: Conflict::Namespace }
    }

    /// Nothing to break (a lookup made only to see whether the name is
    /// delete-pending): no access, no deny, nothing contradicted.
    pub fn none() -> BreakKind {
        BreakKind { share: Share { access: 0, deny: 0 }, why: Conflict::Open }
    }

    /// A WRITE or a change of the size (MS-FSA 2.1.5.4, as an SMB write
    /// breaks level II): read and write caching of others go.
    pub fn write() -> BreakKind {
        BreakKind { share: Share { access: duet_locks::share::WRITE, deny: 0 }, why: Conflict::Write }
    }
}

/// Asks the table about `node` for `opener`: the breaks go to
/// `srv.recalls`; true when the operation must wait for acknowledgements.
/// Grants whose break ran out are revoked first (their holders are told),
/// so a holder that never acknowledges holds the NFS client up for the
/// break timeout at most. Without grants nothing happens.
pub(super) fn break_node(srv: &mut NfsServer, node: NodeId, opener: &Holder, kind: BreakKind, now: i64) -> bool {
    let locks = srv.cfg.locks.clone();
    let mut t = locks.table();
    if !t.has_grants() {
        return false;
    }
    for (grant, holder) in t.revoke_overdue(now) {
        srv.recalls.push(Break { grant, holder, from: Level::NONE, to: Level::NONE, ack_needed: false });
    }
    let (breaks, wait) = t.break_for(node, opener, kind.share, kind.why, now);
    srv.recalls.extend(breaks);
    wait.is_some()
}

/// Whether any grant exists (only then does an operation that names its
/// file by directory and name need a hidden lookup first).
pub(super) fn any_grants(srv: &NfsServer) -> bool {
    srv.cfg.locks.table().has_grants()
}

/// Breaks for each node the hidden lookups at `ops` of a batch found
/// (lookups that failed name nothing to break: the operation then
/// reports its own error); true when the operation must wait.
pub(super) fn break_found(
    srv: &mut NfsServer,
    results: &[OpResult],
    ops: &[usize],
    opener: &Holder,
    kind: BreakKind,
    now: i64,
) -> bool {
    let mut wait = false;
    for i in ops {
        let Some(node) = results.get(*i).and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs()).map(|a| a.id) else {
            continue;
        };
        wait |= break_node(srv, node, opener, kind, now);
    }
    wait
}

/// Whether any file is delete-pending (an SMB client's delete-on-close
/// open closed while other opens remain, MS-FSA 2.1.5.4): only then does
/// an NFS open or create by name need a lookup first.
pub(super) fn any_delete_pending(srv: &NfsServer) -> bool {
    srv.cfg.locks.table().any_delete_pending()
}

/// Whether `node` is delete-pending: a new NFS open of it (NFSv4 OPEN,
/// NFSv3 CREATE of its name) is refused as Windows refuses a new opener
/// (STATUS_DELETE_PENDING, which Win32 reports as ERROR_ACCESS_DENIED):
/// NFS4ERR_ACCESS / NFS3ERR_ACCES (docs/locks.md).
pub(super) fn delete_pending(srv: &NfsServer, node: NodeId) -> bool {
    srv.cfg.locks.table().is_delete_pending(node)
}

/// Whether a node the hidden lookups at `ops` found is delete-pending.
pub(super) fn delete_pending_found(srv: &NfsServer, results: &[OpResult], ops: &[usize]) -> bool {
    ops.iter().any(|i| {
        results
            .get(*i)
            .and_then(|r| r.as_ref().ok())
            .and_then(|o| o.attrs())
            .is_some_and(|a| delete_pending(srv, a.id))
    })
}
