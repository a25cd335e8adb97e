//! Starting and stopping the appliance: memlock, the metadata store, first
//! start, the data executor (engine, destager, admin API), signals and drain.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use duet_admin_api::ListenerInfo;
use duet_cluster::machine::AdminError;
use duet_cluster::records::{Command, ShareRecord};
use duet_cluster_store::{metadata_dir, Group, Query, QueryAnswer, Store, StoreError, StoreHandle};
use glommio::{LocalExecutorBuilder, Placement};

use crate::admin::{self, Admin, ClusterInfo, NodeInfo};
use crate::frontend::{self, FrontendPlan, NFS_CLIENTS_FILE};
use crate::config::Config;
use crate::engine::{self, EngineHandle};
use crate::peers::{Peers, PeersHandle};
use crate::secrets;

/// How long a node of a multi-node cluster waits at its first start for
/// the group to elect a leader and initialise the metadata.
pub const CLUSTER_JOIN_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("metadata store: {0}")]
    Store(#[from] duet_cluster_store::StoreError),
    #[error("{0}")]
    Other(String),
}

/// Raises RLIMIT_MEMLOCK so that io_uring can register the executors'
/// buffers; says clearly why when it cannot.
pub fn raise_memlock(need_bytes: u64) -> Result<(), StartError> {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) != 0 {
            return Err(StartError::Other("cannot read the memlock limit".into()));
        }
        if lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur >= need_bytes {
            return Ok(());
        }
        let want = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &want) == 0 {
            return Ok(());
        }
        if lim.rlim_max == libc::RLIM_INFINITY || lim.rlim_max >= need_bytes {
            let want = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &want) == 0 {
                return Ok(());
            }
        }
        Err(StartError::Other(format!(
            "the memlock limit is {} KiB and duetd needs {} KiB for io_uring buffers; run it as root, \
             raise `ulimit -l`, or set LimitMEMLOCK=infinity in its systemd unit",
            lim.rlim_cur / 1024,
            need_bytes / 1024
        )))
    }
}

fn token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(duet_admin_api::TOKEN_FILE_NAME)
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

/// The first admin password: the systemd credential `admin-password`
/// (`LoadCredential=`, a root-only file the disk image's first boot writes)
/// when there is one, else a random one that is printed once. Returns the
/// password and, when given, where it came from (never printed).
fn initial_admin_password() -> Result<(String, Option<String>), StartError> {
    if let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY") {
        let path = Path::new(&dir).join("admin-password");
        if path.exists() {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| StartError::Other(format!("cannot read {}: {e}", path.display())))?;
            let pw = text.lines().next().unwrap_or("").trim().to_string();
            if pw.len() < 8 {
                return Err(StartError::Other(format!("{}: the admin password needs at least 8 characters", path.display())));
            }
            return Ok((pw, Some("the credential admin-password".into())));
        }
    }
    Ok((secrets::random_password(), None))
}

