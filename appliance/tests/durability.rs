//! Durability per share (`duetctl share add|modify --durability`,
//! docs/durability.md) against a real duetd, with raw SMB 2.1 and NFSv3
//! clients and `duetctl --json stats` as the fsync counter:
//! - `always` (the default): every WRITE costs a synced commit, and an
//!   NFSv3 UNSTABLE write is answered FILE_SYNC.
//! - `protocol`: SMB WRITEs without WRITE_THROUGH share few syncs (the
//!   group commit), each WRITE_THROUGH write and each FLUSH syncs before
//!   its reply; an NFSv3 UNSTABLE write is answered UNSTABLE with the write
//!   verifier, COMMIT answers the same verifier, FILE_SYNC stays FILE_SYNC,
//!   and after a restart the verifier differs (a client then resends its
//!   uncommitted writes). Bytes written read back after a SIGKILL.
//! - the share's durability shows in `share show` and `share list`; a bad
//!   value is a usage error.

mod clients;
mod common;

use std::time::Duration;

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::Opaque;
use duet_protocols::smb2::flush::FlushRequest;
use duet_protocols::smb2::header::Command as Cmd;
use duet_protocols::smb2::message::Request;
use duet_protocols::smb2::status::NtStatus;

fn fsyncs(d: &Daemon) -> u64 {
    stat(d, "fsyncs")
}

/// One counter of `duetctl --json stats`.
fn stat(d: &Daemon, name: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "stats"])).unwrap();
    v[name].as_u64().unwrap_or_else(|| panic!("stats has no {name}: {v}"))
}

/// NFSv3 WRITE with `stable`: (committed, verifier).
fn write3(c: &mut Nfs, fh: &[u8], offset: u64, data: &[u8], stable: StableHow) -> (StableHow, [u8; 8]) {
    let rep = c.v3(&Nfs3Args::Write(Write3Args {
        file: Opaque(fh),
        offset,
        count: data.len() as u32,
        stable,
        data: Opaque(data),
    }));
    match results3(proc3::WRITE, &rep) {
        Nfs3Results::Write(Nfs3Res::Ok(ok)) => {
            assert_eq!(ok.count, data.len() as u32);
            (ok.committed, ok.verf)
        }
        other => panic!("WRITE: {other:?}"),
    }
}

fn commit3(c: &mut Nfs, fh: &[u8]) -> [u8; 8] {
    let rep = c.v3(&Nfs3Args::Commit(Commit3Args { file: Opaque(fh), offset: 0, count: 0 }));
    match results3(proc3::COMMIT, &rep) {
        Nfs3Results::Commit(Nfs3Res::Ok(ok)) => ok.verf,
        other => panic!("COMMIT: {other:?}"),
    }
}

/// NFSv4.1 on `export`: creates `name`, writes UNSTABLE, then COMMITs.
/// Returns (WRITE's committed, WRITE's verifier, COMMIT's verifier, fsyncs
/// the COMMIT took).
fn v41_write_commit(d: &Daemon, export: &str, name: &str) -> (StableHow4, [u8; 8], [u8; 8], u64) {
    let mut c = Nfs::connect(d.nfs_port).as_user(0, 0);
    let root = c.mount(export).unwrap();
    let mut s = session(&mut c, format!("durability-{export}").as_bytes(), 1 << 20, 64);
    let (sid, fh) = open4_fh(&mut c, &mut s, &root, b"writer", name).expect("NFSv4.1 OPEN");
    let seq = s.sequence();
    let rep = c
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(&fh) }),
            ArgOp4::Write(Write4Args { stateid: sid, offset: 0, stable: StableHow4::Unstable, data: Opaque(b"v4 bytes") }),
        ])
        .unwrap();
    let r = res4(&rep);
    let Some(ResOp4::Write(Nfs4Res::Ok(w))) = r.results.get(2) else { panic!("NFSv4.1 WRITE: {r:?}") };
    let (committed, wverf) = (w.committed, w.writeverf);
    // The window (500 ms) cannot sync it before the COMMIT comes.
    let before = fsyncs(d);
    let seq = s.sequence();
    let rep = c
        .v4(vec![seq, ArgOp4::PutFh(PutFh4Args { object: Opaque(&fh) }), ArgOp4::Commit(Commit4Args { offset: 0, count: 0 })])
        .unwrap();
    let r = res4(&rep);
    let Some(ResOp4::Commit(Nfs4Res::Ok(cm))) = r.results.get(2) else { panic!("NFSv4.1 COMMIT: {r:?}") };
    (committed, wverf, cm.writeverf, fsyncs(d) - before)
}

