//! Raw protocol clients for the robustness tests (limits, access, disk
//! full, crash with clients): an SMB 2.1 client built from duet's own codec
//! (NTLMv2 via SPNEGO, HMAC-SHA256 signing) and an ONC RPC client for
//! MOUNT, NFSv3 and NFSv4.1, both over plain TCP from a chosen source
//! address (127.0.0.x: every test "machine" is its own loopback address).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::os::fd::FromRawFd;
use std::time::Duration;

use duet_protocols::auth::{ntlm, spnego};
use duet_protocols::nfs::mount::{mountproc3, MountRes3, MountStat3, MOUNT_VERSION_3};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::rpc::*;
use duet_protocols::nfs::xdr::{List, Name, Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};
use duet_protocols::smb2::close::CloseRequest;
use duet_protocols::smb2::compound::Compound;
use duet_protocols::smb2::create::{create_disposition, create_options, CreateRequest};
use duet_protocols::smb2::cursor::Utf16;
use duet_protocols::smb2::header::{Command as Cmd, Header, HeaderFlags, HeaderIds};
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::negotiate::{dialect, NegotiateRequest};
use duet_protocols::smb2::query_directory::QueryDirectoryRequest;
use duet_protocols::smb2::read::ReadRequest;
use duet_protocols::smb2::server::crypto::{derive_keys, SigningKey};
use duet_protocols::smb2::session_setup::SessionSetupRequest;
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::tree_connect::TreeConnectRequest;
use duet_protocols::smb2::write::WriteRequest;
use duet_protocols::smb2::FileId;

/// A TCP connection to 127.0.0.1:`port` from `src` (any 127.0.0.0/8
/// address works on Linux loopback).
pub fn connect_from(src: Ipv4Addr, port: u16) -> std::io::Result<TcpStream> {
    // SAFETY: plain socket/bind/connect on a fresh descriptor we own; the
    // sockaddr structs are locals of the right size.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let addr = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(ip.octets()),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let local = addr(src, 0);
        if libc::bind(fd, &local as *const _ as *const libc::sockaddr, len) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        let remote = addr(Ipv4Addr::LOCALHOST, port);
        if libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        let s = TcpStream::from_raw_fd(fd);
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.set_nodelay(true)?;
        Ok(s)
    }
}

/// Whether the server closed `s` (read returns 0 or a reset) within 20 s,
/// dropping whatever it still sends.
pub fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

// ---------------------------------------------------------------- SMB

pub struct Smb {
    pub tcp: TcpStream,
    pub next_id: u64,
    pub session_id: u64,
    pub tree_id: u32,
    pub signing: Option<SigningKey>,
    /// Credits asked for in each request.
    pub credit_request: u16,
    /// Credits granted by the replies so far (sum).
    pub granted: u64,
    /// CreditCharge of the next message (MS-SMB2 3.2.4.1.5: one per 64 KiB).
    pub charge: u16,
    /// The dialect negotiated (its signing key derivation).
    pub dialect: u16,
}

/// One decoded reply: its header and whole message bytes.
pub struct Reply {
    pub header: Header,
    pub bytes: Vec<u8>,
}

impl Reply {
    pub fn status(&self) -> NtStatus {
        self.header.status
    }
}

pub fn open_req(name: &str, disposition: u32, options: u32, access: u32) -> CreateRequest<'_> {
    CreateRequest {
        security_flags: 0,
        requested_oplock_level: 0,
        impersonation_level: 2,
        smb_create_flags: 0,
        desired_access: access,
        file_attributes: 0,
        share_access: 7,
        create_disposition: disposition,
        create_options: options,
        name: Utf16::Str(name),
        create_contexts: Vec::new(),
    }
}

/// GENERIC_READ | GENERIC_WRITE as FILE_* bits plus DELETE.
pub const RW: u32 = 0x0012_019f | 0x0001_0000;
pub const R: u32 = 0x0012_0089;

impl Smb {
    pub fn connect(port: u16) -> Smb {
        Smb::connect_from(Ipv4Addr::LOCALHOST, port)
    }

