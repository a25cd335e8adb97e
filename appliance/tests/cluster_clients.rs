//! Every node of a three-node cluster serves SMB and NFS (issue 12): three
//! real duetd on 127.0.0.11/.12/.13 (one cluster, SMB and NFS port each,
//! the same on every address). Debian's smbclient writes 300 small files
//! (at most 4 KiB, random content) through a follower, whose engine
//! forwards every batch to the leader; the leader is SIGKILLed; 100 more
//! files are written through the surviving follower within 10 s of the
//! kill (batches wait for the election; a put that got the retry answer is
//! put again, as a client would); all 400 read back byte-exact through
//! both survivors over SMB and over NFSv3 (libnfs' nfs-cat); the killed
//! node restarts, catches up, is made the leader and serves all 400 from
//! its own store. Then two of the three are SIGSTOPped for 7 s (longer
//! than `leader_wait_ms`): a put through the third waits (answered
//! STATUS_PENDING) and completes without an error once they resume.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, Daemon};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const HOSTS: [&str; 3] = ["127.0.0.11", "127.0.0.12", "127.0.0.13"];

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

struct Ports {
    cluster: u16,
    smb: u16,
    nfs: u16,
}

fn spawn_node(root: &Path, id: u64, p: &Ports, secret: &Path) -> Daemon {
    let host = HOSTS[id as usize - 1];
    let dir = root.join(format!("n{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let admin = format!("127.0.0.1:{}", free_port());
    let list: Vec<String> = HOSTS.iter().enumerate().map(|(i, h)| format!("\"{}@{h}:{}\"", i + 1, p.cluster)).collect();
    let text = format!(
        "data_dir = {data:?}\nnode_id = {id}\nexecutors = 1\n[admin]\nlisten = \"{admin}\"\n\
         [smb]\nlisten = \"{host}:{}\"\n[nfs]\nlisten = \"{host}:{}\"\nportmap = false\n\
         [cluster]\nlisten = \"{host}:{}\"\npeers = [{}]\nsecret_file = {secret:?}\n",
        p.smb,
        p.nfs,
        p.cluster,
        list.join(", ")
    );
    Daemon::spawn_cluster_node(&dir, &admin, &data, &text)
}

fn status(n: &Daemon) -> Value {
    let o = n.ctl(&["cluster", "status", "--json"]);
    serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
}

fn applied(s: &Value, id: u64) -> Option<u64> {
    s["nodes"].as_array()?.iter().find(|n| n["id"] == id)?["applied"].as_u64()
}

/// Polls until the nodes `ids` agree on one leader and one applied index.
fn agree(nodes: &[Daemon], ids: &[u64]) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let s: Vec<Value> = ids.iter().map(|&i| status(&nodes[i as usize - 1])).collect();
        let l = s[0]["leader"].as_u64();
        let a: Vec<Option<u64>> = ids.iter().zip(&s).map(|(&i, v)| applied(v, i)).collect();
        if l.is_some_and(|l| ids.contains(&l)) && s.iter().all(|v| v["leader"].as_u64() == l) && a.iter().all(|x| x.is_some() && *x == a[0]) {
            return l.unwrap();
        }
        assert!(Instant::now() < deadline, "nodes {ids:?} do not agree within {WAIT:?}: {s:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_port(host: &str, port: u16) {
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect((host, port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {host}:{port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// smbclient against `host`: (exit success, stdout+stderr).
fn smbclient(host: &str, port: u16, dir: &Path, cmds: &str) -> (bool, String) {
    let out = Command::new("smbclient")
        .args([&format!("//{host}/public"), "-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3", "-c", cmds])
        .current_dir(dir)
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Puts `names` (files of `dir`) through `host`; returns the names whose
/// put smbclient reported done ("putting file NAME as ...") and no error.
fn put_files(host: &str, port: u16, dir: &Path, names: &[String]) -> (BTreeSet<String>, String) {
    let cmds: Vec<String> = names.iter().map(|n| format!("put {n}")).collect();
    let (_, text) = smbclient(host, port, dir, &cmds.join("; "));
    let mut done = BTreeSet::new();
    for n in names {
        let ok = text.lines().any(|l| l.starts_with(&format!("putting file {n} as ")));
        let failed = text.lines().any(|l| l.contains("NT_STATUS_") && l.contains(n.as_str()));
        if ok && !failed {
            done.insert(n.clone());
        }
    }
    (done, text)
}

/// Reads every file back through `host` over SMB and compares.
fn check_smb(host: &str, port: u16, local: &Path, back: &Path, files: &[(String, Vec<u8>)]) {
    std::fs::create_dir_all(back).unwrap();
    let cmds: Vec<String> = files.iter().map(|(n, _)| format!("get {n} {}", back.join(n).display())).collect();
    let (ok, text) = smbclient(host, port, local, &cmds.join("; "));
    assert!(ok && !text.contains("NT_STATUS_"), "smbclient get through {host}:\n{text}");
    for (n, want) in files {
        let got = std::fs::read(back.join(n)).unwrap_or_else(|e| panic!("{n} through {host}: {e}"));
        assert!(got == *want, "{n} through {host} over SMB: {} bytes, differ from the {} written", got.len(), want.len());
    }
}

/// Reads every file back through `host` over NFSv3 (nfs-cat), four at a time.
fn check_nfs(host: &str, port: u16, files: &[(String, Vec<u8>)]) {
    let chunks: Vec<&[(String, Vec<u8>)]> = files.chunks(files.len().div_ceil(4)).collect();
    std::thread::scope(|s| {
        for part in chunks {
            s.spawn(move || {
                for (n, want) in part {
                    let url = format!("nfs://{host}/public/{n}?version=3&nfsport={port}&mountport={port}");
                    let o = Command::new("nfs-cat").arg(&url).output().expect("nfs-cat (libnfs-utils) runs");
                    assert!(o.status.success(), "nfs-cat {url}: {}", String::from_utf8_lossy(&o.stderr));
                    assert!(o.stdout == *want, "{n} through {host} over NFS: {} bytes, differ", o.stdout.len());
                }
            });
        }
    });
}

#[test]
fn three_nodes_serve_smb_and_nfs_through_a_leader_kill() {
    let t_all = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let cluster = shared_port(&[]);
    let smb = shared_port(&[cluster]);
    let nfs = shared_port(&[cluster, smb]);
    let ports = Ports { cluster, smb, nfs };
    let secret: PathBuf = root.join("cluster.secret");
    std::fs::write(&secret, [0x3c; 48]).unwrap();
    let mut nodes: Vec<Daemon> = (1..=3).map(|id| spawn_node(root, id, &ports, &secret)).collect();
    for n in nodes.iter_mut() {
        n.wait_started(0);
    }
    for h in HOSTS {
        wait_port(h, smb);
        wait_port(h, nfs);
    }
    let leader = agree(&nodes, &[1, 2, 3]);
    let li = leader as usize - 1;
    // The follower written through, and the third node.
    let (fi, oi) = ((li + 1) % 3, (li + 2) % 3);
    let (fhost, ohost) = (HOSTS[fi], HOSTS[oi]);
    eprintln!("leader: node {leader}; writing through node {} ({fhost})", fi + 1);
    for n in &nodes {
        let st: Value = serde_json::from_str(&n.ok(&["status", "--json"])).unwrap();
        let protos: Vec<&str> = st["listeners"].as_array().unwrap().iter().map(|l| l["protocol"].as_str().unwrap()).collect();
        assert!(protos.contains(&"smb") && protos.contains(&"nfs"), "a cluster node serves SMB and NFS: {st}");
    }
    // A user added on the leader; each node's catalog has it within a second or so.
    nodes[li].ok(&["user", "add", "bench", "--password", "benchpw"]);
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let deadline = Instant::now() + WAIT;
    for h in [fhost, ohost] {
        loop {
            let (ok, text) = smbclient(h, smb, &local, "ls");
            if ok && !text.contains("NT_STATUS_") {
                break;
            }
            assert!(Instant::now() < deadline, "the user never worked through {h}: {text}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // 400 files of 1 to 4096 random bytes (a fixed xorshift: replayable).
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let files: Vec<(String, Vec<u8>)> = (0..400)
        .map(|i| {
            let len = 1 + (next() % 4096) as usize;
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            (format!("f{i:03}.bin"), data)
        })
        .collect();
    for (n, d) in &files {
        std::fs::write(local.join(n), d).unwrap();
    }

    // 300 through the follower.
    let t = Instant::now();
    let first: Vec<String> = files[..300].iter().map(|(n, _)| n.clone()).collect();
    let (done, text) = put_files(fhost, smb, &local, &first);
    assert_eq!(done.len(), 300, "puts through the follower failed:\n{text}");
    eprintln!("300 files written through follower {} in {:?}", fi + 1, t.elapsed());
    // One file past the inline bound: write-cache data records to destage.
    let big: Vec<u8> = (0..(256u32 << 10)).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(local.join("big.bin"), &big).unwrap();
    let (done, text) = put_files(fhost, smb, &local, &["big.bin".to_string()]);
    assert_eq!(done.len(), 1, "the put of big.bin failed:\n{text}");
    // The leader sees every node's destage progress (status frames) and,
    // once the writes stop, every node's queue empty at the same record.
    let deadline = Instant::now() + WAIT;
    loop {
        let s = status(&nodes[li]);
        let d: Vec<(Option<u64>, Option<u64>)> = s["nodes"]
            .as_array()
            .map(|a| a.iter().map(|n| (n["destaged_upto"].as_u64(), n["destage_queue"].as_u64())).collect())
            .unwrap_or_default();
        if d.len() == 3 && d.iter().all(|x| x.0.is_some_and(|u| u > 0) && x.0 == d[0].0 && x.1 == Some(0)) {
            eprintln!("every node destaged up to record {}", d[0].0.unwrap());
            break;
        }
        assert!(Instant::now() < deadline, "the nodes' destage progress as the leader sees it: {s:#}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // SIGKILL the leader; 100 more through the surviving follower.
    nodes[li].kill9();
    let killed = Instant::now();
    let mut left: Vec<String> = files[300..].iter().map(|(n, _)| n.clone()).collect();
    let mut rounds = 0;
    let mut retried = 0;
    while !left.is_empty() {
        rounds += 1;
        assert!(killed.elapsed() < Duration::from_secs(30), "files not written 30 s after the kill: {left:?}");
        let (done, text) = put_files(fhost, smb, &local, &left);
        if done.len() < left.len() {
            retried += left.len() - done.len();
            let errs: Vec<&str> = text.lines().filter(|l| l.contains("NT_STATUS_")).take(3).collect();
            eprintln!("round {rounds}: {} of {} put, retrying the rest ({errs:?})", done.len(), left.len());
        }
        left.retain(|n| !done.contains(n));
    }
    let after_kill = killed.elapsed();
    eprintln!("100 files written through node {} {after_kill:?} after the kill ({rounds} rounds, {retried} puts retried)", fi + 1);
    assert!(after_kill < Duration::from_secs(10), "the 100 files took {after_kill:?} after the kill");
    let leader2 = agree(&nodes, &[fi as u64 + 1, oi as u64 + 1]);
    eprintln!("new leader: node {leader2}");

    // All 400 through both survivors, over SMB and NFS.
    let t = Instant::now();
    for (i, h) in [(fi, fhost), (oi, ohost)] {
        check_smb(h, smb, &local, &root.join(format!("back-smb-{}", i + 1)), &files);
        check_nfs(h, nfs, &files);
    }
    eprintln!("400 files read back byte-exact through nodes {} and {} (SMB and NFSv3) in {:?}", fi + 1, oi + 1, t.elapsed());

    // The killed node restarts and catches up; made the leader, it serves
    // all 400 from its own store.
    nodes[li].start_again();
    wait_port(HOSTS[li], smb);
    wait_port(HOSTS[li], nfs);
    let t = Instant::now();
    agree(&nodes, &[1, 2, 3]);
    eprintln!("node {leader} caught up {:?} after its restart", t.elapsed());
    let l2 = leader2 as usize - 1;
    let o = nodes[l2].ctl(&["cluster", "transfer-leader", &leader.to_string()]);
    assert!(matches!(o.status.code(), Some(0) | Some(7)), "transfer-leader: {o:?}");
    assert_eq!(agree(&nodes, &[1, 2, 3]), leader, "the restarted node leads");
    // Its catalog may need a second after the restart: the first get retries.
    let deadline = Instant::now() + WAIT;
    loop {
        let (ok, text) = smbclient(HOSTS[li], smb, &local, "ls");
        if ok && !text.contains("NT_STATUS_") {
            break;
        }
        assert!(Instant::now() < deadline, "the restarted node does not serve: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }
    check_smb(HOSTS[li], smb, &local, &root.join("back-smb-restarted"), &files);
    check_nfs(HOSTS[li], nfs, &files);
    for n in &nodes {
        assert!(n.ok(&["fsck"]).contains("file system is consistent"));
    }
    eprintln!("the restarted node serves all 400 as the leader");

    // A majority lost for longer than leader_wait_ms (5 s): the leader and
    // one follower are SIGSTOPped; once the third node knows no leader, a
    // put through it waits. SMB answers it STATUS_PENDING after 0.5 s and
    // keeps it waiting (up to smb_leader_wait_ms, 60 s) instead of
    // failing it at 5 s; when the two resume, a leader is elected and the
    // put completes, as smbclient sees it, without an error.
    let stopped = [li, fi];
    for &i in &stopped {
        unsafe { libc::kill(nodes[i].child.id() as i32, libc::SIGSTOP) };
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let s = status(&nodes[oi]);
        if s["term"].is_u64() && s["leader"].is_null() {
            break;
        }
        assert!(Instant::now() < deadline, "node {} still names a leader with two of three stopped: {s}", oi + 1);
        std::thread::sleep(Duration::from_millis(100));
    }
    let waited = vec![("waited.bin".to_string(), {
        let mut v = vec![0u8; 3000];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut v);
        v
    })];
    std::fs::write(local.join("waited.bin"), &waited[0].1).unwrap();
    let t = Instant::now();
    let put = {
        let local = local.clone();
        std::thread::spawn(move || smbclient(ohost, smb, &local, "put waited.bin"))
    };
    std::thread::sleep(Duration::from_secs(7));
    assert!(!put.is_finished(), "the put ended while no leader was known (after {:?})", t.elapsed());
    for &i in &stopped {
        unsafe { libc::kill(nodes[i].child.id() as i32, libc::SIGCONT) };
    }
    let (ok, text) = put.join().unwrap();
    let took = t.elapsed();
    eprintln!("a put through node {} without a leader for 7 s completed in {took:?}", oi + 1);
    assert!(ok && !text.contains("NT_STATUS_"), "a put that waited out a lost majority: {text}");
    agree(&nodes, &[1, 2, 3]);
    for i in 0..3 {
        check_smb(HOSTS[i], smb, &local, &root.join(format!("back-waited-{}", i + 1)), &waited);
        check_nfs(HOSTS[i], nfs, &waited);
    }
    let li = agree(&nodes, &[1, 2, 3]) as usize - 1;

    // Without a majority nothing commits: the leader left alone answers a
    // put with the retry status, within its bounds (leader_wait_ms 5 s,
    // forward_timeout_ms 10 s), never with success.
    for i in 0..3 {
        if i != li {
            nodes[i].kill9();
        }
    }
    let t = Instant::now();
    let (ok, text) = smbclient(HOSTS[li], smb, &local, "put f000.bin alone.bin");
    let took = t.elapsed();
    eprintln!("a put on a node without a majority answered in {took:?}: {}", text.lines().find(|l| l.contains("NT_STATUS")).unwrap_or(""));
    assert!(!ok && text.contains("NT_STATUS_INSUFFICIENT_RESOURCES"), "a put without a majority: {text}");
    assert!(took < Duration::from_secs(16), "the retry answer took {took:?}");
    eprintln!("whole test {:?}", t_all.elapsed());
}
