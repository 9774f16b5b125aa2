//! A back end of your own: the op layer over plain heap memory and a tiny software engine, with no device model.
//!
//! ```sh
//! cargo run -p ndma --example custom_backend
//! ```
//!
//! `ndma` reaches a device only through three traits:
//! - [`udma::Mmio`]: 32-bit access to the device's BAR0 registers;
//! - [`udma::DmaMemory`]: host memory that both the CPU and the device can reach (rings, marker words, buffers);
//! - [`ndma::Platform`]: time, delays and coherent allocation of such memory, as the kernel provides them.
//!
//! This file implements all three over ordinary heap memory. Its "engine" decodes BAR0 writes with the
//! register map `udma` declares, and when both doorbells of a queue have been rung it executes the descriptor
//! pairs they handed over: read the TX descriptor (the source) and the RX descriptor (the destination), copy.
//! The op layer above is unmodified: it stages descriptors, rings doorbells, polls its completion marker and
//! acks, exactly as it does on the device model (or on silicon). A 1 MiB host -> device and device -> host
//! round trip through it is checked byte for byte, against this back end's own view of device memory.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ndma::{DeviceHw, HostBuf, NdmaError, Platform, System, ALL_NCS};
use range_allocator::RangeAllocator;
use udma::regs::{self, DoorbellCount, QueueReg, QueueSwCtrl, Register};
use udma::{Arch, Desc, Direction, DmaMemory, Mmio};

/// The device generation this back end presents (its BAR0 layout and host addressing).
const ARCH: Arch = Arch::V2;
/// Host "physical" addresses we hand out start here (any value below the arch's `pci_host_base` bit).
const HOST_BASE: u64 = 0x1_0000_0000;
const HOST_SIZE: usize = 8 << 20;
/// Device memory (HBM) addresses; the op layer's pool allocates device chunks in this range.
const HBM_BASE: u64 = 0x40_0000_0000;
const HBM_SIZE: usize = 8 << 20;
/// Bytes to copy.
const SIZE: u64 = 1 << 20;

/// One zeroed, page-aligned heap allocation standing in for a range of physical memory at `base`.
struct Arena {
    ptr: *mut u8,
    base: u64,
    len: usize,
}

impl Arena {
    fn new(base: u64, len: usize) -> Arena {
        // SAFETY: the layout has a non-zero size and a power-of-two alignment.
        let ptr = unsafe { alloc_zeroed(Self::layout(len)) };
        assert!(!ptr.is_null(), "out of memory");
        Arena { ptr, base, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, 4096).expect("valid layout")
    }

    /// CPU pointer to `[pa, pa + len)`, or `None` when the range is not inside the arena.
    /// The physical address of the `len` bytes at CPU address `cpu`, if they lie in the arena.
    fn pa_of(&self, cpu: *const u8, len: usize) -> Option<u64> {
        let off = (cpu as usize).checked_sub(self.ptr as usize)?;
        (off.checked_add(len)? <= self.len).then(|| self.base + off as u64)
    }

    fn at(&self, pa: u64, len: usize) -> Option<*mut u8> {
        let off = usize::try_from(pa.checked_sub(self.base)?).ok()?;
        // SAFETY: `off + len <= self.len` (checked first), so the pointer stays inside the allocation.
        (off.checked_add(len)? <= self.len).then(|| unsafe { self.ptr.add(off) })
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr, Self::layout(self.len)) };
    }
}

// SAFETY: the arena owns its allocation; every access goes through pointers whose users uphold the DMA rules
// (the CPU and the engine never touch the same bytes at the same time without the doorbell/marker ordering).
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

/// Host DRAM: an arena and an allocator of its ranges.
struct HostMemory {
    arena: Arena,
    ranges: Mutex<RangeAllocator>,
}

impl HostMemory {
    fn new() -> Arc<HostMemory> {
        let ranges = Mutex::new(RangeAllocator::new(HOST_BASE, HOST_SIZE as u64));
        Arc::new(HostMemory { arena: Arena::new(HOST_BASE, HOST_SIZE), ranges })
    }

    /// `len` bytes of coherent DMA memory, page-aligned (the op layer asks for 256-byte alignment).
    fn alloc(self: &Arc<Self>, len: usize) -> Option<HostRegion> {
        let pa = self.ranges.lock().ok()?.alloc(len as u64, 4096)?;
        Some(HostRegion { host: Arc::clone(self), pa, len })
    }
}

/// A range of host memory handed to the op layer: what `Platform::alloc_coherent` returns.
struct HostRegion {
    host: Arc<HostMemory>,
    pa: u64,
    len: usize,
}

impl Drop for HostRegion {
    fn drop(&mut self) {
        if let Ok(mut ranges) = self.host.ranges.lock() {
            ranges.free(self.pa, self.len as u64);
        }
    }
}

