//! duetd's configuration: TOML, every key optional, defaults documented in
//! [`DEFAULT_CONFIG`] (printed by `duetd --print-default-config`).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// The default configuration, as a commented TOML file.
pub const DEFAULT_CONFIG: &str = r#"# duetd configuration. Every key is optional; these are the defaults.

# Where metadata, the write log and chunks live.
data_dir = "/var/lib/duet"
# This node's raft id (a single node is a one-voter group).
node_id = 1
# Protocol executors (threads, one per core), each serving SMB and NFS
# connections on the same ports. 0: one per available core.
executors = 0
# Memory registered with io_uring per executor, in MiB.
io_memory_mib = 1

[admin]
# The admin API, /metrics and the web console (http(s)://ADDR/console/).
listen = "127.0.0.1:7445"
# TLS: "auto" serves TLS unless the listener is on a loopback address,
# "on" always, "off" never. Without tls_cert/tls_key duetd makes a private
# CA and a certificate in <data_dir>/admin-tls/ on first start (clients
# trust admin-tls/ca.pem).
tls = "auto"
# tls_cert = "/etc/duet/admin.crt"   # PEM chain
# tls_key = "/etc/duet/admin.key"    # PEM private key

[smb]
enabled = true
listen = "0.0.0.0:445"
# Refuse unsigned requests once a session is authenticated.
require_signing = false
# Encrypt every session of clients that can (SMB 3.x); SMB 2.x sessions
# stay unencrypted (signed when require_signing is on).
encrypt = false
# Offer multichannel (SMB 3.x): a client may bind further connections to
# its session (MS-SMB2 3.3.5.5) and use any of them for its opens.
multichannel = true

[nfs]
enabled = true
# NFS, MOUNT and portmap are all served on this one port.
listen = "0.0.0.0:2049"
# Also serve portmap/rpcbind on port 111 when it is free.
portmap = true
# NFSv4 grace period after a restart, in seconds: clients that held opens
# and locks reclaim them; new ones wait (NFS4ERR_GRACE). It ends as soon as
# every such client has reclaimed.
grace_secs = 90
# NFSv4 lease time, in seconds (5 to 3600): a client that does not renew
# within it loses its opens and locks once another client conflicts.
lease_secs = 90
# NFSv4 domain of owner strings (RFC 8881 5.9). Unset: owners are decimal
# ids, as Linux clients with AUTH_SYS expect. Set (the clients' idmapd
# Domain): duet's users are shown as name@domain; names are accepted
# either way.
# id_domain = "example.com"

[cache]
# Size of one write-log segment file, in MiB.
log_segment_mib = 64
# How often the destager looks for data to move into chunks, in ms; also
# how long it gathers the writes that follow the one that woke it, so that
# a stream of small writes is destaged in a few large rounds.
destage_interval_ms = 20
# Memory for file data, in MiB (0: none). Chunk files are read and
# written with O_DIRECT, so this is the only cache of them: what is read
# and what the destager writes is kept, and sequential readers read ahead
# into it. Unset: a quarter of the machine's memory (64 MiB to 64 GiB).
# read_mib = 1024
# While a client streams large writes, the destager waits for the stream
# to pause (at most 2 s; a client reading data not destaged yet ends the
# wait), until the write log holds this many MiB (0: it never waits). The
# data is durable in the log meanwhile. Unset: what the log memory holds
# (a quarter of the read cache), at most 1024.
# destage_defer_mib = 1024

[limits]
# What one client may take; docs/limits.md says what each refusal looks like.
# Connections served at once, SMB and NFS together, over the whole daemon.
# Over it a new connection is closed as soon as it is accepted.
connections = 4096
# Connections from one client address at once (both protocols); over it
# a new connection from that address is closed as soon as it is accepted.
connections_per_client = 256
# Requests one connection may have in progress at once (SMB messages or
# compounds, ONC RPC calls). Over it duetd reads no more from that
# connection until one is answered: the client waits (TCP backpressure).
requests_per_connection = 64
# Largest SMB2 message (one direct-TCP frame: a request or a compound), in
# bytes. Over it the connection is dropped unread. MaxReadSize and
# MaxWriteSize are set to fit (this less 64 KiB, at most 8 MiB).
smb_message_max = 8454144
# Largest ONC RPC record (NFS, MOUNT, portmap), in bytes. Over it the
# connection is closed. NFSv4 ca_maxrequestsize and rtmax/wtmax fit in it.
nfs_record_max = 1179648
# The most operations in one NFSv4.1 COMPOUND that CREATE_SESSION grants
# (ca_maxoperations; a client that asks for fewer gets its own number);
# a COMPOUND with more than its session's gets NFS4ERR_TOO_MANY_OPS.
nfs_compound_ops = 1024
# SMB credits one connection may hold; a request outside the granted
# window closes the connection (MS-SMB2 3.3.5.2.3).
smb_credits = 8192
# Files one SMB session may hold open; CREATE over it gets
# STATUS_TOO_MANY_OPENED_FILES.
smb_open_files_per_session = 16384
# CHANGE_NOTIFY watches (directory opens watched) one SMB connection may
# hold, and as many waiting requests; more get
# STATUS_INSUFFICIENT_RESOURCES.
smb_notify_watches = 1024
# Open stateids one NFSv4 client may hold; OPEN over it gets
# NFS4ERR_RESOURCE.
nfs_open_files_per_client = 4096
# SMB MaxTransactSize: the largest QUERY_DIRECTORY (and QUERY_INFO, IOCTL)
# output buffer a client may ask for; more gets STATUS_INVALID_PARAMETER.
smb_transact_max = 8388608
# Largest NFS READDIR / READDIRPLUS reply, in bytes: larger counts are
# capped and the listing continues by cookie.
nfs_readdir_max = 1048576
# Free space, in MiB, kept on the volumes of data_dir and its metadata.
# Below it, what would add data or names (WRITE, CREATE, links, EAs, COPY)
# gets STATUS_DISK_FULL / NFS3ERR_NOSPC / NFS4ERR_NOSPC before anything is
# written; reads, deletes, renames and truncation keep working, so space
# can be freed. The reserve keeps RocksDB and the write log off ENOSPC.
# 0 turns the check off.
disk_reserve_mib = 256
# How long an SMB client has to acknowledge an oplock break, in
# milliseconds (MS-SMB2 3.3.2.1: 35 s on Windows). The open that caused
# the break waits that long at most; then the grant is revoked and it
# proceeds.
smb_oplock_break_ms = 35000
# How long an SMB durable handle is kept after its connection is lost, in
# milliseconds (DHnQ, and DH2Q asking 0; a DH2Q may ask up to 300000). The
# client reconnects it within that time with its data, locks and lease.
smb_durable_timeout_ms = 60000
# Durable handles kept at once for lost connections, daemon-wide; past it
# a lost connection's opens close as if they were not durable.
smb_durable_handles = 4096
# Requests (client batches, queries, raft messages from peers) queued for
# the metadata thread. Over it a client's request waits for a place (its
# connection reads no more meanwhile) and a peer's raft message is dropped
# (raft sends it again); nothing is refused or lost.
metadata_queue = 4096

