//! Endpoints: HTTP request -> [`AdminRequest`] (server), [`AdminResponse`] ->
//! HTTP bytes (server), and the reverse directions for clients.
//!
//! | method | path                         | request        | success          |
//! |--------|------------------------------|----------------|------------------|
//! | GET    | /v1/status                   | Status         | 200 StatusInfo   |
//! | GET    | /v1/cluster                  | Cluster        | 200 ClusterStatus|
//! | POST   | /v1/cluster/transfer-leader  | TransferLeader | 200 ClusterStatus|
//! | POST   | /v1/cluster/members          | MemberAdd      | 200 ClusterStatus|
//! | DELETE | /v1/cluster/members/{id}     | MemberRemove   | 200 ClusterStatus|
//! | GET    | /v1/shares                   | ShareList      | 200 [Share]      |
//! | POST   | /v1/shares                   | ShareAdd       | 201 Share        |
//! | GET    | /v1/shares/{name}            | ShareShow      | 200 Share        |
//! | PATCH  | /v1/shares/{name}            | ShareModify    | 200 Share        |
//! | DELETE | /v1/shares/{name}            | ShareRemove    | 204              |
//! | GET    | /v1/shares/{name}/snapshots  | SnapshotList   | 200 [Snapshot]   |
//! | POST   | /v1/shares/{name}/snapshots  | SnapshotCreate | 201 Snapshot     |
//! | DELETE | /v1/shares/{name}/snapshots/{snapshot} | SnapshotDelete | 204    |
//! | POST   | /v1/shares/{name}/clone      | ShareClone     | 201 Share        |
//! | PUT    | /v1/shares/{name}/snapshot-schedule | SnapshotSchedule | 200 Share |
//! | DELETE | /v1/shares/{name}/snapshot-schedule | SnapshotSchedule (none) | 200 Share |
//! | GET    | /v1/users                    | UserList       | 200 [UserInfo]   |
//! | POST   | /v1/users                    | UserAdd        | 201 UserInfo     |
//! | PUT    | /v1/users/{name}/password    | UserPasswd     | 204              |
//! | PUT    | /v1/admin/password           | AdminPasswd    | 204              |
//! | PATCH  | /v1/users/{name}             | UserModify     | 200 UserInfo     |
//! | DELETE | /v1/users/{name}             | UserRemove     | 204              |
//! | GET    | /v1/stats                    | Stats          | 200 Stats        |
//! | POST   | /v1/fsck                     | Fsck           | 200 FsckReport   |
//! | POST   | /v1/faults                   | Fault          | 204              |
//! | GET    | /v1/audit                    | Audit          | 200 [AuditEntry] |
//!
//!
//! `GET /metrics` (Prometheus/OpenMetrics text) is served by duetd outside
//! this router, without authentication.
//!
//! Errors are [`ApiError`] bodies with the status of [`ApiError::http_status`].
//! [`route`] does not authenticate: the server calls [`credentials`] and
//! checks them before (or regardless of) routing.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::base64;
use crate::http::{encode_http_response, HttpRequest, HttpResponse};
use crate::types::*;

/// A validated admin request.
#[derive(Clone, PartialEq, Eq)]
pub enum AdminRequest {
    Status,
    /// The raft group: leader, term, voters, nodes.
    Cluster,
    /// Move raft leadership to voter `to` (answered once it has moved).
    TransferLeader(LeaderTransfer),
    /// Add a voter (ConfChangeV2; answered once applied).
    MemberAdd(MemberAdd),
    /// Remove a voter.
    MemberRemove(u64),
    ShareList,
    ShareShow(String),
    ShareAdd(Share),
    ShareRemove(String),
    ShareModify { name: String, changes: ShareChanges },
    /// The snapshots of a share, oldest first.
    SnapshotList(String),
    /// Take a snapshot of a share.
    SnapshotCreate { share: String, snapshot: NewSnapshot },
    /// Delete a snapshot of a share.
    SnapshotDelete { share: String, name: String },
    /// Make a writable clone of a share (or of one of its snapshots).
    ShareClone { source: String, clone: NewClone },
    /// Set (or, `None`, remove) a share's snapshot schedule.
    SnapshotSchedule { share: String, schedule: Option<SnapshotSchedule> },
    UserList,
    UserAdd(NewUser),
    UserPasswd { name: String, password: String },
    /// A new password for an admin user of this API.
    AdminPasswd(AdminPasswordChange),
    UserRemove(String),
    UserModify { name: String, changes: UserChanges },
    Stats,
    Fsck,
    /// Test-only I/O fault injection (refused unless duetd runs with
    /// `[testing] fault_injection = true`).
    Fault(FaultSpec),
    /// The newest audit log entries.
    Audit,
}

impl fmt::Debug for AdminRequest {
    /// Like a derived Debug, with passwords redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminRequest::Status => f.write_str("Status"),
            AdminRequest::Cluster => f.write_str("Cluster"),
            AdminRequest::TransferLeader(t) => f.debug_tuple("TransferLeader").field(t).finish(),
            AdminRequest::MemberAdd(m) => f.debug_tuple("MemberAdd").field(m).finish(),
            AdminRequest::MemberRemove(id) => f.debug_tuple("MemberRemove").field(id).finish(),
            AdminRequest::ShareList => f.write_str("ShareList"),
            AdminRequest::ShareShow(n) => f.debug_tuple("ShareShow").field(n).finish(),
            AdminRequest::ShareAdd(s) => f.debug_tuple("ShareAdd").field(s).finish(),
            AdminRequest::ShareRemove(n) => f.debug_tuple("ShareRemove").field(n).finish(),
            AdminRequest::ShareModify { name, changes } => {
                f.debug_struct("ShareModify").field("name", name).field("changes", changes).finish()
            }
            AdminRequest::UserModify { name, changes } => {
                f.debug_struct("UserModify").field("name", name).field("changes", changes).finish()
            }
            AdminRequest::SnapshotList(n) => f.debug_tuple("SnapshotList").field(n).finish(),
            AdminRequest::SnapshotCreate { share, snapshot } => {
                f.debug_struct("SnapshotCreate").field("share", share).field("snapshot", snapshot).finish()
            }
            AdminRequest::SnapshotDelete { share, name } => {
                f.debug_struct("SnapshotDelete").field("share", share).field("name", name).finish()
            }
            AdminRequest::SnapshotSchedule { share, schedule } => {
                f.debug_struct("SnapshotSchedule").field("share", share).field("schedule", schedule).finish()
            }
            AdminRequest::ShareClone { source, clone } => {
                f.debug_struct("ShareClone").field("source", source).field("clone", clone).finish()
            }
            AdminRequest::UserList => f.write_str("UserList"),
            AdminRequest::UserAdd(u) => f.debug_tuple("UserAdd").field(u).finish(),
            AdminRequest::AdminPasswd(c) => f.debug_tuple("AdminPasswd").field(c).finish(),
            AdminRequest::UserPasswd { name, .. } => f
                .debug_struct("UserPasswd")
                .field("name", name)
                .field("password", &"<redacted>")
                .finish(),
            AdminRequest::UserRemove(n) => f.debug_tuple("UserRemove").field(n).finish(),
            AdminRequest::Stats => f.write_str("Stats"),
            AdminRequest::Fsck => f.write_str("Fsck"),
            AdminRequest::Fault(s) => f.debug_tuple("Fault").field(s).finish(),
            AdminRequest::Audit => f.write_str("Audit"),
        }
    }
}

