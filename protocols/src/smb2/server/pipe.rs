//! Named pipes on IPC$ (MS-SMB2 3.3.5.9 CREATE of a pipe, 3.3.5.12 READ,
//! 3.3.5.13 WRITE, 3.3.5.15.x FSCTL_PIPE_TRANSCEIVE / FSCTL_PIPE_PEEK,
//! 3.3.5.20 QUERY_INFO): the `srvsvc` and `lsarpc` pipes, whose bytes are
//! DCE/RPC PDUs for [`crate::dcerpc`]. A pipe open lives next to the file opens, in
//! `Connection::pipes`, under a volatile FileId of the same id space; no
//! pipe command touches the engine, so each is answered while planning.

use super::conn::Connection;
use super::plan::*;
use super::state::*;
use super::Directory;
use crate::dcerpc::lsarpc::Lsarpc;
use crate::dcerpc::srvsvc::{stype, ShareInfo, Srvsvc};
use crate::dcerpc::{Endpoint, Service};
use crate::smb2::close::{CloseRequest, CloseResponse};
use crate::smb2::create::{create_action, CreateRequest, CreateResponse};
use crate::smb2::fscc::info_class;
use crate::smb2::header::Header;
use crate::smb2::ioctl::{ctl_code, IoctlRequest, IoctlResponse};
use crate::smb2::message::{Request, Response};
use crate::smb2::query_directory::OutputBufferResponse;
use crate::smb2::query_info::{info_type, QueryInfoRequest};
use crate::smb2::read::{ReadRequest, ReadResponse};
use crate::smb2::set_info::{SetInfoRequest, SetInfoResponse};
use crate::smb2::status::NtStatus;
use crate::smb2::write::WriteResponse;
use crate::smb2::FileId;

/// STATUS_PIPE_EMPTY (MS-ERREF 2.3.1): a READ on a pipe with no message
/// waiting (duet's pipes answer at once instead of pending the READ).
const PIPE_EMPTY: NtStatus = NtStatus(0xC000_00D9);
/// FILE_ATTRIBUTE_NORMAL (MS-FSCC 2.6).
const ATTRIBUTE_NORMAL: u32 = 0x80;

/// The pipes duet serves (MS-SRVS 2.1: `\PIPE\srvsvc`; MS-LSAT 2.1:
/// `\PIPE\lsarpc`).
const PIPES: &[&str] = &["srvsvc", "lsarpc"];


/// The srvsvc view of the shares a [`Directory`] has, plus IPC$.
fn srvsvc(server_name: &str, dir: &dyn Directory) -> Srvsvc {
    let mut shares: Vec<ShareInfo> = dir
        .shares()
        .into_iter()
        .map(|s| ShareInfo {
            path: format!("C:\\{}", s.name),
            name: s.name,
            share_type: stype::DISKTREE,
            remark: String::new(),
        })
        .collect();
    shares.push(ShareInfo {
        name: "IPC$".into(),
        share_type: stype::IPC | stype::SPECIAL,
        remark: "IPC Service (duet)".into(),
        path: String::new(),
    });
    Srvsvc {
        server_name: server_name.to_string(),
        comment: "duet".into(),
        shares,
    }
}

impl Connection {
    /// The service that answers on pipe `id` (None: no such pipe).
    fn pipe_service(&self, id: u64, dir: &dyn Directory) -> Option<Box<dyn Service>> {
        let p = self.pipes.get(&id)?;
        Some(match p.kind {
            "lsarpc" => Box::new(Lsarpc {
                domain: self.cfg.server_name.to_uppercase(),
                workgroup: self.cfg.domain.to_uppercase(),
                map: dir.sid_map().map(|m| (*m).clone()).unwrap_or_default(),
                accounts: dir.users_by_uid(),
                caller_uid: self.sessions.get(&p.session_id).map(|s| s.cred.uid),
            }),
            _ => Box::new(srvsvc(&self.cfg.server_name, dir)),
        })
    }

