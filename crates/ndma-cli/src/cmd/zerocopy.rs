//! `ndma zerocopy`: a verified zero-copy transfer of a user buffer. The buffer is mapped in a user process
//! entered on the command's thread (layout contiguous, scattered or runs of K frames), guarded on both sides,
//! and moved to or from a guarded device window by `zerocopy_submit` — synchronously, or as async requests
//! whose completions are taken from the ring's completion queue.
//!
//! What the op layer did is checked against what it must do: the pieces and descriptors it counted against
//! the plan of the op layer's own `plan_descriptors` over the frames the pages map to, the pages pinned and
//! unpinned (dirty after device→host) against the pieces, exactly one completion per request in order, every
//! byte of both windows and their guards, and finally the leak check (no frame pinned, nothing queued).

use std::time::Instant;

use ndma::zerocopy::{CqConsumer, NEURON_DMA_H2T_DEFAULT_QID};
use ndma::NeuronDevice;
use ndma_emu::{ExecPolicy, Testbed};
use serde::Serialize;

use crate::cli::ZerocopyArgs;
use crate::cli::{testbed, BedOpts};
use crate::error::{CliError, CliResult, OpContext};
use crate::util::output::Out;
use crate::util::report::Counters;
use crate::util::size::fmt_size;
use crate::util::table::{fmt_gbps, Table};
use crate::util::timing::gbps;
use crate::util::user::{Process, UserWindow};
use crate::util::zc::{
    context_of, enable_override, expect_cqes, plan_request, submit_async, take_cqes, wait_for_room, wait_status, Cqe,
    Leaks, Piece, Pins, PlanTotals, QUEUE_USABLE,
};
use ndma_emu::test_utils::GUARD;

/// The pid of the user process the command runs as.
const PID: u32 = 4242;

/// The `--json` schema, shown by `ndma zerocopy --help` (the README has the same).
pub const JSON_SCHEMA: &str = "\
JSON (--json FILE, or --json - for stdout instead of the report): one object, written when the transfer,
every check and the leak check passed (otherwise the command exits non-zero without JSON)
  command          \"zerocopy\"
  instance         instance preset, e.g. \"trn1.2xlarge\"
  arch             \"v2\" or \"v3\"
  override         true when the command turned zerocopy_trn1_override on (V2)
  dir              \"h2d\" or \"d2h\"
  nc               NeuronCore whose H2T ring was used; engine, queue: that ring
  mode             \"sync\" or \"async\"
  prepinned        whether the window was pre-pinned (pin_host_memory) before the transfer
  layout           \"contiguous\", \"scattered\" or \"runs:K\"
  seed             seed of the frame placement and the data pattern
  size             bytes moved, over all requests
  offset           offset of the window in the user buffer (page offset = offset mod 4096)
  requests, ops    requests, and batch ops per request
  user_va          user address of the first byte moved
  device_pa        device address of the first byte moved
  guard_bytes      guard bytes before and after both windows (GUARD)
  elapsed_ns       first submit to last completion
  gbps             size / elapsed, in 10^9 B/s
  verified         true: both windows and their guards checked byte for byte
  pieces           pieces issued (each: its data descriptors, a marker, one doorbell pair)
  runs             runs of physically consecutive frames the data was coalesced from (planned)
  data_descriptors data descriptors (planned; descriptors - pieces)
  descriptors      descriptor pairs staged, markers included
  doorbells        doorbell writes (RX and TX each count)
  counters         the ring's counters over the transfer: transfers, bytes, descriptors, batches, doorbells,
                   polls, wait_us, timeouts, retries, replays, ring_resets
  pins             pin activity during the transfer: fast_calls, slow_calls, remote_calls, short_pins,
                   failed_calls, pinned_pages, unpinned_pages, dirty_unpins
  prepin           with --prepinned, the pin activity of pre-pinning (same fields), and contiguous_pa:
                   the range's device address when its frames are contiguous (else absent)
  cqes             async: the completions taken, in order: sequence_num, compl_ret, context (sync: [])
  leak_check       after the transfer: pinned_frames, pins, orphaned_frames, bad_unpins, pinned_ranges,
                   contexts, queue_pinned_pages, backlog, ring_slots_used, ring_slots_accounted, clean";

