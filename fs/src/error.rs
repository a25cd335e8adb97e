//! Errors of file-system operations. Each maps to one NTSTATUS and one
//! nfsstat3/nfsstat4 in the protocol crates.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("permission denied")]
    Access,
    #[error("operation not permitted")]
    Perm,
    #[error("invalid argument")]
    Invalid,
    #[error("invalid name")]
    InvalidName,
    #[error("name too long")]
    NameTooLong,
    #[error("no space left on device")]
    NoSpace,
    #[error("stale file handle")]
    Stale,
    #[error("operation refers to an object an earlier operation did not produce")]
    BadRef,
    #[error("read-only file system")]
    ReadOnly,
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    FileTooBig,
    #[error("not a symbolic link")]
    NotSymlink,
    #[error("input/output error")]
    Io,
    #[error("operation not supported")]
    NotSupported,
    #[error("skipped after an earlier error in the batch")]
    Skipped,
    #[error("cross-device link or rename")]
    CrossDevice,
    #[error("invalid rename (directory into itself)")]
    RenameIntoSelf,
    /// The cluster could not run the batch now (no leader during an
    /// election, the leader unreachable, or a forwarded batch whose outcome
    /// is unknown): the client should retry later. NFS3ERR_JUKEBOX,
    /// NFS4ERR_DELAY, SMB STATUS_INSUFFICIENT_RESOURCES.
    #[error("the cluster cannot serve this now (no reachable leader); retry")]
    Unavailable,
}
