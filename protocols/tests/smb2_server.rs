//! End-to-end tests of the SMB2/3 server state machine: a small test-side
//! client (built from the codec's encoders and the NTLM client side)
//! negotiates, authenticates, tree-connects and runs compounds against a
//! `Connection` whose batches run on the real metadata state machine
//! (`duet_cluster::machine::execute`) over an in-memory BTreeMap; and
//! replays of the client bytes captured from Linux cifs and smbclient.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use duet_cluster::kv::Txn;
use duet_cluster::machine::{apply, execute};
use duet_cluster::records::{Command as ClusterCommand, ShareRecord};
use duet_fs::{Batch, BatchResult, Credentials, ObjRef, Op, OpOutput, ROOT_ID};
use duet_protocols::auth::{ntlm, spnego};
use duet_protocols::dcerpc::bind::BindAck;
use duet_protocols::dcerpc::fault::{status as fault_status, Fault};
use duet_protocols::dcerpc::request::Response as RpcResponse;
use duet_protocols::dcerpc::srvsvc::ShareEnumReply;
use duet_protocols::dcerpc::NDR32;
use duet_protocols::smb2::change_notify::ChangeNotifyRequest;
use duet_protocols::smb2::close::{CloseRequest, CloseResponse};
use duet_protocols::smb2::compound::{Compound, CompoundWriter};
use duet_protocols::smb2::create::{create_disposition, create_options, CreateRequest};
use duet_protocols::smb2::create_context::{CreateContextRequest, CreateContextResponse};
use duet_protocols::smb2::cursor::Utf16;
use duet_protocols::smb2::fscc::{self, DirectoryEntry, DirectoryInfoClass};
use duet_protocols::smb2::ioctl::{ctl_code, IoctlRequest};
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::negotiate::{algorithm, dialect, NegotiateContext, NegotiateRequest};
use duet_protocols::smb2::query_directory::QueryDirectoryRequest;
use duet_protocols::smb2::query_info::{info_type, QueryInfoRequest};
use duet_protocols::smb2::read::ReadRequest;
use duet_protocols::smb2::server::crypto::{derive_keys, preauth_update, CipherKey, SigningKey};
use duet_protocols::smb2::server::{
    Connection, Directory, Event, ServerConfig, ShareEntry, UserEntry,
};
use duet_protocols::smb2::session_setup::{SessionSetupRequest, SessionSetupResponse};
use duet_protocols::smb2::set_info::SetInfoRequest;
use duet_protocols::smb2::transform::TransformHeader;
use duet_protocols::smb2::tree_connect::TreeConnectRequest;
use duet_protocols::smb2::write::WriteRequest;
use duet_protocols::smb2::{Command, FileId, Header, HeaderFlags, HeaderIds, NtStatus};

const NOW: i64 = 1_700_000_000_000_000_000;

// ---- the back end --------------------------------------------------------

struct Engine {
    kv: BTreeMap<Vec<u8>, Vec<u8>>,
    batches: usize,
    /// Reads of chunked files come back as zeros of the planned length
    /// (there is no chunk store here; only files grown by a size change,
    /// all holes, should be read this way). Off: they come back empty.
    holes: bool,
}

impl Engine {
    fn new() -> Engine {
        let mut e = Engine {
            kv: BTreeMap::new(),
            batches: 0,
            holes: false,
        };
        let share = |name: &str| ShareRecord {
            name: name.into(),
            path: format!("/{name}"),
            smb: true,
            nfs: false,
            read_only: false,
            guest_ok: false,
            nfs_clients: Vec::new(),
            root_squash: false,
            append_extension: false,
            durability: Default::default(),
        };
        let cmd = ClusterCommand::Init {
            now_ns: NOW,
            admin_secrets: Vec::new(),
            shares: vec![share("data"), share("ro")],
        };
        let mut txn = Txn::new(&e.kv);
        apply(&mut txn, &cmd);
        let w = txn.into_writes();
        e.commit(w);
        e
    }

    fn commit(&mut self, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
        for (k, v) in writes {
            match v {
                Some(v) => {
                    self.kv.insert(k, v);
                }
                None => {
                    self.kv.remove(&k);
                }
            }
        }
    }

    fn run(&mut self, batch: &Batch) -> BatchResult {
        self.batches += 1;
        let mut txn = Txn::new(&self.kv);
        let mut applied = execute(&mut txn, batch);
        let w = txn.into_writes();
        self.commit(w);
        if self.holes {
            for plan in &applied.reads {
                if let Some(Ok(OpOutput::Read { data, .. })) = applied.results.get_mut(plan.op) {
                    *data = vec![0; plan.len as usize];
                }
            }
        }
        BatchResult {
            results: applied.results,
            cost: Default::default(),
        }
    }

    fn root_of(&mut self, share: &str) -> u64 {
        let mut b = Batch::new(Credentials::root(), NOW);
        b.push(Op::Lookup {
            dir: ObjRef::Id(ROOT_ID),
            name: share.into(),
        });
        match &self.run(&b).results[0] {
            Ok(OpOutput::Object { attrs, .. }) => attrs.id,
            other => panic!("{other:?}"),
        }
    }
}

struct TestDir {
    users: HashMap<String, UserEntry>,
    shares: Vec<ShareEntry>,
    sid_map: Option<std::sync::Arc<duet_fs::acl::SidMap>>,
}

impl Directory for TestDir {
    fn user(&self, name: &str) -> Option<UserEntry> {
        self.users.get(&name.to_lowercase()).cloned()
    }
    fn share(&self, name: &str) -> Option<ShareEntry> {
        self.shares
            .iter()
            .find(|s| s.name.eq_ignore_ascii_case(name))
            .cloned()
    }
    fn shares(&self) -> Vec<ShareEntry> {
        self.shares.clone()
    }
    fn sid_map(&self) -> Option<std::sync::Arc<duet_fs::acl::SidMap>> {
        self.sid_map.clone()
    }
    fn users_by_uid(&self) -> Vec<duet_protocols::dcerpc::lsarpc::Account> {
        let mut v: Vec<_> = self
            .users
            .iter()
            .map(|(name, u)| duet_protocols::dcerpc::lsarpc::Account { name: name.clone(), uid: u.uid, gid: u.gid })
            .collect();
        v.sort_by_key(|a| a.uid);
        v
    }
}

// ---- the test client -----------------------------------------------------

struct Reply {
    header: Header,
    bytes: Vec<u8>,
}

impl Reply {
    fn status(&self) -> NtStatus {
        self.header.status
    }
    fn body(&self) -> Response<'_> {
        Response::decode(&self.header, &self.bytes).expect("response decodes")
    }
}

struct Client {
    conn: Connection,
    engine: Engine,
    dir: TestDir,
    next_id: u64,
    session_id: u64,
    tree_id: u32,
    signing: Option<SigningKey>,
    encrypt: Option<(CipherKey, CipherKey)>,
    runs: usize,
    preauth: [u8; 64],
    dialect: u16,
    closed: bool,
    nonce: u64,
    /// Oplock breaks the connection gave out to route (`Event::Recall`).
    recalls: Vec<duet_locks::Break>,
    /// The ClientGuid NEGOTIATE sends.
    guid: [u8; 16],
    /// Events for other connections (channels: `Event::Forward`,
    /// `Event::SendOn`, `Event::Bound`), for the test to route.
    routed: Vec<Event>,
}

fn dir_with(engine: &mut Engine) -> TestDir {
    let mut users = HashMap::new();
    users.insert(
        "alice".into(),
        UserEntry {
            nt_hash: ntlm::nt_hash("wonderland"),
            uid: 1000,
            gid: 1000,
            enabled: true,
        },
    );
    users.insert(
        "carol".into(),
        UserEntry {
            nt_hash: ntlm::nt_hash("tea"),
            uid: 1002,
            gid: 1002,
            enabled: true,
        },
    );
    users.insert(
        "mallory".into(),
        UserEntry {
            nt_hash: ntlm::nt_hash("x"),
            uid: 1001,
            gid: 1001,
            enabled: false,
        },
    );
    let data = engine.root_of("data");
    let ro = engine.root_of("ro");
    TestDir {
        users,
        shares: vec![
            ShareEntry {
                name: "data".into(),
                root: data,
                read_only: false,
                guest_ok: false,
                encrypt: false,
                protocol_durability: false,
            },
            ShareEntry {
                name: "ro".into(),
                root: ro,
                read_only: true,
                guest_ok: false,
                encrypt: false,
                protocol_durability: false,
            },
        ],
        sid_map: None,
    }
}

struct Msg {
    command: Command,
    body: Vec<u8>,
    related: bool,
    /// Session and tree ids other than the client's (compound tests).
    ids: Option<(u64, u32)>,
    /// CreditCharge (MS-SMB2 3.1.5.2): 1 unless set.
    charge: u16,
}

fn msg(req: Request<'_>, related: bool) -> Msg {
    let mut out = vec![0u8; 64];
    let command = req.command();
    req.encode(&mut out);
    Msg {
        command,
        body: out.split_off(64),
        related,
        ids: None,
        charge: 1,
    }
}

/// A message with a credit charge that covers `len` bytes of payload or
/// response (MS-SMB2 3.1.5.2: one credit per 64 KiB).
fn charged(mut m: Msg, len: u32) -> Msg {
    m.charge = len.div_ceil(65536).max(1) as u16;
    m
}

impl Client {
    fn new(cfg: ServerConfig) -> Client {
        Client::with_seed(cfg, b"a seed of thirty-two or more bytes!!")
    }

    /// A client whose connection draws from `seed` (connections sharing
    /// daemon-wide tables need different ones).
    fn with_seed(cfg: ServerConfig, seed: &[u8]) -> Client {
        let mut engine = Engine::new();
        let dir = dir_with(&mut engine);
        Client {
            conn: Connection::new(cfg, NOW, seed),
            engine,
            dir,
            next_id: 0,
            session_id: 0,
            tree_id: 0,
            signing: None,
            encrypt: None,
            runs: 0,
            preauth: [0; 64],
            dialect: 0,
            closed: false,
            nonce: 1,
            recalls: Vec::new(),
            guid: [0x11; 16],
            routed: Vec::new(),
        }
    }

    /// Sends one frame, drives the events, returns the response frame
    /// (decrypted when it came encrypted).
    fn exchange(&mut self, frame: &[u8]) -> Option<Vec<u8>> {
        let mut events = self.conn.on_frame(frame, NOW, &self.dir);
        loop {
            let mut next = Vec::new();
            for e in events {
                match e {
                    Event::Run { token, batch, .. } => {
                        self.runs += 1;
                        let r = self.engine.run(&batch);
                        next.extend(self.conn.on_batch_done(token, r, NOW));
                    }
                    Event::Send(f) => {
                        let len = u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize;
                        assert_eq!(len, f.len() - 4, "length prefix");
                        let body = f[4..].to_vec();
                        if body.starts_with(&[0xFD, b'S', b'M', b'B']) {
                            let (_, dec) =
                                self.encrypt.as_ref().expect("encrypted reply without keys");
                            return Some(dec.decrypt(&body).expect("reply decrypts"));
                        }
                        return Some(body);
                    }
                    Event::Close => {
                        self.closed = true;
                        return None;
                    }
                    Event::Recall(b) => self.recalls.push(b),
                    Event::EndSession { .. } | Event::CloseOpen { .. } | Event::DeletePending { .. } => {}
                    other => self.routed.push(other),
                }
            }
            if next.is_empty() {
                return None;
            }
            events = next;
        }
    }

    fn frame(&mut self, msgs: Vec<Msg>, sign: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = CompoundWriter::new();
        let mut starts = Vec::new();
        for m in &msgs {
            starts.push(w.begin(&mut out));
            let mut flags = 0;
            if m.related {
                flags |= HeaderFlags::RELATED_OPERATIONS;
            }
            let h = Header {
                credit_charge: m.charge,
                status: NtStatus::SUCCESS,
                command: m.command,
                credit: 32,
                flags: HeaderFlags(flags),
                next_command: 0,
                message_id: self.next_id,
                ids: HeaderIds::Sync {
                    process_id: 0xfeff,
                    tree_id: m.ids.map_or(self.tree_id, |i| i.1),
                },
                session_id: m.ids.map_or(self.session_id, |i| i.0),
                signature: [0; 16],
            };
            self.next_id += u64::from(m.charge.max(1));
            h.encode(&mut out);
            out.extend_from_slice(&m.body);
        }
        w.finish(&mut out, false);
        if sign {
            if let Some(k) = &self.signing {
                for (i, s) in starts.iter().enumerate() {
                    let end = starts.get(i + 1).copied().unwrap_or(out.len());
                    k.sign_in_place(&mut out[*s..end]);
                }
            }
        }
        if let Some((enc, _)) = &self.encrypt {
            let mut nonce = [0u8; 16];
            nonce[..8].copy_from_slice(&self.nonce.to_le_bytes());
            self.nonce += 1;
            return enc.encrypt(self.session_id, nonce, &out).unwrap();
        }
        out
    }

    /// One already-encoded message as a frame (encrypted when the
    /// session encrypts).
    fn frame_raw(&mut self, m: &[u8]) -> Vec<u8> {
        if let Some((enc, _)) = &self.encrypt {
            let mut nonce = [0u8; 16];
            nonce[..8].copy_from_slice(&self.nonce.to_le_bytes());
            self.nonce += 1;
            return enc.encrypt(self.session_id, nonce, m).unwrap();
        }
        m.to_vec()
    }

    fn call(&mut self, msgs: Vec<Msg>) -> Vec<Reply> {
        let f = self.frame(msgs, true);
        self.replies(&f)
    }

    fn replies(&mut self, frame: &[u8]) -> Vec<Reply> {
        let Some(resp) = self.exchange(frame) else {
            return Vec::new();
        };
        let msgs: Vec<_> = Compound::new(&resp)
            .collect::<Result<_, _>>()
            .expect("response compound parses");
        let mut out = Vec::new();
        for m in msgs {
            assert!(m.header.flags.is_response());
            // USER_SESSION_DELETED for a session not held here keeps the
            // request's SIGNED flag without a signature (no key).
            let unsigned = m.header.status == NtStatus::USER_SESSION_DELETED && m.bytes[48..64] == [0; 16];
            if m.header.flags.is_signed() && !unsigned {
                let k = self.signing.as_ref().expect("signed reply without a key");
                assert!(
                    k.verify(m.bytes),
                    "reply signature verifies ({:?})",
                    m.header.command
                );
            }
            out.push(Reply {
                header: m.header,
                bytes: m.bytes.to_vec(),
            });
        }
        out
    }

    fn one(&mut self, req: Request<'_>) -> Reply {
        let mut r = self.call(vec![msg(req, false)]);
        assert_eq!(r.len(), 1);
        r.remove(0)
    }

    fn negotiate(&mut self, dialects: &[u16], ciphers: &[u16]) -> Reply {
        let mut contexts = vec![NegotiateContext::PreauthIntegrity {
            hash_algorithms: vec![algorithm::SHA_512],
            salt: &[5; 32],
        }];
        if !ciphers.is_empty() {
            contexts.push(NegotiateContext::Encryption {
                ciphers: ciphers.to_vec(),
            });
        }
        contexts.push(NegotiateContext::Signing {
            algorithms: vec![algorithm::AES_CMAC, algorithm::HMAC_SHA256],
        });
        let req = NegotiateRequest {
            security_mode: 1,
            capabilities: 0x7f,
            client_guid: self.guid,
            client_start_time: 0,
            dialects: dialects.to_vec(),
            negotiate_contexts: if dialects.contains(&dialect::SMB3_1_1) {
                contexts
            } else {
                Vec::new()
            },
        };
        let f = self.frame(vec![msg(Request::Negotiate(req), false)], false);
        let r = self.replies(&f).remove(0);
        assert_eq!(r.status(), NtStatus::SUCCESS);
        if let Response::Negotiate(n) = r.body() {
            self.dialect = n.dialect_revision;
        }
        if self.dialect == dialect::SMB3_1_1 {
            self.preauth = preauth_update(&[0; 64], &f);
            self.preauth = preauth_update(&self.preauth, &r.bytes);
        }
        r
    }

    /// SPNEGO-wrapped NTLMv2 logon; returns the final status.
    fn login(&mut self, user: &str, password: &str, cipher: Option<u16>) -> NtStatus {
        let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
        let tok = spnego::client_init(&neg);
        let req = SessionSetupRequest {
            flags: 0,
            security_mode: 1,
            capabilities: 1,
            channel: 0,
            previous_session_id: 0,
            security_buffer: &tok,
        };
        let f = self.frame(vec![msg(Request::SessionSetup(req), false)], false);
        let r = self.replies(&f).remove(0);
        assert_eq!(r.status(), NtStatus::MORE_PROCESSING_REQUIRED);
        self.session_id = r.header.session_id;
        assert_ne!(self.session_id, 0);
        let mut preauth = self.preauth;
        if self.dialect == dialect::SMB3_1_1 {
            preauth = preauth_update(&preauth, &f);
            preauth = preauth_update(&preauth, &r.bytes);
        }
        let Response::SessionSetup(ss) = r.body() else {
            panic!()
        };
        let resp = spnego::parse_server_response(ss.security_buffer).unwrap();
        let chal = resp.token.unwrap().to_vec();
        let (auth, key) = ntlm::client_authenticate(
            &neg,
            &chal,
            user,
            "WORKGROUP",
            &ntlm::nt_hash(password),
            [0x42; 8],
            [0x24; 16],
            0,
        )
        .unwrap();
        let tok = spnego::client_resp(&auth, None);
        let req = SessionSetupRequest {
            flags: 0,
            security_mode: 1,
            capabilities: 1,
            channel: 0,
            previous_session_id: 0,
            security_buffer: &tok,
        };
        let f = self.frame(vec![msg(Request::SessionSetup(req), false)], false);
        if self.dialect == dialect::SMB3_1_1 {
            preauth = preauth_update(&preauth, &f);
        }
        let keys = derive_keys(self.dialect, &key, cipher, &preauth, true);
        self.signing = Some(keys.signing.clone());
        let r = self.replies(&f).remove(0);
        if r.status() == NtStatus::SUCCESS {
            if let Response::SessionSetup(SessionSetupResponse { session_flags, .. }) = r.body() {
                if session_flags & SessionSetupResponse::ENCRYPT_DATA != 0 {
                    // Client to server is the server's decryption key.
                    let keys = derive_keys(self.dialect, &key, cipher, &preauth, true);
                    self.encrypt = Some((keys.decrypt.unwrap(), keys.encrypt.unwrap()));
                }
            }
        } else {
            self.signing = None;
        }
        r.status()
    }

    fn tree(&mut self, share: &str) -> NtStatus {
        let path = format!("\\\\duet\\{share}");
        let r = self.one(Request::TreeConnect(TreeConnectRequest {
            flags: 0,
            path: Utf16::Str(&path),
        }));
        if r.status() == NtStatus::SUCCESS {
            self.tree_id = r.header.tree_id().unwrap();
        }
        r.status()
    }

    fn connected() -> Client {
        Client::connected_with(ServerConfig::default())
    }

    fn connected_with(cfg: ServerConfig) -> Client {
        Client::connected_as(cfg, [0x11; 16], None)
    }

    /// As [`Client::connected_with`], for a client of ClientGuid `guid`,
    /// its connection seeded with `seed` (another connection of the same
    /// server needs another seed, hence another connection key).
    fn connected_as(cfg: ServerConfig, guid: [u8; 16], seed: Option<&[u8]>) -> Client {
        let mut c = Client::new(cfg.clone());
        if let Some(seed) = seed {
            c.conn = Connection::new(cfg, NOW, seed);
        }
        c.guid = guid;
        c.negotiate(
            &[dialect::SMB2_1, dialect::SMB3_0, dialect::SMB3_1_1],
            &[algorithm::AES_128_GCM],
        );
        assert_eq!(
            c.login("alice", "wonderland", Some(algorithm::AES_128_GCM)),
            NtStatus::SUCCESS
        );
        assert_eq!(c.tree("data"), NtStatus::SUCCESS);
        c
    }
}

fn create(name: &str, disposition: u32, options: u32, access: u32) -> CreateRequest<'_> {
    CreateRequest {
        security_flags: 0,
        requested_oplock_level: 0,
        impersonation_level: 2,
        smb_create_flags: 0,
        desired_access: access,
        file_attributes: 0,
        share_access: 7,
        create_disposition: disposition,
        create_options: options,
        name: Utf16::Str(name),
        create_contexts: Vec::new(),
    }
}

const RW: u32 = 0x0012_019f;
const READ: u32 = 0x0012_0089;

fn close_related() -> Msg {
    msg(
        Request::Close(CloseRequest {
            flags: CloseRequest::POSTQUERY_ATTRIB,
            file_id: FileId::RELATED,
        }),
        true,
    )
}

/// A WRITE at offset 0 of the open the chain's CREATE made.
fn write_related(data: &[u8]) -> Msg {
    msg(
        Request::Write(WriteRequest {
            offset: 0,
            file_id: FileId::RELATED,
            channel: 0,
            remaining_bytes: 0,
            flags: 0,
            write_channel_info: &[],
            data,
        }),
        true,
    )
}

fn write_file(c: &mut Client, name: &str, data: &[u8]) -> Vec<Reply> {
    let basic = fscc::FileBasicInformation {
        last_write_time: 133_000_000_000_000_000,
        ..Default::default()
    };
    let mut binfo = Vec::new();
    basic.encode(&mut binfo);
    let msgs = vec![
        msg(
            Request::Create(create(
                name,
                create_disposition::OVERWRITE_IF,
                create_options::NON_DIRECTORY_FILE,
                RW,
            )),
            false,
        ),
        write_related(data),
        msg(
            Request::SetInfo(SetInfoRequest {
                info_type: info_type::FILE,
                file_info_class: fscc::info_class::BASIC,
                buffer: &binfo,
                additional_information: 0,
                file_id: FileId::RELATED,
            }),
            true,
        ),
        close_related(),
    ];
    c.call(msgs)
}

fn read_file(c: &mut Client, name: &str) -> (Vec<NtStatus>, Vec<u8>) {
    let msgs = vec![
        msg(
            Request::Create(create(name, create_disposition::OPEN, 0, READ)),
            false,
        ),
        msg(
            Request::Read(ReadRequest {
                padding: 0x50,
                flags: 0,
                length: 65536,
                offset: 0,
                file_id: FileId::RELATED,
                minimum_count: 0,
                channel: 0,
                remaining_bytes: 0,
                read_channel_info: &[],
            }),
            true,
        ),
        close_related(),
    ];
    let r = c.call(msgs);
    let data = match r.get(1).map(|x| x.body()) {
        Some(Response::Read(rr)) => rr.data.to_vec(),
        _ => Vec::new(),
    };
    (r.iter().map(Reply::status).collect(), data)
}

/// CREATE(dir)+QUERY_DIRECTORY(pattern)+CLOSE as one related compound:
/// each entry's name and EaSize, or None when QUERY_DIRECTORY failed (a
/// pattern that matches nothing).
fn listing(c: &mut Client, dir: &str, pattern: &str) -> Option<Vec<(String, u32)>> {
    let msgs = vec![
        msg(
            Request::Create(create(
                dir,
                create_disposition::OPEN,
                create_options::DIRECTORY_FILE,
                READ,
            )),
            false,
        ),
        msg(
            Request::QueryDirectory(QueryDirectoryRequest {
                file_information_class: fscc::info_class::ID_BOTH_DIRECTORY,
                flags: 0,
                file_index: 0,
                file_id: FileId::RELATED,
                file_name: Utf16::Str(pattern),
                output_buffer_length: 65536,
            }),
            true,
        ),
        close_related(),
    ];
    let r = c.call(msgs);
    assert_eq!(r[0].status(), NtStatus::SUCCESS);
    let Response::QueryDirectory(q) = r[1].body() else {
        return None;
    };
    Some(
        DirectoryEntry::decode_list(DirectoryInfoClass::IdBothDirectory, q.output_buffer)
            .unwrap()
            .iter()
            .map(|e| (e.file_name.to_string_lossy(), e.ea_size))
            .collect(),
    )
}

fn list(c: &mut Client, dir: &str, pattern: &str) -> Vec<String> {
    listing(c, dir, pattern).unwrap_or_default().into_iter().map(|(n, _)| n).collect()
}

// ---- tests ---------------------------------------------------------------

#[test]
fn small_file_copy_compound_is_one_batch_and_round_trips() {
    let mut c = Client::connected();
    assert_eq!(c.dialect, dialect::SMB3_1_1);
    let before = c.runs;
    let r = write_file(&mut c, "hello.txt", b"hello, duet");
    assert_eq!(
        c.runs - before,
        1,
        "CREATE+WRITE+SET_INFO+CLOSE is ONE batch"
    );
    let statuses: Vec<_> = r.iter().map(Reply::status).collect();
    assert_eq!(statuses, vec![NtStatus::SUCCESS; 4]);
    // Related responses carry the flag, the CREATE its FileId, the CLOSE
    // the post-query attributes.
    assert!(r[1].header.flags.is_related());
    let Response::Create(cr) = r[0].body() else {
        panic!()
    };
    assert_eq!(cr.create_action, 2);
    let Response::Write(w) = r[1].body() else {
        panic!()
    };
    assert_eq!(w.count, 11);
    let Response::Close(CloseResponse {
        end_of_file,
        last_write_time,
        ..
    }) = r[3].body()
    else {
        panic!()
    };
    assert_eq!(end_of_file, 11);
    assert_eq!(last_write_time, 133_000_000_000_000_000);
    assert_eq!(c.conn.open_count(), 0);

    let before = c.runs;
    let (st, data) = read_file(&mut c, "hello.txt");
    assert_eq!(c.runs - before, 1);
    assert_eq!(st, vec![NtStatus::SUCCESS; 3]);
    assert_eq!(data, b"hello, duet");

    // Overwrite: OVERWRITE_IF truncates.
    let r = write_file(&mut c, "hello.txt", b"bye");
    let Response::Create(cr) = r[0].body() else {
        panic!()
    };
    assert_eq!(cr.create_action, 3);
    assert_eq!(read_file(&mut c, "hello.txt").1, b"bye");
}

#[test]
fn stat_compound_answers_query_info_classes() {
    let mut c = Client::connected();
    write_file(&mut c, "f", b"0123456789");
    for (class, min_len) in [
        (fscc::info_class::ALL, 100usize),
        (fscc::info_class::BASIC, 40),
        (fscc::info_class::STANDARD, 24),
        (fscc::info_class::NETWORK_OPEN, 56),
        (fscc::info_class::INTERNAL, 8),
        (fscc::info_class::STREAM, 24),
        (fscc::info_class::ATTRIBUTE_TAG, 8),
    ] {
        let mut cr = create("f", create_disposition::OPEN, 0, READ);
        cr.create_contexts = vec![
            CreateContextRequest::QueryMaximalAccess { timestamp: None },
            CreateContextRequest::QueryOnDiskId,
        ];
        let before = c.runs;
        let r = c.call(vec![
            msg(Request::Create(cr), false),
            msg(
                Request::QueryInfo(QueryInfoRequest {
                    info_type: info_type::FILE,
                    file_info_class: class,
                    output_buffer_length: 4096,
                    input_buffer: &[],
                    additional_information: 0,
                    flags: 0,
                    file_id: FileId::RELATED,
                }),
                true,
            ),
            close_related(),
        ]);
        assert_eq!(c.runs - before, 1, "stat is one batch");
        assert_eq!(
            r.iter().map(Reply::status).collect::<Vec<_>>(),
            vec![NtStatus::SUCCESS; 3],
            "class {class}"
        );
        let Response::Create(cresp) = r[0].body() else {
            panic!()
        };
        assert!(cresp
            .create_contexts
            .iter()
            .any(|x| matches!(x, CreateContextResponse::MaximalAccess { .. })));
        assert!(cresp
            .create_contexts
            .iter()
            .any(|x| matches!(x, CreateContextResponse::OnDiskId { .. })));
        let Response::QueryInfo(q) = r[1].body() else {
            panic!()
        };
        assert!(q.output_buffer.len() >= min_len, "class {class}");
        if class == fscc::info_class::ALL {
            let all = fscc::FileAllInformation::decode(q.output_buffer).unwrap();
            assert_eq!(all.standard.end_of_file, 10);
            assert_eq!(all.name.file_name.to_string_lossy(), "\\f");
        }
    }
    // File system and security information on the share root.
    for (it, class) in [
        (info_type::FILESYSTEM, fscc::fs_info_class::VOLUME),
        (info_type::FILESYSTEM, fscc::fs_info_class::FULL_SIZE),
        (info_type::FILESYSTEM, fscc::fs_info_class::ATTRIBUTE),
        (info_type::FILESYSTEM, fscc::fs_info_class::SECTOR_SIZE),
        (info_type::SECURITY, 0),
    ] {
        let r = c.call(vec![
            msg(
                Request::Create(create("", create_disposition::OPEN, 0, READ)),
                false,
            ),
            msg(
                Request::QueryInfo(QueryInfoRequest {
                    info_type: it,
                    file_info_class: class,
                    output_buffer_length: 4096,
                    input_buffer: &[],
                    additional_information: 7,
                    flags: 0,
                    file_id: FileId::RELATED,
                }),
                true,
            ),
            close_related(),
        ]);
        assert_eq!(r[1].status(), NtStatus::SUCCESS, "{it}/{class}");
    }
}

