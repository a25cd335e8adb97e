//! NFSv3 (RFC 1813), MOUNT v3 (RFC 1813 appendix I) and portmap/rpcbind
//! (RFC 1833): no captures exist, so each message is laid out by hand
//! from the RFC's XDR and checked both ways.

use std::net::SocketAddr;

use duet_protocols::nfs::mount::*;
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::portmap::*;
use duet_protocols::nfs::xdr::{
    decode_all, encode_to_vec, LinkedList, List, Name, Opaque, XdrError, XdrReader,
};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// opaque<> / string<>: length, bytes, zero padding.
fn opaque(b: &[u8]) -> Vec<u8> {
    let mut out = words(&[b.len() as u32]);
    out.extend_from_slice(b);
    out.resize(out.len() + (4 - b.len() % 4) % 4, 0);
    out
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

const FH: &[u8] = &[0xfa; 12];

/// Decodes `bytes` as procedure `proc_`'s arguments, checks it equals
/// `want` and re-encodes to the same bytes.
fn check_args(proc_: u32, bytes: &[u8], want: Nfs3Args<'_>) {
    let got = Nfs3Args::decode(proc_, &mut XdrReader::new(bytes)).unwrap();
    assert_eq!(got, want);
    assert_eq!(got.proc_(), proc_);
    assert_eq!(encode_to_vec(&got), bytes);
}

fn check_results(proc_: u32, bytes: &[u8], want: Nfs3Results<'_>) {
    let mut r = XdrReader::new(bytes);
    let got = Nfs3Results::decode(proc_, &mut r).unwrap();
    assert!(r.is_empty());
    assert_eq!(got, want);
    assert_eq!(encode_to_vec(&got), bytes);
}

fn fattr3_words() -> Vec<u8> {
    // type REG, mode 0644, nlink 1, uid, gid, size, used, rdev, fsid,
    // fileid, atime, mtime, ctime.
    words(&[
        1, 0o644, 1, 1000, 100, 0, 4096, 0, 8192, 0, 7, 0, 0, 0, 42, 10, 1, 11, 2, 12, 3,
    ])
}

fn fattr3() -> Fattr3 {
    Fattr3 {
        type_: Ftype3::Reg,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 4096,
        used: 8192,
        rdev: SpecData3 {
            specdata1: 0,
            specdata2: 7,
        },
        fsid: 0,
        fileid: 42,
        atime: NfsTime3 {
            seconds: 10,
            nseconds: 1,
        },
        mtime: NfsTime3 {
            seconds: 11,
            nseconds: 2,
        },
        ctime: NfsTime3 {
            seconds: 12,
            nseconds: 3,
        },
    }
}

#[test]
fn getattr_and_lookup() {
    check_args(
        proc3::GETATTR,
        &opaque(FH),
        Nfs3Args::GetAttr(GetAttr3Args { object: Opaque(FH) }),
    );
    let res = cat(&[&words(&[0]), &fattr3_words()]);
    check_results(
        proc3::GETATTR,
        &res,
        Nfs3Results::GetAttr(Nfs3Res::Ok(fattr3())),
    );
    check_results(
        proc3::GETATTR,
        &words(&[70]),
        Nfs3Results::GetAttr(Nfs3Res::Fail(Nfsstat3::STALE, ())),
    );

    let args = cat(&[&opaque(FH), &opaque(b"file.txt")]);
    check_args(
        proc3::LOOKUP,
        &args,
        Nfs3Args::Lookup(Lookup3Args {
            what: DirOpArgs3 {
                dir: Opaque(FH),
                name: Name(b"file.txt"),
            },
        }),
    );
    // resok: object, obj_attributes (present), dir_attributes (absent).
    let res = cat(&[
        &words(&[0]),
        &opaque(b"child-fh"),
        &words(&[1]),
        &fattr3_words(),
        &words(&[0]),
    ]);
    check_results(
        proc3::LOOKUP,
        &res,
        Nfs3Results::Lookup(Nfs3Res::Ok(Lookup3ResOk {
            object: Opaque(b"child-fh"),
            obj_attributes: Some(fattr3()),
            dir_attributes: None,
        })),
    );
    // resfail: NOENT with dir_attributes absent.
    check_results(
        proc3::LOOKUP,
        &words(&[2, 0]),
        Nfs3Results::Lookup(Nfs3Res::Fail(Nfsstat3::NOENT, None)),
    );
}

#[test]
fn setattr_with_guard_and_times() {
    // sattr3: mode set 0600, uid/gid unset, size set 0, atime server time,
    // mtime client time 5.6; guard ctime 9.0.
    let args = cat(&[
        &opaque(FH),
        &words(&[1, 0o600, 0, 0, 1, 0, 0, 1, 2, 5, 6]),
        &words(&[1, 9, 0]),
    ]);
    let want = SetAttr3Args {
        object: Opaque(FH),
        new_attributes: Sattr3 {
            mode: Some(0o600),
            uid: None,
            gid: None,
            size: Some(0),
            atime: SetTime::SetToServerTime,
            mtime: SetTime::SetToClientTime(NfsTime3 {
                seconds: 5,
                nseconds: 6,
            }),
        },
        guard: Some(NfsTime3 {
            seconds: 9,
            nseconds: 0,
        }),
    };
    check_args(proc3::SETATTR, &args, Nfs3Args::SetAttr(want));
    // wcc_data with pre-op (size, mtime, ctime) and no post-op.
    let res = words(&[0, 1, 0, 100, 1, 2, 3, 4, 0]);
    let wcc = WccData {
        before: Some(WccAttr {
            size: 100,
            mtime: NfsTime3 {
                seconds: 1,
                nseconds: 2,
            },
            ctime: NfsTime3 {
                seconds: 3,
                nseconds: 4,
            },
        }),
        after: None,
    };
    check_results(proc3::SETATTR, &res, Nfs3Results::SetAttr(Nfs3Res::Ok(wcc)));
    // time_how 3 is not a value.
    let bad = cat(&[&opaque(FH), &words(&[0, 0, 0, 0, 3])]);
    assert!(matches!(
        Nfs3Args::decode(proc3::SETATTR, &mut XdrReader::new(&bad)),
        Err(Nfs3ArgsError::Garbage(XdrError::BadDiscriminant {
            value: 3,
            ..
        }))
    ));
}

#[test]
fn read_and_write_borrow_payloads() {
    check_args(
        proc3::READ,
        &cat(&[&opaque(FH), &words(&[0, 4096, 512])]),
        Nfs3Args::Read(Read3Args {
            file: Opaque(FH),
            offset: 4096,
            count: 512,
        }),
    );
    let res = cat(&[&words(&[0, 0, 5, 1]), &opaque(b"hello")]);
    check_results(
        proc3::READ,
        &res,
        Nfs3Results::Read(Nfs3Res::Ok(Read3ResOk {
            file_attributes: None,
            count: 5,
            eof: true,
            data: Opaque(b"hello"),
        })),
    );

    // WRITE offset 2^32, count 3, FILE_SYNC, data "abc" (1 pad byte).
    let args = cat(&[&opaque(FH), &words(&[1, 0, 3, 2]), &opaque(b"abc")]);
    let got = Nfs3Args::decode(proc3::WRITE, &mut XdrReader::new(&args)).unwrap();
    let Nfs3Args::Write(w) = &got else { panic!() };
    assert_eq!(
        (w.offset, w.count, w.stable),
        (1 << 32, 3, StableHow::FileSync)
    );
    assert_eq!(w.data.0, b"abc");
    assert!(
        args.as_ptr_range().contains(&w.data.0.as_ptr()),
        "payload is borrowed"
    );
    assert_eq!(encode_to_vec(&got), args);
    let res = cat(&[&words(&[0, 0, 0, 3, 2]), &[7u8; 8]]);
    check_results(
        proc3::WRITE,
        &res,
        Nfs3Results::Write(Nfs3Res::Ok(Write3ResOk {
            file_wcc: WccData::default(),
            count: 3,
            committed: StableHow::FileSync,
            verf: [7; 8],
        })),
    );
    // stable_how 3 is garbage.
    let bad = cat(&[&opaque(FH), &words(&[0, 0, 3, 3]), &opaque(b"abc")]);
    assert!(Nfs3Args::decode(proc3::WRITE, &mut XdrReader::new(&bad)).is_err());
}

#[test]
fn create_mkdir_symlink_mknod() {
    let dir = |n: &'static [u8]| DirOpArgs3 {
        dir: Opaque(FH),
        name: Name(n),
    };
    // CREATE GUARDED with mode 0644.
    let args = cat(&[
        &opaque(FH),
        &opaque(b"new"),
        &words(&[1, 1, 0o644, 0, 0, 0, 0, 0]),
    ]);
    let attrs = Sattr3 {
        mode: Some(0o644),
        ..Sattr3::default()
    };
    check_args(
        proc3::CREATE,
        &args,
        Nfs3Args::Create(Create3Args {
            where_: dir(b"new"),
            how: CreateHow3::Guarded(attrs),
        }),
    );
    // CREATE EXCLUSIVE with a verifier.
    let args = cat(&[
        &opaque(FH),
        &opaque(b"new"),
        &words(&[2]),
        &[1, 2, 3, 4, 5, 6, 7, 8],
    ]);
    check_args(
        proc3::CREATE,
        &args,
        Nfs3Args::Create(Create3Args {
            where_: dir(b"new"),
            how: CreateHow3::Exclusive([1, 2, 3, 4, 5, 6, 7, 8]),
        }),
    );
    // CREATE3resok: obj fh present, attributes absent, dir_wcc empty.
    let res = cat(&[&words(&[0, 1]), &opaque(b"fh2"), &words(&[0, 0, 0])]);
    check_results(
        proc3::CREATE,
        &res,
        Nfs3Results::Create(Nfs3Res::Ok(Create3ResOk {
            obj: Some(Opaque(b"fh2")),
            obj_attributes: None,
            dir_wcc: WccData::default(),
        })),
    );
    // MKDIR.
    let args = cat(&[
        &opaque(FH),
        &opaque(b"d"),
        &words(&[1, 0o755, 0, 0, 0, 0, 0]),
    ]);
    check_args(
        proc3::MKDIR,
        &args,
        Nfs3Args::Mkdir(Mkdir3Args {
            where_: dir(b"d"),
            attributes: Sattr3 {
                mode: Some(0o755),
                ..Sattr3::default()
            },
        }),
    );
    // SYMLINK "l" -> "../target".
    let args = cat(&[
        &opaque(FH),
        &opaque(b"l"),
        &words(&[0, 0, 0, 0, 0, 0]),
        &opaque(b"../target"),
    ]);
    check_args(
        proc3::SYMLINK,
        &args,
        Nfs3Args::Symlink(Symlink3Args {
            where_: dir(b"l"),
            symlink: SymlinkData3 {
                symlink_attributes: Sattr3::default(),
                symlink_data: Opaque(b"../target"),
            },
        }),
    );
    // MKNOD CHR 1:3 and FIFO, and a REG (void arm, BADTYPE for the server).
    let args = cat(&[
        &opaque(FH),
        &opaque(b"c"),
        &words(&[4, 0, 0, 0, 0, 0, 0, 1, 3]),
    ]);
    check_args(
        proc3::MKNOD,
        &args,
        Nfs3Args::Mknod(Mknod3Args {
            where_: dir(b"c"),
            what: MknodData3::Chr(DeviceData3 {
                dev_attributes: Sattr3::default(),
                spec: SpecData3 {
                    specdata1: 1,
                    specdata2: 3,
                },
            }),
        }),
    );
    let args = cat(&[&opaque(FH), &opaque(b"p"), &words(&[7, 0, 0, 0, 0, 0, 0])]);
    check_args(
        proc3::MKNOD,
        &args,
        Nfs3Args::Mknod(Mknod3Args {
            where_: dir(b"p"),
            what: MknodData3::Fifo(Sattr3::default()),
        }),
    );
    let args = cat(&[&opaque(FH), &opaque(b"r"), &words(&[1])]);
    check_args(
        proc3::MKNOD,
        &args,
        Nfs3Args::Mknod(Mknod3Args {
            where_: dir(b"r"),
            what: MknodData3::Other(Ftype3::Reg),
        }),
    );
}

