//! The classic async double buffer (spec §3): stage this copy on the next handle's context, then wait on the
//! *previous* one, so staging of copy N+1 overlaps the completion of copy N.

use std::sync::Arc;

use super::transfer::CopyRef;
use super::{checked_end, Moves, RingGuard};
use crate::context::{CtxHandle, Held};
use crate::device::{mc_pair_to_nc, NeuronDevice};
use crate::memory::MemChunk;
use crate::{NdmaError, Result, MAX_BATCH_BYTES};

impl NeuronDevice {
    /// `ndma_memcpy_mc_async`: stage a copy of at most one batch on the context after `prev`
    /// ([`CtxHandle::next`]), then wait for and release `prev`'s context. With `prev` = [`CtxHandle::None`]
    /// (the start of a chain) nothing is waited for. Returns the handle of the staged copy, to be passed as
    /// `prev` of the next call or to [`NeuronDevice::memcpy_mc_wait`]. `prefetch_addr`, if non-zero, is a
    /// user range faulted in once after staging (best effort). With `prev` = [`CtxHandle::Sync`] the copy is
    /// synchronous (any size), prefetch included, and the SYNC handle comes back.
    ///
    /// The staged context holds a reference on both chunks until it is waited for (or aborted): dropping the
    /// caller's references meanwhile cannot free memory the engine still uses.
    ///
    /// The idiomatic layer over it — [`NeuronDevice::start`], [`InFlight`](crate::InFlight),
    /// [`AsyncPipeline`](crate::AsyncPipeline) — does the handle bookkeeping for you.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::{CtxHandle, NdmaError};
    ///
    /// // Four 256 KiB pieces of one buffer, host → device: stage piece i, then wait for piece i − 1.
    /// let (src, dst) = (dev.alloc_host(1 << 20, 0)?, dev.alloc_device(1 << 20, 0)?);
    /// src.fill(0, 1 << 20, 0xc3)?;
    /// let mut handle = CtxHandle::None; // the start of a chain: nothing to wait for
    /// for i in 0..4 {
    ///     handle = dev.memcpy_mc_async(&src, &dst, i << 18, i << 18, 1 << 18, 0, handle)?;
    ///     assert_eq!(handle, if i % 2 == 0 { CtxHandle::Async1 } else { CtxHandle::Async2 });
    /// }
    /// dev.memcpy_mc_wait(&src, &dst, handle)?; // the last one
    /// let back = dev.alloc_host(1 << 20, 0)?;
    /// dev.memcpy_mc(&dst, &back, 0, 0, 1 << 20)?;
    /// let mut out = vec![0u8; 1 << 20];
    /// back.read(0, &mut out)?;
    /// assert!(out.iter().all(|&b| b == 0xc3));
    /// // Waiting twice is refused: the context was released.
    /// assert_eq!(dev.memcpy_mc_wait(&src, &dst, handle), Err(NdmaError::ContextNotInUse(2)));
    /// # Ok::<(), NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::AsyncTooLarge`] for more than one batch (2031 × 64 KiB), [`NdmaError::OutOfRange`],
    /// [`NdmaError::ForeignChunk`], [`NdmaError::ContextNotInUse`] when `prev` has no transfer,
    /// [`NdmaError::ContextInUse`] (`-EBUSY`) when the next context still holds one — all before anything is
    /// staged or released — [`NdmaError::Aborted`] when `prev` was abandoned (a ring re-initialisation could
    /// not re-stage it: nothing staged, `prev` released; or it was re-initialised while this call made room for
    /// its copy by retiring zero-copy pieces, one of which failed, and `prev` reads what it writes: both
    /// released), and the wait's errors (both contexts released, the ring re-initialised and usable).
    #[allow(clippy::too_many_arguments)]
    pub fn memcpy_mc_async(
        &self,
        src: &Arc<MemChunk>,
        dst: &Arc<MemChunk>,
        src_off: u64,
        dst_off: u64,
        size: u64,
        prefetch_addr: u64,
        prev: CtxHandle,
    ) -> Result<CtxHandle> {
        let prefetch = (prefetch_addr != 0).then_some(prefetch_addr);
        let t = CopyRef { src, dst, src_offset: src_off, dst_offset: dst_off, len: size, prefetch };
        self.memcpy_mc_chained(t, prev, false).map_err(|f| f.error)
    }

