//! Public service addresses that move (issue 12, "Service addresses that
//! move"), with real processes on a real (virtual) network: three duetd
//! processes, each in a network namespace of its own, like three machines,
//! and a client namespace, joined by a bridge. The cluster's three public
//! addresses are spread one per node; smbclient in the client namespace
//! writes through each. The node holding 10.213.0.100 then "loses power"
//! (its link goes down, then SIGKILL): the address moves to a survivor,
//! which announces it with a gratuitous ARP (the client's neighbour entry
//! changes to the survivor's MAC address without the client asking), and
//! the same smbclient command line reads every file back byte-exact and
//! writes more. The node comes back (its stale address is removed at start)
//! and gets an address again; no address is ever on two live nodes at the
//! end. Needs root (network namespaces), as CI runs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const SUBNET: &str = "10.213.0";
/// The IPv6 prefix of the same network, and its public address.
const SUBNET6: &str = "fd00:213";
const PUBLIC6: &str = "fd00:213::100";
const PUBLIC: [&str; 3] = ["10.213.0.100", "10.213.0.101", "10.213.0.102"];
const WAIT: Duration = Duration::from_secs(40);

fn sh(args: &[&str]) -> Output {
    Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn must(args: &[&str]) {
    let o = sh(args);
    assert!(o.status.success(), "{args:?}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
}

/// One network at a time in this process: the tests of this file run on
/// parallel threads of one process, and two three-node clusters failing
/// over at once on two cores would only measure each other.
static ONE_NETWORK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The bridge, the namespaces and their veths; removed on drop.
struct Net {
    bridge: String,
    /// (namespace, host-side veth) of nodes 1-3 and the client (index 3).
    ns: Vec<(String, String)>,
    /// Held until the network is gone (fields drop after `Drop::drop`).
    _one: std::sync::MutexGuard<'static, ()>,
}

impl Net {
    fn new() -> Net {
        let one = ONE_NETWORK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Names unique per process and per network in it (a stale bridge
        // of a killed run with the same pid is removed first).
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 10;
        let tag = (std::process::id() % 10_000) * 10 + n;
        let bridge = format!("dbr{tag}");
        let _ = sh(&["ip", "link", "del", &bridge]);
        let mut net = Net { bridge: bridge.clone(), ns: Vec::new(), _one: one };
        must(&["ip", "link", "add", &bridge, "type", "bridge"]);
        must(&["ip", "link", "set", &bridge, "up"]);
        for (i, host) in [(1, "11"), (2, "12"), (3, "13"), (4, "2")] {
            let ns = format!("duet-addr{tag}-{i}");
            let veth = format!("dv{i}{tag}");
            let peer = format!("dp{i}{tag}");
            let _ = sh(&["ip", "link", "del", &veth]);
            let _ = sh(&["ip", "netns", "del", &ns]);
            must(&["ip", "netns", "add", &ns]);
            net.ns.push((ns.clone(), veth.clone()));
            must(&["ip", "link", "add", &veth, "type", "veth", "peer", "name", &peer]);
            must(&["ip", "link", "set", &peer, "netns", &ns]);
            must(&["ip", "netns", "exec", &ns, "ip", "link", "set", &peer, "name", "eth0"]);
            must(&["ip", "netns", "exec", &ns, "ip", "address", "add", &format!("{SUBNET}.{host}/24"), "dev", "eth0"]);
            must(&["ip", "netns", "exec", &ns, "ip", "address", "add", &format!("{SUBNET6}::{host}/64"), "dev", "eth0", "nodad"]);
            must(&["ip", "netns", "exec", &ns, "ip", "link", "set", "eth0", "up"]);
            must(&["ip", "netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
            must(&["ip", "link", "set", &veth, "master", &bridge]);
            must(&["ip", "link", "set", &veth, "up"]);
        }
        net
    }

    fn node_ns(&self, id: u64) -> &str {
        &self.ns[id as usize - 1].0
    }

    fn client_ns(&self) -> &str {
        &self.ns[3].0
    }

    /// The IPv4 addresses on a namespace's eth0.
    fn addresses(&self, ns: &str) -> Vec<String> {
        self.addresses_of(ns, "inet")
    }

    /// The addresses of family `inet` or `inet6` on a namespace's eth0.
    fn addresses_of(&self, ns: &str, family: &str) -> Vec<String> {
        let o = sh(&["ip", "netns", "exec", ns, "ip", "-o", "address", "show", "dev", "eth0"]);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                w.position(|x| x == family)?;
                Some(w.next()?.split('/').next()?.to_string())
            })
            .collect()
    }

    fn mac(&self, ns: &str) -> String {
        let o = sh(&["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/address"]);
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// The client's neighbour entry for `ip`: its MAC address, if any.
    fn client_neighbour(&self, ip: &str) -> Option<String> {
        let o = sh(&["ip", "netns", "exec", self.client_ns(), "ip", "neigh", "show", ip]);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut w = text.split_whitespace();
        w.position(|x| x == "lladdr")?;
        w.next().map(str::to_string)
    }

    /// The node's host-side link up or down (down: the machine is gone
    /// from the network, nothing it sends arrives).
    fn link(&self, id: u64, up: bool) {
        must(&["ip", "link", "set", &self.ns[id as usize - 1].1, if up { "up" } else { "down" }]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (ns, veth) in &self.ns {
            let _ = sh(&["ip", "link", "del", veth]);
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        let _ = sh(&["ip", "link", "del", &self.bridge]);
    }
}

struct Node {
    id: u64,
    ns: String,
    admin: String,
    data: PathBuf,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, env!("CARGO_BIN_EXE_duetd"), "--config", self.config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    fn ctl(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(common::duetctl())
            .args(["--addr", &self.admin, "--data-dir", self.data.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    }

    fn status(&self) -> Option<Value> {
        let o = self.ctl(&["cluster", "status", "--json"]);
        serde_json::from_slice(&o.stdout).ok()
    }

    fn wait_serving(&self, before: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.log_text().matches("duetd is serving").count() <= before {
            assert!(Instant::now() < deadline, "node {} does not serve; log:\n{}", self.id, self.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Who holds each public address, as `n` reports it (None where nobody).
fn table(n: &Node) -> Option<Vec<Option<u64>>> {
    let s = n.status()?;
    let rows = s["public_addresses"].as_array()?;
    Some(
        PUBLIC
            .iter()
            .map(|ip| {
                rows.iter()
                    .find(|r| r["address"].as_str().is_some_and(|a| a.starts_with(&format!("{ip}/"))))
                    .and_then(|r| r["node"].as_u64())
            })
            .collect(),
    )
}

/// Waits until `f` holds for the table `n` reports and the interfaces.
fn wait_table(what: &str, n: &Node, nodes: &[&Node], net: &Net, f: impl Fn(&[Option<u64>]) -> bool) -> Vec<Option<u64>> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(t) = table(n) {
            // The interfaces agree: each address on its holder only.
            let on_ifaces = nodes.iter().all(|m| {
                let have = net.addresses(&m.ns);
                PUBLIC.iter().zip(&t).all(|(ip, h)| have.contains(&ip.to_string()) == (*h == Some(m.id)))
            });
            if f(&t) && on_ifaces {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {WAIT:?}; table {t:?}; interfaces {:?}; log of node {}:\n{}",
                nodes.iter().map(|m| (m.id, net.addresses(&m.ns))).collect::<Vec<_>>(),
                n.id,
                n.log_text()
            );
        } else {
            assert!(Instant::now() < deadline, "{what}: node {} gives no status; log:\n{}", n.id, n.log_text());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn smbclient(net: &Net, ip: &str, dir: &Path, cmds: &str) -> Result<String, String> {
    let out = Command::new("ip")
        .args(["netns", "exec", net.client_ns(), "smbclient", "//duet/public", "-I", ip, "-U", "bench%benchpw", "-m", "SMB3"])
        .args(["-t", "10", "-c", cmds])
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() && !text.contains("NT_STATUS_") {
        Ok(text)
    } else {
        Err(text)
    }
}

fn random_bytes(n: usize) -> Vec<u8> {
    use rand::RngCore;
    let mut b = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut b);
    b
}

fn check_file(net: &Net, ip: &str, dir: &Path, name: &str, want: &[u8]) {
    let back = dir.join(format!("back-{name}"));
    let _ = std::fs::remove_file(&back);
    smbclient(net, ip, dir, &format!("get {name} {}", back.display())).unwrap_or_else(|e| {
        let macs: Vec<(String, String, Vec<String>)> = net.ns.iter().map(|(n, _)| (n.clone(), net.mac(n), net.addresses(n))).collect();
        panic!("get {name} via {ip}: {e}\nclient neighbour {:?}\nnodes {macs:?}", net.client_neighbour(ip))
    });
    let got = std::fs::read(&back).unwrap();
    assert!(got == want, "{name} via {ip}: {} bytes back, {} written, or different bytes", got.len(), want.len());
}

#[test]
fn public_addresses_move_to_a_survivor_and_back() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test makes network namespaces: run it as root (CI does)");
    let root = tempfile::tempdir().unwrap();
    let local = root.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    let net = Net::new();
    let public: Vec<String> = PUBLIC.iter().map(|a| format!("\"{a}/24\"")).collect();
    let mut nodes = three_nodes(root.path(), &net, &public, "0.0.0.0:445");
    for n in nodes.iter_mut() {
        n.spawn();
    }
    for n in &nodes {
        n.wait_serving(0);
    }
    public_addresses_move(&net, &local, &mut nodes);
}

/// Nodes 1-3 in `net`'s namespaces (not started), with `public`
/// addresses (quoted TOML strings) and SMB on `smb_listen`.
fn three_nodes(root: &Path, net: &Net, public: &[String], smb_listen: &str) -> Vec<Node> {
    let secret = root.join("cluster.secret");
    std::fs::write(&secret, [0x5au8; 48]).unwrap();
    let peers: Vec<String> = (1..=3).map(|i| format!("\"{i}@{SUBNET}.1{i}:7446\"")).collect();
    (1..=3u64)
        .map(|id| {
            let dir = root.join(format!("n{id}"));
            std::fs::create_dir_all(&dir).unwrap();
            let data = dir.join("data");
            let admin = format!("{SUBNET}.1{id}:7445");
            let config = dir.join("duetd.toml");
            std::fs::write(
                &config,
                format!(
                    "data_dir = {data:?}\nnode_id = {id}\nexecutors = 1\n[admin]\nlisten = \"{admin}\"\ntls = \"off\"\n\
                     [smb]\nlisten = \"{smb_listen}\"\n[nfs]\nlisten = \"0.0.0.0:2049\"\nportmap = false\n\
                     [cache]\nlog_segment_mib = 8\n\
                     [cluster]\nlisten = \"{SUBNET}.1{id}:7446\"\npeers = [{}]\nsecret_file = {secret:?}\n\
                     public_addresses = [{}]\npublic_interface = \"eth0\"\n",
                    peers.join(", "),
                    public.join(", ")
                ),
            )
            .unwrap();
            Node { id, ns: net.node_ns(id).to_string(), admin, data, config, log: dir.join("duetd.log"), child: None }
        })
        .collect()
}

fn public_addresses_move(net: &Net, local: &Path, nodes: &mut [Node]) {
    let all: Vec<&Node> = nodes.iter().collect();
    let t = wait_table("one address per node", &nodes[0], &all, &net, |t| {
        let mut held: Vec<u64> = t.iter().flatten().copied().collect();
        held.sort_unstable();
        held == [1, 2, 3]
    });
    eprintln!("public addresses at start: {t:?}");
    for n in &nodes[1..] {
        assert_eq!(table(n).as_deref(), Some(&t[..]), "every node reports the same table");
    }
    let human = String::from_utf8_lossy(&nodes[1].ctl(&["cluster", "status"]).stdout).into_owned();
    assert!(human.contains("PUBLIC ADDRESS") && human.contains("10.213.0.100/24"), "{human}");

    let o = nodes[0].ctl(&["user", "add", "bench", "--password", "benchpw"]);
    assert!(o.status.success(), "user add: {o:?}");
    // Files written through each public address.
    let files: Vec<(String, Vec<u8>)> = (0..3).map(|i| (format!("f{i}"), random_bytes(100_000 + 7 * i))).collect();
    let deadline = Instant::now() + WAIT;
    for ((name, bytes), ip) in files.iter().zip(PUBLIC) {
        std::fs::write(local.join(name), bytes).unwrap();
        while let Err(e) = smbclient(&net, ip, &local, &format!("put {name}")) {
            assert!(Instant::now() < deadline, "put {name} via {ip}: {e}");
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    for ((name, bytes), ip) in files.iter().zip(PUBLIC.iter().cycle().skip(1)) {
        check_file(&net, ip, &local, name, bytes);
    }

    // The holder of .100 loses power: off the network first, then killed.
    let gone = t[0].unwrap();
    let old_mac = net.mac(net.node_ns(gone));
    assert_eq!(net.client_neighbour(PUBLIC[0]).as_deref(), Some(old_mac.as_str()), "the client reached .100 at node {gone}");
    let cut = Instant::now();
    net.link(gone, false);
    nodes[gone as usize - 1].kill9();
    let rest: Vec<&Node> = nodes.iter().filter(|n| n.id != gone).collect();
    let t2 = wait_table("the address moves to a survivor", rest[0], &rest, &net, |t| {
        t.iter().all(|h| h.is_some_and(|h| h != gone))
    });
    let moved = cut.elapsed();
    let to = t2[0].unwrap();
    eprintln!("public addresses after node {gone} died: {t2:?}; .100 on node {to} after {moved:?}");
    // The gratuitous ARP: the client's entry for .100 now names the survivor.
    let new_mac = net.mac(net.node_ns(to));
    let deadline = Instant::now() + Duration::from_secs(5);
    while net.client_neighbour(PUBLIC[0]).as_deref() != Some(new_mac.as_str()) {
        assert!(
            Instant::now() < deadline,
            "the client's neighbour entry for .100 is {:?}, not node {to}'s {new_mac} (no gratuitous ARP?)",
            net.client_neighbour(PUBLIC[0])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The same address serves everything, old and new.
    let later = ("after".to_string(), random_bytes(300_000));
    std::fs::write(local.join(&later.0), &later.1).unwrap();
    let deadline = Instant::now() + WAIT;
    while let Err(e) = smbclient(&net, PUBLIC[0], &local, "put after") {
        assert!(Instant::now() < deadline, "put via .100 after the move: {e}");
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!("smbclient wrote through .100 again {:?} after the cut", cut.elapsed());
    for (name, bytes) in files.iter().chain([&later]) {
        check_file(&net, PUBLIC[0], &local, name, bytes);
    }

    // It comes back: its stale address goes at start, and it gets one again.
    net.link(gone, true);
    let n = &mut nodes[gone as usize - 1];
    let before = n.log_text().matches("duetd is serving").count();
    n.spawn();
    n.wait_serving(before);
    let text = n.log_text();
    assert!(text.contains("left on eth0 by an earlier run: removed"), "the stale address is removed at start:\n{text}");
    let all: Vec<&Node> = nodes.iter().collect();
    let t3 = wait_table("one address per node again", &nodes[(gone % 3) as usize], &all, &net, |t| {
        let mut held: Vec<u64> = t.iter().flatten().copied().collect();
        held.sort_unstable();
        held == [1, 2, 3]
    });
    eprintln!("public addresses once node {gone} is back: {t3:?}");
    for (ip, h) in PUBLIC.iter().zip(&t3) {
        let on: Vec<u64> = nodes.iter().filter(|m| net.addresses(&m.ns).contains(&ip.to_string())).map(|m| m.id).collect();
        assert_eq!(on, vec![h.unwrap()], "{ip} is on exactly its holder");
    }
    for ((name, bytes), ip) in files.iter().chain([&later]).zip(PUBLIC.iter().cycle()) {
        check_file(&net, ip, &local, name, bytes);
    }
    for n in nodes.iter() {
        let text = n.log_text();
        assert!(!text.contains("panicked"), "node {}:\n{text}", n.id);
        assert!(!text.contains("cannot add public address"), "node {}:\n{text}", n.id);
    }
}

/// Who holds the IPv6 public address, as `n` reports it.
fn holder6(n: &Node) -> Option<u64> {
    let s = n.status()?;
    s["public_addresses"]
        .as_array()?
        .iter()
        .find(|r| r["address"].as_str().is_some_and(|a| a.starts_with(&format!("{PUBLIC6}/"))))
        .and_then(|r| r["node"].as_u64())
}

/// Waits until the IPv6 address is on node `want(holder)`'s interface
/// only, as `n` reports; the holder.
fn wait_holder6(what: &str, n: &Node, nodes: &[&Node], net: &Net, want: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(h) = holder6(n).filter(|h| want(*h)) {
            let on: Vec<u64> =
                nodes.iter().filter(|m| net.addresses_of(&m.ns, "inet6").contains(&PUBLIC6.to_string())).map(|m| m.id).collect();
            if on == [h] {
                return h;
            }
        }
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}; node {} reports {:?}; log:\n{}", n.id, holder6(n), n.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The same for an IPv6 public address (issue 12: "IPv6 addresses"): three
/// nodes in namespaces serving SMB on `[::]:445`; smbclient writes through
/// the address; its holder loses power; a survivor adds it (no duplicate
/// address detection wait) and announces it with an unsolicited neighbour
/// advertisement: the client's neighbour entry changes to the survivor's
/// MAC address without the client asking, and the same address serves the
/// file back byte-exact.
#[test]
fn ipv6_public_address_moves_with_a_neighbour_advertisement() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test makes network namespaces: run it as root (CI does)");
    let root = tempfile::tempdir().unwrap();
    let local = root.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    let net = Net::new();
    let mut nodes = three_nodes(root.path(), &net, &[format!("\"{PUBLIC6}/64\"")], "[::]:445");
    for n in nodes.iter_mut() {
        n.spawn();
    }
    for n in &nodes {
        n.wait_serving(0);
    }
    let all: Vec<&Node> = nodes.iter().collect();
    let first = wait_holder6("the IPv6 address is held", &nodes[0], &all, &net, |_| true);
    let human = String::from_utf8_lossy(&nodes[1].ctl(&["cluster", "status"]).stdout).into_owned();
    assert!(human.contains(&format!("{PUBLIC6}/64")), "{human}");
    let o = nodes[0].ctl(&["user", "add", "bench", "--password", "benchpw"]);
    assert!(o.status.success(), "user add: {o:?}");
    let bytes = random_bytes(200_000);
    std::fs::write(local.join("v6"), &bytes).unwrap();
    let deadline = Instant::now() + WAIT;
    while let Err(e) = smbclient(&net, PUBLIC6, &local, "put v6") {
        assert!(Instant::now() < deadline, "put via {PUBLIC6}: {e}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let old_mac = net.mac(net.node_ns(first));
    assert_eq!(net.client_neighbour(PUBLIC6).as_deref(), Some(old_mac.as_str()), "the client reached {PUBLIC6} at node {first}");

    let cut = Instant::now();
    net.link(first, false);
    nodes[first as usize - 1].kill9();
    let rest: Vec<&Node> = nodes.iter().filter(|n| n.id != first).collect();
    let to = wait_holder6("the IPv6 address moves to a survivor", rest[0], &rest, &net, |h| h != first);
    eprintln!("{PUBLIC6} moved from node {first} to node {to} in {:?}", cut.elapsed());
    let new_mac = net.mac(net.node_ns(to));
    let deadline = Instant::now() + Duration::from_secs(5);
    while net.client_neighbour(PUBLIC6).as_deref() != Some(new_mac.as_str()) {
        assert!(
            Instant::now() < deadline,
            "the client's neighbour entry for {PUBLIC6} is {:?}, not node {to}'s {new_mac} (no neighbour advertisement?)",
            net.client_neighbour(PUBLIC6)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("the client's neighbour entry named node {to} {:?} after the cut", cut.elapsed());
    let deadline = Instant::now() + WAIT;
    loop {
        let back = local.join("back-v6");
        let _ = std::fs::remove_file(&back);
        match smbclient(&net, PUBLIC6, &local, &format!("get v6 {}", back.display())) {
            Ok(_) => {
                assert!(std::fs::read(&back).unwrap() == bytes, "v6 via {PUBLIC6} after the move: different bytes");
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "get via {PUBLIC6} after the move: {e}"),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!("smbclient read back through {PUBLIC6} {:?} after the cut", cut.elapsed());
    for n in &nodes {
        let text = n.log_text();
        assert!(!text.contains("panicked"), "node {}:\n{text}", n.id);
        assert!(!text.contains("cannot announce"), "node {}:\n{text}", n.id);
    }
}
