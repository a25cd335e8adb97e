//! SMB2/3 wire codec (MS-SMB2, MS-FSCC), sans-I/O.
//!
//! One file per command, in the declarative style of smb-rs: each struct
//! mirrors its MS-SMB2 section field by field (fields that the codec derives,
//! such as offsets, lengths and StructureSize, are computed, not stored).
//!
//! Conventions shared by every command module:
//! - `decode(msg)` takes one SMB2 message starting at the first byte of its
//!   64-byte header (a [`compound::Message::bytes`]); the body starts at
//!   `msg[64]`. Every buffer offset MS-SMB2 defines "from the beginning of
//!   the SMB2 header" is resolved against `msg[0]`. Decoders borrow: names,
//!   security blobs and READ/WRITE payloads are `&'a [u8]` slices of `msg`.
//! - `encode(&self, out)` appends the body only, and must be called right
//!   after the header was appended: the encoders compute offsets as
//!   64 + position in the body.
//! - Hostile input never panics; decoders return [`DecodeError`], whose
//!   [`DecodeError::status`] is the NTSTATUS to answer with.
//! - Encoders assert (panic) only on caller bugs, such as a name longer than
//!   a 16-bit length field can express.
//! - Where MS-SMB2 leaves a choice to the sender (offset of an empty buffer,
//!   the one-byte Buffer of an empty body), response encoders do what
//!   Windows and Samba do and request encoders what the Linux client does;
//!   `tests/smb2_capture.rs` checks this against captured traffic.
//!
//! Code map: `header` (2.2.1), `compound` (NextCommand chains, 3.3.5.2.7),
//! `message` (dispatch by Command), one module per command (`negotiate` with
//! its contexts, `session_setup`, `logoff`, `tree_connect`,
//! `tree_disconnect`, `create` + `create_context`, `close`, `flush`, `read`,
//! `write`, `lock`, `ioctl` with the FSCTL payloads, `cancel`, `echo`,
//! `query_directory`, `change_notify`, `query_info`, `set_info`,
//! `oplock_break`), `error` (2.2.2), `transform` (2.2.41, 2.2.42), `fscc`
//! (MS-FSCC information classes), `status` (NTSTATUS), `decode_error`,
//! `cursor` (bounds-checked reading, appending writing, UTF-16 strings).

pub mod cancel;
pub mod change_notify;
pub mod close;
pub mod compound;
pub mod create;
pub mod create_context;
pub mod cursor;
pub mod decode_error;
pub mod echo;
pub mod error;
pub mod flush;
pub mod fscc;
pub mod header;
pub mod ioctl;
pub mod lock;
pub mod logoff;
pub mod message;
pub mod negotiate;
pub mod oplock_break;
pub mod query_directory;
pub mod query_info;
pub mod read;
pub mod server;
pub mod session_setup;
pub mod set_info;
pub mod status;
pub mod stream_name;
pub mod transform;
pub mod tree_connect;
pub mod tree_disconnect;
pub mod write;

pub use decode_error::DecodeError;
pub use header::{Command, Header, HeaderFlags, HeaderIds, HEADER_SIZE};
pub use status::NtStatus;

/// An SMB2 FileId (MS-SMB2 2.2.14.1): Persistent and Volatile halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FileId {
    pub persistent: u64,
    pub volatile: u64,
}

impl FileId {
    /// 0xFFFFFFFFFFFFFFFF in both halves: "the FileId of the previous
    /// operation" in a related compound (3.3.5.2.7.2).
    pub const RELATED: FileId = FileId { persistent: u64::MAX, volatile: u64::MAX };

    pub(crate) fn read(r: &mut cursor::Reader<'_>) -> Result<FileId, DecodeError> {
        Ok(FileId { persistent: r.u64("FileId.Persistent")?, volatile: r.u64("FileId.Volatile")? })
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        use cursor::WireWrite;
        out.put_u64(self.persistent);
        out.put_u64(self.volatile);
    }
}

/// A 16-byte GUID (MS-DTYP 2.3.4), kept in wire order.
pub type Guid = [u8; 16];

/// A FILETIME (MS-DTYP 2.3.3): 100 ns intervals since 1601-01-01 UTC.
pub type FileTime = u64;
