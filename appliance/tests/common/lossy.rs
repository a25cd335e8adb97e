//! A bad network between cluster nodes, in user space (this machine's
//! kernel has no `sch_netem`): a forwarder per node address that relays
//! TCP connections to the node and does to them what a slow, lossy path
//! does to a TCP stream. Bytes are never dropped or reordered inside a
//! connection (TCP would not let an application see that); instead:
//!
//! - **delay with jitter**: each chunk read is written `delay` plus a
//!   random part of `jitter` later, never before the chunk ahead of it;
//! - **stalls**: `stall_per_mille` of the chunks wait `stall` more, as a
//!   lost segment waits for its retransmission;
//! - **resets**: each connection is cut after a random time (exponential,
//!   mean `reset_mean`), as sustained loss ends a connection; the nodes
//!   connect again.
//!
//! The faults can be changed while running ([`Lossy::set`]); counters say
//! what was done ([`Lossy::stats`]).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rand::Rng;

/// What the links do (see the module doc).
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub delay: Duration,
    pub jitter: Duration,
    pub stall_per_mille: u32,
    pub stall: Duration,
    pub reset_mean: Option<Duration>,
}

/// What the forwarder did so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub connections: u64,
    pub chunks: u64,
    pub bytes: u64,
    pub stalls: u64,
    pub resets: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    chunks: AtomicU64,
    bytes: AtomicU64,
    stalls: AtomicU64,
    resets: AtomicU64,
}

struct Shared {
    faults: RwLock<Faults>,
    stop: AtomicBool,
    counters: Counters,
    /// Every relayed connection's two sockets, to shut at drop.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
}

/// Forwarders from each `listen` address to its node; stopped (and every
/// relayed connection shut) when dropped.
pub struct Lossy {
    shared: Arc<Shared>,
    listeners: Vec<std::thread::JoinHandle<()>>,
}

impl Lossy {
    /// Listens on each `(listen, to)` pair's first address and relays to
    /// the second.
    pub fn start(links: &[(SocketAddr, SocketAddr)], faults: Faults) -> Lossy {
        let shared = Arc::new(Shared { faults: RwLock::new(faults), stop: AtomicBool::new(false), counters: Counters::default(), open: Mutex::new(Vec::new()) });
        let listeners = links
            .iter()
            .map(|&(listen, to)| {
                let l = TcpListener::bind(listen).unwrap_or_else(|e| panic!("lossy link on {listen}: {e}"));
                l.set_nonblocking(true).unwrap();
                let shared = shared.clone();
                std::thread::spawn(move || accept_loop(l, to, shared))
            })
            .collect();
        Lossy { shared, listeners }
    }

    /// Changes the faults of every link from now on (chunks already in a
    /// delay line keep theirs).
    pub fn set(&self, f: Faults) {
        *self.shared.faults.write().unwrap() = f;
    }

    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        Stats {
            connections: c.connections.load(Ordering::Relaxed),
            chunks: c.chunks.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            stalls: c.stalls.load(Ordering::Relaxed),
            resets: c.resets.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Lossy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for (a, b) in self.shared.open.lock().unwrap().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
        for t in self.listeners.drain(..) {
            let _ = t.join();
        }
    }
}

fn accept_loop(l: TcpListener, to: SocketAddr, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((inbound, _)) => {
                let Ok(outbound) = TcpStream::connect_timeout(&to, Duration::from_secs(1)) else {
                    continue; // the node is down: the connection just closes
                };
                relay(inbound, outbound, &shared);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Relays one connection both ways, each direction through its own delay
/// line; cuts it at its reset time.
fn relay(a: TcpStream, b: TcpStream, shared: &Arc<Shared>) {
    shared.counters.connections.fetch_add(1, Ordering::Relaxed);
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let cut = Arc::new(AtomicBool::new(false));
    if let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) {
        shared.open.lock().unwrap().push((a2, b2));
    }
    // One direction decides the connection's resets.
    for (resets, from, to) in [(true, a.try_clone(), b.try_clone()), (false, b.try_clone(), a.try_clone())] {
        let (Ok(from), Ok(to)) = (from, to) else { return };
        let (shared, cut) = (shared.clone(), cut.clone());
        std::thread::spawn(move || pump(from, to, resets, shared, cut));
    }
}

/// Reads `from` into a delay line that a second thread writes to `to`;
/// with `resets`, cuts the connection at a time drawn while the faults
/// have a `reset_mean` (exponential: -ln(U) times the mean).
fn pump(mut from: TcpStream, to: TcpStream, resets: bool, shared: Arc<Shared>, cut: Arc<AtomicBool>) {
    let mut reset_at: Option<Instant> = None;
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = {
        let mut to = to.try_clone().expect("clone a relayed socket");
        std::thread::spawn(move || {
            for (due, chunk) in rx {
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
        })
    };
    let mut rng = rand::thread_rng();
    let mut last_due = Instant::now();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if shared.stop.load(Ordering::Relaxed) || cut.load(Ordering::Relaxed) {
            break;
        }
        match shared.faults.read().unwrap().reset_mean {
            Some(m) if resets && reset_at.is_none() => {
                let u: f64 = rng.gen_range(1e-9..1.0);
                reset_at = Some(Instant::now() + m.mul_f64(-u.ln()));
            }
            None => reset_at = None,
            _ => {}
        }
        if reset_at.is_some_and(|t| Instant::now() >= t) {
            if !cut.swap(true, Ordering::Relaxed) {
                shared.counters.resets.fetch_add(1, Ordering::Relaxed);
            }
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        let f = *shared.faults.read().unwrap();
        let mut wait = f.delay;
        if !f.jitter.is_zero() {
            wait += f.jitter.mul_f64(rng.gen_range(0.0..1.0));
        }
        if f.stall_per_mille > 0 && rng.gen_range(0..1000) < f.stall_per_mille {
            wait += f.stall;
            shared.counters.stalls.fetch_add(1, Ordering::Relaxed);
        }
        let due = (Instant::now() + wait).max(last_due);
        last_due = due;
        shared.counters.chunks.fetch_add(1, Ordering::Relaxed);
        shared.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        if tx.send((due, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    if cut.load(Ordering::Relaxed) || shared.stop.load(Ordering::Relaxed) {
        // Cut: what is still in the delay line is lost with the connection.
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
        let _ = writer.join();
    } else {
        // The sender closed: deliver what is in flight, then close.
        let _ = writer.join();
        let _ = to.shutdown(Shutdown::Write);
    }
}
