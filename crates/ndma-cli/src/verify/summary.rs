//! Tallies of a campaign (per thread, merged at the end) and the report: a table for people, one JSON
//! document for programs.

use std::collections::BTreeMap;

use serde::Serialize;

use super::bystander::Fate;
use super::fault::FaultKind;
use super::path::PathKind;
use super::plan::RingWork;
use super::record::{FindingKind, OpRecord, Work};
use crate::util::size::fmt_size;
use crate::util::table::Table;

/// Failures kept in full (the counts go on).
const KEPT_FAILURES: usize = 20;

/// The slowest operation.
#[derive(Debug, Clone, Serialize)]
pub struct Slowest {
    /// Its index.
    pub index: u64,
    /// Its instance.
    pub instance: String,
    /// Its path.
    pub path: PathKind,
    /// Its direction.
    pub dir: &'static str,
    /// Its bytes.
    pub size: u64,
    /// Its fault, if any.
    pub fault: Option<String>,
    /// The op-layer call(s), ms.
    pub elapsed_ms: f64,
}

/// One failure, with the command that replays its operation.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// The operation's index (absent for findings of the end-of-run checks).
    pub index: Option<u64>,
    /// The instance.
    pub instance: String,
    /// Its kind.
    pub kind: FindingKind,
    /// What was found.
    pub message: String,
    /// The operation as drawn.
    pub op: Option<String>,
    /// `ndma verify --seed S --replay K …`.
    pub replay: Option<String>,
}

/// Counters of (part of) a campaign.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Operations run.
    pub operations: u64,
    /// Bytes moved and verified.
    pub bytes: u64,
    /// Operations by outcome kind.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Faults that took effect, by kind.
    pub faults_injected: BTreeMap<FaultKind, u64>,
    /// `(operations, bytes)` by path and direction.
    pub per_path: BTreeMap<(PathKind, &'static str), (u64, u64)>,
    /// Findings by kind.
    pub findings: BTreeMap<FindingKind, u64>,
    /// Benign corruptions accounted for.
    pub benign_corruptions: u64,
    /// The slowest operation.
    pub slowest: Option<Slowest>,
    /// Ring work the operations account for, by `(device, NC)`.
    pub work: BTreeMap<(u32, u32), RingWork>,
    /// Operations whose ring work is unknown.
    pub unknown_work: u64,
    /// Timeouts counted by the rings during faulted operations (injected).
    pub injected_timeouts: u64,
    /// Bystanders staged (`--bystanders`).
    pub bystanders: u64,
    /// What became of them, by fate (those whose wait ended in neither success nor `Aborted` have none).
    pub bystander_fates: BTreeMap<Fate, u64>,
    /// The first failures in full.
    pub failures: Vec<Failure>,
}

impl Tally {
    /// Counts `rec`; `replay` is the command that replays it.
    pub fn add(&mut self, rec: &OpRecord, instance: &str, replay: &str) {
        let spec = &rec.spec;
        self.operations += 1;
        self.bytes += rec.moved;
        *self.outcomes.entry(rec.outcome).or_default() += 1;
        if let Some(k) = rec.fault_hit {
            *self.faults_injected.entry(k).or_default() += 1;
        }
        let p = self.per_path.entry((spec.path, spec.dir.name())).or_default();
        p.0 += 1;
        p.1 += rec.moved;
        self.benign_corruptions += u64::from(rec.benign_corruption);
        let ms = rec.elapsed.as_secs_f64() * 1e3;
        if self.slowest.as_ref().is_none_or(|s| ms > s.elapsed_ms) {
            self.slowest = Some(Slowest {
                index: spec.index,
                instance: instance.to_string(),
                path: spec.path,
                dir: spec.dir.name(),
                size: spec.bytes(),
                fault: spec.fault.map(|f| f.describe()),
                elapsed_ms: ms,
            });
        }
        match &rec.work {
            Work::Planned(w) | Work::Measured(w) => {
                for (nc, rw) in w {
                    *self.work.entry((spec.device, *nc)).or_default() += *rw;
                }
            }
            Work::Unknown => self.unknown_work += 1,
        }
        self.injected_timeouts += rec.timeouts;
        self.bystanders += u64::from(spec.bystander.is_some());
        if let Some(f) = rec.bystander {
            *self.bystander_fates.entry(f).or_default() += 1;
        }
        for f in &rec.findings {
            *self.findings.entry(f.kind).or_default() += 1;
            if self.failures.len() < KEPT_FAILURES {
                self.failures.push(Failure {
                    index: Some(spec.index),
                    instance: instance.to_string(),
                    kind: f.kind,
                    message: f.message.clone(),
                    op: Some(spec.describe()),
                    replay: Some(replay.to_string()),
                });
            }
        }
    }

