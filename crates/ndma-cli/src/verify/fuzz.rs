//! `ndma verify --fuzz-descriptors N`: descriptors that try to escape (issue 10 §3).
//!
//! `copy_descriptors` is the security boundary: user-authored descriptor rings reach an engine only through it.
//! Iteration `K` of seed `S` draws, from its own RNG, a TX ring and an RX ring of 1–8 descriptors each —
//! random and adversarial: buffers inside a host chunk of this device, just outside one (crossing its end by a
//! byte, the byte before it, the byte after it), inside another device's host chunk, in host memory outside
//! every pool chunk, in device memory (inside the scratch window, just outside it, past the end of HBM), with
//! a flipped high address bit, or 64 random bits; lengths of 1, of 0 (which encodes 64 KiB), random, or
//! crossing a chunk's end; TX and RX lengths that disagree; wrong phases; and now and then whole random words.
//! Both rings go through `copy_descriptors` (TX then RX type) into ring chunks (host, or device through the
//! bounce buffer). A refused ring must leave its chunk untouched. When both are accepted, the device model is
//! told what the validation accepted — for each descriptor whose address the validation calls host memory,
//! the pool chunk it found it in; for any other address the device's memory, which the contract leaves
//! unchecked — and the rings are run on a queue of an engine the op layer does not use (inline: they execute on the
//! doorbell write). Any engine access outside those windows is an escape; a panic anywhere is a panic. Engine
//! faults (bad phase, lengths that disagree, an address that decodes to no memory) are the engine's own
//! refusals and are counted, not failures.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use ndma::validate::{NEURON_DMA_QUEUE_TYPE_RX, NEURON_DMA_QUEUE_TYPE_TX};
use ndma::{Instance, MemChunk, NdmaError, NeuronDevice};
use ndma_emu::{AccessWindow, EmuDevice, ExecPolicy, HostBuf, Testbed, TestbedConfig, HBM_BASE, HOST_DRAM_BASE};
use rand::RngExt;
use udma::{Barrier, Desc, LenCtrl, M2mQueue, Ring, Udma};

use super::campaign::VERIFY_PID;
use super::exec::panic_message;
use super::record::FindingKind;
use super::rng::{op_rng, OpRng};
use super::summary::{Failure, Tally};
use crate::error::{CliError, CliResult, OpContext};

/// Descriptors per ring at most.
const MAX_DESCS: u64 = 8;
/// Ring size (the smallest the HAL takes).
const RING: u32 = 32;
/// The engine the fuzzed rings run on: not an H2T engine of any NC, so the op layer never touches it.
const FUZZ_ENGINE: u32 = 0;
/// Failures kept in full.
const KEPT: usize = 20;
/// The byte a ring chunk holds before `copy_descriptors` (a refused ring must leave it).
const RING_FILL: u8 = 0x5c;

/// What a fuzz campaign found.
#[derive(Debug, Clone, Default)]
pub struct FuzzTally {
    /// Iterations run.
    pub iterations: u64,
    /// Descriptors written (TX and RX).
    pub descriptors: u64,
    /// Iterations by outcome: `executed`, `engine_fault` (executed until the engine refused a pair), or the
    /// refusal of `copy_descriptors` (`invalid_descriptor_address`, …).
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Copies the engine executed (contiguous pairs merge into one), every one inside the accepted windows.
    pub copies: u64,
    /// Engine accesses outside the accepted windows.
    pub escapes: u64,
    /// Panics caught.
    pub panics: u64,
    /// Refused rings whose chunk was written anyway.
    pub written_despite_refusal: u64,
    /// The first failures: iteration, kind, message.
    pub failures: Vec<(u64, FindingKind, String)>,
}

impl FuzzTally {
    /// Nothing found.
    pub fn passed(&self) -> bool {
        self.escapes == 0 && self.panics == 0 && self.written_despite_refusal == 0
    }

    fn fail(&mut self, k: u64, kind: FindingKind, what: String) {
        if self.failures.len() < KEPT {
            self.failures.push((k, kind, what));
        }
    }

    /// As a campaign tally (escapes, panics, and refused rings written anyway as corrupt data), each failure
    /// with the command that replays its iteration.
    pub fn tally(&self, seed: u64, instance: &str) -> Tally {
        let mut t = Tally { operations: self.iterations, outcomes: self.outcomes.clone(), ..Tally::default() };
        for (kind, n) in [
            (FindingKind::Escape, self.escapes),
            (FindingKind::Panic, self.panics),
            (FindingKind::Corrupt, self.written_despite_refusal),
        ] {
            if n > 0 {
                t.findings.insert(kind, n);
            }
        }
        t.failures = self
            .failures
            .iter()
            .map(|(k, kind, message)| Failure {
                index: Some(*k),
                instance: instance.to_string(),
                kind: *kind,
                message: message.clone(),
                op: Some(format!("descriptor fuzz iteration {k}")),
                replay: Some(format!(
                    "ndma verify --seed {seed} --instance {instance} --fuzz-descriptors 1 --fuzz-from {k}"
                )),
            })
            .collect();
        t
    }
}

