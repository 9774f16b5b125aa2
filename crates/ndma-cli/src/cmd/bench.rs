//! `ndma bench`: end-to-end figures on NC 0, each beside single-thread memcpy of the same bytes measured in
//! the same run (samples interleaved; the best sample of each counts):
//! - `mode: sync` — `h2d`, `d2h`, `d2d`, `h2h` at 4 KiB … 256 MiB, one `memcpy_mc` per operation;
//! - `mode: async` — `h2d`, `d2h` at 64 KiB, 1 MiB, 16 MiB: a stream of copies through `AsyncPipeline`,
//!   beside the same stream as sync copies (`sync_gbps`, `async_over_sync`). The stream (64 MiB, at least 8
//!   copies) cycles over a 4 MiB window (at least two copies' worth; `stream_window_bytes`) so that it measures
//!   the op layer and the engine rather than DRAM bandwidth; memcpy does the same stream;
//! - `roundtrip_4k` — a 4 KiB h2d copy from submit to acked completion, median and p99 over many iterations,
//!   beside the DHAL's first wait.
//!
//! `--quick` (for tests): one sample, no 256 MiB cases, short streams and fewer round trips.
//!
//! [`run`] reads as its steps: the header, the sync cases, the async cases (both on one [`Rig`]), the
//! throughput table, the round trip, the JSON, and the failures.

use std::time::Instant;

use hdrhistogram::Histogram;
use ndma_emu::ExecPolicy;
use serde::Serialize;

use crate::cli::BenchArgs;
use crate::error::{CliError, CliResult, OpContext};
use crate::util::bed::{testbed, BedOpts, Dir, Window};
use crate::util::measure::Rig;
use crate::util::output::Out;
use crate::util::size::fmt_size;
use crate::util::table::{fmt_gbps, fmt_ratio, Table};
use crate::util::timing::gbps;

/// The `--json` schema, shown by `ndma bench --help` (the README has the same).
pub const JSON_SCHEMA: &str = "\
JSON (--json FILE, or --json - for stdout instead of the report): one object, written also when cases
failed (they carry `error`; the command then exits non-zero)
  command      \"bench\"
  instance     instance preset, e.g. \"trn1.2xlarge\"
  statistic    how throughput figures are reduced (best of N interleaved samples)
  samples      timed samples per case
  quick        whether --quick was given
  cases        one object per case:
    name                \"h2d\", \"d2h\", \"d2d\", \"h2h\" or \"roundtrip_4k\"
    arch                \"v2\" or \"v3\"
    mode                \"sync\" or \"async\"
    size                bytes per copy
    gbps                throughput, 10^9 B/s
    memcpy_gbps         single-thread memcpy of the same bytes, same run
    ratio               gbps / memcpy_gbps
    sync_gbps           async cases: the same stream as sync copies
    async_over_sync     async cases: gbps / sync_gbps
    stream_copies       async cases: copies in the stream
    stream_window_bytes async cases: bytes of the window the stream cycles over
    timeouts            timed operations that hit the poll budget
    median_ns, p99_ns   roundtrip_4k: submit to acked completion
    first_wait_ns       roundtrip_4k: the DHAL's first wait for the batch
    error               why the case failed (then no figures)
  Fields that do not apply to a case are absent.";

/// Sizes of the sync cases.
pub const SYNC_SIZES: [u64; 5] = [4096, 65536, 1 << 20, 16 << 20, 256 << 20];
/// Sizes of the async cases.
pub const ASYNC_SIZES: [u64; 3] = [65536, 1 << 20, 16 << 20];
/// Directions of the async cases.
pub const ASYNC_DIRS: [Dir; 2] = [Dir::H2d, Dir::D2h];

/// One line of the JSON report.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// `h2d`, `d2h`, `d2d`, `h2h` or `roundtrip_4k`.
    pub name: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// `sync` or `async`.
    pub mode: &'static str,
    /// Bytes per copy.
    pub size: u64,
    /// Throughput (10⁹ B/s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    /// Single-thread memcpy of the same bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memcpy_gbps: Option<f64>,
    /// `gbps / memcpy_gbps`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Async cases: the same stream as sync copies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_gbps: Option<f64>,
    /// Async cases: `gbps / sync_gbps`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub async_over_sync: Option<f64>,
    /// Copies in an async stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_copies: Option<u64>,
    /// Poll budgets that ran out during the timed operations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<u64>,
    /// Why the case failed (no figures then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Async cases: bytes of the window the stream cycles over (source and destination each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_window_bytes: Option<u64>,
    /// Round trip: median ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_ns: Option<u64>,
    /// Round trip: 99th percentile ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<u64>,
    /// Round trip: the DHAL's first wait for the batch (1 data + 1 marker descriptor), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_wait_ns: Option<u64>,
}

