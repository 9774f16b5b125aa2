//! What went wrong on an engine ([`DmaFault`]) and what the test wants to go wrong ([`FaultPlan`]), plus
//! what the test wants to go wrong when the driver pins user pages ([`PinFaultPlan`]).
//!
//! The plan is per device and deterministic: the only randomness (which bit a [`PlannedFault::Corrupt`]
//! flips) comes from a ChaCha stream seeded from the system seed and the device index. The pin plan is
//! per user address space (pins belong to a process, not a device) and has no randomness at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use udma::Direction;

use crate::lock::lock;

/// Why an engine refused a descriptor or a doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// A descriptor's ring id did not match the ring's expected phase (stale or corrupt slot).
    PhaseMismatch {
        /// The ring that carried it.
        dir: Direction,
        /// The phase the engine expected.
        expected: u8,
        /// The ring id in the descriptor.
        found: u8,
    },
    /// The TX and RX descriptors of a pair disagree on the length.
    LengthMismatch {
        /// TX length in bytes.
        tx: u32,
        /// RX length in bytes.
        rx: u32,
    },
    /// A source, destination or ring slot outside memory.
    BadAddress {
        /// The device address as the engine saw it.
        addr: u64,
        /// Bytes the access needed.
        len: u32,
    },
    /// A doorbell of 0, of more than the ring length, or overflowing the descriptors already pending.
    /// The doorbell is ignored; the queue does not halt.
    BadDoorbell {
        /// Which ring's doorbell.
        dir: Direction,
        /// The count written.
        count: u32,
        /// The ring length (`drl`).
        ring_len: u32,
        /// Descriptors already pending on that ring.
        pending: u32,
    },
}

impl FaultKind {
    /// The value the queue's `status` register shows while halted by this fault.
    pub fn status_code(&self) -> u32 {
        QUEUE_STATUS_HALTED
            | match self {
                FaultKind::PhaseMismatch { .. } => 1,
                FaultKind::LengthMismatch { .. } => 2,
                FaultKind::BadAddress { .. } => 3,
                FaultKind::BadDoorbell { .. } => 4,
            }
    }
}

impl core::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            FaultKind::PhaseMismatch { dir, expected, found } => {
                write!(f, "{dir} descriptor carries ring id {found}, expected {expected}")
            }
            FaultKind::LengthMismatch { tx, rx } => write!(f, "TX length {tx} differs from RX length {rx}"),
            FaultKind::BadAddress { addr, len } => write!(f, "address {addr:#x} (+{len:#x}) is outside memory"),
            FaultKind::BadDoorbell { dir, count, ring_len, pending } => {
                write!(f, "{dir} doorbell of {count} ignored (ring of {ring_len} descriptors, {pending} pending)")
            }
        }
    }
}

impl core::fmt::Display for DmaFault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "engine {} queue {}: {} (M2S head {}, S2M head {})",
            self.engine, self.qid, self.kind, self.m2s_head, self.s2m_head
        )
    }
}

/// `status` register bit set while a queue pair is halted by a fault; the low bits say which kind.
pub const QUEUE_STATUS_HALTED: u32 = 1 << 31;

/// One recorded fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaFault {
    /// Engine id.
    pub engine: u32,
    /// Queue id.
    pub qid: u32,
    /// What happened.
    pub kind: FaultKind,
    /// M2S (TX) head slot at the fault.
    pub m2s_head: u32,
    /// S2M (RX) head slot at the fault.
    pub s2m_head: u32,
}

/// Why the engine stopped making progress on a queue pair, as only the engine knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// The pair halted on a fault (also in the device's fault log); `status` shows its code.
    Halted(FaultKind),
    /// The pair hung: descriptors stay pending and nothing lands until `RST_Q`.
    Hung(HangCause),
    /// The write of the pair at the RX head was dropped (a lost posted write): the pair was consumed, the
    /// queue did not halt.
    DroppedWrite,
}

