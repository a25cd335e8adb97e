//! Acceptance with the real Linux kernel as the client: a real duetd, and
//! `../shared/vmclient/linux-client` booting Debian's kernel under qemu,
//! which mounts the share over NFSv3, NFSv4.1 and NFSv4.2 and runs
//! `tests/vmclient/fs-workload.sh` on each (small files, a big file, ls -l,
//! mkdir/rmdir, rename, hard and symbolic links, truncate, overwrite in the
//! middle, rm -r; contents checked by md5sum), then mounts NFS and SMB
//! (cifs, SMB 3.1.1) side by side and checks that each protocol reads what
//! the other wrote (`tests/vmclient/cross-protocol.sh`), and restarts duetd
//! under mounted NFSv3 + NFSv4.1/4.2 clients (`tests/vmclient/restart.sh`).
//!
//! Needs qemu-system-x86_64, a kernel in /boot, busybox-static and cpio
//! (scripts/install-deps.sh installs them); without them the test fails
//! and says what is missing. `DUET_VM_BIG_MB` sets the big file's size
//! (default 64 MiB for NFS, 256 MiB for cifs 3.1.1; the NFS acceptance run
//! uses 256), `DUET_LINUX_CLIENT` the
//! path of linux-client. libnfs' tools (nfs-ls, nfs-cp, nfs-cat) are
//! checked against the same kind of daemon in a second test.

mod clients;
mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::{repo_root, statvfs, Daemon};

fn linux_client() -> PathBuf {
    let path = std::env::var_os("DUET_LINUX_CLIENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/vmclient/linux-client"));
    assert!(path.exists(), "{} is missing (set DUET_LINUX_CLIENT)", path.display());
    path
}

fn have(cmd: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {cmd}")]).output().map(|o| o.status.success()).unwrap_or(false)
}

/// The kernel-client tests boot a VM each: one at a time (two emulated
/// guests on two cores slow each other past their timeouts).
static ONE_VM: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn require_vm_tools() {
    let mut missing = Vec::new();
    if !have("qemu-system-x86_64") {
        missing.push("qemu-system-x86 (qemu-system-x86_64)");
    }
    if !have("cpio") {
        missing.push("cpio");
    }
    if !std::path::Path::new("/bin/busybox").exists() {
        missing.push("busybox-static (/bin/busybox)");
    }
    let kernel = std::fs::read_dir("/boot")
        .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-")))
        .unwrap_or(false);
    if !kernel {
        missing.push("linux-image-amd64 (/boot/vmlinuz-*)");
    }
    if !have("flock") {
        missing.push("util-linux (flock)");
    }
    if !have("setfattr") || !have("getfattr") {
        missing.push("attr (setfattr, getfattr)");
    }
    if !have("modinfo") {
        missing.push("kmod (modinfo)");
    }
    assert!(
        missing.is_empty(),
        "the kernel-client test needs {}: run scripts/install-deps.sh (as root)",
        missing.join(", ")
    );
}

