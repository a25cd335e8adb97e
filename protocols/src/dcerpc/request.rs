//! REQUEST (C706 12.6.4.9) and RESPONSE (12.6.4.10) PDUs: the calls and
//! their results, one fragment each; the endpoint reassembles fragmented
//! requests and fragments responses.

use super::header::{finish, pfc, CommonHeader, PacketType};
use super::ndr::Reader;
use super::{DecodeError, Uuid};

/// One REQUEST fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub header: CommonHeader,
    pub alloc_hint: u32,
    pub p_cont_id: u16,
    pub opnum: u16,
    /// Present when PFC_OBJECT_UUID is set.
    pub object: Option<Uuid>,
    /// This fragment's stub data (without any auth verifier).
    pub stub: &'a [u8],
}

impl<'a> Request<'a> {
    /// Fixed part: header, alloc_hint, p_cont_id, opnum.
    pub const FIXED: usize = CommonHeader::SIZE + 8;

    /// Decodes a whole REQUEST PDU (`pdu` is exactly frag_length bytes).
    pub fn decode(pdu: &'a [u8]) -> Result<Request<'a>, DecodeError> {
        let header = CommonHeader::decode(pdu)?;
        let mut r = Reader::new(pdu, header.little_endian());
        r.bytes(CommonHeader::SIZE, "header")?;
        let alloc_hint = r.u32("alloc_hint")?;
        let p_cont_id = r.u16("p_cont_id")?;
        let opnum = r.u16("opnum")?;
        let object = if header.pfc_flags & pfc::OBJECT_UUID != 0 {
            Some(r.uuid("object")?)
        } else {
            None
        };
        // An auth verifier is an 8-byte sec_trailer and auth_length bytes
        // at the end (12.6.3.1 / MS-RPCE 2.2.2.11).
        let trailer = if header.auth_length > 0 {
            usize::from(header.auth_length) + 8
        } else {
            0
        };
        let end = pdu
            .len()
            .checked_sub(trailer)
            .filter(|e| *e >= r.pos())
            .ok_or(DecodeError("auth_length"))?;
        let stub = &pdu[r.pos()..end];
        Ok(Request {
            header,
            alloc_hint,
            p_cont_id,
            opnum,
            object,
            stub,
        })
    }

    /// Encodes one REQUEST fragment (client side; tests).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let mut h = self.header;
        h.auth_length = 0;
        h.drep = super::header::DREP_LE;
        if self.object.is_some() {
            h.pfc_flags |= pfc::OBJECT_UUID;
        }
        h.encode(out);
        out.extend_from_slice(&self.alloc_hint.to_le_bytes());
        out.extend_from_slice(&self.p_cont_id.to_le_bytes());
        out.extend_from_slice(&self.opnum.to_le_bytes());
        if let Some(u) = self.object {
            out.extend_from_slice(&u.0);
        }
        out.extend_from_slice(self.stub);
        finish(out, start);
    }
}

/// One RESPONSE fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response<'a> {
    pub pfc_flags: u8,
    pub call_id: u32,
    /// The whole stub's length (a hint, 12.6.4.10).
    pub alloc_hint: u32,
    pub p_cont_id: u16,
    pub stub: &'a [u8],
}

impl<'a> Response<'a> {
    /// Fixed part: header, alloc_hint, p_cont_id, cancel_count, reserved.
    pub const FIXED: usize = CommonHeader::SIZE + 8;

    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        CommonHeader::outgoing(PacketType::RESPONSE, self.pfc_flags, self.call_id).encode(out);
        out.extend_from_slice(&self.alloc_hint.to_le_bytes());
        out.extend_from_slice(&self.p_cont_id.to_le_bytes());
        out.extend_from_slice(&[0, 0]); // cancel_count, reserved
        out.extend_from_slice(self.stub);
        finish(out, start);
    }

    /// Decodes one RESPONSE fragment (client side; tests).
    pub fn decode(pdu: &'a [u8]) -> Result<Response<'a>, DecodeError> {
        let h = CommonHeader::decode(pdu)?;
        if h.ptype != PacketType::RESPONSE {
            return Err(DecodeError("not a RESPONSE"));
        }
        let mut r = Reader::new(pdu, h.little_endian());
        r.bytes(CommonHeader::SIZE, "header")?;
        let alloc_hint = r.u32("alloc_hint")?;
        let p_cont_id = r.u16("p_cont_id")?;
        r.bytes(2, "cancel_count")?;
        let end = usize::from(h.frag_length).min(pdu.len());
        if end < Self::FIXED {
            return Err(DecodeError("frag_length"));
        }
        Ok(Response {
            pfc_flags: h.pfc_flags,
            call_id: h.call_id,
            alloc_hint,
            p_cont_id,
            stub: &pdu[Self::FIXED..end],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// smbclient 4.17's NetrShareEnum level 1 REQUEST
    /// (smbclient-vs-samba.pcapng frame 23).
    pub const SMBCLIENT_SHARE_ENUM: &str = "05000003100000005c000000020000004400000000000f00000002000a000000000000000a0000003100320037002e0030002e0030002e00310000000100000001000000040002000000000000000000ffffffff0800020000000000";

    #[test]
    fn captured_request_round_trips() {
        let b = hex(SMBCLIENT_SHARE_ENUM);
        let r = Request::decode(&b).unwrap();
        assert_eq!(r.header.call_id, 2);
        assert_eq!((r.p_cont_id, r.opnum, r.alloc_hint), (0, 15, 0x44));
        assert_eq!(r.stub.len(), 0x44);
        let mut again = Vec::new();
        r.encode(&mut again);
        assert_eq!(again, b);
    }

    #[test]
    fn auth_length_beyond_the_pdu_is_an_error() {
        let mut b = hex(SMBCLIENT_SHARE_ENUM);
        b[10] = 0xff;
        assert!(Request::decode(&b).is_err());
        for n in 0..Request::FIXED {
            assert!(Request::decode(&b[..n]).is_err());
        }
    }
}
