//! What the shared region holds and where: the limiter's identity (hash seeds, bound, shape), the
//! groups every process has named (so that a group has one id, and its limits are known, across
//! processes), and one part per shard of the in-memory map (its lock, counts, slots and log chunks).
//!
//! Every process derives the same offsets from the header's numbers; a process built with another
//! layout is refused by the region's layout version.

// The region is page-aligned and lays every part out at a multiple of 64 bytes.
#![allow(clippy::cast_ptr_alignment)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::algorithm::{Kind, Limit};
use crate::error::{Error, Result};
use crate::rate::Rate;
use crate::state_map::StateMap;

use super::clock::{ClockHead, ClockKind};
use super::file::Region;
use super::lock::{Guard, SharedMutex};
use super::table::{
    alive, first_block_len, Chunk, JournalHead, Lease, LeaseOverflow, PoolHead, RegionSlot, RegionTable, ShardCounts,
    ShardHead, ShardPlace, CHUNK_ENTRIES, MAX_CHUNKS, MAX_DEFS, OVERFLOW_LEASES,
};

/// Bumped whenever anything in the region is laid out differently.
pub const LAYOUT: u32 = 6;
/// Group names a region holds at once, as memory does: a name no running process uses is freed.
pub const MAX_GROUPS: usize = crate::state_map::MAX_GROUP_NAMES;
/// Peers refused most, kept per shard.
use super::table::{truncate, NAME_BYTES};
const META_BYTES: usize = 4096;
/// Process slots: each counts the group names it uses apart; past them, processes share slots, and
/// names are no longer freed (a sharer's use cannot be told).
const MAX_PROCESSES: usize = 256;
/// Words of a group's bitmap of process slots using it.
const USER_WORDS: usize = MAX_PROCESSES / 64;
/// Fixed seeds for group names' hashes: the same in every process.
const NAME_SEEDS: [u64; 4] = [0x7261_7465_6b65_6570, 0x6572_2067_726f_7570, 0x6e61_6d65_7321, 0x0102_0304];

#[repr(C)]
struct Meta {
    seeds: [u64; 4],
    max_keys: u64,
    shards: u64,
    capacity: u64,
    chunk_count: u64,
    /// States held in the whole region.
    keys: AtomicU64,
    groups: AtomicU32,
    /// Set once processes had to share a slot: names are never freed from then on.
    crowded: AtomicU32,
    groups_lock: SharedMutex,
    /// The pid of each process slot's holder (0: free): which slot's bit a process sets among a group's users.
    processes: [AtomicU32; MAX_PROCESSES],
    /// The clock every process reads the region's times on (see `clock`).
    clock: ClockHead,
}

const _: () = assert!(std::mem::size_of::<Meta>() <= META_BYTES);

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct LimitRecord {
    kind: u32,
    burst_set: u32,
    burst: u64,
    count: u64,
    period_ns: u64,
}

/// A group name the region has given an id (its index), written under the groups' lock.
#[repr(C)]
struct GroupRecord {
    hash: u64,
    name_len: u32,
    /// Set when the last running process that used the name dropped it from its rules (not when it
    /// ended: a restart keeps the limits).
    released: u32,
    name: [u8; NAME_BYTES],
    /// Bumped when the name is taken up again after it was released: its keys start afresh, as a group
    /// removed and added back does in memory.
    generation: u64,
    /// The process slots whose rules have the group, a bit each.
    users: [u64; USER_WORDS],
    /// The seed of the group's keys (from its name and generation).
    seed: u64,
}

/// The limit definitions a region has recorded, so that a state says what it was written under (its
/// `RegionSlot::def`, an index here): every process registers the limits it decides under, and one
/// that meets a state written under another converts it. Records are written once, before `next`
/// counts them, and never change: read without the lock.
#[repr(C, align(64))]
struct DefsHead {
    lock: SharedMutex,
    /// The next id to hand out (ids start at 1; 0 means unrecorded).
    next: AtomicU32,
}

const fn round64(n: usize) -> usize {
    n.div_ceil(64) * 64
}

/// The region's shape, from the limiter's bound: every process works it out alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    shards: usize,
    capacity: usize,
    chunk_count: u32,
}

impl Shape {
    fn new(max_keys: usize, log_entries: usize) -> Result<Self> {
        let shards = StateMap::<()>::shared_shard_count(max_keys);
        let share = max_keys.max(1).div_ceil(shards);
        // A shard is full at 7/8 of its slots (probes stay short): 1.04 times its share at a million keys
        // (245 of 291), so near the bound a shard above its share makes room a little early; beyond that
        // slots are memory (32 bytes each) that Docker's 64 MB /dev/shm cannot spare.
        let capacity = share + share / 8 + 16;
        let chunks = log_entries.div_ceil(CHUNK_ENTRIES);
        let most = MAX_CHUNKS * CHUNK_ENTRIES;
        let chunk_count = u32::try_from(chunks).ok().filter(|&c| c as usize <= MAX_CHUNKS).ok_or_else(|| {
            Error::value("log_entries", format!("at most {most} in a shared region, got {log_entries}"))
        })?;
        Ok(Self { shards, capacity, chunk_count })
    }

    /// A shard's own slots. Its head (lock), counts and first block are in arrays of their own before
    /// them, every shard's together: a decision's lock, and the states of a shard holding few, are then
    /// in a small area that stays in the caches and the TLB.
    const fn shard_bytes(&self) -> usize {
        round64(self.capacity * std::mem::size_of::<RegionSlot>())
    }

    /// The pool of log chunks, after every shard's slots: its head, then its chunks.
    const fn pool_offset(&self) -> usize {
        self.firsts_offset() + self.firsts_bytes() + self.shards * self.shard_bytes()
    }

    const fn heads_bytes(&self) -> usize {
        self.shards * std::mem::size_of::<ShardHead>()
    }

    const fn counts_bytes(&self) -> usize {
        self.shards * std::mem::size_of::<ShardCounts>()
    }

    /// Slots in a shard's first block (see `ShardPlace::first`).
    const fn first_len(&self) -> usize {
        first_block_len(self.capacity)
    }

    /// Where every shard's first block is, after the heads and counts.
    const fn firsts_offset(&self) -> usize {
        self.shards_offset() + self.heads_bytes() + self.counts_bytes()
    }

