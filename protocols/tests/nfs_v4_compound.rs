//! COMPOUND decoding rules (RFC 8881 15.2, 16.2.3), the NFSv4.2
//! operations (RFC 7862), and the fattr4 attribute codec (RFC 8881 5).

use duet_protocols::nfs::nfs4::attrs::{fattr4, Attrs, Fsid4, SetTime4};
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::{
    encode_to_vec, List, Opaque, XdrEncode, XdrError, XdrReader, XdrWriter,
};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn opaque(b: &[u8]) -> Vec<u8> {
    let mut out = words(&[b.len() as u32]);
    out.extend_from_slice(b);
    out.resize(out.len() + (4 - b.len() % 4) % 4, 0);
    out
}

/// tag "", minorversion, op count, then the ops' bytes.
fn compound(minor: u32, nops: u32, ops: &[u8]) -> Vec<u8> {
    let mut b = words(&[0, minor, nops]);
    b.extend_from_slice(ops);
    b
}

fn decode(bytes: &[u8]) -> Compound4Args<'_> {
    Compound4Args::decode(&mut XdrReader::new(bytes), &CompoundLimits::default()).unwrap()
}

fn stateid(seq: u32) -> Vec<u8> {
    let mut b = words(&[seq]);
    b.extend([0xab; 12]);
    b
}

#[test]
fn compound_of_256_lookups_decodes() {
    // vNFS-style: PUTROOTFH then 255 LOOKUPs of "d".
    let mut ops = words(&[opnum::PUTROOTFH]);
    for _ in 0..255 {
        ops.extend(words(&[opnum::LOOKUP]));
        ops.extend(opaque(b"d"));
    }
    let bytes = compound(1, 256, &ops);
    let args = decode(&bytes);
    assert_eq!(args.ops.len(), 256);
    assert_eq!(args.stop, None);
    assert_eq!(encode_to_vec(&args), bytes);
}

#[test]
fn too_many_ops_rejects_whole_compound() {
    let limits = CompoundLimits {
        max_ops: 2,
        ..CompoundLimits::default()
    };
    let bytes = compound(1, 3, &words(&[24, 24, 24]));
    let args = Compound4Args::decode(&mut XdrReader::new(&bytes), &limits).unwrap();
    assert!(args.ops.is_empty());
    let stop = args.stop.unwrap();
    assert!(stop.rejects_whole_compound());
    assert_eq!(stop.status(), Nfsstat4::TOO_MANY_OPS);
    assert_eq!(stop.result(), None);
}

#[test]
fn minor_version_mismatch() {
    for minor in [0, 3] {
        let bytes = compound(minor, 1, &words(&[24]));
        let args = decode(&bytes);
        assert_eq!(args.stop, Some(CompoundStop::MinorVersMismatch(minor)));
        assert_eq!(args.stop.unwrap().status(), Nfsstat4::MINOR_VERS_MISMATCH);
    }
}

#[test]
fn unknown_op_is_op_illegal_and_ends_the_compound() {
    // PUTROOTFH, then op 2 (undefined), then GETFH which is never decoded.
    let bytes = compound(1, 3, &words(&[24, 2, 10]));
    let args = decode(&bytes);
    assert_eq!(args.ops, vec![ArgOp4::PutRootFh(())]);
    let stop = args.stop.unwrap();
    assert_eq!(stop, CompoundStop::Illegal { opnum: 2 });
    // The reply slot: opcode OP_ILLEGAL with NFS4ERR_OP_ILLEGAL.
    let res = stop.result().unwrap();
    assert_eq!(res.opnum(), opnum::ILLEGAL);
    assert_eq!(res.status(), Nfsstat4::OP_ILLEGAL);
    let reply =
        Compound4Res::from_results(Opaque(b""), vec![ResOp4::PutRootFh(Nfs4Res::Ok(())), res]);
    assert_eq!(reply.status, Nfsstat4::OP_ILLEGAL);
    assert_eq!(
        encode_to_vec(&reply),
        words(&[10044, 0, 2, 24, 0, 10044, 10044])
    );
    // 4.2 operations are illegal in a 4.1 COMPOUND, legal in 4.2.
    let seek = [&words(&[opnum::SEEK])[..], &stateid(0), &words(&[0, 0, 1])].concat();
    assert_eq!(
        decode(&compound(1, 1, &seek)).stop,
        Some(CompoundStop::Illegal { opnum: 69 })
    );
    assert_eq!(decode(&compound(2, 1, &seek)).stop, None);
    // ILLEGAL itself.
    assert_eq!(
        decode(&compound(1, 1, &words(&[10044]))).stop,
        Some(CompoundStop::Illegal { opnum: 10044 })
    );
}

