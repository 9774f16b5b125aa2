//! Runs one operation and judges it: prepare its memory, arm its fault, call the op layer (inside
//! `catch_unwind`), observe the fault, compare the outcome with the expected one, check every byte, free the
//! memory, and — after a fault — probe the device and account for everything it holds.
//!
//! The caller holds the device gate: shared for an ordinary operation, exclusive for a faulted one.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use ndma::{NeuronDevice, ResetClock, StatsSnapshot};

use super::buffers::Side;
use super::bystander;
use super::check::{self, Clues, Expect, Region};
use super::expect::{self, Expected, Window};
use super::fault::{self, FaultKind, FaultSpec, Observed};
use super::leaks::{self, Baseline};
use super::op::OpSpec;
use super::path::{self, Bed, Prepared};
use super::pattern::Pattern;
use super::plan::{self, Pair, RingWork};
use super::record::{FindingKind, OpRecord, Work};

/// Runs and judges `spec` on `bed` (device `spec.device`).
pub fn execute(bed: Bed<'_>, spec: &OpSpec, base: &Baseline) -> OpRecord {
    let mut rec = OpRecord::new(spec);
    let prep = match path::prepare(bed, spec) {
        Ok(p) => p,
        Err(e) => {
            rec.find(FindingKind::Setup, format!("preparing the operation: {e}"));
            return rec;
        }
    };
    let before = spec.fault.map(|_| ring_stats(bed.dev));
    // A bystander is staged on the paused queue before the fault is armed, so the fault meets the
    // operation's own batch ([`bystander`]).
    let mut by = match spec.bystander.map(|b| bystander::stage(bed, spec, b)).transpose() {
        Ok(b) => b,
        Err(e) => {
            rec.find(FindingKind::Setup, format!("staging the bystander: {e}"));
            return rec;
        }
    };
    let ahead = by.as_ref().map_or(0, bystander::Staged::pairs);
    let armed = match spec.fault.map(|f| fault::arm_behind(bed, f, spec.seed, spec.nc(), ahead)).transpose() {
        Ok(a) => a,
        Err(e) => {
            rec.find(FindingKind::Setup, format!("arming the fault: {e}"));
            if let Some(b) = by {
                b.finish(bed, None, None, 0, &mut rec);
            }
            return rec;
        }
    };
    if let Some(b) = by.as_mut() {
        b.resume(bed);
    }
    let t0 = Instant::now();
    let started = bed.dev.platform().jiffies();
    let ran = catch_unwind(AssertUnwindSafe(|| path::run(bed, spec, &prep)));
    rec.elapsed = t0.elapsed();
    let returned = bed.dev.platform().jiffies();
    let delta = |count: fn(&ndma::StatsSnapshot) -> u64| {
        before.as_ref().map_or(0, |b| {
            let now = bed.dev.ring_stats(spec.nc()).map_or(0, |s| count(&s));
            now.saturating_sub(b.get(&spec.nc()).map_or(0, count))
        })
    };
    let (retries, timeouts) = (delta(|s| s.retries), delta(|s| s.timeouts));
    let mut observed = armed.map(|a| a.observe(bed, retries, timeouts, started, returned));
    match ran {
        Ok(ran) => {
            if let (Some(o), Some(f)) = (observed.as_mut(), spec.fault) {
                if f.kind.is_pin_fault() {
                    pin_fault_met(spec, f, &prep, &ran, o);
                }
                // A reset window that was over before the operation started (the thread was descheduled
                // between arming it and running) never applied: not met, and not a miss of the op layer's.
                // (On V2 `observe` already knows, from the engine: its queue never hung in the window.)
                let (_, end) = bed.emu.reset_times(spec.nc());
                if f.kind == FaultKind::ResetWindow && !o.hit && started > end {
                    tracing::info!(op = spec.index, started, end, "reset window over before the operation started");
                    o.missed = None;
                }
            }
            judge(bed, spec, &prep, ran, observed.as_ref(), &mut rec);
            for l in path::zerocopy_pinned(bed, &prep) {
                rec.find(FindingKind::Leak, l);
            }
        }
        Err(panic) => {
            rec.outcome = "panic";
            rec.find(FindingKind::Panic, format!("the op layer panicked: {}", panic_message(&*panic)));
            rec.leak_check_due = true;
        }
    }
    if let Some(b) = by {
        let ring_before = before.as_ref().and_then(|b| b.get(&spec.nc()));
        b.finish(bed, ring_before, observed.as_ref(), retries, &mut rec);
    }
    drop(prep);
    if let Some(before) = before {
        after_fault(bed, spec, base, &before, &mut rec);
    }
    rec
}

