//! The FAULT PDU (C706 12.6.4.7, MS-RPCE 2.2.2.11: a failed call) and the
//! status codes it carries (C706 appendix E; the Windows values of
//! MS-RPCE 2.2.2.11 / MS-ERREF where they differ).

use super::header::{finish, pfc, CommonHeader, PacketType};
use super::ndr::Reader;
use super::DecodeError;

/// Fault status codes.
pub mod status {
    /// nca_s_fault_access_denied (Windows: ERROR_ACCESS_DENIED).
    pub const ACCESS_DENIED: u32 = 0x0000_0005;
    /// nca_s_fault_ndr (Windows: RPC_X_BAD_STUB_DATA): the stub could not
    /// be unmarshalled.
    pub const FAULT_NDR: u32 = 0x0000_06F7;
    /// nca_s_fault_invalid_tag: a union discriminant with no arm.
    pub const INVALID_TAG: u32 = 0x1C00_0006;
    /// nca_op_rng_error: the interface has no such operation.
    pub const OP_RNG_ERROR: u32 = 0x1C01_0002;
    /// nca_unk_if: no such interface (or presentation context) here.
    pub const UNK_IF: u32 = 0x1C01_0003;
    /// nca_proto_error: the PDU broke the protocol.
    pub const PROTO_ERROR: u32 = 0x1C01_000B;
    /// nca_s_fault_remote_no_memory: the call is larger than the server
    /// accepts.
    pub const REMOTE_NO_MEMORY: u32 = 0x1C00_001B;
}

/// A FAULT PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub call_id: u32,
    pub p_cont_id: u16,
    pub status: u32,
    /// PFC_DID_NOT_EXECUTE: the manager routine was never called.
    pub did_not_execute: bool,
}

impl Fault {
    /// header, alloc_hint, p_cont_id, cancel_count, reserved, status,
    /// reserved2 (pad to 8).
    pub const SIZE: usize = CommonHeader::SIZE + 16;

    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let mut flags = pfc::FIRST_FRAG | pfc::LAST_FRAG;
        if self.did_not_execute {
            flags |= pfc::DID_NOT_EXECUTE;
        }
        CommonHeader::outgoing(PacketType::FAULT, flags, self.call_id).encode(out);
        out.extend_from_slice(&0u32.to_le_bytes()); // alloc_hint: no stub
        out.extend_from_slice(&self.p_cont_id.to_le_bytes());
        out.extend_from_slice(&[0, 0]); // cancel_count, reserved
        out.extend_from_slice(&self.status.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // reserved2
        finish(out, start);
    }

    pub fn decode(pdu: &[u8]) -> Result<Fault, DecodeError> {
        let h = CommonHeader::decode(pdu)?;
        if h.ptype != PacketType::FAULT {
            return Err(DecodeError("not a FAULT"));
        }
        let mut r = Reader::new(pdu, h.little_endian());
        r.bytes(CommonHeader::SIZE, "header")?;
        r.u32("alloc_hint")?;
        let p_cont_id = r.u16("p_cont_id")?;
        r.bytes(2, "cancel_count")?;
        let status = r.u32("status")?;
        Ok(Fault {
            call_id: h.call_id,
            p_cont_id,
            status,
            did_not_execute: h.pfc_flags & pfc::DID_NOT_EXECUTE != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_round_trips() {
        let f = Fault {
            call_id: 3,
            p_cont_id: 1,
            status: status::OP_RNG_ERROR,
            did_not_execute: true,
        };
        let mut b = Vec::new();
        f.encode(&mut b);
        assert_eq!(b.len(), Fault::SIZE);
        assert_eq!(b[3], 0x23);
        assert_eq!(Fault::decode(&b).unwrap(), f);
        assert!(Fault::decode(&b[..20]).is_err());
    }
}
