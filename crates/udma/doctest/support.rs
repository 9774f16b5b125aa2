// Set-up shared by the examples in `udma`'s documentation. Each example includes it in a hidden line:
//
//     # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); } use doctest::*;
//
// Plain-memory stand-ins for the two traits through which the HAL reaches hardware: `Regs`, a BAR0 that keeps
// what is written to it, and `Mem`, heap memory posing as DMA memory at a "physical" address the example picks.
// No engine executes anything here; `ndma`'s examples run the op layer over a device model.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::sync::Mutex;

pub use udma::{DmaMemory, Mmio};

/// A register file: a read returns the last value written (0 for a register never written).
#[derive(Default)]
pub struct Regs(Mutex<HashMap<u64, u32>>);

impl Mmio for Regs {
    fn read32(&self, offset: u64) -> u32 {
        self.0.lock().unwrap().get(&offset).copied().unwrap_or(0)
    }
    fn write32(&self, offset: u64, value: u32) {
        self.0.lock().unwrap().insert(offset, value);
    }
}

/// `len` zeroed bytes, 256-byte aligned, that claim to sit at physical address `pa`.
pub struct Mem {
    ptr: *mut u8,
    len: usize,
    pa: u64,
}

impl Mem {
    pub fn new(len: usize, pa: u64) -> Mem {
        let layout = Layout::from_size_align(len.max(1), 256).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Mem { ptr, len, pa }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align(self.len.max(1), 256).unwrap()) };
    }
}

// SAFETY: the allocation is owned by the value; shared access goes through the `DmaMemory` accessors.
unsafe impl Send for Mem {}
// SAFETY: as above.
unsafe impl Sync for Mem {}

// SAFETY: `ptr` is non-null, 256-byte aligned and valid for `len` bytes for the life of the value, and nothing
// else aliases it.
unsafe impl DmaMemory for Mem {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn phys_addr(&self) -> u64 {
        self.pa
    }
}
