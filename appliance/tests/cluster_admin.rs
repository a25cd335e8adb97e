//! A three-node cluster is administered through any node (issue 12):
//! three real duetd on 127.0.0.11/.12/.13. A peer holding the secret
//! that sends undecodable admin and status frames to the leader has each
//! dropped and logged (never acted on). `duetctl share add` and `user
//! add` sent to a follower are forwarded to the leader over the peer link
//! and succeed; the share is listed on all three nodes and smbclient uses
//! it, as the new user, through the other follower; a conflicting change
//! through a follower gets the leader's refusal verbatim (exit 4);
//! `GET /v1/cluster` on a follower shows every node's applied index (equal
//! once settled) and health; `/metrics` on the leader and on a follower
//! parses (prometheus_client's OpenMetrics parser) and carries the raft,
//! peer and forwarding families. A change sent through a follower while
//! the leader is SIGSTOPped gets `outcome_unknown` (exit 8) once the
//! others elect another leader, and was not sent again; with two nodes
//! killed, a change on the last one gets `no_leader` (exit 7) within
//! `leader_wait_ms` plus slack.
//!
//! Every wait is bounded (a poll with a deadline).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, Daemon};
use duet_cluster::peer_wire::{FrameKind, Handshake, HandshakeStep, Session};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const HOSTS: [&str; 3] = ["127.0.0.11", "127.0.0.12", "127.0.0.13"];
/// `[cluster] leader_wait_ms` of these nodes.
const LEADER_WAIT_MS: u64 = 2000;

