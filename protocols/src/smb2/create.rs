//! MS-SMB2 2.2.13 / 2.2.14: SMB2 CREATE (open or create a file, directory or
//! pipe), with its create contexts (see [`super::create_context`]).

use super::create_context::{self, CreateContextRequest, CreateContextResponse};
use super::cursor::{align_up, body, buffer_at, len_u16, len_u32, pad_len, Utf16, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;
use super::{FileId, FileTime};

/// RequestedOplockLevel / OplockLevel values (MS-SMB2 2.2.13).
pub mod oplock_level {
    pub const NONE: u8 = 0x00;
    pub const II: u8 = 0x01;
    pub const EXCLUSIVE: u8 = 0x08;
    pub const BATCH: u8 = 0x09;
    pub const LEASE: u8 = 0xFF;
}

/// ImpersonationLevel values (MS-SMB2 2.2.13).
pub mod impersonation_level {
    pub const ANONYMOUS: u32 = 0;
    pub const IDENTIFICATION: u32 = 1;
    pub const IMPERSONATION: u32 = 2;
    pub const DELEGATE: u32 = 3;
}

/// ShareAccess bits (MS-SMB2 2.2.13).
pub mod share_access {
    pub const READ: u32 = 0x01;
    pub const WRITE: u32 = 0x02;
    pub const DELETE: u32 = 0x04;
}

/// CreateDisposition values (MS-SMB2 2.2.13).
pub mod create_disposition {
    pub const SUPERSEDE: u32 = 0;
    pub const OPEN: u32 = 1;
    pub const CREATE: u32 = 2;
    pub const OPEN_IF: u32 = 3;
    pub const OVERWRITE: u32 = 4;
    pub const OVERWRITE_IF: u32 = 5;
}

/// CreateOptions bits (MS-SMB2 2.2.13).
pub mod create_options {
    pub const DIRECTORY_FILE: u32 = 0x0000_0001;
    pub const WRITE_THROUGH: u32 = 0x0000_0002;
    pub const SEQUENTIAL_ONLY: u32 = 0x0000_0004;
    pub const NO_INTERMEDIATE_BUFFERING: u32 = 0x0000_0008;
    pub const SYNCHRONOUS_IO_ALERT: u32 = 0x0000_0010;
    pub const SYNCHRONOUS_IO_NONALERT: u32 = 0x0000_0020;
    pub const NON_DIRECTORY_FILE: u32 = 0x0000_0040;
    pub const COMPLETE_IF_OPLOCKED: u32 = 0x0000_0100;
    pub const NO_EA_KNOWLEDGE: u32 = 0x0000_0200;
    pub const RANDOM_ACCESS: u32 = 0x0000_0800;
    pub const DELETE_ON_CLOSE: u32 = 0x0000_1000;
    pub const OPEN_BY_FILE_ID: u32 = 0x0000_2000;
    pub const OPEN_FOR_BACKUP_INTENT: u32 = 0x0000_4000;
    pub const NO_COMPRESSION: u32 = 0x0000_8000;
    pub const OPEN_REMOTE_INSTANCE: u32 = 0x0000_0400;
    pub const OPEN_REQUIRING_OPLOCK: u32 = 0x0001_0000;
    pub const DISALLOW_EXCLUSIVE: u32 = 0x0002_0000;
    pub const RESERVE_OPFILTER: u32 = 0x0010_0000;
    pub const OPEN_REPARSE_POINT: u32 = 0x0020_0000;
    pub const OPEN_NO_RECALL: u32 = 0x0040_0000;
    pub const OPEN_FOR_FREE_SPACE_QUERY: u32 = 0x0080_0000;
}

/// CreateAction values (MS-SMB2 2.2.14).
pub mod create_action {
    pub const SUPERSEDED: u32 = 0;
    pub const OPENED: u32 = 1;
    pub const CREATED: u32 = 2;
    pub const OVERWRITTEN: u32 = 3;
}

/// MS-SMB2 2.2.13 SMB2 CREATE Request
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest<'a> {
    pub security_flags: u8,
    pub requested_oplock_level: u8,
    pub impersonation_level: u32,
    pub smb_create_flags: u64,
    pub desired_access: u32,
    pub file_attributes: u32,
    pub share_access: u32,
    pub create_disposition: u32,
    pub create_options: u32,
    /// The path relative to the share root, UTF-16LE, without a leading
    /// backslash; empty for the root.
    pub name: Utf16<'a>,
    pub create_contexts: Vec<CreateContextRequest<'a>>,
}

