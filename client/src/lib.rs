//! duet's own file-protocol clients, built on the sans-I/O codecs of
//! `duet-protocols`: an SMB2/3 client ([`smb`]), an NFSv4.1/4.2 client
//! ([`nfs4`]) with the vectorised API after vNFS ([`vec4`]), and an NFSv3
//! client ([`nfs3`]).
//!
//! I/O model: async. Every client is generic over a connected byte
//! stream ([`Io`]: `futures_io`'s `AsyncRead + AsyncWrite + Unpin`) and
//! knows no runtime: the caller connects (duetctl uses glommio's
//! `TcpStream`, one executor per core with many connections each) and
//! hands the stream over. A client is used by one task at a time
//! (`&mut self`); within a connection several requests are in flight at
//! once: `SmbClient::pipeline` sends compounds as far as the granted
//! credits allow and `Nfs4Client::pipeline` one COMPOUND per session slot,
//! then the replies are read and matched to their message id / xid
//! (replies that arrive for another id are kept until asked for). The
//! only third-party crate here is `futures-lite`, for the I/O traits.

pub mod nfs3;
pub mod nfs4;
pub mod rpc;
pub mod smb;
pub mod vec4;

use std::fmt;

/// A client error: transport, protocol status, or a malformed reply.
#[derive(Debug)]
pub enum Error {
    Io(std::io::Error),
    /// A protocol status: which operation, and the status as text.
    Status { op: &'static str, status: String, code: u32 },
    Protocol(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o: {e}"),
            Error::Status { op, status, .. } => write!(f, "{op}: {status}"),
            Error::Protocol(s) => write!(f, "protocol: {s}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// The byte stream a client runs over: a connected TCP stream of any
/// async runtime (or anything else that reads and writes bytes).
pub trait Io: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin {}

impl<T: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin> Io for T {}

pub(crate) fn proto<T>(what: impl Into<String>) -> Result<T> {
    Err(Error::Protocol(what.into()))
}
