//! The classic H2T path (spec §2): split a copy into ≤64 KiB descriptor pairs, at most 2031 per batch,
//! append the completion marker, ring RX then TX, poll the marker, ack, restage until done.

mod double_buffer;
mod guard;
pub(crate) mod marker;
mod pipeline;
mod retry;
pub(crate) mod split;
mod transfer;
pub(crate) mod wait;

use udma::DmaMemory;

use crate::context::{DmaContext, Held};
use crate::device::{mc_pair_to_nc, NeuronDevice};
use crate::memory::MemChunk;
use crate::{NdmaError, Result};

pub(crate) use guard::RingGuard;
pub use pipeline::AsyncPipeline;
pub use retry::MAX_RESET_WINDOW_REPLAYS;
pub use transfer::{InFlight, Transfer};

/// The context a synchronous copy runs on (`NEURON_DMA_H2T_CTX_HANDLE_SYNC`).
pub(crate) const SYNC_SLOT: usize = 0;

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
    // The error is built only on failure: `NdmaError` has drop glue, and an eager `ok_or` builds and drops
    // one on every copy (callgrind: ~115 instructions a pipelined 4 KiB copy over the four such checks).
    match addr.checked_add(size) {
        Some(_) => Ok(()),
        None => Err(NdmaError::OutOfRange { what, offset: addr, size, limit: u64::MAX }),
    }
}

