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
        for host in ["127.0.0.12", "127.0.0.13"] {
            match std::net::TcpListener::bind((host, port)) {
                Ok(l) => held.push(l),
                Err(_) => continue 'next,
            }
        }
        return port;
    }
    panic!("no port free on 127.0.0.11 to .13");
}

struct Node {
    d: Daemon,
    id: u64,
    smb: u16,
}

fn spawn_node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Node {
    let dir = root.join(format!("n{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let admin = format!("127.0.0.1:{}", free_port());
    let smb = free_port();
    let text = format!(
        "data_dir = {data:?}\nnode_id = {id}\nexecutors = 1\n[admin]\nlisten = \"{admin}\"\n\
         [smb]\nlisten = \"127.0.0.1:{smb}\"\n[nfs]\nlisten = \"127.0.0.1:{}\"\nportmap = false\n\
         [cache]\nlog_segment_mib = 8\n\
         [cluster]\nlisten = \"{host}:{port}\"\npeers = {peers}\nsecret_file = {secret:?}\nlog_retain = {LOG_RETAIN}\n\
         [testing]\nsnapshot_corrupt = 1\nfault_injection = true\n",
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

/// A counter of `/metrics` on `d` (0 when absent).
fn metric(d: &Daemon, series: &str) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(&d.admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", d.admin).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok()))
        .map_or(0, |v| v as u64)
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
fn lagging_and_emptied_followers_catch_up_by_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let port = cluster_port();
    let secret = root.join("cluster.secret");
    std::fs::write(&secret, [0x42u8; 48]).unwrap();
    let hosts = [(1u64, "127.0.0.11"), (2, "127.0.0.12"), (3, "127.0.0.13")];
    let list: Vec<String> = hosts.iter().map(|(id, h)| format!("\"{id}@{h}:{port}\"")).collect();
    let peers = format!("[{}]", list.join(", "));
    let mut nodes: Vec<Node> = hosts.iter().map(|(id, h)| spawn_node(root, *id, h, port, &peers, &secret)).collect();
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
    let (si, fi) = ((li + 1) % 3, (li + 2) % 3);
    eprintln!("leader {leader}; node {} lags, node {} is emptied later", si + 1, fi + 1);
    nodes[li].d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let deadline = Instant::now() + WAIT;
    while let Err(e) = smbclient(nodes[li].smb, &local, "ls") {
        assert!(Instant::now() < deadline, "no SMB login on the leader: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }

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
