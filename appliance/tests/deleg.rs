//! NFSv4.1 read delegations against a real duetd (issue 13): a raw NFSv4.1
//! client whose CREATE_SESSION asks for a back channel on its one TCP
//! connection gets a read delegation; an SMB client opening the file for
//! writing, and then a second NFSv4.1 client opening it for writing, make
//! the daemon send CB_RECALL (CB_SEQUENCE + CB_RECALL, RFC 8881 20.9 /
//! 20.2) on that connection, between the replies to the client's own
//! calls; the second NFS client hears NFS4ERR_DELAY until DELEGRETURN. The
//! bytes written over SMB and over NFS are read back exactly by the
//! delegation's holder.

mod clients;
mod common;

use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::rpc::*;
use duet_protocols::nfs::xdr::{List, Name, Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};
use duet_protocols::smb2::create::{create_disposition, create_options};
use duet_protocols::smb2::status::NtStatus;

/// An NFSv4.1 client that also serves the callback program on its
/// connection: CALLs that arrive among its replies are recorded and
/// answered NFS4_OK.
struct CbClient {
    n: Nfs,
    calls: Vec<Vec<u8>>,
}

/// A CB_RECALL's stateid and file handle, from a CB_COMPOUND CALL record
/// (RFC 8881 19.2.1, 20.9.1, 20.2.1); also checks the program and slot.
fn recall_of(call: &[u8]) -> (Stateid4, Vec<u8>, u32) {
    let mut r = XdrReader::new(call);
    let hdr = CallBody::decode(&mut r).unwrap();
    assert_eq!((hdr.prog, hdr.vers, hdr.proc_), (PROGRAM_NFS4_CB, 1, 1), "CB_COMPOUND of the session's program");
    r.get_string(1024, "tag").unwrap();
    assert_eq!(r.get_u32().unwrap(), 1);
    r.get_u32().unwrap();
    assert_eq!(r.get_u32().unwrap(), 2);
    assert_eq!(r.get_u32().unwrap(), 11, "CB_SEQUENCE first");
    let _sid: [u8; 16] = r.get_array_fixed().unwrap();
    let seq = r.get_u32().unwrap();
    assert_eq!(r.get_u32().unwrap(), 0, "slot 0");
    r.get_u32().unwrap();
    r.get_bool().unwrap();
    assert_eq!(r.get_u32().unwrap(), 0);
    assert_eq!(r.get_u32().unwrap(), 4, "CB_RECALL");
    let sid = Stateid4::decode(&mut r).unwrap();
    r.get_bool().unwrap();
    let fh = r.get_opaque(128, "fh").unwrap().to_vec();
    (sid, fh, seq)
}

impl CbClient {
    /// Answers a CB_COMPOUND CALL: CB_SEQUENCE and CB_RECALL both NFS4_OK
    /// (RFC 8881 19.2.2).
    fn answer(&mut self, call: &[u8]) {
        let xid = u32::from_be_bytes(call[..4].try_into().unwrap());
        let (_, _, seq) = recall_of(call);
        let mut w = XdrWriter::new();
        ReplyHeader::success(xid).encode(&mut w);
        w.put_u32(0);
        w.put_string(b"");
        w.put_u32(2);
        w.put_u32(11);
        w.put_u32(0);
        // CB_SEQUENCE4resok: session id (copied from the call), sequence,
        // slot, highest and target highest slot.
        let mut r = XdrReader::new(call);
        CallBody::decode(&mut r).unwrap();
        r.get_string(1024, "tag").unwrap();
        r.get_u32().unwrap();
        r.get_u32().unwrap();
        r.get_u32().unwrap();
        r.get_u32().unwrap();
        let sid: [u8; 16] = r.get_array_fixed().unwrap();
        w.put_opaque_fixed(&sid);
        w.put_u32(seq);
        w.put_u32(0);
        w.put_u32(0);
        w.put_u32(0);
        w.put_u32(4);
        w.put_u32(0);
        self.n.send_record(&w.into_inner()).unwrap();
    }

