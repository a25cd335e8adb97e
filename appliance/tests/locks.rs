//! Locks and share modes across connections and protocols, against a real
//! duetd: the daemon's one lock table (`duet_locks`) is what SMB
//! connections and the NFSv4 server all ask. Two SMB connections conflict
//! on byte-range locks (and on I/O into a locked range); a blocking SMB
//! LOCK answers STATUS_PENDING and completes when the holder unlocks, or
//! STATUS_CANCELLED on CANCEL; a dropped connection releases its locks;
//! SMB and NFSv4 locks conflict both ways (NFS4ERR_DENIED with the SMB
//! lock's range, NFS4ERR_LOCKED for NFS I/O into an SMB lock,
//! STATUS_FILE_LOCK_CONFLICT for SMB I/O into an NFS lock); SMB deny modes
//! refuse NFS opens (NFS4ERR_SHARE_DENIED) and NFS share_deny refuses SMB
//! opens (STATUS_SHARING_VIOLATION).

mod clients;
mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::{Name, Opaque};
use duet_protocols::smb2::compound::Compound;
use duet_protocols::smb2::create::{create_disposition, create_options, oplock_level};
use duet_protocols::smb2::header::{Command as Cmd, Header, HeaderIds};
use duet_protocols::smb2::lock::{LockElement, LockRequest};
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::oplock_break::{OplockBreak, OplockBreakMessage};
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::FileId;

const EXCL: u32 = LockElement::EXCLUSIVE_LOCK;
const SHARED: u32 = LockElement::SHARED_LOCK;
const NOWAIT: u32 = LockElement::FAIL_IMMEDIATELY;

fn lock_msg(c: &mut Smb, fid: FileId, offset: u64, length: u64, flags: u32) -> Vec<u8> {
    let mut storage = Vec::new();
    let l = LockRequest::new(0, fid, &[LockElement { offset, length, flags }], &mut storage);
    c.message(Request::Lock(l), Cmd::LOCK, true)
}

fn lock(c: &mut Smb, fid: FileId, offset: u64, length: u64, flags: u32) -> NtStatus {
    let m = lock_msg(c, fid, offset, length, flags);
    c.send(&m).unwrap();
    c.recv().expect("LOCK reply").status()
}

/// The next message from the server, interim responses included, or None
/// when nothing comes within `wait`.
fn next_raw(c: &mut Smb, wait: Duration) -> Option<Header> {
    c.tcp.set_read_timeout(Some(wait)).unwrap();
    let mut len = [0u8; 4];
    let got = c.tcp.read_exact(&mut len);
    c.tcp.set_read_timeout(None).unwrap();
    got.ok()?;
    let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
    c.tcp.read_exact(&mut buf).unwrap();
    let m = Compound::new(&buf).next().unwrap().unwrap();
    Some(m.header)
}

fn open_share(c: &mut Smb, name: &str, access: u32, share: u32) -> Result<FileId, NtStatus> {
    let mut r = open_req(name, create_disposition::OPEN_IF, create_options::NON_DIRECTORY_FILE, access);
    r.share_access = share;
    c.create_req(r)
}

/// NFSv4.1 OPEN (no create) of `name` in `dir` with share modes; the
/// open stateid and the file's handle.
fn nfs_open(
    n: &mut Nfs,
    s: &mut Sess,
    dir: &[u8],
    owner: &[u8],
    name: &str,
    access: u32,
    deny: u32,
) -> Result<(Stateid4, Vec<u8>), Nfsstat4> {
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(dir) }),
            ArgOp4::Open(Open4Args {
                seqid: 0,
                share_access: access,
                share_deny: deny,
                owner: StateOwner4 { clientid: s.clientid, owner: Opaque(owner) },
                openhow: OpenFlag4::NoCreate,
                claim: OpenClaim4::Null(Name(name.as_bytes())),
            }),
            ArgOp4::GetFh(()),
        ])
        .expect("OPEN reply");
    let r = res4(&rep);
    match (r.results.get(2), r.results.get(3)) {
        (Some(ResOp4::Open(Nfs4Res::Ok(o))), Some(ResOp4::GetFh(Nfs4Res::Ok(fh)))) => {
            Ok((o.stateid, fh.object.0.to_vec()))
        }
        _ => Err(r.status),
    }
}

enum LockAns {
    Ok(Stateid4),
    Denied { offset: u64, length: u64 },
    Err(Nfsstat4),
}

/// NFSv4 LOCK of a new lock owner under `open`.
fn nfs_lock(n: &mut Nfs, s: &mut Sess, fh: &[u8], open: Stateid4, write: bool, offset: u64, length: u64) -> LockAns {
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
            ArgOp4::Lock(Lock4Args {
                locktype: if write { NfsLockType4::Write } else { NfsLockType4::Read },
                reclaim: false,
                offset,
                length,
                locker: Locker4::New(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid: open,
                    lock_seqid: 0,
                    lock_owner: StateOwner4 { clientid: s.clientid, owner: Opaque(b"lock-owner") },
                }),
            }),
        ])
        .expect("LOCK reply");
    let r = res4(&rep);
    match r.results.get(2) {
        Some(ResOp4::Lock(Lock4Res::Ok(sid))) => LockAns::Ok(*sid),
        Some(ResOp4::Lock(Lock4Res::Denied(d))) => LockAns::Denied { offset: d.offset, length: d.length },
        _ => LockAns::Err(r.status),
    }
}

fn nfs_lockt(n: &mut Nfs, s: &mut Sess, fh: &[u8], offset: u64, length: u64) -> Option<(u64, u64)> {
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
            ArgOp4::LockT(LockT4Args {
                locktype: NfsLockType4::Write,
                offset,
                length,
                owner: StateOwner4 { clientid: s.clientid, owner: Opaque(b"tester") },
            }),
        ])
        .expect("LOCKT reply");
    let r = res4(&rep);
    match r.results.get(2) {
        Some(ResOp4::LockT(LockT4Res::Ok)) => None,
        Some(ResOp4::LockT(LockT4Res::Denied(d))) => Some((d.offset, d.length)),
        other => panic!("LOCKT: {other:?}"),
    }
}

fn nfs_locku(n: &mut Nfs, s: &mut Sess, fh: &[u8], lock: Stateid4, offset: u64, length: u64) -> Nfsstat4 {
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
            ArgOp4::LockU(LockU4Args { locktype: NfsLockType4::Write, seqid: 0, lock_stateid: lock, offset, length }),
        ])
        .expect("LOCKU reply");
    res4(&rep).status
}

fn nfs_write(n: &mut Nfs, s: &mut Sess, fh: &[u8], sid: Stateid4, offset: u64) -> Nfsstat4 {
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
            ArgOp4::Write(Write4Args { stateid: sid, offset, stable: StableHow4::FileSync, data: Opaque(b"nfs") }),
        ])
        .expect("WRITE reply");
    res4(&rep).status
}

fn nfs_read(n: &mut Nfs, s: &mut Sess, fh: &[u8], sid: Stateid4, offset: u64) -> Nfsstat4 {
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
            ArgOp4::Read(Read4Args { stateid: sid, offset, count: 4 }),
        ])
        .expect("READ reply");
    res4(&rep).status
}

fn nfs_close(n: &mut Nfs, s: &mut Sess, fh: &[u8], sid: Stateid4) -> Nfsstat4 {
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
            ArgOp4::Close(Close4Args { seqid: 0, open_stateid: sid }),
        ])
        .expect("CLOSE reply");
    res4(&rep).status
}

fn start() -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path());
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    // Users reach the SMB executors with the next catalog refresh (1 s).
    std::thread::sleep(Duration::from_millis(1500));
    (dir, d)
}

