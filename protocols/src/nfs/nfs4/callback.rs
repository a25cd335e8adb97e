//! The NFSv4.1 callback program (RFC 8881 sections 19 and 20) as far as
//! the server sends it: a CB_COMPOUND (19.2) of CB_SEQUENCE (20.9) and
//! CB_RECALL (20.2) or CB_GETATTR (20.1) in an ONC RPC CALL (RFC
//! 5531 section 9) with record marking (RFC 5531 section 11), and the
//! reply's header and status. The server writes the call on a connection
//! the client bound to the session's back channel (RFC 8881 2.10.3.1).

use super::attrs::fattr4;
use super::{Bitmap4, Fattr4, Nfsstat4, SessionId4, Stateid4};
use crate::nfs::rpc::{begin_record, end_record, CallBody, OpaqueAuth, ReplyBody, ReplyHeader, RPC_VERSION};
use crate::nfs::rpc::AcceptedReplyData;
use crate::nfs::xdr::{XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter};

/// RFC 8881 19.2: CB_COMPOUND's procedure number (19.1: 0 is CB_NULL).
pub const CB_COMPOUND: u32 = 1;
/// The callback program's version (RFC 8881 19: NFS_CB version 1).
pub const CB_VERSION: u32 = 1;

/// RFC 8881 20: nfs_cb_opnum4 values duet sends.
pub mod cb_opnum {
    pub const CB_GETATTR: u32 = 3;
    pub const CB_RECALL: u32 = 4;
    pub const CB_SEQUENCE: u32 = 11;
}

/// RFC 8881 20.9.1: CB_SEQUENCE4args (no referring call lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CbSequence4Args {
    pub sessionid: SessionId4,
    pub sequenceid: u32,
    pub slotid: u32,
    pub highest_slotid: u32,
    pub cachethis: bool,
}

impl XdrEncode for CbSequence4Args {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_opaque_fixed(&self.sessionid);
        w.put_u32(self.sequenceid);
        w.put_u32(self.slotid);
        w.put_u32(self.highest_slotid);
        w.put_bool(self.cachethis);
        // csa_referring_call_lists<>: none.
        w.put_u32(0);
    }
}

/// RFC 8881 20.2.1: CB_RECALL4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbRecall4Args {
    pub stateid: Stateid4,
    pub truncate: bool,
    pub fh: Vec<u8>,
}

impl XdrEncode for CbRecall4Args {
    fn encode(&self, w: &mut XdrWriter) {
        self.stateid.encode(w);
        w.put_bool(self.truncate);
        w.put_opaque(&self.fh);
    }
}

/// The credential of a callback (RFC 8881 18.36.1 callback_sec_parms4 as
/// kept by the server): AUTH_NONE, or AUTH_SYS with the parameters the
/// client gave.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CbCred {
    #[default]
    None,
    /// The encoded authsys_parms body.
    Sys(Vec<u8>),
}

/// RFC 8881 20.1.1: CB_GETATTR4args, the file and the attributes asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbGetattr4Args {
    pub fh: Vec<u8>,
    pub attr_request: Bitmap4,
}

impl XdrEncode for CbGetattr4Args {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_opaque(&self.fh);
        self.attr_request.encode(w);
    }
}

/// The operation a CB_COMPOUND carries after its CB_SEQUENCE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbOp {
    Recall(CbRecall4Args),
    Getattr(CbGetattr4Args),
}

/// One whole record-marked RPC CALL of CB_COMPOUND (RFC 8881 19.2.1:
/// CB_COMPOUND4args tag, minorversion, callback_ident, argarray) holding
/// CB_SEQUENCE and CB_RECALL. `minor` is the session's minor version (1
/// or 2: RFC 7862 keeps the callback program and asks the same).
pub fn encode_cb_recall(xid: u32, prog: u32, minor: u32, cred: &CbCred, seq: &CbSequence4Args, recall: &CbRecall4Args) -> Vec<u8> {
    encode_cb_compound(xid, prog, minor, cred, seq, &CbOp::Recall(recall.clone()))
}

/// [`encode_cb_recall`] for any [`CbOp`].
pub fn encode_cb_compound(xid: u32, prog: u32, minor: u32, cred: &CbCred, seq: &CbSequence4Args, op: &CbOp) -> Vec<u8> {
    let mut w = XdrWriter::new();
    let at = begin_record(&mut w);
    let cred_auth = match cred {
        CbCred::None => OpaqueAuth::NONE,
        CbCred::Sys(body) => OpaqueAuth { flavor: crate::nfs::rpc::AUTH_SYS, body },
    };
    CallBody {
        xid,
        rpcvers: RPC_VERSION,
        prog,
        vers: CB_VERSION,
        proc_: CB_COMPOUND,
        cred: cred_auth,
        verf: OpaqueAuth::NONE,
    }
    .encode(&mut w);
    w.put_string(b"");
    w.put_u32(minor);
    w.put_u32(0); // callback_ident: ignored in 4.1 (RFC 8881 19.2.3)
    w.put_u32(2);
    w.put_u32(cb_opnum::CB_SEQUENCE);
    seq.encode(&mut w);
    match op {
        CbOp::Recall(r) => {
            w.put_u32(cb_opnum::CB_RECALL);
            r.encode(&mut w);
        }
        CbOp::Getattr(g) => {
            w.put_u32(cb_opnum::CB_GETATTR);
            g.encode(&mut w);
        }
    }
    end_record(&mut w, at);
    w.into_inner()
}

