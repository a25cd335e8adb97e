//! Fuzz harnesses for duet's protocol decoders and state machines.
//!
//! Each `pub fn` below is the body of one cargo-fuzz target
//! (`fuzz/fuzz_targets/<name>.rs` is a one-line wrapper) and is also what
//! `protocols/tests/fuzz_corpus.rs` replays over the committed corpora and
//! regressions on the stable toolchain. That test includes this file with
//! `#[path]`, so it may use only `std`, `duet_protocols`, `duet_fs` and
//! `duet_cluster`.
//!
//! Input formats:
//! - `smb2_decode`: one SMB2 transport frame (no 4-byte prefix).
//! - `ntlmssp_spnego`: one security buffer (SPNEGO token or NTLMSSP message).
//! - `rpc_xdr`: one byte choosing the chunk splits, then a record-marked
//!   RPC byte stream (what a client writes to the socket).
//! - `smb2_conn`: one mode byte (see [`smb2_conn`]), then a Direct TCP byte
//!   stream (4-byte big-endian length prefix per frame).
//! - `nfs4_session`: one mode byte (see [`nfs4_session`]), then a
//!   record-marked RPC byte stream.
//!
//! Whatever the input, a harness must return; it panics only on a broken
//! invariant (a decoder panicking, a round trip that changes a value, a
//! reply that is not framed).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::OnceLock;

use duet_cluster::kv::Txn;
use duet_cluster::machine::{apply, execute};
use duet_cluster::records::{Command as ClusterCommand, ShareRecord};
use duet_fs::{Batch, BatchCost, BatchResult, Credentials, ObjRef, Op, OpOutput, ROOT_ID};
use duet_protocols::auth::{ntlm, spnego};
use duet_protocols::nfs::mount::{mountproc3, ExportNode, Exports as MountExports, MountList, MountRes3};
use duet_protocols::nfs::nfs3::{Nfs3Args, Nfs3Results};
use duet_protocols::nfs::nfs4::attrs::Attrs as Attrs4;
use duet_protocols::nfs::nfs4::{ArgOp4, Bitmap4, Compound4Args, Compound4Res, CompoundLimits, Fattr4, ResOp4};
use duet_protocols::nfs::portmap::{parse_uaddr, CallArgs, Mapping, PmapList, Rpcb, RpcbList};
use duet_protocols::nfs::rpc::{
    CallBody, Credential, RecordAssembler, ReplyHeader, RpcMessage, PROGRAM_MOUNT, PROGRAM_NFS, PROGRAM_PORTMAP,
};
use duet_protocols::nfs::server::{Event as NfsEvent, ExportEntry, NfsServer, NfsServerConfig, PortMapping};
use duet_protocols::nfs::xdr::{XdrDecode, XdrEncode, XdrReader, XdrWriter};
use duet_protocols::smb2::compound::Compound;
use duet_protocols::smb2::create_context::{self, CreateContextRequest, CreateContextResponse};
use duet_protocols::smb2::error::{ErrorResponse, SymlinkErrorResponse};
use duet_protocols::smb2::fscc::{self, DirectoryEntry, DirectoryInfoClass};
use duet_protocols::smb2::ioctl::{
    CopyChunkCopy, CopyChunkResponse, NetworkInterfaceInfo, ResumeKeyResponse, ValidateNegotiateInfoRequest,
    ValidateNegotiateInfoResponse,
};
use duet_protocols::smb2::lock::LockRequest;
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::negotiate::NegotiateContext;
use duet_protocols::smb2::server::crypto::{derive_keys, preauth_update, CipherKey, SigningKey};
use duet_protocols::smb2::server::{Connection, Directory, Event as SmbEvent, ServerConfig, ShareEntry, UserEntry};
use duet_protocols::smb2::transform::{ChainedPayload, CompressionTransformHeader, FrameKind, TransformHeader};
use duet_protocols::smb2::{Command, Header, NtStatus, HEADER_SIZE};

/// The appliance's bounds (appliance/src/frontend.rs).
pub const SMB_FRAME_MAX: usize = (8 << 20) + (64 << 10);
pub const RPC_RECORD_MAX: usize = (1 << 20) + (128 << 10);

/// Every target, by name, for the replay test and scripts/fuzz.sh.
pub const TARGETS: [&str; 8] =
    ["smb2_decode", "ntlmssp_spnego", "rpc_xdr", "smb2_conn", "nfs4_session", "dcerpc", "nfs4_callback", "acl_decode"];

/// Runs the harness of target `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "smb2_decode" => smb2_decode(data),
        "ntlmssp_spnego" => ntlmssp_spnego(data),
        "rpc_xdr" => rpc_xdr(data),
        "smb2_conn" => smb2_conn(data),
        "nfs4_session" => nfs4_session(data),
        "dcerpc" => dcerpc(data),
        "nfs4_callback" => nfs4_callback(data),
        "acl_decode" => acl_decode(data),
        _ => panic!("no fuzz target {name}"),
    }
}

/// DUET_FUZZ_TRACE=1 prints what the stateful harnesses' servers answer
/// (for checking that seeds reach the command handlers).
fn trace() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("DUET_FUZZ_TRACE").is_some())
}

/// A deterministic xorshift64 for choices derived from the input.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

// ---- acl_decode -----------------------------------------------------------

/// The ACL model's decoders (`duet_fs::acl`): a self-relative security
/// descriptor, a bare ACL and a node's stored security record (`Stored`)
/// from the input; what decodes re-encodes to
/// bytes that decode to the same value, and is then evaluated (access
/// check for a token of its own SIDs, inheritance for a file and a
/// directory, the mode it amounts to, the NFSv4 mapping both ways), none of
/// which may panic.
pub fn acl_decode(data: &[u8]) {
    use duet_fs::acl::*;
    struct NoNames;
    impl Names for NoNames {
        fn user_sid(&self, name: &str) -> Option<Sid> {
            Sid::parse(name)
        }
        fn group_sid(&self, name: &str) -> Option<Sid> {
            Sid::parse(name)
        }
        fn user_name(&self, _: &Sid) -> Option<String> {
            None
        }
        fn group_name(&self, _: &Sid) -> Option<String> {
            None
        }
    }
    if let Ok(acl) = Acl::decode(data) {
        let mut b = Vec::new();
        acl.encode(&mut b);
        assert_eq!(Acl::decode(&b).as_ref(), Ok(&acl), "an ACL re-encodes to itself");
    }
    // The input as a node's `A` record (`Stored`: a control word, then a
    // DACL or a whole descriptor with an owner / group SID): what decodes
    // re-encodes to itself, and is evaluated with its owner.
    if let Ok(st) = Stored::decode_record(data) {
        let again = Stored::decode_record(&st.encode_record()).expect("an encoded record decodes");
        assert_eq!(again, st, "a record re-encodes to itself");
        let owner = st.owner_or(1000);
        let token = Token { sids: vec![owner.clone(), Sid::everyone()] };
        let g = granted(&token, Some(&owner), st.effective_dacl());
        assert!(allows(&token, Some(&owner), st.effective_dacl(), g));
        let _ = mode_from_dacl(st.effective_dacl(), &owner, &st.group_or(1000), 0);
    }
    if let Some(head) = data.get(..2) {
        if let Ok(st) = Stored::decode(u16::from_le_bytes([head[0], head[1]]), &data[2..]) {
            let (c, b) = st.encode();
            assert_eq!(Stored::decode(c, &b).as_ref(), Ok(&st), "stored security re-encodes to itself");
        }
    }
    let Ok(sd) = SecurityDescriptor::decode(data) else { return };
    let b = sd.encode();
    let again = SecurityDescriptor::decode(&b).expect("an encoded descriptor decodes");
    assert_eq!((&again.owner, &again.group, &again.dacl, &again.sacl), (&sd.owner, &sd.group, &sd.dacl, &sd.sacl));
    let owner = sd.owner.clone().unwrap_or_else(|| Sid::unix_user(0));
    let group = sd.group.clone().unwrap_or_else(|| Sid::unix_group(0));
    let mut sids: Vec<Sid> = sd.dacl.iter().flat_map(|d| d.aces.iter().map(|a| a.sid.clone())).take(4).collect();
    sids.push(Sid::everyone());
    let token = Token { sids };
    let g = granted(&token, Some(&owner), sd.dacl.as_ref());
    assert!(allows(&token, Some(&owner), sd.dacl.as_ref(), g), "what is granted is allowed");
    let _ = mode_from_dacl(sd.dacl.as_ref(), &owner, &group, 0);
    if let Some(d) = &sd.dacl {
        for dir in [false, true] {
            if let Ok(Some(child)) = inherit(d, dir, &owner, &group) {
                let mut b = Vec::new();
                child.encode(&mut b);
                assert_eq!(Acl::decode(&b).as_ref(), Ok(&child));
            }
        }
        let aces = nfs4_from_dacl(d, &owner, &group, &NoNames);
        if let Ok(back) = dacl_from_nfs4(&aces, &owner, &group, &NoNames) {
            assert_eq!(back.aces.len(), aces.len());
        }
    }
}

// ---- smb2_decode ----------------------------------------------------------

const STATUSES: [NtStatus; 5] = [
    NtStatus::SUCCESS,
    NtStatus::MORE_PROCESSING_REQUIRED,
    NtStatus::BUFFER_OVERFLOW,
    NtStatus::ACCESS_DENIED,
    NtStatus::NO_MORE_FILES,
];