#[test]
fn smb_connections_share_one_lock_table() {
    let (_dir, d) = start();
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let mut b = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let fa = a.create("two-conns").unwrap();
    assert_eq!(a.write(fa, 0, &[7u8; 64], false), NtStatus::SUCCESS);
    let fb = b.create("two-conns").unwrap();

    // Another connection's exclusive lock: no lock, no I/O in the range.
    assert_eq!(lock(&mut a, fa, 0, 10, EXCL | NOWAIT), NtStatus::SUCCESS);
    assert_eq!(lock(&mut b, fb, 5, 10, SHARED | NOWAIT), NtStatus::LOCK_NOT_GRANTED);
    assert_eq!(b.write(fb, 9, b"x", false), NtStatus::FILE_LOCK_CONFLICT);
    assert_eq!(b.read(fb, 0, 4).unwrap_err(), NtStatus::FILE_LOCK_CONFLICT);
    assert_eq!(b.read(fb, 10, 4).unwrap(), vec![7u8; 4], "outside the range");
    // The holder itself reads and writes its exclusive range.
    assert_eq!(a.write(fa, 0, b"a", false), NtStatus::SUCCESS);

    // A blocking lock waits: STATUS_PENDING now, SUCCESS when a unlocks.
    let m = lock_msg(&mut b, fb, 0, 10, EXCL);
    let lock_mid = b.next_id - 1;
    b.send(&m).unwrap();
    let interim = next_raw(&mut b, Duration::from_secs(5)).expect("an interim response");
    assert_eq!(interim.status, NtStatus::PENDING);
    assert!(interim.flags.is_async(), "the interim response is in the ASYNC form");
    assert!(next_raw(&mut b, Duration::from_millis(300)).is_none(), "the lock waits");
    assert_eq!(lock(&mut a, fa, 0, 10, LockElement::UNLOCK), NtStatus::SUCCESS);
    let done = next_raw(&mut b, Duration::from_secs(5)).expect("the final response");
    assert_eq!((done.status, done.message_id), (NtStatus::SUCCESS, lock_mid));
    assert_eq!(done.ids, interim.ids, "the final response names the same AsyncId");
    // b holds it now.
    assert_eq!(a.write(fa, 0, b"a", false), NtStatus::FILE_LOCK_CONFLICT);

    // a waits in turn, and cancels (MS-SMB2 3.3.5.16): STATUS_CANCELLED.
    let m = lock_msg(&mut a, fa, 0, 1, SHARED);
    let mid = a.next_id - 1;
    a.send(&m).unwrap();
    let interim = next_raw(&mut a, Duration::from_secs(5)).expect("an interim response");
    assert_eq!(interim.status, NtStatus::PENDING);
    let HeaderIds::Async { async_id } = interim.ids else { panic!("{interim:?}") };
    a.cancel(mid, async_id);
    let done = next_raw(&mut a, Duration::from_secs(5)).expect("the cancelled lock's response");
    assert_eq!((done.status, done.message_id), (NtStatus::CANCELLED, mid));

    // A connection that goes away takes its locks with it.
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let st = lock(&mut a, fa, 0, 10, EXCL | NOWAIT);
        if st == NtStatus::SUCCESS {
            break;
        }
        assert_eq!(st, NtStatus::LOCK_NOT_GRANTED);
        assert!(Instant::now() < deadline, "the dropped connection's lock stays");
        std::thread::sleep(Duration::from_millis(50));
    }
    // And so does a closed open.
    let mut c = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let fc = c.create("two-conns").unwrap();
    assert_eq!(lock(&mut c, fc, 0, 1, SHARED | NOWAIT), NtStatus::LOCK_NOT_GRANTED);
    assert_eq!(a.close(fa), NtStatus::SUCCESS);
    assert_eq!(lock(&mut c, fc, 0, 1, SHARED | NOWAIT), NtStatus::SUCCESS);
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

#[test]
fn smb_and_nfs_locks_and_share_modes_conflict() {
    let (_dir, d) = start();
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let fa = a.create("cross").unwrap();
    assert_eq!(a.write(fa, 0, &[1u8; 512], false), NtStatus::SUCCESS);
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root = n.mount("/public").unwrap();
    let mut s = session(&mut n, b"locks-nfs", 1 << 20, 64);
    let (open, fh) = nfs_open(&mut n, &mut s, &root, b"o1", "cross", share::ACCESS_BOTH, share::DENY_NONE).unwrap();

    // An SMB exclusive lock: NFS LOCK and LOCKT are denied with its range,
    // NFS READ and WRITE into it get NFS4ERR_LOCKED.
    assert_eq!(lock(&mut a, fa, 100, 10, EXCL | NOWAIT), NtStatus::SUCCESS);
    match nfs_lock(&mut n, &mut s, &fh, open, false, 105, 1) {
        LockAns::Denied { offset, length } => assert_eq!((offset, length), (100, 10)),
        LockAns::Ok(_) => panic!("an NFS lock over an SMB lock was granted"),
        LockAns::Err(e) => panic!("LOCK: {e:?}"),
    }
    assert_eq!(nfs_lockt(&mut n, &mut s, &fh, 0, u64::MAX), Some((100, 10)));
    assert_eq!(nfs_write(&mut n, &mut s, &fh, open, 108), Nfsstat4::LOCKED);
    assert_eq!(nfs_read(&mut n, &mut s, &fh, open, 98), Nfsstat4::LOCKED);
    assert_eq!(nfs_write(&mut n, &mut s, &fh, open, 110), Nfsstat4::OK, "past the range");
    assert_eq!(lock(&mut a, fa, 100, 10, LockElement::UNLOCK), NtStatus::SUCCESS);
    assert_eq!(nfs_write(&mut n, &mut s, &fh, open, 108), Nfsstat4::OK, "unlocked");

    // An NFS write lock to EOF: SMB LOCK is refused, SMB READ and WRITE
    // into it get STATUS_FILE_LOCK_CONFLICT.
    let LockAns::Ok(nlock) = nfs_lock(&mut n, &mut s, &fh, open, true, 200, u64::MAX) else {
        panic!("NFS LOCK refused")
    };
    assert_eq!(lock(&mut a, fa, 1 << 40, 1, SHARED | NOWAIT), NtStatus::LOCK_NOT_GRANTED);
    assert_eq!(a.write(fa, 300, b"smb", false), NtStatus::FILE_LOCK_CONFLICT);
    assert_eq!(a.read(fa, 200, 4).unwrap_err(), NtStatus::FILE_LOCK_CONFLICT);
    assert_eq!(a.write(fa, 0, b"smb", false), NtStatus::SUCCESS, "before the range");
    assert_eq!(lock(&mut a, fa, 0, 200, EXCL | NOWAIT), NtStatus::SUCCESS, "adjacent");
    assert_eq!(nfs_locku(&mut n, &mut s, &fh, nlock, 200, u64::MAX), Nfsstat4::OK);
    assert_eq!(a.write(fa, 300, b"smb", false), NtStatus::SUCCESS);
    assert_eq!(lock(&mut a, fa, 0, 200, LockElement::UNLOCK), NtStatus::SUCCESS);
    assert_eq!(nfs_close(&mut n, &mut s, &fh, open), Nfsstat4::OK);
    assert_eq!(a.close(fa), NtStatus::SUCCESS);

    // SMB deny-write (share read only): NFS write opens are refused,
    // NFS read opens are not.
    let fr = open_share(&mut a, "cross", R, 1).unwrap();
    assert_eq!(
        nfs_open(&mut n, &mut s, &root, b"o2", "cross", share::ACCESS_WRITE, share::DENY_NONE).unwrap_err(),
        Nfsstat4::SHARE_DENIED
    );
    let (ro, rfh) = nfs_open(&mut n, &mut s, &root, b"o3", "cross", share::ACCESS_READ, share::DENY_NONE)
        .expect("an NFS read open next to an SMB deny-write open");
    assert_eq!(nfs_close(&mut n, &mut s, &rfh, ro), Nfsstat4::OK);
    assert_eq!(a.close(fr), NtStatus::SUCCESS);
    let (wo, wfh) = nfs_open(&mut n, &mut s, &root, b"o2", "cross", share::ACCESS_WRITE, share::DENY_NONE)
        .expect("the SMB open is closed");
    assert_eq!(nfs_close(&mut n, &mut s, &wfh, wo), Nfsstat4::OK);

    // NFS share_deny WRITE: SMB opens for writing get a sharing
    // violation, SMB readers do not.
    let (dn, dfh) = nfs_open(&mut n, &mut s, &root, b"o4", "cross", share::ACCESS_READ, share::DENY_WRITE).unwrap();
    assert_eq!(open_share(&mut a, "cross", RW, 7).unwrap_err(), NtStatus::SHARING_VIOLATION);
    let fr = open_share(&mut a, "cross", R, 7).expect("an SMB reader next to NFS deny-write");
    assert_eq!(a.close(fr), NtStatus::SUCCESS);
    assert_eq!(nfs_close(&mut n, &mut s, &dfh, dn), Nfsstat4::OK);
    let fw = open_share(&mut a, "cross", RW, 7).expect("the NFS open is closed");
    assert_eq!(a.close(fw), NtStatus::SUCCESS);
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

// ---------------------------------------------------------------- oplocks

/// The next message from the server (interim responses and notifications
/// included) with its bytes, or None when nothing comes within `wait`.
fn next_msg(c: &mut Smb, wait: Duration) -> Option<(Header, Vec<u8>)> {
    c.tcp.set_read_timeout(Some(wait)).unwrap();
    let mut len = [0u8; 4];
    let got = c.tcp.read_exact(&mut len);
    c.tcp.set_read_timeout(None).unwrap();
    got.ok()?;
    let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
    c.tcp.read_exact(&mut buf).unwrap();
    let m = Compound::new(&buf).next().unwrap().unwrap();
    Some((m.header, m.bytes.to_vec()))
}

/// A CREATE (OPEN_IF) asking for `oplock`, sent without waiting.
fn send_open(c: &mut Smb, name: &str, access: u32, oplock: u8) {
    let mut req = open_req(name, create_disposition::OPEN_IF, create_options::NON_DIRECTORY_FILE, access);
    req.requested_oplock_level = oplock;
    let m = c.message(Request::Create(req), Cmd::CREATE, true);
    c.send(&m).unwrap();
}

/// The final CREATE response: (file id, granted oplock level, header).
fn create_reply(c: &mut Smb) -> (FileId, u8, Header) {
    let r = c.recv().expect("CREATE reply");
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let Ok(Response::Create(cr)) = Response::decode(&r.header, &r.bytes) else { panic!("create reply") };
    (cr.file_id, cr.oplock_level, r.header)
}

fn open_with(c: &mut Smb, name: &str, access: u32, oplock: u8) -> (FileId, u8) {
    send_open(c, name, access, oplock);
    let (f, l, _) = create_reply(c);
    (f, l)
}

/// An OPLOCK_BREAK notification (MS-SMB2 2.2.23.1): its level and file.
fn break_note(c: &mut Smb, wait: Duration) -> Option<OplockBreak> {
    let (h, bytes) = next_msg(c, wait)?;
    assert_eq!(h.command, Cmd::OPLOCK_BREAK, "a break notification");
    assert_eq!(h.message_id, u64::MAX, "notifications carry MessageId -1 (MS-SMB2 3.3.4.6)");
    match OplockBreakMessage::decode(&bytes).unwrap() {
        OplockBreakMessage::Oplock(b) => Some(b),
        other => panic!("not an oplock break: {other:?}"),
    }
}

fn start_short_breaks() -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(dir.path(), "[limits]\nsmb_oplock_break_ms = 1500", "", "portmap = false");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    (dir, d)
}

