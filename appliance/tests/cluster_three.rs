//! Three real duetd processes form a raft group over the cluster
//! transport (appliance/src/peers.rs): on 127.0.0.11, .12 and .13, the
//! same cluster port on each, one secret file. They elect one leader;
//! an admin change made on the leader is seen on a follower, and one
//! made on a follower is forwarded to the leader and committed; the leader is SIGKILLed and the
//! other two elect a new one in a higher term; the killed node restarts,
//! rejoins as a follower and catches up; with both followers dead, a
//! change on the leader is refused within a bound and the leader steps
//! down. A fourth process with another
//! secret, posing as a member, is refused and logged with its address,
//! and the group is unchanged; so is a connection that proves the secret
//! and then sends a frame with a wrong tag, a raft message that does not
//! decode, or one that claims another sender: each is dropped and logged;
//! a SIGSTOPped follower does not stop the other two and catches up; a
//! follower down while the others move on and restart catches up from the
//! raft log they reloaded.
//!
//! Every wait is bounded (a poll with a deadline); nothing sleeps as an
//! assertion.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{free_port, Daemon};
use duet_cluster::peer_wire::{FrameKind, Handshake, HandshakeStep, Session};
use serde_json::Value;

/// How long a group may take to elect (raft: 1 to 2 s of ticks, plus
/// connecting) or a node to catch up.
const WAIT: Duration = Duration::from_secs(20);

/// A port free on 127.0.0.11 to .14 (the nodes share it).
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

fn peers(port: u16, ids: &[(u64, &str)]) -> String {
    let list: Vec<String> = ids.iter().map(|(id, host)| format!("\"{id}@{host}:{port}\"")).collect();
    format!("[{}]", list.join(", "))
}

/// Starts node `id` at `host:port` with `peers` and `secret` (returns at
/// once; see [`Daemon::spawn_cluster_node`]).
fn spawn_node(root: &Path, id: u64, host: &str, port: u16, peers: &str, secret: &Path) -> Daemon {
    let dir = root.join(format!("n{id}-{host}"));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let admin = format!("127.0.0.1:{}", free_port());
    let text = format!(
        "data_dir = {data:?}\nnode_id = {id}\nexecutors = 1\n[admin]\nlisten = \"{admin}\"\n\
         [smb]\nlisten = \"127.0.0.1:{}\"\n[nfs]\nlisten = \"127.0.0.1:{}\"\nportmap = false\n\
         [cluster]\nlisten = \"{host}:{port}\"\npeers = {peers}\nsecret_file = {secret:?}\n",
        free_port(),
        free_port()
    );
    Daemon::spawn_cluster_node(&dir, &admin, &data, &text)
}

fn write_secret(root: &Path, name: &str, byte: u8) -> PathBuf {
    let p = root.join(name);
    std::fs::write(&p, [byte; 48]).unwrap();
    p
}

