//! Request and response bodies of the admin API, and their validation.
//!
//! Every type here is serialised as JSON with serde. Input types (those a
//! client sends: [`Share`], [`NewUser`], [`PasswordChange`]) reject unknown
//! fields, so a misspelt option (`"readonly"`) is an error instead of being
//! silently ignored.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::net::ClientMatch;

/// Address the daemon's admin listener binds by default.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7445";
/// Default data directory of duetd.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/duet";
/// Name of the file, inside the data directory, that holds the admin API
/// token (written by duetd with mode 0600).
pub const TOKEN_FILE_NAME: &str = "admin.token";
/// Prefix of every endpoint.
pub const API_PREFIX: &str = "/v1";

/// Limits used by validation.
pub const MAX_SHARE_NAME: usize = 80;
pub const MAX_USER_NAME: usize = 64;
pub const MAX_PASSWORD: usize = 256;
pub const MAX_PATH: usize = 4096;
pub const MAX_PATH_COMPONENT: usize = 255;
pub const MAX_NFS_CLIENTS: usize = 256;

/// Stable error codes carried in [`ApiError::code`].
pub mod codes {
    pub const INVALID_ARGUMENT: &str = "invalid_argument";
    pub const UNAUTHORIZED: &str = "unauthorized";
    pub const NOT_FOUND: &str = "not_found";
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    pub const ALREADY_EXISTS: &str = "already_exists";
    pub const TOO_LARGE: &str = "too_large";
    pub const FORBIDDEN: &str = "forbidden";
    pub const INTERNAL: &str = "internal";
    /// A change sent to a node that is not the raft leader (the message
    /// names the leader).
    pub const NOT_LEADER: &str = "not_leader";
    /// Too many failed sign-ins from this source: try again later.
    pub const TOO_MANY_ATTEMPTS: &str = "too_many_attempts";
    /// A change sent to a follower found no leader within `[cluster]
    /// leader_wait_ms` (503): nothing was done.
    pub const NO_LEADER: &str = "no_leader";
    /// A change forwarded to the leader got no answer within the forward
    /// timeout (504): it may or may not have been applied; it was not
    /// sent again.
    pub const OUTCOME_UNKNOWN: &str = "outcome_unknown";
}

/// The error body of every non-2xx response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// Stable, machine-readable code (see [`codes`]).
    pub code: String,
    /// Human-readable message.
    pub message: String,
}

impl ApiError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            code: code.into(),
            message: message.into(),
        }
    }
    /// 400.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_ARGUMENT, message)
    }
    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(codes::UNAUTHORIZED, message)
    }
    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(codes::NOT_FOUND, message)
    }
    /// 405.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(codes::METHOD_NOT_ALLOWED, message)
    }
    /// 409.
    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(codes::ALREADY_EXISTS, message)
    }
    /// 413.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(codes::TOO_LARGE, message)
    }
    /// 403: allowed to nobody in this configuration.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(codes::FORBIDDEN, message)
    }
    /// 429 (RFC 6585 section 4): too many failed sign-ins from this source.
    pub fn too_many_attempts(message: impl Into<String>) -> Self {
        Self::new(codes::TOO_MANY_ATTEMPTS, message)
    }
    /// 500.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL, message)
    }
    /// 421 (Misdirected Request, RFC 9110 section 15.5.20): this node is
    /// not the raft leader; the message names the leader.
    pub fn not_leader(message: impl Into<String>) -> Self {
        Self::new(codes::NOT_LEADER, message)
    }

    /// 503: no raft leader within `[cluster] leader_wait_ms`.
    pub fn no_leader(message: impl Into<String>) -> Self {
        Self::new(codes::NO_LEADER, message)
    }
    /// 504: forwarded to the leader, no answer in time; may have applied.
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        Self::new(codes::OUTCOME_UNKNOWN, message)
    }

    /// The HTTP status code for this error's code (500 for unknown codes).
    pub fn http_status(&self) -> u16 {
        match self.code.as_str() {
            codes::INVALID_ARGUMENT => 400,
            codes::UNAUTHORIZED => 401,
            codes::NOT_FOUND => 404,
            codes::METHOD_NOT_ALLOWED => 405,
            codes::ALREADY_EXISTS => 409,
            codes::TOO_LARGE => 413,
            codes::FORBIDDEN => 403,
            codes::NOT_LEADER => 421,
            codes::TOO_MANY_ATTEMPTS => 429,
            codes::NO_LEADER => 503,
            codes::OUTCOME_UNKNOWN => 504,
            _ => 500,
        }
    }

    /// The error code a client should assume for a status when the body
    /// carries no [`ApiError`].
    pub fn code_for_status(status: u16) -> &'static str {
        match status {
            400 => codes::INVALID_ARGUMENT,
            401 | 403 => codes::UNAUTHORIZED,
            404 => codes::NOT_FOUND,
            405 => codes::METHOD_NOT_ALLOWED,
            409 => codes::ALREADY_EXISTS,
            413 | 431 => codes::TOO_LARGE,
            421 => codes::NOT_LEADER,
            429 => codes::TOO_MANY_ATTEMPTS,
            503 => codes::NO_LEADER,
            504 => codes::OUTCOME_UNKNOWN,
            _ => codes::INTERNAL,
        }
    }
}

/// A file protocol a share is served over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Smb,
    Nfs,
}

impl Protocol {
    pub const ALL: [Protocol; 2] = [Protocol::Smb, Protocol::Nfs];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Smb => "smb",
            Protocol::Nfs => "nfs",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Protocol {
    type Err = ApiError;
    /// `smb` or `nfs`, case-insensitive.
    fn from_str(s: &str) -> Result<Self, ApiError> {
        if s.eq_ignore_ascii_case("smb") {
            Ok(Protocol::Smb)
        } else if s.eq_ignore_ascii_case("nfs") {
            Ok(Protocol::Nfs)
        } else {
            Err(ApiError::invalid_argument(format!(
                "unknown protocol {s:?} (expected \"smb\" or \"nfs\")"
            )))
        }
    }
}

fn default_protocols() -> Vec<Protocol> {
    Protocol::ALL.to_vec()
}
fn default_clients() -> Vec<String> {
    vec!["*".to_string()]
}
fn default_true() -> bool {
    true
}

/// NFS export options of a share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NfsExportRules {
    /// Who may mount: CIDRs (`10.0.0.0/8`, `::1/128`), bare addresses, or
    /// `*` for everyone. Default `["*"]`.
    #[serde(default = "default_clients")]
    pub clients: Vec<String>,
    /// Map uid 0 to the anonymous user. Default true.
    #[serde(default = "default_true")]
    pub root_squash: bool,
    /// Allow the vNFS append extension (WRITE at offset 2^64-1 appends
    /// atomically). Default false.
    #[serde(default)]
    pub append_extension: bool,
}

