//! A lock in the shared region that a holder's death cannot wedge: a robust, process-shared pthread
//! mutex. When a holder dies, even by `SIGKILL` in the middle of an update, the kernel's robust-futex
//! list hands the lock to the next process that asks, with `EOWNERDEAD`, at once: no timeout to wait
//! out, no pid to poll (and no pid reuse to fool). The new holder learns that the data the lock guards
//! may be half-written ([`Guard::recovered`]) and marks the lock consistent again.
//!
//! Proven and cheap: glibc's fast path is one compare-and-swap in user space; the kernel is entered
//! only to sleep on a contended lock.
//!
//! The mutex lives in a file any process of the user may have written garbage into, and glibc trusts
//! its 40 bytes: a garbage `__kind` can make it abort (its assertions) or take a path we never set up,
//! and a garbage `__lock` naming a thread that will never let go makes every waiter sleep forever. So
//! every lock first checks the kind word against the one `init` writes (one load, in the line the lock
//! is in), and a wait that lasts past `CHECK_AFTER` looks at the holder the lock word names: a lock
//! that is not ours, or held by no live thread of a process mapping the region, is made anew ([`heal`])
//! and handed over marked recovered, so that what it guards is repaired.
//!
//! [`heal`]: SharedMutex::heal

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Makes mutexes of `attr` robust: Linux's robust futexes (other systems have none: the shared store
/// is Linux's).
///
/// # Safety
/// `attr` is an initialised attribute object.
#[cfg(target_os = "linux")]
unsafe fn set_robust(attr: *mut libc::pthread_mutexattr_t) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { libc::pthread_mutexattr_setrobust(attr, libc::PTHREAD_MUTEX_ROBUST) }
}

#[cfg(not(target_os = "linux"))]
unsafe fn set_robust(_attr: *mut libc::pthread_mutexattr_t) -> i32 {
    libc::ENOSYS
}

/// # Safety
/// The caller holds `mutex`, taken with `EOWNERDEAD`.
#[cfg(target_os = "linux")]
unsafe fn mark_consistent(mutex: *mut libc::pthread_mutex_t) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { libc::pthread_mutex_consistent(mutex) }
}

#[cfg(not(target_os = "linux"))]
unsafe fn mark_consistent(_mutex: *mut libc::pthread_mutex_t) -> i32 {
    libc::ENOSYS
}

/// Reads of a held lock's word before sleeping on it (a read and a pause: tens of nanoseconds), and
/// at most how many of them may `trylock` when the word says free.
const SPINS: usize = 512;
const TRIES: usize = 64;

/// How long a wait lasts before the holder is looked at (see [`SharedMutex::heal`]). Holders keep the
/// lock for microseconds; the look costs a `stat` and maybe a read of the holder's memory map, so it
/// is not done at every contended lock.
const CHECK_AFTER: Duration = Duration::from_millis(20);

/// The bits of a robust futex word (see `futex(2)`): the holder's thread id, and its death.
const FUTEX_TID_MASK: i32 = 0x3fff_ffff;
const FUTEX_OWNER_DIED: i32 = 0x4000_0000;

/// Where glibc keeps the lock word and the kind in a `pthread_mutex_t` (`__lock` at 0, `__kind` at 16
/// on every 64-bit glibc: `struct __pthread_mutex_s`). Elsewhere the words are not looked at: a lock is
/// trusted as glibc trusts it.
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
const WORDS: Option<(usize, usize)> = Some((0, 16));
#[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
const WORDS: Option<(usize, usize)> = None;

/// The kind word `init` writes (robust, process-shared), learned from a scratch mutex once per process.
fn expected_kind() -> Option<i32> {
    static KIND: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
    *KIND.get_or_init(|| {
        WORDS?;
        // SAFETY: a zeroed pthread_mutex_t is valid memory for init; destroyed before it goes.
        let mut scratch = SharedMutex { raw: UnsafeCell::new(unsafe { std::mem::zeroed() }) };
        // SAFETY: our own stack memory, used by no one else.
        unsafe { SharedMutex::init(&raw mut scratch) }.ok()?;
        let kind = scratch.word(1).map(|w| w.load(Ordering::Relaxed));
        // SAFETY: initialised above, not locked.
        unsafe { libc::pthread_mutex_destroy(scratch.raw.get()) };
        kind
    })
}

