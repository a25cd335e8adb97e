//! MS-SMB2 2.2.2 SMB2 ERROR Response, its 3.1.1 error contexts (2.2.2.1) and
//! the symbolic link error response (2.2.2.2.1).

use super::cursor::{body, len_u16, len_u32, pad_len, Reader, Utf16, WireWrite};
use super::decode_error::DecodeError;

/// MS-SMB2 2.2.2 SMB2 ERROR Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorResponse<'a> {
    /// ErrorContextCount (3.1.1): nonzero when `error_data` is a list of
    /// SMB2 ERROR Context Response structures (2.2.2.1).
    pub error_context_count: u8,
    /// ErrorData: ByteCount bytes, borrowed.
    pub error_data: &'a [u8],
}

impl<'a> ErrorResponse<'a> {
    pub const STRUCTURE_SIZE: u16 = 9;

    /// The plain error body: no contexts, no data.
    pub const EMPTY: ErrorResponse<'static> = ErrorResponse { error_context_count: 0, error_data: &[] };

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 ERROR Response", Self::STRUCTURE_SIZE)?;
        let error_context_count = r.u8("ErrorContextCount")?;
        r.u8("Reserved")?;
        let byte_count = r.u32("ByteCount")?;
        let error_data = r.bytes(byte_count as usize, "ErrorData")?;
        Ok(ErrorResponse { error_context_count, error_data })
    }

    /// Appends the body; with no data, ErrorData is the one zero byte that
    /// MS-SMB2 requires.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.error_context_count);
        out.put_u8(0);
        out.put_u32(len_u32(self.error_data.len(), "ByteCount"));
        out.put_bytes(self.error_data);
        if self.error_data.is_empty() {
            out.put_u8(0);
        }
    }

    /// The error contexts (2.2.2.1) when ErrorContextCount is nonzero.
    pub fn contexts(&self) -> ErrorContexts<'a> {
        ErrorContexts { r: Reader::new(self.error_data), left: usize::from(self.error_context_count) }
    }
}

/// MS-SMB2 2.2.2.1 SMB2 ERROR Context Response
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorContext<'a> {
    /// SMB2_ERROR_ID_DEFAULT (0) or SMB2_ERROR_ID_SHARE_REDIRECT.
    pub error_id: u32,
    pub error_context_data: &'a [u8],
}

/// Iterator over the error contexts, each 8-byte aligned.
#[derive(Debug, Clone)]
pub struct ErrorContexts<'a> {
    r: Reader<'a>,
    left: usize,
}

impl<'a> Iterator for ErrorContexts<'a> {
    type Item = Result<ErrorContext<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let r = &mut self.r;
        let item = (|| {
            r.skip(pad_len(r.pos(), 8), "ErrorContext padding")?;
            let len = r.u32("ErrorDataLength")?;
            let error_id = r.u32("ErrorId")?;
            let error_context_data = r.bytes(len as usize, "ErrorContextData")?;
            Ok(ErrorContext { error_id, error_context_data })
        })();
        if item.is_err() {
            self.left = 0;
        }
        Some(item)
    }
}

/// MS-SMB2 2.2.2.2.1 Symbolic Link Error Response: the ErrorData of a
/// STATUS_STOPPED_ON_SYMLINK response, telling the client where a symbolic
/// link in its path points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymlinkErrorResponse<'a> {
    /// Bytes of the path after the symbolic link component (UTF-16 units*2).
    pub unparsed_path_length: u16,
    pub substitute_name: Utf16<'a>,
    pub print_name: Utf16<'a>,
    /// SYMLINK_FLAG_RELATIVE (0x1) when the target is relative.
    pub flags: u32,
}

impl<'a> SymlinkErrorResponse<'a> {
    /// 'SYMLINK_ERROR_TAG' (0x4C4D5953).
    pub const TAG: u32 = 0x4C4D_5953;
    /// IO_REPARSE_TAG_SYMLINK.
    pub const REPARSE_TAG: u32 = 0xA000_000C;
    pub const RELATIVE: u32 = 0x0000_0001;

    pub fn decode(error_data: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(error_data);
        let _length = r.u32("SymLinkLength")?;
        if r.u32("SymLinkErrorTag")? != Self::TAG {
            return Err(DecodeError::InvalidValue { field: "SymLinkErrorTag" });
        }
        if r.u32("ReparseTag")? != Self::REPARSE_TAG {
            return Err(DecodeError::InvalidValue { field: "ReparseTag" });
        }
        r.u16("ReparseDataLength")?;
        let unparsed_path_length = r.u16("UnparsedPathLength")?;
        let sub_off = usize::from(r.u16("SubstituteNameOffset")?);
        let sub_len = usize::from(r.u16("SubstituteNameLength")?);
        let print_off = usize::from(r.u16("PrintNameOffset")?);
        let print_len = usize::from(r.u16("PrintNameLength")?);
        let flags = r.u32("Flags")?;
        let path_buffer = r.rest();
        let name = |off: usize, len: usize, field| -> Result<Utf16<'a>, DecodeError> {
            let end = off.checked_add(len).ok_or(DecodeError::BadBuffer { field })?;
            Utf16::from_wire(path_buffer.get(off..end).ok_or(DecodeError::BadBuffer { field })?, field)
        };
        Ok(SymlinkErrorResponse {
            unparsed_path_length,
            substitute_name: name(sub_off, sub_len, "SubstituteName")?,
            print_name: name(print_off, print_len, "PrintName")?,
            flags,
        })
    }

    /// Appends the ErrorData: the substitute name first, then the print name.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let sub = self.substitute_name.byte_len();
        let print = self.print_name.byte_len();
        let reparse_data_length = 12 + sub + print;
        out.put_u32(len_u32(reparse_data_length + 12, "SymLinkLength"));
        out.put_u32(Self::TAG);
        out.put_u32(Self::REPARSE_TAG);
        out.put_u16(len_u16(reparse_data_length, "ReparseDataLength"));
        out.put_u16(self.unparsed_path_length);
        out.put_u16(0);
        out.put_u16(len_u16(sub, "SubstituteNameLength"));
        out.put_u16(len_u16(sub, "PrintNameOffset"));
        out.put_u16(len_u16(print, "PrintNameLength"));
        out.put_u32(self.flags);
        self.substitute_name.write(out);
        self.print_name.write(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_error_round_trip() {
        let s = SymlinkErrorResponse {
            unparsed_path_length: 8,
            substitute_name: Utf16::Str("target"),
            print_name: Utf16::Str("target"),
            flags: SymlinkErrorResponse::RELATIVE,
        };
        let mut data = Vec::new();
        s.encode(&mut data);
        assert_eq!(SymlinkErrorResponse::decode(&data), Ok(s));
        let e = ErrorResponse { error_context_count: 0, error_data: &data };
        let mut msg = vec![0u8; 64];
        e.encode(&mut msg);
        assert_eq!(ErrorResponse::decode(&msg), Ok(e));
    }
}
