//! Hostile and mistaken SMB clients against a real duetd: a wrong password
//! and an unknown user (LOGON_FAILURE), a tampered signature
//! (ACCESS_DENIED), a READ over the negotiated MaxReadSize
//! (INVALID_PARAMETER), an unknown command (INVALID_PARAMETER) and a frame
//! over the transport limit (the connection is dropped). After each the
//! daemon keeps serving: smbclient on another connection lists the share.
//! The client is built from duet's own codec (SMB 2.1, HMAC-SHA256
//! signing, MS-SMB2 3.1.4.1) and talks over plain TCP.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::Daemon;
use duet_protocols::auth::{ntlm, spnego};
use duet_protocols::smb2::compound::Compound;
use duet_protocols::smb2::create::{create_disposition, create_options, CreateRequest};
use duet_protocols::smb2::cursor::Utf16;
use duet_protocols::smb2::header::{Command as Cmd, Header, HeaderFlags, HeaderIds};
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::negotiate::{dialect, NegotiateRequest};
use duet_protocols::smb2::read::ReadRequest;
use duet_protocols::smb2::server::crypto::{derive_keys, SigningKey};
use duet_protocols::smb2::session_setup::SessionSetupRequest;
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::tree_connect::TreeConnectRequest;

struct Client {
    tcp: TcpStream,
    next_id: u64,
    session_id: u64,
    tree_id: u32,
    signing: Option<SigningKey>,
}

/// One decoded reply: its header and whole message bytes.
struct Reply {
    header: Header,
    bytes: Vec<u8>,
}

impl Reply {
    fn status(&self) -> NtStatus {
        self.header.status
    }
}

impl Client {
    fn connect(port: u16) -> Client {
        let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { tcp, next_id: 0, session_id: 0, tree_id: 0, signing: None }
    }

    /// One request as a framed message, signed when asked and a key is set.
    fn message(&mut self, req: Request<'_>, command: Cmd, sign: bool) -> Vec<u8> {
        let mut body = vec![0u8; 64];
        req.encode(&mut body);
        let body = body.split_off(64);
        self.raw(command, &body, sign)
    }

    fn raw(&mut self, command: Cmd, body: &[u8], sign: bool) -> Vec<u8> {
        let signed = sign && self.signing.is_some();
        let h = Header {
            credit_charge: 1,
            status: NtStatus::SUCCESS,
            command,
            credit: 32,
            flags: HeaderFlags(if signed { HeaderFlags::SIGNED } else { 0 }),
            next_command: 0,
            message_id: self.next_id,
            ids: HeaderIds::Sync { process_id: 0xfeff, tree_id: self.tree_id },
            session_id: self.session_id,
            signature: [0; 16],
        };
        self.next_id += 1;
        let mut out = Vec::new();
        h.encode(&mut out);
        out.extend_from_slice(body);
        if signed {
            self.signing.as_ref().unwrap().sign_in_place(&mut out);
        }
        out
    }

    fn send(&mut self, msg: &[u8]) {
        let mut f = (msg.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(msg);
        self.tcp.write_all(&f).unwrap();
    }

    /// The next reply (interim STATUS_PENDING replies are skipped), or None
    /// when the server closed the connection.
    fn recv(&mut self) -> Option<Reply> {
        loop {
            let mut len = [0u8; 4];
            self.tcp.read_exact(&mut len).ok()?;
            let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
            self.tcp.read_exact(&mut buf).ok()?;
            let m = Compound::new(&buf).next()?.ok()?;
            if m.header.status == NtStatus::PENDING {
                continue;
            }
            return Some(Reply { header: m.header, bytes: m.bytes.to_vec() });
        }
    }

    fn call(&mut self, req: Request<'_>, command: Cmd) -> Reply {
        let m = self.message(req, command, true);
        self.send(&m);
        self.recv().expect("a reply")
    }

    fn negotiate(&mut self) {
        let req = NegotiateRequest {
            security_mode: 1,
            capabilities: 0,
            client_guid: [0x33; 16],
            client_start_time: 0,
            dialects: vec![dialect::SMB2_1],
            negotiate_contexts: Vec::new(),
        };
        let r = self.call(Request::Negotiate(req), Cmd::NEGOTIATE);
        assert_eq!(r.status(), NtStatus::SUCCESS);
    }

    /// NTLMv2 through SPNEGO; the final status.
    fn login(&mut self, user: &str, password: &str) -> NtStatus {
        let neg = ntlm::client_negotiate(ntlm::CLIENT_FLAGS);
        let tok = spnego::client_init(&neg);
        let r = self.call(Request::SessionSetup(setup(&tok)), Cmd::SESSION_SETUP);
        assert_eq!(r.status(), NtStatus::MORE_PROCESSING_REQUIRED);
        self.session_id = r.header.session_id;
        let Ok(Response::SessionSetup(ss)) = Response::decode(&r.header, &r.bytes) else {
            panic!("session setup reply decodes");
        };
        let chal = spnego::parse_server_response(ss.security_buffer).unwrap().token.unwrap().to_vec();
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
        let r = self.call(Request::SessionSetup(setup(&tok)), Cmd::SESSION_SETUP);
        if r.status() == NtStatus::SUCCESS {
            self.signing = Some(derive_keys(dialect::SMB2_1, &key, None, &[0; 64], true).signing);
        }
        r.status()
    }
}

fn setup(t: &[u8]) -> SessionSetupRequest<'_> {
    SessionSetupRequest {
        flags: 0,
        security_mode: 1,
        capabilities: 0,
        channel: 0,
        previous_session_id: 0,
        security_buffer: t,
    }
}

