//! ONC RPC (RFC 5531): record marking, call and reply headers, AUTH_SYS,
//! checked against hand-laid bytes.

use duet_protocols::nfs::rpc::*;
use duet_protocols::nfs::xdr::{
    decode_all, encode_to_vec, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter,
};

/// Big-endian words, the way RFC 5531's XDR lays them out.
fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn auth_sys_body() -> Vec<u8> {
    // stamp, machinename "host" (4 bytes, no pad), uid, gid, gids<2>.
    let mut b = words(&[0x1234, 4]);
    b.extend_from_slice(b"host");
    b.extend(words(&[1000, 100, 2, 10, 20]));
    b
}

fn call_bytes() -> Vec<u8> {
    let body = auth_sys_body();
    let mut b = words(&[0xabcd, 0, 2, PROGRAM_NFS, 3, 1, AUTH_SYS, body.len() as u32]);
    b.extend(&body);
    b.extend(words(&[AUTH_NONE, 0]));
    b
}

#[test]
fn call_header_matches_rfc5531_layout() {
    let bytes = call_bytes();
    let mut r = XdrReader::new(&bytes);
    let call = CallBody::decode(&mut r).unwrap();
    assert!(r.is_empty());
    assert_eq!(
        (call.xid, call.rpcvers, call.prog, call.vers, call.proc_),
        (0xabcd, 2, 100003, 3, 1)
    );
    let Credential::Sys(sys) = Credential::parse(&call.cred).unwrap() else {
        panic!()
    };
    assert_eq!(sys.stamp, 0x1234);
    assert_eq!(sys.machine_name.0, b"host");
    assert_eq!(
        (sys.uid, sys.gid, sys.gids.as_slice()),
        (1000, 100, &[10, 20][..])
    );
    assert_eq!(Credential::parse(&call.verf).unwrap(), Credential::None);
    assert_eq!(encode_to_vec(&call), bytes);
    // Through the generic message type too.
    let msg: RpcMessage = decode_all(&bytes).unwrap();
    assert_eq!(msg.xid(), 0xabcd);
    assert_eq!(encode_to_vec(&msg), bytes);
}

#[test]
fn auth_sys_bounds() {
    // 17 gids: over the RFC 5531 appendix A bound of 16.
    let mut b = words(&[0, 0, 0, 0, 17]);
    b.extend(words(&[0; 17]));
    let cred = OpaqueAuth {
        flavor: AUTH_SYS,
        body: &b,
    };
    assert_eq!(Credential::parse(&cred), Err(AuthStat::BadCred));
    // A machine name of 256 bytes: over the bound of 255.
    let mut b = words(&[0, 256]);
    b.extend(vec![b'a'; 256]);
    b.extend(words(&[0, 0, 0]));
    let cred = OpaqueAuth {
        flavor: AUTH_SYS,
        body: &b,
    };
    assert_eq!(Credential::parse(&cred), Err(AuthStat::BadCred));
    // Trailing bytes in the body are malformed too.
    let mut b = auth_sys_body();
    b.extend(words(&[0]));
    assert_eq!(
        Credential::parse(&OpaqueAuth {
            flavor: AUTH_SYS,
            body: &b
        }),
        Err(AuthStat::BadCred)
    );
    // An unknown flavour is rejected so the client can pick another.
    let cred = OpaqueAuth {
        flavor: RPCSEC_GSS,
        body: &[],
    };
    assert_eq!(Credential::parse(&cred), Err(AuthStat::RejectedCred));
    // opaque_auth bodies are bounded by 400 bytes.
    let mut b = words(&[AUTH_SYS, 404]);
    b.extend(vec![0; 404]);
    assert!(matches!(
        OpaqueAuth::decode(&mut XdrReader::new(&b)),
        Err(XdrError::TooLong {
            len: 404,
            max: 400,
            ..
        })
    ));
}

