//! XDR, the External Data Representation (RFC 4506), sans-I/O.
//!
//! The decoder reads from a borrowed `&'a [u8]`; variable-length opaque data
//! and strings come back as sub-slices of the input, so READ/WRITE payloads are
//! never copied. Every variable-length item has a bound that the caller states,
//! and no allocation is sized by an untrusted count before that count has been
//! checked against both its bound and the bytes actually remaining.
//!
//! Architecture Invariant: nothing here panics on any input. Indexing goes
//! through `slice::get`, lengths through checked arithmetic.

use std::fmt;

/// Why a decode failed. Each variant says enough for the server to pick the
/// protocol's answer: [`XdrError::rpc_garbage_args`] at the RPC layer,
/// [`XdrError::nfs4_status`] inside a COMPOUND, [`XdrError::nfs3_status`] for
/// NFSv3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XdrError {
    /// The input ended before the item was complete (RFC 4506 section 3:
    /// every item occupies a multiple of four bytes).
    Truncated { needed: usize, remaining: usize },
    /// A variable-length item (RFC 4506 4.10-4.13) declared a length or count
    /// above the bound this decoder allows for it.
    TooLong {
        what: &'static str,
        len: u64,
        max: u64,
    },
    /// A file name component longer than its bound: NFS3ERR_NAMETOOLONG /
    /// NFS4ERR_NAMETOOLONG rather than a garbage-arguments answer.
    NameTooLong { len: u64, max: u64 },
    /// An enum value or union discriminant outside the declared set
    /// (RFC 4506 4.3, 4.15).
    BadDiscriminant { what: &'static str, value: u32 },
    /// A boolean other than 0 or 1 (RFC 4506 4.4).
    BadBool(u32),
    /// Bytes were left over after a complete message.
    TrailingBytes(usize),
    /// An fattr4 bitmap names an attribute this codec cannot parse
    /// (RFC 8881 5.5 / 15.1.15.1: NFS4ERR_ATTRNOTSUPP).
    AttrNotSupported(u32),
    /// A COMPOUND carries more operations than the configured bound
    /// (RFC 8881 2.10.6.4 and 15.1: NFS4ERR_TOO_MANY_OPS; RESOURCE in v4.0).
    TooManyOps { count: u32, max: u32 },
    /// A structural rule beyond XDR itself was broken (for example fattr4
    /// attr_vals longer than its attributes).
    Invalid(&'static str),
}

impl XdrError {
    /// Whether the call is answered at the RPC layer with accept_stat
    /// GARBAGE_ARGS (RFC 5531 section 9: the arguments cannot be decoded)
    /// rather than by the procedure with its own status. Malformed XDR is
    /// garbage; a well-formed argument that breaks a protocol bound is the
    /// procedure's error: a name over its length (NFS3ERR_NAMETOOLONG,
    /// RFC 1813 2.6; NFS4ERR_NAMETOOLONG), an attribute the codec cannot
    /// parse (NFS4ERR_ATTRNOTSUPP, RFC 8881 15.1.15.1) and too many COMPOUND
    /// operations (NFS4ERR_TOO_MANY_OPS, RFC 8881 15.1.10.7).
    pub fn rpc_garbage_args(&self) -> bool {
        !matches!(
            self,
            XdrError::NameTooLong { .. }
                | XdrError::AttrNotSupported(_)
                | XdrError::TooManyOps { .. }
        )
    }

    /// The nfsstat3 (RFC 1813 2.6) that answers an NFSv3 call whose
    /// arguments failed to decode with this error.
    pub fn nfs3_status(&self) -> crate::nfs::nfs3::Nfsstat3 {
        use crate::nfs::nfs3::Nfsstat3;
        match self {
            XdrError::NameTooLong { .. } => Nfsstat3::NAMETOOLONG,
            _ => Nfsstat3::INVAL,
        }
    }

    /// The nfsstat4 (RFC 8881 15.1) for an operation whose arguments failed
    /// to decode with this error.
    pub fn nfs4_status(&self) -> crate::nfs::nfs4::Nfsstat4 {
        use crate::nfs::nfs4::Nfsstat4;
        match self {
            XdrError::NameTooLong { .. } => Nfsstat4::NAMETOOLONG,
            XdrError::AttrNotSupported(_) => Nfsstat4::ATTRNOTSUPP,
            XdrError::TooManyOps { .. } => Nfsstat4::TOO_MANY_OPS,
            _ => Nfsstat4::BADXDR,
        }
    }
}

impl fmt::Display for XdrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XdrError::Truncated { needed, remaining } => {
                write!(
                    f,
                    "xdr: truncated, needed {needed} bytes, {remaining} remaining"
                )
            }
            XdrError::TooLong { what, len, max } => {
                write!(f, "xdr: {what} length {len} exceeds bound {max}")
            }
            XdrError::NameTooLong { len, max } => {
                write!(f, "xdr: name length {len} exceeds bound {max}")
            }
            XdrError::BadDiscriminant { what, value } => {
                write!(f, "xdr: bad {what} value {value}")
            }
            XdrError::BadBool(v) => write!(f, "xdr: bad boolean {v}"),
            XdrError::TrailingBytes(n) => write!(f, "xdr: {n} trailing bytes"),
            XdrError::AttrNotSupported(a) => write!(f, "xdr: attribute {a} not supported"),
            XdrError::TooManyOps { count, max } => {
                write!(f, "xdr: compound has {count} operations, bound {max}")
            }
            XdrError::Invalid(why) => write!(f, "xdr: invalid: {why}"),
        }
    }
}

