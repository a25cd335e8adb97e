//! duetctl: the admin CLI of duet. It talks to duetd's admin API (HTTP/1.1
//! + JSON, see the duet-admin-api crate).
//!
//! Exit statuses: see [`error::exit`] (and `duetctl --help`).

mod bench;
mod bench_cmd;
mod bench_conn;
mod rt;
mod client;
mod error;
mod output;
mod password;
mod progress;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use duet_admin_api::{
    validate_id, validate_share_name, validate_user_name, AdminRequest, AdminResponse, Credentials,
    NewUser, Protocol, Share, ShareChanges, UserChanges, DEFAULT_ADDR, DEFAULT_DATA_DIR, TOKEN_FILE_NAME,
};

use client::Client;
use error::{exit, CtlError};

#[derive(Parser, Debug)]
#[command(
    name = "duetctl",
    version,
    about = "Administer a duet NAS appliance",
    propagate_version = true,
    after_help = error::EXIT_HELP
)]
struct Cli {
    /// Admin API address of duetd
    #[arg(long, global = true, help_heading = "Global options", env = "DUET_ADMIN_ADDR", default_value = DEFAULT_ADDR, value_name = "HOST:PORT")]
    addr: String,

    /// CA certificate(s) to trust for an https:// --addr [default:
    /// <data-dir>/admin-tls/ca.pem, the CA duetd made]
    #[arg(long, global = true, help_heading = "Global options", env = "DUET_TLS_CA", value_name = "PATH")]
    tls_ca: Option<PathBuf>,

    /// API token (default: read from --token-file)
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "DUET_ADMIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: Option<String>,

