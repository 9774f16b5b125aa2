//! `ndma verify`: short campaigns (a fixed seed, and one random seed that is printed) on inline and threaded
//! engines, with and without faults; the checker itself on planted wrong bytes, the leak accounting on
//! planted leaks, the judge on faults nobody planned; replay; the command's JSON and exit codes.
//!
//! Campaigns use the driver's silicon budgets, on inline and threaded engines alike (a waiting thread executes
//! pending work when an engine's worker is descheduled, so no timeout happens that was not injected), and a
//! lost completion fails within milliseconds of polling. One campaign runs on emulation budgets, where the
//! fault mix holds only the kinds that need no timeout.

use std::collections::BTreeSet;
use std::process::Command;

use ndma::{Instance, Platform, ResetClock};
use ndma_cli::verify::buffers::Side;
use ndma_cli::verify::bystander::Fate;
use ndma_cli::verify::campaign::{self, Selection};
use ndma_cli::verify::check::{self, Clues, Expect, Region};
use ndma_cli::verify::config::{Bound, Budgets, Config, Engines, FaultMode, Ordering};
use ndma_cli::verify::fault::FaultKind;
use ndma_cli::verify::op::{DrawContext, OpSpec};
use ndma_cli::verify::path::{Bed, PathKind};
use ndma_cli::verify::pattern::Pattern;
use ndma_cli::verify::replay;
use ndma_cli::verify::summary::Tally;
use ndma_emu::test_utils::Dir;
use serde_json::Value;

mod support;

/// One V3 device: trn2.48xlarge's arch without building sixteen devices.
const TRN2_ONE: Instance = Instance { name: "trn2-1dev", arch: udma::Arch::V3, devices: 1 };

fn config(seed: u64, instance: Instance, engines: Engines, count: u64) -> Config {
    let mut c = Config::new(seed, instance);
    c.engines = engines;
    c.bound = Bound::Count(count);
    c.budgets = Budgets::Silicon;
    c.hbm_size = Some(4 << 30);
    c.host_dram_size = Some(8 << 30);
    c
}

fn faults(mut c: Config, rate: f64) -> Config {
    c.faults = FaultMode::Mix;
    c.fault_rate = rate;
    c
}

/// Runs `c`, asserts it found nothing, returns its tally.
fn passes(c: &Config) -> Tally {
    let t = campaign::run(c, Selection::All).expect("the instance builds");
    assert!(t.passed(), "seed {} on {}: {:#?}", c.seed, c.instance.name, t.failures);
    if let Bound::Count(n) = c.bound {
        assert_eq!(t.operations, n);
    }
    t
}

/// Every path and direction ran.
fn covers_every_path(t: &Tally) {
    for p in PathKind::ALL {
        for d in p.dirs() {
            assert!(t.per_path.contains_key(&(p, d.name())), "{} {} never ran: {:?}", p.name(), d.name(), t.per_path);
        }
    }
}

#[test]
fn inline_fixed_seed_without_faults() {
    let t = passes(&config(0x5eed, Instance::TRN1_2XLARGE, Engines::Inline, 700));
    covers_every_path(&t);
    assert!(t.bytes > 0 && t.outcomes.get("ok").is_some_and(|&n| n > 500), "{:?}", t.outcomes);
    // The refusals the inputs call for are among the outcomes, each one as expected.
    for kind in ["partial_descriptor", "invalid_queue_type", "invalid_descriptor_address"] {
        assert!(t.outcomes.contains_key(kind), "{kind} never drawn: {:?}", t.outcomes);
    }
}

#[test]
fn inline_fixed_seed_with_every_fault_on_v2() {
    let t = passes(&faults(config(0xfa17, Instance::TRN1_2XLARGE, Engines::Inline, 160), 0.35));
    let kinds: BTreeSet<FaultKind> = t.faults_injected.keys().copied().collect();
    assert_eq!(kinds, FaultKind::ALL.into_iter().collect(), "{:?}", t.faults_injected);
    assert!(t.outcomes.get("timeout").is_some_and(|&n| n > 0), "{:?}", t.outcomes);
}

#[test]
fn inline_fixed_seed_with_every_fault_on_v3() {
    let t = passes(&faults(config(0xfa17, TRN2_ONE, Engines::Inline, 70), 0.5));
    let kinds: BTreeSet<FaultKind> = t.faults_injected.keys().copied().collect();
    assert_eq!(kinds, FaultKind::ALL.into_iter().collect(), "{:?}", t.faults_injected);
}

#[test]
fn inline_random_seed_with_faults() {
    let seed = ndma_cli::verify::rng::random_seed();
    println!("inline_random_seed_with_faults: seed {seed} (replay: ndma verify --seed {seed} --engines inline ...)");
    passes(&faults(config(seed, Instance::TRN1_2XLARGE, Engines::Inline, 150), 0.2));
}

#[test]
fn threaded_fixed_seed_without_faults() {
    let t = passes(&config(0x7eed, Instance::TRN1_2XLARGE, Engines::Threaded, 300));
    covers_every_path(&t);
}

