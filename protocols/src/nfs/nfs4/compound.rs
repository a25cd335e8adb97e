//! COMPOUND (RFC 8881 sections 15.2, 16.2): the envelope and the
//! per-operation dispatch of arguments and results.
//!
//! Decoding a COMPOUND never fails past its header: an operation that is
//! unknown, not supported or malformed ends the decoded list with a
//! [`CompoundStop`] that says which status the server returns for it. The
//! server executes the decoded operations in order and, if they all
//! succeed, answers the stop operation with that status; the reply then
//! ends there as RFC 8881 16.2.3 requires.

use super::ops::*;
use super::session::*;
use super::v42::*;
use super::xattr::*;
use super::{opnum, Nfs4Res, Nfsstat4, OpStatus, Stateid4, Status4Res, Utf8Str};
use crate::nfs::xdr::{XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter};

/// Limits applied while decoding a COMPOUND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompoundLimits {
    /// Most operations one COMPOUND may carry. duet takes at least 256
    /// (vNFS batches); sessions may negotiate fewer (ca_maxoperations,
    /// which the server checks at SEQUENCE).
    pub max_ops: u32,
    /// Lowest and highest minor version served.
    pub min_minor_version: u32,
    pub max_minor_version: u32,
}

impl Default for CompoundLimits {
    fn default() -> Self {
        CompoundLimits {
            max_ops: 1024,
            min_minor_version: 1,
            max_minor_version: 2,
        }
    }
}

/// Why decoding of a COMPOUND's operations stopped before the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompoundStop {
    /// The minor version is not served: the reply is COMPOUND4res with
    /// NFS4ERR_MINOR_VERS_MISMATCH and no results (RFC 8881 16.2.3).
    MinorVersMismatch(u32),
    /// More operations than [`CompoundLimits::max_ops`]: the reply is
    /// NFS4ERR_TOO_MANY_OPS (4.1; RESOURCE in 4.0) and no results.
    TooManyOps { count: u32, max: u32 },
    /// An operation number outside the minor version's set: its result is
    /// OP_ILLEGAL with NFS4ERR_OP_ILLEGAL (RFC 8881 15.2, 18.52 ILLEGAL).
    Illegal { opnum: u32 },
    /// A defined operation duet does not implement (layouts, delegation
    /// wants, 4.0-only operations in 4.1): NFS4ERR_NOTSUPP.
    NotSupported { opnum: u32 },
    /// The operation's arguments did not decode: NFS4ERR_BADXDR (or the
    /// more precise status of [`XdrError::nfs4_status`]).
    BadXdr { opnum: u32, error: XdrError },
}

impl CompoundStop {
    /// The status for the stop operation's result, or for the whole
    /// COMPOUND when no operation is executed.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            CompoundStop::MinorVersMismatch(_) => Nfsstat4::MINOR_VERS_MISMATCH,
            CompoundStop::TooManyOps { .. } => Nfsstat4::TOO_MANY_OPS,
            CompoundStop::Illegal { .. } => Nfsstat4::OP_ILLEGAL,
            CompoundStop::NotSupported { .. } => Nfsstat4::NOTSUPP,
            CompoundStop::BadXdr { error, .. } => error.nfs4_status(),
        }
    }

    /// The result to append after the executed operations' results, if the
    /// stop takes a slot in the result array.
    pub fn result(&self) -> Option<ResOp4<'static>> {
        match self {
            CompoundStop::MinorVersMismatch(_) | CompoundStop::TooManyOps { .. } => None,
            CompoundStop::Illegal { .. } => Some(ResOp4::Illegal(Nfsstat4::OP_ILLEGAL)),
            CompoundStop::NotSupported { opnum } | CompoundStop::BadXdr { opnum, .. } => {
                Some(ResOp4::Failed {
                    opnum: *opnum,
                    status: self.status(),
                })
            }
        }
    }

    /// True when no operation is executed at all.
    pub fn rejects_whole_compound(&self) -> bool {
        matches!(
            self,
            CompoundStop::MinorVersMismatch(_) | CompoundStop::TooManyOps { .. }
        )
    }
}

/// RFC 8881 16.2.1: COMPOUND4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4Args<'a> {
    pub tag: Utf8Str<'a>,
    pub minorversion: u32,
    /// The operations decoded, in order.
    pub ops: Vec<ArgOp4<'a>>,
    /// Set when decoding stopped before the declared end.
    pub stop: Option<CompoundStop>,
}