impl Default for NfsExportRules {
    fn default() -> Self {
        NfsExportRules {
            clients: default_clients(),
            root_squash: true,
            append_extension: false,
        }
    }
}

impl NfsExportRules {
    /// Parses [`NfsExportRules::clients`] (for matching many addresses, keep
    /// the result).
    pub fn client_matchers(&self) -> Result<Vec<ClientMatch>, ApiError> {
        self.clients
            .iter()
            .map(|c| {
                c.parse::<ClientMatch>()
                    .map_err(|e| ApiError::invalid_argument(e.to_string()))
            })
            .collect()
    }

    /// Whether a client at `ip` may mount. Unparsable entries match nothing.
    pub fn allows(&self, ip: std::net::IpAddr) -> bool {
        self.clients
            .iter()
            .filter_map(|c| c.parse::<ClientMatch>().ok())
            .any(|m| m.contains(ip))
    }
}

/// When a share's changes are durable before their replies
/// (`docs/durability.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Every change is on disk before its reply (the default).
    #[default]
    Always,
    /// On disk before the reply when the protocol promises it (SMB
    /// WRITE_THROUGH, FLUSH, CREATE with FILE_WRITE_THROUGH; NFS stable
    /// WRITE, COMMIT, every NFS metadata operation); the rest within
    /// `[durability] window_ms`. A multi-voter cluster serves it as
    /// `always`.
    Protocol,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Always => "always",
            Durability::Protocol => "protocol",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = ApiError;
    fn from_str(s: &str) -> Result<Self, ApiError> {
        match s {
            "always" => Ok(Durability::Always),
            "protocol" => Ok(Durability::Protocol),
            _ => Err(ApiError::invalid_argument(format!(
                "unknown durability {s:?} (expected \"always\" or \"protocol\")"
            ))),
        }
    }
}

fn is_default_durability(d: &Durability) -> bool {
    *d == Durability::Always
}

/// A share: a directory of duet's namespace exported over SMB and/or NFS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Share {
    /// SMB share name and NFS export name.
    pub name: String,
    /// Absolute path in duet's namespace, e.g. "/public"; created if missing.
    pub path: String,
    /// Default: both.
    #[serde(default = "default_protocols")]
    pub protocols: Vec<Protocol>,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub guest_ok: bool,
    #[serde(default)]
    pub nfs: NfsExportRules,
    /// SMB users allowed to connect (TREE_CONNECT); empty: every user.
    /// NFS is governed by `nfs.clients` (AUTH_SYS identities are the
    /// client's say-so, so a user list would be no boundary there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Default `always`.
    #[serde(default, skip_serializing_if = "is_default_durability")]
    pub durability: Durability,
    /// In answers only: the durability this node serves the share with
    /// (`always` on a multi-voter cluster whatever `durability` says).
    /// Ignored in requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability_applied: Option<Durability>,
    /// A writable clone's origin, `SOURCE@SNAPSHOT` (set by the daemon in
    /// answers; ignored in requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// A clone's space: what removing it would free (its own chunks and
    /// records, its snapshots, the snapshot taken for it). Set by the
    /// daemon in answers for clones; ignored in requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<Exclusive>,
    /// The share's snapshot schedule (set with `PUT
    /// /v1/shares/{name}/snapshot-schedule`). In answers only; ignored in
    /// requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_schedule: Option<SnapshotSchedule>,
}

impl Share {
    /// A share with the default options.
    pub fn new(name: impl Into<String>, path: impl Into<String>) -> Self {
        Share {
            name: name.into(),
            path: path.into(),
            protocols: default_protocols(),
            read_only: false,
            guest_ok: false,
            nfs: NfsExportRules::default(),
            users: Vec::new(),
            durability: Durability::Always,
            durability_applied: None,
            origin: None,
            exclusive: None,
            snapshot_schedule: None,
        }
    }

    pub fn has_protocol(&self, p: Protocol) -> bool {
        self.protocols.contains(&p)
    }

    /// Checks name, path, protocols and NFS client list.
    pub fn validate(&self) -> Result<(), ApiError> {
        validate_share_name(&self.name)?;
        validate_share_path(&self.path)?;
        if self.protocols.is_empty() {
            return Err(ApiError::invalid_argument(
                "a share needs at least one protocol",
            ));
        }
        for (i, p) in self.protocols.iter().enumerate() {
            if self.protocols[..i].contains(p) {
                return Err(ApiError::invalid_argument(format!(
                    "protocol {p} listed twice"
                )));
            }
        }
        if self.nfs.clients.len() > MAX_NFS_CLIENTS {
            return Err(ApiError::invalid_argument(format!(
                "too many NFS client entries (at most {MAX_NFS_CLIENTS})"
            )));
        }
        self.nfs.client_matchers()?;
        if self.users.len() > MAX_NFS_CLIENTS {
            return Err(ApiError::invalid_argument(format!(
                "too many allowed users (at most {MAX_NFS_CLIENTS})"
            )));
        }
        for u in &self.users {
            validate_user_name(u)?;
        }
        if self.has_protocol(Protocol::Nfs) && self.nfs.clients.is_empty() {
            return Err(ApiError::invalid_argument(
                "the NFS client list is empty; use \"*\" to allow every client",
            ));
        }
        Ok(())
    }
}