    /// The next record: a CALL is answered and kept, a REPLY returned.
    fn next(&mut self) -> Option<Vec<u8>> {
        let rec = self.n.read_reply()?;
        if rec.len() >= 8 && rec[4..8] == [0, 0, 0, 0] {
            self.answer(&rec);
            self.calls.push(rec);
            return self.next();
        }
        Some(rec)
    }

    fn v4(&mut self, ops: Vec<ArgOp4<'_>>) -> Vec<u8> {
        let args = Compound4Args { tag: Opaque(b"deleg"), minorversion: 1, ops, stop: None };
        let mut w = XdrWriter::new();
        args.encode(&mut w);
        let rec = self.n.call_record(PROGRAM_NFS, 4, NFSPROC4_COMPOUND, &w.into_inner());
        self.n.send_record(&rec).unwrap();
        let reply = self.next().expect("a reply");
        assert_eq!(u32::from_be_bytes(reply[..4].try_into().unwrap()), self.n.xid, "xid");
        reply
    }

    /// Waits up to `within` for a callback; returns it (answered).
    fn wait_call(&mut self, within: Duration) -> Option<Vec<u8>> {
        if !self.calls.is_empty() {
            return Some(self.calls.remove(0));
        }
        self.n.s.set_read_timeout(Some(within)).unwrap();
        let got = self.n.read_reply();
        self.n.s.set_read_timeout(None).unwrap();
        let rec = got?;
        assert!(rec[4..8] == [0, 0, 0, 0], "no reply was due: {rec:?}");
        self.answer(&rec);
        Some(rec)
    }
}

/// EXCHANGE_ID, CREATE_SESSION with CONN_BACK_CHAN (RFC 8881 18.36),
/// RECLAIM_COMPLETE.
fn back_session(c: &mut CbClient, owner: &[u8]) -> Sess {
    let rep = c.v4(vec![ArgOp4::ExchangeId(ExchangeId4Args {
        clientowner: ClientOwner4 { verifier: [9; 8], ownerid: Opaque(owner) },
        flags: 0x101,
        state_protect: StateProtect4A::None,
        client_impl_id: List(vec![]),
    })]);
    let r = res4(&rep);
    let [ResOp4::ExchangeId(Nfs4Res::Ok(x))] = &r.results[..] else { panic!("{r:?}") };
    let (clientid, sequence) = (x.clientid, x.sequenceid);
    let chan = |maxreq: u32| ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: maxreq,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 8 << 10,
        maxoperations: 64,
        maxrequests: 4,
        rdma_ird: List(vec![]),
    };
    let rep = c.v4(vec![ArgOp4::CreateSession(CreateSession4Args {
        clientid,
        sequence,
        flags: create_session4_flag::CONN_BACK_CHAN,
        fore_chan_attrs: chan(1 << 20),
        back_chan_attrs: chan(4096),
        cb_program: PROGRAM_NFS4_CB,
        sec_parms: List(vec![CallbackSecParms4::None]),
    })]);
    let r = res4(&rep);
    let [ResOp4::CreateSession(Nfs4Res::Ok(cs))] = &r.results[..] else { panic!("{r:?}") };
    assert_ne!(cs.flags & create_session4_flag::CONN_BACK_CHAN, 0, "the back channel is accepted");
    let mut s = Sess { clientid, id: cs.sessionid, seq: 0, max_ops: 64, max_req: 1 << 20 };
    let seq = s.sequence();
    let rep = c.v4(vec![seq, ArgOp4::ReclaimComplete(ReclaimComplete4Args { one_fs: false })]);
    assert_eq!(res4(&rep).status, Nfsstat4::OK);
    s
}

