//! Snapshots and clones in a three-node cluster (issue 15, "Cluster":
//! layers are metadata like any other, so they replicate; taking a
//! snapshot is one raft command). Three real duetd on 127.0.0.11-13:
//! smbclient writes files through a follower; a snapshot is taken
//! through the other follower's duetctl (forwarded to the leader); the
//! files change after it; a writable clone of the snapshot is made
//! through a follower. On every node the share reads new, the snapshot
//! old (NFSv3 `.snapshot/s1/` and smbclient `@GMT-` paths) and the clone
//! old, byte-exact. The clone is written through one node and read on
//! the others; the leader is SIGKILLed; after the election the survivors
//! still serve the share, the snapshot and the clone, take and delete a
//! second snapshot, refuse to delete the pinned one; the killed node
//! comes back, catches up and serves all of it from its own store; fsck
//! is clean on every node. Every wait is bounded.

mod clients;
mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clients::Nfs;
use common::cluster::*;
use duet_protocols::nfs::nfs3::Nfsstat3;

fn node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Node {
    spawn_node(root, id, host, port, peers, secret, "", "")
}

/// smbclient on share `share` of node port `port`.
fn smb(port: u16, share: &str, dir: &Path, cmds: &str) -> Result<String, String> {
    let out = Command::new("smbclient")
        .args([&format!("//127.0.0.1/{share}"), "-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3", "-c", cmds])
        .current_dir(dir)
        .output()
        .expect("smbclient runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() && !text.contains("NT_STATUS_") {
        Ok(text)
    } else {
        Err(text)
    }
}

/// Retries `f` until it succeeds or `WAIT` passes (a share or snapshot
/// made through another node reaches this one's protocol executors at
/// their next catalog refresh; an election answers the retry status).
fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) => assert!(Instant::now() < deadline, "{what}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `name` of share `share` through node `n` over SMB: its bytes, or an
/// error (missing files included).
fn get(n: &Node, share: &str, local: &Path, name: &str) -> Result<Vec<u8>, String> {
    let back = local.join(format!("got-{}-{share}-{}", n.id, name.replace('/', "_")));
    let _ = std::fs::remove_file(&back);
    smb(n.smb, share, local, &format!("get {name} {}", back.display()))?;
    std::fs::read(&back).map_err(|e| e.to_string())
}

/// The file through node `n`'s NFSv3 at `path` (components below the export).
fn nfs_read(n: &Node, export: &str, path: &[&[u8]]) -> Result<Vec<u8>, Nfsstat3> {
    let mut c = Nfs::connect(n.d.nfs_port);
    let mut fh = c.mount(export).map_err(|_| Nfsstat3::STALE)?;
    for p in path {
        fh = c.lookup3(&fh, p)?;
    }
    c.read3_all(&fh)
}

/// What each name holds (None: absent) in the share, the snapshot and the clone.
struct Expect<'a> {
    share: Vec<(&'a str, Option<&'a [u8]>)>,
    snap: Vec<(&'a str, Option<&'a [u8]>)>,
    clone: Vec<(&'a str, Option<&'a [u8]>)>,
}

fn check_node(n: &Node, local: &Path, gmt: &str, e: &Expect<'_>) {
    for (name, want) in &e.share {
        let got = eventually(&format!("node {}: {name} in the share", n.id), || match (get(n, "public", local, name), want) {
            (Ok(b), Some(w)) if b == *w => Ok(()),
            (Err(err), None) if err.contains("OBJECT_NAME_NOT_FOUND") => Ok(()),
            (r, _) => Err(format!("{:?}", r.map(|b| b.len()))),
        });
        let _: () = got;
    }
    for (name, want) in &e.snap {
        // NFSv3 `.snapshot/s1/NAME` and SMB `@GMT-.../NAME`, both.
        let nfs = nfs_read(n, "/public", &[b".snapshot", b"s1", name.as_bytes()]);
        match want {
            Some(w) => assert!(nfs.as_deref() == Ok(*w), "node {}: .snapshot/s1/{name} over NFS: {:?}", n.id, nfs.map(|b| b.len())),
            None => assert_eq!(nfs.err(), Some(Nfsstat3::NOENT), "node {}: .snapshot/s1/{name} should be absent", n.id),
        }
        if let Some(w) = want {
            let b = eventually(&format!("node {}: {gmt}/{name} over SMB", n.id), || get(n, "public", local, &format!("{gmt}/{name}")));
            assert!(b == *w, "node {}: {gmt}/{name} over SMB differs", n.id);
        }
    }
    for (name, want) in &e.clone {
        eventually(&format!("node {}: {name} in the clone", n.id), || match (get(n, "c1", local, name), want) {
            (Ok(b), Some(w)) if b == *w => Ok(()),
            (Err(err), None) if err.contains("OBJECT_NAME_NOT_FOUND") => Ok(()),
            (r, _) => Err(format!("{:?}", r.map(|b| b.len()))),
        });
        let nfs = nfs_read(n, "/clones/c1", &[name.as_bytes()]);
        match want {
            Some(w) => assert!(nfs.as_deref() == Ok(*w), "node {}: clone {name} over NFS: {:?}", n.id, nfs.map(|b| b.len())),
            None => assert_eq!(nfs.err(), Some(Nfsstat3::NOENT), "node {}: clone {name} should be absent", n.id),
        }
    }
}

fn exit_code(n: &Node, args: &[&str]) -> i32 {
    n.d.ctl(args).status.code().unwrap_or(-1)
}

