//! `ndma faults`: scripted failure scenarios that show how the op layer behaves when the device misbehaves.
//!
//! - `reset-window`: a copy whose doorbell rings while its NeuronCore is being reset. On V2 the model hangs
//!   the queue (the silicon bug); the op layer times out, sees the op inside the reset window, re-initialises
//!   the ring, replays the chunks and returns verified data. On V3 there is no bug and no retry.
//! - `hang`: a queue hung outside any reset window: `-ETIMEDOUT` with no retry, the ring re-initialised, and
//!   the next copy on the device succeeds.
//!
//! - `zc-*`: zero-copy scenarios over a user buffer ([`zc`]): a hole in the middle of a request, a pin failure
//!   in the completion thread, a hang during an async sequence, process exit with async work in flight, a full
//!   completion queue with no consumer for a while. Each ends with the leak check.
//!
//! Each scenario is a list of steps (a copy or a request, its outcome, its time and the ring counters it
//! moved); a step whose outcome is not the contract's fails the command with exit status 3.

pub mod zc;

use std::time::Instant;

use ndma::{NdmaError, Platform, RingState, StatsSnapshot};
use ndma_emu::{ExecPolicy, PlannedFault};
use serde::Serialize;
use udma::Arch;

use crate::cli::{testbed, BedOpts};
use crate::cli::{FaultScenario, FaultsArgs};
use crate::cmd::inspect::state::RingStateJson;
use crate::error::{errno_name, CliError, CliResult, OpContext};
use crate::util::output::Out;
use crate::util::report::Counters;
use ndma_emu::test_utils::{Dir, Window};

/// Bytes each scenario copies (several descriptors, one batch).
const COPY_BYTES: u64 = 200_000;

/// The `--json` schema, shown by `ndma faults --help` (the README has the same).
pub const JSON_SCHEMA: &str = "\
JSON (--json FILE, or --json - for stdout instead of the report): one object, written when every step
behaved as the contract says (otherwise the command exits 3 without JSON)
  command      \"faults\"
  scenario     \"reset-window\", \"hang\", \"zc-hole\", \"zc-pin-fail\", \"zc-hang\", \"zc-exit\" or \"zc-cq-full\"
  instance     instance preset, e.g. \"trn1.2xlarge\"
  arch         \"v2\" or \"v3\"
  nc           NeuronCore whose H2T ring was used
  engine       the H2T ring's engine index; queue: its queue id
  retry_flag   the DHAL's reset-window retry flag (true on V2)
  copy_bytes   bytes each step copies (zero-copy: bytes of the scenario's user window)
  steps        one object per copy or zero-copy step, in order:
    name         what the step does, e.g. \"copy during the reset\", \"hung copy\", \"next copy\"
    ok           whether the copy returned success
    error        the op layer's error message (absent when ok)
    errno        its negative errno (absent when ok)
    elapsed_ms   the copy's time
    counters     the ring's counters moved by this step: transfers, bytes, descriptors, batches,
                 doorbells, polls, wait_us, timeouts, retries, replays, ring_resets
    verified     whether the destination was then checked byte for byte
    state        a timeout's ring state, taken before recovery (as ndma inspect --state's rings):
      device, nc, engine, queue   where the ring is
      tx, rx         each queue: size, next_desc_idx (producer), next_cdesc_idx (consumer), ring_id,
                     available, regs (through BAR0: cfg, enabled, status, head, head_ring_id, tail,
                     tail_ring_id, current, ring_base, ring_len, dmb_pauses (TX), engine_state)
      contexts       handle, inuse, aborted, src, dst, size, done, outstanding, batch_descriptors,
                     in_flight, marker_seen
      zero_copy      queued, submitted, slots_in_flight, pinned_pages, cq_backlog
      counters       the ring's counters
      descriptors    slot, role (\"free\", \"done\", \"head\", \"pending\"), tx and rx (addr, len, ring_id, flags,
                     words)
      device_diagnostics   what the device model recorded about the queue
zero-copy scenarios add:
  override     true when zerocopy_trn1_override was turned on (V2)
  cqes         the completions taken, in order: sequence_num, compl_ret (0 or -errno), context
  pins         pin activity of the user process(es): fast_calls, slow_calls, remote_calls, short_pins,
               failed_calls, pinned_pages, unpinned_pages, dirty_unpins
  cq_backlog   zc-cq-full: requests, busy_submits (refused -EBUSY and repeated), posted (in the queue
               while nobody consumed), backlog (held back in the driver), refused_errno (of one more
               request then: -16, the backlog full)
  leak_check   at the end: pinned_frames, pins, orphaned_frames, bad_unpins, pinned_ranges, contexts,
               queue_pinned_pages, backlog, ring_slots_used, ring_slots_accounted, clean
  last_failure the device's last failure snapshot, when one failed (a ring state as in steps' state): an
               async zero-copy failure reports only its errno in the completion
