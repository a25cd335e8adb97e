//! The protocol executors: one glommio executor per core. The first
//! accepts on the daemon's SMB and NFS sockets (NFS with MOUNT and portmap
//! on the same port, and portmap on 111 when it is free) and hands each
//! connection to the executors in turn; it also makes the NFS server whose
//! client and session state every executor shares. Each connection task
//! feeds bytes to the sans-I/O protocol state machine and runs the batches
//! it asks for on the engine.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use duet_admin_api::ListenerInfo;
use duet_cluster::records::{ShareRecord, UserRecord};
use duet_cluster_store::{Query, QueryAnswer};
use duet_fs::{Batch, BatchResult, Credentials, FsError, NodeId, ObjRef, Op, OpOutput, ROOT_ID};
use duet_protocols::nfs::server::{ExportEntry, NfsServer, NfsServerConfig, PortMapping};
use duet_protocols::smb2::server as smb;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use rand::RngCore;

use crate::admin::now_ns;
use crate::config::LimitsConfig;
use crate::engine::{EngineHandle, RequestTag};

/// How many connections each client address holds, and all together,
/// over every executor (`[limits] connections`, `connections_per_client`).
pub struct ConnTable {
    max_total: usize,
    max_per_client: usize,
    inner: Mutex<(usize, HashMap<IpAddr, usize>)>,
    refused: std::sync::atomic::AtomicU64,
    /// What `/metrics` and `duetctl stats` show about connections.
    pub counters: ConnCounters,
    /// Where refused SMB logons are recorded (set once at start).
    pub audit: std::sync::OnceLock<Arc<crate::audit::AuditLog>>,
    /// Every SMB connection of every executor, for server-initiated
    /// messages (oplock breaks).
    pub smb_routes: SmbRoutes,
    /// Who watches which directory (CHANGE_NOTIFY), fed by every batch.
    pub notify: crate::notify::NotifyHub,
    /// Every NFS connection, for callbacks on back channels, and the
    /// delegation breaks SMB connections decide (`nfs_callback.rs`).
    pub nfs_routes: crate::nfs_callback::NfsRoutes,
    /// The SMB share-mode table (set once at start), for breaks that
    /// reach kept durable opens (`nfs_callback::deliver`).
    pub share_modes: std::sync::OnceLock<Arc<smb::ShareModes>>,
    /// SMB connections with blocking LOCKs or parked CREATEs, woken by
    /// every change of the lock table (`duet_locks::LockManager::on_change`).
    pub lock_waiters: LockWaiters,
    /// The daemon's one NFS server (NFSv3/v4 state: clients, sessions,
    /// opens, delegations, NLM), made by executor 0 and used by the NFS
    /// connections of every executor (`SharedNfs`).
    pub nfs_server: std::sync::OnceLock<SharedNfs>,
    /// Every SMB session of every executor (MS-SMB2 GlobalSessionTable):
    /// a SESSION_SETUP naming another connection's session is checked
    /// and signed with it; session ids stay unique daemon-wide.
    pub smb_sessions: Arc<smb::SessionRegistry>,
}

/// The NFS server shared by every executor's NFS connections. The lock is
/// held for one sans-I/O step (a call planned, a batch's replies built, a
/// tick), never across an await.
pub type SharedNfs = Arc<Mutex<NfsServer>>;

/// Locks the shared NFS server. A panic inside a step leaves at worst a
/// lost update of its state, so a poisoned lock is used as is (as the lock
/// table's).
pub fn nfs_lock(n: &SharedNfs) -> std::sync::MutexGuard<'_, NfsServer> {
    n.lock().unwrap_or_else(|e| e.into_inner())
}

/// Who waits on the lock table: each waiting connection's wake-up channel
/// (one slot: a wake-up not yet taken stands for any number of changes).
#[derive(Default)]
pub struct LockWaiters {
    next: std::sync::atomic::AtomicU64,
    senders: Mutex<HashMap<u64, flume::Sender<()>>>,
}

impl LockWaiters {
    /// A channel woken after every change of the lock table, until
    /// [`LockWaiters::leave`] with its id.
    pub fn join(&self) -> (u64, flume::Receiver<()>) {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = flume::bounded(1);
        self.senders.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        (id, rx)
    }

    pub fn leave(&self, id: u64) {
        self.senders.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    /// The lock table changed: every waiter looks again.
    pub fn wake_all(&self) {
        for tx in self.senders.lock().unwrap_or_else(|e| e.into_inner()).values() {
            let _ = tx.try_send(());
        }
    }
}

/// How many server-initiated messages may wait for one SMB connection's
/// task; over it a break is dropped, and its holder, never told, loses the
/// grant at the break timeout (a break storm cannot grow memory).
const ROUTE_QUEUE: usize = 4096;

/// The connection registry: each SMB connection, under its
/// [`smb::Connection::key`] (the lock table's client for its opens), with
/// the channel its task polls, on whatever executor it runs. A lock-table
/// decision that names a holder to recall is routed here to the holder's
/// connection (`flume` channels are Send and their receivers are awaited
/// on the holder's own glommio executor).
#[derive(Default)]
pub struct SmbRoutes {
    conns: Mutex<HashMap<u64, flume::Sender<Routed>>>,
    /// Each client's route key ([`smb::Connection::client_route`], the
    /// holder of its leases) -> its connections, oldest first.
    clients: Mutex<HashMap<u64, Vec<u64>>>,
    /// Breaks dropped: the holder's queue was full or it was gone.
    pub dropped: std::sync::atomic::AtomicU64,
}

/// What one SMB connection's task is handed by another's.
pub enum Routed {
    /// An oplock or lease break for it to send.
    Recall(duet_locks::Break),
    /// A client reconnected naming session `previous` of user `uid`
    /// (PreviousSessionId): the connection holding it ends it.
    EndSession { previous: u64, uid: u32 },
    /// Changes in directories it watches (`crate::notify`).
    Changes(Vec<smb::Notified>),
    /// Close this open without a response (another connection's CREATE
    /// took its AppInstanceId, MS-SMB2 3.3.5.9.13).
    CloseOpen(u64),
    /// A frame that came through `channel`, a connection bound to one of
    /// this connection's sessions (multichannel, MS-SMB2 3.3.5.5).
    Channel { channel: u64, frame: Vec<u8>, grants: Vec<u16>, encrypted_by: Option<u64> },
    /// A frame this connection forwarded that found no connection to
    /// serve it (the session's connection is gone).
    ChannelLost { frame: Vec<u8>, grants: Vec<u16>, encrypted_by: Option<u64> },
    /// Connection `channel` was bound to this connection's `session`.
    Bound { session: u64, channel: u64, key: smb::crypto::SigningKey },
    /// A frame to write as it is: the answer to what came through this
    /// connection as a channel of another's session.
    Send(Vec<u8>),
    /// A session whose connection was lost, for this connection (one of
    /// its channels) to take over.
    Adopt(Box<smb::MovedSession>),
}

/// A connection's place in [`SmbRoutes`]; leaves it when dropped.
pub struct SmbRoute<'a> {
    routes: &'a SmbRoutes,
    key: u64,
    client: std::cell::Cell<Option<u64>>,
    pub rx: flume::Receiver<Routed>,
}

