//! Authentication for SMB2 SESSION_SETUP: NTLMSSP (MS-NLMP) and the SPNEGO
//! wrapper (RFC 4178) around it. Sans-I/O: challenges and keys come from
//! the caller's randomness.

pub mod ntlm;
pub mod spnego;