    /// Counts a finding of the end-of-run checks.
    pub fn add_finding(&mut self, instance: &str, kind: FindingKind, message: String) {
        *self.findings.entry(kind).or_default() += 1;
        if self.failures.len() < KEPT_FAILURES {
            self.failures.push(Failure {
                index: None,
                instance: instance.to_string(),
                kind,
                message,
                op: None,
                replay: None,
            });
        }
    }

    /// Adds `o` (another thread's, or another instance's) to this one.
    pub fn merge(&mut self, o: Tally) {
        self.operations += o.operations;
        self.bytes += o.bytes;
        for (k, v) in o.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        for (k, v) in o.faults_injected {
            *self.faults_injected.entry(k).or_default() += v;
        }
        for (k, (n, b)) in o.per_path {
            let p = self.per_path.entry(k).or_default();
            p.0 += n;
            p.1 += b;
        }
        for (k, v) in o.findings {
            *self.findings.entry(k).or_default() += v;
        }
        self.benign_corruptions += o.benign_corruptions;
        if let Some(s) = o.slowest {
            if self.slowest.as_ref().is_none_or(|m| s.elapsed_ms > m.elapsed_ms) {
                self.slowest = Some(s);
            }
        }
        for (k, w) in o.work {
            *self.work.entry(k).or_default() += w;
        }
        self.unknown_work += o.unknown_work;
        self.injected_timeouts += o.injected_timeouts;
        self.bystanders += o.bystanders;
        for (k, v) in o.bystander_fates {
            *self.bystander_fates.entry(k).or_default() += v;
        }
        let room = KEPT_FAILURES.saturating_sub(self.failures.len());
        self.failures.extend(o.failures.into_iter().take(room));
    }

    /// Findings of `kind`.
    pub fn count(&self, kind: FindingKind) -> u64 {
        self.findings.get(&kind).copied().unwrap_or(0)
    }

    /// No finding at all.
    pub fn passed(&self) -> bool {
        self.findings.values().all(|&n| n == 0)
    }
}

/// One row of `per_path`.
#[derive(Debug, Clone, Serialize)]
pub struct PathRow {
    /// The path.
    pub path: PathKind,
    /// The direction.
    pub dir: &'static str,
    /// Operations.
    pub operations: u64,
    /// Bytes moved and verified.
    pub bytes: u64,
}