#[test]
fn threaded_random_seed_with_the_faults_that_need_no_timeout() {
    let seed = ndma_cli::verify::rng::random_seed();
    println!("threaded_random_seed_with_the_faults_that_need_no_timeout: seed {seed}");
    let mut c = faults(config(seed, TRN2_ONE, Engines::Threaded, 150), 0.3);
    c.budgets = Budgets::Emulation;
    let t = passes(&c);
    let kinds: BTreeSet<FaultKind> = t.faults_injected.keys().copied().collect();
    // V3 has no reset-window bug: a reset needs no timeout there.
    let allowed: BTreeSet<FaultKind> = [
        FaultKind::Delay,
        FaultKind::Bandwidth,
        FaultKind::ResetWindow,
        FaultKind::Hole,
        FaultKind::PinFail,
        FaultKind::ShortPin,
    ]
    .into();
    assert!(!kinds.is_empty() && kinds.is_subset(&allowed), "{kinds:?}");
}

/// The full mix on threaded engines with silicon budgets: even on a loaded two-core machine no timeout
/// happens that was not injected (a waiting thread executes pending work when the worker is descheduled).
#[test]
fn threaded_silicon_budgets_with_every_fault() {
    let mut c = faults(config(0xfa17, Instance::TRN1_2XLARGE, Engines::Threaded, 300), 0.2);
    c.budgets = Budgets::Silicon;
    passes(&c);
}

/// The 2031-descriptor batch boundary ± 1 byte and ± one descriptor, and several batches: every segment of
/// this campaign is large. The seed draws a classic copy one descriptor past the boundary (two batches: a
/// split whose batch bound is off by one stages it as one, and the ring counters show it).
#[test]
fn large_sizes_at_the_batch_boundary() {
    let mut c = config(3, Instance::TRN1_2XLARGE, Engines::Inline, 4);
    c.paths = vec![PathKind::ClassicSync, PathKind::Async, PathKind::Memset];
    c.big_rate = 1.0;
    let ctx = trn1_draws(&c);
    let past_the_boundary = (0..4).map(|k| OpSpec::draw(&ctx, k)).any(|s| {
        s.path == PathKind::ClassicSync
            && s.bytes() > ndma::MAX_BATCH_BYTES
            && s.bytes() <= ndma::MAX_BATCH_BYTES + 65536
    });
    assert!(past_the_boundary, "the seed no longer draws a copy just past the batch boundary");
    let t = passes(&c);
    assert!(t.bytes > 2 * ndma::MAX_BATCH_BYTES, "{}", t.bytes);
}

/// The draws of `c` on trn1.2xlarge, as the campaign makes them: one device of two NCs, V2 (the reset-window
/// retry, no async zero-copy).
fn trn1_draws(c: &Config) -> DrawContext {
    campaign::draw_context(c, 1, 2, true, false)
}

#[test]
fn a_replay_runs_exactly_the_operation_drawn() {
    let c = faults(config(0xfa17, Instance::TRN1_2XLARGE, Engines::Inline, 1), 0.35);
    let ctx = trn1_draws(&c);
    let k =
        (0..1000).find(|&k| OpSpec::draw(&ctx, k).fault.is_some_and(|f| f.kind == FaultKind::Hang)).expect("a hang");
    let spec = OpSpec::draw(&ctx, k);
    let t = campaign::run(&c, Selection::One(k)).expect("the instance builds");
    assert!(t.passed(), "{:#?}", t.failures);
    assert_eq!(t.operations, 1);
    assert_eq!(t.faults_injected.get(&FaultKind::Hang), Some(&1));
    assert_eq!(t.outcomes.get("timeout"), Some(&1));
    assert!(t.per_path.contains_key(&(spec.path, spec.dir.name())));
}

/// A campaign of synchronous zero-copy alone passes: the zero-copy state a ring creates on its first use (its
/// completion queue, which a synchronous request creates too) is part of the baseline, not a leak. It was
/// not, when only the async path allocated it up front.
#[test]
fn a_campaign_of_synchronous_zero_copy_alone_finds_no_leak() {
    for instance in [Instance::TRN1_2XLARGE, TRN2_ONE] {
        let mut c = faults(config(0x51c, instance, Engines::Inline, 60), 0.2);
        c.paths = vec![PathKind::ZeroCopySync];
        let t = passes(&c);
        assert!(t.per_path.keys().all(|(p, _)| *p == PathKind::ZeroCopySync), "{:?}", t.per_path);
    }
}

/// The replay line a failure prints is a command that runs, through the command line, exactly the operation
/// that failed: every option that shapes the draw (non-default ones here) survives the trip.
#[test]
fn the_printed_replay_command_runs_the_same_operation() {
    let mut c = faults(config(0x5eed_cafe, Instance::TRN1_2XLARGE, Engines::Inline, 100), 0.5);
    c.paths = vec![PathKind::ClassicSync, PathKind::Async, PathKind::Memset, PathKind::ZeroCopySync];
    c.ordering = Ordering::Relaxed;
    c.big_rate = 0.02;
    let ctx = trn1_draws(&c);
    let mut faulted = 0;
    for k in [0u64, 1, 2, 3, 5, 8, 13, 21] {
        let spec = OpSpec::draw(&ctx, k);
        faulted += usize::from(spec.fault.is_some());
        let line = replay::command(&c, k);
        let mut args: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(args.remove(0), "ndma", "{line}");
        args.extend(["--json", "-"]);
        let o = ndma(&args);
        assert!(o.status.success(), "{line}: {o:?}");
        let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
        assert_eq!((v["replay"].as_u64(), v["operations"].as_u64()), (Some(k), Some(1)), "{line}");
        let ran = &v["slowest"];
        assert_eq!(ran["path"].as_str(), Some(spec.path.name()), "{line}");
        assert_eq!(ran["dir"].as_str(), Some(spec.dir.name()), "{line}");
        assert_eq!(ran["size"].as_u64(), Some(spec.bytes()), "{line}");
        assert_eq!(ran["fault"].as_str(), spec.fault.map(|f| f.describe()).as_deref(), "{line}");
        assert_eq!((v["ordering"].as_str(), v["big_rate"].as_f64()), (Some("relaxed"), Some(0.02)), "{line}");
    }
    assert!(faulted > 0, "some of the operations replayed carry a fault");
}

