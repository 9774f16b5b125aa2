//! How a CPU thread waits in the platform's delays (`udelay`, `delay_until`) on the real clock.
//!
//! The op layer waits while the model's engines work, and on a small machine both compete for the same
//! cores. So a waiting thread:
//!
//! 1. returns the moment the awaited word holds its value ([`WaitTiming::Marker`]), or waits the whole delay
//!    ([`WaitTiming::Driver`]);
//! 2. runs pending work itself when nobody is executing it — at once when the engine's worker is not running
//!    (dozing, parked, or absent), after [`ASSIST_GRACE`] when it runs but has not picked the work up (it may
//!    be off its CPU): the same engine code, found through the doorbells' marks, so a wait never depends on a
//!    descheduled worker. A delay that is up offers once more before it returns;
//! 3. while an engine executes (or a running worker is about to pick the work up), spins: the engine is on
//!    another core, and a small or medium batch ends within the spin;
//! 4. once an engine has been mid-batch for [`PARK_AFTER`] of this wait, sleeps until a batch ends (engines
//!    wake registered waiters after each batch), so a long batch does not share its core with a spinning
//!    poller and a descheduled worker cannot run out the op layer's poll budget meanwhile. This is the one case
//!    where a delay lasts longer than asked: the engine is provably busy, and the op layer counts the delay as
//!    one poll however long it lasts;
//! 5. with nothing runnable anywhere (a hung queue, a plain `udelay`), spins for [`SPIN`], then yields through
//!    short delays (it gives the core away if anyone wants it) and sleeps through all but the tail of long
//!    ones — but a wait that has lasted more than twice the delay it asked for spins instead of yielding: on
//!    a loaded machine one yield costs a scheduler time slice, so yielding in each of a hung queue's ~10⁵
//!    polls of 1 µs stretched a 150 ms timeout to a minute. A wait then lasts at most about twice the
//!    driver's busy-waiting `udelay` loop with the CPU share it gets, and still gives the core away while it
//!    keeps to that.
//!
//! "This wait" is a streak: the op layer polls a marker with a series of 1 µs delays on the same word, and a
//! thread-local remembers when the series began and how much delay it has asked for.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::activity::Activity;
use crate::device::DeviceCore;
use crate::engine::Assist;

/// How the platform's marker-aware delay (`Platform::delay_until`) times a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitTiming {
    /// Return as soon as the awaited word holds its value: the first wait and each poll interval end the
    /// moment the engine writes the marker. Poll counts and budgets stay the driver's.
    #[default]
    Marker,
    /// Wait the whole delay first, as the driver's `udelay` does: the faithful timing.
    Driver,
}

/// With nothing runnable, a wait spins this long before it yields.
pub(crate) const SPIN: Duration = Duration::from_micros(10);
/// How long a waiter leaves pending work to a running worker before running it itself. A running worker that
/// is on a CPU picks a doorbell up in well under a microsecond; one that is not may stay off it for milliseconds.
pub(crate) const ASSIST_GRACE: Duration = Duration::from_micros(4);
/// How long into a wait an engine must be busy before the waiter sleeps until its batch ends. Shorter than
/// the tightest silicon budget (a small device→device batch: 200 polls of 1 µs), longer than the model's
/// 1 MiB batch, whose waiter then never pays a wake-up.
pub(crate) const PARK_AFTER: Duration = Duration::from_micros(100);
/// Longest single sleep while an engine is busy (a batch end wakes the waiter before that).
pub(crate) const PARK_CAP: Duration = Duration::from_millis(1);
/// Delays with nothing runnable sleep when at least this much of them is left…
const SLEEP_MIN: Duration = Duration::from_micros(200);
/// …for all but this tail (a sleep overshoots by the timer slack).
const SLEEP_TAIL: Duration = Duration::from_micros(100);
/// Delays on the same word closer together than this continue one wait (a poll loop's calls are ns apart).
const STREAK_GAP: Duration = Duration::from_micros(20);

/// The engines of a system, as a waiting thread sees them.
#[derive(Debug)]
pub(crate) struct Engines {
    pub(crate) cores: Vec<Arc<DeviceCore>>,
    pub(crate) activity: Arc<Activity>,
}

