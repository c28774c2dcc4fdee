//! One shard of the shared store's states, in the region, read and written under the shard's robust
//! lock by whichever process holds it.
//!
//! The same slots the in-memory map keeps (a tag of identity and use counter, the algorithm's state,
//! its owner), in an open-addressing array with linear probing: no pointers, so every process reads
//! them at its own mapping's address. Removal shifts the run back (no tombstones), and making room
//! rebuilds the array, so a long-running region never degrades. Sliding logs live in the shard's pool
//! of 256-byte chunks, chained from their slot. Bounded as the in-memory map is: when the region holds
//! `max_keys` states (one count for all shards, in the region) or this shard is 7/8 full, idle states
//! go first, then the least used (`room::Evictions`, with the same decay of use counts).

// The region is page-aligned and lays every part out at a multiple of 64 bytes.
#![allow(clippy::cast_ptr_alignment)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::algorithm::{Log, State};
use crate::probe::{self, Probed};
use crate::room::{Evictions, Removal, IDENTITY_SHIFT};

use super::lock::SharedMutex;

/// A sliding log's (stamp, units) entries, as the region keeps them.
type Entries = Vec<(u64, u64)>;

/// Marks an occupied slot in its owner word (an owner packs into 26 bits).
const OCCUPIED: u32 = 1 << 31;
/// Active slots of an empty shard: its first block, kept with every other shard's first block (see
/// `ShardPlace::first`).
pub const MIN_ACTIVE: usize = 40;

/// Slots in the first block of a shard of `capacity` slots: `MIN_ACTIVE`, or its capacity if less.
#[must_use]
pub const fn first_block_len(capacity: usize) -> usize {
    if capacity < MIN_ACTIVE {
        capacity
    } else {
        MIN_ACTIVE
    }
}
/// (stamp, units) entries per log chunk.
pub const CHUNK_ENTRIES: usize = 15;
/// The most units a log read from the region holds: far above any limit, far below overflow.
const LOG_UNITS: u64 = 1 << 62;

/// One state in the region: 32 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RegionSlot {
    /// `identity << 8 | uses`, as in memory.
    pub tag: u64,
    pub state: State,
    /// The packed owner (see `state_map::Owner`), with `OCCUPIED` set.
    pub owner: u32,
    /// The first chunk of its sliding log plus one (0: none) in the low `CHAIN_BITS`, and above them the
    /// region's id of the limit the state was written under (see `layout::LimitDefs`; 0: unrecorded),
    /// so that a process deciding under another limit converts the state rather than misreading it.
    link: u32,
}

/// Bits of `RegionSlot::link` that hold the first chunk of a log: a shard's pool has fewer chunks.
pub const CHAIN_BITS: u32 = 20;
const CHAIN_MASK: u32 = (1 << CHAIN_BITS) - 1;
/// Log chunks a region's pool can hold: a chain's link is `CHAIN_BITS` wide.
pub const MAX_CHUNKS: usize = CHAIN_MASK as usize;
/// Limit definitions a region can tell apart (ids 1 to `MAX_DEFS - 1`; 0: unrecorded).
pub const MAX_DEFS: usize = 1 << (32 - CHAIN_BITS);

impl Probed for RegionSlot {
    fn vacant() -> Self {
        Self::default()
    }

    #[inline]
    fn occupied(&self) -> bool {
        self.owner & OCCUPIED != 0
    }

    #[inline]
    fn identity(&self) -> u64 {
        RegionSlot::identity(self)
    }
}

impl RegionSlot {
    #[inline]
    #[must_use]
    pub const fn identity(&self) -> u64 {
        self.tag >> IDENTITY_SHIFT
    }

    #[inline]
    #[must_use]
    pub const fn packed_owner(&self) -> u32 {
        self.owner & !OCCUPIED
    }

    #[allow(clippy::cast_possible_truncation)]
    const fn uses(&self) -> u8 {
        self.tag as u8
    }

    /// The first chunk of its sliding log, plus one; 0: none.
    #[inline]
    const fn log(&self) -> u32 {
        self.link & CHAIN_MASK
    }

    #[inline]
    fn set_log(&mut self, first: u32) {
        debug_assert!(first <= CHAIN_MASK);
        self.link = (self.link & !CHAIN_MASK) | (first & CHAIN_MASK);
    }

    /// The id of the limit the state was written under (0: unrecorded).
    #[inline]
    #[must_use]
    pub const fn def(&self) -> u16 {
        #[allow(clippy::cast_possible_truncation)] // 12 bits
        let def = (self.link >> CHAIN_BITS) as u16;
        def
    }

    #[inline]
    pub fn set_def(&mut self, def: u16) {
        self.link = (self.link & CHAIN_MASK) | (u32::from(def) << CHAIN_BITS);
    }
}

/// A chunk of a sliding log: 256 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Chunk {
    /// The next chunk plus one; 0: last. In a free list, the next free chunk.
    next: u32,
    len: u32,
    /// The shard holding it, plus one (in a log or its free list); 0: the pool's. Changed only under
    /// that shard's lock, so a repair of the shard finds every chunk it held.
    owner: u32,
    _pad: u32,
    entries: [(u64, u64); CHUNK_ENTRIES],
}

/// The region's pool of log chunks, for every shard: a log of one key may take the whole pool, and the
/// region's size does not depend on the rules' sliding logs. A shard keeps the chunks it frees in a
/// list of its own (under its own lock) and comes here, under the pool's lock, only when that list is
/// empty or holds more than `KEEP_FREE`.
#[repr(C, align(64))]
pub struct PoolHead {
    pub lock: SharedMutex,
    /// The free list's first chunk plus one.
    free: u32,
    /// Chunks in the free list.
    free_count: u32,
    /// Chunks never handed out begin here.
    fresh: u32,
}

/// Chunks a shard takes from the pool at once, and the most it keeps free before giving half back.
const TAKE_BATCH: u32 = 4;
const KEEP_FREE: u32 = 16;

/// A shard's header in the region: its lock and what it counts, written under the lock. Its first line
/// holds what every decision reads or writes, beside the lock (whose line a decision owns anyway): the
/// numbers checked at every lock (`ShardPlace::corrupt`) and the count of admissions.
#[repr(C, align(64))]
pub struct ShardHead {
    pub lock: SharedMutex,
    len: u32,
    /// The slots in use (0: `MIN_ACTIVE`): doubled as the shard fills, so that a region used below its
    /// bound keeps its states close together (fewer pages, fewer misses). Up to `MIN_ACTIVE` they are
    /// the shard's first block, beyond it the start of its own slots.
    active: u32,
    /// The shard's own free list of log chunks: its first plus one, and its length.
    free_chunks: u32,
    free_count: u32,
    /// Decisions here that admitted, and that refused, by every process: counted under the lock, in
    /// the lock's line, which a decision owns anyway (a count of its own, even per process, would be
    /// an atomic add on one more line).
    pub allowed: u64,
    pub refused: u64,
    inserts_since_decay: u32,
    /// States evicted as least used, and idle states dropped to make room, by every process.
    pub evictions: u64,
    pub dropped: u64,
}

// What a decision touches of the head shares the lock's line (glibc's mutex is 40 bytes on 64-bit Linux).
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
const _: () = assert!(std::mem::offset_of!(ShardHead, allowed) + 8 <= 64);

/// Bytes of a name kept in the region (a group's, a refused peer's), cut on a character boundary.
pub const NAME_BYTES: usize = 48;
/// Peers refused most, kept per shard.
const TOP_REFUSED: usize = 4;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct RefusedRecord {
    count: u64,
    hash: u64,
    name: [u8; NAME_BYTES],
}