    /// Plans `req` when it goes to a named pipe: a CREATE on an IPC$ tree,
    /// or a command whose FileId is a pipe open (or, related, the pipe the
    /// chain opened). None: not a pipe command.
    pub(super) fn pipe_dispatch(
        &mut self,
        chain: &mut Chain,
        hdr: &Header,
        req: &Request<'_>,
        related: bool,
        dir: &dyn Directory,
    ) -> Option<Plan> {
        if let Request::Create(c) = req {
            let ipc = self.tree_of(hdr).is_ok_and(|(_, t)| t.ipc);
            chain.pipe = None;
            if !ipc {
                return None;
            }
            let plan = self.pipe_create(hdr, c);
            match &plan {
                Ok((_, id)) => {
                    chain.pipe = Some(*id);
                    chain.file = None;
                    chain.error = None;
                }
                Err(s) => {
                    chain.file = None;
                    chain.error = Some(*s);
                }
            }
            return Some(plan.map_or_else(done, |(p, _)| p));
        }
        let file_id = match req {
            Request::Close(r) => r.file_id,
            Request::Flush(r) => r.file_id,
            Request::Read(r) => r.file_id,
            Request::Write(r) => r.file_id,
            Request::QueryInfo(r) => r.file_id,
            Request::SetInfo(r) => r.file_id,
            Request::Ioctl(r) => r.file_id,
            Request::Lock(r) => r.file_id,
            Request::QueryDirectory(r) => r.file_id,
            Request::ChangeNotify(r) => r.file_id,
            _ => return None,
        };
        let id = if file_id == FileId::RELATED {
            match (related, chain.pipe, chain.error) {
                (true, Some(id), None) => id,
                _ => return None,
            }
        } else {
            let p = self.pipes.get(&file_id.volatile)?;
            if file_id.persistent != file_id.volatile
                || p.session_id != hdr.session_id
                || Some(p.tree_id) != hdr.tree_id()
            {
                return None;
            }
            if related || (chain.file.is_none() && chain.pipe.is_none()) {
                chain.pipe = Some(file_id.volatile);
                chain.file = None;
            }
            file_id.volatile
        };
        if self.tree_of(hdr).is_err() {
            return None;
        }
        let fid = FileId {
            persistent: id,
            volatile: id,
        };
        Some(match req {
            Request::Close(r) => self.pipe_close(id, r),
            Request::Flush(_) => ok(Response::Flush(Default::default())),
            Request::Read(r) => self.pipe_read(id, r),
            Request::Write(w) => self.pipe_write(id, w.data, dir),
            Request::QueryInfo(q) => self.pipe_query_info(id, q),
            Request::SetInfo(s) => self.pipe_set_info(id, s),
            Request::Ioctl(io) => self.pipe_ioctl(id, fid, io, dir),
            _ => done(NtStatus::NOT_SUPPORTED),
        })
    }

    fn pipe_create(
        &mut self,
        hdr: &Header,
        c: &CreateRequest<'_>,
    ) -> Result<(Plan, u64), NtStatus> {
        let name = c.name.to_string_lossy();
        let name = name.trim_start_matches('\\');
        let Some(known) = PIPES.iter().find(|p| p.eq_ignore_ascii_case(name)) else {
            return Err(NtStatus::OBJECT_NAME_NOT_FOUND);
        };
        if self.opens.len() + self.pipes.len() >= self.cfg.max_opens {
            return Err(NtStatus::TOO_MANY_OPENED_FILES);
        }
        let tree_id = hdr.tree_id().unwrap_or(0);
        let id = self.new_file_id();
        self.pipes.insert(
            id,
            PipeOpen {
                session_id: hdr.session_id,
                tree_id,
                kind: known,
                endpoint: Endpoint::new(&format!("\\PIPE\\{known}"), 0x5300 + (id as u32 & 0xFFFF)),
                read_mode: 1,
                completion_mode: 0,
            },
        );
        let resp = CreateResponse {
            oplock_level: 0,
            flags: 0,
            create_action: create_action::OPENED,
            creation_time: 0,
            last_access_time: 0,
            last_write_time: 0,
            change_time: 0,
            allocation_size: 0,
            end_of_file: 0,
            file_attributes: ATTRIBUTE_NORMAL,
            file_id: FileId {
                persistent: id,
                volatile: id,
            },
            create_contexts: Vec::new(),
        };
        Ok((ok(Response::Create(resp)), id))
    }

