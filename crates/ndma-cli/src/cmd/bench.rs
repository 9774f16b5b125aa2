//! `ndma bench`: end-to-end figures, each beside a baseline measured in the same run (samples interleaved):
//! - `mode: sync` — `h2d`, `d2h`, `d2d`, `h2h` at 4 KiB … 256 MiB, one `memcpy_mc` per operation, beside
//!   single-thread memcpy of the same bytes; best and median sample;
//! - `mode: async` — `h2d`, `d2h` at 64 KiB, 1 MiB, 16 MiB: a stream of copies through `AsyncPipeline`,
//!   beside the same stream as sync copies and as memcpys; the stream (64 MiB, at least 8 copies) cycles over
//!   a 4 MiB window so that it measures the op layer and the engine rather than DRAM bandwidth;
//! - `pipelined_4k` — 4 KiB copies through `AsyncPipeline` over one buffer, in ops/s, beside the same stream
//!   as memcpys, with the ring counters per copy;
//! - `roundtrip_4k` — a 4 KiB h2d copy from the call to its acked completion, median and p99, for both marker
//!   timings, and with the waiter's assist off (the engine's worker thread then executes every copy, so the
//!   completion crosses threads), beside a same-run cache-line ping-pong between two threads; the 4 KiB `d2d`
//!   sync row carries its round trip too;
//! - `roundtrip_idle_2ms`, `roundtrip_idle_50ms` — the same round trip after the process slept that long;
//! - zero-copy (issue 8 §4): a user buffer moved by zero-copy (`h2d_zc`, `d2h_zc`) and by the classic path
//!   with its bounce copy (`h2d_bounce`, `d2h_bounce`), see `util::zerocopy_bench`; and `user_copy`, the CPU
//!   copying the same user pages into a contiguous buffer (what the layout costs the CPU itself, the ceiling of
//!   a CPU-emulated engine, shown beside the scattered/contiguous goals);
//! - `scale` — one submitting thread per NC of a multi-device instance, beside as many memcpy threads;
//! - `idle_cpu` — what the process uses of a core while idle, after 100 ms;
//! - the goals of issues 8 and 9, as ratios of figures of this run.
//!
//! `--quick` (for tests): one sample, nothing above 16 MiB, short streams, fewer round trips, small zero-copy
//! and scale cases.

use std::path::Path;
use std::time::Duration;

use ndma::Instance;
use ndma_emu::{ExecPolicy, Testbed, WaitTiming};
use serde::Serialize;

use crate::cli::{testbed, BedOpts, BenchArgs};
use crate::error::{CliError, CliResult};
use crate::util::idle_cpu::idle_cpu_percent;
use crate::util::latency::{roundtrip, Latency};
use crate::util::measure::Rig;
use crate::util::output::Out;
use crate::util::pingpong::pingpong;
use crate::util::plot::{plot, Curve};
use crate::util::scale;
use crate::util::size::fmt_size;
use crate::util::table::{fmt_gbps, fmt_ratio, Table};
use crate::util::timing::{gbps, Plan};
use crate::util::zerocopy_bench::{case_name, Layout, Mode, ZcBed, WAYS};
use ndma_emu::test_utils::{Dir, Window};

/// The `--json` schema, shown by `ndma bench --help` (the README has the same).
pub const JSON_SCHEMA: &str = "\
JSON (--json FILE, or --json - for stdout instead of the report): one object, written also when cases
failed (they carry `error`; the command then exits non-zero)
  command      \"bench\"
  instance     instance preset, e.g. \"trn1.2xlarge\"
  timing       marker-wait timing of the run: \"marker\", or \"driver\" with --driver-timing
  statistic    how throughput figures are reduced (best and median of N interleaved samples)
  samples      timed samples per case
  quick        whether --quick was given
  cases        one object per case:
    name                \"h2d\", \"d2h\", \"d2d\", \"h2h\", \"pipelined_4k\", \"roundtrip_4k\",
                        \"roundtrip_idle_2ms\", \"roundtrip_idle_50ms\", \"h2d_zc\", \"d2h_zc\", \"h2d_bounce\",
                        \"d2h_bounce\", \"h2d_zc_pair\", \"user_copy\", \"scale\" or \"idle_cpu\"
    arch                \"v2\" or \"v3\"
    mode                \"sync\" or \"async\"; zero-copy and bounce rows also \"prepinned\"; user_copy \"cpu\"
    size                bytes per copy
    gbps                throughput of the best sample, 10^9 B/s (scale: aggregate of all rings)
    gbps_median         throughput of the median sample
    memcpy_gbps         single-thread memcpy of the same bytes, same run (scale: as many memcpy threads)
    ratio               gbps / memcpy_gbps
    sync_gbps           async cases: the same stream as sync copies
    async_over_sync     async cases: gbps / sync_gbps
    stream_copies       async and pipelined cases: copies in the stream
    stream_window_bytes async cases: bytes of the window the stream cycles over
    ops_per_s           pipelined_4k: copies per second through AsyncPipeline (best sample)
    memcpy_ops_per_s    pipelined_4k: the same stream as single-thread memcpys
    per_op              pipelined_4k: ring counters per copy (doorbells, polls, wait_us)
    timeouts            timed operations that hit the poll budget
    timing              roundtrip cases: \"marker\" or \"driver\"
    assist              roundtrip cases: whether waiting threads executed engine work themselves
    median_ns, p99_ns   roundtrip cases and the 4 KiB d2d row: call to acked completion
    pingpong_ns         roundtrip_4k: median same-run cache-line ping-pong round trip between two threads
    first_wait_ns       roundtrip_4k: the DHAL's first wait for the batch
    layout              zero-copy, bounce and user_copy rows: \"contiguous\" or \"scattered\" (user pages)
    versus              h2d_zc_pair: the way the row is compared with, \"sync contiguous\"; the two were
                        sampled alternately (a, b, b, a, ...) over the same bytes
    versus_gbps_median  h2d_zc_pair: the median throughput of `versus`
    over_versus         h2d_zc_pair: gbps_median / versus_gbps_median (the value of the zero-copy goals)
    rings               scale: rings (NCs) driven at once, one thread each
    cpu_percent         idle_cpu: CPU the process used while idle, percent of one core
    error               why the case failed (then no figures)
  goals        the goals of issues 8 and 9: goal, value, target, met (see the README)
  Fields that do not apply to a case are absent.";

