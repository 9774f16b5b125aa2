//! The classic split (`ndma_memcpy_chunks`, spec §2) as a property over sizes × source and destination
//! offsets × the batch boundary (DESIGN §7): for every synchronous copy, read back the descriptors the op
//! layer staged and check
//!
//! - every data descriptor moves at most 64 KiB, and together they cover exactly the two windows, in order,
//!   without gap or overlap (the exact TX/RX words of FACTS §1.5: FIRST|LAST, phase, length, meta);
//! - a batch holds at most 2031 data descriptors; the last data descriptor of every batch, and no other,
//!   carries the write barrier; each batch ends with exactly one marker (a 4-byte host self-copy, no barrier);
//! - the counters: batches, descriptors, doorbells (RX and TX per batch) on both sides, one poll per batch;
//! - the bytes: the destination window equals the source window, and everything around it is untouched.
//!
//! Inline engines on the fake clock, so each case is only the copying; the case count is modest because a
//! multi-batch case moves a few hundred MiB.

use std::cell::RefCell;

use ndma::{MemChunk, NeuronDevice, H2T_RING_SIZE, MAX_BATCH_BYTES, SYNC_THRESHOLD};
use ndma_emu::test_utils::*;
use ndma_emu::{ClockKind, EmuDevice, ExecPolicy, OrderingMode, Testbed};
use proptest::prelude::*;
use udma::{Arch, Desc, MAX_DMA_DESC_SIZE};

const DESC: u64 = MAX_DMA_DESC_SIZE as u64;
/// TX `len_ctrl` FIRST | LAST (bits 26, 27).
const FIRST_LAST: u32 = 0x0C00_0000;
/// TX `meta_ctrl` without a barrier (FACTS §1.3).
const META_CTRL_DEFAULT: u32 = 0x0108_0003;
/// TX `meta_ctrl` bit 26, the write barrier.
const WRITE_BARRIER: u32 = 1 << 26;
/// Bytes after each window that must stay untouched.
const AFTER: u64 = 4096;

fn bed(arch: Arch) -> Testbed {
    testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake)
}

/// One copy to check.
#[derive(Debug, Clone, Copy)]
struct Case {
    arch: Arch,
    dir: Dir,
    nc: u32,
    size: u64,
    src_off: u64,
    dst_off: u64,
    seed: u64,
}

/// The `len_ctrl` field of a `len`-byte descriptor (65536 encodes as 0).
fn len_field(len: u64) -> u32 {
    (len % DESC) as u32
}

/// The words of one staged pair: TX `len_ctrl`, `meta_ctrl`, source; RX `len_ctrl`, `buf2_ptr_lo`,
/// destination (printed in hex).
#[derive(PartialEq, Eq)]
struct Words([u64; 6]);

impl std::fmt::Debug for Words {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x?}", self.0)
    }
}

fn words(pair: &(Desc, Desc)) -> Words {
    let (tx, rx) = pair;
    Words([
        u64::from(tx.len_ctrl().into_bits()),
        u64::from(tx.word1()),
        tx.buf_ptr(),
        u64::from(rx.len_ctrl().into_bits()),
        u64::from(rx.word1()),
        rx.buf_ptr(),
    ])
}

