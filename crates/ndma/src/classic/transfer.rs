//! The idiomatic layer over the spec-shaped functions (DESIGN §9): a copy described by one value
//! ([`Transfer`]) instead of positional offsets, and [`InFlight`], a handle that owns an async copy until it is
//! waited for — it cannot be copied, waited twice or forgotten (dropping it waits). Every call lands in the
//! spec-shaped functions; there is no second copy path.

use std::sync::Arc;

use crate::context::CtxHandle;
use crate::device::{mc_pair_to_nc, NeuronDevice};
use crate::memory::MemChunk;
use crate::Result;

/// One copy between two memory chunks: `len` bytes from `src` at `src_offset` to `dst` at `dst_offset`.
///
/// ```
/// # use std::sync::Arc;
/// # fn demo(src: &Arc<ndma::MemChunk>, dst: &Arc<ndma::MemChunk>) {
/// let t = ndma::Transfer::new(src, dst, 4096).src_offset(512).dst_offset(8192);
/// assert_eq!((t.len(), t.src_offset_bytes(), t.dst_offset_bytes()), (4096, 512, 8192));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Transfer {
    src: Arc<MemChunk>,
    src_offset: u64,
    dst: Arc<MemChunk>,
    dst_offset: u64,
    len: u64,
    prefetch: Option<u64>,
}

impl Transfer {
    /// A copy of `len` bytes from the start of `src` to the start of `dst`.
    pub fn new(src: &Arc<MemChunk>, dst: &Arc<MemChunk>, len: u64) -> Transfer {
        Transfer { src: Arc::clone(src), src_offset: 0, dst: Arc::clone(dst), dst_offset: 0, len, prefetch: None }
    }

    /// Reads the source from byte `offset` of its chunk.
    #[must_use]
    pub fn src_offset(mut self, offset: u64) -> Transfer {
        self.src_offset = offset;
        self
    }

    /// Writes the destination from byte `offset` of its chunk.
    #[must_use]
    pub fn dst_offset(mut self, offset: u64) -> Transfer {
        self.dst_offset = offset;
        self
    }

    /// Faults in the user range at `user_addr` (of `len` bytes) once the first batch is staged
    /// (`prefetch_addr`, best effort).
    #[must_use]
    pub fn prefetch(mut self, user_addr: u64) -> Transfer {
        self.prefetch = Some(user_addr);
        self
    }

    /// Bytes copied.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a copy of no bytes (it moves nothing).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset in the source chunk.
    pub fn src_offset_bytes(&self) -> u64 {
        self.src_offset
    }

    /// Offset in the destination chunk.
    pub fn dst_offset_bytes(&self) -> u64 {
        self.dst_offset
    }

    /// The source chunk.
    pub fn src(&self) -> &Arc<MemChunk> {
        &self.src
    }

    /// The destination chunk.
    pub fn dst(&self) -> &Arc<MemChunk> {
        &self.dst
    }

    /// The NC whose ring carries the copy (`ndma_mc_pair_to_nc`).
    pub fn nc(&self) -> u32 {
        mc_pair_to_nc(&self.src, &self.dst)
    }

    fn prefetch_addr(&self) -> u64 {
        self.prefetch.unwrap_or(0)
    }
}

impl NeuronDevice {
    /// Runs `t` synchronously ([`NeuronDevice::memcpy_mc`], with its prefetch).
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::memcpy_mc`].
    pub fn copy(&self, t: &Transfer) -> Result<()> {
        self.memcpy_mc_async(&t.src, &t.dst, t.src_offset, t.dst_offset, t.len, t.prefetch_addr(), CtxHandle::Sync)
            .map(|_| ())
    }

    /// Starts `t` asynchronously (at most one batch, [`crate::MAX_BATCH_BYTES`]) as the first copy of a chain
    /// on its ring, and returns the handle that owns it.
    ///
    /// A ring carries one chain at a time (the driver's double buffer has two async contexts): starting a
    /// second chain on a ring whose chain is still in flight is refused with [`crate::NdmaError::ContextInUse`].
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::memcpy_mc_async`] with [`CtxHandle::None`].
    pub fn start(&self, t: &Transfer) -> Result<InFlight<'_>> {
        let handle = self.memcpy_mc_async(
            &t.src,
            &t.dst,
            t.src_offset,
            t.dst_offset,
            t.len,
            t.prefetch_addr(),
            CtxHandle::None,
        )?;
        Ok(InFlight { dev: self, nc: t.nc(), handle: Some(handle) })
    }
}

/// An async copy in flight on one ring: the handle owns it until it is waited for.
///
/// Not `Copy` and consumed by [`InFlight::wait`] and [`InFlight::then`], so a copy cannot be waited twice or
/// chained from twice; dropping it waits (logging a failure), so it cannot be forgotten on the ring. The
/// context it names holds the copy's memory alive meanwhile.
#[must_use = "dropping an in-flight copy waits for it; call `wait` to see its result"]
#[derive(Debug)]
pub struct InFlight<'d> {
    dev: &'d NeuronDevice,
    nc: u32,
    /// `None` once waited.
    handle: Option<CtxHandle>,
}

impl<'d> InFlight<'d> {
    /// The NC whose ring carries the copy.
    pub fn nc(&self) -> u32 {
        self.nc
    }

    /// The driver's context handle of the copy.
    pub fn handle(&self) -> CtxHandle {
        self.handle.unwrap_or(CtxHandle::None)
    }

    /// Has the copy completed? A non-blocking snapshot ([`NeuronDevice::is_complete`]); [`InFlight::wait`]
    /// still has to run (it then returns at once).
    pub fn is_complete(&self) -> bool {
        match self.handle {
            Some(h) => self.dev.is_complete(self.nc, h).unwrap_or(true),
            None => true,
        }
    }

    /// Waits for the copy and releases its context (`ndma_memcpy_mc_wait`).
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::wait_handle`].
    pub fn wait(mut self) -> Result<()> {
        match self.handle.take() {
            Some(h) => self.dev.wait_handle(self.nc, h),
            None => Ok(()),
        }
    }

    /// Stages `next` and then waits for this copy (the double buffer: staging of `next` overlaps this copy's
    /// completion). If `next` uses another ring, this copy is waited for first and `next` starts a new chain.
    ///
    /// # Errors
    ///
    /// When `next` is refused before anything is staged (a window outside its chunk, more than one batch, a
    /// busy context), this copy is waited for and the refusal returned — or this copy's own failure, if it
    /// failed. Otherwise as [`NeuronDevice::memcpy_mc_async`]: after an error, both copies are over.
    pub fn then(mut self, next: &Transfer) -> Result<InFlight<'d>> {
        let Some(prev) = self.handle else {
            return self.dev.start(next);
        };
        if next.nc() != self.nc {
            let dev = self.dev;
            self.wait()?;
            return dev.start(next);
        }
        let r = self.dev.memcpy_mc_async(
            &next.src,
            &next.dst,
            next.src_offset,
            next.dst_offset,
            next.len,
            next.prefetch_addr(),
            prev,
        );
        match r {
            Ok(handle) => {
                self.handle = None;
                Ok(InFlight { dev: self.dev, nc: self.nc, handle: Some(handle) })
            }
            // Refused before staging: this copy is still in flight on its context.
            Err(e) if self.dev.is_in_use(self.nc, prev) => {
                self.wait()?;
                Err(e)
            }
            Err(e) => {
                self.handle = None;
                Err(e)
            }
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            if let Err(e) = self.dev.wait_handle(self.nc, h) {
                tracing::error!(nc = self.nc, handle = h.raw(), "in-flight copy dropped and waited for: {e}");
            }
        }
    }
}
