//! The physical floor of a two-thread completion: a cache-line ping-pong between two threads. One thread
//! writes a number into a cache line and spins until the other answers with the next number on another line;
//! the time from the write to seeing the answer is one round trip, the least any hand-off of work to another
//! thread and back (a doorbell to an engine worker, a marker back to the poller) can cost on this machine
//! with its current vCPU placement.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Instant;

use super::latency::{Latency, Recorder};

/// A word on cache lines of its own (two: adjacent-line prefetch pairs them).
#[repr(align(128))]
struct Line(AtomicU64);

/// Spins until `line` holds `want`; yields now and then so two threads that share one core still progress.
fn await_value(line: &Line, want: u64) {
    let mut spins = 0u32;
    // Acquire: pairs with the other thread's Release store, as a completion poller's load would.
    while line.0.load(Ordering::Acquire) != want {
        spins += 1;
        if spins % 4096 == 0 {
            thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// `n` timed round trips (after `n / 10` untimed ones) between this thread and a helper thread; median and
/// p99.
pub fn pingpong(n: usize) -> Latency {
    let (ping, pong) = (Line(AtomicU64::new(0)), Line(AtomicU64::new(0)));
    let warm = (n / 10).max(100) as u64;
    let total = warm + n as u64;
    let mut rec = Recorder::new();
    thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=total {
                await_value(&ping, i);
                // Release: the answer is ordered after the read of the ping, as a marker after its data.
                pong.0.store(i, Ordering::Release);
            }
        });
        for i in 1..=total {
            let t0 = Instant::now();
            // Release: pairs with the helper's Acquire load.
            ping.0.store(i, Ordering::Release);
            await_value(&pong, i);
            if i > warm {
                rec.record(t0.elapsed());
            }
        }
    });
    rec.latency()
}