/// Whether a whole RPC record (record marking removed) is a REPLY (RFC
/// 5531 section 9: msg_type 1 after the xid).
pub fn is_reply(record: &[u8]) -> bool {
    record.len() >= 8 && record[4..8] == [0, 0, 0, 1]
}

/// What a callback's reply said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CbReply {
    pub xid: u32,
    /// The CB_COMPOUND4res status, or None when the RPC itself failed
    /// (denied, program unavailable, garbage...).
    pub status: Option<Nfsstat4>,
}

/// Decodes a REPLY record: its xid, and CB_COMPOUND4res's (RFC 8881
/// 19.2.2) status when the
/// call was accepted and succeeded. Err for bytes that are no reply.
pub fn decode_cb_reply(record: &[u8]) -> Result<CbReply, XdrError> {
    let mut r = XdrReader::new(record);
    let hdr = ReplyHeader::decode(&mut r)?;
    let status = match hdr.body {
        ReplyBody::Accepted { data: AcceptedReplyData::Success, .. } => Some(Nfsstat4::decode(&mut r)?),
        _ => None,
    };
    Ok(CbReply { xid: hdr.xid, status })
}

/// What the holder of a write delegation answered to CB_GETATTR (RFC
/// 8881 20.1.2): its view of the file's change attribute and size, each
/// present when it sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CbGetattrAttrs {
    pub change: Option<u64>,
    pub size: Option<u64>,
}