/// What hung a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HangCause {
    /// A V2 doorbell rang while the queue's NeuronCore was being reset.
    ResetWindow,
    /// The fault plan ([`PlannedFault::Hang`]).
    FaultPlan,
}

/// The last time an engine stopped on (or lost a write of) a queue pair: the kind, the cursors and the
/// descriptors at them, read from the ring as the engine saw it. Cleared by `RST_Q` of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStop {
    /// Engine id.
    pub engine: u32,
    /// Queue id.
    pub qid: u32,
    /// What happened.
    pub kind: StopKind,
    /// M2S (TX) slot the engine stopped on.
    pub m2s_head: u32,
    /// S2M (RX) slot the engine stopped on.
    pub s2m_head: u32,
    /// The TX descriptor in that slot, if the slot's address decoded to memory.
    pub tx: Option<udma::Desc>,
    /// The RX descriptor in that slot, if the slot's address decoded to memory.
    pub rx: Option<udma::Desc>,
}

impl core::fmt::Display for StopKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StopKind::Halted(kind) => write!(f, "halted: {kind}"),
            StopKind::Hung(HangCause::ResetWindow) => f.write_str("hung: doorbell during a NeuronCore reset (V2)"),
            StopKind::Hung(HangCause::FaultPlan) => f.write_str("hung by the fault plan"),
            StopKind::DroppedWrite => f.write_str("dropped the write of a pair (lost posted write)"),
        }
    }
}

/// `engine E queue Q: <kind>; stopped at M2S slot m, S2M slot s` and one line per descriptor there.
impl core::fmt::Display for QueueStop {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "engine {} queue {}: {}; at M2S slot {}, S2M slot {}",
            self.engine, self.qid, self.kind, self.m2s_head, self.s2m_head
        )?;
        match self.tx {
            Some(d) => write!(f, "\n  TX[{}] {}", self.m2s_head, d.tx())?,
            None => write!(f, "\n  TX[{}] unreadable", self.m2s_head)?,
        }
        match self.rx {
            Some(d) => write!(f, "\n  RX[{}] {}", self.s2m_head, d.rx()),
            None => write!(f, "\n  RX[{}] unreadable", self.s2m_head),
        }
    }
}

/// A fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlannedFault {
    /// Queue pair `qid` of `engine` stops making progress the next time it has work: descriptors stay
    /// pending, no write lands, until `RST_Q` resets the queue. One-shot unless `persistent`.
    Hang {
        /// Engine id.
        engine: u32,
        /// Queue id.
        qid: u32,
        /// Hang again after every reset.
        persistent: bool,
    },
    /// Wait `per_desc_us` µs before each descriptor (on one engine, or all).
    Delay {
        /// Engine id, or every engine.
        engine: Option<u32>,
        /// Microseconds per descriptor.
        per_desc_us: u64,
    },
    /// Throttle copies to `bytes_per_sec` (on one engine, or each engine separately).
    Bandwidth {
        /// Engine id, or every engine.
        engine: Option<u32>,
        /// Sustained rate.
        bytes_per_sec: u64,
    },
    /// The final write of the next batch doorbelled on queue `qid` of `engine` is lost. The entry is armed by
    /// the next RX doorbell the queue accepts: the engine records the last slot that doorbell hands over, and
    /// when it executes the pair at that slot it consumes both descriptors but the write never lands — what
    /// a lost posted write looks like. Everything before it lands; the queue is not halted and later
    /// batches complete normally. An op layer puts its completion marker last in every batch, so this is
    /// how a lost marker is injected, without the engine knowing what a marker looks like.
    ///
    /// One-shot: the entry stays in [`FaultPlan::entries`] until the write is dropped. A queue reset
    /// (`RST_Q`) before that disarms it, and it waits for the next doorbell again.
    DropFinalWrite {
        /// Engine id.
        engine: u32,
        /// Queue id.
        qid: u32,
    },
    /// The `nth` descriptor pair (0-based, counted from when the entry is added) fetched on queue `qid` of
    /// `engine` has one seeded-random bit flipped in a ring id, a length or an address, in the engine's
    /// fetched copy (ring memory is untouched). One-shot; see [`EmuDevice::corruptions`](crate::EmuDevice).
    Corrupt {
        /// Engine id.
        engine: u32,
        /// Queue id.
        qid: u32,
        /// Which fetch.
        nth: u64,
    },
}