The zero-copy async scenarios (all but zc-hole) need V3 (--instance trn2.48xlarge): V2 has no async
zero-copy.";

/// One copy of a scenario.
#[derive(Debug, Serialize)]
pub struct Step {
    /// What the step does.
    pub name: &'static str,
    /// The copy returned success.
    pub ok: bool,
    /// The error message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The negative errno.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// The copy's time, ms.
    pub elapsed_ms: f64,
    /// Ring counters moved by the step.
    pub counters: Counters,
    /// The destination was verified afterwards.
    pub verified: bool,
    /// A timeout's ring state, taken before recovery re-initialised the ring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<RingStateJson>,
}

impl Step {
    /// The step that ran `name` and returned `r`, moving `counters`; prints a timeout's ring state.
    pub fn new<T>(out: Out, name: &'static str, r: &ndma::Result<T>, elapsed_ms: f64, counters: Counters) -> Step {
        let err = r.as_ref().err();
        let state = err.and_then(NdmaError::ring_state);
        if let Some(s) = state {
            print_state(out, "ring state at the timeout, before recovery", s);
        }
        Step {
            name,
            ok: r.is_ok(),
            error: err.map(ToString::to_string),
            errno: err.map(NdmaError::errno),
            elapsed_ms,
            counters,
            verified: false,
            state: state.map(RingStateJson::from),
        }
    }
}

/// Prints a ring state under a heading, indented.
pub fn print_state(out: Out, heading: &str, s: &RingState) {
    out.say(format_args!("  {heading}:"));
    let text: String = s.to_string().lines().map(|l| format!("    {l}\n")).collect();
    out.text(&text);
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct FaultsReport {
    /// `"faults"`.
    pub command: &'static str,
    /// `reset-window` or `hang`.
    pub scenario: &'static str,
    /// Instance preset.
    pub instance: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// NeuronCore.
    pub nc: u32,
    /// H2T engine.
    pub engine: u32,
    /// H2T queue.
    pub queue: u32,
    /// The DHAL's reset-window retry flag.
    pub retry_flag: bool,
    /// Bytes per copy.
    pub copy_bytes: u64,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Zero-copy: the command turned `zerocopy_trn1_override` on.
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    pub override_on: Option<bool>,
    /// Zero-copy: the completions taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cqes: Option<Vec<zc::Cqe>>,
    /// Zero-copy: pin activity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pins: Option<zc::Pins>,
    /// `zc-cq-full`: what the full queue held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cq_backlog: Option<zc::CqBacklog>,
    /// Zero-copy: the leak check at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leak_check: Option<zc::Leaks>,
    /// Zero-copy: the device's last failure snapshot (an async failure reports only an errno), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<RingStateJson>,
}

impl FaultsReport {
    /// The report of scenario `a` on `ring` = (engine, queue), before any step ran.
    fn new(opts: BedOpts, a: &FaultsArgs, arch: Arch, ring: (u32, u32), retry_flag: bool) -> Self {
        FaultsReport {
            command: "faults",
            scenario: a.scenario.name(),
            instance: opts.instance.name.into(),
            arch: arch.to_string(),
            nc: a.nc,
            engine: ring.0,
            queue: ring.1,
            retry_flag,
            copy_bytes: COPY_BYTES,
            steps: Vec::new(),
            override_on: None,
            cqes: None,
            pins: None,
            cq_backlog: None,
            leak_check: None,
            last_failure: None,
        }
    }
}

/// A scenario in progress: the window it copies, where it prints, and the steps so far.
struct Scenario<'a> {
    w: Window<'a>,
    nc: u32,
    out: Out,
    steps: Vec<Step>,
}

impl Scenario<'_> {
    /// Runs one copy as step `name`, prints its outcome and counters, and records it.
    fn copy(&mut self, name: &'static str) -> CliResult<(ndma::Result<()>, StatsSnapshot)> {
        let before = self.w.dev.ring_stats(self.nc).op_ctx(|| "reading ring counters")?;
        let t0 = Instant::now();
        let r = self.w.copy(0, COPY_BYTES);
        let elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
        let moved = self.w.dev.ring_stats(self.nc).op_ctx(|| "reading ring counters")?.since(&before);
        let outcome = match &r {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("{e} (errno {} {})", e.errno(), errno_name(e.errno())),
        };
        self.out.say(format_args!("{name}, {COPY_BYTES} bytes host→device: {outcome} after {elapsed_ms:.3} ms"));
        let s = &moved;
        self.out.say(format_args!(
            "  ring: transfers {}, batches {}, descriptors {}, polls {}, timeouts {}, retries {}, replays {}, ring \
             re-inits {}",
            s.transfers, s.batches, s.descriptors, s.polls, s.timeouts, s.retries, s.replays, s.ring_resets
        ));
        self.steps.push(Step::new(self.out, name, &r, elapsed_ms, Counters::from(&moved)));
        Ok((r, moved))
    }

    /// Verifies the window after the last step and marks that step verified.
    fn verify(&mut self, what: &str) -> CliResult {
        self.w.verify(what, true)?;
        if let Some(s) = self.steps.last_mut() {
            s.verified = true;
        }
        Ok(())
    }
}

