//! `ndma inspect --state`: the state of every H2T ring of a device ([`ndma::RingState`]) after a scripted
//! scenario — two verified copies on one ring, then an async copy left in flight on it — printed as the op
//! layer's dump and, with `--json`, as [`RingStateJson`] objects (which `ndma faults` reuses for the failures
//! it shows).
//!
//! The engines run deferred: work executes only while a thread waits for it, so the async copy is still
//! pending on the engine when the snapshot is taken (the engine's head short of its tail) — the same
//! snapshot on every run.

use ndma::{ContextState, NeuronDevice, QueueState, RingState, SlotState, Transfer, MAX_BATCH_BYTES};
use ndma_emu::ExecPolicy;
use serde::Serialize;
use udma::Arch;

use super::{rx_flags, tx_flags, words};
use crate::cli::InspectArgs;
use crate::cli::{testbed, BedOpts};
use crate::error::{CliResult, OpContext};
use crate::util::output::Out;
use crate::util::report::Counters;
use ndma_emu::test_utils::{Dir, Window, GUARD};

/// Bytes each copy of the scenario moves when `--size` is not given.
pub const STATE_COPY_BYTES: u64 = 200_000;

/// One queue's registers as read through BAR0 (`regs`).
#[derive(Debug, Clone, Serialize)]
pub struct RegsJson {
    /// `cfg`, raw.
    pub cfg: u32,
    /// Both enable bits set (false: paused).
    pub enabled: bool,
    /// `status`, raw.
    pub status: u32,
    /// `drhp` slot and ring id.
    pub head: u32,
    /// Ring id of `head`.
    pub head_ring_id: u8,
    /// `drtp` slot.
    pub tail: u32,
    /// Ring id of `tail`.
    pub tail_ring_id: u8,
    /// `dcp` slot.
    pub current: u32,
    /// Ring base and length.
    pub ring_base: u64,
    /// Descriptors.
    pub ring_len: u32,
    /// TX: a DMB pauses the queue; absent on RX.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dmb_pauses: Option<bool>,
    /// The direction's engine state (`disable`, `idle`, `normal`, `abort`, or the raw value).
    pub engine_state: String,
}

/// One queue: the software cursors and the registers.
#[derive(Debug, Clone, Serialize)]
pub struct QueueJson {
    /// Ring size.
    pub size: u32,
    /// Producer cursor.
    pub next_desc_idx: u32,
    /// Consumer cursor.
    pub next_cdesc_idx: u32,
    /// Phase of the next descriptor.
    pub ring_id: u8,
    /// Free slots.
    pub available: u32,
    /// The engine's view.
    pub regs: RegsJson,
}

/// One classic context.
#[derive(Debug, Clone, Serialize)]
pub struct ContextJson {
    /// `sync`, `async1`, `async2`.
    pub handle: String,
    /// Holds a transfer.
    pub inuse: bool,
    /// Abandoned: a ring re-initialisation could not re-stage it.
    pub aborted: bool,
    /// Source, destination, size, bytes done, bytes outstanding.
    pub src: u64,
    /// Destination.
    pub dst: u64,
    /// Bytes.
    pub size: u64,
    /// Bytes done.
    pub done: u64,
    /// Bytes of the batch on the ring.
    pub outstanding: u64,
    /// Descriptors of the batch, marker included.
    pub batch_descriptors: u32,
    /// Slots it accounts for.
    pub in_flight: u32,
    /// Its marker is in the poll word.
    pub marker_seen: bool,
}

/// One descriptor of a slot.
#[derive(Debug, Clone, Serialize)]
pub struct DescJson {
    /// Source (TX) or destination (RX) address.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// Phase.
    pub ring_id: u8,
    /// Set flags.
    pub flags: Vec<&'static str>,
    /// Raw words.
    pub words: [u64; 3],
}

/// One slot of the window.
#[derive(Debug, Clone, Serialize)]
pub struct SlotJson {
    /// Ring slot.
    pub slot: u32,
    /// `free`, `done`, `head`, `pending`.
    pub role: String,
    /// TX descriptor.
    pub tx: DescJson,
    /// RX descriptor.
    pub rx: DescJson,
}