/// Sizes of the sync cases.
pub const SYNC_SIZES: [u64; 5] = [4096, 65536, 1 << 20, 16 << 20, 256 << 20];
/// Sizes of the async cases.
pub const ASYNC_SIZES: [u64; 3] = [65536, 1 << 20, 16 << 20];
/// Directions of the async cases.
pub const ASYNC_DIRS: [Dir; 2] = [Dir::H2d, Dir::D2h];
/// Sizes of the zero-copy cases.
pub const ZC_SIZES: [u64; 4] = [65536, 1 << 20, 16 << 20, 256 << 20];
/// Ring counts of the scale case.
pub const SCALE_RINGS: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// Ring counters per copy of the pipelined case.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PerOp {
    /// Doorbell writes per copy.
    pub doorbells: f64,
    /// Marker polls per copy.
    pub polls: f64,
    /// Poll budget consumed per copy, µs.
    pub wait_us: f64,
}

/// One line of the JSON report.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// The case (see [`JSON_SCHEMA`]).
    pub name: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// `sync`, `async` or `prepinned`.
    pub mode: &'static str,
    /// Bytes per copy.
    pub size: u64,
    /// Throughput of the best sample (10⁹ B/s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    /// Throughput of the median sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps_median: Option<f64>,
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
    /// Copies in an async or pipelined stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_copies: Option<u64>,
    /// Async cases: bytes of the window the stream cycles over (source and destination each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_window_bytes: Option<u64>,
    /// Pipelined: copies per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_s: Option<f64>,
    /// Pipelined: the same stream as memcpys, per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memcpy_ops_per_s: Option<f64>,
    /// Pipelined: ring counters per copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_op: Option<PerOp>,
    /// Poll budgets that ran out during the timed operations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<u64>,
    /// Round trips: the marker timing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<&'static str>,
    /// Round trips: whether waiters executed engine work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assist: Option<bool>,
    /// Round trip: median ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_ns: Option<u64>,
    /// Round trip: 99th percentile ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<u64>,
    /// Round trip: the same-run two-thread ping-pong median, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pingpong_ns: Option<u64>,
    /// Round trip: the DHAL's first wait for the batch (1 data + 1 marker descriptor), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_wait_ns: Option<u64>,
    /// Zero-copy and bounce rows: the user buffer's layout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<&'static str>,
    /// Paired rows: the way this one is compared with (sampled alternately with it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versus: Option<String>,
    /// Paired rows: the median throughput of `versus`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versus_gbps_median: Option<f64>,
    /// Paired rows: `gbps_median / versus_gbps_median`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_versus: Option<f64>,
    /// Scale: rings driven at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rings: Option<usize>,
    /// Idle CPU, percent of one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    /// Why the case failed (no figures then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Case {
    fn new(name: &str, arch: &str, mode: &'static str, size: u64) -> Case {
        Case {
            name: name.into(),
            arch: arch.into(),
            mode,
            size,
            gbps: None,
            gbps_median: None,
            memcpy_gbps: None,
            ratio: None,
            sync_gbps: None,
            async_over_sync: None,
            stream_copies: None,
            stream_window_bytes: None,
            ops_per_s: None,
            memcpy_ops_per_s: None,
            per_op: None,
            timeouts: None,
            timing: None,
            assist: None,
            median_ns: None,
            p99_ns: None,
            pingpong_ns: None,
            first_wait_ns: None,
            layout: None,
            versus: None,
            versus_gbps_median: None,
            over_versus: None,
            rings: None,
            cpu_percent: None,
            error: None,
        }
    }

    fn throughput(&mut self, bytes: u64, best: Duration, median: Duration, memcpy: Duration) {
        let (g, mg) = (gbps(bytes, best), gbps(bytes, memcpy));
        (self.gbps, self.gbps_median, self.memcpy_gbps, self.ratio) =
            (Some(g), Some(gbps(bytes, median)), Some(mg), Some(g / mg));
    }

    fn latency(&mut self, l: Latency) {
        (self.median_ns, self.p99_ns) = (Some(l.median_ns), Some(l.p99_ns));
    }
}

/// One goal of issues 8 and 9, checked against this run.
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    /// What is compared.
    pub goal: String,
    /// The measured ratio (or figure).
    pub value: f64,
    /// The bound it must meet.
    pub target: String,
    /// Whether it does.
    pub met: bool,
}