/// The connection registry routes a break decided on one connection to
/// the holder's: a batch oplock of connection a is broken by connection
/// b's open (the notification reaches a, b's CREATE answers STATUS_PENDING
/// and completes only after a's acknowledgment); a holder that never
/// acknowledges loses its oplock at `smb_oplock_break_ms` and the opener
/// proceeds; an open for writing breaks level II oplocks to none without
/// waiting.
#[test]
fn oplock_breaks_are_routed_between_connections() {
    let (_dir, d) = start_short_breaks();
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let mut b = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");

    // Batch on a file nobody else has open.
    let (fa, level) = open_with(&mut a, "ob-batch", RW, oplock_level::BATCH);
    assert_eq!(level, oplock_level::BATCH);
    // b opens it for writing: a is told to break to level II (an open
    // takes write and handle caching; data changes take read caching);
    // b waits.
    send_open(&mut b, "ob-batch", RW, oplock_level::NONE);
    let (interim, _) = next_msg(&mut b, Duration::from_secs(5)).expect("an interim response");
    assert_eq!(interim.status, NtStatus::PENDING);
    assert!(interim.flags.is_async(), "the interim answer has an AsyncId (MS-SMB2 3.3.4.2)");
    let note = break_note(&mut a, Duration::from_secs(5)).expect("a break notification on a");
    assert_eq!((note.oplock_level, note.file_id), (oplock_level::II, fa));
    assert!(next_msg(&mut b, Duration::from_millis(300)).is_none(), "b waits for a's acknowledgment");
    // a writes its cached data, then acknowledges.
    assert_eq!(a.write(fa, 0, b"cached", false), NtStatus::SUCCESS);
    let ack = OplockBreak { oplock_level: oplock_level::NONE, file_id: fa };
    let r = a.call(Request::OplockBreak(OplockBreakMessage::Oplock(ack)), Cmd::OPLOCK_BREAK);
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let t0 = Instant::now();
    let (fb, lb, hb) = create_reply(&mut b);
    assert!(t0.elapsed() < Duration::from_secs(1), "b proceeds at the acknowledgment");
    assert!(hb.flags.is_async(), "the final answer is in the ASYNC form");
    assert_eq!(lb, oplock_level::NONE);
    assert_eq!(b.read(fb, 0, 6).unwrap(), b"cached".to_vec(), "b sees what a wrote before acking");
    // An acknowledgment of an oplock that is not breaking is refused.
    let r = a.call(Request::OplockBreak(OplockBreakMessage::Oplock(ack)), Cmd::OPLOCK_BREAK);
    assert_eq!(r.status(), NtStatus::INVALID_OPLOCK_PROTOCOL);

    // A holder that never acknowledges: revoked after the timeout.
    let (_fa2, level) = open_with(&mut a, "ob-silent", RW, oplock_level::EXCLUSIVE);
    assert_eq!(level, oplock_level::EXCLUSIVE);
    let t0 = Instant::now();
    send_open(&mut b, "ob-silent", R, oplock_level::NONE);
    let note = break_note(&mut a, Duration::from_secs(5)).expect("a break notification");
    assert_eq!(note.oplock_level, oplock_level::II, "a reader leaves the holder read caching");
    let (_, _, hb) = create_reply(&mut b);
    let waited = t0.elapsed();
    assert!(hb.flags.is_async());
    assert!(
        waited >= Duration::from_millis(1400) && waited < Duration::from_secs(6),
        "b waited for the break timeout (1.5 s), not {waited:?}"
    );

    // Level II: two readers share it; a write through a third open breaks
    // both to none at once, and nobody waits.
    let (_r1, l1) = open_with(&mut a, "ob-l2", R, oplock_level::II);
    let (_r2, l2) = open_with(&mut b, "ob-l2", R, oplock_level::BATCH);
    assert_eq!((l1, l2), (oplock_level::II, oplock_level::II), "a second opener gets level II");
    let mut c = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let (w, lw) = open_with(&mut c, "ob-l2", RW, oplock_level::NONE);
    assert_eq!(lw, oplock_level::NONE);
    assert!(next_msg(&mut a, Duration::from_millis(200)).is_none(), "opening for writing is no write");
    let t0 = Instant::now();
    assert_eq!(c.write(w, 0, b"new", false), NtStatus::SUCCESS);
    assert!(t0.elapsed() < Duration::from_secs(1), "no acknowledgment is awaited for level II");
    for h in [&mut a, &mut b] {
        let note = break_note(h, Duration::from_secs(5)).expect("a break to none");
        assert_eq!(note.oplock_level, oplock_level::NONE);
    }
    // A dropped holder's oplock goes with its connection: no wait.
    let (_fx, lx) = open_with(&mut c, "ob-drop", RW, oplock_level::BATCH);
    assert_eq!(lx, oplock_level::BATCH);
    drop(c);
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let (_fy, _) = open_with(&mut b, "ob-drop", RW, oplock_level::NONE);
    assert!(t0.elapsed() < Duration::from_secs(1));
}

