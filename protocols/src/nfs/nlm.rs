//! The Network Lock Manager, version 4 (program 100021; RFC 1813 appendix
//! II, "Lock manager protocol", section 6, and the Open Group's XNFS
//! specification of NLM), and the Network Status Monitor (program 100024
//! version 1; XNFS, "Network Status Monitor Protocol"): the XDR types of
//! their arguments and results.
//!
//! NFSv3 has no locking of its own: a client's lockd asks the server's
//! NLM for byte-range locks (and DOS share reservations) on NFSv3 file
//! handles, and the status monitors of both sides tell each other about
//! reboots so that the server frees a rebooted client's locks and clients
//! reclaim theirs after the server restarts.
//!
//! Every variable-length item is bounded as the protocol declares it
//! (netobj: 1024 bytes, strings: 1024 bytes; `nlm4_notify.name`: 1025);
//! hostile bytes decode to an [`XdrError`] (answered GARBAGE_ARGS by the
//! server), never a panic.

use super::xdr::{xdr_enum, xdr_struct, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter};

/// NLM version 4 (RFC 1813 6.2: `NLM4_VERS`).
pub const NLM_VERSION_4: u32 = 4;
/// NSM version 1 (XNFS NSM: `SM_VERS`).
pub const NSM_VERSION_1: u32 = 1;

/// RFC 1813 6.1.2: `LM_MAXSTRLEN`, the bound on caller names.
pub const LM_MAXSTRLEN: u32 = 1024;
/// RFC 1813 6.1.2: `LM_MAXNAMELEN` (`nlm4_notify.name`).
pub const LM_MAXNAMELEN: u32 = LM_MAXSTRLEN + 1;
/// RFC 1813 6.1.2: `MAXNETOBJ_SZ`, the bound on a netobj.
pub const MAXNETOBJ_SZ: u32 = 1024;
/// XNFS NSM: `SM_MAXSTRLEN`.
pub const SM_MAXSTRLEN: u32 = 1024;

/// RFC 1813 6.1.4: `netobj`, opaque<MAXNETOBJ_SZ> (cookies, file handles,
/// owner handles).
pub type Netobj<'a> = Opaque<'a, MAXNETOBJ_SZ>;
/// RFC 1813 6.1.4: `string caller_name<LM_MAXSTRLEN>`.
pub type CallerName<'a> = Opaque<'a, LM_MAXSTRLEN>;

/// RFC 1813 6.2: the NLM version 4 procedures (NLMPROC4_*).
pub mod nlm_proc {
    pub const NULL: u32 = 0;
    pub const TEST: u32 = 1;
    pub const LOCK: u32 = 2;
    pub const CANCEL: u32 = 3;
    pub const UNLOCK: u32 = 4;
    pub const GRANTED: u32 = 5;
    pub const TEST_MSG: u32 = 6;
    pub const LOCK_MSG: u32 = 7;
    pub const CANCEL_MSG: u32 = 8;
    pub const UNLOCK_MSG: u32 = 9;
    pub const GRANTED_MSG: u32 = 10;
    pub const TEST_RES: u32 = 11;
    pub const LOCK_RES: u32 = 12;
    pub const CANCEL_RES: u32 = 13;
    pub const UNLOCK_RES: u32 = 14;
    pub const GRANTED_RES: u32 = 15;
    pub const SHARE: u32 = 20;
    pub const UNSHARE: u32 = 21;
    pub const NM_LOCK: u32 = 22;
    pub const FREE_ALL: u32 = 23;
}

/// XNFS NSM: the status monitor's procedures (SM_*).
pub mod nsm_proc {
    pub const NULL: u32 = 0;
    pub const STAT: u32 = 1;
    pub const MON: u32 = 2;
    pub const UNMON: u32 = 3;
    pub const UNMON_ALL: u32 = 4;
    pub const SIMU_CRASH: u32 = 5;
    pub const NOTIFY: u32 = 6;
}

