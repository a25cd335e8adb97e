//! Representative NFSv4.1 records from a Linux 6.1 client and NFS-Ganesha
//! (testdata/nfs/v41_*_{call,reply}.hex): each decodes to the values the
//! RFC 8881 layout says, and re-encodes to the same bytes.

use std::path::PathBuf;

use duet_protocols::nfs::nfs4::attrs::{Attrs, Fsid4};
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::rpc::{CallBody, Credential, ReplyHeader, AUTH_SYS};
use duet_protocols::nfs::xdr::{Name, XdrDecode, XdrEncode, XdrReader, XdrWriter};

fn record(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/nfs")
        .join(name);
    let text = std::fs::read_to_string(path).expect("testdata file");
    let line = text
        .lines()
        .find(|l| !l.starts_with('#'))
        .expect("a record line")
        .trim();
    (0..line.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap())
        .collect()
}

/// Decodes a call record and checks that it re-encodes identically.
fn with_call(name: &str, check: impl FnOnce(&CallBody<'_>, &Compound4Args<'_>)) {
    let rec = record(&format!("v41_{name}_call.hex"));
    let mut r = XdrReader::new(&rec);
    let call = CallBody::decode(&mut r).unwrap();
    let args = Compound4Args::decode(&mut r, &CompoundLimits::default()).unwrap();
    assert_eq!(args.stop, None);
    assert_eq!(args.minorversion, 1);
    check(&call, &args);
    let mut w = XdrWriter::new();
    call.encode(&mut w);
    args.encode(&mut w);
    assert_eq!(w.as_bytes(), &rec[..]);
}

