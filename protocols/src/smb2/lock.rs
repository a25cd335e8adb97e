//! MS-SMB2 2.2.26 / 2.2.27: SMB2 LOCK (byte-range locks).

use super::cursor::{body, decode_reserved4, encode_reserved4, len_u16, Reader, WireWrite};
use super::decode_error::DecodeError;
use super::FileId;

/// duet's limit on lock elements per request (Invariant 5). Windows sends
/// one; 64 KiB of credit would allow about 2700.
pub const MAX_LOCK_ELEMENTS: usize = 1024;

/// MS-SMB2 2.2.26.1 SMB2_LOCK_ELEMENT
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockElement {
    pub offset: u64,
    pub length: u64,
    pub flags: u32,
}

impl LockElement {
    pub const SHARED_LOCK: u32 = 0x0000_0001;
    pub const EXCLUSIVE_LOCK: u32 = 0x0000_0002;
    pub const UNLOCK: u32 = 0x0000_0004;
    pub const FAIL_IMMEDIATELY: u32 = 0x0000_0010;
    const SIZE: usize = 24;
}

/// MS-SMB2 2.2.26 SMB2 LOCK Request
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockRequest<'a> {
    /// LockSequenceNumber (low 4 bits) and LockSequenceIndex (high 28 bits),
    /// as one field since 2.0.2 calls all 32 bits Reserved.
    pub lock_sequence: u32,
    pub file_id: FileId,
    /// The LockCount elements, undecoded; iterate with [`LockRequest::locks`].
    locks: &'a [u8],
}

impl<'a> LockRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 48;

    /// Builds a request from its elements, serialised into `storage`.
    pub fn new(lock_sequence: u32, file_id: FileId, locks: &[LockElement], storage: &'a mut Vec<u8>) -> Self {
        storage.clear();
        for l in locks {
            storage.put_u64(l.offset);
            storage.put_u64(l.length);
            storage.put_u32(l.flags);
            storage.put_u32(0);
        }
        LockRequest { lock_sequence, file_id, locks: storage }
    }

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 LOCK Request", Self::STRUCTURE_SIZE)?;
        let count = usize::from(r.u16("LockCount")?);
        if count == 0 {
            // 3.3.5.14: LockCount 0 is STATUS_INVALID_PARAMETER.
            return Err(DecodeError::InvalidValue { field: "LockCount" });
        }
        if count > MAX_LOCK_ELEMENTS {
            return Err(DecodeError::LimitExceeded { field: "lock elements" });
        }
        let lock_sequence = r.u32("LockSequence")?;
        let file_id = FileId::read(&mut r)?;
        let locks = r.bytes(count * LockElement::SIZE, "Locks")?;
        Ok(LockRequest { lock_sequence, file_id, locks })
    }

    pub fn lock_count(&self) -> usize {
        self.locks.len() / LockElement::SIZE
    }

    pub fn locks(&self) -> impl Iterator<Item = LockElement> + 'a {
        self.locks.chunks_exact(LockElement::SIZE).map(|c| {
            let mut r = Reader::new(c);
            // chunks_exact yields exactly SIZE bytes: the reads cannot fail.
            LockElement {
                offset: r.u64("Offset").unwrap_or(0),
                length: r.u64("Length").unwrap_or(0),
                flags: r.u32("Flags").unwrap_or(0),
            }
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(len_u16(self.lock_count(), "LockCount"));
        out.put_u32(self.lock_sequence);
        self.file_id.write(out);
        out.put_bytes(self.locks);
    }
}

/// MS-SMB2 2.2.27 SMB2 LOCK Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockResponse;

impl LockResponse {
    pub const STRUCTURE_SIZE: u16 = 4;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        decode_reserved4(msg, "SMB2 LOCK Response").map(|()| LockResponse)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_reserved4(out);
    }
}
