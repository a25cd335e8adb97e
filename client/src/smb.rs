//! An async SMB2/3 client (MS-SMB2) over Direct TCP (MS-SMB2 2.1: a
//! 4-byte big-endian length before each frame), on the message codecs of
//! `duet_protocols::smb2` and the NTLMSSP/SPNEGO client of
//! `duet_protocols::auth`.
//!
//! What it does: NEGOTIATE (3.1.1, 3.0.2, 2.1; 3.3.5.4), NTLMv2
//! SESSION_SETUP wrapped in SPNEGO (3.2.5.3), TREE_CONNECT, and the file
//! operations the benchmark needs, each as one *related compound*
//! (3.2.4.1.4, 3.3.5.2.7.2): CREATE+WRITE+CLOSE for a small file,
//! CREATE+QUERY_INFO+CLOSE for stat, CREATE+READ+CLOSE, CREATE(delete on
//! close)+CLOSE for remove. Messages are signed (3.2.4.1.1) when the
//! server requires signing; encryption is not offered.
//! `pipeline` keeps several compounds in flight on one connection,
//! within the credits the server granted (3.2.4.1.5): it sends them, then
//! reads frames and matches each response to its MessageId (3.2.5.1),
//! keeping responses that arrive for other ids until they are asked for.
//! The client runs over any connected stream ([`crate::Io`]).

use std::collections::HashMap;

use futures_lite::{AsyncReadExt, AsyncWriteExt};

use duet_protocols::auth::{ntlm, spnego};
use duet_protocols::smb2::close::CloseRequest;
use duet_protocols::smb2::compound::{Compound, CompoundWriter};
use duet_protocols::smb2::create::{CreateRequest, CreateResponse};
use duet_protocols::smb2::cursor::Utf16;
use duet_protocols::smb2::fscc::{DirectoryEntry, DirectoryInfoClass};
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::negotiate::{algorithm, dialect, NegotiateContext, NegotiateRequest};
use duet_protocols::smb2::query_directory::{QueryDirectoryRequest, QueryDirectoryResponse};
use duet_protocols::smb2::query_info::{QueryInfoRequest, QueryInfoResponse};
use duet_protocols::smb2::read::{ReadRequest, ReadResponse};
use duet_protocols::smb2::server::crypto::{derive_keys, preauth_update, SigningKey};
use duet_protocols::smb2::session_setup::SessionSetupRequest;
use duet_protocols::smb2::tree_connect::TreeConnectRequest;
use duet_protocols::smb2::write::WriteRequest;
use duet_protocols::smb2::{Command, FileId, Header, HeaderFlags, HeaderIds, NtStatus};

use crate::{proto, Error, Io, Result};

/// MS-SMB2 2.2.13 CreateDisposition values.
pub mod disposition {
    pub const OPEN: u32 = 1;
    pub const CREATE: u32 = 2;
    pub const OPEN_IF: u32 = 3;
    pub const OVERWRITE_IF: u32 = 5;
}

/// MS-SMB2 2.2.13 CreateOptions bits.
pub mod options {
    pub const DIRECTORY_FILE: u32 = 0x0000_0001;
    pub const NON_DIRECTORY_FILE: u32 = 0x0000_0040;
    pub const DELETE_ON_CLOSE: u32 = 0x0000_1000;
}

/// MS-SMB2 2.2.13.1 access mask bits used here.
pub mod access {
    pub const READ_DATA: u32 = 0x0000_0001;
    pub const WRITE_DATA: u32 = 0x0000_0002;
    pub const READ_ATTRIBUTES: u32 = 0x0000_0080;
    pub const DELETE: u32 = 0x0001_0000;
    pub const SYNCHRONIZE: u32 = 0x0010_0000;
    pub const GENERIC_READ: u32 = 0x8000_0000;
    pub const GENERIC_WRITE: u32 = 0x4000_0000;
}

