//! Snapshots of a clone share against a real duetd, read like any share's:
//! files written into a clone over NFSv3 and SMB, `duetctl snapshot create
//! c s1`, then changes in the clone; NFS `.snapshot/s1/` in the clone's
//! root and in its subdirectories reads the old contents byte-exact (new
//! and changed ones in the clone), SMB `allinfo` lists the version and a
//! get of its `@GMT-` path reads it; writes through either protocol are
//! refused read-only; deleting the snapshot leaves fsck clean.

mod clients;
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::xdr::{Name, Opaque};

const MIB: usize = 1 << 20;

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64 / 8).flat_map(|i| (i * 8 + (seed << 40)).to_le_bytes()).collect()
}

fn smb(port: u16, share: &str, dir: &Path, cmds: &str) -> (bool, String) {
    let out = Command::new("smbclient")
        .args([&format!("//127.0.0.1/{share}"), "-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3", "-c", cmds])
        .current_dir(dir)
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && !text.contains("NT_STATUS_"), text)
}

fn smbclient(port: u16, share: &str, dir: &Path, cmds: &str) -> String {
    let (ok, text) = smb(port, share, dir, cmds);
    assert!(ok, "smbclient //{share} -c {cmds:?}:\n{text}");
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

fn write_all(c: &mut Nfs, fh: &[u8], data: &[u8]) {
    for (i, piece) in data.chunks(MIB).enumerate() {
        assert_eq!(c.write3(fh, (i * MIB) as u64, piece), Ok(piece.len() as u32));
    }
}

fn read_named(c: &mut Nfs, dir: &[u8], name: &str) -> Vec<u8> {
    let fh = c.lookup3(dir, name.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    c.read3_all(&fh).unwrap()
}

#[test]
fn a_clones_snapshots_are_browsable_over_nfs_and_smb() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(2500));
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    // The source, then its clone.
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    let src_big = pattern(1, 9 * MIB);
    let big = c.create3(&root, "big").unwrap();
    write_all(&mut c, &big, &src_big);
    let small = c.create3(&root, "small").unwrap();
    write_all(&mut c, &small, b"source small");
    d.ok(&["share", "clone", "public", "c"]);
    std::thread::sleep(Duration::from_millis(1500));

    // The clone's own state before its snapshot: a copied-up chunk, a
    // file made in it (over SMB too), a directory of its own, one file
    // left reading through its source.
    let mut k = Nfs::connect(d.nfs_port);
    let croot = k.mount("/clones/c").unwrap();
    let cbig = k.lookup3(&croot, b"big").unwrap();
    assert_eq!(k.write3(&cbig, 4 * MIB as u64, &[0xC1; MIB]), Ok(MIB as u32));
    let mut clone_big = src_big.clone();
    clone_big[4 * MIB..5 * MIB].fill(0xC1);
    let dir = mkdir3(&mut k, &croot, "dir").unwrap_or_else(|e| panic!("mkdir: {e:?}"));
    let inner = k.create3(&dir, "inner").unwrap();
    write_all(&mut k, &inner, b"inner, before");
    let smb_file = pattern(3, 5 * MIB);
    std::fs::write(local.join("smb.bin"), &smb_file).unwrap();
    smbclient(d.smb_port, "c", &local, "put smb.bin");

    let out = d.ok(&["snapshot", "create", "c", "s1"]);
    assert!(out.contains("took snapshot s1"), "{out}");
    let listed = d.ok(&["--json", "snapshot", "list", "c"]);
    let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(v[0]["name"], "s1", "{listed}");
    let gmt = v[0]["gmt"].as_str().unwrap().to_string();

    // Changes in the clone after it, and in the source.
    assert_eq!(k.write3(&cbig, 0, &[0xC2; MIB]), Ok(MIB as u32));
    assert_eq!(k.write3(&inner, 0, b"INNER, AFTER!"), Ok(13));
    assert_eq!(k.remove3(&croot, "small"), Nfsstat3::OK);
    let fresh = k.create3(&croot, "fresh").unwrap();
    write_all(&mut k, &fresh, b"after the snapshot");
    smbclient(d.smb_port, "c", &local, "del smb.bin");
    assert_eq!(c.write3(&small, 0, b"SOURCE"), Ok(6));

    // NFS: `.snapshot/s1/` in the clone's root and in `dir`.
    let snapdir = k.lookup3(&croot, b".snapshot").expect(".snapshot in a clone's root");
    let s1 = k.lookup3(&snapdir, b"s1").expect(".snapshot/s1");
    assert!(read_named(&mut k, &s1, "big") == clone_big, "big as the clone had it");
    assert_eq!(read_named(&mut k, &s1, "small"), b"source small", "read through to the source's snapshot");
    assert!(read_named(&mut k, &s1, "smb.bin") == smb_file, "the SMB file, deleted since");
    assert_eq!(k.lookup3(&s1, b"fresh"), Err(Nfsstat3::NOENT), "made after the snapshot");
    let sdir = k.lookup3(&s1, b"dir").unwrap();
    assert_eq!(read_named(&mut k, &sdir, "inner"), b"inner, before");
    let dsnap = k.lookup3(&dir, b".snapshot").expect(".snapshot in a clone's subdirectory");
    let ds1 = k.lookup3(&dsnap, b"s1").unwrap();
    assert_eq!(read_named(&mut k, &ds1, "inner"), b"inner, before");
    // The live clone and the source as they are now.
    let mut now_big = clone_big.clone();
    now_big[..MIB].fill(0xC2);
    assert!(k.read3_all(&cbig).unwrap() == now_big);
    assert_eq!(read_named(&mut k, &dir, "inner"), b"INNER, AFTER!");
    assert_eq!(read_named(&mut c, &root, "small"), b"SOURCE small");
    // Read-only, over NFS.
    let sbig = k.lookup3(&s1, b"big").unwrap();
    assert_eq!(k.write3(&sbig, 0, b"no"), Err(Nfsstat3::ROFS));
    assert_eq!(k.create3(&s1, "new"), Err(Nfsstat3::ROFS));
    assert_eq!(k.remove3(&sdir, "inner"), Nfsstat3::ROFS);

    // SMB Previous Versions in the clone.
    let info = smbclient(d.smb_port, "c", &local, "allinfo big");
    assert!(info.contains(&gmt), "allinfo lists {gmt}:\n{info}");
    let old = local.join("old.bin");
    smbclient(d.smb_port, "c", &local, &format!("get {gmt}/smb.bin {}", old.display()));
    assert!(std::fs::read(&old).unwrap() == smb_file, "the deleted SMB file's old version");
    smbclient(d.smb_port, "c", &local, &format!("get {gmt}/dir/inner {}", old.display()));
    assert_eq!(std::fs::read(&old).unwrap(), b"inner, before");
    std::fs::write(local.join("x.txt"), b"x").unwrap();
    let (ok, text) = smb(d.smb_port, "c", &local, &format!("put x.txt {gmt}/x.txt"));
    assert!(!ok && text.contains("NT_STATUS_"), "a put into the clone's snapshot must fail:\n{text}");

    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
    d.ok(&["--yes", "snapshot", "delete", "c", "s1"]);
    assert_eq!(k.lookup3(&snapdir, b"s1"), Err(Nfsstat3::NOENT));
    assert!(k.read3_all(&cbig).unwrap() == now_big, "the clone after the snapshot went");
    let fsck = d.ok(&["fsck"]);
    assert!(fsck.contains("file system is consistent"), "{fsck}");
}
