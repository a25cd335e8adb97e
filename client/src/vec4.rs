//! The vectorised NFSv4.1/4.2 client API, after vNFS (Chen et al., "vNFS:
//! Maximizing NFS Performance with Compounds and Vectorized I/O", FAST
//! 2017): each call works on many files and packs their operations into
//! as few COMPOUNDs as the session allows (at most [`MAX_OPS`] operations
//! each, RFC 8881 18.36 ca_maxoperations), with the COMPOUNDs of one call
//! in flight together on the session's slots (async: the calls are
//! `async fn`s over the same [`crate::Io`] stream as [`Nfs4Client`]).
//!
//! Per-file operation sequences (RFC 8881 section 18 / RFC 7862 section
//! 15 numbers):
//! - write: PUTFH dir, OPEN(create) 18.16, WRITE 18.32 (current stateid,
//!   16.2.3.1.2), CLOSE 18.2
//! - read: PUTFH dir, OPEN, READ 18.22, CLOSE
//! - getattrs: PUTFH dir, LOOKUP 18.15, GETATTR 18.7
//! - setattrs: PUTFH dir, LOOKUP, SETATTR 18.30 (anonymous stateid)
//! - mkdir: PUTFH parent, CREATE 18.4
//! - rename: PUTFH src, SAVEFH 18.31, PUTFH dst, RENAME 18.26
//! - remove: PUTFH dir once, then REMOVE 18.25 per name
//! - copy: PUTFH src dir, LOOKUP, SAVEFH, PUTFH dst dir, OPEN(create),
//!   COPY 15.2 (source stateid anonymous, count 0 = to end of file,
//!   synchronous), CLOSE
//! - listdir (recursive): READDIR 18.23 asking for type and filehandle, one
//!   round trip per tree level (every directory of a level in the same
//!   COMPOUNDs).
//!
//! A COMPOUND stops at its first failing operation (RFC 8881 16.2.3); the
//! calls return that error (which file it was is in the message).

use duet_protocols::nfs::nfs4::attrs::{fattr4, Attrs};
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::{List, Name, Opaque};

use crate::nfs4::{self as n4, Nfs4Client, Stat4, ANON_STATEID, CURRENT_STATEID};
use crate::{proto, Error, Io, Result};

/// The largest COMPOUND this API builds (vNFS's figure; duet takes 256+).
pub const MAX_OPS: usize = 256;

/// The vectorised API over one session.
pub struct VecClient<S> {
    pub c: Nfs4Client<S>,
    /// Operations per COMPOUND (after SEQUENCE).
    pub per_compound: usize,
    /// COMPOUNDs sent so far (each one round trip, or less when pipelined).
    pub compounds: u64,
}

type OpsFn<'a> = Box<dyn Fn(usize) -> Vec<ArgOp4<'a>> + 'a>;

impl<S: Io> VecClient<S> {
    pub fn new(c: Nfs4Client<S>) -> VecClient<S> {
        let per_compound = c.ops_per_compound().min(MAX_OPS - 1);
        VecClient { c, per_compound, compounds: 0 }
    }

    /// An NFSv4.2 session over `s` (a stream connected to the server).
    pub async fn connect(s: S, export: &str) -> Result<VecClient<S>> {
        Ok(VecClient::new(Nfs4Client::connect(s, export, 2).await?))
    }

    pub fn root(&self) -> Vec<u8> {
        self.c.root.clone()
    }