/// The checker finds what it is there to find: a byte never written, a block shifted within the source, a
/// stray write in a guard.
#[test]
fn the_checker_names_the_first_bad_byte_and_its_run() {
    let tb = config(1, Instance::TRN1_2XLARGE, Engines::Inline, 1).testbed().expect("testbed");
    let (dev, emu) = tb.device(0);
    let src_p = Pattern::Source(5);
    let poison = Pattern::Poison(6);
    let src = Side::alloc(dev, Dir::H2d.src_host(), 0, 0, 100_000).expect("source");
    let dst = Side::alloc(dev, Dir::H2d.dst_host(), 0, 3, 100_000).expect("destination");
    src.fill(emu, src_p).expect("fill");
    dst.fill(emu, poison).expect("poison");
    dev.memcpy_mc(&src.chunk, &dst.chunk, src.lead, dst.lead, 100_000).expect("copy");
    let window = Region { name: "window", off: dst.lead, len: 100_000 };
    let written = Expect::Pattern { pattern: src_p, at: src.lead };
    let clues = Clues { poison: Some(poison), source: Some((src_p, src.total())) };
    let check = |r, e| check::region(emu, &dst.chunk, r, e, None, clues).expect("read back");
    assert!(check(window, written).is_none(), "the copy is right");

    // 1000 bytes at window offset 5000 left as poison.
    let mut hole = vec![0u8; 1000];
    poison.fill(dst.lead + 5000, &mut hole);
    ndma_cli::verify::buffers::write(emu, &dst.chunk, dst.lead + 5000, &hole).expect("plant");
    let m = check(window, written).expect("a mismatch");
    assert_eq!((m.region_offset, m.run, m.bad_bytes), (5000, 1000, 1000), "{m}");
    assert!(m.diagnosis.contains("never written"), "{m}");

    // 64 bytes at window offset 9000 taken from 24 bytes further on in the source.
    let mut shifted = vec![0u8; 64];
    src_p.fill(src.lead + 9024, &mut shifted);
    ndma_cli::verify::buffers::write(emu, &dst.chunk, dst.lead + 9000, &shifted).expect("plant");
    let r = Region { name: "window", off: dst.lead + 8000, len: 2000 };
    let m = check(r, Expect::Pattern { pattern: src_p, at: src.lead + 8000 }).expect("a mismatch");
    assert_eq!((m.region_offset, m.chunk_offset), (1000, dst.lead + 9000), "{m}");
    assert!(m.run <= 64 && m.run > 56, "{m}");
    assert!(m.diagnosis.contains("shifted by 24"), "{m}");

    // A stray source byte in the guard after the window.
    ndma_cli::verify::buffers::write(emu, &dst.chunk, dst.lead + 100_000 + 7, &[0x80]).expect("plant");
    let guard = Region { name: "guard", off: dst.lead + 100_000, len: 4096 };
    let m = check(guard, Expect::Pattern { pattern: poison, at: dst.lead + 100_000 }).expect("a mismatch");
    assert_eq!((m.region_offset, m.run, m.bad_bytes), (7, 1, 1), "{m}");
    // A partial transfer: poison or the right byte are both fine, a third value is not.
    let partial = check::region(emu, &dst.chunk, window, written, Some(poison), clues).expect("read back");
    let m = partial.expect("the shifted block is neither");
    assert_eq!(m.region_offset, 9000, "{m}");
}

fn ndma(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ndma"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .output()
        .expect("run ndma")
}