#[test]
fn related_failure_propagates_to_the_rest_of_the_chain() {
    let mut c = Client::connected();
    let r = read_file(&mut c, "missing.txt").0;
    assert_eq!(r, vec![NtStatus::OBJECT_NAME_NOT_FOUND; 3]);
    let r = read_file(&mut c, "nodir\\missing.txt").0;
    assert_eq!(r, vec![NtStatus::OBJECT_PATH_NOT_FOUND; 3]);
    let r = read_file(&mut c, "bad*name").0;
    assert_eq!(r, vec![NtStatus::OBJECT_NAME_INVALID; 3]);
    assert_eq!(c.conn.open_count(), 0);
}

#[test]
fn directories_listing_rename_and_delete() {
    let mut c = Client::connected();
    let r = c.call(vec![
        msg(
            Request::Create(create(
                "docs",
                create_disposition::CREATE,
                create_options::DIRECTORY_FILE,
                RW,
            )),
            false,
        ),
        close_related(),
    ]);
    assert_eq!(r[0].status(), NtStatus::SUCCESS);
    for n in ["a.txt", "b.txt", "c.log"] {
        write_file(&mut c, &format!("docs\\{n}"), n.as_bytes());
    }
    let mut names = list(&mut c, "docs", "*");
    names.sort();
    assert_eq!(names, vec![".", "..", "a.txt", "b.txt", "c.log"]);
    assert_eq!(list(&mut c, "docs", "*.txt"), vec!["a.txt", "b.txt"]);
    assert_eq!(list(&mut c, "docs", "c.log"), vec!["c.log"]);

    // Rename within the share (target path relative to the share root).
    let mut rinfo = Vec::new();
    fscc::FileRenameInformation {
        replace_if_exists: false,
        root_directory: 0,
        file_name: Utf16::Str("docs\\z.txt"),
    }
    .encode(&mut rinfo);
    let before = c.runs;
    let r = c.call(vec![
        msg(
            Request::Create(create(
                "docs\\a.txt",
                create_disposition::OPEN,
                0,
                0x0011_0080,
            )),
            false,
        ),
        msg(
            Request::SetInfo(SetInfoRequest {
                info_type: info_type::FILE,
                file_info_class: fscc::info_class::RENAME,
                buffer: &rinfo,
                additional_information: 0,
                file_id: FileId::RELATED,
            }),
            true,
        ),
        close_related(),
    ]);
    assert_eq!(c.runs - before, 1);
    assert_eq!(
        r.iter().map(Reply::status).collect::<Vec<_>>(),
        vec![NtStatus::SUCCESS; 3]
    );
    let mut names = list(&mut c, "docs", "*.txt");
    names.sort();
    assert_eq!(names, vec!["b.txt", "z.txt"]);
    assert_eq!(read_file(&mut c, "docs\\z.txt").1, b"a.txt");

    // Renaming onto an existing name without ReplaceIfExists collides.
    let mut rinfo = Vec::new();
    fscc::FileRenameInformation {
        replace_if_exists: false,
        root_directory: 0,
        file_name: Utf16::Str("docs\\b.txt"),
    }
    .encode(&mut rinfo);
    let r = c.call(vec![
        msg(
            Request::Create(create(
                "docs\\z.txt",
                create_disposition::OPEN,
                0,
                0x0011_0080,
            )),
            false,
        ),
        msg(
            Request::SetInfo(SetInfoRequest {
                info_type: info_type::FILE,
                file_info_class: fscc::info_class::RENAME,
                buffer: &rinfo,
                additional_information: 0,
                file_id: FileId::RELATED,
            }),
            true,
        ),
        close_related(),
    ]);
    assert_eq!(r[1].status(), NtStatus::OBJECT_NAME_COLLISION);

    // Delete-on-close (rm) and the disposition on a non-empty directory.
    let r = c.call(vec![
        msg(
            Request::Create(create(
                "docs\\b.txt",
                create_disposition::OPEN,
                create_options::DELETE_ON_CLOSE,
                0x0011_0080,
            )),
            false,
        ),
        close_related(),
    ]);
    assert_eq!(r[1].status(), NtStatus::SUCCESS);
    assert_eq!(
        read_file(&mut c, "docs\\b.txt").0[0],
        NtStatus::OBJECT_NAME_NOT_FOUND
    );
    let disp = [1u8];
    let r = c.call(vec![
        msg(
            Request::Create(create(
                "docs",
                create_disposition::OPEN,
                create_options::DIRECTORY_FILE,
                0x0011_0080,
            )),
            false,
        ),
        msg(
            Request::SetInfo(SetInfoRequest {
                info_type: info_type::FILE,
                file_info_class: fscc::info_class::DISPOSITION,
                buffer: &disp,
                additional_information: 0,
                file_id: FileId::RELATED,
            }),
            true,
        ),
        close_related(),
    ]);
    assert_eq!(r[1].status(), NtStatus::DIRECTORY_NOT_EMPTY);
    assert!(list(&mut c, "", "docs").contains(&"docs".to_string()));
    // A directory that is a file, and a file that is a directory.
    let r = c.call(vec![
        msg(
            Request::Create(create(
                "docs\\c.log",
                create_disposition::OPEN,
                create_options::DIRECTORY_FILE,
                READ,
            )),
            false,
        ),
        close_related(),
    ]);
    assert_eq!(r[0].status(), NtStatus::NOT_A_DIRECTORY);
    let r = c.call(vec![
        msg(
            Request::Create(create(
                "docs",
                create_disposition::OPEN,
                create_options::NON_DIRECTORY_FILE,
                READ,
            )),
            false,
        ),
        close_related(),
    ]);
    assert_eq!(r[0].status(), NtStatus::FILE_IS_A_DIRECTORY);
    let r = c.call(vec![
        msg(
            Request::Create(create(
                "docs",
                create_disposition::CREATE,
                create_options::DIRECTORY_FILE,
                READ,
            )),
            false,
        ),
        close_related(),
    ]);
    assert_eq!(r[0].status(), NtStatus::OBJECT_NAME_COLLISION);
}

