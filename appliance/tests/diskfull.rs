//! A full volume: duetd's data directory on a 300 MiB loop-mounted ext4,
//! filled over SMB until WRITE/CREATE get STATUS_DISK_FULL; then NFSv3
//! (NFS3ERR_NOSPC) and NFSv4.1 (NFS4ERR_NOSPC) are refused too, every file
//! stored before reads back byte for byte, deleting files makes writes
//! work again, fsck is clean, and a restart on the full-then-freed volume
//! keeps everything. Needs root (mount -o loop); fails naming what is
//! missing otherwise, as vmclient.rs does.

mod clients;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs3::Nfsstat3;
use duet_protocols::nfs::nfs4::Nfsstat4;
use duet_protocols::smb2::status::NtStatus;

const MIB: usize = 1 << 20;

/// The loop mount; unmounted (lazily) when dropped.
struct Volume {
    dir: PathBuf,
}

impl Volume {
    fn new(base: &Path, mib: u64) -> Volume {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "diskfull needs root to loop-mount a small ext4 volume"
        );
        let img = base.join("volume.img");
        let dir = base.join("vol");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::File::create(&img)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let run = |cmd: &mut Command| {
            let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
            assert!(
                o.status.success(),
                "{cmd:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img));
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&dir));
        Volume { dir }
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// The bytes of file `i`, offset `off`, length `len`: never the same twice.
fn pattern(i: usize, off: usize, len: usize) -> Vec<u8> {
    (off..off + len)
        .map(|p| ((p / 7) as u8) ^ (i as u8).wrapping_mul(31) ^ ((p >> 12) as u8))
        .collect()
}

/// One `duetctl --json stats` figure.
fn stat(d: &Daemon, key: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "stats"])).unwrap();
    v[key].as_u64().unwrap_or_else(|| panic!("stats has no {key}: {v}"))
}

