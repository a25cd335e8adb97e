//! An async NFSv4.1/4.2 client (RFC 8881, RFC 7862) on the COMPOUND
//! codecs of `duet_protocols::nfs::nfs4`.
//!
//! One connection holds one client id and one session (EXCHANGE_ID 18.35,
//! CREATE_SESSION 18.36, RECLAIM_COMPLETE 18.51). Every COMPOUND starts
//! with SEQUENCE (18.46) on a slot of the session; with more than one
//! slot, `pipeline` keeps several COMPOUNDs in flight (one per slot, each
//! reply matched to its call by xid, RFC 5531 9). Stateids of an OPEN
//! are passed to the WRITE/READ/CLOSE of the same COMPOUND as the current
//! stateid (16.2.3.1.2: seqid 1, other all zero).

use duet_protocols::nfs::nfs4::attrs::{fattr4, Attrs};
use duet_protocols::nfs::nfs4::ops::share;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::rpc::{PROGRAM_NFS, PROGRAM_NFS4_CB};
use duet_protocols::nfs::xdr::{List, Name, Opaque, XdrReader, XdrWriter};

use crate::rpc::RpcConn;
use crate::{proto, Error, Io, Result};

/// The current stateid (RFC 8881 16.2.3.1.2).
pub const CURRENT_STATEID: Stateid4 = Stateid4 { seqid: 1, other: [0; 12] };
/// The anonymous stateid (8.2.3).
pub const ANON_STATEID: Stateid4 = Stateid4 { seqid: 0, other: [0; 12] };

pub fn status_err(op: &'static str, s: Nfsstat4) -> Error {
    Error::Status { op, status: format!("{s:?}"), code: s.0 }
}

/// An owned COMPOUND reply; `results()` decodes it.
pub struct Reply {
    rec: Vec<u8>,
    at: usize,
    max_ops: u32,
}

impl Reply {
    pub fn results(&self) -> Result<Compound4Res<'_>> {
        let mut r = XdrReader::new(&self.rec[self.at..]);
        Compound4Res::decode(&mut r, self.max_ops + 1).map_err(|e| Error::Protocol(format!("COMPOUND reply: {e:?}")))
    }

    /// The results after SEQUENCE; fails on the first failed operation.
    pub fn ok(&self) -> Result<Vec<ResOp4<'_>>> {
        let res = self.results()?;
        for op in &res.results {
            let s = op.status();
            if s != Nfsstat4::OK {
                return Err(status_err(op_name(op.opnum()), s));
            }
        }
        let mut v = res.results;
        if !v.is_empty() && v[0].opnum() == opnum::SEQUENCE {
            v.remove(0);
        }
        Ok(v)
    }
}

pub fn op_name(n: u32) -> &'static str {
    match n {
        opnum::ACCESS => "ACCESS",
        opnum::CLOSE => "CLOSE",
        opnum::CREATE => "CREATE",
        opnum::GETATTR => "GETATTR",
        opnum::GETFH => "GETFH",
        opnum::LOOKUP => "LOOKUP",
        opnum::OPEN => "OPEN",
        opnum::PUTFH => "PUTFH",
        opnum::PUTROOTFH => "PUTROOTFH",
        opnum::READ => "READ",
        opnum::READDIR => "READDIR",
        opnum::REMOVE => "REMOVE",
        opnum::RENAME => "RENAME",
        opnum::SAVEFH => "SAVEFH",
        opnum::RESTOREFH => "RESTOREFH",
        opnum::SETATTR => "SETATTR",
        opnum::WRITE => "WRITE",
        opnum::SEQUENCE => "SEQUENCE",
        opnum::COPY => "COPY",
        _ => "op",
    }
}

/// A session on one connection.
pub struct Nfs4Client<S> {
    pub rpc: RpcConn<S>,
    pub clientid: u64,
    sessionid: SessionId4,
    /// Next sequenceid per slot.
    slots: Vec<u32>,
    /// The session's fore channel maxoperations (SEQUENCE included).
    pub max_ops: u32,
    pub max_rw: u32,
    pub minor: u32,
    /// The export's root file handle.
    pub root: Vec<u8>,
    owner: Vec<u8>,
}

