//! MS-SMB2 2.2.1 SMB2 Packet Header: the 64-byte header in front of every
//! SMB2 message, its ASYNC (2.2.1.1) and SYNC (2.2.1.2) forms, command codes
//! and flags.

use super::cursor::{Reader, WireWrite};
use super::decode_error::DecodeError;
use super::status::NtStatus;

/// Size of the SMB2 header; also its StructureSize. Every command body starts
/// at this offset of its message, and every buffer offset in a command is
/// counted from the first byte of this header.
pub const HEADER_SIZE: usize = 64;

/// ProtocolId of an SMB2 message: 0xFE 'S' 'M' 'B'.
pub const PROTOCOL_ID: [u8; 4] = [0xFE, b'S', b'M', b'B'];

/// MS-SMB2 2.2.1 Command field.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Command(pub u16);

impl Command {
    pub const NEGOTIATE: Command = Command(0x0000);
    pub const SESSION_SETUP: Command = Command(0x0001);
    pub const LOGOFF: Command = Command(0x0002);
    pub const TREE_CONNECT: Command = Command(0x0003);
    pub const TREE_DISCONNECT: Command = Command(0x0004);
    pub const CREATE: Command = Command(0x0005);
    pub const CLOSE: Command = Command(0x0006);
    pub const FLUSH: Command = Command(0x0007);
    pub const READ: Command = Command(0x0008);
    pub const WRITE: Command = Command(0x0009);
    pub const LOCK: Command = Command(0x000A);
    pub const IOCTL: Command = Command(0x000B);
    pub const CANCEL: Command = Command(0x000C);
    pub const ECHO: Command = Command(0x000D);
    pub const QUERY_DIRECTORY: Command = Command(0x000E);
    pub const CHANGE_NOTIFY: Command = Command(0x000F);
    pub const QUERY_INFO: Command = Command(0x0010);
    pub const SET_INFO: Command = Command(0x0011);
    pub const OPLOCK_BREAK: Command = Command(0x0012);
    /// SMB2 SERVER_TO_CLIENT_NOTIFICATION (3.1.1 only).
    pub const SERVER_TO_CLIENT_NOTIFICATION: Command = Command(0x0013);

    pub fn name(self) -> Option<&'static str> {
        const NAMES: [&str; 20] = [
            "NEGOTIATE",
            "SESSION_SETUP",
            "LOGOFF",
            "TREE_CONNECT",
            "TREE_DISCONNECT",
            "CREATE",
            "CLOSE",
            "FLUSH",
            "READ",
            "WRITE",
            "LOCK",
            "IOCTL",
            "CANCEL",
            "ECHO",
            "QUERY_DIRECTORY",
            "CHANGE_NOTIFY",
            "QUERY_INFO",
            "SET_INFO",
            "OPLOCK_BREAK",
            "SERVER_TO_CLIENT_NOTIFICATION",
        ];
        NAMES.get(usize::from(self.0)).copied()
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Command({:#06x})", self.0),
        }
    }
}

/// MS-SMB2 2.2.1 Flags field.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderFlags(pub u32);

impl HeaderFlags {
    /// SMB2_FLAGS_SERVER_TO_REDIR: the message is a response.
    pub const SERVER_TO_REDIR: u32 = 0x0000_0001;
    /// SMB2_FLAGS_ASYNC_COMMAND: the header is the ASYNC form (2.2.1.1).
    pub const ASYNC_COMMAND: u32 = 0x0000_0002;
    /// SMB2_FLAGS_RELATED_OPERATIONS: part of a related compound (3.3.5.2.7.2).
    pub const RELATED_OPERATIONS: u32 = 0x0000_0004;
    /// SMB2_FLAGS_SIGNED.
    pub const SIGNED: u32 = 0x0000_0008;
    /// SMB2_FLAGS_PRIORITY_MASK (3.1.1).
    pub const PRIORITY_MASK: u32 = 0x0000_0070;
    /// SMB2_FLAGS_DFS_OPERATIONS.
    pub const DFS_OPERATIONS: u32 = 0x1000_0000;
    /// SMB2_FLAGS_REPLAY_OPERATION (3.x).
    pub const REPLAY_OPERATION: u32 = 0x2000_0000;

    pub fn contains(self, bit: u32) -> bool {
        self.0 & bit == bit
    }

    pub fn is_response(self) -> bool {
        self.contains(Self::SERVER_TO_REDIR)
    }

    pub fn is_async(self) -> bool {
        self.contains(Self::ASYNC_COMMAND)
    }

    pub fn is_related(self) -> bool {
        self.contains(Self::RELATED_OPERATIONS)
    }

    pub fn is_signed(self) -> bool {
        self.contains(Self::SIGNED)
    }
}

impl std::fmt::Debug for HeaderFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeaderFlags({:#010x})", self.0)
    }
}

/// The 8 bytes at offset 32 of the header: ProcessId + TreeId in the SYNC
/// form (2.2.1.2), AsyncId in the ASYNC form (2.2.1.1). Which one is chosen
/// by SMB2_FLAGS_ASYNC_COMMAND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderIds {
    Sync { process_id: u32, tree_id: u32 },
    Async { async_id: u64 },
}

/// MS-SMB2 2.2.1 SMB2 Packet Header (64 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// CreditCharge (2.2.1.1): credits this request consumes (0 on 2.0.2).
    pub credit_charge: u16,
    /// In responses: Status. In SMB 3.x requests: ChannelSequence (low 16
    /// bits) and Reserved; in 2.x requests: Status, set to 0.
    pub status: NtStatus,
    pub command: Command,
    /// CreditRequest in requests, CreditResponse in responses.
    pub credit: u16,
    pub flags: HeaderFlags,
    /// Offset from the start of this header to the next header of a
    /// compound, 8-byte aligned; 0 for the last (or only) message.
    pub next_command: u32,
    pub message_id: u64,
    pub ids: HeaderIds,
    pub session_id: u64,
    pub signature: [u8; 16],
}

