//! A HAL-only rig for the model's own tests: one emulated device, one engine brought up and one M2M queue
//! pair initialised through the HAL's one entry ([`Udma::init`], `init_queue`) with rings in emulated host
//! DRAM, and helpers that stage a batch, append the 4-byte completion marker, ring the doorbells, poll the
//! marker with Acquire loads (a bounded number of times) and ack.
//!
//! A rig is test scaffolding: its helpers panic on a failed step, naming it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use udma::{Arch, Barrier, DmaMemory, M2mQueue, Ring, Udma, MAX_DMA_DESC_SIZE};

use crate::{EmuConfig, EmuDevice, EmuSystem, ExecPolicy, HbmRange, HostBuf, OrderingMode};

/// The value the op layer seeds at marker +0 (`DMA_COMPLETION_MARKER`).
pub const MARKER: u32 = 0xabcd_ef01;
/// Upper bound on marker polls before a rig gives up (a bound, not a time: each poll spins or yields).
pub const POLL_LIMIT: u64 = 50_000_000;
/// Both engine execution policies a model test runs under.
pub const POLICIES: [ExecPolicy; 2] = [ExecPolicy::Inline, ExecPolicy::Threaded];

/// One device, one engine, one queue pair and a marker.
pub struct Rig {
    /// The system (host DRAM and the device).
    pub sys: EmuSystem,
    /// The device.
    pub dev: Arc<EmuDevice>,
    /// Its arch.
    pub arch: Arch,
    /// The engine brought up.
    pub eng: u32,
    /// The engine's BAR0 base.
    pub base: u64,
    /// The queue pair.
    pub q: M2mQueue<HostBuf>,
    /// 256 bytes of host memory: marker source at +0, poll word at +4.
    pub marker: HostBuf,
}

/// A small system of `arch` (256 MiB HBM, 1 GiB host DRAM) with `exec` engines and `ordering`.
pub fn config(arch: Arch, exec: ExecPolicy, ordering: OrderingMode) -> EmuConfig {
    EmuConfig { hbm_size: Some(256 << 20), host_dram_size: 1 << 30, exec, ordering, ..EmuConfig::new(arch) }
}

/// The H2T engine of NC 0 on `arch` (V2: 32 D2H, V3: 128).
pub fn h2t_engine(arch: Arch) -> u32 {
    match arch {
        Arch::V2 => 32,
        Arch::V3 => 128,
    }
}

/// A descriptor ring of `size` entries in `dev`'s host DRAM.
///
/// # Panics
///
/// If host DRAM is exhausted.
pub fn ring(dev: &EmuDevice, size: u32) -> Ring<HostBuf> {
    let mem = dev.host().alloc(size as usize * 16, 256).expect("ring memory");
    let dma_addr = mem.phys_addr() | dev.arch().pci_host_base();
    Ring { mem, dma_addr }
}

impl Rig {
    /// The H2T engine of NC 0, queue 0, 256-entry rings, on [`config`]`(arch, exec, ordering)`.
    ///
    /// # Panics
    ///
    /// If a bring-up step fails.
    pub fn new(arch: Arch, exec: ExecPolicy, ordering: OrderingMode) -> Rig {
        Rig::with(config(arch, exec, ordering), h2t_engine(arch), 0, 256)
    }

    /// Engine `eng`, queue `qid`, rings of `ring_size` entries, on `cfg`.
    ///
    /// # Panics
    ///
    /// If a bring-up step fails.
    pub fn with(cfg: EmuConfig, eng: u32, qid: u32, ring_size: u32) -> Rig {
        let arch = cfg.arch;
        let sys = EmuSystem::new(cfg).expect("system");
        let dev = Arc::clone(sys.device(0));
        let engine = Udma::init(&*dev, arch, eng).expect("engine");
        let base = engine.base();
        let q =
            engine.init_queue(&*dev, qid, ring(&dev, ring_size), ring(&dev, ring_size), ring_size).expect("queue init");
        let marker = dev.host().alloc(256, 256).expect("marker");
        Rig { sys, dev, arch, eng, base, q, marker }
    }

    /// A 4 KiB host page and a 4 KiB HBM page for a test's copies, and the host page's device address (keep
    /// the pages alive while the engine may use them).
    ///
    /// # Panics
    ///
    /// If either allocation fails.
    pub fn page_pair(&self) -> (HostBuf, HbmRange, u64) {
        let src = self.dev.host().alloc(4096, 4096).expect("host page");
        let dst = self.dev.alloc_hbm(4096, 4096).expect("HBM page");
        let s = self.host_addr(&src, 0);
        (src, dst, s)
    }

    /// Device address of a host buffer offset.
    pub fn host_addr(&self, buf: &HostBuf, off: u64) -> u64 {
        (buf.phys_addr() + off) | self.arch.pci_host_base()
    }

    /// Stages `len` bytes from `src` to `dst` in ≤64 KiB pairs, the last carrying `last_barrier`; returns the
    /// number of pairs.
    ///
    /// # Panics
    ///
    /// If the ring refuses a pair.
    pub fn stage(&mut self, src: u64, dst: u64, len: u64, last_barrier: Barrier) -> u32 {
        let mut off = 0;
        let mut n = 0;
        while off < len {
            let chunk = (len - off).min(u64::from(MAX_DMA_DESC_SIZE));
            let barrier = if off + chunk == len { last_barrier } else { Barrier::None };
            self.q.copy_prepare_one(src + off, dst + off, chunk as u32, barrier, false).expect("prepare");
            off += chunk;
            n += 1;
        }
        n
    }

    /// Re-arms the marker (+0 = [`MARKER`], +4 = 0) and stages the 4-byte self-copy +0 → +4.
    ///
    /// # Panics
    ///
    /// If the ring refuses the pair.
    pub fn stage_marker(&mut self) {
        self.marker.store_u32(0, MARKER, Ordering::Relaxed).expect("marker source");
        self.marker.store_u32(4, 0, Ordering::Relaxed).expect("marker word");
        let m = self.host_addr(&self.marker, 0);
        self.q.copy_prepare_one(m, m + 4, 4, Barrier::None, false).expect("prepare marker");
    }

    /// Has the marker landed (Acquire)?
    ///
    /// # Panics
    ///
    /// Never for a rig's own marker buffer (the load is in range).
    pub fn marker_landed(&self) -> bool {
        self.marker.load_u32(4, Ordering::Acquire).expect("marker word") == MARKER
    }

    /// Polls the marker with Acquire loads, at most [`POLL_LIMIT`] times. True if it landed.
    pub fn poll_marker(&self) -> bool {
        poll(|| self.marker_landed())
    }

    /// A whole classic batch: data pairs + marker, doorbells, poll, ack.
    ///
    /// # Panics
    ///
    /// If a step fails or the marker never lands.
    pub fn copy(&mut self, src: u64, dst: u64, len: u64, last_barrier: Barrier) {
        let n = self.stage(src, dst, len, last_barrier) + 1;
        self.stage_marker();
        self.q.copy_start(&*self.dev, n, n).expect("doorbell");
        assert!(self.poll_marker(), "marker never landed; faults: {:?}", self.dev.faults());
        self.q.ack(n);
    }
}

/// Polls `f` up to [`POLL_LIMIT`] times, spinning and yielding in between.
pub fn poll(mut f: impl FnMut() -> bool) -> bool {
    for i in 0..POLL_LIMIT {
        if f() {
            return true;
        }
        if i % 16 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    false
}