/// Body of PATCH /v1/shares/{name}: the options to change, in place (the
/// share's name and path stay; connected clients stay connected and see
/// the new options within about a second). Absent fields keep their value.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareChanges {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocols: Option<Vec<Protocol>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_ok: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs_clients: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_squash: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_extension: Option<bool>,
    /// SMB users allowed to connect; empty: every user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
}

impl ShareChanges {
    pub fn is_empty(&self) -> bool {
        *self == ShareChanges::default()
    }

    /// `share` with these changes made (validate the result).
    pub fn apply(&self, share: &Share) -> Share {
        let mut s = share.clone();
        if let Some(p) = &self.protocols {
            s.protocols = p.clone();
        }
        if let Some(v) = self.read_only {
            s.read_only = v;
        }
        if let Some(v) = self.guest_ok {
            s.guest_ok = v;
        }
        if let Some(c) = &self.nfs_clients {
            s.nfs.clients = c.clone();
        }
        if let Some(v) = self.root_squash {
            s.nfs.root_squash = v;
        }
        if let Some(v) = self.append_extension {
            s.nfs.append_extension = v;
        }
        if let Some(u) = &self.users {
            s.users = u.clone();
        }
        if let Some(d) = self.durability {
            s.durability = d;
        }
        s
    }

    /// Checks what can be checked without the share: at least one change,
    /// and each given value valid on its own.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.is_empty() {
            return Err(ApiError::invalid_argument("nothing to change: give at least one option"));
        }
        let mut probe = Share::new("probe", "/probe");
        probe.protocols = vec![Protocol::Smb];
        probe.nfs.clients = vec!["*".into()];
        let mut changed = self.apply(&probe);
        if self.protocols.is_none() {
            changed.protocols = Protocol::ALL.to_vec();
        }
        if self.nfs_clients.is_none() {
            changed.nfs.clients = vec!["*".into()];
        } else if self.protocols.is_none() && changed.nfs.clients.is_empty() {
            // Whether an empty list is allowed depends on the protocols.
            changed.protocols = vec![Protocol::Smb];
        }
        changed.validate()
    }
}

/// Body of PATCH /v1/users/{name}: absent fields keep their value.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserChanges {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// A disabled user cannot log on (SMB SESSION_SETUP is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

impl UserChanges {
    pub fn validate(&self) -> Result<(), ApiError> {
        if *self == UserChanges::default() {
            return Err(ApiError::invalid_argument("nothing to change: give --uid, --gid, --enable or --disable"));
        }
        if let Some(uid) = self.uid {
            validate_id("uid", uid)?;
        }
        if let Some(gid) = self.gid {
            validate_id("gid", gid)?;
        }
        Ok(())
    }
}

/// Share names: 1-80 characters of `[A-Za-z0-9._-]`, not starting with '.'.
pub fn validate_share_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.len() > MAX_SHARE_NAME {
        return Err(ApiError::invalid_argument(format!(
            "share name must be 1-{MAX_SHARE_NAME} characters"
        )));
    }
    if !name.bytes().all(is_name_byte) {
        return Err(ApiError::invalid_argument(format!(
            "invalid share name {name:?}: only letters, digits, '.', '_' and '-' are allowed"
        )));
    }
    if name.starts_with('.') {
        return Err(ApiError::invalid_argument(format!(
            "invalid share name {name:?}: must not start with '.'"
        )));
    }
    Ok(())
}

/// Share paths: absolute, no "." or ".." or empty components, no NUL, no
/// trailing slash except for "/" itself.
pub fn validate_share_path(path: &str) -> Result<(), ApiError> {
    let bad = |why: &str| {
        Err(ApiError::invalid_argument(format!(
            "invalid share path {path:?}: {why}"
        )))
    };
    if !path.starts_with('/') {
        return bad("must be absolute (start with '/')");
    }
    if path.len() > MAX_PATH {
        return bad("too long");
    }
    if path.contains('\0') {
        return bad("contains NUL");
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return bad("trailing '/'");
    }
    for comp in path[1..].split('/') {
        match comp {
            "" => return bad("empty component ('//')"),
            "." | ".." => return bad("'.' and '..' components are not allowed"),
            c if c.len() > MAX_PATH_COMPONENT => return bad("component longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(())
}

/// User names: 1-64 characters of `[A-Za-z0-9._-]`.
pub fn validate_user_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.len() > MAX_USER_NAME {
        return Err(ApiError::invalid_argument(format!(
            "user name must be 1-{MAX_USER_NAME} characters"
        )));
    }
    if !name.bytes().all(is_name_byte) {
        return Err(ApiError::invalid_argument(format!(
            "invalid user name {name:?}: only letters, digits, '.', '_' and '-' are allowed"
        )));
    }
    Ok(())
}

/// Passwords: 1-256 characters.
pub fn validate_password(password: &str) -> Result<(), ApiError> {
    let n = password.chars().count();
    if n == 0 || n > MAX_PASSWORD {
        return Err(ApiError::invalid_argument(format!(
            "password must be 1-{MAX_PASSWORD} characters"
        )));
    }
    Ok(())
}

/// uid/gid: any u32 except 4294967295 (the "no id" value of chown(2)).
pub fn validate_id(what: &str, id: u32) -> Result<(), ApiError> {
    if id == u32::MAX {
        return Err(ApiError::invalid_argument(format!(
            "{what} {id} is reserved"
        )));
    }
    Ok(())
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'
}

/// A user as listed by the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub enabled: bool,
}

/// Body of POST /v1/users. uid/gid are chosen by the daemon when absent.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    pub name: String,
    pub password: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

impl NewUser {
    pub fn validate(&self) -> Result<(), ApiError> {
        validate_user_name(&self.name)?;
        validate_password(&self.password)?;
        if let Some(uid) = self.uid {
            validate_id("uid", uid)?;
        }
        if let Some(gid) = self.gid {
            validate_id("gid", gid)?;
        }
        Ok(())
    }
}

impl fmt::Debug for NewUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewUser")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .field("uid", &self.uid)
            .field("gid", &self.gid)
            .finish()
    }
}

/// The shortest admin password `PUT /v1/admin/password` accepts.
pub const MIN_ADMIN_PASSWORD: usize = 12;

