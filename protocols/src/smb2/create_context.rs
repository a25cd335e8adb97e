//! MS-SMB2 2.2.13.2 SMB2_CREATE_CONTEXT: the tagged extensions of CREATE
//! requests (2.2.13.2.x) and responses (2.2.14.2.x).
//!
//! The wire list is a chain of (name, data) pairs; [`decode_list`] yields
//! them raw, [`CreateContextRequest`] and [`CreateContextResponse`] type the
//! ones duet understands and keep the rest as `Other`.

use super::cursor::{align_up, len_u16, len_u32, pad_len, Reader, WireWrite};
use super::decode_error::DecodeError;
use super::{FileId, FileTime, Guid};

/// duet's limit on contexts per CREATE (Invariant 5). Real clients send at
/// most about 8.
pub const MAX_CREATE_CONTEXTS: usize = 32;

/// Create context names (MS-SMB2 2.2.13.2).
pub mod name {
    /// SMB2_CREATE_EA_BUFFER
    pub const EXTA: &[u8] = b"ExtA";
    /// SMB2_CREATE_SD_BUFFER
    pub const SECD: &[u8] = b"SecD";
    /// SMB2_CREATE_DURABLE_HANDLE_REQUEST / _RESPONSE
    pub const DHNQ: &[u8] = b"DHnQ";
    /// SMB2_CREATE_DURABLE_HANDLE_RECONNECT
    pub const DHNC: &[u8] = b"DHnC";
    /// SMB2_CREATE_ALLOCATION_SIZE
    pub const ALSI: &[u8] = b"AlSi";
    /// SMB2_CREATE_QUERY_MAXIMAL_ACCESS_REQUEST / _RESPONSE
    pub const MXAC: &[u8] = b"MxAc";
    /// SMB2_CREATE_TIMEWARP_TOKEN
    pub const TWRP: &[u8] = b"TWrp";
    /// SMB2_CREATE_QUERY_ON_DISK_ID
    pub const QFID: &[u8] = b"QFid";
    /// SMB2_CREATE_REQUEST_LEASE (v1 and v2)
    pub const RQLS: &[u8] = b"RqLs";
    /// SMB2_CREATE_DURABLE_HANDLE_REQUEST_V2 / _RESPONSE_V2
    pub const DH2Q: &[u8] = b"DH2Q";
    /// SMB2_CREATE_DURABLE_HANDLE_RECONNECT_V2
    pub const DH2C: &[u8] = b"DH2C";
    /// SMB2_CREATE_APP_INSTANCE_ID (2.2.13.2.13): the GUID
    /// 45BCA66A-EFA7-F74A-9008-FA462E144D74 as the 16 name bytes.
    pub const APP_INSTANCE_ID: &[u8] = &[
        0x45, 0xBC, 0xA6, 0x6A, 0xEF, 0xA7, 0xF7, 0x4A, 0x90, 0x08, 0xFA, 0x46, 0x2E, 0x14, 0x4D, 0x74,
    ];
}

/// One SMB2_CREATE_CONTEXT, undecoded: the name and the data, both borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateContext<'a> {
    pub name: &'a [u8],
    pub data: &'a [u8],
}