#[test]
fn unsupported_ops_are_notsupp() {
    // LAYOUTGET (50), GET_DIR_DELEGATION (46), and a 4.0-only op in 4.1.
    for op in [
        opnum::LAYOUTGET,
        opnum::GET_DIR_DELEGATION,
        opnum::SETCLIENTID,
        opnum::OPENATTR,
    ] {
        let bytes = compound(1, 2, &words(&[24, op, 0, 0, 0]));
        let args = decode(&bytes);
        assert_eq!(args.ops.len(), 1);
        let stop = args.stop.unwrap();
        assert_eq!(stop, CompoundStop::NotSupported { opnum: op });
        let res = stop.result().unwrap();
        assert_eq!((res.opnum(), res.status()), (op, Nfsstat4::NOTSUPP));
        assert_eq!(encode_to_vec(&res.status()), words(&[10004]));
    }
}

#[test]
fn malformed_op_is_badxdr_or_precise_status() {
    // PUTFH with a 129-byte handle: BADXDR.
    let bytes = compound(1, 1, &[&words(&[22])[..], &opaque(&[0; 129])].concat());
    let stop = decode(&bytes).stop.unwrap();
    assert!(matches!(stop, CompoundStop::BadXdr { opnum: 22, .. }));
    assert_eq!(stop.status(), Nfsstat4::BADXDR);
    // LOOKUP of a 256-byte name: NAMETOOLONG.
    let bytes = compound(1, 1, &[&words(&[15])[..], &opaque(&[b'x'; 256])].concat());
    let stop = decode(&bytes).stop.unwrap();
    assert_eq!(stop.status(), Nfsstat4::NAMETOOLONG);
    // A truncated SEQUENCE.
    let bytes = compound(1, 1, &words(&[53, 1, 2]));
    assert_eq!(decode(&bytes).stop.unwrap().status(), Nfsstat4::BADXDR);
    // A missing op number is a header problem: an error (GARBAGE_ARGS).
    let bytes = compound(1, 2, &words(&[24]));
    assert!(
        Compound4Args::decode(&mut XdrReader::new(&bytes), &CompoundLimits::default()).is_err()
    );
    // Trailing bytes after the last op too.
    let bytes = compound(1, 1, &words(&[24, 0]));
    assert!(
        Compound4Args::decode(&mut XdrReader::new(&bytes), &CompoundLimits::default()).is_err()
    );
}

fn roundtrip_arg(op: ArgOp4<'_>, bytes: &[u8]) {
    let mut w = XdrWriter::new();
    op.encode_args(&mut w);
    assert_eq!(w.as_bytes(), bytes, "{op:?}");
    let got = ArgOp4::decode(op.opnum(), 2, &mut XdrReader::new(bytes)).unwrap();
    assert_eq!(got, op);
}

fn roundtrip_res(res: ResOp4<'_>, bytes: &[u8]) {
    let mut w = XdrWriter::new();
    res.encode_result(&mut w);
    assert_eq!(w.as_bytes(), bytes, "{res:?}");
    let mut r = XdrReader::new(bytes);
    assert_eq!(ResOp4::decode(res.opnum(), &mut r).unwrap(), res);
    assert!(r.is_empty());
}