fn compound_bytes(minor: u32, ops: &[ArgOp4<'_>]) -> Vec<u8> {
    let mut w = XdrWriter::new();
    // COMPOUND4args (RFC 8881 16.2.1): tag, minorversion, argarray.
    w.put_opaque(b"");
    w.put_u32(minor);
    w.put_u32(ops.len() as u32);
    for op in ops {
        w.put_u32(op.opnum());
        op.encode_args(&mut w);
    }
    w.into_inner()
}

impl<S: Io> Nfs4Client<S> {
    /// Over `s`, a stream connected to the server: sets up a client id and
    /// session, and looks up `export` (a path from the pseudo-root, "/"
    /// for the root).
    pub async fn connect(s: S, export: &str, minor: u32) -> Result<Nfs4Client<S>> {
        let mut rpc = RpcConn::new(s);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let owner = format!("duet-bench-{}-{nanos}", std::process::id()).into_bytes();
        let args = compound_bytes(
            minor,
            &[ArgOp4::ExchangeId(ExchangeId4Args {
                clientowner: ClientOwner4 { verifier: (nanos as u64).to_be_bytes(), ownerid: Opaque(&owner) },
                flags: 0x0001_0000, // EXCHGID4_FLAG_USE_NON_PNFS (18.35.3)
                state_protect: StateProtect4A::None,
                client_impl_id: List(vec![]),
            })],
        );
        let (rec, at) = rpc.call(PROGRAM_NFS, 4, NFSPROC4_COMPOUND, &args).await?;
        let x = Reply { rec, at, max_ops: 4 };
        let v = x.ok()?;
        let Some(ResOp4::ExchangeId(Nfs4Res::Ok(eid))) = v.first() else { return proto("EXCHANGE_ID reply") };
        let (clientid, seq) = (eid.clientid, eid.sequenceid);
        let chan = |maxreq: u32, ops: u32, reqs: u32| ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: maxreq,
            maxresponsesize: maxreq,
            maxresponsesize_cached: 64 << 10,
            maxoperations: ops,
            maxrequests: reqs,
            rdma_ird: List(vec![]),
        };
        let args = compound_bytes(
            minor,
            &[ArgOp4::CreateSession(CreateSession4Args {
                clientid,
                sequence: seq,
                flags: 0,
                fore_chan_attrs: chan((1 << 20) + (64 << 10), 300, 16),
                back_chan_attrs: chan(4096, 2, 1),
                cb_program: PROGRAM_NFS4_CB,
                sec_parms: List(vec![CallbackSecParms4::None]),
            })],
        );
        let (rec, at) = rpc.call(PROGRAM_NFS, 4, NFSPROC4_COMPOUND, &args).await?;
        let cs = Reply { rec, at, max_ops: 4 };
        let v = cs.ok()?;
        let Some(ResOp4::CreateSession(Nfs4Res::Ok(s))) = v.first() else { return proto("CREATE_SESSION reply") };
        let fore = &s.fore_chan_attrs;
        let mut c = Nfs4Client {
            rpc,
            clientid,
            sessionid: s.sessionid,
            slots: vec![1; fore.maxrequests.clamp(1, 64) as usize],
            max_ops: fore.maxoperations.max(2),
            max_rw: fore.maxrequestsize.min(fore.maxresponsesize).saturating_sub(4096).clamp(4096, 1 << 20),
            minor,
            root: Vec::new(),
            owner,
        };
        c.call(vec![ArgOp4::ReclaimComplete(ReclaimComplete4Args { one_fs: false })]).await?.ok()?;
        let comps: Vec<String> = export.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect();
        let mut ops = vec![ArgOp4::PutRootFh(())];
        for p in &comps {
            ops.push(ArgOp4::Lookup(Lookup4Args { objname: Name(p.as_bytes()) }));
        }
        ops.push(ArgOp4::GetFh(()));
        let r = c.call(ops).await?;
        c.root = fh_of(&r.ok()?)?;
        Ok(c)
    }

    /// Ops per COMPOUND available to the caller (SEQUENCE excluded).
    pub fn ops_per_compound(&self) -> usize {
        (self.max_ops as usize - 1).max(1)
    }

    fn seq_op(&mut self, slot: usize) -> ArgOp4<'static> {
        let s = self.slots[slot];
        self.slots[slot] = s.wrapping_add(1);
        ArgOp4::Sequence(Sequence4Args {
            sessionid: self.sessionid,
            sequenceid: s,
            slotid: slot as u32,
            highest_slotid: (self.slots.len() - 1) as u32,
            cachethis: false,
        })
    }

    async fn send(&mut self, slot: usize, ops: Vec<ArgOp4<'_>>) -> Result<u32> {
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(self.seq_op(slot));
        all.extend(ops);
        let args = compound_bytes(self.minor, &all);
        self.rpc.send(PROGRAM_NFS, 4, NFSPROC4_COMPOUND, &args).await
    }

    /// One COMPOUND: SEQUENCE + `ops`.
    pub async fn call(&mut self, ops: Vec<ArgOp4<'_>>) -> Result<Reply> {
        let x = self.send(0, ops).await?;
        let (rec, at) = self.rpc.wait(x).await?;
        Ok(Reply { rec, at, max_ops: self.max_ops })
    }

    /// Several COMPOUNDs in flight, one per session slot; replies in order.
    pub async fn pipeline(&mut self, compounds: Vec<Vec<ArgOp4<'_>>>) -> Result<Vec<Reply>> {
        let n = self.slots.len();
        let mut out = Vec::with_capacity(compounds.len());
        let mut inflight: std::collections::VecDeque<u32> = Default::default();
        for (i, ops) in compounds.into_iter().enumerate() {
            if inflight.len() == n {
                let x = inflight.pop_front().unwrap();
                let (rec, at) = self.rpc.wait(x).await?;
                out.push(Reply { rec, at, max_ops: self.max_ops });
            }
            // Slots are reused round robin; a slot's previous call has
            // been answered (the window is n).
            inflight.push_back(self.send(i % n, ops).await?);
        }
        while let Some(x) = inflight.pop_front() {
            let (rec, at) = self.rpc.wait(x).await?;
            out.push(Reply { rec, at, max_ops: self.max_ops });
        }
        Ok(out)
    }

    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    pub fn owner(&self) -> OpenOwner4<'_> {
        StateOwner4 { clientid: self.clientid, owner: Opaque(&self.owner) }
    }
}