/// Concurrency permits held by one process for one key: what its death gives back.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Lease {
    identity: u64,
    pid: u32,
    permits: u32,
}

/// Leases kept per shard, in its counts (free: no permits). Past them, a shard records leases in the
/// region's overflow table.
const LEASES: usize = 16;
/// Leases the region's overflow table holds, for every shard: with the shards' own, the bound on
/// processes holding permits of keys at once, each key and process one lease (a shard's 16, then
/// these 4,096 in all). Past it a permit is refused, as by a full gate (see `reserve_lease`), never
/// granted unrecorded: a holder killed then would keep it for good.
pub const OVERFLOW_LEASES: usize = 4096;

/// The region's overflow table of leases: its lock, then `OVERFLOW_LEASES` entries (free: no pid and
/// no permits; reserved for a process about to take permits: a pid and no permits yet). Taken under a
/// shard's lock, never the other way round.
#[repr(C, align(64))]
pub struct LeaseOverflow {
    pub lock: SharedMutex,
    /// Entries not free: a hint read without the lock, so that decisions of shards that never
    /// overflowed do not look at the table.
    used: AtomicU32,
}

/// The peers a shard refused most (space-saving counts), and who holds its keys' permits; right after
/// its head.
#[repr(C, align(64))]
pub struct ShardCounts {
    top: [RefusedRecord; TOP_REFUSED],
    leases: [Lease; LEASES],
}

impl ShardCounts {
    /// The peers refused most here: (name, hash, refusals).
    #[must_use]
    pub fn refused_most(&self) -> Vec<(String, u64, u64)> {
        self.top
            .iter()
            .filter(|r| r.count > 0)
            .map(|r| (String::from_utf8_lossy(&r.name).trim_end_matches('\0').to_owned(), r.hash, r.count))
            .collect()
    }
}

