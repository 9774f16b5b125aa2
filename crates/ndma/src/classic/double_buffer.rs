//! The classic async double buffer (spec §3): stage this copy on the next handle's context, then wait on the
//! *previous* one, so staging of copy N+1 overlaps the completion of copy N.

use crate::context::CtxHandle;
use crate::device::{mc_pair_to_nc, NeuronDevice};
use crate::memory::MemChunk;
use crate::ring::{H2tRing, RingInner};
use crate::{NdmaError, Result, MAX_BATCH_BYTES};

use super::{checked_end, split, Moves};

impl NeuronDevice {
    /// `ndma_memcpy_mc_async`: stage a copy of at most one batch on the context after `prev`
    /// ([`CtxHandle::next`]), then wait for and release `prev`'s context. With `prev` = [`CtxHandle::None`]
    /// (the start of a chain) nothing is waited for. Returns the handle of the staged copy, to be passed as
    /// `prev` of the next call or to [`NeuronDevice::memcpy_mc_wait`]. `prefetch_addr`, if non-zero, is a
    /// user range faulted in once after staging (best effort).
    ///
    /// # Errors
    ///
    /// [`NdmaError::AsyncTooLarge`] for more than one batch (2031 × 64 KiB), [`NdmaError::OutOfRange`],
    /// [`NdmaError::ContextNotInUse`] when `prev` has no transfer, [`NdmaError::ContextInUse`] when the next
    /// context still holds one — all before anything is staged — and the wait's errors. On any error both
    /// contexts are released (the chain is over) and the ring is usable.
    #[allow(clippy::too_many_arguments)]
    pub fn memcpy_mc_async(
        &self,
        src: &MemChunk,
        dst: &MemChunk,
        src_off: u64,
        dst_off: u64,
        size: u64,
        prefetch_addr: u64,
        prev: CtxHandle,
    ) -> Result<CtxHandle> {
        src.check_range("source chunk", src_off, size)?;
        dst.check_range("destination chunk", dst_off, size)?;
        let nc = mc_pair_to_nc(src, dst);
        let cur = prev.next();
        let (s, d) = (self.mc_to_pa(src) + src_off, self.mc_to_pa(dst) + dst_off);
        if cur == CtxHandle::Sync {
            self.memcpy(nc, s, d, size)?;
            return Ok(cur);
        }
        self.offset_move_async(nc, s, d, size, prefetch_addr, prev, cur)?;
        Ok(cur)
    }

    /// [`NeuronDevice::memcpy_mc_async`] for callers that speak the driver's integers (−1..=2).
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidHandle`] for a raw handle outside −1..=2, else as `memcpy_mc_async`.
    #[allow(clippy::too_many_arguments)]
    pub fn memcpy_mc_async_raw(
        &self,
        src: &MemChunk,
        dst: &MemChunk,
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
    /// holds no transfer, the wait's errors otherwise (the context is released either way). On an NC whose
    /// H2T ring was never brought up it returns `Ok` at once, as the driver does for non-H2T engines.
    pub fn memcpy_mc_wait(&self, src: &MemChunk, dst: &MemChunk, handle: CtxHandle) -> Result<()> {
        self.wait_handle(mc_pair_to_nc(src, dst), handle)
    }

    /// Wait for and release `handle`'s context on NC `nc`'s ring.
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
        let mut inner = ring.lock();
        if !inner.contexts[slot].inuse {
            return Err(NdmaError::ContextNotInUse(handle.raw()));
        }
        let result = self.wait_and_account(ring, &mut inner, slot, slot);
        inner.contexts[slot].inuse = false;
        if result.is_err() {
            self.recover_ring(ring, &mut inner);
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn offset_move_async(
        &self,
        nc: u32,
        src: u64,
        dst: u64,
        size: u64,
        prefetch_addr: u64,
        prev: CtxHandle,
        cur: CtxHandle,
    ) -> Result<()> {
        let ring = self.ring(nc)?;
        checked_end("source address", src, size)?;
        checked_end("destination address", dst, size)?;
        if size > MAX_BATCH_BYTES {
            return Err(NdmaError::AsyncTooLarge { size, max: MAX_BATCH_BYTES });
        }
        let cur_slot = cur.slot().ok_or(NdmaError::InvalidHandle(cur.raw()))?;
        let _span = tracing::debug_span!("memcpy_async", nc, size, prev = prev.raw(), cur = cur.raw()).entered();
        let mut inner = ring.lock();
        let prev_slot = prev.slot();
        if let Some(p) = prev_slot {
            if !inner.contexts[p].inuse {
                return Err(NdmaError::ContextNotInUse(prev.raw()));
            }
        }
        if inner.contexts[cur_slot].inuse {
            if let Some(p) = prev_slot {
                inner.contexts[p].inuse = false;
            }
            return Err(NdmaError::ContextInUse(cur.raw()));
        }
        inner.contexts[cur_slot] = self.new_context(src, dst, size, Moves::BOTH);
        let result = self.stage_then_wait_prev(ring, &mut inner, prefetch_addr, prev_slot, cur_slot);
        if let Some(p) = prev_slot {
            inner.contexts[p].inuse = false;
        }
        if result.is_err() {
            inner.contexts[cur_slot].inuse = false;
            self.recover_ring(ring, &mut inner);
        }
        result
    }

    fn stage_then_wait_prev(
        &self,
        ring: &H2tRing,
        inner: &mut RingInner,
        prefetch_addr: u64,
        prev_slot: Option<usize>,
        cur_slot: usize,
    ) -> Result<()> {
        if inner.contexts[cur_slot].remaining > 0 {
            split::stage_batch(self.dhal, &*self.bar0, ring, inner, cur_slot)?;
            if prefetch_addr != 0 {
                let size = inner.contexts[cur_slot].size;
                if let Err(why) = self.platform.prefetch_user_pages(prefetch_addr, size) {
                    tracing::info!(addr = prefetch_addr, size, "prefetch of user pages failed: {why}");
                }
            }
        }
        match prev_slot {
            Some(p) => self.wait_and_account(ring, inner, p, cur_slot),
            None => Ok(()),
        }
    }

    /// Wait for context `wait_slot` (a zero-byte context has nothing in flight) and count its bytes.
    fn wait_and_account(&self, ring: &H2tRing, inner: &mut RingInner, wait_slot: usize, staged: usize) -> Result<()> {
        if inner.contexts[wait_slot].remaining == 0 {
            return Ok(());
        }
        self.wait_retrying(ring, inner, wait_slot, staged)?;
        let ctx = &mut inner.contexts[wait_slot];
        ctx.offset += ctx.outstanding;
        ctx.remaining -= ctx.outstanding;
        ring.stats.add_bytes(ctx.outstanding);
        ring.stats.add_transfers(1);
        Ok(())
    }
}
