//! The web console in a real browser: headless Chromium from Debian, driven
//! over WebDriver (chromedriver), against a real duetd whose admin listener
//! serves TLS (`[admin] tls = "on"`, the certificate duetd made itself):
//!
//! - duetctl speaks TLS to it, trusting the data directory's CA; plain
//!   HTTP on the TLS port is answered on loopback only;
//! - in the browser: a wrong password is refused with a message; the right
//!   one shows the dashboard (health, capacity, shares, users, the cluster);
//!   a share and a user added through the forms appear in the tables; a
//!   screenshot is kept in `target/test-artifacts/console.png`;
//! - smbclient uses the share and the user the browser made;
//! - a cookie without the session's CSRF token cannot change anything
//!   (403), with it it can; a signed-out session is refused;
//! - repeated wrong passwords lock the address out (429), even for the
//!   right password, until the lockout ends.
//!
//! Needs root (a veth for an address off loopback), chromium and
//! chromium-driver (scripts/install-deps.sh), curl and smbclient; a missing
//! one fails the test.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{duetctl, free_port, repo_root, Daemon};
use serde_json::{json, Value};

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().map(|o| o.status.success()).unwrap_or(false)
}

/// One HTTP/1.1 exchange with chromedriver (plain HTTP on loopback; it
/// refuses HTTP/1.0).
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> Value {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("chromedriver listens");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut parser = duet_admin_api::ResponseParser::new();
    let mut buf = vec![0u8; 64 * 1024];
    let resp = loop {
        let n = s.read(&mut buf).unwrap();
        match if n == 0 { parser.finish() } else { parser.feed(&buf[..n]) } {
            duet_admin_api::Parsed::Complete(r) => break r,
            duet_admin_api::Parsed::Incomplete if n > 0 => continue,
            other => panic!("chromedriver {method} {path}: no complete reply ({})", matches!(other, duet_admin_api::Parsed::Error(_))),
        }
    };
    serde_json::from_slice(&resp.body).unwrap_or_else(|e| panic!("chromedriver {method} {path}: {e}: {}", String::from_utf8_lossy(&resp.body)))
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

impl Browser {
    fn start(dir: &Path) -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("chromedriver.log")).unwrap())
            .spawn()
            .expect("chromedriver starts");
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(20), "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = dir.join("chromium-profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "acceptInsecureCerts": true,
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                         "--disable-background-networking", "--disable-component-update", "--disable-sync",
                         "--disable-dev-shm-usage", "--window-size=1280,1400",
                         format!("--user-data-dir={}", profile.display())]
            }
        }}});
        let v = http(port, "POST", "/session", Some(&caps));
        let session = v["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no WebDriver session: {v}")).to_string();
        Browser { driver, port, session }
    }

    fn cmd(&self, method: &str, rest: &str, body: Option<Value>) -> Value {
        let v = http(self.port, method, &format!("/session/{}{rest}", self.session), body.as_ref());
        if v["value"].get("error").is_some() {
            panic!("WebDriver {method} {rest}: {}", v["value"]);
        }
        v["value"].clone()
    }

    fn go(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    fn find(&self, css: &str) -> String {
        let v = self.cmd("POST", "/element", Some(json!({"using": "css selector", "value": css})));
        v[ELEMENT].as_str().unwrap().to_string()
    }

    fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/clear"), Some(json!({})));
        self.cmd("POST", &format!("/element/{e}/value"), Some(json!({ "text": text })));
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/click"), Some(json!({})));
    }

    fn js(&self, script: &str) -> Value {
        self.cmd("POST", "/execute/sync", Some(json!({"script": script, "args": []})))
    }

    /// Waits until `script` returns true.
    fn wait(&self, what: &str, script: &str) {
        let t = Instant::now();
        loop {
            if self.js(script) == json!(true) {
                return;
            }
            if t.elapsed() > Duration::from_secs(20) {
                let body = self.js("return document.body.innerText");
                panic!("the console never showed {what}; the page says:\n{}", body.as_str().unwrap_or(""));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn screenshot(&self, to: &Path) {
        let v = self.cmd("GET", "/screenshot", None);
        let png = duet_admin_api::base64::decode(v.as_str().unwrap()).expect("a base64 screenshot");
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the session (chromedriver closes the browser); its answer is
        // not waited for past a few seconds.
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = write!(s, "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", self.session);
            let mut sink = [0u8; 4096];
            let _ = s.read(&mut sink);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A non-loopback address of this host for the test: on one end of a veth
/// pair made for it (this kernel has no dummy interfaces), removed on drop.
const OFF_LOOPBACK: [u8; 4] = [198, 51, 100, 77];

struct Veth(String);

impl Veth {
    fn new() -> Veth {
        let name = format!("dtls{}", std::process::id() % 100_000);
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("ip runs");
            assert!(o.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        };
        let _ = Command::new("ip").args(["link", "del", &name]).output();
        ip(&["link", "add", &name, "type", "veth", "peer", "name", &format!("{name}p")]);
        let v = Veth(name.clone());
        ip(&["addr", "add", "198.51.100.77/32", "dev", &name]);
        ip(&["link", "set", &name, "up"]);
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

/// curl against the TLS admin listener, trusting duetd's CA: (status, body).
fn curl(d: &Daemon, method: &str, path: &str, headers: &[String], body: Option<&str>, jar: &Path) -> (u16, String) {
    let ca = d.data.join("admin-tls/ca.pem");
    let url = format!("{}{path}", d.admin);
    let mut c = Command::new("curl");
    c.args(["-s", "-X", method, "--cacert", ca.to_str().unwrap(), "-b", jar.to_str().unwrap(), "-c", jar.to_str().unwrap()]);
    c.args(["-w", "\n%{http_code}"]);
    for h in headers {
        c.args(["-H", h]);
    }
    if let Some(b) = body {
        c.args(["-H", "Content-Type: application/json", "--data-binary", b]);
    }
    let o = c.arg(&url).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (b, code) = out.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), b.to_string())
}

/// The first admin password, handed to duetd's first start as the
/// systemd credential `admin-password` (as the disk image does).
fn admin_password(dir: &Path) -> String {
    let password = "console-admin-pw-1".to_string();
    let creds = dir.join("credentials");
    std::fs::create_dir_all(&creds).unwrap();
    std::fs::write(creds.join("admin-password"), format!("{password}\n")).unwrap();
    // This test binary has one test: no other thread reads the environment.
    std::env::set_var("CREDENTIALS_DIRECTORY", &creds);
    password
}

#[test]
fn the_console_signs_in_manages_shares_and_users_and_refuses_forgery() {
    for tool in ["chromium", "chromedriver", "curl", "smbclient"] {
        assert!(have(tool), "{tool} is missing: run scripts/install-deps.sh");
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let password = admin_password(dir);
    let d = Daemon::start_admin(dir, "", "tls = \"on\"", "", "portmap = false");
    std::env::remove_var("CREDENTIALS_DIRECTORY");
    assert!(d.admin.starts_with("https://"));

    // TLS: duetctl trusts the CA duetd made. Plain HTTP is answered on
    // loopback only: from an address of another interface (a veth made for
    // the test) it is refused with a pointer to https.
    let status = d.ok(&["status"]);
    assert!(status.contains("node"), "duetctl status over TLS:\n{status}");
    let port: u16 = d.admin.rsplit(':').next().unwrap().parse().unwrap();
    let plain = |from: [u8; 4], to: [u8; 4]| -> String {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&std::net::SocketAddr::from((from, 0)).into()).unwrap();
        s.connect(&std::net::SocketAddr::from((to, port)).into()).unwrap();
        let mut s: TcpStream = s.into();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    };
    assert!(plain([127, 0, 0, 1], [127, 0, 0, 1]).starts_with("HTTP/1.1 200"), "plain HTTP from loopback");
    let _veth = Veth::new();
    let off = plain(OFF_LOOPBACK, [127, 0, 0, 1]);
    assert!(off.starts_with("HTTP/1.1 403") && off.contains("https://"), "plain HTTP from another address: {off}");

    // The browser.
    let b = Browser::start(dir);
    b.go(&format!("{}/", d.admin));
    b.wait("the sign-in form", "return !document.getElementById('signin-view').hidden");
    b.type_into("#signin-user", "admin");
    b.type_into("#signin-password", "not-the-password");
    b.click("#signin");
    b.wait("the refusal", "return document.getElementById('signin-error').textContent.includes('wrong')");
    assert_eq!(b.js("return document.getElementById('app-view').hidden"), json!(true), "the dashboard showed after a wrong password");
    b.type_into("#signin-password", &password);
    b.click("#signin");
    b.wait("the dashboard", "return !document.getElementById('app-view').hidden");
    b.wait("the default share", "return !!document.querySelector('tr[data-share=\"public\"]')");
    b.wait("the health badge", "return document.getElementById('health').textContent === 'healthy'");
    b.wait("the cluster's leader", "return document.getElementById('cluster-summary').textContent.includes('Leader: node 1')");
    b.wait("the capacity", "return document.getElementById('capacity').textContent.includes('available of')");

    b.type_into("#share-name", "webshare");
    b.type_into("#share-path", "/webshare");
    b.type_into("#share-users", "webuser");
    b.click("#share-add");
    b.wait("the new share", "return !!document.querySelector('tr[data-share=\"webshare\"]')");
    b.type_into("#user-name", "webuser");
    b.type_into("#user-password", "webpass-1");
    b.click("#user-add");
    b.wait("the new user", "return !!document.querySelector('tr[data-user=\"webuser\"]')");
    // Two samples of /metrics make the charts draw.
    b.wait("the throughput figure", "return document.getElementById('throughput-now').textContent.includes('/s')");
    let shot = repo_root().join("target/test-artifacts/console.png");
    b.screenshot(&shot);
    println!("console: screenshot in {}", shot.display());
    let listed = d.ok(&["share", "list"]);
    assert!(listed.contains("webshare"), "duetctl does not list the share the browser added:\n{listed}");

    // The share and the user the browser made, used from smbclient.
    std::thread::sleep(Duration::from_millis(2500));
    let local = dir.join("local");
    std::fs::create_dir(&local).unwrap();
    std::fs::write(local.join("hello.txt"), b"made in the browser\n").unwrap();
    let smb = |user: &str, cmds: &str| {
        Command::new("smbclient")
            .args(["//127.0.0.1/webshare", "-p", &d.smb_port.to_string(), "-U", user, "-m", "SMB3", "-c", cmds])
            .current_dir(&local)
            .output()
            .unwrap()
    };
    let o = smb("webuser%webpass-1", "put hello.txt; get hello.txt back.txt");
    let t = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && !t.contains("NT_STATUS_"), "smbclient on the browser's share:\n{t}");
    assert_eq!(std::fs::read(local.join("back.txt")).unwrap(), b"made in the browser\n");

    // Snapshots and clones from the console: a snapshot of the browser's
    // share, its exclusive space once its file is overwritten, a schedule
    // set (a bad one refused) and removed, a clone from the snapshot's row,
    // the pinned snapshot's deletion refused, then allowed.
    std::fs::write(local.join("big.bin"), vec![1u8; 5 << 20]).unwrap();
    let o = smb("webuser%webpass-1", "put big.bin");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    b.wait("the share in the snapshot view", "return !!document.querySelector('#snap-share option[value=\"webshare\"]')");
    b.js("const s = document.getElementById('snap-share'); s.value = 'webshare'; s.dispatchEvent(new Event('change')); return true");
    b.type_into("#snap-name", "websnap");
    b.click("#snap-create");
    b.wait("the new snapshot", "return !!document.querySelector('tr[data-snapshot=\"websnap\"]')");
    assert!(d.ok(&["snapshot", "list", "webshare"]).contains("websnap"));
    std::fs::write(local.join("big.bin"), vec![2u8; 5 << 20]).unwrap();
    let o = smb("webuser%webpass-1", "put big.bin");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    b.wait(
        "the snapshot's exclusive space",
        "const r = document.querySelector('tr[data-snapshot=\"websnap\"]'); return !!r && r.cells[3].textContent === '5.0 MiB'",
    );
    b.type_into("#sched-every", "30s");
    b.type_into("#sched-keep", "24");
    b.click("#sched-set");
    b.wait("the short interval refused", "return document.getElementById('app-error').textContent.includes('at least 1m')");
    b.type_into("#sched-every", "1h");
    b.type_into("#sched-keep", "24");
    b.click("#sched-set");
    b.wait("the schedule", "return document.getElementById('sched-now').textContent.includes('every 1h, keep 24')");
    assert!(d.ok(&["share", "show", "webshare"]).contains("every 1h, keep 24"));
    b.click("#sched-off");
    b.wait("no schedule", "return document.getElementById('sched-now').textContent === 'No schedule.'");
    b.type_into("#clone-name", "webclone");
    b.js("document.querySelector('tr[data-snapshot=\"websnap\"] .snap-clone').click(); return true");
    b.wait(
        "the clone share",
        "const r = document.querySelector('tr[data-share=\"webclone\"]'); return !!r && r.cells[6].textContent === 'webshare@websnap'",
    );
    b.wait(
        "the pinned snapshot",
        "const r = document.querySelector('tr[data-snapshot=\"websnap\"]'); return !!r && r.cells[5].textContent === 'webclone'",
    );
    b.js("window.confirm = () => true; document.querySelector('tr[data-snapshot=\"websnap\"] .snap-delete').click(); return true");
    b.wait("the refusal", "return document.getElementById('app-error').textContent.includes('origin of clone share webclone')");
    d.ok(&["--yes", "share", "remove", "webclone"]);
    b.wait("the clone gone", "return !document.querySelector('tr[data-share=\"webclone\"]')");
    b.js("window.confirm = () => true; document.querySelector('tr[data-snapshot=\"websnap\"] .snap-delete').click(); return true");
    b.wait("the snapshot gone", "return !document.querySelector('tr[data-snapshot=\"websnap\"]')");
    assert!(!d.ok(&["snapshot", "list", "webshare"]).contains("websnap"));

    // The admin password changed from the console: the current one is
    // asked for, every session ends (this one too), the new one signs in.
    let new_password = "changed in the browser";
    b.type_into("#adminpw-current", &password);
    b.type_into("#adminpw-new", new_password);
    b.type_into("#adminpw-repeat", new_password);
    b.click("#adminpw-change");
    b.wait(
        "the sign-in form after the change",
        "return !document.getElementById('signin-view').hidden && \
         document.getElementById('signin-error').textContent.includes('Password changed')",
    );
    b.type_into("#signin-password", &password);
    b.click("#signin");
    b.wait("the old password refused", "return document.getElementById('signin-error').textContent.includes('wrong')");
    b.type_into("#signin-password", new_password);
    b.click("#signin");
    b.wait("the dashboard with the new password", "return !document.getElementById('app-view').hidden");
    let o = Command::new(duetctl())
        .args(["--addr", &d.admin, "--tls-ca", d.data.join("admin-tls/ca.pem").to_str().unwrap(), "--user", "admin", "--admin-password-stdin", "status"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(format!("{new_password}\n").as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(o.status.success(), "duetctl with the password set in the browser: {}", String::from_utf8_lossy(&o.stderr));
    let password = new_password.to_string();
    drop(b);

    // CSRF: the session cookie alone changes nothing.
    let jar = dir.join("jar");
    let sign = format!("{{\"user\":\"admin\",\"password\":\"{password}\"}}");
    let (code, body) = curl(&d, "POST", "/console/session", &[], Some(&sign), &jar);
    assert_eq!(code, 200, "sign-in: {body}");
    let csrf = serde_json::from_str::<Value>(&body).unwrap()["csrf"].as_str().unwrap().to_string();
    let jar_text = std::fs::read_to_string(&jar).unwrap();
    assert!(jar_text.contains("#HttpOnly_") && jar_text.contains("duet_session"), "the session cookie is not HttpOnly:\n{jar_text}");
    let share = r#"{"name":"forged","path":"/forged"}"#;
    let (code, body) = curl(&d, "POST", "/v1/shares", &[], Some(share), &jar);
    assert_eq!(code, 403, "a change without the CSRF token: {body}");
    let (code, _) = curl(&d, "POST", "/v1/shares", &["X-CSRF-Token: 0000".into()], Some(share), &jar);
    assert_eq!(code, 403, "a change with a wrong CSRF token");
    let (code, body) = curl(&d, "GET", "/v1/shares", &[], None, &jar);
    assert!(code == 200 && !body.contains("forged"), "{code} {body}");
    let tok = format!("X-CSRF-Token: {csrf}");
    let (code, body) = curl(&d, "POST", "/v1/shares", &[tok.clone()], Some(share), &jar);
    assert_eq!(code, 201, "a change with the token: {body}");
    let (code, _) = curl(&d, "POST", "/console/session", &["Origin: https://evil.example".into()], Some(&sign), &dir.join("jar2"));
    assert_eq!(code, 403, "a sign-in posted from another origin");
    let (code, _) = curl(&d, "DELETE", "/console/session", &[tok.clone()], None, &jar);
    assert_eq!(code, 204);
    let jar_after = dir.join("jar-old");
    std::fs::write(&jar_after, &jar_text).unwrap();
    let (code, _) = curl(&d, "GET", "/v1/shares", &[], None, &jar_after);
    assert_eq!(code, 401, "a signed-out session's cookie still works");

    // Throttling: the sixth wrong password in a row locks the address out.
    let bad = r#"{"user":"admin","password":"guess"}"#;
    let nojar = dir.join("nojar");
    for i in 0..5 {
        let (code, _) = curl(&d, "POST", "/console/session", &[], Some(bad), &nojar);
        assert_eq!(code, 401, "wrong password {i}");
    }
    let (code, _) = curl(&d, "POST", "/console/session", &[], Some(bad), &nojar);
    assert_eq!(code, 401, "the sixth is refused and starts the lockout");
    let (code, body) = curl(&d, "POST", "/console/session", &[], Some(&sign), &nojar);
    assert_eq!(code, 429, "the right password during the lockout: {body}");
    assert!(body.contains("try again in"), "{body}");
    let o = d.ctl(&["status"]);
    assert!(!o.status.success(), "the token is also refused from a locked-out address");
    std::thread::sleep(Duration::from_millis(2200));
    let (code, body) = curl(&d, "POST", "/console/session", &[], Some(&sign), &nojar);
    assert_eq!(code, 200, "after the lockout: {body}");
    let audit = d.ok(&["audit"]);
    assert!(audit.contains("console sign-in") && audit.contains("too many failed sign-ins"), "audit:\n{audit}");
}