[durability]
# Shares of `durability = protocol` (duetctl share add|modify NAME
# --durability protocol; docs/durability.md) answer a change the protocol
# does not promise durable (SMB WRITE without WRITE_THROUGH, NFS UNSTABLE
# WRITE) before it is on disk; a group commit (one fsync for all of them)
# makes it durable at most this many milliseconds later. 1 to 1000.
window_ms = 5
# Reuse the metadata store's old write-ahead log files, so that a synced
# commit overwrites blocks the file has and its fdatasync writes data only.
wal_recycle = true
# At each start, prepare a reused WAL file of this many MiB (written once
# and synced: about 10 ms per MiB) so the first commits after a start
# overwrite too. 0 to 1024; 0: reuse begins at the first memtable switch.
wal_prepare_mib = 32

[cluster]
# The metadata raft group (docs/cluster.md). Without `peers`, or with a
# list of this node alone, duetd is a single node: a one-voter group that
# makes no network traffic.
# Address:port of the raft transport between nodes.
listen = "0.0.0.0:7446"
# The voters, as "ID@ADDRESS:PORT", the same list on every node; node_id
# must be one of the ids. Example:
#   peers = ["1@127.0.0.11:7446", "2@127.0.0.12:7446", "3@127.0.0.13:7446"]
# Every node serves SMB and NFS; a follower forwards each client batch to
# the leader, which runs it (docs/cluster.md).
peers = []
# File holding the cluster secret (at least 32 bytes, the same content on
# every node) that authenticates nodes to each other. Required when
# `peers` names more than one node. Example: secret_file = "/etc/duet/cluster.secret"
# Client batches a follower has forwarded to the leader and not yet had
# answered; more wait for a place (then get the retry answer).
forward_max = 256
# A forwarded batch not answered within this has an unknown outcome: a
# change is sent again with its request id (executed at most once) until
# leader_wait_ms runs out, then gets a retryable error; a change that
# also reads file data is not sent again.
forward_timeout_ms = 10000
# How long a batch waits for a leader (an election) before the client
# gets the retry answer (NFS4ERR_DELAY, NFS3ERR_JUKEBOX, SMB
# STATUS_INSUFFICIENT_RESOURCES).
leader_wait_ms = 5000
# How long an SMB request waits for a leader. After 0.5 s it is answered
# STATUS_PENDING (the client then waits without its own timeout); it fails
# with STATUS_INSUFFICIENT_RESOURCES only after this (at least
# leader_wait_ms).
smb_leader_wait_ms = 60000
# This node joins a running cluster: `peers` lists the cluster's voters and
# this node; it waits (up to 60 s at its first start) until a voter adds it
# with `duetctl cluster add ID ADDRESS:PORT`, then catches up (docs/cluster.md).
join = false
# Applied raft entries each node keeps for followers that lag; a follower
# further behind (or one whose data directory was emptied) is sent a
# snapshot of the state instead (docs/cluster.md).
log_retain = 4096
# Bounds of the cluster's queues (docs/limits.md): what a slow, dead or
# partitioned peer can make this node hold. Raft messages queued per peer
# (a full queue drops new ones; raft sends again), and the MiB of frames
# of every kind queued per peer, at least 32 (one write-cache push):
peer_queue = 1024
peer_queue_mib = 256
# Inbound peer connections served at once (more are closed at once):
peer_connections = 64
# Raft snapshot images this node sends at once (a follower asking for
# another is refused and raft sends it again later):
snapshot_transfers = 2
# Write-cache frames from peers queued before they are logged, and their
# bytes, at least 64 MiB (more are dropped; the data is fetched later):
replica_inbound = 256
replica_inbound_mib = 128
# Admin changes followers forwarded, waiting for this node's admin task
# when it leads (more are answered busy and routed again):
forwarded_admin = 64
# MiB of raft entries a leader holds not yet committed (a quorum slow or
# gone); past it changes get the retry answer instead of growing its log:
uncommitted_mib = 256
# MiB of write data this node has pushed to one peer and that is still
# queued for its connection or not yet acknowledged, at least 32 (one
# extent); past it pushes to that peer are skipped (the others' copies make
# the majority; it fetches what it lacks later):
replica_push_mib = 64
# Pushes from peers being logged here, and peers' fetches being answered,
# at once (more wait in replica_inbound):
replica_workers = 16
# Public service addresses ("ADDRESS/PREFIX", IPv4 or IPv6) that clients
# mount: the leader spreads them over the healthy nodes and moves the
# addresses of a node that dies to a survivor, which adds them to
# `public_interface` and announces them (a gratuitous ARP for IPv4, an
# unsolicited neighbour advertisement for IPv6), as CTDB does for Samba
# clusters. Needs CAP_NET_ADMIN and CAP_NET_RAW (docs/cluster.md). Example:
#   public_addresses = ["192.168.10.50/24", "192.168.10.51/24", "fd00:10::52/64"]
public_addresses = []
# The interface public addresses are added to (the same name on every node).
public_interface = "eth0"

[log]
# tracing env-filter syntax; RUST_LOG overrides it.
filter = "info"

[testing]
# Lets `duetctl fault` make the data path and the metadata store fail with
# EIO (for tests of I/O errors). Never turn it on in production.
fault_injection = false
# Test-only: the first this-many raft snapshot images this node sends have
# a byte flipped (the follower must refuse them). Never set in production.
snapshot_corrupt = 0
# Test-only: the shortest snapshot schedule interval the admin API takes,
# in seconds (default 60). Never set in production.
# snapshot_schedule_min_s = 60

