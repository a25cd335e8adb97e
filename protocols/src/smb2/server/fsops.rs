//! File-system commands: each is *planned* into the frame's one batch (its
//! operations appended, referring to the objects of earlier ones with
//! `ObjRef::Result`), and *completed* from the batch's per-operation
//! results into its response.

use std::collections::HashMap;

use duet_fs::{
    check_name, dos, Attrs, CreateKind, FileType, FsError, IfExists, NodeId, ObjRef, Op, OpOutput,
    OpResult, SetAttrs, SetTime, WriteData,
};

use super::conn::Connection;
use super::plan::*;
use super::state::*;
use super::sharemode::{path_key, share};
use super::info::{
    access, extra_status, from_filetime, fs_status, has_wildcards, maximal_access, pattern_match,
    security_descriptor, short_name, stored_security_descriptor, to_filetime,
};
use crate::smb2::close::{CloseRequest, CloseResponse};
use crate::smb2::create::{
    create_action, create_disposition as disp, create_options as opt, CreateRequest, CreateResponse,
};
use crate::smb2::create_context::CreateContextRequest;
use crate::smb2::create_context::CreateContextResponse;
use crate::smb2::cursor::Utf16;
use crate::smb2::fscc::{
    self, fs_info_class, info_class, ChainWriter, DirectoryEntry, DirectoryInfoClass,
};
use crate::smb2::header::Header;
use crate::smb2::ioctl::{
    compression_format, ctl_code, CopyChunkCopy, CopyChunkResponse, IoctlRequest, IoctlResponse, ResumeKeyResponse,
};
use crate::smb2::DecodeError;
use crate::smb2::lock::LockResponse;
use crate::smb2::message::Response;
use crate::smb2::query_directory::{OutputBufferResponse, QueryDirectoryRequest};
use crate::smb2::query_info::{info_type, QueryInfoRequest};
use crate::smb2::read::{ReadRequest, ReadResponse};
use crate::smb2::set_info::{SetInfoRequest, SetInfoResponse};
use crate::smb2::status::NtStatus;
use crate::smb2::write::{WriteRequest, WriteResponse};
use crate::smb2::FileId;

/// duet's limit on path components in one name (Invariant 5).
pub const MAX_PATH_COMPONENTS: usize = 64;

/// The FileModeInformation bits SET_INFO may change (MS-FSA 2.1.5.14.6).
const SETTABLE_MODE: u32 = opt::WRITE_THROUGH
    | opt::SEQUENTIAL_ONLY
    | opt::SYNCHRONOUS_IO_ALERT
    | opt::SYNCHRONOUS_IO_NONALERT;

/// The largest file size NTFS allows (MAXFILESIZE, 16 TiB - 64 KiB):
/// writes ending past it are refused.
const MAX_FILE_SIZE: u64 = 0xfff_ffff_0000;

/// The most names a QUERY_DIRECTORY with SMB2_INDEX_SPECIFIED re-reads to
/// reach the position it names; past it the FileIndex is ignored (Windows
/// servers ignore it always, a product behavior note of MS-SMB2 2.2.33)
/// and the enumeration goes on where it is.
const MAX_INDEX_REREAD: u32 = 4096;

/// What planning needs to know of the target open.
struct View {
    /// The open's object: a named stream's own node for a stream open.
    obj: ObjRef,
    parent: ObjRef,
    name: String,
    file: Option<u64>,
    node: Option<NodeId>,
    is_dir: Option<bool>,
    granted: u32,
    delete_on_close: bool,
}

impl View {
    /// The object whose times, attributes and EAs the open reports: the
    /// file, for an open of one of its named streams (named `:stream`
    /// under it).
    fn file_obj(&self) -> ObjRef {
        if self.name.starts_with(':') {
            self.parent
        } else {
            self.obj
        }
    }
}

fn first_error(results: &[OpResult], range: std::ops::Range<usize>) -> Option<(usize, FsError)> {
    range.into_iter().find_map(|i| match results.get(i) {
        Some(Ok(_)) => None,
        Some(Err(e)) => Some((i, *e)),
        None => Some((i, FsError::Io)),
    })
}

fn result_attrs(results: &[OpResult], i: usize) -> Result<&Attrs, FsError> {
    match results.get(i) {
        Some(Ok(o)) => o.attrs().ok_or(FsError::Io),
        Some(Err(e)) => Err(*e),
        None => Err(FsError::Io),
    }
}

/// Splits a share-relative path into checked components; a named stream
/// (`file:name[:$DATA]`) is OBJECT_NAME_INVALID here (only CREATE opens
/// streams: [`split_stream_path`]).
fn split_path(name: &str) -> Result<Vec<String>, NtStatus> {
    match split_stream_path(name)? {
        (comps, None, _) => Ok(comps),
        (_, Some(_), _) => Err(NtStatus::OBJECT_NAME_INVALID),
    }
}

/// Splits a share-relative path into checked components and the named
/// stream its last component names, if any (MS-FSCC 2.1.5.1, parsed by
/// [`crate::smb2::stream_name::parse`]; `file::$DATA` is the file itself,
/// and the last field says it was named so).
fn split_stream_path(name: &str) -> Result<(Vec<String>, Option<String>, bool), NtStatus> {
    // MS-SMB2 3.3.5.9: a name that starts with a separator is invalid.
    if name.starts_with('\\') {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let (head, leaf) = match name.rfind('\\') {
        Some(i) => (&name[..=i], &name[i + 1..]),
        None => ("", name),
    };
    let (file, stream) = crate::smb2::stream_name::parse(leaf)?;
    let data = stream == crate::smb2::stream_name::Stream::Data;
    let stream = match stream {
        crate::smb2::stream_name::Stream::Default | crate::smb2::stream_name::Stream::Data => None,
        crate::smb2::stream_name::Stream::Named(s) => Some(s),
    };
    let joined = format!("{head}{file}");
    let name = joined.strip_suffix('\\').unwrap_or(&joined);
    if name.is_empty() {
        // A named stream of the share's root directory is not served.
        return if stream.is_some() { Err(NtStatus::OBJECT_NAME_INVALID) } else { Ok((Vec::new(), None, data)) };
    }
    let comps: Vec<String> = name.split('\\').map(str::to_string).collect();
    if comps.len() > MAX_PATH_COMPONENTS {
        return Err(NtStatus::OBJECT_NAME_INVALID);
    }
    for c in &comps {
        if c.contains([':', '*', '?', '<', '>', '"', '|']) || check_name(c).is_err() {
            return Err(NtStatus::OBJECT_NAME_INVALID);
        }
    }
    Ok((comps, stream, data))
}

/// The path by which share modes, leases and breaks know an open: a named
/// stream's is its file's path and `:stream` (lower-cased: stream names
/// are case-insensitive), so its opens are its own, apart from the file's
/// (smbtorture `smb2.streams.sharemodes`).
fn stream_key_path(path: &str, stream: Option<&str>) -> String {
    match stream {
        Some(s) => format!("{path}:{}", s.to_lowercase()),
        None => path.to_string(),
    }
}

/// MS-FSCC 2.4.43 FileStreamInformation of a file: `::$DATA` (files only,
/// MS-FSA 2.1.5.11.29: a directory has no unnamed data stream) and then
/// each named stream as `:name:$DATA`, with its size and allocation. The
/// least buffer is one entry's (an empty list needs none).
fn stream_info(file: &Attrs, streams: &[duet_fs::DirEntry]) -> (Vec<u8>, usize) {
    let mut list = Vec::with_capacity(streams.len() + 1);
    if file.ftype != FileType::Directory {
        list.push(("::$DATA".to_string(), file.size, file.alloc_size));
    }
    for s in streams {
        let (size, alloc) = s.attrs.as_ref().map_or((0, 0), |a| (a.size, a.alloc_size));
        list.push((format!(":{}:$DATA", s.name), size, alloc));
    }
    let entries: Vec<fscc::FileStreamInformation<'_>> = list
        .iter()
        .map(|(name, size, alloc)| fscc::FileStreamInformation {
            stream_size: *size,
            stream_allocation_size: *alloc,
            stream_name: Utf16::Str(name),
        })
        .collect();
    let mut out = Vec::new();
    fscc::FileStreamInformation::encode_list(&entries, &mut out);
    let min = 32.min(out.len());
    (out, min)
}

/// The CompressionState FSCTL_GET_COMPRESSION and
/// FileCompressionInformation report (MS-FSCC 2.3.22, 2.4.9): LZNT1 for a
/// node with FILE_ATTRIBUTE_COMPRESSED (duet stores LZ4; the wire defines
/// only LZNT1), NONE otherwise.
pub(super) fn compression_format(a: &Attrs) -> u16 {
    if a.dos_attrs & dos::COMPRESSED != 0 {
        compression_format::LZNT1
    } else {
        compression_format::NONE
    }
}

/// The sizes SMB reports: a directory has neither end of file nor
/// allocation (as NTFS reports them).
pub(super) fn smb_sizes(a: &Attrs) -> (u64, u64) {
    if a.ftype == FileType::Directory {
        (0, 0)
    } else {
        (a.size, a.alloc_size)
    }
}

fn file_entry(attrs: &Attrs) -> DirectoryEntry<'static> {
    let (eof, alloc) = smb_sizes(attrs);
    DirectoryEntry {
        file_index: 0,
        creation_time: to_filetime(attrs.btime),
        last_access_time: to_filetime(attrs.atime),
        last_write_time: to_filetime(attrs.mtime),
        change_time: to_filetime(attrs.ctime),
        end_of_file: eof,
        allocation_size: alloc,
        file_attributes: attrs.smb_attributes(),
        ea_size: 0,
        short_name: Utf16::EMPTY,
        file_id: attrs.id,
        file_name: Utf16::EMPTY,
    }
}

/// A SET_INFO time: 0 leaves it alone, -1 and -2 (stop / resume automatic
/// updates) too.
fn set_time(ft: u64) -> Option<i64> {
    match ft {
        0 | u64::MAX | 0xFFFF_FFFF_FFFF_FFFE => None,
        t => Some(from_filetime(t)),
    }
}

/// The most ranges one FSCTL_FILE_LEVEL_TRIM may name (each is one
/// operation of the batch).
pub(super) const MAX_TRIM_RANGES: usize = 256;

impl Connection {
    /// Forgets an open: its byte-range locks and its share mode go too.
    pub(super) fn forget_open(&mut self, id: u64) -> Option<Open> {
        let o = self.opens.remove(&id)?;
        // Its share reservation, byte-range locks and waiting LOCKs go
        // (the lock table grants what others waited for), and it leaves
        // its lease.
        self.cfg.share_modes.release(o.node, (self.conn_key, id));
        self.lease_forget_open(o.lease, id);
        if o.app_instance.is_some() {
            self.cfg.share_modes.forget_app_instance((self.conn_key, id));
        }
        // Its waiting CHANGE_NOTIFYs end (STATUS_NOTIFY_CLEANUP).
        self.notify_cleanup(id);
        Some(o)
    }

    fn view(&self, fp: &FramePlan, t: Target) -> Option<View> {
        match t {
            Target::Table(id) => self.opens.get(&id).map(|o| View {
                obj: ObjRef::Id(o.node),
                parent: ObjRef::Id(o.parent),
                name: o.name.clone(),
                file: Some(id),
                node: Some(o.node),
                is_dir: Some(o.is_dir),
                granted: o.granted,
                delete_on_close: o.delete_on_close,
            }),
            Target::Pending(slot) => fp.pending_opens.get(&slot).map(|p| View {
                obj: p.obj,
                parent: p.parent,
                name: p.name.clone(),
                file: None,
                node: None,
                is_dir: p.is_dir,
                granted: p.granted,
                delete_on_close: p.delete_on_close,
            }),
        }
    }

