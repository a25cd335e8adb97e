//! Port mapper version 2 and rpcbind versions 3 and 4 (RFC 1833), program
//! 100000, and the universal address format (RFC 1833 section 2.2, RFC 5665
//! section 5.2.3).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::xdr::{
    xdr_struct, LinkedList, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter,
};

pub const PMAP_PORT: u16 = 111;
pub const PMAP_VERSION: u32 = 2;
pub const RPCBIND_VERSION_3: u32 = 3;
pub const RPCBIND_VERSION_4: u32 = 4;

/// RFC 1833 section 3.1: protocol numbers in a portmap mapping.
pub const IPPROTO_TCP: u32 = 6;
pub const IPPROTO_UDP: u32 = 17;

/// Bound on entries in a DUMP list; duet registers a handful of programs.
pub const MAX_DUMP_ENTRIES: u32 = 1024;
/// Bound on the arguments or results carried by CALLIT/BCAST/INDIRECT.
pub const MAX_CALLIT_BYTES: u32 = 8192;
/// Bound on netid, universal address and owner strings.
pub const MAX_RPCB_STRING: u32 = 255;

/// RFC 1833 section 3.2: PMAPPROC_* procedure numbers (version 2).
pub mod pmap_proc {
    pub const NULL: u32 = 0;
    pub const SET: u32 = 1;
    pub const UNSET: u32 = 2;
    pub const GETPORT: u32 = 3;
    pub const DUMP: u32 = 4;
    pub const CALLIT: u32 = 5;
}

/// RFC 1833 section 2.2.1/2.2.2: RPCBPROC_* procedure numbers (versions 3, 4).
pub mod rpcb_proc {
    pub const NULL: u32 = 0;
    pub const SET: u32 = 1;
    pub const UNSET: u32 = 2;
    pub const GETADDR: u32 = 3;
    pub const DUMP: u32 = 4;
    /// CALLIT in version 3, BCAST in version 4.
    pub const CALLIT: u32 = 5;
    pub const GETTIME: u32 = 6;
    pub const UADDR2TADDR: u32 = 7;
    pub const TADDR2UADDR: u32 = 8;
    /// Version 4 only from here on.
    pub const GETVERSADDR: u32 = 9;
    pub const INDIRECT: u32 = 10;
    pub const GETADDRLIST: u32 = 11;
    pub const GETSTAT: u32 = 12;
}

xdr_struct! {
    /// RFC 1833 section 3.1: struct mapping, the argument of SET, UNSET and
    /// GETPORT (whose result is the port as an unsigned int; SET and UNSET
    /// answer a bool).
    pub struct Mapping {
        pub prog: u32,
        pub vers: u32,
        pub prot: u32,
        pub port: u32,
    }
}

/// RFC 1833 section 3.1: pmaplist, the result of PMAPPROC_DUMP.
pub type PmapList = LinkedList<Mapping, MAX_DUMP_ENTRIES>;

xdr_struct! {
    /// RFC 1833 section 3.1: struct call_args, the argument of
    /// PMAPPROC_CALLIT; `args` are the called procedure's arguments.
    pub struct CallArgs<'a> {
        pub prog: u32,
        pub vers: u32,
        pub proc_: u32,
        pub args: Opaque<'a, MAX_CALLIT_BYTES>,
    }
}

xdr_struct! {
    /// RFC 1833 section 3.1: struct call_result, the result of
    /// PMAPPROC_CALLIT.
    pub struct CallResult<'a> {
        pub port: u32,
        pub res: Opaque<'a, MAX_CALLIT_BYTES>,
    }
}

/// A netid, universal address or owner string of rpcbind.
pub type RpcbString<'a> = Opaque<'a, MAX_RPCB_STRING>;

xdr_struct! {
    /// RFC 1833 section 2.1: struct rpcb, the argument of RPCBPROC_SET,
    /// UNSET, GETADDR (whose result is a universal address string, empty if
    /// the program is not registered) and GETVERSADDR.
    pub struct Rpcb<'a> {
        pub prog: u32,
        pub vers: u32,
        /// e.g. "tcp", "tcp6".
        pub netid: RpcbString<'a>,
        /// Universal address, see [`format_uaddr`].
        pub addr: RpcbString<'a>,
        pub owner: RpcbString<'a>,
    }
}

/// RFC 1833 section 2.1: rpcblist_ptr, the result of RPCBPROC_DUMP.
pub type RpcbList<'a> = LinkedList<Rpcb<'a>, MAX_DUMP_ENTRIES>;

xdr_struct! {
    /// RFC 1833 section 2.1: struct rpcb_rmtcallargs (CALLIT, BCAST, INDIRECT).
    pub struct RpcbRmtCallArgs<'a> {
        pub prog: u32,
        pub vers: u32,
        pub proc_: u32,
        pub args: Opaque<'a, MAX_CALLIT_BYTES>,
    }
}

xdr_struct! {
    /// RFC 1833 section 2.1: struct rpcb_rmtcallres.
    pub struct RpcbRmtCallRes<'a> {
        pub addr: RpcbString<'a>,
        pub results: Opaque<'a, MAX_CALLIT_BYTES>,
    }
}

/// The GETADDR result: a universal address, empty when unregistered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetAddrRes<'a>(pub RpcbString<'a>);

impl<'a> XdrDecode<'a> for GetAddrRes<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(GetAddrRes(RpcbString::decode(r)?))
    }
}
impl XdrEncode for GetAddrRes<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        self.0.encode(w)
    }
}

/// Formats a socket address as a universal address (RFC 1833 section 2.2,
/// RFC 5665 5.2.3): "h1.h2.h3.h4.p1.p2" for IPv4, "x:x::x.p1.p2" for IPv6,
/// where p1 and p2 are the high and low bytes of the port.
pub fn format_uaddr(addr: &SocketAddr) -> String {
    let port = addr.port();
    format!("{}.{}.{}", addr.ip(), port >> 8, port & 0xff)
}

/// Parses a universal address (the inverse of [`format_uaddr`]); `None` if
/// it is malformed.
pub fn parse_uaddr(uaddr: &str) -> Option<SocketAddr> {
    let (rest, p2) = uaddr.rsplit_once('.')?;
    let (host, p1) = rest.rsplit_once('.')?;
    let p1: u8 = p1.parse().ok()?;
    let p2: u8 = p2.parse().ok()?;
    let port = u16::from(p1) << 8 | u16::from(p2);
    let ip = if host.contains(':') {
        IpAddr::V6(host.parse::<Ipv6Addr>().ok()?)
    } else {
        IpAddr::V4(host.parse::<Ipv4Addr>().ok()?)
    };
    Some(SocketAddr::new(ip, port))
}