    /// File holding the API token [default: <data-dir>/admin.token]
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_name = "PATH"
    )]
    token_file: Option<PathBuf>,

    /// duetd's data directory (where the token file is)
    #[arg(long, global = true, help_heading = "Global options", env = "DUET_DATA_DIR", default_value = DEFAULT_DATA_DIR, value_name = "DIR")]
    data_dir: PathBuf,

    /// Authenticate as this admin user (HTTP Basic) instead of with the
    /// token; its password comes from --admin-password-file,
    /// --admin-password-stdin, $DUET_ADMIN_PASSWORD or a prompt
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        value_name = "NAME"
    )]
    user: Option<String>,

    /// Read the password of --user from the first line of this file
    #[arg(long, global = true, help_heading = "Global options", value_name = "PATH", conflicts_with = "admin_password_stdin")]
    admin_password_file: Option<PathBuf>,

    /// Read the password of --user from one line of stdin
    #[arg(long, global = true, help_heading = "Global options")]
    admin_password_stdin: bool,

    /// Do not ask before destructive commands (share remove, rm -r)
    #[arg(long, short = 'y', global = true, help_heading = "Global options")]
    yes: bool,

    /// Print the daemon's raw JSON instead of tables
    #[arg(long, global = true, help_heading = "Global options")]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the daemon's status (exit status 7 when the node is unhealthy)
    Status,
    /// The metadata raft group: leader, term, voters, nodes
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Manage shares
    #[command(subcommand)]
    Share(ShareCmd),
    /// Read-only snapshots of a share (NFS `.snapshot/NAME/`, SMB
    /// Previous Versions)
    #[command(subcommand)]
    Snapshot(SnapshotCmd),
    /// Manage users
    #[command(subcommand)]
    User(UserCmd),
    /// The admin API's own users (not SMB users)
    #[command(subcommand)]
    Admin(AdminCmd),
    /// Show back-end operation counts, in total and per protocol request
    Stats,
    /// Check the file system's consistency (exit status 1 if problems are found)
    Fsck,
    /// Benchmark SMB and NFS servers (duet and others) side by side
    Bench(Box<bench_cmd::BenchArgs>),
    /// Copy files or trees on an NFSv4.2 server (server-side COPY, vectorised COMPOUNDs)
    Cp(bench_cmd::CpArgs),
    /// Remove files or trees on an NFSv4.1 server (vectorised COMPOUNDs)
    Rm(bench_cmd::RmArgs),
    /// Show the audit log: admin changes and refused logons, newest last
    Audit {
        /// How many of the newest entries to show
        #[arg(long, default_value_t = 50, value_name = "N")]
        last: usize,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print duetctl's man page, or write every page (duetctl.1,
    /// duetctl-share.1, ...) into --out
    Man {
        /// Directory to write the pages into
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Testing only: make the next COUNT I/Os at POINT fail with EIO
    /// (needs `[testing] fault_injection = true` in duetd's configuration)
    #[command(hide = true)]
    Fault {
        /// wal-write, wal-sync, data-read, chunk-write, chunk-sync, meta-sync or meta-read
        point: String,
        /// How many operations fail (0 cancels)
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
}

#[derive(Subcommand, Debug)]
enum ClusterCmd {
    /// Show the leader, term, voters and each node's address, applied
    /// index and health (exit status 7 without a leader or with an
    /// unhealthy node)
    Status,
    /// Hand raft leadership to voter ID (ask the current leader; waits
    /// until ID leads, at most 10 s)
    TransferLeader {
        /// The voter to make leader
        id: u64,
    },
    /// Add voter ID, whose `[cluster] listen` is ADDR (ADDRESS:PORT); start
    /// it with `[cluster] join = true` (docs/cluster.md). Waits until the
    /// change is applied (at most 10 s); exit status 4 if ID is a voter
    /// or another change is in progress
    Add {
        /// The new voter's id
        id: u64,
        /// Its cluster address, ADDRESS:PORT
        #[arg(value_name = "ADDR")]
        cluster_addr: String,
    },
    /// Remove voter ID (not the last one); exit status 3 if ID is not a
    /// voter, 4 if another change is in progress
    Remove {
        /// The voter to remove
        id: u64,
    },
}

#[derive(Subcommand, Debug)]
enum ShareCmd {
    /// Add a share
    Add(ShareAddArgs),
    /// List shares
    #[command(visible_alias = "ls")]
    List,
    /// Show one share
    Show { name: String },
    /// Change a share's options in place (clients stay connected)
    Modify(ShareModifyArgs),
    /// Make share NEW a writable clone of SOURCE (at its snapshot SNAPSHOT;
    /// without one a snapshot clone.NEW is taken and deleted with the
    /// clone), in constant time whatever SOURCE's size; remove it with
    /// `share remove NEW`. Exit status 3 for an unknown share or snapshot,
    /// 4 if NEW exists, 2 for a bad name, a path inside a share or a clone
    /// more than 8 deep
    Clone(ShareCloneArgs),
    /// Remove a share (the files stay; asks first unless --yes)
    #[command(visible_alias = "rm")]
    Remove { name: String },
}

#[derive(Subcommand, Debug)]
enum SnapshotCmd {
    /// Take a snapshot of SHARE, named NAME (default: its time,
    /// GMT-YYYY.MM.DD-HH.MM.SS); constant time whatever the share's size.
    /// Exit status 3 for an unknown share, 4 if NAME exists, 2 for a bad
    /// name or more than 256 snapshots
    Create {
        /// The share
        share: String,
        /// The snapshot's name (no '/', '@', '\\' or control characters)
        name: Option<String>,
    },
    /// List the snapshots of SHARE, oldest first (name, time, SMB token,
    /// the space only it holds: what deleting it would free, whether the
    /// schedule took it, the clone standing on it)
    #[command(visible_alias = "ls")]
    List {
        /// The share
        share: String,
    },
    /// Take a snapshot of SHARE every INTERVAL (auto-YYYYMMDDTHHMMSSZ, UTC
    /// slots from the epoch), keeping the newest KEEP of them (manual
    /// snapshots and those a clone stands on are never deleted by it); on
    /// the cluster's leader, whichever node that is. Exit status 2 for a
    /// bad value (interval 1 min to a year, keep 1 to 256), 3 for an
    /// unknown share
    Schedule {
        /// The share
        share: String,
        /// 30s, 15m, 1h, 1d (a bare number is minutes)
        #[arg(long, value_name = "INTERVAL", required_unless_present = "off", conflicts_with = "off")]
        every: Option<String>,
        /// How many scheduled snapshots to keep
        #[arg(long, value_name = "KEEP", required_unless_present = "off", conflicts_with = "off")]
        keep: Option<u32>,
        /// Remove the schedule (its snapshots stay)
        #[arg(long)]
        off: bool,
    },
    /// Delete snapshot NAME of SHARE: the space only it holds is reclaimed
    /// (asks first unless --yes)
    #[command(visible_alias = "rm")]
    Delete {
        /// The share
        share: String,
        /// The snapshot
        name: String,
    },
}

#[derive(Args, Debug)]
struct ShareModifyArgs {
    /// Share name
    name: String,
    /// Protocols to serve the share over
    #[arg(long, value_name = "smb,nfs")]
    protocols: Option<String>,
    /// Export read-only
    #[arg(long, conflicts_with = "read_write")]
    read_only: bool,
    /// Export read-write
    #[arg(long)]
    read_write: bool,
    /// Allow guest (unauthenticated) SMB access
    #[arg(long, conflicts_with = "no_guest_ok")]
    guest_ok: bool,
    /// Refuse guest SMB access
    #[arg(long)]
    no_guest_ok: bool,
    /// NFS clients allowed to mount: CIDRs, addresses or *
    #[arg(long, value_name = "CIDR,...")]
    nfs_clients: Option<String>,
    /// Map NFS root (uid 0) to the anonymous user
    #[arg(long, conflicts_with = "no_root_squash")]
    root_squash: bool,
    /// Do not map NFS root to the anonymous user
    #[arg(long)]
    no_root_squash: bool,
    /// Allow the NFS append extension
    #[arg(long, conflicts_with = "no_append_extension")]
    append_extension: bool,
    /// Refuse the NFS append extension
    #[arg(long)]
    no_append_extension: bool,
    /// SMB users allowed to connect ("" for every user)
    #[arg(long, value_name = "USER,...")]
    users: Option<String>,
    /// always: every change on disk before its reply; protocol: on disk
    /// before the reply when the protocol promises it (SMB WRITE_THROUGH,
    /// FLUSH; NFS stable WRITE, COMMIT, metadata), the rest within
    /// [durability] window_ms (docs/durability.md)
    #[arg(long, value_name = "always|protocol")]
    durability: Option<String>,
}

/// `Some(true)` for `--x`, `Some(false)` for `--no-x`, None for neither.
fn flag_pair(on: bool, off: bool) -> Option<bool> {
    match (on, off) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    }
}

#[derive(Args, Debug)]
struct ShareAddArgs {
    /// Share name (SMB share and NFS export name)
    name: String,
    /// Absolute path in duet's namespace, e.g. /public (created if missing)
    #[arg(long, value_name = "PATH")]
    path: String,
    #[command(flatten)]
    opts: ShareOptions,
}

#[derive(Args, Debug)]
struct ShareCloneArgs {
    /// The share to clone, SOURCE or SOURCE@SNAPSHOT
    #[arg(value_name = "SOURCE[@SNAPSHOT]")]
    origin: String,
    /// The clone's share name
    #[arg(value_name = "NEW")]
    name: String,
    /// Absolute path of the clone's directory, outside every share
    /// (default: /clones/NEW)
    #[arg(long, value_name = "PATH")]
    path: Option<String>,
    #[command(flatten)]
    opts: ShareOptions,
}

/// The options `share add` and `share clone` share.
#[derive(Args, Debug)]
struct ShareOptions {
    /// Protocols to serve the share over
    #[arg(long, default_value = "smb,nfs", value_name = "smb,nfs")]
    protocols: String,
    /// Export read-only
    #[arg(long)]
    read_only: bool,
    /// Allow guest (unauthenticated) SMB access
    #[arg(long)]
    guest_ok: bool,
    /// NFS clients allowed to mount: CIDRs, addresses or *
    #[arg(long, default_value = "*", value_name = "CIDR,...")]
    nfs_clients: String,
    /// Do not map NFS root (uid 0) to the anonymous user
    #[arg(long)]
    no_root_squash: bool,
    /// Allow the NFS append extension (WRITE at offset 2^64-1 appends)
    #[arg(long)]
    append_extension: bool,
    /// SMB users allowed to connect (default: every user)
    #[arg(long, default_value = "", value_name = "USER,...")]
    users: String,
    /// always (default): every change on disk before its reply; protocol:
    /// on disk before the reply when the protocol promises it (SMB
    /// WRITE_THROUGH, FLUSH; NFS stable WRITE, COMMIT, metadata), the rest
    /// within [durability] window_ms (docs/durability.md)
    #[arg(long, default_value = "always", value_name = "always|protocol")]
    durability: String,
}

impl ShareOptions {
    /// Sets these options on `share`.
    fn apply(&self, share: &mut Share) -> Result<(), CtlError> {
        share.protocols = split_list(&self.protocols)
            .iter()
            .map(|p| p.parse::<Protocol>())
            .collect::<Result<_, _>>()
            .map_err(CtlError::usage)?;
        share.read_only = self.read_only;
        share.guest_ok = self.guest_ok;
        share.nfs.clients = split_list(&self.nfs_clients);
        share.nfs.root_squash = !self.no_root_squash;
        share.nfs.append_extension = self.append_extension;
        share.users = split_list(&self.users);
        share.durability = self.durability.parse::<duet_admin_api::Durability>().map_err(CtlError::usage)?;
        Ok(())
    }
}

/// The new password of a user (never the admin's: that is
/// --admin-password-file / --admin-password-stdin).
#[derive(Args, Debug)]
struct PasswordArgs {
    /// Read the user's password from one line of stdin
    #[arg(long, conflicts_with_all = ["password", "password_file"])]
    password_stdin: bool,
    /// Read the user's password from the first line of this file
    #[arg(long, value_name = "PATH", conflicts_with = "password")]
    password_file: Option<PathBuf>,
    /// The user's password on the command line (visible to other local
    /// users: prefer --password-file or --password-stdin)
    #[arg(long, value_name = "PASSWORD")]
    password: Option<String>,
}

impl PasswordArgs {
    fn source(&self) -> password::Source {
        if let Some(p) = &self.password {
            password::Source::Given(p.clone())
        } else if let Some(f) = &self.password_file {
            password::Source::File(f.clone())
        } else if self.password_stdin {
            password::Source::Stdin
        } else {
            password::Source::Prompt
        }
    }
}

#[derive(Subcommand, Debug)]
enum AdminCmd {
    /// Change an admin password (at least 12 characters; prompts twice if
    /// none is given). Signed in as that admin, or with the local token
    /// (root on the appliance: the way back in when it is forgotten).
    /// Every console session of that admin ends.
    Passwd {
        /// The admin user
        #[arg(default_value = "admin", value_name = "ADMIN")]
        admin: String,
        #[command(flatten)]
        password: PasswordArgs,
    },
}

#[derive(Subcommand, Debug)]
enum UserCmd {
    /// Add a user (prompts for the password if none is given)
    Add {
        name: String,
        #[command(flatten)]
        password: PasswordArgs,
        /// POSIX uid [default: chosen by duetd]
        #[arg(long)]
        uid: Option<u32>,
        /// POSIX gid [default: chosen by duetd]
        #[arg(long)]
        gid: Option<u32>,
    },
    /// List users
    #[command(visible_alias = "ls")]
    List,
    /// Change a user's uid, gid, or whether it may log on
    Modify {
        name: String,
        /// New POSIX uid
        #[arg(long)]
        uid: Option<u32>,
        /// New POSIX gid
        #[arg(long)]
        gid: Option<u32>,
        /// Let the user log on
        #[arg(long, conflicts_with = "disable")]
        enable: bool,
        /// Refuse the user's logons (its files stay)
        #[arg(long)]
        disable: bool,
    },
    /// Change a user's password
    Passwd {
        name: String,
        #[command(flatten)]
        password: PasswordArgs,
    },
    /// Remove a user
    #[command(visible_alias = "rm")]
    Remove { name: String },
}

/// Splits "a, b,,c" into ["a", "b", "c"].
fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

/// The request for a command, validated as far as possible without I/O;
/// `password` is set when a user password still has to be read.
struct Prepared {
    request: AdminRequest,
    password: Option<password::Source>,
}

fn prepare(cmd: &Command) -> Result<Prepared, CtlError> {
    let ready = |request: AdminRequest| -> Result<Prepared, CtlError> {
        request.validate().map_err(CtlError::usage)?;
        Ok(Prepared {
            request,
            password: None,
        })
    };
    // A user password not given on the command line is read later, after
    // everything else has been checked.
    let with_password =
        |request: AdminRequest, source: password::Source| -> Result<Prepared, CtlError> {
            match source {
                password::Source::Given(p) => ready(fill_password(request, p)),
                source => Ok(Prepared {
                    request,
                    password: Some(source),
                }),
            }
        };
    match cmd {
        Command::Status => ready(AdminRequest::Status),
        Command::Cluster(ClusterCmd::Status) => ready(AdminRequest::Cluster),
        Command::Cluster(ClusterCmd::TransferLeader { id }) => {
            ready(AdminRequest::TransferLeader(duet_admin_api::LeaderTransfer { to: *id }))
        }
        Command::Cluster(ClusterCmd::Add { id, cluster_addr }) => {
            ready(AdminRequest::MemberAdd(duet_admin_api::MemberAdd { id: *id, addr: cluster_addr.clone() }))
        }
        Command::Cluster(ClusterCmd::Remove { id }) => ready(AdminRequest::MemberRemove(*id)),
        Command::Stats => ready(AdminRequest::Stats),
        Command::Fsck => ready(AdminRequest::Fsck),
        Command::Audit { .. } => ready(AdminRequest::Audit),
        Command::Fault { point, count } => {
            let spec = duet_admin_api::FaultSpec { point: point.clone(), count: *count };
            spec.validate().map_err(CtlError::usage)?;
            ready(AdminRequest::Fault(spec))
        }
        Command::Bench(_) | Command::Cp(_) | Command::Rm(_) | Command::Completions { .. } | Command::Man { .. } => {
            Err(CtlError::Usage("this command does not use the admin API request path".into()))
        }
        Command::Share(ShareCmd::Modify(a)) => {
            validate_share_name(&a.name).map_err(CtlError::usage)?;
            let protocols = match &a.protocols {
                Some(p) => Some(
                    split_list(p).iter().map(|p| p.parse::<Protocol>()).collect::<Result<Vec<_>, _>>().map_err(CtlError::usage)?,
                ),
                None => None,
            };
            let changes = ShareChanges {
                protocols,
                read_only: flag_pair(a.read_only, a.read_write),
                guest_ok: flag_pair(a.guest_ok, a.no_guest_ok),
                nfs_clients: a.nfs_clients.as_deref().map(split_list),
                root_squash: flag_pair(a.root_squash, a.no_root_squash),
                append_extension: flag_pair(a.append_extension, a.no_append_extension),
                users: a.users.as_deref().map(split_list),
                durability: match &a.durability {
                    Some(d) => Some(d.parse::<duet_admin_api::Durability>().map_err(CtlError::usage)?),
                    None => None,
                },
            };
            ready(AdminRequest::ShareModify { name: a.name.clone(), changes })
        }
        Command::User(UserCmd::Modify { name, uid, gid, enable, disable }) => {
            validate_user_name(name).map_err(CtlError::usage)?;
            let changes = UserChanges { uid: *uid, gid: *gid, enabled: flag_pair(*enable, *disable) };
            ready(AdminRequest::UserModify { name: name.clone(), changes })
        }
        Command::Share(ShareCmd::List) => ready(AdminRequest::ShareList),
        Command::Share(ShareCmd::Show { name }) => ready(AdminRequest::ShareShow(name.clone())),
        Command::Share(ShareCmd::Remove { name }) => ready(AdminRequest::ShareRemove(name.clone())),
        Command::Snapshot(SnapshotCmd::Create { share, name }) => ready(AdminRequest::SnapshotCreate {
            share: share.clone(),
            snapshot: duet_admin_api::NewSnapshot { name: name.clone() },
        }),
        Command::Snapshot(SnapshotCmd::List { share }) => ready(AdminRequest::SnapshotList(share.clone())),
        Command::Snapshot(SnapshotCmd::Schedule { share, every, keep, off }) => {
            validate_share_name(share).map_err(CtlError::usage)?;
            let schedule = match (every, keep, off) {
                (_, _, true) => None,
                (Some(e), Some(k), false) => {
                    let s = duet_admin_api::SnapshotSchedule {
                        every_s: duet_admin_api::parse_interval(e).map_err(CtlError::usage)?,
                        keep: *k,
                    };
                    s.validate().map_err(CtlError::usage)?;
                    Some(s)
                }
                _ => return Err(CtlError::usage(duet_admin_api::ApiError::invalid_argument("give --every and --keep, or --off"))),
            };
            ready(AdminRequest::SnapshotSchedule { share: share.clone(), schedule })
        }
        Command::Snapshot(SnapshotCmd::Delete { share, name }) => {
            ready(AdminRequest::SnapshotDelete { share: share.clone(), name: name.clone() })
        }
        Command::Share(ShareCmd::Clone(a)) => {
            let (source, snapshot) = duet_admin_api::parse_origin(&a.origin).map_err(CtlError::usage)?;
            validate_share_name(&a.name).map_err(CtlError::usage)?;
            let path = a.path.clone().unwrap_or_else(|| format!("/clones/{}", a.name));
            let mut share = Share::new(a.name.clone(), path);
            a.opts.apply(&mut share)?;
            ready(AdminRequest::ShareClone { source, clone: duet_admin_api::NewClone { share, snapshot } })
        }
        Command::Share(ShareCmd::Add(a)) => {
            validate_share_name(&a.name).map_err(CtlError::usage)?;
            let mut share = Share::new(a.name.clone(), a.path.clone());
            a.opts.apply(&mut share)?;
            ready(AdminRequest::ShareAdd(share))
        }
        Command::User(UserCmd::List) => ready(AdminRequest::UserList),
        Command::User(UserCmd::Remove { name }) => ready(AdminRequest::UserRemove(name.clone())),
        Command::User(UserCmd::Add {
            name,
            password,
            uid,
            gid,
        }) => {
            validate_user_name(name).map_err(CtlError::usage)?;
            if let Some(uid) = uid {
                validate_id("uid", *uid).map_err(CtlError::usage)?;
            }
            if let Some(gid) = gid {
                validate_id("gid", *gid).map_err(CtlError::usage)?;
            }
            let user = NewUser {
                name: name.clone(),
                password: String::new(),
                uid: *uid,
                gid: *gid,
            };
            with_password(AdminRequest::UserAdd(user), password.source())
        }
        Command::Admin(AdminCmd::Passwd { admin, password }) => {
            validate_user_name(admin).map_err(CtlError::usage)?;
            let request = AdminRequest::AdminPasswd(duet_admin_api::AdminPasswordChange {
                user: admin.clone(),
                password: String::new(),
                current: None,
            });
            with_password(request, password.source())
        }
        Command::User(UserCmd::Passwd { name, password }) => {
            validate_user_name(name).map_err(CtlError::usage)?;
            let request = AdminRequest::UserPasswd {
                name: name.clone(),
                password: String::new(),
            };
            with_password(request, password.source())
        }
    }
}

fn fill_password(request: AdminRequest, password: String) -> AdminRequest {
    match request {
        AdminRequest::UserAdd(mut u) => {
            u.password = password;
            AdminRequest::UserAdd(u)
        }
        AdminRequest::UserPasswd { name, .. } => AdminRequest::UserPasswd { name, password },
        AdminRequest::AdminPasswd(mut c) => {
            c.password = password;
            AdminRequest::AdminPasswd(c)
        }
        other => other,
    }
}

/// How the CLI authenticated, for the hint after a 401.
enum AuthSource {
    Token,
    TokenFile(PathBuf),
    User(String),
}

impl Cli {
    /// The API client for --addr: TLS for an https:// address, trusting
    /// --tls-ca or the CA duetd made in its data directory.
    fn client(&self, creds: Credentials) -> Result<Client, CtlError> {
        let client = Client::new(&self.addr, creds);
        if !client::is_https(&self.addr) {
            return Ok(client);
        }
        let ca = self.tls_ca.clone().unwrap_or_else(|| self.data_dir.join("admin-tls/ca.pem"));
        if !ca.exists() {
            return Err(CtlError::Usage(format!(
                "{} does not exist: give --tls-ca with the CA certificate that signed duetd's admin certificate \
                 (the data directory's admin-tls/ca.pem on the server)",
                ca.display()
            )));
        }
        client.with_tls(client::tls_config(&ca)?)
    }

    fn token_file(&self) -> PathBuf {
        self.token_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join(TOKEN_FILE_NAME))
    }

    fn credentials(&self) -> Result<(Credentials, AuthSource), CtlError> {
        if let Some(user) = &self.user {
            let password = if let Some(f) = &self.admin_password_file {
                password::read_file_line(f).map_err(|e| CtlError::Credentials(e.to_string()))?
            } else if self.admin_password_stdin {
                password::read_stdin_line()?
            } else if let Ok(p) = std::env::var("DUET_ADMIN_PASSWORD") {
                p
            } else if password::stdin_is_terminal() {
                password::prompt_hidden(&format!("Password for {user}: "))?
            } else {
                return Err(CtlError::Credentials(format!(
                    "--user {user} needs a password: --admin-password-file, --admin-password-stdin or DUET_ADMIN_PASSWORD"
                )));
            };
            return Ok((
                Credentials::Basic {
                    user: user.clone(),
                    password,
                },
                AuthSource::User(user.clone()),
            ));
        }
        if let Some(token) = &self.token {
            let token = token.trim();
            if token.is_empty() {
                return Err(CtlError::Credentials(
                    "the API token given by --token or DUET_ADMIN_TOKEN is empty".into(),
                ));
            }
            return Ok((Credentials::Bearer(token.to_string()), AuthSource::Token));
        }
        let path = self.token_file();
        let token = std::fs::read_to_string(&path).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (the token file is readable by root only: run as root, or use --token or --user)"
            } else {
                " (is --data-dir or DUET_DATA_DIR duetd's data directory? or use --token, --token-file or --user)"
            };
            CtlError::Credentials(format!("cannot read the API token from {}: {e}{hint}", path.display()))
        })?;
        let token = token.trim();
        if token.is_empty() {
            return Err(CtlError::Credentials(format!(
                "the token file {} is empty",
                path.display()
            )));
        }
        Ok((
            Credentials::Bearer(token.to_string()),
            AuthSource::TokenFile(path),
        ))
    }
}

