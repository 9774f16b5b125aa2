//! What the engines of one emulated system are doing, as a CPU thread waiting in the platform's delay sees it:
//! which engines may have runnable work (one bit per engine, set by doorbells), and who sleeps until a batch
//! ends ([`Waiters`]).
//!
//! A delay that finds nothing marked reads one word, so an idle system costs a waiting thread nothing; with
//! work marked it reads a few words per device, never every engine.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use udma::Arch;

use crate::waiters::Waiters;

/// The engine activity of one system.
#[derive(Debug)]
pub(crate) struct Activity {
    /// Per device: bit `e` of word `e / 64` is set while engine `e` may have a runnable queue pair.
    runnable: Vec<Box<[AtomicU64]>>,
    /// Bits set in `runnable`, all devices together.
    marked: AtomicUsize,
    /// Threads asleep until a batch ends.
    pub(crate) waiters: Waiters,
    /// Whether waiting threads execute pending work themselves (`EmuPlatform::set_assist`): the platform's
    /// delays read it, and so do the engines' workers, which leave the work to the waiters when they do.
    assist: AtomicBool,
}

impl Activity {
    /// A system of `devices` devices of `arch`, nothing marked.
    pub(crate) fn new(arch: Arch, devices: usize) -> Self {
        let words = (arch.num_engines() as usize).div_ceil(64);
        Activity {
            runnable: (0..devices).map(|_| (0..words).map(|_| AtomicU64::new(0)).collect()).collect(),
            marked: AtomicUsize::new(0),
            waiters: Waiters::new(),
            assist: AtomicBool::new(true),
        }
    }

    /// Do waiting threads execute pending work (on by default)?
    pub(crate) fn assist(&self) -> bool {
        // Relaxed: a setting read on its own.
        self.assist.load(Ordering::Relaxed)
    }

    /// Turns the waiters' execution of pending work on or off.
    pub(crate) fn set_assist(&self, on: bool) {
        // Relaxed: a setting read on its own.
        self.assist.store(on, Ordering::Relaxed);
    }

    /// Marks engine `eng` of device `dev` as possibly runnable. Called under that engine's register lock, as
    /// is [`Activity::unmark`], so the bit of one engine changes in lock order.
    pub(crate) fn mark(&self, dev: usize, eng: u32) {
        let (word, bit) = Self::slot(eng);
        let w = &self.runnable[dev][word];
        // Already set (an engine stays marked until a claim finds it idle): a plain load instead of a locked
        // read-modify-write, which costs most on the doorbell path. Only this engine's register lock, which the
        // caller holds, changes this bit, so it cannot be cleared between this load and the return.
        // Relaxed: the bit is a hint ordered by the register lock it is changed under; a waiter that reads it
        // still takes the engine's locks before it executes anything.
        if w.load(Ordering::Relaxed) & bit != 0 {
            return;
        }
        // Relaxed: as above.
        if w.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            // Relaxed: a count of hints (as above).
            self.marked.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Clears the mark of engine `eng` of device `dev` (it has nothing runnable). Under its register lock.
    pub(crate) fn unmark(&self, dev: usize, eng: u32) {
        let (word, bit) = Self::slot(eng);
        // Relaxed: see `mark`.
        if self.runnable[dev][word].fetch_and(!bit, Ordering::Relaxed) & bit != 0 {
            // Relaxed: see `mark`.
            self.marked.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Is any engine marked? One load: what a delay pays when the system is idle.
    pub(crate) fn any(&self) -> bool {
        // Relaxed: a hint (see `mark`). A thread sees its own doorbell's mark by program order.
        self.marked.load(Ordering::Relaxed) != 0
    }

    /// The marked engines of device `dev`, in engine order (a snapshot).
    pub(crate) fn marked(&self, dev: usize) -> impl Iterator<Item = u32> + '_ {
        self.runnable[dev].iter().enumerate().flat_map(|(w, word)| {
            // Relaxed: a hint (see `mark`).
            let mut bits = word.load(Ordering::Relaxed);
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    w as u32 * 64 + b
                })
            })
        })
    }

    fn slot(eng: u32) -> (usize, u64) {
        ((eng / 64) as usize, 1u64 << (eng % 64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_counted_once_and_listed_in_engine_order() {
        let a = Activity::new(Arch::V3, 2);
        assert!(!a.any());
        for e in [131, 0, 64, 63, 131] {
            a.mark(1, e);
        }
        assert_eq!(a.marked.load(Ordering::Relaxed), 4);
        assert_eq!(a.marked(1).collect::<Vec<_>>(), vec![0, 63, 64, 131]);
        assert_eq!(a.marked(0).count(), 0);
        a.unmark(1, 63);
        a.unmark(1, 63);
        a.unmark(0, 5);
        assert_eq!(a.marked.load(Ordering::Relaxed), 3);
        assert_eq!(a.marked(1).collect::<Vec<_>>(), vec![0, 64, 131]);
        for e in [0, 64, 131] {
            a.unmark(1, e);
        }
        assert!(!a.any());
    }
}
