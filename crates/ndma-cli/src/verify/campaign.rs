//! A campaign on one instance: threads take operation indices from a shared counter until the bound is
//! reached or an operation fails fatally, then the end-of-run checks account for the whole instance.
//!
//! # Gates
//!
//! - Each device has a gate (`RwLock`): an ordinary operation holds it shared, a faulted one exclusively, so a
//!   fault meets exactly the operation it was drawn for and what its rings count is its own. A leak check
//!   also takes it exclusively: nothing may run on a device while it is accounted for.
//! - Each ring has a chain lock: an async chain holds those of the rings it uses (in NC order). A ring
//!   carries one async chain at a time — the caller's contract (`-EBUSY` otherwise) — while synchronous
//!   copies of other threads meet the chain on the ring freely.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::Instant;

use ndma_emu::Testbed;

use super::config::{Bound, Budgets, Config, FaultMode};
use super::exec;
use super::fault::FaultKind;
use super::leaks::{self, Baseline};
use super::op::{DrawContext, OpSpec};
use super::path::{Bed, PathKind};
use super::plan::RingWork;
use super::progress::Progress;
use super::record::{FindingKind, OpRecord};
use super::replay;
use super::summary::Tally;
use crate::error::CliResult;

/// The process id the campaign attaches to every device (host descriptors must belong to an attached
/// process's chunk).
pub const VERIFY_PID: u32 = 4242;

/// Non-fatal findings printed in full; later ones are counted only.
const PRINTED_TIMEOUTS: u64 = 10;

/// Which operations to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// `0..` up to the campaign's bound.
    All,
    /// Operation `K` alone (`--replay K`).
    One(u64),
}

/// The shared state of a running campaign.
struct Run<'a> {
    cfg: &'a Config,
    tb: &'a Testbed,
    base: &'a Baseline,
    ctx: DrawContext,
    gates: Vec<RwLock<()>>,
    chains: Vec<Vec<Mutex<()>>>,
    next: AtomicU64,
    stop: AtomicBool,
    printed_timeouts: AtomicU64,
    progress: Progress,
}

/// Runs `cfg` (or one operation of it) and returns its tally, end-of-run checks included.
///
/// # Errors
///
/// The instance could not be built.
pub fn run(cfg: &Config, which: Selection) -> CliResult<Tally> {
    let tb = cfg.testbed()?;
    let zerocopy = cfg.paths.iter().any(|p| p.is_zerocopy());
    for d in tb.system.devices() {
        d.attach_process(VERIFY_PID);
        // V2 has zero-copy only with the override (async never: it is refused, as the campaign expects).
        if zerocopy && !d.zerocopy_supported() {
            d.set_zerocopy_trn1_override(true);
        }
        // A ring's zero-copy state (its completion queue, which a synchronous request creates too) is
        // allocated on the ring's first zero-copy use and kept: allocate it before the baseline, or the
        // end-of-run checks count it as host memory never returned.
        if zerocopy {
            for nc in 0..d.dhal().ncs_per_device() {
                if let Err(e) = d.completion_queue(nc) {
                    tracing::debug!(nc, %e, "no zero-copy state on this ring");
                }
            }
        }
    }
    let base = Baseline::take(&tb);
    let arch = tb.system.arch();
    let ncs = arch.ncs_per_device();
    let async_zerocopy = {
        let (dev, emu) = tb.device(0);
        super::path::zerocopy_async_supported(Bed { dev, emu }, 0)
    };
    let devices = tb.system.devices().len();
    let ctx = draw_context(cfg, devices as u32, ncs, ndma::dhal(arch).retry_memcpy(), async_zerocopy);
    let bound = match which {
        Selection::All => cfg.bound,
        Selection::One(_) => Bound::Count(1),
    };
    let run = Run {
        cfg,
        tb: &tb,
        base: &base,
        ctx,
        gates: (0..devices).map(|_| RwLock::new(())).collect(),
        chains: (0..devices).map(|_| (0..ncs).map(|_| Mutex::new(())).collect()).collect(),
        next: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        printed_timeouts: AtomicU64::new(0),
        progress: Progress::new(bound, cfg.instance.name, cfg.progress && which == Selection::All),
    };
    let mut tally = match which {
        Selection::One(k) => {
            let rec = run.one(k);
            run.report(&rec);
            let mut t = Tally::default();
            t.add(&rec, cfg.instance.name, &replay::command(cfg, k));
            t
        }
        Selection::All => {
            let deadline = match cfg.bound {
                Bound::Duration(d) => Some(Instant::now() + d),
                Bound::Count(_) => None,
            };
            std::thread::scope(|s| {
                let workers: Vec<_> = (0..cfg.threads.max(1)).map(|_| s.spawn(|| run.worker(deadline))).collect();
                let mut t = Tally::default();
                for w in workers {
                    match w.join() {
                        Ok(part) => t.merge(part),
                        Err(p) => t.add_finding(
                            cfg.instance.name,
                            FindingKind::Panic,
                            format!("a campaign thread panicked: {}", exec::panic_message(&*p)),
                        ),
                    }
                }
                t
            })
        }
    };
    run.progress.finish();
    end_checks(cfg, &tb, &base, &mut tally);
    Ok(tally)
}

