//! A real duetd for integration tests: free ports, its own data directory,
//! the log in `<dir>/duetd.log`, killed when dropped.

#![allow(dead_code)]

pub mod cluster;
pub mod inproc;
pub mod lossy;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn duetctl() -> PathBuf {
    let bin = repo_root().join("target/debug/duetctl");
    assert!(
        bin.exists(),
        "{} is missing: build the workspace first (cargo build --workspace)",
        bin.display()
    );
    bin
}

/// A port free on 127.0.0.1 now, never one this test process was given
/// before: the kernel may hand a just-released port out again, and two
/// daemons given one port would collide (the second fails to start).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

pub struct Daemon {
    pub child: Child,
    pub admin: String,
    pub smb_port: u16,
    pub nfs_port: u16,
    pub data: PathBuf,
    pub log: PathBuf,
    config: PathBuf,
    /// Whether it serves SMB and NFS (a node of a multi-node cluster does
    /// not, in this version): the ports waited for.
    clients: bool,
}

/// Starts duetd; on a first start, waits for the line that names the
/// default share (printed once the store is initialised).
fn spawn(config: &Path, log: &Path, first: bool) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_duetd"))
        .args(["--config", config.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    if first {
        let mut line = String::new();
        loop {
            line.clear();
            if out.read_line(&mut line).unwrap_or(0) == 0 || line.contains("share 'public'") {
                break;
            }
        }
    }
    // Keep draining stdout so that the daemon never blocks on it.
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = out.read_to_end(&mut sink);
    });
    child
}

impl Daemon {
    /// Starts duetd with admin, SMB and NFS on free ports of 127.0.0.1 and
    /// waits until all three accept connections.
    pub fn start(dir: &Path) -> Daemon {
        Daemon::start_with(dir, "")
    }

    /// As [`Daemon::start`], with extra keys for the `[smb]` table (such
    /// as `require_signing = true`).
    pub fn start_with(dir: &Path, smb_extra: &str) -> Daemon {
        Daemon::start_config(dir, smb_extra, "portmap = false")
    }

    /// As [`Daemon::start`], with extra keys for the `[smb]` and `[nfs]`
    /// tables.
    pub fn start_config(dir: &Path, smb_extra: &str, nfs_extra: &str) -> Daemon {
        Daemon::start_top(dir, "", smb_extra, nfs_extra)
    }

    /// As [`Daemon::start_config`], with top-level keys too (such as
    /// `node_id`); `nfs_extra` may end with further tables.
    pub fn start_top(dir: &Path, top: &str, smb_extra: &str, nfs_extra: &str) -> Daemon {
        Daemon::start_admin(dir, top, "", smb_extra, nfs_extra)
    }

