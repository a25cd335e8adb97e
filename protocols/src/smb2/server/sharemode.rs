//! Share modes: which opens of a file may coexist (MS-FSA 2.1.5.1.2, the
//! share access check). The table is shared by every SMB connection of the
//! daemon (one `Arc` in [`super::ServerConfig`]), so a client on one
//! executor sees the opens of a client on another.
//!
//! It is plain memory behind a mutex: no I/O, no clock. Opens are keyed by
//! (connection key, volatile file id) and indexed by node; each also keeps
//! its share-relative path (lower-cased, prefixed by the share root's node
//! id) so that a truncating CREATE can be checked before the batch that
//! would truncate runs, and a directory with open files below it can refuse
//! to be renamed.

use std::collections::HashMap;
use std::sync::Mutex;

use duet_fs::NodeId;

use super::info::access;

/// The share access bits of CREATE (MS-SMB2 2.2.13 ShareAccess).
pub mod share {
    pub const READ: u32 = 0x1;
    pub const WRITE: u32 = 0x2;
    pub const DELETE: u32 = 0x4;
}

/// Access bits that take part in the share check (MS-FSA 2.1.5.1.2): an
/// open with none of them neither conflicts nor is conflicted with.
const DATA_ACCESS: u32 = access::FILE_READ_DATA
    | access::FILE_WRITE_DATA
    | access::FILE_APPEND_DATA
    | access::FILE_EXECUTE
    | access::DELETE;

#[derive(Debug, Clone)]
struct Holder {
    key: (u64, u64),
    access: u32,
    share: u32,
    path: String,
}

#[derive(Debug, Default)]
pub struct ShareModes {
    by_node: Mutex<HashMap<NodeId, Vec<Holder>>>,
}

/// Whether an open with `access`/`share` may be added next to `h`.
fn compatible(h: &Holder, access: u32, share_access: u32) -> bool {
    if access & DATA_ACCESS == 0 || h.access & DATA_ACCESS == 0 {
        return true;
    }
    let reads = |a: u32| a & (access::FILE_READ_DATA | access::FILE_EXECUTE) != 0;
    let writes = |a: u32| a & (access::FILE_WRITE_DATA | access::FILE_APPEND_DATA) != 0;
    let deletes = |a: u32| a & access::DELETE != 0;
    // What the existing open lets others do, and what the new one lets.
    !(reads(access) && h.share & share::READ == 0
        || writes(access) && h.share & share::WRITE == 0
        || deletes(access) && h.share & share::DELETE == 0
        || reads(h.access) && share_access & share::READ == 0
        || writes(h.access) && share_access & share::WRITE == 0
        || deletes(h.access) && share_access & share::DELETE == 0)
}

/// The table key of a path: the share root and the lower-cased path.
pub fn path_key(root: NodeId, path: &str) -> String {
    format!("{root}:{}", path.to_lowercase())
}

impl ShareModes {
    pub fn new() -> ShareModes {
        ShareModes::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Vec<Holder>>> {
        // A panic elsewhere never leaves the table half-updated (every
        // update is one push, retain or field write), so a poisoned lock
        // is still consistent.
        self.by_node.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an open of `node`, or says it conflicts (SHARING_VIOLATION).
    pub fn acquire(
        &self,
        node: NodeId,
        key: (u64, u64),
        access: u32,
        share_access: u32,
        path: String,
    ) -> bool {
        let mut t = self.lock();
        let list = t.entry(node).or_default();
        if !list.iter().all(|h| compatible(h, access, share_access)) {
            if list.is_empty() {
                t.remove(&node);
            }
            return false;
        }
        list.push(Holder { key, access, share: share_access, path });
        true
    }

    /// Whether an open of the file at `path` with `access`/`share` would
    /// conflict with the opens there now (checked before a truncating
    /// CREATE runs).
    pub fn conflicts_at(&self, path: &str, access: u32, share_access: u32) -> bool {
        self.lock()
            .values()
            .flatten()
            .any(|h| h.path == path && !compatible(h, access, share_access))
    }

    /// Whether an open of `node` with `access`/`share` would conflict with
    /// the opens of it now.
    pub fn conflicts(&self, node: NodeId, access: u32, share_access: u32) -> bool {
        self.lock()
            .get(&node)
            .is_some_and(|l| l.iter().any(|h| !compatible(h, access, share_access)))
    }

    /// Whether a file below the directory at `path` is open by anyone.
    pub fn open_below(&self, path: &str) -> bool {
        let prefix = format!("{path}\\");
        self.lock().values().flatten().any(|h| h.path.starts_with(&prefix))
    }

    /// Another open of `node` than `key`, by anyone.
    pub fn others(&self, node: NodeId, key: (u64, u64)) -> usize {
        self.lock().get(&node).map_or(0, |l| l.iter().filter(|h| h.key != key).count())
    }

    /// The file at `node` has moved to `path`.
    pub fn renamed(&self, node: NodeId, path: String) {
        if let Some(l) = self.lock().get_mut(&node) {
            for h in l {
                h.path = path.clone();
            }
        }
    }

    pub fn release(&self, node: NodeId, key: (u64, u64)) {
        let mut t = self.lock();
        if let Some(l) = t.get_mut(&node) {
            l.retain(|h| h.key != key);
            if l.is_empty() {
                t.remove(&node);
            }
        }
    }

    /// Drops every open of one connection.
    pub fn release_connection(&self, conn: u64) {
        let mut t = self.lock();
        t.retain(|_, l| {
            l.retain(|h| h.key.0 != conn);
            !l.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
