//! NTLMSSP (MS-NLMP): the three messages, NTLMv2 verification on the server
//! side (3.3.2), the client side computation (3.3.2 / 3.1.5, used by tests
//! and tools), key exchange and the NTLM message signature (3.4.4.2) that
//! SPNEGO's mechListMIC needs.
//!
//! Sans-I/O: the server challenge, the timestamp and the client's random
//! values come in as arguments.

use hmac::{Hmac, Mac};
use md4::{Digest, Md4};
use md5::Md5;

/// "NTLMSSP\0".
pub const SIGNATURE: &[u8; 8] = b"NTLMSSP\0";

/// NegotiateFlags bits (MS-NLMP 2.2.2.5).
pub mod flags {
    pub const UNICODE: u32 = 0x0000_0001;
    pub const OEM: u32 = 0x0000_0002;
    pub const REQUEST_TARGET: u32 = 0x0000_0004;
    pub const SIGN: u32 = 0x0000_0010;
    pub const SEAL: u32 = 0x0000_0020;
    pub const LM_KEY: u32 = 0x0000_0080;
    pub const NTLM: u32 = 0x0000_0200;
    pub const ANONYMOUS: u32 = 0x0000_0800;
    pub const ALWAYS_SIGN: u32 = 0x0000_8000;
    pub const TARGET_TYPE_DOMAIN: u32 = 0x0001_0000;
    pub const TARGET_TYPE_SERVER: u32 = 0x0002_0000;
    pub const EXTENDED_SESSIONSECURITY: u32 = 0x0008_0000;
    pub const TARGET_INFO: u32 = 0x0080_0000;
    pub const VERSION: u32 = 0x0200_0000;
    pub const N128: u32 = 0x2000_0000;
    pub const KEY_EXCH: u32 = 0x4000_0000;
    pub const N56: u32 = 0x8000_0000;
}

/// AV_PAIR ids (MS-NLMP 2.2.2.1).
pub mod av {
    pub const EOL: u16 = 0;
    pub const NB_COMPUTER_NAME: u16 = 1;
    pub const NB_DOMAIN_NAME: u16 = 2;
    pub const DNS_COMPUTER_NAME: u16 = 3;
    pub const DNS_DOMAIN_NAME: u16 = 4;
    pub const FLAGS: u16 = 6;
    pub const TIMESTAMP: u16 = 7;
    /// MsvAvFlags bit: the AUTHENTICATE message carries a MIC.
    pub const FLAG_MIC_PRESENT: u32 = 0x2;
}

/// Why an NTLM exchange failed. Every variant is STATUS_LOGON_FAILURE on
/// the wire except `Malformed` (STATUS_INVALID_PARAMETER).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NtlmError {
    Malformed(&'static str),
    /// Unknown user.
    NoSuchUser,
    /// The NTProofStr or the MIC does not verify.
    WrongPassword,
    /// NTLMv1 / LM only: refused.
    Unsupported,
    /// A message out of order.
    BadState,
}

type HmacMd5 = Hmac<Md5>;