#[test]
fn remove_rename_link() {
    let d = |n: &'static [u8]| DirOpArgs3 {
        dir: Opaque(FH),
        name: Name(n),
    };
    check_args(
        proc3::REMOVE,
        &cat(&[&opaque(FH), &opaque(b"x")]),
        Nfs3Args::Remove(Remove3Args { object: d(b"x") }),
    );
    check_args(
        proc3::RMDIR,
        &cat(&[&opaque(FH), &opaque(b"x")]),
        Nfs3Args::Rmdir(Remove3Args { object: d(b"x") }),
    );
    check_results(
        proc3::REMOVE,
        &words(&[66, 0, 0]),
        Nfs3Results::Remove(Nfs3Res::Fail(Nfsstat3::NOTEMPTY, WccData::default())),
    );
    check_args(
        proc3::RENAME,
        &cat(&[&opaque(FH), &opaque(b"a"), &opaque(FH), &opaque(b"b")]),
        Nfs3Args::Rename(Rename3Args {
            from: d(b"a"),
            to: d(b"b"),
        }),
    );
    let w = Rename3Wcc {
        fromdir_wcc: WccData::default(),
        todir_wcc: WccData::default(),
    };
    check_results(
        proc3::RENAME,
        &words(&[0, 0, 0, 0, 0]),
        Nfs3Results::Rename(Nfs3Res::Ok(w)),
    );
    check_args(
        proc3::LINK,
        &cat(&[&opaque(FH), &opaque(FH), &opaque(b"hard")]),
        Nfs3Args::Link(Link3Args {
            file: Opaque(FH),
            link: d(b"hard"),
        }),
    );
    let l = Link3Wcc {
        file_attributes: None,
        linkdir_wcc: WccData::default(),
    };
    check_results(
        proc3::LINK,
        &words(&[31, 0, 0, 0]),
        Nfs3Results::Link(Nfs3Res::Fail(Nfsstat3::MLINK, l)),
    );
}

