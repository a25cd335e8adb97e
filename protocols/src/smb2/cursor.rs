//! Bounds-checked little-endian reading and appending writing.
//!
//! Every read returns `Result`; nothing here indexes out of bounds or panics
//! on input. Writers append to a `Vec<u8>`; offsets are computed up front by
//! the encoders, never patched by seeking back.

use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;

/// A cursor over a borrowed buffer. Slices it returns borrow the buffer
/// (`'a`), so payloads are never copied.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// A reader positioned at `pos` (which may be past the end: the next
    /// read then fails).
    pub fn at(buf: &'a [u8], pos: usize) -> Self {
        Reader { buf, pos }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub fn bytes(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(len).ok_or(DecodeError::Truncated { field })?;
        let s = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated { field })?;
        self.pos = end;
        Ok(s)
    }

    /// Everything from the cursor to the end.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = self.buf.get(self.pos..).unwrap_or(&[]);
        self.pos = self.buf.len().max(self.pos);
        s
    }

    pub fn skip(&mut self, len: usize, field: &'static str) -> Result<(), DecodeError> {
        self.bytes(len, field).map(|_| ())
    }

    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let s = self.bytes(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }
}

/// Appending little-endian writes.
pub trait WireWrite {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_bytes(&mut self, v: &[u8]);
    fn put_zeros(&mut self, n: usize);
    /// Appends zeros until `(len - base)` is a multiple of `align`.
    fn pad_to(&mut self, base: usize, align: usize);
}

impl WireWrite for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_bytes(&mut self, v: &[u8]) {
        self.extend_from_slice(v);
    }
    fn put_zeros(&mut self, n: usize) {
        self.resize(self.len() + n, 0);
    }
    fn pad_to(&mut self, base: usize, align: usize) {
        let used = self.len().saturating_sub(base);
        self.put_zeros(pad_len(used, align));
    }
}

/// Bytes of padding that bring `len` to a multiple of `align` (a power of two).
pub const fn pad_len(len: usize, align: usize) -> usize {
    (align - (len % align)) % align
}

/// `len` rounded up to a multiple of `align`.
pub const fn align_up(len: usize, align: usize) -> usize {
    len + pad_len(len, align)
}

/// Converts a length to a u16 wire field. Encoders are fed by duet itself,
/// which bounds names and buffers far below 64 KiB; a larger one is a bug in
/// the caller, so this asserts rather than truncating silently.
pub fn len_u16(len: usize, field: &'static str) -> u16 {
    match u16::try_from(len) {
        Ok(v) => v,
        Err(_) => panic!("{field}: length {len} exceeds a 16-bit wire field"),
    }
}

/// Converts a length to a u32 wire field; see [`len_u16`].
pub fn len_u32(len: usize, field: &'static str) -> u32 {
    match u32::try_from(len) {
        Ok(v) => v,
        Err(_) => panic!("{field}: length {len} exceeds a 32-bit wire field"),
    }
}

/// Reads the 2-byte StructureSize at the start of a command body (byte 64 of
/// `msg`) and checks it. Returns a reader positioned after it.
pub fn body<'a>(
    msg: &'a [u8],
    structure: &'static str,
    expected: u16,
) -> Result<Reader<'a>, DecodeError> {
    let mut r = Reader::at(msg, HEADER_SIZE);
    let found = r.u16("StructureSize")?;
    if found != expected {
        return Err(DecodeError::StructureSize { structure, expected, found });
    }
    Ok(r)
}

/// A variable-length buffer named by an (offset, length) pair, both relative
/// to `base` (for MS-SMB2 command buffers: the start of the SMB2 header).
///
/// A zero length yields an empty slice whatever the offset says (senders
/// disagree on what an unused offset holds). Otherwise the buffer must start
/// at or after `fixed_end` (it may not overlap the header or the fixed part
/// of the structure) and end inside `buf`.
pub fn buffer_at<'a>(
    buf: &'a [u8],
    offset: usize,
    len: usize,
    fixed_end: usize,
    field: &'static str,
) -> Result<&'a [u8], DecodeError> {
    if len == 0 {
        return Ok(&[]);
    }
    if offset < fixed_end {
        return Err(DecodeError::BadBuffer { field });
    }
    let end = offset.checked_add(len).ok_or(DecodeError::BadBuffer { field })?;
    buf.get(offset..end).ok_or(DecodeError::BadBuffer { field })
}

