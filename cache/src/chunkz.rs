//! The stored form of a compressed chunk (issue 15: files with
//! FILE_ATTRIBUTE_COMPRESSED, MS-FSCC 2.6, set by FSCTL_SET_COMPRESSION).
//!
//! A chunk (`duet_fs::CHUNK_SIZE` bytes of one file) is stored either
//! plain, as `chunks/xx/<file>.<index>` whose bytes are the chunk's, or
//! compressed, as `chunks/xx/<file>.<index>.z` in this format. The name
//! says which, never the content: a plain chunk holds whatever a client
//! wrote, which may look like anything.
//!
//! Format, version 1 (little-endian):
//!
//! | bytes  | field                                            |
//! |--------|--------------------------------------------------|
//! | 0..8   | magic `DUETCZ01`                                 |
//! | 8..12  | logical length: the chunk's bytes (at most CHUNK) |
//! | 12..16 | payload length                                   |
//! | 16..20 | CRC-32 of the payload                            |
//! | 20..24 | CRC-32 of bytes 0..20                            |
//! | 24..   | payload: one LZ4 block (the LZ4 block format), then zeros to the next 4096 bytes |
//!
//! The logical length is what the plain file would hold (a multiple of
//! 4096, or less when the chunk was never written to its end): reads
//! past it are zeros, as past the end of a plain chunk file.
//!
//! Architecture Invariant: a compressed chunk that does not decode (bad
//! magic, lengths, CRC or LZ4 stream) is an error to its caller, never
//! bytes: the appliance fails the read or stops the destager loudly.

use duet_fs::CHUNK_SIZE;

/// The file name suffix of a compressed chunk.
pub const SUFFIX: &str = ".z";
const MAGIC: &[u8; 8] = b"DUETCZ01";
const HEADER: usize = 24;
/// Stored files are written in whole blocks of this size (O_DIRECT).
pub const ALIGN: usize = 4096;

/// Why a stored compressed chunk cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChunkzError {
    #[error("too short for a compressed chunk header ({0} bytes)")]
    Short(usize),
    #[error("not a compressed chunk (bad magic)")]
    Magic,
    #[error("header checksum mismatch")]
    HeaderCrc,
    #[error("logical length {0} is over the chunk size")]
    Logical(u32),
    #[error("payload of {0} bytes runs past the file's {1}")]
    Payload(u32, usize),
    #[error("payload checksum mismatch")]
    PayloadCrc,
    #[error("LZ4 stream does not decode to the logical length: {0}")]
    Lz4(String),
}

fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// The stored form of the chunk bytes `logical` (padded with zeros to a
/// multiple of [`ALIGN`]), or `None` when compressing would not save at
/// least one 4096-byte block over the plain file (the caller stores the
/// chunk plain, as NTFS keeps incompressible units uncompressed).
pub fn encode(logical: &[u8]) -> Option<Vec<u8>> {
    assert!(logical.len() as u64 <= CHUNK_SIZE, "a chunk is at most CHUNK_SIZE bytes");
    let payload = lz4_flex::block::compress(logical);
    let stored = align_up(HEADER + payload.len());
    if stored + ALIGN > align_up(logical.len()) {
        return None;
    }
    let mut out = Vec::with_capacity(stored);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(logical.len() as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    let hcrc = crc32fast::hash(&out[..20]);
    out.extend_from_slice(&hcrc.to_le_bytes());
    out.extend_from_slice(&payload);
    out.resize(stored, 0);
    Some(out)
}

/// The chunk's bytes from its stored form (`stored` may carry the zeros
/// of the last block, or more).
pub fn decode(stored: &[u8]) -> Result<Vec<u8>, ChunkzError> {
    if stored.len() < HEADER {
        return Err(ChunkzError::Short(stored.len()));
    }
    if &stored[..8] != MAGIC {
        return Err(ChunkzError::Magic);
    }
    let u32_at = |i: usize| u32::from_le_bytes(stored[i..i + 4].try_into().expect("4 bytes"));
    if crc32fast::hash(&stored[..20]) != u32_at(20) {
        return Err(ChunkzError::HeaderCrc);
    }
    let logical = u32_at(8);
    if logical as u64 > CHUNK_SIZE {
        return Err(ChunkzError::Logical(logical));
    }
    let plen = u32_at(12);
    let Some(payload) = stored.get(HEADER..HEADER + plen as usize) else {
        return Err(ChunkzError::Payload(plen, stored.len()));
    };
    if crc32fast::hash(payload) != u32_at(16) {
        return Err(ChunkzError::PayloadCrc);
    }
    let mut out = vec![0u8; logical as usize];
    match lz4_flex::block::decompress_into(payload, &mut out) {
        Ok(n) if n == out.len() => Ok(out),
        Ok(n) => Err(ChunkzError::Lz4(format!("{n} bytes, not {logical}"))),
        Err(e) => Err(ChunkzError::Lz4(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(len: usize) -> Vec<u8> {
        let line = b"duet keeps every acknowledged change durable; ";
        (0..len).map(|i| line[i % line.len()] ^ ((i / 4099) as u8 & 1)).collect()
    }

    fn noise(len: usize, mut s: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    #[test]
    fn round_trips_and_saves_space() {
        for len in [65536usize, 1 << 20, CHUNK_SIZE as usize] {
            let data = text(len);
            let z = encode(&data).expect("text compresses");
            assert_eq!(z.len() % ALIGN, 0);
            assert!(z.len() * 4 <= len, "{len} -> {}", z.len());
            assert_eq!(decode(&z).unwrap(), data);
        }
        // Zeros (a mostly sparse chunk): LZ4 stops near 255:1.
        let zeros = vec![0u8; CHUNK_SIZE as usize];
        let z = encode(&zeros).unwrap();
        assert!(z.len() <= 5 * ALIGN, "{}", z.len());
        assert_eq!(decode(&z).unwrap(), zeros);
    }

    #[test]
    fn incompressible_chunks_stay_plain() {
        assert_eq!(encode(&noise(CHUNK_SIZE as usize, 7)), None);
        assert_eq!(encode(&noise(4096, 9)), None);
        // A 4 KiB chunk cannot save a block: the header needs one.
        assert_eq!(encode(&text(4096)), None);
        assert!(encode(&text(8192)).is_some());
    }

    #[test]
    fn damage_is_an_error_never_bytes() {
        let data = text(1 << 20);
        let z = encode(&data).unwrap();
        assert_eq!(decode(&z[..10]), Err(ChunkzError::Short(10)));
        let mut bad = z.clone();
        bad[0] ^= 1;
        assert_eq!(decode(&bad), Err(ChunkzError::Magic));
        let mut bad = z.clone();
        bad[9] ^= 1;
        assert_eq!(decode(&bad), Err(ChunkzError::HeaderCrc));
        let mut bad = z.clone();
        bad[HEADER + 5] ^= 0x40;
        assert_eq!(decode(&bad), Err(ChunkzError::PayloadCrc));
        let plen = u32::from_le_bytes(z[12..16].try_into().unwrap()) as usize;
        assert!(matches!(decode(&z[..HEADER + plen - 1]), Err(ChunkzError::Payload(..))));
        // Every single-byte change of the header or payload, and random
        // overwrites: an error or (a change in the zero padding) the same
        // bytes, never a panic or other bytes.
        let mut s = 0x1234_5678u64;
        for i in 0..(HEADER + plen).min(4000) {
            let mut bad = z.clone();
            bad[i] = bad[i].wrapping_add(1 + (i as u8 % 7));
            assert!(decode(&bad).is_err(), "byte {i}");
        }
        for _ in 0..200 {
            let mut bad = z.clone();
            let junk = noise(64, s);
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            let at = (s >> 33) as usize % (bad.len() - 64);
            bad[at..at + 64].copy_from_slice(&junk);
            match decode(&bad) {
                Ok(d) => assert_eq!(d, data, "a change at {at} decoded to other bytes"),
                Err(_) => {}
            }
        }
    }

    #[test]
    fn forged_headers_are_refused() {
        // A header whose CRC is right but whose lengths are not.
        let mut h = Vec::new();
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&(CHUNK_SIZE as u32 + 1).to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&crc32fast::hash(&[]).to_le_bytes());
        let c = crc32fast::hash(&h);
        h.extend_from_slice(&c.to_le_bytes());
        assert_eq!(decode(&h), Err(ChunkzError::Logical(CHUNK_SIZE as u32 + 1)));
        // A valid CRC over an LZ4 stream that decodes short.
        let payload = lz4_flex::block::compress(&text(1000));
        let mut h = Vec::new();
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&2000u32.to_le_bytes());
        h.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        h.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        let c = crc32fast::hash(&h);
        h.extend_from_slice(&c.to_le_bytes());
        h.extend_from_slice(&payload);
        assert!(matches!(decode(&h), Err(ChunkzError::Lz4(_))));
    }
}
