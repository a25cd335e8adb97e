//! The cluster's queue bounds are configuration keys (`[cluster]
//! peer_queue`, `peer_connections`, `snapshot_transfers`,
//! `replica_inbound`, `replica_inbound_mib`, `forwarded_admin`;
//! `peers::PeerLimits`, docs/limits.md), and a node uses what it is given:
//! three real duetd on 127.0.0.11 to .13 with `peer_connections = 4` and
//! `peer_queue = 16` (a sixty-fourth of the default). Strangers' TCP
//! connections to a node's cluster port past its bound (two are taken by
//! its peers) are closed at once, not held for the 5 s handshake timeout,
//! and the refusal names the key; meanwhile, and with the small raft
//! queues, the group goes on replicating: files written through a
//! follower read back byte-exact from every node. (Out-of-range values are
//! refused at start: `config.rs` tests.)
//!
//! The replica push bounds (`replica_push_mib`, `replica_workers`): with
//! `replica_push_mib = 32` (the floor), `replica_workers = 1` and a
//! follower SIGSTOPped, the leader goes on serving writes (the other
//! follower's copies make the majority), and once 32 MiB of pushes sit in
//! the stopped follower's queue it skips the rest (logged, counted)
//! instead of queueing them; the peer queue is made large here
//! (`peer_queue = 65536`) so that only the byte bound can skip. Resumed,
//! the follower fetches what it lacks: every byte reads back from all
//! three.
//!
//! The byte bound of each peer's queue (`peer_queue_mib`), which counts
//! frames of every kind (raft messages, pushes, status...): with
//! `peer_queue_mib = 32`, the push bound far above it and a follower
//! SIGSTOPped, the bytes queued for it (`duet_peer_queued_bytes`, sampled
//! through the writes) never pass 32 MiB, the rest are dropped and
//! counted, and once resumed the follower catches up byte-exact.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cluster::*;

fn node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Node {
    spawn_node(root, id, host, port, peers, secret, "peer_connections = 4\npeer_queue = 16\n", "")
}

/// Whether the server closed `s` (EOF or a reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            // The handshake's hello: read past it.
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn the_cluster_queue_bounds_are_keys_a_node_applies() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let Three { nodes, s, port, .. } = start_three(root, &[], node);
    let leader = s[0]["leader"].as_u64().unwrap();
    let follower = nodes.iter().find(|n| n.id != leader).unwrap();
    let host = format!("127.0.0.1{}:{port}", follower.id);

    // Eight strangers: at most two fit beside the two peers' connections
    // (four if a peer happens to be reconnecting); with the default bound
    // (64) all eight would be held for the handshake timeout.
    let started = Instant::now();
    let mut strangers: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&host).unwrap()).collect();
    std::thread::sleep(Duration::from_secs(1));
    let closed = strangers.iter_mut().map(|s| closed_within(s, Duration::from_millis(50))).filter(|c| *c).count();
    assert!(started.elapsed() < Duration::from_secs(4), "checked before the 5 s handshake timeout");
    assert!(closed >= 4, "{closed} of 8 connections past peer_connections = 4 were closed at once");
    wait_log(follower, "the refusal", "[cluster] peer_connections", 1);
    drop(strangers);

    // The group replicates through the small queues.
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    add_bench_user(follower, &local);
    let files = random_files("q", &[4096, 100_000, 1 << 20, 3 << 20]);
    put_all(follower.smb, &local, &files);
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for(&all, "all three apply the writes", |s| agreed(&all, s));
    for n in &nodes {
        check_all(n.smb, &local, &files, n.id);
    }
}

/// The leader and one follower of a fresh group (its first status `s`),
/// and a local directory for smbclient with the bench user added.
fn leader_and_follower<'a>(root: &Path, nodes: &'a [Node], s: &[serde_json::Value]) -> (&'a Node, &'a Node, PathBuf) {
    let leader = s[0]["leader"].as_u64().unwrap();
    let l = nodes.iter().find(|n| n.id == leader).unwrap();
    let follower = nodes.iter().find(|n| n.id != leader).unwrap();
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    add_bench_user(l, &local);
    (l, follower, local)
}

