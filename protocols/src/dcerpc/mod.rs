//! DCE/RPC over SMB named pipes (connection-oriented RPC, "ncacn_np"),
//! sans-I/O: C706 (DCE 1.1: Remote Procedure Call) chapter 12 for the PDUs,
//! chapter 14 for NDR, with the MS-RPCE extensions (2.2.2 PDU extensions,
//! 3.3.1.5.3 bind time feature negotiation), and the two interfaces duet
//! serves: srvsvc (MS-SRVS) NetrShareEnum / NetrShareGetInfo, which is what
//! `smbclient -L` and the Windows share browser call, and lsarpc (MS-LSAT /
//! MS-LSAD: SIDs to names and back, for Explorer's Security tab and
//! `smbcacls`).
//!
//! Code map: `header` (the common PDU header, 12.6.3.1), `bind` (BIND,
//! ALTER_CONTEXT and their ACK/NAK, 12.6.4.3-12.6.4.5), `request`
//! (REQUEST / RESPONSE, 12.6.4.9 / 12.6.4.10), `fault` (FAULT, 12.6.4.7,
//! and the status codes of appendix E / MS-RPCE 2.2.2.x), `ndr` (NDR
//! transfer syntax 8a885d04-1ceb-11c9-9fe8-08002b104860 v2: primitive
//! alignment, unique pointers, conformant varying strings), `srvsvc`
//! (MS-SRVS 3.1.4.8 / 3.1.4.10), `lsarpc` (MS-LSAT LsarLookupSids /
//! LsarLookupNames and the MS-LSAD policy calls they need), `endpoint`
//! (one pipe's server side: bytes written in, fragment reassembly,
//! presentation contexts, calls, fragmented responses out, one message
//! per PDU).
//!
//! Architecture Invariant: hostile input never panics; a malformed PDU is
//! answered with a FAULT (or a BIND_NAK), never with a crash.

pub mod bind;
pub mod endpoint;
pub mod fault;
pub mod header;
pub mod lsarpc;
pub mod ndr;
pub mod request;
pub mod srvsvc;

pub use endpoint::{Endpoint, Service};
pub use header::{CommonHeader, PacketType};

/// Why a PDU or a stub could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed DCE/RPC data: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

/// A UUID in its DCE wire form (C706 appendix A): time_low (u32),
/// time_mid (u16), time_hi_and_version (u16) in the sender's integer byte
/// order, then eight bytes as they are. Stored here as the little-endian
/// wire image, which is how every known client sends it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// Parses the text form "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" at
    /// compile time (used for the constants below; panics on a bad literal,
    /// which is a build-time bug, never input).
    pub const fn parse(s: &str) -> Uuid {
        const fn hex(c: u8) -> u8 {
            match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => panic!("bad hex digit in UUID literal"),
            }
        }
        let b = s.as_bytes();
        assert!(b.len() == 36, "UUID literal length");
        let mut raw = [0u8; 16];
        let mut i = 0;
        let mut n = 0;
        while i < 36 {
            if b[i] == b'-' {
                i += 1;
                continue;
            }
            raw[n] = hex(b[i]) << 4 | hex(b[i + 1]);
            n += 1;
            i += 2;
        }
        // time_low, time_mid, time_hi_and_version go little-endian.
        let mut out = raw;
        out[0] = raw[3];
        out[1] = raw[2];
        out[2] = raw[1];
        out[3] = raw[0];
        out[4] = raw[5];
        out[5] = raw[4];
        out[6] = raw[7];
        out[7] = raw[6];
        Uuid(out)
    }

    /// The UUID as a big-endian-order image of the first three fields
    /// (what a big-endian sender puts on the wire), for byte-order
    /// independent comparison.
    pub fn swapped(&self) -> Uuid {
        let r = self.0;
        let mut out = r;
        out[..4].copy_from_slice(&[r[3], r[2], r[1], r[0]]);
        out[4..6].copy_from_slice(&[r[5], r[4]]);
        out[6..8].copy_from_slice(&[r[7], r[6]]);
        Uuid(out)
    }
}

impl std::fmt::Debug for Uuid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-",
            b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9]
        )?;
        for x in &b[10..] {
            write!(f, "{x:02x}")?;
        }
        Ok(())
    }
}

/// A presentation syntax identifier, `p_syntax_id_t` (C706 12.6.3.1): an
/// interface or transfer syntax UUID with its version (major in the low
/// 16 bits, minor in the high 16 bits of `version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyntaxId {
    pub uuid: Uuid,
    pub version: u32,
}

impl SyntaxId {
    pub const SIZE: usize = 20;

    pub fn major(&self) -> u16 {
        self.version as u16
    }

    pub fn minor(&self) -> u16 {
        (self.version >> 16) as u16
    }
}

/// NDR (32-bit) transfer syntax 8a885d04-1ceb-11c9-9fe8-08002b104860 v2
/// (C706 appendix I / MS-RPCE 2.2.4.12).
pub const NDR32: SyntaxId = SyntaxId {
    uuid: Uuid::parse("8a885d04-1ceb-11c9-9fe8-08002b104860"),
    version: 2,
};

/// NDR64 transfer syntax 71710533-beba-4937-8319-b5dbef9ccc36 v1
/// (MS-RPCE 2.2.5); duet does not speak it and rejects contexts using it.
pub const NDR64: SyntaxId = SyntaxId {
    uuid: Uuid::parse("71710533-beba-4937-8319-b5dbef9ccc36"),
    version: 1,
};

/// Bind time feature negotiation (MS-RPCE 3.3.1.5.3): a transfer syntax
/// whose UUID starts with 6cb71c2c-9812-4540 and whose last eight bytes
/// are the feature bitmask (little-endian in the first two of them).
pub const BIND_TIME_FEATURE_PREFIX: [u8; 8] = [0x2c, 0x1c, 0xb7, 0x6c, 0x12, 0x98, 0x40, 0x45];

/// The srvsvc interface 4b324fc8-1670-01d3-1278-5a47bf6ee188 v3.0 (MS-SRVS
/// 1.9).
pub const SRVSVC: SyntaxId = SyntaxId {
    uuid: Uuid::parse("4b324fc8-1670-01d3-1278-5a47bf6ee188"),
    version: 3,
};

/// The lsarpc interface 12345778-1234-abcd-ef00-0123456789ab v0.0
/// (MS-LSAT 1.9 / MS-LSAD 1.9), served on `\PIPE\lsarpc`.
pub const LSARPC: SyntaxId = SyntaxId {
    uuid: Uuid::parse("12345778-1234-abcd-ef00-0123456789ab"),
    version: 0,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_literals_have_the_wire_layout() {
        // The NDR transfer syntax as smbclient sends it in its BIND.
        assert_eq!(
            NDR32.uuid.0,
            [
                0x04, 0x5d, 0x88, 0x8a, 0xeb, 0x1c, 0xc9, 0x11, 0x9f, 0xe8, 0x08, 0x00, 0x2b, 0x10,
                0x48, 0x60
            ]
        );
        assert_eq!(
            format!("{:?}", SRVSVC.uuid),
            "4b324fc8-1670-01d3-1278-5a47bf6ee188"
        );
        assert_eq!(SRVSVC.uuid.swapped().swapped(), SRVSVC.uuid);
    }
}
