//! `ndma demo`: a verified tour on the emulated instance — host→device, device→host, device→device and
//! host→host copies of 4 KiB … 256 MiB, memsets of 1 MiB and 256 MiB, and zero-copy transfers of a scattered
//! user buffer (1 MiB and 16 MiB, both directions) on NC 0, each warmed up, timed beside single-thread memcpy
//! of the same bytes, and checked byte for byte.

use std::sync::Arc;

use ndma::zerocopy::NEURON_DMA_H2T_DEFAULT_QID;
use ndma_emu::{AddressSpace, ExecPolicy};
use serde::Serialize;

use crate::cli::DemoArgs;
use crate::cli::{testbed, BedOpts};
use crate::error::{CliError, CliResult, OpContext};
use crate::util::measure::{Measured, Rig};
use crate::util::output::Out;
use crate::util::size::fmt_size;
use crate::util::table::{fmt_gbps, fmt_ratio, Table};
use crate::util::timing::{gbps, Plan};
use crate::util::user::{Layout, Process, UserDir, UserWindow};
use crate::util::zc::{enable_override, Leaks};
use ndma_emu::test_utils::Dir;

/// Copy sizes of the tour.
pub const COPY_SIZES: [u64; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];
/// Memset sizes of the tour.
pub const MEMSET_SIZES: [u64; 2] = [1 << 20, 256 << 20];
/// Zero-copy sizes of the tour (a scattered user buffer: every page on its own frame).
pub const ZC_SIZES: [u64; 2] = [1 << 20, 16 << 20];
/// The pid of the user process whose buffers the zero-copy rows move.
const ZC_PID: u32 = 4244;
/// Timed samples per case (best counts).
const SAMPLES: u32 = 3;
/// `--quick`: sizes up to this, one sample.
const QUICK_MAX_SIZE: u64 = 1 << 20;

/// The `--json` schema, shown by `ndma demo --help` (the README has the same).
pub const JSON_SCHEMA: &str = "\
JSON (--json FILE, or --json - for stdout instead of the report): one object, written also when cases
failed (they carry `error`; the command then exits non-zero)
  command      \"demo\"
  instance     instance preset, e.g. \"trn1.2xlarge\"
  arch         \"v2\" or \"v3\"
  devices      devices on the instance
  budgets      \"emulation\" or \"silicon\" poll budgets
  samples      timed samples per case (the best counts)
  quick        whether --quick was given (1 sample, sizes up to 1 MiB)
  zerocopy_override   true when the zero-copy rows turned zerocopy_trn1_override on (V2)
  cases        one object per case, in order:
    operation           \"h2d\", \"d2h\", \"d2d\", \"h2h\" (copies), \"memset\", or \"h2d_zc\", \"d2h_zc\"
                        (zero-copy of a user buffer: one synchronous zerocopy_submit per operation)
    layout              zero-copy rows: the user buffer's layout, \"scattered\"
    size                bytes per operation
    ops                 timed operations
    descriptors_per_op, batches_per_op, polls_per_op   ring counters per timed operation (a zero-copy
                        piece is one batch)
    gbps                throughput of the best sample, 10^9 B/s
    memcpy_gbps         single-thread memcpy of the same bytes, same run
    ratio               gbps / memcpy_gbps
    timeouts            timed operations that hit the poll budget
    verified            destination, guards and source checked byte for byte
    error               why the case failed (then no figures)";

/// One case of the `--json` document.
#[derive(Debug, Clone, Serialize)]
pub struct DemoCase {
    /// `h2d`, `d2h`, `d2d`, `h2h`, `memset`, `h2d_zc` or `d2h_zc`.
    pub operation: &'static str,
    /// Zero-copy rows: the user buffer's layout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// Bytes per operation.
    pub size: u64,
    /// Timed operations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops: Option<u64>,
    /// Descriptor pairs per operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub descriptors_per_op: Option<f64>,
    /// Batches per operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batches_per_op: Option<f64>,
    /// Polls per operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polls_per_op: Option<f64>,
    /// Throughput, 10⁹ B/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    /// memcpy of the same bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memcpy_gbps: Option<f64>,
    /// `gbps / memcpy_gbps`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Timed operations that timed out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<u64>,
    /// Verified byte for byte.
    pub verified: bool,
    /// Why the case failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct DemoReport {
    /// `"demo"`.
    pub command: &'static str,
    /// Instance preset.
    pub instance: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// Devices on the instance.
    pub devices: u32,
    /// `emulation` or `silicon`.
    pub budgets: &'static str,
    /// Timed samples per case.
    pub samples: u32,
    /// Whether `--quick` was given.
    pub quick: bool,
    /// The zero-copy rows turned `zerocopy_trn1_override` on.
    pub zerocopy_override: bool,
    /// The cases.
    pub cases: Vec<DemoCase>,
}

