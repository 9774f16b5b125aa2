//! Fuzz target `copy_descriptors`: user-authored descriptor rings through the validation gate
//! ([`NeuronDevice::copy_descriptors`], spec §6) and then through an engine of the device model.
//!
//! An input is a list of TX/RX descriptor pairs, each buffer aimed at memory the caller owns (a host chunk of
//! this device or of another attached device, a host ring chunk), just outside it, at device memory, at host
//! DRAM nobody allocated, at a flipped-bit alias, or anywhere; lengths, phases, flag bits and word 1 are
//! free. Either the two rings are copied whole into ring chunks (host, or device through the bounce buffer)
//! and, when both are accepted, run on a queue of an engine the op layer does not use, or one ring is copied
//! with free framing (queue type, source and destination offsets, size, destination chunk).
//!
//! Invariants:
//! - the outcome is exactly the one the contract calls for, computed by an independent model: the first
//!   refusal in the documented order (queue type, partial descriptor, source window, destination window,
//!   foreign destination, the first descriptor whose host address lies in no caller's chunk), else `Ok`;
//! - a refused copy leaves the destination chunk byte-identical; an accepted one writes exactly the window;
//! - when the accepted rings run, every engine access lies inside memory the caller owns: one of the
//!   caller's host chunks, or device memory, which the contract leaves unchecked (FACTS §6). The device
//!   model's access watch ([`EmuDevice::watch_accesses`]) sees the addresses the engine really decodes.
//!   Engine faults (phase, length mismatch, an address that decodes to no memory) are the engine's own
//!   refusals, not failures.

use std::cell::RefCell;
use std::sync::Arc;

use arbitrary::Arbitrary;
use ndma::validate::{NEURON_DMA_QUEUE_TYPE_RX, NEURON_DMA_QUEUE_TYPE_TX};
use ndma::{Instance, MemChunk, NdmaError, NeuronDevice};
use udma::{Arch, Desc, M2mQueue, Ring, Udma};
use zerocopy::IntoBytes;

use crate::test_utils::{read_vec, write_chunk};
use crate::{AccessWindow, EmuDevice, ExecPolicy, HostBuf, Testbed, TestbedConfig, HBM_BASE, HOST_DRAM_BASE};

/// Descriptors per ring at most (the ring holds [`RING`]).
pub const MAX_PAIRS: usize = 16;
/// Ring size in descriptors (the smallest the HAL takes).
const RING: u32 = 32;
/// Bytes of a ring chunk.
const RING_BYTES: u64 = RING as u64 * 16;
/// The engine the rings run on: not an H2T engine of any NC, so the op layer never touches it.
const FUZZ_ENGINE: u32 = 0;
/// What a ring chunk holds before each copy.
const RING_FILL: u8 = 0x5c;
/// Bytes of the caller's main host chunk.
const OWN_BYTES: u64 = 64 << 10;
/// Bytes of the other device's host chunk.
const OTHER_BYTES: u64 = 16 << 10;
/// Bytes of the device scratch chunk.
const SCRATCH_BYTES: u64 = 1 << 20;

/// One input.
#[derive(Debug, Clone, Arbitrary)]
pub struct DescriptorsInput {
    /// V3 rather than V2.
    pub v3: bool,
    /// Run mode: the rings sit in device chunks (copied through the bounce buffer) rather than host chunks.
    pub on_device: bool,
    /// Bytes written at the start of the caller's host chunk before the run (what a TX descriptor can read).
    pub payload: Vec<u8>,
    /// The descriptor pairs (at most [`MAX_PAIRS`] are used).
    pub pairs: Vec<PairInput>,
    /// `None`: copy both rings whole and run them; `Some`: one free-framed copy, not run.
    pub framing: Option<Framing>,
}

/// A TX/RX pair.
#[derive(Debug, Clone, Arbitrary)]
pub struct PairInput {
    /// The TX (M2S) half: its buffer is the source.
    pub tx: DescInput,
    /// The RX (S2M) half: its buffer is the destination.
    pub rx: DescInput,
    /// The RX half takes the TX half's length field (most rings an engine accepts).
    pub same_len: bool,
}

