//! Generated seeds for the stateful targets: SMB2 compounds for a
//! logged-on connection (smb2_conn, with the harness's logon and id
//! rewriting), NFSv4.1 sessions and NFSv3/MOUNT/portmap calls
//! (nfs4_session). The capture seeds come from `seeds/extract.py`.
//!
//!     cd fuzz && cargo run --example seeds
//!
//! Writes fuzz/corpus/<target>/gen-*.

use std::path::Path;

use duet_fuzz::{cb_mode, nfs_mode, smb_mode, CbSetup, NfsHarness, CB_CONN};
use duet_protocols::nfs::mount::{mountproc3, MountRes3, MOUNT_VERSION_3};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::nfs4::attrs::fattr4;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::rpc::{write_record, ReplyHeader, PROGRAM_MOUNT, PROGRAM_NFS, PROGRAM_PORTMAP};
use duet_protocols::nfs::xdr::{List, Name, Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};
use duet_protocols::smb2::close::CloseRequest;
use duet_protocols::smb2::compound::CompoundWriter;
use duet_protocols::smb2::create::{create_disposition, create_options, CreateRequest};
use duet_protocols::smb2::cursor::Utf16;
use duet_protocols::smb2::fscc;
use duet_protocols::smb2::ioctl::{ctl_code as fsctl, IoctlRequest, ValidateNegotiateInfoRequest};
use duet_protocols::smb2::lock::{LockElement, LockRequest};
use duet_protocols::smb2::message::Request;
use duet_protocols::smb2::query_directory::QueryDirectoryRequest;
use duet_protocols::smb2::query_info::{info_type, QueryInfoRequest};
use duet_protocols::smb2::read::ReadRequest;
use duet_protocols::smb2::set_info::SetInfoRequest;
use duet_protocols::smb2::write::WriteRequest;
use duet_protocols::smb2::{FileId, Header, HeaderFlags, HeaderIds, NtStatus};

fn put(target: &str, data: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    std::fs::write(dir.join(format!("gen-{h:016x}")), data).unwrap();
}

// ---- SMB2 ----------------------------------------------------------------

/// One compound: each request related to the previous one but the first.
fn compound(reqs: &[Request<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = CompoundWriter::new();
    for (i, r) in reqs.iter().enumerate() {
        w.begin(&mut out);
        let h = Header {
            credit_charge: 1,
            status: NtStatus::SUCCESS,
            command: r.command(),
            credit: 32,
            flags: HeaderFlags(if i > 0 { HeaderFlags::RELATED_OPERATIONS } else { 0 }),
            next_command: 0,
            message_id: 0,
            ids: HeaderIds::Sync { process_id: 0xfeff, tree_id: 0 },
            session_id: 0,
            signature: [0; 16],
        };
        h.encode(&mut out);
        r.encode(&mut out);
    }
    w.finish(&mut out, false);
    let mut framed = (out.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(&out);
    framed
}

fn create(name: &str, disposition: u32, options: u32) -> Request<'_> {
    Request::Create(CreateRequest {
        security_flags: 0,
        requested_oplock_level: 0,
        impersonation_level: 2,
        smb_create_flags: 0,
        desired_access: 0x0012_019f | 0x0001_0000,
        file_attributes: 0,
        share_access: 7,
        create_disposition: disposition,
        create_options: options,
        name: Utf16::Str(name),
        create_contexts: Vec::new(),
    })
}

fn close() -> Request<'static> {
    Request::Close(CloseRequest { flags: CloseRequest::POSTQUERY_ATTRIB, file_id: FileId::RELATED })
}