/// First start: the root, the default share, the admin user and token.
/// Prints the admin password once. Later starts only recreate a missing
/// token file.
pub fn first_start(cfg: &Config, store: &StoreHandle) -> Result<u64, StartError> {
    let QueryAnswer::Bool(initialized) = store.query_blocking(Query::Initialized)? else {
        return Err(StartError::Other("unexpected answer from the store".into()));
    };
    let tpath = token_path(&cfg.data_dir);
    let now = admin::now_ns();
    if !initialized {
        let (password, given) = initial_admin_password()?;
        let token = secrets::random_hex(32);
        let share = default_share(cfg);
        let out = store.command_blocking(Command::Init {
            now_ns: now,
            admin_secrets: vec![
                ("user:admin".into(), secrets::hash_secret(&password)),
                ("token".into(), secrets::hash_secret(&token)),
                ("nfs_handle_key".into(), secrets::random_hex(8).into_bytes()),
                (MACHINE_SID.into(), secrets::random_machine_sid().into_bytes()),
            ],
            shares: vec![share],
        })?;
        if let Some(Err(e)) = out.applied.admin {
            return Err(StartError::Other(format!("first start: {e}")));
        }
        write_private(&tpath, &format!("{token}\n"))
            .map_err(|e| StartError::Other(format!("cannot write {}: {e}", tpath.display())))?;
        println!("duetd: first start in {}", cfg.data_dir.display());
        match &given {
            Some(from) => println!("duetd: admin user: admin   password: the one in {from} (not shown)"),
            None => println!("duetd: admin user: admin   password: {password}   (shown once; keep it)"),
        }
        println!("duetd: API token written to {} (duetctl reads it)", tpath.display());
        println!("duetd: share '{}' at {} (SMB and NFS)", cfg.default_share.name, cfg.default_share.path);
        let _ = std::io::stdout().flush();
    } else if !tpath.exists() {
        let token = secrets::random_hex(32);
        store.command_blocking(Command::Init {
            now_ns: now,
            admin_secrets: vec![("token".into(), secrets::hash_secret(&token))],
            shares: vec![],
        })?;
        write_private(&tpath, &format!("{token}\n"))
            .map_err(|e| StartError::Other(format!("cannot write {}: {e}", tpath.display())))?;
        tracing::info!("a new API token was written to {}", tpath.display());
    }
    // The key that makes NFS file handles unforgeable; stable across restarts.
    let key = match store.query_blocking(Query::AdminSecret("nfs_handle_key".into()))? {
        QueryAnswer::Secret(Some(k)) => k,
        _ => {
            let k = secrets::random_hex(8).into_bytes();
            store.command_blocking(Command::Init {
                now_ns: now,
                admin_secrets: vec![("nfs_handle_key".into(), k.clone())],
                shares: vec![],
            })?;
            k
        }
    };
    let key = std::str::from_utf8(&key).ok().and_then(|h| u64::from_str_radix(h, 16).ok()).unwrap_or(0x6475_6574);
    // The machine SID SMB shows duet's users under; data directories made
    // before it existed get one now.
    if let QueryAnswer::Secret(None) = store.query_blocking(Query::AdminSecret(MACHINE_SID.into()))? {
        store.command_blocking(Command::Init {
            now_ns: now,
            admin_secrets: vec![(MACHINE_SID.into(), secrets::random_machine_sid().into_bytes())],
            shares: vec![],
        })?;
    }
    Ok(key)
}

/// The admin-secret key of the machine SID (`S-1-5-21-a-b-c`; SMB shows
/// duet's users and their groups under it, `frontend::Catalog`). Not a
/// secret, but kept with them: one per installation, replicated.
pub const MACHINE_SID: &str = "machine_sid";

