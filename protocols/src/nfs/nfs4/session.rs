//! NFSv4.1 client and session operations (RFC 8881 section 18.33-18.51):
//! EXCHANGE_ID, CREATE_SESSION, DESTROY_SESSION, BIND_CONN_TO_SESSION,
//! SEQUENCE, TEST_STATEID, FREE_STATEID, DESTROY_CLIENTID,
//! RECLAIM_COMPLETE, SECINFO_NO_NAME.

use super::ops::RpcGssSvc;
use super::{
    Bitmap4, NfsTime4, Nfsstat4, SecOid4, SessionId4, Stateid4, Utf8Str, Verifier4,
    NFS4_OPAQUE_LIMIT,
};
use crate::nfs::rpc::{AuthSysParms, AUTH_NONE, AUTH_SYS, RPCSEC_GSS};
use crate::nfs::xdr::{
    xdr_enum, xdr_struct, List, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter,
};

/// Bound on arrays of sec_oid4, GSS handles and callback security
/// parameters in session setup.
pub const NFS4_MAX_SEC_PARMS: u32 = 16;
/// Bound on TEST_STATEID's stateids.
pub const NFS4_MAX_TEST_STATEIDS: u32 = 1024;

/// RFC 8881 18.35.1: EXCHGID4_FLAG_* bits.
pub mod exchgid4_flag {
    pub const SUPP_MOVED_REFER: u32 = 0x0000_0001;
    pub const SUPP_MOVED_MIGR: u32 = 0x0000_0002;
    pub const BIND_PRINC_STATEID: u32 = 0x0000_0100;
    pub const USE_NON_PNFS: u32 = 0x0001_0000;
    pub const USE_PNFS_MDS: u32 = 0x0002_0000;
    pub const USE_PNFS_DS: u32 = 0x0004_0000;
    pub const MASK_PNFS: u32 = 0x0007_0000;
    pub const UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
    pub const CONFIRMED_R: u32 = 0x8000_0000;
}

/// RFC 8881 18.36.1: CREATE_SESSION4_FLAG_* bits.
pub mod create_session4_flag {
    pub const PERSIST: u32 = 0x0000_0001;
    pub const CONN_BACK_CHAN: u32 = 0x0000_0002;
    pub const CONN_RDMA: u32 = 0x0000_0004;
}

// ---- 18.33 BACKCHANNEL_CTL ----

xdr_struct! {
    /// RFC 8881 18.33.1: BACKCHANNEL_CTL4args.
    pub struct BackchannelCtl4Args<'a> {
        pub cb_program: u32,
        pub sec_parms: List<CallbackSecParms4<'a>, NFS4_MAX_SEC_PARMS>,
    }
}

// ---- 18.34 BIND_CONN_TO_SESSION ----

xdr_enum! {
    /// RFC 8881 18.34.1: channel_dir_from_client4.
    pub enum ChannelDirFromClient4 {
        Fore = 1,
        Back = 2,
        ForeOrBoth = 3,
        BackOrBoth = 7,
    }
}
xdr_enum! {
    /// RFC 8881 18.34.2: channel_dir_from_server4.
    pub enum ChannelDirFromServer4 {
        Fore = 1,
        Back = 2,
        Both = 3,
    }
}
xdr_struct! {
    /// RFC 8881 18.34.1: BIND_CONN_TO_SESSION4args.
    pub struct BindConnToSession4Args {
        pub sessid: SessionId4,
        pub dir: ChannelDirFromClient4,
        pub use_conn_in_rdma_mode: bool,
    }
}
xdr_struct! {
    /// RFC 8881 18.34.2: BIND_CONN_TO_SESSION4resok.
    pub struct BindConnToSession4ResOk {
        pub sessid: SessionId4,
        pub dir: ChannelDirFromServer4,
        pub use_conn_in_rdma_mode: bool,
    }
}

// ---- 18.35 EXCHANGE_ID ----

xdr_struct! {
    /// RFC 8881 18.35.1: client_owner4.
    pub struct ClientOwner4<'a> {
        pub verifier: Verifier4,
        pub ownerid: Opaque<'a, NFS4_OPAQUE_LIMIT>,
    }
}
xdr_struct! {
    /// RFC 8881 18.35.1: state_protect_ops4.
    pub struct StateProtectOps4 {
        pub must_enforce: Bitmap4,
        pub must_allow: Bitmap4,
    }
}
xdr_struct! {
    /// RFC 8881 18.35.1: ssv_sp_parms4.
    pub struct SsvSpParms4<'a> {
        pub ops: StateProtectOps4,
        pub hash_algs: List<SecOid4<'a>, NFS4_MAX_SEC_PARMS>,
        pub encr_algs: List<SecOid4<'a>, NFS4_MAX_SEC_PARMS>,
        pub window: u32,
        pub num_gss_handles: u32,
    }
}

/// RFC 8881 18.35.1: state_protect4_a, `union switch (state_protect_how4)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProtect4A<'a> {
    None,
    MachCred(StateProtectOps4),
    Ssv(SsvSpParms4<'a>),
}