/// Every SMB2 decoder over one frame: transform headers, the compound
/// iterator, every command's request (and response) decoder on every
/// message, and the payload decoders on the buffers the requests carry.
/// What decodes must re-encode and decode to the same value.
pub fn smb2_decode(frame: &[u8]) {
    let _ = FrameKind::of(frame);
    if let Ok((th, _)) = TransformHeader::decode(frame) {
        let mut out = Vec::new();
        th.encode(&mut out);
        assert_eq!(out.len(), 52, "transform header length");
    }
    if let Ok((h, rest)) = CompressionTransformHeader::decode(frame) {
        let _ = h.split_unchained(rest);
        let _ = ChainedPayload::decode_chain(rest, 16);
    }
    let _ = ChainedPayload::decode_chain(frame, 16);
    let mut n = 0;
    for m in Compound::new(frame) {
        let Ok(m) = m else { break };
        n += 1;
        assert!(n <= duet_protocols::smb2::compound::MAX_COMPOUND_MESSAGES);
        assert_eq!(Header::decode(m.bytes).ok(), Some(m.header));
        smb2_message(&m.header, m.bytes);
    }
    if n == 0 {
        // Not even a header: the body decoders still get the bytes, behind
        // a plausible header, so they are reached without one.
        let mut msg = vec![0u8; HEADER_SIZE];
        msg[..4].copy_from_slice(&[0xFE, b'S', b'M', b'B']);
        msg[4] = 64;
        msg.extend_from_slice(frame);
        if let Ok(h) = Header::decode(&msg) {
            smb2_message(&h, &msg);
        }
    }
}

fn smb2_message(header: &Header, msg: &[u8]) {
    for c in 0..=0x12u16 {
        let command = Command(c);
        if let Ok(req) = Request::decode(command, msg) {
            let mut again = msg[..HEADER_SIZE].to_vec();
            req.encode(&mut again);
            let back = Request::decode(command, &again)
                .unwrap_or_else(|e| panic!("{command:?} request re-encoded does not decode: {e}"));
            assert_eq!(back, req, "{command:?} request changed in a round trip");
            if command == header.command {
                request_payloads(&req);
            }
        }
    }
    for status in STATUSES {
        let mut h = *header;
        h.status = status;
        if let Ok(resp) = Response::decode(&h, msg) {
            let mut again = msg[..HEADER_SIZE].to_vec();
            resp.encode(&mut again);
            let back = Response::decode(&h, &again)
                .unwrap_or_else(|e| panic!("{:?} response re-encoded does not decode: {e}", h.command));
            assert_eq!(back, resp, "{:?} response changed in a round trip", h.command);
        }
    }
    if let Ok(e) = ErrorResponse::decode(msg) {
        for c in e.contexts() {
            let _ = c;
        }
    }
    if let Ok(l) = LockRequest::decode(msg) {
        assert_eq!(l.locks().count(), l.lock_count());
    }
    smb2_payloads(msg.get(HEADER_SIZE..).unwrap_or(&[]));
}

/// The buffers a request carries, to the decoders the server uses on them.
fn request_payloads(req: &Request<'_>) {
    match req {
        Request::SessionSetup(s) => ntlmssp_spnego(s.security_buffer),
        Request::SetInfo(s) => smb2_payloads(s.buffer),
        Request::Ioctl(i) => smb2_payloads(i.input),
        Request::QueryInfo(q) => smb2_payloads(q.input_buffer),
        Request::Create(c) => {
            let mut out = Vec::new();
            create_context::encode_list(&c.create_contexts, &mut out);
            assert_eq!(CreateContextRequest::decode_list(&out).as_deref().ok(), Some(&c.create_contexts[..]));
        }
        _ => {}
    }
}

/// Every payload-level decoder (MS-FSCC classes, create and negotiate
/// contexts, FSCTL buffers) over `buf`; what decodes must round-trip.
pub fn smb2_payloads(buf: &[u8]) {
    let mut out = Vec::new();
    if let Ok(list) = create_context::decode_list(buf) {
        for c in list {
            if let Ok(t) = CreateContextRequest::decode(c) {
                out.clear();
                create_context::encode_list(&[t], &mut out);
                assert_eq!(CreateContextRequest::decode_list(&out).unwrap(), [t]);
            }
            if let Ok(t) = CreateContextResponse::decode(c) {
                out.clear();
                create_context::encode_list(&[t], &mut out);
            }
        }
    }
    for t in [1u16, 2, 3, 5, 6, 7, 8, 0x100] {
        if let Ok(c) = NegotiateContext::decode_data(t, buf) {
            out.clear();
            c.encode_data(&mut out);
            assert_eq!(NegotiateContext::decode_data(t, &out).unwrap(), c);
        }
    }
    for class in [
        DirectoryInfoClass::Directory,
        DirectoryInfoClass::FullDirectory,
        DirectoryInfoClass::BothDirectory,
        DirectoryInfoClass::IdBothDirectory,
        DirectoryInfoClass::IdFullDirectory,
        DirectoryInfoClass::Names,
    ] {
        if let Ok(list) = DirectoryEntry::decode_list(class, buf) {
            out.clear();
            DirectoryEntry::encode_list(class, &list, usize::MAX, &mut out);
            assert_eq!(DirectoryEntry::decode_list(class, &out).unwrap().len(), list.len());
        }
    }
    if let Ok(list) = fscc::FileStreamInformation::decode_list(buf) {
        out.clear();
        fscc::FileStreamInformation::encode_list(&list, &mut out);
    }
    macro_rules! round_trip {
        ($($t:ty),*) => {$(
            if let Ok(v) = <$t>::decode(buf) {
                out.clear();
                v.encode(&mut out);
                assert_eq!(<$t>::decode(&out).unwrap(), v);
            }
        )*};
    }
    round_trip!(
        fscc::FileBasicInformation,
        fscc::FileStandardInformation,
        fscc::FileInternalInformation,
        fscc::FileNetworkOpenInformation,
        fscc::FileAttributeTagInformation,
        fscc::FileDispositionInformation,
        fscc::FileDispositionInformationEx,
        fscc::FileFsSizeInformation,
        fscc::FileFsFullSizeInformation,
        fscc::FileFsSectorSizeInformation,
        fscc::FileAllInformation,
        fscc::FileNameInformation,
        fscc::FileRenameInformation,
        fscc::FileFsVolumeInformation,
        fscc::FileFsAttributeInformation,
        ValidateNegotiateInfoRequest,
        ValidateNegotiateInfoResponse,
        CopyChunkCopy,
        CopyChunkResponse,
        ResumeKeyResponse,
        SymlinkErrorResponse
    );
    if let Ok(list) = NetworkInterfaceInfo::decode_list(buf) {
        out.clear();
        NetworkInterfaceInfo::encode_list(&list, &mut out);
    }
}

// ---- ntlmssp_spnego -------------------------------------------------------

/// The NT hash of the one user the NTLM server side knows.
fn alice_hash(user: &str) -> Option<[u8; 16]> {
    user.eq_ignore_ascii_case("alice").then(|| ntlm::nt_hash("wonderland"))
}

/// SPNEGO and NTLMSSP parsing, and the NTLM server side, over one security
/// buffer: as the first and as the second token of a logon.
pub fn ntlmssp_spnego(buf: &[u8]) {
    let _ = spnego::read_tlv(buf);
    let _ = spnego::parse_server_response(buf);
    let mut tokens = vec![buf];
    match spnego::parse_client_token(buf) {
        Ok(spnego::ClientToken::Raw(t)) => assert_eq!(t, buf),
        Ok(spnego::ClientToken::Init { mech_token, .. }) => tokens.extend(mech_token),
        Ok(spnego::ClientToken::Resp { response_token, mech_list_mic }) => {
            tokens.extend(response_token);
            tokens.extend(mech_list_mic);
        }
        Err(_) => {}
    }
    for t in tokens {
        ntlm_message(t);
    }
}

fn ntlm_message(msg: &[u8]) {
    let _ = ntlm::parse_negotiate(msg);
    let _ = ntlm::parse_av_pairs(msg);
    if let Ok(c) = ntlm::Challenge::parse(msg) {
        let again = c.encode();
        let back = ntlm::Challenge::parse(&again).expect("challenge re-encoded parses");
        assert_eq!(back.server_challenge, c.server_challenge);
        assert_eq!(back.target_info, c.target_info);
        let _ = ntlm::parse_av_pairs(&c.target_info);
        // The client side answers a hostile challenge without panicking.
        let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
        let _ = ntlm::client_authenticate(&neg, msg, "alice", "WORKGROUP", &ntlm::nt_hash("x"), [1; 8], [2; 16], 7);
    }
    if let Ok(a) = ntlm::Authenticate::parse(msg) {
        let _ = a.is_anonymous();
    }
    // Server side: the message as a NEGOTIATE, then as an AUTHENTICATE
    // answering a challenge (with and without a timestamp, so MICs count).
    for ts in [None, Some(0x01d9_0000_0000_0000u64)] {
        let mut s = ntlm::ServerContext::new([7; 8]);
        let _ = s.challenge(msg, "WORKGROUP", "DUET", ts);
        let mut s = ntlm::ServerContext::new([7; 8]);
        let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
        s.challenge(&neg, "WORKGROUP", "DUET", ts).expect("our own negotiate");
        let _ = s.authenticate(msg, &alice_hash);
        // Once done, a second AUTHENTICATE is refused.
        assert!(s.authenticate(msg, &alice_hash).is_err());
    }
}

// ---- rpc_xdr --------------------------------------------------------------