/// The zero-copy queue.
#[derive(Debug, Clone, Serialize)]
pub struct ZeroCopyJson {
    /// Contexts queued.
    pub queued: u32,
    /// Submitted.
    pub submitted: u32,
    /// Slots they account for.
    pub slots_in_flight: u32,
    /// Pages pinned.
    pub pinned_pages: u64,
    /// Completions backlogged.
    pub cq_backlog: usize,
}

/// A [`RingState`] as the JSON reports carry it.
#[derive(Debug, Clone, Serialize)]
pub struct RingStateJson {
    /// Device index, NeuronCore, engine, queue.
    pub device: u32,
    /// NeuronCore.
    pub nc: u32,
    /// Engine.
    pub engine: u32,
    /// Queue id.
    pub queue: u32,
    /// TX (M2S) queue.
    pub tx: QueueJson,
    /// RX (S2M) queue.
    pub rx: QueueJson,
    /// SYNC, ASYNC1, ASYNC2.
    pub contexts: Vec<ContextJson>,
    /// The zero-copy queue, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_copy: Option<ZeroCopyJson>,
    /// The ring's counters.
    pub counters: Counters,
    /// The window of slots around the cursors.
    pub descriptors: Vec<SlotJson>,
    /// What the model recorded (absent: nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_diagnostics: Option<String>,
}

fn queue_json(q: &QueueState) -> QueueJson {
    let r = &q.regs;
    let engine_state = r.engine_state.map_or_else(|| format!("{:#x}", r.engine_state_raw), |s| format!("{s:?}"));
    QueueJson {
        size: q.size,
        next_desc_idx: q.next_desc_idx,
        next_cdesc_idx: q.next_cdesc_idx,
        ring_id: q.ring_id,
        available: q.available,
        regs: RegsJson {
            cfg: r.cfg,
            enabled: r.enabled,
            status: r.status,
            head: r.head.slot,
            head_ring_id: r.head.ring_id,
            tail: r.tail.slot,
            tail_ring_id: r.tail.ring_id,
            current: r.current.slot,
            ring_base: r.ring_base,
            ring_len: r.ring_len,
            dmb_pauses: r.dmb_pauses,
            engine_state: engine_state.to_lowercase(),
        },
    }
}

fn context_json(c: &ContextState) -> ContextJson {
    ContextJson {
        handle: format!("{:?}", c.handle).to_lowercase(),
        inuse: c.inuse,
        aborted: c.aborted,
        src: c.src,
        dst: c.dst,
        size: c.size,
        done: c.done,
        outstanding: c.outstanding,
        batch_descriptors: c.batch_descriptors,
        in_flight: c.in_flight,
        marker_seen: c.marker_seen,
    }
}

fn slot_json(s: &SlotState) -> SlotJson {
    let (t, r) = (s.tx.tx(), s.rx.rx());
    SlotJson {
        slot: s.slot,
        role: s.role.to_string().to_lowercase(),
        tx: DescJson {
            addr: t.src,
            len: t.len_ctrl.len_bytes(),
            ring_id: t.len_ctrl.ring_id(),
            flags: tx_flags(&s.tx),
            words: words(&s.tx),
        },
        rx: DescJson {
            addr: r.dst,
            len: r.len_ctrl.len_bytes(),
            ring_id: r.len_ctrl.ring_id(),
            flags: rx_flags(&s.rx),
            words: words(&s.rx),
        },
    }
}

impl From<&RingState> for RingStateJson {
    fn from(s: &RingState) -> Self {
        RingStateJson {
            device: s.device,
            nc: s.nc,
            engine: s.engine,
            queue: s.qid,
            tx: queue_json(&s.tx),
            rx: queue_json(&s.rx),
            contexts: s.contexts.iter().map(context_json).collect(),
            zero_copy: s.zero_copy.map(|z| ZeroCopyJson {
                queued: z.queued,
                submitted: z.submitted,
                slots_in_flight: z.slots_in_flight,
                pinned_pages: z.pinned_pages,
                cq_backlog: z.cq_backlog,
            }),
            counters: Counters::from(&s.counters),
            descriptors: s.descriptors.iter().map(slot_json).collect(),
            device_diagnostics: s.device_diagnostics.clone(),
        }
    }
}