impl NeuronDevice {
    /// `ndma_memcpy`: copy `size` bytes between raw device-visible addresses (host addresses already carry
    /// `pci_host_base`) on NC `nc`'s H2T ring, synchronously. A copy of 0 bytes moves nothing.
    ///
    /// # Safety
    ///
    /// The engine reads `[src, src + size)` and writes `[dst, dst + size)` of whatever memory those device
    /// addresses reach, host DRAM included. The caller guarantees that for the duration of the call both ranges
    /// are memory it owns (e.g. chunks it holds a reference to), that nothing else accesses the destination
    /// meanwhile, and that the destination may hold any bytes afterwards. When the call returns — with success
    /// or an error — the engine no longer touches either range (a failure re-initialises the ring).
    ///
    /// # Example
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// let (src, dst) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
    /// src.write(0, &[7; 4096])?;
    /// // Device-visible addresses: the host chunk's carries the arch's `pci_host_base`.
    /// let (src_pa, dst_pa) = (dev.mc_to_pa(&src), dev.mc_to_pa(&dst));
    /// // SAFETY: both ranges lie in chunks this code holds for the whole call, and nothing else touches them.
    /// unsafe { dev.memcpy(0, src_pa + 1024, dst_pa, 1024)? };
    /// let back = dev.alloc_host(1024, 0)?;
    /// dev.memcpy_mc(&dst, &back, 0, 0, 1024)?;
    /// let mut out = [0u8; 1024];
    /// back.read(0, &mut out)?;
    /// assert_eq!(out, [7; 1024]);
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`], [`NdmaError::OutOfRange`] when an end overflows (nothing staged),
    /// [`NdmaError::Timeout`] / [`NdmaError::RetryExhausted`] when the marker never lands, HAL errors. After
    /// any failure the ring has been re-initialised and the next copy can proceed.
    pub unsafe fn memcpy(&self, nc: u32, src: u64, dst: u64, size: u64) -> Result<()> {
        self.offset_move(nc, src, dst, size, Moves::BOTH, None)
    }

    /// `ndma_memcpy_mc`: copy between memory chunks, synchronously. NC: the device side's (host→host: the
    /// destination's). [`NeuronDevice::copy`] does the same from a [`Transfer`].
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::NdmaError;
    ///
    /// let (a, b) = (dev.alloc_host(1 << 20, 0)?, dev.alloc_host(1 << 20, 0)?);
    /// a.fill(0, 1 << 20, 0x5a)?;
    /// b.fill(0, 1 << 20, 0)?;
    /// dev.memcpy_mc(&a, &b, 4096, 8192, 500_000)?; // host → host, between windows of both chunks
    /// let mut out = vec![0u8; 1 << 20];
    /// b.read(0, &mut out)?;
    /// assert!(out[..8192].iter().all(|&x| x == 0), "before the window");
    /// assert!(out[8192..8192 + 500_000].iter().all(|&x| x == 0x5a), "the window");
    /// assert!(out[8192 + 500_000..].iter().all(|&x| x == 0), "after it");
    /// // A window past the end of its chunk is refused before anything moves.
    /// let err = dev.memcpy_mc(&a, &b, 0, 1 << 20, 1).unwrap_err();
    /// assert_eq!(err, NdmaError::OutOfRange { what: "destination chunk", offset: 1 << 20, size: 1, limit: 1 << 20 });
    /// assert_eq!(err.errno(), -22);
    /// # Ok::<(), NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::OutOfRange`] when a window falls outside its chunk, [`NdmaError::ForeignChunk`] for a
    /// device chunk of another device (nothing staged either way); otherwise as [`NeuronDevice::memcpy`].
    pub fn memcpy_mc(&self, src: &MemChunk, dst: &MemChunk, src_off: u64, dst_off: u64, size: u64) -> Result<()> {
        let s = self.chunk_window("source chunk", src, src_off, size)?;
        let d = self.chunk_window("destination chunk", dst, dst_off, size)?;
        let nc = mc_pair_to_nc(src, dst);
        // Both windows lie inside chunks borrowed for the whole call, and the copy is over (or the ring
        // re-initialised) before it returns: the memory stays the transfer's until then.
        self.offset_move(nc, s, d, size, Moves::BOTH, None)
    }

    /// `ndma_memcpy_buf_to_mc`: copy from a host DMA buffer into a chunk, on the chunk's NC (NC 0 for a host
    /// chunk), synchronously.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// let buf = dev.platform().alloc_coherent(4096)?; // any `DmaMemory` the device can reach
    /// buf.write_bytes(0, b"to the device and back")?;
    /// let hbm = dev.alloc_device(4096, 1)?;
    /// dev.memcpy_buf_to_mc(&*buf, 0, &hbm, 100, 22)?; // on NC 1's ring: the chunk's NC
    /// let back = dev.platform().alloc_coherent(4096)?;
    /// dev.memcpy_buf_from_mc(&*back, 0, &hbm, 100, 22)?;
    /// let mut out = [0u8; 22];
    /// back.read_bytes(0, &mut out)?;
    /// assert_eq!(&out, b"to the device and back");
    /// assert_eq!(dev.ring_stats(1)?.transfers, 2);
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::OutOfRange`] when a window falls outside the buffer or chunk, [`NdmaError::ForeignChunk`]
    /// for a chunk this device cannot DMA, or a buffer its platform does not reach at the buffer's address
    /// ([`Platform::virt_to_phys`](crate::Platform::virt_to_phys): another system's memory); otherwise as
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
        let d = self.chunk_window("destination chunk", dst, dst_off, size)?;
        let nc = if dst.is_host() { 0 } else { dst.nc_id() };
        // Borrowed for the whole (synchronous) call, as in `memcpy_mc`.
        self.offset_move(nc, src, d, size, Moves::BOTH, None)
    }

    /// `ndma_memcpy_buf_from_mc`: copy from a chunk into a host DMA buffer, on the chunk's NC (NC 0 for a
    /// host chunk), synchronously (example on [`NeuronDevice::memcpy_buf_to_mc`]).
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
        let s = self.chunk_window("source chunk", src, src_off, size)?;
        let nc = if src.is_host() { 0 } else { src.nc_id() };
        // Borrowed for the whole (synchronous) call, as in `memcpy_mc`.
        self.offset_move(nc, s, dst, size, Moves::BOTH, None)
    }

    /// The device address of `size` bytes at `off` in `buf`: its host PA as the platform translates the
    /// buffer's CPU address (`virt_to_phys | pci_host_base`), refused when the platform's devices do not reach
    /// it there — another platform's memory, whose own PA names unrelated memory here.
    fn buf_pa(&self, what: &'static str, buf: &dyn DmaMemory, off: u64, size: u64) -> Result<u64> {
        match off.checked_add(size) {
            Some(end) if end <= buf.len() as u64 => {}
            _ => return Err(NdmaError::OutOfRange { what, offset: off, size, limit: buf.len() as u64 }),
        }
        match self.platform.virt_to_phys(buf.as_ptr(), buf.len()) {
            Some(pa) if pa == buf.phys_addr() => Ok((pa | self.dhal.pci_host_base()) + off),
            _ => Err(NdmaError::ForeignChunk { what }),
        }
    }

    /// `ndma_memcpy_offset_move`, synchronous: stage and wait batch after batch on the SYNC context.
    ///
    /// The caller guarantees what [`NeuronDevice::memcpy`]'s safety section asks (it is safe only because it
    /// is crate-internal and every caller passes windows of memory it borrows for the call).
    pub(crate) fn offset_move(
        &self,
        nc: u32,
        src: u64,
        dst: u64,
        size: u64,
        moves: Moves,
        prefetch: Option<u64>,
    ) -> Result<()> {
        let ring = self.ring(nc)?;
        checked_end("source address", src, size)?;
        checked_end("destination address", dst, size)?;
        if size == 0 {
            // The C path would stage a 0-length descriptor, which the engine reads as 64 KiB.
            return Ok(());
        }
        let _span = tracing::debug_span!("memcpy", nc, size, smove = moves.smove, dmove = moves.dmove).entered();
        let mut g = RingGuard::lock(self, ring);
        g.begin(SYNC_SLOT, self.new_context(src, dst, size, moves, prefetch, Held::default()));
        let result = Self::run_sync(&mut g);
        if result.is_err() {
            g.recover(&[SYNC_SLOT]);
        }
        g.release(SYNC_SLOT);
        result
    }

    pub(crate) fn new_context(
        &self,
        src: u64,
        dst: u64,
        size: u64,
        moves: Moves,
        prefetch: Option<u64>,
        held: Held,
    ) -> DmaContext {
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
            remaining: size,
            prefetch,
            held,
            ..DmaContext::default()
        }
    }

    /// Stage, wait, restage until the SYNC context's transfer is done; the first batch is followed by the
    /// prefetch (after staging, before waiting, as the driver does).
    fn run_sync(g: &mut RingGuard<'_>) -> Result<()> {
        g.stage(SYNC_SLOT)?;
        g.prefetch(SYNC_SLOT);
        loop {
            g.wait(SYNC_SLOT, SYNC_SLOT)?;
            if g.ctx(SYNC_SLOT).remaining == 0 {
                return Ok(());
            }
            g.restart_clock(SYNC_SLOT);
            g.stage(SYNC_SLOT)?;
        }
    }
}