    /// Every part of the region, named, as (start, end) offsets in its contents: what the fuzz test
    /// corrupts one at a time.
    #[cfg(test)]
    pub(crate) fn areas(&self) -> Vec<(&'static str, usize, usize)> {
        let numbers = std::mem::offset_of!(Meta, keys);
        let lock = std::mem::offset_of!(Meta, groups_lock);
        let processes = std::mem::offset_of!(Meta, processes);
        let heads = self.shards_offset();
        let pool = self.pool_offset();
        vec![
            ("meta numbers", 0, numbers),
            ("meta counts", numbers, lock),
            ("groups lock", lock, processes),
            ("process slots", processes, std::mem::offset_of!(Meta, clock)),
            ("clock", std::mem::offset_of!(Meta, clock), std::mem::size_of::<Meta>()),
            ("group records", Self::groups_offset(), Self::defs_offset()),
            ("limit definitions", Self::defs_offset(), Self::leases_offset()),
            ("overflow leases", Self::leases_offset(), Self::journal_offset()),
            ("journal", Self::journal_offset(), self.gates_offset()),
            ("adaptive gates", self.gates_offset(), heads),
            ("shard heads", heads, heads + self.heads_bytes()),
            ("shard counts", heads + self.heads_bytes(), self.firsts_offset()),
            ("first blocks", self.firsts_offset(), self.firsts_offset() + self.firsts_bytes()),
            ("shard slots", self.firsts_offset() + self.firsts_bytes(), pool),
            ("pool head", pool, pool + std::mem::size_of::<PoolHead>()),
            ("chunks", pool + std::mem::size_of::<PoolHead>(), self.size().unwrap_or(pool)),
        ]
    }

    /// Where shard `shard`'s first block is.
    const fn first_offset(&self, shard: usize) -> usize {
        self.firsts_offset() + shard * self.first_len() * std::mem::size_of::<RegionSlot>()
    }

    /// Every shard's first block, one after the other.
    const fn firsts_bytes(&self) -> usize {
        round64(self.shards * self.first_len() * std::mem::size_of::<RegionSlot>())
    }

    const fn groups_offset() -> usize {
        META_BYTES
    }

    /// The limit definitions: their head, then `MAX_DEFS` records (the first unused).
    const fn defs_offset() -> usize {
        round64(META_BYTES + MAX_GROUPS * std::mem::size_of::<GroupRecord>())
    }

    /// The overflow table of leases (see `LeaseOverflow`): its head, then its entries.
    const fn leases_offset() -> usize {
        round64(Self::defs_offset() + std::mem::size_of::<DefsHead>() + MAX_DEFS * std::mem::size_of::<LimitRecord>())
    }

    /// The journal of rebuilds (see `JournalHead`): its head, then a shard's capacity of slots.
    const fn journal_offset() -> usize {
        round64(
            Self::leases_offset()
                + std::mem::size_of::<LeaseOverflow>()
                + OVERFLOW_LEASES * std::mem::size_of::<Lease>(),
        )
    }

    /// The adaptive limits' gates (see `GatesHead`): their head, then `REGION_GATES` slots.
    const fn gates_offset(&self) -> usize {
        round64(
            Self::journal_offset()
                + std::mem::size_of::<JournalHead>()
                + self.capacity * std::mem::size_of::<RegionSlot>(),
        )
    }

    const fn shards_offset(&self) -> usize {
        round64(self.gates_offset() + std::mem::size_of::<GatesHead>() + REGION_GATES * std::mem::size_of::<GateSlot>())
    }

    fn size(&self) -> Option<usize> {
        let heads = self
            .shards_offset()
            .checked_add(self.heads_bytes())?
            .checked_add(self.counts_bytes())?
            .checked_add(self.firsts_bytes())?;
        let pool = std::mem::size_of::<PoolHead>() + self.chunk_count as usize * std::mem::size_of::<Chunk>();
        self.shard_bytes().checked_mul(self.shards)?.checked_add(heads)?.checked_add(pool)
    }
}

/// Adaptive gates a region holds: every process of the machine decides an adaptive limit on one gate.
/// A gate past them (per-key limits of many keys) is kept in the process's memory instead.
pub const REGION_GATES: usize = 128;
/// Of `REGION_GATES`, the slots a per-key limit never takes: a group's one limit for the machine always
/// finds room, however many keys' limits came first.
const GROUP_GATES_KEPT: usize = 32;

/// The region's adaptive gates (see `crate::adaptive`), under one lock: a gate is touched twice a
/// request that holds its permits, well below a shard's rate, and is never held across other locks.
#[repr(C, align(64))]
struct GatesHead {
    lock: SharedMutex,
    /// Slots in use, from the first.
    len: u64,
}

/// One adaptive gate in the region, and the permits each process slot holds of it, so that those of a
/// process that ended are given back.
#[repr(C)]
struct GateSlot {
    /// The gate's key (0: free).
    key: u64,
    gate: crate::adaptive::Gate,
    held: [u32; MAX_PROCESSES],
}

impl SharedRegion {
    fn gates_head(&self) -> *mut GatesHead {
        // SAFETY: within the region (see `Shape::size`), aligned to 64 bytes.
        unsafe { self.region.contents().add(self.shape.gates_offset()).cast::<GatesHead>() }
    }

