//! NLM v4 (program 100021) and NSM v1 (program 100024) against a real
//! duetd: raw NLM clients over TCP on the NFS port (ONC RPC record
//! marking, AUTH_SYS), each from its own 127.0.0.x "host". Locks of two
//! hosts conflict, TEST names the holder; NLM locks conflict with NFSv4.1
//! LOCK and SMB locks both ways (and bind SMB I/O); a blocked LOCK answers
//! NLM4_BLOCKED and is granted with an NLMPROC4_GRANTED call to the
//! client's lock manager (found through a portmapper the test runs on the
//! client's address, port 111: needs root) when an NLM or SMB holder
//! unlocks; CANCEL withdraws it; FREE_ALL, SM_NOTIFY and a changed status
//! number free a host's locks; portmap names NLM and NSM on the NFS port;
//! after a restart the hosts that held locks are sent SM_NOTIFY,
//! non-reclaim LOCKs get NLM4_DENIED_GRACE_PERIOD and reclaims are served; hostile NLM frames never kill the daemon.

mod clients;
mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::nlm::*;
use duet_protocols::nfs::portmap::{pmap_proc, Mapping, IPPROTO_TCP};
use duet_protocols::nfs::rpc::*;
use duet_protocols::nfs::xdr::{decode_all, encode_to_vec, Name, Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};
use duet_protocols::smb2::lock::{LockElement, LockRequest};
use duet_protocols::smb2::message::Request;
use duet_protocols::smb2::header::Command as Cmd;
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::FileId;

const EXCL: u32 = LockElement::EXCLUSIVE_LOCK;
const NOWAIT: u32 = LockElement::FAIL_IMMEDIATELY;

fn start(nfs_extra: &str) -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_config(dir.path(), "", &format!("portmap = false\n{nfs_extra}"));
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    (dir, d)
}

/// An NLM client: one host (`name`) on its own loopback address.
struct Host {
    c: Nfs,
    name: &'static str,
}

fn host(d: &Daemon, last: u8, name: &'static str) -> Host {
    Host { c: Nfs::connect_from(ip(last), d.nfs_port), name }
}

fn alock<'a>(name: &'a str, fh: &'a [u8], svid: i32, off: u64, len: u64) -> Nlm4Lock<'a> {
    Nlm4Lock {
        caller_name: Opaque(name.as_bytes()),
        fh: Opaque(fh),
        oh: Opaque(b"owner-handle"),
        svid,
        l_offset: off,
        l_len: len,
    }
}

impl Host {
    fn res(&mut self, proc_: u32, args: &[u8]) -> Nlm4Stat {
        let rep = self.c.call(PROGRAM_NLM, 4, proc_, args);
        let mut r = success(&rep);
        let res = Nlm4Res::decode(&mut r).unwrap();
        assert_eq!(res.cookie.0, b"cookie", "the cookie comes back");
        res.stat
    }

    fn lock_args(&self, fh: &[u8], svid: i32, off: u64, len: u64, excl: bool, block: bool, reclaim: bool, state: i32) -> Vec<u8> {
        encode_to_vec(&Nlm4LockArgs {
            cookie: Opaque(b"cookie"),
            block,
            exclusive: excl,
            alock: alock(self.name, fh, svid, off, len),
            reclaim,
            state,
        })
    }

    fn lock(&mut self, fh: &[u8], svid: i32, off: u64, len: u64, excl: bool) -> Nlm4Stat {
        let a = self.lock_args(fh, svid, off, len, excl, false, false, 0);
        self.res(nlm_proc::LOCK, &a)
    }

    fn lock_block(&mut self, fh: &[u8], svid: i32, off: u64, len: u64) -> Nlm4Stat {
        let a = self.lock_args(fh, svid, off, len, true, true, false, 0);
        self.res(nlm_proc::LOCK, &a)
    }

