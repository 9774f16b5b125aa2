//! The classic H2T path (spec §2): split a copy into ≤64 KiB descriptor pairs, at most 2031 per batch,
//! append the completion marker, ring RX then TX, poll the marker, ack, restage until done.

mod double_buffer;
pub(crate) mod marker;
mod pipeline;
mod retry;
pub(crate) mod split;
pub(crate) mod wait;

use udma::DmaMemory;

use crate::context::DmaContext;
use crate::device::{mc_pair_to_nc, NeuronDevice};
use crate::memory::MemChunk;
use crate::ring::{H2tRing, RingInner};
use crate::{NdmaError, Result};

pub use pipeline::AsyncPipeline;
pub use retry::MAX_RESET_WINDOW_REPLAYS;

/// How the two cursors of a copy move per chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moves {
    pub smove: bool,
    pub dmove: bool,
}

impl Moves {
    pub const BOTH: Moves = Moves { smove: true, dmove: true };
}

fn checked_end(what: &'static str, addr: u64, size: u64) -> Result<()> {
    addr.checked_add(size).map(|_| ()).ok_or(NdmaError::OutOfRange { what, offset: addr, size, limit: u64::MAX })
}

impl NeuronDevice {
    /// `ndma_memcpy`: copy `size` bytes between raw device-visible addresses (host addresses already carry
    /// `pci_host_base`) on NC `nc`'s H2T ring, synchronously. A copy of 0 bytes moves nothing.
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`], [`NdmaError::OutOfRange`] when an end overflows (nothing staged),
    /// [`NdmaError::Timeout`] / [`NdmaError::RetryExhausted`] when the marker never lands, HAL errors. After
    /// any failure the ring has been re-initialised and the next copy can proceed.
    pub fn memcpy(&self, nc: u32, src: u64, dst: u64, size: u64) -> Result<()> {
        self.offset_move(nc, src, dst, size, Moves::BOTH)
    }

    /// `ndma_memcpy_mc`: copy between memory chunks. NC: the device side's (host→host: the destination's).
    ///
    /// # Errors
    ///
    /// [`NdmaError::OutOfRange`] when a window falls outside its chunk; otherwise as [`NeuronDevice::memcpy`].
    pub fn memcpy_mc(&self, src: &MemChunk, dst: &MemChunk, src_off: u64, dst_off: u64, size: u64) -> Result<()> {
        src.check_range("source chunk", src_off, size)?;
        dst.check_range("destination chunk", dst_off, size)?;
        let nc = mc_pair_to_nc(src, dst);
        self.memcpy(nc, self.mc_to_pa(src) + src_off, self.mc_to_pa(dst) + dst_off, size)
    }

    /// `ndma_memcpy_buf_to_mc`: copy from a host DMA buffer into a chunk, on the chunk's NC (NC 0 for a host
    /// chunk).
    ///
    /// # Errors
    ///
    /// [`NdmaError::OutOfRange`] when a window falls outside the buffer or chunk; otherwise as
    /// [`NeuronDevice::memcpy`].
    pub fn memcpy_buf_to_mc(
        &self,
        buf: &dyn DmaMemory,
        buf_off: u64,
        dst: &MemChunk,
        dst_off: u64,
        size: u64,
    ) -> Result<()> {
        let src = self.buf_pa("source buffer", buf, buf_off, size)?;
        dst.check_range("destination chunk", dst_off, size)?;
        let nc = if dst.is_host() { 0 } else { dst.nc_id() };
        self.memcpy(nc, src, self.mc_to_pa(dst) + dst_off, size)
    }

    /// `ndma_memcpy_buf_from_mc`: copy from a chunk into a host DMA buffer, on the chunk's NC (NC 0 for a
    /// host chunk).
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::memcpy_buf_to_mc`].
    pub fn memcpy_buf_from_mc(
        &self,
        buf: &dyn DmaMemory,
        buf_off: u64,
        src: &MemChunk,
        src_off: u64,
        size: u64,
    ) -> Result<()> {
        let dst = self.buf_pa("destination buffer", buf, buf_off, size)?;
        src.check_range("source chunk", src_off, size)?;
        let nc = if src.is_host() { 0 } else { src.nc_id() };
        self.memcpy(nc, self.mc_to_pa(src) + src_off, dst, size)
    }

    fn buf_pa(&self, what: &'static str, buf: &dyn DmaMemory, off: u64, size: u64) -> Result<u64> {
        match off.checked_add(size) {
            Some(end) if end <= buf.len() as u64 => Ok((buf.phys_addr() | self.dhal.pci_host_base()) + off),
            _ => Err(NdmaError::OutOfRange { what, offset: off, size, limit: buf.len() as u64 }),
        }
    }

    /// `ndma_memcpy_offset_move`, synchronous: stage and wait batch after batch on the SYNC context.
    pub(crate) fn offset_move(&self, nc: u32, src: u64, dst: u64, size: u64, moves: Moves) -> Result<()> {
        let ring = self.ring(nc)?;
        checked_end("source address", src, size)?;
        checked_end("destination address", dst, size)?;
        if size == 0 {
            // The C path would stage a 0-length descriptor, which the engine reads as 64 KiB.
            return Ok(());
        }
        let _span = tracing::debug_span!("memcpy", nc, size, smove = moves.smove, dmove = moves.dmove).entered();
        let mut inner = ring.lock();
        let slot = 0;
        inner.contexts[slot] = self.new_context(src, dst, size, moves);
        let result = self.run_sync(ring, &mut inner, slot);
        inner.contexts[slot].inuse = false;
        if result.is_err() {
            self.recover_ring(ring, &mut inner);
        }
        result
    }

    pub(crate) fn new_context(&self, src: u64, dst: u64, size: u64, moves: Moves) -> DmaContext {
        let arch = self.dhal.arch();
        DmaContext {
            inuse: true,
            src,
            dst,
            size,
            smove: moves.smove,
            dmove: moves.dmove,
            is_d2d: !arch.is_host_addr(src) && !arch.is_host_addr(dst),
            start_time: self.platform.jiffies(),
            offset: 0,
            remaining: size,
            outstanding: 0,
            pending_transfers: 0,
        }
    }

    fn run_sync(&self, ring: &H2tRing, inner: &mut RingInner, slot: usize) -> Result<()> {
        loop {
            split::stage_batch(self.dhal, &*self.bar0, ring, inner, slot)?;
            self.wait_retrying(ring, inner, slot, slot)?;
            let ctx = &mut inner.contexts[slot];
            ctx.offset += ctx.outstanding;
            ctx.remaining -= ctx.outstanding;
            ring.stats.add_bytes(ctx.outstanding);
            if ctx.remaining == 0 {
                ring.stats.add_transfers(1);
                return Ok(());
            }
            ctx.start_time = self.platform.jiffies();
        }
    }

    /// After a failure with the ring lock held: re-initialise the queue so nothing half-staged or hung is
    /// left on it (the C driver leaves the ring as it is, un-acked).
    pub(crate) fn recover_ring(&self, ring: &H2tRing, inner: &mut RingInner) {
        inner.queue.reinit(&*self.bar0);
        ring.stats.add_ring_resets(1);
        tracing::warn!(nc = ring.nc, eng = ring.eng_id, qid = ring.qid, "H2T ring re-initialised after a failed copy");
    }
}
