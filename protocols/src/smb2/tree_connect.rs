//! MS-SMB2 2.2.9 / 2.2.10: SMB2 TREE_CONNECT.

use super::cursor::{body, buffer_at, len_u16, Utf16, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;

/// MS-SMB2 2.2.9 SMB2 TREE_CONNECT Request
///
/// The 3.1.1 extension (SMB2_TREE_CONNECT_FLAG_EXTENSION_PRESENT, 2.2.9.1)
/// is refused with [`DecodeError::Unsupported`]; duet does not advertise
/// what would make a client send it (Remoted Identity, redirect contexts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeConnectRequest<'a> {
    /// SMB2_TREE_CONNECT_FLAG_CLUSTER_RECONNECT (0x1), _REDIRECT_TO_OWNER
    /// (0x2), _EXTENSION_PRESENT (0x4); Reserved before 3.1.1.
    pub flags: u16,
    /// The share path, `\\server\share`, UTF-16LE.
    pub path: Utf16<'a>,
}

impl<'a> TreeConnectRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 9;
    pub const EXTENSION_PRESENT: u16 = 0x0004;
    const FIXED_END: usize = HEADER_SIZE + 8;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 TREE_CONNECT Request", Self::STRUCTURE_SIZE)?;
        let flags = r.u16("Flags")?;
        let offset = r.u16("PathOffset")?;
        let length = r.u16("PathLength")?;
        if flags & Self::EXTENSION_PRESENT != 0 {
            return Err(DecodeError::Unsupported { field: "TREE_CONNECT extension" });
        }
        let path = buffer_at(msg, usize::from(offset), usize::from(length), Self::FIXED_END, "Path")?;
        Ok(TreeConnectRequest { flags, path: Utf16::from_wire(path, "Path")? })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(self.flags);
        out.put_u16(Self::FIXED_END as u16);
        out.put_u16(len_u16(self.path.byte_len(), "PathLength"));
        self.path.write(out);
        if self.path.is_empty() {
            out.put_u8(0);
        }
    }
}

/// MS-SMB2 2.2.10 SMB2 TREE_CONNECT Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeConnectResponse {
    /// SMB2_SHARE_TYPE_DISK (1), _PIPE (2), _PRINT (3).
    pub share_type: u8,
    /// SMB2_SHAREFLAG_* (caching policy, DFS, encryption, ...).
    pub share_flags: u32,
    /// SMB2_SHARE_CAP_* (DFS, continuous availability, scale-out, ...).
    pub capabilities: u32,
    pub maximal_access: u32,
}

impl TreeConnectResponse {
    pub const STRUCTURE_SIZE: u16 = 16;
    pub const SHARE_TYPE_DISK: u8 = 0x01;
    pub const SHARE_TYPE_PIPE: u8 = 0x02;
    pub const SHARE_TYPE_PRINT: u8 = 0x03;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 TREE_CONNECT Response", Self::STRUCTURE_SIZE)?;
        let share_type = r.u8("ShareType")?;
        r.u8("Reserved")?;
        Ok(TreeConnectResponse {
            share_type,
            share_flags: r.u32("ShareFlags")?,
            capabilities: r.u32("Capabilities")?,
            maximal_access: r.u32("MaximalAccess")?,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.share_type);
        out.put_u8(0);
        out.put_u32(self.share_flags);
        out.put_u32(self.capabilities);
        out.put_u32(self.maximal_access);
    }
}