/// One descriptor.
#[derive(Debug, Clone, Arbitrary)]
pub struct DescInput {
    /// Its buffer.
    pub at: Target,
    /// The 16-bit length field (0 is 64 KiB).
    pub len: u16,
    /// Ring id; `None` is 1, the phase of a freshly initialised ring.
    pub ring_id: Option<u8>,
    /// Bits 31:23 of `len_ctrl` besides the ring id; `None`: FIRST|LAST on TX, nothing on RX.
    pub flags: Option<u16>,
    /// Word 1; `None`: the default `meta_ctrl` on TX, 0 on RX.
    pub word1: Option<u32>,
}

/// Where a descriptor's buffer is.
#[derive(Debug, Clone, Arbitrary)]
pub enum Target {
    /// Inside the caller's host chunk (offset modulo its size).
    Own(u16),
    /// `back` bytes before the end of the caller's host chunk (may cross it).
    OwnEnd(u8),
    /// Inside a host chunk of another (attached) device.
    Other(u16),
    /// `back` bytes before that chunk's end.
    OtherEnd(u8),
    /// Slot `slot` of ring chunk `ring` (host TX, host RX, device TX, device RX; modulo 4).
    Ring {
        /// Which ring chunk.
        ring: u8,
        /// Which 16-byte slot (modulo twice the ring).
        slot: u8,
    },
    /// Inside the device scratch chunk.
    Scratch(u32),
    /// `back` bytes before the end of HBM.
    HbmEnd(u16),
    /// Host DRAM at this offset, whether or not anyone allocated it.
    HostDram(u32),
    /// An address inside the caller's host chunk with bit `bit` (modulo 64) flipped.
    FlipBit {
        /// Offset in the chunk.
        off: u16,
        /// Which bit.
        bit: u8,
    },
    /// Any 64-bit address.
    Raw(u64),
}

/// A free-framed copy of one ring.
#[derive(Debug, Clone, Arbitrary)]
pub struct Framing {
    /// The queue type argument.
    pub queue_type: QueueType,
    /// The ring copied: the pairs' RX halves rather than their TX halves.
    pub rx_halves: bool,
    /// Junk bytes before the descriptors in the buffer (modulo 32).
    pub prefix: u8,
    /// The source offset argument (modulo 64).
    pub src_off: u8,
    /// The destination chunk.
    pub dst: Dest,
    /// The destination offset argument (modulo 1024).
    pub dst_off: u16,
    /// Added to the descriptors' byte count to make the size argument (clamped at 0).
    pub size_delta: i16,
}

/// A queue type argument.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum QueueType {
    /// `NEURON_DMA_QUEUE_TYPE_TX`.
    Tx,
    /// `NEURON_DMA_QUEUE_TYPE_RX`.
    Rx,
    /// Any value.
    Raw(u32),
}

/// A destination chunk.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Dest {
    /// A host ring chunk of the caller (index 0 or 1).
    Host(bool),
    /// A device ring chunk of this device (index 2 or 3).
    Device(bool),
    /// A device chunk of the other device: refused as foreign.
    Foreign,
}

/// The device, its memory and the queues the rings run on, built once per arch and thread.
struct Bed {
    arch: Arch,
    dev: Arc<NeuronDevice>,
    emu: Arc<EmuDevice>,
    /// The other device's model (reads its chunk back).
    other_emu: Arc<EmuDevice>,
    own: Arc<MemChunk>,
    other: Arc<MemChunk>,
    scratch: Arc<MemChunk>,
    /// Host TX, host RX, device TX, device RX.
    rings: [Arc<MemChunk>; 4],
    /// A device chunk of the other device.
    foreign: Arc<MemChunk>,
    /// Queue 0 runs the host rings, queue 1 the device rings.
    queues: [M2mQueue<HostBuf>; 2],
    hbm_end: u64,
    /// Last: everything above lives in it.
    _tb: Testbed,
}