    /// [`NeuronDevice::memcpy_mc_async`] of copy `t`, telling on failure whether `prev` was consumed: decided
    /// under the ring lock, where it is true, rather than by looking at the context again afterwards, when
    /// another chain may have taken it. A staged context holds `t`'s chunks. `own_ring`: a copy that starts a
    /// chain ([`CtxHandle::None`]) is refused while the ring's other async context is in use too — a chain
    /// owns the ring's double buffer ([`NeuronDevice::start`]); the driver's API lets it in.
    pub(crate) fn memcpy_mc_chained(
        &self,
        t: CopyRef<'_>,
        prev: CtxHandle,
        own_ring: bool,
    ) -> std::result::Result<CtxHandle, ChainFailure> {
        let (size, prefetch) = (t.len, t.prefetch);
        let s = self.chunk_window("source chunk", t.src, t.src_offset, size).map_err(ChainFailure::refused)?;
        let d = self.chunk_window("destination chunk", t.dst, t.dst_offset, size).map_err(ChainFailure::refused)?;
        let nc = mc_pair_to_nc(t.src, t.dst);
        let cur = prev.next();
        if cur == CtxHandle::Sync {
            // The chunks are borrowed for the whole synchronous call.
            self.offset_move(nc, s, d, size, Moves::BOTH, prefetch).map_err(ChainFailure::consumed)?;
            return Ok(cur);
        }
        let held = [Some(Arc::clone(t.src)), Some(Arc::clone(t.dst))];
        self.offset_move_async(nc, s, d, size, prefetch, held, prev, cur, own_ring)?;
        Ok(cur)
    }

    /// [`NeuronDevice::memcpy_mc_async`] for callers that speak the driver's integers (−1..=2).
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::{CtxHandle, NdmaError};
    ///
    /// let (src, dst) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
    /// let h = dev.memcpy_mc_async_raw(&src, &dst, 0, 0, 4096, 0, -1)?; // -1: NONE
    /// assert_eq!(h, 1);
    /// dev.memcpy_mc_wait(&src, &dst, CtxHandle::try_from(h)?)?;
    /// assert_eq!(dev.memcpy_mc_async_raw(&src, &dst, 0, 0, 4096, 0, 7), Err(NdmaError::InvalidHandle(7)));
    /// # Ok::<(), NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidHandle`] for a raw handle outside −1..=2, else as `memcpy_mc_async`.
    #[allow(clippy::too_many_arguments)]
    pub fn memcpy_mc_async_raw(
        &self,
        src: &Arc<MemChunk>,
        dst: &Arc<MemChunk>,
        src_off: u64,
        dst_off: u64,
        size: u64,
        prefetch_addr: u64,
        prev: i32,
    ) -> Result<i32> {
        let prev = CtxHandle::try_from(prev)?;
        self.memcpy_mc_async(src, dst, src_off, dst_off, size, prefetch_addr, prev).map(CtxHandle::raw)
    }

