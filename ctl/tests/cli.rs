//! duetctl against a fake daemon: a thread answering canned responses built
//! with the api crate, recording the requests it got.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use duet_admin_api::*;

struct Fake {
    addr: String,
    requests: mpsc::Receiver<HttpRequest>,
}

impl Fake {
    /// The next request the fake received.
    fn request(&self) -> HttpRequest {
        self.requests
            .recv_timeout(Duration::from_secs(10))
            .expect("the fake daemon got no request")
    }

    fn no_request(&self) {
        assert!(
            self.requests
                .recv_timeout(Duration::from_millis(200))
                .is_err(),
            "duetctl contacted the daemon"
        );
    }
}

/// Answers one connection per response, in order.
fn fake(responses: Vec<Vec<u8>>) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for response in responses {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut parser = RequestParser::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = s.read(&mut buf).unwrap_or(0);
                let parsed = if n == 0 {
                    parser.finish()
                } else {
                    parser.feed(&buf[..n])
                };
                match parsed {
                    Parsed::Incomplete if n > 0 => continue,
                    Parsed::Complete(req) => {
                        let _ = tx.send(req);
                        break;
                    }
                    other => panic!("fake daemon: bad request: {other:?}"),
                }
            }
            s.write_all(&response).unwrap();
        }
    });
    Fake { addr, requests: rx }
}

fn ok(r: AdminResponse) -> Vec<u8> {
    encode_response(&Ok(r))
}

fn err(e: ApiError) -> Vec<u8> {
    encode_response(&Err(e))
}

