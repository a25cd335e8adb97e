//! Typed decoding of what the captured messages carry (negotiate and create
//! contexts, MS-FSCC information, FSCTL payloads), re-encoded byte for byte,
//! and checks that READ/WRITE payloads are borrowed, not copied.

use std::path::PathBuf;

use duet_protocols::smb2::compound::Compound;
use duet_protocols::smb2::create::{CreateRequest, CreateResponse};
use duet_protocols::smb2::create_context::{CreateContextRequest, CreateContextResponse, Lease};
use duet_protocols::smb2::cursor::Utf16;
use duet_protocols::smb2::fscc::{self, DirectoryEntry, DirectoryInfoClass};
use duet_protocols::smb2::ioctl::{
    ctl_code, IoctlRequest, IoctlResponse, NetworkInterfaceInfo, ValidateNegotiateInfoRequest,
    ValidateNegotiateInfoResponse,
};
use duet_protocols::smb2::negotiate::{algorithm, dialect, NegotiateContext, NegotiateRequest, NegotiateResponse};
use duet_protocols::smb2::query_directory::{OutputBufferResponse, QueryDirectoryRequest};
use duet_protocols::smb2::query_info::{info_type, QueryInfoRequest};
use duet_protocols::smb2::read::ReadResponse;
use duet_protocols::smb2::session_setup::{SessionSetupRequest, SessionSetupResponse};
use duet_protocols::smb2::set_info::SetInfoRequest;
use duet_protocols::smb2::tree_connect::TreeConnectRequest;
use duet_protocols::smb2::write::WriteRequest;
use duet_protocols::smb2::{Command, FileId, NtStatus};

fn frame(prefix: &str) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/smb2");
    let path = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no vector {prefix}"));
    let text = std::fs::read_to_string(path).unwrap();
    let hex: String = text.lines().filter(|l| !l.starts_with('#')).flat_map(|l| l.chars()).collect();
    let hex: String = hex.chars().filter(|c| !c.is_whitespace()).collect();
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

/// The messages of a frame.
fn messages(frame: &[u8]) -> Vec<&[u8]> {
    Compound::new(frame).map(|m| m.unwrap().bytes).collect()
}

fn reencode(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut out);
    out
}

