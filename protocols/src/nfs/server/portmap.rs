//! Port mapper v2 and rpcbind v3/v4 (RFC 1833): answers from the
//! configured map; registrations from clients are refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{accepted, reply_with, CallCtx, Event, NfsServer};
use crate::nfs::portmap::{
    format_uaddr, pmap_proc, rpcb_proc, Mapping, PmapList, Rpcb, RpcbList, IPPROTO_TCP, IPPROTO_UDP,
};
use crate::nfs::rpc::AcceptedReplyData;
use crate::nfs::xdr::{Opaque, XdrDecode, XdrEncode, XdrReader};

fn netid_of(prot: u32, v6: bool) -> &'static str {
    match (prot, v6) {
        (IPPROTO_UDP, false) => "udp",
        (IPPROTO_UDP, true) => "udp6",
        (_, false) => "tcp",
        (_, true) => "tcp6",
    }
}

pub(super) fn call(
    srv: &mut NfsServer,
    ctx: &CallCtx,
    vers: u32,
    proc_: u32,
    mut r: XdrReader<'_>,
) -> Vec<Event> {
    let (conn, xid) = (ctx.conn, ctx.xid);
    let garbage = || vec![accepted(conn, xid, AcceptedReplyData::GarbageArgs)];
    let map = &srv.cfg.portmap;
    if vers == 2 {
        return match proc_ {
            pmap_proc::NULL => vec![reply_with(conn, xid, |_| {})],
            pmap_proc::SET | pmap_proc::UNSET => match Mapping::decode(&mut r) {
                Ok(_) => vec![reply_with(conn, xid, |w| w.put_bool(false))],
                Err(_) => garbage(),
            },
            pmap_proc::GETPORT => match Mapping::decode(&mut r) {
                Ok(m) => {
                    let port = map
                        .iter()
                        .find(|e| e.prog == m.prog && e.vers == m.vers && e.prot == m.prot)
                        .map_or(0, |e| u32::from(e.port));
                    vec![reply_with(conn, xid, |w| w.put_u32(port))]
                }
                Err(_) => garbage(),
            },
            pmap_proc::DUMP => {
                let list: PmapList = crate::nfs::xdr::LinkedList(
                    map.iter()
                        .map(|e| Mapping {
                            prog: e.prog,
                            vers: e.vers,
                            prot: e.prot,
                            port: u32::from(e.port),
                        })
                        .collect(),
                );
                vec![reply_with(conn, xid, |w| list.encode(w))]
            }
            _ => vec![accepted(conn, xid, AcceptedReplyData::ProcUnavail)],
        };
    }
    let host = |v6: bool| -> IpAddr {
        match srv.cfg.uaddr_host {
            Some(h) => h,
            None if v6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        }
    };
    match proc_ {
        rpcb_proc::NULL => vec![reply_with(conn, xid, |_| {})],
        rpcb_proc::SET | rpcb_proc::UNSET => match Rpcb::decode(&mut r) {
            Ok(_) => vec![reply_with(conn, xid, |w| w.put_bool(false))],
            Err(_) => garbage(),
        },
        rpcb_proc::GETADDR | rpcb_proc::GETVERSADDR if proc_ == rpcb_proc::GETADDR || vers == 4 => {
            match Rpcb::decode(&mut r) {
                Ok(q) => {
                    let netid = q.netid.0;
                    let (prot, v6) = match netid {
                        b"tcp" => (IPPROTO_TCP, false),
                        b"tcp6" => (IPPROTO_TCP, true),
                        b"udp" => (IPPROTO_UDP, false),
                        b"udp6" => (IPPROTO_UDP, true),
                        _ => (0, false),
                    };
                    let exact = proc_ == rpcb_proc::GETVERSADDR;
                    let uaddr = map
                        .iter()
                        .find(|e| {
                            e.prog == q.prog
                                && e.prot == prot
                                && (e.vers == q.vers || (!exact && q.vers == 0))
                        })
                        .map(|e| format_uaddr(&SocketAddr::new(host(v6), e.port)))
                        .unwrap_or_default();
                    vec![reply_with(conn, xid, |w| w.put_string(uaddr.as_bytes()))]
                }
                Err(_) => garbage(),
            }
        }
        rpcb_proc::DUMP => {
            let strings: Vec<(u32, u32, &'static str, String)> = map
                .iter()
                .flat_map(|e| {
                    [false, true]
                        .into_iter()
                        .map(move |v6| (e.prog, e.vers, netid_of(e.prot, v6), (e.port, v6)))
                })
                .map(|(p, v, n, (port, v6))| {
                    (p, v, n, format_uaddr(&SocketAddr::new(host(v6), port)))
                })
                .collect();
            let list: RpcbList<'_> = crate::nfs::xdr::LinkedList(
                strings
                    .iter()
                    .map(|(prog, vers, netid, addr)| Rpcb {
                        prog: *prog,
                        vers: *vers,
                        netid: Opaque(netid.as_bytes()),
                        addr: Opaque(addr.as_bytes()),
                        owner: Opaque(b"superuser"),
                    })
                    .collect(),
            );
            vec![reply_with(conn, xid, |w| list.encode(w))]
        }
        rpcb_proc::GETTIME => {
            let secs = (ctx.now_ns / 1_000_000_000).clamp(0, u32::MAX as i64) as u32;
            vec![reply_with(conn, xid, |w| w.put_u32(secs))]
        }
        _ => vec![accepted(conn, xid, AcceptedReplyData::ProcUnavail)],
    }
}