impl<'a> Compound4Args<'a> {
    /// Decodes COMPOUND4args. An `Err` means the header itself (tag,
    /// minorversion, operation count) did not decode: answer GARBAGE_ARGS.
    /// Trailing bytes after a complete list are an error too.
    pub fn decode(r: &mut XdrReader<'a>, limits: &CompoundLimits) -> Result<Self, XdrError> {
        let tag = Utf8Str::decode(r)?;
        let minorversion = r.get_u32()?;
        let count = r.get_u32()?;
        let mut args = Compound4Args {
            tag,
            minorversion,
            ops: Vec::new(),
            stop: None,
        };
        if minorversion < limits.min_minor_version || minorversion > limits.max_minor_version {
            args.stop = Some(CompoundStop::MinorVersMismatch(minorversion));
            return Ok(args);
        }
        if count > limits.max_ops {
            args.stop = Some(CompoundStop::TooManyOps {
                count,
                max: limits.max_ops,
            });
            return Ok(args);
        }
        // Each operation is at least its 4-byte number.
        let plausible = (r.remaining() / 4).min(count as usize);
        args.ops.reserve(plausible);
        for _ in 0..count {
            let op = r.get_u32()?;
            match ArgOp4::decode(op, minorversion, r) {
                Ok(arg) => args.ops.push(arg),
                Err(stop) => {
                    args.stop = Some(stop);
                    return Ok(args);
                }
            }
        }
        r.finish()?;
        Ok(args)
    }
}

impl XdrEncode for Compound4Args<'_> {
    /// Encodes the decoded operations; a stop is not re-encoded.
    fn encode(&self, w: &mut XdrWriter) {
        self.tag.encode(w);
        w.put_u32(self.minorversion);
        w.put_u32(self.ops.len() as u32);
        for op in &self.ops {
            w.put_u32(op.opnum());
            op.encode_args(w);
        }
    }
}

/// RFC 8881 16.2.2: COMPOUND4res.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4Res<'a> {
    /// The status of the last result, or of the whole COMPOUND.
    pub status: Nfsstat4,
    pub tag: Utf8Str<'a>,
    pub results: Vec<ResOp4<'a>>,
}

impl<'a> Compound4Res<'a> {
    /// Builds a reply from results, taking the status of the last one
    /// (RFC 8881 16.2.3).
    pub fn from_results(tag: Utf8Str<'a>, results: Vec<ResOp4<'a>>) -> Self {
        let status = results.last().map(|r| r.status()).unwrap_or(Nfsstat4::OK);
        Compound4Res {
            status,
            tag,
            results,
        }
    }

    /// Decodes COMPOUND4res (a client, or a test), at most `max_ops`
    /// results.
    pub fn decode(r: &mut XdrReader<'a>, max_ops: u32) -> Result<Self, XdrError> {
        let status = Nfsstat4::decode(r)?;
        let tag = Utf8Str::decode(r)?;
        let count = r.get_count(max_ops, 8, "resarray")?;
        let mut results = Vec::with_capacity(count);
        for _ in 0..count {
            let op = r.get_u32()?;
            results.push(ResOp4::decode(op, r)?);
        }
        r.finish()?;
        Ok(Compound4Res {
            status,
            tag,
            results,
        })
    }
}

impl XdrEncode for Compound4Res<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        self.status.encode(w);
        self.tag.encode(w);
        w.put_u32(self.results.len() as u32);
        for res in &self.results {
            w.put_u32(res.opnum());
            res.encode_result(w);
        }
    }
}

/// Whether an operation number is defined for a minor version (RFC 8881
/// 16.2.3, RFC 7862 section 14: 3..=39 in 4.0, up to 58 in 4.1, up to 71
/// in 4.2).
fn defined_in_minor(op: u32, minorversion: u32) -> bool {
    let last = match minorversion {
        0 => opnum::RELEASE_LOCKOWNER,
        1 => opnum::RECLAIM_COMPLETE,
        _ => opnum::REMOVEXATTR,
    };
    (opnum::ACCESS..=last).contains(&op)
}

/// Operations of 4.0 that 4.1 removed: "MUST NOT" be sent, answered with
/// NFS4ERR_NOTSUPP (RFC 8881 section 16.2.3 and the "MUST NOT be
/// implemented" notes of NFSv4.1).
fn removed_in_41(op: u32) -> bool {
    matches!(
        op,
        opnum::OPEN_CONFIRM
            | opnum::RENEW
            | opnum::SETCLIENTID
            | opnum::SETCLIENTID_CONFIRM
            | opnum::RELEASE_LOCKOWNER
    )
}