/// What operations of `cfg` are drawn from on an instance of `devices` devices with `ncs` NeuronCores each,
/// whose arch has the reset-window retry (`retry_arch`) and takes async zero-copy requests or not.
pub fn draw_context(cfg: &Config, devices: u32, ncs: u32, retry_arch: bool, async_zerocopy: bool) -> DrawContext {
    DrawContext {
        seed: cfg.seed,
        paths: cfg.paths.clone(),
        devices,
        ncs,
        faults: cfg.faults,
        fault_rate: cfg.fault_rate,
        fault_kinds: fault_kinds(cfg, retry_arch),
        big_rate: cfg.big_rate,
        async_zerocopy,
        bystanders: cfg.bystanders,
    }
}

/// The fault kinds `cfg` draws from: every kind under silicon budgets, those that need no timeout under
/// emulation budgets.
pub fn fault_kinds(cfg: &Config, retry_arch: bool) -> Vec<FaultKind> {
    match cfg.faults {
        FaultMode::None => Vec::new(),
        FaultMode::Mix => FaultKind::ALL
            .into_iter()
            .filter(|k| cfg.budgets == Budgets::Silicon || !k.needs_timeout(retry_arch))
            .collect(),
    }
}

impl Run<'_> {
    /// One thread's share: operations until the bound, the deadline or a fatal failure.
    fn worker(&self, deadline: Option<Instant>) -> Tally {
        let mut tally = Tally::default();
        loop {
            // Relaxed: the flag only ends the loop early; nothing is published through it.
            if self.stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            // Relaxed: each index is handed out once; the counter orders nothing else.
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if matches!(self.cfg.bound, Bound::Count(n) if i >= n) {
                break;
            }
            let rec = self.one(i);
            self.report(&rec);
            let replay = if rec.findings.is_empty() { String::new() } else { replay::command(self.cfg, i) };
            tally.add(&rec, self.cfg.instance.name, &replay);
            if rec.is_fatal() {
                self.stop.store(true, Ordering::Relaxed);
            }
        }
        tally
    }

    /// Draws, runs and judges operation `i` under its device's gate.
    fn one(&self, i: u64) -> OpRecord {
        let spec = OpSpec::draw(&self.ctx, i);
        let d = spec.device as usize;
        let (dev, emu) = self.tb.device(spec.device);
        let bed = Bed { dev, emu };
        let mut rec = if spec.fault.is_some() {
            let _alone = self.gates[d].write().unwrap_or_else(|p| p.into_inner());
            exec::execute(bed, &spec, self.base)
        } else {
            let _shared = self.gates[d].read().unwrap_or_else(|p| p.into_inner());
            let _chains = self.chain_locks(&spec);
            exec::execute(bed, &spec, self.base)
        };
        if rec.leak_check_due {
            let _alone = self.gates[d].write().unwrap_or_else(|p| p.into_inner());
            for l in leaks::device(bed, d, self.base) {
                rec.find(FindingKind::Leak, l);
            }
            rec.leak_check_due = false;
        }
        rec
    }

    /// The chain locks of an async operation's rings, taken in NC order.
    fn chain_locks(&self, spec: &OpSpec) -> Vec<MutexGuard<'_, ()>> {
        // An async zero-copy request also takes its ring's lock: it consumes the ring's completion queue.
        if spec.path != PathKind::Async && spec.path != PathKind::ZeroCopyAsync {
            return Vec::new();
        }
        let mut ncs: Vec<u32> = spec.segments.iter().map(|s| s.nc).collect();
        ncs.sort_unstable();
        ncs.dedup();
        let ring = &self.chains[spec.device as usize];
        ncs.into_iter().map(|nc| ring[nc as usize].lock().unwrap_or_else(|p| p.into_inner())).collect()
    }

    /// Counts `rec` on the bar and prints its failures.
    fn report(&self, rec: &OpRecord) {
        self.progress.record(rec);
        if rec.findings.is_empty() {
            return;
        }
        if !rec.is_fatal() {
            // Relaxed: a print budget.
            let n = self.printed_timeouts.fetch_add(1, Ordering::Relaxed);
            if n > PRINTED_TIMEOUTS {
                return;
            }
            if n == PRINTED_TIMEOUTS {
                self.progress.eprint("ndma verify: further uninjected timeouts are counted, not printed");
                return;
            }
        }
        self.progress.eprint(&replay::failure_text(self.cfg, rec));
    }
}

