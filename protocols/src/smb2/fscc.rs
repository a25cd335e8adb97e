//! MS-FSCC information structures that an SMB2 server returns from
//! QUERY_INFO and QUERY_DIRECTORY and accepts in SET_INFO: file information
//! classes (MS-FSCC 2.4), file system information classes (MS-FSCC 2.5) and
//! the directory enumeration classes with their NextEntryOffset chains.
//!
//! Section numbers follow the MS-FSCC revision that numbers
//! FileRenameInformation 2.4.34; each type also names its class number,
//! which does not change between revisions.

use super::cursor::{len_u32, Reader, Utf16, WireWrite};
use super::decode_error::DecodeError;
use super::FileTime;

/// FileInformationClass values (MS-FSCC 2.4).
pub mod info_class {
    pub const DIRECTORY: u8 = 1;
    pub const FULL_DIRECTORY: u8 = 2;
    pub const BOTH_DIRECTORY: u8 = 3;
    pub const BASIC: u8 = 4;
    pub const STANDARD: u8 = 5;
    pub const INTERNAL: u8 = 6;
    pub const EA: u8 = 7;
    pub const ACCESS: u8 = 8;
    pub const NAME: u8 = 9;
    pub const RENAME: u8 = 10;
    pub const LINK: u8 = 11;
    pub const NAMES: u8 = 12;
    pub const DISPOSITION: u8 = 13;
    pub const POSITION: u8 = 14;
    pub const FULL_EA: u8 = 15;
    pub const MODE: u8 = 16;
    pub const ALIGNMENT: u8 = 17;
    pub const ALL: u8 = 18;
    pub const ALLOCATION: u8 = 19;
    pub const END_OF_FILE: u8 = 20;
    pub const ALTERNATE_NAME: u8 = 21;
    pub const STREAM: u8 = 22;
    pub const PIPE: u8 = 23;
    /// FileCompressionInformation (MS-FSCC 2.4.9): CompressedFileSize,
    /// CompressionFormat (`ioctl::compression_format`), three shifts,
    /// 3 reserved bytes; 16 bytes.
    pub const COMPRESSION: u8 = 28;
    pub const NETWORK_OPEN: u8 = 34;
    pub const ATTRIBUTE_TAG: u8 = 35;
    pub const ID_BOTH_DIRECTORY: u8 = 37;
    pub const ID_FULL_DIRECTORY: u8 = 38;
    pub const VALID_DATA_LENGTH: u8 = 39;
    pub const SHORT_NAME: u8 = 40;
    pub const NORMALIZED_NAME: u8 = 48;
    pub const ID_INFORMATION: u8 = 59;
    pub const ID_EXTD_DIRECTORY: u8 = 60;
    pub const DISPOSITION_EX: u8 = 64;
    pub const RENAME_EX: u8 = 65;
}

/// FsInformationClass values (MS-FSCC 2.5).
pub mod fs_info_class {
    pub const VOLUME: u8 = 1;
    pub const LABEL: u8 = 2;
    pub const SIZE: u8 = 3;
    pub const DEVICE: u8 = 4;
    pub const ATTRIBUTE: u8 = 5;
    pub const CONTROL: u8 = 6;
    pub const FULL_SIZE: u8 = 7;
    pub const OBJECT_ID: u8 = 8;
    pub const SECTOR_SIZE: u8 = 11;
}

/// File attributes (MS-FSCC 2.6).
pub mod file_attributes {
    pub const READONLY: u32 = 0x0000_0001;
    pub const HIDDEN: u32 = 0x0000_0002;
    pub const SYSTEM: u32 = 0x0000_0004;
    pub const DIRECTORY: u32 = 0x0000_0010;
    pub const ARCHIVE: u32 = 0x0000_0020;
    pub const NORMAL: u32 = 0x0000_0080;
    pub const TEMPORARY: u32 = 0x0000_0100;
    pub const SPARSE_FILE: u32 = 0x0000_0200;
    pub const REPARSE_POINT: u32 = 0x0000_0400;
    /// FILE_ATTRIBUTE_COMPRESSED: set and cleared only by
    /// FSCTL_SET_COMPRESSION (MS-FSCC 2.3.67), inherited from the directory
    /// on create (MS-FSA 2.1.5.1.2.1); stored as `duet_fs::dos::COMPRESSED`.
    pub const COMPRESSED: u32 = 0x0000_0800;
    pub const OFFLINE: u32 = 0x0000_1000;
    pub const NOT_CONTENT_INDEXED: u32 = 0x0000_2000;
    pub const ENCRYPTED: u32 = 0x0000_4000;
}