impl AdminRequest {
    /// Whether this request changes something (and so goes to the audit
    /// log).
    pub fn is_change(&self) -> bool {
        matches!(
            self,
            AdminRequest::ShareAdd(_)
                | AdminRequest::ShareRemove(_)
                | AdminRequest::ShareModify { .. }
                | AdminRequest::SnapshotCreate { .. }
                | AdminRequest::SnapshotDelete { .. }
                | AdminRequest::ShareClone { .. }
                | AdminRequest::SnapshotSchedule { .. }
                | AdminRequest::UserAdd(_)
                | AdminRequest::UserPasswd { .. }
                | AdminRequest::AdminPasswd(_)
                | AdminRequest::UserRemove(_)
                | AdminRequest::UserModify { .. }
                | AdminRequest::Fault(_)
                | AdminRequest::TransferLeader(_)
                | AdminRequest::MemberAdd(_)
                | AdminRequest::MemberRemove(_)
        )
    }

    /// Validates the arguments (what [`route`] checks after decoding).
    pub fn validate(&self) -> Result<(), ApiError> {
        match self {
            AdminRequest::ShareShow(n) | AdminRequest::ShareRemove(n) | AdminRequest::SnapshotList(n) => {
                validate_share_name(n)
            }
            AdminRequest::SnapshotCreate { share, snapshot } => {
                validate_share_name(share)?;
                snapshot.name.as_deref().map_or(Ok(()), validate_manual_snapshot_name)
            }
            AdminRequest::SnapshotSchedule { share, schedule } => {
                validate_share_name(share)?;
                schedule.as_ref().map_or(Ok(()), SnapshotSchedule::validate)
            }
            AdminRequest::SnapshotDelete { share, name } => {
                validate_share_name(share)?;
                validate_snapshot_name(name)
            }
            AdminRequest::ShareClone { source, clone } => {
                validate_share_name(source)?;
                clone.validate()
            }
            AdminRequest::ShareAdd(s) => s.validate(),
            AdminRequest::UserAdd(u) => u.validate(),
            AdminRequest::UserPasswd { name, password } => {
                validate_user_name(name)?;
                validate_password(password)
            }
            AdminRequest::UserRemove(n) => validate_user_name(n),
            AdminRequest::AdminPasswd(c) => c.validate(),
            AdminRequest::ShareModify { name, changes } => {
                validate_share_name(name)?;
                changes.validate()
            }
            AdminRequest::UserModify { name, changes } => {
                validate_user_name(name)?;
                changes.validate()
            }
            AdminRequest::Fault(s) => s.validate(),
            AdminRequest::TransferLeader(t) => t.validate(),
            AdminRequest::MemberAdd(m) => m.validate(),
            AdminRequest::MemberRemove(0) => Err(ApiError::invalid_argument("id: node ids start at 1")),
            AdminRequest::MemberRemove(_) => Ok(()),
            AdminRequest::Status
            | AdminRequest::Cluster
            | AdminRequest::ShareList
            | AdminRequest::UserList
            | AdminRequest::Stats
            | AdminRequest::Audit
            | AdminRequest::Fsck => Ok(()),
        }
    }

    /// HTTP method and path of this request.
    pub fn method_and_path(&self) -> (&'static str, String) {
        let seg = |s: &str| percent_encode(s);
        match self {
            AdminRequest::Status => ("GET", "/v1/status".into()),
            AdminRequest::Cluster => ("GET", "/v1/cluster".into()),
            AdminRequest::TransferLeader(_) => ("POST", "/v1/cluster/transfer-leader".into()),
            AdminRequest::MemberAdd(_) => ("POST", "/v1/cluster/members".into()),
            AdminRequest::MemberRemove(id) => ("DELETE", format!("/v1/cluster/members/{id}")),
            AdminRequest::ShareList => ("GET", "/v1/shares".into()),
            AdminRequest::ShareShow(n) => ("GET", format!("/v1/shares/{}", seg(n))),
            AdminRequest::ShareAdd(_) => ("POST", "/v1/shares".into()),
            AdminRequest::ShareRemove(n) => ("DELETE", format!("/v1/shares/{}", seg(n))),
            AdminRequest::ShareModify { name, .. } => ("PATCH", format!("/v1/shares/{}", seg(name))),
            AdminRequest::SnapshotList(n) => ("GET", format!("/v1/shares/{}/snapshots", seg(n))),
            AdminRequest::SnapshotCreate { share, .. } => ("POST", format!("/v1/shares/{}/snapshots", seg(share))),
            AdminRequest::SnapshotDelete { share, name } => {
                ("DELETE", format!("/v1/shares/{}/snapshots/{}", seg(share), seg(name)))
            }
            AdminRequest::ShareClone { source, .. } => ("POST", format!("/v1/shares/{}/clone", seg(source))),
            AdminRequest::SnapshotSchedule { share, schedule } => {
                (if schedule.is_some() { "PUT" } else { "DELETE" }, format!("/v1/shares/{}/snapshot-schedule", seg(share)))
            }
            AdminRequest::UserModify { name, .. } => ("PATCH", format!("/v1/users/{}", seg(name))),
            AdminRequest::UserList => ("GET", "/v1/users".into()),
            AdminRequest::UserAdd(_) => ("POST", "/v1/users".into()),
            AdminRequest::UserPasswd { name, .. } => {
                ("PUT", format!("/v1/users/{}/password", seg(name)))
            }
            AdminRequest::UserRemove(n) => ("DELETE", format!("/v1/users/{}", seg(n))),
            AdminRequest::AdminPasswd(_) => ("PUT", "/v1/admin/password".into()),
            AdminRequest::Stats => ("GET", "/v1/stats".into()),
            AdminRequest::Fsck => ("POST", "/v1/fsck".into()),
            AdminRequest::Fault(_) => ("POST", "/v1/faults".into()),
            AdminRequest::Audit => ("GET", "/v1/audit".into()),
        }
    }

