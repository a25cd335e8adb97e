//! MS-SMB2 2.2.41 SMB2 TRANSFORM_HEADER (encrypted messages) and 2.2.42
//! SMB2 COMPRESSION_TRANSFORM_HEADER (compressed messages). Only the wire
//! structures: encryption and compression themselves live elsewhere.

use super::cursor::{len_u32, Reader, WireWrite};
use super::decode_error::DecodeError;

/// ProtocolId of an encrypted message: 0xFD 'S' 'M' 'B'.
pub const TRANSFORM_PROTOCOL_ID: [u8; 4] = [0xFD, b'S', b'M', b'B'];
/// ProtocolId of a compressed message: 0xFC 'S' 'M' 'B'.
pub const COMPRESSION_PROTOCOL_ID: [u8; 4] = [0xFC, b'S', b'M', b'B'];

/// What the first four bytes of a transport frame say it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// An SMB2 message or compound (0xFE 'SMB').
    Plain,
    /// An encrypted message (0xFD 'SMB').
    Encrypted,
    /// A compressed message (0xFC 'SMB').
    Compressed,
    /// An SMB1 message (0xFF 'SMB'), e.g. a multi-protocol NEGOTIATE.
    Smb1,
}

impl FrameKind {
    pub fn of(frame: &[u8]) -> Result<FrameKind, DecodeError> {
        match frame.get(..4) {
            Some([0xFE, b'S', b'M', b'B']) => Ok(FrameKind::Plain),
            Some([0xFD, b'S', b'M', b'B']) => Ok(FrameKind::Encrypted),
            Some([0xFC, b'S', b'M', b'B']) => Ok(FrameKind::Compressed),
            Some([0xFF, b'S', b'M', b'B']) => Ok(FrameKind::Smb1),
            Some(_) => Err(DecodeError::InvalidValue { field: "ProtocolId" }),
            None => Err(DecodeError::Truncated { field: "ProtocolId" }),
        }
    }
}

/// MS-SMB2 2.2.41 SMB2 TRANSFORM_HEADER (52 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransformHeader {
    /// The AEAD tag.
    pub signature: [u8; 16],
    /// 11 bytes used for AES-CCM, 12 for AES-GCM; the rest is zero.
    pub nonce: [u8; 16],
    pub original_message_size: u32,
    /// Flags (3.1.1: 0x0001 Encrypted) / EncryptionAlgorithm (3.0: 0x0001
    /// AES-128-CCM).
    pub flags: u16,
    pub session_id: u64,
}

impl TransformHeader {
    pub const SIZE: usize = 52;
    pub const ENCRYPTED: u16 = 0x0001;
    /// The authenticated data of the AEAD: the header from Nonce to the
    /// end (MS-SMB2 3.1.4.3).
    pub const AAD_RANGE: std::ops::Range<usize> = 20..52;

    /// Decodes the header at the start of `frame`; returns it and the
    /// encrypted message after it (borrowed). The ciphertext must be exactly
    /// OriginalMessageSize bytes.
    pub fn decode(frame: &[u8]) -> Result<(TransformHeader, &[u8]), DecodeError> {
        let mut r = Reader::new(frame);
        if r.array::<4>("ProtocolId")? != TRANSFORM_PROTOCOL_ID {
            return Err(DecodeError::InvalidValue { field: "ProtocolId" });
        }
        let h = TransformHeader {
            signature: r.array("Signature")?,
            nonce: r.array("Nonce")?,
            original_message_size: r.u32("OriginalMessageSize")?,
            flags: {
                r.u16("Reserved")?;
                r.u16("Flags")?
            },
            session_id: r.u64("SessionId")?,
        };
        let ciphertext = r.rest();
        if ciphertext.len() != h.original_message_size as usize {
            return Err(DecodeError::InvalidValue { field: "OriginalMessageSize" });
        }
        Ok((h, ciphertext))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_bytes(&TRANSFORM_PROTOCOL_ID);
        out.put_bytes(&self.signature);
        out.put_bytes(&self.nonce);
        out.put_u32(self.original_message_size);
        out.put_u16(0);
        out.put_u16(self.flags);
        out.put_u64(self.session_id);
    }
}

/// MS-SMB2 2.2.42.1 SMB2_COMPRESSION_TRANSFORM_HEADER_UNCHAINED and
/// 2.2.42.2 SMB2_COMPRESSION_TRANSFORM_HEADER_CHAINED (16 bytes; Flags tells
/// which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompressionTransformHeader {
    pub original_compressed_segment_size: u32,
    /// For unchained: the algorithm; for chained: NONE.
    pub compression_algorithm: u16,
    /// SMB2_COMPRESSION_FLAG_NONE (0) or _CHAINED (1).
    pub flags: u16,
    /// Unchained: Offset from the end of this header to the compressed data
    /// (the bytes in between are sent uncompressed). Chained: Length of the
    /// compressed payload.
    pub offset_or_length: u32,
}