/// Runs `c` on a testbed of its arch (a fresh one when the ring would wrap, so every staged descriptor of the
/// copy can be read back) and checks everything the module doc lists.
fn check(beds: &RefCell<[Option<Testbed>; 2]>, c: Case) {
    let data = c.size.div_ceil(DESC);
    let batches = data.div_ceil(u64::from(SYNC_THRESHOLD));
    let slots = data + batches;
    let mut beds = beds.borrow_mut();
    let slot = &mut beds[usize::from(c.arch == Arch::V3)];
    let fits = |tb: &Testbed| {
        let (dev, _) = tb.device(0);
        dev.ring_descriptors(c.nc).unwrap().len() as u64 + slots <= u64::from(H2T_RING_SIZE)
    };
    if !slot.as_ref().is_some_and(fits) {
        *slot = None;
        *slot = Some(bed(c.arch));
    }
    let tb = slot.as_ref().unwrap();
    let (dev, emu) = tb.device(0);
    let what = format!("{c:?}");

    let src = alloc(dev, c.dir.src_host(), c.src_off + c.size + AFTER, c.nc).unwrap();
    let dst = alloc(dev, c.dir.dst_host(), c.dst_off + c.size + AFTER, c.nc).unwrap();
    let src_bytes = pattern(c.seed, 0, (c.src_off + c.size + AFTER) as usize);
    write_chunk(emu, &src, 0, &src_bytes).unwrap();
    write_chunk(emu, &dst, 0, &vec![DST_FILL; (c.dst_off + c.size + AFTER) as usize]).unwrap();
    let (eng, _) = dev.h2t_queue(c.nc).unwrap();
    let first_slot = dev.ring_descriptors(c.nc).unwrap().len();
    let ring_before = dev.ring_stats(c.nc).unwrap();
    let eng_before = emu.engine_stats(eng).unwrap();

    dev.memcpy_mc(&src, &dst, c.src_off, c.dst_off, c.size).unwrap_or_else(|e| panic!("{what}: {e}"));

    let staged = dev.ring_descriptors(c.nc).unwrap();
    assert_eq!(staged.len(), first_slot + slots as usize, "{what}: slots staged");
    check_descriptors(dev, &staged[first_slot..], &src, &dst, c, &what);

    let r = dev.ring_stats(c.nc).unwrap().since(&ring_before);
    assert_eq!(
        (r.batches, r.descriptors, r.doorbells, r.polls, r.bytes, r.transfers, r.timeouts),
        (batches, slots, 2 * batches, batches, c.size, u64::from(c.size > 0), 0),
        "{what}: ring counters (batches, descriptors, doorbells, polls, bytes, transfers, timeouts)"
    );
    let e = emu.engine_stats(eng).unwrap().since(&eng_before);
    assert_eq!(
        (e.doorbells, e.descriptors, e.bytes, e.faults),
        (2 * batches, slots, c.size + 4 * batches, 0),
        "{what}: engine counters (doorbells, descriptors, bytes incl. markers, faults)"
    );
    check_bytes(emu, &src, &dst, &src_bytes, c, &what);
}

fn check_descriptors(dev: &NeuronDevice, staged: &[(Desc, Desc)], src: &MemChunk, dst: &MemChunk, c: Case, what: &str) {
    let (src_pa, dst_pa) = (dev.mc_to_pa(src) + c.src_off, dev.mc_to_pa(dst) + c.dst_off);
    // Phase 1: the ring is fresh and never wraps here.
    let phase = 1u32 << 24;
    let mut covered = 0u64;
    let mut marker_addr = None;
    let mut i = 0;
    while covered < c.size {
        // One batch: up to SYNC_THRESHOLD data descriptors, then the marker.
        let in_batch = (c.size - covered).div_ceil(DESC).min(u64::from(SYNC_THRESHOLD));
        for k in 0..in_batch {
            let len = (c.size - covered).min(DESC);
            let last = k + 1 == in_batch;
            let expected = Words([
                u64::from(FIRST_LAST | phase | len_field(len)),
                u64::from(META_CTRL_DEFAULT | if last { WRITE_BARRIER } else { 0 }),
                src_pa + covered,
                u64::from(phase | len_field(len)),
                0,
                dst_pa + covered,
            ]);
            assert_eq!(words(&staged[i]), expected, "{what}: data descriptor {i} (batch offset {k}, last {last})");
            assert!(u64::from(staged[i].0.len_ctrl().len_bytes()) <= DESC, "{what}: descriptor {i} over 64 KiB");
            covered += len;
            i += 1;
        }
        // The marker: a 4-byte copy from a host word to the word after it, no barrier, the same words for
        // every batch of the copy (the SYNC context's marker slot).
        let m = staged[i].0.buf_ptr();
        assert_eq!(
            words(&staged[i]),
            Words([u64::from(FIRST_LAST | phase | 4), u64::from(META_CTRL_DEFAULT), m, u64::from(phase | 4), 0, m + 4]),
            "{what}: marker descriptor {i} (a copy to the word after its source)"
        );
        assert!(c.arch.is_host_addr(m), "{what}: the marker is a host word");
        for (pa, len) in [(src_pa, c.size), (dst_pa, c.size)] {
            assert!(m + 8 <= pa || m >= pa + len, "{what}: the marker lies inside a window");
        }
        assert_eq!(*marker_addr.get_or_insert(m), m, "{what}: one marker slot for the whole copy");
        i += 1;
    }
    assert_eq!(covered, c.size, "{what}: the descriptors cover exactly the window");
    assert_eq!(i, staged.len(), "{what}: nothing staged after the last marker");
}

