//! NTSTATUS values (MS-ERREF 2.3.1) that an SMB2 server returns.

use std::fmt;

/// An NTSTATUS code (MS-ERREF 2.3.1), as carried in the Status field of the
/// SMB2 header (MS-SMB2 2.2.1.2).
///
/// The top two bits are the severity: 0 success, 1 informational, 2 warning,
/// 3 error.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NtStatus(pub u32);

impl NtStatus {
    /// The operation completed.
    pub const SUCCESS: NtStatus = NtStatus(0x0000_0000);
    /// Interim response: the request will complete asynchronously (MS-SMB2 3.3.4.2).
    pub const PENDING: NtStatus = NtStatus(0x0000_0103);
    /// A change notification was cancelled because its handle was closed.
    pub const NOTIFY_CLEANUP: NtStatus = NtStatus(0x0000_010B);
    /// Too many changes for the notify buffer; the client must enumerate the directory.
    pub const NOTIFY_ENUM_DIR: NtStatus = NtStatus(0x0000_010C);
    /// The output is truncated to the buffer (a warning: the response body is still sent).
    pub const BUFFER_OVERFLOW: NtStatus = NtStatus(0x8000_0005);
    /// QUERY_DIRECTORY has no more entries.
    pub const NO_MORE_FILES: NtStatus = NtStatus(0x8000_0006);
    /// A path component is a symbolic link (MS-SMB2 2.2.2.2.1).
    pub const STOPPED_ON_SYMLINK: NtStatus = NtStatus(0x8000_002D);
    /// Generic failure.
    pub const UNSUCCESSFUL: NtStatus = NtStatus(0xC000_0001);
    /// The request is not implemented.
    pub const NOT_IMPLEMENTED: NtStatus = NtStatus(0xC000_0002);
    /// The information class is not valid for this request.
    pub const INVALID_INFO_CLASS: NtStatus = NtStatus(0xC000_0003);
    /// The buffer length does not match the information class.
    pub const INFO_LENGTH_MISMATCH: NtStatus = NtStatus(0xC000_0004);
    /// The FileId does not name an open.
    pub const INVALID_HANDLE: NtStatus = NtStatus(0xC000_0008);
    /// A field of the request is invalid.
    pub const INVALID_PARAMETER: NtStatus = NtStatus(0xC000_000D);
    /// The file does not exist.
    pub const NO_SUCH_FILE: NtStatus = NtStatus(0xC000_000F);
    /// The request is not valid for this object (an FSCTL on the wrong kind of file).
    pub const INVALID_DEVICE_REQUEST: NtStatus = NtStatus(0xC000_0010);
    /// READ at or past end of file.
    pub const END_OF_FILE: NtStatus = NtStatus(0xC000_0011);
    /// SESSION_SETUP needs another round trip.
    pub const MORE_PROCESSING_REQUIRED: NtStatus = NtStatus(0xC000_0016);
    /// A lock sequence is invalid.
    pub const INVALID_LOCK_SEQUENCE: NtStatus = NtStatus(0xC000_001E);
    /// A range lies past the end of a file (FSCTL_SRV_COPYCHUNK source).
    pub const INVALID_VIEW_SIZE: NtStatus = NtStatus(0xC000_001F);
    /// The caller lacks the access it asked for.
    pub const ACCESS_DENIED: NtStatus = NtStatus(0xC000_0022);
    /// The output buffer is too small for even one entry.
    pub const BUFFER_TOO_SMALL: NtStatus = NtStatus(0xC000_0023);
    /// The name is syntactically invalid.
    pub const OBJECT_NAME_INVALID: NtStatus = NtStatus(0xC000_0033);
    /// The last path component does not exist.
    pub const OBJECT_NAME_NOT_FOUND: NtStatus = NtStatus(0xC000_0034);
    /// The name exists already (FILE_CREATE, rename without replace).
    pub const OBJECT_NAME_COLLISION: NtStatus = NtStatus(0xC000_0035);
    /// An intermediate path component does not exist.
    pub const OBJECT_PATH_NOT_FOUND: NtStatus = NtStatus(0xC000_003A);
    /// The path is malformed.
    pub const OBJECT_PATH_SYNTAX_BAD: NtStatus = NtStatus(0xC000_003B);
    /// The open conflicts with another open's share access.
    pub const SHARING_VIOLATION: NtStatus = NtStatus(0xC000_0043);
    /// Extended attributes are not supported.
    pub const EAS_NOT_SUPPORTED: NtStatus = NtStatus(0xC000_004F);
    /// The file has no extended attributes.
    pub const NO_EAS_ON_FILE: NtStatus = NtStatus(0xC000_0052);
    /// I/O conflicts with a byte-range lock.
    pub const FILE_LOCK_CONFLICT: NtStatus = NtStatus(0xC000_0054);
    /// A byte-range lock could not be granted.
    pub const LOCK_NOT_GRANTED: NtStatus = NtStatus(0xC000_0055);
    /// The file is marked for deletion.
    pub const DELETE_PENDING: NtStatus = NtStatus(0xC000_0056);
    /// The user does not exist.
    pub const NO_SUCH_USER: NtStatus = NtStatus(0xC000_0064);
    /// The password is wrong.
    pub const WRONG_PASSWORD: NtStatus = NtStatus(0xC000_006A);
    /// Authentication failed.
    pub const LOGON_FAILURE: NtStatus = NtStatus(0xC000_006D);
    /// The password has expired.
    pub const PASSWORD_EXPIRED: NtStatus = NtStatus(0xC000_0071);
    /// The account is disabled.
    pub const ACCOUNT_DISABLED: NtStatus = NtStatus(0xC000_0072);
    /// UNLOCK of a range that is not locked.
    pub const RANGE_NOT_LOCKED: NtStatus = NtStatus(0xC000_007E);
    /// No space is left.
    pub const DISK_FULL: NtStatus = NtStatus(0xC000_007F);
    /// A server limit was reached.
    pub const INSUFFICIENT_RESOURCES: NtStatus = NtStatus(0xC000_009A);
    /// An internal error; Windows' answer to a request of a compound that
    /// would go async without being the compound's last (MS-SMB2 <159>).
    pub const INTERNAL_ERROR: NtStatus = NtStatus(0xC000_00E5);
    /// The share or volume is read-only.
    pub const MEDIA_WRITE_PROTECTED: NtStatus = NtStatus(0xC000_00A2);
    /// The ImpersonationLevel of a CREATE is invalid.
    pub const BAD_IMPERSONATION_LEVEL: NtStatus = NtStatus(0xC000_00A5);
    /// The operation timed out.
    pub const IO_TIMEOUT: NtStatus = NtStatus(0xC000_00B5);
    /// A non-directory operation named a directory.
    pub const FILE_IS_A_DIRECTORY: NtStatus = NtStatus(0xC000_00BA);
    /// The request is not supported.
    pub const NOT_SUPPORTED: NtStatus = NtStatus(0xC000_00BB);
    /// The tree connect is gone (TreeId not found).
    pub const NETWORK_NAME_DELETED: NtStatus = NtStatus(0xC000_00C9);
    /// Access to the share is denied.
    pub const NETWORK_ACCESS_DENIED: NtStatus = NtStatus(0xC000_00CA);
    /// The share does not exist.
    pub const BAD_NETWORK_NAME: NtStatus = NtStatus(0xC000_00CC);
    /// The server accepts no more connections or sessions.
    pub const REQUEST_NOT_ACCEPTED: NtStatus = NtStatus(0xC000_00D0);
    /// A session binding whose signing algorithm (AES-GMAC) the new
    /// channel did not negotiate (MS-SMB2 3.3.5.5, as Windows answers).
    pub const REQUEST_OUT_OF_SEQUENCE: NtStatus = NtStatus(0xC000_042A);
    /// A rename across volumes or shares.
    pub const NOT_SAME_DEVICE: NtStatus = NtStatus(0xC000_00D4);
    /// The oplock request was denied.
    pub const OPLOCK_NOT_GRANTED: NtStatus = NtStatus(0xC000_00E2);
    /// An oplock break acknowledgment is invalid.
    pub const INVALID_OPLOCK_PROTOCOL: NtStatus = NtStatus(0xC000_00E3);
    /// The directory to delete is not empty.
    pub const DIRECTORY_NOT_EMPTY: NtStatus = NtStatus(0xC000_0101);
    /// A directory operation named a non-directory.
    pub const NOT_A_DIRECTORY: NtStatus = NtStatus(0xC000_0103);
    /// The open limit was reached.
    pub const TOO_MANY_OPENED_FILES: NtStatus = NtStatus(0xC000_011F);
    /// The request was cancelled (SMB2 CANCEL).
    pub const CANCELLED: NtStatus = NtStatus(0xC000_0120);
    /// A lock range runs past the largest 64-bit offset (MS-FSA 2.1.5.8).
    pub const INVALID_LOCK_RANGE: NtStatus = NtStatus(0xC000_01A1);
    /// The file cannot be deleted (read-only attribute).
    pub const CANNOT_DELETE: NtStatus = NtStatus(0xC000_0121);
    /// The open was closed while the request ran.
    pub const FILE_CLOSED: NtStatus = NtStatus(0xC000_0128);
    /// The SessionId does not name a session.
    pub const USER_SESSION_DELETED: NtStatus = NtStatus(0xC000_0203);
    /// The object (a DFS referral, an FSCTL target) was not found.
    pub const NOT_FOUND: NtStatus = NtStatus(0xC000_0225);
    /// The path is not covered by this DFS server.
    pub const PATH_NOT_COVERED: NtStatus = NtStatus(0xC000_0257);
    /// The file is not a reparse point.
    pub const NOT_A_REPARSE_POINT: NtStatus = NtStatus(0xC000_0275);
    /// The session must re-authenticate.
    pub const NETWORK_SESSION_EXPIRED: NtStatus = NtStatus(0xC000_035C);
    /// The file is temporarily unavailable.
    pub const FILE_NOT_AVAILABLE: NtStatus = NtStatus(0xC000_0467);