/// SHARE_READ | SHARE_WRITE | SHARE_DELETE (2.2.13).
const SHARE_ALL: u32 = 7;
/// SecurityMode SIGNING_REQUIRED (2.2.4).
const SIGNING_REQUIRED: u16 = 0x0002;

/// Where to connect and as whom (`addr` names the server in the
/// TREE_CONNECT path; the caller connects the stream).
#[derive(Debug, Clone)]
pub struct SmbTarget {
    pub addr: String,
    pub user: String,
    pub password: String,
    pub domain: String,
    pub share: String,
    /// Dialects to offer, best first.
    pub dialects: Vec<u16>,
}

/// One message of a compound to send (before ids are assigned).
pub struct Msg<'a> {
    pub req: Request<'a>,
    /// CreditCharge for large READ/WRITE (2.2.1.2, 3.2.4.1.5).
    pub charge: u16,
}

impl<'a> Msg<'a> {
    pub fn new(req: Request<'a>) -> Self {
        Msg { req, charge: 1 }
    }
}

/// One response message, owned: its header and the whole message bytes
/// (header included), as `Response::decode` wants them.
pub struct Reply {
    pub header: Header,
    pub bytes: Vec<u8>,
}

impl Reply {
    pub fn status(&self) -> NtStatus {
        self.header.status
    }

    pub fn ok(&self, op: &'static str) -> Result<&Self> {
        if self.header.status.is_error() {
            return Err(status_error(op, self.header.status));
        }
        Ok(self)
    }

    pub fn decode(&self) -> Result<Response<'_>> {
        Response::decode(&self.header, &self.bytes).map_err(|e| Error::Protocol(format!("{e:?}")))
    }
}

fn status_error(op: &'static str, s: NtStatus) -> Error {
    Error::Status { op, status: format!("{s}"), code: s.0 }
}

/// A connected, logged-on SMB2/3 session with one tree.
pub struct SmbClient<S> {
    s: S,
    next_id: u64,
    session_id: u64,
    tree_id: u32,
    signing: Option<SigningKey>,
    /// The server chose AES-GMAC signing (3.1.1 SIGNING_CAPABILITIES).
    gmac: bool,
    pub dialect: u16,
    pub max_read: u32,
    pub max_write: u32,
    credits: u32,
    /// Replies read while waiting for another message id.
    stash: HashMap<u64, Reply>,
}

impl<S: Io> SmbClient<S> {
    /// NEGOTIATE, SESSION_SETUP (NTLMv2), TREE_CONNECT over `s`, a stream
    /// connected to the server (Direct TCP).
    pub async fn connect(s: S, t: &SmbTarget) -> Result<SmbClient<S>> {
        let mut c = SmbClient {
            s,
            next_id: 0,
            session_id: 0,
            tree_id: 0,
            signing: None,
            gmac: false,
            dialect: 0,
            max_read: 65536,
            max_write: 65536,
            credits: 1,
            stash: HashMap::new(),
        };
        let (preauth, sign_required) = c.negotiate(&t.dialects).await?;
        c.session_setup(t, preauth, sign_required).await?;
        c.tree_connect(&t.addr, &t.share).await?;
        Ok(c)
    }

    fn header(&mut self, command: Command, charge: u16, related: bool) -> Header {
        let h = Header {
            credit_charge: charge,
            status: NtStatus::SUCCESS,
            command,
            credit: 256,
            flags: HeaderFlags(if related { HeaderFlags::RELATED_OPERATIONS } else { 0 }),
            next_command: 0,
            message_id: self.next_id,
            ids: HeaderIds::Sync { process_id: 0xfeff, tree_id: self.tree_id },
            session_id: self.session_id,
            signature: [0; 16],
        };
        self.next_id += u64::from(charge.max(1));
        h
    }

