//! BIND and ALTER_CONTEXT (C706 12.6.4.3 / 12.6.4.1), BIND_ACK and
//! ALTER_CONTEXT_RESP (12.6.4.4 / 12.6.4.2), BIND_NAK (12.6.4.5,
//! MS-RPCE 2.2.2.9), with MS-RPCE's negotiate_ack result for bind time
//! feature negotiation (2.2.2.4 and 3.3.1.5.3).

use super::header::{finish, pfc, CommonHeader, PacketType};
use super::ndr::Reader;
use super::{DecodeError, SyntaxId};

/// `p_cont_elem_t` (C706 12.6.3.1): one presentation context proposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextElem {
    pub p_cont_id: u16,
    pub abstract_syntax: SyntaxId,
    pub transfer_syntaxes: Vec<SyntaxId>,
}

/// The body of a BIND or an ALTER_CONTEXT (same layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub header: CommonHeader,
    pub max_xmit_frag: u16,
    pub max_recv_frag: u16,
    pub assoc_group_id: u32,
    pub contexts: Vec<ContextElem>,
}

impl Bind {
    /// Decodes a whole BIND / ALTER_CONTEXT PDU (`pdu` is exactly
    /// `frag_length` bytes). A trailing auth verifier is not interpreted.
    pub fn decode(pdu: &[u8]) -> Result<Bind, DecodeError> {
        let header = CommonHeader::decode(pdu)?;
        let mut r = Reader::new(pdu, header.little_endian());
        r.bytes(CommonHeader::SIZE, "header")?;
        let max_xmit_frag = r.u16("max_xmit_frag")?;
        let max_recv_frag = r.u16("max_recv_frag")?;
        let assoc_group_id = r.u32("assoc_group_id")?;
        let n = r.u8("n_context_elem")?;
        r.u8("reserved")?;
        r.u16("reserved2")?;
        let mut contexts = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let p_cont_id = r.u16("p_cont_id")?;
            let n_syn = r.u8("n_transfer_syn")?;
            r.u8("reserved")?;
            let abstract_syntax = r.syntax_id("abstract_syntax")?;
            let mut transfer_syntaxes = Vec::with_capacity(usize::from(n_syn));
            for _ in 0..n_syn {
                transfer_syntaxes.push(r.syntax_id("transfer_syntaxes")?);
            }
            contexts.push(ContextElem {
                p_cont_id,
                abstract_syntax,
                transfer_syntaxes,
            });
        }
        Ok(Bind {
            header,
            max_xmit_frag,
            max_recv_frag,
            assoc_group_id,
            contexts,
        })
    }

    /// Encodes a BIND (client side; used by tests).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        self.header.encode(out);
        out.extend_from_slice(&self.max_xmit_frag.to_le_bytes());
        out.extend_from_slice(&self.max_recv_frag.to_le_bytes());
        out.extend_from_slice(&self.assoc_group_id.to_le_bytes());
        out.extend_from_slice(&[self.contexts.len() as u8, 0, 0, 0]);
        for c in &self.contexts {
            out.extend_from_slice(&c.p_cont_id.to_le_bytes());
            out.extend_from_slice(&[c.transfer_syntaxes.len() as u8, 0]);
            put_syntax(out, &c.abstract_syntax);
            for t in &c.transfer_syntaxes {
                put_syntax(out, t);
            }
        }
        finish(out, start);
    }
}

fn put_syntax(out: &mut Vec<u8>, s: &SyntaxId) {
    out.extend_from_slice(&s.uuid.0);
    out.extend_from_slice(&s.version.to_le_bytes());
}

/// `p_cont_def_result_t` (C706 12.6.3.1; negotiate_ack from MS-RPCE
/// 2.2.2.4).
pub mod result {
    pub const ACCEPTANCE: u16 = 0;
    pub const USER_REJECTION: u16 = 1;
    pub const PROVIDER_REJECTION: u16 = 2;
    pub const NEGOTIATE_ACK: u16 = 3;
}

