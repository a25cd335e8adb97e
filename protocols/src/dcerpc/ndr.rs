//! NDR, the Network Data Representation transfer syntax (C706 chapter 14;
//! NDR 2.0, UUID 8a885d04-1ceb-11c9-9fe8-08002b104860), the 32-bit form
//! MS-RPCE 2.2.5 calls NDR20: every primitive is aligned to its size
//! relative to the start of the stub (14.2.2), integers are in the byte
//! order the PDU's data representation names (14.2.5), embedded and
//! top-level unique pointers are a 4-byte referent id (0 for NULL, 14.3.10
//! and 14.3.12.3) with the pointee deferred, and `[string] wchar_t*` is a
//! conformant varying array of UTF-16 code units with its terminating NUL
//! (14.3.3.5: maximum count, offset, actual count).
//!
//! The same bounds-checked [`Reader`] decodes the fixed fields of PDUs.

use super::{DecodeError, SyntaxId, Uuid};

/// A bounds-checked little- or big-endian reader; integers are aligned
/// to their size relative to the start of `buf` (the stub, or a PDU whose
/// fixed fields are naturally aligned).
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    le: bool,
}

impl<'a> Reader<'a> {
    /// `le`: the integer representation of the sender (NDR data
    /// representation format label, C706 14.1, byte 0 bit 4).
    pub fn new(buf: &'a [u8], le: bool) -> Reader<'a> {
        Reader { buf, pos: 0, le }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn little_endian(&self) -> bool {
        self.le
    }

    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError(what));
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// Skips to the next multiple of `n` (C706 14.2.2).
    pub fn align(&mut self, n: usize) -> Result<(), DecodeError> {
        let pad = (n - self.pos % n) % n;
        self.bytes(pad, "alignment padding").map(|_| ())
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.bytes(1, what)?[0])
    }

    /// An aligned u16 (C706 14.2.2).
    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.align(2)?;
        let b: [u8; 2] = self
            .bytes(2, what)?
            .try_into()
            .map_err(|_| DecodeError(what))?;
        Ok(if self.le {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        })
    }

    /// An aligned u32 (C706 14.2.2).
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.align(4)?;
        let b: [u8; 4] = self
            .bytes(4, what)?
            .try_into()
            .map_err(|_| DecodeError(what))?;
        Ok(if self.le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    }

    /// A UUID (C706 appendix A), normalised to the little-endian image.
    pub fn uuid(&mut self, what: &'static str) -> Result<Uuid, DecodeError> {
        let b: [u8; 16] = self
            .bytes(16, what)?
            .try_into()
            .map_err(|_| DecodeError(what))?;
        let u = Uuid(b);
        Ok(if self.le { u } else { u.swapped() })
    }

    /// A `p_syntax_id_t` (C706 12.6.3.1): UUID then u32 version.
    pub fn syntax_id(&mut self, what: &'static str) -> Result<SyntaxId, DecodeError> {
        let uuid = self.uuid(what)?;
        let version = self.u32(what)?;
        Ok(SyntaxId { uuid, version })
    }

    /// An aligned 4-byte referent id of a unique pointer (C706 14.3.10):
    /// whether the pointee follows.
    pub fn unique_ptr(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        self.align(4)?;
        Ok(self.u32(what)? != 0)
    }

    /// A `[string] wchar_t*` pointee: a conformant varying array of UTF-16
    /// units (C706 14.3.3.5 / 14.3.4.3), NUL-terminated; returns the text
    /// without the NUL (lossy for unpaired surrogates).
    pub fn wstring(&mut self, what: &'static str) -> Result<String, DecodeError> {
        self.align(4)?;
        let max = self.u32(what)? as usize;
        let offset = self.u32(what)? as usize;
        let actual = self.u32(what)? as usize;
        if offset != 0 || actual > max || actual == 0 {
            return Err(DecodeError(what));
        }
        let Some(len) = actual.checked_mul(2) else {
            return Err(DecodeError(what));
        };
        let raw = self.bytes(len, what)?;
        let le = self.le;
        let mut units: Vec<u16> = raw
            .chunks_exact(2)
            .map(|c| {
                if le {
                    u16::from_le_bytes([c[0], c[1]])
                } else {
                    u16::from_be_bytes([c[0], c[1]])
                }
            })
            .collect();
        // [string] arrays carry their terminator.
        if units.pop() != Some(0) {
            return Err(DecodeError(what));
        }
        Ok(String::from_utf16_lossy(&units))
    }
}

