//! The async completion queue shared with user space (`neuron_h2d_dma_compl_queue_t`, FACTS §5.7): one per
//! ring, single producer (the driver, under the ring lock), many consumers (user threads and processes that
//! map the same memory).
//!
//! # Layout
//!
//! A 16-byte header — capacity, head (consumers, free-running), tail (producer, free-running), and the word at
//! +12, which the driver leaves as padding and this project uses as the consumers' lock — followed by 1024
//! entries of 24 bytes: 24,592 bytes in all.
//!
//! # Protocol
//!
//! - Producer: caches its own tail; loads head with `Acquire` (the consumers are done with every slot before
//!   it); writes the entry at `tail & mask`; publishes `tail + 1` with `Release`. It never waits: when the
//!   queue is full the entry goes to a driver-side backlog, posted in order as soon as consumers free space
//!   (the driver instead sleeps holding the ring lock).
//! - Consumer (the runtime's side, defined here): return at once if head = tail; otherwise take the lock
//!   word (`Acquire` CAS 0 → the process id); load tail with `Acquire`; if head ≠ tail read the entry at
//!   `head & mask`, clear it (sequence number first), and publish `head + 1` with `Release`; release the
//!   lock (`Release` store of 0). The lock serialises consumers: clearing an entry and advancing the head
//!   must not interleave with another consumer's.
//!
//! # A consumer that dies holding the lock
//!
//! Consumers are often other processes, and a process can be killed anywhere, lock held or not. The lock
//! word names its holder's process, so a consumer that has waited a while asks the kernel whether that
//! process still exists (`kill(pid, 0)`); if it does not, it takes the lock over (CAS from the dead id to its
//! own) and finishes what the dead holder may have left half done: an entry at the head whose sequence number
//! is already 0 was read and was being cleared — it left with the dead process, as an entry it had taken
//! would have — so the head moves past it; an entry whose sequence number is intact was not touched (the
//! sequence number is cleared first) and is taken normally. The rule needs every posted entry to have a
//! non-zero sequence number, which the driver side guarantees (0 means a synchronous request, which posts
//! nothing, and [`crate::NeuronDevice::zerocopy_submit_completed`] refuses it). The kernel reports a process
//! gone only once it has exited, after every store it made is visible, so the survivor reads the dead
//! holder's last writes. Consumers must share a PID namespace (a process id names the same process for
//! all of them); within one process the lock is never recovered (its threads do not die holding it).
//!
//! # Staleness
//!
//! [`CqConsumer::len`] is a snapshot, not synchronisation: entries may be posted or taken right after it.
//!
//! # Example
//!
//! Async zero-copy requests complete here, one entry each, in submission order:
//!
//! ```
//! # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
//! # let bed = doctest::testbed(udma::Arch::V3);
//! # let user = doctest::user(&bed, 64); // 64 pages mapped at `user.va`, this thread runs as the process
//! use ndma::zerocopy::{CqConsumer, CqEntry};
//! use ndma::BatchOp;
//!
//! let dev = &bed.system.devices()[0];
//! let hbm = dev.alloc_device(1 << 20, 0)?;
//! let cq = CqConsumer::new(&dev.completion_queue(0)?)?;
//! for seq in 1..=3 {
//!     let op = BatchOp { offset: seq * 65536, size: 65536, buffer: user.va + (seq - 1) * 65536 };
//!     // A non-zero sequence number: queued, the call returns at once.
//!     dev.zerocopy_submit(0, &[op], &hbm, 0, -1, true, seq, seq * 10)?;
//! }
//! let mut done = Vec::new();
//! let mut tries = 0u64; // bounded: a lost completion fails the example instead of hanging it
//! while done.len() < 3 {
//!     if let Some(entry) = cq.pop() {
//!         done.push(entry);
//!     } else {
//!         tries += 1;
//!         assert!(tries < 50_000_000, "completions lost: got {done:?}");
//!         std::thread::yield_now(); // the completion thread posts them
//!     }
//! }
//! let entry = |seq| CqEntry { sequence_num: seq, compl_ret: 0, context: seq * 10 };
//! assert_eq!(done, [entry(1), entry(2), entry(3)]);
//! assert!(cq.is_empty());
//! # Ok::<(), ndma::NdmaError>(())
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Once};

use crate::memory::MemChunk;
use crate::{NdmaError, Result};