impl SmbRoutes {
    /// Registers the connection `key`; messages for it arrive on the
    /// returned route's receiver.
    pub fn register(&self, key: u64) -> SmbRoute<'_> {
        let (tx, rx) = flume::bounded(ROUTE_QUEUE);
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).insert(key, tx);
        SmbRoute { routes: self, key, client: std::cell::Cell::new(None), rx }
    }

    /// Delivers a break to its holder's connection, or for a lease (whose
    /// holder is its client) to the client's oldest connection still up
    /// (MS-SMB2 3.3.4.7). False when there is none or its queue is full.
    pub fn deliver(&self, b: duet_locks::Break) -> bool {
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conns.get(&b.holder.client).cloned().or_else(|| {
            let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            clients.get(&b.holder.client).and_then(|v| v.iter().find_map(|k| conns.get(k).cloned()))
        });
        drop(conns);
        let sent = tx.is_some_and(|tx| tx.try_send(Routed::Recall(b)).is_ok());
        if !sent {
            self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        sent
    }

    /// Hands "end session `previous` of user `uid`" to every connection
    /// but `from` (MS-SMB2 3.3.5.5.3: the server looks the previous session
    /// up in its global table; here each connection checks its own).
    pub fn end_session(&self, previous: u64, uid: u32, from: u64) {
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for (key, tx) in conns.iter() {
            if *key != from && tx.try_send(Routed::EndSession { previous, uid }).is_err() {
                self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Asks connection `key` to close its open `file` (AppInstanceId).
    pub fn close_open(&self, key: u64, file: u64) {
        let tx = self.conns.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        if !tx.is_some_and(|tx| tx.try_send(Routed::CloseOpen(file)).is_ok()) {
            self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Hands `msg` to connection `key`; false when it is gone or its
    /// queue is full.
    pub fn send(&self, key: u64, msg: Routed) -> bool {
        let tx = self.conns.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        let sent = tx.is_some_and(|tx| tx.try_send(msg).is_ok());
        if !sent {
            self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        sent
    }

    /// Hands changes to the watching connection `key`; false when it is
    /// gone or its queue is full.
    pub fn notify(&self, key: u64, changes: Vec<smb::Notified>) -> bool {
        let tx = self.conns.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        tx.is_some_and(|tx| tx.try_send(Routed::Changes(changes)).is_ok())
    }

    /// Whether connection `key` is registered.
    pub fn has(&self, key: u64) -> bool {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&key)
    }

    /// SMB connections registered now.
    pub fn len(&self) -> usize {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SmbRoute<'_> {
    /// The connection negotiated as client `client` (its route key): the
    /// breaks of that client's leases may come here.
    pub fn join_client(&self, client: u64) {
        if self.client.get() == Some(client) {
            return;
        }
        let mut clients = self.routes.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = self.client.get() {
            leave(&mut clients, old, self.key);
        }
        clients.entry(client).or_default().push(self.key);
        self.client.set(Some(client));
    }
}

fn leave(clients: &mut HashMap<u64, Vec<u64>>, client: u64, key: u64) {
    if let Some(v) = clients.get_mut(&client) {
        v.retain(|k| *k != key);
        if v.is_empty() {
            clients.remove(&client);
        }
    }
}

impl Drop for SmbRoute<'_> {
    fn drop(&mut self) {
        self.routes.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.key);
        if let Some(c) = self.client.get() {
            leave(&mut self.routes.clients.lock().unwrap_or_else(|e| e.into_inner()), c, self.key);
        }
    }
}

/// Connection counters for `/metrics` and `duetctl stats`.
#[derive(Default, Debug)]
pub struct ConnCounters {
    pub accepted_smb: std::sync::atomic::AtomicU64,
    pub accepted_nfs: std::sync::atomic::AtomicU64,
    /// Refused over `[limits] connections`.
    pub refused_total_limit: std::sync::atomic::AtomicU64,
    /// Refused over `[limits] connections_per_client`.
    pub refused_per_client_limit: std::sync::atomic::AtomicU64,
    /// Closed for a message or record over `[limits] smb_message_max` /
    /// `nfs_record_max` (or not framed as the protocol frames them).
    pub oversize_closed: std::sync::atomic::AtomicU64,
    /// SMB SESSION_SETUPs answered STATUS_LOGON_FAILURE.
    pub smb_logon_failures: std::sync::atomic::AtomicU64,
    /// (SMB, NFS) connections accepted per executor, by executor index.
    pub by_executor: Mutex<Vec<(u64, u64)>>,
}

impl ConnCounters {
    /// Counts a connection executor `index` accepted.
    fn accepted(&self, index: usize, smb: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if smb { &self.accepted_smb } else { &self.accepted_nfs }.fetch_add(1, Relaxed);
        let mut v = self.by_executor.lock().unwrap_or_else(|e| e.into_inner());
        if v.len() <= index {
            v.resize(index + 1, (0, 0));
        }
        if smb {
            v[index].0 += 1;
        } else {
            v[index].1 += 1;
        }
    }
}

/// One admitted connection; gives its place back when dropped.
pub struct ConnSlot {
    table: Arc<ConnTable>,
    peer: IpAddr,
}

impl ConnTable {
    pub fn new(limits: &LimitsConfig) -> Arc<ConnTable> {
        Arc::new(ConnTable {
            max_total: limits.connections,
            max_per_client: limits.connections_per_client,
            inner: Mutex::new((0, HashMap::new())),
            refused: Default::default(),
            counters: ConnCounters::default(),
            audit: std::sync::OnceLock::new(),
            smb_routes: SmbRoutes::default(),
            notify: crate::notify::NotifyHub::default(),
            nfs_routes: Default::default(),
            share_modes: std::sync::OnceLock::new(),
            lock_waiters: LockWaiters::default(),
            nfs_server: std::sync::OnceLock::new(),
            smb_sessions: Arc::new(smb::SessionRegistry::new()),
        })
    }

    /// A place for a connection from `peer`, or why there is none.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<ConnSlot, &'static str> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (total, per) = &mut *g;
        let mine = per.get(&peer).copied().unwrap_or(0);
        let why = if *total >= self.max_total {
            Some("limits.connections")
        } else if mine >= self.max_per_client {
            Some("limits.connections_per_client")
        } else {
            None
        };
        if let Some(why) = why {
            self.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let c = if *total >= self.max_total {
                &self.counters.refused_total_limit
            } else {
                &self.counters.refused_per_client_limit
            };
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(why);
        }
        *total += 1;
        *per.entry(peer).or_insert(0) += 1;
        Ok(ConnSlot { table: self.clone(), peer })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut g = self.table.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (total, per) = &mut *g;
        *total = total.saturating_sub(1);
        if let Some(n) = per.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.peer);
            }
        }
    }
}

/// Shares, users and share roots, as the protocol state machines see them.
#[derive(Default, Clone)]
pub struct Catalog {
    shares: Vec<(ShareRecord, NodeId)>,
    users: HashMap<String, UserRecord>,
    exports: Vec<ExportEntry>,
    /// How SMB shows SIDs: duet's users and their primary groups under the
    /// machine SID (None before the store has one).
    sid_map: Option<Arc<duet_fs::acl::SidMap>>,
}

fn fsid(name: &str) -> u64 {
    // FNV-1a: stable across restarts and nodes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h | 1
}

impl Catalog {
    /// Reads shares and users from the store and resolves each share's
    /// root; empty if the store cannot be read.
    pub async fn load(engine: &EngineHandle) -> Catalog {
        Catalog::try_load(engine).await.unwrap_or_default()
    }

