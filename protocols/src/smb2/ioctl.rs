//! MS-SMB2 2.2.31 / 2.2.32: SMB2 IOCTL, and the FSCTL payloads an SMB2
//! server itself answers: VALIDATE_NEGOTIATE_INFO (2.2.31.4 / 2.2.32.6),
//! QUERY_NETWORK_INTERFACE_INFO (2.2.32.5) and server-side copy
//! (2.2.31.1 / 2.2.32.1 / 2.2.32.3).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::cursor::{align_up, body, buffer_at, len_u16, len_u32, pad_len, Reader, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;
use super::{FileId, Guid};

/// CtlCode values (MS-SMB2 2.2.31, MS-FSCC 2.3).
pub mod ctl_code {
    pub const FSCTL_DFS_GET_REFERRALS: u32 = 0x0006_0194;
    pub const FSCTL_DFS_GET_REFERRALS_EX: u32 = 0x0006_01B0;
    pub const FSCTL_PIPE_PEEK: u32 = 0x0011_400C;
    pub const FSCTL_PIPE_WAIT: u32 = 0x0011_0018;
    pub const FSCTL_PIPE_TRANSCEIVE: u32 = 0x0011_C017;
    pub const FSCTL_SRV_COPYCHUNK: u32 = 0x0014_40F2;
    pub const FSCTL_SRV_COPYCHUNK_WRITE: u32 = 0x0014_80F2;
    pub const FSCTL_SRV_ENUMERATE_SNAPSHOTS: u32 = 0x0014_4064;
    pub const FSCTL_SRV_REQUEST_RESUME_KEY: u32 = 0x0014_0078;
    pub const FSCTL_SRV_READ_HASH: u32 = 0x0014_41BB;
    pub const FSCTL_LMR_REQUEST_RESILIENCY: u32 = 0x0014_01D4;
    pub const FSCTL_QUERY_NETWORK_INTERFACE_INFO: u32 = 0x0014_01FC;
    pub const FSCTL_VALIDATE_NEGOTIATE_INFO: u32 = 0x0014_0204;
    pub const FSCTL_GET_REPARSE_POINT: u32 = 0x0009_00A8;
    pub const FSCTL_SET_REPARSE_POINT: u32 = 0x0009_00A4;
    pub const FSCTL_CREATE_OR_GET_OBJECT_ID: u32 = 0x0009_00C0;
    pub const FSCTL_SET_SPARSE: u32 = 0x0009_00C4;
    /// FSCTL_GET_COMPRESSION (MS-FSCC 2.3.22, MS-FSA 2.1.5.10.7): a
    /// USHORT CompressionState out, one of [`super::compression_format`].
    pub const FSCTL_GET_COMPRESSION: u32 = 0x0009_003C;
    /// FSCTL_SET_COMPRESSION (MS-FSCC 2.3.67, MS-FSA 2.1.5.10.36): a
    /// USHORT CompressionState in, one of [`super::compression_format`].
    pub const FSCTL_SET_COMPRESSION: u32 = 0x0009_C040;
    pub const FSCTL_SET_ZERO_DATA: u32 = 0x0009_80C8;
    pub const FSCTL_QUERY_ALLOCATED_RANGES: u32 = 0x0009_40CF;
    pub const FSCTL_FILE_LEVEL_TRIM: u32 = 0x0009_8208;
    pub const FSCTL_GET_INTEGRITY_INFORMATION: u32 = 0x0009_027C;
    pub const FSCTL_SET_INTEGRITY_INFORMATION: u32 = 0x0009_C280;
    pub const FSCTL_OFFLOAD_READ: u32 = 0x0009_4264;
    pub const FSCTL_OFFLOAD_WRITE: u32 = 0x0009_8268;
    pub const FSCTL_DUPLICATE_EXTENTS_TO_FILE: u32 = 0x0009_8344;
}

/// CompressionState of FSCTL_GET_COMPRESSION / FSCTL_SET_COMPRESSION
/// (MS-FSCC 2.3.22 / 2.3.67), also FileCompressionInformation's
/// CompressionFormat (MS-FSCC 2.4.9). duet stores compressed chunks in LZ4
/// and reports LZNT1, the one compressed format these define.
pub mod compression_format {
    /// Not compressed (GET); decompress the file (SET).
    pub const NONE: u16 = 0x0000;
    /// SET only: compress in the file system's default format.
    pub const DEFAULT: u16 = 0x0001;
    /// LZNT1 (MS-XCA 2.5): what GET answers for a compressed file.
    pub const LZNT1: u16 = 0x0002;
}