# The share created on first start (both protocols).
[default_share]
name = "public"
path = "/public"
"#;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub data_dir: PathBuf,
    pub node_id: u64,
    pub executors: usize,
    pub io_memory_mib: usize,
    pub admin: AdminConfig,
    pub smb: ListenerConfig,
    pub nfs: ListenerConfig,
    pub cache: CacheConfig,
    pub limits: LimitsConfig,
    pub durability: DurabilityConfig,
    pub cluster: ClusterConfig,
    pub log: LogConfig,
    pub testing: TestingConfig,
    pub default_share: DefaultShare,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    pub listen: String,
    pub tls: crate::tls::TlsMode,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    #[serde(default = "yes")]
    pub enabled: bool,
    pub listen: String,
    /// NFS only: also serve portmap/rpcbind on port 111 when it is free.
    #[serde(default = "yes")]
    pub portmap: bool,
    /// SMB only: refuse unsigned requests on authenticated sessions.
    #[serde(default)]
    pub require_signing: bool,
    /// SMB only: encrypt every session of a client that can (SMB 3.x).
    #[serde(default)]
    pub encrypt: bool,
    /// SMB only: offer multichannel (SMB 3.x): a client may bind more
    /// connections to a session.
    #[serde(default = "yes")]
    pub multichannel: bool,
    /// NFS only: the NFSv4 grace period after a restart, seconds.
    #[serde(default = "grace_default")]
    pub grace_secs: u32,
    /// NFS only: the NFSv4 lease time, seconds (RFC 8881 §8.3).
    #[serde(default = "lease_default")]
    pub lease_secs: u32,
    /// NFS only: the NFSv4 domain owner strings are written in (RFC 8881
    /// 5.9); None: decimal ids.
    #[serde(default)]
    pub id_domain: Option<String>,
}

fn grace_default() -> u32 {
    90
}

fn lease_default() -> u32 {
    90
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    pub log_segment_mib: u64,
    pub destage_interval_ms: u64,
    /// The read cache of chunk data, in MiB (0: off; unset: a quarter of
    /// the machine's memory, [`CacheConfig::read_cache_bytes`]).
    pub read_mib: Option<u64>,
    /// How much the write log may hold while the destager waits for a
    /// stream of appends to pause, in MiB (0: never waits; unset:
    /// [`CacheConfig::destage_defer_bytes`]).
    pub destage_defer_mib: Option<u64>,
}

impl CacheConfig {
    /// `destage_defer_mib` in bytes, or when unset what the log memory
    /// holds (a quarter of the read cache, `duet_cache::logmem`), at most
    /// 1 GiB: data the destager waits to move is then read back from
    /// memory.
    pub fn destage_defer_bytes(&self) -> u64 {
        match self.destage_defer_mib {
            Some(m) => m << 20,
            None => (self.read_cache_bytes() / 4).min(1 << 30),
        }
    }

    /// The read cache's size in bytes: `read_mib`, or when unset a quarter
    /// of the machine's memory (`/proc/meminfo` MemTotal), at least 64 MiB
    /// and at most 64 GiB (256 MiB where the memory cannot be read).
    pub fn read_cache_bytes(&self) -> u64 {
        if let Some(m) = self.read_mib {
            return m << 20;
        }
        let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib << 10)
        });
        match total {
            Some(t) => (t / 4).clamp(64 << 20, 64 << 30),
            None => 256 << 20,
        }
    }
}

/// `[limits]`: what one client may take (docs/limits.md).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub connections: usize,
    pub connections_per_client: usize,
    pub requests_per_connection: usize,
    pub smb_message_max: usize,
    pub nfs_record_max: usize,
    pub nfs_compound_ops: u32,
    pub smb_credits: u16,
    pub smb_open_files_per_session: usize,
    pub smb_notify_watches: usize,
    pub nfs_open_files_per_client: usize,
    pub smb_transact_max: u32,
    pub nfs_readdir_max: u32,
    pub disk_reserve_mib: u64,
    pub smb_oplock_break_ms: u64,
    pub smb_durable_timeout_ms: u64,
    pub smb_durable_handles: usize,
    /// Requests queued for the metadata thread (`StoreOptions::queue`).
    pub metadata_queue: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            connections: 4096,
            connections_per_client: 256,
            requests_per_connection: 64,
            smb_message_max: (8 << 20) + (64 << 10),
            nfs_record_max: (1 << 20) + (128 << 10),
            nfs_compound_ops: 1024,
            smb_credits: 8192,
            smb_open_files_per_session: 16384,
            smb_notify_watches: 1024,
            nfs_open_files_per_client: 4096,
            smb_transact_max: 8 << 20,
            nfs_readdir_max: 1 << 20,
            disk_reserve_mib: 256,
            smb_oplock_break_ms: 35_000,
            smb_durable_timeout_ms: 60_000,
            smb_durable_handles: 4096,
            metadata_queue: duet_cluster_store::QUEUE_MAX,
        }
    }
}

impl LimitsConfig {
    /// SMB MaxReadSize / MaxWriteSize: what fits in one message.
    pub fn smb_io_max(&self) -> u32 {
        (self.smb_message_max - (64 << 10)).min(8 << 20) as u32
    }

    /// NFS rtmax / wtmax and the v4 session's request size: what fits in
    /// one record with room for the RPC and COMPOUND headers.
    pub fn nfs_io_max(&self) -> u32 {
        (self.nfs_record_max - (128 << 10)).clamp(32 << 10, 1 << 20) as u32
    }
}

/// `[cluster]`: the metadata raft group (docs/cluster.md).
/// `[durability]`: the group commit of `protocol` shares.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct DurabilityConfig {
    /// The longest a change answered before it is durable stays unsynced.
    pub window_ms: u64,
    /// Reuse the metadata store's old write-ahead log files (RocksDB
    /// `recycle_log_file_num`): a synced commit overwrites allocated
    /// blocks and its fdatasync commits no file size. On by default.
    pub wal_recycle: bool,
    /// MiB of the reused WAL file prepared at each start (written and
    /// synced once), so a fresh daemon's first commits overwrite too.
    pub wal_prepare_mib: u64,
}

