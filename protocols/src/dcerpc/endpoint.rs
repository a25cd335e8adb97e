//! The server end of one named pipe carrying connection-oriented DCE/RPC
//! (C706 chapter 12 over MS-RPCE 2.1.1.2 ncacn_np): the SMB layer writes
//! the client's bytes in and reads whole PDUs out, one message each (a
//! message-mode pipe, MS-FSCC 2.3.x / MS-SMB2 3.3.5.13).
//!
//! What it does: frames PDUs by frag_length (12.6.3.1), answers BIND and
//! ALTER_CONTEXT with the presentation context results (12.6.4.3-4, with
//! NDR64 rejected and MS-RPCE 3.3.1.5.3 bind time feature negotiation
//! acknowledged with no features), BIND_NAKs what it cannot bind,
//! reassembles fragmented REQUESTs (12.4.2.x), calls the [`Service`] and
//! fragments its RESPONSE to the negotiated max_xmit_frag, and answers
//! anything it cannot take with a FAULT.

use std::collections::VecDeque;

use super::bind::{reason, reject, result, Bind, BindAck, BindNak, ContextResult};
use super::fault::{status, Fault};
use super::header::{pfc, CommonHeader, PacketType};
use super::request::{Request, Response};
use super::{SyntaxId, BIND_TIME_FEATURE_PREFIX, NDR32};

/// The bind time features duet supports (MS-RPCE 3.3.1.5.3): neither
/// security context multiplexing (no RPC-level security at all) nor
/// keeping the connection on an orphaned call
/// ([`super::bind::feature::KEEP_CONNECTION_ON_ORPHAN`]; an orphaned call here simply
/// abandons the request being reassembled).
pub const SUPPORTED_FEATURES: u16 = 0;

/// An RPC interface served on a pipe.
pub trait Service {
    /// The abstract syntax it binds to.
    fn interface(&self) -> SyntaxId;
    /// Runs operation `opnum` on an NDR32 stub; Ok is the [out] stub,
    /// Err a fault status (see [`super::fault::status`]).
    fn call(&self, opnum: u16, stub: &[u8], little_endian: bool) -> Result<Vec<u8>, u32>;
}

/// A request being reassembled from fragments.
#[derive(Debug)]
struct PartialCall {
    call_id: u32,
    p_cont_id: u16,
    opnum: u16,
    le: bool,
    stub: Vec<u8>,
    /// Over the size limit: the rest of its fragments are dropped and a
    /// fault answers the last one.
    failed: Option<u32>,
}

/// One pipe's DCE/RPC server state.
#[derive(Debug)]
pub struct Endpoint {
    sec_addr: String,
    assoc_group_id: u32,
    bound: bool,
    /// Accepted presentation contexts (p_cont_id).
    contexts: Vec<u16>,
    max_xmit_frag: u16,
    inbound: Vec<u8>,
    call: Option<PartialCall>,
    outbound: VecDeque<Vec<u8>>,
    outbound_bytes: usize,
}

impl Endpoint {
    /// The largest fragment duet sends or expects (what Windows and Samba
    /// use on named pipes).
    pub const MAX_FRAG: u16 = 4280;
    /// MustRecvFragSize (C706 12.6.3.1): no peer may offer less.
    pub const MIN_FRAG: u16 = 1432;
    /// The largest reassembled request stub.
    pub const MAX_CALL: usize = 1 << 20;
    /// Output not read yet beyond which writes are refused.
    pub const MAX_OUTBOUND: usize = 4 << 20;

    /// `sec_addr` is the secondary address of the BIND_ACK (the pipe's
    /// name, e.g. `\PIPE\srvsvc`).
    pub fn new(sec_addr: &str, assoc_group_id: u32) -> Endpoint {
        Endpoint {
            sec_addr: sec_addr.to_string(),
            assoc_group_id: assoc_group_id.max(1),
            bound: false,
            contexts: Vec::new(),
            max_xmit_frag: Self::MAX_FRAG,
            inbound: Vec::new(),
            call: None,
            outbound: VecDeque::new(),
            outbound_bytes: 0,
        }
    }

    /// Whether a PDU waits to be read.
    pub fn has_output(&self) -> bool {
        !self.outbound.is_empty()
    }

    /// Bytes of the first waiting message.
    pub fn next_message_len(&self) -> usize {
        self.outbound.front().map_or(0, Vec::len)
    }

