//! The admin API server: HTTP/1.1 (over TLS off loopback, `tls.rs`), one
//! request per connection, authenticated by the API token (the file
//! `admin.token` in the data directory), the admin user's password, or a
//! web console session (`console.rs`: cookie plus CSRF token); repeated
//! failures from one address are throttled. Also serves `/metrics` and the
//! console's page.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use duet_admin_api::http::{Parsed, RequestParser};
use duet_admin_api::{
    codes, credentials, encode_response, route, AdminRequest, AdminResponse, ApiError, ClusterNode, ClusterStatus, ConnectionStats, Credentials,
    ErrorCount, FsckReport,
    ListenerInfo, NewUser, NfsExportRules, Protocol, PublicAddress, RaftInfo, RequestStats, Share, Stats, StatusInfo, UserInfo,
};
use duet_cluster::records::{Command, ShareRecord, UserRecord};
use duet_cluster::machine::AdminError;
use duet_cluster_store::{MemberChange, Query, QueryAnswer, Refusal, StoreError};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use crate::console::{self, Console};
use duet_cluster::admin_wire::{AdminOutcome, AdminRequestMsg};

use crate::engine::Engine;
use crate::forward::{AdminCall, AdminLink, IncomingAdmin};
use crate::secrets;

/// What `status` reports about the process.
pub struct NodeInfo {
    pub node_id: u64,
    pub executors: u32,
    pub data_dir: String,
    pub listeners: std::sync::Arc<std::sync::Mutex<Vec<ListenerInfo>>>,
    pub started: Instant,
    /// This node's cluster address (`config::ClusterPlan::addr`).
    pub cluster_addr: String,
    /// The voters and what the transport knows of them.
    pub cluster: ClusterInfo,
    /// A multi-node cluster's per-node API token (its hash; the token is
    /// `admin.token` in this node's data directory). None: the token is
    /// the one in the metadata (a single node).
    pub local_token: Option<Vec<u8>>,
}

/// How long an admin change waits for its raft entry in a multi-node
/// cluster before the API answers that it was not committed.
pub const COMMIT_WAIT: Duration = Duration::from_secs(5);

/// How long `POST /v1/cluster/transfer-leader` waits for the new leader.
pub const TRANSFER_WAIT: Duration = Duration::from_secs(10);

/// The voters of `[cluster] peers` (this node among them) and, in a
/// multi-node cluster, the transport's view of the others.
#[derive(Clone, Default)]
pub struct ClusterInfo {
    pub voters: Vec<(u64, String)>,
    pub health: Option<std::sync::Arc<crate::peers::PeerHealth>>,
    /// The transport's queues to the peers (multi-node only).
    pub queues: Option<crate::peers::PeerSender>,
    /// Raft snapshot transfers (multi-node only).
    pub snapshots: Option<std::sync::Arc<crate::snapshot::Snapshots>>,
    /// `[cluster] public_addresses` as configured.
    pub public_addresses: Vec<String>,
}

pub struct Admin {
    pub engine: Rc<Engine>,
    pub node: NodeInfo,
    /// `[testing] fault_injection`: whether `POST /v1/faults` is served.
    pub fault_injection: bool,
    /// The shortest snapshot schedule interval taken (`[testing]
    /// snapshot_schedule_min_s`, default 60 s).
    pub schedule_min_s: u64,
    /// The data volume's capacity as the protocols report it.
    pub space: std::sync::Arc<duet_protocols::space::Space>,
    /// `[limits] disk_reserve_mib` in bytes.
    pub reserve: u64,
    /// The client connection table (counts for stats and metrics).
    pub conns: std::sync::Arc<crate::frontend::ConnTable>,
    /// Requests refused for their credentials.
    pub auth_failures: std::cell::Cell<u64>,
    /// Admin changes and refused logons.
    pub audit: std::sync::Arc<crate::audit::AuditLog>,
    /// The web console's sessions and the sign-in throttle.
    pub console: Console,
    /// TLS on the admin listener (`[admin] tls`), or None.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// Multi-node: mutating requests to and from the leader (forward.rs).
    pub link: Option<std::sync::Arc<AdminLink>>,
    /// Multi-node: the batch forwarder and the write cache's replication,
    /// for `/metrics`.
    pub forwarder: Option<std::sync::Arc<crate::forward::Forwarder>>,
    pub replica: Option<std::sync::Arc<crate::replica::ReplicaCounters>>,
}

/// What the API answers one request with.
enum Answer {
    /// Run here.
    Local(Result<AdminResponse, ApiError>),
    /// Run by the leader, whose HTTP response is returned verbatim.
    Forwarded { leader: u64, audit: String, http: Vec<u8> },
}

/// Serves the admin requests followers forward to this node: each is run
/// as a local caller's (its credentials were checked on the follower) if
/// this node leads; otherwise answered `NotLeader` (nothing done).
pub async fn serve_forwarded(admin: Rc<Admin>, rx: flume::Receiver<IncomingAdmin>) {
    while let Ok(inc) = rx.recv_async().await {
        let a = admin.clone();
        glommio::spawn_local(async move { a.run_forwarded(inc).await }).detach();
    }
}

