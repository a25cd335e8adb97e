//! `GET /metrics` and the capacity clients see, against a real duetd.
//!
//! - After an SMB and NFSv3 workload (writes through the write log, reads,
//!   lookups of missing names, a failed logon), `/metrics` is parsed by
//!   the Prometheus project's own OpenMetrics parser (Python
//!   `prometheus_client`, Debian's python3-prometheus-client, installed by
//!   scripts/install-deps.sh), and its counters are what `duetctl stats
//!   --json` reports: exactly for the protocol requests (nothing else
//!   touches them), between two `stats` calls for the totals (the
//!   executors' catalog refresh runs batches every second).
//! - smbclient's `du` (FileFsFullSizeInformation), NFSv3 FSSTAT and
//!   `duetctl status` report the data volume's statvfs less
//!   `[limits] disk_reserve_mib`.

mod clients;
mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use clients::*;
use common::{statvfs, Daemon};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::xdr::Opaque;
use duet_protocols::smb2::status::NtStatus;

/// One HTTP/1.1 request to the admin listener, without credentials:
/// (status, Content-Type, body).
fn http(addr: &str, method: &str, path: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).expect("the reply is UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete HTTP reply");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: ").or_else(|| l.strip_prefix("content-type: ")))
        .unwrap_or("")
        .to_string();
    (status, ctype, body.to_string())
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append({"family": fam.name, "type": fam.type, "name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;

/// A parsed sample: (name, sorted labels) -> value.
type Samples = BTreeMap<(String, Vec<(String, String)>), f64>;

/// Parses an exposition with prometheus_client's OpenMetrics parser
/// (strict: it refuses a malformed line, a missing `# EOF`, histogram
/// buckets that are not cumulative, ...).
fn parse(text: &str) -> (Samples, BTreeMap<String, String>) {
    // Debian's interpreter: python3-prometheus-client installs for it, and
    // a python3 earlier on PATH (pyenv) would not see the module.
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "the OpenMetrics parser refused /metrics (or python3-prometheus-client is missing: \
         scripts/install-deps.sh installs it):\n{}\n--- exposition ---\n{text}",
        String::from_utf8_lossy(&o.stderr)
    );
    let list: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let mut samples = Samples::new();
    let mut types = BTreeMap::new();
    for v in list {
        let mut labels: Vec<(String, String)> = v["labels"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, x)| (k.clone(), x.as_str().unwrap().to_string()))
            .collect();
        labels.sort();
        types.insert(v["family"].as_str().unwrap().to_string(), v["type"].as_str().unwrap().to_string());
        samples.insert((v["name"].as_str().unwrap().to_string(), labels), v["value"].as_f64().unwrap());
    }
    (samples, types)
}

fn get(s: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut l: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    l.sort();
    *s.get(&(name.to_string(), l.clone())).unwrap_or_else(|| panic!("no sample {name}{l:?}"))
}

fn stats(d: &Daemon) -> serde_json::Value {
    serde_json::from_str(&d.ok(&["--json", "stats"])).unwrap()
}

fn u(v: &serde_json::Value) -> f64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}")) as f64
}