    /// Runs `f` on the gate `key` of owner `owner` (made from `settings` at `now` if new), under the
    /// gates' lock, with the permits this process holds of it; `None` when the region holds no more gates.
    /// Permits of processes that ended are given back first when `reclaim`.
    pub fn with_gate<T>(
        &self,
        (key, owner): (u64, u64),
        settings: &crate::adaptive::Settings,
        now: u64,
        reclaim: bool,
        f: impl FnOnce(&mut crate::adaptive::Gate, &mut u32) -> T,
    ) -> Option<T> {
        let key = key.max(1);
        let slot = self.my_slot();
        let head = self.gates_head();
        // SAFETY: initialised by the region's creator (or made anew by `lock_whole`).
        let _held = unsafe { SharedMutex::at(&raw mut (*head).lock) }.lock_whole();
        // SAFETY: under the gates' lock; the slots follow the head, `REGION_GATES` of them.
        let slots = unsafe { std::slice::from_raw_parts_mut(head.add(1).cast::<GateSlot>(), REGION_GATES) };
        let len = unsafe { &mut (*head).len };
        // Corrupt bytes make a bad length: bounded, so that nothing reads past the slots.
        let used = usize::try_from(*len).unwrap_or(REGION_GATES).min(REGION_GATES);
        let index = match slots[..used].iter().position(|s| s.key == key) {
            Some(index) => index,
            None if used < REGION_GATES
                && (settings.per == crate::adaptive::Per::Group || used < REGION_GATES - GROUP_GATES_KEPT) =>
            {
                let fresh = &mut slots[used];
                fresh.key = key;
                fresh.gate = crate::adaptive::Gate::fresh(settings, key, now);
                fresh.gate.owner = owner;
                fresh.held = [0; MAX_PROCESSES];
                *len = used as u64 + 1;
                used
            }
            None => return None,
        };
        let entry = &mut slots[index];
        if entry.gate.is_fresh_slot() {
            // Zeroed or corrupt: set up again rather than decide on nonsense.
            entry.gate = crate::adaptive::Gate::fresh(settings, key, now);
            entry.gate.owner = owner;
            entry.held = [0; MAX_PROCESSES];
        }
        if reclaim {
            for other in 0..MAX_PROCESSES {
                if other != slot && entry.held[other] > 0 && !self.slot_alive(other) {
                    entry.gate.cancel(u64::from(entry.held[other]));
                    entry.held[other] = 0;
                }
            }
        }
        entry.gate.rebound(settings);
        Some(f(&mut entry.gate, &mut entry.held[slot]))
    }

    /// The views of every gate of `owner` in the region, for `stats()`.
    #[must_use]
    pub fn gate_views(&self, owner: u64, settings: &crate::adaptive::Settings) -> Vec<crate::adaptive::GateView> {
        let head = self.gates_head();
        // SAFETY: as in `with_gate`.
        let _held = unsafe { SharedMutex::at(&raw mut (*head).lock) }.lock_whole();
        let slots = unsafe { std::slice::from_raw_parts(head.add(1).cast::<GateSlot>(), REGION_GATES) };
        let used = usize::try_from(unsafe { (*head).len }).unwrap_or(REGION_GATES).min(REGION_GATES);
        slots[..used].iter().filter(|s| s.gate.owner == owner).map(|s| s.gate.view(settings)).collect()
    }

    /// Forgets every gate (a `reset()`).
    pub fn clear_gates(&self) {
        let head = self.gates_head();
        // SAFETY: as in `with_gate`.
        let _held = unsafe { SharedMutex::at(&raw mut (*head).lock) }.lock_whole();
        unsafe { (*head).len = 0 };
    }
}

/// A hint to bring the line at `at` into the caches; it never faults, whatever `at` is (an address
/// outside the region is only a wasted hint).
#[inline]
pub(crate) fn prefetch_line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault; SSE is baseline on x86-64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Where the shared store lives: `/dev/shm/ratekeeper-NAME`, or a path given.
///
/// # Errors
/// A name that is empty, too long, or has characters other than letters, digits, `.`, `_` and `-`.
pub fn region_path(name: Option<&str>, path: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = path {
        return Ok(path.to_owned());
    }
    let name = name.unwrap_or_default();
    let good = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !good {
        return Err(Error::value(
            "name",
            format!("must be 1 to 200 letters, digits, '.', '_' or '-' (not starting with '.'), got {name:?}"),
        ));
    }
    Ok(PathBuf::from("/dev/shm").join(format!("ratekeeper-{name}")))
}

/// The shared region of one limiter, mapped into this process.
pub struct SharedRegion {
    region: Region,
    shape: Shape,
    max_keys: usize,
    /// This process's slot (see `MAX_PROCESSES`; `my_slot`), and whether it claimed one (not `inspect`).
    slot: std::sync::atomic::AtomicUsize,
    claimed: bool,
}

impl std::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRegion")
            .field("path", &self.region.path())
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

impl Drop for SharedRegion {
    /// Gives the process slot back, with its uses of group names (a process that ends without dropping
    /// it is found ended by the next process to look).
    fn drop(&mut self) {
        let slot = self.slot.load(Ordering::Relaxed);
        if self.claimed && self.meta().processes[slot].load(Ordering::Acquire) == std::process::id() {
            self.forget_slot(slot);
            self.meta().processes[slot].store(0, Ordering::Release);
        }
    }
}

// SAFETY: the region is shared memory made for concurrent use: its mutable parts are atomics or are
// written under the region's locks.
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

/// What the whole region holds and has decided, for `stats()` and `inspect`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionSummary {
    pub path: String,
    pub keys: u64,
    pub max_keys: u64,
    pub evictions: u64,
    pub dropped: u64,
    pub allowed: u64,
    pub refused: u64,
    /// Peers refused most across every process, most first.
    pub top_refused: Vec<(String, u64)>,
    /// States held per group name.
    pub group_keys: Vec<(String, u64)>,
    /// Decisions the process asking made without their states (see `state_map::STALL`).
    pub stalls: u64,
    /// The clock the region's times are in: "tsc" (its calibration in the header) or "kernel" (see
    /// `clock`).
    pub clock: &'static str,
}

impl SharedRegion {
    /// Creates the region at `path` for `max_keys` states and `log_entries` sliding-log entries, or
    /// attaches to the one another process made for the same numbers.
    ///
    /// # Errors
    /// As [`Region::open`]: a file that cannot be made, is not this user's own, has another layout or
    /// was made for other numbers; no room for it.
    pub fn open(path: &Path, max_keys: usize, log_entries: usize) -> Result<Self> {
        if !cfg!(target_os = "linux") {
            return Err(Error::value(
                "backend",
                "rk.Shared needs Linux (its robust process-shared mutexes); elsewhere use rk.Redis",
            ));
        }
        let shape = Shape::new(max_keys, log_entries)?;
        let size = shape.size().ok_or_else(|| Error::value("max_keys", "too large for a shared region"))?;
        let region = Region::open(path, size, LAYOUT, |region| Self::init(region, shape, max_keys))?;
        // Another process may have made it with another log pool (`log_entries`): its numbers hold.
        let (recorded, made_for) = Self::recorded_shape(&region)?;
        if made_for != max_keys as u64 {
            return Err(Error::value(
                "max_keys",
                format!(
                    "the shared region {} was made for max_keys={made_for}, this limiter has {max_keys} (give \
                     every process the same max_keys, or another region)",
                    path.display(),
                ),
            ));
        }
        let mut shared = Self { region, shape: recorded, max_keys, slot: 0.into(), claimed: true };
        shared.slot = shared.claim_slot().into();
        if shared.meta().keys.load(Ordering::Relaxed) > shared.slot_count() {
            // Corrupt: counted anew from the shards' counts (read as they are: a count others change
            // meanwhile may end a little off, better than one that says the region is always full).
            let counted = (0..recorded.shards).map(|shard| shared.table(shard).head_counts().0).sum();
            shared.meta().keys.store(counted, Ordering::Relaxed);
        }
        Ok(shared)
    }

