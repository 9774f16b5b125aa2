//! The faults a campaign injects — every one the device model has — one at a time, each on the ring of the
//! operation it was drawn for, with what that operation must then do:
//!
//! | kind | model | the operation must |
//! |---|---|---|
//! | `hang` | `PlannedFault::Hang` on its queue | fail with `-ETIMEDOUT` (the ring is re-initialised) |
//! | `drop_final_write` | `PlannedFault::DropFinalWrite`: its first batch's marker never lands | fail with `-ETIMEDOUT` |
//! | `corrupt` | `PlannedFault::Corrupt` of its `n`th fetched pair | fail with `-ETIMEDOUT` — or succeed if the model reports the flip benign, every byte right but those of that one descriptor |
//! | `delay` | `PlannedFault::Delay` per descriptor | succeed |
//! | `bandwidth` | `PlannedFault::Bandwidth` | succeed |
//! | `reset_window` | a NeuronCore reset of its NC just before it | succeed (V2: the queue hangs, the op layer re-initialises the ring and replays) — or, on V2, fail with `RetryExhausted` if the window outlasted the bounded replays (a device-to-device batch's budget is ~0.2 ms, so 8 replays cover ~2 ms of a reset) |
//!
//! Whatever happens, guard bytes stay intact and the device must serve the next operation. Pin faults join
//! the registry with the zero-copy paths.

use std::time::Duration;

use ndma::ResetClock;
use ndma_emu::{CorruptOutcome, CorruptionReport, DmaFault, EngineStats, PlannedFault};
use rand::RngExt;
use serde::Serialize;

use super::path::{Bed, PathKind};
use super::rng::{derive, OpRng};
use crate::error::{CliResult, OpContext};

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The queue stops making progress until it is reset.
    Hang,
    /// Every descriptor waits a few µs first.
    Delay,
    /// Copies are throttled to a few GB/s.
    Bandwidth,
    /// One fetched descriptor has a bit flipped in its ring id, length or address.
    Corrupt,
    /// The final write of the next batch (its marker) is lost.
    DropFinalWrite,
    /// A reset of the operation's NeuronCore is in progress when it starts.
    ResetWindow,
    /// Zero-copy: a page of the user window is not mapped.
    Hole,
    /// Zero-copy: the `n`th pin call fails.
    PinFail,
    /// Zero-copy: the `n`th fast pin comes back short.
    ShortPin,
}

/// What an operation must do under a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// Fail with `-ETIMEDOUT` on its ring.
    Timeout,
    /// Succeed with every byte right.
    Success,
    /// Fail with a pin's errno.
    PinError,
}

impl FaultKind {
    /// Every kind, in registry order.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Hang,
        FaultKind::Delay,
        FaultKind::Bandwidth,
        FaultKind::Corrupt,
        FaultKind::DropFinalWrite,
        FaultKind::ResetWindow,
        FaultKind::Hole,
        FaultKind::PinFail,
        FaultKind::ShortPin,
    ];

    /// A pin fault (of the zero-copy paths)?
    pub fn is_pin_fault(self) -> bool {
        matches!(self, FaultKind::Hole | FaultKind::PinFail | FaultKind::ShortPin)
    }

    /// Can an operation of `path` meet it?
    pub fn applies_to(self, path: PathKind) -> bool {
        self.is_pin_fault() == path.is_zerocopy()
    }

    /// Does the operation have to time out to meet it? (Not under emulation budgets: a timeout there takes
    /// minutes.) A reset window does on V2, where the queue hangs until the op layer's wait times out.
    pub fn needs_timeout(self, retry_arch: bool) -> bool {
        match self {
            FaultKind::Hang | FaultKind::DropFinalWrite | FaultKind::Corrupt => true,
            FaultKind::ResetWindow => retry_arch,
            FaultKind::Delay | FaultKind::Bandwidth => false,
            FaultKind::Hole | FaultKind::PinFail | FaultKind::ShortPin => false,
        }
    }

    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Hang => "hang",
            FaultKind::Delay => "delay",
            FaultKind::Bandwidth => "bandwidth",
            FaultKind::Corrupt => "corrupt",
            FaultKind::DropFinalWrite => "drop_final_write",
            FaultKind::ResetWindow => "reset_window",
            FaultKind::Hole => "hole",
            FaultKind::PinFail => "pin_fail",
            FaultKind::ShortPin => "short_pin",
        }
    }
}

