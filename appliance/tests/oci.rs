//! The OCI container image as admins run it: `scripts/build-oci.sh` builds
//! `target/images/duet-oci.tar` from Debian 12 packages (mmdebstrap, umoci;
//! no registry) and the binaries this test run built; podman loads and
//! runs it with a bind-mounted data volume and the protocol ports
//! published on 127.0.0.1 (free ports):
//!
//! 1. The container becomes healthy (`podman healthcheck run` with the
//!    image's `duetctl status` health check); the first admin password is
//!    generated root-only (0600, uid 0) into the volume and is not in
//!    `podman logs`; duetctl signs in with it and adds a user.
//! 2. smbclient writes a file, libnfs (nfs-cp, NFSv3) reads it back byte
//!    for byte and writes a second one.
//! 3. `podman stop` sends SIGTERM: duetd drains ("stopping: draining",
//!    "stopped") and exits 0.
//! 4. A new container on the same volume serves both files, byte-exact,
//!    over both protocols, and the generated password still signs in.
//!
//! Needs root and what scripts/install-deps.sh installs (podman, runc,
//! umoci, mmdebstrap, smbclient, libnfs-utils); a missing tool fails the
//! test. The podman options this machine needs are explained in
//! images/README.md. `DUET_OCI_IMAGE=path/to/duet-oci.tar` skips the build.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{duetctl, free_port, repo_root};

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().map(|o| o.status.success()).unwrap_or(false)
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn podman(args: &[&str]) -> Output {
    Command::new("podman").args(args).output().expect("podman runs")
}

fn podman_ok(args: &[&str]) -> String {
    let o = podman(args);
    assert!(o.status.success(), "podman {args:?}:\n{}", text(&o));
    text(&o)
}

struct Ports {
    smb: u16,
    nfs: u16,
    admin: u16,
}

/// The container, removed (forcibly) when dropped.
struct Container {
    name: String,
}

impl Container {
    fn run(name: &str, volume: &Path, ports: &Ports) -> Container {
        let vol = format!("{}:/var/lib/duet", volume.display());
        let (ps, pn, pa) =
            (format!("127.0.0.1:{}:445", ports.smb), format!("127.0.0.1:{}:2049", ports.nfs), format!("127.0.0.1:{}:7445", ports.admin));
        podman_ok(&[
            "run",
            "-d",
            "--name",
            name,
            "--runtime",
            "runc",
            "--security-opt",
            "seccomp=unconfined",
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=4096:4096",
            "--health-cmd",
            "/usr/local/lib/duet/healthcheck",
            "--health-interval",
            "disable",
            "-v",
            &vol,
            "-p",
            &ps,
            "-p",
            &pn,
            "-p",
            &pa,
            "localhost/duet:latest",
        ]);
        let c = Container { name: name.to_string() };
        let t0 = Instant::now();
        loop {
            if podman(&["healthcheck", "run", name]).status.success() {
                println!("oci: healthy after {} ms", t0.elapsed().as_millis());
                return c;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                panic!("the container is not healthy after 60 s; its log:\n{}", c.logs());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn logs(&self) -> String {
        text(&podman(&["logs", &self.name]))
    }

    /// `podman stop` (SIGTERM, 30 s grace); returns the exit code.
    fn stop(&self) -> i64 {
        let t = Instant::now();
        podman_ok(&["stop", "-t", "30", &self.name]);
        println!("oci: stopped in {} ms", t.elapsed().as_millis());
        let code = podman_ok(&["inspect", &self.name, "--format", "{{.State.ExitCode}}"]);
        code.trim().parse().unwrap_or_else(|_| panic!("exit code {code:?}"))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rm", "-f", &self.name]).output();
    }
}

fn image() -> PathBuf {
    if let Some(p) = std::env::var_os("DUET_OCI_IMAGE") {
        return PathBuf::from(p);
    }
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_duetd")).parent().unwrap().to_path_buf();
    let out = repo_root().join("target/images");
    let t = Instant::now();
    let o = Command::new(repo_root().join("scripts/build-oci.sh"))
        .env("DUET_BIN_DIR", &bin_dir)
        .env("DUET_IMAGE_OUT", &out)
        .output()
        .expect("scripts/build-oci.sh runs");
    assert!(o.status.success(), "scripts/build-oci.sh failed:\n{}", text(&o));
    println!("{}oci: built in {:.0} s", text(&o), t.elapsed().as_secs_f64());
    out.join("duet-oci.tar")
}

#[test]
fn container_image_runs_serves_drains_and_keeps_its_volume() {
    for tool in ["podman", "runc", "umoci", "mmdebstrap", "smbclient", "nfs-cp"] {
        assert!(have(tool), "{tool} is missing: run scripts/install-deps.sh");
    }
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "the container test needs root (the image build and rootful podman)");
    let tar = image();
    assert!(tar.exists(), "{} is missing", tar.display());
    let loaded = podman_ok(&["load", "-i", tar.to_str().unwrap()]);
    assert!(loaded.contains("localhost/duet:latest"), "podman load:\n{loaded}");

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let volume = dir.join("vol");
    std::fs::create_dir(&volume).unwrap();
    let ports = Ports { smb: free_port(), nfs: free_port(), admin: free_port() };
    let name = format!("duet-oci-test-{}", std::process::id());

    // 1. First start: healthy, the password root-only and not in the log.
    let c = Container::run(&name, &volume, &ports);
    let pw_path = volume.join("admin-password");
    let meta = std::fs::metadata(&pw_path).expect("the first start wrote the admin password into the volume");
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o600, 0), "the admin password file is not root's 0600");
    let password = std::fs::read_to_string(&pw_path).unwrap().trim().to_string();
    assert!(password.len() >= 12, "a short generated password: {} chars", password.len());
    let log = c.logs();
    assert!(log.contains("serving"), "no serving line in the log:\n{log}");
    assert!(!log.contains(&password), "the admin password is in podman logs");