#[test]
fn the_json_parses_is_documented_and_reports_the_seed() {
    let o = ndma(&["verify", "--count", "40", "--seed", "0x2a", "--engines", "inline", "--json", "-"]);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    assert_eq!(
        (v["command"].as_str(), v["seed"].as_u64(), v["operations"].as_u64()),
        (Some("verify"), Some(42), Some(40))
    );
    for zero in ["corrupt", "leaks", "uninjected_timeouts", "escapes", "panics"] {
        assert_eq!(v[zero].as_u64(), Some(0), "{zero}: {v}");
    }
    assert_eq!(v["passed"], true);
    assert!(v["outcomes"]["ok"].as_u64().is_some_and(|n| n > 0), "{v}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("seed 42"), "the seed is printed beside the JSON: {stderr}");
    let help = String::from_utf8_lossy(&ndma(&["verify", "--help"]).stdout).into_owned();
    let row = support::schema_row("verify");
    let words = |s: &str| -> BTreeSet<String> {
        s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')).map(str::to_string).collect()
    };
    let (in_help, in_row) = (words(&help), words(row));
    let mut ks = BTreeSet::new();
    support::keys(&v, &mut ks);
    for k in ks {
        assert!(in_help.contains(&k), "`ndma verify --help` does not document {k:?}");
        assert!(in_row.contains(&k), "the README's verify row lacks {k:?}");
    }
}

#[test]
fn exit_codes() {
    let code = |args: &[&str]| ndma(args).status.code();
    assert_eq!(code(&["verify", "--count", "5", "--engines", "inline", "-q"]), Some(0));
    assert_eq!(code(&["verify", "--fault-rate", "2"]), Some(2));
    assert_eq!(code(&["verify", "--count", "1", "--duration", "1s"]), Some(2));
    assert_eq!(code(&["--instance", "p4d", "verify", "--count", "1"]), Some(2));
    assert_eq!(code(&["--silicon-budgets", "verify", "--count", "1"]), Some(2), "no such option any more");
}

/// The access watch records exactly the accesses outside the windows it was given: a copy inside them is
/// clean; a destination window one byte short, or a source the validation would have called device memory
/// while the engine reads host memory, is an escape.
#[test]
fn the_access_watch_records_an_access_outside_the_windows() {
    use ndma_emu::{AccessWindow, EmuDevice, Space};
    use udma::{Barrier, DmaMemory, Ring, Udma};

    let tb = config(1, Instance::TRN1_2XLARGE, Engines::Inline, 1).testbed().expect("testbed");
    let (dev, emu) = tb.device(0);
    let emu: &EmuDevice = emu;
    let src = dev.alloc_host(8192, 0).expect("source");
    let dst = dev.alloc_device(8192, 0).expect("destination");
    let engine = Udma::init(emu, dev.dhal().arch(), 0).expect("engine");
    let ring = || {
        let mem = emu.host().alloc(32 * 16, 256).expect("ring");
        let dma_addr = mem.phys_addr() | dev.dhal().pci_host_base();
        Ring { mem, dma_addr }
    };
    let mut q = engine.init_queue(emu, 0, ring(), ring(), 32).expect("queue");
    let (s, d, len) = (src.pa() + 100, dst.pa() + 200, 4000u64);
    let mut run = |windows: &[AccessWindow]| {
        q.reinit(emu);
        q.copy_prepare_one(s, d, len as u32, Barrier::None, false).expect("prepare");
        emu.watch_accesses(windows);
        q.copy_start(emu, 1, 1).expect("doorbell");
        emu.unwatch_accesses()
    };
    let read = AccessWindow { addr: s, len, host: true };
    let write = AccessWindow { addr: d, len, host: false };
    assert_eq!(run(&[read, write]), []);
    let short = run(&[read, AccessWindow { len: len - 1, ..write }]);
    assert_eq!(short.len(), 1, "{short:?}");
    assert!(short[0].write && short[0].space == Space::Hbm && short[0].len == len, "{short:?}");
    let misread = run(&[AccessWindow { host: false, ..read }, write]);
    assert_eq!(misread.len(), 1, "{misread:?}");
    assert!(!misread[0].write && misread[0].space == Space::Host, "{misread:?}");
    assert!(emu.take_faults().is_empty());
}

/// A short descriptor fuzz: refusals, engine faults and executed rings all occur; nothing escapes, nothing
/// panics, no refused ring is written.
#[test]
fn a_short_descriptor_fuzz_finds_no_escape() {
    for arch in [udma::Arch::V2, udma::Arch::V3] {
        let f = ndma_cli::verify::fuzz::run(0xf022, arch, 0, 5000, |_| {}).expect("fuzz bed");
        assert!(f.passed(), "{arch}: {:#?}", f.failures);
        for kind in ["executed", "engine_fault", "invalid_descriptor_address"] {
            assert!(f.outcomes.get(kind).is_some_and(|&n| n > 100), "{arch}: {kind}: {:?}", f.outcomes);
        }
        assert!(f.copies > 1000, "{arch}: {}", f.copies);
    }
}

/// `--instance all --fuzz-descriptors N` fuzzes each arch N times, and the report names the instances that
/// ran: it used to fuzz only the first preset's arch (V2) and still list all five.
#[test]
fn a_descriptor_fuzz_over_every_instance_fuzzes_each_arch_and_names_what_ran() {
    let o = Command::new(env!("CARGO_BIN_EXE_ndma"))
        .args(["--instance", "all", "verify", "--fuzz-descriptors", "20", "--seed", "1", "--json", "-"])
        .env("RUST_LOG", "off")
        .output()
        .expect("run ndma");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["instances"], serde_json::json!(["trn1.2xlarge", "trn2.48xlarge"]), "the first of each arch");
    assert_eq!(v["fuzz_descriptors"]["iterations"].as_u64(), Some(40), "{v}");
    assert_eq!(v["operations"].as_u64(), Some(40), "{v}");
}

/// Found by the campaign (seed 3, operation 64 on trn2.48xlarge): an async host→device zero-copy request whose
/// fourth piece fails its remote pin completes with `-EIO` while its first pieces' HBM writes are still posted
/// (their fence is on the request's last piece, which never issues); under adversarial ordering they land
/// later, in memory freed and reallocated since — the probe copy after the fault finds its guard overwritten
/// with the request's source bytes. Strict and relaxed ordering passed. Fixed: a failed request's pieces are
/// fenced (a marker the engine writes only after their writes landed) before they are released.
#[test]
fn a_failed_async_zero_copy_request_leaves_no_write_in_flight() {
    let mut c = faults(Config::new(3, Instance::TRN2_48XLARGE), 0.5);
    c.paths = vec![PathKind::ZeroCopySync, PathKind::ZeroCopyAsync];
    c.engines = Engines::Inline;
    let t = campaign::run(&c, Selection::One(64)).expect("the instance builds");
    assert!(t.passed(), "{:#?}", t.failures);
}