/// Pre-pinning, in the `--json` document.
#[derive(Debug, Serialize)]
pub struct Prepin {
    /// Pin activity of `pin_host_memory`.
    #[serde(flatten)]
    pub pins: Pins,
    /// The range's device address when its frames are contiguous.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contiguous_pa: Option<u64>,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct ZerocopyReport {
    /// `"zerocopy"`.
    pub command: &'static str,
    /// Instance preset.
    pub instance: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// The command turned the override on.
    #[serde(rename = "override")]
    pub override_on: bool,
    /// Direction.
    pub dir: &'static str,
    /// NeuronCore.
    pub nc: u32,
    /// H2T engine.
    pub engine: u32,
    /// H2T queue.
    pub queue: u32,
    /// `sync` or `async`.
    pub mode: &'static str,
    /// Pre-pinned.
    pub prepinned: bool,
    /// Layout.
    pub layout: String,
    /// Placement and pattern seed.
    pub seed: u64,
    /// Bytes moved.
    pub size: u64,
    /// Window offset in the user buffer.
    pub offset: u64,
    /// Requests.
    pub requests: u64,
    /// Ops per request.
    pub ops: u64,
    /// First user byte.
    pub user_va: u64,
    /// First device byte.
    pub device_pa: u64,
    /// GUARD.
    pub guard_bytes: u64,
    /// First submit to last completion, ns.
    pub elapsed_ns: u64,
    /// Throughput.
    pub gbps: f64,
    /// Always true in a written report.
    pub verified: bool,
    /// Pieces issued.
    pub pieces: u64,
    /// Planned runs.
    pub runs: u64,
    /// Planned data descriptors.
    pub data_descriptors: u64,
    /// Descriptor pairs staged.
    pub descriptors: u64,
    /// Doorbell writes.
    pub doorbells: u64,
    /// Ring counters.
    pub counters: Counters,
    /// Pin activity of the transfer.
    pub pins: Pins,
    /// Pre-pinning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepin: Option<Prepin>,
    /// Completions taken.
    pub cqes: Vec<Cqe>,
    /// The leak check.
    pub leak_check: Leaks,
}

/// Refuses `--ops`/`--requests` of 0, and more parts than bytes.
fn usage(a: &ZerocopyArgs) -> CliResult {
    if a.ops == 0 || a.requests == 0 {
        return Err(CliError::Usage("--ops and --requests need at least 1".into()));
    }
    match a.ops.checked_mul(a.requests) {
        Some(parts) if parts <= a.size.max(1) => Ok(()),
        _ => {
            Err(CliError::Usage(format!("{} requests × {} ops is more parts than {} bytes", a.requests, a.ops, a.size)))
        }
    }
}

/// Runs the requests and, async, takes their completions (exactly one per request, in order). Returns the
/// completions, the time from the first submit to the last completion, and how many async submits were
/// refused `-EBUSY` and repeated.
fn transfer(
    dev: &NeuronDevice,
    a: &ZerocopyArgs,
    w: &UserWindow,
    requests: &[Vec<ndma::BatchOp>],
    plans: &[Vec<Piece>],
) -> CliResult<(Vec<Cqe>, std::time::Duration, u64)> {
    let to_device = a.dir.to_device();
    let what = |r: usize| {
        let pieces = plans[r].len() as u64;
        let note = if a.is_async && pieces > QUEUE_USABLE {
            format!(", more than the {QUEUE_USABLE} contexts a queue holds: use more --requests")
        } else {
            String::new()
        };
        let noun = if pieces == 1 { "piece" } else { "pieces" };
        format!("{} zero-copy request {} of {} ({pieces} {noun}{note})", a.dir.name(), r + 1, requests.len())
    };
    if !a.is_async {
        let t0 = Instant::now();
        for (r, ops) in requests.iter().enumerate() {
            dev.zerocopy_submit(a.nc, ops, &w.mc, 0, NEURON_DMA_H2T_DEFAULT_QID, to_device, 0, 0).op_ctx(|| what(r))?;
        }
        return Ok((Vec::new(), t0.elapsed(), 0));
    }
    let cq = CqConsumer::new(&dev.completion_queue(a.nc).op_ctx(|| "mapping the completion queue")?)
        .op_ctx(|| "mapping the completion queue")?;
    let mut busy = 0;
    let mut got = Vec::with_capacity(requests.len());
    let t0 = Instant::now();
    for (r, (ops, plan)) in requests.iter().zip(plans).enumerate() {
        let seq = r as u64 + 1;
        let pieces = plan.len() as u64;
        // Completions are taken as they come (a completion queue nobody drains stops the submits, -EBUSY),
        // and a request goes in only when the context queue can take it whole.
        wait_for_room(dev, a.nc, &cq, pieces, &mut got)?;
        busy += submit_async(dev, a.nc, ops, &w.mc, to_device, seq, pieces).op_ctx(|| what(r))?;
    }
    let rest = requests.len().saturating_sub(got.len());
    got.extend(take_cqes(&cq, rest)?);
    let elapsed = t0.elapsed();
    let want: Vec<Cqe> = (1..=requests.len() as u64)
        .map(|seq| Cqe { sequence_num: seq, compl_ret: 0, context: context_of(seq) })
        .collect();
    expect_cqes(&cq, &got, &want)?;
    Ok((got, elapsed, busy))
}