impl CompressionTransformHeader {
    pub const SIZE: usize = 16;
    pub const CHAINED: u16 = 0x0001;

    /// Decodes the header; returns it and the rest of the frame.
    pub fn decode(frame: &[u8]) -> Result<(CompressionTransformHeader, &[u8]), DecodeError> {
        let mut r = Reader::new(frame);
        if r.array::<4>("ProtocolId")? != COMPRESSION_PROTOCOL_ID {
            return Err(DecodeError::InvalidValue { field: "ProtocolId" });
        }
        let h = CompressionTransformHeader {
            original_compressed_segment_size: r.u32("OriginalCompressedSegmentSize")?,
            compression_algorithm: r.u16("CompressionAlgorithm")?,
            flags: r.u16("Flags")?,
            offset_or_length: r.u32("Offset/Length")?,
        };
        Ok((h, r.rest()))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_bytes(&COMPRESSION_PROTOCOL_ID);
        out.put_u32(self.original_compressed_segment_size);
        out.put_u16(self.compression_algorithm);
        out.put_u16(self.flags);
        out.put_u32(self.offset_or_length);
    }

    /// For an unchained message: the uncompressed prefix and the compressed
    /// data that follow the header.
    pub fn split_unchained<'a>(&self, rest: &'a [u8]) -> Result<(&'a [u8], &'a [u8]), DecodeError> {
        if self.flags & Self::CHAINED != 0 {
            return Err(DecodeError::InvalidValue { field: "Flags" });
        }
        let at = self.offset_or_length as usize;
        if at > rest.len() {
            return Err(DecodeError::BadBuffer { field: "Offset" });
        }
        Ok(rest.split_at(at))
    }
}

/// MS-SMB2 2.2.42.2.1 SMB2_COMPRESSION_CHAINED_PAYLOAD_HEADER with its
/// payload (borrowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainedPayload<'a> {
    pub compression_algorithm: u16,
    pub flags: u16,
    /// OriginalPayloadSize: present for LZNT1, LZ77, LZ77+Huffman and LZ4.
    pub original_payload_size: Option<u32>,
    pub payload: &'a [u8],
}

impl<'a> ChainedPayload<'a> {
    fn has_original_size(algorithm: u16) -> bool {
        matches!(algorithm, 0x0001 | 0x0002 | 0x0003 | 0x0005)
    }

    /// Decodes the chained payloads that follow a chained compression header
    /// (the first one's header overlaps the transform header's last 8 bytes,
    /// so pass the frame from offset 8). At most `max` payloads.
    pub fn decode_chain(buf: &'a [u8], max: usize) -> Result<Vec<Self>, DecodeError> {
        let mut r = Reader::new(buf);
        let mut list = Vec::new();
        while r.remaining() > 0 {
            if list.len() == max {
                return Err(DecodeError::LimitExceeded { field: "compression payloads" });
            }
            let compression_algorithm = r.u16("CompressionAlgorithm")?;
            let flags = r.u16("Flags")?;
            let length = r.u32("Length")? as usize;
            let (original_payload_size, data_len) = if Self::has_original_size(compression_algorithm) {
                let len = length.checked_sub(4).ok_or(DecodeError::InvalidValue { field: "Length" })?;
                (Some(r.u32("OriginalPayloadSize")?), len)
            } else {
                (None, length)
            };
            let payload = r.bytes(data_len, "CompressedPayload")?;
            list.push(ChainedPayload { compression_algorithm, flags, original_payload_size, payload });
        }
        Ok(list)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(self.compression_algorithm);
        out.put_u16(self.flags);
        let extra = if self.original_payload_size.is_some() { 4 } else { 0 };
        out.put_u32(len_u32(self.payload.len() + extra, "Length"));
        if let Some(size) = self.original_payload_size {
            out.put_u32(size);
        }
        out.put_bytes(self.payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transform_header_round_trip_and_size_check() {
        let h = TransformHeader {
            signature: [1; 16],
            nonce: [2; 16],
            original_message_size: 3,
            flags: TransformHeader::ENCRYPTED,
            session_id: 7,
        };
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(out.len(), TransformHeader::SIZE);
        out.extend_from_slice(&[9, 9, 9]);
        assert_eq!(FrameKind::of(&out), Ok(FrameKind::Encrypted));
        assert_eq!(TransformHeader::decode(&out), Ok((h, &[9u8, 9, 9][..])));
        out.push(0);
        assert!(TransformHeader::decode(&out).is_err());
    }

    #[test]
    fn chained_payloads_round_trip() {
        let list = [
            ChainedPayload { compression_algorithm: 0, flags: 1, original_payload_size: None, payload: b"head" },
            ChainedPayload { compression_algorithm: 5, flags: 0, original_payload_size: Some(100), payload: b"lz4" },
        ];
        let mut out = Vec::new();
        for p in &list {
            p.encode(&mut out);
        }
        assert_eq!(ChainedPayload::decode_chain(&out, 8).unwrap(), list);
        assert!(ChainedPayload::decode_chain(&out, 1).is_err());
    }
}