    /// Severity 0 or 1: the operation succeeded.
    pub fn is_success(self) -> bool {
        self.0 >> 30 <= 1
    }

    /// Severity 2: a warning (the response may still carry a body, as with
    /// STATUS_BUFFER_OVERFLOW).
    pub fn is_warning(self) -> bool {
        self.0 >> 30 == 2
    }

    /// Severity 3: an error.
    pub fn is_error(self) -> bool {
        self.0 >> 30 == 3
    }

    /// The symbolic name, for the codes this module knows.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            NtStatus::SUCCESS => "STATUS_SUCCESS",
            NtStatus::PENDING => "STATUS_PENDING",
            NtStatus::NOTIFY_CLEANUP => "STATUS_NOTIFY_CLEANUP",
            NtStatus::NOTIFY_ENUM_DIR => "STATUS_NOTIFY_ENUM_DIR",
            NtStatus::BUFFER_OVERFLOW => "STATUS_BUFFER_OVERFLOW",
            NtStatus::NO_MORE_FILES => "STATUS_NO_MORE_FILES",
            NtStatus::STOPPED_ON_SYMLINK => "STATUS_STOPPED_ON_SYMLINK",
            NtStatus::UNSUCCESSFUL => "STATUS_UNSUCCESSFUL",
            NtStatus::NOT_IMPLEMENTED => "STATUS_NOT_IMPLEMENTED",
            NtStatus::INVALID_INFO_CLASS => "STATUS_INVALID_INFO_CLASS",
            NtStatus::INFO_LENGTH_MISMATCH => "STATUS_INFO_LENGTH_MISMATCH",
            NtStatus::INVALID_HANDLE => "STATUS_INVALID_HANDLE",
            NtStatus::INVALID_PARAMETER => "STATUS_INVALID_PARAMETER",
            NtStatus::NO_SUCH_FILE => "STATUS_NO_SUCH_FILE",
            NtStatus::INVALID_DEVICE_REQUEST => "STATUS_INVALID_DEVICE_REQUEST",
            NtStatus::END_OF_FILE => "STATUS_END_OF_FILE",
            NtStatus::INVALID_VIEW_SIZE => "STATUS_INVALID_VIEW_SIZE",
            NtStatus::MORE_PROCESSING_REQUIRED => "STATUS_MORE_PROCESSING_REQUIRED",
            NtStatus::INVALID_LOCK_SEQUENCE => "STATUS_INVALID_LOCK_SEQUENCE",
            NtStatus::ACCESS_DENIED => "STATUS_ACCESS_DENIED",
            NtStatus::BUFFER_TOO_SMALL => "STATUS_BUFFER_TOO_SMALL",
            NtStatus::OBJECT_NAME_INVALID => "STATUS_OBJECT_NAME_INVALID",
            NtStatus::OBJECT_NAME_NOT_FOUND => "STATUS_OBJECT_NAME_NOT_FOUND",
            NtStatus::OBJECT_NAME_COLLISION => "STATUS_OBJECT_NAME_COLLISION",
            NtStatus::OBJECT_PATH_NOT_FOUND => "STATUS_OBJECT_PATH_NOT_FOUND",
            NtStatus::OBJECT_PATH_SYNTAX_BAD => "STATUS_OBJECT_PATH_SYNTAX_BAD",
            NtStatus::SHARING_VIOLATION => "STATUS_SHARING_VIOLATION",
            NtStatus::EAS_NOT_SUPPORTED => "STATUS_EAS_NOT_SUPPORTED",
            NtStatus::NO_EAS_ON_FILE => "STATUS_NO_EAS_ON_FILE",
            NtStatus::FILE_LOCK_CONFLICT => "STATUS_FILE_LOCK_CONFLICT",
            NtStatus::LOCK_NOT_GRANTED => "STATUS_LOCK_NOT_GRANTED",
            NtStatus::DELETE_PENDING => "STATUS_DELETE_PENDING",
            NtStatus::NO_SUCH_USER => "STATUS_NO_SUCH_USER",
            NtStatus::WRONG_PASSWORD => "STATUS_WRONG_PASSWORD",
            NtStatus::LOGON_FAILURE => "STATUS_LOGON_FAILURE",
            NtStatus::PASSWORD_EXPIRED => "STATUS_PASSWORD_EXPIRED",
            NtStatus::ACCOUNT_DISABLED => "STATUS_ACCOUNT_DISABLED",
            NtStatus::RANGE_NOT_LOCKED => "STATUS_RANGE_NOT_LOCKED",
            NtStatus::DISK_FULL => "STATUS_DISK_FULL",
            NtStatus::INSUFFICIENT_RESOURCES => "STATUS_INSUFFICIENT_RESOURCES",
            NtStatus::INTERNAL_ERROR => "STATUS_INTERNAL_ERROR",
            NtStatus::MEDIA_WRITE_PROTECTED => "STATUS_MEDIA_WRITE_PROTECTED",
            NtStatus::BAD_IMPERSONATION_LEVEL => "STATUS_BAD_IMPERSONATION_LEVEL",
            NtStatus::IO_TIMEOUT => "STATUS_IO_TIMEOUT",
            NtStatus::FILE_IS_A_DIRECTORY => "STATUS_FILE_IS_A_DIRECTORY",
            NtStatus::NOT_SUPPORTED => "STATUS_NOT_SUPPORTED",
            NtStatus::NETWORK_NAME_DELETED => "STATUS_NETWORK_NAME_DELETED",
            NtStatus::NETWORK_ACCESS_DENIED => "STATUS_NETWORK_ACCESS_DENIED",
            NtStatus::BAD_NETWORK_NAME => "STATUS_BAD_NETWORK_NAME",
            NtStatus::REQUEST_NOT_ACCEPTED => "STATUS_REQUEST_NOT_ACCEPTED",
            NtStatus::REQUEST_OUT_OF_SEQUENCE => "STATUS_REQUEST_OUT_OF_SEQUENCE",
            NtStatus::NOT_SAME_DEVICE => "STATUS_NOT_SAME_DEVICE",
            NtStatus::OPLOCK_NOT_GRANTED => "STATUS_OPLOCK_NOT_GRANTED",
            NtStatus::INVALID_OPLOCK_PROTOCOL => "STATUS_INVALID_OPLOCK_PROTOCOL",
            NtStatus::DIRECTORY_NOT_EMPTY => "STATUS_DIRECTORY_NOT_EMPTY",
            NtStatus::NOT_A_DIRECTORY => "STATUS_NOT_A_DIRECTORY",
            NtStatus::TOO_MANY_OPENED_FILES => "STATUS_TOO_MANY_OPENED_FILES",
            NtStatus::CANCELLED => "STATUS_CANCELLED",
            NtStatus::INVALID_LOCK_RANGE => "STATUS_INVALID_LOCK_RANGE",
            NtStatus::CANNOT_DELETE => "STATUS_CANNOT_DELETE",
            NtStatus::FILE_CLOSED => "STATUS_FILE_CLOSED",
            NtStatus::USER_SESSION_DELETED => "STATUS_USER_SESSION_DELETED",
            NtStatus::NOT_FOUND => "STATUS_NOT_FOUND",
            NtStatus::PATH_NOT_COVERED => "STATUS_PATH_NOT_COVERED",
            NtStatus::NOT_A_REPARSE_POINT => "STATUS_NOT_A_REPARSE_POINT",
            NtStatus::NETWORK_SESSION_EXPIRED => "STATUS_NETWORK_SESSION_EXPIRED",
            NtStatus::FILE_NOT_AVAILABLE => "STATUS_FILE_NOT_AVAILABLE",
            _ => return None,
        })
    }
}

impl fmt::Debug for NtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "NtStatus({:#010x})", self.0),
        }
    }
}

impl fmt::Display for NtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities() {
        assert!(NtStatus::SUCCESS.is_success());
        assert!(NtStatus::PENDING.is_success());
        assert!(NtStatus::BUFFER_OVERFLOW.is_warning());
        assert!(NtStatus::NO_MORE_FILES.is_warning());
        assert!(NtStatus::ACCESS_DENIED.is_error());
        assert_eq!(format!("{:?}", NtStatus::LOGON_FAILURE), "STATUS_LOGON_FAILURE");
        assert_eq!(format!("{:?}", NtStatus(0xC0FF_EE00)), "NtStatus(0xc0ffee00)");
    }
}