    /// Maps an existing region to look at it, never writing or locking it.
    ///
    /// # Errors
    /// As [`Region::inspect`]; a region whose numbers do not add up.
    pub fn inspect(path: &Path) -> Result<Self> {
        let region = Region::inspect(path, LAYOUT)?;
        let (shape, max_keys) = Self::recorded_shape(&region)?;
        let max_keys = usize::try_from(max_keys).unwrap_or(usize::MAX);
        Ok(Self { region, shape, max_keys, slot: 0.into(), claimed: false })
    }

    /// The shape and bound the region's meta records, checked against its checksum and its size.
    fn recorded_shape(region: &Region) -> Result<(Shape, u64)> {
        let corrupt =
            |why: &str| Error::value("path", format!("refusing the shared region {}: {why}", region.path().display()));
        if region.len() < META_BYTES {
            return Err(corrupt("it is too small for its numbers: not a whole ratekeeper region"));
        }
        // SAFETY: the contents hold a meta (checked above); plain integers, valid for any bytes.
        let meta = unsafe { &*region.contents().cast::<Meta>() };
        if region.meta_sum() != meta_sum(meta) {
            return Err(corrupt("its numbers (seeds, max_keys, shape) are corrupt"));
        }
        let shape = Shape {
            shards: usize::try_from(meta.shards).unwrap_or(0),
            capacity: usize::try_from(meta.capacity).unwrap_or(0),
            chunk_count: u32::try_from(meta.chunk_count).unwrap_or(u32::MAX),
        };
        let sane = shape.shards.is_power_of_two()
            && shape.shards <= crate::state_map::MAX_SHARED_SHARDS
            && shape.capacity >= 1
            && u32::try_from(shape.capacity).is_ok()
            && shape.chunk_count as usize <= MAX_CHUNKS;
        if !sane || shape.size() != Some(region.len()) {
            return Err(corrupt("its numbers do not add up to its size: not a whole ratekeeper region"));
        }
        Ok((shape, meta.max_keys))
    }

    fn init(region: &Region, shape: Shape, max_keys: usize) -> Result<()> {
        let base = region.contents();
        // SAFETY: the region was sized for this shape, zeroed, and no other process attaches before
        // `init` returns; each part is written once, at its own offset.
        unsafe {
            let meta = &mut *base.cast::<Meta>();
            meta.seeds = seeds_for_user();
            meta.max_keys = max_keys as u64;
            meta.shards = shape.shards as u64;
            meta.capacity = shape.capacity as u64;
            meta.chunk_count = u64::from(shape.chunk_count);
            region.set_meta_sum(meta_sum(meta))?;
            SharedMutex::init(&raw mut meta.groups_lock)?;
            ClockHead::init(&raw mut meta.clock)?;
            let defs = base.add(Shape::defs_offset()).cast::<DefsHead>();
            SharedMutex::init(&raw mut (*defs).lock)?;
            (*defs).next = AtomicU32::new(1);
            SharedMutex::init(&raw mut (*base.add(Shape::journal_offset()).cast::<JournalHead>()).lock)?;
            SharedMutex::init(&raw mut (*base.add(Shape::leases_offset()).cast::<LeaseOverflow>()).lock)?;
            SharedMutex::init(&raw mut (*base.add(shape.gates_offset()).cast::<GatesHead>()).lock)?;
            for shard in 0..shape.shards {
                SharedMutex::init(&raw mut (*Self::place_in(base, shape, shard).head).lock)?;
            }
            SharedMutex::init(&raw mut (*base.add(shape.pool_offset()).cast::<PoolHead>()).lock)?;
        }
        Ok(())
    }

    /// A process slot for this process: a free one, else one whose process has ended (its uses of
    /// group names forgotten), else one shared with others.
    fn claim_slot(&self) -> usize {
        let pid = std::process::id();
        let processes = &self.meta().processes;
        let take =
            |slot: &AtomicU32, was: u32| slot.compare_exchange(was, pid, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if let Some(free) = processes.iter().position(|slot| take(slot, 0)) {
            return free;
        }
        let ended = processes.iter().position(|slot| {
            let holder = slot.load(Ordering::Acquire);
            !alive(holder) && take(slot, holder)
        });
        if let Some(slot) = ended {
            self.forget_slot(slot);
            return slot;
        }
        self.meta().crowded.store(1, Ordering::Relaxed);
        pid as usize % MAX_PROCESSES
    }

    /// This process's slot: the one claimed at opening, or a new one in a child forked since (which
    /// must not count among the group users of its parent's slot).
    fn my_slot(&self) -> usize {
        let slot = self.slot.load(Ordering::Relaxed);
        // `inspect` maps the region read-only and claims nothing.
        if !self.claimed || self.meta().processes[slot].load(Ordering::Acquire) == std::process::id() {
            return slot;
        }
        let claimed = self.claim_slot();
        self.slot.store(claimed, Ordering::Relaxed);
        claimed
    }

    fn meta(&self) -> &Meta {
        // SAFETY: the meta is at the start of the contents, written before the region was ready.
        unsafe { &*self.region.contents().cast::<Meta>() }
    }

    /// The region's clock's part of its header (see `clock::RegionClock`), mapped as long as the region.
    #[must_use]
    pub fn clock_head(&self) -> *const ClockHead {
        &raw const self.meta().clock
    }

    /// Which clock the region's times are in now.
    #[must_use]
    pub fn clock_kind(&self) -> ClockKind {
        self.meta().clock.kind()
    }

    /// The file behind the region.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.region.path()
    }