/// The record assembler over a byte stream pushed in chunks whose sizes
/// the first byte chooses; the records must not depend on the split. Every
/// record (or, with none, the bytes themselves) goes to every decoder.
pub fn rpc_xdr(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else { return };
    let whole = assemble(stream, None);
    let split = assemble(stream, Some(seed));
    assert_eq!(whole, split, "records depend on how the stream was split");
    let (records, _) = whole;
    if records.is_empty() {
        rpc_record(stream);
    }
    for r in &records {
        rpc_record(r);
    }
}

/// Records of `stream`, and the error that ended it, if any.
fn assemble(stream: &[u8], split: Option<u8>) -> (Vec<Vec<u8>>, Option<String>) {
    let mut asm = RecordAssembler::new(RPC_RECORD_MAX, 64);
    let mut rng = XorShift::new(u64::from(split.unwrap_or(0)));
    let mut rest = stream;
    let mut out = Vec::new();
    let mut chunk = &rest[..0];
    loop {
        if chunk.is_empty() {
            if rest.is_empty() {
                break;
            }
            let n = match split {
                None => rest.len(),
                Some(_) => 1 + (rng.next() % 13) as usize,
            }
            .min(rest.len());
            (chunk, rest) = rest.split_at(n);
        }
        match asm.push(chunk) {
            Ok(n) => {
                assert!(n <= chunk.len());
                chunk = &chunk[n..];
                match asm.take_record() {
                    Some(r) => {
                        assert!(r.len() <= RPC_RECORD_MAX);
                        out.push(r);
                    }
                    None => assert!(chunk.is_empty(), "consumed {n} bytes short of a record"),
                }
            }
            Err(e) => return (out, Some(e.to_string())),
        }
    }
    (out, None)
}

/// Every RPC-level decoder over one record.
pub fn rpc_record(rec: &[u8]) {
    let _ = ReplyHeader::decode(&mut XdrReader::new(rec));
    let mut r = XdrReader::new(rec);
    let Ok(msg) = RpcMessage::decode(&mut r) else {
        nfs_bodies(rec);
        return;
    };
    let mut w = XdrWriter::new();
    msg.encode(&mut w);
    assert_eq!(w.len(), rec.len() - r.remaining(), "rpc header re-encodes to its length");
    let RpcMessage::Call(call) = msg else {
        nfs_bodies(r.rest());
        return;
    };
    let _ = Credential::parse(&call.cred);
    let _ = Credential::parse(&call.verf);
    let body = r;
    match (call.prog, call.vers) {
        (PROGRAM_NFS, 3) => {
            let mut b = body;
            if let Ok(args) = Nfs3Args::decode(call.proc_, &mut b) {
                let mut w = XdrWriter::new();
                args.encode(&mut w);
                let mut again = XdrReader::new(w.as_bytes());
                let back = Nfs3Args::decode(call.proc_, &mut again).expect("NFSv3 args re-encoded decode");
                assert_eq!(back, args, "NFSv3 args changed in a round trip");
            }
        }
        (PROGRAM_NFS, 4) => {
            let mut b = body;
            if let Ok(args) = Compound4Args::decode(&mut b, &CompoundLimits::default()) {
                compound_args(&args, body.remaining());
            }
        }
        (PROGRAM_MOUNT, _) => {
            let mut b = body;
            if call.proc_ == mountproc3::MNT || call.proc_ == mountproc3::UMNT {
                let _ = b.get_string(duet_protocols::nfs::mount::MNTPATHLEN, "dirpath");
            }
        }
        (PROGRAM_PORTMAP, _) => {
            let _ = Mapping::decode(&mut body.clone());
            let _ = CallArgs::decode(&mut body.clone());
            let _ = Rpcb::decode(&mut body.clone());
        }
        _ => {}
    }
    nfs_bodies(body.rest());
}

fn compound_args(args: &Compound4Args<'_>, len: usize) {
    // Whatever decodes whole encodes to as many bytes (not always the same
    // ones: padding is read leniently).
    let mut w = XdrWriter::new();
    args.encode(&mut w);
    if args.stop.is_none() {
        assert_eq!(w.len(), len, "COMPOUND args re-encode to their length");
    }
    for op in &args.ops {
        if let ArgOp4::SetAttr(s) = op {
            fattr(&s.obj_attributes);
        }
    }
}

fn fattr(f: &Fattr4<'_>) {
    if let Ok(a) = Attrs4::from_fattr4(f) {
        let mut w = XdrWriter::new();
        a.encode_vals(None, &mut w);
        assert_eq!(w.len(), f.attr_vals.0.len(), "fattr4 values re-encode to their length");
    }
}

/// The body decoders without an RPC header (the NFSv3 procedures, NFSv4
/// operations, MOUNT and portmap structures, replies).
fn nfs_bodies(buf: &[u8]) {
    let _ = Compound4Args::decode(&mut XdrReader::new(buf), &CompoundLimits::default());
    if let Ok(res) = Compound4Res::decode(&mut XdrReader::new(buf), 256) {
        let mut w = XdrWriter::new();
        res.encode(&mut w);
        assert_eq!(w.len(), buf.len(), "COMPOUND res re-encode");
        for op in &res.results {
            if let ResOp4::GetAttr(duet_protocols::nfs::nfs4::Nfs4Res::Ok(ok)) = op {
                fattr(&ok.obj_attributes);
            }
        }
    }
    // The first word picks an NFSv3 procedure, an NFSv4 operation.
    let (word, rest) = match buf.get(..4) {
        Some(w) => (u32::from_be_bytes([w[0], w[1], w[2], w[3]]), &buf[4..]),
        None => (0, buf),
    };
    let _ = Nfs3Args::decode(word % 23, &mut XdrReader::new(rest));
    let _ = Nfs3Results::decode(word % 23, &mut XdrReader::new(rest));
    let op = word % 80;
    if let Ok(arg) = ArgOp4::decode(op, 2, &mut XdrReader::new(rest)) {
        if let ArgOp4::SetAttr(s) = &arg {
            fattr(&s.obj_attributes);
        }
    }
    let _ = ResOp4::decode(op, &mut XdrReader::new(rest));
    if let Ok(f) = Fattr4::decode(&mut XdrReader::new(buf)) {
        fattr(&f);
    }
    if let Ok(mask) = Bitmap4::decode(&mut XdrReader::new(buf)) {
        let vals = buf.get(4 + 4 * mask.words().len()..).unwrap_or(&[]);
        let _ = Attrs4::decode(&mask, vals);
    }
    let _ = MountRes3::decode(&mut XdrReader::new(buf));
    let _ = MountExports::decode(&mut XdrReader::new(buf));
    let _ = ExportNode::decode(&mut XdrReader::new(buf));
    let _ = MountList::decode(&mut XdrReader::new(buf));
    let _ = PmapList::decode(&mut XdrReader::new(buf));
    let _ = RpcbList::decode(&mut XdrReader::new(buf));
    if let Ok(s) = std::str::from_utf8(buf) {
        let _ = parse_uaddr(s);
    }
}

// ---- the back end: the real metadata state machine in memory -------------

pub const NOW: i64 = 1_700_000_000_000_000_000;

