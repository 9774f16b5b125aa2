//! NeuronCore resets and the V2 reset-window hardware bug (spec §5, FACTS §4 `nr_op_in_reset_wnd`).
//!
//! Each NC has the timestamps the driver's reset thread keeps: `reset_start_time` is stamped when a reset
//! begins, `reset_end_time` when it has finished. While a reset is in progress the end is the previous one,
//! so `end ≤ start`. Device bring-up counts as a reset that finished just before the op layer got the device.
//!
//! On V2 silicon a queue of an NC that is being reset hangs if work is handed to it: its marker never lands
//! until the ring is re-initialised (`RST_Q`). The model reproduces that: while a reset of NC n is in
//! progress, the engine hangs any runnable queue owned by NC n (its H2T queue and its SENG engines'
//! queues) instead of executing it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use udma::Arch;

use crate::lock::lock;

/// Jiffies clock the reset thread stamps with (the platform's).
pub type JiffiesClock = Arc<dyn Fn() -> u64 + Send + Sync>;

#[derive(Debug, Clone, Copy, Default)]
struct NcResetTimes {
    start: u64,
    /// End of the latest *finished* reset.
    end: u64,
    /// When the reset in progress (if any) finishes.
    finishes_at: Option<u64>,
}

/// The reset state of one device's NeuronCores.
pub(crate) struct NcResets {
    arch: Arch,
    clock: OnceLock<JiffiesClock>,
    ncs: Mutex<Vec<NcResetTimes>>,
    /// NCs whose latest reset has not been folded into the finished state (`finishes_at` is set): while
    /// it is 0 no reset is in progress and [`NcResets::hangs`] needs neither the clock nor the lock.
    unsettled: AtomicUsize,
}

impl std::fmt::Debug for NcResets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcResets").field("arch", &self.arch).field("ncs", &self.ncs).finish()
    }
}

