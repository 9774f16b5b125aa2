//! Atomics, swapped for loom's under `cfg(loom)` so the completion-counter CAS can be model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU32;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::AtomicU32;

#[cfg(loom)]
pub(crate) fn spin_loop() {
    loom::thread::yield_now();
}

#[cfg(not(loom))]
pub(crate) fn spin_loop() {
    core::hint::spin_loop();
}