/// The metadata state machine over a BTreeMap, as the protocol tests use it.
#[derive(Clone)]
pub struct Engine {
    kv: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Engine {
    /// Shares "data" (SMB), "ro" (SMB, read-only), "share" (NFS) and
    /// "nfsro" (NFS, read-only). Built once, cloned per input.
    pub fn new() -> Engine {
        static INIT: OnceLock<Engine> = OnceLock::new();
        INIT.get_or_init(|| {
            let share = |name: &str, smb: bool, read_only: bool| ShareRecord {
                name: name.into(),
                path: format!("/{name}"),
                smb,
                nfs: !smb,
                read_only,
                guest_ok: false,
                nfs_clients: Vec::new(),
                root_squash: false,
                append_extension: false,
                durability: Default::default(),
            };
            let cmd = ClusterCommand::Init {
                now_ns: NOW,
                admin_secrets: Vec::new(),
                shares: vec![
                    share("data", true, false),
                    share("ro", true, true),
                    share("share", false, false),
                    share("nfsro", false, true),
                ],
            };
            let mut e = Engine { kv: BTreeMap::new() };
            let mut txn = Txn::new(&e.kv);
            apply(&mut txn, &cmd);
            let w = txn.into_writes();
            e.commit(w);
            e
        })
        .clone()
    }

    fn commit(&mut self, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
        for (k, v) in writes {
            match v {
                Some(v) => self.kv.insert(k, v),
                None => self.kv.remove(&k),
            };
        }
    }

    pub fn run(&mut self, batch: &Batch) -> BatchResult {
        let mut txn = Txn::new(&self.kv);
        let applied = execute(&mut txn, batch);
        let w = txn.into_writes();
        self.commit(w);
        BatchResult { results: applied.results, cost: BatchCost::default() }
    }

    pub fn root_of(&mut self, share: &str) -> u64 {
        let mut b = Batch::new(Credentials::root(), NOW);
        b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: share.into() });
        match &self.run(&b).results[0] {
            Ok(OpOutput::Object { attrs, .. }) => attrs.id,
            other => panic!("share {share}: {other:?}"),
        }
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

// ---- smb2_conn ------------------------------------------------------------

/// Users and shares of the SMB harness.
pub struct SmbDir {
    users: HashMap<String, UserEntry>,
    shares: Vec<ShareEntry>,
}

impl SmbDir {
    pub fn new(engine: &mut Engine) -> SmbDir {
        let mut users = HashMap::new();
        let user = |pw: &str, uid: u32, enabled: bool| UserEntry { nt_hash: ntlm::nt_hash(pw), uid, gid: uid, enabled };
        users.insert("alice".to_string(), user("wonderland", 1000, true));
        users.insert("mallory".to_string(), user("x", 1001, false));
        let share = |name: &str, root: u64, read_only: bool, guest_ok: bool, encrypt: bool| ShareEntry {
            name: name.into(),
            root,
            read_only,
            guest_ok,
            encrypt,
            protocol_durability: false,
        };
        let data = engine.root_of("data");
        let ro = engine.root_of("ro");
        SmbDir {
            users,
            shares: vec![
                share("data", data, false, false, false),
                share("ro", ro, true, true, false),
                share("sealed", data, false, false, true),
            ],
        }
    }
}

impl Directory for SmbDir {
    fn user(&self, name: &str) -> Option<UserEntry> {
        self.users.get(&name.to_lowercase()).cloned()
    }
    fn share(&self, name: &str) -> Option<ShareEntry> {
        self.shares.iter().find(|s| s.name.eq_ignore_ascii_case(name)).cloned()
    }
    fn shares(&self) -> Vec<ShareEntry> {
        self.shares.clone()
    }
}

/// Mode byte of `smb2_conn`.
pub mod smb_mode {
    /// Bits 0-1: what the harness does before the input's frames.
    pub const SETUP_MASK: u8 = 3;
    /// Nothing: the frames reach a fresh connection.
    pub const SETUP_NONE: u8 = 0;
    /// NEGOTIATE (3.1.1 with preauth, signing and encryption contexts).
    pub const SETUP_NEGOTIATED: u8 = 1;
    /// NEGOTIATE, NTLMv2 logon as alice, TREE_CONNECT to "data".
    pub const SETUP_TREE: u8 = 2;
    /// The same on SMB 2.1 (no preauth, HMAC-SHA256 signing).
    pub const SETUP_TREE_21: u8 = 3;
    /// Rewrite MessageId, SessionId and TreeId of every message to what the
    /// connection expects (all-ones related ids are kept).
    pub const REWRITE_IDS: u8 = 4;
    /// Sign every message with the session's key (after a logon).
    pub const SIGN: u8 = 8;
    /// Encrypt every frame with the session's key (3.1.1 logon).
    pub const ENCRYPT: u8 = 16;
    /// Hold batches back and complete them, newest first, after the next
    /// frame (concurrent frames; completion out of order).
    pub const DEFER: u8 = 32;
    /// Require signing and encryption server-side (ServerConfig).
    pub const STRICT: u8 = 64;
}

/// The client half of the harness: enough to log on and to rewrite frames.
struct SmbClient {
    conn: Connection,
    engine: Engine,
    dir: SmbDir,
    next_id: u64,
    session_id: u64,
    tree_id: u32,
    signing: Option<SigningKey>,
    encrypt: Option<CipherKey>,
    /// Server to client, to read sealed setup responses.
    decrypt: Option<CipherKey>,
    /// The session must be encrypted (the server said so).
    sealed: bool,
    nonce: u64,
    deferred: Vec<(u64, Batch)>,
    defer: bool,
}

impl SmbClient {
    /// Feeds one frame and drives the events; returns the responses
    /// (transport prefix removed, still encrypted if they were).
    fn exchange(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
        let events = self.conn.on_frame(frame, NOW, &self.dir);
        let mut out = Vec::new();
        let held = std::mem::take(&mut self.deferred);
        self.drive(events, &mut out);
        // Batches of earlier frames complete after this frame was taken.
        for (token, batch) in held.into_iter().rev() {
            let r = self.engine.run(&batch);
            let mut ev = self.conn.on_batch_done(token, r, NOW);
            ev.extend(self.conn.resume(NOW, &self.dir));
            self.drive(ev, &mut out);
        }
        out
    }

    fn drive(&mut self, mut events: Vec<SmbEvent>, out: &mut Vec<Vec<u8>>) {
        while !events.is_empty() {
            let mut next = Vec::new();
            for e in events {
                match e {
                    SmbEvent::Run { token, batch, .. } => {
                        assert!(!self.conn.is_closed(), "a batch from a closed connection");
                        if self.defer {
                            self.deferred.push((token, batch));
                        } else {
                            let r = self.engine.run(&batch);
                            next.extend(self.conn.on_batch_done(token, r, NOW));
                            next.extend(self.conn.resume(NOW, &self.dir));
                        }
                    }
                    SmbEvent::Send(f) => {
                        assert!(f.len() >= 4, "frame without its prefix");
                        let len = u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize;
                        assert_eq!(len, f.len() - 4, "Direct TCP length prefix");
                        check_smb_response(&f[4..]);
                        if trace() {
                            for m in Compound::new(&f[4..]).flatten() {
                                eprintln!("smb2_conn: {:?} {:?}", m.header.command, m.header.status);
                            }
                        }
                        out.push(f[4..].to_vec());
                    }
                    SmbEvent::Close => assert!(self.conn.is_closed()),
                    // Breaks for other connections: there are none here.
                    SmbEvent::Recall(_) | SmbEvent::EndSession { .. } | SmbEvent::CloseOpen { .. } | SmbEvent::DeletePending { .. } | SmbEvent::SendOn { .. } | SmbEvent::Forward { .. } | SmbEvent::Bound { .. } | SmbEvent::Adopt(_) => {}
                }
            }
            events = next;
        }
    }

    fn finish(&mut self) {
        let mut out = Vec::new();
        for _ in 0..64 {
            if self.deferred.is_empty() {
                break;
            }
            for (token, batch) in std::mem::take(&mut self.deferred).into_iter().rev() {
                let r = self.engine.run(&batch);
                let mut ev = self.conn.on_batch_done(token, r, NOW);
                ev.extend(self.conn.resume(NOW, &self.dir));
                self.drive(ev, &mut out);
            }
        }
        assert!(self.deferred.is_empty(), "batches kept coming");
        // With nothing running, nothing stays held (a CLOSE waits only for
        // the batches in progress).
        assert!(self.conn.held() == 0 || self.conn.is_closed(), "frames held with no batch running");
        // A token answered twice, or never issued, is ignored.
        assert!(self.conn.on_batch_done(u64::MAX, BatchResult { results: Vec::new(), cost: BatchCost::default() }, NOW).is_empty());
    }

    /// A request message: header + body, built with the codec's encoders.
    fn message(&mut self, req: &Request<'_>) -> Vec<u8> {
        let h = Header {
            credit_charge: 1,
            status: NtStatus::SUCCESS,
            command: req.command(),
            credit: 64,
            flags: duet_protocols::smb2::HeaderFlags(0),
            next_command: 0,
            message_id: self.next_id,
            ids: duet_protocols::smb2::HeaderIds::Sync { process_id: 0xfeff, tree_id: self.tree_id },
            session_id: self.session_id,
            signature: [0; 16],
        };
        self.next_id += 1;
        let mut out = Vec::new();
        h.encode(&mut out);
        req.encode(&mut out);
        out
    }

    /// One request, one response (setup only): signed after the logon,
    /// sealed when the server encrypts.
    fn setup_call(&mut self, req: &Request<'_>) -> Option<(Header, Vec<u8>)> {
        let m = self.message(req);
        let f = self.prepare(&m, smb_mode::SIGN | if self.sealed { smb_mode::ENCRYPT } else { 0 });
        let mut resp = self.exchange(&f).pop()?;
        if FrameKind::of(&resp) == Ok(FrameKind::Encrypted) {
            resp = self.decrypt.as_ref()?.decrypt(&resp)?;
        }
        let h = Header::decode(&resp).ok()?;
        Some((h, resp))
    }

    /// NEGOTIATE; returns the request and response bytes for preauth.
    fn negotiate(&mut self, dialects: &[u16]) -> Option<[u8; 64]> {
        use duet_protocols::smb2::negotiate::{algorithm, NegotiateRequest};
        let req = Request::Negotiate(NegotiateRequest {
            security_mode: 1,
            capabilities: 0x7f,
            client_guid: [0x11; 16],
            client_start_time: 0,
            dialects: dialects.to_vec(),
            negotiate_contexts: vec![
                NegotiateContext::PreauthIntegrity { hash_algorithms: vec![algorithm::SHA_512], salt: &[5; 32] },
                NegotiateContext::Encryption { ciphers: vec![algorithm::AES_128_GCM] },
                NegotiateContext::Signing { algorithms: vec![algorithm::AES_CMAC, algorithm::HMAC_SHA256] },
            ],
        });
        let m = self.message(&req);
        let resp = self.exchange(&m).pop()?;
        let p = preauth_update(&[0; 64], &m);
        Some(preauth_update(&p, &resp))
    }

