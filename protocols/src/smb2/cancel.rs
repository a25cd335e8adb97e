//! MS-SMB2 2.2.30: SMB2 CANCEL. It has no response: the cancelled request completes with STATUS_CANCELLED (3.3.5.16). The request to cancel is named by the header's MessageId (or AsyncId).

use super::cursor::{decode_reserved4, encode_reserved4};
use super::decode_error::DecodeError;

/// MS-SMB2 2.2.30 SMB2 CANCEL Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CancelRequest;

impl CancelRequest {
    pub const STRUCTURE_SIZE: u16 = 4;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        decode_reserved4(msg, "SMB2 CANCEL Request").map(|()| CancelRequest)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_reserved4(out);
    }
}
