//! MS-SMB2 2.2.3 / 2.2.4: SMB2 NEGOTIATE, and the negotiate contexts of SMB
//! 3.1.1 (2.2.3.1).

use super::cursor::{align_up, body, buffer_at, len_u16, len_u32, pad_len, Reader, Utf16, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;
use super::{FileTime, Guid};

/// Dialect revisions (MS-SMB2 2.2.3).
pub mod dialect {
    pub const SMB2_0_2: u16 = 0x0202;
    pub const SMB2_1: u16 = 0x0210;
    pub const SMB3_0: u16 = 0x0300;
    pub const SMB3_0_2: u16 = 0x0302;
    pub const SMB3_1_1: u16 = 0x0311;
    /// SMB2 wildcard revision, answered to a multi-protocol SMB1 NEGOTIATE.
    pub const SMB2_WILDCARD: u16 = 0x02FF;
}

/// SecurityMode bits (MS-SMB2 2.2.3).
pub mod security_mode {
    pub const SIGNING_ENABLED: u16 = 0x0001;
    pub const SIGNING_REQUIRED: u16 = 0x0002;
}

/// Capabilities bits (MS-SMB2 2.2.3, 2.2.4).
pub mod capabilities {
    pub const DFS: u32 = 0x0000_0001;
    pub const LEASING: u32 = 0x0000_0002;
    pub const LARGE_MTU: u32 = 0x0000_0004;
    pub const MULTI_CHANNEL: u32 = 0x0000_0008;
    pub const PERSISTENT_HANDLES: u32 = 0x0000_0010;
    pub const DIRECTORY_LEASING: u32 = 0x0000_0020;
    pub const ENCRYPTION: u32 = 0x0000_0040;
    pub const NOTIFICATIONS: u32 = 0x0000_0080;
}

/// duet's limit on dialects and negotiate contexts in one request
/// (Invariant 5). Real clients send at most 5 dialects and 7 contexts.
pub const MAX_DIALECTS: usize = 64;
pub const MAX_NEGOTIATE_CONTEXTS: usize = 32;

/// MS-SMB2 2.2.3 SMB2 NEGOTIATE Request
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NegotiateRequest<'a> {
    pub security_mode: u16,
    pub capabilities: u32,
    pub client_guid: Guid,
    /// ClientStartTime: present only when 3.1.1 is not offered (then the
    /// same 8 bytes hold the context offset and count); MUST be 0.
    pub client_start_time: u64,
    pub dialects: Vec<u16>,
    /// NegotiateContextList, only when `dialects` contains 3.1.1.
    pub negotiate_contexts: Vec<NegotiateContext<'a>>,
}