/// `client.call(request)` on a thread while this one shows how long the
/// daemon has been at it (see [`progress`]).
fn call_with_progress(
    client: &client::Client,
    request: &AdminRequest,
    what: &'static str,
) -> Result<client::Reply, CtlError> {
    std::thread::scope(|s| {
        let h = s.spawn(|| client.call(request));
        let mut p = progress::Progress::new(what, false);
        let t = std::time::Instant::now();
        while !h.is_finished() {
            p.update(&format!("running in the daemon for {} s", t.elapsed().as_secs()));
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        p.finish();
        h.join().unwrap_or_else(|_| Err(CtlError::BadReply("the request thread panicked".into())))
    })
}

fn unauthorized_hint(auth: &AuthSource, token_file: &std::path::Path) -> String {
    match auth {
        AuthSource::TokenFile(p) => format!(
            "the token in {} was refused; duetd writes its current token there at startup: check that \
             --data-dir/--token-file name the running daemon's data directory",
            p.display()
        ),
        AuthSource::Token => format!(
            "the token from --token/DUET_ADMIN_TOKEN was refused; duetd's current token is in {}",
            token_file.display()
        ),
        AuthSource::User(u) => format!(
            "user {u} or its password was refused; or use the API token in {}",
            token_file.display()
        ),
    }
}

/// Writes to stdout, ignoring errors (a closed pipe is not worth a panic).
fn out(s: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(s.as_bytes());
    let _ = stdout.flush();
}

/// Asks before a destructive command unless --yes; without a terminal it
/// refuses.
fn confirm_destructive(cli: &Cli, what: &str) -> Result<(), CtlError> {
    if cli.yes {
        return Ok(());
    }
    if !password::stdin_is_terminal() {
        return Err(CtlError::Usage(format!("{what}: refusing without a terminal to ask on; pass --yes")));
    }
    if password::confirm(&format!("{what}?"))? {
        Ok(())
    } else {
        Err(CtlError::Usage("not confirmed; nothing was changed".into()))
    }
}

fn run(cli: &Cli) -> Result<ExitCode, CtlError> {
    let prepared = prepare(&cli.command)?;
    if let AdminRequest::ShareRemove(name) = &prepared.request {
        confirm_destructive(cli, &format!("remove share {name} (its files stay)"))?;
    }
    if let AdminRequest::SnapshotDelete { share, name } = &prepared.request {
        confirm_destructive(cli, &format!("delete snapshot {name} of share {share}"))?;
    }
    if cli.admin_password_stdin && cli.user.is_some() && prepared.password.as_ref().is_some_and(|p| {
        matches!(p, password::Source::Stdin) || (matches!(p, password::Source::Prompt) && !password::stdin_is_terminal())
    }) {
        return Err(CtlError::Usage(
            "--admin-password-stdin and the user's password cannot both come from stdin: use --password-file".into(),
        ));
    }
    let (creds, auth) = cli.credentials()?;
    let request = match &prepared.password {
        None => prepared.request,
        Some(source) => {
            let request = fill_password(prepared.request, password::read_new_password(source)?);
            request.validate().map_err(CtlError::usage)?;
            request
        }
    };
    let client = cli.client(creds)?;
    let called = if matches!(request, AdminRequest::Fsck) {
        // fsck runs in the daemon as one request: what can be shown is
        // that it is still running.
        call_with_progress(&client, &request, "fsck")
    } else {
        client.call(&request)
    };
    let reply = match called {
        Ok(r) => r,
        Err(e) if e.is_unauthorized() => {
            eprintln!("duetctl: {e}");
            eprintln!(
                "duetctl: hint: {}",
                unauthorized_hint(&auth, &cli.token_file())
            );
            return Ok(ExitCode::from(exit::UNAUTHORIZED));
        }
        Err(e) => return Err(e),
    };
    let fsck_failed = matches!(&reply.response, AdminResponse::Fsck(r) if !r.problems.is_empty());
    let unhealthy = match &reply.response {
        AdminResponse::Status(s) => s.problems(),
        // A membership change that applied succeeded, whatever the new
        // node's health right after it.
        AdminResponse::Cluster(_) if matches!(request, AdminRequest::MemberAdd(_) | AdminRequest::MemberRemove(_)) => Vec::new(),
        AdminResponse::Cluster(c) => c.problems(),
        _ => Vec::new(),
    };
    if cli.json {
        if !reply.raw.is_empty() {
            let mut text = String::from_utf8_lossy(&reply.raw).into_owned();
            if !text.ends_with('\n') {
                text.push('\n');
            }
            out(&text);
        }
    } else {
        let last = match &cli.command {
            Command::Audit { last } => *last,
            _ => usize::MAX,
        };
        out(&human(&request, &reply.response, last));
    }
    for p in &unhealthy {
        eprintln!("duetctl: unhealthy: {p}");
    }
    Ok(if fsck_failed {
        ExitCode::from(exit::PROBLEMS)
    } else if !unhealthy.is_empty() {
        ExitCode::from(exit::UNHEALTHY)
    } else {
        ExitCode::SUCCESS
    })
}

fn human(request: &AdminRequest, response: &AdminResponse, last: usize) -> String {
    match (request, response) {
        (_, AdminResponse::Status(s)) => output::status(s),
        (AdminRequest::TransferLeader(t), AdminResponse::Cluster(c)) => {
            format!("node {} is the leader now (term {})\n{}", t.to, c.term, output::cluster(c))
        }
        (AdminRequest::MemberAdd(m), AdminResponse::Cluster(c)) => {
            format!("added node {} ({}); voters now {:?}\n{}", m.id, m.addr, c.voters, output::cluster(c))
        }
        (AdminRequest::MemberRemove(id), AdminResponse::Cluster(c)) => {
            format!("removed node {id}; voters now {:?}\n{}", c.voters, output::cluster(c))
        }
        (_, AdminResponse::Cluster(c)) => output::cluster(c),
        (_, AdminResponse::Shares(s)) => output::share_list(s),
        (AdminRequest::ShareModify { .. }, AdminResponse::Share(s)) => {
            format!("changed share {}\n{}", s.name, output::share_show(s))
        }
        (AdminRequest::SnapshotSchedule { share, schedule: Some(_) }, AdminResponse::Share(s)) => {
            format!("share {share}: {}\n", output::schedule(s.snapshot_schedule.as_ref()))
        }
        (AdminRequest::SnapshotSchedule { share, schedule: None }, AdminResponse::Share(_)) => {
            format!("share {share}: no snapshot schedule (its snapshots stay)\n")
        }
        (_, AdminResponse::Share(s)) => output::share_show(s),
        (AdminRequest::ShareClone { .. }, AdminResponse::ShareCreated(s)) => format!(
            "made share {} at {}, a writable clone of {}\n",
            s.name,
            s.path,
            s.origin.as_deref().unwrap_or("?")
        ),
        (_, AdminResponse::ShareCreated(s)) => format!(
            "added share {} at {} ({})\n",
            s.name,
            s.path,
            s.protocols
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (_, AdminResponse::Snapshots(s)) => output::snapshot_list(s),
        (AdminRequest::SnapshotCreate { share, .. }, AdminResponse::SnapshotCreated(s)) => format!(
            "took snapshot {} of share {share} at {} ({}; NFS: .snapshot/{}/)\n",
            s.name,
            output::utc(s.created_ns),
            s.gmt,
            s.name
        ),
        (_, AdminResponse::SnapshotCreated(s)) => format!("took snapshot {}\n", s.name),
        (AdminRequest::SnapshotDelete { share, name }, AdminResponse::NoContent) => {
            format!("deleted snapshot {name} of share {share}\n")
        }
        (_, AdminResponse::Users(u)) => output::user_list(u),
        (_, AdminResponse::User(u)) => format!(
            "changed user {} (uid {}, gid {}, {})\n",
            u.name,
            u.uid,
            u.gid,
            if u.enabled { "enabled" } else { "disabled" }
        ),
        (_, AdminResponse::UserCreated(u)) => {
            format!("added user {} (uid {}, gid {})\n", u.name, u.uid, u.gid)
        }
        (_, AdminResponse::Stats(s)) => output::stats(s),
        (_, AdminResponse::Fsck(r)) => output::fsck(r),
        (_, AdminResponse::Audit(a)) => output::audit(a, last),
        (AdminRequest::ShareRemove(n), AdminResponse::NoContent) => format!("removed share {n}\n"),
        (AdminRequest::UserRemove(n), AdminResponse::NoContent) => format!("removed user {n}\n"),
        (AdminRequest::UserPasswd { name, .. }, AdminResponse::NoContent) => {
            format!("changed the password of user {name}\n")
        }
        (AdminRequest::AdminPasswd(c), AdminResponse::NoContent) => {
            format!("changed the password of admin {}; its console sessions have ended\n", c.user)
        }
        (AdminRequest::Fault(f), AdminResponse::NoContent) => {
            format!("the next {} operation(s) at {} will fail with EIO\n", f.count, f.point)
        }
        (_, AdminResponse::NoContent) => String::new(),
    }
}

/// bench, cp and rm talk SMB/NFS themselves (bench also the admin API
/// for --report-amplification).
fn run_client_command(cli: &Cli) -> Option<ExitCode> {
    let r = match &cli.command {
        Command::Bench(a) => {
            let admin = if a.report_amplification {
                match cli.credentials() {
                    Ok((c, _)) => Some(c),
                    Err(e) => {
                        eprintln!("duetctl: {e}");
                        return Some(ExitCode::from(e.exit_code()));
                    }
                }
            } else {
                None
            };
            bench_cmd::bench_main(a, admin.map(|c| (cli.addr.as_str(), c))).map(|ok| {
                if ok {
                    String::new()
                } else {
                    "FAILED".into()
                }
            })
        }
        Command::Cp(a) => bench_cmd::cp_main(a),
        Command::Rm(a) => {
            if a.recursive {
                let what = format!("remove {} and everything under it on {}", a.paths.join(", "), a.server);
                if let Err(e) = confirm_destructive(cli, &what) {
                    eprintln!("duetctl: {e}");
                    return Some(ExitCode::from(e.exit_code()));
                }
            }
            bench_cmd::rm_main(a)
        }
        Command::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "duetctl", &mut buf);
            out(&String::from_utf8_lossy(&buf));
            return Some(ExitCode::SUCCESS);
        }
        Command::Man { out: dir } => {
            return Some(match man_pages(dir.as_deref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("duetctl: {e}");
                    ExitCode::from(e.exit_code())
                }
            })
        }
        _ => return None,
    };
    Some(match r {
        Ok(s) if s == "FAILED" => {
            eprintln!("duetctl bench: some results failed verification");
            ExitCode::from(exit::PROBLEMS)
        }
        Ok(s) => {
            out(&s);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("duetctl: {e}");
            ExitCode::from(exit::FAILED)
        }
    })
}