    /// Packs `n` items of `per_item` ops each (built by `ops(i)`) into
    /// COMPOUNDs, sends them pipelined and hands each reply with the
    /// range of items it covered to `each`.
    async fn run<'a>(
        &mut self,
        n: usize,
        per_item: usize,
        prefix: &dyn Fn() -> Vec<ArgOp4<'a>>,
        ops: OpsFn<'a>,
        each: &mut dyn FnMut(std::ops::Range<usize>, &[ResOp4<'_>]) -> Result<()>,
    ) -> Result<()> {
        let pre = prefix().len();
        let per = ((self.per_compound - pre) / per_item).max(1);
        let mut comps = Vec::new();
        let mut ranges = Vec::new();
        let mut i = 0;
        while i < n {
            let end = (i + per).min(n);
            let mut v = prefix();
            for k in i..end {
                v.extend(ops(k));
            }
            comps.push(v);
            ranges.push(i..end);
            i = end;
        }
        self.compounds += comps.len() as u64;
        let replies = self.c.pipeline(comps).await?;
        for (r, range) in replies.iter().zip(ranges) {
            let v = r.ok().map_err(|e| match e {
                Error::Status { op, status, code } => Error::Status { op, status: format!("{status} (in files {range:?})"), code },
                e => e,
            })?;
            each(range, &v)?;
        }
        Ok(())
    }

    /// Writes whole small files (create or truncate): `files` are (name,
    /// data) in directory `dir`.
    pub async fn write_files(&mut self, dir: &[u8], files: &[(String, Vec<u8>)]) -> Result<()> {
        let own = self.owner_bytes();
        let cid = self.c.clientid;
        let m = n4::mode_vals(0o644);
        let ops: OpsFn<'_> = Box::new(|k| {
            let (name, data) = &files[k];
            vec![
                n4::putfh(dir),
                open_create(cid, &own, name, &m),
                n4::write(CURRENT_STATEID, 0, data, StableHow4::FileSync),
                n4::close(CURRENT_STATEID),
            ]
        });
        self.run(files.len(), 4, &Vec::new, ops, &mut |_, _| Ok(())).await
    }

    /// Reads whole files (up to `max` bytes each).
    pub async fn read_files(&mut self, dir: &[u8], names: &[String], max: u32) -> Result<Vec<Vec<u8>>> {
        let own = self.owner_bytes();
        let cid = self.c.clientid;
        let ops: OpsFn<'_> = Box::new(|k| {
            vec![
                n4::putfh(dir),
                n4::open(StateOwner4 { clientid: cid, owner: Opaque(&own) }, &names[k], false, &[]),
                n4::read(CURRENT_STATEID, 0, max),
                n4::close(CURRENT_STATEID),
            ]
        });
        let mut out = Vec::with_capacity(names.len());
        self.run(names.len(), 4, &Vec::new, ops, &mut |_, res| {
            for r in res {
                if let ResOp4::Read(Nfs4Res::Ok(d)) = r {
                    out.push(d.data.0.to_vec());
                }
            }
            Ok(())
        }).await?;
        Ok(out)
    }

    /// Stats many names of one directory.
    pub async fn getattrs(&mut self, dir: &[u8], names: &[String]) -> Result<Vec<Stat4>> {
        let ops: OpsFn<'_> = Box::new(|k| vec![n4::putfh(dir), n4::lookup(&names[k]), n4::getattr(n4::stat_bitmap())]);
        let mut out = Vec::with_capacity(names.len());
        self.run(names.len(), 3, &Vec::new, ops, &mut |_, res| {
            for r in res {
                if let ResOp4::GetAttr(Nfs4Res::Ok(g)) = r {
                    out.push(n4::parse_stat(&g.obj_attributes)?);
                }
            }
            Ok(())
        }).await?;
        Ok(out)
    }

    /// Sets the mode of many names of one directory.
    pub async fn set_modes(&mut self, dir: &[u8], names: &[String], mode: u32) -> Result<()> {
        let vals = mode.to_be_bytes();
        let ops: OpsFn<'_> = Box::new(|k| {
            let mut mask = Bitmap4::new();
            mask.set(fattr4::MODE);
            vec![
                n4::putfh(dir),
                n4::lookup(&names[k]),
                ArgOp4::SetAttr(SetAttr4Args { stateid: ANON_STATEID, obj_attributes: Fattr4 { attrmask: mask, attr_vals: Opaque(&vals) } }),
            ]
        });
        self.run(names.len(), 3, &Vec::new, ops, &mut |_, _| Ok(())).await
    }

    /// Creates many directories in `dir`; returns their handles.
    pub async fn mkdirs(&mut self, dir: &[u8], names: &[String]) -> Result<Vec<Vec<u8>>> {
        let m = n4::mode_vals(0o755);
        let ops: OpsFn<'_> = Box::new(|k| vec![n4::putfh(dir), n4::mkdir(&names[k], &m), ArgOp4::GetFh(())]);
        let mut out = Vec::with_capacity(names.len());
        self.run(names.len(), 3, &Vec::new, ops, &mut |_, res| {
            for r in res {
                if let ResOp4::GetFh(Nfs4Res::Ok(g)) = r {
                    out.push(g.object.0.to_vec());
                }
            }
            Ok(())
        }).await?;
        Ok(out)
    }

    /// `mkdir -p`: one COMPOUND looks up the existing prefix, a second
    /// creates the rest (CREATE leaves the new directory current, so a
    /// chain of CREATEs builds a path). Returns the last handle.
    pub async fn mkdir_p(&mut self, base: &[u8], path: &str) -> Result<Vec<u8>> {
        let comps: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let mut ops = vec![n4::putfh(base), ArgOp4::GetFh(())];
        for c in &comps {
            ops.push(n4::lookup(c));
            ops.push(ArgOp4::GetFh(()));
        }
        self.compounds += 1;
        let r = self.c.call(ops).await?;
        let res = r.results()?;
        let mut fh = base.to_vec();
        let mut found = 0usize;
        let mut first = true;
        for op in res.results.iter().skip(1) {
            match op {
                ResOp4::GetFh(Nfs4Res::Ok(g)) => {
                    fh = g.object.0.to_vec();
                    if !first {
                        found += 1;
                    }
                    first = false;
                }
                ResOp4::Lookup(x) if x.status() != Nfsstat4::OK => {
                    if x.status() != Nfsstat4::NOENT {
                        return Err(n4::status_err("LOOKUP", x.status()));
                    }
                    break;
                }
                op if op.status() != Nfsstat4::OK => return Err(n4::status_err(n4::op_name(op.opnum()), op.status())),
                _ => {}
            }
        }
        if found == comps.len() {
            return Ok(fh);
        }
        let m = n4::mode_vals(0o755);
        let mut ops = vec![n4::putfh(&fh)];
        for c in &comps[found..] {
            ops.push(n4::mkdir(c, &m));
        }
        ops.push(ArgOp4::GetFh(()));
        self.compounds += 1;
        let r = self.c.call(ops).await?;
        n4::fh_of(&r.ok()?)
    }

    /// Renames (src dir, old name, dst dir, new name) tuples.
    pub async fn rename(&mut self, moves: &[(Vec<u8>, String, Vec<u8>, String)]) -> Result<()> {
        let ops: OpsFn<'_> = Box::new(|k| {
            let (sd, old, dd, new) = &moves[k];
            vec![
                n4::putfh(sd),
                ArgOp4::SaveFh(()),
                n4::putfh(dd),
                ArgOp4::Rename(Rename4Args { oldname: Name(old.as_bytes()), newname: Name(new.as_bytes()) }),
            ]
        });
        self.run(moves.len(), 4, &Vec::new, ops, &mut |_, _| Ok(())).await
    }

    /// Removes many names (files or empty directories) of one directory:
    /// PUTFH once per COMPOUND, then REMOVEs.
    pub async fn remove(&mut self, dir: &[u8], names: &[String]) -> Result<()> {
        let ops: OpsFn<'_> = Box::new(|k| vec![n4::remove(&names[k])]);
        self.run(names.len(), 1, &|| vec![n4::putfh(dir)], ops, &mut |_, _| Ok(())).await
    }

    /// Server-side copies: each (src dir, src name, dst dir, dst name).
    /// Returns the bytes copied. A server may copy less than asked (RFC
    /// 7862 15.2.3: duet moves at most 64 MiB per COPY): the compound also
    /// fetches both handles and the source's size, and short copies go on
    /// with further COPYs from where they stopped.
    pub async fn copy(&mut self, files: &[(Vec<u8>, String, Vec<u8>, String)]) -> Result<u64> {
        let own = self.owner_bytes();
        let cid = self.c.clientid;
        let m = n4::mode_vals(0o644);
        let size_bits = Bitmap4::from_bits(&[fattr4::SIZE]);
        let ops: OpsFn<'_> = Box::new(|k| {
            let (sd, sn, dd, dn) = &files[k];
            vec![
                n4::putfh(sd),
                n4::lookup(sn),
                ArgOp4::GetFh(()),
                n4::getattr(size_bits.clone()),
                ArgOp4::SaveFh(()),
                n4::putfh(dd),
                open_create(cid, &own, dn, &m),
                ArgOp4::GetFh(()),
                copy_op(ANON_STATEID, CURRENT_STATEID, 0, 0),
                n4::close(CURRENT_STATEID),
            ]
        });
        let mut bytes = 0u64;
        // (source handle, target handle, copied, source size) per file.
        let mut fhs: Vec<Vec<u8>> = Vec::new();
        let mut sizes: Vec<u64> = Vec::new();
        let mut counts: Vec<u64> = Vec::new();
        self.run(files.len(), 10, &Vec::new, ops, &mut |_, res| {
            for r in res {
                match r {
                    ResOp4::GetFh(Nfs4Res::Ok(g)) => fhs.push(g.object.0.to_vec()),
                    ResOp4::GetAttr(Nfs4Res::Ok(g)) => sizes.push(n4::parse_stat(&g.obj_attributes)?.size),
                    ResOp4::Copy(duet_protocols::nfs::nfs4::v42::Copy4Res::Ok(ok)) => counts.push(ok.response.count),
                    _ => {}
                }
            }
            Ok(())
        }).await?;
        if fhs.len() != 2 * files.len() || sizes.len() != files.len() || counts.len() != files.len() {
            return proto("COPY compound results are missing");
        }
        for k in 0..files.len() {
            let (src, dst) = (&fhs[2 * k], &fhs[2 * k + 1]);
            let mut done = counts[k];
            while done < sizes[k] {
                let rep = self.c.call(vec![
                    n4::putfh(src),
                    ArgOp4::SaveFh(()),
                    n4::putfh(dst),
                    copy_op(ANON_STATEID, ANON_STATEID, done, sizes[k] - done),
                ]).await?;
                self.compounds += 1;
                let n = rep
                    .ok()?
                    .iter()
                    .find_map(|r| match r {
                        ResOp4::Copy(duet_protocols::nfs::nfs4::v42::Copy4Res::Ok(ok)) => Some(ok.response.count),
                        _ => None,
                    })
                    .unwrap_or(0);
                if n == 0 {
                    return proto(&format!("COPY of {} stopped at {done} of {} bytes", files[k].1, sizes[k]));
                }
                done += n;
            }
            bytes += done;
        }
        Ok(bytes)
    }

    /// Recursive listing of `dir`: every entry as (path relative to `dir`,
    /// stat, handle). One round trip per level of the tree (plus
    /// continuations of directories too large for one READDIR reply).
    pub async fn listdir_recursive(&mut self, dir: &[u8]) -> Result<Vec<Entry>> {
        let mut bits = n4::stat_bitmap();
        bits.set(fattr4::FILEHANDLE);
        let mut out = Vec::new();
        // (path, handle, cookie, verifier)
        let mut level: Vec<(String, Vec<u8>, u64, Verifier4)> = vec![(String::new(), dir.to_vec(), 0, [0; 8])];
        while !level.is_empty() {
            let mut next = Vec::new();
            let lv = &level;
            let b = bits;
            let ops: OpsFn<'_> = Box::new(move |k| vec![n4::putfh(&lv[k].1), n4::readdir(lv[k].2, lv[k].3, b)]);
            let mut idx = Vec::new();
            self.run(level.len(), 2, &Vec::new, ops, &mut |range, res| {
                let mut k = range.start;
                for r in res {
                    if let ResOp4::ReadDir(Nfs4Res::Ok(d)) = r {
                        let (path, fh, _, _) = &lv[k];
                        let mut last = 0;
                        for e in &d.reply.entries.0 {
                            last = e.cookie;
                            let a = Attrs::from_fattr4(&e.attrs).map_err(|e| Error::Protocol(format!("fattr4: {e:?}")))?;
                            let st = n4::parse_stat(&e.attrs)?;
                            let name = String::from_utf8_lossy(e.name.0).into_owned();
                            let p = if path.is_empty() { name } else { format!("{path}/{name}") };
                            let efh = a.filehandle.map(|f| f.0.to_vec()).unwrap_or_default();
                            if st.directory {
                                idx.push((p.clone(), efh.clone(), 0u64, [0u8; 8]));
                            }
                            out.push(Entry { path: p, stat: st, fh: efh });
                        }
                        if !d.reply.eof && !d.reply.entries.0.is_empty() {
                            idx.push((path.clone(), fh.clone(), last, d.cookieverf));
                        }
                        k += 1;
                    }
                }
                Ok(())
            }).await?;
            next.extend(idx);
            level = next;
        }
        Ok(out)
    }

    fn owner_bytes(&self) -> Vec<u8> {
        match self.c.owner() {
            StateOwner4 { owner, .. } => owner.0.to_vec(),
        }
    }
}