/// Resumes a SIGSTOPped node; once all three agree, every file reads back
/// byte-exact from each.
fn resume_and_check_all(nodes: &[Node], stopped: &Node, local: &Path, files: &[(String, Vec<u8>)]) {
    unsafe { libc::kill(stopped.d.child.id() as i32, libc::SIGCONT) };
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for(&all, "all three apply the writes", |s| agreed(&all, s));
    wait_smb(stopped);
    for n in nodes {
        check_all(n.smb, local, files, n.id);
    }
}

fn push_node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Node {
    spawn_node(root, id, host, port, peers, secret, "replica_push_mib = 32\nreplica_workers = 1\npeer_queue = 65536\n", "")
}

#[test]
fn a_stopped_follower_holds_at_most_replica_push_mib_of_the_leaders_pushes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let Three { nodes, s, .. } = start_three(root, &[], push_node);
    for n in &nodes {
        wait_log(n, "the replica bounds", "replica_push_mib = 32, replica_workers = 1", 1);
    }
    let (l, stopped, local) = leader_and_follower(root, &nodes, &s);

    unsafe { libc::kill(stopped.d.child.id() as i32, libc::SIGSTOP) };
    // 128 MiB through the leader: far more than the bound plus what the
    // loopback socket buffers take before the stopped follower's
    // connection blocks (then fails after 5 s; the reconnection's
    // handshake waits 5 s more while pushes queue).
    let files = random_files("p", &[16 << 20; 8]);
    let started = Instant::now();
    put_all(l.smb, &local, &files);
    eprintln!("128 MiB written through the leader with node {} stopped in {:?}", stopped.id, started.elapsed());
    let skipped = metric(&l.d, "duet_replica_pushes_skipped_total");
    let sent = metric(&l.d, "duet_replica_pushes_total");
    eprintln!("leader: {sent} pushes sent, {skipped} skipped");
    assert!(skipped > 0, "the leader skipped no push to the stopped follower");
    wait_log(l, "the push bound", &format!("pushes to node {} at their bound", stopped.id), 1);
    check_all(l.smb, &local, &files, l.id);

    resume_and_check_all(&nodes, stopped, &local, &files);
}

fn queue_node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Node {
    spawn_node(
        root,
        id,
        host,
        port,
        peers,
        secret,
        "peer_queue_mib = 32\nreplica_push_mib = 1024\nreplica_workers = 1\npeer_queue = 65536\n",
        "",
    )
}

#[test]
fn a_stopped_follower_holds_at_most_peer_queue_mib_of_the_leaders_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let Three { nodes, s, .. } = start_three(root, &[], queue_node);
    let (l, stopped, local) = leader_and_follower(root, &nodes, &s);
    let queued = format!("duet_peer_queued_bytes{{peer=\"{}\"}}", stopped.id);
    let dropped = format!("duet_peer_dropped_total{{peer=\"{}\"}}", stopped.id);
    let dropped_before = metric(&l.d, &dropped);

    unsafe { libc::kill(stopped.d.child.id() as i32, libc::SIGSTOP) };
    let files = random_files("b", &[16 << 20; 4]);
    let most = std::sync::atomic::AtomicU64::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                most.fetch_max(metric(&l.d, &queued), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        put_all(l.smb, &local, &files);
        std::thread::sleep(Duration::from_secs(1));
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let most = most.into_inner();
    let dropped_now = metric(&l.d, &dropped) - dropped_before;
    eprintln!("64 MiB through the leader, node {} stopped: at most {most} bytes queued for it, {dropped_now} frames dropped", stopped.id);
    assert!(most > 16 << 20, "the queue filled ({most} bytes at most): the test shows nothing otherwise");
    assert!(most <= 32 << 20, "{most} bytes queued for a stopped peer, past peer_queue_mib = 32");
    assert!(dropped_now > 0, "nothing was dropped for the stopped follower");
    check_all(l.smb, &local, &files, l.id);

    resume_and_check_all(&nodes, stopped, &local, &files);
}