    /// As [`Daemon::start_top`], with keys for the `[admin]` table too; with
    /// `tls = "on"` among them, `admin` is an `https://` address (duetctl
    /// then trusts the data directory's admin-tls/ca.pem).
    pub fn start_admin(dir: &Path, top: &str, admin_extra: &str, smb_extra: &str, nfs_extra: &str) -> Daemon {
        let data = dir.join("data");
        // `free_port` releases the port it found: another process may take
        // it before duetd binds it. A start on a fresh data directory that
        // fails so is tried again on other ports (the directory emptied).
        let fresh = !data.exists();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut d = Daemon::spawn_admin(dir, top, admin_extra, smb_extra, nfs_extra);
            match d.try_wait_serving(0) {
                Ok(()) => {
                    d.wait_listening();
                    return d;
                }
                Err(_) if fresh && attempt < 4 && !d.alive() && d.log_text().contains("Address already in use") => {
                    eprintln!("test daemon: a port was taken before duetd bound it; starting again on others");
                    let _ = std::fs::remove_dir_all(&data);
                    let _ = std::fs::remove_file(&d.log);
                }
                Err(why) => panic!("{why}"),
            }
        }
    }

    /// One try of [`Daemon::start_admin`]: a configuration on fresh ports,
    /// duetd spawned (its first start).
    fn spawn_admin(dir: &Path, top: &str, admin_extra: &str, smb_extra: &str, nfs_extra: &str) -> Daemon {
        let (admin_port, smb_port, nfs_port) = (free_port(), free_port(), free_port());
        let data = dir.join("data");
        let config = dir.join("duetd.toml");
        let log = dir.join("duetd.log");
        // One executor unless `top` names how many.
        let executors = if top.contains("executors") { "" } else { "executors = 1\n" };
        std::fs::write(
            &config,
            format!(
                "data_dir = {data:?}\n{executors}{top}\n[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n{admin_extra}\n\
                 [smb]\nlisten = \"127.0.0.1:{smb_port}\"\n{smb_extra}\n[nfs]\nlisten = \"127.0.0.1:{nfs_port}\"\n{nfs_extra}\n"
            ),
        )
        .unwrap();
        let child = spawn(&config, &log, true);
        let scheme = if admin_extra.contains("tls = \"on\"") { "https://" } else { "" };
        Daemon {
            child,
            admin: format!("{scheme}127.0.0.1:{admin_port}"),
            smb_port,
            nfs_port,
            data,
            log,
            config,
            clients: true,
        }
    }

    /// SIGTERM, wait for the exit, start again on the same ports and data.
    pub fn restart(&mut self) {
        let serving = self.serving_count();
        // SAFETY: kill(2) on our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "duetd did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = spawn(&self.config, &self.log, false);
        self.wait_serving(serving);
        self.wait_listening();
    }

    /// SIGKILL (no drain, no shutdown), then start again on the same
    /// ports and data: a crash and a reboot.
    pub fn kill_and_restart(&mut self) {
        let serving = self.serving_count();
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
        self.child = spawn(&self.config, &self.log, false);
        self.wait_serving(serving);
        self.wait_listening();
    }

    pub fn serving_count(&self) -> usize {
        self.log_text().matches("duetd is serving").count()
    }

    /// Waits until the log says "duetd is serving" more often than
    /// `before` times. A connect alone can be fooled: a loopback connect to
    /// a free ephemeral port may connect to itself (TCP simultaneous open).
    fn wait_serving(&mut self, before: usize) {
        if let Err(why) = self.try_wait_serving(before) {
            panic!("{why}");
        }
    }

    /// As [`Daemon::wait_serving`]; what went wrong, with the log.
    fn try_wait_serving(&mut self, before: usize) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.serving_count() <= before {
            if !self.alive() {
                return Err(format!("duetd exited while starting; log:\n{}", self.log_text()));
            }
            if Instant::now() >= deadline {
                return Err(format!("duetd did not start serving in 60 s; log:\n{}", self.log_text()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// A node of a multi-node cluster: `config_text` is the whole
    /// configuration (its `[admin] listen` must be `admin`, its
    /// `data_dir` `data`). Returns at once: the nodes of a new cluster
    /// wait for each other, so start them all, then
    /// [`Daemon::wait_started`] each.
    pub fn spawn_cluster_node(dir: &Path, admin: &str, data: &Path, config_text: &str) -> Daemon {
        let config = dir.join("duetd.toml");
        let log = dir.join("duetd.log");
        std::fs::write(&config, config_text).unwrap();
        let child = spawn(&config, &log, false);
        Daemon {
            child,
            admin: admin.to_string(),
            smb_port: 0,
            nfs_port: 0,
            data: data.to_path_buf(),
            log,
            config,
            clients: false,
        }
    }

    /// Waits until the daemon says "duetd is serving" (`before` is how
    /// often it said so before this start) and its listeners accept.
    pub fn wait_started(&mut self, before: usize) {
        self.wait_serving(before);
        self.wait_listening();
    }

    /// SIGKILL, and wait for the exit.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the killed daemon again on the same configuration and data,
    /// and waits until it serves.
    pub fn start_again(&mut self) {
        assert!(!self.alive(), "start_again on a running daemon");
        let serving = self.serving_count();
        self.child = spawn(&self.config, &self.log, false);
        self.wait_serving(serving);
        self.wait_listening();
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let port = |a: &str| a.rsplit(':').next().unwrap().parse::<u16>().unwrap();
        let ports = if self.clients {
            vec![port(&self.admin), self.smb_port, self.nfs_port]
        } else {
            vec![port(&self.admin)]
        };
        for port in ports {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "duetd did not listen on {port}; log:\n{}",
                    self.log_text()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(duetctl())
            .args([
                "--addr",
                &self.admin,
                "--data-dir",
                self.data.to_str().unwrap(),
            ])
            .args(args)
            .output()
            .unwrap()
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        assert!(
            o.status.success(),
            "duetctl {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits up to `within` for the process to exit by itself; its status.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the stopped daemon again without waiting for it to serve.
    pub fn spawn_again(&mut self) {
        assert!(!self.alive(), "spawn_again on a running daemon");
        self.child = spawn(&self.config, &self.log, false);
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (total, free, available) bytes of the volume holding `path`.
pub fn statvfs(path: &Path) -> (u64, u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs with a NUL-terminated path and a local out struct.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut st), 0);
        let u = st.f_frsize as u64;
        (st.f_blocks as u64 * u, st.f_bfree as u64 * u, st.f_bavail as u64 * u)
    }
}

/// Bytes the chunk store of data directory `data` holds, each inode once
/// (as `du` counts hard links: a chunk shared by clones, a snapshot's
/// shadow or a share clone is one inode under several names).
pub fn chunk_bytes(data: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let Ok(dirs) = std::fs::read_dir(data.join("chunks")) else { return 0 };
    for d in dirs.flatten() {
        let Ok(files) = std::fs::read_dir(d.path()) else { continue };
        for f in files.flatten() {
            if let Ok(m) = f.metadata() {
                if m.is_file() && seen.insert((m.dev(), m.ino())) {
                    total += m.blocks() * 512;
                }
            }
        }
    }
    total
}

/// Waits until the chunk store has not changed for 2.5 s (the destager
/// idles up to 1 s between rounds when it had nothing to do), at most 60 s;
/// returns its size.
pub fn settle_chunks(data: &Path) -> u64 {
    let mut last = chunk_bytes(data);
    let mut still = Duration::ZERO;
    let deadline = Instant::now() + Duration::from_secs(60);
    while still < Duration::from_millis(2500) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        let now = chunk_bytes(data);
        if now == last {
            still += Duration::from_millis(250);
        } else {
            still = Duration::ZERO;
            last = now;
        }
    }
    last
}

/// A loopback address whose port 445 forwards to duetd's SMB port:
/// smbcacls (Samba 4.17) connects to 445 or 139 only, whatever port the
/// command line names.
pub fn port_445_to(port: u16) -> String {
    use std::net::{TcpListener, TcpStream};
    let (l, ip) = (40..250)
        .find_map(|x| {
            let ip = format!("127.0.0.{x}");
            TcpListener::bind((ip.as_str(), 445)).ok().map(|l| (l, ip))
        })
        .expect("a free 127.0.0.x:445");
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let Ok(up) = TcpStream::connect(("127.0.0.1", port)) else { continue };
            let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
            let (mut c, mut up) = (c, up);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c, &mut up);
                let _ = up.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut up2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    ip
}

/// What Samba's `smbcacls --numeric` prints for `file` of `share` at
/// `host` (port 445: [`port_445_to`]), logged on as `user` (`name%password`).
pub fn smbcacls(host: &str, share: &str, file: &str, user: &str) -> String {
    let out = std::process::Command::new("smbcacls")
        .args([&format!("//{host}/{share}"), file, "-U", user, "-m", "SMB3", "--numeric"])
        .output()
        .expect("smbcacls runs (scripts/install-deps.sh installs smbclient)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "smbcacls: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// `smbcacls --numeric` changing `file`'s DACL: `op` is `-a` (add), `-D`
/// (delete) or `-M` (modify), `ace` as smbcacls prints it.
pub fn smbcacls_set(host: &str, share: &str, file: &str, user: &str, op: &str, ace: &str) -> bool {
    std::process::Command::new("smbcacls")
        .args([&format!("//{host}/{share}"), file, "-U", user, "-m", "SMB3", "--numeric", op, ace])
        .status()
        .is_ok_and(|s| s.success())
}