/// A V2 device on inline engines and a fake clock, and a 5-jiffy reset-window fault for it.
fn v2_reset_window_bed() -> (ndma_emu::Testbed, ndma_cli::verify::fault::FaultSpec) {
    use ndma_emu::{ClockKind, ExecPolicy, OrderingMode};
    let tb =
        ndma_emu::test_utils::testbed(udma::Arch::V2, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let spec = ndma_cli::verify::fault::FaultSpec { kind: FaultKind::ResetWindow, param: 5, all_engines: false };
    (tb, spec)
}

/// Whether a reset window outlasted an operation (so `RetryExhausted` is an expected outcome) is judged at
/// the operation's return: a campaign on a loaded machine (`--instance all --seed 20261204 --threads 3
/// --fault-rate 0.2`, operation 22 491) called a 4 KiB async d2d that exhausted its replays inside an 18-jiffy
/// window "a timeout nobody injected", its thread descheduled between the return and the observation.
#[test]
fn a_reset_window_outlasts_an_operation_by_its_return_not_by_when_it_is_observed() {
    use ndma_cli::verify::fault::{self, RESET_SLACK_JIFFIES};

    let (tb, spec) = v2_reset_window_bed();
    let (dev, emu) = tb.device(0);
    let bed = Bed { dev, emu };
    for (seed, after_end, outlasted) in [(1, RESET_SLACK_JIFFIES, true), (2, RESET_SLACK_JIFFIES + 1, false)] {
        let armed = fault::arm(bed, spec, seed, 0).unwrap();
        // Observed well after the window and its slack…
        tb.platform.advance_us((RESET_SLACK_JIFFIES + 20) * 1000);
        let (start, end) = emu.reset_times(0);
        assert!(end > start && tb.platform.jiffies() > end + RESET_SLACK_JIFFIES, "the window is long over");
        // …but returned `after_end` jiffies after its end.
        assert_eq!(armed.observe(bed, 0, 0, start, end + after_end).reset_outlasted_op, outlasted, "{after_end} after");
    }
}

/// An operation whose every timed-out wait waited on a queue the reset window hung exhausted its replays
/// because of the window, however late it returned: a campaign on a loaded machine (`--instance all --seed
/// 20261205 --threads 3 --fault-rate 0.1`, operation 45 397) called a 64 KiB + 1 sync d2d that returned
/// `RetryExhausted` 12 ms into a 5-jiffy window "a timeout nobody injected" — its thread descheduled in its
/// last wait, after the last replay had hung inside the window. A timeout more than the engine's hangs is
/// still unexplained.
#[test]
fn a_retry_exhausted_inside_the_window_is_expected_however_late_the_operation_returns() {
    use ndma_cli::verify::fault::{self, RESET_SLACK_JIFFIES};
    use ndma_emu::test_utils::Window;

    let (tb, spec) = v2_reset_window_bed();
    let (dev, emu) = tb.device(0);
    let bed = Bed { dev, emu };
    // A small d2d copy: the tightest budget, so all its replays time out inside the 5-jiffy window.
    let w = Window::new(dev, emu, Dir::D2d, 4096, 0, 1).unwrap();
    let before = dev.ring_stats(0).unwrap();
    let (eng, _) = dev.h2t_queue(0).unwrap();
    let hangs_before = emu.engine_stats(eng).unwrap().reset_hangs;
    let armed = fault::arm(bed, spec, 1, 0).unwrap();
    let started = tb.platform.jiffies();
    let err = w.copy_all().unwrap_err();
    assert!(matches!(err, ndma::NdmaError::RetryExhausted { replays: 8, .. }), "{err}");
    let after = dev.ring_stats(0).unwrap();
    let (retries, timeouts) = (after.retries - before.retries, after.timeouts - before.timeouts);
    assert_eq!((retries, timeouts), (8, 9));
    assert_eq!(emu.engine_stats(eng).unwrap().reset_hangs - hangs_before, 9, "every wait waited on a hung queue");
    // It returns long after the window (its thread was descheduled in the last wait).
    tb.platform.advance_us((RESET_SLACK_JIFFIES + 20) * 1000);
    let (_, end) = emu.reset_times(0);
    let returned = tb.platform.jiffies();
    assert!(returned > end + RESET_SLACK_JIFFIES);
    let o = armed.observe(bed, retries, timeouts, started, returned);
    assert!(o.reset_outlasted_op, "every timeout is the window's");
    // The same operation again (nine hangs again), reported with one timed-out wait more than the window
    // hung: that timeout is nobody's, and the window no longer explains the outcome.
    let armed = fault::arm(bed, spec, 2, 0).unwrap();
    let started = tb.platform.jiffies();
    assert!(matches!(w.copy_all(), Err(ndma::NdmaError::RetryExhausted { replays: 8, .. })));
    assert_eq!(emu.engine_stats(eng).unwrap().reset_hangs - hangs_before, 18);
    tb.platform.advance_us((RESET_SLACK_JIFFIES + 20) * 1000);
    let o = armed.observe(bed, retries, timeouts + 1, started, tb.platform.jiffies());
    assert!(!o.reset_outlasted_op, "ten timeouts, nine hangs");
}

/// A V2 reset window is met when its queue hung in it, and then the op layer must have replayed; a window
/// that ended before the work reached the engine met nothing and is no miss. A campaign on a loaded machine
/// (`--instance all --seed 90210 --threads 3`, operation 17 650) reported "no reset-window retry on V2" for an
/// operation whose thread was descheduled past an 11-jiffy window between arming it and the doorbell.
#[test]
fn a_v2_reset_window_is_judged_by_whether_its_queue_hung() {
    use ndma_cli::verify::fault;
    use ndma_emu::test_utils::Window;

    let (tb, spec) = v2_reset_window_bed();
    let (dev, emu) = tb.device(0);
    let bed = Bed { dev, emu };
    let w = Window::new(dev, emu, Dir::H2d, 10_000, 0, 1).unwrap();
    let retries = || dev.ring_stats(0).unwrap().retries;

    // The window is over (the fake clock moved 6 ms) before the copy rings: nothing hangs, nothing to replay.
    let armed = fault::arm(bed, spec, 1, 0).unwrap();
    tb.platform.advance_us(6_000);
    let started = tb.platform.jiffies();
    w.copy_all().unwrap();
    w.verify("after the window", true).unwrap();
    assert_eq!(retries(), 0);
    let o = armed.observe(bed, 0, 1, started, tb.platform.jiffies());
    assert!(!o.hit);
    assert_eq!(o.missed, None, "a window the work never met is no miss");

    // Inside the window the queue hangs and the op layer replays it once the wait times out: met.
    let armed = fault::arm(bed, spec, 2, 0).unwrap();
    let started = tb.platform.jiffies();
    w.copy_all().unwrap();
    w.verify("replayed", true).unwrap();
    let replayed = retries();
    assert!(replayed > 0);
    tb.platform.advance_us(1_000);
    let o = armed.observe(bed, replayed, 1, started, tb.platform.jiffies());
    assert!(o.hit, "{:?}", o.missed);
    assert_eq!(o.missed, None);

    // The same hang reported with no replay (an op layer that skipped its retry) is a miss.
    let armed = fault::arm(bed, spec, 3, 0).unwrap();
    let started = tb.platform.jiffies();
    w.copy_all().unwrap();
    assert!(retries() > replayed);
    tb.platform.advance_us(1_000);
    let o = armed.observe(bed, 0, 1, started, tb.platform.jiffies());
    assert!(!o.hit);
    assert_eq!(
        o.missed.as_deref(),
        Some("reset_window 5 jiffies: the queue hung in the reset window and was not replayed")
    );
}

/// `--driver-timing` reaches a campaign's testbed, its replay command and its report (it was dropped before
/// the campaign was configured: every "--driver-timing" campaign ran with marker timing).
#[test]
fn driver_timing_reaches_the_testbed_the_replay_command_and_the_report() {
    use ndma_emu::WaitTiming;
    let mut c = config(7, TRN2_ONE, Engines::Inline, 1);
    assert_eq!(c.testbed().expect("testbed").platform.timing(), WaitTiming::Marker);
    c.timing = WaitTiming::Driver;
    assert_eq!(c.testbed().expect("testbed").platform.timing(), WaitTiming::Driver);
    let line = replay::command(&c, 3);
    assert!(line.starts_with("ndma --driver-timing verify --seed 7 --replay 3 "), "{line}");
    let o = Command::new(env!("CARGO_BIN_EXE_ndma"))
        .args(["--driver-timing", "verify", "--count", "5", "--seed", "7", "--json", "-"])
        .env("RUST_LOG", "off")
        .output()
        .expect("run ndma");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["timing"], "driver");
}