/// OPEN (no create) with `access` by `owner`: (open stateid, delegation
/// stateid if one was granted, file handle), or the error.
fn open_a(c: &mut CbClient, s: &mut Sess, dir: &[u8], name: &str, access: u32, owner: &[u8]) -> Result<(Stateid4, Option<Stateid4>, Vec<u8>), Nfsstat4> {
    let seq = s.sequence();
    let rep = c.v4(vec![
        seq,
        ArgOp4::PutFh(PutFh4Args { object: Opaque(dir) }),
        ArgOp4::Open(Open4Args {
            seqid: 0,
            share_access: access,
            share_deny: share::DENY_NONE,
            owner: StateOwner4 { clientid: s.clientid, owner: Opaque(owner) },
            openhow: OpenFlag4::NoCreate,
            claim: OpenClaim4::Null(Name(name.as_bytes())),
        }),
        ArgOp4::GetFh(()),
    ]);
    let r = res4(&rep);
    match (r.results.get(2), r.results.get(3)) {
        (Some(ResOp4::Open(Nfs4Res::Ok(o))), Some(ResOp4::GetFh(Nfs4Res::Ok(fh)))) => {
            let d = match &o.delegation {
                OpenDelegation4::Read(d) => Some(d.stateid),
                _ => None,
            };
            Ok((o.stateid, d, fh.object.0.to_vec()))
        }
        _ => Err(r.status),
    }
}

fn read_a(c: &mut CbClient, s: &mut Sess, fh: &[u8], sid: Stateid4) -> Vec<u8> {
    let seq = s.sequence();
    let rep = c.v4(vec![
        seq,
        ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
        ArgOp4::Read(Read4Args { stateid: sid, offset: 0, count: 1 << 16 }),
    ]);
    match res4(&rep).results.get(2) {
        Some(ResOp4::Read(Nfs4Res::Ok(r))) => r.data.0.to_vec(),
        other => panic!("READ: {other:?}"),
    }
}

fn delegreturn(c: &mut CbClient, s: &mut Sess, fh: &[u8], d: Stateid4) -> Nfsstat4 {
    let seq = s.sequence();
    let rep = c.v4(vec![seq, ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }), ArgOp4::DelegReturn(DelegReturn4Args { deleg_stateid: d })]);
    res4(&rep).status
}

/// A plain NFSv4.1 client's OPEN (no create) for writing: the stateid and
/// handle, or the error.
fn open_b(n: &mut Nfs, s: &mut Sess, dir: &[u8], name: &str) -> Result<(Stateid4, Vec<u8>), Nfsstat4> {
    let seq = s.sequence();
    let rep = n
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(dir) }),
            ArgOp4::Open(Open4Args {
                seqid: 0,
                share_access: share::ACCESS_BOTH,
                share_deny: share::DENY_NONE,
                owner: StateOwner4 { clientid: s.clientid, owner: Opaque(b"b-writer") },
                openhow: OpenFlag4::NoCreate,
                claim: OpenClaim4::Null(Name(name.as_bytes())),
            }),
            ArgOp4::GetFh(()),
        ])
        .expect("OPEN reply");
    let r = res4(&rep);
    match (r.results.get(2), r.results.get(3)) {
        (Some(ResOp4::Open(Nfs4Res::Ok(o))), Some(ResOp4::GetFh(Nfs4Res::Ok(fh)))) => Ok((o.stateid, fh.object.0.to_vec())),
        _ => Err(r.status),
    }
}

#[test]
fn read_delegation_is_recalled_by_smb_and_nfs_writers() {
    recalled_by_smb_and_nfs_writers("");
}

/// The same with two protocol executors: the holder's back connection,
/// the NFS writer's and the SMB writer's may each live on either, and the
/// recall decided on one reaches the back channel on another through the
/// routes (NFS on every executor, one shared NFS server).
#[test]
fn read_delegation_is_recalled_across_executors() {
    recalled_by_smb_and_nfs_writers("executors = 2");
}

