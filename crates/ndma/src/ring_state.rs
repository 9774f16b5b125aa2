//! [`RingState`]: a snapshot of one H2T ring — what a DMA engineer asks for first when a transfer hangs. The
//! software cursors of both queues, the engine's view read back through BAR0, the classic contexts and the
//! zero-copy queue, the counters, the descriptor pairs around the cursors (decoded), and whatever the back
//! end recorded that the registers do not show ([`crate::Platform::device_diagnostics`]).
//!
//! A timeout carries one ([`NdmaError::ring_state`]), taken before recovery re-initialises the ring; the
//! device keeps the last one ([`NeuronDevice::last_failure_state`]) for failures whose report is only an
//! errno (an async zero-copy completion); [`NeuronDevice::ring_state`] takes one on demand.

use std::fmt;

use udma::{Desc, Direction, QueueRegsView, QueueStatus};

use crate::classic::wait::marker_visible;
use crate::context::CtxHandle;
use crate::device::NeuronDevice;
use crate::ring::{H2tRing, HostRing, RingInner};
use crate::stats::StatsSnapshot;
use crate::zerocopy::ZcState;
use crate::{NdmaError, Result};

/// Descriptor pairs a [`RingState`] shows around the cursors.
pub const RING_STATE_WINDOW: u32 = 8;

/// One queue of the pair: the software cursors (`struct udma_q`) and the registers read back through BAR0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueState {
    /// TX (M2S) or RX (S2M).
    pub dir: Direction,
    /// Ring size in descriptors.
    pub size: u32,
    /// Producer cursor: the next slot the op layer fills.
    pub next_desc_idx: u32,
    /// Consumer cursor: the oldest slot not acked yet.
    pub next_cdesc_idx: u32,
    /// Phase (ring id) the next descriptor will carry.
    pub ring_id: u8,
    /// Free slots (`udma_available_get`).
    pub available: u32,
    /// Status as the HAL last programmed it.
    pub sw_status: QueueStatus,
    /// The engine's view: head, tail, status, enable, engine state.
    pub regs: QueueRegsView,
}

/// One classic context (`struct ndma_h2t_dma_context`) and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextState {
    /// SYNC, ASYNC1 or ASYNC2.
    pub handle: CtxHandle,
    /// Holds a transfer.
    pub inuse: bool,
    /// Abandoned: the ring was re-initialised under it and it could not be re-staged.
    pub aborted: bool,
    /// Source and destination device addresses of the transfer.
    pub src: u64,
    /// Destination.
    pub dst: u64,
    /// Transfer size in bytes.
    pub size: u64,
    /// Bytes completed.
    pub done: u64,
    /// Bytes in the batch on the ring.
    pub outstanding: u64,
    /// Descriptors of the batch on the ring, marker included.
    pub batch_descriptors: u32,
    /// Ring slots the context accounts for (staged, not acked).
    pub in_flight: u32,
    /// Neither end is host memory.
    pub is_d2d: bool,
    /// Its completion marker is in the poll word now (the engine finished the batch; nobody acked it).
    pub marker_seen: bool,
}

/// The zero-copy context queue of the ring, when it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZeroCopyState {
    /// Contexts queued (tombstones excluded). A context whose wait failed has already left the queue.
    pub queued: u32,
    /// Of those, submitted: descriptors on the ring, waiting for their marker.
    pub submitted: u32,
    /// Ring slots the submitted contexts account for.
    pub slots_in_flight: u32,
    /// Pages pinned by the queue.
    pub pinned_pages: u64,
    /// Completions waiting for room in the completion queue.
    pub cq_backlog: usize,
}

/// Where a slot stands relative to the cursors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRole {
    /// Not on the ring: acked, or never staged since the ring was initialised (may hold a stale pair).
    Free,
    /// Staged and executed by the engine (behind its head), not acked yet.
    Done,
    /// Staged; the engine's head points at it: the next pair it fetches (or the one it stopped on).
    Head,
    /// Staged, handed over, not reached by the engine yet.
    Pending,
}