impl Engines {
    /// Offers to execute every marked engine's pending work (see `Engine::assist`); `eager` also takes work a
    /// running worker has not picked up yet, `done()` stops it early. Stops at the first engine it ran, so the
    /// caller re-checks its word.
    pub(crate) fn assist(&self, eager: bool, done: &dyn Fn() -> bool) -> Assist {
        if !self.activity.any() {
            return Assist::Idle;
        }
        let mut found = Assist::Idle;
        for dev in &self.cores {
            for eng in self.activity.marked(dev.index) {
                match dev.engines[eng as usize].assist(dev, eager, done) {
                    Assist::Ran => return Assist::Ran,
                    other => found = found.max(other),
                }
            }
        }
        found
    }
}

/// The word a marker-aware delay watches and the value it waits for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watch<'a> {
    pub(crate) word: &'a AtomicU32,
    pub(crate) value: u32,
}

impl Watch<'_> {
    fn holds(&self) -> bool {
        // Acquire: pairs with the engine's Release store of the word (`Copy::perform`), so what the engine
        // wrote before it is visible to the caller once this returns true.
        self.word.load(Ordering::Acquire) == self.value
    }

    fn key(&self) -> usize {
        self.word as *const AtomicU32 as usize
    }
}

/// A thread's current wait: a series of delays on one word.
#[derive(Debug, Clone, Copy)]
struct Streak {
    /// The word's address.
    key: usize,
    /// When the first delay of the series began.
    began: Instant,
    /// When the last delay returned.
    last: Instant,
    /// The delay the series asked for so far: where it should be, had every delay lasted exactly its length.
    asked: Duration,
}

thread_local! {
    /// The current wait of this thread. Cleared when a delay sees its word.
    static STREAK: Cell<Option<Streak>> = const { Cell::new(None) };
}

/// When the wait that a delay on `watch` starting `now` belongs to began, and how much delay it had asked for
/// before this one.
fn streak_start(watch: Option<Watch<'_>>, now: Instant) -> (Instant, Duration) {
    let Some(w) = watch else { return (now, Duration::ZERO) };
    match STREAK.get() {
        Some(s) if s.key == w.key() && now.saturating_duration_since(s.last) < STREAK_GAP => (s.began, s.asked),
        _ => (now, Duration::ZERO),
    }
}

fn streak_end(watch: Option<Watch<'_>>, began: Instant, asked: Duration, seen: bool) {
    if let Some(w) = watch {
        STREAK.set((!seen).then(|| Streak { key: w.key(), began, last: Instant::now(), asked }));
    }
}

/// What a delay with nothing runnable does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdlePause {
    /// Sleep this long (a long delay, all but its tail).
    Sleep(Duration),
    /// Spin briefly: early in a wait, or far behind its schedule.
    Spin,
    /// Give the core away if anyone wants it.
    Yield,
}

/// The idle policy of point 5 of the module doc: `left` of this delay, `waited` since the wait began, and
/// `asked`, the delay the wait has asked for up to now (its earlier delays, and this one as far as it went).
fn idle_pause(left: Duration, waited: Duration, asked: Duration) -> IdlePause {
    if left >= SLEEP_MIN {
        IdlePause::Sleep(left - SLEEP_TAIL)
    } else if waited < SPIN || waited > asked * 2 {
        IdlePause::Spin
    } else {
        IdlePause::Yield
    }
}

/// A real-clock delay of `us` µs. With `watch` and [`WaitTiming::Marker`] it returns as soon as the word holds
/// its value; otherwise it waits the whole delay (longer only while an engine is busy, see the module doc).
/// Returns whether the word held its value at the end (false without a word).
pub(crate) fn wait(engines: Option<&Engines>, us: u64, watch: Option<Watch<'_>>, timing: WaitTiming) -> bool {
    let early = timing == WaitTiming::Marker;
    // The word already holds (the engine finished before the wait began): no clock read, which costs as
    // much as a small copy's staging.
    if early && watch.is_some_and(|w| w.holds()) {
        STREAK.set(None);
        return true;
    }
    // An assisting waiter stops executing once its word holds (marker timing).
    let done = || early && watch.is_some_and(|w| w.holds());
    // Work nobody is executing (the worker is not running) is the common case of a pipelined small copy:
    // execute it before the first clock read, and return without one if that wrote the word.
    if early && watch.is_some() {
        if let Some(e) = engines {
            if e.assist(false, &done) == Assist::Ran && done() {
                STREAK.set(None);
                return true;
            }
        }
    }
    let start = Instant::now();
    let length = Duration::from_micros(us);
    let deadline = start + length;
    let (began, asked_before) = streak_start(watch, start);
    let seen = loop {
        if early && watch.is_some_and(|w| w.holds()) {
            break true;
        }
        let now = Instant::now();
        let waited = now - began;
        let due = now >= deadline;
        // Offer to execute (once more when the delay is up, so even a zero-length delay runs what nobody else
        // will).
        let progress = engines.map_or(Assist::Idle, |e| e.assist(waited >= ASSIST_GRACE, &done));
        if due {
            break watch.is_some_and(|w| w.holds());
        }
        match progress {
            Assist::Ran => {}
            Assist::Busy if waited >= PARK_AFTER => {
                if let Some(e) = engines {
                    sleep_until_batch_end(e, watch.filter(|_| early));
                }
            }
            // An engine is executing (or about to): spin, it is on another core or will be soon.
            Assist::Busy | Assist::Pending => spin(watch.filter(|_| early)),
            Assist::Idle => match idle_pause(deadline - now, waited, asked_before + (now - start).min(length)) {
                IdlePause::Sleep(d) => std::thread::sleep(d),
                IdlePause::Spin => spin(watch.filter(|_| early)),
                IdlePause::Yield => std::thread::yield_now(),
            },
        }
    };
    streak_end(watch, began, asked_before + length, seen);
    seen
}

