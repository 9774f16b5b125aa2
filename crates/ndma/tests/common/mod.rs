//! Shared set-up for the op-layer integration tests: testbeds, copy directions, and dmatest-style windows
//! (a pattern inside, guard bytes before and after, on both ends of a copy).
#![allow(dead_code)]

use std::sync::Arc;

use ndma::{Instance, MemChunk, NeuronDevice};
use ndma_emu::{ClockKind, EmuDevice, ExecPolicy, OrderingMode, Testbed, TestbedConfig};
use udma::Arch;

/// Guard bytes on each side of every window.
pub const GUARD: u64 = 4096;
/// Byte the destination's guards (and window) hold before a copy.
pub const DST_FILL: u8 = 0xEE;

pub fn instance(arch: Arch) -> Instance {
    match arch {
        Arch::V2 => Instance::TRN1_2XLARGE,
        Arch::V3 => Instance { name: "trn2-1dev", arch: Arch::V3, devices: 1 },
    }
}

pub fn testbed(arch: Arch, exec: ExecPolicy, ordering: OrderingMode, clock: ClockKind) -> Testbed {
    let mut cfg = TestbedConfig::new(instance(arch));
    cfg.exec = exec;
    cfg.ordering = ordering;
    cfg.clock = clock;
    // Threaded engines share two cores with the other tests: silicon budgets (a few hundred µs for a small
    // device-to-device batch) would turn a descheduled worker into a spurious timeout.
    cfg.emulation_budgets = exec == ExecPolicy::Threaded;
    cfg.hbm_size = Some(4 << 30);
    cfg.host_dram_size = 8 << 30;
    Testbed::new(cfg).expect("testbed")
}

/// The strictest model: posted HBM writes drain only on barriers, so a missing barrier shows.
pub fn adversarial(arch: Arch, exec: ExecPolicy) -> Testbed {
    testbed(arch, exec, OrderingMode::Adversarial, ClockKind::Real)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    H2D,
    D2H,
    D2D,
    H2H,
}

pub const DIRS: [Dir; 4] = [Dir::H2D, Dir::D2H, Dir::D2D, Dir::H2H];

impl Dir {
    pub fn src_host(self) -> bool {
        matches!(self, Dir::H2D | Dir::H2H)
    }
    pub fn dst_host(self) -> bool {
        matches!(self, Dir::D2H | Dir::H2H)
    }
}

/// A deterministic pattern of `len` bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len.next_multiple_of(8)];
    for (i, c) in v.chunks_exact_mut(8).enumerate() {
        let x = (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ seed;
        c.copy_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

pub fn alloc(dev: &NeuronDevice, host: bool, size: u64, nc: u32) -> Arc<MemChunk> {
    if host {
        dev.alloc_host(size, nc).expect("host chunk")
    } else {
        dev.alloc_device(size, nc).expect("device chunk")
    }
}

/// Writes `data` into a chunk through the CPU (host) or the model's back door (device).
pub fn put(emu: &EmuDevice, mc: &MemChunk, off: u64, data: &[u8]) {
    if mc.is_host() {
        mc.write(off, data).expect("host write");
    } else {
        emu.hbm_write(mc.pa() + off, data).expect("hbm write");
    }
}

/// Reads a chunk's bytes through the CPU (host) or the model's back door (device).
pub fn get(emu: &EmuDevice, mc: &MemChunk, off: u64, len: u64) -> Vec<u8> {
    let mut out = vec![0u8; len as usize];
    if mc.is_host() {
        mc.read(off, &mut out).expect("host read");
    } else {
        emu.hbm_read(mc.pa() + off, &mut out).expect("hbm read");
    }
    out
}

/// Source and destination chunks for a copy of `size` bytes at offset `GUARD` of each, with guards on
/// both sides: the source holds a pattern everywhere, the destination `DST_FILL`.
pub struct Windows {
    pub src: Arc<MemChunk>,
    pub dst: Arc<MemChunk>,
    pub size: u64,
    pub src_bytes: Vec<u8>,
}

impl Windows {
    pub fn new(dev: &NeuronDevice, emu: &EmuDevice, dir: Dir, size: u64, nc: u32, seed: u64) -> Windows {
        let total = size + 2 * GUARD;
        let src = alloc(dev, dir.src_host(), total, nc);
        let dst = alloc(dev, dir.dst_host(), total, nc);
        let src_bytes = pattern(total as usize, seed);
        put(emu, &src, 0, &src_bytes);
        put(emu, &dst, 0, &vec![DST_FILL; total as usize]);
        Windows { src, dst, size, src_bytes }
    }

    /// The copy of the window as a [`ndma::Transfer`].
    pub fn transfer(&self) -> ndma::Transfer {
        ndma::Transfer::new(&self.src, &self.dst, self.size).src_offset(GUARD).dst_offset(GUARD)
    }

    pub fn copy(&self, dev: &NeuronDevice) -> ndma::Result<()> {
        dev.memcpy_mc(&self.src, &self.dst, GUARD, GUARD, self.size)
    }

    /// Source untouched; destination = guard, the source window, guard.
    pub fn verify(&self, emu: &EmuDevice, what: &str) {
        let total = self.size + 2 * GUARD;
        let src_now = get(emu, &self.src, 0, total);
        assert!(src_now == self.src_bytes, "{what}: source changed");
        let dst = get(emu, &self.dst, 0, total);
        let (g, s) = (GUARD as usize, self.size as usize);
        assert!(dst[..g].iter().all(|&b| b == DST_FILL), "{what}: bytes before the destination window changed");
        assert!(dst[g + s..].iter().all(|&b| b == DST_FILL), "{what}: bytes after the destination window changed");
        if let Some(i) = (0..s).find(|&i| dst[g + i] != self.src_bytes[g + i]) {
            panic!("{what}: first wrong byte at window offset {i} of {s}");
        }
    }
}

/// Data descriptors and batches the classic split produces for `size` bytes.
pub fn expected_split(size: u64) -> (u64, u64) {
    let data = size.div_ceil(65536);
    let batches = data.div_ceil(u64::from(ndma::SYNC_THRESHOLD));
    (data, batches)
}