macro_rules! compound_ops {
    ($lt:lifetime; $( $variant:ident = $num:path : $args:ty => $res:ty ),* $(,)?) => {
        /// One operation's arguments, nfs_argop4 (RFC 8881 16.2.1).
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum ArgOp4<$lt> {
            $( $variant($args), )*
        }

        /// One operation's result, nfs_resop4 (RFC 8881 16.2.2).
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum ResOp4<$lt> {
            $( $variant($res), )*
            /// ILLEGAL4res for an unknown operation (opcode OP_ILLEGAL).
            Illegal(Nfsstat4),
            /// An error result with no body for an operation duet does not
            /// decode the results of (NOTSUPP, BADXDR).
            Failed { opnum: u32, status: Nfsstat4 },
        }

        impl<$lt> ArgOp4<$lt> {
            pub fn opnum(&self) -> u32 {
                match self {
                    $( ArgOp4::$variant(_) => $num, )*
                }
            }

            /// Decodes the arguments of operation `op`, or says why the
            /// COMPOUND stops here.
            pub fn decode(
                op: u32,
                minorversion: u32,
                r: &mut XdrReader<$lt>,
            ) -> Result<Self, CompoundStop> {
                if !defined_in_minor(op, minorversion) {
                    return Err(CompoundStop::Illegal { opnum: op });
                }
                if minorversion >= 1 && removed_in_41(op) {
                    return Err(CompoundStop::NotSupported { opnum: op });
                }
                let bad = |error| CompoundStop::BadXdr { opnum: op, error };
                match op {
                    $( $num => Ok(ArgOp4::$variant(<$args>::decode(r).map_err(bad)?)), )*
                    _ => Err(CompoundStop::NotSupported { opnum: op }),
                }
            }

            pub fn encode_args(&self, w: &mut XdrWriter) {
                match self {
                    $( ArgOp4::$variant(a) => a.encode(w), )*
                }
            }
        }

        impl<$lt> ResOp4<$lt> {
            pub fn opnum(&self) -> u32 {
                match self {
                    $( ResOp4::$variant(_) => $num, )*
                    ResOp4::Illegal(_) => opnum::ILLEGAL,
                    ResOp4::Failed { opnum, .. } => *opnum,
                }
            }

            pub fn status(&self) -> Nfsstat4 {
                match self {
                    $( ResOp4::$variant(r) => OpStatus::status(r), )*
                    ResOp4::Illegal(s) => *s,
                    ResOp4::Failed { status, .. } => *status,
                }
            }

            /// Decodes the result of operation `op`. A result of an
            /// operation without a decoder is accepted only as a bare error
            /// status.
            pub fn decode(op: u32, r: &mut XdrReader<$lt>) -> Result<Self, XdrError> {
                match op {
                    $( $num => Ok(ResOp4::$variant(<$res>::decode(r)?)), )*
                    opnum::ILLEGAL => Ok(ResOp4::Illegal(Nfsstat4::decode(r)?)),
                    other => {
                        let status = Nfsstat4::decode(r)?;
                        if status == Nfsstat4::OK {
                            return Err(XdrError::BadDiscriminant {
                                what: "nfs_opnum4 result",
                                value: other,
                            });
                        }
                        Ok(ResOp4::Failed { opnum: other, status })
                    }
                }
            }

            pub fn encode_result(&self, w: &mut XdrWriter) {
                match self {
                    $( ResOp4::$variant(x) => x.encode(w), )*
                    ResOp4::Illegal(s) => s.encode(w),
                    ResOp4::Failed { status, .. } => status.encode(w),
                }
            }
        }
    };
}