/// One fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FaultSpec {
    /// Its kind.
    pub kind: FaultKind,
    /// Delay: µs per descriptor; bandwidth: bytes/s; corrupt: which fetch (0-based); reset window: jiffies.
    pub param: u64,
    /// Delay and bandwidth: on every engine of the device rather than the ring's.
    pub all_engines: bool,
}

impl FaultSpec {
    /// A fault of `kind` for an operation whose first ring fetches `pairs` descriptor pairs.
    ///
    /// The delays and rates leave the silicon budget of the smallest device-to-device batch (~200 µs a
    /// descriptor) a wide margin: they slow an operation down, they must not time it out.
    pub fn draw(rng: &mut OpRng, kind: FaultKind, pairs: u64) -> FaultSpec {
        let (param, all_engines) = match kind {
            FaultKind::Hang | FaultKind::DropFinalWrite => (0, false),
            FaultKind::Delay => (rng.random_range(1..=20), rng.random_bool(0.5)),
            FaultKind::Bandwidth => (rng.random_range(2_000_000_000..=8_000_000_000), rng.random_bool(0.5)),
            FaultKind::Corrupt => (rng.random_range(0..pairs.max(1)), false),
            // Jiffies (ms): shorter than the first timeout of a small batch (tens of ms), so one replay
            // finds the reset over.
            FaultKind::ResetWindow => (rng.random_range(5..=20), false),
            // Drawn by the zero-copy path, which knows the window (see `path::zerocopy_fault`).
            FaultKind::Hole | FaultKind::PinFail | FaultKind::ShortPin => (0, false),
        };
        FaultSpec { kind, param, all_engines }
    }

    /// `hang`, `delay 12 µs/descriptor (all engines)`, `corrupt fetch 2`, …
    pub fn describe(&self) -> String {
        let scope = if self.all_engines { " (all engines)" } else { "" };
        match self.kind {
            FaultKind::Hang | FaultKind::DropFinalWrite => self.kind.name().to_string(),
            FaultKind::Delay => format!("delay {} µs/descriptor{scope}", self.param),
            FaultKind::Bandwidth => format!("bandwidth {} MB/s{scope}", self.param / 1_000_000),
            FaultKind::Corrupt => format!("corrupt fetch {}", self.param),
            FaultKind::ResetWindow => format!("reset_window {} jiffies", self.param),
            FaultKind::Hole => format!("hole at window page {}", self.param),
            FaultKind::PinFail => format!("pin of piece {} fails", self.param),
            FaultKind::ShortPin => format!("fast pin {} comes back short", self.param),
        }
    }

    /// What the operation must do (a corruption the model reports benign turns [`Expectation::Timeout`]
    /// into success, see [`Observed::benign`]).
    pub fn expectation(&self) -> Expectation {
        match self.kind {
            FaultKind::Hang | FaultKind::DropFinalWrite | FaultKind::Corrupt => Expectation::Timeout,
            FaultKind::Delay | FaultKind::Bandwidth | FaultKind::ResetWindow | FaultKind::ShortPin => {
                Expectation::Success
            }
            // The errno depends on where the fault falls (`path::zerocopy_pin_errno`).
            FaultKind::Hole | FaultKind::PinFail => Expectation::PinError,
        }
    }
}

/// A fault installed for one operation.
#[derive(Debug)]
pub struct Armed {
    spec: FaultSpec,
    nc: u32,
    eng: u32,
    corruptions_before: usize,
    engine_before: EngineStats,
    reset_in_progress: bool,
}