#[test]
fn read_and_write_rfc8881_layout() {
    let sid = Stateid4 {
        seqid: 1,
        other: [0xab; 12],
    };
    roundtrip_arg(
        ArgOp4::Read(Read4Args {
            stateid: sid,
            offset: 8192,
            count: 4096,
        }),
        &[&stateid(1)[..], &words(&[0, 8192, 4096])].concat(),
    );
    roundtrip_res(
        ResOp4::Read(Nfs4Res::Ok(Read4ResOk {
            eof: true,
            data: Opaque(b"xyz"),
        })),
        &[&words(&[0, 1])[..], &opaque(b"xyz")].concat(),
    );
    roundtrip_res(
        ResOp4::Read(Nfs4Res::Err(Nfsstat4::OPENMODE)),
        &words(&[10038]),
    );
    roundtrip_arg(
        ArgOp4::Write(Write4Args {
            stateid: sid,
            offset: u64::MAX,
            stable: StableHow4::Unstable,
            data: Opaque(b"append"),
        }),
        &[
            &stateid(1)[..],
            &words(&[u32::MAX, u32::MAX, 0]),
            &opaque(b"append"),
        ]
        .concat(),
    );
}

#[test]
fn lock_denied_carries_the_conflict() {
    let owner = StateOwner4 {
        clientid: 5,
        owner: Opaque(b"o"),
    };
    let denied = Lock4Denied {
        offset: 0,
        length: u64::MAX,
        locktype: NfsLockType4::Write,
        owner,
    };
    let bytes = [
        &words(&[10010, 0, 0, u32::MAX, u32::MAX, 2, 0, 5])[..],
        &opaque(b"o"),
    ]
    .concat();
    roundtrip_res(ResOp4::Lock(Lock4Res::Denied(denied.clone())), &bytes);
    roundtrip_res(ResOp4::LockT(LockT4Res::Denied(denied)), &bytes);
    roundtrip_res(ResOp4::LockT(LockT4Res::Ok), &words(&[0]));
    // LOCK with a new lock owner.
    let args = Lock4Args {
        locktype: NfsLockType4::Read,
        reclaim: false,
        offset: 0,
        length: 10,
        locker: Locker4::New(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: Stateid4 {
                seqid: 1,
                other: [0xab; 12],
            },
            lock_seqid: 0,
            lock_owner: StateOwner4 {
                clientid: 5,
                owner: Opaque(b"lo"),
            },
        }),
    };
    let bytes = [
        &words(&[1, 0, 0, 0, 0, 10, 1, 0])[..],
        &stateid(1),
        &words(&[0, 0, 5]),
        &opaque(b"lo"),
    ]
    .concat();
    roundtrip_arg(ArgOp4::Lock(args), &bytes);
}