#[test]
fn readdir_and_readdirplus() {
    check_args(
        proc3::READDIR,
        &cat(&[&opaque(FH), &words(&[0, 0]), &[0; 8], &words(&[4096])]),
        Nfs3Args::ReadDir(ReadDir3Args {
            dir: Opaque(FH),
            cookie: 0,
            cookieverf: [0; 8],
            count: 4096,
        }),
    );
    // Two entries chained with TRUE/FALSE, then eof.
    let res = cat(&[
        &words(&[0, 0]),
        &[9; 8],
        &words(&[1, 0, 11]),
        &opaque(b"."),
        &words(&[0, 1, 1, 0, 12]),
        &opaque(b"file"),
        &words(&[0, 2, 0, 1]),
    ]);
    check_results(
        proc3::READDIR,
        &res,
        Nfs3Results::ReadDir(Nfs3Res::Ok(ReadDir3ResOk {
            dir_attributes: None,
            cookieverf: [9; 8],
            reply: DirList3 {
                entries: LinkedList(vec![
                    Entry3 {
                        fileid: 11,
                        name: Name(b"."),
                        cookie: 1,
                    },
                    Entry3 {
                        fileid: 12,
                        name: Name(b"file"),
                        cookie: 2,
                    },
                ]),
                eof: true,
            },
        })),
    );
    check_args(
        proc3::READDIRPLUS,
        &cat(&[&opaque(FH), &words(&[0, 5]), &[1; 8], &words(&[1024, 8192])]),
        Nfs3Args::ReadDirPlus(ReadDirPlus3Args {
            dir: Opaque(FH),
            cookie: 5,
            cookieverf: [1; 8],
            dircount: 1024,
            maxcount: 8192,
        }),
    );
    let res = cat(&[
        &words(&[0, 0]),
        &[2; 8],
        &words(&[1, 0, 42]),
        &opaque(b"f"),
        &words(&[0, 3, 1]),
        &fattr3_words(),
        &words(&[1]),
        &opaque(b"fh-f"),
        &words(&[0, 0]),
    ]);
    check_results(
        proc3::READDIRPLUS,
        &res,
        Nfs3Results::ReadDirPlus(Nfs3Res::Ok(ReadDirPlus3ResOk {
            dir_attributes: None,
            cookieverf: [2; 8],
            reply: DirListPlus3 {
                entries: LinkedList(vec![EntryPlus3 {
                    fileid: 42,
                    name: Name(b"f"),
                    cookie: 3,
                    name_attributes: Some(fattr3()),
                    name_handle: Some(Opaque(b"fh-f")),
                }]),
                eof: false,
            },
        })),
    );
}