/// HMAC-MD5 over the concatenation of `parts`.
pub fn hmac_md5(key: &[u8], parts: &[&[u8]]) -> [u8; 16] {
    // HMAC accepts keys of any length.
    let mut m = <HmacMd5 as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn md5(parts: &[&[u8]]) -> [u8; 16] {
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// UTF-16LE bytes of `s`.
pub fn utf16le(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

fn from_utf16le(b: &[u8]) -> Result<String, NtlmError> {
    if b.len() & 1 != 0 {
        return Err(NtlmError::Malformed("odd UTF-16 length"));
    }
    let units = b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
    char::decode_utf16(units)
        .collect::<Result<String, _>>()
        .map_err(|_| NtlmError::Malformed("bad UTF-16"))
}

/// The NT hash of a password: MD4(UTF-16LE(password)) (MS-NLMP 3.3.1).
pub fn nt_hash(password: &str) -> [u8; 16] {
    let mut h = Md4::new();
    h.update(utf16le(password));
    h.finalize().into()
}

/// NTOWFv2 = HMAC-MD5(NT hash, UTF-16LE(UPPER(user) + domain)) (3.3.2).
pub fn ntowfv2(nt_hash: &[u8; 16], user: &str, domain: &str) -> [u8; 16] {
    let mut who = user.to_uppercase();
    who.push_str(domain);
    hmac_md5(nt_hash, &[&utf16le(&who)])
}

/// RC4, for the key exchange and the sealing of signatures.
#[derive(Clone)]
pub struct Rc4 {
    s: [u8; 256],
    i: u8,
    j: u8,
}

impl Rc4 {
    pub fn new(key: &[u8]) -> Rc4 {
        let mut s = [0u8; 256];
        for (i, b) in s.iter_mut().enumerate() {
            *b = i as u8;
        }
        let mut j: u8 = 0;
        if !key.is_empty() {
            for i in 0..256 {
                j = j.wrapping_add(s[i]).wrapping_add(key[i % key.len()]);
                s.swap(i, usize::from(j));
            }
        }
        Rc4 { s, i: 0, j: 0 }
    }

    pub fn apply(&mut self, data: &mut [u8]) {
        for b in data {
            self.i = self.i.wrapping_add(1);
            self.j = self.j.wrapping_add(self.s[usize::from(self.i)]);
            self.s.swap(usize::from(self.i), usize::from(self.j));
            let k = self.s[usize::from(
                self.s[usize::from(self.i)].wrapping_add(self.s[usize::from(self.j)]),
            )];
            *b ^= k;
        }
    }
}

/// One-shot RC4.
pub fn rc4(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    Rc4::new(key).apply(&mut out);
    out
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, NtlmError> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(NtlmError::Malformed("truncated"))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, NtlmError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(NtlmError::Malformed("truncated"))
}

/// A (Len, MaxLen, Offset) field at `at`, resolved in `msg`.
fn field(msg: &[u8], at: usize) -> Result<&[u8], NtlmError> {
    let len = usize::from(u16_at(msg, at)?);
    let off = u32_at(msg, at + 4)? as usize;
    if len == 0 {
        return Ok(&[]);
    }
    let end = off.checked_add(len).ok_or(NtlmError::Malformed("field"))?;
    msg.get(off..end)
        .ok_or(NtlmError::Malformed("field out of bounds"))
}

fn check_header(msg: &[u8], kind: u32) -> Result<(), NtlmError> {
    if msg.get(..8) != Some(&SIGNATURE[..]) {
        return Err(NtlmError::Malformed("signature"));
    }
    if u32_at(msg, 8)? != kind {
        return Err(NtlmError::Malformed("message type"));
    }
    Ok(())
}

/// Parses AV pairs; stops at MsvAvEOL. At most 64 pairs.
pub fn parse_av_pairs(mut b: &[u8]) -> Result<Vec<(u16, &[u8])>, NtlmError> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let id = u16_at(b, 0)?;
        let len = usize::from(u16_at(b, 2)?);
        if id == av::EOL {
            return Ok(out);
        }
        let v = b.get(4..4 + len).ok_or(NtlmError::Malformed("AV pair"))?;
        out.push((id, v));
        if out.len() > 64 {
            return Err(NtlmError::Malformed("too many AV pairs"));
        }
        b = &b[4 + len..];
    }
    Ok(out)
}

fn put_av(out: &mut Vec<u8>, id: u16, v: &[u8]) {
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(v.len() as u16).to_le_bytes());
    out.extend_from_slice(v);
}

/// The 8-byte VERSION structure duet sends (6.1 build 7601, NTLM revision 15).
const VERSION: [u8; 8] = [6, 1, 0xb1, 0x1d, 0, 0, 0, 0x0f];

