//! Targets of `duetctl bench` (URLs) and one protocol-neutral async
//! connection ([`Conn`]) over duet-client's SMB2/3, NFSv4.1 and NFSv3
//! clients on a glommio TCP stream.

use std::collections::HashMap;

use duet_client::nfs3::Nfs3Client;
use duet_client::nfs4::{Nfs4Client, Stat4};
use duet_client::smb::{SmbClient, SmbTarget};
use duet_protocols::nfs::nfs4::Stateid4;
use duet_protocols::smb2::negotiate::dialect;
use duet_protocols::smb2::FileId;

use crate::rt::{self, Stream};

pub type BResult<T> = Result<T, String>;

fn e<T: std::fmt::Display>(what: &str) -> impl Fn(T) -> String + '_ {
    move |x| format!("{what}: {x}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Smb,
    Nfs4,
    Nfs3,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Smb => "smb",
            Proto::Nfs4 => "nfs4",
            Proto::Nfs3 => "nfs3",
        }
    }
}

/// A parsed target URL: `smb://user:pass@host:port/share`,
/// `nfs4://host:port/export`, `nfs3://host:port/export`, optionally
/// prefixed by `NAME=`.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub url: String,
    pub proto: Proto,
    pub user: String,
    pub password: String,
    pub host: String,
    pub port: u16,
    pub path: String,
    /// SMB dialects to offer (`?dialect=3.1.1|3.0.2|2.1`).
    pub dialects: Vec<u16>,
}

impl Target {
    pub fn parse(s: &str) -> BResult<Target> {
        let (name, url) = match s.split_once('=') {
            Some((n, u)) if !n.contains("://") => (Some(n.to_string()), u.to_string()),
            _ => (None, s.to_string()),
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("{url}: not a URL (smb://, nfs4://, nfs3://)"))?;
        let proto = match scheme {
            "smb" | "smb2" | "smb3" | "cifs" => Proto::Smb,
            "nfs4" | "nfs" => Proto::Nfs4,
            "nfs3" => Proto::Nfs3,
            other => return Err(format!("{url}: unknown scheme {other}")),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (auth, hostpath) = match rest.rsplit_once('@') {
            Some((a, h)) => (a, h),
            None => ("", rest),
        };
        let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
        let (hostport, path) = match hostpath.find('/') {
            Some(i) => (&hostpath[..i], &hostpath[i..]),
            None => (hostpath, "/"),
        };
        let default_port = match proto {
            Proto::Smb => 445,
            _ => 2049,
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse::<u16>().map_err(|_| format!("{url}: bad port"))?),
            None => (hostport.to_string(), default_port),
        };
        let mut dialects = vec![dialect::SMB3_1_1, dialect::SMB3_0_2, dialect::SMB2_1];
        for kv in query.split('&').filter(|x| !x.is_empty()) {
            match kv.split_once('=') {
                Some(("dialect", "3.1.1")) => dialects = vec![dialect::SMB3_1_1],
                Some(("dialect", "3.0.2")) => dialects = vec![dialect::SMB3_0_2],
                Some(("dialect", "2.1")) => dialects = vec![dialect::SMB2_1],
                _ => return Err(format!("{url}: unknown option {kv}")),
            }
        }
        let name = name.unwrap_or_else(|| format!("{scheme}-{host}:{port}"));
        Ok(Target {
            name,
            url: url.clone(),
            proto,
            user: user.to_string(),
            password: password.to_string(),
            host,
            port,
            path: path.to_string(),
            dialects,
        })
    }

    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The URL without the password.
    pub fn display_url(&self) -> String {
        match self.url.split_once('@') {
            Some((a, b)) if a.contains(':') && a.contains("://") => {
                let (s, u) = a.split_once("://").unwrap();
                let user = u.split(':').next().unwrap_or("");
                format!("{s}://{user}@{b}")
            }
            _ => self.url.clone(),
        }
    }

    pub async fn connect(&self) -> BResult<Conn> {
        self.connect_via(&self.addr()).await
    }

    /// Connects to `addr` instead of the URL's address (the latency mode
    /// goes through a forwarder).
    pub async fn connect_via(&self, addr: &str) -> BResult<Conn> {
        let s = rt::connect(addr).await.map_err(e(&self.name))?;
        Ok(match self.proto {
            Proto::Smb => {
                let c = SmbClient::connect(s, &self.smb_target(addr)).await.map_err(e(&self.name))?;
                Conn::Smb(SmbConn { c, handles: Vec::new() })
            }
            Proto::Nfs4 => {
                let c = Nfs4Client::connect(s, &self.path, 1).await.map_err(e(&self.name))?;
                let mut dirs = HashMap::new();
                dirs.insert(String::new(), c.root.clone());
                Conn::Nfs4(Nfs4Conn { c, dirs, handles: Vec::new() })
            }
            Proto::Nfs3 => {
                let c = Nfs3Client::connect(s, &self.path).await.map_err(e(&self.name))?;
                let mut dirs = HashMap::new();
                dirs.insert(String::new(), c.root.clone());
                Conn::Nfs3(Nfs3Conn { c, dirs, handles: Vec::new() })
            }
        })
    }