    /// SPNEGO-wrapped NTLMv2 logon as alice.
    fn login(&mut self, dialect: u16, mut preauth: [u8; 64]) -> Option<()> {
        use duet_protocols::smb2::negotiate::{algorithm, dialect as d};
        use duet_protocols::smb2::session_setup::{SessionSetupRequest, SessionSetupResponse};
        let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
        let tok = spnego::client_init(&neg);
        fn req(tok: &[u8]) -> SessionSetupRequest<'_> {
            SessionSetupRequest {
                flags: 0,
                security_mode: 1,
                capabilities: 1,
                channel: 0,
                previous_session_id: 0,
                security_buffer: tok,
            }
        }
        let m = self.message(&Request::SessionSetup(req(&tok)));
        let resp = self.exchange(&m).pop()?;
        let h = Header::decode(&resp).ok()?;
        if h.status != NtStatus::MORE_PROCESSING_REQUIRED {
            return None;
        }
        self.session_id = h.session_id;
        if dialect == d::SMB3_1_1 {
            preauth = preauth_update(&preauth, &m);
            preauth = preauth_update(&preauth, &resp);
        }
        let Ok(Response::SessionSetup(ss)) = Response::decode(&h, &resp) else { return None };
        let chal = spnego::parse_server_response(ss.security_buffer).ok()?.token?.to_vec();
        let (auth, key) = ntlm::client_authenticate(
            &neg,
            &chal,
            "alice",
            "WORKGROUP",
            &ntlm::nt_hash("wonderland"),
            [0x42; 8],
            [0x24; 16],
            0,
        )
        .ok()?;
        let tok = spnego::client_resp(&auth, None);
        let m = self.message(&Request::SessionSetup(req(&tok)));
        if dialect == d::SMB3_1_1 {
            preauth = preauth_update(&preauth, &m);
        }
        let cipher = (dialect == d::SMB3_1_1).then_some(algorithm::AES_128_GCM);
        let keys = derive_keys(dialect, &key, cipher, &preauth, true);
        let resp = self.exchange(&m).pop()?;
        let h = Header::decode(&resp).ok()?;
        if h.status != NtStatus::SUCCESS {
            return None;
        }
        if let Ok(Response::SessionSetup(SessionSetupResponse { session_flags, .. })) = Response::decode(&h, &resp) {
            self.signing = Some(keys.signing.clone());
            // Client to server is the server's decryption key.
            self.encrypt = keys.decrypt.clone();
            self.decrypt = keys.encrypt.clone();
            self.sealed = session_flags & SessionSetupResponse::ENCRYPT_DATA != 0;
        }
        Some(())
    }

    fn tree(&mut self, share: &str) -> Option<()> {
        use duet_protocols::smb2::cursor::Utf16;
        use duet_protocols::smb2::tree_connect::TreeConnectRequest;
        let path = format!("\\\\duet\\{share}");
        let (h, _) = self.setup_call(&Request::TreeConnect(TreeConnectRequest { flags: 0, path: Utf16::Str(&path) }))?;
        if h.status != NtStatus::SUCCESS {
            return None;
        }
        self.tree_id = h.tree_id()?;
        Some(())
    }

    /// Rewrites ids, signs and encrypts one input frame as the mode says.
    fn prepare(&mut self, frame: &[u8], mode: u8) -> Vec<u8> {
        let mut f = frame.to_vec();
        let mut starts = Vec::new();
        let mut at = 0usize;
        while at + HEADER_SIZE <= f.len() && f[at..at + 4] == [0xFE, b'S', b'M', b'B'] {
            starts.push(at);
            let next = u32::from_le_bytes(f[at + 20..at + 24].try_into().unwrap()) as usize;
            if next == 0 || next < HEADER_SIZE || at + next > f.len() || starts.len() >= 64 {
                break;
            }
            at += next;
        }
        if mode & smb_mode::REWRITE_IDS != 0 {
            for &s in &starts {
                let h = &mut f[s..s + HEADER_SIZE];
                let charge = u64::from(u16::from_le_bytes([h[6], h[7]]).max(1));
                let flags = u32::from_le_bytes(h[16..20].try_into().unwrap());
                if u16::from_le_bytes([h[12], h[13]]) == Command::CANCEL.0 && flags & 2 == 0 {
                    // A synchronous CANCEL names the request sent before it
                    // (MS-SMB2 3.2.4.24) and takes no MessageId of its own.
                    h[24..32].copy_from_slice(&self.next_id.saturating_sub(1).to_le_bytes());
                    continue;
                }
                h[24..32].copy_from_slice(&self.next_id.to_le_bytes());
                self.next_id += charge;
                let flags = u32::from_le_bytes(h[16..20].try_into().unwrap());
                if flags & 2 == 0 && h[36..40] != [0xFF; 4] {
                    h[36..40].copy_from_slice(&self.tree_id.to_le_bytes());
                }
                if h[40..48] != [0xFF; 8] {
                    h[40..48].copy_from_slice(&self.session_id.to_le_bytes());
                }
            }
        }
        if mode & smb_mode::SIGN != 0 {
            if let Some(k) = &self.signing {
                for (i, s) in starts.iter().enumerate() {
                    let end = starts.get(i + 1).copied().unwrap_or(f.len());
                    k.sign_in_place(&mut f[*s..end]);
                }
            }
        }
        if mode & smb_mode::ENCRYPT != 0 {
            if let Some(k) = &self.encrypt {
                let mut nonce = [0u8; 16];
                nonce[..8].copy_from_slice(&self.nonce.to_le_bytes());
                self.nonce += 1;
                if let Some(e) = k.encrypt(self.session_id, nonce, &f) {
                    return e;
                }
            }
        }
        f
    }
}

/// A response frame of the server must be a well-formed compound of
/// responses (or an encrypted frame).
fn check_smb_response(frame: &[u8]) {
    match FrameKind::of(frame) {
        Ok(FrameKind::Encrypted) => {
            TransformHeader::decode(frame).expect("encrypted response has a transform header");
        }
        Ok(FrameKind::Plain) => {
            let mut n = 0;
            for m in Compound::new(frame) {
                let m = m.expect("response compound parses");
                assert!(m.header.flags.is_response(), "response flag");
                n += 1;
            }
            assert!(n > 0);
        }
        other => panic!("response frame of kind {other:?}"),
    }
}

/// The Direct TCP frames of a byte stream: a 4-byte big-endian length
/// (top byte zero) and the frame. A length past the end takes the rest;
/// a non-zero top byte ends the stream, as the appliance closes then.
pub fn smb_frames(mut stream: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while stream.len() >= 4 && out.len() < 256 {
        if stream[0] != 0 {
            break;
        }
        let len = u32::from_be_bytes([0, stream[1], stream[2], stream[3]]) as usize;
        let len = len.min(stream.len() - 4);
        out.push(&stream[4..4 + len]);
        stream = &stream[4 + len..];
    }
    out
}

/// A stateful SMB2 connection fed the frames of the input. The first byte
/// is a [`smb_mode`] set; the rest is a Direct TCP stream.
pub fn smb2_conn(data: &[u8]) {
    use duet_protocols::smb2::negotiate::dialect as d;
    let Some((&mode, stream)) = data.split_first() else { return };
    let mut cfg = ServerConfig::default();
    if mode & smb_mode::STRICT != 0 {
        cfg.require_signing = true;
        cfg.encrypt = true;
    }
    cfg.max_pending = 8;
    cfg.max_opens = 64;
    cfg.max_locks = 64;
    let mut engine = Engine::new();
    let dir = SmbDir::new(&mut engine);
    let mut c = SmbClient {
        conn: Connection::new(cfg, NOW, b"a seed of thirty-two or more bytes!!"),
        engine,
        dir,
        next_id: 0,
        session_id: 0,
        tree_id: 0,
        signing: None,
        encrypt: None,
        decrypt: None,
        sealed: false,
        nonce: 1,
        deferred: Vec::new(),
        defer: false,
    };
    let setup = mode & smb_mode::SETUP_MASK;
    if setup != smb_mode::SETUP_NONE {
        let dialects: &[u16] = if setup == smb_mode::SETUP_TREE_21 { &[d::SMB2_1] } else { &[d::SMB3_1_1] };
        let dialect = dialects[0];
        let preauth = c.negotiate(dialects).expect("harness NEGOTIATE");
        if setup != smb_mode::SETUP_NEGOTIATED {
            c.login(dialect, preauth).expect("harness logon");
            c.tree("data").expect("harness TREE_CONNECT");
        }
    }
    c.defer = mode & smb_mode::DEFER != 0;
    for frame in smb_frames(stream) {
        let f = c.prepare(frame, mode);
        let _ = c.exchange(&f);
        assert!(c.conn.open_count() <= 64, "opens past max_opens");
        if c.conn.is_closed() {
            assert!(c.conn.on_frame(&f, NOW, &c.dir).is_empty(), "a closed connection answers");
            break;
        }
    }
    c.finish();
    assert!(c.conn.open_count() <= 64);
}

// ---- nfs4_session ---------------------------------------------------------

/// Mode byte of `nfs4_session`.
pub mod nfs_mode {
    /// EXCHANGE_ID + CREATE_SESSION by the harness first (the session id
    /// and client id are deterministic: seeds can name them).
    pub const SESSION: u8 = 1;
    /// Hold batches back and complete them, newest first, after the next
    /// record.
    pub const DEFER: u8 = 2;
    /// Let 100 s pass between records (leases expire; on_tick runs).
    pub const SLOW_CLOCK: u8 = 4;
    /// Calls come from 10.1.2.3 (allowed on "nfsro") instead of
    /// 192.168.1.10.
    pub const OTHER_PEER: u8 = 8;
}

pub struct NfsHarness {
    pub srv: NfsServer,
    pub engine: Engine,
    pub exports: Vec<ExportEntry>,
    pub peer: IpAddr,
    pub conn: u64,
    pub now: i64,
    deferred: Vec<(u64, Batch)>,
    defer: bool,
    /// Every callback the server called: (connection, xid).
    pub callbacks: Vec<(u64, u32)>,
}