#[test]
fn fsstat_fsinfo_pathconf_commit_access_readlink() {
    check_args(
        proc3::FSSTAT,
        &opaque(FH),
        Nfs3Args::FsStat(FsRootArgs3 { fsroot: Opaque(FH) }),
    );
    let res = words(&[0, 0, 0, 100, 0, 50, 0, 40, 0, 10, 0, 5, 0, 4, 0]);
    check_results(
        proc3::FSSTAT,
        &res,
        Nfs3Results::FsStat(Nfs3Res::Ok(FsStat3ResOk {
            obj_attributes: None,
            tbytes: 100,
            fbytes: 50,
            abytes: 40,
            tfiles: 10,
            ffiles: 5,
            afiles: 4,
            invarsec: 0,
        })),
    );
    let res = words(&[
        0,
        0,
        1 << 20,
        1 << 20,
        4096,
        1 << 20,
        1 << 20,
        4096,
        8192,
        u32::MAX,
        u32::MAX,
        0,
        1,
        0x1b,
    ]);
    check_results(
        proc3::FSINFO,
        &res,
        Nfs3Results::FsInfo(Nfs3Res::Ok(FsInfo3ResOk {
            obj_attributes: None,
            rtmax: 1 << 20,
            rtpref: 1 << 20,
            rtmult: 4096,
            wtmax: 1 << 20,
            wtpref: 1 << 20,
            wtmult: 4096,
            dtpref: 8192,
            maxfilesize: u64::MAX,
            time_delta: NfsTime3 {
                seconds: 0,
                nseconds: 1,
            },
            properties: fsf3::LINK | fsf3::SYMLINK | fsf3::HOMOGENEOUS | fsf3::CANSETTIME,
        })),
    );
    let res = words(&[0, 0, 32000, 255, 1, 1, 0, 1]);
    check_results(
        proc3::PATHCONF,
        &res,
        Nfs3Results::PathConf(Nfs3Res::Ok(PathConf3ResOk {
            obj_attributes: None,
            linkmax: 32000,
            name_max: 255,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        })),
    );
    check_args(
        proc3::COMMIT,
        &cat(&[&opaque(FH), &words(&[0, 0, 0])]),
        Nfs3Args::Commit(Commit3Args {
            file: Opaque(FH),
            offset: 0,
            count: 0,
        }),
    );
    check_results(
        proc3::COMMIT,
        &cat(&[&words(&[0, 0, 0]), &[3; 8]]),
        Nfs3Results::Commit(Nfs3Res::Ok(Commit3ResOk {
            file_wcc: WccData::default(),
            verf: [3; 8],
        })),
    );
    check_args(
        proc3::ACCESS,
        &cat(&[&opaque(FH), &words(&[0x3f])]),
        Nfs3Args::Access(Access3Args {
            object: Opaque(FH),
            access: 0x3f,
        }),
    );
    check_results(
        proc3::ACCESS,
        &words(&[0, 0, access3::READ | access3::LOOKUP]),
        Nfs3Results::Access(Nfs3Res::Ok(Access3ResOk {
            obj_attributes: None,
            access: 3,
        })),
    );
    check_args(
        proc3::READLINK,
        &opaque(FH),
        Nfs3Args::ReadLink(ReadLink3Args {
            symlink: Opaque(FH),
        }),
    );
    check_results(
        proc3::READLINK,
        &cat(&[&words(&[0, 0]), &opaque(b"/t")]),
        Nfs3Results::ReadLink(Nfs3Res::Ok(ReadLink3ResOk {
            symlink_attributes: None,
            data: Opaque(b"/t"),
        })),
    );
    check_args(proc3::NULL, &[], Nfs3Args::Null);
}