/// Which field a corruption flipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorruptField {
    /// A ring id bit (`len_ctrl` 25:24).
    RingId,
    /// A length bit (`len_ctrl` 15:0).
    Length,
    /// An address bit (40..=43: far outside any modelled memory).
    Address,
}

/// What became of a corrupted descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorruptOutcome {
    /// The engine caught it and halted the queue.
    Fault(FaultKind),
    /// The flipped descriptor passed every check and executed (e.g. an address flip that stayed in memory).
    Benign,
}

/// One injected corruption and its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorruptionReport {
    /// Engine id.
    pub engine: u32,
    /// Queue id.
    pub qid: u32,
    /// Which descriptor of the pair.
    pub dir: Direction,
    /// Ring slot of the corrupted descriptor.
    pub slot: u32,
    /// Which field.
    pub field: CorruptField,
    /// Bit index in the raw descriptor word (`len_ctrl` for ring id and length, the 64-bit address otherwise).
    pub bit: u32,
    /// What happened.
    pub outcome: CorruptOutcome,
}

/// A per-device fault plan. Cheap to consult when empty (one relaxed atomic load per descriptor batch).
#[derive(Debug)]
pub struct FaultPlan {
    active: AtomicBool,
    inner: Mutex<PlanInner>,
}

#[derive(Debug)]
struct PlanInner {
    entries: Vec<Entry>,
    rng: ChaCha8Rng,
}

#[derive(Debug)]
struct Entry {
    fault: PlannedFault,
    seen: u64,
    /// `DropFinalWrite` only: the RX slot whose pair's write is dropped, once a doorbell armed the entry.
    armed_at: Option<u32>,
}

/// A corruption chosen for one fetched descriptor pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corruption {
    pub(crate) dir: Direction,
    pub(crate) field: CorruptField,
    pub(crate) bit: u32,
}

impl FaultPlan {
    pub(crate) fn new(seed: u64) -> Self {
        FaultPlan {
            active: AtomicBool::new(false),
            inner: Mutex::new(PlanInner { entries: Vec::new(), rng: ChaCha8Rng::seed_from_u64(seed) }),
        }
    }

    /// Adds `fault` to the plan.
    pub fn add(&self, fault: PlannedFault) {
        let mut p = lock(&self.inner);
        p.entries.push(Entry { fault, seen: 0, armed_at: None });
        // Relaxed is enough: the flag only lets the engine skip the lock; the entries themselves are read
        // under the mutex, which orders them.
        self.active.store(true, Ordering::Relaxed);
    }

    /// Restarts the seeded stream [`PlannedFault::Corrupt`] draws its field and bit from: a harness that
    /// reseeds per operation can replay one operation alone and get the corruption it got inside a long run.
    pub fn reseed(&self, seed: u64) {
        lock(&self.inner).rng = ChaCha8Rng::seed_from_u64(seed);
    }

    /// Removes every entry.
    pub fn clear(&self) {
        let mut p = lock(&self.inner);
        p.entries.clear();
        // Relaxed: see `add`.
        self.active.store(false, Ordering::Relaxed);
    }

    /// The entries still planned.
    pub fn entries(&self) -> Vec<PlannedFault> {
        lock(&self.inner).entries.iter().map(|e| e.fault).collect()
    }

    /// True when the plan may have something for the engines (a hint, see `add`).
    pub(crate) fn is_active(&self) -> bool {
        // Relaxed: a hint; the decision is re-made under the lock.
        self.active.load(Ordering::Relaxed)
    }

    fn update_active(&self, p: &PlanInner) {
        // Relaxed: see `add`.
        self.active.store(!p.entries.is_empty(), Ordering::Relaxed);
    }

