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

fn main() -> ExitCode {
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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cfg.log.filter));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    server::block_signals();
    let running = match server::start(&cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("duetd: {e}");
            return ExitCode::from(1);
        }
    };
    let sig = server::wait_for_signal();
    tracing::info!(signal = sig, "stopping: draining in-flight requests");
    running.shutdown();
    tracing::info!("stopped");
    ExitCode::SUCCESS
}