fn per_op(total: u64, ops: u64) -> f64 {
    total as f64 / ops.max(1) as f64
}

fn fmt_per_op(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

impl DemoCase {
    /// The case from its measurement (or failure).
    fn new(operation: &'static str, size: u64, r: &CliResult<Measured>) -> Self {
        let mut c = DemoCase {
            operation,
            layout: None,
            size,
            ops: None,
            descriptors_per_op: None,
            batches_per_op: None,
            polls_per_op: None,
            gbps: None,
            memcpy_gbps: None,
            ratio: None,
            timeouts: None,
            verified: r.is_ok(),
            error: None,
        };
        match r {
            Ok(m) => {
                let (g, base) = (gbps(size, m.op), gbps(size, m.memcpy));
                c.ops = Some(m.ops);
                c.descriptors_per_op = Some(per_op(m.stats.descriptors, m.ops));
                c.batches_per_op = Some(per_op(m.stats.batches, m.ops));
                c.polls_per_op = Some(per_op(m.stats.polls, m.ops));
                (c.gbps, c.memcpy_gbps, c.ratio, c.timeouts) =
                    (Some(g), Some(base), Some(g / base), Some(m.stats.timeouts));
            }
            Err(e) => c.error = Some(e.to_string()),
        }
        c
    }

    /// The case as a table row.
    fn row(&self) -> Vec<String> {
        let zc = UserDir::ALL.iter().find(|d| format!("{}_zc", d.name()) == self.operation);
        let label = match (Dir::ALL.iter().find(|d| d.name() == self.operation), zc) {
            (Some(d), _) => format!("{} copy", d.long_name()),
            (None, Some(d)) => format!("{} zero-copy ({})", d.long_name(), self.layout.as_deref().unwrap_or("")),
            (None, None) => "memset (device)".into(),
        };
        let mut cells = vec![label, fmt_size(self.size)];
        match (self.gbps, self.memcpy_gbps, self.ratio) {
            (Some(g), Some(base), Some(ratio)) => cells.extend([
                fmt_per_op(self.descriptors_per_op.unwrap_or(0.0)),
                fmt_per_op(self.batches_per_op.unwrap_or(0.0)),
                fmt_per_op(self.polls_per_op.unwrap_or(0.0)),
                fmt_gbps(g),
                fmt_gbps(base),
                fmt_ratio(ratio),
                self.timeouts.unwrap_or(0).to_string(),
                "ok".into(),
            ]),
            _ => {
                cells.resize(9, String::new());
                cells.push("FAILED".into());
            }
        }
        cells
    }
}

/// Every case of the tour up to `max_size`, measured in order; a failed case is recorded and the tour goes on.
fn measure(rig: &mut Rig<'_>, max_size: u64) -> (Vec<DemoCase>, Vec<CliError>) {
    let (mut cases, mut failures) = (Vec::new(), Vec::new());
    let mut record = |op: &'static str, size: u64, r: CliResult<Measured>| {
        cases.push(DemoCase::new(op, size, &r));
        if let Err(e) = r {
            failures.push(e);
        }
    };
    for dir in Dir::ALL {
        for size in COPY_SIZES.into_iter().filter(|&s| s <= max_size) {
            record(dir.name(), size, rig.sync_copy(dir, size));
        }
    }
    for size in MEMSET_SIZES.into_iter().filter(|&s| s <= max_size) {
        record("memset", size, rig.memset(size));
    }
    (cases, failures)
}

/// The zero-copy rows: a synchronous `zerocopy_submit` of a scattered user buffer of `mm` in each direction at
/// each of [`ZC_SIZES`] up to `max_size`, measured like the copies.
fn measure_zc(rig: &mut Rig<'_>, mm: &Arc<AddressSpace>, max_size: u64) -> (Vec<DemoCase>, Vec<CliError>) {
    let (mut cases, mut failures) = (Vec::new(), Vec::new());
    for dir in UserDir::ALL {
        for size in ZC_SIZES.into_iter().filter(|&s| s <= max_size) {
            let r = zc_copy(rig, mm, dir, size);
            let name = if dir.to_device() { "h2d_zc" } else { "d2h_zc" };
            let mut case = DemoCase::new(name, size, &r);
            case.layout = Some(Layout::Scattered.name());
            cases.push(case);
            if let Err(e) = r {
                failures.push(e);
            }
        }
    }
    (cases, failures)
}

