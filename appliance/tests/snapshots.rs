//! Read-only snapshots of a share (layers) against a real duetd: files
//! written over SMB (smbclient) and NFS, `duetctl snapshot create`, then
//! changes, deletions and additions; the old contents read byte-exact
//! through NFS `.snapshot/NAME/` (and SMB `@GMT-` paths), the new ones in
//! the share; writes into the snapshot refused (NFS3ERR_ROFS); bad
//! requests refused with their exit statuses; `snapshot delete` then
//! fsck clean. Prints the creation time for a 10-file and a 10,000-file
//! share.

mod clients;
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use clients::*;
use common::{settle_chunks, Daemon};
use duet_protocols::nfs::nfs3::Nfsstat3;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::{Name, Opaque};

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64 / 8).flat_map(|i| (i * 8 + (seed << 40)).to_le_bytes()).collect()
}

fn smbclient(port: u16, dir: &std::path::Path, cmds: &str) -> String {
    let out = Command::new("smbclient")
        .args(["//127.0.0.1/public", "-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3", "-c", cmds])
        .current_dir(dir)
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "smbclient -c {cmds:?}:\n{text}");
    assert!(!text.contains("NT_STATUS_"), "smbclient -c {cmds:?} reported an error:\n{text}");
    text
}

fn write_all(c: &mut Nfs, fh: &[u8], data: &[u8]) {
    for (i, piece) in data.chunks(1 << 20).enumerate() {
        assert_eq!(c.write3(fh, (i << 20) as u64, piece), Ok(piece.len() as u32));
    }
}