    /// The SMB session parameters, naming the server `addr`.
    pub fn smb_target(&self, addr: &str) -> SmbTarget {
        SmbTarget {
            addr: addr.to_string(),
            user: self.user.clone(),
            password: self.password.clone(),
            domain: String::new(),
            share: self.path.trim_matches('/').to_string(),
            dialects: self.dialects.clone(),
        }
    }
}

/// One connection of the load generator, of any protocol: what a client
/// task needs of it. Paths are relative to the share/export root,
/// `/`-separated. Each method is one request chain (or a stream of
/// requests) awaited on the connection.
pub enum Conn {
    Smb(SmbConn),
    Nfs4(Nfs4Conn),
    Nfs3(Nfs3Conn),
}

macro_rules! each {
    ($self:ident, $c:ident => $e:expr) => {
        match $self {
            Conn::Smb($c) => $e,
            Conn::Nfs4($c) => $e,
            Conn::Nfs3($c) => $e,
        }
    };
}

impl Conn {
    /// Creates or truncates a small file and writes `data` (one chain).
    pub async fn put(&mut self, path: &str, data: &[u8]) -> BResult<()> {
        each!(self, c => c.put(path, data).await)
    }
    /// Size and whether it is a directory.
    pub async fn stat(&mut self, path: &str) -> BResult<(u64, bool)> {
        each!(self, c => c.stat(path).await)
    }
    pub async fn get(&mut self, path: &str, max: u32) -> BResult<Vec<u8>> {
        each!(self, c => c.get(path, max).await)
    }
    pub async fn remove(&mut self, path: &str) -> BResult<()> {
        each!(self, c => c.remove(path).await)
    }
    pub async fn mkdir(&mut self, path: &str) -> BResult<()> {
        each!(self, c => c.mkdir(path).await)
    }
    pub async fn rmdir(&mut self, path: &str) -> BResult<()> {
        each!(self, c => c.rmdir(path).await)
    }
    /// `ls -l`: every entry with its attributes; returns the count.
    pub async fn list(&mut self, path: &str) -> BResult<usize> {
        each!(self, c => c.list(path).await)
    }
    /// Opens (creating when asked) a file for I/O; returns a handle.
    pub async fn open(&mut self, path: &str, create: bool) -> BResult<usize> {
        each!(self, c => c.open(path, create).await)
    }
    pub async fn close(&mut self, h: usize) -> BResult<()> {
        each!(self, c => c.close(h).await)
    }
    pub async fn pwrite(&mut self, h: usize, off: u64, data: &[u8]) -> BResult<()> {
        each!(self, c => c.pwrite(h, off, data).await)
    }
    pub async fn pread(&mut self, h: usize, off: u64, len: u32) -> BResult<Vec<u8>> {
        each!(self, c => c.pread(h, off, len).await)
    }
    /// Streams `total` bytes with several I/Os in flight.
    pub async fn write_stream(&mut self, h: usize, total: u64, io: usize, fill: &mut dyn FnMut(u64, &mut [u8])) -> BResult<()> {
        each!(self, c => c.write_stream(h, total, io, fill).await)
    }
    pub async fn read_stream(&mut self, h: usize, total: u64, io: usize, check: &mut dyn FnMut(u64, &[u8]) -> BResult<()>) -> BResult<()> {
        each!(self, c => c.read_stream(h, total, io, check).await)
    }
}

/// SMB READs or WRITEs kept in flight by the sequential workloads.
const SMB_STREAM_DEPTH: usize = 32;

fn smb_path(p: &str) -> String {
    p.trim_matches('/').replace('/', "\\")
}

fn split(p: &str) -> (&str, &str) {
    let p = p.trim_matches('/');
    match p.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", p),
    }
}

pub struct SmbConn {
    c: SmbClient<Stream>,
    handles: Vec<FileId>,
}