impl Default for DurabilityConfig {
    fn default() -> Self {
        DurabilityConfig { window_ms: 5, wal_recycle: true, wal_prepare_mib: 32 }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Address:port of the raft transport between nodes.
    pub listen: String,
    /// The voters, `ID@ADDRESS:PORT`, the same list on every node.
    pub peers: Vec<String>,
    /// The cluster secret's file (required with more than one peer).
    pub secret_file: Option<PathBuf>,
    /// Forwarded batches in flight from this node to the leader.
    pub forward_max: usize,
    /// A forwarded batch unanswered after this gets a retryable error.
    pub forward_timeout_ms: u64,
    /// How long a batch waits for a leader before the retry answer.
    pub leader_wait_ms: u64,
    /// How long an SMB request, answered STATUS_PENDING meanwhile, waits
    /// for a leader (at least `leader_wait_ms`).
    pub smb_leader_wait_ms: u64,
    /// Applied raft entries kept for followers that lag (then a snapshot).
    pub log_retain: u64,
    /// This node joins a running cluster (`duetctl cluster add`).
    pub join: bool,
    /// Raft messages queued per peer (`peers::PeerLimits`).
    pub peer_queue: usize,
    /// MiB of frames of every kind queued per peer.
    pub peer_queue_mib: u64,
    /// Inbound peer connections served at once.
    pub peer_connections: usize,
    /// Raft snapshot images sent at once.
    pub snapshot_transfers: usize,
    /// Inbound write-cache frames queued, and their MiB.
    pub replica_inbound: usize,
    pub replica_inbound_mib: u64,
    /// Admin changes forwarded by followers waiting for the leader's task.
    pub forwarded_admin: usize,
    /// MiB of raft entries a leader holds uncommitted.
    pub uncommitted_mib: u64,
    /// MiB of write data pushed to one peer, queued or unacknowledged.
    pub replica_push_mib: u64,
    /// Pushes logged and fetches answered at once.
    pub replica_workers: usize,
    /// Public service addresses, IPv4 `ADDRESS/PREFIX`, spread over the
    /// healthy nodes (`appliance/src/addresses.rs`).
    pub public_addresses: Vec<String>,
    /// The interface they are added to.
    pub public_interface: String,
}

impl ClusterConfig {
    /// The transport's queue bounds these keys set.
    pub fn peer_limits(&self) -> crate::peers::PeerLimits {
        crate::peers::PeerLimits {
            queue: self.peer_queue,
            queue_bytes: self.peer_queue_mib << 20,
            inbound: self.peer_connections,
            snapshot_transfers: self.snapshot_transfers,
            replica_frames: self.replica_inbound,
            replica_bytes: self.replica_inbound_mib << 20,
            admin_forwarded: self.forwarded_admin,
            replica_push_bytes: self.replica_push_mib << 20,
            replica_workers: self.replica_workers,
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            listen: CLUSTER_LISTEN_DEFAULT.into(),
            peers: Vec::new(),
            secret_file: None,
            forward_max: 256,
            forward_timeout_ms: 10_000,
            leader_wait_ms: 5_000,
            smb_leader_wait_ms: 60_000,
            log_retain: 4096,
            join: false,
            peer_queue: 1024,
            peer_queue_mib: crate::peers::PEER_QUEUE_BYTES_MAX >> 20,
            peer_connections: 64,
            snapshot_transfers: 2,
            replica_inbound: 256,
            replica_inbound_mib: 128,
            forwarded_admin: 64,
            uncommitted_mib: 256,
            replica_push_mib: crate::replica::PUSH_BYTES_MAX >> 20,
            replica_workers: crate::replica::WORKERS as usize,
            public_addresses: Vec::new(),
            public_interface: "eth0".into(),
        }
    }
}

/// `[cluster] listen`'s default.
pub const CLUSTER_LISTEN_DEFAULT: &str = "0.0.0.0:7446";
/// The shortest cluster secret accepted, in bytes.
pub const CLUSTER_SECRET_MIN: usize = 32;

/// Parses one of `[cluster] public_addresses`: `ADDRESS/PREFIX`, IPv4
/// (prefix 1 to 32) or IPv6 (prefix 1 to 128), a unicast address clients
/// can reach (not link-local: it would need a zone).
pub fn parse_public_address(s: &str) -> Result<std::net::IpAddr, String> {
    use std::net::IpAddr;
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not ADDRESS/PREFIX such as \"192.168.10.50/24\" or \"fd00:10::50/64\""))?;
    let ip: IpAddr = a.parse().map_err(|_| format!("{s:?}: {a:?} is not an IPv4 or IPv6 address"))?;
    let prefix: u8 = p.parse().map_err(|_| format!("{s:?}: the prefix {p:?} is not a number"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if !(1..=max).contains(&prefix) {
        return Err(format!("{s:?}: the prefix must be between 1 and {max}"));
    }
    let unreachable = match ip {
        IpAddr::V4(v4) => v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() || v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_unspecified() || v6.is_multicast() || v6.is_loopback() || v6.segments()[0] & 0xffc0 == 0xfe80,
    };
    if unreachable {
        return Err(format!("{s:?} is not a unicast address clients can reach"));
    }
    Ok(ip)
}

/// One voter of `[cluster] peers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub id: u64,
    pub addr: SocketAddr,
}

impl Peer {
    /// Parses `ID@ADDRESS:PORT` (ID at least 1).
    pub fn parse(s: &str) -> Result<Peer, String> {
        let (id, addr) = s
            .split_once('@')
            .ok_or_else(|| format!("{s:?} is not ID@ADDRESS:PORT such as \"1@127.0.0.11:7446\""))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: the id {id:?} is not a number (ID@ADDRESS:PORT)"))?;
        if id == 0 {
            return Err(format!("{s:?}: ids start at 1 (raft ids)"));
        }
        let addr: SocketAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: {addr:?} is not an address:port such as 127.0.0.11:7446"))?;
        Ok(Peer { id, addr })
    }
}

