//! One emulated Neuron device: its HBM, its engines and their BAR0 register file, its fault log and plan.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use udma::regs::{DoorbellCount, EngineReg, QueueReg, Register};
use udma::{Arch, Direction, Mmio};

use crate::activity::Activity;
use crate::addr_map::AddrMap;
use crate::bar0::{Bar0Map, Target};
use crate::engine::Engine;
use crate::faults::{CorruptionReport, DmaFault, FaultPlan};
use crate::hbm::{Hbm, HbmRange};
use crate::lock::lock;
use crate::nc_reset::NcResets;
use crate::ordering::OrderingMode;
use crate::stats::EngineStats;
use crate::sync::thread::JoinHandle;
use crate::system::{EmuConfig, ExecPolicy};
use crate::trace::{EngineEvent, Trace};
use crate::{EmuError, HostMemory, MemSpace};

/// What the engines and their workers share.
#[derive(Debug)]
pub(crate) struct DeviceCore {
    pub(crate) index: usize,
    pub(crate) map: AddrMap,
    pub(crate) exec: ExecPolicy,
    pub(crate) ordering: OrderingMode,
    pub(crate) engines: Vec<Engine>,
    pub(crate) faults: Mutex<Vec<DmaFault>>,
    pub(crate) corruptions: Mutex<Vec<CorruptionReport>>,
    pub(crate) plan: FaultPlan,
    pub(crate) shutdown: AtomicBool,
    pub(crate) workers: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) resets: NcResets,
    pub(crate) trace: Trace,
    /// The system's engine activity: doorbells mark engines in it, batches wake its waiters.
    pub(crate) activity: Arc<Activity>,
    /// The arch has the strong-ordered write (RX `len_ctrl` bit 29, V3 on): elsewhere the bit orders nothing.
    pub(crate) has_sow: bool,
    /// The access watch (off unless a caller watches for descriptor escapes).
    pub(crate) escapes: crate::escape::EscapeWatch,
}

impl DeviceCore {
    fn shutdown(&self) {
        let handles = {
            let mut w = lock(&self.workers);
            // Release pairs with the workers' Acquire loads; set under the workers lock so no worker is
            // spawned after the list is taken (see `worker::ensure`).
            self.shutdown.store(true, Ordering::Release);
            std::mem::take(&mut *w)
        };
        for e in &self.engines {
            e.signal.wake();
        }
        for h in handles {
            if h.join().is_err() {
                tracing::error!(device = self.index, "an engine worker panicked");
            }
        }
    }
}

/// One emulated device. Implements [`udma::Mmio`] for its BAR0.
#[derive(Debug)]
pub struct EmuDevice {
    core: Arc<DeviceCore>,
    bar0: Bar0Map,
    arch: Arch,
    /// An op layer holds the device ([`crate::DeviceClaim`]).
    claimed: AtomicBool,
}

impl EmuDevice {
    /// Device `index` of a system built from `cfg`, its engines marking work in `activity`.
    pub(crate) fn new(
        index: usize,
        cfg: &EmuConfig,
        host: Arc<HostMemory>,
        activity: Arc<Activity>,
    ) -> Result<Self, EmuError> {
        let arch = cfg.arch;
        let hbm = Arc::new(Hbm::new(cfg.hbm_size())?);
        let seed = cfg.seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let core = DeviceCore {
            index,
            map: AddrMap::new(arch, host, hbm),
            exec: cfg.exec,
            ordering: cfg.ordering,
            engines: (0..arch.num_engines()).map(Engine::new).collect(),
            faults: Mutex::new(Vec::new()),
            corruptions: Mutex::new(Vec::new()),
            plan: FaultPlan::new(seed),
            shutdown: AtomicBool::new(false),
            workers: Mutex::new(Vec::new()),
            resets: NcResets::new(arch),
            trace: Trace::default(),
            activity,
            has_sow: arch != Arch::V2,
            escapes: crate::escape::EscapeWatch::default(),
        };
        Ok(EmuDevice { core: Arc::new(core), bar0: Bar0Map::new(arch), arch, claimed: AtomicBool::new(false) })
    }

    /// What the engines share (for the system's platform).
    pub(crate) fn core(&self) -> &Arc<DeviceCore> {
        &self.core
    }

    /// Stops and joins this device's engine workers. Later doorbells execute inline on the caller's thread.
    pub fn shutdown(&self) {
        self.core.shutdown();
    }

