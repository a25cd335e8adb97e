//! duetctl's errors and exit statuses.

/// duetctl's exit statuses (also in `duetctl --help` and the README).
pub mod exit {
    /// Success.
    #[allow(dead_code)]
    pub const OK: u8 = 0;
    /// The command ran and found problems: `fsck` found inconsistencies,
    /// `bench` results failed verification.
    pub const PROBLEMS: u8 = 1;
    /// Bad arguments (clap's usage errors too), or arguments the daemon
    /// refused as invalid.
    pub const USAGE: u8 = 2;
    /// The share, user or endpoint does not exist.
    pub const NOT_FOUND: u8 = 3;
    /// It already exists.
    pub const CONFLICT: u8 = 4;
    /// No credentials, or the daemon refused them; or the request is
    /// forbidden in this configuration.
    pub const UNAUTHORIZED: u8 = 5;
    /// duetd could not be reached (refused, timed out, connection lost).
    pub const UNREACHABLE: u8 = 6;
    /// `status`: the node is unhealthy (metadata store FAILED);
    /// `cluster status`: no leader, or a node is unhealthy; a change the
    /// node could not forward because the cluster has no leader.
    pub const UNHEALTHY: u8 = 7;
    /// Anything else: the daemon's internal error, an undecodable reply,
    /// a local I/O error.
    pub const FAILED: u8 = 8;
}

/// The text `--help` ends with.
pub const EXIT_HELP: &str = "\
Exit status:
  0  success
  1  problems found (fsck found inconsistencies, bench failed verification)
  2  usage error, or arguments the daemon refused as invalid
  3  not found (share, user)
  4  conflict (already exists)
  5  unauthorised (no credentials, refused credentials, forbidden)
  6  duetd unreachable (connection refused, timed out or lost)
  7  unhealthy (status: the metadata store FAILED; cluster status: no
     leader or an unhealthy node; a change found no cluster leader)
  8  other errors (the daemon's internal error, an undecodable reply, a
     change forwarded to the leader whose outcome is unknown)";

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
    /// The daemon's reply could not be parsed.
    #[error("{0}")]
    BadReply(String),
    /// A local I/O error (writing man pages, reading a password file).
    #[error("{0}")]
    Io(String),
    /// The daemon answered with an error.
    #[error("{0}")]
    Api(ApiError),
}

impl CtlError {
    pub fn usage(e: ApiError) -> CtlError {
        CtlError::Usage(e.message)
    }

    /// The exit status for this error ([`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            CtlError::Usage(_) => exit::USAGE,
            CtlError::Credentials(_) => exit::UNAUTHORIZED,
            CtlError::Connect { .. } | CtlError::Transport(_) => exit::UNREACHABLE,
            CtlError::BadReply(_) | CtlError::Io(_) => exit::FAILED,
            CtlError::Api(e) => match e.code.as_str() {
                codes::INVALID_ARGUMENT | codes::TOO_LARGE => exit::USAGE,
                codes::NOT_FOUND => exit::NOT_FOUND,
                codes::ALREADY_EXISTS => exit::CONFLICT,
                codes::UNAUTHORIZED | codes::FORBIDDEN | codes::TOO_MANY_ATTEMPTS => exit::UNAUTHORIZED,
                // The cluster has no leader: nothing was done.
                codes::NO_LEADER => exit::UNHEALTHY,
                _ => exit::FAILED,
            },
        }
    }

    pub fn is_unauthorized(&self) -> bool {
        matches!(self, CtlError::Api(e) if e.code == codes::UNAUTHORIZED)
    }

    /// What to do about a cluster error the daemon answered with.
    pub fn cluster_hint(&self) -> Option<&'static str> {
        match self {
            CtlError::Api(e) if e.code == codes::NO_LEADER => Some(
                "the cluster has no leader: nothing was changed; is a majority of its nodes running and connected \
                 (duetctl cluster status)? Try again once one leads",
            ),
            CtlError::Api(e) if e.code == codes::OUTCOME_UNKNOWN => Some(
                "the change may or may not have been applied (it was not sent again): look before retrying \
                 (duetctl share list / user list)",
            ),
            _ => None,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_errors_map_to_their_exit_statuses_and_hints() {
        let no_leader = CtlError::Api(ApiError::no_leader("no leader"));
        assert_eq!(no_leader.exit_code(), exit::UNHEALTHY);
        assert!(no_leader.cluster_hint().unwrap().contains("nothing was changed"));
        let unknown = CtlError::Api(ApiError::outcome_unknown("no answer"));
        assert_eq!(unknown.exit_code(), exit::FAILED);
        assert!(unknown.cluster_hint().unwrap().contains("may or may not have been applied"));
        // A reply without a JSON body maps by its status.
        assert_eq!(ApiError::code_for_status(503), codes::NO_LEADER);
        assert_eq!(ApiError::code_for_status(504), codes::OUTCOME_UNKNOWN);
        assert_eq!(ApiError::no_leader("x").http_status(), 503);
        assert_eq!(ApiError::outcome_unknown("x").http_status(), 504);
        // Existing codes keep their statuses.
        assert_eq!(CtlError::Api(ApiError::not_leader("x")).exit_code(), exit::FAILED);
        assert_eq!(CtlError::Api(ApiError::already_exists("x")).exit_code(), exit::CONFLICT);
        assert!(CtlError::Api(ApiError::already_exists("x")).cluster_hint().is_none());
    }
}