impl<'a> NegotiateRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 36;
    const DIALECTS_AT: usize = HEADER_SIZE + 36;

    pub fn offers_3_1_1(&self) -> bool {
        self.dialects.contains(&dialect::SMB3_1_1)
    }

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 NEGOTIATE Request", Self::STRUCTURE_SIZE)?;
        let dialect_count = usize::from(r.u16("DialectCount")?);
        if dialect_count == 0 {
            // 3.3.5.3.1: DialectCount 0 is STATUS_INVALID_PARAMETER.
            return Err(DecodeError::InvalidValue { field: "DialectCount" });
        }
        if dialect_count > MAX_DIALECTS {
            return Err(DecodeError::LimitExceeded { field: "dialects" });
        }
        let security_mode = r.u16("SecurityMode")?;
        r.u16("Reserved")?;
        let capabilities = r.u32("Capabilities")?;
        let client_guid = r.array("ClientGuid")?;
        let context_offset = r.u32("NegotiateContextOffset")?;
        let context_count = r.u16("NegotiateContextCount")?;
        let reserved2 = r.u16("Reserved2")?;
        let mut dialects = Vec::with_capacity(dialect_count);
        for _ in 0..dialect_count {
            dialects.push(r.u16("Dialects")?);
        }
        let mut req = NegotiateRequest {
            security_mode,
            capabilities,
            client_guid,
            client_start_time: 0,
            dialects,
            negotiate_contexts: Vec::new(),
        };
        if req.offers_3_1_1() {
            req.negotiate_contexts =
                decode_context_list(msg, context_offset as usize, usize::from(context_count), r.pos())?;
        } else {
            req.client_start_time =
                u64::from(context_offset) | u64::from(context_count) << 32 | u64::from(reserved2) << 48;
        }
        Ok(req)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let dialects_end = Self::DIALECTS_AT + 2 * self.dialects.len();
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(len_u16(self.dialects.len(), "DialectCount"));
        out.put_u16(self.security_mode);
        out.put_u16(0);
        out.put_u32(self.capabilities);
        out.put_bytes(&self.client_guid);
        if self.offers_3_1_1() && !self.negotiate_contexts.is_empty() {
            out.put_u32(len_u32(align_up(dialects_end, 8), "NegotiateContextOffset"));
            out.put_u16(len_u16(self.negotiate_contexts.len(), "NegotiateContextCount"));
            out.put_u16(0);
        } else if self.offers_3_1_1() {
            out.put_u64(0);
        } else {
            out.put_u64(self.client_start_time);
        }
        for d in &self.dialects {
            out.put_u16(*d);
        }
        if self.offers_3_1_1() && !self.negotiate_contexts.is_empty() {
            out.put_zeros(pad_len(dialects_end, 8));
            encode_context_list(&self.negotiate_contexts, out);
        }
    }
}

/// MS-SMB2 2.2.4 SMB2 NEGOTIATE Response
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NegotiateResponse<'a> {
    pub security_mode: u16,
    pub dialect_revision: u16,
    pub server_guid: Guid,
    pub capabilities: u32,
    pub max_transact_size: u32,
    pub max_read_size: u32,
    pub max_write_size: u32,
    pub system_time: FileTime,
    pub server_start_time: FileTime,
    /// The GSS-API token (SPNEGO NegTokenInit), borrowed.
    pub security_buffer: &'a [u8],
    /// NegotiateContextList, only when `dialect_revision` is 3.1.1.
    pub negotiate_contexts: Vec<NegotiateContext<'a>>,
}