    pub fn connect_from(src: Ipv4Addr, port: u16) -> Smb {
        let tcp = connect_from(src, port).expect("connect");
        Smb {
            tcp,
            next_id: 0,
            session_id: 0,
            tree_id: 0,
            signing: None,
            credit_request: 32,
            granted: 0,
            charge: 1,
            dialect: dialect::SMB2_1,
        }
    }

    /// Negotiate, log on, connect to `share`.
    pub fn logged_on(port: u16, user: &str, pw: &str, share: &str) -> Smb {
        let mut c = Smb::connect(port);
        c.negotiate();
        assert_eq!(c.login(user, pw), NtStatus::SUCCESS, "logon of {user}");
        assert_eq!(c.tree(share), NtStatus::SUCCESS, "tree connect to {share}");
        c
    }

    pub fn message(&mut self, req: Request<'_>, command: Cmd, sign: bool) -> Vec<u8> {
        let mut body = vec![0u8; 64];
        req.encode(&mut body);
        let body = body.split_off(64);
        self.raw(command, &body, sign)
    }

    pub fn raw(&mut self, command: Cmd, body: &[u8], sign: bool) -> Vec<u8> {
        let signed = sign && self.signing.is_some();
        let h = Header {
            credit_charge: self.charge,
            status: NtStatus::SUCCESS,
            command,
            credit: self.credit_request,
            flags: HeaderFlags(if signed { HeaderFlags::SIGNED } else { 0 }),
            next_command: 0,
            message_id: self.next_id,
            ids: HeaderIds::Sync {
                process_id: 0xfeff,
                tree_id: self.tree_id,
            },
            session_id: self.session_id,
            signature: [0; 16],
        };
        self.next_id += u64::from(self.charge.max(1));
        self.charge = 1;
        let mut out = Vec::new();
        h.encode(&mut out);
        out.extend_from_slice(body);
        if signed {
            self.signing.as_ref().unwrap().sign_in_place(&mut out);
        }
        out
    }

