//! A minimal async NFSv3 client (RFC 1813) with MOUNT v3 (RFC 1813
//! appendix I) on `duet_protocols::nfs::{nfs3, mount}`: enough for the
//! amplification rows (WRITE, READ, GETATTR, READDIRPLUS) and a
//! create/read/remove round trip. MOUNT and NFS go over the same
//! connection (duet, like most servers, serves MOUNT on its NFS port).

use duet_protocols::nfs::mount::{mountproc3, MountRes3, MOUNT_VERSION_3};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::rpc::{PROGRAM_MOUNT, PROGRAM_NFS};
use duet_protocols::nfs::xdr::{Name, Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};

use crate::rpc::RpcConn;
use crate::{proto, Error, Io, Result};

pub struct Nfs3Client<S> {
    pub rpc: RpcConn<S>,
    pub root: Vec<u8>,
}

fn st<T, F>(op: &'static str, r: &Nfs3Res<T, F>) -> Result<()> {
    match r {
        Nfs3Res::Ok(_) => Ok(()),
        Nfs3Res::Fail(s, _) => Err(Error::Status { op, status: format!("{s:?}"), code: 0 }),
    }
}

impl<S: Io> Nfs3Client<S> {
    /// MNT `export` over `s` (a stream connected to a server that serves
    /// MOUNT and NFS on the same port), then NFS calls on it.
    pub async fn connect(s: S, export: &str) -> Result<Nfs3Client<S>> {
        let mut m = RpcConn::new(s);
        let mut w = XdrWriter::new();
        w.put_string(export.as_bytes());
        let (rec, at) = m.call(PROGRAM_MOUNT, MOUNT_VERSION_3, mountproc3::MNT, &w.into_inner()).await?;
        let mut r = XdrReader::new(&rec[at..]);
        let root = match MountRes3::decode(&mut r).map_err(|e| Error::Protocol(format!("MNT: {e:?}")))? {
            MountRes3::Ok(ok) => ok.fhandle.0.to_vec(),
            MountRes3::Err(e) => return Err(Error::Status { op: "MNT", status: format!("{e:?}"), code: 0 }),
        };
        Ok(Nfs3Client { rpc: m, root })
    }

    /// One NFSv3 call; `f` reads the decoded results.
    pub async fn call<T>(&mut self, args: Nfs3Args<'_>, f: impl FnOnce(Nfs3Results<'_>) -> Result<T>) -> Result<T> {
        let mut w = XdrWriter::new();
        args.encode(&mut w);
        let p = args.proc_();
        let (rec, at) = self.rpc.call(PROGRAM_NFS, 3, p, &w.into_inner()).await?;
        let mut r = XdrReader::new(&rec[at..]);
        let res = Nfs3Results::decode(p, &mut r).map_err(|e| Error::Protocol(format!("NFSv3 reply: {e:?}")))?;
        f(res)
    }

    pub async fn lookup(&mut self, dir: &[u8], name: &str) -> Result<Vec<u8>> {
        let a = Nfs3Args::Lookup(Lookup3Args { what: DirOpArgs3 { dir: Opaque(dir), name: Name(name.as_bytes()) } });
        self.call(a, |r| match r {
            Nfs3Results::Lookup(Nfs3Res::Ok(ok)) => Ok(ok.object.0.to_vec()),
            Nfs3Results::Lookup(x) => st("LOOKUP", &x).and_then(|_| proto("LOOKUP")),
            _ => proto("LOOKUP reply"),
        }).await
    }

    pub async fn create(&mut self, dir: &[u8], name: &str) -> Result<Vec<u8>> {
        let how = CreateHow3::Unchecked(Sattr3 { mode: Some(0o644), ..Default::default() });
        let a = Nfs3Args::Create(Create3Args { where_: DirOpArgs3 { dir: Opaque(dir), name: Name(name.as_bytes()) }, how });
        let fh = self.call(a, |r| match r {
            Nfs3Results::Create(Nfs3Res::Ok(ok)) => Ok(ok.obj.map(|f| f.0.to_vec())),
            Nfs3Results::Create(x) => st("CREATE", &x).map(|_| None),
            _ => proto("CREATE reply"),
        }).await?;
        match fh {
            Some(f) => Ok(f),
            None => self.lookup(dir, name).await,
        }
    }

    pub async fn write(&mut self, fh: &[u8], offset: u64, data: &[u8]) -> Result<()> {
        let a = Nfs3Args::Write(Write3Args { file: Opaque(fh), offset, count: data.len() as u32, stable: StableHow::FileSync, data: Opaque(data) });
        self.call(a, |r| match r {
            Nfs3Results::Write(x) => st("WRITE", &x),
            _ => proto("WRITE reply"),
        }).await
    }

    pub async fn read(&mut self, fh: &[u8], offset: u64, count: u32) -> Result<Vec<u8>> {
        let a = Nfs3Args::Read(Read3Args { file: Opaque(fh), offset, count });
        self.call(a, |r| match r {
            Nfs3Results::Read(Nfs3Res::Ok(ok)) => Ok(ok.data.0.to_vec()),
            Nfs3Results::Read(x) => st("READ", &x).and_then(|_| proto("READ")),
            _ => proto("READ reply"),
        }).await
    }

    pub async fn getattr(&mut self, fh: &[u8]) -> Result<u64> {
        self.call(Nfs3Args::GetAttr(GetAttr3Args { object: Opaque(fh) }), |r| match r {
            Nfs3Results::GetAttr(Nfs3Res::Ok(a)) => Ok(a.size),
            Nfs3Results::GetAttr(x) => st("GETATTR", &x).map(|_| 0),
            _ => proto("GETATTR reply"),
        })
        .await
    }

    /// READDIRPLUS until eof; returns the number of entries.
    pub async fn readdirplus(&mut self, dir: &[u8]) -> Result<usize> {
        let (mut cookie, mut verf, mut n) = (0u64, [0u8; 8], 0usize);
        loop {
            let a = Nfs3Args::ReadDirPlus(ReadDirPlus3Args { dir: Opaque(dir), cookie, cookieverf: verf, dircount: 64 << 10, maxcount: 256 << 10 });
            let done = self.call(a, |r| match r {
                Nfs3Results::ReadDirPlus(Nfs3Res::Ok(ok)) => {
                    verf = ok.cookieverf;
                    for e in &ok.reply.entries.0 {
                        cookie = e.cookie;
                        n += 1;
                    }
                    Ok(ok.reply.eof || ok.reply.entries.0.is_empty())
                }
                Nfs3Results::ReadDirPlus(x) => st("READDIRPLUS", &x).map(|_| true),
                _ => proto("READDIRPLUS reply"),
            })
            .await?;
            if done {
                return Ok(n);
            }
        }
    }

    pub async fn remove(&mut self, dir: &[u8], name: &str) -> Result<()> {
        let a = Nfs3Args::Remove(Remove3Args { object: DirOpArgs3 { dir: Opaque(dir), name: Name(name.as_bytes()) } });
        self.call(a, |r| match r {
            Nfs3Results::Remove(x) => st("REMOVE", &x),
            _ => proto("REMOVE reply"),
        }).await
    }
}
