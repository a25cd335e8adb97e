//! Three (or more) real duetd processes on 127.0.0.11, .12, ... for the
//! cluster tests: ports free on every node address, a node's
//! configuration, cluster status polls with deadlines, smbclient puts and
//! byte-exact gets, the nodes' chunk files. Every wait is bounded.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rand::RngCore;
use serde_json::Value;

use super::{free_port, Daemon};

/// How long a cluster test waits for anything.
pub const WAIT: Duration = Duration::from_secs(30);

/// A port free on 127.0.0.11 and on each of `others` (the nodes share it).
pub fn cluster_port(others: &[&str]) -> u16 {
    'next: for _ in 0..50 {
        let l = std::net::TcpListener::bind("127.0.0.11:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut held = vec![l];
        for host in others {
            match std::net::TcpListener::bind((*host, port)) {
                Ok(l) => held.push(l),
                Err(_) => continue 'next,
            }
        }
        return port;
    }
    panic!("no port free on 127.0.0.11 and {others:?}");
}

pub struct Node {
    pub d: Daemon,
    pub id: u64,
    pub smb: u16,
}

/// Starts node `id` listening for peers on `host:port`, with `peers` (a
/// TOML list) and the secret file; `cluster_extra` goes into `[cluster]`,
/// `tail` after it (more sections). Admin, SMB and NFS on free loopback
/// ports; 8 MiB write-log segments.
#[allow(clippy::too_many_arguments)]
pub fn spawn_node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path, cluster_extra: &str, tail: &str) -> Node {
    let dir = root.join(format!("n{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let admin = format!("127.0.0.1:{}", free_port());
    let smb = free_port();
    let nfs = free_port();
    let text = format!(
        "data_dir = {data:?}\nnode_id = {id}\nexecutors = 1\n[admin]\nlisten = \"{admin}\"\n\
         [smb]\nlisten = \"127.0.0.1:{smb}\"\n[nfs]\nlisten = \"127.0.0.1:{nfs}\"\nportmap = false\n\
         [cache]\nlog_segment_mib = 8\n\
         [cluster]\nlisten = \"{host}:{port}\"\npeers = {peers}\nsecret_file = {secret:?}\n{cluster_extra}{tail}",
    );
    let mut d = Daemon::spawn_cluster_node(&dir, &admin, &data, &text);
    // Recorded for the tests' own clients (a cluster node's start does
    // not wait on them: `wait_smb`).
    d.smb_port = smb;
    d.nfs_port = nfs;
    Node { d, id, smb }
}

/// A started group of voters 1, 2, 3 on 127.0.0.11 to .13.
pub struct Three {
    pub nodes: Vec<Node>,
    /// Their statuses once they agreed on a leader.
    pub s: Vec<Value>,
    /// The peer port they share, the secret file, and their `peers` entries.
    pub port: u16,
    pub secret: PathBuf,
    pub list: Vec<String>,
}

/// Starts voters 1, 2, 3 on 127.0.0.11 to .13 with `spawn` (a test's
/// node configuration), on a peer port also free on `also_free_on`, and
/// waits until each serves SMB and all three agree on one leader.
pub fn start_three(root: &Path, also_free_on: &[&str], spawn: impl Fn(&Path, u64, &str, u16, &str, &Path) -> Node) -> Three {
    let mut others = vec!["127.0.0.12", "127.0.0.13"];
    others.extend_from_slice(also_free_on);
    let port = cluster_port(&others);
    let secret = root.join("cluster.secret");
    std::fs::write(&secret, [0x42u8; 48]).unwrap();
    let hosts = [(1u64, "127.0.0.11"), (2, "127.0.0.12"), (3, "127.0.0.13")];
    let list: Vec<String> = hosts.iter().map(|(id, h)| format!("\"{id}@{h}:{port}\"")).collect();
    let peers = format!("[{}]", list.join(", "));
    let mut nodes: Vec<Node> = hosts.iter().map(|(id, h)| spawn(root, *id, h, port, &peers, &secret)).collect();
    for (i, (id, h)) in hosts.iter().enumerate() {
        // `free_port` releases the port it found: another process may take
        // it before duetd binds it. A node that exits so is started again
        // on other client ports (its data directory is its own first
        // start's: the same node starting again).
        let mut attempt = 1;
        loop {
            match nodes[i].d.try_wait_serving(0) {
                Ok(()) => break,
                Err(_) if attempt < 4 && !nodes[i].d.alive() && nodes[i].d.log_text().contains("Address already in use") => {
                    eprintln!("test cluster: a port of node {id} was taken before duetd bound it; starting it again on others");
                    attempt += 1;
                    let _ = std::fs::remove_file(&nodes[i].d.log);
                    nodes[i] = spawn(root, *id, h, port, &peers, &secret);
                }
                Err(why) => panic!("node {id}: {why}"),
            }
        }
        nodes[i].d.wait_listening();
    }
    for n in &nodes {
        wait_smb(n);
    }
    let s = {
        let all: Vec<&Node> = nodes.iter().collect();
        wait_for(&all, "three nodes agree", |s| agreed(&all, s))
    };
    Three { nodes, s, port, secret, list }
}

/// Adds the SMB user `bench` (password `benchpw`) through `n` and waits
/// until it logs on there (the SMB server reads users from the store).
pub fn add_bench_user(n: &Node, local: &Path) {
    n.d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    let deadline = Instant::now() + WAIT;
    while let Err(e) = smbclient(n.smb, local, "ls") {
        assert!(Instant::now() < deadline, "no SMB login on node {}: {e}", n.id);
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn status(n: &Daemon) -> Value {
    let o = n.ctl(&["cluster", "status", "--json"]);
    assert!(matches!(o.status.code(), Some(0) | Some(7)), "duetctl cluster status: {o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

pub fn applied(s: &Value, id: u64) -> u64 {
    s["nodes"].as_array().unwrap().iter().find(|n| n["id"] == id).unwrap()["applied"].as_u64().unwrap()
}

/// Polls the statuses of `nodes` until `f` holds, or fails after `WAIT`.
pub fn wait_for(nodes: &[&Node], what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
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
pub fn agreed(nodes: &[&Node], s: &[Value]) -> bool {
    let l = &s[0]["leader"];
    let ids: Vec<u64> = nodes.iter().map(|n| n.id).collect();
    let a: Vec<u64> = s.iter().zip(&ids).map(|(v, id)| applied(v, *id)).collect();
    l.as_u64().is_some_and(|l| ids.contains(&l))
        && s.iter().all(|v| v["leader"] == *l && v["term"] == s[0]["term"])
        && a.iter().all(|x| *x == a[0])
}

pub fn smbclient(port: u16, dir: &Path, cmds: &str) -> Result<String, String> {
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
pub fn put_all(port: u16, local: &Path, files: &[(String, Vec<u8>)]) {
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
pub fn check_all(port: u16, local: &Path, files: &[(String, Vec<u8>)], via: u64) {
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

pub fn random_files(prefix: &str, sizes: &[usize]) -> Vec<(String, Vec<u8>)> {
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
pub fn chunk_files(data: &Path) -> Vec<(PathBuf, Vec<u8>)> {
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
pub fn not_in_chunks<'a>(data: &Path, files: &'a [(String, Vec<u8>)]) -> Vec<&'a str> {
    let chunks = chunk_files(data);
    files
        .iter()
        .filter(|(_, bytes)| !chunks.iter().any(|(_, c)| c.len() >= bytes.len() && c[..bytes.len()] == bytes[..]))
        .map(|(n, _)| n.as_str())
        .collect()
}

pub fn wait_smb(n: &Node) {
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", n.smb)).is_err() {
        assert!(Instant::now() < deadline, "node {} does not listen on SMB: {}", n.id, log(&n.d));
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[allow(dead_code)]
pub fn wal_segments(data: &Path) -> usize {
    std::fs::read_dir(data.join("wal"))
        .map(|r| r.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "log")).count())
        .unwrap_or(0)
}


pub fn wait_log(n: &Node, what: &str, needle: &str, times: usize) {
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
pub fn metric(d: &Daemon, series: &str) -> u64 {
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
pub fn log(d: &Daemon) -> String {
    String::from_utf8_lossy(&std::fs::read(&d.log).unwrap_or_default()).into_owned()
}

/// Waits until the incarnation started after the last install serves.
pub fn wait_serving_again(n: &Node) {
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
pub fn wait_chunks(n: &Node, files: &[(String, Vec<u8>)]) {
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
pub fn lead(via: &Node, to: u64, nodes: &[&Node]) {
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

/// Network cuts between cluster nodes at the OS level: iptables rules in
/// the filter table's INPUT chain that DROP TCP packets from one node
/// address to another on this test's own peer port only (either end of
/// the connection: `--dport` and `--sport`), so other tests' clusters and
/// the nodes' client ports are untouched. Every rule carries the comment
/// `duet-part-<pid>-<port>`; [`Cuts::heal`] and `Drop` (a panicking test
/// included) delete them, and [`Cuts::new`] deletes rules left by test
/// processes that no longer exist (one killed before its drop ran).
/// Needs root and iptables (scripts/install-deps.sh).
#[allow(dead_code)]
pub struct Cuts {
    port: u16,
    tag: String,
    /// Each rule's match, as given to `-I` and later to `-D`.
    rules: Vec<Vec<String>>,
}

#[allow(dead_code)]
impl Cuts {
    pub fn new(port: u16) -> Cuts {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "partition tests need root for iptables");
        let listed = Command::new("iptables").args(["-w", "-S", "INPUT"]).output().expect("iptables runs (scripts/install-deps.sh installs it)");
        assert!(listed.status.success(), "iptables -S: {}", String::from_utf8_lossy(&listed.stderr));
        for line in String::from_utf8_lossy(&listed.stdout).lines() {
            let Some(at) = line.find("duet-part-") else { continue };
            let pid: String = line[at + 10..].chars().take_while(|c| c.is_ascii_digit()).collect();
            if Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            // `-A INPUT ...` as iptables prints it; the same words delete it.
            let Some(spec) = line.strip_prefix("-A INPUT ") else { continue };
            let words: Vec<String> = shell_words(spec);
            let mut args = vec!["-w".to_string(), "-D".into(), "INPUT".into()];
            args.extend(words);
            let _ = Command::new("iptables").args(&args).output();
            eprintln!("cuts: removed a stale rule of process {pid}: {line}");
        }
        Cuts { port, tag: format!("duet-part-{}-{port}", std::process::id()), rules: Vec::new() }
    }

    fn iptables(&self, op: &str, rule: &[String]) -> Result<(), String> {
        let mut args = vec!["-w".to_string(), op.to_string(), "INPUT".to_string()];
        args.extend(rule.iter().cloned());
        let o = Command::new("iptables").args(&args).output().map_err(|e| e.to_string())?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!("iptables {args:?}: {}", String::from_utf8_lossy(&o.stderr)))
        }
    }

    /// Drops every packet `from` sends to `to` on the peer port (TCP data
    /// and acknowledgments alike: connections from `to` to `from` stall
    /// too, as their acknowledgments are lost).
    pub fn one_way(&mut self, from: &str, to: &str) {
        for dir in ["--dport", "--sport"] {
            let rule: Vec<String> = ["-s", from, "-d", to, "-p", "tcp", dir, &self.port.to_string(), "-m", "comment", "--comment", &self.tag, "-j", "DROP"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            self.iptables("-I", &rule).unwrap_or_else(|e| panic!("{e}"));
            self.rules.push(rule);
        }
    }

    /// Cuts `a` and `b` apart in both directions.
    pub fn both(&mut self, a: &str, b: &str) {
        self.one_way(a, b);
        self.one_way(b, a);
    }

    /// Cuts `a` from every one of `others`.
    pub fn isolate(&mut self, a: &str, others: &[&str]) {
        for o in others {
            self.both(a, o);
        }
    }

    /// Deletes every rule this value added.
    pub fn heal(&mut self) {
        for rule in std::mem::take(&mut self.rules) {
            if let Err(e) = self.iptables("-D", &rule) {
                eprintln!("cuts: {e}");
            }
        }
    }

    /// How many rules are in place.
    pub fn len(&self) -> usize {
        self.rules.len()
    }
}

impl Drop for Cuts {
    fn drop(&mut self) {
        self.heal();
    }
}

/// Splits iptables' `-S` output into words (its comments are quoted).
#[allow(dead_code)]
fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            _ => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}