/// A port free on all three addresses, not in `taken`.
fn shared_port(taken: &[u16]) -> u16 {
    'next: for _ in 0..100 {
        let l = std::net::TcpListener::bind((HOSTS[0], 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        if taken.contains(&port) {
            continue;
        }
        let mut held = vec![l];
        for host in &HOSTS[1..] {
            match std::net::TcpListener::bind((*host, port)) {
                Ok(l) => held.push(l),
                Err(_) => continue 'next,
            }
        }
        return port;
    }
    panic!("no port free on 127.0.0.11 to .13");
}

fn spawn_node(root: &Path, id: u64, cluster: u16, smb: u16, secret: &Path) -> Daemon {
    let host = HOSTS[id as usize - 1];
    let dir = root.join(format!("n{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let admin = format!("127.0.0.1:{}", free_port());
    let list: Vec<String> = HOSTS.iter().enumerate().map(|(i, h)| format!("\"{}@{h}:{cluster}\"", i + 1)).collect();
    let text = format!(
        "data_dir = {data:?}\nnode_id = {id}\nexecutors = 1\n[admin]\nlisten = \"{admin}\"\n\
         [smb]\nlisten = \"{host}:{smb}\"\n[nfs]\nlisten = \"127.0.0.1:{}\"\nportmap = false\n\
         [cluster]\nlisten = \"{host}:{cluster}\"\npeers = [{}]\nsecret_file = {secret:?}\nleader_wait_ms = {LEADER_WAIT_MS}\n",
        free_port(),
        list.join(", ")
    );
    Daemon::spawn_cluster_node(&dir, &admin, &data, &text)
}

fn status(n: &Daemon) -> Value {
    let o = n.ctl(&["cluster", "status", "--json"]);
    serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
}

fn node<'a>(s: &'a Value, id: u64) -> &'a Value {
    s["nodes"].as_array().unwrap().iter().find(|n| n["id"] == id).unwrap()
}

/// Polls until the nodes `ids` agree on one leader; returns it.
fn leader_of(nodes: &[Daemon], ids: &[u64]) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let s: Vec<Value> = ids.iter().map(|&i| status(&nodes[i as usize - 1])).collect();
        let l = s[0]["leader"].as_u64();
        if l.is_some_and(|l| ids.contains(&l)) && s.iter().all(|v| v["leader"].as_u64() == l) {
            return l.unwrap();
        }
        assert!(Instant::now() < deadline, "nodes {ids:?} do not agree on a leader within {WAIT:?}: {s:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn smbclient(host: &str, port: u16, share: &str, user: &str, dir: &Path, cmds: &str) -> (bool, String) {
    let out = Command::new("smbclient")
        .args([&format!("//{host}/{share}"), "-p", &port.to_string(), "-U", user, "-m", "SMB3", "-c", cmds])
        .current_dir(dir)
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// `GET path` on the admin listener without credentials: (status, body).
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.split(' ').nth(1).unwrap().parse().unwrap(), body.to_string())
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append({"name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;

/// Parses an exposition with Debian's python3 and prometheus_client's
/// OpenMetrics parser: (name, labels as "k=v,...") -> value.
fn parse_metrics(text: &str) -> Vec<(String, String, f64)> {
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "the OpenMetrics parser refused /metrics:\n{}\n{text}", String::from_utf8_lossy(&o.stderr));
    let list: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    list.into_iter()
        .map(|v| {
            let mut labels: Vec<String> =
                v["labels"].as_object().unwrap().iter().map(|(k, x)| format!("{k}={}", x.as_str().unwrap())).collect();
            labels.sort();
            (v["name"].as_str().unwrap().to_string(), labels.join(","), v["value"].as_f64().unwrap())
        })
        .collect()
}

fn sample(m: &[(String, String, f64)], name: &str, labels: &str) -> f64 {
    m.iter()
        .find(|(n, l, _)| n == name && l == labels)
        .map(|s| s.2)
        .unwrap_or_else(|| panic!("no sample {name}{{{labels}}} in {m:?}"))
}

fn metrics(n: &Daemon) -> Vec<(String, String, f64)> {
    let (code, body) = http_get(&n.admin, "/metrics");
    assert_eq!(code, 200, "{body}");
    parse_metrics(&body)
}

/// A handshake with the node at `addr` as node `me` (dialling `peer`),
/// done by hand with the sans-I/O codec: a peer that holds the secret.
fn raw_session(addr: &str, secret: &[u8], me: u64, peer: u64) -> (TcpStream, Session) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut nonce = [0x5bu8; 32];
    nonce[1] = std::process::id() as u8;
    let mut hs = Handshake::initiator(secret, me, peer, nonce).unwrap();
    stream.write_all(&hs.hello()).unwrap();
    let mut buf = [0u8; 256];
    loop {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the node closed the handshake");
        let mut step = hs.feed(&buf[..n]).unwrap();
        loop {
            match step {
                HandshakeStep::Continue { send } if send.is_empty() => break,
                HandshakeStep::Continue { send } => {
                    stream.write_all(&send).unwrap();
                    step = hs.feed(&[]).unwrap();
                }
                HandshakeStep::Established { send, session } => {
                    stream.write_all(&send).unwrap();
                    return (stream, session);
                }
            }
        }
    }
}

#[test]
fn a_cluster_is_administered_through_any_node() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let cluster = shared_port(&[]);
    let smb = shared_port(&[cluster]);
    let secret = root.join("cluster.secret");
    std::fs::write(&secret, [0x3c; 48]).unwrap();
    let mut nodes: Vec<Daemon> = (1..=3).map(|id| spawn_node(root, id, cluster, smb, &secret)).collect();
    for n in nodes.iter_mut() {
        n.wait_started(0);
    }
    let leader = leader_of(&nodes, &[1, 2, 3]);
    let li = leader as usize - 1;
    let (f1, f2) = ((li + 1) % 3, (li + 2) % 3);

    // A peer that holds the secret sends undecodable admin and status
    // frames to the leader: each is dropped and logged, never acted on,
    // and the connection and the group go on.
    let me = f1 as u64 + 1;
    let (mut raw, mut sess) = raw_session(&format!("{}:{cluster}", HOSTS[li]), &std::fs::read(&secret).unwrap(), me, leader);
    let mut truncated = duet_cluster::admin_wire::encode_request(
        7,
        &duet_cluster::admin_wire::AdminRequestMsg {
            who: "mallory".into(),
            method: "DELETE".into(),
            target: "/v1/shares/public".into(),
            body: vec![],
        },
    );
    truncated.pop();
    for (kind, payload) in
        [(FrameKind::Admin, vec![0xff; 9]), (FrameKind::Admin, truncated), (FrameKind::Status, vec![1, 0x80])]
    {
        let f = sess.sender.frame(kind, &payload).unwrap();
        raw.write_all(&f).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let log = nodes[li].log_text();
        let admin = log.matches(&format!("dropped an undecodable admin message from node {me}")).count();
        let status = log.matches(&format!("dropped an undecodable status frame from node {me}")).count();
        if admin == 2 && status == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "forged frames not logged ({admin}, {status}):\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let keepalive = sess.sender.frame(FrameKind::Ping, &[]).unwrap();
    raw.write_all(&keepalive).expect("the connection is kept: a message is dropped, not the link");
    drop(raw);
    assert!(nodes[li].ok(&["share", "list"]).contains("public"), "the truncated DELETE was never run");
    assert_eq!(sample(&metrics(&nodes[li]), "duet_forwarded_admin_total", "outcome=refused"), 2.0);

    // A share and a user added through a follower: forwarded, committed.
    let t = Instant::now();
    let o = nodes[f1].ctl(&["share", "add", "projects", "--path", "/projects"]);
    assert!(o.status.success(), "share add through follower {}: {o:?}", f1 + 1);
    eprintln!("share add through a follower: {:?}", t.elapsed());
    nodes[f1].ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "3001"]);
    for (i, n) in nodes.iter().enumerate() {
        let deadline = Instant::now() + WAIT;
        while !(n.ok(&["share", "list"]).contains("projects") && n.ok(&["user", "list"]).contains("alice")) {
            assert!(Instant::now() < deadline, "the share or the user did not reach node {}", i + 1);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // The leader's refusal comes back verbatim: a second add conflicts.
    let o = nodes[f2].ctl(&["share", "add", "projects", "--path", "/other"]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"), "{o:?}");
    // A change through the other follower, then read on the first.
    nodes[f2].ok(&["share", "modify", "projects", "--read-write"]);

    // Both ends audit a forwarded change: the follower names the leader,
    // the leader the follower.
    let fa = nodes[f1].ok(&["audit"]);
    assert!(fa.contains(&format!("forwarded to node {leader}: ok")), "{fa}");
    let la = nodes[li].ok(&["audit"]);
    assert!(la.contains(&format!("via node {}", f1 + 1)), "{la}");

    // smbclient uses the share, as the new user, through the other follower.
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("hello.txt"), b"written through a follower\n").unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let (ok, text) = smbclient(HOSTS[f2], smb, "projects", "alice%alicepw", &work, "put hello.txt; get hello.txt back.txt");
        if ok && work.join("back.txt").exists() {
            break;
        }
        assert!(Instant::now() < deadline, "smbclient through node {}: {text}", f2 + 1);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(std::fs::read(work.join("back.txt")).unwrap(), b"written through a follower\n");

    // /v1/cluster on a follower: every node's applied index, equal once
    // settled, and every node healthy.
    let deadline = Instant::now() + WAIT;
    let s = loop {
        let s = status(&nodes[f1]);
        let a: Vec<u64> = (1..=3).map(|id| node(&s, id)["applied"].as_u64().unwrap()).collect();
        let healthy = (1..=3).all(|id| node(&s, id)["healthy"] == true);
        if a[0] > 0 && a.iter().all(|x| *x == a[0]) && healthy {
            break s;
        }
        assert!(Instant::now() < deadline, "a follower's view did not settle: {s:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(s["leader"].as_u64(), Some(leader), "{s}");
    assert_eq!(s["voters"], serde_json::json!([1, 2, 3]), "{s}");
    eprintln!("follower's /v1/cluster: {s}");

    // /metrics on the leader and a follower parse and carry the cluster.
    let ml = metrics(&nodes[li]);
    let mf = metrics(&nodes[f1]);
    assert_eq!(sample(&ml, "duet_raft_is_leader", ""), 1.0);
    assert_eq!(sample(&mf, "duet_raft_is_leader", ""), 0.0);
    assert_eq!(sample(&mf, "duet_raft_leader_id", ""), leader as f64);
    assert!(sample(&ml, "duet_raft_term", "") >= 1.0);
    for (m, me) in [(&ml, leader), (&mf, f1 as u64 + 1)] {
        for p in (1..=3u64).filter(|p| *p != me) {
            let l = format!("peer={p}");
            assert_eq!(sample(m, "duet_peer_up", &l), 1.0);
            assert_eq!(sample(m, "duet_peer_healthy", &l), 1.0);
            assert!(sample(m, "duet_peer_applied_index", &l) >= 1.0);
            assert!(sample(m, "duet_peer_sent_frames_total", &l) >= 1.0);
            assert!(sample(m, "duet_peer_received_bytes_total", &l) >= 1.0);
            assert_eq!(sample(m, "duet_peer_dropped_total", &l), 0.0);
        }
    }
    for p in [f1, f2] {
        let l = format!("peer={}", p + 1);
        assert!(sample(&ml, "duet_peer_matched_index", &l) >= 1.0);
        assert!(sample(&ml, "duet_peer_replication_lag", &l) >= 0.0);
    }
    assert!(!mf.iter().any(|s| s.0 == "duet_peer_matched_index"), "a follower tracks no matched index");
    // share add, user add through f1; share add, share modify through f2.
    assert_eq!(sample(&mf, "duet_forwarded_admin_total", "outcome=sent"), 2.0);
    assert_eq!(sample(&mf, "duet_forwarded_admin_total", "outcome=answered"), 2.0);
    assert_eq!(sample(&ml, "duet_forwarded_admin_total", "outcome=served"), 4.0);
    assert!(sample(&mf, "duet_forwarded_batches_total", "outcome=sent") + sample(&metrics(&nodes[f2]), "duet_forwarded_batches_total", "outcome=sent") >= 1.0);
    assert!(sample(&ml, "duet_forwarded_batches_total", "outcome=served") >= 1.0, "smbclient's batches reached the leader");
    assert!(sample(&ml, "duet_replica_acks_total", "") >= 0.0);
    assert!(sample(&ml, "duet_replica_majority_wait_seconds_count", "") >= 0.0);

    // The leader stops (SIGSTOP) with a change in flight: the follower
    // sent it and no answer comes; once the others elect a new leader the
    // outcome is unknown (504, exit 8), and the change is not sent again.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(nodes[li].child.id() as i32, libc::SIGSTOP) };
    let t = Instant::now();
    let o = nodes[f1].ctl(&["share", "add", "during-stop", "--path", "/during-stop"]);
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    unsafe { libc::kill(nodes[li].child.id() as i32, libc::SIGCONT) };
    eprintln!("a change sent to a stopped leader: {took:?}: {err}");
    assert_eq!(o.status.code(), Some(8), "{o:?}");
    assert!(err.contains("may or may not have been applied"), "{err}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    let m = metrics(&nodes[f1]);
    assert_eq!(sample(&m, "duet_forwarded_admin_total", "outcome=unknown"), 1.0);
    assert_eq!(sample(&m, "duet_forwarded_admin_total", "outcome=sent"), 3.0, "sent once, never again");

    // Two nodes die: the last one (a follower) finds no leader, and says
    // so within leader_wait_ms plus slack (503, exit 7).
    let leader = leader_of(&nodes, &[1, 2, 3]);
    let li = leader as usize - 1;
    let (other, last) = ((li + 1) % 3, (li + 2) % 3);
    nodes[li].kill9();
    nodes[other].kill9();
    let t = Instant::now();
    let o = nodes[last].ctl(&["share", "add", "no-quorum", "--path", "/no-quorum"]);
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    eprintln!("a change without a quorum: {took:?}: {err}");
    assert_eq!(o.status.code(), Some(7), "{o:?}");
    assert!(err.contains("no leader"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(took >= Duration::from_millis(LEADER_WAIT_MS), "{took:?}");
    assert!(took < Duration::from_millis(LEADER_WAIT_MS + 3000), "{took:?}");
    assert!(!nodes[last].ok(&["share", "list"]).contains("no-quorum"));
    let m = metrics(&nodes[last]);
    assert_eq!(sample(&m, "duet_forwarded_admin_total", "outcome=no_leader"), 1.0);
    let l = format!("peer={}", li + 1);
    assert_eq!(sample(&m, "duet_peer_up", &l), 0.0);
}
