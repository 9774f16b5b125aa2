//! `ndma_zerocopy_submit` (spec §4, FACTS §5.6): split each op of a request into pieces of at most 64 pinned
//! pages, pin them (or defer pinning with the captured address space), queue them, and issue them as
//! descriptors become available. A synchronous request (sequence number 0) is done when the call returns; an
//! async one completes through the ring's completion queue.

use std::sync::Arc;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::context::{ZcContext, ZcState};
use super::cq::NDMA_H2D_COMPL_BACKLOG_MAX;
use super::pin::pin_local;
use super::sizing::{calc_pin_size, should_wait};
use super::NDMA_ZC_DESC_WAIT_THRESHOLD_LO;
use crate::classic::RingGuard;
use crate::device::NeuronDevice;
use crate::memory::MemChunk;
use crate::ring::H2tRing;
use crate::{NdmaError, Result, UserMm, PAGE_SIZE};

/// One op of a zero-copy request (`nrt_tensor_batch_op_t`, FACTS §5.8): `size` bytes between the user buffer
/// at `buffer` and the device memory at `offset` from the request's base. Its layout is the ioctl's, so a
/// request can come from user space as bytes:
///
/// ```
/// use ndma::BatchOp;
/// use zerocopy::{FromBytes, IntoBytes};
///
/// let raw: [u64; 3] = [0x1000, 4096, 0x7f00_0000_0000];
/// let op = BatchOp::read_from_bytes(raw.as_bytes()).unwrap();
/// assert_eq!(op, BatchOp { offset: 0x1000, size: 4096, buffer: 0x7f00_0000_0000 });
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct BatchOp {
    /// Offset of the device side from the request's base.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// User virtual address of the host side.
    pub buffer: u64,
}

const _: () = assert!(size_of::<BatchOp>() == 24);

/// The queue argument that means "the NC's default H2T queue" (`NEURON_DMA_H2T_DEFAULT_QID`); see
/// [`NeuronDevice::zerocopy_submit`].
pub const NEURON_DMA_H2T_DEFAULT_QID: i32 = -1;

/// A request, as the submit path walks it.
struct Request<'a> {
    /// Its number on the ring ([`ZcContext::request`]).
    id: u64,
    ops: &'a [BatchOp],
    base: u64,
    mc: &'a Arc<MemChunk>,
    to_device: bool,
    seq: u64,
    context: u64,
    mm: &'a Arc<dyn UserMm>,
}