impl NfsHarness {
    pub fn new() -> NfsHarness {
        let mut engine = Engine::new();
        let share = engine.root_of("share");
        let ro = engine.root_of("nfsro");
        let export = |name: &str, root: u64, read_only: bool, root_squash: bool, clients: Vec<String>, fsid: u64| {
            ExportEntry {
                name: name.into(),
                path: format!("/{name}"),
                root,
                read_only,
                root_squash,
                clients,
                append_extension: false,
                fsid,
                uids: None,
                protocol_durability: false,
            }
        };
        let exports = vec![
            export("share", share, false, false, vec![], 11),
            export("nfsro", ro, true, true, vec!["10.0.0.0/8".into()], 12),
        ];
        let cfg = NfsServerConfig {
            boot_seed: 42,
            portmap: vec![PortMapping { prog: PROGRAM_NFS, vers: 3, prot: 6, port: 2049 }],
            max_clients: 16,
            max_sessions: 16,
            max_opens: 64,
            max_lock_states: 64,
            max_byte_locks: 64,
            max_cookies: 64,
            max_pending: 8,
            max_mounts: 16,
            ..Default::default()
        };
        NfsHarness {
            srv: NfsServer::new(cfg),
            engine,
            exports,
            peer: "192.168.1.10".parse().unwrap(),
            conn: 1,
            now: 2_000_000_000,
            deferred: Vec::new(),
            defer: false,
            callbacks: Vec::new(),
        }
    }

    /// One record; returns the replies (record marking removed).
    pub fn record(&mut self, rec: &[u8]) -> Vec<Vec<u8>> {
        let events = self.srv.on_call(self.conn, self.peer, rec, self.now, &self.exports);
        let held = std::mem::take(&mut self.deferred);
        let mut out = Vec::new();
        self.drive(events, &mut out);
        for (token, batch) in held.into_iter().rev() {
            let r = self.engine.run(&batch);
            let ev = self.srv.on_batch_done(token, r, self.now);
            self.drive(ev, &mut out);
        }
        out
    }

    fn drive(&mut self, mut events: Vec<NfsEvent>, out: &mut Vec<Vec<u8>>) {
        while let Some(ev) = events.pop() {
            match ev {
                NfsEvent::Reply { conn, bytes } => {
                    assert!(bytes.len() >= 4);
                    let mark = u32::from_be_bytes(bytes[..4].try_into().unwrap());
                    assert_eq!(mark & 0x7fff_ffff, bytes.len() as u32 - 4, "record mark length");
                    assert!(mark & 0x8000_0000 != 0, "last fragment");
                    if bytes.len() >= 12 && bytes[8..12] == [0, 0, 0, 0] {
                        // A CALL: the server calls only back-channel
                        // callbacks (CB_COMPOUND, RFC 8881 20.1).
                        let mut r = XdrReader::new(&bytes[4..]);
                        let call = CallBody::decode(&mut r).expect("a callback's call header decodes");
                        assert_eq!((call.vers, call.proc_), (1, 1), "NFS4_CALLBACK version 1, CB_COMPOUND");
                        self.callbacks.push((conn, call.xid));
                        continue;
                    }
                    let mut r = XdrReader::new(&bytes[4..]);
                    let h = ReplyHeader::decode(&mut r).expect("reply header decodes");
                    if trace() {
                        let res = Compound4Res::decode(&mut r, 4096).ok();
                        let ops: Option<Vec<_>> = res.as_ref().map(|c| c.results.iter().map(|o| o.status()).collect());
                        eprintln!("nfs4_session: xid {:#x} {:?} compound {:?}", h.xid, h.body, ops);
                    }
                    out.push(bytes[4..].to_vec());
                }
                NfsEvent::Run { token, batch, .. } => {
                    if self.defer {
                        self.deferred.push((token, batch));
                    } else {
                        let r = self.engine.run(&batch);
                        events.extend(self.srv.on_batch_done(token, r, self.now));
                    }
                }
                NfsEvent::Recall(_) => {}
                NfsEvent::Close(c) => {
                    // The driver drops the connection; the next record
                    // arrives on a new one.
                    assert_eq!(c, self.conn);
                    self.srv.on_conn_closed(c);
                    self.conn += 1;
                }
            }
        }
    }

    /// The server's timer at `self.now`, its events driven.
    pub fn tick(&mut self) {
        let ev = self.srv.on_tick(self.now);
        let mut out = Vec::new();
        self.drive(ev, &mut out);
    }

    fn finish(&mut self) {
        let mut out = Vec::new();
        // A batch's result may submit the next batch of the same COMPOUND
        // (deferred again): complete until none is left.
        for _ in 0..64 {
            if self.deferred.is_empty() {
                break;
            }
            for (token, batch) in std::mem::take(&mut self.deferred).into_iter().rev() {
                let r = self.engine.run(&batch);
                let ev = self.srv.on_batch_done(token, r, self.now);
                self.drive(ev, &mut out);
            }
        }
        assert_eq!(self.srv.pending_batches(), 0, "every batch answered");
    }

    /// An AUTH_SYS call record.
    pub fn call(&self, xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        use duet_protocols::nfs::rpc::{AuthSysParms, OpaqueAuth, AUTH_SYS};
        use duet_protocols::nfs::xdr::Opaque;
        let cred = AuthSysParms { stamp: 0, machine_name: Opaque(b"client"), uid: 1000, gid: 1000, gids: vec![] };
        let mut cw = XdrWriter::new();
        cred.encode(&mut cw);
        let cred = cw.into_inner();
        let call = CallBody {
            xid,
            rpcvers: 2,
            prog,
            vers,
            proc_,
            cred: OpaqueAuth { flavor: AUTH_SYS, body: &cred },
            verf: OpaqueAuth::NONE,
        };
        let mut w = XdrWriter::new();
        call.encode(&mut w);
        w.put_raw(args);
        w.into_inner()
    }

    /// EXCHANGE_ID and CREATE_SESSION; the records sent and the session id.
    pub fn session(&mut self) -> (Vec<Vec<u8>>, Option<[u8; 16]>) {
        let (records, s) = self.session_with(b"fuzz-client", 0, None);
        (records, s.map(|(_, id)| id))
    }

    /// [`NfsHarness::session`] for client `owner` with CREATE_SESSION
    /// `flags` and a callback credential (`Some`: AUTH_SYS of that uid,
    /// else AUTH_NONE); the records sent and (client id, session id).
    pub fn session_with(&mut self, owner: &[u8], flags: u32, cb_uid: Option<u32>) -> (Vec<Vec<u8>>, Option<(u64, [u8; 16])>) {
        use duet_protocols::nfs::nfs4::*;
        use duet_protocols::nfs::rpc::AuthSysParms;
        use duet_protocols::nfs::xdr::{List, Opaque};
        let compound = |ops: Vec<ArgOp4<'_>>| {
            let mut w = XdrWriter::new();
            Compound4Args { tag: Opaque(b""), minorversion: 1, ops, stop: None }.encode(&mut w);
            w.into_inner()
        };
        let args = compound(vec![ArgOp4::ExchangeId(ExchangeId4Args {
            clientowner: ClientOwner4 { verifier: [1; 8], ownerid: Opaque(owner) },
            flags: 0x101,
            state_protect: StateProtect4A::None,
            client_impl_id: List(vec![]),
        })]);
        let rec1 = self.call(0xf000_0001, PROGRAM_NFS, 4, 1, &args);
        let mut records = vec![rec1.clone()];
        let rep = self.record(&rec1);
        let mut r = XdrReader::new(&rep[0]);
        ReplyHeader::decode(&mut r).expect("reply");
        let res = Compound4Res::decode(&mut r, 16).expect("EXCHANGE_ID reply");
        let [ResOp4::ExchangeId(Nfs4Res::Ok(x))] = &res.results[..] else { return (records, None) };
        let chan = |maxreq: u32| ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: maxreq,
            maxresponsesize: 2 << 20,
            maxresponsesize_cached: 64 << 10,
            maxoperations: 300,
            maxrequests: 8,
            rdma_ird: List(vec![]),
        };
        let args = compound(vec![ArgOp4::CreateSession(CreateSession4Args {
            clientid: x.clientid,
            sequence: x.sequenceid,
            flags,
            fore_chan_attrs: chan(2 << 20),
            back_chan_attrs: chan(4096),
            cb_program: duet_protocols::nfs::rpc::PROGRAM_NFS4_CB,
            sec_parms: List(vec![match cb_uid {
                Some(uid) => CallbackSecParms4::Sys(AuthSysParms { stamp: 7, machine_name: Opaque(b"cb"), uid, gid: uid, gids: vec![] }),
                None => CallbackSecParms4::None,
            }]),
        })]);
        let rec2 = self.call(0xf000_0002, PROGRAM_NFS, 4, 1, &args);
        records.push(rec2.clone());
        let rep = self.record(&rec2);
        let mut r = XdrReader::new(&rep[0]);
        ReplyHeader::decode(&mut r).expect("reply");
        let res = Compound4Res::decode(&mut r, 16).expect("CREATE_SESSION reply");
        let [ResOp4::CreateSession(Nfs4Res::Ok(cs))] = &res.results[..] else { return (records, None) };
        (records, Some((x.clientid, cs.sessionid)))
    }

    /// A COMPOUND (minor version 1) sent on the current connection; its
    /// reply (see [`res4`]), or None when none came back.
    pub fn v4(&mut self, xid: u32, ops: Vec<ArgOp4<'_>>) -> Option<Vec<u8>> {
        use duet_protocols::nfs::xdr::Opaque;
        let mut w = XdrWriter::new();
        Compound4Args { tag: Opaque(b""), minorversion: 1, ops, stop: None }.encode(&mut w);
        let rec = self.call(xid, PROGRAM_NFS, 4, 1, &w.into_inner());
        self.record(&rec).pop()
    }
}