impl Case {
    fn new(name: &str, arch: &str, mode: &'static str, size: u64) -> Case {
        Case {
            name: name.into(),
            arch: arch.into(),
            mode,
            size,
            gbps: None,
            memcpy_gbps: None,
            ratio: None,
            sync_gbps: None,
            async_over_sync: None,
            stream_copies: None,
            timeouts: None,
            error: None,
            stream_window_bytes: None,
            median_ns: None,
            p99_ns: None,
            first_wait_ns: None,
        }
    }
}

/// The JSON report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `"bench"`.
    pub command: &'static str,
    /// Instance preset.
    pub instance: String,
    /// How throughput figures are reduced.
    pub statistic: String,
    /// Timed samples per case.
    pub samples: u32,
    /// Whether `--quick` was used.
    pub quick: bool,
    /// The figures.
    pub cases: Vec<Case>,
}

/// Bench parameters.
#[derive(Debug, Clone, Copy)]
struct Params {
    samples: u32,
    max_size: u64,
    stream_bytes: u64,
    min_stream_copies: u64,
    stream_window: u64,
    roundtrips: usize,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            Params {
                samples: 1,
                max_size: 16 << 20,
                stream_bytes: 8 << 20,
                min_stream_copies: 2,
                stream_window: 4 << 20,
                roundtrips: 2000,
            }
        } else {
            Params {
                samples: 5,
                max_size: 256 << 20,
                stream_bytes: 64 << 20,
                min_stream_copies: 8,
                stream_window: 4 << 20,
                roundtrips: 50_000,
            }
        }
    }
}

/// The cases measured so far and the errors of those that failed.
#[derive(Default)]
struct Results {
    cases: Vec<Case>,
    failures: Vec<CliError>,
}

impl Results {
    /// Records `c`, or `c` marked failed with `e`.
    fn push(&mut self, mut c: Case, r: CliResult) {
        if let Err(e) = r {
            c.error = Some(e.to_string());
            self.failures.push(e);
        }
        self.cases.push(c);
    }

    /// Ok, or the first failure (the others, and how many failed, on stderr).
    fn finish(mut self) -> CliResult {
        match self.failures.len() {
            0 => Ok(()),
            n => {
                for f in &self.failures[1..] {
                    eprintln!("ndma: error: {f}");
                }
                eprintln!("ndma: {n} bench case(s) failed");
                Err(self.failures.swap_remove(0))
            }
        }
    }
}

/// What the figures mean, before the table.
fn print_header(out: Out, opts: BedOpts, arch: &str, statistic: &str, quick: bool) {
    out.say(format_args!(
        "ndma bench on an emulated {} ({arch}), NC 0, threaded engines, {} poll budgets; throughput = {statistic}; \
         GB/s = 10⁹ B/s{}",
        opts.instance.name,
        if opts.emulation_budgets { "emulation" } else { "silicon" },
        if quick { "; --quick: 1 sample, no 256 MiB cases, short streams" } else { "" }
    ));
    out.say(
        "async rows: a stream of copies cycling over a window (×copies/window), beside the same stream as sync copies",
    );
    out.say("timeouts = poll budgets that ran out during the timed operations (any the op layer did not recover fails the case)");
}

/// One synchronous `memcpy_mc` per operation, every direction and size.
fn sync_cases(rig: &mut Rig<'_>, arch: &str, p: &Params, res: &mut Results) {
    for dir in Dir::ALL {
        for size in SYNC_SIZES.into_iter().filter(|&s| s <= p.max_size) {
            let mut c = Case::new(dir.name(), arch, "sync", size);
            let r = rig.sync_copy(dir, size).map(|m| {
                let (g, mg) = (gbps(size, m.op), gbps(size, m.memcpy));
                (c.gbps, c.memcpy_gbps, c.ratio) = (Some(g), Some(mg), Some(g / mg));
                c.timeouts = Some(m.stats.timeouts);
            });
            res.push(c, r);
        }
    }
}

/// Streams of async copies beside the same streams as sync copies.
fn async_cases(rig: &mut Rig<'_>, arch: &str, p: &Params, res: &mut Results) {
    for dir in ASYNC_DIRS {
        for size in ASYNC_SIZES {
            let count = (p.stream_bytes / size).max(p.min_stream_copies);
            let slots = (p.stream_window / size).clamp(2, count);
            let mut c = Case::new(dir.name(), arch, "async", size);
            c.stream_window_bytes = Some(slots * size);
            c.stream_copies = Some(count);
            let r = rig.stream(dir, size, count, slots).map(|s| {
                let bytes = size * count;
                let (g, sg, mg) = (gbps(bytes, s.async_t), gbps(bytes, s.sync_t), gbps(bytes, s.memcpy_t));
                (c.gbps, c.memcpy_gbps, c.ratio) = (Some(g), Some(mg), Some(g / mg));
                (c.sync_gbps, c.async_over_sync) = (Some(sg), Some(g / sg));
                c.timeouts = Some(s.async_stats.timeouts + s.sync_stats.timeouts);
            });
            res.push(c, r);
        }
    }
}

