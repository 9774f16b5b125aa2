//! What one operation came to: its outcome, its time, the fault it met, the ring work it accounts for, and
//! its findings — each a failure of the run.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::bystander::Fate;
use super::fault::FaultKind;
use super::op::OpSpec;
use super::plan::RingWork;

/// A kind of finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Bytes that are not what the operation must leave (window, guards or source).
    Corrupt,
    /// Something the op layer or the model still holds with nothing running.
    Leak,
    /// A timeout nobody injected.
    UninjectedTimeout,
    /// An outcome other than the one the operation's inputs and fault call for.
    Unexpected,
    /// Aborted (`-EIO`) because another operation's failure re-initialised its ring and it could not be
    /// re-staged: the trace of a failure elsewhere (a faulted operation runs alone, so only a failure nobody
    /// injected can cause it).
    Aborted,
    /// A panic inside the op layer (caught per operation).
    Panic,
    /// An injected fault the operation never met.
    FaultMissed,
    /// An engine fault nobody injected (a descriptor the engine refused).
    DeviceFault,
    /// The device could not serve a copy after a fault.
    Unusable,
    /// A ring's counters differ from what the operations asked of it.
    Accounting,
    /// An engine access outside the memory an operation was allowed to touch (zero-copy round).
    Escape,
    /// The campaign could not set an operation up (allocation, back door).
    Setup,
}

impl FindingKind {
    /// Does it stop the run? A timeout nobody injected (and an abort it causes on its ring) is counted and
    /// the run goes on (the op layer re-initialised the ring), so a run shows how often it happens.
    pub fn is_fatal(self) -> bool {
        !matches!(self, FindingKind::UninjectedTimeout | FindingKind::Aborted)
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::Corrupt => "corrupt data",
            FindingKind::Leak => "leak",
            FindingKind::UninjectedTimeout => "timeout nobody injected",
            FindingKind::Unexpected => "unexpected outcome",
            FindingKind::Aborted => "aborted by a failure elsewhere on its ring",
            FindingKind::Panic => "panic",
            FindingKind::FaultMissed => "injected fault missed",
            FindingKind::DeviceFault => "engine fault nobody injected",
            FindingKind::Unusable => "device unusable after a fault",
            FindingKind::Accounting => "ring counters differ from the work asked",
            FindingKind::Escape => "descriptor escape",
            FindingKind::Setup => "set-up failure",
        }
    }
}

/// One finding.
#[derive(Debug, Clone)]
pub struct Finding {
    /// Its kind.
    pub kind: FindingKind,
    /// What was found.
    pub message: String,
}

/// The ring work an operation accounts for, per NC of its device.
#[derive(Debug, Clone, Default)]
pub enum Work {
    /// What the plan says a successful (or refused) operation stages.
    Planned(BTreeMap<u32, RingWork>),
    /// What a faulted operation (alone on its device) was measured to stage, probe included.
    Measured(BTreeMap<u32, RingWork>),
    /// Unknown: the operation failed without a fault to explain it (the run is failing anyway).
    #[default]
    Unknown,
}

/// One operation's record.
#[derive(Debug, Clone)]
pub struct OpRecord {
    /// The operation.
    pub spec: OpSpec,
    /// `ok` or the error's kind.
    pub outcome: &'static str,
    /// The op-layer call(s) alone, set-up and checks excluded.
    pub elapsed: Duration,
    /// Bytes moved and verified.
    pub moved: u64,
    /// The fault it met.
    pub fault_hit: Option<FaultKind>,
    /// A corruption the model reported benign was accounted for.
    pub benign_corruption: bool,
    /// Ring work.
    pub work: Work,
    /// Timeouts its rings counted (measured for a faulted operation).
    pub timeouts: u64,
    /// What became of its bystander, if it had one that was waited for.
    pub bystander: Option<Fate>,
    /// A leak check is due (a failure happened) and has not been made.
    pub leak_check_due: bool,
    /// Failures.
    pub findings: Vec<Finding>,
}

impl OpRecord {
    /// An empty record of `spec`.
    pub fn new(spec: &OpSpec) -> OpRecord {
        OpRecord {
            spec: spec.clone(),
            outcome: "ok",
            elapsed: Duration::ZERO,
            moved: 0,
            fault_hit: None,
            benign_corruption: false,
            work: Work::Unknown,
            timeouts: 0,
            bystander: None,
            leak_check_due: false,
            findings: Vec::new(),
        }
    }

    /// Adds a finding.
    pub fn find(&mut self, kind: FindingKind, message: impl Into<String>) {
        self.findings.push(Finding { kind, message: message.into() });
    }

    /// Does it stop the run?
    pub fn is_fatal(&self) -> bool {
        self.findings.iter().any(|f| f.kind.is_fatal())
    }
}
