//! Writable clones of a share against a real duetd: files written over
//! SMB (smbclient) and NFSv3, `duetctl share clone public c`; the clone is
//! an ordinary share over both protocols and sees the source's files
//! byte-exact; writes, deletions, renames, directories removed and made
//! again in the clone leave the source unchanged, and the source's later
//! changes never reach the clone; bad requests get their exit statuses;
//! deleting the clone under SIGKILL leaves fsck clean and the chunk store
//! back to the source's data.

mod clients;
mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clients::*;
use common::{settle_chunks, Daemon};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::xdr::{Name, Opaque};

const MIB: usize = 1 << 20;

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64 / 8).flat_map(|i| (i * 8 + (seed << 40)).to_le_bytes()).collect()
}

fn smbclient(port: u16, share: &str, dir: &Path, cmds: &str) -> String {
    let out = Command::new("smbclient")
        .args([&format!("//127.0.0.1/{share}"), "-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3", "-c", cmds])
        .current_dir(dir)
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "smbclient //{share} -c {cmds:?}:\n{text}");
    assert!(!text.contains("NT_STATUS_"), "smbclient //{share} -c {cmds:?} reported an error:\n{text}");
    text
}

/// NFSv3 MKDIR (mode 0755): the new handle.
fn mkdir3(c: &mut Nfs, dir: &[u8], name: &str) -> Result<Vec<u8>, Nfsstat3> {
    let rep = c.v3(&Nfs3Args::Mkdir(Mkdir3Args {
        where_: DirOpArgs3 { dir: Opaque(dir), name: Name(name.as_bytes()) },
        attributes: Sattr3 { mode: Some(0o755), ..Default::default() },
    }));
    match results3(proc3::MKDIR, &rep) {
        Nfs3Results::Mkdir(Nfs3Res::Ok(ok)) => Ok(ok.obj.expect("a handle").0.to_vec()),
        Nfs3Results::Mkdir(Nfs3Res::Fail(s, _)) => Err(s),
        other => panic!("{other:?}"),
    }
}

/// NFSv3 RMDIR.
fn rmdir3(c: &mut Nfs, dir: &[u8], name: &str) -> Nfsstat3 {
    let rep = c.v3(&Nfs3Args::Rmdir(Remove3Args { object: DirOpArgs3 { dir: Opaque(dir), name: Name(name.as_bytes()) } }));
    match results3(proc3::RMDIR, &rep) {
        Nfs3Results::Rmdir(Nfs3Res::Ok(_)) => Nfsstat3::OK,
        Nfs3Results::Rmdir(Nfs3Res::Fail(s, _)) => s,
        other => panic!("{other:?}"),
    }
}

fn write_all(c: &mut Nfs, fh: &[u8], data: &[u8]) {
    for (i, piece) in data.chunks(MIB).enumerate() {
        assert_eq!(c.write3(fh, (i * MIB) as u64, piece), Ok(piece.len() as u32));
    }
}

