//! A pinned user page belongs to the transfer until the engine holds no descriptor pointing at it: whatever
//! fails, the op layer takes the descriptors away from the engine (re-initialises the ring) before it unpins.
//!
//! The check sits where the pages are let go: a `Platform` wrapped around the model's hands out the calling
//! task's address space wrapped in turn, and every unpin records what the ring's queue still held then.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, OnceLock};

use ndma::{BatchOp, HostBuf, Platform, System, UserMm, PAGE_SIZE};
use ndma_emu::test_utils::*;
use ndma_emu::{AddressSpace, ClockKind, EmuConfig, EmuDevice, EmuPlatform, EmuSystem, ExecPolicy, MapSpec};
use ndma_emu::{OrderingMode, Placement, PlannedFault};
use udma::{Arch, Direction};

/// One unpin: pages let go, TX descriptors still pending on the H2T queue then, and whether it was hung.
type Unpin = (usize, u32, bool);

/// What the spies share: the queue they look at and what they saw.
#[derive(Default)]
struct Watch {
    emu: OnceLock<Arc<EmuDevice>>,
    queue: OnceLock<(u32, u32)>,
    unpins: Mutex<Vec<Unpin>>,
}

impl Watch {
    fn note(&self, pages: usize) {
        let (emu, &(eng, qid)) = (self.emu.get().expect("set"), self.queue.get().expect("set"));
        self.unpins.lock().unwrap().push((pages, emu.pending(eng, qid, Direction::Tx), emu.is_hung(eng, qid)));
    }
}

/// The calling task's address space, recording every unpin.
struct SpyMm {
    inner: Arc<dyn UserMm>,
    watch: Arc<Watch>,
}

impl UserMm for SpyMm {
    fn pid(&self) -> u32 {
        self.inner.pid()
    }
    fn pin_pages_fast(&self, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> ndma::Result<usize> {
        self.inner.pin_pages_fast(va, n, write, pages)
    }
    fn pin_pages(&self, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> ndma::Result<usize> {
        self.inner.pin_pages(va, n, write, pages)
    }
    fn unpin_pages(&self, pages: &[u64], dirty: bool) {
        self.watch.note(pages.len());
        self.inner.unpin_pages(pages, dirty)
    }
}

/// The model's platform, handing out spies for address spaces.
struct SpyPlatform {
    inner: Arc<EmuPlatform>,
    watch: Arc<Watch>,
}

impl Platform for SpyPlatform {
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
        self.inner.alloc_coherent(len)
    }
    fn virt_to_phys(&self, cpu: *const u8, len: usize) -> Option<u64> {
        self.inner.virt_to_phys(cpu, len)
    }
    fn current_mm(&self) -> Option<Arc<dyn UserMm>> {
        let inner = self.inner.current_mm()?;
        Some(Arc::new(SpyMm { inner, watch: Arc::clone(&self.watch) }))
    }
    fn device_diagnostics(&self, device: u32, engine: u32, qid: u32) -> Option<String> {
        self.inner.device_diagnostics(device, engine, qid)
    }
}

/// A V3 model (inline engines, fake clock, the tests' sizes and silicon budgets) whose op layer runs over a
/// [`SpyPlatform`]. Fields drop in order: the op layer, then the model.
struct Spied {
    system: System,
    emu: EmuSystem,
    watch: Arc<Watch>,
}

impl Spied {
    fn new() -> Spied {
        let cfg = testbed_config(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
        let emu = EmuSystem::new(EmuConfig {
            hbm_size: cfg.hbm_size,
            host_dram_size: cfg.host_dram_size,
            exec: cfg.exec,
            ordering: cfg.ordering,
            clock: cfg.clock,
            ..EmuConfig::new(Arch::V3)
        })
        .unwrap();
        emu.platform().set_emulation(false);
        let watch = Arc::new(Watch::default());
        let platform = Arc::new(SpyPlatform { inner: Arc::clone(emu.platform()), watch: Arc::clone(&watch) });
        let hw = emu.devices().iter().map(|d| ndma_emu::device_hw(d).unwrap()).collect();
        let system = System::new(Arch::V3, platform, hw).unwrap();
        watch.emu.set(Arc::clone(emu.device(0))).ok().unwrap();
        watch.queue.set(system.devices()[0].h2t_queue(0).unwrap()).unwrap();
        Spied { system, emu, watch }
    }
}

/// A synchronous device → host request whose first two pieces are issued onto a queue that hangs and whose
/// third cannot be pinned (a hole): the request fails and is drained. The drain's wait for the first piece
/// times out; the two issued pieces' pages must be unpinned only after the ring was re-initialised, when the
/// engine holds none of their descriptors.
#[test]
fn a_failed_drain_unpins_only_after_the_engine_let_go_of_the_pages() {
    let s = Spied::new();
    let dev = &s.system.devices()[0];
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let mm = AddressSpace::new(s.emu.host(), 4242);
    let _enter = mm.enter();
    // 200 pages, a hole at page 150: pieces [0, 64) and [64, 128) pin and are issued, [128, 192) does not pin.
    let va = mm.map(&MapSpec::new(200, Placement::Contiguous).holes([150])).unwrap();
    let mc = dev.alloc_device(200 * PAGE_SIZE, 0).unwrap();
    s.emu.device(0).fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let op = BatchOp { offset: 0, size: 200 * PAGE_SIZE, buffer: va };
    let err = dev.zerocopy_submit(0, &[op], &mc, 0, -1, false, 0, 0).unwrap_err();
    assert_eq!(err.errno(), -12, "{err}: the third piece's partial pin");
    let unpins = s.watch.unpins.lock().unwrap().clone();
    // The 22-page unpins are the third piece's short pins, which never reached the ring.
    let issued: Vec<Unpin> = unpins.iter().copied().filter(|&(n, _, _)| n == 64).collect();
    assert_eq!(issued, [(64, 0, false), (64, 0, false)], "every unpin: {unpins:?}");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    assert!(s.emu.host().frames().leak_check().is_clean());
}
