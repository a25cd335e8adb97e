//! NFSv4.2 extended attributes (RFC 8276 section 8): GETXATTR, SETXATTR,
//! LISTXATTRS and REMOVEXATTR, optional operations of minor version 2.

use super::{ChangeInfo4, Component4, NFS4_MAX_DATA};
use crate::nfs::xdr::{xdr_enum, xdr_struct, List, Opaque};

/// Bound on the names of one LISTXATTRS reply (the server's store holds at
/// most 64 KiB of names and values per file).
pub const NFS4_MAX_XATTR_NAMES: u32 = 1 << 14;

/// RFC 8276 8.3: xattrkey4, a component4.
pub type XattrKey4<'a> = Component4<'a>;
/// RFC 8276 8.3: xattrvalue4, `opaque xattrvalue4<>`, bounded here by the
/// largest payload duet decodes; the server answers NFS4ERR_XATTR2BIG
/// above what it stores.
pub type XattrValue4<'a> = Opaque<'a, NFS4_MAX_DATA>;

xdr_struct! {
    /// RFC 8276 8.4.1.1: GETXATTR4args.
    pub struct GetXattr4Args<'a> {
        pub name: XattrKey4<'a>,
    }
}
xdr_struct! {
    /// RFC 8276 8.4.1.2: the GETXATTR4res resok arm.
    pub struct GetXattr4ResOk<'a> {
        pub value: XattrValue4<'a>,
    }
}

xdr_enum! {
    /// RFC 8276 8.4.2.1: setxattr_option4.
    pub enum SetXattrOption4 {
        Either = 0,
        Create = 1,
        Replace = 2,
    }
}

xdr_struct! {
    /// RFC 8276 8.4.2.1: SETXATTR4args.
    pub struct SetXattr4Args<'a> {
        pub option: SetXattrOption4,
        pub key: XattrKey4<'a>,
        pub value: XattrValue4<'a>,
    }
}
xdr_struct! {
    /// RFC 8276 8.4.2.2 and 8.4.4.2: the SETXATTR4res and REMOVEXATTR4res
    /// resok arm.
    pub struct XattrChange4ResOk {
        pub cinfo: ChangeInfo4,
    }
}

xdr_struct! {
    /// RFC 8276 8.4.3.1: LISTXATTRS4args.
    pub struct ListXattrs4Args {
        pub cookie: u64,
        pub maxcount: u32,
    }
}
xdr_struct! {
    /// RFC 8276 8.4.3.2: LISTXATTRS4resok.
    pub struct ListXattrs4ResOk<'a> {
        pub cookie: u64,
        pub names: List<XattrKey4<'a>, NFS4_MAX_XATTR_NAMES>,
        pub eof: bool,
    }
}

xdr_struct! {
    /// RFC 8276 8.4.4.1: REMOVEXATTR4args.
    pub struct RemoveXattr4Args<'a> {
        pub name: XattrKey4<'a>,
    }
}
