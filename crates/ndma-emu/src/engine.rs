//! One UDMA engine executing M2M queue pairs (DESIGN §3): queue q's M2S (TX) and S2M (RX) rings move in
//! lock-step, one descriptor pair at a time, in ring order.
//!
//! # Locks
//!
//! - `regs` (short): the register file and the cursors. Doorbells take only this lock.
//! - `exec` (held while a batch of descriptor pairs executes): the posted-write list and throttle state.
//!   `RST_Q` takes it first, so a reset waits for the in-flight batch and the engine never touches the old
//!   work again once the register write returns. Order: `exec` before `regs`.
//!
//! # Who executes
//!
//! Whoever holds `exec` runs the same code: the engine's worker thread (`ExecPolicy::Threaded`), the thread
//! that rang the doorbell (`ExecPolicy::Inline`), or a CPU thread waiting in the platform's delay
//! ([`Engine::assist`]) when nobody else is executing the work. Work is found only through the registers
//! (doorbells); a doorbell also marks the engine in the system's [`crate::activity::Activity`] so a waiting
//! thread finds it without scanning every engine, and every batch ends by waking sleeping waiters.
//!
//! # Doorbell ordering
//!
//! The HAL stores descriptors, issues a `Release` fence and writes `drtp_inc`. That write takes `regs`; the
//! engine takes `regs` again before fetching, so the mutex's release/acquire pair carries the descriptor
//! stores to the fetch.

use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use udma::regs::{QueueReg, QueueSwCtrl};
use udma::{regs, Desc, Direction, TxDesc};

use crate::bar0::{engine_state, EngineRegs};
use crate::bulk::{self, Fit};
use crate::copy::Copy;
use crate::device::DeviceCore;
use crate::faults::{
    CorruptField, CorruptOutcome, Corruption, CorruptionReport, DmaFault, FaultKind, HangCause, QueueStop, StopKind,
};
use crate::footprint::Footprint;
use crate::handoff::WorkerSignal;
use crate::lock::lock;
use crate::ordering::{OrderingMode, PostedWrites};
use crate::stats::{EngineCounters, EngineStats};
use crate::system::ExecPolicy;
use crate::trace::{EngineEvent, EngineEventKind};

/// Most descriptor pairs one batch fetches before releasing the exec lock. It bounds how long a reset waits
/// (at most 4096 × 64 KiB = 256 MiB of copying, tens of ms) and it is large enough that a whole op-layer
/// batch (≤ 2031 + 1 pairs) of contiguous descriptors merges into one memmove: above a few tens of MiB the
/// C library switches to non-temporal stores, which is what a single large `memcpy` gets too.
const MAX_BATCH: u32 = 4096;

/// A ring cursor as the engine walks it.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    base: u64,
    len: u32,
    head: u32,
    phase: u8,
    /// TX: a DMB pauses the queue (its rate-limit mask unmasks `INTERNAL_PAUSE_DMB`).
    dmb_pauses: bool,
}

impl Cursor {
    /// The engine's cursor of one ring: at its head.
    fn at_head(q: &crate::bar0::QueueRegs) -> Cursor {
        Cursor { base: q.ring_base(), len: q.ring_len(), head: q.head, phase: q.head_phase, dmb_pauses: q.dmb_pauses() }
    }

    fn slot_addr(&self) -> u64 {
        self.base.wrapping_add(u64::from(self.head) * core::mem::size_of::<Desc>() as u64)
    }

    /// Mirrors the HAL's `take_slot`: the phase advances mod 4 when the head wraps to slot 0.
    fn advance(&mut self) {
        // A compare, not `%`: a division per descriptor side was 8 % of a small batch's engine time.
        self.head += 1;
        if self.head >= self.len {
            self.head = 0;
            self.phase = (self.phase + 1) & udma::DMA_RING_ID_MASK;
        }
    }
}

/// One fetched, checked descriptor pair.
#[derive(Debug, Clone, Copy)]
struct Op {
    copy: Copy,
    descs: u64,
    /// TX DMB or RX SOW: posted writes drain before it.
    drain_before: bool,
    /// TX meta WRITE_BARRIER: posted writes (its own included) drain right after it.
    write_barrier: bool,
    /// The fault plan dropped this pair's write (`PlannedFault::DropFinalWrite`).
    dropped: bool,
}

/// State owned by whoever executes: guarded by the exec lock.
#[derive(Debug, Default)]
pub(crate) struct ExecState {
    pub(crate) posted: PostedWrites,
    /// A WRITE_BARRIER executed: the posted writes drain before the next descriptor does.
    barrier_pending: bool,
    /// What the engine's recent writes covered: decides whether page-sized copies stream.
    footprint: Footprint,
    /// When the bandwidth throttle lets the next copy finish.
    next_free: Option<Instant>,
    scratch: Vec<Op>,
}