fn duetctl(args: &[&str], stdin: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_duetctl"));
    for v in [
        "DUET_ADMIN_ADDR",
        "DUET_ADMIN_TOKEN",
        "DUET_DATA_DIR",
        "DUET_ADMIN_PASSWORD",
    ] {
        cmd.env_remove(v);
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    child.wait_with_output().unwrap()
}

/// duetctl with `--addr <fake> --token t0k`.
fn run(fake: &Fake, args: &[&str]) -> Output {
    run_stdin(fake, args, "")
}

fn run_stdin(fake: &Fake, args: &[&str], stdin: &str) -> Output {
    let mut all = vec!["--addr", &fake.addr, "--token", "t0k"];
    all.extend_from_slice(args);
    duetctl(&all, stdin)
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

fn json(req: &HttpRequest) -> serde_json::Value {
    serde_json::from_slice(&req.body).unwrap()
}

fn status_info() -> StatusInfo {
    StatusInfo {
        version: "0.1.0".into(),
        node_id: 7,
        uptime_s: 93_784,
        executors: 4,
        data_dir: "/var/lib/duet".into(),
        listeners: vec![
            ListenerInfo {
                protocol: "smb".into(),
                addr: "0.0.0.0:445".into(),
            },
            ListenerInfo {
                protocol: "nfs".into(),
                addr: "0.0.0.0:2049".into(),
            },
        ],
        raft: RaftInfo {
            term: 3,
            commit_index: 42,
            applied_index: 41,
            voters: vec![7],
        },
        shares: 2,
        users: 1,
        files: 1234,
        metadata_failed: false,
        capacity: Some(CapacityInfo {
            total_bytes: 252 << 30,
            free_bytes: 80 << 30,
            avail_bytes: 79 << 30,
            reserve_bytes: 256 << 20,
        }),
    }
}

#[test]
fn status_human() {
    let f = fake(vec![ok(AdminResponse::Status(status_info()))]);
    let o = run(&f, &["status"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!(req.method, "GET");
    assert_eq!(req.path, "/v1/status");
    assert_eq!(req.header("authorization"), Some("Bearer t0k"));
    assert_eq!(credentials(&req), Some(Credentials::Bearer("t0k".into())));
    let out = stdout(&o);
    assert_eq!(
        out,
        "version:   0.1.0\n\
         node id:   7\n\
         uptime:    1d 2h 3m 4s\n\
         executors: 4\n\
         data dir:  /var/lib/duet\n\
         listeners: smb 0.0.0.0:445\n           \
         nfs 0.0.0.0:2049\n\
         raft:      term 3, commit 42, applied 41, voters [7]\n\
         shares:    2\n\
         users:     1\n\
         files:     1234\n\
         metadata:  ok\n\
         capacity:  252.0 GiB total, 80.0 GiB free, 79.0 GiB available (reserve 256.0 MiB)\n"
    );
}

#[test]
fn status_unhealthy_exits_7() {
    let mut s = status_info();
    s.metadata_failed = true;
    let f = fake(vec![ok(AdminResponse::Status(s.clone())), ok(AdminResponse::Status(s))]);
    let o = run(&f, &["status"]);
    assert_eq!(code(&o), 7, "{}", stderr(&o));
    assert!(stdout(&o).contains("metadata:  FAILED"), "{}", stdout(&o));
    assert!(stderr(&o).contains("duetctl: unhealthy: metadata FAILED"), "{}", stderr(&o));
    // --json too, for health checks that parse the output.
    let o = run(&f, &["--json", "status"]);
    assert_eq!(code(&o), 7);
    assert_eq!(serde_json::from_str::<StatusInfo>(&stdout(&o)).unwrap().metadata_failed, true);
}

#[test]
fn status_json_is_raw() {
    let resp = ok(AdminResponse::Status(status_info()));
    let f = fake(vec![resp]);
    let o = run(&f, &["status", "--json"]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v, serde_json::to_value(status_info()).unwrap());
    assert!(stdout(&o).ends_with('\n'));
}

fn cluster_three() -> ClusterStatus {
    let node = |id: u64, applied: u64, healthy: bool| ClusterNode {
        id,
        addr: format!("127.0.0.1{id}:7446"),
        applied,
        healthy,
        // Node 3 has not reported its destage progress (an older version).
        destaged_upto: (id != 3).then_some(400),
        destage_queue: (id != 3).then_some(id - 1),
    };
    ClusterStatus {
        leader: Some(1),
        term: 3,
        voters: vec![1, 2, 3],
        nodes: vec![node(1, 812, true), node(2, 812, true), node(3, 97, true)],
        receiving_snapshot: None,
        public_addresses: Vec::new(),
    }
}

#[test]
fn cluster_status_human_and_json() {
    let f = fake(vec![ok(AdminResponse::Cluster(cluster_three())), ok(AdminResponse::Cluster(cluster_three()))]);
    let o = run(&f, &["cluster", "status"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!((req.method.as_str(), req.path.as_str()), ("GET", "/v1/cluster"));
    assert_eq!(req.header("authorization"), Some("Bearer t0k"));
    assert_eq!(
        stdout(&o),
        "leader: 1\n\
         term:   3\n\
         voters: [1,2,3]\n\
         \n\
         ID  ADDRESS          ROLE    APPLIED  TO DESTAGE  HEALTHY\n \
         1  127.0.0.11:7446  leader      812           0  yes\n \
         2  127.0.0.12:7446  voter       812           1  yes\n \
         3  127.0.0.13:7446  voter        97           -  yes\n"
    );
    let o = run(&f, &["cluster", "status", "--json"]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"leader": 1, "term": 3, "voters": [1, 2, 3], "nodes": [
            {"id": 1, "addr": "127.0.0.11:7446", "applied": 812, "healthy": true, "destaged_upto": 400, "destage_queue": 0},
            {"id": 2, "addr": "127.0.0.12:7446", "applied": 812, "healthy": true, "destaged_upto": 400, "destage_queue": 1},
            {"id": 3, "addr": "127.0.0.13:7446", "applied": 97, "healthy": true}]})
    );
}

#[test]
fn cluster_status_without_a_leader_or_with_a_sick_node_exits_7() {
    let mut c = cluster_three();
    c.leader = None;
    c.nodes[2].healthy = false;
    let f = fake(vec![ok(AdminResponse::Cluster(c.clone())), ok(AdminResponse::Cluster(c))]);
    let o = run(&f, &["cluster", "status"]);
    assert_eq!(code(&o), 7, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("leader: none"), "{}", stdout(&o));
    assert!(stdout(&o).contains("3  127.0.0.13:7446  voter       97           -  no\n"), "{}", stdout(&o));
    assert!(stderr(&o).contains("duetctl: unhealthy: no leader in term 3"), "{}", stderr(&o));
    assert!(stderr(&o).contains("duetctl: unhealthy: node 3 (127.0.0.13:7446) is unhealthy"), "{}", stderr(&o));
    let o = run(&f, &["--json", "cluster", "status"]);
    assert_eq!(code(&o), 7);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["leader"], serde_json::Value::Null);
    // Membership commands refuse bad arguments before the daemon.
    assert_eq!(code(&duetctl(&["cluster", "add", "4"], "")), 2, "cluster add without an address");
    assert_eq!(code(&duetctl(&["cluster", "add", "4", "no-port"], "")), 2, "cluster add with a bad address");
    assert_eq!(code(&duetctl(&["cluster", "remove", "x"], "")), 2, "cluster remove of a non-number");
}

#[test]
fn cluster_transfer_leader_request_and_output() {
    let mut c = cluster_three();
    c.leader = Some(2);
    c.term = 4;
    let f = fake(vec![ok(AdminResponse::Cluster(c))]);
    let o = run(&f, &["cluster", "transfer-leader", "2"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!((req.method.as_str(), req.path.as_str()), ("POST", "/v1/cluster/transfer-leader"));
    assert_eq!(json(&req), serde_json::json!({"to": 2}));
    assert_eq!(route(&req).unwrap(), AdminRequest::TransferLeader(duet_admin_api::LeaderTransfer { to: 2 }));
    assert!(stdout(&o).starts_with("node 2 is the leader now (term 4)\nleader: 2"), "{}", stdout(&o));
    // Refused before contacting anything: not a number, or node 0.
    assert_eq!(code(&duetctl(&["cluster", "transfer-leader", "two"], "")), 2);
    let o = duetctl(&["--addr", "127.0.0.1:1", "cluster", "transfer-leader", "0"], "");
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("node ids start at 1"), "{}", stderr(&o));
}

#[test]
fn share_add_request_and_output() {
    let mut share = Share::new("media", "/data/media");
    share.protocols = vec![Protocol::Nfs];
    share.read_only = true;
    share.nfs.clients = vec!["10.0.0.0/8".into(), "::1/128".into()];
    share.nfs.root_squash = false;
    share.nfs.append_extension = true;
    let f = fake(vec![ok(AdminResponse::ShareCreated(share.clone()))]);
    let o = run(
        &f,
        &[
            "share",
            "add",
            "media",
            "--path",
            "/data/media",
            "--protocols",
            "nfs",
            "--read-only",
            "--nfs-clients",
            "10.0.0.0/8,::1/128",
            "--no-root-squash",
            "--append-extension",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/shares")
    );
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(json(&req), serde_json::to_value(&share).unwrap());
    assert_eq!(route(&req).unwrap(), AdminRequest::ShareAdd(share));
    assert_eq!(stdout(&o), "added share media at /data/media (nfs)\n");
}

#[test]
fn share_add_defaults() {
    let f = fake(vec![ok(AdminResponse::ShareCreated(Share::new(
        "pub", "/pub",
    )))]);
    let o = run(&f, &["share", "add", "pub", "--path", "/pub", "--guest-ok"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut want = Share::new("pub", "/pub");
    want.guest_ok = true;
    assert_eq!(route(&f.request()).unwrap(), AdminRequest::ShareAdd(want));
}

#[test]
fn bad_cidr_fails_before_contacting_the_daemon() {
    let f = fake(vec![ok(AdminResponse::ShareCreated(Share::new("x", "/x")))]);
    let o = run(
        &f,
        &[
            "share",
            "add",
            "x",
            "--path",
            "/x",
            "--nfs-clients",
            "10.0.0.0/8,300.1.1.1/8",
        ],
    );
    assert_eq!(code(&o), 2);
    let e = stderr(&o);
    assert!(
        e.starts_with("duetctl: invalid CIDR \"300.1.1.1/8\""),
        "{e}"
    );
    f.no_request();
    // Likewise without any credentials available: validation comes first.
    let o = duetctl(
        &[
            "--data-dir",
            "/nonexistent",
            "share",
            "add",
            "x",
            "--path",
            "x/y",
        ],
        "",
    );
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("invalid share path"), "{}", stderr(&o));
}

#[test]
fn share_list_table_and_empty() {
    let mut b = Share::new("backups", "/srv/backups");
    b.protocols = vec![Protocol::Smb];
    b.read_only = true;
    b.nfs.clients = vec!["10.0.0.0/8".into(), "192.168.0.0/16".into()];
    b.durability = duet_admin_api::Durability::Protocol;
    let f = fake(vec![
        ok(AdminResponse::Shares(vec![
            Share::new("public", "/public"),
            b,
        ])),
        ok(AdminResponse::Shares(vec![])),
    ]);
    let o = run(&f, &["share", "list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(f.request().path, "/v1/shares");
    assert_eq!(
        stdout(&o),
        "NAME     PATH          PROTOCOLS  ACCESS  GUEST  DURABILITY  NFS CLIENTS\n\
         public   /public       smb,nfs    rw      no     always      *\n\
         backups  /srv/backups  smb        ro      no     protocol    10.0.0.0/8,192.168.0.0/16\n"
    );
    let o = run(&f, &["share", "ls"]);
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o), "no shares\n");
}

#[test]
fn share_show_and_not_found() {
    let f = fake(vec![
        ok(AdminResponse::Share(Share::new("public", "/public"))),
        err(ApiError::not_found("share nope not found")),
    ]);
    let o = run(&f, &["share", "show", "public"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(f.request().path, "/v1/shares/public");
    assert_eq!(
        stdout(&o),
        "name:                 public\n\
         path:                 /public\n\
         protocols:            smb,nfs\n\
         read only:            no\n\
         guest ok:             no\n\
         nfs clients:          *\n\
         nfs root squash:      yes\n\
         nfs append extension: no\n\
         users:                everyone\n\
         durability:           always\n\
         snapshot schedule:    none\n"
    );
    let o = run(&f, &["share", "show", "nope"]);
    assert_eq!(code(&o), 3, "not found");
    assert_eq!(stderr(&o), "duetctl: share nope not found\n");
    assert!(stdout(&o).is_empty());
}

#[test]
fn share_remove() {
    let f = fake(vec![
        ok(AdminResponse::NoContent),
        ok(AdminResponse::NoContent),
    ]);
    // Without a terminal to ask on and without --yes: refused, nothing sent.
    let o = run(&f, &["share", "remove", "public"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("pass --yes"), "{}", stderr(&o));
    f.no_request();
    let o = run(&f, &["share", "remove", "public", "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("DELETE", "/v1/shares/public")
    );
    assert_eq!(stdout(&o), "removed share public\n");
    let o = run(&f, &["--json", "-y", "share", "rm", "public"]);
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o), "");
}

/// `share remove` on a terminal asks; only "y"/"yes" goes ahead. Runs
/// duetctl under `script(1)` for a real pseudo-terminal.
#[test]
fn share_remove_asks_on_a_terminal() {
    let f = fake(vec![ok(AdminResponse::NoContent)]);
    let bin = env!("CARGO_BIN_EXE_duetctl");
    let ask = |answer: &str| {
        let cmd = format!("{bin} --addr {} --token t0k share remove public", f.addr);
        let mut child = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .env_remove("DUET_ADMIN_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script(1) from util-linux runs duetctl on a pseudo-terminal");
        let mut input = child.stdin.take().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        input.write_all(answer.as_bytes()).unwrap();
        drop(input);
        child.wait_with_output().unwrap()
    };
    let o = ask("n\n");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("remove share public (its files stay)? [y/N]"), "{text}");
    assert!(text.contains("not confirmed"), "{text}");
    f.no_request();
    let o = ask("y\n");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("removed share public"), "{text}");
    assert_eq!(f.request().method, "DELETE");
}

#[test]
fn share_modify_sends_only_the_changes() {
    let mut after = Share::new("media", "/media");
    after.read_only = true;
    after.users = vec!["alice".into()];
    let f = fake(vec![ok(AdminResponse::Share(after.clone())), err(ApiError::not_found("share nope not found"))]);
    let o = run(&f, &["share", "modify", "media", "--read-only", "--users", "alice", "--no-guest-ok"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!((req.method.as_str(), req.path.as_str()), ("PATCH", "/v1/shares/media"));
    assert_eq!(json(&req), serde_json::json!({"read_only": true, "guest_ok": false, "users": ["alice"]}));
    assert!(stdout(&o).starts_with("changed share media\nname:"), "{}", stdout(&o));
    assert!(stdout(&o).contains("read only:            yes"), "{}", stdout(&o));
    let o = run(&f, &["share", "modify", "nope", "--read-write"]);
    assert_eq!(code(&o), 3);
    // Nothing to change, or a bad value: refused before the daemon.
    refused_before_the_daemon(&[
        &["share", "modify", "media"],
        &["share", "modify", "media", "--nfs-clients", "10.0.0.0/40"],
        &["share", "modify", "media", "--protocols", "afp"],
        &["share", "modify", "media", "--read-only", "--read-write"],
    ]);
}

/// Each command line is a usage error (exit 2) and sends no request.
fn refused_before_the_daemon(lines: &[&[&str]]) {
    let g = fake(vec![]);
    for args in lines {
        assert_eq!(code(&run(&g, args)), 2, "{args:?}");
    }
    g.no_request();
}

#[test]
fn user_modify_uid_gid_and_enable() {
    let info = UserInfo { name: "bob".into(), uid: 3000, gid: 300, enabled: false };
    let f = fake(vec![ok(AdminResponse::User(info.clone())), ok(AdminResponse::User(info))]);
    let o = run(&f, &["user", "modify", "bob", "--uid", "3000", "--gid", "300", "--disable"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!((req.method.as_str(), req.path.as_str()), ("PATCH", "/v1/users/bob"));
    assert_eq!(json(&req), serde_json::json!({"uid": 3000, "gid": 300, "enabled": false}));
    assert_eq!(stdout(&o), "changed user bob (uid 3000, gid 300, disabled)\n");
    let o = run(&f, &["user", "modify", "bob", "--enable"]);
    assert_eq!(code(&o), 0);
    assert_eq!(json(&f.request()), serde_json::json!({"enabled": true}));
    refused_before_the_daemon(&[
        &["user", "modify", "bob"],
        &["user", "modify", "bob", "--enable", "--disable"],
        &["user", "modify", "bob", "--uid", "4294967295"],
    ]);
}

#[test]
fn completions_and_man_pages_come_from_the_clap_definitions() {
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef duetctl"), ("fish", "complete -c duetctl")] {
        let o = duetctl(&["completions", shell], "");
        assert_eq!(code(&o), 0, "{shell}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains(marker), "{shell}: {text}");
        for word in ["share", "modify", "completions", "--admin-password-file"] {
            assert!(text.contains(word), "{shell} completion lacks {word}");
        }
    }
    assert_eq!(code(&duetctl(&["completions", "tcsh"], "")), 2);
    let o = duetctl(&["man"], "");
    assert_eq!(code(&o), 0);
    let page = stdout(&o);
    assert!(page.starts_with(".ie") || page.contains(".TH duetctl 1"), "{page}");
    assert!(page.contains("Exit status"), "the exit statuses are in the man page");
    let dir = std::env::temp_dir().join(format!("duetctl-man-{}", std::process::id()));
    let o = duetctl(&["man", "--out", dir.to_str().unwrap()], "");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for page in ["duetctl.1", "duetctl-share.1", "duetctl-share-modify.1", "duetctl-user-modify.1", "duetctl-status.1"] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page}");
    }
    assert!(!dir.join("duetctl-fault.1").exists(), "hidden commands get no page");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn audit_table() {
    let entries = vec![
        AuditEntry {
            time_ns: 1_796_165_139_000_000_000,
            who: "token".into(),
            from: "127.0.0.1:4000".into(),
            action: "ShareRemove(\"x\")".into(),
            outcome: "ok".into(),
        },
        AuditEntry {
            time_ns: 1_796_165_140_000_000_000,
            who: "admin".into(),
            from: "10.0.0.9:5000".into(),
            action: "admin logon".into(),
            outcome: "refused: wrong token, user or password".into(),
        },
    ];
    let f = fake(vec![ok(AdminResponse::Audit(entries.clone())), ok(AdminResponse::Audit(entries))]);
    let o = run(&f, &["audit"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(f.request().path, "/v1/audit");
    assert_eq!(
        stdout(&o),
        "TIME                  WHO    FROM            ACTION            OUTCOME\n\
         2026-12-01T22:45:39Z  token  127.0.0.1:4000  ShareRemove(\"x\")  ok\n\
         2026-12-01T22:45:40Z  admin  10.0.0.9:5000   admin logon       refused: wrong token, user or password\n"
    );
    let o = run(&f, &["audit", "--last", "1"]);
    assert_eq!(stdout(&o).lines().count(), 2);
    assert!(stdout(&o).contains("admin logon"));
}

#[test]
fn help_documents_the_exit_statuses() {
    let o = duetctl(&["--help"], "");
    assert_eq!(code(&o), 0);
    let text = stdout(&o);
    for line in ["3  not found", "4  conflict", "5  unauthorised", "6  duetd unreachable", "7  unhealthy"] {
        assert!(text.contains(line), "{line:?} missing from --help:\n{text}");
    }
}

#[test]
fn already_exists_is_exit_4() {
    let f = fake(vec![err(ApiError::already_exists(
        "share public already exists",
    ))]);
    let o = run(&f, &["share", "add", "public", "--path", "/public"]);
    assert_eq!(code(&o), 4);
    assert_eq!(stderr(&o), "duetctl: share public already exists\n");
}

#[test]
fn unauthorized_hints_at_token_file() {
    let dir = std::env::temp_dir().join(format!("duetctl-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("admin.token"), "filetoken\n").unwrap();
    let f = fake(vec![
        err(ApiError::unauthorized("invalid token")),
        err(ApiError::unauthorized("invalid token")),
    ]);
    let o = duetctl(
        &[
            "--addr",
            &f.addr,
            "--data-dir",
            dir.to_str().unwrap(),
            "status",
        ],
        "",
    );
    assert_eq!(code(&o), 5);
    // The token came from <data-dir>/admin.token, trimmed.
    assert_eq!(
        f.request().header("authorization"),
        Some("Bearer filetoken")
    );
    let e = stderr(&o);
    assert!(
        e.starts_with("duetctl: invalid token\nduetctl: hint: "),
        "{e}"
    );
    assert!(
        e.contains(&dir.join("admin.token").display().to_string()),
        "{e}"
    );
    // With --token, the hint names the default token file.
    let o = duetctl(&["--addr", &f.addr, "--token", "bad", "status"], "");
    assert_eq!(code(&o), 5);
    assert!(
        stderr(&o).contains("/var/lib/duet/admin.token"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn token_file_option_and_env() {
    let path = std::env::temp_dir().join(format!("duetctl-token-{}", std::process::id()));
    std::fs::write(&path, "  tok-from-file  \n").unwrap();
    let f = fake(vec![
        ok(AdminResponse::Stats(Stats::default())),
        ok(AdminResponse::Stats(Stats::default())),
    ]);
    let o = duetctl(
        &[
            "--addr",
            &f.addr,
            "--token-file",
            path.to_str().unwrap(),
            "stats",
        ],
        "",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        f.request().header("authorization"),
        Some("Bearer tok-from-file")
    );
    std::fs::remove_file(&path).unwrap();
    // Environment variables.
    let out = Command::new(env!("CARGO_BIN_EXE_duetctl"))
        .env("DUET_ADMIN_ADDR", &f.addr)
        .env("DUET_ADMIN_TOKEN", "envtok")
        .arg("stats")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(f.request().header("authorization"), Some("Bearer envtok"));
}

#[test]
fn missing_token_file() {
    let o = duetctl(
        &[
            "--addr",
            "127.0.0.1:9",
            "--data-dir",
            "/nonexistent/duet",
            "status",
        ],
        "",
    );
    assert_eq!(code(&o), 5);
    let e = stderr(&o);
    assert!(
        e.starts_with("duetctl: cannot read the API token from /nonexistent/duet/admin.token"),
        "{e}"
    );
}

#[test]
fn basic_auth() {
    let f = fake(vec![
        ok(AdminResponse::Users(vec![])),
        ok(AdminResponse::Users(vec![])),
        ok(AdminResponse::Users(vec![])),
    ]);
    let pwfile = std::env::temp_dir().join(format!("duetctl-adminpw-{}", std::process::id()));
    std::fs::write(&pwfile, "s3cret\nsecond line ignored\n").unwrap();
    let o = duetctl(
        &[
            "--addr",
            &f.addr,
            "--user",
            "admin",
            "--admin-password-file",
            pwfile.to_str().unwrap(),
            "user",
            "list",
        ],
        "",
    );
    std::fs::remove_file(&pwfile).unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        credentials(&f.request()),
        Some(Credentials::Basic {
            user: "admin".into(),
            password: "s3cret".into()
        })
    );
    assert_eq!(stdout(&o), "no users\n");
    // Password from the environment.
    let out = Command::new(env!("CARGO_BIN_EXE_duetctl"))
        .env("DUET_ADMIN_PASSWORD", "envpw")
        .args(["--addr", &f.addr, "user", "list", "--user", "admin"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        credentials(&f.request()),
        Some(Credentials::Basic {
            user: "admin".into(),
            password: "envpw".into()
        })
    );
    // From stdin.
    let o = duetctl(&["--addr", &f.addr, "--user", "admin", "--admin-password-stdin", "user", "list"], "fromstdin\n");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        credentials(&f.request()),
        Some(Credentials::Basic { user: "admin".into(), password: "fromstdin".into() })
    );
    // No password and no terminal.
    let o = duetctl(&["--addr", &f.addr, "--user", "admin", "user", "list"], "");
    assert_eq!(code(&o), 5);
    assert!(stderr(&o).contains("DUET_ADMIN_PASSWORD"), "{}", stderr(&o));
    // --password is a user's new password, never the admin's.
    let o = duetctl(&["--addr", &f.addr, "--user", "admin", "--password", "x", "user", "list"], "");
    assert_eq!(code(&o), 2);
    // Both passwords from stdin: refused.
    let o = duetctl(
        &["--addr", &f.addr, "--user", "admin", "--admin-password-stdin", "user", "add", "bob", "--password-stdin"],
        "a\nb\n",
    );
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--password-file"), "{}", stderr(&o));
    f.no_request();
}

#[test]
fn connection_refused_names_the_address() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let o = duetctl(&["--addr", &addr, "--token", "x", "status"], "");
    assert_eq!(code(&o), 6, "unreachable");
    let e = stderr(&o);
    assert!(
        e.starts_with(&format!("duetctl: cannot connect to duetd at {addr}: ")),
        "{e}"
    );
    assert!(e.contains("is duetd running?"), "{e}");
}

#[test]
fn user_add_password_stdin() {
    let info = UserInfo {
        name: "alice".into(),
        uid: 1000,
        gid: 100,
        enabled: true,
    };
    let f = fake(vec![
        ok(AdminResponse::UserCreated(info.clone())),
        ok(AdminResponse::UserCreated(info)),
    ]);
    let o = run_stdin(
        &f,
        &["user", "add", "alice", "--password-stdin", "--uid", "1000"],
        "pä ss\r\n",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/users")
    );
    assert_eq!(
        json(&req),
        serde_json::json!({"name": "alice", "password": "pä ss", "uid": 1000})
    );
    assert_eq!(stdout(&o), "added user alice (uid 1000, gid 100)\n");
    // From a file.
    let pw = std::env::temp_dir().join(format!("duetctl-userpw-{}", std::process::id()));
    std::fs::write(&pw, "fromfile\n").unwrap();
    let f2 = fake(vec![ok(AdminResponse::UserCreated(UserInfo { name: "carol".into(), uid: 1, gid: 1, enabled: true }))]);
    let o = run(&f2, &["user", "add", "carol", "--password-file", pw.to_str().unwrap()]);
    std::fs::remove_file(&pw).unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&f2.request()), serde_json::json!({"name": "carol", "password": "fromfile"}));
    // Neither option, stdin not a terminal: one line of stdin.
    let o = run_stdin(&f, &["user", "add", "alice", "--gid", "100"], "fromstdin\n");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        json(&f.request()),
        serde_json::json!({"name": "alice", "password": "fromstdin", "gid": 100})
    );
}

#[test]
fn user_add_empty_password_rejected() {
    let f = fake(vec![]);
    let o = run_stdin(&f, &["user", "add", "alice", "--password-stdin"], "\n");
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("password must be 1-256 characters"),
        "{}",
        stderr(&o)
    );
    f.no_request();
}

#[test]
fn user_list_passwd_remove() {
    let users = vec![
        UserInfo {
            name: "alice".into(),
            uid: 1000,
            gid: 100,
            enabled: true,
        },
        UserInfo {
            name: "bob".into(),
            uid: 65534,
            gid: 65534,
            enabled: false,
        },
    ];
    let f = fake(vec![
        ok(AdminResponse::Users(users)),
        ok(AdminResponse::NoContent),
        ok(AdminResponse::NoContent),
    ]);
    let o = run(&f, &["user", "list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(f.request().path, "/v1/users");
    assert_eq!(
        stdout(&o),
        "NAME     UID    GID  ENABLED\n\
         alice   1000    100  yes\n\
         bob    65534  65534  no\n"
    );
    let o = run(&f, &["user", "passwd", "alice", "--password", "n3w"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("PUT", "/v1/users/alice/password")
    );
    assert_eq!(json(&req), serde_json::json!({"password": "n3w"}));
    assert_eq!(stdout(&o), "changed the password of user alice\n");
    let o = run(&f, &["user", "remove", "bob"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("DELETE", "/v1/users/bob")
    );
    assert_eq!(stdout(&o), "removed user bob\n");
}

#[test]
fn stats_table() {
    let stats = Stats {
        batches: 4,
        proposals: 4,
        fsyncs: 2,
        rocksdb_reads: 10,
        rocksdb_writes: 6,
        chunk_reads: 0,
        chunk_writes: 3,
        log_writes: 3,
        destaged_records: 7,
        destage_queue: 2,
        destage_backlog: 1,
        by_request: vec![
            RequestStats {
                protocol: "smb2".into(),
                request: "COMPOUND".into(),
                count: 12,
                batches: 3,
                proposals: 3,
                fsyncs: 1,
                rocksdb_reads: 7,
                rocksdb_writes: 5,
                chunk_reads: 0,
                chunk_writes: 2,
                ..Default::default()
            },
            RequestStats {
                protocol: "nfs4".into(),
                request: "NULL".into(),
                count: 1,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let f = fake(vec![ok(AdminResponse::Stats(stats))]);
    let o = run(&f, &["stats"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(f.request().path, "/v1/stats");
    assert_eq!(
        stdout(&o),
        "COUNTER         TOTAL  PER BATCH\n\
         batches             4\n\
         proposals           4       1.00\n\
         fsyncs              2       0.50\n\
         rocksdb reads      10       2.50\n\
         rocksdb writes      6       1.50\n\
         chunk reads         0       0.00\n\
         chunk writes        3       0.75\n\
         log writes          3       0.75\n\
         lazy groups         0\n\
         wal syncs           0\n\
         destager: 7 records destaged, 2 queued, 1 write-log records not yet destaged\n\
         \n\
         connections: 0 open; accepted: SMB 0, NFS 0\n\
         \n\
         per request (averages per batch):\n\
         PROTOCOL  REQUEST   COUNT  BATCHES  PROPOSALS  FSYNCS  DB READS  DB WRITES  CHUNK READS  CHUNK WRITES\n\
         smb2      COMPOUND     12        3       1.00    0.33      2.33       1.67         0.00          0.67\n\
         nfs4      NULL          1        0          -       -         -          -            -             -\n"
    );
}

#[test]
fn fsck_exit_codes() {
    let clean = FsckReport {
        nodes: 10,
        edges: 9,
        chunks: 4,
        problems: vec![],
    };
    let bad = FsckReport {
        nodes: 10,
        edges: 9,
        chunks: 4,
        problems: vec!["node 5: nlink 2, 1 edge".into()],
    };
    let f = fake(vec![
        ok(AdminResponse::Fsck(clean)),
        ok(AdminResponse::Fsck(bad.clone())),
        ok(AdminResponse::Fsck(bad)),
    ]);
    let o = run(&f, &["fsck"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/fsck")
    );
    assert_eq!(
        stdout(&o),
        "nodes:    10\nedges:    9\nchunks:   4\nproblems: 0\nfile system is consistent\n"
    );
    let o = run(&f, &["fsck"]);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).ends_with("problems: 1\n  - node 5: nlink 2, 1 edge\n"),
        "{}",
        stdout(&o)
    );
    let o = run(&f, &["fsck", "--json"]);
    assert_eq!(code(&o), 1);
    assert_eq!(
        serde_json::from_str::<FsckReport>(&stdout(&o))
            .unwrap()
            .problems
            .len(),
        1
    );
}

#[test]
fn internal_error_and_garbage_reply() {
    let f = fake(vec![
        err(ApiError::internal("rocksdb: IO error")),
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nnope!".to_vec(),
        b"garbage\r\n\r\n".to_vec(),
    ]);
    let o = run(&f, &["status"]);
    assert_eq!(code(&o), 8);
    assert_eq!(stderr(&o), "duetctl: rocksdb: IO error\n");
    let o = run(&f, &["status"]);
    assert_eq!(code(&o), 8);
    assert!(
        stderr(&o).starts_with("duetctl: cannot decode the daemon's response"),
        "{}",
        stderr(&o)
    );
    let o = run(&f, &["status"]);
    assert_eq!(code(&o), 8);
    assert!(
        stderr(&o).starts_with("duetctl: bad reply from duetd"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["share", "add", "x"][..],
        &["bogus"],
        &["user", "add", "a", "--uid", "x"],
        &[],
    ] {
        let o = duetctl(args, "");
        assert_eq!(code(&o), 2, "{args:?}");
    }
    let o = duetctl(&["--help"], "");
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("share"));
}

#[test]
fn admin_passwd_request_output_and_refusals() {
    let f = fake(vec![ok(AdminResponse::NoContent), ok(AdminResponse::NoContent)]);
    let o = run_stdin(&f, &["admin", "passwd", "--password-stdin"], "a new admin password\n");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!((req.method.as_str(), req.path.as_str()), ("PUT", "/v1/admin/password"));
    assert_eq!(json(&req), serde_json::json!({"user": "admin", "password": "a new admin password"}));
    assert_eq!(stdout(&o), "changed the password of admin admin; its console sessions have ended\n");
    // Another admin by name (the positional is not the global --user).
    let o = run(&f, &["admin", "passwd", "ops", "--password", "twelve chars!"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&f.request())["user"], "ops");
    // Too short, a control character, a bad name: refused before the daemon.
    refused_before_the_daemon(&[
        &["admin", "passwd", "--password", "short"],
        &["admin", "passwd", "--password", "twelve\tchars!"],
        &["admin", "passwd", "a/b", "--password", "twelve chars!"],
    ]);
}

#[test]
fn cluster_status_shows_who_holds_each_public_address() {
    let mut c = cluster_three();
    c.public_addresses = vec![
        duet_admin_api::PublicAddress { address: "10.0.0.100/24".into(), node: Some(2) },
        duet_admin_api::PublicAddress { address: "10.0.0.101/24".into(), node: None },
    ];
    let f = fake(vec![ok(AdminResponse::Cluster(c.clone())), ok(AdminResponse::Cluster(c))]);
    let o = run(&f, &["cluster", "status"]);
    let out = stdout(&o);
    assert!(out.contains("PUBLIC ADDRESS"), "{out}");
    let line = |a: &str| out.lines().find(|l| l.starts_with(a)).map(|l| l.split_whitespace().collect::<Vec<_>>()).unwrap_or_default();
    assert_eq!(line("10.0.0.100/24"), vec!["10.0.0.100/24", "2"], "{out}");
    assert_eq!(line("10.0.0.101/24"), vec!["10.0.0.101/24", "none"], "{out}");
    assert_ne!(code(&o), 0, "an address nobody holds is a problem");
    assert!(stderr(&o).contains("public address 10.0.0.101/24 is held by no node"), "{}", stderr(&o));
    let o = run(&f, &["--json", "cluster", "status"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["public_addresses"][0], serde_json::json!({"address": "10.0.0.100/24", "node": 2}));
    assert_eq!(v["public_addresses"][1]["node"], serde_json::Value::Null);
}

#[test]
fn cluster_status_shows_a_node_rebuild_in_progress() {
    let mut c = cluster_three();
    c.receiving_snapshot = Some(duet_admin_api::SnapshotProgress { from: 1, bytes: 12 << 20, seconds: 4 });
    let f = fake(vec![ok(AdminResponse::Cluster(c.clone())), ok(AdminResponse::Cluster(c))]);
    let o = run(&f, &["cluster", "status"]);
    assert!(
        stdout(&o).contains("this node is being rebuilt: 12.0 MiB of a snapshot image received from node 1 in 4 s"),
        "{}",
        stdout(&o)
    );
    let o = run(&f, &["--json", "cluster", "status"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["receiving_snapshot"]["bytes"], 12 << 20);
}

#[test]
fn share_clone_request_output_and_refusals() {
    let mut made = Share::new("copy", "/clones/copy");
    made.origin = Some("data@daily".into());
    let f = fake(vec![
        ok(AdminResponse::ShareCreated(made.clone())),
        ok(AdminResponse::Shares(vec![Share::new("data", "/data"), made])),
        err(ApiError::not_found("snapshot nope of share data not found")),
        err(ApiError::invalid_argument("share c8 is a clone 8 deep: a clone may be at most 8 deep")),
    ]);
    let o = run(&f, &["share", "clone", "data@daily", "copy", "--read-only"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!((req.method.as_str(), req.path.as_str()), ("POST", "/v1/shares/data/clone"));
    let body: NewClone = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(body.snapshot.as_deref(), Some("daily"));
    assert_eq!(body.share.path, "/clones/copy");
    assert!(body.share.read_only);
    assert_eq!(stdout(&o), "made share copy at /clones/copy, a writable clone of data@daily\n");
    let o = run(&f, &["share", "list"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    f.request();
    assert_eq!(
        stdout(&o),
        "NAME  PATH          PROTOCOLS  ACCESS  GUEST  DURABILITY  NFS CLIENTS  EXCLUSIVE  ORIGIN\n\
         data  /data         smb,nfs    rw      no     always      *                    -  -\n\
         copy  /clones/copy  smb,nfs    rw      no     always      *                    -  data@daily\n"
    );
    let o = run(&f, &["share", "clone", "data@nope", "c2", "--path", "/x/c2"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let req = f.request();
    let body: NewClone = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(body.share.path, "/x/c2");
    let o = run(&f, &["share", "clone", "c8", "c9"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("8 deep"), "{}", stderr(&o));
    f.request();
    // Bad names are refused before anything is sent.
    for args in [
        &["share", "clone", "data@a/b", "c"][..],
        &["share", "clone", "da ta", "c"],
        &["share", "clone", "data", "c@d"],
        &["share", "clone", "data", "c", "--path", "relative"],
        &["share", "clone", "data@", "c"],
    ] {
        let o = run(&f, args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
    }
    f.no_request();
}
