//! What the server derives from duet attributes: FILETIME conversion,
//! NTSTATUS of file-system errors, access masks from POSIX mode bits, the
//! minimal security descriptor, and search-pattern matching.

use duet_fs::{Attrs, Credentials, FileType, FsError, TimeNs};

use crate::smb2::status::NtStatus;
use crate::smb2::FileTime;

/// 100 ns intervals between 1601-01-01 and 1970-01-01.
const EPOCH_DIFF: i128 = 116_444_736_000_000_000;

/// duet time (ns since 1970) to FILETIME (100 ns since 1601); times before
/// 1601 are 0.
pub fn to_filetime(ns: TimeNs) -> FileTime {
    let t = i128::from(ns).div_euclid(100) + EPOCH_DIFF;
    t.clamp(0, i128::from(i64::MAX)) as u64
}

/// FILETIME to duet time, saturating at the ends of the i64 range.
pub fn from_filetime(ft: FileTime) -> TimeNs {
    let ns = (i128::from(ft) - EPOCH_DIFF) * 100;
    ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Extra NTSTATUS values the codec's table does not name.
pub mod extra_status {
    use crate::smb2::status::NtStatus;
    /// MS-ERREF 2.3: the owner SID cannot be the owner of this object.
    pub const INVALID_OWNER: NtStatus = NtStatus(0xC000_005A);
    /// STATUS_INVALID_PRIMARY_GROUP (MS-ERREF 2.3.1).
    pub const INVALID_PRIMARY_GROUP: NtStatus = NtStatus(0xC000_005B);
    pub const FILE_DELETED: NtStatus = NtStatus(0xC000_0123);
    pub const TOO_MANY_LINKS: NtStatus = NtStatus(0xC000_0265);
    pub const FILE_TOO_LARGE: NtStatus = NtStatus(0xC000_0904);
    pub const UNEXPECTED_IO_ERROR: NtStatus = NtStatus(0xC000_00E9);
    pub const OBJECT_PATH_INVALID: NtStatus = NtStatus(0xC000_0039);
    pub const NO_PREAUTH_INTEGRITY_HASH_OVERLAP: NtStatus = NtStatus(0xC05D_0000);
    pub const PRIVILEGE_NOT_HELD: NtStatus = NtStatus(0xC000_0061);
    pub const FS_DRIVER_REQUIRED: NtStatus = NtStatus(0xC000_019C);
}

/// The one mapping of duet file-system errors to NTSTATUS.
pub fn fs_status(e: FsError) -> NtStatus {
    use extra_status::*;
    match e {
        FsError::NotFound => NtStatus::OBJECT_NAME_NOT_FOUND,
        FsError::Exists => NtStatus::OBJECT_NAME_COLLISION,
        FsError::NotDir => NtStatus::NOT_A_DIRECTORY,
        FsError::IsDir => NtStatus::FILE_IS_A_DIRECTORY,
        FsError::NotEmpty => NtStatus::DIRECTORY_NOT_EMPTY,
        FsError::Access | FsError::Perm => NtStatus::ACCESS_DENIED,
        FsError::Invalid | FsError::BadRef => NtStatus::INVALID_PARAMETER,
        FsError::InvalidName | FsError::NameTooLong => NtStatus::OBJECT_NAME_INVALID,
        FsError::NoSpace => NtStatus::DISK_FULL,
        FsError::Stale => FILE_DELETED,
        FsError::ReadOnly => NtStatus::MEDIA_WRITE_PROTECTED,
        FsError::TooManyLinks => TOO_MANY_LINKS,
        FsError::FileTooBig => FILE_TOO_LARGE,
        FsError::NotSymlink => NtStatus::NOT_A_REPARSE_POINT,
        FsError::Io => UNEXPECTED_IO_ERROR,
        FsError::NotSupported => NtStatus::NOT_SUPPORTED,
        FsError::Skipped => NtStatus::REQUEST_NOT_ACCEPTED,
        FsError::CrossDevice => NtStatus::NOT_SAME_DEVICE,
        FsError::RenameIntoSelf => OBJECT_PATH_INVALID,
        // A cluster without a reachable leader (docs/cluster.md): MS-ERREF
        // 2.3.1 STATUS_INSUFFICIENT_RESOURCES, a transient condition; the
        // Linux client maps it to EAGAIN and retries writes (Windows
        // returns it itself when short of resources).
        FsError::Unavailable => NtStatus::INSUFFICIENT_RESOURCES,
    }
}

/// Access mask bits (MS-SMB2 2.2.13.1) under their SMB names: the file
/// rights of the one ACL model (`duet_fs::acl::rights`, MS-DTYP 2.4.3).
pub mod access {
    use duet_fs::acl::rights as r;

    pub const FILE_READ_DATA: u32 = r::READ_DATA;
    pub const FILE_WRITE_DATA: u32 = r::WRITE_DATA;
    pub const FILE_APPEND_DATA: u32 = r::APPEND_DATA;
    pub const FILE_READ_EA: u32 = r::READ_EA;
    pub const FILE_WRITE_EA: u32 = r::WRITE_EA;
    pub const FILE_EXECUTE: u32 = r::EXECUTE;
    pub const FILE_DELETE_CHILD: u32 = r::DELETE_CHILD;
    pub const FILE_READ_ATTRIBUTES: u32 = r::READ_ATTRIBUTES;
    pub const FILE_WRITE_ATTRIBUTES: u32 = r::WRITE_ATTRIBUTES;
    pub use r::{
        ACCESS_SYSTEM_SECURITY, DELETE, FILE_ALL_ACCESS, FILE_GENERIC_EXECUTE, FILE_GENERIC_READ, FILE_GENERIC_WRITE,
        GENERIC_ALL, GENERIC_EXECUTE, GENERIC_READ, GENERIC_WRITE, MAXIMUM_ALLOWED, READ_CONTROL, SYNCHRONIZE, WRITE_DAC,
        WRITE_OWNER,
    };

    /// Bits that change data or metadata.
    pub const WRITE_BITS: u32 = FILE_WRITE_DATA
        | FILE_APPEND_DATA
        | FILE_WRITE_EA
        | FILE_WRITE_ATTRIBUTES
        | FILE_DELETE_CHILD
        | DELETE
        | WRITE_DAC
        | WRITE_OWNER;

    /// GENERIC_* expanded to file rights (MS-DTYP 2.5.3.2 MapGenericBits).
    pub fn expand(mask: u32) -> u32 {
        r::map_generic(mask)
    }
}

/// The rwx bits (4/2/1) `cred` has on `a`, as the engine computes them.
pub fn mode_bits(cred: &Credentials, a: &Attrs) -> u32 {
    if cred.uid == 0 {
        return 7;
    }
    (if cred.uid == a.uid {
        a.mode >> 6
    } else if cred.in_group(a.gid) {
        a.mode >> 3
    } else {
        a.mode
    }) & 7
}

/// The access a caller may be granted on `a` (MxAc MaximalAccess).
pub fn maximal_access(cred: &Credentials, a: &Attrs, read_only_share: bool) -> u32 {
    use access::*;
    let bits = mode_bits(cred, a);
    let owner = cred.uid == 0 || cred.uid == a.uid;
    let mut m = FILE_READ_ATTRIBUTES | FILE_READ_EA | READ_CONTROL | SYNCHRONIZE;
    if bits & 4 != 0 {
        m |= FILE_READ_DATA;
    }
    if bits & 2 != 0 {
        // FILE_DELETE_CHILD means nothing on a file, but Windows grants it
        // with write access there too: clients ask for FILE_ALL, which
        // includes it, on files (smbtorture smb2.connect).
        m |= FILE_WRITE_DATA | FILE_APPEND_DATA | FILE_WRITE_EA | FILE_WRITE_ATTRIBUTES;
        m |= FILE_DELETE_CHILD;
    }
    if bits & 1 != 0 {
        m |= FILE_EXECUTE;
    }
    // A server cannot stop a client from running bytes it may read: on
    // regular files FILE_EXECUTE follows read (directories keep the x bit
    // as traverse).
    if a.ftype != FileType::Directory && bits & 4 != 0 {
        m |= FILE_EXECUTE;
    }
    if owner {
        m |= FILE_WRITE_ATTRIBUTES | FILE_WRITE_EA | WRITE_DAC | WRITE_OWNER;
        // An owner who may write holds full control, as the owner's ACE of
        // a default Windows ACL gives (FILE_DELETE_CHILD is meaningless on
        // a file; on a directory write permission already implies it).
        if bits & 2 != 0 {
            m |= FILE_DELETE_CHILD;
        }
    }
    // Whether the name may be removed depends on the parent directory; the
    // engine checks that when the removal happens.
    m |= DELETE;
    if a.ftype != FileType::Directory && a.dos_attrs & duet_fs::dos::READONLY != 0 {
        m &= !(FILE_WRITE_DATA | FILE_APPEND_DATA);
    }
    if read_only_share {
        m &= !WRITE_BITS;
    }
    m
}

/// The 8.3 alternate name of `name` (MS-FSCC 2.1.5.2.1): the name itself,
/// upper-cased, when it already is a valid 8.3 name; otherwise up to six
/// characters of the base, `~`, a digit and a letter derived from a hash of
/// the whole name, and up to three characters of the extension.
pub fn short_name(name: &str) -> String {
    fn legal(c: char) -> bool {
        c.is_ascii_alphanumeric() || "$%'-_@~`!(){}^#&".contains(c)
    }
    if name == "." || name == ".." {
        return name.to_string();
    }
    let (base, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], &name[i + 1..]),
        _ => (name, ""),
    };
    let valid = !base.is_empty()
        && base.len() <= 8
        && ext.len() <= 3
        && base.chars().all(legal)
        && ext.chars().all(legal)
        && !base.contains('.');
    if valid {
        return name.to_ascii_uppercase();
    }
    let hash = name
        .bytes()
        .fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    let clean = |s: &str, n: usize| -> String {
        s.chars()
            .filter(|c| legal(*c))
            .map(|c| c.to_ascii_uppercase())
            .take(n)
            .collect()
    };
    let mut b = clean(base, 5);
    if b.is_empty() {
        b.push('_');
    }
    let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    b.push('~');
    b.push(digits[(hash % 36) as usize] as char);
    b.push(digits[((hash / 36) % 36) as usize] as char);
    let e = clean(ext, 3);
    if e.is_empty() {
        b
    } else {
        format!("{b}.{e}")
    }
}