/// One engine.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) id: u32,
    pub(crate) exec: Mutex<ExecState>,
    pub(crate) regs: Mutex<EngineRegs>,
    /// How doorbells reach the worker thread (`ExecPolicy::Threaded`).
    pub(crate) signal: WorkerSignal,
    /// Written by the worker (and the doorbell counter by the CPU side, on its own line inside).
    pub(crate) stats: CacheAligned<EngineCounters>,
    /// Per queue pair: the last time the engine stopped on it or lost one of its writes (a leaf lock).
    stops: Mutex<[Option<QueueStop>; udma::DMA_MAX_Q as usize]>,
    /// Batch sequence, written under `exec`: odd while a batch executes, even between batches (each batch adds
    /// 2). A reader that must see the whole of a batch whose writes it saw waits for the batch running when it
    /// looked to end — the number to change — not for the engine to be idle, which a worker running batch
    /// after batch may never be.
    batch: AtomicU64,
}

/// Keeps a value on cache lines of its own (two lines: adjacent-line prefetch pairs them), so writes from
/// one thread do not invalidate unrelated data another thread keeps reading.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CacheAligned<T>(pub(crate) T);

impl<T> std::ops::Deref for CacheAligned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// What the worker's turn ([`Engine::run_unless_busy`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkerRun {
    /// It executed at least one batch.
    pub ran: bool,
    /// It stopped because another thread held the exec lock: whatever it was rung for may still be pending.
    pub blocked: bool,
}

/// What a waiting CPU thread found when it offered to execute an engine's pending work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Assist {
    /// Nothing runnable.
    Idle,
    /// Someone else is executing a batch (the exec lock is held): it notifies waiters when the batch ends.
    Busy,
    /// Work is runnable and left to the engine's running worker.
    Pending,
    /// The waiter executed work.
    Ran,
}

/// The queue pair a batch executes, where its cursors stand and how many pairs it may take.
#[derive(Debug, Clone, Copy)]
struct Claim {
    qid: usize,
    tx: Cursor,
    rx: Cursor,
    budget: u32,
    /// The fault plan had entries when the pair was claimed: only then does the batch consult it per
    /// descriptor (an entry added later applies from the next batch, as one added after the doorbell may).
    plan_active: bool,
}

/// What one `step` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Nothing was runnable.
    Idle,
    /// Executed (or hung) a batch; `more`: a queue pair had runnable work left when it retired.
    Ran { more: bool },
}

/// What `claim` found.
enum Pick {
    /// Nothing runnable.
    Idle,
    /// The picked queue pair hung (a V2 reset window, or the fault plan).
    Hung,
    /// A batch to execute.
    Run(Claim),
}

/// The end of a batch: where the cursors stopped and what went wrong, reported once the exec lock is released.
#[derive(Debug)]
struct BatchEnd {
    qid: usize,
    tx: Cursor,
    rx: Cursor,
    done: u32,
    fault: Option<FaultKind>,
    corruption: Option<CorruptionReport>,
}

/// Longest single wait a fault-plan entry can impose (keeps `Instant` arithmetic from overflowing on absurd
/// plan values).
const MAX_INJECTED_WAIT: Duration = Duration::from_secs(3600);

/// `base + d`, saturating at `MAX_INJECTED_WAIT` past `base`.
fn later(base: Instant, d: Duration) -> Instant {
    base + d.min(MAX_INJECTED_WAIT)
}

fn wait_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        // Sleep through most of a long wait (leaving the core to others), yield through the tail.
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::thread::yield_now();
        }
    }
}

impl Engine {
    pub(crate) fn new(id: u32) -> Self {
        Engine {
            id,
            exec: Mutex::new(ExecState::default()),
            regs: Mutex::new(EngineRegs::default()),
            signal: WorkerSignal::new(),
            stats: CacheAligned(EngineCounters::default()),
            stops: Mutex::new([None; udma::DMA_MAX_Q as usize]),
            batch: AtomicU64::new(0),
        }
    }

    /// Records why the engine stopped on queue pair `qid` (or lost a write of it), with the descriptors at
    /// the cursors as the ring holds them now.
    fn record_stop(&self, dev: &DeviceCore, qid: usize, kind: StopKind, tx: &Cursor, rx: &Cursor) {
        let stop = QueueStop {
            engine: self.id,
            qid: qid as u32,
            kind,
            m2s_head: tx.head,
            s2m_head: rx.head,
            tx: Self::fetch_desc(dev, None, tx).ok(),
            rx: Self::fetch_desc(dev, None, rx).ok(),
        };
        if let Some(slot) = lock(&self.stops).get_mut(qid) {
            *slot = Some(stop);
        }
    }

    /// What [`Engine::record_stop`] last recorded for queue pair `qid` since its last `RST_Q`.
    pub(crate) fn queue_stop(&self, qid: usize) -> Option<QueueStop> {
        lock(&self.stops).get(qid).copied().flatten()
    }