xdr_enum! {
    /// RFC 1813 6.1.4: `nlm4_stats`.
    pub enum Nlm4Stat {
        Granted = 0,
        Denied = 1,
        DeniedNolocks = 2,
        Blocked = 3,
        DeniedGracePeriod = 4,
        Deadlck = 5,
        Rofs = 6,
        StaleFh = 7,
        Fbig = 8,
        Failed = 9,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_holder`, the lock that denied a TEST.
    pub struct Nlm4Holder<'a> {
        pub exclusive: bool,
        pub svid: i32,
        pub oh: Netobj<'a>,
        pub l_offset: u64,
        pub l_len: u64,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_lock`. `l_len` 0 means "to the end of the
    /// file and beyond" (RFC 1813 6.3.1 keeps version 3's meaning).
    pub struct Nlm4Lock<'a> {
        pub caller_name: CallerName<'a>,
        pub fh: Netobj<'a>,
        pub oh: Netobj<'a>,
        pub svid: i32,
        pub l_offset: u64,
        pub l_len: u64,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_testargs` (TEST, TEST_MSG, GRANTED,
    /// GRANTED_MSG).
    pub struct Nlm4TestArgs<'a> {
        pub cookie: Netobj<'a>,
        pub exclusive: bool,
        pub alock: Nlm4Lock<'a>,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_lockargs` (LOCK, LOCK_MSG, NM_LOCK). `state`
    /// is the caller's status-monitor state number.
    pub struct Nlm4LockArgs<'a> {
        pub cookie: Netobj<'a>,
        pub block: bool,
        pub exclusive: bool,
        pub alock: Nlm4Lock<'a>,
        pub reclaim: bool,
        pub state: i32,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_cancargs` (CANCEL, CANCEL_MSG).
    pub struct Nlm4CancArgs<'a> {
        pub cookie: Netobj<'a>,
        pub block: bool,
        pub exclusive: bool,
        pub alock: Nlm4Lock<'a>,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_unlockargs` (UNLOCK, UNLOCK_MSG).
    pub struct Nlm4UnlockArgs<'a> {
        pub cookie: Netobj<'a>,
        pub alock: Nlm4Lock<'a>,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_res` (`nlm4_stat` is a struct of one
    /// `nlm4_stats`, the same bytes).
    pub struct Nlm4Res<'a> {
        pub cookie: Netobj<'a>,
        pub stat: Nlm4Stat,
    }
}

/// RFC 1813 6.1.4: `nlm4_testrply`, the union in `nlm4_testres`: the
/// holder when DENIED, nothing otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nlm4TestRply<'a> {
    Denied(Nlm4Holder<'a>),
    Other(Nlm4Stat),
}

impl<'a> Nlm4TestRply<'a> {
    pub fn stat(&self) -> Nlm4Stat {
        match self {
            Nlm4TestRply::Denied(_) => Nlm4Stat::Denied,
            Nlm4TestRply::Other(s) => *s,
        }
    }
}

impl<'a> XdrDecode<'a> for Nlm4TestRply<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        match Nlm4Stat::decode(r)? {
            Nlm4Stat::Denied => Ok(Nlm4TestRply::Denied(Nlm4Holder::decode(r)?)),
            s => Ok(Nlm4TestRply::Other(s)),
        }
    }
}
impl XdrEncode for Nlm4TestRply<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            Nlm4TestRply::Denied(h) => {
                Nlm4Stat::Denied.encode(w);
                h.encode(w);
            }
            // A DENIED without its holder cannot be written: the union
            // needs one. Nothing here builds it; report it as FAILED.
            Nlm4TestRply::Other(Nlm4Stat::Denied) => Nlm4Stat::Failed.encode(w),
            Nlm4TestRply::Other(s) => s.encode(w),
        }
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_testres`.
    pub struct Nlm4TestRes<'a> {
        pub cookie: Netobj<'a>,
        pub stat: Nlm4TestRply<'a>,
    }
}

xdr_enum! {
    /// RFC 1813 6.1.4: `fsh4_mode`, the DOS deny mode of a share.
    pub enum Fsh4Mode {
        DenyNone = 0,
        DenyRead = 1,
        DenyWrite = 2,
        DenyReadWrite = 3,
    }
}

xdr_enum! {
    /// RFC 1813 6.1.4: `fsh4_access`, the DOS access mode of a share.
    pub enum Fsh4Access {
        None = 0,
        Read = 1,
        Write = 2,
        ReadWrite = 3,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_share`.
    pub struct Nlm4Share<'a> {
        pub caller_name: CallerName<'a>,
        pub fh: Netobj<'a>,
        pub oh: Netobj<'a>,
        pub mode: Fsh4Mode,
        pub access: Fsh4Access,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_shareargs` (SHARE, UNSHARE).
    pub struct Nlm4ShareArgs<'a> {
        pub cookie: Netobj<'a>,
        pub share: Nlm4Share<'a>,
        pub reclaim: bool,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_shareres`.
    pub struct Nlm4ShareRes<'a> {
        pub cookie: Netobj<'a>,
        pub stat: Nlm4Stat,
        pub sequence: i32,
    }
}

