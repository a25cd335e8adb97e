//! Stream names in an SMB2 CREATE path (MS-FSCC 2.1.5.1 "Streams": a
//! name is `file[:stream[:type]]`; MS-SMB2 3.3.5.9 hands the whole name to
//! the object store, MS-FSA 2.1.5.1 parses it). Sans-I/O, never panics.
//!
//! * `file`, `file::$DATA`: the file's default (unnamed) data stream
//!   (named explicitly, a directory's is refused: it has none);
//! * `file:name`, `file:name:$DATA`: the named data stream `name`.
//! * the type is compared case-insensitively; any type but `$DATA` is
//!   refused (OBJECT_NAME_INVALID: duet keeps no other stream types, and
//!   `$INDEX_ALLOCATION` of a directory is not served);
//! * `file:` (empty name, no type), `file::` (empty type), a third colon,
//!   or a name holding `\`, `/` or NUL: OBJECT_NAME_INVALID, as Windows;
//! * a name over 255 UTF-16 code units: OBJECT_NAME_INVALID.

use crate::smb2::status::NtStatus;

/// The most UTF-16 code units in a stream name (as a file name, NTFS).
pub const STREAM_NAME_MAX: usize = 255;

/// Which data stream of the file a CREATE names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The unnamed stream, named by the file alone (`file`).
    Default,
    /// The unnamed stream named explicitly (`file::$DATA`): a directory,
    /// which has none, is refused (MS-FSA 2.1.5.1).
    Data,
    /// A named data stream, its name as the client wrote it.
    Named(String),
}

/// Splits the last path component `leaf` into the file name and the
/// stream it names. The file part may be empty (a stream of the share's
/// root directory); callers decide whether that is allowed.
pub fn parse(leaf: &str) -> Result<(&str, Stream), NtStatus> {
    let Some(colon) = leaf.find(':') else {
        return Ok((leaf, Stream::Default));
    };
    let file = &leaf[..colon];
    let rest = &leaf[colon + 1..];
    let (name, ty) = match rest.find(':') {
        Some(c) => (&rest[..c], Some(&rest[c + 1..])),
        None => (rest, None),
    };
    match ty {
        // A third colon, or an empty type (`file::`, `file:s:`).
        Some(t) if t.contains(':') || t.is_empty() => return Err(NtStatus::OBJECT_NAME_INVALID),
        Some(t) if !t.eq_ignore_ascii_case("$DATA") => return Err(NtStatus::OBJECT_NAME_INVALID),
        _ => {}
    }
    if name.is_empty() {
        // `file::$DATA` is the default stream; `file:` names nothing.
        return if ty.is_some() { Ok((file, Stream::Data)) } else { Err(NtStatus::OBJECT_NAME_INVALID) };
    }
    if name.contains(['\\', '/', '\0']) || name.encode_utf16().count() > STREAM_NAME_MAX {
        return Err(NtStatus::OBJECT_NAME_INVALID);
    }
    Ok((file, Stream::Named(name.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(s: &str) -> Stream {
        Stream::Named(s.into())
    }

    #[test]
    fn default_and_named_streams() {
        assert_eq!(parse("f.txt"), Ok(("f.txt", Stream::Default)));
        assert_eq!(parse("f.txt::$DATA"), Ok(("f.txt", Stream::Data)));
        assert_eq!(parse("f.txt::$data"), Ok(("f.txt", Stream::Data)));
        assert_eq!(parse("f.txt:s"), Ok(("f.txt", named("s"))));
        assert_eq!(parse("f.txt:s:$DATA"), Ok(("f.txt", named("s"))));
        assert_eq!(parse("f.txt:Zone.Identifier:$DaTa"), Ok(("f.txt", named("Zone.Identifier"))));
        assert_eq!(parse(":s:$DATA"), Ok(("", named("s"))));
        assert_eq!(parse("f:\u{e4}\u{1f600}"), Ok(("f", named("\u{e4}\u{1f600}"))));
    }

    #[test]
    fn invalid_names_are_refused() {
        for bad in [
            "f:",
            "f::",
            "f:s:",
            "f:s:$DATA:",
            "f:s:$DATA:x",
            "f:s:$INDEX_ALLOCATION",
            "f::$INDEX_ALLOCATION",
            "f:s:$BADTYPE",
            "f:s:DATA",
            "f:a/b",
            "f:a\0b",
            "f:::",
        ] {
            assert_eq!(parse(bad), Err(NtStatus::OBJECT_NAME_INVALID), "{bad:?}");
        }
        let long = "x".repeat(STREAM_NAME_MAX + 1);
        assert_eq!(parse(&format!("f:{long}")), Err(NtStatus::OBJECT_NAME_INVALID));
        let max = "x".repeat(STREAM_NAME_MAX);
        assert_eq!(parse(&format!("f:{max}")), Ok(("f", named(&max))));
    }

    #[test]
    fn hostile_names_never_panic() {
        // Every split of a few tricky characters, including multi-byte
        // ones next to the colons.
        let alphabet = [":", "$", "DATA", "\u{e4}", "\u{1f600}", "\0", "\\", "a"];
        let mut n = 0;
        for a in alphabet {
            for b in alphabet {
                for c in alphabet {
                    for d in alphabet {
                        let s = format!("{a}{b}{c}{d}");
                        if let Ok((file, st)) = parse(&s) {
                            assert!(s.starts_with(file));
                            if let Stream::Named(name) = st {
                                assert!(!name.is_empty() && !name.contains(':'));
                            }
                        }
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(n, 8usize.pow(4));
    }
}