fn smb_seeds() {
    let mode = smb_mode::SETUP_TREE | smb_mode::REWRITE_IDS;
    let basic = {
        let mut b = Vec::new();
        fscc::FileBasicInformation { last_write_time: 133_000_000_000_000_000, ..Default::default() }.encode(&mut b);
        b
    };
    let rename = {
        let mut b = Vec::new();
        fscc::FileRenameInformation { replace_if_exists: true, root_directory: 0, file_name: Utf16::Str("d\\b.txt") }
            .encode(&mut b);
        b
    };
    let disp = {
        let mut b = Vec::new();
        fscc::FileDispositionInformation { delete_pending: true }.encode(&mut b);
        b
    };
    let vni = {
        let mut b = Vec::new();
        ValidateNegotiateInfoRequest { capabilities: 0x7f, guid: [0x11; 16], security_mode: 1, dialects: vec![0x311] }
            .encode(&mut b);
        b
    };
    let mut lock_storage = Vec::new();
    let lock = LockRequest::new(
        0,
        FileId::RELATED,
        &[LockElement { offset: 0, length: 10, flags: LockElement::EXCLUSIVE_LOCK | LockElement::FAIL_IMMEDIATELY }],
        &mut lock_storage,
    );
    let write = Request::Write(WriteRequest {
        offset: 0,
        file_id: FileId::RELATED,
        channel: 0,
        remaining_bytes: 0,
        flags: 0,
        write_channel_info: &[],
        data: b"hello, fuzzer",
    });
    let read = Request::Read(ReadRequest {
        padding: 0x50,
        flags: 0,
        length: 4096,
        offset: 0,
        file_id: FileId::RELATED,
        minimum_count: 0,
        channel: 0,
        remaining_bytes: 0,
        read_channel_info: &[],
    });
    let set_info = |class: u8, buffer| {
        Request::SetInfo(SetInfoRequest {
            info_type: info_type::FILE,
            file_info_class: class,
            buffer,
            additional_information: 0,
            file_id: FileId::RELATED,
        })
    };
    let query_info = |typ: u8, class: u8| {
        Request::QueryInfo(QueryInfoRequest {
            info_type: typ,
            file_info_class: class,
            output_buffer_length: 4096,
            input_buffer: &[],
            additional_information: 0,
            flags: 0,
            file_id: FileId::RELATED,
        })
    };
    let list = Request::QueryDirectory(QueryDirectoryRequest {
        file_information_class: fscc::info_class::ID_BOTH_DIRECTORY,
        flags: 0,
        file_index: 0,
        file_id: FileId::RELATED,
        file_name: Utf16::Str("*"),
        output_buffer_length: 65536,
    });
    let ioctl = |code: u32, input| {
        Request::Ioctl(IoctlRequest {
            ctl_code: code,
            file_id: FileId { persistent: u64::MAX, volatile: u64::MAX },
            input,
            max_input_response: 0,
            output: &[],
            max_output_response: 4096,
            flags: 1,
        })
    };
    use create_disposition as cd;
    let file = create_options::NON_DIRECTORY_FILE;
    let dir = create_options::DIRECTORY_FILE;
    let frames: Vec<Vec<u8>> = vec![
        compound(&[create("a.txt", cd::OVERWRITE_IF, file), write.clone(), set_info(fscc::info_class::BASIC, &basic), close()]),
        compound(&[create("a.txt", cd::OPEN, 0), read.clone(), close()]),
        compound(&[create("a.txt", cd::OPEN, 0), query_info(info_type::FILE, fscc::info_class::ALL), close()]),
        compound(&[create("", cd::OPEN, dir), query_info(info_type::FILESYSTEM, 7), close()]),
        compound(&[create("d", cd::CREATE, dir), close()]),
        compound(&[create("", cd::OPEN, dir), list.clone(), close()]),
        compound(&[create("a.txt", cd::OPEN, 0), set_info(fscc::info_class::RENAME, &rename), close()]),
        compound(&[create("d\\b.txt", cd::OPEN, 0), Request::Lock(lock.clone()), close()]),
        compound(&[create("d\\b.txt", cd::OPEN, 0), set_info(fscc::info_class::DISPOSITION, &disp), close()]),
        compound(&[ioctl(fsctl::FSCTL_VALIDATE_NEGOTIATE_INFO, &vni)]),
        compound(&[Request::Echo(Default::default())]),
    ];
    for f in &frames {
        put("smb2_conn", &[&[mode][..], f].concat());
    }
    // Whole sessions: everything in order, then signed, deferred, on 2.1.
    // Edge values: offsets and lengths at the top of their range, buffers
    // of nothing.
    let eof = {
        let mut b = Vec::new();
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        b
    };
    let mut edge_lock_storage = Vec::new();
    let edge_lock = LockRequest::new(
        0,
        FileId::RELATED,
        &[LockElement { offset: u64::MAX - 1, length: u64::MAX, flags: LockElement::SHARED_LOCK | LockElement::FAIL_IMMEDIATELY }],
        &mut edge_lock_storage,
    );
    let edges = [
        compound(&[
            create("e.txt", cd::OVERWRITE_IF, file),
            Request::Write(WriteRequest {
                offset: u64::MAX - 4,
                file_id: FileId::RELATED,
                channel: 0,
                remaining_bytes: 0,
                flags: 0,
                write_channel_info: &[],
                data: b"0123456789",
            }),
            close(),
        ]),
        compound(&[
            create("a.txt", cd::OPEN, 0),
            Request::Read(ReadRequest {
                padding: 0x50,
                flags: 0,
                length: u32::MAX,
                offset: u64::MAX,
                file_id: FileId::RELATED,
                minimum_count: u32::MAX,
                channel: 0,
                remaining_bytes: 0,
                read_channel_info: &[],
            }),
            close(),
        ]),
        compound(&[create("a.txt", cd::OPEN, 0), Request::Lock(edge_lock), close()]),
        compound(&[create("a.txt", cd::OPEN, 0), set_info(fscc::info_class::END_OF_FILE, &eof), close()]),
        compound(&[
            create("", cd::OPEN, dir),
            Request::QueryDirectory(QueryDirectoryRequest {
                file_information_class: fscc::info_class::ID_BOTH_DIRECTORY,
                flags: 0,
                file_index: 0,
                file_id: FileId::RELATED,
                file_name: Utf16::Str("*"),
                output_buffer_length: 1,
            }),
            close(),
        ]),
        compound(&[create("a.txt", cd::OPEN, 0), Request::QueryInfo(QueryInfoRequest {
            info_type: info_type::FILE,
            file_info_class: fscc::info_class::ALL,
            output_buffer_length: 0,
            input_buffer: &[],
            additional_information: 0,
            flags: 0,
            file_id: FileId::RELATED,
        }), close()]),
    ];
    for f in &edges {
        put("smb2_conn", &[&[mode][..], &frames[0], f].concat());
    }
    // CHANGE_NOTIFY (MS-SMB2 3.3.5.19) goes async: the share root opened
    // alone (FileId 1: the connection's first open), a watch (interim
    // STATUS_PENDING), its CANCEL (the harness gives a CANCEL the
    // MessageId of the request before it), a second watch with
    // WATCH_TREE, a create in the directory, then CLOSE
    // (STATUS_NOTIFY_CLEANUP). The request alone in a compound after its
    // open is refused (INVALID_PARAMETER).
    let root_id = FileId { persistent: 1, volatile: 1 };
    let notify = |flags: u16, len: u32, file_id: FileId| {
        Request::ChangeNotify(duet_protocols::smb2::change_notify::ChangeNotifyRequest {
            flags,
            output_buffer_length: len,
            file_id,
            completion_filter: 0x17f,
        })
    };
    let cancel = || Request::Cancel(duet_protocols::smb2::cancel::CancelRequest);
    let notify_frames = [
        compound(&[create("", cd::OPEN, dir)]),
        compound(&[notify(0, 4096, root_id)]),
        compound(&[cancel()]),
        compound(&[notify(1, 64, root_id)]),
        compound(&[create("n.txt", cd::OVERWRITE_IF, file), close()]),
        compound(&[Request::Close(CloseRequest { flags: 0, file_id: root_id })]),
        compound(&[create("", cd::OPEN, dir), notify(1, 65536, FileId::RELATED), close()]),
    ]
    .concat();
    for m in [mode, mode | smb_mode::DEFER, mode | smb_mode::SIGN] {
        put("smb2_conn", &[&[m][..], &notify_frames].concat());
    }
    let all = frames.concat();
    for m in [mode, mode | smb_mode::SIGN, mode | smb_mode::DEFER, smb_mode::SETUP_TREE_21 | smb_mode::REWRITE_IDS | smb_mode::SIGN]
    {
        put("smb2_conn", &[&[m][..], &all].concat());
    }
    put("smb2_conn", &[&[mode | smb_mode::SIGN | smb_mode::ENCRYPT][..], &frames[0], &frames[1]].concat());
    for f in &frames {
        // The bare requests are seeds for the decoders too.
        put("smb2_decode", &f[4..]);
    }
}