#[test]
fn handles_persist_across_frames_and_close_frees_them() {
    let mut c = Client::connected();
    let r = c.one(Request::Create(create(
        "keep",
        create_disposition::CREATE,
        0,
        RW,
    )));
    let Response::Create(cr) = r.body() else {
        panic!()
    };
    let fid = cr.file_id;
    assert_eq!(c.conn.open_count(), 1);
    let r = c.one(Request::Write(WriteRequest {
        offset: 5,
        file_id: fid,
        channel: 0,
        remaining_bytes: 0,
        flags: 0,
        write_channel_info: &[],
        data: b"xyz",
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let r = c.one(Request::Read(ReadRequest {
        padding: 0x50,
        flags: 0,
        length: 100,
        offset: 0,
        file_id: fid,
        minimum_count: 0,
        channel: 0,
        remaining_bytes: 0,
        read_channel_info: &[],
    }));
    let Response::Read(rr) = r.body() else {
        panic!()
    };
    assert_eq!(rr.data, b"\0\0\0\0\0xyz");
    let r = c.one(Request::Read(ReadRequest {
        padding: 0x50,
        flags: 0,
        length: 100,
        offset: 100,
        file_id: fid,
        minimum_count: 0,
        channel: 0,
        remaining_bytes: 0,
        read_channel_info: &[],
    }));
    assert_eq!(r.status(), NtStatus::END_OF_FILE);
    let r = c.one(Request::Flush(duet_protocols::smb2::flush::FlushRequest {
        file_id: fid,
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let before = c.runs;
    let r = c.one(Request::Close(CloseRequest {
        flags: 0,
        file_id: fid,
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    assert_eq!(c.runs, before, "a CLOSE without post-query needs no batch");
    assert_eq!(c.conn.open_count(), 0);
    let r = c.one(Request::Close(CloseRequest {
        flags: 0,
        file_id: fid,
    }));
    assert_eq!(r.status(), NtStatus::FILE_CLOSED);
    // Echo needs no batch.
    let before = c.runs;
    assert_eq!(
        c.one(Request::Echo(Default::default())).status(),
        NtStatus::SUCCESS
    );
    assert_eq!(c.runs, before);
}

#[test]
fn wrong_password_unknown_and_disabled_users_are_refused() {
    for (user, pw) in [("alice", "nope"), ("bob", "x"), ("mallory", "x")] {
        let mut c = Client::new(ServerConfig::default());
        c.negotiate(&[dialect::SMB3_1_1], &[]);
        assert_eq!(c.login(user, pw, None), NtStatus::LOGON_FAILURE, "{user}");
        // The failed session is gone: a tree connect on it is refused.
        assert_eq!(c.tree("data"), NtStatus::USER_SESSION_DELETED);
    }
}

#[test]
fn signing_is_verified_and_a_tampered_request_refused() {
    for d in [
        dialect::SMB2_1,
        dialect::SMB3_0,
        dialect::SMB3_0_2,
        dialect::SMB3_1_1,
    ] {
        let cfg = ServerConfig {
            require_signing: true,
            ..Default::default()
        };
        let mut c = Client::new(cfg);
        c.negotiate(&[d], &[]);
        assert_eq!(c.dialect, d);
        assert_eq!(
            c.login("alice", "wonderland", None),
            NtStatus::SUCCESS,
            "{d:#x}"
        );
        assert_eq!(c.tree("data"), NtStatus::SUCCESS, "{d:#x}");
        // A signed request works and its reply is signed (checked in replies()).
        let r = c.call(vec![msg(Request::Echo(Default::default()), false)]);
        assert!(r[0].header.flags.is_signed(), "{d:#x}");
        // Tampered: flip a byte after signing.
        let mut f = c.frame(
            vec![msg(
                Request::Create(create("x", create_disposition::OPEN_IF, 0, RW)),
                false,
            )],
            true,
        );
        let n = f.len();
        f[n - 3] ^= 0x20;
        let r = c.replies(&f);
        assert_eq!(r[0].status(), NtStatus::ACCESS_DENIED, "{d:#x}");
        // Unsigned on a session that requires signing.
        let f = c.frame(vec![msg(Request::Echo(Default::default()), false)], false);
        let r = c.replies(&f);
        assert_eq!(r[0].status(), NtStatus::ACCESS_DENIED, "{d:#x}");
    }
}

/// A SESSION_SETUP on connection B naming a session of connection A
/// (MS-SMB2 3.3.5.5, GlobalSessionTable): checked against A's session,
/// answered signed with its Session.SigningKey (3.3.5.2.4) so that a client
/// requiring signing sees the status (smbtorture
/// smb2.session.bind_negative_*); session ids are unique across
/// connections sharing one table.
#[test]
fn a_session_setup_naming_another_connections_session_is_checked_and_signed() {
    let cfg = ServerConfig::default();
    let mut a = Client::new(cfg.clone());
    a.negotiate(&[dialect::SMB3_1_1], &[]);
    assert_eq!(a.login("alice", "wonderland", None), NtStatus::SUCCESS);
    let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
    let tok = spnego::client_init(&neg);
    let setup = |flags: u8| setup_req(flags, &tok);
    let (a_id, a_key) = (a.session_id, a.signing.clone());
    let other = |d: u16| {
        let mut b = Client::with_seed(cfg.clone(), b"another seed, thirty-two bytes or more");
        b.negotiate(&[d], &[]);
        b.session_id = a_id;
        b.signing = a_key.clone();
        b
    };
    let bind = SessionSetupRequest::BINDING;
    let mut b = other(dialect::SMB3_1_1);
    // Signed with A's key: a valid binding starts its NTLM exchange,
    // answered signed with A's key (replies() verifies it).
    let f = b.frame(vec![msg(Request::SessionSetup(setup(bind)), false)], true);
    let r = b.replies(&f).remove(0);
    assert_eq!(r.status(), NtStatus::MORE_PROCESSING_REQUIRED);
    assert!(r.header.flags.is_signed(), "signed with the session's key");
    // Unsigned binding: INVALID_PARAMETER.
    let f = b.frame(vec![msg(Request::SessionSetup(setup(bind)), false)], false);
    assert_eq!(b.replies(&f)[0].status(), NtStatus::INVALID_PARAMETER);
    // Signed, no binding flag: the session is not this connection's.
    let f = b.frame(vec![msg(Request::SessionSetup(setup(0)), false)], true);
    let r = b.replies(&f).remove(0);
    assert_eq!(r.status(), NtStatus::USER_SESSION_DELETED);
    assert!(r.header.flags.is_signed());
    // Signed with another key: refused, unsigned.
    b.signing = Some(SigningKey::AesCmac([9; 16]));
    let f = b.frame(vec![msg(Request::SessionSetup(setup(bind)), false)], true);
    let r = b.replies(&f).remove(0);
    assert_eq!(r.status(), NtStatus::ACCESS_DENIED);
    assert!(!r.header.flags.is_signed());
    // Another dialect: 2.1 cannot bind at all, 3.0 is not A's dialect.
    let mut c = other(dialect::SMB2_1);
    let f = c.frame(vec![msg(Request::SessionSetup(setup(bind)), false)], true);
    let r = c.replies(&f).remove(0);
    assert_eq!(r.status(), NtStatus::REQUEST_NOT_ACCEPTED);
    assert!(r.header.flags.is_signed());
    let mut c = other(dialect::SMB3_0);
    let f = c.frame(vec![msg(Request::SessionSetup(setup(bind)), false)], true);
    assert_eq!(c.replies(&f)[0].status(), NtStatus::INVALID_PARAMETER);
    // A's own session is untouched; B's own logon gets another id.
    assert_eq!(a.call(vec![msg(Request::Echo(Default::default()), false)])[0].status(), NtStatus::SUCCESS);
    // The same seed as A's: its first draw is A's id, which is taken.
    let mut d = Client::new(cfg.clone());
    d.negotiate(&[dialect::SMB3_1_1], &[]);
    assert_eq!(d.login("alice", "wonderland", None), NtStatus::SUCCESS);
    assert_ne!(d.session_id, a.session_id, "ids are unique daemon-wide");
    assert_eq!(cfg.sessions.len(), 2);
    // Once A logs off, its id names nothing.
    assert_eq!(a.one(Request::Logoff(Default::default())).status(), NtStatus::SUCCESS);
    let mut b = other(dialect::SMB3_1_1);
    let f = b.frame(vec![msg(Request::SessionSetup(setup(bind)), false)], true);
    let r = b.replies(&f).remove(0);
    assert_eq!(r.status(), NtStatus::USER_SESSION_DELETED);
    // Without multichannel a valid binding is refused.
    let cfg1 = ServerConfig { multichannel: false, ..ServerConfig::default() };
    let mut e = Client::new(cfg1.clone());
    e.negotiate(&[dialect::SMB3_1_1], &[]);
    assert_eq!(e.login("alice", "wonderland", None), NtStatus::SUCCESS);
    let mut f1 = Client::with_seed(cfg1, b"another seed, thirty-two bytes or more");
    f1.negotiate(&[dialect::SMB3_1_1], &[]);
    f1.session_id = e.session_id;
    f1.signing = e.signing.clone();
    let f = f1.frame(vec![msg(Request::SessionSetup(setup(bind)), false)], true);
    assert_eq!(f1.replies(&f)[0].status(), NtStatus::REQUEST_NOT_ACCEPTED);
    drop(d);
    assert_eq!(cfg.sessions.len(), 0, "a dropped connection leaves no session behind");
}

/// A SESSION_SETUP with `flags` carrying `token`.
fn setup_req(flags: u8, token: &[u8]) -> SessionSetupRequest<'_> {
    SessionSetupRequest { flags, security_mode: 1, capabilities: 1, channel: 0, previous_session_id: 0, security_buffer: token }
}

/// A READ of the first 64 bytes of `fid`.
fn read64(fid: FileId) -> ReadRequest<'static> {
    ReadRequest {
        padding: 0,
        flags: 0,
        length: 64,
        offset: 0,
        file_id: fid,
        minimum_count: 0,
        channel: 0,
        remaining_bytes: 0,
        read_channel_info: &[],
    }
}

/// Runs the batches among `events` on `c`'s engine; returns the others.
fn drive_batches(c: &mut Client, mut events: Vec<Event>) -> Vec<Event> {
    let mut out = Vec::new();
    loop {
        let mut next = Vec::new();
        for e in events {
            match e {
                Event::Run { token, batch, .. } => {
                    let r = c.engine.run(&batch);
                    next.extend(c.conn.on_batch_done(token, r, NOW));
                }
                other => out.push(other),
            }
        }
        if next.is_empty() {
            return out;
        }
        events = next;
    }
}

/// Binds connection `b` to `a`'s session (MS-SMB2 3.3.5.5, NTLM in
/// SPNEGO as smbtorture does), routing the `Event::Bound` to `a`; returns
/// the binding's status. Bound, `b` signs with the channel's key.
fn bind(a: &mut Client, b: &mut Client, user: &str, password: &str) -> NtStatus {
    b.session_id = a.session_id;
    b.signing = a.signing.clone();
    let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
    let tok = spnego::client_init(&neg);
    let req = setup_req(SessionSetupRequest::BINDING, &tok);
    let f = b.frame(vec![msg(Request::SessionSetup(req), false)], true);
    let r = b.replies(&f).remove(0);
    assert_eq!(r.status(), NtStatus::MORE_PROCESSING_REQUIRED);
    let mut preauth = preauth_update(&b.preauth, &f);
    preauth = preauth_update(&preauth, &r.bytes);
    let Response::SessionSetup(ss) = r.body() else { panic!() };
    let chal = spnego::parse_server_response(ss.security_buffer).unwrap().token.unwrap().to_vec();
    let (auth, key) =
        ntlm::client_authenticate(&neg, &chal, user, "WORKGROUP", &ntlm::nt_hash(password), [0x43; 8], [0x25; 16], 0)
            .unwrap();
    let tok = spnego::client_resp(&auth, None);
    let req = setup_req(SessionSetupRequest::BINDING, &tok);
    let f = b.frame(vec![msg(Request::SessionSetup(req), false)], true);
    preauth = preauth_update(&preauth, &f);
    let chan = derive_keys(b.dialect, &key, None, &preauth, true).signing;
    let resp = b.exchange(&f).expect("an answer");
    let m = Compound::new(&resp).next().unwrap().unwrap();
    assert!(m.header.flags.is_signed(), "a binding's answers are signed");
    if m.header.status != NtStatus::SUCCESS {
        // A refusal is signed with the session's key.
        assert!(b.signing.as_ref().unwrap().verify(m.bytes));
        return m.header.status;
    }
    assert!(chan.verify(m.bytes), "the binding's last answer is signed with the channel's key");
    b.signing = Some(chan);
    for e in std::mem::take(&mut b.routed) {
        if let Event::Bound { owner, session, channel, key } = e {
            assert_eq!(owner, a.conn.key());
            a.conn.add_channel(session, channel, key);
        }
    }
    NtStatus::SUCCESS
}

/// Sends `msgs` on channel `b` (bound to `a`'s session): `b` forwards the
/// frame, `a` serves it and answers through `b` (`Event::SendOn`);
/// returns the replies as `b`'s client sees them (signature checked with
/// the channel's key).
fn through_channel(a: &mut Client, b: &mut Client, msgs: Vec<Msg>) -> Vec<Reply> {
    let f = b.frame(msgs, true);
    assert!(b.exchange(&f).is_none(), "nothing answered on the channel itself");
    let fwd = std::mem::take(&mut b.routed);
    let [Event::Forward { owner, channel, frame, grants, encrypted_by }] = &fwd[..] else {
        panic!("one frame forwarded: {fwd:?}")
    };
    assert_eq!((*owner, *channel), (a.conn.key(), b.conn.key()));
    let ev = a.conn.on_channel_frame(*channel, frame, grants.clone(), *encrypted_by, NOW, &a.dir);
    let ev = drive_batches(a, ev);
    let mut out = Vec::new();
    for e in ev {
        if let Event::SendOn { conn, frame } = e {
            assert_eq!(conn, b.conn.key(), "the answer goes back through the channel");
            let plain = if frame[4..].starts_with(&[0xFD, b'S', b'M', b'B']) {
                let (_, dec) = b.encrypt.as_ref().expect("encrypted answer without keys");
                dec.decrypt(&frame[4..]).expect("the answer decrypts with the session's key")
            } else {
                frame[4..].to_vec()
            };
            let msgs: Vec<_> = Compound::new(&plain).collect::<Result<_, _>>().unwrap();
            for m in msgs {
                if m.header.flags.is_signed() {
                    assert!(b.signing.as_ref().unwrap().verify(m.bytes), "signed with the channel's key");
                }
                out.push(Reply { header: m.header, bytes: m.bytes.to_vec() });
            }
        } else {
            panic!("unexpected {e:?}");
        }
    }
    out
}

/// Multichannel (MS-SMB2 3.3.5.5): a second connection binds to a
/// session with the same user's NTLM, gets its own signing key, and
/// serves the session's opens and trees: its frames are forwarded to the
/// session's connection, answered through the channel with its credits
/// and key. Another user, or a second binding, is refused; a frame
/// signed with the session's key instead of the channel's is
/// ACCESS_DENIED; once the session logs off, the channel answers
/// USER_SESSION_DELETED itself.
#[test]
fn a_channel_bound_to_a_session_serves_its_opens() {
    let cfg = ServerConfig::default();
    let mut a = Client::new(cfg.clone());
    let n = a.negotiate(&[dialect::SMB3_1_1], &[]);
    let Response::Negotiate(neg) = n.body() else { panic!() };
    assert_ne!(neg.capabilities & 0x8, 0, "SMB2_GLOBAL_CAP_MULTI_CHANNEL offered");
    assert_eq!(a.login("alice", "wonderland", None), NtStatus::SUCCESS);
    assert_eq!(a.tree("data"), NtStatus::SUCCESS);
    let fid = open_fid(&mut a, "chan.txt", create_disposition::OPEN_IF, RW).unwrap();
    assert_eq!(write_at(&mut a, fid, 0, b"through either channel"), NtStatus::SUCCESS);

    // Another user cannot bind alice's session.
    let mut x = Client::with_seed(cfg.clone(), b"a seed for the intruder, 32 bytes+");
    x.negotiate(&[dialect::SMB3_1_1], &[]);
    assert_eq!(bind(&mut a, &mut x, "carol", "tea"), NtStatus::ACCESS_DENIED);

    let mut b = Client::with_seed(cfg.clone(), b"another seed, thirty-two bytes or more");
    b.negotiate(&[dialect::SMB3_1_1], &[]);
    assert_eq!(bind(&mut a, &mut b, "alice", "wonderland"), NtStatus::SUCCESS);
    b.tree_id = a.tree_id;
    let read = read64(fid);
    let r = through_channel(&mut a, &mut b, vec![msg(Request::Read(read.clone()), false)]);
    assert_eq!(r[0].status(), NtStatus::SUCCESS);
    let Response::Read(rd) = r[0].body() else { panic!() };
    assert_eq!(rd.data, b"through either channel");
    assert!(r[0].header.credit > 0, "the channel grants credits");
    // A write through the channel is seen through the first connection.
    let w = WriteRequest { offset: 0, file_id: fid, channel: 0, remaining_bytes: 0, flags: 0, write_channel_info: &[], data: b"THROUGH" };
    assert_eq!(through_channel(&mut a, &mut b, vec![msg(Request::Write(w), false)])[0].status(), NtStatus::SUCCESS);
    let r = a.one(Request::Read(read.clone()));
    let Response::Read(rd) = r.body() else { panic!() };
    assert_eq!(rd.data, b"THROUGH either channel");
    // An async answer goes back through the channel it came through: a
    // blocking LOCK through B waits for A's lock (STATUS_PENDING through
    // B), and is granted through B when A unlocks.
    {
        use duet_protocols::smb2::lock::{LockElement, LockRequest};
        let fid2 = open_fid(&mut a, "chan.txt", create_disposition::OPEN_IF, RW).unwrap();
        let mut st = Vec::new();
        let held = LockRequest::new(0, fid, &[LockElement { offset: 0, length: 10, flags: LockElement::EXCLUSIVE_LOCK }], &mut st);
        assert_eq!(a.one(Request::Lock(held)).status(), NtStatus::SUCCESS);
        let mut st = Vec::new();
        let wait = LockRequest::new(0, fid2, &[LockElement { offset: 0, length: 10, flags: LockElement::SHARED_LOCK }], &mut st);
        let r = through_channel(&mut a, &mut b, vec![msg(Request::Lock(wait), false)]);
        assert_eq!(r[0].status(), NtStatus::PENDING);
        assert!(r[0].header.flags.is_async());
        let mut st = Vec::new();
        let unlock = LockRequest::new(0, fid, &[LockElement { offset: 0, length: 10, flags: LockElement::UNLOCK }], &mut st);
        assert_eq!(a.one(Request::Lock(unlock)).status(), NtStatus::SUCCESS);
        let ev = a.conn.poll_locks(NOW);
        let [Event::SendOn { conn, frame }] = &ev[..] else { panic!("the grant goes through the channel: {ev:?}") };
        assert_eq!(*conn, b.conn.key());
        let m = Compound::new(&frame[4..]).next().unwrap().unwrap();
        assert_eq!((m.header.status, m.header.ids), (NtStatus::SUCCESS, r[0].header.ids));
        assert!(m.header.flags.is_signed() && b.signing.as_ref().unwrap().verify(m.bytes), "signed with the channel's key");
    }
    // Signed with the session's key, not the channel's: ACCESS_DENIED.
    let chan = b.signing.replace(a.signing.clone().unwrap());
    let r = through_channel(&mut a, &mut b, vec![msg(Request::Read(read.clone()), false)]);
    assert_eq!(r[0].status(), NtStatus::ACCESS_DENIED);
    b.signing = chan;
    // A second binding of the same channel: REQUEST_NOT_ACCEPTED.
    let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
    let tok = spnego::client_init(&neg);
    let again = setup_req(SessionSetupRequest::BINDING, &tok);
    let r = through_channel(&mut a, &mut b, vec![msg(Request::SessionSetup(again), false)]);
    assert_eq!(r[0].status(), NtStatus::REQUEST_NOT_ACCEPTED);
    // The session logs off on its first connection: the channel answers
    // for itself.
    assert_eq!(a.one(Request::Logoff(Default::default())).status(), NtStatus::SUCCESS);
    let f = b.frame(vec![msg(Request::Read(read), false)], true);
    let r = b.replies(&f);
    assert_eq!(r[0].status(), NtStatus::USER_SESSION_DELETED);
}

/// A session outlives the connection that made it while a channel is up
/// (MS-SMB2 3.3.7.1): the lost connection hands it over
/// (`Event::Adopt`), the first channel takes it and its opens over, and
/// the other channels forward to that one from then on.
#[test]
fn a_session_outlives_its_first_connection_through_a_channel() {
    let cfg = ServerConfig::default();
    let mut a = Client::new(cfg.clone());
    a.negotiate(&[dialect::SMB3_1_1], &[]);
    assert_eq!(a.login("alice", "wonderland", None), NtStatus::SUCCESS);
    assert_eq!(a.tree("data"), NtStatus::SUCCESS);
    let fid = open_fid(&mut a, "lives.txt", create_disposition::OPEN_IF, RW).unwrap();
    assert_eq!(write_at(&mut a, fid, 0, b"outlives its connection"), NtStatus::SUCCESS);
    let mut b = Client::with_seed(cfg.clone(), b"another seed, thirty-two bytes or more");
    b.negotiate(&[dialect::SMB3_1_1], &[]);
    assert_eq!(bind(&mut a, &mut b, "alice", "wonderland"), NtStatus::SUCCESS);
    b.tree_id = a.tree_id;
    let mut c = Client::with_seed(cfg.clone(), b"a third seed, thirty-two bytes or more");
    c.negotiate(&[dialect::SMB3_1_1], &[]);
    assert_eq!(bind(&mut a, &mut c, "alice", "wonderland"), NtStatus::SUCCESS);
    c.tree_id = a.tree_id;
    // A's connection is lost.
    let ev = a.conn.on_disconnect(NOW);
    let m = ev.into_iter().find_map(|e| if let Event::Adopt(m) = e { Some(m) } else { None }).expect("handed over");
    assert_eq!(m.candidates().len(), 2);
    // One file system behind every connection, as in the daemon.
    b.engine = std::mem::replace(&mut a.engine, Engine::new());
    drop(a);
    assert!(b.conn.adopt_session(*m, NOW).is_empty());
    let read = read64(fid);
    // B serves it itself, with its channel key, the same open.
    let r = b.one(Request::Read(read.clone()));
    let Response::Read(rd) = r.body() else { panic!("{:?}", r.status()) };
    assert_eq!(rd.data, b"outlives its connection");
    // C forwards to B now.
    let r = through_channel(&mut b, &mut c, vec![msg(Request::Read(read), false)]);
    let Response::Read(rd) = r[0].body() else { panic!("{:?}", r[0].status()) };
    assert_eq!(rd.data, b"outlives its connection");
    assert_eq!(cfg.sessions.get(b.session_id).map(|g| g.conn), Some(b.conn.key()));
}

/// A channel of an encrypted session (MS-SMB2 3.3.5.2.1.1): the channel
/// decrypts with the session's key, the session's connection answers
/// encrypted, through the channel.
#[test]
fn a_channel_of_an_encrypted_session_decrypts_and_answers_encrypted() {
    let cipher = algorithm::AES_128_GCM;
    let cfg = ServerConfig { encrypt: true, ..Default::default() };
    let mut a = Client::new(cfg.clone());
    a.negotiate(&[dialect::SMB3_1_1], &[cipher]);
    assert_eq!(a.login("alice", "wonderland", Some(cipher)), NtStatus::SUCCESS);
    assert!(a.encrypt.is_some());
    assert_eq!(a.tree("data"), NtStatus::SUCCESS);
    write_file(&mut a, "sealed", b"sealed both ways");
    let mut b = Client::with_seed(cfg.clone(), b"another seed, thirty-two bytes or more");
    b.negotiate(&[dialect::SMB3_1_1], &[cipher]);
    assert_eq!(bind(&mut a, &mut b, "alice", "wonderland"), NtStatus::SUCCESS);
    b.tree_id = a.tree_id;
    b.encrypt = a.encrypt.clone();
    let r = through_channel(&mut a, &mut b, vec![msg(Request::Create(create("sealed", create_disposition::OPEN, 0, RW)), false)]);
    assert_eq!(r[0].status(), NtStatus::SUCCESS);
    let Response::Create(cr) = r[0].body() else { panic!() };
    let read = read64(cr.file_id);
    let r = through_channel(&mut a, &mut b, vec![msg(Request::Read(read), false)]);
    let Response::Read(rd) = r[0].body() else { panic!("{:?}", r[0].status()) };
    assert_eq!(rd.data, b"sealed both ways");
}

/// A frame whose batch takes long (a cluster waiting for a leader) goes
/// asynchronous when the driver says so (MS-SMB2 3.3.4.2): every request
/// of the compound gets an interim STATUS_PENDING in the ASYNC form, with
/// its own nonzero AsyncId and the credits; the final responses carry the
/// same AsyncIds, no credits, and the batch's real statuses; a second
/// word, or one for a finished batch, sends nothing. Plain signed and
/// encrypted sessions alike.
#[test]
fn a_slow_batch_is_answered_pending_then_completed_async() {
    for encrypt in [false, true] {
        let mut c = Client::connected_with(ServerConfig { encrypt, ..Default::default() });
        assert_eq!(c.encrypt.is_some(), encrypt);
        let msgs = vec![
            msg(Request::Create(create("slow.txt", create_disposition::OVERWRITE_IF, create_options::NON_DIRECTORY_FILE, RW)), false),
            write_related(b"written while no leader was known"),
            close_related(),
        ];
        let f = c.frame(msgs, true);
        let events = c.conn.on_frame(&f, NOW, &c.dir);
        let [Event::Run { token, batch, .. }] = &events[..] else { panic!("one batch: {events:?}") };
        let (token, batch) = (*token, batch.clone());
        let interim = c.conn.go_async(token);
        assert!(matches!(&interim[..], [Event::Send(_)]), "one interim frame: {interim:?}");
        let pending = sent_replies(&c, interim);
        assert_eq!(pending.iter().map(|r| r.header.command).collect::<Vec<_>>(), [Command::CREATE, Command::WRITE, Command::CLOSE]);
        let mut ids = Vec::new();
        for r in &pending {
            assert_eq!(r.status(), NtStatus::PENDING);
            assert!(r.header.flags.is_async(), "interim in the ASYNC form");
            let id = r.header.async_id().expect("an AsyncId");
            assert!(id != 0 && !ids.contains(&id), "AsyncIds nonzero and distinct: {ids:?} {id}");
            ids.push(id);
            assert!(r.header.credit > 0, "the interim grants the credits");
        }
        assert!(c.conn.go_async(token).is_empty(), "one interim per request");
        let done = c.conn.on_batch_done(token, c.engine.run(&batch), NOW);
        assert!(matches!(&done[..], [Event::Send(_)]), "one final frame: {done:?}");
        let finals = sent_replies(&c, done);
        assert_eq!(finals.len(), 3);
        for (r, id) in finals.iter().zip(&ids) {
            assert_eq!(r.status(), NtStatus::SUCCESS, "{:?}", r.header.command);
            assert!(r.header.flags.is_async());
            assert_eq!(r.header.async_id(), Some(*id), "the final answer names the interim's AsyncId");
            assert_eq!(r.header.credit, 0, "credits went with the interim (MS-SMB2 3.3.4.3)");
        }
        assert!(c.conn.go_async(token).is_empty(), "nothing for a finished batch");
        assert_eq!(read_file(&mut c, "slow.txt").1, b"written while no leader was known");
    }
}

#[test]
fn encrypted_sessions_round_trip_and_refuse_plaintext() {
    for cipher in [
        algorithm::AES_128_GCM,
        algorithm::AES_128_CCM,
        algorithm::AES_256_GCM,
    ] {
        let cfg = ServerConfig {
            encrypt: true,
            ..Default::default()
        };
        let mut c = Client::new(cfg);
        c.negotiate(&[dialect::SMB3_1_1], &[cipher]);
        assert_eq!(
            c.login("alice", "wonderland", Some(cipher)),
            NtStatus::SUCCESS
        );
        assert!(c.encrypt.is_some(), "ENCRYPT_DATA granted");
        assert_eq!(c.tree("data"), NtStatus::SUCCESS);
        write_file(&mut c, "secret", b"top secret");
        assert_eq!(read_file(&mut c, "secret").1, b"top secret");
        // Plaintext on an encrypted session is refused.
        let keys = c.encrypt.take();
        let f = c.frame(vec![msg(Request::Echo(Default::default()), false)], true);
        c.encrypt = keys;
        let raw = c.conn.on_frame(&f, NOW, &c.dir);
        let Some(Event::Send(out)) = raw.into_iter().next() else {
            panic!()
        };
        let plain = if out[4] == 0xFD {
            c.encrypt.as_ref().unwrap().1.decrypt(&out[4..]).unwrap()
        } else {
            out[4..].to_vec()
        };
        assert_eq!(
            Header::decode(&plain).unwrap().status,
            NtStatus::ACCESS_DENIED
        );
        // A tampered encrypted frame ends the connection.
        let mut f = c.frame(vec![msg(Request::Echo(Default::default()), false)], true);
        let n = f.len();
        f[n - 1] ^= 1;
        assert_eq!(c.conn.on_frame(&f, NOW, &c.dir), vec![Event::Close]);
    }
    let _ = TransformHeader::SIZE;
}

#[test]
fn tree_connect_errors_and_read_only_shares() {
    let mut c = Client::connected();
    assert_eq!(c.tree("nosuch"), NtStatus::BAD_NETWORK_NAME);
    assert_eq!(c.tree("IPC$"), NtStatus::SUCCESS);
    assert_eq!(c.tree("ro"), NtStatus::SUCCESS);
    let r = write_file(&mut c, "x", b"no");
    assert_eq!(r[0].status(), NtStatus::ACCESS_DENIED);
    let r = list(&mut c, "", "*");
    assert_eq!(r, vec![".", ".."]);
}

#[test]
fn credits_window_is_enforced() {
    let mut c = Client::connected();
    // Reusing a message id ends the connection.
    c.next_id -= 1;
    let f = c.frame(vec![msg(Request::Echo(Default::default()), false)], true);
    assert!(c.replies(&f).is_empty());
    assert!(c.closed);
    // Far beyond the window too.
    let mut c = Client::connected();
    c.next_id += 10_000;
    let f = c.frame(vec![msg(Request::Echo(Default::default()), false)], true);
    assert!(c.replies(&f).is_empty());
    // Grants never exceed the configured maximum.
    let mut c = Client::new(ServerConfig {
        max_credits: 16,
        ..Default::default()
    });
    let r = c.negotiate(&[dialect::SMB3_0], &[]);
    assert!(r.header.credit <= 16);
}

#[test]
fn smb1_multi_protocol_negotiate_gets_the_wildcard() {
    let mut c = Client::new(ServerConfig::default());
    let mut f = vec![0xFF, b'S', b'M', b'B', 0x72];
    f.resize(32, 0);
    f.push(0); // WordCount
    let names = b"\x02NT LM 0.12\0\x02SMB 2.002\0\x02SMB 2.???\0";
    f.extend_from_slice(&(names.len() as u16).to_le_bytes());
    f.extend_from_slice(names);
    let resp = c.exchange(&f).unwrap();
    let h = Header::decode(&resp).unwrap();
    let Response::Negotiate(n) = Response::decode(&h, &resp).unwrap() else {
        panic!()
    };
    assert_eq!(n.dialect_revision, dialect::SMB2_WILDCARD);
    // Then the SMB2 NEGOTIATE with message id 1.
    c.next_id = 1;
    c.negotiate(&[dialect::SMB2_1, dialect::SMB3_0_2], &[]);
    assert_eq!(c.dialect, dialect::SMB3_0_2);
}

#[test]
fn validate_negotiate_info_and_unknown_ioctls() {
    use duet_protocols::smb2::ioctl::{
        ctl_code, IoctlRequest, ValidateNegotiateInfoRequest, ValidateNegotiateInfoResponse,
    };
    let mut c = Client::new(ServerConfig::default());
    c.negotiate(&[dialect::SMB2_1, dialect::SMB3_0], &[]);
    assert_eq!(c.login("alice", "wonderland", None), NtStatus::SUCCESS);
    assert_eq!(c.tree("data"), NtStatus::SUCCESS);
    let mut input = Vec::new();
    ValidateNegotiateInfoRequest {
        capabilities: 0x7f,
        guid: [0x11; 16],
        security_mode: 1,
        dialects: vec![dialect::SMB2_1, dialect::SMB3_0],
    }
    .encode(&mut input);
    let r = c.one(Request::Ioctl(IoctlRequest {
        ctl_code: ctl_code::FSCTL_VALIDATE_NEGOTIATE_INFO,
        file_id: FileId::RELATED,
        input: &input,
        max_input_response: 0,
        output: &[],
        max_output_response: 24,
        flags: IoctlRequest::IS_FSCTL,
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let Response::Ioctl(io) = r.body() else {
        panic!()
    };
    let v = ValidateNegotiateInfoResponse::decode(io.output).unwrap();
    assert_eq!(v.dialect, dialect::SMB3_0);
    // An FSCTL duet does not implement (FSCTL_SET_INTEGRITY_INFORMATION).
    let r = c.one(Request::Ioctl(IoctlRequest {
        ctl_code: 0x0009_C280,
        file_id: FileId::RELATED,
        input: &[],
        max_input_response: 0,
        output: &[],
        max_output_response: 0,
        flags: IoctlRequest::IS_FSCTL,
    }));
    assert_eq!(r.status(), NtStatus::INVALID_DEVICE_REQUEST);
    assert!(!c.closed);
}

#[test]
fn byte_range_locks() {
    use duet_protocols::smb2::lock::{LockElement, LockRequest};
    let mut c = Client::connected();
    let mut fids = Vec::new();
    for _ in 0..2 {
        let r = c.one(Request::Create(create(
            "locked",
            create_disposition::OPEN_IF,
            0,
            RW,
        )));
        let Response::Create(cr) = r.body() else {
            panic!()
        };
        fids.push(cr.file_id);
    }
    let mut storage = Vec::new();
    let l = LockRequest::new(
        0,
        fids[0],
        &[LockElement {
            offset: 0,
            length: 10,
            flags: LockElement::EXCLUSIVE_LOCK | LockElement::FAIL_IMMEDIATELY,
        }],
        &mut storage,
    );
    assert_eq!(c.one(Request::Lock(l)).status(), NtStatus::SUCCESS);
    let mut storage = Vec::new();
    let l = LockRequest::new(
        0,
        fids[1],
        &[LockElement {
            offset: 5,
            length: 10,
            flags: LockElement::SHARED_LOCK | LockElement::FAIL_IMMEDIATELY,
        }],
        &mut storage,
    );
    assert_eq!(c.one(Request::Lock(l)).status(), NtStatus::LOCK_NOT_GRANTED);
    let r = c.one(Request::Write(WriteRequest {
        offset: 0,
        file_id: fids[1],
        channel: 0,
        remaining_bytes: 0,
        flags: 0,
        write_channel_info: &[],
        data: b"x",
    }));
    assert_eq!(r.status(), NtStatus::FILE_LOCK_CONFLICT);
    let mut storage = Vec::new();
    let l = LockRequest::new(
        0,
        fids[0],
        &[LockElement {
            offset: 0,
            length: 10,
            flags: LockElement::UNLOCK,
        }],
        &mut storage,
    );
    assert_eq!(c.one(Request::Lock(l)).status(), NtStatus::SUCCESS);
    let mut storage = Vec::new();
    let l = LockRequest::new(
        0,
        fids[0],
        &[LockElement {
            offset: 0,
            length: 10,
            flags: LockElement::UNLOCK,
        }],
        &mut storage,
    );
    assert_eq!(c.one(Request::Lock(l)).status(), NtStatus::RANGE_NOT_LOCKED);
}

/// The frames of `events` (sends only), decrypted, as replies; the
/// signatures of signed ones verified.
fn sent_replies(c: &Client, events: Vec<Event>) -> Vec<Reply> {
    let mut out = Vec::new();
    for e in events {
        let Event::Send(f) = e else { continue };
        let body = f[4..].to_vec();
        let plain = if body.starts_with(&[0xFD, b'S', b'M', b'B']) {
            c.encrypt.as_ref().unwrap().1.decrypt(&body).expect("reply decrypts")
        } else {
            body
        };
        for m in Compound::new(&plain) {
            let m = m.unwrap();
            if m.header.flags.is_signed() {
                assert!(c.signing.as_ref().expect("signed reply without a key").verify(m.bytes), "signature of {:?}", m.header.command);
            }
            out.push(Reply { header: m.header, bytes: m.bytes.to_vec() });
        }
    }
    out
}

/// MS-SMB2 3.3.5.14.2 / 3.3.4.2: a LOCK without FAIL_IMMEDIATELY that
/// conflicts waits (STATUS_PENDING, ASYNC form), completes when the range
/// is unlocked, and completes with STATUS_CANCELLED on CANCEL (3.3.5.16);
/// closing the holder's open releases its locks to a waiter.
#[test]
fn blocking_locks_wait_complete_and_cancel() {
    use duet_protocols::smb2::lock::{LockElement, LockRequest};
    let mut c = Client::connected();
    let mut fids = Vec::new();
    for _ in 0..3 {
        let r = c.one(Request::Create(create("blocking", create_disposition::OPEN_IF, 0, RW)));
        let Response::Create(cr) = r.body() else { panic!() };
        fids.push(cr.file_id);
    }
    let lock = |c: &mut Client, fid, offset, flags| {
        let mut storage = Vec::new();
        let l = LockRequest::new(0, fid, &[LockElement { offset, length: 10, flags }], &mut storage);
        c.one(Request::Lock(l))
    };
    assert_eq!(lock(&mut c, fids[0], 0, LockElement::EXCLUSIVE_LOCK).status(), NtStatus::SUCCESS);
    // Waits.
    let interim = lock(&mut c, fids[1], 0, LockElement::SHARED_LOCK);
    assert_eq!(interim.status(), NtStatus::PENDING);
    assert!(interim.header.flags.is_async());
    let wait_id = interim.header.message_id;
    assert_eq!(c.conn.waiting_locks(), 1);
    assert!({ let ev = c.conn.poll_locks(NOW); sent_replies(&c, ev) }.is_empty(), "still waiting");
    // Unlock: the waiter is granted and answered.
    let r = lock(&mut c, fids[0], 0, LockElement::UNLOCK);
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let done = { let ev = c.conn.poll_locks(NOW); sent_replies(&c, ev) };
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].status(), done[0].header.message_id, done[0].header.ids),
        (NtStatus::SUCCESS, wait_id, interim.header.ids)
    );
    assert_eq!(c.conn.waiting_locks(), 0);
    // Another waits for fids[1]'s shared lock, and is cancelled.
    let interim = lock(&mut c, fids[2], 5, LockElement::EXCLUSIVE_LOCK);
    assert_eq!(interim.status(), NtStatus::PENDING);
    let mut h = interim.header;
    h.flags.0 = duet_protocols::smb2::header::HeaderFlags::ASYNC_COMMAND;
    h.command = Command::CANCEL;
    h.status = NtStatus::SUCCESS;
    h.credit = 0;
    let mut m = Vec::new();
    h.encode(&mut m);
    m.extend_from_slice(&[4, 0, 0, 0]);
    let frame = c.frame_raw(&m);
    let ev = c.conn.on_frame(&frame, NOW, &c.dir);
    let done = sent_replies(&c, ev);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].status(), done[0].header.message_id), (NtStatus::CANCELLED, interim.header.message_id));
    assert_eq!(c.conn.waiting_locks(), 0);
    // A waiter whose own open closes is answered RANGE_NOT_LOCKED.
    let interim = lock(&mut c, fids[2], 5, LockElement::EXCLUSIVE_LOCK);
    assert_eq!(interim.status(), NtStatus::PENDING);
    let r = c.one(Request::Close(CloseRequest { flags: 0, file_id: fids[2] }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let done = { let ev = c.conn.poll_locks(NOW); sent_replies(&c, ev) };
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status(), NtStatus::RANGE_NOT_LOCKED);
    // Several elements never wait: one that might is INVALID_PARAMETER
    // (MS-SMB2 3.3.5.14.2), and with FAIL_IMMEDIATELY on each a conflict
    // is LOCK_NOT_GRANTED at once.
    let mut storage = Vec::new();
    let els = [
        LockElement { offset: 100, length: 1, flags: LockElement::EXCLUSIVE_LOCK },
        LockElement { offset: 0, length: 1, flags: LockElement::EXCLUSIVE_LOCK },
    ];
    let l = LockRequest::new(0, fids[0], &els, &mut storage);
    assert_eq!(c.one(Request::Lock(l)).status(), NtStatus::INVALID_PARAMETER);
    let mut storage = Vec::new();
    let x = LockElement::EXCLUSIVE_LOCK | LockElement::FAIL_IMMEDIATELY;
    let els = [LockElement { offset: 100, length: 1, flags: x }, LockElement { offset: 0, length: 1, flags: x }];
    let l = LockRequest::new(0, fids[0], &els, &mut storage);
    assert_eq!(c.one(Request::Lock(l)).status(), NtStatus::LOCK_NOT_GRANTED);
    // ... and the element taken before the failing one was released.
    assert_eq!(lock(&mut c, fids[1], 95, LockElement::SHARED_LOCK | LockElement::FAIL_IMMEDIATELY).status(), NtStatus::SUCCESS);
    // A range past 2^64 - 1 (MS-FSA 2.1.5.8).
    let mut storage = Vec::new();
    let els = [LockElement { offset: u64::MAX, length: 2, flags: LockElement::SHARED_LOCK | LockElement::FAIL_IMMEDIATELY }];
    let l = LockRequest::new(0, fids[0], &els, &mut storage);
    assert_eq!(c.one(Request::Lock(l)).status(), NtStatus::INVALID_LOCK_RANGE);
}

#[test]
fn logoff_and_tree_disconnect_drop_state() {
    let mut c = Client::connected();
    let r = c.one(Request::Create(create(
        "open-at-logoff",
        create_disposition::CREATE,
        create_options::DELETE_ON_CLOSE,
        RW | 0x0001_0000,
    )));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    assert_eq!(c.conn.open_count(), 1);
    let r = c.one(Request::TreeDisconnect(Default::default()));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    assert_eq!(c.conn.open_count(), 0);
    assert_eq!(c.tree("data"), NtStatus::SUCCESS);
    assert_eq!(
        read_file(&mut c, "open-at-logoff").0[0],
        NtStatus::OBJECT_NAME_NOT_FOUND,
        "deleted on disconnect"
    );
    let r = c.one(Request::Logoff(Default::default()));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    c.signing = None;
    assert_eq!(
        c.one(Request::Echo(Default::default())).status(),
        NtStatus::USER_SESSION_DELETED
    );
}


/// `\PIPE\lsarpc` (MS-LSAT): a BIND to lsarpc, LsarOpenPolicy2, a
/// LsarLookupSids of alice's machine SID, a well-known SID and an unknown
/// one, a LsarLookupNames back, LsarClose; and the srvsvc interface is not
/// served on this pipe.
#[test]
fn ipc_lsarpc_lookups() {
    use duet_fs::acl::{Sid, SidMap};
    use duet_protocols::dcerpc::header::{pfc, CommonHeader, PacketType};
    use duet_protocols::dcerpc::lsarpc::{
        ntstatus, opnum, sid_type, LookupNamesReply, LookupNamesRequest, LookupSidsReply, LookupSidsRequest,
        POLICY_HANDLE,
    };
    use duet_protocols::dcerpc::request::Request as RpcRequest;
    use duet_protocols::dcerpc::LSARPC;
    let mut c = Client::connected();
    let machine = Sid::new(5, &[21, 11, 22, 33]);
    c.dir.sid_map = Some(std::sync::Arc::new(SidMap {
        machine: Some(machine.clone()),
        users: [1000, 1001, 1002].into(),
        groups: [1000, 1001, 1002].into(),
    }));
    let r = c.one(Request::TreeConnect(TreeConnectRequest { flags: 0, path: Utf16::Str("\\\\duet\\IPC$") }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    c.tree_id = r.header.tree_id().unwrap();
    let fid = open_pipe(&mut c, "lsarpc").expect("lsarpc opens");
    // smbclient's srvsvc BIND, on this pipe: the abstract syntax is refused.
    let r = c.one(transceive(fid, &unhex(SMBCLIENT_BIND), 4280));
    let ack = BindAck::decode(&ioctl_output(&r)).unwrap();
    assert_ne!(ack.results[0].result, 0);
    let fid = open_pipe(&mut c, "\\lsarpc").unwrap();
    let mut bind = unhex(SMBCLIENT_BIND);
    bind[32..48].copy_from_slice(&LSARPC.uuid.0);
    bind[48..52].copy_from_slice(&0u32.to_le_bytes());
    let r = c.one(transceive(fid, &bind, 4280));
    let ack = BindAck::decode(&ioctl_output(&r)).unwrap();
    assert_eq!(ack.sec_addr, "\\PIPE\\lsarpc");
    assert_eq!((ack.results[0].result, ack.results[0].transfer_syntax), (0, NDR32));
    let mut call_id = 1;
    let mut call = |c: &mut Client, op: u16, stub: &[u8]| -> Vec<u8> {
        call_id += 1;
        let mut out = Vec::new();
        let mut h = CommonHeader::outgoing(PacketType::REQUEST, pfc::FIRST_FRAG | pfc::LAST_FRAG, call_id);
        h.drep = duet_protocols::dcerpc::header::DREP_LE;
        RpcRequest { header: h, alloc_hint: stub.len() as u32, p_cont_id: 0, opnum: op, object: None, stub }
            .encode(&mut out);
        let r = c.one(transceive(fid, &out, 4280));
        assert_eq!(r.status(), NtStatus::SUCCESS);
        let out = ioctl_output(&r);
        match RpcResponse::decode(&out) {
            Ok(r) => r.stub.to_vec(),
            Err(_) => panic!("opnum {op}: {:?}", Fault::decode(&out)),
        }
    };
    // OpenPolicy2 (SystemName NULL, empty ObjectAttributes, access 0x800).
    let mut open = vec![0u8; 4];
    open.extend_from_slice(&24u32.to_le_bytes());
    open.extend_from_slice(&[0; 20]);
    open.extend_from_slice(&0x800u32.to_le_bytes());
    let out = call(&mut c, opnum::OPEN_POLICY2, &open);
    assert_eq!(out[..20], POLICY_HANDLE);
    let alice = c.dir.sid_map.as_ref().unwrap().to_wire(&Sid::unix_user(1000));
    let unknown = Sid::new(5, &[21, 1, 1, 1, 500]);
    let req = LookupSidsRequest { handle: Some(POLICY_HANDLE), sids: vec![Some(alice.clone()), Some(Sid::everyone()), Some(unknown)] };
    let out = call(&mut c, opnum::LOOKUP_SIDS, &req.encode(1));
    let reply = LookupSidsReply::decode(&out, 1).unwrap();
    assert_eq!((reply.status, reply.mapped), (ntstatus::SOME_NOT_MAPPED, 2));
    assert_eq!(reply.names[0], (sid_type::USER, "alice".to_string(), 0));
    assert_eq!((reply.domains[0].name.as_str(), &reply.domains[0].sid), ("DUET", &machine));
    assert_eq!(reply.names[1].1, "Everyone");
    assert_eq!(reply.names[2].0, sid_type::UNKNOWN);
    let req = LookupNamesRequest { handle: POLICY_HANDLE, names: vec!["DUET\\carol".into(), "nobody".into()] };
    let out = call(&mut c, opnum::LOOKUP_NAMES3, &req.encode(3));
    let reply = LookupNamesReply::decode(&out, 3).unwrap();
    assert_eq!(reply.status, ntstatus::SOME_NOT_MAPPED);
    let carol = c.dir.sid_map.as_ref().unwrap().to_wire(&Sid::unix_user(1002));
    assert_eq!(reply.sids[0], (sid_type::USER, Some(carol), 0));
    // LsarGetUserName: the session's user.
    let out = call(&mut c, opnum::GET_USER_NAME, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0]);
    let name: Vec<u16> = "alice".encode_utf16().collect();
    let raw: Vec<u8> = name.iter().flat_map(|u| u.to_le_bytes()).collect();
    assert!(out.windows(raw.len()).any(|w| w == raw), "{out:?}");
    let out = call(&mut c, opnum::CLOSE, &POLICY_HANDLE);
    assert_eq!(out, [0; 24]);
}

// ---- IPC$ and the srvsvc pipe -------------------------------------------

/// smbclient 4.17's BIND to srvsvc and its NetrShareEnum level 1 call
/// (smbclient-vs-samba.pcapng frames 17 and 23, the FSCTL_PIPE_TRANSCEIVE
/// inputs).
const SMBCLIENT_BIND: &str = "05000b03100000004800000001000000b810b810000000000100000000000100c84f324b7016d30112785a47bf6ee18803000000045d888aeb1cc9119fe808002b10486002000000";
const SMBCLIENT_SHARE_ENUM: &str = "05000003100000005c000000020000004400000000000f00000002000a000000000000000a0000003100320037002e0030002e0030002e00310000000100000001000000040002000000000000000000ffffffff0800020000000000";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn transceive(file_id: FileId, input: &[u8], max_out: u32) -> Request<'_> {
    Request::Ioctl(IoctlRequest {
        ctl_code: ctl_code::FSCTL_PIPE_TRANSCEIVE,
        file_id,
        input,
        max_input_response: 0,
        output: &[],
        max_output_response: max_out,
        flags: IoctlRequest::IS_FSCTL,
    })
}

fn ioctl_output(r: &Reply) -> Vec<u8> {
    match r.body() {
        Response::Ioctl(io) => io.output.to_vec(),
        other => panic!("{other:?}"),
    }
}

/// An IPC$ tree connect and an open of `name`; returns the open's FileId.
fn open_pipe(c: &mut Client, name: &str) -> Result<FileId, NtStatus> {
    let r = c.one(Request::Create(create(
        name,
        create_disposition::OPEN,
        0,
        RW,
    )));
    match r.body() {
        Response::Create(cr) if r.status() == NtStatus::SUCCESS => Ok(cr.file_id),
        _ => Err(r.status()),
    }
}

#[test]
fn ipc_srvsvc_bind_and_share_enum() {
    let mut c = Client::connected();
    let r = c.one(Request::TreeConnect(TreeConnectRequest {
        flags: 0,
        path: Utf16::Str("\\\\duet\\IPC$"),
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    c.tree_id = r.header.tree_id().unwrap();
    match r.body() {
        Response::TreeConnect(t) => assert_eq!(t.share_type, 2, "SMB2_SHARE_TYPE_PIPE"),
        other => panic!("{other:?}"),
    }
    for other in ["\\wkssvc", "nosuch"] {
        assert_eq!(
            open_pipe(&mut c, other),
            Err(NtStatus::OBJECT_NAME_NOT_FOUND)
        );
    }
    let fid = open_pipe(&mut c, "srvsvc").expect("srvsvc opens");
    let runs = c.runs;
    // BIND -> BIND_ACK accepting NDR32 on context 0.
    let bind = unhex(SMBCLIENT_BIND);
    let r = c.one(transceive(fid, &bind, 4280));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let ack = BindAck::decode(&ioctl_output(&r)).unwrap();
    assert_eq!(ack.call_id, 1);
    assert_eq!(ack.sec_addr, "\\PIPE\\srvsvc");
    assert_eq!(ack.results.len(), 1);
    assert_eq!(
        (ack.results[0].result, ack.results[0].transfer_syntax),
        (0, NDR32)
    );
    // NetrShareEnum level 1 -> the shares of the Directory and IPC$.
    let req = unhex(SMBCLIENT_SHARE_ENUM);
    let r = c.one(transceive(fid, &req, 4280));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let out = ioctl_output(&r);
    let resp = RpcResponse::decode(&out).unwrap();
    assert_eq!(resp.call_id, 2);
    let reply = ShareEnumReply::decode(resp.stub).unwrap();
    let got: Vec<(&str, u32)> = reply.entries.iter().map(|e| (e.0.as_str(), e.1)).collect();
    assert_eq!(got, [("data", 0), ("ro", 0), ("IPC$", 0x8000_0003)]);
    assert_eq!((reply.total, reply.status), (3, 0));
    // An opnum srvsvc does not have: a FAULT with nca_op_rng_error.
    let mut bad = req.clone();
    bad[22] = 200;
    let r = c.one(transceive(fid, &bad, 4280));
    let f = Fault::decode(&ioctl_output(&r)).unwrap();
    assert_eq!(f.status, fault_status::OP_RNG_ERROR);
    // QUERY_INFO FileStandardInformation and FilePipeInformation.
    for (class, len) in [(5u8, 24usize), (23, 8)] {
        let r = c.one(Request::QueryInfo(QueryInfoRequest {
            info_type: info_type::FILE,
            file_info_class: class,
            output_buffer_length: 1024,
            input_buffer: &[],
            additional_information: 0,
            flags: 0,
            file_id: fid,
        }));
        assert_eq!(r.status(), NtStatus::SUCCESS, "class {class}");
        match r.body() {
            Response::QueryInfo(q) => assert_eq!(q.output_buffer.len(), len),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(c.runs, runs, "pipe traffic never reaches the engine");
    let r = c.one(Request::Close(CloseRequest {
        flags: 0,
        file_id: fid,
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let r = c.one(transceive(fid, &req, 4280));
    assert_eq!(r.status(), NtStatus::FILE_CLOSED);
    // FSCTL_PIPE_WAIT names a pipe (MS-FSCC 2.3.49).
    for (name, want) in [
        ("srvsvc", NtStatus::SUCCESS),
        ("nope", NtStatus::OBJECT_NAME_NOT_FOUND),
    ] {
        let units: Vec<u8> = name.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let mut input = vec![0u8; 14];
        input[8..12].copy_from_slice(&(units.len() as u32).to_le_bytes());
        input.extend_from_slice(&units);
        let r = c.one(Request::Ioctl(IoctlRequest {
            ctl_code: ctl_code::FSCTL_PIPE_WAIT,
            file_id: FileId {
                persistent: u64::MAX,
                volatile: u64::MAX,
            },
            input: &input,
            max_input_response: 0,
            output: &[],
            max_output_response: 0,
            flags: IoctlRequest::IS_FSCTL,
        }));
        assert_eq!(r.status(), want, "{name}");
    }
}

#[test]
fn ipc_pipe_write_read_overflow_and_compound() {
    let mut c = Client::connected();
    assert_eq!(c.tree("IPC$"), NtStatus::SUCCESS);
    // CREATE + WRITE(bind) + READ in one related compound.
    let bind = unhex(SMBCLIENT_BIND);
    let read = |file_id, length| {
        Request::Read(ReadRequest {
            padding: 0x50,
            flags: 0,
            length,
            offset: 0,
            file_id,
            minimum_count: 0,
            channel: 0,
            remaining_bytes: 0,
            read_channel_info: &[],
        })
    };
    let r = c.call(vec![
        msg(
            Request::Create(create("\\srvsvc", create_disposition::OPEN, 0, RW)),
            false,
        ),
        write_related(&bind),
        msg(read(FileId::RELATED, 1024), true),
    ]);
    let st: Vec<NtStatus> = r.iter().map(Reply::status).collect();
    assert_eq!(st, [NtStatus::SUCCESS; 3]);
    let fid = match r[0].body() {
        Response::Create(cr) => cr.file_id,
        other => panic!("{other:?}"),
    };
    match r[2].body() {
        Response::Read(rr) => assert_eq!(rr.data[2], 12, "BIND_ACK"),
        other => panic!("{other:?}"),
    }
    // Nothing left to read.
    assert_eq!(c.one(read(fid, 1024)).status(), NtStatus(0xC000_00D9));
    // A response read with a small READ: BUFFER_OVERFLOW, then the rest.
    let req = unhex(SMBCLIENT_SHARE_ENUM);
    let r = c.one(Request::Write(WriteRequest {
        offset: 0,
        file_id: fid,
        channel: 0,
        remaining_bytes: 0,
        flags: 0,
        write_channel_info: &[],
        data: &req,
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let r = c.one(read(fid, 40));
    assert_eq!(r.status(), NtStatus::BUFFER_OVERFLOW);
    let mut pdu = match r.body() {
        Response::Read(rr) => rr.data.to_vec(),
        other => panic!("{other:?}"),
    };
    assert_eq!(pdu.len(), 40);
    let r = c.one(read(fid, 4096));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    if let Response::Read(rr) = r.body() {
        pdu.extend_from_slice(rr.data);
    }
    let resp = RpcResponse::decode(&pdu).unwrap();
    assert_eq!(ShareEnumReply::decode(resp.stub).unwrap().entries.len(), 3);
    // Pipe handles are gone after TREE_DISCONNECT.
    assert_eq!(
        c.one(Request::TreeDisconnect(Default::default())).status(),
        NtStatus::SUCCESS
    );
    assert_eq!(c.tree("IPC$"), NtStatus::SUCCESS);
    assert_eq!(c.one(read(fid, 10)).status(), NtStatus::FILE_CLOSED);
}

#[test]
fn ipc_hostile_pipe_input_is_answered_without_panics() {
    let mut c = Client::connected();
    assert_eq!(c.tree("IPC$"), NtStatus::SUCCESS);
    let fid = open_pipe(&mut c, "srvsvc").unwrap();
    let bind = unhex(SMBCLIENT_BIND);
    let req = unhex(SMBCLIENT_SHARE_ENUM);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..400 {
        let mut m = if i % 2 == 0 {
            bind.clone()
        } else {
            req.clone()
        };
        for _ in 0..(i % 5 + 1) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = (seed as usize) % m.len();
            m[at] = (seed >> 32) as u8;
        }
        if i % 7 == 0 {
            m.truncate((seed as usize) % m.len());
        }
        let r = c.one(transceive(fid, &m, 4280));
        assert!(
            [NtStatus::SUCCESS, NtStatus::BUFFER_OVERFLOW].contains(&r.status()),
            "{:?}",
            r.status()
        );
    }
    // The pipe still answers a fresh open's BIND.
    let fid = open_pipe(&mut c, "srvsvc").unwrap();
    let r = c.one(transceive(fid, &bind, 4280));
    assert_eq!(ioctl_output(&r)[2], 12);
}

// ---- compound rules (MS-SMB2 3.3.5.2.7, as Windows and Samba apply them) --

fn read_msg(file_id: FileId, offset: u64, length: u32, related: bool) -> Msg {
    charged(
        msg(
            Request::Read(ReadRequest {
                padding: 0x50,
                flags: 0,
                length,
                offset,
                file_id,
                minimum_count: 0,
                channel: 0,
                remaining_bytes: 0,
                read_channel_info: &[],
            }),
            related,
        ),
        length,
    )
}

/// The responses of one compound go out as one Direct TCP frame, whose
/// length field has 24 bits (MS-SMB2 2.1): a compound whose responses
/// would pass 16 MiB gets STATUS_INVALID_PARAMETER on the request that
/// would not fit, and every frame's length prefix is its length (the
/// client's `exchange` checks it). Before the bound, two 8 MiB READs made
/// a 16 MiB + 160 byte frame whose length wrapped to 160.
#[test]
fn compound_responses_fit_the_transport_frame() {
    const MIB: u32 = 1 << 20;
    let mut c = Client::connected();
    c.engine.holes = true;
    // Credits for the large reads (each echo grants 32).
    for _ in 0..32 {
        assert_eq!(c.one(Request::Echo(Default::default())).status(), NtStatus::SUCCESS);
    }
    let r = c.one(Request::Create(create("big.bin", create_disposition::CREATE, 0, RW)));
    let Response::Create(cr) = r.body() else {
        panic!("{:?}", r.status())
    };
    let fid = cr.file_id;
    let eof = (24 * u64::from(MIB)).to_le_bytes();
    let r = c.one(Request::SetInfo(SetInfoRequest {
        info_type: info_type::FILE,
        file_info_class: fscc::info_class::END_OF_FILE,
        buffer: &eof,
        additional_information: 0,
        file_id: fid,
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let data_len = |r: &Reply| match r.body() {
        Response::Read(rr) => rr.data.len() as u32,
        other => panic!("{other:?}"),
    };
    // Two 8 MiB READs: 16 MiB of data and two headers do not fit.
    let r = c.call(vec![
        read_msg(fid, 0, 8 * MIB, false),
        read_msg(fid, u64::from(8 * MIB), 8 * MIB, false),
    ]);
    assert_eq!(statuses(&r), vec![NtStatus::SUCCESS, NtStatus::INVALID_PARAMETER]);
    assert_eq!(data_len(&r[0]), 8 * MIB);
    // Just under 16 MiB in all: both are served.
    let r = c.call(vec![
        read_msg(fid, 0, 8 * MIB, false),
        read_msg(fid, u64::from(8 * MIB), 8 * MIB - 4096, false),
    ]);
    assert_eq!(statuses(&r), vec![NtStatus::SUCCESS, NtStatus::SUCCESS]);
    assert_eq!(data_len(&r[1]), 8 * MIB - 4096);
    // Four READs: the one that does not fit fails, the others (the one
    // after it too) are answered.
    let r = c.call(vec![
        read_msg(fid, 0, 4 * MIB, false),
        read_msg(fid, 0, 8 * MIB, false),
        read_msg(fid, 0, 8 * MIB, false),
        read_msg(fid, 0, 2 * MIB, false),
    ]);
    assert_eq!(
        statuses(&r),
        vec![NtStatus::SUCCESS, NtStatus::SUCCESS, NtStatus::INVALID_PARAMETER, NtStatus::SUCCESS]
    );
    assert!(!c.closed);
}

fn close_any(file_id: FileId, related: bool) -> Msg {
    msg(Request::Close(CloseRequest { flags: 0, file_id }), related)
}

fn statuses(r: &[Reply]) -> Vec<NtStatus> {
    r.iter().map(Reply::status).collect()
}

#[test]
fn compound_chain_errors_follow_windows() {
    let mut c = Client::connected();
    assert!(c.session_id < 1 << 32, "session ids fit in 32 bits");
    let open = || {
        msg(
            Request::Create(create("chain", create_disposition::OPEN_IF, 0, RW)),
            false,
        )
    };
    // A first message marked related is invalid, and so are the related
    // ones after it; an unrelated FileId of all ones is just closed.
    let mut first = open();
    first.related = true;
    let r = c.call(vec![
        first,
        close_any(FileId::RELATED, true),
        close_any(FileId::RELATED, false),
    ]);
    assert_eq!(
        statuses(&r),
        [
            NtStatus::INVALID_PARAMETER,
            NtStatus::INVALID_PARAMETER,
            NtStatus::FILE_CLOSED
        ]
    );
    // Related messages inherit session and tree; after an unrelated one
    // with no session, a related one is INVALID_PARAMETER.
    let mut related_close = close_any(FileId::RELATED, true);
    related_close.ids = Some((u64::MAX, u32::MAX));
    let mut lost = close_any(FileId::RELATED, false);
    lost.ids = Some((u64::MAX, u32::MAX));
    let mut lost2 = close_any(FileId::RELATED, false);
    lost2.ids = Some((u64::MAX, u32::MAX));
    let mut last = close_any(FileId::RELATED, true);
    last.ids = Some((u64::MAX, u32::MAX));
    let r = c.call(vec![open(), related_close, lost, lost2, last]);
    assert_eq!(
        statuses(&r),
        [
            NtStatus::SUCCESS,
            NtStatus::SUCCESS,
            NtStatus::USER_SESSION_DELETED,
            NtStatus::USER_SESSION_DELETED,
            NtStatus::INVALID_PARAMETER
        ]
    );
    assert_eq!(
        c.conn.open_count(),
        0,
        "the related CLOSE closed the CREATE's open"
    );
    // Unrelated CLOSEs of FileId -1 fail FILE_CLOSED, and related ones
    // after them fail the same way.
    let r = c.call(vec![
        open(),
        close_any(FileId::RELATED, false),
        close_any(FileId::RELATED, false),
        close_any(FileId::RELATED, true),
        close_any(FileId::RELATED, true),
    ]);
    assert_eq!(
        statuses(&r),
        [
            NtStatus::SUCCESS,
            NtStatus::FILE_CLOSED,
            NtStatus::FILE_CLOSED,
            NtStatus::FILE_CLOSED,
            NtStatus::FILE_CLOSED
        ]
    );
}

#[test]
fn compound_responses_are_all_padded_and_object_ids_are_stable() {
    let mut c = Client::connected();
    write_file(&mut c, "three", b"123");
    let read = |file_id| {
        Request::Read(ReadRequest {
            padding: 0x50,
            flags: 0,
            length: 3,
            offset: 0,
            file_id,
            minimum_count: 1,
            channel: 0,
            remaining_bytes: 0,
            read_channel_info: &[],
        })
    };
    let f = c.frame(
        vec![
            msg(
                Request::Create(create("three", create_disposition::OPEN, 0, READ)),
                false,
            ),
            msg(read(FileId::RELATED), true),
            msg(read(FileId::RELATED), true),
        ],
        true,
    );
    let resp = c.exchange(&f).unwrap();
    let msgs: Vec<_> = Compound::new(&resp).collect::<Result<_, _>>().unwrap();
    assert_eq!(msgs.len(), 3);
    for m in &msgs {
        assert_eq!(m.header.status, NtStatus::SUCCESS);
        assert_eq!(m.bytes.len() % 8, 0, "{:?} padded to 8", m.header.command);
    }
    // The READ bodies: 16 bytes of header, 3 of data, 5 of padding.
    assert_eq!(msgs[2].bytes.len() - 64, 24);
    // A lone READ is not padded.
    let fid = match Response::decode(&msgs[0].header, msgs[0].bytes).unwrap() {
        Response::Create(cr) => cr.file_id,
        other => panic!("{other:?}"),
    };
    let r = c.one(read(fid));
    assert_eq!(r.bytes.len() - 64, 19);
    // FSCTL_CREATE_OR_GET_OBJECT_ID on the CREATE of the same compound,
    // then on the open: the same 64-byte FILE_OBJECTID_BUFFER.
    let ioctl = |file_id| {
        Request::Ioctl(IoctlRequest {
            ctl_code: ctl_code::FSCTL_CREATE_OR_GET_OBJECT_ID,
            file_id,
            input: &[],
            max_input_response: 0,
            output: &[],
            max_output_response: 64,
            flags: IoctlRequest::IS_FSCTL,
        })
    };
    let r = c.call(vec![
        msg(
            Request::Create(create("three", create_disposition::OPEN, 0, READ)),
            false,
        ),
        msg(ioctl(FileId::RELATED), true),
        close_related(),
    ]);
    assert_eq!(statuses(&r), [NtStatus::SUCCESS; 3]);
    let oid = ioctl_output(&r[1]);
    assert_eq!(oid.len(), 64);
    let again = ioctl_output(&c.one(ioctl(fid)));
    assert_eq!(oid, again);
    let r = c.call(vec![msg(ioctl(FileId::RELATED), false), close_related()]);
    assert_eq!(statuses(&r), [NtStatus::FILE_CLOSED, NtStatus::FILE_CLOSED]);
}

#[test]
fn read_write_offsets_past_int64_max_are_invalid() {
    let mut c = Client::connected();
    write_file(&mut c, "rw", b"0123456789");
    let r = c.one(Request::Create(create(
        "rw",
        create_disposition::OPEN,
        0,
        RW,
    )));
    let fid = match r.body() {
        Response::Create(cr) => cr.file_id,
        other => panic!("{other:?}"),
    };
    let read = |offset: u64, length: u32| {
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
    };
    let max = i64::MAX as u64;
    for (offset, len, want) in [
        (max - 1, 1, NtStatus::END_OF_FILE),
        (max, 0, NtStatus::SUCCESS),
        (max, 1, NtStatus::INVALID_PARAMETER),
        (max + 1, 0, NtStatus::INVALID_PARAMETER),
        (u64::MAX, 0, NtStatus::INVALID_PARAMETER),
    ] {
        assert_eq!(
            c.one(read(offset, len)).status(),
            want,
            "read {offset:#x}+{len}"
        );
    }
    let write = |offset: u64, data: &'static [u8]| {
        Request::Write(WriteRequest {
            offset,
            file_id: fid,
            channel: 0,
            remaining_bytes: 0,
            flags: 0,
            write_channel_info: &[],
            data,
        })
    };
    for (offset, data, want) in [
        (u64::MAX, &b"x"[..], NtStatus::INVALID_PARAMETER),
        (1 << 63, &b""[..], NtStatus::INVALID_PARAMETER),
        (max, &b""[..], NtStatus::SUCCESS),
        (max, &b"x"[..], NtStatus::INVALID_PARAMETER),
        (0xfff_ffff_0000, &b"x"[..], NtStatus::INVALID_PARAMETER),
        (0xfff_ffff_0000, &b""[..], NtStatus::SUCCESS),
    ] {
        assert_eq!(
            c.one(write(offset, data)).status(),
            want,
            "write {offset:#x}+{}",
            data.len()
        );
    }
}

#[test]
fn two_query_directories_in_one_compound_continue_the_enumeration() {
    let mut c = Client::connected();
    // "." and ".." fit in the first; the second finds nothing more
    // (smbtorture smb2.compound_find), related or not; a RESTART_SCANS
    // one starts over.
    for (name, related) in [("emptydir1", true), ("emptydir2", false)] {
        let r = c.one(Request::Create(create(
            name,
            create_disposition::CREATE,
            create_options::DIRECTORY_FILE,
            READ,
        )));
        let fid = match r.body() {
            Response::Create(cr) => cr.file_id,
            other => panic!("{other:?}"),
        };
        let find = |related: bool, flags: u8| {
            msg(
                Request::QueryDirectory(QueryDirectoryRequest {
                    file_information_class: fscc::info_class::BOTH_DIRECTORY,
                    flags,
                    file_index: 0,
                    file_id: fid,
                    file_name: Utf16::Str("*"),
                    output_buffer_length: 0x100,
                }),
                related,
            )
        };
        let r = c.call(vec![find(false, 0), find(related, 0)]);
        assert_eq!(statuses(&r), [NtStatus::SUCCESS, NtStatus::NO_MORE_FILES]);
        let r = c.call(vec![
            find(false, QueryDirectoryRequest::RESTART_SCANS),
            find(related, 0),
            find(related, QueryDirectoryRequest::RESTART_SCANS),
        ]);
        assert_eq!(
            statuses(&r),
            [
                NtStatus::SUCCESS,
                NtStatus::NO_MORE_FILES,
                NtStatus::SUCCESS
            ]
        );
    }
}

#[test]
fn failed_chains_fail_every_related_message() {
    let mut c = Client::connected();
    // A CREATE that fails in the engine: the related CHANGE_NOTIFY, CLOSE
    // and security SET_INFO (refused while planning) get its error.
    let notify = |file_id, related| {
        msg(
            Request::ChangeNotify(ChangeNotifyRequest {
                flags: 1,
                output_buffer_length: 0x1000,
                file_id,
                completion_filter: 1,
            }),
            related,
        )
    };
    let set_sd = |file_id| {
        msg(
            Request::SetInfo(SetInfoRequest {
                info_type: info_type::SECURITY,
                file_info_class: 0,
                buffer: &[
                    1, 0, 4, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                ],
                additional_information: 4,
                file_id,
            }),
            true,
        )
    };
    let r = c.call(vec![
        msg(
            Request::Create(create("no-such-file", create_disposition::OPEN, 0, RW)),
            false,
        ),
        notify(FileId::RELATED, true),
        close_any(FileId::RELATED, true),
        set_sd(FileId::RELATED),
    ]);
    assert_eq!(statuses(&r), [NtStatus::OBJECT_NAME_NOT_FOUND; 4]);
    // A first message marked related fails, and so does every related one
    // after it, even one naming a real open (which stays open).
    let r = c.one(Request::Create(create(
        "real",
        create_disposition::OPEN_IF,
        0,
        RW,
    )));
    let fid = match r.body() {
        Response::Create(cr) => cr.file_id,
        other => panic!("{other:?}"),
    };
    let r = c.call(vec![notify(fid, true), close_any(fid, true), set_sd(fid)]);
    assert_eq!(statuses(&r), [NtStatus::INVALID_PARAMETER; 3]);
    assert_eq!(c.conn.open_count(), 1);
}

// ---- captured client bytes ----------------------------------------------

fn capture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/smb2")
        .join(name);
    let text = std::fs::read_to_string(p).unwrap();
    let hex: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_whitespace())
        .collect();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn replay(conn: &mut Connection, dir: &TestDir, frame: &[u8]) -> Option<(Header, Vec<u8>)> {
    let ev = conn.on_frame(frame, NOW, dir);
    match ev.into_iter().next() {
        Some(Event::Send(f)) => {
            let b = f[4..].to_vec();
            Some((Header::decode(&b).unwrap(), b))
        }
        _ => None,
    }
}

#[test]
fn captured_cifs_and_smbclient_logons_reach_the_ntlm_check() {
    for (neg, ss1, ss2) in [
        (
            "cifs-0004-negotiate-req.hex",
            "cifs-0008-session_setup-req.hex",
            "cifs-0010-session_setup-req.hex",
        ),
        (
            "smbclient-0004-negotiate-req.hex",
            "smbclient-0008-session_setup-req.hex",
            "smbclient-0010-session_setup-req.hex",
        ),
    ] {
        let mut engine = Engine::new();
        let dir = dir_with(&mut engine);
        let mut conn = Connection::new(ServerConfig::default(), NOW, &[1; 32]);
        let (h, b) = replay(&mut conn, &dir, &capture(neg)).expect(neg);
        assert_eq!(h.status, NtStatus::SUCCESS, "{neg}");
        let Response::Negotiate(n) = Response::decode(&h, &b).unwrap() else {
            panic!()
        };
        assert_eq!(n.dialect_revision, dialect::SMB3_1_1, "{neg}");
        assert!(n
            .negotiate_contexts
            .iter()
            .any(|c| matches!(c, NegotiateContext::PreauthIntegrity { .. })));
        assert!(!n.security_buffer.is_empty());
        let (h, b) = replay(&mut conn, &dir, &capture(ss1)).expect(ss1);
        assert_eq!(h.status, NtStatus::MORE_PROCESSING_REQUIRED, "{ss1}");
        let Response::SessionSetup(s) = Response::decode(&h, &b).unwrap() else {
            panic!()
        };
        assert!(!s.security_buffer.is_empty());
        // The captured AUTHENTICATE answers Samba's challenge, not ours.
        // Give it our session id so it reaches the NTLMv2 check.
        let mut f = capture(ss2);
        f[40..48].copy_from_slice(&h.session_id.to_le_bytes());
        let (h, _) = replay(&mut conn, &dir, &f).expect(ss2);
        assert_eq!(h.status, NtStatus::LOGON_FAILURE, "{ss2}");
        assert!(!conn.is_closed());
    }
}

#[test]
fn captured_requests_before_logon_are_refused_without_panics() {
    let dir_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/smb2");
    let mut names: Vec<String> = std::fs::read_dir(dir_path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-req.hex"))
        .collect();
    names.sort();
    let mut engine = Engine::new();
    let dir = dir_with(&mut engine);
    let mut conn = Connection::new(ServerConfig::default(), NOW, &[2; 32]);
    replay(&mut conn, &dir, &capture("cifs-0004-negotiate-req.hex"));
    for n in names.iter().filter(|n| !n.contains("negotiate")) {
        let f = capture(n);
        // Every prefix and a few corruptions: never a panic.
        for cut in [f.len(), f.len() / 2, 70, 64, 10] {
            let mut c2 = Connection::new(ServerConfig::default(), NOW, &[3; 32]);
            replay(&mut c2, &dir, &capture("cifs-0004-negotiate-req.hex"));
            let _ = c2.on_frame(&f[..cut.min(f.len())], NOW, &dir);
        }
        let _ = conn.on_frame(&f, NOW, &dir);
    }
}

#[test]
fn hostile_frames_never_panic() {
    let mut engine = Engine::new();
    let dir = dir_with(&mut engine);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // Start from valid client frames of a real session and mutate them.
    let mut c = Client::connected();
    let base = [
        c.frame(
            vec![
                msg(
                    Request::Create(create("a\\b", create_disposition::OPEN_IF, 0, RW)),
                    false,
                ),
                close_related(),
            ],
            true,
        ),
        c.frame(
            vec![
                msg(
                    Request::Create(create(
                        "",
                        create_disposition::OPEN,
                        create_options::DIRECTORY_FILE,
                        READ,
                    )),
                    false,
                ),
                msg(
                    Request::QueryDirectory(QueryDirectoryRequest {
                        file_information_class: 37,
                        flags: 0,
                        file_index: 0,
                        file_id: FileId::RELATED,
                        file_name: Utf16::Str("*"),
                        output_buffer_length: 1000,
                    }),
                    true,
                ),
                close_related(),
            ],
            false,
        ),
    ];
    for i in 0..3000 {
        let mut f = base[i % base.len()].clone();
        let flips = 1 + (rand() % 4) as usize;
        for _ in 0..flips {
            let at = (rand() as usize) % f.len();
            f[at] = rand() as u8;
        }
        if rand() % 5 == 0 {
            f.truncate((rand() as usize) % f.len());
        }
        // Fresh connections, authenticated the same way, so the mutated
        // frames reach the command handlers.
        let mut cc = Client::connected();
        cc.engine = Engine {
            kv: engine.kv.clone(),
            batches: 0,
            holes: false,
        };
        cc.next_id = c.next_id;
        let _ = cc.exchange(&f);
    }
    // And plain garbage on a bare connection.
    let mut conn = Connection::new(ServerConfig::default(), NOW, &[4; 32]);
    for _ in 0..2000 {
        let len = (rand() % 300) as usize;
        let mut f: Vec<u8> = (0..len).map(|_| rand() as u8).collect();
        if len >= 4 && rand() % 2 == 0 {
            f[..4].copy_from_slice(&[0xFE, b'S', b'M', b'B']);
        }
        let _ = conn.on_frame(&f, NOW, &dir);
    }
}

#[test]
fn query_directory_pages_through_a_large_directory() {
    let mut c = Client::connected();
    let r = c.call(vec![
        msg(
            Request::Create(create(
                "big",
                create_disposition::CREATE,
                create_options::DIRECTORY_FILE,
                RW,
            )),
            false,
        ),
        close_related(),
    ]);
    assert_eq!(r[0].status(), NtStatus::SUCCESS);
    // One compound creates all the files: one batch.
    let names: Vec<String> = (0..40).map(|i| format!("big\\file-{i:03}")).collect();
    let before = c.runs;
    let mut msgs = Vec::new();
    for n in &names {
        msgs.push(msg(
            Request::Create(create(n, create_disposition::CREATE, 0, RW)),
            false,
        ));
        msgs.push(close_related());
    }
    let r = c.call(msgs);
    assert_eq!(c.runs - before, 1, "an unrelated compound is one batch too");
    assert!(r.iter().all(|x| x.status() == NtStatus::SUCCESS));
    // Open the directory, then page with a small buffer.
    let fid = open_dir(&mut c, "big");
    let mut seen = Vec::new();
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 100);
        let r = c.one(Request::QueryDirectory(QueryDirectoryRequest {
            file_information_class: fscc::info_class::FULL_DIRECTORY,
            flags: if rounds == 5 {
                QueryDirectoryRequest::RETURN_SINGLE_ENTRY
            } else {
                0
            },
            file_index: 0,
            file_id: fid,
            file_name: Utf16::Str("*"),
            output_buffer_length: 600,
        }));
        if r.status() == NtStatus::NO_MORE_FILES {
            break;
        }
        assert_eq!(r.status(), NtStatus::SUCCESS);
        let Response::QueryDirectory(q) = r.body() else {
            panic!()
        };
        let page = DirectoryEntry::decode_list(DirectoryInfoClass::FullDirectory, q.output_buffer)
            .unwrap();
        assert!(q.output_buffer.len() <= 600);
        if rounds == 5 {
            assert_eq!(page.len(), 1);
        }
        seen.extend(page.iter().map(|e| e.file_name.to_string_lossy()));
    }
    let mut want: Vec<String> = (0..40).map(|i| format!("file-{i:03}")).collect();
    want.insert(0, "..".into());
    want.insert(0, ".".into());
    assert_eq!(seen, want);
    // Restart scans from the beginning.
    let r = c.one(Request::QueryDirectory(QueryDirectoryRequest {
        file_information_class: fscc::info_class::NAMES,
        flags: QueryDirectoryRequest::RESTART_SCANS,
        file_index: 0,
        file_id: fid,
        file_name: Utf16::Str("file-03?"),
        output_buffer_length: 65536,
    }));
    let Response::QueryDirectory(q) = r.body() else {
        panic!()
    };
    assert_eq!(
        DirectoryEntry::decode_list(DirectoryInfoClass::Names, q.output_buffer)
            .unwrap()
            .len(),
        10
    );
}

/// Rewrites the ids of a captured client frame to this client's session,
/// tree and message ids.
fn rebase(c: &mut Client, mut f: Vec<u8>) -> Vec<u8> {
    let mut at = 0usize;
    loop {
        f[at + 24..at + 32].copy_from_slice(&c.next_id.to_le_bytes());
        c.next_id += u64::from(u16::from_le_bytes([f[at + 6], f[at + 7]]).max(1));
        f[at + 36..at + 40].copy_from_slice(&c.tree_id.to_le_bytes());
        f[at + 40..at + 48].copy_from_slice(&c.session_id.to_le_bytes());
        let flags = u32::from_le_bytes(f[at + 16..at + 20].try_into().unwrap()) & !0x8;
        f[at + 16..at + 20].copy_from_slice(&flags.to_le_bytes());
        f[at + 48..at + 64].fill(0);
        let next = u32::from_le_bytes(f[at + 20..at + 24].try_into().unwrap()) as usize;
        if next == 0 {
            return f;
        }
        at += next;
    }
}

#[test]
fn captured_linux_compounds_are_answered_in_one_batch() {
    let mut c = Client::new(ServerConfig::default());
    c.negotiate(&[dialect::SMB3_1_1], &[]);
    assert_eq!(c.login("alice", "wonderland", None), NtStatus::SUCCESS);
    assert_eq!(c.tree("data"), NtStatus::SUCCESS);
    // Make the names the captures use exist, more or less.
    for n in ["hello.txt", "a.txt", "test.txt", "file.txt"] {
        write_file(&mut c, n, b"x");
    }
    c.signing = None; // captured frames are unsigned
    for name in [
        "cifs-0040-create+query_info+close-req.hex",
        "cifs-0042-create+query_info+close-req.hex",
        "cifs-0044-create+close-req.hex",
        "cifs-1146-create+query_directory-req.hex",
        "cifs-1158-create+set_info+close-req.hex",
        "cifs-1178-create+set_info+close-req.hex",
    ] {
        let f = rebase(&mut c, capture(name));
        let expected = Compound::new(&f).count();
        let before = c.runs;
        let r = c.replies(&f);
        assert_eq!(r.len(), expected, "{name}: one response per request");
        assert!(c.runs - before <= 1, "{name}: at most one batch");
        assert!(!c.closed, "{name}");
        for x in &r {
            assert!(
                x.header.status != NtStatus::INVALID_PARAMETER,
                "{name}: {:?} {:?}",
                x.header.command,
                x.status()
            );
        }
        // Related failures repeat the CREATE's status.
        if r[0].status() != NtStatus::SUCCESS {
            assert!(r.iter().all(|x| x.status() == r[0].status()), "{name}");
        }
    }
}

fn open_fid(c: &mut Client, name: &str, disposition: u32, access: u32) -> Result<FileId, NtStatus> {
    let r = c.one(Request::Create(create(name, disposition, 0, access)));
    match r.body() {
        Response::Create(cr) => Ok(cr.file_id),
        _ => Err(r.status()),
    }
}

fn write_at(c: &mut Client, fid: FileId, offset: u64, data: &[u8]) -> NtStatus {
    c.one(Request::Write(WriteRequest {
        offset,
        file_id: fid,
        channel: 0,
        remaining_bytes: 0,
        flags: 0,
        write_channel_info: &[],
        data,
    }))
    .status()
}

#[test]
fn server_side_copy_with_resume_key_and_copychunk() {
    use duet_protocols::smb2::ioctl::{
        ctl_code, CopyChunk, CopyChunkCopy, CopyChunkResponse, IoctlRequest, ResumeKeyResponse,
    };
    let mut c = Client::connected();
    // A write-only open (no FILE_READ_DATA) may still write.
    const WRITE_ONLY: u32 = 0x0012_0116;
    let src = open_fid(&mut c, "cc-src", create_disposition::OPEN_IF, WRITE_ONLY).unwrap();
    let pattern: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(write_at(&mut c, src, 0, &pattern), NtStatus::SUCCESS);
    let ioctl = |code: u32, fid: FileId, input: &[u8], max_out: u32| -> Request<'static> {
        Request::Ioctl(IoctlRequest {
            ctl_code: code,
            file_id: fid,
            input: Box::leak(input.to_vec().into_boxed_slice()),
            max_input_response: 0,
            output: &[],
            max_output_response: max_out,
            flags: IoctlRequest::IS_FSCTL,
        })
    };
    let key = |c: &mut Client, fid: FileId| -> [u8; 24] {
        let r = c.one(ioctl(ctl_code::FSCTL_SRV_REQUEST_RESUME_KEY, fid, &[], 32));
        assert_eq!(r.status(), NtStatus::SUCCESS);
        let Response::Ioctl(io) = r.body() else { panic!() };
        assert_eq!(io.output.len(), 32, "key, ContextLength and 4 zero bytes");
        ResumeKeyResponse::decode(io.output).unwrap().resume_key
    };
    let copy = |c: &mut Client, code: u32, dst: FileId, key: [u8; 24], chunks: Vec<CopyChunk>| {
        let mut input = Vec::new();
        CopyChunkCopy { source_key: key, chunks }.encode(&mut input);
        let r = c.one(ioctl(code, dst, &input, 12));
        let out = match r.body() {
            Response::Ioctl(io) => Some(CopyChunkResponse::decode(io.output).unwrap()),
            _ => None,
        };
        (r.status(), out)
    };
    // The source open cannot read: copying from it is refused.
    let src_key = key(&mut c, src);
    let dst = open_fid(&mut c, "cc-dst", create_disposition::OPEN_IF, RW).unwrap();
    let one = |so, to, length| vec![CopyChunk { source_offset: so, target_offset: to, length }];
    assert_eq!(copy(&mut c, ctl_code::FSCTL_SRV_COPYCHUNK, dst, src_key, one(0, 0, 100)).0, NtStatus::ACCESS_DENIED);
    // A readable source: two chunks, the second one appending.
    let src2 = open_fid(&mut c, "cc-src", create_disposition::OPEN, RW).unwrap();
    let k = key(&mut c, src2);
    let chunks = vec![
        CopyChunk { source_offset: 0, target_offset: 0, length: 3000 },
        CopyChunk { source_offset: 1000, target_offset: 3000, length: 500 },
    ];
    let (st, out) = copy(&mut c, ctl_code::FSCTL_SRV_COPYCHUNK, dst, k, chunks);
    assert_eq!(st, NtStatus::SUCCESS);
    assert_eq!(
        out.unwrap(),
        CopyChunkResponse { chunks_written: 2, chunk_bytes_written: 0, total_bytes_written: 3500 }
    );
    assert_eq!(c.one(Request::Close(CloseRequest { flags: 0, file_id: dst })).status(), NtStatus::SUCCESS);
    let (_, data) = read_file(&mut c, "cc-dst");
    let mut want = pattern.clone();
    want.extend_from_slice(&pattern[1000..1500]);
    assert_eq!(data, want);
    // Past the source's end: STATUS_INVALID_VIEW_SIZE, nothing written;
    // a bad key names nothing; a zero-length chunk gets the limits.
    let dst = open_fid(&mut c, "cc-dst", create_disposition::OPEN, RW).unwrap();
    let (st, out) = copy(&mut c, ctl_code::FSCTL_SRV_COPYCHUNK, dst, k, one(2000, 0, 2000));
    assert_eq!((st, out.unwrap().chunks_written), (NtStatus::INVALID_VIEW_SIZE, 0));
    assert_eq!(copy(&mut c, ctl_code::FSCTL_SRV_COPYCHUNK, dst, [7; 24], one(0, 0, 10)).0, NtStatus::OBJECT_NAME_NOT_FOUND);
    let (st, out) = copy(&mut c, ctl_code::FSCTL_SRV_COPYCHUNK, dst, k, one(0, 0, 0));
    assert_eq!(st, NtStatus::INVALID_PARAMETER);
    assert_eq!(out.unwrap().chunk_bytes_written, 1 << 20);
    // _WRITE needs no read access on the target; plain COPYCHUNK does.
    let wo = open_fid(&mut c, "cc-wo", create_disposition::OPEN_IF, WRITE_ONLY).unwrap();
    assert_eq!(copy(&mut c, ctl_code::FSCTL_SRV_COPYCHUNK, wo, k, one(0, 0, 10)).0, NtStatus::ACCESS_DENIED);
    assert_eq!(copy(&mut c, ctl_code::FSCTL_SRV_COPYCHUNK_WRITE, wo, k, one(0, 0, 10)).0, NtStatus::SUCCESS);
    assert!(!c.closed);
}

/// A CLOSE that arrives while a request on the same connection is still
/// running waits for it (smbtorture compound_find.compound_find_close:
/// QUERY_DIRECTORY, then CLOSE before the listing is answered); what
/// comes after it waits too; other requests are not held.
#[test]
fn close_waits_for_the_requests_in_progress() {
    let mut c = Client::connected();
    let _ = write_file(&mut c, "listed.txt", b"x");
    let r = c.one(Request::Create(create("", create_disposition::OPEN, create_options::DIRECTORY_FILE, READ)));
    let Response::Create(cr) = r.body() else { panic!() };
    let dir = cr.file_id;
    let query = c.frame(
        vec![msg(
            Request::QueryDirectory(QueryDirectoryRequest {
                file_information_class: fscc::info_class::ID_BOTH_DIRECTORY,
                flags: 0,
                file_index: 0,
                file_id: dir,
                file_name: Utf16::Str("*"),
                output_buffer_length: 65536,
            }),
            false,
        )],
        true,
    );
    let close = c.frame(vec![msg(Request::Close(CloseRequest { flags: 0, file_id: dir }), false)], true);
    // The listing needs the engine: its batch is in progress.
    let ev = c.conn.on_frame(&query, NOW, &c.dir);
    let [Event::Run { token, batch, .. }] = &ev[..] else { panic!("QUERY_DIRECTORY runs a batch: {ev:?}") };
    let (token, batch) = (*token, batch.clone());
    // The CLOSE is held, and a frame after it too.
    assert!(c.conn.on_frame(&close, NOW, &c.dir).is_empty(), "CLOSE held");
    let echo = c.frame(vec![msg(Request::Echo(duet_protocols::smb2::echo::EchoRequest), false)], true);
    assert!(c.conn.on_frame(&echo, NOW, &c.dir).is_empty(), "what follows a held CLOSE waits");
    assert_eq!(c.conn.held(), 2);
    assert!(c.conn.resume(NOW, &c.dir).is_empty(), "nothing goes while the listing runs");
    // The listing finishes: it is answered with its entries...
    let r = c.engine.run(&batch);
    let ev = c.conn.on_batch_done(token, r, NOW);
    let [Event::Send(listing)] = &ev[..] else { panic!("{ev:?}") };
    let parse = |f: &[u8]| -> Vec<(Command, NtStatus)> {
        Compound::new(&f[4..])
            .map(|m| m.expect("reply parses"))
            .map(|m| (m.header.command, m.header.status))
            .collect()
    };
    assert_eq!(
        parse(listing),
        vec![(Command::QUERY_DIRECTORY, NtStatus::SUCCESS)],
        "the listing is not cut short by the CLOSE"
    );
    // ...then the CLOSE and the ECHO go.
    let mut sent = Vec::new();
    let mut ev = c.conn.resume(NOW, &c.dir);
    while let Some(e) = ev.pop() {
        match e {
            Event::Send(f) => sent.push(f),
            Event::Run { token, batch, .. } => {
                let r = c.engine.run(&batch);
                ev.extend(c.conn.on_batch_done(token, r, NOW));
                ev.extend(c.conn.resume(NOW, &c.dir));
            }
            Event::Close => panic!("connection closed"),
            _ => {}
        }
    }
    assert_eq!(c.conn.held(), 0);
    let cmds: Vec<(Command, NtStatus)> = sent
        .iter()
        .flat_map(|f| parse(f))
        .collect();
    assert!(cmds.contains(&(Command::CLOSE, NtStatus::SUCCESS)), "{cmds:?}");
    assert!(cmds.contains(&(Command::ECHO, NtStatus::SUCCESS)), "{cmds:?}");
    assert_eq!(c.conn.open_count(), 0);
    // With nothing in progress, a CLOSE is not held.
    let r = c.one(Request::Create(create("", create_disposition::OPEN, create_options::DIRECTORY_FILE, READ)));
    let Response::Create(cr) = r.body() else { panic!() };
    let r = c.one(Request::Close(CloseRequest { flags: 0, file_id: cr.file_id }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
}

/// QUERY_DIRECTORY's entries of the share root with their EaSize.
fn list_ea_sizes(c: &mut Client, pattern: &str) -> Vec<(String, u32)> {
    let entries = listing(c, "", pattern).expect("QUERY_DIRECTORY succeeds");
    entries.into_iter().filter(|(n, _)| n != "." && n != "..").collect()
}

/// EaSize in a directory listing follows the file's EAs through the node's
/// "may have EAs" marker: set, removed, and on a node record stored in the
/// layout before the marker (which reads as "may have EAs").
#[test]
fn query_directory_reports_ea_size_through_the_marker() {
    let mut c = Client::connected();
    for n in ["plain.txt", "eas.txt", "old.txt"] {
        assert!(write_file(&mut c, n, b"x")
            .iter()
            .all(|r| r.status() == NtStatus::SUCCESS));
    }
    let root = c.engine.root_of("data");
    let id_of = |c: &mut Client, name: &str| {
        let mut b = Batch::new(Credentials::root(), NOW);
        b.push(Op::Lookup {
            dir: ObjRef::Id(root),
            name: name.into(),
        });
        match &c.engine.run(&b).results[0] {
            Ok(OpOutput::Object { attrs, .. }) => attrs.id,
            other => panic!("{other:?}"),
        }
    };
    let set_eas = |c: &mut Client, id: u64, eas: Vec<(String, Vec<u8>)>| {
        let mut b = Batch::new(Credentials::root(), NOW);
        b.push(Op::SetEas {
            obj: ObjRef::Id(id),
            eas,
        });
        assert!(c.engine.run(&b).results[0].is_ok());
    };
    let eas = vec![
        ("USER.A".to_string(), b"one".to_vec()),
        ("USER.B".to_string(), vec![7; 100]),
    ];
    let size = fscc::full_ea::size(&eas);
    assert!(size > 0);
    let f = id_of(&mut c, "eas.txt");
    set_eas(&mut c, f, eas.clone());
    let listed = list_ea_sizes(&mut c, "*");
    assert!(listed.contains(&("eas.txt".to_string(), size)), "{listed:?}");
    assert!(listed.contains(&("plain.txt".to_string(), 0)), "{listed:?}");
    // Removing them all clears it.
    set_eas(
        &mut c,
        f,
        eas.iter().map(|(n, _)| (n.clone(), Vec::new())).collect(),
    );
    assert!(list_ea_sizes(&mut c, "*").contains(&("eas.txt".to_string(), 0)));
    // A node as older versions stored it (the record without its trailing
    // marker byte, without the zone id after it that layers added, and
    // without the DACL flag after that), with EA records an older SetEas
    // wrote.
    let o = id_of(&mut c, "old.txt");
    let key = duet_cluster::keys::node(o);
    let mut old = c.engine.kv[&key].clone();
    old.truncate(old.len() - 10);
    c.engine.kv.insert(key, old);
    for (n, v) in &eas {
        c.engine.kv.insert(duet_cluster::keys::ea(o, n), v.clone());
    }
    let listed = list_ea_sizes(&mut c, "*");
    assert!(listed.contains(&("old.txt".to_string(), size)), "{listed:?}");
    assert!(listed.contains(&("plain.txt".to_string(), 0)), "{listed:?}");
    // The single-name path (GetEas) agrees.
    assert_eq!(list_ea_sizes(&mut c, "old.txt"), vec![("old.txt".to_string(), size)]);
}

#[test]
fn a_name_that_exists_in_another_case_is_the_same_name() {
    // MS-FSCC 2.1.5: names are case-insensitive to SMB clients, so a
    // CREATE of a case variant of an existing name meets that file.
    let mut c = Client::connected();
    let r = write_file(&mut c, "Report.TXT", b"first");
    assert!(r.iter().all(|x| x.status() == NtStatus::SUCCESS), "{:?}", statuses(&r));
    let open = |c: &mut Client, name: &str, disposition: u32| {
        c.call(vec![
            msg(Request::Create(create(name, disposition, create_options::NON_DIRECTORY_FILE, RW)), false),
            close_related(),
        ])
    };
    let r = open(&mut c, "report.txt", create_disposition::CREATE);
    assert_eq!(r[0].status(), NtStatus::OBJECT_NAME_COLLISION);
    let r = open(&mut c, "REPORT.txt", create_disposition::OPEN_IF);
    assert_eq!(r[0].status(), NtStatus::SUCCESS);
    let Response::Create(cr) = r[0].body() else { panic!("{:?}", r[0].status()) };
    assert_eq!(cr.create_action, 1, "OPEN_IF opened the existing file");
    assert_eq!(cr.end_of_file, 5);
    let r = write_file(&mut c, "report.TXT", b"second!");
    assert!(r.iter().all(|x| x.status() == NtStatus::SUCCESS), "{:?}", statuses(&r));
    let Response::Create(cr) = r[0].body() else { panic!() };
    assert_eq!(cr.create_action, 3, "OVERWRITE_IF overwrote the existing file");
    // Still one entry, under the name it was created with.
    let names: Vec<String> =
        list(&mut c, "", "*").into_iter().filter(|n| n.eq_ignore_ascii_case("report.txt")).collect();
    assert_eq!(names, vec!["Report.TXT".to_string()]);
    assert_eq!(read_file(&mut c, "Report.TXT").1, b"second!");
    // A directory too.
    let mk = |c: &mut Client, name: &str| {
        c.call(vec![
            msg(Request::Create(create(name, create_disposition::CREATE, create_options::DIRECTORY_FILE, RW)), false),
            close_related(),
        ])
    };
    assert_eq!(mk(&mut c, "Photos")[0].status(), NtStatus::SUCCESS);
    assert_eq!(mk(&mut c, "PHOTOS")[0].status(), NtStatus::OBJECT_NAME_COLLISION);
}

/// Runs the batches of `events` to their responses.
fn drive(c: &mut Client, mut events: Vec<Event>) -> Vec<Reply> {
    let mut out = Vec::new();
    while !events.is_empty() {
        let mut next = Vec::new();
        for e in events {
            match e {
                Event::Run { token, batch, .. } => {
                    let r = c.engine.run(&batch);
                    next.extend(c.conn.on_batch_done(token, r, NOW));
                }
                Event::Recall(b) => c.recalls.push(b),
                Event::EndSession { .. } | Event::CloseOpen { .. } | Event::DeletePending { .. } => {}
                e => out.extend(sent_replies(c, vec![e])),
            }
        }
        events = next;
    }
    out
}

/// MS-SMB2 3.3.5.9 / 3.3.4.6 / 3.3.5.22.1: a batch oplock is granted to
/// the only open; a second open (of the same connection: an oplock is one
/// open's) breaks it: the break is given out for routing to the holder's
/// connection, the CREATE is answered STATUS_PENDING in the ASYNC form and
/// waits; the holder's connection turns the break into an OPLOCK_BREAK
/// notification; the acknowledgment lets the CREATE finish (in the ASYNC
/// form, with the same AsyncId); a wrong acknowledgment is refused.
#[test]
fn oplock_break_parks_the_create_until_the_ack() {
    use duet_protocols::smb2::create::oplock_level;
    use duet_protocols::smb2::oplock_break::{OplockBreak, OplockBreakMessage};
    // Windows grants again at once after a break (no recall backoff).
    let locks = duet_locks::LockManager::new(duet_locks::Limits { recall_backoff_ns: 0, ..Default::default() });
    let share_modes = duet_protocols::smb2::server::ShareModes::with_locks(std::sync::Arc::new(locks));
    let mut c = Client::connected_with(ServerConfig { share_modes: std::sync::Arc::new(share_modes), ..Default::default() });
    let mut req = create("oplocked", create_disposition::OPEN_IF, 0, RW);
    req.requested_oplock_level = oplock_level::BATCH;
    let r = c.one(Request::Create(req));
    let Response::Create(cr) = r.body() else { panic!() };
    assert_eq!(cr.oplock_level, oplock_level::BATCH);
    let held = cr.file_id;
    assert!(c.recalls.is_empty());
    // A reader: the holder is to keep level II; the CREATE waits.
    let mut req = create("oplocked", create_disposition::OPEN, 0, READ);
    req.requested_oplock_level = oplock_level::II;
    let interim = c.one(Request::Create(req));
    assert_eq!(interim.status(), NtStatus::PENDING);
    assert!(interim.header.flags.is_async());
    assert_eq!(c.conn.parked_opens(), 1);
    assert_eq!(c.recalls.len(), 1);
    let b = c.recalls.remove(0);
    assert_eq!(b.holder.client, c.conn.key(), "routed to this connection");
    assert!(b.ack_needed);
    let ev = c.conn.poll_opens(NOW, &c.dir);
    assert!(drive(&mut c, ev).is_empty(), "still waiting");
    // The holder's side: the notification.
    let ev = c.conn.on_recall(b, NOW);
    let note = sent_replies(&c, ev);
    assert_eq!(note.len(), 1);
    assert_eq!((note[0].header.command, note[0].header.message_id), (Command::OPLOCK_BREAK, u64::MAX));
    let Ok(OplockBreakMessage::Oplock(n)) = OplockBreakMessage::decode(&note[0].bytes) else { panic!() };
    assert_eq!((n.oplock_level, n.file_id), (oplock_level::II, held));
    // Acknowledging more than the break left is refused (and the oplock goes).
    let bad = OplockBreak { oplock_level: oplock_level::BATCH, file_id: held };
    let r = c.one(Request::OplockBreak(OplockBreakMessage::Oplock(bad)));
    assert_eq!(r.status(), NtStatus::INVALID_OPLOCK_PROTOCOL);
    // The CREATE goes on, in the ASYNC form, with no second charge.
    let ev = c.conn.poll_opens(NOW, &c.dir);
    let done = drive(&mut c, ev);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status(), NtStatus::SUCCESS);
    assert_eq!((done[0].header.message_id, done[0].header.ids), (interim.header.message_id, interim.header.ids));
    assert_eq!(done[0].header.credit, 0, "credits came with the interim answer");
    let Response::Create(cr2) = done[0].body() else { panic!() };
    assert_eq!(cr2.oplock_level, oplock_level::II, "the holder has none left: a reader gets level II");
    assert_eq!(c.conn.parked_opens(), 0);
    // An open for writing leaves level II alone; one that overwrites
    // breaks it to none, without waiting.
    let r = c.one(Request::Create(create("oplocked", create_disposition::OPEN, 0, RW)));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    assert!(c.recalls.is_empty());
    let r = c.one(Request::Create(create("oplocked", create_disposition::OVERWRITE_IF, 0, RW)));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    assert_eq!(c.recalls.len(), 1);
    let b = c.recalls.remove(0);
    assert!(!b.ack_needed);
    let ev = c.conn.on_recall(b, NOW);
    let note = sent_replies(&c, ev);
    let Ok(OplockBreakMessage::Oplock(n)) = OplockBreakMessage::decode(&note[0].bytes) else { panic!() };
    assert_eq!((n.oplock_level, n.file_id), (oplock_level::NONE, cr2.file_id));
    // Nothing to acknowledge after a level II break.
    let ack = OplockBreak { oplock_level: oplock_level::NONE, file_id: cr2.file_id };
    let r = c.one(Request::OplockBreak(OplockBreakMessage::Oplock(ack)));
    assert_eq!(r.status(), NtStatus::INVALID_OPLOCK_PROTOCOL);
}

/// MS-SMB2 3.3.5.9.11 / 3.3.4.7 / 3.3.5.22.2: a v2 lease (3.1.1) is
/// granted RWH with the client's epoch plus one; a second open by the same
/// key shares it and breaks nothing; an open without that key (another
/// holder as far as leases go) breaks it to RH: the break is given out for
/// routing, the CREATE waits (STATUS_PENDING), the holder's connection
/// sends a LEASE_BREAK notification (MessageId all ones, SessionId 0,
/// ACK_REQUIRED, states and the new epoch); acknowledging more than the
/// break left, or an unknown key, is refused; the right acknowledgment is
/// answered with a Lease Break Response and lets the CREATE finish. A
/// lease key is one file's: another file by it is STATUS_INVALID_PARAMETER.
#[test]
fn lease_break_parks_the_create_until_the_ack() {
    use duet_protocols::smb2::create::oplock_level;
    use duet_protocols::smb2::create_context::{Lease, LeaseV2};
    use duet_protocols::smb2::oplock_break::{LeaseBreakAck, OplockBreakMessage};
    let locks = duet_locks::LockManager::new(duet_locks::Limits { recall_backoff_ns: 0, ..Default::default() });
    let share_modes = duet_protocols::smb2::server::ShareModes::with_locks(std::sync::Arc::new(locks));
    let mut c = Client::connected_with(ServerConfig { share_modes: std::sync::Arc::new(share_modes), ..Default::default() });
    let key = *b"lease-key-000001";
    let ask = |state: u32| Lease {
        lease_key: key,
        lease_state: state,
        lease_flags: 0,
        lease_duration: 0,
        v2: Some(LeaseV2 { parent_lease_key: [0; 16], epoch: 7 }),
    };
    let leased = |name: &'static str, state: u32| {
        let mut req = create(name, create_disposition::OPEN_IF, 0, RW);
        req.requested_oplock_level = oplock_level::LEASE;
        req.create_contexts = vec![CreateContextRequest::RequestLease(ask(state))];
        req
    };
    let lease_of = |r: &Reply| {
        let Response::Create(cr) = r.body() else { panic!("not a CREATE response") };
        assert_eq!(cr.oplock_level, oplock_level::LEASE);
        cr.create_contexts
            .iter()
            .find_map(|x| match x {
                CreateContextResponse::Lease(l) => Some(*l),
                _ => None,
            })
            .expect("a lease response context")
    };
    let r = c.one(Request::Create(leased("leased", 7)));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let l = lease_of(&r);
    assert_eq!((l.lease_key, l.lease_state, l.lease_flags), (key, 7, 0));
    assert_eq!(l.v2.map(|v| v.epoch), Some(8), "the client's epoch plus one");
    // The same key again: shared, nothing broken.
    let r = c.one(Request::Create(leased("leased", 7)));
    assert_eq!(lease_of(&r).lease_state, 7);
    assert!(c.recalls.is_empty());
    // A lease key is one file's.
    let r = c.one(Request::Create(leased("other", 7)));
    assert_eq!(r.status(), NtStatus::INVALID_PARAMETER);
    // An open without the key: write caching goes, handle caching stays.
    let interim = c.one(Request::Create(create("leased", create_disposition::OPEN, 0, READ)));
    assert_eq!(interim.status(), NtStatus::PENDING);
    assert_eq!(c.conn.parked_opens(), 1);
    assert_eq!(c.recalls.len(), 1);
    let b = c.recalls.remove(0);
    assert_eq!(b.holder.client, c.conn.client_route().unwrap(), "routed to the client (its ClientGuid)");
    assert!(b.ack_needed);
    let ev = c.conn.on_recall(b, NOW);
    let note = sent_replies(&c, ev);
    assert_eq!(note.len(), 1);
    assert_eq!((note[0].header.command, note[0].header.message_id), (Command::OPLOCK_BREAK, u64::MAX));
    assert_eq!(note[0].header.session_id, 0);
    let Ok(OplockBreakMessage::LeaseNotification(n)) = OplockBreakMessage::decode(&note[0].bytes) else {
        panic!("not a lease break notification")
    };
    assert_eq!((n.lease_key, n.current_lease_state, n.new_lease_state), (key, 7, 3));
    assert_eq!((n.flags, n.new_epoch), (1, 9));
    // Still waiting; wrong acknowledgments are refused.
    let ev = c.conn.poll_opens(NOW, &c.dir);
    assert!(drive(&mut c, ev).is_empty(), "still waiting");
    let ack = |state: u32, lease_key: [u8; 16]| {
        Request::OplockBreak(OplockBreakMessage::LeaseAck(LeaseBreakAck { flags: 0, lease_key, lease_state: state, lease_duration: 0 }))
    };
    assert_eq!(c.one(ack(7, key)).status(), NtStatus::REQUEST_NOT_ACCEPTED);
    assert_eq!(c.one(ack(3, *b"no-such-lease-ky")).status(), NtStatus::OBJECT_NAME_NOT_FOUND);
    let r = c.one(ack(3, key));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let Ok(OplockBreakMessage::LeaseAck(a)) = OplockBreakMessage::decode(&r.bytes) else { panic!("not a lease ack") };
    assert_eq!((a.lease_key, a.lease_state), (key, 3));
    assert_eq!(c.one(ack(3, key)).status(), NtStatus::UNSUCCESSFUL, "no break in progress");
    // The CREATE goes on, in the ASYNC form.
    let ev = c.conn.poll_opens(NOW, &c.dir);
    let done = drive(&mut c, ev);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status(), NtStatus::SUCCESS);
    assert_eq!(done[0].header.ids, interim.header.ids);
    assert_eq!(c.conn.parked_opens(), 0);
    // The lease holds RH now: asking again for RWH changes nothing.
    let r = c.one(Request::Create(leased("leased", 7)));
    assert_eq!(lease_of(&r).lease_state, 3);
}

/// Runs `f` on connection `b` over the file system of connection `a` (two
/// connections of one server share its files).
fn on_files_of<T>(a: &mut Client, b: &mut Client, f: impl FnOnce(&mut Client) -> T) -> T {
    std::mem::swap(&mut a.engine, &mut b.engine);
    std::mem::swap(&mut a.dir, &mut b.dir);
    let r = f(b);
    std::mem::swap(&mut a.engine, &mut b.engine);
    std::mem::swap(&mut a.dir, &mut b.dir);
    r
}

/// MS-SMB2 3.3.1.13 / 3.3.5.9.8 / 3.3.4.7 / 3.3.5.22.2: the lease table is
/// the client's (ClientGuid), not the connection's. A second connection of
/// the same ClientGuid opening with the same key joins the lease (nothing
/// broken); a contending open breaks it; the break is routed to the client
/// (any of its live connections), and the acknowledgment on the other
/// connection is accepted and lets the contending CREATE finish. A
/// connection of another ClientGuid does not know the key.
#[test]
fn a_lease_is_shared_by_the_connections_of_one_client_guid() {
    use duet_protocols::smb2::create::oplock_level;
    use duet_protocols::smb2::create_context::{Lease, LeaseV2};
    use duet_protocols::smb2::oplock_break::{LeaseBreakAck, OplockBreakMessage};
    let locks = duet_locks::LockManager::new(duet_locks::Limits { recall_backoff_ns: 0, ..Default::default() });
    let share_modes = std::sync::Arc::new(duet_protocols::smb2::server::ShareModes::with_locks(std::sync::Arc::new(locks)));
    let cfg = || ServerConfig { share_modes: share_modes.clone(), ..Default::default() };
    let mut a = Client::connected_as(cfg(), [0x11; 16], Some(b"connection A, thirty-two or more bytes"));
    let mut b = Client::connected_as(cfg(), [0x11; 16], Some(b"connection B, thirty-two or more bytes"));
    let mut other = Client::connected_as(cfg(), [0x22; 16], Some(b"another client, thirty-two or more bytes"));
    assert_eq!(a.conn.client_route(), b.conn.client_route(), "one client, one route");
    assert_ne!(a.conn.client_route(), other.conn.client_route());
    assert_ne!(a.conn.key(), b.conn.key());
    let key = *b"shared-lease-key";
    let leased = |state: u32| {
        let mut req = create("shared", create_disposition::OPEN_IF, 0, RW);
        req.requested_oplock_level = oplock_level::LEASE;
        req.create_contexts = vec![CreateContextRequest::RequestLease(Lease {
            lease_key: key,
            lease_state: state,
            lease_flags: 0,
            lease_duration: 0,
            v2: Some(LeaseV2 { parent_lease_key: [0; 16], epoch: 0 }),
        })];
        req
    };
    let state_of = |r: &Reply| {
        let Response::Create(cr) = r.body() else { panic!("not a CREATE response: {:?}", r.status()) };
        cr.create_contexts
            .iter()
            .find_map(|x| match x {
                CreateContextResponse::Lease(l) => Some(l.lease_state),
                _ => None,
            })
            .expect("a lease response context")
    };
    // Connection A: R. Connection B, same client, same key, asks RWH: the
    // lease is upgraded, nothing is broken (its own opens).
    let r = a.one(Request::Create(leased(1)));
    assert_eq!((r.status(), state_of(&r)), (NtStatus::SUCCESS, 1));
    let r = on_files_of(&mut a, &mut b, |b| b.one(Request::Create(leased(7))));
    assert_eq!((r.status(), state_of(&r)), (NtStatus::SUCCESS, 7), "B joins A's lease and upgrades it");
    assert!(a.recalls.is_empty() && b.recalls.is_empty(), "a lease's own opens break nothing");
    // Another client's open contends: RWH -> RH, routed to the client.
    let interim = on_files_of(&mut a, &mut other, |o| {
        o.one(Request::Create(create("shared", create_disposition::OPEN, 0, READ)))
    });
    assert_eq!(interim.status(), NtStatus::PENDING);
    assert_eq!(other.recalls.len(), 1);
    let brk = other.recalls.remove(0);
    assert_eq!(brk.holder.client, b.conn.client_route().unwrap(), "the lease's holder is its client");
    // Delivered to B (a live connection of the client): the notification.
    let ev = b.conn.on_recall(brk, NOW);
    let note = sent_replies(&b, ev);
    assert_eq!(note.len(), 1);
    let Ok(OplockBreakMessage::LeaseNotification(n)) = OplockBreakMessage::decode(&note[0].bytes) else {
        panic!("not a lease break notification")
    };
    assert_eq!((n.lease_key, n.current_lease_state, n.new_lease_state), (key, 7, 3));
    let ack = |state: u32| {
        Request::OplockBreak(OplockBreakMessage::LeaseAck(LeaseBreakAck { flags: 0, lease_key: key, lease_state: state, lease_duration: 0 }))
    };
    // The other client does not know the key; A, of the lease's client,
    // acknowledges the break B was told of.
    assert_eq!(other.one(ack(3)).status(), NtStatus::OBJECT_NAME_NOT_FOUND);
    let r = a.one(ack(3));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    assert_eq!(b.one(ack(3)).status(), NtStatus::UNSUCCESSFUL, "the break is over for the whole client");
    // The contending CREATE goes on.
    let done = on_files_of(&mut a, &mut other, |o| {
        let ev = o.conn.poll_opens(NOW, &o.dir);
        drive(o, ev)
    });
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status(), NtStatus::SUCCESS);
    // A goes away: B's open keeps the lease (RH) for the client.
    std::mem::swap(&mut a.engine, &mut b.engine);
    std::mem::swap(&mut a.dir, &mut b.dir);
    drop(a);
    let mut a2 = Client::connected_as(cfg(), [0x11; 16], Some(b"connection A2, thirty-two or more bytes"));
    let r = on_files_of(&mut b, &mut a2, |a2| a2.one(Request::Create(leased(7))));
    assert_eq!((r.status(), state_of(&r)), (NtStatus::SUCCESS, 3), "the lease outlived A, at RH");
}

/// MS-FSA 2.1.5.14.2 (as MS-SMB2 leases use it) and MS-SMB2 3.3.1.12: a
/// rename of a file whose handle caching another client's lease holds
/// breaks H (RH -> R) and waits for the acknowledgment (STATUS_PENDING,
/// then the rename's own answer); the lease follows the file (opening the
/// new name with the key joins it, the old name with the key is another
/// file's key).
#[test]
fn a_rename_breaks_handle_caching_and_waits_and_the_lease_follows() {
    use duet_protocols::smb2::create::oplock_level;
    use duet_protocols::smb2::create_context::{Lease, LeaseV2};
    use duet_protocols::smb2::oplock_break::{LeaseBreakAck, OplockBreakMessage};
    let locks = duet_locks::LockManager::new(duet_locks::Limits { recall_backoff_ns: 0, ..Default::default() });
    let share_modes = std::sync::Arc::new(duet_protocols::smb2::server::ShareModes::with_locks(std::sync::Arc::new(locks)));
    let cfg = || ServerConfig { share_modes: share_modes.clone(), ..Default::default() };
    let mut a = Client::connected_as(cfg(), [0x11; 16], Some(b"connection A, thirty-two or more bytes"));
    let mut b = Client::connected_as(cfg(), [0x33; 16], Some(b"connection B, thirty-two or more bytes"));
    let key = *b"rename-lease-key";
    let leased = |name: &'static str| {
        let mut req = create(name, create_disposition::OPEN_IF, 0, READ);
        req.share_access = 7;
        req.requested_oplock_level = oplock_level::LEASE;
        req.create_contexts = vec![CreateContextRequest::RequestLease(Lease {
            lease_key: key,
            lease_state: 3,
            lease_flags: 0,
            lease_duration: 0,
            v2: Some(LeaseV2 { parent_lease_key: [0; 16], epoch: 0 }),
        })];
        req
    };
    let state_of = |r: &Reply| {
        let Response::Create(cr) = r.body() else { panic!("not a CREATE response: {:?}", r.status()) };
        cr.create_contexts
            .iter()
            .find_map(|x| match x {
                CreateContextResponse::Lease(l) => Some(l.lease_state),
                _ => None,
            })
            .expect("a lease response context")
    };
    let r = a.one(Request::Create(leased("before")));
    assert_eq!((r.status(), state_of(&r)), (NtStatus::SUCCESS, 3));
    // B opens for DELETE (an open that asks nothing of the data breaks nothing).
    let mut req = create("before", create_disposition::OPEN, 0, 0x0011_0080);
    req.share_access = 7;
    let r = on_files_of(&mut a, &mut b, |b| b.one(Request::Create(req)));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    assert!(b.recalls.is_empty());
    let Response::Create(cr) = r.body() else { panic!() };
    let fid = cr.file_id;
    let mut rinfo = Vec::new();
    fscc::FileRenameInformation { replace_if_exists: false, root_directory: 0, file_name: Utf16::Str("after") }
        .encode(&mut rinfo);
    let rename = Request::SetInfo(SetInfoRequest {
        info_type: info_type::FILE,
        file_info_class: fscc::info_class::RENAME,
        buffer: &rinfo,
        additional_information: 0,
        file_id: fid,
    });
    let interim = on_files_of(&mut a, &mut b, |b| b.one(rename));
    assert_eq!(interim.status(), NtStatus::PENDING, "the rename waits for the holder");
    assert_eq!(b.recalls.len(), 1);
    let brk = b.recalls.remove(0);
    let ev = a.conn.on_recall(brk, NOW);
    let note = sent_replies(&a, ev);
    let Ok(OplockBreakMessage::LeaseNotification(n)) = OplockBreakMessage::decode(&note[0].bytes) else {
        panic!("not a lease break notification")
    };
    assert_eq!((n.current_lease_state, n.new_lease_state, n.flags), (3, 1, 1), "RH -> R, acknowledged");
    let done = on_files_of(&mut a, &mut b, |b| {
        let ev = b.conn.poll_opens(NOW, &b.dir);
        drive(b, ev)
    });
    assert!(done.is_empty(), "still waiting for the ack");
    let ack = LeaseBreakAck { flags: 0, lease_key: key, lease_state: 1, lease_duration: 0 };
    assert_eq!(a.one(Request::OplockBreak(OplockBreakMessage::LeaseAck(ack))).status(), NtStatus::SUCCESS);
    let done = on_files_of(&mut a, &mut b, |b| {
        let ev = b.conn.poll_opens(NOW, &b.dir);
        drive(b, ev)
    });
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status(), NtStatus::SUCCESS, "the rename is done after the ack");
    assert_eq!(done[0].header.command, Command::SET_INFO);
    // The lease follows the file.
    let r = a.one(Request::Create(leased("after")));
    assert_eq!(r.status(), NtStatus::SUCCESS, "the key opens the new name: the same lease");
    assert_eq!(state_of(&r), 3, "raised again to RH: nothing else caches, the rename is over");
    assert!(a.recalls.is_empty() && b.recalls.is_empty());
    // The old name is free of the key: a new file there by it is refused
    // (the key is the renamed file's).
    let r = on_files_of(&mut a, &mut b, |b| b.one(Request::Create(leased("before"))));
    assert_eq!(r.status(), NtStatus::SUCCESS, "another client's key is its own");
    let r = a.one(Request::Create(leased("before")));
    assert_eq!(r.status(), NtStatus::INVALID_PARAMETER, "the key is the file's at its new name");
}

/// A CANCEL naming the AsyncId of `interim` (MS-SMB2 2.2.30, 3.3.5.16).
fn cancel_of(c: &mut Client, interim: &Reply) -> Vec<Reply> {
    let mut h = interim.header;
    h.flags.0 = HeaderFlags::ASYNC_COMMAND;
    h.command = Command::CANCEL;
    h.status = NtStatus::SUCCESS;
    h.credit = 0;
    let mut m = Vec::new();
    h.encode(&mut m);
    m.extend_from_slice(&[4, 0, 0, 0]);
    let frame = c.frame_raw(&m);
    let ev = c.conn.on_frame(&frame, NOW, &c.dir);
    sent_replies(c, ev)
}

/// MS-SMB2 3.3.5.19 / 3.3.4.2 / 3.3.5.16: CHANGE_NOTIFY on a directory
/// waits (STATUS_PENDING, ASYNC form) and is completed by a change the
/// appliance hands in (`on_changes`), with FILE_NOTIFY_INFORMATION
/// (MS-FSCC 2.7.1), in the ASYNC form with the same ids; changes between
/// requests are buffered (the first request's size) and answered at once,
/// overflow gives STATUS_NOTIFY_ENUM_DIR; a watch without WATCH_TREE or
/// without the filter bit does not see a change; CANCEL gives
/// STATUS_CANCELLED, CLOSE of the directory STATUS_NOTIFY_CLEANUP; a file
/// or an oversized buffer is refused with STATUS_INVALID_PARAMETER.
#[test]
fn change_notify_waits_buffers_overflows_cancels_and_cleans_up() {
    use duet_protocols::changes::{action, filter};
    use duet_protocols::smb2::server::{encode_entries, Notified};
    let mut c = Client::connected();
    let r = c.one(Request::Create(create("w", create_disposition::CREATE, create_options::DIRECTORY_FILE, RW)));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    let dir = cr.file_id;
    let r = c.one(Request::Create(create("f", create_disposition::CREATE, create_options::NON_DIRECTORY_FILE, RW)));
    let Response::Create(cr) = r.body() else { panic!() };
    let file = cr.file_id;
    let notify = |file_id, len| {
        Request::ChangeNotify(ChangeNotifyRequest {
            flags: 0,
            output_buffer_length: len,
            file_id,
            completion_filter: filter::FILE_NAME,
        })
    };
    assert_eq!(c.one(notify(file, 1000)).status(), NtStatus::INVALID_PARAMETER, "a file cannot be watched");
    assert_eq!(c.one(notify(dir, 16 << 20)).status(), NtStatus::INVALID_PARAMETER, "over MaxTransactSize");
    let interim = c.one(notify(dir, 100));
    assert_eq!(interim.status(), NtStatus::PENDING);
    assert!(interim.header.flags.is_async() && interim.header.async_id().is_some());
    assert!(c.conn.watches_changed());
    let watched = c.conn.watched();
    assert_eq!(watched.len(), 1);
    let node = watched[0].node;
    assert_eq!(watched[0].name, "w");
    let n = |name: &str, direct, action, filter| Notified { watch: node, name: name.into(), direct, action, filter };
    // Not seen: another filter bit, a subdirectory without WATCH_TREE.
    let ev = c.conn.on_changes(&[n("d", true, action::ADDED, filter::DIR_NAME), n("s\\x", false, action::ADDED, filter::FILE_NAME)]);
    assert!(sent_replies(&c, ev).is_empty());
    let ev = c.conn.on_changes(&[n("a", true, action::ADDED, filter::FILE_NAME)]);
    let done = sent_replies(&c, ev);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].status(), done[0].header.message_id, done[0].header.ids), (NtStatus::SUCCESS, interim.header.message_id, interim.header.ids));
    assert_eq!(done[0].header.credit, 0);
    let Response::ChangeNotify(o) = done[0].body() else { panic!() };
    assert_eq!(o.output_buffer, encode_entries(&[(action::ADDED, "a".into())]).as_slice());
    // Buffered between requests, answered at once.
    let ev = c.conn.on_changes(&[n("a", true, action::RENAMED_OLD_NAME, filter::FILE_NAME), n("b", true, action::RENAMED_NEW_NAME, filter::FILE_NAME)]);
    assert!(sent_replies(&c, ev).is_empty());
    let r = c.one(notify(dir, 1000));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let Response::ChangeNotify(o) = r.body() else { panic!() };
    assert_eq!(o.output_buffer, encode_entries(&[(4, "a".into()), (5, "b".into())]).as_slice());
    // More than the first request's 100 bytes: STATUS_NOTIFY_ENUM_DIR.
    let many: Vec<Notified> = (0..10).map(|i| n(&format!("file-{i}"), true, action::ADDED, filter::FILE_NAME)).collect();
    let ev = c.conn.on_changes(&many);
    assert!(sent_replies(&c, ev).is_empty());
    assert_eq!(c.one(notify(dir, 1000)).status(), NtStatus::NOTIFY_ENUM_DIR);
    // CANCEL.
    let interim = c.one(notify(dir, 1000));
    assert_eq!(interim.status(), NtStatus::PENDING);
    let done = cancel_of(&mut c, &interim);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].status(), done[0].header.message_id), (NtStatus::CANCELLED, interim.header.message_id));
    assert_eq!(c.conn.waiting_notifies(), 0);
    // CLOSE of the directory.
    let interim = c.one(notify(dir, 1000));
    assert_eq!(interim.status(), NtStatus::PENDING);
    let f = c.frame(vec![msg(Request::Close(CloseRequest { flags: 0, file_id: dir }), false)], true);
    let ev = c.conn.on_frame(&f, NOW, &c.dir);
    let done = drive(&mut c, ev);
    let got: Vec<(Command, NtStatus)> = done.iter().map(|r| (r.header.command, r.status())).collect();
    assert_eq!(got, vec![(Command::CHANGE_NOTIFY, NtStatus::NOTIFY_CLEANUP), (Command::CLOSE, NtStatus::SUCCESS)]);
    assert!(c.conn.watches_changed() && c.conn.watched().is_empty());
}

/// MS-SMB2 3.3.5.16: a CREATE parked until an oplock break is over is
/// answered STATUS_CANCELLED (ASYNC form, its AsyncId) on CANCEL, and is
/// not run again.
#[test]
fn cancel_of_a_parked_create() {
    use duet_protocols::smb2::create::oplock_level;
    let locks = duet_locks::LockManager::new(duet_locks::Limits { recall_backoff_ns: 0, ..Default::default() });
    let share_modes = duet_protocols::smb2::server::ShareModes::with_locks(std::sync::Arc::new(locks));
    let mut c = Client::connected_with(ServerConfig { share_modes: std::sync::Arc::new(share_modes), ..Default::default() });
    let mut req = create("parked", create_disposition::OPEN_IF, 0, RW);
    req.requested_oplock_level = oplock_level::BATCH;
    let r = c.one(Request::Create(req));
    let Response::Create(cr) = r.body() else { panic!() };
    assert_eq!(cr.oplock_level, oplock_level::BATCH);
    let interim = c.one(Request::Create(create("parked", create_disposition::OPEN, 0, READ)));
    assert_eq!(interim.status(), NtStatus::PENDING);
    assert_eq!(c.conn.parked_opens(), 1);
    let done = cancel_of(&mut c, &interim);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].status(), done[0].header.message_id, done[0].header.ids),
        (NtStatus::CANCELLED, interim.header.message_id, interim.header.ids)
    );
    assert_eq!(c.conn.parked_opens(), 0);
    let ev = c.conn.poll_opens(NOW, &c.dir);
    assert!(drive(&mut c, ev).is_empty(), "a cancelled CREATE is not run again");
}

fn query_info_48(c: &mut Client, fid: FileId) -> (NtStatus, String) {
    let r = c.one(Request::QueryInfo(QueryInfoRequest {
        info_type: info_type::FILE,
        file_info_class: fscc::info_class::NORMALIZED_NAME,
        output_buffer_length: 4096,
        input_buffer: &[],
        additional_information: 0,
        flags: 0,
        file_id: fid,
    }));
    match r.body() {
        Response::QueryInfo(q) => (
            r.status(),
            fscc::FileNameInformation::decode(q.output_buffer)
                .unwrap()
                .file_name
                .to_string_lossy(),
        ),
        _ => (r.status(), String::new()),
    }
}

/// MS-FSCC 2.4.30 FileNormalizedNameInformation: each component in the
/// case it is stored in, whichever case the client opened it by; only on
/// dialect 3.1.1 (MS-SMB2 3.3.5.20.1), STATUS_NOT_SUPPORTED before.
#[test]
fn normalized_name_is_the_stored_case_on_3_1_1_only() {
    let mut c = Client::connected();
    assert_eq!(c.dialect, dialect::SMB3_1_1);
    for d in ["NoRm_DiR", "NoRm_DiR\\sUb"] {
        let r = c.one(Request::Create(create(
            d,
            create_disposition::CREATE,
            create_options::DIRECTORY_FILE,
            RW,
        )));
        assert_eq!(r.status(), NtStatus::SUCCESS, "{d}");
    }
    write_file(&mut c, "NoRm_DiR\\sUb\\FiLe.TxT", b"x");
    for asked in [
        "NoRm_DiR\\sUb\\FiLe.TxT",
        "norm_dir\\sub\\file.txt",
        "NORM_DIR\\SUB\\FILE.TXT",
        "norm_dir\\SUB\\file.txt::$DATA",
    ] {
        let fid = open_fid(&mut c, asked, create_disposition::OPEN, READ).unwrap();
        assert_eq!(
            query_info_48(&mut c, fid),
            (NtStatus::SUCCESS, "NoRm_DiR\\sUb\\FiLe.TxT".to_string()),
            "{asked}"
        );
    }
    // OPEN_IF and OVERWRITE_IF meet the existing name too.
    for disposition in [create_disposition::OPEN_IF, create_disposition::OVERWRITE_IF] {
        let fid = open_fid(&mut c, "norm_DIR\\Sub\\file.TXT", disposition, RW).unwrap();
        assert_eq!(
            query_info_48(&mut c, fid),
            (NtStatus::SUCCESS, "NoRm_DiR\\sUb\\FiLe.TxT".to_string()),
            "{disposition}"
        );
    }
    let fid = open_fid(&mut c, "NORM_DIR\\SUB", create_disposition::OPEN, READ).unwrap();
    assert_eq!(
        query_info_48(&mut c, fid),
        (NtStatus::SUCCESS, "NoRm_DiR\\sUb".to_string())
    );
    // The share root: an empty name.
    let root = open_fid(&mut c, "", create_disposition::OPEN, READ).unwrap();
    assert_eq!(query_info_48(&mut c, root), (NtStatus::SUCCESS, String::new()));

    // Dialect 3.0.2 (and earlier): not supported.
    let mut old = Client::new(ServerConfig::default());
    old.negotiate(&[dialect::SMB2_1, dialect::SMB3_0_2], &[]);
    assert_eq!(old.dialect, dialect::SMB3_0_2);
    assert_eq!(old.login("alice", "wonderland", None), NtStatus::SUCCESS);
    assert_eq!(old.tree("data"), NtStatus::SUCCESS);
    let root = open_fid(&mut old, "", create_disposition::OPEN, READ).unwrap();
    assert_eq!(query_info_48(&mut old, root).0, NtStatus::NOT_SUPPORTED);
}

/// One QUERY_DIRECTORY on `fid`: the (FileIndex, name) of each entry, or
/// the status.
fn find_indexed(
    c: &mut Client,
    fid: FileId,
    flags: u8,
    file_index: u32,
    pattern: &str,
) -> Result<Vec<(u32, String)>, NtStatus> {
    let r = c.one(Request::QueryDirectory(QueryDirectoryRequest {
        file_information_class: fscc::info_class::FULL_DIRECTORY,
        flags,
        file_index,
        file_id: fid,
        file_name: Utf16::Str(pattern),
        output_buffer_length: 65536,
    }));
    let Response::QueryDirectory(q) = r.body() else {
        return Err(r.status());
    };
    Ok(DirectoryEntry::decode_list(DirectoryInfoClass::FullDirectory, q.output_buffer)
        .unwrap()
        .iter()
        .map(|e| (e.file_index, e.file_name.to_string_lossy()))
        .collect())
}

/// MS-FSCC 2.4.x FileIndex: an entry's position in the directory as the
/// open enumerates it ("." 1, ".." 2, then the names); SMB2_INDEX_SPECIFIED
/// (MS-SMB2 2.2.33) resumes after the entry of that index.
#[test]
fn query_directory_file_index_is_the_position_and_resumes_enumeration() {
    use QueryDirectoryRequest as Q;
    let mut c = Client::connected();
    let r = c.one(Request::Create(create(
        "idx",
        create_disposition::CREATE,
        create_options::DIRECTORY_FILE,
        RW,
    )));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    for i in 0..10 {
        write_file(&mut c, &format!("idx\\f{i}"), b"x");
    }
    let fid = open_dir(&mut c, "idx");
    let name = |i: u32| match i {
        1 => ".".to_string(),
        2 => "..".to_string(),
        n => format!("f{}", n - 3),
    };
    // One entry at a time: the indexes count up from 1.
    for want in 1..=7u32 {
        let got = find_indexed(&mut c, fid, Q::RETURN_SINGLE_ENTRY, 0, "*").unwrap();
        assert_eq!(got, vec![(want, name(want))]);
    }
    // The index of the entry last returned: the enumeration goes on.
    let got = find_indexed(&mut c, fid, Q::RETURN_SINGLE_ENTRY | Q::INDEX_SPECIFIED, 7, "*")
        .unwrap();
    assert_eq!(got, vec![(8, name(8))]);
    // An earlier index: resume after that entry.
    let got = find_indexed(&mut c, fid, Q::INDEX_SPECIFIED, 5, "*").unwrap();
    assert_eq!(got, (6..=12).map(|i| (i, name(i))).collect::<Vec<_>>());
    assert_eq!(find_indexed(&mut c, fid, 0, 0, "*"), Err(NtStatus::NO_MORE_FILES));
    // After the end, or an index past the names: nothing more.
    assert_eq!(
        find_indexed(&mut c, fid, Q::INDEX_SPECIFIED, 12, "*"),
        Err(NtStatus::NO_MORE_FILES)
    );
    assert_eq!(
        find_indexed(&mut c, fid, Q::INDEX_SPECIFIED, 40, "*"),
        Err(NtStatus::NO_MORE_FILES)
    );
    // Index 0 is before the first entry; 1 resumes after ".".
    let got = find_indexed(&mut c, fid, Q::INDEX_SPECIFIED, 0, "*").unwrap();
    assert_eq!(got.len(), 12);
    assert_eq!(got[0], (1, ".".to_string()));
    let got = find_indexed(&mut c, fid, Q::INDEX_SPECIFIED, 1, "*").unwrap();
    assert_eq!(got[0], (2, "..".to_string()));
    // A pattern: the indexes stay positions among all names, and resuming
    // passes the names that do not match as well.
    let got = find_indexed(&mut c, fid, Q::RESTART_SCANS | Q::RETURN_SINGLE_ENTRY, 0, "f?").unwrap();
    assert_eq!(got, vec![(3, name(3))]);
    let got = find_indexed(&mut c, fid, Q::INDEX_SPECIFIED, 8, "*").unwrap();
    assert_eq!(got, (9..=12).map(|i| (i, name(i))).collect::<Vec<_>>());
    // A hostile index (far past what is re-read) is ignored: the
    // enumeration goes on where it is.
    let got = find_indexed(&mut c, fid, Q::RESTART_SCANS | Q::RETURN_SINGLE_ENTRY, 0, "*").unwrap();
    assert_eq!(got, vec![(1, ".".to_string())]);
    let got = find_indexed(&mut c, fid, Q::RETURN_SINGLE_ENTRY | Q::INDEX_SPECIFIED, u32::MAX, "*")
        .unwrap();
    assert_eq!(got, vec![(2, "..".to_string())]);
    // A new open may start with an index too.
    let r = c.one(Request::Create(create(
        "idx",
        create_disposition::OPEN,
        create_options::DIRECTORY_FILE,
        READ,
    )));
    let Response::Create(cr) = r.body() else {
        panic!()
    };
    let got = find_indexed(&mut c, cr.file_id, Q::INDEX_SPECIFIED, 10, "*").unwrap();
    assert_eq!(got, (11..=12).map(|i| (i, name(i))).collect::<Vec<_>>());
}

/// Opens directory `name` for reading; its FileId.
fn open_dir(c: &mut Client, name: &str) -> FileId {
    let r = c.one(Request::Create(create(name, create_disposition::OPEN, create_options::DIRECTORY_FILE, READ)));
    let Response::Create(cr) = r.body() else {
        panic!("{name}: {:?}", r.status())
    };
    cr.file_id
}

/// FSCTL_SET_SPARSE (MS-FSCC 2.3.64): the flag is stored as
/// FILE_ATTRIBUTE_SPARSE_FILE (MS-FSCC 2.6), reported by QUERY_INFO and
/// QUERY_DIRECTORY, kept by a FileBasicInformation attribute write, cleared
/// by a zero SetSparse byte; a directory is STATUS_INVALID_PARAMETER; the
/// volume advertises FILE_SUPPORTS_SPARSE_FILES (2.5.1); duplicating a
/// sparse source into a target that is not sparse is STATUS_NOT_SUPPORTED
/// (2.3.8).
#[test]
fn set_sparse_is_stored_reported_and_guards_dup_extents() {
    const SPARSE: u32 = 0x200;
    let mut c = Client::connected();
    let ioctl = |code: u32, fid: FileId, input: &[u8]| -> Request<'static> {
        Request::Ioctl(IoctlRequest {
            ctl_code: code,
            file_id: fid,
            input: Box::leak(input.to_vec().into_boxed_slice()),
            max_input_response: 0,
            output: &[],
            max_output_response: 0,
            flags: IoctlRequest::IS_FSCTL,
        })
    };
    let query = |c: &mut Client, fid: FileId, it: u8, class: u8| -> Vec<u8> {
        let r = c.one(Request::QueryInfo(QueryInfoRequest {
            info_type: it,
            file_info_class: class,
            output_buffer_length: 4096,
            input_buffer: &[],
            additional_information: 0,
            flags: 0,
            file_id: fid,
        }));
        assert_eq!(r.status(), NtStatus::SUCCESS);
        let Response::QueryInfo(q) = r.body() else { panic!() };
        q.output_buffer.to_vec()
    };
    let attrs = |c: &mut Client, fid: FileId| {
        fscc::FileBasicInformation::decode(&query(c, fid, info_type::FILE, fscc::info_class::BASIC))
            .unwrap()
            .file_attributes
    };
    let dir_attrs = |c: &mut Client, name: &str| -> u32 {
        let r = c.call(vec![
            msg(Request::Create(create("", create_disposition::OPEN, create_options::DIRECTORY_FILE, READ)), false),
            msg(
                Request::QueryDirectory(QueryDirectoryRequest {
                    file_information_class: fscc::info_class::ID_BOTH_DIRECTORY,
                    flags: 0,
                    file_index: 0,
                    file_id: FileId::RELATED,
                    file_name: Utf16::Str(name),
                    output_buffer_length: 65536,
                }),
                true,
            ),
            close_related(),
        ]);
        let Response::QueryDirectory(q) = r[1].body() else { panic!() };
        DirectoryEntry::decode_list(DirectoryInfoClass::IdBothDirectory, q.output_buffer).unwrap()[0].file_attributes
    };
    let f = open_fid(&mut c, "sp", create_disposition::OPEN_IF, RW).unwrap();
    let fsa = query(&mut c, f, info_type::FILESYSTEM, fscc::fs_info_class::ATTRIBUTE);
    let fsa = fscc::FileFsAttributeInformation::decode(&fsa).unwrap();
    assert_ne!(fsa.file_system_attributes & 0x40, 0, "FILE_SUPPORTS_SPARSE_FILES");
    assert_eq!(attrs(&mut c, f) & SPARSE, 0);
    // No buffer sets; the first byte of a longer one decides.
    assert_eq!(c.one(ioctl(ctl_code::FSCTL_SET_SPARSE, f, &[])).status(), NtStatus::SUCCESS);
    assert_ne!(attrs(&mut c, f) & SPARSE, 0);
    assert_ne!(dir_attrs(&mut c, "sp") & SPARSE, 0, "QUERY_DIRECTORY reports it");
    // An attribute write keeps the flag.
    let mut binfo = Vec::new();
    fscc::FileBasicInformation { file_attributes: 0x2, ..Default::default() }.encode(&mut binfo);
    let r = c.one(Request::SetInfo(SetInfoRequest {
        info_type: info_type::FILE,
        file_info_class: fscc::info_class::BASIC,
        buffer: &binfo,
        additional_information: 0,
        file_id: f,
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    assert_eq!(attrs(&mut c, f) & (SPARSE | 0x2), SPARSE | 0x2);
    assert_eq!(c.one(ioctl(ctl_code::FSCTL_SET_SPARSE, f, &[0, 0xFF, 0xFF])).status(), NtStatus::SUCCESS);
    assert_eq!(attrs(&mut c, f) & (SPARSE | 0x2), 0x2, "cleared, HIDDEN kept");
    assert_eq!(c.one(ioctl(ctl_code::FSCTL_SET_SPARSE, f, &[1])).status(), NtStatus::SUCCESS);
    assert_ne!(attrs(&mut c, f) & SPARSE, 0);
    // A directory cannot be sparse.
    let r = c.one(Request::Create(create("spdir", create_disposition::OPEN_IF, create_options::DIRECTORY_FILE, READ)));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    let d = cr.file_id;
    assert_eq!(c.one(ioctl(ctl_code::FSCTL_SET_SPARSE, d, &[])).status(), NtStatus::INVALID_PARAMETER);
    // Sparse source, plain target: STATUS_NOT_SUPPORTED; both sparse: done.
    assert_eq!(write_at(&mut c, f, 0, &[7u8; 4096]), NtStatus::SUCCESS);
    let g = open_fid(&mut c, "plain", create_disposition::OPEN_IF, RW).unwrap();
    assert_eq!(write_at(&mut c, g, 0, &[0u8; 4096]), NtStatus::SUCCESS);
    let dup = |c: &mut Client, src: FileId, dst: FileId| {
        let mut input = Vec::new();
        for v in [src.persistent, src.volatile, 0, 0, 4096] {
            input.extend_from_slice(&v.to_le_bytes());
        }
        c.one(ioctl(ctl_code::FSCTL_DUPLICATE_EXTENTS_TO_FILE, dst, &input)).status()
    };
    assert_eq!(dup(&mut c, f, g), NtStatus::NOT_SUPPORTED);
    assert_eq!(dup(&mut c, g, f), NtStatus::SUCCESS, "plain source into a sparse target");
    assert_eq!(c.one(ioctl(ctl_code::FSCTL_SET_SPARSE, g, &[])).status(), NtStatus::SUCCESS);
    assert_eq!(dup(&mut c, f, g), NtStatus::SUCCESS);
    // FSCTL_QUERY_ALLOCATED_RANGES (MS-FSCC 2.3.51): the asked range within
    // the end of file; too small an output buffer, short input, negative or
    // wrapping ranges are refused.
    let qar = |c: &mut Client, off: i64, len: i64, max_out: u32| {
        let mut input = Vec::new();
        input.extend_from_slice(&off.to_le_bytes());
        input.extend_from_slice(&len.to_le_bytes());
        let mut rq = ioctl(ctl_code::FSCTL_QUERY_ALLOCATED_RANGES, g, &input);
        if let Request::Ioctl(io) = &mut rq {
            io.max_output_response = max_out;
        }
        let r = c.one(rq);
        let out = match r.body() {
            Response::Ioctl(io) => io.output.to_vec(),
            _ => Vec::new(),
        };
        (r.status(), out)
    };
    let (st, out) = qar(&mut c, 0, 8192, 1024);
    assert_eq!(st, NtStatus::SUCCESS);
    assert_eq!(out, [0u64.to_le_bytes(), 4096u64.to_le_bytes()].concat());
    let (st, out) = qar(&mut c, 1024, 1024, 1024);
    assert_eq!((st, out), (NtStatus::SUCCESS, [1024u64.to_le_bytes(), 1024u64.to_le_bytes()].concat()));
    assert_eq!(qar(&mut c, 4096, 100, 1024), (NtStatus::SUCCESS, Vec::new()), "past the end: none");
    assert_eq!(qar(&mut c, 0, 0, 1024), (NtStatus::SUCCESS, Vec::new()));
    assert_eq!(qar(&mut c, 0, 8192, 0).0, NtStatus::BUFFER_TOO_SMALL);
    assert_eq!(qar(&mut c, 512, -1, 1024).0, NtStatus::INVALID_PARAMETER);
    assert_eq!(qar(&mut c, -1, 10, 1024).0, NtStatus::INVALID_PARAMETER);
    assert_eq!(qar(&mut c, i64::MAX, 1, 1024).0, NtStatus::INVALID_PARAMETER);
    assert_eq!(c.one(ioctl(ctl_code::FSCTL_QUERY_ALLOCATED_RANGES, g, &[0; 8])).status(), NtStatus::INVALID_PARAMETER);
    // FSCTL_SET_ZERO_DATA (MS-FSCC 2.3.85): zeros within the end of file,
    // the size kept; bad ranges refused.
    assert_eq!(write_at(&mut c, g, 0, &[9u8; 4096]), NtStatus::SUCCESS);
    let zero = |c: &mut Client, off: i64, beyond: i64| {
        let mut input = Vec::new();
        input.extend_from_slice(&off.to_le_bytes());
        input.extend_from_slice(&beyond.to_le_bytes());
        c.one(ioctl(ctl_code::FSCTL_SET_ZERO_DATA, g, &input)).status()
    };
    assert_eq!(zero(&mut c, 100, 200), NtStatus::SUCCESS);
    assert_eq!(zero(&mut c, 4000, 9000), NtStatus::SUCCESS);
    assert_eq!(zero(&mut c, 300, 200), NtStatus::INVALID_PARAMETER);
    assert_eq!(zero(&mut c, -1, 200), NtStatus::INVALID_PARAMETER);
    assert_eq!(c.one(ioctl(ctl_code::FSCTL_SET_ZERO_DATA, g, &[0; 15])).status(), NtStatus::INVALID_PARAMETER);
    let r = c.one(Request::Read(ReadRequest { offset: 0, length: 8192, file_id: g, ..Default::default() }));
    let Response::Read(rd) = r.body() else { panic!("{:?}", r.status()) };
    let mut want = vec![9u8; 4096];
    want[100..200].fill(0);
    want[4000..].fill(0);
    assert_eq!(rd.data, &want[..]);
}

/// FSCTL_GET_COMPRESSION / FSCTL_SET_COMPRESSION (MS-FSCC 2.3.22, 2.3.67;
/// MS-FSA 2.1.5.10.7, 2.1.5.10.36): the volume advertises
/// FILE_FILE_COMPRESSION; the state is FILE_ATTRIBUTE_COMPRESSED (0x800),
/// reported as LZNT1 by GET and FileCompressionInformation (2.4.9); SET of
/// NONE clears, DEFAULT and LZNT1 set, anything else or a short buffer is
/// STATUS_INVALID_PARAMETER; GET needs no right, SET needs FILE_WRITE_DATA;
/// attribute writes and CREATE's FileAttributes never change it; new files
/// and directories inherit a directory's bit unless FILE_NO_COMPRESSION.
#[test]
fn compression_is_stored_reported_and_inherited() {
    const COMPRESSED: u32 = 0x800;
    const SYNCHRONIZE: u32 = 0x0010_0000;
    const WRITE_ATTRIBUTES: u32 = 0x100;
    let mut c = Client::connected();
    let ioctl = |code: u32, fid: FileId, input: &[u8], max_out: u32| -> Request<'static> {
        Request::Ioctl(IoctlRequest {
            ctl_code: code,
            file_id: fid,
            input: Box::leak(input.to_vec().into_boxed_slice()),
            max_input_response: 0,
            output: &[],
            max_output_response: max_out,
            flags: IoctlRequest::IS_FSCTL,
        })
    };
    let set = |c: &mut Client, fid: FileId, input: &[u8]| c.one(ioctl(ctl_code::FSCTL_SET_COMPRESSION, fid, input, 0)).status();
    let get = |c: &mut Client, fid: FileId| -> Result<u16, NtStatus> {
        let r = c.one(ioctl(ctl_code::FSCTL_GET_COMPRESSION, fid, &[], 2));
        match r.body() {
            Response::Ioctl(io) if r.status() == NtStatus::SUCCESS => {
                assert_eq!(io.output.len(), 2);
                Ok(u16::from_le_bytes([io.output[0], io.output[1]]))
            }
            _ => Err(r.status()),
        }
    };
    let query = |c: &mut Client, fid: FileId, it: u8, class: u8| -> Vec<u8> {
        let r = c.one(Request::QueryInfo(QueryInfoRequest {
            info_type: it,
            file_info_class: class,
            output_buffer_length: 4096,
            input_buffer: &[],
            additional_information: 0,
            flags: 0,
            file_id: fid,
        }));
        assert_eq!(r.status(), NtStatus::SUCCESS);
        let Response::QueryInfo(q) = r.body() else { panic!() };
        q.output_buffer.to_vec()
    };
    let attrs = |c: &mut Client, fid: FileId| {
        fscc::FileBasicInformation::decode(&query(c, fid, info_type::FILE, fscc::info_class::BASIC))
            .unwrap()
            .file_attributes
    };
    let set_attrs = |c: &mut Client, fid: FileId, a: u32| {
        let mut binfo = Vec::new();
        fscc::FileBasicInformation { file_attributes: a, ..Default::default() }.encode(&mut binfo);
        let r = c.one(Request::SetInfo(SetInfoRequest {
            info_type: info_type::FILE,
            file_info_class: fscc::info_class::BASIC,
            buffer: &binfo,
            additional_information: 0,
            file_id: fid,
        }));
        assert_eq!(r.status(), NtStatus::SUCCESS);
    };
    let f = open_fid(&mut c, "cf", create_disposition::OPEN_IF, RW).unwrap();
    let fsa = query(&mut c, f, info_type::FILESYSTEM, fscc::fs_info_class::ATTRIBUTE);
    let fsa = fscc::FileFsAttributeInformation::decode(&fsa).unwrap();
    assert_ne!(fsa.file_system_attributes & 0x10, 0, "FILE_FILE_COMPRESSION");
    assert_eq!(get(&mut c, f), Ok(0));
    assert_eq!(attrs(&mut c, f) & COMPRESSED, 0);
    // Bad formats and short buffers change nothing.
    assert_eq!(set(&mut c, f, &[0x42, 0]), NtStatus::INVALID_PARAMETER);
    assert_eq!(set(&mut c, f, &[1]), NtStatus::INVALID_PARAMETER);
    assert_eq!(set(&mut c, f, &[]), NtStatus::INVALID_PARAMETER);
    assert_eq!(get(&mut c, f), Ok(0));
    let r = c.one(ioctl(ctl_code::FSCTL_GET_COMPRESSION, f, &[], 0));
    assert_eq!(r.status(), NtStatus::INVALID_PARAMETER, "no room for the output");
    // DEFAULT sets; GET answers LZNT1; the attribute and
    // FileCompressionInformation say so.
    assert_eq!(set(&mut c, f, &[1, 0]), NtStatus::SUCCESS);
    assert_eq!(get(&mut c, f), Ok(2));
    assert_ne!(attrs(&mut c, f) & COMPRESSED, 0);
    let ci = query(&mut c, f, info_type::FILE, fscc::info_class::COMPRESSION);
    assert_eq!(ci.len(), 16);
    assert_eq!(u16::from_le_bytes([ci[8], ci[9]]), 2, "CompressionFormat LZNT1");
    // An attribute write keeps it; NONE clears it (HIDDEN kept); LZNT1 sets.
    set_attrs(&mut c, f, 0x2);
    assert_eq!(attrs(&mut c, f) & (COMPRESSED | 0x2), COMPRESSED | 0x2);
    assert_eq!(set(&mut c, f, &[0, 0]), NtStatus::SUCCESS);
    assert_eq!(get(&mut c, f), Ok(0));
    assert_eq!(attrs(&mut c, f) & (COMPRESSED | 0x2), 0x2);
    let ci = query(&mut c, f, info_type::FILE, fscc::info_class::COMPRESSION);
    assert_eq!(u16::from_le_bytes([ci[8], ci[9]]), 0);
    // An attribute write cannot set it.
    set_attrs(&mut c, f, COMPRESSED | 0x20);
    assert_eq!(attrs(&mut c, f) & COMPRESSED, 0);
    assert_eq!(set(&mut c, f, &[2, 0, 9, 9]), NtStatus::SUCCESS, "bytes past the USHORT ignored");
    assert_eq!(get(&mut c, f), Ok(2));
    // GET on a handle with no right but SYNCHRONIZE; SET needs
    // FILE_WRITE_DATA (FILE_WRITE_ATTRIBUTES is not enough).
    let s = open_fid(&mut c, "cf", create_disposition::OPEN, SYNCHRONIZE).unwrap();
    assert_eq!(get(&mut c, s), Ok(2));
    assert_eq!(set(&mut c, s, &[0, 0]), NtStatus::ACCESS_DENIED);
    let w = open_fid(&mut c, "cf", create_disposition::OPEN, SYNCHRONIZE | WRITE_ATTRIBUTES).unwrap();
    assert_eq!(set(&mut c, w, &[0, 0]), NtStatus::ACCESS_DENIED);
    assert_eq!(get(&mut c, f), Ok(2));
    // CREATE's FileAttributes never give it.
    let mut rq = create("cattr", create_disposition::CREATE, 0, RW);
    rq.file_attributes = 0x80 | COMPRESSED;
    let r = c.one(Request::Create(rq));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    assert_eq!(cr.file_attributes & COMPRESSED, 0);
    assert_eq!(get(&mut c, cr.file_id), Ok(0));
    // A directory: set, then what is created in it inherits, unless
    // FILE_NO_COMPRESSION.
    let r = c.one(Request::Create(create("cdir", create_disposition::CREATE, create_options::DIRECTORY_FILE, RW)));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    let d = cr.file_id;
    assert_eq!(get(&mut c, d), Ok(0));
    assert_eq!(set(&mut c, d, &[2, 0]), NtStatus::SUCCESS);
    assert_eq!(get(&mut c, d), Ok(2));
    assert_ne!(attrs(&mut c, d) & COMPRESSED, 0);
    let a = open_fid(&mut c, "cdir\\a", create_disposition::CREATE, RW).unwrap();
    assert_eq!(get(&mut c, a), Ok(2), "inherited by a file");
    let r = c.one(Request::Create(create("cdir\\sub", create_disposition::CREATE, create_options::DIRECTORY_FILE, RW)));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    assert_ne!(cr.file_attributes & COMPRESSED, 0, "inherited by a directory, reported by CREATE");
    let r = c.one(Request::Create(create("cdir\\n", create_disposition::CREATE, create_options::NO_COMPRESSION, RW)));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    assert_eq!(get(&mut c, cr.file_id), Ok(0), "FILE_NO_COMPRESSION file");
    let r = c.one(Request::Create(create(
        "cdir\\nd",
        create_disposition::CREATE,
        create_options::NO_COMPRESSION | create_options::DIRECTORY_FILE,
        RW,
    )));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    assert_eq!(get(&mut c, cr.file_id), Ok(0), "FILE_NO_COMPRESSION directory");
    // Clearing the directory's bit keeps the children's.
    assert_eq!(set(&mut c, d, &[0, 0]), NtStatus::SUCCESS);
    assert_eq!(get(&mut c, a), Ok(2));
    let b = open_fid(&mut c, "cdir\\b", create_disposition::CREATE, RW).unwrap();
    assert_eq!(get(&mut c, b), Ok(0));
    // A compressed file's data reads back as written, through a change of
    // the bit (inline data: this back end has no chunk store).
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(write_at(&mut c, a, 0, &data), NtStatus::SUCCESS);
    assert_eq!(set(&mut c, a, &[0, 0]), NtStatus::SUCCESS);
    assert_eq!(set(&mut c, a, &[1, 0]), NtStatus::SUCCESS);
    let r = c.one(Request::Read(ReadRequest {
        padding: 0x50,
        flags: 0,
        length: data.len() as u32,
        offset: 0,
        file_id: a,
        minimum_count: 0,
        channel: 0,
        remaining_bytes: 0,
        read_channel_info: &[],
    }));
    let Response::Read(rr) = r.body() else { panic!("{:?}", r.status()) };
    assert_eq!(rr.data, &data[..]);
}

/// QUERY_INFO FileStreamInformation of `name`: each entry's name and size.
fn streams_of(c: &mut Client, name: &str) -> Vec<(String, u64)> {
    let r = c.call(vec![
        msg(Request::Create(create(name, create_disposition::OPEN, 0, READ)), false),
        msg(
            Request::QueryInfo(QueryInfoRequest {
                info_type: info_type::FILE,
                file_info_class: fscc::info_class::STREAM,
                output_buffer_length: 4096,
                input_buffer: &[],
                additional_information: 0,
                flags: 0,
                file_id: FileId::RELATED,
            }),
            true,
        ),
        close_related(),
    ]);
    assert_eq!(statuses(&r), vec![NtStatus::SUCCESS; 3], "stream info of {name}");
    let Response::QueryInfo(q) = r[1].body() else { panic!("no QUERY_INFO response") };
    fscc::FileStreamInformation::decode_list(q.output_buffer)
        .unwrap()
        .iter()
        .map(|e| (e.stream_name.to_string_lossy(), e.stream_size))
        .collect()
}

fn delete_on_close(c: &mut Client, name: &str) -> Vec<NtStatus> {
    let r = c.call(vec![
        msg(
            Request::Create(create(name, create_disposition::OPEN, create_options::DELETE_ON_CLOSE, 0x0011_0080)),
            false,
        ),
        close_related(),
    ]);
    statuses(&r)
}

/// Named streams (MS-FSCC 2.1.5.1): `file:name[:$DATA]` created with real
/// data, read back byte-exact apart from the file's own data, listed by
/// FileStreamInformation and by nothing in the directory, deleted alone
/// by delete-on-close, and gone with their file; the metadata stays
/// consistent (fsck) and no stream record outlives its file.
#[test]
fn named_streams_round_trip_list_and_go_with_their_file() {
    let mut c = Client::connected();
    let ok = vec![NtStatus::SUCCESS; 4];
    assert_eq!(statuses(&write_file(&mut c, "f", b"main data")), ok);
    // Inline data (this harness has no chunk store; the smbtorture tests
    // write chunked streams through duetd).
    let big: Vec<u8> = (0..3_000u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(statuses(&write_file(&mut c, "f:One:$DATA", b"stream one bytes")), ok);
    assert_eq!(statuses(&write_file(&mut c, "f:two", &big[..])), ok);
    // Stream names are case-insensitive, the type too.
    assert_eq!(read_file(&mut c, "f:one").1, b"stream one bytes");
    assert_eq!(read_file(&mut c, "f:ONE:$data").1, b"stream one bytes");
    assert_eq!(read_file(&mut c, "f:two").1, &big[..]);
    assert_eq!(read_file(&mut c, "f").1, b"main data");
    assert_eq!(read_file(&mut c, "f::$DATA").1, b"main data");
    // A new stream on a file that does not exist makes the file.
    assert_eq!(statuses(&write_file(&mut c, "g:s", b"on g")), ok);
    assert_eq!(read_file(&mut c, "g").1, b"");
    assert_eq!(read_file(&mut c, "g:s").1, b"on g");
    // Listed by FileStreamInformation, never in the directory.
    assert_eq!(
        streams_of(&mut c, "f"),
        vec![("::$DATA".to_string(), 9), (":One:$DATA".to_string(), 16), (":two:$DATA".to_string(), 3_000)]
    );
    assert_eq!(streams_of(&mut c, "f:two").len(), 3, "asked on a stream, the file's list");
    let mut names = list(&mut c, "", "*");
    names.sort();
    assert_eq!(names, vec![".", "..", "f", "g"]);
    // Invalid names and types, missing streams and files.
    for bad in ["f:", "f::", "f:s:$BADTYPE", "f:s:$INDEX_ALLOCATION", "f:a:$DATA:x", "d:x\\y"] {
        assert_eq!(read_file(&mut c, bad).0[0], NtStatus::OBJECT_NAME_INVALID, "{bad}");
    }
    assert_eq!(read_file(&mut c, "f:nosuch").0[0], NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(read_file(&mut c, "nofile:s").0[0], NtStatus::OBJECT_NAME_NOT_FOUND);
    // CREATE of an existing stream collides.
    let r = c.call(vec![msg(Request::Create(create("f:one", create_disposition::CREATE, 0, RW)), false), close_related()]);
    assert_eq!(r[0].status(), NtStatus::OBJECT_NAME_COLLISION);
    // A stream is not a directory.
    let r = c.call(vec![
        msg(Request::Create(create("f:one", create_disposition::OPEN, create_options::DIRECTORY_FILE, READ)), false),
        close_related(),
    ]);
    assert_eq!(r[0].status(), NtStatus::NOT_A_DIRECTORY);
    // Delete-on-close of a stream deletes that stream alone.
    assert_eq!(delete_on_close(&mut c, "f:One"), vec![NtStatus::SUCCESS; 2]);
    assert_eq!(read_file(&mut c, "f:one").0[0], NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(read_file(&mut c, "f").1, b"main data");
    assert_eq!(read_file(&mut c, "f:two").1, &big[..]);
    assert_eq!(streams_of(&mut c, "f").len(), 2);
    let fsck = duet_cluster::fsck::check(&c.engine.kv, &[]);
    assert!(fsck.problems.is_empty(), "{:?}", fsck.problems);
    // Deleting the file deletes its streams: none reappears with a new
    // file of the same name, and no stream record or node is left.
    let nodes_before = c.engine.kv.keys().filter(|k| k.first() == Some(&b'n')).count();
    assert_eq!(delete_on_close(&mut c, "f"), vec![NtStatus::SUCCESS; 2]);
    assert_eq!(read_file(&mut c, "f:two").0[0], NtStatus::OBJECT_NAME_NOT_FOUND);
    let nodes_after = c.engine.kv.keys().filter(|k| k.first() == Some(&b'n')).count();
    assert_eq!(nodes_before - nodes_after, 2, "the file and its one stream");
    assert_eq!(statuses(&write_file(&mut c, "f", b"new")), ok);
    assert_eq!(streams_of(&mut c, "f"), vec![("::$DATA".to_string(), 3)]);
    assert_eq!(read_file(&mut c, "f:two").0[0], NtStatus::OBJECT_NAME_NOT_FOUND);
    let g_streams = c.engine.kv.keys().filter(|k| k.first() == Some(&b'T')).count();
    assert_eq!(g_streams, 1, "only g:s is left");
    let fsck = duet_cluster::fsck::check(&c.engine.kv, &[]);
    assert!(fsck.problems.is_empty(), "{:?}", fsck.problems);
}

fn rename_stream(c: &mut Client, name: &str, target: &str, replace: bool) -> NtStatus {
    let mut rinfo = Vec::new();
    fscc::FileRenameInformation { replace_if_exists: replace, root_directory: 0, file_name: Utf16::Str(target) }
        .encode(&mut rinfo);
    let r = c.call(vec![
        msg(Request::Create(create(name, create_disposition::OPEN, 0, 0x0013_019f)), false),
        msg(
            Request::SetInfo(SetInfoRequest {
                info_type: info_type::FILE,
                file_info_class: fscc::info_class::RENAME,
                buffer: &rinfo,
                additional_information: 0,
                file_id: FileId::RELATED,
            }),
            true,
        ),
        close_related(),
    ]);
    assert_eq!(r[0].status(), NtStatus::SUCCESS, "open {name}");
    r[1].status()
}

/// FileRenameInformation of a stream handle to `:name` (MS-FSCC 2.4.42):
/// the data moves with the name; an existing target collides without
/// ReplaceIfExists and is replaced with it only when empty; the unnamed
/// stream is not renamed to a named one. An overwrite of the file drops
/// its streams.
#[test]
fn named_streams_rename_and_overwrite() {
    let mut c = Client::connected();
    let ok = vec![NtStatus::SUCCESS; 4];
    assert_eq!(statuses(&write_file(&mut c, "f:a", b"stream a")), ok);
    assert_eq!(statuses(&write_file(&mut c, "f:b", b"stream b")), ok);
    assert_eq!(rename_stream(&mut c, "f:a", ":b", false), NtStatus::OBJECT_NAME_COLLISION);
    assert_eq!(rename_stream(&mut c, "f:a", ":b:$DATA", true), NtStatus::INVALID_PARAMETER);
    assert_eq!(rename_stream(&mut c, "f", ":x", false), NtStatus::NOT_SUPPORTED, "the unnamed stream stays");
    assert_eq!(rename_stream(&mut c, "f:a", ":c:$DATA", false), NtStatus::SUCCESS);
    assert_eq!(read_file(&mut c, "f:c").1, b"stream a");
    assert_eq!(read_file(&mut c, "f:a").0[0], NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(
        streams_of(&mut c, "f"),
        vec![("::$DATA".to_string(), 0), (":b:$DATA".to_string(), 8), (":c:$DATA".to_string(), 8)]
    );
    // OVERWRITE_IF of the file itself (write_file) drops its streams.
    assert_eq!(statuses(&write_file(&mut c, "f", b"new")), ok);
    assert_eq!(streams_of(&mut c, "f"), vec![("::$DATA".to_string(), 3)]);
    let fsck = duet_cluster::fsck::check(&c.engine.kv, &[]);
    assert!(fsck.problems.is_empty(), "{:?}", fsck.problems);
}

/// FileRenameInformation of a stream handle to `::$DATA` (MS-FSA
/// 2.1.5.14.11.1, smbtorture smb2.streams.rename2): a file with data
/// collides without ReplaceIfExists; an open of the file (or another of
/// the stream) is a SHARING_VIOLATION; otherwise the stream's data becomes
/// the file's and the stream is gone, and the handle goes on as an open of
/// the file. A target `base:stream` naming the handle's own file is a
/// SHARING_VIOLATION (as Windows), another path INVALID_PARAMETER.
#[test]
fn a_stream_renamed_onto_the_unnamed_stream() {
    // Each step opens the stream, renames it by its handle and closes it
    // in requests of their own, as smbtorture does.
    fn open(c: &mut Client, name: &str) -> FileId {
        let r = c.call(vec![msg(Request::Create(create(name, create_disposition::OPEN, 0, 0x0013_019f)), false)]);
        let Response::Create(h) = r[0].body() else { panic!("open {name}: {:?}", r[0].status()) };
        h.file_id
    }
    fn rename(c: &mut Client, fid: FileId, target: &str, replace: bool) -> NtStatus {
        let mut rinfo = Vec::new();
        fscc::FileRenameInformation { replace_if_exists: replace, root_directory: 0, file_name: Utf16::Str(target) }
            .encode(&mut rinfo);
        c.one(Request::SetInfo(SetInfoRequest {
            info_type: info_type::FILE,
            file_info_class: fscc::info_class::RENAME,
            buffer: &rinfo,
            additional_information: 0,
            file_id: fid,
        }))
        .status()
    }
    fn close(c: &mut Client, fid: FileId) {
        assert_eq!(c.one(Request::Close(CloseRequest { flags: 0, file_id: fid })).status(), NtStatus::SUCCESS);
    }
    fn rename_by_handle(c: &mut Client, name: &str, target: &str, replace: bool) -> NtStatus {
        let fid = open(c, name);
        let st = rename(c, fid, target, replace);
        close(c, fid);
        st
    }
    let mut c = Client::connected();
    let ok = vec![NtStatus::SUCCESS; 4];
    assert_eq!(statuses(&write_file(&mut c, "f", b"main")), ok);
    assert_eq!(statuses(&write_file(&mut c, "f:s", b"stream data")), ok);
    assert_eq!(rename_by_handle(&mut c, "f:s", "::$DATA", false), NtStatus::OBJECT_NAME_COLLISION);
    assert_eq!(rename_by_handle(&mut c, "f:s", "f:t", true), NtStatus::SHARING_VIOLATION);
    assert_eq!(rename_by_handle(&mut c, "f:s", "g:t", true), NtStatus::INVALID_PARAMETER);
    // An open of the file's unnamed stream, or another of the stream,
    // refuses it.
    for other in ["f", "f:s"] {
        let r = c.call(vec![msg(Request::Create(create(other, create_disposition::OPEN, 0, READ)), false)]);
        let Response::Create(held) = r[0].body() else { panic!("{:?}", r[0].status()) };
        let fid = held.file_id;
        assert_eq!(rename_by_handle(&mut c, "f:s", "::$DATA", true), NtStatus::SHARING_VIOLATION, "{other} open");
        close(&mut c, fid);
    }
    assert_eq!(rename_by_handle(&mut c, "f:s", "::$DATA", true), NtStatus::SUCCESS);
    assert_eq!(read_file(&mut c, "f").1, b"stream data");
    assert_eq!(read_file(&mut c, "f:s").0[0], NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(streams_of(&mut c, "f"), vec![("::$DATA".to_string(), 11)]);
    // The handle reads the file's data after the rename, and its close
    // leaves no share mode behind: an exclusive open of the file follows.
    assert_eq!(statuses(&write_file(&mut c, "g", b"")), ok);
    assert_eq!(statuses(&write_file(&mut c, "g:u", b"moved")), ok);
    let fid = open(&mut c, "g:u");
    assert_eq!(rename(&mut c, fid, "::$DATA", false), NtStatus::SUCCESS);
    let r = c.one(Request::Read(ReadRequest { offset: 0, length: 100, file_id: fid, ..Default::default() }));
    let Response::Read(rd) = r.body() else { panic!("{:?}", r.status()) };
    assert_eq!(rd.data, b"moved");
    close(&mut c, fid);
    let mut excl = create("g", create_disposition::OPEN, 0, RW);
    excl.share_access = 0;
    let r = c.call(vec![msg(Request::Create(excl), false), close_related()]);
    assert_eq!(statuses(&r), vec![NtStatus::SUCCESS; 2]);
    let fsck = duet_cluster::fsck::check(&c.engine.kv, &[]);
    assert!(fsck.problems.is_empty(), "{:?}", fsck.problems);
}

/// A stream open that does not share DELETE keeps its file from being
/// opened for deletion (SHARING_VIOLATION), while other opens of the file
/// go on; once the stream is closed the file is deleted, streams and all.
#[test]
fn an_open_stream_without_share_delete_keeps_its_file() {
    let mut c = Client::connected();
    assert_eq!(statuses(&write_file(&mut c, "f:s", b"held")), vec![NtStatus::SUCCESS; 4]);
    let mut cr = create("f:s", create_disposition::OPEN, 0, RW);
    cr.share_access = 0;
    let r = c.call(vec![msg(Request::Create(cr), false)]);
    let Response::Create(held) = r[0].body() else { panic!("{:?}", r[0].status()) };
    let fid = held.file_id;
    assert_eq!(delete_on_close(&mut c, "f")[0], NtStatus::SHARING_VIOLATION);
    assert_eq!(read_file(&mut c, "f").0[0], NtStatus::SUCCESS);
    let mut shared = create("f:s", create_disposition::OPEN, 0, READ);
    shared.share_access = 7;
    let r = c.call(vec![msg(Request::Create(shared), false), close_related()]);
    assert_eq!(r[0].status(), NtStatus::SHARING_VIOLATION, "the stream's own share mode holds");
    let r = c.call(vec![msg(Request::Close(CloseRequest { flags: 0, file_id: fid }), false)]);
    assert_eq!(r[0].status(), NtStatus::SUCCESS);
    assert_eq!(delete_on_close(&mut c, "f"), vec![NtStatus::SUCCESS; 2]);
    assert_eq!(read_file(&mut c, "f:s").0[0], NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(c.engine.kv.keys().filter(|k| k.first() == Some(&b'T')).count(), 0);
}

// ---- stored DACLs (issue 17) ----------------------------------------------

fn set_security(c: &mut Client, fid: FileId, sd: &[u8], addl: u32) -> NtStatus {
    c.one(Request::SetInfo(SetInfoRequest {
        info_type: info_type::SECURITY,
        file_info_class: 0,
        buffer: sd,
        additional_information: addl,
        file_id: fid,
    }))
    .status()
}

fn query_security(c: &mut Client, fid: FileId, addl: u32) -> duet_fs::acl::SecurityDescriptor {
    let r = c.one(Request::QueryInfo(QueryInfoRequest {
        info_type: info_type::SECURITY,
        file_info_class: 0,
        output_buffer_length: 4096,
        input_buffer: &[],
        additional_information: addl,
        flags: 0,
        file_id: fid,
    }));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let Response::QueryInfo(q) = r.body() else { panic!() };
    duet_fs::acl::SecurityDescriptor::decode(q.output_buffer).unwrap()
}

/// A DACL set over SMB (MS-SMB2 3.3.5.21.3) is stored as it was sent, read
/// back by QUERY_INFO (3.3.5.20.3), and decides a later CREATE's access
/// (MS-DTYP 2.5.3.2): a deny ACE refuses the owner a write its mode allows,
/// MAXIMUM_ALLOWED leaves the write out, and the owner keeps WRITE_DAC to
/// take the deny away again.
#[test]
fn a_dacl_set_over_smb_is_stored_queried_and_enforced() {
    use duet_fs::acl::{control, rights, Ace, Acl, SecurityDescriptor, Sid};
    let mut c = Client::connected();
    let fid = open_fid(&mut c, "acl-f", create_disposition::CREATE, RW | 0x0004_0000).unwrap();
    // The mode's DACL before: alice (the owner) may write.
    let before = query_security(&mut c, fid, 7);
    assert_eq!(before.owner, Some(Sid::unix_user(1000)));
    let deny = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(1000), rights::WRITE_DATA | rights::APPEND_DATA, 0),
            Ace::allow(Sid::everyone(), rights::FILE_GENERIC_READ | rights::FILE_GENERIC_WRITE, 0),
        ],
    };
    let sd = SecurityDescriptor { control: control::DACL_PROTECTED, dacl: Some(deny.clone()), ..Default::default() };
    assert_eq!(set_security(&mut c, fid, &sd.encode(), 4), NtStatus::SUCCESS);
    // Malformed descriptors are refused, and change nothing.
    assert_eq!(set_security(&mut c, fid, &[1, 0, 4, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 99, 0, 0, 0], 4), NtStatus::INVALID_PARAMETER);
    let got = query_security(&mut c, fid, 7);
    assert_eq!(got.dacl, Some(deny.clone()), "the DACL as sent");
    assert_ne!(got.control & control::DACL_PROTECTED, 0);
    assert_eq!(got.owner, Some(Sid::unix_user(1000)));
    assert_eq!(got.group, Some(Sid::unix_group(1000)));
    c.one(Request::Close(CloseRequest { flags: 0, file_id: fid }));

    // Write refused, read granted, MAXIMUM_ALLOWED without the write.
    assert_eq!(open_fid(&mut c, "acl-f", create_disposition::OPEN, RW), Err(NtStatus::ACCESS_DENIED));
    let rd = open_fid(&mut c, "acl-f", create_disposition::OPEN, READ).unwrap();
    c.one(Request::Close(CloseRequest { flags: 0, file_id: rd }));
    let max = open_fid(&mut c, "acl-f", create_disposition::OPEN, 0x0200_0000).unwrap();
    assert_eq!(write_at(&mut c, max, 0, b"x"), NtStatus::ACCESS_DENIED);
    // The owner still holds WRITE_DAC: allow everything again.
    let open = Acl { aces: vec![Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0)] };
    let sd = SecurityDescriptor { dacl: Some(open.clone()), ..Default::default() };
    assert_eq!(set_security(&mut c, max, &sd.encode(), 4), NtStatus::SUCCESS);
    c.one(Request::Close(CloseRequest { flags: 0, file_id: max }));
    let w = open_fid(&mut c, "acl-f", create_disposition::OPEN, RW).unwrap();
    assert_eq!(write_at(&mut c, w, 0, b"x"), NtStatus::SUCCESS);
    assert_eq!(query_security(&mut c, w, 4).dacl, Some(open));
}

/// An owner SID other than S-1-22-1-uid (issue 17): SET_INFO may name one
/// of the caller's token (Everyone here, MS-FSA 2.1.5.17), QUERY_INFO
/// answers it, a DACL set later keeps it, and naming the caller's Unix
/// SID makes the uid the owner again; a SID outside the token is
/// STATUS_INVALID_OWNER, a user SID as group
/// STATUS_INVALID_PRIMARY_GROUP, both changing nothing. A CREATE's
/// SD_BUFFER may name them too (smbtorture smb2.create.aclfile's last
/// step: owner Everyone, group BUILTIN\Users).
#[test]
fn an_owner_sid_of_the_callers_token_is_kept_and_queried() {
    use duet_fs::acl::{control, rights, Ace, Acl, SecurityDescriptor, Sid};
    let mut c = Client::connected();
    let users = Sid::new(5, &[32, 545]);
    let fid = open_fid(&mut c, "own-f", create_disposition::CREATE, RW | 0x000C_0000).unwrap();
    let owned = |o: Sid| SecurityDescriptor { owner: Some(o), ..Default::default() }.encode();
    // Outside alice's token: refused, the owner stays.
    assert_eq!(set_security(&mut c, fid, &owned(Sid::new(5, &[32, 544])), 1), NtStatus(0xC000_005A));
    assert_eq!(set_security(&mut c, fid, &owned(Sid::unix_user(1001)), 1), NtStatus(0xC000_005A));
    let as_group = SecurityDescriptor { group: Some(Sid::unix_user(1000)), ..Default::default() }.encode();
    assert_eq!(set_security(&mut c, fid, &as_group, 2), NtStatus(0xC000_005B));
    assert_eq!(query_security(&mut c, fid, 3).owner, Some(Sid::unix_user(1000)));
    // Everyone is in every token.
    assert_eq!(set_security(&mut c, fid, &owned(Sid::everyone()), 1), NtStatus::SUCCESS);
    let grouped = SecurityDescriptor { group: Some(users.clone()), ..Default::default() }.encode();
    assert_eq!(set_security(&mut c, fid, &grouped, 2), NtStatus::SUCCESS);
    let got = query_security(&mut c, fid, 7);
    assert_eq!((got.owner.as_ref(), got.group.as_ref()), (Some(&Sid::everyone()), Some(&users)));
    // No DACL was set: the mode's, naming the uid and gid.
    assert_eq!(got.dacl.as_ref().map(|d| d.aces[0].sid.clone()), Some(Sid::unix_user(1000)), "{got:?}");
    // A DACL set alone keeps the owner.
    let dacl = Acl { aces: vec![Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0)] };
    let sd = SecurityDescriptor { control: control::DACL_PRESENT, dacl: Some(dacl.clone()), ..Default::default() };
    assert_eq!(set_security(&mut c, fid, &sd.encode(), 4), NtStatus::SUCCESS);
    let got = query_security(&mut c, fid, 7);
    assert_eq!((got.owner, got.dacl), (Some(Sid::everyone()), Some(dacl.clone())));
    // Alice's own Unix SID: the uid owns it again.
    assert_eq!(set_security(&mut c, fid, &owned(Sid::unix_user(1000)), 1), NtStatus::SUCCESS);
    assert_eq!(query_security(&mut c, fid, 1).owner, Some(Sid::unix_user(1000)));
    assert_eq!(query_security(&mut c, fid, 2).group, Some(users.clone()), "the group SID stays");
    c.one(Request::Close(CloseRequest { flags: 0, file_id: fid }));

    // CREATE with owner, group and DACL in its SD_BUFFER.
    use duet_protocols::smb2::create_context::CreateContextRequest;
    let sd = SecurityDescriptor { control: control::DACL_PRESENT, owner: Some(Sid::everyone()), group: Some(users.clone()), dacl: Some(dacl.clone()), ..Default::default() };
    let bytes = sd.encode();
    let mut req = create("own-g", create_disposition::CREATE, 0, RW | 0x0002_0000);
    req.create_contexts = vec![CreateContextRequest::SecurityDescriptor(&bytes)];
    let r = c.one(Request::Create(req));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    let got = query_security(&mut c, cr.file_id, 7);
    assert_eq!((got.owner, got.group, got.dacl), (Some(Sid::everyone()), Some(users), Some(dacl)));
    // One naming an owner outside the token: refused, nothing made.
    let bad = SecurityDescriptor { owner: Some(Sid::new(5, &[32, 544])), ..Default::default() }.encode();
    let mut req = create("own-h", create_disposition::CREATE, 0, RW);
    req.create_contexts = vec![CreateContextRequest::SecurityDescriptor(&bad)];
    assert_eq!(c.one(Request::Create(req)).status(), NtStatus(0xC000_005A));
    assert_eq!(open_fid(&mut c, "own-h", create_disposition::OPEN, READ), Err(NtStatus::OBJECT_NAME_NOT_FOUND));
}

/// FSCTL_FILE_LEVEL_TRIM (MS-FSCC 2.3.73, `fsops.rs` `plan_trim`):
/// hostile inputs (short, more ranges than sent, a range past i64::MAX,
/// too many ranges) are INVALID_PARAMETER and the connection goes on; a
/// trimmed range reads as zeros and the rest of the file is unchanged,
/// the size too; the output counts the ranges.
#[test]
fn file_level_trim_zeroes_ranges_and_refuses_hostile_input() {
    let mut c = Client::connected();
    // Inline data (the test engine keeps no chunk files).
    let data: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8 + 1).collect();
    write_file(&mut c, "trimmed", &data);
    let r = c.one(Request::Create(create("trimmed", create_disposition::OPEN, 0, RW)));
    let Response::Create(cr) = r.body() else { panic!("open") };
    let fid = cr.file_id;
    let trim = |c: &mut Client, input: &[u8]| {
        c.one(Request::Ioctl(IoctlRequest {
            ctl_code: 0x0009_8208,
            file_id: fid,
            input,
            max_input_response: 0,
            output: &[],
            max_output_response: 4,
            flags: IoctlRequest::IS_FSCTL,
        }))
    };
    let req = |ranges: &[(u64, u64)], claimed: u32| {
        let mut v = Vec::new();
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&claimed.to_le_bytes());
        for (o, l) in ranges {
            v.extend_from_slice(&o.to_le_bytes());
            v.extend_from_slice(&l.to_le_bytes());
        }
        v
    };
    assert_eq!(trim(&mut c, &[0; 4]).status(), NtStatus::INVALID_PARAMETER, "short");
    assert_eq!(trim(&mut c, &req(&[(0, 10)], 2)).status(), NtStatus::INVALID_PARAMETER, "two claimed, one sent");
    assert_eq!(trim(&mut c, &req(&[(u64::MAX - 1, 10)], 1)).status(), NtStatus::INVALID_PARAMETER, "past i64::MAX");
    assert_eq!(trim(&mut c, &req(&[], u32::MAX)).status(), NtStatus::INVALID_PARAMETER, "too many");
    let r = trim(&mut c, &req(&[(0, 1000)], 1));
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let Response::Ioctl(io) = r.body() else { panic!("ioctl reply") };
    assert_eq!(io.output, &1u32.to_le_bytes(), "NumRangesProcessed");
    assert!(!c.closed);
    let (_, back) = read_file(&mut c, "trimmed");
    assert_eq!(back.len(), data.len(), "the size stays");
    assert!(back[..1000].iter().all(|&b| b == 0), "the trimmed range reads as zeros");
    assert_eq!(&back[1000..], &data[1000..], "the rest is unchanged");
}

/// MS-SMB2 3.3.7.1 (smbtorture smb2.durable-open.delete_on_close1): a lost
/// connection's delete-on-close file is removed by a batch nobody waits
/// for. A CREATE of that name on another connection while the batch still
/// runs waits for it (STATUS_PENDING, parked), and once the lost
/// connection's driver reports it done, finishes on a free name: CREATED,
/// empty, never the doomed file OPENED with its old data.
#[test]
fn a_create_waits_for_the_removal_a_lost_connection_left_running() {
    let locks = duet_locks::LockManager::new(duet_locks::Limits { recall_backoff_ns: 0, ..Default::default() });
    let share_modes = std::sync::Arc::new(duet_protocols::smb2::server::ShareModes::with_locks(std::sync::Arc::new(locks)));
    let cfg = || ServerConfig { share_modes: share_modes.clone(), ..Default::default() };
    let mut a = Client::connected_as(cfg(), [0x11; 16], Some(b"connection A, thirty-two or more bytes"));
    let mut b = Client::connected_as(cfg(), [0x22; 16], Some(b"connection B, thirty-two or more bytes"));
    let fid = open_fid_with(&mut a, "doomed", create_options::DELETE_ON_CLOSE, RW | 0x0001_0000);
    assert_eq!(write_at(&mut a, fid, 0, b"x"), NtStatus::SUCCESS);
    // The connection is lost: the removal is given out, not yet run.
    let runs: Vec<(u64, duet_fs::Batch)> = a
        .conn
        .on_disconnect(NOW)
        .into_iter()
        .filter_map(|e| match e {
            Event::Run { token, batch, .. } => Some((token, batch)),
            _ => None,
        })
        .collect();
    assert_eq!(runs.len(), 1);
    assert!(a.conn.removing());
    let interim = on_files_of(&mut a, &mut b, |b| {
        let interim = b.one(Request::Create(create("doomed", create_disposition::OPEN_IF, 0, RW)));
        let ev = b.conn.poll_opens(NOW, &b.dir);
        assert!(drive(b, ev).is_empty(), "still waiting for the removal");
        interim
    });
    assert_eq!(interim.status(), NtStatus::PENDING);
    assert!(interim.header.flags.is_async());
    assert_eq!(b.conn.parked_opens(), 1);
    for (token, batch) in runs {
        let r = a.engine.run(&batch);
        assert!(a.conn.on_batch_done(token, r, NOW).is_empty());
    }
    assert!(!a.conn.removing());
    let done = on_files_of(&mut a, &mut b, |b| {
        let ev = b.conn.poll_opens(NOW, &b.dir);
        drive(b, ev)
    });
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].status(), done[0].header.ids), (NtStatus::SUCCESS, interim.header.ids));
    let Response::Create(cr) = done[0].body() else { panic!() };
    assert_eq!((cr.create_action, cr.end_of_file), (2, 0), "created anew, empty");
}