/// Runs `ndma faults`.
///
/// # Errors
///
/// Set-up failures, an outcome other than the scenario's expected one, or wrong data.
pub fn run(mut opts: BedOpts, a: &FaultsArgs) -> CliResult {
    // Scenarios need silicon budgets: a hang must time out in milliseconds.
    opts.emulation_budgets = false;
    let tb = testbed(opts, ExecPolicy::Inline)?;
    let (dev, emu) = tb.device(0);
    let arch = dev.dhal().arch();
    let nc = a.nc;
    let (eng, qid) = dev.h2t_queue(nc).op_ctx(|| "choosing the H2T ring")?;
    let out = a.json.out();
    out.say(format_args!(
        "{} ({arch}): NC {nc}'s H2T ring is engine {eng} queue {qid}; retry flag {}",
        opts.instance.name,
        dev.dhal().retry_memcpy()
    ));
    let mut report = FaultsReport::new(opts, a, arch, (eng, qid), dev.dhal().retry_memcpy());
    match a.scenario {
        FaultScenario::ResetWindow | FaultScenario::Hang => {
            let w = Window::new(dev, emu, Dir::H2d, COPY_BYTES, nc, 0xfa17)?;
            let mut sc = Scenario { w, nc, out, steps: Vec::new() };
            if a.scenario == FaultScenario::Hang {
                hang(&mut sc, eng, qid)?;
            } else {
                reset_window(&tb, &mut sc, arch, eng, qid, a.reset_ms)?;
            }
            report.steps = sc.steps;
        }
        zc_scenario => {
            zc::run(&tb, zc_scenario, nc, out, &mut report)?;
            // An async failure reaches its completion as an errno only: its ring state is the device's.
            if let Some(s) = dev.last_failure_state() {
                print_state(out, "the device's last failure, ring state before recovery", &s);
                report.last_failure = Some(RingStateJson::from(&s));
            }
        }
    }
    out.wrote(a.json.write(&report)?);
    Ok(())
}

fn reset_window(
    tb: &ndma_emu::Testbed,
    sc: &mut Scenario<'_>,
    arch: Arch,
    eng: u32,
    qid: u32,
    reset_ms: u64,
) -> CliResult {
    let (emu, nc, out) = (sc.w.emu, sc.nc, sc.out);
    let j0 = tb.platform.jiffies();
    emu.reset_nc(nc, reset_ms);
    out.say(format_args!("jiffies {j0}: reset of NC {nc} started, lasting {reset_ms} jiffies (ms)"));
    let (r, s) = sc.copy("copy during the reset")?;
    match arch {
        Arch::V2 => {
            r.op_ctx(|| "the V2 reset-window copy")?;
            if s.retries == 0 {
                return Err(CliError::Verify("expected the V2 copy to hit the reset-window hang and retry".into()));
            }
            out.say(
                "  V2: the doorbell rang during the reset, the queue hung, the wait timed out inside the reset window, \
                 the ring was re-initialised and the batch replayed",
            );
            sc.verify("reset-window copy")?;
            out.say("  data verified: guards intact, every byte of the window right");
        }
        Arch::V3 => {
            r.op_ctx(|| "the V3 copy during a reset")?;
            sc.verify("V3 copy during a reset")?;
            out.say("  V3: no reset-window bug, the copy completed during the reset; data verified");
            // Now a genuine hang inside the window: V3 has no retry flag, so it is a plain timeout.
            emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
            let (r, s) = sc.copy("hung copy inside the reset window")?;
            if !matches!(r, Err(NdmaError::Timeout { .. })) || s.retries != 0 {
                return Err(CliError::Verify("expected a plain -ETIMEDOUT with no retry on V3".into()));
            }
            out.say("  V3: no retry (retry flag off); the ring was re-initialised");
        }
    }
    Ok(())
}

fn hang(sc: &mut Scenario<'_>, eng: u32, qid: u32) -> CliResult {
    let out = sc.out;
    sc.w.emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    out.say(format_args!("fault plan: hang engine {eng} queue {qid} on its next work (no reset in progress)"));
    let (r, s) = sc.copy("hung copy")?;
    if !matches!(r, Err(NdmaError::Timeout { .. })) || s.retries != 0 {
        return Err(CliError::Verify("expected -ETIMEDOUT with no retry".into()));
    }
    out.say("  no retry: the op was not inside a reset window; the ring was re-initialised (hang cleared)");
    sc.w.reset_dst()?;
    let (r, _) = sc.copy("next copy")?;
    r.op_ctx(|| "the copy after the hang")?;
    sc.verify("copy after the hang")?;
    out.say("  the next copy on the device succeeded; data verified");
    Ok(())
}