impl<'a> XdrDecode<'a> for StateProtect4A<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            0 => StateProtect4A::None,
            1 => StateProtect4A::MachCred(r.get()?),
            2 => StateProtect4A::Ssv(r.get()?),
            v => {
                return Err(XdrError::BadDiscriminant {
                    what: "state_protect_how4",
                    value: v,
                })
            }
        })
    }
}
impl XdrEncode for StateProtect4A<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            StateProtect4A::None => w.put_u32(0),
            StateProtect4A::MachCred(o) => {
                w.put_u32(1);
                o.encode(w);
            }
            StateProtect4A::Ssv(p) => {
                w.put_u32(2);
                p.encode(w);
            }
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.35.1: nfs_impl_id4.
    pub struct NfsImplId4<'a> {
        pub domain: Utf8Str<'a>,
        pub name: Utf8Str<'a>,
        pub date: NfsTime4,
    }
}

xdr_struct! {
    /// RFC 8881 18.35.1: EXCHANGE_ID4args.
    pub struct ExchangeId4Args<'a> {
        pub clientowner: ClientOwner4<'a>,
        pub flags: u32,
        pub state_protect: StateProtect4A<'a>,
        /// `nfs_impl_id4 eia_client_impl_id<1>`.
        pub client_impl_id: List<NfsImplId4<'a>, 1>,
    }
}

xdr_struct! {
    /// RFC 8881 18.35.2: ssv_prot_info4.
    pub struct SsvProtInfo4<'a> {
        pub ops: StateProtectOps4,
        pub hash_alg: u32,
        pub encr_alg: u32,
        pub ssv_len: u32,
        pub window: u32,
        pub handles: List<Opaque<'a, NFS4_OPAQUE_LIMIT>, NFS4_MAX_SEC_PARMS>,
    }
}

/// RFC 8881 18.35.2: state_protect4_r.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProtect4R<'a> {
    None,
    MachCred(StateProtectOps4),
    Ssv(SsvProtInfo4<'a>),
}

impl<'a> XdrDecode<'a> for StateProtect4R<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            0 => StateProtect4R::None,
            1 => StateProtect4R::MachCred(r.get()?),
            2 => StateProtect4R::Ssv(r.get()?),
            v => {
                return Err(XdrError::BadDiscriminant {
                    what: "state_protect_how4",
                    value: v,
                })
            }
        })
    }
}
impl XdrEncode for StateProtect4R<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            StateProtect4R::None => w.put_u32(0),
            StateProtect4R::MachCred(o) => {
                w.put_u32(1);
                o.encode(w);
            }
            StateProtect4R::Ssv(p) => {
                w.put_u32(2);
                p.encode(w);
            }
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.35.2: server_owner4.
    pub struct ServerOwner4<'a> {
        pub minor_id: u64,
        pub major_id: Opaque<'a, NFS4_OPAQUE_LIMIT>,
    }
}

xdr_struct! {
    /// RFC 8881 18.35.2: EXCHANGE_ID4resok.
    pub struct ExchangeId4ResOk<'a> {
        pub clientid: u64,
        pub sequenceid: u32,
        pub flags: u32,
        pub state_protect: StateProtect4R<'a>,
        pub server_owner: ServerOwner4<'a>,
        pub server_scope: Opaque<'a, NFS4_OPAQUE_LIMIT>,
        pub server_impl_id: List<NfsImplId4<'a>, 1>,
    }
}

// ---- 18.36 CREATE_SESSION ----

xdr_struct! {
    /// RFC 8881 18.36.1: channel_attrs4.
    pub struct ChannelAttrs4 {
        pub headerpadsize: u32,
        pub maxrequestsize: u32,
        pub maxresponsesize: u32,
        pub maxresponsesize_cached: u32,
        pub maxoperations: u32,
        pub maxrequests: u32,
        /// `uint32_t ca_rdma_ird<1>`.
        pub rdma_ird: List<u32, 1>,
    }
}

xdr_struct! {
    /// RFC 8881 18.36.1: gss_cb_handles4.
    pub struct GssCbHandles4<'a> {
        pub service: RpcGssSvc,
        pub handle_from_server: Opaque<'a, NFS4_OPAQUE_LIMIT>,
        pub handle_from_client: Opaque<'a, NFS4_OPAQUE_LIMIT>,
    }
}

