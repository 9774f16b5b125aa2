//! A safe pipeline over the async double buffer: issue copies, and the ASYNC1/ASYNC2 toggle, the waits and
//! the final drain happen for you — on success, on error and on drop.

use crate::context::CtxHandle;
use crate::device::{mc_pair_to_nc, NeuronDevice};
use crate::memory::MemChunk;
use crate::Result;

/// A chain of async copies on one device. Each [`AsyncPipeline::copy`] stages its copy and waits for the
/// one before it; [`AsyncPipeline::finish`] (or drop) waits for the last.
///
/// Copies that select different NCs (different rings) are allowed: the chain on the old ring is drained
/// before the first copy on the new one.
pub struct AsyncPipeline<'d> {
    dev: &'d NeuronDevice,
    /// The ring and handle of the copy in flight, if any.
    last: Option<(u32, CtxHandle)>,
}

impl<'d> AsyncPipeline<'d> {
    /// An empty pipeline on `dev`.
    pub fn new(dev: &'d NeuronDevice) -> Self {
        AsyncPipeline { dev, last: None }
    }

    /// Stages `size` bytes (at most one batch) from `src` to `dst` and waits for the previous copy.
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::memcpy_mc_async`]. After an error the chain is empty (both contexts released) and
    /// the pipeline can be reused.
    pub fn copy(&mut self, src: &MemChunk, dst: &MemChunk, src_off: u64, dst_off: u64, size: u64) -> Result<()> {
        let nc = mc_pair_to_nc(src, dst);
        let prev = match self.last {
            Some((last_nc, handle)) if last_nc == nc => handle,
            Some(_) => {
                self.drain()?;
                CtxHandle::None
            }
            None => CtxHandle::None,
        };
        self.last = None;
        let handle = self.dev.memcpy_mc_async(src, dst, src_off, dst_off, size, 0, prev)?;
        self.last = Some((nc, handle));
        Ok(())
    }

    /// Waits for the copy in flight, if any.
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::memcpy_mc_wait`].
    pub fn drain(&mut self) -> Result<()> {
        match self.last.take() {
            Some((nc, handle)) => self.dev.wait_handle(nc, handle),
            None => Ok(()),
        }
    }

    /// Drains and consumes the pipeline.
    ///
    /// # Errors
    ///
    /// As [`NeuronDevice::memcpy_mc_wait`].
    pub fn finish(mut self) -> Result<()> {
        self.drain()
    }
}

impl Drop for AsyncPipeline<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.drain() {
            tracing::error!("async pipeline dropped with a failed copy in flight: {e}");
        }
    }
}