/// A CREATE asking for lease `key` at `state` (v1 context, MS-SMB2
/// 2.2.13.2.8) on `name`: (file id, granted lease state).
fn open_leased(c: &mut Smb, name: &str, access: u32, key: [u8; 16], state: u32) -> (FileId, u32) {
    use duet_protocols::smb2::create_context::Lease;
    let lease = Lease { lease_key: key, lease_state: state, lease_flags: 0, lease_duration: 0, v2: None };
    create_leased(c, name, create_options::NON_DIRECTORY_FILE, access, lease)
}

/// CREATE (OPEN_IF) of `name` with lease context `lease`: (file id,
/// granted lease state).
fn create_leased(
    c: &mut Smb,
    name: &str,
    options: u32,
    access: u32,
    lease: duet_protocols::smb2::create_context::Lease,
) -> (FileId, u32) {
    use duet_protocols::smb2::create_context::{CreateContextRequest, CreateContextResponse};
    let mut req = open_req(name, create_disposition::OPEN_IF, options, access);
    req.requested_oplock_level = oplock_level::LEASE;
    req.create_contexts = vec![CreateContextRequest::RequestLease(lease)];
    let m = c.message(Request::Create(req), Cmd::CREATE, true);
    c.send(&m).unwrap();
    let r = c.recv().expect("CREATE reply");
    assert_eq!(r.status(), NtStatus::SUCCESS, "CREATE {name}");
    let Ok(Response::Create(cr)) = Response::decode(&r.header, &r.bytes) else { panic!("create reply") };
    let got = cr
        .create_contexts
        .iter()
        .find_map(|x| match x {
            CreateContextResponse::Lease(l) => Some(l.lease_state),
            _ => None,
        })
        .expect("a lease response context");
    (cr.file_id, got)
}

/// A LEASE_BREAK notification (MS-SMB2 2.2.23.2): key, current and new
/// state, flags.
fn lease_note(c: &mut Smb, wait: Duration) -> Option<([u8; 16], u32, u32, u32)> {
    let (h, bytes) = next_msg(c, wait)?;
    assert_eq!((h.command, h.message_id), (Cmd::OPLOCK_BREAK, u64::MAX), "a break notification");
    match OplockBreakMessage::decode(&bytes).unwrap() {
        OplockBreakMessage::LeaseNotification(n) => {
            Some((n.lease_key, n.current_lease_state, n.new_lease_state, n.flags))
        }
        other => panic!("not a lease break: {other:?}"),
    }
}

/// MS-SMB2 3.3.1.13 / 3.3.4.7 / 3.3.5.22.2 in the daemon: the test
/// client's connections share one ClientGuid, so they share a lease by
/// key. A second connection's open by the key breaks nothing; an open
/// without the key breaks it, the notification goes to the client's
/// oldest live connection, the other connection's acknowledgment lets the
/// opener go on; once that connection is gone the next break reaches the
/// one left.
#[test]
fn a_lease_is_the_client_guids_across_connections() {
    use duet_protocols::smb2::oplock_break::LeaseBreakAck;
    let (_dir, d) = start_short_breaks();
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let mut b = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let mut c = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let key = *b"appliance-lease1";
    let (_fa, la) = open_leased(&mut a, "lease-shared", RW, key, 7);
    assert_eq!(la, 7, "RWH on a file nobody else has open");
    let (fb, lb) = open_leased(&mut b, "lease-shared", RW, key, 7);
    assert_eq!(lb, 7, "b joins a's lease: the same client and key");
    assert!(next_msg(&mut a, Duration::from_millis(300)).is_none(), "a lease's own opens break nothing");
    // c opens without the key: RWH -> RH, to a (the oldest connection).
    send_open(&mut c, "lease-shared", RW, oplock_level::NONE);
    let (interim, _) = next_msg(&mut c, Duration::from_secs(5)).expect("an interim response");
    assert_eq!(interim.status, NtStatus::PENDING);
    let note = lease_note(&mut a, Duration::from_secs(5)).expect("a lease break on a");
    assert_eq!(note, (key, 7, 3, 1), "RWH -> RH, acknowledgment required");
    assert!(next_msg(&mut b, Duration::from_millis(200)).is_none(), "one notification for the client");
    // b writes what it cached, then acknowledges for the client.
    assert_eq!(b.write(fb, 0, b"from b", false), NtStatus::SUCCESS);
    let ack = LeaseBreakAck { flags: 0, lease_key: key, lease_state: 3, lease_duration: 0 };
    let r = b.call(Request::OplockBreak(OplockBreakMessage::LeaseAck(ack)), Cmd::OPLOCK_BREAK);
    assert_eq!(r.status(), NtStatus::SUCCESS, "the other connection of the client acknowledges");
    let t0 = Instant::now();
    let (fc, _, _) = create_reply(&mut c);
    assert!(t0.elapsed() < Duration::from_secs(1), "c proceeds at b's acknowledgment");
    assert_eq!(c.read(fc, 0, 6).unwrap(), b"from b".to_vec());
    // a goes: the lease stays with b's open, and the next break goes to b.
    drop(a);
    std::thread::sleep(Duration::from_millis(300));
    let mut req = open_req("lease-shared", create_disposition::OVERWRITE_IF, create_options::NON_DIRECTORY_FILE, RW);
    req.requested_oplock_level = oplock_level::NONE;
    let m = c.message(Request::Create(req), Cmd::CREATE, true);
    c.send(&m).unwrap();
    let note = lease_note(&mut b, Duration::from_secs(5)).expect("the break reaches b now");
    assert_eq!((note.0, note.1, note.2), (key, 3, 0), "an overwrite takes RH");
    let ack = LeaseBreakAck { flags: 0, lease_key: key, lease_state: 0, lease_duration: 0 };
    let r = b.call(Request::OplockBreak(OplockBreakMessage::LeaseAck(ack)), Cmd::OPLOCK_BREAK);
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let r = loop {
        let r = c.recv().expect("CREATE reply");
        if r.status() != NtStatus::PENDING {
            break r;
        }
    };
    assert_eq!(r.status(), NtStatus::SUCCESS);
}

// ------------------------------------------------- NFS breaks SMB caching

/// READ of `len` bytes at 0 through `sid`: the data.
fn nfs_read_data(n: &mut Nfs, s: &mut Sess, fh: &[u8], sid: Stateid4, len: u32) -> Vec<u8> {
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
            ArgOp4::Read(Read4Args { stateid: sid, offset: 0, count: len }),
        ])
        .expect("READ reply");
    match res4(&rep).results.get(2) {
        Some(ResOp4::Read(Nfs4Res::Ok(r))) => r.data.0.to_vec(),
        other => panic!("READ: {other:?}"),
    }
}

/// PUTFH dir SAVEFH then REMOVE `name` or RENAME it to `to`: the status.
fn nfs_remove_or_rename(n: &mut Nfs, s: &mut Sess, dir: &[u8], name: &str, to: Option<&str>) -> Nfsstat4 {
    let seq = s.sequence();
    let op = match to {
        Some(t) => ArgOp4::Rename(Rename4Args { oldname: Name(name.as_bytes()), newname: Name(t.as_bytes()) }),
        None => ArgOp4::Remove(Remove4Args { target: Name(name.as_bytes()) }),
    };
    let rep = n
        .v4(vec![seq, ArgOp4::PutFh(PutFh4Args { object: Opaque(dir) }), ArgOp4::SaveFh(()), op])
        .expect("REMOVE/RENAME reply");
    let r = res4(&rep);
    assert_eq!(r.results.len(), 4, "{r:?}");
    r.status
}

