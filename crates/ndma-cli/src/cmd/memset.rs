//! `ndma memset`: set a window of a device chunk through the op layer's memset (fill the 64 KiB host buffer,
//! copy it in, replicate it device→device), then check every byte inside and the guard bytes around it.

use std::time::Instant;

use ndma_emu::ExecPolicy;
use serde::Serialize;

use crate::cli::MemsetArgs;
use crate::cli::{testbed, BedOpts};
use crate::error::{CliError, CliResult, OpContext};
use crate::util::report::{counters_table, Counters, EngineCounters};
use crate::util::size::fmt_size;
use crate::util::table::fmt_gbps;
use crate::util::timing::gbps;
use ndma_emu::test_utils::{alloc, fill_chunk, verify_chunk, Expect, GUARD};

/// The `--json` schema, shown by `ndma memset --help` (the README has the same).
pub const JSON_SCHEMA: &str = "\
JSON (--json FILE, or --json - for stdout instead of the report): one object
  command      \"memset\"
  instance     instance preset, e.g. \"trn1.2xlarge\"
  arch         \"v2\" or \"v3\"
  nc           NeuronCore owning the device chunk
  size         bytes set
  value        the byte written (0..=255)
  offset       where the window starts in the chunk (the guard before it is this long)
  guard_bytes  guard bytes on each side of the window
  guard_value  what the guards hold, before and after
  elapsed_ns   the memset call's time
  gbps         size / elapsed, in 10^9 B/s
  verified     true: window and guards checked byte for byte (a failure exits 3 without JSON)
  counters     the ring's counters over the memset: transfers, bytes, descriptors, batches, doorbells,
               polls, wait_us, timeouts, retries, replays, ring_resets
  engine       the engine model's counters over the memset: id, descriptors, copies, faults";

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct MemsetReport {
    /// `"memset"`.
    pub command: &'static str,
    /// Instance preset.
    pub instance: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// NeuronCore.
    pub nc: u32,
    /// Bytes set.
    pub size: u64,
    /// The byte written.
    pub value: u8,
    /// Offset of the window in the chunk.
    pub offset: u64,
    /// Guard bytes on each side.
    pub guard_bytes: u64,
    /// What the guards hold.
    pub guard_value: u8,
    /// The memset's time, ns.
    pub elapsed_ns: u64,
    /// Throughput, 10⁹ B/s.
    pub gbps: f64,
    /// Always true in a written report.
    pub verified: bool,
    /// Ring counters over the memset.
    pub counters: Counters,
    /// Engine counters over the memset.
    pub engine: EngineCounters,
}

/// The guard byte for a memset of `value`: anything else.
pub fn guard_byte(value: u8) -> u8 {
    if value == 0xEE {
        0x11
    } else {
        0xEE
    }
}

/// Runs `ndma memset`.
///
/// # Errors
///
/// Set-up, memset and verification failures.
pub fn run(opts: BedOpts, a: &MemsetArgs) -> CliResult {
    let total = a
        .size
        .checked_add(2 * GUARD)
        .ok_or_else(|| CliError::Usage(format!("a memset of {} bytes does not fit 64 bits", a.size)))?;
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let (eng, _) = dev.h2t_queue(a.nc).op_ctx(|| "choosing the H2T ring")?;
    let mc = alloc(dev, false, total, a.nc)?;
    let guard = guard_byte(a.value);
    fill_chunk(emu, &mc, 0, total, guard)?;
    let before = dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?;
    let eng_before = emu.engine_stats(eng).unwrap_or_default();
    let t0 = Instant::now();
    let r = dev.memset(&mc, GUARD, a.value, a.size);
    let elapsed = t0.elapsed();
    r.op_ctx(|| format!("memset of {} bytes", a.size))?;
    verify_chunk(emu, &mc, 0, GUARD, Expect::Byte(guard), "guard before the memset window")?;
    verify_chunk(emu, &mc, GUARD, a.size, Expect::Byte(a.value), "memset window")?;
    verify_chunk(emu, &mc, GUARD + a.size, GUARD, Expect::Byte(guard), "guard after the memset window")?;
    let counters = Counters::from(&dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?.since(&before));
    let engine = EngineCounters::delta(eng, &emu.engine_stats(eng).unwrap_or_default(), &eng_before);
    let report = MemsetReport {
        command: "memset",
        instance: opts.instance.name.into(),
        arch: dev.dhal().arch().to_string(),
        nc: a.nc,
        size: a.size,
        value: a.value,
        offset: GUARD,
        guard_bytes: GUARD,
        guard_value: guard,
        elapsed_ns: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        gbps: gbps(a.size, elapsed),
        verified: true,
        counters,
        engine,
    };
    let out = a.json.out();
    out.say(format_args!(
        "memset of {} bytes ({}) to {:#04x} at offset {GUARD} of a device chunk on {} NC {} — verified: every byte \
         inside is {:#04x}, the {GUARD}-byte guards on both sides still hold {guard:#04x}",
        a.size,
        fmt_size(a.size),
        a.value,
        opts.instance.name,
        a.nc,
        a.value
    ));
    out.text(&counters_table(&report.counters, Some(&report.engine)));
    out.say(format_args!("{} bytes in {:.3} ms: {} GB/s", a.size, elapsed.as_secs_f64() * 1e3, fmt_gbps(report.gbps)));
    out.wrote(a.json.write(&report)?);
    Ok(())
}
