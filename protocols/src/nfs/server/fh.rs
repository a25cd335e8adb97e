//! File handles: opaque to clients, versioned, and checked.
//!
//! Layout (28 bytes, fits NFSv3's 64 and NFSv4's 128):
//!
//! | bytes | content |
//! |---|---|
//! | 0 | magic `0xD7` |
//! | 1 | version (1) |
//! | 2 | kind: 0 an object of an export, 1 the NFSv4 pseudo-root |
//! | 3 | reserved, 0 |
//! | 4..12 | the export's fsid (big-endian) |
//! | 12..20 | the duet [`NodeId`] (big-endian) |
//! | 20..28 | SipHash-2-4 of bytes 0..20 under the server's handle key |
//!
//! NodeIds are never reused and the key is stable (the appliance derives it
//! from its cluster identity, not from the boot), so a handle stays valid
//! across restarts and names exactly one object forever. A handle that is
//! the wrong length, has another magic/version/kind or fails the check is
//! foreign: NFS3ERR_BADHANDLE / NFS4ERR_BADHANDLE. A good handle whose
//! export is gone, or whose object was removed, is STALE.
//!
//! The check keeps clients from forging handles for objects they never
//! looked up; it does not by itself confine a handle to its export's
//! subtree (an object reached by a forged id cannot be named, because the
//! key is secret).

use duet_fs::NodeId;

pub const FH_LEN: usize = 28;
const MAGIC: u8 = 0xD7;
const VERSION: u8 = 1;
const KIND_OBJECT: u8 = 0;
const KIND_PSEUDO: u8 = 1;

/// What a handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileHandle {
    /// The NFSv4 pseudo-root that lists the exports.
    Pseudo,
    /// An object of the export with `fsid`.
    Object { fsid: u64, id: NodeId },
}

/// A handle that is not one of ours (or was tampered with).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadHandle;

impl FileHandle {
    /// The wire form under `key`.
    pub fn encode(&self, key: u64) -> [u8; FH_LEN] {
        let mut b = [0u8; FH_LEN];
        b[0] = MAGIC;
        b[1] = VERSION;
        match *self {
            FileHandle::Pseudo => b[2] = KIND_PSEUDO,
            FileHandle::Object { fsid, id } => {
                b[2] = KIND_OBJECT;
                b[4..12].copy_from_slice(&fsid.to_be_bytes());
                b[12..20].copy_from_slice(&id.to_be_bytes());
            }
        }
        let check = siphash24(key, 0x6475_6574_6668_0001, &b[..20]);
        b[20..28].copy_from_slice(&check.to_be_bytes());
        b
    }

    /// Parses and checks a handle received from a client.
    pub fn decode(key: u64, bytes: &[u8]) -> Result<FileHandle, BadHandle> {
        let b: &[u8; FH_LEN] = bytes.try_into().map_err(|_| BadHandle)?;
        if b[0] != MAGIC || b[1] != VERSION || b[3] != 0 {
            return Err(BadHandle);
        }
        let check = u64::from_be_bytes(b[20..28].try_into().map_err(|_| BadHandle)?);
        if check != siphash24(key, 0x6475_6574_6668_0001, &b[..20]) {
            return Err(BadHandle);
        }
        let fsid = u64::from_be_bytes(b[4..12].try_into().map_err(|_| BadHandle)?);
        let id = u64::from_be_bytes(b[12..20].try_into().map_err(|_| BadHandle)?);
        match b[2] {
            KIND_PSEUDO if fsid == 0 && id == 0 => Ok(FileHandle::Pseudo),
            KIND_OBJECT => Ok(FileHandle::Object { fsid, id }),
            _ => Err(BadHandle),
        }
    }
}

/// SipHash-2-4 (Aumasson and Bernstein) with the 128-bit key (k0, k1).
/// Written out so that handles do not depend on std's unspecified hasher.
pub(crate) fn siphash24(k0: u64, k1: u64, data: &[u8]) -> u64 {
    let mut v0 = k0 ^ 0x736f_6d65_7073_6575;
    let mut v1 = k1 ^ 0x646f_7261_6e64_6f6d;
    let mut v2 = k0 ^ 0x6c79_6765_6e65_7261;
    let mut v3 = k1 ^ 0x7465_6462_7974_6573;
    fn round(v0: &mut u64, v1: &mut u64, v2: &mut u64, v3: &mut u64) {
        *v0 = v0.wrapping_add(*v1);
        *v1 = v1.rotate_left(13);
        *v1 ^= *v0;
        *v0 = v0.rotate_left(32);
        *v2 = v2.wrapping_add(*v3);
        *v3 = v3.rotate_left(16);
        *v3 ^= *v2;
        *v0 = v0.wrapping_add(*v3);
        *v3 = v3.rotate_left(21);
        *v3 ^= *v0;
        *v2 = v2.wrapping_add(*v1);
        *v1 = v1.rotate_left(17);
        *v1 ^= *v2;
        *v2 = v2.rotate_left(32);
    }
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        let m = u64::from_le_bytes(a);
        v3 ^= m;
        round(&mut v0, &mut v1, &mut v2, &mut v3);
        round(&mut v0, &mut v1, &mut v2, &mut v3);
        v0 ^= m;
    }
    let rest = chunks.remainder();
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    let m = u64::from_le_bytes(last) | ((data.len() as u64 & 0xff) << 56);
    v3 ^= m;
    round(&mut v0, &mut v1, &mut v2, &mut v3);
    round(&mut v0, &mut v1, &mut v2, &mut v3);
    v0 ^= m;
    v2 ^= 0xff;
    for _ in 0..4 {
        round(&mut v0, &mut v1, &mut v2, &mut v3);
    }
    v0 ^ v1 ^ v2 ^ v3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_reference_vector() {
        // The SipHash paper's test: key 00..0f, message 00..0e.
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0u8..15).collect();
        assert_eq!(siphash24(k0, k1, &msg), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn handles_round_trip_and_reject_tampering() {
        let fh = FileHandle::Object { fsid: 7, id: 1234 };
        let b = fh.encode(99);
        assert_eq!(FileHandle::decode(99, &b), Ok(fh));
        assert_eq!(FileHandle::decode(98, &b), Err(BadHandle));
        let mut t = b;
        t[19] ^= 1;
        assert_eq!(FileHandle::decode(99, &t), Err(BadHandle));
        assert_eq!(FileHandle::decode(99, &b[..27]), Err(BadHandle));
        assert_eq!(FileHandle::decode(99, &[]), Err(BadHandle));
        let p = FileHandle::Pseudo.encode(99);
        assert_eq!(FileHandle::decode(99, &p), Ok(FileHandle::Pseudo));
    }
}