    /// Takes the bytes a client writes. Returns false (taking nothing)
    /// when too much output is waiting to be read.
    pub fn write(&mut self, data: &[u8], svc: &dyn Service) -> bool {
        if self.outbound_bytes > Self::MAX_OUTBOUND {
            return false;
        }
        self.inbound.extend_from_slice(data);
        loop {
            // Output is bounded: past the limit the rest of the input waits
            // (unparsed) for the next write after the client has read.
            if self.inbound.len() < CommonHeader::SIZE || self.outbound_bytes > Self::MAX_OUTBOUND {
                break;
            }
            let h = match CommonHeader::decode(&self.inbound) {
                Ok(h) => h,
                Err(_) => break,
            };
            let len = usize::from(h.frag_length);
            if len < CommonHeader::SIZE || h.rpc_vers != 5 {
                // The byte stream cannot be framed any more.
                self.inbound.clear();
                self.call = None;
                if h.ptype == PacketType::BIND {
                    self.bind_nak(h.call_id, reject::PROTOCOL_VERSION_NOT_SUPPORTED);
                } else {
                    self.fault(h.call_id, 0, status::PROTO_ERROR);
                }
                break;
            }
            if self.inbound.len() < len {
                break;
            }
            let pdu: Vec<u8> = self.inbound.drain(..len).collect();
            self.pdu(&h, &pdu, svc);
        }
        true
    }

    /// Reads up to `max` bytes of the first waiting message; returns them
    /// and how many bytes of that message are left (a message-mode read
    /// smaller than the message, MS-SMB2 3.3.5.12: STATUS_BUFFER_OVERFLOW).
    pub fn read(&mut self, max: usize) -> Option<(Vec<u8>, usize)> {
        let front = self.outbound.front_mut()?;
        if front.len() <= max {
            let m = self.outbound.pop_front()?;
            self.outbound_bytes -= m.len();
            return Some((m, 0));
        }
        let rest = front.split_off(max);
        let head = std::mem::replace(front, rest);
        self.outbound_bytes -= head.len();
        let left = front.len();
        Some((head, left))
    }

    fn push(&mut self, pdu: Vec<u8>) {
        self.outbound_bytes += pdu.len();
        self.outbound.push_back(pdu);
    }

    fn fault(&mut self, call_id: u32, p_cont_id: u16, st: u32) {
        let mut out = Vec::new();
        Fault {
            call_id,
            p_cont_id,
            status: st,
            did_not_execute: true,
        }
        .encode(&mut out);
        self.push(out);
    }

    fn bind_nak(&mut self, call_id: u32, why: u16) {
        let mut out = Vec::new();
        BindNak {
            call_id,
            reject_reason: why,
        }
        .encode(&mut out);
        self.push(out);
    }

    fn pdu(&mut self, h: &CommonHeader, pdu: &[u8], svc: &dyn Service) {
        match h.ptype {
            PacketType::BIND | PacketType::ALTER_CONTEXT => self.bind(h, pdu, svc),
            PacketType::REQUEST => self.request(h, pdu, svc),
            // No authentication is negotiated, so AUTH3 carries nothing to
            // us; SHUTDOWN is server to client; ORPHANED and CO_CANCEL
            // abandon the call being received (12.4.2.x), with no reply.
            PacketType::AUTH3 | PacketType::SHUTDOWN => {}
            PacketType::ORPHANED | PacketType::CO_CANCEL => {
                if self.call.as_ref().is_some_and(|c| c.call_id == h.call_id) {
                    self.call = None;
                }
            }
            _ => self.fault(h.call_id, 0, status::PROTO_ERROR),
        }
    }