/// `text` cut to at most `bytes` bytes, on a character boundary.
#[must_use]
pub fn truncate(text: &str, bytes: usize) -> &str {
    let mut end = text.len().min(bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The region's record of the rebuild in progress (at most one at a time, under its lock): the shard's
/// states as they are to be placed. A rebuild empties the shard's slots before placing its states anew;
/// a process killed in between would lose them, so the shard's next holder restores them from here.
#[repr(C, align(64))]
pub struct JournalHead {
    pub lock: SharedMutex,
    /// The shard being rebuilt, plus one; 0: none.
    shard: u64,
    len: u64,
    active: u64,
}

/// Where one shard lives in the region. In order: what a decision reads first (see `state_map::Stripe`).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct ShardPlace {
    pub head: *mut ShardHead,
    /// The slots of a shard holding few states (`MIN_ACTIVE`, or its capacity if less). Every shard's
    /// first block sits beside the others': a region far below its bound (100,000 states of 1,000,000)
    /// then keeps them on a few pages, where shards' own slots would put each shard's on a page of
    /// its own, and a lookup would miss the TLB as well as the caches.
    pub first: *mut RegionSlot,
    /// The shard's own slots, `capacity` of them, used once it outgrows its first block.
    pub slots: *mut RegionSlot,
    pub capacity: usize,
    /// The shard's index (the journal names shards by it), and how many the region has.
    pub index: usize,
    pub shards: usize,
    pub journal: *mut JournalHead,
    /// The journal's slots: as many as a shard's.
    pub journal_slots: *mut RegionSlot,
    pub counts: *mut ShardCounts,
    /// The region's overflow table of leases and its `OVERFLOW_LEASES` entries.
    pub overflow: *mut LeaseOverflow,
    pub overflow_leases: *mut Lease,
    /// The region's pool of log chunks (see `PoolHead`), `chunk_count` of them.
    pub pool: *mut PoolHead,
    pub chunks: *mut Chunk,
    pub chunk_count: u32,
}

impl ShardPlace {
    /// Whether the shard's numbers are impossible (corrupt bytes): its active slots, its count, its free
    /// list of chunks. Cheap (its head's first line, beside the lock), so checked at every lock; such a
    /// shard is repaired, which rebuilds it from its slots (the region as a whole is not refused: one
    /// corrupt shard costs its own states at most). What the numbers cannot tell, garbage in the slots
    /// or chunks, is caught where it is met: probes end after one lap, chains are bounded, and a state
    /// that finds no free slot has the shard repaired.
    /// Bounds only (no division): any `active` within them is a table probes can work in.
    #[inline]
    #[must_use]
    pub fn corrupt(&self) -> bool {
        // SAFETY: the place is in a mapped region; read under the shard's lock.
        let head = unsafe { &*self.head };
        let first = first_block_len(self.capacity);
        let active = head.active as usize;
        let slots = if active == 0 { first } else { active };
        (active != 0 && (active < first || active > self.capacity))
            || head.len as usize > slots
            || head.free_chunks > self.chunk_count
            || head.free_count > self.chunk_count
    }
}

/// One shard's states in the region, as this process sees them. Every method but `head` requires the
/// shard's region lock to be held (`StateMap::lock` takes it: a map in a region takes no other).
#[derive(Debug)]
#[repr(C)]
pub struct RegionTable {
    place: ShardPlace,
    /// States in the whole region, and their bound.
    keys: *const AtomicU64,
    max_keys: u64,
}

// SAFETY: the pointers are into a mapping that the store keeps alive as long as any table; what they
// point at is read and written only under the shard's region lock.
unsafe impl Send for RegionTable {}

impl RegionTable {
    /// # Safety
    /// `place` and `keys` point into a mapped region laid out for them that outlives the table.
    #[must_use]
    pub const unsafe fn new(place: ShardPlace, keys: *const AtomicU64, max_keys: u64) -> Self {
        Self { place, keys, max_keys }
    }

    #[inline]
    #[allow(clippy::mut_from_ref)]
    fn head(&self) -> &mut ShardHead {
        // SAFETY: see `new`; the lock is held, so no other process writes it now.
        unsafe { &mut *self.place.head }
    }

    /// Where `active` slots live: the first block, or the shard's own slots.
    #[inline]
    fn area(&self, active: usize) -> *mut RegionSlot {
        if active <= self.first_len() {
            self.place.first
        } else {
            self.place.slots
        }
    }

    #[inline]
    fn first_len(&self) -> usize {
        first_block_len(self.place.capacity)
    }

    #[inline]
    fn slots(&self) -> &[RegionSlot] {
        let active = self.active();
        // SAFETY: see `new`; `area` holds at least `active` slots.
        unsafe { std::slice::from_raw_parts(self.area(active), active) }
    }

    #[inline]
    #[allow(clippy::mut_from_ref)]
    fn slots_mut(&self) -> &mut [RegionSlot] {
        let active = self.active();
        // SAFETY: see `new`; the lock is held.
        unsafe { std::slice::from_raw_parts_mut(self.area(active), active) }
    }

    /// Every slot of the shard, in its first block and in its own slots: those not active are empty,
    /// unless a process died growing the shard.
    #[allow(clippy::mut_from_ref)]
    fn all_slots_mut(&self) -> [&mut [RegionSlot]; 2] {
        // SAFETY: see `new`; the lock is held; the two areas do not overlap.
        unsafe {
            [
                std::slice::from_raw_parts_mut(self.place.first, self.first_len()),
                std::slice::from_raw_parts_mut(self.place.slots, self.place.capacity),
            ]
        }
    }

    /// Empties every slot of the shard.
    fn empty_all_slots(&self) {
        for area in self.all_slots_mut() {
            area.fill(RegionSlot::default());
        }
    }

    /// Whether `active` is a number of active slots the shard can have: 0 (its first block), its first
    /// block doubled some times, or its capacity (see `grow`, `repair`).
    fn valid_active(&self, active: usize) -> bool {
        let first = self.first_len();
        active == 0
            || active == self.place.capacity
            || (active >= first
                && active < self.place.capacity
                && active.is_multiple_of(first)
                && (active / first).is_power_of_two())
    }

    /// Whether the shard's numbers are impossible (see `ShardPlace::corrupt`).
    #[must_use]
    pub fn corrupt(&self) -> bool {
        self.place.corrupt()
    }

    /// How many slots are in use.
    #[inline]
    fn active(&self) -> usize {
        // SAFETY: see `new`; read under the lock.
        let active = unsafe { (*self.place.head).active } as usize;
        if active == 0 {
            self.first_len()
        } else {
            active.min(self.place.capacity)
        }
    }

    #[allow(clippy::cast_possible_truncation)] // a shard's capacity fits in u32
    fn set_active(&self, active: usize) {
        self.head().active = active as u32;
    }

    /// Doubles the active slots (up to the shard's capacity), placing every state anew.
    fn grow(&mut self) {
        let active = (self.active() * 2).min(self.place.capacity);
        let kept: Vec<(RegionSlot, Option<Entries>)> = self.iter().map(|slot| (*slot, None)).collect();
        self.rebuild(kept, active);
    }

    #[allow(clippy::mut_from_ref)]
    fn chunk(&self, index: u32) -> &mut Chunk {
        debug_assert!(index < self.place.chunk_count);
        // SAFETY: see `new`; the index is within the pool (checked by callers or by `repair`).
        unsafe { &mut *self.place.chunks.add(index as usize) }
    }

    /// States held, evicted and dropped here, read without the lock (for `inspect`, which never
    /// writes): a torn read is a display glitch, not a fault.
    #[must_use]
    pub fn head_counts(&self) -> (u64, u64, u64) {
        let head = self.place.head;
        // SAFETY: the head is in the mapped region (see `new`); volatile reads of plain integers.
        unsafe {
            let len = (&raw const (*head).len).read_volatile();
            let evictions = (&raw const (*head).evictions).read_volatile();
            let dropped = (&raw const (*head).dropped).read_volatile();
            // Never more than the shard can hold, whatever the bytes say.
            (u64::from(len).min(self.place.capacity as u64), evictions, dropped)
        }
    }

    /// Decisions here that admitted and that refused, by every process, read as `head_counts` reads.
    #[must_use]
    pub fn decisions(&self) -> (u64, u64) {
        let head = self.place.head;
        // SAFETY: as in `head_counts`.
        unsafe { ((&raw const (*head).allowed).read_volatile(), (&raw const (*head).refused).read_volatile()) }
    }

    /// The shard's counts by every process.
    #[allow(clippy::mut_from_ref)]
    #[must_use]
    pub fn counts(&self) -> &mut ShardCounts {
        // SAFETY: the region lays the counts out after the head (see `layout`); written under the lock,
        // read without it only for display.
        unsafe { &mut *self.place.counts }
    }

    /// Counts one decision here, and a refusal of `peer` (hashed `hash`) among the peers refused most.
    #[inline]
    pub fn count(&mut self, allowed: bool, peer: &str, hash: u64) {
        let head = self.head();
        if allowed {
            head.allowed = head.allowed.wrapping_add(1);
        } else {
            head.refused = head.refused.wrapping_add(1);
            Self::note_refusal(self.counts(), peer, hash);
        }
    }

    /// Space-saving: a peer refused often stays, and its count is never under.
    #[cold]
    fn note_refusal(counts: &mut ShardCounts, peer: &str, hash: u64) {
        let top = &mut counts.top;
        if let Some(record) = top.iter_mut().find(|r| r.count > 0 && r.hash == hash) {
            record.count = record.count.saturating_add(1);
            return;
        }
        let Some(record) = top.iter_mut().min_by_key(|r| r.count) else { return };
        let shown = truncate(peer, NAME_BYTES);
        record.name = [0; NAME_BYTES];
        record.name[..shown.len()].copy_from_slice(shown.as_bytes());
        record.hash = hash;
        record.count = record.count.saturating_add(1);
    }

    /// Records that this process took (`delta` > 0) or gave back (`delta` < 0) permits of `key`, in the
    /// shard's leases, else in the region's overflow table. False: the permits taken could not be
    /// recorded (every lease in use; see `reserve_lease`, which makes sure there is room first).
    pub fn lease(&mut self, key: u64, delta: i64) -> bool {
        let identity = key >> IDENTITY_SHIFT;
        let pid = std::process::id();
        let apply = |lease: &mut Lease| {
            let permits = (i64::from(lease.permits) + delta).clamp(0, i64::from(u32::MAX));
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            {
                lease.permits = permits as u32;
            }
        };
        let leases = &mut self.counts().leases;
        if let Some(lease) = leases.iter_mut().find(|l| l.permits > 0 && l.identity == identity && l.pid == pid) {
            apply(lease);
            return true;
        }
        if self.overflow_used() {
            let held = self.lock_overflow();
            if let Some(lease) = self.overflow_leases().iter_mut().find(|l| l.identity == identity && l.pid == pid) {
                apply(lease);
                if lease.permits == 0 {
                    *lease = Lease::default();
                    self.overflow_count(-1);
                }
                return true;
            }
            drop(held);
        }
        if delta <= 0 {
            return true; // nothing recorded to give back
        }
        let leases = &mut self.counts().leases;
        let permits = u32::try_from(delta).unwrap_or(u32::MAX);
        if let Some(lease) = leases.iter_mut().find(|l| l.permits == 0) {
            *lease = Lease { identity, pid, permits };
            return true;
        }
        let held = self.lock_overflow();
        let recorded = self.overflow_entry(identity, pid).map(|lease| *lease = Lease { identity, pid, permits });
        drop(held);
        recorded.is_some()
    }

    /// Makes sure that permits of `key` this process takes now can be recorded (`lease`): a lease of
    /// its own already, a free one in the shard, or an entry of the overflow table reserved for it.
    /// False when none is left: the gate must refuse, as a full one does.
    #[must_use]
    pub fn reserve_lease(&mut self, key: u64) -> bool {
        let identity = key >> IDENTITY_SHIFT;
        let pid = std::process::id();
        let leases = &self.counts().leases;
        if leases.iter().any(|l| l.permits == 0 || (l.identity == identity && l.pid == pid)) {
            return true;
        }
        let held = self.lock_overflow();
        let reserved = self.overflow_entry(identity, pid).is_some();
        drop(held);
        reserved
    }

    /// The overflow entry of (`identity`, `pid`), or a free one taken for it (reserved: no permits yet).
    /// Entries reserved by processes that ended are taken back when none is free. The overflow's lock
    /// held.
    fn overflow_entry(&self, identity: u64, pid: u32) -> Option<&mut Lease> {
        let entries = self.overflow_leases();
        let index = entries
            .iter()
            .position(|l| l.identity == identity && l.pid == pid)
            .or_else(|| {
                let free = entries.iter().position(|l| l.pid == 0 && l.permits == 0)?;
                self.overflow_count(1);
                Some(free)
            })
            .or_else(|| entries.iter().position(|l| l.permits == 0 && !alive(l.pid)))?;
        let entry = &mut entries[index];
        if entry.identity != identity || entry.pid != pid {
            *entry = Lease { identity, pid, permits: 0 };
        }
        Some(entry)
    }

    /// The permits of `key` held by processes that have ended, their leases removed: what the key's
    /// state should give back.
    #[must_use]
    pub fn take_dead_leases(&mut self, key: u64) -> u64 {
        let identity = key >> IDENTITY_SHIFT;
        let mut freed = 0;
        for lease in &mut self.counts().leases {
            if lease.permits > 0 && lease.identity == identity && !alive(lease.pid) {
                freed += u64::from(lease.permits);
                lease.permits = 0;
            }
        }
        if self.overflow_used() {
            let held = self.lock_overflow();
            for lease in self.overflow_leases().iter_mut() {
                if lease.identity == identity && lease.pid != 0 && !alive(lease.pid) {
                    freed += u64::from(lease.permits);
                    *lease = Lease::default();
                    self.overflow_count(-1);
                }
            }
            drop(held);
        }
        freed
    }

    fn overflow(&self) -> &LeaseOverflow {
        // SAFETY: see `new`.
        unsafe { &*self.place.overflow }
    }

    /// Whether the overflow table may hold entries (a hint, read without its lock).
    fn overflow_used(&self) -> bool {
        self.overflow().used.load(Ordering::Relaxed) != 0
    }

    fn overflow_count(&self, change: i32) {
        let used = &self.overflow().used;
        let now = used.load(Ordering::Relaxed);
        used.store(now.saturating_add_signed(change), Ordering::Relaxed);
    }

    #[allow(clippy::mut_from_ref)]
    fn overflow_leases(&self) -> &mut [Lease] {
        // SAFETY: see `new`; written under the overflow's lock, which the caller holds.
        unsafe { std::slice::from_raw_parts_mut(self.place.overflow_leases, OVERFLOW_LEASES) }
    }

    /// The overflow table's lock; when its holder died (or the lock was made anew), its count of used
    /// entries is counted again.
    fn lock_overflow(&self) -> super::lock::Guard<'_> {
        let held = self.overflow().lock.lock_whole();
        if held.recovered {
            let used = self.overflow_leases().iter().filter(|l| l.pid != 0 || l.permits != 0).count();
            #[allow(clippy::cast_possible_truncation)] // at most OVERFLOW_LEASES
            self.overflow().used.store(used as u32, Ordering::Relaxed);
        }
        held
    }

    fn keys(&self) -> &AtomicU64 {
        // SAFETY: see `new`.
        unsafe { &*self.keys }
    }

    /// The index of `key`'s slot.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        probe::find(self.slots(), key >> IDENTITY_SHIFT)
    }

    /// The slot of `key`, without counting a use. Out of line, as every entry point here: the in-memory
    /// hot path that tests for a region stays small.
    #[inline(never)]
    #[must_use]
    pub fn get(&self, key: u64) -> Option<&RegionSlot> {
        self.find(key).map(|index| &self.slots()[index])
    }

    /// The slot of `key`, counted as a use.
    #[inline(never)]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut RegionSlot> {
        let index = self.find(key)?;
        let slot = &mut self.slots_mut()[index];
        if slot.uses() < u8::MAX {
            slot.tag += 1;
        }
        Some(slot)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.head().len as usize
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether inserting now must make room first: the region is at its bound, or this shard nearly full.
    fn full(&self) -> bool {
        let keys = self.keys().load(Ordering::Relaxed);
        // A count past every slot of the region is corrupt (see `SharedRegion::open`): not a bound.
        let counted = keys >= self.max_keys && keys <= (self.place.shards * self.place.capacity) as u64;
        counted || self.len() * 8 >= self.place.capacity * 7
    }

    /// Adds `state` for `key` (which `get_mut` did not find), owned by `owner` (packed) and written under
    /// limit `def`, making room first when full (`gone` sees each state removed, and why).
    #[inline(never)]
    pub(crate) fn insert(
        &mut self,
        key: u64,
        state: State,
        owner: u32,
        def: u16,
        now: u64,
        gone: impl FnMut(u32, Removal),
    ) {
        if self.full() {
            self.make_room(now, None, gone);
        }
        if (self.len() + 1) * 8 > self.active() * 7 && self.active() < self.place.capacity {
            self.grow();
        }
        let tag = (key >> IDENTITY_SHIFT) << IDENTITY_SHIFT | 1;
        let mut slot = RegionSlot { tag, state, owner: owner | OCCUPIED, link: 0 };
        slot.set_def(def);
        if !self.place_slot(slot) {
            // More slots occupied than counted (corrupt bytes): the repair recounts and makes room.
            self.repair();
            if !self.place_slot(slot) {
                return;
            }
        }
        let head = self.head();
        head.len = head.len.saturating_add(1);
        head.inserts_since_decay = head.inserts_since_decay.saturating_add(1);
        self.keys().fetch_add(1, Ordering::Relaxed);
    }

    /// Writes `slot` into the first free slot of its probe run (the array has one, see `full`, unless
    /// its bytes are corrupt: false then, and the slot is not written).
    fn place_slot(&self, slot: RegionSlot) -> bool {
        probe::try_place(self.slots_mut(), slot).is_some()
    }

    /// Removes `key`'s state and log; returns its owner (packed), if it had a state.
    pub fn remove(&mut self, key: u64) -> Option<u32> {
        let index = self.find(key)?;
        let removed = self.slots()[index];
        self.free_log(removed.log());
        probe::shift_back(self.slots_mut(), index);
        let head = self.head();
        head.len = head.len.saturating_sub(1);
        self.keys().fetch_sub(1, Ordering::Relaxed);
        Some(removed.packed_owner())
    }

    /// Keeps the states `keep` says to (it may change their state and log, given as `Log`s), removing
    /// the others; `keep` sees each slot's packed owner. The array is rebuilt, so a walk leaves it
    /// compact.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut RegionSlot, &mut Log) -> bool) {
        let mut kept = Vec::with_capacity(self.len().min(self.place.capacity));
        for index in 0..self.active() {
            let mut slot = self.slots()[index];
            if !slot.occupied() {
                continue;
            }
            let mut log = self.read_log(slot.log());
            let before = log.entries();
            if keep(&mut slot, &mut log) {
                let entries = log.entries();
                if entries == before {
                    kept.push((slot, None));
                } else {
                    self.free_log(slot.log());
                    slot.set_log(0);
                    kept.push((slot, Some(entries)));
                }
            } else {
                self.free_log(slot.log());
            }
        }
        self.rebuild(kept, self.active());
    }

    /// Refills the array with `kept` (each with new log entries to write, if they changed), `active`
    /// slots of it.
    fn rebuild(&mut self, kept: Vec<(RegionSlot, Option<Entries>)>, active: usize) {
        let slots: Vec<RegionSlot> = kept
            .into_iter()
            .map(|(mut slot, entries)| {
                if let Some(entries) = entries {
                    slot.set_log(self.write_entries(&entries).unwrap_or(0));
                }
                slot
            })
            .collect();
        // Journaled first: a process killed while the slots are empty loses nothing (see `repair`).
        // SAFETY: see `new`; the journal's lock is made by the region's creator.
        let journal = unsafe { &*self.place.journal };
        let held = journal.lock.lock_whole();
        self.restore_journaled();
        // A process died rebuilding another shard: its journal waits for that shard's next holder, and
        // this rebuild goes unjournaled (only a second death, in this one, could lose its states).
        // SAFETY: see `new`; the journal's lock is held.
        let pending = unsafe { (*self.place.journal).shard };
        if pending > self.place.shards as u64 {
            // Names no shard (corrupt bytes): nothing to restore, and it must not stop later journals.
            // SAFETY: see `new`; the journal's lock is held.
            unsafe { (*self.place.journal).shard = 0 };
        }
        // SAFETY: as above.
        let others = unsafe { (*self.place.journal).shard } != 0;
        if !others {
            self.journal(&slots, active);
        }
        let left = self.area(self.active());
        self.set_active(active);
        self.place_all(&slots);
        if left != self.area(active) {
            // Moved out of the first block: emptied, so that a repair finds each state once.
            // SAFETY: see `new`; the lock is held.
            unsafe { std::slice::from_raw_parts_mut(left, self.first_len()) }.fill(RegionSlot::default());
        }
        if !others {
            // SAFETY: see `new`; the journal's lock is held.
            unsafe { (*self.place.journal).shard = 0 };
        }
        drop(held);
    }

    /// Empties the active slots and places `slots` in them.
    fn place_all(&mut self, slots: &[RegionSlot]) {
        let before = self.len();
        self.slots_mut().fill(RegionSlot::default());
        // More than fit only from corrupt bytes: those are dropped.
        let placed = slots.iter().filter(|slot| self.place_slot(**slot)).count();
        self.set_len(before, placed);
    }

    /// Records `slots` as this shard's, about to be placed in `active` slots (the journal's lock held).
    fn journal(&self, slots: &[RegionSlot], active: usize) {
        // SAFETY: see `new`; the journal's lock is held, its slots are a shard's capacity, and a shard
        // never holds more states than its capacity.
        unsafe {
            let journal = self.place.journal;
            std::ptr::copy_nonoverlapping(slots.as_ptr(), self.place.journal_slots, slots.len());
            (*journal).len = slots.len() as u64;
            (*journal).active = active as u64;
            std::sync::atomic::fence(Ordering::Release);
            (*journal).shard = self.place.index as u64 + 1;
        }
    }

    /// Places the states the journal holds for this shard, if a process died rebuilding it (the
    /// journal's lock held): what it had emptied comes back whole.
    fn restore_journaled(&mut self) {
        // SAFETY: see `new`; the journal's lock is held.
        let journal = unsafe { &mut *self.place.journal };
        if journal.shard != self.place.index as u64 + 1 {
            return;
        }
        let len = usize::try_from(journal.len).unwrap_or(0).min(self.place.capacity);
        // SAFETY: within the journal's slots.
        let slots: Vec<RegionSlot> = unsafe { std::slice::from_raw_parts(self.place.journal_slots, len) }.to_vec();
        // The journal's numbers are checked as the shard's are (corrupt bytes): its states get the room
        // they need, at most the shard's, each once.
        let mut seen = std::collections::HashSet::new();
        let slots: Vec<RegionSlot> =
            slots.into_iter().filter(|slot| slot.occupied() && seen.insert(slot.identity())).collect();
        let written = usize::try_from(journal.active).unwrap_or(0);
        let active = if self.valid_active(written) { written } else { 0 };
        self.set_active(active.max(self.active_for(slots.len())));
        self.empty_all_slots();
        for slot in slots {
            self.place_slot(slot);
        }
        journal.shard = 0;
    }

    /// Records `count` states where `before` were counted, in the shard and the region's count.
    fn set_len(&self, before: usize, count: usize) {
        let before = before.min(self.place.capacity);
        #[allow(clippy::cast_possible_truncation)]
        {
            self.head().len = count as u32;
        }
        if count >= before {
            self.keys().fetch_add((count - before) as u64, Ordering::Relaxed);
        } else {
            self.keys().fetch_sub((before - count) as u64, Ordering::Relaxed);
        }
    }

    /// Forgets every state.
    pub fn clear(&mut self) {
        self.retain(|_, _| false);
    }

    /// Every occupied slot, for walks that only read.
    pub fn iter(&self) -> impl Iterator<Item = &RegionSlot> {
        self.slots().iter().filter(|s| s.occupied())
    }

    /// One pass of making room, as `room::Room::make` does for memory: drops idle states, decays use
    /// counts once per shard's worth of inserts, then evicts the least used until an eighth is free.
    /// `keep`: the identity of a key never to evict.
    pub(crate) fn make_room(&mut self, now: u64, keep: Option<u64>, mut gone: impl FnMut(u32, Removal)) {
        let before = self.len();
        let want = (before / 8).max(1);
        let head = self.head();
        let decay = head.inserts_since_decay as usize >= before.max(64);
        if decay {
            head.inserts_since_decay = 0;
        }
        let mut kept: Vec<RegionSlot> = Vec::with_capacity(before.min(self.place.capacity));
        let mut dropped = 0u64;
        for slot in self.iter() {
            let mut slot = *slot;
            if slot.state.is_idle(now) {
                gone(slot.packed_owner(), Removal::Dropped);
                self.free_log(slot.log());
                dropped += 1;
                continue;
            }
            if decay {
                slot.tag = (slot.tag & !0xFF) | u64::from(slot.uses() / 2);
            }
            kept.push(slot);
        }
        let mut evicted = 0u64;
        let dropped_here = usize::try_from(dropped).unwrap_or(usize::MAX);
        if dropped_here < want && !kept.is_empty() {
            let movable = |slot: &RegionSlot| keep != Some(slot.identity());
            let mut evictions =
                Evictions::new(kept.iter().filter(|slot| movable(slot)).map(RegionSlot::uses), want - dropped_here);
            kept.retain(|slot| {
                let evict = movable(slot) && evictions.evicts(slot.uses());
                if evict {
                    gone(slot.packed_owner(), Removal::Evicted);
                    self.free_log(slot.log());
                    evicted += 1;
                }
                !evict
            });
        }
        let head = self.head();
        head.dropped = head.dropped.wrapping_add(dropped);
        head.evictions = head.evictions.wrapping_add(evicted);
        self.rebuild(kept.into_iter().map(|slot| (slot, None)).collect(), self.active());
    }

    /// The sliding log of `key` (empty if none).
    #[must_use]
    pub fn log(&self, key: u64) -> Log {
        self.get(key).map_or_else(Log::new, |slot| self.read_log(slot.log()))
    }

    /// Whether `key` has a sliding log here.
    #[inline(never)]
    #[must_use]
    pub fn has_log(&self, key: u64) -> bool {
        self.get(key).is_some_and(|slot| slot.log() != 0)
    }

    /// Replaces the sliding log of `key` (which has a slot) by `log`. When the pool has no room, the
    /// least used states are evicted for it; a log longer than the whole pool keeps its newest entries.
    pub(crate) fn set_log(&mut self, key: u64, log: &Log, now: u64, mut gone: impl FnMut(u32, Removal)) {
        let Some(index) = self.find(key) else { return };
        let old = self.slots()[index].log();
        self.free_log(old);
        self.slots_mut()[index].set_log(0);
        let mut entries = log.entries();
        loop {
            if let Some(first) = self.write_entries(&entries) {
                if let Some(index) = self.find(key) {
                    self.slots_mut()[index].set_log(first);
                    return;
                }
                // Evicted to make room for itself: the state is gone, so is its log.
                self.free_log(first);
                return;
            }
            let others = self.iter().filter(|s| s.log() != 0 && s.identity() != key >> IDENTITY_SHIFT).count();
            if others == 0 {
                // Nothing else here to evict (other shards' logs hold the pool): keep the newest entries
                // that fit, if any do.
                let fits = self.free_chunk_count() * CHUNK_ENTRIES;
                if fits == 0 || fits >= entries.len() {
                    return;
                }
                entries.drain(..entries.len() - fits);
                continue;
            }
            // Never the key whose log this is: it would make room by losing what it makes room for.
            self.make_room(now, Some(key >> IDENTITY_SHIFT), &mut gone);
        }
    }

    /// Chunks this shard could take now: its own free ones and the pool's (read without the pool's
    /// lock: a hint).
    fn free_chunk_count(&self) -> usize {
        // SAFETY: see `new`; plain integers read as they are.
        let (free, fresh) = unsafe {
            let pool = self.place.pool;
            ((&raw const (*pool).free_count).read_volatile(), (&raw const (*pool).fresh).read_volatile())
        };
        let never_handed = self.place.chunk_count.saturating_sub(fresh);
        (self.head().free_count as usize).saturating_add(free as usize).saturating_add(never_handed as usize)
    }

    /// This shard's mark on the chunks it holds.
    #[allow(clippy::cast_possible_truncation)] // a region has at most MAX_SHARED_SHARDS shards
    const fn owner_mark(&self) -> u32 {
        self.place.index as u32 + 1
    }

    /// Whether `at` (a chunk plus one) is a chunk of the pool this shard holds.
    fn holds(&self, at: u32) -> bool {
        at != 0 && at <= self.place.chunk_count && self.chunk(at - 1).owner == self.owner_mark()
    }

    fn read_log(&self, mut at: u32) -> Log {
        if at == 0 {
            return Log::new();
        }
        let mut entries = Vec::new();
        let mut hops = 0;
        let mut units = 0u64;
        'chain: while self.holds(at) && hops < self.place.chunk_count {
            let chunk = self.chunk(at - 1);
            for &entry in &chunk.entries[..(chunk.len as usize).min(CHUNK_ENTRIES)] {
                // Past `LOG_UNITS` only from corrupt bytes: the rest is dropped, so that sums of units
                // (and a cost added to them) never overflow.
                if entry.1 > LOG_UNITS - units {
                    break 'chain;
                }
                units += entry.1;
                entries.push(entry);
            }
            at = chunk.next;
            hops += 1;
        }
        Log::from_entries(entries)
    }

    /// Writes `entries` into new chunks; their first plus one (0 for none), or `None`: no room.
    fn write_entries(&self, entries: &[(u64, u64)]) -> Option<u32> {
        if entries.is_empty() {
            return Some(0);
        }
        let mut first = 0;
        for part in entries.chunks(CHUNK_ENTRIES).rev() {
            // Taken one by one (no walk of the free list to count it first); without room, what was
            // taken goes back.
            let Some(index) = self.take_chunk() else {
                self.free_log(first);
                return None;
            };
            let chunk = self.chunk(index);
            chunk.next = first;
            #[allow(clippy::cast_possible_truncation)]
            {
                chunk.len = part.len() as u32;
            }
            chunk.entries[..part.len()].copy_from_slice(part);
            first = index + 1;
        }
        Some(first)
    }

    fn take_chunk(&self) -> Option<u32> {
        let head = self.head();
        if head.free_chunks != 0 {
            if self.holds(head.free_chunks) {
                let index = head.free_chunks - 1;
                head.free_chunks = self.chunk(index).next;
                head.free_count = head.free_count.saturating_sub(1);
                return Some(index);
            }
            // Not a list of ours (corrupt bytes): forgotten; a repair finds the chunks we hold.
            head.free_chunks = 0;
            head.free_count = 0;
        }
        self.take_from_pool()
    }

    /// Takes up to `TAKE_BATCH` chunks from the pool under its lock: one to use, the rest to keep.
    #[cold]
    fn take_from_pool(&self) -> Option<u32> {
        let pool = self.pool();
        let held = pool.lock.lock_whole();
        if held.recovered {
            self.repair_pool();
        }
        let mut taken = None;
        for _ in 0..TAKE_BATCH {
            if pool.free != 0 && !(pool.free <= self.place.chunk_count && self.chunk(pool.free - 1).owner == 0) {
                self.repair_pool(); // not a list of the pool's chunks (corrupt bytes)
            }
            let index = if pool.free != 0 && pool.free <= self.place.chunk_count {
                let index = pool.free - 1;
                pool.free = self.chunk(index).next;
                pool.free_count = pool.free_count.saturating_sub(1);
                index
            } else if pool.fresh < self.place.chunk_count {
                pool.fresh += 1;
                pool.fresh - 1
            } else {
                break;
            };
            let chunk = self.chunk(index);
            chunk.owner = self.owner_mark();
            match taken {
                None => taken = Some(index),
                Some(_) => self.keep_free(index),
            }
        }
        drop(held);
        taken
    }

    /// Puts chunk `index` (held by this shard) on its own free list.
    fn keep_free(&self, index: u32) {
        let head = self.head();
        self.chunk(index).next = head.free_chunks;
        head.free_chunks = index + 1;
        head.free_count = head.free_count.saturating_add(1);
    }

    #[allow(clippy::mut_from_ref)]
    fn pool(&self) -> &mut PoolHead {
        // SAFETY: see `new`; written under the pool's lock.
        unsafe { &mut *self.place.pool }
    }

    /// Rebuilds the pool's free list after a process died holding its lock: every chunk handed out
    /// that no shard holds (the pool's lock held).
    fn repair_pool(&self) {
        let pool = self.pool();
        pool.fresh = pool.fresh.min(self.place.chunk_count);
        pool.free = 0;
        pool.free_count = 0;
        for index in (0..pool.fresh).rev() {
            let chunk = self.chunk(index);
            if chunk.owner == 0 {
                chunk.next = pool.free;
                pool.free = index + 1;
                pool.free_count += 1;
            }
        }
    }

    fn free_log(&self, mut at: u32) {
        let mut hops = 0;
        while self.holds(at) && hops < self.place.chunk_count {
            let index = at - 1;
            at = self.chunk(index).next;
            self.keep_free(index);
            hops += 1;
        }
        if self.head().free_count > KEEP_FREE {
            self.give_back(KEEP_FREE / 2);
        }
    }

    /// Gives the pool the chunks of this shard's free list beyond `keep`.
    #[cold]
    fn give_back(&self, keep: u32) {
        let pool = self.pool();
        let held = pool.lock.lock_whole();
        if held.recovered {
            self.repair_pool();
        }
        let shard = self.head();
        while shard.free_count > keep && self.holds(shard.free_chunks) {
            let index = shard.free_chunks - 1;
            let chunk = self.chunk(index);
            shard.free_chunks = chunk.next;
            shard.free_count -= 1;
            chunk.owner = 0;
            chunk.next = pool.free;
            pool.free = index + 1;
            pool.free_count = pool.free_count.saturating_add(1);
        }
        drop(held);
    }

    /// Makes the shard whole after a process died holding its lock, whatever it was writing: one slot
    /// per identity (a shift may have copied one), log chains within the chunks it holds and not shared,
    /// its free list rebuilt from the chunks it holds that no slot uses, the counts recounted. What the dead process was
    /// deciding may be lost; nothing else is.
    pub fn repair(&mut self) {
        {
            // SAFETY: see `new`; the journal's lock is made by the region's creator.
            let held = unsafe { &*self.place.journal }.lock.lock_whole();
            self.restore_journaled();
            drop(held);
        }
        let chunk_count = self.place.chunk_count as usize;
        let mut used = vec![false; chunk_count];
        let mut seen = std::collections::HashSet::new();
        let mut kept = Vec::new();
        let every_slot: Vec<RegionSlot> = self.all_slots_mut().iter().flat_map(|area| area.iter().copied()).collect();
        for mut slot in every_slot {
            if !slot.occupied() || !seen.insert(slot.identity()) {
                continue;
            }
            // A chain is kept only if it stays in chunks this shard holds, has no cycle and shares none.
            let mut chain = Vec::new();
            let mut at = slot.log();
            let mut whole = true;
            while at != 0 {
                let index = at as usize - 1;
                if !self.holds(at) || used[index] || chain.contains(&index) {
                    whole = false;
                    break;
                }
                chain.push(index);
                at = self.chunk(at - 1).next;
            }
            if whole {
                for &i in &chain {
                    used[i] = true;
                }
            } else {
                slot.set_log(0);
            }
            kept.push(slot);
        }
        // The free list: every chunk this shard holds that no log uses.
        let head = self.head();
        head.free_chunks = 0;
        head.free_count = 0;
        #[allow(clippy::cast_possible_truncation)] // chunk_count is a u32
        for index in (0..chunk_count as u32).rev() {
            if !used[index as usize] && self.chunk(index).owner == self.owner_mark() {
                self.keep_free(index);
            }
        }
        // More states than the shard holds come only from corrupt bytes: those past it are dropped (the
        // chunks of their logs stay the shard's until its next repair finds them free).
        kept.truncate(self.place.capacity * 7 / 8);
        let before = self.len();
        self.empty_all_slots();
        // Enough active slots for every state kept (a process may have died growing them).
        let now = self.active();
        let now = if self.valid_active(self.head().active as usize) { now } else { 0 };
        self.set_active(self.active_for(kept.len()).max(now));
        let count = kept.into_iter().filter(|slot| self.place_slot(*slot)).count();
        self.set_len(before, count);
    }

    /// The fewest active slots for `count` states, 7/8 full at most (up to the shard's capacity).
    fn active_for(&self, count: usize) -> usize {
        let mut active = self.first_len();
        while count * 8 > active * 7 && active < self.place.capacity {
            active = (active * 2).min(self.place.capacity);
        }
        active
    }
}

