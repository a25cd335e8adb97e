//! MS-SMB2 2.2.7 / 2.2.8: SMB2 LOGOFF.

use super::cursor::{decode_reserved4, encode_reserved4};
use super::decode_error::DecodeError;

/// MS-SMB2 2.2.7 SMB2 LOGOFF Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogoffRequest;

impl LogoffRequest {
    pub const STRUCTURE_SIZE: u16 = 4;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        decode_reserved4(msg, "SMB2 LOGOFF Request").map(|()| LogoffRequest)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_reserved4(out);
    }
}

/// MS-SMB2 2.2.8 SMB2 LOGOFF Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogoffResponse;

impl LogoffResponse {
    pub const STRUCTURE_SIZE: u16 = 4;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        decode_reserved4(msg, "SMB2 LOGOFF Response").map(|()| LogoffResponse)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_reserved4(out);
    }
}
