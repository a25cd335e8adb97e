//! What is wrong with a message that failed to decode, and the NTSTATUS a
//! server answers it with.

use std::fmt;

use super::status::NtStatus;

/// Why a message could not be decoded.
///
/// Every variant names the field that was wrong, so a log line says what a
/// hostile or broken peer sent. [`DecodeError::status`] maps it to the
/// NTSTATUS MS-SMB2 prescribes; for malformed requests that is almost always
/// STATUS_INVALID_PARAMETER (MS-SMB2 3.3.5.2.6 and the per-command sections).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The message ends before `field`.
    Truncated { field: &'static str },
    /// StructureSize is not the value MS-SMB2 fixes for this structure.
    StructureSize { structure: &'static str, expected: u16, found: u16 },
    /// An offset/length pair points outside the message, into its fixed part,
    /// or overflows.
    BadBuffer { field: &'static str },
    /// A value MS-SMB2 or MS-FSCC forbids (bad ProtocolId, odd UTF-16 length,
    /// misaligned NextCommand, ...).
    InvalidValue { field: &'static str },
    /// Well-formed but something this codec does not handle.
    Unsupported { field: &'static str },
    /// More entries than duet accepts (compound length, context count, ...).
    LimitExceeded { field: &'static str },
}

impl DecodeError {
    /// The NTSTATUS a server returns for a request that failed this way.
    pub fn status(&self) -> NtStatus {
        match self {
            DecodeError::Unsupported { .. } => NtStatus::NOT_SUPPORTED,
            DecodeError::LimitExceeded { .. } => NtStatus::INSUFFICIENT_RESOURCES,
            DecodeError::Truncated { .. }
            | DecodeError::StructureSize { .. }
            | DecodeError::BadBuffer { .. }
            | DecodeError::InvalidValue { .. } => NtStatus::INVALID_PARAMETER,
        }
    }
}

impl From<DecodeError> for NtStatus {
    fn from(e: DecodeError) -> NtStatus {
        e.status()
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { field } => write!(f, "message truncated at {field}"),
            DecodeError::StructureSize { structure, expected, found } => {
                write!(f, "{structure}: StructureSize {found}, expected {expected}")
            }
            DecodeError::BadBuffer { field } => write!(f, "{field}: offset/length out of bounds"),
            DecodeError::InvalidValue { field } => write!(f, "invalid value in {field}"),
            DecodeError::Unsupported { field } => write!(f, "unsupported {field}"),
            DecodeError::LimitExceeded { field } => write!(f, "too many {field}"),
        }
    }
}

impl std::error::Error for DecodeError {}