    /// Whether queue pair (`engine`, `qid`) hangs now; consumes a one-shot entry.
    pub(crate) fn take_hang(&self, engine: u32, qid: u32) -> bool {
        if !self.is_active() {
            return false;
        }
        let mut p = lock(&self.inner);
        let hit = p
            .entries
            .iter()
            .position(|e| matches!(e.fault, PlannedFault::Hang { engine: en, qid: q, .. } if en == engine && q == qid));
        match hit {
            Some(i) => {
                if matches!(p.entries[i].fault, PlannedFault::Hang { persistent: false, .. }) {
                    p.entries.remove(i);
                    self.update_active(&p);
                }
                true
            }
            None => false,
        }
    }

    fn is_drop_final_write(e: &Entry, engine: u32, qid: u32) -> bool {
        matches!(e.fault, PlannedFault::DropFinalWrite { engine: en, qid: q } if en == engine && q == qid)
    }

    /// An RX doorbell on (`engine`, `qid`) was accepted and its last descriptor sits in RX slot `last_slot`:
    /// arms the first `DropFinalWrite` entry of that queue not armed yet, if any.
    pub(crate) fn on_rx_doorbell(&self, engine: u32, qid: u32, last_slot: u32) {
        if !self.is_active() {
            return;
        }
        let mut p = lock(&self.inner);
        if let Some(e) =
            p.entries.iter_mut().find(|e| Self::is_drop_final_write(e, engine, qid) && e.armed_at.is_none())
        {
            e.armed_at = Some(last_slot);
        }
    }

    /// Queue `qid` of `engine` was reset (`RST_Q`): its slots start over, so an armed `DropFinalWrite` waits
    /// for the next doorbell again.
    pub(crate) fn on_queue_reset(&self, engine: u32, qid: u32) {
        if !self.is_active() {
            return;
        }
        for e in lock(&self.inner).entries.iter_mut().filter(|e| Self::is_drop_final_write(e, engine, qid)) {
            e.armed_at = None;
        }
    }

    /// Whether the write of the pair about to execute on (`engine`, `qid`), whose RX descriptor sits in
    /// `rx_slot`, is dropped; consumes the entry that armed itself on that slot.
    pub(crate) fn take_dropped_write(&self, engine: u32, qid: u32, rx_slot: u32) -> bool {
        if !self.is_active() {
            return false;
        }
        let mut p = lock(&self.inner);
        let hit =
            p.entries.iter().position(|e| Self::is_drop_final_write(e, engine, qid) && e.armed_at == Some(rx_slot));
        match hit {
            Some(i) => {
                p.entries.remove(i);
                self.update_active(&p);
                true
            }
            None => false,
        }
    }

    /// Total per-descriptor delay for `engine`, in µs.
    pub(crate) fn delay_us(&self, engine: u32) -> u64 {
        if !self.is_active() {
            return 0;
        }
        lock(&self.inner)
            .entries
            .iter()
            .filter_map(|e| match e.fault {
                PlannedFault::Delay { engine: en, per_desc_us } if en.is_none_or(|x| x == engine) => Some(per_desc_us),
                _ => None,
            })
            .sum()
    }

    /// The tightest bandwidth limit on `engine`.
    pub(crate) fn bandwidth(&self, engine: u32) -> Option<u64> {
        if !self.is_active() {
            return None;
        }
        lock(&self.inner)
            .entries
            .iter()
            .filter_map(|e| match e.fault {
                PlannedFault::Bandwidth { engine: en, bytes_per_sec } if en.is_none_or(|x| x == engine) => {
                    Some(bytes_per_sec.max(1))
                }
                _ => None,
            })
            .min()
    }

