//! MOUNT protocol version 3 (RFC 1813 appendix I), program 100005.

use super::xdr::{
    xdr_status, xdr_struct, LinkedList, List, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader,
    XdrWriter,
};

pub const MOUNT_VERSION_3: u32 = 3;
/// RFC 1813 appendix I: MNTPATHLEN, bound on a dirpath.
pub const MNTPATHLEN: u32 = 1024;
/// RFC 1813 appendix I: MNTNAMLEN, bound on a host or group name.
pub const MNTNAMLEN: u32 = 255;
/// RFC 1813 appendix I: FHSIZE3, bound on a file handle.
pub const FHSIZE3: u32 = 64;
/// Bound on the auth flavours a MNT reply lists.
pub const MAX_AUTH_FLAVORS: u32 = 16;
/// Bound on entries of the DUMP and EXPORT lists and on the groups of one
/// export.
pub const MAX_MOUNT_LIST: u32 = 4096;

/// RFC 1813 appendix I, 5.2: MOUNTPROC3_* procedure numbers.
pub mod mountproc3 {
    pub const NULL: u32 = 0;
    pub const MNT: u32 = 1;
    pub const DUMP: u32 = 2;
    pub const UMNT: u32 = 3;
    pub const UMNTALL: u32 = 4;
    pub const EXPORT: u32 = 5;
}

/// RFC 1813 appendix I: `typedef string dirpath<MNTPATHLEN>`, the argument
/// of MNT and UMNT.
pub type DirPath<'a> = Opaque<'a, MNTPATHLEN>;
/// RFC 1813 appendix I: `typedef string name<MNTNAMLEN>`.
pub type MountName<'a> = Opaque<'a, MNTNAMLEN>;
/// RFC 1813 appendix I: `typedef opaque fhandle3<FHSIZE3>`.
pub type FHandle3<'a> = Opaque<'a, FHSIZE3>;

xdr_status! {
    /// RFC 1813 appendix I: enum mountstat3.
    pub struct MountStat3 {
        OK = 0,
        ERR_PERM = 1,
        ERR_NOENT = 2,
        ERR_IO = 5,
        ERR_ACCES = 13,
        ERR_NOTDIR = 20,
        ERR_INVAL = 22,
        ERR_NAMETOOLONG = 63,
        ERR_NOTSUPP = 10004,
        ERR_SERVERFAULT = 10006,
    }
}

xdr_struct! {
    /// RFC 1813 appendix I: struct mountres3_ok.
    pub struct MountRes3Ok<'a> {
        pub fhandle: FHandle3<'a>,
        pub auth_flavors: List<u32, MAX_AUTH_FLAVORS>,
    }
}

/// RFC 1813 appendix I: union mountres3, the result of MNT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountRes3<'a> {
    Ok(MountRes3Ok<'a>),
    Err(MountStat3),
}

impl<'a> XdrDecode<'a> for MountRes3<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let status = MountStat3::decode(r)?;
        if status == MountStat3::OK {
            Ok(MountRes3::Ok(MountRes3Ok::decode(r)?))
        } else {
            Ok(MountRes3::Err(status))
        }
    }
}
impl XdrEncode for MountRes3<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            MountRes3::Ok(ok) => {
                MountStat3::OK.encode(w);
                ok.encode(w);
            }
            MountRes3::Err(status) => status.encode(w),
        }
    }
}

xdr_struct! {
    /// RFC 1813 appendix I: struct mountbody without its `ml_next` link; a
    /// [`MountList`] chains them.
    pub struct MountBody<'a> {
        pub hostname: MountName<'a>,
        pub directory: DirPath<'a>,
    }
}

/// RFC 1813 appendix I: mountlist, the result of DUMP.
pub type MountList<'a> = LinkedList<MountBody<'a>, MAX_MOUNT_LIST>;

/// RFC 1813 appendix I: groups, the chained groupnode list.
pub type Groups<'a> = LinkedList<MountName<'a>, MAX_MOUNT_LIST>;

xdr_struct! {
    /// RFC 1813 appendix I: struct exportnode without its `ex_next` link.
    pub struct ExportNode<'a> {
        pub dir: DirPath<'a>,
        pub groups: Groups<'a>,
    }
}

/// RFC 1813 appendix I: exports, the result of EXPORT.
pub type Exports<'a> = LinkedList<ExportNode<'a>, MAX_MOUNT_LIST>;