/// MS-SMB2 2.2.31 SMB2 IOCTL Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoctlRequest<'a> {
    pub ctl_code: u32,
    pub file_id: FileId,
    pub input: &'a [u8],
    pub max_input_response: u32,
    /// Output buffer sent with the request (MS-SMB2 allows it; no known
    /// FSCTL uses it).
    pub output: &'a [u8],
    pub max_output_response: u32,
    /// SMB2_0_IOCTL_IS_FSCTL (1) or 0 for an IOCTL.
    pub flags: u32,
}

impl<'a> IoctlRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 57;
    pub const IS_FSCTL: u32 = 0x0000_0001;
    /// Where the input buffer starts: right after the fixed part (0x78).
    pub const BUFFER_AT: usize = HEADER_SIZE + 56;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 IOCTL Request", Self::STRUCTURE_SIZE)?;
        r.u16("Reserved")?;
        let ctl_code = r.u32("CtlCode")?;
        let file_id = FileId::read(&mut r)?;
        let input_offset = r.u32("InputOffset")?;
        let input_count = r.u32("InputCount")?;
        let max_input_response = r.u32("MaxInputResponse")?;
        let output_offset = r.u32("OutputOffset")?;
        let output_count = r.u32("OutputCount")?;
        let max_output_response = r.u32("MaxOutputResponse")?;
        let flags = r.u32("Flags")?;
        r.u32("Reserved2")?;
        let input = buffer_at(msg, input_offset as usize, input_count as usize, Self::BUFFER_AT, "Input")?;
        let output = buffer_at(msg, output_offset as usize, output_count as usize, Self::BUFFER_AT, "Output")?;
        Ok(IoctlRequest { ctl_code, file_id, input, max_input_response, output, max_output_response, flags })
    }

    /// Appends the body: input at 0x78, output 8-aligned after it; an unused
    /// buffer gets offset 0 (as Linux sends them).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let input_end = Self::BUFFER_AT + self.input.len();
        let output_at = align_up(input_end, 8);
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(0);
        out.put_u32(self.ctl_code);
        self.file_id.write(out);
        out.put_u32(if self.input.is_empty() { 0 } else { Self::BUFFER_AT as u32 });
        out.put_u32(len_u32(self.input.len(), "InputCount"));
        out.put_u32(self.max_input_response);
        out.put_u32(if self.output.is_empty() { 0 } else { len_u32(output_at, "OutputOffset") });
        out.put_u32(len_u32(self.output.len(), "OutputCount"));
        out.put_u32(self.max_output_response);
        out.put_u32(self.flags);
        out.put_u32(0);
        out.put_bytes(self.input);
        if !self.output.is_empty() {
            out.put_zeros(pad_len(input_end, 8));
            out.put_bytes(self.output);
        }
        if self.input.is_empty() && self.output.is_empty() {
            out.put_u8(0);
        }
    }
}

/// MS-SMB2 2.2.32 SMB2 IOCTL Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoctlResponse<'a> {
    pub ctl_code: u32,
    pub file_id: FileId,
    pub input: &'a [u8],
    pub output: &'a [u8],
    pub flags: u32,
}

impl<'a> IoctlResponse<'a> {
    pub const STRUCTURE_SIZE: u16 = 49;
    /// Where the buffers start: right after the fixed part (0x70).
    pub const BUFFER_AT: usize = HEADER_SIZE + 48;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 IOCTL Response", Self::STRUCTURE_SIZE)?;
        r.u16("Reserved")?;
        let ctl_code = r.u32("CtlCode")?;
        let file_id = FileId::read(&mut r)?;
        let input_offset = r.u32("InputOffset")?;
        let input_count = r.u32("InputCount")?;
        let output_offset = r.u32("OutputOffset")?;
        let output_count = r.u32("OutputCount")?;
        let flags = r.u32("Flags")?;
        r.u32("Reserved2")?;
        let input = buffer_at(msg, input_offset as usize, input_count as usize, Self::BUFFER_AT, "Input")?;
        let output = buffer_at(msg, output_offset as usize, output_count as usize, Self::BUFFER_AT, "Output")?;
        Ok(IoctlResponse { ctl_code, file_id, input, output, flags })
    }

    /// Appends the body: input at 0x70, output 8-aligned after it; offsets
    /// are set even for empty buffers (as Windows and Samba do).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let input_end = Self::BUFFER_AT + self.input.len();
        let output_at = align_up(input_end, 8);
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(0);
        out.put_u32(self.ctl_code);
        self.file_id.write(out);
        out.put_u32(Self::BUFFER_AT as u32);
        out.put_u32(len_u32(self.input.len(), "InputCount"));
        out.put_u32(len_u32(output_at, "OutputOffset"));
        out.put_u32(len_u32(self.output.len(), "OutputCount"));
        out.put_u32(self.flags);
        out.put_u32(0);
        out.put_bytes(self.input);
        if !self.output.is_empty() {
            out.put_zeros(pad_len(input_end, 8));
            out.put_bytes(self.output);
        }
    }
}