    /// Whether the file at the region's path is still the one mapped (see `Region::still_at_path`).
    ///
    /// # Errors
    /// The mapped file cannot be looked at.
    pub fn still_at_path(&self) -> Result<super::file::AtPath> {
        self.region.still_at_path()
    }

    /// The parts of the region (see `Shape::areas`).
    #[cfg(test)]
    pub(crate) fn areas(&self) -> Vec<(&'static str, usize, usize)> {
        self.shape.areas()
    }

    /// Whether this process made the region.
    #[must_use]
    pub const fn created(&self) -> bool {
        self.region.created()
    }

    /// States held in the whole region.
    #[must_use]
    pub fn keys(&self) -> u64 {
        self.meta().keys.load(Ordering::Relaxed).min(self.slot_count())
    }

    /// Every shard's slots: more states than this are corrupt bytes.
    fn slot_count(&self) -> u64 {
        (self.shape.shards * self.shape.capacity) as u64
    }

    #[must_use]
    pub const fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The seeds every process hashes peers with, so that a key is the same key in each.
    #[must_use]
    pub fn seeds(&self) -> [u64; 4] {
        self.meta().seeds
    }

    #[must_use]
    pub fn shards(&self) -> usize {
        self.shape.shards
    }

    /// Sliding-log entries the region's pool holds (one log may take them all).
    #[must_use]
    pub fn log_entries(&self) -> usize {
        self.shape.chunk_count as usize * CHUNK_ENTRIES
    }

    /// # Safety
    /// `base` is the contents of a region of `shape`.
    unsafe fn place_in(base: *mut u8, shape: Shape, shard: usize) -> ShardPlace {
        // SAFETY: offsets within the region's size (see `Shape::size`), aligned to 64 bytes.
        unsafe {
            let heads = base.add(shape.shards_offset());
            let head = heads.cast::<ShardHead>().add(shard);
            let counts = heads.add(shape.heads_bytes()).cast::<ShardCounts>().add(shard);
            let first = base.add(shape.first_offset(shard)).cast::<RegionSlot>();
            let start = base.add(shape.firsts_offset() + shape.firsts_bytes() + shard * shape.shard_bytes());
            let slots = start.cast::<RegionSlot>();
            let pool = base.add(shape.pool_offset()).cast::<PoolHead>();
            let chunks = pool.add(1).cast::<Chunk>();
            let journal = base.add(Shape::journal_offset()).cast::<JournalHead>();
            let journal_slots = journal.add(1).cast::<RegionSlot>();
            let overflow = base.add(Shape::leases_offset()).cast::<LeaseOverflow>();
            let overflow_leases = overflow.add(1).cast::<Lease>();
            ShardPlace {
                index: shard,
                shards: shape.shards,
                journal,
                journal_slots,
                head,
                counts,
                first,
                slots,
                capacity: shape.capacity,
                overflow,
                overflow_leases,
                pool,
                chunks,
                chunk_count: shape.chunk_count,
            }
        }
    }

    fn place(&self, shard: usize) -> ShardPlace {
        // SAFETY: the region has this shape.
        unsafe { Self::place_in(self.region.contents(), self.shape, shard) }
    }

    /// The states of shard `shard`, to be used only under [`SharedRegion::lock`] of the same shard.
    #[must_use]
    pub fn table(&self, shard: usize) -> RegionTable {
        // SAFETY: the place is in this region, which the caller keeps alive with the table.
        unsafe { RegionTable::new(self.place(shard), &raw const self.meta().keys, self.max_keys as u64) }
    }

    /// Asks the CPU to start fetching shard `shard`'s first block of slots, before the caller reads the
    /// clock and takes the locks. A region far below its bound keeps its states in first blocks over
    /// thousands of pages, so the fetch is usually a TLB miss too, the costliest part of a decision
    /// over many keys; started early, it overlaps the work before it. The shard's head (its lock and
    /// counts) too: 128 bytes a shard, half a megabyte at a million keys, not always in the caches.
    #[inline]
    pub fn prefetch(&self, shard: usize) {
        let contents = self.region.contents();
        prefetch_line(contents.wrapping_add(self.shape.first_offset(shard)));
        prefetch_line(contents.wrapping_add(self.shape.shards_offset() + shard * std::mem::size_of::<ShardHead>()));
    }

