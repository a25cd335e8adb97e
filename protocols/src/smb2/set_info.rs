//! MS-SMB2 2.2.39 / 2.2.40: SMB2 SET_INFO. The buffer is an MS-FSCC
//! information structure (see [`super::fscc`]), a security descriptor or
//! quota entries, depending on InfoType.

use super::cursor::{body, buffer_at, len_u32, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;
use super::FileId;

/// MS-SMB2 2.2.39 SMB2 SET_INFO Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetInfoRequest<'a> {
    /// See [`super::query_info::info_type`].
    pub info_type: u8,
    pub file_info_class: u8,
    pub buffer: &'a [u8],
    pub additional_information: u32,
    pub file_id: FileId,
}

impl<'a> SetInfoRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 33;
    /// Where the buffer starts: right after the fixed part (0x60).
    pub const BUFFER_AT: usize = HEADER_SIZE + 32;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 SET_INFO Request", Self::STRUCTURE_SIZE)?;
        let info_type = r.u8("InfoType")?;
        let file_info_class = r.u8("FileInfoClass")?;
        let length = r.u32("BufferLength")?;
        let offset = r.u16("BufferOffset")?;
        r.u16("Reserved")?;
        let additional_information = r.u32("AdditionalInformation")?;
        let file_id = FileId::read(&mut r)?;
        let buffer = buffer_at(msg, usize::from(offset), length as usize, Self::BUFFER_AT, "Buffer")?;
        Ok(SetInfoRequest { info_type, file_info_class, buffer, additional_information, file_id })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.info_type);
        out.put_u8(self.file_info_class);
        out.put_u32(len_u32(self.buffer.len(), "BufferLength"));
        out.put_u16(Self::BUFFER_AT as u16);
        out.put_u16(0);
        out.put_u32(self.additional_information);
        self.file_id.write(out);
        out.put_bytes(self.buffer);
        if self.buffer.is_empty() {
            out.put_u8(0);
        }
    }
}

/// MS-SMB2 2.2.40 SMB2 SET_INFO Response: StructureSize 2 and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetInfoResponse;

impl SetInfoResponse {
    pub const STRUCTURE_SIZE: u16 = 2;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        body(msg, "SMB2 SET_INFO Response", Self::STRUCTURE_SIZE).map(|_| SetInfoResponse)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
    }
}