/// Retries an NFS operation answered NFS4ERR_DELAY every 50 ms (as a
/// client does, RFC 8881 15.1.1.3) until it is not, for `max` at most.
fn until_not_delay<T>(max: Duration, mut f: impl FnMut() -> Result<T, Nfsstat4>) -> Result<T, Nfsstat4> {
    let t0 = Instant::now();
    loop {
        match f() {
            Err(Nfsstat4::DELAY) if t0.elapsed() < max => std::thread::sleep(Duration::from_millis(50)),
            r => return r,
        }
    }
}

/// Issue 13's point, in the daemon: an NFSv4.1 OPEN, REMOVE or RENAME of
/// a file an SMB client caches breaks the SMB lease or oplock through the
/// connection registry (the NFS server lives on executor 0, the SMB
/// connection wherever it was accepted), and the NFS operation answers
/// NFS4ERR_DELAY until the SMB client has written what it cached and
/// acknowledged; the retry then succeeds and NFS reads the SMB client's
/// bytes exactly. A holder that never acknowledges is revoked at
/// `smb_oplock_break_ms` and the NFS client goes on.
#[test]
fn nfs_opens_removes_and_renames_break_smb_leases_and_oplocks() {
    use duet_protocols::smb2::oplock_break::LeaseBreakAck;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(dir.path(), "[limits]\nsmb_oplock_break_ms = 3000", "", "portmap = false");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root = n.mount("/public").unwrap();
    let mut s = session(&mut n, b"xproto-nfs", 1 << 20, 64);
    let ack = |a: &mut Smb, key: [u8; 16], state: u32| {
        let m = LeaseBreakAck { flags: 0, lease_key: key, lease_state: state, lease_duration: 0 };
        a.call(Request::OplockBreak(OplockBreakMessage::LeaseAck(m)), Cmd::OPLOCK_BREAK).status()
    };

    // 1. RWH lease; NFS opens for writing: RWH -> none, DELAY until the ack.
    let key = *b"xproto-lease-rwh";
    let (fa, la) = open_leased(&mut a, "x-rwh", RW, key, 7);
    assert_eq!(la, 7);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
    let open = |n: &mut Nfs, s: &mut Sess, name: &str, access: u32| {
        nfs_open(n, s, &root, format!("owner-{name}-{access}").as_bytes(), name, access, share::DENY_NONE)
    };
    assert_eq!(open(&mut n, &mut s, "x-rwh", share::ACCESS_BOTH).unwrap_err(), Nfsstat4::DELAY);
    let note = lease_note(&mut a, Duration::from_secs(5)).expect("a LEASE_BREAK from the NFS open");
    assert_eq!(note, (key, 7, 0, 1), "an open for writing takes RWH, acknowledgment required");
    assert_eq!(open(&mut n, &mut s, "x-rwh", share::ACCESS_BOTH).unwrap_err(), Nfsstat4::DELAY, "until the ack");
    assert!(next_msg(&mut a, Duration::from_millis(200)).is_none(), "one notification, not one per retry");
    // The SMB client flushes what it cached, then acknowledges.
    assert_eq!(a.write(fa, 0, &data, false), NtStatus::SUCCESS);
    assert_eq!(ack(&mut a, key, 0), NtStatus::SUCCESS);
    let (sid, fh) = open(&mut n, &mut s, "x-rwh", share::ACCESS_BOTH).expect("the retry opens");
    assert_eq!(nfs_read_data(&mut n, &mut s, &fh, sid, 4096), data, "NFS reads what SMB wrote, exactly");
    assert_eq!(nfs_close(&mut n, &mut s, &fh, sid), Nfsstat4::OK);
    assert_eq!(a.close(fa), NtStatus::SUCCESS);

    // 2. Batch oplock; NFS opens for reading: batch -> level II.
    let (fb, lb) = open_with(&mut a, "x-batch", RW, oplock_level::BATCH);
    assert_eq!(lb, oplock_level::BATCH);
    assert_eq!(open(&mut n, &mut s, "x-batch", share::ACCESS_READ).unwrap_err(), Nfsstat4::DELAY);
    let note = break_note(&mut a, Duration::from_secs(5)).expect("an OPLOCK_BREAK from the NFS open");
    assert_eq!((note.oplock_level, note.file_id), (oplock_level::II, fb), "a reader leaves read caching");
    assert_eq!(a.write(fb, 0, b"batch-cached", false), NtStatus::SUCCESS);
    let m = OplockBreak { oplock_level: oplock_level::II, file_id: fb };
    let r = a.call(Request::OplockBreak(OplockBreakMessage::Oplock(m)), Cmd::OPLOCK_BREAK);
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let (sid, fh) = open(&mut n, &mut s, "x-batch", share::ACCESS_READ).expect("the retry opens");
    assert_eq!(nfs_read_data(&mut n, &mut s, &fh, sid, 100), b"batch-cached".to_vec());
    assert_eq!(nfs_close(&mut n, &mut s, &fh, sid), Nfsstat4::OK);
    assert_eq!(a.close(fb), NtStatus::SUCCESS);

    // 3. REMOVE and RENAME break handle caching: RWH -> RW, RH -> R.
    for (name, to, state, access) in [("x-rm", None, 7u32, RW), ("x-mv", Some("x-moved"), 3, R)] {
        let key = if to.is_some() { *b"xproto-lease-mv1" } else { *b"xproto-lease-rm1" };
        let (f, l) = open_leased(&mut a, name, access, key, state);
        assert_eq!(l, state);
        assert_eq!(nfs_remove_or_rename(&mut n, &mut s, &root, name, to), Nfsstat4::DELAY);
        let note = lease_note(&mut a, Duration::from_secs(5)).expect("a LEASE_BREAK from REMOVE/RENAME");
        assert_eq!(note, (key, state, state & !2, 1), "{name}: handle caching goes");
        assert_eq!(nfs_remove_or_rename(&mut n, &mut s, &root, name, to), Nfsstat4::DELAY);
        assert_eq!(ack(&mut a, key, state & !2), NtStatus::SUCCESS);
        assert_eq!(nfs_remove_or_rename(&mut n, &mut s, &root, name, to), Nfsstat4::OK, "{name} after the ack");
        assert_eq!(a.close(f), NtStatus::SUCCESS);
    }
    assert_eq!(open(&mut n, &mut s, "x-rm", share::ACCESS_READ).unwrap_err(), Nfsstat4::NOENT);
    let (sid, fh) = open(&mut n, &mut s, "x-moved", share::ACCESS_READ).expect("renamed");
    assert_eq!(nfs_close(&mut n, &mut s, &fh, sid), Nfsstat4::OK);

    // 4. A holder that never acknowledges: revoked after 3 s, the NFS
    // client's retries then open.
    let key = *b"xproto-lease-sil";
    let (_fs, l) = open_leased(&mut a, "x-silent", RW, key, 7);
    assert_eq!(l, 7);
    let t0 = Instant::now();
    let (sid, fh) = until_not_delay(Duration::from_secs(10), || open(&mut n, &mut s, "x-silent", share::ACCESS_BOTH))
        .expect("opened once the lease is revoked");
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(2900) && waited < Duration::from_secs(8), "waited {waited:?}");
    assert_eq!(lease_note(&mut a, Duration::from_secs(1)).expect("the break").2, 0);
    assert_eq!(nfs_close(&mut n, &mut s, &fh, sid), Nfsstat4::OK);
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