impl fmt::Display for SlotRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            SlotRole::Free => "free",
            SlotRole::Done => "done",
            SlotRole::Head => "HEAD",
            SlotRole::Pending => "pending",
        })
    }
}

/// One descriptor pair of the window: its slot, role and both descriptors (read them through
/// [`Desc::tx`] / [`Desc::rx`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotState {
    /// Ring slot.
    pub slot: u32,
    /// Where it stands.
    pub role: SlotRole,
    /// The TX descriptor.
    pub tx: Desc,
    /// The RX descriptor.
    pub rx: Desc,
}

/// A snapshot of one H2T ring (module documentation above). Its `Display` is the dump a person reads.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::SlotRole;
///
/// let (src, dst) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
/// dev.memcpy_mc(&src, &dst, 0, 0, 4096)?;
/// let s = dev.ring_state(0)?;
/// // One data pair and the marker, executed and acked: both cursors at 2, the engine's head too.
/// assert_eq!((s.tx.next_desc_idx, s.tx.next_cdesc_idx, s.tx.regs.head.slot, s.tx.regs.tail.slot), (2, 2, 2, 2));
/// let last = s.descriptors.last().unwrap();
/// assert_eq!((last.slot, last.role, last.tx.tx().len_ctrl.len_bytes()), (1, SlotRole::Free, 4));
/// assert!(s.to_string().contains("engine 32 queue 0"));
/// # Ok::<(), ndma::NdmaError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingState {
    /// Device index.
    pub device: u32,
    /// NeuronCore.
    pub nc: u32,
    /// H2T engine.
    pub engine: u32,
    /// Queue id.
    pub qid: u32,
    /// The TX (M2S) queue.
    pub tx: QueueState,
    /// The RX (S2M) queue.
    pub rx: QueueState,
    /// The three classic contexts: SYNC, ASYNC1, ASYNC2.
    pub contexts: Vec<ContextState>,
    /// The zero-copy queue, if the ring ever had one.
    pub zero_copy: Option<ZeroCopyState>,
    /// The ring's counters.
    pub counters: StatsSnapshot,
    /// Up to [`RING_STATE_WINDOW`] pairs around the cursors, in ring order.
    pub descriptors: Vec<SlotState>,
    /// What the back end recorded that the registers do not show ([`crate::Platform::device_diagnostics`]).
    pub device_diagnostics: Option<String>,
}

impl QueueState {
    fn capture(q: &udma::Queue<HostRing>, mmio: &dyn udma::Mmio) -> QueueState {
        QueueState {
            dir: q.direction(),
            size: q.size(),
            next_desc_idx: q.next_desc_idx(),
            next_cdesc_idx: q.next_cdesc_idx(),
            ring_id: q.ring_id(),
            available: q.available(),
            sw_status: q.status(),
            regs: q.read_regs(mmio),
        }
    }
}

impl RingState {
    /// Snapshot of `ring`, whose lock the caller holds (`inner`).
    pub(crate) fn capture(dev: &NeuronDevice, ring: &H2tRing, inner: &RingInner) -> RingState {
        let mmio = &*dev.bar0;
        let (tx, rx) = (QueueState::capture(inner.queue.tx(), mmio), QueueState::capture(inner.queue.rx(), mmio));
        let handles = [CtxHandle::Sync, CtxHandle::Async1, CtxHandle::Async2];
        let contexts = handles
            .iter()
            .zip(&inner.contexts)
            .enumerate()
            .map(|(slot, (&handle, c))| ContextState {
                handle,
                inuse: c.inuse,
                aborted: c.aborted,
                src: c.src,
                dst: c.dst,
                size: c.size,
                done: c.offset,
                outstanding: c.outstanding,
                batch_descriptors: c.pending_transfers,
                in_flight: c.in_flight,
                is_d2d: c.is_d2d,
                marker_seen: marker_visible(ring, slot),
            })
            .collect();
        let descriptors = window(inner, &tx);
        RingState {
            device: dev.index,
            nc: ring.nc,
            engine: ring.eng_id,
            qid: ring.qid,
            tx,
            rx,
            contexts,
            zero_copy: zero_copy(inner),
            counters: ring.stats.snapshot(),
            descriptors,
            device_diagnostics: dev.platform.device_diagnostics(dev.index, ring.eng_id, ring.qid),
        }
    }
}

