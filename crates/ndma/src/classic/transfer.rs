//! The idiomatic layer over the spec-shaped functions (DESIGN §9): a copy described by one value
//! ([`Transfer`]) instead of positional offsets, and [`InFlight`], a handle that owns an async copy until it is
//! waited for — it cannot be copied, waited twice or forgotten (dropping it waits). Every call lands in the
//! spec-shaped functions; there is no second copy path.
//!
//! ```
//! # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
//! # let (_bed, dev) = doctest::device();
//! use ndma::Transfer;
//!
//! let (src, dst) = (dev.alloc_host(8 << 10, 0)?, dev.alloc_device(8 << 10, 0)?);
//! src.write(0, &[1; 4096])?;
//! src.write(4096, &[2; 4096])?;
//! // Two async copies chained on NC 0's ring: the second is staged before the first is waited for.
//! let first = dev.start(&Transfer::new(&src, &dst, 4096))?;
//! let second = first.then(&Transfer::new(&src, &dst, 4096).src_offset(4096).dst_offset(4096))?;
//! second.wait()?;
//! let back = dev.alloc_host(8 << 10, 0)?;
//! dev.copy(&Transfer::new(&dst, &back, 8 << 10))?; // and a synchronous one
//! let mut out = vec![0u8; 8 << 10];
//! back.read(0, &mut out)?;
//! assert!(out[..4096].iter().all(|&b| b == 1) && out[4096..].iter().all(|&b| b == 2));
//! # Ok::<(), ndma::NdmaError>(())
//! ```

use std::sync::Arc;

use crate::context::CtxHandle;
use crate::device::{mc_pair_to_nc, NeuronDevice};
use crate::memory::MemChunk;
use crate::Result;

/// One copy between two memory chunks: `len` bytes from `src` at `src_offset` to `dst` at `dst_offset`.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use std::sync::Arc;
/// use ndma::{NdmaError, Transfer};
///
/// let (src, dst) = (dev.alloc_device(64 << 10, 1)?, dev.alloc_host(64 << 10, 0)?);
/// let t = Transfer::new(&src, &dst, 4096).src_offset(512).dst_offset(8192);
/// assert_eq!((t.len(), t.src_offset_bytes(), t.dst_offset_bytes()), (4096, 512, 8192));
/// assert!(Arc::ptr_eq(t.src(), &src) && Arc::ptr_eq(t.dst(), &dst) && !t.is_empty());
/// assert_eq!(t.nc(), 1, "device → host runs on the device side's NC");
/// dev.copy(&t)?;
/// // A window outside its chunk is refused when the transfer runs, not when it is described.
/// let too_far = Transfer::new(&src, &dst, 4096).dst_offset(62 << 10);
/// assert!(matches!(dev.copy(&too_far), Err(NdmaError::OutOfRange { what: "destination chunk", .. })));
/// # Ok::<(), NdmaError>(())
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
    /// (`prefetch_addr`, best effort): for a copy to or from user memory that is about to be touched.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// let (src, dst) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
    /// // A platform without user address spaces ignores the hint; the copy runs as without it.
    /// dev.copy(&ndma::Transfer::new(&src, &dst, 4096).prefetch(0x7f00_0000_0000))?;
    /// assert_eq!(dev.ring_stats(0)?.transfers, 1);
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
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

    /// The copy as the double buffer takes it: borrowed, so a call that does not keep the chunks clones none.
    pub(crate) fn as_copy(&self) -> CopyRef<'_> {
        CopyRef {
            src: &self.src,
            dst: &self.dst,
            src_offset: self.src_offset,
            dst_offset: self.dst_offset,
            len: self.len,
            // 0, as the driver's argument, is no prefetch.
            prefetch: self.prefetch.filter(|&addr| addr != 0),
        }
    }
}

/// A copy as [`NeuronDevice::memcpy_mc_async`] and the [`Transfer`] calls hand it to the double buffer:
/// chunks borrowed, windows, and the user range to fault in once it is staged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyRef<'a> {
    pub src: &'a Arc<MemChunk>,
    pub dst: &'a Arc<MemChunk>,
    pub src_offset: u64,
    pub dst_offset: u64,
    pub len: u64,
    pub prefetch: Option<u64>,
}

impl NeuronDevice {
    /// Runs `t` synchronously ([`NeuronDevice::memcpy_mc`], with its prefetch); see [`Transfer`]'s example.
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::memcpy_mc`].
    pub fn copy(&self, t: &Transfer) -> Result<()> {
        self.memcpy_mc_chained(t.as_copy(), CtxHandle::Sync, false).map(|_| ()).map_err(|f| f.error)
    }

    /// Starts `t` asynchronously (at most one batch, [`crate::MAX_BATCH_BYTES`]) as the first copy of a chain
    /// on its ring, and returns the handle that owns it.
    ///
    /// A ring carries one chain at a time (the driver's double buffer has two async contexts): starting a
    /// second chain on a ring whose chain is still in flight — on either context — is refused with
    /// [`crate::NdmaError::ContextInUse`] naming the context in use. (The driver's
    /// [`NeuronDevice::memcpy_mc_async`] lets a start in while the other context is busy; the chain running
    /// there then finds its next context taken.)
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::{NdmaError, Transfer};
    ///
    /// let (src, dst) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
    /// let copy = dev.start(&Transfer::new(&src, &dst, 4096))?;
    /// assert_eq!(dev.start(&Transfer::new(&src, &dst, 4096)).err(), Some(NdmaError::ContextInUse(1)));
    /// copy.wait()?;
    /// // Too large for one batch (2031 × 64 KiB): use `copy`, or split it.
    /// let big = dev.alloc_device(ndma::MAX_BATCH_BYTES + 1, 0)?;
    /// let err = dev.start(&Transfer::new(&big, &big, ndma::MAX_BATCH_BYTES + 1)).err();
    /// assert_eq!(err, Some(NdmaError::AsyncTooLarge { size: ndma::MAX_BATCH_BYTES + 1, max: ndma::MAX_BATCH_BYTES }));
    /// # Ok::<(), NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::memcpy_mc_async`] with [`CtxHandle::None`].
    pub fn start(&self, t: &Transfer) -> Result<InFlight<'_>> {
        let handle = self.memcpy_mc_chained(t.as_copy(), CtxHandle::None, true).map_err(|f| f.error)?;
        Ok(InFlight { dev: self, nc: t.nc(), handle: Some(handle) })
    }
}