/// Fixed-size structures: `SIZE`, `decode` (which accepts longer buffers, as
/// SET_INFO senders may pad) and `encode`.
macro_rules! fixed_info {
    (
        $(#[$doc:meta])*
        $name:ident, $size:expr, { $( $(#[$fdoc:meta])* $field:ident : $ty:ident ),* $(,)? } $(, reserved $reserved:expr)?
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            $( $(#[$fdoc])* pub $field: $ty, )*
        }

        impl $name {
            pub const SIZE: usize = $size;

            pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
                let mut r = Reader::new(buf);
                let v = $name { $( $field: fixed_info!(@read r, $ty, stringify!($field)), )* };
                $( r.skip($reserved, "Reserved")?; )?
                Ok(v)
            }

            pub fn encode(&self, out: &mut Vec<u8>) {
                $( fixed_info!(@write out, $ty, self.$field); )*
                $( out.put_zeros($reserved); )?
            }
        }
    };
    (@read $r:ident, u8, $f:expr) => { $r.u8($f)? };
    (@read $r:ident, u16, $f:expr) => { $r.u16($f)? };
    (@read $r:ident, u32, $f:expr) => { $r.u32($f)? };
    (@read $r:ident, u64, $f:expr) => { $r.u64($f)? };
    (@read $r:ident, bool, $f:expr) => { $r.u8($f)? != 0 };
    (@write $o:ident, u8, $v:expr) => { $o.put_u8($v) };
    (@write $o:ident, u16, $v:expr) => { $o.put_u16($v) };
    (@write $o:ident, u32, $v:expr) => { $o.put_u32($v) };
    (@write $o:ident, u64, $v:expr) => { $o.put_u64($v) };
    (@write $o:ident, bool, $v:expr) => { $o.put_u8(u8::from($v)) };
}

fixed_info!(
    /// MS-FSCC 2.4.7 FileBasicInformation (class 4), 40 bytes. In SET_INFO a
    /// time of 0 means "leave unchanged" and -1 "stop updating".
    FileBasicInformation, 40, {
        creation_time: u64,
        last_access_time: u64,
        last_write_time: u64,
        change_time: u64,
        file_attributes: u32,
    }, reserved 4
);

/// MS-FSCC 2.4.38 FileStandardInformation (class 5), 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileStandardInformation {
    pub allocation_size: u64,
    pub end_of_file: u64,
    pub number_of_links: u32,
    pub delete_pending: bool,
    pub directory: bool,
}

impl FileStandardInformation {
    pub const SIZE: usize = 24;

    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let v = FileStandardInformation {
            allocation_size: r.u64("AllocationSize")?,
            end_of_file: r.u64("EndOfFile")?,
            number_of_links: r.u32("NumberOfLinks")?,
            delete_pending: r.u8("DeletePending")? != 0,
            directory: r.u8("Directory")? != 0,
        };
        r.u16("Reserved")?;
        Ok(v)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.allocation_size);
        out.put_u64(self.end_of_file);
        out.put_u32(self.number_of_links);
        out.put_u8(u8::from(self.delete_pending));
        out.put_u8(u8::from(self.directory));
        out.put_u16(0);
    }
}

fixed_info!(
    /// MS-FSCC 2.4.20 FileInternalInformation (class 6): the file's 64-bit id.
    FileInternalInformation, 8, { index_number: u64 }
);
fixed_info!(
    /// MS-FSCC 2.4.12 FileEaInformation (class 7).
    FileEaInformation, 4, { ea_size: u32 }
);
fixed_info!(
    /// MS-FSCC 2.4.1 FileAccessInformation (class 8): the open's granted access.
    FileAccessInformation, 4, { access_flags: u32 }
);
fixed_info!(
    /// MS-FSCC 2.4.33 FilePositionInformation (class 14).
    FilePositionInformation, 8, { current_byte_offset: u64 }
);
fixed_info!(
    /// MS-FSCC 2.4.24 FileModeInformation (class 16).
    FileModeInformation, 4, { mode: u32 }
);
fixed_info!(
    /// MS-FSCC 2.4.3 FileAlignmentInformation (class 17).
    FileAlignmentInformation, 4, { alignment_requirement: u32 }
);
fixed_info!(
    /// MS-FSCC 2.4.28 FileNetworkOpenInformation (class 34), 56 bytes.
    FileNetworkOpenInformation, 56, {
        creation_time: u64,
        last_access_time: u64,
        last_write_time: u64,
        change_time: u64,
        allocation_size: u64,
        end_of_file: u64,
        file_attributes: u32,
    }, reserved 4
);
fixed_info!(
    /// MS-FSCC 2.4.6 FileAttributeTagInformation (class 35).
    FileAttributeTagInformation, 8, { file_attributes: u32, reparse_tag: u32 }
);
fixed_info!(
    /// MS-FSCC 2.4.13 FileEndOfFileInformation (class 20, SET_INFO).
    FileEndOfFileInformation, 8, { end_of_file: u64 }
);
fixed_info!(
    /// MS-FSCC 2.4.4 FileAllocationInformation (class 19, SET_INFO).
    FileAllocationInformation, 8, { allocation_size: u64 }
);
fixed_info!(
    /// MS-FSCC 2.4.11 FileDispositionInformation (class 13, SET_INFO).
    FileDispositionInformation, 1, { delete_pending: bool }
);
fixed_info!(
    /// MS-FSCC 2.4.11.2 FileDispositionInformationEx (class 64, SET_INFO):
    /// FILE_DISPOSITION_DELETE (1), _POSIX_SEMANTICS (2), ...
    FileDispositionInformationEx, 4, { flags: u32 }
);
fixed_info!(
    /// MS-FSCC 2.5.8 FileFsSizeInformation (class 3), 24 bytes.
    FileFsSizeInformation, 24, {
        total_allocation_units: u64,
        available_allocation_units: u64,
        sectors_per_allocation_unit: u32,
        bytes_per_sector: u32,
    }
);
fixed_info!(
    /// MS-FSCC 2.5.4 FileFsFullSizeInformation (class 7), 32 bytes.
    FileFsFullSizeInformation, 32, {
        total_allocation_units: u64,
        caller_available_allocation_units: u64,
        actual_available_allocation_units: u64,
        sectors_per_allocation_unit: u32,
        bytes_per_sector: u32,
    }
);
fixed_info!(
    /// MS-FSCC 2.5.10 FileFsDeviceInformation (class 4): FILE_DEVICE_DISK (7)
    /// and characteristics bits.
    FileFsDeviceInformation, 8, { device_type: u32, characteristics: u32 }
);
fixed_info!(
    /// MS-FSCC 2.5.7 FileFsSectorSizeInformation (class 11), 28 bytes.
    FileFsSectorSizeInformation, 28, {
        logical_bytes_per_sector: u32,
        physical_bytes_per_sector_for_atomicity: u32,
        physical_bytes_per_sector_for_performance: u32,
        file_system_effective_physical_bytes_per_sector_for_atomicity: u32,
        flags: u32,
        byte_offset_for_sector_alignment: u32,
        byte_offset_for_partition_alignment: u32,
    }
);

/// Reads a u32 length and that many bytes of UTF-16LE.
fn read_name<'a>(r: &mut Reader<'a>, field: &'static str) -> Result<Utf16<'a>, DecodeError> {
    let len = r.u32("FileNameLength")? as usize;
    Utf16::from_wire(r.bytes(len, field)?, field)
}

fn write_name(name: &Utf16<'_>, out: &mut Vec<u8>) {
    out.put_u32(len_u32(name.byte_len(), "FileNameLength"));
    name.write(out);
}

/// MS-FSCC 2.4.26 FileNameInformation (class 9), also the layout of
/// 2.4.5 FileAlternateNameInformation (class 21) and
/// FileNormalizedNameInformation (class 48).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileNameInformation<'a> {
    pub file_name: Utf16<'a>,
}