impl NeuronDevice {
    /// `ndma_zerocopy_submit`: moves every op of `ops` between the calling task's user memory and `mc` (from
    /// `mc_offset + op.offset`) on NC `nc`'s H2T ring, `to_device` for host → device. `sequence_num` 0 is a
    /// synchronous request, done when this returns; any other value is async: it is queued and completes with
    /// exactly one entry `(sequence_num, result, context)` on the ring's completion queue
    /// ([`NeuronDevice::completion_queue`]). `qid` must be the NC's H2T queue or
    /// [`NEURON_DMA_H2T_DEFAULT_QID`].
    ///
    /// Each queued piece holds its pinned pages and a reference on `mc` until it completes, so neither the
    /// user's pages nor the chunk can be freed under the engine.
    ///
    /// # Errors
    ///
    /// Before anything is queued: [`NdmaError::NotOwner`] (`-ENOENT`) for a queue the NC does not own,
    /// [`NdmaError::ZeroCopyUnsupported`] (`-EINVAL`, V2 without the override),
    /// [`NdmaError::AsyncZeroCopyUnsupported`] (`-EINVAL`, async on V2), [`NdmaError::ForeignChunk`]
    /// (`-EINVAL`) for a chunk of another device's pool, [`NdmaError::OutOfRange`] for a window (`mc_offset`,
    /// or an op) outside `mc` or overflowing, [`NdmaError::NoAddressSpace`] (`-EFAULT`),
    /// [`NdmaError::Thread`] (`-ENOMEM`, async) when the completion thread cannot be started,
    /// [`NdmaError::CompletionBacklogFull`] (`-EBUSY`, async, when nobody consumes the completions),
    /// [`NdmaError::CompletionThreadStopped`] (`-ENODEV`, async on a device kept past its system),
    /// [`NdmaError::CompletionThreadPanicked`] (`-EIO`, async once the completion thread died). Then:
    /// [`NdmaError::QueueFull`] (`-EBUSY`: async, when the context queue is full; sync, when a piece cannot be
    /// pinned with nothing left to retire — a pin budget below the piece's pages,
    /// [`NeuronDevice::set_zerocopy_pin_budget`]), pin errors ([`NdmaError::Pin`]), and for a sync request the
    /// waits' errors. On any error the request's queued pieces are drained (waited for if submitted,
    /// unpinned); other requests' pieces are untouched, also those of a request with the same sequence number
    /// (the driver drains the whole queue).
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let bed = doctest::testbed(udma::Arch::V3);
    /// # let user = doctest::user(&bed, 16); // 16 pages mapped at `user.va`, this thread runs as the process
    /// use ndma::zerocopy::NEURON_DMA_H2T_DEFAULT_QID;
    /// use ndma::{BatchOp, NdmaError};
    ///
    /// let dev = &bed.system.devices()[0];
    /// user.write(0, &[0x11; 8192]);
    /// let hbm = dev.alloc_device(1 << 20, 3)?;
    /// // Two ops in one synchronous request, into a window 64 KiB into the chunk, on NC 3's ring.
    /// let ops = [
    ///     BatchOp { offset: 0, size: 4096, buffer: user.va },
    ///     BatchOp { offset: 12_288, size: 4096, buffer: user.va + 4096 },
    /// ];
    /// dev.zerocopy_submit(3, &ops, &hbm, 65536, NEURON_DMA_H2T_DEFAULT_QID, true, 0, 0)?;
    /// let back = dev.alloc_host(16_384, 3)?;
    /// dev.memcpy_mc(&hbm, &back, 65536, 0, 16_384)?;
    /// let mut out = vec![0u8; 16_384];
    /// back.read(0, &mut out)?;
    /// assert!(out[..4096].iter().chain(&out[12_288..]).all(|&b| b == 0x11));
    /// // NC 3's queue is queue 1 of engine 129: naming another is refused, as is a window past the chunk.
    /// assert_eq!(dev.h2t_queue(3)?, (129, 1));
    /// let err = dev.zerocopy_submit(3, &ops, &hbm, 0, 0, true, 0, 0).unwrap_err();
    /// assert_eq!(err, NdmaError::NotOwner { nc: 3, qid: 0 });
    /// let err = dev.zerocopy_submit(3, &ops, &hbm, 1 << 20, -1, true, 0, 0).unwrap_err();
    /// assert!(matches!(err, NdmaError::OutOfRange { what: "zero-copy device window", .. }));
    /// # Ok::<(), NdmaError>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn zerocopy_submit(
        &self,
        nc: u32,
        ops: &[BatchOp],
        mc: &Arc<MemChunk>,
        mc_offset: u64,
        qid: i32,
        to_device: bool,
        sequence_num: u64,
        context: u64,
    ) -> Result<()> {
        let ring = self.zc_owned_ring(nc, qid)?;
        if !self.zerocopy_supported() {
            return Err(NdmaError::ZeroCopyUnsupported);
        }
        let is_async = sequence_num != 0;
        let bit = self.zc_bit(ring, is_async)?;
        self.check_own_chunk("zero-copy device chunk", mc)?;
        // The window's start on its own, so that a request without ops is checked too (`base` below).
        mc.check_range("zero-copy device window", mc_offset, 0)?;
        for op in ops {
            let off = mc_offset.checked_add(op.offset).ok_or(NdmaError::OutOfRange {
                what: "zero-copy device offset",
                offset: mc_offset,
                size: op.offset,
                limit: u64::MAX,
            })?;
            mc.check_range("zero-copy device window", off, op.size)?;
            op.buffer.checked_add(op.size).ok_or(NdmaError::OutOfRange {
                what: "zero-copy user buffer",
                offset: op.buffer,
                size: op.size,
                limit: u64::MAX,
            })?;
        }
        let mm = self.platform.current_mm().ok_or(NdmaError::NoAddressSpace)?;
        if let Some(bit) = bit {
            self.completion_thread.ensure(self, bit)?;
        }
        let base = self.mc_to_pa(mc) + mc_offset;
        let _span = tracing::debug_span!("zerocopy_submit", nc, ops = ops.len(), seq = sequence_num).entered();
        let mut g = RingGuard::lock(self, ring);
        if is_async {
            self.zc_check_thread()?;
            g.zc_check_backlog()?;
        }
        let id = g.zc()?.queue.new_request();
        let req = Request { id, ops, base, mc, to_device, seq: sequence_num, context, mm: &mm };
        let mut result = g.zc_enqueue(&req);
        if result.is_ok() && !is_async {
            result = g.zc_finish_sync(id);
        }
        if result.is_err() {
            // Pieces issued before the failure may have their device writes in flight: fence them. Only this
            // request's pieces: another may carry the same sequence number. A request none of whose pieces was
            // issued (refused at its first, say) has no write in flight: no fence.
            let issued = g.zc()?.issued_request(id);
            g.zc_drain_request(id, None, to_device && issued);
        }
        if !is_async {
            // Completions the consumers made room for since: the completion thread posts them too, but once
            // its system is gone, a device kept past it has only its callers to do it.
            if let Some(zc) = g.inner.zc.as_mut() {
                zc.cq.flush();
            }
        }
        drop(g);
        if let (Ok(()), Some(bit)) = (&result, bit) {
            self.completion_thread.kick(bit);
        }
        result
    }

    /// `ndma_zerocopy_submit_completed` (\[N\]): queues an async request that is already over (`compl_ret`), so
    /// its completion is posted in order behind the requests queued before it (examples on
    /// [`CqConsumer::len`](super::CqConsumer::len) and [`CqConsumer::from_raw`](super::CqConsumer::from_raw)).
    ///
    /// # Errors
    ///
    /// [`NdmaError::NotOwner`], [`NdmaError::AsyncZeroCopyUnsupported`], [`NdmaError::ZeroSequence`] for
    /// sequence number 0 (the driver posts a completion no consumer can tell from an empty slot),
    /// [`NdmaError::QueueFull`], [`NdmaError::CompletionBacklogFull`], and failures to start the completion
    /// thread ([`NdmaError::CompletionThreadStopped`] once its system was dropped,
    /// [`NdmaError::CompletionThreadPanicked`] once the thread died).
    pub fn zerocopy_submit_completed(
        &self,
        nc: u32,
        qid: i32,
        sequence_num: u64,
        compl_ret: i64,
        context: u64,
    ) -> Result<()> {
        let ring = self.zc_owned_ring(nc, qid)?;
        let bit = self.zc_bit(ring, true)?.ok_or(NdmaError::AsyncZeroCopyUnsupported)?;
        if sequence_num == 0 {
            return Err(NdmaError::ZeroSequence);
        }
        self.completion_thread.ensure(self, bit)?;
        let mut g = RingGuard::lock(self, ring);
        self.zc_check_thread()?;
        g.zc_check_backlog()?;
        g.zc_push_completed(sequence_num, compl_ret, context).ok_or(NdmaError::QueueFull { nc })?;
        drop(g);
        self.completion_thread.kick(bit);
        Ok(())
    }

    /// Refuses an async request once the completion thread was stopped or died: called with the ring lock
    /// held, so either the stopping thread's last look at the ring sees what this request queues, or this
    /// sees the stop.
    fn zc_check_thread(&self) -> Result<()> {
        self.completion_thread.check(self.index())
    }

    /// The ring of NC `nc` if it owns queue `qid` (`ndmar_h2t_ring_is_owner`).
    fn zc_owned_ring(&self, nc: u32, qid: i32) -> Result<&H2tRing> {
        let not_owner = NdmaError::NotOwner { nc, qid };
        let ring = self.h2t_ring(nc).map_err(|_| not_owner.clone())?.ok_or(not_owner.clone())?;
        if qid != NEURON_DMA_H2T_DEFAULT_QID && u32::try_from(qid).ok() != Some(ring.qid) {
            return Err(not_owner);
        }
        Ok(ring)
    }

    /// The completion-thread bit of an async request's ring (`None` for a sync one).
    fn zc_bit(&self, ring: &H2tRing, is_async: bool) -> Result<Option<u32>> {
        if !is_async {
            return Ok(None);
        }
        self.dhal.ctx_queue_bit(ring.eng_id, ring.qid).map(Some).ok_or(NdmaError::AsyncZeroCopyUnsupported)
    }
}