/// Body of PUT /v1/admin/password: a new password for an admin user of
/// the API (not an SMB user). `user` defaults to `admin`. `current` is
/// the password in use now; the console must send it (a session cookie
/// alone does not change the password), duetctl signed in with that
/// password or with the local token need not.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminPasswordChange {
    #[serde(default = "default_admin_user")]
    pub user: String,
    pub password: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
}

fn default_admin_user() -> String {
    "admin".to_string()
}

impl AdminPasswordChange {
    pub fn validate(&self) -> Result<(), ApiError> {
        validate_user_name(&self.user)?;
        validate_password(&self.password)?;
        if self.password.chars().count() < MIN_ADMIN_PASSWORD {
            return Err(ApiError::invalid_argument(format!(
                "an admin password must have at least {MIN_ADMIN_PASSWORD} characters"
            )));
        }
        if self.password.chars().any(char::is_control) {
            return Err(ApiError::invalid_argument("an admin password must not contain control characters"));
        }
        if let Some(c) = &self.current {
            validate_password(c)?;
        }
        Ok(())
    }
}

impl fmt::Debug for AdminPasswordChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminPasswordChange")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("current", &self.current.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Body of PUT /v1/users/{name}/password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    pub password: String,
}

impl fmt::Debug for PasswordChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PasswordChange")
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A protocol listener of the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ListenerInfo {
    /// "smb", "nfs", "admin", ...
    pub protocol: String,
    /// Socket address, e.g. "0.0.0.0:445".
    pub addr: String,
}

/// State of the (metadata) raft group.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RaftInfo {
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub voters: Vec<u64>,
}

/// Body of GET /v1/status.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StatusInfo {
    pub version: String,
    pub node_id: u64,
    pub uptime_s: u64,
    pub executors: u32,
    pub data_dir: String,
    pub listeners: Vec<ListenerInfo>,
    pub raft: RaftInfo,
    pub shares: u32,
    pub users: u32,
    pub files: u64,
    /// A metadata write failed: changes are refused until restart.
    #[serde(default)]
    pub metadata_failed: bool,
    /// The data volume (absent from daemons that did not report it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityInfo>,
}

impl StatusInfo {
    /// Why the node is unhealthy, if it is (what `duetctl status` exits
    /// non-zero for).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.metadata_failed {
            p.push("metadata FAILED: a metadata write failed; changes are refused until duetd restarts".to_string());
        }
        p
    }
}

/// Body of POST /v1/cluster/transfer-leader (`duetctl cluster
/// transfer-leader ID`): the voter to hand raft leadership to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderTransfer {
    pub to: u64,
}

impl LeaderTransfer {
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.to == 0 {
            return Err(ApiError::invalid_argument("to: node ids start at 1"));
        }
        Ok(())
    }
}

/// Body of POST /v1/cluster/members (`duetctl cluster add ID ADDR`): a
/// voter to add and its cluster address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberAdd {
    pub id: u64,
    /// `ADDRESS:PORT` of its `[cluster] listen`.
    pub addr: String,
}

impl MemberAdd {
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.id == 0 {
            return Err(ApiError::invalid_argument("id: node ids start at 1"));
        }
        if self.addr.parse::<std::net::SocketAddr>().is_err() {
            return Err(ApiError::invalid_argument(format!(
                "addr: {:?} is not an ADDRESS:PORT such as 127.0.0.14:7446",
                self.addr
            )));
        }
        Ok(())
    }
}

/// Body of GET /v1/cluster: the metadata raft group as this node sees it
/// (`duetctl cluster status`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The leader's id; null while there is none (an election).
    pub leader: Option<u64>,
    /// The raft term this node is in.
    pub term: u64,
    /// The voters of raft's current configuration, ascending.
    pub voters: Vec<u64>,
    /// The nodes this node has figures for (today: itself).
    pub nodes: Vec<ClusterNode>,
    /// This node is being rebuilt: it receives a raft snapshot image
    /// (a follower that lagged past the retained log, or an emptied one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiving_snapshot: Option<SnapshotProgress>,
    /// Who holds each public service address (`[cluster]
    /// public_addresses`), as committed by the leader; an address held by
    /// nobody (no healthy node) has `node` null. Empty without any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub public_addresses: Vec<PublicAddress>,
}

/// One public service address and the node holding it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PublicAddress {
    /// As configured: `ADDRESS/PREFIX`.
    pub address: String,
    pub node: Option<u64>,
}

/// A snapshot image being received (`receiving_snapshot` of
/// [`ClusterStatus`]): its total is known only at its end.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SnapshotProgress {
    /// The node sending it (the leader).
    pub from: u64,
    /// Bytes received so far.
    pub bytes: u64,
    /// Seconds since the transfer started.
    pub seconds: u64,
}

/// One node of [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterNode {
    pub id: u64,
    /// Its cluster address (`[cluster] peers` entry, or `[cluster] listen`).
    pub addr: String,
    /// The last raft index its state machine applied.
    pub applied: u64,
    /// Whether it serves: reachable and its metadata store not FAILED.
    pub healthy: bool,
    /// Its destage progress: every data record up to this one is in its
    /// own chunk store (records are numbered alike on every node). `null`
    /// while unknown (no status frame from it yet, or an older version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destaged_upto: Option<u64>,
    /// Data records it applied and has not destaged yet: written data
    /// that it holds in its write log only. 0 on every node means every
    /// node's chunk store holds everything written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destage_queue: Option<u64>,
}

impl ClusterStatus {
    /// Why the cluster is unhealthy, if it is (what `duetctl cluster
    /// status` exits non-zero for).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.leader.is_none() {
            p.push(format!("no leader in term {} (an election is on, or no majority of voters is up)", self.term));
        }
        for n in self.nodes.iter().filter(|n| !n.healthy) {
            p.push(format!("node {} ({}) is unhealthy", n.id, n.addr));
        }
        for a in self.public_addresses.iter().filter(|a| a.node.is_none()) {
            p.push(format!("public address {} is held by no node", a.address));
        }
        p
    }
}