    /// Encodes a compound (related when `related`), signs it if the
    /// session signs; returns the frame and the message ids.
    fn build(&mut self, msgs: &[Msg<'_>], related: bool) -> (Vec<u8>, Vec<u64>) {
        let mut out = Vec::new();
        let mut w = CompoundWriter::new();
        let mut starts = Vec::new();
        let mut ids = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            starts.push(w.begin(&mut out));
            let h = self.header(m.req.command(), m.charge, related && i > 0);
            ids.push(h.message_id);
            h.encode(&mut out);
            m.req.encode(&mut out);
        }
        w.finish(&mut out, false);
        if let Some(k) = &self.signing {
            for (i, s) in starts.iter().enumerate() {
                let end = starts.get(i + 1).copied().unwrap_or(out.len());
                k.sign_in_place(&mut out[*s..end]);
            }
        }
        let charge: u32 = msgs.iter().map(|m| u32::from(m.charge.max(1))).sum();
        self.credits = self.credits.saturating_sub(charge);
        (out, ids)
    }

    async fn send(&mut self, frame: &[u8]) -> Result<()> {
        let mut buf = Vec::with_capacity(frame.len() + 4);
        buf.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        buf.extend_from_slice(frame);
        self.s.write_all(&buf).await?;
        self.s.flush().await?;
        Ok(())
    }