impl SmbConn {
    async fn put(&mut self, path: &str, data: &[u8]) -> BResult<()> {
        self.c.put_small(&smb_path(path), data).await.map_err(e(path))
    }
    async fn stat(&mut self, path: &str) -> BResult<(u64, bool)> {
        let s = self.c.stat(&smb_path(path)).await.map_err(e(path))?;
        Ok((s.size, s.directory))
    }
    async fn get(&mut self, path: &str, max: u32) -> BResult<Vec<u8>> {
        self.c.get_small(&smb_path(path), max).await.map_err(e(path))
    }
    async fn remove(&mut self, path: &str) -> BResult<()> {
        self.c.remove(&smb_path(path)).await.map_err(e(path))
    }
    async fn mkdir(&mut self, path: &str) -> BResult<()> {
        self.c.mkdir(&smb_path(path), false).await.map_err(e(path))
    }
    async fn rmdir(&mut self, path: &str) -> BResult<()> {
        self.c.rmdir(&smb_path(path)).await.map_err(e(path))
    }
    async fn list(&mut self, path: &str) -> BResult<usize> {
        Ok(self.c.list(&smb_path(path)).await.map_err(e(path))?.len())
    }
    async fn open(&mut self, path: &str, create: bool) -> BResult<usize> {
        let f = self.c.open(&smb_path(path), create).await.map_err(e(path))?;
        self.handles.push(f);
        Ok(self.handles.len() - 1)
    }
    async fn close(&mut self, h: usize) -> BResult<()> {
        self.c.close(self.handles[h]).await.map_err(e("close"))
    }
    async fn pwrite(&mut self, h: usize, off: u64, data: &[u8]) -> BResult<()> {
        self.c.write_at(self.handles[h], off, data).await.map_err(e("write"))
    }
    async fn pread(&mut self, h: usize, off: u64, len: u32) -> BResult<Vec<u8>> {
        self.c.read_at(self.handles[h], off, len).await.map_err(e("read"))
    }
    async fn write_stream(&mut self, h: usize, total: u64, io: usize, fill: &mut dyn FnMut(u64, &mut [u8])) -> BResult<()> {
        // 32 requests in flight (within the credits granted), about what a
        // cifs mount keeps busy; the same for every SMB server.
        self.c.write_stream(self.handles[h], total, io, SMB_STREAM_DEPTH, fill).await.map_err(e("write"))
    }
    async fn read_stream(&mut self, h: usize, total: u64, io: usize, check: &mut dyn FnMut(u64, &[u8]) -> BResult<()>) -> BResult<()> {
        let mut err = None;
        let r = self
            .c
            .read_stream(self.handles[h], total, io, SMB_STREAM_DEPTH, &mut |o, d| {
                check(o, d).map_err(|m| {
                    err = Some(m.clone());
                    duet_client::Error::Protocol(m)
                })
            })
            .await;
        match (r, err) {
            (_, Some(m)) => Err(m),
            (Err(x), None) => Err(format!("read: {x}")),
            _ => Ok(()),
        }
    }
}

pub struct Nfs4Conn {
    c: Nfs4Client<Stream>,
    dirs: HashMap<String, Vec<u8>>,
    handles: Vec<(Vec<u8>, Stateid4)>,
}