    /// A doorbell: hand `count` more descriptors of ring `dir` of queue `qid` to the engine.
    pub(crate) fn doorbell(&self, dev: &Arc<DeviceCore>, dir: Direction, qid: usize, count: u32) {
        if dev.trace.enabled() {
            let now = Instant::now();
            let kind = EngineEventKind::Doorbell { dir, count };
            dev.trace.record(EngineEvent { engine: self.id, qid: qid as u32, kind, start: now, end: now });
        }
        let accepted = {
            let mut r = lock(&self.regs);
            // Under `regs`, which every doorbell of this engine takes.
            EngineCounters::bump(&self.stats.doorbells, 1);
            // Runnable already: whoever executes this pair keeps claiming until nothing is runnable (a waiter
            // that stops early hands the rest back to the worker), so more work needs no second wake.
            let was_runnable = r.runnable(qid);
            let q = &mut r.queues[qid][dir.index()];
            let ring_len = q.ring_len();
            // Slots of the batch in progress that it already fetched may be refilled (see `fetched`).
            let pending = q.pending - q.fetched;
            if count == 0 || count > ring_len || pending + count > ring_len {
                Err((FaultKind::BadDoorbell { dir, count, ring_len, pending }, r.heads(qid)))
            } else {
                // Compares, not `%`: two doorbells per copy, and a division costs as much as the rest.
                let end = q.tail + count;
                let wraps = end >= ring_len;
                q.tail = if wraps { end - ring_len } else { end };
                if wraps {
                    q.tail_phase = (q.tail_phase + 1) & udma::DMA_RING_ID_MASK;
                }
                q.pending += count;
                if dir == Direction::Rx {
                    // Under `regs`, before the engine can fetch this work: where the batch ends.
                    let last = if q.tail == 0 { ring_len - 1 } else { q.tail - 1 };
                    dev.plan.on_rx_doorbell(self.id, qid as u32, last);
                }
                r.note_pending(qid);
                // Work exists once both rings of the pair have some: the first of a copy's two doorbells
                // (RX, then TX) marks nothing and wakes nobody, and neither does one that adds to work already
                // runnable (marked when it became so, and unmarked only once nothing is).
                let became_runnable = !was_runnable && r.runnable(qid);
                if became_runnable {
                    dev.activity.mark(dev.index, self.id);
                }
                Ok(became_runnable)
            }
        };
        match accepted {
            Err((kind, (m2s_head, s2m_head))) => {
                tracing::warn!(engine = self.id, qid, ?kind, "doorbell ignored");
                self.record(dev, DmaFault { engine: self.id, qid: qid as u32, kind, m2s_head, s2m_head });
            }
            Ok(true) => self.wake(dev),
            Ok(false) => {}
        }
    }

    /// `q_sw_ctrl` write: `RST_Q` resets the queue synchronously (see the module doc). A pair stopped on a
    /// fault or a hang runs again only once both of its queues were reset ([`PairState::reset_queue`]).
    ///
    /// [`PairState::reset_queue`]: crate::bar0::PairState::reset_queue
    pub(crate) fn sw_ctrl(&self, dev: &DeviceCore, dir: Direction, qid: usize, value: u32) {
        let sw_ctrl = QueueSwCtrl::from_bits(value);
        if !sw_ctrl.rst_q() {
            lock(&self.regs).queues[qid][dir.index()].set(QueueReg::QSwCtrl, value);
            return;
        }
        let mut exec = lock(&self.exec);
        self.drain(dev, &mut exec);
        let mut r = lock(&self.regs);
        let d = dir.index();
        r.queues[qid][d].reset_pointers();
        r.note_pending(qid);
        r.queues[qid][d].set(QueueReg::QSwCtrl, sw_ctrl.with_rst_q(false).into_bits());
        if r.pairs[qid].reset_queue(d) {
            r.queues[qid][1 - d].status = 0;
            lock(&self.stops)[qid] = None;
        }
        dev.plan.on_queue_reset(self.id, qid as u32);
    }

    /// `change_state` write.
    pub(crate) fn change_state(&self, dev: &Arc<DeviceCore>, dir: Direction, value: u32) {
        {
            let mut r = lock(&self.regs);
            let s = &mut r.state[dir.index()];
            if value & regs::CHANGE_STATE_ABORT != 0 {
                *s = engine_state::ABORT;
            } else if value & regs::CHANGE_STATE_DIS != 0 {
                *s = engine_state::DISABLE;
            } else if value & regs::CHANGE_STATE_NORMAL != 0 {
                *s = engine_state::NORMAL;
            }
        }
        self.wake_if_runnable(dev);
    }

    /// After a write that may have made a queue runnable (enable, state change): start executing.
    pub(crate) fn wake_if_runnable(&self, dev: &Arc<DeviceCore>) {
        let any = {
            let r = lock(&self.regs);
            let any = r.any_runnable();
            if any {
                dev.activity.mark(dev.index, self.id);
            }
            any
        };
        if any {
            self.wake(dev);
        }
    }

    /// Gets marked work executed according to the device's policy.
    fn wake(&self, dev: &Arc<DeviceCore>) {
        match dev.exec {
            ExecPolicy::Inline => self.run_until_idle(dev),
            // Executed by the next CPU thread that waits in the platform's delay.
            ExecPolicy::Deferred => {}
            ExecPolicy::Threaded => {
                if crate::worker::ensure(dev, self.id) {
                    self.signal.ring();
                } else {
                    // No worker (shutting down, or the OS refused a thread): execute here rather than lose work.
                    self.run_until_idle(dev);
                }
            }
        }
    }

    /// Executes until nothing is runnable; in Relaxed mode, then lets posted writes land.
    pub(crate) fn run_until_idle(&self, dev: &DeviceCore) {
        self.run_until_idle_or_stopped(dev, &|| false);
    }

