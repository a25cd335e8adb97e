//! duetctl against a real duetd process: every command, bad input, the
//! admin password printed on first start, a bad configuration value, and
//! SIGTERM; and `smbclient -L` listing the shares through IPC$ / srvsvc.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{duetctl, free_port, statvfs};

struct Daemon {
    child: Child,
    addr: String,
    data: PathBuf,
    password: String,
    smb_port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A failed test must not leave its duetd behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(dir: &Path) -> Daemon {
        let port = free_port();
        let smb_port = free_port();
        let data = dir.join("data");
        let config = dir.join("duetd.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = {data:?}\nexecutors = 1\n[admin]\nlisten = \"127.0.0.1:{port}\"\n\
                 [smb]\nlisten = \"127.0.0.1:{smb_port}\"\n[nfs]\nlisten = \"127.0.0.1:0\"\nportmap = false\n"
            ),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_duetd"))
            .args(["--config", config.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut password = String::new();
        for line in BufReader::new(out).lines() {
            let line = line.unwrap();
            if let Some(rest) = line.split("password: ").nth(1) {
                password = rest.split_whitespace().next().unwrap().to_string();
            }
            if line.contains("share 'public'") {
                break;
            }
        }
        assert!(!password.is_empty(), "first start printed the admin password");
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "duetd did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Daemon { child, addr, data, password, smb_port }
    }

    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(duetctl())
            .args(["--addr", &self.addr, "--data-dir", self.data.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        assert!(o.status.success(), "duetctl {args:?}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn fails(&self, args: &[&str], code: i32, says: &str) {
        let o = self.ctl(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "duetctl {args:?}: {err}");
        assert!(err.contains(says), "duetctl {args:?}: expected {says:?} in {err:?}");
    }
}

#[test]
fn duetctl_drives_every_command_against_duetd() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path());

    let status = d.ok(&["status"]);
    assert!(status.contains("smb") && status.contains("nfs"), "{status}");
    let json: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "status"])).unwrap();
    assert_eq!(json["raft"]["voters"], serde_json::json!([1]));
    assert_eq!(json["shares"], 1);
    assert_eq!(json["metadata_failed"], false);
    // I/O fault injection is for tests only: off unless configured.
    d.fails(&["fault", "wal-sync"], 5, "fault injection is off");
    // The data volume's real capacity (statvfs of the data directory, less
    // [limits] disk_reserve_mib, 256 MiB by default).
    let cap = &json["capacity"];
    let vfs = statvfs(&d.data);
    assert_eq!(cap["total_bytes"].as_u64(), Some(vfs.0), "{cap}");
    assert_eq!(cap["reserve_bytes"].as_u64(), Some(256 << 20));
    let avail = cap["avail_bytes"].as_u64().unwrap();
    let want = vfs.2.saturating_sub(256 << 20);
    // The two readings are moments apart on a volume other processes write
    // to (the other tests of this file, a build beside the run): a few
    // hundred MiB of slack, against capacities of many GiB.
    assert!(avail.abs_diff(want) < 512 << 20, "available {avail} vs statvfs {want}");
    assert!(status.contains("capacity:"), "{status}");

    // Shares.
    assert!(d.ok(&["share", "list"]).contains("public"));
    d.ok(&["share", "add", "projects", "--path", "/data/projects", "--nfs-clients", "10.0.0.0/8,::1", "--read-only"]);
    let show = d.ok(&["--json", "share", "show", "projects"]);
    let share: serde_json::Value = serde_json::from_str(&show).unwrap();
    assert_eq!(share["read_only"], true);
    assert_eq!(share["nfs"]["clients"], serde_json::json!(["10.0.0.0/8", "::1"]));
    d.fails(&["share", "add", "projects", "--path", "/elsewhere"], 4, "already exists");
    d.fails(&["share", "show", "nope"], 3, "not found");
    d.fails(&["share", "remove", "--yes", "nope"], 3, "not found");
    // Modified in place: only the options given change.
    let out = d.ok(&["share", "modify", "projects", "--read-write", "--users", "alice,bob", "--nfs-clients", "*"]);
    assert!(out.contains("changed share projects"), "{out}");
    let share: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "share", "show", "projects"])).unwrap();
    assert_eq!(share["read_only"], false);
    assert_eq!(share["users"], serde_json::json!(["alice", "bob"]));
    assert_eq!(share["nfs"]["clients"], serde_json::json!(["*"]));
    assert_eq!(share["path"], "/data/projects");
    assert_eq!(share["nfs"]["root_squash"], true, "unchanged");
    d.fails(&["share", "modify", "nope", "--read-only"], 3, "not found");
    d.fails(&["share", "modify", "projects", "--protocols", "nfs", "--nfs-clients", ""], 2, "");
    // Destructive: refused without a terminal unless --yes.
    d.fails(&["share", "remove", "projects"], 2, "pass --yes");
    d.fails(&["share", "add", "bad", "--path", "/x", "--nfs-clients", "10.0.0.0/99"], 2, "");
    d.fails(&["share", "add", "bad", "--path", "relative"], 2, "");
    d.ok(&["share", "remove", "projects", "--yes"]);
    assert!(!d.ok(&["share", "list"]).contains("projects"));

    // Users.
    d.ok(&["user", "add", "alice", "--password", "s3cret", "--uid", "1500"]);
    d.fails(&["user", "add", "alice", "--password", "other"], 4, "already exists");
    let users = d.ok(&["user", "list"]);
    assert!(users.contains("alice") && users.contains("1500"), "{users}");
    d.ok(&["user", "add", "bob", "--password", "pw"]);
    let users: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "user", "list"])).unwrap();
    let bob = users.as_array().unwrap().iter().find(|u| u["name"] == "bob").unwrap();
    assert!(bob["uid"].as_u64().unwrap() >= 2000, "an automatic uid: {bob}");
    d.ok(&["user", "passwd", "alice", "--password", "n3w"]);
    d.fails(&["user", "passwd", "carol", "--password", "x"], 3, "not found");
    // uid/gid and enabled change in place.
    d.ok(&["user", "modify", "alice", "--uid", "1600", "--gid", "160", "--disable"]);
    let users: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "user", "list"])).unwrap();
    let alice = users.as_array().unwrap().iter().find(|u| u["name"] == "alice").unwrap().clone();
    assert_eq!(alice, serde_json::json!({"name": "alice", "uid": 1600, "gid": 160, "enabled": false}));
    d.ok(&["user", "modify", "alice", "--enable"]);
    assert!(d.ok(&["user", "list"]).lines().any(|l| l.starts_with("alice") && l.contains("1600") && l.ends_with("yes")));
    d.fails(&["user", "modify", "carol", "--enable"], 3, "not found");
    d.ok(&["user", "remove", "alice"]);
    d.fails(&["user", "remove", "alice"], 3, "not found");

    // Stats and fsck.
    let stats: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "stats"])).unwrap();
    assert!(stats["proposals"].as_u64().unwrap() >= 4, "{stats}");
    d.ok(&["stats"]);
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));

    // The admin user's password, printed once on first start, works (from
    // a file or the environment, never the command line); a wrong one does not.
    let pwfile = tmp.path().join("admin.pw");
    std::fs::write(&pwfile, format!("{}\n", d.password)).unwrap();
    let o = Command::new(duetctl())
        .args(["--addr", &d.addr, "--user", "admin", "--admin-password-file", pwfile.to_str().unwrap()])
        .args(["--token-file", "/nonexistent", "status"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(duetctl())
        .env("DUET_ADMIN_PASSWORD", "wrong")
        .args(["--addr", &d.addr, "--user", "admin", "status"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "unauthorised");

    // The audit log: who changed what from where, and the refused logon;
    // never a password.
    let audit: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "audit"])).unwrap();
    let entries = audit.as_array().unwrap();
    let find = |action: &str| entries.iter().find(|e| e["action"].as_str().unwrap().starts_with(action));
    let add = find("ShareAdd").expect("share add is audited");
    assert_eq!(add["who"], "token");
    assert!(add["from"].as_str().unwrap().starts_with("127.0.0.1:"), "{add}");
    assert_eq!(add["outcome"], "ok");
    assert!(entries.iter().any(|e| e["action"].as_str().unwrap().starts_with("ShareAdd") && e["outcome"].as_str().unwrap().starts_with("already_exists")));
    assert!(find("UserModify").is_some() && find("ShareModify").is_some() && find("ShareRemove").is_some());
    let refused = find("admin logon").expect("the wrong admin password is audited");
    assert_eq!(refused["who"], "admin");
    let text = serde_json::to_string(&audit).unwrap();
    assert!(!text.contains("s3cret") && !text.contains("n3w"), "no password in the audit log");
    assert!(text.contains("<redacted>"));
    let table = d.ok(&["audit", "--last", "3"]);
    assert_eq!(table.lines().count(), 4, "a header and the 3 newest: {table}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.data.join("audit.log")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the audit log is private");

    // SIGTERM drains and exits cleanly; a restart keeps everything.
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(d.child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "duetd did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn bad_configuration_is_refused_with_the_key_named() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("bad.toml");
    std::fs::write(&config, "executors = 100000\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_duetd")).args(["--config", config.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("executors"));
    std::fs::write(&config, "[smb]\nlisten = \"nowhere\"\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_duetd")).args(["--config", config.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("smb.listen"));
    let o = Command::new(env!("CARGO_BIN_EXE_duetd")).args(["--print-default-config"]).output().unwrap();
    assert!(o.status.success());
    std::fs::write(&config, &o.stdout).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_duetd")).args(["--config", config.to_str().unwrap(), "--check-config"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `smbclient -L` against the real daemon: TREE_CONNECT to IPC$, the
/// srvsvc pipe, DCE/RPC BIND and NetrShareEnum, over SMB 3.1.1 and 2.1.
#[test]
fn smbclient_lists_the_shares_through_ipc_srvsvc() {
    // A missing client is a failure, never a pass.
    assert!(
        Command::new("smbclient").arg("--version").output().is_ok_and(|o| o.status.success()),
        "smbclient is not installed: run scripts/install-deps.sh (Debian's smbclient)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    d.ok(&["share", "add", "projects", "--path", "/data/projects"]);
    let list = |proto: &str| {
        Command::new("smbclient")
            .args(["-L", "//127.0.0.1", "-p", &d.smb_port.to_string(), "-U", "bench%benchpw", "-m", proto])
            .args(["--option=client min protocol=SMB2_02"])
            .output()
            .unwrap()
    };
    // The SMB executors see a new user and a new share within about a
    // second (each catalog refresh), not necessarily in the same one.
    let deadline = Instant::now() + Duration::from_secs(15);
    let out = loop {
        let o = list("SMB3_11");
        let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        if o.status.success() && text.contains("IPC$") && text.contains("projects") {
            break text;
        }
        assert!(Instant::now() < deadline, "smbclient -L kept failing: {text}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    let has = |name: &str, kind: &str| rows.iter().any(|r| r.len() >= 2 && r[0] == name && r[1] == kind);
    assert!(has("public", "Disk"), "{out}");
    assert!(has("projects", "Disk"), "{out}");
    assert!(rows.iter().any(|r| r.starts_with(&["IPC$", "IPC", "IPC", "Service"])), "{out}");
    assert_eq!(rows.iter().filter(|r| r.len() >= 2 && (r[1] == "Disk" || r[1] == "IPC")).count(), 3, "{out}");
    // SMB 2.1 takes the same path (no preauth, HMAC signing).
    let o = list("SMB2_10");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains("projects") && text.contains("IPC$"), "{text}");
    // A wrong password gets no list.
    let o = Command::new("smbclient")
        .args(["-L", "//127.0.0.1", "-p", &d.smb_port.to_string(), "-U", "bench%wrong"])
        .output()
        .unwrap();
    assert!(!o.status.success());
}

/// One HTTP/1.1 exchange with the admin listener (plain HTTP: loopback):
/// (status, headers, body).
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// A console sign-in: (cookie header value, CSRF token).
fn console_sign_in(addr: &str, password: &str) -> Result<(String, String), u16> {
    let body = serde_json::json!({ "user": "admin", "password": password }).to_string();
    let (status, head, body) = http(addr, "POST", "/console/session", &[("Content-Type", "application/json")], &body);
    if status != 200 {
        return Err(status);
    }
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    Ok((cookie, v["csrf"].as_str().unwrap().to_string()))
}

#[test]
fn the_admin_password_changes_and_every_console_session_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    let file = |name: &str, pw: &str| -> String {
        let p = tmp.path().join(name);
        std::fs::write(&p, format!("{pw}\n")).unwrap();
        p.to_str().unwrap().to_string()
    };
    let first = file("first", &d.password);
    let second_pw = "second admin password";
    let second = file("second", second_pw);
    let as_admin = |pwfile: &str, args: &[&str]| -> Output {
        Command::new(duetctl())
            .args(["--addr", &d.addr, "--user", "admin", "--admin-password-file", pwfile])
            .args(args)
            .output()
            .unwrap()
    };
    let code = |o: &Output| o.status.code();
    // A console signed in with the first password, before the change.
    let (cookie, csrf) = console_sign_in(&d.addr, &d.password).expect("console sign-in");
    assert_eq!(http(&d.addr, "GET", "/console/session", &[("Cookie", &cookie)], "").0, 200);

    // Too short, or another admin's password: refused, nothing changed.
    let o = as_admin(&first, &["admin", "passwd", "--password", "short"]);
    assert_eq!(code(&o), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("at least 12 characters"));
    let o = as_admin(&first, &["admin", "passwd", "other", "--password-file", &second]);
    assert_eq!(code(&o), Some(5), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("only other (or the local token)"), "{err}");
    assert!(as_admin(&first, &["status"]).status.success(), "the first password still works");

    // Signed in as admin with the first password: changed.
    let o = as_admin(&first, &["admin", "passwd", "--password-file", &second]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("changed the password of admin admin"));
    let o = as_admin(&first, &["status"]);
    assert_eq!(code(&o), Some(5), "the old password is refused");
    assert!(as_admin(&second, &["status"]).status.success(), "the new password works");
    // The console session made with the old password has ended.
    assert_eq!(http(&d.addr, "GET", "/console/session", &[("Cookie", &cookie)], "").0, 401);
    let (st, _, _) = http(&d.addr, "GET", "/v1/status", &[("Cookie", &cookie), ("X-CSRF-Token", &csrf)], "");
    assert_eq!(st, 401, "the old session's cookie no longer authenticates");
    assert_eq!(console_sign_in(&d.addr, &d.password), Err(401));

    // From the console: the current password is required and checked.
    let (cookie, csrf) = console_sign_in(&d.addr, second_pw).expect("sign-in with the new password");
    let put = |body: serde_json::Value| {
        http(
            &d.addr,
            "PUT",
            "/v1/admin/password",
            &[("Cookie", &cookie), ("X-CSRF-Token", &csrf), ("Content-Type", "application/json")],
            &body.to_string(),
        )
    };
    assert_eq!(put(serde_json::json!({ "password": "third admin password" })).0, 400, "no current password");
    assert_eq!(put(serde_json::json!({ "password": "third admin password", "current": "wrong" })).0, 403);
    let (st, _, _) = http(
        &d.addr,
        "PUT",
        "/v1/admin/password",
        &[("Cookie", &cookie), ("Content-Type", "application/json")],
        &serde_json::json!({ "password": "third admin password", "current": second_pw }).to_string(),
    );
    assert_eq!(st, 403, "no CSRF token");
    let (st, _, body) = put(serde_json::json!({ "password": "third admin password", "current": second_pw }));
    assert_eq!(st, 204, "{body}");
    assert_eq!(http(&d.addr, "GET", "/console/session", &[("Cookie", &cookie)], "").0, 401, "its own session ends too");
    assert!(console_sign_in(&d.addr, "third admin password").is_ok());
    assert_eq!(code(&as_admin(&second, &["status"])), Some(5));

    // The local token (root on the appliance) resets a forgotten one; an
    // admin that does not exist is not found.
    let fourth = file("fourth", "fourth admin password");
    d.ok(&["admin", "passwd", "--password-file", &fourth]);
    assert!(as_admin(&fourth, &["status"]).status.success());
    d.fails(&["admin", "passwd", "nobody", "--password-file", &fourth], 3, "there is no admin user nobody");
    // Every change is in the audit log, passwords redacted.
    let audit = d.ok(&["audit", "--last", "100"]);
    assert!(audit.contains("AdminPasswd"), "{audit}");
    for pw in [second_pw, "third admin password", "fourth admin password"] {
        assert!(!audit.contains(pw), "a password in the audit log");
    }
}
