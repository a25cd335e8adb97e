//! MS-SMB2 2.2.23 / 2.2.24 / 2.2.25: SMB2 OPLOCK_BREAK, used for both oplock
//! and lease breaks: the server's notification, the client's
//! acknowledgment, and the server's response to it. Which structure a body
//! holds is told by its StructureSize (24 oplock, 44 lease notification,
//! 36 lease acknowledgment/response).

use super::cursor::{Reader, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;
use super::FileId;

/// MS-SMB2 2.2.23.1 Oplock Break Notification, 2.2.24.1 Oplock Break
/// Acknowledgment and 2.2.25.1 Oplock Break Response: one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OplockBreak {
    /// SMB2_OPLOCK_LEVEL_NONE (0), II (1), EXCLUSIVE (8), BATCH (9).
    pub oplock_level: u8,
    pub file_id: FileId,
}

impl OplockBreak {
    pub const STRUCTURE_SIZE: u16 = 24;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = super::cursor::body(msg, "SMB2 OPLOCK_BREAK", Self::STRUCTURE_SIZE)?;
        Self::decode_after_size(&mut r)
    }

    fn decode_after_size(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let oplock_level = r.u8("OplockLevel")?;
        r.u8("Reserved")?;
        r.u32("Reserved2")?;
        Ok(OplockBreak { oplock_level, file_id: FileId::read(r)? })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.oplock_level);
        out.put_u8(0);
        out.put_u32(0);
        self.file_id.write(out);
    }
}

/// MS-SMB2 2.2.23.2 Lease Break Notification
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseBreakNotification {
    pub new_epoch: u16,
    /// SMB2_NOTIFY_BREAK_LEASE_FLAG_ACK_REQUIRED (0x01).
    pub flags: u32,
    pub lease_key: [u8; 16],
    pub current_lease_state: u32,
    pub new_lease_state: u32,
    pub break_reason: u32,
    pub access_mask_hint: u32,
    pub share_mask_hint: u32,
}

impl LeaseBreakNotification {
    pub const STRUCTURE_SIZE: u16 = 44;
    pub const ACK_REQUIRED: u32 = 0x01;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = super::cursor::body(msg, "SMB2 Lease Break Notification", Self::STRUCTURE_SIZE)?;
        Self::decode_after_size(&mut r)
    }

    fn decode_after_size(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(LeaseBreakNotification {
            new_epoch: r.u16("NewEpoch")?,
            flags: r.u32("Flags")?,
            lease_key: r.array("LeaseKey")?,
            current_lease_state: r.u32("CurrentLeaseState")?,
            new_lease_state: r.u32("NewLeaseState")?,
            break_reason: r.u32("BreakReason")?,
            access_mask_hint: r.u32("AccessMaskHint")?,
            share_mask_hint: r.u32("ShareMaskHint")?,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(self.new_epoch);
        out.put_u32(self.flags);
        out.put_bytes(&self.lease_key);
        out.put_u32(self.current_lease_state);
        out.put_u32(self.new_lease_state);
        out.put_u32(self.break_reason);
        out.put_u32(self.access_mask_hint);
        out.put_u32(self.share_mask_hint);
    }
}

/// MS-SMB2 2.2.24.2 Lease Break Acknowledgment and 2.2.25.2 Lease Break
/// Response: one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseBreakAck {
    pub flags: u32,
    pub lease_key: [u8; 16],
    pub lease_state: u32,
    pub lease_duration: u64,
}

impl LeaseBreakAck {
    pub const STRUCTURE_SIZE: u16 = 36;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = super::cursor::body(msg, "SMB2 Lease Break Acknowledgment", Self::STRUCTURE_SIZE)?;
        Self::decode_after_size(&mut r)
    }

    fn decode_after_size(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.u16("Reserved")?;
        Ok(LeaseBreakAck {
            flags: r.u32("Flags")?,
            lease_key: r.array("LeaseKey")?,
            lease_state: r.u32("LeaseState")?,
            lease_duration: r.u64("LeaseDuration")?,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(0);
        out.put_u32(self.flags);
        out.put_bytes(&self.lease_key);
        out.put_u32(self.lease_state);
        out.put_u64(self.lease_duration);
    }
}

/// Any OPLOCK_BREAK body, told apart by StructureSize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OplockBreakMessage {
    Oplock(OplockBreak),
    LeaseNotification(LeaseBreakNotification),
    /// A lease break acknowledgment (request) or response.
    LeaseAck(LeaseBreakAck),
}

impl OplockBreakMessage {
    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::at(msg, HEADER_SIZE);
        match r.u16("StructureSize")? {
            OplockBreak::STRUCTURE_SIZE => OplockBreak::decode_after_size(&mut r).map(Self::Oplock),
            LeaseBreakNotification::STRUCTURE_SIZE => {
                LeaseBreakNotification::decode_after_size(&mut r).map(Self::LeaseNotification)
            }
            LeaseBreakAck::STRUCTURE_SIZE => LeaseBreakAck::decode_after_size(&mut r).map(Self::LeaseAck),
            found => Err(DecodeError::StructureSize { structure: "SMB2 OPLOCK_BREAK", expected: 24, found }),
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Oplock(m) => m.encode(out),
            Self::LeaseNotification(m) => m.encode(out),
            Self::LeaseAck(m) => m.encode(out),
        }
    }
}
