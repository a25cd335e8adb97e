//! Membership changes between real duetd processes (issue 12): three duetd
//! on 127.0.0.11-13 (`[cluster] log_retain = 40`) hold files written by
//! smbclient; a fourth on 127.0.0.14 starts with `[cluster] join = true`
//! and waits; `duetctl cluster add 4 127.0.0.14:PORT` on the leader adds it
//! (ConfChangeV2 entered and left explicitly); it catches up by snapshot,
//! every node lists four voters, and, made the leader, node 4 serves every
//! file byte-exact from its own store. A follower is removed (`duetctl
//! cluster remove`) and stopped; the three voters left go on. Bad requests
//! get their exit statuses: an id already a voter (4), an unknown id (3),
//! an address that is not ADDRESS:PORT (2).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::*;

const LOG_RETAIN: u64 = 40;

fn node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path, join: bool) -> Node {
    let extra = format!("log_retain = {LOG_RETAIN}\njoin = {join}\n");
    spawn_node(root, id, host, port, peers, secret, &extra, "")
}

#[test]
fn a_fourth_node_is_added_and_a_follower_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let Three { mut nodes, s, port, secret, list } =
        start_three(root, &["127.0.0.14"], |r, i, h, p, l, s| node(r, i, h, p, l, s, false));
    let leader = s[0]["leader"].as_u64().unwrap();
    let li = leader as usize - 1;
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    add_bench_user(&nodes[li], &local);
    let sizes: Vec<usize> = (0..40).map(|i| [3000, 150_000, 1 << 20, 20_000][i % 4]).collect();
    let files = random_files("f", &sizes);
    put_all(nodes[li].smb, &local, &files);

    // Refused with their exit statuses, nothing changed.
    let code = |n: &Node, args: &[&str]| {
        let o = n.d.ctl(args);
        (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    };
    let (c, t) = code(&nodes[li], &["cluster", "add", "2", &format!("127.0.0.12:{port}")]);
    assert_eq!(c, Some(4), "adding a voter again: {t}");
    assert!(t.contains("already a voter"), "{t}");
    let (c, t) = code(&nodes[li], &["cluster", "remove", "9"]);
    assert_eq!(c, Some(3), "removing an unknown id: {t}");
    let (c, t) = code(&nodes[li], &["cluster", "add", "4", "nowhere"]);
    assert_eq!(c, Some(2), "a bad address: {t}");
    // Through a follower too (forwarded to the leader).
    let fol = (li + 1) % 3;
    let (c, t) = code(&nodes[fol], &["cluster", "remove", "9"]);
    assert_eq!(c, Some(3), "through a follower: {t}");

    // Node 4 joins.
    let list4 = format!("[{}, \"4@127.0.0.14:{port}\"]", list.join(", "));
    let n4 = node(root, 4, "127.0.0.14", port, &list4, &secret, true);
    nodes.push(n4);
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    let out = nodes[li].d.ok(&["cluster", "add", "4", &format!("127.0.0.14:{port}")]);
    eprintln!("cluster add took {:?}:\n{out}", t.elapsed());
    assert!(out.contains("added node 4"), "{out}");
    wait_log(&nodes[3], "node 4 installs a snapshot", "raft snapshot: installed the image of index", 1);
    wait_serving_again(&nodes[3]);
    wait_smb(&nodes[3]);
    {
        let all: Vec<&Node> = nodes.iter().collect();
        let s = wait_for(&all, "four nodes agree", |s| agreed(&all, s));
        for v in &s {
            assert_eq!(v["voters"], serde_json::json!([1, 2, 3, 4]), "{v}");
        }
        lead(&nodes[li], 4, &all);
    }
    // /metrics follows raft's voters, not the configured list: node 1
    // (configured with three peers) reports its link to node 4.
    let deadline = Instant::now() + WAIT;
    while metric(&nodes[0].d, "duet_peer_up{peer=\"4\"}") != 1 {
        assert!(Instant::now() < deadline, "node 1's /metrics has no live duet_peer_up for node 4");
        std::thread::sleep(Duration::from_millis(200));
    }
    check_all(nodes[3].smb, &local, &files, 4);
    wait_chunks(&nodes[3], &files);

    // A follower is removed, then stopped: the three left go on.
    let gone = (0..3).find(|&i| i != li).unwrap();
    let gone_id = nodes[gone].id;
    let out = nodes[3].d.ok(&["cluster", "remove", &gone_id.to_string()]);
    eprintln!("{out}");
    assert!(out.contains(&format!("removed node {gone_id}")), "{out}");
    // The removed node stops by itself (after its drain), with status 78,
    // and refuses to start again on its stale data directory.
    let st = nodes[gone].d.wait_exit(Duration::from_secs(30));
    let text = log(&nodes[gone].d);
    assert_eq!(st.and_then(|s| s.code()), Some(78), "node {gone_id} after its removal: {st:?}\n{text}");
    assert!(text.contains("this node was removed from the cluster"), "{text}");
    nodes[gone].d.spawn_again();
    let st = nodes[gone].d.wait_exit(Duration::from_secs(30));
    let text = log(&nodes[gone].d);
    assert_eq!(st.and_then(|s| s.code()), Some(78), "node {gone_id} started again: {st:?}\n{text}");
    assert!(
        text.contains(&format!("node {gone_id} was removed from the cluster by the membership change at index")),
        "{text}"
    );
    let rest: Vec<&Node> = nodes.iter().enumerate().filter(|(i, _)| *i != gone).map(|(_, n)| n).collect();
    let s = wait_for(&rest, "three voters agree", |s| agreed(&rest, s));
    let want: Vec<u64> = [1u64, 2, 3, 4].into_iter().filter(|i| *i != gone_id).collect();
    assert_eq!(s[0]["voters"], serde_json::json!(want));
    let more = random_files("g", &[5000, 300_000]);
    put_all(nodes[3].smb, &local, &more);
    check_all(nodes[li].smb, &local, &more, nodes[li].id);
    for n in &nodes {
        let text = log(&n.d);
        assert!(!text.contains("panicked"), "node {}:\n{text}", n.id);
    }
}
