//! `ndma inspect`: run one real `memcpy_mc` on an inline engine and print the descriptor pairs the op layer
//! wrote into the NC's H2T ring — data pairs (≤ 64 KiB each, the last of a batch with the DHAL's write
//! barrier) and the 4-byte marker self-copy that ends every batch.
//!
//! Three steps: `copy_once` (the verified copy and what the ring holds after it), [`decode_pair`] (each slot
//! read back: phase, flags, addresses, role), then the report (printed and/or JSON).
//!
//! `--zerocopy` shows one zero-copy piece instead ([`zc`]); `--state` the state of every H2T ring after a
//! scripted scenario ([`state`]).

pub mod state;
pub mod zc;

use ndma::{MemChunk, NeuronDevice, DMA_COMPLETION_MARKER};
use ndma_emu::{EmuDevice, ExecPolicy};
use serde::Serialize;
use udma::{Arch, Desc};

use crate::cli::InspectArgs;
use crate::cli::{testbed, BedOpts};
use crate::error::{CliResult, OpContext};
use crate::util::output::Out;
use crate::util::report::Counters;
use crate::util::size::fmt_size;
use crate::util::table::Table;
use ndma_emu::test_utils::{Window, GUARD};

/// The `--json` schema, shown by `ndma inspect --help` (the README has the same).
pub const JSON_SCHEMA: &str = "\
JSON (--json FILE, or --json - for stdout instead of the report): one object
  command          \"inspect\"
  instance         instance preset, e.g. \"trn1.2xlarge\"
  arch             \"v2\" or \"v3\"
  dir              \"h2d\", \"d2h\", \"d2d\" or \"h2h\"
  nc               NeuronCore whose H2T ring was used
  size             bytes copied
  engine, queue    the H2T ring: engine index and queue id
  src_pa, dst_pa   physical addresses of the source and destination chunks (the copy starts GUARD bytes in)
  guard_bytes      GUARD
  verified         true: destination, guards and source checked byte for byte
  counters         the ring's counters: transfers, bytes, descriptors, batches, doorbells, polls, wait_us,
                   timeouts, retries, replays, ring_resets
  pairs            one object per ring slot written, in order:
    index            slot
    phase_tx         TX descriptor's ring id (phase)
    phase_rx         RX descriptor's ring id
    tx_flags         set TX flags among FIRST, LAST, DMB, WRITE_BARRIER, INT
    rx_flags         set RX flags among SOW, INT
    len              bytes moved by the pair
    src, dst         addresses; src_mem, dst_mem: \"host\" or \"hbm\"
    kind             \"data\", \"data_last\" (last data pair of a batch) or \"marker\"
    tx_words         [len_ctrl, meta_ctrl, buf_ptr] raw
    rx_words         [len_ctrl, buf2_ptr_lo, buf_ptr] raw
  data_pairs, marker_pairs   counts
  write_barriers_ok          the last data pair of every batch carries WRITE_BARRIER