#[test]
fn snapshots_and_clones_replicate_and_survive_a_leader_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let t0 = Instant::now();
    let Three { mut nodes, s, .. } = start_three(root, &[], node);
    let leader = s[0]["leader"].as_u64().unwrap();
    let li = leader as usize - 1;
    let (fa, fb) = ((li + 1) % 3, (li + 2) % 3);
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    add_bench_user(&nodes[fa], &local);

    // Files through a follower: inline, one chunk, several chunks.
    let v1 = random_files("f", &[2_000, 100_000, 5_500_000]);
    put_all(nodes[fa].smb, &local, &v1);
    // A snapshot through the other follower (one raft command, forwarded).
    let out = nodes[fb].d.ok(&["snapshot", "create", "public", "s1"]);
    assert!(out.contains("took snapshot s1"), "{out}");
    let listed = nodes[fa].d.ok(&["--json", "snapshot", "list", "public"]);
    let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(v[0]["name"], "s1", "the snapshot is listed on another node: {listed}");
    let gmt = v[0]["gmt"].as_str().unwrap().to_string();
    // Changes after it: f1 rewritten, f2 deleted, g0 new.
    let f1_new = random_files("f", &[0, 150_000]).pop().unwrap().1;
    let g0 = random_files("g", &[300_000]);
    std::fs::write(local.join("f1.bin"), &f1_new).unwrap();
    std::fs::write(local.join("g0.bin"), &g0[0].1).unwrap();
    smb(nodes[fa].smb, "public", &local, "put f1.bin; put g0.bin; del f2.bin").unwrap();
    // A clone of the snapshot through a follower.
    let out = nodes[fb].d.ok(&["share", "clone", "public@s1", "c1"]);
    assert!(out.contains("a writable clone of public@s1"), "{out}");

    let (f0, f1, f2) = (&v1[0].1[..], &v1[1].1[..], &v1[2].1[..]);
    let mut e = Expect {
        share: vec![("f0.bin", Some(f0)), ("f1.bin", Some(&f1_new[..])), ("f2.bin", None), ("g0.bin", Some(&g0[0].1[..]))],
        snap: vec![("f0.bin", Some(f0)), ("f1.bin", Some(f1)), ("f2.bin", Some(f2)), ("g0.bin", None)],
        clone: vec![("f0.bin", Some(f0)), ("f1.bin", Some(f1)), ("f2.bin", Some(f2)), ("g0.bin", None)],
    };
    for n in &nodes {
        check_node(n, &local, &gmt, &e);
    }
    eprintln!("snapshot and clone read byte-exact on every node ({:?})", t0.elapsed());

    // The clone written through the leader, read on the followers; the
    // source does not change.
    let h0 = random_files("h", &[1_200_000]);
    std::fs::write(local.join("h0.bin"), &h0[0].1).unwrap();
    let c_f0 = random_files("x", &[64_000]).pop().unwrap().1;
    std::fs::write(local.join("f0.bin"), &c_f0).unwrap();
    eventually("put into the clone via the leader", || smb(nodes[li].smb, "c1", &local, "put h0.bin; put f0.bin; del f1.bin"));
    e.clone = vec![("f0.bin", Some(&c_f0[..])), ("f1.bin", None), ("f2.bin", Some(f2)), ("h0.bin", Some(&h0[0].1[..]))];
    e.share.push(("h0.bin", None));
    for i in [fa, fb] {
        check_node(&nodes[i], &local, &gmt, &e);
    }

    // The leader dies; the survivors elect and serve all of it.
    let kill = Instant::now();
    nodes[li].d.kill9();
    let rest: Vec<&Node> = nodes.iter().filter(|n| n.id != leader).collect();
    let s = wait_for(&rest, "the survivors elect", |s| {
        agreed(&rest, s) && s[0]["leader"].as_u64().is_some_and(|l| l != leader)
    });
    eprintln!("new leader {} {:?} after the kill", s[0]["leader"], kill.elapsed());
    for n in &rest {
        check_node(n, &local, &gmt, &e);
    }
    // A second snapshot through a survivor, deleted again; the pinned one
    // cannot be deleted while the clone stands on it.
    let (a, b) = (rest[0], rest[1]);
    eventually("snapshot s2 after the failover", || {
        let o = a.d.ctl(&["snapshot", "create", "public", "s2"]);
        if o.status.success() {
            Ok(())
        } else {
            Err(format!("{o:?}"))
        }
    });
    let listed = b.d.ok(&["snapshot", "list", "public"]);
    assert!(listed.contains("s1") && listed.contains("s2"), "{listed}");
    b.d.ok(&["--yes", "snapshot", "delete", "public", "s2"]);
    assert_eq!(exit_code(b, &["--yes", "snapshot", "delete", "public", "s1"]), 2, "s1 is pinned by the clone");
    let listed = a.d.ok(&["snapshot", "list", "public"]);
    assert!(listed.contains("s1") && !listed.contains("s2"), "{listed}");

    // The killed node returns, catches up and serves it all from its own store.
    nodes[li].d.start_again();
    wait_smb(&nodes[li]);
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for(&all, "the returned node catches up", |s| agreed(&all, s));
    check_node(&nodes[li], &local, &gmt, &e);
    let listed = nodes[li].d.ok(&["snapshot", "list", "public"]);
    assert!(listed.contains("s1") && !listed.contains("s2"), "the returned node's list: {listed}");
    for n in &nodes {
        let out = n.d.ok(&["fsck"]);
        assert!(out.contains("file system is consistent"), "fsck on node {}: {out}", n.id);
        assert!(!log(&n.d).contains("panicked"), "node {} panicked:\n{}", n.id, log(&n.d));
    }
    eprintln!("whole test {:?}", t0.elapsed());
}
