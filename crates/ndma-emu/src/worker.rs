//! `ExecPolicy::Threaded`: one worker thread per engine, spawned on the engine's first doorbell. It runs the
//! engine until idle; after useful work it spins briefly for more; then it dozes in short timed sleeps while
//! doorbells keep ringing, and parks once they stop, until a doorbell unparks it (the hand-off is
//! [`crate::handoff::WorkerSignal`]). A worker rung for work that finds the engine's exec lock held looks
//! again after a nap rather than sleeping: the holder may be executing (then it runs until idle), but a queue
//! reset, a settle or a statistics read holds the lock too and executes nothing. Workers stop and are joined
//! when the device shuts down; later doorbells execute inline on the ringing thread.
//!
//! Waking a sleeping worker is slow on a small virtual machine: the doorbell pays a system call and an
//! inter-processor interrupt (10–20 µs here), and the worker may then wait for a CPU for milliseconds.
//! Nothing waits for that: a doorbell does not wake a dozing worker at all, and a CPU thread waiting for the
//! work's completion runs it itself when the worker is not running (`Engine::assist`). So a synchronous
//! caller's copies execute on its own thread, and the worker carries work that nobody waits for (it finds it
//! at the end of a nap).
//!
//! Whether the worker spins for the next doorbell after a batch depends on who else executes: with waiters
//! executing (the platform's assist, the default) it does not, because a spinning worker takes each new
//! doorbell's work a few hundred ns before the thread that rang it comes to wait, and that thread — which
//! leaves work to a running worker — then waits for the hand-off across cores: measured here, a 4 KiB
//! synchronous copy took 300 ns on the caller's thread and 750 ns handed to a hot worker, and once hot the
//! worker stayed so as long as the copies kept coming. With the assist off the worker is the only executor,
//! so it spins.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::device::DeviceCore;
use crate::handoff::Doze;
use crate::lock::lock;
use crate::stats::EngineCounters;
use crate::sync::thread;

/// How long a worker that just executed something spins for the next doorbell before it dozes, when waiting
/// threads do not execute work themselves (see the module doc): long enough to catch the next batch of a busy
/// op layer (which acks, restages and rings within a few µs), short enough not to burn a shared core.
const IDLE_SPIN: Duration = Duration::from_micros(30);

/// Then it dozes: naps of 100 µs (plus the timer slack) — a few percent of a core — for as long as doorbells
/// keep ringing, and parks after 20 naps (2–3 ms) without one: an idle process costs nothing after that.
const DOZE: Doze = Doze { naps: 20, nap: Duration::from_micros(100) };

/// Makes sure engine `eng` has a worker, spawning it if needed. False once the device is shutting down or if
/// the OS refuses a thread (the caller then executes inline).
pub(crate) fn ensure(dev: &Arc<DeviceCore>, eng: u32) -> bool {
    let Some(e) = dev.engines.get(eng as usize) else { return false };
    // Acquire: pairs with the Release store in `DeviceCore::shutdown`. Once it is set the worker is stopping
    // or joined (it still counts as attached): ringing it would leave the work to nobody.
    if dev.shutdown.load(Ordering::Acquire) {
        return false;
    }
    if e.signal.has_worker() {
        return true;
    }
    // The workers list lock serialises spawning with shutdown: a worker is either pushed before shutdown
    // takes the list (and is joined), or never spawned. It also makes a racing doorbell wait until the
    // worker is attached to the signal, so that doorbell's `ring` can unpark it.
    let mut workers = lock(&dev.workers);
    if e.signal.has_worker() {
        return true;
    }
    // Relaxed is enough under the workers lock, which `shutdown` holds while setting the flag.
    if dev.shutdown.load(Ordering::Relaxed) {
        return false;
    }
    let d = Arc::clone(dev);
    let spawned = thread::Builder::new().name(format!("ndma-emu d{} e{}", dev.index, eng)).spawn(move || run(&d, eng));
    match spawned {
        Ok(handle) => {
            e.signal.attach(handle.thread().clone());
            workers.push(handle);
            true
        }
        Err(err) => {
            tracing::error!(engine = eng, %err, "cannot spawn engine worker; executing inline");
            false
        }
    }
}

