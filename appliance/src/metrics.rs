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
struct Limit {
    limit: String,
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
    counter(&mut reg, "destaged_records", "Write-log records destaged into chunk files", stats.destaged_records);
    gauge(&mut reg, "destage_backlog_records", "Write-log records not yet destaged", stats.destage_backlog);

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
        };
        let text = render(&stats, &g, &lat);
        for line in [
            "duet_batches_total 3\n",
            "duet_fsyncs_total{volume=\"log\"} 2\n",
            "duet_requests_total{protocol=\"smb\",request=\"CREATE\"} 1\n",
            "duet_written_bytes_total{protocol=\"smb\",request=\"CREATE\"} 5\n",
            "duet_request_duration_seconds_count{protocol=\"smb\",request=\"CREATE\"} 1\n",
            "duet_volume_avail_bytes 4\n",
            "# TYPE duet_request_duration_seconds histogram\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
