//! The fabric ordering model (DESIGN §3): writes to HBM and writes to host memory travel different routes.
//!
//! - [`OrderingMode::Strict`]: every write lands in order, when the descriptor executes.
//! - [`OrderingMode::Relaxed`] and [`OrderingMode::Adversarial`]: a copy whose destination is HBM is *posted*
//!   — recorded on the engine's posted list and performed later, in order — while host-destination writes
//!   (the completion marker) land immediately and can overtake them.
//!
//! Posted writes drain (all of them, in order):
//! - before a descriptor whose TX carries DMB or whose RX carries SOW;
//! - right after a descriptor whose TX meta carries WRITE_BARRIER is enqueued (its own write included);
//! - before an immediate write that would observe the difference: a host-destination write over the
//!   *source* of a posted write (write-after-read), or a read of a posted write's *destination*;
//! - on queue reset (`RST_Q`);
//! - Relaxed only: when the engine runs out of work;
//! - on [`crate::EmuDevice::flush_posted_writes`].
//!
//! Adversarial therefore makes a missing barrier deterministically visible: the marker lands, the data
//! does not, until something drains.

use crate::addr_map::AddrMap;
use crate::copy::Copy;

/// How the fabric orders an engine's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrderingMode {
    /// Every write lands in order.
    Strict,
    /// HBM writes are posted; they drain on barriers, hazards, resets and when the engine goes idle.
    #[default]
    Relaxed,
    /// HBM writes are posted and drain only on barriers, hazards, resets and explicit flushes.
    Adversarial,
}

impl OrderingMode {
    /// HBM-destination writes are posted in this mode.
    pub fn posts_hbm_writes(self) -> bool {
        self != OrderingMode::Strict
    }
}

/// An engine's posted (not yet landed) writes, oldest first.
#[derive(Debug, Default)]
pub(crate) struct PostedWrites {
    list: Vec<Copy>,
}

impl PostedWrites {
    /// Appends a write, merging it into the previous one when that is equivalent.
    pub(crate) fn post(&mut self, c: Copy) {
        if let Some(last) = self.list.last_mut() {
            if let Some(m) = last.merged(&c) {
                *last = m;
                return;
            }
        }
        self.list.push(c);
    }

    /// Performs every posted write, in order.
    pub(crate) fn drain(&mut self, map: &AddrMap) {
        for c in self.list.drain(..) {
            c.perform(map);
        }
    }

    /// True if performing `c` now could observe a posted write not having landed: its destination overlaps
    /// a posted source, or its source overlaps a posted destination.
    pub(crate) fn conflicts(&self, c: &Copy) -> bool {
        self.list.iter().any(|p| c.dst.overlaps(c.len, p.src, p.len) || c.src.overlaps(c.len, p.dst, p.len))
    }

    /// Writes waiting (after merging).
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}
