//! A snapshot schedule on a three-node cluster (issue 15): set through a
//! follower (forwarded to the leader; stored in the replicated metadata),
//! carried out by the leader only, one snapshot per slot, listed alike on
//! every node; after the leader is SIGKILLed the new leader goes on with
//! the same schedule and retention, and the restarted node agrees.
//!
//! Every wait is bounded (a poll with a deadline).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::*;

fn node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Node {
    spawn_node(root, id, host, port, peers, secret, "", "\n[testing]\nsnapshot_schedule_min_s = 1\n")
}

/// The scheduled snapshots of `public` as node `n` lists them, oldest first.
fn autos(n: &Node) -> Vec<String> {
    let o = n.d.ctl(&["--json", "snapshot", "list", "public"]);
    assert!(o.status.success(), "snapshot list on node {}: {o:?}", n.id);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|s| s["scheduled"] == true)
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `auto-YYYYMMDDTHHMMSSZ`: the seconds field (slots of 3 s from the epoch
/// start on a multiple of 3 within each minute).
fn second(name: &str) -> u32 {
    name[18..20].parse().unwrap()
}

#[test]
fn the_leader_takes_scheduled_snapshots_and_a_new_leader_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let Three { mut nodes, s, .. } = start_three(root, &[], node);
    let leader = s[0]["leader"].as_u64().unwrap();
    let li = leader as usize - 1;
    let fi = (li + 1) % 3;
    let oi = (li + 2) % 3;
    eprintln!("leader {leader}; the schedule is set through node {}", fi + 1);

    let out = nodes[fi].d.ok(&["snapshot", "schedule", "public", "--every", "3s", "--keep", "3"]);
    assert!(out.contains("every 3s, keep 3"), "{out}");
    until("three scheduled snapshots", || autos(&nodes[li]).len() == 3);
    let first = autos(&nodes[li]);
    until("the oldest retired", || !autos(&nodes[li]).contains(&first[0]));
    // One per slot: slots of 3 s.
    for n in autos(&nodes[li]) {
        assert_eq!(second(&n) % 3, 0, "{n}");
    }
    // Every node lists the same snapshots once they applied the same log.
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for(&all, "the nodes agree", |s| agreed(&all, s));
    let audit = nodes[li].d.ok(&["audit", "--last", "200"]);
    assert!(audit.contains("scheduled snapshot create public auto-"), "{audit}");
    let follower_audit = nodes[fi].d.ok(&["audit", "--last", "200"]);
    assert!(!follower_audit.contains("scheduled snapshot"), "a follower acted on the schedule:\n{follower_audit}");

    // The leader dies: a new one goes on with the replicated schedule.
    nodes[li].d.kill9();
    let rest: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    let s = wait_for(&rest, "a new leader", |s| {
        s.iter().all(|x| x["leader"].as_u64().is_some_and(|l| l != leader)) && s[0]["leader"] == s[1]["leader"]
    });
    let new_leader = s[0]["leader"].as_u64().unwrap();
    let before = autos(&nodes[fi]);
    until("a snapshot from the new leader", || {
        let a = autos(&nodes[fi]);
        a.last() != before.last() && a.len() == 3
    });
    let ni = new_leader as usize - 1;
    let audit = nodes[ni].d.ok(&["audit", "--last", "200"]);
    assert!(audit.contains("scheduled snapshot create public auto-"), "new leader {new_leader}:\n{audit}");
    assert!(audit.contains("scheduled snapshot delete public auto-"), "new leader {new_leader}:\n{audit}");

    // The old leader comes back as a follower and lists the same.
    nodes[li].d.start_again();
    nodes[fi].d.ok(&["snapshot", "schedule", "public", "--off"]);
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for(&all, "the restarted node catches up", |s| agreed(&all, s));
    std::thread::sleep(Duration::from_millis(1500));
    wait_for(&all, "settled after --off", |s| agreed(&all, s));
    let a = autos(&nodes[li]);
    assert_eq!(a, autos(&nodes[fi]));
    assert_eq!(a, autos(&nodes[oi]));
    assert_eq!(a.len(), 3, "{a:?}");
    for n in &nodes {
        let f = n.d.ok(&["fsck"]);
        assert!(f.contains("file system is consistent"), "node {}: {f}", n.id);
    }
}
