//! MS-SMB2 2.2.35 / 2.2.36: SMB2 CHANGE_NOTIFY. The response buffer holds
//! MS-FSCC 2.7.1 FILE_NOTIFY_INFORMATION entries.

use super::cursor::{body, WireWrite};
use super::decode_error::DecodeError;
use super::query_directory::OutputBufferResponse;
use super::FileId;

/// MS-SMB2 2.2.35 SMB2 CHANGE_NOTIFY Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChangeNotifyRequest {
    /// SMB2_WATCH_TREE (0x0001).
    pub flags: u16,
    pub output_buffer_length: u32,
    pub file_id: FileId,
    /// FILE_NOTIFY_CHANGE_* bits.
    pub completion_filter: u32,
}

impl ChangeNotifyRequest {
    pub const STRUCTURE_SIZE: u16 = 32;
    pub const WATCH_TREE: u16 = 0x0001;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 CHANGE_NOTIFY Request", Self::STRUCTURE_SIZE)?;
        let flags = r.u16("Flags")?;
        let output_buffer_length = r.u32("OutputBufferLength")?;
        let file_id = FileId::read(&mut r)?;
        let completion_filter = r.u32("CompletionFilter")?;
        r.u32("Reserved")?;
        Ok(ChangeNotifyRequest { flags, output_buffer_length, file_id, completion_filter })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(self.flags);
        out.put_u32(self.output_buffer_length);
        self.file_id.write(out);
        out.put_u32(self.completion_filter);
        out.put_u32(0);
    }
}

/// MS-SMB2 2.2.36 SMB2 CHANGE_NOTIFY Response
pub type ChangeNotifyResponse<'a> = OutputBufferResponse<'a>;
