//! The steps that move a ring's zero-copy queue forward (`ndma_zerocopy_complete`, FACTS §5.7), and the
//! per-ring zero-copy state they work on. They run with the ring lock held — from the completion thread, and
//! from a synchronous submit that must make room.
//!
//! 1. Retire submitted contexts from the head: wait for the marker (or take a `Completed` result), post the
//!    request's completion when its last piece is done, or its first error (then drain the rest of it).
//! 2. Issue pinned contexts while descriptors are available.
//! 3. Pin unpinned (deferred) contexts through their captured address space while the pin budget allows.
//!
//! A piece that fails in step 2 or 3 becomes `Completed` with its error, in place: its request's completion
//! is then posted when it reaches the head, so completions stay in queue order.

use std::sync::Arc;

use super::build::plan_descriptors;
use super::context::ZcState;
use super::cq::{CompletionQueue, CqEntry, NDMA_H2D_COMPL_QUEUE_SIZE};
use super::pin::pin_remote;
use super::queue::{CtxQueue, DrainStep};
use super::sizing::{descs_available, should_wait};
use super::{NDMA_CTX_QUEUE_DEFAULT_CAPACITY, NDMA_ZC_DESC_WAIT_THRESHOLD_LO};
use crate::classic::marker::{add_completion_desc, poll_word, MARKER_SLOT_SIZE};
use crate::classic::wait::{marker_holds, wait_marker, MarkerWait};
use crate::classic::RingGuard;
use crate::device::NeuronDevice;
use crate::memory::MemChunk;
use crate::ring::HostRing;
use crate::{HostBuf, NdmaError, Result, PAGE_SIZE};
use udma::{Arch, Barrier, DmaMemory, M2mQueue};

/// Offset of context slot `i`'s marker slot in the ring's marker buffer.
fn marker_slot(i: u32) -> usize {
    i as usize * MARKER_SLOT_SIZE
}

/// One ring's zero-copy state (`dma_ctx_queue` + `dma_compl_queue`), created on first use.
pub(crate) struct ZcRing {
    pub queue: CtxQueue,
    /// Marker words of the queue's contexts: slot i uses bytes [8i, 8i + 8) (`completion_pool`).
    completion: HostBuf,
    completion_dma: u64,
    /// The async completion queue user space maps.
    pub cq: CompletionQueue,
    /// Descriptors of host → device pieces issued since the last piece that carried the write barrier (or
    /// the last fence): writes a fence may have to wait for, so its budget is sized for them.
    unfenced: u64,
    /// The newest request (ids grow) that had a piece issued.
    newest_issued: u64,
    /// The newest request (ids grow) one of whose pieces was failed in place: it has its completion, so the
    /// submit that may still be queueing its later pieces stops there.
    newest_failed: u64,
}

impl ZcRing {
    /// Has a piece of `request` been issued? Exact for the newest request (the one being submitted under
    /// the ring lock): no newer one's pieces can have been issued. For an older one it may answer yes when
    /// only a newer request's were, never no when one of its own was.
    pub(crate) fn issued_request(&self, request: u64) -> bool {
        self.newest_issued >= request
    }

    /// Was a piece of `request` failed in place? Exact for the newest request, the one being submitted under
    /// the ring lock (an older failure never names a newer request).
    pub(crate) fn failed_request(&self, request: u64) -> bool {
        self.newest_failed == request
    }
}

impl ZcRing {
    /// `ndma_ctx_queue_init` + `ndma_h2d_compl_queue_init`.
    pub(crate) fn new(dev: &NeuronDevice, nc: u32) -> Result<ZcRing> {
        let completion = crate::platform::alloc_coherent(
            &*dev.platform,
            NDMA_CTX_QUEUE_DEFAULT_CAPACITY as usize * MARKER_SLOT_SIZE,
        )?;
        let completion_dma = completion.phys_addr() | dev.dhal.pci_host_base();
        // The op layer's own: user-authored descriptors may not write completions into it.
        let cq_chunk: Arc<MemChunk> = dev.alloc_completion_queue(NDMA_H2D_COMPL_QUEUE_SIZE as u64, nc)?;
        Ok(ZcRing {
            queue: CtxQueue::new(NDMA_CTX_QUEUE_DEFAULT_CAPACITY, dev.zerocopy_pin_budget()),
            completion,
            completion_dma,
            cq: CompletionQueue::new(cq_chunk)?,
            unfenced: 0,
            newest_issued: 0,
            newest_failed: 0,
        })
    }
}

