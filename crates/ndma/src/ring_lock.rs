//! Taking the ring lock the way the kernel takes a mutex: spin while it is briefly held, sleep only after.
//!
//! The driver's ring lock is a kernel mutex, and a kernel mutex spins while its owner runs on a CPU before
//! its waiter sleeps ("optimistic spinning"). The ring lock's critical sections are short — staging a batch,
//! pinning and building a zero-copy piece (a few µs), one pass of the completion thread — while a waiter
//! that sleeps pays a system call to be woken and then waits for a CPU: 10–150 µs on a small virtual
//! machine, tens of pieces' worth of engine time. `std::sync::Mutex` spins only about a hundred
//! iterations, so async zero-copy submitters and the completion thread slept on each other's short holds:
//! measured with 200 back-to-back async 1 MiB requests (8 in flight, a spinning completion-queue consumer),
//! 73–148 of the ring's acquisitions slept, for 5–16 ms in all, and the completion thread found its queue
//! empty (and slept too) a hundred times more; spinning first, 2–13 slept. A user-space lock cannot see
//! whether its owner is on a CPU, so the spin is bounded by time instead ([`RING_LOCK_SPIN`]).

use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// How long a thread that finds the ring lock held spins for it before it sleeps: longer than the lock's
/// usual holds (a piece's pinning and build, a completion pass over a few pieces), short enough that a
/// holder that lost its CPU costs the waiter little.
pub(crate) const RING_LOCK_SPIN: Duration = Duration::from_micros(50);

/// Spin iterations between two looks at the lock (and at the clock, which costs as much as ~20 of them).
const SPINS_PER_LOOK: u32 = 64;

/// How an acquisition went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The lock was free.
    Free,
    /// The lock was held, and freed while this thread spun.
    Spun,
    /// The lock was held past the spin; this thread slept until it was freed.
    Slept,
}

/// Takes `m` if it is free. A poisoned lock counts as free: every path that fails while holding the ring
/// lock leaves the ring consistent first (see `H2tRing::lock`).
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Takes `m`: at once if it is free, else spinning for up to `spin`, else sleeping until it is freed.
pub(crate) fn lock<T>(m: &Mutex<T>, spin: Duration) -> (MutexGuard<'_, T>, Acquired) {
    lock_observed(m, spin, || {})
}

/// [`lock`], calling `contended` once the lock was found held (before spinning).
fn lock_observed<T>(m: &Mutex<T>, spin: Duration, contended: impl FnOnce()) -> (MutexGuard<'_, T>, Acquired) {
    if let Some(g) = try_lock(m) {
        return (g, Acquired::Free);
    }
    contended();
    let start = Instant::now();
    while start.elapsed() < spin {
        for _ in 0..SPINS_PER_LOOK {
            std::hint::spin_loop();
        }
        if let Some(g) = try_lock(m) {
            return (g, Acquired::Spun);
        }
    }
    (m.lock().unwrap_or_else(|p| p.into_inner()), Acquired::Slept)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    /// Holds `m` on another thread until `lock_observed` on this one reports contention, then frees it;
    /// returns how this thread's acquisition went and the value it found.
    fn contend(spin: Duration) -> (Acquired, u32) {
        let m = Arc::new(Mutex::new(0u32));
        let waiting = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicBool::new(false));
        let holder = {
            let (m, waiting, held) = (Arc::clone(&m), Arc::clone(&waiting), Arc::clone(&held));
            std::thread::spawn(move || {
                let mut g = m.lock().unwrap();
                // Release: the waiter's Acquire load of `held` then finds the lock taken.
                held.store(true, Ordering::Release);
                // Acquire: pairs with the waiter's Release store once it has found the lock held.
                while !waiting.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                *g = 7;
            })
        };
        // Acquire: pairs with the holder's Release store after it took the lock.
        while !held.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        // Release: orders nothing of ours the holder reads; it only lets the holder go on.
        let (g, how) = lock_observed(&m, spin, || waiting.store(true, Ordering::Release));
        let value = *g;
        drop(g);
        holder.join().unwrap();
        (how, value)
    }

    #[test]
    fn a_free_lock_is_taken_at_once() {
        let m = Mutex::new(1u8);
        let (g, how) = lock(&m, RING_LOCK_SPIN);
        assert_eq!((*g, how), (1, Acquired::Free));
    }

    #[test]
    fn a_lock_freed_within_the_spin_is_taken_spinning() {
        // A spin no test run outlasts: the holder frees the lock as soon as the waiter has seen it held.
        let (how, value) = contend(Duration::from_secs(3600));
        assert_eq!((how, value), (Acquired::Spun, 7), "the waiter sees the holder's write");
    }

    #[test]
    fn without_a_spin_a_held_lock_is_slept_on() {
        let (how, value) = contend(Duration::ZERO);
        assert_eq!((how, value), (Acquired::Slept, 7));
    }

    #[test]
    fn a_poisoned_lock_counts_as_free() {
        let m = Arc::new(Mutex::new(3u8));
        let m2 = Arc::clone(&m);
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poisons the lock");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(try_lock(&m).map(|g| *g), Some(3));
        let (g, how) = lock(&m, Duration::ZERO);
        assert_eq!((*g, how), (3, Acquired::Free));
    }
}