impl Header {
    /// Decodes the header at the start of `msg`.
    pub fn decode(msg: &[u8]) -> Result<Header, DecodeError> {
        let mut r = Reader::new(msg);
        if r.array::<4>("ProtocolId")? != PROTOCOL_ID {
            return Err(DecodeError::InvalidValue { field: "ProtocolId" });
        }
        let structure_size = r.u16("StructureSize")?;
        if usize::from(structure_size) != HEADER_SIZE {
            return Err(DecodeError::StructureSize {
                structure: "SMB2 header",
                expected: 64,
                found: structure_size,
            });
        }
        let credit_charge = r.u16("CreditCharge")?;
        let status = NtStatus(r.u32("Status")?);
        let command = Command(r.u16("Command")?);
        let credit = r.u16("CreditRequest/CreditResponse")?;
        let flags = HeaderFlags(r.u32("Flags")?);
        let next_command = r.u32("NextCommand")?;
        let message_id = r.u64("MessageId")?;
        let ids = if flags.is_async() {
            HeaderIds::Async { async_id: r.u64("AsyncId")? }
        } else {
            HeaderIds::Sync { process_id: r.u32("Reserved")?, tree_id: r.u32("TreeId")? }
        };
        let session_id = r.u64("SessionId")?;
        let signature = r.array("Signature")?;
        Ok(Header {
            credit_charge,
            status,
            command,
            credit,
            flags,
            next_command,
            message_id,
            ids,
            session_id,
            signature,
        })
    }

    /// Appends the 64-byte header.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_bytes(&PROTOCOL_ID);
        out.put_u16(HEADER_SIZE as u16);
        out.put_u16(self.credit_charge);
        out.put_u32(self.status.0);
        out.put_u16(self.command.0);
        out.put_u16(self.credit);
        out.put_u32(self.flags.0);
        out.put_u32(self.next_command);
        out.put_u64(self.message_id);
        match self.ids {
            HeaderIds::Sync { process_id, tree_id } => {
                out.put_u32(process_id);
                out.put_u32(tree_id);
            }
            HeaderIds::Async { async_id } => out.put_u64(async_id),
        }
        out.put_u64(self.session_id);
        out.put_bytes(&self.signature);
    }

    /// TreeId of a SYNC header; `None` for ASYNC.
    pub fn tree_id(&self) -> Option<u32> {
        match self.ids {
            HeaderIds::Sync { tree_id, .. } => Some(tree_id),
            HeaderIds::Async { .. } => None,
        }
    }

    /// AsyncId of an ASYNC header; `None` for SYNC.
    pub fn async_id(&self) -> Option<u64> {
        match self.ids {
            HeaderIds::Async { async_id } => Some(async_id),
            HeaderIds::Sync { .. } => None,
        }
    }

    /// ChannelSequence of an SMB 3.x request (the low 16 bits of the Status
    /// field, MS-SMB2 2.2.1.2).
    pub fn channel_sequence(&self) -> u16 {
        (self.status.0 & 0xFFFF) as u16
    }

    /// A response header for this request (3.3.4.1): same command, message
    /// id, ids and session; SERVER_TO_REDIR set, RELATED kept, SIGNED and
    /// NextCommand cleared (the signer and compound writer set those).
    pub fn response(&self, status: NtStatus, credit_response: u16) -> Header {
        Header {
            credit_charge: self.credit_charge,
            status,
            command: self.command,
            credit: credit_response,
            flags: HeaderFlags(
                HeaderFlags::SERVER_TO_REDIR
                    | (self.flags.0
                        & (HeaderFlags::RELATED_OPERATIONS
                            | HeaderFlags::ASYNC_COMMAND
                            | HeaderFlags::PRIORITY_MASK)),
            ),
            next_command: 0,
            message_id: self.message_id,
            ids: self.ids,
            session_id: self.session_id,
            signature: [0; 16],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            credit_charge: 1,
            status: NtStatus::SUCCESS,
            command: Command::CREATE,
            credit: 10,
            flags: HeaderFlags(HeaderFlags::RELATED_OPERATIONS),
            next_command: 0x98,
            message_id: 0x11,
            ids: HeaderIds::Sync { process_id: 0xd0, tree_id: 0x0506_667c },
            session_id: 0xe531_afd3,
            signature: [0; 16],
        }
    }

    #[test]
    fn sync_and_async_round_trip() {
        let h = sample();
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out.len(), HEADER_SIZE);
        assert_eq!(Header::decode(&out), Ok(h));

        let mut a = h.response(NtStatus::PENDING, 1);
        a.flags.0 |= HeaderFlags::ASYNC_COMMAND;
        a.ids = HeaderIds::Async { async_id: 42 };
        out.clear();
        a.encode(&mut out);
        let back = Header::decode(&out).unwrap();
        assert_eq!(back.async_id(), Some(42));
        assert!(back.flags.is_response());
    }

    #[test]
    fn rejects_bad_protocol_and_size() {
        let mut out = Vec::new();
        sample().encode(&mut out);
        let mut bad = out.clone();
        bad[0] = 0xFF;
        assert!(Header::decode(&bad).is_err());
        bad = out.clone();
        bad[4] = 65;
        assert!(Header::decode(&bad).is_err());
        assert!(Header::decode(&out[..63]).is_err());
    }
}