    /// Counts one fetched descriptor pair on (`engine`, `qid`) and returns the corruption to apply to it, if
    /// a `Corrupt` entry fires. The choice of field and bit is drawn from the seeded stream.
    pub(crate) fn on_fetch(&self, engine: u32, qid: u32) -> Option<Corruption> {
        if !self.is_active() {
            return None;
        }
        let mut p = lock(&self.inner);
        let mut fire = None;
        for (i, e) in p.entries.iter_mut().enumerate() {
            if let PlannedFault::Corrupt { engine: en, qid: q, nth } = e.fault {
                if en == engine && q == qid {
                    if e.seen == nth && fire.is_none() {
                        fire = Some(i);
                    }
                    e.seen += 1;
                }
            }
        }
        let i = fire?;
        p.entries.remove(i);
        self.update_active(&p);
        let r = p.rng.next_u64();
        let dir = if r & 1 == 0 { Direction::Tx } else { Direction::Rx };
        let (field, bit) = match (r >> 1) % 3 {
            0 => (CorruptField::RingId, 24 + ((r >> 8) & 1) as u32),
            1 => (CorruptField::Length, ((r >> 8) % 16) as u32),
            _ => (CorruptField::Address, 40 + ((r >> 8) % 4) as u32),
        };
        Some(Corruption { dir, field, bit })
    }
}

/// The two ways the kernel pins user pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinPath {
    /// `pin_user_pages_fast`: lockless, may come back short.
    Fast,
    /// `pin_user_pages` / `pin_user_pages_remote`: under the mmap lock, local or through a captured mm.
    Slow,
}

/// A pin failure to inject into a user address space (`AddressSpace::pin_faults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinFault {
    /// The `nth` pin call (0-based, counted from when the entry is added, over the calls on `path`, or over
    /// all calls when `None`) fails with `errno` before pinning anything. One-shot.
    Fail {
        /// The path whose calls count, or every call.
        path: Option<PinPath>,
        /// Which call.
        nth: u64,
        /// The negative errno to fail with (a positive value is negated).
        errno: i32,
    },
    /// The `nth` fast pin (0-based, counted from when the entry is added) stops after `pages` pages (at
    /// least 1: the kernel never returns 0 for a non-empty request) although every page could be pinned: a
    /// short pin, which the caller undoes and retries on the slow path. One-shot.
    Short {
        /// Which fast call.
        nth: u64,
        /// Pages it pins at most.
        pages: usize,
    },
}

impl PinFault {
    fn counts(&self, path: PinPath) -> bool {
        match *self {
            PinFault::Fail { path: p, .. } => p.is_none_or(|p| p == path),
            PinFault::Short { .. } => path == PinPath::Fast,
        }
    }
}

/// What a pin call must do because of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PinFaultAction {
    /// Fail with this (negative) errno, pinning nothing.
    Fail(i32),
    /// Pin at most this many pages (≥ 1).
    Short(usize),
}

/// A per-address-space plan of pin faults. Cheap to consult when empty (one relaxed atomic load per call).
#[derive(Debug, Default)]
pub struct PinFaultPlan {
    active: AtomicBool,
    entries: Mutex<Vec<PinEntry>>,
}

impl PinFaultPlan {
    /// Adds `fault` to the plan; its call count starts now.
    pub fn add(&self, fault: PinFault) {
        let mut e = lock(&self.entries);
        e.push(PinEntry { fault, seen: 0 });
        // Relaxed: the flag only lets a pin skip the lock; the entries are read under the mutex.
        self.active.store(true, Ordering::Relaxed);
    }

    /// Removes every entry.
    pub fn clear(&self) {
        let mut e = lock(&self.entries);
        e.clear();
        // Relaxed: see `add`.
        self.active.store(false, Ordering::Relaxed);
    }

    /// The entries that have not fired yet.
    pub fn entries(&self) -> Vec<PinFault> {
        lock(&self.entries).iter().map(|e| e.fault).collect()
    }

