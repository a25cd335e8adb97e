//! The appliance as admins install it: `scripts/build-image.sh` builds the
//! bootable disk image from Debian 12 packages and the binaries this test
//! run built (target/debug); qemu boots it (BIOS, SeaBIOS) with the
//! protocol ports forwarded to 127.0.0.1, three times, on a 3 GiB overlay:
//!
//! 1. First boot: duetd answers /metrics, then the guest powers off (ACPI
//!    power button, logind). The journal (read with journalctl from the
//!    disk) has systemd's "Started duetd.service" after duetd's "serving"
//!    line: a Type=notify unit is started only on READY=1. From the disk, the test checks that
//!    the data partition grew from the 256 MiB it was built with to the end
//!    of the 3 GiB disk, that the admin password is in a root-only file
//!    (0600, root:root), that duetd's files belong to the `duet` user, and
//!    that the password is nowhere on the root partition (the journal is
//!    there: duetd's first-start lines are, as a control).
//! 2. Second boot (the state of the first kept): the admin signs in with
//!    that password (duetctl over the forwarded admin port), adds a user;
//!    smbclient puts and gets a file, libnfs (nfs-ls, nfs-cp) lists and
//!    reads it back over NFSv3.
//! 3. Third boot: the file written over SMB before the power-off reads
//!    back byte for byte over NFS.
//!
//! Needs root (loop mounts, as the build does) and the tools that
//! scripts/install-deps.sh installs; a missing one fails the test. Without
//! KVM (TCG) a boot takes a few minutes; the times are printed.
//! `DUET_IMAGE=path/to/duet.qcow2` skips the build and boots that image.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{duetctl, free_port, repo_root};

const GIB: u64 = 1 << 30;
const BUILT_DATA_BYTES: u64 = 256 << 20;

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().map(|o| o.status.success()).unwrap_or(false)
}