/// This thread's id, as glibc writes it into a lock it takes.
fn my_tid() -> i32 {
    // The system call, not glibc's `gettid` wrapper: that came in glibc 2.30, and the wheel is built to
    // load on glibc 2.17 (manylinux2014).
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    i32::try_from(tid).unwrap_or(-1)
}

/// The device and inode of the file mapped at `at` in this process (`None`: not a file's mapping).
fn mapped_file(at: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
        let (_perms, _offset, dev, inode) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        (start <= at && at < end && inode != "0").then(|| format!("{dev} {inode}"))
    })
}

/// Whether thread `tid` is alive in a process that maps the file `file` (device and inode), or, for a
/// mutex in no file (tests' heap memory), merely alive. A process whose map cannot be read (another
/// user's, or one made undumpable) is not one of the region's.
fn live_holder(tid: i32, file: Option<&str>) -> bool {
    if tid <= 0 || tid == my_tid() {
        // No holder, or this thread, which never waits for a lock it holds: garbage.
        return false;
    }
    let Some(file) = file else {
        return std::path::Path::new(&format!("/proc/{tid}")).exists();
    };
    // A dead thread's /proc entry is gone (a zombie's map is empty): either way, not a holder.
    std::fs::read_to_string(format!("/proc/{tid}/maps")).is_ok_and(|maps| {
        maps.lines().any(|line| line.split_whitespace().skip(3).take(2).collect::<Vec<_>>().join(" ") == file)
    })
}

/// The wall-clock time `after` from now, as `pthread_mutex_timedlock` wants it.
#[allow(clippy::useless_conversion)] // `time_t` and `c_long` are `i32` on some 32-bit targets
fn wall_clock_after(after: Duration) -> libc::timespec {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &raw mut now) };
    let nanos = i64::from(now.tv_nsec) + i64::from(after.subsec_nanos());
    let secs = i64::from(now.tv_sec)
        .saturating_add(i64::try_from(after.as_secs()).unwrap_or(i64::MAX))
        .saturating_add(nanos / 1_000_000_000);
    libc::timespec {
        tv_sec: secs.try_into().unwrap_or(libc::time_t::MAX),
        tv_nsec: (nanos % 1_000_000_000).try_into().unwrap_or_default(),
    }
}

/// A mutex living in shared memory (the region's bytes, not this process's heap).
#[repr(C)]
pub struct SharedMutex {
    raw: UnsafeCell<libc::pthread_mutex_t>,
}

// SAFETY: a process-shared pthread mutex is made to be used from any thread of any process.
unsafe impl Sync for SharedMutex {}
// SAFETY: as above.
unsafe impl Send for SharedMutex {}

fn failed(what: &str, code: i32) -> Error {
    Error::value("lock", format!("{what} failed: {}", std::io::Error::from_raw_os_error(code)))
}

impl SharedMutex {
    /// Makes the mutex at `at`: robust and process-shared.
    ///
    /// # Safety
    /// `at` is valid, aligned memory for a `SharedMutex` that no process uses yet (the region's creator
    /// calls this before setting the region ready), and outlives every use of the returned reference.
    ///
    /// # Errors
    /// The C library refused an attribute (not a Linux with robust futexes).
    pub unsafe fn init<'a>(at: *mut Self) -> Result<&'a Self> {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: attr is initialised by pthread_mutexattr_init before any other use, destroyed after.
        unsafe {
            let attr = attr.as_mut_ptr();
            let code = libc::pthread_mutexattr_init(attr);
            if code != 0 {
                return Err(failed("pthread_mutexattr_init", code));
            }
            let set = [
                (
                    "pthread_mutexattr_setpshared",
                    libc::pthread_mutexattr_setpshared(attr, libc::PTHREAD_PROCESS_SHARED),
                ),
                ("pthread_mutexattr_setrobust", set_robust(attr)),
                ("pthread_mutex_init", libc::pthread_mutex_init((*at).raw.get(), attr)),
            ];
            libc::pthread_mutexattr_destroy(attr);
            if let Some((what, code)) = set.into_iter().find(|(_, code)| *code != 0) {
                return Err(failed(what, code));
            }
            Ok(&*at)
        }
    }