    /// JSON body of this request, if it has one.
    pub fn body(&self) -> Option<Vec<u8>> {
        match self {
            AdminRequest::ShareAdd(s) => Some(to_json(s)),
            AdminRequest::UserAdd(u) => Some(to_json(u)),
            AdminRequest::AdminPasswd(c) => Some(to_json(c)),
            AdminRequest::Fault(f) => Some(to_json(f)),
            AdminRequest::TransferLeader(t) => Some(to_json(t)),
            AdminRequest::MemberAdd(m) => Some(to_json(m)),
            AdminRequest::ShareModify { changes, .. } => Some(to_json(changes)),
            AdminRequest::SnapshotCreate { snapshot, .. } => Some(to_json(snapshot)),
            AdminRequest::ShareClone { clone, .. } => Some(to_json(clone)),
            AdminRequest::SnapshotSchedule { schedule: Some(s), .. } => Some(to_json(s)),
            AdminRequest::UserModify { changes, .. } => Some(to_json(changes)),
            AdminRequest::UserPasswd { password, .. } => Some(to_json(&PasswordChange {
                password: password.clone(),
            })),
            _ => None,
        }
    }

    /// The HTTP request a client sends (see [`HttpRequest::encode`]).
    pub fn to_http(&self, host: &str, creds: Option<&Credentials>) -> HttpRequest {
        let (method, path) = self.method_and_path();
        let mut req = HttpRequest::new(method, path);
        req.headers.push(("Host".into(), host.into()));
        if let Some(c) = creds {
            req.headers.push(("Authorization".into(), c.header_value()));
        }
        req.headers
            .push(("Accept".into(), "application/json".into()));
        req.headers.push(("Connection".into(), "close".into()));
        req.headers.push((
            "User-Agent".into(),
            concat!("duetctl/", env!("CARGO_PKG_VERSION")).into(),
        ));
        if let Some(body) = self.body() {
            req.headers
                .push(("Content-Type".into(), "application/json".into()));
            req.body = body;
        }
        req
    }
}

/// A successful response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminResponse {
    /// 200, GET /v1/status.
    Status(StatusInfo),
    /// 200, GET /v1/cluster.
    Cluster(ClusterStatus),
    /// 200, GET /v1/shares.
    Shares(Vec<Share>),
    /// 200, GET /v1/shares/{name}.
    Share(Share),
    /// 201, POST /v1/shares.
    ShareCreated(Share),
    /// 200, GET /v1/shares/{name}/snapshots.
    Snapshots(Vec<Snapshot>),
    /// 201, POST /v1/shares/{name}/snapshots.
    SnapshotCreated(Snapshot),
    /// 200, GET /v1/users.
    Users(Vec<UserInfo>),
    /// 201, POST /v1/users.
    UserCreated(UserInfo),
    /// 200, PATCH /v1/users/{name}.
    User(UserInfo),
    /// 200, GET /v1/stats.
    Stats(Stats),
    /// 200, POST /v1/fsck.
    Fsck(FsckReport),
    /// 200, GET /v1/audit.
    Audit(Vec<AuditEntry>),
    /// 204: DELETE share/user, PUT password.
    NoContent,
}

impl AdminResponse {
    pub fn http_status(&self) -> u16 {
        match self {
            AdminResponse::ShareCreated(_) | AdminResponse::UserCreated(_) | AdminResponse::SnapshotCreated(_) => 201,
            AdminResponse::NoContent => 204,
            _ => 200,
        }
    }

    /// JSON body (None for 204).
    pub fn body(&self) -> Option<Vec<u8>> {
        Some(match self {
            AdminResponse::Status(s) => to_json(s),
            AdminResponse::Cluster(c) => to_json(c),
            AdminResponse::Shares(s) => to_json(s),
            AdminResponse::Share(s) | AdminResponse::ShareCreated(s) => to_json(s),
            AdminResponse::Snapshots(s) => to_json(s),
            AdminResponse::SnapshotCreated(s) => to_json(s),
            AdminResponse::Users(u) => to_json(u),
            AdminResponse::UserCreated(u) | AdminResponse::User(u) => to_json(u),
            AdminResponse::Stats(s) => to_json(s),
            AdminResponse::Fsck(f) => to_json(f),
            AdminResponse::Audit(a) => to_json(a),
            AdminResponse::NoContent => return None,
        })
    }
}

fn to_json<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    // These types serialise infallibly (no maps with non-string keys).
    serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec())
}

/// HTTP bytes for a handler's result: 200/201/204 with JSON for `Ok`, the
/// error's status with an [`ApiError`] body for `Err`. 401 responses carry
/// `WWW-Authenticate`.
pub fn encode_response(r: &Result<AdminResponse, ApiError>) -> Vec<u8> {
    const JSON: (&str, &str) = ("Content-Type", "application/json");
    match r {
        Ok(resp) => match resp.body() {
            Some(body) => encode_http_response(resp.http_status(), &[JSON], &body),
            None => encode_http_response(resp.http_status(), &[], b""),
        },
        Err(e) => {
            let status = e.http_status();
            let body = to_json(e);
            if status == 401 {
                encode_http_response(
                    status,
                    &[JSON, ("WWW-Authenticate", "Bearer realm=\"duet\"")],
                    &body,
                )
            } else {
                encode_http_response(status, &[JSON], &body)
            }
        }
    }
}