#[test]
fn nfs42_operations_rfc7862_layout() {
    let s = Stateid4 {
        seqid: 1,
        other: [0xab; 12],
    };
    let s2 = Stateid4 {
        seqid: 2,
        other: [0xab; 12],
    };
    // COPY: src, dst, offsets, count, consecutive, synchronous, no sources.
    roundtrip_arg(
        ArgOp4::Copy(Copy4Args {
            src_stateid: s,
            dst_stateid: s2,
            src_offset: 0,
            dst_offset: 4096,
            count: 0,
            consecutive: true,
            synchronous: true,
            source_server: List(vec![]),
        }),
        &[
            &stateid(1)[..],
            &stateid(2),
            &words(&[0, 0, 0, 4096, 0, 0, 1, 1, 0]),
        ]
        .concat(),
    );
    roundtrip_res(
        ResOp4::Copy(Copy4Res::Ok(Copy4ResOk {
            response: WriteResponse4 {
                callback_id: List(vec![]),
                count: 10,
                committed: StableHow4::FileSync,
                writeverf: [1; 8],
            },
            requirements: CopyRequirements4 {
                consecutive: true,
                synchronous: true,
            },
        })),
        &[&words(&[0, 0, 0, 10, 2])[..], &[1; 8], &words(&[1, 1])].concat(),
    );
    roundtrip_res(
        ResOp4::Copy(Copy4Res::OffloadNoReqs(CopyRequirements4 {
            consecutive: false,
            synchronous: true,
        })),
        &words(&[10094, 0, 1]),
    );
    // SEEK for a hole from offset 1.
    roundtrip_arg(
        ArgOp4::Seek(Seek4Args {
            stateid: s,
            offset: 1,
            what: DataContent4::Hole,
        }),
        &[&stateid(1)[..], &words(&[0, 1, 1])].concat(),
    );
    roundtrip_res(
        ResOp4::Seek(Nfs4Res::Ok(Seek4ResOk {
            eof: false,
            offset: 65536,
        })),
        &words(&[0, 0, 0, 65536]),
    );
    // ALLOCATE and DEALLOCATE.
    let bytes = [&stateid(1)[..], &words(&[0, 0, 0, 4096])].concat();
    roundtrip_arg(
        ArgOp4::Allocate(Allocate4Args {
            stateid: s,
            offset: 0,
            length: 4096,
        }),
        &bytes,
    );
    roundtrip_arg(
        ArgOp4::Deallocate(Allocate4Args {
            stateid: s,
            offset: 0,
            length: 4096,
        }),
        &bytes,
    );
    roundtrip_res(ResOp4::Deallocate(Nfs4Res::Ok(())), &words(&[0]));
    // READ_PLUS: a data segment and a hole.
    roundtrip_arg(
        ArgOp4::ReadPlus(ReadPlus4Args {
            stateid: s,
            offset: 0,
            count: 100,
        }),
        &[&stateid(1)[..], &words(&[0, 0, 100])].concat(),
    );
    roundtrip_res(
        ResOp4::ReadPlus(Nfs4Res::Ok(ReadPlus4ResOk {
            eof: true,
            contents: List(vec![
                ReadPlusContent::Data(Data4 {
                    offset: 0,
                    data: Opaque(b"ab"),
                }),
                ReadPlusContent::Hole(DataInfo4 {
                    offset: 2,
                    length: 98,
                }),
            ]),
        })),
        &[
            &words(&[0, 1, 2, 0, 0, 0])[..],
            &opaque(b"ab"),
            &words(&[1, 0, 2, 0, 98]),
        ]
        .concat(),
    );
    // CLONE.
    roundtrip_arg(
        ArgOp4::Clone(Clone4Args {
            src_stateid: s,
            dst_stateid: s2,
            src_offset: 0,
            dst_offset: 0,
            count: 0,
        }),
        &[&stateid(1)[..], &stateid(2), &words(&[0, 0, 0, 0, 0, 0])].concat(),
    );
}

