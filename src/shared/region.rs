//! A region of memory shared by the processes of one machine: a file (under `/dev/shm` by default)
//! mapped into each. The first process creates it, the others attach to it, whatever the order and the
//! start method (fork, spawn, separate servers).
//!
//! Safety of the file: it is created exclusively (`O_EXCL`) with mode 0600; attaching refuses a
//! symbolic link (`O_NOFOLLOW`), anything but a regular file, a file owned by another user or open to
//! others (any local user could otherwise reset everyone's limits). Its whole size is reserved when it
//! is made (`posix_fallocate`), so a full tmpfs is an error then, never a `SIGBUS` on a later write.
//!
//! The header (the first 64 bytes) says what the region holds: a magic, the layout version, the size,
//! and a ready flag the creator sets last (with release ordering) once the header is written, so that
//! a process attaching meanwhile waits for it rather than reading half a header.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};

const MAGIC: u64 = u64::from_le_bytes(*b"rkregion");
/// Bytes before the region's contents.
pub const HEADER_BYTES: usize = 64;
/// How long an attaching process waits for the creator to finish the header.
const READY_WITHIN: Duration = Duration::from_secs(2);

/// The header, at the start of the mapping.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    layout: AtomicU32,
    ready: AtomicU32,
    size: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

/// A mapped region and whether this process created it.
pub struct Region {
    map: MmapRaw,
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

impl Region {
    /// Creates the region at `path` with `size` bytes of contents (zeroed) under `layout`, or attaches
    /// to the one another process made. The creator runs `init` on the contents before any other
    /// process may attach.
    ///
    /// # Errors
    /// The file cannot be made or opened; it is a symbolic link, not a regular file, owned by another
    /// user or open to others; no room for `size` bytes (a full tmpfs); another layout or size; what
    /// `init` returns.
    pub fn open(path: &Path, size: usize, layout: u32, init: impl FnOnce(&Self) -> Result<()>) -> Result<Self> {
        let total = HEADER_BYTES.checked_add(size).ok_or_else(|| Error::value("size", "too large"))?;
        let created = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path);
        match created {
            Ok(file) => {
                // Held until the region is ready (the file closes when `create` returns): a process that
                // finds the file unfinished and this lock free knows its creator died making it.
                // SAFETY: a valid open file descriptor.
                unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) };
                Self::create(path, &file, total, layout, init).inspect_err(|_| {
                    // A region that could not be made whole must not be attached to.
                    let _ = std::fs::remove_file(path);
                })
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => match Self::attach(path, Some(total), layout, true)? {
                Some(region) => Ok(region),
                // Its creator died before finishing it; the file is gone: make it anew.
                None => Self::open(path, size, layout, init),
            },
            Err(e) => Err(io_error(path, "create", &e)),
        }
    }

    fn create(
        path: &Path,
        file: &File,
        total: usize,
        layout: u32,
        init: impl FnOnce(&Self) -> Result<()>,
    ) -> Result<Self> {
        reserve(path, file, total)?;
        // The file is ours and its size fixed; every process maps it shared and reads and writes it
        // through atomics or under the region's own locks.
        let map = MmapOptions::new().map_raw(file).map_err(|e| io_error(path, "map", &e))?;
        let region = Self { map, path: path.to_owned(), created: true };
        let header = region.header();
        header.magic.store(MAGIC, Ordering::Relaxed);
        header.layout.store(layout, Ordering::Relaxed);
        header.size.store(total as u64, Ordering::Relaxed);
        init(&region)?;
        header.ready.store(1, Ordering::Release);
        Ok(region)
    }

    /// Maps the region at `path` that another process made, without writing to it or taking its locks
    /// (for looking at a running service's states). Its size is the file's.
    ///
    /// # Errors
    /// As [`Region::open`], for an existing region.
    pub fn inspect(path: &Path, layout: u32) -> Result<Self> {
        Self::attach(path, None, layout, false)?
            .ok_or_else(|| Error::value("path", format!("{}: its creator died before finishing it", path.display())))
    }

    /// The region at `path`, once its creator has finished it; `None` when the creator died before it
    /// did (a writer then removes the file, for the caller to make it anew).
    fn attach(path: &Path, total: Option<usize>, layout: u32, write: bool) -> Result<Option<Self>> {
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| io_error(path, "open", &e))?;
        let meta = file.metadata().map_err(|e| io_error(path, "inspect", &e))?;
        let refuse =
            |why: String| Err(Error::value("path", format!("refusing the shared region {}: {why}", path.display())));
        if !meta.file_type().is_file() {
            return refuse("not a regular file".into());
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return refuse(format!("owned by user {}, not by this process's user {me}", meta.uid()));
        }
        if meta.mode() & 0o077 != 0 {
            return refuse(format!("its mode {:o} lets other users read or write it (want 600)", meta.mode() & 0o777));
        }
        // The creator sized the file before writing the header; until then it may still be empty.
        let started = Instant::now();
        loop {
            let len = file.metadata().map_err(|e| io_error(path, "inspect", &e))?.len();
            if len >= HEADER_BYTES as u64 {
                let options = MmapOptions::new();
                let map = if write { options.map_raw(&file) } else { options.map_raw_read_only(&file) }
                    .map_err(|e| io_error(path, "map", &e))?;
                let region = Self { map, path: path.to_owned(), created: false };
                if region.header().ready.load(Ordering::Acquire) == 1 {
                    let total = total.unwrap_or(region.map.len());
                    return region.check(total, layout).map(Some);
                }
            }
            if started.elapsed() > READY_WITHIN {
                if abandoned(&file) {
                    if write && same_file(path, &meta) {
                        std::fs::remove_file(path).map_err(|e| io_error(path, "remove the abandoned", &e))?;
                    }
                    return Ok(None);
                }
                return refuse(format!("its creator did not finish it within {READY_WITHIN:?}"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn check(self, total: usize, layout: u32) -> Result<Self> {
        let header = self.header();
        let refuse = |why: String| {
            Err(Error::value("path", format!("refusing the shared region {}: {why}", self.path.display())))
        };
        if header.magic.load(Ordering::Relaxed) != MAGIC {
            return refuse("it is not a ratekeeper region".into());
        }
        let theirs = header.layout.load(Ordering::Relaxed);
        if theirs != layout {
            return refuse(format!(
                "it has layout {theirs}, this ratekeeper uses layout {layout} (another version made it)"
            ));
        }
        let size = header.size.load(Ordering::Relaxed);
        if size != total as u64 || self.map.len() != total {
            return refuse(format!("it holds {size} bytes, this limiter needs {total} (another max_keys made it)"));
        }
        Ok(self)
    }

    #[allow(clippy::cast_ptr_alignment)] // a mapping starts on a page boundary
    fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_BYTES long and page-aligned; Header is made of atomics,
        // valid for any bytes.
        unsafe { &*self.map.as_ptr().cast::<Header>() }
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

/// Whether the creator of an unfinished region is gone: it holds an exclusive `flock` on the file until
/// the region is ready, which the kernel drops when it dies.
fn abandoned(file: &File) -> bool {
    let fd = std::os::fd::AsRawFd::as_raw_fd(file);
    // SAFETY: a valid open file descriptor; a shared lock taken only to test, given back at once.
    unsafe {
        if libc::flock(fd, libc::LOCK_SH | libc::LOCK_NB) == 0 {
            libc::flock(fd, libc::LOCK_UN);
            return true;
        }
    }
    false
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
        crate::shared::test_dir("region", test)
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
        let size = Region::open(&path, 8192, 1, |_| Ok(())).unwrap_err().to_string();
        assert!(size.contains("another max_keys"), "{size}");
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

    /// A region file as its creator leaves it between making it and finishing it: sized, not ready.
    fn unfinished(path: &Path) -> File {
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).unwrap();
        file.set_len((4096 + HEADER_BYTES) as u64).unwrap();
        file
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
}