/// Waits until the destager and the group commit are idle (the fsync
/// counter stops moving for longer than the 500 ms window), so a measured
/// interval counts only its own.
fn settle(d: &Daemon) -> u64 {
    let mut last = fsyncs(d);
    loop {
        std::thread::sleep(Duration::from_millis(600));
        let now = fsyncs(d);
        if now == last {
            return now;
        }
        last = now;
    }
}

#[test]
fn always_syncs_every_change_and_protocol_only_what_the_protocol_promises() {
    let tmp = tempfile::tempdir().unwrap();
    // A window longer than a round trip: a sync between a write and its
    // COMMIT or FLUSH can only come from them.
    let mut d = Daemon::start_top(tmp.path(), "[durability]\nwindow_ms = 500", "", "portmap = false");
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    d.ok(&["share", "add", "lazy", "--path", "/lazy", "--no-root-squash", "--durability", "protocol"]);
    let show = d.ok(&["share", "show", "lazy"]);
    assert!(show.contains("durability:           protocol\n"), "{show}");
    let show = d.ok(&["share", "show", "public"]);
    assert!(show.contains("durability:           always\n"), "{show}");
    let list = d.ok(&["share", "list"]);
    assert!(list.contains("DURABILITY") && list.contains("protocol"), "{list}");
    let bad = d.ctl(&["share", "modify", "public", "--durability", "sometimes"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    std::thread::sleep(Duration::from_millis(2500));
    // 40 writes of 64 bytes: the files stay inline (at most 4 KiB), so
    // the destager (its own chunk and progress syncs) stays out of the
    // count.
    const N: u64 = 40;
    let data = [7u8; 64];

    // SMB on `always`: a synced commit per WRITE.
    let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
    let f = c.create("a.bin").unwrap();
    let before = settle(&d);
    for i in 0..N {
        assert_eq!(c.write(f, i * 64, &data, false), NtStatus::SUCCESS);
    }
    let always = fsyncs(&d) - before;
    assert!(always >= N, "always: {always} fsyncs for {N} writes");
    c.close(f);

    // SMB on `protocol`: WRITEs share group commits...
    let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "lazy");
    let f = c.create("b.bin").unwrap();
    let before = settle(&d);
    let (groups0, wal0) = (stat(&d, "lazy_groups"), stat(&d, "wal_syncs"));
    for i in 0..N {
        assert_eq!(c.write(f, i * 64, &data, false), NtStatus::SUCCESS);
    }
    let lazy = settle(&d) - before;
    assert!(lazy < N / 2, "protocol: {lazy} fsyncs for {N} plain writes (a group commit should share them)");
    // duetctl stats counts them: every plain WRITE a lazy group (one
    // round trip each), made durable by a few WAL syncs.
    let (groups, wal) = (stat(&d, "lazy_groups") - groups0, stat(&d, "wal_syncs") - wal0);
    assert!(groups >= N, "{groups} lazy groups for {N} plain writes");
    assert!((1..=lazy).contains(&wal), "{wal} WAL syncs, {lazy} fsyncs");
    let text = d.ok(&["stats"]);
    assert!(text.contains("lazy groups") && text.contains("wal syncs"), "{text}");
    // ... WRITE_THROUGH syncs each ...
    let before = settle(&d);
    for i in 0..N {
        assert_eq!(c.write(f, i * 64, &data, true), NtStatus::SUCCESS);
    }
    let through = fsyncs(&d) - before;
    assert!(through >= N, "protocol: {through} fsyncs for {N} WRITE_THROUGH writes");
    // ... and FLUSH syncs what was answered before it.
    settle(&d);
    assert_eq!(c.write(f, 0, b"flushed", false), NtStatus::SUCCESS);
    let before = fsyncs(&d);
    let r = c.call(Request::Flush(FlushRequest { file_id: f }), Cmd::FLUSH);
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let flushed = fsyncs(&d) - before;
    assert!(flushed >= 1, "protocol: FLUSH synced nothing");
    c.close(f);

    // NFSv3 on `always`: UNSTABLE is answered FILE_SYNC.
    let mut n = Nfs::connect(d.nfs_port).as_user(0, 0);
    let root = n.mount("/public").unwrap();
    let fh = n.create3(&root, "n.bin").unwrap();
    assert_eq!(write3(&mut n, &fh, 0, &data, StableHow::Unstable).0, StableHow::FileSync);

    // NFSv3 on `protocol`: UNSTABLE, the verifier, COMMIT, FILE_SYNC.
    let mut n = Nfs::connect(d.nfs_port).as_user(0, 0);
    let root = n.mount("/lazy").unwrap();
    let fh = n.create3(&root, "n.bin").unwrap();
    let before = settle(&d);
    let (committed, verf) = write3(&mut n, &fh, 0, b"unstable bytes", StableHow::Unstable);
    assert_eq!(committed, StableHow::Unstable);
    for i in 1..N {
        assert_eq!(write3(&mut n, &fh, i * 64, &data, StableHow::Unstable), (StableHow::Unstable, verf));
    }
    let unstable = settle(&d) - before;
    assert!(unstable < N / 2, "protocol: {unstable} fsyncs for {N} UNSTABLE writes");
    assert_eq!(write3(&mut n, &fh, 0, b"unstable bytes", StableHow::Unstable).1, verf);
    let before = fsyncs(&d);
    assert_eq!(commit3(&mut n, &fh), verf, "COMMIT answers the verifier of the writes it made durable");
    assert!(fsyncs(&d) > before, "COMMIT synced nothing");
    assert_eq!(write3(&mut n, &fh, 0, b"unstable bytes", StableHow::FileSync).0, StableHow::FileSync);

    // NFSv4.1: FILE_SYNC on `always`; on `protocol` UNSTABLE, and COMMIT
    // syncs and answers the write's verifier.
    let (committed, _, _, _) = v41_write_commit(&d, "/public", "v4a.bin");
    assert_eq!(committed, StableHow4::FileSync);
    let (committed, wverf, cverf, synced) = v41_write_commit(&d, "/lazy", "v4b.bin");
    assert_eq!(committed, StableHow4::Unstable);
    assert_eq!(cverf, wverf);
    assert!(synced >= 1, "NFSv4.1 COMMIT synced nothing");

    // A crash and a restart: a new verifier; what was written is there
    // (SIGKILL keeps the kernel's page cache; COMMIT made it durable).
    d.kill_and_restart();
    let mut n = Nfs::connect(d.nfs_port).as_user(0, 0);
    let root = n.mount("/lazy").unwrap();
    let fh = n.lookup3(&root, b"n.bin").unwrap();
    let (got, _) = n.read3(&fh, 0, 14).unwrap();
    assert_eq!(&got[..], b"unstable bytes");
    let (committed, verf2) = write3(&mut n, &fh, 0, b"after restart", StableHow::Unstable);
    assert_eq!(committed, StableHow::Unstable);
    assert_ne!(verf2, verf, "the write verifier must change at every daemon start");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}