impl<'a> CreateRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 57;
    /// Where the name starts: right after the fixed part (0x78).
    pub const NAME_AT: usize = HEADER_SIZE + 56;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 CREATE Request", Self::STRUCTURE_SIZE)?;
        let security_flags = r.u8("SecurityFlags")?;
        let requested_oplock_level = r.u8("RequestedOplockLevel")?;
        let impersonation_level = r.u32("ImpersonationLevel")?;
        let smb_create_flags = r.u64("SmbCreateFlags")?;
        r.u64("Reserved")?;
        let desired_access = r.u32("DesiredAccess")?;
        let file_attributes = r.u32("FileAttributes")?;
        let share_access = r.u32("ShareAccess")?;
        let create_disposition = r.u32("CreateDisposition")?;
        let create_options = r.u32("CreateOptions")?;
        let name_offset = r.u16("NameOffset")?;
        let name_length = r.u16("NameLength")?;
        let contexts_offset = r.u32("CreateContextsOffset")?;
        let contexts_length = r.u32("CreateContextsLength")?;
        let name = buffer_at(msg, usize::from(name_offset), usize::from(name_length), Self::NAME_AT, "Name")?;
        let contexts = buffer_at(
            msg,
            contexts_offset as usize,
            contexts_length as usize,
            Self::NAME_AT,
            "CreateContexts",
        )?;
        Ok(CreateRequest {
            security_flags,
            requested_oplock_level,
            impersonation_level,
            smb_create_flags,
            desired_access,
            file_attributes,
            share_access,
            create_disposition,
            create_options,
            name: Utf16::from_wire(name, "Name")?,
            create_contexts: CreateContextRequest::decode_list(contexts)?,
        })
    }

    /// Appends the body: the name at 0x78, then (8-aligned) the contexts.
    /// An empty name still takes the one byte MS-SMB2 requires of Buffer.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let name_len = self.name.byte_len();
        let name_end = Self::NAME_AT + name_len.max(1);
        let contexts_len = create_context::list_len(&self.create_contexts);
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.security_flags);
        out.put_u8(self.requested_oplock_level);
        out.put_u32(self.impersonation_level);
        out.put_u64(self.smb_create_flags);
        out.put_u64(0);
        out.put_u32(self.desired_access);
        out.put_u32(self.file_attributes);
        out.put_u32(self.share_access);
        out.put_u32(self.create_disposition);
        out.put_u32(self.create_options);
        out.put_u16(Self::NAME_AT as u16);
        out.put_u16(len_u16(name_len, "NameLength"));
        if contexts_len == 0 {
            out.put_u32(0);
            out.put_u32(0);
            self.name.write(out);
            if name_len == 0 {
                out.put_u8(0);
            }
        } else {
            out.put_u32(len_u32(align_up(name_end, 8), "CreateContextsOffset"));
            out.put_u32(len_u32(contexts_len, "CreateContextsLength"));
            self.name.write(out);
            out.put_zeros(name_len.max(1) - name_len + pad_len(name_end, 8));
            create_context::encode_list(&self.create_contexts, out);
        }
    }
}

/// MS-SMB2 2.2.14 SMB2 CREATE Response
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateResponse<'a> {
    pub oplock_level: u8,
    /// SMB2_CREATE_FLAG_REPARSEPOINT (0x01, 3.1.1).
    pub flags: u8,
    pub create_action: u32,
    pub creation_time: FileTime,
    pub last_access_time: FileTime,
    pub last_write_time: FileTime,
    pub change_time: FileTime,
    pub allocation_size: u64,
    pub end_of_file: u64,
    pub file_attributes: u32,
    pub file_id: FileId,
    pub create_contexts: Vec<CreateContextResponse<'a>>,
}

impl<'a> CreateResponse<'a> {
    pub const STRUCTURE_SIZE: u16 = 89;
    /// Where the contexts start: right after the fixed part (0x98).
    pub const CONTEXTS_AT: usize = HEADER_SIZE + 88;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 CREATE Response", Self::STRUCTURE_SIZE)?;
        let oplock_level = r.u8("OplockLevel")?;
        let flags = r.u8("Flags")?;
        let create_action = r.u32("CreateAction")?;
        let creation_time = r.u64("CreationTime")?;
        let last_access_time = r.u64("LastAccessTime")?;
        let last_write_time = r.u64("LastWriteTime")?;
        let change_time = r.u64("ChangeTime")?;
        let allocation_size = r.u64("AllocationSize")?;
        let end_of_file = r.u64("EndofFile")?;
        let file_attributes = r.u32("FileAttributes")?;
        r.u32("Reserved2")?;
        let file_id = FileId::read(&mut r)?;
        let contexts_offset = r.u32("CreateContextsOffset")?;
        let contexts_length = r.u32("CreateContextsLength")?;
        let contexts = buffer_at(
            msg,
            contexts_offset as usize,
            contexts_length as usize,
            Self::CONTEXTS_AT,
            "CreateContexts",
        )?;
        Ok(CreateResponse {
            oplock_level,
            flags,
            create_action,
            creation_time,
            last_access_time,
            last_write_time,
            change_time,
            allocation_size,
            end_of_file,
            file_attributes,
            file_id,
            create_contexts: CreateContextResponse::decode_list(contexts)?,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let contexts_len = create_context::list_len(&self.create_contexts);
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.oplock_level);
        out.put_u8(self.flags);
        out.put_u32(self.create_action);
        out.put_u64(self.creation_time);
        out.put_u64(self.last_access_time);
        out.put_u64(self.last_write_time);
        out.put_u64(self.change_time);
        out.put_u64(self.allocation_size);
        out.put_u64(self.end_of_file);
        out.put_u32(self.file_attributes);
        out.put_u32(0);
        self.file_id.write(out);
        if contexts_len == 0 {
            out.put_u32(0);
            out.put_u32(0);
        } else {
            out.put_u32(Self::CONTEXTS_AT as u32);
            out.put_u32(len_u32(contexts_len, "CreateContextsLength"));
            create_context::encode_list(&self.create_contexts, out);
        }
    }
}