/// Where a directory lookup starts: the deepest cached ancestor of `d`
/// (the export root at worst), and the (path, component) steps still to
/// look up below it, in order.
fn walk_from<'a>(dirs: &HashMap<String, Vec<u8>>, d: &'a str) -> (Vec<u8>, Vec<(String, &'a str)>) {
    let mut fh = dirs[""].clone();
    let mut steps = Vec::new();
    let mut at = String::new();
    for comp in d.split('/').filter(|c| !c.is_empty()) {
        if !at.is_empty() {
            at.push('/');
        }
        at.push_str(comp);
        match dirs.get(&at) {
            Some(f) if steps.is_empty() => fh = f.clone(),
            _ => steps.push((at.clone(), comp)),
        }
    }
    (fh, steps)
}

impl Nfs4Conn {
    /// The handle of directory `d`, looked up component by component
    /// (cached).
    async fn dir(&mut self, d: &str) -> BResult<Vec<u8>> {
        if let Some(f) = self.dirs.get(d) {
            return Ok(f.clone());
        }
        let (mut fh, steps) = walk_from(&self.dirs, d);
        for (at, comp) in steps {
            fh = self.c.lookup_fh(&fh, comp).await.map_err(e(d))?;
            self.dirs.insert(at, fh.clone());
        }
        Ok(fh)
    }

    async fn put(&mut self, path: &str, data: &[u8]) -> BResult<()> {
        let (d, n) = split(path);
        let fh = self.dir(d).await?;
        self.c.put_small(&fh, n, data).await.map_err(e(path))
    }
    async fn stat(&mut self, path: &str) -> BResult<(u64, bool)> {
        let (d, n) = split(path);
        let fh = self.dir(d).await?;
        let Stat4 { size, directory, .. } = self.c.stat(&fh, n).await.map_err(e(path))?;
        Ok((size, directory))
    }
    async fn get(&mut self, path: &str, max: u32) -> BResult<Vec<u8>> {
        let (d, n) = split(path);
        let fh = self.dir(d).await?;
        self.c.get_small(&fh, n, max).await.map_err(e(path))
    }
    async fn remove(&mut self, path: &str) -> BResult<()> {
        let (d, n) = split(path);
        let fh = self.dir(d).await?;
        self.c.remove(&fh, n).await.map_err(e(path))
    }
    async fn mkdir(&mut self, path: &str) -> BResult<()> {
        let (d, n) = split(path);
        let fh = self.dir(d).await?;
        let nfh = self.c.mkdir(&fh, n).await.map_err(e(path))?;
        self.dirs.insert(path.trim_matches('/').to_string(), nfh);
        Ok(())
    }
    async fn rmdir(&mut self, path: &str) -> BResult<()> {
        self.dirs.remove(path.trim_matches('/'));
        self.remove(path).await
    }
    async fn list(&mut self, path: &str) -> BResult<usize> {
        let fh = self.dir(path.trim_matches('/')).await?;
        Ok(self.c.list(&fh).await.map_err(e(path))?.len())
    }
    async fn open(&mut self, path: &str, create: bool) -> BResult<usize> {
        let (d, n) = split(path);
        let fh = self.dir(d).await?;
        let h = self.c.open_file(&fh, n, create).await.map_err(e(path))?;
        self.handles.push(h);
        Ok(self.handles.len() - 1)
    }
    async fn close(&mut self, h: usize) -> BResult<()> {
        let (fh, st) = self.handles[h].clone();
        self.c.close_file(&fh, st).await.map_err(e("close"))
    }
    async fn pwrite(&mut self, h: usize, off: u64, data: &[u8]) -> BResult<()> {
        use duet_client::nfs4 as n4;
        let (fh, st) = self.handles[h].clone();
        let r = self
            .c
            .call(vec![n4::putfh(&fh), n4::write(st, off, data, duet_protocols::nfs::nfs4::StableHow4::FileSync)])
            .await
            .map_err(e("write"))?;
        r.ok().map(|_| ()).map_err(e("write"))
    }
    async fn pread(&mut self, h: usize, off: u64, len: u32) -> BResult<Vec<u8>> {
        use duet_client::nfs4 as n4;
        let (fh, st) = self.handles[h].clone();
        let r = self.c.call(vec![n4::putfh(&fh), n4::read(st, off, len)]).await.map_err(e("read"))?;
        let v = r.ok().map_err(e("read"))?;
        Ok(n4::read_data(&v).map_err(e("read"))?.0)
    }
    async fn write_stream(&mut self, h: usize, total: u64, io: usize, fill: &mut dyn FnMut(u64, &mut [u8])) -> BResult<()> {
        let (fh, st) = self.handles[h].clone();
        self.c.write_stream(&fh, st, total, io, fill).await.map_err(e("write"))
    }
    async fn read_stream(&mut self, h: usize, total: u64, io: usize, check: &mut dyn FnMut(u64, &[u8]) -> BResult<()>) -> BResult<()> {
        let (fh, st) = self.handles[h].clone();
        let mut err = None;
        let r = self
            .c
            .read_stream(&fh, st, total, io, &mut |o, d| {
                check(o, d).map_err(|m| {
                    err = Some(m.clone());
                    duet_client::Error::Protocol(m)
                })
            })
            .await;
        match (r, err) {
            (_, Some(m)) => Err(m),
            (Err(x), None) => Err(format!("read: {x}")),
            _ => Ok(()),
        }
    }
}

pub struct Nfs3Conn {
    c: Nfs3Client<Stream>,
    dirs: HashMap<String, Vec<u8>>,
    handles: Vec<Vec<u8>>,
}

impl Nfs3Conn {
    /// The handle of directory `d` (cached), as [`Nfs4Conn::dir`].
    async fn dir(&mut self, d: &str) -> BResult<Vec<u8>> {
        if let Some(f) = self.dirs.get(d) {
            return Ok(f.clone());
        }
        let (mut fh, steps) = walk_from(&self.dirs, d);
        for (at, comp) in steps {
            fh = self.c.lookup(&fh, comp).await.map_err(e(d))?;
            self.dirs.insert(at, fh.clone());
        }
        Ok(fh)
    }
    async fn file(&mut self, path: &str) -> BResult<Vec<u8>> {
        let (d, n) = split(path);
        let fh = self.dir(d).await?;
        self.c.lookup(&fh, n).await.map_err(e(path))
    }

    async fn put(&mut self, path: &str, data: &[u8]) -> BResult<()> {
        let (d, n) = split(path);
        let dfh = self.dir(d).await?;
        let fh = self.c.create(&dfh, n).await.map_err(e(path))?;
        self.c.write(&fh, 0, data).await.map_err(e(path))
    }
    async fn stat(&mut self, path: &str) -> BResult<(u64, bool)> {
        let fh = self.file(path).await?;
        Ok((self.c.getattr(&fh).await.map_err(e(path))?, false))
    }
    async fn get(&mut self, path: &str, max: u32) -> BResult<Vec<u8>> {
        let fh = self.file(path).await?;
        self.c.read(&fh, 0, max).await.map_err(e(path))
    }
    async fn remove(&mut self, path: &str) -> BResult<()> {
        let (d, n) = split(path);
        let fh = self.dir(d).await?;
        self.c.remove(&fh, n).await.map_err(e(path))
    }
    async fn mkdir(&mut self, path: &str) -> BResult<()> {
        Err(format!("{path}: mkdir is not implemented for nfs3 targets"))
    }
    async fn rmdir(&mut self, path: &str) -> BResult<()> {
        Err(format!("{path}: rmdir is not implemented for nfs3 targets"))
    }
    async fn list(&mut self, path: &str) -> BResult<usize> {
        let fh = self.dir(path.trim_matches('/')).await?;
        self.c.readdirplus(&fh).await.map_err(e(path))
    }
    async fn open(&mut self, path: &str, create: bool) -> BResult<usize> {
        let fh = if create {
            let (d, n) = split(path);
            let dfh = self.dir(d).await?;
            self.c.create(&dfh, n).await.map_err(e(path))?
        } else {
            self.file(path).await?
        };
        self.handles.push(fh);
        Ok(self.handles.len() - 1)
    }
    async fn close(&mut self, _h: usize) -> BResult<()> {
        Ok(())
    }
    async fn pwrite(&mut self, h: usize, off: u64, data: &[u8]) -> BResult<()> {
        let fh = self.handles[h].clone();
        self.c.write(&fh, off, data).await.map_err(e("write"))
    }
    async fn pread(&mut self, h: usize, off: u64, len: u32) -> BResult<Vec<u8>> {
        let fh = self.handles[h].clone();
        self.c.read(&fh, off, len).await.map_err(e("read"))
    }
    async fn write_stream(&mut self, h: usize, total: u64, io: usize, fill: &mut dyn FnMut(u64, &mut [u8])) -> BResult<()> {
        let mut off = 0;
        let mut buf = vec![0u8; io];
        while off < total {
            let n = (total - off).min(io as u64) as usize;
            fill(off, &mut buf[..n]);
            self.pwrite(h, off, &buf[..n]).await?;
            off += n as u64;
        }
        Ok(())
    }
    async fn read_stream(&mut self, h: usize, total: u64, io: usize, check: &mut dyn FnMut(u64, &[u8]) -> BResult<()>) -> BResult<()> {
        let mut off = 0;
        while off < total {
            let n = (total - off).min(io as u64) as u32;
            let d = self.pread(h, off, n).await?;
            check(off, &d)?;
            off += u64::from(n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_urls() {
        let t = Target::parse("samba=smb://bench:benchpw@127.0.0.1:1445/share").unwrap();
        assert_eq!((t.name.as_str(), t.proto, t.user.as_str(), t.password.as_str()), ("samba", Proto::Smb, "bench", "benchpw"));
        assert_eq!((t.addr(), t.path.as_str()), ("127.0.0.1:1445".to_string(), "/share"));
        assert_eq!(t.display_url(), "smb://bench@127.0.0.1:1445/share");
        let t = Target::parse("nfs4://10.0.0.2/export/a").unwrap();
        assert_eq!((t.proto, t.port, t.path.as_str()), (Proto::Nfs4, 2049, "/export/a"));
        assert_eq!(t.name, "nfs4-10.0.0.2:2049");
        let t = Target::parse("smb://u:p@h:1/s?dialect=2.1").unwrap();
        assert_eq!(t.dialects, vec![dialect::SMB2_1]);
        assert!(Target::parse("ftp://h/x").is_err());
        assert!(Target::parse("h:1/x").is_err());
        assert_eq!(split("a/b/c"), ("a/b", "c"));
        assert_eq!(split("c"), ("", "c"));
        assert_eq!(smb_path("/a/b"), "a\\b");
    }
}