/// Decodes a create context list (the CreateContexts buffer of a CREATE
/// request or response). Offsets inside each context are relative to the
/// context's first byte; Next is relative to it too and must be a multiple
/// of 8.
pub fn decode_list(buf: &[u8]) -> Result<Vec<CreateContext<'_>>, DecodeError> {
    let mut list = Vec::new();
    let mut start = 0usize;
    while start < buf.len() {
        if list.len() == MAX_CREATE_CONTEXTS {
            return Err(DecodeError::LimitExceeded { field: "create contexts" });
        }
        let mut r = Reader::at(buf, start);
        let next = r.u32("CreateContext.Next")? as usize;
        let name_offset = usize::from(r.u16("CreateContext.NameOffset")?);
        let name_length = usize::from(r.u16("CreateContext.NameLength")?);
        r.u16("CreateContext.Reserved")?;
        let data_offset = usize::from(r.u16("CreateContext.DataOffset")?);
        let data_length = r.u32("CreateContext.DataLength")? as usize;
        let end = if next == 0 {
            buf.len()
        } else {
            if next & 7 != 0 || next < 16 {
                return Err(DecodeError::InvalidValue { field: "CreateContext.Next" });
            }
            start.checked_add(next).filter(|e| *e <= buf.len()).ok_or(DecodeError::BadBuffer {
                field: "CreateContext.Next",
            })?
        };
        let this = buf.get(start..end).ok_or(DecodeError::BadBuffer { field: "CreateContext" })?;
        if name_length < 4 {
            return Err(DecodeError::InvalidValue { field: "CreateContext.NameLength" });
        }
        let name = super::cursor::buffer_at(this, name_offset, name_length, 16, "CreateContext.Name")?;
        let data = super::cursor::buffer_at(this, data_offset, data_length, 16, "CreateContext.Data")?;
        list.push(CreateContext { name, data });
        if next == 0 {
            break;
        }
        start = end;
    }
    Ok(list)
}

/// Something that can be written as a create context.
pub trait ContextEntry {
    fn name(&self) -> &[u8];
    fn data_len(&self) -> usize;
    fn encode_data(&self, out: &mut Vec<u8>);
}

impl ContextEntry for CreateContext<'_> {
    fn name(&self) -> &[u8] {
        self.name
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
    fn encode_data(&self, out: &mut Vec<u8>) {
        out.put_bytes(self.data);
    }
}

/// Bytes [`encode_list`] will write for `list`.
pub fn list_len<C: ContextEntry>(list: &[C]) -> usize {
    let mut len = 0;
    for (i, c) in list.iter().enumerate() {
        let last = i + 1 == list.len();
        len += context_len(c, last);
    }
    len
}

/// Length of one context: 16-byte header, name padded to 8, data; padded to
/// 8 unless it is the last one with data (what Windows, Samba and Linux do).
fn context_len<C: ContextEntry>(c: &C, last: bool) -> usize {
    let head = align_up(16 + c.name().len(), 8);
    let data = c.data_len();
    if data == 0 {
        head
    } else if last {
        head + data
    } else {
        align_up(head + data, 8)
    }
}

/// Appends a create context list; it must start 8-aligned.
pub fn encode_list<C: ContextEntry>(list: &[C], out: &mut Vec<u8>) {
    for (i, c) in list.iter().enumerate() {
        let last = i + 1 == list.len();
        let len = context_len(c, last);
        let start = out.len();
        let head = align_up(16 + c.name().len(), 8);
        let data_len = c.data_len();
        out.put_u32(if last { 0 } else { len_u32(len, "CreateContext.Next") });
        out.put_u16(16);
        out.put_u16(len_u16(c.name().len(), "CreateContext.NameLength"));
        out.put_u16(0);
        out.put_u16(if data_len == 0 { 0 } else { len_u16(head, "CreateContext.DataOffset") });
        out.put_u32(len_u32(data_len, "CreateContext.DataLength"));
        out.put_bytes(c.name());
        out.put_zeros(pad_len(16 + c.name().len(), 8));
        c.encode_data(out);
        out.put_zeros(len.saturating_sub(out.len() - start));
    }
}

/// MS-SMB2 2.2.13.2.10 / 2.2.14.2.10 SMB2_CREATE_REQUEST_LEASE(_V2) and the
/// response of the same layout. `v2` holds the fields that only version 2
/// (52 bytes, 3.x) has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lease {
    pub lease_key: [u8; 16],
    /// SMB2_LEASE_READ_CACHING (1), HANDLE_CACHING (2), WRITE_CACHING (4).
    pub lease_state: u32,
    /// SMB2_LEASE_FLAG_BREAK_IN_PROGRESS (2, responses),
    /// SMB2_LEASE_FLAG_PARENT_LEASE_KEY_SET (4, v2).
    pub lease_flags: u32,
    pub lease_duration: u64,
    pub v2: Option<LeaseV2>,
}