fn zero_copy(inner: &RingInner) -> Option<ZeroCopyState> {
    let zc = inner.zc.as_ref()?;
    let q = &zc.queue;
    let states: Vec<ZcState> = q.live_slots().map(|i| q.entry(i).state).collect();
    Some(ZeroCopyState {
        queued: states.iter().filter(|s| **s != ZcState::Invalid).count() as u32,
        submitted: states.iter().filter(|s| **s == ZcState::Submitted).count() as u32,
        slots_in_flight: q.slots_in_flight(),
        pinned_pages: q.nr_pinned_pages(),
        cq_backlog: zc.cq.backlog_len(),
    })
}

/// The pairs around the cursors: every in-flight slot when they fit in [`RING_STATE_WINDOW`] (the window
/// then ends at the producer, the slots before it showing what ran last); else a window from two slots
/// before the engine's head, kept inside the in-flight range.
fn window(inner: &RingInner, tx: &QueueState) -> Vec<SlotState> {
    let mask = tx.size - 1;
    let c = tx.next_cdesc_idx;
    let in_flight = tx.next_desc_idx.wrapping_sub(c) & mask;
    let n = RING_STATE_WINDOW.min(tx.size);
    // The engine's head relative to the consumer, when it lies in [consumer, producer].
    let head = Some(tx.regs.head.slot.wrapping_sub(c) & mask).filter(|h| *h <= in_flight);
    let start: i64 = if in_flight > n {
        let h = i64::from(head.unwrap_or(0));
        (h - 2).clamp(0, i64::from(in_flight - n))
    } else {
        i64::from(in_flight) - i64::from(n)
    };
    (0..i64::from(n))
        .map(|i| {
            let rel = start + i;
            let slot = (i64::from(c) + rel).rem_euclid(i64::from(tx.size)) as u32;
            let role = match head {
                _ if rel < 0 || rel >= i64::from(in_flight) => SlotRole::Free,
                Some(h) if rel < i64::from(h) => SlotRole::Done,
                Some(h) if rel == i64::from(h) => SlotRole::Head,
                _ => SlotRole::Pending,
            };
            SlotState { slot, role, tx: inner.queue.tx().read_desc(slot), rx: inner.queue.rx().read_desc(slot) }
        })
        .collect()
}