/// Renders one man page.
fn render_man(cmd: clap::Command) -> Result<Vec<u8>, CtlError> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut buf).map_err(|e| CtlError::Io(format!("man page: {e}")))?;
    Ok(buf)
}

/// `duetctl man`: the main page on stdout, or every page into `dir`
/// (`duetctl.1`, `duetctl-share.1`, `duetctl-share-add.1`, ...).
fn man_pages(dir: Option<&std::path::Path>) -> Result<(), CtlError> {
    let cmd = Cli::command();
    let Some(dir) = dir else {
        out(&String::from_utf8_lossy(&render_man(cmd)?));
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| CtlError::Io(format!("cannot create {}: {e}", dir.display())))?;
    fn walk(cmd: clap::Command, prefix: &str, dir: &std::path::Path) -> Result<(), CtlError> {
        let name = if prefix.is_empty() { cmd.get_name().to_string() } else { format!("{prefix}-{}", cmd.get_name()) };
        // A page per command, named after its path; the name lives as
        // long as this short-lived process.
        let page = cmd.clone().name(&*Box::leak(name.clone().into_boxed_str()));
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, render_man(page)?).map_err(|e| CtlError::Io(format!("cannot write {}: {e}", path.display())))?;
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub.clone(), &name, dir)?;
        }
        Ok(())
    }
    let mut cmd = cmd;
    cmd.build();
    walk(cmd, "", dir)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(code) = run_client_command(&cli) {
        return code;
    }
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("duetctl: {e}");
            if let Some(hint) = e.connect_hint() {
                eprintln!("duetctl: hint: {hint}");
            }
            if let Some(hint) = e.cluster_hint() {
                eprintln!("duetctl: hint: {hint}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("duetctl").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn share_add_request() {
        let cli = parse(&[
            "share",
            "add",
            "media",
            "--path",
            "/media",
            "--protocols",
            "nfs",
            "--read-only",
            "--nfs-clients",
            "10.0.0.0/8, ::1/128",
            "--no-root-squash",
            "--append-extension",
        ]);
        let p = prepare(&cli.command).unwrap();
        let AdminRequest::ShareAdd(s) = p.request else {
            panic!()
        };
        assert_eq!(s.protocols, vec![Protocol::Nfs]);
        assert!(s.read_only && !s.guest_ok && !s.nfs.root_squash && s.nfs.append_extension);
        assert_eq!(s.nfs.clients, vec!["10.0.0.0/8", "::1/128"]);
    }

    #[test]
    fn client_side_validation() {
        for args in [
            &[
                "share",
                "add",
                "m",
                "--path",
                "/m",
                "--nfs-clients",
                "10.0.0.0/33",
            ][..],
            &["share", "add", "m", "--path", "relative"],
            &["share", "add", ".m", "--path", "/m"],
            &["share", "add", "m", "--path", "/m", "--protocols", "afp"],
            &["share", "add", "m", "--path", "/m", "--protocols", ""],
            &["share", "show", "a b"],
            &["user", "add", "a b", "--password", "x"],
            &["user", "add", "a", "--password", ""],
            &["user", "add", "a", "--password", "x", "--uid", "4294967295"],
            &["user", "passwd", "a/b"],
        ] {
            assert!(
                matches!(prepare(&parse(args).command), Err(CtlError::Usage(_))),
                "{args:?}"
            );
        }
    }

    #[test]
    fn password_sources() {
        let p = prepare(&parse(&["user", "add", "a"]).command).unwrap();
        assert_eq!(p.password, Some(password::Source::Prompt));
        let p = prepare(&parse(&["user", "passwd", "a", "--password-stdin"]).command).unwrap();
        assert_eq!(p.password, Some(password::Source::Stdin));
        let p = prepare(&parse(&["user", "passwd", "a", "--password", "pw"]).command).unwrap();
        assert_eq!(p.password, None);
        assert_eq!(
            p.request,
            AdminRequest::UserPasswd {
                name: "a".into(),
                password: "pw".into()
            }
        );
        assert!(Cli::try_parse_from([
            "duetctl",
            "user",
            "add",
            "a",
            "--password",
            "x",
            "--password-stdin"
        ])
        .is_err());
    }

    #[test]
    fn admin_and_user_passwords_are_different_options() {
        let cli = parse(&[
            "--user",
            "admin",
            "--admin-password-file",
            "/tmp/pw",
            "user",
            "add",
            "bob",
            "--password-file",
            "/tmp/bobpw",
        ]);
        assert_eq!(cli.admin_password_file.as_deref(), Some(std::path::Path::new("/tmp/pw")));
        let p = prepare(&cli.command).unwrap();
        assert_eq!(p.password, Some(password::Source::File("/tmp/bobpw".into())));
        // The admin's password is not taken from --password.
        assert!(Cli::try_parse_from(["duetctl", "--user", "admin", "--password", "x", "status"]).is_err());
        // Global options work after the command too.
        let cli = parse(&["share", "list", "--json", "--addr", "10.0.0.1:1"]);
        assert!(cli.json);
        assert_eq!(cli.addr, "10.0.0.1:1");
    }

    #[test]
    fn share_modify_changes_only_what_is_given() {
        let cli = parse(&["share", "modify", "media", "--read-only", "--users", "", "--no-root-squash"]);
        let AdminRequest::ShareModify { name, changes } = prepare(&cli.command).unwrap().request else { panic!() };
        assert_eq!(name, "media");
        assert_eq!(
            changes,
            ShareChanges { read_only: Some(true), users: Some(vec![]), root_squash: Some(false), ..Default::default() }
        );
        assert!(matches!(prepare(&parse(&["share", "modify", "media"]).command), Err(CtlError::Usage(_))));
        assert!(Cli::try_parse_from(["duetctl", "share", "modify", "m", "--read-only", "--read-write"]).is_err());
    }
}