/// A synchronous zero-copy transfer of `size` bytes between a guarded scattered user buffer and a guarded
/// device window: one untimed warm-up, the destination reset, timed samples ([`Plan::for_size`] transfers
/// each) interleaved with memcpy samples, then every byte of both windows and their guards verified.
fn zc_copy(rig: &mut Rig<'_>, mm: &Arc<AddressSpace>, dir: UserDir, size: u64) -> CliResult<Measured> {
    let what = format!("{} zero-copy of {size} bytes (scattered user buffer)", dir.name());
    let (dev, emu, nc) = (rig.dev, rig.emu, rig.nc);
    let w = UserWindow::new(dev, emu, mm, dir, size, 0, Layout::Scattered, size ^ 0x2c0, &[], nc)?;
    let ops = [w.op(0..size)];
    let submit = || dev.zerocopy_submit(nc, &ops, &w.mc, 0, NEURON_DMA_H2T_DEFAULT_QID, dir.to_device(), 0, 0);
    submit().op_ctx(|| format!("{what} (warm-up)"))?;
    w.reset_dst(emu)?;
    let plan = Plan::for_size(size, rig.samples);
    rig.baseline.prepare(size);
    let (op, memcpy, stats) = rig.interleaved(plan, &what, submit, |b| b.copy_once(size))?;
    w.verify(emu, &what)?;
    Ok(Measured::new(&op, &memcpy, stats, u64::from(plan.samples) * plan.iters))
}

/// The cases as the human table.
fn table(cases: &[DemoCase]) -> Table {
    let mut t = Table::new(&[
        "operation",
        ">size",
        ">descriptors",
        ">batches",
        ">polls",
        ">GB/s",
        ">memcpy GB/s",
        ">ratio",
        ">timeouts",
        "verified",
    ]);
    for c in cases {
        t.row(c.row());
    }
    t
}

/// Runs `ndma demo`.
///
/// # Errors
///
/// Set-up and op-layer failures; [`CliError::Verify`] if any case's bytes are wrong (after all cases ran).
pub fn run(opts: BedOpts, a: &DemoArgs) -> CliResult {
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let (samples, max_size) = if a.quick { (1, QUICK_MAX_SIZE) } else { (SAMPLES, COPY_SIZES[COPY_SIZES.len() - 1]) };
    let out: Out = a.json.out();
    out.say(format_args!(
        "ndma demo on an emulated {} ({} device(s), {}): NC 0, threaded engines, relaxed fabric ordering, real clock, \
         {} poll budgets",
        opts.instance.name,
        opts.instance.devices,
        dev.dhal().arch(),
        if opts.emulation_budgets { "emulation (×100000)" } else { "silicon" }
    ));
    out.say(format_args!(
        "each case: one untimed warm-up, then best of {samples} timed samples interleaved with single-thread memcpy \
         of the same bytes; every byte of the destination, its guards and the source verified; counters are per \
         operation"
    ));
    let zerocopy_override = enable_override(dev, out);
    let mut rig = Rig::new(dev, emu, 0, samples, max_size)?;
    let (mut cases, mut failures) = measure(&mut rig, max_size);
    let user = Process::enter(tb.emu.host(), ZC_PID);
    let (zc_cases, zc_failures) = measure_zc(&mut rig, &user.mm, max_size);
    cases.extend(zc_cases);
    failures.extend(zc_failures);
    drop(rig);
    // Every zero-copy row released what it pinned and queued.
    let leaks = Leaks::check(&tb.system, dev, tb.emu.host());
    if let Err(e) = leaks.and_then(|l| l.ensure_clean("after the zero-copy rows")) {
        failures.push(e);
    }
    out.text(&table(&cases).render());
    out.say(format_args!(
        "GB/s = 10⁹ bytes/s; ratio = GB/s ÷ memcpy GB/s (memset rows too: memcpy of the same byte count); timeouts = \
         poll budgets that ran out during the timed operations (any that the op layer did not recover fails the case); \
         zero-copy rows: one synchronous zerocopy_submit per operation, pinning the user pages each time \
         (batches = pieces), followed by a leak check (nothing may stay pinned or queued)"
    ));
    let report = DemoReport {
        command: "demo",
        instance: opts.instance.name.into(),
        arch: dev.dhal().arch().to_string(),
        devices: opts.instance.devices,
        budgets: if opts.emulation_budgets { "emulation" } else { "silicon" },
        samples,
        quick: a.quick,
        zerocopy_override,
        cases,
    };
    out.wrote(a.json.write(&report)?);
    let n_cases = report.cases.len();
    match failures.len() {
        0 => {
            out.say(format_args!("all {n_cases} cases verified byte-exact"));
            Ok(())
        }
        n => {
            for f in &failures[1..] {
                eprintln!("ndma: error: {f}");
            }
            eprintln!("ndma: {n} of {n_cases} cases failed");
            Err(failures.swap_remove(0))
        }
    }
}
