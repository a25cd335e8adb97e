//! Hostile NFS clients against a real duetd: broken record marking,
//! oversized records, truncated XDR, forged file handles, stale stateids,
//! COMPOUNDs over the negotiated session limits. After each, the daemon is
//! still running and serves a well-behaved client on a fresh connection.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Daemon;
use duet_protocols::nfs::mount::{mountproc3, MountRes3, MountStat3, MOUNT_VERSION_3};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::rpc::*;
use duet_protocols::nfs::xdr::{List, Name, Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};

/// The daemon's record limit (appliance/src/frontend.rs RPC_RECORD_MAX).
const RECORD_MAX: usize = (1 << 20) + (128 << 10);

struct Client {
    s: TcpStream,
    xid: u32,
}

impl Client {
    fn connect(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Client { s, xid: 0x1000 }
    }

    /// One call's record (without record marking).
    fn call_record(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        self.xid += 1;
        let cred = AuthSysParms { stamp: 0, machine_name: Opaque(b"hostile"), uid: 0, gid: 0, gids: vec![] };
        let mut cw = XdrWriter::new();
        cred.encode(&mut cw);
        let cred = cw.into_inner();
        let call = CallBody {
            xid: self.xid,
            rpcvers: 2,
            prog,
            vers,
            proc_,
            cred: OpaqueAuth { flavor: AUTH_SYS, body: &cred },
            verf: OpaqueAuth::NONE,
        };
        let mut w = XdrWriter::new();
        call.encode(&mut w);
        w.put_raw(args);
        w.into_inner()
    }

    fn send_record(&mut self, rec: &[u8]) {
        let mut out = Vec::new();
        write_record(rec, &mut out);
        self.s.write_all(&out).unwrap();
    }

    /// Reads one reply record (all fragments); None when the server closed.
    fn read_reply(&mut self) -> Option<Vec<u8>> {
        let mut rec = Vec::new();
        loop {
            let mut h = [0u8; 4];
            if self.s.read_exact(&mut h).is_err() {
                return None;
            }
            let h = u32::from_be_bytes(h);
            let mut frag = vec![0u8; (h & 0x7fff_ffff) as usize];
            self.s.read_exact(&mut frag).ok()?;
            rec.extend_from_slice(&frag);
            if h & 0x8000_0000 != 0 {
                return Some(rec);
            }
        }
    }

    fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        let rec = self.call_record(prog, vers, proc_, args);
        self.send_record(&rec);
        let reply = self.read_reply().expect("the server closed the connection");
        assert_eq!(u32::from_be_bytes(reply[..4].try_into().unwrap()), self.xid, "xid");
        reply
    }

    /// Waits until the server closes the connection (reading and dropping
    /// anything it still sends).
    fn expect_closed(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 4096];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
                Err(e) => panic!("{what}: the server kept the connection open ({e})"),
            }
            assert!(Instant::now() < deadline, "{what}: the server kept the connection open");
        }
    }

    fn mount(&mut self, path: &str) -> Result<Vec<u8>, MountStat3> {
        let mut w = XdrWriter::new();
        w.put_string(path.as_bytes());
        let rep = self.call(PROGRAM_MOUNT, MOUNT_VERSION_3, mountproc3::MNT, &w.into_inner());
        let mut r = success(&rep);
        match MountRes3::decode(&mut r).unwrap() {
            MountRes3::Ok(ok) => Ok(ok.fhandle.0.to_vec()),
            MountRes3::Err(e) => Err(e),
        }
    }

    fn v3(&mut self, args: &Nfs3Args<'_>) -> Vec<u8> {
        let mut w = XdrWriter::new();
        args.encode(&mut w);
        self.call(PROGRAM_NFS, 3, args.proc_(), &w.into_inner())
    }

    fn v4(&mut self, ops: Vec<ArgOp4<'_>>) -> Vec<u8> {
        let args = Compound4Args { tag: Opaque(b"hostile"), minorversion: 1, ops, stop: None };
        let mut w = XdrWriter::new();
        args.encode(&mut w);
        self.call(PROGRAM_NFS, 4, NFSPROC4_COMPOUND, &w.into_inner())
    }
}