    fn lock_state(&mut self, fh: &[u8], svid: i32, off: u64, len: u64, state: i32) -> Nlm4Stat {
        let a = self.lock_args(fh, svid, off, len, true, false, false, state);
        self.res(nlm_proc::LOCK, &a)
    }

    fn reclaim(&mut self, fh: &[u8], svid: i32, off: u64, len: u64) -> Nlm4Stat {
        let a = self.lock_args(fh, svid, off, len, true, false, true, 0);
        self.res(nlm_proc::LOCK, &a)
    }

    fn unlock(&mut self, fh: &[u8], svid: i32, off: u64, len: u64) -> Nlm4Stat {
        let a = encode_to_vec(&Nlm4UnlockArgs { cookie: Opaque(b"cookie"), alock: alock(self.name, fh, svid, off, len) });
        self.res(nlm_proc::UNLOCK, &a)
    }

    fn cancel(&mut self, fh: &[u8], svid: i32, off: u64, len: u64) -> Nlm4Stat {
        let a = encode_to_vec(&Nlm4CancArgs {
            cookie: Opaque(b"cookie"),
            block: true,
            exclusive: true,
            alock: alock(self.name, fh, svid, off, len),
        });
        self.res(nlm_proc::CANCEL, &a)
    }

    /// TEST: None when free, else the holder (exclusive, svid, oh,
    /// offset, length); Err for another status.
    fn test(&mut self, fh: &[u8], svid: i32, off: u64, len: u64, excl: bool) -> Result<Option<(bool, i32, Vec<u8>, u64, u64)>, Nlm4Stat> {
        let a = encode_to_vec(&Nlm4TestArgs { cookie: Opaque(b"cookie"), exclusive: excl, alock: alock(self.name, fh, svid, off, len) });
        let rep = self.c.call(PROGRAM_NLM, 4, nlm_proc::TEST, &a);
        let mut r = success(&rep);
        let res = Nlm4TestRes::decode(&mut r).unwrap();
        assert_eq!(res.cookie.0, b"cookie");
        match res.stat {
            Nlm4TestRply::Other(Nlm4Stat::Granted) => Ok(None),
            Nlm4TestRply::Denied(h) => Ok(Some((h.exclusive, h.svid, h.oh.0.to_vec(), h.l_offset, h.l_len))),
            Nlm4TestRply::Other(s) => Err(s),
        }
    }

    fn free_all(&mut self, name: &str) {
        let a = encode_to_vec(&Nlm4Notify { name: Opaque(name.as_bytes()), state: 0 });
        let rep = self.c.call(PROGRAM_NLM, 4, nlm_proc::FREE_ALL, &a);
        success(&rep);
    }
}

/// An NFSv3 file made by `n` in the export's root; its handle.
fn file(n: &mut Nfs, name: &str) -> (Vec<u8>, Vec<u8>) {
    let root = n.mount("/public").unwrap();
    let fh = n.create3(&root, name).unwrap();
    n.write3(&fh, 0, &[5u8; 64]).unwrap();
    (root, fh)
}

fn smb_lock(c: &mut Smb, fid: FileId, offset: u64, length: u64, flags: u32) -> NtStatus {
    let mut storage = Vec::new();
    let l = LockRequest::new(0, fid, &[LockElement { offset, length, flags }], &mut storage);
    c.call(Request::Lock(l), Cmd::LOCK).status()
}