/// A short spin between two looks at the clock (~16 pauses, ~150 ns here): a clock read costs two pauses, so
/// the clock is read once per spin, but the word (when the delay watches one) is looked at after every
/// pause, so a marker that lands mid-spin ends the wait within a pause instead of a whole spin.
fn spin(watch: Option<Watch<'_>>) {
    for _ in 0..16 {
        if watch.is_some_and(|w| w.holds()) {
            return;
        }
        std::hint::spin_loop();
    }
}

/// Sleeps until an engine ends a batch (at most [`PARK_CAP`]), unless `watch`'s word already holds its value
/// or nothing is busy any more once this thread is registered.
fn sleep_until_batch_end(engines: &Engines, watch: Option<Watch<'_>>) {
    let _registered = engines.activity.waiters.register();
    // Registered first, then looked: a batch that ends after these looks finds us registered (see `waiters`).
    let done = || watch.is_some_and(|w| w.holds());
    if done() || engines.assist(true, &done) != Assist::Busy {
        return;
    }
    crate::sync::park_timeout(PARK_CAP);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_wait_spins_early_yields_on_schedule_and_spins_behind_it() {
        let us = Duration::from_micros;
        // Long delays sleep all but their tail, early or late, on schedule or not.
        assert_eq!(idle_pause(us(500), us(0), us(0)), IdlePause::Sleep(us(400)));
        assert_eq!(idle_pause(us(500), us(9000), us(10)), IdlePause::Sleep(us(400)));
        // Short ones spin for the first SPIN of a wait…
        assert_eq!(idle_pause(us(1), us(3), us(0)), IdlePause::Spin);
        // …then yield while the wait has lasted at most twice what it asked for (a poll loop's overhead)…
        assert_eq!(idle_pause(us(1), us(50), us(40)), IdlePause::Yield);
        assert_eq!(idle_pause(us(1), us(80), us(40)), IdlePause::Yield);
        // …and spin once it is further behind (a yield that cost a time slice): no compounding under load.
        assert_eq!(idle_pause(us(1), us(81), us(40)), IdlePause::Spin);
        assert_eq!(idle_pause(us(1), us(3000), us(40)), IdlePause::Spin);
    }

    #[test]
    fn a_streak_accumulates_the_delay_it_asked_for_and_ends_when_its_word_holds() {
        let word = AtomicU32::new(0);
        let watch = Some(Watch { word: &word, value: 1 });
        let t0 = Instant::now();
        assert_eq!(streak_start(watch, t0), (t0, Duration::ZERO), "a first delay begins a wait");
        streak_end(watch, t0, Duration::from_micros(7), false);
        let next = STREAK.get().expect("the wait goes on").last;
        assert_eq!(streak_start(watch, next), (t0, Duration::from_micros(7)), "the next delay continues it");
        let other = AtomicU32::new(0);
        let w2 = Some(Watch { word: &other, value: 1 });
        assert_eq!(streak_start(w2, next), (next, Duration::ZERO), "another word is another wait");
        assert_eq!(streak_start(watch, next + STREAK_GAP), (next + STREAK_GAP, Duration::ZERO), "a gap ends it");
        streak_end(watch, t0, Duration::from_micros(8), true);
        assert!(STREAK.get().is_none(), "seen: the wait is over");
    }
}