/// The whole content of `name` in directory `dir`.
fn read_named(c: &mut Nfs, dir: &[u8], name: &str) -> Vec<u8> {
    let fh = c.lookup3(dir, name.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    c.read3_all(&fh).unwrap()
}

fn exit_code(d: &Daemon, args: &[&str]) -> i32 {
    let o = d.ctl(args);
    o.status.code().unwrap_or(-1)
}

#[test]
fn a_snapshot_keeps_old_contents_over_nfs_and_refuses_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(2500));
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    // Over SMB: a file that spans chunks and a small one.
    let smb_big = pattern(7, 6 << 20);
    std::fs::write(local.join("smb-big.bin"), &smb_big).unwrap();
    std::fs::write(local.join("smb-small.txt"), b"written over SMB\n").unwrap();
    smbclient(d.smb_port, &local, "put smb-big.bin; put smb-small.txt");
    // Over NFS: a chunked file, a small one, one to delete, a directory.
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    let big_old = pattern(1, 9 << 20);
    let big = c.create3(&root, "big").unwrap();
    write_all(&mut c, &big, &big_old);
    let small = c.create3(&root, "small").unwrap();
    write_all(&mut c, &small, b"old small");
    let doomed = c.create3(&root, "doomed").unwrap();
    write_all(&mut c, &doomed, &pattern(2, 5 << 20));

    let out = d.ok(&["snapshot", "create", "public", "s1"]);
    assert!(out.contains("took snapshot s1"), "{out}");
    let listed = d.ok(&["--json", "snapshot", "list", "public"]);
    let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(v[0]["name"], "s1", "{listed}");
    assert!(v[0]["gmt"].as_str().unwrap().starts_with("@GMT-"), "{listed}");

    // Changes after the snapshot, over both protocols.
    assert_eq!(c.write3(&big, 4 << 20, &[0xAB; 1 << 20]), Ok(1 << 20));
    assert_eq!(c.write3(&small, 0, b"NEW"), Ok(3));
    assert_eq!(c.remove3(&root, "doomed"), Nfsstat3::OK);
    let fresh = c.create3(&root, "fresh").unwrap();
    write_all(&mut c, &fresh, b"after the snapshot");
    std::fs::write(local.join("smb-small.txt"), b"changed over SMB\n").unwrap();
    smbclient(d.smb_port, &local, "put smb-small.txt; del smb-big.bin");

    // The snapshot, through `.snapshot/s1/`.
    let snapdir = c.lookup3(&root, b".snapshot").expect(".snapshot in the share's root");
    let s1 = c.lookup3(&snapdir, b"s1").expect(".snapshot/s1");
    let sbig = c.lookup3(&s1, b"big").unwrap();
    assert_ne!(sbig, big, "a snapshot object has a handle of its own");
    assert_eq!(c.lookup3(&s1, b"big").unwrap(), sbig, "and a stable one");
    assert!(c.read3_all(&sbig).unwrap() == big_old, "big in the snapshot differs");
    assert_eq!(read_named(&mut c, &s1, "small"), b"old small");
    let sdoomed = c.lookup3(&s1, b"doomed").expect("a deleted file stays in the snapshot");
    assert!(c.read3_all(&sdoomed).unwrap() == pattern(2, 5 << 20));
    assert_eq!(c.lookup3(&s1, b"fresh"), Err(Nfsstat3::NOENT));
    assert!(read_named(&mut c, &s1, "smb-big.bin") == smb_big);
    assert_eq!(read_named(&mut c, &s1, "smb-small.txt"), b"written over SMB\n");
    // The share: the new contents.
    let mut big_new = big_old.clone();
    big_new[4 << 20..5 << 20].fill(0xAB);
    assert!(c.read3_all(&big).unwrap() == big_new, "big in the share");
    assert_eq!(c.read3_all(&small).unwrap(), b"NEW small");
    assert_eq!(c.lookup3(&root, b"doomed"), Err(Nfsstat3::NOENT));
    assert_eq!(c.read3_all(&fresh).unwrap(), b"after the snapshot");
    let back = local.join("back.txt");
    smbclient(d.smb_port, &local, &format!("get smb-small.txt {}", back.display()));
    assert_eq!(std::fs::read(&back).unwrap(), b"changed over SMB\n");
    // NFSv4.1: the same walk and a READ in one COMPOUND; an OPEN that
    // would create in the snapshot is refused.
    let mut c4 = Nfs::connect(d.nfs_port);
    let mut s4 = session(&mut c4, b"snapshot-reader", 1 << 20, 64);
    let seq = s4.sequence();
    let rep = c4
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(&root) }),
            ArgOp4::Lookup(Lookup4Args { objname: Name(b".snapshot") }),
            ArgOp4::Lookup(Lookup4Args { objname: Name(b"s1") }),
            ArgOp4::Lookup(Lookup4Args { objname: Name(b"small") }),
            ArgOp4::Read(Read4Args { stateid: Stateid4::ANONYMOUS, offset: 0, count: 100 }),
        ])
        .expect("a COMPOUND reply");
    match res4(&rep).results.get(5) {
        Some(ResOp4::Read(Nfs4Res::Ok(r))) => assert_eq!(r.data.0, b"old small"),
        other => panic!("NFSv4.1 READ in the snapshot: {other:?}"),
    }
    assert_eq!(open4(&mut c4, &mut s4, &s1, b"snapshot-writer", "created"), Err(Nfsstat4::ROFS));
    // SMB Previous Versions: allinfo lists the snapshot of the file, and
    // a get of its @GMT- path reads the old version, byte-exact.
    let gmt = v[0]["gmt"].as_str().unwrap().to_string();
    let info = smbclient(d.smb_port, &local, "allinfo smb-small.txt");
    assert!(info.contains(&gmt), "allinfo lists {gmt}:\n{info}");
    let old = local.join("old.txt");
    smbclient(d.smb_port, &local, &format!("get {gmt}/smb-small.txt {}", old.display()));
    assert_eq!(std::fs::read(&old).unwrap(), b"written over SMB\n");
    let old_big = local.join("old-big.bin");
    smbclient(d.smb_port, &local, &format!("get {gmt}/smb-big.bin {}", old_big.display()));
    assert!(std::fs::read(&old_big).unwrap() == smb_big, "the deleted file's old version over SMB");
    // Writing there is refused (the snapshot is read-only).
    let o = Command::new("smbclient")
        .args(["//127.0.0.1/public", "-p", &d.smb_port.to_string(), "-U", "bench%benchpw", "-m", "SMB3"])
        .args(["-c", &format!("put smb-small.txt {gmt}/smb-small.txt")])
        .current_dir(&local)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("NT_STATUS_"), "a put into the snapshot must fail:\n{text}");
    // Writes into the snapshot are refused.
    assert_eq!(c.write3(&sbig, 0, b"no"), Err(Nfsstat3::ROFS));
    assert_eq!(c.create3(&s1, "new"), Err(Nfsstat3::ROFS));
    assert_eq!(c.remove3(&s1, "big"), Nfsstat3::ROFS);
    assert_eq!(c.create3(&snapdir, "s2"), Err(Nfsstat3::ROFS));
    assert!(c.read3_all(&sbig).unwrap() == big_old, "unchanged after the refusals");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));

    // Bad requests: their exit statuses, nothing changed.
    assert_eq!(exit_code(&d, &["snapshot", "create", "nosuch", "x"]), 3);
    assert_eq!(exit_code(&d, &["snapshot", "create", "public", "s1"]), 4);
    assert_eq!(exit_code(&d, &["snapshot", "create", "public", "a@b"]), 2);
    assert_eq!(exit_code(&d, &["snapshot", "create", "public", "a/b"]), 2);
    assert_eq!(exit_code(&d, &["snapshot", "delete", "--yes", "public", "nosuch"]), 3);
    assert_eq!(exit_code(&d, &["snapshot", "list", "nosuch"]), 3);
    // A second snapshot with the default name (its time).
    let out = d.ok(&["snapshot", "create", "public"]);
    assert!(out.contains("took snapshot GMT-"), "{out}");
    let listed = d.ok(&["snapshot", "list", "public"]);
    assert!(listed.contains("s1") && listed.contains("GMT-"), "{listed}");

    // Delete both: fsck clean, the snapshot gone, the share as it is.
    d.ok(&["--yes", "snapshot", "delete", "public", "s1"]);
    let name = listed.lines().find(|l| l.starts_with("GMT-")).unwrap().split_whitespace().next().unwrap().to_string();
    d.ok(&["--yes", "snapshot", "delete", "public", &name]);
    assert!(d.ok(&["snapshot", "list", "public"]).contains("no snapshots"));
    assert_eq!(c.lookup3(&snapdir, b"s1"), Err(Nfsstat3::NOENT));
    assert!(c.read3_all(&big).unwrap() == big_new);
    // Let the destager reclaim, then check.
    std::thread::sleep(Duration::from_secs(2));
    let fsck = d.ok(&["fsck"]);
    assert!(fsck.contains("file system is consistent"), "{fsck}");
}