fn open_fid_with(c: &mut Client, name: &str, options: u32, access: u32) -> FileId {
    let r = c.one(Request::Create(create(name, create_disposition::OPEN_IF, options, access)));
    let Response::Create(cr) = r.body() else { panic!("CREATE {name}: {:?}", r.status()) };
    cr.file_id
}

/// MS-SMB2 3.3.4.2 with Windows' compound behavior (<159>, <162>;
/// smbtorture smb2.compound.interim1/interim2): a CHANGE_NOTIFY related
/// to the CREATE of its compound, last in the compound, waits on the
/// directory the CREATE opened: the compound answers the CREATE and an
/// interim STATUS_PENDING in the ASYNC form, and CANCEL completes it
/// STATUS_CANCELLED. In the middle of a compound it fails
/// STATUS_INTERNAL_ERROR and the request after it is answered as usual.
#[test]
fn a_change_notify_on_the_compounds_create_waits_when_last() {
    use duet_protocols::changes::filter;
    let mut c = Client::connected();
    let notify = || {
        msg(
            Request::ChangeNotify(ChangeNotifyRequest {
                flags: ChangeNotifyRequest::WATCH_TREE,
                output_buffer_length: 4096,
                file_id: FileId::RELATED,
                completion_filter: filter::FILE_NAME,
            }),
            true,
        )
    };
    let r = c.call(vec![
        msg(Request::Create(create("interim1", create_disposition::CREATE, create_options::DIRECTORY_FILE, RW)), false),
        notify(),
    ]);
    assert_eq!(statuses(&r), vec![NtStatus::SUCCESS, NtStatus::PENDING]);
    assert!(r[1].header.flags.is_async() && r[1].header.async_id().is_some(), "the interim is in the ASYNC form");
    let Response::Create(cr) = r[0].body() else { panic!() };
    assert!(c.conn.watches_changed());
    assert_eq!(c.conn.watched().len(), 1, "the directory the CREATE opened is watched");
    let done = cancel_of(&mut c, &r[1]);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].status(), done[0].header.ids), (NtStatus::CANCELLED, r[1].header.ids));
    assert_eq!(c.one(Request::Close(CloseRequest { flags: 0, file_id: cr.file_id })).status(), NtStatus::SUCCESS);
    let _ = c.conn.watches_changed();
    assert!(c.conn.watched().is_empty(), "the watch ends with its directory's close");
    // In the middle: INTERNAL_ERROR, and the QUERY_INFO after it goes on.
    let r = c.call(vec![
        msg(Request::Create(create("interim2", create_disposition::CREATE, create_options::DIRECTORY_FILE, RW)), false),
        notify(),
        msg(
            Request::QueryInfo(QueryInfoRequest {
                info_type: info_type::FILE,
                file_info_class: 4,
                output_buffer_length: 4096,
                input_buffer: &[],
                additional_information: 0,
                flags: 0,
                file_id: FileId::RELATED,
            }),
            true,
        ),
        close_related(),
    ]);
    assert_eq!(statuses(&r), vec![NtStatus::SUCCESS, NtStatus::INTERNAL_ERROR, NtStatus::SUCCESS, NtStatus::SUCCESS]);
    assert!(c.conn.watched().is_empty(), "nothing watched");
}