/// The throughput cases as a table (a failed case's row says FAILED).
fn throughput_table(cases: &[Case]) -> Table {
    let mut t = Table::new(&[
        "case",
        "mode",
        ">size",
        ">GB/s",
        ">memcpy GB/s",
        ">ratio",
        ">sync GB/s",
        ">async/sync",
        ">timeouts",
    ]);
    for c in cases {
        let mode = match (c.mode, c.stream_copies, c.stream_window_bytes) {
            ("async", Some(n), Some(w)) => format!("async ×{n}/{}", fmt_size(w)),
            (m, _, _) => m.to_string(),
        };
        let mut row = vec![c.name.clone(), mode, fmt_size(c.size)];
        match (c.gbps, c.memcpy_gbps, c.ratio) {
            (Some(g), Some(mg), Some(r)) => row.extend([
                fmt_gbps(g),
                fmt_gbps(mg),
                fmt_ratio(r),
                c.sync_gbps.map(fmt_gbps).unwrap_or_default(),
                c.async_over_sync.map(fmt_ratio).unwrap_or_default(),
                c.timeouts.unwrap_or(0).to_string(),
            ]),
            _ => row.push("FAILED".into()),
        }
        t.row(row);
    }
    t
}

/// The 4 KiB round trip, printed and recorded.
fn roundtrip_case(
    dev: &ndma::NeuronDevice,
    emu: &ndma_emu::EmuDevice,
    arch: &str,
    n: usize,
    out: Out,
    res: &mut Results,
) {
    match roundtrip(dev, emu, arch, n) {
        Ok(rt) => {
            let (med, p99, fw) = (rt.median_ns.unwrap_or(0), rt.p99_ns.unwrap_or(0), rt.first_wait_ns.unwrap_or(0));
            out.say(format_args!(
                "roundtrip_4k (h2d, submit → acked completion, {n} iterations): median {med} ns, p99 {p99} ns; DHAL \
                 first wait {fw} ns; median above the first wait: {} ns",
                med as i64 - fw as i64
            ));
            res.push(rt, Ok(()));
        }
        Err(e) => {
            out.say(format_args!("roundtrip_4k: FAILED: {e}"));
            res.push(Case::new("roundtrip_4k", arch, "sync", 4096), Err(e));
        }
    }
}

/// Runs `ndma bench`.
///
/// # Errors
///
/// Set-up, op-layer and verification failures (after every case ran and the JSON was written), and failure
/// to write the JSON file.
pub fn run(opts: BedOpts, a: &BenchArgs) -> CliResult {
    let p = Params::new(a.quick);
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let arch = dev.dhal().arch().to_string();
    let out = a.json.out();
    let statistic = format!("best of {} interleaved samples (DMA and memcpy alike)", p.samples);
    print_header(out, opts, &arch, &statistic, a.quick);
    let mut res = Results::default();
    let mut rig = Rig::new(dev, emu, 0, p.samples, p.max_size)?;
    sync_cases(&mut rig, &arch, &p, &mut res);
    async_cases(&mut rig, &arch, &p, &mut res);
    drop(rig);
    out.text(&throughput_table(&res.cases).render());
    roundtrip_case(dev, emu, &arch, p.roundtrips, out, &mut res);
    let report = Report {
        command: "bench",
        instance: opts.instance.name.into(),
        statistic,
        samples: p.samples,
        quick: a.quick,
        cases: std::mem::take(&mut res.cases),
    };
    out.wrote(a.json.write(&report)?);
    res.finish()
}

/// Many 4 KiB h2d copies, each timed from submit to the return of `memcpy_mc` (marker seen, batch acked);
/// median and p99 from an HDR histogram (3 significant figures).
fn roundtrip(dev: &ndma::NeuronDevice, emu: &ndma_emu::EmuDevice, arch: &str, n: usize) -> CliResult<Case> {
    const SIZE: u64 = 4096;
    let w = Window::new(dev, emu, Dir::H2d, SIZE, 0, 0x4b)?;
    for _ in 0..(n / 10).max(100) {
        w.copy(0, SIZE).op_ctx(|| "roundtrip_4k warm-up")?;
    }
    w.reset_dst()?;
    // Up to 60 s per round trip (a silicon-budget timeout is far shorter), 3 significant figures: constants
    // the constructor accepts.
    let mut ns = Histogram::<u64>::new_with_max(60_000_000_000, 3).expect("valid histogram bounds");
    for _ in 0..n {
        let t0 = Instant::now();
        w.copy(0, SIZE).op_ctx(|| "roundtrip_4k")?;
        ns.saturating_record(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    w.verify("roundtrip_4k", true)?;
    let mut c = Case::new("roundtrip_4k", arch, "sync", SIZE);
    c.median_ns = Some(ns.value_at_quantile(0.5));
    c.p99_ns = Some(ns.value_at_quantile(0.99));
    c.first_wait_ns = Some(dev.dhal().wait_budget(2, false).first_wait_us * 1000);
    Ok(c)
}