// ---- NFS -----------------------------------------------------------------

struct Calls {
    h: NfsHarness,
    xid: u32,
    stream: Vec<u8>,
}

impl Calls {
    /// Sends a call through the harness (so later calls can use what it
    /// answered), appends it to the stream, returns the reply body.
    fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        self.xid += 1;
        let rec = self.h.call(self.xid, prog, vers, proc_, args);
        write_record(&rec, &mut self.stream);
        let mut rep = self.h.record(&rec);
        rep.pop().unwrap_or_default()
    }

    fn v4(&mut self, ops: Vec<ArgOp4<'_>>) -> Vec<u8> {
        let mut w = XdrWriter::new();
        Compound4Args { tag: Opaque(b""), minorversion: 1, ops, stop: None }.encode(&mut w);
        self.call(PROGRAM_NFS, 4, 1, &w.into_inner())
    }

    fn v3(&mut self, args: &Nfs3Args<'_>) -> Vec<u8> {
        let mut w = XdrWriter::new();
        args.encode(&mut w);
        self.call(PROGRAM_NFS, 3, args.proc_(), &w.into_inner())
    }
}

fn body(rep: &[u8]) -> XdrReader<'_> {
    let mut r = XdrReader::new(rep);
    ReplyHeader::decode(&mut r).expect("reply");
    r
}