/// Maps a parsed request to an [`AdminRequest`], decoding and validating its
/// body. The query string is ignored.
pub fn route(req: &HttpRequest) -> Result<AdminRequest, ApiError> {
    let path = req.path_only();
    let not_found = || ApiError::not_found(format!("no such endpoint: {path}"));
    let rest = path.strip_prefix("/v1/").ok_or_else(not_found)?;
    let segs: Vec<&str> = rest.split('/').collect();
    let m = req.method.as_str();
    let wrong_method = |allowed: &str| {
        ApiError::method_not_allowed(format!("{m} is not allowed on {path} (allowed: {allowed})"))
    };
    let r = match segs.as_slice() {
        ["status"] => match m {
            "GET" => AdminRequest::Status,
            _ => return Err(wrong_method("GET")),
        },
        ["cluster"] => match m {
            "GET" => AdminRequest::Cluster,
            _ => return Err(wrong_method("GET")),
        },
        ["cluster", "transfer-leader"] => match m {
            "POST" => AdminRequest::TransferLeader(json_body(req)?),
            _ => return Err(wrong_method("POST")),
        },
        ["cluster", "members"] => match m {
            "POST" => AdminRequest::MemberAdd(json_body(req)?),
            _ => return Err(wrong_method("POST")),
        },
        ["cluster", "members", id] => match m {
            "DELETE" => AdminRequest::MemberRemove(
                id.parse().map_err(|_| ApiError::invalid_argument(format!("{id:?} is not a node id")))?,
            ),
            _ => return Err(wrong_method("DELETE")),
        },
        ["shares"] => match m {
            "GET" => AdminRequest::ShareList,
            "POST" => AdminRequest::ShareAdd(json_body(req)?),
            _ => return Err(wrong_method("GET, POST")),
        },
        ["shares", name] => {
            let name = percent_decode(name)?;
            match m {
                "GET" => AdminRequest::ShareShow(name),
                "DELETE" => AdminRequest::ShareRemove(name),
                "PATCH" => AdminRequest::ShareModify { name, changes: json_body(req)? },
                _ => return Err(wrong_method("GET, PATCH, DELETE")),
            }
        }
        ["shares", name, "snapshots"] => {
            let share = percent_decode(name)?;
            match m {
                "GET" => AdminRequest::SnapshotList(share),
                // The body is optional: without one the daemon names it.
                "POST" if req.body.iter().all(u8::is_ascii_whitespace) => {
                    AdminRequest::SnapshotCreate { share, snapshot: NewSnapshot::default() }
                }
                "POST" => AdminRequest::SnapshotCreate { share, snapshot: json_body(req)? },
                _ => return Err(wrong_method("GET, POST")),
            }
        }
        ["shares", name, "clone"] => match m {
            "POST" => AdminRequest::ShareClone { source: percent_decode(name)?, clone: json_body(req)? },
            _ => return Err(wrong_method("POST")),
        },
        ["shares", name, "snapshot-schedule"] => match m {
            "PUT" => AdminRequest::SnapshotSchedule { share: percent_decode(name)?, schedule: Some(json_body(req)?) },
            "DELETE" => AdminRequest::SnapshotSchedule { share: percent_decode(name)?, schedule: None },
            _ => return Err(wrong_method("PUT, DELETE")),
        },
        ["shares", name, "snapshots", snap] => match m {
            "DELETE" => AdminRequest::SnapshotDelete { share: percent_decode(name)?, name: percent_decode(snap)? },
            _ => return Err(wrong_method("DELETE")),
        },
        ["users"] => match m {
            "GET" => AdminRequest::UserList,
            "POST" => AdminRequest::UserAdd(json_body(req)?),
            _ => return Err(wrong_method("GET, POST")),
        },
        ["users", name] => match m {
            "DELETE" => AdminRequest::UserRemove(percent_decode(name)?),
            "PATCH" => AdminRequest::UserModify { name: percent_decode(name)?, changes: json_body(req)? },
            _ => return Err(wrong_method("PATCH, DELETE")),
        },
        ["users", name, "password"] => match m {
            "PUT" => {
                let name = percent_decode(name)?;
                let body: PasswordChange = json_body(req)?;
                AdminRequest::UserPasswd {
                    name,
                    password: body.password,
                }
            }
            _ => return Err(wrong_method("PUT")),
        },
        ["admin", "password"] => match m {
            "PUT" => AdminRequest::AdminPasswd(json_body(req)?),
            _ => return Err(wrong_method("PUT")),
        },
        ["stats"] => match m {
            "GET" => AdminRequest::Stats,
            _ => return Err(wrong_method("GET")),
        },
        ["fsck"] => match m {
            "POST" => AdminRequest::Fsck,
            _ => return Err(wrong_method("POST")),
        },
        ["audit"] => match m {
            "GET" => AdminRequest::Audit,
            _ => return Err(wrong_method("GET")),
        },
        ["faults"] => match m {
            "POST" => AdminRequest::Fault(json_body(req)?),
            _ => return Err(wrong_method("POST")),
        },
        _ => return Err(not_found()),
    };
    r.validate()?;
    Ok(r)
}

fn json_body<T: DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid_argument("missing JSON request body"));
    }
    serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::invalid_argument(format!("invalid JSON body: {e}")))
}