/// The JSON report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `"bench"`.
    pub command: &'static str,
    /// Instance preset.
    pub instance: String,
    /// `marker` or `driver`.
    pub timing: &'static str,
    /// How throughput figures are reduced.
    pub statistic: String,
    /// Timed samples per case.
    pub samples: u32,
    /// Whether `--quick` was used.
    pub quick: bool,
    /// The figures.
    pub cases: Vec<Case>,
    /// The goals.
    pub goals: Vec<Goal>,
}

/// Bench parameters.
#[derive(Debug, Clone)]
struct Params {
    quick: bool,
    samples: u32,
    max_size: u64,
    stream_bytes: u64,
    min_stream_copies: u64,
    stream_window: u64,
    pipelined: u64,
    roundtrips: usize,
    idle_2ms: usize,
    idle_50ms: usize,
    zc_sizes: Vec<u64>,
    pair_samples: u32,
    scale_rings: Vec<usize>,
    scale_size: u64,
    scale_copies: u32,
    idle_window: Duration,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            Params {
                quick,
                samples: 1,
                max_size: 16 << 20,
                stream_bytes: 8 << 20,
                min_stream_copies: 2,
                stream_window: 4 << 20,
                pipelined: 5_000,
                roundtrips: 2000,
                idle_2ms: 10,
                idle_50ms: 2,
                zc_sizes: vec![65536, 1 << 20],
                pair_samples: 3,
                scale_rings: vec![1, 2],
                scale_size: 1 << 20,
                scale_copies: 1,
                idle_window: Duration::from_millis(200),
            }
        } else {
            Params {
                quick,
                samples: 5,
                max_size: 256 << 20,
                stream_bytes: 64 << 20,
                min_stream_copies: 8,
                stream_window: 4 << 20,
                pipelined: 200_000,
                roundtrips: 50_000,
                idle_2ms: 300,
                idle_50ms: 40,
                zc_sizes: ZC_SIZES.to_vec(),
                pair_samples: 11,
                scale_rings: SCALE_RINGS.to_vec(),
                scale_size: 16 << 20,
                scale_copies: 4,
                idle_window: Duration::from_secs(1),
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

    fn find(&self, pred: impl Fn(&Case) -> bool) -> Option<&Case> {
        self.cases.iter().find(|c| c.error.is_none() && pred(c))
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

fn timing_name(t: WaitTiming) -> &'static str {
    match t {
        WaitTiming::Marker => "marker",
        WaitTiming::Driver => "driver",
    }
}

/// What the figures mean, before the table.
fn print_header(out: Out, opts: BedOpts, arch: &str, statistic: &str, quick: bool) {
    out.say(format_args!(
        "ndma bench on an emulated {} ({arch}), NC 0, threaded engines, {} poll budgets, {} timing; throughput = \
         {statistic}; GB/s = 10⁹ B/s{}",
        opts.instance.name,
        if opts.emulation_budgets { "emulation" } else { "silicon" },
        timing_name(opts.timing),
        if quick { "; --quick: 1 sample, nothing above 16 MiB, short streams" } else { "" }
    ));
    out.say(
        "A waiting thread executes engine work nobody else is executing (the assist): a sync copy mostly runs on \
         the caller's thread; the round trip is also shown with the assist off (the worker thread does it all).",
    );
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
                c.throughput(size, m.op, m.op_median, m.memcpy);
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
                c.throughput(bytes, s.async_t, s.async_median, s.memcpy_t);
                let sg = gbps(bytes, s.sync_t);
                (c.sync_gbps, c.async_over_sync) = (Some(sg), c.gbps.map(|g| g / sg));
                c.timeouts = Some(s.async_stats.timeouts + s.sync_stats.timeouts);
            });
            res.push(c, r);
        }
    }
}

/// 4 KiB h2d copies pipelined over one buffer, in copies per second, with the ring counters per copy.
fn pipelined_case(rig: &mut Rig<'_>, arch: &str, p: &Params, out: Out, res: &mut Results) {
    const SIZE: u64 = 4096;
    let mut c = Case::new("pipelined_4k", arch, "async", SIZE);
    c.stream_copies = Some(p.pipelined);
    let r = rig.stream(Dir::H2d, SIZE, p.pipelined, 1).map(|s| {
        let n = p.pipelined as f64;
        let ops = n / s.async_t.as_secs_f64();
        let mops = n / s.memcpy_t.as_secs_f64();
        c.throughput(SIZE * p.pipelined, s.async_t, s.async_median, s.memcpy_t);
        (c.ops_per_s, c.memcpy_ops_per_s) = (Some(ops), Some(mops));
        c.sync_gbps = Some(gbps(SIZE * p.pipelined, s.sync_t));
        let st = s.async_stats;
        let copies = st.transfers.max(1) as f64;
        let per = PerOp {
            doorbells: st.doorbells as f64 / copies,
            polls: st.polls as f64 / copies,
            wait_us: st.wait_us as f64 / copies,
        };
        c.per_op = Some(per);
        c.timeouts = Some(st.timeouts);
        out.say(format_args!(
            "pipelined_4k (AsyncPipeline, {} h2d copies over one 4 KiB buffer): {:.2} Mops/s best, {:.2} Mops/s \
             median (sync copies {:.2} Mops/s; memcpy {:.2} Mops/s); per copy {:.1} doorbells, {:.2} polls, {:.2} \
             µs of poll budget",
            p.pipelined,
            ops / 1e6,
            n / s.async_median.as_secs_f64() / 1e6,
            n / s.sync_t.as_secs_f64() / 1e6,
            mops / 1e6,
            per.doorbells,
            per.polls,
            per.wait_us,
        ));
    });
    if let Err(e) = &r {
        out.say(format_args!("pipelined_4k: FAILED: {e}"));
    }
    res.push(c, r);
}