/// duet's limit on dialects in VALIDATE_NEGOTIATE_INFO.
const MAX_VALIDATE_DIALECTS: usize = 64;

/// MS-SMB2 2.2.31.4 VALIDATE_NEGOTIATE_INFO Request (the IOCTL input).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValidateNegotiateInfoRequest {
    pub capabilities: u32,
    pub guid: Guid,
    pub security_mode: u16,
    pub dialects: Vec<u16>,
}

impl ValidateNegotiateInfoRequest {
    pub fn decode(input: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(input);
        let capabilities = r.u32("Capabilities")?;
        let guid = r.array("Guid")?;
        let security_mode = r.u16("SecurityMode")?;
        let count = usize::from(r.u16("DialectCount")?);
        if count > MAX_VALIDATE_DIALECTS {
            return Err(DecodeError::LimitExceeded { field: "dialects" });
        }
        let dialects = (0..count).map(|_| r.u16("Dialects")).collect::<Result<_, _>>()?;
        Ok(ValidateNegotiateInfoRequest { capabilities, guid, security_mode, dialects })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.capabilities);
        out.put_bytes(&self.guid);
        out.put_u16(self.security_mode);
        out.put_u16(len_u16(self.dialects.len(), "DialectCount"));
        for d in &self.dialects {
            out.put_u16(*d);
        }
    }
}

/// MS-SMB2 2.2.32.6 VALIDATE_NEGOTIATE_INFO Response (the IOCTL output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ValidateNegotiateInfoResponse {
    pub capabilities: u32,
    pub guid: Guid,
    pub security_mode: u16,
    pub dialect: u16,
}

impl ValidateNegotiateInfoResponse {
    pub const SIZE: usize = 24;

    pub fn decode(output: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(output);
        Ok(ValidateNegotiateInfoResponse {
            capabilities: r.u32("Capabilities")?,
            guid: r.array("Guid")?,
            security_mode: r.u16("SecurityMode")?,
            dialect: r.u16("Dialect")?,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.capabilities);
        out.put_bytes(&self.guid);
        out.put_u16(self.security_mode);
        out.put_u16(self.dialect);
    }
}

/// MS-SMB2 2.2.32.5 NETWORK_INTERFACE_INFO: one entry of the
/// FSCTL_QUERY_NETWORK_INTERFACE_INFO output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkInterfaceInfo {
    pub if_index: u32,
    /// RSS_CAPABLE (0x1), RDMA_CAPABLE (0x2).
    pub capability: u32,
    /// Bits per second.
    pub link_speed: u64,
    pub address: SocketAddr,
}

impl NetworkInterfaceInfo {
    pub const RSS_CAPABLE: u32 = 0x1;
    pub const RDMA_CAPABLE: u32 = 0x2;
    const SIZE: usize = 152;
    const AF_INET: u16 = 0x0002;
    const AF_INET6: u16 = 0x0017;

    /// Decodes the chained entries (Next is relative to each entry).
    pub fn decode_list(output: &[u8]) -> Result<Vec<Self>, DecodeError> {
        let mut list = Vec::new();
        let mut start = 0usize;
        loop {
            if list.len() == 256 {
                return Err(DecodeError::LimitExceeded { field: "network interfaces" });
            }
            let mut r = Reader::at(output, start);
            let next = r.u32("Next")? as usize;
            let if_index = r.u32("IfIndex")?;
            let capability = r.u32("Capability")?;
            r.u32("Reserved")?;
            let link_speed = r.u64("LinkSpeed")?;
            let sock = r.bytes(128, "SockAddr_Storage")?;
            let mut s = Reader::new(sock);
            let family = s.u16("Family")?;
            let port = u16::from_be_bytes(s.array("Port")?);
            let ip = match family {
                Self::AF_INET => IpAddr::V4(Ipv4Addr::from(s.array::<4>("IPv4Address")?)),
                Self::AF_INET6 => {
                    s.u32("FlowInfo")?;
                    IpAddr::V6(Ipv6Addr::from(s.array::<16>("IPv6Address")?))
                }
                _ => return Err(DecodeError::InvalidValue { field: "SockAddr_Storage.Family" }),
            };
            list.push(NetworkInterfaceInfo { if_index, capability, link_speed, address: SocketAddr::new(ip, port) });
            if next == 0 {
                return Ok(list);
            }
            if next < Self::SIZE {
                return Err(DecodeError::InvalidValue { field: "Next" });
            }
            start = start.checked_add(next).ok_or(DecodeError::BadBuffer { field: "Next" })?;
        }
    }