#[test]
fn reply_headers_match_rfc5531_layout() {
    // Accepted SUCCESS: xid, REPLY, MSG_ACCEPTED, verf AUTH_NONE, SUCCESS.
    let h = ReplyHeader::success(9);
    assert_eq!(encode_to_vec(&h), words(&[9, 1, 0, 0, 0, 0]));
    // PROG_MISMATCH carries low and high.
    let h = ReplyHeader::accepted(
        9,
        AcceptedReplyData::ProgMismatch(MismatchInfo { low: 3, high: 4 }),
    );
    let b = words(&[9, 1, 0, 0, 0, 2, 3, 4]);
    assert_eq!(encode_to_vec(&h), b);
    assert_eq!(decode_all::<ReplyHeader>(&b).unwrap(), h);
    // GARBAGE_ARGS.
    let h = ReplyHeader::accepted(9, AcceptedReplyData::GarbageArgs);
    assert_eq!(encode_to_vec(&h), words(&[9, 1, 0, 0, 0, 4]));
    // MSG_DENIED / RPC_MISMATCH 2..2.
    let h = ReplyHeader::denied(
        9,
        RejectedReply::RpcMismatch(MismatchInfo { low: 2, high: 2 }),
    );
    let b = words(&[9, 1, 1, 0, 2, 2]);
    assert_eq!(encode_to_vec(&h), b);
    assert_eq!(decode_all::<ReplyHeader>(&b).unwrap(), h);
    // MSG_DENIED / AUTH_ERROR / AUTH_TOOWEAK.
    let h = ReplyHeader::denied(9, RejectedReply::AuthError(AuthStat::TooWeak));
    let b = words(&[9, 1, 1, 1, 5]);
    assert_eq!(encode_to_vec(&h), b);
    assert_eq!(decode_all::<ReplyHeader>(&b).unwrap(), h);
}

#[test]
fn bad_discriminants_are_errors() {
    // msg_type 2.
    assert!(matches!(
        decode_all::<RpcMessage>(&words(&[1, 2])),
        Err(XdrError::BadDiscriminant { value: 2, .. })
    ));
    // accept_stat 6.
    assert!(decode_all::<ReplyHeader>(&words(&[1, 1, 0, 0, 0, 6])).is_err());
    // A call where a reply is expected, and the other way round.
    assert!(ReplyHeader::decode(&mut XdrReader::new(&call_bytes())).is_err());
    assert!(CallBody::decode(&mut XdrReader::new(&words(&[9, 1, 0, 0, 0, 0]))).is_err());
}

#[test]
fn garbage_args_only_for_undecodable_xdr() {
    // RFC 5531 GARBAGE_ARGS: XDR that does not decode.
    for e in [
        XdrError::BadBool(7),
        XdrError::Truncated { needed: 4, remaining: 1 },
        XdrError::TooLong { what: "opaque", len: 9, max: 8 },
        XdrError::BadDiscriminant { what: "msg_type", value: 2 },
        XdrError::TrailingBytes(4),
        XdrError::Invalid("fattr4 attr_vals longer than its attributes"),
    ] {
        assert!(e.rpc_garbage_args(), "{e:?}");
    }
    // A well-formed argument over a protocol bound: the procedure's own
    // status, not GARBAGE_ARGS.
    for e in [
        XdrError::NameTooLong { len: 256, max: 255 },
        XdrError::AttrNotSupported(75),
        XdrError::TooManyOps { count: 2000, max: 1024 },
    ] {
        assert!(!e.rpc_garbage_args(), "{e:?}");
    }
}

#[test]
fn rpc_version_is_left_for_the_server() {
    // rpcvers 3 decodes (so the server knows the xid) for an RPC_MISMATCH reply.
    let mut b = call_bytes();
    b[11] = 3;
    let call = CallBody::decode(&mut XdrReader::new(&b)).unwrap();
    assert_ne!(call.rpcvers, RPC_VERSION);
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_record(payload, &mut out);
    out
}

#[test]
fn record_marking_single_fragment() {
    let payload = call_bytes();
    let stream = framed(&payload);
    assert_eq!(
        stream[..4],
        (0x8000_0000u32 | payload.len() as u32).to_be_bytes()
    );
    // Fed one byte at a time.
    let mut asm = RecordAssembler::new(1 << 20, 8);
    let mut got = Vec::new();
    for b in &stream {
        assert_eq!(asm.push(std::slice::from_ref(b)).unwrap(), 1);
        if let Some(rec) = asm.take_record() {
            got.push(rec);
        }
    }
    assert_eq!(got, vec![payload]);
    assert!(asm.is_idle());
}

