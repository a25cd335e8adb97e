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
         metadata:  ok\n"
    );
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
        "NAME     PATH          PROTOCOLS  ACCESS  GUEST  NFS CLIENTS\n\
         public   /public       smb,nfs    rw      no     *\n\
         backups  /srv/backups  smb        ro      no     10.0.0.0/8,192.168.0.0/16\n"
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
         users:                everyone\n"
    );
    let o = run(&f, &["share", "show", "nope"]);
    assert_eq!(code(&o), 2);
    assert_eq!(stderr(&o), "duetctl: share nope not found\n");
    assert!(stdout(&o).is_empty());
}

#[test]
fn share_remove() {
    let f = fake(vec![
        ok(AdminResponse::NoContent),
        ok(AdminResponse::NoContent),
    ]);
    let o = run(&f, &["share", "remove", "public"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let req = f.request();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("DELETE", "/v1/shares/public")
    );
    assert_eq!(stdout(&o), "removed share public\n");
    let o = run(&f, &["--json", "share", "rm", "public"]);
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o), "");
}

#[test]
fn already_exists_is_exit_2() {
    let f = fake(vec![err(ApiError::already_exists(
        "share public already exists",
    ))]);
    let o = run(&f, &["share", "add", "public", "--path", "/public"]);
    assert_eq!(code(&o), 2);
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
    assert_eq!(code(&o), 2);
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
    assert_eq!(code(&o), 2);
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
    assert_eq!(code(&o), 2);
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
    ]);
    let o = duetctl(
        &[
            "--addr",
            &f.addr,
            "--user",
            "admin",
            "--password",
            "s3cret",
            "user",
            "list",
        ],
        "",
    );
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
    // No password and no terminal.
    let o = duetctl(&["--addr", &f.addr, "--user", "admin", "user", "list"], "");
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("DUET_ADMIN_PASSWORD"), "{}", stderr(&o));
}

#[test]
fn connection_refused_names_the_address() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let o = duetctl(&["--addr", &addr, "--token", "x", "status"], "");
    assert_eq!(code(&o), 2);
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
            },
            RequestStats {
                protocol: "nfs4".into(),
                request: "NULL".into(),
                count: 1,
                ..Default::default()
            },
        ],
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
    assert_eq!(code(&o), 2);
    assert_eq!(stderr(&o), "duetctl: rocksdb: IO error\n");
    let o = run(&f, &["status"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).starts_with("duetctl: cannot decode the daemon's response"),
        "{}",
        stderr(&o)
    );
    let o = run(&f, &["status"]);
    assert_eq!(code(&o), 2);
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