/// MS-SMB2 3.3.5.9 / MS-FSA 2.1.5.1 as Windows answers them (smbtorture
/// smb2.create.gentest): DesiredAccess with a reserved bit (0x0CE0FE00)
/// is ACCESS_DENIED, checked before the attributes; FileAttributes
/// VOLUME, DEVICE, INTEGRITY_STREAM or any bit above 0xFFFF is
/// INVALID_PARAMETER; SYNCHRONIZE alone and MAXIMUM_ALLOWED alone open.
#[test]
fn reserved_access_bits_and_impossible_attributes_are_refused() {
    let mut c = Client::connected();
    let open = |c: &mut Client, access: u32, attrs: u32| {
        let mut r = create("gentest", create_disposition::OPEN_IF, 0, access);
        r.file_attributes = attrs;
        let rep = c.one(Request::Create(r));
        if let Response::Create(cr) = rep.body() {
            let fid = cr.file_id;
            assert_eq!(c.one(Request::Close(CloseRequest { flags: 0, file_id: fid })).status(), NtStatus::SUCCESS);
        }
        rep.status()
    };
    for bit in [0x200u32, 0x8000, 0x0020_0000, 0x0080_0000, 0x0400_0000, 0x0800_0000] {
        assert_eq!(open(&mut c, bit, 0), NtStatus::ACCESS_DENIED, "access bit {bit:#x}");
        assert_eq!(open(&mut c, bit, 0x8), NtStatus::ACCESS_DENIED, "access first, then attributes ({bit:#x})");
    }
    for attrs in [0x8u32, 0x40, 0x8000, 0x1_0000, 0x8000_0000, 0x8040] {
        assert_eq!(open(&mut c, RW, attrs), NtStatus::INVALID_PARAMETER, "attributes {attrs:#x}");
    }
    assert_eq!(open(&mut c, 0x0010_0000, 0), NtStatus::SUCCESS, "SYNCHRONIZE alone");
    assert_eq!(open(&mut c, 0x0200_0000, 0x20), NtStatus::SUCCESS, "MAXIMUM_ALLOWED");
}