#[test]
fn snapshot_creation_time_does_not_grow_with_the_share() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    let mut times = Vec::new();
    for (share, files) in [("ten", 10usize), ("tenk", 10_000)] {
        d.ok(&["share", "add", share, "--path", &format!("/{share}"), "--no-root-squash"]);
        std::thread::sleep(Duration::from_millis(1500));
        let mut c = Nfs::connect(d.nfs_port);
        let root = c.mount(&format!("/{share}")).unwrap();
        let t = Instant::now();
        for i in 0..files {
            c.create3(&root, &format!("f{i:05}")).unwrap();
        }
        let fill = t.elapsed();
        // The command's own round trip: best of three snapshots.
        let mut best = Duration::MAX;
        for n in 0..3 {
            let t = Instant::now();
            d.ok(&["snapshot", "create", share, &format!("s{n}")]);
            best = best.min(t.elapsed());
        }
        // The snapshot lists every file.
        let snapdir = c.lookup3(&root, b".snapshot").unwrap();
        let s0 = c.lookup3(&snapdir, b"s0").unwrap();
        assert!(c.lookup3(&s0, format!("f{:05}", files - 1).as_bytes()).is_ok());
        println!("snapshot of a {files}-file share: {:.1} ms (duetctl round trip; filling it took {:.1} s)", best.as_secs_f64() * 1e3, fill.as_secs_f64());
        times.push(best);
    }
    // Constant time: the big share's snapshot is not slower than the small
    // one's by more than the noise of a process start.
    assert!(times[1] < times[0] * 3 + Duration::from_millis(200), "{times:?}");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}

#[test]
fn smbtorture_shadow_copy_passes_with_snapshots_present() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    d.ok(&["snapshot", "create", "public", "one"]);
    std::thread::sleep(Duration::from_millis(1100));
    d.ok(&["snapshot", "create", "public", "two"]);
    std::thread::sleep(Duration::from_millis(1500));
    let out = Command::new("smbtorture")
        .args(["//127.0.0.1/public", "-p", &d.smb_port.to_string(), "-U", "bench%benchpw", "smb2.ioctl.shadow_copy"])
        .output()
        .expect("smbtorture runs (scripts/install-deps.sh installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(text.contains("success: shadow_copy"), "smb2.ioctl.shadow_copy:\n{text}");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}

#[test]
fn snapshots_deleted_under_sigkill_leave_fsck_clean_and_free_the_space() {
    const MIB: usize = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path());
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    let mut files = Vec::new();
    for i in 0..3u64 {
        let fh = c.create3(&root, &format!("f{i}")).unwrap();
        write_all(&mut c, &fh, &pattern(i + 1, 8 * MIB));
        files.push(fh);
    }
    let base = settle_chunks(&d.data);
    for round in 0..3 {
        let name = format!("k{round}");
        let before = settle_chunks(&d.data);
        d.ok(&["snapshot", "create", "public", &name]);
        // Each change after the snapshot: a chunk rewritten in every file
        // (one copied chunk each), the last file deleted in round 1.
        for fh in &files {
            assert_eq!(c.write3(fh, (round * 4 * MIB) as u64 % (8 * MIB as u64), &[round as u8 + 1; MIB]), Ok(MIB as u32));
        }
        if round == 1 {
            assert_eq!(c.remove3(&root, "f2"), Nfsstat3::OK);
            files.pop();
        }
        let held = settle_chunks(&d.data);
        // One chunk copied per file still live (the snapshot keeps the old
        // one); a deleted file's chunks stay with the snapshot.
        let want = before + files.len() as u64 * (4 * MIB as u64);
        assert_eq!(held, want, "round {round}: the snapshot holds the old chunks");
        // Deleted, then killed while the destager reclaims.
        d.ok(&["--yes", "snapshot", "delete", "public", &name]);
        d.kill_and_restart();
        c = Nfs::connect(d.nfs_port);
        let fsck = d.ok(&["fsck"]);
        assert!(fsck.contains("file system is consistent"), "round {round}: {fsck}");
    }
    // Nothing but the live files' chunks is left: 2 files of 8 MiB.
    let left = settle_chunks(&d.data);
    let live = 2 * 8 * MIB as u64;
    assert!(left <= live + 64 * 1024, "chunk store {left} bytes for {live} bytes of live data");
    let fsck = d.ok(&["fsck"]);
    assert!(fsck.contains("file system is consistent"), "{fsck}");
    println!("chunk store: {base} bytes before the snapshots, {left} after deleting them (live data {live})");
}