/// Writes a message: fixed header bytes then payloads; each payload field
/// is (position of its 8-byte descriptor, bytes).
fn assemble(mut fixed: Vec<u8>, fields: &[(usize, &[u8])]) -> Vec<u8> {
    for (at, data) in fields {
        let off = fixed.len() as u32;
        let len = data.len() as u16;
        fixed[*at..*at + 2].copy_from_slice(&len.to_le_bytes());
        fixed[*at + 2..*at + 4].copy_from_slice(&len.to_le_bytes());
        fixed[*at + 4..*at + 8].copy_from_slice(&off.to_le_bytes());
        fixed.extend_from_slice(data);
    }
    fixed
}

/// NEGOTIATE_MESSAGE (2.2.1.1): only the flags matter to a server.
pub fn parse_negotiate(msg: &[u8]) -> Result<u32, NtlmError> {
    check_header(msg, 1)?;
    u32_at(msg, 12)
}

/// A NEGOTIATE_MESSAGE as a client sends it.
pub fn client_negotiate(flags: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(40);
    m.extend_from_slice(SIGNATURE);
    m.extend_from_slice(&1u32.to_le_bytes());
    m.extend_from_slice(&flags.to_le_bytes());
    m.extend_from_slice(&[0u8; 16]);
    m.extend_from_slice(&VERSION);
    m
}

/// The flags a client normally asks for.
pub const CLIENT_FLAGS: u32 = flags::UNICODE
    | flags::REQUEST_TARGET
    | flags::SIGN
    | flags::SEAL
    | flags::NTLM
    | flags::ALWAYS_SIGN
    | flags::EXTENDED_SESSIONSECURITY
    | flags::TARGET_INFO
    | flags::VERSION
    | flags::N128
    | flags::KEY_EXCH
    | flags::N56;

/// A parsed CHALLENGE_MESSAGE (2.2.1.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub flags: u32,
    pub server_challenge: [u8; 8],
    pub target_name: String,
    pub target_info: Vec<u8>,
}