/// Issue 13 for NFSv3, in the daemon: an NFSv3 WRITE of a file an SMB
/// client holds an RWH lease on breaks it (write caching must be flushed:
/// NFS3ERR_JUKEBOX, RFC 1813 2.6, until the acknowledgment), and the
/// bytes the SMB client wrote before acknowledging are in the file NFS
/// then reads; an NFSv3 REMOVE breaks handle caching (RH -> R) and answers
/// JUKEBOX until the ack, then removes the file.
#[test]
fn nfs3_writes_and_removes_break_smb_leases() {
    use duet_protocols::nfs::nfs3::Nfsstat3;
    use duet_protocols::smb2::oplock_break::LeaseBreakAck;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(dir.path(), "[limits]\nsmb_oplock_break_ms = 3000", "", "portmap = false");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root = n.mount("/public").unwrap();
    let ack = |a: &mut Smb, key: [u8; 16], state: u32| {
        let m = LeaseBreakAck { flags: 0, lease_key: key, lease_state: state, lease_duration: 0 };
        a.call(Request::OplockBreak(OplockBreakMessage::LeaseAck(m)), Cmd::OPLOCK_BREAK).status()
    };

    // WRITE: RWH -> none, JUKEBOX until the SMB client flushed and acked.
    let key = *b"v3break-leaseRWH";
    let (fa, la) = open_leased(&mut a, "v3-file", RW, key, 7);
    assert_eq!(la, 7);
    let fh = n.lookup3(&root, b"v3-file").unwrap();
    assert_eq!(n.write3(&fh, 3000, b"+nfs"), Err(Nfsstat3::JUKEBOX));
    let note = lease_note(&mut a, Duration::from_secs(5)).expect("a LEASE_BREAK from the NFSv3 WRITE");
    assert_eq!(note, (key, 7, 0, 1), "a write takes read and write caching, acknowledgment required");
    assert_eq!(n.write3(&fh, 3000, b"+nfs"), Err(Nfsstat3::JUKEBOX), "until the ack");
    assert!(next_msg(&mut a, Duration::from_millis(200)).is_none(), "one notification, not one per retry");
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 % 251) as u8).collect();
    assert_eq!(a.write(fa, 0, &data, false), NtStatus::SUCCESS);
    assert_eq!(ack(&mut a, key, 0), NtStatus::SUCCESS);
    assert_eq!(n.write3(&fh, 3000, b"+nfs"), Ok(4), "the retry writes");
    let mut want = data.clone();
    want.extend_from_slice(b"+nfs");
    assert_eq!(n.read3_all(&fh).unwrap(), want, "the SMB client's bytes, then NFS's");

    // REMOVE: a second open's RH lease loses H, JUKEBOX until the ack.
    let key = *b"v3break-lease-RH";
    let (fb, lb) = open_leased(&mut a, "v3-file", R, key, 3);
    assert_eq!(lb, 3);
    assert_eq!(n.remove3(&root, "v3-file"), Nfsstat3::JUKEBOX);
    let note = lease_note(&mut a, Duration::from_secs(5)).expect("a LEASE_BREAK from the NFSv3 REMOVE");
    assert_eq!(note, (key, 3, 1, 1), "handle caching goes");
    assert_eq!(n.remove3(&root, "v3-file"), Nfsstat3::JUKEBOX, "until the ack");
    assert_eq!(n.lookup3(&root, b"v3-file").map(|_| ()), Ok(()), "not removed meanwhile");
    assert_eq!(ack(&mut a, key, 1), NtStatus::SUCCESS);
    assert_eq!(n.remove3(&root, "v3-file"), Nfsstat3::OK, "after the ack");
    assert_eq!(n.lookup3(&root, b"v3-file").map(|_| ()), Err(Nfsstat3::NOENT));
    assert_eq!(a.close(fa), NtStatus::SUCCESS);
    assert_eq!(a.close(fb), NtStatus::SUCCESS);
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

/// A CREATE with a v2 lease context (MS-SMB2 2.2.13.2.10) on `name`, a
/// directory when `dir`, naming `parent` as ParentLeaseKey when given:
/// (file id, granted lease state).
fn open_leased_v2(c: &mut Smb, name: &str, dir: bool, key: [u8; 16], parent: Option<[u8; 16]>, state: u32) -> (FileId, u32) {
    use duet_protocols::smb2::create_context::{Lease, LeaseV2};
    let options = if dir { create_options::DIRECTORY_FILE } else { create_options::NON_DIRECTORY_FILE };
    let lease = Lease {
        lease_key: key,
        lease_state: state,
        lease_flags: if parent.is_some() { Lease::PARENT_LEASE_KEY_SET } else { 0 },
        lease_duration: 0,
        v2: Some(LeaseV2 { parent_lease_key: parent.unwrap_or_default(), epoch: 0 }),
    };
    create_leased(c, name, options, RW, lease)
}

/// Issue 13, directory leases in the daemon (MS-SMB2 3.3.5.9.11 with
/// SMB2_GLOBAL_CAP_DIRECTORY_LEASING, 3.3.4.7): an SMB 3.0 client's
/// directory lease is RH at most; a name created in the directory by an
/// NFSv3 client, by another SMB client, or removed over NFSv3 breaks it to
/// none (acknowledgment required, the change not waiting); the lease
/// holder's own create naming the lease as ParentLeaseKey breaks nothing;
/// another client's WRITE breaks it only when that open closes.
#[test]
fn directory_leases_break_on_changes_from_both_protocols() {
    use duet_protocols::smb2::negotiate::dialect;
    use duet_protocols::smb2::oplock_break::LeaseBreakAck;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(dir.path(), "", "", "portmap = false");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    let smb3 = |guid: [u8; 16]| {
        let mut c = Smb::connect(d.smb_port);
        c.negotiate_as(dialect::SMB3_0, guid);
        assert_eq!(c.login("alice", "alicepw"), NtStatus::SUCCESS);
        assert_eq!(c.tree("public"), NtStatus::SUCCESS);
        c
    };
    let mut a = smb3([0xA1; 16]);
    let mut b = smb3([0xB2; 16]);
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root = n.mount("/public").unwrap();
    let ack = |a: &mut Smb, key: [u8; 16], state: u32| {
        let m = LeaseBreakAck { flags: 0, lease_key: key, lease_state: state, lease_duration: 0 };
        a.call(Request::OplockBreak(OplockBreakMessage::LeaseAck(m)), Cmd::OPLOCK_BREAK).status()
    };
    let key = *b"dirlease-key-one";
    let (_hd, got) = open_leased_v2(&mut a, "dl", true, key, None, 7);
    assert_eq!(got, 3, "a directory gets read and handle caching, never write");

    // An NFSv3 CREATE inside: RH -> none, acknowledgment required.
    let dfh = n.lookup3(&root, b"dl").unwrap();
    let t0 = Instant::now();
    n.create3(&dfh, "from-nfs").unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "the create does not wait for the break");
    let note = lease_note(&mut a, Duration::from_secs(5)).expect("a LEASE_BREAK from the NFSv3 CREATE");
    assert_eq!(note, (key, 3, 0, 1));
    assert_eq!(ack(&mut a, key, 0), NtStatus::SUCCESS);

    // Re-granted at once, then the holder's own create (parent key set)
    // breaks nothing.
    let (_hd2, got) = open_leased_v2(&mut a, "dl", true, key, None, 3);
    assert_eq!(got, 3, "re-granted after the break");
    let (fa, _) = open_leased_v2(&mut a, "dl\\own", false, *b"dirlease-child-a", Some(key), 7);
    assert!(next_msg(&mut a, Duration::from_millis(700)).is_none(), "the parent's own lease is not broken");

    // Another client's create breaks it.
    let (fb, _) = open_leased_v2(&mut b, "dl\\other", false, *b"dirlease-child-b", None, 7);
    let note = lease_note(&mut a, Duration::from_secs(5)).expect("a LEASE_BREAK from the other SMB client's create");
    assert_eq!(note, (key, 3, 0, 1));
    assert_eq!(ack(&mut a, key, 0), NtStatus::SUCCESS);

    // Its write breaks nothing until its close.
    let (_hd3, got) = open_leased_v2(&mut a, "dl", true, key, None, 3);
    assert_eq!(got, 3);
    assert_eq!(b.write(fb, 0, b"bytes", false), NtStatus::SUCCESS);
    assert!(next_msg(&mut a, Duration::from_millis(700)).is_none(), "a write alone breaks nothing");
    assert_eq!(b.close(fb), NtStatus::SUCCESS);
    let note = lease_note(&mut a, Duration::from_secs(5)).expect("a LEASE_BREAK at the written file's close");
    assert_eq!(note, (key, 3, 0, 1));
    assert_eq!(ack(&mut a, key, 0), NtStatus::SUCCESS);

    // An NFSv3 REMOVE inside breaks it too.
    let (_hd4, got) = open_leased_v2(&mut a, "dl", true, key, None, 3);
    assert_eq!(got, 3);
    assert_eq!(n.remove3(&dfh, "from-nfs"), duet_protocols::nfs::nfs3::Nfsstat3::OK);
    let note = lease_note(&mut a, Duration::from_secs(5)).expect("a LEASE_BREAK from the NFSv3 REMOVE");
    assert_eq!(note, (key, 3, 0, 1));
    assert_eq!(a.close(fa), NtStatus::SUCCESS);
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

