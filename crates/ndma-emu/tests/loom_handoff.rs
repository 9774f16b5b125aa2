//! Loom model of the doorbell → worker hand-off (`WorkerSignal`): however a doorbell interleaves with a worker
//! that finds no work, dozes and parks, the work is taken — no lost wake-up — and shutdown reaches a parked
//! worker. The worker below runs the real worker's loop (`worker::run`) minus its bounded spin, with one nap
//! (a loom yield: loom has no time) before it parks; "work" stands for the queue's `pending` count, published
//! before the doorbell rings.
//!
//! Only built with `--cfg loom`:
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test -p ndma-emu --test loom_handoff --release`
#![cfg(loom)]

use std::sync::atomic::Ordering;

use loom::sync::atomic::{AtomicBool, AtomicU32};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

use ndma_emu::loom_api::{Doze, WorkerSignal};

const DOZE: Doze = Doze { naps: 1, nap: Duration::from_micros(100) };

/// The worker loop: note the doorbell count, take the published work, doze and park unless a doorbell rang
/// since.
/// Returns once it took `expect` items or `stop` holds.
fn worker(signal: &WorkerSignal, work: &AtomicU32, stop: &AtomicBool, expect: u32) -> u32 {
    let stopping = || stop.load(Ordering::Acquire);
    signal.set_running();
    let mut taken = 0;
    while !stopping() {
        let seen = signal.rung();
        taken += work.swap(0, Ordering::AcqRel);
        if taken == expect {
            break;
        }
        if !signal.rung_since(seen) {
            signal.idle(seen, &stopping, DOZE);
        }
    }
    taken
}

/// Exhaustive for one doorbell racing the worker's first look.
#[test]
fn a_doorbell_never_leaves_work_with_a_parked_worker() {
    loom::model(|| {
        let signal = Arc::new(WorkerSignal::new());
        let work = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let w = {
            let (signal, work, stop) = (signal.clone(), work.clone(), stop.clone());
            thread::spawn(move || worker(&signal, &work, &stop, 1))
        };
        // As `worker::ensure` does before the first doorbell rings.
        signal.attach(w.thread().clone());
        work.fetch_add(1, Ordering::Release);
        signal.ring();
        // A lost wake-up leaves the worker parked forever: loom reports the deadlock.
        assert_eq!(w.join().unwrap(), 1);
    });
}

/// Two doorbells from two threads, the second possibly while the worker is between its look and its park;
/// bounded to three preemptions (the exhaustive search does not finish in reasonable time).
#[test]
fn two_doorbells_never_leave_work_with_a_parked_worker() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let signal = Arc::new(WorkerSignal::new());
        let work = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let w = {
            let (signal, work, stop) = (signal.clone(), work.clone(), stop.clone());
            thread::spawn(move || worker(&signal, &work, &stop, 2))
        };
        // As `worker::ensure` does before the first doorbell rings.
        signal.attach(w.thread().clone());
        let d = {
            let (signal, work) = (signal.clone(), work.clone());
            thread::spawn(move || {
                work.fetch_add(1, Ordering::Release);
                signal.ring();
            })
        };
        work.fetch_add(1, Ordering::Release);
        signal.ring();
        d.join().unwrap();
        // A lost wake-up leaves the worker parked forever: loom reports the deadlock.
        assert_eq!(w.join().unwrap(), 2);
    });
}

#[test]
fn shutdown_reaches_a_worker_whatever_it_is_doing() {
    loom::model(|| {
        let signal = Arc::new(WorkerSignal::new());
        let work = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let w = {
            let (signal, work, stop) = (signal.clone(), work.clone(), stop.clone());
            thread::spawn(move || worker(&signal, &work, &stop, u32::MAX))
        };
        signal.attach(w.thread().clone());
        // As `DeviceCore::shutdown`: set the flag, then wake unconditionally.
        stop.store(true, Ordering::Release);
        signal.wake();
        assert_eq!(w.join().unwrap(), 0);
    });
}