fn run(args: &[&str]) -> Vec<u8> {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    assert!(
        o.status.success(),
        "{args:?} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// One qemu process, killed when dropped.
struct Vm {
    child: Child,
    console: PathBuf,
    monitor: PathBuf,
    ports: Ports,
}

#[derive(Clone, Copy)]
struct Ports {
    smb: u16,
    nfs: u16,
    admin: u16,
}

impl Vm {
    fn boot(disk: &Path, dir: &Path, n: u32, ports: Ports) -> Vm {
        let console = dir.join(format!("console-{n}.log"));
        let monitor = dir.join(format!("monitor-{n}.sock"));
        let nic = format!(
            "user,hostfwd=tcp:127.0.0.1:{}-:445,hostfwd=tcp:127.0.0.1:{}-:2049,hostfwd=tcp:127.0.0.1:{}-:7445",
            ports.smb, ports.nfs, ports.admin
        );
        let child = Command::new("qemu-system-x86_64")
            .args(["-accel", &accel(), "-m", "1024", "-smp", "1"])
            .args(["-drive", &format!("file={},if=virtio", disk.display())])
            .args(["-nic", &nic])
            .args(["-display", "none", "-no-reboot"])
            .args(["-serial", &format!("file:{}", console.display())])
            .args(["-monitor", &format!("unix:{},server=on,wait=off", monitor.display())])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("qemu-{n}.log"))).unwrap())
            .spawn()
            .expect("qemu-system-x86_64 runs (scripts/install-deps.sh installs qemu-system-x86)");
        Vm { child, console, monitor, ports }
    }

    /// The serial console so far, without terminal escapes (systemd
    /// colours unit names).
    fn console_text(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(&std::fs::read(&self.console).unwrap_or_default()))
    }

    fn fail(&mut self, what: &str) -> ! {
        let text = self.console_text();
        let tail: String = text.chars().rev().take(6000).collect::<Vec<_>>().into_iter().rev().collect();
        panic!("{what}\n--- guest console (last part) ---\n{tail}");
    }

    /// Waits until the admin listener answers GET /metrics through the
    /// forwarded port (that systemd saw READY=1 is checked in the journal).
    fn wait_ready(&mut self, timeout: Duration) {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                self.fail(&format!("qemu exited ({st}) before duetd was ready"));
            }
            if metrics_answer(self.ports.admin) {
                return;
            }
            if t.elapsed() > timeout {
                self.fail(&format!("duetd not answering GET /metrics within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }

    /// ACPI power button, then waits for qemu to exit.
    fn power_off(&mut self, timeout: Duration) {
        let mut m = std::os::unix::net::UnixStream::connect(&self.monitor).expect("qemu monitor socket");
        m.write_all(b"system_powerdown\n").unwrap();
        let t = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            if t.elapsed() > timeout {
                self.fail(&format!("the guest did not power off within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Text without terminal escapes (systemd colours unit names on the
/// console, duetd's tracing colours field names).
fn strip_ansi(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
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

/// TCG unless `DUET_QEMU_ACCEL` says otherwise (`kvm` where /dev/kvm
/// works; nested KVM here fails inside SeaBIOS).
fn accel() -> String {
    std::env::var("DUET_QEMU_ACCEL").unwrap_or_else(|_| "tcg".into())
}

/// Whether duetd answers `GET /metrics` on the forwarded admin port: over
/// TLS, since the guest sees the forwarded connection come from off
/// loopback (the certificate is not checked here; duetctl checks it).
fn metrics_answer(port: u16) -> bool {
    let o = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-m", "10", "-w", "%{http_code}", &format!("https://127.0.0.1:{port}/metrics")])
        .output();
    matches!(o, Ok(o) if o.stdout == b"200")
}

/// duetd's CPU seconds by thread, from its /metrics (for the log: which
/// thread is busy when the guest is slow).
fn thread_cpu(port: u16) -> String {
    let o = Command::new("curl")
        .args(["-sk", "-m", "30", &format!("https://127.0.0.1:{port}/metrics")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    o.lines().filter(|l| l.starts_with("duet_thread_cpu_seconds_total")).collect::<Vec<_>>().join("\n")
}

/// An MBR partition: (start, length) in bytes.
fn partitions(raw: &Path) -> Vec<(u64, u64)> {
    let mut mbr = [0u8; 512];
    std::fs::File::open(raw).unwrap().read_exact(&mut mbr).unwrap();
    assert_eq!(&mbr[510..], &[0x55, 0xaa], "no MBR on the disk");
    (0..4)
        .map(|i| {
            let e = &mbr[446 + 16 * i..446 + 16 * (i + 1)];
            let lba = u32::from_le_bytes(e[8..12].try_into().unwrap()) as u64;
            let n = u32::from_le_bytes(e[12..16].try_into().unwrap()) as u64;
            (lba * 512, n * 512)
        })
        .filter(|p| p.1 > 0)
        .collect()
}

/// Whether `needle` occurs in the byte range of `file` (MiB-aligned):
/// grep over dd, far faster than a byte loop in a debug build.
fn contains(file: &Path, start: u64, len: u64, needle: &[u8]) -> bool {
    const MIB: u64 = 1 << 20;
    assert!(start % MIB == 0 && len % MIB == 0, "partition not MiB-aligned: {start} {len}");
    let st = Command::new("sh")
        .args(["-c", r#"dd if="$F" bs=1M skip="$S" count="$C" status=none | grep -aqF -e "$N""#])
        .env("F", file)
        .env("S", (start / MIB).to_string())
        .env("C", (len / MIB).to_string())
        .env("N", std::str::from_utf8(needle).unwrap())
        .status()
        .unwrap();
    match st.code() {
        Some(0) => true,
        Some(1) => false,
        _ => panic!("dd | grep failed: {st}"),
    }
}

/// Mounts a partition of a raw disk read-only; unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn new(raw: &Path, (start, len): (u64, u64), at: &Path) -> Mounted {
        std::fs::create_dir_all(at).unwrap();
        run(&[
            "mount",
            "-o",
            &format!("ro,loop,offset={start},sizelimit={len}"),
            raw.to_str().unwrap(),
            at.to_str().unwrap(),
        ]);
        Mounted(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The last lines of the journal of the guest's last boot, read from the
/// powered-off disk (for a failure message).
fn journal_tail(disk: &Path, dir: &Path) -> String {
    let raw = dir.join("disk-after.raw");
    run(&["qemu-img", "convert", "-f", "qcow2", "-O", "raw", disk.to_str().unwrap(), raw.to_str().unwrap()]);
    let parts = partitions(&raw);
    let m = Mounted::new(&raw, parts[0], &dir.join("root-after"));
    let journal = m.0.join("var/log/journal");
    let log = strip_ansi(&String::from_utf8_lossy(&run(&[
        "journalctl",
        "--directory",
        journal.to_str().unwrap(),
        "--no-pager",
        "-b",
        "0",
        "-o",
        "short-monotonic",
    ])));
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(300)..].join("\n")
}

fn uid_of(passwd: &str, user: &str) -> Option<u32> {
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == user).then(|| f[2].parse().ok()).flatten()
    })
}

#[test]
fn disk_image_boots_serves_and_keeps_the_password_off_the_journal() {
    let t0 = Instant::now();
    for tool in ["qemu-system-x86_64", "qemu-img", "mount", "umount", "journalctl", "smbclient", "nfs-ls", "nfs-cp"] {
        assert!(have(tool), "{tool} is missing: run scripts/install-deps.sh");
    }
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "the image test needs root (loop mounts); run it as root");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    // The image, from this run's binaries.
    let image = match std::env::var_os("DUET_IMAGE") {
        Some(p) => PathBuf::from(p),
        None => {
            let bin_dir = Path::new(env!("CARGO_BIN_EXE_duetd")).parent().unwrap().to_path_buf();
            assert!(duetctl().starts_with(&bin_dir) || bin_dir.join("duetctl").exists(), "duetctl is not next to duetd");
            let out = repo_root().join("target/images");
            let o = Command::new(repo_root().join("scripts/build-image.sh"))
                .arg("qcow2")
                .env("DUET_BIN_DIR", &bin_dir)
                .env("DUET_IMAGE_OUT", &out)
                .output()
                .expect("scripts/build-image.sh runs");
            let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            assert!(o.status.success(), "scripts/build-image.sh failed:\n{text}");
            println!("{text}");
            out.join("duet.qcow2")
        }
    };
    assert!(image.exists(), "{} is missing", image.display());
    let t_build = t0.elapsed();
    println!("image: built in {:.0} s", t_build.as_secs_f64());

    // A 3 GiB overlay: the data partition must grow into the extra GiB.
    let disk = dir.join("disk.qcow2");
    run(&[
        "qemu-img",
        "create",
        "-q",
        "-f",
        "qcow2",
        "-F",
        "qcow2",
        "-b",
        image.canonicalize().unwrap().to_str().unwrap(),
        disk.to_str().unwrap(),
        "3G",
    ]);
    let ports = Ports { smb: free_port(), nfs: free_port(), admin: free_port() };
    let boot_timeout = Duration::from_secs(480);

    // First boot.
    let t = Instant::now();
    let mut vm = Vm::boot(&disk, dir, 1, ports);
    vm.wait_ready(boot_timeout);
    let t_boot1 = t.elapsed();
    println!("image: first boot ready in {:.0} s", t_boot1.as_secs_f64());
    let console = vm.console_text();
    assert!(
        console.contains("admin password generated into /var/lib/duet/admin-password"),
        "the console does not say where the admin password is"
    );
    vm.power_off(Duration::from_secs(180));
    drop(vm);

    // The disk, from outside.
    let t = Instant::now();
    let raw = dir.join("disk.raw");
    run(&["qemu-img", "convert", "-f", "qcow2", "-O", "raw", disk.to_str().unwrap(), raw.to_str().unwrap()]);
    let parts = partitions(&raw);
    assert_eq!(parts.len(), 2, "partitions: {parts:?}");
    let (root, data) = (parts[0], parts[1]);
    assert!(data.0 + data.1 > 3 * GIB - (16 << 20), "the data partition did not grow to the end of the disk: {data:?}");
    assert!(data.1 > BUILT_DATA_BYTES + GIB, "the data partition is {} bytes", data.1);
    let password = {
        let m = Mounted::new(&raw, data, &dir.join("data"));
        let (total, _, _) = common::statvfs(&m.0);
        assert!(total > BUILT_DATA_BYTES + GIB, "the data file system was not grown: {total} bytes");
        let pwfile = m.0.join("admin-password");
        let md = std::fs::metadata(&pwfile).expect("/var/lib/duet/admin-password exists");
        assert_eq!(md.mode() & 0o7777, 0o600, "admin-password mode {:o}", md.mode());
        assert_eq!((md.uid(), md.gid()), (0, 0), "admin-password is not root's");
        let pw = std::fs::read_to_string(&pwfile).unwrap().trim().to_string();
        assert!(pw.len() >= 16, "a short admin password: {} characters", pw.len());
        let token = std::fs::metadata(m.0.join("admin.token")).expect("duetd wrote its token file");
        // The admin listener is on every address, so it serves TLS with the
        // certificate duetd made; duetctl trusts its CA.
        std::fs::copy(m.0.join("admin-tls/ca.pem"), dir.join("ca.pem")).expect("duetd made admin-tls/ca.pem");
        let top = std::fs::metadata(&m.0).unwrap();
        println!("image: data file system {total} bytes; token file uid {}, /var/lib/duet uid {}", token.uid(), top.uid());
        (pw, token.uid(), top.uid(), total)
    };
    let (password, token_uid, top_uid, _) = password;
    {
        let m = Mounted::new(&raw, root, &dir.join("root"));
        let passwd = std::fs::read_to_string(m.0.join("etc/passwd")).unwrap();
        let duet = uid_of(&passwd, "duet").expect("the image has a duet user");
        assert_ne!(duet, 0);
        assert_eq!(token_uid, duet, "duetd did not run as duet (its token file's owner)");
        assert_eq!(top_uid, duet, "/var/lib/duet does not belong to duet");
        let journal = m.0.join("var/log/journal");
        assert!(
            std::fs::read_dir(&journal).map(|d| d.count() > 0).unwrap_or(false),
            "no persistent journal in the image"
        );
        // Type=notify: systemd logs "Started" only once duetd sent
        // READY=1, which it does after every listener is bound.
        let log = strip_ansi(&String::from_utf8_lossy(&run(&[
            "journalctl",
            "--directory",
            journal.to_str().unwrap(),
            "--no-pager",
            "-o",
            "cat",
        ])));
        let serving = log.find("duetd is serving").expect("duetd's 'serving' line is not in the journal");
        let started = log
            .find("Started duetd.service")
            .unwrap_or_else(|| panic!("systemd never saw duetd ready (READY=1):\n{log}"));
        assert!(serving < started, "systemd called duetd started before it was serving");
        assert!(log.contains("listening protocol=smb addr=0.0.0.0:445"), "duetd did not bind 445");
        assert!(!log.contains(&password), "the admin password is in the journal");
        assert!(!log.contains("Failed to start duetd"), "duetd failed to start at least once:\n{log}");
    }
    // The journal (on the root partition) holds duetd's first-start lines
    // but not the password; nor does anything else on the root partition.
    assert!(
        contains(&raw, root.0, root.1, b"duetd: first start in /var/lib/duet"),
        "duetd's first-start line is not in the journal on the root partition"
    );
    assert!(
        contains(&raw, root.0, root.1, b"password: the one in the credential admin-password (not shown)"),
        "duetd did not take the password from the credential"
    );
    assert!(!contains(&raw, root.0, root.1, password.as_bytes()), "the admin password is on the root partition (journal?)");
    std::fs::remove_file(&raw).unwrap();
    println!("image: disk checked in {:.0} s", t.elapsed().as_secs_f64());

    // Second boot: the state of the first is kept; sign in, serve.
    let t = Instant::now();
    let mut vm = Vm::boot(&disk, dir, 2, ports);
    vm.wait_ready(boot_timeout);
    let t_boot2 = t.elapsed();
    println!("image: second boot ready in {:.0} s", t_boot2.as_secs_f64());
    println!("image: duetd's threads (CPU s):\n{}", thread_cpu(ports.admin));
    let pwfile = dir.join("admin-password");
    std::fs::write(&pwfile, format!("{password}\n")).unwrap();
    let userpw = dir.join("user-password");
    std::fs::write(&userpw, "imagepw-1\n").unwrap();
    let addr = format!("https://127.0.0.1:{}", ports.admin);
    let ca = dir.join("ca.pem");
    let ctl = |args: &[&str]| -> String {
        let o = Command::new(duetctl())
            .args(["--addr", &addr, "--tls-ca", ca.to_str().unwrap(), "--user", "admin", "--admin-password-file", pwfile.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "duetctl {args:?}:\n{text}");
        text
    };
    let status = ctl(&["status"]);
    println!("image: duetctl status:\n{status}");
    ctl(&["user", "add", "imguser", "--password-file", userpw.to_str().unwrap()]);
    // A wrong password is refused.
    let bad = dir.join("bad-password");
    std::fs::write(&bad, "not-the-password\n").unwrap();
    let o = Command::new(duetctl())
        .args(["--addr", &addr, "--tls-ca", ca.to_str().unwrap(), "--user", "admin", "--admin-password-file", bad.to_str().unwrap(), "status"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "a wrong admin password was accepted");
    std::thread::sleep(Duration::from_millis(2500));

    let local = dir.join("local");
    std::fs::create_dir_all(&local).unwrap();
    let body: Vec<u8> = (0..1_500_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    std::fs::write(local.join("from-smb.bin"), &body).unwrap();
    let smb = |cmds: &str| -> Result<String, String> {
        let o = Command::new("smbclient")
            .args(["//127.0.0.1/public", "-p", &ports.smb.to_string(), "-U", "imguser%imagepw-1", "-m", "SMB3", "-c", cmds])
            .current_dir(&local)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        if o.status.success() && !text.contains("NT_STATUS_") {
            Ok(text)
        } else {
            Err(format!("smbclient -c {cmds:?}:\n{text}"))
        }
    };
    println!("image: duetd's threads (CPU s) before smbclient:\n{}", thread_cpu(ports.admin));
    if let Err(e) = smb("put from-smb.bin; get from-smb.bin back-smb.bin") {
        eprintln!("image: duetd's threads (CPU s) after the failure:\n{}", thread_cpu(ports.admin));
        // The guest's own view: power it off and read this boot's journal.
        vm.power_off(Duration::from_secs(180));
        drop(vm);
        panic!("{e}\n--- guest journal, second boot (last part) ---\n{}", journal_tail(&disk, dir));
    }
    assert!(std::fs::read(local.join("back-smb.bin")).unwrap() == body, "smbclient read back other bytes");
    let p = ports.nfs;
    let url = |path: &str| format!("nfs://127.0.0.1/public{path}?version=3&nfsport={p}&mountport={p}");
    let listing = String::from_utf8_lossy(&run(&["nfs-ls", &url("")])).into_owned();
    assert!(listing.contains("from-smb.bin") && listing.contains("1500000"), "nfs-ls:\n{listing}");
    let via_nfs = dir.join("via-nfs.bin");
    run(&["nfs-cp", &url("/from-smb.bin"), via_nfs.to_str().unwrap()]);
    assert!(std::fs::read(&via_nfs).unwrap() == body, "NFS read back other bytes than SMB wrote");
    vm.power_off(Duration::from_secs(180));
    drop(vm);

    // Third boot: the file written over SMB before the power-off is still
    // there, byte for byte.
    let t = Instant::now();
    let mut vm = Vm::boot(&disk, dir, 3, ports);
    vm.wait_ready(boot_timeout);
    let t_boot3 = t.elapsed();
    let after = dir.join("after-reboot.bin");
    run(&["nfs-cp", &url("/from-smb.bin"), after.to_str().unwrap()]);
    assert!(std::fs::read(&after).unwrap() == body, "the file written before the reboot reads back other bytes");
    vm.power_off(Duration::from_secs(180));
    println!(
        "image: total {:.0} s (build {:.0} s, first boot {:.0} s, second boot {:.0} s, third boot {:.0} s)",
        t0.elapsed().as_secs_f64(),
        t_build.as_secs_f64(),
        t_boot1.as_secs_f64(),
        t_boot2.as_secs_f64(),
        t_boot3.as_secs_f64()
    );
}