    pub fn send(&mut self, msg: &[u8]) -> std::io::Result<()> {
        let mut f = (msg.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(msg);
        self.tcp.write_all(&f)
    }

    /// The next final reply, or None when the server closed the connection.
    pub fn recv(&mut self) -> Option<Reply> {
        loop {
            let mut len = [0u8; 4];
            self.tcp.read_exact(&mut len).ok()?;
            let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
            self.tcp.read_exact(&mut buf).ok()?;
            let m = Compound::new(&buf).next()?.ok()?;
            self.granted += u64::from(m.header.credit);
            if m.header.status == NtStatus::PENDING {
                continue;
            }
            return Some(Reply {
                header: m.header,
                bytes: m.bytes.to_vec(),
            });
        }
    }

    pub fn try_call(&mut self, req: Request<'_>, command: Cmd) -> Option<Reply> {
        let m = self.message(req, command, true);
        self.send(&m).ok()?;
        self.recv()
    }

    pub fn call(&mut self, req: Request<'_>, command: Cmd) -> Reply {
        self.try_call(req, command)
            .expect("a reply (the server closed the connection)")
    }

    /// SMB2 CANCEL of the async request `async_id` (MS-SMB2 2.2.30,
    /// 3.2.4.24): no reply comes for it.
    pub fn cancel(&mut self, message_id: u64, async_id: u64) {
        let h = Header {
            credit_charge: 0,
            status: NtStatus::SUCCESS,
            command: Cmd::CANCEL,
            credit: 0,
            flags: HeaderFlags(HeaderFlags::ASYNC_COMMAND),
            next_command: 0,
            message_id,
            ids: HeaderIds::Async { async_id },
            session_id: self.session_id,
            signature: [0; 16],
        };
        let mut out = Vec::new();
        h.encode(&mut out);
        out.extend_from_slice(&[4, 0, 0, 0]);
        self.send(&out).unwrap();
    }

    pub fn negotiate(&mut self) {
        self.negotiate_as(dialect::SMB2_1, [0x33; 16]);
    }

    /// NEGOTIATE of one dialect (2.1 or 3.0) as client `client_guid`.
    pub fn negotiate_as(&mut self, d: u16, client_guid: [u8; 16]) {
        let req = NegotiateRequest {
            security_mode: 1,
            capabilities: if d >= dialect::SMB3_0 { 0x2 } else { 0 },
            client_guid,
            client_start_time: 0,
            dialects: vec![d],
            negotiate_contexts: Vec::new(),
        };
        let r = self.call(Request::Negotiate(req), Cmd::NEGOTIATE);
        assert_eq!(r.status(), NtStatus::SUCCESS);
        self.dialect = d;
    }

    /// NTLMv2 through SPNEGO; the final status.
    pub fn login(&mut self, user: &str, password: &str) -> NtStatus {
        let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
        let tok = spnego::client_init(&neg);
        let r = self.call(Request::SessionSetup(setup(&tok)), Cmd::SESSION_SETUP);
        assert_eq!(r.status(), NtStatus::MORE_PROCESSING_REQUIRED);
        self.session_id = r.header.session_id;
        let Ok(Response::SessionSetup(ss)) = Response::decode(&r.header, &r.bytes) else {
            panic!("session setup reply decodes");
        };
        let chal = spnego::parse_server_response(ss.security_buffer)
            .unwrap()
            .token
            .unwrap()
            .to_vec();
        let (auth, key) = ntlm::client_authenticate(
            &neg,
            &chal,
            user,
            "WORKGROUP",
            &ntlm::nt_hash(password),
            [0x42; 8],
            [0x24; 16],
            0,
        )
        .unwrap();
        let tok = spnego::client_resp(&auth, None);
        let r = self.call(Request::SessionSetup(setup(&tok)), Cmd::SESSION_SETUP);
        if r.status() == NtStatus::SUCCESS {
            self.signing = Some(derive_keys(self.dialect, &key, None, &[0; 64], true).signing);
        }
        r.status()
    }

    pub fn tree(&mut self, share: &str) -> NtStatus {
        let path = format!("\\\\127.0.0.1\\{share}");
        let tc = TreeConnectRequest {
            flags: 0,
            path: Utf16::Str(&path),
        };
        let r = self.call(Request::TreeConnect(tc), Cmd::TREE_CONNECT);
        if r.status() == NtStatus::SUCCESS {
            self.tree_id = match r.header.ids {
                HeaderIds::Sync { tree_id, .. } => tree_id,
                _ => panic!("sync reply"),
            };
        }
        r.status()
    }

    pub fn create_req(&mut self, req: CreateRequest<'_>) -> Result<FileId, NtStatus> {
        let r = self.call(Request::Create(req), Cmd::CREATE);
        if r.status() != NtStatus::SUCCESS {
            return Err(r.status());
        }
        let Ok(Response::Create(cr)) = Response::decode(&r.header, &r.bytes) else {
            panic!("create reply")
        };
        Ok(cr.file_id)
    }

    /// Opens or creates a file for reading and writing.
    pub fn create(&mut self, name: &str) -> Result<FileId, NtStatus> {
        self.create_req(open_req(
            name,
            create_disposition::OPEN_IF,
            create_options::NON_DIRECTORY_FILE,
            RW,
        ))
    }

    pub fn open_read(&mut self, name: &str) -> Result<FileId, NtStatus> {
        self.create_req(open_req(
            name,
            create_disposition::OPEN,
            create_options::NON_DIRECTORY_FILE,
            R,
        ))
    }

    pub fn open_dir(&mut self, name: &str) -> Result<FileId, NtStatus> {
        self.create_req(open_req(
            name,
            create_disposition::OPEN,
            create_options::DIRECTORY_FILE,
            R,
        ))
    }

    pub fn write(&mut self, fid: FileId, offset: u64, data: &[u8], through: bool) -> NtStatus {
        let w = WriteRequest {
            offset,
            file_id: fid,
            channel: 0,
            remaining_bytes: 0,
            flags: if through {
                WriteRequest::WRITE_THROUGH
            } else {
                0
            },
            write_channel_info: &[],
            data,
        };
        self.charge = data.len().div_ceil(65536).max(1) as u16;
        self.call(Request::Write(w), Cmd::WRITE).status()
    }

    pub fn read(&mut self, fid: FileId, offset: u64, len: u32) -> Result<Vec<u8>, NtStatus> {
        let rr = ReadRequest {
            padding: 0,
            flags: 0,
            length: len,
            offset,
            file_id: fid,
            minimum_count: 0,
            channel: 0,
            remaining_bytes: 0,
            read_channel_info: &[],
        };
        self.charge = (len as usize).div_ceil(65536).max(1) as u16;
        let r = self.call(Request::Read(rr), Cmd::READ);
        if r.status() != NtStatus::SUCCESS {
            return Err(r.status());
        }
        let Ok(Response::Read(rd)) = Response::decode(&r.header, &r.bytes) else {
            panic!("read reply")
        };
        Ok(rd.data.to_vec())
    }

    /// Reads a whole file of `len` bytes in 64 KiB pieces.
    pub fn read_all(&mut self, fid: FileId, len: usize) -> Result<Vec<u8>, NtStatus> {
        let mut out = Vec::new();
        while out.len() < len {
            let want = (len - out.len()).min(64 << 10) as u32;
            match self.read(fid, out.len() as u64, want) {
                Ok(d) if d.is_empty() => break,
                Ok(d) => out.extend_from_slice(&d),
                Err(NtStatus::END_OF_FILE) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    pub fn close(&mut self, fid: FileId) -> NtStatus {
        self.call(
            Request::Close(CloseRequest {
                flags: 0,
                file_id: fid,
            }),
            Cmd::CLOSE,
        )
        .status()
    }

    /// Deletes a file: open with DELETE_ON_CLOSE, close.
    pub fn delete(&mut self, name: &str) -> NtStatus {
        let req = open_req(
            name,
            create_disposition::OPEN,
            create_options::NON_DIRECTORY_FILE | create_options::DELETE_ON_CLOSE,
            0x0001_0000 | 0x80,
        );
        match self.create_req(req) {
            Ok(f) => self.close(f),
            Err(e) => e,
        }
    }

    /// QUERY_DIRECTORY (FileNamesInformation, 0x0C) with `out_len`: the
    /// status and the length of the output buffer returned.
    pub fn query_dir(&mut self, fid: FileId, out_len: u32, restart: bool) -> (NtStatus, usize) {
        let q = QueryDirectoryRequest {
            file_information_class: 0x0C,
            flags: if restart { 0x01 } else { 0 },
            file_index: 0,
            file_id: fid,
            file_name: Utf16::Str("*"),
            output_buffer_length: out_len,
        };
        let r = self.call(Request::QueryDirectory(q), Cmd::QUERY_DIRECTORY);
        let n = match Response::decode(&r.header, &r.bytes) {
            Ok(Response::QueryDirectory(q)) => q.output_buffer.len(),
            _ => 0,
        };
        (r.status(), n)
    }
}

fn setup(t: &[u8]) -> SessionSetupRequest<'_> {
    SessionSetupRequest {
        flags: 0,
        security_mode: 1,
        capabilities: 0,
        channel: 0,
        previous_session_id: 0,
        security_buffer: t,
    }
}

// ---------------------------------------------------------------- NFS

pub struct Nfs {
    pub s: TcpStream,
    pub xid: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Nfs {
    pub fn connect(port: u16) -> Nfs {
        Nfs::connect_from(Ipv4Addr::LOCALHOST, port)
    }

    pub fn connect_from(src: Ipv4Addr, port: u16) -> Nfs {
        Nfs {
            s: connect_from(src, port).expect("connect"),
            xid: 0x1000,
            uid: 0,
            gid: 0,
        }
    }

    pub fn as_user(mut self, uid: u32, gid: u32) -> Nfs {
        self.uid = uid;
        self.gid = gid;
        self
    }

    pub fn call_record(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        self.xid += 1;
        let cred = AuthSysParms {
            stamp: 0,
            machine_name: Opaque(b"robust"),
            uid: self.uid,
            gid: self.gid,
            gids: vec![],
        };
        let mut cw = XdrWriter::new();
        cred.encode(&mut cw);
        let cred = cw.into_inner();
        let call = CallBody {
            xid: self.xid,
            rpcvers: 2,
            prog,
            vers,
            proc_,
            cred: OpaqueAuth {
                flavor: AUTH_SYS,
                body: &cred,
            },
            verf: OpaqueAuth::NONE,
        };
        let mut w = XdrWriter::new();
        call.encode(&mut w);
        w.put_raw(args);
        w.into_inner()
    }

    pub fn send_record(&mut self, rec: &[u8]) -> std::io::Result<()> {
        let mut out = Vec::new();
        write_record(rec, &mut out);
        self.s.write_all(&out)
    }

    pub fn read_reply(&mut self) -> Option<Vec<u8>> {
        let mut rec = Vec::new();
        loop {
            let mut h = [0u8; 4];
            self.s.read_exact(&mut h).ok()?;
            let h = u32::from_be_bytes(h);
            let mut frag = vec![0u8; (h & 0x7fff_ffff) as usize];
            self.s.read_exact(&mut frag).ok()?;
            rec.extend_from_slice(&frag);
            if h & 0x8000_0000 != 0 {
                return Some(rec);
            }
        }
    }

    pub fn try_call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Option<Vec<u8>> {
        let rec = self.call_record(prog, vers, proc_, args);
        self.send_record(&rec).ok()?;
        let reply = self.read_reply()?;
        assert_eq!(
            u32::from_be_bytes(reply[..4].try_into().unwrap()),
            self.xid,
            "xid"
        );
        Some(reply)
    }

    pub fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        self.try_call(prog, vers, proc_, args)
            .expect("the server closed the connection")
    }

    pub fn null(&mut self) -> Option<AcceptedReplyData> {
        let rep = self.try_call(PROGRAM_NFS, 3, 0, &[])?;
        Some(accept_data(&rep))
    }

    pub fn mount(&mut self, path: &str) -> Result<Vec<u8>, MountStat3> {
        let mut w = XdrWriter::new();
        w.put_string(path.as_bytes());
        let rep = self.call(
            PROGRAM_MOUNT,
            MOUNT_VERSION_3,
            mountproc3::MNT,
            &w.into_inner(),
        );
        let mut r = success(&rep);
        match MountRes3::decode(&mut r).unwrap() {
            MountRes3::Ok(ok) => Ok(ok.fhandle.0.to_vec()),
            MountRes3::Err(e) => Err(e),
        }
    }

    pub fn v3(&mut self, args: &Nfs3Args<'_>) -> Vec<u8> {
        let mut w = XdrWriter::new();
        args.encode(&mut w);
        self.call(PROGRAM_NFS, 3, args.proc_(), &w.into_inner())
    }

    /// NFSv3 CREATE (UNCHECKED, mode 0644): the new handle.
    pub fn create3(&mut self, dir: &[u8], name: &str) -> Result<Vec<u8>, Nfsstat3> {
        let sattr = Sattr3 {
            mode: Some(0o644),
            ..Default::default()
        };
        let rep = self.v3(&Nfs3Args::Create(Create3Args {
            where_: DirOpArgs3 {
                dir: Opaque(dir),
                name: Name(name.as_bytes()),
            },
            how: CreateHow3::Unchecked(sattr),
        }));
        match results3(proc3::CREATE, &rep) {
            Nfs3Results::Create(Nfs3Res::Ok(ok)) => Ok(ok.obj.expect("a handle").0.to_vec()),
            Nfs3Results::Create(Nfs3Res::Fail(s, _)) => Err(s),
            other => panic!("{other:?}"),
        }
    }

    pub fn lookup3(&mut self, dir: &[u8], name: &[u8]) -> Result<Vec<u8>, Nfsstat3> {
        let rep = self.v3(&Nfs3Args::Lookup(Lookup3Args {
            what: DirOpArgs3 {
                dir: Opaque(dir),
                name: Name(name),
            },
        }));
        match results3(proc3::LOOKUP, &rep) {
            Nfs3Results::Lookup(Nfs3Res::Ok(ok)) => Ok(ok.object.0.to_vec()),
            Nfs3Results::Lookup(Nfs3Res::Fail(s, _)) => Err(s),
            other => panic!("{other:?}"),
        }
    }

    /// NFSv3 WRITE with FILE_SYNC: the count written.
    pub fn write3(&mut self, fh: &[u8], offset: u64, data: &[u8]) -> Result<u32, Nfsstat3> {
        let rep = self.v3(&Nfs3Args::Write(Write3Args {
            file: Opaque(fh),
            offset,
            count: data.len() as u32,
            stable: StableHow::FileSync,
            data: Opaque(data),
        }));
        match results3(proc3::WRITE, &rep) {
            Nfs3Results::Write(Nfs3Res::Ok(ok)) => {
                assert_eq!(
                    ok.committed,
                    StableHow::FileSync,
                    "FILE_SYNC asked, FILE_SYNC promised"
                );
                Ok(ok.count)
            }
            Nfs3Results::Write(Nfs3Res::Fail(s, _)) => Err(s),
            other => panic!("{other:?}"),
        }
    }

    pub fn read3(
        &mut self,
        fh: &[u8],
        offset: u64,
        count: u32,
    ) -> Result<(Vec<u8>, bool), Nfsstat3> {
        let rep = self.v3(&Nfs3Args::Read(Read3Args {
            file: Opaque(fh),
            offset,
            count,
        }));
        match results3(proc3::READ, &rep) {
            Nfs3Results::Read(Nfs3Res::Ok(ok)) => Ok((ok.data.0.to_vec(), ok.eof)),
            Nfs3Results::Read(Nfs3Res::Fail(s, _)) => Err(s),
            other => panic!("{other:?}"),
        }
    }

    pub fn read3_all(&mut self, fh: &[u8]) -> Result<Vec<u8>, Nfsstat3> {
        let mut out = Vec::new();
        loop {
            let (d, eof) = self.read3(fh, out.len() as u64, 256 << 10)?;
            out.extend_from_slice(&d);
            if eof || d.is_empty() {
                return Ok(out);
            }
        }
    }

    pub fn remove3(&mut self, dir: &[u8], name: &str) -> Nfsstat3 {
        let rep = self.v3(&Nfs3Args::Remove(Remove3Args {
            object: DirOpArgs3 {
                dir: Opaque(dir),
                name: Name(name.as_bytes()),
            },
        }));
        match results3(proc3::REMOVE, &rep) {
            Nfs3Results::Remove(Nfs3Res::Ok(_)) => Nfsstat3::OK,
            Nfs3Results::Remove(Nfs3Res::Fail(s, _)) => s,
            other => panic!("{other:?}"),
        }
    }

    pub fn v4(&mut self, ops: Vec<ArgOp4<'_>>) -> Option<Vec<u8>> {
        self.v4_minor(1, ops)
    }

    /// A COMPOUND of NFSv4.`minorversion` (2 for COPY, DEALLOCATE).
    pub fn v4_minor(&mut self, minorversion: u32, ops: Vec<ArgOp4<'_>>) -> Option<Vec<u8>> {
        let args = Compound4Args {
            tag: Opaque(b"robust"),
            minorversion,
            ops,
            stop: None,
        };
        let mut w = XdrWriter::new();
        args.encode(&mut w);
        self.try_call(PROGRAM_NFS, 4, NFSPROC4_COMPOUND, &w.into_inner())
    }
}

pub fn header(reply: &[u8]) -> ReplyHeader<'_> {
    ReplyHeader::decode(&mut XdrReader::new(reply)).unwrap()
}

pub fn accept_data(reply: &[u8]) -> AcceptedReplyData {
    match header(reply).body {
        ReplyBody::Accepted { data, .. } => data,
        other => panic!("a denied reply: {other:?}"),
    }
}

pub fn success(reply: &[u8]) -> XdrReader<'_> {
    let mut r = XdrReader::new(reply);
    let h = ReplyHeader::decode(&mut r).unwrap();
    assert!(
        matches!(
            h.body,
            ReplyBody::Accepted {
                data: AcceptedReplyData::Success,
                ..
            }
        ),
        "{h:?}"
    );
    r
}

pub fn results3(proc_: u32, reply: &[u8]) -> Nfs3Results<'_> {
    let mut r = success(reply);
    Nfs3Results::decode(proc_, &mut r).unwrap()
}