    let pwfile = dir.join("pw");
    std::fs::write(&pwfile, format!("{password}\n")).unwrap();
    let upw = dir.join("upw");
    std::fs::write(&upw, "oci-pass-1\n").unwrap();
    // The admin listener is on every address of the container, so it serves
    // TLS (the host's connections arrive from off loopback); duetctl
    // trusts the CA duetd made in the volume.
    let addr = format!("https://127.0.0.1:{}", ports.admin);
    let ca = volume.join("admin-tls/ca.pem");
    assert!(ca.exists(), "duetd made no admin-tls/ca.pem in the volume");
    let ctl = |args: &[&str]| -> Output {
        Command::new(duetctl())
            .args(["--addr", &addr, "--tls-ca", ca.to_str().unwrap(), "--user", "admin", "--admin-password-file", pwfile.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    };
    let o = ctl(&["user", "add", "ocitest", "--password-file", upw.to_str().unwrap()]);
    assert!(o.status.success(), "duetctl user add:\n{}", text(&o));
    // The executors pick up new users within about a second.
    std::thread::sleep(Duration::from_millis(2500));

    // 2. SMB write, NFS read; NFS write.
    let local = dir.join("local");
    std::fs::create_dir(&local).unwrap();
    let a: Vec<u8> = (0..1_500_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let b: Vec<u8> = (0..700_000u32).map(|i| (i.wrapping_mul(40_503) >> 5) as u8).collect();
    std::fs::write(local.join("a.bin"), &a).unwrap();
    std::fs::write(local.join("b.bin"), &b).unwrap();
    let smb = |cmds: &str| {
        let o = Command::new("smbclient")
            .args(["//127.0.0.1/public", "-p", &ports.smb.to_string(), "-U", "ocitest%oci-pass-1", "-m", "SMB3", "-c", cmds])
            .current_dir(&local)
            .output()
            .unwrap();
        let t = text(&o);
        assert!(o.status.success() && !t.contains("NT_STATUS_"), "smbclient -c {cmds:?}:\n{t}");
    };
    let nfs_url = |file: &str| format!("nfs://127.0.0.1/public/{file}?version=3&nfsport={0}&mountport={0}", ports.nfs);
    let nfs_cp = |from: &str, to: &str| {
        let o = Command::new("nfs-cp").args([from, to]).current_dir(&local).output().unwrap();
        assert!(o.status.success(), "nfs-cp {from} {to}:\n{}", text(&o));
    };
    smb("put a.bin");
    nfs_cp(&nfs_url("a.bin"), "a.nfs");
    assert!(std::fs::read(local.join("a.nfs")).unwrap() == a, "NFS read other bytes than SMB wrote");
    nfs_cp("b.bin", &nfs_url("b.bin"));

    // 3. SIGTERM drains and exits 0.
    assert_eq!(c.stop(), 0, "duetd did not exit 0 on SIGTERM; log:\n{}", c.logs());
    let log = c.logs();
    assert!(log.contains("stopping: draining"), "no drain line:\n{log}");
    assert!(log.lines().any(|l| l.contains("INFO") && l.contains("stopped")), "no stopped line:\n{log}");
    drop(c);

    // 4. A new container on the same volume serves both files.
    let c = Container::run(&name, &volume, &ports);
    nfs_cp(&nfs_url("b.bin"), "b.nfs");
    assert!(std::fs::read(local.join("b.nfs")).unwrap() == b, "b.bin (NFS-written) read back other bytes after a restart");
    // (b.bin belongs to the user NFS root is squashed to; the permission
    // model refuses it to the SMB user, so it is read back over NFS.)
    smb("get a.bin a.smb");
    assert!(std::fs::read(local.join("a.smb")).unwrap() == a, "a.bin read back other bytes over SMB after a restart");
    let o = ctl(&["status"]);
    assert!(o.status.success(), "the generated admin password no longer signs in:\n{}", text(&o));
    assert_eq!(c.stop(), 0, "the second container did not exit 0");
}
