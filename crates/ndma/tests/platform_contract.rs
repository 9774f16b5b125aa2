//! What the op layer relies on from a `Platform` it cannot trust: `alloc_coherent` promises at least the length
//! asked for, 256-byte aligned, but `Platform` is a safe trait. A buffer that falls short is refused
//! (`NoMemory`): before, the op layer recorded the size it asked for, and its bounds checks, its completion
//! queue and its DMA windows ran past the buffer into the next allocation.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use ndma::memory::MemPool;
use ndma::zerocopy::NDMA_H2D_COMPL_QUEUE_SIZE;
use ndma::{HostBuf, NdmaError, Platform, System};
use ndma_emu::{ClockKind, EmuConfig, EmuPlatform, EmuSystem, ExecPolicy, HostMemory};
use udma::Arch;

/// A safe `Platform` that hands out 256 bytes when asked for `short` bytes, and everything else as asked.
struct ShortPlatform {
    inner: Arc<dyn Platform>,
    short: usize,
}

impl Platform for ShortPlatform {
    fn jiffies(&self) -> u64 {
        self.inner.jiffies()
    }
    fn now_us(&self) -> u64 {
        self.inner.now_us()
    }
    fn udelay(&self, us: u64) {
        self.inner.udelay(us)
    }
    fn delay_until(&self, word: &AtomicU32, value: u32, us: u64) -> bool {
        self.inner.delay_until(word, value, us)
    }
    fn is_emulation(&self) -> bool {
        self.inner.is_emulation()
    }
    fn alloc_coherent(&self, len: usize) -> ndma::Result<HostBuf> {
        self.inner.alloc_coherent(if len == self.short { 256 } else { len })
    }
    fn virt_to_phys(&self, cpu: *const u8, len: usize) -> Option<u64> {
        self.inner.virt_to_phys(cpu, len)
    }
    fn current_mm(&self) -> Option<Arc<dyn ndma::UserMm>> {
        self.inner.current_mm()
    }
}

fn short_system(short: usize) -> (EmuSystem, System) {
    let mut cfg = EmuConfig::new(Arch::V3);
    cfg.devices = 1;
    cfg.exec = ExecPolicy::Inline;
    cfg.hbm_size = Some(1 << 30);
    cfg.host_dram_size = 1 << 30;
    let emu = EmuSystem::new(cfg).unwrap();
    let inner: Arc<dyn Platform> = Arc::new(EmuPlatform::new(Arc::clone(emu.host()), ClockKind::Real));
    let platform = Arc::new(ShortPlatform { inner, short });
    let hw = emu.devices().iter().map(|d| ndma_emu::device_hw(d).unwrap()).collect();
    let system = System::new(Arch::V3, platform, hw).unwrap();
    (emu, system)
}

const WHAT: &str = "coherent host (short or misaligned buffer)";
const SHORT: NdmaError = NdmaError::NoMemory { what: WHAT, size: 8192 };

#[test]
fn a_pool_refuses_a_host_buffer_shorter_than_asked() {
    let host = Arc::new(HostMemory::new(1 << 20).unwrap());
    let inner: Arc<dyn Platform> = Arc::new(EmuPlatform::new(Arc::clone(&host), ClockKind::Real));
    let platform = ShortPlatform { inner, short: 8192 };
    let pool = MemPool::new(0x10_0000_0000, 1 << 20, 0).unwrap();
    assert_eq!(pool.alloc_host(&platform, 8192, 0).err(), Some(SHORT));
    let fine = pool.alloc_host(&platform, 4096, 0).unwrap();
    assert_eq!((fine.size(), fine.host_buf().unwrap().len()), (4096, 4096));
}

#[test]
fn a_device_on_a_short_platform_refuses_the_chunk_and_the_completion_queue_and_stays_usable() {
    let (_emu, system) = short_system(8192);
    let dev = system.device(0).unwrap();
    assert_eq!(dev.alloc_host(8192, 0).err(), Some(SHORT));
    let (src, dst) = (dev.alloc_host(4096, 0).unwrap(), dev.alloc_device(8192, 0).unwrap());
    src.fill(0, 4096, 0x5c).unwrap();
    dev.memcpy_mc(&src, &dst, 0, 0, 4096).unwrap();
    let back = dev.alloc_host(4096, 0).unwrap();
    dev.memcpy_mc(&dst, &back, 0, 0, 4096).unwrap();
    let mut out = vec![0u8; 4096];
    back.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x5c));

    let (_emu, system) = short_system(NDMA_H2D_COMPL_QUEUE_SIZE);
    let dev = system.device(0).unwrap();
    let want = NdmaError::NoMemory { what: WHAT, size: NDMA_H2D_COMPL_QUEUE_SIZE as u64 };
    assert_eq!(dev.completion_queue(0).err(), Some(want));
}