pub fn res4(reply: &[u8]) -> Compound4Res<'_> {
    let mut r = success(reply);
    Compound4Res::decode(&mut r, 1 << 16).unwrap()
}

pub struct Sess {
    pub clientid: u64,
    pub id: SessionId4,
    pub seq: u32,
    pub max_ops: u32,
    pub max_req: u32,
}

impl Sess {
    pub fn sequence(&mut self) -> ArgOp4<'static> {
        self.seq += 1;
        ArgOp4::Sequence(Sequence4Args {
            sessionid: self.id,
            sequenceid: self.seq,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
        })
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

/// EXCHANGE_ID + CREATE_SESSION + RECLAIM_COMPLETE: a client with nothing
/// to reclaim, ready to OPEN and LOCK (RFC 8881 18.51.3).
pub fn session(c: &mut Nfs, owner: &[u8], maxreq: u32, maxops: u32) -> Sess {
    let mut s = session_to_reclaim(c, owner, maxreq, maxops);
    let seq = s.sequence();
    let rep = c.v4(vec![seq, ArgOp4::ReclaimComplete(ReclaimComplete4Args { one_fs: false })]).expect("RECLAIM_COMPLETE reply");
    let r = res4(&rep);
    assert_eq!(r.status, Nfsstat4::OK, "RECLAIM_COMPLETE: {r:?}");
    s
}

/// EXCHANGE_ID + CREATE_SESSION only: a client about to reclaim its state
/// after a server restart (it sends RECLAIM_COMPLETE itself afterwards).
pub fn session_to_reclaim(c: &mut Nfs, owner: &[u8], maxreq: u32, maxops: u32) -> Sess {
    let rep = c
        .v4(vec![ArgOp4::ExchangeId(ExchangeId4Args {
            clientowner: ClientOwner4 {
                verifier: [7; 8],
                ownerid: Opaque(owner),
            },
            flags: 0x101,
            state_protect: StateProtect4A::None,
            client_impl_id: List(vec![]),
        })])
        .expect("EXCHANGE_ID reply");
    let r = res4(&rep);
    let [ResOp4::ExchangeId(Nfs4Res::Ok(x))] = &r.results[..] else {
        panic!("{r:?}")
    };
    let (clientid, sequence) = (x.clientid, x.sequenceid);
    let rep = c
        .v4(vec![ArgOp4::CreateSession(CreateSession4Args {
            clientid,
            sequence,
            flags: 0,
            fore_chan_attrs: chan(maxreq, maxops),
            back_chan_attrs: chan(4096, 2),
            cb_program: PROGRAM_NFS4_CB,
            sec_parms: List(vec![CallbackSecParms4::None]),
        })])
        .expect("CREATE_SESSION reply");
    let r = res4(&rep);
    let [ResOp4::CreateSession(Nfs4Res::Ok(cs))] = &r.results[..] else {
        panic!("{r:?}")
    };
    let a = &cs.fore_chan_attrs;
    Sess {
        clientid,
        id: cs.sessionid,
        seq: 0,
        max_ops: a.maxoperations,
        max_req: a.maxrequestsize,
    }
}

/// NFSv4.1 OPEN (create if missing) of `name` in `dir` by `owner`.
pub fn open4(
    c: &mut Nfs,
    s: &mut Sess,
    dir: &[u8],
    owner: &[u8],
    name: &str,
) -> Result<Stateid4, Nfsstat4> {
    open4_fh(c, s, dir, owner, name).map(|(sid, _)| sid)
}

/// NFSv4.1 OPEN (create if missing, read and write, deny none) of `name`
/// in `dir` by `owner`, then GETFH: the open's stateid and file handle.
pub fn open4_fh(
    c: &mut Nfs,
    s: &mut Sess,
    dir: &[u8],
    owner: &[u8],
    name: &str,
) -> Result<(Stateid4, Vec<u8>), Nfsstat4> {
    let seq = s.sequence();
    let rep = c
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args {
                object: Opaque(dir),
            }),
            ArgOp4::Open(Open4Args {
                seqid: 0,
                share_access: share::ACCESS_BOTH,
                share_deny: share::DENY_NONE,
                owner: StateOwner4 {
                    clientid: s.clientid,
                    owner: Opaque(owner),
                },
                openhow: OpenFlag4::Create(CreateHow4::Unchecked(Fattr4 {
                    attrmask: Bitmap4::new(),
                    attr_vals: Opaque(b""),
                })),
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

pub fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

pub fn any_ip(a: Ipv4Addr) -> IpAddr {
    IpAddr::V4(a)
}
