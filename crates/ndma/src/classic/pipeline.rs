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
pub struct AsyncPipeline<'d> {
    dev: &'d NeuronDevice,
    last: Option<InFlight<'d>>,
}

impl<'d> AsyncPipeline<'d> {
    /// An empty pipeline on `dev`.
    pub fn new(dev: &'d NeuronDevice) -> Self {
        AsyncPipeline { dev, last: None }
    }

    /// Stages `t` (at most one batch) and waits for the previous copy.
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
    pub fn is_idle(&self) -> bool {
        self.last.as_ref().is_none_or(InFlight::is_complete)
    }

    /// Waits for the copy in flight, if any.
    ///
    /// # Errors
    ///
    /// As [`InFlight::wait`].
    pub fn drain(&mut self) -> Result<()> {
        self.last.take().map_or(Ok(()), InFlight::wait)
    }

    /// Drains and consumes the pipeline.
    ///
    /// # Errors
    ///
    /// As [`InFlight::wait`].
    pub fn finish(mut self) -> Result<()> {
        self.drain()
    }
}
