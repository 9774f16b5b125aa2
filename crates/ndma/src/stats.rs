//! Per-ring counters (DESIGN §5). Relaxed atomics: they are statistics, ordered by nothing. They are written
//! only with the ring lock held, so an update is a plain load and store rather than a locked read-modify-write
//! (the lock orders successive writers); readers take snapshots at any time.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters of one H2T ring.
#[derive(Debug, Default)]
pub struct RingStats {
    submitted: AtomicU64,
    transfers: AtomicU64,
    bytes: AtomicU64,
    descriptors: AtomicU64,
    batches: AtomicU64,
    doorbells: AtomicU64,
    polls: AtomicU64,
    wait_us: AtomicU64,
    timeouts: AtomicU64,
    retries: AtomicU64,
    replays: AtomicU64,
    ring_resets: AtomicU64,
    aborts: AtomicU64,
    zc_pieces: AtomicU64,
    cqes: AtomicU64,
    zc_passes: AtomicU64,
    lock_spins: AtomicU64,
    lock_sleeps: AtomicU64,
}

/// A snapshot of one ring's counters ([`NeuronDevice::ring_stats`]) or of a device's ([`NeuronDevice::stats`]).
/// A snapshot is not synchronisation: other threads may be counting.
///
/// [`NeuronDevice::ring_stats`]: crate::NeuronDevice::ring_stats
/// [`NeuronDevice::stats`]: crate::NeuronDevice::stats
///
/// ```
/// # mod doctest { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest/support.rs")); }
/// # let (_bed, dev) = doctest::device();
/// let (src, dst) = (dev.alloc_host(1 << 20, 0)?, dev.alloc_device(1 << 20, 0)?);
/// let before = dev.ring_stats(0)?;
/// dev.memcpy_mc(&src, &dst, 0, 0, 1 << 20)?;
/// let s = dev.ring_stats(0)?.since(&before);
/// assert_eq!((s.submitted, s.transfers, s.bytes), (1, 1, 1 << 20));
/// assert_eq!((s.descriptors, s.batches, s.doorbells), (16 + 1, 1, 2));
/// assert_eq!((s.timeouts, s.retries, s.ring_resets, s.aborts), (0, 0, 0, 0));
/// assert_eq!(s.merged(&s).bytes, 2 << 20);
/// # Ok::<(), ndma::NdmaError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Copies started on the ring (a memset counts its parts). `submitted − transfers − aborts` is what is
    /// in flight or failed.
    pub submitted: u64,
    /// Completed copies (a memset counts its parts).
    pub transfers: u64,
    /// Bytes moved by completed batches.
    pub bytes: u64,
    /// Descriptor pairs staged, markers included.
    pub descriptors: u64,
    /// Batches triggered.
    pub batches: u64,
    /// Doorbell writes (RX and TX each count).
    pub doorbells: u64,
    /// Marker polls.
    pub polls: u64,
    /// Microseconds of poll budget consumed waiting for markers: first waits plus 1 µs per poll.
    pub wait_us: u64,
    /// Waits that timed out.
    pub timeouts: u64,
    /// V2 reset-window retries.
    pub retries: u64,
    /// Contexts re-staged after a ring re-initialisation: by V2 reset-window retries, and after another
    /// transfer's failure re-initialised the ring under them.
    pub replays: u64,
    /// Ring re-initialisations (retries and recoveries after a failure).
    pub ring_resets: u64,
    /// In-flight transfers abandoned by a ring re-initialisation, reported when they were waited for.
    pub aborts: u64,
    /// Zero-copy pieces issued (each: its data descriptors, a marker, one doorbell pair).
    pub zc_pieces: u64,
    /// Completion-queue entries produced (posted or backlogged).
    pub cqes: u64,
    /// Passes of the completion thread over the ring (each takes the ring lock once and retires every piece
    /// that is over, at least one).
    pub zc_passes: u64,
    /// Acquisitions of the ring lock that found it held and got it while spinning.
    pub lock_spins: u64,
    /// Acquisitions of the ring lock that found it held past the spin and slept until it was freed.
    pub lock_sleeps: u64,
}

macro_rules! counters {
    ($($field:ident => $add:ident),* $(,)?) => {
        impl RingStats {
            $(
                /// Adds `n`. Caller holds the ring lock (single writer).
                pub(crate) fn $add(&self, n: u64) {
                    self.$field.store(self.$field.load(Relaxed).wrapping_add(n), Relaxed);
                }
            )*

            /// The counters now.
            pub fn snapshot(&self) -> StatsSnapshot {
                StatsSnapshot { $($field: self.$field.load(Relaxed)),* }
            }
        }

        impl StatsSnapshot {
            /// Field-wise sum, wrapping like the counters themselves (example on [`StatsSnapshot`]).
            pub fn merged(mut self, other: &StatsSnapshot) -> StatsSnapshot {
                $(self.$field = self.$field.wrapping_add(other.$field);)*
                self
            }

            /// Field-wise difference from an earlier snapshot (example on [`StatsSnapshot`]).
            pub fn since(mut self, earlier: &StatsSnapshot) -> StatsSnapshot {
                $(self.$field = self.$field.wrapping_sub(earlier.$field);)*
                self
            }
        }
    };
}

counters! {
    submitted => add_submitted,
    transfers => add_transfers,
    bytes => add_bytes,
    descriptors => add_descriptors,
    batches => add_batches,
    doorbells => add_doorbells,
    polls => add_polls,
    wait_us => add_wait_us,
    timeouts => add_timeouts,
    retries => add_retries,
    replays => add_replays,
    ring_resets => add_ring_resets,
    aborts => add_aborts,
    zc_pieces => add_zc_pieces,
    cqes => add_cqes,
    zc_passes => add_zc_passes,
    lock_spins => add_lock_spins,
    lock_sleeps => add_lock_sleeps,
}