#[test]
fn linux_kernel_client_nfs3_nfs41_nfs42_and_cross_protocol() {
    let _vm = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    require_vm_tools();
    let client = linux_client();
    let tmp = tempfile::tempdir().unwrap();
    // A shorter NFSv4 grace period than the default 90 s: the clients of
    // other mounts that held state before a restart may never reclaim.
    let d = Daemon::start_config(tmp.path(), "", "portmap = false\ngrace_secs = 30");
    d.ok(&["user", "add", "bench", "--password", "benchpw", "--uid", "2000"]);
    // The protocol executors reload users every second.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let (nfs_port, smb_port) = (d.nfs_port, d.smb_port);
    // The guest asks for duetd's restart on this port (restart.sh).
    let d = Arc::new(Mutex::new(d));
    let ctrl = TcpListener::bind("127.0.0.1:0").unwrap();
    let ctrl_port = ctrl.local_addr().unwrap().port();
    let restarts = {
        let d = d.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            for conn in ctrl.incoming() {
                let mut conn = conn.unwrap();
                let mut line = String::new();
                let _ = BufReader::new(&conn).read_line(&mut line);
                if line.trim() == "layers" {
                    // layers.sh: a snapshot, and a writable clone of it.
                    let d = d.lock().unwrap();
                    d.ok(&["snapshot", "create", "public", "vm1"]);
                    d.ok(&["share", "clone", "public@vm1", "vmc"]);
                    // The protocol executors pick the new share up within a second.
                    std::thread::sleep(std::time::Duration::from_millis(2500));
                    let _ = conn.write_all(b"layers done\n");
                    continue;
                }
                if line.trim() != "restart" {
                    break;
                }
                d.lock().unwrap().restart();
                n += 1;
                let _ = conn.write_all(b"restarted\n");
            }
            n
        })
    };

    let big: u32 = std::env::var("DUET_VM_BIG_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let runs = format!("pseudo:4.1 v3:{big} v4.1:{big} v4.2:{big} cross:v4.2 cross:v3 xattr:4.2 layers:4.2 restart:4.1 restart:4.2");
    let scripts = repo_root().join("tests/vmclient");
    let guest = tmp.path().join("guest.sh");
    std::fs::write(
        &guest,
        format!(
            "NFS_PORT={nfs_port} SMB_PORT={smb_port} SMB_USER=bench SMB_PASS=benchpw SMB_UID=2000 \
             CTRL_PORT={ctrl_port}\nRUNS=\"{runs}\"\n{}",
            std::fs::read_to_string(scripts.join("acceptance.sh")).unwrap()
        ),
    )
    .unwrap();
    let timeout = 400 + 5 * big as u64;
    let data = d.lock().unwrap().data.clone();
    let sampler = AvailSampler::start(&data);
    let t0 = Instant::now();
    let out = Command::new(&client)
        .arg(&guest)
        .args(["--timeout", &timeout.to_string()])
        .arg("--bin")
        .arg(scripts.join("fs-workload.sh"))
        .arg("--bin")
        .arg(scripts.join("cross-protocol.sh"))
        .arg("--bin")
        .arg(scripts.join("restart.sh"))
        .arg("--bin")
        .arg(scripts.join("xattr.sh"))
        .arg("--bin")
        .arg(scripts.join("layers.sh"))
        .args(["--bin", "flock", "--bin", "setfattr", "--bin", "getfattr"])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}\nlinux-client took {:.0} s", t0.elapsed().as_secs_f64());
    // Stop the restart thread.
    if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", ctrl_port)) {
        let _ = c.write_all(b"done\n");
    }
    let restarted = restarts.join().unwrap();
    let mut d = Arc::try_unwrap(d).ok().unwrap().into_inner().unwrap();
    let log = || d.log_text().lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(text.contains("=== acceptance done"), "the guest did not finish; duetd log tail:\n{}", log());
    for run in runs.split(' ') {
        let name = run.split(':').next().unwrap();
        let want = format!("RESULT {name} PASS");
        let n = text.matches(&want).count();
        let expected = runs.split(' ').filter(|r| r.starts_with(&format!("{name}:"))).count();
        assert_eq!(n, expected, "{run} did not pass (see the guest output above); duetd log tail:\n{}", log());
    }
    assert_eq!(text.matches("WORKLOAD OK").count(), 3);
    check_df(&text, &d.data, sampler.range(), 3);
    assert_eq!(text.matches("step locks ok").count(), 3, "flock ran in every NFS run");
    assert_eq!(text.matches("CROSS OK").count(), 2);
    assert_eq!(text.matches("RESTART OK").count(), 2);
    assert_eq!(text.matches("XATTR OK").count(), 1, "NFSv4.2 xattrs and SMB EAs");
    assert_eq!(text.matches("LAYERS OK").count(), 1, "snapshots and clones through the kernel clients");
    assert_eq!(restarted, 2, "duetd was restarted twice");
    // The NFSv4 client with a file open across the restart was on the
    // list kept on disk, so the restarted daemon gave it a grace period.
    assert!(d.log_text().contains("NFSv4 grace period"), "no grace period after the restarts");
    assert!(!text.contains("FAIL"));
    assert!(d.alive(), "duetd died");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}