/// A UTF-16LE string on the wire, or a Rust string to be written as one.
///
/// Decoders return `Wire` (borrowed, not converted); encoders accept either,
/// so a server can emit names straight from a `&str` without building an
/// intermediate UTF-16 buffer.
#[derive(Debug, Clone, Copy)]
pub enum Utf16<'a> {
    /// Raw UTF-16LE bytes (even length).
    Wire(&'a [u8]),
    /// A string to be encoded as UTF-16LE.
    Str(&'a str),
}

impl<'a> Utf16<'a> {
    pub const EMPTY: Utf16<'static> = Utf16::Wire(&[]);

    /// Checks that `bytes` has an even length and wraps it.
    pub fn from_wire(bytes: &'a [u8], field: &'static str) -> Result<Self, DecodeError> {
        if bytes.len() & 1 != 0 {
            return Err(DecodeError::InvalidValue { field });
        }
        Ok(Utf16::Wire(bytes))
    }

    /// Length in bytes once encoded.
    pub fn byte_len(&self) -> usize {
        match self {
            Utf16::Wire(b) => b.len(),
            Utf16::Str(s) => s.encode_utf16().count() * 2,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.byte_len() == 0
    }

    /// The UTF-16 code units.
    pub fn units(&self) -> impl Iterator<Item = u16> + 'a {
        let (wire, s): (&'a [u8], &'a str) = match *self {
            Utf16::Wire(b) => (b, ""),
            Utf16::Str(s) => (&[], s),
        };
        wire.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .chain(s.encode_utf16())
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Utf16::Wire(b) => out.extend_from_slice(b),
            Utf16::Str(s) => {
                for u in s.encode_utf16() {
                    out.extend_from_slice(&u.to_le_bytes());
                }
            }
        }
    }

    /// Decodes to a `String`; unpaired surrogates are an error.
    pub fn to_string_checked(&self) -> Result<String, DecodeError> {
        char::decode_utf16(self.units())
            .collect::<Result<String, _>>()
            .map_err(|_| DecodeError::InvalidValue { field: "UTF-16 string" })
    }

    pub fn to_string_lossy(&self) -> String {
        char::decode_utf16(self.units())
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect()
    }
}

impl PartialEq for Utf16<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.units().eq(other.units())
    }
}

impl Eq for Utf16<'_> {}

impl PartialEq<&str> for Utf16<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.units().eq(other.encode_utf16())
    }
}

/// Decodes a body that is StructureSize 4 followed by a 2-byte Reserved
/// field (ECHO, CANCEL, LOGOFF, TREE_DISCONNECT, FLUSH and LOCK responses).
pub fn decode_reserved4(msg: &[u8], structure: &'static str) -> Result<(), DecodeError> {
    let mut r = body(msg, structure, 4)?;
    r.u16("Reserved")?;
    Ok(())
}

/// Appends a StructureSize 4 body with a zero Reserved field.
pub fn encode_reserved4(out: &mut Vec<u8>) {
    out.put_u16(4);
    out.put_u16(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_fails_cleanly_past_the_end() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16("a"), Ok(0x0201));
        assert_eq!(r.u16("b"), Err(DecodeError::Truncated { field: "b" }));
        assert_eq!(r.bytes(usize::MAX, "c"), Err(DecodeError::Truncated { field: "c" }));
        let mut far = Reader::at(&[1], 10);
        assert!(far.u8("d").is_err());
        assert_eq!(far.rest(), &[] as &[u8]);
    }

    #[test]
    fn buffer_at_rejects_overlap_and_overflow() {
        let buf = [0u8; 100];
        assert!(buffer_at(&buf, 70, 10, 72, "x").is_err());
        assert!(buffer_at(&buf, 72, 29, 72, "x").is_err());
        assert!(buffer_at(&buf, usize::MAX, 2, 72, "x").is_err());
        assert_eq!(buffer_at(&buf, 0, 0, 72, "x"), Ok(&[] as &[u8]));
        assert_eq!(buffer_at(&buf, 72, 28, 72, "x").map(|b| b.len()), Ok(28));
    }

    #[test]
    fn utf16_compares_across_forms() {
        let wire = [b'a', 0, b'b', 0];
        assert_eq!(Utf16::Wire(&wire), Utf16::Str("ab"));
        assert!(Utf16::Wire(&wire) == "ab");
        assert_eq!(Utf16::Str("ab").byte_len(), 4);
        assert!(Utf16::from_wire(&wire[..3], "n").is_err());
    }
}