/// What `[cluster]` makes of this node, once the secret file was read
/// ([`Config::cluster_plan`]).
#[derive(Clone, Debug)]
pub struct ClusterPlan {
    pub node_id: u64,
    /// The voters (this node alone without `peers`).
    pub voters: Vec<Peer>,
    /// The address this node is known by in the cluster: its own entry of
    /// `peers`, or `listen` without one.
    pub addr: String,
    /// The cluster secret (read from `secret_file`), if one is configured.
    pub secret: Option<Vec<u8>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub filter: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TestingConfig {
    pub fault_injection: bool,
    /// Test-only: this many snapshot images sent are corrupted.
    pub snapshot_corrupt: u32,
    /// Test-only: the shortest snapshot schedule interval (seconds) the
    /// admin API takes; unset: `duet_admin_api::SCHEDULE_EVERY_MIN_S` (60).
    pub snapshot_schedule_min_s: Option<u64>,
    /// Test-only: the metadata store's memtable size in KiB (RocksDB
    /// `write_buffer_size`; unset: RocksDB's 64 MiB). A small one switches
    /// write-ahead log files often, so crash tests meet recycled ones.
    pub memtable_kib: Option<u64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DefaultShare {
    pub name: String,
    pub path: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("/var/lib/duet"),
            node_id: 1,
            executors: 0,
            io_memory_mib: 1,
            admin: AdminConfig::default(),
            smb: ListenerConfig {
                enabled: true,
                listen: "0.0.0.0:445".into(),
                portmap: false,
                require_signing: false,
                encrypt: false,
                multichannel: true,
                grace_secs: grace_default(),
                lease_secs: lease_default(),
                id_domain: None,
            },
            nfs: ListenerConfig {
                enabled: true,
                listen: "0.0.0.0:2049".into(),
                portmap: true,
                require_signing: false,
                encrypt: false,
                multichannel: true,
                grace_secs: grace_default(),
                lease_secs: lease_default(),
                id_domain: None,
            },
            cache: CacheConfig::default(),
            limits: LimitsConfig::default(),
            durability: DurabilityConfig::default(),
            cluster: ClusterConfig::default(),
            log: LogConfig::default(),
            testing: TestingConfig::default(),
            default_share: DefaultShare::default(),
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig { listen: "127.0.0.1:7445".into(), tls: crate::tls::TlsMode::Auto, tls_cert: None, tls_key: None }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { log_segment_mib: 64, destage_interval_ms: 20, read_mib: None, destage_defer_mib: None }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { filter: "info".into() }
    }
}

impl Default for DefaultShare {
    fn default() -> Self {
        DefaultShare { name: "public".into(), path: "/public".into() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{key}: {message}")]
    Invalid { key: &'static str, message: String },
}

impl Config {
    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let c: Config =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: origin.into(), message: e.to_string() })?;
        c.validate()?;
        Ok(c)
    }

    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: String| Err(ConfigError::Invalid { key, message });
        if self.data_dir.as_os_str().is_empty() {
            return invalid("data_dir", "must not be empty".into());
        }
        if self.node_id == 0 {
            return invalid("node_id", "must be at least 1 (raft ids start at 1)".into());
        }
        if !(1..=1000).contains(&self.durability.window_ms) {
            return invalid("durability.window_ms", format!("{} is outside 1..=1000", self.durability.window_ms));
        }
        if self.durability.wal_prepare_mib > 1024 {
            return invalid("durability.wal_prepare_mib", format!("{} is outside 0..=1024", self.durability.wal_prepare_mib));
        }
        if self.executors > 1024 {
            return invalid("executors", format!("{} is more than 1024", self.executors));
        }
        if !(1..=1024).contains(&self.io_memory_mib) {
            return invalid("io_memory_mib", format!("{} is outside 1..=1024", self.io_memory_mib));
        }
        for (key, addr) in [
            ("admin.listen", &self.admin.listen),
            ("smb.listen", &self.smb.listen),
            ("nfs.listen", &self.nfs.listen),
        ] {
            if addr.parse::<SocketAddr>().is_err() {
                return invalid(key, format!("{addr:?} is not an address:port such as 0.0.0.0:445"));
            }
        }
        if self.nfs.require_signing || self.nfs.encrypt || !self.nfs.multichannel {
            return invalid(
                "nfs.require_signing",
                "require_signing, encrypt and multichannel are SMB settings ([smb]); NFS has none".into(),
            );
        }
        if let Some(d) = &self.nfs.id_domain {
            let ok = !d.is_empty()
                && d.len() <= 253
                && d.split('.').all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
            if !ok {
                return invalid("nfs.id_domain", format!("{d:?} is not a DNS domain name"));
            }
        }
        if !(5..=3600).contains(&self.nfs.lease_secs) {
            return invalid("nfs.lease_secs", format!("{} is outside 5..=3600", self.nfs.lease_secs));
        }
        if let Some(m) = self.cache.read_mib.filter(|&m| m > 1 << 20) {
            return invalid("cache.read_mib", format!("{m} is over 1048576 (1 TiB)"));
        }
        if let Some(m) = self.cache.destage_defer_mib.filter(|&m| m > 1 << 16) {
            return invalid("cache.destage_defer_mib", format!("{m} is over 65536 (64 GiB)"));
        }
        if !(1..=4096).contains(&self.cache.log_segment_mib) {
            return invalid("cache.log_segment_mib", format!("{} is outside 1..=4096", self.cache.log_segment_mib));
        }
        if !(1..=60_000).contains(&self.cache.destage_interval_ms) {
            return invalid(
                "cache.destage_interval_ms",
                format!("{} is outside 1..=60000", self.cache.destage_interval_ms),
            );
        }
        let l = &self.limits;
        let ranges: [(&'static str, u64, u64, u64); 17] = [
            ("limits.smb_durable_timeout_ms", l.smb_durable_timeout_ms, 1, 300_000),
            ("limits.smb_durable_handles", l.smb_durable_handles as u64, 0, 1 << 20),
            ("limits.smb_oplock_break_ms", l.smb_oplock_break_ms, 1, 600_000),
            ("limits.disk_reserve_mib", l.disk_reserve_mib, 0, 1 << 20),
            ("limits.connections", l.connections as u64, 1, 1 << 20),
            ("limits.connections_per_client", l.connections_per_client as u64, 1, 1 << 20),
            ("limits.requests_per_connection", l.requests_per_connection as u64, 1, 1024),
            ("limits.smb_message_max", l.smb_message_max as u64, 128 << 10, 64 << 20),
            ("limits.nfs_record_max", l.nfs_record_max as u64, 128 << 10, 64 << 20),
            ("limits.nfs_compound_ops", l.nfs_compound_ops as u64, 2, 1 << 16),
            ("limits.smb_credits", l.smb_credits as u64, 1, 16384),
            ("limits.smb_open_files_per_session", l.smb_open_files_per_session as u64, 1, 1 << 20),
            ("limits.smb_notify_watches", l.smb_notify_watches as u64, 1, 1 << 16),
            ("limits.nfs_open_files_per_client", l.nfs_open_files_per_client as u64, 1, 1 << 20),
            ("limits.smb_transact_max", l.smb_transact_max as u64, 64 << 10, 8 << 20),
            ("limits.nfs_readdir_max", l.nfs_readdir_max as u64, 4 << 10, 16 << 20),
            ("limits.metadata_queue", l.metadata_queue as u64, 16, 1 << 20),
        ];
        for (key, v, lo, hi) in ranges {
            if !(lo..=hi).contains(&v) {
                return invalid(key, format!("{v} is outside {lo}..={hi}"));
            }
        }
        self.validate_cluster()?;
        if let Err(e) = duet_admin_api::validate_share_name(&self.default_share.name) {
            return invalid("default_share.name", e.message);
        }
        if let Err(e) = duet_admin_api::validate_share_path(&self.default_share.path) {
            return invalid("default_share.path", e.message);
        }
        Ok(())
    }