impl Default for NfsHarness {
    fn default() -> Self {
        Self::new()
    }
}

/// One NfsServer fed the RPC records of the input. The first byte is a
/// [`nfs_mode`] set; the rest is a record-marked stream, reassembled as the
/// appliance does (a framing error ends the connection).
pub fn nfs4_session(data: &[u8]) {
    let Some((&mode, stream)) = data.split_first() else { return };
    let mut h = NfsHarness::new();
    if mode & nfs_mode::OTHER_PEER != 0 {
        h.peer = "10.1.2.3".parse().unwrap();
    }
    if mode & nfs_mode::SESSION != 0 {
        let (_, id) = h.session();
        assert!(id.is_some(), "harness session");
    }
    h.defer = mode & nfs_mode::DEFER != 0;
    let step = if mode & nfs_mode::SLOW_CLOCK != 0 { 100_000_000_000 } else { 1_000_000 };
    let mut asm = RecordAssembler::new(RPC_RECORD_MAX, 1024);
    let mut rest = stream;
    let mut records = 0;
    while !rest.is_empty() && records < 256 {
        match asm.push(rest) {
            Ok(n) => rest = &rest[n..],
            Err(_) => break,
        }
        let Some(rec) = asm.take_record() else { break };
        records += 1;
        h.now += step;
        if mode & nfs_mode::SLOW_CLOCK != 0 {
            assert!(h.srv.on_tick(h.now).is_empty());
        }
        h.record(&rec);
        // Every table has a bound (NfsServerConfig).
        let (c, cfg) = (h.srv.state_counts(), h.srv.config());
        assert!(c.clients <= cfg.max_clients, "{c:?}");
        assert!(c.sessions <= cfg.max_sessions, "{c:?}");
        assert!(c.opens <= cfg.max_opens, "{c:?}");
        assert!(c.lock_states <= cfg.max_lock_states, "{c:?}");
        assert!(c.byte_locks <= cfg.max_byte_locks, "{c:?}");
        assert!(h.srv.pending_batches() <= cfg.max_pending, "pending batches past max_pending");
    }
    h.finish();
}

// ---- nfs4_callback: the back channel of delegations -------------------

/// Mode bits of the `nfs4_callback` target (its first input byte).
pub mod cb_mode {
    /// The fuzzed records arrive on a connection of their own (40), not on
    /// the holder's back-channel connection (BIND_CONN_TO_SESSION and
    /// BACKCHANNEL_CTL decide what reaches the back channel then).
    pub const OTHER_CONN: u8 = 1;
    /// The holder's callback credential is AUTH_NONE (else AUTH_SYS).
    pub const CB_NONE: u8 = 2;
    /// Two files recalled: one CB_RECALL in flight, one queued behind it
    /// (one callback at a time per session, back-channel slot 0).
    pub const TWO_RECALLS: u8 = 4;
    /// Hold batches back, as `nfs_mode::DEFER`.
    pub const DEFER: u8 = 8;
}

/// The holder's back-channel connection in `nfs4_callback`.
pub const CB_CONN: u64 = 10;
/// The rival client's connection.
const RIVAL_CONN: u64 = 20;

/// The state `nfs4_callback` starts from: client A (back channel on
/// [`CB_CONN`]) holds read delegations of the files, client B's OPEN for
/// writing was answered NFS4ERR_DELAY and a CB_RECALL went to A.
pub struct CbSetup {
    pub h: NfsHarness,
    /// A's session.
    pub holder: [u8; 16],
    pub holder_seq: u32,
    rival: [u8; 16],
    rival_seq: u32,
    pub files: Vec<&'static [u8]>,
    /// A's delegation stateid of each file.
    pub delegations: Vec<duet_protocols::nfs::nfs4::Stateid4>,
    xid: u32,
}

fn open_args(owner: &'static [u8], clientid: u64, access: u32, name: &'static [u8], create: bool) -> ArgOp4<'static> {
    use duet_protocols::nfs::nfs4::*;
    use duet_protocols::nfs::xdr::{Name, Opaque};
    ArgOp4::Open(Open4Args {
        seqid: 0,
        share_access: access,
        share_deny: share::DENY_NONE,
        owner: StateOwner4 { clientid, owner: Opaque(owner) },
        openhow: if create {
            OpenFlag4::Create(CreateHow4::Unchecked(Fattr4 { attrmask: Bitmap4::from_bits(&[]), attr_vals: Opaque(b"") }))
        } else {
            OpenFlag4::NoCreate
        },
        claim: OpenClaim4::Null(Name(name)),
    })
}

fn sequence_op(id: [u8; 16], seq: &mut u32) -> ArgOp4<'static> {
    use duet_protocols::nfs::nfs4::*;
    *seq += 1;
    ArgOp4::Sequence(Sequence4Args { sessionid: id, sequenceid: *seq, slotid: 0, highest_slotid: 0, cachethis: false })
}

/// A reply's results (the reply header skipped).
pub fn res4(rep: &[u8]) -> Option<Compound4Res<'_>> {
    let mut r = XdrReader::new(rep);
    ReplyHeader::decode(&mut r).ok()?;
    Compound4Res::decode(&mut r, 64).ok()
}

/// The status of a reply's `n`th operation, or the COMPOUND's when it
/// stopped before.
fn op_status(rep: Option<&[u8]>, n: usize) -> Option<duet_protocols::nfs::nfs4::Nfsstat4> {
    let r = res4(rep?)?;
    Some(r.results.get(n).map(|o| o.status()).unwrap_or(r.status))
}

impl CbSetup {
    /// Builds the state; None when the server did not get there (a
    /// harness bug: `harness_setups_reach_the_command_handlers` checks).
    pub fn new(mode: u8) -> Option<CbSetup> {
        use duet_protocols::nfs::nfs4::*;
        use duet_protocols::nfs::xdr::Name;
        let mut h = NfsHarness::new();
        let cb_uid = if mode & cb_mode::CB_NONE != 0 { None } else { Some(17) };
        h.conn = CB_CONN;
        let (_, a) = h.session_with(b"cb-holder", create_session4_flag::CONN_BACK_CHAN, cb_uid);
        let (aclient, holder) = a?;
        h.conn = RIVAL_CONN;
        let (_, b) = h.session_with(b"cb-rival", 0, None);
        let (bclient, rival) = b?;
        let mut s = CbSetup { h, holder, holder_seq: 0, rival, rival_seq: 0, files: vec![b"held-1"], delegations: Vec::new(), xid: 0xc000_0000 };
        if mode & cb_mode::TWO_RECALLS != 0 {
            s.files.push(b"held-2");
        }
        let root = || [ArgOp4::PutRootFh(()), ArgOp4::Lookup(Lookup4Args { objname: Name(b"share") })];
        for (conn, id) in [(CB_CONN, holder), (RIVAL_CONN, rival)] {
            s.h.conn = conn;
            let seq = if conn == CB_CONN { &mut s.holder_seq } else { &mut s.rival_seq };
            let ops = vec![sequence_op(id, seq), ArgOp4::ReclaimComplete(ReclaimComplete4Args { one_fs: false })];
            s.xid += 1;
            (op_status(s.h.v4(s.xid, ops).as_deref(), 1)? == Nfsstat4::OK).then_some(())?;
        }
        for &f in &s.files.clone() {
            // B creates the file (and closes it); A opens it for reading
            // and is given a read delegation.
            s.h.conn = RIVAL_CONN;
            let [p, l] = root();
            let ops = vec![
                sequence_op(rival, &mut s.rival_seq),
                p,
                l,
                open_args(b"b-create", bclient, share::ACCESS_READ, f, true),
                ArgOp4::Close(Close4Args { seqid: 0, open_stateid: Stateid4::CURRENT }),
            ];
            s.xid += 1;
            (op_status(s.h.v4(s.xid, ops).as_deref(), 4)? == Nfsstat4::OK).then_some(())?;
            s.h.conn = CB_CONN;
            let [p, l] = root();
            let ops = vec![
                sequence_op(holder, &mut s.holder_seq),
                p,
                l,
                open_args(b"a-reader", aclient, share::ACCESS_READ | share::WANT_READ_DELEG, f, false),
            ];
            s.xid += 1;
            let rep = s.h.v4(s.xid, ops)?;
            let r = res4(&rep)?;
            let Some(ResOp4::Open(Nfs4Res::Ok(o))) = r.results.get(3) else { return None };
            let OpenDelegation4::Read(d) = &o.delegation else { return None };
            s.delegations.push(d.stateid);
        }
        for &f in &s.files.clone() {
            (s.rival_open(f)? == Nfsstat4::DELAY).then_some(())?;
        }
        (s.h.callbacks.len() == 1 && s.h.callbacks[0].0 == CB_CONN).then_some(())?;
        Some(s)
    }

    /// B's OPEN of `name` for writing, on B's connection; its status.
    fn rival_open(&mut self, name: &'static [u8]) -> Option<duet_protocols::nfs::nfs4::Nfsstat4> {
        use duet_protocols::nfs::nfs4::*;
        use duet_protocols::nfs::xdr::Name;
        let conn = std::mem::replace(&mut self.h.conn, RIVAL_CONN);
        let ops = vec![
            sequence_op(self.rival, &mut self.rival_seq),
            ArgOp4::PutRootFh(()),
            ArgOp4::Lookup(Lookup4Args { objname: Name(b"share") }),
            open_args(b"b-writer", 0, share::ACCESS_BOTH, name, false),
            ArgOp4::Close(Close4Args { seqid: 0, open_stateid: Stateid4::CURRENT }),
        ];
        self.xid += 1;
        let st = op_status(self.h.v4(self.xid, ops).as_deref(), 3);
        self.h.conn = conn;
        st
    }