impl<'a> NegotiateResponse<'a> {
    pub const STRUCTURE_SIZE: u16 = 65;
    /// Where the encoder puts the security buffer (as Windows and Samba do).
    pub const SECURITY_BUFFER_AT: usize = HEADER_SIZE + 64;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 NEGOTIATE Response", Self::STRUCTURE_SIZE)?;
        let security_mode = r.u16("SecurityMode")?;
        let dialect_revision = r.u16("DialectRevision")?;
        let context_count = r.u16("NegotiateContextCount")?;
        let server_guid = r.array("ServerGuid")?;
        let capabilities = r.u32("Capabilities")?;
        let max_transact_size = r.u32("MaxTransactSize")?;
        let max_read_size = r.u32("MaxReadSize")?;
        let max_write_size = r.u32("MaxWriteSize")?;
        let system_time = r.u64("SystemTime")?;
        let server_start_time = r.u64("ServerStartTime")?;
        let sec_offset = r.u16("SecurityBufferOffset")?;
        let sec_length = r.u16("SecurityBufferLength")?;
        let context_offset = r.u32("NegotiateContextOffset")?;
        let security_buffer = buffer_at(
            msg,
            usize::from(sec_offset),
            usize::from(sec_length),
            Self::SECURITY_BUFFER_AT,
            "SecurityBuffer",
        )?;
        let negotiate_contexts = if dialect_revision == dialect::SMB3_1_1 {
            decode_context_list(msg, context_offset as usize, usize::from(context_count), r.pos())?
        } else {
            Vec::new()
        };
        Ok(NegotiateResponse {
            security_mode,
            dialect_revision,
            server_guid,
            capabilities,
            max_transact_size,
            max_read_size,
            max_write_size,
            system_time,
            server_start_time,
            security_buffer,
            negotiate_contexts,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let with_contexts = self.dialect_revision == dialect::SMB3_1_1 && !self.negotiate_contexts.is_empty();
        let sec_end = Self::SECURITY_BUFFER_AT + self.security_buffer.len();
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(self.security_mode);
        out.put_u16(self.dialect_revision);
        out.put_u16(if with_contexts { len_u16(self.negotiate_contexts.len(), "NegotiateContextCount") } else { 0 });
        out.put_bytes(&self.server_guid);
        out.put_u32(self.capabilities);
        out.put_u32(self.max_transact_size);
        out.put_u32(self.max_read_size);
        out.put_u32(self.max_write_size);
        out.put_u64(self.system_time);
        out.put_u64(self.server_start_time);
        out.put_u16(Self::SECURITY_BUFFER_AT as u16);
        out.put_u16(len_u16(self.security_buffer.len(), "SecurityBufferLength"));
        out.put_u32(if with_contexts { len_u32(align_up(sec_end, 8), "NegotiateContextOffset") } else { 0 });
        out.put_bytes(self.security_buffer);
        if with_contexts {
            out.put_zeros(pad_len(sec_end, 8));
            encode_context_list(&self.negotiate_contexts, out);
        } else if self.security_buffer.is_empty() {
            out.put_u8(0);
        }
    }
}

/// Negotiate context types (MS-SMB2 2.2.3.1).
pub mod context_type {
    pub const PREAUTH_INTEGRITY_CAPABILITIES: u16 = 0x0001;
    pub const ENCRYPTION_CAPABILITIES: u16 = 0x0002;
    pub const COMPRESSION_CAPABILITIES: u16 = 0x0003;
    pub const NETNAME_NEGOTIATE_CONTEXT_ID: u16 = 0x0005;
    pub const TRANSPORT_CAPABILITIES: u16 = 0x0006;
    pub const RDMA_TRANSFORM_CAPABILITIES: u16 = 0x0007;
    pub const SIGNING_CAPABILITIES: u16 = 0x0008;
    /// SMB2_POSIX_EXTENSIONS_AVAILABLE (Samba/Linux SMB3.1.1 POSIX extensions).
    pub const POSIX_EXTENSIONS_AVAILABLE: u16 = 0x0100;
}

/// Algorithm identifiers used in negotiate contexts.
pub mod algorithm {
    /// SHA-512, the only preauth integrity hash (2.2.3.1.1).
    pub const SHA_512: u16 = 0x0001;
    /// Ciphers (2.2.3.1.2).
    pub const AES_128_CCM: u16 = 0x0001;
    pub const AES_128_GCM: u16 = 0x0002;
    pub const AES_256_CCM: u16 = 0x0003;
    pub const AES_256_GCM: u16 = 0x0004;
    /// Signing algorithms (2.2.3.1.7).
    pub const HMAC_SHA256: u16 = 0x0000;
    pub const AES_CMAC: u16 = 0x0001;
    pub const AES_GMAC: u16 = 0x0002;
    /// Compression algorithms (2.2.3.1.3).
    pub const COMPRESSION_NONE: u16 = 0x0000;
    pub const LZNT1: u16 = 0x0001;
    pub const LZ77: u16 = 0x0002;
    pub const LZ77_HUFFMAN: u16 = 0x0003;
    pub const PATTERN_V1: u16 = 0x0004;
    pub const LZ4: u16 = 0x0005;
}

/// MS-SMB2 2.2.3.1 SMB2 NEGOTIATE_CONTEXT, decoded by ContextType.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NegotiateContext<'a> {
    /// 2.2.3.1.1 SMB2_PREAUTH_INTEGRITY_CAPABILITIES
    PreauthIntegrity { hash_algorithms: Vec<u16>, salt: &'a [u8] },
    /// 2.2.3.1.2 SMB2_ENCRYPTION_CAPABILITIES
    Encryption { ciphers: Vec<u16> },
    /// 2.2.3.1.3 SMB2_COMPRESSION_CAPABILITIES
    Compression { flags: u32, algorithms: Vec<u16> },
    /// 2.2.3.1.4 SMB2_NETNAME_NEGOTIATE_CONTEXT_ID: the server name the
    /// client connects to.
    NetName { net_name: Utf16<'a> },
    /// 2.2.3.1.5 SMB2_TRANSPORT_CAPABILITIES
    Transport { flags: u32 },
    /// 2.2.3.1.6 SMB2_RDMA_TRANSFORM_CAPABILITIES
    RdmaTransform { transform_ids: Vec<u16> },
    /// 2.2.3.1.7 SMB2_SIGNING_CAPABILITIES
    Signing { algorithms: Vec<u16> },
    /// Any other type (SMB2_POSIX_EXTENSIONS_AVAILABLE, future ones), kept raw.
    Other { context_type: u16, data: &'a [u8] },
}

/// duet's limit on algorithm identifiers in one context.
const MAX_IDS: usize = 64;

fn read_ids(r: &mut Reader<'_>, count: u16, field: &'static str) -> Result<Vec<u16>, DecodeError> {
    let count = usize::from(count);
    if count > MAX_IDS {
        return Err(DecodeError::LimitExceeded { field });
    }
    (0..count).map(|_| r.u16(field)).collect()
}

fn put_ids(ids: &[u16], out: &mut Vec<u8>) {
    for id in ids {
        out.put_u16(*id);
    }
}

impl<'a> NegotiateContext<'a> {
    pub fn context_type(&self) -> u16 {
        use context_type::*;
        match self {
            Self::PreauthIntegrity { .. } => PREAUTH_INTEGRITY_CAPABILITIES,
            Self::Encryption { .. } => ENCRYPTION_CAPABILITIES,
            Self::Compression { .. } => COMPRESSION_CAPABILITIES,
            Self::NetName { .. } => NETNAME_NEGOTIATE_CONTEXT_ID,
            Self::Transport { .. } => TRANSPORT_CAPABILITIES,
            Self::RdmaTransform { .. } => RDMA_TRANSFORM_CAPABILITIES,
            Self::Signing { .. } => SIGNING_CAPABILITIES,
            Self::Other { context_type, .. } => *context_type,
        }
    }

    /// Decodes the Data of a context of type `context_type`.
    pub fn decode_data(context_type: u16, data: &'a [u8]) -> Result<Self, DecodeError> {
        use context_type::*;
        let mut r = Reader::new(data);
        Ok(match context_type {
            PREAUTH_INTEGRITY_CAPABILITIES => {
                let count = r.u16("HashAlgorithmCount")?;
                let salt_len = r.u16("SaltLength")?;
                if count == 0 {
                    // 3.3.5.4: no hash algorithm is STATUS_INVALID_PARAMETER.
                    return Err(DecodeError::InvalidValue { field: "HashAlgorithmCount" });
                }
                let hash_algorithms = read_ids(&mut r, count, "HashAlgorithms")?;
                let salt = r.bytes(usize::from(salt_len), "Salt")?;
                Self::PreauthIntegrity { hash_algorithms, salt }
            }
            ENCRYPTION_CAPABILITIES => {
                let count = r.u16("CipherCount")?;
                Self::Encryption { ciphers: read_ids(&mut r, count, "Ciphers")? }
            }
            COMPRESSION_CAPABILITIES => {
                let count = r.u16("CompressionAlgorithmCount")?;
                r.u16("Padding")?;
                let flags = r.u32("Flags")?;
                Self::Compression { flags, algorithms: read_ids(&mut r, count, "CompressionAlgorithms")? }
            }
            NETNAME_NEGOTIATE_CONTEXT_ID => Self::NetName { net_name: Utf16::from_wire(data, "NetName")? },
            TRANSPORT_CAPABILITIES => Self::Transport { flags: r.u32("Flags")? },
            RDMA_TRANSFORM_CAPABILITIES => {
                let count = r.u16("TransformCount")?;
                r.u16("Reserved1")?;
                r.u32("Reserved2")?;
                Self::RdmaTransform { transform_ids: read_ids(&mut r, count, "RDMATransformIds")? }
            }
            SIGNING_CAPABILITIES => {
                let count = r.u16("SigningAlgorithmCount")?;
                Self::Signing { algorithms: read_ids(&mut r, count, "SigningAlgorithms")? }
            }
            _ => Self::Other { context_type, data },
        })
    }

    /// Appends the Data of this context.
    pub fn encode_data(&self, out: &mut Vec<u8>) {
        match self {
            Self::PreauthIntegrity { hash_algorithms, salt } => {
                out.put_u16(len_u16(hash_algorithms.len(), "HashAlgorithmCount"));
                out.put_u16(len_u16(salt.len(), "SaltLength"));
                put_ids(hash_algorithms, out);
                out.put_bytes(salt);
            }
            Self::Encryption { ciphers } => {
                out.put_u16(len_u16(ciphers.len(), "CipherCount"));
                put_ids(ciphers, out);
            }
            Self::Compression { flags, algorithms } => {
                out.put_u16(len_u16(algorithms.len(), "CompressionAlgorithmCount"));
                out.put_u16(0);
                out.put_u32(*flags);
                put_ids(algorithms, out);
            }
            Self::NetName { net_name } => net_name.write(out),
            Self::Transport { flags } => out.put_u32(*flags),
            Self::RdmaTransform { transform_ids } => {
                out.put_u16(len_u16(transform_ids.len(), "TransformCount"));
                out.put_u16(0);
                out.put_u32(0);
                put_ids(transform_ids, out);
            }
            Self::Signing { algorithms } => {
                out.put_u16(len_u16(algorithms.len(), "SigningAlgorithmCount"));
                put_ids(algorithms, out);
            }
            Self::Other { data, .. } => out.put_bytes(data),
        }
    }
}

/// Decodes `count` contexts starting at `offset` (from the header start),
/// each 8-byte aligned. `fixed_end` is where the list may start at the
/// earliest.
fn decode_context_list<'a>(
    msg: &'a [u8],
    offset: usize,
    count: usize,
    fixed_end: usize,
) -> Result<Vec<NegotiateContext<'a>>, DecodeError> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if count > MAX_NEGOTIATE_CONTEXTS {
        return Err(DecodeError::LimitExceeded { field: "negotiate contexts" });
    }
    if offset < fixed_end || offset & 7 != 0 {
        return Err(DecodeError::BadBuffer { field: "NegotiateContextOffset" });
    }
    let mut r = Reader::at(msg, offset);
    let mut list = Vec::with_capacity(count);
    for i in 0..count {
        if i > 0 {
            r.skip(pad_len(r.pos(), 8), "NegotiateContext padding")?;
        }
        let context_type = r.u16("ContextType")?;
        let data_length = r.u16("DataLength")?;
        r.u32("Reserved")?;
        let data = r.bytes(usize::from(data_length), "NegotiateContext Data")?;
        list.push(NegotiateContext::decode_data(context_type, data)?);
    }
    Ok(list)
}

/// Appends the contexts; the caller has aligned `out` so that the first one
/// starts 8-aligned relative to the header. Each next one is padded to 8;
/// the last is not.
fn encode_context_list(list: &[NegotiateContext<'_>], out: &mut Vec<u8>) {
    let start = out.len();
    for (i, ctx) in list.iter().enumerate() {
        if i > 0 {
            out.pad_to(start, 8);
        }
        out.put_u16(ctx.context_type());
        let len_at = out.len();
        out.put_u16(0);
        out.put_u32(0);
        let data_start = out.len();
        ctx.encode_data(out);
        let data_len = len_u16(out.len() - data_start, "DataLength");
        // The data length is known only after encoding it; 2 bytes written
        // just above, so the range exists.
        out[len_at..len_at + 2].copy_from_slice(&data_len.to_le_bytes());
    }
}