/// The version 2 tail of a lease context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseV2 {
    pub parent_lease_key: [u8; 16],
    pub epoch: u16,
}

impl Lease {
    pub const READ_CACHING: u32 = 0x01;
    pub const HANDLE_CACHING: u32 = 0x02;
    pub const WRITE_CACHING: u32 = 0x04;
    pub const BREAK_IN_PROGRESS: u32 = 0x02;
    pub const PARENT_LEASE_KEY_SET: u32 = 0x04;

    fn decode(data: &[u8]) -> Result<Self, DecodeError> {
        if data.len() != 32 && data.len() != 52 {
            return Err(DecodeError::InvalidValue { field: "RqLs DataLength" });
        }
        let mut r = Reader::new(data);
        let mut lease = Lease {
            lease_key: r.array("LeaseKey")?,
            lease_state: r.u32("LeaseState")?,
            lease_flags: r.u32("LeaseFlags")?,
            lease_duration: r.u64("LeaseDuration")?,
            v2: None,
        };
        if data.len() == 52 {
            let parent_lease_key = r.array("ParentLeaseKey")?;
            let epoch = r.u16("Epoch")?;
            r.u16("Reserved")?;
            lease.v2 = Some(LeaseV2 { parent_lease_key, epoch });
        }
        Ok(lease)
    }