compound_ops! { 'a;
    Access = opnum::ACCESS: Access4Args => Nfs4Res<Access4ResOk>,
    Close = opnum::CLOSE: Close4Args => Nfs4Res<Stateid4>,
    Commit = opnum::COMMIT: Commit4Args => Nfs4Res<Commit4ResOk>,
    Create = opnum::CREATE: Create4Args<'a> => Nfs4Res<Create4ResOk>,
    DelegReturn = opnum::DELEGRETURN: DelegReturn4Args => Status4Res,
    GetAttr = opnum::GETATTR: GetAttr4Args => Nfs4Res<GetAttr4ResOk<'a>>,
    GetFh = opnum::GETFH: () => Nfs4Res<GetFh4ResOk<'a>>,
    Link = opnum::LINK: Link4Args<'a> => Nfs4Res<Link4ResOk>,
    Lock = opnum::LOCK: Lock4Args<'a> => Lock4Res<'a>,
    LockT = opnum::LOCKT: LockT4Args<'a> => LockT4Res<'a>,
    LockU = opnum::LOCKU: LockU4Args => Nfs4Res<Stateid4>,
    Lookup = opnum::LOOKUP: Lookup4Args<'a> => Status4Res,
    LookupP = opnum::LOOKUPP: () => Status4Res,
    NVerify = opnum::NVERIFY: Verify4Args<'a> => Status4Res,
    Open = opnum::OPEN: Open4Args<'a> => Nfs4Res<Open4ResOk<'a>>,
    OpenDowngrade = opnum::OPEN_DOWNGRADE: OpenDowngrade4Args => Nfs4Res<Stateid4>,
    PutFh = opnum::PUTFH: PutFh4Args<'a> => Status4Res,
    PutPubFh = opnum::PUTPUBFH: () => Status4Res,
    PutRootFh = opnum::PUTROOTFH: () => Status4Res,
    Read = opnum::READ: Read4Args => Nfs4Res<Read4ResOk<'a>>,
    ReadDir = opnum::READDIR: ReadDir4Args => Nfs4Res<ReadDir4ResOk<'a>>,
    ReadLink = opnum::READLINK: () => Nfs4Res<ReadLink4ResOk<'a>>,
    Remove = opnum::REMOVE: Remove4Args<'a> => Nfs4Res<Remove4ResOk>,
    Rename = opnum::RENAME: Rename4Args<'a> => Nfs4Res<Rename4ResOk>,
    RestoreFh = opnum::RESTOREFH: () => Status4Res,
    SaveFh = opnum::SAVEFH: () => Status4Res,
    SecInfo = opnum::SECINFO: SecInfo4Args<'a> => Nfs4Res<SecInfo4ResOk<'a>>,
    SetAttr = opnum::SETATTR: SetAttr4Args<'a> => SetAttr4Res,
    Verify = opnum::VERIFY: Verify4Args<'a> => Status4Res,
    Write = opnum::WRITE: Write4Args<'a> => Nfs4Res<Write4ResOk>,
    BackchannelCtl = opnum::BACKCHANNEL_CTL: BackchannelCtl4Args<'a> => Status4Res,
    BindConnToSession = opnum::BIND_CONN_TO_SESSION:
        BindConnToSession4Args => Nfs4Res<BindConnToSession4ResOk>,
    ExchangeId = opnum::EXCHANGE_ID: ExchangeId4Args<'a> => Nfs4Res<ExchangeId4ResOk<'a>>,
    CreateSession = opnum::CREATE_SESSION:
        CreateSession4Args<'a> => Nfs4Res<CreateSession4ResOk>,
    DestroySession = opnum::DESTROY_SESSION: DestroySession4Args => Status4Res,
    FreeStateid = opnum::FREE_STATEID: FreeStateid4Args => Status4Res,
    SecInfoNoName = opnum::SECINFO_NO_NAME: SecInfoStyle4 => Nfs4Res<SecInfo4ResOk<'a>>,
    Sequence = opnum::SEQUENCE: Sequence4Args => Nfs4Res<Sequence4ResOk>,
    TestStateid = opnum::TEST_STATEID: TestStateid4Args => Nfs4Res<TestStateid4ResOk>,
    DestroyClientId = opnum::DESTROY_CLIENTID: DestroyClientId4Args => Status4Res,
    ReclaimComplete = opnum::RECLAIM_COMPLETE: ReclaimComplete4Args => Status4Res,
    Allocate = opnum::ALLOCATE: Allocate4Args => Status4Res,
    Copy = opnum::COPY: Copy4Args<'a> => Copy4Res,
    Deallocate = opnum::DEALLOCATE: Deallocate4Args => Status4Res,
    ReadPlus = opnum::READ_PLUS: ReadPlus4Args => Nfs4Res<ReadPlus4ResOk<'a>>,
    Seek = opnum::SEEK: Seek4Args => Nfs4Res<Seek4ResOk>,
    Clone = opnum::CLONE: Clone4Args => Status4Res,
    GetXattr = opnum::GETXATTR: GetXattr4Args<'a> => Nfs4Res<GetXattr4ResOk<'a>>,
    SetXattr = opnum::SETXATTR: SetXattr4Args<'a> => Nfs4Res<XattrChange4ResOk>,
    ListXattrs = opnum::LISTXATTRS: ListXattrs4Args => Nfs4Res<ListXattrs4ResOk<'a>>,
    RemoveXattr = opnum::REMOVEXATTR: RemoveXattr4Args<'a> => Nfs4Res<XattrChange4ResOk>,
}