#[test]
fn session_ops_without_captures() {
    roundtrip_arg(
        ArgOp4::BindConnToSession(BindConnToSession4Args {
            sessid: [7; 16],
            dir: ChannelDirFromClient4::ForeOrBoth,
            use_conn_in_rdma_mode: false,
        }),
        &[&[7u8; 16][..], &words(&[3, 0])].concat(),
    );
    roundtrip_arg(
        ArgOp4::TestStateid(TestStateid4Args {
            stateids: List(vec![Stateid4 {
                seqid: 1,
                other: [0xab; 12],
            }]),
        }),
        &[&words(&[1])[..], &stateid(1)].concat(),
    );
    roundtrip_res(
        ResOp4::TestStateid(Nfs4Res::Ok(TestStateid4ResOk {
            status_codes: List(vec![Nfsstat4::BAD_STATEID]),
        })),
        &words(&[0, 1, 10025]),
    );
    roundtrip_arg(
        ArgOp4::FreeStateid(FreeStateid4Args {
            stateid: Stateid4::ANONYMOUS,
        }),
        &[0; 16],
    );
    roundtrip_arg(ArgOp4::SecInfoNoName(SecInfoStyle4::Parent), &words(&[1]));
    roundtrip_res(
        ResOp4::SecInfo(Nfs4Res::Ok(List(vec![
            SecInfo4::Flavor(1),
            SecInfo4::Flavor(0),
        ]))),
        &words(&[0, 2, 1, 0]),
    );
    roundtrip_arg(
        ArgOp4::DelegReturn(DelegReturn4Args {
            deleg_stateid: Stateid4::BYPASS,
        }),
        &[0xff; 16],
    );
    roundtrip_arg(ArgOp4::LookupP(()), &[]);
    roundtrip_arg(ArgOp4::SaveFh(()), &[]);
    roundtrip_arg(ArgOp4::RestoreFh(()), &[]);
    roundtrip_arg(ArgOp4::PutPubFh(()), &[]);
}

fn sample_attrs() -> Attrs<'static> {
    Attrs {
        type_: Some(NfsFtype4::Reg),
        change: Some(7),
        size: Some(13),
        fsid: Some(Fsid4 { major: 1, minor: 2 }),
        fileid: Some(99),
        mode: Some(0o644),
        numlinks: Some(1),
        owner: Some(Opaque(b"alice")),
        owner_group: Some(Opaque(b"staff")),
        time_modify: Some(NfsTime4 {
            seconds: 1_700_000_000,
            nseconds: 5,
        }),
        mounted_on_fileid: Some(99),
        suppattr_exclcreat: Some(Bitmap4::from_bits(&[4, 33])),
        ..Attrs::default()
    }
}

#[test]
fn attrs_encode_in_bitmap_order() {
    let a = sample_attrs();
    let mut w = XdrWriter::new();
    let mask = a.encode_vals(None, &mut w);
    assert_eq!(
        mask.iter().collect::<Vec<_>>(),
        vec![1, 3, 4, 8, 20, 33, 35, 36, 37, 53, 55, 75]
    );
    assert_eq!(mask.words(), &[0x0010_011a, 0x00a0_003a, 0x0000_0800]);
    let expected = [
        &words(&[1, 0, 7, 0, 13, 0, 1, 0, 2, 0, 99, 0o644, 1])[..],
        &opaque(b"alice"),
        &opaque(b"staff"),
        &words(&[0, 1_700_000_000, 5, 0, 99, 2, 0x10, 0x2])[..],
    ]
    .concat();
    assert_eq!(w.as_bytes(), &expected[..]);
    // And back.
    let back = Attrs::decode(&mask, w.as_bytes()).unwrap();
    assert_eq!(back, a);
}

#[test]
fn attrs_encode_only_what_was_requested() {
    let a = sample_attrs();
    let request =
        Bitmap4::from_bits(&[fattr4::SIZE, fattr4::MODE, fattr4::ACL, fattr4::SPACE_USED]);
    let mut w = XdrWriter::new();
    a.encode_fattr4(Some(&request), &mut w);
    // bitmap<2> {size, mode}, attr_vals<12>: size (8 bytes), mode (4).
    assert_eq!(
        w.as_bytes(),
        &words(&[2, 1 << 4, 1 << 1, 12, 0, 13, 0o644])[..]
    );
    let fattr: Fattr4 = duet_protocols::nfs::xdr::decode_all(w.as_bytes()).unwrap();
    let back = Attrs::from_fattr4(&fattr).unwrap();
    assert_eq!(
        (back.size, back.mode, back.owner),
        (Some(13), Some(0o644), None)
    );
}