    /// Starts the batch for a command of `hdr`'s session and tree.
    fn begin(&self, fp: &mut FramePlan, hdr: &Header) -> Result<(NodeId, bool, String), NtStatus> {
        let (s, t) = self.tree_of(hdr)?;
        if t.ipc {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        let (root, ro, name) = (t.share.root, t.share.read_only, t.share.name.clone());
        let cred = s.cred.clone();
        fp.batch_for(hdr.session_id, &cred, ro)
            .ok_or(NtStatus::INVALID_PARAMETER)?;
        Ok((root, ro, name))
    }

    /// Resolves a target at completion time to its open's volatile id.
    fn resolve(
        &self,
        t: Target,
        created: &HashMap<usize, Result<u64, NtStatus>>,
    ) -> Result<u64, NtStatus> {
        match t {
            Target::Table(id) => {
                if self.opens.contains_key(&id) {
                    Ok(id)
                } else {
                    Err(NtStatus::FILE_CLOSED)
                }
            }
            Target::Pending(slot) => match created.get(&slot) {
                Some(Ok(id)) if self.opens.contains_key(id) => Ok(*id),
                Some(Ok(_)) => Err(NtStatus::FILE_CLOSED),
                Some(Err(e)) => Err(*e),
                None => Err(NtStatus::INVALID_PARAMETER),
            },
        }
    }

    // ---- CREATE --------------------------------------------------------

    pub(super) fn plan_create(
        &mut self,
        fp: &mut FramePlan,
        chain: &mut super::plan::Chain,
        slot: usize,
        hdr: &Header,
        req: &CreateRequest<'_>,
    ) -> Plan {
        let plan = match self.plan_create_inner(fp, slot, hdr, req) {
            Ok(p) => p,
            Err(status) => done(status),
        };
        match &plan {
            Plan::Fs(_) => {
                chain.file = Some(Target::Pending(slot));
                chain.error = None;
            }
            Plan::Done { status, .. } => {
                chain.file = None;
                chain.error = Some(*status);
            }
        }
        plan
    }

    fn plan_create_inner(
        &mut self,
        fp: &mut FramePlan,
        slot: usize,
        hdr: &Header,
        req: &CreateRequest<'_>,
    ) -> Result<Plan, NtStatus> {
        let (s, t) = self.tree_of(hdr)?;
        if t.ipc {
            // Not a pipe duet serves: `pipe.rs` answered srvsvc and
            // lsarpc before this.
            return Err(NtStatus::OBJECT_NAME_NOT_FOUND);
        }
        let (root, ro) = (t.share.root, t.share.read_only);
        let cred = s.cred.clone();
        // Durable handles (`durable.rs`) first: a reconnect ignores the
        // other fields of the request (MS-SMB2 3.3.5.9.7: no path name
        // validation, no open execution). v2 contexts are for 3.x only
        // (3.3.5.9.10, 3.3.5.9.12), ignored below.
        let dialect_rev = self.dialect().unwrap_or(0);
        // Durable handles (`durable.rs`): v2 contexts are for 3.x only
        // (MS-SMB2 3.3.5.9.10, 3.3.5.9.12), ignored below.
        let v2_ok = dialect_rev >= crate::smb2::negotiate::dialect::SMB3_0;
        let mut dhnq = false;
        let mut dh2q = None;
        let mut dhnc = None;
        let mut dh2c = None;
        let mut lease_key_any = None;
        let mut app_id = None;
        for c in &req.create_contexts {
            match c {
                CreateContextRequest::DurableHandleRequest => dhnq = true,
                CreateContextRequest::DurableHandleRequestV2 { timeout, flags, create_guid } if v2_ok => {
                    dh2q = Some((*timeout, *flags, *create_guid))
                }
                CreateContextRequest::DurableHandleReconnect { file_id } => dhnc = Some(*file_id),
                CreateContextRequest::DurableHandleReconnectV2 { file_id, create_guid, .. } if v2_ok => {
                    dh2c = Some((*file_id, *create_guid))
                }
                CreateContextRequest::RequestLease(l) => lease_key_any = Some(l.lease_key),
                CreateContextRequest::AppInstanceId(a) => app_id = Some(*a),
                _ => {}
            }
        }
        // MS-SMB2 3.3.5.9.10 / 3.3.5.9.12 / 3.3.5.9.7: a v2 context with
        // any other durable context is INVALID_PARAMETER; DHnC ignores a
        // DHnQ beside it.
        if (dh2q.is_some() && (dhnq || dhnc.is_some() || dh2c.is_some()))
            || (dh2c.is_some() && (dhnq || dhnc.is_some()))
        {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        let reconnect = match (dhnc, dh2c) {
            (Some(f), _) => Some(super::plan::Reconnect { persistent: f.persistent, v2: None }),
            (_, Some((f, g))) => Some(super::plan::Reconnect { persistent: f.persistent, v2: Some(g) }),
            _ => None,
        };
        if let Some(r) = reconnect {
            // No path name validation or open execution (3.3.5.9.7): the
            // name counts only for a leased open.
            let path = req
                .name
                .to_string_checked()
                .map_err(|_| NtStatus::OBJECT_NAME_INVALID)
                .and_then(|n| split_path(&n))
                .map(|c| path_key(root, &c.join("\\")));
            let id = match self.reclaim(hdr, r, lease_key_any, path, fp.now_ns) {
                Ok(id) => id,
                Err(NtStatus::OBJECT_NAME_NOT_FOUND) if self.resuming.is_none() && fp.slots.is_empty() && hdr.next_command == 0 => {
                    // The open is still held by its old connection, whose
                    // end this server has not yet seen (the client noticed
                    // first and reconnected at once): the CREATE waits
                    // (STATUS_PENDING) until that open is kept or closed,
                    // at most a second, then looks again once.
                    match self.cfg.share_modes.open_elsewhere(r.persistent, self.conn_key) {
                        Some(k) => {
                            self.park = Some(Vec::new());
                            self.park_gone = Some((k, fp.now_ns.saturating_add(1_000_000_000)));
                            return Ok(done(NtStatus::PENDING));
                        }
                        None => return Err(NtStatus::OBJECT_NAME_NOT_FOUND),
                    }
                }
                Err(e) => return Err(e),
            };
            return self.plan_reattach(fp, slot, hdr, id, false);
        }
        if self.opens.len() + fp.pending_opens.len() >= self.cfg.max_opens {
            return Err(NtStatus::TOO_MANY_OPENED_FILES);
        }
        // Counted only when the connection holds that many at all.
        let per_session = self.cfg.max_opens_per_session;
        if self.opens.len() + fp.pending_opens.len() >= per_session
            && self.opens.values().filter(|o| o.session_id == hdr.session_id).count()
                + fp.pending_opens.len()
                >= per_session
        {
            return Err(NtStatus::TOO_MANY_OPENED_FILES);
        }
        // MS-SMB2 3.3.5.9: reserved access bits (0x0CE0FE00) are
        // ACCESS_DENIED (smbtorture smb2.create.gentest).
        if req.desired_access & 0x0CE0_FE00 != 0 {
            return Err(NtStatus::ACCESS_DENIED);
        }
        // FileAttributes (MS-FSCC 2.6) a file cannot be given: VOLUME,
        // DEVICE, INTEGRITY_STREAM and the bits above 0xFFFF (MS-FSA
        // 2.1.5.1 as NTFS answers them).
        if req.file_attributes & 0xFFFF_8048 != 0 {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        let o = req.create_options;
        // FILE_WRITE_THROUGH (MS-SMB2 2.2.13): the create is durable
        // before its reply on any share.
        fp.durable |= o & opt::WRITE_THROUGH != 0;
        let d = req.create_disposition;
        let desired = access::expand(req.desired_access);
        if o & opt::DIRECTORY_FILE != 0 && o & opt::NON_DIRECTORY_FILE != 0 {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        if d > disp::OVERWRITE_IF {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        if o & opt::DIRECTORY_FILE != 0 && !matches!(d, disp::CREATE | disp::OPEN | disp::OPEN_IF) {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        if o & opt::DELETE_ON_CLOSE != 0
            && desired & (access::DELETE | access::MAXIMUM_ALLOWED) == 0
        {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        // MS-FSA 2.1.5.1.2.1: a new read-only file cannot be delete-on-close;
        // refuse before the batch would create it.
        if o & opt::DELETE_ON_CLOSE != 0
            && req.file_attributes & dos::READONLY != 0
            && d != disp::OPEN
        {
            return Err(NtStatus::CANNOT_DELETE);
        }
        // The reserved high byte is invalid; opens by file id, a reserved
        // oplock filter and the old tree-connection option (0x80) are not
        // supported (MS-SMB2 3.3.5.9, as Windows answers them).
        if o & 0xFF00_0000 != 0 {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        if o & (opt::OPEN_BY_FILE_ID | opt::RESERVE_OPFILTER | 0x0000_0080) != 0 {
            return Err(NtStatus::NOT_SUPPORTED);
        }
        if req.impersonation_level > 3 {
            return Err(NtStatus::BAD_IMPERSONATION_LEVEL);
        }
        if desired & access::ACCESS_SYSTEM_SECURITY != 0 {
            return Err(extra_status::PRIVILEGE_NOT_HELD);
        }
        let mut mxac = false;
        let mut qfid = false;
        let mut alloc = None;
        let mut eas: Vec<(String, Vec<u8>)> = Vec::new();
        let mut new_dacl: Option<(u16, Vec<u8>)> = None;
        let mut lease = None;
        let mut timewarp = None;
        for c in &req.create_contexts {
            match c {
                CreateContextRequest::RequestLease(l)
                    if super::lease::usable(req.requested_oplock_level, l, dialect_rev) =>
                {
                    lease = Some(*l)
                }
                CreateContextRequest::QueryMaximalAccess { .. } => mxac = true,
                CreateContextRequest::QueryOnDiskId => qfid = true,
                CreateContextRequest::AllocationSize(n) => alloc = Some(*n),
                CreateContextRequest::TimewarpToken(ft) => {
                    timewarp = Some(duet_fs::view::gmt_token(from_filetime(*ft)))
                }
                CreateContextRequest::ExtendedAttributes(d) if !d.is_empty() => {
                    eas = fscc::full_ea::decode(d).map_err(|e| e.status())?;
                }
                CreateContextRequest::SecurityDescriptor(b) => {
                    let cred = self.sessions.get(&hdr.session_id).map(|x| x.cred.clone()).ok_or(NtStatus::USER_SESSION_DELETED)?;
                    new_dacl = create_dacl(b, &cred, self.sid_map.as_deref())?;
                }
                // Leases, durable handles, security descriptors, AAPL and
                // the rest: not granted, so not answered.
                _ => {}
            }
        }
        // A v2 lease naming its parent directory's lease: that lease is
        // not broken by what this frame changes in the directory (MS-SMB2
        // 3.3.4.7 and 3.3.5.9.11).
        if let Some(l) = &lease {
            if fp.parent_lease.is_none() {
                fp.parent_lease = self.parent_lease_holder(l);
            }
        }
        // A replayed DH2Q (SMB2_FLAGS_REPLAY_OPERATION) of an open this
        // connection holds answers that open again (3.3.5.9.10).
        if let Some((_, _, guid)) = dh2q {
            let replay = hdr.flags.0 & crate::smb2::header::HeaderFlags::REPLAY_OPERATION != 0;
            let held = self
                .opens
                .iter()
                .find(|(_, o)| o.session_id == hdr.session_id && o.durable.is_some_and(|d| d.v2 && d.create_guid == guid))
                .map(|(id, _)| *id);
            if let (true, Some(id)) = (replay, held) {
                return self.plan_reattach(fp, slot, hdr, id, true);
            }
        }
        // 3.3.5.9.13: with a DH2Q, an open of the same AppInstanceId is
        // closed before this one runs (a failed-over application's new
        // instance takes its files over, without a break).
        let app_instance = app_id.filter(|_| dh2q.is_some());
        if let Some(app) = app_instance {
            if let Some(wait) = self.close_app_instance(app, hdr, fp.now_ns) {
                if fp.slots.is_empty() && hdr.next_command == 0 {
                    self.park = Some(Vec::new());
                    self.park_gone = wait.map(|k| (k, fp.now_ns.saturating_add(5_000_000_000)));
                    return Ok(done(NtStatus::PENDING));
                }
            }
        }
        let durable = match (dh2q, dhnq) {
            (Some((t, _, g)), _) => Some(super::plan::DurableRequest {
                v2: true,
                timeout_ms: super::durable::v2_timeout(t, self.cfg.durable_timeout_ms),
                create_guid: g,
            }),
            (None, true) => Some(super::plan::DurableRequest {
                v2: false,
                timeout_ms: self.cfg.durable_timeout_ms,
                create_guid: [0; 16],
            }),
            _ => None,
        };
        let name = req
            .name
            .to_string_checked()
            .map_err(|_| NtStatus::OBJECT_NAME_INVALID)?;
        let (mut comps, stream, data) = split_stream_path(&name)?;
        // MS-FSA 2.1.5.1: a data stream (named, or `::$DATA`) is not a
        // directory.
        if (stream.is_some() || data) && o & opt::DIRECTORY_FILE != 0 {
            return Err(NtStatus::NOT_A_DIRECTORY);
        }
        // Previous Versions (MS-SMB2 2.2.13.2.7, 3.3.5.9.10): an `@GMT-`
        // token in the path (where smbclient puts it) or a TWrp context
        // opens the name as the share's snapshot of that time holds it,
        // read-only: `.snapshot\@GMT-...\path` in the layers' view.
        let token = match comps.iter().position(|c| duet_fs::view::is_gmt_token(c)) {
            Some(i) => Some(comps.remove(i)),
            None => timewarp,
        };
        let timewarp = token.is_some();
        if let Some(t) = token {
            comps.splice(0..0, [duet_fs::view::SNAPSHOT_DIR.to_string(), t]);
        }
        // The path share modes, leases and breaks know the open by: a
        // named stream's is the file's with `:stream` (its own opens).
        let key_path = stream_key_path(&comps.join("\\"), stream.as_deref());
        // MS-SMB2 3.3.5.9.8: one lease key, one file.
        if let Some(l) = &lease {
            if self.lease_key_conflicts(&l.lease_key, &path_key(root, &key_path)) {
                return Err(NtStatus::INVALID_PARAMETER);
            }
        }
        // Oplocks of other opens of the file that this open contradicts
        // are broken first (MS-SMB2 3.3.4.6 / MS-FSA 2.1.5.17); when the
        // holders must acknowledge, a CREATE alone in its frame waits
        // (answered STATUS_PENDING, run again by `poll_opens`), one in a
        // compound goes on at once.
        let break_access = if desired & access::MAXIMUM_ALLOWED != 0 {
            access::FILE_ALL_ACCESS
        } else if matches!(d, disp::SUPERSEDE | disp::OVERWRITE | disp::OVERWRITE_IF) {
            desired | access::FILE_WRITE_DATA
        } else {
            desired
        };
        // A removal of the name for an open dropped with its connection
        // (delete-on-close) still running: the CREATE waits for it, so
        // that the client reconnecting at once finds the name free.
        let file_key = path_key(root, &stream_key_path(&comps.join("\\"), None));
        let removing = [&file_key, &path_key(root, &key_path)]
            .into_iter()
            .find(|k| self.cfg.share_modes.removing_at(k))
            .cloned();
        if let Some(k) = removing.filter(|_| fp.slots.is_empty() && hdr.next_command == 0) {
            self.park_removal = Some((k, fp.now_ns.saturating_add(5_000_000_000)));
            self.park = Some(Vec::new());
            return Ok(done(NtStatus::PENDING));
        }
        let (_, wait) = {
            let key = path_key(root, &key_path);
            let share = duet_locks::Share::smb(break_access, req.share_access);
            let truncate = matches!(d, disp::SUPERSEDE | disp::OVERWRITE | disp::OVERWRITE_IF);
            self.break_for_create(&key, share, truncate, o & opt::DELETE_ON_CLOSE != 0, lease.as_ref().map(|l| &l.lease_key), fp.now_ns)
        };
        if (wait.is_some() || !self.park_after.is_empty()) && fp.slots.is_empty() && hdr.next_command == 0 {
            let key = path_key(root, &key_path);
            self.park = Some(self.cfg.share_modes.nodes_at(&key));
            return Ok(done(NtStatus::PENDING));
        }
        // In a compound the CREATE goes on at once, side batches or not.
        self.park_after.clear();
        // A file whose stream is open without FILE_SHARE_DELETE cannot be
        // opened for deletion.
        if stream.is_none()
            && (desired & access::DELETE != 0 || o & opt::DELETE_ON_CLOSE != 0)
            && self.cfg.share_modes.stream_conflicts(&path_key(root, &key_path), access::DELETE)
        {
            return Err(NtStatus::SHARING_VIOLATION);
        }
        // A file another connection's closed open left delete-pending
        // takes no new open (MS-FSA 2.1.5.1.2.1).
        // Its named streams too (smbtorture smb2.streams.delete).
        if self.cfg.share_modes.delete_pending_at(&path_key(root, &stream_key_path(&comps.join("\\"), None))) {
            return Err(NtStatus::DELETE_PENDING);
        }
        // Truncation happens in the batch: check the share modes of the
        // file's current opens first (MS-FSA 2.1.5.1.2.2).
        if matches!(d, disp::SUPERSEDE | disp::OVERWRITE | disp::OVERWRITE_IF)
            && self.cfg.share_modes.conflicts_at(
                &path_key(root, &key_path),
                desired | access::FILE_WRITE_DATA,
                req.share_access,
            )
        {
            return Err(NtStatus::SHARING_VIOLATION);
        }
        let creates = matches!(
            d,
            disp::CREATE | disp::SUPERSEDE | disp::OVERWRITE | disp::OVERWRITE_IF
        );
        // MS-SMB2 3.3.5.9: access the tree connect's MaximalAccess does not
        // hold (a read-only share holds no write bits) is ACCESS_DENIED,
        // before the name is looked up.
        if ro && (creates || o & opt::DELETE_ON_CLOSE != 0 || desired & access::WRITE_BITS != 0) {
            return Err(NtStatus::ACCESS_DENIED);
        }
        fp.batch_for(hdr.session_id, &cred, ro)
            .ok_or(NtStatus::INVALID_PARAMETER)?;
        // GetAcl answers the attributes and the stored DACL, which decides
        // removing a child as the engine does (`parent_allows`).
        let root_attrs_op = (comps.len() == 1
            && (desired & (access::DELETE | access::MAXIMUM_ALLOWED) != 0 || o & opt::DELETE_ON_CLOSE != 0))
            .then(|| fp.push(Op::GetAcl { obj: ObjRef::Id(root) }));
        let first_op = fp.batch.as_ref().map_or(0, |b| b.ops.len());
        let mut dir = ObjRef::Id(root);
        let (final_op, open_op, parent, leaf) = if comps.is_empty() {
            match d {
                disp::CREATE => return Err(NtStatus::OBJECT_NAME_COLLISION),
                disp::OPEN | disp::OPEN_IF => {}
                _ => return Err(NtStatus::ACCESS_DENIED),
            }
            let f = fp.push(Op::Lookup {
                dir,
                name: ".".into(),
            });
            (f, None, ObjRef::Id(root), String::new())
        } else {
            for c in &comps[..comps.len() - 1] {
                dir = ObjRef::Result(fp.push(Op::LookupCaseless {
                    dir,
                    name: c.clone(),
                }));
            }
            let leaf = comps[comps.len() - 1].clone();
            let settable = req.file_attributes & dos::SETTABLE;
            let kind = if o & opt::DIRECTORY_FILE != 0 {
                CreateKind::Directory
            } else {
                CreateKind::File
            };
            // MS-FSA 2.1.5.1.2.1: a new or overwritten file gets the
            // requested attributes plus ARCHIVE.
            // FILE_ATTRIBUTE_COMPRESSED is never taken from the request
            // (Windows does not keep it: smbtorture's
            // compress_create_with_attr); the new node inherits it from its
            // directory unless FILE_NO_COMPRESSION asks not to
            // (`dos::NO_COMPRESSION`, a marker never stored).
            let dos_attrs = match kind {
                CreateKind::Directory => (settable != 0).then_some(settable),
                _ => Some(settable | dos::ARCHIVE),
            };
            let dos_attrs = if o & opt::NO_COMPRESSION != 0 {
                Some(dos_attrs.unwrap_or(0) | dos::NO_COMPRESSION)
            } else {
                dos_attrs
            };
            let attrs = SetAttrs {
                dos_attrs,
                alloc_size: alloc,
                ..Default::default()
            };
            // A name that exists in another case is the same name to an
            // SMB client (MS-FSCC 2.1.5): CREATE of it collides, the
            // other dispositions open or overwrite it.
            let create = |fp: &mut FramePlan, if_exists| {
                fp.push(Op::CreateCaseless {
                    dir,
                    name: leaf.clone(),
                    kind: kind.clone(),
                    attrs: attrs.clone(),
                    if_exists,
                })
            };
            let (f, open) = match (&stream, d) {
                (Some(sname), d) => {
                    // A named stream (MS-FSA 2.1.5.1): its file is looked
                    // up, or made when the disposition creates (Windows
                    // makes the file of a new stream), then the stream.
                    let base = if d == disp::OPEN || d == disp::OVERWRITE || ro {
                        fp.push(Op::LookupCaseless { dir, name: leaf.clone() })
                    } else {
                        fp.push(Op::CreateCaseless {
                            dir,
                            name: leaf.clone(),
                            kind: CreateKind::File,
                            attrs: attrs.clone(),
                            if_exists: IfExists::Open,
                        })
                    };
                    let create = match d {
                        disp::OPEN | disp::OVERWRITE => None,
                        disp::OPEN_IF if ro => None,
                        disp::CREATE => Some(IfExists::Fail),
                        disp::OPEN_IF => Some(IfExists::Open),
                        _ => Some(IfExists::Truncate),
                    };
                    let st = fp.push(Op::OpenStream {
                        obj: ObjRef::Result(base),
                        name: sname.clone(),
                        attrs: SetAttrs { alloc_size: alloc, ..Default::default() },
                        create,
                    });
                    let open = (d == disp::OVERWRITE).then(|| {
                        fp.push(Op::Open { obj: ObjRef::Result(st), access: Default::default(), truncate: true })
                    });
                    (st, open)
                }
                (None, disp::OPEN) => (
                    fp.push(Op::LookupCaseless {
                        dir,
                        name: leaf.clone(),
                    }),
                    None,
                ),
                (None, disp::OPEN_IF) if ro => (
                    fp.push(Op::LookupCaseless {
                        dir,
                        name: leaf.clone(),
                    }),
                    None,
                ),
                (None, disp::CREATE) => (create(fp, IfExists::Fail), None),
                (None, disp::OPEN_IF) => (create(fp, IfExists::Open), None),
                (None, disp::OVERWRITE) => {
                    let f = fp.push(Op::LookupCaseless {
                        dir,
                        name: leaf.clone(),
                    });
                    let open = fp.push(Op::Open {
                        obj: ObjRef::Result(f),
                        access: Default::default(),
                        truncate: true,
                    });
                    (f, Some(open))
                }
                _ => (create(fp, IfExists::Truncate), None),
            };
            // A stream's open is named `:stream` under its file.
            match &stream {
                Some(sname) => (f, open, ObjRef::Result(f - 1), format!(":{sname}")),
                None => (f, open, dir, leaf),
            }
        };
        let obj = ObjRef::Result(open_op.unwrap_or(final_op));
        // MS-FSA 2.1.5.1.2.1: the EA buffer of a CREATE applies to a file
        // it creates or overwrites (OPEN leaves the file's EAs alone).
        let ea_op = (!eas.is_empty() && d != disp::OPEN)
            .then(|| fp.push(Op::SetEas { obj, eas: eas.clone() }));
        // The SD_BUFFER's DACL is the new file's (MS-SMB2 3.3.5.9.2,
        // MS-FSA 2.1.5.1.1); only FILE_CREATE is sure to make one, so the
        // other dispositions leave it (an existing file keeps its own).
        if let (Some(acl), disp::CREATE) = (&new_dacl, d) {
            fp.push(Op::SetAcl { obj, acl: Some(acl.clone()) });
        }
        // A named stream has its file's security (MS-FSA 2.1.5.1): the
        // file's DACL decides what a stream's open is granted.
        let acl_op = Some(fp.push(Op::GetAcl { obj: if stream.is_some() { parent } else { obj } }));
        // The parent directory's DACL, for the DELETE check of a nested
        // name (the share root's comes with `root_attrs_op`).
        let parent_acl_op = (final_op > first_op
            && (desired & (access::DELETE | access::MAXIMUM_ALLOWED) != 0 || o & opt::DELETE_ON_CLOSE != 0))
            .then(|| fp.push(Op::GetAcl { obj: ObjRef::Result(final_op - 1) }));
        let granted = if desired & access::MAXIMUM_ALLOWED != 0 {
            access::FILE_ALL_ACCESS
        } else {
            desired
        };
        let is_dir = if o & opt::DIRECTORY_FILE != 0 {
            Some(true)
        } else if o & opt::NON_DIRECTORY_FILE != 0 {
            Some(false)
        } else {
            None
        };
        fp.pending_opens.insert(
            slot,
            PendingOpen {
                obj,
                parent,
                name: leaf.clone(),
                granted,
                is_dir,
                delete_on_close: o & opt::DELETE_ON_CLOSE != 0,
            },
        );
        Ok(Plan::Fs(FsPlan::Create(Box::new(CreatePlan {
            first_op,
            timewarp,
            final_op,
            open_op,
            disposition: d,
            options: o,
            desired: req.desired_access,
            mxac,
            qfid,
            root,
            read_only: ro,
            session_id: hdr.session_id,
            tree_id: hdr.tree_id().unwrap_or(0),
            name: leaf,
            path: comps.join("\\"),
            stream,
            data,
            share_access: req.share_access,
            ea_op,
            acl_op,
            parent_acl_op,
            root_attrs_op,
            oplock: req.requested_oplock_level,
            lease,
            durable,
            app_instance,
            reattach: None,
        }))))
    }

    /// Plans the CREATE response of open `id`, already in the table (a
    /// durable reconnect, or a DH2Q replay): one GetAttr for its
    /// attributes.
    fn plan_reattach(&mut self, fp: &mut FramePlan, slot: usize, hdr: &Header, id: u64, replay: bool) -> Result<Plan, NtStatus> {
        let Some(o) = self.opens.get(&id).cloned() else { return Err(NtStatus::OBJECT_NAME_NOT_FOUND) };
        let (s, t) = match self.tree_of(hdr) {
            Ok(x) => x,
            Err(e) => {
                self.forget_open(id);
                return Err(e);
            }
        };
        let (cred, root, ro) = (s.cred.clone(), t.share.root, t.share.read_only);
        if fp.batch_for(hdr.session_id, &cred, true).is_none() {
            // Another session's batch in this frame: the open stays, the
            // client may reconnect it again.
            return Err(NtStatus::INVALID_PARAMETER);
        }
        let op = fp.push(Op::GetAttr { obj: ObjRef::Id(o.node) });
        fp.pending_opens.insert(
            slot,
            PendingOpen {
                obj: ObjRef::Id(o.node),
                parent: ObjRef::Id(o.parent),
                name: o.name.clone(),
                granted: o.granted,
                is_dir: Some(o.is_dir),
                delete_on_close: o.delete_on_close,
            },
        );
        Ok(Plan::Fs(FsPlan::Create(Box::new(CreatePlan {
            first_op: op,
            timewarp: false,
            final_op: op,
            open_op: None,
            disposition: disp::OPEN,
            options: o.options,
            desired: o.granted,
            mxac: false,
            qfid: false,
            root,
            read_only: ro,
            session_id: hdr.session_id,
            tree_id: hdr.tree_id().unwrap_or(0),
            name: o.name.clone(),
            path: o.path.clone(),
            stream: None,
            data: false,
            share_access: 0,
            ea_op: None,
            acl_op: None,
            parent_acl_op: None,
            root_attrs_op: None,
            oplock: o.oplock,
            lease: None,
            durable: None,
            app_instance: None,
            reattach: Some((id, replay)),
        }))))
    }

    /// The response of a reconnected (or replayed) open: its attributes,
    /// its oplock or lease as they stand, FILE_OPENED; a reconnect sends
    /// no durable response context (what Windows and Samba answer).
    fn complete_reattach(&mut self, cp: &CreatePlan, id: u64, replay: bool, results: &[OpResult]) -> Result<(NtStatus, Vec<u8>, u64), NtStatus> {
        let attrs = match result_attrs(results, cp.final_op) {
            Ok(a) => a.clone(),
            Err(e) => {
                if !replay {
                    self.forget_open(id);
                }
                return Err(fs_status(e));
            }
        };
        let Some(o) = self.opens.get(&id).cloned() else { return Err(NtStatus::FILE_CLOSED) };
        let mut contexts = Vec::new();
        let oplock = match o.lease {
            Some(k) => {
                if let Some(l) = self.cfg.share_modes.leases().response((self.lease_client(), k)) {
                    contexts.push(CreateContextResponse::Lease(l));
                }
                crate::smb2::create::oplock_level::LEASE
            }
            None => o.oplock,
        };
        if let (true, Some(d)) = (replay, o.durable) {
            contexts.push(CreateContextResponse::DurableHandleV2 { timeout: d.timeout_ms, flags: 0 });
        }
        let resp = CreateResponse {
            oplock_level: oplock,
            flags: 0,
            create_action: create_action::OPENED,
            creation_time: to_filetime(attrs.btime),
            last_access_time: to_filetime(attrs.atime),
            last_write_time: to_filetime(attrs.mtime),
            change_time: to_filetime(attrs.ctime),
            allocation_size: smb_sizes(&attrs).1,
            end_of_file: smb_sizes(&attrs).0,
            file_attributes: attrs.smb_attributes(),
            file_id: FileId { persistent: id, volatile: id },
            create_contexts: contexts,
        };
        Ok((NtStatus::SUCCESS, body(&Response::Create(resp)), id))
    }

    fn complete_create(
        &mut self,
        fp: &FramePlan,
        slot: usize,
        cp: &CreatePlan,
        results: &[OpResult],
    ) -> Result<(NtStatus, Vec<u8>, u64), NtStatus> {
        if let Some((id, replay)) = cp.reattach {
            return self.complete_reattach(cp, id, replay, results);
        }
        let last = cp.open_op.unwrap_or(cp.final_op);
        let checked = cp.ea_op.map_or(last, |e| e.max(last));
        if let Some((i, e)) = first_error(results, cp.first_op..checked + 1) {
            return Err(
                // No snapshot of that time: the name is not found
                // (smbtorture smb2.create.blob's timewarp case), as
                // Windows and Samba answer.
                if cp.timewarp && i <= cp.first_op + 1 && e == FsError::NotFound {
                    NtStatus::OBJECT_NAME_NOT_FOUND
                } else if i + usize::from(cp.stream.is_some()) < cp.final_op
                    && matches!(e, FsError::NotFound | FsError::NotDir)
                {
                    NtStatus::OBJECT_PATH_NOT_FOUND
                } else {
                    fs_status(e)
                },
            );
        }
        let (attrs, created) = match results.get(last) {
            Some(Ok(OpOutput::Object { attrs, created, .. })) => (attrs.clone(), *created),
            Some(Ok(OpOutput::Found { attrs, .. })) => (attrs.clone(), false),
            _ => return Err(NtStatus::INVALID_PARAMETER),
        };
        // The names as stored: a caseless lookup may have matched another
        // case (MS-FSCC 2.1.5 names are case-insensitive for SMB clients).
        let real = |i: usize, asked: &str| match results.get(i) {
            Some(Ok(OpOutput::Found { name, .. })) => name.clone(),
            _ => asked.to_string(),
        };
        let asked: Vec<&str> = if cp.path.is_empty() { Vec::new() } else { cp.path.split('\\').collect() };
        let mut real_path: Vec<String> = Vec::with_capacity(asked.len());
        for (k, c) in asked.iter().enumerate() {
            real_path.push(real(cp.first_op + k, c));
        }
        let leaf_name = real_path.last().cloned().unwrap_or_default();
        let real_path = real_path.join("\\");
        let is_dir = attrs.ftype == FileType::Directory;
        if cp.options & opt::DIRECTORY_FILE != 0 && !is_dir {
            return Err(NtStatus::NOT_A_DIRECTORY);
        }
        // A directory has no unnamed data stream (MS-FSA 2.1.5.1).
        if (cp.options & opt::NON_DIRECTORY_FILE != 0 || cp.data) && is_dir {
            return Err(NtStatus::FILE_IS_A_DIRECTORY);
        }
        let cred = self
            .sessions
            .get(&cp.session_id)
            .map(|s| s.cred.clone())
            .ok_or(NtStatus::USER_SESSION_DELETED)?;
        // The kept security (`acl::Stored`): its DACL and owner SID.
        let stored = match cp.acl_op.and_then(|i| results.get(i)) {
            Some(Ok(o)) => o.stored_security().map_err(|_| fs_status(FsError::Io))?,
            _ => None,
        };
        let token = duet_fs::acl::Token::unix(cred.uid, cred.gid, &cred.groups);
        let owner = stored.as_ref().map_or_else(|| duet_fs::acl::Sid::unix_user(attrs.uid), |s| s.owner_or(attrs.uid));
        let maximal = match stored.as_ref().and_then(|s| Some((s, s.effective_dacl()?))) {
            // The creator of an object gets the access it asked for
            // (MS-FSA 2.1.5.1.1), whatever DACL it inherited.
            _ if created => access::FILE_ALL_ACCESS,
            // A stored DACL decides (MS-DTYP 2.5.3.2 AccessCheck; the
            // owner, the stored owner SID if any, always holds
            // READ_CONTROL and WRITE_DAC); root keeps its bypass, a
            // read-only share its limit.
            Some((s, dacl)) if cred.uid != 0 => {
                let mut m = duet_fs::acl::granted(&token, Some(&owner), Some(dacl));
                // What the parent grants (MS-FSA 2.1.5.1.2.1): listing it
                // (here: having looked the name up in it) gives
                // FILE_READ_ATTRIBUTES, deleting its children
                // (FILE_DELETE_CHILD, or where neither DACL says: write and
                // search on it) gives DELETE.
                m |= access::FILE_READ_ATTRIBUTES;
                let removable = if cp.stream.is_none() {
                    may_remove_name(&cred, cp, results, Some(s), attrs.uid)
                } else {
                    parent_allows(&cred, cp, results, 3)
                };
                if removable == Some(true) {
                    m |= access::DELETE;
                }
                if cp.read_only {
                    m &= !access::WRITE_BITS;
                }
                m
            }
            // The mode decides; a stored owner SID the caller holds (a
            // file owned by Everyone, say) adds the owner's READ_CONTROL
            // and WRITE_DAC (MS-DTYP 2.5.3.2).
            _ if cred.uid != 0 && stored.as_ref().is_some_and(|s| s.owner.is_some()) && token.has(&owner) => {
                maximal_access(&cred, &attrs, cp.read_only) | access::READ_CONTROL | access::WRITE_DAC
            }
            _ => maximal_access(&cred, &attrs, cp.read_only),
        };
        let desired = access::expand(cp.desired);
        let wanted = desired & !access::MAXIMUM_ALLOWED;
        if wanted & !maximal != 0 {
            return Err(NtStatus::ACCESS_DENIED);
        }
        let granted = if desired & access::MAXIMUM_ALLOWED != 0 {
            maximal
        } else {
            wanted
        };
        let doc = fp
            .pending_opens
            .get(&slot)
            .is_some_and(|p| p.delete_on_close);
        // Removing a name needs DELETE on it or FILE_DELETE_CHILD on its
        // directory, or where neither DACL says, write and search on the
        // directory (`may_remove_name`; the engine checks it again at the
        // removal). The removal happens at CLOSE, which cannot report a
        // failure, so an open that asks for DELETE where it cannot have it
        // is refused here (MS-SMB2 3.3.5.9: ACCESS_DENIED). For a name
        // directly in the share root, the root's attributes come from
        // `root_attrs_op`.
        if (wanted & access::DELETE != 0 || doc) && !cp.name.is_empty() {
            // A stream is deleted by changing its file: write permission
            // on the file.
            let allowed = if cp.stream.is_some() {
                parent_allows(&cred, cp, results, 2)
            } else {
                may_remove_name(&cred, cp, results, stored.as_ref(), attrs.uid)
            };
            if allowed == Some(false) {
                return Err(NtStatus::ACCESS_DENIED);
            }
        }
        if doc && attrs.dos_attrs & dos::READONLY != 0 {
            return Err(NtStatus::CANNOT_DELETE);
        }
        if self.opens.len() >= self.cfg.max_opens {
            return Err(NtStatus::TOO_MANY_OPENED_FILES);
        }
        let parent = if cp.name.is_empty() {
            cp.root
        } else if cp.final_op > cp.first_op {
            result_attrs(results, cp.final_op - 1)
                .map(|a| a.id)
                .unwrap_or(cp.root)
        } else {
            cp.root
        };
        let key_path = stream_key_path(&real_path, cp.stream.as_deref());
        let id = self.new_file_id();
        if !self.cfg.share_modes.acquire(
            attrs.id,
            (self.conn_key, id),
            granted,
            cp.share_access,
            path_key(cp.root, &key_path),
            parent,
        ) {
            return Err(NtStatus::SHARING_VIOLATION);
        }
        self.opens.insert(
            id,
            Open {
                session_id: cp.session_id,
                tree_id: cp.tree_id,
                node: attrs.id,
                parent,
                name: match &cp.stream {
                    Some(sname) => format!(":{}", real(cp.final_op, sname)),
                    None if cp.name.is_empty() => String::new(),
                    None => leaf_name,
                },
                // The stream's name in the case asked (a stream is opened
                // by its created name's case; FileNormalizedNameInformation).
                path: match &cp.stream {
                    Some(_) => format!("{real_path}:{}", real(cp.final_op, cp.stream.as_deref().unwrap_or_default())),
                    None => key_path,
                },
                is_dir,
                granted,
                options: cp.options,
                delete_on_close: doc,
                position: 0,
                dir: None,
                oplock: 0,
                grant: None,
                breaking_to: None,
                lease: None,
                durable: None,
                app_instance: None,
                written: false,
                resilient_ms: None,
                lock_seq: [super::state::NO_LOCK_SEQ; 64],
            },
        );
        // NFSv4 delegations of the file that this open contradicts are
        // recalled once the node is known (a path no SMB client has open
        // names no node before the batch); the open does not wait for the
        // recall (issue 13, `nfs/server/v4/deleg.rs`).
        {
            let why = match cp.disposition {
                disp::OVERWRITE | disp::OVERWRITE_IF | disp::SUPERSEDE => duet_locks::Conflict::Write,
                _ => duet_locks::Conflict::SmbOpen,
            };
            let locks = self.cfg.share_modes.locks().clone();
            let opener = super::sharemode::holder((self.conn_key, id));
            let share = duet_locks::Share::smb(granted, cp.share_access);
            let (breaks, _) = locks.table().break_delegations(attrs.id, &opener, share, why, fp.now_ns);
            self.outbox.extend(breaks.into_iter().map(super::Event::Recall));
        }
        // Leases on files; on directories v2 leases only, read and handle
        // caching at most (directory leasing, MS-SMB2 3.3.5.9.11); an
        // oplock on a file when no lease was asked for.
        let mut lease_resp = None;
        let oplock = if is_dir {
            match &cp.lease {
                Some(l) if l.v2.is_some() && cp.stream.is_none() => {
                    let key = path_key(cp.root, &cp.path);
                    let mut dl = *l;
                    dl.lease_state &= !u32::from(duet_locks::Level::W.0);
                    self.cfg.share_modes.note_directory_lease();
                    lease_resp = Some(self.grant_lease(attrs.id, id, &key, cp.session_id, &dl, attrs.nlink, fp.now_ns));
                    crate::smb2::create::oplock_level::LEASE
                }
                _ => 0,
            }
        } else if let Some(l) = &cp.lease {
            let key = path_key(cp.root, &stream_key_path(&cp.path, cp.stream.as_deref()));
            lease_resp = Some(self.grant_lease(attrs.id, id, &key, cp.session_id, l, attrs.nlink, fp.now_ns));
            crate::smb2::create::oplock_level::LEASE
        } else {
            self.grant_oplock(attrs.id, id, cp.oplock, fp.now_ns)
        };
        let action = if created {
            create_action::CREATED
        } else {
            match cp.disposition {
                disp::OVERWRITE | disp::OVERWRITE_IF => create_action::OVERWRITTEN,
                disp::SUPERSEDE => create_action::SUPERSEDED,
                _ => create_action::OPENED,
            }
        };
        let mut contexts = Vec::new();
        if cp.mxac {
            contexts.push(CreateContextResponse::MaximalAccess {
                query_status: 0,
                maximal_access: maximal,
            });
        }
        if cp.qfid {
            contexts.push(CreateContextResponse::OnDiskId {
                disk_file_id: attrs.id,
                volume_id: cp.root,
            });
        }
        // Durable (MS-SMB2 3.3.5.9.6 / 3.3.5.9.10): a file open with a
        // batch oplock or a lease with handle caching; the PERSISTENT flag
        // is not granted (no continuously available shares).
        let handle_cached = oplock == crate::smb2::create::oplock_level::BATCH
            || lease_resp
                .as_ref()
                .is_some_and(|l| l.lease_state & crate::smb2::create_context::Lease::HANDLE_CACHING != 0);
        if let Some(d) = cp.durable.filter(|_| !is_dir && handle_cached) {
            if let Some(o) = self.opens.get_mut(&id) {
                o.durable = Some(super::state::Durable { v2: d.v2, create_guid: d.create_guid, timeout_ms: d.timeout_ms });
                // 3.3.5.9.13: the AppInstanceId of a DH2Q open.
                if let Some(app) = cp.app_instance.filter(|_| d.v2) {
                    o.app_instance = Some(app);
                    self.cfg.share_modes.set_app_instance(app, (self.conn_key, id), cred.uid);
                }
            }
            contexts.push(if d.v2 {
                CreateContextResponse::DurableHandleV2 { timeout: d.timeout_ms, flags: 0 }
            } else {
                CreateContextResponse::DurableHandle
            });
        }
        if let Some(l) = lease_resp {
            contexts.push(CreateContextResponse::Lease(l));
        }
        // A stream answers with its file's times and attributes.
        let shown = match cp.stream {
            Some(_) => result_attrs(results, cp.final_op - 1).unwrap_or(&attrs).clone(),
            None => attrs.clone(),
        };
        let resp = CreateResponse {
            oplock_level: oplock,
            flags: 0,
            create_action: action,
            creation_time: to_filetime(shown.btime),
            last_access_time: to_filetime(shown.atime),
            last_write_time: to_filetime(shown.mtime),
            change_time: to_filetime(shown.ctime),
            allocation_size: smb_sizes(&attrs).1,
            end_of_file: smb_sizes(&attrs).0,
            file_attributes: shown.smb_attributes(),
            file_id: FileId {
                persistent: id,
                volatile: id,
            },
            create_contexts: contexts,
        };
        Ok((NtStatus::SUCCESS, body(&Response::Create(resp)), id))
    }

    // ---- CLOSE, FLUSH, READ, WRITE -------------------------------------

    pub(super) fn plan_close(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        flags: u16,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        let postquery = flags & CloseRequest::POSTQUERY_ATTRIB != 0;
        if let Err(s) = self.begin(fp, hdr) {
            return done(s);
        }
        // Only a post-query needs the engine; a plain CLOSE of a table open
        // costs no back-end operation.
        let close_op = postquery.then(|| fp.push(Op::Close { obj: v.obj }));
        let mut closed = None;
        let mut remove = v.delete_on_close && !v.name.is_empty();
        if let Target::Table(id) = t {
            let path = self.cfg.share_modes.path_of((self.conn_key, id));
            let o = self.forget_open(id);
            if let Some(o) = &o {
                self.break_parent_on_close(o, fp.now_ns);
                // Another open of the same file keeps it; the last one
                // deletes (MS-FSA 2.1.5.4), whichever connection holds it.
                if let Some(other) = self.opens.values_mut().find(|x| x.node == o.node) {
                    other.delete_on_close |= remove;
                    if remove {
                        let d = super::sharemode::PendingDelete {
                            parent: o.parent,
                            name: o.name.clone(),
                            is_dir: o.is_dir,
                            path: path.clone().unwrap_or_default(),
                        };
                        self.cfg.share_modes.defer_delete(o.node, d);
                        // A watch on it learns of the pending delete
                        // (notify.rs), on any connection.
                        self.notify_delete_pending(o.node);
                        self.outbox.push(super::Event::DeletePending { node: o.node, from: self.conn_key });
                    }
                    remove = false;
                } else if remove && self.cfg.share_modes.open_anywhere_or_stream(o.node, path.as_deref().unwrap_or("")) {
                    let d = super::sharemode::PendingDelete {
                        parent: o.parent,
                        name: o.name.clone(),
                        is_dir: o.is_dir,
                        path: path.unwrap_or_default(),
                    };
                    self.cfg.share_modes.defer_delete(o.node, d);
                    self.notify_delete_pending(o.node);
                    self.outbox.push(super::Event::DeletePending { node: o.node, from: self.conn_key });
                    remove = false;
                } else if remove {
                    self.cfg.share_modes.forget_pending_delete(o.node);
                } else if let Some(d) = self.cfg.share_modes.take_pending_delete(o.node).or_else(|| {
                    // A named stream's open kept its file delete-pending.
                    o.name.starts_with(':').then(|| self.cfg.share_modes.take_pending_delete(o.parent)).flatten()
                }) {
                    // The last open of a file another open left
                    // delete-pending.
                    fp.push(removal(ObjRef::Id(d.parent), &d.name, Some(d.is_dir)));
                }
            }
            closed = o.map(Box::new);
        }
        if remove {
            fp.push(removal(v.parent, &v.name, v.is_dir));
        }
        Plan::Fs(FsPlan::Close {
            target: t,
            closed,
            close_op,
            postquery,
        })
    }

    /// FileRenameInformation of a named stream (MS-FSCC 2.4.42, MS-FSA
    /// 2.1.5.14.11): the target is `:name[:$DATA]`, a stream of the same
    /// file, or `::$DATA`, the file's unnamed stream (the stream's data
    /// becomes the file's: `Op::RenameStreamToData`). Renaming the unnamed
    /// stream to a named one is not built (NOT_SUPPORTED). A target naming
    /// a path is INVALID_PARAMETER, but a stream of the handle's own file
    /// (`base:stream`, a file this handle holds open) is SHARING_VIOLATION,
    /// as Windows answers (smbtorture smb2.streams.rename2).
    #[allow(clippy::too_many_arguments)]
    fn plan_stream_rename(
        &mut self,
        fp: &mut FramePlan,
        t: Target,
        v: &View,
        target: &str,
        replace: bool,
        ro: bool,
        root: NodeId,
    ) -> Result<Plan, NtStatus> {
        use crate::smb2::stream_name::{parse, Stream};
        if v.granted & access::DELETE == 0 {
            return Err(NtStatus::ACCESS_DENIED);
        }
        let (file, stream) = parse(target)?;
        // The open's path from the share root (a stream's: `file:stream`).
        let open_path = match t {
            Target::Table(id) => self.opens.get(&id).map(|o| o.path.clone()),
            Target::Pending(_) => None,
        };
        let base = open_path.as_deref().map(|p| p.split(':').next().unwrap_or_default().to_string());
        if !file.is_empty() {
            let own = base.as_deref().is_some_and(|b| {
                v.name.starts_with(':') && file.trim_start_matches('\\').to_lowercase() == b.to_lowercase()
            });
            return Err(if own && stream != Stream::Default {
                NtStatus::SHARING_VIOLATION
            } else {
                NtStatus::INVALID_PARAMETER
            });
        }
        let Some(from) = v.name.strip_prefix(':') else {
            return Err(NtStatus::NOT_SUPPORTED);
        };
        match stream {
            Stream::Named(to) => {
                if ro {
                    return Err(NtStatus::ACCESS_DENIED);
                }
                let op = fp.push(Op::RenameStream { obj: v.parent, name: from.to_string(), new_name: to.clone(), replace });
                Ok(Plan::Fs(FsPlan::SetInfo { target: t, op: None, kind: SetKind::StreamRename { op, name: to, root } }))
            }
            // An empty name.
            Stream::Default => Err(NtStatus::INVALID_PARAMETER),
            Stream::Data => {
                // A stream opened earlier in the same compound: its node
                // and the file's opens are not known before the batch
                // runs, so the checks below cannot be made (not built).
                let (Target::Table(id), Some(base), Some(node), ObjRef::Id(file_node)) = (t, base, v.node, v.parent)
                else {
                    return Err(NtStatus::NOT_SUPPORTED);
                };
                if ro {
                    return Err(NtStatus::ACCESS_DENIED);
                }
                // The stream goes and the file's data changes under it:
                // another open of the stream, or any open of the file's
                // unnamed stream (by either protocol), refuses it.
                let key = (self.conn_key, id);
                if self.cfg.share_modes.others(node, key) > 0 || self.cfg.share_modes.others(file_node, key) > 0 {
                    return Err(NtStatus::SHARING_VIOLATION);
                }
                let comps = split_path(&base)?;
                let first_lookup = fp.batch.as_ref().map_or(0, |b| b.ops.len());
                let mut dir = ObjRef::Id(root);
                for c in comps.iter().take(comps.len().saturating_sub(1)) {
                    dir = ObjRef::Result(fp.push(Op::LookupCaseless { dir, name: c.clone() }));
                }
                let op = fp.push(Op::RenameStreamToData { obj: v.parent, name: from.to_string(), replace });
                Ok(Plan::Fs(FsPlan::SetInfo {
                    target: t,
                    op: None,
                    kind: SetKind::StreamToData { first_lookup, op, path: comps.join("\\"), root },
                }))
            }
        }
    }

    /// FLUSH (MS-SMB2 3.3.5.11): on a `protocol` share everything answered
    /// before is made durable before the reply (the frame's batch carries
    /// `flush`); elsewhere every reply already meant durable.
    pub(super) fn plan_flush(&mut self, fp: &mut FramePlan, hdr: &Header, t: Target) -> Plan {
        let lazy_share = self.tree_of(hdr).is_ok_and(|(_, t)| t.share.protocol_durability);
        match t {
            Target::Table(id) => {
                let (granted, node) = self.opens.get(&id).map_or((0, 0), |o| (o.granted, o.node));
                if granted & (access::FILE_WRITE_DATA | access::FILE_APPEND_DATA) == 0 {
                    return done(NtStatus::ACCESS_DENIED);
                }
                if !lazy_share {
                    return ok(Response::Flush(Default::default()));
                }
                fp.flush = true;
                let Ok(cred) = self.tree_of(hdr).map(|(s, _)| s.cred.clone()) else {
                    return done(NtStatus::USER_SESSION_DELETED);
                };
                match fp.batch_for(hdr.session_id, &cred, true) {
                    Some(_) => {
                        fp.push(Op::GetAttr { obj: ObjRef::Id(node) });
                        Plan::Fs(FsPlan::Flush { target: t })
                    }
                    // The frame's batch (another session's) carries the flush.
                    None => ok(Response::Flush(Default::default())),
                }
            }
            Target::Pending(_) => {
                fp.flush |= lazy_share;
                Plan::Fs(FsPlan::Flush { target: t })
            }
        }
    }

    pub(super) fn plan_read(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        r: &ReadRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if r.length > self.cfg.max_read_size {
            return done(NtStatus::INVALID_PARAMETER);
        }
        // MS-FSA 2.1.5.2: offsets past 2^63-1 are invalid.
        if r.offset.checked_add(u64::from(r.length)).is_none_or(|e| e > i64::MAX as u64) {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if self.dialect().unwrap_or(0) > crate::smb2::negotiate::dialect::SMB2_0_2
            && u64::from(hdr.credit_charge.max(1)) * 65536 < u64::from(r.length)
        {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if v.granted & (access::FILE_READ_DATA | access::FILE_EXECUTE) == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        if v.is_dir == Some(true) {
            return done(NtStatus::INVALID_DEVICE_REQUEST);
        }
        if let (Some(file), Some(node)) = (v.file, v.node) {
            if self.lock_conflict(file, node, r.offset, u64::from(r.length), false) {
                return done(NtStatus::FILE_LOCK_CONFLICT);
            }
        }
        if let Err(s) = self.begin(fp, hdr) {
            return done(s);
        }
        let op = fp.push(Op::Read {
            obj: v.obj,
            offset: r.offset,
            len: u64::from(r.length),
        });
        Plan::Fs(FsPlan::Read {
            target: t,
            op,
            offset: r.offset,
            min_count: r.minimum_count,
            len: r.length,
        })
    }

    pub(super) fn plan_write(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        w: &WriteRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if w.data.len() > self.cfg.max_write_size as usize {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if self.dialect().unwrap_or(0) > crate::smb2::negotiate::dialect::SMB2_0_2
            && u64::from(hdr.credit_charge.max(1)) * 65536 < w.data.len() as u64
        {
            return done(NtStatus::INVALID_PARAMETER);
        }
        // Offset -1 appends only on an append-only open; otherwise a range
        // past INT64_MAX, or one ending beyond the largest file NTFS allows
        // (MAXFILESIZE 0xfffffff0000), is invalid (smbtorture
        // smb2.rw.invalid).
        let append = w.offset == u64::MAX
            && v.granted & access::FILE_APPEND_DATA != 0
            && v.granted & access::FILE_WRITE_DATA == 0;
        let end = w.offset.saturating_add(w.data.len() as u64);
        if !append && (end > i64::MAX as u64 || (end > MAX_FILE_SIZE && !w.data.is_empty())) {
            return done(NtStatus::INVALID_PARAMETER);
        }
        // Either right lets a handle write (MS-FSA 2.1.5.4 refuses only
        // when both are missing); like Samba, an append-only handle writes
        // where it says.
        if v.granted & (access::FILE_APPEND_DATA | access::FILE_WRITE_DATA) == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        if v.is_dir == Some(true) {
            return done(NtStatus::INVALID_DEVICE_REQUEST);
        }
        if let Some(file) = v.file {
            self.break_for_write(file, fp.now_ns);
            if let Some(o) = self.opens.get_mut(&file) {
                o.written = true;
            }
        }
        // WRITE_THROUGH (MS-SMB2 2.2.21), or an open made with
        // FILE_WRITE_THROUGH: durable before the reply on any share.
        let open_through = v.file.and_then(|f| self.opens.get(&f)).is_some_and(|o| o.options & opt::WRITE_THROUGH != 0);
        fp.durable |= w.flags & WriteRequest::WRITE_THROUGH != 0 || open_through;
        if let (Some(file), Some(node), false) = (v.file, v.node, append) {
            if self.lock_conflict(file, node, w.offset, w.data.len() as u64, true) {
                return done(NtStatus::FILE_LOCK_CONFLICT);
            }
        }
        match self.begin(fp, hdr) {
            Ok((_, true, _)) => return done(NtStatus::ACCESS_DENIED),
            Ok(_) => {}
            Err(s) => return done(s),
        }
        if w.data.is_empty() {
            // Nothing to write, at any valid offset (smbtorture
            // smb2.rw.invalid writes nothing at INT64_MAX).
            return ok(Response::Write(WriteResponse {
                count: 0,
                remaining: 0,
            }));
        }
        let op = fp.push(Op::Write {
            obj: v.obj,
            offset: if append { 0 } else { w.offset },
            data: WriteData::Bytes(w.data.to_vec()),
            append,
        });
        Plan::Fs(FsPlan::Write { target: t, op })
    }

    // ---- IOCTL: server-side copy (MS-SMB2 3.3.5.15.5, 3.3.5.15.6) -----

    /// FSCTL_SRV_REQUEST_RESUME_KEY (MS-SMB2 3.3.5.15.5): a key naming
    /// this open for a later FSCTL_SRV_COPYCHUNK. The key is the open's id,
    /// its node and the first half of the server GUID, so a made-up key
    /// names nothing (`copy_chunk_bad_key`).
    pub(super) fn plan_resume_key(&mut self, t: Target, io: &IoctlRequest<'_>) -> Plan {
        let Target::Table(id) = t else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        let Some(o) = self.opens.get(&id) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if (io.max_output_response as usize) < RESUME_KEY_RESPONSE_SIZE {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let mut out = Vec::with_capacity(RESUME_KEY_RESPONSE_SIZE);
        ResumeKeyResponse {
            resume_key: self.resume_key(id, o.node),
        }
        .encode(&mut out);
        // Windows (and Samba) follow ContextLength 0 with four zero bytes,
        // and Samba's client decodes them: send them when they fit.
        if io.max_output_response as usize >= RESUME_KEY_RESPONSE_SIZE + 4 {
            out.extend_from_slice(&[0; 4]);
        }
        ioctl_reply(NtStatus::SUCCESS, io.ctl_code, io.file_id, &out)
    }

    fn resume_key(&self, id: u64, node: NodeId) -> [u8; 24] {
        let mut key = [0u8; 24];
        key[..8].copy_from_slice(&id.to_le_bytes());
        key[8..16].copy_from_slice(&node.to_le_bytes());
        key[16..].copy_from_slice(&self.cfg.server_guid[..8]);
        key
    }

    /// FSCTL_SRV_COPYCHUNK and FSCTL_SRV_COPYCHUNK_WRITE (MS-SMB2
    /// 3.3.5.15.6): every chunk becomes an `Op::Copy` of the frame's batch
    /// (one commit for the whole request). The engine reads the source
    /// and writes the target, chunk after chunk.
    pub(super) fn plan_copychunk(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        io: &IoctlRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if (io.max_output_response as usize) < COPYCHUNK_RESPONSE_SIZE {
            return done(NtStatus::INVALID_PARAMETER);
        }
        // Over a limit: STATUS_INVALID_PARAMETER with the limits in the
        // response (ServerSideCopyMaxNumberofChunks, ...MaxChunkSize,
        // ...MaxDataSize).
        let limits = || {
            let r = CopyChunkResponse {
                chunks_written: CopyChunkCopy::MAX_CHUNKS as u32,
                chunk_bytes_written: COPYCHUNK_MAX_CHUNK,
                total_bytes_written: COPYCHUNK_MAX_TOTAL,
            };
            copychunk_reply(NtStatus::INVALID_PARAMETER, io, r)
        };
        let cc = match CopyChunkCopy::decode(io.input) {
            Ok(c) => c,
            Err(DecodeError::LimitExceeded { .. }) => return limits(),
            Err(_) => return done(NtStatus::INVALID_PARAMETER),
        };
        let total: u64 = cc.chunks.iter().map(|c| u64::from(c.length)).sum();
        if cc
            .chunks
            .iter()
            .any(|c| c.length == 0 || c.length > COPYCHUNK_MAX_CHUNK)
            || total > u64::from(COPYCHUNK_MAX_TOTAL)
        {
            return limits();
        }
        let src_id = u64::from_le_bytes(cc.source_key[..8].try_into().unwrap_or_default());
        let src = match self.opens.get(&src_id) {
            Some(o) if self.resume_key(src_id, o.node) == cc.source_key => o,
            _ => return done(NtStatus::OBJECT_NAME_NOT_FOUND),
        };
        if src.is_dir || v.is_dir == Some(true) {
            return done(NtStatus::INVALID_DEVICE_REQUEST);
        }
        let mut need = access::FILE_WRITE_DATA;
        if io.ctl_code == ctl_code::FSCTL_SRV_COPYCHUNK {
            // Only the _WRITE variant may target a write-only open.
            need |= access::FILE_READ_DATA;
        }
        // The source needs read or execute (Windows and Samba let an
        // execute-only handle be copied from: smbtorture's bad_access).
        if src.granted & (access::FILE_READ_DATA | access::FILE_EXECUTE) == 0 || v.granted & need != need {
            return done(NtStatus::ACCESS_DENIED);
        }
        let src_node = src.node;
        for c in &cc.chunks {
            let len = u64::from(c.length);
            let src_locked = self.lock_conflict(src_id, src_node, c.source_offset, len, false);
            let dst_locked = match (v.file, v.node) {
                (Some(f), Some(n)) => self.lock_conflict(f, n, c.target_offset, len, true),
                _ => false,
            };
            if src_locked || dst_locked {
                return copychunk_reply(NtStatus::FILE_LOCK_CONFLICT, io, CopyChunkResponse::default());
            }
        }
        match self.begin(fp, hdr) {
            Ok((_, true, _)) => return done(NtStatus::ACCESS_DENIED),
            Ok(_) => {}
            Err(s) => return done(s),
        }
        if cc.chunks.is_empty() {
            return copychunk_reply(NtStatus::SUCCESS, io, CopyChunkResponse::default());
        }
        let ops = cc
            .chunks
            .iter()
            .map(|c| {
                fp.push(Op::Copy {
                    src: ObjRef::Id(src_node),
                    src_offset: c.source_offset,
                    dst: v.obj,
                    dst_offset: c.target_offset,
                    len: u64::from(c.length),
                })
            })
            .collect();
        Plan::Fs(FsPlan::CopyChunk {
            target: t,
            ops,
            ctl_code: io.ctl_code,
            file_id: io.file_id,
        })
    }

    /// FSCTL_SRV_ENUMERATE_SNAPSHOTS (MS-SMB2 2.2.31 / 3.3.5.15.1): the
    /// share's snapshots as Previous Versions, one `Op::ListSnapshots`,
    /// answered as SRV_SNAPSHOT_ARRAY (2.2.32.2) of `@GMT-` tokens.
    pub(super) fn plan_enumerate_snapshots(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        io: &IoctlRequest<'_>,
    ) -> Plan {
        if io.flags & IoctlRequest::IS_FSCTL == 0 {
            return done(NtStatus::INVALID_DEVICE_REQUEST);
        }
        // MS-SMB2 3.3.5.15.1: room for at least the array's header.
        if io.max_output_response < 16 {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if self.view(fp, t).is_none() {
            return done(NtStatus::FILE_CLOSED);
        }
        let root = match self.begin(fp, hdr) {
            Ok((root, _, _)) => root,
            Err(s) => return done(s),
        };
        // The share's snapshots, whichever of its files the open names.
        let op = fp.push(Op::ListSnapshots { obj: ObjRef::Id(root) });
        Plan::Fs(FsPlan::Snapshots { target: t, op, ctl_code: io.ctl_code, file_id: io.file_id, max_out: io.max_output_response })
    }

    /// FSCTL_DUPLICATE_EXTENTS_TO_FILE (MS-FSCC 2.3.8, MS-SMB2 3.3.5.15,
    /// MS-FSA 2.1.5.10.8): the target open clones `ByteCount` bytes of the
    /// source open (DUPLICATE_EXTENTS_DATA names it by its FileId, in this
    /// session and tree) by reference, one `Op::Clone`. Offsets and count
    /// are multiples of the cluster size (4096, as FileFsSizeInformation
    /// reports); the source range lies within the source's end of file.
    pub(super) fn plan_dup_extents(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        io: &IoctlRequest<'_>,
    ) -> Plan {
        const CLUSTER: u64 = 4096;
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        // DUPLICATE_EXTENTS_DATA: FileHandle (SMB2_FILEID, 16 bytes),
        // SourceFileOffset, TargetFileOffset, ByteCount (8 bytes each).
        if io.input.len() < 40 {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let le = |at: usize| u64::from_le_bytes(io.input[at..at + 8].try_into().unwrap_or_default());
        let (persistent, volatile) = (le(0), le(8));
        let (src_offset, dst_offset, count) = (le(16), le(24), le(32));
        let src = match self.opens.get(&volatile) {
            Some(o)
                if persistent == volatile
                    && o.session_id == hdr.session_id
                    && Some(o.tree_id) == hdr.tree_id() =>
            {
                o
            }
            _ => return done(NtStatus::INVALID_HANDLE),
        };
        if src.is_dir || v.is_dir == Some(true) {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if src.granted & access::FILE_READ_DATA == 0 || v.granted & access::FILE_WRITE_DATA == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        if src_offset % CLUSTER != 0 || dst_offset % CLUSTER != 0 || count % CLUSTER != 0 {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if src_offset.checked_add(count).is_none() || dst_offset.checked_add(count).is_none() {
            return done(NtStatus::INVALID_PARAMETER);
        }
        // Byte-range locks do not stop a duplication (as Windows and
        // smbtorture's dup_extents_src_lock and _dest_lock expect): it
        // changes the target's allocation, not through its data path.
        let src_node = src.node;
        match self.begin(fp, hdr) {
            Ok((_, true, _)) => return done(NtStatus::ACCESS_DENIED),
            Ok(_) => {}
            Err(s) => return done(s),
        }
        if count == 0 {
            return Plan::Done { status: NtStatus::SUCCESS, body: ioctl_body(io.ctl_code, io.file_id, &[]) };
        }
        let op = fp.push(Op::Clone {
            src: ObjRef::Id(src_node),
            src_offset,
            dst: v.obj,
            dst_offset,
            len: count,
            // The target must be large enough already (MS-FSCC 2.3.8: the
            // client extends it first); past its end nothing is done.
            extend: false,
        });
        Plan::Fs(FsPlan::DupExtents { target: t, op, ctl_code: io.ctl_code, file_id: io.file_id })
    }

    /// FSCTL_SET_SPARSE (MS-FSCC 2.3.64, MS-FSA 2.1.5.10.29): no input sets
    /// the file sparse; FILE_SET_SPARSE_BUFFER's first byte (SetSparse)
    /// sets (nonzero) or clears (zero) it, bytes past it are ignored (as
    /// Windows does). A directory is STATUS_INVALID_PARAMETER. The flag is
    /// the node's stored FILE_ATTRIBUTE_SPARSE_FILE (`dos::SPARSE_FILE`).
    pub(super) fn plan_set_sparse(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        io: &IoctlRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if v.is_dir == Some(true) {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if v.granted & (access::FILE_WRITE_DATA | access::FILE_WRITE_ATTRIBUTES | access::FILE_APPEND_DATA) == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        let set = io.input.first().is_none_or(|&b| b != 0);
        let bits = dos::ONLY_SPARSE | if set { dos::SPARSE_FILE } else { 0 };
        self.plan_dos_bit(fp, hdr, t, v.obj, io, bits)
    }

    /// What FSCTL_SET_SPARSE and FSCTL_SET_COMPRESSION end with: one
    /// `Op::SetAttr` of `bits` (an `ONLY_*` marker with the bit's new
    /// value) on `obj`, the change time kept, no output; refused on a
    /// read-only tree.
    fn plan_dos_bit(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        obj: ObjRef,
        io: &IoctlRequest<'_>,
        bits: u32,
    ) -> Plan {
        match self.begin(fp, hdr) {
            Ok((_, true, _)) => return done(NtStatus::ACCESS_DENIED),
            Ok(_) => {}
            Err(s) => return done(s),
        }
        let op = fp.push(Op::SetAttr {
            obj,
            attrs: SetAttrs { dos_attrs: Some(bits), ctime: Some(duet_fs::CTIME_KEEP), ..Default::default() },
        });
        Plan::Fs(FsPlan::NoOutput { target: t, op, ctl_code: io.ctl_code, file_id: io.file_id })
    }

    /// FSCTL_GET_COMPRESSION / FSCTL_SET_COMPRESSION (MS-FSCC 2.3.22,
    /// 2.3.67; MS-FSA 2.1.5.10.7, 2.1.5.10.36). The volume compresses
    /// (FILE_FILE_COMPRESSION, MS-FSCC 2.5.1): the state is the node's
    /// stored FILE_ATTRIBUTE_COMPRESSED (`dos::COMPRESSED`), on files and
    /// directories (a directory's bit is inherited by what is created in
    /// it). duet compresses a file's chunks with LZ4 when they are
    /// destaged; the wire knows only COMPRESSION_FORMAT_LZNT1, so a
    /// compressed file reports that format (the client never sees the
    /// stored bytes).
    ///
    /// GET (a USHORT CompressionState out) needs no access right on the
    /// handle (smbtorture's compress_perms opens without
    /// FILE_READ_ATTRIBUTES, FILE_READ_DATA, or with SYNCHRONIZE only):
    /// LZNT1 when the bit is set, NONE otherwise; room for under 2 bytes of
    /// output is STATUS_INVALID_PARAMETER. SET (a USHORT in): NONE clears
    /// the bit, DEFAULT and LZNT1 set it, any other value or an input under
    /// 2 bytes is STATUS_INVALID_PARAMETER; the handle needs FILE_WRITE_DATA
    /// (FILE_ADD_FILE on a directory; FILE_WRITE_ATTRIBUTES alone is
    /// STATUS_ACCESS_DENIED, as Windows answers). Changing the bit of a
    /// file whose data is in chunks queues their rewrite
    /// (`DataOp::Recompress`, in the state machine).
    pub(super) fn plan_compression(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        io: &IoctlRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if io.ctl_code == ctl_code::FSCTL_GET_COMPRESSION {
            if io.max_output_response < 2 {
                return done(NtStatus::INVALID_PARAMETER);
            }
            if let Err(s) = self.begin(fp, hdr) {
                return done(s);
            }
            let op = fp.push(Op::GetAttr { obj: v.obj });
            return Plan::Fs(FsPlan::GetCompression { target: t, op, ctl_code: io.ctl_code, file_id: io.file_id });
        }
        let Some(b) = io.input.get(..2) else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        let set = match u16::from_le_bytes([b[0], b[1]]) {
            compression_format::NONE => false,
            compression_format::DEFAULT | compression_format::LZNT1 => true,
            _ => return done(NtStatus::INVALID_PARAMETER),
        };
        if v.granted & access::FILE_WRITE_DATA == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        let bits = dos::ONLY_COMPRESSED | if set { dos::COMPRESSED } else { 0 };
        self.plan_dos_bit(fp, hdr, t, v.obj, io, bits)
    }

    /// FSCTL_FILE_LEVEL_TRIM (MS-FSCC 2.3.73 FILE_LEVEL_TRIM: Key, NumRanges,
    /// then NumRanges FILE_LEVEL_TRIM_RANGE of Offset and Length, u64 each;
    /// MS-FSA 2.1.5.10.13): each range within the end of file is
    /// deallocated (`Op::ZeroRange`: it reads as zeros after), the size
    /// never changes. Short input, more ranges than it holds, a directory:
    /// STATUS_INVALID_PARAMETER; without write access ACCESS_DENIED; at
    /// most [`MAX_TRIM_RANGES`] ranges.
    pub(super) fn plan_trim(&mut self, fp: &mut FramePlan, hdr: &Header, t: Target, io: &IoctlRequest<'_>) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        let input = io.input;
        if input.len() < 8 || v.is_dir == Some(true) {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let n = u32::from_le_bytes([input[4], input[5], input[6], input[7]]) as usize;
        if n > MAX_TRIM_RANGES || input.len() < 8 + 16 * n {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if v.granted & access::FILE_WRITE_DATA == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        let mut ranges = Vec::with_capacity(n);
        for i in 0..n {
            let at = 8 + 16 * i;
            let mut w = [0u8; 8];
            w.copy_from_slice(&input[at..at + 8]);
            let offset = u64::from_le_bytes(w);
            w.copy_from_slice(&input[at + 8..at + 16]);
            let len = u64::from_le_bytes(w);
            if offset.checked_add(len).is_none_or(|e| e > i64::MAX as u64) {
                return done(NtStatus::INVALID_PARAMETER);
            }
            ranges.push((offset, len));
        }
        if let (Some(file), Some(node)) = (v.file, v.node) {
            if ranges.iter().any(|&(o, l)| l > 0 && self.lock_conflict(file, node, o, l, true)) {
                return done(NtStatus::FILE_LOCK_CONFLICT);
            }
        }
        match self.begin(fp, hdr) {
            Ok((_, true, _)) => return done(NtStatus::ACCESS_DENIED),
            Ok(_) => {}
            Err(s) => return done(s),
        }
        let ops = ranges
            .into_iter()
            .map(|(offset, len)| fp.push(Op::ZeroRange { obj: v.obj, offset, len }))
            .collect();
        Plan::Fs(FsPlan::Trim { target: t, ops, ctl_code: io.ctl_code, file_id: io.file_id })
    }

    /// FSCTL_SET_ZERO_DATA (MS-FSCC 2.3.85/2.3.86, MS-FSA 2.1.5.10.33):
    /// FILE_ZERO_DATA_INFORMATION (FileOffset, BeyondFinalZero, signed
    /// 64-bit each) zeros `[FileOffset, BeyondFinalZero)` within the end of
    /// file (one `Op::ZeroRange`; the size never changes). Short input, a
    /// negative value or FileOffset past BeyondFinalZero is
    /// STATUS_INVALID_PARAMETER.
    pub(super) fn plan_zero_data(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        io: &IoctlRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        let Some((offset, beyond)) = two_i64(io.input) else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        if offset < 0 || beyond < 0 || offset > beyond {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if v.is_dir == Some(true) {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if v.granted & access::FILE_WRITE_DATA == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        // Zeroing writes: another open's byte-range lock over the range
        // stops it as it stops a WRITE (MS-FSA 2.1.5.10.33).
        if let (Some(file), Some(node)) = (v.file, v.node) {
            if offset < beyond && self.lock_conflict(file, node, offset as u64, (beyond - offset) as u64, true) {
                return done(NtStatus::FILE_LOCK_CONFLICT);
            }
        }
        match self.begin(fp, hdr) {
            Ok((_, true, _)) => return done(NtStatus::ACCESS_DENIED),
            Ok(_) => {}
            Err(s) => return done(s),
        }
        if offset == beyond {
            return Plan::Done { status: NtStatus::SUCCESS, body: ioctl_body(io.ctl_code, io.file_id, &[]) };
        }
        let op = fp.push(Op::ZeroRange { obj: v.obj, offset: offset as u64, len: (beyond - offset) as u64 });
        Plan::Fs(FsPlan::NoOutput { target: t, op, ctl_code: io.ctl_code, file_id: io.file_id })
    }

    /// FSCTL_QUERY_ALLOCATED_RANGES (MS-FSCC 2.3.51/2.3.52, MS-FSA
    /// 2.1.5.10.22): FILE_ALLOCATED_RANGE_BUFFER in (FileOffset, Length,
    /// signed 64-bit each). One `Op::Allocated`: a sparse file answers its
    /// allocated ranges within the asked range and end of file (blocks of
    /// 64 KiB, as NTFS); a file not sparse answers the asked range within
    /// its end of file, whole (MS-FSA 2.1.5.10.22: a non-sparse file is
    /// allocated throughout). Short input, a negative offset or length, or
    /// their sum past i64::MAX is STATUS_INVALID_PARAMETER.
    pub(super) fn plan_allocated_ranges(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        io: &IoctlRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        let Some((offset, length)) = two_i64(io.input) else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        if offset < 0 || length < 0 || offset.checked_add(length).is_none() {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if v.is_dir == Some(true) {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if v.granted & access::FILE_READ_DATA == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        if let Err(s) = self.begin(fp, hdr) {
            return done(s);
        }
        let op = fp.push(Op::Allocated { obj: v.obj, offset: offset as u64, len: length as u64 });
        Plan::Fs(FsPlan::AllocatedRanges {
            target: t,
            op,
            ctl_code: io.ctl_code,
            file_id: io.file_id,
            range: (offset as u64, (offset + length) as u64),
            max_out: io.max_output_response,
        })
    }

    // ---- QUERY_DIRECTORY -----------------------------------------------

    pub(super) fn plan_query_directory(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        q: &QueryDirectoryRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if v.is_dir == Some(false) {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let Some(class) = DirectoryInfoClass::from_class(q.file_information_class) else {
            return done(NtStatus::INVALID_INFO_CLASS);
        };
        if q.output_buffer_length > self.cfg.max_transact_size {
            return done(NtStatus::INVALID_PARAMETER);
        }
        if (q.output_buffer_length as usize) < class.fixed_size() {
            return done(NtStatus::INFO_LENGTH_MISMATCH);
        }
        if v.granted & access::FILE_READ_DATA == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        let pattern = match text(&q.file_name) {
            p if p.is_empty() => "*".to_string(),
            p => p,
        };
        let restart =
            q.flags & (QueryDirectoryRequest::RESTART_SCANS | QueryDirectoryRequest::REOPEN) != 0;
        let old = v
            .file
            .and_then(|id| self.opens.get(&id))
            .and_then(|o| o.dir.clone());
        // SMB2_INDEX_SPECIFIED (MS-SMB2 2.2.33): resume after the entry
        // whose FileIndex (its position, see `DirState::pos`) is given.
        // Where the enumeration stands already, or only names that did not
        // match were passed since, it simply goes on; otherwise it starts
        // again from the first name and passes that many positions.
        let index = (q.flags & QueryDirectoryRequest::INDEX_SPECIFIED != 0 && !restart)
            .then_some(q.file_index);
        let mut resume_at = 0;
        let mut moved = false;
        let state = match old {
            Some(s) if !restart => match index {
                Some(k)
                    if !has_wildcards(&s.pattern)
                        || (s.returned_pos..=s.pos).contains(&k)
                        || k > MAX_INDEX_REREAD + 2 =>
                {
                    s
                }
                Some(k) => {
                    resume_at = k;
                    moved = true;
                    DirState {
                        pattern: s.pattern,
                        started: true,
                        returned_pos: k,
                        ..Default::default()
                    }
                }
                None => s,
            },
            _ => {
                if let Some(k) =
                    index.filter(|&k| has_wildcards(&pattern) && k <= MAX_INDEX_REREAD + 2)
                {
                    resume_at = k;
                    moved = true;
                }
                DirState {
                    pattern,
                    returned_pos: resume_at,
                    ..Default::default()
                }
            }
        };
        if state.eof {
            return done(NtStatus::NO_MORE_FILES);
        }
        if let Err(s) = self.begin(fp, hdr) {
            return done(s);
        }
        let single = q.flags & QueryDirectoryRequest::RETURN_SINGLE_ENTRY != 0;
        let exact = !has_wildcards(&state.pattern);
        let op = if exact {
            if state.started {
                return done(NtStatus::NO_MORE_FILES);
            }
            if check_name(&state.pattern).is_err() {
                // "." and ".." and invalid names: list the directory and filter.
                fp.push(Op::ReadDir {
                    dir: v.obj,
                    after: None,
                    max_entries: 1,
                    with_attrs: true,
                })
            } else {
                let found = fp.push(Op::LookupCaseless {
                    dir: v.obj,
                    name: state.pattern.clone(),
                });
                // Its EaSize, read at `found + 1` (see complete_query_dir).
                fp.push(Op::GetEas {
                    obj: ObjRef::Result(found),
                });
                found
            }
        } else {
            let per_entry = class.fixed_size() + 24;
            let mut max = (q.output_buffer_length as usize / per_entry).clamp(1, 4096) as u32;
            if single {
                max = 1;
            }
            if state.pattern != "*" {
                max = 4096;
            }
            // Names before `resume_at` are read too, and passed.
            max += resume_at.saturating_sub(2);
            fp.push(Op::ReadDir {
                dir: v.obj,
                after: state.last.clone(),
                max_entries: max,
                with_attrs: true,
            })
        };
        let dots = state.dots < 2 && state.last.is_none();
        let chained = !restart
            && !moved
            && fp.slots.iter().any(
                |s| matches!(&s.plan, Plan::Fs(FsPlan::QueryDir { target, .. }) if *target == t),
            );
        Plan::Fs(FsPlan::QueryDir {
            target: t,
            op,
            class,
            out_len: q.output_buffer_length,
            single,
            state,
            dots,
            exact,
            chained,
            resume_at,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn complete_query_dir(
        &mut self,
        id: u64,
        op: usize,
        class: DirectoryInfoClass,
        out_len: u32,
        single: bool,
        mut state: DirState,
        dots: bool,
        exact: bool,
        skip_through: Option<String>,
        resume_at: u32,
        results: &[OpResult],
    ) -> (NtStatus, Vec<u8>) {
        let first_call = !state.started;
        state.started = true;
        let ea_of = |i: usize| match results.get(i) {
            Some(Ok(OpOutput::Eas { eas, .. })) => fscc::full_ea::size(eas),
            _ => 0,
        };
        let (dir_attrs, entries, eof): (Option<Attrs>, Vec<(String, Attrs, u32)>, bool) =
            match results.get(op) {
                Some(Ok(OpOutput::Dir {
                    entries,
                    eof,
                    attrs,
                })) => (
                    Some(attrs.clone()),
                    entries
                        .iter()
                        .filter_map(|e| {
                            e.attrs.clone().map(|a| (e.name.clone(), a, fscc::full_ea::size(&e.eas)))
                        })
                        .collect(),
                    *eof,
                ),
                Some(Ok(OpOutput::Object { attrs, .. })) => {
                    (None, vec![(state.pattern.clone(), attrs.clone(), ea_of(op + 1))], true)
                }
                Some(Ok(OpOutput::Found { name, attrs })) => {
                    (None, vec![(name.clone(), attrs.clone(), ea_of(op + 1))], true)
                }
                Some(Err(FsError::NotFound)) if exact => (None, Vec::new(), true),
                Some(Err(FsError::NotDir)) => return (NtStatus::INVALID_PARAMETER, error_body()),
                Some(Err(e)) => return (fs_status(*e), error_body()),
                _ => return (NtStatus::INVALID_PARAMETER, error_body()),
            };
        let mut out = vec![0u8; 64 + 8];
        let mut w = ChainWriter::new(&out, out_len as usize);
        let mut emitted = 0usize;
        let mut full = false;
        if dots {
            if let Some(a) = &dir_attrs {
                while state.dots < 2 {
                    if single && emitted == 1 {
                        break;
                    }
                    let d = if state.dots == 0 { "." } else { ".." };
                    let at = state.pos.saturating_add(1);
                    if at > resume_at && pattern_match(&state.pattern, d) {
                        let mut e = file_entry(a);
                        e.file_index = at;
                        e.file_name = Utf16::Str(d);
                        if !w.push(&mut out, |o| e.encode(class, o)) {
                            full = true;
                            break;
                        }
                        emitted += 1;
                        state.returned_pos = at;
                    }
                    state.dots += 1;
                    state.pos = at;
                }
            } else {
                state.dots = 2;
            }
        }
        let mut consumed_all = !full;
        // Entries an earlier QUERY_DIRECTORY of the frame returned.
        let skip = skip_through
            .and_then(|last| entries.iter().position(|(n, _, _)| *n == last))
            .map_or(0, |p| p + 1);
        if !full {
            for (name, attrs, ea_size) in &entries[skip..] {
                if single && emitted == 1 {
                    consumed_all = false;
                    break;
                }
                let at = state.pos.saturating_add(1);
                if at <= resume_at || !pattern_match(&state.pattern, name) {
                    state.last = Some(name.clone());
                    state.pos = at;
                    continue;
                }
                let mut e = file_entry(attrs);
                // MS-FSCC 2.4.10 (and the other directory classes):
                // FileIndex, the entry's position in the directory as
                // this open enumerates it (`DirState::pos`).
                e.file_index = if exact { 0 } else { at };
                e.file_name = Utf16::Str(name);
                e.ea_size = *ea_size;
                let short = short_name(name);
                e.short_name = Utf16::Str(&short);
                if w.push(&mut out, |o| e.encode(class, o)) {
                    emitted += 1;
                    state.last = Some(name.clone());
                    state.pos = at;
                    state.returned_pos = at;
                } else {
                    consumed_all = false;
                    break;
                }
            }
        }
        if consumed_all && eof {
            state.eof = true;
        }
        if let Some(o) = self.opens.get_mut(&id) {
            o.dir = Some(state);
        }
        if emitted == 0 {
            if full || !consumed_all {
                return (NtStatus::BUFFER_TOO_SMALL, error_body());
            }
            let status = if first_call {
                NtStatus::NO_SUCH_FILE
            } else {
                NtStatus::NO_MORE_FILES
            };
            return (status, error_body());
        }
        let data = out.split_off(72);
        let mut b = Vec::with_capacity(8 + data.len());
        OutputBufferResponse::encode_fixed(data.len(), &mut b);
        b.extend_from_slice(&data);
        (NtStatus::SUCCESS, b)
    }

    // ---- QUERY_INFO ----------------------------------------------------

    pub(super) fn plan_query_info(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        q: &QueryInfoRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if q.output_buffer_length > self.cfg.max_transact_size {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let (root, _, share) = match self.begin(fp, hdr) {
            Ok(x) => x,
            Err(s) => return done(s),
        };
        let mut ea_op = None;
        let mut stream_op = None;
        let op = match q.info_type {
            // MS-SMB2 3.3.5.20.1: FileNormalizedNameInformation only on
            // dialect 3.1.1 and later; 2.0.2, 2.1, 3.0 and 3.0.2 get
            // STATUS_NOT_SUPPORTED.
            info_type::FILE
                if q.file_info_class == info_class::NORMALIZED_NAME
                    && self.dialect().unwrap_or(0) < crate::smb2::negotiate::dialect::SMB3_1_1 =>
            {
                return done(NtStatus::NOT_SUPPORTED)
            }
            info_type::FILE => {
                // MS-FSA 2.1.5.11: only these classes need
                // FILE_READ_ATTRIBUTES; the full EA list needs FILE_READ_EA.
                let need = match q.file_info_class {
                    info_class::BASIC
                    | info_class::ALL
                    | info_class::NETWORK_OPEN
                    | info_class::ATTRIBUTE_TAG => access::FILE_READ_ATTRIBUTES,
                    info_class::FULL_EA => access::FILE_READ_EA,
                    _ => 0,
                };
                if v.granted & need != need {
                    return done(NtStatus::ACCESS_DENIED);
                }
                // A stream open reports its file's times, attributes and
                // EAs with its own sizes (`stream_op`).
                let g = fp.push(Op::GetAttr { obj: v.file_obj() });
                if v.name.starts_with(':') {
                    stream_op = Some(fp.push(Op::GetAttr { obj: v.obj }));
                }
                if matches!(q.file_info_class, info_class::EA | info_class::ALL | info_class::FULL_EA) {
                    ea_op = Some(fp.push(Op::GetEas { obj: v.file_obj() }));
                }
                if q.file_info_class == info_class::STREAM {
                    // The file's streams, also asked on one of its streams.
                    let file = if v.name.starts_with(':') { v.parent } else { v.obj };
                    ea_op = Some(fp.push(Op::ListStreams { obj: file }));
                }
                Some(g)
            }
            info_type::SECURITY => {
                if v.granted & access::READ_CONTROL == 0 {
                    return done(NtStatus::ACCESS_DENIED);
                }
                // The stored DACL, if any, with the attributes (issue 17).
                Some(fp.push(Op::GetAcl { obj: v.obj }))
            }
            info_type::FILESYSTEM => Some(fp.push(Op::GetAttr {
                obj: ObjRef::Id(root),
            })),
            info_type::QUOTA => return done(NtStatus::NOT_SUPPORTED),
            _ => return done(NtStatus::INVALID_PARAMETER),
        };
        Plan::Fs(FsPlan::QueryInfo {
            target: t,
            op,
            ea_op,
            stream_op,
            info_type: q.info_type,
            class: q.file_info_class,
            out_len: q.output_buffer_length,
            addl: q.additional_information,
            root,
            share,
        })
    }

    /// The information structure of a file class; `min` is the least
    /// output buffer length the class needs.
    fn file_info(
        &self,
        o: &Open,
        a: &Attrs,
        eas: &[(String, Vec<u8>)],
        class: u8,
    ) -> Result<(Vec<u8>, usize), NtStatus> {
        let ea_size = fscc::full_ea::size(eas);
        let mut out = Vec::new();
        let basic = fscc::FileBasicInformation {
            creation_time: to_filetime(a.btime),
            last_access_time: to_filetime(a.atime),
            last_write_time: to_filetime(a.mtime),
            change_time: to_filetime(a.ctime),
            file_attributes: a.smb_attributes(),
        };
        let standard = fscc::FileStandardInformation {
            allocation_size: smb_sizes(a).1,
            end_of_file: smb_sizes(a).0,
            // A link whose delete is pending no longer counts (MS-FSA
            // 2.1.5.11.27).
            number_of_links: if o.delete_on_close { a.nlink.saturating_sub(1) } else { a.nlink },
            delete_pending: o.delete_on_close,
            directory: a.ftype == FileType::Directory,
        };
        let mode = fscc::FileModeInformation {
            mode: o.options
                & (opt::WRITE_THROUGH
                    | opt::SEQUENTIAL_ONLY
                    | opt::NO_INTERMEDIATE_BUFFERING
                    | opt::SYNCHRONOUS_IO_ALERT
                    | opt::SYNCHRONOUS_IO_NONALERT
                    | opt::DELETE_ON_CLOSE),
        };
        let min = match class {
            info_class::BASIC => {
                basic.encode(&mut out);
                40
            }
            info_class::STANDARD => {
                standard.encode(&mut out);
                24
            }
            info_class::INTERNAL => {
                fscc::FileInternalInformation { index_number: a.id }.encode(&mut out);
                8
            }
            info_class::EA => {
                fscc::FileEaInformation { ea_size }.encode(&mut out);
                4
            }
            info_class::ACCESS => {
                fscc::FileAccessInformation {
                    access_flags: o.granted,
                }
                .encode(&mut out);
                4
            }
            info_class::POSITION => {
                fscc::FilePositionInformation {
                    current_byte_offset: o.position,
                }
                .encode(&mut out);
                8
            }
            info_class::MODE => {
                mode.encode(&mut out);
                4
            }
            info_class::ALIGNMENT => {
                fscc::FileAlignmentInformation {
                    alignment_requirement: 0,
                }
                .encode(&mut out);
                4
            }
            info_class::ALL => {
                let path = format!("\\{}", o.path);
                fscc::FileAllInformation {
                    basic,
                    standard,
                    internal: fscc::FileInternalInformation { index_number: a.id },
                    ea: fscc::FileEaInformation { ea_size },
                    access: fscc::FileAccessInformation {
                        access_flags: o.granted,
                    },
                    position: fscc::FilePositionInformation {
                        current_byte_offset: o.position,
                    },
                    mode,
                    alignment: fscc::FileAlignmentInformation {
                        alignment_requirement: 0,
                    },
                    name: fscc::FileNameInformation {
                        file_name: Utf16::Str(&path),
                    },
                }
                .encode(&mut out);
                // Windows wants room for the whole fixed part and the first
                // name characters (smbtorture qfile_buffercheck: 104).
                104.min(out.len())
            }
            info_class::NORMALIZED_NAME => {
                fscc::FileNameInformation {
                    file_name: Utf16::Str(&o.path),
                }
                .encode(&mut out);
                4
            }
            info_class::STREAM => {
                if a.ftype == FileType::Regular {
                    fscc::FileStreamInformation {
                        stream_size: a.size,
                        stream_allocation_size: a.alloc_size,
                        stream_name: Utf16::Str("::$DATA"),
                    }
                    .encode(&mut out);
                }
                32.min(out.len())
            }
            info_class::NETWORK_OPEN => {
                fscc::FileNetworkOpenInformation {
                    creation_time: basic.creation_time,
                    last_access_time: basic.last_access_time,
                    last_write_time: basic.last_write_time,
                    change_time: basic.change_time,
                    allocation_size: smb_sizes(a).1,
                    end_of_file: smb_sizes(a).0,
                    file_attributes: basic.file_attributes,
                }
                .encode(&mut out);
                56
            }
            info_class::FULL_EA => {
                // MS-FSA 2.1.5.11.13: the whole list; none is an error.
                if eas.is_empty() {
                    return Err(NtStatus::NO_EAS_ON_FILE);
                }
                fscc::full_ea::encode(eas, &mut out);
                0
            }
            info_class::ATTRIBUTE_TAG => {
                fscc::FileAttributeTagInformation {
                    file_attributes: basic.file_attributes,
                    reparse_tag: 0,
                }
                .encode(&mut out);
                8
            }
            info_class::ALTERNATE_NAME => {
                // The 8.3 name QUERY_DIRECTORY also reports (MS-FSCC 2.4.5).
                let short = if o.name.is_empty() { String::new() } else { short_name(&o.name) };
                fscc::FileNameInformation {
                    file_name: Utf16::Str(&short),
                }
                .encode(&mut out);
                8
            }
            info_class::COMPRESSION => {
                // MS-FSCC 2.4.9 FileCompressionInformation:
                // CompressedFileSize (the end of file), CompressionFormat
                // (follows FILE_ATTRIBUTE_COMPRESSED, as
                // FSCTL_GET_COMPRESSION), CompressionUnitShift,
                // ChunkShift, ClusterShift, Reserved[3]: zero, as for a
                // file not compressed (the stored LZ4 format has no such
                // units to report).
                out.extend_from_slice(&smb_sizes(a).0.to_le_bytes());
                out.extend_from_slice(&compression_format(a).to_le_bytes());
                out.extend_from_slice(&[0u8; 6]);
                16
            }
            info_class::NAME | info_class::ID_INFORMATION => {
                return Err(NtStatus::NOT_SUPPORTED)
            }
            _ => return Err(NtStatus::INVALID_INFO_CLASS),
        };
        Ok((out, min))
    }

    fn fs_info(&self, root: &Attrs, share: &str, class: u8) -> Result<(Vec<u8>, usize), NtStatus> {
        let mut out = Vec::new();
        let unit = 4096u64;
        let min = match class {
            fs_info_class::VOLUME => {
                let serial = share.bytes().fold(0x811c_9dc5u32, |h, b| {
                    (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
                });
                fscc::FileFsVolumeInformation {
                    volume_creation_time: to_filetime(root.btime),
                    volume_serial_number: serial,
                    supports_objects: false,
                    volume_label: Utf16::Str(share),
                }
                .encode(&mut out);
                24
            }
            // MS-FSCC 2.5.8: AvailableAllocationUnits is what the caller
            // may use; 2.5.4 gives the caller's share and the volume's.
            fs_info_class::SIZE => {
                let space = self.cfg.space.get();
                fscc::FileFsSizeInformation {
                    total_allocation_units: space.total / unit,
                    available_allocation_units: space.avail / unit,
                    sectors_per_allocation_unit: 8,
                    bytes_per_sector: 512,
                }
                .encode(&mut out);
                24
            }
            fs_info_class::FULL_SIZE => {
                let space = self.cfg.space.get();
                fscc::FileFsFullSizeInformation {
                    total_allocation_units: space.total / unit,
                    caller_available_allocation_units: space.avail / unit,
                    actual_available_allocation_units: space.free / unit,
                    sectors_per_allocation_unit: 8,
                    bytes_per_sector: 512,
                }
                .encode(&mut out);
                32
            }
            fs_info_class::DEVICE => {
                // FILE_DEVICE_DISK, FILE_DEVICE_IS_MOUNTED.
                fscc::FileFsDeviceInformation {
                    device_type: 7,
                    characteristics: 0x20,
                }
                .encode(&mut out);
                8
            }
            fs_info_class::ATTRIBUTE => {
                // CASE_SENSITIVE_SEARCH | CASE_PRESERVED_NAMES | UNICODE_ON_DISK,
                // FILE_FILE_COMPRESSION (FSCTL_SET_COMPRESSION,
                // `plan_compression`), FILE_SUPPORTS_SPARSE_FILES
                // (FSCTL_SET_SPARSE) and FILE_SUPPORTS_BLOCK_REFCOUNTING
                // (MS-FSCC 2.5.1): files may share chunks
                // (FSCTL_DUPLICATE_EXTENTS_TO_FILE).
                fscc::FileFsAttributeInformation {
                    file_system_attributes: 0x1 | 0x2 | 0x4 | 0x10 | 0x40 | 0x0800_0000,
                    maximum_component_name_length: 255,
                    file_system_name: Utf16::Str("NTFS"),
                }
                .encode(&mut out);
                16
            }
            fs_info_class::SECTOR_SIZE => {
                fscc::FileFsSectorSizeInformation {
                    logical_bytes_per_sector: 512,
                    physical_bytes_per_sector_for_atomicity: 4096,
                    physical_bytes_per_sector_for_performance: 4096,
                    file_system_effective_physical_bytes_per_sector_for_atomicity: 4096,
                    // ALIGNED_DEVICE | PARTITION_ALIGNED_ON_DEVICE |
                    // TRIM_ENABLED (FSCTL_FILE_LEVEL_TRIM, `plan_trim`).
                    flags: 0x3 | 0x8,
                    byte_offset_for_sector_alignment: 0,
                    byte_offset_for_partition_alignment: 0,
                }
                .encode(&mut out);
                28
            }
            fs_info_class::CONTROL => {
                // MS-FSCC 2.5.2 FileFsControlInformation: no quotas are
                // tracked or enforced; the limits read "none" (all ones).
                for _ in 0..3 {
                    out.extend_from_slice(&0u64.to_le_bytes());
                }
                out.extend_from_slice(&u64::MAX.to_le_bytes());
                out.extend_from_slice(&u64::MAX.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                48
            }
            fs_info_class::OBJECT_ID => {
                // MS-FSCC 2.5.6 FileFsObjectIdInformation: the volume's
                // GUID (derived from the share name) and no extended info.
                let mut guid = [0u8; 16];
                for (i, b) in share.bytes().enumerate() {
                    guid[i % 16] = guid[i % 16].wrapping_mul(31).wrapping_add(b);
                }
                out.extend_from_slice(&guid);
                out.extend_from_slice(&[0u8; 48]);
                64
            }
            fs_info_class::LABEL => return Err(NtStatus::NOT_SUPPORTED),
            _ => return Err(NtStatus::INVALID_INFO_CLASS),
        };
        Ok((out, min))
    }

    // ---- SET_INFO ------------------------------------------------------

    /// SET_INFO of a security descriptor (MS-SMB2 3.3.5.21.3, MS-FSA
    /// 2.1.5.17): a Unix owner and group kept as the uid and gid they map
    /// to, another owner or group SID and the DACL stored with the node
    /// (`Op::SetAcl`, which sets the mode from the DACL).
    fn plan_set_security(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        v: &View,
        s: &SetInfoRequest<'_>,
        ro: bool,
    ) -> Plan {
        use super::info::secinfo;
        let addl = s.additional_information;
        let mut need = 0;
        if addl & secinfo::DACL != 0 {
            need |= access::WRITE_DAC;
        }
        if addl & (secinfo::OWNER | secinfo::GROUP) != 0 {
            need |= access::WRITE_OWNER;
        }
        if v.granted & need != need || ro {
            return done(NtStatus::ACCESS_DENIED);
        }
        let Some(cred) = self.sessions.get(&hdr.session_id).map(|x| x.cred.clone()) else {
            return done(NtStatus::USER_SESSION_DELETED);
        };
        // The strict decoder refuses a malformed descriptor (MS-DTYP
        // 2.4.6).
        let mut sd = match duet_fs::acl::SecurityDescriptor::decode(s.buffer) {
            Ok(sd) => sd,
            Err(_) => return done(NtStatus::INVALID_PARAMETER),
        };
        // Machine SIDs of duet's users and groups are their Unix SIDs.
        if let Some(m) = &self.sid_map {
            m.sd_from_wire(&mut sd);
        }
        // The DACL itself is stored (issue 17) and decides access for both
        // protocols. A NULL DACL (present, no ACL) grants everyone
        // everything: stored as such (mode 0777), read back as NULL.
        let dacl = (addl & secinfo::DACL != 0).then(|| {
            // DACL information without DACL_PRESENT: Windows reads it back
            // as a NULL DACL too (smbtorture smb2.create.nulldacl).
            stored_dacl(&sd).unwrap_or((sd.control | duet_fs::acl::control::DACL_PRESENT, Vec::new()))
        });
        let owner = if addl & secinfo::OWNER != 0 { sd.owner.as_ref() } else { None };
        let group = if addl & secinfo::GROUP != 0 { sd.group.as_ref() } else { None };
        let names = match owner_and_group(owner, group, &cred) {
            Ok(x) => x,
            Err(st) => return done(st),
        };
        // A Unix owner or group that is not the caller's own is a chown or
        // chgrp, only root's: the uid and gid change.
        let attrs = SetAttrs { uid: names.uid, gid: names.gid, ..Default::default() };
        let mut op = (!attrs.is_empty()).then(|| {
            fp.push(Op::SetAttr {
                obj: v.obj,
                attrs,
            })
        });
        if let Some(acl) = set_acl_bytes(dacl, names.owner, names.group) {
            op = Some(fp.push(Op::SetAcl { obj: v.obj, acl: Some(acl) }));
        }
        Plan::Fs(FsPlan::SetInfo {
            target: t,
            op,
            kind: SetKind::Plain,
        })
    }

    pub(super) fn plan_set_info(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        s: &SetInfoRequest<'_>,
    ) -> Plan {
        let Some(v) = self.view(fp, t) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if s.info_type != info_type::FILE && s.info_type != info_type::SECURITY {
            return done(NtStatus::NOT_SUPPORTED);
        }
        let (root, ro, _) = match self.begin(fp, hdr) {
            Ok(x) => x,
            Err(st) => return done(st),
        };
        if s.info_type == info_type::SECURITY {
            return self.plan_set_security(fp, hdr, t, &v, s, ro);
        }
        let need = |bit: u32| -> Result<(), NtStatus> {
            if v.granted & bit == 0 || (ro && bit & access::WRITE_BITS != 0) {
                Err(NtStatus::ACCESS_DENIED)
            } else {
                Ok(())
            }
        };
        // MS-FSA 2.1.5.14.2 / 2.1.5.14.3: a rename or a delete first takes
        // handle caching from the other holders' leases; alone in its
        // frame it waits for their acknowledgments (STATUS_PENDING, run
        // again by `poll_opens`), in a compound it goes on at once.
        let namespace = match s.file_info_class {
            info_class::RENAME => true,
            info_class::DISPOSITION | info_class::DISPOSITION_EX => s.buffer.first().is_some_and(|b| b & 1 != 0),
            _ => false,
        };
        if namespace && v.granted & access::DELETE != 0 && !ro {
            if let Target::Table(id) = t {
                if let Some((node, Some(_))) = self.break_for_namespace(id, fp.now_ns) {
                    if fp.slots.is_empty() && hdr.next_command == 0 {
                        self.park = Some(vec![node]);
                        return done(NtStatus::PENDING);
                    }
                }
            }
        }
        // MS-FSA 2.1.5.15.4 / 2.1.5.15.1 with 2.1.4.12: a change of the end
        // of file or of the allocation size breaks the other opens' read
        // caching (level II to none) as a write does, without waiting.
        let resize = matches!(s.file_info_class, info_class::END_OF_FILE | info_class::ALLOCATION);
        if resize && v.granted & access::FILE_WRITE_DATA != 0 && !ro {
            if let Target::Table(id) = t {
                self.break_for_write(id, fp.now_ns);
            }
        }
        let buf = s.buffer;
        let r: Result<Plan, NtStatus> = (|| match s.file_info_class {
            info_class::BASIC => {
                need(access::FILE_WRITE_ATTRIBUTES)?;
                if buf.len() < fscc::FileBasicInformation::SIZE {
                    return Err(NtStatus::INFO_LENGTH_MISMATCH);
                }
                let b = fscc::FileBasicInformation::decode(buf).map_err(|e| e.status())?;
                let mut a = SetAttrs {
                    btime: set_time(b.creation_time),
                    atime: set_time(b.last_access_time).map(SetTime::At),
                    mtime: set_time(b.last_write_time).map(SetTime::At),
                    ctime: set_time(b.change_time),
                    ..Default::default()
                };
                let keep_ctime = a.ctime.is_none();
                if b.file_attributes != 0 {
                    if b.file_attributes & fscc::file_attributes::DIRECTORY != 0
                        && v.is_dir == Some(false)
                    {
                        return Err(NtStatus::INVALID_PARAMETER);
                    }
                    // MS-FSA 2.1.5.14.2: a directory cannot be temporary.
                    if b.file_attributes & fscc::file_attributes::TEMPORARY != 0 && v.is_dir == Some(true) {
                        return Err(NtStatus::INVALID_PARAMETER);
                    }
                    a.dos_attrs = Some(b.file_attributes & dos::SETTABLE);
                }
                if keep_ctime && !a.is_empty() {
                    a.ctime = Some(duet_fs::CTIME_KEEP);
                }
                // A stream's times and attributes are its file's (MS-FSA
                // 2.1.5.14.2 acts on the file's object).
                let op = (!a.is_empty()).then(|| {
                    fp.push(Op::SetAttr {
                        obj: v.file_obj(),
                        attrs: a,
                    })
                });
                Ok(Plan::Fs(FsPlan::SetInfo {
                    target: t,
                    op,
                    kind: SetKind::Plain,
                }))
            }
            info_class::END_OF_FILE => {
                need(access::FILE_WRITE_DATA)?;
                let e = fscc::FileEndOfFileInformation::decode(buf)
                    .map_err(|_| NtStatus::INFO_LENGTH_MISMATCH)?;
                let op = fp.push(Op::SetAttr {
                    obj: v.obj,
                    attrs: SetAttrs {
                        size: Some(e.end_of_file),
                        ..Default::default()
                    },
                });
                Ok(Plan::Fs(FsPlan::SetInfo {
                    target: t,
                    op: Some(op),
                    kind: SetKind::Plain,
                }))
            }
            info_class::ALLOCATION => {
                need(access::FILE_WRITE_DATA)?;
                let e = fscc::FileAllocationInformation::decode(buf)
                    .map_err(|_| NtStatus::INFO_LENGTH_MISMATCH)?;
                if e.allocation_size > duet_fs::FILE_SIZE_MAX {
                    return Err(NtStatus::DISK_FULL);
                }
                let op = fp.push(Op::SetAttr {
                    obj: v.obj,
                    attrs: SetAttrs {
                        alloc_size: Some(e.allocation_size | duet_fs::ALLOC_TRUNCATES),
                        ..Default::default()
                    },
                });
                Ok(Plan::Fs(FsPlan::SetInfo {
                    target: t,
                    op: Some(op),
                    kind: SetKind::Plain,
                }))
            }
            info_class::DISPOSITION | info_class::DISPOSITION_EX => {
                let delete = if s.file_info_class == info_class::DISPOSITION {
                    fscc::FileDispositionInformation::decode(buf)
                        .map_err(|_| NtStatus::INFO_LENGTH_MISMATCH)?
                        .delete_pending
                } else {
                    fscc::FileDispositionInformationEx::decode(buf)
                        .map_err(|_| NtStatus::INFO_LENGTH_MISMATCH)?
                        .flags
                        & 1
                        != 0
                };
                if delete {
                    need(access::DELETE)?;
                    if v.name.is_empty() {
                        return Err(NtStatus::CANNOT_DELETE);
                    }
                }
                // Set now: a CLOSE later in this frame must see it.
                match t {
                    Target::Table(id) => {
                        if let Some(o) = self.opens.get_mut(&id) {
                            o.delete_on_close = delete;
                        }
                    }
                    Target::Pending(slot) => {
                        if let Some(p) = fp.pending_opens.get_mut(&slot) {
                            p.delete_on_close = delete;
                        }
                    }
                }
                let check_op = (delete && v.is_dir != Some(false)).then(|| {
                    fp.push(Op::ReadDir {
                        dir: v.obj,
                        after: None,
                        max_entries: 1,
                        with_attrs: false,
                    })
                });
                let attr_op =
                    (delete && v.is_dir != Some(true)).then(|| fp.push(Op::GetAttr { obj: v.obj }));
                Ok(Plan::Fs(FsPlan::SetInfo {
                    target: t,
                    op: None,
                    kind: SetKind::Disposition { check_op, attr_op },
                }))
            }
            info_class::RENAME | info_class::LINK => {
                let info = fscc::FileRenameInformation::decode(buf).map_err(|e| e.status())?;
                let target = info
                    .file_name
                    .to_string_checked()
                    .map_err(|_| NtStatus::OBJECT_NAME_INVALID)?;
                if s.file_info_class == info_class::RENAME && (v.name.starts_with(':') || target.starts_with(':')) {
                    return self.plan_stream_rename(fp, t, &v, &target, info.replace_if_exists, ro, root);
                }
                let comps = split_path(&target)?;
                let Some(leaf) = comps.last().cloned() else {
                    return Err(NtStatus::OBJECT_NAME_INVALID);
                };
                if s.file_info_class == info_class::RENAME {
                    need(access::DELETE)?;
                    if v.name.is_empty() {
                        return Err(NtStatus::ACCESS_DENIED);
                    }
                    // A directory with open files below it stays put
                    // (MS-FSA 2.1.5.14.11).
                    if let Some(o) = v.file.and_then(|f| self.opens.get(&f)) {
                        if o.is_dir
                            && self.cfg.share_modes.open_below(&path_key(root, &o.path))
                        {
                            return Err(NtStatus::ACCESS_DENIED);
                        }
                        // Renaming changes the parent directory as a delete
                        // would: an open of the parent that holds DELETE or
                        // does not share it stops it (as Windows does).
                        if self.cfg.share_modes.conflicts(
                            o.parent,
                            access::DELETE,
                            share::READ | share::WRITE,
                        ) {
                            return Err(NtStatus::SHARING_VIOLATION);
                        }
                    }
                }
                if ro {
                    return Err(NtStatus::ACCESS_DENIED);
                }
                let first_lookup = fp.batch.as_ref().map_or(0, |b| b.ops.len());
                let mut dir = ObjRef::Id(root);
                for c in &comps[..comps.len() - 1] {
                    dir = ObjRef::Result(fp.push(Op::LookupCaseless {
                        dir,
                        name: c.clone(),
                    }));
                }
                if s.file_info_class == info_class::RENAME {
                    let dst_op = fp.push(Op::Rename {
                        src_dir: v.parent,
                        src_name: v.name.clone(),
                        dst_dir: dir,
                        dst_name: leaf.clone(),
                        replace: info.replace_if_exists,
                    });
                    Ok(Plan::Fs(FsPlan::SetInfo {
                        target: t,
                        op: None,
                        kind: SetKind::Rename {
                            first_lookup,
                            dst_op,
                            name: leaf,
                            path: comps.join("\\"),
                            root,
                        },
                    }))
                } else {
                    if info.replace_if_exists {
                        fp.push(Op::Remove {
                            dir,
                            name: leaf.clone(),
                            dir_only: Some(false),
                        });
                    }
                    let link_op = fp.push(Op::Link {
                        obj: v.obj,
                        dir,
                        name: leaf,
                    });
                    Ok(Plan::Fs(FsPlan::SetInfo {
                        target: t,
                        op: None,
                        kind: SetKind::Link {
                            first_lookup,
                            link_op,
                        },
                    }))
                }
            }
            info_class::POSITION => {
                let p = fscc::FilePositionInformation::decode(buf)
                    .map_err(|_| NtStatus::INFO_LENGTH_MISMATCH)?;
                Ok(Plan::Fs(FsPlan::SetInfo {
                    target: t,
                    op: None,
                    kind: SetKind::Position(p.current_byte_offset),
                }))
            }
            info_class::MODE => {
                let m = fscc::FileModeInformation::decode(buf)
                    .map_err(|_| NtStatus::INFO_LENGTH_MISMATCH)?
                    .mode;
                // Not both synchronous modes.
                let both = opt::SYNCHRONOUS_IO_ALERT | opt::SYNCHRONOUS_IO_NONALERT;
                if m & !SETTABLE_MODE != 0 || m & both == both {
                    return Err(NtStatus::INVALID_PARAMETER);
                }
                Ok(Plan::Fs(FsPlan::SetInfo {
                    target: t,
                    op: None,
                    kind: SetKind::Mode(m),
                }))
            }
            info_class::VALID_DATA_LENGTH => Ok(Plan::Fs(FsPlan::SetInfo {
                target: t,
                op: None,
                kind: SetKind::Plain,
            })),
            info_class::FULL_EA => {
                need(access::FILE_WRITE_EA)?;
                let eas = fscc::full_ea::decode(buf).map_err(|e| e.status())?;
                let op = fp.push(Op::SetEas { obj: v.obj, eas });
                Ok(Plan::Fs(FsPlan::SetInfo {
                    target: t,
                    op: Some(op),
                    kind: SetKind::Plain,
                }))
            }
            info_class::SHORT_NAME | info_class::RENAME_EX => Err(NtStatus::NOT_SUPPORTED),
            _ => Err(NtStatus::INVALID_INFO_CLASS),
        })();
        r.unwrap_or_else(done)
    }

    // ---- completion ----------------------------------------------------

    /// The response of one planned command, from the batch's results.
    pub(super) fn complete(
        &mut self,
        fp: &mut FramePlan,
        slot: usize,
        plan: FsPlan,
        results: &[OpResult],
        created: &mut HashMap<usize, Result<u64, NtStatus>>,
    ) -> (NtStatus, Vec<u8>) {
        let r = self.complete_inner(fp, slot, plan, results, created);
        match r {
            Ok(x) => x,
            Err(s) => (s, error_body()),
        }
    }

    fn complete_inner(
        &mut self,
        fp: &mut FramePlan,
        slot: usize,
        plan: FsPlan,
        results: &[OpResult],
        created: &mut HashMap<usize, Result<u64, NtStatus>>,
    ) -> Result<(NtStatus, Vec<u8>), NtStatus> {
        match plan {
            FsPlan::Create(cp) => match self.complete_create(fp, slot, &cp, results) {
                Ok((status, body, id)) => {
                    created.insert(slot, Ok(id));
                    Ok((status, body))
                }
                Err(e) => {
                    created.insert(slot, Err(e));
                    Err(e)
                }
            },
            FsPlan::Close {
                target,
                closed,
                close_op,
                postquery,
            } => {
                let closed = match (target, closed) {
                    (Target::Table(_), Some(o)) => Some(*o),
                    (Target::Table(_), None) => None,
                    (Target::Pending(_), _) => {
                        let id = self.resolve(target, created)?;
                        self.forget_open(id)
                    }
                };
                if closed.is_none() {
                    return Err(NtStatus::FILE_CLOSED);
                }
                let mut resp = CloseResponse::default();
                if postquery {
                    if let Some(Ok(OpOutput::Attrs { attrs: a, .. })) =
                        close_op.and_then(|i| results.get(i))
                    {
                        resp = CloseResponse {
                            flags: CloseRequest::POSTQUERY_ATTRIB,
                            creation_time: to_filetime(a.btime),
                            last_access_time: to_filetime(a.atime),
                            last_write_time: to_filetime(a.mtime),
                            change_time: to_filetime(a.ctime),
                            allocation_size: smb_sizes(a).1,
                            end_of_file: smb_sizes(a).0,
                            file_attributes: a.smb_attributes(),
                        };
                    }
                }
                Ok((NtStatus::SUCCESS, body(&Response::Close(resp))))
            }
            FsPlan::Flush { target } => {
                let id = self.resolve(target, created)?;
                let granted = self.opens.get(&id).map_or(0, |o| o.granted);
                if granted & (access::FILE_WRITE_DATA | access::FILE_APPEND_DATA) == 0 {
                    return Err(NtStatus::ACCESS_DENIED);
                }
                Ok((
                    NtStatus::SUCCESS,
                    body(&Response::Flush(Default::default())),
                ))
            }
            FsPlan::Lock { target, elements } => {
                let id = self.resolve(target, created)?;
                match self.apply_locks(id, &elements, false) {
                    Ok(_) => Ok((NtStatus::SUCCESS, body(&Response::Lock(LockResponse)))),
                    Err(s) => Err(s),
                }
            }
            FsPlan::Read {
                target,
                op,
                offset,
                min_count,
                len,
            } => {
                let id = self.resolve(target, created)?;
                match results.get(op) {
                    Some(Ok(OpOutput::Read { data, .. })) => {
                        if (data.is_empty() && len > 0)
                            || (data.len() as u64) < u64::from(min_count)
                        {
                            return Err(NtStatus::END_OF_FILE);
                        }
                        // FilePositionInformation follows synchronous I/O
                        // (MS-FSCC 2.4.35).
                        if let Some(o) = self.opens.get_mut(&id) {
                            o.position = offset + data.len() as u64;
                        }
                        let mut b = Vec::with_capacity(16 + data.len());
                        ReadResponse::encode_fixed(data.len(), 0, 0, &mut b);
                        b.extend_from_slice(data);
                        Ok((NtStatus::SUCCESS, b))
                    }
                    Some(Err(FsError::IsDir)) => Err(NtStatus::INVALID_DEVICE_REQUEST),
                    Some(Err(e)) => Err(fs_status(*e)),
                    _ => Err(NtStatus::INVALID_PARAMETER),
                }
            }
            FsPlan::CopyChunk {
                target,
                ops,
                ctl_code,
                file_id,
            } => {
                self.resolve(target, created)?;
                // Chunks are reported in order up to the first that failed.
                let mut r = CopyChunkResponse::default();
                let mut status = NtStatus::SUCCESS;
                for op in ops {
                    match results.get(op) {
                        Some(Ok(OpOutput::Copied { count, .. })) => {
                            r.chunks_written += 1;
                            r.total_bytes_written += *count as u32;
                        }
                        Some(Err(FsError::Invalid)) => {
                            status = NtStatus::INVALID_VIEW_SIZE;
                            break;
                        }
                        Some(Err(e)) => {
                            status = fs_status(*e);
                            break;
                        }
                        _ => {
                            status = NtStatus::INVALID_PARAMETER;
                            break;
                        }
                    }
                }
                Ok((status, copychunk_body(ctl_code, file_id, r)))
            }
            FsPlan::Snapshots { target, op, ctl_code, file_id, max_out } => {
                self.resolve(target, created)?;
                match results.get(op) {
                    Some(Ok(OpOutput::Dir { entries, .. })) => {
                        let tokens: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
                        Ok((NtStatus::SUCCESS, ioctl_body(ctl_code, file_id, &snapshot_array(&tokens, max_out))))
                    }
                    Some(Err(e)) => Ok((fs_status(*e), Vec::new())),
                    _ => Ok((NtStatus::INVALID_PARAMETER, Vec::new())),
                }
            }
            FsPlan::NoOutput { target, op, ctl_code, file_id } => {
                self.resolve(target, created)?;
                match results.get(op) {
                    Some(Ok(_)) => Ok((NtStatus::SUCCESS, ioctl_body(ctl_code, file_id, &[]))),
                    Some(Err(e)) => Ok((fs_status(*e), Vec::new())),
                    _ => Ok((NtStatus::INVALID_PARAMETER, Vec::new())),
                }
            }
            FsPlan::GetCompression { target, op, ctl_code, file_id } => {
                self.resolve(target, created)?;
                match results.get(op) {
                    Some(Ok(OpOutput::Attrs { attrs: a, .. })) => {
                        let state = compression_format(a);
                        Ok((NtStatus::SUCCESS, ioctl_body(ctl_code, file_id, &state.to_le_bytes())))
                    }
                    Some(Err(e)) => Ok((fs_status(*e), Vec::new())),
                    _ => Ok((NtStatus::INVALID_PARAMETER, Vec::new())),
                }
            }
            FsPlan::Trim { target, ops, ctl_code, file_id } => {
                self.resolve(target, created)?;
                let mut done_n = 0u32;
                for op in &ops {
                    match results.get(*op) {
                        Some(Ok(_)) => done_n += 1,
                        Some(Err(e)) if done_n == 0 => return Ok((fs_status(*e), Vec::new())),
                        _ => break,
                    }
                }
                // FILE_LEVEL_TRIM_OUTPUT (MS-FSCC 2.3.74): NumRangesProcessed.
                Ok((NtStatus::SUCCESS, ioctl_body(ctl_code, file_id, &done_n.to_le_bytes())))
            }
            FsPlan::AllocatedRanges { target, op, ctl_code, file_id, range: (start, end), max_out } => {
                self.resolve(target, created)?;
                match results.get(op) {
                    Some(Ok(OpOutput::Ranges { ranges, attrs: a })) => {
                        let end = end.min(a.size);
                        let whole;
                        let ranges = if a.dos_attrs & dos::SPARSE_FILE != 0 {
                            ranges.as_slice()
                        } else {
                            whole = if start < end { vec![(start, end - start)] } else { Vec::new() };
                            whole.as_slice()
                        };
                        // FILE_ALLOCATED_RANGE_BUFFER (MS-FSCC 2.3.52), as
                        // many as fit: none of several = BUFFER_TOO_SMALL,
                        // some = BUFFER_OVERFLOW with those (MS-FSA
                        // 2.1.5.10.22).
                        let fit = (max_out as usize / 16).min(ranges.len());
                        if fit == 0 && !ranges.is_empty() {
                            return Ok((NtStatus::BUFFER_TOO_SMALL, Vec::new()));
                        }
                        let mut out = Vec::with_capacity(fit * 16);
                        for &(o, l) in &ranges[..fit] {
                            out.extend_from_slice(&o.to_le_bytes());
                            out.extend_from_slice(&l.to_le_bytes());
                        }
                        let status = if fit < ranges.len() { NtStatus::BUFFER_OVERFLOW } else { NtStatus::SUCCESS };
                        Ok((status, ioctl_body(ctl_code, file_id, &out)))
                    }
                    Some(Err(e)) => Ok((fs_status(*e), Vec::new())),
                    _ => Ok((NtStatus::INVALID_PARAMETER, Vec::new())),
                }
            }
            FsPlan::DupExtents { target, op, ctl_code, file_id } => {
                self.resolve(target, created)?;
                match results.get(op) {
                    Some(Ok(OpOutput::Copied { .. })) => Ok((NtStatus::SUCCESS, ioctl_body(ctl_code, file_id, &[]))),
                    // The source range is past the source's end (MS-FSA
                    // 2.1.5.10.8: STATUS_NOT_SUPPORTED, as Windows and
                    // Samba answer).
                    Some(Err(FsError::Invalid)) => Ok((NtStatus::NOT_SUPPORTED, Vec::new())),
                    Some(Err(e)) => Ok((fs_status(*e), Vec::new())),
                    _ => Ok((NtStatus::INVALID_PARAMETER, Vec::new())),
                }
            }
            FsPlan::Write { target, op } => {
                self.resolve(target, created)?;
                match results.get(op) {
                    Some(Ok(OpOutput::Written { count, .. })) => Ok((
                        NtStatus::SUCCESS,
                        body(&Response::Write(WriteResponse {
                            count: *count as u32,
                            remaining: 0,
                        })),
                    )),
                    Some(Err(FsError::IsDir)) => Err(NtStatus::INVALID_DEVICE_REQUEST),
                    Some(Err(e)) => Err(fs_status(*e)),
                    _ => Err(NtStatus::INVALID_PARAMETER),
                }
            }
            FsPlan::QueryDir {
                target,
                op,
                class,
                out_len,
                single,
                state,
                dots,
                exact,
                chained,
                resume_at,
            } => {
                let id = self.resolve(target, created)?;
                let (mut state, mut dots, mut skip_through) = (state, dots, None);
                if chained {
                    // Continue from the state the earlier QUERY_DIRECTORY of
                    // this frame left; its entries are skipped.
                    if let Some(cur) = self.opens.get(&id).and_then(|o| o.dir.clone()) {
                        if cur.eof {
                            return Ok((NtStatus::NO_MORE_FILES, error_body()));
                        }
                        skip_through = cur.last.clone();
                        dots = cur.dots < 2 && cur.last.is_none();
                        state = cur;
                    }
                }
                Ok(self.complete_query_dir(
                    id,
                    op,
                    class,
                    out_len,
                    single,
                    state,
                    dots,
                    exact,
                    skip_through,
                    resume_at,
                    results,
                ))
            }
            FsPlan::QueryInfo {
                target,
                op,
                ea_op,
                stream_op,
                info_type: it,
                class,
                out_len,
                addl,
                root,
                share,
            } => {
                let id = self.resolve(target, created)?;
                let mut attrs = match op {
                    Some(i) => result_attrs(results, i).map_err(fs_status)?.clone(),
                    None => return Err(NtStatus::INVALID_PARAMETER),
                };
                if let Some(i) = stream_op {
                    // The file's attributes with the stream's sizes.
                    let s = result_attrs(results, i).map_err(fs_status)?;
                    attrs.size = s.size;
                    attrs.alloc_size = s.alloc_size;
                }
                let _ = root;
                let open = self.opens.get(&id).cloned().ok_or(NtStatus::FILE_CLOSED)?;
                let (data, min) = match it {
                    info_type::FILE if class == info_class::STREAM => match ea_op.and_then(|i| results.get(i)) {
                        // The file's own attributes: the GetAttr's (also
                        // right for a snapshot's file), or on a stream
                        // handle the list's (the GetAttr carries the
                        // stream's sizes).
                        Some(Ok(OpOutput::Dir { entries, attrs: file, .. })) => {
                            stream_info(if stream_op.is_some() { file } else { &attrs }, entries)
                        }
                        Some(Err(e)) => return Err(fs_status(*e)),
                        _ => return Err(NtStatus::INVALID_PARAMETER),
                    },
                    info_type::FILE => {
                        let eas = match ea_op.and_then(|i| results.get(i)) {
                            Some(Ok(OpOutput::Eas { eas, .. })) => eas.as_slice(),
                            Some(Err(e)) => return Err(fs_status(*e)),
                            _ => &[],
                        };
                        self.file_info(&open, &attrs, eas, class)?
                    }
                    info_type::FILESYSTEM => self.fs_info(&attrs, &share, class)?,
                    info_type::SECURITY => {
                        // The kept security (`acl::Stored`): its owner
                        // and group SIDs and DACL where kept, the uid's,
                        // gid's and mode's otherwise.
                        let stored = match op.and_then(|i| results.get(i)) {
                            Some(Ok(o)) => o.stored_security().map_err(|_| fs_status(FsError::Io))?,
                            _ => None,
                        };
                        let sd = match stored {
                            Some(s) => stored_security_descriptor(&attrs, addl, &s),
                            None => security_descriptor(&attrs, addl),
                        };
                        // duet's users and groups as machine SIDs.
                        let sd = match &self.sid_map {
                            Some(m) => match duet_fs::acl::SecurityDescriptor::decode(&sd) {
                                Ok(d) => m.sd_to_wire(&d).encode(),
                                Err(_) => sd,
                            },
                            None => sd,
                        };
                        if sd.len() > out_len as usize {
                            let need = (sd.len() as u32).to_le_bytes();
                            let mut b = Vec::new();
                            crate::smb2::error::ErrorResponse {
                                error_context_count: 0,
                                error_data: &need,
                            }
                            .encode(&mut b);
                            return Ok((NtStatus::BUFFER_TOO_SMALL, b));
                        }
                        (sd, 0)
                    }
                    _ => return Err(NtStatus::INVALID_PARAMETER),
                };
                if (out_len as usize) < min {
                    return Err(NtStatus::INFO_LENGTH_MISMATCH);
                }
                let (data, status) = if data.len() > out_len as usize {
                    (&data[..out_len as usize], NtStatus::BUFFER_OVERFLOW)
                } else {
                    (&data[..], NtStatus::SUCCESS)
                };
                let mut b = Vec::with_capacity(8 + data.len());
                OutputBufferResponse::encode_fixed(data.len(), &mut b);
                b.extend_from_slice(data);
                Ok((status, b))
            }
            FsPlan::SetInfo { target, op, kind } => {
                let id = self.resolve(target, created)?;
                if let Some(i) = op {
                    if let Some((_, e)) = first_error(results, i..i + 1) {
                        return Err(fs_status(e));
                    }
                }
                match kind {
                    SetKind::Plain => {}
                    SetKind::Position(p) => {
                        if let Some(o) = self.opens.get_mut(&id) {
                            o.position = p;
                        }
                    }
                    SetKind::Mode(m) => {
                        if let Some(o) = self.opens.get_mut(&id) {
                            o.options = o.options & !SETTABLE_MODE | m;
                        }
                    }
                    SetKind::Disposition { check_op, attr_op } => {
                        if let Some(Ok(a)) = attr_op.map(|i| result_attrs(results, i)) {
                            if a.ftype != FileType::Directory && a.dos_attrs & dos::READONLY != 0 {
                                if let Some(o) = self.opens.get_mut(&id) {
                                    o.delete_on_close = false;
                                }
                                return Err(NtStatus::CANNOT_DELETE);
                            }
                        }
                        if let Some(Ok(OpOutput::Dir { entries, .. })) =
                            check_op.and_then(|i| results.get(i))
                        {
                            if !entries.is_empty() {
                                if let Some(o) = self.opens.get_mut(&id) {
                                    o.delete_on_close = false;
                                }
                                return Err(NtStatus::DIRECTORY_NOT_EMPTY);
                            }
                        }
                    }
                    SetKind::Rename {
                        first_lookup,
                        dst_op,
                        name,
                        path,
                        root,
                    } => {
                        if let Some((i, e)) = first_error(results, first_lookup..dst_op + 1) {
                            return Err(
                                if i < dst_op && matches!(e, FsError::NotFound | FsError::NotDir) {
                                    NtStatus::OBJECT_PATH_NOT_FOUND
                                } else {
                                    fs_status(e)
                                },
                            );
                        }
                        let parent = if dst_op > first_lookup {
                            result_attrs(results, dst_op - 1)
                                .map(|a| a.id)
                                .unwrap_or(root)
                        } else {
                            root
                        };
                        if let Some(o) = self.opens.get_mut(&id) {
                            o.parent = parent;
                            o.name = name;
                            self.cfg.share_modes.renamed(o.node, path_key(root, &path));
                            o.path = path;
                        }
                    }
                    SetKind::StreamRename { op, name, root } => {
                        if let Some((_, e)) = first_error(results, op..op + 1) {
                            return Err(fs_status(e));
                        }
                        if let Some(o) = self.opens.get_mut(&id) {
                            // A file's path holds no colon: the stream's
                            // name follows the first.
                            let base = o.path.split(':').next().unwrap_or_default().to_string();
                            o.name = format!(":{name}");
                            self.cfg.share_modes.renamed(o.node, path_key(root, &stream_key_path(&base, Some(&name))));
                            o.path = format!("{base}:{name}");
                        }
                    }
                    SetKind::StreamToData { first_lookup, op, path, root } => {
                        if let Some((_, e)) = first_error(results, first_lookup..op + 1) {
                            return Err(fs_status(e));
                        }
                        let file = result_attrs(results, op).map_err(fs_status)?;
                        let parent = if op > first_lookup {
                            result_attrs(results, op - 1).map(|a| a.id).unwrap_or(root)
                        } else {
                            root
                        };
                        // The handle is an open of the file's unnamed
                        // stream now (MS-FSA 2.1.5.14.11.1: Open.Stream
                        // becomes the default stream): its share mode
                        // moves to the file; an oplock or lease it held
                        // on the stream, which is gone, goes.
                        if let Some(o) = self.opens.get_mut(&id) {
                            let old = o.node;
                            o.node = file.id;
                            o.parent = parent;
                            o.name = path.rsplit('\\').next().unwrap_or_default().to_string();
                            o.path = path.clone();
                            o.oplock = 0;
                            o.breaking_to = None;
                            o.grant = None;
                            let lease = o.lease.take();
                            self.cfg.share_modes.reopened_as(old, (self.conn_key, id), file.id, path_key(root, &path), parent);
                            self.lease_forget_open(lease, id);
                        }
                    }
                    SetKind::Link {
                        first_lookup,
                        link_op,
                    } => {
                        let _ = first_lookup;
                        if let Some((_, e)) = first_error(results, link_op..link_op + 1) {
                            // BadRef: a directory of the target path was missing.
                            return Err(if e == FsError::BadRef {
                                NtStatus::OBJECT_PATH_NOT_FOUND
                            } else {
                                fs_status(e)
                            });
                        }
                    }
                }
                Ok((NtStatus::SUCCESS, body(&Response::SetInfo(SetInfoResponse))))
            }
        }
    }
}

/// ServerSideCopyMaxChunkSize and ServerSideCopyMaxDataSize (MS-SMB2
/// 3.3.3: 1 MiB and 16 MiB).
const COPYCHUNK_MAX_CHUNK: u32 = 1 << 20;
const COPYCHUNK_MAX_TOTAL: u32 = 16 << 20;
/// SRV_COPYCHUNK_RESPONSE (MS-SMB2 2.2.32.1): three u32.
const COPYCHUNK_RESPONSE_SIZE: usize = 12;
/// SRV_REQUEST_RESUME_KEY response (MS-SMB2 2.2.32.3): key and ContextLength.
const RESUME_KEY_RESPONSE_SIZE: usize = 28;

/// An IOCTL response body carrying `output`.
/// SRV_SNAPSHOT_ARRAY (MS-SMB2 2.2.32.2): NumberOfSnapShots,
/// NumberOfSnapShotsReturned, SnapShotArraySize (4 bytes each), then the
/// `@GMT-` tokens as NUL-terminated UTF-16LE strings and one more NUL.
/// When the tokens do not fit in `max_out` only the counts go back, with
/// none returned and the size the array needs (3.3.5.15.1), so that the
/// client asks again with room; at least 16 bytes as Windows answers.
pub(super) fn snapshot_array(tokens: &[&str], max_out: u32) -> Vec<u8> {
    let mut array = Vec::new();
    for t in tokens {
        for u in t.encode_utf16().chain(std::iter::once(0)) {
            array.extend_from_slice(&u.to_le_bytes());
        }
    }
    array.extend_from_slice(&[0, 0]);
    let fits = 12 + array.len() <= max_out as usize;
    let mut out = Vec::with_capacity(12 + array.len());
    out.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    out.extend_from_slice(&(if fits { tokens.len() as u32 } else { 0 }).to_le_bytes());
    out.extend_from_slice(&(array.len() as u32).to_le_bytes());
    if fits {
        out.extend_from_slice(&array);
    }
    if out.len() < 16 {
        out.resize(16, 0);
    }
    out
}

fn ioctl_body(ctl_code: u32, file_id: FileId, output: &[u8]) -> Vec<u8> {
    body(&Response::Ioctl(IoctlResponse {
        ctl_code,
        file_id,
        input: &[],
        output,
        flags: 0,
    }))
}

fn ioctl_reply(status: NtStatus, ctl_code: u32, file_id: FileId, output: &[u8]) -> Plan {
    Plan::Done {
        status,
        body: ioctl_body(ctl_code, file_id, output),
    }
}

/// The IOCTL body of an FSCTL_SRV_COPYCHUNK answer: a
/// SRV_COPYCHUNK_RESPONSE, sent with an error status too (limits, lock
/// conflicts, a chunk past the source's end).
fn copychunk_body(ctl_code: u32, file_id: FileId, r: CopyChunkResponse) -> Vec<u8> {
    let mut out = Vec::with_capacity(COPYCHUNK_RESPONSE_SIZE);
    r.encode(&mut out);
    ioctl_body(ctl_code, file_id, &out)
}

fn copychunk_reply(status: NtStatus, io: &IoctlRequest<'_>, r: CopyChunkResponse) -> Plan {
    Plan::Done {
        status,
        body: copychunk_body(io.ctl_code, io.file_id, r),
    }
}

fn body(r: &Response<'_>) -> Vec<u8> {
    let mut out = vec![0u8; 64];
    r.encode(&mut out);
    out.split_off(64)
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.cfg.share_modes.release_connection(self.conn_key);
        self.cfg.sessions.remove_connection(self.conn_key);
        for (sid, owner) in &self.bound {
            self.cfg.sessions.leave_channel(*sid, *owner);
        }
    }
}

/// The two signed 64-bit little-endian values that open an FSCTL input
/// (FILE_ZERO_DATA_INFORMATION, FILE_ALLOCATED_RANGE_BUFFER: MS-FSCC
/// 2.3.85, 2.3.51); None when the input is shorter than 16 bytes.
fn two_i64(input: &[u8]) -> Option<(i64, i64)> {
    let a = i64::from_le_bytes(input.get(0..8)?.try_into().ok()?);
    let b = i64::from_le_bytes(input.get(8..16)?.try_into().ok()?);
    Some((a, b))
}

/// Whether `cred` may change the directory an opened name is in (`want`:
/// 2 write, 3 write and search; MS-SMB2 3.3.5.9 refuses DELETE up front
/// because the removal at CLOSE cannot report a failure): by the
/// directory's stored DACL when it has one (WRITE_DATA, EXECUTE), else
/// its mode, as the engine's removal checks (`machine.rs` `may_node`).
/// None when the directory was not read.
fn parent_allows(cred: &duet_fs::Credentials, cp: &CreatePlan, results: &[OpResult], want: u32) -> Option<bool> {
    use duet_fs::acl::{granted, rights, Token};
    let (attrs, stored) = parent_read(cp, results)?;
    // Bytes that do not decode allow nothing.
    let Ok(stored) = stored else { return Some(false) };
    let stored = stored.filter(|_| cred.uid != 0);
    Some(match stored.as_ref().and_then(|s| Some((s, s.effective_dacl()?))) {
        Some((s, dacl)) => {
            let g = granted(&Token::unix(cred.uid, cred.gid, &cred.groups), Some(&s.owner_or(attrs.uid)), Some(dacl));
            let mut need = 0;
            if want & 2 != 0 {
                need |= rights::WRITE_DATA;
            }
            if want & 1 != 0 {
                need |= rights::EXECUTE;
            }
            g & need == need
        }
        None => super::info::mode_bits(cred, attrs) & want == want,
    })
}

/// The directory an opened name is in, as the CREATE's batch read it: its
/// attributes and kept security (Err: bytes that do not decode). None when
/// it was not read.
fn parent_read<'a>(cp: &CreatePlan, results: &'a [OpResult]) -> Option<(&'a Attrs, Result<Option<duet_fs::acl::Stored>, ()>)> {
    let i = if cp.final_op > cp.first_op { cp.parent_acl_op.or(Some(cp.final_op - 1)) } else { cp.root_attrs_op };
    let out = results.get(i?)?.as_ref().ok()?;
    Some((out.attrs()?, out.stored_security().map_err(|_| ())))
}

/// Whether `cred` may remove the opened name, as the engine decides at the
/// removal (`machine.rs` `may_unlink`): DELETE granted by the file's DACL
/// (`file`, with its uid as the owner unless it keeps an owner SID) or
/// FILE_DELETE_CHILD by its directory's allows, a DACL naming the bit for
/// the caller without granting it refuses (`acl::may_remove`, RFC 8881
/// 6.2.1.3.2); else write and search on the directory ([`parent_allows`]).
/// None when the directory was not read.
fn may_remove_name(
    cred: &duet_fs::Credentials,
    cp: &CreatePlan,
    results: &[OpResult],
    file: Option<&duet_fs::acl::Stored>,
    file_uid: u32,
) -> Option<bool> {
    use duet_fs::acl::{may_remove, Token};
    if cred.uid != 0 {
        let (pattrs, psec) = parent_read(cp, results)?;
        let Ok(psec) = psec else { return Some(false) };
        let d = psec.as_ref().map(|s| (s, pattrs.uid));
        let c = file.map(|s| (s, file_uid));
        if let Some(v) = may_remove(&Token::unix(cred.uid, cred.gid, &cred.groups), c, d) {
            return Some(v);
        }
    }
    parent_allows(cred, cp, results, 3)
}

/// What a CREATE's SMB2_CREATE_SD_BUFFER (MS-SMB2 2.2.13.2.2) gives the
/// file it creates, as `Op::SetAcl` takes it: its DACL (None when the
/// descriptor has none: the file inherits its parent's, or the mode's; a
/// NULL DACL as empty bytes) and an owner / group SID other than the
/// creator's Unix ones. A Unix owner may only be the creator (a new file
/// is the creator's), a Unix group one of its groups; other SIDs as
/// SET_INFO ([`owner_and_group`]).
fn create_dacl(b: &[u8], cred: &duet_fs::Credentials, map: Option<&duet_fs::acl::SidMap>) -> Result<Option<(u16, Vec<u8>)>, NtStatus> {
    use duet_fs::acl::SecurityDescriptor;
    let mut sd = SecurityDescriptor::decode(b).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    if let Some(m) = map {
        m.sd_from_wire(&mut sd);
    }
    if sd.owner.as_ref().and_then(|o| o.as_unix_user()).is_some_and(|u| u != cred.uid) {
        return Err(super::info::extra_status::INVALID_OWNER);
    }
    if sd.group.as_ref().and_then(|g| g.as_unix_group()).is_some_and(|g| g != cred.gid && !cred.groups.contains(&g)) {
        return Err(super::info::extra_status::INVALID_PRIMARY_GROUP);
    }
    let names = owner_and_group(sd.owner.as_ref(), sd.group.as_ref(), cred)?;
    Ok(set_acl_bytes(stored_dacl(&sd), names.owner, names.group))
}

/// What a descriptor's owner and group (those its SECURITY_INFORMATION
/// names) ask of duet.
#[derive(Default)]
struct OwnerNames {
    /// A chown (root naming another uid's S-1-22-1).
    uid: Option<u32>,
    /// A chgrp (root naming a S-1-22-2).
    gid: Option<u32>,
    /// The owner SID for `Op::SetAcl`: a non-Unix SID to keep, or the
    /// caller's own S-1-22-1 (which makes the uid the owner again if it
    /// is the node's).
    owner: Option<duet_fs::acl::Sid>,
    /// Likewise the group SID.
    group: Option<duet_fs::acl::Sid>,
}

/// Who may name which owner and group (MS-FSA 2.1.5.17; MS-DTYP 2.5.3.4):
/// the owner must be a SID of the caller's token (`acl::Token::unix`: its
/// S-1-22 SIDs, Everyone, Authenticated Users) or anything for root,
/// which alone gives a file to another uid; STATUS_INVALID_OWNER
/// otherwise. The group may be any SID but a Unix user's (Windows does
/// not require the caller to be in the primary group it sets, and a
/// primary group carries no rights in an access check, MS-DTYP 2.5.3.2);
/// a Unix group other than the caller's own is root's chgrp (others:
/// left as it is, as before owner SIDs).
fn owner_and_group(
    owner: Option<&duet_fs::acl::Sid>,
    group: Option<&duet_fs::acl::Sid>,
    cred: &duet_fs::Credentials,
) -> Result<OwnerNames, NtStatus> {
    use super::info::extra_status;
    let token = duet_fs::acl::Token::unix(cred.uid, cred.gid, &cred.groups);
    let mut out = OwnerNames::default();
    if let Some(o) = owner {
        match o.as_unix_user() {
            Some(u) if cred.uid == 0 => out.uid = Some(u),
            Some(u) if u == cred.uid => out.owner = Some(o.clone()),
            Some(_) => return Err(extra_status::INVALID_OWNER),
            None if cred.uid == 0 || token.has(o) => out.owner = Some(o.clone()),
            None => return Err(extra_status::INVALID_OWNER),
        }
    }
    if let Some(g) = group {
        match g.as_unix_group() {
            Some(x) if cred.uid == 0 => out.gid = Some(x),
            Some(_) => out.group = Some(g.clone()),
            None if g.as_unix_user().is_some() => return Err(extra_status::INVALID_PRIMARY_GROUP),
            None => out.group = Some(g.clone()),
        }
    }
    Ok(out)
}

/// `Op::SetAcl`'s bytes (`acl::Stored`): the DACL alone as it always was,
/// or with an owner or group SID a whole self-relative descriptor (the
/// DACL in it only when one is set). None: nothing to set.
fn set_acl_bytes(
    dacl: Option<(u16, Vec<u8>)>,
    owner: Option<duet_fs::acl::Sid>,
    group: Option<duet_fs::acl::Sid>,
) -> Option<(u16, Vec<u8>)> {
    use duet_fs::acl::Stored;
    if owner.is_none() && group.is_none() {
        return dacl;
    }
    let mut s = match &dacl {
        // `stored_dacl`'s own bytes: they decode.
        Some((c, b)) => Stored::decode(*c, b).ok()?,
        None => Stored::default(),
    };
    s.owner = owner;
    s.group = group;
    Some(s.encode())
}

/// A descriptor's DACL as `Op::SetAcl` stores it (issue 17): generic
/// rights in an ACE that applies to the object mapped to the file rights
/// they stand for (MS-DTYP 2.5.3.1.1, as Windows stores them; smbtorture
/// smb2.acls.CREATOR reads them back so), an inherit-only ACE keeping
/// them for its children; a NULL DACL as empty bytes; None without
/// DACL_PRESENT.
fn stored_dacl(sd: &duet_fs::acl::SecurityDescriptor) -> Option<(u16, Vec<u8>)> {
    use duet_fs::acl::{ace_flags, control, rights};
    if sd.control & control::DACL_PRESENT == 0 {
        return None;
    }
    let Some(mut a) = sd.dacl.clone() else {
        return Some((sd.control, Vec::new()));
    };
    for ace in &mut a.aces {
        if ace.flags & ace_flags::INHERIT_ONLY == 0 {
            ace.mask = rights::map_generic(ace.mask);
        }
    }
    let mut b = Vec::new();
    a.encode(&mut b);
    Some((sd.control, b))
}
