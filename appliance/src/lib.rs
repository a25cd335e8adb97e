//! duetd: the appliance. The only crate that imports glommio and touches the
//! OS: executors, listeners, the write log and chunk files, the admin API.
//!
//! Architecture Invariant: protocol, file-system-model, metadata-core and
//! cache-core logic does not live here; this crate feeds bytes and batches
//! to those crates and does the I/O they ask for.

pub mod addresses;
pub mod admin;
pub mod audit;
pub mod capacity;
pub mod config;
pub mod console;
pub mod datapath;
pub mod engine;
pub mod forward;
pub mod frontend;
pub mod listen;
pub mod metrics;
pub mod notify;
pub mod nfs_callback;
pub mod nlm;
pub mod peers;
pub mod replica;
pub mod schedule;
pub mod secrets;
pub mod server;
pub mod snapshot;
pub mod tls;