/// The memory descriptors aim at, and the queues the rings run on.
struct Bed<'a> {
    dev: &'a NeuronDevice,
    emu: &'a EmuDevice,
    /// Host chunks of this device, of another device (an attached process's: the validation accepts them).
    own: Arc<MemChunk>,
    other: Arc<MemChunk>,
    /// A device-memory scratch chunk; descriptors aim at its middle third.
    scratch: Arc<MemChunk>,
    /// Ring chunks: host (TX, RX) and device (TX, RX).
    rings: [Arc<MemChunk>; 4],
    /// Queue 0 runs the host rings, queue 1 the device rings.
    queues: [M2mQueue<HostBuf>; 2],
    hbm_end: u64,
}

/// One user-authored ring: its descriptors and their bytes.
struct UserRing {
    descs: Vec<Desc>,
    bytes: Vec<u8>,
}

/// Runs `iterations` fuzz iterations of seed `seed` (from iteration `from`) on two devices of `arch`.
///
/// # Errors
///
/// The instance or its queues could not be set up.
pub fn run(
    seed: u64,
    arch: udma::Arch,
    from: u64,
    iterations: u64,
    mut progress: impl FnMut(u64),
) -> CliResult<FuzzTally> {
    let mut cfg = TestbedConfig::new(Instance { name: "fuzz", arch, devices: 2 });
    cfg.exec = ExecPolicy::Inline;
    cfg.seed = seed;
    cfg.hbm_size = Some(64 << 20);
    cfg.host_dram_size = 1 << 30;
    let tb = Testbed::new(cfg)?;
    for d in tb.system.devices() {
        d.attach_process(VERIFY_PID);
    }
    let mut bed = bed(&tb)?;
    let mut t = FuzzTally::default();
    for k in from..from.saturating_add(iterations) {
        t.iterations += 1;
        match catch_unwind(AssertUnwindSafe(|| iteration(&mut bed, seed, k))) {
            Ok(Ok(it)) => {
                t.descriptors += it.descriptors;
                t.copies += it.copies;
                *t.outcomes.entry(it.outcome).or_default() += 1;
                if it.written_despite_refusal {
                    t.written_despite_refusal += 1;
                    t.fail(k, FindingKind::Corrupt, "a refused ring's chunk was written".into());
                }
                for e in &it.escapes {
                    t.fail(k, FindingKind::Escape, e.to_string());
                }
                t.escapes += it.escapes.len() as u64;
            }
            Ok(Err(e)) => return Err(e),
            Err(p) => {
                t.panics += 1;
                t.fail(k, FindingKind::Panic, panic_message(&*p));
                // Whatever the panic left watched or halted is cleared before the next iteration.
                let _ = bed.emu.unwatch_accesses();
                let _ = bed.emu.take_faults();
            }
        }
        if k % 4096 == 0 {
            progress(t.iterations);
        }
    }
    Ok(t)
}

fn bed(tb: &Testbed) -> CliResult<Bed<'_>> {
    let (dev, emu) = tb.device(0);
    let emu: &EmuDevice = emu;
    let (other_dev, _) = tb.device(1);
    let own = dev.alloc_host(64 << 10, 0).op_ctx(|| "allocating the fuzz host chunk")?;
    let other = other_dev.alloc_host(16 << 10, 0).op_ctx(|| "allocating the other device's host chunk")?;
    let scratch = dev.alloc_device(3 << 20, 0).op_ctx(|| "allocating the fuzz device chunk")?;
    let ring_bytes = u64::from(RING) * 16;
    let rings = [
        dev.alloc_host(ring_bytes, 0).op_ctx(|| "allocating a ring chunk")?,
        dev.alloc_host(ring_bytes, 0).op_ctx(|| "allocating a ring chunk")?,
        dev.alloc_device(ring_bytes, 0).op_ctx(|| "allocating a ring chunk")?,
        dev.alloc_device(ring_bytes, 0).op_ctx(|| "allocating a ring chunk")?,
    ];
    let engine =
        Udma::init(emu, dev.dhal().arch(), FUZZ_ENGINE).map_err(|e| CliError::Verify(format!("engine: {e}")))?;
    // The HAL wants ring memory to write descriptors through; these rings are written by `copy_descriptors`
    // into the chunks the queue registers point at, so the HAL's buffers stay unused.
    let spare =
        || emu.host().alloc(ring_bytes as usize, 256).map_err(|e| CliError::Verify(format!("ring memory: {e}")));
    let queue = |qid: u32, tx: &MemChunk, rx: &MemChunk| -> CliResult<M2mQueue<HostBuf>> {
        let tx = Ring { mem: spare()?, dma_addr: dev.mc_to_pa(tx) };
        let rx = Ring { mem: spare()?, dma_addr: dev.mc_to_pa(rx) };
        engine.init_queue(emu, qid, tx, rx, RING).map_err(|e| CliError::Verify(format!("queue {qid}: {e}")))
    };
    let queues = [queue(0, &rings[0], &rings[1])?, queue(1, &rings[2], &rings[3])?];
    let hbm_end = HBM_BASE + emu.hbm().size();
    Ok(Bed { dev, emu, own, other, scratch, rings, queues, hbm_end })
}