/// The data volume's capacity as clients see it: statvfs of the data
/// directory, with `[limits] disk_reserve_mib` taken off the free and
/// available space (SMB FS_SIZE/FS_FULL_SIZE information, NFS FSSTAT and
/// the NFSv4 space_* attributes report the same figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CapacityInfo {
    /// Size of the volume.
    pub total_bytes: u64,
    /// Free bytes, less the reserve.
    pub free_bytes: u64,
    /// Free bytes unprivileged writers may use, less the reserve.
    pub avail_bytes: u64,
    /// `[limits] disk_reserve_mib`, in bytes.
    pub reserve_bytes: u64,
}

/// Where `POST /v1/faults` can make I/O fail (test-only).
pub const FAULT_POINTS: &[&str] =
    &["wal-write", "wal-sync", "data-read", "chunk-write", "chunk-sync", "meta-sync", "meta-read"];

/// Makes the next `count` operations at `point` fail with EIO (0 cancels).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSpec {
    pub point: String,
    pub count: u32,
}

impl FaultSpec {
    pub fn validate(&self) -> Result<(), ApiError> {
        if FAULT_POINTS.contains(&self.point.as_str()) {
            Ok(())
        } else {
            Err(ApiError::invalid_argument(format!(
                "unknown fault point {:?} (one of: {})",
                self.point,
                FAULT_POINTS.join(", ")
            )))
        }
    }
}

/// Back-end operation counts for one kind of protocol request.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RequestStats {
    /// "smb2", "nfs3", "nfs4", ...
    pub protocol: String,
    /// "CREATE", "WRITE", "COMPOUND", ...
    pub request: String,
    pub count: u64,
    pub batches: u64,
    pub proposals: u64,
    pub fsyncs: u64,
    pub rocksdb_reads: u64,
    pub rocksdb_writes: u64,
    pub chunk_reads: u64,
    pub chunk_writes: u64,
    /// File bytes READ returned.
    #[serde(default)]
    pub bytes_read: u64,
    /// File bytes WRITE and server-side COPY wrote.
    #[serde(default)]
    pub bytes_written: u64,
}

/// Operations that failed with one error kind over one protocol.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ErrorCount {
    /// "smb", "nfs", "internal".
    pub protocol: String,
    /// The file-system error: "NotFound", "Exists", "NoSpace", "Io", ...
    pub kind: String,
    pub count: u64,
}

/// Client connections: open now, accepted and refused since start.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConnectionStats {
    pub open: u64,
    pub accepted_smb: u64,
    pub accepted_nfs: u64,
    /// Refused over `[limits] connections`.
    pub refused_connections_limit: u64,
    /// Refused over `[limits] connections_per_client`.
    pub refused_per_client_limit: u64,
    /// Closed for a message over `[limits] smb_message_max` or a record
    /// over `nfs_record_max`.
    pub oversize_closed: u64,
    /// SMB SESSION_SETUPs refused with STATUS_LOGON_FAILURE.
    pub smb_logon_failures: u64,
    /// Admin API requests refused for their credentials.
    pub admin_auth_failures: u64,
    /// Connections accepted by each protocol executor (thread), in
    /// executor order: how the clients were spread over the cores
    /// (executor 0 accepts and hands connections out in turn).
    #[serde(default)]
    pub by_executor: Vec<ExecutorConnections>,
}

/// Connections one protocol executor accepted since start.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExecutorConnections {
    pub executor: u32,
    pub accepted_smb: u64,
    pub accepted_nfs: u64,
}

/// Body of GET /v1/stats: totals since start, and per request kind.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Stats {
    pub batches: u64,
    pub proposals: u64,
    pub fsyncs: u64,
    pub rocksdb_reads: u64,
    pub rocksdb_writes: u64,
    pub chunk_reads: u64,
    pub chunk_writes: u64,
    pub log_writes: u64,
    pub by_request: Vec<RequestStats>,
    /// fsyncs by volume (they add up to `fsyncs`).
    #[serde(default)]
    pub fsyncs_metadata: u64,
    #[serde(default)]
    pub fsyncs_log: u64,
    #[serde(default)]
    pub fsyncs_chunk: u64,
    /// Sums of the per-request byte counts.
    #[serde(default)]
    pub bytes_read: u64,
    #[serde(default)]
    pub bytes_written: u64,
    /// Write-log records destaged into chunk files since start.
    #[serde(default)]
    pub destaged_records: u64,
    /// Write-log records not yet destaged.
    #[serde(default)]
    pub destage_backlog: u64,
    /// Data records queued on this node and not yet destaged (writes of
    /// every size, truncations, clones...): what reads lay over the chunks
    /// and the destager still has to apply.
    #[serde(default)]
    pub destage_queue: u64,
    /// Operations that failed, by protocol and kind.
    #[serde(default)]
    pub errors: Vec<ErrorCount>,
    #[serde(default)]
    pub connections: ConnectionStats,
    /// Metadata groups written without a sync and answered before they
    /// were durable (`protocol` shares; docs/durability.md).
    #[serde(default)]
    pub lazy_groups: u64,
    /// Syncs of the metadata WAL that made lazy groups durable (each also
    /// in `fsyncs_metadata`): the window ran out, or a FLUSH or COMMIT came.
    #[serde(default)]
    pub wal_syncs: u64,
    /// Changes this node refused as the raft leader because it held
    /// `[cluster] uncommitted_mib` of entries not yet committed (the client
    /// got the retry answer).
    #[serde(default)]
    pub raft_overloaded: u64,
    /// Changes naming write cache extents this node refused as the raft
    /// leader because the voters holding them were not a majority of each
    /// voter set of its configuration (a membership change came between
    /// the copies and the proposal; the batch ran again).
    #[serde(default)]
    pub raft_not_held: u64,
    /// Read-only batches a single node answered on the protocol executor
    /// from RocksDB's memory (no trip to the metadata thread), and those
    /// that needed the disk and went there.
    #[serde(default)]
    pub metadata_reads_here: u64,
    #[serde(default)]
    pub metadata_reads_from_disk: u64,
    /// Reads of chunk blocks answered from the read cache (`[cache]
    /// read_mib`), and those that went to the device.
    #[serde(default)]
    pub read_cache_hits: u64,
    #[serde(default)]
    pub read_cache_misses: u64,
    /// Bytes of chunk data the read cache holds now.
    #[serde(default)]
    pub read_cache_bytes: u64,
    /// Reads a protocol executor served from the read cache itself, with
    /// no trip to the data executor (every block cached, no queued record
    /// over the range that needs the device).
    #[serde(default)]
    pub read_cache_direct: u64,
    /// Reads of write-log extents (data not destaged yet, and the
    /// destager's own) served from memory, and from the device; bytes of
    /// extents held in memory (a quarter of `[cache] read_mib`).
    #[serde(default)]
    pub log_reads_memory: u64,
    #[serde(default)]
    pub log_reads_device: u64,
    #[serde(default)]
    pub log_memory_bytes: u64,
    /// Gather intervals the destager waited for a client's stream of
    /// large writes to pause (`[cache] destage_defer_mib`).
    #[serde(default)]
    pub destage_deferrals: u64,
}

