//! Loom model of the waiter registry (`Waiters`): a CPU thread that registers, finds the marker not yet
//! written and parks is always woken by the engine that writes it and then notifies — whatever the
//! interleaving. The waiter runs the loop of the platform's delay (`delay::sleep_until_batch_end`) minus the
//! park's time cap, so a lost wake-up deadlocks the model.
//!
//! Only built with `--cfg loom`:
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test -p ndma-emu --test loom_waiters --release`
#![cfg(loom)]

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU32;
use loom::sync::Arc;
use loom::thread;
use ndma_emu::loom_api::Waiters;

const MARKER: u32 = 0xabcd_ef01;

/// Waits for `word` to hold the marker: register, look, park; deregister after each wake.
fn wait(waiters: &Waiters, word: &AtomicU32) {
    loop {
        let _registered = waiters.register();
        if word.load(Ordering::Acquire) == MARKER {
            return;
        }
        thread::park();
    }
}

#[test]
fn a_sleeping_waiter_returns_when_the_marker_lands() {
    loom::model(|| {
        let waiters = Arc::new(Waiters::new());
        let word = Arc::new(AtomicU32::new(0));
        let engine = {
            let (waiters, word) = (waiters.clone(), word.clone());
            thread::spawn(move || {
                // The marker is the batch's last write, stored with Release; then the batch end notifies.
                word.store(MARKER, Ordering::Release);
                waiters.notify();
            })
        };
        wait(&waiters, &word);
        engine.join().unwrap();
    });
}

/// Two waiters of two batches (a registry shared by two waits); bounded to three preemptions (the exhaustive
/// search does not finish in reasonable time).
#[test]
fn two_waiters_of_two_batches_both_return() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let waiters = Arc::new(Waiters::new());
        let words = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let engine = {
            let (waiters, words) = (waiters.clone(), words.clone());
            thread::spawn(move || {
                for w in words.iter() {
                    w.store(MARKER, Ordering::Release);
                    waiters.notify();
                }
            })
        };
        let other = {
            let (waiters, words) = (waiters.clone(), words.clone());
            thread::spawn(move || wait(&waiters, &words[1]))
        };
        wait(&waiters, &words[0]);
        other.join().unwrap();
        engine.join().unwrap();
    });
}
