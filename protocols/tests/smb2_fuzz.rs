//! Hostile input never panics (Invariant 4): every decoder is fed truncated,
//! mutated and random bytes from a deterministic xorshift generator. Whatever
//! decodes must also re-encode, and decode again to the same value.

use std::path::PathBuf;

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
use duet_protocols::smb2::transform::{ChainedPayload, CompressionTransformHeader, FrameKind, TransformHeader};
use duet_protocols::smb2::{Command, Header, NtStatus, HEADER_SIZE};

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn captured_messages() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/smb2");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).unwrap();
        let hex: String =
            text.lines().filter(|l| !l.starts_with('#')).flat_map(|l| l.chars()).filter(|c| !c.is_whitespace()).collect();
        let frame: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        for m in Compound::new(&frame) {
            out.push(m.unwrap().bytes.to_vec());
        }
    }
    out
}

const STATUSES: [NtStatus; 6] = [
    NtStatus::SUCCESS,
    NtStatus::PENDING,
    NtStatus::MORE_PROCESSING_REQUIRED,
    NtStatus::BUFFER_OVERFLOW,
    NtStatus::ACCESS_DENIED,
    NtStatus::NO_MORE_FILES,
];

/// Runs every message-level decoder on `msg`; checks re-encoding.
fn message_decoders(msg: &[u8]) -> usize {
    let mut decoded = 0;
    let _ = Header::decode(msg);
    for m in Compound::new(msg) {
        let _ = m;
    }
    let prefix = msg.get(..HEADER_SIZE);
    for c in 0..=0x13u16 {
        let command = Command(c);
        if let Ok(req) = Request::decode(command, msg) {
            let mut again = prefix.map(|p| p.to_vec()).unwrap_or_else(|| vec![0; HEADER_SIZE]);
            req.encode(&mut again);
            decoded += 1;
            let back = Request::decode(command, &again)
                .unwrap_or_else(|e| panic!("{command:?} request re-encoded does not decode: {e}\n{msg:02x?}"));
            assert_eq!(back, req, "{command:?} request changed in a round trip");
        }
        for status in STATUSES {
            let header = match Header::decode(msg) {
                Ok(mut h) => {
                    h.command = command;
                    h.status = status;
                    h
                }
                Err(_) => continue,
            };
            if let Ok(resp) = Response::decode(&header, msg) {
                decoded += 1;
                let mut again = msg[..HEADER_SIZE].to_vec();
                resp.encode(&mut again);
                let back = Response::decode(&header, &again)
                    .unwrap_or_else(|e| panic!("{command:?} response re-encoded does not decode: {e}"));
                assert_eq!(back, resp, "{command:?} response changed in a round trip");
            }
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
    decoded
}

/// Runs every payload-level decoder on `buf`; re-encodes what decodes.
fn payload_decoders(buf: &[u8]) {
    let mut out = Vec::new();
    if let Ok(list) = create_context::decode_list(buf) {
        for c in list {
            if let Ok(t) = CreateContextRequest::decode(c) {
                create_context::encode_list(&[t], &mut out);
                assert_eq!(CreateContextRequest::decode_list(&out[out.len() - create_context::list_len(&[t])..]).unwrap(), [t]);
            }
            if let Ok(t) = CreateContextResponse::decode(c) {
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
    let _ = FrameKind::of(buf);
    if let Ok((h, _)) = TransformHeader::decode(buf) {
        out.clear();
        h.encode(&mut out);
    }
    if let Ok((h, rest)) = CompressionTransformHeader::decode(buf) {
        let _ = h.split_unchained(rest);
    }
    let _ = ChainedPayload::decode_chain(buf, 16);
}

#[test]
fn truncated_captured_messages_never_panic() {
    let msgs = captured_messages();
    let mut inputs = 0;
    for m in &msgs {
        // Every truncation of short messages; a sample of long ones.
        let step = (m.len() / 256).max(1);
        for len in (0..m.len()).step_by(step) {
            let _ = message_decoders(&m[..len]);
            payload_decoders(m.get(HEADER_SIZE + 8..len).unwrap_or(&[]));
            inputs += 1;
        }
    }
    assert!(inputs > 5_000, "{inputs}");
}

#[test]
fn mutated_captured_messages_never_panic() {
    let msgs = captured_messages();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut inputs = 0;
    let mut decoded = 0;
    for m in &msgs {
        for _ in 0..120 {
            let mut x = m.clone();
            for _ in 0..1 + rng.below(6) {
                let at = rng.below(x.len());
                x[at] = match rng.below(4) {
                    0 => 0,
                    1 => 0xFF,
                    2 => x[at] ^ (1 << rng.below(8)),
                    _ => rng.next() as u8,
                };
            }
            if rng.below(4) == 0 {
                let keep = rng.below(x.len() + 1);
                x.truncate(keep);
            }
            decoded += message_decoders(&x);
            payload_decoders(x.get(HEADER_SIZE..).unwrap_or(&[]));
            inputs += 1;
        }
    }
    assert!(inputs > 10_000, "{inputs}");
    // Most mutations leave a decodable message: the round-trip checks run.
    assert!(decoded > inputs, "only {decoded} decodes in {inputs} inputs");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    for i in 0..20_000 {
        let len = rng.below(400);
        let mut x = rng.bytes(len);
        // Half of the inputs get a valid header prefix so they reach the
        // body decoders.
        if i % 2 == 0 && x.len() >= 8 {
            x[..4].copy_from_slice(&[0xFE, b'S', b'M', b'B']);
            x[4..6].copy_from_slice(&64u16.to_le_bytes());
            if x.len() > 66 {
                // A plausible StructureSize.
                let sizes = [2u16, 4, 9, 16, 17, 24, 25, 32, 33, 36, 41, 44, 48, 49, 57, 60, 65, 89];
                x[64..66].copy_from_slice(&sizes[rng.below(sizes.len())].to_le_bytes());
            }
        }
        let _ = message_decoders(&x);
        payload_decoders(&x);
    }
}
