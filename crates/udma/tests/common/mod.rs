//! Test support shared by the integration tests (and the `prepare` bench through `#[path]`): a heap-backed
//! descriptor ring implementing [`udma::DmaMemory`] and an [`udma::Mmio`] that records every write.
#![allow(dead_code)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::sync::Mutex;

use udma::{Arch, DmaMemory, Mmio, Ring, Udma, UDMA_QUEUE_ADDR_BYTE_ALIGNMENT};

/// Bytes per descriptor.
pub const DESC_BYTES: usize = 16;

/// A zeroed, 256-byte-aligned heap allocation standing in for device-visible memory.
pub struct VecRing {
    ptr: *mut u8,
    layout: Layout,
    phys: u64,
}

// SAFETY: the allocation is owned exclusively by this value; all access goes through `DmaMemory`, whose
// users synchronise as the trait documents.
unsafe impl Send for VecRing {}
// SAFETY: as above.
unsafe impl Sync for VecRing {}

impl VecRing {
    /// `bytes` zeroed bytes (at least 1 is allocated), with a fake physical address `phys`.
    pub fn new(bytes: usize, phys: u64) -> Self {
        let layout = Layout::from_size_align(bytes.max(1), UDMA_QUEUE_ADDR_BYTE_ALIGNMENT as usize).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation of {bytes} bytes failed");
        VecRing { ptr, layout, phys }
    }

    /// Room for exactly `descs` descriptors.
    pub fn descs(descs: u32, phys: u64) -> Self {
        Self::new(descs as usize * DESC_BYTES, phys)
    }
}

impl Drop for VecRing {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with this very layout and is freed once.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

// SAFETY: `ptr` is non-null, 256-byte aligned and valid for `layout.size()` bytes until drop; nothing else
// aliases it. No device exists in tests, so `phys_addr` is only a label.
unsafe impl DmaMemory for VecRing {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
    fn phys_addr(&self) -> u64 {
        self.phys
    }
}

/// A ring of `descs` descriptors whose device address is `dma_addr`.
pub fn ring(descs: u32, dma_addr: u64) -> Ring<VecRing> {
    Ring { mem: VecRing::descs(descs, dma_addr), dma_addr }
}

/// The V2 D2H engine (id 32, BAR0 0x3060_0000), brought up through the HAL's one entry on `mmio`.
pub fn d2h_engine<M: Mmio + ?Sized>(mmio: &M) -> Udma {
    Udma::init(mmio, Arch::V2, 32).expect("engine 32 exists on V2")
}

/// An [`Mmio`] that logs every write in order and reads back the last value written (0 if none).
#[derive(Default)]
pub struct RecordingMmio {
    writes: Mutex<Vec<(u64, u32)>>,
    regs: Mutex<HashMap<u64, u32>>,
}

impl RecordingMmio {
    /// An empty register file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pre-loads a register value without logging it as a write (a reset value, say).
    pub fn preset(&self, offset: u64, value: u32) {
        self.regs.lock().unwrap().insert(offset, value);
    }

    /// Every write so far, in order.
    pub fn writes(&self) -> Vec<(u64, u32)> {
        self.writes.lock().unwrap().clone()
    }

    /// Returns and forgets the writes so far (register values are kept).
    pub fn take_writes(&self) -> Vec<(u64, u32)> {
        std::mem::take(&mut *self.writes.lock().unwrap())
    }

    /// The value last written to (or preset at) `offset`.
    pub fn value(&self, offset: u64) -> Option<u32> {
        self.regs.lock().unwrap().get(&offset).copied()
    }
}

impl Mmio for RecordingMmio {
    fn read32(&self, offset: u64) -> u32 {
        self.regs.lock().unwrap().get(&offset).copied().unwrap_or(0)
    }
    fn write32(&self, offset: u64, value: u32) {
        self.writes.lock().unwrap().push((offset, value));
        self.regs.lock().unwrap().insert(offset, value);
    }
}

/// An [`Mmio`] that ignores writes and reads 0.
pub struct NoopMmio;

impl Mmio for NoopMmio {
    fn read32(&self, _offset: u64) -> u32 {
        0
    }
    fn write32(&self, _offset: u64, _value: u32) {}
}
