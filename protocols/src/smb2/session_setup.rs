//! MS-SMB2 2.2.5 / 2.2.6: SMB2 SESSION_SETUP. The security buffers (SPNEGO /
//! NTLMSSP tokens) are borrowed, not interpreted, here.

use super::cursor::{body, buffer_at, len_u16, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;

/// MS-SMB2 2.2.5 SMB2 SESSION_SETUP Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionSetupRequest<'a> {
    /// SMB2_SESSION_FLAG_BINDING (0x01) binds a new channel (3.x).
    pub flags: u8,
    pub security_mode: u8,
    pub capabilities: u32,
    pub channel: u32,
    pub previous_session_id: u64,
    pub security_buffer: &'a [u8],
}

impl<'a> SessionSetupRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 25;
    pub const BINDING: u8 = 0x01;
    const FIXED_END: usize = HEADER_SIZE + 24;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 SESSION_SETUP Request", Self::STRUCTURE_SIZE)?;
        let flags = r.u8("Flags")?;
        let security_mode = r.u8("SecurityMode")?;
        let capabilities = r.u32("Capabilities")?;
        let channel = r.u32("Channel")?;
        let offset = r.u16("SecurityBufferOffset")?;
        let length = r.u16("SecurityBufferLength")?;
        let previous_session_id = r.u64("PreviousSessionId")?;
        let security_buffer =
            buffer_at(msg, usize::from(offset), usize::from(length), Self::FIXED_END, "SecurityBuffer")?;
        Ok(SessionSetupRequest { flags, security_mode, capabilities, channel, previous_session_id, security_buffer })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.flags);
        out.put_u8(self.security_mode);
        out.put_u32(self.capabilities);
        out.put_u32(self.channel);
        out.put_u16(Self::FIXED_END as u16);
        out.put_u16(len_u16(self.security_buffer.len(), "SecurityBufferLength"));
        out.put_u64(self.previous_session_id);
        out.put_bytes(self.security_buffer);
        if self.security_buffer.is_empty() {
            out.put_u8(0);
        }
    }
}

/// MS-SMB2 2.2.6 SMB2 SESSION_SETUP Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionSetupResponse<'a> {
    /// SMB2_SESSION_FLAG_IS_GUEST (0x1), IS_NULL (0x2), ENCRYPT_DATA (0x4).
    pub session_flags: u16,
    pub security_buffer: &'a [u8],
}

impl<'a> SessionSetupResponse<'a> {
    pub const STRUCTURE_SIZE: u16 = 9;
    pub const IS_GUEST: u16 = 0x0001;
    pub const IS_NULL: u16 = 0x0002;
    pub const ENCRYPT_DATA: u16 = 0x0004;
    const FIXED_END: usize = HEADER_SIZE + 8;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 SESSION_SETUP Response", Self::STRUCTURE_SIZE)?;
        let session_flags = r.u16("SessionFlags")?;
        let offset = r.u16("SecurityBufferOffset")?;
        let length = r.u16("SecurityBufferLength")?;
        let security_buffer =
            buffer_at(msg, usize::from(offset), usize::from(length), Self::FIXED_END, "SecurityBuffer")?;
        Ok(SessionSetupResponse { session_flags, security_buffer })
    }

    /// Appends the body. Like Windows and Samba, the offset is 0x48 even for
    /// an empty buffer, and no pad byte follows an empty buffer.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(self.session_flags);
        out.put_u16(Self::FIXED_END as u16);
        out.put_u16(len_u16(self.security_buffer.len(), "SecurityBufferLength"));
        out.put_bytes(self.security_buffer);
    }
}