#[test]
fn metrics_parse_and_match_duetctl_stats_after_a_workload() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(2500));
    // The harness's readiness probe connected once to each port.
    let start = stats(&d);

    // A failed logon, then SMB: a 100 KiB file (through the write log), a
    // small one, reads, an open of a missing name.
    let mut bad = Smb::connect(d.smb_port);
    bad.negotiate();
    assert_eq!(bad.login("bench", "wrong"), NtStatus::LOGON_FAILURE);
    drop(bad);
    let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
    let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let mut smb_written = 0u64;
    let mut smb_read = 0u64;
    for (name, data) in [("big.bin", &big[..]), ("small.txt", &b"hello metrics"[..])] {
        let f = c.create(name).unwrap();
        assert_eq!(c.write(f, 0, data, false), NtStatus::SUCCESS);
        smb_written += data.len() as u64;
        assert_eq!(c.close(f), NtStatus::SUCCESS);
        let f = c.open_read(name).unwrap();
        let back = c.read_all(f, data.len()).unwrap();
        assert_eq!(back, data);
        smb_read += back.len() as u64;
        c.close(f);
    }
    assert!(c.open_read("missing.txt").is_err());

    // NFSv3: create, write, read, a lookup of a missing name.
    let mut n = Nfs::connect(d.nfs_port);
    let root = n.mount("/public").unwrap();
    let fh = n.create3(&root, "nfs.bin").unwrap();
    let payload = vec![0x5a; 20_000];
    assert_eq!(n.write3(&fh, 0, &payload).unwrap(), payload.len() as u32);
    assert_eq!(n.read3_all(&fh).unwrap(), payload);
    assert_eq!(n.lookup3(&root, b"missing"), Err(Nfsstat3::NOENT));

    let before = stats(&d);
    let (status, ctype, text) = http(&d.admin, "GET", "/metrics");
    let after = stats(&d);
    assert_eq!(status, 200, "{text}");
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    let (m, types) = parse(&text);

    // Per protocol request: exactly what duetctl stats reports.
    let mut smb_bytes = (0.0, 0.0);
    let mut nfs_bytes = (0.0, 0.0);
    let mut seen = 0;
    for r in after["by_request"].as_array().unwrap() {
        let proto = r["protocol"].as_str().unwrap();
        if proto != "smb" && proto != "nfs" {
            continue;
        }
        seen += 1;
        let l = [("protocol", proto), ("request", r["request"].as_str().unwrap())];
        assert_eq!(get(&m, "duet_requests_total", &l), u(&r["count"]), "{r}");
        assert_eq!(get(&m, "duet_request_proposals_total", &l), u(&r["proposals"]), "{r}");
        assert_eq!(get(&m, "duet_request_fsyncs_total", &l), u(&r["fsyncs"]), "{r}");
        assert_eq!(get(&m, "duet_read_bytes_total", &l), u(&r["bytes_read"]), "{r}");
        assert_eq!(get(&m, "duet_written_bytes_total", &l), u(&r["bytes_written"]), "{r}");
        assert_eq!(get(&m, "duet_request_duration_seconds_count", &l), u(&r["count"]), "{r}");
        let inf = [l[0], l[1], ("le", "+Inf")];
        assert_eq!(get(&m, "duet_request_duration_seconds_bucket", &inf), u(&r["count"]), "{r}");
        let b = if proto == "smb" { &mut smb_bytes } else { &mut nfs_bytes };
        b.0 += u(&r["bytes_read"]);
        b.1 += u(&r["bytes_written"]);
    }
    assert!(seen >= 4, "SMB and NFS requests are listed: {after}");
    assert_eq!(smb_bytes, (smb_read as f64, smb_written as f64), "SMB bytes read and written");
    assert_eq!(nfs_bytes, (payload.len() as f64, payload.len() as f64), "NFS bytes read and written");
    assert_eq!(types.get("duet_request_duration_seconds").map(String::as_str), Some("histogram"));
    assert_eq!(types.get("duet_batches").map(String::as_str), Some("counter"));

    // Errors by kind: the missing names.
    for e in after["errors"].as_array().unwrap() {
        let l = [("protocol", e["protocol"].as_str().unwrap()), ("kind", e["kind"].as_str().unwrap())];
        if l[0].1 == "smb" || l[0].1 == "nfs" {
            assert_eq!(get(&m, "duet_op_errors_total", &l), u(&e["count"]), "{e}");
        }
    }
    assert!(get(&m, "duet_op_errors_total", &[("protocol", "smb"), ("kind", "NotFound")]) >= 1.0);
    assert!(get(&m, "duet_op_errors_total", &[("protocol", "nfs"), ("kind", "NotFound")]) >= 1.0);

    // Connections and logon failures: nothing else connects meanwhile.
    let c_after = &after["connections"];
    assert_eq!(get(&m, "duet_connections_accepted_total", &[("protocol", "smb")]), u(&c_after["accepted_smb"]));
    assert_eq!(get(&m, "duet_connections_accepted_total", &[("protocol", "nfs")]), u(&c_after["accepted_nfs"]));
    let accepted = |p: &str| u(&c_after[p]) - u(&start["connections"][p]);
    assert_eq!(accepted("accepted_smb"), 2.0, "the failed logon's and the client's");
    assert_eq!(accepted("accepted_nfs"), 1.0);
    assert_eq!(get(&m, "duet_connections_open", &[]), u(&c_after["open"]));
    assert_eq!(u(&c_after["open"]), 2.0, "the SMB and NFS clients are still connected");
    assert_eq!(get(&m, "duet_smb_logon_failures_total", &[]), 1.0);
    assert_eq!(u(&c_after["smb_logon_failures"]), 1.0);
    assert_eq!(get(&m, "duet_limit_hits_total", &[("limit", "connections")]), 0.0);

    // Totals: between the two stats calls.
    let between = |metric: f64, key: &str| {
        let (lo, hi) = (u(&before[key]), u(&after[key]));
        assert!(lo <= metric && metric <= hi, "{key}: /metrics says {metric}, stats {lo}..{hi}");
    };
    between(get(&m, "duet_batches_total", &[]), "batches");
    between(get(&m, "duet_proposals_total", &[]), "proposals");
    between(get(&m, "duet_rocksdb_reads_total", &[]), "rocksdb_reads");
    between(get(&m, "duet_rocksdb_writes_total", &[]), "rocksdb_writes");
    between(get(&m, "duet_chunk_writes_total", &[]), "chunk_writes");
    between(get(&m, "duet_log_writes_total", &[]), "log_writes");
    between(get(&m, "duet_destaged_records_total", &[]), "destaged_records");
    let fsyncs: f64 = ["metadata", "log", "chunk"].iter().map(|v| get(&m, "duet_fsyncs_total", &[("volume", v)])).sum();
    between(fsyncs, "fsyncs");
    assert!(get(&m, "duet_log_writes_total", &[]) >= 1.0, "the 100 KiB write went through the write log");
    assert!(get(&m, "duet_fsyncs_total", &[("volume", "log")]) >= 1.0);

    // Gauges.
    let status: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "status"])).unwrap();
    assert_eq!(get(&m, "duet_volume_size_bytes", &[]), u(&status["capacity"]["total_bytes"]));
    assert_eq!(get(&m, "duet_volume_reserve_bytes", &[]), (256u64 << 20) as f64);
    assert_eq!(get(&m, "duet_metadata_failed", &[]), 0.0);
    assert_eq!(get(&m, "duet_executors", &[]), 1.0);
    assert!(get(&m, "duet_raft_applied_index", &[]) >= 1.0);

    // Unauthenticated GET only; other endpoints still want credentials.
    assert_eq!(http(&d.admin, "POST", "/metrics").0, 405);
    assert_eq!(http(&d.admin, "GET", "/v1/stats").0, 401);
    assert!(u(&stats(&d)["connections"]["admin_auth_failures"]) >= 1.0);
}