/// Decodes the attributes of a reply to a CB_COMPOUND of CB_SEQUENCE and
/// CB_GETATTR (RFC 8881 19.2.2 CB_COMPOUND4res, 20.9.2, 20.1.2): None
/// when the RPC, the CB_COMPOUND or one of its operations failed, or the
/// results are not those two. Err for bytes that are no reply or whose
/// results do not decode; attributes other than change and size are
/// decoded and ignored.
pub fn decode_cb_getattr_reply(record: &[u8]) -> Result<Option<CbGetattrAttrs>, XdrError> {
    let mut r = XdrReader::new(record);
    let hdr = ReplyHeader::decode(&mut r)?;
    if !matches!(hdr.body, ReplyBody::Accepted { data: AcceptedReplyData::Success, .. }) {
        return Ok(None);
    }
    let status = Nfsstat4::decode(&mut r)?;
    r.get_opaque(1024, "CB_COMPOUND4res tag")?;
    let n = r.get_u32()?;
    if status != Nfsstat4::OK || n != 2 {
        return Ok(None);
    }
    if r.get_u32()? != cb_opnum::CB_SEQUENCE || Nfsstat4::decode(&mut r)? != Nfsstat4::OK {
        return Ok(None);
    }
    // CB_SEQUENCE4resok: session id, sequence id, slot, highest and
    // target highest slot.
    let _session: SessionId4 = r.get_array_fixed()?;
    for _ in 0..4 {
        r.get_u32()?;
    }
    if r.get_u32()? != cb_opnum::CB_GETATTR || Nfsstat4::decode(&mut r)? != Nfsstat4::OK {
        return Ok(None);
    }
    let f = Fattr4::decode(&mut r)?;
    // The values lie in attribute order: change (3) and size (4) are read
    // where they are, past the three attributes before them; what follows
    // them (a client may add attributes not asked for, such as RFC 9754's
    // delegated times) is not parsed.
    let mut vals = XdrReader::new(f.attr_vals.0);
    let mut seen = CbGetattrAttrs::default();
    for bit in f.attrmask.iter() {
        match bit {
            fattr4::CHANGE => seen.change = Some(vals.get_u64()?),
            fattr4::SIZE => seen.size = Some(vals.get_u64()?),
            fattr4::SUPPORTED_ATTRS => {
                Bitmap4::decode(&mut vals)?;
            }
            fattr4::TYPE | fattr4::FH_EXPIRE_TYPE => {
                vals.get_u32()?;
            }
            _ => break,
        }
    }
    Ok(Some(seen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_call_layout_and_reply() {
        let seq = CbSequence4Args { sessionid: [7; 16], sequenceid: 1, slotid: 0, highest_slotid: 0, cachethis: false };
        let rc = CbRecall4Args { stateid: Stateid4 { seqid: 1, other: [3; 12] }, truncate: false, fh: vec![1, 2, 3] };
        let b = encode_cb_recall(0x55, 0x4000_0000, 1, &CbCred::None, &seq, &rc);
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        assert_eq!(len & 0x8000_0000, 0x8000_0000);
        assert_eq!((len & 0x7fff_ffff) as usize, b.len() - 4);
        let body = &b[4..];
        let mut r = XdrReader::new(body);
        let call = CallBody::decode(&mut r).unwrap();
        assert_eq!((call.xid, call.prog, call.vers, call.proc_), (0x55, 0x4000_0000, 1, 1));
        assert_eq!(r.get_string(64, "tag").unwrap(), b"");
        assert_eq!(r.get_u32().unwrap(), 1);
        let _ = r.get_u32().unwrap();
        assert_eq!(r.get_u32().unwrap(), 2);
        assert_eq!(r.get_u32().unwrap(), cb_opnum::CB_SEQUENCE);
        assert!(!is_reply(body));
        // A reply: xid, REPLY, accepted, AUTH_NONE verifier, SUCCESS, NFS4_OK.
        let mut w = XdrWriter::new();
        ReplyHeader::success(0x55).encode(&mut w);
        w.put_u32(0);
        let rep = w.into_inner();
        assert!(is_reply(&rep));
        assert_eq!(decode_cb_reply(&rep).unwrap(), CbReply { xid: 0x55, status: Some(Nfsstat4::OK) });
        assert!(decode_cb_reply(&rep[..10]).is_err());
        assert!(decode_cb_reply(&[]).is_err());
    }

    #[test]
    fn getattr_call_and_reply() {
        let seq = CbSequence4Args { sessionid: [7; 16], sequenceid: 3, slotid: 0, highest_slotid: 0, cachethis: false };
        let op = CbOp::Getattr(CbGetattr4Args { fh: vec![9; 5], attr_request: Bitmap4::from_bits(&[3, 4]) });
        let b = encode_cb_compound(0x66, 0x4000_0000, 2, &CbCred::None, &seq, &op);
        let mut r = XdrReader::new(&b[4..]);
        CallBody::decode(&mut r).unwrap();
        r.get_string(64, "tag").unwrap();
        assert_eq!([r.get_u32().unwrap(), r.get_u32().unwrap(), r.get_u32().unwrap()], [2, 0, 2]);
        assert_eq!(r.get_u32().unwrap(), cb_opnum::CB_SEQUENCE);
        let _: [u8; 16] = r.get_array_fixed().unwrap();
        for _ in 0..4 {
            r.get_u32().unwrap();
        }
        assert_eq!(r.get_u32().unwrap(), 0);
        assert_eq!(r.get_u32().unwrap(), cb_opnum::CB_GETATTR);
        assert_eq!(r.get_opaque(128, "fh").unwrap(), &[9; 5]);
        assert_eq!(Bitmap4::decode(&mut r).unwrap(), Bitmap4::from_bits(&[3, 4]));
        r.finish().unwrap();
        // The holder's answer: CB_SEQUENCE OK, CB_GETATTR OK, size only.
        let answer = |status: u32, getattr_status: u32| {
            let mut w = XdrWriter::new();
            ReplyHeader::success(0x66).encode(&mut w);
            w.put_u32(status);
            w.put_string(b"");
            w.put_u32(2);
            w.put_u32(cb_opnum::CB_SEQUENCE);
            w.put_u32(0);
            w.put_raw(&[7; 16]);
            for v in [3, 0, 0, 0] {
                w.put_u32(v);
            }
            w.put_u32(cb_opnum::CB_GETATTR);
            w.put_u32(getattr_status);
            if getattr_status == 0 {
                // Size, and a delegated time (RFC 9754 attribute 85) not asked for.
                Bitmap4::from_bits(&[4, 85]).encode(&mut w);
                w.put_opaque(&[&77u64.to_be_bytes()[..], &[0; 12]].concat());
            }
            w.into_inner()
        };
        let ok = answer(0, 0);
        assert_eq!(decode_cb_getattr_reply(&ok).unwrap(), Some(CbGetattrAttrs { change: None, size: Some(77) }));
        assert_eq!(decode_cb_getattr_reply(&answer(10008, 10008)).unwrap(), None, "a failed CB_COMPOUND");
        assert_eq!(decode_cb_getattr_reply(&answer(0, 10008)).unwrap(), None, "a failed CB_GETATTR");
        for n in 0..ok.len() {
            let _ = decode_cb_getattr_reply(&ok[..n]);
        }
        assert!(decode_cb_getattr_reply(&ok[..ok.len() - 3]).is_err());
        assert!(decode_cb_getattr_reply(&[0; 3]).is_err());
    }
}
