//! duet's own file-protocol clients, built on the sans-I/O codecs of
//! `duet-protocols`: an SMB2/3 client ([`smb`]), an NFSv4.1/4.2 client
//! ([`nfs4`]) with the vectorised API after vNFS ([`vec4`]), and an NFSv3
//! client ([`nfs3`]).
//!
//! I/O model: blocking `std::net::TcpStream`s, one connection per thread
//! (the load generator runs N threads for N clients). An SMB connection
//! can keep several compounds in flight (`SmbClient::pipeline`). No new
//! third-party crates: everything here is std plus `duet-protocols`.

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

pub(crate) fn proto<T>(what: impl Into<String>) -> Result<T> {
    Err(Error::Protocol(what.into()))
}