    fn bind(&mut self, h: &CommonHeader, pdu: &[u8], svc: &dyn Service) {
        let alter = h.ptype == PacketType::ALTER_CONTEXT;
        if h.rpc_vers_minor > 1 {
            return self.bind_nak(h.call_id, reject::PROTOCOL_VERSION_NOT_SUPPORTED);
        }
        if alter != self.bound {
            // A second BIND on the association, or ALTER_CONTEXT before
            // any BIND.
            if alter {
                return self.fault(h.call_id, 0, status::PROTO_ERROR);
            }
            return self.bind_nak(h.call_id, reject::NOT_SPECIFIED);
        }
        if h.auth_length != 0 {
            // duet offers no RPC-level authentication on its pipes (the
            // SMB session already authenticated the caller).
            if alter {
                return self.fault(h.call_id, 0, status::ACCESS_DENIED);
            }
            return self.bind_nak(h.call_id, reject::AUTHENTICATION_TYPE_NOT_RECOGNIZED);
        }
        let b = match Bind::decode(pdu) {
            Ok(b) => b,
            Err(_) if alter => return self.fault(h.call_id, 0, status::PROTO_ERROR),
            Err(_) => return self.bind_nak(h.call_id, reject::NOT_SPECIFIED),
        };
        if b.contexts.is_empty() {
            if alter {
                return self.fault(h.call_id, 0, status::PROTO_ERROR);
            }
            return self.bind_nak(h.call_id, reject::NOT_SPECIFIED);
        }
        let iface = svc.interface();
        let mut results = Vec::with_capacity(b.contexts.len());
        let mut features_answered = false;
        for c in &b.contexts {
            let btfn = c
                .transfer_syntaxes
                .iter()
                .find(|t| t.uuid.0[..8] == BIND_TIME_FEATURE_PREFIX && t.version == 1);
            let r = if let (Some(_), false) = (btfn, features_answered) {
                // MS-RPCE 3.3.1.5.3: answer with negotiate_ack and the
                // features both sides support, here none.
                features_answered = true;
                let offered = btfn.map_or(0, |t| u16::from_le_bytes([t.uuid.0[8], t.uuid.0[9]]));
                ContextResult {
                    result: result::NEGOTIATE_ACK,
                    reason: offered & SUPPORTED_FEATURES,
                    transfer_syntax: SyntaxId::default(),
                }
            } else if c.abstract_syntax.uuid != iface.uuid
                || c.abstract_syntax.major() != iface.major()
            {
                ContextResult {
                    result: result::PROVIDER_REJECTION,
                    reason: reason::ABSTRACT_SYNTAX_NOT_SUPPORTED,
                    transfer_syntax: SyntaxId::default(),
                }
            } else if c.transfer_syntaxes.contains(&NDR32) {
                if !self.contexts.contains(&c.p_cont_id) {
                    self.contexts.push(c.p_cont_id);
                }
                ContextResult {
                    result: result::ACCEPTANCE,
                    reason: 0,
                    transfer_syntax: NDR32,
                }
            } else {
                // NDR64 or anything else: not spoken here.
                ContextResult {
                    result: result::PROVIDER_REJECTION,
                    reason: reason::PROPOSED_TRANSFER_SYNTAXES_NOT_SUPPORTED,
                    transfer_syntax: SyntaxId::default(),
                }
            };
            results.push(r);
        }
        if !alter {
            self.bound = true;
            self.max_xmit_frag = b.max_recv_frag.clamp(Self::MIN_FRAG, Self::MAX_FRAG);
            if b.assoc_group_id != 0 {
                self.assoc_group_id = b.assoc_group_id;
            }
        }
        let mut out = Vec::new();
        BindAck {
            ptype: if alter {
                PacketType::ALTER_CONTEXT_RESP
            } else {
                PacketType::BIND_ACK
            },
            call_id: h.call_id,
            max_xmit_frag: self.max_xmit_frag,
            max_recv_frag: self.max_xmit_frag,
            assoc_group_id: self.assoc_group_id,
            sec_addr: if alter {
                String::new()
            } else {
                self.sec_addr.clone()
            },
            results,
        }
        .encode(&mut out);
        self.push(out);
    }

    fn request(&mut self, h: &CommonHeader, pdu: &[u8], svc: &dyn Service) {
        let Ok(req) = Request::decode(pdu) else {
            self.call = None;
            return self.fault(h.call_id, 0, status::PROTO_ERROR);
        };
        if !self.bound || h.auth_length != 0 {
            self.call = None;
            return self.fault(h.call_id, req.p_cont_id, status::PROTO_ERROR);
        }
        let first = h.pfc_flags & pfc::FIRST_FRAG != 0;
        let last = h.pfc_flags & pfc::LAST_FRAG != 0;
        if first {
            if let Some(old) = self.call.take() {
                // A new call before the last one was complete.
                self.fault(old.call_id, old.p_cont_id, status::PROTO_ERROR);
            }
            self.call = Some(PartialCall {
                call_id: h.call_id,
                p_cont_id: req.p_cont_id,
                opnum: req.opnum,
                le: h.little_endian(),
                stub: Vec::new(),
                failed: None,
            });
        }
        let Some(call) = self.call.as_mut().filter(|c| c.call_id == h.call_id) else {
            self.call = None;
            return self.fault(h.call_id, req.p_cont_id, status::PROTO_ERROR);
        };
        if call.failed.is_none() {
            if call.stub.len() + req.stub.len() > Self::MAX_CALL {
                call.failed = Some(status::REMOTE_NO_MEMORY);
                call.stub = Vec::new();
            } else {
                call.stub.extend_from_slice(req.stub);
            }
        }
        if !last {
            return;
        }
        let Some(call) = self.call.take() else { return };
        if let Some(st) = call.failed {
            return self.fault(call.call_id, call.p_cont_id, st);
        }
        if !self.contexts.contains(&call.p_cont_id) {
            return self.fault(call.call_id, call.p_cont_id, status::UNK_IF);
        }
        match svc.call(call.opnum, &call.stub, call.le) {
            Ok(stub) => self.respond(call.call_id, call.p_cont_id, &stub),
            Err(st) => self.fault(call.call_id, call.p_cont_id, st),
        }
    }

