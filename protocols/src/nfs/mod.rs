//! ONC RPC, portmap, MOUNT and NFS XDR codecs (RFC 5531, 1833, 1813, 8881, 7862).
//!
//! Sans-I/O: every decoder reads a borrowed buffer and returns
//! `Result<_, XdrError>`; every encoder appends to an [`xdr::XdrWriter`].
//! READ/WRITE payloads are borrowed slices of the record, never copied.
//!
//! Architecture Invariant: hostile input never panics. Every variable-length
//! item is bounded, and no allocation is sized by an untrusted length before
//! that length has been checked against the bytes remaining.

pub mod xdr;

pub mod mount;
pub mod nfs3;
pub mod nfs4;
pub mod nlm;
pub mod portmap;
pub mod rpc;
pub mod server;

pub use xdr::{XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter};
