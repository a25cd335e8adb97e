//! Public service addresses that move (`[cluster] public_addresses`; the
//! decisions are `duet_cluster::addresses`, sans-I/O; this module touches
//! the interface).
//!
//! One thread per node, every [`TICK`]:
//! - on the leader: the voters that are healthy (this node, and each peer
//!   whose connection is open and was heard within `peers::HEARD_WITHIN`)
//!   and the committed table give the new table
//!   (`addresses::assign`); a different one is proposed as
//!   `Command::PublicAddresses` (one raft command, so every node reads the
//!   same table);
//! - on every node: the addresses the committed table gives it are added to
//!   `public_interface` (`ip address add`; IPv6 ones `nodad`: the table,
//!   not duplicate address detection, says who holds an address) and
//!   announced (twice, a second apart) with a gratuitous ARP, or for IPv6
//!   an unsolicited neighbour advertisement to all nodes (ff02::1), the
//!   others it holds are removed. Every address a node keeps is
//!   announced again (twice) when the committed table changes or a peer
//!   turns healthy: a node that comes back with a stale address on its
//!   interface answers ARP for it until duetd removes it at start, and a
//!   neighbour that asked then keeps the wrong entry. A node
//!   out of touch with a leader for [`RELEASE_AFTER`] gives up all of its
//!   addresses: by then the leader on the other side counts it unhealthy
//!   and has given them to others.
//!
//! At start the configured addresses still on the interface (left by a
//! crash) are removed; at shutdown this node's are removed first, so the
//! leader moves them while the node drains.

use std::collections::BTreeSet;
use std::process::Command as Process;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use duet_cluster::addresses::{assign, gratuitous_arp, held_by, unsolicited_na};
use duet_cluster::records::Command;
use duet_cluster_store::{Query, QueryAnswer, StoreHandle};

use crate::peers::PeerHealth;

/// How often the table and the interface are looked at.
pub const TICK: Duration = Duration::from_millis(250);
/// A node that has not been in touch with a leader for this long removes
/// its addresses (the leader counts a peer unhealthy after
/// `peers::HEARD_WITHIN`, 3 s, and then moves them).
pub const RELEASE_AFTER: Duration = Duration::from_secs(3);
/// The leader proposes a new table at most this often.
const PROPOSE_EVERY: Duration = Duration::from_secs(1);

pub struct PublicAddresses {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PublicAddresses {
    /// Starts the thread. `addresses` as configured (`ADDRESS/PREFIX`,
    /// checked by the configuration), added to `interface`.
    pub fn start(
        node_id: u64,
        store: StoreHandle,
        health: Arc<PeerHealth>,
        addresses: Vec<String>,
        interface: String,
    ) -> std::io::Result<PublicAddresses> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new().name("public-addresses".into()).spawn(move || {
            let mut w = Worker {
                node_id,
                store,
                health,
                addresses,
                iface: Interface { name: interface },
                held: BTreeSet::new(),
                announce_again: Vec::new(),
                last_table: Vec::new(),
                last_healthy: BTreeSet::new(),
                last_contact: Instant::now(),
                last_proposal: None,
                warned: None,
            };
            w.iface.clear_stale(&w.addresses);
            while !s.load(Ordering::Relaxed) {
                w.tick(Instant::now());
                std::thread::sleep(TICK);
            }
            w.release_all();
        })?;
        Ok(PublicAddresses { stop, thread: Some(thread) })
    }

    /// Removes this node's addresses and stops the thread.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PublicAddresses {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Worker {
    node_id: u64,
    store: StoreHandle,
    health: Arc<PeerHealth>,
    addresses: Vec<String>,
    iface: Interface,
    /// What this node added to the interface.
    held: BTreeSet<String>,
    /// Addresses to announce once more, and when.
    announce_again: Vec<(String, Instant)>,
    /// The committed table and the healthy peers at the last tick: a
    /// change of either re-announces what this node keeps.
    last_table: Vec<(String, u64)>,
    last_healthy: BTreeSet<u64>,
    /// When this node last knew a leader it could reach (or led).
    last_contact: Instant,
    last_proposal: Option<Instant>,
    /// When a failure to change the interface was last logged.
    warned: Option<Instant>,
}