/// The throughput cases as a table (a failed case's row says FAILED).
fn throughput_table(cases: &[Case]) -> Table {
    let mut t = Table::new(&[
        "case",
        "mode",
        ">size",
        ">GB/s",
        ">median GB/s",
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
                c.gbps_median.map(fmt_gbps).unwrap_or_default(),
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

/// Round trips of 4 KiB copies: the ping-pong floor, h2d for both timings with the assist on and off, the
/// 4 KiB d2d row's, and h2d after idleness.
fn latency_cases(tb: &Testbed, opts: BedOpts, arch: &str, p: &Params, out: Out, res: &mut Results) {
    let (dev, emu) = tb.device(0);
    let pp = pingpong(p.roundtrips);
    out.say(format_args!(
        "pingpong (two threads, one cache line each way, {} round trips): median {} ns, p99 {} ns — the floor of any \
         two-thread completion",
        p.roundtrips, pp.median_ns, pp.p99_ns
    ));
    let lat = LatencyRun {
        arch,
        p,
        out,
        warm: (p.roundtrips / 10).max(100),
        pingpong_ns: pp.median_ns,
        first_wait_ns: dev.dhal().wait_budget(2, false).first_wait_us * 1000,
    };
    let window = |dir| Window::new(dev, emu, dir, ROUNDTRIP_SIZE, 0, 0x4b).map_err(CliError::from);
    let h2d = match window(Dir::H2d) {
        Ok(w) => w,
        Err(e) => return res.push(Case::new("roundtrip_4k", arch, "sync", ROUNDTRIP_SIZE), Err(e)),
    };
    roundtrip_settings(tb, &lat, &h2d, res);
    tb.platform.set_timing(opts.timing);
    tb.platform.set_assist(true);
    d2d_roundtrip(&lat, window(Dir::D2d), res);
    idle_roundtrips(&lat, opts, &h2d, res);
}

/// Bytes of every round trip.
const ROUNDTRIP_SIZE: u64 = 4096;

/// What the round-trip rows share.
struct LatencyRun<'a> {
    arch: &'a str,
    p: &'a Params,
    out: Out,
    /// Warm-up copies before each measurement.
    warm: usize,
    /// Median ping-pong between two threads, ns.
    pingpong_ns: u64,
    /// The DHAL's first wait of a small synchronous batch, ns.
    first_wait_ns: u64,
}

/// The 4 KiB h2d round trip under each marker timing, with the waiter's assist on and off.
fn roundtrip_settings(tb: &Testbed, lat: &LatencyRun<'_>, h2d: &Window<'_>, res: &mut Results) {
    let (pp, first_wait_ns) = (lat.pingpong_ns, lat.first_wait_ns);
    for (timing, assist) in [
        (WaitTiming::Marker, true),
        (WaitTiming::Driver, true),
        (WaitTiming::Marker, false),
        (WaitTiming::Driver, false),
    ] {
        tb.platform.set_timing(timing);
        tb.platform.set_assist(assist);
        let mut c = Case::new("roundtrip_4k", lat.arch, "sync", ROUNDTRIP_SIZE);
        (c.timing, c.assist, c.pingpong_ns, c.first_wait_ns) =
            (Some(timing_name(timing)), Some(assist), Some(pp), Some(first_wait_ns));
        let what =
            format!("roundtrip_4k ({} timing, assist {})", timing_name(timing), if assist { "on" } else { "off" });
        let r = roundtrip(h2d, ROUNDTRIP_SIZE, lat.p.roundtrips, lat.warm, Duration::ZERO, &what).map(|l| {
            c.latency(l);
            lat.out.say(format_args!(
                "{what}: median {} ns ({:.2}× ping-pong), p99 {} ns; DHAL first wait {first_wait_ns} ns",
                l.median_ns,
                l.median_ns as f64 / pp.max(1) as f64,
                l.p99_ns
            ));
        });
        res.push(c, r);
    }
}

/// The 4 KiB d2d sync row's round trip.
fn d2d_roundtrip(lat: &LatencyRun<'_>, d2d: CliResult<Window<'_>>, res: &mut Results) {
    let (p, size) = (lat.p, ROUNDTRIP_SIZE);
    let d2d = d2d.and_then(|w| roundtrip(&w, size, p.roundtrips, lat.warm, Duration::ZERO, "d2d 4 KiB round trip"));
    match d2d {
        Ok(l) => {
            if let Some(c) = res.cases.iter_mut().find(|c| c.name == "d2d" && c.mode == "sync" && c.size == size) {
                c.latency(l);
            }
            lat.out.say(format_args!("d2d 4 KiB sync round trip: median {} ns, p99 {} ns", l.median_ns, l.p99_ns));
        }
        Err(e) => res.push(Case::new("d2d", lat.arch, "sync", size), Err(e)),
    }
}

/// 4 KiB h2d round trips after the process slept 2 ms and 50 ms (engine workers dozing, then parked).
fn idle_roundtrips(lat: &LatencyRun<'_>, opts: BedOpts, h2d: &Window<'_>, res: &mut Results) {
    let p = lat.p;
    for (name, idle, n) in [
        ("roundtrip_idle_2ms", Duration::from_millis(2), p.idle_2ms),
        ("roundtrip_idle_50ms", Duration::from_millis(50), p.idle_50ms),
    ] {
        let mut c = Case::new(name, lat.arch, "sync", ROUNDTRIP_SIZE);
        c.timing = Some(timing_name(opts.timing));
        c.assist = Some(true);
        let r = roundtrip(h2d, ROUNDTRIP_SIZE, n, 10, idle, name).map(|l| {
            c.latency(l);
            lat.out.say(format_args!(
                "{name} (h2d 4 KiB after {} ms asleep, {n} times): median {} ns, p99 {} ns",
                idle.as_millis(),
                l.median_ns,
                l.p99_ns
            ));
        });
        res.push(c, r);
    }
}

/// The instance the zero-copy rows run on: the bench's if it is V3 (zero-copy is on there), else one V3
/// device (the driver offers async zero-copy only on V3).
fn zc_testbed(opts: BedOpts) -> CliResult<Testbed> {
    let instance = if opts.instance.arch == udma::Arch::V3 {
        opts.instance
    } else {
        Instance { name: "trn2.48xlarge", arch: udma::Arch::V3, devices: 1 }
    };
    testbed(BedOpts { instance, ..opts }, ExecPolicy::Threaded)
}

/// Zero-copy and bounce rows over user buffers of every size and layout.
fn zc_cases(opts: BedOpts, rig: &mut Rig<'_>, p: &Params, out: Out, res: &mut Results) {
    let first = res.cases.len();
    let tb = match zc_testbed(opts) {
        Ok(tb) => tb,
        Err(e) => return res.push(Case::new("h2d_zc", "v3", "sync", 0), Err(e)),
    };
    let arch = tb.system.devices()[0].dhal().arch().to_string();
    out.say(format_args!(
        "zero-copy rows: a user buffer on {arch} (device 0 of a V3 instance), zero-copy vs the classic path with its \
         bounce copy (CPU copy + DMA, both timed); async zero-copy: ≤ 16 MiB requests, ≤ 8 in flight; async bounce: \
         4 MiB pieces through AsyncPipeline"
    ));
    let mut bed = match ZcBed::new(&tb) {
        Ok(b) => b,
        Err(e) => return res.push(Case::new("h2d_zc", &arch, "sync", 0), Err(e)),
    };
    for &size in &p.zc_sizes {
        for layout in Layout::ALL {
            let buf = match bed.buffer(size, layout) {
                Ok(b) => b,
                Err(e) => {
                    res.push(Case::new("h2d_zc", &arch, "sync", size), Err(e));
                    continue;
                }
            };
            for to_device in [true, false] {
                for (way, mode) in WAYS {
                    let mut c = Case::new(case_name(way, to_device), &arch, mode.name(), size);
                    c.layout = Some(layout.name());
                    let plan = Plan::for_size(size, p.samples);
                    let r = bed.measure(&buf, way, mode, to_device, plan, &mut rig.baseline).and_then(|f| {
                        c.throughput(size, f.op.best(), f.op.median(), f.memcpy.best());
                        match bed.pinned_frames() {
                            0 => Ok(()),
                            n => Err(CliError::Verify(format!("{n} frames still pinned after {}", c.name))),
                        }
                    });
                    res.push(c, r);
                }
            }
            let mut c = Case::new("user_copy", &arch, "cpu", size);
            c.layout = Some(layout.name());
            let plan = Plan::for_size(size, p.samples);
            let r = bed
                .measure_cpu_copy(&buf, plan, &mut rig.baseline)
                .map(|f| c.throughput(size, f.op.best(), f.op.median(), f.memcpy.best()));
            res.push(c, r);
            if let Err(e) = bed.release(buf) {
                res.push(Case::new("h2d_zc", &arch, "sync", size), Err(e));
            }
        }
    }
    out.text(&zc_table(&res.cases[first..]).render());
    zc_pairs(&mut bed, &arch, p, out, res);
}

/// The comparisons the zero-copy goals make, each sampled alternately over the same bytes
/// ([`ZcBed::measure_pair`]): scattered against contiguous pages, pre-pinned against pinning every time.
fn zc_pairs(bed: &mut ZcBed<'_>, arch: &str, p: &Params, out: Out, res: &mut Results) {
    let first = res.cases.len();
    out.say(format_args!(
        "zero-copy goals, paired: h2d sync, {} samples of each way taken alternately (a, b, b, a, ...), medians",
        p.pair_samples
    ));
    let pairs = [
        (1 << 20, Layout::Scattered, Mode::Sync),
        (256 << 20, Layout::Scattered, Mode::Sync),
        (1 << 20, Layout::Contiguous, Mode::Prepinned),
    ];
    for (size, layout, mode) in pairs.into_iter().filter(|&(size, ..)| p.zc_sizes.contains(&size)) {
        let mut c = Case::new("h2d_zc_pair", arch, mode.name(), size);
        c.layout = Some(layout.name());
        c.versus = Some("sync contiguous".into());
        let plan = Plan { samples: p.pair_samples, ..Plan::for_size(size, 1) };
        let r = pair_case(bed, &mut c, size, layout, mode, plan);
        res.push(c, r);
    }
    out.text(&pair_table(&res.cases[first..]).render());
}

/// One paired case: a contiguous buffer moved synchronously against `layout` moved in `mode` (the same
/// buffer when the layouts agree), into `c`.
fn pair_case(bed: &mut ZcBed<'_>, c: &mut Case, size: u64, layout: Layout, mode: Mode, plan: Plan) -> CliResult {
    let base = bed.buffer(size, Layout::Contiguous)?;
    let other = match layout {
        Layout::Contiguous => None,
        _ => Some(bed.buffer(size, layout)?),
    };
    let r = bed.measure_pair((&base, Mode::Sync), (other.as_ref().unwrap_or(&base), mode), true, plan);
    bed.release(base)?;
    if let Some(o) = other {
        bed.release(o)?;
    }
    let (a, b) = r?;
    let (ga, gb) = (gbps(size, a.median()), gbps(size, b.median()));
    (c.gbps, c.gbps_median, c.versus_gbps_median, c.over_versus) =
        (Some(gbps(size, b.best())), Some(gb), Some(ga), Some(gb / ga));
    match bed.pinned_frames() {
        0 => Ok(()),
        n => Err(CliError::Verify(format!("{n} frames still pinned after a paired measurement"))),
    }
}

fn pair_table(cases: &[Case]) -> Table {
    let mut t = Table::new(&["way", ">size", "versus", ">median GB/s", ">versus median GB/s", ">ratio"]);
    for c in cases {
        let way = format!("{} {}", c.mode, c.layout.unwrap_or(""));
        let mut row = vec![way, fmt_size(c.size), c.versus.clone().unwrap_or_default()];
        match (c.gbps_median, c.versus_gbps_median, c.over_versus) {
            (Some(g), Some(v), Some(r)) => row.extend([fmt_gbps(g), fmt_gbps(v), fmt_ratio(r)]),
            _ => row.push("FAILED".into()),
        }
        t.row(row);
    }
    t
}

fn zc_table(cases: &[Case]) -> Table {
    let mut t = Table::new(&["case", "mode", "layout", ">size", ">GB/s", ">median GB/s", ">memcpy GB/s", ">ratio"]);
    for c in cases {
        let mut row = vec![c.name.clone(), c.mode.to_string(), c.layout.unwrap_or("").to_string(), fmt_size(c.size)];
        match (c.gbps, c.gbps_median, c.memcpy_gbps, c.ratio) {
            (Some(g), Some(gm), Some(mg), Some(r)) => {
                row.extend([fmt_gbps(g), fmt_gbps(gm), fmt_gbps(mg), fmt_ratio(r)])
            }
            _ => row.push("FAILED".into()),
        }
        t.row(row);
    }
    t
}

/// The multi-device instance of the scale case: the bench's own if it has several devices, else
/// trn1.32xlarge.
fn scale_instance(opts: BedOpts) -> Instance {
    if opts.instance.devices > 1 {
        opts.instance
    } else {
        Instance::TRN1_32XLARGE
    }
}

/// One submitting thread per NC, at growing ring counts, beside as many memcpy threads.
fn scale_cases(opts: BedOpts, p: &Params, out: Out, res: &mut Results) {
    let instance = scale_instance(opts);
    let arch = instance.arch.to_string();
    let built = testbed(BedOpts { instance, ..opts }, ExecPolicy::Threaded);
    let tb = match built {
        Ok(tb) => tb,
        Err(e) => return res.push(Case::new("scale", &arch, "sync", p.scale_size), Err(e)),
    };
    let mut lanes = match scale::lanes(&tb, p.scale_size) {
        Ok(l) => l,
        Err(e) => return res.push(Case::new("scale", &arch, "sync", p.scale_size), Err(e)),
    };
    out.say(format_args!(
        "scale ({}, one thread per NC, {} × {} h2d sync copies each, all at once; memcpy: as many threads, same \
         copies):",
        instance.name,
        p.scale_copies,
        fmt_size(p.scale_size)
    ));
    let mut t = Table::new(&["rings", ">GB/s", ">median GB/s", ">memcpy GB/s", ">ratio"]);
    let most = lanes.len();
    for &rings in p.scale_rings.iter().filter(|&&r| r <= most) {
        let mut c = Case::new("scale", &arch, "sync", p.scale_size);
        c.rings = Some(rings);
        let bytes = p.scale_size * u64::from(p.scale_copies) * rings as u64;
        let r = scale::measure(&mut lanes[..rings], p.scale_size, p.scale_copies, p.samples).map(|s| {
            c.throughput(bytes, s.dma.best(), s.dma.median(), s.memcpy.best());
        });
        match (&r, c.gbps, c.gbps_median, c.memcpy_gbps, c.ratio) {
            (Ok(()), Some(g), Some(gm), Some(mg), Some(ra)) => {
                t.row(vec![rings.to_string(), fmt_gbps(g), fmt_gbps(gm), fmt_gbps(mg), fmt_ratio(ra)])
            }
            _ => t.row(vec![rings.to_string(), "FAILED".into()]),
        }
        res.push(c, r);
    }
    out.text(&t.render());
}

/// The goals of issues 8 and 9 from this run's figures.
fn goals(res: &Results) -> Vec<Goal> {
    let mut g = Goals(Vec::new());
    throughput_goals(res, &mut g);
    latency_goals(res, &mut g);
    scale_goal(res, &mut g);
    zc_goals(res, &mut g);
    g.0
}

/// Goals as they are found; a goal whose figure this run lacks is left out.
struct Goals(Vec<Goal>);

impl Goals {
    fn add(&mut self, goal: String, value: Option<f64>, target: &str, met: fn(f64) -> bool) {
        if let Some(v) = value {
            self.0.push(Goal { goal, value: v, target: target.into(), met: met(v) });
        }
    }
}

/// The sync row of `name` at `size`.
fn sync_case<'a>(res: &'a Results, name: &str, size: u64) -> Option<&'a Case> {
    res.find(|c| c.name == name && c.mode == "sync" && c.size == size)
}

