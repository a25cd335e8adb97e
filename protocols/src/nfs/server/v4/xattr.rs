//! NFSv4.2 extended attributes (RFC 8276 section 8.4): GETXATTR,
//! SETXATTR, LISTXATTRS and REMOVEXATTR over the file-system model's
//! extended attributes, the store SMB's EAs use (`Op::GetEas` to read,
//! `Op::SetXattr` to change one name exactly).
//!
//! Names are exact here (RFC 8276 is case-sensitive); SMB compares them
//! ignoring case and writes its own in upper case, as NTFS does, so a name
//! an NFS client set as `user.a` is seen by SMB clients as `user.a` and
//! replaced by an SMB write of `USER.A`.

use duet_fs::{Attrs, FsError, Op, OpOutput, OpResult, XattrHow};

use super::{attr, put, Compound, Flow, Step};
use crate::nfs::nfs4::*;
use crate::nfs::xdr::{List, Name, Opaque};
use crate::nfs::server::errors::nfs4_status;

/// The largest value duet stores (MS-FSCC 2.4.15's EA bound, which the
/// shared store keeps): above it SETXATTR answers NFS4ERR_XATTR2BIG
/// (RFC 8276 8.4.2.3).
const XATTR_VALUE_MAX: usize = 65535;

/// What an extended-attribute operation waits for.
pub(super) enum XattrStep {
    /// GETXATTR of `name` from the attributes `op` read.
    Get { op: usize, name: Vec<u8> },
    /// LISTXATTRS from the attributes `op` read.
    List { op: usize, cookie: u64, maxcount: u32 },
    /// SETXATTR or REMOVEXATTR: the change `op` made.
    Change { opnum: u32, op: usize },
}

/// An xattr key as the store's name: UTF-8 (RFC 8276 8.3: a component4,
/// utf8str_cs), not empty, no NUL.
fn key(k: &XattrKey4<'_>) -> Result<String, Nfsstat4> {
    let s = std::str::from_utf8(k.0).map_err(|_| Nfsstat4::INVAL)?;
    if s.is_empty() || s.contains('\0') {
        return Err(Nfsstat4::INVAL);
    }
    Ok(s.to_string())
}

/// GETXATTR (RFC 8276 8.4.1).
pub(super) fn op_getxattr(c: &mut Compound, a: &GetXattr4Args<'_>, b: &mut duet_fs::Batch) -> Result<Flow, Nfsstat4> {
    let (_, obj) = c.obj()?;
    let name = key(&a.name)?.into_bytes();
    b.push(Op::GetEas { obj });
    c.steps.push(Step::Xattr(XattrStep::Get { op: b.ops.len() - 1, name }));
    Ok(Flow::Next)
}

/// LISTXATTRS (RFC 8276 8.4.3).
pub(super) fn op_listxattrs(c: &mut Compound, a: &ListXattrs4Args, b: &mut duet_fs::Batch) -> Result<Flow, Nfsstat4> {
    let (_, obj) = c.obj()?;
    b.push(Op::GetEas { obj });
    c.steps.push(Step::Xattr(XattrStep::List { op: b.ops.len() - 1, cookie: a.cookie, maxcount: a.maxcount }));
    Ok(Flow::Next)
}

/// SETXATTR (RFC 8276 8.4.2).
pub(super) fn op_setxattr(c: &mut Compound, a: &SetXattr4Args<'_>, b: &mut duet_fs::Batch) -> Result<Flow, Nfsstat4> {
    let (_, obj) = c.obj()?;
    let name = key(&a.key)?;
    if a.value.0.len() > XATTR_VALUE_MAX {
        return Err(Nfsstat4::XATTR2BIG);
    }
    let how = match a.option {
        SetXattrOption4::Either => XattrHow::Either,
        SetXattrOption4::Create => XattrHow::Create,
        SetXattrOption4::Replace => XattrHow::Replace,
    };
    b.push(Op::SetXattr { obj, name, value: a.value.0.to_vec(), how });
    c.steps.push(Step::Xattr(XattrStep::Change { opnum: opnum::SETXATTR, op: b.ops.len() - 1 }));
    Ok(Flow::Next)
}