/// Did the pin fault `f` take effect? A hole when the request failed with the partial pin's errno, an injected
/// pin fault when its plan entry was consumed (the plan is emptied either way).
fn pin_fault_met(spec: &OpSpec, f: FaultSpec, prep: &Prepared, ran: &path::Ran, o: &mut Observed) {
    let Some(user) = &prep.user else { return };
    let errno = path::zerocopy_pin_errno(spec);
    let plan = user.mm.pin_faults();
    // A pin failure is met when the slow pin it plans fails (a deferred piece is pinned by the completion
    // thread on the slow path alone, so the fast entry may stay); a short pin when its entry fired.
    let consumed = match f.kind {
        FaultKind::PinFail => !plan
            .entries()
            .iter()
            .any(|e| matches!(e, ndma_emu::PinFault::Fail { path: Some(ndma_emu::PinPath::Slow), .. })),
        _ => plan.entries().is_empty(),
    };
    plan.clear();
    let (hit, why) = match f.kind {
        FaultKind::Hole => {
            (ran.result.as_ref().is_err_and(|e| Some(e.errno()) == errno), "the request did not fail at the hole")
        }
        _ => (consumed, "the pin call it was planned for never came"),
    };
    o.hit = hit;
    o.missed = (!hit).then(|| format!("{}: {why}", f.describe()));
}

/// Outcome, fault and bytes of a run that returned.
fn judge(
    bed: Bed<'_>,
    spec: &OpSpec,
    prep: &Prepared,
    ran: path::Ran,
    observed: Option<&Observed>,
    rec: &mut OpRecord,
) {
    rec.outcome = expect::outcome_kind(&ran.result);
    for c in &ran.cqe_findings {
        rec.find(FindingKind::Leak, format!("completion accounting: {c}"));
    }
    let ring = bed.dev.h2t_queue(spec.nc()).unwrap_or((u32::MAX, u32::MAX));
    let refusal = path::refusal(spec, prep);
    let expected = Expected::of(spec, refusal.clone(), observed, ring);
    let as_expected = expected.matches(&ran.result, ran.fail_at);
    match &ran.result {
        _ if as_expected => {}
        // Under a fault that injects no timeout (delay, bandwidth, a reset the op layer recovers from) a
        // timeout is as uninjected as without one.
        Err(e) if expect::is_timeout(e) && !matches!(expected, Expected::Timeout { .. }) => {
            rec.find(FindingKind::UninjectedTimeout, format!("{e} (errno {}), at segment {}", e.errno(), ran.fail_at));
        }
        Err(e @ ndma::NdmaError::Aborted(_)) if spec.fault.is_none() => {
            rec.find(FindingKind::Aborted, format!("{e} (errno {}), at segment {}", e.errno(), ran.fail_at));
        }
        r => rec.find(
            FindingKind::Unexpected,
            format!("expected {expected:?}, got {} at segment {}", describe(r), ran.fail_at),
        ),
    }
    if let Some(o) = observed {
        rec.fault_hit = o.hit.then_some(spec.fault.map(|f| f.kind)).flatten();
        // An operation that timed out on its own may never have reached the fault: that is its finding.
        let timed_out_alone = rec.findings.iter().any(|f| f.kind == FindingKind::UninjectedTimeout);
        match o.missed.as_ref() {
            None => {}
            Some(_) if timed_out_alone => {}
            // It timed out as the fault would have made it, but the fault never fired: the budget ran out
            // before the engine reached it.
            Some(why) if ran.result.as_ref().is_err_and(expect::is_timeout) => rec.find(
                FindingKind::UninjectedTimeout,
                format!("timed out before meeting its fault ({why}): a timeout nobody injected"),
            ),
            Some(why) => rec.find(FindingKind::FaultMissed, why.clone()),
        }
        for f in o.unexplained_device_faults() {
            rec.find(FindingKind::DeviceFault, f.to_string());
        }
        rec.benign_corruption = o.benign().is_some();
    }
    // A failure (not a refusal) needs the device accounted for.
    rec.leak_check_due = ran.result.as_ref().is_err_and(|e| !expect::is_refusal(e)) || !as_expected;
    // A faulted operation's work is measured afterwards; an ordinary one's is what the plan says, unless it
    // failed without a fault to explain it.
    if spec.fault.is_none() && as_expected {
        rec.work = if spec.path.is_zerocopy() {
            Work::Planned(path::zerocopy_ring_work(bed, spec, prep, refusal.is_some()))
        } else {
            Work::Planned(plan::ring_work(spec, refusal.map(|(at, _)| at)))
        };
    }
    // A corruption that executed: the bytes of its one descriptor may be anything.
    let excused = observed.and_then(Observed::benign).and_then(|c| {
        let n = spec.fault.map_or(0, |f| f.param) as usize;
        let pair = plan::fetch_order(spec).get(n).copied();
        tracing::info!(op = spec.index, ?c, ?pair, "benign corruption accounted for");
        pair
    });
    for i in 0..spec.segments.len() {
        let w = expect::window(&ran.result, ran.fail_at, i);
        let checked = if spec.path.is_zerocopy() {
            path::zerocopy_check(bed, spec, prep, w)
        } else {
            check_segment(bed, spec, prep, i, w, excused)
        };
        match checked {
            Ok(mismatches) => {
                if mismatches.is_empty() && w == Window::Written {
                    rec.moved += spec.segments[i].size;
                }
                for m in mismatches {
                    rec.find(FindingKind::Corrupt, m);
                }
            }
            Err(e) => rec.find(FindingKind::Setup, format!("reading back segment {i}: {e}")),
        }
    }
}