/// MS-FSCC 2.4.5 FileAlternateNameInformation (class 21): the 8.3 name.
pub type FileAlternateNameInformation<'a> = FileNameInformation<'a>;

impl<'a> FileNameInformation<'a> {
    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        Ok(FileNameInformation { file_name: read_name(&mut Reader::new(buf), "FileName")? })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        write_name(&self.file_name, out);
    }
}

/// MS-FSCC 2.4.2 FileAllInformation (class 18): the basic, standard,
/// internal, EA, access, position, mode, alignment and name information in
/// one structure (100 bytes + name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAllInformation<'a> {
    pub basic: FileBasicInformation,
    pub standard: FileStandardInformation,
    pub internal: FileInternalInformation,
    pub ea: FileEaInformation,
    pub access: FileAccessInformation,
    pub position: FilePositionInformation,
    pub mode: FileModeInformation,
    pub alignment: FileAlignmentInformation,
    pub name: FileNameInformation<'a>,
}

impl<'a> FileAllInformation<'a> {
    pub const FIXED_SIZE: usize = 100;

    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let mut part = |len| r.bytes(len, "FileAllInformation");
        let basic = FileBasicInformation::decode(part(40)?)?;
        let standard = FileStandardInformation::decode(part(24)?)?;
        let internal = FileInternalInformation::decode(part(8)?)?;
        let ea = FileEaInformation::decode(part(4)?)?;
        let access = FileAccessInformation::decode(part(4)?)?;
        let position = FilePositionInformation::decode(part(8)?)?;
        let mode = FileModeInformation::decode(part(4)?)?;
        let alignment = FileAlignmentInformation::decode(part(4)?)?;
        let name = FileNameInformation { file_name: read_name(&mut r, "FileName")? };
        Ok(FileAllInformation { basic, standard, internal, ea, access, position, mode, alignment, name })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        self.basic.encode(out);
        self.standard.encode(out);
        self.internal.encode(out);
        self.ea.encode(out);
        self.access.encode(out);
        self.position.encode(out);
        self.mode.encode(out);
        self.alignment.encode(out);
        self.name.encode(out);
    }
}