    /// Reads one frame and stashes its messages by id (interim PENDING
    /// responses, 3.3.4.2, are dropped: the final one follows).
    async fn read_frame(&mut self) -> Result<()> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).await?;
        let len = u32::from_be_bytes(len) as usize & 0x00ff_ffff;
        let mut frame = vec![0u8; len];
        self.s.read_exact(&mut frame).await?;
        if frame.len() >= 4 && frame[..4] != [0xFE, b'S', b'M', b'B'] {
            return proto(format!("not an SMB2 frame ({:02x?})", &frame[..4]));
        }
        for m in Compound::new(&frame).flatten() {
            self.credits += u32::from(m.header.credit);
            if m.header.status == NtStatus::PENDING && m.header.flags.is_async() {
                continue;
            }
            self.stash.insert(m.header.message_id, Reply { header: m.header, bytes: m.bytes.to_vec() });
        }
        Ok(())
    }

    async fn wait(&mut self, id: u64) -> Result<Reply> {
        loop {
            if let Some(r) = self.stash.remove(&id) {
                return Ok(r);
            }
            self.read_frame().await?;
        }
    }

    async fn wait_all(&mut self, ids: Vec<u64>) -> Result<Vec<Reply>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(self.wait(id).await?);
        }
        Ok(out)
    }

    /// Sends one compound and waits for every reply.
    pub async fn call(&mut self, msgs: &[Msg<'_>], related: bool) -> Result<Vec<Reply>> {
        let (f, ids) = self.build(msgs, related);
        self.send(&f).await?;
        self.wait_all(ids).await
    }

    /// Several compounds in flight at once: sends them all (as far as the
    /// credits allow), then collects the replies in order.
    pub async fn pipeline(&mut self, compounds: &[Vec<Msg<'_>>]) -> Result<Vec<Vec<Reply>>> {
        let mut pending: std::collections::VecDeque<Vec<u64>> = Default::default();
        let mut out = Vec::new();
        for c in compounds {
            let need: u32 = c.iter().map(|m| u32::from(m.charge.max(1))).sum();
            while self.credits < need {
                let Some(ids) = pending.pop_front() else { break };
                out.push(self.wait_all(ids).await?);
            }
            let (f, ids) = self.build(c, true);
            self.send(&f).await?;
            pending.push_back(ids);
        }
        while let Some(ids) = pending.pop_front() {
            out.push(self.wait_all(ids).await?);
        }
        Ok(out)
    }

    async fn negotiate(&mut self, dialects: &[u16]) -> Result<([u8; 64], bool)> {
        let salt = [0x5a; 32];
        let req = Request::Negotiate(NegotiateRequest {
            security_mode: 1,
            capabilities: 0x04, // SMB2_GLOBAL_CAP_LARGE_MTU (2.2.3); no encryption offered
            client_guid: client_guid(),
            client_start_time: 0,
            dialects: dialects.to_vec(),
            negotiate_contexts: if dialects.contains(&dialect::SMB3_1_1) {
                vec![
                    NegotiateContext::PreauthIntegrity { hash_algorithms: vec![algorithm::SHA_512], salt: &salt },
                    NegotiateContext::Encryption { ciphers: vec![algorithm::AES_128_GCM] },
                    // What current Windows offers: GMAC first (MS-SMB2 2.2.3.1.7).
                    NegotiateContext::Signing { algorithms: vec![algorithm::AES_GMAC, algorithm::AES_CMAC] },
                ]
            } else {
                vec![]
            },
        });
        let (f, ids) = self.build(&[Msg::new(req)], false);
        self.send(&f).await?;
        let r = self.wait(ids[0]).await?;
        r.ok("NEGOTIATE")?;
        let Response::Negotiate(n) = r.decode()? else { return proto("NEGOTIATE reply") };
        self.dialect = n.dialect_revision;
        self.gmac = n.negotiate_contexts.iter().any(|c| {
            matches!(c, NegotiateContext::Signing { algorithms } if algorithms.first() == Some(&algorithm::AES_GMAC))
        });
        self.max_read = n.max_read_size.min(1 << 20);
        self.max_write = n.max_write_size.min(1 << 20);
        let sign_required = n.security_mode & SIGNING_REQUIRED != 0;
        let p = preauth_update(&[0; 64], &f);
        Ok((preauth_update(&p, &r.bytes), sign_required))
    }

    async fn session_setup(&mut self, t: &SmbTarget, mut preauth: [u8; 64], sign_required: bool) -> Result<()> {
        fn req(tok: &[u8]) -> Request<'_> {
            Request::SessionSetup(SessionSetupRequest {
                flags: 0,
                security_mode: 1,
                capabilities: 1,
                channel: 0,
                previous_session_id: 0,
                security_buffer: tok,
            })
        }
        let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
        let tok = spnego::client_init(&neg);
        let (f, ids) = self.build(&[Msg::new(req(&tok))], false);
        self.send(&f).await?;
        let r = self.wait(ids[0]).await?;
        if r.status() != NtStatus::MORE_PROCESSING_REQUIRED {
            return Err(status_error("SESSION_SETUP", r.status()));
        }
        self.session_id = r.header.session_id;
        let v311 = self.dialect == dialect::SMB3_1_1;
        if v311 {
            preauth = preauth_update(&preauth, &f);
            preauth = preauth_update(&preauth, &r.bytes);
        }
        let Response::SessionSetup(ss) = r.decode()? else { return proto("SESSION_SETUP reply") };
        let chal = spnego::parse_server_response(ss.security_buffer)
            .map_err(|_| Error::Protocol("SPNEGO".into()))?
            .token
            .ok_or_else(|| Error::Protocol("no NTLM challenge".into()))?
            .to_vec();
        let mut cc = [0u8; 8];
        let mut rk = [0u8; 16];
        fill_random(&mut cc);
        fill_random(&mut rk);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let filetime = (now.as_secs() + 11_644_473_600) * 10_000_000 + u64::from(now.subsec_nanos() / 100);
        let (auth, key) = ntlm::client_authenticate(
            &neg,
            &chal,
            &t.user,
            &t.domain,
            &ntlm::nt_hash(&t.password),
            cc,
            rk,
            filetime,
        )
        .map_err(|e| Error::Protocol(format!("NTLM: {e:?}")))?;
        // SPNEGO mechListMIC (RFC 4178 5, MS-SPNG 3.1.5.1): the NTLM
        // signature (MS-NLMP 3.4.4.2, sequence 0) over the DER MechTypeList
        // we sent. Samba asks for it (another MORE_PROCESSING leg) without.
        let negotiated = ntlm::Challenge::parse(&chal).map(|c| c.flags).unwrap_or(ntlm::CLIENT_FLAGS);
        let mut oid = Vec::new();
        spnego::write_tlv(&mut oid, 0x06, spnego::OID_NTLMSSP);
        let mut mech_list = Vec::new();
        spnego::write_tlv(&mut mech_list, 0x30, &oid);
        let mic = ntlm::sign(&key, negotiated, ntlm::Direction::ClientToServer, 0, &mech_list);
        let tok = spnego::client_resp(&auth, Some(&mic));
        let (f, ids) = self.build(&[Msg::new(req(&tok))], false);
        if v311 {
            preauth = preauth_update(&preauth, &f);
        }
        self.send(&f).await?;
        let r = self.wait(ids[0]).await?;
        r.ok("SESSION_SETUP")?;
        // Sign whenever the server requires it, and always on 3.x: Samba
        // refuses an unsigned TREE_CONNECT on 3.1.1 (MS-SMB2 3.3.5.2.4).
        if sign_required || self.dialect >= dialect::SMB3_0 {
            let keys = derive_keys(self.dialect, &key, None, &preauth, true);
            self.signing = Some(if self.gmac { keys.signing.into_gmac() } else { keys.signing });
        }
        Ok(())
    }

    async fn tree_connect(&mut self, addr: &str, share: &str) -> Result<()> {
        let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
        let path = format!("\\\\{host}\\{share}");
        let r = self.call(&[Msg::new(Request::TreeConnect(TreeConnectRequest { flags: 0, path: Utf16::Str(&path) }))], false).await?;
        r[0].ok("TREE_CONNECT")?;
        self.tree_id = r[0].header.tree_id().unwrap_or(0);
        Ok(())
    }
}