impl NcResets {
    pub(crate) fn new(arch: Arch) -> Self {
        NcResets {
            arch,
            clock: OnceLock::new(),
            ncs: Mutex::new(vec![NcResetTimes::default(); arch.ncs_per_device() as usize]),
            unsettled: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.clock.get().map_or(0, |c| c())
    }

    /// Connects the clock and stamps the bring-up reset: finished one jiffy before now.
    pub(crate) fn set_clock(&self, clock: JiffiesClock) {
        let now = clock();
        if self.clock.set(clock).is_ok() {
            let mut ncs = lock(&self.ncs);
            for t in ncs.iter_mut() {
                *t = NcResetTimes { start: now.saturating_sub(2), end: now.saturating_sub(1), finishes_at: None };
            }
            // Relaxed: under the `ncs` lock, and nothing is in progress any more.
            self.unsettled.store(0, Ordering::Relaxed);
        }
    }

    /// Folds a reset whose time is up into the finished state (under the `ncs` lock).
    fn settle(&self, t: &mut NcResetTimes, now: u64) {
        if let Some(at) = t.finishes_at {
            if now >= at {
                t.end = at;
                t.finishes_at = None;
                // Release: pairs with the Acquire in `hangs` (the count only gates taking the lock).
                self.unsettled.fetch_sub(1, Ordering::Release);
            }
        }
    }

    /// Starts a reset of `nc` now, finishing `duration` jiffies later (at least one).
    pub(crate) fn begin(&self, nc: u32, duration: u64) -> bool {
        let now = self.now();
        let mut ncs = lock(&self.ncs);
        let Some(t) = ncs.get_mut(nc as usize) else { return false };
        self.settle(t, now);
        if t.finishes_at.is_none() {
            // Release: a doorbell after this call hands its work over after this store, and `hangs` loads it
            // with Acquire, so an engine claiming that work sees the reset.
            self.unsettled.fetch_add(1, Ordering::Release);
        }
        t.start = now;
        // Saturating: a reset longer than the jiffies counter can reach simply never ends.
        t.finishes_at = Some(now.saturating_add(duration.max(1)));
        self.debug_check(&ncs);
        true
    }

    /// Debug builds: `unsettled` counts exactly the NCs whose reset is not folded yet (under the `ncs` lock).
    fn debug_check(&self, ncs: &[NcResetTimes]) {
        // Relaxed: every writer of the count holds the `ncs` lock, which the caller holds.
        let count = self.unsettled.load(Ordering::Relaxed);
        debug_assert_eq!(count, ncs.iter().filter(|t| t.finishes_at.is_some()).count(), "unsettled out of step");
    }

    /// `(reset_start_time, reset_end_time)` of `nc` now.
    pub(crate) fn times(&self, nc: u32) -> (u64, u64) {
        let now = self.now();
        let mut ncs = lock(&self.ncs);
        match ncs.get_mut(nc as usize) {
            Some(t) => {
                self.settle(t, now);
                let times = (t.start, t.end);
                self.debug_check(&ncs);
                times
            }
            None => (0, 1),
        }
    }

    /// Is a reset of `nc` in progress now?
    pub(crate) fn in_progress(&self, nc: u32) -> bool {
        let (start, end) = self.times(nc);
        self.clock.get().is_some() && end <= start
    }

    /// The V2 bug: does work handed to queue `qid` of engine `eng` now hang? Which NC owns the queue is a
    /// fact of the device's topology ([`Arch::queue_owner`]).
    pub(crate) fn hangs(&self, eng: u32, qid: u32) -> bool {
        self.arch == Arch::V2
            && self.unsettled.load(Ordering::Acquire) > 0
            && self.arch.queue_owner(eng, qid).is_some_and(|nc| self.in_progress(nc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A hand-driven jiffies clock.
    fn clock() -> (Arc<AtomicU64>, JiffiesClock) {
        let now = Arc::new(AtomicU64::new(1000));
        let c = Arc::clone(&now);
        // Relaxed: the test thread is the only one reading or moving it.
        (now, Arc::new(move || c.load(Ordering::Relaxed)))
    }

    /// For every engine and queue of both arches, a reset of one NC hangs exactly the queues that NC owns,
    /// and only on V2. The owners are the hardware topology's; this must agree with the op layer's DHAL,
    /// which asks the same facts.
    #[test]
    fn a_reset_hangs_exactly_the_queues_its_nc_owns() {
        for arch in Arch::ALL {
            let dhal = ndma::dhal(arch);
            for nc in 0..arch.ncs_per_device() {
                assert_eq!(arch.queue_owner(dhal.h2t_eng_id(nc), dhal.h2t_def_qid(nc)), Some(nc), "{arch} nc {nc}");
            }
            for reset_nc in 0..arch.ncs_per_device() {
                let (now, c) = clock();
                let resets = NcResets::new(arch);
                resets.set_clock(c);
                for eng in 0..arch.num_engines() {
                    for qid in 0..udma::DMA_MAX_Q {
                        assert!(!resets.hangs(eng, qid), "{arch}: nothing hangs before a reset");
                    }
                }
                assert!(resets.begin(reset_nc, 5));
                for eng in 0..arch.num_engines() {
                    for qid in 0..udma::DMA_MAX_Q {
                        let owned = arch.queue_owner(eng, qid) == Some(reset_nc);
                        let want = arch == Arch::V2 && owned;
                        assert_eq!(resets.hangs(eng, qid), want, "{arch} reset of nc {reset_nc}: engine {eng} q {qid}");
                    }
                }
                // Relaxed: see `clock`.
                now.fetch_add(5, Ordering::Relaxed);
                assert!(!resets.in_progress(reset_nc));
                assert!((0..arch.num_engines()).all(|eng| !resets.hangs(eng, 0)), "{arch}: the reset is over");
            }
        }
    }

    /// The count of unfinished resets that lets `hangs` skip the lock stays exact through overlapping resets
    /// of two NCs, a reset restarted while in progress, one restarted after its time was up but before
    /// anything folded it, and the end of all of them: each answer matches the reset times.
    #[test]
    fn hangs_follows_the_reset_times_through_overlapping_and_restarted_resets() {
        let arch = Arch::V2;
        let dhal = ndma::dhal(arch);
        let q = |nc| (dhal.h2t_eng_id(nc), dhal.h2t_def_qid(nc));
        let (now, c) = clock();
        let resets = NcResets::new(arch);
        resets.set_clock(c);
        // Relaxed: see `clock`.
        let tick = |n| now.fetch_add(n, Ordering::Relaxed);
        let check = |what: &str| {
            for nc in 0..arch.ncs_per_device() {
                let (eng, qid) = q(nc);
                assert_eq!(resets.hangs(eng, qid), resets.in_progress(nc), "{what}: nc {nc}");
            }
        };
        assert!(resets.begin(0, 10));
        assert!(resets.begin(1, 3));
        check("two resets");
        assert!(resets.hangs(q(0).0, q(0).1) && resets.hangs(q(1).0, q(1).1));
        tick(3);
        check("nc 1 done");
        assert!(!resets.hangs(q(1).0, q(1).1));
        assert!(resets.begin(0, 10), "restarted while in progress");
        tick(20);
        // NC 0's time is up but nothing has folded it yet; restarting folds it and starts again.
        assert!(resets.begin(0, 2));
        check("nc 0 restarted after its time");
        assert!(resets.hangs(q(0).0, q(0).1));
        tick(2);
        check("all done");
        assert!((0..arch.ncs_per_device()).all(|nc| !resets.hangs(q(nc).0, q(nc).1)));
        // Relaxed: single-threaded test.
        assert_eq!(resets.unsettled.load(Ordering::Relaxed), 0, "every reset folded");
    }
}