With --zerocopy, written when the read-back matched the plan, the bytes and the leak check:
  command          \"inspect\"
  mode             \"zerocopy\"
  dir              \"h2d\" or \"d2h\"
  nc, size         NeuronCore; bytes in the piece
  offset           page offset of the piece's first byte
  layout           \"contiguous\", \"scattered\" or \"runs:K\"
  archs            one object per arch shown (v2 then v3, or the --instance given):
    instance, arch   the preset and \"v2\"/\"v3\"
    override         true when zerocopy_trn1_override was turned on (V2)
    engine, queue    the H2T ring
    user_va          user address of the piece's first byte; device_pa: its device address
    frames           physical addresses of the frames pinned, in page order
    runs             runs of physically consecutive frames: index, first_frame, frames (count), start (the
                     device address of its first byte), bytes, descriptors (ring slots of its data descriptors)
    descriptors      the pairs read back from the ring, data then the marker: index, kind (\"data\"/\"marker\"),
                     len, src, src_mem, dst, dst_mem, barrier (\"none\", \"write_barrier\", \"sow\", \"dmb\"),
                     tx_flags, rx_flags, run (data only), tx_words, rx_words
    marker_barrier   the marker's barrier
    plan_matches     the read-back is exactly plan_descriptors' plan; verified: bytes checked
    counters         the ring's counters (fields above)
    leak_check       pinned_frames, pins, orphaned_frames, bad_unpins, pinned_ranges, contexts,
                     queue_pinned_pages, backlog, ring_slots_used, ring_slots_accounted, clean

With --state (deferred engines: an async copy is still pending on the engine at the snapshot):
  command          \"inspect\"
  mode             \"state\"
  instance, arch   the preset and \"v2\"/\"v3\"
  nc, size         the ring the scenario used; bytes per copy (--size, default 200000)
  scenario         what ran before the snapshot, in order (strings)
  rings            one ring state per NeuronCore of the device (ndma faults carries the same objects):
    device, nc, engine, queue   where the ring is
    tx, rx           each queue: size, next_desc_idx (producer), next_cdesc_idx (consumer), ring_id (phase of
                     the next descriptor), available (free slots), regs (read through BAR0: cfg, enabled
                     (false: paused), status, head, head_ring_id, tail, tail_ring_id, current, ring_base,
                     ring_len, dmb_pauses (TX), engine_state)
    contexts         SYNC, ASYNC1, ASYNC2: handle, inuse, aborted, src, dst, size, done, outstanding,
                     batch_descriptors, in_flight, marker_seen
    zero_copy        when the ring has a zero-copy queue: queued, submitted, slots_in_flight, pinned_pages,
                     cq_backlog
    counters         the ring's counters (fields above)
    descriptors      up to 8 slots around the cursors: slot, role (\"free\", \"done\", \"head\", \"pending\"),
                     tx and rx (addr, len, ring_id, flags, words)
    device_diagnostics   what the device model recorded about the queue (absent: nothing)";

impl InspectArgs {
    /// `--size`, or [`state::STATE_COPY_BYTES`] where it may be left out (`--state`).
    pub fn size_bytes(&self) -> u64 {
        self.size.unwrap_or(state::STATE_COPY_BYTES)
    }
}

/// What one slot of the ring holds, read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairKind {
    /// A data pair followed by another data pair.
    Data,
    /// The last data pair before a marker: the batch's last, which must carry the write barrier.
    DataLast,
    /// The completion marker: a 4-byte copy from a word to the word after it.
    Marker,
}

/// One decoded descriptor pair.
#[derive(Debug, Clone, Serialize)]
pub struct Pair {
    /// Ring slot.
    pub index: usize,
    /// TX ring id (phase).
    pub phase_tx: u8,
    /// RX ring id (phase).
    pub phase_rx: u8,
    /// Set TX flags.
    pub tx_flags: Vec<&'static str>,
    /// Set RX flags.
    pub rx_flags: Vec<&'static str>,
    /// Bytes moved.
    pub len: u32,
    /// Source address.
    pub src: u64,
    /// `host` or `hbm`.
    pub src_mem: &'static str,
    /// Destination address.
    pub dst: u64,
    /// `host` or `hbm`.
    pub dst_mem: &'static str,
    /// Role in the batch.
    pub kind: PairKind,
    /// TX raw words.
    pub tx_words: [u64; 3],
    /// RX raw words.
    pub rx_words: [u64; 3],
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct InspectReport {
    /// `"inspect"`.
    pub command: &'static str,
    /// Instance preset.
    pub instance: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// Direction.
    pub dir: &'static str,
    /// NeuronCore.
    pub nc: u32,
    /// Bytes copied.
    pub size: u64,
    /// H2T engine.
    pub engine: u32,
    /// H2T queue.
    pub queue: u32,
    /// Source chunk's physical address.
    pub src_pa: u64,
    /// Destination chunk's physical address.
    pub dst_pa: u64,
    /// Guard bytes before the copy's window.
    pub guard_bytes: u64,
    /// Always true in a written report.
    pub verified: bool,
    /// Ring counters after the copy.
    pub counters: Counters,
    /// The ring's slots.
    pub pairs: Vec<Pair>,
    /// Data pairs.
    pub data_pairs: usize,
    /// Marker pairs.
    pub marker_pairs: usize,
    /// Every batch's last data pair carries WRITE_BARRIER.
    pub write_barriers_ok: bool,
}

/// Is this pair the completion marker: a 4-byte copy from a word to the word after it?
pub fn is_marker(tx: &Desc, rx: &Desc) -> bool {
    tx.len_ctrl().len_bytes() == 4 && rx.buf_ptr() == tx.buf_ptr().wrapping_add(4)
}

fn tx_flags(d: &Desc) -> Vec<&'static str> {
    let (l, m) = (d.len_ctrl(), d.tx().meta_ctrl);
    set(&[
        (l.first(), "FIRST"),
        (l.last(), "LAST"),
        (l.dmb(), "DMB"),
        (m.write_barrier(), "WRITE_BARRIER"),
        (l.int_en(), "INT"),
    ])
}

fn rx_flags(d: &Desc) -> Vec<&'static str> {
    let l = d.len_ctrl();
    set(&[(l.sow(), "SOW"), (l.int_en(), "INT")])
}

fn set(flags: &[(bool, &'static str)]) -> Vec<&'static str> {
    flags.iter().filter(|f| f.0).map(|f| f.1).collect()
}

fn mem(arch: Arch, a: u64) -> &'static str {
    if arch.is_host_addr(a) {
        "host"
    } else {
        "hbm"
    }
}

fn words(d: &Desc) -> [u64; 3] {
    [u64::from(d.len_ctrl().into_bits()), u64::from(d.word1()), d.buf_ptr()]
}

/// The copy `ndma inspect` runs and what it left behind.
struct Copied<'a> {
    window: Window<'a>,
    engine: u32,
    queue: u32,
    counters: Counters,
    ring: Vec<(Desc, Desc)>,
}

/// Step 1: one verified `memcpy_mc` of `--size` bytes, then the ring's counters and slots.
fn copy_once<'a>(dev: &'a NeuronDevice, emu: &'a EmuDevice, a: &InspectArgs) -> CliResult<Copied<'a>> {
    let (engine, queue) = dev.h2t_queue(a.nc).op_ctx(|| "choosing the H2T ring")?;
    let window = Window::new(dev, emu, a.dir, a.size_bytes(), a.nc, 0x1d5)?;
    window.copy(0, a.size_bytes()).op_ctx(|| format!("{} copy of {} bytes", a.dir.name(), a.size_bytes()))?;
    window.verify("inspect", true)?;
    let counters = Counters::from(&dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?);
    let ring = dev.ring_descriptors(a.nc).op_ctx(|| "reading the H2T ring")?;
    Ok(Copied { window, engine, queue, counters, ring })
}

/// Step 2: slot `index` of `ring` read back.
pub fn decode_pair(arch: Arch, ring: &[(Desc, Desc)], index: usize) -> Option<Pair> {
    let (tx, rx) = ring.get(index)?;
    let kind = if is_marker(tx, rx) {
        PairKind::Marker
    } else if ring.get(index + 1).is_some_and(|(t, r)| is_marker(t, r)) {
        PairKind::DataLast
    } else {
        PairKind::Data
    };
    Some(Pair {
        index,
        phase_tx: tx.len_ctrl().ring_id(),
        phase_rx: rx.len_ctrl().ring_id(),
        tx_flags: tx_flags(tx),
        rx_flags: rx_flags(rx),
        len: tx.len_ctrl().len_bytes(),
        src: tx.buf_ptr(),
        src_mem: mem(arch, tx.buf_ptr()),
        dst: rx.buf_ptr(),
        dst_mem: mem(arch, rx.buf_ptr()),
        kind,
        tx_words: words(tx),
        rx_words: words(rx),
    })
}

impl InspectReport {
    /// The report of `copied`: every slot decoded, and the batch-level checks.
    fn new(opts: BedOpts, a: &InspectArgs, arch: Arch, copied: &Copied<'_>, pa: (u64, u64)) -> Self {
        let pairs: Vec<Pair> = (0..copied.ring.len()).filter_map(|i| decode_pair(arch, &copied.ring, i)).collect();
        let count = |k: PairKind| pairs.iter().filter(|p| p.kind == k).count();
        let write_barriers_ok =
            pairs.iter().filter(|p| p.kind == PairKind::DataLast).all(|p| p.tx_flags.contains(&"WRITE_BARRIER"));
        InspectReport {
            command: "inspect",
            instance: opts.instance.name.into(),
            arch: arch.to_string(),
            dir: a.dir.name(),
            nc: a.nc,
            size: a.size_bytes(),
            engine: copied.engine,
            queue: copied.queue,
            src_pa: pa.0,
            dst_pa: pa.1,
            guard_bytes: GUARD,
            verified: true,
            counters: copied.counters,
            data_pairs: count(PairKind::Data) + count(PairKind::DataLast),
            marker_pairs: count(PairKind::Marker),
            write_barriers_ok,
            pairs,
        }
    }
}

/// Step 3: the human report — what ran, then one table row per slot, then the batch-level check.
fn print_report(out: Out, r: &InspectReport, long_dir: &str, raw: bool) {
    out.say(format_args!(
        "{long_dir} copy of {} bytes ({}) on {} ({}), NC {}: H2T ring = engine {} queue {}, inline engine",
        r.size,
        fmt_size(r.size),
        r.instance,
        r.arch,
        r.nc,
        r.engine,
        r.queue
    ));
    let c = &r.counters;
    out.say(format_args!(
        "memcpy_mc(src {:#x} + {GUARD:#x}, dst {:#x} + {GUARD:#x}, {} bytes): {} batch(es), {} descriptor pairs, {} \
         doorbells, {} polls — destination verified byte-exact",
        r.src_pa, r.dst_pa, r.size, c.batches, c.descriptors, c.doorbells, c.polls
    ));
    if r.pairs.is_empty() {
        out.say("no descriptors staged (a 0-byte copy moves nothing)");
        return;
    }
    out.say(format_args!("ring slots [0, {}):", r.pairs.len()));
    out.text(&pair_table(&r.pairs, raw).render());
    out.say(format_args!(
        "{} data pairs + {} marker pair(s); last data descriptor of every batch carries WRITE_BARRIER: {}",
        r.data_pairs,
        r.marker_pairs,
        if r.write_barriers_ok { "yes" } else { "NO" }
    ));
}

/// The slots as a table.
fn pair_table(pairs: &[Pair], raw: bool) -> Table {
    let mut cols = vec![">idx", ">phase", "TX flags", "RX flags", ">len", "src", "dst", "pair"];
    if raw {
        cols.extend(["TX words (len_ctrl, meta_ctrl, src)", "RX words (len_ctrl, buf2_ptr_lo, dst)"]);
    }
    let mut t = Table::new(&cols);
    let flags = |f: &[&str]| if f.is_empty() { "-".to_string() } else { f.join("|") };
    let raw_words = |w: &[u64; 3]| format!("Desc({:#010x}, {:#010x}, {:#018x})", w[0], w[1], w[2]);
    for p in pairs {
        let phase =
            if p.phase_tx == p.phase_rx { p.phase_tx.to_string() } else { format!("{}/{}", p.phase_tx, p.phase_rx) };
        let kind = match p.kind {
            PairKind::Marker => format!("marker: completion+0 → +4 (writes {DMA_COMPLETION_MARKER:#x})"),
            PairKind::DataLast => "data, last of batch".into(),
            PairKind::Data => "data".into(),
        };
        let mut cells = vec![
            p.index.to_string(),
            phase,
            flags(&p.tx_flags),
            flags(&p.rx_flags),
            p.len.to_string(),
            format!("{:#x} {}", p.src, p.src_mem),
            format!("{:#x} {}", p.dst, p.dst_mem),
            kind,
        ];
        if raw {
            cells.extend([raw_words(&p.tx_words), raw_words(&p.rx_words)]);
        }
        t.row(cells);
    }
    t
}

/// The chunks' physical addresses.
fn chunk_pas(dev: &NeuronDevice, src: &MemChunk, dst: &MemChunk) -> (u64, u64) {
    (dev.mc_to_pa(src), dev.mc_to_pa(dst))
}

/// Runs `ndma inspect`: `copy_once`, decode every slot, report; or, with `--zerocopy`, [`zc::run`]
/// (`instance_given`: `--instance` was on the command line).
///
/// # Errors
///
/// Set-up, copy and verification failures, and failure to write the JSON.
pub fn run(opts: BedOpts, a: &InspectArgs, instance_given: bool) -> CliResult {
    if a.zerocopy {
        return zc::run(opts, a, instance_given);
    }
    if a.state {
        return state::run(opts, a);
    }
    let tb = testbed(opts, ExecPolicy::Inline)?;
    let (dev, emu) = tb.device(0);
    let copied = copy_once(dev, emu, a)?;
    let pa = chunk_pas(dev, &copied.window.src, &copied.window.dst);
    let report = InspectReport::new(opts, a, dev.dhal().arch(), &copied, pa);
    let out = a.json.out();
    print_report(out, &report, a.dir.long_name(), a.raw);
    out.wrote(a.json.write(&report)?);
    Ok(())
}