/// What the draw of `c` (on `ctx`) calls for of the bystanders of its operations: `(staged, completed, replayed,
/// aborted)`, a reset window's hang aside (V2: whether it met its queue is a matter of timing). A hang takes the
/// bystander's work (the first the queue claims after it is armed): the recovery after the faulted operation's
/// timeout re-stages the bystander, or aborts it when it reads what it writes; under any other fault it lands
/// first and is completed in place.
fn bystander_fates(c: &Config, ctx: &DrawContext) -> (u64, u64, u64, u64) {
    let Bound::Count(n) = c.bound else { unreachable!("a counted campaign") };
    let mut f = (0, 0, 0, 0);
    for k in 0..n {
        let s = OpSpec::draw(ctx, k);
        let Some(b) = s.bystander else { continue };
        f.0 += 1;
        match (s.fault.map(|x| x.kind), b.self_copy) {
            (Some(FaultKind::Hang), None) => f.2 += 1,
            (Some(FaultKind::Hang), Some(_)) => f.3 += 1,
            _ => f.1 += 1,
        }
    }
    f
}

fn fates(t: &Tally) -> (u64, u64, u64, u64) {
    let n = |f| t.bystander_fates.get(&f).copied().unwrap_or(0);
    (t.bystanders, n(Fate::Completed), n(Fate::Replayed), n(Fate::Aborted))
}

/// On V3 (no reset-window hang) what becomes of every bystander follows from its draw alone, and the campaign
/// — which checks each one's bytes, its replays and aborts against the ring's counters, and every ring's
/// counters at the end — sees exactly that.
#[test]
fn bystanders_meet_the_recovery_exactly_as_their_faults_call_for_on_v3() {
    let mut c = faults(config(0xb157, TRN2_ONE, Engines::Inline, 400), 0.4);
    c.bystanders = true;
    let want = bystander_fates(&c, &campaign::draw_context(&c, 1, udma::Arch::V3.ncs_per_device(), false, true));
    assert!(want.1 > 0 && want.2 > 0 && want.3 > 0, "the seed draws every fate: {want:?}");
    let t = passes(&c);
    assert_eq!(fates(&t), want);
}

