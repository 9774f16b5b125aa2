//! A Neuron device as the op layer sees it: its DHAL, BAR0, H2T rings per NC, memory pool, memset buffer and
//! attached processes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use udma::Mmio;

use crate::memory::{HostDomain, MemChunk, MemPool};
use crate::ring::H2tRing;
use crate::stats::StatsSnapshot;
use crate::system::Registry;
use crate::zerocopy::pin::Pinned;
use crate::zerocopy::CompletionThread;
use crate::{Dhal, NdmaError, Platform, Result};

/// `MEMSET_HOST_BUF_SIZE`: the host fill buffer memset copies from (= `MAX_DMA_DESC_SIZE`); see
/// [`NeuronDevice::memset`].
pub const MEMSET_HOST_BUF_SIZE: u64 = udma::MAX_DMA_DESC_SIZE as u64;

/// What a back end provides for one device.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (model, platform) = doctest::model(udma::Arch::V2, 1); // a device model and its platform
/// use std::sync::Arc;
///
/// use ndma::{DeviceHw, NdmaError, System};
/// use ndma_emu::DeviceClaim;
/// use udma::Arch;
///
/// let emu = &model.devices()[0];
/// let hw = DeviceHw {
///     arch: Arch::V2,
///     bar0: Arc::new(DeviceClaim::bind(emu).expect("no other op layer holds the device")),
///     hbm_base: emu.hbm().base(),
///     hbm_size: emu.hbm().size(),
///     resets: None,   // no NeuronCore reset model: the V2 reset-window retry never fires
///     nc_map: 1 << 0, // bring up NC 0's H2T ring only (`ALL_NCS`: every NC)
/// };
/// let system = System::new(Arch::V2, platform, vec![hw])?;
/// let dev = system.device(0).unwrap();
/// assert_eq!(dev.h2t_queue(0)?, (32, 0));
/// assert_eq!(dev.h2t_queue(1), Err(NdmaError::NoH2tRing { nc: 1 }));
/// # Ok::<(), NdmaError>(())
/// ```
#[derive(Clone)]
pub struct DeviceHw {
    /// The generation the hardware reports (its PCI device id); [`crate::System::new`] refuses a device of
    /// another generation than the system's.
    pub arch: udma::Arch,
    /// The device's BAR0.
    pub bar0: Arc<dyn Mmio>,
    /// First HBM physical address.
    pub hbm_base: u64,
    /// HBM bytes.
    pub hbm_size: u64,
    /// NeuronCore reset timestamps, if the back end models resets.
    pub resets: Option<Arc<dyn ResetClock>>,
    /// Bit n set: bring NC n's H2T ring up (`ndmar_init_nc`). NCs left out have no H2T ring: copies on them
    /// fail and waits on them return at once, as on the driver's non-H2T path.
    pub nc_map: u64,
}

/// An NC map with every NeuronCore brought up ([`DeviceHw::nc_map`]).
pub const ALL_NCS: u64 = u64::MAX;

/// The device's NeuronCore reset timestamps (`nr_op_in_reset_wnd`'s inputs, FACTS §4). On V2 a marker wait
/// that times out is retried (the ring re-initialised, the batch replayed) only when its copy started inside a
/// reset window: while a reset is in progress (end ≤ start, which includes "never reset") or at or before the
/// latest reset's end.
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (model, platform) = doctest::model(udma::Arch::V2, 1);
/// use std::sync::{Arc, Mutex};
/// use ndma::{DeviceHw, ResetClock, System, ALL_NCS};
///
/// /// Reset timestamps the back end records as it resets NeuronCores, in jiffies.
/// #[derive(Default)]
/// struct Resets(Mutex<Vec<(u64, u64)>>);
///
/// impl ResetClock for Resets {
///     fn reset_times(&self, nc: u32) -> (u64, u64) {
///         self.0.lock().unwrap()[nc as usize]
///     }
/// }
///
/// let resets = Arc::new(Resets::default());
/// // NC 0 was reset from jiffy 10 to 20; NC 1 never was.
/// *resets.0.lock().unwrap() = vec![(10, 20), (0, 0)];
/// let emu = &model.devices()[0];
/// let hw = DeviceHw { resets: Some(resets), nc_map: ALL_NCS, ..ndma_emu::device_hw(emu).expect("free") };
/// let system = System::new(udma::Arch::V2, platform, vec![hw])?;
/// let dev = system.device(0).unwrap();
/// let (src, dst) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
/// dev.memcpy_mc(&src, &dst, 0, 0, 4096)?; // the clock is asked only after a timeout
/// assert_eq!(dev.ring_stats(0)?.retries, 0);
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub trait ResetClock: Send + Sync {
    /// `(reset_start_time, reset_end_time)` in jiffies of the latest reset touching NC `nc`.
    fn reset_times(&self, nc: u32) -> (u64, u64);
}