/// One line of the audit log (GET /v1/audit returns the newest, oldest
/// first).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Nanoseconds since the Unix epoch.
    pub time_ns: i64,
    /// "token" (the API token), the admin user's name, or the SMB user
    /// whose logon failed.
    pub who: String,
    /// The client's address.
    pub from: String,
    /// The change ("ShareAdd(...)", "UserPasswd { name: \"alice\", password: \"<redacted>\" }"),
    /// or "admin logon" / "smb logon".
    pub action: String,
    /// "ok", "refused: ..." or the error.
    pub outcome: String,
}

/// Body of POST /v1/fsck.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FsckReport {
    pub nodes: u64,
    pub edges: u64,
    pub chunks: u64,
    /// Empty when the file system is consistent.
    pub problems: Vec<String>,
}

/// Most snapshots one share may have (the daemon refuses more).
pub const MAX_SNAPSHOTS: usize = 256;

/// A snapshot of a share (`GET /v1/shares/{name}/snapshots`): a read-only
/// image of the share as it was at `created_ns`, seen over NFS under
/// `.snapshot/NAME/` and over SMB as a Previous Version (`gmt`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub name: String,
    /// When it was taken: nanoseconds since the epoch (UTC).
    pub created_ns: i64,
    /// Its SMB Previous Versions token, `@GMT-YYYY.MM.DD-HH.MM.SS` (UTC,
    /// MS-SMB2 2.2.32.2).
    pub gmt: String,
    /// What deleting it would free (data only it holds; a chunk shared
    /// with the live share, a clone or another snapshot is not counted).
    #[serde(default)]
    pub exclusive: Exclusive,
    /// Taken by the share's schedule (named `auto-YYYYMMDDTHHMMSSZ`): the
    /// schedule's retention may delete it.
    #[serde(default)]
    pub scheduled: bool,
    /// The clone share standing on it: it cannot be deleted until that
    /// share is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone: Option<String>,
}

/// What deleting a snapshot or removing a clone would free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Exclusive {
    /// Bytes of chunk data only it holds.
    pub bytes: u64,
    /// Chunks (up to 4 MiB each) only it holds.
    pub chunks: u64,
    /// Metadata records that go with it.
    pub records: u64,
    /// The daemon stopped reading at its bound (100,000 records per
    /// figure): the figures are lower bounds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// A share's snapshot schedule (`PUT /v1/shares/{name}/snapshot-schedule`):
/// a snapshot `auto-YYYYMMDDTHHMMSSZ` every `every_s` seconds (slots from
/// the epoch, UTC), the newest `keep` scheduled snapshots kept; manual
/// snapshots and those a clone stands on are never deleted by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSchedule {
    pub every_s: u64,
    pub keep: u32,
}

/// The longest snapshot interval: a year.
pub const SCHEDULE_EVERY_MAX_S: u64 = 366 * 86_400;
/// The shortest snapshot interval the daemon takes (unless configured for
/// tests: `[testing] snapshot_schedule_min_s`).
pub const SCHEDULE_EVERY_MIN_S: u64 = 60;
/// The prefix of scheduled snapshots' names, which manual ones may not use.
pub const SCHEDULED_PREFIX: &str = "auto-";

impl SnapshotSchedule {
    /// Checks what does not depend on the daemon's configuration: 1 s to a
    /// year, keep 1 to 256.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.every_s == 0 || self.every_s > SCHEDULE_EVERY_MAX_S {
            return Err(ApiError::invalid_argument(format!(
                "invalid snapshot interval {} s: at most a year ({SCHEDULE_EVERY_MAX_S} s)",
                self.every_s
            )));
        }
        if self.keep == 0 || self.keep as usize > MAX_SNAPSHOTS {
            return Err(ApiError::invalid_argument(format!(
                "invalid snapshot retention {}: keep 1 to {MAX_SNAPSHOTS}",
                self.keep
            )));
        }
        Ok(())
    }
}

/// An interval as duetctl and the console take it: `90s`, `15m`, `1h`,
/// `1d`, or a bare number of minutes.
pub fn parse_interval(s: &str) -> Result<u64, ApiError> {
    let t = s.trim();
    let bad = || ApiError::invalid_argument(format!("invalid interval {s:?}: give e.g. 30s, 15m, 1h or 1d (a bare number is minutes)"));
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, "m"),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

