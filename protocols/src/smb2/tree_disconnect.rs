//! MS-SMB2 2.2.11 / 2.2.12: SMB2 TREE_DISCONNECT; the tree is named by the header's TreeId.

use super::cursor::{decode_reserved4, encode_reserved4};
use super::decode_error::DecodeError;

/// MS-SMB2 2.2.11 SMB2 TREE_DISCONNECT Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeDisconnectRequest;

impl TreeDisconnectRequest {
    pub const STRUCTURE_SIZE: u16 = 4;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        decode_reserved4(msg, "SMB2 TREE_DISCONNECT Request").map(|()| TreeDisconnectRequest)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_reserved4(out);
    }
}

/// MS-SMB2 2.2.12 SMB2 TREE_DISCONNECT Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeDisconnectResponse;

impl TreeDisconnectResponse {
    pub const STRUCTURE_SIZE: u16 = 4;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        decode_reserved4(msg, "SMB2 TREE_DISCONNECT Response").map(|()| TreeDisconnectResponse)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_reserved4(out);
    }
}