enum LockAns {
    Ok(#[allow(dead_code)] Stateid4),
    Denied { offset: u64, length: u64 },
    Err(Nfsstat4),
}

/// NFSv4.1 OPEN (no create) + LOCK of a new lock owner.
fn nfs4_lock(n: &mut Nfs, s: &mut Sess, root: &[u8], name: &str, write: bool, offset: u64, length: u64) -> LockAns {
    let (open, fh) = {
        let seq = s.sequence();
        let rep = n
            .v4(vec![
                seq,
                ArgOp4::PutFh(PutFh4Args { object: Opaque(root) }),
                ArgOp4::Open(Open4Args {
                    seqid: 0,
                    share_access: share::ACCESS_BOTH,
                    share_deny: share::DENY_NONE,
                    owner: StateOwner4 { clientid: s.clientid, owner: Opaque(b"nlm-test-open") },
                    openhow: OpenFlag4::NoCreate,
                    claim: OpenClaim4::Null(Name(name.as_bytes())),
                }),
                ArgOp4::GetFh(()),
            ])
            .expect("OPEN reply");
        let r = res4(&rep);
        match (r.results.get(2), r.results.get(3)) {
            (Some(ResOp4::Open(Nfs4Res::Ok(o))), Some(ResOp4::GetFh(Nfs4Res::Ok(fh)))) => (o.stateid, fh.object.0.to_vec()),
            _ => panic!("OPEN: {:?}", r.status),
        }
    };
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(&fh) }),
            ArgOp4::Lock(Lock4Args {
                locktype: if write { NfsLockType4::Write } else { NfsLockType4::Read },
                reclaim: false,
                offset,
                length,
                locker: Locker4::New(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid: open,
                    lock_seqid: 0,
                    lock_owner: StateOwner4 { clientid: s.clientid, owner: Opaque(format!("lo-{offset}").as_bytes()) },
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

fn no_panics(d: &Daemon) {
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")), "duetd panicked");
}

#[test]
fn nlm_locks_conflict_between_hosts_and_with_nfs4_and_smb() {
    let (_dir, d) = start("");
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let (root, fh) = file(&mut n, "nlm-cross");
    let mut a = host(&d, 41, "host-a");
    let mut b = host(&d, 42, "host-b");
    let rep = a.c.call(PROGRAM_NLM, 4, nlm_proc::NULL, &[]);
    assert_eq!(accept_data(&rep), AcceptedReplyData::Success);

    // Host a's exclusive lock: host b is refused and TEST names a's lock.
    assert_eq!(a.lock(&fh, 7, 0, 100, true), Nlm4Stat::Granted);
    assert_eq!(b.lock(&fh, 9, 50, 10, true), Nlm4Stat::Denied);
    assert_eq!(b.lock(&fh, 9, 99, 0, false), Nlm4Stat::Denied, "a shared lock to EOF overlaps byte 99");
    assert_eq!(b.lock(&fh, 9, 100, 0, true), Nlm4Stat::Granted, "adjacent, to EOF");
    assert_eq!(b.unlock(&fh, 9, 100, 0), Nlm4Stat::Granted);
    assert_eq!(b.test(&fh, 9, 50, 10, false), Ok(Some((true, 7, Vec::new(), 0, 100))));
    assert_eq!(a.test(&fh, 7, 50, 10, true), Ok(None), "a host's own lock does not conflict");
    // The same host, another svid (another process): conflicts.
    assert_eq!(a.lock(&fh, 8, 10, 1, false), Nlm4Stat::Denied);

    // NFSv4.1 LOCK meets the NLM lock, and SMB: no lock, no I/O inside.
    let mut v4 = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root4 = v4.mount("/public").unwrap();
    assert_eq!(root4, root);
    let mut s = session(&mut v4, b"nlm-v4", 1 << 20, 64);
    match nfs4_lock(&mut v4, &mut s, &root4, "nlm-cross", true, 10, 1) {
        LockAns::Denied { offset, length } => assert_eq!((offset, length), (0, 100)),
        LockAns::Ok(_) => panic!("an NFSv4 lock over an NLM lock was granted"),
        LockAns::Err(e) => panic!("LOCK: {e:?}"),
    }
    let mut smb = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let fid = smb.create("nlm-cross").unwrap();
    assert_eq!(smb_lock(&mut smb, fid, 20, 1, EXCL | NOWAIT), NtStatus::LOCK_NOT_GRANTED);
    assert_eq!(smb.write(fid, 5, b"x", false), NtStatus::FILE_LOCK_CONFLICT, "NLM locks bind SMB I/O");
    assert_eq!(a.unlock(&fh, 7, 0, 100), Nlm4Stat::Granted);
    assert_eq!(smb.write(fid, 5, b"x", false), NtStatus::SUCCESS);

    // The other way: an SMB lock and an NFSv4 lock refuse NLM locks, and
    // TEST reports them with a synthetic holder.
    assert_eq!(smb_lock(&mut smb, fid, 500, 10, EXCL | NOWAIT), NtStatus::SUCCESS);
    assert_eq!(b.lock(&fh, 9, 505, 1, false), Nlm4Stat::Denied);
    assert_eq!(b.test(&fh, 9, 0, 0, true), Ok(Some((true, 0, b"smb".to_vec(), 500, 10))));
    let LockAns::Ok(_) = nfs4_lock(&mut v4, &mut s, &root4, "nlm-cross", false, 2000, u64::MAX) else {
        panic!("NFSv4 read lock refused")
    };
    assert_eq!(b.lock(&fh, 9, 3000, 1, true), Nlm4Stat::Denied);
    assert_eq!(b.lock(&fh, 9, 3000, 1, false), Nlm4Stat::Granted, "shared next to NFSv4 shared");
    assert_eq!(b.test(&fh, 9, 2500, 1, true), Ok(Some((false, 0, b"nfs4".to_vec(), 2000, 0))));

    // POSIX owners: a's new lock replaces its own overlapping range;
    // unlocking the middle splits it.
    assert_eq!(a.lock(&fh, 7, 100, 100, false), Nlm4Stat::Granted);
    assert_eq!(a.lock(&fh, 7, 100, 100, true), Nlm4Stat::Granted, "upgrade in place");
    assert_eq!(a.unlock(&fh, 7, 140, 20), Nlm4Stat::Granted);
    assert_eq!(b.lock(&fh, 9, 145, 5, true), Nlm4Stat::Granted, "the hole");
    assert_eq!(b.lock(&fh, 9, 139, 1, true), Nlm4Stat::Denied);
    assert_eq!(b.lock(&fh, 9, 160, 1, true), Nlm4Stat::Denied);

    // A handle that is not ours.
    let mut bad = fh.clone();
    bad[15] ^= 1;
    assert_eq!(b.lock(&bad, 9, 0, 1, true), Nlm4Stat::StaleFh);
    no_panics(&d);
}

// ------------------------------------------------------ blocking and GRANTED

/// A client host's portmapper (port 111) and its lock manager and status
/// monitor (one port) on `addr`: the calls that reach them come out of the
/// channel as program, procedure and arguments.
fn fake_lockd(addr: Ipv4Addr) -> mpsc::Receiver<Vec<u8>> {
    let lockd = TcpListener::bind((addr, 0)).unwrap();
    let lockd_port = lockd.local_addr().unwrap().port();
    let pm = TcpListener::bind((addr, 111)).expect("bind port 111 on a loopback address (the test needs root)");
    std::thread::spawn(move || {
        for s in pm.incoming() {
            let Ok(mut s) = s else { return };
            let Some(call) = read_rec(&mut s) else { continue };
            let mut r = XdrReader::new(&call);
            let c = CallBody::decode(&mut r).unwrap();
            assert_eq!((c.prog, c.vers, c.proc_), (PROGRAM_PORTMAP, 2, pmap_proc::GETPORT));
            let m = Mapping::decode(&mut r).unwrap();
            let served = [(PROGRAM_NLM, 4, IPPROTO_TCP), (PROGRAM_NSM, 1, IPPROTO_TCP)];
            let port = if served.contains(&(m.prog, m.vers, m.prot)) { u32::from(lockd_port) } else { 0 };
            let mut w = XdrWriter::new();
            ReplyHeader::success(c.xid).encode(&mut w);
            w.put_u32(port);
            write_rec(&mut s, w.as_bytes());
        }
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in lockd.incoming() {
            let Ok(mut s) = s else { return };
            while let Some(call) = read_rec(&mut s) {
                let mut r = XdrReader::new(&call);
                let c = CallBody::decode(&mut r).unwrap();
                let args = r.rest().to_vec();
                let mut w = XdrWriter::new();
                ReplyHeader::success(c.xid).encode(&mut w);
                if c.prog == PROGRAM_NLM {
                    let t = decode_all::<Nlm4TestArgs>(&args).unwrap();
                    Nlm4Res { cookie: t.cookie, stat: Nlm4Stat::Granted }.encode(&mut w);
                }
                write_rec(&mut s, w.as_bytes());
                let mut whole = Vec::new();
                whole.extend_from_slice(&c.prog.to_be_bytes());
                whole.extend_from_slice(&c.proc_.to_be_bytes());
                whole.extend_from_slice(&args);
                if tx.send(whole).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

fn read_rec(s: &mut TcpStream) -> Option<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rec = Vec::new();
    loop {
        let mut h = [0u8; 4];
        s.read_exact(&mut h).ok()?;
        let h = u32::from_be_bytes(h);
        let mut frag = vec![0u8; (h & 0x7fff_ffff) as usize];
        s.read_exact(&mut frag).ok()?;
        rec.extend_from_slice(&frag);
        if h & 0x8000_0000 != 0 {
            return Some(rec);
        }
    }
}

fn write_rec(s: &mut TcpStream, body: &[u8]) {
    let mut out = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    let _ = s.write_all(&out);
}

/// The next GRANTED call's (svid, offset, length, exclusive, cookie).
fn granted(rx: &mpsc::Receiver<Vec<u8>>, within: Duration) -> Option<(i32, u64, u64, bool, Vec<u8>, Vec<u8>)> {
    let m = rx.recv_timeout(within).ok()?;
    assert_eq!(u32::from_be_bytes(m[..4].try_into().unwrap()), PROGRAM_NLM);
    assert_eq!(u32::from_be_bytes(m[4..8].try_into().unwrap()), nlm_proc::GRANTED);
    let t = decode_all::<Nlm4TestArgs>(&m[8..]).unwrap();
    Some((t.alock.svid, t.alock.l_offset, t.alock.l_len, t.exclusive, t.cookie.0.to_vec(), t.alock.fh.0.to_vec()))
}

#[test]
fn a_blocked_nlm_lock_is_granted_by_a_callback() {
    let (_dir, d) = start("");
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let (_root, fh) = file(&mut n, "nlm-block");
    let calls = fake_lockd(ip(52));
    let mut a = host(&d, 51, "host-a");
    let mut b = host(&d, 52, "host-b");

    // b blocks behind a; asking again (a client's poll) is BLOCKED again.
    assert_eq!(a.lock(&fh, 1, 0, 10, true), Nlm4Stat::Granted);
    assert_eq!(b.lock_block(&fh, 2, 5, 10), Nlm4Stat::Blocked);
    assert_eq!(b.lock_block(&fh, 2, 5, 10), Nlm4Stat::Blocked);
    assert!(granted(&calls, Duration::from_millis(1500)).is_none(), "granted while a holds it");
    let t0 = Instant::now();
    assert_eq!(a.unlock(&fh, 1, 0, 10), Nlm4Stat::Granted);
    let g = granted(&calls, Duration::from_secs(10)).expect("a GRANTED call to b's lock manager");
    assert_eq!(g, (2, 5, 10, true, b"cookie".to_vec(), fh.clone()));
    eprintln!("GRANTED after an NLM unlock: {:?}", t0.elapsed());
    assert!(granted(&calls, Duration::from_millis(500)).is_none(), "one GRANTED per grant");
    // b holds it now: a is refused; b's poll is answered GRANTED.
    assert_eq!(a.lock(&fh, 1, 0, 10, true), Nlm4Stat::Denied);
    assert_eq!(b.lock_block(&fh, 2, 5, 10), Nlm4Stat::Granted);
    assert_eq!(b.unlock(&fh, 2, 5, 10), Nlm4Stat::Granted);

    // An SMB holder: b blocks, the SMB unlock grants it (collected by the
    // server's tick).
    let mut smb = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let fid = smb.create("nlm-block").unwrap();
    assert_eq!(smb_lock(&mut smb, fid, 100, 1, EXCL | NOWAIT), NtStatus::SUCCESS);
    assert_eq!(b.lock_block(&fh, 3, 100, 1), Nlm4Stat::Blocked);
    let t0 = Instant::now();
    assert_eq!(smb_lock(&mut smb, fid, 100, 1, LockElement::UNLOCK), NtStatus::SUCCESS);
    let g = granted(&calls, Duration::from_secs(10)).expect("a GRANTED call after the SMB unlock");
    assert_eq!((g.0, g.1, g.2), (3, 100, 1));
    eprintln!("GRANTED after an SMB unlock: {:?}", t0.elapsed());
    assert_eq!(smb_lock(&mut smb, fid, 100, 1, EXCL | NOWAIT), NtStatus::LOCK_NOT_GRANTED, "b holds it");
    assert_eq!(b.unlock(&fh, 3, 100, 1), Nlm4Stat::Granted);

    // CANCEL withdraws a blocked request: nothing is granted later, and
    // the range stays free for others.
    assert_eq!(a.lock(&fh, 1, 200, 10, true), Nlm4Stat::Granted);
    assert_eq!(b.lock_block(&fh, 4, 200, 10), Nlm4Stat::Blocked);
    assert_eq!(b.cancel(&fh, 4, 200, 10), Nlm4Stat::Granted);
    assert_eq!(b.cancel(&fh, 4, 200, 10), Nlm4Stat::Denied, "nothing left to cancel");
    assert_eq!(a.unlock(&fh, 1, 200, 10), Nlm4Stat::Granted);
    assert!(granted(&calls, Duration::from_millis(2500)).is_none(), "a cancelled request was granted");
    assert_eq!(smb_lock(&mut smb, fid, 200, 10, EXCL | NOWAIT), NtStatus::SUCCESS);
    no_panics(&d);
}

// ------------------------------------------------------------ host reboots

#[test]
fn free_all_sm_notify_and_a_new_state_release_a_hosts_locks() {
    let (_dir, d) = start("");
    let mut n = Nfs::connect(d.nfs_port);
    let (_root, fh) = file(&mut n, "nlm-free");
    let mut a = host(&d, 61, "host-a");
    let mut b = host(&d, 62, "Host-B");
    let mut c = host(&d, 63, "host-c");

    // FREE_ALL naming a: its locks go.
    assert_eq!(a.lock(&fh, 1, 0, 10, true), Nlm4Stat::Granted);
    assert_eq!(a.lock(&fh, 2, 50, 10, false), Nlm4Stat::Granted);
    assert_eq!(c.lock(&fh, 3, 0, 1, true), Nlm4Stat::Denied);
    c.free_all("host-a");
    assert_eq!(c.lock(&fh, 3, 0, 1, true), Nlm4Stat::Granted);
    assert_eq!(c.lock(&fh, 3, 55, 1, true), Nlm4Stat::Granted);
    assert_eq!(c.unlock(&fh, 3, 0, 0), Nlm4Stat::Granted);

    // SM_NOTIFY (NSM) naming b, in another case: its locks go.
    assert_eq!(b.lock(&fh, 1, 100, 10, true), Nlm4Stat::Granted);
    assert_eq!(c.lock(&fh, 3, 100, 1, true), Nlm4Stat::Denied);
    let rep = c.c.call(PROGRAM_NSM, 1, nsm_proc::NOTIFY, &encode_to_vec(&SmStatChge { mon_name: Opaque(b"host-b"), state: 3 }));
    assert_eq!(accept_data(&rep), AcceptedReplyData::Success);
    assert_eq!(c.lock(&fh, 3, 100, 1, true), Nlm4Stat::Granted);
    assert_eq!(c.unlock(&fh, 3, 0, 0), Nlm4Stat::Granted);

    // SM_STAT and SM_MON: stat_succ with an odd state number.
    let rep = c.c.call(PROGRAM_NSM, 1, nsm_proc::STAT, &encode_to_vec(&SmName { mon_name: Opaque(b"x") }));
    let st = SmStatRes::decode(&mut success(&rep)).unwrap();
    assert_eq!(st.res_stat, SmRes::Succ);
    assert_eq!(st.state & 1, 1, "odd while up");
    let mon = SmMon {
        mon_id: SmMonId {
            mon_name: Opaque(b"host-c"),
            my_id: SmMyId { my_name: Opaque(b"host-c"), my_prog: 100021, my_vers: 4, my_proc: 16 },
        },
        private: [1; 16],
    };
    let rep = c.c.call(PROGRAM_NSM, 1, nsm_proc::MON, &encode_to_vec(&mon));
    assert_eq!(SmStatRes::decode(&mut success(&rep)).unwrap(), st);

    // A LOCK with another status number: the host rebooted, its old locks
    // are stale and go.
    assert_eq!(a.lock_state(&fh, 1, 200, 1, 5), Nlm4Stat::Granted);
    assert_eq!(a.lock_state(&fh, 1, 300, 1, 5), Nlm4Stat::Granted, "the same state keeps them");
    assert_eq!(c.lock(&fh, 3, 200, 1, true), Nlm4Stat::Denied);
    assert_eq!(a.lock_state(&fh, 1, 400, 1, 7), Nlm4Stat::Granted);
    assert_eq!(c.lock(&fh, 3, 200, 1, true), Nlm4Stat::Granted);
    assert_eq!(c.lock(&fh, 3, 400, 1, true), Nlm4Stat::Denied, "the new lock stays");
    no_panics(&d);
}


#[test]
fn portmap_on_the_nfs_port_names_nlm_and_nsm() {
    let (_dir, d) = start("");
    let mut c = Nfs::connect(d.nfs_port);
    for (prog, vers, want) in [(100021, 4, d.nfs_port as u32), (100024, 1, d.nfs_port as u32), (100021, 1, 0)] {
        let args = encode_to_vec(&Mapping { prog, vers, prot: IPPROTO_TCP, port: 0 });
        let rep = c.call(PROGRAM_PORTMAP, 2, pmap_proc::GETPORT, &args);
        assert_eq!(success(&rep).get_u32().unwrap(), want, "GETPORT {prog} v{vers}");
    }
    // NLM versions 1-3 are not served.
    let rep = c.call(PROGRAM_NLM, 3, nlm_proc::NULL, &[]);
    assert_eq!(accept_data(&rep), AcceptedReplyData::ProgMismatch(MismatchInfo { low: 4, high: 4 }));
    no_panics(&d);
}

#[test]
fn hostile_nlm_frames_never_kill_the_daemon() {
    let (_dir, d) = start("");
    let mut n = Nfs::connect(d.nfs_port);
    let (_root, fh) = file(&mut n, "nlm-hostile");
    let mut h = host(&d, 71, "hostile");
    // Oversized netobj, a truncated record, a bad boolean: GARBAGE_ARGS.
    let mut w = XdrWriter::new();
    w.put_u32(MAXNETOBJ_SZ + 1);
    w.put_raw(&[0u8; 1028]);
    let rep = h.c.call(PROGRAM_NLM, 4, nlm_proc::LOCK, w.as_bytes());
    assert_eq!(accept_data(&rep), AcceptedReplyData::GarbageArgs);
    let good = h.lock_args(&fh, 1, 0, 1, true, false, false, 0);
    let rep = h.c.call(PROGRAM_NLM, 4, nlm_proc::LOCK, &good[..good.len() - 3]);
    assert_eq!(accept_data(&rep), AcceptedReplyData::GarbageArgs);
    let mut bad = good.clone();
    bad[15] = 9; // `block` (after the 12 bytes of the cookie)
    let rep = h.c.call(PROGRAM_NLM, 4, nlm_proc::LOCK, &bad);
    assert_eq!(accept_data(&rep), AcceptedReplyData::GarbageArgs);
    let rep = h.c.call(PROGRAM_NSM, 1, nsm_proc::NOTIFY, &[0xff; 8]);
    assert_eq!(accept_data(&rep), AcceptedReplyData::GarbageArgs);
    // Every procedure number with junk after the header: a reply each.
    let mut seed = 0x1234_5678u32;
    for proc_ in 0..40u32 {
        for len in [0usize, 4, 17, 64, 300] {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (seed >> 16) as u8
                })
                .collect();
            let prog = if proc_ % 2 == 0 { PROGRAM_NLM } else { PROGRAM_NSM };
            let vers = if prog == PROGRAM_NLM { 4 } else { 1 };
            let rep = h.c.call(prog, vers, proc_, &junk);
            let _ = header(&rep);
        }
    }
    // Still serving, and the lock table still works.
    assert_eq!(h.lock(&fh, 1, 0, 1, true), Nlm4Stat::Granted);
    let mut other = host(&d, 72, "other");
    assert_eq!(other.lock(&fh, 2, 0, 1, true), Nlm4Stat::Denied);
    no_panics(&d);
}

#[test]
fn after_a_restart_nlm_has_a_grace_period_for_reclaims() {
    let (_dir, mut d) = start("grace_secs = 6");
    let mut n = Nfs::connect(d.nfs_port);
    let (_root, fh) = file(&mut n, "nlm-grace");
    let calls = fake_lockd(ip(81));
    {
        let mut a = host(&d, 81, "host-a");
        assert_eq!(a.lock(&fh, 1, 0, 10, true), Nlm4Stat::Granted);
    }
    // The host list reaches the data directory within the 1 s tick.
    let list = d.data.join("nlm-hosts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&list).unwrap_or_default().contains(&hex::encode("host-a")) {
        assert!(Instant::now() < deadline, "nlm-hosts was not written");
        std::thread::sleep(Duration::from_millis(100));
    }
    d.restart();
    // a's status monitor hears of the restart: SM_NOTIFY naming the
    // server by its address, with an odd (up) state number.
    let m = calls.recv_timeout(Duration::from_secs(10)).expect("SM_NOTIFY to host a after the restart");
    assert_eq!(u32::from_be_bytes(m[..4].try_into().unwrap()), PROGRAM_NSM);
    assert_eq!(u32::from_be_bytes(m[4..8].try_into().unwrap()), nsm_proc::NOTIFY);
    let note = decode_all::<SmStatChge>(&m[8..]).unwrap();
    assert_eq!(note.mon_name.0, b"127.0.0.1");
    assert_eq!(note.state & 1, 1);
    let mut a = host(&d, 81, "host-a");
    let mut b = host(&d, 82, "host-b");
    assert_eq!(b.lock(&fh, 2, 0, 10, true), Nlm4Stat::DeniedGracePeriod);
    assert_eq!(b.test(&fh, 2, 0, 10, true), Err(Nlm4Stat::DeniedGracePeriod));
    assert_eq!(a.reclaim(&fh, 1, 0, 10), Nlm4Stat::Granted, "a reclaim in the grace period");
    let t0 = Instant::now();
    loop {
        match b.lock(&fh, 2, 20, 10, true) {
            Nlm4Stat::Granted => break,
            Nlm4Stat::DeniedGracePeriod => {}
            s => panic!("LOCK after the grace period: {s:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the grace period does not end");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(b.lock(&fh, 2, 0, 10, true), Nlm4Stat::Denied, "a's reclaimed lock holds");
    no_panics(&d);
}