// SAFETY: the range was allocated from the arena, so `as_ptr()` is non-null, page-aligned and valid for `len`
// bytes while the region (which keeps the arena alive) lives; ranges never overlap, so nothing else in the CPU's
// address space aliases it; the engine reaches the same bytes at `phys_addr()`.
unsafe impl DmaMemory for HostRegion {
    fn as_ptr(&self) -> *mut u8 {
        self.host.arena.at(self.pa, self.len).expect("the region lies in the arena")
    }
    fn len(&self) -> usize {
        self.len
    }
    fn phys_addr(&self) -> u64 {
        self.pa
    }
}

/// Time, delays and host memory.
struct PlainPlatform {
    host: Arc<HostMemory>,
    start: Instant,
}

impl Platform for PlainPlatform {
    fn jiffies(&self) -> u64 {
        self.now_us() / 4000 // HZ = 250
    }

    fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn udelay(&self, us: u64) {
        let end = self.now_us() + us;
        while self.now_us() < end {
            std::hint::spin_loop();
        }
    }

    /// The engine runs on the doorbell write, so a marker is usually there before the first wait: look first.
    fn delay_until(&self, word: &AtomicU32, value: u32, us: u64) -> bool {
        // Acquire, as the trait asks: the data writes before the marker must be visible once it is seen (here
        // the engine ran on this very thread, so program order already gives that).
        if word.load(Ordering::Acquire) == value {
            return true;
        }
        self.udelay(us);
        word.load(Ordering::Acquire) == value
    }

    fn is_emulation(&self) -> bool {
        false
    }

    fn alloc_coherent(&self, len: usize) -> ndma::Result<HostBuf> {
        match self.host.alloc(len) {
            Some(region) => Ok(Arc::new(region)),
            None => Err(NdmaError::NoMemory { what: "host", size: len as u64 }),
        }
    }

    fn virt_to_phys(&self, cpu: *const u8, len: usize) -> Option<u64> {
        self.host.arena.pa_of(cpu, len)
    }
}

/// Where each ring of a queue is in executing what its doorbells handed over.
#[derive(Default)]
struct QueueState {
    /// Next slot to execute, per direction (`[TX, RX]`).
    head: [u32; 2],
    /// Descriptors handed over by doorbells and not executed yet, per direction.
    pending: [u32; 2],
}

/// What BAR0 writes change: the register values, and each queue's execution state.
#[derive(Default)]
struct Bar0 {
    /// Register values by BAR0 offset.
    regs: HashMap<u64, u32>,
    /// Queue state by (engine, queue).
    queues: HashMap<(u32, u32), QueueState>,
}

/// The device: a BAR0 register file and the engine behind it.
struct Device {
    host: Arc<HostMemory>,
    hbm: Arena,
    bar0: Mutex<Bar0>,
    pairs_executed: AtomicU64,
}

fn index(dir: Direction) -> usize {
    match dir {
        Direction::Tx => 0,
        Direction::Rx => 1,
    }
}

impl Device {
    /// CPU pointer to `len` bytes at device address `addr`: host memory when the address carries the arch's
    /// host bits, HBM otherwise.
    fn reach(&self, addr: u64, len: usize) -> Option<*mut u8> {
        if ARCH.is_host_addr(addr) {
            self.host.arena.at(addr & !ARCH.pci_host_base(), len)
        } else {
            self.hbm.at(addr, len)
        }
    }

    /// Descriptor `slot` of the ring programmed for queue `qid` of the engine at `base`, direction `dir`.
    fn descriptor(&self, regs: &HashMap<u64, u32>, base: u64, dir: Direction, qid: u32, slot: u32) -> Option<Desc> {
        let q = regs::queue_base(base, dir, qid);
        let reg = |r: u64| regs.get(&(q + r)).copied().unwrap_or(0);
        let ring = u64::from(reg(regs::q::DRBP_HIGH)) << 32 | u64::from(reg(regs::q::DRBP_LOW));
        let at = self.reach(ring + u64::from(slot) * 16, 16)?;
        // SAFETY: `reach` checked that the 16 bytes lie in our memory; the op layer wrote them before the doorbell
        // (its release fence orders them), and a descriptor is plain old data.
        Some(unsafe { (at as *const Desc).read_unaligned() })
    }

