//! CPU threads asleep in the platform's delay while an engine is mid-batch, and how an engine wakes them.
//!
//! A waiter [`Waiters::register`]s, then looks at the word it waits for (and at whether an engine is still
//! busy), and only then parks. An engine writes host memory (the completion marker is the last word of its
//! batch), then calls [`Waiters::notify`] after each batch. Each side's store comes before its SeqCst fence
//! and its load after it, so at least one side sees the other: the waiter sees the word, or the engine sees
//! the registration and unparks the waiter (the unpark token makes a later `park` return at once). A sleeping
//! waiter therefore returns the moment the marker lands. `tests/loom_waiters.rs` model-checks this.

use std::sync::atomic::Ordering;

use crate::sync::thread::{self, Thread};
use crate::sync::{fence, lock, AtomicUsize, Mutex};

/// The registry of sleeping waiters of one emulated system.
#[derive(Debug, Default)]
pub struct Waiters {
    /// Registered waiters: an engine with nobody to wake reads only this.
    count: AtomicUsize,
    threads: Mutex<Vec<Thread>>,
}

/// A registration; dropping it deregisters the thread.
#[derive(Debug)]
#[must_use = "a waiter is registered only while the registration lives"]
pub struct Registration<'a> {
    waiters: &'a Waiters,
    thread: Thread,
}

impl Waiters {
    /// An empty registry.
    pub fn new() -> Self {
        Waiters::default()
    }

    /// Registers the calling thread: until the registration drops, [`Waiters::notify`] unparks it. Look at
    /// the awaited word only after this returns.
    pub fn register(&self) -> Registration<'_> {
        let me = thread::current();
        lock(&self.threads).push(me.clone());
        // Relaxed: the fence below orders it before the caller's look at the word.
        self.count.fetch_add(1, Ordering::Relaxed);
        // SeqCst fence: orders the registration before the waiter's load of the word; pairs with the fence in
        // `notify` (see the module doc).
        fence(Ordering::SeqCst);
        Registration { waiters: self, thread: me }
    }

    /// Engine side, after a batch (its host writes done): unparks every registered waiter.
    pub fn notify(&self) {
        // SeqCst fence: orders the batch's writes (the marker's Release store) before the load of `count`;
        // pairs with the fence in `register`.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        for t in lock(&self.threads).iter() {
            t.unpark();
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut threads = lock(&self.waiters.threads);
        if let Some(i) = threads.iter().position(|t| t.id() == self.thread.id()) {
            threads.swap_remove(i);
        }
        // Relaxed: after deregistering, a missed or extra unpark is harmless (a parked thread re-checks).
        self.waiters.count.fetch_sub(1, Ordering::Relaxed);
    }
}
