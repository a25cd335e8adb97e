//! MS-SMB2 2.2.21 / 2.2.22: SMB2 WRITE. The request payload is borrowed by
//! the decoder, and the encoder can leave it to the caller to send.

use super::cursor::{body, buffer_at, len_u16, len_u32, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;
use super::FileId;

/// MS-SMB2 2.2.21 SMB2 WRITE Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteRequest<'a> {
    pub offset: u64,
    pub file_id: FileId,
    pub channel: u32,
    pub remaining_bytes: u32,
    /// SMB2_WRITEFLAG_WRITE_THROUGH / WRITE_UNBUFFERED.
    pub flags: u32,
    /// WriteChannelInfo (RDMA descriptors), borrowed.
    pub write_channel_info: &'a [u8],
    /// The data, borrowed from the message. Its length is the Length field.
    pub data: &'a [u8],
}

impl<'a> WriteRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 49;
    /// Where the encoder puts the data: right after the fixed part (0x70).
    pub const DATA_OFFSET: usize = HEADER_SIZE + 48;
    /// SMB2_WRITEFLAG_WRITE_THROUGH.
    pub const WRITE_THROUGH: u32 = 0x0000_0001;
    /// SMB2_WRITEFLAG_WRITE_UNBUFFERED.
    pub const WRITE_UNBUFFERED: u32 = 0x0000_0002;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 WRITE Request", Self::STRUCTURE_SIZE)?;
        let data_offset = r.u16("DataOffset")?;
        let length = r.u32("Length")?;
        let offset = r.u64("Offset")?;
        let file_id = FileId::read(&mut r)?;
        let channel = r.u32("Channel")?;
        let remaining_bytes = r.u32("RemainingBytes")?;
        let info_offset = r.u16("WriteChannelInfoOffset")?;
        let info_length = r.u16("WriteChannelInfoLength")?;
        let flags = r.u32("Flags")?;
        let data = buffer_at(msg, usize::from(data_offset), length as usize, Self::DATA_OFFSET, "Data")?;
        let write_channel_info = buffer_at(
            msg,
            usize::from(info_offset),
            usize::from(info_length),
            Self::DATA_OFFSET,
            "WriteChannelInfo",
        )?;
        Ok(WriteRequest { offset, file_id, channel, remaining_bytes, flags, write_channel_info, data })
    }

    /// Appends the fixed part for `data_length` bytes of data that the
    /// caller sends right after it (channel info is not supported here).
    pub fn encode_fixed(&self, data_length: usize, out: &mut Vec<u8>) {
        debug_assert!(self.write_channel_info.is_empty());
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(Self::DATA_OFFSET as u16);
        out.put_u32(len_u32(data_length, "Length"));
        out.put_u64(self.offset);
        self.file_id.write(out);
        out.put_u32(self.channel);
        out.put_u32(self.remaining_bytes);
        out.put_u16(0);
        out.put_u16(0);
        out.put_u32(self.flags);
    }

    /// Appends the body with the data (and channel info after it, if any).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(Self::DATA_OFFSET as u16);
        out.put_u32(len_u32(self.data.len(), "Length"));
        out.put_u64(self.offset);
        self.file_id.write(out);
        out.put_u32(self.channel);
        out.put_u32(self.remaining_bytes);
        if self.write_channel_info.is_empty() {
            out.put_u16(0);
            out.put_u16(0);
        } else {
            out.put_u16(len_u16(Self::DATA_OFFSET + self.data.len(), "WriteChannelInfoOffset"));
            out.put_u16(len_u16(self.write_channel_info.len(), "WriteChannelInfoLength"));
        }
        out.put_u32(self.flags);
        out.put_bytes(self.data);
        out.put_bytes(self.write_channel_info);
        if self.data.is_empty() && self.write_channel_info.is_empty() {
            out.put_u8(0);
        }
    }
}

/// MS-SMB2 2.2.22 SMB2 WRITE Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteResponse {
    pub count: u32,
    pub remaining: u32,
}

impl WriteResponse {
    pub const STRUCTURE_SIZE: u16 = 17;

    pub fn decode(msg: &[u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 WRITE Response", Self::STRUCTURE_SIZE)?;
        r.u16("Reserved")?;
        let count = r.u32("Count")?;
        let remaining = r.u32("Remaining")?;
        r.u16("WriteChannelInfoOffset")?;
        r.u16("WriteChannelInfoLength")?;
        Ok(WriteResponse { count, remaining })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u16(0);
        out.put_u32(self.count);
        out.put_u32(self.remaining);
        out.put_u16(0);
        out.put_u16(0);
    }
}