/// `1h`, `15m`, `90s`, `2d`: the largest unit that divides the interval.
pub fn format_interval(secs: u64) -> String {
    match secs {
        0 => "0s".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A manual snapshot's name: a valid name not beginning `auto-` (the
/// schedule's, whose retention deletes them).
pub fn validate_manual_snapshot_name(name: &str) -> Result<(), ApiError> {
    validate_snapshot_name(name)?;
    if name.starts_with(SCHEDULED_PREFIX) {
        return Err(ApiError::invalid_argument(format!(
            "invalid snapshot name {name:?}: names beginning {SCHEDULED_PREFIX} are the snapshot schedule's"
        )));
    }
    Ok(())
}

/// Body of `POST /v1/shares/{name}/snapshots`. Without a name the daemon
/// names it after its time, `GMT-YYYY.MM.DD-HH.MM.SS`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSnapshot {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Body of POST /v1/shares/{source}/clone: a writable clone of share
/// `source` (at its snapshot `snapshot`; none: a snapshot `clone.NAME` is
/// taken first and deleted with the clone), served as share `share` (its
/// path must lie outside every share; its other options as any share's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewClone {
    pub share: Share,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

impl NewClone {
    pub fn validate(&self) -> Result<(), ApiError> {
        self.share.validate()?;
        if let Some(s) = &self.snapshot {
            validate_snapshot_name(s)?;
        }
        Ok(())
    }
}

/// Parses `SOURCE[@SNAPSHOT]` (duetctl's form of a clone's origin).
pub fn parse_origin(s: &str) -> Result<(String, Option<String>), ApiError> {
    let (share, snap) = match s.split_once('@') {
        Some((a, b)) => (a.to_string(), Some(b.to_string())),
        None => (s.to_string(), None),
    };
    validate_share_name(&share)?;
    if let Some(n) = &snap {
        validate_snapshot_name(n)?;
    }
    Ok((share, snap))
}

/// Snapshot names: 1-255 bytes, not `.` or `..`, no `/`, `@`, `\` or
/// control characters.
pub fn validate_snapshot_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.len() > 255 || name == "." || name == ".." {
        return Err(ApiError::invalid_argument(format!(
            "invalid snapshot name {name:?}: 1-255 bytes, not . or .."
        )));
    }
    if name.chars().any(|c| c == '/' || c == '@' || c == '\\' || c.is_control()) {
        return Err(ApiError::invalid_argument(format!(
            "invalid snapshot name {name:?}: no '/', '@', '\\' or control characters"
        )));
    }
    Ok(())
}

/// (year, month, day, hour, minute, second) of nanoseconds since the epoch, UTC.
pub use duet_fs::view::civil_utc;

/// `GMT-YYYY.MM.DD-HH.MM.SS` of a time: a snapshot's default name (the
/// SMB token without its `@`, which names may not hold).
pub fn gmt_name(ns: i64) -> String {
    let (y, m, d, hh, mm, ss) = civil_utc(ns);
    format!("GMT-{y:04}.{m:02}.{d:02}-{hh:02}.{mm:02}.{ss:02}")
}

/// `@GMT-YYYY.MM.DD-HH.MM.SS` of a time (MS-SMB2 2.2.32.2).
pub fn gmt_token(ns: i64) -> String {
    format!("@{}", gmt_name(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_and_gmt_tokens() {
        for bad in ["", ".", "..", "a/b", "a@b", "a\\b", "a\u{7}b", &"x".repeat(256)] {
            assert!(validate_snapshot_name(bad).is_err(), "{bad:?}");
        }
        for good in ["daily", "GMT-2026.12.03-13.20.00", "a b", "été"] {
            assert_eq!(validate_snapshot_name(good), Ok(()), "{good:?}");
        }
        // 2026-12-03T13:20:05Z
        assert_eq!(gmt_token(1_796_304_005_000_000_123), "@GMT-2026.12.03-13.20.05");
        assert_eq!(gmt_name(0), "GMT-1970.01.01-00.00.00");
    }

    #[test]
    fn intervals_schedules_and_manual_names() {
        assert_eq!(parse_interval("90s"), Ok(90));
        assert_eq!(parse_interval("15m"), Ok(900));
        assert_eq!(parse_interval("15"), Ok(900));
        assert_eq!(parse_interval(" 1h "), Ok(3600));
        assert_eq!(parse_interval("2d"), Ok(172_800));
        for bad in ["", "h", "1x", "1.5h", "-1m", "1 h", "99999999999999999999d"] {
            assert!(parse_interval(bad).is_err(), "{bad:?}");
        }
        for s in [1, 59, 60, 90, 900, 3600, 5400, 86_400, 172_800] {
            assert_eq!(parse_interval(&format_interval(s)), Ok(s), "{s}");
        }
        assert_eq!(format_interval(3600), "1h");
        assert!(SnapshotSchedule { every_s: 3600, keep: 24 }.validate().is_ok());
        assert!(SnapshotSchedule { every_s: 0, keep: 24 }.validate().is_err());
        assert!(SnapshotSchedule { every_s: SCHEDULE_EVERY_MAX_S + 1, keep: 24 }.validate().is_err());
        assert!(SnapshotSchedule { every_s: 60, keep: 0 }.validate().is_err());
        assert!(SnapshotSchedule { every_s: 60, keep: 257 }.validate().is_err());
        assert!(serde_json::from_str::<SnapshotSchedule>(r#"{"every_s":60,"keep":2,"x":1}"#).is_err());
        assert!(validate_manual_snapshot_name("auto-20261203T200000Z").is_err());
        assert!(validate_manual_snapshot_name("automatic").is_ok());
        assert!(validate_manual_snapshot_name("a/b").is_err());
    }

    #[test]
    fn share_defaults_from_minimal_json() {
        let s: Share = serde_json::from_str(r#"{"name":"public","path":"/public"}"#).unwrap();
        assert_eq!(s, Share::new("public", "/public"));
        assert_eq!(s.protocols, vec![Protocol::Smb, Protocol::Nfs]);
        assert!(!s.read_only && !s.guest_ok);
        assert_eq!(s.nfs.clients, vec!["*"]);
        assert!(s.nfs.root_squash);
        assert!(!s.nfs.append_extension);
        s.validate().unwrap();
        let s: Share =
            serde_json::from_str(r#"{"name":"p","path":"/p","nfs":{"root_squash":false}}"#)
                .unwrap();
        assert_eq!(s.nfs.clients, vec!["*"]);
        assert!(!s.nfs.root_squash);
    }

    #[test]
    fn share_json_shape() {
        let mut s = Share::new("a", "/a");
        s.protocols = vec![Protocol::Nfs];
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"name":"a","path":"/a","protocols":["nfs"],"read_only":false,
                "guest_ok":false,"nfs":{"clients":["*"],"root_squash":true,"append_extension":false}})
        );
        assert_eq!(serde_json::from_value::<Share>(v).unwrap(), s);
    }

    #[test]
    fn unknown_fields_rejected() {
        assert!(
            serde_json::from_str::<Share>(r#"{"name":"a","path":"/a","readonly":true}"#).is_err()
        );
        assert!(
            serde_json::from_str::<NewUser>(r#"{"name":"a","password":"x","home":"/"}"#).is_err()
        );
        assert!(
            serde_json::from_str::<Share>(r#"{"name":"a","path":"/a","protocols":["afp"]}"#)
                .is_err()
        );
    }

    #[test]
    fn share_names() {
        for ok in ["a", "public", "A.b_c-9", &"x".repeat(80)] {
            validate_share_name(ok).unwrap();
        }
        for bad in [
            "",
            ".hidden",
            "a b",
            "a/b",
            "é",
            "a\0",
            &"x".repeat(81),
            "a:b",
        ] {
            assert!(validate_share_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn share_paths() {
        for ok in ["/", "/public", "/a/b/c", "/a.b/..c/.d"] {
            validate_share_path(ok).unwrap();
        }
        for bad in [
            "", "public", "/a/", "/a//b", "/a/./b", "/a/..", "/..", "/.", "/a\0b", "//",
        ] {
            assert!(validate_share_path(bad).is_err(), "{bad:?}");
        }
        assert!(validate_share_path(&format!("/{}", "x".repeat(256))).is_err());
        assert!(validate_share_path(&"/x".repeat(3000)).is_err());
    }

    #[test]
    fn share_validate() {
        let mut s = Share::new("s", "/s");
        s.protocols.clear();
        assert!(s.validate().is_err());
        s.protocols = vec![Protocol::Smb, Protocol::Smb];
        assert!(s.validate().is_err());
        s.protocols = vec![Protocol::Nfs];
        s.nfs.clients = vec![
            "10.0.0.0/8".into(),
            "::1/128".into(),
            "*".into(),
            "192.168.1.7".into(),
        ];
        s.validate().unwrap();
        s.nfs.clients = vec!["10.0.0.0/33".into()];
        let e = s.validate().unwrap_err();
        assert_eq!(e.code, codes::INVALID_ARGUMENT);
        assert!(e.message.contains("10.0.0.0/33"), "{e}");
        s.nfs.clients.clear();
        assert!(s.validate().is_err());
        s.protocols = vec![Protocol::Smb];
        s.validate().unwrap();
    }

    #[test]
    fn users() {
        let mut u = NewUser {
            name: "alice".into(),
            password: "pw".into(),
            uid: None,
            gid: Some(100),
        };
        u.validate().unwrap();
        assert!(!format!("{u:?}").contains("pw\""));
        u.uid = Some(u32::MAX);
        assert!(u.validate().is_err());
        u.uid = Some(0);
        u.password = String::new();
        assert!(u.validate().is_err());
        u.password = "é".repeat(256);
        u.validate().unwrap();
        u.password.push('x');
        assert!(u.validate().is_err());
        for bad in ["", "a b", &"u".repeat(65), "a@b"] {
            assert!(validate_user_name(bad).is_err());
        }
        validate_user_name(".x").unwrap();
        let json = serde_json::to_string(&NewUser {
            name: "b".into(),
            password: "p".into(),
            uid: None,
            gid: None,
        })
        .unwrap();
        assert_eq!(json, r#"{"name":"b","password":"p"}"#);
    }

    #[test]
    fn protocol_parse() {
        assert_eq!("SMB".parse::<Protocol>().unwrap(), Protocol::Smb);
        assert_eq!("nfs".parse::<Protocol>().unwrap(), Protocol::Nfs);
        assert!("afp".parse::<Protocol>().is_err());
        assert_eq!(serde_json::to_string(&Protocol::Smb).unwrap(), "\"smb\"");
    }

    #[test]
    fn error_statuses() {
        assert_eq!(ApiError::invalid_argument("x").http_status(), 400);
        assert_eq!(ApiError::unauthorized("x").http_status(), 401);
        assert_eq!(ApiError::not_found("x").http_status(), 404);
        assert_eq!(ApiError::already_exists("x").http_status(), 409);
        assert_eq!(ApiError::internal("x").http_status(), 500);
        assert_eq!(ApiError::new("weird", "x").http_status(), 500);
        for s in [400, 401, 404, 405, 409, 413] {
            assert_eq!(
                ApiError::new(ApiError::code_for_status(s), "").http_status(),
                s
            );
        }
    }

    #[test]
    fn cluster_status_json_shape() {
        let c = ClusterStatus {
            leader: Some(1),
            term: 3,
            voters: vec![1],
            nodes: vec![ClusterNode { id: 1, addr: "127.0.0.11:7446".into(), applied: 812, healthy: true, ..Default::default() }],
            receiving_snapshot: None,
            public_addresses: Vec::new(),
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"leader": 1, "term": 3, "voters": [1],
                "nodes": [{"id": 1, "addr": "127.0.0.11:7446", "applied": 812, "healthy": true}]})
        );
        let known = ClusterNode { destaged_upto: Some(40), destage_queue: Some(2), ..c.nodes[0].clone() };
        assert_eq!(
            serde_json::to_value(&known).unwrap(),
            serde_json::json!({"id": 1, "addr": "127.0.0.11:7446", "applied": 812, "healthy": true,
                "destaged_upto": 40, "destage_queue": 2})
        );
        assert_eq!(serde_json::from_value::<ClusterNode>(serde_json::to_value(&known).unwrap()).unwrap(), known);
        assert!(c.problems().is_empty());
        let none = ClusterStatus { leader: None, nodes: vec![ClusterNode { healthy: false, ..c.nodes[0].clone() }], ..c };
        assert_eq!(serde_json::to_value(&none).unwrap()["leader"], serde_json::Value::Null);
        assert_eq!(none.problems().len(), 2, "{:?}", none.problems());
    }

    #[test]
    fn nfs_allows() {
        let rules = NfsExportRules {
            clients: vec!["10.1.0.0/16".into()],
            ..Default::default()
        };
        assert!(rules.allows("10.1.2.3".parse().unwrap()));
        assert!(!rules.allows("10.2.2.3".parse().unwrap()));
        assert!(NfsExportRules::default().allows("::1".parse().unwrap()));
    }
}
