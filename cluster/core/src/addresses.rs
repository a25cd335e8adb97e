//! Public service addresses that move (issue 12; what CTDB does for Samba
//! clusters): the cluster's `[cluster] public_addresses` are spread over its
//! healthy nodes, and the addresses of a node that dies move to survivors, so
//! that a client of the dead node reconnects to the same address.
//!
//! Who holds what is decided by the raft leader ([`assign`]) and committed
//! as a [`crate::records::Command::PublicAddresses`], so every node acts on
//! the same, replicated table; each node then adds the addresses it was
//! given to its interface and announces them with a gratuitous ARP
//! ([`gratuitous_arp`], RFC 5227 section 3 "ARP Announcement"), or for
//! IPv6 an unsolicited neighbour advertisement ([`unsolicited_na`], RFC
//! 4861 section 7.2.6), and drops the others. Sans-I/O: the appliance (`appliance/src/addresses.rs`)
//! touches the interface and the socket.
//!
//! Architecture Invariant: the assignment is a pure function of the
//! configured addresses, the committed table and the set of healthy voters;
//! an address held by a healthy voter stays where it is unless the spread
//! is uneven by two or more.

use std::collections::BTreeMap;

/// The table: (address as configured, e.g. `10.0.0.100/24`, node id), in
/// the configured order; an address missing from it is held by nobody.
pub type Assignment = Vec<(String, u64)>;

/// The leader's new table, from the configured `addresses`, the committed
/// table `current`, and the voters that are healthy now (the leader
/// itself among them). Keeps every address whose holder is healthy; gives
/// the others to the healthy voter that holds fewest (lowest id first);
/// then moves one address at a time from the voter holding most to the one
/// holding fewest while they differ by two or more (a node that comes back
/// gets its share again). No healthy voter: nobody holds anything.
pub fn assign(addresses: &[String], current: &[(String, u64)], healthy: &[u64]) -> Assignment {
    let mut healthy: Vec<u64> = healthy.to_vec();
    healthy.sort_unstable();
    healthy.dedup();
    if healthy.is_empty() {
        return Vec::new();
    }
    let now: BTreeMap<&str, u64> = current.iter().map(|(a, n)| (a.as_str(), *n)).collect();
    let mut holder: Vec<Option<u64>> =
        addresses.iter().map(|a| now.get(a.as_str()).copied().filter(|n| healthy.contains(n))).collect();
    let count = |holder: &[Option<u64>], n: u64| holder.iter().filter(|h| **h == Some(n)).count();
    for i in 0..holder.len() {
        if holder[i].is_none() {
            let fewest = *healthy.iter().min_by_key(|n| (count(&holder, **n), **n)).expect("healthy is not empty");
            holder[i] = Some(fewest);
        }
    }
    // Even out: at most one move per address, so this ends.
    for _ in 0..holder.len() {
        let most = *healthy.iter().max_by_key(|n| (count(&holder, **n), std::cmp::Reverse(**n))).expect("not empty");
        let fewest = *healthy.iter().min_by_key(|n| (count(&holder, **n), **n)).expect("not empty");
        if count(&holder, most) < count(&holder, fewest) + 2 {
            break;
        }
        // The last address the busiest holds moves.
        let i = holder.iter().rposition(|h| *h == Some(most)).expect("most holds one");
        holder[i] = Some(fewest);
    }
    addresses.iter().cloned().zip(holder).filter_map(|(a, h)| h.map(|h| (a, h))).collect()
}

/// The addresses `node` holds in `table`.
pub fn held_by(table: &[(String, u64)], node: u64) -> Vec<String> {
    table.iter().filter(|(_, n)| *n == node).map(|(a, _)| a.clone()).collect()
}

/// A gratuitous ARP announcement of `ip` at `mac`: an ARP request
/// (RFC 826) whose sender and target protocol addresses are both `ip`,
/// target hardware address zero (RFC 5227 section 3), for an Ethernet
/// broadcast. The 28 bytes after the Ethernet header.
pub fn gratuitous_arp(mac: [u8; 6], ip: [u8; 4]) -> [u8; 28] {
    let mut p = [0u8; 28];
    p[0..2].copy_from_slice(&1u16.to_be_bytes()); // htype: Ethernet
    p[2..4].copy_from_slice(&0x0800u16.to_be_bytes()); // ptype: IPv4
    p[4] = 6; // hlen
    p[5] = 4; // plen
    p[6..8].copy_from_slice(&1u16.to_be_bytes()); // oper: request
    p[8..14].copy_from_slice(&mac); // sha
    p[14..18].copy_from_slice(&ip); // spa
    // tha stays zero
    p[24..28].copy_from_slice(&ip); // tpa
    p
}