/// MS-FSCC 2.4.34.2 FileRenameInformation for SMB2 (class 10), also the
/// layout of 2.4.21.2 FileLinkInformation for SMB2 (class 11).
/// FileName is the target path relative to the share root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileRenameInformation<'a> {
    pub replace_if_exists: bool,
    /// RootDirectory: MUST be 0 for SMB2.
    pub root_directory: u64,
    pub file_name: Utf16<'a>,
}

/// MS-FSCC 2.4.21.2 FileLinkInformation for SMB2 (class 11).
pub type FileLinkInformation<'a> = FileRenameInformation<'a>;

impl<'a> FileRenameInformation<'a> {
    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let replace_if_exists = r.u8("ReplaceIfExists")? != 0;
        r.skip(7, "Reserved")?;
        let root_directory = r.u64("RootDirectory")?;
        let file_name = read_name(&mut r, "FileName")?;
        if file_name.is_empty() {
            return Err(DecodeError::InvalidValue { field: "FileNameLength" });
        }
        Ok(FileRenameInformation { replace_if_exists, root_directory, file_name })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(u8::from(self.replace_if_exists));
        out.put_zeros(7);
        out.put_u64(self.root_directory);
        write_name(&self.file_name, out);
    }
}

/// MS-FSCC 2.5.9 FileFsVolumeInformation (class 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFsVolumeInformation<'a> {
    pub volume_creation_time: FileTime,
    pub volume_serial_number: u32,
    pub supports_objects: bool,
    pub volume_label: Utf16<'a>,
}

impl<'a> FileFsVolumeInformation<'a> {
    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let volume_creation_time = r.u64("VolumeCreationTime")?;
        let volume_serial_number = r.u32("VolumeSerialNumber")?;
        let label_len = r.u32("VolumeLabelLength")? as usize;
        let supports_objects = r.u8("SupportsObjects")? != 0;
        r.u8("Reserved")?;
        let volume_label = Utf16::from_wire(r.bytes(label_len, "VolumeLabel")?, "VolumeLabel")?;
        Ok(FileFsVolumeInformation { volume_creation_time, volume_serial_number, supports_objects, volume_label })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.volume_creation_time);
        out.put_u32(self.volume_serial_number);
        out.put_u32(len_u32(self.volume_label.byte_len(), "VolumeLabelLength"));
        out.put_u8(u8::from(self.supports_objects));
        out.put_u8(0);
        self.volume_label.write(out);
    }
}

/// MS-FSCC 2.5.1 FileFsAttributeInformation (class 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFsAttributeInformation<'a> {
    /// FILE_CASE_SENSITIVE_SEARCH (1), FILE_CASE_PRESERVED_NAMES (2),
    /// FILE_UNICODE_ON_DISK (4), FILE_PERSISTENT_ACLS (8), ...
    pub file_system_attributes: u32,
    pub maximum_component_name_length: u32,
    pub file_system_name: Utf16<'a>,
}

impl<'a> FileFsAttributeInformation<'a> {
    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let file_system_attributes = r.u32("FileSystemAttributes")?;
        let maximum_component_name_length = r.u32("MaximumComponentNameLength")?;
        let file_system_name = read_name(&mut r, "FileSystemName")?;
        Ok(FileFsAttributeInformation { file_system_attributes, maximum_component_name_length, file_system_name })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.file_system_attributes);
        out.put_u32(self.maximum_component_name_length);
        write_name(&self.file_system_name, out);
    }
}

/// duet's limit on entries decoded from one chained buffer (Invariant 5).
pub const MAX_CHAINED_ENTRIES: usize = 65_536;