fn smbclient_lists(port: u16) {
    let out = Command::new("smbclient")
        .args(["//127.0.0.1/public", "-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3", "-c", "ls"])
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("blocks of size"), "smbclient ls: {text}{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn hostile_smb_clients_get_their_status_and_others_keep_service() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(2500));
    let port = d.smb_port;

    // Wrong password and unknown user.
    for (user, pass) in [("bench", "wrong"), ("nobody", "benchpw")] {
        let mut c = Client::connect(port);
        c.negotiate();
        assert_eq!(c.login(user, pass), NtStatus::LOGON_FAILURE, "{user}");
    }
    smbclient_lists(port);

    // A signed session; then a request whose signature was tampered with.
    let mut c = Client::connect(port);
    c.negotiate();
    assert_eq!(c.login("bench", "benchpw"), NtStatus::SUCCESS);
    let tc = TreeConnectRequest { flags: 0, path: Utf16::Str("\\\\127.0.0.1\\public") };
    let r = c.call(Request::TreeConnect(tc.clone()), Cmd::TREE_CONNECT);
    assert_eq!(r.status(), NtStatus::SUCCESS);
    c.tree_id = match r.header.ids {
        HeaderIds::Sync { tree_id, .. } => tree_id,
        _ => panic!("sync reply"),
    };
    let mut m = c.message(Request::TreeConnect(tc), Cmd::TREE_CONNECT, true);
    m[48] ^= 0x01; // one bit of the signature
    c.send(&m);
    let r = c.recv().expect("a reply to the tampered request");
    assert_eq!(r.status(), NtStatus::ACCESS_DENIED, "tampered signature");

    // A READ over the negotiated MaxReadSize (8 MiB here).
    let open = CreateRequest {
        security_flags: 0,
        requested_oplock_level: 0,
        impersonation_level: 2,
        smb_create_flags: 0,
        desired_access: 0x0012_0089,
        file_attributes: 0,
        share_access: 7,
        create_disposition: create_disposition::OPEN_IF,
        create_options: create_options::NON_DIRECTORY_FILE,
        name: Utf16::Str("hostile.txt"),
        create_contexts: Vec::new(),
    };
    let r = c.call(Request::Create(open), Cmd::CREATE);
    assert_eq!(r.status(), NtStatus::SUCCESS, "create");
    let Ok(Response::Create(cr)) = Response::decode(&r.header, &r.bytes) else { panic!("create reply") };
    let read = ReadRequest {
        padding: 0,
        flags: 0,
        length: 64 << 20,
        offset: 0,
        file_id: cr.file_id,
        minimum_count: 0,
        channel: 0,
        remaining_bytes: 0,
        read_channel_info: &[],
    };
    let r = c.call(Request::Read(read), Cmd::READ);
    assert_eq!(r.status(), NtStatus::INVALID_PARAMETER, "read over MaxReadSize");

    // An unknown command.
    let m = c.raw(Cmd(0x0042), &[4, 0, 0, 0], true);
    c.send(&m);
    let r = c.recv().expect("a reply to the unknown command");
    assert_eq!(r.status(), NtStatus::INVALID_PARAMETER, "unknown command");
    smbclient_lists(port);

    // A frame announced as 16 MiB: the connection is dropped, unread.
    let mut raw = TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    raw.write_all(&(16u32 << 20).to_be_bytes()).unwrap();
    let _ = raw.write_all(&[0xFE, b'S', b'M', b'B']);
    let mut buf = [0u8; 16];
    let n = raw.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "an oversized frame gets no answer but a closed connection");
    smbclient_lists(port);
}