    /// Is an op layer bound to the device (a [`crate::DeviceClaim`] lives)?
    pub fn is_claimed(&self) -> bool {
        // Acquire: pairs with the Release of `release_claim` (a reader that sees the device free sees the
        // previous op layer's teardown).
        self.claimed.load(Ordering::Acquire)
    }

    /// Takes the claim; false when it is held.
    pub(crate) fn try_claim(&self) -> bool {
        // Acquire: the previous holder's teardown (its release) happens-before the new op layer's bring-up.
        self.claimed.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Gives the claim back.
    pub(crate) fn release_claim(&self) {
        // Release: everything the op layer did to the device comes before the next claim's Acquire.
        self.claimed.store(false, Ordering::Release);
    }

    /// Index in the system.
    pub fn index(&self) -> usize {
        self.core.index
    }
    /// Device generation.
    pub fn arch(&self) -> Arch {
        self.arch
    }
    /// Execution policy.
    pub fn exec_policy(&self) -> ExecPolicy {
        self.core.exec
    }
    /// Fabric ordering mode.
    pub fn ordering(&self) -> OrderingMode {
        self.core.ordering
    }
    /// The system's host DRAM.
    pub fn host(&self) -> &Arc<HostMemory> {
        self.core.map.host()
    }
    /// This device's HBM space (physical-address access).
    pub fn hbm(&self) -> &MemSpace {
        &self.core.map.hbm().space
    }

    /// Allocates `len` bytes of HBM aligned to `align` (at least 64).
    ///
    /// # Errors
    ///
    /// [`EmuError::InvalidAlloc`] for `len == 0` or a non-power-of-two `align`; [`EmuError::OutOfMemory`].
    pub fn alloc_hbm(&self, len: u64, align: u64) -> Result<HbmRange, EmuError> {
        self.core.map.hbm().alloc(len, align)
    }

    /// Returns a range from [`EmuDevice::alloc_hbm`].
    ///
    /// # Errors
    ///
    /// [`EmuError::BadFree`] for a range that is not a live allocation.
    pub fn free_hbm(&self, range: HbmRange) -> Result<(), EmuError> {
        self.core.map.hbm().free(range)
    }

    /// Reads HBM at physical address `pa`.
    ///
    /// # Errors
    ///
    /// [`EmuError::OutOfBounds`] outside HBM.
    pub fn hbm_read(&self, pa: u64, dst: &mut [u8]) -> Result<(), EmuError> {
        self.hbm().read(pa, dst)
    }
    /// Writes HBM at physical address `pa`.
    ///
    /// # Errors
    ///
    /// [`EmuError::OutOfBounds`] outside HBM.
    pub fn hbm_write(&self, pa: u64, src: &[u8]) -> Result<(), EmuError> {
        self.hbm().write(pa, src)
    }
    /// Fills `len` bytes of HBM at `pa` with `byte`.
    ///
    /// # Errors
    ///
    /// [`EmuError::OutOfBounds`] outside HBM.
    pub fn hbm_fill(&self, pa: u64, len: u64, byte: u8) -> Result<(), EmuError> {
        self.hbm().fill(pa, len, byte)
    }

    /// Faults recorded so far, oldest first.
    pub fn faults(&self) -> Vec<DmaFault> {
        lock(&self.core.faults).clone()
    }
    /// Removes and returns the recorded faults.
    pub fn take_faults(&self) -> Vec<DmaFault> {
        std::mem::take(&mut *lock(&self.core.faults))
    }
    /// Forgets the recorded faults.
    pub fn clear_faults(&self) {
        lock(&self.core.faults).clear();
    }
    /// Corruptions injected by the fault plan, with their outcomes.
    pub fn corruptions(&self) -> Vec<CorruptionReport> {
        lock(&self.core.corruptions).clone()
    }
    /// The device's fault plan.
    pub fn fault_plan(&self) -> &FaultPlan {
        &self.core.plan
    }

    fn engine(&self, eng: u32) -> Result<&Engine, EmuError> {
        self.core
            .engines
            .get(eng as usize)
            .ok_or(EmuError::NoSuchEngine { engine: eng, num_engines: self.arch.num_engines() })
    }

    /// Counters of engine `eng`. A batch in progress is waited for, so a caller that has seen its marker finds
    /// its work counted.
    ///
    /// # Errors
    ///
    /// [`EmuError::NoSuchEngine`].
    pub fn engine_stats(&self, eng: u32) -> Result<EngineStats, EmuError> {
        Ok(self.engine(eng)?.stats_snapshot(&self.core))
    }

    /// True while queue pair (`eng`, `qid`) is halted by a fault (until `RST_Q`).
    pub fn is_halted(&self, eng: u32, qid: u32) -> bool {
        self.pair_flag(eng, qid, |p| p.halted)
    }
    /// True while queue pair (`eng`, `qid`) is hung by the fault plan (until `RST_Q`).
    pub fn is_hung(&self, eng: u32, qid: u32) -> bool {
        self.pair_flag(eng, qid, |p| p.hung)
    }
    fn pair_flag(&self, eng: u32, qid: u32, f: impl Fn(&crate::bar0::PairState) -> bool) -> bool {
        self.engine(eng).ok().and_then(|e| lock(&e.regs).pairs.get(qid as usize).map(&f)).unwrap_or(false)
    }

    /// Descriptors handed to the ring `dir` of (`eng`, `qid`) and not yet executed. Waits for a batch the
    /// engine is executing to end: a caller that has seen its marker then finds it over.
    pub fn pending(&self, eng: u32, qid: u32, dir: Direction) -> u32 {
        self.engine(eng).map_or(0, |e| e.pending(&self.core, qid as usize, dir))
    }

    /// Posted (not yet landed) HBM writes on engine `eng`, after merging contiguous ones.
    pub fn posted_writes(&self, eng: u32) -> usize {
        self.engine(eng).map_or(0, Engine::posted_len)
    }

    /// Starts (or stops) recording an engine timeline; see [`EmuDevice::take_trace`].
    pub fn set_trace(&self, enabled: bool) {
        self.core.trace.set_enabled(enabled);
    }

    /// Removes and returns the recorded engine events, in the order they ended (a batch is recorded after
    /// the drains it contains).
    pub fn take_trace(&self) -> Vec<EngineEvent> {
        self.core.trace.take()
    }

    /// Lets every engine's posted writes land (waiting for in-flight batches).
    pub fn flush_posted_writes(&self) {
        for e in &self.core.engines {
            let mut exec = lock(&e.exec);
            e.drain(&self.core, &mut exec);
        }
    }
}

impl EmuDevice {
    /// Starts a reset of NeuronCore `nc` now, lasting `duration_jiffies`. On V2, work handed to that NC's
    /// queues meanwhile hangs until the queue is re-initialised. Returns false for an NC the device lacks.
    pub fn reset_nc(&self, nc: u32, duration_jiffies: u64) -> bool {
        self.core.resets.begin(nc, duration_jiffies)
    }