/// Walks a NextEntryOffset chain: yields each entry's bytes (to the next
/// entry or the end). NextEntryOffset must be a multiple of 8 (MS-FSCC:
/// entries are 8-byte aligned) and at least `min_entry`.
fn chain<'a>(buf: &'a [u8], min_entry: usize) -> impl Iterator<Item = Result<&'a [u8], DecodeError>> + 'a {
    let mut start = Some(0usize);
    let mut count = 0usize;
    std::iter::from_fn(move || {
        let s = start?;
        let fail = |e| -> Option<Result<&'a [u8], DecodeError>> { Some(Err(e)) };
        count += 1;
        if count > MAX_CHAINED_ENTRIES {
            start = None;
            return fail(DecodeError::LimitExceeded { field: "chained entries" });
        }
        let rest = buf.get(s..).unwrap_or(&[]);
        let next = match Reader::new(rest).u32("NextEntryOffset") {
            Ok(n) => n as usize,
            Err(e) => {
                start = None;
                return fail(e);
            }
        };
        if next == 0 {
            start = None;
            return Some(Ok(rest));
        }
        if next & 7 != 0 || next < min_entry || next > rest.len() {
            start = None;
            return fail(DecodeError::InvalidValue { field: "NextEntryOffset" });
        }
        start = Some(s + next);
        Some(Ok(rest.get(..next).unwrap_or(&[])))
    })
}

/// Appends entries chained by NextEntryOffset: each entry starts 8-aligned
/// and NextEntryOffset of the previous one is set when the next is added.
/// `limit` is the OutputBufferLength of the request: an entry that would
/// not fit is refused.
#[derive(Debug)]
pub struct ChainWriter {
    start: usize,
    limit: usize,
    last: Option<usize>,
    count: usize,
}

impl ChainWriter {
    /// Starts a chain at the current end of `out`.
    pub fn new(out: &[u8], limit: usize) -> Self {
        ChainWriter { start: out.len(), limit, last: None, count: 0 }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Appends one entry, written by `write` (which must start with a zero
    /// NextEntryOffset). Returns false, leaving `out` as it was, if the
    /// entry does not fit in the limit.
    pub fn push(&mut self, out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) -> bool {
        let before = out.len();
        if self.last.is_some() {
            out.pad_to(self.start, 8);
        }
        let entry = out.len();
        write(out);
        if out.len() - self.start > self.limit {
            out.truncate(before);
            return false;
        }
        if let Some(prev) = self.last {
            let next = len_u32(entry - prev, "NextEntryOffset");
            // `prev` is the start of an entry appended by this writer; every
            // entry begins with its 4-byte NextEntryOffset.
            out[prev..prev + 4].copy_from_slice(&next.to_le_bytes());
        }
        self.last = Some(entry);
        self.count += 1;
        true
    }
}

/// MS-FSCC 2.4.40 FileStreamInformation (class 22): one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStreamInformation<'a> {
    pub stream_size: u64,
    pub stream_allocation_size: u64,
    /// "::$DATA" for the unnamed stream, ":name:$DATA" for named ones.
    pub stream_name: Utf16<'a>,
}

impl<'a> FileStreamInformation<'a> {
    const FIXED: usize = 24;

    pub fn decode_list(buf: &'a [u8]) -> Result<Vec<Self>, DecodeError> {
        chain(buf, Self::FIXED)
            .map(|entry| {
                let mut r = Reader::new(entry?);
                r.u32("NextEntryOffset")?;
                let name_len = r.u32("StreamNameLength")? as usize;
                let stream_size = r.u64("StreamSize")?;
                let stream_allocation_size = r.u64("StreamAllocationSize")?;
                let stream_name = Utf16::from_wire(r.bytes(name_len, "StreamName")?, "StreamName")?;
                Ok(FileStreamInformation { stream_size, stream_allocation_size, stream_name })
            })
            .collect()
    }

    /// Appends one entry (NextEntryOffset 0); use with [`ChainWriter`].
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(0);
        out.put_u32(len_u32(self.stream_name.byte_len(), "StreamNameLength"));
        out.put_u64(self.stream_size);
        out.put_u64(self.stream_allocation_size);
        self.stream_name.write(out);
    }

    /// Appends a whole list.
    pub fn encode_list(list: &[Self], out: &mut Vec<u8>) {
        let mut w = ChainWriter::new(out, usize::MAX);
        for s in list {
            w.push(out, |o| s.encode(o));
        }
    }
}

