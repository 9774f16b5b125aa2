//! `ExecPolicy::Threaded`: one worker thread per engine, spawned on the engine's first doorbell. It runs the
//! engine until idle; after useful work it spins briefly for more; then it dozes in short timed sleeps while
//! doorbells keep ringing, and parks once they stop, until a doorbell unparks it (the hand-off is
//! [`crate::handoff::WorkerSignal`]). Workers stop and are joined when the device shuts down.
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
        if e.run_unless_busy(dev, &stopping) {
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