    /// The mutex at `at`, made by [`SharedMutex::init`] in this or another process.
    ///
    /// # Safety
    /// `at` was initialised by `init` and outlives every use of the returned reference.
    #[must_use]
    pub unsafe fn at<'a>(at: *mut Self) -> &'a Self {
        // SAFETY: the caller's promise.
        unsafe { &*at }
    }

    /// Waits for the lock. When its last holder died holding it, the lock is taken all the same and
    /// the guard says so: what it guards may be half-written.
    ///
    /// # Errors
    /// The lock cannot be taken (a holder died and the one after it did not recover it: never here,
    /// every guard recovers).
    pub fn lock(&self) -> Result<Guard<'_>> {
        if !self.kind_is_ours() {
            return Err(failed("pthread_mutex_lock", libc::EINVAL));
        }
        if let Some(code) = self.spin() {
            return self.locked(code);
        }
        // SAFETY: the mutex was initialised (see `init` / `at`).
        let code = unsafe { libc::pthread_mutex_lock(self.raw.get()) };
        self.locked(code)
    }

    /// Waits for the lock at most `deadline`: `None` when it is still held then. A dead holder's lock is
    /// taken all the same, the guard marked [`Guard::recovered`], and a lock nobody can take any more is
    /// made anew, as [`SharedMutex::lock_whole`] does.
    ///
    /// The wait is `pthread_mutex_timedlock`'s, which counts on the wall clock (`CLOCK_REALTIME`; the
    /// `libc` crate has no `pthread_mutex_clocklock`, and linking to it would need glibc 2.30): a wait
    /// woken early by the clock set forward goes on for the rest, one lengthened by the clock set back
    /// is not shortened.
    ///
    /// A lock whose words are not a lock of ours, or held by no live process of the region, is made
    /// anew at once or after `CHECK_AFTER` ([`SharedMutex::heal`]) and taken, marked recovered.
    #[must_use]
    #[inline]
    pub fn lock_within(&self, deadline: Duration) -> Option<Guard<'_>> {
        // The usual case first, with nothing else to set up: a lock of ours, free.
        self.prefetch_for_write();
        // SAFETY: the mutex was initialised (see `init` / `at`); its kind is checked first.
        if self.kind_is_ours() && unsafe { libc::pthread_mutex_trylock(self.raw.get()) } == 0 {
            return Some(Guard { mutex: self, recovered: false });
        }
        self.lock_within_held(deadline)
    }

    /// [`SharedMutex::lock_within`] of a lock found held, or not ours.
    #[cold]
    #[inline(never)]
    fn lock_within_held(&self, deadline: Duration) -> Option<Guard<'_>> {
        // Read only once the lock is found held: the clock costs as much as an uncontended lock.
        let mut started = None;
        let mut left = || deadline.checked_sub(started.get_or_insert_with(Instant::now).elapsed());
        let mut healed = false;
        loop {
            if !self.kind_is_ours() {
                healed |= self.heal(true);
                if !self.kind_is_ours() {
                    // Another process is making it anew: its holder for microseconds.
                    left()?;
                    std::thread::yield_now();
                    continue;
                }
            }
            if let Some(code) = self.spin() {
                if let Some(guard) = self.taken_or_remade(code) {
                    return Some(guard.healed(healed));
                }
            }
            let at = wall_clock_after(left()?.min(CHECK_AFTER));
            // SAFETY: the mutex was initialised; `at` is a valid time.
            let code = unsafe { libc::pthread_mutex_timedlock(self.raw.get(), &raw const at) };
            if let Some(guard) = self.taken_or_remade(code) {
                return Some(guard.healed(healed));
            }
            match code {
                // Held past CHECK_AFTER, or held (says the word) by this very thread: look at the holder.
                libc::ETIMEDOUT | libc::EDEADLK | libc::EBUSY => healed |= self.heal(false),
                // Not expected; not a reason to spin hot until the deadline either.
                _ => std::thread::yield_now(),
            }
        }
    }

    /// The word `index` of the mutex (0: `__lock`, 1: `__kind`), where glibc's layout is known.
    fn word(&self, index: usize) -> Option<&AtomicI32> {
        let (lock, kind) = WORDS?;
        let offset = if index == 0 { lock } else { kind };
        // SAFETY: within the 40 bytes of the mutex, 4-aligned (the mutex is 8-aligned); glibc reads and
        // writes these words atomically too.
        Some(unsafe { &*self.raw.get().cast::<AtomicI32>().add(offset / 4) })
    }

    /// Asks for the mutex's cache line to write, before its kind word is read. When another process
    /// used the lock last, the read would fetch the line shared and the `trylock` after it fetch it
    /// again to write: two transfers between cores instead of one. (Intel processors before Broadwell
    /// run `prefetchw` as a no-op.)
    #[inline]
    fn prefetch_for_write(&self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch reads nothing the program sees and cannot fault.
        unsafe {
            std::arch::asm!("prefetchw [{0}]", in(reg) self.raw.get(), options(nostack, preserves_flags, readonly));
        }
    }

    /// Spins a little on a held lock, trying it whenever its word says it is free: the code of the first
    /// `trylock` that did not find it busy, `None` when it stayed held. A holder keeps the lock for a
    /// decision (tens of nanoseconds), and sleeping on the futex costs both sides a system call.
    ///
    /// # Safety (of the calls inside)
    /// The caller checked that the mutex is initialised and of our kind.
    #[inline]
    fn spin(&self) -> Option<i32> {
        let mut tries = 0;
        for _ in 0..SPINS {
            if !self.looks_free() {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: the mutex was initialised and is of our kind (the caller checked).
            match unsafe { libc::pthread_mutex_trylock(self.raw.get()) } {
                libc::EBUSY => tries += 1,
                code => return Some(code),
            }
            if tries == TRIES {
                break;
            }
            std::hint::spin_loop();
        }
        None
    }

    /// Whether the lock word names no holder (free, or its holder died): worth a `trylock`. Spinning
    /// on a read leaves the cache line shared, where each `trylock` would take it from the holder,
    /// which then waits for it to let go.
    #[inline]
    fn looks_free(&self) -> bool {
        self.word(0).is_none_or(|lock| lock.load(Ordering::Relaxed) & FUTEX_TID_MASK == 0)
    }

    /// Whether the kind word is the one `init` writes (true where it cannot be told).
    #[inline]
    fn kind_is_ours(&self) -> bool {
        match (self.word(1), expected_kind()) {
            (Some(kind), Some(expected)) => kind.load(Ordering::Relaxed) == expected,
            _ => true,
        }
    }

    /// Makes the mutex anew when it cannot be a live lock of ours: its kind is not ours (`kind_bad`), or
    /// its lock word names no holder that lives in a process mapping the region (garbage, which no one
    /// would ever let go). Whether it did; the caller then takes it and repairs what it guards.
    ///
    /// The lock word is first swapped, from the value judged, to this thread's id: a process that took
    /// the lock in between (the word changed) is never disturbed, and lockers arriving meanwhile wait
    /// for a live holder. Then `pthread_mutex_init` writes every word, and the waiters asleep on the old
    /// word are woken to try again.
    ///
    /// Limits: holders are told by their thread ids, so processes sharing a region must share a pid
    /// namespace (as pids in leases already assume) and be readable by each other in /proc (same user,
    /// dumpable: any ordinary worker). A garbage word naming a live thread of a process that maps the
    /// region is waited for until that thread ends.
    pub fn heal(&self, kind_bad: bool) -> bool {
        let Some(lock) = self.word(0) else { return false };
        let word = lock.load(Ordering::Acquire);
        if !kind_bad && word & FUTEX_OWNER_DIED != 0 {
            return false; // a dead holder's lock, which glibc hands over (EOWNERDEAD)
        }
        if !kind_bad && word == 0 {
            return false; // let go meanwhile
        }
        let file = mapped_file(self.raw.get() as usize);
        if live_holder(word & FUTEX_TID_MASK, file.as_deref()) {
            return false;
        }
        if lock.compare_exchange(word, my_tid(), Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        // SAFETY: the lock word is ours: no live process holds this mutex, and none can take it now.
        if unsafe { Self::init(std::ptr::from_ref(self).cast_mut()) }.is_err() {
            lock.store(0, Ordering::Release);
        }
        // SAFETY: FUTEX_WAKE on the lock word (an aligned i32 of shared memory): wakes its sleepers, who
        // retry on the new mutex.
        unsafe {
            libc::syscall(libc::SYS_futex, std::ptr::from_ref(lock), libc::FUTEX_WAKE, i32::MAX, 0, 0, 0);
        }
        true
    }

    /// The guard for what a lock call returned; when the lock cannot be taken any more
    /// (`ENOTRECOVERABLE`), the mutex is made anew and tried once. `None` if it is not held.
    fn taken_or_remade(&self, code: i32) -> Option<Guard<'_>> {
        match code {
            0 | libc::EOWNERDEAD => self.locked(code).ok(),
            // SAFETY: as in `lock_whole`: a mutex nobody can lock any more has no holder to disturb.
            libc::ENOTRECOVERABLE if unsafe { Self::init(std::ptr::from_ref(self).cast_mut()) }.is_ok() => {
                // SAFETY: the mutex was just initialised.
                let code = unsafe { libc::pthread_mutex_trylock(self.raw.get()) };
                let mut guard = self.locked(code).ok()?;
                guard.recovered = true;
                Some(guard)
            }
            // Still held (EBUSY, ETIMEDOUT), or an error that leaves it to its holder: never remade then.
            _ => None,
        }
    }

    /// The guard for what `pthread_mutex_lock` or `pthread_mutex_trylock` returned.
    fn locked(&self, code: i32) -> Result<Guard<'_>> {
        match code {
            0 => Ok(Guard { mutex: self, recovered: false }),
            libc::EOWNERDEAD => {
                // SAFETY: we hold the lock; marking it consistent lets later holders lock it normally.
                let code = unsafe { mark_consistent(self.raw.get()) };
                if code != 0 {
                    return Err(failed("pthread_mutex_consistent", code));
                }
                Ok(Guard { mutex: self, recovered: true })
            }
            code => Err(failed("pthread_mutex_lock", code)),
        }
    }
}