/// `p_provider_reason_t` (C706 12.6.3.1).
pub mod reason {
    pub const NOT_SPECIFIED: u16 = 0;
    pub const ABSTRACT_SYNTAX_NOT_SUPPORTED: u16 = 1;
    pub const PROPOSED_TRANSFER_SYNTAXES_NOT_SUPPORTED: u16 = 2;
    pub const LOCAL_LIMIT_EXCEEDED: u16 = 3;
}

/// `p_reject_reason_t` of a BIND_NAK (C706 12.6.3.1, MS-RPCE 2.2.2.9).
pub mod reject {
    pub const NOT_SPECIFIED: u16 = 0;
    pub const LOCAL_LIMIT_EXCEEDED: u16 = 2;
    pub const PROTOCOL_VERSION_NOT_SUPPORTED: u16 = 4;
    pub const AUTHENTICATION_TYPE_NOT_RECOGNIZED: u16 = 8;
}

/// MS-RPCE 3.3.1.5.3 bind time feature bits (in `reason` of a
/// negotiate_ack).
pub mod feature {
    pub const SECURITY_CONTEXT_MULTIPLEXING: u16 = 0x0001;
    pub const KEEP_CONNECTION_ON_ORPHAN: u16 = 0x0002;
}

/// `p_result_t` (C706 12.6.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextResult {
    pub result: u16,
    pub reason: u16,
    pub transfer_syntax: SyntaxId,
}

/// A BIND_ACK or an ALTER_CONTEXT_RESP (same layout; an
/// ALTER_CONTEXT_RESP carries an empty secondary address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindAck {
    pub ptype: u8,
    pub call_id: u32,
    pub max_xmit_frag: u16,
    pub max_recv_frag: u16,
    pub assoc_group_id: u32,
    /// `port_spec` of the secondary address without its NUL, e.g.
    /// `\PIPE\srvsvc`; empty for none.
    pub sec_addr: String,
    pub results: Vec<ContextResult>,
}

impl BindAck {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        CommonHeader::outgoing(self.ptype, pfc::FIRST_FRAG | pfc::LAST_FRAG, self.call_id)
            .encode(out);
        out.extend_from_slice(&self.max_xmit_frag.to_le_bytes());
        out.extend_from_slice(&self.max_recv_frag.to_le_bytes());
        out.extend_from_slice(&self.assoc_group_id.to_le_bytes());
        // port_any_t: length (counting the NUL), then the string (12.6.3.1).
        if self.sec_addr.is_empty() {
            out.extend_from_slice(&0u16.to_le_bytes());
        } else {
            let len = self.sec_addr.len() + 1;
            out.extend_from_slice(&(len as u16).to_le_bytes());
            out.extend_from_slice(self.sec_addr.as_bytes());
            out.push(0);
        }
        // The result list starts 4-aligned (12.6.4.4: pad2).
        while (out.len() - start) % 4 != 0 {
            out.push(0);
        }
        out.extend_from_slice(&[self.results.len() as u8, 0, 0, 0]);
        for r in &self.results {
            out.extend_from_slice(&r.result.to_le_bytes());
            out.extend_from_slice(&r.reason.to_le_bytes());
            put_syntax(out, &r.transfer_syntax);
        }
        finish(out, start);
    }

    /// Decodes a BIND_ACK / ALTER_CONTEXT_RESP (client side; tests).
    pub fn decode(pdu: &[u8]) -> Result<BindAck, DecodeError> {
        let h = CommonHeader::decode(pdu)?;
        let mut r = Reader::new(pdu, h.little_endian());
        r.bytes(CommonHeader::SIZE, "header")?;
        let max_xmit_frag = r.u16("max_xmit_frag")?;
        let max_recv_frag = r.u16("max_recv_frag")?;
        let assoc_group_id = r.u32("assoc_group_id")?;
        let len = usize::from(r.u16("sec_addr length")?);
        let raw = r.bytes(len, "port_spec")?;
        let sec_addr = String::from_utf8_lossy(raw.strip_suffix(&[0]).unwrap_or(raw)).into_owned();
        r.align(4)?;
        let n = r.u8("n_results")?;
        r.bytes(3, "reserved")?;
        let mut results = Vec::new();
        for _ in 0..n {
            let result = r.u16("result")?;
            let reason = r.u16("reason")?;
            let transfer_syntax = r.syntax_id("transfer_syntax")?;
            results.push(ContextResult {
                result,
                reason,
                transfer_syntax,
            });
        }
        Ok(BindAck {
            ptype: h.ptype,
            call_id: h.call_id,
            max_xmit_frag,
            max_recv_frag,
            assoc_group_id,
            sec_addr,
            results,
        })
    }
}

