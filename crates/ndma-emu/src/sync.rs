//! The synchronisation primitives of the two hand-off protocols that loom model-checks (`handoff`,
//! `waiters`): std's, or loom's under `cfg(loom)`. The rest of the crate uses std directly.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread;

/// Parks the calling thread for at most `timeout`. Loom does not model time: there it parks until
/// unparked, so a model that relies on the timeout to make progress deadlocks and fails.
#[cfg(loom)]
pub(crate) fn park_timeout(_timeout: std::time::Duration) {
    loom::thread::park();
}

/// Parks the calling thread for at most `timeout`.
#[cfg(not(loom))]
pub(crate) fn park_timeout(timeout: std::time::Duration) {
    std::thread::park_timeout(timeout);
}

/// A timed sleep of about `d` that no one is expected to cut short. Under loom, a yield: the model then
/// explores the other threads' steps in its place.
#[cfg(loom)]
pub(crate) fn nap(_d: std::time::Duration) {
    loom::thread::yield_now();
}

/// A timed sleep of about `d` that no one is expected to cut short.
#[cfg(not(loom))]
pub(crate) fn nap(d: std::time::Duration) {
    std::thread::park_timeout(d);
}

/// Locks `m`, ignoring poisoning (see `crate::lock`).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