fn run(dev: &DeviceCore, eng: u32) {
    let Some(e) = dev.engines.get(eng as usize) else { return };
    // Acquire on `shutdown`: pairs with the Release store in `DeviceCore::shutdown`; nothing else rides on it.
    let stopping = || dev.shutdown.load(Ordering::Acquire);
    e.signal.set_running();
    while !stopping() {
        let seen = e.signal.rung();
        // Spin for the next doorbell only after useful work (a worker that woke to find the work already done
        // by a waiting thread goes back to dozing), and only when no waiting thread would execute it.
        let turn = e.run_unless_busy(dev, &stopping);
        if turn.blocked {
            if turn.ran {
                e.stats.worker_ran(false);
            }
            // Another thread holds the exec lock. An executor runs until idle, but a reset, a settle or a
            // statistics read lets go having run nothing, and nobody would then execute what we were rung
            // for: look again after a nap instead of sleeping until the next doorbell.
            EngineCounters::bump(&e.stats.worker_blocked, 1);
            e.signal.nap_dozing(DOZE.nap);
            continue;
        }
        if turn.ran {
            let spin = !dev.activity.assist();
            e.stats.worker_ran(spin);
            if spin {
                let idle_since = Instant::now();
                while !e.signal.rung_since(seen) && !stopping() && idle_since.elapsed() < IDLE_SPIN {
                    std::hint::spin_loop();
                }
            }
        }
        if !e.signal.rung_since(seen) {
            e.signal.idle(seen, &stopping, DOZE);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use udma::{Arch, Barrier};

    use crate::lock::lock;
    use crate::test_utils::rig::{poll, Rig};
    use crate::{ExecPolicy, OrderingMode};

    /// A doorbell rung while another thread holds the engine's exec lock without executing anything (as a
    /// queue reset, a settle or a statistics read do): the worker finds the lock held and must look again
    /// once it is free, because the holder lets go having run nothing and nobody else would. The worker used
    /// to take the holder for an executor and park, leaving the work pending for good. (A rig polls its
    /// marker without the platform's assist: only the worker executes its copies.)
    #[test]
    fn a_worker_that_finds_exec_held_by_a_non_executor_runs_the_work_once_it_is_free() {
        let mut rig = Rig::new(Arch::V3, ExecPolicy::Threaded, OrderingMode::Strict);
        let (_src, dst, s) = rig.page_pair();
        rig.copy(s, dst.pa, 4096, Barrier::WriteBarrier); // spawns the worker
        let core = Arc::clone(rig.dev.core());
        let e = &core.engines[rig.eng as usize];
        let (dev, eng) = (Arc::clone(&rig.dev), rig.eng);
        let blocked = || dev.engine_stats(eng).expect("engine").worker_blocked;
        let n = {
            let _held = lock(&e.exec);
            let before = blocked();
            let n = rig.stage(s, dst.pa, 4096, Barrier::WriteBarrier) + 1;
            rig.stage_marker();
            rig.q.copy_start(&*rig.dev, n, n).expect("doorbell");
            assert!(poll(|| blocked() > before), "the worker never came for the work");
            assert!(!rig.marker_landed(), "nothing executes while the lock is held");
            n
        };
        assert!(rig.poll_marker(), "the doorbell's work was left to nobody");
        rig.q.ack(n);
    }

    /// After `EmuDevice::shutdown`, a doorbell executes inline on the thread that rings it, as `shutdown`
    /// documents. The joined worker still counted as attached, so the doorbell rang it and nobody ran the
    /// work.
    #[test]
    fn a_doorbell_after_shutdown_executes_inline() {
        let mut rig = Rig::new(Arch::V3, ExecPolicy::Threaded, OrderingMode::Strict);
        let (_src, dst, s) = rig.page_pair();
        rig.copy(s, dst.pa, 4096, Barrier::WriteBarrier); // spawns the worker
        rig.dev.shutdown();
        let n = rig.stage(s, dst.pa, 4096, Barrier::WriteBarrier) + 1;
        rig.stage_marker();
        rig.q.copy_start(&*rig.dev, n, n).expect("doorbell");
        assert!(rig.marker_landed(), "executed by the doorbell itself");
        rig.q.ack(n);
    }
}