/// One Neuron device: its H2T rings (one per NeuronCore), memory pool and DMA operations. Devices are brought
/// up by [`System::new`](crate::System::new).
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::NdmaError;
///
/// assert_eq!((dev.index(), dev.dhal().arch(), dev.dhal().ncs_per_device()), (0, udma::Arch::V2, 2));
/// assert!(!dev.platform().is_emulation(), "silicon poll budgets");
/// // NC 1's host-to-tensor ring is queue 0 of the H2D engine (33).
/// assert_eq!(dev.h2t_queue(1)?, (33, 0));
/// assert_eq!(dev.h2t_queue(2), Err(NdmaError::InvalidNc { nc: 2, ncs: 2 }));
/// # Ok::<(), NdmaError>(())
/// ```
pub struct NeuronDevice {
    pub(crate) index: u32,
    pub(crate) dhal: &'static dyn Dhal,
    pub(crate) platform: Arc<dyn Platform>,
    pub(crate) bar0: Arc<dyn Mmio>,
    pub(crate) rings: Vec<Option<H2tRing>>,
    pub(crate) pool: MemPool,
    pub(crate) memset_lock: Mutex<()>,
    pub(crate) memset_mc: Arc<MemChunk>,
    pub(crate) attached: Mutex<BTreeSet<u32>>,
    pub(crate) resets: Option<Arc<dyn ResetClock>>,
    pub(crate) registry: Weak<Registry>,
    zerocopy_trn1_override: AtomicBool,
    /// The zero-copy completion thread, started on the first async submit.
    pub(crate) completion_thread: CompletionThread,
    /// This device as its system holds it (for the completion thread).
    self_ref: OnceLock<Weak<NeuronDevice>>,
    /// Pages the zero-copy queues of this device may each hold pinned.
    pub(crate) zc_pin_budget: std::sync::atomic::AtomicU64,
    /// The ring snapshot of the latest DMA failure ([`NeuronDevice::last_failure_state`]).
    pub(crate) last_failure: Mutex<Option<Box<crate::RingState>>>,
}

impl NeuronDevice {
    /// Brings a device up: starts every H2T engine, initialises each NC's H2T ring, allocates the memset
    /// buffer.
    ///
    /// # Errors
    ///
    /// [`NdmaError::OutOfRange`] for an HBM range past the 64-bit address space, allocation failures
    /// ([`NdmaError::NoMemory`]) and queue-init errors from the HAL.
    pub(crate) fn new(
        index: u32,
        dhal: &'static dyn Dhal,
        platform: Arc<dyn Platform>,
        hw: DeviceHw,
        registry: Weak<Registry>,
        host_domain: Arc<HostDomain>,
    ) -> Result<Self> {
        // Refused before any register is written.
        let pool = MemPool::in_domain(hw.hbm_base, hw.hbm_size, dhal.pci_host_base(), host_domain)?;
        let mmio: &dyn Mmio = &*hw.bar0;
        // Each H2T engine is brought up once, through the HAL, before the first of its queues.
        let mut engines: Vec<udma::Udma> = Vec::new();
        let mut rings = Vec::new();
        for nc in 0..dhal.ncs_per_device() {
            if hw.nc_map & (1 << nc) == 0 {
                rings.push(None);
                continue;
            }
            let eng = dhal.h2t_eng_id(nc);
            let engine = match engines.iter().find(|e| e.id() == eng) {
                Some(&e) => e,
                None => {
                    let e = udma::Udma::init(mmio, dhal.arch(), eng)?;
                    engines.push(e);
                    e
                }
            };
            rings.push(Some(H2tRing::new(&engine, dhal, &*platform, mmio, nc)?));
        }
        let memset_mc = pool.alloc_host_internal(&*platform, MEMSET_HOST_BUF_SIZE, 0)?;
        Ok(NeuronDevice {
            index,
            dhal,
            platform,
            bar0: hw.bar0,
            rings,
            pool,
            memset_lock: Mutex::new(()),
            memset_mc,
            attached: Mutex::new(BTreeSet::new()),
            resets: hw.resets,
            registry,
            zerocopy_trn1_override: AtomicBool::new(false),
            completion_thread: CompletionThread::default(),
            self_ref: OnceLock::new(),
            zc_pin_budget: std::sync::atomic::AtomicU64::new(crate::zerocopy::NDMA_CTX_QUEUE_MAX_PINNED_PAGES),
            last_failure: Mutex::new(None),
        })
    }

