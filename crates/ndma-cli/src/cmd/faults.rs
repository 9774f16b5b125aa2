//! `ndma faults`: scripted failure scenarios that show how the op layer behaves when the device misbehaves.
//!
//! - `reset-window`: a copy whose doorbell rings while its NeuronCore is being reset. On V2 the model hangs
//!   the queue (the silicon bug); the op layer times out, sees the op inside the reset window, re-initialises
//!   the ring, replays the chunks and returns verified data. On V3 there is no bug and no retry.
//! - `hang`: a queue hung outside any reset window: `-ETIMEDOUT` with no retry, the ring re-initialised, and
//!   the next copy on the device succeeds.

use std::time::Instant;

use ndma::{NdmaError, Platform, StatsSnapshot};
use ndma_emu::{ExecPolicy, PlannedFault};
use udma::Arch;

use crate::cli::{FaultScenario, FaultsArgs};
use crate::error::{errno_name, CliError, CliResult, OpContext};
use crate::util::bed::{testbed, BedOpts, Dir, Window};

/// Bytes each scenario copies (several descriptors, one batch).
const COPY_BYTES: u64 = 200_000;

fn show(label: &str, s: &StatsSnapshot) {
    println!(
        "  {label}: transfers {}, batches {}, descriptors {}, polls {}, timeouts {}, retries {}, replays {}, ring re-inits {}",
        s.transfers, s.batches, s.descriptors, s.polls, s.timeouts, s.retries, s.replays, s.ring_resets
    );
}

fn outcome(r: &ndma::Result<()>) -> String {
    match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("{e} (errno {} {})", e.errno(), errno_name(e.errno())),
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
    println!(
        "{} ({arch}): NC {nc}'s H2T ring is engine {eng} queue {qid}; retry flag {}",
        opts.instance.name,
        dev.dhal().retry_memcpy()
    );
    let w = Window::new(dev, emu, Dir::H2d, COPY_BYTES, nc, 0xfa17)?;
    match a.scenario {
        FaultScenario::ResetWindow => reset_window(&tb, &w, arch, nc, eng, qid, a.reset_ms),
        FaultScenario::Hang => hang(&w, nc, eng, qid),
    }
}

fn reset_window(
    tb: &ndma_emu::Testbed,
    w: &Window<'_>,
    arch: Arch,
    nc: u32,
    eng: u32,
    qid: u32,
    reset_ms: u64,
) -> CliResult {
    let (dev, emu) = (w.dev, w.emu);
    let j0 = tb.platform.jiffies();
    emu.reset_nc(nc, reset_ms);
    println!("jiffies {j0}: reset of NC {nc} started, lasting {reset_ms} jiffies (ms)");
    let t0 = Instant::now();
    let r = w.copy(0, COPY_BYTES);
    let elapsed = t0.elapsed();
    println!(
        "copy of {COPY_BYTES} bytes host→device staged at jiffies {j0}: {} after {:.1} ms",
        outcome(&r),
        elapsed.as_secs_f64() * 1e3
    );
    let s = dev.ring_stats(nc).op_ctx(|| "reading ring counters")?;
    show("ring", &s);
    match arch {
        Arch::V2 => {
            r.op_ctx(|| "the V2 reset-window copy")?;
            if s.retries == 0 {
                return Err(CliError::Verify("expected the V2 copy to hit the reset-window hang and retry".into()));
            }
            println!(
                "  V2: the doorbell rang during the reset, the queue hung, the wait timed out inside the reset window, \
                 the ring was re-initialised and the batch replayed"
            );
            w.verify("reset-window copy", true)?;
            println!("  data verified: guards intact, every byte of the window right");
        }
        Arch::V3 => {
            r.op_ctx(|| "the V3 copy during a reset")?;
            w.verify("V3 copy during a reset", true)?;
            println!("  V3: no reset-window bug, the copy completed during the reset; data verified");
            // Now a genuine hang inside the window: V3 has no retry flag, so it is a plain timeout.
            emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
            let r = w.copy(0, COPY_BYTES);
            println!("hung queue inside the reset window: {}", outcome(&r));
            let s = dev.ring_stats(nc).op_ctx(|| "reading ring counters")?;
            show("ring", &s);
            if !matches!(r, Err(NdmaError::Timeout { .. })) || s.retries != 0 {
                return Err(CliError::Verify("expected a plain -ETIMEDOUT with no retry on V3".into()));
            }
            println!("  V3: no retry (retry flag off); the ring was re-initialised");
        }
    }
    Ok(())
}

fn hang(w: &Window<'_>, nc: u32, eng: u32, qid: u32) -> CliResult {
    let (dev, emu) = (w.dev, w.emu);
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    println!("fault plan: hang engine {eng} queue {qid} on its next work (no reset in progress)");
    let t0 = Instant::now();
    let r = w.copy(0, COPY_BYTES);
    println!("copy of {COPY_BYTES} bytes: {} after {:.1} ms", outcome(&r), t0.elapsed().as_secs_f64() * 1e3);
    let s = dev.ring_stats(nc).op_ctx(|| "reading ring counters")?;
    show("ring", &s);
    if !matches!(r, Err(NdmaError::Timeout { .. })) || s.retries != 0 {
        return Err(CliError::Verify("expected -ETIMEDOUT with no retry".into()));
    }
    println!("  no retry: the op was not inside a reset window; the ring was re-initialised (hang cleared)");
    w.reset_dst()?;
    w.copy(0, COPY_BYTES).op_ctx(|| "the copy after the hang")?;
    w.verify("copy after the hang", true)?;
    let s2 = dev.ring_stats(nc).op_ctx(|| "reading ring counters")?.since(&s);
    show("next copy", &s2);
    println!("  the next copy on the device succeeded; data verified");
    Ok(())
}