/// Decodes a reply record and checks that it re-encodes identically.
fn with_reply(name: &str, check: impl FnOnce(&Compound4Res<'_>)) {
    let rec = record(&format!("v41_{name}_reply.hex"));
    let mut r = XdrReader::new(&rec);
    let header = ReplyHeader::decode(&mut r).unwrap();
    let res = Compound4Res::decode(&mut r, 64).unwrap();
    assert_eq!(res.status, Nfsstat4::OK);
    check(&res);
    let mut w = XdrWriter::new();
    header.encode(&mut w);
    res.encode(&mut w);
    assert_eq!(w.as_bytes(), &rec[..]);
}

fn getattr_values<'a>(res: &'a Compound4Res<'a>) -> Attrs<'a> {
    let fattr = res
        .results
        .iter()
        .find_map(|r| match r {
            ResOp4::GetAttr(Nfs4Res::Ok(ok)) => Some(&ok.obj_attributes),
            _ => None,
        })
        .expect("a GETATTR result");
    Attrs::from_fattr4(fattr).unwrap()
}

#[test]
fn exchange_id() {
    with_call("exchange_id", |call, args| {
        let Credential::Sys(sys) = Credential::parse(&call.cred).unwrap() else {
            panic!("AUTH_SYS expected")
        };
        assert_eq!(call.cred.flavor, AUTH_SYS);
        assert_eq!(sys.machine_name.0, b"linux-client");
        assert_eq!((sys.uid, sys.gid), (0, 0));
        let [ArgOp4::ExchangeId(x)] = &args.ops[..] else {
            panic!("{:?}", args.ops)
        };
        assert_eq!(x.clientowner.ownerid.0, b"Linux NFSv4.1 linux-client");
        assert_eq!(x.flags, 0x101);
        assert_eq!(x.state_protect, StateProtect4A::None);
        assert_eq!(x.client_impl_id.0[0].domain.0, b"kernel.org");
    });
    with_reply("exchange_id", |res| {
        let [ResOp4::ExchangeId(Nfs4Res::Ok(ok))] = &res.results[..] else {
            panic!()
        };
        assert_eq!(ok.clientid, 7713757733152882691);
        assert_eq!(ok.sequenceid, 1);
        assert_eq!(ok.server_owner.major_id.0, b"vm");
        assert!(ok.server_impl_id.0.is_empty());
    });
}

#[test]
fn create_session() {
    with_call("create_session", |_, args| {
        let [ArgOp4::CreateSession(cs)] = &args.ops[..] else {
            panic!()
        };
        assert_eq!(cs.sequence, 1);
        assert_eq!(cs.fore_chan_attrs.maxrequestsize, 1049620);
        assert_eq!(cs.fore_chan_attrs.maxoperations, 8);
        assert_eq!(cs.back_chan_attrs.maxrequests, 16);
        assert_eq!(cs.cb_program, 0x4000_0000);
        assert!(matches!(cs.sec_parms.0[..], [CallbackSecParms4::Sys(_)]));
    });
    with_reply("create_session", |res| {
        let [ResOp4::CreateSession(Nfs4Res::Ok(ok))] = &res.results[..] else {
            panic!()
        };
        assert_eq!(ok.sessionid[..8], [4, 0, 0, 0, 202, 197, 12, 107]);
    });
}

#[test]
fn sequence_putrootfh_getattr() {
    with_call("sequence_putrootfh_getattr", |_, args| {
        let ops: Vec<u32> = args.ops.iter().map(|o| o.opnum()).collect();
        assert_eq!(
            ops,
            [
                opnum::SEQUENCE,
                opnum::PUTROOTFH,
                opnum::GETFH,
                opnum::GETATTR
            ]
        );
    });
    with_reply("sequence_putrootfh_getattr", |res| {
        let ResOp4::GetFh(Nfs4Res::Ok(fh)) = &res.results[2] else {
            panic!()
        };
        assert_eq!(fh.object.0.len(), 128);
        let a = getattr_values(res);
        assert_eq!(a.type_, Some(NfsFtype4::Dir));
        assert_eq!(a.mode, Some(0o755));
        assert_eq!(a.numlinks, Some(3));
        assert_eq!(a.owner.unwrap().0, b"root@localdomain");
        assert_eq!(
            a.fsid,
            Some(Fsid4 {
                major: 152,
                minor: 152
            })
        );
    });
}

#[test]
fn open_create() {
    with_call("open", |_, args| {
        let ArgOp4::Open(open) = &args.ops[2] else {
            panic!()
        };
        assert_eq!(open.share_access, share::ACCESS_WRITE);
        assert_eq!(open.claim, OpenClaim4::Null(Name(b"f0")));
        let OpenFlag4::Create(CreateHow4::Unchecked(attrs)) = &open.openhow else {
            panic!()
        };
        let a = Attrs::from_fattr4(attrs).unwrap();
        assert_eq!((a.size, a.mode), (Some(0), Some(0o644)));
    });
    with_reply("open", |res| {
        let ResOp4::Open(Nfs4Res::Ok(ok)) = &res.results[2] else {
            panic!()
        };
        assert_eq!(ok.stateid.seqid, 1);
        assert_eq!(ok.rflags, open4_result::LOCKTYPE_POSIX);
        assert_eq!(ok.delegation, OpenDelegation4::None);
        assert_eq!(getattr_values(res).type_, Some(NfsFtype4::Reg));
    });
}

#[test]
fn write_borrows_payload() {
    let rec = record("v41_write_call.hex");
    let mut r = XdrReader::new(&rec);
    CallBody::decode(&mut r).unwrap();
    let args = Compound4Args::decode(&mut r, &CompoundLimits::default()).unwrap();
    let ArgOp4::Write(w) = &args.ops[2] else {
        panic!()
    };
    assert_eq!(w.data.0, b"small file 0\n");
    assert_eq!(w.stable, StableHow4::FileSync);
    // The payload is a slice of the record itself: no copy was made.
    let rec_range = rec.as_ptr_range();
    assert!(rec_range.contains(&w.data.0.as_ptr()));

    with_call("write", |_, _| {});
    with_reply("write", |res| {
        let ResOp4::Write(Nfs4Res::Ok(ok)) = &res.results[2] else {
            panic!()
        };
        assert_eq!(ok.count, 13);
        assert_eq!(ok.committed, StableHow4::FileSync);
        assert_eq!(getattr_values(res).size, Some(13));
    });
}

#[test]
fn close() {
    with_call("close", |_, args| {
        let ArgOp4::Close(c) = &args.ops[3] else {
            panic!()
        };
        assert_eq!(c.open_stateid.other[..4], [4, 0, 0, 0]);
    });
    with_reply("close", |res| {
        assert!(matches!(res.results[3], ResOp4::Close(Nfs4Res::Ok(_))));
    });
}

#[test]
fn readdir() {
    with_call("readdir", |_, args| {
        let ArgOp4::ReadDir(rd) = &args.ops[2] else {
            panic!()
        };
        assert_eq!(rd.cookie, 0);
        assert!(rd.attr_request.is_set(attrs::fattr4::FILEID));
    });
    with_reply("readdir", |res| {
        let ResOp4::ReadDir(Nfs4Res::Ok(ok)) = &res.results[2] else {
            panic!()
        };
        assert!(ok.reply.entries.0.len() >= 5);
        for e in &ok.reply.entries.0 {
            let a = Attrs::from_fattr4(&e.attrs).unwrap();
            assert!(
                a.fileid.is_some() || a.mounted_on_fileid.is_some(),
                "{:?}",
                e.name
            );
        }
    });
}

#[test]
fn rename_setattr_create_remove() {
    with_call("rename", |_, args| {
        let ArgOp4::Rename(r) = &args.ops[4] else {
            panic!()
        };
        assert_ne!(r.oldname, r.newname);
    });
    with_reply("rename", |_| {});
    with_call("setattr", |_, args| {
        let ArgOp4::SetAttr(s) = &args.ops[2] else {
            panic!()
        };
        Attrs::from_fattr4(&s.obj_attributes).unwrap();
    });
    with_reply("setattr", |res| {
        let ResOp4::SetAttr(s) = &res.results[2] else {
            panic!()
        };
        assert_eq!(s.status, Nfsstat4::OK);
        assert!(!s.attrsset.is_empty());
    });
    with_call("create_dir", |_, args| {
        let ArgOp4::Create(c) = &args.ops[2] else {
            panic!()
        };
        assert_eq!(c.objtype, CreateType4::Other(NfsFtype4::Dir));
    });
    with_reply("create_dir", |_| {});
    with_call("remove", |_, _| {});
    with_reply("remove", |_| {});
}