xdr_struct! {
    /// RFC 1813 6.1.4: `nlm4_notify` (FREE_ALL): the host whose locks go.
    pub struct Nlm4Notify<'a> {
        pub name: Opaque<'a, LM_MAXNAMELEN>,
        pub state: i32,
    }
}

// ---- NSM ------------------------------------------------------------------

xdr_enum! {
    /// XNFS NSM: `res`, the outcome of SM_STAT and SM_MON.
    pub enum SmRes {
        Succ = 0,
        Fail = 1,
    }
}

xdr_struct! {
    /// XNFS NSM: `sm_name`, the argument of SM_STAT.
    pub struct SmName<'a> {
        pub mon_name: Opaque<'a, SM_MAXSTRLEN>,
    }
}

xdr_struct! {
    /// XNFS NSM: `my_id`, the RPC the monitor calls back on a change.
    pub struct SmMyId<'a> {
        pub my_name: Opaque<'a, SM_MAXSTRLEN>,
        pub my_prog: i32,
        pub my_vers: i32,
        pub my_proc: i32,
    }
}

xdr_struct! {
    /// XNFS NSM: `mon_id` (SM_UNMON).
    pub struct SmMonId<'a> {
        pub mon_name: Opaque<'a, SM_MAXSTRLEN>,
        pub my_id: SmMyId<'a>,
    }
}

xdr_struct! {
    /// XNFS NSM: `mon` (SM_MON): the host to watch and 16 bytes for the
    /// callback.
    pub struct SmMon<'a> {
        pub mon_id: SmMonId<'a>,
        pub private: [u8; 16],
    }
}

xdr_struct! {
    /// XNFS NSM: `sm_stat_res` (SM_STAT, SM_MON).
    pub struct SmStatRes {
        pub res_stat: SmRes,
        pub state: i32,
    }
}

xdr_struct! {
    /// XNFS NSM: `sm_stat` (SM_UNMON, SM_UNMON_ALL).
    pub struct SmStat {
        pub state: i32,
    }
}

