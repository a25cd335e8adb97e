//! A blocking admin API client: one request per TCP connection, over TLS
//! (rustls) for an `https://` address.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use duet_admin_api::{
    decode_response, AdminRequest, AdminResponse, Credentials, Parsed, ResponseParser,
};

use crate::error::CtlError;

/// Default connect/read/write timeout.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Read timeout for fsck, which walks the whole file system.
pub const FSCK_TIMEOUT: Duration = Duration::from_secs(600);
/// Read timeout for a leadership transfer or a membership change: the
/// daemon itself waits up to 10 s for it to take effect (and a follower
/// first up to `leader_wait_ms` for a leader to forward it to), so the
/// CLI must wait longer than that or it gives up just before the answer.
pub const CLUSTER_CHANGE_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Client {
    /// host:port as given (also sent as Host).
    pub addr: String,
    pub creds: Credentials,
    /// TLS (an `https://` address): the configuration and the name the
    /// server's certificate must carry.
    pub tls: Option<(std::sync::Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
}

/// Whether `addr` asks for TLS (`https://host:port`).
pub fn is_https(addr: &str) -> bool {
    addr.trim().starts_with("https://")
}

/// A TLS client configuration that trusts the CA certificates in `ca_file`
/// (PEM; duetd's own is `<data-dir>/admin-tls/ca.pem`).
pub fn tls_config(ca_file: &std::path::Path) -> Result<std::sync::Arc<rustls::ClientConfig>, CtlError> {
    use rustls::pki_types::pem::PemObject;
    let bad = |e: String| CtlError::Usage(format!("--tls-ca {}: {e}", ca_file.display()));
    let mut roots = rustls::RootCertStore::empty();
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(ca_file).map_err(|e| bad(e.to_string()))?;
    for c in certs {
        roots.add(c.map_err(|e| bad(e.to_string()))?).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(std::sync::Arc::new(cfg))
}

trait Conn: Read + Write {}
impl<T: Read + Write> Conn for T {}

/// A successful reply: the typed response and the raw body (for --json).
pub struct Reply {
    pub response: AdminResponse,
    pub raw: Vec<u8>,
}

/// Accepts "host:port", "http://host:port", "https://host:port" and a
/// trailing '/'.
pub fn normalize_addr(addr: &str) -> &str {
    let a = addr.trim();
    let a = a.strip_prefix("http://").or_else(|| a.strip_prefix("https://")).unwrap_or(a);
    a.strip_suffix('/').unwrap_or(a)
}

impl Client {
    pub fn new(addr: &str, creds: Credentials) -> Client {
        Client {
            addr: normalize_addr(addr).to_string(),
            creds,
            tls: None,
        }
    }

    /// The same client over TLS, trusting `config`'s roots.
    pub fn with_tls(mut self, config: std::sync::Arc<rustls::ClientConfig>) -> Result<Client, CtlError> {
        let host = match self.addr.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
            None => self.addr.clone(),
        };
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|_| CtlError::Usage(format!("--addr: {host} is not a host name or address TLS can check")))?;
        self.tls = Some((config, name));
        Ok(self)
    }

    fn connect(&self) -> Result<TcpStream, CtlError> {
        let connect_err = |source| CtlError::Connect {
            addr: self.addr.clone(),
            source,
        };
        let addrs: Vec<SocketAddr> = self.addr.to_socket_addrs().map_err(connect_err)?.collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolved to nothing");
        for a in addrs {
            match TcpStream::connect_timeout(&a, TIMEOUT) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(connect_err(last))
    }

    /// Sends `req` and waits for the reply. Non-2xx replies are
    /// `CtlError::Api`.
    pub fn call(&self, req: &AdminRequest) -> Result<Reply, CtlError> {
        let bytes = req.to_http(&self.addr, Some(&self.creds)).encode();
        let tcp = self.connect()?;
        let read_timeout = match req {
            AdminRequest::Fsck => FSCK_TIMEOUT,
            AdminRequest::TransferLeader(_) | AdminRequest::MemberAdd(_) | AdminRequest::MemberRemove(_) => {
                CLUSTER_CHANGE_TIMEOUT
            }
            _ => TIMEOUT,
        };
        let send_err = |e: io::Error| {
            CtlError::Transport(format!(
                "sending the request to duetd at {}: {}",
                self.addr,
                describe(&e, TIMEOUT)
            ))
        };
        let read_err = |e: io::Error| {
            CtlError::Transport(format!(
                "reading the reply from duetd at {}: {}",
                self.addr,
                describe(&e, read_timeout)
            ))
        };
        tcp.set_write_timeout(Some(TIMEOUT)).map_err(send_err)?;
        tcp.set_read_timeout(Some(read_timeout)).map_err(read_err)?;
        let _ = tcp.set_nodelay(true);
        let mut stream: Box<dyn Conn> = match &self.tls {
            None => Box::new(tcp),
            Some((cfg, name)) => {
                let conn = rustls::ClientConnection::new(cfg.clone(), name.clone())
                    .map_err(|e| CtlError::Transport(format!("TLS to duetd at {}: {e}", self.addr)))?;
                Box::new(rustls::StreamOwned::new(conn, tcp))
            }
        };
        stream.write_all(&bytes).map_err(send_err)?;
        let mut parser = ResponseParser::new();
        let mut buf = vec![0u8; 64 * 1024];
        let resp = loop {
            let n = match stream.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_err(e)),
            };
            let parsed = if n == 0 {
                parser.finish()
            } else {
                parser.feed(&buf[..n])
            };
            match parsed {
                Parsed::Complete(r) => break r,
                Parsed::Incomplete => {}
                Parsed::Error(e) => {
                    return Err(CtlError::BadReply(format!(
                        "bad reply from duetd at {}: {e}",
                        self.addr
                    )))
                }
            }
        };
        let response = decode_response(req, &resp).map_err(|e| {
            // A 2xx reply whose body does not decode is a bad reply, not
            // the daemon's verdict.
            if resp.is_success() {
                CtlError::BadReply(e.message)
            } else {
                CtlError::Api(e)
            }
        })?;
        Ok(Reply {
            response,
            raw: resp.body,
        })
    }
}

fn describe(e: &io::Error, timeout: Duration) -> String {
    if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        format!("timed out after {} s", timeout.as_secs())
    } else {
        e.to_string()
    }
}
