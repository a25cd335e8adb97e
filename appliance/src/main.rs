//! duetd: the duet NAS daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use duet_appliance::config::{Config, DEFAULT_CONFIG};
use duet_appliance::server;

/// The duet NAS daemon: serves shares over SMB2/3 and NFS.
#[derive(Parser, Debug)]
#[command(name = "duetd", version)]
struct Args {
    /// Configuration file (TOML). Without it, the built-in defaults apply.
    #[arg(long, short = 'c', env = "DUET_CONFIG")]
    config: Option<PathBuf>,
    /// Overrides `data_dir`.
    #[arg(long, env = "DUET_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Overrides `admin.listen`.
    #[arg(long)]
    admin_listen: Option<String>,
    /// Overrides `executors`.
    #[arg(long)]
    executors: Option<usize>,
    /// Prints the default configuration, with comments, and exits.
    #[arg(long)]
    print_default_config: bool,
    /// Checks the configuration and exits.
    #[arg(long)]
    check_config: bool,
}

/// Keeps large buffers' memory in the process between uses.
///
/// The data path allocates a buffer per write-log record, per destage
/// flush and per cached extent, up to the largest SMB/NFS write (8 MiB).
/// glibc serves allocations of 128 KiB and more by a fresh `mmap` (or
/// trims freed heap tops back to the kernel), so every such buffer was
/// zeroed page by page by the kernel on first touch: half of the data
/// executor's time in a 256 MiB smbclient `put` was `clear_page`. Serving
/// them from the heap, and trimming only past 512 MiB free, turns that
/// into reuse. Memory stays bounded by the data path's own limits (the
/// log memory, the read cache, a destage round); this only stops handing
/// it back and forth.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_large_buffers() {
    // SAFETY: mallopt only sets allocator parameters; called before any
    // thread starts.
    unsafe {
        // 32 MiB is glibc's largest mmap threshold on 64-bit.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_large_buffers() {}

fn main() -> ExitCode {
    keep_large_buffers();
    let args = Args::parse();
    if args.print_default_config {
        print!("{DEFAULT_CONFIG}");
        return ExitCode::SUCCESS;
    }
    let mut cfg = match &args.config {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("duetd: {e}");
                return ExitCode::from(2);
            }
        },
        None => Config::default(),
    };
    if let Some(d) = args.data_dir {
        cfg.data_dir = d;
    }
    if let Some(a) = args.admin_listen {
        cfg.admin.listen = a;
    }
    if let Some(n) = args.executors {
        cfg.executors = n;
    }
    if let Err(e) = cfg.validate() {
        eprintln!("duetd: {e}");
        return ExitCode::from(2);
    }
    // [cluster]: reads the secret file; refuses what cannot be served.
    if let Err(e) = cfg.cluster_plan() {
        eprintln!("duetd: {e}");
        return ExitCode::from(2);
    }
    if args.check_config {
        println!("duetd: configuration is valid");
        return ExitCode::SUCCESS;
    }
    // glommio's reactor logs one error only, "unexpected error when probing
    // iopoll support", which datapath::probe_iopoll provokes on purpose on
    // devices without poll queues (and says so itself).
    let quiet = "glommio::reactor=off".parse().expect("a valid directive");
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cfg.log.filter))
        .add_directive(quiet);
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    server::block_signals();
    let running = match server::start(&cfg) {
        Ok(r) => r,
        Err(e @ server::StartError::Store(duet_cluster_store::StoreError::Removed { .. })) => {
            eprintln!("duetd: {e}");
            return ExitCode::from(server::EXIT_REMOVED);
        }
        Err(e) => {
            eprintln!("duetd: {e}");
            return ExitCode::from(1);
        }
    };
    // Every listener is bound: tell systemd (Type=notify) we are ready.
    if let Some(sock) = std::env::var_os("NOTIFY_SOCKET") {
        if let Err(e) = sd_notify(&sock, "READY=1") {
            tracing::warn!("cannot notify systemd through {sock:?}: {e}");
        }
    }
    let sig = server::wait_for_signal();
    let removed = running.removed();
    tracing::info!(signal = sig, "stopping: draining in-flight requests");
    if let Some(sock) = std::env::var_os("NOTIFY_SOCKET") {
        let _ = sd_notify(&sock, "STOPPING=1");
    }
    running.shutdown();
    if let Some(index) = removed {
        tracing::warn!(index, "stopped: this node was removed from the cluster");
        return ExitCode::from(server::EXIT_REMOVED);
    }
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

/// Sends one sd_notify(3) message (such as `READY=1`) to the unix datagram
/// socket systemd names in `$NOTIFY_SOCKET`: a path, or a name in the
/// abstract namespace when it starts with '@'.
fn sd_notify(socket: &std::ffi::OsStr, msg: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let bytes = socket.as_bytes();
    let addr = match bytes.split_first() {
        Some((b'@', name)) => SocketAddr::from_abstract_name(name)?,
        Some((b'/', _)) => SocketAddr::from_pathname(std::path::Path::new(socket))?,
        _ => return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "NOTIFY_SOCKET is neither a path nor @name")),
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(msg.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::sd_notify;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};

    #[test]
    fn notify_reaches_a_path_socket() {
        let dir = std::env::temp_dir().join(format!("duetd-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        sd_notify(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn notify_reaches_an_abstract_socket() {
        let name = format!("duetd-notify-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        sd_notify(std::ffi::OsStr::new(&format!("@{name}")), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn notify_refuses_a_relative_name() {
        assert!(sd_notify(std::ffi::OsStr::new("relative"), "READY=1").is_err());
        assert!(sd_notify(std::ffi::OsStr::new(""), "READY=1").is_err());
    }
}