fn nfs4_seeds() {
    // The harness's own session first (nfs_mode::SESSION), then compounds
    // that use it: its id is deterministic.
    let mut c = Calls { h: NfsHarness::new(), xid: 100, stream: Vec::new() };
    let (_, id) = c.h.session();
    let id = id.expect("session");
    let mut seq = 0;
    let mut sequence = || {
        seq += 1;
        ArgOp4::Sequence(Sequence4Args { sessionid: id, sequenceid: seq, slotid: 0, highest_slotid: 0, cachethis: true })
    };
    let lookup = ArgOp4::Lookup(Lookup4Args { objname: Name(b"share") });
    let mode = (Bitmap4::from_bits(&[fattr4::MODE]), 0o644u32.to_be_bytes());
    let ga = || {
        ArgOp4::GetAttr(GetAttr4Args {
            attr_request: Bitmap4::from_bits(&[fattr4::TYPE, fattr4::CHANGE, fattr4::SIZE, fattr4::FILEID, fattr4::MODE, fattr4::OWNER]),
        })
    };
    let owner = |o: &'static [u8]| StateOwner4 { clientid: 0, owner: Opaque(o) };
    let open = |name: &'static [u8], vals: &'static [u8], how_create: bool| {
        ArgOp4::Open(Open4Args {
            seqid: 0,
            share_access: share::ACCESS_BOTH,
            share_deny: share::DENY_NONE,
            owner: owner(b"open-owner"),
            openhow: if how_create {
                OpenFlag4::Create(CreateHow4::Unchecked(Fattr4 { attrmask: Bitmap4::from_bits(&[fattr4::MODE]), attr_vals: Opaque(vals) }))
            } else {
                OpenFlag4::NoCreate
            },
            claim: OpenClaim4::Null(Name(name)),
        })
    };
    let vals: &'static [u8] = Box::leak(Box::new(mode.1));
    c.v4(vec![sequence(), ArgOp4::PutRootFh(()), ga()]);
    c.v4(vec![
        sequence(),
        ArgOp4::PutRootFh(()),
        lookup.clone(),
        open(b"f.txt", vals, true),
        ArgOp4::GetFh(()),
        ArgOp4::Write(Write4Args { stateid: Stateid4::CURRENT, offset: 0, stable: StableHow4::Unstable, data: Opaque(b"fuzz data") }),
        ArgOp4::Close(Close4Args { seqid: 0, open_stateid: Stateid4::CURRENT }),
    ]);
    c.v4(vec![
        sequence(),
        ArgOp4::PutRootFh(()),
        lookup.clone(),
        open(b"f.txt", vals, false),
        ArgOp4::Read(Read4Args { stateid: Stateid4::CURRENT, offset: 0, count: 100 }),
        ArgOp4::Lock(Lock4Args {
            locktype: NfsLockType4::Write,
            reclaim: false,
            offset: 0,
            length: 10,
            locker: Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: Stateid4::CURRENT,
                lock_seqid: 0,
                lock_owner: owner(b"lock-owner"),
            }),
        }),
        ArgOp4::Close(Close4Args { seqid: 0, open_stateid: Stateid4::CURRENT }),
    ]);
    // An NFSv4 ACL set and read back (RFC 8881 6.2.1; issue 17): a deny
    // for uid 1000 by number, OWNER@, EVERYONE@, a group by name.
    let acl = {
        let aces = vec![
            NfsAce4 { type_: 1, flag: 0, access_mask: 0x1, who: Opaque(b"1000") },
            NfsAce4 { type_: 0, flag: 0, access_mask: 0x001f_01ff, who: Opaque(b"OWNER@") },
            NfsAce4 { type_: 0, flag: 0x40, access_mask: 0x0012_0089, who: Opaque(b"100@localdomain") },
            NfsAce4 { type_: 0, flag: 0x3, access_mask: 0x0012_0089, who: Opaque(b"EVERYONE@") },
        ];
        let a = duet_protocols::nfs::nfs4::attrs::Attrs { acl: Some(List(aces)), ..Default::default() };
        let mut w = XdrWriter::with_buffer(Vec::new());
        let mask = a.encode_vals(None, &mut w);
        (mask, &*Box::leak(w.into_inner().into_boxed_slice()))
    };
    c.v4(vec![
        sequence(),
        ArgOp4::PutRootFh(()),
        lookup.clone(),
        ArgOp4::Lookup(Lookup4Args { objname: Name(b"f.txt") }),
        ArgOp4::SetAttr(SetAttr4Args { stateid: Stateid4::ANONYMOUS, obj_attributes: Fattr4 { attrmask: acl.0, attr_vals: Opaque(acl.1) } }),
        ArgOp4::GetAttr(GetAttr4Args { attr_request: Bitmap4::from_bits(&[fattr4::ACL, fattr4::ACLSUPPORT, fattr4::MODE]) }),
    ]);
    c.v4(vec![
        sequence(),
        ArgOp4::PutRootFh(()),
        lookup.clone(),
        ArgOp4::Create(Create4Args { objtype: CreateType4::Other(NfsFtype4::Dir), objname: Name(b"dir"), createattrs: Fattr4 { attrmask: Bitmap4::from_bits(&[]), attr_vals: Opaque(b"") } }),
        ga(),
    ]);
    c.v4(vec![
        sequence(),
        ArgOp4::PutRootFh(()),
        lookup.clone(),
        ArgOp4::SaveFh(()),
        ArgOp4::Rename(Rename4Args { oldname: Name(b"f.txt"), newname: Name(b"g.txt") }),
    ]);
    c.v4(vec![
        sequence(),
        ArgOp4::PutRootFh(()),
        lookup.clone(),
        ArgOp4::ReadDir(ReadDir4Args { cookie: 0, cookieverf: [0; 8], dircount: 4096, maxcount: 8192, attr_request: Bitmap4::from_bits(&[fattr4::TYPE, fattr4::FILEID]) }),
    ]);
    c.v4(vec![sequence(), ArgOp4::PutRootFh(()), lookup.clone(), ArgOp4::Remove(Remove4Args { target: Name(b"g.txt") })]);
    // Edge values.
    c.v4(vec![
        sequence(),
        ArgOp4::PutRootFh(()),
        lookup.clone(),
        open(b"e.txt", vals, true),
        ArgOp4::Write(Write4Args { stateid: Stateid4::CURRENT, offset: u64::MAX - 3, stable: StableHow4::FileSync, data: Opaque(b"edge") }),
        ArgOp4::Read(Read4Args { stateid: Stateid4::CURRENT, offset: u64::MAX, count: u32::MAX }),
        ArgOp4::Lock(Lock4Args {
            locktype: NfsLockType4::Read,
            reclaim: false,
            offset: u64::MAX - 1,
            length: u64::MAX,
            locker: Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: Stateid4::CURRENT,
                lock_seqid: 0,
                lock_owner: owner(b"edge-owner"),
            }),
        }),
        ArgOp4::Close(Close4Args { seqid: 0, open_stateid: Stateid4::CURRENT }),
    ]);
    c.v4(vec![
        sequence(),
        ArgOp4::PutRootFh(()),
        lookup.clone(),
        ArgOp4::ReadDir(ReadDir4Args { cookie: u64::MAX, cookieverf: [0; 8], dircount: 0, maxcount: 0, attr_request: Bitmap4::from_bits(&[fattr4::TYPE]) }),
    ]);
    c.v4(vec![sequence(), ArgOp4::DestroySession(DestroySession4Args { sessionid: id })]);
    let session_stream = std::mem::take(&mut c.stream);
    put("nfs4_session", &[&[nfs_mode::SESSION][..], &session_stream].concat());
    put("nfs4_session", &[&[nfs_mode::SESSION | nfs_mode::DEFER][..], &session_stream].concat());
    put("nfs4_session", &[&[nfs_mode::SESSION | nfs_mode::SLOW_CLOCK][..], &session_stream].concat());
    // And the session setup itself, in the stream, without the harness's.
    let mut h = NfsHarness::new();
    let (records, _) = h.session();
    let mut setup = vec![0u8];
    for r in &records {
        write_record(r, &mut setup);
    }
    put("nfs4_session", &setup);
    put("rpc_xdr", &[&[5u8][..], &session_stream].concat());
    put("rpc_xdr", &setup);
}

