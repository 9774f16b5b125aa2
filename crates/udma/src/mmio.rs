//! Register access: the only way the HAL reaches the engine's BAR0.

/// 32-bit access to a device's BAR0, by byte offset from the start of the BAR.
///
/// A real back end maps BAR0 (VFIO, a kernel port); the emulator implements it with its register file.
/// Writes to a queue's `drtp_inc` are doorbells, so an implementation must not reorder a write before
/// memory operations that precede it in program order once the caller has issued its release fence.
///
/// A register file that only remembers what was written is enough to watch what the HAL programs:
///
/// ```
/// use std::sync::Mutex;
/// use udma::{regs, Arch, Mmio, Udma};
///
/// /// Keeps the last write; reads return 0.
/// #[derive(Default)]
/// struct LastWrite(Mutex<Option<(u64, u32)>>);
///
/// impl Mmio for LastWrite {
///     fn read32(&self, _offset: u64) -> u32 {
///         0
///     }
///     fn write32(&self, offset: u64, value: u32) {
///         *self.0.lock().unwrap() = Some((offset, value));
///     }
/// }
///
/// let bar0 = LastWrite::default();
/// let engine = Udma::init(&bar0, Arch::V3, 130)?;
/// // Bring-up ends with S2M `change_state` = NORMAL.
/// let last = *bar0.0.lock().unwrap();
/// assert_eq!(last, Some((engine.base() + regs::S2M_CHANGE_STATE, regs::CHANGE_STATE_NORMAL)));
/// # Ok::<(), udma::UdmaError>(())
/// ```
pub trait Mmio: Send + Sync {
    /// Reads the 32-bit register at `offset`.
    fn read32(&self, offset: u64) -> u32;
    /// Writes `value` to the 32-bit register at `offset`.
    fn write32(&self, offset: u64, value: u32);
}

impl<T: Mmio + ?Sized> Mmio for &T {
    fn read32(&self, offset: u64) -> u32 {
        (**self).read32(offset)
    }
    fn write32(&self, offset: u64, value: u32) {
        (**self).write32(offset, value)
    }
}