impl NeuronDevice {
    /// A snapshot of NC `nc`'s H2T ring, taken under its lock (example on [`RingState`]).
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`], [`NdmaError::NoH2tRing`].
    pub fn ring_state(&self, nc: u32) -> Result<RingState> {
        let ring = self.ring(nc)?;
        let inner = ring.lock();
        Ok(RingState::capture(self, ring, &inner))
    }

    /// The snapshot taken at this device's latest DMA failure (a timeout in any path, classic or zero-copy),
    /// before recovery re-initialised the ring; `None` if nothing failed yet. For failures reported only as an
    /// errno (an async zero-copy completion), this is where the ring's state is.
    pub fn last_failure_state(&self) -> Option<RingState> {
        self.last_failure.lock().unwrap_or_else(|p| p.into_inner()).as_deref().cloned()
    }
}

impl crate::classic::RingGuard<'_> {
    /// A failure on this ring, before recovery touches it: snapshots the ring, attaches the snapshot to
    /// `err` if it carries one (a timeout), keeps it as the device's last failure, and logs the error event
    /// with it.
    pub(crate) fn with_state(&self, err: NdmaError) -> NdmaError {
        let state = Box::new(RingState::capture(self.dev, self.ring, &self.inner));
        tracing::error!(nc = self.ring.nc, eng = self.ring.eng_id, qid = self.ring.qid, state = %state, "{err}");
        *self.dev.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(state.clone());
        err.with_ring_state(state)
    }
}

impl fmt::Display for QueueState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.regs;
        writeln!(
            f,
            "    software: next desc {}, next completion {}, ring id {}, {} of {} slots free, {:?}",
            self.next_desc_idx, self.next_cdesc_idx, self.ring_id, self.available, self.size, self.sw_status
        )?;
        let state = r.engine_state.map_or_else(|| format!("{:#x}?", r.engine_state_raw), |s| format!("{s:?}"));
        write!(
            f,
            "    engine:   head {}, tail {}, current {}, status {:#010x}, {}, engine {state}, ring {:#x} × {}",
            r.head,
            r.tail,
            r.current,
            r.status,
            if r.enabled { "enabled" } else { "PAUSED" },
            r.ring_base,
            r.ring_len
        )?;
        if let Some(dmb) = r.dmb_pauses {
            write!(f, ", DMB {}", if dmb { "pauses" } else { "masked" })?;
        }
        Ok(())
    }
}

impl fmt::Display for ContextState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = format!("{:?}", self.handle).to_uppercase();
        if !self.inuse {
            return write!(f, "{name:>6}: free");
        }
        write!(
            f,
            "{name:>6}: {:#x} → {:#x}, {} of {} bytes done, batch of {} descriptors ({} bytes), {} slots in flight{}{}{}",
            self.src,
            self.dst,
            self.done,
            self.size,
            self.batch_descriptors,
            self.outstanding,
            self.in_flight,
            if self.is_d2d { ", device→device" } else { "" },
            if self.marker_seen { ", marker SEEN" } else { ", marker not seen" },
            if self.aborted { ", ABORTED" } else { "" }
        )
    }
}

impl fmt::Display for RingState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "H2T ring of device {} NC {}: engine {} queue {}", self.device, self.nc, self.engine, self.qid)?;
        writeln!(f, "  TX (M2S)\n{}\n  RX (S2M)\n{}", self.tx, self.rx)?;
        writeln!(f, "  contexts:")?;
        for c in &self.contexts {
            writeln!(f, "    {c}")?;
        }
        if let Some(z) = &self.zero_copy {
            writeln!(
                f,
                "  zero-copy: {} queued, {} submitted ({} slots), {} pages pinned, {} completions backlogged",
                z.queued, z.submitted, z.slots_in_flight, z.pinned_pages, z.cq_backlog
            )?;
        }
        let c = &self.counters;
        writeln!(
            f,
            "  counters: {} submitted, {} transfers, {} bytes, {} descriptors, {} batches, {} polls, {} timeouts, \
             {} retries, {} ring resets, {} aborts",
            c.submitted,
            c.transfers,
            c.bytes,
            c.descriptors,
            c.batches,
            c.polls,
            c.timeouts,
            c.retries,
            c.ring_resets,
            c.aborts
        )?;
        writeln!(f, "  descriptors around the cursors:")?;
        for s in &self.descriptors {
            if s.tx == Desc::default() && s.rx == Desc::default() {
                writeln!(f, "    [{:>5}] {:<7} (never written)", s.slot, s.role)?;
            } else {
                writeln!(
                    f,
                    "    [{:>5}] {:<7} TX {}\n                    RX {}",
                    s.slot,
                    s.role,
                    s.tx.tx(),
                    s.rx.rx()
                )?;
            }
        }
        match &self.device_diagnostics {
            Some(d) => write!(f, "  device: {}", d.replace('\n', "\n    ")),
            None => write!(f, "  device: nothing recorded"),
        }
    }
}
