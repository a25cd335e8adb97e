//! MS-SMB2 2.2.33 / 2.2.34: SMB2 QUERY_DIRECTORY. The entries themselves are
//! MS-FSCC directory information structures, see [`super::fscc`].

use super::cursor::{body, buffer_at, len_u16, len_u32, Utf16, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;
use super::FileId;

/// MS-SMB2 2.2.33 SMB2 QUERY_DIRECTORY Request
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryDirectoryRequest<'a> {
    /// An MS-FSCC directory information class, see [`super::fscc::info_class`].
    pub file_information_class: u8,
    pub flags: u8,
    pub file_index: u32,
    pub file_id: FileId,
    /// The search pattern ("*", "name", "*.txt"), UTF-16LE.
    pub file_name: Utf16<'a>,
    pub output_buffer_length: u32,
}

impl<'a> QueryDirectoryRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 33;
    pub const RESTART_SCANS: u8 = 0x01;
    pub const RETURN_SINGLE_ENTRY: u8 = 0x02;
    pub const INDEX_SPECIFIED: u8 = 0x04;
    pub const REOPEN: u8 = 0x10;
    const FIXED_END: usize = HEADER_SIZE + 32;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 QUERY_DIRECTORY Request", Self::STRUCTURE_SIZE)?;
        let file_information_class = r.u8("FileInformationClass")?;
        let flags = r.u8("Flags")?;
        let file_index = r.u32("FileIndex")?;
        let file_id = FileId::read(&mut r)?;
        let name_offset = r.u16("FileNameOffset")?;
        let name_length = r.u16("FileNameLength")?;
        let output_buffer_length = r.u32("OutputBufferLength")?;
        let name = buffer_at(msg, usize::from(name_offset), usize::from(name_length), Self::FIXED_END, "FileName")?;
        Ok(QueryDirectoryRequest {
            file_information_class,
            flags,
            file_index,
            file_id,
            file_name: Utf16::from_wire(name, "FileName")?,
            output_buffer_length,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let name_len = self.file_name.byte_len();
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.file_information_class);
        out.put_u8(self.flags);
        out.put_u32(self.file_index);
        self.file_id.write(out);
        out.put_u16(if name_len == 0 { 0 } else { Self::FIXED_END as u16 });
        out.put_u16(len_u16(name_len, "FileNameLength"));
        out.put_u32(self.output_buffer_length);
        self.file_name.write(out);
        if name_len == 0 {
            out.put_u8(0);
        }
    }
}

/// The body shared by the QUERY_DIRECTORY (2.2.34), CHANGE_NOTIFY (2.2.36)
/// and QUERY_INFO (2.2.38) responses: StructureSize 9, OutputBufferOffset,
/// OutputBufferLength, Buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutputBufferResponse<'a> {
    pub output_buffer: &'a [u8],
}

impl<'a> OutputBufferResponse<'a> {
    pub const STRUCTURE_SIZE: u16 = 9;
    /// Where the encoder puts the buffer: right after the fixed part (0x48).
    pub const BUFFER_AT: usize = HEADER_SIZE + 8;

    pub fn decode(msg: &'a [u8], structure: &'static str) -> Result<Self, DecodeError> {
        let mut r = body(msg, structure, Self::STRUCTURE_SIZE)?;
        let offset = r.u16("OutputBufferOffset")?;
        let length = r.u32("OutputBufferLength")?;
        let output_buffer = buffer_at(msg, usize::from(offset), length as usize, Self::BUFFER_AT, "OutputBuffer")?;
        Ok(OutputBufferResponse { output_buffer })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        Self::encode_fixed(self.output_buffer.len(), out);
        out.put_bytes(self.output_buffer);
    }

    /// Appends the fixed part for `length` bytes of output that the caller
    /// appends next.
    pub fn encode_fixed(length: usize, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(Self::BUFFER_AT as u16);
        out.put_u32(len_u32(length, "OutputBufferLength"));
    }

    /// Appends the fixed part, lets `fill` append the output buffer directly
    /// into `out` (no intermediate buffer), then sets OutputBufferLength.
    pub fn encode_with(out: &mut Vec<u8>, fill: impl FnOnce(&mut Vec<u8>)) {
        let start = out.len();
        Self::encode_fixed(0, out);
        fill(out);
        let length = len_u32(out.len() - start - 8, "OutputBufferLength");
        // The 8-byte fixed part was appended at `start` just above.
        out[start + 4..start + 8].copy_from_slice(&length.to_le_bytes());
    }
}

/// MS-SMB2 2.2.34 SMB2 QUERY_DIRECTORY Response
pub type QueryDirectoryResponse<'a> = OutputBufferResponse<'a>;

impl<'a> QueryDirectoryResponse<'a> {
    pub fn decode_query_directory(msg: &'a [u8]) -> Result<Self, DecodeError> {
        Self::decode(msg, "SMB2 QUERY_DIRECTORY Response")
    }
}