/// Sync copies against memcpy at 64 KiB, 1 MiB and 256 MiB.
fn throughput_goals(res: &Results, g: &mut Goals) {
    let ratio = |name: &str, size: u64| sync_case(res, name, size).and_then(|c| c.ratio);
    for name in ["h2d", "d2h", "h2h"] {
        g.add(format!("{name} 1 MiB sync / memcpy"), ratio(name, 1 << 20), "≥ 0.8", |v| v >= 0.8);
    }
    for name in ["h2d", "d2h", "h2h", "d2d"] {
        g.add(format!("{name} 64 KiB sync / memcpy"), ratio(name, 65536), "≥ 0.5", |v| v >= 0.5);
    }
    for name in ["h2d", "d2h", "h2h", "d2d"] {
        g.add(format!("{name} 256 MiB sync / memcpy"), ratio(name, 256 << 20), "≥ 0.95", |v| v >= 0.95);
    }
}

/// Round trips against ping-pong, the d2d round trip, pipelined copies, the wake from idle and idle CPU.
fn latency_goals(res: &Results, g: &mut Goals) {
    let rt = |timing: &str, assist: bool| {
        res.find(|c| c.name == "roundtrip_4k" && c.timing == Some(timing) && c.assist == Some(assist))
    };
    for (timing, assist) in [("marker", true), ("marker", false), ("driver", true), ("driver", false)] {
        let v = rt(timing, assist).and_then(|c| Some(c.median_ns? as f64 / c.pingpong_ns?.max(1) as f64));
        let what = format!("4 KiB round trip median / ping-pong ({timing} timing, assist {})", on_off(assist));
        g.add(what, v, "≤ 2", |v| v <= 2.0);
    }
    let h2d_rt = rt("marker", true).and_then(|c| c.median_ns);
    let d2d_rt = sync_case(res, "d2d", 4096).and_then(|c| c.median_ns);
    g.add(
        "4 KiB d2d sync round trip / 4 KiB h2d round trip".into(),
        d2d_rt.zip(h2d_rt).map(|(d, h)| d as f64 / h.max(1) as f64),
        "≤ 2",
        |v| v <= 2.0,
    );
    let pipelined = res.find(|c| c.name == "pipelined_4k").and_then(|c| c.ops_per_s);
    g.add("pipelined 4 KiB copies, Mops/s".into(), pipelined.map(|o| o / 1e6), "≥ 2.5", |v| v >= 2.5);
    let idle = res.find(|c| c.name == "roundtrip_idle_2ms").and_then(|c| c.median_ns);
    g.add("round trip after 2 ms idle, median µs".into(), idle.map(|n| n as f64 / 1e3), "≤ 50", |v| v <= 50.0);
    let cpu = res.find(|c| c.name == "idle_cpu").and_then(|c| c.cpu_percent);
    g.add("idle process after 100 ms, % of a core".into(), cpu, "< 5", |v| v < 5.0);
}