impl Bed {
    fn new(arch: Arch) -> Bed {
        let mut cfg = TestbedConfig::new(Instance { name: "fuzz", arch, devices: 2 });
        cfg.exec = ExecPolicy::Inline;
        cfg.hbm_size = Some(64 << 20);
        cfg.host_dram_size = 256 << 20;
        let tb = Testbed::new(cfg).expect("fuzz test bed");
        for d in tb.system.devices() {
            d.attach_process(4242);
        }
        let ((dev, emu), (dev1, emu1)) = (tb.device(0), tb.device(1));
        let (dev, emu, other_emu) = (Arc::clone(dev), Arc::clone(emu), Arc::clone(emu1));
        let host = |d: &NeuronDevice, n| d.alloc_host(n, 0).expect("host chunk");
        let device = |d: &NeuronDevice, n| d.alloc_device(n, 0).expect("device chunk");
        let own = host(&dev, OWN_BYTES);
        let other = host(dev1, OTHER_BYTES);
        let scratch = device(&dev, SCRATCH_BYTES);
        let rings =
            [host(&dev, RING_BYTES), host(&dev, RING_BYTES), device(&dev, RING_BYTES), device(&dev, RING_BYTES)];
        let foreign = device(dev1, RING_BYTES);
        let engine = Udma::init(&*emu, arch, FUZZ_ENGINE).expect("fuzz engine");
        // The HAL wants ring memory to write descriptors through; these rings are written by `copy_descriptors`
        // into the chunks the queue registers point at, so the HAL's own buffers stay unused.
        let queue = |qid: u32, tx: &MemChunk, rx: &MemChunk| {
            let spare = || emu.host().alloc(RING_BYTES as usize, 256).expect("spare ring memory");
            let tx = Ring { mem: spare(), dma_addr: dev.mc_to_pa(tx) };
            let rx = Ring { mem: spare(), dma_addr: dev.mc_to_pa(rx) };
            engine.init_queue(&*emu, qid, tx, rx, RING).expect("fuzz queue")
        };
        let queues = [queue(0, &rings[0], &rings[1]), queue(1, &rings[2], &rings[3])];
        let hbm_end = HBM_BASE + emu.hbm().size();
        Bed { arch, dev, emu, other_emu, own, other, scratch, rings, foreign, queues, hbm_end, _tb: tb }
    }

    /// The caller's host chunks: what a host address in an accepted descriptor must lie in.
    fn owned(&self) -> [&MemChunk; 4] {
        [&self.own, &self.other, &self.rings[0], &self.rings[1]]
    }

    fn address(&self, t: &Target) -> u64 {
        let pa = |c: &MemChunk| self.dev.mc_to_pa(c);
        match *t {
            Target::Own(off) => pa(&self.own) + u64::from(off) % OWN_BYTES,
            Target::OwnEnd(back) => pa(&self.own) + OWN_BYTES - u64::from(back),
            Target::Other(off) => pa(&self.other) + u64::from(off) % OTHER_BYTES,
            Target::OtherEnd(back) => pa(&self.other) + OTHER_BYTES - u64::from(back),
            Target::Ring { ring, slot } => {
                pa(&self.rings[usize::from(ring % 4)]) + u64::from(slot) % (2 * u64::from(RING)) * 16
            }
            Target::Scratch(off) => pa(&self.scratch) + u64::from(off) % SCRATCH_BYTES,
            Target::HbmEnd(back) => self.hbm_end.wrapping_sub(u64::from(back)),
            Target::HostDram(off) => self.arch.pci_host_base() | (HOST_DRAM_BASE + u64::from(off)),
            Target::FlipBit { off, bit } => (pa(&self.own) + u64::from(off) % OWN_BYTES) ^ (1u64 << (bit % 64)),
            Target::Raw(a) => a,
        }
    }

    fn desc(&self, d: &DescInput, len: u16, tx: bool) -> Desc {
        let ring_id = u32::from(d.ring_id.unwrap_or(1) & 3) << 24;
        let flags = match d.flags {
            Some(f) => (u32::from(f) << 23) & !(3 << 24),
            None if tx => 3 << 26,
            None => 0,
        };
        let word1 = d.word1.unwrap_or(if tx { udma::desc::META_CTRL_DEFAULT } else { 0 });
        Desc::from_words(u32::from(len) | ring_id | flags, word1, self.address(&d.at))
    }

    fn chunk_bytes(&self, c: &MemChunk, foreign: bool) -> Vec<u8> {
        let emu = if foreign { &self.other_emu } else { &self.emu };
        read_vec(emu, c, 0, c.size()).expect("reading a ring chunk back")
    }