#[test]
fn attrs_reject_what_they_cannot_parse() {
    // fs_locations_info (67) is not parsed: ATTRNOTSUPP, not a misparse.
    let mask = Bitmap4::from_bits(&[fattr4::SIZE, fattr4::FS_LOCATIONS_INFO]);
    let vals = words(&[0, 1, 0, 0]);
    let err = Attrs::decode(&mask, &vals).unwrap_err();
    assert_eq!(err, XdrError::AttrNotSupported(67));
    assert_eq!(err.nfs4_status(), Nfsstat4::ATTRNOTSUPP);
    // An attribute number past the last defined one.
    let mask = Bitmap4::from_bits(&[200]);
    assert_eq!(
        Attrs::decode(&mask, &[]),
        Err(XdrError::AttrNotSupported(200))
    );
    // Values shorter than the bitmap says: BADXDR.
    let mask = Bitmap4::from_bits(&[fattr4::SIZE]);
    assert_eq!(
        Attrs::decode(&mask, &words(&[0]))
            .unwrap_err()
            .nfs4_status(),
        Nfsstat4::BADXDR
    );
    // And longer.
    assert!(matches!(
        Attrs::decode(&mask, &words(&[0, 1, 2])),
        Err(XdrError::TrailingBytes(4))
    ));
    // SETATTR time set to server time / client time.
    let mask = Bitmap4::from_bits(&[fattr4::TIME_ACCESS_SET, fattr4::TIME_MODIFY_SET]);
    let vals = words(&[0, 1, 0, 5, 6]);
    let a = Attrs::decode(&mask, &vals).unwrap();
    assert_eq!(a.time_access_set, Some(SetTime4::ServerTime));
    assert_eq!(
        a.time_modify_set,
        Some(SetTime4::ClientTime(NfsTime4 {
            seconds: 5,
            nseconds: 6
        }))
    );
    // Every parsed number is ascending and unique (encode order = bitmap order).
    assert!(Attrs::PARSED.windows(2).all(|p| p[0] < p[1]));
    assert!(Attrs::parsed_bitmap().is_set(fattr4::SUPPATTR_EXCLCREAT));
    assert!(!Attrs::parsed_bitmap().is_set(fattr4::FS_LOCATIONS_INFO));
}

#[test]
fn bitmap_bounds() {
    let mut b = Bitmap4::new();
    assert!(b.set(255));
    assert!(!b.set(256));
    assert_eq!(b.words().len(), 8);
    b.clear(255);
    assert!(b.is_empty());
    // Nine words on the wire are over the bound.
    let nine = words(&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert!(duet_protocols::nfs::xdr::decode_all::<Bitmap4>(&nine).is_err());
    // Encoding keeps the declared word count, zero words included.
    let three = words(&[3, 0, 0, 0]);
    let b: Bitmap4 = duet_protocols::nfs::xdr::decode_all(&three).unwrap();
    assert_eq!(encode_to_vec(&b), three);
}

#[test]
fn compound_res_status_and_failed_results() {
    // A reply with a NOTSUPP slot decodes as Failed and re-encodes.
    let bytes = words(&[10004, 0, 2, 53, 10052, 50, 10004]);
    let res = Compound4Res::decode(&mut XdrReader::new(&bytes), 8).unwrap();
    assert_eq!(
        res.results[0],
        ResOp4::Sequence(Nfs4Res::Err(Nfsstat4::BADSESSION))
    );
    assert_eq!(
        res.results[1],
        ResOp4::Failed {
            opnum: 50,
            status: Nfsstat4::NOTSUPP
        }
    );
    let mut w = XdrWriter::new();
    res.encode(&mut w);
    assert_eq!(w.as_bytes(), &bytes[..]);
    // A result count above the bound is refused.
    assert!(Compound4Res::decode(&mut XdrReader::new(&bytes), 1).is_err());
    // An OK result for an op without a decoder cannot be parsed.
    let bytes = words(&[0, 0, 1, 50, 0]);
    assert!(Compound4Res::decode(&mut XdrReader::new(&bytes), 8).is_err());
}