/// Waits until nothing is queued for the destager and the volume's free
/// space has not moved for 2 s.
fn settle(d: &Daemon, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut last, mut still) = (u64::MAX, 0);
    loop {
        let free = common::statvfs(dir).2;
        if stat(d, "destage_queue") == 0 && free == last {
            still += 1;
            if still == 4 {
                return;
            }
        } else {
            still = 0;
        }
        last = free;
        assert!(Instant::now() < deadline, "the volume never settled ({free} bytes free)");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Writes a new file `fill-<next>.bin` in 1 MiB pieces and then 4 KiB ones
/// until each size is refused with STATUS_DISK_FULL, recording what was
/// acknowledged. False when the CREATE itself was refused.
fn top_up(c: &mut Smb, stored: &mut Vec<(String, usize)>, next: &mut usize) -> bool {
    let i = *next;
    *next += 1;
    let name = format!("fill-{i:03}.bin");
    let f = match c.create(&name) {
        Ok(f) => f,
        Err(e) => {
            assert_eq!(e, NtStatus::DISK_FULL, "CREATE {name} on a full volume");
            return false;
        }
    };
    stored.push((name.clone(), 0));
    let mut off = 0;
    for piece in [MIB, 4096] {
        loop {
            assert!(off < 64 * MIB, "{name}: 64 MiB fit above a refused write");
            let st = c.write(f, off as u64, &pattern(i, off, piece), true);
            if st != NtStatus::SUCCESS {
                assert_eq!(st, NtStatus::DISK_FULL, "a {piece}-byte WRITE on a full volume");
                break;
            }
            off += piece;
            stored.last_mut().unwrap().1 = off;
        }
    }
    assert_eq!(c.close(f), NtStatus::SUCCESS);
    true
}

#[test]
fn a_full_volume_refuses_writes_keeps_data_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = Volume::new(tmp.path(), 300);
    let extra = "\n[limits]\ndisk_reserve_mib = 32\n[cache]\nlog_segment_mib = 8\n";
    let mut d = Daemon::start_with(&vol.dir, extra);
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(2500));

    // An NFSv3 file from before (root squashed; the share root is 0777).
    let mut n = Nfs::connect(d.nfs_port);
    let root = n.mount("/public").unwrap();
    let early = n.create3(&root, "nfs-early").unwrap();
    let early_bytes = pattern(999, 0, 64 << 10);
    assert_eq!(n.write3(&early, 0, &early_bytes), Ok(64 << 10));

    // Fill over SMB: files of 4 MiB written through in 1 MiB pieces, until
    // CREATE or WRITE says STATUS_DISK_FULL.
    let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
    let mut stored: Vec<(String, usize)> = Vec::new(); // name, acknowledged bytes
    let mut full = None;
    'fill: for i in 0..200 {
        let name = format!("fill-{i:03}.bin");
        let f = match c.create(&name) {
            Ok(f) => f,
            Err(e) => {
                full = Some(("CREATE", e));
                break;
            }
        };
        stored.push((name, 0));
        for k in 0..4 {
            let st = c.write(f, (k * MIB) as u64, &pattern(i, k * MIB, MIB), true);
            if st != NtStatus::SUCCESS {
                full = Some(("WRITE", st));
                c.close(f);
                break 'fill;
            }
            stored.last_mut().unwrap().1 += MIB;
        }
        assert_eq!(c.close(f), NtStatus::SUCCESS);
    }
    let (what, status) = full.expect("a 300 MiB volume filled up within 800 MiB of writes");
    assert_eq!(status, NtStatus::DISK_FULL, "{what} on a full volume");
    // "Full" moves while the daemon works: the destager's chunk writes
    // take space, released write-log segments and RocksDB flushes give
    // some back. Let it settle, write what fits then (1 MiB pieces, then
    // 4 KiB ones: a CREATE counts 4 KiB), and again, until a settled volume
    // refuses even the CREATE: only then does every check below hold.
    let mut next = 200;
    let mut rounds = 0;
    loop {
        assert!(rounds < 10, "the volume never settled full: {stored:?}");
        settle(&d, &vol.dir);
        if !top_up(&mut c, &mut stored, &mut next) {
            break;
        }
        rounds += 1;
    }
    let total: usize = stored.iter().map(|s| s.1).sum();
    eprintln!(
        "full after {} MiB in {} files ({what} got STATUS_DISK_FULL; {rounds} top-ups once settled)",
        total / MIB,
        stored.len()
    );
    assert!(total >= 100 * MIB, "only {} MiB fit", total / MIB);
    assert_eq!(
        c.create("one-more.bin"),
        Err(NtStatus::DISK_FULL),
        "CREATE on a full volume"
    );

    // NFS is refused too: v3 WRITE (FILE_SYNC) and CREATE, v4.1 OPEN/create.
    assert_eq!(
        n.write3(&early, 64 << 10, &pattern(999, 64 << 10, MIB)),
        Err(Nfsstat3::NOSPC)
    );
    assert_eq!(n.create3(&root, "nfs-late"), Err(Nfsstat3::NOSPC));
    let mut s = session(&mut n, b"diskfull", 1 << 20, 64);
    assert_eq!(
        open4(&mut n, &mut s, &root, b"o", "v4-late"),
        Err(Nfsstat4::NOSPC)
    );

    // Everything stored before reads back byte for byte.
    let verify = |c: &mut Smb, n: &mut Nfs, stored: &[(String, usize)], root: &[u8]| {
        for (i, (name, len)) in stored.iter().enumerate() {
            let i: usize = name[5..8].parse().unwrap_or(i);
            let f = c
                .open_read(name)
                .unwrap_or_else(|e| panic!("open {name}: {e:?}"));
            let got = c.read_all(f, len + 1).unwrap();
            assert!(
                got == pattern(i, 0, *len),
                "{name}: {} bytes back, {} acknowledged",
                got.len(),
                len
            );
            c.close(f);
        }
        let fh = n.lookup3(root, b"nfs-early").unwrap();
        assert_eq!(
            n.read3_all(&fh).unwrap(),
            pattern(999, 0, 64 << 10),
            "nfs-early"
        );
    };
    verify(&mut c, &mut n, &stored, &root);

    // Free space: delete all but the first three; writes work again once
    // the chunks are reclaimed.
    for (name, _) in &stored[3..] {
        assert_eq!(
            c.delete(name),
            NtStatus::SUCCESS,
            "delete {name} on a full volume"
        );
    }
    stored.truncate(3);
    let deadline = Instant::now() + Duration::from_secs(60);
    let after = loop {
        match c.create("after.bin") {
            Ok(f) => break f,
            Err(NtStatus::DISK_FULL) => {
                assert!(
                    Instant::now() < deadline,
                    "space never came back after deleting files"
                );
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => panic!("create after freeing space: {e:?}"),
        }
    };
    for k in 0..4 {
        assert_eq!(
            c.write(after, (k * MIB) as u64, &pattern(77, k * MIB, MIB), true),
            NtStatus::SUCCESS
        );
    }
    c.close(after);
    let late = n
        .create3(&root, "nfs-late")
        .expect("NFS CREATE after freeing space");
    assert_eq!(n.write3(&late, 0, &pattern(5, 0, MIB)), Ok(MIB as u32));
    verify(&mut c, &mut n, &stored, &root);
    let f = c.open_read("after.bin").unwrap();
    assert!(
        c.read_all(f, 4 * MIB + 1).unwrap() == pattern(77, 0, 4 * MIB),
        "after.bin"
    );
    c.close(f);
    assert!(
        d.ok(&["fsck"]).contains("file system is consistent"),
        "fsck after a full volume"
    );

    // A restart on this volume keeps it all.
    drop(c);
    drop(n);
    d.restart();
    let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
    let mut n = Nfs::connect(d.nfs_port);
    let root = n.mount("/public").unwrap();
    verify(&mut c, &mut n, &stored, &root);
    let fh = n.lookup3(&root, b"nfs-late").unwrap();
    assert!(
        n.read3_all(&fh).unwrap() == pattern(5, 0, MIB),
        "nfs-late after restart"
    );
    assert!(
        d.ok(&["fsck"]).contains("file system is consistent"),
        "fsck after restart"
    );
    assert!(
        d.log_text().lines().all(|l| !l.contains("panicked")),
        "{}",
        d.log_text()
    );
    drop(d);
    drop(vol);
}