/// What one iteration came to.
struct Iteration {
    descriptors: u64,
    copies: u64,
    outcome: &'static str,
    escapes: Vec<ndma_emu::Escape>,
    written_despite_refusal: bool,
}

/// A buffer address for a descriptor of `len` bytes.
fn address(b: &Bed<'_>, rng: &mut OpRng, len: u64) -> u64 {
    let base = b.dev.dhal().pci_host_base();
    let inside = |rng: &mut OpRng, c: &MemChunk| c.pa() + rng.random_range(0..=c.size().saturating_sub(len));
    let third = b.scratch.size() / 3;
    // Mostly buffers the validation accepts (so most rings reach the engine), one in six adversarial.
    match rng.random_range(0..60u32) {
        0..=19 => inside(rng, &b.own),
        20..=29 => inside(rng, &b.other),
        30..=49 => b.scratch.pa() + third + rng.random_range(0..=third.saturating_sub(len)),
        // Just outside: crossing the end by a byte, the byte before, the byte after.
        50 => b.own.pa() + b.own.size() - len + 1,
        51 => b.own.pa() - 1,
        52 => b.own.pa() + b.own.size(),
        53 => b.other.pa() + b.other.size() - len + 1,
        // Host memory outside every pool chunk (or, rarely, inside one: then it is accepted).
        54 => base | (HOST_DRAM_BASE + rng.random_range(0..(1u64 << 30) - len)),
        // Device memory just outside the scratch window (still the device's: passed unchecked), past HBM.
        55 => b.scratch.pa() + third - rng.random_range(1..=len.max(1)),
        56 => b.hbm_end - rng.random_range(0..=len),
        // A host address with one high bit flipped: the arch's host bits or above them.
        57 | 58 => inside(rng, &b.own) ^ (1u64 << rng.random_range(40..64u32)),
        _ => rng.random(),
    }
}

/// A length: 1, 0 (64 KiB), small, random, or near a chunk's size.
fn length(rng: &mut OpRng) -> u64 {
    match rng.random_range(0..10u32) {
        0 => 1,
        1 => 65536,
        2..=4 => rng.random_range(1..=4096),
        5 => 16 << 10,
        _ => rng.random_range(1..=65536),
    }
}

/// The two rings of one iteration.
fn rings(b: &Bed<'_>, rng: &mut OpRng) -> (UserRing, UserRing) {
    let n = rng.random_range(1..=MAX_DESCS) as usize;
    // A ring of ordinary descriptors now and then, so long accepted rings run too.
    let calm = rng.random_bool(0.25);
    let mut tx = Vec::with_capacity(n);
    let mut rx = Vec::with_capacity(n);
    for _ in 0..n {
        let len = length(rng);
        let rx_len = if rng.random_bool(0.05) { length(rng) } else { len };
        let (src, dst) = if calm {
            (b.own.pa() + rng.random_range(0..=b.own.size() - len), b.scratch.pa() + b.scratch.size() / 3)
        } else {
            (address(b, rng, len), address(b, rng, rx_len))
        };
        let phase = |rng: &mut OpRng| if rng.random_bool(0.03) { rng.random_range(0..4u8) } else { 1 };
        let field = |l: u64| (l % 65536) as u16;
        let t = LenCtrl::new().with_len_field(field(len)).with_ring_id(phase(rng)).with_first(true).with_last(true);
        let r = LenCtrl::new().with_len_field(field(rx_len)).with_ring_id(phase(rng));
        let barrier = if rng.random_bool(0.2) { Barrier::WriteBarrier } else { Barrier::None };
        let meta = Desc::m2m_tx(0, 1, 1, barrier).map_or(0, |d| d.word1());
        let mut td = Desc::from_words(t.into_bits(), meta, src);
        let mut rd = Desc::from_words(r.into_bits(), 0, dst);
        if rng.random_bool(0.02) {
            td = Desc::from_words(rng.random(), rng.random(), rng.random());
        }
        if rng.random_bool(0.02) {
            rd = Desc::from_words(rng.random(), rng.random(), rng.random());
        }
        tx.push(td);
        rx.push(rd);
    }
    let bytes = |d: &[Desc]| {
        let mut out = Vec::with_capacity(16 * d.len());
        for x in d {
            out.extend_from_slice(&x.len_ctrl().into_bits().to_le_bytes());
            out.extend_from_slice(&x.word1().to_le_bytes());
            out.extend_from_slice(&x.buf_ptr().to_le_bytes());
        }
        out
    };
    (UserRing { bytes: bytes(&tx), descs: tx }, UserRing { bytes: bytes(&rx), descs: rx })
}

