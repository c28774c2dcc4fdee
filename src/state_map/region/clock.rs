//! The clock of a shared region: one clock every process that maps the region reads, cheaper than the
//! kernel's.
//!
//! Times a region holds are written by one process and compared by another, so every process must read
//! one clock. The kernel's `CLOCK_MONOTONIC` is one (about 20-30 ns a read through the vDSO); the CPU's
//! time-stamp counter (TSC) is cheaper (one `rdtsc`, about half that, and it overlaps the work around
//! it), but it counts ticks, not nanoseconds, and a scale measured by each process (as `quanta` does) gives
//! each process its own (measured: −7 to +16 ppm apart, 80 ms an hour between two workers). So the
//! region's creator measures the scale once and writes it into the region's header: the TSC reading and
//! `CLOCK_MONOTONIC` at one instant (the anchor) and nanoseconds per tick (32.32 fixed point), measured
//! over a few milliseconds. Every process converts its TSC readings with that one record:
//! `ns + (tsc - anchor) × scale`, the same function of the same counter in every process.
//!
//! The header says which clock the region's times are in (a record whose scale is 0 is the kernel's
//! clock), so that processes never compare times of two clocks: all read the record, all switch when it
//! changes.
//!
//! **The drift bound.** Every time a region clock returns is within [`DRIFT_BOUND_NS`] (100 µs) of
//! `CLOCK_MONOTONIC` at that instant. Each process checks the record against the kernel's clock when it
//! attaches, whenever the record changes, and at its first read [`CHECK_NS`] (1 ms) or more after its
//! last check (a `clock_gettime` between two `rdtsc`, a few tens of ns once a millisecond). A check that
//! finds the clocks [`TOLERANCE_NS`] (50 µs) or more apart recalibrates the header, under the clock's
//! robust lock, for every process at once: a new anchor at that instant and the scale measured from the
//! old anchor to it (over at least [`MIN_BASELINE_NS`], so to well under a ppm). Between two checks the
//! clocks part by at most the rate at which the kernel's clock is slewed against the TSC (NTP slews by
//! at most 500 ppm: 0.5 µs in a millisecond), so a read is within the tolerance plus that plus the
//! check's own uncertainty, inside the bound. A recalibration moves a process's time by at most the
//! tolerance, forward or back (the algorithms take times slightly out of order: threads already read
//! the time before taking a shard's lock).
//!
//! **The kernel's clock instead.** A region is made on the kernel's clock, and one made on the TSC is
//! switched to it (for good, for every process), when the TSC cannot be trusted to track the kernel's
//! clock: not an x86-64 CPU, no invariant TSC (CPUID), the kernel's own clocksource is not the TSC (the
//! kernel checks the TSC at boot and watches it; it switches away from a TSC it finds unstable),
//! `rdtsc` is disabled in the process (`prctl(PR_SET_TSC)`), or a recalibration did not hold for
//! [`MIN_BASELINE_NS`] (the TSC is not running at the kernel's rate: another rate after a migration, a
//! counter that jumped). A process that cannot read the TSC switches the region when it attaches.
//!
//! **Robust.** The header keeps two records and a sequence number that names the current one: a
//! recalibration writes the other record, then publishes it by bumping the number, so a process killed
//! at any instant leaves a whole record in force, and readers never see a half-written one (they check
//! the number before and after). Each record carries a checksum: bytes that are not a record (corrupt)
//! are healed at the next read, re-anchored on the other record's scale if that one is whole, else on
//! the kernel's clock.

// The region is page-aligned and lays every part out at a multiple of 64 bytes.
#![allow(clippy::cast_ptr_alignment)]

use std::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::layout::SharedRegion;
use super::lock::SharedMutex;