/// With every thread done: the instance accounted for, no engine fault nobody injected, every ring's
/// counters equal to the work asked of it, and no timeout beyond those injected.
fn end_checks(cfg: &Config, tb: &Testbed, base: &Baseline, t: &mut Tally) {
    let name = cfg.instance.name;
    let before = t.failures.len();
    end_findings(name, tb, base, t);
    for f in t.failures.iter().skip(before) {
        eprintln!("ndma verify: end-of-run check ({name}, seed {}): {}: {}", cfg.seed, f.kind.name(), f.message);
    }
}

fn end_findings(name: &str, tb: &Testbed, base: &Baseline, t: &mut Tally) {
    for l in leaks::instance(tb, base) {
        t.add_finding(name, FindingKind::Leak, l);
    }
    for (i, emu) in tb.emu.devices().iter().enumerate() {
        for f in emu.take_faults() {
            t.add_finding(name, FindingKind::DeviceFault, format!("device {i}: {f}"));
        }
    }
    let mut timeouts = 0u64;
    let mut mismatches = Vec::new();
    for (d, dev) in tb.system.devices().iter().enumerate() {
        for nc in 0..dev.dhal().ncs_per_device() {
            let Ok(s) = dev.ring_stats(nc) else { continue };
            timeouts += s.timeouts;
            let want = t.work.get(&(d as u32, nc)).copied().unwrap_or_default();
            let got = RingWork::of(&s);
            if got != want {
                mismatches.push(format!("device {d} NC {nc}: the ring counted {got:?}, the operations asked {want:?}"));
            }
        }
    }
    // An operation that failed without a fault to explain it staged an unknown part of its work.
    if t.unknown_work == 0 {
        for m in mismatches {
            t.add_finding(name, FindingKind::Accounting, m);
        }
    }
    let beyond = timeouts.saturating_sub(t.injected_timeouts);
    let counted = t.count(FindingKind::UninjectedTimeout);
    if beyond > counted {
        t.add_finding(
            name,
            FindingKind::UninjectedTimeout,
            format!(
                "the rings counted {timeouts} timed-out waits, {} of them injected: {} more than the operations \
                 reported (a retry hid them)",
                t.injected_timeouts,
                beyond - counted
            ),
        );
    }
}