/// An NDR writer: little-endian, ASCII, IEEE (the data representation
/// 0x10 0x00 0x00 0x00 duet puts in every PDU it sends).
#[derive(Debug, Clone)]
pub struct Writer {
    pub out: Vec<u8>,
    next_referent: u32,
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new()
    }
}

impl Writer {
    /// Referent ids are arbitrary non-zero values (14.3.10); duet numbers
    /// them from 0x00020000 in steps of 4, as Samba and Windows do.
    pub const FIRST_REFERENT: u32 = 0x0002_0000;

    pub fn new() -> Writer {
        Writer::with_referents(Self::FIRST_REFERENT)
    }

    pub fn with_referents(first: u32) -> Writer {
        Writer {
            out: Vec::new(),
            next_referent: first.max(1),
        }
    }

    pub fn align(&mut self, n: usize) {
        while self.out.len() % n != 0 {
            self.out.push(0);
        }
    }

    pub fn u8(&mut self, v: u8) {
        self.out.push(v);
    }

    pub fn u16(&mut self, v: u16) {
        self.align(2);
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.align(4);
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    /// A unique pointer: a fresh referent id when `present`, else NULL.
    pub fn unique_ptr(&mut self, present: bool) {
        if present {
            let r = self.next_referent;
            self.next_referent = self.next_referent.wrapping_add(4).max(4);
            self.u32(r);
        } else {
            self.u32(0);
        }
    }

    /// A `[string] wchar_t*` pointee with its NUL (14.3.4.3).
    pub fn wstring(&mut self, s: &str) {
        let units: Vec<u16> = s.encode_utf16().chain(std::iter::once(0)).collect();
        let n = units.len() as u32;
        self.u32(n);
        self.u32(0);
        self.u32(n);
        for u in units {
            self.out.extend_from_slice(&u.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wstrings_round_trip_and_align() {
        let mut w = Writer::new();
        w.u8(7);
        w.wstring("IPC$");
        w.unique_ptr(true);
        w.unique_ptr(false);
        w.unique_ptr(true);
        let b = w.out.clone();
        // u8, 3 pad, max 5, offset 0, actual 5, 10 bytes, 2 pad, pointers.
        assert_eq!(b.len(), 4 + 12 + 10 + 2 + 12);
        let mut r = Reader::new(&b, true);
        assert_eq!(r.u8("x").unwrap(), 7);
        assert_eq!(r.wstring("s").unwrap(), "IPC$");
        assert!(r.unique_ptr("p").unwrap());
        assert!(!r.unique_ptr("p").unwrap());
        assert_eq!(&b[b.len() - 4..], &0x0002_0004u32.to_le_bytes());
    }

    #[test]
    fn hostile_strings_are_refused() {
        for bad in [
            // actual > max
            [2u32, 0, 3],
            // non-zero offset
            [3, 1, 3],
            // huge actual count
            [u32::MAX, 0, u32::MAX],
            // zero-length (no terminator)
            [0, 0, 0],
        ] {
            let mut b = Vec::new();
            for v in bad {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&[0x41, 0, 0x42, 0, 0, 0]);
            assert!(Reader::new(&b, true).wstring("s").is_err(), "{bad:?}");
        }
        // Missing terminator.
        let mut b = Vec::new();
        for v in [2u32, 0, 2] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&[0x41, 0, 0x42, 0]);
        assert!(Reader::new(&b, true).wstring("s").is_err());
    }

    #[test]
    fn big_endian_integers() {
        let b = [0, 0, 0, 5, 0, 7];
        let mut r = Reader::new(&b, false);
        assert_eq!(r.u32("a").unwrap(), 5);
        assert_eq!(r.u16("b").unwrap(), 7);
        assert!(r.u8("c").is_err());
    }
}
