//! Dispatch: decode any request or response body by the header's Command,
//! and encode one back. This is what a connection's state machine calls for
//! each message of a compound.

use super::cancel::CancelRequest;
use super::change_notify::{ChangeNotifyRequest, ChangeNotifyResponse};
use super::close::{CloseRequest, CloseResponse};
use super::create::{CreateRequest, CreateResponse};
use super::cursor::Reader;
use super::decode_error::DecodeError;
use super::echo::{EchoRequest, EchoResponse};
use super::error::ErrorResponse;
use super::flush::{FlushRequest, FlushResponse};
use super::header::{Command, Header, HEADER_SIZE};
use super::ioctl::{IoctlRequest, IoctlResponse};
use super::lock::{LockRequest, LockResponse};
use super::logoff::{LogoffRequest, LogoffResponse};
use super::negotiate::{NegotiateRequest, NegotiateResponse};
use super::oplock_break::OplockBreakMessage;
use super::query_directory::{OutputBufferResponse, QueryDirectoryRequest, QueryDirectoryResponse};
use super::query_info::{QueryInfoRequest, QueryInfoResponse};
use super::read::{ReadRequest, ReadResponse};
use super::session_setup::{SessionSetupRequest, SessionSetupResponse};
use super::set_info::{SetInfoRequest, SetInfoResponse};
use super::status::NtStatus;
use super::tree_connect::{TreeConnectRequest, TreeConnectResponse};
use super::tree_disconnect::{TreeDisconnectRequest, TreeDisconnectResponse};
use super::write::{WriteRequest, WriteResponse};

