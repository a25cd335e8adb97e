//! Compounded messages (MS-SMB2 3.2.4.1.4 sending, 3.3.5.2.7 receiving):
//! several SMB2 messages in one transport frame, chained by NextCommand.

use super::cursor::{pad_len, WireWrite};
use super::decode_error::DecodeError;
use super::header::{Header, HEADER_SIZE};

/// duet's limit on messages in one compound (Invariant 5: every compound has
/// a limit). Windows clients send at most a handful; Linux at most 5.
pub const MAX_COMPOUND_MESSAGES: usize = 128;

/// One message of a compound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    pub header: Header,
    /// The message from the first byte of its header to the next header
    /// (so including any alignment padding) or to the end of the frame. Pass
    /// this to the command decoders: their offsets are relative to its start.
    pub bytes: &'a [u8],
    /// Where `bytes` starts in the frame.
    pub offset_in_frame: usize,
}

/// Iterates over the messages of one frame (the payload of one Direct TCP
/// transport packet, MS-SMB2 2.1).
///
/// Checks, per 3.3.5.2.7: NextCommand is a multiple of 8, at least a header
/// long, and inside the frame; at most `max_messages` messages. After the
/// first error the iterator ends.
#[derive(Debug, Clone)]
pub struct Compound<'a> {
    frame: &'a [u8],
    pos: usize,
    count: usize,
    max_messages: usize,
    done: bool,
}

impl<'a> Compound<'a> {
    pub fn new(frame: &'a [u8]) -> Self {
        Self::with_limit(frame, MAX_COMPOUND_MESSAGES)
    }

    pub fn with_limit(frame: &'a [u8], max_messages: usize) -> Self {
        Compound { frame, pos: 0, count: 0, max_messages, done: false }
    }

    fn next_message(&mut self) -> Result<Message<'a>, DecodeError> {
        let rest = self.frame.get(self.pos..).unwrap_or(&[]);
        self.count += 1;
        if self.count > self.max_messages {
            return Err(DecodeError::LimitExceeded { field: "compound messages" });
        }
        let header = Header::decode(rest)?;
        let offset_in_frame = self.pos;
        let next = header.next_command as usize;
        if next == 0 {
            self.done = true;
            return Ok(Message { header, bytes: rest, offset_in_frame });
        }
        if next & 7 != 0 {
            return Err(DecodeError::InvalidValue { field: "NextCommand alignment" });
        }
        if next < HEADER_SIZE || next > rest.len() {
            return Err(DecodeError::BadBuffer { field: "NextCommand" });
        }
        let bytes = rest.get(..next).ok_or(DecodeError::BadBuffer { field: "NextCommand" })?;
        self.pos += next;
        Ok(Message { header, bytes, offset_in_frame })
    }
}

impl<'a> Iterator for Compound<'a> {
    type Item = Result<Message<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let m = self.next_message();
        if m.is_err() {
            self.done = true;
        }
        Some(m)
    }
}

/// Builds a compound in `out`: call [`CompoundWriter::begin`] before
/// writing each message's header, then [`CompoundWriter::finish`].
///
/// `begin` pads the previous message to 8 bytes and stores its NextCommand
/// (the only field written after the fact: a message's length is known only
/// once its body is written). Signing happens after `finish`, since the
/// signature covers NextCommand and the padding.
#[derive(Debug)]
pub struct CompoundWriter {
    start_of_last: Option<usize>,
}

impl Default for CompoundWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl CompoundWriter {
    pub fn new() -> Self {
        CompoundWriter { start_of_last: None }
    }

    /// Starts a message: returns the offset in `out` where its header goes.
    pub fn begin(&mut self, out: &mut Vec<u8>) -> usize {
        if let Some(prev) = self.start_of_last {
            out.pad_to(prev, 8);
            let next = out.len() - prev;
            set_next_command(out, prev, next);
        }
        let start = out.len();
        self.start_of_last = Some(start);
        start
    }

    /// Ends the compound. Windows and Samba pad the last response of a
    /// compound to 8 bytes too (`pad_last`); its NextCommand stays 0.
    pub fn finish(self, out: &mut Vec<u8>, pad_last: bool) {
        if let (Some(prev), true) = (self.start_of_last, pad_last) {
            out.put_zeros(pad_len(out.len() - prev, 8));
        }
    }
}

fn set_next_command(out: &mut [u8], header_start: usize, next: usize) {
    // NextCommand is at offset 20 of the header.
    let value = u32::try_from(next).expect("a compound message longer than 4 GiB");
    if let Some(field) = out.get_mut(header_start + 20..header_start + 24) {
        field.copy_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smb2::header::{Command, HeaderFlags, HeaderIds};
    use crate::smb2::status::NtStatus;

    fn header(command: Command) -> Header {
        Header {
            credit_charge: 1,
            status: NtStatus::SUCCESS,
            command,
            credit: 1,
            flags: HeaderFlags(0),
            next_command: 0,
            message_id: 1,
            ids: HeaderIds::Sync { process_id: 0, tree_id: 1 },
            session_id: 1,
            signature: [0; 16],
        }
    }

    #[test]
    fn writer_and_iterator_agree() {
        let mut out = Vec::new();
        let mut w = CompoundWriter::new();
        for (cmd, body_len) in [(Command::CREATE, 57), (Command::QUERY_INFO, 41), (Command::CLOSE, 24)] {
            w.begin(&mut out);
            header(cmd).encode(&mut out);
            out.put_zeros(body_len);
        }
        w.finish(&mut out, false);
        let msgs: Vec<_> = Compound::new(&out).collect::<Result<_, _>>().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[0].bytes.len(), 128);
        assert_eq!(msgs[1].bytes.len(), 112);
        assert_eq!(msgs[2].bytes.len(), 88);
        assert_eq!(msgs[2].header.command, Command::CLOSE);
    }

    #[test]
    fn rejects_misaligned_short_and_overlong_chains() {
        for next in [65u32, 8, 4096] {
            let mut h = header(Command::ECHO);
            h.next_command = next;
            let mut out = Vec::new();
            h.encode(&mut out);
            out.put_zeros(200);
            let r: Vec<_> = Compound::new(&out).collect();
            assert_eq!(r.len(), 1, "next={next}");
            assert!(r[0].is_err(), "next={next}");
        }
    }

    #[test]
    fn limit_is_enforced() {
        let mut out = Vec::new();
        let mut w = CompoundWriter::new();
        for _ in 0..5 {
            w.begin(&mut out);
            header(Command::ECHO).encode(&mut out);
            out.put_zeros(4);
        }
        w.finish(&mut out, false);
        let r: Vec<_> = Compound::with_limit(&out, 4).collect();
        assert_eq!(r.len(), 5);
        assert_eq!(r[4], Err(DecodeError::LimitExceeded { field: "compound messages" }));
    }
}
