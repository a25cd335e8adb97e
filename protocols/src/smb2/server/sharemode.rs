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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use duet_fs::{Batch, NodeId};
use duet_locks::{Break, Holder, LockManager, Protocol, Share};

use super::state::{DurableTable, Kept, KEPT};
use crate::smb2::status::NtStatus;

/// The share access bits of CREATE (MS-SMB2 2.2.13 ShareAccess).
pub mod share {
    pub const READ: u32 = 0x1;
    pub const WRITE: u32 = 0x2;
    pub const DELETE: u32 = 0x4;
}

#[derive(Debug)]
pub struct ShareModes {
    locks: Arc<LockManager>,
    /// (connection key, file id) -> (node, path key, the directory it
    /// was opened in; a named stream's: its file).
    paths: Mutex<HashMap<(u64, u64), (NodeId, String, NodeId)>>,
    /// Every client's leases (`lease.rs`); taken before the lock table.
    leases: Mutex<super::state::Leases>,
    /// Durable opens kept after their connection was lost (`durable.rs`).
    durable: Mutex<DurableTable>,
    /// Open.AppInstanceId -> the open (connection key, file id) that has
    /// it and its owner's uid (MS-SMB2 3.3.5.9.13).
    apps: Mutex<HashMap<[u8; 16], ((u64, u64), u32)>>,
    /// The next SMB file id: one counter for every connection, so that a
    /// durable open keeps its FileId wherever it is reconnected.
    next_file: AtomicU64,
    /// Files delete-pending daemon-wide (MS-FSA 2.1.5.4): a
    /// delete-on-close open closed while other SMB opens of the file were
    /// left; the last of them to close removes it. By node: its parent,
    /// name, whether a directory, and its share-mode path key.
    pending_delete: Mutex<HashMap<NodeId, PendingDelete>>,
    /// Removals of delete-on-close files whose batch is still running
    /// after their open was dropped with its connection, session or tree
    /// (nobody waits for those batches): share-mode path key -> how many.
    /// A CREATE of the name waits for them (`removing_at`), so a client
    /// that reconnects at once never finds the file it left to delete.
    removing: Mutex<HashMap<String, usize>>,
    /// Some directory lease was granted since start (`lease.rs`): the
    /// driver then looks at every batch's changes for leases to break.
    dir_leases: AtomicBool,
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
        ShareModes {
            locks,
            paths: Mutex::new(HashMap::new()),
            leases: Mutex::new(Default::default()),
            durable: Mutex::new(DurableTable::default()),
            apps: Mutex::new(HashMap::new()),
            next_file: AtomicU64::new(1),
            dir_leases: AtomicBool::new(false),
            pending_delete: Mutex::new(HashMap::new()),
            removing: Mutex::new(HashMap::new()),
        }
    }

    fn apps(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 16], ((u64, u64), u32)>> {
        self.apps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open holding AppInstanceId `app`, and its owner's uid.
    pub(super) fn app_instance(&self, app: [u8; 16]) -> Option<((u64, u64), u32)> {
        self.apps().get(&app).copied()
    }

    pub(super) fn set_app_instance(&self, app: [u8; 16], key: (u64, u64), uid: u32) {
        self.apps().insert(app, (key, uid));
    }

    /// Open `key` is gone: its AppInstanceId with it.
    pub(super) fn forget_app_instance(&self, key: (u64, u64)) {
        self.apps().retain(|_, (k, _)| *k != key);
    }

    /// Whether SMB open `key` (connection key, file id) still exists.
    pub(super) fn has_open(&self, key: (u64, u64)) -> bool {
        self.paths().contains_key(&key)
    }

    /// The live open with file id `id` on a connection other than `conn`
    /// (file ids are daemon-wide), if any: a durable open whose client
    /// reconnected before its old connection's end was noticed. A kept
    /// open (holder [`KEPT`]) is not one: it is reconnected or refused at
    /// once.
    pub(super) fn open_elsewhere(&self, id: u64, conn: u64) -> Option<(u64, u64)> {
        self.paths().keys().find(|(c, f)| *f == id && *c != conn && *c != KEPT).copied()
    }

    /// Closes the kept durable open `id` now (another open took its
    /// AppInstanceId); the batches removing its delete-on-close file.
    pub(super) fn close_kept_id(&self, id: u64, now_ns: i64) -> Vec<Batch> {
        let k = self.durable().kept.remove(&id);
        k.and_then(|k| self.close_kept(id, k, now_ns)).into_iter().collect()
    }

    /// A new SMB file id (volatile and persistent), unique in the daemon.
    pub fn next_file_id(&self) -> u64 {
        self.next_file.fetch_add(1, Ordering::Relaxed)
    }

    /// The durable opens kept now (`durable.rs`).
    pub fn durable(&self) -> std::sync::MutexGuard<'_, DurableTable> {
        // Every update is one insert or remove: a poisoned lock is still
        // consistent.
        self.durable.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves an open's share-mode, lock-table and lease state from key
    /// `old` to `new` (a durable open kept, or reconnected). `lease`: its
    /// lease (ClientGuid, LeaseKey); `session`: the session it now
    /// belongs to, for the lease's breaks.
    fn rekey(&self, node: NodeId, old: (u64, u64), new: (u64, u64), lease: Option<([u8; 16], [u8; 16])>, session: Option<u64>) -> bool {
        let mut leases = self.leases();
        let mut paths = self.paths();
        if !self.locks.table().rekey(node, &holder(old), holder(new)) {
            return false;
        }
        if let Some(p) = paths.remove(&old) {
            paths.insert(new, p);
        }
        leases.rekey_open(lease, old, new, session);
        for (k, _) in self.apps().values_mut().filter(|(k, _)| *k == old) {
            *k = new;
        }
        true
    }

    /// Keeps the durable open `id` of connection `conn` after its
    /// connection or session went away (MS-SMB2 3.3.7.1), unless `max`
    /// are kept already. Err gives the open back, untouched.
    pub(super) fn keep_durable(&self, conn: u64, id: u64, kept: Kept, max: usize) -> Result<(), Box<Kept>> {
        if self.durable().kept.len() >= max {
            return Err(Box::new(kept));
        }
        let lease = kept.open.lease.map(|k| (kept.client_guid, k));
        if !self.rekey(kept.open.node, (conn, id), kept.key(id), lease, None) {
            return Err(Box::new(kept));
        }
        self.durable().kept.insert(id, kept);
        Ok(())
    }

    /// Reattaches the kept open `id` to connection `conn`, session
    /// `session` (MS-SMB2 3.3.5.9.7 / 3.3.5.9.12) once `check` accepts it;
    /// not kept: STATUS_OBJECT_NAME_NOT_FOUND.
    pub(super) fn reclaim_durable(
        &self,
        id: u64,
        check: impl FnOnce(&Kept) -> Result<(), NtStatus>,
        conn: u64,
        session: u64,
        now_ns: i64,
    ) -> Result<Kept, NtStatus> {
        let k = {
            let mut d = self.durable();
            let Some(k) = d.kept.get(&id) else { return Err(NtStatus::OBJECT_NAME_NOT_FOUND) };
            check(k)?;
            d.kept.remove(&id).ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?
        };
        let lease = k.open.lease.map(|l| (k.client_guid, l));
        if !self.rekey(k.open.node, k.key(id), (conn, id), lease, Some(session)) {
            // Cannot happen (the connection holds nothing under this id):
            // close it rather than keep a half-moved open.
            if let Some(b) = self.close_kept(id, k, now_ns) {
                self.durable().closed.push(b);
            }
            return Err(NtStatus::OBJECT_NAME_NOT_FOUND);
        }
        Ok(k)
    }

    /// Closes a kept open as a CLOSE would: its share reservation, locks,
    /// grant and lease membership go. The batch removing its file, when
    /// it was delete-on-close and no other SMB open of the file is left.
    fn close_kept(&self, id: u64, k: Kept, now_ns: i64) -> Option<Batch> {
        let key = k.key(id);
        self.forget_app_instance(key);
        if let Some(l) = k.open.lease {
            self.leases().forget_open(Some((k.client_guid, l)), key);
        }
        self.release(k.open.node, key);
        // An NFSv4 open is a handle too: it keeps the file.
        let others = self.open_anywhere(k.open.node) || self.locks.table().opened_by(k.open.node, Protocol::Nfs4);
        let doc = k.open.delete_on_close && !k.open.name.is_empty();
        if others {
            if doc {
                let d = PendingDelete {
                    parent: k.open.parent,
                    name: k.open.name.clone(),
                    is_dir: k.open.is_dir,
                    path: path_key(k.root, &k.open.path),
                };
                self.defer_delete(k.open.node, d);
            }
            None
        } else if doc {
            self.forget_pending_delete(k.open.node);
            k.removal(now_ns)
        } else {
            // The last open of a file left delete-pending elsewhere.
            let d = self.take_pending_delete(k.open.node)?;
            let mut b = Batch::new(k.cred.clone(), now_ns);
            b.stop_on_error = false;
            b.ops.push(super::plan::removal(duet_fs::ObjRef::Id(d.parent), &d.name, Some(d.is_dir)));
            Some(b)
        }
    }

    /// The scavenger (MS-SMB2 3.3.2.2): closes the kept opens whose time
    /// is up; returns the batches to run (their delete-on-close files,
    /// and those of kept opens closed by breaks meanwhile).
    /// The kept opens `ids` are not to wait for their keep time (a session
    /// handed over that no channel took, [`super::MovedSession`]): the next
    /// [`ShareModes::expire_durable`] closes them.
    pub fn give_up_kept(&self, ids: &[u64]) {
        let mut d = self.durable();
        for id in ids {
            if let Some(k) = d.kept.get_mut(id) {
                k.deadline = i64::MIN;
            }
        }
    }

    pub fn expire_durable(&self, now_ns: i64) -> Vec<Batch> {
        let (due, mut out) = {
            let mut d = self.durable();
            let ids: Vec<u64> = d.kept.iter().filter(|(_, k)| k.deadline <= now_ns).map(|(i, _)| *i).collect();
            let due: Vec<(u64, Kept)> = ids.into_iter().filter_map(|i| d.kept.remove(&i).map(|k| (i, k))).collect();
            (due, std::mem::take(&mut d.closed))
        };
        for (id, k) in due {
            out.extend(self.close_kept(id, k, now_ns));
        }
        out
    }

    /// A break decided for `b.holder`: when it is a kept durable open (an
    /// oplock of one, or a lease whose opens are all kept), those opens
    /// close now instead of being waited for (MS-SMB2 3.3.2.2, 3.3.4.6:
    /// what Windows and Samba do) and the batches removing their
    /// delete-on-close files are returned; None when the break is for a
    /// live holder.
    pub(super) fn break_kept(&self, b: &Break, now_ns: i64) -> Option<Vec<Batch>> {
        if b.holder.proto != Protocol::Smb {
            return None;
        }
        let owner = b.holder.owner;
        let ids: Vec<u64> = if owner & super::state::LEASE_OWNER != 0 && owner != super::state::OPENER {
            let opens = self.leases().opens_of_owner(owner)?;
            if opens.is_empty() || !opens.iter().all(|k| k.0 == KEPT) {
                return None;
            }
            opens.iter().map(|k| k.1).collect()
        } else if b.holder.client == KEPT {
            vec![owner]
        } else {
            return None;
        };
        let taken: Vec<(u64, Kept)> = {
            let mut d = self.durable();
            ids.iter().filter_map(|i| d.kept.remove(i).map(|k| (*i, k))).collect()
        };
        if taken.is_empty() {
            return None;
        }
        Some(taken.into_iter().filter_map(|(i, k)| self.close_kept(i, k, now_ns)).collect())
    }

    /// As [`ShareModes::break_kept`] for a break decided outside any SMB
    /// connection (an NFS client's): true when it closed kept opens,
    /// whose batches [`ShareModes::expire_durable`] hands out next.
    pub fn break_kept_open(&self, b: &Break, now_ns: i64) -> bool {
        match self.break_kept(b, now_ns) {
            Some(batches) => {
                self.durable().closed.extend(batches);
                true
            }
            None => false,
        }
    }

    /// The lock table (byte-range locks go there too).
    pub fn locks(&self) -> &Arc<LockManager> {
        &self.locks
    }

    /// Whether an SMB open of `node` is left anywhere (any connection, or
    /// kept for a lost one).
    pub fn open_anywhere(&self, node: NodeId) -> bool {
        self.paths().values().any(|(n, _, _)| *n == node)
    }

    /// The share-mode path key of open `key`.
    pub fn path_of(&self, key: (u64, u64)) -> Option<String> {
        self.paths().get(&key).map(|(_, p, _)| p.clone())
    }

    /// `node` is delete-pending until its last open closes. The lock
    /// table learns it too, so that NFS refuses new opens of it and an
    /// NFSv4 CLOSE that is the last open removes it (docs/locks.md).
    pub(super) fn defer_delete(&self, node: NodeId, d: PendingDelete) {
        let rec = duet_locks::DeletePending { parent: d.parent, name: d.name.clone(), is_dir: d.is_dir };
        self.pending_delete.lock().unwrap_or_else(|e| e.into_inner()).insert(node, d);
        self.locks.table().mark_delete_pending(node, rec);
    }

    /// Whether `node` is delete-pending (an open left it so; it goes with
    /// the last open).
    pub(super) fn is_delete_pending(&self, node: NodeId) -> bool {
        self.pending_delete.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&node)
    }

    /// `node` is removed now (or no longer delete-pending).
    pub(super) fn forget_pending_delete(&self, node: NodeId) {
        let had = self.pending_delete.lock().unwrap_or_else(|e| e.into_inner()).remove(&node).is_some();
        if had || self.locks.table().is_delete_pending(node) {
            self.locks.table().take_delete_pending(node);
        }
    }

    /// An open of `node` closed: when the file is delete-pending and no
    /// open of it is left (SMB, or NFSv4: `open_anywhere_or_stream`), the
    /// removal to run now. None also when an NFSv4 CLOSE took the
    /// removal from the lock table first (it runs it).
    pub(super) fn take_pending_delete(&self, node: NodeId) -> Option<PendingDelete> {
        let path = self.pending_delete.lock().unwrap_or_else(|e| e.into_inner()).get(&node)?.path.clone();
        if self.open_anywhere_or_stream(node, &path) {
            return None;
        }
        let d = self.pending_delete.lock().unwrap_or_else(|e| e.into_inner()).remove(&node)?;
        self.locks.table().take_delete_pending(node)?;
        Some(d)
    }

    /// Whether an SMB open of `node`, or of one of the named streams of
    /// the file at share-mode path `path`, remains: a stream's open keeps
    /// its file (MS-FSA 2.1.5.4, smbtorture smb2.streams.delete). An
    /// NFSv4 open of `node` counts as well: it is a handle, and the file
    /// goes with the last handle, whichever protocol holds it.
    pub fn open_anywhere_or_stream(&self, node: NodeId, path: &str) -> bool {
        let prefix = format!("{path}:");
        let smb = self.paths().values().any(|(n, p, _)| *n == node || (!path.is_empty() && p.starts_with(&prefix)));
        smb || self.locks.table().opened_by(node, Protocol::Nfs4)
    }

    /// A batch removing the file at share-mode path `path` was started.
    pub(super) fn begin_removal(&self, path: &str) {
        *self.removing.lock().unwrap_or_else(|e| e.into_inner()).entry(path.to_string()).or_insert(0) += 1;
    }

    /// A batch `begin_removal` announced is over (done or failed).
    pub(super) fn end_removal(&self, path: &str) {
        let mut g = self.removing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = g.get_mut(path) {
            *n -= 1;
            if *n == 0 {
                g.remove(path);
                drop(g);
                // Wake the CREATEs parked on it.
                self.locks.changed();
            }
        }
    }

    /// Whether a removal of the file at share-mode path `path` (or of
    /// one of its streams' file) is still running.
    pub fn removing_at(&self, path: &str) -> bool {
        self.removing.lock().unwrap_or_else(|e| e.into_inner()).contains_key(path)
    }

    /// Whether the file at share-mode path `path` is delete-pending (a new
    /// open of it is STATUS_DELETE_PENDING, MS-FSA 2.1.5.1.2.1).
    pub fn delete_pending_at(&self, path: &str) -> bool {
        let nodes: Vec<NodeId> = {
            let g = self.pending_delete.lock().unwrap_or_else(|e| e.into_inner());
            g.iter().filter(|(_, d)| d.path == path).map(|(n, _)| *n).collect()
        };
        // Delete-pending lasts while an open of the file (or of one of its
        // streams) does; an entry outliving them (the file removed or
        // renamed another way meanwhile) is dropped, never left to refuse
        // the name for good.
        let mut pending = false;
        for n in nodes {
            if self.open_anywhere_or_stream(n, path) {
                pending = true;
            } else {
                self.forget_pending_delete(n);
            }
        }
        pending
    }

    /// Whether a directory lease was ever granted: until then no batch
    /// can break one.
    pub fn directory_leases(&self) -> bool {
        self.dir_leases.load(Ordering::Relaxed)
    }

    pub(super) fn note_directory_lease(&self) {
        self.dir_leases.store(true, Ordering::Relaxed);
    }

    /// The lease table of every client (taken before the lock table).
    pub(super) fn leases(&self) -> std::sync::MutexGuard<'_, super::state::Leases> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn paths(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u64), (NodeId, String, NodeId)>> {
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
        parent: NodeId,
    ) -> bool {
        let mut paths = self.paths();
        if self.locks.table().open(node, holder(key), Share::smb(access, share_access)).is_err() {
            return false;
        }
        paths.insert(key, (node, path, parent));
        true
    }

    /// Whether an open of the file at `path` with `access`/`share` would
    /// conflict with the opens there now (checked before a truncating
    /// CREATE runs).
    pub fn conflicts_at(&self, path: &str, access: u32, share_access: u32) -> bool {
        let paths = self.paths();
        let mut nodes: Vec<NodeId> = paths.values().filter(|(_, p, _)| p == path).map(|(n, _, _)| *n).collect();
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
        let mut nodes: Vec<NodeId> = self.paths().values().filter(|(_, p, _)| p == path).map(|(n, _, _)| *n).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// Whether an open of the file at `path` (a path key) asking for
    /// `access` meets an open of one of its named streams (path
    /// `file:stream`) that does not share it: a stream open without
    /// FILE_SHARE_DELETE keeps its file from being opened for DELETE
    /// (Windows; smbtorture `smb2.streams.delete`).
    pub fn stream_conflicts(&self, path: &str, access: u32) -> bool {
        let prefix = format!("{path}:");
        let mut nodes: Vec<NodeId> =
            self.paths().values().filter(|(_, p, _)| p.starts_with(&prefix)).map(|(n, _, _)| *n).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let t = self.locks.table();
        let all = crate::smb2::create::share_access::READ
            | crate::smb2::create::share_access::WRITE
            | crate::smb2::create::share_access::DELETE;
        nodes.into_iter().any(|n| t.share_conflict(n, None, Share::smb(access, all)))
    }

    /// Whether a file below the directory at `path` is open by an SMB
    /// client.
    pub fn open_below(&self, path: &str) -> bool {
        let prefix = format!("{path}\\");
        self.paths().values().any(|(_, p, _)| p.starts_with(&prefix))
    }

    /// Other opens of `node` than `key`, by anyone (NFS opens included).
    pub fn others(&self, node: NodeId, key: (u64, u64)) -> usize {
        self.locks.table().other_opens(node, &holder(key))
    }

    /// The file at `node` has moved to `path`; its leases follow it
    /// (Lease.Filename, MS-SMB2 3.3.1.12).
    pub fn renamed(&self, node: NodeId, path: String) {
        for (n, p, _) in self.paths().values_mut() {
            if *n == node {
                *p = path.clone();
            }
        }
        self.leases().renamed(node, &path);
    }

    /// Another protocol (NFS) renamed `src_name` in directory `src_dir` to
    /// `dst_name` in `dst_dir`: the SMB opens of it, of its named streams
    /// and (a directory) of everything below follow to the new path, and
    /// so do their leases (Lease.Filename, MS-SMB2 3.3.1.12), as after an
    /// SMB rename. A directory's path is learnt from the opens: one opened
    /// in it, the directory's own open, or a share root. When the new
    /// directory's path is unknown, the opens keep no path (they stop
    /// answering for the old name, and their leases accept the next name
    /// they are opened by).
    pub fn moved(&self, src_dir: NodeId, src_name: &str, dst_dir: NodeId, dst_name: &str) {
        self.pending_moved(src_dir, src_name, dst_dir, dst_name);
        let mut renamed: Vec<(NodeId, String)> = Vec::new();
        let (old, new) = {
            let mut paths = self.paths();
            let Some(old) = dir_path(&paths, src_dir).map(|d| join(&d, &src_name.to_lowercase())) else {
                return;
            };
            let new = if dst_dir == src_dir {
                split_leaf(&old).map(|(d, _)| join(d, &dst_name.to_lowercase()))
            } else {
                dir_path(&paths, dst_dir).map(|d| join(&d, &dst_name.to_lowercase()))
            };
            // The name replaced, if any: its opens keep no path (their
            // file has no name now).
            if let Some(n) = new.as_ref().filter(|n| **n != old) {
                for (node, p, _) in paths.values_mut() {
                    if under(p, n).is_some() {
                        p.clear();
                        renamed.push((*node, String::new()));
                    }
                }
            }
            for (n, p, parent) in paths.values_mut() {
                let Some(rest) = under(p, &old).map(str::to_string) else {
                    continue;
                };
                if rest.is_empty() {
                    *parent = dst_dir;
                }
                *p = new.as_ref().map(|n| format!("{n}{rest}")).unwrap_or_default();
                renamed.push((*n, p.clone()));
            }
            (old, new)
        };
        {
            let mut pd = self.pending_delete.lock().unwrap_or_else(|e| e.into_inner());
            for d in pd.values_mut() {
                if let Some(r) = under(&d.path, &old) {
                    d.path = new.as_ref().map(|n| format!("{n}{r}")).unwrap_or_default();
                }
            }
        }
        let mut leases = self.leases();
        for (n, p) in renamed {
            leases.renamed(n, &p);
        }
    }

    /// The pending removals (MS-FSA 2.1.5.4) follow a rename by another
    /// protocol: a delete-pending file renamed goes by its new name at its
    /// last close; one whose name the rename replaced has no name left to
    /// remove (its removal would take the renamed file instead).
    fn pending_moved(&self, src_dir: NodeId, src_name: &str, dst_dir: NodeId, dst_name: &str) {
        let same = |d: &PendingDelete, dir: NodeId, name: &str| d.parent == dir && d.name.eq_ignore_ascii_case(name);
        let mut changed: Vec<(NodeId, Option<duet_locks::DeletePending>)> = Vec::new();
        {
            let mut pd = self.pending_delete.lock().unwrap_or_else(|e| e.into_inner());
            let replaced = src_dir != dst_dir || !src_name.eq_ignore_ascii_case(dst_name);
            pd.retain(|n, d| {
                let gone = replaced && same(d, dst_dir, dst_name);
                if gone {
                    changed.push((*n, None));
                }
                !gone
            });
            for (n, d) in pd.iter_mut() {
                if same(d, src_dir, src_name) {
                    d.parent = dst_dir;
                    d.name = dst_name.to_string();
                    changed.push((*n, Some(duet_locks::DeletePending { parent: dst_dir, name: d.name.clone(), is_dir: d.is_dir })));
                }
            }
        }
        if changed.is_empty() {
            return;
        }
        let mut t = self.locks.table();
        for (n, rec) in changed {
            // Only while still pending (an NFSv4 CLOSE may have taken it).
            if t.is_delete_pending(n) {
                match rec {
                    Some(r) => t.mark_delete_pending(n, r),
                    None => {
                        t.take_delete_pending(n);
                    }
                }
            }
        }
    }

    /// The pending removal of `name` in `dir`, if any, is void: another
    /// protocol removed the name already.
    fn pending_removed(&self, dir: NodeId, name: &str) {
        let mut gone = Vec::new();
        self.pending_delete.lock().unwrap_or_else(|e| e.into_inner()).retain(|n, d| {
            let g = d.parent == dir && d.name.eq_ignore_ascii_case(name);
            if g {
                gone.push(*n);
            }
            !g
        });
        if !gone.is_empty() {
            let mut t = self.locks.table();
            for n in gone {
                t.take_delete_pending(n);
            }
        }
    }

    /// Another protocol (NFS) removed `name` from directory `dir`: the SMB
    /// opens of that name (its streams, what was below it) keep no path,
    /// as those of a name a rename replaced: a new file of that name meets
    /// no phantom of them. The opens themselves go on (the file lives
    /// while open, as on POSIX).
    pub fn removed(&self, dir: NodeId, name: &str) {
        self.pending_removed(dir, name);
        let mut gone: Vec<NodeId> = Vec::new();
        {
            let mut paths = self.paths();
            let Some(path) = dir_path(&paths, dir).map(|d| join(&d, &name.to_lowercase())) else {
                return;
            };
            for (node, p, _) in paths.values_mut() {
                if under(p, &path).is_some() {
                    p.clear();
                    gone.push(*node);
                }
            }
        }
        let mut leases = self.leases();
        for n in gone {
            leases.renamed(n, "");
        }
    }

    /// Open `key` of `old` (a named stream, renamed onto its file's
    /// unnamed stream: MS-FSA 2.1.5.14.11.1) is an open of `new` at `path`
    /// now, under directory `parent`: its share reservation moves with it;
    /// what it held on `old` alone (byte-range locks, grants) goes. False
    /// when `new`'s opens now refuse the reservation (the open then holds
    /// none).
    pub(super) fn reopened_as(&self, old: NodeId, key: (u64, u64), new: NodeId, path: String, parent: NodeId) -> bool {
        let mut paths = self.paths();
        let mut t = self.locks.table();
        let share = t.share_of(old, &holder(key));
        t.release(old, &holder(key));
        let ok = share.is_some_and(|s| t.open(new, holder(key), s).is_ok());
        drop(t);
        if ok {
            paths.insert(key, (new, path, parent));
        } else {
            paths.remove(&key);
        }
        ok
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

/// A path key split into its directory's part and its last name: `5:a\b`
/// -> (`5:a`, `b`), `5:b` -> (`5:`, `b`). None for a share root's own key
/// or a named stream's (`5:a\f:s`: its leaf is no directory entry).
fn split_leaf(p: &str) -> Option<(&str, &str)> {
    let root = p.find(':')? + 1;
    let (dir, leaf) = match p[root..].rfind('\\') {
        Some(i) => (&p[..root + i], &p[root + i + 1..]),
        None => (&p[..root], &p[root..]),
    };
    (!leaf.is_empty() && !leaf.contains(':')).then_some((dir, leaf))
}

/// The rest of path key `p` past `base` when `p` is `base` itself, a
/// named stream of it or below it (a directory): "", ":s", "\\x\\y".
fn under<'a>(p: &'a str, base: &str) -> Option<&'a str> {
    p.strip_prefix(base).filter(|r| r.is_empty() || r.starts_with('\\') || r.starts_with(':'))
}

