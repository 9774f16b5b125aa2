//! `ndma copy`: one verified copy (or, with `--async N`, a stream of N copies through `AsyncPipeline`), with
//! a progress bar for long transfers, then the ring counters and the throughput.
//!
//! The time reported is the transfer's own: taken on the submitting thread immediately around the copy (or
//! the whole pipeline, submit to drained), whether or not a progress bar samples the ring's byte counter
//! beside it.

use ndma::{AsyncPipeline, Transfer};
use ndma_emu::ExecPolicy;
use serde::Serialize;

use crate::cli::CopyArgs;
use crate::cli::{testbed, BedOpts};
use crate::error::{CliError, CliResult, OpContext};
use crate::util::report::{counters_table, timed_with_progress, Counters, EngineCounters};
use crate::util::size::fmt_size;
use crate::util::table::fmt_gbps;
use crate::util::timing::gbps;
use ndma_emu::test_utils::{Dir, Window, GUARD};

/// The `--json` schema, shown by `ndma copy --help` (the README has the same).
pub const JSON_SCHEMA: &str = "\
JSON (--json FILE, or --json - for stdout instead of the report): one object
  command      \"copy\"
  instance     instance preset, e.g. \"trn1.2xlarge\"
  arch         \"v2\" or \"v3\"
  dir          \"h2d\", \"d2h\", \"d2d\" or \"h2h\"
  nc           NeuronCore whose H2T ring was used
  mode         \"sync\" (one memcpy_mc) or \"async\" (AsyncPipeline)
  size         bytes per copy
  copies       number of copies (1 for sync)
  total_bytes  size × copies
  elapsed_ns   the transfer's time: submit of the first copy to completion of the last
  gbps         total_bytes / elapsed, in 10^9 B/s
  verified     true: destination, guards and source checked byte for byte (a failure exits 3 without JSON)
  counters     the ring's counters over the transfer: transfers, bytes, descriptors, batches, doorbells,
               polls, wait_us, timeouts, retries, replays, ring_resets
  engine       the engine model's counters over the transfer: id, descriptors, copies, faults";

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct CopyReport {
    /// `"copy"`.
    pub command: &'static str,
    /// Instance preset.
    pub instance: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// Direction.
    pub dir: &'static str,
    /// NeuronCore.
    pub nc: u32,
    /// `sync` or `async`.
    pub mode: &'static str,
    /// Bytes per copy.
    pub size: u64,
    /// Copies.
    pub copies: u64,
    /// `size × copies`.
    pub total_bytes: u64,
    /// The transfer's time, ns.
    pub elapsed_ns: u64,
    /// Throughput, 10⁹ B/s.
    pub gbps: f64,
    /// Always true in a written report (a verification failure writes none).
    pub verified: bool,
    /// Ring counters over the transfer.
    pub counters: Counters,
    /// Engine counters over the transfer.
    pub engine: EngineCounters,
}

/// Runs `ndma copy`; `progress` allows the progress bar (off with `--quiet`).
///
/// # Errors
///
/// Bad arguments, set-up, copy and verification failures.
pub fn run(opts: BedOpts, a: &CopyArgs, progress: bool) -> CliResult {
    let count = match a.async_count {
        Some(0) => return Err(CliError::Usage("--async needs at least one copy".into())),
        Some(n) => n,
        None => 1,
    };
    let total = a
        .size
        .checked_mul(count)
        .filter(|t| t.checked_add(2 * GUARD).is_some())
        .ok_or_else(|| CliError::Usage(format!("{count} copies of {} bytes overflow 64 bits", a.size)))?;
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let (eng, _) = dev.h2t_queue(a.nc).op_ctx(|| "choosing the H2T ring")?;
    let w = Window::new(dev, emu, a.dir, total, a.nc, 0xc0b1)?;
    // Start the engine's worker thread (spawned on its first doorbell) with a small untimed copy elsewhere.
    // Host→device, whatever the direction: its budget (40 ms on V2) covers the thread start; a small
    // device→device batch's silicon budget (~210 µs) may not.
    Window::new(dev, emu, Dir::H2d, 4096, a.nc, 1)?.copy(0, 4096).op_ctx(|| "warm-up copy")?;
    let before = dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?;
    let eng_before = emu.engine_stats(eng).unwrap_or_default();
    let what = format!("{} copy of {} bytes", a.dir.name(), a.size);
    let done = || dev.ring_stats(a.nc).map(|s| s.bytes).unwrap_or(0);
    let timed = timed_with_progress(total, progress, done, || match a.async_count {
        None => w.copy(0, a.size),
        Some(_) => {
            let mut pipe = AsyncPipeline::new(dev);
            for i in 0..count {
                let off = GUARD + i * a.size;
                pipe.submit(&Transfer::new(&w.src, &w.dst, a.size).src_offset(off).dst_offset(off))?;
            }
            pipe.finish()
        }
    });
    let elapsed = timed.elapsed();
    timed.value.op_ctx(|| what.clone())?;
    w.verify(&what, true)?;
    let counters = Counters::from(&dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?.since(&before));
    let engine = EngineCounters::delta(eng, &emu.engine_stats(eng).unwrap_or_default(), &eng_before);
    let report = CopyReport {
        command: "copy",
        instance: opts.instance.name.into(),
        arch: dev.dhal().arch().to_string(),
        dir: a.dir.name(),
        nc: a.nc,
        mode: if a.async_count.is_some() { "async" } else { "sync" },
        size: a.size,
        copies: count,
        total_bytes: total,
        elapsed_ns: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        gbps: gbps(total, elapsed),
        verified: true,
        counters,
        engine,
    };
    let out = a.json.out();
    let mode = match a.async_count {
        None => "1 synchronous copy".to_string(),
        Some(n) => format!("{n} async copies (AsyncPipeline)"),
    };
    out.say(format_args!(
        "{}: {mode} of {} bytes ({}) on {} NC {} — verified byte-exact (guards intact, source unchanged)",
        a.dir.long_name(),
        a.size,
        fmt_size(a.size),
        opts.instance.name,
        a.nc
    ));
    out.text(&counters_table(&report.counters, Some(&report.engine)));
    out.say(format_args!(
        "{} bytes in {:.3} ms: {} GB/s (one run, submit to completion; buffers already touched, engine worker \
         started by an untimed 4 KiB copy)",
        total,
        elapsed.as_secs_f64() * 1e3,
        fmt_gbps(report.gbps)
    ));
    out.wrote(a.json.write(&report)?);
    Ok(())
}
