//! A region of memory shared by the processes of one machine: a file (under `/dev/shm` by default)
//! mapped into each. The first process creates it, the others attach to it, whatever the order and the
//! start method (fork, spawn, separate servers).
//!
//! Safety of the file: it is created exclusively (`O_EXCL`) with mode 0600; attaching refuses a
//! symbolic link (`O_NOFOLLOW`), anything but a regular file, a file owned by another user or open to
//! others, and a folder other users may write to without the sticky bit (any local user could otherwise
//! reset everyone's limits). Its whole size is reserved when it is made (`posix_fallocate`), so a full
//! tmpfs is an error then, never a `SIGBUS` on a later write.
//!
//! The header (the first 64 bytes) says what the region holds: a magic, the layout version, the size and
//! a checksum of the three, written as soon as the file is sized, then a ready flag the creator sets
//! last (with release ordering) once the contents are made, so that a process attaching meanwhile waits
//! for it rather than reading half a region.
//!
//! A file at the path is removed only when it proves to be an unfinished region of this library whose
//! creator is gone (its header whole, of this layout, its size the header's, the creator's `flock`
//! free), or when it is empty and unlocked after the wait (a creator killed before sizing it: an empty
//! file holds nothing to lose). Anything else is refused and left as it is.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};

const MAGIC: u64 = u64::from_le_bytes(*b"rkregion");
/// Bytes before the region's contents.
pub const HEADER_BYTES: usize = 64;
/// How long an attaching process waits for the creator to finish the region.
const READY_WITHIN: Duration = Duration::from_secs(2);
/// How long after that it keeps trying the creator's lock: another attaching process holds it for the
/// instant it takes to remove an abandoned file.
const LOCK_GRACE: Duration = Duration::from_millis(500);

/// The header, at the start of the mapping.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    layout: AtomicU32,
    ready: AtomicU32,
    size: AtomicU64,
    /// [`checksum`] of magic, layout and size: tells overwritten bytes from another version's header.
    sum: AtomicU64,
    /// The layer above's checksum of its own fixed meta ([`Region::set_meta_sum`]).
    meta_sum: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

/// A 64-bit FNV-1a hash of `bytes`, for checksums kept in a region: the same in every build (ahash's
/// output depends on the CPU features a build targets, so two builds could disagree on a file).
#[must_use]
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

fn header_sum(magic: u64, layout: u32, size: u64) -> u64 {
    let mut bytes = [0u8; 20];
    bytes[..8].copy_from_slice(&magic.to_ne_bytes());
    bytes[8..12].copy_from_slice(&layout.to_ne_bytes());
    bytes[12..].copy_from_slice(&size.to_ne_bytes());
    checksum(&bytes)
}

/// Whether the file at a region's path is still the one mapped ([`Region::still_at_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtPath {
    /// The path names the mapped file, as long as the mapping.
    Ours,
    /// Nothing is at the path: the file was removed (processes that mapped it still share it, those
    /// starting now make another).
    Removed,
    /// The path names another file: the region was removed and made anew, or a file was moved over it.
    Replaced,
    /// The mapped file is `len` bytes, shorter than the mapping: touching a page past its end raises
    /// `SIGBUS`.
    Truncated { len: u64 },
}

/// A mapped region and whether this process created it.
pub struct Region {
    map: MmapRaw,
    /// Kept open: its identity tells whether the path still names it ([`Region::still_at_path`]).
    file: File,
    path: PathBuf,
    created: bool,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").field("path", &self.path).field("size", &self.map.len()).finish_non_exhaustive()
    }
}

fn io_error(path: &Path, what: &str, e: &std::io::Error) -> Error {
    Error::value("path", format!("cannot {what} the shared region {}: {e}", path.display()))
}

fn refusal(path: &Path, why: &str) -> Error {
    Error::value("path", format!("refusing the shared region {}: {why}", path.display()))
}