/// Wildcard match of an SMB search pattern (MS-FSCC 2.1.4.4): `*`, `?`,
/// and the DOS forms `<` `>` `"`, case-insensitive.
pub fn pattern_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern
        .chars()
        .map(|c| match c {
            '<' => '*',
            '>' => '?',
            '"' => '.',
            c => c,
        })
        .flat_map(char::to_lowercase)
        .collect();
    let n: Vec<char> = name.chars().flat_map(char::to_lowercase).collect();
    if p == ['*'] || p == ['*', '.', '*'] {
        return true;
    }
    // Iterative glob with backtracking to the last star.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// Whether a pattern has wildcards.
pub fn has_wildcards(pattern: &str) -> bool {
    pattern.contains(['*', '?', '<', '>', '"'])
}

/// Security information bits (MS-DTYP 2.4.7).
pub mod secinfo {
    pub const OWNER: u32 = 0x1;
    pub const GROUP: u32 = 0x2;
    pub const DACL: u32 = 0x4;
}

fn put_sid(out: &mut Vec<u8>, authority: u8, subs: &[u32]) {
    out.push(1);
    out.push(subs.len() as u8);
    out.extend_from_slice(&[0, 0, 0, 0, 0, authority]);
    for s in subs {
        out.extend_from_slice(&s.to_le_bytes());
    }
}

