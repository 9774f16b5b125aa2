//! A HAL-only rig: one emulated device, one engine brought up and one M2M queue pair initialised through
//! the HAL's one entry (`udma::Udma::init`, `Udma::init_queue`) with rings in emulated host DRAM, and helpers that stage a batch, append the
//! 4-byte completion marker, ring the doorbells, poll the marker with Acquire loads and ack.
#![allow(dead_code)]

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ndma_emu::{EmuConfig, EmuDevice, EmuSystem, ExecPolicy, HostBuf, OrderingMode};
use udma::{Arch, Barrier, DmaMemory, M2mQueue, Ring, Udma, MAX_DMA_DESC_SIZE};

/// The value the op layer seeds at marker +0 (`DMA_COMPLETION_MARKER`).
pub const MARKER: u32 = 0xabcd_ef01;
/// Upper bound on marker polls before a test gives up (a bound, not a time: each poll yields).
pub const POLL_LIMIT: u64 = 50_000_000;

pub struct Rig {
    pub sys: EmuSystem,
    pub dev: Arc<EmuDevice>,
    pub arch: Arch,
    pub eng: u32,
    pub base: u64,
    pub q: M2mQueue<HostBuf>,
    pub marker: HostBuf,
}

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

pub fn ring(dev: &EmuDevice, size: u32) -> Ring<HostBuf> {
    let mem = dev.host().alloc(size as usize * 16, 256).expect("ring memory");
    let dma_addr = mem.phys_addr() | dev.arch().pci_host_base();
    Ring { mem, dma_addr }
}

impl Rig {
    pub fn new(arch: Arch, exec: ExecPolicy, ordering: OrderingMode) -> Rig {
        Rig::with(config(arch, exec, ordering), h2t_engine(arch), 0, 256)
    }

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

    /// Device address of a host buffer offset.
    pub fn host_addr(&self, buf: &HostBuf, off: u64) -> u64 {
        (buf.phys_addr() + off) | self.arch.pci_host_base()
    }

    /// Stages `len` bytes from `src` to `dst` in ≤64 KiB pairs, the last carrying `last_barrier`; returns the
    /// number of pairs.
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

    /// Re-arms the marker (+0 = MARKER, +4 = 0) and stages the 4-byte self-copy +0 → +4.
    pub fn stage_marker(&mut self) {
        self.marker.store_u32(0, MARKER, Ordering::Relaxed).unwrap();
        self.marker.store_u32(4, 0, Ordering::Relaxed).unwrap();
        let m = self.host_addr(&self.marker, 0);
        self.q.copy_prepare_one(m, m + 4, 4, Barrier::None, false).expect("prepare marker");
    }

    pub fn marker_landed(&self) -> bool {
        self.marker.load_u32(4, Ordering::Acquire).unwrap() == MARKER
    }

    /// Polls the marker with Acquire loads, at most `POLL_LIMIT` times. True if it landed.
    pub fn poll_marker(&self) -> bool {
        poll(|| self.marker_landed())
    }

    /// A whole classic batch: data pairs + marker, doorbells, poll, ack. Panics if the marker never lands.
    pub fn copy(&mut self, src: u64, dst: u64, len: u64, last_barrier: Barrier) {
        let n = self.stage(src, dst, len, last_barrier) + 1;
        self.stage_marker();
        self.q.copy_start(&*self.dev, n, n).expect("doorbell");
        assert!(self.poll_marker(), "marker never landed; faults: {:?}", self.dev.faults());
        self.q.ack(n);
    }
}

/// Polls `f` up to `POLL_LIMIT` times, spinning and yielding in between.
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

/// A byte pattern distinct per `seed`.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8).collect()
}

pub const POLICIES: [ExecPolicy; 2] = [ExecPolicy::Inline, ExecPolicy::Threaded];
