//! The write cache in three copies, with three real duetd processes on
//! 127.0.0.11, .12 and .13 (appliance/src/replica.rs): smbclient puts
//! files of 64 KiB to 4 MiB of random bytes through the leader while one
//! follower is down (SIGKILLed); the leader proposes each write once the
//! other follower holds its extents (a majority of two). The dead
//! follower restarts, applies the entries, lacks their extents and
//! fetches them from its peers (the leader first: from its log, or from
//! its chunk store once it destaged them and deleted the log segment;
//! segments are 8 MiB here, the files 12 MB), and destages them into its
//! own chunks. More files are written
//! with all three up (through a follower, which forwards them); the leader is SIGKILLed; every file reads back
//! byte-exact through the new leader, then through the other survivor
//! after a leadership transfer to it; the once-stopped follower's chunk
//! files hold every file's bytes.
//!
//! Every wait is bounded (a poll with a deadline); nothing sleeps as an
//! assertion.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::*;


fn node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Node {
    spawn_node(root, id, host, port, peers, secret, "", "")
}

#[test]
fn extents_are_on_a_majority_before_commit_and_a_lagging_follower_fetches_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let Three { mut nodes, s, .. } = start_three(root, &[], node);
    let leader = s[0]["leader"].as_u64().unwrap();
    let li = leader as usize - 1;
    let (si, fi) = ((li + 1) % 3, (li + 2) % 3);
    eprintln!("leader {leader}; node {} will be down, node {} stays", si + 1, fi + 1);
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    add_bench_user(&nodes[li], &local);

    // (1) One follower down: writes commit with the leader and the other.
    nodes[si].d.kill9();
    let first = random_files("a", &[64 << 10, 100_000, 1 << 20, 1_500_000, 3 << 20, 4 << 20, 200_000, 2_345_678]);
    put_all(nodes[li].smb, &local, &first);
    check_all(nodes[li].smb, &local, &first, leader);
    // The leader and the follower that was up destage; the leader's full
    // log segments are deleted (only the current one is left), so a fetch
    // of their extents is answered from its chunks.
    let deadline = Instant::now() + WAIT;
    for i in [li, fi] {
        loop {
            let missing = not_in_chunks(&nodes[i].d.data, &first);
            if missing.is_empty() && (i != li || wal_segments(&nodes[i].d.data) == 1) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {}: not destaged {missing:?}, {} log segments",
                i + 1,
                wal_segments(&nodes[i].d.data)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // (2) The dead follower restarts, catches up, fetches what it missed
    // and destages it into its own chunks.
    nodes[si].d.start_again();
    wait_smb(&nodes[si]);
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for(&all, "the restarted follower catches up", |s| agreed(&all, s));
    let deadline = Instant::now() + WAIT;
    loop {
        let missing = not_in_chunks(&nodes[si].d.data, &first);
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node {} did not destage {missing:?}; its log:\n{}",
            si + 1,
            nodes[si].d.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let slog = nodes[si].d.log_text();
    assert!(slog.contains("fetched a missing extent"), "node {} fetched nothing:\n{slog}", si + 1);
    assert!(!slog.contains("queued write's log extent is missing\""), "{slog}");
    let answered_from_chunks = [li, fi].iter().any(|&i| nodes[i].d.log_text().contains("answered a fetch from the chunk store"));
    assert!(answered_from_chunks, "no peer answered from its chunks (their segments were deleted)");

    // (3) More writes with all three up, through a follower: it forwards
    // each batch (its data with it) to the leader, which logs and pushes
    // the extents like its own.
    let second = random_files("b", &[70_000, 2 << 20, 4 << 20, 333_333]);
    put_all(nodes[si].smb, &local, &second);
    let every: Vec<(String, Vec<u8>)> = first.iter().chain(second.iter()).cloned().collect();

    // (4) The leader dies; the survivors elect one; every file reads back
    // from it, then from the other after a transfer.
    nodes[li].d.kill9();
    let rest: Vec<&Node> = [si, fi].iter().map(|&i| &nodes[i]).collect();
    let s2 = wait_for(&rest, "the survivors elect a leader", |s| {
        s[0]["leader"].as_u64().is_some_and(|l| l != leader) && agreed(&rest, s)
    });
    let l2 = s2[0]["leader"].as_u64().unwrap();
    let other = if l2 == nodes[si].id { nodes[fi].id } else { nodes[si].id };
    check_all(nodes[l2 as usize - 1].smb, &local, &every, l2);
    // And through the follower (its reads are forwarded to the leader).
    check_all(nodes[other as usize - 1].smb, &local, &every, other);
    let o = nodes[l2 as usize - 1].d.ctl(&["cluster", "transfer-leader", &other.to_string()]);
    assert!(matches!(o.status.code(), Some(0) | Some(7)), "transfer-leader: {o:?}");
    wait_for(&rest, "the other survivor leads", |s| s[0]["leader"].as_u64() == Some(other) && agreed(&rest, s));
    check_all(nodes[other as usize - 1].smb, &local, &every, other);

    // (5) The follower that was down holds every file in its chunks.
    let deadline = Instant::now() + WAIT;
    loop {
        let missing = not_in_chunks(&nodes[si].d.data, &every);
        if missing.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "node {} chunks lack {missing:?}", si + 1);
        std::thread::sleep(Duration::from_millis(100));
    }
    for &i in &[si, fi] {
        let text = nodes[i].d.log_text();
        assert!(!text.contains("panicked"), "node {}:\n{text}", i + 1);
    }
}
