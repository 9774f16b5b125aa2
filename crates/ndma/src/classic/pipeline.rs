//! A pipeline over the async double buffer: submit copies, and the ASYNC1/ASYNC2 toggle, the waits and the
//! final drain happen for you — on success, on error and on drop.

use super::transfer::{InFlight, Transfer};
use crate::device::NeuronDevice;
use crate::Result;

/// A chain of async copies on one device. Each [`AsyncPipeline::submit`] stages its copy and waits for the
/// one before it; [`AsyncPipeline::finish`] (or drop) waits for the last.
///
/// Copies that select different NCs (different rings) are allowed: the chain on the old ring is drained
/// before the first copy on the new one.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::{AsyncPipeline, Transfer};
///
/// // 16 MiB host → device in 1 MiB async copies, each staged while the previous one completes.
/// const MIB: u64 = 1 << 20;
/// let (src, dst) = (dev.alloc_host(16 * MIB, 0)?, dev.alloc_device(16 * MIB, 0)?);
/// for i in 0..16 {
///     src.fill(i * MIB, MIB, i as u8)?;
/// }
/// let mut pipeline = AsyncPipeline::new(&dev);
/// for i in 0..16 {
///     pipeline.submit(&Transfer::new(&src, &dst, MIB).src_offset(i * MIB).dst_offset(i * MIB))?;
/// }
/// pipeline.finish()?; // waits for the last copy (dropping the pipeline would too)
/// let back = dev.alloc_host(16 * MIB, 0)?;
/// dev.memcpy_mc(&dst, &back, 0, 0, 16 * MIB)?;
/// let mut out = vec![0u8; 16 * MIB as usize];
/// back.read(0, &mut out)?;
/// assert!(out.chunks(MIB as usize).enumerate().all(|(i, c)| c.iter().all(|&b| b == i as u8)));
/// assert_eq!(dev.ring_stats(0)?.transfers, 17);
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub struct AsyncPipeline<'d> {
    dev: &'d NeuronDevice,
    last: Option<InFlight<'d>>,
}

impl<'d> AsyncPipeline<'d> {
    /// An empty pipeline on `dev` (example on [`AsyncPipeline`]).
    pub fn new(dev: &'d NeuronDevice) -> Self {
        AsyncPipeline { dev, last: None }
    }

    /// Stages `t` (at most one batch) and waits for the previous copy. Example on [`AsyncPipeline`].
    ///
    /// # Errors
    ///
    /// As [`InFlight::then`]. After an error the chain is empty (both contexts released) and the pipeline can
    /// be reused.
    pub fn submit(&mut self, t: &Transfer) -> Result<()> {
        let next = match self.last.take() {
            Some(prev) => prev.then(t)?,
            None => self.dev.start(t)?,
        };
        self.last = Some(next);
        Ok(())
    }

    /// Has the copy in flight (if any) completed? Non-blocking ([`InFlight::is_complete`]).
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::{AsyncPipeline, Transfer};
    ///
    /// let (src, dst) = (dev.alloc_host(1 << 20, 0)?, dev.alloc_device(1 << 20, 0)?);
    /// let mut pipeline = AsyncPipeline::new(&dev);
    /// assert!(pipeline.is_idle(), "nothing submitted");
    /// pipeline.submit(&Transfer::new(&src, &dst, 1 << 20))?;
    /// while !pipeline.is_idle() {
    ///     std::thread::yield_now(); // other work here
    /// }
    /// pipeline.drain()?; // the pipeline stays usable
    /// pipeline.submit(&Transfer::new(&dst, &src, 1 << 20))?;
    /// pipeline.finish()?;
    /// assert_eq!(dev.ring_slot_accounting(0)?, (0, 0));
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    pub fn is_idle(&self) -> bool {
        self.last.as_ref().is_none_or(InFlight::is_complete)
    }

    /// Waits for the copy in flight, if any (example on [`AsyncPipeline::is_idle`]).
    ///
    /// # Errors
    ///
    /// As [`InFlight::wait`].
    pub fn drain(&mut self) -> Result<()> {
        self.last.take().map_or(Ok(()), InFlight::wait)
    }

    /// Drains and consumes the pipeline (example on [`AsyncPipeline`]).
    ///
    /// # Errors
    ///
    /// As [`InFlight::wait`].
    pub fn finish(mut self) -> Result<()> {
        self.drain()
    }
}