/// Windows' rule for DELETE (MS-FSA 2.1.5.1.2.1, RFC 8881 6.2.1.3.2; the
/// engine's `may_unlink`): an open asking for DELETE is granted it when the
/// file's DACL grants DELETE, though the directory is read-only to the
/// caller, and delete-on-close removes the file; a file whose DACL denies
/// DELETE is refused it though the directory is writable; a file with no
/// DACL goes by the directory's write and search rights.
#[test]
fn delete_is_granted_by_the_files_dacl_or_the_directorys_delete_child() {
    use duet_fs::acl::{control, rights, Ace, Acl, SecurityDescriptor, Sid};
    let mut c = Client::connected();
    let alice = Sid::unix_user(1000);
    let dacl_sd = |aces: Vec<Ace>| {
        SecurityDescriptor { control: control::DACL_PRESENT, dacl: Some(Acl { aces }), ..Default::default() }.encode()
    };
    let r = c.one(Request::Create(create("deld", create_disposition::CREATE, create_options::DIRECTORY_FILE, RW | 0x0004_0000)));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    let dir = cr.file_id;
    for (name, aces) in [
        ("deld\\go", vec![Ace::allow(alice.clone(), rights::DELETE | rights::FILE_GENERIC_READ, 0)]),
        (
            "deld\\keep",
            vec![Ace::deny(alice.clone(), rights::DELETE, 0), Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0)],
        ),
        ("deld\\plain", vec![]),
    ] {
        let fid = open_fid(&mut c, name, create_disposition::CREATE, RW | 0x0004_0000).unwrap();
        if !aces.is_empty() {
            assert_eq!(set_security(&mut c, fid, &dacl_sd(aces), 4), NtStatus::SUCCESS);
        }
        c.one(Request::Close(CloseRequest { flags: 0, file_id: fid }));
    }
    let read_only = dacl_sd(vec![Ace::allow(alice.clone(), rights::FILE_GENERIC_READ | rights::FILE_GENERIC_EXECUTE, 0)]);
    assert_eq!(set_security(&mut c, dir, &read_only, 4), NtStatus::SUCCESS);
    const DELETE: u32 = 0x0001_0000 | 0x0000_0080;
    // No write on the directory, nothing on the file: no DELETE.
    assert_eq!(open_fid(&mut c, "deld\\plain", create_disposition::OPEN, DELETE), Err(NtStatus::ACCESS_DENIED));
    // The file's DACL grants it: the open gets DELETE, and delete-on-close
    // removes the file at CLOSE.
    let r = c.one(Request::Create(create("deld\\go", create_disposition::OPEN, create_options::DELETE_ON_CLOSE, DELETE)));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    assert_eq!(c.one(Request::Close(CloseRequest { flags: 0, file_id: cr.file_id })).status(), NtStatus::SUCCESS);
    assert_eq!(open_fid(&mut c, "deld\\go", create_disposition::OPEN, READ), Err(NtStatus::OBJECT_NAME_NOT_FOUND));
    // The directory lets alice change it (write and search, no
    // DELETE_CHILD): the file that denies DELETE is refused it, the file
    // without a DACL is not.
    let modify = dacl_sd(vec![Ace::allow(
        alice.clone(),
        rights::FILE_GENERIC_READ | rights::FILE_GENERIC_WRITE | rights::FILE_GENERIC_EXECUTE | rights::DELETE,
        0,
    )]);
    assert_eq!(set_security(&mut c, dir, &modify, 4), NtStatus::SUCCESS);
    assert_eq!(open_fid(&mut c, "deld\\keep", create_disposition::OPEN, DELETE), Err(NtStatus::ACCESS_DENIED));
    let fid = open_fid(&mut c, "deld\\plain", create_disposition::OPEN, DELETE).unwrap();
    c.one(Request::Close(CloseRequest { flags: 0, file_id: fid }));
    // FILE_DELETE_CHILD on the directory wins over the file's deny.
    let full = dacl_sd(vec![Ace::allow(alice, rights::FILE_ALL_ACCESS, 0)]);
    assert_eq!(set_security(&mut c, dir, &full, 4), NtStatus::SUCCESS);
    let r = c.one(Request::Create(create("deld\\keep", create_disposition::OPEN, create_options::DELETE_ON_CLOSE, DELETE)));
    let Response::Create(cr) = r.body() else { panic!("{:?}", r.status()) };
    c.one(Request::Close(CloseRequest { flags: 0, file_id: cr.file_id }));
    assert_eq!(open_fid(&mut c, "deld\\keep", create_disposition::OPEN, READ), Err(NtStatus::OBJECT_NAME_NOT_FOUND));
}