fn sid_len(subs: usize) -> usize {
    8 + 4 * subs
}

/// A SID read from a descriptor: its authority and sub-authorities.
fn read_sid(sd: &[u8], at: usize) -> Option<(u64, Vec<u32>)> {
    let head = sd.get(at..at + 8)?;
    if head[0] != 1 || head[1] > 15 {
        return None;
    }
    let n = usize::from(head[1]);
    let auth = head[2..8].iter().fold(0u64, |a, b| a << 8 | u64::from(*b));
    let subs = sd
        .get(at + 8..at + 8 + 4 * n)?
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Some((auth, subs))
}

/// What a SET_INFO security descriptor means for a POSIX file: the owner
/// and group when they are Unix SIDs (S-1-22-1-uid, S-1-22-2-gid), and the
/// mode from the DACL's allow ACEs for the owner, the group and Everyone
/// (or Authenticated Users / Users, both read as "others"). A NULL DACL
/// gives everyone everything. Other ACEs cannot be kept on a POSIX mode
/// and are dropped. `MS-DTYP 2.4.6` (SECURITY_DESCRIPTOR), `2.4.5` (ACL),
/// `2.4.4.2` (ACCESS_ALLOWED_ACE).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PosixSecurity {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mode: Option<u32>,
}

pub fn posix_from_security_descriptor(
    sd: &[u8],
    info: u32,
    a_uid: u32,
    a_gid: u32,
) -> Result<PosixSecurity, NtStatus> {
    let bad = NtStatus::INVALID_PARAMETER;
    if sd.len() < 20 || sd[0] != 1 {
        return Err(bad);
    }
    let word = |at: usize| u32::from_le_bytes([sd[at], sd[at + 1], sd[at + 2], sd[at + 3]]) as usize;
    let control = u16::from_le_bytes([sd[2], sd[3]]);
    let mut out = PosixSecurity::default();
    let (owner_at, group_at, dacl_at) = (word(4), word(8), word(16));
    if info & secinfo::OWNER != 0 && owner_at != 0 {
        match read_sid(sd, owner_at).ok_or(bad)? {
            (22, s) if s.len() == 2 && s[0] == 1 => out.uid = Some(s[1]),
            // duet keeps owners as Unix uids: another SID cannot be the
            // owner (MS-DTYP 2.4.6; Windows answers so for a SID the
            // caller may not assign).
            _ => return Err(extra_status::INVALID_OWNER),
        }
    }
    if info & secinfo::GROUP != 0 && group_at != 0 {
        match read_sid(sd, group_at).ok_or(bad)? {
            (22, s) if s.len() == 2 && s[0] == 2 => out.gid = Some(s[1]),
            _ => return Err(extra_status::INVALID_PRIMARY_GROUP),
        }
    }
    if info & secinfo::DACL != 0 && control & 0x0004 != 0 {
        if dacl_at == 0 {
            out.mode = Some(0o777);
            return Ok(out);
        }
        let acl = sd.get(dacl_at..dacl_at + 8).ok_or(bad)?;
        let count = usize::from(u16::from_le_bytes([acl[4], acl[5]]));
        let owner = out.uid.unwrap_or(a_uid);
        let group = out.gid.unwrap_or(a_gid);
        let bits = |mask: u32| -> u32 {
            let mask = access::expand(mask);
            let mut b = 0;
            if mask & access::FILE_READ_DATA != 0 {
                b |= 4;
            }
            if mask & (access::FILE_WRITE_DATA | access::FILE_APPEND_DATA) != 0 {
                b |= 2;
            }
            if mask & access::FILE_EXECUTE != 0 {
                b |= 1;
            }
            b
        };
        let (mut u, mut g, mut o) = (0u32, 0u32, 0u32);
        let mut at = dacl_at + 8;
        for _ in 0..count.min(1024) {
            let head = sd.get(at..at + 8).ok_or(bad)?;
            let size = usize::from(u16::from_le_bytes([head[2], head[3]]));
            if size < 16 {
                return Err(bad);
            }
            let mask = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            // Allow ACEs that apply to the object itself (not inherit-only).
            if head[0] == 0 && head[1] & 0x08 == 0 {
                let (auth, subs) = read_sid(sd, at + 8).ok_or(bad)?;
                match (auth, subs.as_slice()) {
                    (22, [1, id]) if *id == owner => u |= bits(mask),
                    (22, [2, id]) if *id == group => g |= bits(mask),
                    (3, [0]) => u |= bits(mask), // CREATOR OWNER
                    (1, [0]) | (5, [11]) | (5, [32, 545]) => o |= bits(mask),
                    _ => {}
                }
            }
            at += size;
        }
        out.mode = Some(u << 6 | g << 3 | o);
    }
    Ok(out)
}