/// On V2 a reset window met by the faulted operation hangs the bystander too: it is replayed with the retry
/// (or aborted, reading what it writes) — beyond what the hangs call for.
#[test]
fn bystanders_on_v2_threaded_engines() {
    let mut c = faults(config(0xb158, Instance::TRN1_2XLARGE, Engines::Threaded, 400), 0.4);
    c.bystanders = true;
    let (staged, _, replayed, aborted) = bystander_fates(&c, &trn1_draws(&c));
    assert!(replayed > 0 && aborted > 0, "{replayed} {aborted}");
    let t = passes(&c);
    let got = fates(&t);
    assert_eq!(got.0, staged);
    assert_eq!(got.1 + got.2 + got.3, staged, "every bystander ended in success or Aborted: {got:?}");
    assert!(got.2 >= replayed && got.3 >= aborted, "{got:?}");
}

#[test]
fn the_bystanders_json_is_documented_and_the_flag_needs_faults() {
    let o = ndma(&[
        "verify",
        "--count",
        "60",
        "--seed",
        "0xb157",
        "--engines",
        "inline",
        "--faults",
        "mix",
        "--fault-rate",
        "0.5",
        "--bystanders",
        "--json",
        "-",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let b = &v["bystanders"];
    let n = |k: &str| b[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert!(n("staged") > 0, "{v}");
    assert_eq!(n("completed") + n("replayed") + n("aborted"), n("staged"), "{v}");
    let help = String::from_utf8_lossy(&ndma(&["verify", "--help"]).stdout).into_owned();
    support::documented("verify", &help, &v);
    let o = ndma(&["verify", "--count", "1", "--bystanders"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let o = ndma(&["verify", "--count", "0", "--json", "-"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    assert_eq!(v["bystanders"], Value::Null);
}

/// The leak accounting finds what it is there to find — an async copy never waited for, chunks never freed,
/// a pre-pinned range with its pinned frames, user memory never returned — and nothing once each is gone.
#[test]
fn the_leak_accounting_names_what_was_left_behind() {
    use ndma_cli::verify::leaks::{self, Baseline};
    use ndma_emu::{AddressSpace, MapSpec, Placement};

    let tb = config(1, TRN2_ONE, Engines::Inline, 1).testbed().expect("testbed");
    let base = Baseline::take(&tb);
    let none: Vec<String> = Vec::new();
    assert_eq!(leaks::instance(&tb, &base), none);
    let dev = &tb.system.devices()[0];
    let p = base.pools[0];
    let pool = |host: u64, dev: u64| {
        format!(
            "device 0: pool holds {} host chunks ({} B) and {} device chunks ({} B); at the start {} ({} B) and {} ({} B)",
            p.host_chunks + u64::from(host > 0),
            p.host_bytes + host,
            p.device_chunks + u64::from(dev > 0),
            p.device_bytes + dev,
            p.host_chunks,
            p.host_bytes,
            p.device_chunks,
            p.device_bytes
        )
    };
    let dram = |held: u64| {
        format!(
            "host DRAM: {} bytes free, {} at the start ({held} bytes not returned)",
            base.host_free - held,
            base.host_free
        )
    };

    // Inline engines run the copy at its doorbell: its marker landed, but nobody waited, so nothing was acked.
    let (src, dst) = (dev.alloc_host(4096, 0).unwrap(), dev.alloc_device(8192, 0).unwrap());
    let h = dev.memcpy_mc_async(&src, &dst, 0, 0, 4096, 0, ndma::CtxHandle::None).unwrap();
    let ring = "device 0: NC 0 ring: 2 slots in use, 2 accounted for, 1 contexts in use".to_string();
    assert_eq!(leaks::instance(&tb, &base), [ring, pool(4096, 8192), dram(4096)]);
    dev.wait_handle(0, h).unwrap();
    drop(dst);
    assert_eq!(leaks::instance(&tb, &base), [pool(4096, 0), dram(4096)]);
    drop(src);
    assert_eq!(leaks::instance(&tb, &base), none);

    let mm = AddressSpace::new(tb.emu.host(), 77);
    let va = mm.map(&MapSpec::new(4, Placement::Contiguous)).unwrap();
    let enter = mm.enter();
    tb.system.pin_host_memory(va, 4 * 4096).unwrap();
    let left = leaks::instance(&tb, &base);
    assert_eq!(left.len(), 3, "{left:#?}");
    assert!(left[0].starts_with("user frames: ") && left[0].ends_with("(pins left behind)"), "{left:#?}");
    assert_eq!(left[1..], ["1 pre-pinned ranges still registered".to_string(), dram(4 * 4096)]);
    tb.system.unpin_host_memory(va).unwrap();
    drop(enter);
    assert_eq!(leaks::instance(&tb, &base), [dram(4 * 4096)], "the process still maps its pages");
    drop(mm);
    assert_eq!(leaks::instance(&tb, &base), none);
}

/// An operation judged on a device that misbehaves behind the verifier's back (a fault nobody planned) is
/// reported: a hang as a timeout nobody injected; a corrupted descriptor as what the model says it did — an
/// engine fault, which times the operation out (the engine fault itself is the campaign's end-of-run
/// finding), or a descriptor that executed wrong, which shows in the bytes.
#[test]
fn an_operation_meeting_a_fault_nobody_planned_is_reported() {
    use ndma_cli::verify::exec;
    use ndma_cli::verify::leaks::Baseline;
    use ndma_cli::verify::record::{FindingKind, OpRecord};
    use ndma_emu::{CorruptOutcome, PlannedFault};

    let mut c = config(0x0bad, TRN2_ONE, Engines::Inline, 1);
    c.paths = vec![PathKind::ClassicSync];
    let tb = c.testbed().expect("testbed");
    let base = Baseline::take(&tb);
    let (dev, emu) = tb.device(0);
    let ctx = campaign::draw_context(&c, 1, dev.dhal().ncs_per_device(), false, true);
    let specs: Vec<OpSpec> =
        (0..2000).map(|k| OpSpec::draw(&ctx, k)).filter(|s| (1..=65536).contains(&s.bytes())).collect();
    let (engine, qid) = dev.h2t_queue(specs[0].nc()).unwrap();
    let kinds = |r: &OpRecord| r.findings.iter().map(|f| f.kind).collect::<Vec<_>>();

    let clean = exec::execute(Bed { dev, emu }, &specs[0], &base);
    assert_eq!(kinds(&clean), [], "{:#?}", clean.findings);

    emu.fault_plan().add(PlannedFault::Hang { engine, qid, persistent: false });
    let hung = exec::execute(Bed { dev, emu }, &specs[0], &base);
    assert_eq!((hung.outcome, kinds(&hung)), ("timeout", vec![FindingKind::UninjectedTimeout]), "{:#?}", hung.findings);
    assert!(hung.leak_check_due);

    // A corruption on each of eight operations of that NC: each is reported.
    let mut faulted = 0;
    for spec in specs.iter().filter(|s| s.nc() == specs[0].nc()).take(8) {
        let before = emu.corruptions().len();
        emu.fault_plan().add(PlannedFault::Corrupt { engine, qid, nth: 0 });
        let rec = exec::execute(Bed { dev, emu }, spec, &base);
        let corruption = emu.corruptions().get(before).copied().expect("the corruption was made");
        match corruption.outcome {
            CorruptOutcome::Fault(kind) => {
                assert_eq!(
                    (rec.outcome, kinds(&rec)),
                    ("timeout", vec![FindingKind::UninjectedTimeout]),
                    "{corruption:?}"
                );
                let recorded = emu.take_faults();
                assert!(recorded.iter().any(|f| f.kind == kind), "{corruption:?}: {recorded:?}");
                faulted += 1;
            }
            // A flip that passed the engine's checks moved wrong bytes, or the right ones elsewhere.
            CorruptOutcome::Benign => assert!(!rec.findings.is_empty(), "{corruption:?}: nothing reported"),
        }
    }
    assert!(faulted > 0, "no corruption was caught by the engine");
}

/// Work staged ahead of the operation (a bystander) hung in the V2 reset window, and the operation itself
/// started after the window was over: the op layer's retry looks at the waited operation's own start, so the
/// operation times out without a retry and the recovery replays the work ahead once. That timeout is the
/// injected hang's. CI (`the_bystanders_json_is_documented_and_the_flag_needs_faults`, seed 0xb157, a loaded
/// machine) called it "a timeout nobody injected": the thread was descheduled past a 10-jiffy window between
/// resuming the bystander's queue and calling the operation.
#[test]
fn an_operation_behind_work_the_window_hung_that_started_after_the_window_times_out_by_the_fault() {
    use ndma::{NdmaError, Transfer};
    use ndma_cli::verify::fault;

    let (tb, spec) = v2_reset_window_bed();
    let (dev, emu) = tb.device(0);
    let bed = Bed { dev, emu };
    let (src, ahead, dst) =
        (dev.alloc_host(8192, 0).unwrap(), dev.alloc_device(8192, 0).unwrap(), dev.alloc_device(8192, 0).unwrap());
    let before = dev.ring_stats(0).unwrap();
    let armed = fault::arm(bed, spec, 1, 0).unwrap();
    // The work ahead rings inside the window (inline engines: it hangs at its doorbell).
    let by = dev.start(&Transfer::new(&src, &ahead, 8192)).unwrap();
    // The operation's thread comes back 6 ms (jiffies) later, past the 5-jiffy window.
    tb.platform.advance_us(6_000);
    let (start, end) = emu.reset_times(0);
    let started = tb.platform.jiffies();
    assert!(start < end && started > end, "the window is over when the operation starts");
    let err = dev.memcpy_mc(&src, &dst, 0, 0, 8192).unwrap_err();
    assert!(matches!(err, NdmaError::Timeout { .. }), "{err}");
    // Recovered: the work ahead was replayed by the re-initialisation and completes.
    by.wait().unwrap();
    let after = dev.ring_stats(0).unwrap();
    let (retries, timeouts) = (after.retries - before.retries, after.timeouts - before.timeouts);
    assert_eq!(retries, 0, "the operation started outside the window: no retry");
    let o = armed.observe(bed, retries, timeouts, started, tb.platform.jiffies());
    assert!(o.hung_ahead && o.hit, "{:?}", o.missed);
    assert_eq!(o.missed, None);
    // The same hang with the operation started inside the window is not this case: there the retry is due.
    let armed = fault::arm(bed, spec, 2, 0).unwrap();
    let started = tb.platform.jiffies();
    let by = dev.start(&Transfer::new(&src, &ahead, 8192)).unwrap();
    dev.memcpy_mc(&src, &dst, 0, 0, 8192).unwrap();
    by.wait().unwrap();
    let retried = dev.ring_stats(0).unwrap().retries - after.retries;
    assert!(retried > 0);
    let o = armed.observe(bed, 0, 1, started, tb.platform.jiffies());
    assert!(!o.hung_ahead && !o.hit, "a retry the op layer skipped inside the window stays a miss");
}