/// The ClientGuid of a connection (MS-SMB2 2.2.3): "duet" and 12 bytes
/// that differ per connection. Each connection is its own client: a
/// server that supports multichannel (3.3.5.4) groups connections by
/// ClientGuid (Samba hands every connection with a known GUID to the
/// process that has the first, and stalls when many such negotiates
/// race), which a load generator of N independent clients must not ask
/// for.
fn client_guid() -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(b"duet");
    fill_random(&mut g[4..]);
    g
}

/// A little xorshift seeded from the clock, the process id and a counter:
/// the NTLM client challenge and session key need not be cryptographic
/// for a benchmark client, but must differ between sessions, also between
/// sessions set up at the same moment.
fn fill_random(buf: &mut [u8]) {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
    let mut x = seed ^ u64::from(std::process::id()).rotate_left(32) ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x9e37_79b9_7f4a_7c15;
    for b in buf.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

// ---- request builders ----

pub fn create<'a>(name: &'a str, access: u32, disposition: u32, options: u32) -> Request<'a> {
    Request::Create(CreateRequest {
        security_flags: 0,
        requested_oplock_level: 0,
        impersonation_level: 2,
        smb_create_flags: 0,
        desired_access: access,
        file_attributes: 0,
        share_access: SHARE_ALL,
        create_disposition: disposition,
        create_options: options,
        name: Utf16::Str(name),
        create_contexts: Vec::new(),
    })
}

pub fn write(fid: FileId, offset: u64, data: &[u8]) -> Request<'_> {
    Request::Write(WriteRequest { offset, file_id: fid, channel: 0, remaining_bytes: 0, flags: 0, write_channel_info: &[], data })
}

pub fn read<'a>(fid: FileId, offset: u64, length: u32) -> Request<'a> {
    Request::Read(ReadRequest {
        padding: 0x50,
        flags: 0,
        length,
        offset,
        file_id: fid,
        minimum_count: 0,
        channel: 0,
        remaining_bytes: 0,
        read_channel_info: &[],
    })
}

pub fn close<'a>(fid: FileId) -> Request<'a> {
    Request::Close(CloseRequest { flags: 0, file_id: fid })
}