impl std::error::Error for XdrError {}

/// Bytes of zero padding after `len` bytes of opaque data (RFC 4506 4.9).
pub fn pad_len(len: usize) -> usize {
    (4 - (len % 4)) % 4
}

/// A cursor over XDR input (RFC 4506). Cheap to copy for look-ahead.
#[derive(Debug, Clone, Copy)]
pub struct XdrReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> XdrReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        XdrReader { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Offset of the next byte, from the start of the input.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The unconsumed input, without consuming it.
    pub fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    /// Fails with [`XdrError::TrailingBytes`] unless all input was consumed.
    pub fn finish(&self) -> Result<(), XdrError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(XdrError::TrailingBytes(n)),
        }
    }

    /// Takes exactly `n` raw bytes (no padding).
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        let remaining = self.remaining();
        let end = self.pos.checked_add(n).ok_or(XdrError::Truncated {
            needed: n,
            remaining,
        })?;
        let bytes = self.buf.get(self.pos..end).ok_or(XdrError::Truncated {
            needed: n,
            remaining,
        })?;
        self.pos = end;
        Ok(bytes)
    }

    /// RFC 4506 4.2: unsigned integer.
    pub fn get_u32(&mut self) -> Result<u32, XdrError> {
        let b = self.take(4)?;
        let mut a = [0u8; 4];
        a.copy_from_slice(b);
        Ok(u32::from_be_bytes(a))
    }

    /// RFC 4506 4.1: integer.
    pub fn get_i32(&mut self) -> Result<i32, XdrError> {
        Ok(self.get_u32()? as i32)
    }

    /// RFC 4506 4.5: unsigned hyper integer.
    pub fn get_u64(&mut self) -> Result<u64, XdrError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// RFC 4506 4.5: hyper integer.
    pub fn get_i64(&mut self) -> Result<i64, XdrError> {
        Ok(self.get_u64()? as i64)
    }

    /// RFC 4506 4.4: boolean, strictly 0 or 1.
    pub fn get_bool(&mut self) -> Result<bool, XdrError> {
        match self.get_u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(XdrError::BadBool(v)),
        }
    }

    /// RFC 4506 4.9: fixed-length opaque data of `n` bytes plus padding.
    /// Padding bytes are skipped without checking that they are zero, as
    /// common servers do.
    pub fn get_opaque_fixed(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        let data = self.take(n)?;
        self.take(pad_len(n))?;
        Ok(data)
    }

    /// RFC 4506 4.9 into a fixed array.
    pub fn get_array_fixed<const N: usize>(&mut self) -> Result<[u8; N], XdrError> {
        let data = self.get_opaque_fixed(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(data);
        Ok(a)
    }

    /// RFC 4506 4.10: variable-length opaque data `opaque x<max>`, borrowed.
    pub fn get_opaque(&mut self, max: u32, what: &'static str) -> Result<&'a [u8], XdrError> {
        let len = self.get_u32()?;
        if len > max {
            return Err(XdrError::TooLong {
                what,
                len: len.into(),
                max: max.into(),
            });
        }
        self.get_opaque_fixed(len as usize)
    }

    /// RFC 4506 4.11: `string x<max>`, as bytes; callers that need UTF-8
    /// check it themselves (NFS names are byte strings on the wire).
    pub fn get_string(&mut self, max: u32, what: &'static str) -> Result<&'a [u8], XdrError> {
        self.get_opaque(max, what)
    }

    /// A file name component: like [`Self::get_string`] but an over-long
    /// name yields [`XdrError::NameTooLong`].
    pub fn get_name(&mut self, max: u32) -> Result<&'a [u8], XdrError> {
        let len = self.get_u32()?;
        if len > max {
            return Err(XdrError::NameTooLong {
                len: len.into(),
                max: max.into(),
            });
        }
        self.get_opaque_fixed(len as usize)
    }

    /// Reads a count for a variable-length array (RFC 4506 4.13) and checks
    /// it against `max` and against the input left, assuming each element
    /// takes at least `min_elem_len` bytes (at least 4 for any XDR item).
    pub fn get_count(
        &mut self,
        max: u32,
        min_elem_len: usize,
        what: &'static str,
    ) -> Result<usize, XdrError> {
        let count = self.get_u32()?;
        if count > max {
            return Err(XdrError::TooLong {
                what,
                len: count.into(),
                max: max.into(),
            });
        }
        let count = count as usize;
        let needed = count.saturating_mul(min_elem_len.max(1));
        if needed > self.remaining() {
            return Err(XdrError::Truncated {
                needed,
                remaining: self.remaining(),
            });
        }
        Ok(count)
    }

    /// RFC 4506 4.13: variable-length array `T x<max>`.
    pub fn get_array<T>(
        &mut self,
        max: u32,
        what: &'static str,
        mut f: impl FnMut(&mut Self) -> Result<T, XdrError>,
    ) -> Result<Vec<T>, XdrError> {
        let count = self.get_count(max, 4, what)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(f(self)?);
        }
        Ok(out)
    }

    /// RFC 4506 4.19: optional data `T *x`.
    pub fn get_optional<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, XdrError>,
    ) -> Result<Option<T>, XdrError> {
        if self.get_bool()? {
            Ok(Some(f(self)?))
        } else {
            Ok(None)
        }
    }

    /// A list written as chained optional data (RFC 4506 4.19, the
    /// `entry *next` idiom of READDIR, DUMP and EXPORT): each element is
    /// preceded by TRUE, the list ends with FALSE. At most `max` elements.
    pub fn get_linked_list<T>(
        &mut self,
        max: u32,
        what: &'static str,
        mut f: impl FnMut(&mut Self) -> Result<T, XdrError>,
    ) -> Result<Vec<T>, XdrError> {
        let mut out = Vec::new();
        while self.get_bool()? {
            if out.len() >= max as usize {
                return Err(XdrError::TooLong {
                    what,
                    len: out.len() as u64 + 1,
                    max: max.into(),
                });
            }
            out.push(f(self)?);
        }
        Ok(out)
    }

    /// Decodes a value with its [`XdrDecode`] impl.
    pub fn get<T: XdrDecode<'a>>(&mut self) -> Result<T, XdrError> {
        T::decode(self)
    }
}