impl Worker {
    fn tick(&mut self, now: Instant) {
        let Ok(QueryAnswer::Raft(raft)) = self.store.query_blocking(Query::RaftStatus) else { return };
        let Ok(QueryAnswer::PublicAddresses(table)) = self.store.query_blocking(Query::PublicAddresses) else { return };
        let leader = raft.leader_id;
        let leads = leader == self.node_id && raft.voters.contains(&self.node_id);
        if leads {
            let healthy: Vec<u64> = raft
                .voters
                .iter()
                .copied()
                .filter(|id| *id == self.node_id || self.health.peer(*id).healthy(now))
                .collect();
            let want = assign(&self.addresses, &table, &healthy);
            if want != table && self.last_proposal.map_or(true, |t| now.duration_since(t) >= PROPOSE_EVERY) {
                self.last_proposal = Some(now);
                for (addr, node) in &want {
                    let was = table.iter().find(|(a, _)| a == addr).map(|(_, n)| *n);
                    if was != Some(*node) {
                        match was {
                            Some(w) => tracing::info!("public address {addr} moves from node {w} to node {node}"),
                            None => tracing::info!("public address {addr} goes to node {node}"),
                        }
                    }
                }
                if let Err(e) = self.store.command_blocking(Command::PublicAddresses { assignment: want }) {
                    tracing::debug!("public addresses not proposed: {e}");
                }
            }
        }
        let in_touch = leads || (leader != 0 && self.health.peer(leader).healthy(now));
        if in_touch {
            self.last_contact = now;
        }
        let mine: BTreeSet<String> = if in_touch || now.duration_since(self.last_contact) < RELEASE_AFTER {
            held_by(&table, self.node_id).into_iter().collect()
        } else {
            if !self.held.is_empty() {
                tracing::warn!(
                    "no leader reachable for {} s: this node gives up its public addresses {:?}",
                    RELEASE_AFTER.as_secs(),
                    self.held
                );
            }
            BTreeSet::new()
        };
        let drop: Vec<String> = self.held.difference(&mine).cloned().collect();
        for a in drop {
            match self.iface.del(&a) {
                Ok(()) => {
                    tracing::info!("public address {a} removed from {}", self.iface.name);
                    self.held.remove(&a);
                    self.announce_again.retain(|(x, _)| *x != a);
                }
                Err(e) => self.warn(now, format!("cannot remove public address {a} from {}: {e}", self.iface.name)),
            }
        }
        let healthy: BTreeSet<u64> =
            raft.voters.iter().copied().filter(|id| *id != self.node_id && self.health.peer(*id).healthy(now)).collect();
        if table != self.last_table || healthy.difference(&self.last_healthy).next().is_some() {
            let kept: Vec<String> = self.held.intersection(&mine).cloned().collect();
            for a in kept {
                self.announce(&a, now);
                self.announce_again.retain(|(x, _)| *x != a);
                self.announce_again.push((a, now + Duration::from_secs(1)));
            }
        }
        self.last_table = table.clone();
        self.last_healthy = healthy;
        let add: Vec<String> = mine.difference(&self.held).cloned().collect();
        for a in add {
            match self.iface.add(&a) {
                Ok(()) => {
                    tracing::info!("public address {a} added to {}", self.iface.name);
                    self.held.insert(a.clone());
                    self.announce(&a, now);
                    self.announce_again.push((a, now + Duration::from_secs(1)));
                }
                Err(e) => self.warn(now, format!("cannot add public address {a} to {}: {e}", self.iface.name)),
            }
        }
        let due: Vec<String> = self.announce_again.iter().filter(|(_, t)| *t <= now).map(|(a, _)| a.clone()).collect();
        self.announce_again.retain(|(_, t)| *t > now);
        for a in due {
            self.announce(&a, now);
        }
    }