xdr_struct! {
    /// XNFS NSM: `stat_chge` (SM_NOTIFY): `mon_name` restarted and is now
    /// in `state`.
    pub struct SmStatChge<'a> {
        pub mon_name: Opaque<'a, SM_MAXSTRLEN>,
        pub state: i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs::xdr::{decode_all, encode_to_vec};

    fn lock<'a>() -> Nlm4Lock<'a> {
        Nlm4Lock {
            caller_name: Opaque(b"client-a"),
            fh: Opaque(&[0xD7; 28]),
            oh: Opaque(b"42@client-a"),
            svid: 42,
            l_offset: 1 << 40,
            l_len: 0,
        }
    }

    #[test]
    fn nlm4_arguments_round_trip() {
        let a = Nlm4LockArgs {
            cookie: Opaque(&[1, 2, 3]),
            block: true,
            exclusive: true,
            alock: lock(),
            reclaim: false,
            state: 3,
        };
        let b = encode_to_vec(&a);
        assert_eq!(b.len() % 4, 0);
        assert_eq!(decode_all::<Nlm4LockArgs>(&b).unwrap(), a);
        let t = Nlm4TestArgs { cookie: Opaque(b""), exclusive: false, alock: lock() };
        assert_eq!(decode_all::<Nlm4TestArgs>(&encode_to_vec(&t)).unwrap(), t);
        let c = Nlm4CancArgs { cookie: Opaque(b"c"), block: true, exclusive: false, alock: lock() };
        assert_eq!(decode_all::<Nlm4CancArgs>(&encode_to_vec(&c)).unwrap(), c);
        let u = Nlm4UnlockArgs { cookie: Opaque(b"u"), alock: lock() };
        assert_eq!(decode_all::<Nlm4UnlockArgs>(&encode_to_vec(&u)).unwrap(), u);
        let s = Nlm4ShareArgs {
            cookie: Opaque(b"s"),
            share: Nlm4Share {
                caller_name: Opaque(b"h"),
                fh: Opaque(b"fh"),
                oh: Opaque(b"oh"),
                mode: Fsh4Mode::DenyWrite,
                access: Fsh4Access::ReadWrite,
            },
            reclaim: true,
        };
        assert_eq!(decode_all::<Nlm4ShareArgs>(&encode_to_vec(&s)).unwrap(), s);
        let n = Nlm4Notify { name: Opaque(b"client-a"), state: 5 };
        assert_eq!(decode_all::<Nlm4Notify>(&encode_to_vec(&n)).unwrap(), n);
        let m = SmMon {
            mon_id: SmMonId {
                mon_name: Opaque(b"server"),
                my_id: SmMyId { my_name: Opaque(b"me"), my_prog: 100021, my_vers: 4, my_proc: 16 },
            },
            private: [9; 16],
        };
        assert_eq!(decode_all::<SmMon>(&encode_to_vec(&m)).unwrap(), m);
        let sc = SmStatChge { mon_name: Opaque(b"client-a"), state: 7 };
        assert_eq!(decode_all::<SmStatChge>(&encode_to_vec(&sc)).unwrap(), sc);
    }

    #[test]
    fn nlm4_results_round_trip() {
        let d = Nlm4TestRes {
            cookie: Opaque(b"k"),
            stat: Nlm4TestRply::Denied(Nlm4Holder {
                exclusive: true,
                svid: -7,
                oh: Opaque(b"o"),
                l_offset: 5,
                l_len: 0,
            }),
        };
        let b = encode_to_vec(&d);
        assert_eq!(decode_all::<Nlm4TestRes>(&b).unwrap(), d);
        let g = Nlm4TestRes { cookie: Opaque(b""), stat: Nlm4TestRply::Other(Nlm4Stat::Granted) };
        assert_eq!(encode_to_vec(&g), vec![0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decode_all::<Nlm4TestRes>(&encode_to_vec(&g)).unwrap(), g);
        let r = Nlm4Res { cookie: Opaque(b"abcde"), stat: Nlm4Stat::DeniedGracePeriod };
        assert_eq!(decode_all::<Nlm4Res>(&encode_to_vec(&r)).unwrap(), r);
        let s = Nlm4ShareRes { cookie: Opaque(b""), stat: Nlm4Stat::Blocked, sequence: 0 };
        assert_eq!(decode_all::<Nlm4ShareRes>(&encode_to_vec(&s)).unwrap(), s);
        let st = SmStatRes { res_stat: SmRes::Succ, state: 3 };
        assert_eq!(decode_all::<SmStatRes>(&encode_to_vec(&st)).unwrap(), st);
    }

    #[test]
    fn hostile_nlm4_bytes_are_refused_without_panic() {
        // A netobj longer than MAXNETOBJ_SZ.
        let mut w = XdrWriter::new();
        w.put_u32(MAXNETOBJ_SZ + 1);
        w.put_raw(&vec![0u8; 1028]);
        assert!(matches!(decode_all::<Nlm4UnlockArgs>(w.as_bytes()), Err(XdrError::TooLong { .. })));
        // A caller name longer than LM_MAXSTRLEN.
        let mut w = XdrWriter::new();
        w.put_opaque(b"");
        w.put_u32(LM_MAXSTRLEN + 1);
        w.put_raw(&vec![b'a'; 1028]);
        assert!(decode_all::<Nlm4UnlockArgs>(w.as_bytes()).is_err());
        // A length far past the bytes there.
        assert!(decode_all::<Nlm4TestArgs>(&[0, 0, 0, 8, 1, 2]).is_err());
        // A bad boolean, a bad enum.
        let mut w = XdrWriter::new();
        w.put_opaque(b"");
        w.put_u32(2);
        assert!(decode_all::<Nlm4TestArgs>(w.as_bytes()).is_err());
        let mut good = encode_to_vec(&Nlm4ShareArgs {
            cookie: Opaque(b""),
            share: Nlm4Share {
                caller_name: Opaque(b"h"),
                fh: Opaque(b""),
                oh: Opaque(b""),
                mode: Fsh4Mode::DenyNone,
                access: Fsh4Access::Read,
            },
            reclaim: false,
        });
        let at = good.len() - 12;
        good[at..at + 4].copy_from_slice(&9u32.to_be_bytes());
        assert!(decode_all::<Nlm4ShareArgs>(&good).is_err());
        // Every prefix and every single-byte corruption of a good message
        // decodes or fails, never panics.
        let a = encode_to_vec(&Nlm4LockArgs {
            cookie: Opaque(&[1, 2, 3]),
            block: true,
            exclusive: true,
            alock: lock(),
            reclaim: false,
            state: 3,
        });
        for n in 0..a.len() {
            assert!(decode_all::<Nlm4LockArgs>(&a[..n]).is_err(), "prefix {n}");
        }
        for i in 0..a.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut b = a.clone();
                b[i] = v;
                let _ = decode_all::<Nlm4LockArgs>(&b);
                let _ = decode_all::<Nlm4TestRes>(&b);
                let _ = decode_all::<SmMon>(&b);
            }
        }
    }
}