fn nfs3_seeds() {
    let mut c = Calls { h: NfsHarness::new(), xid: 300, stream: Vec::new() };
    c.call(PROGRAM_PORTMAP, 2, 3, &{
        let mut w = XdrWriter::new();
        for v in [PROGRAM_NFS, 3, 6, 0] {
            w.put_u32(v);
        }
        w.into_inner()
    });
    c.call(PROGRAM_MOUNT, MOUNT_VERSION_3, mountproc3::EXPORT, &[]);
    let rep = c.call(PROGRAM_MOUNT, MOUNT_VERSION_3, mountproc3::MNT, &{
        let mut w = XdrWriter::new();
        w.put_string(b"/share");
        w.into_inner()
    });
    let root = match MountRes3::decode(&mut body(&rep)) {
        Ok(MountRes3::Ok(ok)) => ok.fhandle.0.to_vec(),
        other => panic!("MNT: {other:?}"),
    };
    let rep = c.v3(&Nfs3Args::Create(Create3Args {
        where_: DirOpArgs3 { dir: Opaque(&root), name: Name(b"a.txt") },
        how: CreateHow3::Unchecked(Sattr3 { mode: Some(0o644), ..Default::default() }),
    }));
    let file = match Nfs3Results::decode(proc3::CREATE, &mut body(&rep)) {
        Ok(Nfs3Results::Create(Nfs3Res::Ok(ok))) => ok.obj.map(|h| h.0.to_vec()).expect("handle"),
        other => panic!("CREATE: {other:?}"),
    };
    c.v3(&Nfs3Args::Write(Write3Args { file: Opaque(&file), offset: 0, count: 5, stable: StableHow::FileSync, data: Opaque(b"hello") }));
    c.v3(&Nfs3Args::Read(Read3Args { file: Opaque(&file), offset: 0, count: 100 }));
    c.v3(&Nfs3Args::GetAttr(GetAttr3Args { object: Opaque(&file) }));
    c.v3(&Nfs3Args::SetAttr(SetAttr3Args { object: Opaque(&file), new_attributes: Sattr3 { size: Some(2), ..Default::default() }, guard: None }));
    c.v3(&Nfs3Args::Lookup(Lookup3Args { what: DirOpArgs3 { dir: Opaque(&root), name: Name(b"a.txt") } }));
    c.v3(&Nfs3Args::Mkdir(Mkdir3Args { where_: DirOpArgs3 { dir: Opaque(&root), name: Name(b"d") }, attributes: Sattr3::default() }));
    c.v3(&Nfs3Args::Rename(Rename3Args {
        from: DirOpArgs3 { dir: Opaque(&root), name: Name(b"a.txt") },
        to: DirOpArgs3 { dir: Opaque(&root), name: Name(b"b.txt") },
    }));
    c.v3(&Nfs3Args::ReadDirPlus(ReadDirPlus3Args { dir: Opaque(&root), cookie: 0, cookieverf: [0; 8], dircount: 4096, maxcount: 8192 }));
    c.v3(&Nfs3Args::FsStat(FsStat3Args { fsroot: Opaque(&root) }));
    c.v3(&Nfs3Args::Write(Write3Args { file: Opaque(&file), offset: u64::MAX - 1, count: 5, stable: StableHow::FileSync, data: Opaque(b"hello") }));
    c.v3(&Nfs3Args::Read(Read3Args { file: Opaque(&file), offset: u64::MAX, count: u32::MAX }));
    c.v3(&Nfs3Args::SetAttr(SetAttr3Args { object: Opaque(&file), new_attributes: Sattr3 { size: Some(u64::MAX), ..Default::default() }, guard: None }));
    c.v3(&Nfs3Args::ReadDirPlus(ReadDirPlus3Args { dir: Opaque(&root), cookie: u64::MAX, cookieverf: [0; 8], dircount: 0, maxcount: 0 }));
    c.v3(&Nfs3Args::Remove(Remove3Args { object: DirOpArgs3 { dir: Opaque(&root), name: Name(b"b.txt") } }));
    put("nfs4_session", &[&[0u8][..], &c.stream].concat());
    put("nfs4_session", &[&[nfs_mode::DEFER][..], &c.stream].concat());
    put("rpc_xdr", &[&[9u8][..], &c.stream].concat());
}