/// REMOVEXATTR (RFC 8276 8.4.4).
pub(super) fn op_removexattr(c: &mut Compound, a: &RemoveXattr4Args<'_>, b: &mut duet_fs::Batch) -> Result<Flow, Nfsstat4> {
    let (_, obj) = c.obj()?;
    let name = key(&a.name)?;
    b.push(Op::SetXattr { obj, name, value: Vec::new(), how: XattrHow::Remove });
    c.steps.push(Step::Xattr(XattrStep::Change { opnum: opnum::REMOVEXATTR, op: b.ops.len() - 1 }));
    Ok(Flow::Next)
}

/// The attributes a read op produced, readable by the caller (RFC 8276
/// 8.4.1.3: reading needs ACCESS4_XAREAD, which duet grants with read
/// permission).
fn readable<'r>(c: &Compound, results: &'r [OpResult], op: usize) -> Result<(&'r [(String, Vec<u8>)], &'r Attrs), Nfsstat4> {
    match results.get(op) {
        Some(Ok(OpOutput::Eas { eas, attrs })) => {
            if attr::perm_bits(&c.cred, attrs) & 4 == 0 && c.cred.uid != 0 {
                return Err(Nfsstat4::ACCESS);
            }
            Ok((eas, attrs))
        }
        Some(Ok(_)) | None => Err(Nfsstat4::SERVERFAULT),
        Some(Err(e)) => Err(nfs4_status(*e)),
    }
}

/// The result of an extended-attribute operation once its batch ran.
pub(super) fn finish(c: &mut Compound, step: XattrStep, results: &[OpResult]) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    match step {
        XattrStep::Get { op, name } => (
            opnum::GETXATTR,
            readable(c, results, op).and_then(|(eas, _)| {
                let value = eas.iter().find(|(n, _)| n.as_bytes() == name).map(|(_, v)| v.clone()).ok_or(Nfsstat4::NOXATTR)?;
                Ok(put(c, ResOp4::GetXattr(Nfs4Res::Ok(GetXattr4ResOk { value: Opaque(&value) }))))
            }),
        ),
        XattrStep::List { op, cookie, maxcount } => (
            opnum::LISTXATTRS,
            readable(c, results, op).and_then(|(eas, _)| {
                let names: Vec<Vec<u8>> = eas.iter().map(|(n, _)| n.clone().into_bytes()).collect();
                list(c, &names, cookie, maxcount)
            }),
        ),
        XattrStep::Change { opnum, op } => (
            opnum,
            match results.get(op) {
                Some(Ok(OpOutput::Attrs { before: Some(b), attrs })) => {
                    let cinfo = ChangeInfo4 { atomic: true, before: b.change, after: attrs.change };
                    let ok = Nfs4Res::Ok(XattrChange4ResOk { cinfo });
                    Ok(put(c, if opnum == opnum::SETXATTR { ResOp4::SetXattr(ok) } else { ResOp4::RemoveXattr(ok) }))
                }
                Some(Ok(_)) | None => Err(Nfsstat4::SERVERFAULT),
                // The object was resolved, so a missing name is the
                // attribute's (RFC 8276 8.4.2.3, 8.4.4.3).
                Some(Err(FsError::NotFound)) => Err(Nfsstat4::NOXATTR),
                Some(Err(FsError::Invalid)) => Err(Nfsstat4::INVAL),
                Some(Err(e)) => Err(nfs4_status(*e)),
            },
        ),
    }
}

/// LISTXATTRS' reply: names from position `cookie` (the cookie is the
/// position of the next name in name order) while the encoded reply fits
/// in `maxcount` bytes (RFC 8276 8.4.3.2: NFS4ERR_TOOSMALL when not even
/// one name fits).
fn list(c: &mut Compound, names: &[Vec<u8>], cookie: u64, maxcount: u32) -> Result<Nfsstat4, Nfsstat4> {
    let start = usize::try_from(cookie).map_err(|_| Nfsstat4::BAD_COOKIE)?;
    if start > names.len() {
        return Err(Nfsstat4::BAD_COOKIE);
    }
    // cookie, array length, eof.
    let mut used = 8 + 4 + 4usize;
    let mut out: Vec<XattrKey4<'_>> = Vec::new();
    for n in &names[start..] {
        let len = 4 + n.len().div_ceil(4) * 4;
        if used + len > maxcount as usize {
            break;
        }
        used += len;
        out.push(Name(n));
    }
    let next = start + out.len();
    if out.is_empty() && next < names.len() {
        return Err(Nfsstat4::TOOSMALL);
    }
    let res = ListXattrs4ResOk { cookie: next as u64, names: List(out), eof: next == names.len() };
    Ok(put(c, ResOp4::ListXattrs(Nfs4Res::Ok(res))))
}