    /// The lock of shard `shard` (see `SharedMutex::lock_whole`).
    #[must_use]
    ///
    /// A shard whose numbers are impossible (corrupt bytes, see `RegionTable::corrupt`) is handed over
    /// marked recovered, as one whose holder died: its holder repairs it before reading it.
    pub fn lock(&self, shard: usize) -> Guard<'_> {
        self.lock_within(shard, None).unwrap_or_else(|| unreachable!("no deadline"))
    }

    /// The lock of shard `shard`, waited for at most `deadline` (`None`: as long as it takes); `None`
    /// when a holder keeps it longer (a process stopped holding it: SIGSTOP, a debugger, a frozen
    /// container).
    #[must_use]
    #[inline]
    pub fn lock_within(&self, shard: usize, deadline: Option<std::time::Duration>) -> Option<Guard<'_>> {
        let place = self.place(shard);
        // SAFETY: initialised by the region's creator (or made anew by `lock_whole`).
        let mutex = unsafe { SharedMutex::at(&raw mut (*place.head).lock) };
        let mut guard = match deadline {
            None => mutex.lock_whole(),
            Some(deadline) => mutex.lock_within(deadline)?,
        };
        if !guard.recovered && place.corrupt() {
            guard.recovered = true;
        }
        Some(guard)
    }

    #[allow(clippy::mut_from_ref)]
    fn group_record(&self, id: usize) -> &mut GroupRecord {
        // SAFETY: within the groups table; written under the groups lock.
        unsafe { &mut *self.region.contents().add(Shape::groups_offset()).cast::<GroupRecord>().add(id) }
    }

    fn name_hash(name: &str) -> u64 {
        let [a, b, c, d] = NAME_SEEDS;
        ahash::RandomState::with_seeds(a, b, c, d).hash_one(name)
    }

    fn lock_groups(&self) -> Guard<'_> {
        // SAFETY: initialised by the region's creator.
        unsafe { SharedMutex::at((&raw const self.meta().groups_lock).cast_mut()) }.lock_whole()
    }

    /// Whether process slot `slot` is held by a running process.
    fn slot_alive(&self, slot: usize) -> bool {
        let pid = self.meta().processes[slot].load(Ordering::Acquire);
        pid != 0 && alive(pid)
    }

    /// Whether a running process other than this one uses `record` (its dead users forgotten).
    fn used_by_others(&self, record: &mut GroupRecord) -> bool {
        let mine = self.my_slot();
        let mut others = false;
        for slot in 0..MAX_PROCESSES {
            let (word, bit) = (slot / 64, 1u64 << (slot % 64));
            if record.users[word] & bit == 0 || slot == mine {
                continue;
            }
            if self.slot_alive(slot) {
                others = true;
            } else {
                record.users[word] &= !bit;
            }
        }
        others || self.meta().crowded.load(Ordering::Relaxed) != 0
    }

    /// The region's id of group `name` and the seed of its keys, the same in every process, and this
    /// process counted among its users. A name released by the last process that used it starts afresh
    /// (a new seed), one whose processes ended keeps its keys (a restart keeps the limits); a new name
    /// takes a free id, or the id of a name no running process uses.
    ///
    /// # Errors
    /// `MAX_GROUPS` names in use by running processes already.
    pub fn group_id(&self, name: &str) -> Result<(u32, u64)> {
        self.register_group(name, true)
    }

    /// As `group_id`, without counting this process among the name's users (it carries states of
    /// another process's group to another region: see `Limiter::move_region`).
    ///
    /// # Errors
    /// As `group_id`.
    pub fn group_id_unused(&self, name: &str) -> Result<(u32, u64)> {
        self.register_group(name, false)
    }

    fn register_group(&self, name: &str, use_it: bool) -> Result<(u32, u64)> {
        let hash = Self::name_hash(name);
        let _held = self.lock_groups();
        let count = (self.meta().groups.load(Ordering::Acquire) as usize).min(MAX_GROUPS);
        let found = (0..count).find(|&id| self.group_record(id).hash == hash);
        let id = if let Some(id) = found {
            let record = self.group_record(id);
            if record.released != 0 {
                record.released = 0;
                record.generation = record.generation.wrapping_add(1);
            }
            id
        } else {
            let id = if count < MAX_GROUPS {
                #[allow(clippy::cast_possible_truncation)] // below MAX_GROUPS
                self.meta().groups.store(count as u32 + 1, Ordering::Release);
                count
            } else {
                let slot = self.my_slot();
                let free = |record: &mut GroupRecord| {
                    record.users[slot / 64] & 1 << (slot % 64) == 0 && !self.used_by_others(record)
                };
                (0..count).find(|&id| free(self.group_record(id))).ok_or_else(|| {
                    Error::value(
                        "group",
                        format!(
                            "{name:?} would be the shared region's {}th group name in use; at most {MAX_GROUPS}",
                            MAX_GROUPS + 1
                        ),
                    )
                })?
            };
            let record = self.group_record(id);
            record.hash = hash;
            let shown = truncate(name, NAME_BYTES);
            record.name = [0; NAME_BYTES];
            record.name[..shown.len()].copy_from_slice(shown.as_bytes());
            #[allow(clippy::cast_possible_truncation)]
            {
                record.name_len = shown.len() as u32;
            }
            record.generation = record.generation.wrapping_add(1);
            record.users = [0; USER_WORDS];
            record.released = 0;
            id
        };
        let record = self.group_record(id);
        if use_it {
            let slot = self.my_slot();
            record.users[slot / 64] |= 1 << (slot % 64);
        }
        record.seed = Self::name_hash(&format!("{name}\0{}", record.generation));
        #[allow(clippy::cast_possible_truncation)] // below MAX_GROUPS
        Ok((id as u32, record.seed))
    }

    /// This process no longer uses group `id` (its rules dropped it): when no other running process
    /// does, the name starts afresh if taken up again.
    pub fn release_group(&self, id: u32) {
        let _held = self.lock_groups();
        let slot = self.my_slot();
        if (id as usize) < MAX_GROUPS {
            let record = self.group_record(id as usize);
            record.users[slot / 64] &= !(1 << (slot % 64));
            if !self.used_by_others(record) {
                record.released = 1;
            }
        }
    }

    /// Whether a running process other than this one uses group `id`.
    #[must_use]
    pub fn group_used_by_others(&self, id: u32) -> bool {
        let _held = self.lock_groups();
        (id as usize) < MAX_GROUPS && self.used_by_others(self.group_record(id as usize))
    }

    /// Forgets this process's slot's uses of every group (a slot taken over from an ended process).
    fn forget_slot(&self, slot: usize) {
        let _held = self.lock_groups();
        let count = (self.meta().groups.load(Ordering::Acquire) as usize).min(MAX_GROUPS);
        for id in 0..count {
            self.group_record(id).users[slot / 64] &= !(1 << (slot % 64));
        }
    }

    /// The whole name of group `id` and the seed of its keys (`None`: no such group, or a name longer
    /// than the region keeps).
    #[must_use]
    pub fn group_whole(&self, id: u32) -> Option<(String, u64)> {
        let _held = self.lock_groups();
        let name = self.group_name(id)?;
        let record = self.group_record(id as usize);
        (Self::name_hash(&name) == record.hash).then_some((name, record.seed))
    }

    /// The name group `id` was registered with (cut to 48 bytes).
    #[must_use]
    pub fn group_name(&self, id: u32) -> Option<String> {
        let count = (self.meta().groups.load(Ordering::Acquire) as usize).min(MAX_GROUPS);
        let id = id as usize;
        (id < count).then(|| {
            let record = self.group_record(id);
            String::from_utf8_lossy(&record.name[..(record.name_len as usize).min(NAME_BYTES)]).into_owned()
        })
    }

    fn defs_head(&self) -> &DefsHead {
        // SAFETY: within the region (see `Shape::leases_offset`), initialised by its creator.
        unsafe { &*self.region.contents().add(Shape::defs_offset()).cast::<DefsHead>() }
    }

    fn def_record(&self, id: usize) -> *mut LimitRecord {
        debug_assert!(id < MAX_DEFS);
        // SAFETY: within the definitions' records (see `Shape::leases_offset`).
        unsafe {
            self.region
                .contents()
                .add(Shape::defs_offset() + std::mem::size_of::<DefsHead>())
                .cast::<LimitRecord>()
                .add(id)
        }
    }

    /// The region's id of `limit`, recorded if new: the same in every process. 0 when the region holds
    /// `MAX_DEFS - 1` definitions already (such states are read as written under the reader's limit).
    #[must_use]
    pub fn def_id(&self, limit: &Limit) -> u16 {
        let record = record_of(limit);
        let head = self.defs_head();
        // SAFETY: initialised by the region's creator.
        let _held = unsafe { SharedMutex::at((&raw const head.lock).cast_mut()) }.lock_whole();
        let next = (head.next.load(Ordering::Acquire) as usize).clamp(1, MAX_DEFS);
        // SAFETY: records below `next` are written; the lock is held for the one written here.
        let found = (1..next).find(|&id| unsafe { *self.def_record(id) } == record);
        let id = match found {
            Some(id) => id,
            None if next < MAX_DEFS => {
                // SAFETY: an unused record, written before `next` publishes it.
                unsafe { *self.def_record(next) = record };
                #[allow(clippy::cast_possible_truncation)] // below MAX_DEFS
                head.next.store(next as u32 + 1, Ordering::Release);
                next
            }
            None => 0,
        };
        #[allow(clippy::cast_possible_truncation)] // below MAX_DEFS
        let id = id as u16;
        id
    }

    /// The limit recorded as `id` (`None`: unrecorded, or not a limit: a corrupt record).
    #[must_use]
    pub fn limit_def(&self, id: u16) -> Option<Limit> {
        let id = usize::from(id);
        if id == 0 || id >= (self.defs_head().next.load(Ordering::Acquire) as usize).min(MAX_DEFS) {
            return None;
        }
        // SAFETY: a record published before `next` counted it, never written again.
        limit_of(&unsafe { *self.def_record(id) })
    }

    /// What the region holds, read shard by shard (`locked`: under each shard's lock, as a live process
    /// does; otherwise as it is, for `inspect`).
    #[must_use]
    pub fn summary(&self, locked: bool, groups_by_id: &dyn Fn(u32) -> Option<String>) -> RegionSummary {
        let mut summary = RegionSummary {
            path: self.path().display().to_string(),
            max_keys: self.max_keys as u64,
            clock: self.clock_kind().name(),
            ..RegionSummary::default()
        };
        let mut refused: std::collections::HashMap<u64, (String, u64)> = std::collections::HashMap::new();
        let mut group_keys: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
        for shard in 0..self.shape.shards {
            let _held = locked.then(|| self.lock(shard));
            let table = self.table(shard);
            let (len, evictions, dropped) = table.head_counts();
            // Saturating: counts are display, and their bytes may be anything.
            summary.keys += len;
            summary.evictions = summary.evictions.saturating_add(evictions);
            summary.dropped = summary.dropped.saturating_add(dropped);
            let (allowed, refused_here) = table.decisions();
            summary.allowed = summary.allowed.saturating_add(allowed);
            summary.refused = summary.refused.saturating_add(refused_here);
            for (name, hash, count) in table.counts().refused_most() {
                let total = &mut refused.entry(hash).or_insert((name, 0)).1;
                *total = total.saturating_add(count);
            }
            for slot in table.iter() {
                *group_keys.entry(crate::state_map::Owner::unpack(slot.packed_owner()).group).or_default() += 1;
            }
        }
        let mut top: Vec<(String, u64)> = refused.into_values().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        top.truncate(10);
        summary.top_refused = top;
        summary.group_keys = group_keys
            .into_iter()
            .map(|(id, keys)| {
                (groups_by_id(id).or_else(|| self.group_name(id)).unwrap_or_else(|| format!("#{id}")), keys)
            })
            .collect();
        summary
    }
}

