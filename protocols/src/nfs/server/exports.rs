//! What the server serves: the exports the appliance configures (shares
//! with NFS enabled), and the client-address patterns that guard them.

use std::net::IpAddr;

use duet_fs::NodeId;

/// One export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportEntry {
    /// The share name; the NFSv4 pseudo-root lists it as a directory and
    /// MOUNT accepts `/name`.
    pub name: String,
    /// The path MOUNT accepts too (e.g. `/srv/share`).
    pub path: String,
    /// The export's root directory.
    pub root: NodeId,
    pub read_only: bool,
    /// Map uid 0 to nobody (65534).
    pub root_squash: bool,
    /// Who may mount: IP addresses, CIDR blocks (`10.0.0.0/8`,
    /// `fd00::/8`) or `*`; empty means everyone.
    pub clients: Vec<String>,
    /// vNFS append extension: a WRITE at offset 2^64-1 appends atomically.
    pub append_extension: bool,
    /// The share's durability is `protocol`: an UNSTABLE WRITE (RFC 1813
    /// 3.3.7, RFC 8881 18.32) is answered UNSTABLE before it is durable,
    /// and COMMIT makes it so; every other operation stays durable before
    /// its reply (NFS promises metadata operations synchronously).
    pub protocol_durability: bool,
    /// Non-zero, unique among exports, stable: it is in every handle.
    pub fsid: u64,
    /// The share's allowed users, as uids (None: everyone). AUTH_SYS
    /// identities are the client's word: uid 0 (the client's kernel,
    /// mounting) always passes, and root squash governs what root may do.
    pub uids: Option<Vec<u32>>,
}

impl ExportEntry {
    /// Whether `peer` may use this export.
    pub fn allows(&self, peer: IpAddr) -> bool {
        self.clients.is_empty() || self.clients.iter().any(|p| client_matches(p, peer))
    }

    /// Whether a call with AUTH_SYS uid `uid` may use this export (the
    /// share's allowed users).
    pub fn allows_uid(&self, uid: u32) -> bool {
        match &self.uids {
            None => true,
            Some(list) => uid == 0 || list.contains(&uid),
        }
    }
}

/// The source of exports, asked at each call (so that changes apply at once).
pub trait Exports {
    fn exports(&self) -> Vec<ExportEntry>;
}

impl Exports for Vec<ExportEntry> {
    fn exports(&self) -> Vec<ExportEntry> {
        self.clone()
    }
}

impl Exports for [ExportEntry] {
    fn exports(&self) -> Vec<ExportEntry> {
        self.to_vec()
    }
}

/// The user clients are mapped to when unauthenticated or squashed.
pub const NOBODY: u32 = 65534;

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Matches one pattern: `*`, an address, or `address/prefix`. A pattern
/// that does not parse matches nothing.
pub fn client_matches(pattern: &str, peer: IpAddr) -> bool {
    let pattern = pattern.trim();
    if pattern == "*" {
        return true;
    }
    let peer = canonical(peer);
    let (addr, bits) = match pattern.split_once('/') {
        Some((a, b)) => match b.parse::<u32>() {
            Ok(b) => (a, Some(b)),
            Err(_) => return false,
        },
        None => (pattern, None),
    };
    let Ok(net) = addr.parse::<IpAddr>() else {
        return false;
    };
    match (canonical(net), peer) {
        (IpAddr::V4(n), IpAddr::V4(p)) => {
            let bits = bits.unwrap_or(32);
            if bits > 32 {
                return false;
            }
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(n) & mask == u32::from(p) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(p)) => {
            let bits = bits.unwrap_or(128);
            if bits > 128 {
                return false;
            }
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(n) & mask == u128::from(p) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(client_matches("*", ip("1.2.3.4")));
        assert!(client_matches("10.0.0.0/8", ip("10.9.8.7")));
        assert!(!client_matches("10.0.0.0/8", ip("11.0.0.1")));
        assert!(client_matches("10.0.0.0/8", ip("::ffff:10.1.1.1")));
        assert!(client_matches("192.168.1.5", ip("192.168.1.5")));
        assert!(!client_matches("192.168.1.5", ip("192.168.1.6")));
        assert!(client_matches("fd00::/8", ip("fd12::1")));
        assert!(!client_matches("garbage", ip("1.1.1.1")));
        assert!(!client_matches("1.1.1.1/40", ip("1.1.1.1")));
        assert!(client_matches("0.0.0.0/0", ip("8.8.8.8")));
    }
}