    /// Executes the pairs both doorbells of queue `qid` of engine `eng` handed over.
    fn run(&self, regs: &HashMap<u64, u32>, eng: u32, qid: u32, q: &mut QueueState) {
        let Some(base) = ARCH.engine_base(eng) else { return };
        let ring_len = regs.get(&(regs::queue_base(base, Direction::Tx, qid) + regs::q::DRL)).copied().unwrap_or(0);
        while q.pending[0] > 0 && q.pending[1] > 0 && ring_len > 0 {
            let tx = self.descriptor(regs, base, Direction::Tx, qid, q.head[0]).map(|d| d.tx());
            let rx = self.descriptor(regs, base, Direction::Rx, qid, q.head[1]).map(|d| d.rx());
            let (Some(tx), Some(rx)) = (tx, rx) else { return };
            let len = tx.len_ctrl.len_bytes() as usize;
            // A descriptor pointing outside memory stops the queue, as a hardware error would: the op layer's
            // marker never arrives and its wait fails with a timeout.
            let (Some(src), Some(dst)) = (self.reach(tx.src, len), self.reach(rx.dst, len)) else { return };
            // SAFETY: both ranges lie in our memory (`reach` checked them); the op layer owns them for the
            // transfer and does not touch them until it sees the marker, which this copy (or a later one) writes.
            // `copy` allows the ranges to overlap.
            unsafe { std::ptr::copy(src, dst, len) };
            self.pairs_executed.fetch_add(1, Ordering::Relaxed);
            for d in 0..2 {
                q.head[d] = (q.head[d] + 1) % ring_len;
                q.pending[d] -= 1;
            }
        }
    }
}

impl Mmio for Device {
    fn read32(&self, offset: u64) -> u32 {
        self.bar0.lock().map(|b| b.regs.get(&offset).copied().unwrap_or(0)).unwrap_or(0)
    }

    fn write32(&self, offset: u64, value: u32) {
        let Ok(mut bar0) = self.bar0.lock() else { return };
        let Bar0 { regs, queues } = &mut *bar0;
        regs.insert(offset, value);
        let Some((eng, in_engine)) = ARCH.engine_at(offset) else { return };
        let Some(Register::Queue { dir, qid, reg }) = Register::decode(in_engine) else { return };
        let q = queues.entry((eng, qid)).or_default();
        match reg {
            // `RST_Q` (queue init, or the op layer re-initialising a ring after a failure): back to slot 0.
            QueueReg::QSwCtrl if QueueSwCtrl::from_bits(value).rst_q() => {
                q.head[index(dir)] = 0;
                q.pending[index(dir)] = 0;
            }
            // A doorbell: `count` more descriptors are the engine's. The op layer rings RX, then TX.
            QueueReg::DrtpInc => {
                q.pending[index(dir)] += DoorbellCount::from_bits(value).count();
                self.run(regs, eng, qid, q);
            }
            _ => {}
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let host = HostMemory::new();
    let device = Arc::new(Device {
        host: Arc::clone(&host),
        hbm: Arena::new(HBM_BASE, HBM_SIZE),
        bar0: Mutex::default(),
        pairs_executed: AtomicU64::new(0),
    });
    let platform = Arc::new(PlainPlatform { host, start: Instant::now() });
    let hw = DeviceHw {
        arch: ARCH,
        bar0: device.clone(),
        hbm_base: HBM_BASE,
        hbm_size: HBM_SIZE as u64,
        resets: None, // no NeuronCore resets to report
        nc_map: ALL_NCS,
    };
    // Bring-up: every NC's H2T engine and queue is programmed through `device`'s BAR0, the rings and marker
    // words allocated through `platform`.
    let system = System::new(ARCH, platform, vec![hw])?;
    let dev = &system.devices()[0];

    let src = dev.alloc_host(SIZE, 0)?;
    let hbm = dev.alloc_device(SIZE, 0)?;
    let back = dev.alloc_host(SIZE, 0)?;
    let data: Vec<u8> = (0..SIZE).map(|i| (i.wrapping_mul(0x0100_0193) >> 5) as u8).collect();
    src.write(0, &data)?;
    back.fill(0, SIZE, 0)?;

    // Host -> device, then check device memory as this back end sees it.
    dev.memcpy_mc(&src, &hbm, 0, 0, SIZE)?;
    let at = device.hbm.at(hbm.pa(), SIZE as usize).ok_or("the device chunk lies outside HBM")?;
    // SAFETY: the range lies in the HBM arena (checked); the copy is over, nothing writes it meanwhile.
    let landed = unsafe { std::slice::from_raw_parts(at, SIZE as usize) };
    if landed != data.as_slice() {
        return Err("device memory differs from the source after the host -> device copy".into());
    }

    // Device -> host.
    dev.memcpy_mc(&hbm, &back, 0, 0, SIZE)?;
    let mut out = vec![0u8; SIZE as usize];
    back.read(0, &mut out)?;
    if out != data {
        return Err("host memory differs from the source after the device -> host copy".into());
    }

    let s = dev.ring_stats(0)?;
    println!(
        "custom back end: {SIZE} bytes host -> device -> host through the op layer: {} descriptor pairs staged in \
         {} batches, {} executed by the software engine, {} marker polls; all bytes verified",
        s.descriptors,
        s.batches,
        device.pairs_executed.load(Ordering::Relaxed),
        s.polls
    );
    Ok(())
}

/// `cargo test` runs the example.
#[test]
fn runs() {
    main().unwrap();
}
