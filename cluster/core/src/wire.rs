//! Primitives of the cluster's own wire format (raft log commands,
//! [`crate::command`]): unsigned LEB128 varints, zigzag varints for signed
//! values, length-prefixed bytes and UTF-8 strings, one-byte tags.
//!
//! The reader never trusts a length: every count is checked against the
//! bytes left before anything is allocated, and every error says where in
//! the input it happened.

/// Why bytes are not a valid encoding.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated at byte {at}: {what} needs more bytes")]
    Truncated { at: usize, what: &'static str },
    #[error("invalid {what} at byte {at}")]
    Invalid { at: usize, what: &'static str },
    #[error("unknown {what} tag {tag} at byte {at}")]
    UnknownTag { at: usize, what: &'static str, tag: u8 },
    #[error("{len} trailing bytes after the end at byte {at}")]
    Trailing { at: usize, len: usize },
}

/// Appends encoded values to a buffer. Encoding cannot fail.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer { buf: Vec::new() }
    }

    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }

    /// Unsigned LEB128: 7 bits a byte, low bits first, the high bit set on
    /// every byte but the last (at most 10 bytes for a u64).
    pub fn u64(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.buf.push(b);
                return;
            }
            self.buf.push(b | 0x80);
        }
    }

    pub fn u32(&mut self, v: u32) {
        self.u64(v as u64);
    }

    /// Zigzag (0, -1, 1, -2, ... as 0, 1, 2, 3, ...) then LEB128.
    pub fn i64(&mut self, v: i64) {
        self.u64(((v << 1) ^ (v >> 63)) as u64);
    }

    pub fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }

    /// Fixed-size bytes, no length.
    pub fn raw(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }
}

/// Reads encoded values from a slice.
pub struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Reader { b, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            len => Err(WireError::Trailing { at: self.pos, len }),
        }
    }

    pub fn invalid<T>(&self, at: usize, what: &'static str) -> Result<T, WireError> {
        Err(WireError::Invalid { at, what })
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        let v = *self.b.get(self.pos).ok_or(WireError::Truncated { at: self.pos, what })?;
        self.pos += 1;
        Ok(v)
    }

    /// A one-byte tag, for `what`; the caller matches it and reports an
    /// unknown one with [`Reader::unknown`].
    pub fn tag(&mut self, what: &'static str) -> Result<u8, WireError> {
        self.u8(what)
    }

    /// The error for an unknown tag just read.
    pub fn unknown<T>(&self, what: &'static str, tag: u8) -> Result<T, WireError> {
        Err(WireError::UnknownTag { at: self.pos - 1, what, tag })
    }

    pub fn bool(&mut self, what: &'static str) -> Result<bool, WireError> {
        let at = self.pos;
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => self.invalid(at, what),
        }
    }

    /// A LEB128 u64 in its shortest form (no padding bytes, no overflow).
    pub fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        let at = self.pos;
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8(what)?;
            let bits = (b & 0x7f) as u64;
            if i == 9 && b > 1 {
                return self.invalid(at, what); // more than 64 bits
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                if b == 0 && i > 0 {
                    return self.invalid(at, what); // not the shortest form
                }
                return Ok(v);
            }
        }
        self.invalid(at, what)
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        let at = self.pos;
        let v = self.u64(what)?;
        u32::try_from(v).or_else(|_| self.invalid(at, what))
    }

    pub fn i64(&mut self, what: &'static str) -> Result<i64, WireError> {
        let z = self.u64(what)?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    /// A count of elements that take at least one byte each: never more
    /// than the bytes left, so a hostile count cannot make us allocate.
    pub fn count(&mut self, what: &'static str) -> Result<usize, WireError> {
        let at = self.pos;
        let n = self.u64(what)?;
        if n > self.remaining() as u64 {
            return Err(WireError::Truncated { at, what });
        }
        Ok(n as usize)
    }

    pub fn raw(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated { at: self.pos, what });
        }
        let b: &'a [u8] = self.b;
        let s = &b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, WireError> {
        let at = self.pos;
        let n = self.u64(what)?;
        if n > self.remaining() as u64 {
            return Err(WireError::Truncated { at, what });
        }
        Ok(self.raw(n as usize, what)?.to_vec())
    }

    pub fn string(&mut self, what: &'static str) -> Result<String, WireError> {
        let at = self.pos;
        let b = self.bytes(what)?;
        String::from_utf8(b).or_else(|_| self.invalid(at, what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_their_edges() {
        for v in [0u64, 1, 127, 128, 255, 16383, 16384, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut w = Writer::new();
            w.u64(v);
            let mut r = Reader::new(&w.buf);
            assert_eq!(r.u64("v"), Ok(v));
            r.finish().unwrap();
        }
        for v in [0i64, 1, -1, 63, -64, 64, i64::MIN, i64::MAX] {
            let mut w = Writer::new();
            w.i64(v);
            let mut r = Reader::new(&w.buf);
            assert_eq!(r.i64("v"), Ok(v));
            r.finish().unwrap();
        }
    }

    #[test]
    fn non_canonical_and_overlong_varints_are_refused() {
        // 0 padded to two bytes.
        assert!(matches!(Reader::new(&[0x80, 0x00]).u64("v"), Err(WireError::Invalid { at: 0, .. })));
        // 11 bytes.
        let long = [0xffu8; 10];
        assert!(Reader::new(&long).u64("v").is_err());
        // 10th byte carrying more than the 64th bit.
        let mut over = [0xffu8; 10];
        over[9] = 0x02;
        assert!(matches!(Reader::new(&over).u64("v"), Err(WireError::Invalid { .. })));
        // Cut short.
        assert!(matches!(Reader::new(&[0x80]).u64("v"), Err(WireError::Truncated { at: 1, .. })));
    }

    #[test]
    fn lengths_are_checked_before_allocating() {
        let mut w = Writer::new();
        w.u64(u64::MAX);
        assert!(matches!(Reader::new(&w.buf).bytes("b"), Err(WireError::Truncated { .. })));
        assert!(matches!(Reader::new(&w.buf).count("c"), Err(WireError::Truncated { .. })));
        let mut w = Writer::new();
        w.bytes(&[0xff, 0xfe]);
        assert!(matches!(Reader::new(&w.buf).string("s"), Err(WireError::Invalid { at: 0, .. })));
        assert!(matches!(Reader::new(&[2]).bool("b"), Err(WireError::Invalid { .. })));
    }
}