/// The memory the validation allowed a descriptor whose buffer is `addr` to touch: for an address it calls
/// host memory, the whole pool chunk it found the buffer's first byte in (so an engine access that runs past
/// that chunk is an escape even if the validation let it through); for any other address the device's own
/// memory, which the contract leaves unchecked (FACTS §6: only host addresses are looked up).
fn window(b: &Bed<'_>, addr: u64, len: u64) -> AccessWindow {
    // The validation's own classification, not the engine's routing.
    let host = !b.dev.dhal().validate_pa(addr, &|_| false);
    if !host {
        return AccessWindow { addr: HBM_BASE, len: b.hbm_end - HBM_BASE, host: false };
    }
    let chunks = [&b.own, &b.other, &b.rings[0], &b.rings[1]];
    match chunks.into_iter().find(|c| c.pa() <= addr && addr < c.pa() + c.size()) {
        Some(c) => AccessWindow { addr: c.pa(), len: c.size(), host: true },
        // A random host address that happened to land in a chunk the fuzz does not own: its own range.
        None => AccessWindow { addr, len, host: true },
    }
}

fn iteration(b: &mut Bed<'_>, seed: u64, k: u64) -> CliResult<Iteration> {
    let mut rng = op_rng(seed ^ 0xf022_de5c, k);
    let (tx, rx) = rings(b, &mut rng);
    let on_device = rng.random_bool(0.125);
    let (ring_tx, ring_rx, qi) = if on_device { (&b.rings[2], &b.rings[3], 1) } else { (&b.rings[0], &b.rings[1], 0) };
    let n = tx.descs.len() as u64;
    let mut it = Iteration {
        descriptors: 2 * n,
        copies: 0,
        outcome: "executed",
        escapes: Vec::new(),
        written_despite_refusal: false,
    };
    for (side, ring, qtype) in [(&tx, ring_tx, NEURON_DMA_QUEUE_TYPE_TX), (&rx, ring_rx, NEURON_DMA_QUEUE_TYPE_RX)] {
        fill(b, ring)?;
        let r = b.dev.copy_descriptors(&side.bytes, 0, ring, 0, 16 * n, qtype);
        if let Err(e) = r {
            it.outcome = refusal_kind(&e);
            it.written_despite_refusal = !untouched(b, ring)?;
            return Ok(it);
        }
    }
    let mut allowed: Vec<AccessWindow> = Vec::with_capacity(2 * tx.descs.len());
    for (t, r) in tx.descs.iter().zip(&rx.descs) {
        allowed.push(window(b, t.tx().src, u64::from(t.tx().len_ctrl.len_bytes())));
        allowed.push(window(b, r.rx().dst, u64::from(r.rx().len_ctrl.len_bytes())));
    }
    let before = b.emu.engine_stats(FUZZ_ENGINE).unwrap_or_default();
    let q = &mut b.queues[qi];
    // A queue left halted by the previous iteration's fault is reset, and its cursors with it.
    q.reinit(b.emu);
    b.emu.watch_accesses(&allowed);
    let started = q.copy_start(b.emu, n as u32, n as u32);
    it.escapes = b.emu.unwatch_accesses();
    let faults = b.emu.take_faults();
    if let Err(e) = started {
        return Err(CliError::Verify(format!("doorbell: {e}")));
    }
    it.copies = b.emu.engine_stats(FUZZ_ENGINE).unwrap_or_default().since(&before).copies;
    if !faults.is_empty() {
        it.outcome = "engine_fault";
    }
    Ok(it)
}

fn refusal_kind(e: &NdmaError) -> &'static str {
    super::expect::outcome_kind(&Err(e.clone()))
}

fn fill(b: &Bed<'_>, ring: &MemChunk) -> CliResult {
    crate::verify::buffers::write(b.emu, ring, 0, &[RING_FILL; RING as usize * 16])
}

fn untouched(b: &Bed<'_>, ring: &MemChunk) -> CliResult<bool> {
    let mut got = [0u8; RING as usize * 16];
    crate::verify::buffers::read(b.emu, ring, 0, &mut got)?;
    Ok(got.iter().all(|&x| x == RING_FILL))
}
