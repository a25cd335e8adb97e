//! duetctl's errors. Every one of them exits with status 2.

use std::io;

use duet_admin_api::{codes, ApiError};

#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Bad arguments, caught before contacting the daemon.
    #[error("{0}")]
    Usage(String),
    /// No credentials could be found.
    #[error("{0}")]
    Credentials(String),
    /// The TCP connection could not be made.
    #[error("cannot connect to duetd at {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    /// Sending the request or reading the reply failed.
    #[error("{0}")]
    Transport(String),
    /// The daemon answered with an error.
    #[error("{0}")]
    Api(ApiError),
}

impl CtlError {
    pub fn usage(e: ApiError) -> CtlError {
        CtlError::Usage(e.message)
    }

    pub fn is_unauthorized(&self) -> bool {
        matches!(self, CtlError::Api(e) if e.code == codes::UNAUTHORIZED)
    }

    /// The connection-level hint (authentication hints need context and are
    /// added by the caller).
    pub fn connect_hint(&self) -> Option<String> {
        match self {
            CtlError::Connect { source, .. } => Some(match source.kind() {
                io::ErrorKind::ConnectionRefused => {
                    "is duetd running? (use --addr or DUET_ADMIN_ADDR for another address)"
                        .to_string()
                }
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                    "no answer: is the address right and is duetd running?".to_string()
                }
                _ => "duetd may not be running, or --addr / DUET_ADMIN_ADDR is wrong".to_string(),
            }),
            _ => None,
        }
    }
}