/// The `--json` document.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `"verify"`.
    pub command: &'static str,
    /// The campaign seed.
    pub seed: u64,
    /// The operation replayed, with `--replay`.
    pub replay: Option<u64>,
    /// Instance presets run, in order.
    pub instances: Vec<String>,
    /// `threaded` or `inline`.
    pub engines: &'static str,
    /// `none` or `mix`.
    pub faults: &'static str,
    /// Share of faulted operations under `mix`.
    pub fault_rate: f64,
    /// Share of transfers drawn from the large sizes.
    pub big_rate: f64,
    /// `silicon` or `emulation`.
    pub budgets: &'static str,
    /// `marker`, or `driver` with `--driver-timing`.
    pub timing: &'static str,
    /// `adversarial`, `relaxed` or `strict`.
    pub ordering: &'static str,
    /// Threads.
    pub threads: usize,
    /// Paths drawn from.
    pub paths: Vec<PathKind>,
    /// Operations run.
    pub operations: u64,
    /// Bytes moved and verified.
    pub bytes: u64,
    /// Regions found holding wrong bytes.
    pub corrupt: u64,
    /// Leaks found.
    pub leaks: u64,
    /// Timeouts nobody injected.
    pub uninjected_timeouts: u64,
    /// Engine accesses outside an operation's memory (0 until descriptor-escape detection exists).
    pub escapes: u64,
    /// Panics caught.
    pub panics: u64,
    /// Outcomes other than the expected one.
    pub unexpected: u64,
    /// Operations aborted by a failure elsewhere on their ring.
    pub aborted: u64,
    /// Injected faults never met.
    pub faults_missed: u64,
    /// Engine faults nobody injected.
    pub device_faults: u64,
    /// Probes that failed after a fault.
    pub unusable: u64,
    /// Rings whose counters differ from the work asked of them.
    pub accounting: u64,
    /// Set-up failures.
    pub setup: u64,
    /// Corruptions the model reported benign, accounted for descriptor by descriptor.
    pub benign_corruptions: u64,
    /// Operations by outcome.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Faults that took effect, by kind.
    pub faults_injected: BTreeMap<&'static str, u64>,
    /// Operations and bytes by path and direction.
    pub per_path: Vec<PathRow>,
    /// The slowest operation.
    pub slowest: Option<Slowest>,
    /// Wall time, s.
    pub elapsed_s: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// The first failures.
    pub failures: Vec<Failure>,
    /// `--bystanders`: what became of the bystanders (null without the flag).
    pub bystanders: Option<BystanderReport>,
    /// `--fuzz-descriptors`: what the descriptor fuzz did (null for a transfer campaign).
    pub fuzz_descriptors: Option<FuzzReport>,
    /// No finding at all.
    pub passed: bool,
}

/// The `bystanders` object of the JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BystanderReport {
    /// Bystanders staged.
    pub staged: u64,
    /// Landed before any recovery: done in place.
    pub completed: u64,
    /// Re-staged by a recovery (or V2 retry) and completed byte-exact.
    pub replayed: u64,
    /// Abandoned by a recovery (copies over their own source): `Aborted` from their wait.
    pub aborted: u64,
}

/// The `fuzz_descriptors` object of the JSON.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct FuzzReport {
    /// Iterations (rings pairs) run.
    pub iterations: u64,
    /// Descriptors written through `copy_descriptors`.
    pub descriptors: u64,
    /// Copies the engine executed from accepted rings, each inside the accepted windows.
    pub copies: u64,
    /// Refused rings whose chunk was written anyway.
    pub written_despite_refusal: u64,
}

/// What the report says about the campaign besides its tally.
#[derive(Debug, Clone)]
pub struct Header {
    /// The seed.
    pub seed: u64,
    /// `--replay`.
    pub replay: Option<u64>,
    /// Instances run.
    pub instances: Vec<String>,
    /// Engines.
    pub engines: &'static str,
    /// Faults.
    pub faults: &'static str,
    /// Fault rate.
    pub fault_rate: f64,
    /// Large-size rate.
    pub big_rate: f64,
    /// Budgets.
    pub budgets: &'static str,
    /// Marker-wait timing.
    pub timing: &'static str,
    /// Ordering.
    pub ordering: &'static str,
    /// Threads.
    pub threads: usize,
    /// Paths.
    pub paths: Vec<PathKind>,
    /// `--bystanders`.
    pub bystanders: bool,
}