    /// As [`Catalog::load`], or None when a read of the store failed (the
    /// caller keeps the catalog it has rather than lose every share).
    pub async fn try_load(engine: &EngineHandle) -> Option<Catalog> {
        let shares = match engine.store.query(Query::Shares).await {
            Ok(QueryAnswer::Shares(s)) => s,
            _ => return None,
        };
        let users: HashMap<String, UserRecord> = match engine.store.query(Query::Users).await {
            Ok(QueryAnswer::Users(u)) => u.into_iter().map(|u| (u.name.to_lowercase(), u)).collect(),
            _ => return None,
        };
        let machine = match engine.store.query(Query::AdminSecret(crate::server::MACHINE_SID.into())).await {
            Ok(QueryAnswer::Secret(v)) => v
                .and_then(|b| duet_fs::acl::Sid::parse(std::str::from_utf8(&b).ok()?))
                .filter(duet_fs::acl::SidMap::is_machine_sid),
            _ => return None,
        };
        let sid_map = machine.map(|m| {
            Arc::new(duet_fs::acl::SidMap {
                machine: Some(m),
                users: users.values().map(|u| u.uid).collect(),
                groups: users.values().map(|u| u.gid).collect(),
            })
        });
        let mut resolved = Vec::new();
        for s in shares {
            match resolve(engine, &s.path).await? {
                Some(root) => resolved.push((s, root)),
                None => tracing::warn!(share = %s.name, path = %s.path, "share path does not resolve to a directory"),
            }
        }
        let exports = resolved
            .iter()
            .filter(|(s, _)| s.nfs)
            .map(|(s, root)| ExportEntry {
                name: s.name.clone(),
                path: s.path.clone(),
                root: *root,
                read_only: s.read_only,
                root_squash: s.root_squash,
                clients: s.nfs_clients.iter().filter(|c| !c.starts_with(crate::admin::USER_PREFIX)).cloned().collect(),
                append_extension: s.append_extension,
                fsid: fsid(&s.name),
                uids: {
                    // The share's allowed users, by uid (names that are not
                    // users admit nobody).
                    let allowed = crate::admin::allowed_users(&s.nfs_clients);
                    (!allowed.is_empty()).then(|| {
                        allowed.iter().filter_map(|u| users.get(&u.to_lowercase()).map(|r| r.uid)).collect()
                    })
                },
                protocol_durability: s.durability == duet_cluster::records::Durability::Protocol,
            })
            .collect();
        Some(Catalog { shares: resolved, users, exports, sid_map })
    }
}

/// The directory a share's path names: Some(None) if it names none, None
/// if the store could not be read.
async fn resolve(engine: &EngineHandle, path: &str) -> Option<Option<NodeId>> {
    let mut b = Batch::new(Credentials::root(), now_ns());
    let mut cur = ObjRef::Id(ROOT_ID);
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        cur = b.push(Op::Lookup { dir: cur, name: comp.to_string() });
    }
    if b.ops.is_empty() {
        return Some(Some(ROOT_ID));
    }
    let r = engine.submit(b, RequestTag::new("internal", "resolve-share")).await.ok()?;
    Some(match r.results.last() {
        Some(Ok(OpOutput::Object { attrs, .. })) if attrs.ftype == duet_fs::FileType::Directory => Some(attrs.id),
        _ => None,
    })
}

impl smb::Directory for Catalog {
    fn user(&self, name: &str) -> Option<smb::UserEntry> {
        self.users.get(&name.to_lowercase()).map(|u| smb::UserEntry {
            nt_hash: u.nt_hash,
            uid: u.uid,
            gid: u.gid,
            enabled: u.enabled,
        })
    }

    fn share(&self, name: &str) -> Option<smb::ShareEntry> {
        self.shares()
            .into_iter()
            .find(|s| s.name.eq_ignore_ascii_case(name))
    }

    fn may_connect(&self, name: &str, uid: u32) -> bool {
        let Some((s, _)) = self.shares.iter().find(|(s, _)| s.name.eq_ignore_ascii_case(name)) else {
            return false;
        };
        let allowed = crate::admin::allowed_users(&s.nfs_clients);
        allowed.is_empty()
            || allowed.iter().any(|u| self.users.get(&u.to_lowercase()).is_some_and(|r| r.uid == uid))
    }

    fn sid_map(&self) -> Option<Arc<duet_fs::acl::SidMap>> {
        self.sid_map.clone()
    }

    fn users_by_uid(&self) -> Vec<duet_protocols::dcerpc::lsarpc::Account> {
        // Disabled users too: they still own files.
        let mut v: Vec<_> = self
            .users
            .values()
            .map(|u| duet_protocols::dcerpc::lsarpc::Account { name: u.name.clone(), uid: u.uid, gid: u.gid })
            .collect();
        v.sort_by(|a, b| (a.uid, &a.name).cmp(&(b.uid, &b.name)));
        v
    }

    fn shares(&self) -> Vec<smb::ShareEntry> {
        self.shares
            .iter()
            .filter(|(s, _)| s.smb)
            .map(|(s, root)| smb::ShareEntry {
                name: s.name.clone(),
                root: *root,
                read_only: s.read_only,
                guest_ok: s.guest_ok,
                encrypt: false,
                protocol_durability: s.durability == duet_cluster::records::Durability::Protocol,
            })
            .collect()
    }
}

/// What every connection task of one executor shares.
struct Ctx {
    engine: EngineHandle,
    catalog: RefCell<Catalog>,
    smb_cfg: smb::ServerConfig,
    nfs: Option<SharedNfs>,
    connections: std::cell::Cell<usize>,
    limits: LimitsConfig,
    conns: Arc<ConnTable>,
    next_conn: std::cell::Cell<u64>,
    /// This executor's index (0 makes the shared NFS server).
    index: usize,
}

/// Which listeners an executor opens.
#[derive(Clone)]
pub struct FrontendPlan {
    pub index: usize,
    /// The SMB and NFS sockets, bound once for the daemon (`listen.rs`).
    /// Executor 0 accepts on them and hands each connection to an
    /// executor in turn (`handoff`).
    pub smb: Option<Arc<std::net::TcpListener>>,
    pub nfs: Option<Arc<std::net::TcpListener>>,
    pub portmap: bool,
    /// Every executor's queue of accepted connections (index = executor),
    /// and this executor's own.
    pub handoff: Arc<Vec<flume::Sender<Handoff>>>,
    pub handed: flume::Receiver<Handoff>,
    pub handle_key: u64,
    pub server_guid: [u8; 16],
    /// One share-mode table for the SMB connections of every executor.
    pub share_modes: std::sync::Arc<smb::ShareModes>,
    /// The lock table behind it, which the NFS server shares.
    pub locks: std::sync::Arc<duet_locks::LockManager>,
    pub smb_require_signing: bool,
    pub smb_encrypt: bool,
    /// Offer multichannel (`[smb] multichannel`).
    pub smb_multichannel: bool,
    pub limits: LimitsConfig,
    /// One connection table for every executor.
    pub conns: Arc<ConnTable>,
    /// NFSv4 grace period after a restart, seconds.
    pub nfs_grace_s: u32,
    /// NFSv4 lease time, seconds.
    pub nfs_lease_s: u32,
    /// `[nfs] id_domain`: the NFSv4 domain of owner strings.
    pub nfs_id_domain: Option<String>,
    /// Where the owners of the NFSv4 clients holding state are kept, for
    /// their reclaims after a restart.
    pub nfs_clients_file: std::path::PathBuf,
    /// The data volume's capacity, kept current by the appliance
    /// (`capacity::refresh`), reported by both protocols.
    pub space: Arc<duet_protocols::space::Space>,
}

/// The file in the data directory that lists NFSv4 client owners (hex, one
/// per line): the clients that may reclaim state after a restart.
pub const NFS_CLIENTS_FILE: &str = "nfs4-clients";

fn load_nfs_clients(path: &std::path::Path) -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| hex::decode(l.trim()).ok()).filter(|o| !o.is_empty()).collect()
}

