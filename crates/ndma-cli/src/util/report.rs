//! Printing counters (as a table and as JSON), and timing a transfer with a progress bar beside it.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use ndma::StatsSnapshot;
use ndma_emu::EngineStats;
use serde::Serialize;

use super::table::Table;

/// Transfers at least this long get a progress bar.
pub const PROGRESS_MIN_BYTES: u64 = 64 << 20;
/// How often the progress bar samples the byte counter.
const PROGRESS_PERIOD: Duration = Duration::from_millis(20);

/// The op layer's ring counters, as the JSON reports carry them (`counters`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Completed copies (a memset counts its parts).
    pub transfers: u64,
    /// Bytes moved by completed batches.
    pub bytes: u64,
    /// Descriptor pairs staged, markers included.
    pub descriptors: u64,
    /// Batches triggered.
    pub batches: u64,
    /// Doorbell writes.
    pub doorbells: u64,
    /// Marker polls.
    pub polls: u64,
    /// Microseconds of poll budget consumed.
    pub wait_us: u64,
    /// Waits that timed out.
    pub timeouts: u64,
    /// V2 reset-window retries.
    pub retries: u64,
    /// Contexts re-staged after a ring re-initialisation (V2 retries, and another transfer's failure).
    pub replays: u64,
    /// Ring re-initialisations.
    pub ring_resets: u64,
}

impl From<&StatsSnapshot> for Counters {
    fn from(s: &StatsSnapshot) -> Self {
        Counters {
            transfers: s.transfers,
            bytes: s.bytes,
            descriptors: s.descriptors,
            batches: s.batches,
            doorbells: s.doorbells,
            polls: s.polls,
            wait_us: s.wait_us,
            timeouts: s.timeouts,
            retries: s.retries,
            replays: s.replays,
            ring_resets: s.ring_resets,
        }
    }
}

/// The engine model's counters for the engine of the ring used, as the JSON reports carry them (`engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EngineCounters {
    /// The engine's index on the device.
    pub id: u32,
    /// Descriptor pairs executed.
    pub descriptors: u64,
    /// Copies performed after merging contiguous descriptors.
    pub copies: u64,
    /// Faults recorded.
    pub faults: u64,
}

impl EngineCounters {
    /// Engine `id`'s counters `now − before`.
    pub fn delta(id: u32, now: &EngineStats, before: &EngineStats) -> Self {
        let d = now.since(before);
        EngineCounters { id, descriptors: d.descriptors, copies: d.copies, faults: d.faults }
    }
}

/// The op layer's ring counters (and, if given, the engine model's) as a two-column table.
pub fn counters_table(s: &Counters, eng: Option<&EngineCounters>) -> String {
    let mut t = Table::new(&["counter", ">value"]);
    let rows = [
        ("transfers", s.transfers),
        ("bytes", s.bytes),
        ("descriptors (pairs, markers included)", s.descriptors),
        ("batches", s.batches),
        ("doorbells", s.doorbells),
        ("polls", s.polls),
        ("wait_us", s.wait_us),
        ("timeouts", s.timeouts),
        ("retries", s.retries),
        ("replays", s.replays),
        ("ring_resets", s.ring_resets),
    ];
    for (k, v) in rows {
        t.row(vec![k.into(), v.to_string()]);
    }
    if let Some(e) = eng {
        t.row(vec![format!("engine {}: descriptors executed", e.id), e.descriptors.to_string()]);
        t.row(vec![format!("engine {}: copies (after merging)", e.id), e.copies.to_string()]);
        t.row(vec![format!("engine {}: faults", e.id), e.faults.to_string()]);
    }
    t.render()
}

/// What [`timed_with_progress`] returns: the work's result and the instants just before and just after it.
#[derive(Debug)]
pub struct Timed<T> {
    /// The work's result.
    pub value: T,
    /// Taken immediately before the work started.
    pub start: Instant,
    /// Taken immediately after the work returned, before the progress bar is finished.
    pub end: Instant,
}

impl<T> Timed<T> {
    /// `end − start`.
    pub fn elapsed(&self) -> Duration {
        self.end - self.start
    }
}

