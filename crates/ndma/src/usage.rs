//! What a device holds right now, for leak accounting over long runs (`ndma verify`): the descriptor slots,
//! classic contexts and pool chunks the op layer owns. Every query is a snapshot, not synchronisation: other
//! threads may stage, ack, allocate or free right after. Read while nothing else uses the device, a non-zero
//! figure is a leak.

use crate::classic::RingGuard;
use crate::device::NeuronDevice;
use crate::memory::PoolUsage;
use crate::Result;

/// What one H2T ring holds, read under its lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingUsage {
    /// Descriptor slots between the consumer and the producer cursor.
    pub slots_in_use: u32,
    /// Slots the in-use classic contexts and the submitted zero-copy contexts account for: equal to
    /// `slots_in_use` whenever no call is inside the ring.
    pub slots_accounted: u32,
    /// Classic contexts (SYNC, ASYNC1, ASYNC2) holding a transfer: in flight, done but not waited, or aborted.
    pub contexts_in_use: u32,
}

impl RingUsage {
    /// Nothing staged, nothing accounted, no context held.
    pub fn is_idle(&self) -> bool {
        self.slots_in_use == 0 && self.slots_accounted == 0 && self.contexts_in_use == 0
    }
}

impl NeuronDevice {
    /// What NC `nc`'s H2T ring holds now.
    ///
    /// # Errors
    ///
    /// [`crate::NdmaError::InvalidNc`], [`crate::NdmaError::NoH2tRing`].
    pub fn ring_usage(&self, nc: u32) -> Result<RingUsage> {
        let ring = self.ring(nc)?;
        let g = RingGuard::lock(self, ring);
        let (slots_in_use, slots_accounted) = g.slot_accounting();
        let contexts_in_use = g.inner.contexts.iter().filter(|c| c.inuse).count() as u32;
        Ok(RingUsage { slots_in_use, slots_accounted, contexts_in_use })
    }

    /// The chunks this device's pool has handed out and not got back, the device's own memset buffer included.
    pub fn pool_usage(&self) -> PoolUsage {
        self.pool.usage()
    }
}