impl Region {
    /// Creates the region at `path` with `size` bytes of contents (zeroed) under `layout`, or attaches
    /// to the one another process made. The creator runs `init` on the contents before any other
    /// process may attach.
    ///
    /// # Errors
    /// The file cannot be made or opened; it is a symbolic link, not a regular file, owned by another
    /// user or open to others, in a folder others may write to (without the sticky bit); not a region
    /// of this library, its header corrupt, its length not its header's size; no room for `size` bytes
    /// (a full tmpfs); another layout or size; what `init` returns.
    pub fn open(path: &Path, size: usize, layout: u32, init: impl FnOnce(&Self) -> Result<()>) -> Result<Self> {
        let total = HEADER_BYTES.checked_add(size).ok_or_else(|| Error::value("size", "too large"))?;
        check_folder(path)?;
        let created = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path);
        match created {
            Ok(file) => {
                // Taken at once and held until the region is ready: a process that finds the file
                // unfinished and this lock free knows its creator died making it.
                // SAFETY: a valid open file descriptor.
                unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
                Self::create(path, file, total, layout, init)
            }
            // Of any size: the layer above reads the numbers its creator recorded.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => match Self::attach(path, None, layout, true)? {
                Some(region) => Ok(region),
                // Its creator died before finishing it and the file is gone, or the path names another
                // file now: make it or attach to it anew.
                None => Self::open(path, size, layout, init),
            },
            Err(e) => Err(io_error(path, "create", &e)),
        }
    }

    fn create(
        path: &Path,
        file: File,
        total: usize,
        layout: u32,
        init: impl FnOnce(&Self) -> Result<()>,
    ) -> Result<Self> {
        // A region that could not be made whole must not be attached to. Removed while the file (and
        // its lock) is still held, so that the path cannot name another process's file by then.
        let removed = |e: Error| {
            let _ = std::fs::remove_file(path);
            e
        };
        reserve(path, &file, total).map_err(removed)?;
        // The file is ours and its size fixed; every process maps it shared and reads and writes it
        // through atomics or under the region's own locks.
        let map = MmapOptions::new().map_raw(&file).map_err(|e| removed(io_error(path, "map", &e)))?;
        let region = Self { map, file, path: path.to_owned(), created: true };
        let header = region.header();
        let size = total as u64;
        // Written before the slow part (`init`), so that a file left by a creator killed from now on
        // proves to be this library's unfinished region, which the next process may remove.
        header.layout.store(layout, Ordering::Relaxed);
        header.size.store(size, Ordering::Relaxed);
        header.sum.store(header_sum(MAGIC, layout, size), Ordering::Relaxed);
        header.magic.store(MAGIC, Ordering::Release);
        init(&region).map_err(removed)?;
        header.ready.store(1, Ordering::Release);
        // SAFETY: a valid open file descriptor; the region is ready, the lock has done its work (the
        // file stays open in the region, which would otherwise keep it).
        unsafe { libc::flock(region.file.as_raw_fd(), libc::LOCK_UN) };
        Ok(region)
    }

    /// Maps the region at `path` that another process made, without writing to it or taking its locks
    /// (for looking at a running service's states). Its size is the file's.
    ///
    /// # Errors
    /// As [`Region::open`], for an existing region; its creator died before finishing it.
    pub fn inspect(path: &Path, layout: u32) -> Result<Self> {
        // `None` means the path named another file by the time it was looked at: look again, a few times.
        for _ in 0..3 {
            if let Some(region) = Self::attach(path, None, layout, false)? {
                return Ok(region);
            }
        }
        Err(refusal(path, "it keeps being replaced"))
    }

    /// The region at `path`, once its creator has finished it; `None` when the path no longer names the
    /// file opened, or when the creator died before finishing it and `write` (the file is then removed,
    /// for the caller to make it anew).
    fn attach(path: &Path, total: Option<usize>, layout: u32, write: bool) -> Result<Option<Self>> {
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            // No following a link; no waiting for a writer to open a FIFO (refused below).
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| io_error(path, "open", &e))?;
        let meta = file.metadata().map_err(|e| io_error(path, "inspect", &e))?;
        if !meta.file_type().is_file() {
            return Err(refusal(path, "not a regular file"));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Err(refusal(path, &format!("owned by user {}, not by this process's user {me}", meta.uid())));
        }
        if meta.mode() & 0o077 != 0 {
            let why = format!("its mode {:o} lets other users read or write it (want 600)", meta.mode() & 0o777);
            return Err(refusal(path, &why));
        }
        let started = Instant::now();
        loop {
            let seen = Seen::read(&file).map_err(|e| io_error(path, "read", &e))?;
            if seen.ready == 1 && seen.len >= HEADER_BYTES as u64 {
                let options = MmapOptions::new();
                let map = if write { options.map_raw(&file) } else { options.map_raw_read_only(&file) }
                    .map_err(|e| io_error(path, "map", &e))?;
                let region = Self { map, file, path: path.to_owned(), created: false };
                return region.check(total, layout).map(Some);
            }
            if seen.foreign() {
                return Err(refusal(path, "it is not a ratekeeper region"));
            }
            if started.elapsed() > READY_WITHIN {
                if !same_file(path, &meta) {
                    return Ok(None);
                }
                if try_lock(&file) {
                    // The creator is gone: what the file holds now is all it will ever hold.
                    let seen = Seen::read(&file).map_err(|e| io_error(path, "read", &e))?;
                    if seen.ready == 1 {
                        unlock(&file);
                        continue;
                    }
                    seen.unfinished(layout).map_err(|why| refusal(path, &why))?;
                    if !write {
                        let why = if seen.len == 0 { "it is empty" } else { "its creator died before finishing it" };
                        return Err(refusal(path, why));
                    }
                    // Removed under the lock: another process removing it too waits for it, then
                    // finds the path naming another file (or none) and leaves that alone.
                    if same_file(path, &meta) {
                        std::fs::remove_file(path).map_err(|e| io_error(path, "remove the abandoned", &e))?;
                    }
                    return Ok(None);
                }
                if started.elapsed() > READY_WITHIN + LOCK_GRACE {
                    return Err(refusal(path, &format!("its creator did not finish it within {READY_WITHIN:?}")));
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn check(self, total: Option<usize>, layout: u32) -> Result<Self> {
        if self.map.len() < HEADER_BYTES {
            // Cut below a header since it was read: not a header to read through the mapping.
            let why = format!("the file is {} bytes, less than a region's header: it was truncated", self.map.len());
            return Err(refusal(&self.path, &why));
        }
        let header = self.header();
        // Read after `ready` (acquire): the header and contents the creator wrote before it are seen.
        let _ = header.ready.load(Ordering::Acquire);
        let len = self.file.metadata().map_err(|e| io_error(&self.path, "inspect", &e))?.len();
        let seen = Seen {
            magic: header.magic.load(Ordering::Relaxed),
            layout: header.layout.load(Ordering::Relaxed),
            ready: 1,
            size: header.size.load(Ordering::Relaxed),
            sum: header.sum.load(Ordering::Relaxed),
            len,
        };
        seen.verify(layout).map_err(|why| refusal(&self.path, &why))?;
        if self.map.len() as u64 != len {
            let why = format!(
                "the file was {} bytes when mapped, {len} now: it is being truncated or extended",
                self.map.len()
            );
            return Err(refusal(&self.path, &why));
        }
        match total {
            Some(total) if seen.size != total as u64 => Err(refusal(
                &self.path,
                &format!("it holds {} bytes, this limiter needs {total} (another max_keys made it)", seen.size),
            )),
            _ => Ok(self),
        }
    }

    #[allow(clippy::cast_ptr_alignment)] // a mapping starts on a page boundary
    fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_BYTES long (its size checked before any use) and
        // page-aligned; Header is made of atomics, valid for any bytes.
        unsafe { &*self.map.as_ptr().cast::<Header>() }
    }

    /// Records the layer above's checksum of its own fixed meta in the header, for [`Region::meta_sum`]
    /// to give every process that attaches: only while this process makes the region (in `init`).
    ///
    /// # Errors
    /// The region is ready or another process made it: its header is fixed.
    pub fn set_meta_sum(&self, sum: u64) -> Result<()> {
        let header = self.header();
        if !self.created || header.ready.load(Ordering::Relaxed) != 0 {
            let why = "its header is fixed once it is ready (set_meta_sum belongs in init)";
            return Err(Error::value("path", format!("the shared region {}: {why}", self.path.display())));
        }
        // Published by the ready flag's release.
        header.meta_sum.store(sum, Ordering::Relaxed);
        Ok(())
    }

    /// The checksum [`Region::set_meta_sum`] recorded; 0 if none was.
    #[must_use]
    pub fn meta_sum(&self) -> u64 {
        self.header().meta_sum.load(Ordering::Relaxed)
    }

    /// Whether the path still names the file mapped here, whole: it compares the open file's identity
    /// (device and inode, `fstat`) with what is at the path (`lstat`), and the file's length with the
    /// mapping's. Two system calls, about a microsecond: for every so many decisions, not each one.
    ///
    /// # Errors
    /// The open file or the path cannot be looked at (other than nothing being at the path).
    pub fn still_at_path(&self) -> Result<AtPath> {
        let mine = self.file.metadata().map_err(|e| io_error(&self.path, "inspect", &e))?;
        if mine.len() < self.map.len() as u64 {
            return Ok(AtPath::Truncated { len: mine.len() });
        }
        match std::fs::symlink_metadata(&self.path) {
            Ok(now) if now.ino() == mine.ino() && now.dev() == mine.dev() => Ok(AtPath::Ours),
            Ok(_) => Ok(AtPath::Replaced),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(AtPath::Removed),
            Err(e) => Err(io_error(&self.path, "look at", &e)),
        }
    }

    /// The region's contents, after the header (zeroed when created).
    #[must_use]
    pub fn contents(&self) -> *mut u8 {
        // SAFETY: HEADER_BYTES is within the mapping.
        unsafe { self.map.as_mut_ptr().add(HEADER_BYTES) }
    }

    /// Bytes of contents.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len() - HEADER_BYTES
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this process made the region (rather than attaching to it).
    #[must_use]
    pub const fn created(&self) -> bool {
        self.created
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A header as read from the file (not mapped: the file may be shorter than a header), and the file's
/// length.
#[derive(Debug, Clone, Copy)]
struct Seen {
    magic: u64,
    layout: u32,
    ready: u32,
    size: u64,
    sum: u64,
    len: u64,
}

impl Seen {
    fn read(file: &File) -> std::io::Result<Self> {
        let len = file.metadata()?.len();
        let mut bytes = [0u8; 32];
        let mut read = 0;
        while read < bytes.len() {
            match file.read_at(&mut bytes[read..], read as u64) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let u64_at = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
        let u32_at = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
        Ok(Self { magic: u64_at(0), layout: u32_at(8), ready: u32_at(12), size: u64_at(16), sum: u64_at(24), len })
    }

    /// Whether the file cannot be a region being made, whatever its creator does next: a creator's file
    /// is zeroed until it stores the magic, so each of the first 8 bytes is 0 or the magic's (a read
    /// may catch the store half done).
    fn foreign(&self) -> bool {
        let seen = self.magic.to_ne_bytes();
        let magic = MAGIC.to_ne_bytes();
        seen.iter().zip(magic).any(|(&byte, want)| byte != 0 && byte != want)
    }

    /// Whether a file that nobody is making any more is an unfinished region of this library under
    /// `layout`, and so may be removed: `Err` says why not.
    fn unfinished(&self, layout: u32) -> std::result::Result<(), String> {
        match self.len {
            // A creator killed before sizing the file; a user's empty file is as safe to remove.
            0 => Ok(()),
            len if len < HEADER_BYTES as u64 => Err(format!(
                "it is {len} bytes, less than a region's {HEADER_BYTES}-byte header: not a ratekeeper region"
            )),
            _ if self.magic == 0 && self.sum == 0 && self.size == 0 && self.layout == 0 => {
                Err("its header is blank: not a ratekeeper region (or one whose creator was killed before writing its \
                 header: remove it then)"
                    .into())
            }
            _ => self.verify(layout),
        }
    }

    /// Whether the header is whole, of `layout`, and the file as long as it says.
    fn verify(&self, layout: u32) -> std::result::Result<(), String> {
        if self.magic != MAGIC {
            return Err("it is not a ratekeeper region".into());
        }
        if self.layout != layout {
            return Err(format!(
                "it has layout {}, this ratekeeper uses layout {layout} (another version made it)",
                self.layout
            ));
        }
        if self.sum == 0 {
            return Err("its header has no checksum: an earlier version of ratekeeper made it (remove it)".into());
        }
        if self.sum != header_sum(self.magic, self.layout, self.size) {
            return Err("its header is corrupt".into());
        }
        if self.len != self.size {
            return Err(format!(
                "the file is {} bytes, its header says {}: it was truncated or extended",
                self.len, self.size
            ));
        }
        Ok(())
    }
}

/// Refuses a folder that other users may write to, unless it has the sticky bit (as `/dev/shm` and
/// `/tmp` have): another user could remove the region there and make everyone's limits anew.
fn check_folder(path: &Path) -> Result<()> {
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    // A folder that cannot be looked at: opening the file says why.
    let Ok(meta) = std::fs::metadata(folder) else { return Ok(()) };
    let mode = meta.mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(Error::value(
            "path",
            format!(
                "refusing the folder {} of the shared region {}: its mode {:o} lets other users write to it \
                 without the sticky bit, so another user could remove the region and reset everyone's limits \
                 (use a folder only you can write to, or a sticky one as /dev/shm)",
                folder.display(),
                path.display(),
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Takes the creator's lock on `file` if it is free: its creator is gone (or finished), and no other
/// process is removing it.
fn try_lock(file: &File) -> bool {
    // SAFETY: a valid open file descriptor.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

fn unlock(file: &File) {
    // SAFETY: a valid open file descriptor.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
}

/// Whether `path` still names the file `meta` describes (not one made since by another process).
fn same_file(path: &Path, meta: &std::fs::Metadata) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|now| now.ino() == meta.ino() && now.dev() == meta.dev())
}

/// Reserves `total` bytes for the file now, so that a full tmpfs fails here with a clear error rather
/// than killing a process with `SIGBUS` when it first writes a page.
fn reserve(path: &Path, file: &File, total: usize) -> Result<()> {
    let len = libc::off_t::try_from(total).map_err(|_| Error::value("size", "too large"))?;
    let code = allocate(file, len);
    if code == 0 {
        return Ok(());
    }
    let e = std::io::Error::from_raw_os_error(code);
    let hint = if code == libc::ENOSPC || code == libc::EFBIG {
        " (a container's /dev/shm is often 64 MB: give it more, e.g. docker run --shm-size=256m, or lower max_keys)"
    } else {
        ""
    };
    Err(Error::value(
        "path",
        format!("cannot reserve {total} bytes for the shared region {}: {e}{hint}", path.display()),
    ))
}

/// Reserves the file's first `len` bytes: 0, or the error code.
#[cfg(target_os = "linux")]
fn allocate(file: &File, len: libc::off_t) -> i32 {
    // SAFETY: a valid open file descriptor and a non-negative length.
    unsafe { libc::posix_fallocate(std::os::fd::AsRawFd::as_raw_fd(file), 0, len) }
}

#[cfg(not(target_os = "linux"))]
fn allocate(file: &File, len: libc::off_t) -> i32 {
    // Sized, not reserved: systems without posix_fallocate never get this far (see `SharedRegion`).
    match file.set_len(u64::try_from(len).unwrap_or(0)) {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(test: &str) -> PathBuf {
        crate::state_map::region::test_dir("region", test)
    }

    #[test]
    fn the_first_process_creates_and_the_next_attaches_to_the_same_bytes() {
        let dir = dir("a");
        let path = dir.join("a");
        let first = Region::open(&path, 4096, 1, |_| Ok(())).unwrap();
        let second = Region::open(&path, 4096, 1, |_| Ok(())).unwrap();
        assert!(first.created() && !second.created());
        // SAFETY: both map the same 4096 bytes of contents.
        unsafe {
            *first.contents().add(100) = 42;
            assert_eq!(*second.contents().add(100), 42);
        }
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn another_layout_or_size_is_refused_clearly() {
        let dir = dir("b");
        let path = dir.join("b");
        let _made = Region::open(&path, 4096, 1, |_| Ok(())).unwrap();
        let layout = Region::open(&path, 4096, 2, |_| Ok(())).unwrap_err().to_string();
        assert!(layout.contains("layout 1, this ratekeeper uses layout 2"), "{layout}");
        // Another size: attached as it is (the layer above checks the numbers it recorded).
        assert_eq!(Region::open(&path, 8192, 1, |_| Ok(())).unwrap().len(), 4096);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_a_directory_or_a_file_open_to_others_is_refused() {
        let dir = dir("c");
        let target = dir.join("target");
        let link = dir.join("link");
        std::fs::write(&target, b"").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let symlink = Region::open(&link, 4096, 1, |_| Ok(())).unwrap_err().to_string();
        assert!(symlink.contains("cannot open"), "{symlink}");
        let folder = dir.join("folder");
        std::fs::create_dir_all(&folder).unwrap();
        let folder_error = Region::open(&folder, 4096, 1, |_| Ok(())).unwrap_err().to_string();
        assert!(folder_error.contains("shared region") && folder_error.contains("folder"), "{folder_error}");
        let open = dir.join("open");
        std::fs::write(&open, vec![0u8; 4096 + HEADER_BYTES]).unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
        let shared = Region::open(&open, 4096, 1, |_| Ok(())).unwrap_err().to_string();
        assert!(shared.contains("lets other users read or write it"), "{shared}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A region file as its creator leaves it between sizing it and finishing it: sized, its header
    /// written, not ready.
    fn unfinished(path: &Path) -> File {
        unfinished_with(path, 1, 4096 + HEADER_BYTES, 4096 + HEADER_BYTES)
    }

    /// As `unfinished`, with the header saying `layout` and `size`, the file `len` bytes.
    fn unfinished_with(path: &Path, layout: u32, size: usize, len: usize) -> File {
        let file = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(path).unwrap();
        file.set_len(len as u64).unwrap();
        let mut header = Vec::new();
        header.extend(MAGIC.to_ne_bytes());
        header.extend(layout.to_ne_bytes());
        header.extend(0u32.to_ne_bytes());
        header.extend((size as u64).to_ne_bytes());
        header.extend(header_sum(MAGIC, layout, size as u64).to_ne_bytes());
        file.write_all_at(&header, 0).unwrap();
        file
    }

    /// The error opening `path` gives, checking that the file is left as it was.
    fn refused(path: &Path) -> String {
        let before = std::fs::read(path).unwrap();
        let error = Region::open(path, 4096, 1, |_| Ok(())).unwrap_err().to_string();
        assert_eq!(std::fs::read(path).unwrap(), before, "a refused file is left as it was: {error}");
        assert!(error.contains(&path.display().to_string()), "{error}");
        error
    }

    #[test]
    fn a_region_whose_creator_died_unfinished_is_made_anew() {
        let dir = dir("e");
        let path = dir.join("abandoned");
        drop(unfinished(&path));
        let region = Region::open(&path, 4096, 1, |_| Ok(())).unwrap();
        assert!(region.created());
        assert!(Region::inspect(&path, 1).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_region_being_made_is_waited_for_not_taken() {
        let dir = dir("f");
        let path = dir.join("busy");
        let file = unfinished(&path);
        // A live creator holds the lock (here: this test, through another open file description).
        let holder = File::open(&path).unwrap();
        // SAFETY: a valid file descriptor.
        assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&holder), libc::LOCK_EX) }, 0);
        let error = Region::open(&path, 4096, 1, |_| Ok(())).unwrap_err().to_string();
        assert!(error.contains("did not finish it"), "{error}");
        assert!(path.exists());
        drop((file, holder));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_room_is_an_error_at_creation_and_leaves_no_file() {
        let dir = dir("d");
        let path = dir.join("huge");
        let error = Region::open(&path, 1 << 60, 1, |_| Ok(())).unwrap_err().to_string();
        assert!(error.contains("cannot reserve"), "{error}");
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_of_someone_else_is_refused_at_once_and_kept() {
        let dir = dir("g");
        let text = dir.join("text");
        std::fs::write(&text, "my notes, not a region\n").unwrap();
        std::fs::set_permissions(&text, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let random = dir.join("random");
        let bytes: Vec<u8> = (0u32..8192).map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[2] | 1).collect();
        std::fs::write(&random, bytes).unwrap();
        std::fs::set_permissions(&random, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        for path in [&text, &random] {
            let started = Instant::now();
            let error = refused(path);
            assert!(error.contains("not a ratekeeper region"), "{error}");
            // Told at once, not after waiting for a creator (a generous bound: not a speed test).
            assert!(started.elapsed() < READY_WITHIN, "{:?}", started.elapsed());
            assert!(Region::inspect(path, 1).unwrap_err().to_string().contains("not a ratekeeper region"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unfinished_file_that_is_not_provably_ours_is_refused_and_kept() {
        let dir = dir("h");
        let blank = dir.join("blank");
        OpenOptions::new().write(true).create_new(true).mode(0o600).open(&blank).unwrap().set_len(8192).unwrap();
        let small = dir.join("small");
        drop(unfinished_with(&small, 1, 4096, 0));
        std::fs::OpenOptions::new().write(true).open(&small).unwrap().set_len(10).unwrap();
        let layout = dir.join("layout");
        drop(unfinished_with(&layout, 7, 4096 + HEADER_BYTES, 4096 + HEADER_BYTES));
        let short = dir.join("short");
        drop(unfinished_with(&short, 1, 4096 + HEADER_BYTES, 2048));
        let corrupt = dir.join("corrupt");
        let file = unfinished_with(&corrupt, 1, 4096 + HEADER_BYTES, 4096 + HEADER_BYTES);
        file.write_all_at(&[0xff], 17).unwrap();
        drop(file);
        let cases = [
            (&blank, "its header is blank"),
            (&small, "it is 10 bytes, less than a region's 64-byte header"),
            (&layout, "it has layout 7, this ratekeeper uses layout 1"),
            (&short, "the file is 2048 bytes, its header says 4160: it was truncated or extended"),
            (&corrupt, "its header is corrupt"),
        ];
        // Each waits out a creator that could still be making it: in parallel.
        std::thread::scope(|scope| {
            for (path, why) in cases {
                scope.spawn(move || {
                    let error = refused(path);
                    assert!(error.contains(why), "{error}");
                });
            }
        });
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_file_nobody_holds_is_made_into_the_region() {
        let dir = dir("i");
        let path = dir.join("empty");
        drop(OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).unwrap());
        assert!(Region::inspect(&path, 1).unwrap_err().to_string().contains("it is empty"));
        let region = Region::open(&path, 4096, 1, |_| Ok(())).unwrap();
        assert!(region.created());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Writes `bytes` at `at` in the file at `path`.
    fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
        OpenOptions::new().write(true).open(path).unwrap().write_all_at(bytes, at).unwrap();
    }

    #[test]
    fn a_corrupt_header_or_a_file_of_another_length_is_refused_with_its_true_cause() {
        let dir = dir("j");
        let path = dir.join("r");
        drop(Region::open(&path, 4096, 1, |_| Ok(())).unwrap());
        let before = std::fs::read(&path).unwrap();
        overwrite(&path, 16, &[0x01, 0x10]);
        assert!(refused(&path).contains("its header is corrupt"));
        assert!(Region::inspect(&path, 1).unwrap_err().to_string().contains("its header is corrupt"));
        overwrite(&path, 24, &[0; 8]);
        assert!(refused(&path).contains("an earlier version of ratekeeper made it"));
        std::fs::write(&path, &before).unwrap();
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        for len in [2048, 8192, 100] {
            file.set_len(len).unwrap();
            let why = format!("the file is {len} bytes, its header says 4160: it was truncated or extended");
            assert!(refused(&path).contains(&why), "{why}");
            assert!(Region::inspect(&path, 1).unwrap_err().to_string().contains(&why));
        }
        file.set_len(4096 + HEADER_BYTES as u64).unwrap();
        assert!(Region::open(&path, 4096, 1, |_| Ok(())).is_ok(), "whole again");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_folder_others_may_write_to_is_refused_unless_sticky() {
        use std::os::unix::fs::PermissionsExt;
        let dir = dir("k");
        let open = dir.join("open");
        std::fs::create_dir(&open).unwrap();
        for mode in [0o777, 0o775, 0o757] {
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = Region::open(&open.join("r"), 4096, 1, |_| Ok(())).unwrap_err().to_string();
            assert!(error.contains(&format!("refusing the folder {}", open.display())), "{error}");
            assert!(error.contains("reset everyone's limits"), "{error}");
            assert!(!open.join("r").exists());
        }
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(Region::open(&open.join("r"), 4096, 1, |_| Ok(())).unwrap().created());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn still_at_path_tells_a_removed_replaced_or_truncated_file() {
        let dir = dir("l");
        let path = dir.join("r");
        let region = Region::open(&path, 4096, 1, |_| Ok(())).unwrap();
        let attached = Region::open(&path, 4096, 1, |_| Ok(())).unwrap();
        assert_eq!(region.still_at_path().unwrap(), AtPath::Ours);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(region.still_at_path().unwrap(), AtPath::Removed);
        // Made anew by a process starting now.
        let anew = Region::open(&path, 4096, 1, |_| Ok(())).unwrap();
        assert!(anew.created());
        assert_eq!(region.still_at_path().unwrap(), AtPath::Replaced);
        assert_eq!(anew.still_at_path().unwrap(), AtPath::Ours);
        // Another file moved over it.
        let other = dir.join("other");
        std::fs::write(&other, b"x").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(anew.still_at_path().unwrap(), AtPath::Replaced);
        // Cut short while mapped (nothing here touches the lost page).
        let third = dir.join("third");
        let mapped = Region::open(&third, 8192, 1, |_| Ok(())).unwrap();
        OpenOptions::new().write(true).open(&third).unwrap().set_len(4096).unwrap();
        assert_eq!(mapped.still_at_path().unwrap(), AtPath::Truncated { len: 4096 });
        drop((region, attached, anew, mapped));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_meta_sum_is_set_by_the_creator_only_and_read_by_every_process() {
        let dir = dir("m");
        let path = dir.join("r");
        let made = Region::open(&path, 4096, 1, |region| region.set_meta_sum(checksum(b"meta"))).unwrap();
        let attached = Region::open(&path, 4096, 1, |_| Ok(())).unwrap();
        assert_eq!(attached.meta_sum(), checksum(b"meta"));
        assert_eq!(Region::inspect(&path, 1).unwrap().meta_sum(), checksum(b"meta"));
        assert!(made.set_meta_sum(1).is_err(), "fixed once ready");
        assert!(attached.set_meta_sum(1).is_err(), "another process's header");
        assert_eq!(made.meta_sum(), checksum(b"meta"));
        // FNV-1a's published value for "a": the same in every build.
        assert_eq!(checksum(b"a"), 0xaf63_dc4c_8601_ec8c);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