impl Report {
    /// The report of `t`, run in `elapsed_s` seconds.
    pub fn new(h: Header, t: &Tally, elapsed_s: f64) -> Report {
        Report {
            command: "verify",
            seed: h.seed,
            replay: h.replay,
            instances: h.instances,
            engines: h.engines,
            faults: h.faults,
            fault_rate: h.fault_rate,
            big_rate: h.big_rate,
            budgets: h.budgets,
            timing: h.timing,
            ordering: h.ordering,
            threads: h.threads,
            paths: h.paths,
            operations: t.operations,
            bytes: t.bytes,
            corrupt: t.count(FindingKind::Corrupt),
            leaks: t.count(FindingKind::Leak),
            uninjected_timeouts: t.count(FindingKind::UninjectedTimeout),
            escapes: t.count(FindingKind::Escape),
            panics: t.count(FindingKind::Panic),
            unexpected: t.count(FindingKind::Unexpected),
            aborted: t.count(FindingKind::Aborted),
            faults_missed: t.count(FindingKind::FaultMissed),
            device_faults: t.count(FindingKind::DeviceFault),
            unusable: t.count(FindingKind::Unusable),
            accounting: t.count(FindingKind::Accounting),
            setup: t.count(FindingKind::Setup),
            benign_corruptions: t.benign_corruptions,
            outcomes: t.outcomes.clone(),
            faults_injected: t.faults_injected.iter().map(|(k, v)| (k.name(), *v)).collect(),
            per_path: t
                .per_path
                .iter()
                .map(|(&(path, dir), &(operations, bytes))| PathRow { path, dir, operations, bytes })
                .collect(),
            slowest: t.slowest.clone(),
            elapsed_s,
            ops_per_sec: if elapsed_s > 0.0 { t.operations as f64 / elapsed_s } else { 0.0 },
            failures: {
                let mut f = t.failures.clone();
                // Operations in index order, end-of-run findings last.
                f.sort_by_key(|f| (f.index.is_none(), f.index));
                f
            },
            bystanders: h.bystanders.then(|| {
                let n = |f| t.bystander_fates.get(&f).copied().unwrap_or(0);
                BystanderReport {
                    staged: t.bystanders,
                    completed: n(Fate::Completed),
                    replayed: n(Fate::Replayed),
                    aborted: n(Fate::Aborted),
                }
            }),
            fuzz_descriptors: None,
            passed: t.passed(),
        }
    }

    /// The human report.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut t = Table::new(&["path", "dir", ">operations", ">bytes"]);
        for r in &self.per_path {
            t.row(vec![format!("{}", r.path.name()), r.dir.into(), r.operations.to_string(), fmt_size(r.bytes)]);
        }
        out.push_str(&t.render());
        let join = |m: &mut dyn Iterator<Item = (&str, u64)>| {
            m.map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
        };
        out.push_str(&format!("outcomes: {}\n", join(&mut self.outcomes.iter().map(|(k, v)| (*k, *v)))));
        if self.faults == "mix" {
            let f = join(&mut self.faults_injected.iter().map(|(k, v)| (*k, *v)));
            out.push_str(&format!(
                "faults injected: {}{}\n",
                if f.is_empty() { "none" } else { &f },
                if self.benign_corruptions > 0 {
                    format!(" ({} benign corruptions accounted for)", self.benign_corruptions)
                } else {
                    String::new()
                }
            ));
        }
        if let Some(b) = &self.bystanders {
            out.push_str(&format!(
                "bystanders: {} staged: {} completed in place, {} replayed, {} aborted\n",
                b.staged, b.completed, b.replayed, b.aborted
            ));
        }
        if let Some(s) = &self.slowest {
            out.push_str(&format!(
                "slowest: op {} ({}) {} {} of {}{}: {:.3} ms\n",
                s.index,
                s.instance,
                s.path.name(),
                s.dir,
                fmt_size(s.size),
                s.fault.as_ref().map(|f| format!(", fault {f}")).unwrap_or_default(),
                s.elapsed_ms
            ));
        }
        out.push_str(&format!(
            "operations {}, bytes {}, corrupt {}, leaks {}, uninjected timeouts {}, escapes {}, panics {}, unexpected \
             {}, aborted {}, faults missed {}, engine faults {}, unusable {}, accounting {}\n",
            self.operations,
            fmt_size(self.bytes),
            self.corrupt,
            self.leaks,
            self.uninjected_timeouts,
            self.escapes,
            self.panics,
            self.unexpected,
            self.aborted,
            self.faults_missed,
            self.device_faults,
            self.unusable,
            self.accounting
        ));
        out.push_str(&format!(
            "{} in {:.1} s ({:.0} operations/s)\n",
            if self.passed { "PASSED" } else { "FAILED" },
            self.elapsed_s,
            self.ops_per_sec
        ));
        out
    }
}