    /// Appends the entries, chained with Next.
    pub fn encode_list(list: &[Self], out: &mut Vec<u8>) {
        for (i, e) in list.iter().enumerate() {
            let last = i + 1 == list.len();
            out.put_u32(if last { 0 } else { Self::SIZE as u32 });
            out.put_u32(e.if_index);
            out.put_u32(e.capability);
            out.put_u32(0);
            out.put_u64(e.link_speed);
            let start = out.len();
            match e.address {
                SocketAddr::V4(a) => {
                    out.put_u16(Self::AF_INET);
                    out.put_bytes(&a.port().to_be_bytes());
                    out.put_bytes(&a.ip().octets());
                }
                SocketAddr::V6(a) => {
                    out.put_u16(Self::AF_INET6);
                    out.put_bytes(&a.port().to_be_bytes());
                    out.put_u32(0);
                    out.put_bytes(&a.ip().octets());
                    out.put_u32(a.scope_id());
                }
            }
            out.put_zeros(128 - (out.len() - start));
        }
    }
}

/// MS-SMB2 2.2.32.3 SRV_REQUEST_RESUME_KEY Response: the key naming the
/// copy source in a later FSCTL_SRV_COPYCHUNK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResumeKeyResponse {
    pub resume_key: [u8; 24],
}

impl ResumeKeyResponse {
    pub fn decode(output: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(output);
        let resume_key = r.array("ResumeKey")?;
        let context_length = r.u32("ContextLength")?;
        r.skip(context_length as usize, "Context")?;
        Ok(ResumeKeyResponse { resume_key })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_bytes(&self.resume_key);
        out.put_u32(0);
    }
}

/// MS-SMB2 2.2.31.1.1 SRV_COPYCHUNK
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CopyChunk {
    pub source_offset: u64,
    pub target_offset: u64,
    pub length: u32,
}

/// MS-SMB2 2.2.31.1 SRV_COPYCHUNK_COPY (the FSCTL_SRV_COPYCHUNK input).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CopyChunkCopy {
    pub source_key: [u8; 24],
    pub chunks: Vec<CopyChunk>,
}

impl CopyChunkCopy {
    /// duet's limit on chunks per request; 3.3.3 suggests 256 (ServerSideCopyMaxNumberofChunks).
    pub const MAX_CHUNKS: usize = 256;

    pub fn decode(input: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(input);
        let source_key = r.array("SourceKey")?;
        let count = r.u32("ChunkCount")? as usize;
        r.u32("Reserved")?;
        if count > Self::MAX_CHUNKS {
            return Err(DecodeError::LimitExceeded { field: "copy chunks" });
        }
        let mut chunks = Vec::with_capacity(count);
        for _ in 0..count {
            let source_offset = r.u64("SourceOffset")?;
            let target_offset = r.u64("TargetOffset")?;
            let length = r.u32("Length")?;
            r.u32("Reserved")?;
            chunks.push(CopyChunk { source_offset, target_offset, length });
        }
        Ok(CopyChunkCopy { source_key, chunks })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_bytes(&self.source_key);
        out.put_u32(len_u32(self.chunks.len(), "ChunkCount"));
        out.put_u32(0);
        for c in &self.chunks {
            out.put_u64(c.source_offset);
            out.put_u64(c.target_offset);
            out.put_u32(c.length);
            out.put_u32(0);
        }
    }
}

/// MS-SMB2 2.2.32.1 SRV_COPYCHUNK_RESPONSE
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CopyChunkResponse {
    pub chunks_written: u32,
    pub chunk_bytes_written: u32,
    pub total_bytes_written: u32,
}

impl CopyChunkResponse {
    pub fn decode(output: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(output);
        Ok(CopyChunkResponse {
            chunks_written: r.u32("ChunksWritten")?,
            chunk_bytes_written: r.u32("ChunkBytesWritten")?,
            total_bytes_written: r.u32("TotalBytesWritten")?,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.chunks_written);
        out.put_u32(self.chunk_bytes_written);
        out.put_u32(self.total_bytes_written);
    }
}