/// duet's users and their groups are shown under the machine SID
/// (`duet_fs::acl::SidMap`): the owner and group of a file, the ACEs of a
/// DACL; a DACL set naming a user by its machine SID is stored under the
/// Unix SID and binds that user; the RID rule maps back any id.
#[test]
fn duets_users_are_shown_under_the_machine_sid_and_read_back_from_it() {
    use duet_fs::acl::{control, rights, Ace, Acl, SecurityDescriptor, Sid, SidMap};
    let mut c = Client::connected();
    let machine = Sid::parse("S-1-5-21-11-22-33").unwrap();
    c.dir.sid_map = Some(std::sync::Arc::new(SidMap { machine: Some(machine), users: [1000].into(), groups: [1000].into() }));
    let alice = Sid::parse("S-1-5-21-11-22-33-3000").unwrap();
    let alices_group = Sid::parse("S-1-5-21-11-22-33-3001").unwrap();
    let fid = open_fid(&mut c, "sids", create_disposition::CREATE, RW | 0x000C_0000).unwrap();
    let got = query_security(&mut c, fid, 7);
    assert_eq!((got.owner.as_ref(), got.group.as_ref()), (Some(&alice), Some(&alices_group)));
    assert_eq!(got.dacl.as_ref().unwrap().aces[0].sid, alice, "the mode's owner ACE: {got:?}");
    // A DACL naming alice by her machine SID: stored as S-1-22-1-1000, so
    // it binds her (deny read), and shown as her machine SID again; an
    // unknown id keeps its Unix SID.
    let dacl = Acl {
        aces: vec![
            Ace::deny(alice.clone(), rights::READ_DATA, 0),
            Ace::allow(Sid::unix_user(4242), rights::READ_DATA, 0),
            Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    let sd = SecurityDescriptor { control: control::DACL_PRESENT, dacl: Some(dacl.clone()), ..Default::default() };
    assert_eq!(set_security(&mut c, fid, &sd.encode(), 4), NtStatus::SUCCESS);
    assert_eq!(query_security(&mut c, fid, 4).dacl, Some(dacl));
    c.one(Request::Close(CloseRequest { flags: 0, file_id: fid }));
    assert_eq!(open_fid(&mut c, "sids", create_disposition::OPEN, READ), Err(NtStatus::ACCESS_DENIED));
    // Without the map the same file shows the Unix SIDs it stores.
    c.dir.sid_map = None;
    let fid = open_fid(&mut c, "sids", create_disposition::OPEN, 0x0002_0000).unwrap();
    let got = query_security(&mut c, fid, 5);
    assert_eq!(got.owner, Some(Sid::unix_user(1000)));
    assert_eq!(got.dacl.unwrap().aces[0].sid, Sid::unix_user(1000));
}