const KINDS: [Kind; 7] = [
    Kind::Gcra,
    Kind::TokenBucket,
    Kind::FixedWindow,
    Kind::SlidingWindow,
    Kind::SlidingLog,
    Kind::LeakyBucket,
    Kind::Concurrency,
];

/// The seeds peers' hashes are keyed with in every region this user makes until the machine restarts,
/// so that a process whose region was removed or replaced carries its states into the new one with
/// their keys (see `Limiter::move_region`). Secret from the network (they come from the kernel's boot
/// id, which only local users can read), so that nobody can choose peers that pile into one shard;
/// random where the boot id cannot be read.
fn seeds_for_user() -> [u64; 4] {
    let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        let random = ahash::RandomState::new();
        return [0u64, 1, 2, 3].map(|i| random.hash_one(i));
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let user = unsafe { libc::geteuid() };
    [0u8, 1, 2, 3].map(|i| {
        let secret = format!("ratekeeper seeds {i} {} {user}", boot.trim());
        super::file::checksum(secret.as_bytes())
    })
}

/// The checksum of the meta's numbers that never change (see `Region::set_meta_sum`).
fn meta_sum(meta: &Meta) -> u64 {
    let numbers = [meta.seeds[0], meta.seeds[1], meta.seeds[2], meta.seeds[3], meta.max_keys].into_iter().chain([
        meta.shards,
        meta.capacity,
        meta.chunk_count,
    ]);
    let bytes: Vec<u8> = numbers.flat_map(u64::to_le_bytes).collect();
    super::file::checksum(&bytes)
}

fn record_of(limit: &Limit) -> LimitRecord {
    #[allow(clippy::cast_possible_truncation)]
    let kind = KINDS.iter().position(|&k| k == limit.kind()).unwrap_or(0) as u32;
    LimitRecord {
        kind,
        burst_set: u32::from(limit.burst_set),
        burst: u64::from(limit.burst),
        count: limit.rate.map_or(0, |r| r.count),
        period_ns: limit.rate.map_or(0, |r| r.period_ns),
    }
}