/// The self-relative descriptor (MS-DTYP 2.4.6) of a node with kept
/// security (issue 17, `acl::Stored`): the stored owner and group SIDs,
/// else S-1-22-1-uid and S-1-22-2-gid as [`security_descriptor`]; the
/// stored DACL (a NULL DACL as such) and its control bits
/// (DACL_PROTECTED, DACL_AUTO_INHERITED), else the mode's DACL. Only the
/// parts `info` asks for are present.
pub fn stored_security_descriptor(a: &Attrs, info: u32, s: &duet_fs::acl::Stored) -> Vec<u8> {
    use duet_fs::acl::SecurityDescriptor;
    let dacl_info = info & secinfo::DACL != 0;
    if dacl_info && !s.has_dacl() {
        // No DACL kept (an owner SID alone): the mode's, with the owner
        // and group put in.
        let mut sd = SecurityDescriptor::decode(&security_descriptor(a, info)).expect("duet's own descriptor decodes");
        sd.control &= !duet_fs::acl::control::SELF_RELATIVE;
        if info & secinfo::OWNER != 0 {
            sd.owner = Some(s.owner_or(a.uid));
        }
        if info & secinfo::GROUP != 0 {
            sd.group = Some(s.group_or(a.gid));
        }
        return sd.encode();
    }
    let mut sd = SecurityDescriptor::default();
    if info & secinfo::OWNER != 0 {
        sd.owner = Some(s.owner_or(a.uid));
    }
    if info & secinfo::GROUP != 0 {
        sd.group = Some(s.group_or(a.gid));
    }
    if dacl_info {
        use duet_fs::acl::control::*;
        sd.control = s.control & (DACL_PROTECTED | DACL_AUTO_INHERITED) | DACL_PRESENT;
        sd.dacl = s.dacl.clone();
    }
    sd.encode()
}