// ---- nfs4_callback ---------------------------------------------------------

/// A client's REPLY to callback `xid`: accepted, CB_COMPOUND4res with
/// `status` and `nops` results of CB_SEQUENCE/CB_RECALL (RFC 8881 20.2,
/// 20.9), or an RPC-level answer when `accept` is not 0 (2 PROG_UNAVAIL,
/// 4 GARBAGE_ARGS).
fn cb_reply(xid: u32, accept: u32, status: u32, session: Option<([u8; 16], u32)>) -> Vec<u8> {
    let mut w = XdrWriter::new();
    if accept == 0 {
        ReplyHeader::success(xid).encode(&mut w);
        w.put_u32(status);
        w.put_string(b"");
        match session {
            Some((id, seq)) => {
                w.put_u32(2);
                w.put_u32(11); // OP_CB_SEQUENCE
                w.put_u32(0);
                w.put_raw(&id);
                for v in [seq, 0, 0, 0] {
                    w.put_u32(v);
                }
                w.put_u32(4); // OP_CB_RECALL
                w.put_u32(status);
            }
            None => w.put_u32(0),
        }
    } else {
        for v in [xid, 1, 0, 0, 0, accept] {
            w.put_u32(v);
        }
    }
    w.into_inner()
}

/// Records sent through a `CbSetup`'s harness on its current connection,
/// kept as the input stream.
struct CbCalls {
    s: CbSetup,
    stream: Vec<u8>,
    xid: u32,
}