fn header(reply: &[u8]) -> ReplyHeader<'_> {
    ReplyHeader::decode(&mut XdrReader::new(reply)).unwrap()
}

fn accept_data(reply: &[u8]) -> AcceptedReplyData {
    match header(reply).body {
        ReplyBody::Accepted { data, .. } => data,
        other => panic!("a denied reply: {other:?}"),
    }
}

fn success(reply: &[u8]) -> XdrReader<'_> {
    let mut r = XdrReader::new(reply);
    let h = ReplyHeader::decode(&mut r).unwrap();
    assert!(matches!(h.body, ReplyBody::Accepted { data: AcceptedReplyData::Success, .. }), "{h:?}");
    r
}

fn status3(proc_: u32, reply: &[u8]) -> Nfsstat3 {
    let mut r = success(reply);
    let v = Nfs3Results::decode(proc_, &mut r).unwrap();
    match v {
        Nfs3Results::GetAttr(Nfs3Res::Ok(_)) => Nfsstat3::OK,
        Nfs3Results::GetAttr(Nfs3Res::Fail(s, _)) => s,
        other => panic!("{other:?}"),
    }
}

fn res4(reply: &[u8]) -> Compound4Res<'_> {
    let mut r = success(reply);
    Compound4Res::decode(&mut r, 4096).unwrap()
}

/// A well-behaved client on a fresh connection: NULL, MNT, GETATTR.
fn still_serves(d: &mut Daemon, after: &str) {
    assert!(d.alive(), "duetd died after: {after}");
    let mut c = Client::connect(d.nfs_port);
    let rep = c.call(PROGRAM_NFS, 3, 0, &[]);
    assert_eq!(accept_data(&rep), AcceptedReplyData::Success, "NULL after: {after}");
    let root = c.mount("/public").unwrap_or_else(|e| panic!("MNT after {after}: {e:?}"));
    let rep = c.v3(&Nfs3Args::GetAttr(GetAttr3Args { object: Opaque(&root) }));
    assert_eq!(status3(proc3::GETATTR, &rep), Nfsstat3::OK, "GETATTR after: {after}");
}

struct Sess {
    clientid: u64,
    id: SessionId4,
    seq: u32,
    max_ops: u32,
    max_req: u32,
}

impl Sess {
    fn sequence(&mut self) -> ArgOp4<'static> {
        self.seq += 1;
        ArgOp4::Sequence(Sequence4Args { sessionid: self.id, sequenceid: self.seq, slotid: 0, highest_slotid: 0, cachethis: false })
    }
}

fn chan(maxreq: u32, maxops: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: maxreq,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 8 << 10,
        maxoperations: maxops,
        maxrequests: 4,
        rdma_ird: List(vec![]),
    }
}

fn session(c: &mut Client, owner: &[u8], maxreq: u32, maxops: u32) -> Sess {
    let rep = c.v4(vec![ArgOp4::ExchangeId(ExchangeId4Args {
        clientowner: ClientOwner4 { verifier: [7; 8], ownerid: Opaque(owner) },
        flags: 0x101,
        state_protect: StateProtect4A::None,
        client_impl_id: List(vec![]),
    })]);
    let r = res4(&rep);
    let [ResOp4::ExchangeId(Nfs4Res::Ok(x))] = &r.results[..] else { panic!("{r:?}") };
    let (clientid, sequence) = (x.clientid, x.sequenceid);
    let rep = c.v4(vec![ArgOp4::CreateSession(CreateSession4Args {
        clientid,
        sequence,
        flags: 0,
        fore_chan_attrs: chan(maxreq, maxops),
        back_chan_attrs: chan(4096, 2),
        cb_program: PROGRAM_NFS4_CB,
        sec_parms: List(vec![CallbackSecParms4::None]),
    })]);
    let r = res4(&rep);
    let [ResOp4::CreateSession(Nfs4Res::Ok(cs))] = &r.results[..] else { panic!("{r:?}") };
    let a = &cs.fore_chan_attrs;
    let mut s = Sess { clientid, id: cs.sessionid, seq: 0, max_ops: a.maxoperations, max_req: a.maxrequestsize };
    // RFC 8881 18.51.3: before the first non-reclaim OPEN.
    let rep = c.v4(vec![s.sequence(), ArgOp4::ReclaimComplete(ReclaimComplete4Args { one_fs: false })]);
    assert_eq!(res4(&rep).status, Nfsstat4::OK, "RECLAIM_COMPLETE");
    s
}