pub fn empty_fattr() -> Fattr4<'static> {
    Fattr4 { attrmask: Bitmap4::new(), attr_vals: Opaque(&[]) }
}

/// The attributes stat and listings ask for: type, size, mode, numlinks,
/// owner ids, fileid, times (what `ls -l` shows).
pub fn stat_bitmap() -> Bitmap4 {
    Bitmap4::from_bits(&[
        fattr4::TYPE,
        fattr4::CHANGE,
        fattr4::SIZE,
        fattr4::FILEID,
        fattr4::MODE,
        fattr4::NUMLINKS,
        fattr4::OWNER,
        fattr4::OWNER_GROUP,
        fattr4::TIME_MODIFY,
    ])
}

/// Size and type from a GETATTR/READDIR fattr4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat4 {
    pub size: u64,
    pub directory: bool,
    pub mode: u32,
}

pub fn parse_stat(f: &Fattr4<'_>) -> Result<Stat4> {
    let a = Attrs::from_fattr4(f).map_err(|e| Error::Protocol(format!("fattr4: {e:?}")))?;
    Ok(Stat4 {
        size: a.size.unwrap_or(0),
        directory: a.type_.map(|t| t == NfsFtype4::Dir).unwrap_or(false),
        mode: a.mode.unwrap_or(0),
    })
}

pub fn fh_of(res: &[ResOp4<'_>]) -> Result<Vec<u8>> {
    for r in res.iter().rev() {
        if let ResOp4::GetFh(Nfs4Res::Ok(GetFh4ResOk { object })) = r {
            return Ok(object.0.to_vec());
        }
    }
    proto("no GETFH result")
}

// ---- op builders ----

pub fn putfh(fh: &[u8]) -> ArgOp4<'_> {
    ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) })
}

pub fn lookup(name: &str) -> ArgOp4<'_> {
    ArgOp4::Lookup(Lookup4Args { objname: Name(name.as_bytes()) })
}

pub fn getattr(bits: Bitmap4) -> ArgOp4<'static> {
    ArgOp4::GetAttr(GetAttr4Args { attr_request: bits })
}

/// OPEN by name in the current directory: create (UNCHECKED4, mode 0644)
/// or not, for reading and writing.
pub fn open<'a>(owner: OpenOwner4<'a>, name: &'a str, create: bool, mode_attr: &'a [u8]) -> ArgOp4<'a> {
    let openhow = if create {
        let mut mask = Bitmap4::new();
        mask.set(fattr4::MODE);
        OpenFlag4::Create(CreateHow4::Unchecked(Fattr4 { attrmask: mask, attr_vals: Opaque(mode_attr) }))
    } else {
        OpenFlag4::NoCreate
    };
    ArgOp4::Open(Open4Args {
        seqid: 0,
        share_access: share::ACCESS_READ | share::ACCESS_WRITE,
        share_deny: 0,
        owner,
        openhow,
        claim: OpenClaim4::Null(Name(name.as_bytes())),
    })
}