    /// `ndma_memcpy_mc_wait`: wait for (synchronously) and release the context of `handle` on the ring the
    /// chunk pair selects.
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidHandle`] for [`CtxHandle::None`], [`NdmaError::ContextNotInUse`] when the context
    /// holds no transfer, [`NdmaError::Aborted`] when it was abandoned (a ring re-initialisation after another
    /// transfer's failure re-stages it; only a failed re-stage abandons it), the wait's errors
    /// otherwise (the context is released either way). On an NC whose H2T ring was never brought up it returns
    /// `Ok` at once, as the driver does for non-H2T engines. Example on [`NeuronDevice::memcpy_mc_async`].
    pub fn memcpy_mc_wait(&self, src: &MemChunk, dst: &MemChunk, handle: CtxHandle) -> Result<()> {
        self.wait_handle(mc_pair_to_nc(src, dst), handle)
    }

    /// Wait for and release `handle`'s context on NC `nc`'s ring: [`NeuronDevice::memcpy_mc_wait`] for a
    /// caller that knows the NC rather than the chunk pair.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::{mc_pair_to_nc, CtxHandle, NdmaError};
    ///
    /// let (src, dst) = (dev.alloc_device(4096, 1)?, dev.alloc_host(4096, 0)?);
    /// let h = dev.memcpy_mc_async(&src, &dst, 0, 0, 4096, 0, CtxHandle::None)?;
    /// let nc = mc_pair_to_nc(&src, &dst); // the device side's: 1
    /// dev.wait_handle(nc, h)?;
    /// assert_eq!(dev.wait_handle(nc, CtxHandle::None), Err(NdmaError::InvalidHandle(-1)));
    /// # Ok::<(), NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::memcpy_mc_wait`], plus [`NdmaError::InvalidNc`].
    pub fn wait_handle(&self, nc: u32, handle: CtxHandle) -> Result<()> {
        // The driver's non-H2T path: a copy there was never left in flight, so the wait returns at once.
        let Some(ring) = self.h2t_ring(nc)? else {
            return Ok(());
        };
        let slot = handle.slot().ok_or(NdmaError::InvalidHandle(handle.raw()))?;
        let mut g = RingGuard::lock(self, ring);
        if !g.ctx(slot).inuse {
            return Err(NdmaError::ContextNotInUse(handle.raw()));
        }
        if g.ctx(slot).aborted {
            return g.finish(slot, handle);
        }
        let result = g.wait(slot, slot);
        if result.is_err() {
            g.recover(&[slot]);
        }
        g.release(slot);
        result
    }

    /// Has `handle`'s transfer on NC `nc` completed? A non-blocking snapshot: true once its completion marker
    /// is visible (or it was aborted, or it has nothing in flight); it does not ack or release anything —
    /// [`NeuronDevice::wait_handle`] does, at once, afterwards. False while the ring lock is held elsewhere and
    /// the marker has not landed yet.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::CtxHandle;
    ///
    /// let (src, dst) = (dev.alloc_host(1 << 20, 0)?, dev.alloc_device(1 << 20, 0)?);
    /// let h = dev.memcpy_mc_async(&src, &dst, 0, 0, 1 << 20, 0, CtxHandle::None)?;
    /// while !dev.is_complete(0, h)? {
    ///     std::thread::yield_now(); // or do other work: nothing blocks
    /// }
    /// dev.wait_handle(0, h)?; // still required: it acks the ring and releases the context
    /// assert_eq!(dev.ring_slot_accounting(0)?, (0, 0));
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`], [`NdmaError::InvalidHandle`] for [`CtxHandle::None`].
    pub fn is_complete(&self, nc: u32, handle: CtxHandle) -> Result<bool> {
        let Some(ring) = self.h2t_ring(nc)? else {
            return Ok(true);
        };
        let slot = handle.slot().ok_or(NdmaError::InvalidHandle(handle.raw()))?;
        if super::wait::marker_visible(ring, slot) {
            return Ok(true);
        }
        Ok(RingGuard::try_lock(self, ring).is_some_and(|g| g.marker_seen(slot)))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn offset_move_async(
        &self,
        nc: u32,
        src: u64,
        dst: u64,
        size: u64,
        prefetch: Option<u64>,
        held: Held,
        prev: CtxHandle,
        cur: CtxHandle,
        own_ring: bool,
    ) -> std::result::Result<(), ChainFailure> {
        let refused = ChainFailure::refused;
        let ring = self.ring(nc).map_err(refused)?;
        checked_end("source address", src, size).map_err(refused)?;
        checked_end("destination address", dst, size).map_err(refused)?;
        if size > MAX_BATCH_BYTES {
            return Err(refused(NdmaError::AsyncTooLarge { size, max: MAX_BATCH_BYTES }));
        }
        let Some(cur_slot) = cur.slot() else {
            return Err(refused(NdmaError::InvalidHandle(cur.raw())));
        };
        let _span = tracing::debug_span!("memcpy_async", nc, size, prev = prev.raw(), cur = cur.raw()).entered();
        let mut g = RingGuard::lock(self, ring);
        let prev_slot = prev.slot();
        // Refusals leave every context as it was: in particular `prev` stays in flight, still accounted for.
        if let Some(p) = prev_slot {
            if !g.ctx(p).inuse {
                // Nothing of `prev` to keep: it holds no transfer.
                return Err(ChainFailure::consumed(NdmaError::ContextNotInUse(prev.raw())));
            }
        }
        if g.ctx(cur_slot).inuse {
            return Err(refused(NdmaError::ContextInUse(cur.raw())));
        }
        // A chain's start while another chain runs on the ring's other context: refused here, or that chain's
        // next copy would find this one in the context it needs.
        let other = cur.next();
        if own_ring && prev == CtxHandle::None && other.slot().is_some_and(|o| g.ctx(o).inuse) {
            return Err(refused(NdmaError::ContextInUse(other.raw())));
        }
        if let Some(p) = prev_slot.filter(|&p| g.ctx(p).aborted) {
            return g.finish(p, prev).map_err(ChainFailure::consumed);
        }
        g.begin(cur_slot, self.new_context(src, dst, size, Moves::BOTH, prefetch, held));
        let result = Self::stage_then_wait_prev(&mut g, prev_slot, cur_slot);
        if result.is_err() {
            // The call fails for both: `cur` is not handed out, and `prev` is consumed by the call.
            let failed: Vec<usize> = std::iter::once(cur_slot).chain(prev_slot).collect();
            g.recover(&failed);
            g.release(cur_slot);
        }
        if let Some(p) = prev_slot {
            g.release(p);
        }
        result.map_err(ChainFailure::consumed)
    }

    fn stage_then_wait_prev(g: &mut RingGuard<'_>, prev_slot: Option<usize>, cur_slot: usize) -> Result<()> {
        if g.ctx(cur_slot).remaining > 0 {
            g.stage(cur_slot)?;
            g.prefetch(cur_slot);
        }
        match prev_slot {
            Some(p) => g.wait(p, cur_slot),
            None => Ok(()),
        }
    }
}

/// A failed double-buffer call, and whether it consumed its `prev` handle's copy (waited for and released it,
/// or found it aborted). A refusal before anything was staged leaves `prev` in flight, its caller's still.
#[derive(Debug)]
pub(crate) struct ChainFailure {
    pub error: NdmaError,
    pub prev_consumed: bool,
}

impl ChainFailure {
    /// Refused before anything was staged: `prev` is untouched.
    fn refused(error: NdmaError) -> ChainFailure {
        ChainFailure { error, prev_consumed: false }
    }

    /// Failed after `prev` was taken over by the call (or it held nothing).
    fn consumed(error: NdmaError) -> ChainFailure {
        ChainFailure { error, prev_consumed: true }
    }
}