/// The data volume's available bytes, sampled every 200 ms from creation
/// to `range`: (smallest, largest) seen. Other processes write to the same
/// disk while the guest runs, so a df figure is checked against the whole
/// range, not one reading.
struct AvailSampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(u64, u64)>>,
}

impl AvailSampler {
    fn start(data: &std::path::Path) -> AvailSampler {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, data) = (stop.clone(), data.to_path_buf());
        let thread = std::thread::spawn(move || {
            let (mut lo, mut hi) = (u64::MAX, 0);
            loop {
                let a = statvfs(&data).2;
                (lo, hi) = (lo.min(a), hi.max(a));
                if s.load(std::sync::atomic::Ordering::Relaxed) {
                    return (lo, hi);
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        });
        AvailSampler { stop, thread: Some(thread) }
    }

    fn range(mut self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// What `df -k` showed on each mount (the "DF <1K-blocks> <available>"
/// lines fs-workload.sh prints) is the data volume's capacity: the size
/// to within the client's block rounding, the space available less
/// duetd's reserve within what the volume's own figure was while the
/// guest ran (and a little: duetd refreshes it every second).
fn check_df(text: &str, data: &std::path::Path, avail: (u64, u64), mounts: usize) {
    const RESERVE: u64 = 256 << 20;
    const SLACK: u64 = 256 << 20;
    let (total, _, _) = statvfs(data);
    let lo = avail.0.saturating_sub(RESERVE).saturating_sub(SLACK);
    let hi = avail.1.saturating_sub(RESERVE) + SLACK;
    let seen: Vec<(u64, u64)> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.trim().strip_prefix("DF ")?.split_whitespace();
            Some((w.next()?.parse::<u64>().ok()? * 1024, w.next()?.parse::<u64>().ok()? * 1024))
        })
        .collect();
    assert_eq!(seen.len(), mounts, "a DF line per mount: {seen:?}");
    for (size, avail) in seen {
        assert!(size.abs_diff(total) <= 4 << 20, "df size {size}, the data volume has {total} bytes");
        assert!((lo..=hi).contains(&avail), "df available {avail}, the data volume had {lo}..{hi} less the reserve");
    }
}

/// The kernel's cifs client with SMB 3.1.1, 3.0 and 2.1, and 3.1.1 with
/// `seal` (encryption), against a duetd that requires signing: the same
/// workload as NFS but for symlinks, chmod, FIFOs and flock (cifs without
/// POSIX extensions fakes or refuses those on the client).
#[test]
fn linux_kernel_cifs_dialects_signed_and_sealed() {
    let _vm = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    require_vm_tools();
    let client = linux_client();
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_with(tmp.path(), "require_signing = true");
    d.ok(&["user", "add", "bench", "--password", "benchpw", "--uid", "2000"]);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // The acceptance size (256 MiB) for 3.1.1, signed: about 150 s to write
    // and 100 s to read under emulation now that the workload writes 1 MiB
    // at a time; 8 MiB (the workload's least) for the other dialects.
    let big: u32 = std::env::var("DUET_VM_BIG_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    // DUET_VM_OTHER_MB: the other dialects' size (the full acceptance run
    // gives every mount 256 MiB).
    let small: u32 = std::env::var("DUET_VM_OTHER_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(big.min(8));
    let runs = format!("smb3.1.1:{big} smb3.0:{small} smb2.1:{small} smbseal:{small}");
    let scripts = repo_root().join("tests/vmclient");
    let guest = tmp.path().join("guest.sh");
    std::fs::write(
        &guest,
        format!(
            "NFS_PORT={} SMB_PORT={} SMB_USER=bench SMB_PASS=benchpw SMB_UID=2000 CTRL_PORT=0\nRUNS=\"{runs}\"\n{}",
            d.nfs_port,
            d.smb_port,
            std::fs::read_to_string(scripts.join("acceptance.sh")).unwrap()
        ),
    )
    .unwrap();
    let timeout = 1500 + 20 * big as u64;
    let sampler = AvailSampler::start(&d.data);
    let t0 = Instant::now();
    let out = Command::new(&client)
        .arg(&guest)
        .args(["--timeout", &timeout.to_string()])
        .arg("--bin")
        .arg(scripts.join("fs-workload.sh"))
        .arg("--bin")
        .arg(scripts.join("cross-protocol.sh"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}\nlinux-client took {:.0} s", t0.elapsed().as_secs_f64());
    let log = || d.log_text().lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(text.contains("=== acceptance done"), "the guest did not finish; duetd log tail:\n{}", log());
    for run in runs.split(' ') {
        let name = run.split(':').next().unwrap();
        assert!(text.contains(&format!("RESULT {name} PASS")), "{run} did not pass; duetd log tail:\n{}", log());
    }
    assert_eq!(text.matches("WORKLOAD OK").count(), 4);
    check_df(&text, &d.data, sampler.range(), 4);
    // Every mount used the dialect asked for, and seal encrypted.
    for v in ["vers=3.1.1", "vers=3.0", "vers=2.1"] {
        assert!(text.contains(v), "no mount with {v}");
    }
    assert!(text.contains(",seal"), "the sealed mount is not in /proc/mounts");
    assert!(!text.contains("FAIL"));
    assert!(d.alive(), "duetd died");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}

#[test]
fn libnfs_tools_over_nfs3() {
    for tool in ["nfs-ls", "nfs-cp", "nfs-cat"] {
        assert!(have(tool), "{tool} is missing: run scripts/install-deps.sh (libnfs-utils)");
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    let p = d.nfs_port;
    let url = |path: &str| format!("nfs://127.0.0.1/public{path}?version=3&nfsport={p}&mountport={p}");
    let src = tmp.path().join("src.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let run = |args: &[&str]| {
        let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    run(&["nfs-cp", src.to_str().unwrap(), &url("/libnfs.bin")]);
    let listing = String::from_utf8_lossy(&run(&["nfs-ls", &url("")])).into_owned();
    assert!(listing.contains("libnfs.bin") && listing.contains("3000000"), "{listing}");
    let back = run(&["nfs-cat", &url("/libnfs.bin")]);
    assert!(back == data, "nfs-cat returned {} bytes that differ", back.len());
    let dst = tmp.path().join("dst.bin");
    run(&["nfs-cp", &url("/libnfs.bin"), dst.to_str().unwrap()]);
    assert!(std::fs::read(&dst).unwrap() == data);
}

/// libnfs finds NFS and MOUNT through duet's portmapper on port 111
/// (RFC 1833), with no ports in the URL.
#[test]
fn libnfs_through_the_portmapper_on_111() {
    assert!(have("nfs-ls"), "nfs-ls is missing: run scripts/install-deps.sh (libnfs-utils)");
    let _one = PORT_111.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = std::net::TcpListener::bind("0.0.0.0:111") {
        panic!("port 111 is taken ({e}): stop rpcbind to run this test");
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start_config(tmp.path(), "", "portmap = true");
    std::fs::write(tmp.path().join("x"), b"through the portmapper").unwrap();
    let o = Command::new("nfs-cp")
        .arg(tmp.path().join("x"))
        .arg("nfs://127.0.0.1/public/pm.txt?version=3")
        .output()
        .unwrap();
    assert!(o.status.success(), "nfs-cp via port 111: {}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new("nfs-ls").arg("nfs://127.0.0.1/public?version=3").output().unwrap();
    let listing = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && listing.contains("pm.txt"), "nfs-ls via port 111: {listing} {}", String::from_utf8_lossy(&o.stderr));
    assert!(d.log_text().contains("127.0.0.1:111"), "the log does not say that portmap serves port 111");
}

static PORT_111: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Removes ANSI colour sequences (the daemon's log may carry them).
fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Issue 13's durable-handle acceptance with the kernel as client: a cifs
/// 3.0 mount holds a file open for writing; the guest asks the host (on a
/// control port) to cut its TCP connection, which the host does with
/// `ss -K` on the daemon's socket; the mount reconnects, reclaims its
/// durable handle (DH2C, MS-SMB2 3.3.5.9.12) and goes on writing the same
/// open file. The daemon's log shows the handle kept at the cut and gone
/// again before its 60 s timeout, with no other client to break it: the
/// client took it back. Needs `ss` with socket destruction (iproute2,
/// CONFIG_INET_DIAG_DESTROY, root).
#[test]
fn linux_kernel_cifs_reconnects_its_durable_handle_after_a_cut() {
    let _vm = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    require_vm_tools();
    let client = linux_client();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(tmp.path(), "[log]\nfilter = \"info,duet_appliance::frontend=debug\"", "", "portmap = false");
    d.ok(&["user", "add", "bench", "--password", "benchpw", "--uid", "2000"]);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let smb_port = d.smb_port;
    let ctrl = TcpListener::bind("127.0.0.1:0").unwrap();
    let ctrl_port = ctrl.local_addr().unwrap().port();
    let cutter = std::thread::spawn(move || {
        let (mut conn, _) = ctrl.accept().unwrap();
        let mut line = String::new();
        let _ = BufReader::new(&conn).read_line(&mut line);
        assert_eq!(line.trim(), "cut");
        let filter = format!("( sport = :{smb_port} )");
        let before = Command::new("ss").args(["-tnH", "state", "established", &filter]).output().unwrap();
        let out = Command::new("ss").args(["-K", "-tnH", "state", "established", &filter]).output().unwrap();
        let _ = conn.write_all(b"cut\n");
        (String::from_utf8_lossy(&before.stdout).lines().count(), String::from_utf8_lossy(&out.stdout).to_string())
    });
    let guest = tmp.path().join("guest.sh");
    std::fs::write(
        &guest,
        format!(
            "set -e\n\
             mount -t cifs //10.0.2.2/public /mnt -o ip=10.0.2.2,port={smb_port},username=bench,password=benchpw,vers=3.0\n\
             exec 3>/mnt/durable.txt\n\
             echo before >&3\n\
             reply=$(echo cut | nc 10.0.2.2 {ctrl_port})\n\
             echo \"CTRL $reply\"\n\
             sleep 2\n\
             echo after >&3\n\
             exec 3>&-\n\
             echo \"CONTENT $(tr '\\n' ' ' </mnt/durable.txt)\"\n\
             grep reconnects /proc/fs/cifs/Stats || true\n\
             umount /mnt\n\
             echo '=== durable done'\n"
        ),
    )
    .unwrap();
    let t0 = Instant::now();
    let out = Command::new(&client).arg(&guest).args(["--timeout", "240"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let log = plain(&d.log_text());
    eprintln!("{text}\nlinux-client took {:.0} s", t0.elapsed().as_secs_f64());
    assert!(text.contains("=== durable done"), "the guest did not finish; duetd log:\n{log}");
    let (established, killed) = cutter.join().unwrap();
    assert!(established >= 1, "no SMB connection to cut ({killed})");
    assert!(text.contains("CTRL cut"), "the cut was not acknowledged");
    assert!(text.contains("CONTENT before after "), "the open file went on being written: {text}");
    assert!(log.contains("kept=1 was=0"), "the durable handle was not kept at the cut; log:\n{log}");
    // The reattachment is logged by the 100 ms scavenger: allow it a few
    // seconds to reach the log (an expiry would take 60 s).
    let mut log = log;
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    while !log.contains("kept=0 was=1") && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        log = plain(&d.log_text());
    }
    assert!(
        log.contains("kept=0 was=1"),
        "the kept handle was not taken back (it would still be kept until its 60 s timeout); log:\n{log}"
    );
}

/// Where scripts/install-deps.sh unpacks Debian's rpcbind and nfs-common
/// for the guest (never installed on the host, whose port 111 duetd's
/// portmapper takes).
const VM_TOOLS: &str = "/opt/duet-vm-tools";

/// Issue 13's NLM acceptance with the kernel as client: an NFSv3 mount
/// without `nolock` (the guest runs rpcbind and rpc.statd), whose flock()s
/// go to duetd as NLM v4 LOCK/UNLOCK (`tests/vmclient/nlm.sh`): granted
/// uncontended, refused while an SMB client holds a byte-range lock on the
/// file, granted once it unlocks; an SMB lock is refused while the kernel
/// holds its NLM lock and granted after; a second holder in the guest is
/// refused.
#[test]
fn linux_kernel_nfs3_locks_through_nlm_conflict_with_smb() {
    use duet_protocols::smb2::create::{create_disposition, create_options};
    use duet_protocols::smb2::lock::{LockElement, LockRequest};
    use duet_protocols::smb2::message::Request;
    use duet_protocols::smb2::header::Command as Cmd;
    use duet_protocols::smb2::status::NtStatus;
    let _vm = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    let _one = PORT_111.lock().unwrap_or_else(|e| e.into_inner());
    require_vm_tools();
    for b in ["sbin/rpcbind", "sbin/rpc.statd"] {
        let p = std::path::Path::new(VM_TOOLS).join(b);
        assert!(p.exists(), "{} is missing: run scripts/install-deps.sh (it unpacks rpcbind and nfs-common there)", p.display());
    }
    if let Err(e) = TcpListener::bind("0.0.0.0:111") {
        panic!("port 111 is taken ({e}): stop rpcbind to run this test");
    }
    let client = linux_client();
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_config(tmp.path(), "", "portmap = true");
    d.ok(&["user", "add", "bench", "--password", "benchpw", "--uid", "2000"]);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let (nfs_port, smb_port) = (d.nfs_port, d.smb_port);
    let ctrl = TcpListener::bind("127.0.0.1:0").unwrap();
    let ctrl_port = ctrl.local_addr().unwrap().port();
    let host = std::thread::spawn(move || {
        let mut smb = clients::Smb::logged_on(smb_port, "bench", "benchpw", "public");
        let mut fid = None;
        let lock = |smb: &mut clients::Smb, fid: duet_protocols::smb2::FileId, flags: u32| {
            let mut storage = Vec::new();
            let l = LockRequest::new(0, fid, &[LockElement { offset: 0, length: 1, flags }], &mut storage);
            smb.call(Request::Lock(l), Cmd::LOCK).status()
        };
        let x = LockElement::EXCLUSIVE_LOCK | LockElement::FAIL_IMMEDIATELY;
        let mut log = Vec::new();
        for conn in ctrl.incoming() {
            let mut conn = conn.unwrap();
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            let f = *fid.get_or_insert_with(|| {
                let req = clients::open_req("nlm.txt", create_disposition::OPEN_IF, create_options::NON_DIRECTORY_FILE, clients::RW);
                smb.create_req(req).expect("SMB open of nlm.txt")
            });
            let reply = match line.trim() {
                "smb-lock" => if lock(&mut smb, f, x) == NtStatus::SUCCESS { "locked" } else { "refused" },
                "smb-unlock" => if lock(&mut smb, f, LockElement::UNLOCK) == NtStatus::SUCCESS { "unlocked" } else { "not-locked" },
                "smb-try" => match lock(&mut smb, f, x) {
                    NtStatus::SUCCESS => {
                        assert_eq!(lock(&mut smb, f, LockElement::UNLOCK), NtStatus::SUCCESS);
                        "granted"
                    }
                    NtStatus::LOCK_NOT_GRANTED => "conflict",
                    _ => "error",
                },
                _ => break,
            };
            log.push(format!("{} -> {reply}", line.trim()));
            let _ = conn.write_all(format!("{reply}\n").as_bytes());
        }
        log
    });
    let guest = tmp.path().join("guest.sh");
    std::fs::write(
        &guest,
        format!(
            "NFS_PORT={nfs_port} CTRL_PORT={ctrl_port}\n{}",
            std::fs::read_to_string(repo_root().join("tests/vmclient/nlm.sh")).unwrap()
        ),
    )
    .unwrap();
    let libs = format!("{VM_TOOLS}/usr/lib/x86_64-linux-gnu");
    let path = format!("{VM_TOOLS}/sbin:{}", std::env::var("PATH").unwrap_or_default());
    let out = Command::new(&client)
        .arg(&guest)
        .args(["--timeout", "300", "--bin", "rpcbind", "--bin", "rpc.statd", "--bin", "flock"])
        .env("PATH", path)
        .env("LD_LIBRARY_PATH", libs)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", ctrl_port)) {
        let _ = c.write_all(b"done\n");
    }
    let log = host.join().unwrap();
    eprintln!("host side: {log:?}");
    for step in [
        "NLM mounted without nolock",
        "NLM step uncontended ok",
        "NLM step smb holds",
        "NLM step conflict ok",
        "NLM step after smb unlock ok",
        "NLM step smb refused while held",
        "NLM step smb granted after release",
        "NLM step second holder refused",
        "NLM OK",
    ] {
        assert!(text.contains(step), "the guest never said {step:?}; duetd log tail:\n{}", d.log_text().lines().rev().take(30).collect::<Vec<_>>().join("\n"));
    }
    assert!(!text.contains("NLM FAIL"));
    assert!(d.alive(), "duetd died");
}

/// Issue 13's lease acceptance with the kernel as client
/// (`tests/vmclient/cifs-leases.sh`): 3,000 write()s of 64 bytes to one
/// file on a cifs 3.1.1 mount holding a write-caching lease take at least
/// 5 times less than on a cifs mount with `cache=none` in the same guest;
/// and five times over, data written through cifs and still cached there
/// (the file open) reads complete through an NFSv4.2 mount of the same
/// share (its OPEN breaks the lease, the client flushes first), and data
/// NFS writes over a file cifs has cached reads new through cifs (the
/// WRITE breaks its read caching). With NFS's breaks disabled the
/// NFS-to-cifs check fails in its first round (tried); the cifs-to-NFS
/// check still passed then, so the 6.1 client's flush there is not shown
/// to come from the break.
#[test]
fn linux_kernel_cifs_leases_cache_writes_and_stay_coherent_with_nfs() {
    let _vm = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    require_vm_tools();
    let client = linux_client();
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_config(tmp.path(), "", "portmap = false");
    d.ok(&["user", "add", "bench", "--password", "benchpw", "--uid", "2000"]);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let guest = tmp.path().join("guest.sh");
    std::fs::write(
        &guest,
        format!(
            "NFS_PORT={} SMB_PORT={} SMB_USER=bench SMB_PASS=benchpw SMB_UID=2000\n{}",
            d.nfs_port,
            d.smb_port,
            std::fs::read_to_string(repo_root().join("tests/vmclient/cifs-leases.sh")).unwrap()
        ),
    )
    .unwrap();
    let out = Command::new(&client).arg(&guest).args(["--timeout", "400"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    let log = || d.log_text().lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(text.contains("LEASES OK"), "the guest did not finish; duetd log tail:\n{}", log());
    assert!(!text.contains("LEASES FAIL"));
    for i in 1..=5 {
        assert!(text.contains(&format!("LEASES cifs-to-nfs {i} ok")) && text.contains(&format!("LEASES nfs-to-cifs {i} ok")));
    }
    let speedup: u64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("LEASES SPEEDUP "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the guest printed the speedup");
    // In tenths: at least 5x.
    assert!(speedup >= 50, "small writes under a lease were only {}.{}x faster than cache=none", speedup / 10, speedup % 10);
    assert!(d.alive(), "duetd died");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}

/// Issue 17's ACL acceptance with the kernel as NFS client
/// (`tests/vmclient/acl.sh`): a DACL added with Samba's smbcacls denies a
/// uid over an NFSv4.2 mount while another reads; `nfs4_getfacl` shows
/// it; an ACE added with `nfs4_setfacl` shows in smbcacls and denies; a
/// chmod over NFS leaves smbcacls the mode's DACL.
#[test]
fn linux_kernel_nfs42_acls_meet_smbcacls() {
    let _vm = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    require_vm_tools();
    let tool = std::path::Path::new(VM_TOOLS).join("usr/bin/nfs4_setfacl");
    assert!(tool.exists(), "{} is missing: run scripts/install-deps.sh (it unpacks nfs4-acl-tools there)", tool.display());
    let client = linux_client();
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_config(tmp.path(), "", "portmap = false");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "3001", "--gid", "3001"]);
    d.ok(&["share", "add", "acl", "--path", "/acl", "--no-root-squash"]);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let host = common::port_445_to(d.smb_port);
    let ctrl = TcpListener::bind("127.0.0.1:0").unwrap();
    let ctrl_port = ctrl.local_addr().unwrap().port();
    // Whether an allow ACE for Everyone in smbcacls' output grants READ_DATA.
    fn everyone_reads(t: &str) -> bool {
        t.lines().filter_map(|l| l.strip_prefix("ACL:S-1-1-0:0/0x0/0x")).any(|m| u32::from_str_radix(m.trim(), 16).is_ok_and(|m| m & 1 != 0))
    }
    let side = std::thread::spawn(move || {
        let mut log = Vec::new();
        for conn in ctrl.incoming() {
            let mut conn = conn.unwrap();
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            let reply = match line.trim() {
                "deny-3002" => {
                    let ok = common::smbcacls_set(&host, "acl", "acl.txt", "alice%alicepw", "-a", "ACL:S-1-22-1-3002:1/0x0/0x00000001");
                    if ok { "ok" } else { "failed" }.to_string()
                }
                "show" => {
                    let t = common::smbcacls(&host, "acl", "acl.txt", "alice%alicepw");
                    log.push(t.clone());
                    if t.contains("ACL:S-1-22-1-3003:1/0x0/0x00000001") && t.contains("ACL:S-1-22-1-3002:1/0x0/0x00000001") {
                        "3003-denied".to_string()
                    } else if !t.contains("S-1-22-1-3002") && !t.contains("S-1-22-1-3003") && !everyone_reads(&t) {
                        "mode-only".to_string()
                    } else {
                        "other".to_string()
                    }
                }
                _ => break,
            };
            let _ = conn.write_all(format!("{reply}\n").as_bytes());
        }
        log
    });
    let guest = tmp.path().join("guest.sh");
    std::fs::write(
        &guest,
        format!("NFS_PORT={} CTRL_PORT={ctrl_port}\n{}", d.nfs_port, std::fs::read_to_string(repo_root().join("tests/vmclient/acl.sh")).unwrap()),
    )
    .unwrap();
    let path = format!("{VM_TOOLS}/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
    let out = Command::new(&client)
        .arg(&guest)
        .args(["--timeout", "300", "--bin", "nfs4_setfacl", "--bin", "nfs4_getfacl"])
        .env("PATH", path)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", ctrl_port)) {
        let _ = c.write_all(b"done\n");
    }
    let log = side.join().unwrap();
    eprintln!("smbcacls on the host:\n{}", log.join("\n"));
    for step in [
        "ACL step smb dacl denies 3002",
        "ACL step 3003 reads",
        "ACL step nfs4_getfacl shows the deny",
        "ACL step smbcacls shows nfs4_setfacl's ace",
        "ACL step nfs4 acl denies 3003",
        "ACL step chmod shows in the dacl",
        "ACL OK",
    ] {
        assert!(text.contains(step), "the guest never said {step:?}; duetd log tail:\n{}", d.log_text().lines().rev().take(30).collect::<Vec<_>>().join("\n"));
    }
    assert!(!text.contains("ACL FAIL"));
    assert!(d.alive(), "duetd died");
}