/// The counts the op layer reported must be the plan's, and the pins the pieces'.
fn check_counts(a: &ZerocopyArgs, planned: &PlanTotals, counters: &ndma::StatsSnapshot, pins: &Pins) -> CliResult {
    let mut wrong = Vec::new();
    if counters.zc_pieces != planned.pieces {
        wrong.push(format!("{} pieces issued, {} planned", counters.zc_pieces, planned.pieces));
    }
    if counters.descriptors != planned.descriptors {
        wrong.push(format!("{} descriptors staged, {} planned", counters.descriptors, planned.descriptors));
    }
    if counters.doorbells != 2 * planned.pieces {
        wrong.push(format!("{} doorbells, 2 per piece planned", counters.doorbells));
    }
    let pinned = if a.prepinned { 0 } else { planned.pages };
    if pins.pinned_pages != pinned || pins.unpinned_pages != pinned {
        wrong
            .push(format!("{} pages pinned and {} unpinned, {pinned} planned", pins.pinned_pages, pins.unpinned_pages));
    }
    let dirty = if a.dir.to_device() { 0 } else { pinned };
    if pins.dirty_unpins != dirty {
        wrong.push(format!("{} pages unpinned dirty, {dirty} expected", pins.dirty_unpins));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(CliError::Verify(format!("the op layer's counts are not the plan's: {}", wrong.join("; "))))
    }
}