/// Client side: the typed result of a response to `req`. Non-2xx responses
/// become their [`ApiError`] (or one made from the status, if the body is
/// not an ApiError).
pub fn decode_response(req: &AdminRequest, resp: &HttpResponse) -> Result<AdminResponse, ApiError> {
    if !resp.is_success() {
        return Err(error_from_response(resp));
    }
    fn body<T: DeserializeOwned>(resp: &HttpResponse) -> Result<T, ApiError> {
        serde_json::from_slice(&resp.body)
            .map_err(|e| ApiError::internal(format!("cannot decode the daemon's response: {e}")))
    }
    let expect = |want: u16| {
        if resp.status == want {
            Ok(())
        } else {
            Err(ApiError::internal(format!(
                "unexpected HTTP status {} (expected {want})",
                resp.status
            )))
        }
    };
    Ok(match req {
        AdminRequest::Status => AdminResponse::Status(body(resp)?),
        AdminRequest::Cluster
        | AdminRequest::TransferLeader(_)
        | AdminRequest::MemberAdd(_)
        | AdminRequest::MemberRemove(_) => AdminResponse::Cluster(body(resp)?),
        AdminRequest::ShareList => AdminResponse::Shares(body(resp)?),
        AdminRequest::ShareShow(_) | AdminRequest::ShareModify { .. } | AdminRequest::SnapshotSchedule { .. } => {
            AdminResponse::Share(body(resp)?)
        }
        AdminRequest::UserModify { .. } => AdminResponse::User(body(resp)?),
        AdminRequest::ShareAdd(_) | AdminRequest::ShareClone { .. } => {
            expect(201)?;
            AdminResponse::ShareCreated(body(resp)?)
        }
        AdminRequest::SnapshotList(_) => AdminResponse::Snapshots(body(resp)?),
        AdminRequest::SnapshotCreate { .. } => {
            expect(201)?;
            AdminResponse::SnapshotCreated(body(resp)?)
        }
        AdminRequest::UserList => AdminResponse::Users(body(resp)?),
        AdminRequest::UserAdd(_) => {
            expect(201)?;
            AdminResponse::UserCreated(body(resp)?)
        }
        AdminRequest::Stats => AdminResponse::Stats(body(resp)?),
        AdminRequest::Fsck => AdminResponse::Fsck(body(resp)?),
        AdminRequest::Audit => AdminResponse::Audit(body(resp)?),
        AdminRequest::ShareRemove(_)
        | AdminRequest::SnapshotDelete { .. }
        | AdminRequest::UserPasswd { .. }
        | AdminRequest::AdminPasswd(_)
        | AdminRequest::UserRemove(_)
        | AdminRequest::Fault(_) => {
            expect(204)?;
            AdminResponse::NoContent
        }
    })
}

/// The [`ApiError`] of a non-2xx response.
pub fn error_from_response(resp: &HttpResponse) -> ApiError {
    match serde_json::from_slice::<ApiError>(&resp.body) {
        Ok(e) => e,
        Err(_) => {
            let text = String::from_utf8_lossy(&resp.body);
            let text = text.trim();
            let mut message = format!("HTTP {} {}", resp.status, resp.reason);
            if !text.is_empty() {
                message.push_str(": ");
                message.extend(text.chars().take(200));
            }
            ApiError::new(ApiError::code_for_status(resp.status), message)
        }
    }
}

/// Credentials of a request.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `Authorization: Bearer <token>`: an API token.
    Bearer(String),
    /// `Authorization: Basic base64(user:password)`: the admin user.
    Basic { user: String, password: String },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Credentials::Basic { user, .. } => f
                .debug_struct("Basic")
                .field("user", user)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

impl Credentials {
    /// Parses an Authorization header value. None if the scheme is unknown
    /// or the value malformed.
    pub fn parse_header(value: &str) -> Option<Credentials> {
        let value = value.trim();
        let (scheme, rest) = value.split_once(' ')?;
        let rest = rest.trim_start_matches(' ');
        if rest.is_empty() || rest.contains(' ') {
            return None;
        }
        if scheme.eq_ignore_ascii_case("bearer") {
            Some(Credentials::Bearer(rest.to_string()))
        } else if scheme.eq_ignore_ascii_case("basic") {
            let decoded = String::from_utf8(base64::decode(rest)?).ok()?;
            let (user, password) = decoded.split_once(':')?;
            Some(Credentials::Basic {
                user: user.to_string(),
                password: password.to_string(),
            })
        } else {
            None
        }
    }

    /// The Authorization header value.
    pub fn header_value(&self) -> String {
        match self {
            Credentials::Bearer(t) => format!("Bearer {t}"),
            Credentials::Basic { user, password } => {
                format!(
                    "Basic {}",
                    base64::encode(format!("{user}:{password}").as_bytes())
                )
            }
        }
    }
}

/// The credentials of `req`: None if there is no Authorization header, more
/// than one, or it is malformed.
pub fn credentials(req: &HttpRequest) -> Option<Credentials> {
    let mut all = req.header_all("authorization");
    let first = all.next()?;
    if all.next().is_some() {
        return None;
    }
    Credentials::parse_header(first)
}

/// Compares secrets (tokens, password hashes) in time independent of where
/// they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    // Unequal lengths answer at once (lengths are not secret here).
    a.ct_eq(b).into()
}