/// FileStandardInformation (MS-FSCC 2.4.41), class 5 of SMB2_0_INFO_FILE.
pub fn query_standard<'a>(fid: FileId) -> Request<'a> {
    Request::QueryInfo(QueryInfoRequest {
        info_type: 1,
        file_info_class: 5,
        output_buffer_length: 4096,
        input_buffer: &[],
        additional_information: 0,
        flags: 0,
        file_id: fid,
    })
}

/// Credits a READ/WRITE of `len` bytes costs (3.1.5.2: one per 64 KiB).
pub fn charge(len: usize) -> u16 {
    len.div_ceil(65536).max(1) as u16
}

/// What a file's stat returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmbStat {
    pub size: u64,
    pub directory: bool,
}

fn create_fid(r: &Reply) -> Result<FileId> {
    r.ok("CREATE")?;
    match r.decode()? {
        Response::Create(CreateResponse { file_id, .. }) => Ok(file_id),
        _ => proto("CREATE reply"),
    }
}

impl<S: Io> SmbClient<S> {
    /// The small-file copy chain: CREATE(overwrite_if)+WRITE+CLOSE in one
    /// related compound (one frame, one round trip).
    pub async fn put_small(&mut self, name: &str, data: &[u8]) -> Result<()> {
        let msgs = put_msgs(name, data);
        let r = self.call(&msgs, true).await?;
        check_all(&r, &["CREATE", "WRITE", "CLOSE"])
    }

    /// CREATE+QUERY_INFO(FileStandardInformation)+CLOSE.
    pub async fn stat(&mut self, name: &str) -> Result<SmbStat> {
        let r = self.call(&stat_msgs(name), true).await?;
        check_all(&r, &["CREATE", "QUERY_INFO", "CLOSE"])?;
        parse_standard(&r[1])
    }

    /// CREATE+READ+CLOSE of a file up to `max` bytes.
    pub async fn get_small(&mut self, name: &str, max: u32) -> Result<Vec<u8>> {
        let r = self.call(&get_msgs(name, max), true).await?;
        read_result(&r)
    }

    /// CREATE(DELETE_ON_CLOSE)+CLOSE.
    pub async fn remove(&mut self, name: &str) -> Result<()> {
        let r = self.call(&remove_msgs(name, false), true).await?;
        check_all(&r, &["CREATE", "CLOSE"])
    }

    pub async fn rmdir(&mut self, name: &str) -> Result<()> {
        let r = self.call(&remove_msgs(name, true), true).await?;
        check_all(&r, &["CREATE", "CLOSE"])
    }

    /// CREATE(directory, create)+CLOSE; an existing directory is fine
    /// when `exist_ok`.
    pub async fn mkdir(&mut self, name: &str, exist_ok: bool) -> Result<()> {
        let disp = if exist_ok { disposition::OPEN_IF } else { disposition::CREATE };
        let msgs = vec![
            Msg::new(create(name, access::READ_ATTRIBUTES | access::SYNCHRONIZE, disp, options::DIRECTORY_FILE)),
            Msg::new(close(FileId::RELATED)),
        ];
        let r = self.call(&msgs, true).await?;
        check_all(&r, &["CREATE", "CLOSE"])
    }

    /// Opens a file for reading and writing (creating it if asked).
    pub async fn open(&mut self, name: &str, create_it: bool) -> Result<FileId> {
        let disp = if create_it { disposition::OVERWRITE_IF } else { disposition::OPEN };
        let r = self.call(
            &[Msg::new(create(name, access::GENERIC_READ | access::GENERIC_WRITE, disp, options::NON_DIRECTORY_FILE))],
            false,
        ).await?;
        create_fid(&r[0])
    }

    pub async fn close(&mut self, fid: FileId) -> Result<()> {
        let r = self.call(&[Msg::new(close(fid))], false).await?;
        r[0].ok("CLOSE").map(|_| ())
    }

    /// One WRITE (len at most `max_write`).
    pub async fn write_at(&mut self, fid: FileId, offset: u64, data: &[u8]) -> Result<()> {
        let m = Msg { req: write(fid, offset, data), charge: charge(data.len()) };
        let r = self.call(&[m], false).await?;
        r[0].ok("WRITE").map(|_| ())
    }