    fn pipe_close(&mut self, id: u64, r: &CloseRequest) -> Plan {
        self.pipes.remove(&id);
        let post = r.flags & CloseRequest::POSTQUERY_ATTRIB != 0;
        ok(Response::Close(CloseResponse {
            flags: r.flags & CloseRequest::POSTQUERY_ATTRIB,
            creation_time: 0,
            last_access_time: 0,
            last_write_time: 0,
            change_time: 0,
            allocation_size: 0,
            end_of_file: 0,
            file_attributes: if post { ATTRIBUTE_NORMAL } else { 0 },
        }))
    }

    fn pipe_read(&mut self, id: u64, r: &ReadRequest<'_>) -> Plan {
        if r.length > self.cfg.max_read_size {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let Some(p) = self.pipes.get_mut(&id) else {
            return done(NtStatus::FILE_CLOSED);
        };
        match p.endpoint.read(r.length as usize) {
            Some((data, left)) => pipe_reply(
                left,
                Response::Read(ReadResponse {
                    data_remaining: 0,
                    flags: 0,
                    data: &data,
                }),
            ),
            None => done(PIPE_EMPTY),
        }
    }

    fn pipe_write(&mut self, id: u64, data: &[u8], dir: &dyn Directory) -> Plan {
        if data.len() > self.cfg.max_write_size as usize {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let Some(svc) = self.pipe_service(id, dir) else {
            return done(NtStatus::FILE_CLOSED);
        };
        let Some(p) = self.pipes.get_mut(&id) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if !p.endpoint.write(data, svc.as_ref()) {
            return done(NtStatus::INSUFFICIENT_RESOURCES);
        }
        ok(Response::Write(WriteResponse {
            count: data.len() as u32,
            remaining: 0,
        }))
    }

    fn pipe_ioctl(
        &mut self,
        id: u64,
        fid: FileId,
        io: &IoctlRequest<'_>,
        dir: &dyn Directory,
    ) -> Plan {
        if io.flags & IoctlRequest::IS_FSCTL == 0 {
            return done(NtStatus::NOT_SUPPORTED);
        }
        if io.max_output_response > self.cfg.max_transact_size
            || io.input.len() > self.cfg.max_transact_size as usize
        {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let Some(svc) = self.pipe_service(id, dir) else {
            return done(NtStatus::FILE_CLOSED);
        };
        let Some(p) = self.pipes.get_mut(&id) else {
            return done(NtStatus::FILE_CLOSED);
        };
        let max = io.max_output_response as usize;
        let (output, left) = match io.ctl_code {
            ctl_code::FSCTL_PIPE_TRANSCEIVE => {
                if !p.endpoint.write(io.input, svc.as_ref()) {
                    return done(NtStatus::INSUFFICIENT_RESOURCES);
                }
                // A write that produced no PDU answers with no output.
                p.endpoint.read(max).unwrap_or_default()
            }
            ctl_code::FSCTL_PIPE_PEEK => {
                // FILE_PIPE_PEEK_BUFFER (MS-FSCC 2.3.33): NamedPipeState
                // (3, connected), ReadDataAvailable, NumberOfMessages,
                // MessageLength; no data is copied.
                if max < 16 {
                    return done(NtStatus::BUFFER_TOO_SMALL);
                }
                let n = p.endpoint.next_message_len() as u32;
                let mut out = Vec::with_capacity(16);
                for v in [3u32, n, u32::from(n > 0), n] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                (out, 0)
            }
            _ => return done(NtStatus::INVALID_DEVICE_REQUEST),
        };
        pipe_reply(
            left,
            Response::Ioctl(IoctlResponse {
                ctl_code: io.ctl_code,
                file_id: fid,
                input: &[],
                output: &output,
                flags: 0,
            }),
        )
    }

    fn pipe_query_info(&mut self, id: u64, q: &QueryInfoRequest<'_>) -> Plan {
        let Some(p) = self.pipes.get(&id) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if q.info_type != info_type::FILE {
            return done(NtStatus::NOT_SUPPORTED);
        }
        let mut out = Vec::new();
        let put = |out: &mut Vec<u8>, vals: &[u32]| {
            for v in vals {
                out.extend_from_slice(&v.to_le_bytes());
            }
        };
        match q.file_info_class {
            info_class::STANDARD => {
                // MS-FSCC 2.4.47: AllocationSize, EndOfFile, NumberOfLinks,
                // DeletePending, Directory, Reserved. Windows reports a
                // pipe with DeletePending set, and so does Samba.
                out.extend_from_slice(&4096u64.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
                put(&mut out, &[1]);
                out.extend_from_slice(&[1, 0, 0, 0]);
            }
            info_class::PIPE => put(&mut out, &[p.read_mode, p.completion_mode]),
            PIPE_LOCAL => {
                // MS-FSCC 2.4.31 FilePipeLocalInformation: message type,
                // full duplex, unlimited instances, one current, quotas,
                // data available, connected, client end.
                let avail = p.endpoint.next_message_len() as u32;
                put(
                    &mut out,
                    &[1, 2, u32::MAX, 1, 4280, avail, 4280, 4280, 3, 0],
                );
            }
            _ => return done(NtStatus::NOT_SUPPORTED),
        }
        if (q.output_buffer_length as usize) < out.len() {
            return done(NtStatus::INFO_LENGTH_MISMATCH);
        }
        ok(Response::QueryInfo(OutputBufferResponse {
            output_buffer: &out,
        }))
    }

    fn pipe_set_info(&mut self, id: u64, s: &SetInfoRequest<'_>) -> Plan {
        let Some(p) = self.pipes.get_mut(&id) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if s.info_type != info_type::FILE || s.file_info_class != info_class::PIPE {
            return done(NtStatus::NOT_SUPPORTED);
        }
        let b = s.buffer;
        if b.len() < 8 {
            return done(NtStatus::INFO_LENGTH_MISMATCH);
        }
        let read_mode = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let completion_mode = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if read_mode > 1 || completion_mode > 1 {
            return done(NtStatus::INVALID_PARAMETER);
        }
        p.read_mode = read_mode;
        p.completion_mode = completion_mode;
        ok(Response::SetInfo(SetInfoResponse))
    }
}

impl Connection {
    /// FSCTL_PIPE_WAIT (MS-FSCC 2.3.49 FSCTL_PIPE_WAIT_REQUEST: Timeout,
    /// NameLength, TimeoutSpecified, Padding, Name): duet's pipes always have
    /// an instance free, so a known name succeeds at once.
    pub(super) fn pipe_wait(input: &[u8]) -> Plan {
        let Some(len) = input.get(8..12) else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(raw) = input.get(14..14usize.saturating_add(len)) else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        let units: Vec<u16> = raw
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let name = String::from_utf16_lossy(&units);
        if PIPES
            .iter()
            .any(|p| p.eq_ignore_ascii_case(name.trim_start_matches('\\')))
        {
            ok(Response::Ioctl(IoctlResponse {
                ctl_code: ctl_code::FSCTL_PIPE_WAIT,
                file_id: FileId {
                    persistent: u64::MAX,
                    volatile: u64::MAX,
                },
                input: &[],
                output: &[],
                flags: 0,
            }))
        } else {
            done(NtStatus::OBJECT_NAME_NOT_FOUND)
        }
    }
}

/// FilePipeLocalInformation (MS-FSCC 2.4.31).
const PIPE_LOCAL: u8 = 24;

/// A READ or IOCTL answer: STATUS_BUFFER_OVERFLOW with the data when the
/// message did not fit (MS-SMB2 3.3.5.12, 3.3.5.15).
fn pipe_reply(left: usize, r: Response<'_>) -> Plan {
    match ok(r) {
        Plan::Done { body, .. } if left > 0 => Plan::Done {
            status: NtStatus::BUFFER_OVERFLOW,
            body,
        },
        p => p,
    }
}
