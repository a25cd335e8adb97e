//! Snapshots and clones in a three-node cluster (issue 15: "layers are
//! metadata like any other, so they replicate; taking a snapshot is one
//! raft command"): three real duetd on 127.0.0.11-13. Files go in through
//! a follower over SMB; a snapshot and a clone of it are made through a
//! follower's duetctl (forwarded to the leader); the source changes after;
//! on every node the snapshot reads the old bytes over NFSv3 `.snapshot`
//! and SMB `@GMT-`, the clone reads them over SMB and NFS; a file written
//! into the clone on one node reads back on the others. A snapshot of the
//! clone is taken, the leader SIGKILLed, the snapshot of the clone is
//! deleted through a survivor after the failover; everything reads the
//! same on the survivors and, once it is back, on the killed node; fsck is
//! clean on every node.

mod clients;
mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clients::Nfs;
use common::cluster::*;

fn node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Node {
    spawn_node(root, id, host, port, peers, secret, "", "")
}

fn smb(port: u16, share: &str, dir: &Path, cmds: &str) -> Result<String, String> {
    let out = Command::new("smbclient")
        .args([&format!("//127.0.0.1/{share}"), "-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3", "-c", cmds])
        .current_dir(dir)
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() && !text.contains("NT_STATUS_") {
        Ok(text)
    } else {
        Err(text)
    }
}