    /// One READ (len at most `max_read`).
    pub async fn read_at(&mut self, fid: FileId, offset: u64, len: u32) -> Result<Vec<u8>> {
        let m = Msg { req: read(fid, offset, len), charge: charge(len as usize) };
        let r = self.call(&[m], false).await?;
        read_data(&r[0])
    }

    /// Writes `total` bytes produced by `fill(offset, buf)` with up to
    /// `depth` WRITEs in flight.
    pub async fn write_stream(&mut self, fid: FileId, total: u64, io: usize, depth: usize, fill: &mut dyn FnMut(u64, &mut [u8])) -> Result<()> {
        let io = io.min(self.max_write as usize);
        let mut off = 0u64;
        while off < total {
            let mut bufs = Vec::new();
            for _ in 0..depth {
                if off >= total {
                    break;
                }
                let n = (total - off).min(io as u64) as usize;
                let mut b = vec![0u8; n];
                fill(off, &mut b);
                bufs.push((off, b));
                off += n as u64;
            }
            let compounds: Vec<Vec<Msg<'_>>> =
                bufs.iter().map(|(o, b)| vec![Msg { req: write(fid, *o, b), charge: charge(b.len()) }]).collect();
            for r in self.pipeline(&compounds).await? {
                r[0].ok("WRITE")?;
            }
        }
        Ok(())
    }

    /// Reads `total` bytes with up to `depth` READs in flight, handing each
    /// piece to `check(offset, data)`.
    pub async fn read_stream(&mut self, fid: FileId, total: u64, io: usize, depth: usize, check: &mut dyn FnMut(u64, &[u8]) -> Result<()>) -> Result<()> {
        let io = io.min(self.max_read as usize);
        let mut off = 0u64;
        while off < total {
            let mut reqs = Vec::new();
            for _ in 0..depth {
                if off >= total {
                    break;
                }
                let n = (total - off).min(io as u64) as u32;
                reqs.push((off, n));
                off += u64::from(n);
            }
            let compounds: Vec<Vec<Msg<'_>>> =
                reqs.iter().map(|(o, n)| vec![Msg { req: read(fid, *o, *n), charge: charge(*n as usize) }]).collect();
            for (r, (o, n)) in self.pipeline(&compounds).await?.into_iter().zip(reqs) {
                let d = read_data(&r[0])?;
                if d.len() != n as usize {
                    return proto(format!("short read at {o}: {} of {n}", d.len()));
                }
                check(o, &d)?;
            }
        }
        Ok(())
    }

    /// Lists a directory with FileIdBothDirectoryInformation (what `ls -l`
    /// through cifs asks): names and sizes. CREATE+QUERY_DIRECTORY in one
    /// compound, then QUERY_DIRECTORY until NO_MORE_FILES, then CLOSE.
    pub async fn list(&mut self, dir: &str) -> Result<Vec<(String, u64, bool)>> {
        let class = DirectoryInfoClass::IdBothDirectory;
        let qd = |fid: FileId| {
            Request::QueryDirectory(QueryDirectoryRequest {
                file_information_class: class.class(),
                flags: 0,
                file_index: 0,
                file_id: fid,
                file_name: Utf16::Str("*"),
                output_buffer_length: 1 << 20,
            })
        };
        let r = self.call(
            &[
                Msg::new(create(dir, access::READ_DATA | access::READ_ATTRIBUTES | access::SYNCHRONIZE, disposition::OPEN, options::DIRECTORY_FILE)),
                Msg { req: qd(FileId::RELATED), charge: 16 },
            ],
            true,
        ).await?;
        let fid = create_fid(&r[0])?;
        let mut out = Vec::new();
        let mut reply = r.into_iter().nth(1).unwrap();
        loop {
            if reply.status() == NtStatus::NO_MORE_FILES {
                break;
            }
            reply.ok("QUERY_DIRECTORY")?;
            let Response::QueryDirectory(QueryDirectoryResponse { output_buffer, .. }) = reply.decode()? else {
                return proto("QUERY_DIRECTORY reply");
            };
            let entries = DirectoryEntry::decode_list(class, output_buffer).map_err(|e| Error::Protocol(format!("{e:?}")))?;
            if entries.is_empty() {
                break;
            }
            for e in entries {
                let name = match e.file_name {
                    Utf16::Wire(b) => String::from_utf16_lossy(&b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<_>>()),
                    Utf16::Str(s) => s.to_string(),
                };
                if name == "." || name == ".." {
                    continue;
                }
                out.push((name, e.end_of_file, e.file_attributes & 0x10 != 0));
            }
            reply = self.call(&[Msg { req: qd(fid), charge: 16 }], false).await?.pop().unwrap();
        }
        self.close(fid).await?;
        Ok(out)
    }
}