/// The directory enumeration classes of QUERY_DIRECTORY. Each lays out a
/// prefix of the same fields (MS-FSCC):
///
/// | class | section | fixed bytes | fields after FileNameLength |
/// |---|---|---|---|
/// | FileDirectoryInformation (1) | 2.4.10 | 64 | — |
/// | FileFullDirectoryInformation (2) | 2.4.14 | 68 | EaSize |
/// | FileBothDirectoryInformation (3) | 2.4.8 | 94 | EaSize, ShortNameLength, Reserved, ShortName\[24\] |
/// | FileIdBothDirectoryInformation (37) | 2.4.17 | 104 | EaSize, ShortNameLength, Reserved1, ShortName\[24\], Reserved2, FileId |
/// | FileIdFullDirectoryInformation (38) | 2.4.18 | 80 | EaSize, Reserved, FileId |
/// | FileNamesInformation (12) | 2.4.27 | 12 | (only NextEntryOffset, FileIndex, FileNameLength) |
///
/// All but FileNames start with NextEntryOffset, FileIndex, the four times,
/// EndOfFile, AllocationSize, FileAttributes, FileNameLength.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirectoryInfoClass {
    Directory,
    FullDirectory,
    BothDirectory,
    IdBothDirectory,
    IdFullDirectory,
    Names,
}

impl DirectoryInfoClass {
    pub fn from_class(class: u8) -> Option<Self> {
        Some(match class {
            info_class::DIRECTORY => Self::Directory,
            info_class::FULL_DIRECTORY => Self::FullDirectory,
            info_class::BOTH_DIRECTORY => Self::BothDirectory,
            info_class::ID_BOTH_DIRECTORY => Self::IdBothDirectory,
            info_class::ID_FULL_DIRECTORY => Self::IdFullDirectory,
            info_class::NAMES => Self::Names,
            _ => return None,
        })
    }

    pub fn class(self) -> u8 {
        match self {
            Self::Directory => info_class::DIRECTORY,
            Self::FullDirectory => info_class::FULL_DIRECTORY,
            Self::BothDirectory => info_class::BOTH_DIRECTORY,
            Self::IdBothDirectory => info_class::ID_BOTH_DIRECTORY,
            Self::IdFullDirectory => info_class::ID_FULL_DIRECTORY,
            Self::Names => info_class::NAMES,
        }
    }

    /// Bytes before FileName.
    pub fn fixed_size(self) -> usize {
        match self {
            Self::Directory => 64,
            Self::FullDirectory => 68,
            Self::BothDirectory => 94,
            Self::IdBothDirectory => 104,
            Self::IdFullDirectory => 80,
            Self::Names => 12,
        }
    }
}

/// One directory entry, holding the union of the fields of every
/// [`DirectoryInfoClass`]; a class encodes and decodes only its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryEntry<'a> {
    pub file_index: u32,
    pub creation_time: FileTime,
    pub last_access_time: FileTime,
    pub last_write_time: FileTime,
    pub change_time: FileTime,
    pub end_of_file: u64,
    pub allocation_size: u64,
    pub file_attributes: u32,
    pub ea_size: u32,
    /// The 8.3 name, UTF-16LE, at most 24 bytes (Both classes).
    pub short_name: Utf16<'a>,
    /// The file's 64-bit id (Id classes).
    pub file_id: u64,
    pub file_name: Utf16<'a>,
}

impl Default for DirectoryEntry<'_> {
    fn default() -> Self {
        DirectoryEntry {
            file_index: 0,
            creation_time: 0,
            last_access_time: 0,
            last_write_time: 0,
            change_time: 0,
            end_of_file: 0,
            allocation_size: 0,
            file_attributes: 0,
            ea_size: 0,
            short_name: Utf16::EMPTY,
            file_id: 0,
            file_name: Utf16::EMPTY,
        }
    }
}

impl<'a> DirectoryEntry<'a> {
    /// Decodes every entry of a QUERY_DIRECTORY output buffer.
    pub fn decode_list(class: DirectoryInfoClass, buf: &'a [u8]) -> Result<Vec<Self>, DecodeError> {
        chain(buf, class.fixed_size()).map(|entry| Self::decode(class, entry?)).collect()
    }

