//! MS-SMB2 2.2.28 / 2.2.29: SMB2 ECHO, a keep-alive with an empty body.

use super::cursor::{decode_reserved4, encode_reserved4};
use super::decode_error::DecodeError;

/// MS-SMB2 2.2.28 SMB2 ECHO Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EchoRequest;

impl EchoRequest {
    pub const STRUCTURE_SIZE: u16 = 4;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        decode_reserved4(msg, "SMB2 ECHO Request").map(|()| EchoRequest)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_reserved4(out);
    }
}

/// MS-SMB2 2.2.29 SMB2 ECHO Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EchoResponse;

impl EchoResponse {
    pub const STRUCTURE_SIZE: u16 = 4;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        decode_reserved4(msg, "SMB2 ECHO Response").map(|()| EchoResponse)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_reserved4(out);
    }
}