    /// Starts a reset of every NeuronCore of the device.
    pub fn reset_device(&self, duration_jiffies: u64) {
        for nc in 0..self.arch.ncs_per_device() {
            self.core.resets.begin(nc, duration_jiffies);
        }
    }

    /// Is a reset of `nc` in progress now?
    pub fn nc_reset_in_progress(&self, nc: u32) -> bool {
        self.core.resets.in_progress(nc)
    }
}

impl ndma::ResetClock for EmuDevice {
    fn reset_times(&self, nc: u32) -> (u64, u64) {
        self.core.resets.times(nc)
    }
}

impl Mmio for EmuDevice {
    fn read32(&self, offset: u64) -> u32 {
        let Some(Target { eng, reg }) = self.bar0.decode(offset) else { return 0 };
        self.engine(eng).map_or(0, |e| lock(&e.regs).read(reg))
    }

    fn write32(&self, offset: u64, value: u32) {
        let Some(Target { eng, reg }) = self.bar0.decode(offset) else { return };
        let Ok(e) = self.engine(eng) else { return };
        match reg {
            Register::Engine { dir, reg: EngineReg::ChangeState } => e.change_state(&self.core, dir, value),
            Register::Queue { dir, qid, reg: QueueReg::DrtpInc } => {
                e.doorbell(&self.core, dir, qid as usize, DoorbellCount::from_bits(value).count())
            }
            Register::Queue { dir, qid, reg: QueueReg::QSwCtrl } => e.sw_ctrl(&self.core, dir, qid as usize, value),
            reg => {
                if lock(&e.regs).write_plain(reg, value) {
                    e.wake_if_runnable(&self.core);
                }
            }
        }
    }
}

impl Drop for EmuDevice {
    fn drop(&mut self) {
        self.core.shutdown();
    }
}
