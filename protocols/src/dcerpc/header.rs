//! The common header of every connection-oriented PDU (C706 12.6.3.1,
//! MS-RPCE 2.2.2.1): rpc_vers (5), rpc_vers_minor (0 or 1), PTYPE,
//! pfc_flags, packed_drep\[4\], frag_length, auth_length, call_id; 16
//! bytes, integers in the byte order `packed_drep` names.

use super::ndr::Reader;
use super::DecodeError;

/// PTYPE values of the connection-oriented PDUs (C706 12.6.4).
pub struct PacketType;

impl PacketType {
    pub const REQUEST: u8 = 0;
    pub const RESPONSE: u8 = 2;
    pub const FAULT: u8 = 3;
    pub const BIND: u8 = 11;
    pub const BIND_ACK: u8 = 12;
    pub const BIND_NAK: u8 = 13;
    pub const ALTER_CONTEXT: u8 = 14;
    pub const ALTER_CONTEXT_RESP: u8 = 15;
    pub const AUTH3: u8 = 16;
    pub const SHUTDOWN: u8 = 17;
    pub const CO_CANCEL: u8 = 18;
    pub const ORPHANED: u8 = 19;
}

/// pfc_flags (C706 12.6.3.1, MS-RPCE 2.2.2.3).
pub mod pfc {
    pub const FIRST_FRAG: u8 = 0x01;
    pub const LAST_FRAG: u8 = 0x02;
    /// PFC_PENDING_CANCEL; in BIND and ALTER_CONTEXT MS-RPCE reuses it as
    /// PFC_SUPPORT_HEADER_SIGN.
    pub const PENDING_CANCEL: u8 = 0x04;
    pub const CONC_MPX: u8 = 0x10;
    pub const DID_NOT_EXECUTE: u8 = 0x20;
    pub const MAYBE: u8 = 0x40;
    pub const OBJECT_UUID: u8 = 0x80;
}

/// The data representation duet sends: little-endian integers, ASCII
/// characters, IEEE floats (C706 14.1).
pub const DREP_LE: [u8; 4] = [0x10, 0, 0, 0];

/// The 16-byte common header (C706 12.6.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHeader {
    pub rpc_vers: u8,
    pub rpc_vers_minor: u8,
    pub ptype: u8,
    pub pfc_flags: u8,
    pub drep: [u8; 4],
    pub frag_length: u16,
    pub auth_length: u16,
    pub call_id: u32,
}

impl CommonHeader {
    pub const SIZE: usize = 16;

    /// Whether the sender's integers are little-endian (drep byte 0, bit 4).
    pub fn little_endian(&self) -> bool {
        self.drep[0] & 0x10 != 0
    }

    /// Decodes the header at the start of `pdu` (which may hold more).
    pub fn decode(pdu: &[u8]) -> Result<CommonHeader, DecodeError> {
        if pdu.len() < Self::SIZE {
            return Err(DecodeError("common header"));
        }
        let drep = [pdu[4], pdu[5], pdu[6], pdu[7]];
        let mut r = Reader::new(pdu, drep[0] & 0x10 != 0);
        let rpc_vers = r.u8("rpc_vers")?;
        let rpc_vers_minor = r.u8("rpc_vers_minor")?;
        let ptype = r.u8("PTYPE")?;
        let pfc_flags = r.u8("pfc_flags")?;
        r.bytes(4, "packed_drep")?;
        let frag_length = r.u16("frag_length")?;
        let auth_length = r.u16("auth_length")?;
        let call_id = r.u32("call_id")?;
        Ok(CommonHeader {
            rpc_vers,
            rpc_vers_minor,
            ptype,
            pfc_flags,
            drep,
            frag_length,
            auth_length,
            call_id,
        })
    }

    /// A header for a PDU duet sends (version 5.0, little-endian); the
    /// caller fixes `frag_length` with [`finish`] once the body is written.
    pub fn outgoing(ptype: u8, pfc_flags: u8, call_id: u32) -> CommonHeader {
        CommonHeader {
            rpc_vers: 5,
            rpc_vers_minor: 0,
            ptype,
            pfc_flags,
            drep: DREP_LE,
            frag_length: 0,
            auth_length: 0,
            call_id,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.rpc_vers);
        out.push(self.rpc_vers_minor);
        out.push(self.ptype);
        out.push(self.pfc_flags);
        out.extend_from_slice(&self.drep);
        out.extend_from_slice(&self.frag_length.to_le_bytes());
        out.extend_from_slice(&self.auth_length.to_le_bytes());
        out.extend_from_slice(&self.call_id.to_le_bytes());
    }
}

/// Writes the final frag_length of the PDU that starts at `out[start]`.
/// Encoders of duet's PDUs never exceed 65535 bytes (the endpoint
/// fragments stubs to the negotiated size).
pub fn finish(out: &mut [u8], start: usize) {
    let len = (out.len() - start).min(usize::from(u16::MAX)) as u16;
    out[start + 8..start + 10].copy_from_slice(&len.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_big_endian_decodes() {
        let mut h = CommonHeader::outgoing(PacketType::BIND_ACK, 3, 7);
        h.frag_length = 68;
        let mut b = Vec::new();
        h.encode(&mut b);
        assert_eq!(b.len(), CommonHeader::SIZE);
        assert_eq!(CommonHeader::decode(&b).unwrap(), h);
        let be = [5, 0, 0, 3, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 9];
        let d = CommonHeader::decode(&be).unwrap();
        assert!(!d.little_endian());
        assert_eq!((d.frag_length, d.call_id), (32, 9));
        assert!(CommonHeader::decode(&be[..15]).is_err());
    }
}
