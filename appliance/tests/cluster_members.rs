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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, Daemon};
use rand::RngCore;
use serde_json::Value;

const LOG_RETAIN: u64 = 40;
const WAIT: Duration = Duration::from_secs(30);

/// A port free on 127.0.0.11 to .13 (the nodes share it).
fn cluster_port() -> u16 {
    'next: for _ in 0..50 {
        let l = std::net::TcpListener::bind("127.0.0.11:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut held = vec![l];
        for host in ["127.0.0.12", "127.0.0.13", "127.0.0.14"] {
            match std::net::TcpListener::bind((host, port)) {
                Ok(l) => held.push(l),
                Err(_) => continue 'next,
            }
        }
        return port;
    }
    panic!("no port free on 127.0.0.11 to .14");
}

struct Node {
    d: Daemon,
    id: u64,
    smb: u16,
}

fn spawn_node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path, join: bool) -> Node {
    let dir = root.join(format!("n{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let admin = format!("127.0.0.1:{}", free_port());
    let smb = free_port();
    let text = format!(
        "data_dir = {data:?}\nnode_id = {id}\nexecutors = 1\n[admin]\nlisten = \"{admin}\"\n\
         [smb]\nlisten = \"127.0.0.1:{smb}\"\n[nfs]\nlisten = \"127.0.0.1:{}\"\nportmap = false\n\
         [cache]\nlog_segment_mib = 8\n\
         [cluster]\nlisten = \"{host}:{port}\"\npeers = {peers}\nsecret_file = {secret:?}\nlog_retain = {LOG_RETAIN}\njoin = {join}\n",
        free_port()
    );
    Node { d: Daemon::spawn_cluster_node(&dir, &admin, &data, &text), id, smb }
}

fn status(n: &Daemon) -> Value {
    let o = n.ctl(&["cluster", "status", "--json"]);
    assert!(matches!(o.status.code(), Some(0) | Some(7)), "duetctl cluster status: {o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

fn applied(s: &Value, id: u64) -> u64 {
    s["nodes"].as_array().unwrap().iter().find(|n| n["id"] == id).unwrap()["applied"].as_u64().unwrap()
}

/// Polls the statuses of `nodes` until `f` holds, or fails after `WAIT`.
fn wait_for(nodes: &[&Node], what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let s: Vec<Value> = nodes.iter().map(|n| status(&n.d)).collect();
        if f(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}; statuses: {s:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One leader among `nodes`, the same on all, and equal applied indexes.
fn agreed(nodes: &[&Node], s: &[Value]) -> bool {
    let l = &s[0]["leader"];
    let ids: Vec<u64> = nodes.iter().map(|n| n.id).collect();
    let a: Vec<u64> = s.iter().zip(&ids).map(|(v, id)| applied(v, *id)).collect();
    l.as_u64().is_some_and(|l| ids.contains(&l))
        && s.iter().all(|v| v["leader"] == *l && v["term"] == s[0]["term"])
        && a.iter().all(|x| *x == a[0])
}

fn smbclient(port: u16, dir: &Path, cmds: &str) -> Result<String, String> {
    let out = Command::new("smbclient")
        .args(["//127.0.0.1/public", "-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3", "-c", cmds])
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

/// Writes `files` (name, bytes) into `local` and puts them through `port`.
fn put_all(port: u16, local: &Path, files: &[(String, Vec<u8>)]) {
    let mut cmds = Vec::new();
    for (name, bytes) in files {
        std::fs::write(local.join(name), bytes).unwrap();
        cmds.push(format!("put {name}"));
    }
    let t = Instant::now();
    smbclient(port, local, &cmds.join("; ")).unwrap_or_else(|e| panic!("smbclient put: {e}"));
    let total: usize = files.iter().map(|(_, b)| b.len()).sum();
    eprintln!("put {} files, {} bytes, in {:?}", files.len(), total, t.elapsed());
}

/// Gets every file back through `port` and compares byte for byte.
fn check_all(port: u16, local: &Path, files: &[(String, Vec<u8>)], via: u64) {
    let back = local.join(format!("back-{via}"));
    let _ = std::fs::remove_dir_all(&back);
    std::fs::create_dir_all(&back).unwrap();
    let cmds: Vec<String> = files.iter().map(|(n, _)| format!("get {n} {}", back.join(n).display())).collect();
    smbclient(port, local, &cmds.join("; ")).unwrap_or_else(|e| panic!("smbclient get via node {via}: {e}"));
    for (name, bytes) in files {
        let got = std::fs::read(back.join(name)).unwrap();
        assert_eq!(got.len(), bytes.len(), "{name} via node {via}: length");
        assert!(got == *bytes, "{name} via node {via}: bytes differ");
    }
}

fn random_files(prefix: &str, sizes: &[usize]) -> Vec<(String, Vec<u8>)> {
    let mut rng = rand::thread_rng();
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut b = vec![0u8; n];
            rng.fill_bytes(&mut b);
            (format!("{prefix}{i}.bin"), b)
        })
        .collect()
}

/// Every chunk file of a node's data directory (all under 4 MiB, index 0
/// of a file here) with its bytes.
fn chunk_files(data: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(data.join("chunks")) else { return out };
    for d in dirs.flatten() {
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            if let Ok(b) = std::fs::read(f.path()) {
                out.push((f.path(), b));
            }
        }
    }
    out
}

/// The files whose bytes no chunk file of `data` starts with.
fn not_in_chunks<'a>(data: &Path, files: &'a [(String, Vec<u8>)]) -> Vec<&'a str> {
    let chunks = chunk_files(data);
    files
        .iter()
        .filter(|(_, bytes)| !chunks.iter().any(|(_, c)| c.len() >= bytes.len() && c[..bytes.len()] == bytes[..]))
        .map(|(n, _)| n.as_str())
        .collect()
}

fn wait_smb(n: &Node) {
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", n.smb)).is_err() {
        assert!(Instant::now() < deadline, "node {} does not listen on SMB: {}", n.id, log(&n.d));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[allow(dead_code)]
fn wal_segments(data: &Path) -> usize {
    std::fs::read_dir(data.join("wal"))
        .map(|r| r.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "log")).count())
        .unwrap_or(0)
}


fn wait_log(n: &Node, what: &str, needle: &str, times: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = log(&n.d);
        if text.matches(needle).count() >= times {
            return;
        }
        assert!(Instant::now() < deadline, "node {}: {what}: no {needle:?} within 60 s; log:\n{text}", n.id);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The node's log (lossy: a line may hold bytes that are not UTF-8).
fn log(d: &Daemon) -> String {
    String::from_utf8_lossy(&std::fs::read(&d.log).unwrap_or_default()).into_owned()
}

/// Waits until the incarnation started after the last install serves.
fn wait_serving_again(n: &Node) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = log(&n.d);
        let at = text.rfind("raft snapshot: installed the image of index").expect("an install");
        if text[at..].contains("duetd is serving") {
            return;
        }
        assert!(Instant::now() < deadline, "node {} does not serve after its install; log:\n{text}", n.id);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `n`'s own chunk files hold every file's bytes (files of at
/// most 4 KiB live inline in the metadata, not in chunks).
fn wait_chunks(n: &Node, files: &[(String, Vec<u8>)]) {
    let files: Vec<(String, Vec<u8>)> = files.iter().filter(|(_, b)| b.len() > 4096).cloned().collect();
    let files = &files[..];
    let deadline = Instant::now() + WAIT;
    loop {
        let missing = not_in_chunks(&n.d.data, files);
        if missing.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "node {} chunks lack {missing:?}; log:\n{}", n.id, log(&n.d));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Moves leadership to `to` (asked through `via`) and waits until `nodes` agree on it.
fn lead(via: &Node, to: u64, nodes: &[&Node]) {
    let deadline = Instant::now() + WAIT;
    loop {
        let o = via.d.ctl(&["cluster", "transfer-leader", &to.to_string()]);
        assert!(matches!(o.status.code(), Some(0) | Some(7) | Some(8)), "transfer-leader: {o:?}");
        let t = Instant::now() + Duration::from_secs(5);
        while Instant::now() < t {
            let s: Vec<Value> = nodes.iter().map(|n| status(&n.d)).collect();
            if s[0]["leader"].as_u64() == Some(to) && agreed(nodes, &s) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(Instant::now() < deadline, "node {to} did not become the leader");
    }
}


#[test]
fn a_fourth_node_is_added_and_a_follower_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let port = cluster_port();
    let secret = root.join("cluster.secret");
    std::fs::write(&secret, [0x42u8; 48]).unwrap();
    let hosts = [(1u64, "127.0.0.11"), (2, "127.0.0.12"), (3, "127.0.0.13")];
    let list: Vec<String> = hosts.iter().map(|(id, h)| format!("\"{id}@{h}:{port}\"")).collect();
    let peers = format!("[{}]", list.join(", "));
    let mut nodes: Vec<Node> = hosts.iter().map(|(id, h)| spawn_node(root, *id, h, port, &peers, &secret, false)).collect();
    for n in nodes.iter_mut() {
        n.d.wait_started(0);
    }
    for n in &nodes {
        wait_smb(n);
    }
    let s = {
        let all: Vec<&Node> = nodes.iter().collect();
        wait_for(&all, "three nodes agree", |s| agreed(&all, s))
    };
    let leader = s[0]["leader"].as_u64().unwrap();
    let li = leader as usize - 1;
    nodes[li].d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let deadline = Instant::now() + WAIT;
    while let Err(e) = smbclient(nodes[li].smb, &local, "ls") {
        assert!(Instant::now() < deadline, "no SMB login on the leader: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }
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
    let n4 = spawn_node(root, 4, "127.0.0.14", port, &list4, &secret, true);
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
    check_all(nodes[3].smb, &local, &files, 4);
    wait_chunks(&nodes[3], &files);

    // A follower is removed, then stopped: the three left go on.
    let gone = (0..3).find(|&i| i != li).unwrap();
    let gone_id = nodes[gone].id;
    let out = nodes[3].d.ok(&["cluster", "remove", &gone_id.to_string()]);
    eprintln!("{out}");
    assert!(out.contains(&format!("removed node {gone_id}")), "{out}");
    nodes[gone].d.kill9();
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