    fn fill(&self, c: &MemChunk, foreign: bool) {
        let emu = if foreign { &self.other_emu } else { &self.emu };
        write_chunk(emu, c, 0, &vec![RING_FILL; c.size() as usize]).expect("filling a ring chunk");
    }
}

thread_local! {
    static BEDS: RefCell<[Option<Bed>; 2]> = const { RefCell::new([None, None]) };
}

/// FACTS §4 (`ndma_validate_pa`): does the validation treat `addr` as a host address?
fn model_is_host(arch: Arch, addr: u64) -> bool {
    match arch {
        Arch::V2 => addr & (0x1f << 44) == 1 << 44,
        Arch::V3 => addr & (1 << 46) != 0,
    }
}

/// The outcome the contract calls for (see the module documentation).
/// One `copy_descriptors` call: its arguments, and whether the destination is the other device's chunk.
#[derive(Clone, Copy)]
struct Call<'a> {
    buf: &'a [u8],
    src_off: u64,
    dst: &'a MemChunk,
    foreign: bool,
    dst_off: u64,
    size: u64,
    queue_type: u32,
}

fn model_outcome(b: &Bed, call: &Call<'_>) -> Result<(), NdmaError> {
    let Call { buf, src_off, dst, foreign, dst_off, size, queue_type } = *call;
    if queue_type > 1 {
        return Err(NdmaError::InvalidQueueType(queue_type));
    }
    if size % 16 != 0 {
        return Err(NdmaError::PartialDescriptor(size));
    }
    let limit = buf.len() as u64;
    if src_off.checked_add(size).is_none_or(|end| end > limit) {
        return Err(NdmaError::OutOfRange { what: "descriptor buffer", offset: src_off, size, limit });
    }
    if dst_off.checked_add(size).is_none_or(|end| end > dst.size()) {
        return Err(NdmaError::OutOfRange { what: "descriptor destination", offset: dst_off, size, limit: dst.size() });
    }
    if foreign {
        return Err(NdmaError::ForeignChunk { what: "descriptor destination" });
    }
    let window = &buf[src_off as usize..(src_off + size) as usize];
    for (index, d) in window.chunks_exact(16).enumerate() {
        let w0 = u32::from_le_bytes(d[0..4].try_into().expect("4 bytes"));
        let pa = u64::from_le_bytes(d[8..16].try_into().expect("8 bytes"));
        let len = match u64::from(w0 & 0xffff) {
            0 => 65536,
            n => n,
        };
        let owned = b.owned().iter().any(|c| {
            let start = b.dev.mc_to_pa(c);
            pa >= start && pa.checked_add(len).is_some_and(|end| end <= start + c.size())
        });
        if model_is_host(b.arch, pa) && !owned {
            return Err(NdmaError::InvalidDescriptorAddress { index, pa });
        }
    }
    Ok(())
}

/// Copies `buf` and checks the outcome and the destination chunk; returns whether it was accepted.
fn copy_and_check(b: &Bed, call: Call<'_>) -> bool {
    let Call { buf, src_off, dst, foreign, dst_off, size, queue_type } = call;
    b.fill(dst, foreign);
    let got = b.dev.copy_descriptors(buf, src_off, dst, dst_off, size, queue_type);
    let expect = model_outcome(b, &call);
    assert_eq!(got, expect, "copy_descriptors(src_off {src_off}, dst_off {dst_off}, size {size}, type {queue_type})");
    let after = b.chunk_bytes(dst, foreign);
    let mut want = vec![RING_FILL; dst.size() as usize];
    if got.is_ok() {
        want[dst_off as usize..(dst_off + size) as usize]
            .copy_from_slice(&buf[src_off as usize..(src_off + size) as usize]);
    }
    if let Some(i) = (0..want.len()).find(|&i| after[i] != want[i]) {
        panic!("destination byte {i} is {:#04x}, not {:#04x}, after {got:?}", after[i], want[i]);
    }
    got.is_ok()
}