/// The most a region clock's time is from `CLOCK_MONOTONIC` at the instant it is read (see the module).
pub const DRIFT_BOUND_NS: u64 = 100_000;
/// Clocks found this far apart or more at a check are recalibrated.
pub const TOLERANCE_NS: u64 = 50_000;
/// How often each process checks the region clock against the kernel's (at its first read this long
/// after the last check).
pub const CHECK_NS: u64 = 1_000_000;
/// A recalibration must hold this long: one needed sooner after the last means the TSC does not run at
/// the kernel clock's rate (a rate off by more than `TOLERANCE_NS / MIN_BASELINE_NS`, 1,000 ppm: twice
/// what NTP ever slews), and the region goes to the kernel's clock.
pub const MIN_BASELINE_NS: u64 = 50_000_000;
/// How long the creator measures the TSC's rate at least (from `CLOCK_MONOTONIC` readings at both ends,
/// each within a few tens of ns: a rate within about 50 ppm, refined by the first recalibration), and
/// at most (longer while its readings are loose: a process preempted as it reads).
const CALIBRATION_NS: u64 = 2_000_000;
const MAX_CALIBRATION_NS: u64 = 100_000_000;
/// The uncertainty of the rate the creator measures, in ppm, that ends its measurement.
const CALIBRATION_PPM: u64 = 50;
/// The widest a pair of readings (TSC, kernel, TSC) may be to judge the clocks by.
const PAIR_GAP_NS: u64 = 10_000;
/// Nanoseconds per tick (32.32 fixed point) a TSC may have: 100 MHz to 16 GHz.
const MIN_SCALE: u64 = 1 << 32 >> 4; // 0.0625 ns a tick: 16 GHz
const MAX_SCALE: u64 = 10 << 32; // 10 ns a tick: 100 MHz
/// How long a process waits for the clock's lock to recalibrate: a holder keeps it for microseconds; a
/// stopped one is not waited for (the process reads the kernel's clock meanwhile).
const LOCK_WAIT: Duration = Duration::from_millis(1);

/// `CLOCK_MONOTONIC` in nanoseconds (the vDSO: no system call).
#[inline]
#[must_use]
pub fn kernel_now_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid pointer; CLOCK_MONOTONIC cannot fail on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    #[allow(clippy::cast_sign_loss)]
    let nanos = (now.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(now.tv_nsec as u64);
    nanos
}