/// First start of a node of a multi-node cluster: a leader claims the
/// first start with the root and the default share (the first such entry
/// applied wins), then the winner adds the admin user and the NFS handle
/// key; the others wait until those are applied here. The API token
/// is per node (`admin.token` in each data directory, its hash kept in
/// memory, never replicated): returns the NFS handle key and the token's
/// hash.
pub fn first_start_cluster(cfg: &Config, store: &StoreHandle) -> Result<(u64, Vec<u8>), StartError> {
    let deadline = Instant::now() + CLUSTER_JOIN_WAIT;
    let mut waiting_logged = false;
    // Whether this node's claim (the default share) was the first applied.
    let mut won = false;
    // Since when the metadata has its root but no secrets yet.
    let mut orphan_since: Option<Instant> = None;
    let unexpected = || StartError::Other("unexpected answer from the store".into());
    loop {
        // Done once the cluster's secrets are there (the last step).
        if let QueryAnswer::Secret(Some(_)) = store.query_blocking(Query::AdminSecret("nfs_handle_key".into()))? {
            break;
        }
        let QueryAnswer::Bool(initialized) = store.query_blocking(Query::Initialized)? else { return Err(unexpected()) };
        let QueryAnswer::Raft(raft) = store.query_blocking(Query::RaftStatus)? else { return Err(unexpected()) };
        if initialized {
            orphan_since.get_or_insert_with(Instant::now);
        }
        if raft.leader && !initialized {
            // Two leaders in a row may both claim: the root and the
            // default share go in first, alone, and the claim whose share
            // is applied first wins (the other gets "already exists").
            let claim = Command::Init { now_ns: admin::now_ns(), admin_secrets: vec![], shares: vec![default_share(cfg)] };
            match store.command_blocking(claim) {
                Ok(out) => match out.applied.admin {
                    Some(Err(AdminError::Exists(_))) => {}
                    Some(Err(e)) => return Err(StartError::Other(format!("first start: {e}"))),
                    _ => won = true,
                },
                // Leadership moved before the entry committed: look again.
                Err(StoreError::NotLeader { .. } | StoreError::Superseded { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // The winner sets the admin password and the NFS handle key; if it
        // lost its leadership meanwhile, the leader does after 5 s.
        let orphaned = orphan_since.is_some_and(|t| t.elapsed() > Duration::from_secs(5));
        if raft.leader && initialized && (won || orphaned) {
            let password = secrets::random_password();
            let secrets_cmd = Command::Init {
                now_ns: admin::now_ns(),
                admin_secrets: vec![
                    ("user:admin".into(), secrets::hash_secret(&password)),
                    ("nfs_handle_key".into(), secrets::random_hex(8).into_bytes()),
                    (MACHINE_SID.into(), secrets::random_machine_sid().into_bytes()),
                ],
                shares: vec![],
            };
            match store.command_blocking(secrets_cmd) {
                Ok(out) => {
                    if let Some(Err(e)) = out.applied.admin {
                        return Err(StartError::Other(format!("first start: {e}")));
                    }
                    println!("duetd: first start of the cluster, initialised by node {}", cfg.node_id);
                    println!("duetd: admin user: admin   password: {password}   (shown once; keep it; valid on every node)");
                    let _ = std::io::stdout().flush();
                    continue;
                }
                Err(StoreError::NotLeader { .. } | StoreError::Superseded { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        } else if !raft.leader && !waiting_logged {
            tracing::info!("first start: waiting for the cluster to elect a leader and initialise the metadata");
            waiting_logged = true;
        }
        if Instant::now() > deadline {
            return Err(StartError::Other(format!(
                "first start of a cluster node: no leader initialised the metadata within {} s; are a majority \
                 of [cluster] peers running, reachable on their cluster addresses, and configured with the same \
                 secret file? (refused peers are logged)",
                CLUSTER_JOIN_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let key = match store.query_blocking(Query::AdminSecret("nfs_handle_key".into()))? {
        QueryAnswer::Secret(Some(k)) => k,
        _ => return Err(StartError::Other("the cluster's metadata has no NFS handle key".into())),
    };
    // A cluster formed before the machine SID existed gets one from the
    // node that leads when it starts; the others do not wait for it (SMB
    // shows Unix SIDs until the catalog sees one).
    if let QueryAnswer::Secret(None) = store.query_blocking(Query::AdminSecret(MACHINE_SID.into()))? {
        if let QueryAnswer::Raft(raft) = store.query_blocking(Query::RaftStatus)? {
            if raft.leader {
                let cmd = Command::Init {
                    now_ns: admin::now_ns(),
                    admin_secrets: vec![(MACHINE_SID.into(), secrets::random_machine_sid().into_bytes())],
                    shares: vec![],
                };
                match store.command_blocking(cmd) {
                    Ok(_) | Err(StoreError::NotLeader { .. } | StoreError::Superseded { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    let key = std::str::from_utf8(&key).ok().and_then(|h| u64::from_str_radix(h, 16).ok()).unwrap_or(0x6475_6574);
    // This node's API token.
    let tpath = token_path(&cfg.data_dir);
    let token = match std::fs::read_to_string(&tpath) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => {
            let t = secrets::random_hex(32);
            write_private(&tpath, &format!("{t}\n"))
                .map_err(|e| StartError::Other(format!("cannot write {}: {e}", tpath.display())))?;
            println!("duetd: API token of node {} written to {} (duetctl reads it)", cfg.node_id, tpath.display());
            let _ = std::io::stdout().flush();
            t
        }
    };
    Ok((key, secrets::hash_secret(&token)))
}

fn default_share(cfg: &Config) -> ShareRecord {
    ShareRecord {
        name: cfg.default_share.name.clone(),
        path: cfg.default_share.path.clone(),
        smb: true,
        nfs: true,
        read_only: false,
        guest_ok: false,
        nfs_clients: vec!["*".into()],
        root_squash: true,
        append_extension: false,
        durability: duet_cluster::records::Durability::Always,
    }
}

/// A node of a multi-node cluster whose write log has no extent sequence
/// floor yet (a new node, or one whose data directory was emptied) cannot
/// know which sequences an earlier incarnation under the same node id
/// named: other nodes may still hold copies, or queued records, named by
/// them, and a reused name would mean other bytes. Its floor starts at
/// the wall clock in microseconds since 1970, above anything an earlier
/// incarnation reached unless it named more than one extent per
/// microsecond of its life (each start reserves 2^20 above the last).
fn new_log_floor(data_dir: &std::path::Path) -> std::io::Result<()> {
    let wal = data_dir.join("wal");
    if wal.join(crate::datapath::SEQ_FLOOR_FILE).exists() {
        return Ok(());
    }
    std::fs::create_dir_all(&wal)?;
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    crate::datapath::write_floor(&wal, micros.max(1))
}

/// A running appliance.
pub struct Running {
    fronts: Vec<(flume::Sender<()>, glommio::ExecutorJoinHandle<()>)>,
    /// What it listens on (protocol, address), ports resolved.
    pub listeners: Vec<ListenerInfo>,
    engine: Option<EngineHandle>,
    stop_admin: flume::Sender<()>,
    stop_engine: flume::Sender<()>,
    data_thread: Option<glommio::ExecutorJoinHandle<()>>,
    store: Option<Store>,
    /// The raft transport (multi-node clusters only).
    peers: Option<PeersHandle>,
    /// Who leads, polled for forwarding (multi-node clusters only).
    view: Option<std::sync::Arc<crate::forward::LeaderView>>,
    pub admin_addr: std::net::SocketAddr,
    data_dir: PathBuf,
    /// Multi-node: the thread that stops a node the group removed, and its
    /// stop flag.
    removal: Option<(std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<()>)>,
    store_handle: StoreHandle,
    /// Multi-node with `[cluster] public_addresses`: the addresses this
    /// node holds (addresses.rs).
    public_addresses: Option<crate::addresses::PublicAddresses>,
}

/// duetd's exit status when this node was removed from the cluster, at
/// start or while serving (EX_CONFIG of sysexits.h): the unit file's
/// `RestartPreventExitStatus` keeps systemd from starting it again.
pub const EXIT_REMOVED: u8 = 78;

/// Multi-node: once the store applies the membership change that removed
/// this node, SIGTERM to this process, so that the usual drain runs and
/// `main` exits with [`EXIT_REMOVED`].
fn watch_removal(store: StoreHandle, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> std::io::Result<std::thread::JoinHandle<()>> {
    use std::sync::atomic::Ordering;
    std::thread::Builder::new().name("removal".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if let Some(index) = store.removed() {
                tracing::warn!(
                    index,
                    "this node was removed from the cluster (duetctl cluster remove {}): it stops serving; \
                     empty its data directory before it joins again",
                    store.node_id()
                );
                // SAFETY: kill(2) of this process; SIGTERM is blocked in
                // every thread and taken by `wait_for_signal`.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGTERM);
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

/// Starts everything. Returns once the admin API listens.
pub fn start(cfg: &Config) -> Result<Running, StartError> {
    let executors = cfg.executors();
    let cluster = cfg.cluster_plan().map_err(|e| StartError::Other(e.to_string()))?;
    let multi = cluster.voters.len() > 1;
    if let Err(e) = raise_memlock((executors as u64 + 1) * (cfg.io_memory_mib as u64) * (1 << 20) + (1 << 20)) {
        // glommio then runs without registered buffers: correct, a little slower.
        tracing::warn!("{e}; continuing without registered io_uring buffers");
    }
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| StartError::Other(format!("cannot create data directory {}: {e}", cfg.data_dir.display())))?;
    let (store, peers) = if multi {
        // Several voters: raft over the transport (peers.rs).
        let secret = cluster.secret.clone().ok_or_else(|| StartError::Other("cluster.secret_file: required".into()))?;
        let listen = cfg.cluster.listen.parse().map_err(|_| StartError::Other("cluster.listen: not an address".into()))?;
        let voters: Vec<(u64, std::net::SocketAddr)> = cluster.voters.iter().map(|p| (p.id, p.addr)).collect();
        let peers = Peers::with_limits(cfg.node_id, listen, &voters, secret, cfg.cluster.peer_limits());
        let group = if cfg.cluster.join {
            // The others: this node waits to be added by them.
            let others = voters.iter().map(|v| v.0).filter(|id| *id != cfg.node_id).collect();
            Group::Join { voters: others, outbox: peers.outbox() }
        } else {
            Group::Voters { voters: voters.iter().map(|v| v.0).collect(), outbox: peers.outbox() }
        };
        // A raft snapshot received before a restart is installed first
        // (crash-atomic: the old state or the new, never a mix).
        duet_cluster_store::snapshot::install_pending(&cfg.data_dir)
            .map_err(|e| StartError::Other(format!("installing a raft snapshot: {e}")))?;
        new_log_floor(&cfg.data_dir).map_err(|e| StartError::Other(format!("write log: {e}")))?;
        let options = duet_cluster_store::StoreOptions {
            log_retain: cfg.cluster.log_retain,
            commit_window: std::time::Duration::from_millis(cfg.durability.window_ms),
            uncommitted_max: cfg.cluster.uncommitted_mib << 20,
            wal_recycle: cfg.durability.wal_recycle,
            wal_prepare: (cfg.durability.wal_prepare_mib as usize) << 20,
            memtable_bytes: cfg.testing.memtable_kib.map(|k| (k as usize) << 10),
            queue: cfg.limits.metadata_queue,
        };
        let store = Store::open_group_with(&metadata_dir(&cfg.data_dir), cfg.node_id, group, options)?;
        let handle = peers.start_with(store.handle(), Some((cfg.data_dir.clone(), cfg.testing.snapshot_corrupt)))?;
        (store, Some(handle))
    } else {
        let options = duet_cluster_store::StoreOptions {
            commit_window: std::time::Duration::from_millis(cfg.durability.window_ms),
            wal_recycle: cfg.durability.wal_recycle,
            wal_prepare: (cfg.durability.wal_prepare_mib as usize) << 20,
            memtable_bytes: cfg.testing.memtable_kib.map(|k| (k as usize) << 10),
            queue: cfg.limits.metadata_queue,
            ..Default::default()
        };
        (Store::open_with(&metadata_dir(&cfg.data_dir), cfg.node_id, options)?, None)
    };
    let sh = store.handle();
    let removal = if multi {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        Some((stop.clone(), watch_removal(sh.clone(), stop)?))
    } else {
        None
    };
    let public_addresses = match &peers {
        Some(p) if !cfg.cluster.public_addresses.is_empty() => Some(crate::addresses::PublicAddresses::start(
            cfg.node_id,
            sh.clone(),
            p.health.clone(),
            cfg.cluster.public_addresses.clone(),
            cfg.cluster.public_interface.clone(),
        )?),
        _ => None,
    };
    let (handle_key, local_token) = if multi {
        let (k, t) = first_start_cluster(cfg, &sh)?;
        (k, Some(t))
    } else {
        (first_start(cfg, &sh)?, None)
    };

    let (ready_tx, ready_rx) = flume::bounded::<Result<(EngineHandle, std::net::SocketAddr), String>>(1);
    let (stop_tx, stop_rx) = flume::bounded::<()>(1);
    let (stop_engine_tx, stop_engine_rx) = flume::bounded::<()>(1);
    let data_dir = cfg.data_dir.clone();
    let segment = cfg.cache.log_segment_mib << 20;
    let read_cache = cfg.cache.read_cache_bytes();
    tracing::info!(mib = read_cache >> 20, "read cache size");
    let interval = Duration::from_millis(cfg.cache.destage_interval_ms);
    let destage_defer = cfg.cache.destage_defer_bytes();
    let admin_addr = cfg.admin_addr();
    let admin_tls = if crate::tls::wanted(cfg.admin.tls, admin_addr) {
        let c = crate::tls::server_config(&cfg.data_dir, admin_addr, cfg.admin.tls_cert.as_deref(), cfg.admin.tls_key.as_deref())
            .map_err(|e| StartError::Other(e.to_string()))?;
        Some(c)
    } else {
        None
    };
    let space_reserve = cfg.limits.disk_reserve_mib << 20;
    let fault_injection = cfg.testing.fault_injection;
    let schedule_min_s =
        cfg.testing.snapshot_schedule_min_s.unwrap_or(duet_admin_api::SCHEDULE_EVERY_MIN_S).max(1);
    let listeners = std::sync::Arc::new(std::sync::Mutex::new(Vec::<ListenerInfo>::new()));
    // The data volume's capacity, measured now and about once a second.
    let space = crate::capacity::initial(&cfg.data_dir, space_reserve);
    let conns = frontend::ConnTable::new(&cfg.limits);
    let audit = std::sync::Arc::new(crate::audit::AuditLog::open(&cfg.data_dir));
    let _ = conns.audit.set(audit.clone());
    let (admin_space, admin_conns) = (space.clone(), conns.clone());
    let node = NodeInfo {
        node_id: cfg.node_id,
        executors: executors as u32,
        data_dir: cfg.data_dir.display().to_string(),
        listeners: listeners.clone(),
        started: Instant::now(),
        cluster_addr: cluster.addr.clone(),
        cluster: ClusterInfo {
            voters: cluster.voters.iter().map(|p| (p.id, p.addr.to_string())).collect(),
            health: peers.as_ref().map(|p| p.health.clone()),
            queues: peers.as_ref().map(|p| p.sender()),
            snapshots: peers.as_ref().and_then(|p| p.snapshots.clone()),
            public_addresses: cfg.cluster.public_addresses.clone(),
        },
        local_token,
    };
    // Multi-node: the write cache's copies travel in Data frames (replica.rs).
    let replica_link = peers.as_ref().map(crate::replica::link);
    let replica_counters = replica_link.as_ref().map(|l| l.counters());
    // Multi-node: who leads (polled), the batch forwarder, and admin
    // changes forwarded to the leader (forward.rs).
    let mut view = None;
    let mut forwarder = None;
    let mut admin_link = None;
    if let Some(p) = &peers {
        let v = crate::forward::LeaderView::start(sh.clone(), p.health.clone())?;
        forwarder = Some(crate::forward::Forwarder::new(
            cfg.node_id,
            p,
            v.clone(),
            cfg.cluster.forward_max,
            Duration::from_millis(cfg.cluster.forward_timeout_ms),
            Duration::from_millis(cfg.cluster.leader_wait_ms),
            Duration::from_millis(cfg.cluster.smb_leader_wait_ms),
        ));
        admin_link = Some(crate::forward::AdminLink::start(
            cfg.node_id,
            p,
            v.clone(),
            Duration::from_millis(cfg.cluster.forward_timeout_ms),
            Duration::from_millis(cfg.cluster.leader_wait_ms),
        ));
        view = Some(v);
    }
    let (admin_forwarder, admin_link2) = (forwarder.clone(), admin_link.clone());
    let data_thread = LocalExecutorBuilder::new(Placement::Unbound)
        .name("duet-data")
        .io_memory(cfg.io_memory_mib << 20)
        .spawn(move || async move {
            let started = engine::start(&data_dir, segment, sh, interval, replica_link).await;
            let (eng, handle, rx) = match started {
                Ok(x) => x,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("data path: {e}")));
                    return;
                }
            };
            eng.data.set_space_reserve(space_reserve);
            eng.data.set_read_cache_bytes(read_cache);
            eng.data.set_destage_defer_bytes(destage_defer);
            let listener = match admin::bind(admin_addr) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            let bound = listener.local_addr().unwrap_or(admin_addr);
            glommio::spawn_local(crate::capacity::refresh(admin_space.clone(), data_dir.clone(), space_reserve)).detach();
            let admin = std::rc::Rc::new(Admin {
                engine: eng.clone(),
                node,
                fault_injection,
                schedule_min_s,
                space: admin_space,
                reserve: space_reserve,
                conns: admin_conns,
                auth_failures: Default::default(),
                audit,
                console: Default::default(),
                tls: admin_tls,
                link: admin_link2,
                forwarder: admin_forwarder,
                replica: replica_counters,
            });
            if let Some(l) = &admin.link {
                glommio::spawn_local(admin::serve_forwarded(admin.clone(), l.incoming())).detach();
            }
            // Snapshot schedules: planned and carried out on the leader.
            glommio::spawn_local(crate::schedule::run(admin.clone())).detach();
            glommio::spawn_local(admin::serve(admin, listener, stop_rx)).detach();
            let _ = ready_tx.send(Ok((handle, bound)));
            drop(ready_tx);
            engine::serve(eng, rx, stop_engine_rx).await;
        })
        .map_err(|e| StartError::Other(format!("cannot start the data executor: {e}")))?;
    let (engine, admin_addr) = match ready_rx.recv() {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return Err(StartError::Other(e)),
        Err(_) => return Err(StartError::Other("the data executor stopped during start".into())),
    };
    if let Ok(mut l) = listeners.lock() {
        l.push(ListenerInfo { protocol: "admin".into(), addr: admin_addr.to_string() });
        if let Some(p) = &peers {
            l.push(ListenerInfo { protocol: "cluster".into(), addr: p.listen.to_string() });
        }
    }
    // Protocol executors, one per core. The daemon binds the configured
    // addresses once (port 0 picks one; a second daemon on the same port
    // fails here, `listen.rs`) and every executor accepts on them.
    let mut fronts = Vec::new();
    let bind = |on: bool, listen: &str, what: &str| -> Result<Option<std::sync::Arc<std::net::TcpListener>>, StartError> {
        let Some(addr) = on.then(|| listen.parse::<std::net::SocketAddr>().ok()).flatten() else { return Ok(None) };
        let l = crate::listen::exclusive(addr).map_err(|e| StartError::Other(format!("cannot listen on {addr} ({what}): {e}")))?;
        Ok(Some(std::sync::Arc::new(l)))
    };
    let smb_sock = bind(cfg.smb.enabled, &cfg.smb.listen, "SMB")?;
    let nfs_sock = bind(cfg.nfs.enabled, &cfg.nfs.listen, "NFS")?;
    let mut guid = [0u8; 16];
    guid[..8].copy_from_slice(&handle_key.to_le_bytes());
    guid[8..].copy_from_slice(&cfg.node_id.to_le_bytes());
    // One lock table for every connection of both protocols on every
    // executor: share modes, byte-range locks (duet_locks).
    // Oplock breaks time out after `[limits] smb_oplock_break_ms`; a
    // recalled file may be granted again at once (as Windows does).
    let locks = std::sync::Arc::new(duet_locks::LockManager::new(duet_locks::Limits {
        break_timeout_ns: cfg.limits.smb_oplock_break_ms as i64 * 1_000_000,
        recall_backoff_ns: 0,
        ..duet_locks::Limits::default()
    }));
    // A change of the table wakes the SMB connections waiting on it.
    let waiters = conns.clone();
    locks.on_change(Box::new(move || waiters.lock_waiters.wake_all()));
    let share_modes = std::sync::Arc::new(duet_protocols::smb2::server::ShareModes::with_locks(locks.clone()));
    let _ = conns.share_modes.set(share_modes.clone());
    // A node of a multi-node cluster serves clients too: its engine routes
    // every batch to the leader (forward.rs), and runs the batches other
    // nodes forward when it leads.
    let mut engine = engine;
    if let (Some(p), Some(fwd)) = (&peers, forwarder) {
        crate::forward::serve_requests(p, fwd.clone(), engine.requests());
        engine.set_forwarder(fwd);
    }
    // Executor 0 accepts every connection and hands them out in turn.
    let (handoff, mut handed): (Vec<_>, Vec<_>) = (0..executors).map(|_| flume::unbounded()).unzip();
    let handoff = std::sync::Arc::new(handoff);
    handed.reverse();
    for i in 0..executors {
        let plan = FrontendPlan {
            index: i,
            handoff: handoff.clone(),
            handed: handed.pop().expect("one queue per executor"),
            smb: smb_sock.clone(),
            // Every executor serves NFS on the one socket; the NFS server
            // (its state) is one, shared (`SharedNfs`).
            nfs: nfs_sock.clone(),
            portmap: i == 0 && cfg.nfs.portmap,
            handle_key,
            server_guid: guid,
            share_modes: share_modes.clone(),
            locks: locks.clone(),
            smb_require_signing: cfg.smb.require_signing,
            smb_encrypt: cfg.smb.encrypt,
            smb_multichannel: cfg.smb.multichannel,
            limits: cfg.limits.clone(),
            conns: conns.clone(),
            nfs_grace_s: cfg.nfs.grace_secs,
            nfs_lease_s: cfg.nfs.lease_secs,
            nfs_id_domain: cfg.nfs.id_domain.clone(),
            nfs_clients_file: cfg.data_dir.join(NFS_CLIENTS_FILE),
            space: space.clone(),
        };
        let (bound_tx, bound_rx) = flume::bounded(1);
        let (stop_tx, stop_rx) = flume::bounded::<()>(1);
        let eng = engine.clone();
        let infos = listeners.clone();
        let t = LocalExecutorBuilder::new(Placement::Unbound)
            .name(&format!("duet-exec-{i}"))
            .io_memory(cfg.io_memory_mib << 20)
            .spawn(move || frontend::run(plan, eng, bound_tx, stop_rx, infos))
            .map_err(|e| StartError::Other(format!("cannot start executor {i}: {e}")))?;
        match bound_rx.recv() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(StartError::Other(e)),
            Err(_) => return Err(StartError::Other(format!("executor {i} stopped during start"))),
        }
        fronts.push((stop_tx, t));
    }
    let listening: Vec<ListenerInfo> = listeners.lock().map(|l| l.clone()).unwrap_or_default();
    for l in &listening {
        tracing::info!(protocol = %l.protocol, addr = %l.addr, "listening");
    }
    let scheme = if crate::tls::wanted(cfg.admin.tls, admin_addr) { "https" } else { "http" };
    tracing::info!("web console: {scheme}://{admin_addr}/console/");
    tracing::info!(executors, data_dir = %cfg.data_dir.display(), "duetd is serving");
    Ok(Running {
        fronts,
        listeners: listening,
        engine: Some(engine),
        stop_admin: stop_tx,
        stop_engine: stop_engine_tx,
        data_thread: Some(data_thread),
        store_handle: store.handle(),
        store: Some(store),
        peers,
        view,
        admin_addr,
        data_dir: cfg.data_dir.clone(),
        removal,
        public_addresses,
    })
}

impl Running {
    /// The address a protocol listens on ("smb", "nfs", "admin").
    pub fn listener(&self, protocol: &str) -> Option<std::net::SocketAddr> {
        self.listeners.iter().find(|l| l.protocol == protocol).and_then(|l| l.addr.parse().ok())
    }

    /// The engine, for in-process clients (tests, tools).
    pub fn engine(&self) -> &EngineHandle {
        // Only `shutdown`, which consumes self, takes it.
        self.engine.as_ref().expect("engine handle present until shutdown")
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The index of the membership change that removed this node from the
    /// cluster, once it applied here (the node then stops itself).
    pub fn removed(&self) -> Option<u64> {
        self.store_handle.removed()
    }

    /// Stops accepting, lets in-flight batches finish, closes the store.
    pub fn shutdown(mut self) {
        // Public addresses first: the leader moves them while this drains.
        if let Some(mut a) = self.public_addresses.take() {
            a.stop();
        }
        if let Some((stop, t)) = self.removal.take() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = t.join();
        }
        // Protocol executors first: no new requests, in-flight ones finish.
        for (stop, _) in &self.fronts {
            let _ = stop.send(());
        }
        for (_, t) in self.fronts.drain(..) {
            let _ = t.join();
        }
        let _ = self.stop_admin.send(());
        let _ = self.stop_engine.send(());
        self.engine.take();
        if let Some(t) = self.data_thread.take() {
            let _ = t.join();
        }
        if let Some(v) = self.view.take() {
            v.stop();
        }
        if let Some(s) = self.store.take() {
            s.shutdown();
        }
        self.peers.take();
    }
}

/// Blocks SIGTERM and SIGINT in this thread (and threads started after), so
/// that [`wait_for_signal`] can take them.
pub fn block_signals() {
    // SAFETY: sigset manipulation on a local set; pthread_sigmask on the
    // calling thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits for SIGTERM or SIGINT; returns the signal number.
pub fn wait_for_signal() -> i32 {
    // SAFETY: as above; sigwait writes the signal into a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let mut sig: libc::c_int = 0;
        libc::sigwait(&set, &mut sig);
        sig
    }
}
