//! MS-SMB2 2.2.15 / 2.2.16: SMB2 CLOSE.

use super::cursor::{body, WireWrite};
use super::decode_error::DecodeError;
use super::{FileId, FileTime};

/// MS-SMB2 2.2.15 SMB2 CLOSE Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CloseRequest {
    /// SMB2_CLOSE_FLAG_POSTQUERY_ATTRIB asks for the attributes in the response.
    pub flags: u16,
    pub file_id: FileId,
}

impl CloseRequest {
    pub const STRUCTURE_SIZE: u16 = 24;
    /// SMB2_CLOSE_FLAG_POSTQUERY_ATTRIB.
    pub const POSTQUERY_ATTRIB: u16 = 0x0001;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 CLOSE Request", Self::STRUCTURE_SIZE)?;
        let flags = r.u16("Flags")?;
        r.u32("Reserved")?;
        Ok(CloseRequest { flags, file_id: FileId::read(&mut r)? })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(self.flags);
        out.put_u32(0);
        self.file_id.write(out);
    }
}

/// MS-SMB2 2.2.16 SMB2 CLOSE Response. Without POSTQUERY_ATTRIB every field
/// after Flags is zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CloseResponse {
    pub flags: u16,
    pub creation_time: FileTime,
    pub last_access_time: FileTime,
    pub last_write_time: FileTime,
    pub change_time: FileTime,
    pub allocation_size: u64,
    pub end_of_file: u64,
    pub file_attributes: u32,
}

impl CloseResponse {
    pub const STRUCTURE_SIZE: u16 = 60;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 CLOSE Response", Self::STRUCTURE_SIZE)?;
        let flags = r.u16("Flags")?;
        r.u32("Reserved")?;
        Ok(CloseResponse {
            flags,
            creation_time: r.u64("CreationTime")?,
            last_access_time: r.u64("LastAccessTime")?,
            last_write_time: r.u64("LastWriteTime")?,
            change_time: r.u64("ChangeTime")?,
            allocation_size: r.u64("AllocationSize")?,
            end_of_file: r.u64("EndOfFile")?,
            file_attributes: r.u32("FileAttributes")?,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(self.flags);
        out.put_u32(0);
        out.put_u64(self.creation_time);
        out.put_u64(self.last_access_time);
        out.put_u64(self.last_write_time);
        out.put_u64(self.change_time);
        out.put_u64(self.allocation_size);
        out.put_u64(self.end_of_file);
        out.put_u32(self.file_attributes);
    }
}