/// `duetctl cluster status --json` (exit 0, or 7 while a node is
/// unhealthy or there is no leader: the JSON is printed either way).
fn status(n: &Daemon) -> Value {
    let o = n.ctl(&["cluster", "status", "--json"]);
    assert!(
        matches!(o.status.code(), Some(0) | Some(7)),
        "duetctl cluster status: {:?} {}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// This node's own entry of `nodes`.
fn own(s: &Value, id: u64) -> &Value {
    s["nodes"].as_array().unwrap().iter().find(|n| n["id"] == id).unwrap()
}

/// Polls until `f` holds of every node's status (returning them), or
/// fails after [`WAIT`] naming `what` and the last statuses.
fn wait_for(nodes: &[&Daemon], what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let s: Vec<Value> = nodes.iter().map(|n| status(n)).collect();
        if f(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}; statuses: {s:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The group agrees: one leader (among `ids`), one term, voters [1,2,3],
/// and every node's applied index equal.
fn agreed(s: &[Value], ids: &[u64]) -> bool {
    let l = &s[0]["leader"];
    let applied: Vec<u64> = s.iter().zip(ids).map(|(v, id)| own(v, *id)["applied"].as_u64().unwrap()).collect();
    l.as_u64().is_some_and(|l| ids.contains(&l))
        && s.iter().all(|v| v["leader"] == *l && v["term"] == s[0]["term"] && v["voters"] == serde_json::json!([1, 2, 3]))
        && applied.iter().all(|a| *a == applied[0])
}

/// Starts the three nodes and waits until they agree on a leader.
fn start_three(root: &Path, port: u16, secret: &Path) -> (Vec<Daemon>, Vec<Value>) {
    let list = peers(port, &[(1, "127.0.0.11"), (2, "127.0.0.12"), (3, "127.0.0.13")]);
    let mut nodes: Vec<Daemon> = [(1, "127.0.0.11"), (2, "127.0.0.12"), (3, "127.0.0.13")]
        .iter()
        .map(|(id, host)| spawn_node(root, *id, host, port, &list, secret))
        .collect();
    for n in nodes.iter_mut() {
        n.wait_started(0);
    }
    let refs: Vec<&Daemon> = nodes.iter().collect();
    let s = wait_for(&refs, "three nodes agree on a leader", |s| agreed(s, &[1, 2, 3]));
    (nodes, s)
}

#[test]
fn three_nodes_elect_replicate_fail_over_and_rejoin() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let port = cluster_port();
    let secret = write_secret(root, "cluster.secret", 0x5a);
    let (mut nodes, s) = start_three(root, port, &secret);

    // (a) One leader, one term, three voters; every node lists all three.
    let leader = s[0]["leader"].as_u64().unwrap();
    for (i, v) in s.iter().enumerate() {
        let ids: Vec<u64> = v["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, [1, 2, 3], "node {}: {v}", i + 1);
        let addr = own(v, i as u64 + 1)["addr"].as_str().unwrap().to_string();
        assert_eq!(addr, format!("127.0.0.1{}:{port}", i + 1));
    }
    let li = leader as usize - 1;
    // The leader sees its peers' progress and connections.
    let lv = wait_for(&[&nodes[li]], "the leader sees both followers connected and caught up", |s| {
        let me = own(&s[0], leader)["applied"].as_u64().unwrap();
        s[0]["nodes"].as_array().unwrap().iter().all(|n| n["healthy"] == true && n["applied"].as_u64() == Some(me))
    });
    assert!(own(&lv[0], leader)["applied"].as_u64().unwrap() >= 2, "the init entry and the term's entry: {lv:?}");
    // Every node serves SMB and NFS (batches are forwarded to the leader;
    // tests/cluster_clients.rs), besides the admin API and the cluster port.
    for n in &nodes {
        let st: Value = serde_json::from_str(&n.ok(&["status", "--json"])).unwrap();
        let mut protos: Vec<String> =
            st["listeners"].as_array().unwrap().iter().map(|l| l["protocol"].as_str().unwrap().to_string()).collect();
        protos.sort();
        assert_eq!(protos, ["admin", "cluster", "nfs", "smb"], "{st}");
    }

    // (d) A share added on the leader is the cluster's: a follower lists it.
    let fi = (li + 1) % 3;
    nodes[li].ok(&["share", "add", "replicated", "--path", "/replicated"]);
    let deadline = Instant::now() + WAIT;
    while !nodes[fi].ok(&["share", "list"]).contains("replicated") {
        assert!(Instant::now() < deadline, "the share did not reach node {}", fi + 1);
        std::thread::sleep(Duration::from_millis(100));
    }
    // A change on a follower is forwarded to the leader and committed
    // there (tests/cluster_admin.rs tests this further).
    let s = wait_for(&[&nodes[0], &nodes[1], &nodes[2]], "agreement", |s| agreed(s, &[1, 2, 3]));
    let leader = s[0]["leader"].as_u64().unwrap();
    let (li, fi) = (leader as usize - 1, leader as usize % 3);
    nodes[fi].ok(&["share", "add", "elsewhere", "--path", "/elsewhere"]);
    let leader = status(&nodes[fi])["leader"].as_u64().unwrap();
    let li = if leader as usize - 1 == li { li } else { leader as usize - 1 };
    let deadline = Instant::now() + WAIT;
    while !nodes[li].ok(&["share", "list"]).contains("elsewhere") {
        assert!(Instant::now() < deadline, "a change through a follower did not reach the leader");
        std::thread::sleep(Duration::from_millis(100));
    }
    let term = status(&nodes[li])["term"].as_u64().unwrap();

    // (b) SIGKILL the leader: the other two elect another, in a later term.
    nodes[li].kill9();
    let rest: Vec<usize> = (0..3).filter(|&i| i != li).collect();
    let ids: Vec<u64> = rest.iter().map(|&i| i as u64 + 1).collect();
    let survivors: Vec<&Daemon> = rest.iter().map(|&i| &nodes[i]).collect();
    let t0 = Instant::now();
    let s2 = wait_for(&survivors, "the survivors elect a new leader", |s| {
        let l = &s[0]["leader"];
        l.as_u64().is_some_and(|l| l != leader && ids.contains(&l))
            && s.iter().all(|v| v["leader"] == *l && v["term"] == s[0]["term"])
    });
    let elected_in = t0.elapsed();
    let leader2 = s2[0]["leader"].as_u64().unwrap();
    let term2 = s2[0]["term"].as_u64().unwrap();
    assert!(term2 > term, "term {term} -> {term2}");
    eprintln!("new leader {leader2} (term {term2}) {elected_in:?} after the kill of {leader} (term {term})");
    let l2 = leader2 as usize - 1;
    // The new leader reports the dead node unhealthy.
    let v = status(&nodes[l2]);
    assert_eq!(v["nodes"][li]["healthy"], false, "{v}");
    // A change on the new leader commits with two of three voters.
    nodes[l2].ok(&["share", "add", "after-kill", "--path", "/after-kill"]);

    // The killed node restarts: a follower of the new leader, caught up.
    nodes[li].start_again();
    let all: Vec<&Daemon> = nodes.iter().collect();
    let s3 = wait_for(&all, "the restarted node rejoins and catches up", |s| agreed(s, &[1, 2, 3]));
    assert_eq!(s3[0]["leader"].as_u64(), Some(leader2), "the restarted node did not take over: {s3:?}");
    assert_eq!(s3[li]["term"].as_u64(), Some(term2), "{s3:?}");
    assert!(nodes[li].ok(&["share", "list"]).contains("after-kill"), "caught up through the log");

    // (c) Leadership moves on request to the restarted node; a non-voter
    // is refused. Asked of a follower (the restarted node itself), the
    // request is forwarded to the leader, which moves it.
    let target = li as u64 + 1;
    let o = nodes[li].ctl(&["cluster", "transfer-leader", "9"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("node 9 is not a voter"), "{o:?}");
    let t0 = Instant::now();
    let o = nodes[li].ctl(&["cluster", "transfer-leader", &target.to_string()]);
    let moved_in = t0.elapsed();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        matches!(o.status.code(), Some(0) | Some(7)) && text.contains(&format!("node {target} is the leader now")),
        "{o:?}"
    );
    let s4 = wait_for(&all, "every node sees the new leader", |s| {
        agreed(s, &[1, 2, 3]) && s[0]["leader"].as_u64() == Some(target)
    });
    assert!(s4[0]["term"].as_u64().unwrap() > term2, "a transfer is an election in a later term: {s4:?}");
    eprintln!("leadership moved from {leader2} to {target} in {moved_in:?}");
    nodes[li].ok(&["share", "add", "after-transfer", "--path", "/after-transfer"]);
    let l2 = li;

    // Both followers die: the leader alone has no majority. A change there
    // is refused within a bound (never hangs), and the leader steps down
    // (check quorum): then it answers that no leader is elected.
    for i in (0..3).filter(|&i| i != l2) {
        nodes[i].kill9();
    }
    let deadline = Instant::now() + WAIT + Duration::from_secs(15);
    loop {
        let t = Instant::now();
        let o = nodes[l2].ctl(&["share", "add", "alone", "--path", "/alone"]);
        let took = t.elapsed();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success(), "one voter of three committed a change");
        assert!(took < Duration::from_secs(9), "a change waited {took:?}: {err}");
        if err.contains("no leader is elected yet") || err.contains("the cluster has no leader") {
            break;
        }
        assert!(err.contains("not committed within 5 s") || err.contains("not the raft leader"), "{err}");
        assert!(Instant::now() < deadline, "the lone leader did not step down: {err}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let v = status(&nodes[l2]);
    assert_eq!(v["leader"], Value::Null, "{v}");
    assert!(!nodes[l2].ok(&["share", "list"]).contains("alone"));
}

#[test]
fn a_node_with_another_secret_is_refused_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let port = cluster_port();
    let secret = write_secret(root, "cluster.secret", 0x33);
    let (nodes, s) = start_three(root, port, &secret);
    let (leader, term) = (s[0]["leader"].as_u64().unwrap(), s[0]["term"].as_u64().unwrap());
    let nodes = nodes;

    // (c) A fourth process poses as node 3 from 127.0.0.14 with another
    // secret; nodes 1 and 2 refuse it and log its address.
    let wrong = write_secret(root, "wrong.secret", 0x34);
    let list = peers(port, &[(1, "127.0.0.11"), (2, "127.0.0.12"), (3, "127.0.0.14")]);
    let mut impostor = spawn_node(root, 3, "127.0.0.14", port, &list, &wrong);
    let deadline = Instant::now() + WAIT;
    let refused = |n: &Daemon| {
        n.log_text()
            .lines()
            .any(|l| l.contains("refused a peer connection from 127.0.0.14:") && l.contains("proof of the cluster secret is wrong"))
    };
    while !(refused(&nodes[0]) && refused(&nodes[1])) {
        assert!(impostor.alive(), "the impostor exited: {}", impostor.log_text());
        assert!(
            Instant::now() < deadline,
            "no refusal logged; node 1:\n{}\nnode 2:\n{}",
            nodes[0].log_text(),
            nodes[1].log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The impostor sees the members' proofs fail too, and never joins.
    let deadline = Instant::now() + WAIT;
    while !impostor.log_text().contains("refused node 1") {
        assert!(Instant::now() < deadline, "impostor's log:\n{}", impostor.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!impostor.log_text().contains("duetd is serving"), "{}", impostor.log_text());
    // The group is unchanged: same leader, same term, all healthy.
    let refs: Vec<&Daemon> = nodes.iter().collect();
    let after = wait_for(&refs, "the group as before", |s| agreed(s, &[1, 2, 3]));
    assert_eq!((after[0]["leader"].as_u64(), after[0]["term"].as_u64()), (Some(leader), Some(term)), "{after:?}");
    let v = status(&nodes[leader as usize - 1]);
    assert!(v["nodes"].as_array().unwrap().iter().all(|n| n["healthy"] == true), "{v}");
    impostor.kill9();

    // A client that holds the secret but sends what raft must never see.
    let target = &nodes[0];
    let addr = format!("127.0.0.11:{port}");
    let cases: [(&str, &dyn Fn(&mut Session) -> Vec<u8>); 3] = [
        ("wrong authentication tag", &|s: &mut Session| {
            let mut f = s.sender.frame(FrameKind::Raft, &[1, 2, 3]).unwrap();
            let last = f.len() - 1;
            f[last] ^= 1;
            f
        }),
        ("undecodable raft message", &|s: &mut Session| s.sender.frame(FrameKind::Raft, &[0xff; 12]).unwrap()),
        ("raft message from node 9 to node 1 on the connection of node 2", &|s: &mut Session| {
            let mut m = duet_cluster::raft_node::RaftMessage::default();
            m.from = 9;
            m.to = 1;
            s.sender.frame(FrameKind::Raft, &protobuf::Message::write_to_bytes(&m).unwrap()).unwrap()
        }),
    ];
    for (i, (words, frame)) in cases.iter().enumerate() {
        let mut sess = raw_session(&addr, &std::fs::read(&secret).unwrap(), 2, 1, i as u8);
        let bytes = frame(&mut sess.1);
        sess.0.write_all(&bytes).unwrap();
        let deadline = Instant::now() + WAIT;
        while target.log_text().matches(words).count() == 0 {
            assert!(Instant::now() < deadline, "{words:?} not logged:\n{}", target.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        // And the connection is closed by the node.
        let mut buf = [0u8; 16];
        sess.0.set_read_timeout(Some(WAIT)).unwrap();
        assert!(matches!(sess.0.read(&mut buf), Ok(0) | Err(_)), "{words}: connection kept");
    }
    let refs: Vec<&Daemon> = nodes.iter().collect();
    let after = wait_for(&refs, "the group as before", |s| agreed(s, &[1, 2, 3]));
    assert_eq!((after[0]["leader"].as_u64(), after[0]["term"].as_u64()), (Some(leader), Some(term)), "{after:?}");

    // A follower stopped (SIGSTOP): the other two commit without it; once
    // continued it catches up, and the leader never changed.
    let li = leader as usize - 1;
    let fi = (li + 1) % 3;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(nodes[fi].child.id() as i32, libc::SIGSTOP) };
    nodes[li].ok(&["share", "add", "while-stopped", "--path", "/while-stopped"]);
    unsafe { libc::kill(nodes[fi].child.id() as i32, libc::SIGCONT) };
    let after = wait_for(&refs, "the stopped follower catches up", |s| agreed(s, &[1, 2, 3]));
    assert_eq!(after[0]["leader"].as_u64(), Some(leader), "{after:?}");
    assert!(nodes[fi].ok(&["share", "list"]).contains("while-stopped"));

    // A follower is down while the group moves on, then both others
    // restart (their raft logs reloaded from RocksDB): the follower, back,
    // catches up from the log they kept (no snapshot is needed).
    let mut nodes = nodes;
    nodes[fi].kill9();
    nodes[li].ok(&["share", "add", "while-down", "--path", "/while-down"]);
    for i in (0..3).filter(|&i| i != fi) {
        nodes[i].kill9();
    }
    for i in (0..3).filter(|&i| i != fi) {
        nodes[i].start_again();
    }
    let two: Vec<&Daemon> = (0..3).filter(|&i| i != fi).map(|i| &nodes[i]).collect();
    let ids: Vec<u64> = (0..3).filter(|&i| i != fi).map(|i| i as u64 + 1).collect();
    wait_for(&two, "the restarted pair elects a leader", |s| {
        s[0]["leader"].as_u64().is_some_and(|l| ids.contains(&l)) && s.iter().all(|v| v["leader"] == s[0]["leader"])
    });
    nodes[fi].start_again();
    let all: Vec<&Daemon> = nodes.iter().collect();
    let s = wait_for(&all, "the follower that was down catches up", |s| agreed(s, &[1, 2, 3]));
    assert_eq!(own(&s[fi], fi as u64 + 1)["healthy"], true, "{s:?}");
    assert!(nodes[fi].ok(&["share", "list"]).contains("while-down"));
    assert!(!nodes[fi].log_text().contains("snapshot"), "{}", nodes[fi].log_text());
}

/// A handshake with the node at `addr` as node `me` (dialling node
/// `peer`), done by hand with the sans-I/O codec.
fn raw_session(addr: &str, secret: &[u8], me: u64, peer: u64, salt: u8) -> (TcpStream, Session) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut nonce = [0x77u8; 32];
    nonce[0] = salt;
    nonce[1] = std::process::id() as u8;
    let mut hs = Handshake::initiator(secret, me, peer, nonce).unwrap();
    stream.write_all(&hs.hello()).unwrap();
    let mut buf = [0u8; 256];
    loop {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the node closed the handshake");
        let mut step = hs.feed(&buf[..n]).unwrap();
        loop {
            match step {
                HandshakeStep::Continue { send } if send.is_empty() => break,
                HandshakeStep::Continue { send } => {
                    stream.write_all(&send).unwrap();
                    step = hs.feed(&[]).unwrap();
                }
                HandshakeStep::Established { send, session } => {
                    stream.write_all(&send).unwrap();
                    return (stream, session);
                }
            }
        }
    }
}
