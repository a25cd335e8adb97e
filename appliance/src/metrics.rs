//! `GET /metrics` on the admin listener: the counters `duetctl stats`
//! shows, and the gauges of `duetctl status`, in the OpenMetrics text
//! format (which Prometheus scrapes), encoded by the `prometheus-client`
//! crate.
//!
//! The counters live where they are counted (the metadata store, the data
//! path, the engine's per-request table, the connection table); a scrape
//! reads them into a fresh registry, from the same [`Stats`] value that
//! `GET /v1/stats` returns, so the two always agree. Only the latency
//! histograms are kept here, live: the engine observes every batch.
//!
//! Served without authentication: it carries counts only (no share, user
//! or file names), and the admin listener binds loopback unless the admin
//! chooses otherwise (`[admin] listen`); see docs/metrics.md.

use std::time::Duration;

use duet_admin_api::{CapacityInfo, Stats};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::engine::RequestTag;

/// The Content-Type of the exposition (OpenMetrics 1.0 text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// "smb" or "nfs" (or "internal").
    pub protocol: String,
    /// The request: an SMB command chain ("CREATE+WRITE+CLOSE"), an NFSv3
    /// procedure, an NFSv4 COMPOUND's operations.
    pub request: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolKind {
    protocol: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Volume {
    volume: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Protocol {
    protocol: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecutorProtocol {
    executor: String,
    protocol: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Limit {
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Peer {
    peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: String,
}

fn peer_gauge(reg: &mut Registry, name: &str, help: &str, peers: &[PeerMetrics], v: impl Fn(&PeerMetrics) -> Option<u64>) {
    let f = Family::<Peer, Gauge>::default();
    for p in peers {
        if let Some(x) = v(p) {
            f.get_or_create(&Peer { peer: p.id.to_string() }).set(x.min(i64::MAX as u64) as i64);
        }
    }
    reg.register(name, help, f);
}

fn peer_counter(reg: &mut Registry, name: &str, help: &str, peers: &[PeerMetrics], v: impl Fn(&PeerMetrics) -> u64) {
    let f = Family::<Peer, Counter>::default();
    for p in peers {
        f.get_or_create(&Peer { peer: p.id.to_string() }).inc_by(v(p));
    }
    reg.register(name, help, f);
}

fn outcomes(reg: &mut Registry, name: &str, help: &str, v: &[(&'static str, u64)]) {
    let f = Family::<Outcome, Counter>::default();
    for (o, n) in v {
        f.get_or_create(&Outcome { outcome: s(o) }).inc_by(*n);
    }
    reg.register(name, help, f);
}

fn render_cluster(reg: &mut Registry, c: &ClusterMetrics) {
    let p = &c.peers;
    peer_gauge(reg, "peer_up", "1 while this node's authenticated outbound connection to the peer is up", p, |x| {
        Some(x.state.connected as u64)
    });
    peer_gauge(reg, "peer_healthy", "1 while the peer's connection to this node is open and a frame from it arrived within 3 s", p, |x| Some(x.healthy as u64));
    peer_gauge(reg, "peer_applied_index", "The applied index the peer last reported (status frames, every 500 ms)", p, |x| {
        x.state.status.map(|s| s.applied)
    });
    peer_gauge(reg, "peer_matched_index", "On the leader: raft's matched index of the peer", p, |x| x.matched);
    peer_gauge(reg, "peer_replication_lag", "On the leader: entries of its log the peer is not known to hold", p, |x| {
        x.matched.map(|m| c.last_index.saturating_sub(m))
    });
    peer_counter(reg, "peer_connects", "Outbound connections to the peer established", p, |x| x.state.connects);
    peer_counter(reg, "peer_sent_frames", "Frames (raft and others) written to the peer", p, |x| x.state.sent_frames);
    peer_counter(reg, "peer_sent_bytes", "Payload bytes written to the peer", p, |x| x.state.sent_bytes);
    peer_counter(reg, "peer_received_frames", "Authenticated frames read from the peer", p, |x| x.state.received_frames);
    peer_counter(reg, "peer_received_bytes", "Payload bytes of authenticated frames read from the peer", p, |x| x.state.received_bytes);
    peer_counter(reg, "peer_dropped", "Messages for the peer dropped: its queue was full (peer_queue frames or peer_queue_mib bytes)", p, |x| x.state.dropped);
    peer_gauge(reg, "peer_queued_bytes", "Bytes of frames queued for the peer, not yet written to its connection", p, |x| Some(x.queued_bytes));
    outcomes(
        reg,
        "forwarded_batches",
        "Client batches forwarded to the leader (sent, answered, rerouted, unavailable, unknown, resent, gave_up) and served for followers \
         (served, refused: undecodable)",
        &c.forwarded_batches,
    );
    outcomes(
        reg,
        "forwarded_admin",
        "Admin changes forwarded to the leader (sent, answered, rerouted, unknown, no_leader) and served for followers \
         (served, refused: undecodable)",
        &c.forwarded_admin,
    );
    if !c.snapshots.is_empty() {
        outcomes(
            reg,
            "raft_snapshots",
            "Raft snapshot images: served (sent whole and accepted), received (checked and staged here), failed (refused, not sent, or the transfer failed), withheld (of those failed, the images not sent: the follower would refuse them for the copies it destaged)",
            &c.snapshots,
        );
    }
    for (name, help, v) in &c.replica {
        counter(reg, name, help, *v);
    }
    if let Some(h) = &c.majority_wait {
        reg.register(
            "replica_majority_wait_seconds",
            "How long a batch with write data waited until a majority held its extents durably",
            h.clone(),
        );
    }
}

type HistogramFamily = Family<RequestLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 us .. 3.3 s, doubling.
    Histogram::new(exponential_buckets(50e-6, 2.0, 17))
}

/// Batch latency per protocol request, from the engine's start on the
/// batch to its result (metadata commit and data I/O included).
#[derive(Clone)]
pub struct Latency(HistogramFamily);

impl Default for Latency {
    fn default() -> Self {
        Latency(Family::new_with_constructor(latency_histogram as fn() -> Histogram))
    }
}

impl Latency {
    pub fn observe(&self, tag: &RequestTag, elapsed: Duration) {
        let labels = RequestLabels { protocol: tag.protocol.clone(), request: tag.request.clone() };
        self.0.get_or_create(&labels).observe(elapsed.as_secs_f64());
    }
}

/// The name `duetctl stats` and `/metrics` give a file-system error.
pub fn error_kind(e: &duet_fs::FsError) -> &'static str {
    use duet_fs::FsError as E;
    match e {
        E::NotFound => "NotFound",
        E::Exists => "Exists",
        E::NotDir => "NotDir",
        E::IsDir => "IsDir",
        E::NotEmpty => "NotEmpty",
        E::Access => "Access",
        E::Perm => "Perm",
        E::Invalid => "Invalid",
        E::InvalidName => "InvalidName",
        E::NameTooLong => "NameTooLong",
        E::NoSpace => "NoSpace",
        E::Stale => "Stale",
        E::BadRef => "BadRef",
        E::ReadOnly => "ReadOnly",
        E::TooManyLinks => "TooManyLinks",
        E::FileTooBig => "FileTooBig",
        E::NotSymlink => "NotSymlink",
        E::Io => "Io",
        E::NotSupported => "NotSupported",
        E::Skipped => "Skipped",
        E::CrossDevice => "CrossDevice",
        E::RenameIntoSelf => "RenameIntoSelf",
        E::Unavailable => "Unavailable",
        #[allow(unreachable_patterns)]
        _ => "Other",
    }
}

/// What a scrape reports besides [`Stats`].
pub struct Gauges {
    pub capacity: Option<CapacityInfo>,
    pub metadata_failed: bool,
    pub raft_term: u64,
    pub raft_commit_index: u64,
    pub raft_applied_index: u64,
    pub uptime_s: u64,
    pub executors: u32,
    /// The leader this node knows (0: none) and whether it is this node.
    pub raft_leader_id: u64,
    pub raft_is_leader: bool,
    /// A multi-node cluster's transport, forwarding and replication.
    pub cluster: Option<ClusterMetrics>,
    /// CPU seconds (user + system) used by duetd's threads, by thread
    /// name ([`thread_cpu`]).
    pub threads: Vec<(String, f64)>,
    /// Write-log segments made from a spare file (`DataCounters`).
    pub log_segments_reused: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Thread {
    thread: String,
}

/// CPU seconds this process's threads used, summed per thread name
/// (`duet-data-1`, `duet-metadata`, `rocksdb:low`, ...), from
/// `/proc/self/task/*/stat`. Which executor or thread is busy is the first
/// question when a node is slow; an empty list where /proc is unreadable.
pub fn thread_cpu() -> Vec<(String, f64)> {
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let tck = if tck > 0 { tck as f64 } else { 100.0 };
    let mut by: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return vec![] };
    for e in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // "tid (comm) state ppid ...": comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let name = stat[open + 1..close].to_string();
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // After the comm: state is field 3, utime 14 and stime 15.
        let ticks = |i: usize| rest.get(i - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        *by.entry(name).or_default() += (ticks(14) + ticks(15)) as f64 / tck;
    }
    by.into_iter().collect()
}

/// What a scrape of a node of a multi-node cluster adds.
#[derive(Default)]
pub struct ClusterMetrics {
    /// This node's last raft log index (for the leader's lag figures).
    pub last_index: u64,
    pub peers: Vec<PeerMetrics>,
    /// Forwarded client batches by outcome (label, count).
    pub forwarded_batches: Vec<(&'static str, u64)>,
    /// Forwarded admin requests by outcome (label, count).
    pub forwarded_admin: Vec<(&'static str, u64)>,
    /// Raft snapshot transfers by outcome (served, received, failed,
    /// withheld).
    pub snapshots: Vec<(&'static str, u64)>,
    /// Write-cache replication counters (name suffix, help, count).
    pub replica: Vec<(&'static str, &'static str, u64)>,
    /// How long batches waited for a majority to hold their data.
    pub majority_wait: Option<Histogram>,
}

/// One peer as this node knows it.
pub struct PeerMetrics {
    pub id: u64,
    pub state: crate::peers::PeerState,
    pub healthy: bool,
    /// On the leader: raft's matched index of the peer.
    pub matched: Option<u64>,
    /// Bytes of frames queued for the peer now (`[cluster] peer_queue_mib`).
    pub queued_bytes: u64,
}

fn counter(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let c: Counter = Counter::default();
    c.inc_by(v);
    reg.register(name, help, c);
}

fn gauge(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let g: Gauge = Gauge::default();
    g.set(v.min(i64::MAX as u64) as i64);
    reg.register(name, help, g);
}

fn s(x: &str) -> String {
    x.to_string()
}

/// The OpenMetrics text of one scrape.
pub fn render(stats: &Stats, gauges: &Gauges, latency: &Latency) -> String {
    let mut reg = Registry::with_prefix("duet");
    counter(&mut reg, "batches", "Batches run (one per client chain: SMB compound, NFSv4 COMPOUND, NFSv3 call)", stats.batches);
    counter(&mut reg, "proposals", "Raft proposals (one per mutating batch)", stats.proposals);
    let fsyncs = Family::<Volume, Counter>::default();
    for (v, n) in [("metadata", stats.fsyncs_metadata), ("log", stats.fsyncs_log), ("chunk", stats.fsyncs_chunk)] {
        fsyncs.get_or_create(&Volume { volume: s(v) }).inc_by(n);
    }
    reg.register("fsyncs", "fsyncs by volume: the metadata store's group commits, the write log, chunk files", fsyncs);
    counter(&mut reg, "rocksdb_reads", "RocksDB reads", stats.rocksdb_reads);
    counter(&mut reg, "rocksdb_writes", "RocksDB writes", stats.rocksdb_writes);
    counter(&mut reg, "chunk_reads", "Chunk file reads", stats.chunk_reads);
    counter(&mut reg, "chunk_writes", "Chunk file writes", stats.chunk_writes);
    counter(&mut reg, "log_writes", "Write-log appends", stats.log_writes);
    counter(&mut reg, "log_segments_reused", "Write-log segments made from a released segment's file instead of a new file", gauges.log_segments_reused);
    counter(&mut reg, "lazy_groups", "Metadata groups answered before they were durable (protocol shares)", stats.lazy_groups);
    counter(&mut reg, "wal_syncs", "Metadata WAL syncs that made lazy groups durable", stats.wal_syncs);
    counter(&mut reg, "raft_overloaded", "Changes refused by the raft leader at its uncommitted bound ([cluster] uncommitted_mib)", stats.raft_overloaded);
    counter(
        &mut reg,
        "raft_not_held",
        "Changes naming write cache extents not proposed: their holders were not a majority of each voter set",
        stats.raft_not_held,
    );
    counter(&mut reg, "metadata_reads_here", "Read-only batches a single node answered on the protocol executor from RocksDB's memory", stats.metadata_reads_here);
    counter(&mut reg, "metadata_reads_from_disk", "Read-only batches that needed RocksDB's disk and went to the metadata thread", stats.metadata_reads_from_disk);
    counter(&mut reg, "read_cache_hits", "Chunk blocks read from the read cache", stats.read_cache_hits);
    counter(&mut reg, "read_cache_misses", "Chunk blocks the read cache did not hold (read from the device)", stats.read_cache_misses);
    gauge(&mut reg, "read_cache_bytes", "Bytes of chunk data in the read cache", stats.read_cache_bytes);
    counter(&mut reg, "read_cache_direct_reads", "Reads the protocol executors served from the read cache themselves (no trip to the data executor)", stats.read_cache_direct);
    counter(&mut reg, "log_memory_reads", "Write-log extent reads served from memory (data not destaged yet, and the destager's own reads)", stats.log_reads_memory);
    counter(&mut reg, "log_device_reads", "Write-log extent reads that went to the device", stats.log_reads_device);
    gauge(&mut reg, "log_memory_bytes", "Bytes of write-log extents held in memory", stats.log_memory_bytes);
    counter(&mut reg, "destaged_records", "Write-log records destaged into chunk files", stats.destaged_records);
    gauge(&mut reg, "destage_backlog_records", "Write-log records not yet destaged", stats.destage_backlog);
    gauge(&mut reg, "destage_queue_records", "Data records queued on this node and not yet destaged", stats.destage_queue);
    counter(&mut reg, "destage_deferrals", "Gather intervals the destager waited for a stream of large writes to pause ([cache] destage_defer_mib)", stats.destage_deferrals);

    let requests = Family::<RequestLabels, Counter>::default();
    let req_proposals = Family::<RequestLabels, Counter>::default();
    let req_fsyncs = Family::<RequestLabels, Counter>::default();
    let read = Family::<RequestLabels, Counter>::default();
    let written = Family::<RequestLabels, Counter>::default();
    for r in &stats.by_request {
        let l = RequestLabels { protocol: r.protocol.clone(), request: r.request.clone() };
        requests.get_or_create(&l).inc_by(r.count);
        req_proposals.get_or_create(&l).inc_by(r.proposals);
        req_fsyncs.get_or_create(&l).inc_by(r.fsyncs);
        read.get_or_create(&l).inc_by(r.bytes_read);
        written.get_or_create(&l).inc_by(r.bytes_written);
    }
    reg.register("requests", "Batches per protocol request", requests);
    reg.register("request_proposals", "Raft proposals per protocol request", req_proposals);
    reg.register("request_fsyncs", "fsyncs waited for per protocol request", req_fsyncs);
    reg.register("read_bytes", "File bytes returned by READ, per protocol request", read);
    reg.register("written_bytes", "File bytes written by WRITE and server-side COPY, per protocol request", written);
    reg.register(
        "request_duration_seconds",
        "Batch latency per protocol request, from the engine's start on it to its result",
        latency.0.clone(),
    );

    let errors = Family::<ProtocolKind, Counter>::default();
    for e in &stats.errors {
        errors.get_or_create(&ProtocolKind { protocol: e.protocol.clone(), kind: e.kind.clone() }).inc_by(e.count);
    }
    reg.register("op_errors", "Operations that failed, by protocol and file-system error", errors);

    let c = &stats.connections;
    gauge(&mut reg, "connections_open", "Client connections open (SMB and NFS)", c.open);
    let accepted = Family::<Protocol, Counter>::default();
    accepted.get_or_create(&Protocol { protocol: s("smb") }).inc_by(c.accepted_smb);
    accepted.get_or_create(&Protocol { protocol: s("nfs") }).inc_by(c.accepted_nfs);
    reg.register("connections_accepted", "Client connections accepted", accepted);
    let by_exec = Family::<ExecutorProtocol, Counter>::default();
    for e in &c.by_executor {
        for (p, n) in [("smb", e.accepted_smb), ("nfs", e.accepted_nfs)] {
            by_exec.get_or_create(&ExecutorProtocol { executor: e.executor.to_string(), protocol: s(p) }).inc_by(n);
        }
    }
    reg.register("executor_connections_accepted", "Client connections accepted by each protocol executor", by_exec);
    let limits = Family::<Limit, Counter>::default();
    for (l, n) in [
        ("connections", c.refused_connections_limit),
        ("connections_per_client", c.refused_per_client_limit),
        ("message_max", c.oversize_closed),
    ] {
        limits.get_or_create(&Limit { limit: s(l) }).inc_by(n);
    }
    reg.register("limit_hits", "Connections refused or closed over a [limits] key", limits);
    counter(&mut reg, "smb_logon_failures", "SMB SESSION_SETUPs refused with STATUS_LOGON_FAILURE", c.smb_logon_failures);
    counter(&mut reg, "admin_auth_failures", "Admin API requests refused for their credentials", c.admin_auth_failures);

    if let Some(cap) = &gauges.capacity {
        gauge(&mut reg, "volume_size_bytes", "Size of the data volume", cap.total_bytes);
        gauge(&mut reg, "volume_free_bytes", "Free bytes of the data volume, less the reserve", cap.free_bytes);
        gauge(&mut reg, "volume_avail_bytes", "Bytes clients may still write, less the reserve", cap.avail_bytes);
        gauge(&mut reg, "volume_reserve_bytes", "[limits] disk_reserve_mib in bytes", cap.reserve_bytes);
    }
    gauge(&mut reg, "metadata_failed", "1 when a metadata write failed (changes refused until restart)", gauges.metadata_failed as u64);
    gauge(&mut reg, "raft_term", "Raft term of the metadata group", gauges.raft_term);
    gauge(&mut reg, "raft_commit_index", "Raft commit index", gauges.raft_commit_index);
    gauge(&mut reg, "raft_applied_index", "Raft applied index", gauges.raft_applied_index);
    gauge(&mut reg, "raft_leader_id", "The leader this node knows of (0: none)", gauges.raft_leader_id);
    gauge(&mut reg, "raft_is_leader", "1 while this node leads the metadata group", gauges.raft_is_leader as u64);
    if let Some(c) = &gauges.cluster {
        render_cluster(&mut reg, c);
    }
    let threads = Family::<Thread, Counter<f64, std::sync::atomic::AtomicU64>>::default();
    for (name, secs) in &gauges.threads {
        threads.get_or_create(&Thread { thread: name.clone() }).inc_by(*secs);
    }
    reg.register("thread_cpu_seconds", "CPU seconds (user + system) used by duetd's threads, by thread name", threads);
    gauge(&mut reg, "uptime_seconds", "Seconds since duetd started", gauges.uptime_s);
    gauge(&mut reg, "executors", "Protocol executors (one per core)", gauges.executors as u64);

    let mut out = String::new();
    // Writing into a String does not fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &reg);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_reads_this_process_threads() {
        let t = std::thread::Builder::new()
            .name("cpu-burner".into())
            .spawn(|| {
                let start = std::time::Instant::now();
                let mut x = 0u64;
                while start.elapsed() < Duration::from_millis(300) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                std::hint::black_box(x);
                thread_cpu()
            })
            .unwrap();
        let seen = t.join().unwrap();
        let burner = seen.iter().find(|(n, _)| n == "cpu-burner").map(|x| x.1);
        assert!(burner.is_some_and(|s| s > 0.05), "{seen:?}");
    }

    #[test]
    fn renders_counters_and_histograms() {
        let lat = Latency::default();
        lat.observe(&RequestTag::new("smb", "CREATE"), Duration::from_micros(300));
        let mut stats = Stats { batches: 3, fsyncs_log: 2, ..Default::default() };
        stats.by_request.push(duet_admin_api::RequestStats {
            protocol: "smb".into(),
            request: "CREATE".into(),
            count: 1,
            bytes_written: 5,
            ..Default::default()
        });
        let g = Gauges {
            capacity: Some(CapacityInfo { total_bytes: 10, free_bytes: 5, avail_bytes: 4, reserve_bytes: 1 }),
            metadata_failed: false,
            raft_term: 2,
            raft_commit_index: 9,
            raft_applied_index: 9,
            uptime_s: 1,
            executors: 2,
            raft_leader_id: 1,
            raft_is_leader: true,
            cluster: Some(ClusterMetrics {
                last_index: 12,
                peers: vec![PeerMetrics {
                    id: 2,
                    state: crate::peers::PeerState { connected: true, sent_frames: 4, dropped: 1, ..Default::default() },
                    healthy: true,
                    matched: Some(10),
                    queued_bytes: 7,
                }],
                forwarded_batches: vec![("sent", 3)],
                forwarded_admin: vec![("no_leader", 1)],
                snapshots: vec![("served", 2)],
                replica: vec![("replica_pushes", "Extents pushed", 5)],
                majority_wait: Some({
                    let h = Histogram::new(exponential_buckets(100e-6, 2.0, 17));
                    h.observe(0.002);
                    h
                }),
            }),
            threads: vec![("duet-data-1".into(), 1.5)],
            log_segments_reused: 3,
        };
        let text = render(&stats, &g, &lat);
        for line in [
            "duet_thread_cpu_seconds_total{thread=\"duet-data-1\"} 1.5\n",
            "duet_batches_total 3\n",
            "duet_log_segments_reused_total 3\n",
            "duet_fsyncs_total{volume=\"log\"} 2\n",
            "duet_requests_total{protocol=\"smb\",request=\"CREATE\"} 1\n",
            "duet_written_bytes_total{protocol=\"smb\",request=\"CREATE\"} 5\n",
            "duet_request_duration_seconds_count{protocol=\"smb\",request=\"CREATE\"} 1\n",
            "duet_volume_avail_bytes 4\n",
            "duet_raft_is_leader 1\n",
            "duet_peer_up{peer=\"2\"} 1\n",
            "duet_peer_replication_lag{peer=\"2\"} 2\n",
            "duet_peer_sent_frames_total{peer=\"2\"} 4\n",
            "duet_peer_dropped_total{peer=\"2\"} 1\n",
            "duet_forwarded_batches_total{outcome=\"sent\"} 3\n",
            "duet_forwarded_admin_total{outcome=\"no_leader\"} 1\n",
            "duet_raft_snapshots_total{outcome=\"served\"} 2\n",
            "duet_replica_pushes_total 5\n",
            "duet_replica_majority_wait_seconds_count 1\n",
            "# TYPE duet_request_duration_seconds histogram\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
