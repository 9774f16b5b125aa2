//! `ExecPolicy::Threaded`: one worker thread per engine, spawned on the engine's first doorbell. It runs the
//! engine until idle, spins briefly for more work, then parks; doorbells unpark it. Workers stop and are
//! joined when the device shuts down.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use crate::device::DeviceCore;
use crate::lock::lock;

/// How long an idle worker spins before parking: long enough to catch the next batch of a busy op layer
/// (which restages and rings within a few µs), short enough not to burn a shared core.
const IDLE_SPIN: Duration = Duration::from_micros(30);

/// After the spin, how long an idle worker keeps polling for doorbells while yielding the CPU before it parks.
/// A parked worker is woken through the scheduler, and on a small virtual machine that wake can take
/// milliseconds (an idle vCPU is descheduled by the hypervisor) — longer than the silicon poll budget of a
/// small device-to-device batch (~210 µs). Yielding keeps the worker runnable without starving other threads.
const IDLE_YIELD: Duration = Duration::from_millis(2);

/// The worker of engine `eng`, spawning it if needed; `None` once the device is shutting down or if the OS
/// refuses a thread (the caller then executes inline).
pub(crate) fn ensure(dev: &Arc<DeviceCore>, eng: u32) -> Option<&Thread> {
    let e = dev.engines.get(eng as usize)?;
    if let Some(t) = e.worker.get() {
        return Some(t);
    }
    // The workers list lock serialises spawning with shutdown: a worker is either pushed before shutdown
    // takes the list (and is joined), or never spawned.
    let mut workers = lock(&dev.workers);
    if let Some(t) = e.worker.get() {
        return Some(t);
    }
    // Relaxed is enough under the workers lock, which `shutdown` holds while setting the flag.
    if dev.shutdown.load(Ordering::Relaxed) {
        return None;
    }
    let d = Arc::clone(dev);
    let handle = thread::Builder::new()
        .name(format!("ndma-emu d{} e{}", dev.index, eng))
        .spawn(move || run(&d, eng))
        .map_err(|err| tracing::error!(engine = eng, %err, "cannot spawn engine worker; executing inline"))
        .ok()?;
    let t = handle.thread().clone();
    workers.push(handle);
    let _ = e.worker.set(t);
    e.worker.get()
}

fn run(dev: &DeviceCore, eng: u32) {
    let Some(e) = dev.engines.get(eng as usize) else { return };
    // Acquire on `shutdown`: pairs with the Release store in `DeviceCore::shutdown`; nothing else rides on it.
    let stopping = || dev.shutdown.load(Ordering::Acquire);
    loop {
        if stopping() {
            return;
        }
        // Acquire pairs with the doorbell's Release increment (see `Engine::wake`).
        let seen = e.kick.load(Ordering::Acquire);
        e.run_until_idle_or_stopped(dev, &stopping);
        let idle_since = Instant::now();
        while e.kick.load(Ordering::Acquire) == seen && !stopping() {
            let idle = idle_since.elapsed();
            if idle < IDLE_SPIN {
                std::hint::spin_loop();
            } else if idle < IDLE_SPIN + IDLE_YIELD {
                thread::yield_now();
            } else {
                break;
            }
        }
        if e.kick.load(Ordering::Acquire) == seen && !stopping() {
            // A doorbell racing with this check has already unparked us or will: the park token is sticky,
            // so `park` then returns at once and the loop re-runs.
            thread::park();
        }
    }
}