#[test]
fn v3_errors_map_to_the_right_answer() {
    // Unknown procedure: PROC_UNAVAIL.
    assert_eq!(
        Nfs3Args::decode(22, &mut XdrReader::new(&[])),
        Err(Nfs3ArgsError::ProcUnavail(22))
    );
    // A file handle over 64 bytes: garbage.
    let bad = opaque(&[0; 65]);
    assert!(matches!(
        Nfs3Args::decode(proc3::GETATTR, &mut XdrReader::new(&bad)),
        Err(Nfs3ArgsError::Garbage(XdrError::TooLong {
            len: 65,
            max: 64,
            ..
        }))
    ));
    // A 256-byte name: NFS3ERR_NAMETOOLONG, not garbage.
    let long = cat(&[&opaque(FH), &opaque(&[b'n'; 256])]);
    let Err(Nfs3ArgsError::Garbage(e)) =
        Nfs3Args::decode(proc3::LOOKUP, &mut XdrReader::new(&long))
    else {
        panic!()
    };
    assert_eq!(e.nfs3_status(), Nfsstat3::NAMETOOLONG);
    assert!(!e.rpc_garbage_args(), "the procedure answers it, not the RPC layer");
    // Trailing bytes after the arguments.
    let extra = cat(&[&opaque(FH), &words(&[0])]);
    assert_eq!(
        Nfs3Args::decode(proc3::GETATTR, &mut XdrReader::new(&extra)),
        Err(Nfs3ArgsError::Garbage(XdrError::TrailingBytes(4)))
    );
    assert_eq!(XdrError::BadBool(2).nfs3_status(), Nfsstat3::INVAL);
    assert_eq!(format!("{:?}", Nfsstat3(10008)), "Nfsstat3::JUKEBOX");
}