/// Runs `ndma zerocopy`.
///
/// # Errors
///
/// Bad arguments, set-up, op-layer and verification failures (counts, completions, bytes, leaks), and
/// failure to write the JSON.
pub fn run(opts: BedOpts, a: &ZerocopyArgs) -> CliResult {
    usage(a)?;
    let tb: Testbed = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let arch = dev.dhal().arch();
    let out: Out = a.json.out();
    let (engine, queue) = dev.h2t_queue(a.nc).op_ctx(|| "choosing the H2T ring")?;
    out.say(format_args!(
        "{} zero-copy of {} bytes ({}) on {} ({arch}), NC {}: H2T ring = engine {engine} queue {queue}, threaded \
         engines",
        a.dir.long_name(),
        a.size,
        fmt_size(a.size),
        opts.instance.name,
        a.nc
    ));
    let override_on = enable_override(dev, out);
    let proc = Process::enter(tb.emu.host(), PID);
    let (to_device, layout) = (a.dir.to_device(), a.layout.name());
    let w = UserWindow::new(dev, emu, &proc.mm, a.dir, a.size, a.offset, a.layout, a.seed, &[], a.nc)?;
    let device_pa = dev.mc_to_pa(&w.mc) + GUARD;
    out.say(format_args!(
        "user buffer of process {PID}: {} pages at {:#x}, layout {layout} (seed {}); window at {:#x} (page offset \
         {}), guarded; device window at {device_pa:#x}, guarded",
        w.map_len / ndma::PAGE_SIZE,
        w.map_va,
        a.seed,
        w.va,
        w.va % ndma::PAGE_SIZE
    ));
    let prepin = if a.prepinned {
        let before = proc.mm.pin_stats();
        let contiguous_pa = tb.system.pin_host_memory(w.va, a.size.max(1)).op_ctx(|| "pre-pinning the user window")?;
        let pins = Pins::between(&before, &proc.mm.pin_stats());
        out.say(format_args!(
            "pre-pinned the window once (pin_host_memory): {} pages; {}",
            pins.pinned_pages,
            contiguous_pa.map_or("frames not contiguous".into(), |pa| format!("contiguous at {pa:#x}"))
        ));
        Some(Prepin { pins, contiguous_pa })
    } else {
        None
    };
    let requests = w.requests(a.requests, a.ops);
    let base = dev.mc_to_pa(&w.mc);
    let plans: Vec<Vec<Piece>> =
        requests.iter().map(|ops| plan_request(arch, &proc.mm, ops, base, to_device)).collect::<CliResult<_>>()?;
    let planned = PlanTotals::of(plans.iter().flatten());
    let mode = if a.is_async { "async" } else { "sync" };
    out.say(format_args!(
        "{} {mode} request(s) of {} op(s){}",
        a.requests,
        a.ops,
        if a.is_async { ", sequence numbers 1..=N, completions taken from the ring's completion queue" } else { "" }
    ));
    let before = dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?;
    let pins_before = proc.mm.pin_stats();
    let (cqes, elapsed, busy) = transfer(dev, a, &w, &requests, &plans)?;
    let what = format!("{} zero-copy of {} bytes", a.dir.name(), a.size);
    w.verify(emu, &what)?;
    let moved = dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?.since(&before);
    // A sync request's pieces are released before zerocopy_submit returns; an async piece is released by the
    // completion thread just after its completion is posted, so wait for the queue to empty before reading
    // the unpins.
    if a.is_async {
        wait_status(dev, a.nc, "the zero-copy queue did not empty", |s| s.contexts == 0)?;
    }
    let pins = Pins::between(&pins_before, &proc.mm.pin_stats());
    check_counts(a, &planned, &moved, &pins)?;
    if a.prepinned {
        tb.system.unpin_host_memory(w.va).op_ctx(|| "unpinning the pre-pinned window")?;
    }
    let leaks = Leaks::check(&tb.system, dev, tb.emu.host())?;
    let report = ZerocopyReport {
        command: "zerocopy",
        instance: opts.instance.name.into(),
        arch: arch.to_string(),
        override_on,
        dir: a.dir.name(),
        nc: a.nc,
        engine,
        queue,
        mode,
        prepinned: a.prepinned,
        layout,
        seed: a.seed,
        size: a.size,
        offset: a.offset,
        requests: a.requests,
        ops: a.ops,
        user_va: w.va,
        device_pa,
        guard_bytes: GUARD,
        elapsed_ns: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        gbps: gbps(a.size, elapsed),
        verified: true,
        pieces: moved.zc_pieces,
        runs: planned.runs,
        data_descriptors: planned.data_descriptors,
        descriptors: moved.descriptors,
        doorbells: moved.doorbells,
        counters: Counters::from(&moved),
        pins,
        prepin,
        cqes,
        leak_check: leaks,
    };
    print_report(out, &report, busy);
    leaks.ensure_clean(&what)?;
    out.wrote(a.json.write(&report)?);
    Ok(())
}

fn print_report(out: Out, r: &ZerocopyReport, busy: u64) {
    let mut t = Table::new(&["what the op layer did", ">count"]);
    let rows = [
        ("pieces (≤ 64 pages each)", r.pieces),
        ("runs of consecutive frames", r.runs),
        ("data descriptors (≤ 64 KiB each)", r.data_descriptors),
        ("descriptors staged (data + one marker per piece)", r.descriptors),
        ("doorbells (RX + TX per piece)", r.doorbells),
        ("marker polls", r.counters.polls),
    ];
    for (k, v) in rows {
        t.row(vec![k.into(), v.to_string()]);
    }
    out.text(&t.render());
    out.say(r.pins.line());
    if let Some(p) = &r.prepin {
        out.say(format_args!("  (pre-pinning: {})", p.pins.line()));
    }
    if r.mode == "async" {
        let list: Vec<String> = r.cqes.iter().map(ToString::to_string).collect();
        let shown = if list.len() > 8 {
            format!("{} … {}", list[..4].join(" "), list[list.len() - 2..].join(" "))
        } else {
            list.join(" ")
        };
        out.say(format_args!(
            "completions: {} taken, exactly one per request, in order: {shown}{}",
            r.cqes.len(),
            if busy > 0 {
                format!(" ({busy} submits refused -EBUSY while the queue was full, then repeated)")
            } else {
                String::new()
            }
        ));
    } else {
        out.say("completions: none (synchronous requests are done when zerocopy_submit returns)");
    }
    out.say(r.leak_check.line());
    out.say(format_args!(
        "verified byte-exact (source unchanged, destination guards intact); counts match plan_descriptors over the \
         user pages' frames; {} bytes in {:.3} ms: {} GB/s",
        r.size,
        r.elapsed_ns as f64 / 1e6,
        fmt_gbps(r.gbps)
    ));
}