#[test]
fn hostile_nfs_clients_do_not_hurt_duetd() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path());
    still_serves(&mut d, "start");

    // Record marking: not RPC at all (an HTTP request: its first word is a
    // 1.2 GB fragment header) -> closed.
    let mut c = Client::connect(d.nfs_port);
    c.s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    c.expect_closed("an HTTP request");
    still_serves(&mut d, "an HTTP request");

    // One fragment header announcing 2^31-1 bytes -> closed at once.
    let mut c = Client::connect(d.nfs_port);
    c.s.write_all(&0xffff_ffffu32.to_be_bytes()).unwrap();
    c.expect_closed("a 2 GiB fragment");
    still_serves(&mut d, "a 2 GiB fragment");

    // A record just over the limit, in two fragments: closed before the
    // second is read whole.
    let mut c = Client::connect(d.nfs_port);
    let half = RECORD_MAX / 2 + 1;
    let mut bytes = (half as u32).to_be_bytes().to_vec();
    bytes.extend(std::iter::repeat(0u8).take(half));
    bytes.extend(((half as u32) | LAST_FRAGMENT).to_be_bytes());
    let _ = c.s.write_all(&bytes);
    c.expect_closed("a record over the limit");
    still_serves(&mut d, "a record over the limit");

    // Endless empty fragments -> closed (they cannot make the server spin).
    let mut c = Client::connect(d.nfs_port);
    let _ = c.s.write_all(&vec![0u8; 4 * 5000]);
    c.expect_closed("5000 empty fragments");
    still_serves(&mut d, "empty fragments");

    // A whole record that is not an RPC call -> closed.
    let mut c = Client::connect(d.nfs_port);
    c.send_record(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 7, 1, 2]);
    c.expect_closed("a record that is not RPC");
    still_serves(&mut d, "a record that is not RPC");

    // A connection dropped in the middle of a record.
    let mut c = Client::connect(d.nfs_port);
    let rec = c.call_record(PROGRAM_NFS, 3, 0, &[]);
    let mut out = Vec::new();
    write_record(&rec, &mut out);
    c.s.write_all(&out[..out.len() - 3]).unwrap();
    drop(c);
    still_serves(&mut d, "a half record");

    // Truncated XDR -> GARBAGE_ARGS, and the connection stays usable.
    let mut c = Client::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    let mut w = XdrWriter::new();
    GetAttr3Args { object: Opaque(&root) }.encode(&mut w);
    let full = w.into_inner();
    for cut in [0, 3, 4, full.len() - 1] {
        let rep = c.call(PROGRAM_NFS, 3, proc3::GETATTR, &full[..cut]);
        assert_eq!(accept_data(&rep), AcceptedReplyData::GarbageArgs, "GETATTR cut at {cut}");
    }
    let mut w = XdrWriter::new();
    Write3Args { file: Opaque(&root), offset: 0, count: 1000, stable: StableHow::FileSync, data: Opaque(&[1u8; 1000]) }
        .encode(&mut w);
    let write = w.into_inner();
    let rep = c.call(PROGRAM_NFS, 3, proc3::WRITE, &write[..write.len() - 500]);
    assert_eq!(accept_data(&rep), AcceptedReplyData::GarbageArgs, "a WRITE cut short");
    let rep = c.call(PROGRAM_MOUNT, MOUNT_VERSION_3, mountproc3::MNT, &[0, 0, 0, 9, b'/']);
    assert_eq!(accept_data(&rep), AcceptedReplyData::GarbageArgs, "MNT with a cut path");
    let compound = {
        let args = Compound4Args { tag: Opaque(b""), minorversion: 1, ops: vec![ArgOp4::PutRootFh(()), ArgOp4::GetFh(())], stop: None };
        let mut w = XdrWriter::new();
        args.encode(&mut w);
        w.into_inner()
    };
    let rep = c.call(PROGRAM_NFS, 4, NFSPROC4_COMPOUND, &compound[..compound.len() - 4]);
    let garbage = accept_data(&rep) == AcceptedReplyData::GarbageArgs
        || matches!(res4(&rep).status, Nfsstat4::BADXDR);
    assert!(garbage, "a COMPOUND cut short: {:?}", header(&rep));
    // An absurd count inside the XDR (an array of 2^32-1 operations).
    let rep = c.call(PROGRAM_NFS, 4, NFSPROC4_COMPOUND, &[0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
    let refused = accept_data(&rep) == AcceptedReplyData::GarbageArgs
        || matches!(res4(&rep).status, Nfsstat4::BADXDR | Nfsstat4::TOO_MANY_OPS | Nfsstat4::RESOURCE);
    assert!(refused, "2^32-1 operations: {:?}", header(&rep));
    let rep = c.call(PROGRAM_NFS, 3, 0, &[]);
    assert_eq!(accept_data(&rep), AcceptedReplyData::Success, "NULL on the same connection");
    still_serves(&mut d, "truncated XDR");

    // Bad file handles: forged, tampered, too long, empty.
    let mut forged = root.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    let long = vec![0xd7u8; 64];
    for (what, fh) in [("tampered", &forged[..]), ("random", &[9u8; 28][..]), ("64 bytes", &long[..]), ("empty", &[][..])] {
        let rep = c.v3(&Nfs3Args::GetAttr(GetAttr3Args { object: Opaque(fh) }));
        assert_eq!(status3(proc3::GETATTR, &rep), Nfsstat3::BADHANDLE, "NFSv3 GETATTR of a {what} handle");
    }
    let mut s = session(&mut c, b"hostile-1", 1 << 20, 64);
    for (what, fh) in [("tampered", &forged[..]), ("random", &[9u8; 28][..])] {
        let rep = c.v4(vec![s.sequence(), ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }), ArgOp4::GetAttr(GetAttr4Args { attr_request: Bitmap4::new() })]);
        let r = res4(&rep);
        assert_eq!(r.status, Nfsstat4::BADHANDLE, "NFSv4 PUTFH of a {what} handle: {r:?}");
        assert_eq!(r.results.len(), 2, "the COMPOUND stops at PUTFH");
    }
    still_serves(&mut d, "bad handles");

    // Stateids: a made-up one, an old seqid, a future seqid, one of a closed file.
    let rep = c.v4(vec![
        s.sequence(),
        ArgOp4::PutFh(PutFh4Args { object: Opaque(&root) }),
        ArgOp4::Open(Open4Args {
            seqid: 0,
            share_access: share::ACCESS_BOTH,
            share_deny: share::DENY_NONE,
            owner: StateOwner4 { clientid: s.clientid, owner: Opaque(b"hostile-owner") },
            openhow: OpenFlag4::Create(CreateHow4::Unchecked(Fattr4 { attrmask: Bitmap4::new(), attr_vals: Opaque(b"") })),
            claim: OpenClaim4::Null(Name(b"hostile-file")),
        }),
        ArgOp4::GetFh(()),
    ]);
    let r = res4(&rep);
    assert_eq!(r.status, Nfsstat4::OK, "{r:?}");
    let (ResOp4::Open(Nfs4Res::Ok(o)), ResOp4::GetFh(Nfs4Res::Ok(fh))) = (&r.results[2], &r.results[3]) else { panic!("{r:?}") };
    let (first, file) = (o.stateid, fh.object.0.to_vec());
    // The same owner opens again: the stateid's seqid goes up.
    let rep = c.v4(vec![
        s.sequence(),
        ArgOp4::PutFh(PutFh4Args { object: Opaque(&root) }),
        ArgOp4::Open(Open4Args {
            seqid: 0,
            share_access: share::ACCESS_READ,
            share_deny: share::DENY_NONE,
            owner: StateOwner4 { clientid: s.clientid, owner: Opaque(b"hostile-owner") },
            openhow: OpenFlag4::NoCreate,
            claim: OpenClaim4::Null(Name(b"hostile-file")),
        }),
    ]);
    let r = res4(&rep);
    let ResOp4::Open(Nfs4Res::Ok(o)) = &r.results[2] else { panic!("{r:?}") };
    let second = o.stateid;
    assert_eq!(second.other, first.other);
    assert!(second.seqid > first.seqid);
    let read = |c: &mut Client, s: &mut Sess, sid: Stateid4| {
        let rep = c.v4(vec![s.sequence(), ArgOp4::PutFh(PutFh4Args { object: Opaque(&file) }), ArgOp4::Read(Read4Args { stateid: sid, offset: 0, count: 10 })]);
        res4(&rep).status
    };
    assert_eq!(read(&mut c, &mut s, second), Nfsstat4::OK);
    let mut made_up = second;
    made_up.other[0] ^= 0x55;
    assert_eq!(read(&mut c, &mut s, made_up), Nfsstat4::BAD_STATEID, "a made-up stateid");
    assert_eq!(read(&mut c, &mut s, first), Nfsstat4::OLD_STATEID, "an old seqid");
    let future = Stateid4 { seqid: second.seqid + 5, other: second.other };
    assert_eq!(read(&mut c, &mut s, future), Nfsstat4::BAD_STATEID, "a future seqid");
    let rep = c.v4(vec![s.sequence(), ArgOp4::PutFh(PutFh4Args { object: Opaque(&file) }), ArgOp4::Close(Close4Args { seqid: 0, open_stateid: second })]);
    assert_eq!(res4(&rep).status, Nfsstat4::OK);
    assert_eq!(read(&mut c, &mut s, second), Nfsstat4::BAD_STATEID, "the stateid of a closed file");
    still_serves(&mut d, "stale stateids");

    // COMPOUNDs over the session's negotiated limits.
    let mut small = session(&mut c, b"hostile-2", 8 << 10, 8);
    assert!(small.max_ops >= 2 && small.max_req >= 1024, "negotiated {} ops, {} bytes", small.max_ops, small.max_req);
    let mut ops = vec![small.sequence()];
    for _ in 0..small.max_ops {
        ops.push(ArgOp4::PutRootFh(()));
    }
    let r = c.v4(ops);
    let r = res4(&r);
    assert_eq!(r.status, Nfsstat4::TOO_MANY_OPS, "{} ops over a limit of {}", small.max_ops + 1, small.max_ops);
    small.seq -= 1;
    let big = vec![0u8; small.max_req as usize + 1];
    let rep = c.v4(vec![
        small.sequence(),
        ArgOp4::PutFh(PutFh4Args { object: Opaque(&file) }),
        ArgOp4::Write(Write4Args { stateid: Stateid4::ANONYMOUS, offset: 0, stable: StableHow4::FileSync, data: Opaque(&big) }),
    ]);
    assert_eq!(res4(&rep).status, Nfsstat4::REQ_TOO_BIG, "a request over {} bytes", small.max_req);
    small.seq -= 1;
    let rep = c.v4(vec![small.sequence(), ArgOp4::PutRootFh(())]);
    assert_eq!(res4(&rep).status, Nfsstat4::OK, "the session still works");
    still_serves(&mut d, "oversized COMPOUNDs");

    // A burst of garbage records on many connections at once.
    let mut conns: Vec<Client> = (0..32).map(|_| Client::connect(d.nfs_port)).collect();
    let mut seed = 0x1234_5678u64;
    for (i, c) in conns.iter_mut().enumerate() {
        let mut rec = c.call_record(PROGRAM_NFS, 3 + (i as u32 % 2), i as u32 % 23, &[]);
        for _ in 0..(i * 7) {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            rec.push((seed >> 33) as u8);
        }
        c.send_record(&rec);
    }
    for c in &mut conns {
        let _ = c.read_reply();
    }
    drop(conns);
    still_serves(&mut d, "a burst of garbage");
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")), "{}", d.log_text());
}