    /// `[cluster]` without reading anything: the address, the peers (each
    /// `ID@ADDR`, ids unique and at least 1, addresses unique, `node_id`
    /// among them), and a `secret_file` when there is more than one peer.
    fn validate_cluster(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: String| Err(ConfigError::Invalid { key, message });
        let c = &self.cluster;
        if c.listen.parse::<SocketAddr>().is_err() {
            return invalid("cluster.listen", format!("{:?} is not an address:port such as 0.0.0.0:7446", c.listen));
        }
        let mut peers: Vec<Peer> = Vec::with_capacity(c.peers.len());
        for text in &c.peers {
            let p = Peer::parse(text).map_err(|message| ConfigError::Invalid { key: "cluster.peers", message })?;
            if peers.iter().any(|q| q.id == p.id) {
                return invalid("cluster.peers", format!("the id {} is listed twice", p.id));
            }
            if peers.iter().any(|q| q.addr == p.addr) {
                return invalid("cluster.peers", format!("the address {} is listed twice", p.addr));
            }
            peers.push(p);
        }
        if !peers.is_empty() && !peers.iter().any(|p| p.id == self.node_id) {
            let ids: Vec<String> = peers.iter().map(|p| p.id.to_string()).collect();
            return invalid(
                "cluster.peers",
                format!("this node's node_id {} is not among the peers' ids ({})", self.node_id, ids.join(", ")),
            );
        }
        if c.forward_max == 0 || c.forward_max > 65_536 {
            return invalid("cluster.forward_max", format!("{} is not between 1 and 65536", c.forward_max));
        }
        if c.forward_timeout_ms < 100 || c.forward_timeout_ms > 600_000 {
            return invalid("cluster.forward_timeout_ms", format!("{} is not between 100 and 600000", c.forward_timeout_ms));
        }
        if c.log_retain == 0 || c.log_retain > 1 << 24 {
            return invalid("cluster.log_retain", format!("{} is not between 1 and 16777216", c.log_retain));
        }
        if c.leader_wait_ms > 600_000 {
            return invalid("cluster.leader_wait_ms", format!("{} is more than 600000", c.leader_wait_ms));
        }
        if c.smb_leader_wait_ms > 600_000 {
            return invalid("cluster.smb_leader_wait_ms", format!("{} is more than 600000", c.smb_leader_wait_ms));
        }
        for (key, v, lo, hi) in [
            ("cluster.peer_queue", c.peer_queue as u64, 16, 1 << 20),
            // A push carries up to 32 MiB: the bound must admit one.
            ("cluster.peer_queue_mib", c.peer_queue_mib, 32, 65_536),
            ("cluster.peer_connections", c.peer_connections as u64, 4, 4096),
            ("cluster.snapshot_transfers", c.snapshot_transfers as u64, 1, 64),
            ("cluster.replica_inbound", c.replica_inbound as u64, 16, 1 << 20),
            // One write-cache frame may carry 32 MiB of data
            // (`duet_cache::replica::DATA_MAX`): the bound must hold two.
            ("cluster.replica_inbound_mib", c.replica_inbound_mib, 64, 65_536),
            ("cluster.forwarded_admin", c.forwarded_admin as u64, 1, 65_536),
            // raft-rs needs at least one message's worth (16 MiB).
            ("cluster.uncommitted_mib", c.uncommitted_mib, 16, 1 << 20),
            // One push carries up to 32 MiB of data
            // (`duet_cache::replica::DATA_MAX`): the bound must admit one.
            ("cluster.replica_push_mib", c.replica_push_mib, 32, 65_536),
            ("cluster.replica_workers", c.replica_workers as u64, 1, 4096),
        ] {
            if !(lo..=hi).contains(&v) {
                return invalid(key, format!("{v} is not between {lo} and {hi}"));
            }
        }

        let mut seen: Vec<std::net::IpAddr> = Vec::new();
        for text in &c.public_addresses {
            let ip = parse_public_address(text).map_err(|message| ConfigError::Invalid { key: "cluster.public_addresses", message })?;
            if seen.contains(&ip) {
                return invalid("cluster.public_addresses", format!("{ip} is listed twice"));
            }
            if peers.iter().any(|p| p.addr.ip() == ip) {
                return invalid("cluster.public_addresses", format!("{ip} is a node's cluster address, not one that moves"));
            }
            seen.push(ip);
        }
        if !c.public_addresses.is_empty() {
            if peers.len() < 2 {
                return invalid(
                    "cluster.public_addresses",
                    "public addresses move between the nodes of a cluster: configure [cluster] peers (a single node serves on its own addresses)".into(),
                );
            }
            let i = &c.public_interface;
            if i.is_empty() || i.len() > 15 || i.contains('/') || i.chars().any(|ch| ch.is_whitespace() || ch.is_control()) {
                return invalid("cluster.public_interface", format!("{i:?} is not an interface name such as eth0"));
            }
        }
        if let Some(f) = &c.secret_file {
            if f.as_os_str().is_empty() {
                return invalid("cluster.secret_file", "must not be empty (leave the key out for none)".into());
            }
        } else if peers.len() > 1 {
            return invalid(
                "cluster.secret_file",
                format!(
                    "a cluster of {} nodes needs a secret_file: a file of at least {CLUSTER_SECRET_MIN} bytes, \
                     the same on every node, that authenticates the nodes to each other",
                    peers.len()
                ),
            );
        }
        Ok(())
    }

