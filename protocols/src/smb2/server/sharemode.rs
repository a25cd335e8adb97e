//! Share modes: which opens of a file may coexist (MS-FSA 2.1.5.1.2, the
//! share access check), kept in the daemon's one lock table
//! ([`duet_locks::LockManager`]) so that SMB opens on every executor and
//! NFSv4 opens (share_access / share_deny, RFC 8881 9.7) see each other.
//! One `Arc` in [`super::ServerConfig`] is shared by every connection.
//!
//! An SMB open is the lock table's holder (SMB, connection key, volatile
//! file id). What is SMB's alone stays here: each open's share-relative
//! path (lower-cased, prefixed by the share root's node id), so that a
//! truncating CREATE can be checked before the batch that would truncate
//! runs, and a directory with open files below it can refuse to be
//! renamed. Plain memory behind mutexes (this one, then the table's): no
//! I/O, no clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use duet_fs::NodeId;
use duet_locks::{Holder, LockManager, Protocol, Share};

/// The share access bits of CREATE (MS-SMB2 2.2.13 ShareAccess).
pub mod share {
    pub const READ: u32 = 0x1;
    pub const WRITE: u32 = 0x2;
    pub const DELETE: u32 = 0x4;
}

#[derive(Debug)]
pub struct ShareModes {
    locks: Arc<LockManager>,
    /// (connection key, file id) -> (node, path key).
    paths: Mutex<HashMap<(u64, u64), (NodeId, String)>>,
    /// Every client's leases (`lease.rs`); taken before the lock table.
    leases: Mutex<super::lease::Leases>,
}

impl Default for ShareModes {
    fn default() -> Self {
        ShareModes::new()
    }
}

/// The lock-table holder of an SMB open.
pub fn holder(key: (u64, u64)) -> Holder {
    Holder::new(Protocol::Smb, key.0, key.1)
}

/// The table key of a path: the share root and the lower-cased path.
pub fn path_key(root: NodeId, path: &str) -> String {
    format!("{root}:{}", path.to_lowercase())
}

impl ShareModes {
    /// A private lock table (tests; the appliance shares one).
    pub fn new() -> ShareModes {
        ShareModes::with_locks(Arc::new(LockManager::default()))
    }

    pub fn with_locks(locks: Arc<LockManager>) -> ShareModes {
        ShareModes { locks, paths: Mutex::new(HashMap::new()), leases: Mutex::new(Default::default()) }
    }

    /// The lock table (byte-range locks go there too).
    pub fn locks(&self) -> &Arc<LockManager> {
        &self.locks
    }

    /// The lease table of every client (taken before the lock table).
    pub(super) fn leases(&self) -> std::sync::MutexGuard<'_, super::lease::Leases> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn paths(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u64), (NodeId, String)>> {
        // Every update is one insert, remove or field write: a poisoned
        // lock is still consistent.
        self.paths.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an open of `node`, or says it conflicts (SHARING_VIOLATION;
    /// also when the lock table is full).
    pub fn acquire(
        &self,
        node: NodeId,
        key: (u64, u64),
        access: u32,
        share_access: u32,
        path: String,
    ) -> bool {
        let mut paths = self.paths();
        if self.locks.table().open(node, holder(key), Share::smb(access, share_access)).is_err() {
            return false;
        }
        paths.insert(key, (node, path));
        true
    }

    /// Whether an open of the file at `path` with `access`/`share` would
    /// conflict with the opens there now (checked before a truncating
    /// CREATE runs).
    pub fn conflicts_at(&self, path: &str, access: u32, share_access: u32) -> bool {
        let paths = self.paths();
        let mut nodes: Vec<NodeId> = paths.values().filter(|(_, p)| p == path).map(|(n, _)| *n).collect();
        nodes.dedup();
        let t = self.locks.table();
        nodes.into_iter().any(|n| t.share_conflict(n, None, Share::smb(access, share_access)))
    }

    /// Whether an open of `node` with `access`/`share` would conflict with
    /// the opens of it now (by any protocol).
    pub fn conflicts(&self, node: NodeId, access: u32, share_access: u32) -> bool {
        self.locks.table().share_conflict(node, None, Share::smb(access, share_access))
    }

    /// The files SMB opens at `path` (a path key) are of now.
    pub fn nodes_at(&self, path: &str) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self.paths().values().filter(|(_, p)| p == path).map(|(n, _)| *n).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// Whether a file below the directory at `path` is open by an SMB
    /// client.
    pub fn open_below(&self, path: &str) -> bool {
        let prefix = format!("{path}\\");
        self.paths().values().any(|(_, p)| p.starts_with(&prefix))
    }

    /// Other opens of `node` than `key`, by anyone (NFS opens included).
    pub fn others(&self, node: NodeId, key: (u64, u64)) -> usize {
        self.locks.table().other_opens(node, &holder(key))
    }

    /// The file at `node` has moved to `path`; its leases follow it
    /// (Lease.Filename, MS-SMB2 3.3.1.12).
    pub fn renamed(&self, node: NodeId, path: String) {
        for (n, p) in self.paths().values_mut() {
            if *n == node {
                *p = path.clone();
            }
        }
        self.leases().renamed(node, &path);
    }

    /// An open is closed: its share reservation, byte-range locks and
    /// queued lock requests go. Returns what that decided for others
    /// (their queued locks now granted).
    pub fn release(&self, node: NodeId, key: (u64, u64)) -> Vec<duet_locks::Outcome> {
        self.paths().remove(&key);
        self.locks.table().release(node, &holder(key))
    }

    /// Drops every open, lock and queued lock of one connection.
    pub fn release_connection(&self, conn: u64) {
        self.paths().retain(|k, _| k.0 != conn);
        self.leases().forget_connection(conn);
        self.locks.table().release_client(Protocol::Smb, conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::smb2::server::info::access;

    const R: u32 = access::FILE_READ_DATA;
    const W: u32 = access::FILE_WRITE_DATA;
    const D: u32 = access::DELETE;

    #[test]
    fn share_check_follows_both_sides() {
        let t = ShareModes::new();
        assert!(t.acquire(5, (1, 1), R, share::READ, "1:d\\a".into()));
        // Reading is shared; writing is not.
        assert!(t.acquire(5, (1, 2), R, share::READ | share::WRITE, "1:d\\a".into()));
        assert!(!t.acquire(5, (2, 1), W, share::READ | share::WRITE, "1:d\\a".into()));
        // The new open must share what the old ones hold.
        assert!(!t.acquire(5, (2, 2), R, share::WRITE, "1:d\\a".into()));
        // Attribute-only opens never conflict.
        assert!(t.acquire(5, (2, 3), access::FILE_READ_ATTRIBUTES, 0, "1:d\\a".into()));
        assert!(!t.acquire(5, (2, 4), D, share::READ | share::WRITE, "1:d\\a".into()));
        assert!(t.conflicts_at("1:d\\a", W, 7));
        assert!(!t.conflicts_at("1:d\\b", W, 0));
        t.release(5, (1, 1));
        t.release(5, (1, 2));
        assert!(t.acquire(5, (2, 5), W | D, 0, "1:d\\a".into()));
        assert!(t.open_below("1:d"));
        assert_eq!(t.others(5, (2, 5)), 1);
        t.release_connection(2);
        assert!(!t.open_below("1:d"));
    }
}