/// An async copy in flight on one ring: the handle owns it until it is waited for.
///
/// Not `Copy` and consumed by [`InFlight::wait`] and [`InFlight::then`], so a copy cannot be waited twice or
/// chained from twice; dropping it waits (logging a failure), so it cannot be forgotten on the ring. The
/// context it names holds the copy's memory alive meanwhile.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::{CtxHandle, Transfer};
///
/// let (src, dst) = (dev.alloc_host(1 << 20, 0)?, dev.alloc_device(1 << 20, 0)?);
/// src.fill(0, 1 << 20, 0x42)?;
/// let copy = dev.start(&Transfer::new(&src, &dst, 1 << 20))?;
/// assert_eq!((copy.nc(), copy.handle()), (0, CtxHandle::Async1));
/// drop(src); // the copy holds its memory: nothing is freed under the engine
/// while !copy.is_complete() {
///     std::thread::yield_now();
/// }
/// copy.wait()?; // consumes the handle: it cannot be waited twice
/// let back = dev.alloc_host(1 << 20, 0)?;
/// dev.copy(&Transfer::new(&dst, &back, 1 << 20))?;
/// let mut out = vec![0u8; 1 << 20];
/// back.read(0, &mut out)?;
/// assert!(out.iter().all(|&b| b == 0x42));
/// # Ok::<(), ndma::NdmaError>(())
/// ```
#[must_use = "dropping an in-flight copy waits for it; call `wait` to see its result"]
#[derive(Debug)]
pub struct InFlight<'d> {
    dev: &'d NeuronDevice,
    nc: u32,
    /// `None` once waited.
    handle: Option<CtxHandle>,
}

impl<'d> InFlight<'d> {
    /// The NC whose ring carries the copy (example on [`InFlight`]).
    pub fn nc(&self) -> u32 {
        self.nc
    }

    /// The driver's context handle of the copy (example on [`InFlight`]).
    pub fn handle(&self) -> CtxHandle {
        self.handle.unwrap_or(CtxHandle::None)
    }

    /// Has the copy completed? A non-blocking snapshot ([`NeuronDevice::is_complete`]); [`InFlight::wait`]
    /// still has to run (it then returns at once). Example on [`InFlight`].
    pub fn is_complete(&self) -> bool {
        match self.handle {
            Some(h) => self.dev.is_complete(self.nc, h).unwrap_or(true),
            None => true,
        }
    }

    /// Waits for the copy and releases its context (`ndma_memcpy_mc_wait`); see [`InFlight`]'s example.
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
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::{CtxHandle, NdmaError, Transfer};
    ///
    /// let (src, dst) = (dev.alloc_host(3 << 16, 0)?, dev.alloc_device(3 << 16, 0)?);
    /// let piece = |i: u64| Transfer::new(&src, &dst, 1 << 16).src_offset(i << 16).dst_offset(i << 16);
    /// let mut copy = dev.start(&piece(0))?;
    /// for i in 1..3 {
    ///     copy = copy.then(&piece(i))?; // stage piece i, then wait for piece i − 1
    /// }
    /// assert_eq!(copy.handle(), CtxHandle::Async1);
    /// // A refused next copy: the one in flight is waited for, and the refusal returned.
    /// let outside = Transfer::new(&src, &dst, 1 << 16).dst_offset(3 << 16);
    /// assert!(matches!(copy.then(&outside), Err(NdmaError::OutOfRange { .. })));
    /// assert_eq!(dev.ring_slot_accounting(0)?, (0, 0));
    /// # Ok::<(), NdmaError>(())
    /// ```
    pub fn then(mut self, next: &Transfer) -> Result<InFlight<'d>> {
        let Some(prev) = self.handle else {
            return self.dev.start(next);
        };
        if next.nc() != self.nc {
            let dev = self.dev;
            self.wait()?;
            return dev.start(next);
        }
        let r = self.dev.memcpy_mc_chained(next.as_copy(), prev, true);
        match r {
            Ok(handle) => {
                self.handle = None;
                Ok(InFlight { dev: self.dev, nc: self.nc, handle: Some(handle) })
            }
            // Refused before staging: this copy is still in flight on its context.
            Err(f) if !f.prev_consumed => {
                self.wait()?;
                Err(f.error)
            }
            Err(f) => {
                self.handle = None;
                Err(f.error)
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