/// An XDR encoder appending to a `Vec<u8>` (which a caller may take from a
/// buffer pool with [`XdrWriter::with_buffer`]).
#[derive(Debug, Default, Clone)]
pub struct XdrWriter {
    buf: Vec<u8>,
}

impl XdrWriter {
    pub fn new() -> Self {
        XdrWriter { buf: Vec::new() }
    }

    /// Appends to `buf`, keeping what it already holds.
    pub fn with_buffer(buf: Vec<u8>) -> Self {
        XdrWriter { buf }
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Drops what was written after the first `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    pub fn put_raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    pub fn put_u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn put_i32(&mut self, v: i32) {
        self.put_u32(v as u32);
    }

    pub fn put_u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn put_i64(&mut self, v: i64) {
        self.put_u64(v as u64);
    }

    pub fn put_bool(&mut self, v: bool) {
        self.put_u32(u32::from(v));
    }

    /// RFC 4506 4.9: fixed-length opaque data plus zero padding.
    pub fn put_opaque_fixed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        self.buf.extend_from_slice(&[0u8; 3][..pad_len(data.len())]);
    }

    /// RFC 4506 4.10: variable-length opaque data. The caller keeps within
    /// the bound; a length above u32::MAX is a programming error.
    pub fn put_opaque(&mut self, data: &[u8]) {
        let len = u32::try_from(data.len()).expect("xdr opaque longer than u32::MAX");
        self.put_u32(len);
        self.put_opaque_fixed(data);
    }

    /// RFC 4506 4.11.
    pub fn put_string(&mut self, s: &[u8]) {
        self.put_opaque(s);
    }

    /// RFC 4506 4.13: count, then elements.
    pub fn put_array<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Self, &T)) {
        let len = u32::try_from(items.len()).expect("xdr array longer than u32::MAX");
        self.put_u32(len);
        for item in items {
            f(self, item);
        }
    }

    /// The chained-optional list of [`XdrReader::get_linked_list`].
    pub fn put_linked_list<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Self, &T)) {
        for item in items {
            self.put_bool(true);
            f(self, item);
        }
        self.put_bool(false);
    }

    /// Reserves a 32-bit slot to fill in later with [`Self::patch_u32`]
    /// (lengths known only after encoding what follows).
    pub fn reserve_u32(&mut self) -> usize {
        let at = self.buf.len();
        self.put_u32(0);
        at
    }

    /// Fills a slot from [`Self::reserve_u32`].
    pub fn patch_u32(&mut self, at: usize, v: u32) {
        if let Some(slot) = self.buf.get_mut(at..at + 4) {
            slot.copy_from_slice(&v.to_be_bytes());
        }
    }

    /// Encodes a value with its [`XdrEncode`] impl.
    pub fn put<T: XdrEncode + ?Sized>(&mut self, v: &T) {
        v.encode(self);
    }
}

/// A type with an XDR decoding that may borrow from the input.
pub trait XdrDecode<'a>: Sized {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError>;
}

/// A type with an XDR encoding. Encoding cannot fail: values are built by
/// the server and kept within their bounds by construction.
pub trait XdrEncode {
    fn encode(&self, w: &mut XdrWriter);
}

/// Decodes a whole buffer as one `T`, rejecting trailing bytes.
pub fn decode_all<'a, T: XdrDecode<'a>>(buf: &'a [u8]) -> Result<T, XdrError> {
    let mut r = XdrReader::new(buf);
    let v = T::decode(&mut r)?;
    r.finish()?;
    Ok(v)
}

/// Encodes one value into a fresh buffer.
pub fn encode_to_vec<T: XdrEncode + ?Sized>(v: &T) -> Vec<u8> {
    let mut w = XdrWriter::new();
    v.encode(&mut w);
    w.into_inner()
}

impl<'a> XdrDecode<'a> for () {
    fn decode(_: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(())
    }
}
impl XdrEncode for () {
    fn encode(&self, _: &mut XdrWriter) {}
}

impl<'a> XdrDecode<'a> for u32 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        r.get_u32()
    }
}
impl XdrEncode for u32 {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_u32(*self)
    }
}
impl<'a> XdrDecode<'a> for i32 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        r.get_i32()
    }
}
impl XdrEncode for i32 {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_i32(*self)
    }
}
impl<'a> XdrDecode<'a> for u64 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        r.get_u64()
    }
}
impl XdrEncode for u64 {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_u64(*self)
    }
}
impl<'a> XdrDecode<'a> for i64 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        r.get_i64()
    }
}
impl XdrEncode for i64 {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_i64(*self)
    }
}
impl<'a> XdrDecode<'a> for bool {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        r.get_bool()
    }
}
impl XdrEncode for bool {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_bool(*self)
    }
}

/// Fixed-length opaque `opaque x[N]` (RFC 4506 4.9): verifiers, session ids,
/// stateid "other" fields.
impl<'a, const N: usize> XdrDecode<'a> for [u8; N] {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        r.get_array_fixed::<N>()
    }
}
impl<const N: usize> XdrEncode for [u8; N] {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_opaque_fixed(self)
    }
}

/// Optional data `T *x` (RFC 4506 4.19), which is also the wire form of
/// every `union switch (bool)` with a void FALSE arm (post_op_attr and kin).
impl<'a, T: XdrDecode<'a>> XdrDecode<'a> for Option<T> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        r.get_optional(T::decode)
    }
}
impl<T: XdrEncode> XdrEncode for Option<T> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            Some(v) => {
                w.put_bool(true);
                v.encode(w);
            }
            None => w.put_bool(false),
        }
    }
}

/// Bounded variable-length opaque data or string, `opaque x<MAX>` (RFC 4506
/// 4.10, 4.11), borrowed from the input.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Opaque<'a, const MAX: u32>(pub &'a [u8]);

impl<'a, const MAX: u32> Opaque<'a, MAX> {
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

impl<const MAX: u32> fmt::Debug for Opaque<'_, MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() <= 64 {
            match std::str::from_utf8(self.0) {
                Ok(s) if s.chars().all(|c| !c.is_control()) => write!(f, "{s:?}"),
                _ => write!(f, "0x{}", hex(self.0)),
            }
        } else {
            write!(f, "<{} bytes>", self.0.len())
        }
    }
}

impl<'a, const MAX: u32> XdrDecode<'a> for Opaque<'a, MAX> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(Opaque(r.get_opaque(MAX, "opaque")?))
    }
}
impl<const MAX: u32> XdrEncode for Opaque<'_, MAX> {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_opaque(self.0)
    }
}

/// A file name component with bound MAX: an over-long one decodes to
/// [`XdrError::NameTooLong`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Name<'a, const MAX: u32>(pub &'a [u8]);

impl<const MAX: u32> fmt::Debug for Name<'_, MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.0))
    }
}

impl<'a, const MAX: u32> XdrDecode<'a> for Name<'a, MAX> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(Name(r.get_name(MAX)?))
    }
}
impl<const MAX: u32> XdrEncode for Name<'_, MAX> {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_opaque(self.0)
    }
}

/// Bounded variable-length array `T x<MAX>` (RFC 4506 4.13).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct List<T, const MAX: u32>(pub Vec<T>);

impl<'a, T: XdrDecode<'a>, const MAX: u32> XdrDecode<'a> for List<T, MAX> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(List(r.get_array(MAX, "array", T::decode)?))
    }
}
impl<T: XdrEncode, const MAX: u32> XdrEncode for List<T, MAX> {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_array(&self.0, |w, v| v.encode(w));
    }
}

/// Bounded list in the chained-optional form (`entry *next`, RFC 4506 4.19).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LinkedList<T, const MAX: u32>(pub Vec<T>);

impl<'a, T: XdrDecode<'a>, const MAX: u32> XdrDecode<'a> for LinkedList<T, MAX> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(LinkedList(r.get_linked_list(MAX, "list", T::decode)?))
    }
}
impl<T: XdrEncode, const MAX: u32> XdrEncode for LinkedList<T, MAX> {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_linked_list(&self.0, |w, v| v.encode(w));
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Declares a struct whose XDR form is its fields in order (RFC 4506 4.14).
macro_rules! xdr_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident <$lt:lifetime> {
            $( $(#[$fm:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<$lt> {
            $( $(#[$fm])* pub $field: $ty, )*
        }
        impl<$lt> $crate::nfs::xdr::XdrDecode<$lt> for $name<$lt> {
            fn decode(
                _r: &mut $crate::nfs::xdr::XdrReader<$lt>,
            ) -> Result<Self, $crate::nfs::xdr::XdrError> {
                Ok(Self { $( $field: $crate::nfs::xdr::XdrDecode::decode(_r)?, )* })
            }
        }
        impl<$lt> $crate::nfs::xdr::XdrEncode for $name<$lt> {
            fn encode(&self, _w: &mut $crate::nfs::xdr::XdrWriter) {
                $( $crate::nfs::xdr::XdrEncode::encode(&self.$field, _w); )*
            }
        }
    };
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fm])* pub $field: $ty, )*
        }
        impl<'a> $crate::nfs::xdr::XdrDecode<'a> for $name {
            fn decode(
                _r: &mut $crate::nfs::xdr::XdrReader<'a>,
            ) -> Result<Self, $crate::nfs::xdr::XdrError> {
                Ok(Self { $( $field: $crate::nfs::xdr::XdrDecode::decode(_r)?, )* })
            }
        }
        impl $crate::nfs::xdr::XdrEncode for $name {
            fn encode(&self, _w: &mut $crate::nfs::xdr::XdrWriter) {
                $( $crate::nfs::xdr::XdrEncode::encode(&self.$field, _w); )*
            }
        }
    };
}

/// Declares a closed XDR enum (RFC 4506 4.3): unknown values fail to decode
/// with [`XdrError::BadDiscriminant`].
macro_rules! xdr_enum {
    (
        $(#[$m:meta])*
        pub enum $name:ident {
            $( $(#[$vm:meta])* $var:ident = $val:expr ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vm])* $var, )*
        }
        impl $name {
            pub fn from_u32(v: u32) -> Option<Self> {
                match v {
                    $( x if x == $val => Some($name::$var), )*
                    _ => None,
                }
            }
            pub fn as_u32(self) -> u32 {
                match self {
                    $( $name::$var => $val, )*
                }
            }
        }
        impl<'a> $crate::nfs::xdr::XdrDecode<'a> for $name {
            fn decode(
                r: &mut $crate::nfs::xdr::XdrReader<'a>,
            ) -> Result<Self, $crate::nfs::xdr::XdrError> {
                let v = r.get_u32()?;
                $name::from_u32(v).ok_or($crate::nfs::xdr::XdrError::BadDiscriminant {
                    what: stringify!($name),
                    value: v,
                })
            }
        }
        impl $crate::nfs::xdr::XdrEncode for $name {
            fn encode(&self, w: &mut $crate::nfs::xdr::XdrWriter) {
                w.put_u32(self.as_u32())
            }
        }
    };
}

/// Declares an open status code (nfsstat3, nfsstat4, mountstat3): a u32
/// newtype with named constants, so any value round-trips.
macro_rules! xdr_status {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$vm:meta])* $var:ident = $val:expr ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u32);
        #[allow(non_upper_case_globals)]
        impl $name {
            $( $(#[$vm])* pub const $var: $name = $name($val); )*
            /// The symbolic name, if this is a known value.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( x if x == $val => Some(stringify!($var)), )*
                    _ => None,
                }
            }
        }
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.name() {
                    Some(n) => write!(f, "{}::{}", stringify!($name), n),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }
        impl<'a> $crate::nfs::xdr::XdrDecode<'a> for $name {
            fn decode(
                r: &mut $crate::nfs::xdr::XdrReader<'a>,
            ) -> Result<Self, $crate::nfs::xdr::XdrError> {
                Ok($name(r.get_u32()?))
            }
        }
        impl $crate::nfs::xdr::XdrEncode for $name {
            fn encode(&self, w: &mut $crate::nfs::xdr::XdrWriter) {
                w.put_u32(self.0)
            }
        }
    };
}

pub(crate) use {xdr_enum, xdr_status, xdr_struct};