#[test]
fn negotiate_contexts_are_typed_and_round_trip() {
    let f = frame("cifs-0004-");
    let req = NegotiateRequest::decode(&f).unwrap();
    assert_eq!(req.dialects, vec![dialect::SMB3_1_1]);
    assert_eq!(req.negotiate_contexts.len(), 4);
    match &req.negotiate_contexts[0] {
        NegotiateContext::PreauthIntegrity { hash_algorithms, salt } => {
            assert_eq!(hash_algorithms, &vec![algorithm::SHA_512]);
            assert_eq!(salt.len(), 32);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        req.negotiate_contexts[1],
        NegotiateContext::Encryption {
            ciphers: vec![algorithm::AES_128_GCM, algorithm::AES_256_GCM, algorithm::AES_128_CCM]
        }
    );
    assert!(matches!(req.negotiate_contexts[2], NegotiateContext::NetName { net_name } if net_name == "10.0.2.2"));
    assert!(matches!(req.negotiate_contexts[3], NegotiateContext::Other { context_type: 0x100, .. }));

    let f = frame("smbclient-0004-");
    let req = NegotiateRequest::decode(&f).unwrap();
    assert!(req.negotiate_contexts.iter().any(|c| matches!(c, NegotiateContext::Signing { .. })));
    assert_eq!(req.dialects.len(), 5);

    let f = frame("cifs-0006-");
    let resp = NegotiateResponse::decode(&f).unwrap();
    assert_eq!(resp.dialect_revision, dialect::SMB3_1_1);
    assert_eq!(resp.security_buffer.len(), 74);
    assert_eq!(resp.negotiate_contexts[1], NegotiateContext::Encryption { ciphers: vec![algorithm::AES_128_GCM] });
    assert_eq!(reencode(|o| resp.encode(o)), f[64..]);

    // smbclient's second connection offers only 2.x/3.0: ClientStartTime
    // instead of contexts, and the response has none.
    let f = frame("smbclient-0133-");
    let resp = NegotiateResponse::decode(&f).unwrap();
    assert!(resp.negotiate_contexts.is_empty());
}

#[test]
fn session_setup_and_tree_connect_borrow_their_buffers() {
    let f = frame("cifs-0008-");
    let req = SessionSetupRequest::decode(&f).unwrap();
    assert!(req.security_buffer.starts_with(b"NTLMSSP\0"));
    assert_eq!(req.security_buffer.as_ptr(), f[0x58..].as_ptr());
    let f = frame("cifs-0009-");
    let resp = SessionSetupResponse::decode(&f).unwrap();
    assert!(resp.security_buffer.starts_with(b"NTLMSSP\0\x02"));
    let f = frame("cifs-0012-");
    assert!(TreeConnectRequest::decode(&f).unwrap().path == "\\\\10.0.2.2\\IPC$");
}

#[test]
fn create_contexts_of_a_lease_open_are_typed() {
    let f = frame("cifs-0048-");
    let req = CreateRequest::decode(&f).unwrap();
    assert!(req.name == "capdir\\f0");
    let lease = match req.create_contexts[0] {
        CreateContextRequest::RequestLease(l) => l,
        other => panic!("{other:?}"),
    };
    assert_eq!(lease.lease_state, Lease::READ_CACHING | Lease::HANDLE_CACHING | Lease::WRITE_CACHING);
    assert!(lease.v2.is_some());
    assert_eq!(req.create_contexts[1], CreateContextRequest::DurableHandleRequest);
    assert_eq!(req.create_contexts[2], CreateContextRequest::QueryOnDiskId);

    let f = frame("cifs-0049-");
    let resp = CreateResponse::decode(&f).unwrap();
    assert_eq!(resp.create_contexts[0], CreateContextResponse::DurableHandle);
    assert!(matches!(resp.create_contexts[1], CreateContextResponse::OnDiskId { .. }));
    match resp.create_contexts[2] {
        CreateContextResponse::Lease(l) => assert_eq!(l.lease_key, lease.lease_key),
        other => panic!("{other:?}"),
    }
    // A server builds the same response from typed values.
    let rebuilt = CreateResponse { create_contexts: resp.create_contexts.clone(), ..resp.clone() };
    assert_eq!(reencode(|o| rebuilt.encode(o)), f[64..]);
}

/// Decodes a QUERY_INFO request/response pair and re-encodes the output.
fn query_info_pair(req_prefix: &str, resp_prefix: &str, index: usize) -> (u8, u8, Vec<u8>) {
    let rf = frame(req_prefix);
    let req = QueryInfoRequest::decode(messages(&rf)[index]).unwrap();
    let sf = frame(resp_prefix);
    let resp = OutputBufferResponse::decode(messages(&sf)[index], "QUERY_INFO").unwrap();
    (req.info_type, req.file_info_class, resp.output_buffer.to_vec())
}

#[test]
fn file_system_information_round_trips() {
    let (t, c, out) = query_info_pair("cifs-0020-", "cifs-0021-", 0);
    assert_eq!((t, c), (info_type::FILESYSTEM, fscc::fs_info_class::ATTRIBUTE));
    let attr = fscc::FileFsAttributeInformation::decode(&out).unwrap();
    assert!(attr.file_system_name == "NTFS");
    assert_eq!(reencode(|o| attr.encode(o)), out);

    let (_, c, out) = query_info_pair("cifs-0022-", "cifs-0023-", 0);
    assert_eq!(c, fscc::fs_info_class::DEVICE);
    let dev = fscc::FileFsDeviceInformation::decode(&out).unwrap();
    assert_eq!(reencode(|o| dev.encode(o)), out);

    let (_, c, out) = query_info_pair("cifs-0024-", "cifs-0025-", 0);
    assert_eq!(c, fscc::fs_info_class::VOLUME);
    let vol = fscc::FileFsVolumeInformation::decode(&out).unwrap();
    assert_eq!(reencode(|o| vol.encode(o)), out);

    let (_, c, out) = query_info_pair("cifs-0026-", "cifs-0027-", 0);
    assert_eq!(c, fscc::fs_info_class::SECTOR_SIZE);
    let sector = fscc::FileFsSectorSizeInformation::decode(&out).unwrap();
    assert_eq!(out.len(), fscc::FileFsSectorSizeInformation::SIZE);
    assert_eq!(reencode(|o| sector.encode(o)), out);

    let (_, c, out) = query_info_pair("smbclient-0067-", "smbclient-0068-", 0);
    assert_eq!(c, fscc::fs_info_class::SIZE);
    let size = fscc::FileFsSizeInformation::decode(&out).unwrap();
    assert_eq!(reencode(|o| size.encode(o)), out);
}

#[test]
fn file_all_information_round_trips() {
    for (req, resp, index) in [("cifs-0040-", "cifs-0041-", 1), ("smbclient-0073-", "smbclient-0074-", 0)] {
        let (t, c, out) = query_info_pair(req, resp, index);
        assert_eq!((t, c), (info_type::FILE, fscc::info_class::ALL));
        let all = fscc::FileAllInformation::decode(&out).unwrap();
        assert_eq!(reencode(|o| all.encode(o)), out, "{req}");
    }
}

#[test]
fn directory_listings_round_trip_through_the_chain_writer() {
    for (req, resp, class) in [
        ("cifs-1146-", "cifs-1147-", DirectoryInfoClass::IdFullDirectory),
        ("smbclient-0059-", "smbclient-0060-", DirectoryInfoClass::IdBothDirectory),
    ] {
        let rf = frame(req);
        let r = QueryDirectoryRequest::decode(messages(&rf).last().unwrap()).unwrap();
        assert_eq!(DirectoryInfoClass::from_class(r.file_information_class), Some(class));
        assert!(r.file_name == "*");
        let sf = frame(resp);
        let body = OutputBufferResponse::decode(messages(&sf).last().unwrap(), "QUERY_DIRECTORY").unwrap();
        let entries = DirectoryEntry::decode_list(class, body.output_buffer).unwrap();
        assert!(entries.len() >= 3, "{req}");
        assert!(entries.iter().any(|e| e.file_name == "."));
        let mut out = Vec::new();
        let limit = r.output_buffer_length as usize;
        assert_eq!(DirectoryEntry::encode_list(class, &entries, limit, &mut out), entries.len());
        assert_eq!(out, body.output_buffer, "{req}");
        // The server-side path: entries appended straight into the response.
        let mut direct = Vec::new();
        OutputBufferResponse::encode_with(&mut direct, |o| {
            DirectoryEntry::encode_list(class, &entries, limit, o);
        });
        assert_eq!(direct[8..], *body.output_buffer);
    }
}

#[test]
fn set_info_payloads_are_typed() {
    let f = frame("cifs-0052-");
    let s = SetInfoRequest::decode(&f).unwrap();
    assert_eq!(s.file_info_class, fscc::info_class::END_OF_FILE);
    let eof = fscc::FileEndOfFileInformation::decode(s.buffer).unwrap();
    assert_eq!(reencode(|o| eof.encode(o)), s.buffer);

    let f = frame("cifs-0054-");
    let s = SetInfoRequest::decode(&f).unwrap();
    assert_eq!(s.file_info_class, fscc::info_class::BASIC);
    let basic = fscc::FileBasicInformation::decode(s.buffer).unwrap();
    assert_eq!(reencode(|o| basic.encode(o)), s.buffer);

    for (prefix, index) in [("cifs-1158-", 1), ("smbclient-0085-", 0)] {
        let f = frame(prefix);
        let s = SetInfoRequest::decode(messages(&f)[index]).unwrap();
        assert_eq!(s.file_info_class, fscc::info_class::RENAME);
        let rename = fscc::FileRenameInformation::decode(s.buffer).unwrap();
        let encoded = reencode(|o| rename.encode(o));
        // Linux sends a NUL after the name, outside FileNameLength.
        assert_eq!(encoded, s.buffer[..encoded.len()], "{prefix}");
        assert!(s.buffer[encoded.len()..].iter().all(|b| *b == 0));
    }
    let f = frame("smbclient-0085-");
    let rename = fscc::FileRenameInformation::decode(SetInfoRequest::decode(&f).unwrap().buffer).unwrap();
    assert!(rename.file_name == "d1\\moved.txt");

    for (prefix, index) in [("cifs-1178-", 1), ("smbclient-0119-", 0)] {
        let f = frame(prefix);
        let s = SetInfoRequest::decode(messages(&f)[index]).unwrap();
        assert_eq!(s.file_info_class, fscc::info_class::DISPOSITION);
        let d = fscc::FileDispositionInformation::decode(s.buffer).unwrap();
        assert!(d.delete_pending);
    }
}

#[test]
fn fsctl_payloads_round_trip() {
    let f = frame("smbclient-0141-");
    let req = IoctlRequest::decode(&f).unwrap();
    assert_eq!(req.ctl_code, ctl_code::FSCTL_VALIDATE_NEGOTIATE_INFO);
    assert_eq!(req.file_id, FileId::RELATED);
    let v = ValidateNegotiateInfoRequest::decode(req.input).unwrap();
    assert_eq!(v.dialects, vec![dialect::SMB2_0_2, dialect::SMB2_1]);
    assert_eq!(reencode(|o| v.encode(o)), req.input);

    let f = frame("smbclient-0142-");
    let resp = IoctlResponse::decode(&f).unwrap();
    let v = ValidateNegotiateInfoResponse::decode(resp.output).unwrap();
    assert_eq!(v.dialect, dialect::SMB2_1);
    assert_eq!(reencode(|o| v.encode(o)), resp.output);

    let f = frame("cifs-0019-");
    let resp = IoctlResponse::decode(&f).unwrap();
    assert_eq!(resp.ctl_code, ctl_code::FSCTL_QUERY_NETWORK_INTERFACE_INFO);
    let ifs = NetworkInterfaceInfo::decode_list(resp.output).unwrap();
    assert_eq!(ifs.len(), 2);
    assert_eq!(ifs[0].address.ip().to_string(), "127.0.0.1");
    assert!(ifs[1].address.is_ipv6());
    assert_eq!(reencode(|o| NetworkInterfaceInfo::encode_list(&ifs, o)), resp.output);
}

#[test]
fn read_and_write_payloads_are_borrowed() {
    let f = frame("smbclient-0076-");
    let r = ReadResponse::decode(&f).unwrap();
    assert_eq!(r.data, b"hello capture\n");
    assert_eq!(r.data.as_ptr(), f[ReadResponse::DATA_OFFSET..].as_ptr());
    // Zero-copy encoding: the fixed part alone, data sent after it.
    let mut fixed = Vec::new();
    ReadResponse::encode_fixed(r.data.len(), r.data_remaining, r.flags, &mut fixed);
    assert_eq!(fixed, f[64..ReadResponse::DATA_OFFSET]);

    let f = frame("cifs-0056-");
    let w = WriteRequest::decode(&f).unwrap();
    assert_eq!(w.data, b"small file 0\n");
    assert_eq!(w.data.as_ptr(), f[WriteRequest::DATA_OFFSET..].as_ptr());
    let mut fixed = Vec::new();
    w.encode_fixed(w.data.len(), &mut fixed);
    assert_eq!(fixed, f[64..WriteRequest::DATA_OFFSET]);
}

#[test]
fn compounds_carry_related_file_ids() {
    let f = frame("cifs-0040-");
    let msgs: Vec<_> = Compound::new(&f).map(|m| m.unwrap()).collect();
    assert_eq!(
        msgs.iter().map(|m| m.header.command).collect::<Vec<_>>(),
        [Command::CREATE, Command::QUERY_INFO, Command::CLOSE]
    );
    assert!(!msgs[0].header.flags.is_related());
    assert!(msgs[1].header.flags.is_related() && msgs[2].header.flags.is_related());
    assert_eq!(QueryInfoRequest::decode(msgs[1].bytes).unwrap().file_id, FileId::RELATED);
    // The failed compound: every member answered with the same status.
    let f = frame("cifs-0043-");
    for m in Compound::new(&f) {
        assert_eq!(m.unwrap().header.status, NtStatus::OBJECT_NAME_NOT_FOUND);
    }
    let _ = Utf16::EMPTY;
}