impl Challenge {
    pub fn parse(msg: &[u8]) -> Result<Challenge, NtlmError> {
        check_header(msg, 2)?;
        let target_name = from_utf16le(field(msg, 12)?)?;
        let flags = u32_at(msg, 20)?;
        let mut server_challenge = [0u8; 8];
        server_challenge.copy_from_slice(msg.get(24..32).ok_or(NtlmError::Malformed("challenge"))?);
        let target_info = field(msg, 40)?.to_vec();
        Ok(Challenge {
            flags,
            server_challenge,
            target_name,
            target_info,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut fixed = Vec::with_capacity(56);
        fixed.extend_from_slice(SIGNATURE);
        fixed.extend_from_slice(&2u32.to_le_bytes());
        fixed.extend_from_slice(&[0u8; 8]); // TargetNameFields
        fixed.extend_from_slice(&self.flags.to_le_bytes());
        fixed.extend_from_slice(&self.server_challenge);
        fixed.extend_from_slice(&[0u8; 8]); // Reserved
        fixed.extend_from_slice(&[0u8; 8]); // TargetInfoFields
        fixed.extend_from_slice(&VERSION);
        let name = utf16le(&self.target_name);
        assemble(fixed, &[(12, &name), (40, &self.target_info)])
    }
}

/// A parsed AUTHENTICATE_MESSAGE (2.2.1.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticate<'a> {
    pub lm_response: &'a [u8],
    pub nt_response: &'a [u8],
    pub domain: String,
    pub user: String,
    pub workstation: String,
    pub encrypted_session_key: &'a [u8],
    pub flags: u32,
    /// Where the 16-byte MIC is, when the message has one.
    pub mic_at: Option<usize>,
}

impl<'a> Authenticate<'a> {
    pub fn parse(msg: &'a [u8]) -> Result<Authenticate<'a>, NtlmError> {
        check_header(msg, 3)?;
        let lm_response = field(msg, 12)?;
        let nt_response = field(msg, 20)?;
        let domain = from_utf16le(field(msg, 28)?)?;
        let user = from_utf16le(field(msg, 36)?)?;
        let workstation = from_utf16le(field(msg, 44)?)?;
        let encrypted_session_key = field(msg, 52)?;
        let flags = u32_at(msg, 60)?;
        // The payload starts after the MIC when there is one: the smallest
        // payload offset tells whether the 16 bytes at 72 belong to the header.
        let mut first_payload = usize::MAX;
        for at in [12usize, 20, 28, 36, 44, 52] {
            if u16_at(msg, at)? > 0 {
                first_payload = first_payload.min(u32_at(msg, at + 4)? as usize);
            }
        }
        let mut mic_at = None;
        if first_payload >= 88 && msg.len() >= 88 {
            // Only when the client says so in MsvAvFlags.
            if nt_response.len() > 44 {
                if let Ok(pairs) = parse_av_pairs(&nt_response[44..]) {
                    for (id, v) in pairs {
                        if id == av::FLAGS && v.len() == 4 {
                            let f = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                            if f & av::FLAG_MIC_PRESENT != 0 {
                                mic_at = Some(72);
                            }
                        }
                    }
                }
            }
        }
        Ok(Authenticate {
            lm_response,
            nt_response,
            domain,
            user,
            workstation,
            encrypted_session_key,
            flags,
            mic_at,
        })
    }

    pub fn is_anonymous(&self) -> bool {
        self.user.is_empty()
            && self.nt_response.is_empty()
            && self.lm_response.iter().all(|b| *b == 0)
    }
}

/// Who authenticated, and the session key (ExportedSessionKey).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub user: String,
    pub domain: String,
    pub anonymous: bool,
    pub session_key: [u8; 16],
    pub flags: u32,
}

/// Verifies an NTLMv2 response (MS-NLMP 3.3.2) for a known NT hash; on
/// success returns the SessionBaseKey. Tries the domain as sent, then an
/// empty domain, then the upper-cased domain (what clients variously use).
pub fn verify_ntlmv2(
    nt_hash: &[u8; 16],
    user: &str,
    domain: &str,
    server_challenge: &[u8; 8],
    nt_response: &[u8],
) -> Result<[u8; 16], NtlmError> {
    if nt_response.len() < 16 + 28 {
        return Err(NtlmError::Unsupported);
    }
    let (proof, temp) = nt_response.split_at(16);
    // NTLMv2_CLIENT_CHALLENGE (MS-NLMP 2.2.2.7): RespType, HiRespType,
    // reserved, TimeStamp, ChallengeFromClient, reserved, then AvPairs. A
    // blob whose AV pairs run past its end is malformed (Samba and
    // Windows answer INVALID_PARAMETER; smbtorture
    // smb2.session.ntlmssp_bug14932), whatever the proof.
    parse_av_pairs(&temp[28..])?;
    let upper = domain.to_uppercase();
    for d in [domain, "", upper.as_str()] {
        let key = ntowfv2(nt_hash, user, d);
        let expect = hmac_md5(&key, &[server_challenge, temp]);
        if ct_eq(&expect, proof) {
            return Ok(hmac_md5(&key, &[proof]));
        }
    }
    Err(NtlmError::WrongPassword)
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Server side of one NTLMSSP exchange.
#[derive(Debug, Clone)]
pub struct ServerContext {
    server_challenge: [u8; 8],
    negotiate: Vec<u8>,
    challenge: Vec<u8>,
    flags: u32,
    done: bool,
}

impl ServerContext {
    /// `server_challenge` must be fresh randomness.
    pub fn new(server_challenge: [u8; 8]) -> ServerContext {
        ServerContext {
            server_challenge,
            negotiate: Vec::new(),
            challenge: Vec::new(),
            flags: 0,
            done: false,
        }
    }

    /// Answers a NEGOTIATE_MESSAGE with a CHALLENGE_MESSAGE. `domain` and
    /// `computer` are NetBIOS names; `timestamp` a FILETIME, or `None` to
    /// leave MsvAvTimestamp out (then clients send no MIC).
    pub fn challenge(
        &mut self,
        negotiate: &[u8],
        domain: &str,
        computer: &str,
        timestamp: Option<u64>,
    ) -> Result<Vec<u8>, NtlmError> {
        if !self.challenge.is_empty() {
            return Err(NtlmError::BadState);
        }
        let client = parse_negotiate(negotiate)?;
        let mut f = flags::UNICODE
            | flags::REQUEST_TARGET
            | flags::NTLM
            | flags::ALWAYS_SIGN
            | flags::TARGET_TYPE_SERVER
            | flags::EXTENDED_SESSIONSECURITY
            | flags::TARGET_INFO
            | flags::VERSION;
        f |= client & (flags::SIGN | flags::SEAL | flags::KEY_EXCH | flags::N128 | flags::N56);
        let mut info = Vec::new();
        put_av(&mut info, av::NB_DOMAIN_NAME, &utf16le(domain));
        put_av(&mut info, av::NB_COMPUTER_NAME, &utf16le(computer));
        put_av(
            &mut info,
            av::DNS_DOMAIN_NAME,
            &utf16le(&domain.to_lowercase()),
        );
        put_av(
            &mut info,
            av::DNS_COMPUTER_NAME,
            &utf16le(&computer.to_lowercase()),
        );
        if let Some(t) = timestamp {
            put_av(&mut info, av::TIMESTAMP, &t.to_le_bytes());
        }
        put_av(&mut info, av::EOL, &[]);
        let c = Challenge {
            flags: f,
            server_challenge: self.server_challenge,
            target_name: domain.to_string(),
            target_info: info,
        };
        self.negotiate = negotiate.to_vec();
        self.challenge = c.encode();
        self.flags = f;
        Ok(self.challenge.clone())
    }

    /// Checks an AUTHENTICATE_MESSAGE. `nt_hash_of` gives the NT hash of a
    /// user (None: unknown). Anonymous logons are returned as such; the
    /// caller decides whether to allow them.
    pub fn authenticate(
        &mut self,
        msg: &[u8],
        nt_hash_of: &dyn Fn(&str) -> Option<[u8; 16]>,
    ) -> Result<Authenticated, NtlmError> {
        if self.challenge.is_empty() || self.done {
            return Err(NtlmError::BadState);
        }
        self.done = true;
        let a = Authenticate::parse(msg)?;
        if a.is_anonymous() {
            return Ok(Authenticated {
                user: String::new(),
                domain: a.domain,
                anonymous: true,
                session_key: [0; 16],
                flags: a.flags,
            });
        }
        let hash = nt_hash_of(&a.user).ok_or(NtlmError::NoSuchUser)?;
        let base = verify_ntlmv2(
            &hash,
            &a.user,
            &a.domain,
            &self.server_challenge,
            a.nt_response,
        )?;
        let session_key = if a.flags & flags::KEY_EXCH != 0 && a.encrypted_session_key.len() == 16 {
            let k = rc4(&base, a.encrypted_session_key);
            let mut out = [0u8; 16];
            out.copy_from_slice(&k);
            out
        } else {
            base
        };
        if let Some(at) = a.mic_at {
            let mut zeroed = msg.to_vec();
            let mic = msg.get(at..at + 16).ok_or(NtlmError::Malformed("MIC"))?;
            zeroed[at..at + 16].fill(0);
            let expect = hmac_md5(&session_key, &[&self.negotiate, &self.challenge, &zeroed]);
            if !ct_eq(&expect, mic) {
                return Err(NtlmError::WrongPassword);
            }
        }
        Ok(Authenticated {
            user: a.user,
            domain: a.domain,
            anonymous: false,
            session_key,
            flags: a.flags & self.flags,
        })
    }
}

/// The client side: builds an NTLMv2 AUTHENTICATE_MESSAGE answering
/// `challenge`. Returns it and the ExportedSessionKey. With a timestamp in
/// the target info, a MIC is included (then `negotiate` must be the
/// NEGOTIATE_MESSAGE that was sent).
#[allow(clippy::too_many_arguments)]
pub fn client_authenticate(
    negotiate: &[u8],
    challenge: &[u8],
    user: &str,
    domain: &str,
    nt_hash: &[u8; 16],
    client_challenge: [u8; 8],
    random_session_key: [u8; 16],
    time: u64,
) -> Result<(Vec<u8>, [u8; 16]), NtlmError> {
    let c = Challenge::parse(challenge)?;
    let key = ntowfv2(nt_hash, user, domain);
    let pairs = parse_av_pairs(&c.target_info)?;
    let ts = pairs
        .iter()
        .find(|(id, v)| *id == av::TIMESTAMP && v.len() == 8)
        .map(|(_, v)| {
            let mut b = [0u8; 8];
            b.copy_from_slice(v);
            u64::from_le_bytes(b)
        });
    let with_mic = ts.is_some();
    let mut info = Vec::new();
    for (id, v) in &pairs {
        put_av(&mut info, *id, v);
    }
    if with_mic {
        put_av(&mut info, av::FLAGS, &av::FLAG_MIC_PRESENT.to_le_bytes());
    }
    put_av(&mut info, av::EOL, &[]);
    let mut temp = vec![1u8, 1, 0, 0, 0, 0, 0, 0];
    temp.extend_from_slice(&ts.unwrap_or(time).to_le_bytes());
    temp.extend_from_slice(&client_challenge);
    temp.extend_from_slice(&[0; 4]);
    temp.extend_from_slice(&info);
    temp.extend_from_slice(&[0; 4]);
    let proof = hmac_md5(&key, &[&c.server_challenge, &temp]);
    let mut nt = proof.to_vec();
    nt.extend_from_slice(&temp);
    let lm = if with_mic {
        vec![0u8; 24]
    } else {
        let mut lm = hmac_md5(&key, &[&c.server_challenge, &client_challenge]).to_vec();
        lm.extend_from_slice(&client_challenge);
        lm
    };
    let base = hmac_md5(&key, &[&proof]);
    let key_exch = c.flags & flags::KEY_EXCH != 0;
    let (exported, enc) = if key_exch {
        (random_session_key, rc4(&base, &random_session_key))
    } else {
        (base, Vec::new())
    };
    let mut fixed = Vec::with_capacity(88);
    fixed.extend_from_slice(SIGNATURE);
    fixed.extend_from_slice(&3u32.to_le_bytes());
    fixed.extend_from_slice(&[0u8; 48]);
    fixed.extend_from_slice(&(c.flags & CLIENT_FLAGS).to_le_bytes());
    fixed.extend_from_slice(&VERSION);
    if with_mic {
        fixed.extend_from_slice(&[0u8; 16]);
    }
    let dom = utf16le(domain);
    let usr = utf16le(user);
    let ws = utf16le("DUETTEST");
    let mut msg = assemble(
        fixed,
        &[
            (12, &lm),
            (20, &nt),
            (28, &dom),
            (36, &usr),
            (44, &ws),
            (52, &enc),
        ],
    );
    if with_mic {
        let mic = hmac_md5(&exported, &[negotiate, challenge, &msg]);
        msg[72..88].copy_from_slice(&mic);
    }
    Ok((msg, exported))
}

/// Which direction a signature is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

/// NTLM message signature with extended session security (MS-NLMP
/// 3.4.4.2), as used for SPNEGO's mechListMIC: the first message of a
/// fresh sealing state, sequence number `seq`.
pub fn sign(
    session_key: &[u8; 16],
    negotiated: u32,
    dir: Direction,
    seq: u32,
    message: &[u8],
) -> [u8; 16] {
    let (sign_magic, seal_magic): (&[u8], &[u8]) = match dir {
        Direction::ClientToServer => (
            b"session key to client-to-server signing key magic constant\0",
            b"session key to client-to-server sealing key magic constant\0",
        ),
        Direction::ServerToClient => (
            b"session key to server-to-client signing key magic constant\0",
            b"session key to server-to-client sealing key magic constant\0",
        ),
    };
    let sign_key = md5(&[session_key, sign_magic]);
    let seal_base: &[u8] = if negotiated & flags::N128 != 0 {
        session_key
    } else if negotiated & flags::N56 != 0 {
        &session_key[..7]
    } else {
        &session_key[..5]
    };
    let seal_key = md5(&[seal_base, seal_magic]);
    let seq_bytes = seq.to_le_bytes();
    let mac = hmac_md5(&sign_key, &[&seq_bytes, message]);
    let mut checksum = [0u8; 8];
    checksum.copy_from_slice(&mac[..8]);
    if negotiated & flags::KEY_EXCH != 0 {
        Rc4::new(&seal_key).apply(&mut checksum);
    }
    let mut out = [0u8; 16];
    out[..4].copy_from_slice(&1u32.to_le_bytes());
    out[4..12].copy_from_slice(&checksum);
    out[12..].copy_from_slice(&seq_bytes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// MS-NLMP 4.2.4: NTLMv2 with User / Domain / Password.
    #[test]
    fn ms_nlmp_4_2_4_vectors() {
        let h = nt_hash("Password");
        assert_eq!(h.to_vec(), hex("a4f49c406510bdcab6824ee7c30fd852"));
        let key = ntowfv2(&h, "User", "Domain");
        assert_eq!(key.to_vec(), hex("0c868a403bfd7a93a3001ef22ef02e3f"));
        let server_challenge: [u8; 8] = hex("0123456789abcdef").try_into().unwrap();
        let mut temp = vec![1u8, 1, 0, 0, 0, 0, 0, 0];
        temp.extend_from_slice(&[0; 8]);
        temp.extend_from_slice(&[0xaa; 8]);
        temp.extend_from_slice(&[0; 4]);
        let mut info = Vec::new();
        put_av(&mut info, av::NB_DOMAIN_NAME, &utf16le("Domain"));
        put_av(&mut info, av::NB_COMPUTER_NAME, &utf16le("Server"));
        put_av(&mut info, av::EOL, &[]);
        temp.extend_from_slice(&info);
        temp.extend_from_slice(&[0; 4]);
        let proof = hmac_md5(&key, &[&server_challenge, &temp]);
        assert_eq!(proof.to_vec(), hex("68cd0ab851e51c96aabc927bebef6a1c"));
        let mut nt = proof.to_vec();
        nt.extend_from_slice(&temp);
        let base = verify_ntlmv2(&h, "User", "Domain", &server_challenge, &nt).unwrap();
        assert_eq!(base.to_vec(), hex("8de40ccadbc14a82f15cb0ad0de95ca3"));
        let enc = rc4(&base, &[0x55; 16]);
        assert_eq!(enc, hex("c5dad2544fc9799094ce1ce90bc9d03e"));
        // The LMv2 response of 4.2.4.2.1.
        let mut lm = hmac_md5(&key, &[&server_challenge, &[0xaa; 8]]).to_vec();
        lm.extend_from_slice(&[0xaa; 8]);
        assert_eq!(lm, hex("86c35097ac9cec102554764a57cccc19aaaaaaaaaaaaaaaa"));
        // A wrong password does not verify.
        assert_eq!(
            verify_ntlmv2(
                &nt_hash("password"),
                "User",
                "Domain",
                &server_challenge,
                &nt
            ),
            Err(NtlmError::WrongPassword)
        );
    }

    #[test]
    fn rc4_matches_rfc_6229() {
        assert_eq!(
            rc4(&[1, 2, 3, 4, 5], &[0u8; 8]),
            vec![0xb2, 0x39, 0x63, 0x05, 0xf0, 0x3d, 0xc0, 0x27]
        );
    }

    #[test]
    fn server_and_client_agree_with_and_without_mic() {
        for ts in [None, Some(0x01d9_0000_0000_0000u64)] {
            let mut srv = ServerContext::new([7; 8]);
            let neg = client_negotiate(CLIENT_FLAGS);
            let chal = srv.challenge(&neg, "DUET", "NAS", ts).unwrap();
            let (auth, key) = client_authenticate(
                &neg,
                &chal,
                "alice",
                "DUET",
                &nt_hash("secret"),
                [3; 8],
                [9; 16],
                5,
            )
            .unwrap();
            let who = srv
                .authenticate(&auth, &|u| (u == "alice").then(|| nt_hash("secret")))
                .unwrap();
            assert_eq!(who.user, "alice");
            assert_eq!(who.session_key, key);
            assert_eq!(
                Authenticate::parse(&auth).unwrap().mic_at.is_some(),
                ts.is_some()
            );

            let mut srv = ServerContext::new([7; 8]);
            let chal = srv.challenge(&neg, "DUET", "NAS", ts).unwrap();
            let (auth, _) = client_authenticate(
                &neg,
                &chal,
                "alice",
                "DUET",
                &nt_hash("wrong"),
                [3; 8],
                [9; 16],
                5,
            )
            .unwrap();
            assert_eq!(
                srv.authenticate(&auth, &|u| (u == "alice").then(|| nt_hash("secret"))),
                Err(NtlmError::WrongPassword)
            );
        }
    }

    /// The NTLMv2 response of NetApp's diagnostic tool (Samba bug 14932):
    /// its AV pairs run past the blob, so it is malformed
    /// (INVALID_PARAMETER), not a wrong password.
    #[test]
    fn a_client_blob_whose_av_pairs_overrun_is_malformed() {
        let mut resp = vec![0xab; 16];
        resp.extend_from_slice(&[1, 1, 0, 0, 0, 0, 0, 0]);
        resp.extend_from_slice(&[0x3f; 8]);
        resp.extend_from_slice(&[0xb8, 0x82, 0x3a, 0xf1, 0xb3, 0xdd, 0x08, 0x15]);
        resp.extend_from_slice(&[0, 0, 0, 0]);
        resp.extend_from_slice(&[0x11, 0xa2, 0x08, 0x81]);
        resp.extend_from_slice(&[0x50; 47]);
        assert_eq!(resp.len(), 95);
        let r = verify_ntlmv2(&nt_hash("pw"), "u", "D", &[7; 8], &resp);
        assert!(matches!(r, Err(NtlmError::Malformed(_))), "{r:?}");
        // Well-formed but with a wrong proof: a wrong password.
        let mut ok = resp[..44].to_vec();
        ok.extend_from_slice(&[0, 0, 0, 0]);
        let r = verify_ntlmv2(&nt_hash("pw"), "u", "D", &[7; 8], &ok);
        assert!(matches!(r, Err(NtlmError::WrongPassword)), "{r:?}");
    }

    #[test]
    fn hostile_messages_fail_cleanly() {
        let mut srv = ServerContext::new([1; 8]);
        assert!(srv.challenge(b"NTLMSSP\0", "D", "C", None).is_err());
        let neg = client_negotiate(CLIENT_FLAGS);
        srv.challenge(&neg, "D", "C", None).unwrap();
        let mut bad = vec![0u8; 88];
        bad[..8].copy_from_slice(SIGNATURE);
        bad[8] = 3;
        bad[20] = 0xff;
        bad[24] = 0xff;
        bad[25] = 0xff;
        assert!(srv.authenticate(&bad, &|_| None).is_err());
        for n in 0..100 {
            let _ = Authenticate::parse(&bad[..n.min(bad.len())]);
        }
    }
}