/// An unsolicited Neighbor Advertisement of `ip` at `mac` (RFC 4861
/// sections 4.4 and 7.2.6): ICMPv6 type 136, the Override flag set (the
/// address moved: receivers replace the link-layer address they have),
/// Router and Solicited clear, the target address, and a Target
/// Link-Layer Address option (4.6.1). The 32 bytes of the ICMPv6 message,
/// its checksum left zero (a raw ICMPv6 socket fills it in, RFC 3542
/// section 3.1); sent to ff02::1 with hop limit 255.
pub fn unsolicited_na(mac: [u8; 6], ip: [u8; 16]) -> [u8; 32] {
    let mut p = [0u8; 32];
    p[0] = 136; // type: Neighbor Advertisement
    p[1] = 0; // code
    p[4] = 0x20; // R = 0, S = 0, O = 1
    p[8..24].copy_from_slice(&ip);
    p[24] = 2; // option: Target Link-Layer Address
    p[25] = 1; // length in units of 8 octets
    p[26..32].copy_from_slice(&mac);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbour_advertisement_layout() {
        let ip: std::net::Ipv6Addr = "fd00:213::102".parse().unwrap();
        let p = unsolicited_na([2, 0, 0, 0, 0, 9], ip.octets());
        assert_eq!((p[0], p[1], p[2], p[3]), (136, 0, 0, 0), "type, code, checksum left to the kernel");
        assert_eq!(&p[4..8], &[0x20, 0, 0, 0], "Override only");
        assert_eq!(&p[8..24], &ip.octets());
        assert_eq!(&p[24..32], &[2, 1, 2, 0, 0, 0, 0, 9]);
    }

    fn addrs(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{}/24", 100 + i)).collect()
    }

    fn counts(t: &Assignment, nodes: &[u64]) -> Vec<usize> {
        nodes.iter().map(|n| held_by(t, *n).len()).collect()
    }

    #[test]
    fn spread_evenly_then_moved_off_a_dead_node_and_back() {
        let a = addrs(3);
        let t = assign(&a, &[], &[1, 2, 3]);
        assert_eq!(t, vec![(a[0].clone(), 1), (a[1].clone(), 2), (a[2].clone(), 3)]);
        // Node 2 dies: its address moves, the others stay.
        let t2 = assign(&a, &t, &[1, 3]);
        assert_eq!(t2[0], (a[0].clone(), 1));
        assert_eq!(t2[2], (a[2].clone(), 3));
        assert_eq!(t2[1], (a[1].clone(), 1));
        // Nothing changes while nothing does.
        assert_eq!(assign(&a, &t2, &[1, 3]), t2);
        // Node 2 is back: it gets one again (1 held two, 2 none).
        let t3 = assign(&a, &t2, &[1, 2, 3]);
        assert_eq!(counts(&t3, &[1, 2, 3]), vec![1, 1, 1]);
        assert_eq!(assign(&a, &t3, &[1, 2, 3]), t3);
    }

    #[test]
    fn every_address_held_once_by_a_healthy_node() {
        let a = addrs(7);
        let mut t = Vec::new();
        let views: [&[u64]; 6] = [&[1, 2, 3], &[2, 3], &[3], &[1, 3], &[1, 2, 3, 4], &[4]];
        for healthy in views {
            t = assign(&a, &t, healthy);
            assert_eq!(t.len(), a.len());
            for (addr, n) in &t {
                assert!(healthy.contains(n), "{addr} on {n}, healthy {healthy:?}");
            }
            let c = counts(&t, healthy);
            assert!(c.iter().max().unwrap() - c.iter().min().unwrap() <= 1, "{c:?}");
        }
        assert!(assign(&a, &t, &[]).is_empty(), "nobody healthy holds nothing");
    }

    #[test]
    fn an_address_no_longer_configured_is_dropped() {
        let a = addrs(2);
        let t = vec![(a[0].clone(), 1), ("10.9.9.9/24".to_string(), 2), (a[1].clone(), 2)];
        assert_eq!(assign(&a, &t, &[1, 2]), vec![(a[0].clone(), 1), (a[1].clone(), 2)]);
    }

    #[test]
    fn the_announcement_is_rfc5227s() {
        let p = gratuitous_arp([2, 0, 0, 0, 0, 7], [10, 0, 0, 100]);
        assert_eq!(&p[..8], &[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(&p[8..14], &[2, 0, 0, 0, 0, 7]);
        assert_eq!(&p[14..18], &[10, 0, 0, 100]);
        assert_eq!(&p[18..24], &[0; 6]);
        assert_eq!(&p[24..28], &[10, 0, 0, 100]);
    }
}