/// One entry of a recursive listing.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: String,
    pub stat: Stat4,
    pub fh: Vec<u8>,
}

fn open_create<'a>(clientid: u64, own: &'a [u8], name: &'a str, mode: &'a [u8]) -> ArgOp4<'a> {
    n4::open(StateOwner4 { clientid, owner: Opaque(own) }, name, true, mode)
}

/// `rm -r` of `name` in `dir`: lists the tree (one round trip per level),
/// removes files and then directories deepest first, each level's names
/// batched per parent. Returns the number of entries removed.
/// `progress` is called with (entries removed, entries in all) after each
/// directory's batch.
pub async fn remove_tree<S: Io>(
    v: &mut VecClient<S>,
    dir: &[u8],
    name: &str,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize> {
    let top = v.c.lookup_fh(dir, name).await?;
    let st = v.c.stat(dir, name).await?;
    if !st.directory {
        v.remove(dir, &[name.to_string()]).await?;
        return Ok(1);
    }
    let entries = v.listdir_recursive(&top).await?;
    // Group by parent path; remove deepest parents first.
    let mut fh_of: std::collections::HashMap<String, Vec<u8>> = Default::default();
    fh_of.insert(String::new(), top.clone());
    for e in &entries {
        if e.stat.directory {
            fh_of.insert(e.path.clone(), e.fh.clone());
        }
    }
    let mut by_parent: std::collections::BTreeMap<(usize, String), Vec<String>> = Default::default();
    for e in &entries {
        let (parent, base) = match e.path.rsplit_once('/') {
            Some((p, b)) => (p.to_string(), b.to_string()),
            None => (String::new(), e.path.clone()),
        };
        let depth = if parent.is_empty() { 0 } else { parent.matches('/').count() + 1 };
        by_parent.entry((depth, parent)).or_default().push(base);
    }
    let mut n = 0;
    for ((_, parent), names) in by_parent.iter().rev() {
        let Some(pfh) = fh_of.get(parent) else { return proto(format!("no handle for {parent}")) };
        if pfh.is_empty() {
            return proto("the server did not return filehandle attributes");
        }
        v.remove(pfh, names).await?;
        n += names.len();
        progress(n, entries.len() + 1);
    }
    v.remove(dir, &[name.to_string()]).await?;
    Ok(n + 1)
}

/// RFC 7862 15.2: a synchronous, consecutive COPY within the server
/// (count 0: to the end of the source).
fn copy_op(src: Stateid4, dst: Stateid4, offset: u64, count: u64) -> ArgOp4<'static> {
    ArgOp4::Copy(Copy4Args {
        src_stateid: src,
        dst_stateid: dst,
        src_offset: offset,
        dst_offset: offset,
        count,
        consecutive: true,
        synchronous: true,
        source_server: List(vec![]),
    })
}