/// `mode` as fattr4 values (one u32).
pub fn mode_vals(mode: u32) -> [u8; 4] {
    mode.to_be_bytes()
}

pub fn write(stateid: Stateid4, offset: u64, data: &[u8], stable: StableHow4) -> ArgOp4<'_> {
    ArgOp4::Write(Write4Args { stateid, offset, stable, data: Opaque(data) })
}

pub fn read(stateid: Stateid4, offset: u64, count: u32) -> ArgOp4<'static> {
    ArgOp4::Read(Read4Args { stateid, offset, count })
}

pub fn close(stateid: Stateid4) -> ArgOp4<'static> {
    ArgOp4::Close(Close4Args { seqid: 0, open_stateid: stateid })
}

pub fn remove(name: &str) -> ArgOp4<'_> {
    ArgOp4::Remove(Remove4Args { target: Name(name.as_bytes()) })
}

pub fn mkdir<'a>(name: &'a str, mode_attr: &'a [u8]) -> ArgOp4<'a> {
    let mut mask = Bitmap4::new();
    mask.set(fattr4::MODE);
    ArgOp4::Create(Create4Args {
        objtype: CreateType4::Other(NfsFtype4::Dir),
        objname: Name(name.as_bytes()),
        createattrs: Fattr4 { attrmask: mask, attr_vals: Opaque(mode_attr) },
    })
}

pub fn readdir(cookie: u64, verf: Verifier4, bits: Bitmap4) -> ArgOp4<'static> {
    ArgOp4::ReadDir(ReadDir4Args { cookie, cookieverf: verf, dircount: 64 << 10, maxcount: 512 << 10, attr_request: bits })
}