/// A BIND_NAK (C706 12.6.4.5): the reason and the protocol versions the
/// server supports (5.0 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindNak {
    pub call_id: u32,
    pub reject_reason: u16,
}

impl BindNak {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        CommonHeader::outgoing(
            PacketType::BIND_NAK,
            pfc::FIRST_FRAG | pfc::LAST_FRAG,
            self.call_id,
        )
        .encode(out);
        out.extend_from_slice(&self.reject_reason.to_le_bytes());
        // p_rt_versions_supported_t: one version, 5.0.
        out.extend_from_slice(&[1, 5, 0]);
        while (out.len() - start) % 4 != 0 {
            out.push(0);
        }
        finish(out, start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dcerpc::{NDR32, SRVSVC};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// smbclient 4.17's BIND to srvsvc (smbclient-vs-samba.pcapng frame
    /// 17, the FSCTL_PIPE_TRANSCEIVE input).
    const SMBCLIENT_BIND: &str = "05000b03100000004800000001000000b810b810000000000100000000000100c84f324b7016d30112785a47bf6ee18803000000045d888aeb1cc9119fe808002b10486002000000";
    /// Samba 4.17's BIND_ACK to it (frame 21).
    const SAMBA_BIND_ACK: &str = "05000c03100000004400000001000000b810b8107b7800000d005c706970655c73727673766300000100000000000000045d888aeb1cc9119fe808002b10486002000000";

    #[test]
    fn captured_bind_decodes_and_reencodes() {
        let b = hex(SMBCLIENT_BIND);
        let bind = Bind::decode(&b).unwrap();
        assert_eq!(bind.header.ptype, PacketType::BIND);
        assert_eq!((bind.max_xmit_frag, bind.max_recv_frag), (4280, 4280));
        assert_eq!(bind.assoc_group_id, 0);
        assert_eq!(bind.contexts.len(), 1);
        assert_eq!(bind.contexts[0].abstract_syntax, SRVSVC);
        assert_eq!(bind.contexts[0].transfer_syntaxes, vec![NDR32]);
        let mut again = Vec::new();
        bind.encode(&mut again);
        assert_eq!(again, b);
    }

    #[test]
    fn bind_ack_encodes_like_samba() {
        let ack = BindAck {
            ptype: PacketType::BIND_ACK,
            call_id: 1,
            max_xmit_frag: 4280,
            max_recv_frag: 4280,
            assoc_group_id: 0x787b,
            sec_addr: "\\pipe\\srvsvc".into(),
            results: vec![ContextResult {
                result: result::ACCEPTANCE,
                reason: 0,
                transfer_syntax: NDR32,
            }],
        };
        let mut out = Vec::new();
        ack.encode(&mut out);
        assert_eq!(out, hex(SAMBA_BIND_ACK));
        assert_eq!(BindAck::decode(&out).unwrap(), ack);
    }

    #[test]
    fn truncated_binds_are_errors() {
        let b = hex(SMBCLIENT_BIND);
        for n in 0..b.len() - 1 {
            assert!(Bind::decode(&b[..n]).is_err(), "{n}");
        }
    }

    #[test]
    fn bind_nak_layout() {
        let mut out = Vec::new();
        BindNak {
            call_id: 4,
            reject_reason: reject::PROTOCOL_VERSION_NOT_SUPPORTED,
        }
        .encode(&mut out);
        assert_eq!(out.len(), 24);
        assert_eq!(&out[16..21], &[4, 0, 1, 5, 0]);
        assert_eq!(CommonHeader::decode(&out).unwrap().frag_length, 24);
    }
}