    /// Decodes one entry (NextEntryOffset is read and ignored).
    pub fn decode(class: DirectoryInfoClass, entry: &'a [u8]) -> Result<Self, DecodeError> {
        use DirectoryInfoClass::*;
        let mut r = Reader::new(entry);
        let mut e = DirectoryEntry::default();
        r.u32("NextEntryOffset")?;
        e.file_index = r.u32("FileIndex")?;
        if class != Names {
            e.creation_time = r.u64("CreationTime")?;
            e.last_access_time = r.u64("LastAccessTime")?;
            e.last_write_time = r.u64("LastWriteTime")?;
            e.change_time = r.u64("ChangeTime")?;
            e.end_of_file = r.u64("EndOfFile")?;
            e.allocation_size = r.u64("AllocationSize")?;
            e.file_attributes = r.u32("FileAttributes")?;
        }
        let name_len = r.u32("FileNameLength")? as usize;
        if class != Directory && class != Names {
            e.ea_size = r.u32("EaSize")?;
        }
        if class == BothDirectory || class == IdBothDirectory {
            let short_len = usize::from(r.u8("ShortNameLength")?);
            r.u8("Reserved1")?;
            let short = r.bytes(24, "ShortName")?;
            let short = short.get(..short_len).ok_or(DecodeError::InvalidValue { field: "ShortNameLength" })?;
            e.short_name = Utf16::from_wire(short, "ShortName")?;
        }
        if class == IdBothDirectory {
            r.u16("Reserved2")?;
        }
        if class == IdFullDirectory {
            r.u32("Reserved")?;
        }
        if class == IdBothDirectory || class == IdFullDirectory {
            e.file_id = r.u64("FileId")?;
        }
        e.file_name = Utf16::from_wire(r.bytes(name_len, "FileName")?, "FileName")?;
        Ok(e)
    }

    /// Bytes this entry takes in `class`, without trailing alignment.
    pub fn encoded_len(&self, class: DirectoryInfoClass) -> usize {
        class.fixed_size() + self.file_name.byte_len()
    }

    /// Appends one entry with NextEntryOffset 0; chain entries with
    /// [`ChainWriter`] (or [`DirectoryEntry::encode_list`]).
    pub fn encode(&self, class: DirectoryInfoClass, out: &mut Vec<u8>) {
        use DirectoryInfoClass::*;
        out.put_u32(0);
        out.put_u32(self.file_index);
        if class != Names {
            out.put_u64(self.creation_time);
            out.put_u64(self.last_access_time);
            out.put_u64(self.last_write_time);
            out.put_u64(self.change_time);
            out.put_u64(self.end_of_file);
            out.put_u64(self.allocation_size);
            out.put_u32(self.file_attributes);
        }
        out.put_u32(len_u32(self.file_name.byte_len(), "FileNameLength"));
        if class != Directory && class != Names {
            out.put_u32(self.ea_size);
        }
        if class == BothDirectory || class == IdBothDirectory {
            let start = out.len();
            let short_len = self.short_name.byte_len().min(24);
            out.put_u8(short_len as u8);
            out.put_u8(0);
            self.short_name.write(out);
            // ShortName is a fixed 24-byte field; a longer name is a caller bug
            // and is cut to fit.
            out.truncate(start + 2 + short_len);
            out.put_zeros(24 - short_len);
        }
        if class == IdBothDirectory {
            out.put_u16(0);
        }
        if class == IdFullDirectory {
            out.put_u32(0);
        }
        if class == IdBothDirectory || class == IdFullDirectory {
            out.put_u64(self.file_id);
        }
        self.file_name.write(out);
    }

    /// Appends entries until one does not fit in `limit` bytes; returns how
    /// many were written.
    pub fn encode_list(class: DirectoryInfoClass, list: &[Self], limit: usize, out: &mut Vec<u8>) -> usize {
        let mut w = ChainWriter::new(out, limit);
        for e in list {
            if !w.push(out, |o| e.encode(class, o)) {
                break;
            }
        }
        w.count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> DirectoryEntry<'_> {
        DirectoryEntry {
            file_index: 0,
            creation_time: 1,
            last_access_time: 2,
            last_write_time: 3,
            change_time: 4,
            end_of_file: 5,
            allocation_size: 4096,
            file_attributes: file_attributes::ARCHIVE,
            ea_size: 0,
            short_name: Utf16::Str("SHORT~1"),
            file_id: 99,
            file_name: Utf16::Str(name),
        }
    }

    #[test]
    fn every_directory_class_round_trips_with_alignment() {
        use DirectoryInfoClass::*;
        for class in [Directory, FullDirectory, BothDirectory, IdBothDirectory, IdFullDirectory, Names] {
            let list = [entry("a"), entry("bcd"), entry("efghijk")];
            let mut out = Vec::new();
            assert_eq!(DirectoryEntry::encode_list(class, &list, usize::MAX, &mut out), 3);
            let back = DirectoryEntry::decode_list(class, &out).unwrap();
            assert_eq!(back.len(), 3);
            for (a, b) in list.iter().zip(&back) {
                assert_eq!(a.file_name, b.file_name);
                let mut x = Vec::new();
                let mut y = Vec::new();
                a.encode(class, &mut x);
                b.encode(class, &mut y);
                assert_eq!(x, y, "{class:?}");
            }
            let first_next = u32::from_le_bytes([out[0], out[1], out[2], out[3]]) as usize;
            assert_eq!(first_next % 8, 0);
        }
    }