/// Replaces the list atomically (temporary file, fsync, rename).
fn store_nfs_clients(path: &std::path::Path, owners: &[Vec<u8>]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    for o in owners {
        writeln!(f, "{}", hex::encode(o))?;
    }
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Where the NLM hosts holding state are kept (beside the NFSv4 client
/// list).
fn nlm_hosts_file(plan: &FrontendPlan) -> std::path::PathBuf {
    plan.nfs_clients_file.with_file_name(crate::nlm::NLM_HOSTS_FILE)
}

/// Runs one protocol executor until `stop` fires. Reports the addresses
/// it bound through `bound` (once).
pub async fn run(
    mut plan: FrontendPlan,
    engine: EngineHandle,
    bound: flume::Sender<Result<Vec<ListenerInfo>, String>>,
    stop: flume::Receiver<()>,
    listeners_info: Arc<Mutex<Vec<ListenerInfo>>>,
) {
    let mut infos = Vec::new();
    let mut listeners: Vec<(TcpListener, &'static str)> = Vec::new();
    let mut nfs_port = 0;
    let join = |sock: &std::net::TcpListener, what: &str| {
        crate::listen::on_executor(sock).map_err(|e| {
            let addr = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
            format!("cannot listen on {addr} ({what}): {e}")
        })
    };
    let accepts_here = plan.index == 0;
    if let Some(sock) = plan.smb.as_ref().filter(|_| accepts_here) {
        match join(sock, "SMB") {
            Ok(l) => {
                infos.push(ListenerInfo { protocol: "smb".into(), addr: l.local_addr().map(|a| a.to_string()).unwrap_or_default() });
                listeners.push((l, "smb"));
            }
            Err(e) => {
                let _ = bound.send(Err(e));
                return;
            }
        }
    }
    if let Some(sock) = &plan.nfs {
        let addr = match sock.local_addr() {
            Ok(a) => a,
            Err(e) => {
                let _ = bound.send(Err(format!("the NFS listener has no address: {e}")));
                return;
            }
        };
        nfs_port = addr.port();
        if accepts_here {
            match join(sock, "NFS") {
                Ok(l) => {
                    infos.push(ListenerInfo { protocol: "nfs".into(), addr: addr.to_string() });
                    listeners.push((l, "nfs"));
                }
                Err(e) => {
                    let _ = bound.send(Err(e));
                    return;
                }
            }
        }
        if plan.portmap && accepts_here {
            // Only when nothing else serves portmap.
            let pm = SocketAddr::new(addr.ip(), duet_protocols::nfs::portmap::PMAP_PORT);
            match crate::listen::exclusive(pm).and_then(|l| crate::listen::on_executor(&l)) {
                Ok(l) => {
                    infos.push(ListenerInfo { protocol: "portmap".into(), addr: pm.to_string() });
                    listeners.push((l, "nfs"));
                }
                Err(e) => tracing::info!("portmap on {pm} not served ({e}); NFS clients need ports in their mount options"),
            }
        }
    }
    // Executor 0 makes the daemon's NFS server; the others serve the NFS
    // connections it hands them too.
    let made = plan.conns.nfs_server.get().cloned();
    let nfs = plan.nfs.as_ref().filter(|_| plan.index == 0 || made.is_none()).map(|_| {
        let mut seed = [0u8; 8];
        rand::thread_rng().fill_bytes(&mut seed);
        let tcp = 6;
        let cfg = NfsServerConfig {
            boot_seed: u64::from_le_bytes(seed),
            handle_key: plan.handle_key,
            portmap: vec![
                PortMapping { prog: 100003, vers: 3, prot: tcp, port: nfs_port },
                PortMapping { prog: 100003, vers: 4, prot: tcp, port: nfs_port },
                PortMapping { prog: 100005, vers: 3, prot: tcp, port: nfs_port },
                PortMapping { prog: 100005, vers: 1, prot: tcp, port: nfs_port },
                // NLM v4 and NSM v1 for NFSv3 locks (`nfs/server/nlm.rs`).
                PortMapping { prog: 100021, vers: 4, prot: tcp, port: nfs_port },
                PortMapping { prog: 100024, vers: 1, prot: tcp, port: nfs_port },
            ],
            max_ops: plan.limits.nfs_compound_ops,
            max_request: (plan.limits.nfs_record_max - (64 << 10)) as u32,
            max_io: plan.limits.nfs_io_max(),
            max_opens_per_client: plan.limits.nfs_open_files_per_client,
            max_readdir: plan.limits.nfs_readdir_max,
            grace_s: plan.nfs_grace_s,
            lease_time_s: plan.nfs_lease_s,
            reclaimers: load_nfs_clients(&plan.nfs_clients_file),
            nlm_hosts: crate::nlm::load_hosts(&nlm_hosts_file(&plan)),
            locks: plan.locks.clone(),
            space: plan.space.clone(),
            ..NfsServerConfig::default()
        };
        let nlm_restart = !cfg.nlm_hosts.is_empty();
        if nlm_restart {
            tracing::info!(hosts = cfg.nlm_hosts.len(), grace_s = cfg.grace_s, "NLM grace period: hosts that held locks may reclaim them");
        }
        if !cfg.reclaimers.is_empty() {
            tracing::info!(clients = cfg.reclaimers.len(), grace_s = cfg.grace_s, "NFSv4 grace period: clients that held state may reclaim it");
        }
        let mut server = NfsServer::new(cfg);
        if nlm_restart {
            // Their status monitors hear of the restart (SM_NOTIFY) and
            // their lock managers reclaim; the server is named by the
            // address it listens on, or the host name.
            let name = match plan.nfs.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.ip()) {
                Some(ip) if !ip.is_unspecified() => ip.to_string(),
                _ => crate::nlm::host_name(),
            };
            crate::nlm::deliver(server.nsm_reboot_notices(&name));
        }
        let shared: SharedNfs = Arc::new(Mutex::new(server));
        let _ = plan.conns.nfs_server.set(shared.clone());
        shared
    });
    let nfs = nfs.or(made.filter(|_| plan.nfs.is_some()));
    // The NFS server's housekeeping (leases, the client list, NLM hosts,
    // recalls from SMB) runs once, where it was made.
    let nfs_home = plan.index == 0;
    let smb_cfg = smb::ServerConfig {
        server_guid: plan.server_guid,
        share_modes: plan.share_modes.clone(),
        sessions: plan.conns.smb_sessions.clone(),
        require_signing: plan.smb_require_signing,
        encrypt: plan.smb_encrypt,
        multichannel: plan.smb_multichannel,
        max_read_size: plan.limits.smb_io_max(),
        max_write_size: plan.limits.smb_io_max(),
        max_transact_size: plan.limits.smb_transact_max,
        max_credits: plan.limits.smb_credits,
        max_opens_per_session: plan.limits.smb_open_files_per_session,
        max_watches: plan.limits.smb_notify_watches,
        durable_timeout_ms: plan.limits.smb_durable_timeout_ms as u32,
        max_durable: plan.limits.smb_durable_handles,
        // Never reached: the driver keeps batches and held frames within
        // requests_per_connection.
        max_pending: plan.limits.requests_per_connection.max(256),
        space: plan.space.clone(),
        ..smb::ServerConfig::default()
    };
    let ctx = Rc::new(Ctx {
        catalog: RefCell::new(Catalog::load(&engine).await),
        engine,
        smb_cfg,
        nfs: nfs.clone(),
        connections: std::cell::Cell::new(0),
        limits: plan.limits.clone(),
        conns: plan.conns.clone(),
        next_conn: std::cell::Cell::new(plan.index as u64 * (1 << 40) + 1),
        index: plan.index,
    });
    // The other executors share executor 0's ports: list them once.
    if plan.index == 0 {
        if let Ok(mut l) = listeners_info.lock() {
            l.extend(infos.iter().cloned());
        }
    }
    let _ = bound.send(Ok(infos));
    if let Some(n) = ctx.nfs.as_ref().filter(|_| nfs_home) {
        let c = ctx.catalog.borrow();
        let users = c.users.values().filter(|u| u.enabled).map(|u| (u.name.clone(), u.uid, u.gid));
        nfs_lock(n).set_ids(duet_protocols::nfs::server::IdMap::new(plan.nfs_id_domain.as_deref(), users));
    }
    // Refresh shares and users; tick NFS leases; keep the NFSv4 client
    // list on disk (read back for the grace period after a restart).
    {
        let ctx = ctx.clone();
        let clients_file = plan.nfs_clients_file.clone();
        let hosts_file = nlm_hosts_file(&plan);
        let id_domain = plan.nfs_id_domain.clone();
        glommio::spawn_local(async move {
            let mut stored = load_nfs_clients(&clients_file);
            let mut ids_set: Option<duet_protocols::nfs::server::IdMap> = None;
            let mut stored_hosts = crate::nlm::load_hosts(&hosts_file);
            loop {
                glommio::timer::sleep(Duration::from_secs(1)).await;
                if let Some(c) = Catalog::try_load(&ctx.engine).await {
                    *ctx.catalog.borrow_mut() = c;
                }
                if let Some(n) = ctx.nfs.as_ref().filter(|_| nfs_home) {
                    // Owner strings follow the users (`idmap.rs`).
                    let ids = {
                        let c = ctx.catalog.borrow();
                        duet_protocols::nfs::server::IdMap::new(
                            id_domain.as_deref(),
                            c.users.values().filter(|u| u.enabled).map(|u| (u.name.clone(), u.uid, u.gid)),
                        )
                    };
                    if ids_set.as_ref() != Some(&ids) {
                        nfs_lock(n).set_ids(ids.clone());
                        ids_set = Some(ids);
                    }
                    let (owners, runs) = {
                        let mut n = nfs_lock(n);
                        let ev = n.on_tick(now_ns());
                        // Batches of the tick (removals of delete-pending
                        // files whose last NFSv4 open expired) run here;
                        // their results are nobody's.
                        let (runs, ev): (Vec<_>, Vec<_>) =
                            ev.into_iter().partition(|e| matches!(e, duet_protocols::nfs::server::Event::Run { .. }));
                        crate::nfs_callback::route(&ctx.conns, ev);
                        (n.state_owners(), runs)
                    };
                    for r in runs {
                        if let duet_protocols::nfs::server::Event::Run { batch, tag, .. } = r {
                            let engine = ctx.engine.clone();
                            glommio::spawn_local(async move {
                                if let Err(e) = engine.submit(batch, RequestTag::new("nfs", tag)).await {
                                    tracing::warn!("removing a delete-pending file after its NFSv4 open expired: {e}");
                                }
                            })
                            .detach();
                        }
                    }
                    // Until the grace period is over, the clients of the
                    // last run stay listed too.
                    let keep = nfs_lock(n).in_grace(now_ns());
                    let mut want = owners;
                    if keep {
                        want.extend(stored.iter().cloned());
                        want.sort();
                        want.dedup();
                    }
                    if want != stored {
                        match store_nfs_clients(&clients_file, &want) {
                            Ok(()) => stored = want,
                            Err(e) => tracing::warn!("cannot write {}: {e}", clients_file.display()),
                        }
                    }
                    // The same for NLM hosts holding locks or shares.
                    let (mut hosts, keep, cbs) = {
                        let mut n = nfs_lock(n);
                        (n.nlm_hosts(), n.nlm_in_grace(now_ns()), n.take_nlm_callbacks())
                    };
                    crate::nlm::deliver(cbs);
                    if keep {
                        for h in &stored_hosts {
                            if !hosts.iter().any(|x| x.name == h.name) {
                                hosts.push(h.clone());
                            }
                        }
                        hosts.sort_by(|a, b| a.name.cmp(&b.name));
                    }
                    if hosts != stored_hosts {
                        match crate::nlm::store_hosts(&hosts_file, &hosts) {
                            Ok(()) => stored_hosts = hosts,
                            Err(e) => tracing::warn!("cannot write {}: {e}", hosts_file.display()),
                        }
                    }
                }
            }
        })
        .detach();
    }
    if let Some(n) = ctx.nfs.as_ref().filter(|_| nfs_home) {
        glommio::spawn_local(crate::nfs_callback::serve_recalls(n.clone(), ctx.conns.clone())).detach();
    }
    // The durable-handle scavenger (MS-SMB2 3.3.2.2), on the first
    // executor for the daemon's one table.
    if plan.index == 0 {
        glommio::spawn_local(durable_scavenger(plan.share_modes.clone(), ctx.engine.clone())).detach();
    }
    let mut accepts = Vec::new();
    let turn = Rc::new(std::cell::Cell::new(0usize));
    for (l, proto) in listeners {
        accepts.push(glommio::spawn_local(accept_loop(l, proto, ctx.clone(), plan.handoff.clone(), turn.clone())));
    }
    accepts.push(glommio::spawn_local(handed_loop(plan.handed.clone(), ctx.clone())));
    let _ = stop.recv_async().await;
    drop(accepts); // cancels the accept loops: no new connections
    // The listening sockets close once every executor has let go of them
    // (all are told to stop at once): a client connecting now is refused
    // at once instead of waiting out the drain.
    drop((plan.smb.take(), plan.nfs.take()));
    // Let the connections finish what they are doing.
    for _ in 0..500 {
        if ctx.connections.get() == 0 {
            break;
        }
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
}

/// How often kept durable handles are checked for their deadline (the
/// timeout of a handle is honoured within this).
const DURABLE_TICK: Duration = Duration::from_millis(100);

/// Closes kept durable opens whose timeout passed, and runs the batches
/// removing the delete-on-close files of those closed (by the timeout, or
/// by a break from an NFS client). Results are not waited for by anyone.
async fn durable_scavenger(share_modes: Arc<smb::ShareModes>, engine: EngineHandle) {
    let mut kept = 0;
    loop {
        glommio::timer::sleep(DURABLE_TICK).await;
        let now_kept = share_modes.durable().len();
        if now_kept != kept {
            tracing::debug!(kept = now_kept, was = kept, "SMB durable handles kept for lost connections");
            kept = now_kept;
        }
        for batch in share_modes.expire_durable(now_ns()) {
            let engine = engine.clone();
            glommio::spawn_local(async move {
                if let Err(e) = engine.submit(batch, RequestTag::new("smb", "durable-expire")).await {
                    tracing::warn!("removing a kept durable open's delete-on-close file: {e}");
                }
            })
            .detach();
        }
    }
}

/// A connection executor 0 accepted for another executor, and its protocol.
pub type Handoff = (glommio::net::AcceptedTcpStream, &'static str);

/// Executor 0's accept loop of one listener: each connection goes to the
/// next executor in turn (`turn` is shared by the listeners), which serves
/// it; one whose executor has stopped is served here.
async fn accept_loop(l: TcpListener, proto: &'static str, ctx: Rc<Ctx>, to: Arc<Vec<flume::Sender<Handoff>>>, turn: Rc<std::cell::Cell<usize>>) {
    loop {
        match l.shared_accept().await {
            Ok(accepted) => {
                let n = turn.get();
                turn.set(n.wrapping_add(1));
                let target = n % to.len().max(1);
                let accepted = if target == ctx.index {
                    accepted
                } else {
                    match to[target].send((accepted, proto)) {
                        Ok(()) => continue,
                        Err(flume::SendError((a, _))) => a,
                    }
                };
                serve(accepted.bind_to_executor(), proto, &ctx);
            }
            Err(e) => {
                tracing::warn!("{proto} accept: {e}");
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Serves the connections executor 0 hands to this one.
async fn handed_loop(rx: flume::Receiver<Handoff>, ctx: Rc<Ctx>) {
    while let Ok((accepted, proto)) = rx.recv_async().await {
        serve(accepted.bind_to_executor(), proto, &ctx);
    }
}

/// Admits a new connection (the connection limits) and serves it on this
/// executor.
fn serve(stream: glommio::net::TcpStream, proto: &'static str, ctx: &Rc<Ctx>) {
    let peer = stream.peer_addr().map(|a| a.ip()).unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let slot = match ctx.conns.admit(peer) {
        Ok(s) => s,
        Err(why) => {
            // The first few, then every 1000th: a flood must not flood the log.
            let n = ctx.conns.refused();
            if n <= 16 || n % 1000 == 0 {
                tracing::warn!(%peer, refused = n, "{why} reached; closing a new {proto} connection");
            }
            return;
        }
    };
    let c = ctx.clone();
    c.conns.counters.accepted(c.index, proto == "smb");
    c.connections.set(c.connections.get() + 1);
    glommio::spawn_local(async move {
        let r = if proto == "smb" { smb_conn(stream, &c).await } else { nfs_conn(stream, &c).await };
        if let Err(e) = r {
            tracing::debug!("{proto} connection: {e}");
        }
        c.connections.set(c.connections.get() - 1);
        drop(slot);
    })
    .detach();
}

/// Every operation of a batch that failed whole: the retry answer when the
/// cluster could not run it now (`EngineError::fs_error`), else an I/O error.
fn failed(batch_len: usize, e: &crate::engine::EngineError) -> BatchResult {
    BatchResult { results: vec![Err(e.fs_error()); batch_len], cost: Default::default() }
}

/// Whether a framed SMB2 reply is a SESSION_SETUP refused with
/// STATUS_LOGON_FAILURE (MS-SMB2 2.2.1: status at 8, command at 12).
fn logon_failed(frame: &[u8]) -> bool {
    let m = match frame.get(4..) {
        Some(m) if m.len() >= 64 && m[..4] == [0xFE, b'S', b'M', b'B'] => m,
        _ => return false,
    };
    let status = u32::from_le_bytes([m[8], m[9], m[10], m[11]]);
    let command = u16::from_le_bytes([m[12], m[13]]);
    command == 1 && status == 0xC000_006D
}

/// A connection's batch, back at its connection's task (by token): its
/// result, or word that it is still running after [`SMB_INTERIM_AFTER`]
/// (SMB batches only).
enum Done {
    Result(u64, BatchResult),
    Slow(u64),
}

/// How long an SMB batch runs before its requests are answered
/// STATUS_PENDING (`smb::Connection::go_async`): a slow device, or a
/// cluster waiting for a leader. The client then waits for the final
/// answer without its own request timer, and the engine waits for a
/// leader up to `[cluster] smb_leader_wait_ms` instead of `leader_wait_ms`.
const SMB_INTERIM_AFTER: Duration = Duration::from_millis(500);

/// Runs a connection's batch on the engine in a task of its own, so that
/// the connection reads and starts its next requests meanwhile (up to
/// `[limits] requests_per_connection`); the result comes back on `done`.
fn spawn_batch(
    engine: &EngineHandle,
    conns: &Arc<ConnTable>,
    tag: RequestTag,
    token: u64,
    batch: Batch,
    exempt: Option<duet_locks::Holder>,
    done: &flume::Sender<Done>,
) {
    let engine = engine.clone();
    let done = done.clone();
    // What it changes goes to the CHANGE_NOTIFY watchers and breaks
    // directory leases (`notify.rs`).
    let share_modes = conns.share_modes.get().filter(|m| m.directory_leases()).cloned();
    let origin = crate::notify::Origin { smb: tag.protocol == "smb", exempt };
    let watched = conns.notify.intents(&batch, share_modes.is_some()).map(|i| (i, conns.clone()));
    // An NFS rename moves the SMB opens (and leases) of what it renames;
    // a removal unnames them.
    let moves = if tag.protocol == "nfs" { nfs_renames(&batch) } else { Vec::new() };
    let smb_modes = (!moves.is_empty()).then(|| conns.share_modes.get().cloned()).flatten();
    glommio::spawn_local(async move {
        let n = batch.ops.len();
        let proto = tag.protocol.clone();
        let r = if proto == "smb" {
            let mut run = std::pin::pin!(engine.submit_pending(batch, tag));
            let early = futures_lite::future::or(async { Some((&mut run).await) }, async {
                glommio::timer::sleep(SMB_INTERIM_AFTER).await;
                None
            })
            .await;
            match early {
                Some(r) => r,
                None => {
                    let _ = done.send(Done::Slow(token));
                    run.await
                }
            }
        } else {
            engine.submit(batch, tag).await
        };
        let r = r.unwrap_or_else(|e| {
            if e.fs_error() == FsError::Unavailable {
                tracing::warn!("{proto} batch: {e}; the client gets the retry answer");
            } else {
                tracing::error!("{proto} batch: {e}");
            }
            failed(n, &e)
        });
        if let Some(m) = &smb_modes {
            apply_renames(m, &moves, &r);
        }
        if let Some((intents, conns)) = watched {
            let leases = share_modes.as_ref().map(|m| (m.locks().as_ref(), origin));
            conns.notify.publish(&intents, &r, &conns.smb_routes, leases);
        }
        // The connection may be gone: its batch still ran, as if the
        // client had disconnected after sending it.
        let _ = done.send(Done::Result(token, r));
    })
    .detach();
}

/// A name an NFS batch renames (op index, source directory, name, and
/// the target directory and name) or removes (no target).
type Rename = (usize, ObjRef, String, Option<(ObjRef, String)>);

fn nfs_renames(batch: &Batch) -> Vec<Rename> {
    batch
        .ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match op {
            duet_fs::Op::Rename { src_dir, src_name, dst_dir, dst_name, .. } => {
                Some((i, *src_dir, src_name.clone(), Some((*dst_dir, dst_name.clone()))))
            }
            duet_fs::Op::Remove { dir, name, .. } => Some((i, *dir, name.clone(), None)),
            _ => None,
        })
        .collect()
}

/// Tells the SMB share-mode table of the renames and removals that
/// succeeded (`ShareModes::moved`, `ShareModes::removed`); a directory
/// named by an earlier operation's result is that result's object.
fn apply_renames(modes: &smb::ShareModes, moves: &[Rename], r: &BatchResult) {
    let id = |o: &ObjRef| match o {
        ObjRef::Id(n) => Some(*n),
        ObjRef::Result(i) => r.results.get(*i).and_then(|x| x.as_ref().ok()).and_then(|x| x.attrs()).map(|a| a.id),
    };
    for (i, src, sname, to) in moves {
        if !matches!(r.results.get(*i), Some(Ok(_))) {
            continue;
        }
        match (id(src), to) {
            (Some(s), Some((dst, dname))) => {
                if let Some(d) = id(dst) {
                    modes.moved(s, sname, d, dname);
                }
            }
            (Some(s), None) => modes.removed(s, sname),
            _ => {}
        }
    }
}

/// What woke a connection task.
enum Wake {
    Read(std::io::Result<usize>),
    Done(Done),
    /// Time to look at the lock table again.
    Tick,
    /// A break for one of this connection's opens, or a session to end,
    /// routed from another connection (or this one) through [`SmbRoutes`].
    Recall(Routed),
    /// An NFS callback (record-marked) for this connection's back channel.
    Callback(Vec<u8>),
}

/// Waits for bytes from the client (only while fewer than `limit`
/// requests are in progress) or for a batch to finish. Dropping the read
/// loses nothing: glommio's stream reads are readiness-based, and the
/// bytes stay in the socket until the next read.
async fn next_wake(stream: &mut TcpStream, tmp: &mut [u8], done: &flume::Receiver<Done>, in_flight: usize, limit: usize) -> Wake {
    let finished = async { done.recv_async().await.map(Wake::Done).unwrap_or(Wake::Read(Ok(0))) };
    if in_flight >= limit {
        return finished.await;
    }
    if in_flight == 0 {
        return Wake::Read(stream.read(tmp).await);
    }
    futures_lite::future::or(async { Wake::Read(stream.read(tmp).await) }, finished).await
}

/// How often a connection with blocking LOCKs or CREATEs waiting looks
/// at the lock table unasked: a change of the table wakes it at once
/// (`LockWaiters`); this tick catches the break and lock timeouts (a
/// deadline passes without any change) within its length.
const LOCK_POLL: Duration = Duration::from_millis(50);

/// [`next_wake`], or a tick when `waiting` (Some: the lock table's
/// wake-up channel) and the table changed, or after [`LOCK_POLL`].
async fn next_wake_or_tick(
    stream: &mut TcpStream,
    tmp: &mut [u8],
    done: &flume::Receiver<Done>,
    in_flight: usize,
    limit: usize,
    waiting: Option<&flume::Receiver<()>>,
) -> Wake {
    let Some(changed) = waiting else {
        return next_wake(stream, tmp, done, in_flight, limit).await;
    };
    futures_lite::future::or(next_wake(stream, tmp, done, in_flight, limit), async {
        futures_lite::future::or(
            async {
                let _ = changed.recv_async().await;
            },
            glommio::timer::sleep(LOCK_POLL),
        )
        .await;
        Wake::Tick
    })
    .await
}

async fn smb_conn(mut stream: TcpStream, ctx: &Ctx) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let peer: IpAddr = stream.peer_addr().map(|a| a.ip()).unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let mut cfg = ctx.smb_cfg.clone();
    cfg.interface = stream.local_addr().ok();
    let mut seed = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut seed);
    let mut conn = smb::Connection::new(cfg, now_ns(), &seed);
    let route = ctx.conns.smb_routes.register(conn.key());
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut tmp = vec![0u8; 1 << 18];
    let (done_tx, done_rx) = flume::unbounded::<Done>();
    let limit = ctx.limits.requests_per_connection;
    let mut in_flight = 0usize;
    let mut queue: VecDeque<smb::Event> = VecDeque::new();
    // Joined the lock table's waiters the first time this connection had
    // a LOCK or CREATE waiting; left when it ends.
    let mut lock_wake: Option<(u64, flume::Receiver<()>)> = None;
    let result: std::io::Result<()> = async {
        loop {
            // Start every complete frame, as long as the limit allows.
            while in_flight + conn.held() < limit && buf.len() >= 4 {
                let len = u32::from_be_bytes([0, buf[1], buf[2], buf[3]]) as usize;
                if buf[0] != 0 || len > ctx.limits.smb_message_max {
                    ctx.conns.counters.oversize_closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(()); // not direct TCP, or over the limit: drop
                }
                if buf.len() < 4 + len {
                    // Room for the whole frame at once: no growing copies.
                    buf.reserve(4 + len - buf.len());
                    break;
                }
                // The frame leaves `buf` without a copy of its bytes (a
                // 1 MiB WRITE); what follows it moves to a new buffer.
                let rest = buf.split_off(4 + len);
                let framed = std::mem::replace(&mut buf, rest);
                let frame = &framed[4..];
                tracing::trace!(key = conn.key(), first = ?frame.get(..16), len = frame.len(), "SMB frame in");
                queue.extend(conn.on_frame(frame, now_ns(), &*ctx.catalog.borrow()));
                if let Some(c) = conn.client_route() {
                    route.join_client(c);
                }
                if conn.watches_changed() {
                    ctx.conns.notify.set_watches(conn.key(), conn.watched());
                }
                if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                    return Ok(());
                }
            }
            if conn.watches_changed() {
                ctx.conns.notify.set_watches(conn.key(), conn.watched());
            }
            let ticking = conn.waiting_locks() > 0 || conn.parked_opens() > 0;
            if ticking && lock_wake.is_none() {
                lock_wake = Some(ctx.conns.lock_waiters.join());
            }
            let waiting = lock_wake.as_ref().filter(|_| ticking).map(|(_, rx)| rx);
            let wake = futures_lite::future::or(
                async { route.rx.recv_async().await.map(Wake::Recall).unwrap_or(Wake::Tick) },
                next_wake_or_tick(&mut stream, &mut tmp, &done_rx, in_flight + conn.held(), limit, waiting),
            )
            .await;
            match wake {
                Wake::Recall(Routed::Recall(b)) => {
                    queue.extend(conn.on_recall(b, now_ns()));
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
                Wake::Recall(Routed::CloseOpen(file)) => {
                    queue.extend(conn.close_open(file, now_ns()));
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
                Wake::Recall(Routed::Channel { channel, frame, grants, encrypted_by }) => {
                    queue.extend(conn.on_channel_frame(channel, &frame, grants, encrypted_by, now_ns(), &*ctx.catalog.borrow()));
                    if conn.watches_changed() {
                        ctx.conns.notify.set_watches(conn.key(), conn.watched());
                    }
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
                Wake::Recall(Routed::ChannelLost { frame, grants, encrypted_by }) => {
                    queue.extend(conn.on_channel_lost(&frame, grants, encrypted_by, now_ns(), &*ctx.catalog.borrow()));
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
                Wake::Recall(Routed::Bound { session, channel, key }) => conn.add_channel(session, channel, key),
                Wake::Recall(Routed::Send(frame)) => stream.write_all(&frame).await?,
                Wake::Recall(Routed::Adopt(m)) => {
                    queue.extend(conn.adopt_session(*m, now_ns()));
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
                Wake::Recall(Routed::Changes(v)) => {
                    queue.extend(conn.on_changes(&v));
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
                Wake::Recall(Routed::EndSession { previous, uid }) => {
                    queue.extend(conn.end_previous_session(previous, uid, now_ns()));
                    if conn.watches_changed() {
                        ctx.conns.notify.set_watches(conn.key(), conn.watched());
                    }
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
                Wake::Callback(_) => {}
                Wake::Tick => {
                    queue.extend(conn.poll_locks(now_ns()));
                    queue.extend(conn.poll_opens(now_ns(), &*ctx.catalog.borrow()));
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
                Wake::Read(r) => {
                    let n = r?;
                    if n == 0 {
                        return Ok(());
                    }
                    buf.extend_from_slice(&tmp[..n]);
                }
                Wake::Done(Done::Slow(token)) => {
                    queue.extend(conn.go_async(token));
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
                Wake::Done(Done::Result(token, r)) => {
                    in_flight -= 1;
                    queue.extend(conn.on_batch_done(token, r, now_ns()));
                    queue.extend(conn.resume(now_ns(), &*ctx.catalog.borrow()));
                    if smb_events(&mut stream, &mut queue, peer, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
            }
        }
    }
    .await;
    // The connection is gone (MS-SMB2 3.3.7.1): its opens close as a
    // CLOSE would, delete-on-close ones removed (the batches run after
    // the ones it had in flight); its watches end.
    if let Some((id, _)) = lock_wake {
        ctx.conns.lock_waiters.leave(id);
    }
    ctx.conns.notify.set_watches(conn.key(), Vec::new());
    for ev in conn.on_disconnect(now_ns()) {
        match ev {
            smb::Event::Run { token, batch, tag, exempt } => {
                spawn_batch(&ctx.engine, &ctx.conns, RequestTag::new("smb", tag), token, batch, exempt, &done_tx);
            }
            smb::Event::DeletePending { node, from } => ctx.conns.notify.delete_pending(node, from, &ctx.conns.smb_routes),
            smb::Event::Adopt(m) => {
                // The first channel still up takes the session over;
                // none: its opens close now (the scavenger's next round).
                let taken = m.candidates().into_iter().any(|c| ctx.conns.smb_routes.send(c, Routed::Adopt(m.clone())));
                if !taken {
                    if let Some(modes) = ctx.conns.share_modes.get() {
                        modes.give_up_kept(m.files());
                    }
                }
            }
            _ => {}
        }
    }
    // Until the batches removing its delete-on-close files are over, a
    // CREATE of those names (the client reconnecting) waits for them: see
    // them done, so that the names are released (`ShareModes::removing_at`;
    // such a CREATE waits 5 s at most).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while conn.removing() && std::time::Instant::now() < deadline {
        let next = futures_lite::future::or(async { done_rx.recv_async().await.ok() }, async {
            glommio::timer::sleep(Duration::from_secs(1)).await;
            None
        });
        if let Some(Done::Result(token, r)) = next.await {
            let _ = conn.on_batch_done(token, r, now_ns());
        }
    }
    conn.abandon_removals();
    result
}

/// Carries out an SMB connection's events: frames are sent, batches
/// started. True when the connection is to be closed.
async fn smb_events(
    stream: &mut TcpStream,
    queue: &mut VecDeque<smb::Event>,
    peer: IpAddr,
    ctx: &Ctx,
    done: &flume::Sender<Done>,
    in_flight: &mut usize,
) -> std::io::Result<bool> {
    while let Some(ev) = queue.pop_front() {
        match ev {
            smb::Event::Send(bytes) => {
                tracing::trace!(len = bytes.len(), first = ?bytes.get(4..20), "SMB frame out");
                if logon_failed(&bytes) {
                    // Who and when, never what was typed: NTLM carries no
                    // password, and nothing of the request is logged.
                    ctx.conns.counters.smb_logon_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Some(a) = ctx.conns.audit.get() {
                        a.record("-", &peer.to_string(), "smb logon", "refused: STATUS_LOGON_FAILURE");
                    }
                    tracing::warn!(%peer, "SMB logon failed (STATUS_LOGON_FAILURE)");
                }
                stream.write_all(&bytes).await?
            }
            smb::Event::Run { token, batch, tag, exempt } => {
                spawn_batch(&ctx.engine, &ctx.conns, RequestTag::new("smb", tag), token, batch, exempt, done);
                *in_flight += 1;
            }
            smb::Event::Close => {
                tracing::debug!(%peer, "SMB connection closed by the server");
                return Ok(true);
            }
            smb::Event::Recall(b) => {
                crate::nfs_callback::deliver(&ctx.conns, b);
            }
            smb::Event::EndSession { previous, uid, from } => {
                ctx.conns.smb_routes.end_session(previous, uid, from);
            }
            smb::Event::CloseOpen { conn, file } => ctx.conns.smb_routes.close_open(conn, file),
            smb::Event::DeletePending { node, from } => ctx.conns.notify.delete_pending(node, from, &ctx.conns.smb_routes),
            smb::Event::SendOn { conn, frame } => {
                // The channel may be gone: its client sees its connection
                // closed, and what it asked on the session goes on.
                ctx.conns.smb_routes.send(conn, Routed::Send(frame));
            }
            smb::Event::Forward { owner, channel, frame, grants, encrypted_by } => {
                tracing::debug!(owner, channel, bytes = frame.len(), "SMB frame forwarded to its session's connection");
                let routes = &ctx.conns.smb_routes;
                if !routes.has(owner) {
                    routes.send(channel, Routed::ChannelLost { frame, grants, encrypted_by });
                } else if !routes.send(owner, Routed::Channel { channel, frame, grants, encrypted_by }) {
                    // Its queue is full: the client retries on a lost
                    // answer as on a slow server; nothing ran.
                    tracing::warn!("SMB channel frame dropped: the session's connection is not keeping up");
                }
            }
            smb::Event::Bound { owner, session, channel, key } => {
                ctx.conns.smb_routes.send(owner, Routed::Bound { session, channel, key });
            }
            smb::Event::Adopt(m) => {
                let taken = m.candidates().into_iter().any(|c| ctx.conns.smb_routes.send(c, Routed::Adopt(m.clone())));
                if !taken {
                    if let Some(modes) = ctx.conns.share_modes.get() {
                        modes.give_up_kept(m.files());
                    }
                }
            }
        }
    }
    Ok(false)
}

async fn nfs_conn(mut stream: TcpStream, ctx: &Ctx) -> std::io::Result<()> {
    let Some(server) = ctx.nfs.clone() else { return Ok(()) };
    let _ = stream.set_nodelay(true);
    let peer: IpAddr = stream.peer_addr().map(|a| a.ip()).unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let id = ctx.next_conn.get();
    ctx.next_conn.set(id + 1);
    let route = ctx.conns.nfs_routes.register(id);
    let mut asm = duet_protocols::nfs::rpc::RecordAssembler::new(ctx.limits.nfs_record_max, 1024);
    let mut tmp = vec![0u8; 1 << 18];
    // Bytes read and not yet given to the record assembler.
    let mut inbuf: Vec<u8> = Vec::with_capacity(1 << 16);
    let (done_tx, done_rx) = flume::unbounded::<Done>();
    let limit = ctx.limits.requests_per_connection;
    let mut in_flight = 0usize;
    let result = async {
        let mut queue: VecDeque<duet_protocols::nfs::server::Event> = VecDeque::new();
        loop {
            // Start every complete record, as long as the limit allows.
            let mut off = 0;
            while in_flight < limit && off < inbuf.len() {
                let used = match asm.push(&inbuf[off..]) {
                    Ok(u) => u,
                    Err(e) => {
                        ctx.conns.counters.oversize_closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tracing::info!(%peer, "closing NFS connection: {e:?}");
                        return Ok(());
                    }
                };
                off += used;
                let Some(record) = asm.take_record() else {
                    if used == 0 {
                        break;
                    }
                    continue;
                };
                let exports = ctx.catalog.borrow().exports.clone();
                queue.extend(nfs_lock(&server).on_call(id, peer, &record, now_ns(), &exports));
                if nfs_events(&mut stream, &mut queue, id, ctx, &done_tx, &mut in_flight).await? {
                    return Ok(());
                }
            }
            inbuf.drain(..off);
            // Or a callback another connection's call decided for this
            // one's back channel.
            let wake = futures_lite::future::or(
                async { route.rx.recv_async().await.map(Wake::Callback).unwrap_or(Wake::Tick) },
                next_wake(&mut stream, &mut tmp, &done_rx, in_flight, limit),
            )
            .await;
            match wake {
                Wake::Callback(bytes) => stream.write_all(&bytes).await?,
                Wake::Tick | Wake::Recall(_) => {}
                Wake::Read(r) => {
                    let n = r?;
                    if n == 0 {
                        return Ok(());
                    }
                    inbuf.extend_from_slice(&tmp[..n]);
                }
                Wake::Done(Done::Slow(_)) => {}
                Wake::Done(Done::Result(token, r)) => {
                    in_flight -= 1;
                    queue.extend(nfs_lock(&server).on_batch_done(token, r, now_ns()));
                    if nfs_events(&mut stream, &mut queue, id, ctx, &done_tx, &mut in_flight).await? {
                        return Ok(());
                    }
                }
            }
        }
    }
    .await;
    nfs_lock(&server).on_conn_closed(id);
    result
}

/// Carries out the NFS server's events for connection `id`: replies are
/// sent, batches started. True when the connection is to be closed.
async fn nfs_events(
    stream: &mut TcpStream,
    queue: &mut VecDeque<duet_protocols::nfs::server::Event>,
    id: u64,
    ctx: &Ctx,
    done: &flume::Sender<Done>,
    in_flight: &mut usize,
) -> std::io::Result<bool> {
    use duet_protocols::nfs::server::Event;
    while let Some(ev) = queue.pop_front() {
        match ev {
            Event::Reply { conn, bytes } if conn == id => stream.write_all(&bytes).await?,
            // A callback for another connection's back channel.
            Event::Reply { conn, bytes } => {
                ctx.conns.nfs_routes.send(conn, bytes);
            }
            Event::Run { token, batch, tag } => {
                spawn_batch(&ctx.engine, &ctx.conns, RequestTag::new("nfs", tag), token, batch, None, done);
                *in_flight += 1;
            }
            Event::Close(conn) if conn == id => return Ok(true),
            Event::Close(_) => {}
            // An NFSv4 operation broke an SMB lease or oplock: to the
            // holder's connection, on whatever executor it lives.
            Event::Recall(b) => {
                crate::nfs_callback::deliver(&ctx.conns, b);
            }
        }
    }
    // NLM GRANTED calls to clients' lock managers decided meanwhile.
    if let Some(n) = &ctx.nfs {
        let cbs = nfs_lock(n).take_nlm_callbacks();
        if !cbs.is_empty() {
            crate::nlm::deliver(cbs);
        }
    }
    Ok(false)
}