/// Entries in a completion queue (`NDMA_H2D_COMPL_QUEUE_CAPACITY`); see [`CqConsumer::header`].
pub const NDMA_H2D_COMPL_QUEUE_CAPACITY: u32 = 1024;
/// Completions the driver holds back at most, behind a full queue, before it refuses new async requests of
/// the ring with [`NdmaError::CompletionBacklogFull`] (`-EBUSY`): one queue's worth. Requests already queued
/// still post theirs (at most the context queue's 1023 more), so the memory a ring spends on completions
/// nobody consumes stays bounded whatever its consumers do. The driver has no backlog: its producer sleeps
/// under the ring lock until there is room.
pub const NDMA_H2D_COMPL_BACKLOG_MAX: usize = NDMA_H2D_COMPL_QUEUE_CAPACITY as usize;
/// Bytes a user maps: header + entries (16 + 1024 × 24 = 24,592).
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device_of(udma::Arch::V3);
/// use ndma::zerocopy::{CqEntry, CqHeader, NDMA_H2D_COMPL_QUEUE_CAPACITY, NDMA_H2D_COMPL_QUEUE_SIZE};
///
/// assert_eq!((size_of::<CqHeader>(), size_of::<CqEntry>(), NDMA_H2D_COMPL_QUEUE_CAPACITY), (16, 24, 1024));
/// assert_eq!(dev.completion_queue(0)?.size(), NDMA_H2D_COMPL_QUEUE_SIZE as u64);
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub const NDMA_H2D_COMPL_QUEUE_SIZE: usize =
    size_of::<CqHeader>() + NDMA_H2D_COMPL_QUEUE_CAPACITY as usize * size_of::<CqEntry>();

/// The header (`neuron_h2d_dma_compl_queue_t` without its entries); [`CqConsumer::header`] reads it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CqHeader {
    /// Number of entries.
    pub capacity: u32,
    /// Consumers' free-running index.
    pub head: u32,
    /// Producer's free-running index.
    pub tail: u32,
    /// Padding in the driver's layout; the consumers' lock word here: 0, or the holder's process id.
    pub consumer_lock: u32,
}

/// One completion (`neuron_h2d_dma_compl_entry`): what [`CqConsumer::pop`] returns (see the
/// [module example](self)).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CqEntry {
    /// The request's sequence number (0 marks an empty slot).
    pub sequence_num: u64,
    /// 0, or the negative errno of the request's first failure.
    pub compl_ret: i64,
    /// The opaque value the submitter passed.
    pub context: u64,
}

const _: () = assert!(size_of::<CqHeader>() == 16);
const _: () = assert!(size_of::<CqEntry>() == 24);
const _: () = assert!(NDMA_H2D_COMPL_QUEUE_SIZE == 24_592);
const _: () = assert!(NDMA_H2D_COMPL_QUEUE_CAPACITY.is_power_of_two());

/// Byte offsets in the shared memory.
const CAPACITY: usize = 0;
const HEAD: usize = 4;
const TAIL: usize = 8;
const LOCK: usize = 12;
const ENTRIES: usize = size_of::<CqHeader>();

/// A 32-bit atomic word (implemented for `std`'s atomics; the loom tests implement it for loom's). See
/// [`CqMemory`]'s example.
pub trait Atomic32 {
    /// `load`.
    fn load(&self, order: Ordering) -> u32;
    /// `store`.
    fn store(&self, value: u32, order: Ordering);
    /// `compare_exchange_weak`.
    ///
    /// # Errors
    ///
    /// The value found when it was not `current`.
    fn compare_exchange_weak(&self, current: u32, new: u32, success: Ordering, failure: Ordering) -> Result<u32, u32>;
}

/// A 64-bit atomic word (implemented for `std`'s atomics). See [`CqMemory`]'s example.
pub trait Atomic64 {
    /// `load`.
    fn load(&self, order: Ordering) -> u64;
    /// `store`.
    fn store(&self, value: u64, order: Ordering);
}

impl Atomic32 for AtomicU32 {
    fn load(&self, order: Ordering) -> u32 {
        AtomicU32::load(self, order)
    }
    fn store(&self, value: u32, order: Ordering) {
        AtomicU32::store(self, value, order)
    }
    fn compare_exchange_weak(&self, current: u32, new: u32, success: Ordering, failure: Ordering) -> Result<u32, u32> {
        AtomicU32::compare_exchange_weak(self, current, new, success, failure)
    }
}

impl Atomic64 for AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
}