/// `leaf` in the directory of path key `dir`.
fn join(dir: &str, leaf: &str) -> String {
    if dir.ends_with(':') {
        format!("{dir}{leaf}")
    } else {
        format!("{dir}\\{leaf}")
    }
}

/// The path key of directory `dir`, as the opens know it: one opened in
/// it, its own open, or its being the root of the share of some open.
fn dir_path(paths: &HashMap<(u64, u64), (NodeId, String, NodeId)>, dir: NodeId) -> Option<String> {
    let root = format!("{dir}:");
    paths
        .values()
        .find_map(|(_, p, parent)| (*parent == dir).then(|| split_leaf(p)).flatten().map(|(d, _)| d.to_string()))
        .or_else(|| paths.values().find_map(|(n, p, _)| (*n == dir && split_leaf(p).is_some()).then(|| p.clone())))
        .or_else(|| paths.values().any(|(_, p, _)| p.starts_with(&root)).then_some(root))
}

/// A file delete-pending across connections (`ShareModes::defer_delete`).
#[derive(Debug, Clone)]
pub(super) struct PendingDelete {
    pub parent: NodeId,
    pub name: String,
    pub is_dir: bool,
    pub path: String,
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
        assert!(t.acquire(5, (1, 1), R, share::READ, "1:d\\a".into(), 1));
        // Reading is shared; writing is not.
        assert!(t.acquire(5, (1, 2), R, share::READ | share::WRITE, "1:d\\a".into(), 1));
        assert!(!t.acquire(5, (2, 1), W, share::READ | share::WRITE, "1:d\\a".into(), 1));
        // The new open must share what the old ones hold.
        assert!(!t.acquire(5, (2, 2), R, share::WRITE, "1:d\\a".into(), 1));
        // Attribute-only opens never conflict.
        assert!(t.acquire(5, (2, 3), access::FILE_READ_ATTRIBUTES, 0, "1:d\\a".into(), 1));
        assert!(!t.acquire(5, (2, 4), D, share::READ | share::WRITE, "1:d\\a".into(), 1));
        assert!(t.conflicts_at("1:d\\a", W, 7));
        assert!(!t.conflicts_at("1:d\\b", W, 0));
        t.release(5, (1, 1));
        t.release(5, (1, 2));
        assert!(t.acquire(5, (2, 5), W | D, 0, "1:d\\a".into(), 1));
        assert!(t.open_below("1:d"));
        assert_eq!(t.others(5, (2, 5)), 1);
        t.release_connection(2);
        assert!(!t.open_below("1:d"));
    }

    /// A delete-pending file is in the lock table for NFS (docs/locks.md,
    /// "Delete-on-close and NFS"); an NFSv4 open keeps it; its pending
    /// removal follows an NFS rename, and is void once NFS removed or
    /// replaced the name (it would take another file).
    #[test]
    fn delete_pending_is_shared_and_follows_nfs_renames_and_removals() {
        let t = ShareModes::new();
        let pending = |t: &ShareModes, n: NodeId| t.locks().table().is_delete_pending(n);
        let rec = |t: &ShareModes, n: NodeId| t.locks().table().take_delete_pending(n);
        let pd = |name: &str, path: &str| PendingDelete { parent: 9, name: name.into(), is_dir: false, path: path.into() };
        assert!(t.acquire(5, (1, 1), R, 7, "1:d\\a".into(), 9));
        let nfs = Holder::new(Protocol::Nfs4, 3, 1);
        t.locks().table().open(5, nfs, Share::nfs(1, 0)).unwrap();
        t.defer_delete(5, pd("a", "1:d\\a"));
        assert!(pending(&t, 5) && t.delete_pending_at("1:d\\a"));
        t.release(5, (1, 1));
        // The NFSv4 open is a handle: nothing to remove yet.
        assert!(t.open_anywhere_or_stream(5, "1:d\\a"));
        assert!(t.take_pending_delete(5).is_none());
        assert!(t.delete_pending_at("1:d\\a"), "still delete-pending for SMB");
        // Renamed over NFS: the removal follows.
        t.moved(9, "A", 9, "b");
        t.locks().table().release(5, &nfs);
        assert_eq!(rec(&t, 5), Some(duet_locks::DeletePending { parent: 9, name: "b".into(), is_dir: false }));
        // Removed over NFS, or replaced by a rename: no removal left.
        t.defer_delete(6, pd("c", "1:d\\c"));
        t.removed(9, "C");
        assert!(!pending(&t, 6));
        t.defer_delete(7, pd("e", "1:d\\e"));
        t.moved(9, "x", 9, "E");
        assert!(!pending(&t, 7));
    }

    #[test]
    fn an_open_moved_by_another_protocol_follows_to_its_new_path() {
        let t = ShareModes::new();
        // Share root 1; directory d (node 9) holds a (node 5) and its
        // stream; directory e (node 10) is the open dir itself.
        assert!(t.acquire(5, (1, 1), R, 7, "1:d\\a".into(), 9));
        assert!(t.acquire(6, (1, 2), R, 7, "1:d\\a:s".into(), 5));
        assert!(t.acquire(10, (1, 3), R, 7, "1:e".into(), 1));
        // Within d: the file and its stream.
        t.moved(9, "A", 9, "b");
        assert_eq!(t.path_of((1, 1)).as_deref(), Some("1:d\\b"));
        assert_eq!(t.path_of((1, 2)).as_deref(), Some("1:d\\b:s"));
        // Into e, whose path its own open gives.
        t.moved(9, "b", 10, "c");
        assert_eq!(t.path_of((1, 1)).as_deref(), Some("1:e\\c"));
        assert_eq!(t.path_of((1, 2)).as_deref(), Some("1:e\\c:s"));
        // e itself, renamed in the share root: everything below follows.
        t.moved(1, "e", 1, "f");
        assert_eq!(t.path_of((1, 3)).as_deref(), Some("1:f"));
        assert_eq!(t.path_of((1, 1)).as_deref(), Some("1:f\\c"));
        // Into a directory no open knows: no path left, no old name held.
        t.moved(10, "c", 77, "z");
        assert_eq!(t.path_of((1, 1)).as_deref(), Some(""));
        assert!(t.nodes_at("1:f\\c").is_empty());
        // A name nobody has open: nothing moves.
        t.moved(1, "nothing", 1, "x");
        assert_eq!(t.path_of((1, 3)).as_deref(), Some("1:f"));
        // Onto a name that is open: the replaced file's opens keep no path.
        assert!(t.acquire(20, (2, 1), R, 7, "1:g".into(), 1));
        assert!(t.acquire(21, (2, 2), R, 7, "1:h".into(), 1));
        t.moved(1, "h", 1, "g");
        assert_eq!(t.path_of((2, 2)).as_deref(), Some("1:g"));
        assert_eq!(t.path_of((2, 1)).as_deref(), Some(""));
        assert_eq!(t.nodes_at("1:g"), vec![21]);
        // Removed: its opens keep no path; another name stays.
        t.removed(1, "G");
        assert_eq!(t.path_of((2, 2)).as_deref(), Some(""));
        assert!(t.nodes_at("1:g").is_empty());
        assert_eq!(t.path_of((1, 3)).as_deref(), Some("1:f"));
    }
}