/// The TSC (0 where there is none: such a process never uses it, see `tsc_usable`).
#[inline]
fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rdtsc` exists on every x86-64 CPU; it is used only once `tsc_usable` found it enabled.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// Whether this process may read region times from the TSC (see the module), found once.
fn tsc_usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    #[cfg(test)]
    if tests::KERNEL_ONLY.load(Ordering::Relaxed) {
        return false;
    }
    *USABLE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let cpuid = raw_cpuid::CpuId::new();
            let invariant = cpuid.get_advanced_power_mgmt_info().is_some_and(|apm| apm.has_invariant_tsc());
            let kernel = std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
                .is_ok_and(|source| source.trim() == "tsc");
            invariant && kernel && tsc_enabled()
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Whether `rdtsc` is allowed in this process (`prctl(PR_SET_TSC, PR_TSC_SIGSEGV)` makes it fault).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn tsc_enabled() -> bool {
    let mut mode: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes the mode into the int it is given.
    let got = unsafe { libc::prctl(libc::PR_GET_TSC, &raw mut mode) };
    got == 0 && mode == libc::PR_TSC_ENABLE
}

#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
fn tsc_enabled() -> bool {
    false
}

/// `ticks` of a TSC whose tick is `scale` ns (32.32 fixed point), in ns.
#[inline]
#[allow(clippy::cast_possible_truncation)] // u64 nanoseconds last 584 years
const fn scaled(ticks: u64, scale: u64) -> u64 {
    ((ticks as u128 * scale as u128) >> 32) as u64
}

/// One calibration: the region's time at a TSC reading is `ns + (tsc - anchor) × scale`; a scale of 0
/// is the kernel's clock. `sum` checks the three (a zeroed record is no record).
#[repr(C)]
#[derive(Debug, Default)]
struct Record {
    tsc: AtomicU64,
    ns: AtomicU64,
    scale: AtomicU64,
    sum: AtomicU64,
}

/// A record's values, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Calibration {
    tsc: u64,
    ns: u64,
    scale: u64,
}

impl Calibration {
    const KERNEL: Self = Self { tsc: 0, ns: 0, scale: 0 };

    #[inline]
    const fn sum(&self) -> u64 {
        (self.tsc ^ self.ns.rotate_left(21) ^ self.scale.rotate_left(42) ^ 0x7263_6c6f_636b_2121)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ 0x5bd1_e995
    }

    /// The region's time at TSC reading `at`, and whether `at` is at or after the anchor.
    #[inline]
    fn at(&self, at: u64) -> (u64, bool) {
        let ticks = at.wrapping_sub(self.tsc);
        if ticks >> 63 == 0 {
            (self.ns.wrapping_add(scaled(ticks, self.scale)), true)
        } else {
            (self.ns.wrapping_sub(scaled(ticks.wrapping_neg(), self.scale)), false)
        }
    }

    const fn is_kernel(&self) -> bool {
        self.scale == 0
    }

    /// A scale a TSC can have (see `MIN_SCALE`).
    const fn sane(scale: u64) -> bool {
        scale >= MIN_SCALE && scale <= MAX_SCALE
    }
}

/// The clock's part of the region's header: the current record's number (it counts the records
/// published; the current one is `records[seq % 2]`), two records, and the lock a recalibration takes.
#[repr(C, align(64))]
pub struct ClockHead {
    seq: AtomicU64,
    _pad: [u64; 3],
    records: [Record; 2],
    lock: SharedMutex,
}

impl ClockHead {
    /// Calibrates the clock of a new region: on the TSC when this process may use it, else the kernel's.
    /// Takes `CALIBRATION_NS` (the creator alone, before the region is ready).
    ///
    /// # Safety
    /// `at` is zeroed memory for a `ClockHead` in a region no other process uses yet.
    ///
    /// # Errors
    /// The lock cannot be made (see `SharedMutex::init`).
    pub unsafe fn init(at: *mut Self) -> crate::error::Result<()> {
        // SAFETY: the caller's promise.
        let head = unsafe {
            SharedMutex::init(&raw mut (*at).lock)?;
            &*at
        };
        let calibration = if tsc_usable() { measure().unwrap_or(Calibration::KERNEL) } else { Calibration::KERNEL };
        head.publish(0, &calibration);
        head.seq.store(0, Ordering::Release);
        Ok(())
    }

    /// Writes `calibration` as record `seq % 2` (not the current one, unless the head is new).
    fn publish(&self, seq: u64, calibration: &Calibration) {
        let record = &self.records[usize::from(seq & 1 == 1)];
        record.tsc.store(calibration.tsc, Ordering::Relaxed);
        record.ns.store(calibration.ns, Ordering::Relaxed);
        record.scale.store(calibration.scale, Ordering::Relaxed);
        record.sum.store(calibration.sum(), Ordering::Relaxed);
        self.seq.store(seq, Ordering::Release);
    }

    /// Record `seq % 2` as it is, whole or not.
    #[inline]
    fn record(&self, seq: u64) -> (Calibration, u64) {
        let record = &self.records[usize::from(seq & 1 == 1)];
        let calibration = Calibration {
            tsc: record.tsc.load(Ordering::Relaxed),
            ns: record.ns.load(Ordering::Relaxed),
            scale: record.scale.load(Ordering::Relaxed),
        };
        (calibration, record.sum.load(Ordering::Relaxed))
    }

    /// The current record's number and values, when they were read whole (`None`: a recalibration
    /// published twice while it was read; or the record's checksum fails: `Some((seq, None))`).
    #[inline]
    fn current(&self) -> Option<(u64, Option<Calibration>)> {
        let seq = self.seq.load(Ordering::Acquire);
        let (calibration, sum) = self.record(seq);
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != seq {
            return None;
        }
        Some((seq, (sum == calibration.sum()).then_some(calibration)))
    }

    /// Which clock the region's times are in now.
    #[must_use]
    pub fn kind(&self) -> ClockKind {
        match self.current() {
            Some((_, Some(calibration))) if calibration.is_kernel() => ClockKind::Kernel,
            Some((_, Some(_))) => ClockKind::Tsc,
            _ => ClockKind::Unknown,
        }
    }
}

/// The clock a region's times are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    /// The TSC, with the header's calibration.
    Tsc,
    /// The kernel's `CLOCK_MONOTONIC`.
    Kernel,
    /// Not a whole record now (being replaced, or corrupt: healed at the next read).
    Unknown,
}

impl ClockKind {
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Tsc => "tsc",
            Self::Kernel => "kernel",
            Self::Unknown => "unknown",
        }
    }
}

/// A TSC reading and `CLOCK_MONOTONIC` read between two TSC readings, the tightest of a few tries: the
/// TSC at the middle, the kernel's time, and half the two TSC readings' distance (the uncertainty, in
/// ticks). `None` when no try was tight (the process kept being preempted in between).
fn pair(tries: usize, most_ticks: u64) -> Option<(u64, u64, u64)> {
    let mut best: Option<(u64, u64, u64)> = None;
    for _ in 0..tries {
        let before = tsc();
        let kernel = kernel_now_ns();
        let after = tsc();
        let half = after.wrapping_sub(before) / 2;
        if after >= before && best.is_none_or(|(_, _, was)| half < was) {
            best = Some((before + half, kernel, half));
        }
    }
    best.filter(|&(_, _, half)| half <= most_ticks)
}

/// The TSC's scale, measured over `CALIBRATION_NS` or longer until its uncertainty (the readings' at
/// both ends over the ticks between) is within `CALIBRATION_PPM`, anchored at the end (`None`: no TSC
/// reading could be trusted: the TSC went back, or the process was preempted in every try).
fn measure() -> Option<Calibration> {
    // No scale yet: a gap of 10 µs at the fastest TSC (16 GHz) at most.
    let most = PAIR_GAP_NS * 16;
    let (tsc0, ns0, half0) = pair(16, most)?;
    let mut slept = CALIBRATION_NS;
    std::thread::sleep(Duration::from_nanos(CALIBRATION_NS));
    loop {
        let (tsc1, ns1, half1) = pair(16, most)?;
        let (ticks, nanos) = (tsc1.checked_sub(tsc0)?, ns1.checked_sub(ns0)?);
        let precise = u128::from(half0 + half1) * 1_000_000 <= u128::from(ticks) * u128::from(CALIBRATION_PPM);
        if precise || slept >= MAX_CALIBRATION_NS {
            let scale = u64::try_from((u128::from(nanos) << 32) / u128::from(ticks.max(1))).ok()?;
            return Calibration::sane(scale).then_some(Calibration { tsc: tsc1, ns: ns1, scale });
        }
        std::thread::sleep(Duration::from_nanos(CALIBRATION_NS));
        slept += CALIBRATION_NS;
    }
}

/// Ticks after its anchor past which a record is anchored anew (about a year and a half at 1.5 GHz):
/// the deadline of a check is kept in 47 bits of 1,024 ticks.
const MAX_TICKS: u64 = 1 << 56;

/// The verdict of a check: the clocks within the tolerance (the region's time then, and the TSC
/// reading it is from), or apart by more (recalibrate).
enum Verdict {
    Within(u64, u64),
    Off,
}

/// Compares `calibration` with the kernel's clock now. Readings too loose to tell (the process was
/// preempted in every try) leave the record standing: its writer judged it.
fn check(calibration: &Calibration) -> Verdict {
    let most = u64::try_from((u128::from(PAIR_GAP_NS) << 32) / u128::from(calibration.scale.max(1))).unwrap_or(0);
    let Some((at, kernel, half)) = pair(4, most) else {
        let now = tsc();
        return Verdict::Within(calibration.at(now).0, now);
    };
    let region = calibration.at(at).0;
    let uncertainty = scaled(half, calibration.scale);
    if region.abs_diff(kernel) >= TOLERANCE_NS + uncertainty || at.wrapping_sub(calibration.tsc) >= MAX_TICKS {
        Verdict::Off
    } else {
        Verdict::Within(region, at)
    }
}

/// A process's view of a region's clock: the header of the region its states live in now (a move to
/// another region's file follows it: see [`RegionClock::follow`]), and what this process last checked.
#[derive(Debug)]
pub struct RegionClock {
    head: AtomicPtr<ClockHead>,
    /// Every region the clock has read, kept mapped for its life (a thread may still read one it moved
    /// away from).
    regions: Mutex<Vec<Arc<SharedRegion>>>,
    /// The record this process checked last (`CHECKED` and the low 16 bits of its number), and until when
    /// (ticks after its anchor, over 1,024, in the high 47 bits) reads need no check: one word, so that a
    /// thread never reads one record's number with another's deadline. 0: none checked.
    checked: AtomicU64,
    /// Whether this process may read the TSC (see `tsc_usable`).
    tsc: bool,
}

impl RegionClock {
    /// The clock of `region`, checked now: a process that cannot read the TSC switches the region to the
    /// kernel's clock (see the module).
    #[must_use]
    pub fn new(region: &Arc<SharedRegion>) -> Self {
        let clock = Self {
            head: AtomicPtr::new(region.clock_head().cast_mut()),
            regions: Mutex::new(vec![Arc::clone(region)]),
            checked: AtomicU64::new(0),
            tsc: tsc_usable(),
        };
        let _ = clock.now_ns();
        clock
    }

    /// Reads the clock of `region` from now on (the states moved there: see `Limiter::move_region`).
    pub fn follow(&self, region: &Arc<SharedRegion>) {
        let mut regions = self.regions.lock();
        if !regions.iter().any(|known| Arc::ptr_eq(known, region)) {
            regions.push(Arc::clone(region));
        }
        self.head.store(region.clock_head().cast_mut(), Ordering::Release);
        self.checked.store(0, Ordering::Release);
    }

    #[inline]
    fn head(&self) -> &ClockHead {
        // SAFETY: the head of a region in `regions`, kept mapped for the life of `self`.
        unsafe { &*self.head.load(Ordering::Acquire) }
    }

    /// Nanoseconds on the region's clock (see the module): the TSC through the header's record, checked
    /// against the kernel's clock every `CHECK_NS`, or the kernel's clock itself.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        let head = self.head();
        if let Some((seq, Some(calibration))) = head.current() {
            let checked = self.checked.load(Ordering::Acquire);
            if checked & CHECKED_MASK == checked_bits(seq) {
                if calibration.is_kernel() {
                    return kernel_now_ns();
                }
                // Before the anchor (a reading taken as another process anchored anew) wraps: checked.
                let ticks = tsc().wrapping_sub(calibration.tsc);
                if ticks >> 10 < checked >> 17 {
                    return calibration.ns.wrapping_add(scaled(ticks, calibration.scale));
                }
            }
        }
        self.now_checked(head)
    }

    /// A read that checks first: the record is new to this process, its check is due, the TSC is behind
    /// its anchor, or the record is not whole.
    #[cold]
    #[inline(never)]
    fn now_checked(&self, head: &ClockHead) -> u64 {
        for _ in 0..8 {
            let Some((seq, found)) = head.current() else { continue };
            let rewritten = match found {
                // Not a whole record: healed.
                None => self.rewrite(head, seq, |now| healed(head, seq, now, self.tsc)),
                Some(calibration) if calibration.is_kernel() => {
                    self.checked.store(checked_bits(seq), Ordering::Release);
                    return kernel_now_ns();
                }
                Some(_) if !self.tsc => self.rewrite(head, seq, |_| Some(Calibration::KERNEL)),
                Some(calibration) => match check(&calibration) {
                    Verdict::Within(now, at) => {
                        let ticks = at.saturating_sub(calibration.tsc).saturating_add(ticks_in(CHECK_NS, &calibration));
                        self.checked.store((ticks >> 10) << 17 | checked_bits(seq), Ordering::Release);
                        return now;
                    }
                    Verdict::Off => self.rewrite(head, seq, |now| now.map(|now| recalibrated(&calibration, now))),
                },
            };
            if !rewritten {
                // The lock is held by a process that does not let go, or no reading could be trusted:
                // the kernel's time for this read (the record is not to be trusted), and a check again
                // at the next.
                return kernel_now_ns();
            }
        }
        kernel_now_ns()
    }

    /// Under the clock's lock, replaces record `seq`, if it is still the current one, by what `make`
    /// makes of a TSC and kernel reading taken then (`None`: no tight reading could be had, or this
    /// process does not read the TSC); `make` may decline (`None`). Whether the current record is now
    /// another (published here or meanwhile by another process).
    fn rewrite(
        &self,
        head: &ClockHead,
        seq: u64,
        make: impl FnOnce(Option<(u64, u64)>) -> Option<Calibration>,
    ) -> bool {
        let Some(_held) = head.lock.lock_within(LOCK_WAIT) else { return false };
        if head.seq.load(Ordering::Acquire) != seq {
            return true;
        }
        let now = if self.tsc { pair(8, PAIR_GAP_NS * 20).map(|(at, kernel, _)| (at, kernel)) } else { None };
        let Some(calibration) = make(now) else { return false };
        head.publish(seq.wrapping_add(1), &calibration);
        self.checked.store(0, Ordering::Release);
        true
    }

    /// Which clock the region's times are in.
    #[must_use]
    pub fn kind(&self) -> ClockKind {
        self.head().kind()
    }

    /// Makes the next read check the clock (tests).
    #[cfg(test)]
    pub(crate) fn check_now(&self) {
        self.checked.store(u64::MAX, Ordering::Release);
    }
}

/// Marks a checked record in `RegionClock::checked`, beside the low bits of its number.
const CHECKED: u64 = 1 << 16;
const CHECKED_MASK: u64 = (1 << 17) - 1;

/// The low bits of `RegionClock::checked` for record `seq`.
#[inline]
const fn checked_bits(seq: u64) -> u64 {
    CHECKED | (seq & 0xFFFF)
}

/// `nanos` in ticks of `calibration`'s TSC.
fn ticks_in(nanos: u64, calibration: &Calibration) -> u64 {
    u64::try_from((u128::from(nanos) << 32) / u128::from(calibration.scale.max(1))).unwrap_or(u64::MAX)
}

/// The record that replaces `calibration`, found off by a check, given a TSC and kernel reading `now`:
/// anchored there, with the rate measured from the old anchor; the kernel's clock when the old anchor is
/// younger than `MIN_BASELINE_NS` (a recalibration that did not hold).
fn recalibrated(calibration: &Calibration, (at, kernel): (u64, u64)) -> Calibration {
    let (ticks, nanos) = (at.wrapping_sub(calibration.tsc), kernel.wrapping_sub(calibration.ns));
    if ticks >> 63 != 0 || nanos >> 63 != 0 || nanos < MIN_BASELINE_NS {
        return Calibration::KERNEL;
    }
    let scale = u64::try_from((u128::from(nanos) << 32) / u128::from(ticks.max(1))).unwrap_or(0);
    if Calibration::sane(scale) {
        Calibration { tsc: at, ns: kernel, scale }
    } else {
        Calibration::KERNEL
    }
}

/// The record that replaces record `seq`, which is not whole: anchored at `now` on the other record's
/// scale if that one is whole and on the TSC, else the kernel's clock (also when this process does not
/// read the TSC); `None` (healed later) when the other record could be used but no reading was tight.
fn healed(head: &ClockHead, seq: u64, now: Option<(u64, u64)>, tsc: bool) -> Option<Calibration> {
    let (other, sum) = head.record(seq.wrapping_add(1));
    if !tsc || sum != other.sum() || !Calibration::sane(other.scale) {
        return Some(Calibration::KERNEL);
    }
    now.map(|(at, kernel)| Calibration { tsc: at, ns: kernel, scale: other.scale })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// Makes `tsc_usable` false in this process (a child that plays a process that cannot use the TSC).
    pub static KERNEL_ONLY: AtomicBool = AtomicBool::new(false);

    fn dir(test: &str) -> PathBuf {
        crate::state_map::region::test_dir("clock", test)
    }

    fn region(dir: &std::path::Path) -> Arc<SharedRegion> {
        Arc::new(SharedRegion::open(&dir.join("r"), 1_000, 0).unwrap())
    }

    /// The calibration in force (whole).
    fn current(region: &SharedRegion) -> (u64, Calibration) {
        // SAFETY: the region's head, mapped while `region` lives.
        let head = unsafe { &*region.clock_head() };
        let (seq, calibration) = head.current().unwrap();
        (seq, calibration.unwrap())
    }

    /// Writes `calibration` as the current record, as a recalibration would.
    fn force(region: &SharedRegion, calibration: &Calibration) {
        // SAFETY: as in `current`.
        let head = unsafe { &*region.clock_head() };
        let seq = head.seq.load(Ordering::Acquire);
        head.publish(seq + 1, calibration);
    }

    /// Whether this machine runs the region clock on the TSC (else the tests of the TSC's calibration
    /// have nothing to test; the kernel's clock is tested by the fallback tests).
    fn on_tsc(region: &SharedRegion) -> bool {
        let (_, calibration) = current(region);
        !calibration.is_kernel()
    }

    /// Reads `clock` `reads` times between two readings of `CLOCK_MONOTONIC`: each read must lie within
    /// the drift bound of that window.
    fn assert_tracks_the_kernel(clock: &RegionClock, reads: usize) {
        let mut worst = 0i128;
        for _ in 0..reads {
            let before = kernel_now_ns();
            let now = clock.now_ns();
            let after = kernel_now_ns();
            let ahead = i128::from(now) - i128::from(after);
            let behind = i128::from(before) - i128::from(now);
            worst = worst.max(ahead).max(behind);
        }
        assert!(worst <= i128::from(DRIFT_BOUND_NS), "the region clock was {worst} ns outside the kernel's clock");
    }

    #[test]
    fn the_region_clock_tracks_the_kernel_clock_within_the_bound() {
        let dir = dir("tracks");
        let region = region(&dir);
        let clock = RegionClock::new(&region);
        // Reads through the hot path, and reads each checked (as at every CHECK_NS).
        assert_tracks_the_kernel(&clock, 200_000);
        for _ in 0..2_000 {
            clock.check_now();
            assert_tracks_the_kernel(&clock, 1);
        }
        if on_tsc(&region) {
            assert_eq!(clock.kind(), ClockKind::Tsc);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_calibration_off_by_more_than_the_tolerance_is_recalibrated_for_every_process() {
        let dir = dir("recalibrated");
        let region = region(&dir);
        if !on_tsc(&region) {
            return std::fs::remove_dir_all(&dir).unwrap();
        }
        let (_, good) = current(&region);
        // Anchored a second ago on a rate 1% fast: 10 ms off now, with a baseline long enough to measure
        // the rate again.
        let second = (1_000_000_000u128 << 32) / u128::from(good.scale);
        let (at, kernel, _) = pair(16, u64::MAX).unwrap();
        let off = Calibration {
            tsc: at - u64::try_from(second).unwrap(),
            ns: kernel - 1_000_000_000,
            scale: good.scale + good.scale / 100,
        };
        force(&region, &off);
        let (seq, _) = current(&region);
        let clock = RegionClock::new(&region);
        let other = RegionClock::new(&region);
        assert_tracks_the_kernel(&clock, 10_000);
        let (after, fixed) = current(&region);
        assert!(after > seq, "not recalibrated");
        assert!(!fixed.is_kernel(), "a recalibration that holds stays on the TSC");
        let ppm = fixed.scale.abs_diff(good.scale) * 1_000_000 / good.scale;
        assert!(ppm < 200, "the rate measured again is {ppm} ppm from the creator's");
        // Every process reads the new record.
        assert_tracks_the_kernel(&other, 10_000);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_recalibration_that_does_not_hold_switches_the_region_to_the_kernel_clock() {
        let dir = dir("no-hold");
        let region = region(&dir);
        if !on_tsc(&region) {
            return std::fs::remove_dir_all(&dir).unwrap();
        }
        let (_, good) = current(&region);
        // Anchored now on half the rate: off by the tolerance within 100 µs, long before a baseline.
        let (at, kernel, _) = pair(16, u64::MAX).unwrap();
        force(&region, &Calibration { tsc: at, ns: kernel, scale: good.scale / 2 });
        let clock = RegionClock::new(&region);
        let other = RegionClock::new(&region);
        let mut reads = 0u64;
        while clock.kind() != ClockKind::Kernel {
            clock.check_now();
            let _ = clock.now_ns();
            reads += 1;
            assert!(reads < 100_000_000, "never switched");
        }
        assert_tracks_the_kernel(&clock, 1_000);
        assert_tracks_the_kernel(&other, 1_000);
        assert_eq!(other.kind(), ClockKind::Kernel);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_record_is_healed_on_the_other_records_scale() {
        let dir = dir("corrupt");
        let region = region(&dir);
        let clock = RegionClock::new(&region);
        let was_tsc = on_tsc(&region);
        // A recalibration in force (so the other record holds the creator's), then garbage over it.
        let (_, good) = current(&region);
        force(&region, &good);
        // SAFETY: the region's head, mapped while `region` lives.
        let head = unsafe { &*region.clock_head() };
        let seq = head.seq.load(Ordering::Acquire);
        head.records[usize::from(seq & 1 == 1)].ns.store(0xDEAD_BEEF, Ordering::Relaxed);
        assert_eq!(head.kind(), ClockKind::Unknown);
        assert_tracks_the_kernel(&clock, 1_000);
        assert_eq!(clock.kind(), if was_tsc { ClockKind::Tsc } else { ClockKind::Kernel });
        // Both records garbage: the kernel's clock.
        for record in &head.records {
            record.sum.store(1, Ordering::Relaxed);
        }
        assert_tracks_the_kernel(&clock, 1_000);
        assert_eq!(clock.kind(), ClockKind::Kernel);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_process_that_cannot_read_the_tsc_moves_the_region_to_the_kernel_clock() {
        let dir = dir("kernel-only");
        let region = region(&dir);
        let clock = RegionClock::new(&region);
        // SAFETY: the child only reads the clock and ends.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            KERNEL_ONLY.store(true, Ordering::Relaxed);
            let mine = RegionClock::new(&region);
            let ok = mine.kind() == ClockKind::Kernel;
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(i32::from(!ok)) };
        }
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &raw mut status, 0) };
        assert_eq!(status, 0, "the child did not find the region on the kernel clock");
        assert_tracks_the_kernel(&clock, 1_000);
        assert_eq!(clock.kind(), ClockKind::Kernel);
        // A region made by such a process starts on the kernel's clock.
        // SAFETY: as above.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            KERNEL_ONLY.store(true, Ordering::Relaxed);
            let made = SharedRegion::open(&dir.join("kernel"), 1_000, 0).is_ok_and(|made| current(&made).1.is_kernel());
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(i32::from(!made)) };
        }
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &raw mut status, 0) };
        assert_eq!(status, 0, "a region made by a process that cannot read the TSC is not on the kernel clock");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_clock_follows_the_states_to_another_regions_header() {
        let dir = dir("follow");
        let first = region(&dir);
        let second = Arc::new(SharedRegion::open(&dir.join("second"), 1_000, 0).unwrap());
        force(&second, &Calibration::KERNEL);
        let clock = RegionClock::new(&first);
        clock.follow(&second);
        assert_eq!(clock.kind(), ClockKind::Kernel);
        assert_tracks_the_kernel(&clock, 1_000);
        // The first region stays mapped as long as the clock (a thread may still read it).
        drop(first);
        std::fs::remove_file(dir.join("r")).unwrap();
        assert_eq!(clock.regions.lock().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The environment variable that makes this test binary, run again, the "spawned" process.
    const SPAWNED: &str = "RK_CLOCK_SPAWNED_REGION";

    /// Run by `spawned_and_forked_processes_read_the_same_time`'s spawned process: attaches to the
    /// region by its path, then answers each TSC reading on stdin with the region time it converts it
    /// to, and each empty line with the time it reads.
    #[test]
    #[ignore = "a helper: run by spawned_and_forked_processes_read_the_same_time"]
    fn spawned_helper() {
        use std::io::BufRead;
        let Ok(path) = std::env::var(SPAWNED) else { return };
        let region = Arc::new(SharedRegion::open(std::path::Path::new(&path), 1_000, 0).unwrap());
        let clock = RegionClock::new(&region);
        for line in std::io::stdin().lock().lines() {
            let line = line.unwrap();
            let answer = match line.trim().parse::<u64>() {
                Ok(at) => current(&region).1.at(at).0,
                Err(_) => clock.now_ns(),
            };
            println!("{answer}");
        }
    }

    /// Asks a process (through `ask`) for the region's time `rounds` times: each answer must lie within
    /// the asker's own readings before and after (up to `slack`), and a TSC reading must convert to the
    /// same time in both.
    fn agree(clock: &RegionClock, region: &SharedRegion, mut ask: impl FnMut(Option<u64>) -> u64) {
        let slack = 2_000; // TSCs of two cores differ by far less (the kernel checks them at boot)
        for _ in 0..200 {
            let at = tsc();
            assert_eq!(ask(Some(at)), current(region).1.at(at).0, "one reading, two times");
            let before = clock.now_ns();
            let theirs = ask(None);
            let after = clock.now_ns();
            assert!(before <= theirs + slack && theirs <= after + slack, "{before} {theirs} {after}");
        }
    }

    #[test]
    fn spawned_and_forked_processes_read_the_same_time() {
        use std::io::{BufRead, BufReader, Write};
        let dir = dir("agree");
        let region = region(&dir);
        let clock = RegionClock::new(&region);

        // Forked: inherits the mapping; talks through two pipes.
        let (mut to_child, mut from_child) = ([0i32; 2], [0i32; 2]);
        // SAFETY: two arrays of two fds each (closed on exec: the spawned process below holds none).
        unsafe {
            assert_eq!(libc::pipe2(to_child.as_mut_ptr(), libc::O_CLOEXEC), 0);
            assert_eq!(libc::pipe2(from_child.as_mut_ptr(), libc::O_CLOEXEC), 0);
        }
        // SAFETY: the child reads the clock, writes to a pipe, and ends with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the parent's ends, closed so that the parent's closing its own ends us.
            unsafe {
                libc::close(to_child[1]);
                libc::close(from_child[0]);
            }
            let mine = RegionClock::new(&region);
            let mut word = [0u8; 8];
            loop {
                // SAFETY: reads into an 8-byte buffer from our pipe.
                if unsafe { libc::read(to_child[0], word.as_mut_ptr().cast(), 8) } != 8 {
                    // SAFETY: ends the child at once.
                    unsafe { libc::_exit(0) };
                }
                let at = u64::from_ne_bytes(word);
                let answer = if at == u64::MAX { mine.now_ns() } else { current(&region).1.at(at).0 };
                // SAFETY: writes 8 bytes to our pipe.
                unsafe { libc::write(from_child[1], answer.to_ne_bytes().as_ptr().cast(), 8) };
            }
        }
        let ask = |at: Option<u64>| {
            let word = at.unwrap_or(u64::MAX).to_ne_bytes();
            let mut answer = [0u8; 8];
            // SAFETY: 8 bytes each way through our pipes.
            unsafe {
                assert_eq!(libc::write(to_child[1], word.as_ptr().cast(), 8), 8);
                assert_eq!(libc::read(from_child[0], answer.as_mut_ptr().cast(), 8), 8);
            }
            u64::from_ne_bytes(answer)
        };
        // SAFETY: the child's ends, which the parent does not use.
        unsafe {
            libc::close(to_child[0]);
            libc::close(from_child[1]);
        }
        agree(&clock, &region, ask);
        // SAFETY: closing our ends ends the child; then it is reaped.
        unsafe {
            libc::close(to_child[1]);
            libc::close(from_child[0]);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }

        // Spawned: a fresh process (this test binary again) that opens the region by its path.
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "state_map::region::clock::tests::spawned_helper", "--ignored", "--nocapture"])
            .args(["--test-threads", "1", "-q"])
            .env(SPAWNED, dir.join("r"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut ask = |at: Option<u64>| {
            writeln!(input, "{}", at.map(|at| at.to_string()).unwrap_or_default()).unwrap();
            loop {
                let mut line = String::new();
                assert_ne!(output.read_line(&mut line).unwrap(), 0, "the spawned process ended");
                // The test harness's own lines ("running 1 test") are not answers.
                if let Ok(answer) = line.trim().parse::<u64>() {
                    return answer;
                }
            }
        };
        agree(&clock, &region, &mut ask);
        drop(input);
        assert!(child.wait().unwrap().success());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