/// After a faulted operation (alone on its device): probe that the device serves a copy, measure what its
/// rings counted, and account for everything.
fn after_fault(
    bed: Bed<'_>,
    spec: &OpSpec,
    base: &Baseline,
    before: &BTreeMap<u32, StatsSnapshot>,
    rec: &mut OpRecord,
) {
    match catch_unwind(AssertUnwindSafe(|| probe(bed, spec.nc()))) {
        Ok(Ok(())) => {}
        Ok(Err(why)) => rec.find(FindingKind::Unusable, why),
        Err(p) => rec.find(FindingKind::Panic, format!("the probe after the fault panicked: {}", panic_message(&*p))),
    }
    let after = ring_stats(bed.dev);
    let mut work = BTreeMap::new();
    for (nc, a) in &after {
        let d = before.get(nc).map_or(*a, |b| a.since(b));
        rec.timeouts += d.timeouts;
        if RingWork::of(&d) != RingWork::default() {
            work.insert(*nc, RingWork::of(&d));
        }
    }
    rec.work = Work::Measured(work);
    for l in leaks::device(bed, spec.device as usize, base) {
        rec.find(FindingKind::Leak, l);
    }
    rec.leak_check_due = false;
}

/// The counters of every ring of `dev`.
pub fn ring_stats(dev: &NeuronDevice) -> BTreeMap<u32, StatsSnapshot> {
    (0..dev.dhal().ncs_per_device()).filter_map(|nc| dev.ring_stats(nc).ok().map(|s| (nc, s))).collect()
}