/// `smb` until it succeeds, within `WAIT` (a share just made reaches a
/// node's SMB server at its next refresh; right after a failover a write
/// may get the retry answer).
fn smb_ok(port: u16, share: &str, dir: &Path, cmds: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        match smb(port, share, dir, cmds) {
            Ok(t) => return t,
            Err(e) => assert!(Instant::now() < deadline, "smbclient //{share} -c {cmds:?}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Gets `name` (a path in `share`) through `port` and compares it.
fn smb_get(port: u16, share: &str, local: &Path, name: &str, want: &[u8], what: &str) {
    let out = local.join("got.bin");
    let _ = std::fs::remove_file(&out);
    smb_ok(port, share, local, &format!("get {name} {}", out.display()));
    let got = std::fs::read(&out).unwrap();
    assert!(got == want, "{what}: {share}/{name} over SMB: {} bytes, want {}", got.len(), want.len());
}

/// Reads the file at `path` (components under the export `export`) over NFSv3.
fn nfs_get(port: u16, export: &str, path: &[&str]) -> Result<Vec<u8>, String> {
    let mut c = Nfs::connect(port);
    let mut fh = c.mount(export).map_err(|e| format!("mount {export}: {e:?}"))?;
    for comp in path {
        fh = c.lookup3(&fh, comp.as_bytes()).map_err(|e| format!("{export} {path:?}: {comp}: {e:?}"))?;
    }
    c.read3_all(&fh).map_err(|e| format!("read {export} {path:?}: {e:?}"))
}

fn nfs_eq(n: &Node, export: &str, path: &[&str], want: &[u8], what: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        match nfs_get(n.d.nfs_port, export, path) {
            Ok(got) => {
                assert!(got == want, "{what}: node {} {export} {path:?} over NFS: {} bytes, want {}", n.id, got.len(), want.len());
                return;
            }
            Err(e) => assert!(Instant::now() < deadline, "{what}: node {}: {e}", n.id),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn gmt_of(n: &Node, share: &str, snap: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(&n.d.ok(&["--json", "snapshot", "list", share])).unwrap();
    let s = v.as_array().unwrap().iter().find(|s| s["name"] == snap).unwrap_or_else(|| panic!("{snap} listed: {v}"));
    s["gmt"].as_str().unwrap().to_string()
}

struct Want {
    big: Vec<u8>,
    small: Vec<u8>,
    clone_file: Vec<u8>,
    gmt: String,
}

/// What every node must serve: the snapshot's old bytes, the source's new
/// ones, the clone's, the file written into the clone.
fn check_node(n: &Node, local: &Path, w: &Want, what: &str) {
    let what = format!("{what}, node {}", n.id);
    smb_get(n.smb, "public", local, &format!("{}/big.bin", w.gmt), &w.big, &what);
    smb_get(n.smb, "public", local, &format!("{}/small.txt", w.gmt), &w.small, &what);
    smb_get(n.smb, "public", local, "small.txt", b"changed after the snapshot\n", &what);
    nfs_eq(n, "/public", &[".snapshot", "s1", "big.bin"], &w.big, &what);
    nfs_eq(n, "/public", &[".snapshot", "s1", "small.txt"], &w.small, &what);
    smb_get(n.smb, "c", local, "big.bin", &w.big, &what);
    smb_get(n.smb, "c", local, "small.txt", &w.small, &what);
    smb_get(n.smb, "c", local, "in-clone.bin", &w.clone_file, &what);
    nfs_eq(n, "/clones/c", &["big.bin"], &w.big, &what);
    nfs_eq(n, "/clones/c", &["in-clone.bin"], &w.clone_file, &what);
    assert!(nfs_get(n.d.nfs_port, "/public", &["in-clone.bin"]).is_err(), "{what}: the clone's file in the source");
}

fn fsck_clean(n: &Node) {
    let out = n.d.ok(&["fsck"]);
    assert!(out.contains("file system is consistent"), "node {}: {out}", n.id);
}

#[test]
fn snapshots_and_clones_replicate_and_survive_a_leader_kill() {
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let Three { mut nodes, s, .. } = start_three(root, &[], node);
    let leader = s[0]["leader"].as_u64().unwrap();
    let li = leader as usize - 1;
    let (fi, gi) = ((li + 1) % 3, (li + 2) % 3);
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    add_bench_user(&nodes[fi], &local);

    // Files through a follower, then a snapshot and a clone of it made
    // through a follower's duetctl.
    let files = random_files("f", &[5 << 20, 100]);
    let big = files[0].1.clone();
    let small = b"the small file, as the snapshot keeps it\n".to_vec();
    std::fs::write(local.join("big.bin"), &big).unwrap();
    std::fs::write(local.join("small.txt"), &small).unwrap();
    smb_ok(nodes[fi].smb, "public", &local, "put big.bin; put small.txt");
    let out = nodes[fi].d.ok(&["snapshot", "create", "public", "s1"]);
    assert!(out.contains("took snapshot s1"), "{out}");
    let out = nodes[gi].d.ok(&["share", "clone", "public@s1", "c"]);
    assert!(out.contains("a writable clone of public@s1"), "{out}");
    std::fs::write(local.join("small.txt"), b"changed after the snapshot\n").unwrap();
    smb_ok(nodes[gi].smb, "public", &local, "put small.txt");
    // A file written into the clone on one node.
    let clone_file = random_files("c", &[300 << 10]).remove(0).1;
    std::fs::write(local.join("in-clone.bin"), &clone_file).unwrap();
    smb_ok(nodes[fi].smb, "c", &local, "put in-clone.bin");
    let gmt = gmt_of(&nodes[gi], "public", "s1");
    let w = Want { big, small, clone_file, gmt };
    for n in &nodes {
        check_node(n, &local, &w, "after the snapshot and the clone");
    }
    // A snapshot of the clone, read on every node.
    nodes[gi].d.ok(&["snapshot", "create", "c", "cs"]);
    for n in &nodes {
        nfs_eq(n, "/clones/c", &[".snapshot", "cs", "in-clone.bin"], &w.clone_file, "the clone's snapshot");
    }

    // The leader dies; the survivors elect one; the clone's snapshot is
    // deleted through a survivor that follows.
    nodes[li].d.kill9();
    let rest: Vec<&Node> = [fi, gi].iter().map(|&i| &nodes[i]).collect();
    let s2 = wait_for(&rest, "the survivors elect a leader", |s| {
        s[0]["leader"].as_u64().is_some_and(|l| l != leader) && agreed(&rest, s)
    });
    let l2 = s2[0]["leader"].as_u64().unwrap();
    let follower = rest.iter().find(|n| n.id != l2).unwrap();
    eprintln!("leader {leader} killed; node {l2} leads; {:?} in", t0.elapsed());
    let deadline = Instant::now() + WAIT;
    loop {
        let o = follower.d.ctl(&["--yes", "snapshot", "delete", "c", "cs"]);
        if o.status.success() {
            break;
        }
        // No leader yet, or an outcome unknown (exit 7, 8): asked again;
        // gone already (exit 3) after an unknown outcome that did apply.
        if o.status.code() == Some(3) {
            break;
        }
        assert!(Instant::now() < deadline, "snapshot delete through node {}: {o:?}", follower.id);
        std::thread::sleep(Duration::from_millis(250));
    }
    for n in &rest {
        assert!(nfs_get(n.d.nfs_port, "/clones/c", &[".snapshot", "cs"]).is_err(), "node {}: cs deleted", n.id);
        check_node(n, &local, &w, "after the failover");
    }
    // The killed node comes back, catches up, serves the same.
    nodes[li].d.start_again();
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for(&all, "three nodes agree again", |s| agreed(&all, s));
    let back = &nodes[li];
    assert!(nfs_get(back.d.nfs_port, "/clones/c", &[".snapshot", "cs"]).is_err(), "the restarted node: cs deleted");
    check_node(back, &local, &w, "the restarted node");
    for n in &nodes {
        fsck_clean(n);
    }
    eprintln!("cluster_layers: {:?}", t0.elapsed());
}