fn check_bytes(emu: &EmuDevice, src: &MemChunk, dst: &MemChunk, src_bytes: &[u8], c: Case, what: &str) {
    assert!(read_vec(emu, src, 0, src_bytes.len() as u64).unwrap() == src_bytes, "{what}: source changed");
    let d = read_vec(emu, dst, 0, c.dst_off + c.size + AFTER).unwrap();
    let (o, s, so) = (c.dst_off as usize, c.size as usize, c.src_off as usize);
    assert!(d[..o].iter().all(|&b| b == DST_FILL), "{what}: bytes before the destination window changed");
    assert!(d[o + s..].iter().all(|&b| b == DST_FILL), "{what}: bytes after the destination window changed");
    if let Some(i) = (0..s).find(|&i| d[o + i] != src_bytes[so + i]) {
        panic!("{what}: first wrong byte at window offset {i} of {s}");
    }
}

fn dir() -> impl Strategy<Value = Dir> {
    prop::sample::select(Dir::ALL.to_vec())
}

/// `base + delta`, never negative.
fn around(base: u64, delta: i64) -> u64 {
    base.saturating_add_signed(delta)
}

/// Sizes: small ones, whole descriptors ± 1, the 2031-descriptor batch boundary ± 1 descriptor ± 1 byte, and
/// two or three batches.
fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0..=5 * DESC + 1,
        2 => (0..=5u64, -1..=1i64).prop_map(|(k, d)| around(k * DESC, d)),
        2 => (2030..=2032u64, -1..=1i64).prop_map(|(n, d)| around(n * DESC, d)),
        1 => (2..=3u64, -1..=1i64).prop_map(|(k, d)| around(k * MAX_BATCH_BYTES, d)),
        1 => MAX_BATCH_BYTES + 1..2 * MAX_BATCH_BYTES + 3 * DESC,
    ]
}

/// Offsets: aligned or not, below and above one descriptor.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 1..=2 * DESC + 1]
}

fn case() -> impl Strategy<Value = Case> {
    (prop::sample::select(Arch::ALL.to_vec()), dir(), 0..2u32, size(), offset(), offset(), any::<u64>())
        .prop_map(|(arch, dir, nc, size, src_off, dst_off, seed)| Case { arch, dir, nc, size, src_off, dst_off, seed })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn the_split_covers_the_window_in_batches_with_one_barrier_and_one_marker_each(c in case()) {
        thread_local! {
            static BEDS: RefCell<[Option<Testbed>; 2]> = const { RefCell::new([None, None]) };
        }
        BEDS.with(|beds| check(beds, c));
    }
}

/// The batch boundary, every time (the property test only samples it): 2031 data descriptors ± 1 descriptor
/// and ± 1 byte, and whole multiples of a batch ± 1 byte, over every direction and both arches.
#[test]
fn the_batch_boundary_exactly() {
    let beds = RefCell::new([None, None]);
    let batch = MAX_BATCH_BYTES;
    let sizes = [batch - DESC, batch - 1, batch, batch + 1, batch + DESC, 2 * batch, 2 * batch + 1];
    for (i, &size) in sizes.iter().enumerate() {
        let arch = Arch::ALL[i % 2];
        let c = Case {
            arch,
            dir: Dir::ALL[i % 4],
            nc: 0,
            size,
            src_off: 4096 + i as u64,
            dst_off: 8192 - i as u64,
            seed: i as u64,
        };
        check(&beds, c);
    }
}