pub fn open_stateid(res: &[ResOp4<'_>]) -> Result<Stateid4> {
    for r in res {
        if let ResOp4::Open(Nfs4Res::Ok(o)) = r {
            return Ok(o.stateid);
        }
    }
    proto("no OPEN result")
}

pub fn read_data(res: &[ResOp4<'_>]) -> Result<(Vec<u8>, bool)> {
    for r in res {
        if let ResOp4::Read(Nfs4Res::Ok(d)) = r {
            return Ok((d.data.0.to_vec(), d.eof));
        }
    }
    proto("no READ result")
}

impl<S: Io> Nfs4Client<S> {
    /// OPEN(create)+WRITE(FILE_SYNC)+CLOSE of a small file in `dir`, one
    /// COMPOUND (what a Linux client sends as three).
    pub async fn put_small(&mut self, dir: &[u8], name: &str, data: &[u8]) -> Result<()> {
        let m = mode_vals(0o644);
        let own = self.owner.clone();
        let ops = vec![
            putfh(dir),
            open(StateOwner4 { clientid: self.clientid, owner: Opaque(&own) }, name, true, &m),
            write(CURRENT_STATEID, 0, data, StableHow4::FileSync),
            close(CURRENT_STATEID),
        ];
        self.call(ops).await?.ok().map(|_| ())
    }

    /// PUTFH+LOOKUP+GETATTR.
    pub async fn stat(&mut self, dir: &[u8], name: &str) -> Result<Stat4> {
        let r = self.call(vec![putfh(dir), lookup(name), getattr(stat_bitmap())]).await?;
        let v = r.ok()?;
        match v.last() {
            Some(ResOp4::GetAttr(Nfs4Res::Ok(g))) => parse_stat(&g.obj_attributes),
            _ => proto("GETATTR reply"),
        }
    }

    /// OPEN(no create)+READ+CLOSE.
    pub async fn get_small(&mut self, dir: &[u8], name: &str, max: u32) -> Result<Vec<u8>> {
        let own = self.owner.clone();
        let ops = vec![
            putfh(dir),
            open(StateOwner4 { clientid: self.clientid, owner: Opaque(&own) }, name, false, &[]),
            read(CURRENT_STATEID, 0, max),
            close(CURRENT_STATEID),
        ];
        let r = self.call(ops).await?;
        Ok(read_data(&r.ok()?)?.0)
    }

    pub async fn remove(&mut self, dir: &[u8], name: &str) -> Result<()> {
        self.call(vec![putfh(dir), remove(name)]).await?.ok().map(|_| ())
    }

    /// CREATE(dir)+GETFH; returns the new directory's handle.
    pub async fn mkdir(&mut self, dir: &[u8], name: &str) -> Result<Vec<u8>> {
        let m = mode_vals(0o755);
        let r = self.call(vec![putfh(dir), mkdir(name, &m), ArgOp4::GetFh(())]).await?;
        fh_of(&r.ok()?)
    }

    pub async fn lookup_fh(&mut self, dir: &[u8], name: &str) -> Result<Vec<u8>> {
        let r = self.call(vec![putfh(dir), lookup(name), ArgOp4::GetFh(())]).await?;
        fh_of(&r.ok()?)
    }

    /// Lists a directory with `ls -l` attributes: READDIR until eof.
    pub async fn list(&mut self, dir: &[u8]) -> Result<Vec<(String, Stat4)>> {
        let mut out = Vec::new();
        let (mut cookie, mut verf) = (0u64, [0u8; 8]);
        loop {
            let r = self.call(vec![putfh(dir), readdir(cookie, verf, stat_bitmap())]).await?;
            let v = r.ok()?;
            let Some(ResOp4::ReadDir(Nfs4Res::Ok(d))) = v.last() else { return proto("READDIR reply") };
            verf = d.cookieverf;
            for e in &d.reply.entries.0 {
                cookie = e.cookie;
                out.push((String::from_utf8_lossy(e.name.0).into_owned(), parse_stat(&e.attrs)?));
            }
            if d.reply.eof || d.reply.entries.0.is_empty() {
                return Ok(out);
            }
        }
    }

    /// Opens (creating or not) a file for I/O; returns its handle and the
    /// open stateid.
    pub async fn open_file(&mut self, dir: &[u8], name: &str, create: bool) -> Result<(Vec<u8>, Stateid4)> {
        let m = mode_vals(0o644);
        let own = self.owner.clone();
        let r = self.call(vec![
            putfh(dir),
            open(StateOwner4 { clientid: self.clientid, owner: Opaque(&own) }, name, create, &m),
            ArgOp4::GetFh(()),
        ]).await?;
        let v = r.ok()?;
        Ok((fh_of(&v)?, open_stateid(&v)?))
    }

    pub async fn close_file(&mut self, fh: &[u8], st: Stateid4) -> Result<()> {
        self.call(vec![putfh(fh), close(st)]).await?.ok().map(|_| ())
    }

    /// Writes `total` bytes from `fill` with one COMPOUND per `io` bytes,
    /// as many in flight as the session has slots (UNSTABLE, then COMMIT).
    pub async fn write_stream(&mut self, fh: &[u8], st: Stateid4, total: u64, io: usize, fill: &mut dyn FnMut(u64, &mut [u8])) -> Result<()> {
        let io = io.min(self.max_rw as usize) as u64;
        let batch = self.slots.len() * 4;
        let mut off = 0u64;
        while off < total {
            let mut bufs = Vec::new();
            while bufs.len() < batch && off < total {
                let n = (total - off).min(io) as usize;
                let mut b = vec![0u8; n];
                fill(off, &mut b);
                bufs.push((off, b));
                off += n as u64;
            }
            let comps: Vec<Vec<ArgOp4<'_>>> = bufs.iter().map(|(o, b)| vec![putfh(fh), write(st, *o, b, StableHow4::Unstable)]).collect();
            for r in self.pipeline(comps).await? {
                r.ok()?;
            }
        }
        self.call(vec![putfh(fh), ArgOp4::Commit(Commit4Args { offset: 0, count: 0 })]).await?.ok()?;
        Ok(())
    }

    /// Reads `total` bytes with READs of `io` bytes in flight on every slot.
    pub async fn read_stream(&mut self, fh: &[u8], st: Stateid4, total: u64, io: usize, check: &mut dyn FnMut(u64, &[u8]) -> Result<()>) -> Result<()> {
        let io = io.min(self.max_rw as usize) as u64;
        let batch = self.slots.len() * 4;
        let mut off = 0u64;
        while off < total {
            let mut reqs = Vec::new();
            while reqs.len() < batch && off < total {
                let n = (total - off).min(io);
                reqs.push((off, n as u32));
                off += n;
            }
            let comps: Vec<Vec<ArgOp4<'_>>> = reqs.iter().map(|(o, n)| vec![putfh(fh), read(st, *o, *n)]).collect();
            for (r, (o, n)) in self.pipeline(comps).await?.into_iter().zip(reqs) {
                let (d, _) = read_data(&r.ok()?)?;
                if d.len() != n as usize {
                    return proto(format!("short read at {o}: {} of {n}", d.len()));
                }
                check(o, &d)?;
            }
        }
        Ok(())
    }
}
