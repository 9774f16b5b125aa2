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

use std::time::Instant;

use ndma_emu::ExecPolicy;
use serde::Serialize;

use crate::cli::BenchArgs;
use crate::error::{CliError, CliResult, OpContext};
use crate::util::bed::{testbed, BedOpts, Dir, Window};
use crate::util::measure::Rig;
use crate::util::size::fmt_size;
use crate::util::table::{fmt_gbps, fmt_ratio, Table};
use crate::util::timing::gbps;

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

/// Runs `ndma bench`.
///
/// # Errors
///
/// Set-up, op-layer and verification failures, and failure to write the JSON file.
pub fn run(opts: BedOpts, a: &BenchArgs) -> CliResult {
    let p = Params::new(a.quick);
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let arch = dev.dhal().arch().to_string();
    let statistic = format!("best of {} interleaved samples (DMA and memcpy alike)", p.samples);
    println!(
        "ndma bench on an emulated {} ({arch}), NC 0, threaded engines, {} poll budgets; throughput = {statistic}; \
         GB/s = 10⁹ B/s{}",
        opts.instance.name,
        if opts.emulation_budgets { "emulation" } else { "silicon" },
        if a.quick { "; --quick: 1 sample, no 256 MiB cases, short streams" } else { "" }
    );
    println!(
        "async rows: a stream of copies cycling over a window (×copies/window), beside the same stream as sync copies"
    );
    println!("timeouts = poll budgets that ran out during the timed operations (any that the op layer did not recover fails the case)");
    let mut cases = Vec::new();
    let mut rig = Rig::new(dev, emu, 0, p.samples, p.max_size)?;
    let mut failures: Vec<CliError> = Vec::new();
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

    for dir in Dir::ALL {
        for size in SYNC_SIZES.into_iter().filter(|&s| s <= p.max_size) {
            let mut c = Case::new(dir.name(), &arch, "sync", size);
            let m = match rig.sync_copy(dir, size) {
                Ok(m) => m,
                Err(e) => {
                    failed(&mut t, &mut c, &e, "sync");
                    cases.push(c);
                    failures.push(e);
                    continue;
                }
            };
            let (g, mg) = (gbps(size, m.op), gbps(size, m.memcpy));
            (c.gbps, c.memcpy_gbps, c.ratio, c.timeouts) = (Some(g), Some(mg), Some(g / mg), Some(m.stats.timeouts));
            t.row(vec![
                dir.name().into(),
                "sync".into(),
                fmt_size(size),
                fmt_gbps(g),
                fmt_gbps(mg),
                fmt_ratio(g / mg),
                String::new(),
                String::new(),
                m.stats.timeouts.to_string(),
            ]);
            cases.push(c);
        }
    }
    for dir in ASYNC_DIRS {
        for size in ASYNC_SIZES {
            let count = (p.stream_bytes / size).max(p.min_stream_copies);
            let mut c = Case::new(dir.name(), &arch, "async", size);
            let slots = (p.stream_window / size).clamp(2, count);
            c.stream_window_bytes = Some(slots * size);
            let s = match rig.stream(dir, size, count, slots) {
                Ok(s) => s,
                Err(e) => {
                    failed(&mut t, &mut c, &e, "async");
                    cases.push(c);
                    failures.push(e);
                    continue;
                }
            };
            let bytes = size * count;
            let (g, sg, mg) = (gbps(bytes, s.async_t), gbps(bytes, s.sync_t), gbps(bytes, s.memcpy_t));
            (c.gbps, c.memcpy_gbps, c.ratio) = (Some(g), Some(mg), Some(g / mg));
            (c.sync_gbps, c.async_over_sync, c.stream_copies) = (Some(sg), Some(g / sg), Some(count));
            let timeouts = s.async_stats.timeouts + s.sync_stats.timeouts;
            c.timeouts = Some(timeouts);
            t.row(vec![
                dir.name().into(),
                format!("async ×{count}/{}", fmt_size(slots * size)),
                fmt_size(size),
                fmt_gbps(g),
                fmt_gbps(mg),
                fmt_ratio(g / mg),
                fmt_gbps(sg),
                fmt_ratio(g / sg),
                timeouts.to_string(),
            ]);
            cases.push(c);
        }
    }
    drop(rig);
    print!("{}", t.render());
    match roundtrip(dev, emu, &arch, p.roundtrips) {
        Ok(rt) => {
            let (med, p99, fw) = (rt.median_ns.unwrap_or(0), rt.p99_ns.unwrap_or(0), rt.first_wait_ns.unwrap_or(0));
            println!(
                "roundtrip_4k (h2d, submit → acked completion, {} iterations): median {med} ns, p99 {p99} ns; DHAL \
                 first wait {fw} ns; median above the first wait: {} ns",
                p.roundtrips,
                med as i64 - fw as i64
            );
            cases.push(rt);
        }
        Err(e) => {
            let mut c = Case::new("roundtrip_4k", &arch, "sync", 4096);
            c.error = Some(e.to_string());
            println!("roundtrip_4k: FAILED: {e}");
            cases.push(c);
            failures.push(e);
        }
    }
    let report = Report { instance: opts.instance.name.into(), statistic, samples: p.samples, quick: a.quick, cases };
    if let Some(path) = &a.json {
        let text =
            serde_json::to_string_pretty(&report).map_err(|e| CliError::Io(format!("serialising the report: {e}")))?;
        std::fs::write(path, text + "\n").map_err(|e| CliError::Io(format!("writing {}: {e}", path.display())))?;
        println!("wrote {}", path.display());
    }
    match failures.len() {
        0 => Ok(()),
        n => {
            for f in &failures[1..] {
                eprintln!("ndma: error: {f}");
            }
            eprintln!("ndma: {n} bench case(s) failed");
            Err(failures.swap_remove(0))
        }
    }
}

/// Records a failed case in the table and the JSON.
fn failed(t: &mut Table, c: &mut Case, e: &CliError, mode: &str) {
    t.row(vec![c.name.clone(), mode.into(), fmt_size(c.size), "FAILED".into()]);
    c.error = Some(e.to_string());
}

/// Many 4 KiB h2d copies, each timed from submit to the return of `memcpy_mc` (marker seen, batch acked).
fn roundtrip(dev: &ndma::NeuronDevice, emu: &ndma_emu::EmuDevice, arch: &str, n: usize) -> CliResult<Case> {
    const SIZE: u64 = 4096;
    let w = Window::new(dev, emu, Dir::H2d, SIZE, 0, 0x4b)?;
    for _ in 0..(n / 10).max(100) {
        w.copy(0, SIZE).op_ctx(|| "roundtrip_4k warm-up")?;
    }
    w.reset_dst()?;
    let mut ns = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        w.copy(0, SIZE).op_ctx(|| "roundtrip_4k")?;
        ns.push(t0.elapsed().as_nanos() as u64);
    }
    w.verify("roundtrip_4k", true)?;
    ns.sort_unstable();
    let pct = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize];
    let mut c = Case::new("roundtrip_4k", arch, "sync", SIZE);
    c.median_ns = Some(pct(0.5));
    c.p99_ns = Some(pct(0.99));
    c.first_wait_ns = Some(dev.dhal().wait_budget(2, false).first_wait_us * 1000);
    Ok(c)
}
