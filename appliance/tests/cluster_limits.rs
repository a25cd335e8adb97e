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

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
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