impl CbCalls {
    fn raw(&mut self, rec: Vec<u8>) {
        write_record(&rec, &mut self.stream);
        self.s.h.record(&rec);
    }

    fn v4(&mut self, ops: Vec<ArgOp4<'_>>) {
        self.xid += 1;
        let mut w = XdrWriter::new();
        Compound4Args { tag: Opaque(b""), minorversion: 1, ops, stop: None }.encode(&mut w);
        let rec = self.s.h.call(self.xid, PROGRAM_NFS, 4, 1, &w.into_inner());
        self.raw(rec);
    }

    fn seq(&mut self) -> ArgOp4<'static> {
        self.s.holder_seq += 1;
        ArgOp4::Sequence(Sequence4Args {
            sessionid: self.s.holder,
            sequenceid: self.s.holder_seq,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
        })
    }

    /// The xid of the newest callback the server called.
    fn last_cb(&self) -> u32 {
        self.s.h.callbacks.last().expect("a callback").1
    }
}

fn cb_seeds() {
    let start = |mode: u8| {
        let s = CbSetup::new(mode).expect("setup");
        CbCalls { s, stream: Vec::new(), xid: 0x7000 }
    };
    let put_cb = |mode: u8, c: &CbCalls| put("nfs4_callback", &[&[mode][..], &c.stream].concat());
    for mode in [0, cb_mode::CB_NONE, cb_mode::DEFER] {
        // The right answer, then DELEGRETURN (what a Linux client does).
        let mut c = start(mode);
        c.s.h.conn = CB_CONN;
        let xid = c.last_cb();
        let id = c.s.holder;
        c.raw(cb_reply(xid, 0, 0, Some((id, 1))));
        let (seq, d) = (c.seq(), c.s.delegations[0]);
        c.v4(vec![
            seq,
            ArgOp4::PutRootFh(()),
            ArgOp4::Lookup(Lookup4Args { objname: Name(b"share") }),
            ArgOp4::Lookup(Lookup4Args { objname: Name(b"held-1") }),
            ArgOp4::DelegReturn(DelegReturn4Args { deleg_stateid: d }),
        ]);
        put_cb(mode, &c);
    }
    // Wrong answers: another xid, RPC errors, an error status, a short one.
    let mut c = start(0);
    let xid = c.last_cb();
    let id = c.s.holder;
    c.raw(cb_reply(xid ^ 0x55, 0, 0, Some((id, 1))));
    c.raw(cb_reply(xid, 2, 0, None));
    c.raw(cb_reply(xid, 4, 0, None));
    c.raw(cb_reply(xid, 0, 10008, None)); // NFS4ERR_DELAY
    c.raw(cb_reply(xid, 0, 10052, Some((id, 1)))); // NFS4ERR_BADSESSION
    c.raw(cb_reply(xid, 0, 0, Some((id, 1)))[..10].to_vec());
    put_cb(0, &c);
    put_cb(cb_mode::CB_NONE | cb_mode::DEFER, &c);
    put_cb(cb_mode::OTHER_CONN, &c);
    // Two recalls: the second goes once the first is answered.
    let mut c = start(cb_mode::TWO_RECALLS);
    let x1 = c.last_cb();
    c.raw(cb_reply(x1, 0, 0, Some((id, 1))));
    let x2 = c.last_cb();
    assert_ne!(x1, x2, "the queued recall went");
    c.raw(cb_reply(x2, 0, 0, Some((id, 2))));
    put_cb(cb_mode::TWO_RECALLS, &c);
    put_cb(cb_mode::TWO_RECALLS | cb_mode::DEFER, &c);
    // BACKCHANNEL_CTL, then the session destroyed with the recall out.
    let mut c = start(0);
    let seq = c.seq();
    c.v4(vec![
        seq,
        ArgOp4::BackchannelCtl(BackchannelCtl4Args { cb_program: 0x4000_0001, sec_parms: List(vec![CallbackSecParms4::None]) }),
    ]);
    let seq = c.seq();
    c.v4(vec![seq, ArgOp4::DestroySession(DestroySession4Args { sessionid: id })]);
    put_cb(0, &c);
    put_cb(cb_mode::TWO_RECALLS, &c);
    // On another connection: BIND_CONN_TO_SESSION for the back channel,
    // then the recall's answer there.
    let mut c = start(cb_mode::OTHER_CONN);
    c.s.h.conn = 40;
    c.v4(vec![ArgOp4::BindConnToSession(BindConnToSession4Args {
        sessid: id,
        dir: ChannelDirFromClient4::BackOrBoth,
        use_conn_in_rdma_mode: false,
    })]);
    let xid = c.last_cb();
    c.raw(cb_reply(xid, 0, 0, Some((id, 1))));
    put_cb(cb_mode::OTHER_CONN, &c);
}

fn main() {
    cb_seeds();
    smb_seeds();
    nfs4_seeds();
    nfs3_seeds();
}
