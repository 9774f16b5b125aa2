//! An optional timeline of what the engines did (doorbells, executed batches, drains, faults), for
//! `ndma trace`'s Chrome/Perfetto view (DESIGN §5). Off by default; when off it costs one relaxed load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use udma::Direction;

use crate::lock::lock;
use crate::FaultKind;

/// What an engine event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineEventKind {
    /// A doorbell write of `count` on ring `dir` (accepted or not).
    Doorbell {
        /// Which ring.
        dir: Direction,
        /// The count written.
        count: u32,
    },
    /// A batch of descriptor pairs executed (`start..end` spans fetch, copies and barriers).
    Batch {
        /// Descriptor pairs executed.
        descriptors: u32,
        /// Bytes moved.
        bytes: u64,
    },
    /// Posted writes landed (a barrier, a hazard, a reset, idle or a flush).
    Drain,
    /// A fault was recorded.
    Fault(FaultKind),
}

/// One timeline event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineEvent {
    /// Engine id.
    pub engine: u32,
    /// Queue id (`u32::MAX` for engine-wide events such as drains).
    pub qid: u32,
    /// What happened.
    pub kind: EngineEventKind,
    /// When it started.
    pub start: Instant,
    /// When it ended (equal to `start` for instantaneous events).
    pub end: Instant,
}

/// The per-device event log.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    enabled: AtomicBool,
    events: Mutex<Vec<EngineEvent>>,
}

impl Trace {
    pub(crate) fn set_enabled(&self, on: bool) {
        // Relaxed: a switch; events recorded around the change are best-effort by design.
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub(crate) fn enabled(&self) -> bool {
        // Relaxed: see `set_enabled`.
        self.enabled.load(Ordering::Relaxed)
    }

    pub(crate) fn record(&self, e: EngineEvent) {
        if self.enabled() {
            lock(&self.events).push(e);
        }
    }

    pub(crate) fn take(&self) -> Vec<EngineEvent> {
        std::mem::take(&mut *lock(&self.events))
    }
}