impl RingGuard<'_> {
    /// Refuses a new async request while the completions nobody consumed fill the queue and
    /// [`NDMA_H2D_COMPL_BACKLOG_MAX`] more wait behind it (posting first what the consumers made room for).
    fn zc_check_backlog(&mut self) -> Result<()> {
        let nc = self.ring.nc;
        let cq = &mut self.zc()?.cq;
        cq.flush();
        match cq.backlog_len() {
            backlog if backlog >= NDMA_H2D_COMPL_BACKLOG_MAX => Err(NdmaError::CompletionBacklogFull { nc, backlog }),
            _ => Ok(()),
        }
    }

    /// Queues every piece of `req`, issuing pinned pieces as descriptors allow. A sync request makes room by
    /// retiring submitted pieces (`should_wait`'s hysteresis); an async one never waits.
    fn zc_enqueue(&mut self, req: &Request<'_>) -> Result<()> {
        let is_async = req.seq != 0;
        let Some(last_op) = req.ops.iter().rposition(|op| op.size > 0) else {
            // Nothing to move. An async request still completes exactly once.
            if is_async {
                self.zc_push_completed(req.seq, 0, req.context).ok_or(NdmaError::QueueFull { nc: self.ring.nc })?;
            }
            return Ok(());
        };
        for (k, op) in req.ops.iter().enumerate().filter(|(_, op)| op.size > 0) {
            let (mut host, mut dev, mut remaining) = (op.buffer, req.base + op.offset, op.size);
            let mut offset = host % PAGE_SIZE;
            let mut pin_size = calc_pin_size(remaining + offset);
            while remaining > 0 {
                self.zc_issue_pinned();
                if self.zc()?.failed_request(req.id) {
                    // A piece of this request already failed in place and is its completion: queueing the rest
                    // would move bytes after the failure and post a second completion. (Staging cannot fail
                    // today — the ring room is checked first and doorbells are plain writes — so this guards
                    // the rule, not a path a test can reach.)
                    return Ok(());
                }
                let nr_pages = pin_size.div_ceil(PAGE_SIZE);
                let q = &self.zc()?.queue;
                // Pins are taken in queue order: behind a deferred piece, this one waits for it. Pinned now, it
                // would hold budget the piece ahead may need, and it cannot be issued before that piece.
                let can_pin = q.can_pin(nr_pages) && q.unpinned_empty();
                let full = q.is_full();
                if is_async && full {
                    return Err(NdmaError::QueueFull { nc: self.ring.nc });
                }
                let queued = (can_pin || is_async) && !full;
                if queued {
                    let size = (pin_size - offset).min(remaining);
                    let last = size == remaining && k == last_op;
                    self.zc_push_piece(req, host, dev, size, nr_pages as u32, last, can_pin)?;
                    (host, dev, remaining, offset) = (host + size, dev + size, remaining - size, 0);
                    pin_size = pin_size.min(remaining);
                }
                if !is_async {
                    self.zc_make_room(!queued)?;
                }
            }
        }
        Ok(())
    }

    /// Builds a piece at the tail: pinned now (`pin_now`), or deferred with the captured address space.
    #[allow(clippy::too_many_arguments)]
    fn zc_push_piece(
        &mut self,
        req: &Request<'_>,
        host: u64,
        dev: u64,
        size: u64,
        nr_pages: u32,
        last: bool,
        pin_now: bool,
    ) -> Result<()> {
        let pid = req.mm.pid();
        let page = host & !(PAGE_SIZE - 1);
        let device_writes = !req.to_device;
        let pinned = if pin_now {
            match self.dev.prepinned(req.mm, page, nr_pages as usize, true) {
                Some(p) => Some(p),
                None => Some(pin_local(req.mm, page, nr_pages as usize, device_writes)?),
            }
        } else {
            None
        };
        let q = &mut self.zc()?.queue;
        let Some((_, slot)) = q.peek_tail() else {
            return Err(NdmaError::QueueFull { nc: self.ring.nc });
        };
        *slot = ZcContext {
            state: if pinned.is_some() { ZcState::PinnedUnsubmitted } else { ZcState::Unpinned },
            host_addr: host,
            dev_addr: dev,
            size,
            to_device: req.to_device,
            last,
            nr_pages,
            nr_desc: 0,
            mm: pinned.is_none().then(|| Arc::clone(req.mm)),
            pinned,
            pid,
            sequence_num: req.seq,
            request: req.id,
            context: req.context,
            compl_ret: 0,
            failure: None,
            held: Some(Arc::clone(req.mc)),
        };
        if pin_now {
            q.add_pinned_pages(u64::from(nr_pages));
        }
        q.inc_tail();
        Ok(())
    }

    /// Queues a context that is already over, to keep completion order (a `submit_completed` dummy).
    /// `None` when the queue is full.
    pub(crate) fn zc_push_completed(&mut self, seq: u64, compl_ret: i64, context: u64) -> Option<()> {
        let q = &mut self.inner.zc.as_mut()?.queue;
        let request = q.new_request();
        let (_, slot) = q.peek_tail()?;
        *slot = ZcContext {
            state: ZcState::Completed,
            to_device: true,
            last: true,
            sequence_num: seq,
            request,
            compl_ret,
            context,
            ..ZcContext::default()
        };
        q.inc_tail();
        Some(())
    }

    /// Sync step 3: while the pin budget, the queue or the descriptors are short (`should_wait`, with its
    /// hysteresis), retire submitted pieces. `must`: nothing could be queued, so make at least one step.
    fn zc_make_room(&mut self, mut must: bool) -> Result<()> {
        let mut thr = NDMA_ZC_DESC_WAIT_THRESHOLD_LO;
        loop {
            let q = &self.zc()?.queue;
            let (pinned, budget, full) = (q.nr_pinned_pages(), q.pin_budget(), q.is_full());
            if !must && !should_wait(pinned, budget, full, self.ring_available(), &mut thr) {
                return Ok(());
            }
            if !self.zc_step()? {
                // Nothing to retire, issue or pin: waiting cannot help (the driver pops an empty region here).
                return if must { Err(NdmaError::QueueFull { nc: self.ring.nc }) } else { Ok(()) };
            }
            must = false;
        }
    }

    /// One step forward: issue what fits, else retire the head, else pin a deferred piece.
    fn zc_step(&mut self) -> Result<bool> {
        if self.zc_issue_pinned() > 0 {
            return Ok(true);
        }
        if self.zc_retire_one()? {
            return Ok(true);
        }
        Ok(self.zc_pin_unpinned() > 0)
    }

    /// The sync tail: issue and retire until none of request `id`'s pieces is left.
    fn zc_finish_sync(&mut self, id: u64) -> Result<()> {
        while self.zc_holds_request(id) {
            if !self.zc_step()? {
                return Err(NdmaError::QueueFull { nc: self.ring.nc });
            }
        }
        Ok(())
    }

    /// Does the queue hold a live piece of request `id`?
    fn zc_holds_request(&self, id: u64) -> bool {
        self.inner.zc.as_ref().is_some_and(|zc| {
            zc.queue.live_slots().map(|i| zc.queue.entry(i)).any(|c| c.state != ZcState::Invalid && c.request == id)
        })
    }
}