/// Whether process `pid` still runs (a zombie, killed but not yet reaped, does not).
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(id) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(id, 0) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
    }
    // The state is the field after the command's closing parenthesis.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .is_none_or(|zombie| !zombie)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard laid out in a plain heap buffer (its lock unused: one thread).
    struct Fixture {
        _memory: Vec<u128>,
        keys: Box<AtomicU64>,
        table: RegionTable,
    }

    fn fixture(capacity: usize, chunk_count: u32, max_keys: u64) -> Fixture {
        let bytes = std::mem::size_of::<JournalHead>()
            + std::mem::size_of::<LeaseOverflow>()
            + OVERFLOW_LEASES * std::mem::size_of::<Lease>()
            + std::mem::size_of::<ShardHead>()
            + std::mem::size_of::<ShardCounts>()
            + std::mem::size_of::<PoolHead>()
            + (2 * capacity + MIN_ACTIVE) * std::mem::size_of::<RegionSlot>()
            + chunk_count as usize * std::mem::size_of::<Chunk>();
        let mut memory = vec![0u128; bytes.div_ceil(16) + 4];
        let base = memory.as_mut_ptr().cast::<u8>();
        let base = base.wrapping_add(base.align_offset(64));
        // SAFETY: all within `memory`, zeroed, aligned for each part.
        let place = unsafe {
            // A zeroed pthread mutex is a valid (plain) one: enough for one process.
            let journal = base.cast::<JournalHead>();
            let overflow = journal.add(1).cast::<LeaseOverflow>();
            let overflow_leases = overflow.add(1).cast::<Lease>();
            let head = overflow_leases.add(OVERFLOW_LEASES).cast::<ShardHead>();
            let counts = head.add(1).cast::<ShardCounts>();
            let pool = counts.add(1).cast::<PoolHead>();
            let first = pool.add(1).cast::<RegionSlot>();
            let slots = first.add(MIN_ACTIVE);
            let journal_slots = slots.add(capacity);
            let chunks = journal_slots.add(capacity).cast::<Chunk>();
            ShardPlace {
                index: 0,
                shards: 1,
                journal,
                journal_slots,
                head,
                counts,
                first,
                slots,
                capacity,
                overflow,
                overflow_leases,
                pool,
                chunks,
                chunk_count,
            }
        };
        let keys = Box::new(AtomicU64::new(0));
        // SAFETY: the fixture keeps `memory` and `keys` alive with the table.
        let table = unsafe { RegionTable::new(place, &raw const *keys, max_keys) };
        Fixture { _memory: memory, keys, table }
    }

    fn key(i: u64) -> u64 {
        ahash::RandomState::with_seeds(1, 2, 3, 4).hash_one(i)
    }

    fn busy() -> State {
        State { t: u64::MAX, a: 1, b: 0 }
    }

    #[test]
    fn slots_and_chunks_have_their_sizes() {
        assert_eq!(std::mem::size_of::<RegionSlot>(), 32);
        assert_eq!(std::mem::size_of::<Chunk>(), 256);
    }

    #[test]
    fn inserts_finds_and_removes_keep_every_other_key_reachable() {
        let mut f = fixture(64, 4, 1_000);
        for i in 0..50 {
            f.table.insert(key(i), State { t: i, a: 0, b: 0 }, 3, 0, 0, |_, _| panic!("no room needed"));
        }
        for i in (0..50).step_by(3) {
            assert_eq!(f.table.remove(key(i)), Some(3));
        }
        for i in 0..50 {
            assert_eq!(f.table.get(key(i)).map(|s| s.state.t), (i % 3 != 0).then_some(i), "key {i}");
        }
        assert_eq!(f.table.len(), 33);
        assert_eq!(f.keys.load(Ordering::Relaxed), 33);
    }

    #[test]
    fn a_full_shard_drops_idle_states_then_evicts_the_least_used() {
        let mut f = fixture(128, 0, 100);
        let hot = key(u64::MAX);
        f.table.insert(hot, busy(), 0, 0, 0, |_, _| {});
        let mut evicted = 0;
        for i in 0..10_000 {
            if i % 20 == 0 {
                assert!(f.table.get_mut(hot).is_some(), "the busy key was evicted at {i}");
            }
            let idle = i % 2 == 0;
            let state = if idle { State::default() } else { busy() };
            f.table.insert(key(i), state, 0, 0, 10, |_, removal| evicted += u64::from(removal == Removal::Evicted));
        }
        assert!(f.table.len() <= 100);
        assert!(evicted > 0);
    }

    #[test]
    fn logs_are_kept_in_chunks_and_given_back() {
        let mut f = fixture(32, 4, 100);
        f.table.insert(key(1), busy(), 0, 0, 0, |_, _| {});
        let log = Log::from_entries((0..40).map(|i| (i, 1 + i % 2)));
        f.table.set_log(key(1), &log, 0, |_, _| {});
        assert_eq!(f.table.log(key(1)).entries(), log.entries());
        assert_eq!(f.table.free_chunk_count(), 1);
        f.table.remove(key(1));
        assert_eq!(f.table.free_chunk_count(), 4);
    }

    #[test]
    fn a_log_without_room_evicts_another_keys_log() {
        let mut f = fixture(32, 2, 100);
        for i in 0..2 {
            f.table.insert(key(i), busy(), 0, 0, 0, |_, _| {});
            f.table.set_log(key(i), &Log::from_entries((0..15).map(|t| (t, 1))), 0, |_, _| {});
        }
        f.table.get_mut(key(1));
        f.table.insert(key(2), busy(), 0, 0, 0, |_, _| {});
        f.table.set_log(key(2), &Log::from_entries((0..15).map(|t| (t, 1))), 0, |_, _| {});
        assert_eq!(f.table.log(key(2)).units(), 15);
        assert!(f.table.get(key(0)).is_none() || f.table.get(key(1)).is_none() || f.table.log(key(0)).is_empty());
    }

    #[test]
    fn a_rebuild_cut_short_after_emptying_the_slots_is_restored_from_the_journal() {
        let mut f = fixture(128, 4, 1_000);
        for i in 0..40 {
            f.table.insert(key(i), State { t: 100 + i, a: 0, b: 0 }, 3, 0, 0, |_, _| {});
        }
        // As a process killed inside `rebuild`: the states journaled, the slots emptied, nothing placed.
        let slots: Vec<RegionSlot> = f.table.iter().copied().collect();
        f.table.journal(&slots, f.table.active());
        f.table.empty_all_slots();
        f.table.repair();
        assert_eq!(f.table.len(), 40);
        for i in 0..40 {
            assert_eq!(f.table.get(key(i)).map(|s| s.state.t), Some(100 + i), "key {i}");
        }
        // The journal is spent: a later repair leaves the shard as it is.
        f.table.remove(key(0));
        f.table.repair();
        assert_eq!(f.table.len(), 39);
    }

    #[test]
    fn a_shard_moves_from_its_first_block_to_its_own_slots_losing_nothing() {
        let mut f = fixture(320, 0, 1_000);
        for i in 0..30 {
            f.table.insert(key(i), State { t: i, a: 0, b: 0 }, 3, 0, 0, |_, _| panic!("no room needed"));
        }
        assert_eq!(f.table.slots().as_ptr(), f.table.place.first.cast_const(), "30 states fit the first block");
        for i in 30..200 {
            f.table.insert(key(i), State { t: i, a: 0, b: 0 }, 3, 0, 0, |_, _| panic!("no room needed"));
        }
        assert_eq!(f.table.slots().as_ptr(), f.table.place.slots.cast_const());
        let [first, _] = f.table.all_slots_mut();
        assert!(first.iter().all(|slot| !slot.occupied()), "the first block was left behind empty");
        for i in 0..200 {
            assert_eq!(f.table.get(key(i)).map(|s| s.state.t), Some(i), "key {i}");
        }
        assert_eq!(f.table.len(), 200);
    }

    #[test]
    fn a_move_out_of_the_first_block_cut_short_is_repaired_from_both_areas() {
        let mut f = fixture(320, 0, 1_000);
        for i in 0..40 {
            f.table.insert(key(i), State { t: i, a: 0, b: 0 }, 3, 0, 0, |_, _| {});
        }
        // As a process killed moving the shard unjournaled (another shard's journal was pending): the
        // shard says its own slots are in use, half the states are placed there, all are in the first block.
        let moving: Vec<RegionSlot> = f.table.iter().copied().collect();
        f.table.set_active(96);
        for slot in &moving[..20] {
            f.table.place_slot(*slot);
        }
        f.table.repair();
        assert_eq!(f.table.len(), 40);
        assert_eq!(f.table.iter().count(), 40);
        for i in 0..40 {
            assert_eq!(f.table.get(key(i)).map(|s| s.state.t), Some(i), "key {i}");
        }
    }

    #[test]
    fn repair_removes_a_duplicate_and_a_broken_chain_and_recounts() {
        let mut f = fixture(32, 4, 100);
        for i in 0..5 {
            f.table.insert(key(i), busy(), 0, 0, 0, |_, _| {});
        }
        f.table.set_log(key(0), &Log::from_entries((0..20).map(|t| (t, 1))), 0, |_, _| {});
        // A copy of a slot left behind by a shift cut short, a chain pointing out of the pool, a count off.
        let copy = *f.table.get(key(1)).unwrap();
        let free = (0..32).find(|&i| !f.table.slots()[i].occupied()).unwrap();
        f.table.slots_mut()[free] = copy;
        let broken = f.table.find(key(2)).unwrap();
        f.table.slots_mut()[broken].set_log(99);
        f.table.head().len = 17;
        f.table.repair();
        assert_eq!(f.table.len(), 5);
        assert_eq!(f.table.iter().count(), 5);
        assert_eq!(f.table.log(key(0)).units(), 20);
        assert!(f.table.log(key(2)).is_empty());
        assert_eq!(f.table.free_chunk_count(), 2);
    }

    #[test]
    fn a_shard_of_garbage_slots_answers_and_is_repaired_to_what_fits() {
        let mut f = fixture(64, 4, 1_000);
        // Every slot occupied (corrupt bytes), the count saying one: no probe may go round forever.
        for area in f.table.all_slots_mut() {
            for (i, slot) in area.iter_mut().enumerate() {
                *slot = RegionSlot {
                    tag: key(10_000 + i as u64),
                    owner: OCCUPIED,
                    link: u32::MAX,
                    ..RegionSlot::default()
                };
            }
        }
        f.table.head().len = 1;
        assert!(!f.table.corrupt(), "numbers that fit: only the slots say otherwise");
        assert!(f.table.get(key(1)).is_none());
        assert!(f.table.log(key(1)).is_empty());
        f.table.insert(key(1), busy(), 0, 0, 0, |_, _| {});
        assert!(f.table.get(key(1)).is_some(), "placed after the repair made room");
        assert_eq!(f.table.iter().count(), f.table.len());
        assert!(f.table.len() <= 64 * 7 / 8 + 1);
        assert!(f.table.remove(key(1)).is_some());
        // Impossible numbers are told at once (the lock hands such a shard over for repair).
        for (len, active) in [(100, 0), (5, 3), (5, 1_000), (41, 40)] {
            f.table.head().len = len;
            f.table.head().active = active;
            assert!(f.table.corrupt(), "len {len} active {active}");
            f.table.repair();
            assert!(!f.table.corrupt(), "repaired: len {len} active {active}");
            assert_eq!(f.table.iter().count(), f.table.len());
        }
    }

    #[test]
    fn leases_past_the_shards_go_to_the_overflow_and_past_it_are_refused() {
        let mut f = fixture(64, 0, 1_000);
        for i in 0..(LEASES + OVERFLOW_LEASES) as u64 {
            assert!(f.table.reserve_lease(key(i)), "lease {i}");
            assert!(f.table.lease(key(i), 1), "lease {i}");
        }
        let one_more = key(u64::MAX);
        assert!(!f.table.reserve_lease(one_more), "every lease in use: refused");
        assert!(!f.table.lease(one_more, 1));
        // More permits of a key already leased, and giving back, need no new entry.
        assert!(f.table.reserve_lease(key(4_000)) && f.table.lease(key(4_000), 1));
        assert!(f.table.lease(key(4_000), -2));
        assert!(f.table.reserve_lease(one_more), "the entry given back is free again");
        assert!(f.table.lease(one_more, 1));
        // A live process's leases are never taken as dead.
        assert_eq!(f.table.take_dead_leases(key(3)) + f.table.take_dead_leases(key(4_001)), 0);
    }
}