/// A 64-byte host→device copy on NC `nc`'s ring, checked with its guards.
fn probe(bed: Bed<'_>, nc: u32) -> Result<(), String> {
    const LEN: u64 = 64;
    let (src_p, poison) = (Pattern::Source(0x9e0b), Pattern::Poison(0x9e0b));
    let src = Side::alloc(bed.dev, true, nc, 0, LEN).map_err(|e| e.to_string())?;
    let dst = Side::alloc(bed.dev, false, nc, 0, LEN).map_err(|e| e.to_string())?;
    src.fill(bed.emu, src_p).map_err(|e| e.to_string())?;
    dst.fill(bed.emu, poison).map_err(|e| e.to_string())?;
    bed.dev
        .memcpy_mc(&src.chunk, &dst.chunk, src.lead, dst.lead, LEN)
        .map_err(|e| format!("the probe copy after the fault on NC {nc} failed: {e} (errno {})", e.errno()))?;
    let regions = [
        (Region { name: "probe guard before", off: 0, len: dst.lead }, Expect::Pattern { pattern: poison, at: 0 }),
        (Region { name: "probe window", off: dst.lead, len: LEN }, Expect::Pattern { pattern: src_p, at: src.lead }),
        (
            Region { name: "probe guard after", off: dst.lead + LEN, len: dst.total() - dst.lead - LEN },
            Expect::Pattern { pattern: poison, at: dst.lead + LEN },
        ),
    ];
    for (r, e) in regions {
        if let Some(m) = check::region(bed.emu, &dst.chunk, r, e, None, Clues::default()).map_err(|e| e.to_string())? {
            return Err(format!("the probe copy after the fault: {m}"));
        }
    }
    Ok(())
}

/// Checks segment `i`: its source untouched, its destination's guards intact, its window as `w` says (minus
/// `excused`, the one descriptor a benign corruption covered). Returns the mismatches.
pub(super) fn check_segment(
    bed: Bed<'_>,
    spec: &OpSpec,
    prep: &Prepared,
    i: usize,
    w: Window,
    excused: Option<Pair>,
) -> crate::error::CliResult<Vec<String>> {
    let m = &prep.segments[i];
    let mut out = Vec::new();
    let mut push = |r: Option<check::Mismatch>| {
        if let Some(m) = r {
            out.push(m.to_string());
        }
    };
    let source = m.src.as_ref().map(|s| (m.src_pattern, s.total()));
    if let Some(src) = &m.src {
        let name = format!("segment {i}: source chunk");
        let r = Region { name: &name, off: 0, len: src.total() };
        let clues = Clues { poison: None, source };
        push(check::region(bed.emu, &src.chunk, r, Expect::Pattern { pattern: m.src_pattern, at: 0 }, None, clues)?);
    }
    let dst = &m.dst;
    let clues = Clues { poison: Some(m.poison), source };
    let poison_at = |at| Expect::Pattern { pattern: m.poison, at };
    let before = format!("segment {i}: guard before the destination window");
    let r = Region { name: &before, off: 0, len: dst.lead };
    push(check::region(bed.emu, &dst.chunk, r, poison_at(0), None, clues)?);
    let after = format!("segment {i}: guard after the destination window");
    let end = dst.lead + dst.len;
    let r = Region { name: &after, off: end, len: dst.total() - end };
    push(check::region(bed.emu, &dst.chunk, r, poison_at(end), None, clues)?);
    // The window, in at most three pieces around an excused descriptor.
    let hole = match excused {
        Some(Pair::Data { segment, at, len }) if segment == i => Some((at, len)),
        _ => None,
    };
    let pieces = match hole {
        Some((at, len)) => vec![(0, at), (at + len, dst.len - at - len)],
        None => vec![(0, dst.len)],
    };
    let window = format!("segment {i}: destination window");
    for (off, len) in pieces.into_iter().filter(|&(_, l)| l > 0) {
        let r = Region { name: &window, off: dst.lead + off, len };
        let written = shift(path::written(spec, prep, i), off);
        let (expect, or_poison) = match w {
            Window::Written => (written, None),
            Window::Untouched => (poison_at(dst.lead + off), None),
            Window::Partial => (written, Some(m.poison)),
        };
        push(check::region(bed.emu, &dst.chunk, r, expect, or_poison, clues)?);
    }
    Ok(out)
}

/// `e` starting `off` bytes into what it describes.
fn shift(e: Expect<'_>, off: u64) -> Expect<'_> {
    match e {
        Expect::Pattern { pattern, at } => Expect::Pattern { pattern, at: at + off },
        Expect::Byte(b) => Expect::Byte(b),
        Expect::Bytes(b) => Expect::Bytes(&b[off as usize..]),
    }
}

fn describe(r: &Result<(), ndma::NdmaError>) -> String {
    match r {
        Ok(()) => "success".into(),
        Err(e) => format!("{e} (errno {})", e.errno()),
    }
}

/// The text of a panic payload.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".into())
}