    /// Counts one pin call on `path` and returns what the plan makes of it. Every entry the call fires is
    /// consumed; a failure wins over a short pin.
    pub(crate) fn on_pin(&self, path: PinPath) -> Option<PinFaultAction> {
        // Relaxed: a hint; the decision is made under the lock.
        if !self.active.load(Ordering::Relaxed) {
            return None;
        }
        let mut entries = lock(&self.entries);
        let mut action = None;
        entries.retain_mut(|e| {
            if !e.fault.counts(path) {
                return true;
            }
            let fires = e.seen == e.fault_nth();
            e.seen += 1;
            if fires {
                action = match (action, e.fault) {
                    (Some(PinFaultAction::Fail(errno)), _) => Some(PinFaultAction::Fail(errno)),
                    (_, PinFault::Fail { errno, .. }) => Some(PinFaultAction::Fail(-errno.abs())),
                    (_, PinFault::Short { pages, .. }) => Some(PinFaultAction::Short(pages.max(1))),
                };
            }
            !fires
        });
        // Relaxed: see `add`.
        self.active.store(!entries.is_empty(), Ordering::Relaxed);
        action
    }
}

/// A pin fault and how many of the calls it counts it has seen.
#[derive(Debug)]
struct PinEntry {
    fault: PinFault,
    seen: u64,
}

impl PinEntry {
    fn fault_nth(&self) -> u64 {
        match self.fault {
            PinFault::Fail { nth, .. } | PinFault::Short { nth, .. } => nth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_faults_count_their_own_calls_and_fire_once() {
        let p = PinFaultPlan::default();
        assert_eq!(p.on_pin(PinPath::Fast), None);
        p.add(PinFault::Fail { path: Some(PinPath::Slow), nth: 1, errno: 12 });
        p.add(PinFault::Short { nth: 2, pages: 0 });
        p.add(PinFault::Fail { path: None, nth: 3, errno: -5 });
        assert_eq!(p.on_pin(PinPath::Slow), None, "slow #0, any #0");
        assert_eq!(p.on_pin(PinPath::Fast), None, "fast #0, any #1");
        assert_eq!(p.on_pin(PinPath::Fast), None, "fast #1, any #2");
        // slow #1 fires the first entry and is any #3, which fires the third: one failure wins.
        assert_eq!(p.on_pin(PinPath::Slow), Some(PinFaultAction::Fail(-12)));
        assert_eq!(p.entries(), vec![PinFault::Short { nth: 2, pages: 0 }]);
        assert_eq!(p.on_pin(PinPath::Fast), Some(PinFaultAction::Short(1)), "fast #2; 0 pages means 1");
        assert_eq!(p.entries(), vec![]);
        assert_eq!(p.on_pin(PinPath::Fast), None);
    }

    #[test]
    fn faults_read_well() {
        let f = DmaFault {
            engine: 33,
            qid: 0,
            kind: FaultKind::PhaseMismatch { dir: Direction::Tx, expected: 1, found: 2 },
            m2s_head: 5,
            s2m_head: 5,
        };
        assert_eq!(
            f.to_string(),
            "engine 33 queue 0: TX (M2S) descriptor carries ring id 2, expected 1 (M2S head 5, S2M head 5)"
        );
        assert_ne!(f.kind.status_code() & QUEUE_STATUS_HALTED, 0);
    }

    #[test]
    fn corruption_choice_is_a_function_of_the_seed() {
        let pick = |seed| {
            let p = FaultPlan::new(seed);
            p.add(PlannedFault::Corrupt { engine: 1, qid: 2, nth: 1 });
            assert_eq!(p.on_fetch(1, 2), None);
            assert_eq!(p.on_fetch(1, 3), None, "another queue does not count");
            let c = p.on_fetch(1, 2);
            assert!(c.is_some());
            assert!(!p.is_active(), "one-shot");
            c
        };
        for seed in 0..20 {
            assert_eq!(pick(seed), pick(seed));
        }
    }

    #[test]
    fn reseeding_restarts_the_corruption_stream() {
        let p = FaultPlan::new(1);
        let next = |p: &FaultPlan| {
            p.add(PlannedFault::Corrupt { engine: 0, qid: 0, nth: 0 });
            p.on_fetch(0, 0)
        };
        let first: Vec<_> = (0..8).map(|_| next(&p)).collect();
        p.reseed(1);
        let again: Vec<_> = (0..8).map(|_| next(&p)).collect();
        assert_eq!(first, again);
        assert!(first.iter().all(Option::is_some));
    }
}