/// How far an input went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// A copy was refused.
    Refused,
    /// The copy was accepted (framed, or rings with no pair) and not run.
    Copied,
    /// Both rings were accepted and run; the engine refused a pair (a fault).
    Faulted,
    /// Both rings were accepted and ran to the end.
    Ran,
}

/// Checks one input; panics on a broken invariant.
pub fn check(input: &DescriptorsInput) -> Outcome {
    let arch = if input.v3 { Arch::V3 } else { Arch::V2 };
    BEDS.with(|beds| {
        let mut beds = beds.borrow_mut();
        let bed = beds[usize::from(input.v3)].get_or_insert_with(|| Bed::new(arch));
        run(bed, input)
    })
}

fn run(b: &mut Bed, input: &DescriptorsInput) -> Outcome {
    let pairs = &input.pairs[..input.pairs.len().min(MAX_PAIRS)];
    let (tx, rx): (Vec<Desc>, Vec<Desc>) = pairs
        .iter()
        .map(|p| {
            let rx_len = if p.same_len { p.tx.len } else { p.rx.len };
            (b.desc(&p.tx, p.tx.len, true), b.desc(&p.rx, rx_len, false))
        })
        .unzip();
    if let Some(f) = &input.framing {
        let mut buf = vec![0xa5u8; usize::from(f.prefix % 32)];
        buf.extend_from_slice(if f.rx_halves { rx.as_bytes() } else { tx.as_bytes() });
        let qtype = match f.queue_type {
            QueueType::Tx => NEURON_DMA_QUEUE_TYPE_TX,
            QueueType::Rx => NEURON_DMA_QUEUE_TYPE_RX,
            QueueType::Raw(t) => t,
        };
        let (dst, foreign) = match f.dst {
            Dest::Host(i) => (&b.rings[usize::from(i)], false),
            Dest::Device(i) => (&b.rings[2 + usize::from(i)], false),
            Dest::Foreign => (&b.foreign, true),
        };
        let size = (16 * pairs.len() as i64 + i64::from(f.size_delta)).max(0) as u64;
        let (src_off, dst_off) = (u64::from(f.src_off % 64), u64::from(f.dst_off % 1024));
        return match copy_and_check(b, Call { buf: &buf, src_off, dst, foreign, dst_off, size, queue_type: qtype }) {
            true => Outcome::Copied,
            false => Outcome::Refused,
        };
    }
    let n = pairs.len() as u64;
    let qi = usize::from(input.on_device);
    let (ring_tx, ring_rx) = (&b.rings[2 * qi], &b.rings[2 * qi + 1]);
    let whole =
        |buf, dst, queue_type| Call { buf, src_off: 0, dst, foreign: false, dst_off: 0, size: 16 * n, queue_type };
    let ok = copy_and_check(b, whole(tx.as_bytes(), ring_tx, NEURON_DMA_QUEUE_TYPE_TX))
        && copy_and_check(b, whole(rx.as_bytes(), ring_rx, NEURON_DMA_QUEUE_TYPE_RX));
    if !ok {
        return Outcome::Refused;
    }
    if n == 0 {
        return Outcome::Copied;
    }
    // What the caller owns: its host chunks, and device memory, which the contract leaves unchecked.
    let mut allowed: Vec<AccessWindow> =
        b.owned().iter().map(|c| AccessWindow { addr: b.dev.mc_to_pa(c), len: c.size(), host: true }).collect();
    allowed.push(AccessWindow { addr: HBM_BASE, len: b.hbm_end - HBM_BASE, host: false });
    let payload = &input.payload[..input.payload.len().min(OWN_BYTES as usize)];
    write_chunk(&b.emu, &b.own, 0, payload).expect("payload");
    let q = &mut b.queues[qi];
    // A queue the previous input left halted is reset, its cursors with it.
    q.reinit(&*b.emu);
    b.emu.watch_accesses(&allowed);
    let started = q.copy_start(&*b.emu, n as u32, n as u32);
    let escapes = b.emu.unwatch_accesses();
    let faults = b.emu.take_faults();
    started.expect("doorbell");
    assert!(escapes.is_empty(), "the engine left the caller's memory: {}", escapes[0]);
    if faults.is_empty() {
        Outcome::Ran
    } else {
        Outcome::Faulted
    }
}