pub fn put_msgs<'a>(name: &'a str, data: &'a [u8]) -> Vec<Msg<'a>> {
    vec![
        Msg::new(create(name, access::GENERIC_WRITE | access::GENERIC_READ, disposition::OVERWRITE_IF, options::NON_DIRECTORY_FILE)),
        Msg { req: write(FileId::RELATED, 0, data), charge: charge(data.len()) },
        Msg::new(close(FileId::RELATED)),
    ]
}

pub fn stat_msgs(name: &str) -> Vec<Msg<'_>> {
    vec![
        Msg::new(create(name, access::READ_ATTRIBUTES | access::SYNCHRONIZE, disposition::OPEN, 0)),
        Msg::new(query_standard(FileId::RELATED)),
        Msg::new(close(FileId::RELATED)),
    ]
}

pub fn get_msgs<'a>(name: &'a str, max: u32) -> Vec<Msg<'a>> {
    vec![
        Msg::new(create(name, access::GENERIC_READ, disposition::OPEN, options::NON_DIRECTORY_FILE)),
        Msg { req: read(FileId::RELATED, 0, max), charge: charge(max as usize) },
        Msg::new(close(FileId::RELATED)),
    ]
}

pub fn remove_msgs(name: &str, dir: bool) -> Vec<Msg<'_>> {
    let opt = options::DELETE_ON_CLOSE | if dir { options::DIRECTORY_FILE } else { options::NON_DIRECTORY_FILE };
    vec![
        Msg::new(create(name, access::DELETE | access::READ_ATTRIBUTES | access::SYNCHRONIZE, disposition::OPEN, opt)),
        Msg::new(close(FileId::RELATED)),
    ]
}

pub fn check_all(r: &[Reply], ops: &[&'static str]) -> Result<()> {
    for (rep, op) in r.iter().zip(ops) {
        rep.ok(op)?;
    }
    Ok(())
}

pub fn parse_standard(r: &Reply) -> Result<SmbStat> {
    let Response::QueryInfo(QueryInfoResponse { output_buffer, .. }) = r.decode()? else { return proto("QUERY_INFO reply") };
    if output_buffer.len() < 22 {
        return proto("FileStandardInformation too short");
    }
    let size = u64::from_le_bytes(output_buffer[8..16].try_into().unwrap());
    Ok(SmbStat { size, directory: output_buffer[21] != 0 })
}

fn read_data(r: &Reply) -> Result<Vec<u8>> {
    if r.status() == NtStatus::END_OF_FILE {
        return Ok(Vec::new());
    }
    r.ok("READ")?;
    match r.decode()? {
        Response::Read(ReadResponse { data, .. }) => Ok(data.to_vec()),
        _ => proto("READ reply"),
    }
}

/// The data of a CREATE+READ+CLOSE compound.
pub fn read_result(r: &[Reply]) -> Result<Vec<u8>> {
    r[0].ok("CREATE")?;
    let d = read_data(&r[1])?;
    r[2].ok("CLOSE")?;
    Ok(d)
}