/// What became of an injected fault.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The fault took effect (the operation met it).
    pub hit: bool,
    /// Why it did not, when it did not.
    pub missed: Option<String>,
    /// The corruption the model applied, if any.
    pub corruption: Option<CorruptionReport>,
    /// Faults the engine recorded meanwhile.
    pub device_faults: Vec<DmaFault>,
    /// A reset window a retry bounded by [`ndma::MAX_RESET_WINDOW_REPLAYS`] may have run out inside: still in
    /// progress when the operation returned, or over for at most [`RESET_SLACK_JIFFIES`] then (judged at the
    /// operation's return, not at this observation: the thread may be descheduled between the two) — or, on
    /// V2, every marker wait of the operation that timed out waited on a queue the window hung (the engine
    /// counted at least as many reset-window hangs), however late the operation returned: a thread
    /// descheduled in its last wait returns long after the window whose hang it reports.
    pub reset_outlasted_op: bool,
    /// V2: the window hung the queue under work staged ahead of the operation (a bystander), and the operation
    /// itself started after the window was over. The op layer's retry looks at the waited operation's own
    /// start (`nr_op_in_reset_wnd`), so it reports the timeout without a retry, and the recovery replays the
    /// work ahead once: the timeout is the injected hang's.
    pub hung_ahead: bool,
}

/// Jiffies of slack when deciding whether a reset window outlasted an operation: the platform's jiffies
/// come from a coarse clock that ticks every few ms.
pub const RESET_SLACK_JIFFIES: u64 = 5;

impl Observed {
    /// The corruption passed every engine check and executed.
    pub fn benign(&self) -> Option<&CorruptionReport> {
        self.corruption.as_ref().filter(|c| c.outcome == CorruptOutcome::Benign)
    }

    /// The engine faults the fault explains: exactly the one a corruption caught, or none.
    pub fn unexplained_device_faults(&self) -> Vec<DmaFault> {
        let caught = match self.corruption.map(|c| c.outcome) {
            Some(CorruptOutcome::Fault(kind)) => Some(kind),
            _ => None,
        };
        let mut rest = self.device_faults.clone();
        if let Some(kind) = caught {
            if let Some(i) = rest.iter().position(|f| f.kind == kind) {
                rest.remove(i);
            }
        }
        rest
    }
}

/// Installs `spec` on NC `nc`'s ring of `bed` for the operation seeded `op_seed`. The caller has the device
/// to itself until [`Armed::observe`].
///
/// # Errors
///
/// An NC without an H2T ring.
pub fn arm(bed: Bed<'_>, spec: FaultSpec, op_seed: u64, nc: u32) -> CliResult<Armed> {
    arm_behind(bed, spec, op_seed, nc, 0)
}

/// As [`arm`], on a ring where `ahead` descriptor pairs of another transfer (a bystander) were handed over
/// before and are fetched first: a corruption planned for the operation's `n`th fetch is planned for the
/// `ahead + n`th of the queue.
///
/// # Errors
///
/// An NC without an H2T ring.
pub fn arm_behind(bed: Bed<'_>, spec: FaultSpec, op_seed: u64, nc: u32, ahead: u64) -> CliResult<Armed> {
    let (eng, qid) = bed.dev.h2t_queue(nc).op_ctx(|| format!("the H2T queue of NC {nc}"))?;
    let plan = bed.emu.fault_plan();
    plan.clear();
    // The corruption's field and bit come from a stream restarted per operation: a replay gets the same.
    plan.reseed(derive(op_seed, 0xfa_0175));
    let engine_before = bed.emu.engine_stats(eng).unwrap_or_default();
    let corruptions_before = bed.emu.corruptions().len();
    let engine = (!spec.all_engines).then_some(eng);
    match spec.kind {
        FaultKind::Hang => plan.add(PlannedFault::Hang { engine: eng, qid, persistent: false }),
        FaultKind::Delay => plan.add(PlannedFault::Delay { engine, per_desc_us: spec.param }),
        FaultKind::Bandwidth => plan.add(PlannedFault::Bandwidth { engine, bytes_per_sec: spec.param }),
        FaultKind::Corrupt => plan.add(PlannedFault::Corrupt { engine: eng, qid, nth: ahead + spec.param }),
        FaultKind::DropFinalWrite => plan.add(PlannedFault::DropFinalWrite { engine: eng, qid }),
        FaultKind::ResetWindow => {
            bed.emu.reset_nc(nc, spec.param);
        }
        // Armed on the user address space by the zero-copy path.
        FaultKind::Hole | FaultKind::PinFail | FaultKind::ShortPin => {}
    }
    let reset_in_progress = bed.emu.nc_reset_in_progress(nc);
    Ok(Armed { spec, nc, eng, corruptions_before, engine_before, reset_in_progress })
}