    fn announce(&mut self, addr: &str, now: Instant) {
        if let Err(e) = self.iface.announce(addr) {
            self.warn(now, format!("cannot announce public address {addr} on {} (gratuitous ARP or neighbour advertisement): {e}", self.iface.name));
        }
    }

    /// Logs a failure to change the interface, at most every 30 s.
    fn warn(&mut self, now: Instant, text: String) {
        if self.warned.map_or(true, |t| now.duration_since(t) >= Duration::from_secs(30)) {
            self.warned = Some(now);
            tracing::warn!("{text} (public addresses need CAP_NET_ADMIN and CAP_NET_RAW: docs/cluster.md)");
        }
    }

    fn release_all(&mut self) {
        for a in std::mem::take(&mut self.held) {
            match self.iface.del(&a) {
                Ok(()) => tracing::info!("public address {a} removed from {} (stopping)", self.iface.name),
                Err(e) => tracing::warn!("cannot remove public address {a} from {}: {e}", self.iface.name),
            }
        }
    }
}

/// The network interface public addresses go on.
struct Interface {
    name: String,
}

impl Interface {
    fn ip(&self, args: &[&str]) -> Result<String, String> {
        let out = Process::new("ip").args(args).output().map_err(|e| format!("cannot run ip: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    fn add(&self, addr: &str) -> Result<(), String> {
        let mut args = vec!["address", "add", addr, "dev", &self.name];
        if addr.contains(':') {
            args.push("nodad");
        }
        match self.ip(&args) {
            // Already there (added by hand, or a retry): ours now.
            Err(e) if e.contains("File exists") => Ok(()),
            r => r.map(|_| ()),
        }
    }

    fn del(&self, addr: &str) -> Result<(), String> {
        match self.ip(&["address", "del", addr, "dev", &self.name]) {
            Err(e) if e.contains("Cannot assign requested address") => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Removes the configured addresses the interface holds at start: a
    /// node that crashed left them there, and the table may give them to
    /// another node now.
    fn clear_stale(&self, addresses: &[String]) {
        let Ok(text) = self.ip(&["-o", "address", "show", "dev", &self.name]) else { return };
        let on: Vec<std::net::IpAddr> =
            text.split_whitespace().filter_map(|w| w.split('/').next().and_then(|a| a.parse().ok())).collect();
        for a in addresses {
            let ip: Option<std::net::IpAddr> = a.split('/').next().and_then(|x| x.parse().ok());
            if ip.is_some_and(|ip| on.contains(&ip)) {
                match self.del(a) {
                    Ok(()) => tracing::info!("public address {a} left on {} by an earlier run: removed", self.name),
                    Err(e) => tracing::warn!("public address {a} left on {}: cannot remove it: {e}", self.name),
                }
            }
        }
    }

    /// Announces `addr` on the interface: a gratuitous ARP (IPv4) or an
    /// unsolicited neighbour advertisement (IPv6).
    fn announce(&self, addr: &str) -> Result<(), String> {
        let ip: std::net::IpAddr =
            addr.split('/').next().unwrap_or(addr).parse().map_err(|_| format!("{addr:?} is not an address"))?;
        let (mac, index) = self.link()?;
        match ip {
            std::net::IpAddr::V4(v4) => Self::arp(mac, index, v4),
            std::net::IpAddr::V6(v6) => Self::neighbour_advertisement(mac, index, v6),
        }
    }

    /// The interface's Ethernet address and index.
    fn link(&self) -> Result<([u8; 6], u32), String> {
        let mac_text = std::fs::read_to_string(format!("/sys/class/net/{}/address", self.name))
            .map_err(|e| format!("no MAC address for {}: {e}", self.name))?;
        let mut mac = [0u8; 6];
        let parts: Vec<&str> = mac_text.trim().split(':').collect();
        if parts.len() != 6 {
            return Err(format!("{} has no Ethernet address ({:?})", self.name, mac_text.trim()));
        }
        for (m, p) in mac.iter_mut().zip(parts) {
            *m = u8::from_str_radix(p, 16).map_err(|_| format!("bad MAC address {mac_text:?}"))?;
        }
        let name = std::ffi::CString::new(self.name.clone()).map_err(|_| "bad interface name".to_string())?;
        // SAFETY: if_nametoindex reads a NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(format!("no interface {}", self.name));
        }
        Ok((mac, index))
    }

    /// One unsolicited neighbour advertisement of `ip` (RFC 4861 section
    /// 7.2.6) to the all-nodes address ff02::1 on interface `index`, hop
    /// limit 255 (receivers drop it otherwise, 7.1.2), from a raw ICMPv6
    /// socket (the kernel computes the checksum and picks the source).
    fn neighbour_advertisement(mac: [u8; 6], index: u32, ip: std::net::Ipv6Addr) -> Result<(), String> {
        let packet = unsolicited_na(mac, ip.octets());
        // SAFETY: socket(2) with constant arguments; the fd is closed below.
        let fd = unsafe { libc::socket(libc::AF_INET6, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_ICMPV6) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        let hops: libc::c_int = 255;
        let ifindex: libc::c_int = index as libc::c_int;
        // SAFETY: setsockopt with pointers to ints of the size given.
        let set = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_MULTICAST_HOPS,
                (&hops as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            ) == 0
                && libc::setsockopt(
                    fd,
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MULTICAST_IF,
                    (&ifindex as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as u32,
                ) == 0
        };
        if !set {
            let err = std::io::Error::last_os_error();
            // SAFETY: closing the fd opened above.
            unsafe { libc::close(fd) };
            return Err(err.to_string());
        }
        // SAFETY: sockaddr_in6 is plain data; zeroed is a valid start.
        let mut to: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        to.sin6_family = libc::AF_INET6 as u16;
        to.sin6_addr.s6_addr = std::net::Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1).octets();
        to.sin6_scope_id = index;
        // SAFETY: sendto with a valid buffer and a sockaddr_in6 of its size.
        let n = unsafe {
            libc::sendto(
                fd,
                packet.as_ptr().cast(),
                packet.len(),
                0,
                (&to as *const libc::sockaddr_in6).cast(),
                std::mem::size_of::<libc::sockaddr_in6>() as u32,
            )
        };
        let err = std::io::Error::last_os_error();
        // SAFETY: closing the fd opened above.
        unsafe { libc::close(fd) };
        if n < 0 {
            return Err(err.to_string());
        }
        Ok(())
    }

    /// One gratuitous ARP announcement of `ip` (RFC 5227 section 3) on
    /// interface `index`, to the Ethernet broadcast address.
    fn arp(mac: [u8; 6], index: u32, ip: std::net::Ipv4Addr) -> Result<(), String> {
        let packet = gratuitous_arp(mac, ip.octets());
        let proto = (libc::ETH_P_ARP as u16).to_be();
        // SAFETY: socket(2) with constant arguments; the fd is closed below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, proto as i32) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid start.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_protocol = proto;
        to.sll_ifindex = index as i32;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&[0xff; 6]);
        // SAFETY: sendto with a valid buffer and a sockaddr_ll of its size.
        let n = unsafe {
            libc::sendto(
                fd,
                packet.as_ptr().cast(),
                packet.len(),
                0,
                (&to as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        let err = std::io::Error::last_os_error();
        // SAFETY: closing the fd opened above.
        unsafe { libc::close(fd) };
        if n < 0 {
            return Err(err.to_string());
        }
        Ok(())
    }
}
