//! The one place each that maps a duet [`FsError`] to an NFS status.

use duet_fs::FsError;

use crate::nfs::nfs3::Nfsstat3;
use crate::nfs::nfs4::Nfsstat4;

/// RFC 1813 2.6: the nfsstat3 for a file-system error.
pub fn nfs3_status(e: FsError) -> Nfsstat3 {
    match e {
        FsError::NotFound => Nfsstat3::NOENT,
        FsError::Exists => Nfsstat3::EXIST,
        FsError::NotDir => Nfsstat3::NOTDIR,
        FsError::IsDir => Nfsstat3::ISDIR,
        FsError::NotEmpty => Nfsstat3::NOTEMPTY,
        FsError::Access => Nfsstat3::ACCES,
        FsError::Perm => Nfsstat3::PERM,
        FsError::Invalid => Nfsstat3::INVAL,
        FsError::InvalidName => Nfsstat3::ACCES,
        FsError::NameTooLong => Nfsstat3::NAMETOOLONG,
        FsError::NoSpace => Nfsstat3::NOSPC,
        FsError::Stale => Nfsstat3::STALE,
        FsError::BadRef => Nfsstat3::SERVERFAULT,
        FsError::ReadOnly => Nfsstat3::ROFS,
        FsError::TooManyLinks => Nfsstat3::MLINK,
        FsError::FileTooBig => Nfsstat3::FBIG,
        FsError::NotSymlink => Nfsstat3::INVAL,
        FsError::Io => Nfsstat3::IO,
        FsError::NotSupported => Nfsstat3::NOTSUPP,
        FsError::Skipped => Nfsstat3::SERVERFAULT,
        FsError::CrossDevice => Nfsstat3::XDEV,
        FsError::RenameIntoSelf => Nfsstat3::INVAL,
        // RFC 1813 2.6: "the client should retry the request later".
        FsError::Unavailable => Nfsstat3::JUKEBOX,
    }
}

/// RFC 8881 15.1: the nfsstat4 for a file-system error.
pub fn nfs4_status(e: FsError) -> Nfsstat4 {
    match e {
        FsError::NotFound => Nfsstat4::NOENT,
        FsError::Exists => Nfsstat4::EXIST,
        FsError::NotDir => Nfsstat4::NOTDIR,
        FsError::IsDir => Nfsstat4::ISDIR,
        FsError::NotEmpty => Nfsstat4::NOTEMPTY,
        FsError::Access => Nfsstat4::ACCESS,
        FsError::Perm => Nfsstat4::PERM,
        FsError::Invalid => Nfsstat4::INVAL,
        FsError::InvalidName => Nfsstat4::BADNAME,
        FsError::NameTooLong => Nfsstat4::NAMETOOLONG,
        FsError::NoSpace => Nfsstat4::NOSPC,
        FsError::Stale => Nfsstat4::STALE,
        FsError::BadRef => Nfsstat4::SERVERFAULT,
        FsError::ReadOnly => Nfsstat4::ROFS,
        FsError::TooManyLinks => Nfsstat4::MLINK,
        FsError::FileTooBig => Nfsstat4::FBIG,
        FsError::NotSymlink => Nfsstat4::INVAL,
        FsError::Io => Nfsstat4::IO,
        FsError::NotSupported => Nfsstat4::NOTSUPP,
        FsError::Skipped => Nfsstat4::SERVERFAULT,
        FsError::CrossDevice => Nfsstat4::XDEV,
        FsError::RenameIntoSelf => Nfsstat4::INVAL,
        // RFC 8881 15.1.1.3: the client retries after a delay.
        FsError::Unavailable => Nfsstat4::DELAY,
    }
}