impl SharedMutex {
    /// Takes the lock, whatever happened to it: a dead holder's, one nobody can lock any more
    /// (`ENOTRECOVERABLE`), one whose words are garbage (see [`SharedMutex::heal`]) is taken, marked
    /// recovered. Never fails, so a decision never has to; waits only for a live holder.
    pub fn lock_whole(&self) -> Guard<'_> {
        loop {
            if let Some(guard) = self.lock_within(Duration::from_hours(1)) {
                return guard;
            }
        }
    }
}

/// The lock, held until dropped.
pub struct Guard<'a> {
    mutex: &'a SharedMutex,
    /// The previous holder died holding the lock, or the lock was made anew: what it guards may be
    /// half-written.
    pub recovered: bool,
}

impl Guard<'_> {
    #[must_use]
    const fn healed(mut self, healed: bool) -> Self {
        self.recovered |= healed;
        self
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard holds the lock.
        unsafe {
            libc::pthread_mutex_unlock(self.mutex.raw.get());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_map::region::file::Region;

    fn region(name: &str) -> Region {
        let dir = crate::state_map::region::test_dir("lock", name);
        let region = Region::open(&dir.join(name), 4096, 1, |_| Ok(())).unwrap();
        // The mapping outlives the name (forked children share the mapping, not the file).
        std::fs::remove_dir_all(&dir).unwrap();
        region
    }

    /// Runs `child` in a forked process, which ends it (it never returns); the child's exit status.
    fn in_child(child: impl FnOnce()) -> i32 {
        // SAFETY: the child only locks a mutex and ends (no allocation, no other thread needed).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            child();
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &raw mut status, 0) };
        status
    }

    #[test]
    fn a_holder_killed_with_the_lock_hands_it_on_at_once_marked_recovered() {
        let region = region("killed");
        // SAFETY: fresh zeroed region memory, aligned to 64 bytes, used only through this mutex.
        let mutex = unsafe { SharedMutex::init(region.contents().cast()) }.unwrap();
        let counter = region.contents().wrapping_add(std::mem::size_of::<SharedMutex>());
        let status = in_child(|| {
            let guard = mutex.lock().unwrap();
            // SAFETY: the shared byte after the mutex, written under the lock.
            unsafe { *counter = 7 };
            std::mem::forget(guard);
            // SAFETY: kills this child while it holds the lock.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        });
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
        let started = std::time::Instant::now();
        let guard = mutex.lock().unwrap();
        assert!(guard.recovered, "the dead holder's lock is handed on, marked");
        assert!(started.elapsed() < std::time::Duration::from_millis(100));
        // SAFETY: read under the lock.
        assert_eq!(unsafe { *counter }, 7, "what the holder wrote before dying is there");
        drop(guard);
        assert!(!mutex.lock().unwrap().recovered, "consistent again: the next holder is told nothing");
    }

    #[test]
    fn processes_take_the_lock_in_turn() {
        let region = region("turns");
        // SAFETY: as above.
        let mutex = unsafe { SharedMutex::init(region.contents().cast()) }.unwrap();
        // 64 + 40 bytes into a page: 8-aligned.
        #[allow(clippy::cast_ptr_alignment)]
        let value = region.contents().wrapping_add(std::mem::size_of::<SharedMutex>()).cast::<u64>();
        let add = |n: u64| {
            for _ in 0..n {
                let _guard = mutex.lock().unwrap();
                // SAFETY: an aligned u64 of the region, read and written under the lock (a plain
                // read-modify-write: without the lock, increments would be lost).
                unsafe { value.write_volatile(value.read_volatile() + 1) };
            }
        };
        // SAFETY: fork as in `in_child`; each child adds and ends.
        let children: Vec<i32> = (0..2)
            .map(|_| {
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    add(20_000);
                    unsafe { libc::_exit(0) };
                }
                pid
            })
            .collect();
        add(20_000);
        for pid in children {
            let mut status = 0;
            // SAFETY: our children.
            unsafe { libc::waitpid(pid, &raw mut status, 0) };
            assert_eq!(status, 0);
        }
        // SAFETY: every writer has ended.
        assert_eq!(unsafe { value.read_volatile() }, 60_000);
    }

    /// Forks a child that takes the lock and stops itself (`SIGSTOP`) holding it; once continued it lets
    /// the lock go and ends. Returns when the child is stopped: its pid.
    fn stopped_holder(mutex: &SharedMutex) -> i32 {
        // SAFETY: the child only locks, stops, unlocks and ends.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let guard = mutex.lock();
            // SAFETY: stops this child until SIGCONT.
            unsafe { libc::raise(libc::SIGSTOP) };
            drop(guard);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: our own child; returns once it has stopped.
        unsafe { libc::waitpid(pid, &raw mut status, libc::WUNTRACED) };
        assert!(libc::WIFSTOPPED(status), "the holder stopped");
        pid
    }

    #[test]
    fn lock_within_gives_up_at_the_deadline_then_takes_the_lock_once_let_go() {
        let region = region("within");
        // SAFETY: as above.
        let mutex = unsafe { SharedMutex::init(region.contents().cast()) }.unwrap();
        let holder = stopped_holder(mutex);
        let started = std::time::Instant::now();
        let waited = mutex.lock_within(Duration::from_millis(50));
        let took = started.elapsed();
        assert!(waited.is_none(), "the stopped holder still has it");
        assert!(took >= Duration::from_millis(50), "gave up early: {took:?}");
        // Generous: only that it did return, not how fast the machine is.
        assert!(took < Duration::from_secs(10), "{took:?}");
        // SAFETY: our stopped child: it goes on, lets the lock go and ends.
        unsafe { libc::kill(holder, libc::SIGCONT) };
        let guard = mutex.lock_within(Duration::from_secs(10)).expect("let go by the holder");
        assert!(!guard.recovered);
        let mut status = 0;
        // SAFETY: our child.
        unsafe { libc::waitpid(holder, &raw mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{status}");
    }

    /// Whether the thread `tid` of this process sleeps (state `S`: here, in the futex wait).
    fn sleeping(tid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
            .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('S')))
    }

    #[test]
    fn a_holder_killed_while_lock_within_waits_hands_it_over_marked_recovered() {
        let region = region("within-killed");
        // SAFETY: as above.
        let mutex = unsafe { SharedMutex::init(region.contents().cast()) }.unwrap();
        let holder = stopped_holder(mutex);
        let (tell, waiter) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let waiting = scope.spawn(move || {
                tell.send(my_tid()).unwrap();
                mutex.lock_within(Duration::from_secs(30)).map(|guard| guard.recovered)
            });
            let tid = waiter.recv().unwrap();
            // Bounded polling: the waiter is asleep on the lock, past its spinning.
            let started = std::time::Instant::now();
            while !sleeping(tid) && started.elapsed() < Duration::from_secs(10) {
                std::thread::yield_now();
            }
            // SAFETY: our stopped child, killed holding the lock.
            unsafe { libc::kill(holder, libc::SIGKILL) };
            let mut status = 0;
            // SAFETY: our child.
            unsafe { libc::waitpid(holder, &raw mut status, 0) };
            assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
            assert_eq!(waiting.join().unwrap(), Some(true), "handed over, marked recovered");
        });
        assert!(!mutex.lock_within(Duration::from_secs(1)).unwrap().recovered, "consistent again");
    }

    #[test]
    fn a_lock_of_garbage_words_is_made_anew_and_taken_marked_recovered() {
        let region = region("garbage");
        // SAFETY: as above.
        let mutex = unsafe { SharedMutex::init(region.contents().cast()) }.unwrap();
        let expected = expected_kind().expect("glibc, 64-bit");
        assert_eq!(expected & 0x80, 0x80, "process-shared");
        let words = std::ptr::from_ref(mutex).cast_mut().cast::<i32>();
        // A kind that is not ours (glibc could abort on it); a lock word naming a thread that does not
        // exist, only waiters, this very thread (which holds nothing), init (no mapping of the region).
        let garbage = [(4, 0x7fff), (4, 0), (4, 3), (0, 0x3fff_fff0), (0, i32::MIN), (0, my_tid()), (0, 1)];
        for (index, value) in garbage {
            // SAFETY: a word of the mutex, which no one holds.
            unsafe { words.add(index).write_volatile(value) };
            let started = Instant::now();
            let guard = mutex.lock_within(Duration::from_secs(30)).expect("healed");
            assert!(guard.recovered, "word {index} = {value:#x}: marked for repair");
            assert!(started.elapsed() < Duration::from_secs(10));
            drop(guard);
            assert!(!mutex.lock_whole().recovered, "word {index} = {value:#x}: a lock again");
        }
    }
}