/// Free space moves while the daemon runs (its own RocksDB and write
/// log, other processes): this much is close enough.
const SLACK: u64 = 64 << 20;

fn close(what: &str, got: u64, want: u64) {
    assert!(got.abs_diff(want) <= SLACK, "{what}: {got} reported, statvfs says {want}");
}

#[test]
fn smb_nfs_and_status_report_the_data_volumes_capacity() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(2500));
    let reserve = 256u64 << 20;
    let (total, free, avail) = statvfs(&d.data);
    assert!(total > 0);

    // smbclient `du`: "N blocks of size 4096. M blocks available".
    let o = Command::new("smbclient")
        .args(["//127.0.0.1/public", "-p", &d.smb_port.to_string(), "-U", "bench%benchpw", "-c", "du"])
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{text}");
    let words: Vec<&str> = text.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "blocks").unwrap_or_else(|| panic!("no block count in {text}"));
    let blocks: u64 = words[at - 1].parse().unwrap();
    assert_eq!(words[at + 1..at + 3], ["of", "size"], "{text}");
    let unit: u64 = words[at + 3].trim_end_matches('.').parse().unwrap();
    let avail_blocks: u64 = words[at + 4].parse().unwrap();
    assert_eq!(unit, 4096, "{text}");
    assert_eq!(blocks, total / unit, "smbclient's total blocks are the volume's: {text}");
    close("smbclient blocks available", avail_blocks * unit, avail.saturating_sub(reserve));
    assert_ne!(blocks, 268_435_456, "not the old fixed figure");

    // NFSv3 FSSTAT (RFC 1813 3.3.18).
    let mut n = Nfs::connect(d.nfs_port);
    let root = n.mount("/public").unwrap();
    let rep = n.v3(&Nfs3Args::FsStat(FsRootArgs3 { fsroot: Opaque(&root) }));
    let Nfs3Results::FsStat(Nfs3Res::Ok(st)) = results3(proc3::FSSTAT, &rep) else { panic!("FSSTAT failed") };
    assert_eq!(st.tbytes, total, "FSSTAT tbytes");
    close("FSSTAT fbytes", st.fbytes, free.saturating_sub(reserve));
    close("FSSTAT abytes", st.abytes, avail.saturating_sub(reserve));
    assert!(st.abytes <= st.fbytes && st.fbytes <= st.tbytes);

    // duetctl status.
    let status: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "status"])).unwrap();
    let cap = &status["capacity"];
    assert_eq!(cap["total_bytes"].as_u64(), Some(total));
    close("status avail_bytes", cap["avail_bytes"].as_u64().unwrap(), avail.saturating_sub(reserve));
    close("status free_bytes", cap["free_bytes"].as_u64().unwrap(), free.saturating_sub(reserve));
    let human = d.ok(&["status"]);
    assert!(human.contains("capacity:") && human.contains("(reserve 256.0 MiB)"), "{human}");
}
