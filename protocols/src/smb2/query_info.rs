//! MS-SMB2 2.2.37 / 2.2.38: SMB2 QUERY_INFO. The output is an MS-FSCC
//! information structure (see [`super::fscc`]), a security descriptor or
//! quota entries, depending on InfoType.

use super::cursor::{body, buffer_at, len_u16, len_u32, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;
use super::query_directory::OutputBufferResponse;
use super::FileId;

/// InfoType values (MS-SMB2 2.2.37).
pub mod info_type {
    pub const FILE: u8 = 0x01;
    pub const FILESYSTEM: u8 = 0x02;
    pub const SECURITY: u8 = 0x03;
    pub const QUOTA: u8 = 0x04;
}

/// MS-SMB2 2.2.37 SMB2 QUERY_INFO Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryInfoRequest<'a> {
    pub info_type: u8,
    pub file_info_class: u8,
    pub output_buffer_length: u32,
    /// Input: an SMB2_QUERY_QUOTA_INFO or a FILE_GET_EA_INFORMATION list.
    pub input_buffer: &'a [u8],
    /// Security information bits (for SECURITY) or EA index.
    pub additional_information: u32,
    /// SL_RESTART_SCAN (1), SL_RETURN_SINGLE_ENTRY (2), SL_INDEX_SPECIFIED (4).
    pub flags: u32,
    pub file_id: FileId,
}

impl<'a> QueryInfoRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 41;
    const FIXED_END: usize = HEADER_SIZE + 40;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 QUERY_INFO Request", Self::STRUCTURE_SIZE)?;
        let info_type = r.u8("InfoType")?;
        let file_info_class = r.u8("FileInfoClass")?;
        let output_buffer_length = r.u32("OutputBufferLength")?;
        let input_offset = r.u16("InputBufferOffset")?;
        r.u16("Reserved")?;
        let input_length = r.u32("InputBufferLength")?;
        let additional_information = r.u32("AdditionalInformation")?;
        let flags = r.u32("Flags")?;
        let file_id = FileId::read(&mut r)?;
        let input_buffer =
            buffer_at(msg, usize::from(input_offset), input_length as usize, Self::FIXED_END, "InputBuffer")?;
        Ok(QueryInfoRequest {
            info_type,
            file_info_class,
            output_buffer_length,
            input_buffer,
            additional_information,
            flags,
            file_id,
        })
    }

    /// Appends the body. An empty input gets offset 0 and the one pad byte.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.info_type);
        out.put_u8(self.file_info_class);
        out.put_u32(self.output_buffer_length);
        out.put_u16(if self.input_buffer.is_empty() { 0 } else { len_u16(Self::FIXED_END, "InputBufferOffset") });
        out.put_u16(0);
        out.put_u32(len_u32(self.input_buffer.len(), "InputBufferLength"));
        out.put_u32(self.additional_information);
        out.put_u32(self.flags);
        self.file_id.write(out);
        out.put_bytes(self.input_buffer);
        if self.input_buffer.is_empty() {
            out.put_u8(0);
        }
    }
}

/// MS-SMB2 2.2.38 SMB2 QUERY_INFO Response
pub type QueryInfoResponse<'a> = OutputBufferResponse<'a>;