    /// Queues the RESPONSE fragments of a stub: each at most
    /// max_xmit_frag, stubs of all but the last a multiple of 8.
    fn respond(&mut self, call_id: u32, p_cont_id: u16, stub: &[u8]) {
        let room = (usize::from(self.max_xmit_frag) - Response::FIXED) / 8 * 8;
        let mut at = 0;
        loop {
            let end = (at + room).min(stub.len());
            let mut flags = 0;
            if at == 0 {
                flags |= pfc::FIRST_FRAG;
            }
            if end == stub.len() {
                flags |= pfc::LAST_FRAG;
            }
            let mut out = Vec::with_capacity(Response::FIXED + end - at);
            Response {
                pfc_flags: flags,
                call_id,
                alloc_hint: (stub.len() - at) as u32,
                p_cont_id,
                stub: &stub[at..end],
            }
            .encode(&mut out);
            self.push(out);
            at = end;
            if at >= stub.len() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dcerpc::bind::ContextElem;
    use crate::dcerpc::fault::Fault;
    use crate::dcerpc::srvsvc::{stype, ShareEnumReply, ShareInfo, Srvsvc};
    use crate::dcerpc::{Uuid, NDR64, SRVSVC};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const SMBCLIENT_BIND: &str = "05000b03100000004800000001000000b810b810000000000100000000000100c84f324b7016d30112785a47bf6ee18803000000045d888aeb1cc9119fe808002b10486002000000";
    const SAMBA_BIND_ACK: &str = "05000c03100000004400000001000000b810b8107b7800000d005c706970655c73727673766300000100000000000000045d888aeb1cc9119fe808002b10486002000000";
    const SMBCLIENT_SHARE_ENUM: &str = "05000003100000005c000000020000004400000000000f00000002000a000000000000000a0000003100320037002e0030002e0030002e00310000000100000001000000040002000000000000000000ffffffff0800020000000000";

    fn svc(n: usize) -> Srvsvc {
        let mut shares: Vec<ShareInfo> = (0..n)
            .map(|i| ShareInfo {
                name: format!("share{i}"),
                share_type: stype::DISKTREE,
                remark: String::new(),
                path: String::new(),
            })
            .collect();
        shares.push(ShareInfo {
            name: "IPC$".into(),
            share_type: stype::IPC | stype::SPECIAL,
            remark: "IPC Service".into(),
            path: String::new(),
        });
        Srvsvc {
            server_name: "DUET".into(),
            comment: String::new(),
            shares,
        }
    }

    fn bound(s: &Srvsvc) -> Endpoint {
        let mut e = Endpoint::new("\\pipe\\srvsvc", 0x787b);
        assert!(e.write(&hex(SMBCLIENT_BIND), s));
        e.read(65536).unwrap();
        e
    }

    #[test]
    fn captured_bind_gets_samba_bind_ack() {
        let s = svc(1);
        let mut e = Endpoint::new("\\pipe\\srvsvc", 0x787b);
        // Written in two pieces: framing must wait for the whole PDU.
        let b = hex(SMBCLIENT_BIND);
        assert!(e.write(&b[..20], &s));
        assert!(!e.has_output());
        assert!(e.write(&b[20..], &s));
        let (ack, left) = e.read(4280).unwrap();
        assert_eq!(left, 0);
        assert_eq!(ack, hex(SAMBA_BIND_ACK));
        assert!(e.read(4280).is_none());
    }

    #[test]
    fn captured_share_enum_is_answered() {
        let s = svc(1);
        let mut e = bound(&s);
        e.write(&hex(SMBCLIENT_SHARE_ENUM), &s);
        let (pdu, _) = e.read(4280).unwrap();
        let r = Response::decode(&pdu).unwrap();
        assert_eq!((r.call_id, r.p_cont_id), (2, 0));
        assert_eq!(r.pfc_flags, pfc::FIRST_FRAG | pfc::LAST_FRAG);
        let reply = ShareEnumReply::decode(r.stub).unwrap();
        let names: Vec<&str> = reply.entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names, ["share0", "IPC$"]);
        assert_eq!(reply.entries[1].1, 0x8000_0003);
    }

    #[test]
    fn large_responses_are_fragmented_and_read_in_pieces() {
        let s = svc(300);
        let mut e = bound(&s);
        e.write(&hex(SMBCLIENT_SHARE_ENUM), &s);
        let mut stub = Vec::new();
        let mut frags = 0;
        loop {
            // Read each message in two pieces, as a small READ would.
            let (mut head, left) = e.read(100).unwrap();
            assert!(left > 0);
            let (tail, left) = e.read(65536).unwrap();
            assert_eq!(left, 0);
            head.extend_from_slice(&tail);
            assert!(head.len() <= 4280);
            let r = Response::decode(&head).unwrap();
            assert_eq!(
                r.stub.len() % 8 == 0,
                r.pfc_flags & pfc::LAST_FRAG == 0 || r.stub.len() % 8 == 0
            );
            stub.extend_from_slice(r.stub);
            frags += 1;
            if r.pfc_flags & pfc::LAST_FRAG != 0 {
                break;
            }
        }
        assert!(frags > 2);
        let reply = ShareEnumReply::decode(&stub).unwrap();
        assert_eq!(reply.entries.len(), 301);
        assert!(!e.has_output());
    }

    fn bind_pdu(contexts: Vec<ContextElem>, ptype: u8, call_id: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let mut h = CommonHeader::outgoing(ptype, 3, call_id);
        h.drep = crate::dcerpc::header::DREP_LE;
        Bind {
            header: h,
            max_xmit_frag: 5840,
            max_recv_frag: 5840,
            assoc_group_id: 0,
            contexts,
        }
        .encode(&mut out);
        out
    }

    #[test]
    fn windows_style_bind_ndr64_rejected_features_negotiated() {
        let s = svc(0);
        let mut e = Endpoint::new("\\PIPE\\srvsvc", 9);
        let mut btfn = Uuid::default();
        btfn.0[..8].copy_from_slice(&BIND_TIME_FEATURE_PREFIX);
        btfn.0[8] = 0x03;
        let ctx = |id, t: SyntaxId| ContextElem {
            p_cont_id: id,
            abstract_syntax: SRVSVC,
            transfer_syntaxes: vec![t],
        };
        let pdu = bind_pdu(
            vec![
                ctx(0, NDR32),
                ctx(1, NDR64),
                ctx(
                    2,
                    SyntaxId {
                        uuid: btfn,
                        version: 1,
                    },
                ),
            ],
            PacketType::BIND,
            1,
        );
        e.write(&pdu, &s);
        let ack = BindAck::decode(&e.read(9999).unwrap().0).unwrap();
        assert_eq!(ack.max_xmit_frag, 4280);
        assert_eq!(ack.assoc_group_id, 9);
        let r: Vec<(u16, u16)> = ack.results.iter().map(|r| (r.result, r.reason)).collect();
        assert_eq!(
            r,
            [
                (result::ACCEPTANCE, 0),
                (
                    result::PROVIDER_REJECTION,
                    reason::PROPOSED_TRANSFER_SYNTAXES_NOT_SUPPORTED
                ),
                (result::NEGOTIATE_ACK, 0)
            ]
        );
        assert_eq!(ack.results[0].transfer_syntax, NDR32);
        assert_eq!(ack.results[1].transfer_syntax, SyntaxId::default());
        // A call on the rejected NDR64 context faults with nca_unk_if.
        let mut req = hex(SMBCLIENT_SHARE_ENUM);
        req[20] = 1;
        e.write(&req, &s);
        let f = Fault::decode(&e.read(9999).unwrap().0).unwrap();
        assert_eq!((f.status, f.call_id), (status::UNK_IF, 2));
        // An ALTER_CONTEXT for another interface is answered, rejected.
        let other = ContextElem {
            p_cont_id: 5,
            abstract_syntax: SyntaxId {
                uuid: Uuid([7; 16]),
                version: 1,
            },
            transfer_syntaxes: vec![NDR32],
        };
        e.write(&bind_pdu(vec![other], PacketType::ALTER_CONTEXT, 3), &s);
        let ack = BindAck::decode(&e.read(9999).unwrap().0).unwrap();
        assert_eq!(ack.ptype, PacketType::ALTER_CONTEXT_RESP);
        assert_eq!(ack.sec_addr, "");
        assert_eq!(ack.results[0].reason, reason::ABSTRACT_SYNTAX_NOT_SUPPORTED);
        // A second BIND is refused.
        e.write(&bind_pdu(vec![ctx(0, NDR32)], PacketType::BIND, 4), &s);
        assert_eq!(e.read(9999).unwrap().0[2], PacketType::BIND_NAK);
    }

    #[test]
    fn unknown_opnum_faults_and_fragmented_requests_reassemble() {
        let s = svc(2);
        let mut e = bound(&s);
        let mut req = hex(SMBCLIENT_SHARE_ENUM);
        req[22] = 99;
        e.write(&req, &s);
        let f = Fault::decode(&e.read(9999).unwrap().0).unwrap();
        assert_eq!(f.status, status::OP_RNG_ERROR);
        assert!(f.did_not_execute);
        // The same call in three fragments.
        let whole = hex(SMBCLIENT_SHARE_ENUM);
        let r = Request::decode(&whole).unwrap();
        let parts = [&r.stub[..10], &r.stub[10..40], &r.stub[40..]];
        for (i, p) in parts.iter().enumerate() {
            let mut h = r.header;
            h.pfc_flags =
                if i == 0 { pfc::FIRST_FRAG } else { 0 } | if i == 2 { pfc::LAST_FRAG } else { 0 };
            let mut out = Vec::new();
            Request {
                header: h,
                stub: p,
                ..r.clone()
            }
            .encode(&mut out);
            e.write(&out, &s);
            assert_eq!(e.has_output(), i == 2);
        }
        let pdu = e.read(9999).unwrap().0;
        let resp = Response::decode(&pdu).unwrap();
        assert_eq!(ShareEnumReply::decode(resp.stub).unwrap().entries.len(), 3);
    }

    #[test]
    fn output_is_bounded_when_the_client_does_not_read() {
        let s = svc(2);
        let mut e = bound(&s);
        let req = hex(SMBCLIENT_SHARE_ENUM);
        let many: Vec<u8> = req
            .iter()
            .copied()
            .cycle()
            .take(req.len() * 40_000)
            .collect();
        assert!(e.write(&many, &s));
        assert!(e.outbound_bytes <= Endpoint::MAX_OUTBOUND + 4280);
        assert!(!e.write(&req, &s), "refused until the output is read");
        let mut n = 0;
        while e.read(1 << 20).is_some() {
            n += 1;
        }
        assert!(n > 1000);
        // The rest of the first write is answered after the reads.
        assert!(e.write(&[], &s));
        assert!(e.has_output());
    }

    #[test]
    fn requests_before_bind_and_garbage_fault() {
        let s = svc(0);
        let mut e = Endpoint::new("\\pipe\\srvsvc", 1);
        e.write(&hex(SMBCLIENT_SHARE_ENUM), &s);
        let f = Fault::decode(&e.read(9999).unwrap().0).unwrap();
        assert_eq!(f.status, status::PROTO_ERROR);
        // frag_length below the header: the stream is dropped, one fault.
        e.write(
            &[5, 0, 0, 3, 0x10, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 9, 9],
            &s,
        );
        assert_eq!(e.read(9999).unwrap().0[2], PacketType::FAULT);
        assert!(!e.has_output());
        // Version 4 BIND: BIND_NAK.
        let mut b = hex(SMBCLIENT_BIND);
        b[0] = 4;
        e.write(&b, &s);
        assert_eq!(e.read(9999).unwrap().0[2], PacketType::BIND_NAK);
    }

    /// Every prefix and every one-byte corruption of the captured PDUs is
    /// answered without a panic, and every answer frames.
    #[test]
    fn hostile_pdus_never_panic() {
        let s = svc(3);
        let bind = hex(SMBCLIENT_BIND);
        let req = hex(SMBCLIENT_SHARE_ENUM);
        for base in [&bind, &req] {
            for i in 0..base.len() {
                for v in [0u8, 1, 0x7f, 0xff] {
                    let mut e = bound(&s);
                    let mut m = base.clone();
                    m[i] = v;
                    e.write(&m, &s);
                    e.write(&base[..i], &s);
                    while let Some((pdu, _)) = e.read(1 << 20) {
                        let h = CommonHeader::decode(&pdu).unwrap();
                        assert_eq!(usize::from(h.frag_length), pdu.len());
                    }
                }
            }
        }
    }
}