    /// The device's index in its system.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The device's DHAL.
    pub fn dhal(&self) -> &'static dyn Dhal {
        self.dhal
    }

    /// The platform the device runs on.
    pub fn platform(&self) -> &Arc<dyn Platform> {
        &self.platform
    }

    /// Allocates a host chunk owned by NC `nc`.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::{MemLocation, NdmaError};
    ///
    /// let mc = dev.alloc_host(8192, 1)?;
    /// assert_eq!((mc.location(), mc.size(), mc.nc_id()), (MemLocation::Host, 8192, 1));
    /// assert!(dev.dhal().arch().is_host_addr(mc.pa()), "tagged with the arch's pci_host_base");
    /// assert_eq!(dev.alloc_host(0, 0).unwrap_err(), NdmaError::NoMemory { what: "host", size: 0 });
    /// # Ok::<(), NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`] for an NC the device does not have (its copies would select no ring),
    /// [`NdmaError::NoMemory`].
    pub fn alloc_host(&self, size: u64, nc: u32) -> Result<Arc<MemChunk>> {
        self.h2t_ring(nc)?;
        self.pool.alloc_host(&*self.platform, size, nc)
    }

    /// A completion queue's chunk: the op layer's own (user-authored descriptors may not name it,
    /// [`NeuronDevice::is_valid_host_mem`]) and accessed only atomically ([`MemChunk::is_completion_queue`]).
    pub(crate) fn alloc_completion_queue(&self, size: u64, nc: u32) -> Result<Arc<MemChunk>> {
        self.pool.alloc_completion_queue(&*self.platform, size, nc)
    }

    /// Allocates a device (HBM) chunk owned by NC `nc`. Dropping the last reference frees it.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::{MemLocation, NdmaError};
    ///
    /// let mc = dev.alloc_device(1 << 20, 0)?;
    /// assert_eq!((mc.location(), mc.size(), mc.pa() % 256), (MemLocation::Device, 1 << 20, 0));
    /// let pa = mc.pa();
    /// drop(mc);
    /// assert_eq!(dev.alloc_device(4096, 0)?.pa(), pa, "freed and handed out again");
    /// assert_eq!(dev.alloc_device(1 << 40, 0).unwrap_err(), NdmaError::NoMemory { what: "device", size: 1 << 40 });
    /// assert_eq!(dev.alloc_device(4096, 7).unwrap_err(), NdmaError::InvalidNc { nc: 7, ncs: 2 });
    /// # Ok::<(), NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`] for an NC the device does not have (its copies would select no ring),
    /// [`NdmaError::NoMemory`].
    pub fn alloc_device(&self, size: u64, nc: u32) -> Result<Arc<MemChunk>> {
        self.h2t_ring(nc)?;
        self.pool.alloc_device(size, nc)
    }

    /// Attaches process `pid` (its host chunks become valid targets for user descriptors).
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// let mc = dev.alloc_host(4096, 0)?;
    /// assert!(!dev.has_attached_process() && !dev.is_valid_host_mem(mc.pa(), 4096));
    /// dev.attach_process(4242);
    /// assert!(dev.has_attached_process() && dev.is_valid_host_mem(mc.pa(), 4096));
    /// dev.detach_process(4242);
    /// assert!(!dev.has_attached_process());
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    pub fn attach_process(&self, pid: u32) {
        self.attached.lock().unwrap_or_else(|p| p.into_inner()).insert(pid);
    }

    /// Detaches process `pid` (example on [`NeuronDevice::attach_process`]).
    pub fn detach_process(&self, pid: u32) {
        self.attached.lock().unwrap_or_else(|p| p.into_inner()).remove(&pid);
    }

    /// `npid_is_attached`: does any process have this device open? (Example on
    /// [`NeuronDevice::attach_process`].)
    pub fn has_attached_process(&self) -> bool {
        !self.attached.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// NC `nc`'s H2T ring, if the NC was brought up.
    pub(crate) fn h2t_ring(&self, nc: u32) -> Result<Option<&H2tRing>> {
        match self.rings.get(nc as usize) {
            Some(r) => Ok(r.as_ref()),
            None => Err(NdmaError::InvalidNc { nc, ncs: self.rings.len() as u32 }),
        }
    }

    pub(crate) fn ring(&self, nc: u32) -> Result<&H2tRing> {
        // Not `ok_or`: that would build (and drop) the error on every call (see `classic::checked_end`).
        match self.h2t_ring(nc)? {
            Some(ring) => Ok(ring),
            None => Err(NdmaError::NoH2tRing { nc }),
        }
    }

    /// `(engine, queue)` of NC `nc`'s H2T ring (example on [`NeuronDevice`]).
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`] for an NC the device does not have, [`NdmaError::NoH2tRing`] for one that was
    /// not brought up.
    pub fn h2t_queue(&self, nc: u32) -> Result<(u32, u32)> {
        self.ring(nc).map(|r| (r.eng_id, r.qid))
    }

    /// Counters of NC `nc`'s H2T ring.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// let (src, dst) = (dev.alloc_host(200_000, 0)?, dev.alloc_device(200_000, 0)?);
    /// let before = dev.ring_stats(0)?;
    /// dev.memcpy_mc(&src, &dst, 0, 0, 200_000)?;
    /// let moved = dev.ring_stats(0)?.since(&before);
    /// // 200,000 bytes: three 64 KiB descriptors and one of 3,392 bytes, then the marker; RX and TX doorbells.
    /// assert_eq!((moved.transfers, moved.bytes, moved.descriptors, moved.doorbells), (1, 200_000, 5, 2));
    /// assert_eq!(dev.stats(), dev.ring_stats(0)?.merged(&dev.ring_stats(1)?), "the device sums its rings");
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`] for an NC the device does not have, [`NdmaError::NoH2tRing`] for one that was
    /// not brought up.
    pub fn ring_stats(&self, nc: u32) -> Result<StatsSnapshot> {
        self.ring(nc).map(|r| r.stats.snapshot())
    }

    /// The descriptor pairs `(TX, RX)` in slots `[0, producer cursor)` of NC `nc`'s H2T ring, read under the
    /// ring lock: a read-only view of what the op layer staged (for inspection tools). After the producer
    /// wraps this is only the slots since the wrap.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// let (src, dst) = (dev.alloc_host(100_000, 0)?, dev.alloc_device(100_000, 0)?);
    /// dev.memcpy_mc(&src, &dst, 0, 0, 100_000)?;
    /// let pairs = dev.ring_descriptors(0)?;
    /// let lens: Vec<u32> = pairs.iter().map(|(tx, _)| tx.len_ctrl().len_bytes()).collect();
    /// assert_eq!(lens, [65536, 100_000 - 65536, 4], "two data descriptors, then the 4-byte marker");
    /// assert_eq!(pairs[0].0.tx().src, dev.mc_to_pa(&src));
    /// assert_eq!(pairs[0].1.rx().dst, dev.mc_to_pa(&dst));
    /// assert_eq!(pairs[1].0.tx().barrier(), udma::Barrier::WriteBarrier, "the last data descriptor drains");
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`] for an NC the device does not have, [`NdmaError::NoH2tRing`] for one that was
    /// not brought up.
    pub fn ring_descriptors(&self, nc: u32) -> Result<Vec<(udma::Desc, udma::Desc)>> {
        let ring = self.ring(nc)?;
        let inner = ring.lock();
        let (tx, rx) = (inner.queue.tx(), inner.queue.rx());
        Ok((0..tx.next_desc_idx()).map(|i| (tx.read_desc(i), rx.read_desc(i))).collect())
    }

    /// Descriptor-slot accounting of NC `nc`'s H2T ring, under its lock: `(slots between the consumer and
    /// producer cursors, slots its contexts account for)`. Equal whenever no call is inside the ring; a
    /// difference is a leaked (or double-freed) slot. A snapshot: other threads may stage or ack right after.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// use ndma::Transfer;
    ///
    /// let (src, dst) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
    /// assert_eq!(dev.ring_slot_accounting(0)?, (0, 0));
    /// let copy = dev.start(&Transfer::new(&src, &dst, 4096))?;
    /// // One data pair and the marker stay on the ring until the copy is waited for.
    /// assert_eq!(dev.ring_slot_accounting(0)?, (2, 2));
    /// copy.wait()?;
    /// assert_eq!(dev.ring_slot_accounting(0)?, (0, 0));
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`NdmaError::InvalidNc`], [`NdmaError::NoH2tRing`].
    pub fn ring_slot_accounting(&self, nc: u32) -> Result<(u32, u32)> {
        let ring = self.ring(nc)?;
        Ok(crate::classic::RingGuard::lock(self, ring).slot_accounting())
    }

    /// Counters of every ring of the device, summed (example on [`NeuronDevice::ring_stats`]).
    pub fn stats(&self) -> StatsSnapshot {
        self.rings.iter().flatten().fold(StatsSnapshot::default(), |acc, r| acc.merged(&r.stats.snapshot()))
    }

    /// Records the `Arc` the system holds this device in.
    pub(crate) fn set_self_ref(&self, me: Weak<NeuronDevice>) {
        let _ = self.self_ref.set(me);
    }

    /// A weak reference to this device (dangling if it was never put in a system).
    pub(crate) fn self_ref(&self) -> Weak<NeuronDevice> {
        self.self_ref.get().cloned().unwrap_or_default()
    }

    /// The ring whose completion-thread bit is `bit`.
    pub(crate) fn ring_of_bit(&self, bit: u32) -> Option<&H2tRing> {
        self.rings.iter().flatten().find(|r| self.dhal.ctx_queue_bit(r.eng_id, r.qid) == Some(bit))
    }

    /// The completion-thread bits of the rings whose zero-copy queue holds contexts (each looked at under its
    /// lock).
    pub(crate) fn zc_rings_with_work(&self) -> u64 {
        let queued = |r: &&H2tRing| crate::classic::RingGuard::lock(self, r).zc_queued();
        let bits = self.rings.iter().flatten().filter(queued).filter_map(|r| self.dhal.ctx_queue_bit(r.eng_id, r.qid));
        bits.fold(0, |acc, bit| acc | 1 << bit)
    }

    /// The pre-pinned pages covering `n` pages of `mm` from `va`, if a range it registered holds them; `current`:
    /// `mm` is the calling task's ([`PinnedStore::try_populate`](crate::zerocopy::prepinned::PinnedStore::try_populate)).
    pub(crate) fn prepinned(&self, mm: &Arc<dyn crate::UserMm>, va: u64, n: usize, current: bool) -> Option<Pinned> {
        self.registry.upgrade()?.pinned.try_populate(mm, va, n, current)
    }

    /// The `zerocopy_trn1_override` module parameter: allow zero-copy on an arch with the reset-window retry.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// assert!(!dev.zerocopy_supported(), "V2 needs the reset-window retry: zero-copy is off");
    /// dev.set_zerocopy_trn1_override(true);
    /// assert!(dev.zerocopy_supported());
    /// ```
    pub fn set_zerocopy_trn1_override(&self, on: bool) {
        self.zerocopy_trn1_override.store(on, Ordering::Relaxed);
    }

    /// `ndma_zerocopy_supported`: zero-copy is off on archs that need the reset-window retry (V2), because
    /// pinning and replay were never validated against the hardware bug, unless the override is set (example
    /// on [`NeuronDevice::set_zerocopy_trn1_override`]).
    pub fn zerocopy_supported(&self) -> bool {
        !self.dhal.retry_memcpy() || self.zerocopy_trn1_override.load(Ordering::Relaxed)
    }

    /// Checks that `mc` can be DMAed here: a host chunk from the pool of any device of this system (host
    /// memory is the same for all of them — but not for another system, whose platform's addresses name
    /// other memory), a device chunk only from this device's pool — another device's HBM PA names this
    /// device's HBM, where it would land in whatever chunk holds that address. Never a completion queue: its
    /// memory is read and written only atomically, by its producer and consumers; a DMA into it would race
    /// them and forge completions (moving the shared tail past the producer's, which then posts no more), a
    /// DMA out of it would race them too.
    ///
    /// # Errors
    ///
    /// [`NdmaError::CompletionQueueMemory`] for a completion queue, [`NdmaError::ForeignChunk`] naming the
    /// chunk `what` for another's.
    pub(crate) fn check_own_chunk(&self, what: &'static str, mc: &MemChunk) -> Result<()> {
        if mc.is_completion_queue() {
            return Err(NdmaError::CompletionQueueMemory { what });
        }
        let ours = if mc.is_host() { self.pool.shares_host_domain(mc) } else { self.pool.owns(mc) };
        if ours {
            Ok(())
        } else {
            Err(NdmaError::ForeignChunk { what })
        }
    }

    /// The device address of `size` bytes at `offset` in `mc` (`what` in errors), once the window lies inside
    /// the chunk and the chunk can be DMAed here ([`NeuronDevice::check_own_chunk`]): what every copy entry
    /// point that takes a chunk asks before it stages anything.
    ///
    /// # Errors
    ///
    /// [`NdmaError::OutOfRange`], [`NdmaError::ForeignChunk`].
    pub(crate) fn chunk_window(&self, what: &'static str, mc: &MemChunk, offset: u64, size: u64) -> Result<u64> {
        mc.check_range(what, offset, size)?;
        self.check_own_chunk(what, mc)?;
        Ok(self.mc_to_pa(mc) + offset)
    }

    /// The PA rule (`ndma_mc_to_pa`): host chunk → host PA | `pci_host_base`; device chunk → its PA.
    ///
    /// ```
    /// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
    /// # let (_bed, dev) = doctest::device();
    /// let (host, hbm) = (dev.alloc_host(4096, 0)?, dev.alloc_device(4096, 0)?);
    /// let host_pa = host.host_buf().unwrap().phys_addr();
    /// assert_eq!(dev.mc_to_pa(&host), host_pa | dev.dhal().pci_host_base());
    /// assert_eq!(dev.mc_to_pa(&hbm), hbm.pa());
    /// # Ok::<(), ndma::NdmaError>(())
    /// ```
    pub fn mc_to_pa(&self, mc: &MemChunk) -> u64 {
        match mc.buffer() {
            Some(buf) => buf.phys_addr() | self.dhal.pci_host_base(),
            None => mc.pa(),
        }
    }
}