/// The words of a completion queue, as atomics: implemented over shared memory here, and over loom's atomics
/// by the loom tests, so both run the same producer and consumer code.
///
/// ```
/// use std::sync::atomic::{AtomicU32, AtomicU64};
/// use ndma::zerocopy::cq::{consume, CqEntry, CqMemory, CqProducer};
///
/// /// A four-entry queue in plain atomics (what the loom models do with loom's).
/// #[derive(Default)]
/// struct Words {
///     header: [AtomicU32; 4],
///     entries: [[AtomicU64; 3]; 4],
/// }
///
/// impl CqMemory for Words {
///     type W32 = AtomicU32;
///     type W64 = AtomicU64;
///     fn word(&self, off: usize) -> &AtomicU32 {
///         &self.header[off / 4]
///     }
///     fn entry_word(&self, slot: u32, field: usize) -> &AtomicU64 {
///         &self.entries[(slot % 4) as usize][field]
///     }
///     fn capacity(&self) -> u32 {
///         4
///     }
/// }
///
/// let mut producer = CqProducer::new(Words::default());
/// let e = |seq| CqEntry { sequence_num: seq, compl_ret: 0, context: 0 };
/// for seq in 1..=6 {
///     producer.put(e(seq)); // never blocks: what does not fit waits in the backlog
/// }
/// assert_eq!(producer.backlog_len(), 2);
/// assert_eq!(consume(producer.memory()), Some(e(1)));
/// assert!(!producer.flush(), "one slot was freed: entry 5 is posted, 6 still waits");
/// assert_eq!(consume(producer.memory()), Some(e(2)));
/// assert!(producer.flush(), "6 is posted: the backlog is empty");
/// let rest: Vec<_> = std::iter::from_fn(|| consume(producer.memory())).collect();
/// assert_eq!(rest, [e(3), e(4), e(5), e(6)]);
/// ```
pub trait CqMemory {
    /// A header word.
    type W32: Atomic32;
    /// An entry field.
    type W64: Atomic64;
    /// Header word at byte offset `off` (0, 4, 8 or 12).
    fn word(&self, off: usize) -> &Self::W32;
    /// Field `field` (0, 1, 2) of entry `slot`; `slot` is free-running, the memory masks it into its entries.
    fn entry_word(&self, slot: u32, field: usize) -> &Self::W64;
    /// Entries in the queue, a power of two: [`NDMA_H2D_COMPL_QUEUE_CAPACITY`] for the shared layout; a
    /// model-checking test makes it small so a few entries fill the queue.
    fn capacity(&self) -> u32 {
        NDMA_H2D_COMPL_QUEUE_CAPACITY
    }
    /// What a consumer does while another holds the lock.
    fn spin(&self) {
        std::hint::spin_loop();
    }
    /// The id a consumer writes into the lock word while it holds it: its process id (never 0).
    fn owner(&self) -> u32 {
        process_id()
    }
    /// Has the process `owner` (a lock holder's id) exited? Asked every
    /// [`CqMemory::spins_per_owner_check`] spins while it holds the lock; a true answer lets the asker take
    /// the lock over (module doc, "A consumer that dies holding the lock"). Everything the holder stored
    /// before it exited must be visible to the caller once this returns true.
    fn owner_gone(&self, owner: u32) -> bool {
        let Ok(pid) = libc::pid_t::try_from(owner) else { return false };
        // SAFETY: signal 0 sends nothing; the call only checks that the process exists and may be signalled.
        let r = unsafe { libc::kill(pid, 0) };
        // EPERM: it exists under another user. Only ESRCH says it is gone.
        r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
    /// Spins between two [`CqMemory::owner_gone`] questions (a system call each).
    fn spins_per_owner_check(&self) -> u32 {
        1024
    }
}

/// This process's id, as [`CqMemory::owner`] names a lock holder. Cached: `getpid` is a system call (≈ 200 ns
/// on this project's VMs), which every take would otherwise pay. A `fork` child handler forgets the cached id,
/// so a forked child names itself, not its parent (a child made by a raw `clone` that skips the fork handlers
/// must not consume before it execs).
fn process_id() -> u32 {
    static FORGET_ON_FORK: Once = Once::new();
    FORGET_ON_FORK.call_once(|| {
        // SAFETY: registers a child handler that only stores to an atomic (async-signal-safe, as a handler run
        // in a forked child of a threaded process must be); nothing is ever unregistered.
        unsafe { libc::pthread_atfork(None, None, Some(forget_process_id)) };
    });
    // Relaxed: a cache of a value the kernel fixes for the life of the process; the fork handler resets it in
    // the child before any code of the child reads it.
    match CACHED_PID.load(Ordering::Relaxed) {
        0 => {
            let pid = std::process::id();
            CACHED_PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

/// [`process_id`]'s cache (0: not read yet in this process).
static CACHED_PID: AtomicU32 = AtomicU32::new(0);

extern "C" fn forget_process_id() {
    // Relaxed: see `process_id`.
    CACHED_PID.store(0, Ordering::Relaxed);
}

/// A completion queue's memory at a CPU address.
struct RawCq {
    base: *mut u8,
    /// Keeps the memory alive (the driver's chunk; `None` for a mapping the caller keeps alive).
    _owner: Option<Arc<MemChunk>>,
}

// SAFETY: `base` points at memory that lives as long as the value (owned chunk, or the `from_raw` contract);
// every access goes through atomics.
unsafe impl Send for RawCq {}
// SAFETY: as above.
unsafe impl Sync for RawCq {}

impl CqMemory for RawCq {
    type W32 = AtomicU32;
    type W64 = AtomicU64;

    fn word(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off <= LOCK && off % 4 == 0);
        // SAFETY: `base` is valid for NDMA_H2D_COMPL_QUEUE_SIZE bytes and at least 8-byte aligned (construction
        // contract); `off` is one of the header words, so the pointer is in bounds and 4-byte aligned. All
        // parties access the word atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    fn entry_word(&self, slot: u32, field: usize) -> &AtomicU64 {
        let off = ENTRIES + (slot & (NDMA_H2D_COMPL_QUEUE_CAPACITY - 1)) as usize * size_of::<CqEntry>() + 8 * field;
        debug_assert!(field < 3);
        // SAFETY: the slot is masked into the entry array and `field < 3`, so the 8 bytes lie inside the mapping;
        // entries start at +16 and are 24 bytes, so the offset is 8-byte aligned on an 8-byte aligned base.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }
}

/// Resets the queue: capacity, indices and lock zeroed, every entry empty. [`CqProducer::new`] does it.
///
/// ```
/// # use std::sync::atomic::{AtomicU32, AtomicU64};
/// # use ndma::zerocopy::cq::{consume, CqMemory};
/// #
/// # /// A four-entry queue in plain atomics (what the loom models do with loom's).
/// # #[derive(Default)]
/// # struct Words {
/// #     header: [AtomicU32; 4],
/// #     entries: [[AtomicU64; 3]; 4],
/// # }
/// #
/// # impl CqMemory for Words {
/// #     type W32 = AtomicU32;
/// #     type W64 = AtomicU64;
/// #     fn word(&self, off: usize) -> &AtomicU32 {
/// #         &self.header[off / 4]
/// #     }
/// #     fn entry_word(&self, slot: u32, field: usize) -> &AtomicU64 {
/// #         &self.entries[(slot % 4) as usize][field]
/// #     }
/// #     fn capacity(&self) -> u32 {
/// #         4
/// #     }
/// # }
/// #
/// let words = Words::default();
/// ndma::zerocopy::cq::init(&words);
/// assert_eq!(words.word(0).load(std::sync::atomic::Ordering::Relaxed), 4, "the capacity word");
/// assert_eq!(consume(&words), None);
/// ```
pub fn init<M: CqMemory>(m: &M) {
    m.word(CAPACITY).store(m.capacity(), Ordering::Relaxed);
    for off in [HEAD, TAIL, LOCK] {
        m.word(off).store(0, Ordering::Relaxed);
    }
    for slot in 0..m.capacity() {
        clear_entry(m, slot);
    }
}

/// Clears entry `slot`, sequence number first: a consumer that takes over the lock of one that died reads a
/// non-zero sequence number as "this entry was not touched" (module doc).
fn clear_entry<M: CqMemory>(m: &M, slot: u32) {
    write_entry(m, slot, CqEntry::default());
}

fn write_entry<M: CqMemory>(m: &M, slot: u32, e: CqEntry) {
    // Relaxed: published by the producer's Release store of tail (or, for a cleared entry, the consumer's
    // Release store of head). The sequence number goes first (see `clear_entry`).
    m.entry_word(slot, 0).store(e.sequence_num, Ordering::Relaxed);
    m.entry_word(slot, 1).store(e.compl_ret as u64, Ordering::Relaxed);
    m.entry_word(slot, 2).store(e.context, Ordering::Relaxed);
}

fn read_entry<M: CqMemory>(m: &M, slot: u32) -> CqEntry {
    // Relaxed: the caller acquired tail, which the producer released after writing the entry.
    CqEntry {
        sequence_num: m.entry_word(slot, 0).load(Ordering::Relaxed),
        compl_ret: m.entry_word(slot, 1).load(Ordering::Relaxed) as i64,
        context: m.entry_word(slot, 2).load(Ordering::Relaxed),
    }
}

/// The producer's side of one queue: its cached tail and the backlog of entries the consumers had no room for.
/// The driver runs one per ring; see [`CqMemory`]'s example.
pub struct CqProducer<M: CqMemory> {
    mem: M,
    tail: u32,
    backlog: VecDeque<CqEntry>,
}

impl<M: CqMemory> CqProducer<M> {
    /// A producer over `mem`, which it initialises (example on [`CqMemory`]).
    pub fn new(mem: M) -> Self {
        init(&mem);
        CqProducer { mem, tail: 0, backlog: VecDeque::new() }
    }

    /// Posts `e` after every entry still in the backlog; it waits in the backlog if the queue is full.
    /// Never blocks. Returns true when nothing is left in the backlog. Example on [`CqMemory`].
    pub fn put(&mut self, e: CqEntry) -> bool {
        self.backlog.push_back(e);
        self.flush()
    }

    /// Posts what the backlog holds, as far as the consumers left room. Returns true when it is empty (example
    /// on [`CqMemory`]).
    pub fn flush(&mut self) -> bool {
        if self.backlog.is_empty() {
            return true;
        }
        // Acquire: pairs with the consumers' Release of head — they are done with every slot before it, so
        // those slots may be overwritten.
        let head = self.mem.word(HEAD).load(Ordering::Acquire);
        let capacity = self.mem.capacity();
        let mut posted = false;
        while self.tail.wrapping_sub(head) < capacity {
            let Some(e) = self.backlog.pop_front() else { break };
            write_entry(&self.mem, self.tail, e);
            self.tail = self.tail.wrapping_add(1);
            posted = true;
        }
        if posted {
            // Release: the entries written above are visible to a consumer that acquires this tail.
            self.mem.word(TAIL).store(self.tail, Ordering::Release);
        }
        self.backlog.is_empty()
    }

    /// Entries waiting for room (example on [`CqMemory`]).
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// The memory (example on [`CqMemory`]).
    pub fn memory(&self) -> &M {
        &self.mem
    }
}

/// Takes the next entry, if any, as the runtime does (module doc, "Protocol"); example on [`CqMemory`].
pub fn consume<M: CqMemory>(m: &M) -> Option<CqEntry> {
    // Empty: no lock, and no system call for the owner id (a consumer polls an empty queue most of the time).
    // If head = tail at the tail's load, the queue was empty at that moment (`pending`).
    if pending(m) == 0 {
        return None;
    }
    let lock = m.word(LOCK);
    if lock_consumers(m) {
        recover_dead_holder(m);
    }
    // Acquire: pairs with the producer's Release of tail: the entries before it are written.
    let tail = m.word(TAIL).load(Ordering::Acquire);
    // Relaxed: only lock holders write head, and the lock orders them.
    let head = m.word(HEAD).load(Ordering::Relaxed);
    let taken = (head != tail).then(|| {
        let e = read_entry(m, head);
        clear_entry(m, head);
        // Release: the producer may reuse the slot once it sees this head; our reads and the clear come first.
        m.word(HEAD).store(head.wrapping_add(1), Ordering::Release);
        e
    });
    // Release: hands the head and the cleared entry to the next consumer.
    lock.store(0, Ordering::Release);
    taken
}

/// Takes the consumers' lock for [`CqMemory::owner`]; true when it was taken over from a holder that exited
/// ([`CqMemory::owner_gone`]).
fn lock_consumers<M: CqMemory>(m: &M) -> bool {
    let lock = m.word(LOCK);
    let me = m.owner();
    let mut spins = 0u32;
    loop {
        // Acquire: the previous holder's clear and head store (released by its unlock) are visible.
        let holder = match lock.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return false,
            Err(0) => continue, // a spurious failure
            Err(holder) => holder,
        };
        spins = spins.wrapping_add(1);
        if holder != me && spins % m.spins_per_owner_check().max(1) == 0 && m.owner_gone(holder) {
            // The holder exited without unlocking; nobody releases its stores, but `owner_gone` returned only
            // once they are visible. Of the consumers that saw it gone, the one whose CAS moves the word
            // from the dead id takes over; the others wait for it like any holder (as does this one after a
            // spurious failure, until its next check). Acquire: as above.
            if lock.compare_exchange_weak(holder, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return true;
            }
        }
        m.spin();
    }
}

/// Finishes what a consumer that died holding the lock may have left half done (module doc): if the entry
/// at the head is not empty-looking the dead holder never started clearing it; if its sequence number is 0 it
/// had read it and was clearing it, so the head moves past it (and the rest of the slot is cleared).
fn recover_dead_holder<M: CqMemory>(m: &M) {
    // Acquire: as in `consume`.
    let tail = m.word(TAIL).load(Ordering::Acquire);
    // Relaxed: the dead holder's stores are visible (`lock_consumers`).
    let head = m.word(HEAD).load(Ordering::Relaxed);
    // Relaxed: as above.
    if head != tail && m.entry_word(head, 0).load(Ordering::Relaxed) == 0 {
        clear_entry(m, head);
        // Release: as in `consume`.
        m.word(HEAD).store(head.wrapping_add(1), Ordering::Release);
        tracing::warn!(head, "completion queue: took over the lock of a consumer that exited while taking an entry");
    } else {
        tracing::warn!(head, "completion queue: took over the lock of a consumer that exited holding it");
    }
}

/// Completions posted and not yet taken, as a consumer sees them: a snapshot within `0..=capacity`. Head is
/// read first: a head store is ordered after the tail its consumer read (the `Acquire` here pairs with its
/// `Release`), so the tail read next is never behind it — tail first, consumers could take entries posted
/// after that read and the difference would wrap. The tail can meanwhile run a queue's worth past the head
/// read, hence the cap.
pub fn pending<M: CqMemory>(m: &M) -> u32 {
    let head = m.word(HEAD).load(Ordering::Acquire);
    let tail = m.word(TAIL).load(Ordering::Acquire);
    tail.wrapping_sub(head).min(m.capacity())
}

/// The first byte of the queue in `chunk`, which must be a completion queue's chunk (at least
/// [`NDMA_H2D_COMPL_QUEUE_SIZE`] bytes, the pool having checked its buffer is as long and 256-byte aligned).
fn queue_base(chunk: &MemChunk) -> Result<*mut u8> {
    if !chunk.is_completion_queue() {
        return Err(NdmaError::NotCompletionQueue);
    }
    chunk.check_range("completion queue", 0, NDMA_H2D_COMPL_QUEUE_SIZE as u64)?;
    let buf = chunk.buffer().ok_or(NdmaError::NotHostMemory { what: "completion queue" })?;
    buf.check(0, NDMA_H2D_COMPL_QUEUE_SIZE)?;
    Ok(buf.as_ptr())
}

/// The driver's side of a ring's queue: its memory (a host chunk user space can map) and the producer.
pub(crate) struct CompletionQueue {
    chunk: Arc<MemChunk>,
    producer: CqProducer<RawCq>,
}

impl CompletionQueue {
    /// `ndma_h2d_compl_queue_init`: the queue in `chunk` (a host chunk of at least
    /// [`NDMA_H2D_COMPL_QUEUE_SIZE`] bytes).
    pub(crate) fn new(chunk: Arc<MemChunk>) -> Result<CompletionQueue> {
        let base = queue_base(&chunk)?;
        let producer = CqProducer::new(RawCq { base, _owner: Some(Arc::clone(&chunk)) });
        Ok(CompletionQueue { chunk, producer })
    }

    pub(crate) fn chunk(&self) -> &Arc<MemChunk> {
        &self.chunk
    }

    /// Completions posted and not yet taken by a consumer ([`pending`]).
    pub(crate) fn posted(&self) -> u32 {
        pending(self.producer.memory())
    }

    pub(crate) fn put(&mut self, e: CqEntry) -> bool {
        self.producer.put(e)
    }

    pub(crate) fn flush(&mut self) -> bool {
        self.producer.flush()
    }

    pub(crate) fn backlog_len(&self) -> usize {
        self.producer.backlog_len()
    }
}

/// A consumer of a completion queue: user space's side (see the [module example](self)).
pub struct CqConsumer {
    mem: RawCq,
}

impl CqConsumer {
    /// A consumer of the queue in `chunk` (as [`crate::NeuronDevice::completion_queue`] returns it); see the
    /// [module example](self).
    ///
    /// # Errors
    ///
    /// [`NdmaError::NotCompletionQueue`] for any other chunk: a consumer takes the queue's lock word and
    /// clears entries, which would corrupt (or, on a lock word that is not 0, wait forever on) memory that
    /// is not a queue.
    pub fn new(chunk: &Arc<MemChunk>) -> Result<CqConsumer> {
        let base = queue_base(chunk)?;
        Ok(CqConsumer { mem: RawCq { base, _owner: Some(Arc::clone(chunk)) } })
    }

    /// A consumer of a queue mapped at `base` (e.g. by another process, from the memory's file descriptor).
    ///
    /// # Safety
    ///
    /// `base` must be 8-byte aligned, valid for reads and writes of [`NDMA_H2D_COMPL_QUEUE_SIZE`] bytes for the
    /// life of the consumer, and hold a completion queue whose every other user accesses it atomically.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device_of(udma::Arch::V3);
    /// use ndma::zerocopy::CqConsumer;
    ///
    /// let chunk = dev.completion_queue(0)?;
    /// let base = chunk.cpu_ptr().unwrap(); // another process would map the memory instead
    /// // SAFETY: `chunk` keeps the queue's memory mapped, 256-byte aligned, for as long as `cq` is used.
    /// let cq = unsafe { CqConsumer::from_raw(base) };
    /// assert_eq!(cq.header().capacity, 1024);
    /// dev.zerocopy_submit_completed(0, -1, 7, 0, 70)?;
    /// # let mut tries = 0u64;
    /// let entry = loop {
    ///     if let Some(e) = cq.pop() {
    ///         break e;
    ///     }
    /// #   tries += 1;
    /// #   assert!(tries < 50_000_000, "completion lost");
    ///     std::thread::yield_now();
    /// };
    /// assert_eq!((entry.sequence_num, entry.context), (7, 70));
    /// drop(cq);
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    pub unsafe fn from_raw(base: *mut u8) -> CqConsumer {
        CqConsumer { mem: RawCq { base, _owner: None } }
    }

    /// Takes the next completion, if one is posted (see the [module example](self)).
    pub fn pop(&self) -> Option<CqEntry> {
        consume(&self.mem)
    }

    /// Completions posted and not yet taken (a snapshot, never more than the capacity: [`pending`]).
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device_of(udma::Arch::V3);
    /// use ndma::zerocopy::CqConsumer;
    ///
    /// let cq = CqConsumer::new(&dev.completion_queue(1)?)?;
    /// dev.zerocopy_submit_completed(1, -1, 1, 0, 0)?;
    /// dev.zerocopy_submit_completed(1, -1, 2, -5, 0)?; // a request that failed with -EIO
    /// # let mut tries = 0u64;
    /// while cq.len() < 2 {
    /// #   tries += 1;
    /// #   assert!(tries < 50_000_000, "completion lost");
    ///     std::thread::yield_now(); // the completion thread posts them
    /// }
    /// let h = cq.header();
    /// assert_eq!((h.capacity, h.tail.wrapping_sub(h.head), h.consumer_lock), (1024, 2, 0));
    /// assert_eq!(cq.pop().map(|e| e.compl_ret), Some(0));
    /// assert_eq!(cq.pop().map(|e| e.compl_ret), Some(-5));
    /// assert!(cq.is_empty());
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    pub fn len(&self) -> u32 {
        pending(&self.mem)
    }

    /// True when nothing is posted (a snapshot; example on [`CqConsumer::len`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The header words now (a snapshot; example on [`CqConsumer::len`]).
    pub fn header(&self) -> CqHeader {
        let w = |off| self.mem.word(off).load(Ordering::Acquire);
        CqHeader { capacity: w(CAPACITY), head: w(HEAD), tail: w(TAIL), consumer_lock: w(LOCK) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain atomics standing in for the shared memory, and the process table as the consumers see it.
    struct Words {
        header: [AtomicU32; 4],
        entries: Vec<[AtomicU64; 3]>,
        /// The owner id of a consumer that exited (0: none did).
        dead: AtomicU32,
        /// `owner_gone` questions asked.
        checks: AtomicU32,
    }

    impl Words {
        fn new() -> Words {
            Words {
                header: Default::default(),
                entries: (0..NDMA_H2D_COMPL_QUEUE_CAPACITY).map(|_| Default::default()).collect(),
                dead: AtomicU32::new(0),
                checks: AtomicU32::new(0),
            }
        }
    }

    impl CqMemory for Words {
        type W32 = AtomicU32;
        type W64 = AtomicU64;

        fn word(&self, off: usize) -> &AtomicU32 {
            &self.header[off / 4]
        }
        fn entry_word(&self, slot: u32, field: usize) -> &AtomicU64 {
            &self.entries[(slot & (NDMA_H2D_COMPL_QUEUE_CAPACITY - 1)) as usize][field]
        }
        fn owner_gone(&self, owner: u32) -> bool {
            self.checks.fetch_add(1, Ordering::SeqCst);
            owner == self.dead.load(Ordering::SeqCst)
        }
        fn spins_per_owner_check(&self) -> u32 {
            4
        }
    }

    /// The queue as the consumer process `.1` sees it.
    struct As<'a>(&'a Words, u32);

    impl CqMemory for As<'_> {
        type W32 = AtomicU32;
        type W64 = AtomicU64;

        fn word(&self, off: usize) -> &AtomicU32 {
            self.0.word(off)
        }
        fn entry_word(&self, slot: u32, field: usize) -> &AtomicU64 {
            self.0.entry_word(slot, field)
        }
        fn owner(&self) -> u32 {
            self.1
        }
        fn owner_gone(&self, owner: u32) -> bool {
            self.0.owner_gone(owner)
        }
        fn spins_per_owner_check(&self) -> u32 {
            self.0.spins_per_owner_check()
        }
    }

    /// Completion `i`: every field non-zero and distinct.
    fn entry(i: u64) -> CqEntry {
        CqEntry { sequence_num: i, compl_ret: -(i as i64), context: 0x100 + i }
    }

    /// A queue holding completions 1 and 2, and a consumer (process 41) that took the lock and got `steps`
    /// of the way through taking completion 1 (1: cleared its sequence number, 2: the whole entry, 3: moved
    /// the head too) before it exited, lock held.
    fn died_holding_the_lock(steps: u32) -> CqProducer<Words> {
        let mut p = CqProducer::new(Words::new());
        p.put(entry(1));
        p.put(entry(2));
        let m = p.memory();
        m.word(LOCK).store(41, Ordering::SeqCst);
        if steps >= 1 {
            m.entry_word(0, 0).store(0, Ordering::SeqCst);
        }
        if steps >= 2 {
            clear_entry(m, 0);
        }
        if steps >= 3 {
            m.word(HEAD).store(1, Ordering::SeqCst);
        }
        m.dead.store(41, Ordering::SeqCst);
        p
    }

    /// A consumer whose holder died before it touched the head entry takes that entry itself: nothing lost.
    #[test]
    fn a_dead_holders_lock_is_taken_over_and_an_untouched_entry_is_still_delivered() {
        let p = died_holding_the_lock(0);
        let me = As(p.memory(), 7);
        assert_eq!(consume(&me), Some(entry(1)));
        assert!(p.memory().checks.load(Ordering::SeqCst) >= 1, "the holder's liveness was asked");
        assert_eq!(consume(&me), Some(entry(2)));
        assert_eq!(consume(&me), None);
        assert_eq!(p.memory().word(LOCK).load(Ordering::SeqCst), 0, "released after the take-over");
    }

    /// A holder that died while clearing (or after clearing, or after moving the head) had taken completion
    /// 1: the survivor gets completion 2 — never an empty, half-cleared or repeated entry — and the slot ends
    /// up fully cleared.
    #[test]
    fn a_dead_holders_half_taken_entry_is_skipped_whole() {
        for steps in 1..=3 {
            let p = died_holding_the_lock(steps);
            let me = As(p.memory(), 7);
            assert_eq!(consume(&me), Some(entry(2)), "died after step {steps}");
            assert_eq!(consume(&me), None, "died after step {steps}");
            assert_eq!(read_entry(p.memory(), 0), CqEntry::default(), "died after step {steps}");
            let h = |off| p.memory().word(off).load(Ordering::SeqCst);
            assert_eq!((h(HEAD), h(TAIL), h(LOCK)), (2, 2, 0), "died after step {steps}");
        }
    }

    /// A live holder is waited for, however long it holds the lock: the waiter asks after it and does not
    /// take over, and takes its entry only once the holder lets go.
    #[test]
    fn a_live_holder_is_waited_for_not_taken_over() {
        let mut p = CqProducer::new(Words::new());
        p.put(entry(1));
        let m = p.memory();
        m.word(LOCK).store(41, Ordering::SeqCst); // process 41 holds it, alive
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let e = consume(&As(m, 7));
                done.store(true, Ordering::SeqCst);
                e
            });
            let mut tries = 0u64;
            while m.checks.load(Ordering::SeqCst) < 3 {
                tries += 1;
                assert!(tries < 1_000_000_000, "the waiter never asked after the holder");
                std::hint::spin_loop();
            }
            assert!(!done.load(Ordering::SeqCst), "took the lock of a live holder");
            assert_eq!(m.word(LOCK).load(Ordering::SeqCst), 41);
            m.word(LOCK).store(0, Ordering::SeqCst); // the holder unlocks
            assert_eq!(waiter.join().unwrap(), Some(entry(1)));
        });
    }

    /// The owner id is this process's, and a forked child's is the child's own: the cache of the id must not
    /// let a child lock under its parent's id (a survivor could then take the lock from a live child once the
    /// parent exits).
    #[test]
    fn the_owner_id_is_the_process_id_in_a_forked_child_too() {
        assert_eq!(process_id(), std::process::id());
        // SAFETY: the child runs only async-signal-safe code (atomic loads and stores, getpid, _exit) before it
        // exits: `process_id`'s Once completed above, so it only reads the cache the fork handler cleared.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            // SAFETY: getpid and _exit are async-signal-safe.
            let ok = process_id() == unsafe { libc::getpid() } as u32;
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child this test forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child named its parent");
        assert_eq!(process_id(), std::process::id(), "the parent's cache is untouched");
    }

    /// An empty queue is answered without the lock (a held lock does not delay it, and no owner is asked
    /// after).
    #[test]
    fn an_empty_queue_is_answered_without_the_lock() {
        let w = Words::new();
        init(&w);
        w.word(LOCK).store(41, Ordering::SeqCst);
        assert_eq!(consume(&As(&w, 7)), None);
        assert_eq!(w.checks.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_full_queue_backs_up_in_order_and_never_loses_an_entry() {
        let mut p = CqProducer::new(Words::new());
        let e = |i: u64| CqEntry { sequence_num: i, compl_ret: -(i as i64 % 3), context: i * 10 };
        for i in 1..=1030 {
            p.put(e(i));
        }
        assert_eq!(p.backlog_len(), 6, "1024 posted, 6 waiting");
        assert_eq!(p.memory().word(TAIL).load(Ordering::Relaxed), 1024);
        for i in 1..=10 {
            assert_eq!(consume(p.memory()), Some(e(i)));
        }
        assert!(p.flush());
        for i in 11..=1030 {
            assert_eq!(consume(p.memory()), Some(e(i)), "entry {i}");
        }
        assert_eq!(consume(p.memory()), None);
        assert_eq!(read_entry(p.memory(), 5), CqEntry::default(), "consumed entries are cleared");
    }
}