/// Delete-on-close across connections (MS-FSA 2.1.5.4, 2.1.5.1.2.1): B
/// opens a file A holds open, with FILE_DELETE_ON_CLOSE, and closes it:
/// the file stays while A's open lasts (A reads and writes it, NFS still
/// sees it), a new SMB open of the name is STATUS_DELETE_PENDING; A's
/// close removes it. Then the same with A's connection dropped instead of
/// closed: the lost connection's close removes it.
#[test]
fn delete_on_close_waits_for_the_other_connections_open() {
    use duet_protocols::nfs::nfs3::Nfsstat3;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(dir.path(), "", "", "portmap = false");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root = n.mount("/public").unwrap();
    let all = 7; // FILE_SHARE_READ | WRITE | DELETE
    let doc_open = |c: &mut Smb, name: &str| {
        let mut r = open_req(name, create_disposition::OPEN, create_options::NON_DIRECTORY_FILE | create_options::DELETE_ON_CLOSE, RW | 0x0001_0000);
        r.share_access = all;
        c.create_req(r)
    };
    for lost in [false, true] {
        let name = if lost { "doc-lost" } else { "doc-closed" };
        let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
        let mut b = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
        let fa = open_share(&mut a, name, RW, all).unwrap();
        assert_eq!(a.write(fa, 0, b"still here", false), NtStatus::SUCCESS);
        let fb = doc_open(&mut b, name).expect("delete-on-close open");
        assert_eq!(b.close(fb), NtStatus::SUCCESS);
        assert!(n.lookup3(&root, name.as_bytes()).is_ok(), "{name}: removed while another connection holds it open");
        assert_eq!(open_share(&mut b, name, RW, all), Err(NtStatus::DELETE_PENDING), "{name}: a new open of a delete-pending file");
        assert_eq!(a.read(fa, 0, 10).unwrap(), b"still here");
        assert_eq!(a.write(fa, 10, b"!", false), NtStatus::SUCCESS, "the remaining handle keeps working");
        if lost {
            let _ = a.tcp.shutdown(std::net::Shutdown::Both);
            drop(a);
        } else {
            assert_eq!(a.close(fa), NtStatus::SUCCESS);
        }
        let t0 = Instant::now();
        while n.lookup3(&root, name.as_bytes()).is_ok() {
            assert!(t0.elapsed() < Duration::from_secs(5), "{name}: not removed after the last close");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(n.lookup3(&root, name.as_bytes()).map(|_| ()), Err(Nfsstat3::NOENT));
        // The name is free again.
        let f = open_share(&mut b, name, RW, all).expect("a new file of the same name");
        assert_eq!(b.read(f, 0, 10).unwrap_or_default(), b"", "a new, empty file");
        assert_eq!(b.close(f), NtStatus::SUCCESS);
    }
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

/// Delete-on-close seen from NFS (docs/locks.md, "Delete-on-close and
/// NFS"; MS-FSA 2.1.5.4). A file an SMB client left delete-pending (its
/// delete-on-close handle closed while a second SMB handle is open) is
/// still found by NFS LOOKUP, but takes no new NFS open: an NFSv4.1 OPEN
/// by name is NFS4ERR_ACCESS and an NFSv3 CREATE of the name
/// NFS3ERR_ACCES (what Windows' STATUS_DELETE_PENDING is to a Win32
/// opener: ERROR_ACCESS_DENIED); after the last SMB close the name is gone
/// over NFS too, and free. An NFSv4 open made before is a handle like
/// the SMB ones: the file outlives the last SMB close, keeps refusing new
/// opens of either protocol, reads through the NFS open, and goes with
/// the NFS CLOSE (or with its client's lease, when it never closes). A
/// delete-pending name NFS removed and created again is a new file, which
/// the last SMB close of the old one leaves alone.
#[test]
fn nfs_sees_a_delete_pending_file_as_windows_does() {
    use duet_protocols::nfs::nfs3::Nfsstat3;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(dir.path(), "", "", "portmap = false\nlease_secs = 5");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root = n.mount("/public").unwrap();
    let mut s = session(&mut n, b"delete-pending", 1 << 20, 64);
    let all = 7; // FILE_SHARE_READ | WRITE | DELETE
    let doc_open = |c: &mut Smb, name: &str| {
        let mut r = open_req(name, create_disposition::OPEN, create_options::NON_DIRECTORY_FILE | create_options::DELETE_ON_CLOSE, RW | 0x0001_0000);
        r.share_access = all;
        c.create_req(r)
    };
    let gone = |n: &mut Nfs, name: &str| {
        let t0 = Instant::now();
        while n.lookup3(&root, name.as_bytes()).is_ok() {
            assert!(t0.elapsed() < Duration::from_secs(5), "{name}: not removed after the last close");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(n.lookup3(&root, name.as_bytes()).map(|_| ()), Err(Nfsstat3::NOENT));
    };
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let mut b = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");

    // SMB handles only.
    let name = "dp-smb";
    let fa = open_share(&mut a, name, RW, all).unwrap();
    assert_eq!(a.write(fa, 0, b"still here", false), NtStatus::SUCCESS);
    let fb = doc_open(&mut b, name).expect("delete-on-close open");
    assert_eq!(b.close(fb), NtStatus::SUCCESS);
    assert_eq!(open_share(&mut b, name, RW, all), Err(NtStatus::DELETE_PENDING));
    assert!(n.lookup3(&root, name.as_bytes()).is_ok(), "still listed and looked up");
    assert_eq!(nfs_open(&mut n, &mut s, &root, b"o1", name, 1, 0).map(|_| ()), Err(Nfsstat4::ACCESS), "NFSv4.1 OPEN");
    assert_eq!(nfs_open(&mut n, &mut s, &root, b"o1", name, 3, 0).map(|_| ()), Err(Nfsstat4::ACCESS), "NFSv4.1 OPEN for writing");
    assert_eq!(n.create3(&root, name).map(|_| ()), Err(Nfsstat3::ACCES), "NFSv3 CREATE");
    assert_eq!(a.read(fa, 0, 10).unwrap(), b"still here", "nothing truncated, the SMB handle reads");
    assert_eq!(a.close(fa), NtStatus::SUCCESS);
    gone(&mut n, name);
    // The name is free again, for both protocols.
    let (sid, fh) = {
        let fh3 = n.create3(&root, name).expect("NFSv3 CREATE of the freed name");
        assert!(!fh3.is_empty());
        nfs_open(&mut n, &mut s, &root, b"o1", name, 1, 0).expect("NFSv4.1 OPEN of the new file")
    };
    assert_eq!(nfs_close(&mut n, &mut s, &fh, sid), Nfsstat4::OK);
    assert_eq!(n.remove3(&root, name), Nfsstat3::OK);

    // An NFSv4 open made before the file became delete-pending.
    let name = "dp-nfs";
    let fa = open_share(&mut a, name, RW, all).unwrap();
    assert_eq!(a.write(fa, 0, b"kept by nfs", false), NtStatus::SUCCESS);
    let (sid, fh) = nfs_open(&mut n, &mut s, &root, b"o2", name, 3, 0).expect("NFSv4.1 OPEN");
    let fb = doc_open(&mut b, name).expect("delete-on-close open");
    assert_eq!(b.close(fb), NtStatus::SUCCESS);
    assert_eq!(a.close(fa), NtStatus::SUCCESS);
    std::thread::sleep(Duration::from_millis(300));
    assert!(n.lookup3(&root, name.as_bytes()).is_ok(), "the NFSv4 open keeps the file after the last SMB close");
    assert_eq!(open_share(&mut b, name, RW, all), Err(NtStatus::DELETE_PENDING), "SMB: still delete-pending");
    assert_eq!(nfs_open(&mut n, &mut s, &root, b"o3", name, 1, 0).map(|_| ()), Err(Nfsstat4::ACCESS), "another NFS open");
    assert_eq!(n.create3(&root, name).map(|_| ()), Err(Nfsstat3::ACCES));
    assert_eq!(nfs_read_data(&mut n, &mut s, &fh, sid, 11), b"kept by nfs", "the NFS open reads");
    assert_eq!(nfs_write(&mut n, &mut s, &fh, sid, 11), Nfsstat4::OK, "and writes");
    assert_eq!(nfs_close(&mut n, &mut s, &fh, sid), Nfsstat4::OK);
    gone(&mut n, name);
    let f = open_share(&mut b, name, RW, all).expect("a new file of the same name");
    assert_eq!(b.read(f, 0, 10).unwrap_or_default(), b"", "a new, empty file");
    assert_eq!(b.close(f), NtStatus::SUCCESS);

    // NFS removes the delete-pending name and makes a new file of it: the
    // last SMB close leaves the new file alone.
    let name = "dp-removed";
    let fa = open_share(&mut a, name, RW, all).unwrap();
    let fb = doc_open(&mut b, name).expect("delete-on-close open");
    assert_eq!(b.close(fb), NtStatus::SUCCESS);
    assert_eq!(n.remove3(&root, name), Nfsstat3::OK, "NFS REMOVE is not refused (POSIX)");
    let fh = n.create3(&root, name).expect("a new file of the name");
    assert_eq!(n.write3(&fh, 0, b"new"), Ok(3));
    assert_eq!(a.close(fa), NtStatus::SUCCESS);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(n.read3_all(&fh).unwrap(), b"new", "the new file outlives the old one's last close");
    assert!(n.lookup3(&root, name.as_bytes()).is_ok());

    // The last NFSv4 open ends without CLOSE: its client stops renewing
    // (lease 5 s, expired after two) and the file goes then.
    let name = "dp-expired";
    let mut s2 = session(&mut n, b"delete-pending-expires", 1 << 20, 64);
    let fa = open_share(&mut a, name, RW, all).unwrap();
    let _ = nfs_open(&mut n, &mut s2, &root, b"o4", name, 1, 0).expect("NFSv4.1 OPEN");
    let fb = doc_open(&mut b, name).expect("delete-on-close open");
    assert_eq!(b.close(fb), NtStatus::SUCCESS);
    assert_eq!(a.close(fa), NtStatus::SUCCESS);
    std::thread::sleep(Duration::from_millis(300));
    assert!(n.lookup3(&root, name.as_bytes()).is_ok(), "kept by the NFSv4 open");
    let t0 = Instant::now();
    while n.lookup3(&root, name.as_bytes()).is_ok() {
        assert!(t0.elapsed() < Duration::from_secs(25), "not removed after the NFSv4 client expired");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

/// MS-SMB2 3.3.1.12 (Lease.Filename) and the share-mode table across
/// protocols: an NFSv4.1 RENAME of a file an SMB client has open moves its
/// opens and lease to the new name, as an SMB rename does, both in the
/// share's root and in a subdirectory. After it: the client opens the new
/// name with the same lease key and keeps its lease (not
/// STATUS_INVALID_PARAMETER); an overwrite of the new name meets the
/// moved open's deny-write share mode before anything is truncated
/// (STATUS_SHARING_VIOLATION, the data intact); a new file at the old name
/// meets no phantom of the moved open (created, no break sent). An NFS
/// REMOVE likewise leaves no phantom of the removed file's opens.
#[test]
fn an_nfs_rename_moves_smb_opens_and_their_leases() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(dir.path(), "", "", "portmap = false");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root = n.mount("/public").unwrap();
    let mut s = session(&mut n, b"rename-follows", 1 << 20, 64);
    let sub = a.create_req(open_req("mvdir", create_disposition::CREATE, create_options::DIRECTORY_FILE, RW)).expect("mkdir");
    assert_eq!(a.close(sub), NtStatus::SUCCESS);
    let seq = s.sequence();
    let rep = n
        .v4(vec![seq, ArgOp4::PutFh(PutFh4Args { object: Opaque(&root) }), ArgOp4::Lookup(Lookup4Args { objname: Name(b"mvdir") }), ArgOp4::GetFh(())])
        .unwrap();
    let r = res4(&rep);
    let Some(ResOp4::GetFh(Nfs4Res::Ok(fh))) = r.results.get(3) else { panic!("{r:?}") };
    let subfh = fh.object.0.to_vec();
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 11 % 253) as u8).collect();
    for (dname, dfh, key) in [("", root.clone(), *b"follow-lease-top"), ("mvdir", subfh, *b"follow-lease-sub")] {
        let p = |leaf: &str| if dname.is_empty() { leaf.to_string() } else { format!("{dname}\\{leaf}") };
        let w = open_share(&mut a, &p("before"), RW, 7).expect("create");
        assert_eq!(a.write(w, 0, &data, false), NtStatus::SUCCESS);
        assert_eq!(a.close(w), NtStatus::SUCCESS);
        let (f, l) = open_leased(&mut a, &p("before"), R, key, 1);
        assert_eq!(l, 1, "read caching");
        // A second open that denies writers.
        let g = open_share(&mut a, &p("before"), R, 1 | 4).expect("deny-write open");
        // Handle caching is not held: the rename need not wait.
        assert_eq!(nfs_remove_or_rename(&mut n, &mut s, &dfh, "before", Some("after")), Nfsstat4::OK, "{dname}");
        let (f2, l2) = open_leased(&mut a, &p("after"), R, key, 1);
        assert_eq!(l2, 1, "{dname}: the lease followed the file to its new name");
        let (after, before) = (p("after"), p("before"));
        let mut ow = open_req(&after, create_disposition::OVERWRITE_IF, create_options::NON_DIRECTORY_FILE, RW);
        ow.share_access = 7;
        assert_eq!(a.create_req(ow).err(), Some(NtStatus::SHARING_VIOLATION), "{dname}: the moved open denies writers at its new name");
        // The refused overwrite may still have broken the read lease (a
        // break before the share check, as duet orders them).
        while next_msg(&mut a, Duration::from_millis(300)).is_some() {}
        assert_eq!(a.read_all(f2, data.len()).unwrap(), data, "{dname}: nothing truncated");
        let mut ow = open_req(&before, create_disposition::OVERWRITE_IF, create_options::NON_DIRECTORY_FILE, RW);
        ow.share_access = 7;
        let fresh = a.create_req(ow).unwrap_or_else(|e| panic!("{dname}: a new file at the old name: {e:?}"));
        assert!(next_msg(&mut a, Duration::from_millis(500)).is_none(), "{dname}: no break for a phantom");
        // An NFS REMOVE unnames the opens of the file it removes: a new
        // file of that name meets no phantom of the deny-write open.
        let w = open_share(&mut a, &p("gone"), RW, 7).expect("create");
        assert_eq!(a.close(w), NtStatus::SUCCESS);
        let held = open_share(&mut a, &p("gone"), R, 1 | 4).expect("deny-write open");
        assert_eq!(nfs_remove_or_rename(&mut n, &mut s, &dfh, "gone", None), Nfsstat4::OK, "{dname}");
        let gone = p("gone");
        let mut ow = open_req(&gone, create_disposition::OVERWRITE_IF, create_options::NON_DIRECTORY_FILE, RW);
        ow.share_access = 7;
        let again = a.create_req(ow).unwrap_or_else(|e| panic!("{dname}: a new file at a removed name: {e:?}"));
        for x in [again, held, fresh, f2, g, f] {
            assert_eq!(a.close(x), NtStatus::SUCCESS);
        }
    }
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}