impl Armed {
    /// After the operation: what the fault did, then the plan emptied, a reset window waited out (so the next
    /// operation cannot start inside it) and the engine's fault log taken. `retries` and `timeouts` are the
    /// ring's V2 reset-window retries and timed-out marker waits during the operation, `started` and
    /// `returned` the platform's jiffies when it was called and when it returned.
    pub fn observe(self, bed: Bed<'_>, retries: u64, timeouts: u64, started: u64, returned: u64) -> Observed {
        let plan = bed.emu.fault_plan();
        let left = plan.entries();
        plan.clear();
        let engine = bed.emu.engine_stats(self.eng).unwrap_or_default().since(&self.engine_before);
        let corruptions = bed.emu.corruptions();
        let corruption = corruptions.get(self.corruptions_before).copied();
        let v2 = bed.dev.dhal().retry_memcpy();
        let (start, end) = bed.emu.reset_times(self.nc);
        let reset_outlasted_op = self.spec.kind == FaultKind::ResetWindow && {
            let every_timeout_hung = v2 && timeouts > 0 && engine.reset_hangs >= timeouts;
            end <= start || returned <= end + RESET_SLACK_JIFFIES || every_timeout_hung
        };
        // The operation's own start is at or after `started`: past the window's end, the retry cannot apply.
        let hung_ahead = self.spec.kind == FaultKind::ResetWindow
            && v2
            && engine.reset_hangs > 0
            && retries == 0
            && start < end
            && started > end;
        let (hit, why) = match self.spec.kind {
            // One-shot entries leave the plan when they fire.
            FaultKind::Hang | FaultKind::DropFinalWrite => (left.is_empty(), "the plan entry was never consumed"),
            FaultKind::Corrupt => (corruption.is_some(), "no fetch was corrupted"),
            FaultKind::Delay => (engine.delayed_us > 0, "the engine delayed no descriptor"),
            // Every copy of the engine was charged its bytes at the rate (each charge rounds down to a ns).
            FaultKind::Bandwidth => (
                engine.copies > 0
                    && u128::from(engine.throttled_ns + engine.copies)
                        >= u128::from(engine.bytes) * 1_000_000_000 / u128::from(self.spec.param.max(1)),
                "the engine did not throttle its copies",
            ),
            // Met when the queue hung in the window; it then must have been replayed. Work that reached the
            // engine only after the window (the thread descheduled meanwhile) met no fault.
            FaultKind::ResetWindow if v2 => {
                let hung = engine.reset_hangs > 0;
                let handled = retries > 0 || hung_ahead;
                (hung && handled, if hung { "the queue hung in the reset window and was not replayed" } else { "" })
            }
            FaultKind::ResetWindow => (self.reset_in_progress, "the reset was over before the operation"),
            // Judged by the caller, which has the user buffer and the outcome.
            FaultKind::Hole | FaultKind::PinFail | FaultKind::ShortPin => (true, ""),
        };
        if self.spec.kind == FaultKind::ResetWindow {
            wait_reset_over(bed, self.nc);
        }
        // An empty reason: the fault never applied, which is no miss of the op layer's.
        let missed = (!hit && !why.is_empty()).then(|| format!("{}: {why}", self.spec.describe()));
        Observed { hit, missed, corruption, device_faults: bed.emu.take_faults(), reset_outlasted_op, hung_ahead }
    }
}

/// Waits until the reset of NC `nc` is over and a jiffy has passed its end (an operation started in the
/// jiffy the reset ended counts as inside the window). An injected window is waited out, never a timeout.
fn wait_reset_over(bed: Bed<'_>, nc: u32) {
    // A reset lasts at most 20 jiffies; a second is a model that never ends its resets (the next operation
    // then fails and says so).
    const GIVE_UP_MS: u32 = 1000;
    let platform = bed.dev.platform();
    for _ in 0..GIVE_UP_MS {
        let (start, end) = bed.emu.reset_times(nc);
        if end > start && platform.jiffies() > end {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    tracing::warn!(nc, "the injected NeuronCore reset is still in progress after {GIVE_UP_MS} ms");
}