/// Percent-encodes a path segment (everything but RFC 3986 unreserved).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes a percent-encoded path segment; the result must be UTF-8.
pub fn percent_decode(s: &str) -> Result<String, ApiError> {
    let bad = || ApiError::invalid_argument("invalid percent-encoding in path");
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Parsed, RequestParser, ResponseParser};

    fn req(method: &str, path: &str, body: &str) -> HttpRequest {
        let mut r = HttpRequest::new(method, path);
        r.body = body.as_bytes().to_vec();
        r
    }

    fn all_requests() -> Vec<AdminRequest> {
        let mut share = Share::new("media", "/data/media");
        share.protocols = vec![Protocol::Nfs];
        share.read_only = true;
        share.nfs.clients = vec!["10.0.0.0/8".into(), "::1/128".into()];
        share.nfs.append_extension = true;
        vec![
            AdminRequest::Status,
            AdminRequest::Cluster,
            AdminRequest::TransferLeader(LeaderTransfer { to: 2 }),
            AdminRequest::MemberAdd(MemberAdd { id: 4, addr: "127.0.0.14:7446".into() }),
            AdminRequest::MemberRemove(4),
            AdminRequest::ShareList,
            AdminRequest::ShareShow("media".into()),
            AdminRequest::SnapshotList("media".into()),
            AdminRequest::SnapshotCreate { share: "media".into(), snapshot: NewSnapshot { name: Some("daily 1".into()) } },
            AdminRequest::SnapshotCreate { share: "media".into(), snapshot: NewSnapshot::default() },
            AdminRequest::SnapshotDelete { share: "media".into(), name: "daily 1".into() },
            AdminRequest::SnapshotSchedule {
                share: "media".into(),
                schedule: Some(SnapshotSchedule { every_s: 3600, keep: 24 }),
            },
            AdminRequest::SnapshotSchedule { share: "media".into(), schedule: None },
            AdminRequest::ShareClone {
                source: "media".into(),
                clone: NewClone { share: Share::new("copy", "/clones/copy"), snapshot: Some("daily 1".into()) },
            },
            AdminRequest::ShareClone { source: "media".into(), clone: NewClone { share: share.clone(), snapshot: None } },
            AdminRequest::ShareAdd(share),
            AdminRequest::ShareRemove("media".into()),
            AdminRequest::UserList,
            AdminRequest::UserAdd(NewUser {
                name: "alice".into(),
                password: "p:w d".into(),
                uid: Some(1000),
                gid: None,
            }),
            AdminRequest::UserPasswd {
                name: "alice".into(),
                password: "new".into(),
            },
            AdminRequest::UserRemove("alice".into()),
            AdminRequest::AdminPasswd(AdminPasswordChange {
                user: "admin".into(),
                password: "a long new one".into(),
                current: Some("the old one".into()),
            }),
            AdminRequest::ShareModify {
                name: "media".into(),
                changes: ShareChanges { read_only: Some(false), users: Some(vec![]), ..Default::default() },
            },
            AdminRequest::UserModify {
                name: "alice".into(),
                changes: UserChanges { enabled: Some(false), gid: Some(7), ..Default::default() },
            },
            AdminRequest::Stats,
            AdminRequest::Fsck,
            AdminRequest::Audit,
        ]
    }

    #[test]
    fn snapshot_schedule_endpoint() {
        let put = |body: &str| route(&req("PUT", "/v1/shares/media/snapshot-schedule", body));
        assert_eq!(
            put(r#"{"every_s": 60, "keep": 3}"#).unwrap(),
            AdminRequest::SnapshotSchedule { share: "media".into(), schedule: Some(SnapshotSchedule { every_s: 60, keep: 3 }) }
        );
        for bad in ["", r#"{"every_s": 0, "keep": 3}"#, r#"{"every_s": 60, "keep": 0}"#, r#"{"every_s": 60}"#, r#"{"every_s":60,"keep":3,"x":1}"#] {
            assert_eq!(put(bad).unwrap_err().http_status(), 400, "{bad}");
        }
        assert_eq!(
            route(&req("DELETE", "/v1/shares/media/snapshot-schedule", "")).unwrap(),
            AdminRequest::SnapshotSchedule { share: "media".into(), schedule: None }
        );
        assert_eq!(route(&req("GET", "/v1/shares/media/snapshot-schedule", "")).unwrap_err().http_status(), 405);
        // Manual snapshots may not take the schedule's names.
        let e = route(&req("POST", "/v1/shares/media/snapshots", r#"{"name": "auto-20261203T200000Z"}"#)).unwrap_err();
        assert_eq!(e.http_status(), 400);
    }

    #[test]
    fn client_request_routes_back() {
        let creds = Credentials::Bearer("tok".into());
        for r in all_requests() {
            let bytes = r.to_http("127.0.0.1:7445", Some(&creds)).encode();
            let http = match RequestParser::new().feed(&bytes) {
                Parsed::Complete(h) => h,
                other => panic!("{other:?}"),
            };
            assert_eq!(route(&http).unwrap(), r);
            assert_eq!(credentials(&http), Some(creds.clone()));
        }
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            route(&req("GET", "/v1/status", "")).unwrap(),
            AdminRequest::Status
        );
        assert_eq!(
            route(&req("GET", "/v1/status?verbose=1", "")).unwrap(),
            AdminRequest::Status
        );
        assert_eq!(
            route(&req("GET", "/v1/stats", "")).unwrap(),
            AdminRequest::Stats
        );
        assert_eq!(route(&req("GET", "/v1/cluster", "")).unwrap(), AdminRequest::Cluster);
        assert_eq!(route(&req("POST", "/v1/cluster", "")).unwrap_err().code, codes::METHOD_NOT_ALLOWED);
        assert_eq!(
            route(&req("POST", "/v1/fsck", "")).unwrap(),
            AdminRequest::Fsck
        );
        assert_eq!(
            route(&req("GET", "/v1/shares/a%2Db", "")).unwrap(),
            AdminRequest::ShareShow("a-b".into())
        );
        let add = route(&req("POST", "/v1/shares", r#"{"name":"p","path":"/p"}"#)).unwrap();
        assert_eq!(add, AdminRequest::ShareAdd(Share::new("p", "/p")));
        let u = route(&req(
            "POST",
            "/v1/users",
            r#"{"name":"bob","password":"x","gid":5}"#,
        ))
        .unwrap();
        assert_eq!(
            u,
            AdminRequest::UserAdd(NewUser {
                name: "bob".into(),
                password: "x".into(),
                uid: None,
                gid: Some(5)
            })
        );
        let p = route(&req("PUT", "/v1/users/bob/password", r#"{"password":"y"}"#)).unwrap();
        assert_eq!(
            p,
            AdminRequest::UserPasswd {
                name: "bob".into(),
                password: "y".into()
            }
        );
        assert!(!format!("{p:?}").contains('y'));
        let a = route(&req("PUT", "/v1/admin/password", r#"{"password":"twelve chars"}"#)).unwrap();
        assert_eq!(
            a,
            AdminRequest::AdminPasswd(AdminPasswordChange {
                user: "admin".into(),
                password: "twelve chars".into(),
                current: None
            })
        );
        assert!(!format!("{a:?}").contains("twelve"));
        let code = |b: &str| route(&req("PUT", "/v1/admin/password", b)).unwrap_err().code;
        assert_eq!(code(r#"{"password":"short"}"#), codes::INVALID_ARGUMENT);
        assert_eq!(code(r#"{"password":"twelve\nchars"}"#), codes::INVALID_ARGUMENT);
        assert_eq!(code(r#"{"password":"twelve chars","old":"x"}"#), codes::INVALID_ARGUMENT);
        assert_eq!(code(r#"{"password":"twelve chars","user":"a/b"}"#), codes::INVALID_ARGUMENT);
        assert_eq!(route(&req("GET", "/v1/admin/password", "")).unwrap_err().code, codes::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn route_errors() {
        let code = |m: &str, p: &str, b: &str| route(&req(m, p, b)).unwrap_err().code;
        assert_eq!(code("GET", "/", ""), codes::NOT_FOUND);
        assert_eq!(code("GET", "/v2/status", ""), codes::NOT_FOUND);
        assert_eq!(code("GET", "/v1/status/", ""), codes::NOT_FOUND);
        assert_eq!(code("GET", "/v1/shares/", ""), codes::INVALID_ARGUMENT);
        assert_eq!(code("GET", "/v1/nope", ""), codes::NOT_FOUND);
        assert_eq!(code("GET", "/v1/shares/a/b", ""), codes::NOT_FOUND);
        assert_eq!(code("POST", "/v1/status", ""), codes::METHOD_NOT_ALLOWED);
        assert_eq!(code("GET", "/v1/fsck", ""), codes::METHOD_NOT_ALLOWED);
        assert_eq!(code("PUT", "/v1/shares/x", ""), codes::METHOD_NOT_ALLOWED);
        assert_eq!(code("PATCH", "/v1/shares/x", "{}"), codes::INVALID_ARGUMENT);
        assert_eq!(code("PATCH", "/v1/shares/x", r#"{"readonly":true}"#), codes::INVALID_ARGUMENT);
        assert_eq!(code("PATCH", "/v1/shares/x", r#"{"nfs_clients":["1.2.3.4/40"]}"#), codes::INVALID_ARGUMENT);
        assert_eq!(code("PATCH", "/v1/shares/x", r#"{"protocols":[]}"#), codes::INVALID_ARGUMENT);
        assert_eq!(code("PATCH", "/v1/users/x", "{}"), codes::INVALID_ARGUMENT);
        assert_eq!(code("PATCH", "/v1/users/x", r#"{"uid":4294967295}"#), codes::INVALID_ARGUMENT);
        assert_eq!(
            code("GET", "/v1/users/x/password", ""),
            codes::METHOD_NOT_ALLOWED
        );
        assert_eq!(code("get", "/v1/status", ""), codes::METHOD_NOT_ALLOWED);
        assert_eq!(code("POST", "/v1/shares", ""), codes::INVALID_ARGUMENT);
        assert_eq!(code("POST", "/v1/shares", "{"), codes::INVALID_ARGUMENT);
        assert_eq!(
            code("POST", "/v1/shares", r#"{"name":"x"}"#),
            codes::INVALID_ARGUMENT
        );
        assert_eq!(
            code("POST", "/v1/shares", r#"{"name":".x","path":"/x"}"#),
            codes::INVALID_ARGUMENT
        );
        assert_eq!(
            code(
                "POST",
                "/v1/shares",
                r#"{"name":"x","path":"/x","nfs":{"clients":["1.2.3.4/40"]}}"#
            ),
            codes::INVALID_ARGUMENT
        );
        assert_eq!(
            code("POST", "/v1/users", r#"{"name":"a b","password":"x"}"#),
            codes::INVALID_ARGUMENT
        );
        assert_eq!(
            code("POST", "/v1/users", r#"{"name":"a","password":""}"#),
            codes::INVALID_ARGUMENT
        );
        assert_eq!(
            code("PUT", "/v1/users/a/password", r#"{"pw":"x"}"#),
            codes::INVALID_ARGUMENT
        );
        assert_eq!(
            code("DELETE", "/v1/shares/%zz", ""),
            codes::INVALID_ARGUMENT
        );
        assert_eq!(
            code("DELETE", "/v1/shares/%ff", ""),
            codes::INVALID_ARGUMENT
        );
        assert_eq!(code("DELETE", "/v1/shares/%2", ""), codes::INVALID_ARGUMENT);
        assert_eq!(
            code("DELETE", "/v1/users/a%2Fb", ""),
            codes::INVALID_ARGUMENT
        );
    }

    #[test]
    fn credentials_parsing() {
        let mut r = req("GET", "/v1/status", "");
        assert_eq!(credentials(&r), None);
        r.headers.push((
            "authorization".into(),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==".into(),
        ));
        assert_eq!(
            credentials(&r),
            Some(Credentials::Basic {
                user: "Aladdin".into(),
                password: "open sesame".into()
            })
        );
        r.headers.push(("Authorization".into(), "Bearer x".into()));
        assert_eq!(credentials(&r), None, "two Authorization headers");
        assert_eq!(
            Credentials::parse_header("bearer  abc"),
            Some(Credentials::Bearer("abc".into()))
        );
        assert_eq!(
            Credentials::parse_header("Basic dTpwOnE="), // "u:p:q"
            Some(Credentials::Basic {
                user: "u".into(),
                password: "p:q".into()
            })
        );
        for bad in [
            "",
            "Bearer",
            "Bearer ",
            "Bearer a b",
            "Digest x",
            "Basic !!!!",
            "Basic dXNlcg==",
            "abc",
        ] {
            assert_eq!(Credentials::parse_header(bad), None, "{bad:?}");
        }
        let c = Credentials::Basic {
            user: "admin".into(),
            password: "pä:ss".into(),
        };
        assert_eq!(
            Credentials::parse_header(&c.header_value()),
            Some(c.clone())
        );
        assert!(!format!("{c:?}").contains("pä"));
        assert!(!format!("{:?}", Credentials::Bearer("sekrit".into())).contains("sekrit"));
    }

    fn parse_response(bytes: &[u8]) -> HttpResponse {
        match ResponseParser::new().feed(bytes) {
            Parsed::Complete(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn responses_round_trip() {
        let status = StatusInfo {
            version: "0.1.0".into(),
            node_id: 1,
            uptime_s: 5,
            executors: 4,
            data_dir: "/var/lib/duet".into(),
            listeners: vec![ListenerInfo {
                protocol: "smb".into(),
                addr: "0.0.0.0:445".into(),
            }],
            raft: RaftInfo {
                term: 2,
                commit_index: 9,
                applied_index: 9,
                voters: vec![1],
            },
            shares: 1,
            users: 2,
            files: 3,
            metadata_failed: false,
            capacity: Some(CapacityInfo { total_bytes: 100, free_bytes: 50, avail_bytes: 40, reserve_bytes: 10 }),
        };
        let stats = Stats {
            batches: 3,
            by_request: vec![RequestStats {
                protocol: "smb2".into(),
                request: "CREATE".into(),
                count: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        let cases = vec![
            (AdminRequest::Status, AdminResponse::Status(status), 200),
            (
                AdminRequest::Cluster,
                AdminResponse::Cluster(ClusterStatus {
                    leader: None,
                    term: 4,
                    voters: vec![1],
                    nodes: vec![ClusterNode {
                        id: 1,
                        addr: "127.0.0.1:7446".into(),
                        applied: 9,
                        healthy: true,
                        destaged_upto: Some(4),
                        destage_queue: Some(0),
                    }],
                    receiving_snapshot: Some(SnapshotProgress { from: 2, bytes: 1 << 20, seconds: 3 }),
                    public_addresses: vec![PublicAddress { address: "10.0.0.100/24".into(), node: Some(1) }],
                }),
                200,
            ),
            (
                AdminRequest::ShareList,
                AdminResponse::Shares(vec![Share::new("a", "/a")]),
                200,
            ),
            (
                AdminRequest::ShareShow("a".into()),
                AdminResponse::Share(Share::new("a", "/a")),
                200,
            ),
            (
                AdminRequest::ShareAdd(Share::new("a", "/a")),
                AdminResponse::ShareCreated(Share::new("a", "/a")),
                201,
            ),
            (
                AdminRequest::ShareRemove("a".into()),
                AdminResponse::NoContent,
                204,
            ),
            (
                AdminRequest::UserList,
                AdminResponse::Users(vec![UserInfo {
                    name: "u".into(),
                    uid: 1,
                    gid: 2,
                    enabled: true,
                }]),
                200,
            ),
            (
                AdminRequest::UserAdd(NewUser {
                    name: "u".into(),
                    password: "p".into(),
                    uid: None,
                    gid: None,
                }),
                AdminResponse::UserCreated(UserInfo {
                    name: "u".into(),
                    uid: 1,
                    gid: 2,
                    enabled: true,
                }),
                201,
            ),
            (
                AdminRequest::UserPasswd {
                    name: "u".into(),
                    password: "p".into(),
                },
                AdminResponse::NoContent,
                204,
            ),
            (
                AdminRequest::UserRemove("u".into()),
                AdminResponse::NoContent,
                204,
            ),
            (AdminRequest::Stats, AdminResponse::Stats(stats), 200),
            (
                AdminRequest::UserModify { name: "u".into(), changes: UserChanges { uid: Some(3), ..Default::default() } },
                AdminResponse::User(UserInfo { name: "u".into(), uid: 3, gid: 2, enabled: true }),
                200,
            ),
            (
                AdminRequest::ShareModify {
                    name: "a".into(),
                    changes: ShareChanges { guest_ok: Some(true), ..Default::default() },
                },
                AdminResponse::Share(Share::new("a", "/a")),
                200,
            ),
            (
                AdminRequest::Fsck,
                AdminResponse::Fsck(FsckReport {
                    nodes: 1,
                    edges: 0,
                    chunks: 0,
                    problems: vec!["x".into()],
                }),
                200,
            ),
        ];
        for (request, response, status) in cases {
            let bytes = encode_response(&Ok(response.clone()));
            let http = parse_response(&bytes);
            assert_eq!(http.status, status);
            if status == 204 {
                assert!(http.body.is_empty());
            } else {
                assert_eq!(http.header("content-type"), Some("application/json"));
            }
            assert_eq!(decode_response(&request, &http).unwrap(), response);
        }
    }

    #[test]
    fn error_responses() {
        for (e, status) in [
            (ApiError::invalid_argument("bad"), 400),
            (ApiError::unauthorized("who"), 401),
            (ApiError::not_found("share 'x' not found"), 404),
            (ApiError::already_exists("dup"), 409),
            (ApiError::internal("boom"), 500),
        ] {
            let http = parse_response(&encode_response(&Err(e.clone())));
            assert_eq!(http.status, status);
            assert_eq!(http.header("www-authenticate").is_some(), status == 401);
            assert_eq!(
                decode_response(&AdminRequest::Status, &http).unwrap_err(),
                e
            );
        }
        // A non-API error body (e.g. a proxy's HTML page).
        let http = parse_response(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope");
        let e = decode_response(&AdminRequest::Status, &http).unwrap_err();
        assert_eq!(e.code, codes::NOT_FOUND);
        assert_eq!(e.message, "HTTP 404 Not Found: nope");
        // Parse errors map to 4xx.
        let e: ApiError = crate::http::HttpError::BodyTooLarge.into();
        assert_eq!(e.http_status(), 413);
        let e: ApiError = crate::http::HttpError::Malformed("x").into();
        assert_eq!(e.http_status(), 400);
        // Wrong success status or body.
        let http = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
        assert_eq!(
            decode_response(&AdminRequest::ShareRemove("a".into()), &http)
                .unwrap_err()
                .code,
            codes::INTERNAL
        );
        assert_eq!(
            decode_response(&AdminRequest::Status, &http)
                .unwrap_err()
                .code,
            codes::INTERNAL
        );
    }

    #[test]
    fn percent() {
        assert_eq!(percent_encode("a-b.c_d~e"), "a-b.c_d~e");
        assert_eq!(percent_encode("a b/é"), "a%20b%2F%C3%A9");
        assert_eq!(percent_decode("a%20b%2F%c3%a9").unwrap(), "a b/é");
        assert!(percent_decode("%").is_err());
        assert!(percent_decode("%4").is_err());
        assert!(percent_decode("%+1").is_err());
        assert!(percent_decode("%é1").is_err());
    }

    #[test]
    fn constant_time() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn no_panic_routing_random_requests() {
        let mut rng = crate::http::tests::Rng(0xdead_beef_cafe_f00d);
        let methods = ["GET", "POST", "PUT", "DELETE", "PATCH", ""];
        let pieces = [
            "/v1",
            "/shares",
            "/users",
            "/password",
            "/status",
            "/%",
            "/%41",
            "/x",
            "/",
            "?",
            "/fsck",
            "/stats",
            "/%ff",
        ];
        let bodies = [
            "",
            "{",
            "null",
            "[]",
            r#"{"name":"a","path":"/a"}"#,
            r#"{"name":"a","password":"p"}"#,
            r#"{"password":"p"}"#,
            "\u{0}\u{ff}",
            r#"{"name":"a","path":"/a","nfs":{"clients":["::/999"]}}"#,
        ];
        for _ in 0..20_000 {
            let mut path = String::new();
            for _ in 0..(rng.next() % 5) {
                path.push_str(pieces[(rng.next() as usize) % pieces.len()]);
            }
            let mut r = req(
                methods[(rng.next() as usize) % methods.len()],
                &path,
                bodies[(rng.next() as usize) % bodies.len()],
            );
            if rng.next() & 1 == 0 {
                let junk: Vec<u8> = (0..(rng.next() % 40)).map(|_| rng.next() as u8).collect();
                r.headers.push((
                    "Authorization".into(),
                    String::from_utf8_lossy(&junk).into_owned(),
                ));
                r.body.extend_from_slice(&junk);
            }
            let _ = route(&r);
            let _ = credentials(&r);
        }
    }
}