/// The lowest ratio, over the ring counts measured, of the rings' aggregate to as many memcpy threads in the
/// same run: rings that collapse as they are added fall behind the threads. (A ratio against the one-ring
/// ratio would read low whenever one ring beats one memcpy thread, as streaming stores let it.)
fn scale_goal(res: &Results, g: &mut Goals) {
    let scale: Vec<&Case> = res.cases.iter().filter(|c| c.name == "scale" && c.error.is_none()).collect();
    let lowest =
        scale.iter().filter_map(|c| c.ratio.map(|r| (r, c.rings.unwrap_or(0)))).min_by(|a, b| a.0.total_cmp(&b.0));
    if let (Some((v, at)), Some(last)) = (lowest, scale.last()) {
        let what =
            format!("scale: lowest ratio to as many memcpy threads, 1..{} rings (at {at})", last.rings.unwrap_or(0));
        g.add(what, Some(v), "≥ 0.8 (no collapse)", |v| v >= 0.8);
    }
}

/// Zero-copy against bounce buffers, scattered against contiguous pages, pre-pinned against pinning.
fn zc_goals(res: &Results, g: &mut Goals) {
    let zc = |name: &str, mode: &str, layout: &str, size: u64| {
        res.find(|c| c.name == name && c.mode == mode && c.layout == Some(layout) && c.size == size)
            .and_then(|c| c.gbps)
    };
    let big = 256 << 20;
    g.add(
        "zero-copy h2d 256 MiB contiguous / bounce + classic (sync)".into(),
        zc("h2d_zc", "sync", "contiguous", big).zip(zc("h2d_bounce", "sync", "contiguous", big)).map(|(a, b)| a / b),
        "≥ 1.3",
        |v| v >= 1.3,
    );
    // The paired figure (samples alternated, medians) is the goal's value; the ratio of the table's rows
    // (separate blocks of samples, best of each) is shown beside it.
    let pair = |mode: &str, layout: &str, size: u64| {
        res.find(|c| c.name == "h2d_zc_pair" && c.mode == mode && c.layout == Some(layout) && c.size == size)
            .and_then(|c| c.over_versus)
    };
    let rows = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| format!("rows: {:.2}", a / b));
    let beside = |notes: &[Option<String>]| {
        let notes: Vec<&str> = notes.iter().flatten().map(String::as_str).collect();
        if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        }
    };
    for size in [1 << 20, big] {
        // The CPU's own cost of the layout, same run: any engine the CPU emulates copies these pages too.
        let ceiling = zc("user_copy", "cpu", "scattered", size)
            .zip(zc("user_copy", "cpu", "contiguous", size))
            .map(|(a, b)| format!("CPU page-by-page copy: {:.2}", a / b));
        let rows = rows(zc("h2d_zc", "sync", "scattered", size), zc("h2d_zc", "sync", "contiguous", size));
        g.add(
            format!("zero-copy h2d {} scattered / contiguous (sync, paired medians)", fmt_size(size)),
            pair("sync", "scattered", size),
            &format!("≥ 0.8{}", beside(&[ceiling, rows])),
            |v| v >= 0.8,
        );
    }
    let mib = 1 << 20;
    let rows = rows(zc("h2d_zc", "prepinned", "contiguous", mib), zc("h2d_zc", "sync", "contiguous", mib));
    g.add(
        "zero-copy h2d 1 MiB pre-pinned / pinning every time (paired medians)".into(),
        pair("prepinned", "contiguous", mib),
        &format!("≥ 1.2{}", beside(&[rows])),
        |v| v >= 1.2,
    );
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn goals_table(goals: &[Goal]) -> Table {
    let mut t = Table::new(&["goal", ">value", "target", "met"]);
    for g in goals {
        t.row(vec![
            g.goal.clone(),
            format!("{:.2}", g.value),
            g.target.clone(),
            if g.met { "yes" } else { "NO" }.into(),
        ]);
    }
    t
}