    fn data_len(&self) -> usize {
        if self.v2.is_some() {
            52
        } else {
            32
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.put_bytes(&self.lease_key);
        out.put_u32(self.lease_state);
        out.put_u32(self.lease_flags);
        out.put_u64(self.lease_duration);
        if let Some(v2) = &self.v2 {
            out.put_bytes(&v2.parent_lease_key);
            out.put_u16(v2.epoch);
            out.put_u16(0);
        }
    }
}

fn exact<'a>(data: &'a [u8], len: usize, field: &'static str) -> Result<Reader<'a>, DecodeError> {
    if data.len() != len {
        return Err(DecodeError::InvalidValue { field });
    }
    Ok(Reader::new(data))
}

/// A create context of a CREATE request, typed by name (MS-SMB2 2.2.13.2.x).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateContextRequest<'a> {
    /// 2.2.13.2.1 SMB2_CREATE_EA_BUFFER: FILE_FULL_EA_INFORMATION entries.
    ExtendedAttributes(&'a [u8]),
    /// 2.2.13.2.2 SMB2_CREATE_SD_BUFFER: a self-relative security descriptor.
    SecurityDescriptor(&'a [u8]),
    /// 2.2.13.2.3 SMB2_CREATE_DURABLE_HANDLE_REQUEST (16 reserved bytes).
    DurableHandleRequest,
    /// 2.2.13.2.4 SMB2_CREATE_DURABLE_HANDLE_RECONNECT
    DurableHandleReconnect { file_id: FileId },
    /// 2.2.13.2.5 SMB2_CREATE_QUERY_MAXIMAL_ACCESS_REQUEST, with an optional
    /// timestamp.
    QueryMaximalAccess { timestamp: Option<FileTime> },
    /// 2.2.13.2.6 SMB2_CREATE_ALLOCATION_SIZE
    AllocationSize(u64),
    /// 2.2.13.2.7 SMB2_CREATE_TIMEWARP_TOKEN: open a previous version.
    TimewarpToken(FileTime),
    /// 2.2.13.2.8 / 2.2.13.2.10 SMB2_CREATE_REQUEST_LEASE(_V2)
    RequestLease(Lease),
    /// 2.2.13.2.9 SMB2_CREATE_QUERY_ON_DISK_ID
    QueryOnDiskId,
    /// 2.2.13.2.11 SMB2_CREATE_DURABLE_HANDLE_REQUEST_V2
    DurableHandleRequestV2 { timeout: u32, flags: u32, create_guid: Guid },
    /// 2.2.13.2.12 SMB2_CREATE_DURABLE_HANDLE_RECONNECT_V2
    DurableHandleReconnectV2 { file_id: FileId, create_guid: Guid, flags: u32 },
    /// 2.2.13.2.13 SMB2_CREATE_APP_INSTANCE_ID (StructureSize 20).
    AppInstanceId(Guid),
    /// Anything else (AAPL, the POSIX context, app instance ids ...), raw.
    Other(CreateContext<'a>),
}

impl<'a> CreateContextRequest<'a> {
    /// Types a raw context. A known name with a malformed body is an error
    /// (3.3.5.9: STATUS_INVALID_PARAMETER).
    pub fn decode(c: CreateContext<'a>) -> Result<Self, DecodeError> {
        let d = c.data;
        Ok(match c.name {
            name::EXTA => Self::ExtendedAttributes(d),
            name::SECD => Self::SecurityDescriptor(d),
            name::DHNQ => {
                exact(d, 16, "DHnQ DataLength")?;
                Self::DurableHandleRequest
            }
            name::DHNC => Self::DurableHandleReconnect { file_id: FileId::read(&mut exact(d, 16, "DHnC DataLength")?)? },
            name::MXAC => match d.len() {
                0 => Self::QueryMaximalAccess { timestamp: None },
                _ => Self::QueryMaximalAccess { timestamp: Some(exact(d, 8, "MxAc DataLength")?.u64("Timestamp")?) },
            },
            name::ALSI => Self::AllocationSize(exact(d, 8, "AlSi DataLength")?.u64("AllocationSize")?),
            name::TWRP => Self::TimewarpToken(exact(d, 8, "TWrp DataLength")?.u64("Timestamp")?),
            name::RQLS => Self::RequestLease(Lease::decode(d)?),
            name::QFID => {
                exact(d, 0, "QFid DataLength")?;
                Self::QueryOnDiskId
            }
            name::DH2Q => {
                let mut r = exact(d, 32, "DH2Q DataLength")?;
                let timeout = r.u32("Timeout")?;
                let flags = r.u32("Flags")?;
                r.u64("Reserved")?;
                Self::DurableHandleRequestV2 { timeout, flags, create_guid: r.array("CreateGuid")? }
            }
            name::APP_INSTANCE_ID => {
                let mut r = exact(d, 20, "AppInstanceId DataLength")?;
                if r.u16("StructureSize")? != 20 {
                    return Err(DecodeError::InvalidValue { field: "AppInstanceId StructureSize" });
                }
                r.u16("Reserved")?;
                Self::AppInstanceId(r.array("AppInstanceId")?)
            }
            name::DH2C => {
                let mut r = exact(d, 36, "DH2C DataLength")?;
                let file_id = FileId::read(&mut r)?;
                Self::DurableHandleReconnectV2 { file_id, create_guid: r.array("CreateGuid")?, flags: r.u32("Flags")? }
            }
            _ => Self::Other(c),
        })
    }

    /// Decodes and types a whole list.
    pub fn decode_list(buf: &'a [u8]) -> Result<Vec<Self>, DecodeError> {
        decode_list(buf)?.into_iter().map(Self::decode).collect()
    }
}

impl ContextEntry for CreateContextRequest<'_> {
    fn name(&self) -> &[u8] {
        match self {
            Self::ExtendedAttributes(_) => name::EXTA,
            Self::SecurityDescriptor(_) => name::SECD,
            Self::DurableHandleRequest => name::DHNQ,
            Self::DurableHandleReconnect { .. } => name::DHNC,
            Self::QueryMaximalAccess { .. } => name::MXAC,
            Self::AllocationSize(_) => name::ALSI,
            Self::TimewarpToken(_) => name::TWRP,
            Self::RequestLease(_) => name::RQLS,
            Self::QueryOnDiskId => name::QFID,
            Self::DurableHandleRequestV2 { .. } => name::DH2Q,
            Self::DurableHandleReconnectV2 { .. } => name::DH2C,
            Self::AppInstanceId(_) => name::APP_INSTANCE_ID,
            Self::Other(c) => c.name,
        }
    }

    fn data_len(&self) -> usize {
        match self {
            Self::ExtendedAttributes(d) | Self::SecurityDescriptor(d) => d.len(),
            Self::DurableHandleRequest | Self::DurableHandleReconnect { .. } => 16,
            Self::QueryMaximalAccess { timestamp } => timestamp.map_or(0, |_| 8),
            Self::AllocationSize(_) | Self::TimewarpToken(_) => 8,
            Self::RequestLease(l) => l.data_len(),
            Self::QueryOnDiskId => 0,
            Self::DurableHandleRequestV2 { .. } => 32,
            Self::DurableHandleReconnectV2 { .. } => 36,
            Self::AppInstanceId(_) => 20,
            Self::Other(c) => c.data.len(),
        }
    }

    fn encode_data(&self, out: &mut Vec<u8>) {
        match self {
            Self::ExtendedAttributes(d) | Self::SecurityDescriptor(d) => out.put_bytes(d),
            Self::DurableHandleRequest => out.put_zeros(16),
            Self::DurableHandleReconnect { file_id } => file_id.write(out),
            Self::QueryMaximalAccess { timestamp } => {
                if let Some(t) = timestamp {
                    out.put_u64(*t);
                }
            }
            Self::AllocationSize(v) | Self::TimewarpToken(v) => out.put_u64(*v),
            Self::RequestLease(l) => l.encode(out),
            Self::QueryOnDiskId => {}
            Self::DurableHandleRequestV2 { timeout, flags, create_guid } => {
                out.put_u32(*timeout);
                out.put_u32(*flags);
                out.put_u64(0);
                out.put_bytes(create_guid);
            }
            Self::DurableHandleReconnectV2 { file_id, create_guid, flags } => {
                file_id.write(out);
                out.put_bytes(create_guid);
                out.put_u32(*flags);
            }
            Self::AppInstanceId(id) => {
                out.put_u16(20);
                out.put_u16(0);
                out.put_bytes(id);
            }
            Self::Other(c) => out.put_bytes(c.data),
        }
    }
}

/// A create context of a CREATE response, typed by name (MS-SMB2 2.2.14.2.x).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateContextResponse<'a> {
    /// 2.2.14.2.3 SMB2_CREATE_DURABLE_HANDLE_RESPONSE (8 reserved bytes).
    DurableHandle,
    /// 2.2.14.2.5 SMB2_CREATE_QUERY_MAXIMAL_ACCESS_RESPONSE
    MaximalAccess { query_status: u32, maximal_access: u32 },
    /// 2.2.14.2.9 SMB2_CREATE_QUERY_ON_DISK_ID response.
    OnDiskId { disk_file_id: u64, volume_id: u64 },
    /// 2.2.14.2.10 / 2.2.14.2.11 SMB2_CREATE_RESPONSE_LEASE(_V2)
    Lease(Lease),
    /// 2.2.14.2.12 SMB2_CREATE_DURABLE_HANDLE_RESPONSE_V2
    DurableHandleV2 { timeout: u32, flags: u32 },
    /// Anything else, raw.
    Other(CreateContext<'a>),
}

impl<'a> CreateContextResponse<'a> {
    pub fn decode(c: CreateContext<'a>) -> Result<Self, DecodeError> {
        let d = c.data;
        Ok(match c.name {
            name::DHNQ => {
                exact(d, 8, "DHnQ response DataLength")?;
                Self::DurableHandle
            }
            name::MXAC => {
                let mut r = exact(d, 8, "MxAc response DataLength")?;
                Self::MaximalAccess { query_status: r.u32("QueryStatus")?, maximal_access: r.u32("MaximalAccess")? }
            }
            name::QFID => {
                let mut r = exact(d, 32, "QFid response DataLength")?;
                Self::OnDiskId { disk_file_id: r.u64("DiskFileId")?, volume_id: r.u64("VolumeId")? }
            }
            name::RQLS => Self::Lease(Lease::decode(d)?),
            name::DH2Q => {
                let mut r = exact(d, 8, "DH2Q response DataLength")?;
                Self::DurableHandleV2 { timeout: r.u32("Timeout")?, flags: r.u32("Flags")? }
            }
            _ => Self::Other(c),
        })
    }

    pub fn decode_list(buf: &'a [u8]) -> Result<Vec<Self>, DecodeError> {
        decode_list(buf)?.into_iter().map(Self::decode).collect()
    }
}

impl ContextEntry for CreateContextResponse<'_> {
    fn name(&self) -> &[u8] {
        match self {
            Self::DurableHandle => name::DHNQ,
            Self::MaximalAccess { .. } => name::MXAC,
            Self::OnDiskId { .. } => name::QFID,
            Self::Lease(_) => name::RQLS,
            Self::DurableHandleV2 { .. } => name::DH2Q,
            Self::Other(c) => c.name,
        }
    }

    fn data_len(&self) -> usize {
        match self {
            Self::DurableHandle | Self::MaximalAccess { .. } | Self::DurableHandleV2 { .. } => 8,
            Self::OnDiskId { .. } => 32,
            Self::Lease(l) => l.data_len(),
            Self::Other(c) => c.data.len(),
        }
    }

    fn encode_data(&self, out: &mut Vec<u8>) {
        match self {
            Self::DurableHandle => out.put_u64(0),
            Self::MaximalAccess { query_status, maximal_access } => {
                out.put_u32(*query_status);
                out.put_u32(*maximal_access);
            }
            Self::OnDiskId { disk_file_id, volume_id } => {
                out.put_u64(*disk_file_id);
                out.put_u64(*volume_id);
                out.put_zeros(16);
            }
            Self::Lease(l) => l.encode(out),
            Self::DurableHandleV2 { timeout, flags } => {
                out.put_u32(*timeout);
                out.put_u32(*flags);
            }
            Self::Other(c) => out.put_bytes(c.data),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_request_list_round_trips() {
        let list = [
            CreateContextRequest::QueryMaximalAccess { timestamp: None },
            CreateContextRequest::RequestLease(Lease {
                lease_key: [7; 16],
                lease_state: Lease::READ_CACHING | Lease::HANDLE_CACHING,
                v2: Some(LeaseV2 { parent_lease_key: [1; 16], epoch: 3 }),
                ..Lease::default()
            }),
            CreateContextRequest::DurableHandleRequestV2 { timeout: 0, flags: 0, create_guid: [9; 16] },
            CreateContextRequest::AppInstanceId([0x5a; 16]),
            CreateContextRequest::AllocationSize(4096),
            CreateContextRequest::QueryOnDiskId,
        ];
        let mut out = Vec::new();
        encode_list(&list, &mut out);
        assert_eq!(out.len(), list_len(&list));
        assert_eq!(CreateContextRequest::decode_list(&out).unwrap(), list);
    }

    #[test]
    fn rejects_bad_chains() {
        let list = [CreateContextRequest::AllocationSize(1), CreateContextRequest::QueryOnDiskId];
        let mut out = Vec::new();
        encode_list(&list, &mut out);
        let mut bad = out.clone();
        bad[0] = 12; // Next not a multiple of 8
        assert!(decode_list(&bad).is_err());
        bad = out.clone();
        bad[0] = 200; // past the end
        assert!(decode_list(&bad).is_err());
        bad = out.clone();
        bad[12] = 9; // AlSi DataLength 9 runs past the context
        assert!(decode_list(&bad).is_err());
    }
}