    /// As [`Engine::run_until_idle`], but gives up between batches once `stop()` says so (a worker whose
    /// device is shutting down must not first work through a backlog slowed down by the fault plan). Returns
    /// whether it executed anything.
    pub(crate) fn run_until_idle_or_stopped(&self, dev: &DeviceCore, stop: &dyn Fn() -> bool) -> bool {
        let mut ran = false;
        while !stop() && self.step(dev, lock(&self.exec)) != Step::Idle {
            ran = true;
        }
        self.settle(dev);
        ran
    }

    /// The worker's turn: executes until idle (or `stop()`), like [`Engine::run_until_idle_or_stopped`], but
    /// never sleeps on the exec lock. If another thread holds it — most often a waiter executing the work it
    /// waits for, which runs until idle — the worker leaves the work to it for now and says so
    /// ([`WorkerRun::blocked`]): the holder may also be one that executes nothing (a queue reset, a settle, a
    /// statistics read), so the worker must look again rather than sleep. A worker asleep on the lock would
    /// cost the holder a wake-up system call as it releases (on a small virtual machine an inter-processor
    /// interrupt: tens of µs, measured to halve the throughput of 1 MiB sync copies).
    pub(crate) fn run_unless_busy(&self, dev: &DeviceCore, stop: &dyn Fn() -> bool) -> WorkerRun {
        let mut ran = false;
        while !stop() {
            let exec = match self.exec.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                // Not necessarily an executor: a reset, a settle or a statistics read holds the lock too, and
                // lets go without running what we were rung for. The worker looks again (see `WorkerRun`).
                Err(TryLockError::WouldBlock) => return WorkerRun { ran, blocked: true },
            };
            if self.step(dev, exec) == Step::Idle {
                break;
            }
            ran = true;
        }
        if dev.ordering == OrderingMode::Relaxed {
            // As `settle`, unless someone took the lock meanwhile (then they settle).
            if let Ok(mut exec) = self.exec.try_lock() {
                self.drain(dev, &mut exec);
            }
        }
        WorkerRun { ran, blocked: false }
    }

    /// A CPU thread waiting in the platform's delay offers to execute this engine's work. If nobody is
    /// executing it, it runs the engine exactly as the worker would — until idle, or until `done()` says the
    /// waiter has what it waits for (the rest stays pending for the worker or the next waiter). It leaves the
    /// work alone while the engine's worker is running and `eager` is false (the waiter has not yet given the
    /// worker its chance to pick the work up).
    pub(crate) fn assist(&self, dev: &DeviceCore, eager: bool, done: &dyn Fn() -> bool) -> Assist {
        if !eager && self.signal.is_running() {
            // Still marked, or already claimed: `Pending` either way (the waiter keeps watching).
            return Assist::Pending;
        }
        let mut ran = false;
        loop {
            let exec = match self.exec.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                // Someone else took over: they run until idle and settle.
                Err(TryLockError::WouldBlock) => return if ran { Assist::Ran } else { Assist::Busy },
            };
            let Step::Ran { more } = self.step(dev, exec) else { break };
            ran = true;
            if done() {
                // Not idle: no settling; whoever runs the rest settles. A worker that found the lock held
                // left the rest to us: hand it back now rather than at its next look. (Work rung in after the
                // batch retired woke it itself; if it found the lock still held, it looks again after a nap.)
                if dev.exec == ExecPolicy::Threaded && more {
                    self.signal.ring();
                }
                return Assist::Ran;
            }
        }
        self.settle(dev);
        if ran {
            Assist::Ran
        } else {
            Assist::Idle
        }
    }

    /// The engine ran out of work: in Relaxed mode its posted writes land now.
    fn settle(&self, dev: &DeviceCore) {
        if dev.ordering == OrderingMode::Relaxed {
            let mut exec = lock(&self.exec);
            self.drain(dev, &mut exec);
        }
    }

    pub(crate) fn drain(&self, dev: &DeviceCore, exec: &mut ExecState) {
        if !exec.posted.is_empty() {
            EngineCounters::bump(&self.stats.drains, 1);
            // Clock reads only for a trace: a drain follows every write barrier, and two reads cost about as
            // much as a small copy's drain.
            let start = dev.trace.enabled().then(Instant::now);
            let grouped = exec.posted.drain(&dev.map, exec.footprint.class());
            EngineCounters::bump(&self.stats.grouped, grouped as u64);
            if let Some(start) = start {
                let kind = EngineEventKind::Drain;
                dev.trace.record(EngineEvent { engine: self.id, qid: u32::MAX, kind, start, end: Instant::now() });
            }
        }
    }

    fn record(&self, dev: &DeviceCore, f: DmaFault) {
        EngineCounters::add(&self.stats.faults, 1);
        let now = Instant::now();
        dev.trace.record(EngineEvent {
            engine: f.engine,
            qid: f.qid,
            kind: EngineEventKind::Fault(f.kind),
            start: now,
            end: now,
        });
        lock(&dev.faults).push(f);
    }

    /// Executes one batch of descriptor pairs of one runnable queue pair, holding `exec` (released before
    /// waiters are notified). Returns false when nothing is runnable.
    fn step(&self, dev: &DeviceCore, mut exec: MutexGuard<'_, ExecState>) -> Step {
        let claim = match self.claim(dev) {
            Pick::Idle => return Step::Idle,
            Pick::Hung => {
                drop(exec);
                dev.activity.waiters.notify();
                // Other pairs may have work: let the caller look.
                return Step::Ran { more: true };
            }
            Pick::Run(claim) => claim,
        };
        // Written only under `exec`, so a plain load and store. Relaxed: it comes before any write of the batch
        // in program order, so the Release store of the batch's marker publishes it to whoever sees the marker.
        let seq = self.batch.load(Ordering::Relaxed);
        self.batch.store(seq + 1, Ordering::Relaxed);
        let (end, more) = self.run_batch(dev, &mut exec, claim);
        if end.fault.is_some() || end.corruption.is_some() {
            self.report(dev, &end);
        }
        // Release: the batch's cursors, counters and records are final for a reader whose Acquire load sees
        // it over. Before the waiters are woken: a reader waiting for it is one of them.
        self.batch.store(seq + 2, Ordering::Release);
        drop(exec);
        dev.activity.waiters.notify();
        Step::Ran { more }
    }

    /// Picks the next runnable queue pair (round robin) and reads its cursors; hangs it instead when a V2
    /// reset window or the fault plan says so. Unmarks the engine when nothing is runnable.
    fn claim(&self, dev: &DeviceCore) -> Pick {
        let mut r = lock(&self.regs);
        let Some(qid) = r.pick() else {
            dev.activity.unmark(dev.index, self.id);
            return Pick::Idle;
        };
        // Read after taking `regs`: a plan entry added before the doorbell that handed us this work
        // happens-before this load (through the regs mutex), so it cannot be missed.
        let plan_active = dev.plan.is_active();
        let hang = if dev.resets.hangs(self.id, qid as u32) {
            tracing::debug!(engine = self.id, qid, "V2 queue hung: doorbell during a NeuronCore reset");
            EngineCounters::add(&self.stats.reset_hangs, 1);
            Some(HangCause::ResetWindow)
        } else if plan_active && dev.plan.take_hang(self.id, qid as u32) {
            tracing::debug!(engine = self.id, qid, "queue hung by the fault plan");
            Some(HangCause::FaultPlan)
        } else {
            None
        };
        let [t, x] = r.queues[qid];
        if let Some(cause) = hang {
            r.pairs[qid].hung = true;
            self.record_stop(dev, qid, StopKind::Hung(cause), &Cursor::at_head(&t), &Cursor::at_head(&x));
            return Pick::Hung;
        }
        // With a plan, one pair per batch: delays and corruption apply per descriptor.
        let budget = t.pending.min(x.pending).min(if plan_active { 1 } else { MAX_BATCH });
        Pick::Run(Claim { qid, tx: Cursor::at_head(&t), rx: Cursor::at_head(&x), budget, plan_active })
    }

    /// Fetches, executes and retires the pairs of `claim`; counts and traces the batch.
    /// Also returns whether a queue pair had runnable work left when the batch retired.
    fn run_batch(&self, dev: &DeviceCore, exec: &mut ExecState, claim: Claim) -> (BatchEnd, bool) {
        let start = dev.trace.enabled().then(Instant::now);
        let mut ops = std::mem::take(&mut exec.scratch);
        let end = self.fetch_batch(dev, &claim, &mut ops);
        {
            // Before any write of the batch (a marker among them) can let the driver reuse these slots.
            let mut r = lock(&self.regs);
            for q in &mut r.queues[claim.qid] {
                q.fetched = end.done;
            }
        }
        let bytes = self.execute(dev, exec, &ops, claim.plan_active);
        ops.clear();
        exec.scratch = ops;
        let more = self.retire(&end);
        if let Some(start) = start.filter(|_| end.done > 0) {
            let kind = EngineEventKind::Batch { descriptors: end.done, bytes };
            let e = EngineEvent { engine: self.id, qid: claim.qid as u32, kind, start, end: Instant::now() };
            dev.trace.record(e);
        }
        // Counted before the exec lock is released, so a reset (which takes it) sees final counters.
        EngineCounters::bump(&self.stats.descriptors, u64::from(end.done));
        EngineCounters::bump(&self.stats.bytes, bytes);
        (end, more)
    }

    /// Fetches up to `claim.budget` pairs into `ops`, stopping at the first that faults.
    fn fetch_batch(&self, dev: &DeviceCore, claim: &Claim, ops: &mut Vec<Op>) -> BatchEnd {
        ops.clear();
        let (mut tx, mut rx) = (claim.tx, claim.rx);
        let rings = (Self::ring_ptr(dev, &tx), Self::ring_ptr(dev, &rx));
        let mut corruption = None;
        let mut fault = None;
        for _ in 0..claim.budget {
            match self.fetch_pair(dev, claim, rings, &tx, &rx, &mut corruption) {
                Ok(op) => {
                    ops.push(op);
                    tx.advance();
                    rx.advance();
                }
                Err(kind) => {
                    fault = Some(kind);
                    break;
                }
            }
        }
        BatchEnd { qid: claim.qid, tx, rx, done: ops.len() as u32, fault, corruption }
    }

    /// Moves the queue pair's heads past the executed pairs; a fault halts the pair with its status code.
    /// Returns whether any queue pair has runnable work left (doorbells that came during the batch).
    fn retire(&self, end: &BatchEnd) -> bool {
        let mut r = lock(&self.regs);
        for (d, c) in [(0, end.tx), (1, end.rx)] {
            let q = &mut r.queues[end.qid][d];
            q.head = c.head;
            q.head_phase = c.phase;
            // Only doorbells ran concurrently (a reset needs the exec lock we hold): pending only grew.
            q.pending -= end.done;
            q.fetched = 0;
            if let Some(kind) = end.fault {
                q.status = kind.status_code();
            }
        }
        r.note_pending(end.qid);
        if end.fault.is_some() {
            r.pairs[end.qid].halted = true;
        }
        r.any_runnable()
    }

    /// Records the batch's fault and corruption (rare: the locks it takes are leaves, under `exec`). Out of
    /// line: building its arguments on every batch cost a small copy's engine a store-forwarding stall.
    #[cold]
    fn report(&self, dev: &DeviceCore, end: &BatchEnd) {
        let &BatchEnd { qid, tx, rx, fault, corruption, .. } = end;
        if let Some(kind) = fault {
            tracing::warn!(engine = self.id, qid, ?kind, m2s_head = tx.head, s2m_head = rx.head, "queue halted");
            self.record(dev, DmaFault { engine: self.id, qid: qid as u32, kind, m2s_head: tx.head, s2m_head: rx.head });
            self.record_stop(dev, qid, StopKind::Halted(kind), &tx, &rx);
        }
        if let Some(mut c) = corruption {
            c.outcome = fault.map_or(CorruptOutcome::Benign, CorruptOutcome::Fault);
            lock(&dev.corruptions).push(c);
        }
    }

    /// CPU pointer of a whole ring, when all of it decodes to memory (then a slot needs no decode of its own).
    fn ring_ptr(dev: &DeviceCore, c: &Cursor) -> Option<*const u8> {
        let bytes = u64::from(c.len) * size_of::<Desc>() as u64;
        dev.map.decode(c.base, bytes).map(|loc| dev.map.ptr(loc) as *const u8)
    }

    /// Reads the descriptor at the cursor, through `ring` (its ring's [`Engine::ring_ptr`]) when there is one.
    fn fetch_desc(dev: &DeviceCore, ring: Option<*const u8>, c: &Cursor) -> Result<Desc, FaultKind> {
        let slot = match ring {
            // The slot lies inside the ring `ring_ptr` decoded.
            Some(p) if c.head < c.len => p.wrapping_add(c.head as usize * size_of::<Desc>()),
            _ => {
                let addr = c.slot_addr();
                let loc = dev.map.decode(addr, 16).ok_or(FaultKind::BadAddress { addr, len: 16 })?;
                dev.map.ptr(loc) as *const u8
            }
        };
        // SAFETY: `slot` is 16 bytes inside a space (`decode` checked the ring or the slot); the read is
        // unaligned-safe. Racing CPU stores to a slot the engine owns would be a protocol bug, caught by the
        // phase check.
        let raw: [u8; 16] = unsafe { ptr::read_unaligned(slot as *const [u8; 16]) };
        let word = |i: usize| u32::from_le_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
        let buf = u64::from(word(8)) | (u64::from(word(12)) << 32);
        Ok(Desc::from_words(word(0), word(4), buf))
    }

    /// Fetches the pair at the cursors, lets the fault plan corrupt it, and checks it.
    fn fetch_pair(
        &self,
        dev: &DeviceCore,
        claim: &Claim,
        rings: (Option<*const u8>, Option<*const u8>),
        tx: &Cursor,
        rx: &Cursor,
        corruption: &mut Option<CorruptionReport>,
    ) -> Result<Op, FaultKind> {
        let qid = claim.qid;
        let mut td = Self::fetch_desc(dev, rings.0, tx)?;
        let mut rd = Self::fetch_desc(dev, rings.1, rx)?;
        if let Some(c) = claim.plan_active.then(|| dev.plan.on_fetch(self.id, qid as u32)).flatten() {
            *corruption = Some(self.corrupt(qid, c, (&mut td, tx), (&mut rd, rx)));
        }
        let (copy, t) = Self::check_pair(dev, &td, &rd, tx, rx)?;
        let dropped = claim.plan_active && dev.plan.take_dropped_write(self.id, qid as u32, rx.head);
        if dropped {
            self.record_stop(dev, qid, StopKind::DroppedWrite, tx, rx);
        }
        dev.escapes.check(self.id, qid, &copy);
        Ok(Op {
            copy,
            descs: 1,
            // SOW exists from V3 on (FACTS §1.2): a V2 engine has no strong-ordered write to honour.
            drain_before: (t.len_ctrl.dmb() && tx.dmb_pauses) || (rd.len_ctrl().sow() && dev.has_sow),
            write_barrier: t.meta_ctrl.write_barrier(),
            dropped,
        })
    }

    /// Flips the planned bit of one descriptor of the pair; the report's outcome is filled in later.
    fn corrupt(
        &self,
        qid: usize,
        c: Corruption,
        tx: (&mut Desc, &Cursor),
        rx: (&mut Desc, &Cursor),
    ) -> CorruptionReport {
        let (d, slot) = match c.dir {
            Direction::Tx => (tx.0, tx.1.head),
            Direction::Rx => (rx.0, rx.1.head),
        };
        *d = match c.field {
            CorruptField::RingId | CorruptField::Length => {
                Desc::from_words(d.len_ctrl().into_bits() ^ (1 << c.bit), d.word1(), d.buf_ptr())
            }
            CorruptField::Address => Desc::from_words(d.len_ctrl().into_bits(), d.word1(), d.buf_ptr() ^ (1 << c.bit)),
        };
        CorruptionReport {
            engine: self.id,
            qid: qid as u32,
            dir: c.dir,
            slot,
            field: c.field,
            bit: c.bit,
            outcome: CorruptOutcome::Benign,
        }
    }

    /// The checks an engine makes on a fetched pair: both phases match the cursors, both lengths agree, and
    /// both buffers decode to memory. Returns the copy and the TX view.
    fn check_pair(
        dev: &DeviceCore,
        td: &Desc,
        rd: &Desc,
        tx: &Cursor,
        rx: &Cursor,
    ) -> Result<(Copy, TxDesc), FaultKind> {
        let (t, r) = (td.tx(), rd.rx());
        for (dir, cur, found) in [(Direction::Tx, tx, t.len_ctrl.ring_id()), (Direction::Rx, rx, r.len_ctrl.ring_id())]
        {
            if found != cur.phase {
                return Err(FaultKind::PhaseMismatch { dir, expected: cur.phase, found });
            }
        }
        let (tl, rl) = (t.len_ctrl.len_bytes(), r.len_ctrl.len_bytes());
        if tl != rl {
            return Err(FaultKind::LengthMismatch { tx: tl, rx: rl });
        }
        let src = dev.map.decode(t.src, u64::from(tl)).ok_or(FaultKind::BadAddress { addr: t.src, len: tl })?;
        let dst = dev.map.decode(r.dst, u64::from(tl)).ok_or(FaultKind::BadAddress { addr: r.dst, len: tl })?;
        Ok((Copy { src, dst, len: tl as usize }, t))
    }

    /// Performs a batch under the ordering model; returns the bytes moved.
    fn execute(&self, dev: &DeviceCore, exec: &mut ExecState, ops: &[Op], plan_active: bool) -> u64 {
        let delay_us = if plan_active { dev.plan.delay_us(self.id) } else { 0 };
        let rate = if plan_active { dev.plan.bandwidth(self.id) } else { None };
        ops.iter().for_each(|o| exec.footprint.note(o.copy.dst, o.copy.len));
        let fit = exec.footprint.class();
        let mut bytes = 0;
        let mut i = 0;
        while i < ops.len() {
            if fit == Fit::BeyondCache && delay_us == 0 && rate.is_none() {
                let n = self.land_group(dev, exec, &ops[i..]);
                if n > 1 {
                    bytes += ops[i..i + n].iter().map(|o| o.copy.len as u64).sum::<u64>();
                    EngineCounters::bump(&self.stats.copies, n as u64);
                    EngineCounters::bump(&self.stats.grouped, n as u64);
                    i += n;
                    continue;
                }
            }
            // Most ops merge with nothing (a scattered page, a marker): use them in place, without a copy.
            let run;
            let op = if ops.get(i + 1).is_some_and(|next| Self::join(&ops[i], next).is_some()) {
                let (merged, next) = Self::merge_run(ops, i);
                run = merged;
                i = next;
                &run
            } else {
                i += 1;
                &ops[i - 1]
            };
            if op.drain_before || exec.barrier_pending {
                exec.barrier_pending = false;
                self.drain(dev, exec);
            }
            if delay_us > 0 {
                self.inject_delay(delay_us.saturating_mul(op.descs));
            }
            let start = rate.map(|_| Instant::now());
            self.land(dev, exec, op, fit);
            EngineCounters::bump(&self.stats.copies, 1);
            // It orders this write and the earlier ones before the later descriptors, not before this one's
            // own successor on the fabric: misplaced on the marker, it leaves the data behind the marker.
            exec.barrier_pending |= op.write_barrier;
            if let (Some(rate), Some(start)) = (rate, start) {
                self.throttle(exec, op.copy.len, rate, start);
            }
            bytes += op.copy.len as u64;
        }
        bytes
    }

    /// Lands the immediate writes at the start of `ops` together, up to [`bulk::LANES`] of them (see
    /// [`Copy::group`]): in a large stream, page copies the ordering model performs now (host destinations,
    /// and HBM ones in Strict mode) with no barrier, dropped write or merge among them and no posted write
    /// they could observe. A scattered d2h buffer is hundreds of such pages; copied one at a time, each
    /// waits on memory alone and fences its streaming stores on its own. Returns how many it landed (0 when
    /// fewer than two qualify: the caller lands the first on its own).
    fn land_group(&self, dev: &DeviceCore, exec: &mut ExecState, ops: &[Op]) -> usize {
        // What the op alone says, the merge test last: a posted write (every op of a host→HBM stream, asked
        // about on each) is refused without it. Whether it could observe a posted write is asked only once a
        // group is possible (the first op lands on its own otherwise, and `land` asks then).
        let may_join = |k: usize, op: &Op| {
            let alone = !op.dropped && !op.drain_before && !op.write_barrier;
            alone && !dev.ordering.posts(&op.copy) && ops.get(k + 1).is_none_or(|next| Self::join(op, next).is_none())
        };
        // Most calls end here: a posted write (a host→HBM stream), one that merges, or a marker followed by
        // posted writes.
        if exec.barrier_pending || ops.len() < 2 || !may_join(0, &ops[0]) || !may_join(1, &ops[1]) {
            return 0;
        }
        let mut copies = [ops[0].copy; bulk::LANES];
        let mut n = 0;
        while n < bulk::LANES && ops.get(n).is_some_and(|op| may_join(n, op) && !exec.posted.conflicts(&op.copy)) {
            copies[n] = ops[n].copy;
            n += 1;
        }
        if n < 2 {
            return 0;
        }
        let group = Copy::group(&dev.map, &copies[..n]);
        if group.len() < 2 {
            return 0;
        }
        group.perform();
        group.len()
    }

    /// The copy of `op` and `next` as one, when `next` merges into `op`: contiguous, and no barrier or
    /// dropped write between them.
    fn join(op: &Op, next: &Op) -> Option<Copy> {
        let separate = op.write_barrier || next.drain_before || op.dropped || next.dropped;
        if separate {
            None
        } else {
            op.copy.merged(&next.copy)
        }
    }

    /// The op at `ops[i]` merged with the contiguous ops after it (one memmove) up to a barrier or a dropped
    /// write; returns it and the index after the run.
    fn merge_run(ops: &[Op], mut i: usize) -> (Op, usize) {
        let mut op = ops[i];
        i += 1;
        while let Some(m) = ops.get(i).and_then(|next| Self::join(&op, next)) {
            op = Op {
                copy: m,
                descs: op.descs + 1,
                drain_before: op.drain_before,
                write_barrier: ops[i].write_barrier,
                dropped: false,
            };
            i += 1;
        }
        (op, i)
    }

    /// The fault plan's per-descriptor delay: counted, then waited out.
    fn inject_delay(&self, us: u64) {
        EngineCounters::bump(&self.stats.delayed_us, us);
        wait_until(later(Instant::now(), Duration::from_micros(us)));
    }

    /// Lands one (merged) copy: dropped by the plan, posted (an HBM destination in a posting mode), or
    /// performed now — after draining posted writes it would observe.
    fn land(&self, dev: &DeviceCore, exec: &mut ExecState, op: &Op, fit: Fit) {
        if op.dropped {
            tracing::debug!(engine = self.id, "final write of a batch dropped by the fault plan");
        } else if dev.ordering.posts(&op.copy) {
            exec.posted.post(op.copy);
        } else {
            if exec.posted.conflicts(&op.copy) {
                self.drain(dev, exec);
            }
            op.copy.perform(&dev.map, fit);
        }
    }

    /// The bandwidth limit, a token bucket of depth one copy: a copy of `len` bytes started at `start`
    /// "finishes" len/rate after the later of `start` and the previous copy's finish; the engine waits for it.
    fn throttle(&self, exec: &mut ExecState, len: usize, rate: u64, start: Instant) {
        let begin = exec.next_free.filter(|t| *t > start).unwrap_or(start);
        let cost_ns = (len as u128 * 1_000_000_000 / u128::from(rate.max(1))) as u64;
        EngineCounters::bump(&self.stats.throttled_ns, cost_ns);
        let finish = later(begin, Duration::from_nanos(cost_ns));
        exec.next_free = Some(finish);
        wait_until(finish);
    }

    /// Posted writes waiting on this engine.
    pub(crate) fn posted_len(&self) -> usize {
        lock(&self.exec).posted.len()
    }

    /// Waits until no batch is being executed. A batch's writes, its marker among them, land
    /// before it retires and counts its work: a caller that saw them and then reads the engine's state waits
    /// here to find the whole batch. It does not take the exec lock, which would make a worker that finds it
    /// held leave the work to the reader.
    fn wait_batches_over(&self, dev: &DeviceCore) {
        // Acquire: pairs with the Release store that ends a batch.
        let running = self.batch.load(Ordering::Acquire);
        if running % 2 == 0 {
            return;
        }
        // Until that batch is over (the next may already run: its writes are not ones the caller saw).
        while self.batch.load(Ordering::Acquire) == running {
            // Registered before the second look: the batch's end either shows in it or unparks us (`Waiters`).
            let _waiting = dev.activity.waiters.register();
            if self.batch.load(Ordering::Acquire) == running {
                crate::sync::park_timeout(Duration::from_millis(1));
            }
        }
    }

    /// The engine's counters, the work of every batch whose writes the caller saw included.
    pub(crate) fn stats_snapshot(&self, dev: &DeviceCore) -> EngineStats {
        self.wait_batches_over(dev);
        self.stats.snapshot()
    }

    /// Descriptors handed to ring `dir` of queue pair `qid` and not yet executed; a batch whose writes the
    /// caller saw counts as executed.
    pub(crate) fn pending(&self, dev: &DeviceCore, qid: usize, dir: Direction) -> u32 {
        self.wait_batches_over(dev);
        lock(&self.regs).queues.get(qid).map_or(0, |q| q[dir.index()].pending)
    }
}

impl EngineRegs {
    /// (M2S head, S2M head) of queue pair `qid`.
    pub(crate) fn heads(&self, qid: usize) -> (u32, u32) {
        (self.queues[qid][0].head, self.queues[qid][1].head)
    }
}
