//! The change-notify registry: which SMB connections watch which
//! directories (SMB2 CHANGE_NOTIFY, MS-SMB2 3.3.5.19), and the delivery
//! of every committed change to them, whichever protocol made it. Every
//! client batch of both protocols passes through `frontend::spawn_batch`:
//! while any connection watches, its [`Intents`] are taken before it runs
//! and its changes derived once from its results
//! (`duet_protocols::changes::derive`, sans-I/O), then routed as
//! `Routed::Changes` to each watching connection's own task (through
//! `frontend::SmbRoutes`), which answers or buffers them
//! (`Connection::on_changes`). Nothing is kept while nobody watches.
//!
//! Bounds: at most `[limits] smb_notify_watches` (1024) watches and
//! waiting requests per connection (the state machine refuses more), the
//! name cache `NAME_CACHE` nodes, and each connection's route queue (a
//! full queue drops the changes, counted in `dropped`: the client then
//! misses them, as a Windows client whose buffer overflowed).
//!
//! The same derived changes break SMB directory leases: once any was
//! granted (`ShareModes::directory_leases`), every batch's changes are
//! derived, and each directory changed has its leases broken to none
//! (`duet_locks::Conflict::Child`), the breaks routed like any other
//! (`SmbRoutes::deliver`); the lease the changing SMB open named as its
//! ParentLeaseKey is left alone ([`Origin::exempt`]), and an SMB WRITE is
//! left to its open's close (`Connection::break_parent_on_close`).
//!
//! Not covered: batches a follower forwards to the leader are committed
//! there, so a watcher on the leader does not see a follower's clients'
//! changes (and the other way round).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use duet_fs::{Batch, BatchResult, NodeId};
use duet_protocols::changes::{derive, Intents, NameCache};
use duet_protocols::changes::action;
use duet_protocols::smb2::server::{Notified, WatchedDir, DIR_REMOVED};

use crate::frontend::SmbRoutes;

/// How many nodes' last-seen names are kept (for MODIFIED records of
/// operations that name a file by handle, and WATCH_TREE paths).
pub const NAME_CACHE: usize = 65_536;

/// Who ran a batch, for the directory leases its changes break.
#[derive(Clone, Copy, Debug)]
pub struct Origin {
    /// An SMB client's batch (its writes break directory leases at close).
    pub smb: bool,
    /// The lease left alone (the ParentLeaseKey of the SMB open).
    pub exempt: Option<duet_locks::Holder>,
}

/// See the module documentation.
pub struct NotifyHub {
    /// Connections with at least one watch (a fast "nobody watches").
    watching: AtomicUsize,
    inner: Mutex<Inner>,
    /// Change records handed to connections.
    pub delivered: AtomicU64,
    /// Deliveries dropped: the connection's queue was full or it was gone.
    pub dropped: AtomicU64,
}

struct Inner {
    cache: NameCache,
    /// Connection key -> the directories it watches (WATCH_TREE or not).
    watches: HashMap<u64, Vec<WatchedDir>>,
}

impl Default for NotifyHub {
    fn default() -> Self {
        NotifyHub {
            watching: AtomicUsize::new(0),
            inner: Mutex::new(Inner { cache: NameCache::new(NAME_CACHE), watches: HashMap::new() }),
            delivered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }
}

impl NotifyHub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connection `conn` now watches `dirs` (none: it leaves the registry).
    pub fn set_watches(&self, conn: u64, dirs: Vec<WatchedDir>) {
        let mut g = self.lock();
        if dirs.is_empty() {
            g.watches.remove(&conn);
        } else {
            g.watches.insert(conn, dirs);
        }
        self.watching.store(g.watches.len(), Ordering::Relaxed);
        if g.watches.is_empty() {
            // Names learnt while nobody watched would go stale unseen.
            g.cache = NameCache::new(NAME_CACHE);
        }
    }

    /// What of `batch` the changes will be derived from, while anybody
    /// watches (None otherwise, or when it can change nothing).
    pub fn intents(&self, batch: &Batch, dir_leases: bool) -> Option<Intents> {
        if self.watching.load(Ordering::Relaxed) == 0 && !dir_leases {
            return None;
        }
        Intents::of(batch)
    }