impl Drop for NeuronDevice {
    /// Quiesces every H2T ring before its memory (descriptor rings, marker words) and the chunks its contexts
    /// hold are freed: a re-initialised queue has nothing pending, so the engine can no longer fetch a
    /// descriptor from — or write through one into — memory that is about to be reused.
    fn drop(&mut self) {
        self.completion_thread.stop();
        for ring in self.rings.iter().flatten() {
            let mut g = crate::classic::RingGuard::lock(self, ring);
            g.quiesce();
            g.zc_teardown();
        }
    }
}

impl std::fmt::Debug for NeuronDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NeuronDevice").field("index", &self.index).field("arch", &self.dhal.arch()).finish()
    }
}

/// `ndma_mc_pair_to_nc`: a device source wins; a host source uses the destination's NC (so host→host uses
/// the destination's NC too).
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// use ndma::mc_pair_to_nc;
///
/// let (host0, host1) = (dev.alloc_host(64, 0)?, dev.alloc_host(64, 1)?);
/// let (hbm0, hbm1) = (dev.alloc_device(64, 0)?, dev.alloc_device(64, 1)?);
/// assert_eq!(mc_pair_to_nc(&hbm1, &host0), 1, "device → host: the source's NC");
/// assert_eq!(mc_pair_to_nc(&host0, &hbm1), 1, "host → device: the destination's NC");
/// assert_eq!(mc_pair_to_nc(&host1, &host0), 0, "host → host: the destination's NC");
/// assert_eq!(mc_pair_to_nc(&hbm0, &hbm1), 0);
/// # Ok::<(), ndma::NdmaError>(())
/// ```
pub fn mc_pair_to_nc(src: &MemChunk, dst: &MemChunk) -> u32 {
    if src.is_host() {
        dst.nc_id()
    } else {
        src.nc_id()
    }
}