/// Accepts admin connections until `stop` fires.
pub async fn serve(admin: Rc<Admin>, listener: TcpListener, stop: flume::Receiver<()>) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            let _ = stop.recv_async().await;
            None
        })
        .await;
        match accepted {
            None => return,
            Some(Ok(stream)) => {
                let a = admin.clone();
                glommio::spawn_local(async move {
                    if let Err(e) = a.connection(stream).await {
                        tracing::debug!("admin connection: {e}");
                    }
                })
                .detach();
            }
            Some(Err(e)) => {
                tracing::warn!("admin accept: {e}");
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The admin API's listener, held by this daemon alone (`listen.rs`).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    crate::listen::exclusive(addr)
        .and_then(|l| crate::listen::on_executor(&l))
        .map_err(|e| std::io::Error::other(format!("cannot listen on {addr} (admin API): {e}")))
}

fn admin_err(e: AdminError) -> ApiError {
    match e {
        AdminError::Exists(m) => ApiError::already_exists(format!("{m} already exists")),
        AdminError::NotFound(m) => ApiError::not_found(format!("{m} not found")),
        AdminError::Invalid(m) => ApiError::invalid_argument(m),
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(e.to_string())
}

/// A share's allowed users ride in its stored client list as `user:NAME`
/// (ShareRecord is stored with bincode and gains no fields; no real client
/// pattern contains ':' before a name, and CIDR parsing refuses it).
pub const USER_PREFIX: &str = "user:";

/// The allowed users of a stored client list (empty: everyone).
pub fn allowed_users(clients: &[String]) -> Vec<String> {
    clients.iter().filter_map(|c| c.strip_prefix(USER_PREFIX)).map(str::to_string).collect()
}

impl Admin {
    /// `share` with the durability this node serves it with: a
    /// multi-voter cluster serves `protocol` as `always`
    /// (`docs/durability.md`: a follower acknowledges only what it synced).
    fn applied(&self, mut share: Share) -> Share {
        let multi = self.link.is_some();
        share.durability_applied =
            Some(if multi { duet_admin_api::types::Durability::Always } else { share.durability });
        share
    }
}

fn share_to_api(s: ShareRecord) -> Share {
    let mut protocols = Vec::new();
    if s.smb {
        protocols.push(Protocol::Smb);
    }
    if s.nfs {
        protocols.push(Protocol::Nfs);
    }
    Share {
        name: s.name,
        path: s.path,
        protocols,
        read_only: s.read_only,
        guest_ok: s.guest_ok,
        nfs: NfsExportRules {
            clients: s.nfs_clients.iter().filter(|c| !c.starts_with(USER_PREFIX)).cloned().collect(),
            root_squash: s.root_squash,
            append_extension: s.append_extension,
        },
        users: allowed_users(&s.nfs_clients),
        durability: match s.durability {
            duet_cluster::records::Durability::Always => duet_admin_api::types::Durability::Always,
            duet_cluster::records::Durability::Protocol => duet_admin_api::types::Durability::Protocol,
        },
        durability_applied: None,
        origin: None,
        exclusive: None,
        snapshot_schedule: None,
    }
}

fn exclusive_to_api(x: duet_cluster::machine::Exclusive) -> duet_admin_api::Exclusive {
    duet_admin_api::Exclusive { bytes: x.bytes, chunks: x.chunks, records: x.records, partial: x.partial }
}

pub fn share_from_api(s: &Share) -> ShareRecord {
    ShareRecord {
        name: s.name.clone(),
        path: s.path.clone(),
        smb: s.has_protocol(Protocol::Smb),
        nfs: s.has_protocol(Protocol::Nfs),
        read_only: s.read_only,
        guest_ok: s.guest_ok,
        nfs_clients: s
            .nfs
            .clients
            .iter()
            .cloned()
            .chain(s.users.iter().map(|u| format!("{USER_PREFIX}{u}")))
            .collect(),
        root_squash: s.nfs.root_squash,
        append_extension: s.nfs.append_extension,
        durability: match s.durability {
            duet_admin_api::types::Durability::Always => duet_cluster::records::Durability::Always,
            duet_admin_api::types::Durability::Protocol => duet_cluster::records::Durability::Protocol,
        },
    }
}

fn user_info(u: &UserRecord) -> UserInfo {
    UserInfo { name: u.name.clone(), uid: u.uid, gid: u.gid, enabled: u.enabled }
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl Admin {
    async fn connection(&self, stream: TcpStream) -> std::io::Result<()> {
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        let peer = stream.peer_addr().ok();
        let Some(cfg) = &self.tls else { return self.exchange(stream, peer, false).await };
        // A TLS ClientHello starts with the handshake record type 0x16 (RFC
        // 8446 section 5.1). Anything else is plain HTTP: served to loopback
        // clients (duetctl on the appliance, the container's health check),
        // refused to everyone else with a pointer to https.
        let mut first = [0u8; 1];
        if stream.peek(&mut first).await? == 0 {
            return Ok(());
        }
        if first[0] == 0x16 {
            let tls = futures_rustls::TlsAcceptor::from(cfg.clone()).accept(stream).await?;
            return self.exchange(tls, peer, true).await;
        }
        if peer.is_some_and(|p| p.ip().is_loopback()) {
            return self.exchange(stream, peer, false).await;
        }
        let e = ApiError::forbidden("this admin listener serves TLS to clients off loopback: use https://");
        let mut stream = stream;
        stream.write_all(&encode_response(&Err(e))).await?;
        let _ = stream.close().await;
        Ok(())
    }

    /// One request and its answer on a connection (plain or TLS).
    async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(&self, mut stream: S, peer: Option<SocketAddr>, secure: bool) -> std::io::Result<()> {
        let mut parser = RequestParser::new();
        let mut buf = vec![0u8; 16 * 1024];
        let req = loop {
            let n = stream.read(&mut buf).await?;
            let parsed = if n == 0 { parser.finish() } else { parser.feed(&buf[..n]) };
            match parsed {
                Parsed::Incomplete if n == 0 => return Ok(()),
                Parsed::Incomplete => continue,
                Parsed::Complete(r) => break Ok(r),
                Parsed::Error(e) => break Err(ApiError::from(e)),
            }
        };
        let reply = match req {
            Ok(req) => self.reply(&req, peer, secure).await,
            Err(e) => encode_response(&Err(e)),
        };
        stream.write_all(&reply).await?;
        stream.flush().await?;
        let _ = stream.close().await;
        Ok(())
    }

    /// The answer to one request: `/metrics` (no credentials), the web
    /// console (`/console/...`), or the API.
    async fn reply(&self, req: &duet_admin_api::HttpRequest, peer: Option<SocketAddr>, secure: bool) -> Vec<u8> {
        let path = req.path_only();
        if path == "/metrics" {
            // Unauthenticated: counts only (docs/metrics.md).
            return self.metrics_reply(req).await;
        }
        let from = peer.map(|a| a.to_string()).unwrap_or_default();
        // The throttle counts failures by address, whatever the port.
        let source = peer.map(|a| a.ip().to_string()).unwrap_or_default();
        if path == "/" || path == "/console" {
            return console::redirect();
        }
        if path.starts_with("/console/") {
            return self.console_reply(req, &from, &source, secure).await;
        }
        let creds = credentials(req);
        let session = if creds.is_none() { self.live_session(req).await } else { None };
        let who = match (&creds, &session) {
            (Some(Credentials::Bearer(_)), _) => "token".to_string(),
            (Some(Credentials::Basic { user, .. }), _) => user.clone(),
            (None, Some((_, s))) => s.user.clone(),
            (None, None) => "-".to_string(),
        };
        let auth = match (&session, creds.is_some()) {
            (Some((_, s)), false) => console::csrf_check(req, s),
            (None, false) if Console::has_cookie(req) => {
                Err(ApiError::unauthorized("the console session ended (signed out or expired): sign in again"))
            }
            _ => self.sign_in(creds.clone(), &who, &from, &source).await,
        };
        let answer = match auth {
            Ok(()) => match route(req) {
                Ok(r) => {
                    let what = format!("{r:?}");
                    let change = r.is_change();
                    let refused = match &r {
                        AdminRequest::AdminPasswd(c) => self
                            .may_change_password(c, &creds, session.as_ref().map(|x| &x.1), &who, &from, &source)
                            .await
                            .err(),
                        _ => None,
                    };
                    let out = if let Some(e) = refused {
                        Answer::Local(Err(e))
                    } else if self.forwards(&r) {
                        self.forward_change(r, req, &who).await
                    } else {
                        Answer::Local(self.handle(r).await)
                    };
                    if let Answer::Local(Err(e)) = &out {
                        tracing::info!("admin: {what}: {}", e.message);
                    }
                    if change {
                        let outcome = match &out {
                            Answer::Local(Ok(_)) => "ok".to_string(),
                            Answer::Local(Err(e)) => format!("{}: {}", e.code, e.message),
                            Answer::Forwarded { leader, audit, .. } => format!("forwarded to node {leader}: {audit}"),
                        };
                        self.audit.record(&who, &from, &what, &outcome);
                    }
                    out
                }
                Err(e) => Answer::Local(Err(e)),
            },
            Err(e) => Answer::Local(Err(e)),
        };
        match answer {
            Answer::Local(result) => encode_response(&result),
            Answer::Forwarded { http, .. } => http,
        }
    }

    /// The console session a request's cookie names, if it is live and
    /// its user's stored secret is still the one it signed in with (a
    /// changed admin password ends every session, on every node).
    async fn live_session(&self, req: &duet_admin_api::HttpRequest) -> Option<(String, duet_admin_api::session::Session)> {
        let (id, s) = self.console.session_of(req)?;
        let now = console::secret_tag(self.secret(&format!("user:{}", s.user)).await.as_deref());
        if now != s.secret_tag {
            self.console.end_session(&id);
            tracing::info!("console session of {} ended: its password was changed", s.user);
            return None;
        }
        Some((id, s))
    }

    /// Who may set an admin password: the local token any admin's;
    /// a signed-in admin only its own, and from the console only with the
    /// current password (a session cookie alone is not enough: failures
    /// count towards the sign-in throttle).
    async fn may_change_password(
        &self,
        c: &duet_admin_api::AdminPasswordChange,
        creds: &Option<Credentials>,
        session: Option<&duet_admin_api::session::Session>,
        who: &str,
        from: &str,
        source: &str,
    ) -> Result<(), ApiError> {
        match (creds, session) {
            (Some(Credentials::Bearer(_)), _) => Ok(()),
            (Some(Credentials::Basic { user, .. }), _) if *user == c.user => Ok(()),
            (None, Some(s)) if s.user == c.user => {
                let Some(current) = c.current.clone() else {
                    return Err(ApiError::invalid_argument("the current password is required to change it from the console"));
                };
                let creds = Some(Credentials::Basic { user: c.user.clone(), password: current });
                self.sign_in(creds, who, from, source).await.map_err(|e| {
                    if e.code == codes::TOO_MANY_ATTEMPTS {
                        e
                    } else {
                        ApiError::forbidden("the current password is wrong: nothing was changed")
                    }
                })
            }
            _ => Err(ApiError::forbidden(format!(
                "only {0} (or the local token) may change {0}'s password",
                c.user
            ))),
        }
    }

    /// Checks credentials under the sign-in throttle: a source locked out
    /// after repeated failures is refused before its credentials are
    /// looked at; failures are counted, audited and logged.
    async fn sign_in(&self, creds: Option<Credentials>, who: &str, from: &str, source: &str) -> Result<(), ApiError> {
        let given = creds.is_some();
        let checked = match self.console.check_throttle(source) {
            Ok(()) => self.authenticate(creds).await,
            Err(e) => Err(e),
        };
        match &checked {
            Ok(()) => self.console.sign_in_ok(source),
            Err(e) => {
                if given && e.code != duet_admin_api::codes::TOO_MANY_ATTEMPTS {
                    self.console.sign_in_failed(source);
                }
                self.auth_failures.set(self.auth_failures.get() + 1);
                tracing::warn!(peer = %from, "admin API: authentication failed: {}", e.message);
                self.audit.record(who, from, "admin logon", &format!("refused: {}", e.message));
            }
        }
        checked
    }

    /// `/console/...`: the page's files and the browser session.
    async fn console_reply(&self, req: &duet_admin_api::HttpRequest, from: &str, source: &str, secure: bool) -> Vec<u8> {
        let path = req.path_only();
        if path != "/console/session" {
            return match console::asset(path) {
                Some(_) if req.method != "GET" && req.method != "HEAD" => {
                    console::error_answer(&ApiError::method_not_allowed(format!("{} is not allowed on {path}", req.method)), &[])
                }
                Some((ct, body)) => console::answer(200, ct, if req.method == "HEAD" { b"" } else { body }, &[]),
                None => console::error_answer(&ApiError::not_found(format!("{path} is not part of the console")), &[]),
            };
        }
        match req.method.as_str() {
            "POST" => {
                let sign: console::SignIn = match serde_json::from_slice(&req.body) {
                    Ok(s) => s,
                    Err(e) => return console::error_answer(&ApiError::invalid_argument(format!("sign-in body: {e}")), &[]),
                };
                // A sign-in form posted from another site (login CSRF) is refused.
                if let (Some(origin), Some(host)) = (req.header("Origin"), req.header("Host")) {
                    let o = origin.split_once("://").map(|x| x.1).unwrap_or(origin);
                    if o != host {
                        return console::error_answer(&ApiError::forbidden(format!("sign-in from another origin ({origin}) is refused")), &[]);
                    }
                }
                let creds = Some(Credentials::Basic { user: sign.user.clone(), password: sign.password });
                match self.sign_in(creds, &sign.user, from, source).await {
                    Ok(()) => {
                        let tag = console::secret_tag(self.secret(&format!("user:{}", sign.user)).await.as_deref());
                        let (id, csrf) = self.console.new_session(&sign.user, tag);
                        self.audit.record(&sign.user, from, "console sign-in", "ok");
                        let body = serde_json::to_vec(&console::SessionInfo { user: &sign.user, csrf: &csrf }).unwrap_or_default();
                        let cookie = duet_admin_api::session::session_cookie(&id, secure);
                        console::answer(200, "application/json", &body, &[("Set-Cookie", &cookie)])
                    }
                    Err(e) => console::error_answer(&e, &[]),
                }
            }
            "GET" => match self.live_session(req).await {
                Some((_, s)) => {
                    let body = serde_json::to_vec(&console::SessionInfo { user: &s.user, csrf: &s.csrf }).unwrap_or_default();
                    console::answer(200, "application/json", &body, &[])
                }
                None => console::error_answer(&ApiError::unauthorized("not signed in"), &[]),
            },
            "DELETE" => {
                if let Some((id, s)) = self.console.session_of(req) {
                    if let Err(e) = console::csrf_check(req, &s) {
                        return console::error_answer(&e, &[]);
                    }
                    self.console.end_session(&id);
                    self.audit.record(&s.user, from, "console sign-out", "ok");
                }
                let cookie = duet_admin_api::session::cleared_cookie(secure);
                console::answer(204, "application/json", b"", &[("Set-Cookie", &cookie)])
            }
            m => console::error_answer(&ApiError::method_not_allowed(format!("{m} is not allowed on /console/session")), &[]),
        }
    }

    /// Whether `r` goes to the leader: a change to the cluster's metadata
    /// (or a leadership transfer) in a multi-node cluster. Fault injection
    /// is this node's own.
    fn forwards(&self, r: &AdminRequest) -> bool {
        self.link.is_some() && r.is_change() && !matches!(r, AdminRequest::Fault(_))
    }

    /// How long a forwarded `r` waits for the leader's answer: the forward
    /// timeout, but never less than the leader's own bound on it plus 2 s
    /// (so the leader's answer, even a timeout, arrives first).
    fn forward_wait(&self, link: &AdminLink, r: &AdminRequest) -> Duration {
        let own = match r {
            AdminRequest::TransferLeader(_) => TRANSFER_WAIT,
            AdminRequest::MemberAdd(_) | AdminRequest::MemberRemove(_) => duet_cluster_store::MEMBERSHIP_WAIT,
            _ => COMMIT_WAIT,
        };
        link.timeout.max(own + Duration::from_secs(2))
    }

    /// A change in a multi-node cluster: run here if this node leads,
    /// otherwise sent to the leader (waiting up to `leader_wait_ms` for
    /// one); the leader's reply is returned verbatim. Re-routed only when
    /// nothing was done (the node asked did not lead, or was busy); sent
    /// and unanswered is `outcome_unknown`, never sent again.
    async fn forward_change(&self, r: AdminRequest, req: &duet_admin_api::HttpRequest, who: &str) -> Answer {
        let Some(link) = self.link.clone() else { return Answer::Local(self.handle(r).await) };
        let started = Instant::now();
        let deadline = started + link.leader_wait;
        let wait = self.forward_wait(&link, &r);
        let msg =
            AdminRequestMsg { who: who.to_string(), method: req.method.clone(), target: req.path.clone(), body: req.body.clone() };
        let mut local = Some(r);
        loop {
            match link.view.leader() {
                Some(l) if l == self.node.node_id => {
                    let r = match local.take() {
                        Some(r) => r,
                        None => match route(req) {
                            Ok(r) => r,
                            Err(e) => return Answer::Local(Err(e)),
                        },
                    };
                    match self.handle(r).await {
                        // Not the leader any more, and nothing proposed.
                        Err(e) if e.code == codes::NOT_LEADER => {}
                        out => return Answer::Local(out),
                    }
                }
                // Not sent to a leader that is unreachable or silent: the
                // request waits for the next one instead.
                Some(l) if link.reachable(l) && !link.silent(l) => match link.call(l, &msg, wait).await {
                    AdminCall::Done { audit, http } => return Answer::Forwarded { leader: l, audit, http },
                    AdminCall::Again => {}
                    AdminCall::Unknown(m) => return Answer::Local(Err(ApiError::outcome_unknown(m))),
                },
                _ => {}
            }
            if Instant::now() >= deadline {
                link.counters.no_leader.fetch_add(1, Ordering::Relaxed);
                let seen = match link.view.leader() {
                    Some(l) => format!("node {l} is named leader but is not reachable (both connections up, heard within 1.5 s) from node {}", self.node.node_id),
                    None => "no node leads".to_string(),
                };
                return Answer::Local(Err(ApiError::no_leader(format!(
                    "the cluster has no leader reachable from node {} after {} ms ([cluster] leader_wait_ms; {seen}): \
                     nothing was changed; is a majority of the voters running and connected (duetctl cluster status)?",
                    self.node.node_id,
                    started.elapsed().as_millis()
                ))));
            }
            glommio::timer::sleep(crate::forward::ROUTE_POLL).await;
        }
    }

    /// Runs a request a follower forwarded (see [`serve_forwarded`]).
    async fn run_forwarded(&self, inc: IncomingAdmin) {
        let IncomingAdmin { from, request, reply } = inc;
        let Some(link) = self.link.clone() else { return reply(AdminOutcome::Busy) };
        if link.view.leader() != Some(self.node.node_id) {
            return reply(AdminOutcome::NotLeader { leader: link.view.leader() });
        }
        link.counters.served.fetch_add(1, Ordering::Relaxed);
        let req = duet_admin_api::HttpRequest {
            method: request.method,
            path: request.target,
            headers: Vec::new(),
            body: request.body,
        };
        let out = match route(&req) {
            // Only what a follower forwards is run (never fault injection,
            // never a read).
            Ok(r) if r.is_change() && !matches!(r, AdminRequest::Fault(_)) => {
                let what = format!("{r:?}");
                let out = self.handle(r).await;
                if let Err(e) = &out {
                    if e.code == codes::NOT_LEADER {
                        // Lost the leadership before proposing: nothing done.
                        return reply(AdminOutcome::NotLeader { leader: link.view.leader() });
                    }
                    tracing::info!("admin (forwarded by node {from}): {what}: {}", e.message);
                }
                let outcome = match &out {
                    Ok(_) => "ok".to_string(),
                    Err(e) => format!("{}: {}", e.code, e.message),
                };
                self.audit.record(&format!("{} via node {from}", request.who), &format!("node {from}"), &what, &outcome);
                (outcome, out)
            }
            Ok(_) => {
                let e = ApiError::invalid_argument("only changes are forwarded between nodes");
                (format!("{}: {}", e.code, e.message), Err(e))
            }
            Err(e) => (format!("{}: {}", e.code, e.message), Err(e)),
        };
        reply(AdminOutcome::Response { audit: out.0, http: encode_response(&out.1) });
    }

    /// The reply to `GET /metrics` (405 for other methods).
    async fn metrics_reply(&self, r: &duet_admin_api::HttpRequest) -> Vec<u8> {
        if r.method != "GET" && r.method != "HEAD" {
            let e = ApiError::method_not_allowed(format!("{} is not allowed on /metrics (allowed: GET)", r.method));
            return encode_response(&Err(e));
        }
        let stats = self.stats().await;
        let raft = match self.query(Query::RaftStatus).await {
            Ok(QueryAnswer::Raft(r)) => Some(r),
            _ => None,
        };
        let (term, commit, applied) = raft.as_ref().map_or((0, 0, 0), |r| (r.term, r.commit_index, r.applied_index));
        let gauges = crate::metrics::Gauges {
            raft_leader_id: raft.as_ref().map_or(0, |r| r.leader_id),
            raft_is_leader: raft.as_ref().is_some_and(|r| r.leader),
            cluster: self.cluster_metrics(raft.as_ref()),
            capacity: Some(self.capacity()),
            metadata_failed: self.engine.store.failed(),
            raft_term: term,
            raft_commit_index: commit,
            raft_applied_index: applied,
            uptime_s: self.node.started.elapsed().as_secs(),
            executors: self.node.executors,
            threads: crate::metrics::thread_cpu(),
            log_segments_reused: self.engine.data.counters.log_segments_reused.load(std::sync::atomic::Ordering::Relaxed),
        };
        let body = crate::metrics::render(&stats, &gauges, &self.engine.stats.latency);
        let body = if r.method == "HEAD" { Vec::new() } else { body.into_bytes() };
        duet_admin_api::encode_http_response(200, &[("Content-Type", crate::metrics::CONTENT_TYPE)], &body)
    }

    /// A multi-node cluster's figures for `/metrics` (None: a single node).
    fn cluster_metrics(&self, raft: Option<&duet_cluster_store::RaftStatus>) -> Option<crate::metrics::ClusterMetrics> {
        let health = self.node.cluster.health.as_ref()?;
        let now = Instant::now();
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        // raft's voters now (membership changes included), else the
        // configured ones.
        let ids: Vec<u64> = match raft {
            Some(r) if !r.voters.is_empty() => r.voters.clone(),
            _ => self.node.cluster.voters.iter().map(|v| v.0).collect(),
        };
        let peers = ids
            .iter()
            .filter(|id| **id != self.node.node_id)
            .map(|id| {
                let state = health.peer(*id);
                crate::metrics::PeerMetrics {
                    id: *id,
                    healthy: state.healthy(now),
                    state,
                    matched: raft.and_then(|r| r.progress.iter().find(|p| p.0 == *id).map(|p| p.1)),
                    queued_bytes: self.node.cluster.queues.as_ref().map_or(0, |q| q.queued_bytes(*id)),
                }
            })
            .collect();
        let forwarded_batches = self.forwarder.as_ref().map_or_else(Vec::new, |f| {
            let c = &f.counters;
            vec![
                ("sent", ld(&c.sent)),
                ("answered", ld(&c.answered)),
                ("rerouted", ld(&c.not_leader)),
                ("unavailable", ld(&c.unavailable)),
                ("unknown", ld(&c.unknown)),
                ("resent", ld(&c.resent)),
                ("gave_up", ld(&c.gave_up)),
                ("served", ld(&c.served)),
                ("refused", ld(&c.refused)),
            ]
        });
        let forwarded_admin = self.link.as_ref().map_or_else(Vec::new, |l| {
            let c = &l.counters;
            vec![
                ("sent", ld(&c.sent)),
                ("answered", ld(&c.answered)),
                ("rerouted", ld(&c.rerouted)),
                ("unknown", ld(&c.unknown)),
                ("no_leader", ld(&c.no_leader)),
                ("served", ld(&c.served)),
                ("refused", ld(&c.refused)),
            ]
        });
        let replica = self.replica.as_ref().map_or_else(Vec::new, |c| {
            vec![
                ("replica_pushes", "Write-cache extents pushed to peers", ld(&c.pushes_sent)),
                ("replica_push_bytes", "Bytes of write-cache extents pushed to peers", ld(&c.push_bytes_sent)),
                ("replica_pushes_skipped", "Pushes not sent: the bytes queued to or unacknowledged by the peer at their bound ([cluster] replica_push_mib), or its queue full", ld(&c.pushes_skipped)),
                ("replica_acks", "Durability acknowledgements received from peers", ld(&c.acks_received)),
                ("replica_majority_timeouts", "Batches failed: no majority held their data within 5 s", ld(&c.majority_timeouts)),
                ("replica_pushes_logged", "Extents pushed by peers and logged durably here", ld(&c.pushes_logged)),
                ("replica_fetches", "Extents this node asked peers for", ld(&c.fetches_sent)),
                ("replica_fetches_answered", "Fetches of peers this node answered", ld(&c.fetches_answered)),
                ("replica_fetches_failed", "Fetches no peer answered with the bytes", ld(&c.fetches_failed)),
                ("replica_inbound_dropped", "Inbound data frames dropped (bounds full, or undecodable)", ld(&c.inbound_dropped)),
            ]
        });
        let snapshots = self.node.cluster.snapshots.as_ref().map_or_else(Vec::new, |s| {
            let c = &s.counters;
            vec![("served", ld(&c.served)), ("received", ld(&c.received)), ("failed", ld(&c.failed)), ("withheld", ld(&c.withheld))]
        });
        Some(crate::metrics::ClusterMetrics {
            snapshots,
            majority_wait: self.replica.as_ref().map(|c| c.majority_wait.clone()),
            last_index: raft.map_or(0, |r| r.last_index),
            peers,
            forwarded_batches,
            forwarded_admin,
            replica,
        })
    }

    /// The capacity the protocols report now.
    fn capacity(&self) -> duet_admin_api::CapacityInfo {
        let f = self.space.get();
        duet_admin_api::CapacityInfo {
            total_bytes: f.total,
            free_bytes: f.free,
            avail_bytes: f.avail,
            reserve_bytes: self.reserve,
        }
    }

    async fn secret(&self, name: &str) -> Option<Vec<u8>> {
        match self.engine.store.query(Query::AdminSecret(name.into())).await {
            Ok(QueryAnswer::Secret(s)) => s,
            _ => None,
        }
    }

    async fn authenticate(&self, c: Option<Credentials>) -> Result<(), ApiError> {
        // (secret given, stored hash, the admin secret's name when it lives
        // in the metadata and may need its hash upgraded)
        let (given, stored, name) = match &c {
            Some(Credentials::Bearer(token)) => match &self.node.local_token {
                Some(local) => (token.clone(), Some(local.clone()), None),
                None => (token.clone(), self.secret("token").await, Some("token".to_string())),
            },
            Some(Credentials::Basic { user, password }) => {
                let name = format!("user:{user}");
                (password.clone(), self.secret(&name).await, Some(name))
            }
            None => {
                return Err(ApiError::unauthorized(
                    "credentials required: a bearer token (admin.token in the data directory) or the admin user",
                ))
            }
        };
        let Some(stored) = stored else { return Err(ApiError::unauthorized("wrong token, user or password")) };
        // Argon2id takes tens of milliseconds: not on this executor, which
        // also runs the data path.
        let upgrade = secrets::needs_upgrade(&stored);
        let g = given.clone();
        let ok = glommio::executor().spawn_blocking(move || secrets::verify_secret(&g, &stored)).await;
        if !ok {
            return Err(ApiError::unauthorized("wrong token, user or password"));
        }
        if let (true, Some(name)) = (upgrade, name) {
            // A hash of the old PBKDF2 form: replaced by Argon2id now that
            // the secret is known. Best effort (a follower cannot commit).
            let hash = glommio::executor().spawn_blocking(move || secrets::hash_secret(&given)).await;
            let cmd = Command::Init { now_ns: now_ns(), admin_secrets: vec![(name.clone(), hash)], shares: vec![] };
            match self.command(cmd).await {
                Ok(()) => tracing::info!("admin secret {name}: hash upgraded from PBKDF2 to Argon2id"),
                Err(e) => tracing::debug!("admin secret {name}: hash upgrade deferred: {}", e.message),
            }
        }
        Ok(())
    }

    pub(crate) async fn command(&self, cmd: Command) -> Result<(), ApiError> {
        let store = &self.engine.store;
        let out = if self.node.cluster.health.is_some() {
            // Several voters: a leader cut off from its majority would keep
            // the change waiting (until it steps down or the partition
            // heals); the caller gets an answer within COMMIT_WAIT.
            let timed = futures_lite::future::or(async { Some(store.command(cmd).await) }, async {
                glommio::timer::sleep(COMMIT_WAIT).await;
                None
            })
            .await;
            timed.ok_or_else(|| {
                ApiError::internal(format!(
                    "the change was not committed within {} s: is a majority of the cluster's voters running \
                     and connected (duetctl cluster status)? It may still be applied later",
                    COMMIT_WAIT.as_secs()
                ))
            })?
        } else {
            store.command(cmd).await
        };
        let out = out.map_err(|e| self.store_err(e))?;
        match out.applied.admin {
            Some(Ok(())) | None => Ok(()),
            Some(Err(e)) => Err(admin_err(e)),
        }
    }

    /// A store error as the API's: a change made on a follower names the
    /// leader and its cluster address.
    fn store_err(&self, e: StoreError) -> ApiError {
        match e {
            StoreError::NotLeader { leader: Some(l), .. } => {
                let addr = self.node.cluster.voters.iter().find(|v| v.0 == l).map(|v| v.1.clone()).unwrap_or_default();
                ApiError::not_leader(format!("{e}; node {l}'s cluster address is {addr}"))
            }
            StoreError::NotLeader { .. } => ApiError::not_leader(e.to_string()),
            StoreError::NotAVoter { .. } => ApiError::invalid_argument(e.to_string()),
            StoreError::Membership { refusal, message } => match refusal {
                Refusal::Invalid => ApiError::invalid_argument(message),
                Refusal::Exists => ApiError::already_exists(message),
                Refusal::Unknown => ApiError::not_found(message),
                Refusal::InProgress => ApiError::already_exists(message),
            },
            StoreError::MembershipUnknown(m) => ApiError::outcome_unknown(m),
            e => internal(e),
        }
    }

    /// The snapshots of a share, oldest first, as the API shows them: each
    /// with what deleting it would free, whether the schedule took it, and
    /// the clone standing on it.
    async fn snapshots(&self, share: &str) -> Result<Vec<duet_admin_api::Snapshot>, ApiError> {
        let QueryAnswer::Clones(clones) = self.query(Query::Clones).await? else { return Err(internal("clones")) };
        match self.query(Query::SnapshotSpace(share.to_string())).await? {
            QueryAnswer::SnapshotSpace(Some(list)) => Ok(list
                .into_iter()
                .map(|(s, x)| duet_admin_api::Snapshot {
                    gmt: duet_admin_api::gmt_token(s.created_ns),
                    scheduled: duet_cluster::schedule::parse(&s.name).is_some(),
                    clone: clones.iter().find(|c| c.layer == s.layer).map(|c| c.name.clone()),
                    name: s.name,
                    created_ns: s.created_ns,
                    exclusive: exclusive_to_api(x),
                })
                .collect()),
            QueryAnswer::SnapshotSpace(None) => Err(ApiError::not_found(format!("share {share} not found"))),
            _ => Err(internal("snapshots")),
        }
    }

    /// Shares as the API shows them: each clone with its origin and what
    /// removing it would free, each share's snapshot schedule.
    async fn shares_with_origins(&self, shares: Vec<ShareRecord>) -> Result<Vec<Share>, ApiError> {
        let QueryAnswer::CloneSpace(clones) = self.query(Query::CloneSpace).await? else { return Err(internal("clones")) };
        let QueryAnswer::Schedules(schedules) = self.query(Query::Schedules).await? else {
            return Err(internal("schedules"));
        };
        Ok(shares
            .into_iter()
            .map(|s| {
                let clone = clones.iter().find(|(c, _)| c.name == s.name);
                let origin = clone.map(|(c, _)| format!("{}@{}", c.source, c.snapshot));
                let exclusive = clone.map(|(_, x)| exclusive_to_api(*x));
                let snapshot_schedule = schedules
                    .iter()
                    .find(|(n, _)| *n == s.name)
                    .map(|(_, r)| duet_admin_api::SnapshotSchedule { every_s: r.every_s, keep: r.keep });
                Share { origin, exclusive, snapshot_schedule, ..share_to_api(s) }
            })
            .collect())
    }

    /// One share as the API shows it.
    async fn share_api(&self, name: &str) -> Result<Share, ApiError> {
        match self.query(Query::Share(name.to_string())).await? {
            QueryAnswer::Share(Some(s)) => Ok(self.applied(self.shares_with_origins(vec![s]).await?.remove(0))),
            _ => Err(ApiError::not_found(format!("share {name} not found"))),
        }
    }

    async fn query(&self, q: Query) -> Result<QueryAnswer, ApiError> {
        self.engine.store.query(q).await.map_err(internal)
    }

    pub async fn handle(&self, r: AdminRequest) -> Result<AdminResponse, ApiError> {
        match r {
            AdminRequest::Status => {
                let QueryAnswer::Raft(raft) = self.query(Query::RaftStatus).await? else { return Err(internal("raft")) };
                let QueryAnswer::Shares(shares) = self.query(Query::Shares).await? else { return Err(internal("shares")) };
                let QueryAnswer::Users(users) = self.query(Query::Users).await? else { return Err(internal("users")) };
                let QueryAnswer::Count(files) = self.query(Query::NodeCount).await? else { return Err(internal("nodes")) };
                Ok(AdminResponse::Status(StatusInfo {
                    version: env!("CARGO_PKG_VERSION").into(),
                    node_id: self.node.node_id,
                    uptime_s: self.node.started.elapsed().as_secs(),
                    executors: self.node.executors,
                    data_dir: self.node.data_dir.clone(),
                    listeners: self.node.listeners.lock().map(|l| l.clone()).unwrap_or_default(),
                    raft: RaftInfo {
                        term: raft.term,
                        commit_index: raft.commit_index,
                        applied_index: raft.applied_index,
                        voters: raft.voters,
                    },
                    shares: shares.len() as u32,
                    users: users.len() as u32,
                    files,
                    metadata_failed: self.engine.store.failed(),
                    capacity: Some(self.capacity()),
                }))
            }
            AdminRequest::Cluster => self.cluster().await.map(AdminResponse::Cluster),
            AdminRequest::TransferLeader(t) => self.transfer_leader(t.to).await.map(AdminResponse::Cluster),
            AdminRequest::MemberAdd(m) => self.change_membership(MemberChange::Add(m.id, m.addr)).await,
            AdminRequest::MemberRemove(id) => self.change_membership(MemberChange::Remove(id)).await,
            AdminRequest::Fault(spec) => {
                if !self.fault_injection {
                    return Err(ApiError::forbidden(
                        "fault injection is off: it needs [testing] fault_injection = true in duetd's configuration",
                    ));
                }
                if spec.point == "meta-sync" {
                    self.engine.store.inject_sync_failures(spec.count);
                } else if spec.point == "meta-read" {
                    self.engine.store.inject_read_failures(spec.count);
                } else {
                    let p = crate::datapath::FaultPoint::parse(&spec.point).ok_or_else(|| internal("fault point"))?;
                    self.engine.data.inject_fault(p, spec.count);
                }
                tracing::warn!(point = %spec.point, count = spec.count, "fault injection armed (testing)");
                Ok(AdminResponse::NoContent)
            }
            AdminRequest::ShareList => {
                let QueryAnswer::Shares(s) = self.query(Query::Shares).await? else { return Err(internal("shares")) };
                Ok(AdminResponse::Shares(self.shares_with_origins(s).await?.into_iter().map(|s| self.applied(s)).collect()))
            }
            AdminRequest::ShareShow(name) => match self.query(Query::Share(name.clone())).await? {
                QueryAnswer::Share(Some(s)) => {
                    Ok(AdminResponse::Share(self.applied(self.shares_with_origins(vec![s]).await?.remove(0))))
                }
                _ => Err(ApiError::not_found(format!("share {name} not found"))),
            },
            AdminRequest::ShareClone { source, clone } => {
                clone.validate()?;
                let record = share_from_api(&clone.share);
                let snapshot = clone.snapshot.clone();
                self.command(Command::Clone { source, snapshot, share: record, now_ns: now_ns() }).await?;
                let name = clone.share.name.clone();
                match self.query(Query::Share(name.clone())).await? {
                    QueryAnswer::Share(Some(s)) => {
                        Ok(AdminResponse::ShareCreated(self.applied(self.shares_with_origins(vec![s]).await?.remove(0))))
                    }
                    _ => Err(internal("the clone vanished after it was made")),
                }
            }
            AdminRequest::ShareAdd(share) => {
                share.validate()?;
                self.command(Command::PutShare { share: share_from_api(&share), replace: false, now_ns: now_ns() }).await?;
                Ok(AdminResponse::ShareCreated(self.applied(share)))
            }
            AdminRequest::ShareModify { name, changes } => {
                let QueryAnswer::Share(Some(current)) = self.query(Query::Share(name.clone())).await? else {
                    return Err(ApiError::not_found(format!("share {name} not found")));
                };
                let share = changes.apply(&share_to_api(current));
                share.validate()?;
                // In place: the protocol executors pick the new options up
                // at their next catalog refresh; no connection is closed.
                self.command(Command::PutShare { share: share_from_api(&share), replace: true, now_ns: now_ns() }).await?;
                Ok(AdminResponse::Share(self.applied(share)))
            }
            AdminRequest::UserModify { name, changes } => {
                let QueryAnswer::User(Some(mut u)) = self.query(Query::User(name.clone())).await? else {
                    return Err(ApiError::not_found(format!("user {name} not found")));
                };
                if let Some(uid) = changes.uid {
                    u.uid = uid;
                }
                if let Some(gid) = changes.gid {
                    u.gid = gid;
                }
                if let Some(enabled) = changes.enabled {
                    u.enabled = enabled;
                }
                self.command(Command::PutUser { user: u.clone(), replace: true }).await?;
                Ok(AdminResponse::User(user_info(&u)))
            }
            AdminRequest::ShareRemove(name) => {
                self.command(Command::RemoveShare { name }).await?;
                Ok(AdminResponse::NoContent)
            }
            AdminRequest::SnapshotList(share) => Ok(AdminResponse::Snapshots(self.snapshots(&share).await?)),
            AdminRequest::SnapshotSchedule { share, schedule } => {
                if let Some(s) = &schedule {
                    s.validate()?;
                    if s.every_s < self.schedule_min_s {
                        return Err(ApiError::invalid_argument(format!(
                            "invalid snapshot interval {} s: at least {} ({} s)",
                            s.every_s,
                            duet_admin_api::format_interval(self.schedule_min_s),
                            self.schedule_min_s
                        )));
                    }
                }
                let schedule =
                    schedule.map(|s| duet_cluster::records::ScheduleRecord { every_s: s.every_s, keep: s.keep });
                self.command(Command::SnapshotSchedule { share: share.clone(), schedule }).await?;
                Ok(AdminResponse::Share(self.share_api(&share).await?))
            }
            AdminRequest::SnapshotCreate { share, snapshot } => {
                let now = now_ns();
                let name = snapshot.name.unwrap_or_else(|| duet_admin_api::gmt_name(now));
                duet_admin_api::validate_snapshot_name(&name)?;
                self.command(Command::Snapshot { share: share.clone(), name: name.clone(), now_ns: now }).await?;
                let made = self.snapshots(&share).await?.into_iter().find(|s| s.name == name);
                made.map(AdminResponse::SnapshotCreated).ok_or_else(|| internal("the snapshot vanished after it was taken"))
            }
            AdminRequest::SnapshotDelete { share, name } => {
                self.command(Command::DropSnapshot { share, name, now_ns: now_ns() }).await?;
                Ok(AdminResponse::NoContent)
            }
            AdminRequest::UserList => {
                let QueryAnswer::Users(u) = self.query(Query::Users).await? else { return Err(internal("users")) };
                Ok(AdminResponse::Users(u.iter().map(user_info).collect()))
            }
            AdminRequest::UserAdd(NewUser { name, password, uid, gid }) => {
                let user = UserRecord {
                    name: name.clone(),
                    uid: uid.unwrap_or(u32::MAX),
                    gid: gid.or(uid).unwrap_or(u32::MAX),
                    nt_hash: secrets::nt_hash(&password),
                    enabled: true,
                };
                self.command(Command::PutUser { user, replace: false }).await?;
                match self.query(Query::User(name.clone())).await? {
                    QueryAnswer::User(Some(u)) => Ok(AdminResponse::UserCreated(user_info(&u))),
                    _ => Err(internal("user vanished after creation")),
                }
            }
            AdminRequest::UserPasswd { name, password } => {
                let QueryAnswer::User(Some(mut u)) = self.query(Query::User(name.clone())).await? else {
                    return Err(ApiError::not_found(format!("user {name} not found")));
                };
                u.nt_hash = secrets::nt_hash(&password);
                self.command(Command::PutUser { user: u, replace: true }).await?;
                Ok(AdminResponse::NoContent)
            }
            AdminRequest::AdminPasswd(c) => {
                let name = format!("user:{}", c.user);
                if self.secret(&name).await.is_none() {
                    return Err(ApiError::not_found(format!("there is no admin user {}", c.user)));
                }
                let password = c.password;
                let hash = glommio::executor().spawn_blocking(move || secrets::hash_secret(&password)).await;
                self.command(Command::Init { now_ns: now_ns(), admin_secrets: vec![(name, hash)], shares: vec![] }).await?;
                tracing::info!("the password of admin user {} was changed", c.user);
                Ok(AdminResponse::NoContent)
            }
            AdminRequest::UserRemove(name) => {
                self.command(Command::RemoveUser { name }).await?;
                Ok(AdminResponse::NoContent)
            }
            AdminRequest::Stats => Ok(AdminResponse::Stats(self.stats().await)),
            AdminRequest::Audit => self.audit.tail().map(AdminResponse::Audit).map_err(internal),
            AdminRequest::Fsck => {
                // Let the destager settle first so that queued data does not
                // hide a missing chunk.
                let chunk_files = self.engine.data.list_chunks();
                let QueryAnswer::Fsck(r) = self.query(Query::Fsck { chunk_files }).await? else {
                    return Err(internal("fsck"));
                };
                Ok(AdminResponse::Fsck(FsckReport { nodes: r.nodes, edges: r.edges, chunks: r.chunks, problems: r.problems }))
            }
        }
    }

    /// `POST /v1/cluster/transfer-leader`: asks raft to move leadership
    /// to `to`, then waits (at most [`TRANSFER_WAIT`]) until this node
    /// sees `to` lead; answers the group's status then.
    async fn transfer_leader(&self, to: u64) -> Result<ClusterStatus, ApiError> {
        self.engine.store.transfer_leader(to).await.map_err(|e| self.store_err(e))?;
        let start = std::time::Instant::now();
        loop {
            let status = self.cluster().await?;
            if status.leader == Some(to) {
                return Ok(status);
            }
            if start.elapsed() >= TRANSFER_WAIT {
                return Err(ApiError::internal(format!(
                    "leadership did not move to node {to} within {} s (leader now: {}, term {}): is node {to} \
                     running, connected and caught up (duetctl cluster status)?",
                    TRANSFER_WAIT.as_secs(),
                    status.leader.map_or("none".to_string(), |l| format!("node {l}")),
                    status.term
                )));
            }
            glommio::timer::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `POST /v1/cluster/members`, `DELETE /v1/cluster/members/ID`: a
    /// membership change (ConfChangeV2 entered and left), answered with the
    /// group's status once applied here.
    async fn change_membership(&self, change: MemberChange) -> Result<AdminResponse, ApiError> {
        self.engine.store.change_membership(change).await.map_err(|e| self.store_err(e))?;
        self.cluster().await.map(AdminResponse::Cluster)
    }

    /// `GET /v1/cluster`: the raft group from this node's raft state.
    /// This node: its applied index and its store's health. Another node,
    /// as this node knows it: `applied` is the applied index it reported
    /// in its last status frame (every 500 ms on the peer link; before the
    /// first one, the leader's matched index of it, else 0), and so are
    /// its destage progress and queue (unknown before); `healthy`:
    /// its connection to this node is open and an authenticated frame from
    /// it arrived within [`crate::peers::HEARD_WITHIN`].
    async fn cluster(&self) -> Result<ClusterStatus, ApiError> {
        let QueryAnswer::Raft(raft) = self.query(Query::RaftStatus).await? else { return Err(internal("raft")) };
        let me = ClusterNode {
            id: raft.node_id,
            addr: self.node.cluster_addr.clone(),
            applied: raft.applied_index,
            healthy: !self.engine.store.failed(),
            destaged_upto: Some(raft.destaged_upto),
            destage_queue: Some(raft.destage_queue),
        };
        let mut nodes = vec![me];
        // raft's voters: the configured ones, and those membership changes
        // added (their addresses recorded with the change).
        let recorded = match self.query(Query::Members).await? {
            QueryAnswer::Members(m) => m,
            _ => Vec::new(),
        };
        for id in raft.voters.iter().filter(|v| **v != raft.node_id) {
            let addr = self
                .node
                .cluster
                .voters
                .iter()
                .find(|v| v.0 == *id)
                .map(|v| &v.1)
                .or_else(|| recorded.iter().find(|m| m.0 == *id).map(|m| &m.1))
                .cloned()
                .unwrap_or_default();
            let addr = &addr;
            let state = self.node.cluster.health.as_ref().map(|h| h.peer(*id)).unwrap_or_default();
            let matched = raft.progress.iter().find(|p| p.0 == *id).map(|p| p.1).unwrap_or(0);
            let applied = state.status.map(|s| s.applied).unwrap_or(matched);
            let healthy = state.healthy(Instant::now());
            let destage = state.status.and_then(|s| s.destage);
            nodes.push(ClusterNode {
                id: *id,
                addr: addr.clone(),
                applied,
                healthy,
                destaged_upto: destage.map(|d| d.upto),
                destage_queue: destage.map(|d| d.queue),
            });
        }
        nodes.sort_by_key(|n| n.id);
        Ok(ClusterStatus {
            leader: (raft.leader_id != 0).then_some(raft.leader_id),
            term: raft.term,
            voters: raft.voters,
            nodes,
            receiving_snapshot: self.node.cluster.snapshots.as_ref().and_then(|s| s.progress()),
            public_addresses: {
                let table = match self.query(Query::PublicAddresses).await? {
                    QueryAnswer::PublicAddresses(t) => t,
                    _ => Vec::new(),
                };
                self.node
                    .cluster
                    .public_addresses
                    .iter()
                    .map(|a| PublicAddress {
                        address: a.clone(),
                        node: table.iter().find(|(x, _)| x == a).map(|(_, n)| *n),
                    })
                    .collect()
            },
        })
    }

    async fn stats(&self) -> Stats {
        let destage_queue = match self.query(Query::QueuedRecords).await {
            Ok(QueryAnswer::Count(n)) => n,
            _ => 0,
        };
        let c = self.engine.store.counters();
        let d = &self.engine.data.counters;
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let by_request: Vec<RequestStats> = self
            .engine
            .stats
            .snapshot()
            .into_iter()
            .map(|(tag, n)| RequestStats {
                protocol: tag.protocol,
                request: tag.request,
                count: n.count,
                batches: n.count,
                proposals: n.cost.proposals,
                fsyncs: n.cost.fsyncs,
                rocksdb_reads: n.cost.rocksdb_reads,
                rocksdb_writes: n.cost.rocksdb_writes,
                chunk_reads: n.cost.chunk_reads,
                chunk_writes: n.cost.chunk_writes,
                bytes_read: n.bytes_read,
                bytes_written: n.bytes_written,
            })
            .collect();
        let conn = &self.conns.counters;
        let (fm, fl, fc) = (ld(&c.fsyncs), ld(&d.log_fsyncs), ld(&d.chunk_fsyncs));
        Stats {
            batches: ld(&c.batches),
            proposals: ld(&c.proposals),
            fsyncs: fm + fl + fc,
            rocksdb_reads: ld(&c.rocksdb_reads),
            rocksdb_writes: ld(&c.rocksdb_writes),
            chunk_reads: ld(&d.chunk_reads),
            chunk_writes: ld(&d.chunk_writes),
            log_writes: ld(&d.log_writes),
            fsyncs_metadata: fm,
            fsyncs_log: fl,
            fsyncs_chunk: fc,
            bytes_read: by_request.iter().map(|r| r.bytes_read).sum(),
            bytes_written: by_request.iter().map(|r| r.bytes_written).sum(),
            by_request,
            destaged_records: ld(&d.destaged_records),
            destage_backlog: self.engine.data.live_records() as u64,
            destage_queue,
            lazy_groups: ld(&c.lazy_groups),
            wal_syncs: ld(&c.wal_syncs),
            raft_overloaded: ld(&c.overloaded),
            raft_not_held: ld(&c.not_held),
            metadata_reads_here: ld(&c.reads_here),
            metadata_reads_from_disk: ld(&c.reads_from_disk),
            read_cache_hits: ld(&d.read_cache_hits),
            read_cache_misses: ld(&d.read_cache_misses),
            read_cache_bytes: ld(&d.read_cache_bytes),
            read_cache_direct: ld(&d.read_cache_direct),
            log_reads_memory: ld(&d.log_reads_memory),
            log_reads_device: ld(&d.log_reads_device),
            log_memory_bytes: ld(&d.log_memory_bytes),
            destage_deferrals: ld(&d.destage_deferrals),
            errors: self
                .engine
                .stats
                .errors()
                .into_iter()
                .map(|(protocol, kind, count)| ErrorCount { protocol, kind: kind.to_string(), count })
                .collect(),
            connections: ConnectionStats {
                open: self.conns.open() as u64,
                accepted_smb: ld(&conn.accepted_smb),
                accepted_nfs: ld(&conn.accepted_nfs),
                refused_connections_limit: ld(&conn.refused_total_limit),
                refused_per_client_limit: ld(&conn.refused_per_client_limit),
                oversize_closed: ld(&conn.oversize_closed),
                smb_logon_failures: ld(&conn.smb_logon_failures),
                admin_auth_failures: self.auth_failures.get(),
                by_executor: conn
                    .by_executor
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .enumerate()
                    .map(|(i, (smb, nfs))| duet_admin_api::ExecutorConnections { executor: i as u32, accepted_smb: *smb, accepted_nfs: *nfs })
                    .collect(),
            },
        }
    }
}
