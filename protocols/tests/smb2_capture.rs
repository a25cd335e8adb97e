//! Round trips over real SMB2 traffic (protocols/testdata/smb2, cut from
//! the captures in shared/captures): every message is split out of its
//! compound, decoded by the body decoder for its command, encoded again and
//! compared with the captured bytes.
//!
//! Byte-exact, except for what MS-SMB2 leaves to the sender and real
//! senders disagree on (each case is named where it is handled):
//! - trailing padding: the 8-byte alignment of compound members, and the
//!   one-byte Buffer of a body with an empty variable part, which Linux
//!   omits inside compounds;
//! - the offset field of an empty buffer, which receivers ignore;
//! - the value of the unused ErrorData byte (Samba sends 0x21 in interim
//!   responses).

use std::path::PathBuf;

use duet_protocols::smb2::compound::{Compound, CompoundWriter};
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::{Command, Header, HEADER_SIZE};

struct Vector {
    name: String,
    frame: Vec<u8>,
}

fn vectors() -> Vec<Vector> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/smb2");
    let mut list: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata/smb2")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    list.sort();
    list.iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let hex: String = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .flat_map(|l| l.chars())
                .filter(|c| !c.is_whitespace())
                .collect();
            let frame = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            Vector { name: p.file_name().unwrap().to_string_lossy().into_owned(), frame }
        })
        .collect()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Rewrites the sender-chosen values that the receiver ignores to what our
/// encoders write (see the module comment).
fn normalize(header: &Header, msg: &[u8]) -> Vec<u8> {
    let mut m = msg.to_vec();
    let body = HEADER_SIZE;
    let is_response = header.flags.is_response();
    match (header.command, is_response) {
        // QUERY_INFO request: Linux sets InputBufferOffset to 0x68 with an
        // empty input outside compounds, 0 inside; smbclient 0.
        (Command::QUERY_INFO, false) if u32_at(&m, body + 12) == 0 => {
            m[body + 8..body + 10].copy_from_slice(&[0, 0]);
        }
        // IOCTL request: smbclient sets OutputOffset to the input offset
        // with OutputCount 0.
        (Command::IOCTL, false) => {
            if u32_at(&m, body + 28) == 0 {
                set_u32(&mut m, body + 24, 0); // InputOffset
            }
            if u32_at(&m, body + 40) == 0 {
                set_u32(&mut m, body + 36, 0); // OutputOffset
            }
        }
        _ => {}
    }
    // ERROR response with ByteCount 0: the single ErrorData byte is unused.
    if is_response && u16_at(&m, body) == 9 && m.len() > body + 8 && u32_at(&m, body + 4) == 0 {
        let is_error_body = !Response::has_command_body(header.command, header.status);
        if is_error_body {
            m[body + 8] = 0;
        }
    }
    m
}

/// Compares a re-encoded message with the captured one; returns whether
/// they are identical (as opposed to equal up to trailing padding).
fn compare(name: &str, index: usize, original: &[u8], encoded: &[u8]) -> bool {
    let n = original.len().min(encoded.len());
    if original[..n] != encoded[..n] {
        let at = (0..n).find(|&i| original[i] != encoded[i]).unwrap();
        panic!(
            "{name} message {index}: first difference at byte {at:#x}\n  captured: {:02x?}\n  encoded:  {:02x?}",
            &original[at.saturating_sub(8)..(at + 16).min(original.len())],
            &encoded[at.saturating_sub(8)..(at + 16).min(encoded.len())],
        );
    }
    if original.len() >= encoded.len() {
        let tail = &original[n..];
        assert!(
            tail.len() < 8 && tail.iter().all(|b| *b == 0),
            "{name} message {index}: captured has {} more bytes {tail:02x?}",
            tail.len()
        );
    } else {
        let extra = &encoded[n..];
        assert!(
            extra == [0],
            "{name} message {index}: encoded has {} more bytes {extra:02x?}",
            extra.len()
        );
    }
    original.len() == encoded.len()
}

#[test]
fn every_captured_message_round_trips() {
    let vectors = vectors();
    assert!(vectors.len() >= 60, "only {} vectors", vectors.len());
    let mut messages = 0;
    let mut identical = 0;
    let mut commands = std::collections::BTreeSet::new();
    for v in &vectors {
        let mut frame_again = Vec::new();
        let mut writer = CompoundWriter::new();
        let mut count = 0;
        for (i, m) in Compound::new(&v.frame).enumerate() {
            let m = m.unwrap_or_else(|e| panic!("{}: compound: {e}", v.name));
            let h = m.header;
            let mut encoded = Vec::new();
            h.encode(&mut encoded);
            assert_eq!(&encoded[..], &m.bytes[..HEADER_SIZE], "{}: header {i}", v.name);
            writer.begin(&mut frame_again);
            let mut header = h;
            header.next_command = 0;
            header.encode(&mut frame_again);
            if h.flags.is_response() {
                let r = Response::decode(&h, m.bytes).unwrap_or_else(|e| panic!("{} message {i}: {e}", v.name));
                r.encode(&mut encoded);
                r.encode(&mut frame_again);
                commands.insert(format!("{:?} response{}", h.command, if matches!(r, Response::Error(_)) { " (error)" } else { "" }));
            } else {
                let r = Request::decode(h.command, m.bytes).unwrap_or_else(|e| panic!("{} message {i}: {e}", v.name));
                assert_eq!(r.command(), h.command);
                r.encode(&mut encoded);
                r.encode(&mut frame_again);
                commands.insert(format!("{:?} request", h.command));
            }
            let original = normalize(&h, m.bytes);
            if compare(&v.name, i, &original, &encoded) {
                identical += 1;
            }
            messages += 1;
            count += 1;
        }
        // Responses are rebuilt as whole frames, compound padding included
        // (Samba pads the last member of a compound too).
        let is_response = Header::decode(&v.frame).unwrap().flags.is_response();
        writer.finish(&mut frame_again, count > 1);
        if is_response {
            let original: Vec<u8> = {
                let mut f = Vec::new();
                for m in Compound::new(&v.frame) {
                    let m = m.unwrap();
                    f.extend_from_slice(&normalize(&m.header, m.bytes));
                }
                f
            };
            assert_eq!(original.len(), frame_again.len(), "{}: frame length", v.name);
            assert!(original == frame_again, "{}: frame differs", v.name);
        }
    }
    eprintln!("{messages} messages, {identical} byte-identical; covered: {commands:?}");
    assert!(messages >= 80);
    for must in [
        "NEGOTIATE request",
        "NEGOTIATE response",
        "SESSION_SETUP request",
        "SESSION_SETUP response",
        "TREE_CONNECT request",
        "CREATE request",
        "CREATE response",
        "CLOSE response",
        "QUERY_INFO response",
        "QUERY_DIRECTORY response",
        "READ response",
        "WRITE request",
        "IOCTL request",
        "IOCTL response",
        "SET_INFO request",
    ] {
        assert!(commands.contains(must), "no {must} in the vectors");
    }
}