#[test]
fn record_marking_multiple_fragments_and_records() {
    // Record 1 in three fragments (one empty), record 2 in one.
    let mut stream = Vec::new();
    stream.extend(5u32.to_be_bytes());
    stream.extend(b"hello");
    stream.extend(0u32.to_be_bytes());
    stream.extend((0x8000_0000u32 | 6).to_be_bytes());
    stream.extend(b" world");
    stream.extend(framed(b"second"));
    let mut asm = RecordAssembler::new(64, 4);
    let mut rest = &stream[..];
    let mut got = Vec::new();
    while !rest.is_empty() {
        let n = asm.push(rest).unwrap();
        rest = &rest[n..];
        if let Some(rec) = asm.take_record() {
            got.push(rec);
        }
    }
    assert_eq!(got, vec![b"hello world".to_vec(), b"second".to_vec()]);
    // An empty last fragment is an empty record.
    let mut asm = RecordAssembler::new(64, 4);
    assert_eq!(asm.push(&framed(b"")).unwrap(), 4);
    assert_eq!(asm.take_record(), Some(vec![]));
}

#[test]
fn record_marking_limits() {
    // A header declaring more than the maximum record size is refused
    // before any byte of it is buffered.
    let mut asm = RecordAssembler::new(1024, 8);
    assert_eq!(
        asm.push(&(0x8000_0000u32 | 1025).to_be_bytes()),
        Err(RecordError::RecordTooLarge {
            len: 1025,
            max: 1024
        })
    );
    // Fragments adding up past the maximum.
    let mut asm = RecordAssembler::new(8, 8);
    let mut stream = 6u32.to_be_bytes().to_vec();
    stream.extend(b"abcdef");
    stream.extend((0x8000_0000u32 | 6).to_be_bytes());
    stream.extend(b"ghijkl");
    assert!(matches!(
        asm.push(&stream),
        Err(RecordError::RecordTooLarge { len: 12, .. })
    ));
    // Too many (empty) fragments.
    let mut asm = RecordAssembler::new(1024, 3);
    let stream: Vec<u8> = (0..4).flat_map(|_| 0u32.to_be_bytes()).collect();
    assert_eq!(
        asm.push(&stream),
        Err(RecordError::TooManyFragments { max: 3 })
    );
}

#[test]
fn record_framing_in_place() {
    let mut w = XdrWriter::new();
    let at = begin_record(&mut w);
    ReplyHeader::success(5).encode(&mut w);
    w.put_u32(0);
    end_record(&mut w, at);
    let bytes = w.into_inner();
    let mut asm = RecordAssembler::new(1024, 1);
    assert_eq!(asm.push(&bytes).unwrap(), bytes.len());
    let rec = asm.take_record().unwrap();
    assert_eq!(rec, bytes[4..]);
    let mut r = XdrReader::new(&rec);
    assert_eq!(ReplyHeader::decode(&mut r).unwrap().xid, 5);
    assert_eq!(r.get_u32().unwrap(), 0);
}

#[test]
fn xdr_primitives() {
    // RFC 4506 4.10: variable-length opaque pads to four bytes.
    let mut w = XdrWriter::new();
    w.put_opaque(b"abcde");
    assert_eq!(
        w.as_bytes(),
        &[0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0]
    );
    let bytes = w.into_inner();
    let o: Opaque<'_, 5> = decode_all(&bytes).unwrap();
    assert_eq!(o.0, b"abcde");
    assert!(matches!(
        decode_all::<Opaque<'_, 4>>(&bytes),
        Err(XdrError::TooLong { len: 5, max: 4, .. })
    ));
    // Missing padding is a truncation.
    assert!(matches!(
        decode_all::<Opaque<'_, 8>>(&bytes[..10]),
        Err(XdrError::Truncated { .. })
    ));
    // Booleans are 0 or 1 only; hypers are big-endian.
    assert_eq!(decode_all::<bool>(&words(&[2])), Err(XdrError::BadBool(2)));
    assert_eq!(decode_all::<u64>(&words(&[1, 2])).unwrap(), (1 << 32) | 2);
    assert_eq!(
        decode_all::<i64>(&words(&[u32::MAX, u32::MAX])).unwrap(),
        -1
    );
    // Trailing bytes.
    assert_eq!(
        decode_all::<u32>(&words(&[1, 2])),
        Err(XdrError::TrailingBytes(4))
    );
    // An array count larger than the bytes left is refused before any
    // allocation.
    let buf = words(&[1000, 1]);
    let mut r = XdrReader::new(&buf);
    assert!(matches!(
        r.get_array(u32::MAX, "t", |r| r.get_u32()),
        Err(XdrError::Truncated { needed: 4000, .. })
    ));
}