#[test]
fn mount_v3() {
    // MNT "/export" -> OK, fh, flavours [AUTH_SYS].
    let buf = opaque(b"/export");
    let dir: DirPath = decode_all(&buf).unwrap();
    assert_eq!(dir.0, b"/export");
    let res = cat(&[&words(&[0]), &opaque(FH), &words(&[1, 1])]);
    let got: MountRes3 = decode_all(&res).unwrap();
    assert_eq!(
        got,
        MountRes3::Ok(MountRes3Ok {
            fhandle: Opaque(FH),
            auth_flavors: List(vec![1])
        })
    );
    assert_eq!(encode_to_vec(&got), res);
    let buf = words(&[13]);
    let got: MountRes3 = decode_all(&buf).unwrap();
    assert_eq!(got, MountRes3::Err(MountStat3::ERR_ACCES));
    // DUMP: one mount.
    let res = cat(&[
        &words(&[1]),
        &opaque(b"client"),
        &opaque(b"/export"),
        &words(&[0]),
    ]);
    let got: MountList = decode_all(&res).unwrap();
    assert_eq!(
        got.0,
        vec![MountBody {
            hostname: Opaque(b"client"),
            directory: Opaque(b"/export")
        }]
    );
    assert_eq!(encode_to_vec(&got), res);
    // EXPORT: "/a" for groups "g1","g2"; "/b" for everyone.
    let res = cat(&[
        &words(&[1]),
        &opaque(b"/a"),
        &words(&[1]),
        &opaque(b"g1"),
        &words(&[1]),
        &opaque(b"g2"),
        &words(&[0, 1]),
        &opaque(b"/b"),
        &words(&[0, 0]),
    ]);
    let got: Exports = decode_all(&res).unwrap();
    assert_eq!(got.0.len(), 2);
    assert_eq!(got.0[0].groups.0, vec![Opaque(b"g1"), Opaque(b"g2")]);
    assert!(got.0[1].groups.0.is_empty());
    assert_eq!(encode_to_vec(&got), res);
    // A dirpath over MNTPATHLEN.
    assert!(decode_all::<DirPath>(&opaque(&[b'/'; 1025])).is_err());
}