/// What one pass of the completion steps did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Contexts retired (step 1).
    pub retired: u32,
    /// Contexts that left the pinned-unsubmitted region (step 2): issued, failed in place, or passed (a
    /// completed dummy).
    pub issued: u32,
    /// Contexts that left the unpinned region (step 3): pinned, failed in place, or passed.
    pub pinned: u32,
}

impl Progress {
    pub(crate) fn any(&self) -> bool {
        self.retired + self.issued + self.pinned > 0
    }
}

impl RingGuard<'_> {
    /// The ring's zero-copy state, created on first use.
    pub(crate) fn zc(&mut self) -> Result<&mut ZcRing> {
        if self.inner.zc.is_none() {
            self.inner.zc = Some(Box::new(ZcRing::new(self.dev, self.ring.nc)?));
        }
        Ok(self.inner.zc.as_deref_mut().expect("just created"))
    }

    fn zq(&mut self) -> &mut CtxQueue {
        &mut self.inner.zc.as_mut().expect("zero-copy state exists once contexts are queued").queue
    }

    /// Free descriptor slots on the ring.
    pub(crate) fn ring_available(&self) -> u32 {
        self.inner.queue.available()
    }

    /// `ndma_build_n_issue_zc_descs` for the pinned context in slot `i`: stage its data descriptors and its
    /// marker, ring the doorbells, and only then mark it submitted (the driver marks it submitted even when the
    /// doorbell failed).
    ///
    /// # Errors
    ///
    /// HAL errors; part of the piece may be staged, so the caller must re-initialise the ring.
    pub(crate) fn zc_issue(&mut self, i: u32) -> Result<()> {
        let arch = self.dev.dhal.arch();
        let mmio = &*self.dev.bar0;
        let crate::ring::RingInner { queue, zc, .. } = &mut *self.inner;
        let zc = zc.as_mut().expect("zero-copy state exists once contexts are queued");
        let ctx = zc.queue.entry(i);
        let pages = ctx.pinned.as_ref().map(|p| p.pages()).unwrap_or_default();
        let plan =
            plan_descriptors(arch, pages, ctx.host_addr % PAGE_SIZE, ctx.size, ctx.dev_addr, ctx.to_device, ctx.last);
        for d in &plan.data {
            queue.copy_prepare_one(d.src, d.dst, d.len, d.barrier, false)?;
        }
        let slot = marker_slot(i);
        add_completion_desc(queue, &*zc.completion, zc.completion_dma, slot, plan.marker_barrier)?;
        let count = plan.data.len() as u32 + 1;
        queue.copy_start(mmio, count, count)?;
        let ctx = zc.queue.entry_mut(i);
        ctx.nr_desc = count - 1;
        ctx.state = ZcState::Submitted;
        zc.newest_issued = zc.newest_issued.max(ctx.request);
        if ctx.to_device {
            // The last piece's barrier lands every earlier write before its marker; the others leave theirs.
            zc.unfenced = if ctx.last { 0 } else { zc.unfenced + u64::from(count) };
        }
        let stats = &self.ring.stats;
        stats.add_descriptors(u64::from(count));
        stats.add_batches(1);
        stats.add_doorbells(2);
        stats.add_zc_pieces(1);
        Ok(())
    }

    /// Waits for the marker of the submitted context in slot `i` (async budget: first wait 1 µs, FACTS §5.6)
    /// and acks its slots.
    fn zc_wait(&mut self, i: u32) -> Result<()> {
        let zc = self.inner.zc.as_ref().expect("zero-copy state exists once contexts are queued");
        let ctx = zc.queue.entry(i);
        let m = MarkerWait {
            completion: &*zc.completion,
            offset: marker_slot(i),
            count: ctx.nr_desc + 1,
            budget_for: ctx.nr_desc + 1,
            is_async: true,
            is_d2d: false,
        };
        wait_marker(self.dev.dhal, &*self.dev.platform, self.ring, &self.inner.queue, m)
            .map(|_| ())
            .map_err(|e| self.with_state(e))
    }

    /// Posts a completion to the ring's queue (to its backlog when the queue is full).
    fn zc_post(&mut self, sequence_num: u64, compl_ret: i64, context: u64) {
        self.ring.stats.add_cqes(1);
        if let Some(zc) = self.inner.zc.as_mut() {
            zc.cq.put(CqEntry { sequence_num, compl_ret, context });
        }
    }

    /// Step 1 for one context: pops the head if it is submitted and retires it. A synchronous piece's failure is
    /// returned (its caller drains the request); an async one's becomes the request's completion.
    ///
    /// # Errors
    ///
    /// The failure of a synchronous (sequence 0) piece.
    pub(crate) fn zc_retire_one(&mut self) -> Result<bool> {
        let Some(i) = self.zq().pop_submitted() else { return Ok(false) };
        let (state, seq, request, last, context, compl_ret) = {
            let c = self.zq().entry(i);
            (c.state, c.sequence_num, c.request, c.last, c.context, c.compl_ret)
        };
        // Ok: the result to post — 0, or a completed dummy's own (an s64, posted as it is, whatever its value).
        let result = if state == ZcState::Completed {
            match self.zq().entry_mut(i).failure.take() {
                Some(e) => Err(e),
                None => Ok(compl_ret),
            }
        } else {
            let r = self.zc_wait(i);
            if r.is_err() {
                // The piece is over (abandoned); others in flight are re-issued after the re-init.
                self.zq().entry_mut(i).state = ZcState::Completed;
                self.recover(&[]);
            }
            r.map(|()| 0)
        };
        match result {
            Ok(ret) => {
                if last && seq != 0 {
                    self.zc_post(seq, ret, context);
                }
                self.zq().release(i);
                Ok(true)
            }
            Err(e) => {
                self.zq().release(i);
                if seq == 0 {
                    return Err(e);
                }
                self.zc_post(seq, i64::from(e.errno()), context);
                // A piece that failed in place was fenced then; a failed wait re-initialised the ring.
                self.zc_drain_request(request, None, false);
                Ok(true)
            }
        }
    }

    /// `ndma_ctx_queue_drain_sequence` with waits: tombstones every context of `request`, waiting first for its
    /// submitted ones and then, when the request wrote device memory (`fence`, or a waited piece did), for a
    /// fence batch that makes its writes land (see [`CtxQueue::drain_request`]); after a wait fails, the ring
    /// is re-initialised (what else was in flight is re-issued) before the drained contexts are unpinned, so
    /// the engine holds no descriptor pointing at their pages by then.
    pub(crate) fn zc_drain_request(&mut self, request: u64, keep: Option<u32>, fence: bool) {
        let (dhal, platform, ring, mmio) = (self.dev.dhal, &*self.dev.platform, self.ring, &*self.dev.bar0);
        let crate::ring::RingInner { queue, zc, .. } = &mut *self.inner;
        let Some(zc) = zc.as_mut() else { return };
        let (completion, completion_dma, unfenced) = (&*zc.completion, zc.completion_dma, &mut zc.unfenced);
        let drained = zc.queue.drain_request(request, keep, fence, |step| {
            let (i, count, budget_for, is_fence) = match step {
                DrainStep::Wait(i, ctx) => (i, ctx.nr_desc + 1, ctx.nr_desc + 1, false),
                DrainStep::Fence(i) => {
                    let count = stage_fence(dhal.arch(), queue, completion, completion_dma, i)?;
                    queue.copy_start(mmio, count, count)?;
                    ring.stats.add_descriptors(u64::from(count));
                    ring.stats.add_batches(1);
                    ring.stats.add_doorbells(2);
                    // Its marker lands once the writes it fences have: a budget for those too.
                    let fenced = u32::try_from(*unfenced).unwrap_or(u32::MAX);
                    (i, count, count.saturating_add(fenced), true)
                }
            };
            let offset = marker_slot(i);
            let m = MarkerWait { completion, offset, count, budget_for, is_async: true, is_d2d: false };
            wait_marker(dhal, platform, ring, queue, m)?;
            if is_fence {
                *unfenced = 0;
            }
            Ok(())
        });
        if let Err(e) = &drained.result {
            // Nobody gets this error (the sequence is drained): the snapshot goes to the last-failure slot.
            let _ = self.with_state(e.clone());
            self.recover(&[]);
        }
        let _ = self.zq().release_drained(drained);
    }

    /// Step 2: issues pinned contexts in order while descriptors are available. A piece whose staging fails
    /// is failed in place (after the ring is re-initialised). Returns how many contexts it moved past the
    /// first-pinned-unsubmitted cursor — issued, failed in place, or already over and passed: each lets the
    /// next pass retire it. (Counting only the issued ones made a completed dummy look like no progress: a
    /// stopping thread then left it unposted for good, a running one waited a retry interval for it.)
    pub(crate) fn zc_issue_pinned(&mut self) -> u32 {
        let mut issued = 0;
        while let Some(i) = self.zq().peek_pinned_unsubmitted() {
            let (state, nr_pages) = {
                let c = self.zq().entry(i);
                (c.state, c.nr_pages)
            };
            if state == ZcState::PinnedUnsubmitted {
                if !descs_available(self.ring_available(), nr_pages) {
                    break;
                }
                if let Err(e) = self.zc_issue(i) {
                    tracing::error!(nc = self.ring.nc, "zero-copy descriptors could not be issued: {e}");
                    self.recover(&[]);
                    self.zc_fail_in_place(i, &e);
                    continue;
                }
            }
            // Progress whether issued or passed (a completed dummy): the next pass can retire it.
            issued += 1;
            self.zq().inc_fpu();
        }
        issued
    }

    /// Step 3: pins deferred contexts through their captured address space while the pin budget allows.
    /// Returns how many contexts left the unpinned region: pinned, failed in place, or already pinned or over
    /// (a completed dummy) and passed — each lets the next steps move.
    pub(crate) fn zc_pin_unpinned(&mut self) -> u32 {
        let mut pinned = 0;
        while let Some(i) = self.zq().peek_first_unpinned() {
            let q = self.zq();
            let c = q.entry(i);
            if c.state != ZcState::Unpinned {
                q.inc_fu();
                pinned += 1;
                continue;
            }
            let n = u64::from(c.nr_pages);
            if !q.can_pin(n) {
                break;
            }
            let (va, device_writes) = (c.host_addr & !(PAGE_SIZE - 1), !c.to_device);
            let prepinned = c.mm.clone().and_then(|mm| self.dev.prepinned(&mm, va, n as usize, false));
            let c = self.zq().entry_mut(i);
            let pin = match prepinned {
                Some(p) => Ok(p),
                None => match c.mm.take() {
                    Some(mm) => pin_remote(&mm, va, n as usize, device_writes),
                    None => Err(NdmaError::Pin { va, errno: -udma::errno::EINVAL }),
                },
            };
            match pin {
                Ok(p) => {
                    c.pinned = Some(p);
                    c.mm = None;
                    c.state = ZcState::PinnedUnsubmitted;
                    let q = self.zq();
                    q.add_pinned_pages(n);
                    q.inc_fu();
                    pinned += 1;
                }
                Err(e) => {
                    tracing::warn!(nc = self.ring.nc, va, "pinning a deferred zero-copy piece failed: {e}");
                    self.zc_fail_in_place(i, &e);
                    self.zq().inc_fu();
                    pinned += 1;
                }
            }
        }
        pinned
    }

    /// A queued piece that cannot go on: it becomes its request's (error) completion where it stands, and the
    /// request's other pieces are drained.
    fn zc_fail_in_place(&mut self, i: u32, e: &NdmaError) {
        let (request, to_device) = {
            let c = self.zq().entry(i);
            (c.request, c.to_device)
        };
        // Pieces of the request issued before this one may have their device writes in flight, retired or not:
        // fence them — unless none was issued (conservative for an older request: a newer one's issue counts).
        let issued = self.inner.zc.as_ref().is_some_and(|zc| zc.issued_request(request));
        self.zc_drain_request(request, Some(i), to_device && issued);
        if let Some(zc) = self.inner.zc.as_mut() {
            zc.newest_failed = zc.newest_failed.max(request);
        }
        let q = self.zq();
        q.unpin_in_place(i);
        let c = q.entry_mut(i);
        c.mm = None;
        c.state = ZcState::Completed;
        c.compl_ret = i64::from(e.errno());
        c.failure = Some(e.clone());
        c.last = true;
    }

    /// Ends every request still queued with `e`, in queue order, once nothing can move them any more (the
    /// completion thread stopping over pieces a pin budget holds back, say): each gets its one completion,
    /// its pieces are drained and unpinned, and nothing is left held for a thread that is gone. Pieces already
    /// issued are retired as usual (waited for, with the driver's budget) before those behind them fail.
    pub(crate) fn zc_abandon(&mut self, e: &NdmaError) {
        loop {
            let p = self.zc_complete();
            if !self.zc_queued() {
                return;
            }
            // After a pass, the first context not issued is one the steps could not move.
            let q = self.zq();
            match q.peek_pinned_unsubmitted().or_else(|| q.peek_first_unpinned()) {
                // It becomes its request's completion; the next pass passes it on and posts it.
                Some(i) => self.zc_fail_in_place(i, e),
                None if p.any() => {}
                None => return,
            }
        }
    }

    /// `ndma_zerocopy_complete`: one pass of the three steps. Step 1 retires at least the head (if submitted),
    /// then keeps retiring while a sync submit would have to wait (pin budget, full queue, few descriptors).
    pub(crate) fn zc_complete(&mut self) -> Progress {
        let mut p = Progress::default();
        if self.inner.zc.is_none() {
            return p;
        }
        let mut thr = NDMA_ZC_DESC_WAIT_THRESHOLD_LO;
        loop {
            let q = &self.inner.zc.as_ref().expect("checked").queue;
            let avail = self.ring_available();
            // Beyond the driver's rule (one, and more only while it must wait for room): every piece that is
            // already over, so a burst of finished pieces costs one pass under the ring lock, not one each.
            let must = p.retired == 0
                || should_wait(q.nr_pinned_pages(), q.pin_budget(), q.is_full(), avail, &mut thr)
                || self.zc_head_done();
            // Sequence-0 pieces belong to a synchronous submit, which holds the lock: none is queued here.
            if !must || !matches!(self.zc_retire_one(), Ok(true)) {
                break;
            }
            p.retired += 1;
        }
        p.issued = self.zc_issue_pinned();
        p.pinned = self.zc_pin_unpinned();
        if p.pinned > 0 {
            p.issued += self.zc_issue_pinned();
        }
        if let Some(zc) = self.inner.zc.as_mut() {
            zc.cq.flush();
        }
        p
    }

    /// The head of the submitted region: the ring's zero-copy state, the head's slot, and whether it is a
    /// completed dummy (no marker to wait for).
    fn zc_head(&self) -> Option<(&ZcRing, u32, bool)> {
        let zc = self.inner.zc.as_deref()?;
        let i = zc.queue.peek_submitted()?;
        Some((zc, i, zc.queue.entry(i).state == ZcState::Completed))
    }

    /// Is the head of the submitted region over — a completed dummy, or a piece whose marker is visible — so
    /// that retiring it waits for nothing?
    fn zc_head_done(&self) -> bool {
        self.zc_head().is_some_and(|(zc, i, dummy)| dummy || marker_holds(&*zc.completion, poll_word(marker_slot(i))))
    }

    /// The marker word of the head of the submitted region when it is a piece: its memory (kept alive by the
    /// handle) and offset. The completion thread waits on it between passes, without the ring lock.
    pub(crate) fn zc_head_marker(&self) -> Option<(HostBuf, usize)> {
        let (zc, i, dummy) = self.zc_head()?;
        (!dummy).then(|| (Arc::clone(&zc.completion), poll_word(marker_slot(i))))
    }

    /// Does the queue still hold contexts?
    pub(crate) fn zc_queued(&self) -> bool {
        self.inner.zc.as_ref().is_some_and(|zc| !zc.queue.is_empty())
    }

    /// Does the queue still hold work or unposted completions?
    pub(crate) fn zc_pending(&self) -> bool {
        self.inner.zc.as_ref().is_some_and(|zc| !zc.queue.is_empty() || zc.cq.backlog_len() > 0)
    }
}

/// Stages a fence batch in marker slot `i`: a marker the engine writes only after every earlier write of the
/// ring has landed — on V3 the marker carries SOW; on V2 (no SOW) a 4-byte self-copy of the slot's second
/// word with WRITE_BARRIER goes first. Returns its descriptor count.
fn stage_fence(
    arch: Arch,
    queue: &mut M2mQueue<HostRing>,
    completion: &dyn DmaMemory,
    completion_dma: u64,
    i: u32,
) -> Result<u32> {
    let slot = marker_slot(i);
    let (data_fence, marker_fence) = super::build::write_fence(arch);
    let mut count = 1;
    if data_fence != Barrier::None {
        // The barrier goes on a data descriptor: a self-copy of the slot's second word carries it.
        let word = completion_dma + poll_word(slot) as u64;
        queue.copy_prepare_one(word, word, 4, data_fence, false)?;
        count += 1;
    }
    add_completion_desc(queue, completion, completion_dma, slot, marker_fence)?;
    Ok(count)
}