    /// B's SEQUENCE alone (renews B's lease).
    fn rival_renew(&mut self) {
        let conn = std::mem::replace(&mut self.h.conn, RIVAL_CONN);
        let ops = vec![sequence_op(self.rival, &mut self.rival_seq)];
        self.xid += 1;
        self.h.v4(self.xid, ops);
        self.h.conn = conn;
    }
}

/// The decoders of a callback's answer, on any record: what decodes as a
/// callback reply is a REPLY.
fn cb_reply_decoders(rec: &[u8]) {
    use duet_protocols::nfs::nfs4::callback;
    if callback::decode_cb_reply(rec).is_ok() {
        assert!(callback::is_reply(rec), "a decoded callback reply is a REPLY record");
    }
}

/// The back channel under hostile input: from [`CbSetup`] (a read
/// delegation recalled, the CB_RECALL out on the holder's back
/// connection), the input's records arrive on that connection (or,
/// `cb_mode::OTHER_CONN`, on another): callback replies right or wrong,
/// DELEGRETURN, BIND_CONN_TO_SESSION, BACKCHANNEL_CTL, DESTROY_SESSION,
/// anything. Checks, besides those of `nfs4_session`: every callback the
/// server calls is a CB_COMPOUND, and a recall never holds the rival up
/// for ever: after it renewed its lease for 2.5 lease periods (the
/// holder silent), its OPEN for writing is not answered NFS4ERR_DELAY.
pub fn nfs4_callback(data: &[u8]) {
    let Some((&mode, stream)) = data.split_first() else { return };
    let mut s = CbSetup::new(mode).expect("nfs4_callback harness setup");
    s.h.defer = mode & cb_mode::DEFER != 0;
    s.h.conn = if mode & cb_mode::OTHER_CONN != 0 { 40 } else { CB_CONN };
    let mut asm = RecordAssembler::new(RPC_RECORD_MAX, 1024);
    let mut rest = stream;
    let mut records = 0;
    while !rest.is_empty() && records < 256 {
        match asm.push(rest) {
            Ok(n) => rest = &rest[n..],
            Err(_) => break,
        }
        let Some(rec) = asm.take_record() else { break };
        records += 1;
        s.h.now += 1_000_000;
        cb_reply_decoders(&rec);
        s.h.record(&rec);
        let (c, cfg) = (s.h.srv.state_counts(), s.h.srv.config());
        assert!(c.clients <= cfg.max_clients && c.sessions <= cfg.max_sessions && c.opens <= cfg.max_opens, "{c:?}");
    }
    s.h.finish();
    s.h.defer = false;
    let lease = i64::from(s.h.srv.config().lease_time_s) * 1_000_000_000;
    for f in s.files.clone() {
        s.rival_open(f);
    }
    for _ in 0..5 {
        s.h.now += lease / 2;
        s.h.tick();
        s.rival_renew();
    }
    for f in s.files.clone() {
        let st = s.rival_open(f);
        assert_ne!(st, Some(duet_protocols::nfs::nfs4::Nfsstat4::DELAY), "a recall outlived 2.5 lease periods");
    }
    s.h.finish();
}

// ---- dcerpc: the srvsvc pipe's DCE/RPC parser and server end ----------

/// The DCE/RPC target: byte 0 chooses how the rest is split into pipe
/// writes (0: one write), byte 1 its endianness for the srvsvc stub
/// decoders. The stream goes through every PDU decoder and the srvsvc
/// stub decoders, then into one `Endpoint` serving srvsvc, as the IPC$
/// pipe feeds it. Checks: every PDU the endpoint sends carries its own
/// length in frag_length and decodes as what its type says; reads of any
/// size give the same bytes back; the output stays bounded.
pub fn dcerpc(data: &[u8]) {
    use duet_protocols::dcerpc::bind::{Bind, BindAck};
    use duet_protocols::dcerpc::endpoint::Endpoint;
    use duet_protocols::dcerpc::fault::Fault;
    use duet_protocols::dcerpc::header::{CommonHeader, PacketType};
    use duet_protocols::dcerpc::request::{Request as RpcRequest, Response as RpcResponse};
    use duet_protocols::dcerpc::lsarpc::{
        Account, LookupNamesReply, LookupNamesRequest, LookupSidsReply, LookupSidsRequest, Lsarpc,
    };
    use duet_protocols::dcerpc::srvsvc::{
        ServerGetInfoRequest, ShareEnumReply, ShareEnumRequest, ShareGetInfoRequest, ShareInfo, Srvsvc,
    };
    use duet_protocols::dcerpc::Service;
    if data.len() < 2 {
        return;
    }
    let (split, le, stream) = (data[0] as usize, data[1] & 1 == 0, &data[2..]);
    // The lsarpc service (MS-LSAT), on the stub and behind an endpoint.
    let lsa = Lsarpc {
        domain: "DUET".into(),
        workgroup: "WORKGROUP".into(),
        map: duet_fs::acl::SidMap {
            machine: Some(duet_fs::acl::Sid::new(5, &[21, 1, 2, 3])),
            users: [1000].into(),
            groups: [1000, 100].into(),
        },
        accounts: vec![Account { name: "alice".into(), uid: 1000, gid: 1000 }],
        caller_uid: Some(1000),
    };
    // Stateless decoders, on the stream and on each PDU it frames.
    let _ = CommonHeader::decode(stream);
    let mut rest = stream;
    while let Ok(h) = CommonHeader::decode(rest) {
        let len = usize::from(h.frag_length).min(rest.len());
        if len < CommonHeader::SIZE {
            break;
        }
        let pdu = &rest[..len];
        let _ = Bind::decode(pdu);
        let _ = BindAck::decode(pdu);
        let _ = Fault::decode(pdu);
        let _ = RpcResponse::decode(pdu);
        if let Ok(r) = RpcRequest::decode(pdu) {
            let _ = ShareEnumRequest::decode(r.stub, le);
            let _ = ShareGetInfoRequest::decode(r.stub, le);
            let _ = ServerGetInfoRequest::decode(r.stub, le);
            let _ = ShareEnumReply::decode(r.stub);
            let _ = lsa.call(r.opnum, r.stub, le);
        }
        rest = &rest[len..];
    }
    let _ = ShareEnumRequest::decode(stream, le);
    let _ = ShareGetInfoRequest::decode(stream, le);
    let _ = ServerGetInfoRequest::decode(stream, le);
    let _ = ShareEnumReply::decode(stream);
    // The server end, fed as a client writes to the pipe.
    let svc = Srvsvc {
        server_name: "DUET".into(),
        comment: "duet".into(),
        shares: (0..3)
            .map(|i| ShareInfo { name: format!("share{i}"), share_type: 0, remark: String::new(), path: format!("C:\\share{i}") })
            .collect(),
    };
    let chunks: Vec<&[u8]> = if split == 0 { vec![stream] } else { stream.chunks(split).collect() };
    for v in 1..=3 {
        let _ = LookupSidsRequest::decode(stream, le, v);
        let _ = LookupSidsReply::decode(stream, v);
        let _ = LookupNamesReply::decode(stream, v);
    }
    let _ = LookupNamesRequest::decode(stream, le);
    for op in [0u16, 6, 7, 14, 15, 44, 45, 46, 57, 58, 68, 76, 77] {
        let _ = lsa.call(op, stream, le);
    }
    let services: [(&str, &dyn Service); 2] = [("\\PIPE\\srvsvc", &svc), ("\\PIPE\\lsarpc", &lsa)];
    for (name, svc) in services {
        let mut e = Endpoint::new(name, 7);
        let mut out_total = 0usize;
        for (k, c) in chunks.iter().enumerate() {
            while !e.write(c, svc) {
                // Too much unread output: a client reads before writing more.
                if !drain(&mut e, &mut out_total, k) {
                    break;
                }
            }
            drain(&mut e, &mut out_total, k);
        }
    }
    fn drain(e: &mut Endpoint, total: &mut usize, k: usize) -> bool {
        let mut any = false;
        while e.has_output() {
            let want = e.next_message_len();
            // Message-mode reads of varying size give one PDU back whole.
            let max = 64 + (k * 97) % 4096;
            let mut pdu = Vec::new();
            loop {
                let Some((b, left)) = e.read(max) else { break };
                pdu.extend_from_slice(&b);
                if left == 0 {
                    break;
                }
            }
            assert_eq!(pdu.len(), want, "a PDU came back with another length");
            let h = CommonHeader::decode(&pdu).expect("the endpoint sent a PDU without a header");
            assert_eq!(usize::from(h.frag_length), pdu.len(), "frag_length is not the PDU's length");
            assert!(pdu.len() <= usize::from(Endpoint::MAX_FRAG), "a PDU over MAX_FRAG");
            match h.ptype {
                PacketType::RESPONSE => {
                    RpcResponse::decode(&pdu).expect("a RESPONSE that does not decode");
                }
                PacketType::FAULT => {
                    Fault::decode(&pdu).expect("a FAULT that does not decode");
                }
                PacketType::BIND_ACK | PacketType::ALTER_CONTEXT_RESP => {
                    BindAck::decode(&pdu).expect("a BIND_ACK that does not decode");
                }
                _ => {}
            }
            *total += pdu.len();
            any = true;
        }
        any
    }
}