#[test]
fn portmap_v2() {
    // GETPORT(MOUNT v3 TCP) -> 20048.
    let m = Mapping {
        prog: 100005,
        vers: 3,
        prot: IPPROTO_TCP,
        port: 0,
    };
    let bytes = words(&[100005, 3, 6, 0]);
    assert_eq!(encode_to_vec(&m), bytes);
    assert_eq!(decode_all::<Mapping>(&bytes).unwrap(), m);
    // DUMP: pmaplist.
    let list = words(&[1, 100000, 2, 6, 111, 1, 100003, 3, 6, 2049, 0]);
    let got: PmapList = decode_all(&list).unwrap();
    assert_eq!(
        got.0[1],
        Mapping {
            prog: 100003,
            vers: 3,
            prot: 6,
            port: 2049
        }
    );
    assert_eq!(encode_to_vec(&got), list);
    // CALLIT args and result.
    let ca = cat(&[&words(&[100003, 3, 0]), &opaque(b"")]);
    let got: CallArgs = decode_all(&ca).unwrap();
    assert_eq!(
        (got.prog, got.vers, got.proc_, got.args.0),
        (100003, 3, 0, &b""[..])
    );
    let cr = cat(&[&words(&[2049]), &opaque(b"res")]);
    assert_eq!(encode_to_vec(&decode_all::<CallResult>(&cr).unwrap()), cr);
}

#[test]
fn rpcbind_v3_v4() {
    let rpcb = cat(&[
        &words(&[100003, 4]),
        &opaque(b"tcp"),
        &opaque(b"0.0.0.0.8.1"),
        &opaque(b"superuser"),
    ]);
    let got: Rpcb = decode_all(&rpcb).unwrap();
    assert_eq!(got.netid.0, b"tcp");
    assert_eq!(
        parse_uaddr(std::str::from_utf8(got.addr.0).unwrap()),
        Some("0.0.0.0:2049".parse().unwrap())
    );
    assert_eq!(encode_to_vec(&got), rpcb);
    let list = cat(&[&words(&[1]), &rpcb, &words(&[0])]);
    let got: RpcbList = decode_all(&list).unwrap();
    assert_eq!(got.0.len(), 1);
    assert_eq!(encode_to_vec(&got), list);
    let addr = cat(&[&opaque(b"127.0.0.1.8.1")]);
    assert_eq!(
        encode_to_vec(&decode_all::<GetAddrRes>(&addr).unwrap()),
        addr
    );
}

#[test]
fn universal_addresses() {
    let v4: SocketAddr = "192.168.1.10:2049".parse().unwrap();
    assert_eq!(format_uaddr(&v4), "192.168.1.10.8.1");
    assert_eq!(parse_uaddr("192.168.1.10.8.1"), Some(v4));
    let v6: SocketAddr = "[fe80::1]:111".parse().unwrap();
    assert_eq!(format_uaddr(&v6), "fe80::1.0.111");
    assert_eq!(parse_uaddr("fe80::1.0.111"), Some(v6));
    assert_eq!(parse_uaddr("::.0.111"), Some("[::]:111".parse().unwrap()));
    for bad in [
        "",
        "1.2.3.4",
        "1.2.3.4.256.1",
        "1.2.3.4.8.x",
        "a.b.c.d.8.1",
        "1.2.3.4.5.8.1",
    ] {
        assert_eq!(parse_uaddr(bad), None, "{bad}");
    }
}