/// GB/s against size per direction of the sync rows.
fn curves(cases: &[Case]) -> Vec<Curve> {
    Dir::ALL
        .iter()
        .map(|d| Curve {
            title: format!("{} sync ({})", d.name(), d.long_name()),
            points: cases
                .iter()
                .filter(|c| c.name == d.name() && c.mode == "sync")
                .filter_map(|c| Some((c.size, c.gbps?, c.gbps_median?, c.memcpy_gbps?)))
                .collect(),
        })
        .collect()
}

/// Runs `ndma bench`.
///
/// # Errors
///
/// Set-up, op-layer and verification failures (after every case ran and the JSON was written), and failure
/// to write the JSON file or the plot.
pub fn run(opts: BedOpts, a: &BenchArgs) -> CliResult {
    let p = Params::new(a.quick);
    let tb = testbed(opts, ExecPolicy::Threaded)?;
    let (dev, emu) = tb.device(0);
    let arch = dev.dhal().arch().to_string();
    let out = a.json.out();
    let statistic = format!("best (and median) of {} interleaved samples (DMA and memcpy alike)", p.samples);
    print_header(out, opts, &arch, &statistic, a.quick);
    let mut res = Results::default();
    let mut rig = Rig::new(dev, emu, 0, p.samples, p.max_size)?;
    sync_cases(&mut rig, &arch, &p, &mut res);
    async_cases(&mut rig, &arch, &p, &mut res);
    out.text(&throughput_table(&res.cases).render());
    pipelined_case(&mut rig, &arch, &p, out, &mut res);
    latency_cases(&tb, opts, &arch, &p, out, &mut res);
    zc_cases(opts, &mut rig, &p, out, &mut res);
    drop(rig);
    scale_cases(opts, &p, out, &mut res);
    let mut idle = Case::new("idle_cpu", &arch, "sync", 0);
    let cpu = idle_cpu_percent(Duration::from_millis(100), p.idle_window);
    idle.cpu_percent = Some(cpu);
    out.say(format_args!(
        "idle_cpu: {cpu:.2} % of a core over {} ms, after 100 ms idle (engine workers dozing or parked)",
        p.idle_window.as_millis()
    ));
    res.push(idle, Ok(()));
    let goals = goals(&res);
    out.say("goals (issues 8 and 9), ratios of figures of this run:");
    out.text(&goals_table(&goals).render());
    if let Some(path) = &a.plot {
        let title = format!("ndma bench: {} ({arch}), {} timing", opts.instance.name, timing_name(opts.timing));
        plot(Path::new(path), &title, &curves(&res.cases))?;
        out.say(format_args!("plot written to {}", path.display()));
    }
    let report = Report {
        command: "bench",
        instance: opts.instance.name.into(),
        timing: timing_name(opts.timing),
        statistic,
        samples: p.samples,
        quick: p.quick,
        cases: std::mem::take(&mut res.cases),
        goals,
    };
    out.wrote(a.json.write(&report)?);
    res.finish()
}