fn limit_of(record: &LimitRecord) -> Option<Limit> {
    let kind = *KINDS.get(record.kind as usize)?;
    if kind == Kind::Concurrency {
        return Limit::concurrency(record.burst).ok();
    }
    let rate = Rate::new(record.count, record.period_ns).ok()?;
    let mut limit = Limit::new(rate, Some(record.burst), kind).ok()?;
    limit.burst_set = record.burst_set != 0;
    Some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(test: &str) -> PathBuf {
        crate::state_map::region::test_dir("layout", test)
    }

    #[test]
    fn a_second_opener_shares_seeds_groups_and_states() {
        let dir = dir("a");
        let path = dir.join("r");
        let first = SharedRegion::open(&path, 10_000, 1_000).unwrap();
        let second = SharedRegion::open(&path, 10_000, 1_000).unwrap();
        assert!(first.created() && !second.created());
        assert_eq!(first.seeds(), second.seeds());
        let api = first.group_id("api").unwrap();
        let login = second.group_id("login").unwrap();
        assert_eq!((api.0, login.0), (0, 1));
        assert_eq!(first.group_id("login").unwrap(), login, "one id and one seed in every process");
        assert_eq!(second.group_name(0).as_deref(), Some("api"));
        let limit = Limit::new(Rate::new(10, 1_000_000_000).unwrap(), Some(3), Kind::SlidingLog).unwrap();
        let other = Limit::new(Rate::new(10, 1_000_000_000).unwrap(), None, Kind::Gcra).unwrap();
        let id = first.def_id(&limit);
        assert_ne!(id, 0);
        assert_eq!(second.def_id(&limit), id);
        assert_ne!(second.def_id(&other), id);
        assert_eq!(first.limit_def(id), Some(limit));
        assert_eq!(first.limit_def(0), None);
        {
            let _held = first.lock(0);
            let mut table = first.table(0);
            table.insert(7 << 8, crate::algorithm::State { t: 9, a: 1, b: 2 }, 0, 0, 0, |_, _| {});
        }
        let held = second.lock(0);
        assert_eq!(second.table(0).get(7 << 8).map(|s| s.state.t), Some(9));
        drop(held);
        let other = SharedRegion::open(&path, 20_000, 1_000).unwrap_err().to_string();
        assert!(other.contains("made for max_keys=10000, this limiter has 20000"), "{other}");
        // Another log pool: the region's numbers hold.
        assert_eq!(SharedRegion::open(&path, 10_000, 50_000).unwrap().log_entries(), first.log_entries());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn processes_killed_while_flooding_a_full_region_lose_no_other_state() {
        let dir = dir("kill");
        let region = SharedRegion::open(&dir.join("r"), 2_000, 0).unwrap();
        let busy_state = crate::algorithm::State { t: u64::MAX, a: 7, b: 0 };
        let key = |i: u64| ahash::RandomState::with_seeds(9, 8, 7, 6).hash_one(i);
        let busy: Vec<u64> = (0..100).map(|i| key(u64::MAX - i)).collect();
        let shard_of = |k: u64| usize::try_from(k >> (64 - region.shards().trailing_zeros())).unwrap();
        let use_busy = || {
            for &k in &busy {
                let held = region.lock(shard_of(k));
                let mut table = region.table(shard_of(k));
                for _ in 0..64 {
                    if table.get_mut(k).is_none() {
                        table.insert(k, busy_state, 0, 0, 0, |_, _| {});
                    }
                }
                drop(held);
            }
        };
        use_busy();
        for round in 0..30u64 {
            // SAFETY: the child only inserts into the region and is killed.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // One-shot keys, each an insert that makes room when the region is full (rebuilds). They
                // are idle, so making room drops them and never has to evict a busy key: a busy key
                // missing afterwards was lost to the kill. (Busy one-shot keys would let the decay of use
                // counts, a few times per round in a release build, bring the busy keys down to them.)
                for i in 0.. {
                    let k = key(round << 32 | i);
                    let _held = region.lock(shard_of(k));
                    region.table(shard_of(k)).insert(k, crate::algorithm::State::default(), 0, 0, 0, |_, _| {});
                }
            }
            std::thread::sleep(std::time::Duration::from_micros(500 + round * 97 % 3_000));
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            for shard in 0..region.shards() {
                let held = region.lock(shard);
                let mut table = region.table(shard);
                if held.recovered {
                    table.repair(); // as `StateMap::lock` does for a shard the child died holding
                }
                let mut seen = std::collections::HashSet::new();
                assert!(table.iter().all(|slot| seen.insert(slot.identity())), "a key twice in shard {shard}");
                assert_eq!(table.iter().count(), table.len(), "shard {shard} miscounted");
            }
            for &k in &busy {
                let _held = region.lock(shard_of(k));
                assert_eq!(region.table(shard_of(k)).get(k).map(|s| s.state), Some(busy_state), "round {round}");
            }
            use_busy();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_group_name_no_running_process_uses_starts_afresh_and_frees_its_id() {
        let dir = dir("names");
        let path = dir.join("r");
        let first = SharedRegion::open(&path, 10_000, 1_000).unwrap();
        let second = SharedRegion::open(&path, 10_000, 1_000).unwrap();
        let (id, seed) = first.group_id("api").unwrap();
        assert_eq!(second.group_id("api").unwrap(), (id, seed));
        // The first drops it, the second keeps it: the first takes it up again with the same keys.
        first.release_group(id);
        assert!(first.group_used_by_others(id));
        assert_eq!(first.group_id("api").unwrap(), (id, seed));
        // Dropped by the last process that used it: taken up again, its keys start afresh.
        first.release_group(id);
        second.release_group(id);
        assert!(!first.group_used_by_others(id));
        let (again, fresh) = first.group_id("api").unwrap();
        assert_eq!(again, id);
        assert_ne!(fresh, seed);
        // A process that ends (here: drops its region) stops using its names, which keep their keys.
        drop(first);
        assert!(!second.group_used_by_others(id));
        let third = SharedRegion::open(&path, 10_000, 1_000).unwrap();
        assert_eq!(third.group_id("api").unwrap(), (id, fresh));
        drop(third);
        // Every id in use: a new name takes the id of one nobody uses.
        second.group_id("api").unwrap();
        for n in 1..MAX_GROUPS {
            second.group_id(&format!("g{n}")).unwrap();
        }
        let error = second.group_id("one-more").unwrap_err().to_string();
        assert!(error.contains("at most 4096"), "{error}");
        second.release_group(7);
        assert_eq!(second.group_id("one-more").unwrap().0, 7);
        assert_eq!(second.group_name(7).as_deref(), Some("one-more"));
        drop(second);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_are_checked() {
        assert!(region_path(Some("my-app_1.v2"), None).unwrap().ends_with("ratekeeper-my-app_1.v2"));
        for bad in ["", "../etc", ".hidden", "a/b", "a b"] {
            let error = region_path(Some(bad), None).unwrap_err().to_string();
            assert!(error.contains("name"), "{error}");
        }
    }
}
