//! A wall-clock bound on one marker wait, for tests: with emulation budgets (×100000, immune to a
//! descheduled engine worker) a completion that never comes would keep the op layer polling for up to hours;
//! under a limit, a thread whose marker word has not held its value for that long panics, naming the word, so
//! the test fails within the limit instead.
//!
//! "One wait" is a series of delays on the same word by the same thread, each starting within [`GAP`] of the
//! previous one's end, none of which saw the value (the op layer's first wait and its 1 µs polls).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Delays on the same word further apart than this start a new wait.
const GAP: Duration = Duration::from_millis(1);

thread_local! {
    /// This thread's current wait: (word, when it began, when its last delay returned).
    static WAIT: Cell<Option<(usize, Instant, Instant)>> = const { Cell::new(None) };
}

/// The limit, in µs (0: none).
#[derive(Debug, Default)]
pub(crate) struct WaitLimit(AtomicU64);

impl WaitLimit {
    pub(crate) fn set(&self, limit: Option<Duration>) {
        let us = limit.map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1));
        // Relaxed: a setting read on its own.
        self.0.store(us, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Option<Duration> {
        // Relaxed: a setting read on its own.
        let us = self.0.load(Ordering::Relaxed);
        (us != 0).then(|| Duration::from_micros(us))
    }

    /// Records that a delay on `word` (from `began`) ended, having seen its value or not.
    ///
    /// # Panics
    ///
    /// When the word has not held its value for longer than `limit`: the test's lost completion.
    pub(crate) fn delay_ended(limit: Duration, word: usize, began: Instant, seen: bool) {
        if seen {
            WAIT.set(None);
            return;
        }
        let start = match WAIT.get() {
            Some((w, start, last)) if w == word && began.saturating_duration_since(last) < GAP => start,
            _ => began,
        };
        let now = Instant::now();
        WAIT.set(Some((word, start, now)));
        let waited = now - start;
        assert!(
            waited <= limit,
            "lost completion: the marker word at {word:#x} has not been written after {waited:?} of waiting \
             (test wait limit {limit:?}; the op layer's budget would have kept polling)"
        );
    }
}