/// A self-relative SECURITY_DESCRIPTOR (MS-DTYP 2.4.6) for `a`: owner
/// S-1-22-1-uid, group S-1-22-2-gid, and a DACL of three allow ACEs
/// (owner, group, Everyone) from the mode bits. Only the parts `info`
/// asks for are present.
pub fn security_descriptor(a: &Attrs, info: u32) -> Vec<u8> {
    use access::*;
    let rights = |bits: u32, owner: bool| -> u32 {
        let mut m = FILE_READ_ATTRIBUTES | READ_CONTROL | SYNCHRONIZE | FILE_READ_EA;
        if bits & 4 != 0 {
            m |= FILE_GENERIC_READ;
        }
        if bits & 2 != 0 {
            m |= FILE_GENERIC_WRITE | DELETE;
            if a.ftype == FileType::Directory {
                m |= FILE_DELETE_CHILD;
            }
        }
        if bits & 1 != 0 {
            m |= FILE_GENERIC_EXECUTE;
        }
        if owner {
            m |= WRITE_DAC | WRITE_OWNER | FILE_WRITE_ATTRIBUTES | FILE_WRITE_EA;
        }
        m
    };
    let mut body = Vec::new();
    let mut owner_off = 0u32;
    let mut group_off = 0u32;
    let mut dacl_off = 0u32;
    let mut control: u16 = 0x8000; // SE_SELF_RELATIVE
    if info & secinfo::OWNER != 0 {
        owner_off = 20 + body.len() as u32;
        put_sid(&mut body, 22, &[1, a.uid]);
    }
    if info & secinfo::GROUP != 0 {
        group_off = 20 + body.len() as u32;
        put_sid(&mut body, 22, &[2, a.gid]);
    }
    if info & secinfo::DACL != 0 {
        control |= 0x0004; // SE_DACL_PRESENT
        dacl_off = 20 + body.len() as u32;
        let aces: [(u32, u8, &[u32]); 3] = [
            (rights(a.mode >> 6 & 7, true), 22, &[1, a.uid]),
            (rights(a.mode >> 3 & 7, false), 22, &[2, a.gid]),
            (rights(a.mode & 7, false), 1, &[0]),
        ];
        let acl_size = 8 + aces
            .iter()
            .map(|(_, _, s)| 8 + sid_len(s.len()))
            .sum::<usize>();
        body.push(2); // AclRevision
        body.push(0);
        body.extend_from_slice(&(acl_size as u16).to_le_bytes());
        body.extend_from_slice(&(aces.len() as u16).to_le_bytes());
        body.extend_from_slice(&[0, 0]);
        for (mask, auth, subs) in aces {
            body.push(0); // ACCESS_ALLOWED_ACE_TYPE
            body.push(0);
            body.extend_from_slice(&((8 + sid_len(subs.len())) as u16).to_le_bytes());
            body.extend_from_slice(&mask.to_le_bytes());
            put_sid(&mut body, auth, subs);
        }
    }
    let mut out = Vec::with_capacity(20 + body.len());
    out.push(1); // Revision
    out.push(0);
    out.extend_from_slice(&control.to_le_bytes());
    out.extend_from_slice(&owner_off.to_le_bytes());
    out.extend_from_slice(&group_off.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // no SACL
    out.extend_from_slice(&dacl_off.to_le_bytes());
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filetime_round_trips() {
        assert_eq!(to_filetime(0), 116_444_736_000_000_000);
        assert_eq!(from_filetime(116_444_736_000_000_000), 0);
        let ns = 1_700_000_000_123_456_700;
        assert_eq!(from_filetime(to_filetime(ns)), ns);
        assert!(
            to_filetime(i64::MIN) > 0,
            "i64::MIN ns is in 1677, after 1601"
        );
        assert_eq!(from_filetime(u64::MAX), i64::MAX);
        assert_eq!(to_filetime(-100), 116_444_735_999_999_999);
    }

    #[test]
    fn patterns() {
        assert!(pattern_match("*", "anything"));
        assert!(pattern_match("*.txt", "A.TXT"));
        assert!(!pattern_match("*.txt", "a.txt.bak"));
        assert!(pattern_match("a?c", "abc"));
        assert!(pattern_match("a*b*c", "axxbyyc"));
        assert!(!pattern_match("a*b*c", "axxbyy"));
        assert!(pattern_match("<.txt", "x.txt"));
        assert!(pattern_match("*.*", "noext"));
    }

    #[test]
    fn security_descriptor_layout() {
        let a = Attrs {
            id: 5,
            ftype: FileType::Regular,
            mode: 0o640,
            uid: 1000,
            gid: 100,
            nlink: 1,
            rdev: 0,
            size: 0,
            alloc_size: 0,
            dos_attrs: 0,
            btime: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
            change: 1,
        };
        let sd = security_descriptor(&a, 7);
        assert_eq!(sd[0], 1);
        let owner = u32::from_le_bytes(sd[4..8].try_into().unwrap()) as usize;
        assert_eq!(&sd[owner..owner + 8], &[1, 2, 0, 0, 0, 0, 0, 22]);
        assert_eq!(
            u32::from_le_bytes(sd[owner + 12..owner + 16].try_into().unwrap()),
            1000
        );
        let dacl = u32::from_le_bytes(sd[16..20].try_into().unwrap()) as usize;
        let acl_size = u16::from_le_bytes(sd[dacl + 2..dacl + 4].try_into().unwrap()) as usize;
        assert_eq!(dacl + acl_size, sd.len());
        assert_eq!(security_descriptor(&a, secinfo::OWNER).len(), 20 + 16);
    }
}
