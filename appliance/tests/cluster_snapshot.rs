//! Raft snapshots between real duetd processes (issue 12): three duetd
//! on 127.0.0.11, .12 and .13 with `[cluster] log_retain = 40` (so a few
//! hundred entries put a follower past the retained log) and `[testing]
//! snapshot_corrupt = 1` (the first image each node sends has a byte
//! flipped).
//!
//! (a) A follower is SIGKILLed; smbclient writes files (inline, logged
//! extents, a 4 MiB one) through the leader, far past the retention, while
//! the leader's chunk writes fail (`duetctl fault chunk-write`: its queue
//! keeps naming the extents, so the image does too); the
//! follower restarts: it is sent a snapshot, refuses the corrupt first
//! image (checksum) with the old state kept, takes the second, restarts
//! in place, installs it and catches up (its applied index equals the
//! others'); the other follower is then SIGKILLed, leadership moves to
//! the caught-up node and every file reads back byte-exact from it; its
//! own chunk files hold every file (it fetched the extents the installed
//! queue names from its peers).
//! (b) The other follower's data directory is deleted (its config kept)
//! and it restarts empty: it rejoins by snapshot and, made the leader,
//! serves every file byte-exact from its own store.
//!
//! Every wait is bounded (a poll with a deadline).

mod common;

use std::path::Path;

use common::cluster::*;

const LOG_RETAIN: u64 = 40;

fn node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Node {
    let extra = format!("log_retain = {LOG_RETAIN}\n");
    spawn_node(root, id, host, port, peers, secret, &extra, "[testing]\nsnapshot_corrupt = 1\nfault_injection = true\n")
}

#[test]
fn lagging_and_emptied_followers_catch_up_by_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let Three { mut nodes, s, .. } = start_three(root, &[], node);
    let leader = s[0]["leader"].as_u64().unwrap();
    let li = leader as usize - 1;
    let (si, fi) = ((li + 1) % 3, (li + 2) % 3);
    eprintln!("leader {leader}; node {} lags, node {} is emptied later", si + 1, fi + 1);
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    add_bench_user(&nodes[li], &local);

    // (a) A follower is down while the others go far past the retention.
    let before = applied(&status(&nodes[si].d), nodes[si].id);
    nodes[si].d.kill9();
    // The leader's destager cannot write chunks meanwhile: its queue (in
    // the image) keeps naming extents the lagging node never got, which
    // it must fetch from its peers after the install.
    nodes[li].d.ok(&["fault", "chunk-write", "--count", "1000000"]);
    let mut sizes: Vec<usize> = Vec::new();
    for i in 0..60 {
        sizes.push(match i % 6 {
            0 => 4096,
            1 => 100,
            2 => 150_000,
            3 => 10_000,
            4 => 1 << 20,
            _ => 70_000,
        });
    }
    sizes.push(4 << 20);
    let files = random_files("f", &sizes);
    put_all(nodes[li].smb, &local, &files);
    let up = [&nodes[li], &nodes[fi]];
    let s = wait_for(&up, "the two up agree", |s| agreed(&up, s));
    let now = applied(&s[0], leader);
    eprintln!("applied: {now}, the stopped follower had {before}");
    assert!(now > before + 3 * LOG_RETAIN, "not past the retention: {before} -> {now}");

    nodes[si].d.start_again();
    // The first image (corrupted by the sender) is refused, nothing of it
    // installed; the second is installed at a restart in place.
    wait_log(&nodes[si], "the corrupt image", "is refused or its transfer failed", 1);
    assert!(
        log(&nodes[si].d).contains("is refused or its transfer failed: snapshot image refused"),
        "refused by its check:\n{}",
        log(&nodes[si].d)
    );
    wait_log(&nodes[si], "the install", "raft snapshot: installed the image of index", 1);
    let slog = log(&nodes[si].d);
    let corrupting = [li, fi].iter().any(|&i| log(&nodes[i].d).contains("corrupting the image sent to node"));
    assert!(corrupting, "no sender corrupted an image");
    // The leader sent both: one refused, one accepted.
    let served = metric(&nodes[li].d, "duet_raft_snapshots_total{outcome=\"served\"}");
    let failed = metric(&nodes[li].d, "duet_raft_snapshots_total{outcome=\"failed\"}");
    eprintln!("leader's /metrics: snapshots served {served}, failed {failed}");
    assert!(served >= 1 && failed >= 1, "served {served}, failed {failed}");
    assert!(!slog.contains("panicked"), "{slog}");
    wait_serving_again(&nodes[si]);
    wait_smb(&nodes[si]);
    {
        let all: Vec<&Node> = nodes.iter().collect();
        wait_for(&all, "the lagging follower catches up", |s| agreed(&all, s));
    }
    assert!(!nodes[si].d.data.join("snapshot").exists(), "the staging directory is left behind");
    wait_chunks(&nodes[si], &files);
    assert!(
        log(&nodes[si].d).contains("fetched a missing extent"),
        "the installed queue named no extent to fetch:\n{}",
        log(&nodes[si].d)
    );
    nodes[li].d.ok(&["fault", "chunk-write", "--count", "0"]);
    wait_chunks(&nodes[li], &files);

    // Only the caught-up node and the leader: it leads and serves every file.
    nodes[fi].d.kill9();
    let two = [&nodes[li], &nodes[si]];
    lead(&nodes[li], nodes[si].id, &two);
    check_all(nodes[si].smb, &local, &files, nodes[si].id);
    wait_chunks(&nodes[si], &files);

    // (b) The other follower's data directory is deleted; it restarts
    // empty and rejoins by snapshot.
    std::fs::remove_dir_all(&nodes[fi].d.data).unwrap();
    let installs = log(&nodes[fi].d).matches("installed the image of index").count();
    nodes[fi].d.start_again();
    wait_log(&nodes[fi], "the emptied node's install", "raft snapshot: installed the image of index", installs + 1);
    wait_serving_again(&nodes[fi]);
    wait_smb(&nodes[fi]);
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for(&all, "the emptied follower catches up", |s| agreed(&all, s));
    lead(&nodes[si], nodes[fi].id, &all);
    check_all(nodes[fi].smb, &local, &files, nodes[fi].id);
    wait_chunks(&nodes[fi], &files);
    // Writes go on with every node.
    let more = random_files("g", &[3000, 200_000]);
    put_all(nodes[fi].smb, &local, &more);
    check_all(nodes[li].smb, &local, &more, nodes[li].id);
    // Every node's metadata and chunk store are consistent.
    for n in &nodes {
        let o = n.d.ctl(&["fsck"]);
        assert!(o.status.success(), "fsck on node {}: {}{}", n.id, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    for n in &nodes {
        let text = log(&n.d);
        assert!(!text.contains("panicked"), "node {}:\n{text}", n.id);
        let fetched = text.matches("fetched a missing extent").count();
        eprintln!("node {}: fetched {fetched} missing extents", n.id);
        for line in text.lines().filter(|l| l.contains("raft snapshot:")) {
            let line = line.split("raft snapshot:").nth(1).map(|r| format!("raft snapshot:{r}")).unwrap_or_else(|| line.to_string());
            eprintln!("node {}: {}", n.id, line.chars().take(160).collect::<String>());
        }
    }
}