/// The `--state --json` document.
#[derive(Debug, Serialize)]
pub struct InspectStateReport {
    /// `"inspect"`.
    pub command: &'static str,
    /// `"state"`.
    pub mode: &'static str,
    /// Instance preset.
    pub instance: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// The ring the scenario used.
    pub nc: u32,
    /// Bytes per copy.
    pub size: u64,
    /// What ran before the snapshot, in order.
    pub scenario: Vec<String>,
    /// Every H2T ring of the device, by NC.
    pub rings: Vec<RingStateJson>,
}

/// The opposite direction (device-to-device and host-to-host are their own).
fn back(dir: Dir) -> Dir {
    match dir {
        Dir::H2d => Dir::D2h,
        Dir::D2h => Dir::H2d,
        other => other,
    }
}

/// The scenario: a copy in `--dir` and one back (both verified), then an async copy started and left in
/// flight. Returns the steps' descriptions and the snapshots of every ring taken while the async copy is in
/// flight (it is then waited for and verified).
fn scenario(
    dev: &NeuronDevice,
    emu: &ndma_emu::EmuDevice,
    a: &InspectArgs,
) -> CliResult<(Vec<String>, Vec<RingState>)> {
    let (size, nc) = (a.size_bytes(), a.nc);
    let mut steps = Vec::new();
    for (i, dir) in [a.dir, back(a.dir)].into_iter().enumerate() {
        let w = Window::new(dev, emu, dir, size, nc, 0x57a7 + i as u64)?;
        w.copy(0, size).op_ctx(|| format!("{} copy of {size} bytes", dir.name()))?;
        w.verify("inspect --state", true)?;
        steps.push(format!("{} copy of {size} bytes, verified", dir.name()));
    }
    let async_size = size.min(MAX_BATCH_BYTES);
    let w = Window::new(dev, emu, a.dir, async_size, nc, 0x57a9)?;
    let t = Transfer::new(&w.src, &w.dst, async_size).src_offset(GUARD).dst_offset(GUARD);
    let in_flight = dev.start(&t).op_ctx(|| "starting the async copy")?;
    steps.push(format!("{} async copy of {async_size} bytes started, in flight at the snapshot", a.dir.name()));
    let states = (0..dev.dhal().ncs_per_device()).filter_map(|n| dev.ring_state(n).ok()).collect::<Vec<_>>();
    in_flight.wait().op_ctx(|| "waiting for the async copy")?;
    w.verify("inspect --state async copy", false)?;
    Ok((steps, states))
}

/// Prints a ring: the whole dump for a ring that ran something, one line for an untouched one.
fn print_ring(out: Out, s: &RingState) {
    if s.counters.submitted == 0 && s.device_diagnostics.is_none() {
        let r = &s.tx.regs;
        out.say(format_args!(
            "H2T ring of device {} NC {}: engine {} queue {}: never used (head {}, tail {}, {})",
            s.device,
            s.nc,
            s.engine,
            s.qid,
            r.head,
            r.tail,
            if r.enabled { "enabled" } else { "PAUSED" }
        ));
    } else {
        out.text(&format!("{s}\n\n"));
    }
}

/// Runs `ndma inspect --state`.
///
/// # Errors
///
/// Set-up, copy and verification failures, and failure to write the JSON.
pub fn run(opts: BedOpts, a: &InspectArgs) -> CliResult {
    let tb = testbed(opts, ExecPolicy::Deferred)?;
    let (dev, emu) = tb.device(0);
    dev.h2t_queue(a.nc).op_ctx(|| "choosing the H2T ring")?;
    let arch: Arch = dev.dhal().arch();
    let (scenario, states) = scenario(dev, emu, a)?;
    let out = a.json.out();
    out.say(format_args!("{} ({arch}), deferred engines; scenario on NC {}'s ring:", opts.instance.name, a.nc));
    for s in &scenario {
        out.say(format_args!("  {s}"));
    }
    out.say("");
    for s in &states {
        print_ring(out, s);
    }
    let report = InspectStateReport {
        command: "inspect",
        mode: "state",
        instance: opts.instance.name.into(),
        arch: arch.to_string(),
        nc: a.nc,
        size: a.size_bytes(),
        scenario,
        rings: states.iter().map(RingStateJson::from).collect(),
    };
    out.wrote(a.json.write(&report)?);
    Ok(())
}