/// Runs `work` on this thread and times exactly it. When `bar` is true and `total` is at least
/// [`PROGRESS_MIN_BYTES`], a progress bar on stderr (hidden when stderr is not a terminal) follows `done()`,
/// the bytes completed so far, sampled every 20 ms on a scoped thread.
///
/// The sampler never delays the measurement: the end instant is taken as soon as `work` returns, and only
/// then is the sampler told to stop (it wakes at once rather than at its next 20 ms tick), makes its final
/// update and is joined.
pub fn timed_with_progress<T>(
    total: u64,
    bar: bool,
    done: impl Fn() -> u64 + Sync,
    work: impl FnOnce() -> T,
) -> Timed<T> {
    if !bar || total < PROGRESS_MIN_BYTES {
        let start = Instant::now();
        let value = work();
        return Timed { value, start, end: Instant::now() };
    }
    let base = done();
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] [{bar:40}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    let (stop, stopped) = mpsc::channel::<()>();
    let (pb, done) = (&pb, &done);
    std::thread::scope(|s| {
        let sampler = s.spawn(move || {
            // Until the sender is dropped: a timeout is a sampling tick, a disconnect the end of the work.
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(PROGRESS_PERIOD) {
                pb.set_position(done().saturating_sub(base).min(total));
            }
            pb.set_position(done().saturating_sub(base).min(total));
            pb.finish_and_clear();
        });
        let start = Instant::now();
        let value = work();
        let end = Instant::now();
        drop(stop);
        if let Err(panic) = sampler.join() {
            std::panic::resume_unwind(panic);
        }
        Timed { value, start, end }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn counters_render_in_a_table() {
        let s = StatsSnapshot { transfers: 2, descriptors: 10, ..StatsSnapshot::default() };
        let e = EngineCounters { id: 32, descriptors: 10, copies: 4, faults: 0 };
        let text = counters_table(&Counters::from(&s), Some(&e));
        assert!(text.lines().any(|l| l.starts_with("transfers") && l.ends_with(" 2")), "{text}");
        assert!(text.lines().any(|l| l.starts_with("engine 32: copies (after merging)") && l.ends_with(" 4")));
    }

    /// The bug this guards against: the transfer used to be timed around the sampling loop, which noticed the
    /// end of the work only at its next 20 ms tick, so every transfer ≥ 64 MiB reported at least 20 ms. The
    /// timed span must enclose the work and close before the sampler's final update.
    #[test]
    fn the_timed_span_is_the_work_not_the_sampling_loop() {
        let samples: Mutex<Vec<Instant>> = Mutex::new(Vec::new());
        let bytes = AtomicU64::new(0);
        let done = || {
            samples.lock().expect("sample log").push(Instant::now());
            // Relaxed: a counter for display, ordering nothing.
            bytes.load(Ordering::Relaxed)
        };
        let mut inner = None;
        let timed = timed_with_progress(PROGRESS_MIN_BYTES, true, done, || {
            let t0 = Instant::now();
            bytes.store(PROGRESS_MIN_BYTES, Ordering::Relaxed);
            inner = Some((t0, Instant::now()));
            7
        });
        let (inner_start, inner_end) = inner.expect("work ran");
        assert_eq!(timed.value, 7);
        assert!(timed.start <= inner_start && inner_end <= timed.end, "the span encloses the work");
        let last_sample = *samples.lock().expect("sample log").last().expect("the sampler's final update");
        assert!(timed.end <= last_sample, "the span closed before the sampler's final update");
    }

    #[test]
    fn small_or_unbarred_work_is_timed_without_a_sampler() {
        let calls = AtomicU64::new(0);
        let done = || calls.fetch_add(1, Ordering::Relaxed);
        let t = timed_with_progress(PROGRESS_MIN_BYTES - 1, true, done, || 1);
        let u = timed_with_progress(PROGRESS_MIN_BYTES, false, done, || 2);
        assert_eq!((t.value, u.value), (1, 2));
        assert!(t.start <= t.end && u.start <= u.end);
        assert_eq!(calls.load(Ordering::Relaxed), 0, "no sampling below the threshold or without a bar");
    }
}