    /// The batch of `intents` committed with `result`: its changes go to
    /// every connection watching a directory they are in (or below, for
    /// WATCH_TREE).
    pub fn publish(&self, intents: &Intents, result: &BatchResult, routes: &SmbRoutes, leases: Option<(&duet_locks::LockManager, Origin)>) {
        let mut changed_dirs: Vec<NodeId> = Vec::new();
        let sends: Vec<(u64, Vec<Notified>)> = {
            let mut g = self.lock();
            let Inner { cache, watches } = &mut *g;
            let changes = derive(intents, &result.results, cache);
            if changes.is_empty() {
                return;
            }
            if let Some((_, origin)) = &leases {
                for c in &changes {
                    if origin.smb && c.action == action::MODIFIED {
                        continue;
                    }
                    if !changed_dirs.contains(&c.dir) {
                        changed_dirs.push(c.dir);
                    }
                }
            }
            watches
                .iter()
                .filter_map(|(conn, dirs)| {
                    let mut v = Vec::new();
                    for c in &changes {
                        for wd in dirs {
                            let w: NodeId = wd.node;
                            if c.action == action::REMOVED && c.dir == wd.parent && c.name.eq_ignore_ascii_case(&wd.name) {
                                v.push(Notified { watch: w, name: String::new(), direct: true, action: DIR_REMOVED, filter: u32::MAX });
                            } else if c.dir == w {
                                v.push(Notified { watch: w, name: c.name.clone(), direct: true, action: c.action, filter: c.filter });
                            } else if wd.tree {
                                if let Some(path) = cache.path_under(w, c.dir, &c.name) {
                                    v.push(Notified { watch: w, name: path, direct: false, action: c.action, filter: c.filter });
                                }
                            }
                        }
                    }
                    (!v.is_empty()).then_some((*conn, v))
                })
                .collect()
        };
        if let Some((locks, origin)) = leases {
            self.break_directory_leases(locks, origin, &changed_dirs, routes);
        }
        for (conn, v) in sends {
            let n = v.len() as u64;
            if routes.notify(conn, v) {
                self.delivered.fetch_add(n, Ordering::Relaxed);
            } else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl NotifyHub {
    /// `node` became delete-pending (an SMB delete-on-close open closed
    /// while other opens remain): every connection but `from` watching it
    /// is told, as of a removed watched directory, and completes its
    /// waiting CHANGE_NOTIFYs with STATUS_DELETE_PENDING (smbtorture
    /// smb2.notify.rmdir3).
    pub fn delete_pending(&self, node: NodeId, from: u64, routes: &SmbRoutes) {
        if self.watching.load(Ordering::Relaxed) == 0 {
            return;
        }
        let conns: Vec<u64> = {
            let g = self.lock();
            let mut v: Vec<u64> = g
                .watches
                .iter()
                .filter(|(c, dirs)| **c != from && dirs.iter().any(|d| d.node == node))
                .map(|(c, _)| *c)
                .collect();
            v.sort_unstable();
            v
        };
        for conn in conns {
            let n = Notified { watch: node, name: String::new(), direct: true, action: DIR_REMOVED, filter: u32::MAX };
            if routes.notify(conn, vec![n]) {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            } else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Breaks the leases of each directory in `dirs` to none but
    /// `origin`'s exempt one, without waiting (MS-FSA 2.1.4.13); the
    /// breaks go to their clients' connections.
    fn break_directory_leases(&self, locks: &duet_locks::LockManager, origin: Origin, dirs: &[NodeId], routes: &SmbRoutes) {
        if dirs.is_empty() {
            return;
        }
        // A holder that owns no grant when the batch named none.
        let exempt = origin.exempt.unwrap_or(duet_locks::Holder::new(duet_locks::Protocol::Smb, 0, 0));
        let none = duet_locks::Share { access: 0, deny: 0 };
        let now = crate::admin::now_ns();
        let breaks: Vec<duet_locks::Break> = {
            let mut t = locks.table();
            dirs.iter().flat_map(|d| t.break_for(*d, &exempt, none, duet_locks::Conflict::Child, now).0).collect()
        };
        for b in breaks {
            if b.holder.proto == duet_locks::Protocol::Smb {
                routes.deliver(b);
            }
        }
    }
}