fn read_named(c: &mut Nfs, dir: &[u8], name: &str) -> Vec<u8> {
    let fh = c.lookup3(dir, name.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    c.read3_all(&fh).unwrap()
}

fn exit_code(d: &Daemon, args: &[&str]) -> i32 {
    d.ctl(args).status.code().unwrap_or(-1)
}

#[test]
fn a_clone_is_a_writable_share_whose_changes_never_reach_its_source() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(2500));
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    // The source: a file over SMB, files and a directory over NFS.
    let smb_file = pattern(7, 5 * MIB);
    std::fs::write(local.join("smb.bin"), &smb_file).unwrap();
    smbclient(d.smb_port, "public", &local, "put smb.bin");
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    // DUET_CLONE_BIG_MIB=1024: the 1 GiB file (12 MiB in CI).
    let big_mib: usize = std::env::var("DUET_CLONE_BIG_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(12).max(8);
    let big_old = pattern(1, big_mib * MIB);
    let big = c.create3(&root, "big").unwrap();
    write_all(&mut c, &big, &big_old);
    let small = c.create3(&root, "small").unwrap();
    write_all(&mut c, &small, b"old small");
    let dir = mkdir3(&mut c, &root, "dir").unwrap();
    let inner = c.create3(&dir, "inner").unwrap();
    write_all(&mut c, &inner, b"inside dir");
    let source_chunks = settle_chunks(&d.data);

    let t = Instant::now();
    let out = d.ok(&["share", "clone", "public", "c"]);
    let took = t.elapsed();
    assert!(out.contains("made share c at /clones/c, a writable clone of public@clone.c"), "{out}");
    let listed = d.ok(&["share", "list"]);
    assert!(listed.lines().any(|l| l.starts_with("c ") && l.ends_with("public@clone.c")), "{listed}");
    println!("share clone: {:.1} ms (duetctl round trip)", took.as_secs_f64() * 1e3);
    // The protocol executors pick the new share up at their next refresh.
    std::thread::sleep(Duration::from_millis(1500));

    // The clone sees the source's files, over SMB and NFS, byte-exact.
    let got = local.join("got.bin");
    smbclient(d.smb_port, "c", &local, &format!("get smb.bin {}", got.display()));
    assert!(std::fs::read(&got).unwrap() == smb_file, "smb.bin through the clone over SMB");
    let mut k = Nfs::connect(d.nfs_port);
    let croot = k.mount("/clones/c").unwrap();
    let cbig = k.lookup3(&croot, b"big").unwrap();
    assert!(k.read3_all(&cbig).unwrap() == big_old, "big through the clone over NFS");
    assert_eq!(read_named(&mut k, &croot, "small"), b"old small");
    let cdir = k.lookup3(&croot, b"dir").unwrap();
    assert_eq!(read_named(&mut k, &cdir, "inner"), b"inside dir");

    // Changes in the clone, over both protocols.
    assert_eq!(k.write3(&cbig, 5 * MIB as u64, &[0xCD; MIB]), Ok(MIB as u32));
    assert_eq!(k.lookup3(&croot, b"big").unwrap(), cbig, "the handle stays across the copy-up");
    let csmall = k.lookup3(&croot, b"small").unwrap();
    assert_eq!(k.write3(&csmall, 0, b"NEW"), Ok(3));
    assert_eq!(k.remove3(&cdir, "inner"), Nfsstat3::OK);
    assert_eq!(rmdir3(&mut k, &croot, "dir"), Nfsstat3::OK);
    let cdir2 = mkdir3(&mut k, &croot, "dir").unwrap();
    assert_eq!(k.lookup3(&cdir2, b"inner"), Err(Nfsstat3::NOENT), "a directory made again is empty (opaque)");
    std::fs::write(local.join("clone-only.txt"), b"only in the clone\n").unwrap();
    smbclient(d.smb_port, "c", &local, "put clone-only.txt; rename smb.bin renamed.bin; mkdir newdir");
    // Listings merge the clone's own entries over the source's.
    let names = |text: &str| -> Vec<String> {
        text.lines().filter_map(|l| l.split_whitespace().next().map(str::to_string)).collect()
    };
    let listed = names(&smbclient(d.smb_port, "c", &local, "ls"));
    for n in ["big", "small", "dir", "renamed.bin", "clone-only.txt", "newdir"] {
        assert!(listed.iter().any(|l| l == n), "{n} in the clone's listing: {listed:?}");
    }
    assert!(!listed.iter().any(|l| l == "smb.bin"), "renamed away in the clone: {listed:?}");
    let listed = names(&smbclient(d.smb_port, "public", &local, "ls"));
    assert!(listed.iter().any(|l| l == "smb.bin"), "{listed:?}");
    for n in ["renamed.bin", "clone-only.txt", "newdir"] {
        assert!(!listed.iter().any(|l| l == n), "{n} is not in the source: {listed:?}");
    }
    let mut big_new = big_old.clone();
    big_new[5 * MIB..6 * MIB].fill(0xCD);
    assert!(k.read3_all(&cbig).unwrap() == big_new, "big in the clone");
    assert_eq!(k.read3_all(&csmall).unwrap(), b"NEW small");
    assert!(read_named(&mut k, &croot, "renamed.bin") == smb_file);
    assert_eq!(read_named(&mut k, &croot, "clone-only.txt"), b"only in the clone\n");
    // Writing 1 MiB into the big clone file stored one chunk more, not
    // the file again.
    let after = settle_chunks(&d.data);
    assert!(after <= source_chunks + 4 * MIB as u64 + 64 * 1024, "chunk store {source_chunks} -> {after} bytes");
    println!("1 MiB written into a {big_mib} MiB clone file: chunk store {source_chunks} -> {after} bytes");

    // The source is unchanged, over both protocols.
    assert!(c.read3_all(&big).unwrap() == big_old, "big in the source");
    assert_eq!(c.read3_all(&small).unwrap(), b"old small");
    assert_eq!(read_named(&mut c, &dir, "inner"), b"inside dir");
    assert_eq!(c.lookup3(&root, b"clone-only.txt"), Err(Nfsstat3::NOENT));
    assert_eq!(c.lookup3(&root, b"newdir"), Err(Nfsstat3::NOENT));
    let back = local.join("back.bin");
    smbclient(d.smb_port, "public", &local, &format!("get smb.bin {}", back.display()));
    assert!(std::fs::read(&back).unwrap() == smb_file, "smb.bin in the source over SMB");

    // The source's later changes never reach the clone.
    assert_eq!(c.write3(&small, 0, b"SRC"), Ok(3));
    let later = c.create3(&root, "later").unwrap();
    write_all(&mut c, &later, b"made after the clone");
    assert_eq!(c.write3(&big, 0, &[0xEE; 4096]), Ok(4096));
    assert_eq!(k.read3_all(&csmall).unwrap(), b"NEW small");
    assert_eq!(k.lookup3(&croot, b"later"), Err(Nfsstat3::NOENT));
    assert!(k.read3_all(&cbig).unwrap() == big_new, "big in the clone after the source changed");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));

    // Refusals, with their exit statuses.
    assert_eq!(exit_code(&d, &["share", "clone", "nosuch", "x"]), 3);
    assert_eq!(exit_code(&d, &["share", "clone", "public@nosuch", "x"]), 3);
    assert_eq!(exit_code(&d, &["share", "clone", "public", "c"]), 4);
    assert_eq!(exit_code(&d, &["share", "clone", "public", "a@b"]), 2);
    assert_eq!(exit_code(&d, &["share", "clone", "public", "x", "--path", "/public/inside"]), 2);
    assert_eq!(exit_code(&d, &["--yes", "snapshot", "delete", "public", "clone.c"]), 2, "the clone's snapshot is pinned");
    assert_eq!(exit_code(&d, &["--yes", "share", "remove", "public"]), 2, "a share a clone stands on stays");

    // Deleting the clone, killed at once while the destager reclaims: fsck
    // clean after the restart, and the clone's chunks freed.
    d.ok(&["--yes", "share", "remove", "c"]);
    d.kill_and_restart();
    let fsck = d.ok(&["fsck"]);
    assert!(fsck.contains("file system is consistent"), "{fsck}");
    assert!(!d.ok(&["share", "list"]).contains("clone"), "the clone and its snapshot are gone");
    assert!(d.ok(&["snapshot", "list", "public"]).contains("no snapshots"));
    let left = settle_chunks(&d.data);
    // The source's data, with the one chunk it rewrote itself since.
    assert!(left <= source_chunks + 64 * 1024, "chunk store {left} bytes, the source's {source_chunks}");
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    let mut big_src = big_old.clone();
    big_src[..4096].fill(0xEE);
    assert!(read_named(&mut c, &root, "big") == big_src, "the source after the clone went");
    let fsck = d.ok(&["fsck"]);
    assert!(fsck.contains("file system is consistent"), "{fsck}");
}

#[test]
fn clone_creation_time_does_not_grow_with_the_share() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    let mut times = Vec::new();
    for (share, files) in [("ten", 10usize), ("tenk", 10_000)] {
        d.ok(&["share", "add", share, "--path", &format!("/{share}"), "--no-root-squash"]);
        std::thread::sleep(Duration::from_millis(1500));
        let mut c = Nfs::connect(d.nfs_port);
        let root = c.mount(&format!("/{share}")).unwrap();
        for i in 0..files {
            c.create3(&root, &format!("f{i:05}")).unwrap();
        }
        let mut best = Duration::MAX;
        for n in 0..3 {
            let t = Instant::now();
            d.ok(&["share", "clone", share, &format!("{share}-c{n}")]);
            best = best.min(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(1500));
        let mut k = Nfs::connect(d.nfs_port);
        let croot = k.mount(&format!("/clones/{share}-c0")).unwrap();
        assert!(k.lookup3(&croot, format!("f{:05}", files - 1).as_bytes()).is_ok());
        println!("clone of a {files}-file share: {:.1} ms (duetctl round trip)", best.as_secs_f64() * 1e3);
        times.push(best);
    }
    assert!(times[1] < times[0] * 3 + Duration::from_millis(200), "{times:?}");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}
