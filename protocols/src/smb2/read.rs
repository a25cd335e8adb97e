//! MS-SMB2 2.2.19 / 2.2.20: SMB2 READ. The response payload is never copied
//! by the codec: the decoder borrows it, and the encoder writes only the
//! fixed part so the caller can send the data from its own buffer.

use super::cursor::{body, buffer_at, len_u16, len_u32, WireWrite};
use super::decode_error::DecodeError;
use super::header::HEADER_SIZE;
use super::FileId;

/// MS-SMB2 2.2.19 SMB2 READ Request
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadRequest<'a> {
    /// Padding: the offset the client wants the data at in the response
    /// (0x50 puts it right after the READ response's fixed part).
    pub padding: u8,
    /// SMB2_READFLAG_READ_UNBUFFERED / REQUEST_COMPRESSED (3.x).
    pub flags: u8,
    pub length: u32,
    pub offset: u64,
    pub file_id: FileId,
    pub minimum_count: u32,
    /// SMB2_CHANNEL_NONE / RDMA_V1 / RDMA_V1_INVALIDATE / RDMA_TRANSFORM.
    pub channel: u32,
    pub remaining_bytes: u32,
    /// ReadChannelInfo (RDMA descriptors), borrowed.
    pub read_channel_info: &'a [u8],
}

impl<'a> ReadRequest<'a> {
    pub const STRUCTURE_SIZE: u16 = 49;
    const FIXED_END: usize = HEADER_SIZE + 48;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 READ Request", Self::STRUCTURE_SIZE)?;
        let padding = r.u8("Padding")?;
        let flags = r.u8("Flags")?;
        let length = r.u32("Length")?;
        let offset = r.u64("Offset")?;
        let file_id = FileId::read(&mut r)?;
        let minimum_count = r.u32("MinimumCount")?;
        let channel = r.u32("Channel")?;
        let remaining_bytes = r.u32("RemainingBytes")?;
        let info_offset = r.u16("ReadChannelInfoOffset")?;
        let info_length = r.u16("ReadChannelInfoLength")?;
        let read_channel_info = buffer_at(
            msg,
            usize::from(info_offset),
            usize::from(info_length),
            Self::FIXED_END,
            "ReadChannelInfo",
        )?;
        Ok(ReadRequest {
            padding,
            flags,
            length,
            offset,
            file_id,
            minimum_count,
            channel,
            remaining_bytes,
            read_channel_info,
        })
    }

    /// Appends the body; with no channel info the one-byte Buffer is a zero.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(self.padding);
        out.put_u8(self.flags);
        out.put_u32(self.length);
        out.put_u64(self.offset);
        self.file_id.write(out);
        out.put_u32(self.minimum_count);
        out.put_u32(self.channel);
        out.put_u32(self.remaining_bytes);
        if self.read_channel_info.is_empty() {
            out.put_u16(0);
            out.put_u16(0);
            out.put_u8(0);
        } else {
            out.put_u16(Self::FIXED_END as u16);
            out.put_u16(len_u16(self.read_channel_info.len(), "ReadChannelInfo"));
            out.put_bytes(self.read_channel_info);
        }
    }
}

/// MS-SMB2 2.2.20 SMB2 READ Response
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadResponse<'a> {
    pub data_remaining: u32,
    /// SMB2_READ_RESPONSE_RDMA_TRANSFORM (3.1.1) or 0.
    pub flags: u32,
    /// The data, borrowed from the message.
    pub data: &'a [u8],
}

impl<'a> ReadResponse<'a> {
    pub const STRUCTURE_SIZE: u16 = 17;
    /// Where [`ReadResponse::encode_fixed`] puts the data: right after the
    /// fixed part (0x50 from the start of the header).
    pub const DATA_OFFSET: usize = HEADER_SIZE + 16;

    pub fn decode(msg: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = body(msg, "SMB2 READ Response", Self::STRUCTURE_SIZE)?;
        let data_offset = r.u8("DataOffset")?;
        r.u8("Reserved")?;
        let data_length = r.u32("DataLength")?;
        let data_remaining = r.u32("DataRemaining")?;
        let flags = r.u32("Flags")?;
        let data = buffer_at(
            msg,
            usize::from(data_offset),
            data_length as usize,
            Self::DATA_OFFSET,
            "Data",
        )?;
        Ok(ReadResponse { data_remaining, flags, data })
    }

    /// Appends the fixed part for `data_length` bytes of data at
    /// [`Self::DATA_OFFSET`]; the caller sends the data right after it (for
    /// example as a second iovec), so the payload is never copied.
    pub fn encode_fixed(data_length: usize, data_remaining: u32, flags: u32, out: &mut Vec<u8>) {
        out.put_u16(Self::STRUCTURE_SIZE);
        out.put_u8(Self::DATA_OFFSET as u8);
        out.put_u8(0);
        out.put_u32(len_u32(data_length, "DataLength"));
        out.put_u32(data_remaining);
        out.put_u32(flags);
    }

    /// Appends the fixed part and the data (a copy; for tests and clients).
    pub fn encode(&self, out: &mut Vec<u8>) {
        Self::encode_fixed(self.data.len(), self.data_remaining, self.flags, out);
        out.put_bytes(self.data);
    }
}