fn recalled_by_smb_and_nfs_writers(top: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(dir.path(), top, "", "portmap = false");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    let want_read = share::ACCESS_READ | share::WANT_READ_DELEG;

    // The file, written over SMB first.
    let v1: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let mut smb = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let f = smb.create("shared.bin").unwrap();
    assert_eq!(smb.write(f, 0, &v1, true), NtStatus::SUCCESS);
    assert_eq!(smb.close(f), NtStatus::SUCCESS);

    // A: a back channel on its connection, a read delegation.
    let mut a = CbClient { n: Nfs::connect(d.nfs_port).as_user(1500, 1500), calls: Vec::new() };
    let root = a.n.mount("/public").unwrap();
    let mut sa = back_session(&mut a, b"deleg-holder");
    let (mut oa, da, fh) = open_a(&mut a, &mut sa, &root, "shared.bin", want_read, b"a-reader").unwrap();
    let da = da.expect("a read delegation for a reader with a back channel");
    assert_eq!(read_a(&mut a, &mut sa, &fh, oa), v1);

    // 1. An SMB open for writing recalls it: CB_RECALL on A's connection.
    let t = Instant::now();
    let mut w = open_req("shared.bin", create_disposition::OVERWRITE_IF, create_options::NON_DIRECTORY_FILE, RW);
    w.share_access = 7;
    let f = smb.create_req(w).unwrap();
    let call = a.wait_call(Duration::from_secs(5)).expect("a CB_RECALL after the SMB open");
    let (rsid, rfh, seq) = recall_of(&call[..]);
    println!("CB_RECALL {:?} after the SMB open", t.elapsed());
    assert_eq!((rsid, rfh.as_slice(), seq), (da, fh.as_slice(), 1));
    let v2: Vec<u8> = (0..7000u32).map(|i| (i * 13 % 253) as u8).collect();
    assert_eq!(smb.write(f, 0, &v2, true), NtStatus::SUCCESS);
    assert_eq!(smb.close(f), NtStatus::SUCCESS);
    assert_eq!(delegreturn(&mut a, &mut sa, &fh, da), Nfsstat4::OK);
    assert_eq!(read_a(&mut a, &mut sa, &fh, oa), v2, "the holder reads what SMB wrote");

    // 2. A second NFS client's open for writing: DELAY until DELEGRETURN.
    std::thread::sleep(Duration::from_millis(1200)); // the recall backoff
    let (oa2, db, _) = open_a(&mut a, &mut sa, &root, "shared.bin", want_read, b"a-reader").unwrap();
    oa = oa2; // the same owner's open, its seqid bumped
    let db = db.expect("delegated again once the backoff passed");
    let mut b = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let mut sb = session(&mut b, b"deleg-writer", 1 << 20, 64);
    let t = Instant::now();
    assert_eq!(open_b(&mut b, &mut sb, &root, "shared.bin").unwrap_err(), Nfsstat4::DELAY);
    let call = a.wait_call(Duration::from_secs(5)).expect("a CB_RECALL after B's open");
    let (rsid, _, seq) = recall_of(&call[..]);
    println!("CB_RECALL {:?} after B's open", t.elapsed());
    assert_eq!((rsid, seq), (db, 2));
    assert_eq!(open_b(&mut b, &mut sb, &root, "shared.bin").unwrap_err(), Nfsstat4::DELAY, "until DELEGRETURN");
    assert!(a.wait_call(Duration::from_millis(300)).is_none(), "one recall, not one per retry");
    assert_eq!(delegreturn(&mut a, &mut sa, &fh, db), Nfsstat4::OK);
    let (sidb, fhb) = open_b(&mut b, &mut sb, &root, "shared.bin").expect("B opens once the delegation is back");
    let v3 = b"written by the second NFS client".to_vec();
    let seq = sb.sequence();
    let rep = b
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(&fhb) }),
            ArgOp4::Write(Write4Args { stateid: sidb, offset: 0, stable: StableHow4::FileSync, data: Opaque(&v3) }),
        ])
        .unwrap();
    assert_eq!(res4(&rep).status, Nfsstat4::OK);
    let got = read_a(&mut a, &mut sa, &fh, oa);
    assert_eq!(&got[..v3.len()], &v3[..]);
    assert_eq!(&got[v3.len()..], &v2[v3.len()..], "the rest is SMB's bytes");
    // B holds it open for writing: A is not delegated again.
    let (_, dc, _) = open_a(&mut a, &mut sa, &root, "shared.bin", want_read, b"a-reader").unwrap();
    assert_eq!(dc, None);
}