/// RFC 8881 18.36.1: callback_sec_parms4, `union switch (uint32_t
/// cb_secflavor)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackSecParms4<'a> {
    None,
    Sys(AuthSysParms<'a>),
    Gss(GssCbHandles4<'a>),
}

impl<'a> XdrDecode<'a> for CallbackSecParms4<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            AUTH_NONE => CallbackSecParms4::None,
            AUTH_SYS => CallbackSecParms4::Sys(r.get()?),
            RPCSEC_GSS => CallbackSecParms4::Gss(r.get()?),
            v => {
                return Err(XdrError::BadDiscriminant {
                    what: "cb_secflavor",
                    value: v,
                })
            }
        })
    }
}
impl XdrEncode for CallbackSecParms4<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            CallbackSecParms4::None => w.put_u32(AUTH_NONE),
            CallbackSecParms4::Sys(p) => {
                w.put_u32(AUTH_SYS);
                p.encode(w);
            }
            CallbackSecParms4::Gss(g) => {
                w.put_u32(RPCSEC_GSS);
                g.encode(w);
            }
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.36.1: CREATE_SESSION4args.
    pub struct CreateSession4Args<'a> {
        pub clientid: u64,
        pub sequence: u32,
        pub flags: u32,
        pub fore_chan_attrs: ChannelAttrs4,
        pub back_chan_attrs: ChannelAttrs4,
        pub cb_program: u32,
        pub sec_parms: List<CallbackSecParms4<'a>, NFS4_MAX_SEC_PARMS>,
    }
}
xdr_struct! {
    /// RFC 8881 18.36.2: CREATE_SESSION4resok.
    pub struct CreateSession4ResOk {
        pub sessionid: SessionId4,
        pub sequence: u32,
        pub flags: u32,
        pub fore_chan_attrs: ChannelAttrs4,
        pub back_chan_attrs: ChannelAttrs4,
    }
}

// ---- 18.37 DESTROY_SESSION ----

xdr_struct! {
    /// RFC 8881 18.37.1: DESTROY_SESSION4args.
    pub struct DestroySession4Args {
        pub sessionid: SessionId4,
    }
}

// ---- 18.38 FREE_STATEID ----

xdr_struct! {
    /// RFC 8881 18.38.1: FREE_STATEID4args.
    pub struct FreeStateid4Args {
        pub stateid: Stateid4,
    }
}

// ---- 18.45 SECINFO_NO_NAME ----

xdr_enum! {
    /// RFC 8881 18.45.1: secinfo_style4, the whole of SECINFO_NO_NAME4args.
    pub enum SecInfoStyle4 {
        CurrentFh = 0,
        Parent = 1,
    }
}

// ---- 18.46 SEQUENCE ----

/// RFC 8881 18.46.3: SEQ4_STATUS_* bits of sr_status_flags.
pub mod seq4_status {
    pub const CB_PATH_DOWN: u32 = 0x0000_0001;
    pub const CB_GSS_CONTEXTS_EXPIRING: u32 = 0x0000_0002;
    pub const CB_GSS_CONTEXTS_EXPIRED: u32 = 0x0000_0004;
    pub const EXPIRED_ALL_STATE_REVOKED: u32 = 0x0000_0008;
    pub const EXPIRED_SOME_STATE_REVOKED: u32 = 0x0000_0010;
    pub const ADMIN_STATE_REVOKED: u32 = 0x0000_0020;
    pub const RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;
    pub const LEASE_MOVED: u32 = 0x0000_0080;
    pub const RESTART_RECLAIM_NEEDED: u32 = 0x0000_0100;
    pub const CB_PATH_DOWN_SESSION: u32 = 0x0000_0200;
    pub const BACKCHANNEL_FAULT: u32 = 0x0000_0400;
    pub const DEVID_CHANGED: u32 = 0x0000_0800;
    pub const DEVID_DELETED: u32 = 0x0000_1000;
}

xdr_struct! {
    /// RFC 8881 18.46.1: SEQUENCE4args.
    pub struct Sequence4Args {
        pub sessionid: SessionId4,
        pub sequenceid: u32,
        pub slotid: u32,
        pub highest_slotid: u32,
        pub cachethis: bool,
    }
}
xdr_struct! {
    /// RFC 8881 18.46.2: SEQUENCE4resok.
    pub struct Sequence4ResOk {
        pub sessionid: SessionId4,
        pub sequenceid: u32,
        pub slotid: u32,
        pub highest_slotid: u32,
        pub target_highest_slotid: u32,
        pub status_flags: u32,
    }
}

// ---- 18.48 TEST_STATEID ----

xdr_struct! {
    /// RFC 8881 18.48.1: TEST_STATEID4args.
    pub struct TestStateid4Args {
        pub stateids: List<Stateid4, NFS4_MAX_TEST_STATEIDS>,
    }
}
xdr_struct! {
    /// RFC 8881 18.48.2: TEST_STATEID4resok.
    pub struct TestStateid4ResOk {
        pub status_codes: List<Nfsstat4, NFS4_MAX_TEST_STATEIDS>,
    }
}

// ---- 18.50 DESTROY_CLIENTID ----

xdr_struct! {
    /// RFC 8881 18.50.1: DESTROY_CLIENTID4args.
    pub struct DestroyClientId4Args {
        pub clientid: u64,
    }
}

// ---- 18.51 RECLAIM_COMPLETE ----

xdr_struct! {
    /// RFC 8881 18.51.1: RECLAIM_COMPLETE4args.
    pub struct ReclaimComplete4Args {
        pub one_fs: bool,
    }
}
