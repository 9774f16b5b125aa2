//! `ExecPolicy::Threaded`: one worker thread per engine, spawned on the engine's first doorbell. It runs the
//! engine until idle, spins briefly for more work, then parks until a doorbell unparks it (the hand-off is
//! [`crate::handoff::WorkerSignal`]). Workers stop and are joined when the device shuts down.
//!
//! A parked worker can take milliseconds to run again on a small virtual machine (its vCPU halts and must be
//! woken by the hypervisor, or the scheduler queues it behind the thread that rang). Nothing waits for that:
//! a CPU thread waiting for the work's completion runs it itself (`Engine::assist`), and a worker that wakes to
//! find the work done parks again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::device::DeviceCore;
use crate::lock::lock;
use crate::sync::thread;

/// How long an idle worker spins for the next doorbell before it parks: long enough to catch the next batch
/// of a busy op layer (which acks, restages and rings within a few µs), short enough that an idle process
/// costs nothing. Waiting threads do not depend on it (they execute work a parked worker has not picked up).
const IDLE_SPIN: Duration = Duration::from_micros(30);

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
    e.signal.set_awake();
    while !stopping() {
        let seen = e.signal.rung();
        e.run_until_idle_or_stopped(dev, &stopping);
        let idle_since = Instant::now();
        while !e.signal.rung_since(seen) && !stopping() && idle_since.elapsed() < IDLE_SPIN {
            std::hint::spin_loop();
        }
        if !e.signal.rung_since(seen) {
            e.signal.park_unless_rung(seen, &stopping);
        }
    }
}
