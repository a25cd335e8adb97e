//! `[cluster]` against the real duetd binary: every bad configuration is
//! refused at start with exit status 2 and the key named (a multi-node
//! list without `secret_file`; a secret file that is missing, unreadable
//! or short; bad peers), while a valid multi-node configuration passes
//! `--check-config`. Then
//! `duetctl cluster status` against a running single node: the figures
//! are the node's raft state (leader, term, voters, applied index) and
//! move as raft does.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{duetctl, free_port, Daemon};

/// Runs duetd on `config_text` (it must be refused), returning its exit
/// status and stderr. A duetd that starts anyway is killed and fails the
/// test.
fn refused(dir: &Path, name: &str, config_text: &str, extra: &[&str]) -> (Option<i32>, String) {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, config_text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_duetd"))
        .args(["--config", config.to_str().unwrap()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name}: duetd did not exit: the configuration was not refused");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.code(), err)
}

/// The head of a configuration on free ports of 127.0.0.1 (admin, SMB,
/// NFS), data in `dir/<name>`, before any table of its own.
fn base(dir: &Path, name: &str, node_id: u64) -> String {
    let data = dir.join(name);
    format!(
        "data_dir = {data:?}\nnode_id = {node_id}\nexecutors = 1\n[admin]\nlisten = \"127.0.0.1:{}\"\n\
         [smb]\nlisten = \"127.0.0.1:{}\"\n[nfs]\nlisten = \"127.0.0.1:{}\"\nportmap = false\n",
        free_port(),
        free_port(),
        free_port()
    )
}

fn assert_refused(dir: &Path, name: &str, text: &str, key: &str, words: &[&str]) {
    for extra in [&[][..], &["--check-config"][..]] {
        let (code, err) = refused(dir, name, text, extra);
        assert_eq!(code, Some(2), "{name} {extra:?}: exit status; stderr: {err}");
        assert!(err.contains(&format!("duetd: {key}: ")), "{name} {extra:?}: the key {key} is named: {err}");
        for w in words {
            assert!(err.contains(w), "{name} {extra:?}: {w:?} missing from: {err}");
        }
        assert!(!dir.join(name).exists(), "{name}: nothing was created in the data directory before refusing");
    }
}

#[test]
fn bad_cluster_configurations_are_refused_with_the_key_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let good = dir.join("good.secret");
    std::fs::write(&good, b"0123456789abcdef0123456789abcdef").unwrap();
    let short = dir.join("short.secret");
    std::fs::write(&short, b"0123456789abcdef0123456789abcde").unwrap(); // 31 bytes
    let three = r#"peers = ["1@127.0.0.11:7446", "2@127.0.0.12:7446", "3@127.0.0.13:7446"]"#;

    // More than one node and no secret.
    let text = format!("{}[cluster]\n{three}\n", base(dir, "nosecret", 1));
    assert_refused(dir, "nosecret", &text, "cluster.secret_file", &["3 nodes needs a secret_file"]);
    // A secret file that is missing, unreadable (a directory: this test
    // may run as root, who reads any mode) or too short; for a single
    // node too.
    for (name, file, words) in [
        ("missing", dir.join("nothing-here"), &["cannot read", "nothing-here"][..]),
        ("unreadable", dir.to_path_buf(), &["cannot read"][..]),
        ("short", short.clone(), &["31 bytes", "at least 32"][..]),
    ] {
        let text = format!("{}[cluster]\n{three}\nsecret_file = {file:?}\n", base(dir, name, 1));
        assert_refused(dir, name, &text, "cluster.secret_file", words);
        let text = format!("{}[cluster]\nsecret_file = {file:?}\n", base(dir, &format!("{name}1"), 1));
        assert_refused(dir, &format!("{name}1"), &text, "cluster.secret_file", words);
    }
    // Bad peers.
    for (name, node_id, peers, words) in [
        ("notamong", 4, three, &["node_id 4 is not among", "1, 2, 3"][..]),
        ("dupid", 1, r#"peers = ["1@127.0.0.11:7446", "1@127.0.0.12:7446"]"#, &["id 1 is listed twice"][..]),
        ("dupaddr", 1, r#"peers = ["1@127.0.0.11:7446", "2@127.0.0.11:7446"]"#, &["127.0.0.11:7446 is listed twice"][..]),
        ("zero", 1, r#"peers = ["0@127.0.0.11:7446", "1@127.0.0.12:7446"]"#, &["ids start at 1"][..]),
        ("noport", 1, r#"peers = ["1@127.0.0.11"]"#, &["is not an address:port"][..]),
        ("noid", 1, r#"peers = ["127.0.0.11:7446"]"#, &["ID@ADDRESS:PORT"][..]),
    ] {
        let text = format!("{}[cluster]\n{peers}\nsecret_file = {good:?}\n", base(dir, name, node_id));
        assert_refused(dir, name, &text, "cluster.peers", words);
    }
    let text = format!("{}[cluster]\nlisten = \"7446\"\n", base(dir, "listen", 1));
    assert_refused(dir, "listen", &text, "cluster.listen", &["not an address:port"]);
    // A valid three-node configuration and its one-node form are valid
    // (appliance/tests/cluster_three.rs runs three).
    for (name, peers) in [("three", three), ("one", r#"peers = ["2@127.0.0.12:7446"]"#)] {
        let text = format!("{}[cluster]\n{peers}\nsecret_file = {good:?}\n", base(dir, name, 2));
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, text).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_duetd"))
            .args(["--config", config.to_str().unwrap(), "--check-config"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// A running duetd with this `node_id` and these extra tables (the
/// common helper's configuration otherwise).
fn start_node(dir: &Path, node_id: u64, tables: &str) -> Daemon {
    Daemon::start_top(dir, &format!("node_id = {node_id}"), "", &format!("portmap = false\n{tables}"))
}

/// `duetctl --json cluster status`.
fn cluster(n: &Daemon) -> serde_json::Value {
    serde_json::from_str(&n.ok(&["cluster", "status", "--json"])).unwrap()
}

/// `duetctl --json status`.
fn status(n: &Daemon) -> serde_json::Value {
    serde_json::from_str(&n.ok(&["status", "--json"])).unwrap()
}

fn applied(c: &serde_json::Value) -> u64 {
    c["nodes"][0]["applied"].as_u64().unwrap()
}

#[test]
fn cluster_status_reports_the_single_nodes_raft_state() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("cluster.secret");
    std::fs::write(&secret, [0x5au8; 48]).unwrap();
    let tables = format!("[cluster]\npeers = [\"3@127.0.0.13:7446\"]\nsecret_file = {secret:?}\n");
    let mut n = start_node(tmp.path(), 3, &tables);

    let c = cluster(&n);
    // The fields the issue names, and each node's destage progress and
    // queue (session 45), and only those.
    let sorted_keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(sorted_keys(&c), ["leader", "nodes", "term", "voters"], "{c}");
    assert_eq!(sorted_keys(&c["nodes"][0]), ["addr", "applied", "destage_queue", "destaged_upto", "healthy", "id"], "{c}");
    assert_eq!(c["leader"], 3, "{c}");
    assert_eq!(c["voters"], serde_json::json!([3]), "{c}");
    assert_eq!(c["nodes"].as_array().unwrap().len(), 1, "{c}");
    assert_eq!(c["nodes"][0]["id"], 3);
    assert_eq!(c["nodes"][0]["addr"], "127.0.0.13:7446", "this node's own peers entry");
    assert_eq!(c["nodes"][0]["healthy"], true);
    let term = c["term"].as_u64().unwrap();
    assert!(term >= 1, "{c}");
    // The same raft state as /v1/status reports.
    let s = status(&n);
    assert_eq!(s["raft"]["term"].as_u64(), Some(term));
    assert_eq!(s["raft"]["voters"], serde_json::json!([3]));
    assert!(s["raft"]["applied_index"].as_u64().unwrap() >= applied(&c));

    // Every admin change is one raft entry: the applied index follows.
    let before = applied(&cluster(&n));
    for i in 0..5 {
        n.ok(&["share", "add", &format!("s{i}"), "--path", &format!("/s{i}")]);
    }
    let after = cluster(&n);
    assert!(applied(&after) >= before + 5, "5 changes applied: {before} -> {after}");
    assert_eq!(after["term"].as_u64(), Some(term), "no election on a single node");
    assert_eq!(after["leader"], 3);
    // Reads propose nothing.
    let a = applied(&after);
    n.ok(&["share", "list"]);
    n.ok(&["status"]);
    assert_eq!(applied(&cluster(&n)), a, "reads make no raft entry");

    // The human table.
    let text = n.ok(&["cluster", "status"]);
    assert!(text.starts_with(&format!("leader: 3\nterm:   {term}\nvoters: [3]\n\n")), "{text}");
    let rows: Vec<Vec<&str>> = text.lines().skip(4).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["ID", "ADDRESS", "ROLE", "APPLIED", "TO", "DESTAGE", "HEALTHY"], "{text}");
    assert_eq!(rows[1], ["3", "127.0.0.13:7446", "leader", &a.to_string(), "0", "yes"], "{text}");

    // A restart: the node campaigns again, in a new term, and applies that
    // term's empty entry; everything applied before is still applied.
    n.restart();
    let r = cluster(&n);
    assert!(r["term"].as_u64().unwrap() > term, "{r}");
    assert!(applied(&r) > a, "{r}");
    assert_eq!((r["leader"].clone(), r["voters"].clone()), (serde_json::json!(3), serde_json::json!([3])));
    assert!(n.ok(&["share", "list"]).contains("s4"));
}

#[test]
fn cluster_status_of_a_node_without_peers_and_of_a_failed_store() {
    let tmp = tempfile::tempdir().unwrap();
    let n = start_node(tmp.path(), 1, "[testing]\nfault_injection = true\n");
    let c = cluster(&n);
    assert_eq!(c["leader"], 1, "{c}");
    assert_eq!(c["voters"], serde_json::json!([1]));
    assert_eq!(c["nodes"][0]["addr"], "0.0.0.0:7446", "[cluster] listen's default");
    // Nothing listens on the cluster port: a single node makes no network
    // traffic (the transport runs only with several voters).
    let mut listeners: Vec<String> = status(&n)["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["protocol"].as_str().unwrap().to_string())
        .collect();
    listeners.sort();
    assert_eq!(listeners, ["admin", "nfs", "smb"]);
    // (":7446", not "7446": a log timestamp's microseconds may hold the
    // digits, which failed a run in session 32.)
    assert!(!n.log_text().contains(":7446"), "{}", n.log_text());

    // The metadata volume fails: the node is unhealthy, and cluster status
    // says so and exits 7.
    n.ok(&["fault", "meta-sync"]);
    let o = n.ctl(&["share", "add", "x", "--path", "/x"]);
    assert!(!o.status.success(), "the change whose raft write fails is refused");
    let o = n.ctl(&["cluster", "status", "--json"]);
    assert_eq!(o.status.code(), Some(7), "{}", String::from_utf8_lossy(&o.stderr));
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["nodes"][0]["healthy"], false, "{c}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("duetctl: unhealthy: node 1 (0.0.0.0:7446) is unhealthy"));
    let o = n.ctl(&["cluster", "status"]);
    assert_eq!(o.status.code(), Some(7));
    let text = String::from_utf8_lossy(&o.stdout);
    let row: Vec<&str> = text.lines().last().unwrap().split_whitespace().collect();
    assert_eq!((row[0], row[1], row[5]), ("1", "0.0.0.0:7446", "no"), "{text}");
    assert!(row[4].parse::<u64>().is_ok(), "TO DESTAGE: {text}");
}

#[test]
fn cluster_status_of_an_unreachable_daemon_is_exit_6() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("admin.token"), "t\n").unwrap();
    let port = free_port(); // bound and released: nobody listens there
    let o = Command::new(duetctl())
        .args(["--addr", &format!("127.0.0.1:{port}"), "--data-dir", tmp.path().to_str().unwrap(), "cluster", "status"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(6), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot connect to duetd"));
}