    #[test]
    fn chain_writer_respects_the_limit() {
        let class = DirectoryInfoClass::IdFullDirectory;
        let list = [entry("one"), entry("two"), entry("three")];
        let mut out = vec![0xAA; 3];
        let n = DirectoryEntry::encode_list(class, &list, 80 + 6 + 2 + 80 + 6, &mut out);
        assert_eq!(n, 2);
        assert_eq!(out.len(), 3 + 88 + 86);
    }

    #[test]
    fn all_information_round_trips() {
        let all = FileAllInformation {
            basic: FileBasicInformation { creation_time: 1, file_attributes: 0x20, ..Default::default() },
            standard: FileStandardInformation { end_of_file: 10, number_of_links: 1, ..Default::default() },
            internal: FileInternalInformation { index_number: 7 },
            ea: FileEaInformation::default(),
            access: FileAccessInformation { access_flags: 0x12019f },
            position: FilePositionInformation::default(),
            mode: FileModeInformation::default(),
            alignment: FileAlignmentInformation::default(),
            name: FileNameInformation { file_name: Utf16::Str("\\dir\\f") },
        };
        let mut out = Vec::new();
        all.encode(&mut out);
        assert_eq!(out.len(), FileAllInformation::FIXED_SIZE + 12);
        assert_eq!(FileAllInformation::decode(&out), Ok(all));
    }
}

/// MS-FSCC 2.4.15 FILE_FULL_EA_INFORMATION: a chained list of extended
/// attributes (NextEntryOffset, Flags, EaNameLength, EaValueLength, the
/// name with a NUL, the value; entries 4-byte aligned).
pub mod full_ea {
    use super::DecodeError;

    /// The (name, value) pairs of a list. Names must be 1..255 bytes of
    /// ASCII without NUL.
    pub fn decode(buf: &[u8]) -> Result<Vec<(String, Vec<u8>)>, DecodeError> {
        let mut out = Vec::new();
        let mut at = 0usize;
        loop {
            let head = buf.get(at..at + 8).ok_or(DecodeError::Truncated { field: "FILE_FULL_EA_INFORMATION" })?;
            let next = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let name_len = usize::from(head[5]);
            let value_len = usize::from(u16::from_le_bytes([head[6], head[7]]));
            let name = buf
                .get(at + 8..at + 8 + name_len)
                .ok_or(DecodeError::Truncated { field: "EaName" })?;
            if name.is_empty() || !name.iter().all(|b| b.is_ascii() && *b != 0) {
                return Err(DecodeError::InvalidValue { field: "EaName" });
            }
            let value_at = at + 8 + name_len + 1;
            let value = buf
                .get(value_at..value_at + value_len)
                .ok_or(DecodeError::Truncated { field: "EaValue" })?;
            out.push((String::from_utf8_lossy(name).into_owned(), value.to_vec()));
            if out.len() > 4096 {
                return Err(DecodeError::LimitExceeded { field: "EA entries" });
            }
            if next == 0 {
                return Ok(out);
            }
            if next < 8 || next % 4 != 0 {
                return Err(DecodeError::InvalidValue { field: "NextEntryOffset" });
            }
            at = at.checked_add(next).ok_or(DecodeError::BadBuffer { field: "NextEntryOffset" })?;
        }
    }

    fn entry_len(name: &str, value: &[u8]) -> usize {
        8 + name.len() + 1 + value.len()
    }

    /// The list's wire form.
    pub fn encode(eas: &[(String, Vec<u8>)], out: &mut Vec<u8>) {
        for (i, (name, value)) in eas.iter().enumerate() {
            let len = entry_len(name, value);
            let padded = if i + 1 == eas.len() { 0 } else { len.div_ceil(4) * 4 };
            out.extend_from_slice(&(padded as u32).to_le_bytes());
            out.push(0);
            out.push(name.len().min(255) as u8);
            out.extend_from_slice(&(value.len().min(65535) as u16).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.push(0);
            out.extend_from_slice(value);
            if padded > len {
                out.resize(out.len() + padded - len, 0);
            }
        }
    }

    /// EaSize as FileEaInformation and the directory classes report it:
    /// the bytes the full list takes.
    pub fn size(eas: &[(String, Vec<u8>)]) -> u32 {
        let mut v = Vec::new();
        encode(eas, &mut v);
        v.len() as u32
    }
}