/// Any SMB2 request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Negotiate(NegotiateRequest<'a>),
    SessionSetup(SessionSetupRequest<'a>),
    Logoff(LogoffRequest),
    TreeConnect(TreeConnectRequest<'a>),
    TreeDisconnect(TreeDisconnectRequest),
    Create(CreateRequest<'a>),
    Close(CloseRequest),
    Flush(FlushRequest),
    Read(ReadRequest<'a>),
    Write(WriteRequest<'a>),
    Lock(LockRequest<'a>),
    Ioctl(IoctlRequest<'a>),
    Cancel(CancelRequest),
    Echo(EchoRequest),
    QueryDirectory(QueryDirectoryRequest<'a>),
    ChangeNotify(ChangeNotifyRequest),
    QueryInfo(QueryInfoRequest<'a>),
    SetInfo(SetInfoRequest<'a>),
    /// An oplock break acknowledgment or lease break acknowledgment.
    OplockBreak(OplockBreakMessage),
}

impl<'a> Request<'a> {
    /// Decodes the body of `msg` (one message, header included) as a
    /// request of `command`. An unknown command is an error
    /// (STATUS_INVALID_PARAMETER, MS-SMB2 3.3.5.2).
    pub fn decode(command: Command, msg: &'a [u8]) -> Result<Self, DecodeError> {
        Ok(match command {
            Command::NEGOTIATE => Self::Negotiate(NegotiateRequest::decode(msg)?),
            Command::SESSION_SETUP => Self::SessionSetup(SessionSetupRequest::decode(msg)?),
            Command::LOGOFF => Self::Logoff(LogoffRequest::decode(msg)?),
            Command::TREE_CONNECT => Self::TreeConnect(TreeConnectRequest::decode(msg)?),
            Command::TREE_DISCONNECT => Self::TreeDisconnect(TreeDisconnectRequest::decode(msg)?),
            Command::CREATE => Self::Create(CreateRequest::decode(msg)?),
            Command::CLOSE => Self::Close(CloseRequest::decode(msg)?),
            Command::FLUSH => Self::Flush(FlushRequest::decode(msg)?),
            Command::READ => Self::Read(ReadRequest::decode(msg)?),
            Command::WRITE => Self::Write(WriteRequest::decode(msg)?),
            Command::LOCK => Self::Lock(LockRequest::decode(msg)?),
            Command::IOCTL => Self::Ioctl(IoctlRequest::decode(msg)?),
            Command::CANCEL => Self::Cancel(CancelRequest::decode(msg)?),
            Command::ECHO => Self::Echo(EchoRequest::decode(msg)?),
            Command::QUERY_DIRECTORY => Self::QueryDirectory(QueryDirectoryRequest::decode(msg)?),
            Command::CHANGE_NOTIFY => Self::ChangeNotify(ChangeNotifyRequest::decode(msg)?),
            Command::QUERY_INFO => Self::QueryInfo(QueryInfoRequest::decode(msg)?),
            Command::SET_INFO => Self::SetInfo(SetInfoRequest::decode(msg)?),
            Command::OPLOCK_BREAK => Self::OplockBreak(OplockBreakMessage::decode(msg)?),
            _ => return Err(DecodeError::InvalidValue { field: "Command" }),
        })
    }

    pub fn command(&self) -> Command {
        match self {
            Self::Negotiate(_) => Command::NEGOTIATE,
            Self::SessionSetup(_) => Command::SESSION_SETUP,
            Self::Logoff(_) => Command::LOGOFF,
            Self::TreeConnect(_) => Command::TREE_CONNECT,
            Self::TreeDisconnect(_) => Command::TREE_DISCONNECT,
            Self::Create(_) => Command::CREATE,
            Self::Close(_) => Command::CLOSE,
            Self::Flush(_) => Command::FLUSH,
            Self::Read(_) => Command::READ,
            Self::Write(_) => Command::WRITE,
            Self::Lock(_) => Command::LOCK,
            Self::Ioctl(_) => Command::IOCTL,
            Self::Cancel(_) => Command::CANCEL,
            Self::Echo(_) => Command::ECHO,
            Self::QueryDirectory(_) => Command::QUERY_DIRECTORY,
            Self::ChangeNotify(_) => Command::CHANGE_NOTIFY,
            Self::QueryInfo(_) => Command::QUERY_INFO,
            Self::SetInfo(_) => Command::SET_INFO,
            Self::OplockBreak(_) => Command::OPLOCK_BREAK,
        }
    }

    /// Appends the body (the header must have been appended just before).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Negotiate(m) => m.encode(out),
            Self::SessionSetup(m) => m.encode(out),
            Self::Logoff(m) => m.encode(out),
            Self::TreeConnect(m) => m.encode(out),
            Self::TreeDisconnect(m) => m.encode(out),
            Self::Create(m) => m.encode(out),
            Self::Close(m) => m.encode(out),
            Self::Flush(m) => m.encode(out),
            Self::Read(m) => m.encode(out),
            Self::Write(m) => m.encode(out),
            Self::Lock(m) => m.encode(out),
            Self::Ioctl(m) => m.encode(out),
            Self::Cancel(m) => m.encode(out),
            Self::Echo(m) => m.encode(out),
            Self::QueryDirectory(m) => m.encode(out),
            Self::ChangeNotify(m) => m.encode(out),
            Self::QueryInfo(m) => m.encode(out),
            Self::SetInfo(m) => m.encode(out),
            Self::OplockBreak(m) => m.encode(out),
        }
    }
}

/// Any SMB2 response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    Negotiate(NegotiateResponse<'a>),
    SessionSetup(SessionSetupResponse<'a>),
    Logoff(LogoffResponse),
    TreeConnect(TreeConnectResponse),
    TreeDisconnect(TreeDisconnectResponse),
    Create(CreateResponse<'a>),
    Close(CloseResponse),
    Flush(FlushResponse),
    Read(ReadResponse<'a>),
    Write(WriteResponse),
    Lock(LockResponse),
    Ioctl(IoctlResponse<'a>),
    Echo(EchoResponse),
    QueryDirectory(QueryDirectoryResponse<'a>),
    ChangeNotify(ChangeNotifyResponse<'a>),
    QueryInfo(QueryInfoResponse<'a>),
    SetInfo(SetInfoResponse),
    /// An oplock/lease break notification or a break response.
    OplockBreak(OplockBreakMessage),
    /// MS-SMB2 2.2.2, sent for failures and for interim (PENDING) responses.
    Error(ErrorResponse<'a>),
}

impl<'a> Response<'a> {
    /// Whether a response with this status carries the command's own body
    /// rather than an ERROR body (MS-SMB2 3.3.4.4 and the per-command
    /// sections: MORE_PROCESSING_REQUIRED for SESSION_SETUP, BUFFER_OVERFLOW
    /// for the commands that return a truncated buffer).
    pub fn has_command_body(command: Command, status: NtStatus) -> bool {
        match status {
            NtStatus::PENDING => false,
            NtStatus::MORE_PROCESSING_REQUIRED => command == Command::SESSION_SETUP,
            NtStatus::BUFFER_OVERFLOW => matches!(
                command,
                Command::QUERY_INFO | Command::IOCTL | Command::QUERY_DIRECTORY | Command::CHANGE_NOTIFY | Command::READ
            ),
            NtStatus::NOTIFY_ENUM_DIR => false,
            s => s.is_success(),
        }
    }

    /// Decodes the body of response `msg` whose header is `header`.
    pub fn decode(header: &Header, msg: &'a [u8]) -> Result<Self, DecodeError> {
        let command = header.command;
        let size = Reader::at(msg, HEADER_SIZE).u16("StructureSize")?;
        // IOCTL failures of copy-chunk and some others carry an IOCTL body.
        let ioctl_body = command == Command::IOCTL && size == IoctlResponse::STRUCTURE_SIZE;
        if !Self::has_command_body(command, header.status) && !ioctl_body {
            return Ok(Self::Error(ErrorResponse::decode(msg)?));
        }
        Ok(match command {
            Command::NEGOTIATE => Self::Negotiate(NegotiateResponse::decode(msg)?),
            Command::SESSION_SETUP => Self::SessionSetup(SessionSetupResponse::decode(msg)?),
            Command::LOGOFF => Self::Logoff(LogoffResponse::decode(msg)?),
            Command::TREE_CONNECT => Self::TreeConnect(TreeConnectResponse::decode(msg)?),
            Command::TREE_DISCONNECT => Self::TreeDisconnect(TreeDisconnectResponse::decode(msg)?),
            Command::CREATE => Self::Create(CreateResponse::decode(msg)?),
            Command::CLOSE => Self::Close(CloseResponse::decode(msg)?),
            Command::FLUSH => Self::Flush(FlushResponse::decode(msg)?),
            Command::READ => Self::Read(ReadResponse::decode(msg)?),
            Command::WRITE => Self::Write(WriteResponse::decode(msg)?),
            Command::LOCK => Self::Lock(LockResponse::decode(msg)?),
            Command::IOCTL => Self::Ioctl(IoctlResponse::decode(msg)?),
            Command::ECHO => Self::Echo(EchoResponse::decode(msg)?),
            Command::QUERY_DIRECTORY => {
                Self::QueryDirectory(OutputBufferResponse::decode(msg, "SMB2 QUERY_DIRECTORY Response")?)
            }
            Command::CHANGE_NOTIFY => {
                Self::ChangeNotify(OutputBufferResponse::decode(msg, "SMB2 CHANGE_NOTIFY Response")?)
            }
            Command::QUERY_INFO => Self::QueryInfo(OutputBufferResponse::decode(msg, "SMB2 QUERY_INFO Response")?),
            Command::SET_INFO => Self::SetInfo(SetInfoResponse::decode(msg)?),
            Command::OPLOCK_BREAK => Self::OplockBreak(OplockBreakMessage::decode(msg)?),
            _ => return Err(DecodeError::InvalidValue { field: "Command" }),
        })
    }

    /// Appends the body (the header must have been appended just before).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Negotiate(m) => m.encode(out),
            Self::SessionSetup(m) => m.encode(out),
            Self::Logoff(m) => m.encode(out),
            Self::TreeConnect(m) => m.encode(out),
            Self::TreeDisconnect(m) => m.encode(out),
            Self::Create(m) => m.encode(out),
            Self::Close(m) => m.encode(out),
            Self::Flush(m) => m.encode(out),
            Self::Read(m) => m.encode(out),
            Self::Write(m) => m.encode(out),
            Self::Lock(m) => m.encode(out),
            Self::Ioctl(m) => m.encode(out),
            Self::Echo(m) => m.encode(out),
            Self::QueryDirectory(m) | Self::ChangeNotify(m) | Self::QueryInfo(m) => m.encode(out),
            Self::SetInfo(m) => m.encode(out),
            Self::OplockBreak(m) => m.encode(out),
            Self::Error(m) => m.encode(out),
        }
    }
}