    /// The cluster this node belongs to, with the secret read from
    /// `[cluster] secret_file` (a file that is missing, unreadable or
    /// shorter than [`CLUSTER_SECRET_MIN`] bytes is refused, key named).
    ///
    /// Call after [`Config::validate`].
    pub fn cluster_plan(&self) -> Result<ClusterPlan, ConfigError> {
        self.validate_cluster()?;
        let c = &self.cluster;
        let mut voters = Vec::with_capacity(c.peers.len());
        for text in &c.peers {
            voters.push(Peer::parse(text).map_err(|message| ConfigError::Invalid { key: "cluster.peers", message })?);
        }
        let secret = match &c.secret_file {
            None => None,
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| ConfigError::Invalid {
                    key: "cluster.secret_file",
                    message: format!("cannot read {}: {e}", path.display()),
                })?;
                if bytes.len() < CLUSTER_SECRET_MIN {
                    return Err(ConfigError::Invalid {
                        key: "cluster.secret_file",
                        message: format!(
                            "{} holds {} bytes; a cluster secret needs at least {CLUSTER_SECRET_MIN} \
                             (e.g. head -c 32 /dev/urandom > {})",
                            path.display(),
                            bytes.len(),
                            path.display()
                        ),
                    });
                }
                Some(bytes)
            }
        };
        let addr = voters.iter().find(|p| p.id == self.node_id).map(|p| p.addr.to_string()).unwrap_or_else(|| c.listen.clone());
        if voters.is_empty() {
            // validate_cluster checked it parses
            if let Ok(addr) = c.listen.parse() {
                voters.push(Peer { id: self.node_id, addr });
            }
        }
        Ok(ClusterPlan { node_id: self.node_id, voters, addr, secret })
    }

    pub fn executors(&self) -> usize {
        if self.executors == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            self.executors
        }
    }

    pub fn admin_addr(&self) -> SocketAddr {
        // validate() checked it
        self.admin.listen.parse().unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 7445)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_text_matches_defaults() {
        let c = Config::parse(DEFAULT_CONFIG, "default").unwrap();
        let d = Config::default();
        assert_eq!(c.data_dir, d.data_dir);
        assert_eq!(c.admin.listen, d.admin.listen);
        assert_eq!(c.smb.listen, d.smb.listen);
        assert_eq!(c.cache.log_segment_mib, d.cache.log_segment_mib);
        assert_eq!(c.limits, d.limits, "DEFAULT_CONFIG documents every limit's default");
        assert_eq!(c.cluster, d.cluster, "DEFAULT_CONFIG documents [cluster]'s defaults");
        assert_eq!(c.durability, d.durability, "DEFAULT_CONFIG documents [durability]'s defaults");
        assert_eq!(c.default_share.name, "public");
        assert!(!c.testing.fault_injection && !d.testing.fault_injection);
    }

    #[test]
    fn empty_config_is_the_default() {
        let c = Config::parse("", "empty").unwrap();
        assert_eq!(c.node_id, 1);
    }

    #[test]
    fn bad_values_get_clear_errors() {
        let e = Config::parse("executors = 5000", "t").unwrap_err().to_string();
        assert!(e.contains("executors"), "{e}");
        let e = Config::parse("[smb]\nlisten = \"445\"", "t").unwrap_err().to_string();
        assert!(e.contains("smb.listen"), "{e}");
        let e = Config::parse("colour = 1", "t").unwrap_err().to_string();
        assert!(e.contains("unknown field"), "{e}");
        let e = Config::parse("node_id = \"one\"", "t").unwrap_err().to_string();
        assert!(e.contains("node_id") || e.contains("invalid type"), "{e}");
        let e = Config::parse("[limits]\nconnections = 0", "t").unwrap_err().to_string();
        assert!(e.contains("limits.connections"), "{e}");
        let e = Config::parse("[limits]\nsmb_message_max = 1000", "t").unwrap_err().to_string();
        assert!(e.contains("limits.smb_message_max"), "{e}");
        for bad in ["metadata_queue = 15", "metadata_queue = 0", "metadata_queue = 1048577"] {
            let e = key_of(&format!("[limits]\n{bad}"));
            assert!(e.starts_with("limits.metadata_queue: ") && e.contains("16..=1048576"), "{bad}: {e}");
        }
        let c = Config::parse("[limits]\nmetadata_queue = 16\n[cluster]\nreplica_push_mib = 32\nreplica_workers = 1", "t").unwrap();
        assert_eq!((c.limits.metadata_queue, c.cluster.replica_push_mib, c.cluster.replica_workers), (16, 32, 1));
        let p = c.cluster.peer_limits();
        assert_eq!((p.replica_push_bytes, p.replica_workers), (32 << 20, 1));
        let e = key_of("[durability]\nwal_prepare_mib = 1025");
        assert!(e.starts_with("durability.wal_prepare_mib: ") && e.contains("0..=1024"), "{e}");
        let c = Config::parse("[durability]\nwal_prepare_mib = 0", "t").unwrap();
        assert_eq!(c.durability.wal_prepare_mib, 0);
        let e = key_of("[cache]\ndestage_defer_mib = 65537");
        assert!(e.starts_with("cache.destage_defer_mib: ") && e.contains("65536"), "{e}");
        let c = Config::parse("[cache]\ndestage_defer_mib = 0\nread_mib = 512", "t").unwrap();
        assert_eq!(c.cache.destage_defer_bytes(), 0);
        let c = Config::parse("[cache]\nread_mib = 512", "t").unwrap();
        assert_eq!(c.cache.destage_defer_bytes(), 128 << 20, "a quarter of the read cache");
        let c = Config::parse("[cache]\nread_mib = 65536", "t").unwrap();
        assert_eq!(c.cache.destage_defer_bytes(), 1 << 30, "at most 1 GiB unset");
        let e = Config::parse("[default_share]\nname = \"a b\"", "t").unwrap_err().to_string();
        assert!(e.contains("default_share.name"), "{e}");
        for bad in ["", "a b.com", "example..com", "x@y"] {
            let e = Config::parse(&format!("[nfs]\nlisten = \"0.0.0.0:2049\"\nid_domain = {bad:?}"), "t").unwrap_err().to_string();
            assert!(e.contains("nfs.id_domain"), "{bad:?}: {e}");
        }
        let c = Config::parse("[nfs]\nlisten = \"0.0.0.0:2049\"\nid_domain = \"corp.example-1.com\"", "t").unwrap();
        assert_eq!(c.nfs.id_domain.as_deref(), Some("corp.example-1.com"));
    }

    fn key_of(text: &str) -> String {
        match Config::parse(text, "t") {
            Err(ConfigError::Invalid { key, message }) => format!("{key}: {message}"),
            Err(e) => panic!("{text}: not a key error: {e}"),
            Ok(c) => match c.cluster_plan() {
                Err(ConfigError::Invalid { key, message }) => format!("{key}: {message}"),
                Err(e) => panic!("{text}: not a key error: {e}"),
                Ok(_) => "ok".into(),
            },
        }
    }

    #[test]
    fn public_addresses_are_checked() {
        let two = "[cluster]\npeers = [\"1@127.0.0.11:1\", \"2@127.0.0.12:1\"]\nsecret_file = \"/x\"\n";
        assert_eq!(parse_public_address("10.0.0.100/24").unwrap(), std::net::Ipv4Addr::new(10, 0, 0, 100));
        assert_eq!(parse_public_address("fd00:10::50/64").unwrap(), "fd00:10::50".parse::<std::net::IpAddr>().unwrap());
        for bad in [
            "10.0.0.100", "10.0.0.100/33", "10.0.0.100/0", "x/24", "127.0.0.5/8", "224.0.0.1/4", "0.0.0.0/8", "10.0.0.1/x",
            "fd00::1/129", "fd00::1/0", "::1/128", "::/64", "ff02::1/64", "fe80::1/64",
        ] {
            assert!(parse_public_address(bad).is_err(), "{bad:?}");
        }
        let e = key_of(&format!("{two}public_addresses = [\"10.0.0.100\"]"));
        assert!(e.starts_with("cluster.public_addresses: "), "{e}");
        let e = key_of(&format!("{two}public_addresses = [\"10.0.0.100/24\", \"10.0.0.100/16\"]"));
        assert!(e.contains("listed twice"), "{e}");
        let e = key_of(&format!("{two}public_addresses = [\"127.0.0.11/8\"]"));
        assert!(e.starts_with("cluster.public_addresses: "), "{e}");
        let e = key_of("[cluster]\npublic_addresses = [\"10.0.0.100/24\"]");
        assert!(e.starts_with("cluster.public_addresses: ") && e.contains("configure [cluster] peers"), "{e}");
        let e = key_of(&format!("{two}public_addresses = [\"10.0.0.100/24\"]\npublic_interface = \"a b\""));
        assert!(e.starts_with("cluster.public_interface: "), "{e}");
    }

    #[test]
    fn peers_are_parsed_and_checked() {
        assert_eq!(Peer::parse("3@127.0.0.13:7446").unwrap(), Peer { id: 3, addr: "127.0.0.13:7446".parse().unwrap() });
        assert_eq!(Peer::parse("12@[::1]:7000").unwrap().id, 12);
        for bad in ["", "1", "@127.0.0.1:1", "0@127.0.0.1:1", "x@127.0.0.1:1", "1@127.0.0.1", "1@host:1", "-1@127.0.0.1:1"] {
            assert!(Peer::parse(bad).is_err(), "{bad:?}");
        }
        let e = key_of("[cluster]\npeers = [\"1@127.0.0.1\"]");
        assert!(e.starts_with("cluster.peers: "), "{e}");
        let e = key_of("[cluster]\npeers = [\"0@127.0.0.1:1\"]");
        assert!(e.starts_with("cluster.peers: ") && e.contains("start at 1"), "{e}");
        let e = key_of("[cluster]\npeers = [\"1@127.0.0.1:1\", \"1@127.0.0.2:1\"]\nsecret_file = \"/x\"");
        assert!(e.starts_with("cluster.peers: ") && e.contains("id 1 is listed twice"), "{e}");
        let e = key_of("[cluster]\npeers = [\"1@127.0.0.1:1\", \"2@127.0.0.1:1\"]\nsecret_file = \"/x\"");
        assert!(e.starts_with("cluster.peers: ") && e.contains("listed twice"), "{e}");
        let e = key_of("node_id = 4\n[cluster]\npeers = [\"1@127.0.0.1:1\"]");
        assert!(e.starts_with("cluster.peers: ") && e.contains("node_id 4"), "{e}");
        let e = key_of("[cluster]\nlisten = \"7446\"");
        assert!(e.starts_with("cluster.listen: "), "{e}");
        let e = key_of("[cluster]\nforward_max = 0");
        assert!(e.starts_with("cluster.forward_max: "), "{e}");
        let e = key_of("[cluster]\nforward_timeout_ms = 5");
        assert!(e.starts_with("cluster.forward_timeout_ms: "), "{e}");
        for (line, key) in [
            ("peer_queue = 1", "cluster.peer_queue"),
            ("peer_queue_mib = 31", "cluster.peer_queue_mib"),
            ("peer_queue_mib = 65537", "cluster.peer_queue_mib"),
            ("peer_connections = 0", "cluster.peer_connections"),
            ("snapshot_transfers = 0", "cluster.snapshot_transfers"),
            ("snapshot_transfers = 65", "cluster.snapshot_transfers"),
            ("replica_inbound = 2", "cluster.replica_inbound"),
            ("replica_inbound_mib = 1", "cluster.replica_inbound_mib"),
            ("forwarded_admin = 0", "cluster.forwarded_admin"),
            ("uncommitted_mib = 8", "cluster.uncommitted_mib"),
            ("replica_push_mib = 16", "cluster.replica_push_mib"),
            ("replica_push_mib = 65537", "cluster.replica_push_mib"),
            ("replica_workers = 0", "cluster.replica_workers"),
            ("replica_workers = 4097", "cluster.replica_workers"),
        ] {
            let e = key_of(&format!("[cluster]\n{line}"));
            assert!(e.starts_with(&format!("{key}: ")), "{line}: {e}");
        }
        let e = key_of("[cluster]\npeers = [\"1@127.0.0.1:1\", \"2@127.0.0.2:1\"]");
        assert!(e.starts_with("cluster.secret_file: ") && e.contains("2 nodes"), "{e}");
        let e = key_of("[cluster]\nsecret_file = \"\"");
        assert!(e.starts_with("cluster.secret_file: "), "{e}");
        let e = Config::parse("[cluster]\nsecrets = 1", "t").unwrap_err().to_string();
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn single_node_plans_and_multi_node_refusal() {
        let dir = std::env::temp_dir().join(format!("duet-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.secret");
        std::fs::write(&good, [7u8; 32]).unwrap();
        let short = dir.join("short.secret");
        std::fs::write(&short, [7u8; 31]).unwrap();
        // No [cluster]: one voter, this node, at the listen address.
        let p = Config::parse("node_id = 5", "t").unwrap().cluster_plan().unwrap();
        assert_eq!(p.voters, vec![Peer { id: 5, addr: CLUSTER_LISTEN_DEFAULT.parse().unwrap() }]);
        assert_eq!(p.addr, CLUSTER_LISTEN_DEFAULT);
        assert!(p.secret.is_none());
        // A list of this node alone: its own entry's address.
        let p = Config::parse("node_id = 2\n[cluster]\npeers = [\"2@127.0.0.12:7446\"]", "t").unwrap().cluster_plan().unwrap();
        assert_eq!(p.addr, "127.0.0.12:7446");
        assert_eq!(p.voters.len(), 1);
        // A secret is read and checked even for one node.
        let text = format!("[cluster]\nsecret_file = {good:?}");
        let p = Config::parse(&text, "t").unwrap().cluster_plan().unwrap();
        assert_eq!(p.secret.as_deref(), Some(&[7u8; 32][..]));
        let e = key_of(&format!("[cluster]\nsecret_file = {short:?}"));
        assert!(e.starts_with("cluster.secret_file: ") && e.contains("31 bytes"), "{e}");
        let e = key_of(&format!("[cluster]\nsecret_file = {:?}", dir.join("missing")));
        assert!(e.starts_with("cluster.secret_file: ") && e.contains("cannot read"), "{e}");
        // A valid three-node configuration: three voters, this node's
        // address its own entry, the secret read.
        let three = format!(
            "node_id = 2\n[cluster]\npeers = [\"1@127.0.0.11:7446\", \"2@127.0.0.12:7446\", \"3@127.0.0.13:7446\"]\nsecret_file = {good:?}"
        );
        let p = Config::parse(&three, "t").unwrap().cluster_plan().unwrap();
        assert_eq!(p.voters.iter().map(|v| v.id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(p.addr, "127.0.0.12:7446");
        assert!(p.secret.is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
