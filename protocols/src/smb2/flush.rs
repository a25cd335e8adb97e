//! MS-SMB2 2.2.17 / 2.2.18: SMB2 FLUSH.

use super::cursor::{body, decode_reserved4, encode_reserved4, WireWrite};
use super::decode_error::DecodeError;
use super::FileId;

/// MS-SMB2 2.2.17 SMB2 FLUSH Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushRequest {
    pub file_id: FileId,
}

impl FlushRequest {
    pub const STRUCTURE_SIZE: u16 = 24;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 FLUSH Request", Self::STRUCTURE_SIZE)?;
        r.u16("Reserved1")?;
        r.u32("Reserved2")?;
        Ok(FlushRequest { file_id: FileId::read(&mut r)? })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(0);
        out.put_u32(0);
        self.file_id.write(out);
    }
}

/// MS-SMB2 2.2.18 SMB2 FLUSH Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushResponse;

impl FlushResponse {
    pub const STRUCTURE_SIZE: u16 = 4;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        decode_reserved4(msg, "SMB2 FLUSH Response").map(|()| FlushResponse)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_reserved4(out);
    }
}
