//! The zero-copy path end to end (spec §4, FACTS §5): user pages pinned and DMAed over directly, byte-exact in
//! both directions over every placement, the per-arch barrier and the run coalescing pinned by exact
//! descriptors, the gates, pin failures, async completions and the leak check that ends every test.

use std::sync::Arc;

use ndma::zerocopy::{
    calc_pin_size, CqConsumer, CqEntry, NDMA_H2D_COMPL_BACKLOG_MAX, NDMA_H2D_COMPL_QUEUE_CAPACITY,
    NEURON_DMA_H2T_DEFAULT_QID,
};
use ndma::{BatchOp, MemChunk, NdmaError, NeuronDevice, PAGE_SIZE};
use ndma_emu::test_utils::take_completions as take;
use ndma_emu::test_utils::*;
use ndma_emu::{AddressSpace, ClockKind, ExecPolicy, MapSpec, OrderingMode, PinFault, PinPath, Placement, Testbed};
use udma::{Arch, Barrier, Desc};

const PAGE: u64 = PAGE_SIZE;

/// A testbed with zero-copy on (V2 needs the override) and a user process entered on this thread.
struct Zc {
    tb: Testbed,
    mm: Arc<AddressSpace>,
    _enter: ndma_emu::user::EnterGuard,
}

impl Zc {
    fn new(arch: Arch, exec: ExecPolicy) -> Zc {
        Zc::with(arch, exec, ClockKind::Real)
    }

    fn with(arch: Arch, exec: ExecPolicy, clock: ClockKind) -> Zc {
        Zc::on(testbed(arch, exec, OrderingMode::Adversarial, clock))
    }

    /// Zero-copy on for `tb`'s first device, and a user process entered on this thread.
    fn on(tb: Testbed) -> Zc {
        tb.system.devices()[0].set_zerocopy_trn1_override(true);
        let mm = AddressSpace::new(tb.emu.host(), 4242);
        let enter = mm.enter();
        Zc { tb, mm, _enter: enter }
    }

    fn dev(&self) -> &Arc<NeuronDevice> {
        &self.tb.system.devices()[0]
    }

    fn emu(&self) -> &Arc<ndma_emu::EmuDevice> {
        self.tb.emu.device(0)
    }

    /// NC 0's completion queue, mapped as a consumer maps it.
    fn cq(&self) -> CqConsumer {
        CqConsumer::new(&self.dev().completion_queue(0).unwrap()).unwrap()
    }

    /// Maps `pages` user pages with `placement`; returns the first address.
    fn map(&self, pages: usize, placement: Placement) -> u64 {
        self.mm.map(&MapSpec::new(pages, placement)).expect("map")
    }

    /// `pages` user pages on scattered frames (`seed`) holding pattern `seed`, and a device chunk as large
    /// filled with [`DST_FILL`]: the user address, the pattern and the chunk.
    fn source_and_target(&self, pages: u64, seed: u64) -> (u64, Vec<u8>, Arc<MemChunk>) {
        let va = self.map(pages as usize, Placement::Scattered { seed });
        let data = pattern(seed, 0, (pages * PAGE) as usize);
        self.mm.write(va, &data).unwrap();
        let mc = alloc(self.dev(), false, pages * PAGE, 0).unwrap();
        write_chunk(self.emu(), &mc, 0, &vec![DST_FILL; (pages * PAGE) as usize]).unwrap();
        (va, data, mc)
    }

    /// Nothing pinned, nothing queued, no completion held back, every ring's slots accounted for.
    fn assert_no_leaks(&self, what: &str) {
        let leak = self.tb.emu.host().frames().leak_check();
        assert!(leak.is_clean(), "{what}: {leak:?}");
        let dev = self.dev();
        for nc in 0..dev.dhal().ncs_per_device() {
            let s = dev.zerocopy_status(nc).unwrap();
            assert!(s.is_idle(), "{what}: NC {nc} zero-copy state {s:?}");
            let (used, accounted) = dev.ring_slot_accounting(nc).unwrap();
            assert_eq!((used, accounted), (0, 0), "{what}: NC {nc} ring slots");
        }
    }
}

/// Pieces a request of `size` bytes starting `offset` bytes into its first page is cut into (FACTS §5.4).
fn pieces(size: u64, offset: u64) -> u64 {
    let (mut remaining, mut off, mut pin) = (size, offset, calc_pin_size(size + offset));
    let mut n = 0;
    while remaining > 0 {
        let piece = (pin - off).min(remaining);
        remaining -= piece;
        off = 0;
        pin = pin.min(remaining);
        n += 1;
    }
    n
}

fn layouts() -> [Placement; 3] {
    [Placement::Contiguous, Placement::Scattered { seed: 7 }, Placement::Runs { k: 3, seed: 11 }]
}

/// One verified sync transfer of `size` bytes at page offset `offset`, in direction `to_device`, over a user
/// buffer laid out by `placement`, with a guard page and guard bytes around both windows.
fn transfer(z: &Zc, to_device: bool, placement: Placement, offset: u64, size: u64, seed: u64) {
    let what = format!("{} {placement:?} offset {offset} size {size}", if to_device { "h2d" } else { "d2h" });
    let (dev, emu) = (z.dev(), z.emu());
    let user_len = PAGE + offset + size + PAGE;
    let pages = user_len.div_ceil(PAGE) as usize;
    let va = z.map(pages, placement);
    let window = va + PAGE + offset;
    let mc = alloc(dev, false, size + 2 * GUARD, 0).unwrap();
    let user_bytes = pattern(seed, 0, user_len as usize);
    let dev_bytes = pattern(seed ^ 0xdead, 0, (size + 2 * GUARD) as usize);
    if to_device {
        z.mm.write(va, &user_bytes).unwrap();
        write_chunk(emu, &mc, 0, &vec![DST_FILL; (size + 2 * GUARD) as usize]).unwrap();
    } else {
        z.mm.fill(va, user_len, DST_FILL).unwrap();
        write_chunk(emu, &mc, 0, &dev_bytes).unwrap();
    }
    let before = dev.ring_stats(0).unwrap();
    let op = BatchOp { offset: GUARD, size, buffer: window };
    dev.zerocopy_submit(0, &[op], &mc, 0, NEURON_DMA_H2T_DEFAULT_QID, to_device, 0, 0)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let st = dev.ring_stats(0).unwrap().since(&before);
    assert_eq!(st.zc_pieces, pieces(size, offset), "{what}: pieces");
    let mut user_now = vec![0u8; user_len as usize];
    z.mm.read(va, &mut user_now).unwrap();
    let dev_now = read_vec(emu, &mc, 0, size + 2 * GUARD).unwrap();
    let (g, s, o) = (GUARD as usize, size as usize, (PAGE + offset) as usize);
    if to_device {
        assert!(user_now == user_bytes, "{what}: the user buffer changed");
        assert!(dev_now[..g].iter().all(|&b| b == DST_FILL), "{what}: device guard before");
        assert!(dev_now[g + s..].iter().all(|&b| b == DST_FILL), "{what}: device guard after");
        assert!(dev_now[g..g + s] == user_bytes[o..o + s], "{what}: device window");
    } else {
        assert!(dev_now == dev_bytes, "{what}: the device chunk changed");
        assert!(user_now[..o].iter().all(|&b| b == DST_FILL), "{what}: user bytes before");
        assert!(user_now[o + s..].iter().all(|&b| b == DST_FILL), "{what}: user bytes after");
        assert!(user_now[o..o + s] == dev_bytes[g..g + s], "{what}: user window");
    }
    z.mm.unmap(va, pages as u64 * PAGE).unwrap();
    z.assert_no_leaks(&what);
}

#[test]
fn sync_transfers_are_byte_exact_over_every_layout_offset_and_edge_size() {
    let sizes = [1, 4096, (256 << 10) - 1, 256 << 10, (256 << 10) + 1, (512 << 10) - 1, (512 << 10) + 1];
    for arch in Arch::ALL {
        let z = Zc::new(arch, ExecPolicy::Inline);
        let mut seed = 0;
        for to_device in [true, false] {
            for placement in layouts() {
                for offset in [0, 1, 4095] {
                    for size in sizes {
                        seed += 1;
                        transfer(&z, to_device, placement, offset, size, seed);
                    }
                }
            }
        }
    }
}

#[test]
fn sixteen_mib_in_both_directions_threaded() {
    for (arch, placement) in
        [(Arch::V3, Placement::Scattered { seed: 3 }), (Arch::V2, Placement::Runs { k: 5, seed: 9 })]
    {
        let z = Zc::new(arch, ExecPolicy::Threaded);
        transfer(&z, true, placement, 1, 16 << 20, 1);
        transfer(&z, false, Placement::Contiguous, 4095, 16 << 20, 2);
        // After 16 MiB of distinct destinations the engine streams: a scattered d2h buffer's pages land in
        // groups (their last words published after every body of the group).
        transfer(&z, false, Placement::Scattered { seed: 5 }, 0, 16 << 20, 3);
        transfer(&z, false, Placement::Scattered { seed: 6 }, 1, 16 << 20, 4);
    }
}

#[test]
fn the_gates_refuse_before_anything_is_queued() {
    let z = Zc::new(Arch::V2, ExecPolicy::Inline);
    let dev = z.dev();
    let mc = alloc(dev, false, 8192, 0).unwrap();
    let va = z.map(2, Placement::Contiguous);
    let op = [BatchOp { offset: 0, size: 8192, buffer: va }];
    let submit = |nc, qid, seq| dev.zerocopy_submit(nc, &op, &mc, 0, qid, true, seq, 0);
    dev.set_zerocopy_trn1_override(false);
    assert!(!dev.zerocopy_supported());
    assert_eq!(submit(0, -1, 0), Err(NdmaError::ZeroCopyUnsupported));
    assert_eq!(NdmaError::ZeroCopyUnsupported.errno(), -22, "FACTS §5.8: -EINVAL when zero-copy is off");
    dev.set_zerocopy_trn1_override(true);
    assert_eq!(submit(0, -1, 5), Err(NdmaError::AsyncZeroCopyUnsupported), "V2: no async zero-copy");
    assert_eq!(NdmaError::AsyncZeroCopyUnsupported.errno(), -22);
    assert_eq!(submit(0, 1, 0), Err(NdmaError::NotOwner { nc: 0, qid: 1 }));
    assert_eq!(NdmaError::NotOwner { nc: 0, qid: 1 }.errno(), -2);
    assert_eq!(submit(7, -1, 0), Err(NdmaError::NotOwner { nc: 7, qid: -1 }));
    let far = [BatchOp { offset: 4096, size: 8192, buffer: va }];
    assert!(matches!(
        dev.zerocopy_submit(0, &far, &mc, 0, -1, true, 0, 0),
        Err(NdmaError::OutOfRange { what: "zero-copy device window", .. })
    ));
    // A request without ops still has its window's start checked (it would be the base of every op).
    for offset in [8193, u64::MAX] {
        assert_eq!(
            dev.zerocopy_submit(0, &[], &mc, offset, -1, true, 0, 0),
            Err(NdmaError::OutOfRange { what: "zero-copy device window", offset, size: 0, limit: 8192 })
        );
    }
    dev.zerocopy_submit(0, &[], &mc, 8192, -1, true, 0, 0).expect("an empty window at the chunk's end");
    // A device chunk from a pool of its own names HBM the device's own chunks hold.
    let pool = ndma::memory::MemPool::new(mc.pa(), 1 << 20, Arch::V2.pci_host_base()).unwrap();
    let foreign = pool.alloc_device(8192, 0).unwrap();
    assert_eq!(foreign.pa(), mc.pa());
    assert_eq!(
        dev.zerocopy_submit(0, &op, &foreign, 0, -1, true, 0, 0),
        Err(NdmaError::ForeignChunk { what: "zero-copy device chunk" })
    );
    assert_eq!(dev.ring_stats(0).unwrap().zc_pieces, 0, "nothing issued");
    assert_eq!(z.mm.pin_stats().fast_calls + z.mm.pin_stats().slow_calls, 0, "nothing pinned");
    submit(0, 0, 0).unwrap();
    z.assert_no_leaks("after the gates");
}

/// The descriptor pairs staged on NC 0's ring since the ring started.
fn staged(dev: &NeuronDevice) -> Vec<(Desc, Desc)> {
    dev.ring_descriptors(0).unwrap()
}

#[test]
fn runs_coalesce_and_the_barrier_sits_where_the_arch_needs_it() {
    for arch in Arch::ALL {
        for to_device in [true, false] {
            let z = Zc::new(arch, ExecPolicy::Inline);
            let dev = z.dev();
            // 16 pages in runs of 3 frames, starting 100 bytes into the first.
            let va = z.map(20, Placement::Runs { k: 3, seed: 5 });
            let frames: Vec<u64> = z.mm.frames_of(va, 20).into_iter().map(|f| f.unwrap()).collect();
            let size = 16 * PAGE;
            let mc = alloc(dev, false, size, 0).unwrap();
            let op = BatchOp { offset: 0, size, buffer: va + 100 };
            dev.zerocopy_submit(0, &[op], &mc, 0, -1, to_device, 0, 0).unwrap();
            let pairs = staged(dev);
            let host = arch.pci_host_base();
            // 64 KiB + 100 bytes is under one piece (256 KiB): one piece, one descriptor per run of frames.
            assert_eq!(pieces(size, 100), 1);
            let mut expect = Vec::new();
            let (mut at, mut left, mut dev_at) = (100u64, size, mc.pa());
            let mut i = 0;
            while left > 0 {
                let start = frames[i] + at;
                let mut run = PAGE - at;
                i += 1;
                while frames[i] == frames[i - 1] + PAGE && run < left {
                    run += PAGE;
                    i += 1;
                }
                let len = run.min(left);
                expect.push((start | host, dev_at, len));
                dev_at += len;
                left -= len;
                at = 0;
            }
            let data: Vec<_> = pairs.iter().filter(|(tx, _)| tx.tx().len_ctrl.len_bytes() != 4).collect();
            assert_eq!(data.len(), expect.len(), "{arch} to_device {to_device}: one descriptor per run");
            for (k, ((tx, rx), (h, d, len))) in data.iter().zip(&expect).enumerate() {
                let (src, dst) = if to_device { (*h, *d) } else { (*d, *h) };
                assert_eq!((tx.tx().src, rx.rx().dst, tx.tx().len_ctrl.len_bytes()), (src, dst, *len as u32), "#{k}");
                let last = k + 1 == expect.len();
                let barrier = if arch == Arch::V2 && to_device && last { Barrier::WriteBarrier } else { Barrier::None };
                assert_eq!(tx.tx().barrier(), barrier, "{arch} {to_device} #{k}");
                assert!(!rx.rx().len_ctrl.sow(), "{arch} {to_device} #{k}: no SOW on data");
                assert!(!rx.rx().len_ctrl.int_en(), "{arch} {to_device} #{k}: no interrupt (FACTS §1.2)");
            }
            let (mtx, mrx) = pairs.last().unwrap();
            assert_eq!(mtx.tx().len_ctrl.len_bytes(), 4, "the marker closes the piece");
            let sow = arch == Arch::V3 && to_device;
            assert_eq!(mrx.rx().len_ctrl.sow(), sow, "{arch} to_device {to_device}: SOW on the marker");
            assert_eq!(mtx.tx().barrier(), Barrier::None);
            assert!(!mrx.rx().len_ctrl.int_en(), "{arch} to_device {to_device}: completion is polled, not signalled");
            z.assert_no_leaks("descriptors");
        }
    }
}

#[test]
fn only_the_last_piece_of_a_write_carries_the_barrier() {
    for arch in Arch::ALL {
        let z = Zc::new(arch, ExecPolicy::Inline);
        let dev = z.dev();
        let size = 600 << 10; // three pieces of 256 KiB, 256 KiB, 88 KiB
        let va = z.map((size / PAGE) as usize, Placement::Contiguous);
        let mc = alloc(dev, false, size, 0).unwrap();
        dev.zerocopy_submit(0, &[BatchOp { offset: 0, size, buffer: va }], &mc, 0, -1, true, 0, 0).unwrap();
        let pairs = staged(dev);
        let markers: Vec<usize> =
            pairs.iter().enumerate().filter(|(_, p)| p.0.tx().len_ctrl.len_bytes() == 4).map(|(i, _)| i).collect();
        assert_eq!(markers.len(), 3, "{arch}: three pieces");
        // FACTS §5.3: context-queue entry i (0, 1, 2 here) self-copies its marker within the 8 bytes at
        // completion pool + 8i: source word +0, poll word +4.
        let pool = pairs[markers[0]].0.tx().src;
        assert!(arch.is_host_addr(pool), "{arch}: the completion pool is host memory");
        for (k, &m) in markers.iter().enumerate() {
            let at = pool + 8 * k as u64;
            assert_eq!((pairs[m].0.tx().src, pairs[m].1.rx().dst), (at, at + 4), "{arch}: entry {k}'s marker");
        }
        for (i, (tx, rx)) in pairs.iter().enumerate() {
            let last_piece = i > markers[1];
            let is_marker = markers.contains(&i);
            let last_data = i + 1 == markers[2];
            let wb = arch == Arch::V2 && last_piece && last_data;
            assert_eq!(tx.tx().barrier() == Barrier::WriteBarrier, wb, "{arch} pair {i}");
            assert_eq!(rx.rx().len_ctrl.sow(), arch == Arch::V3 && is_marker && last_piece, "{arch} pair {i}");
        }
        z.assert_no_leaks("barriers");
    }
}

#[test]
fn a_hole_fails_the_request_and_releases_every_pin() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    // 200 pages with a hole at page 150: pieces 0..=1 pin fine; the third piece's pin is partial (-ENOMEM);
    // a request starting at the hole cannot pin its first page (-EFAULT).
    let va = z.mm.map(&MapSpec::new(200, Placement::Contiguous).holes([150])).unwrap();
    let mc = alloc(dev, false, 200 * PAGE, 0).unwrap();
    let op = BatchOp { offset: 0, size: 200 * PAGE, buffer: va };
    let err = dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0).unwrap_err();
    assert_eq!(err, NdmaError::Pin { va: va + 150 * PAGE, errno: -12 }, "a partial pin is -ENOMEM");
    z.assert_no_leaks("partial pin");
    let at_hole = BatchOp { offset: 0, size: PAGE, buffer: va + 150 * PAGE };
    let err = dev.zerocopy_submit(0, &[at_hole], &mc, 0, -1, false, 0, 0).unwrap_err();
    assert_eq!(err.errno(), -14, "{err}: a hole at the first page is -EFAULT");
    z.assert_no_leaks("hole");
    // The device is usable.
    let ok = BatchOp { offset: 0, size: 100 * PAGE, buffer: va };
    dev.zerocopy_submit(0, &[ok], &mc, 0, -1, true, 0, 0).unwrap();
    z.assert_no_leaks("after");
}

/// A request that fails after some of its pieces were issued leaves none of their device writes in flight:
/// only its last piece would have carried the write barrier, so without a fence the model's adversarial
/// ordering keeps those HBM writes posted past the error, free to land after the caller reused the memory.
#[test]
fn a_failed_request_leaves_no_device_write_in_flight() {
    for arch in [Arch::V2, Arch::V3] {
        let z = Zc::new(arch, ExecPolicy::Inline);
        let dev = z.dev();
        let (eng, _) = dev.h2t_queue(0).unwrap();
        // 200 pages with a hole at page 150: the pieces before it are issued, the one holding it fails to pin.
        let va = z.mm.map(&MapSpec::new(200, Placement::Contiguous).holes([150])).unwrap();
        let data: Vec<u8> = (0..150 * PAGE).map(|i| (i % 251) as u8 ^ 0x5a).collect();
        z.mm.write(va, &data).unwrap();
        let mc = alloc(dev, false, 200 * PAGE, 0).unwrap();
        let before = dev.ring_stats(0).unwrap();
        let op = BatchOp { offset: 0, size: 200 * PAGE, buffer: va };
        let err = dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0).unwrap_err();
        assert_eq!(err, NdmaError::Pin { va: va + 150 * PAGE, errno: -12 }, "{arch}");
        let issued = dev.ring_stats(0).unwrap().zc_pieces - before.zc_pieces;
        assert!(issued >= 1, "{arch}: pieces before the hole were issued ({issued})");
        assert_eq!(z.emu().posted_writes(eng), 0, "{arch}: device writes still in flight after the error");
        // What the issued pieces wrote has landed.
        let mut got = vec![0u8; PAGE as usize];
        z.emu().hbm_read(mc.pa(), &mut got).unwrap();
        assert_eq!(got, data[..PAGE as usize], "{arch}: the first piece's bytes are in device memory");
        z.assert_no_leaks(&format!("{arch}: failed request"));
    }
}

#[test]
fn a_short_fast_pin_falls_back_to_the_slow_path_and_a_failed_pin_is_its_errno() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let va = z.map(64, Placement::Scattered { seed: 1 });
    let mc = alloc(dev, false, 64 * PAGE, 0).unwrap();
    let op = [BatchOp { offset: 0, size: 64 * PAGE, buffer: va }];
    z.mm.pin_faults().add(PinFault::Short { nth: 0, pages: 10 });
    dev.zerocopy_submit(0, &op, &mc, 0, -1, false, 0, 0).unwrap();
    let s = z.mm.pin_stats();
    assert_eq!((s.fast_calls, s.slow_calls, s.short_pins), (1, 1, 1), "{s:?}");
    assert_eq!(s.unpinned_pages, 10 + 64, "the short pin's 10 pages were given back");
    assert_eq!(s.dirty_unpins, 64, "device→host: unpinned dirty");
    z.mm.pin_faults().add(PinFault::Fail { path: None, nth: 0, errno: -12 });
    z.mm.pin_faults().add(PinFault::Fail { path: Some(PinPath::Slow), nth: 0, errno: -12 });
    assert_eq!(dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 0, 0), Err(NdmaError::Pin { va, errno: -12 }));
    z.assert_no_leaks("pin faults");
}

/// FACTS §5.6 pin flags: a host→device piece only reads the user pages, so it pins them without write access
/// (read-only pages are fine); a device→host piece writes them, so it pins for write, and read-only pages
/// refuse it (-EFAULT) before anything moves.
#[test]
fn only_a_device_to_host_piece_pins_for_write() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let va = z.map(4, Placement::Scattered { seed: 3 });
    let data = pattern(3, 0, (4 * PAGE) as usize);
    z.mm.write(va, &data).unwrap();
    z.mm.protect(va, 4 * PAGE, false).unwrap();
    let mc = alloc(dev, false, 4 * PAGE, 0).unwrap();
    let op = [BatchOp { offset: 0, size: 4 * PAGE, buffer: va }];
    dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 0, 0).expect("host→device reads read-only pages");
    assert!(read_vec(z.emu(), &mc, 0, 4 * PAGE).unwrap() == data);
    write_chunk(z.emu(), &mc, 0, &vec![DST_FILL; (4 * PAGE) as usize]).unwrap();
    let err = dev.zerocopy_submit(0, &op, &mc, 0, -1, false, 0, 0).unwrap_err();
    assert_eq!((err.clone(), err.errno()), (NdmaError::Pin { va, errno: -14 }, -14));
    let mut back = vec![0u8; (4 * PAGE) as usize];
    z.mm.read(va, &mut back).unwrap();
    assert!(back == data, "nothing written to the read-only pages");
    z.assert_no_leaks("pin flags");
}

#[test]
fn async_requests_complete_exactly_once_in_order_with_their_results() {
    let z = Zc::new(Arch::V3, ExecPolicy::Threaded);
    let (dev, emu) = (z.dev(), z.emu());
    let cq = z.cq();
    assert_eq!(cq.header().capacity, 1024);
    let n = 40u64;
    let size = 300_000u64;
    let va = z.map((n * size).div_ceil(PAGE) as usize + 1, Placement::Runs { k: 4, seed: 2 });
    let data = pattern(77, 0, (n * size) as usize);
    z.mm.write(va, &data).unwrap();
    let mc = alloc(dev, false, n * size, 0).unwrap();
    for i in 0..n {
        let op = BatchOp { offset: i * size, size, buffer: va + i * size };
        let seq = 1000 + i;
        // One request is refused: its device window runs past the chunk.
        let op = if i == 17 { BatchOp { size: n * size, ..op } } else { op };
        let r = dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, seq, seq * 3);
        if i == 17 {
            // Its bytes run past the device chunk: refused before anything is queued, no completion.
            assert!(matches!(r, Err(NdmaError::OutOfRange { .. })), "{r:?}");
        } else {
            r.unwrap();
        }
    }
    // A request over the unmapped guard page after the mapping: its pin fails in submit, no completion.
    let guard_page = va + ((n * size).div_ceil(PAGE) + 1) * PAGE;
    let hole = BatchOp { offset: 0, size: 2 * PAGE, buffer: guard_page };
    let r = dev.zerocopy_submit(0, &[hole], &mc, 0, -1, true, 5000, 1);
    assert!(matches!(r, Err(NdmaError::Pin { .. })), "{r:?}");
    let got = take(&cq, (n - 1) as usize);
    let expect: Vec<CqEntry> = (0..n)
        .filter(|&i| i != 17)
        .map(|i| CqEntry { sequence_num: 1000 + i, compl_ret: 0, context: (1000 + i) * 3 })
        .collect();
    assert_eq!(got, expect);
    assert_eq!(cq.pop(), None, "exactly one completion per accepted request");
    let back = read_vec(emu, &mc, 0, n * size).unwrap();
    for i in (0..n).filter(|&i| i != 17) {
        let r = (i * size) as usize..((i + 1) * size) as usize;
        assert!(back[r.clone()] == data[r], "request {i}");
    }
    z.assert_no_leaks("async");
}

/// The completion thread retires every piece that is already over in one pass: a request whose pieces
/// finished before the thread looked (inline engines execute each piece at its doorbell) costs two passes under
/// the ring lock — one for the pieces the submit issued, one for the last piece, which an async submit leaves
/// pinned for the thread to issue (FACTS §5.6) — not one per piece.
#[test]
fn pieces_already_over_are_retired_in_one_pass() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = (z.dev(), z.emu());
    let cq = z.cq();
    let size = 2 << 20;
    let va = z.map((size / PAGE) as usize, Placement::Runs { k: 16, seed: 5 });
    let data = pattern(31, 0, size as usize);
    z.mm.write(va, &data).unwrap();
    let mc = alloc(dev, false, size, 0).unwrap();
    let before = dev.ring_stats(0).unwrap();
    let op = BatchOp { offset: 0, size, buffer: va };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 7, 70).unwrap();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 7, compl_ret: 0, context: 70 }]);
    let s = dev.ring_stats(0).unwrap().since(&before);
    assert_eq!(s.zc_pieces, pieces(size, 0), "256 KiB pieces");
    assert_eq!(s.zc_passes, 2, "seven pieces over when the thread looked, then the one it issued");
    assert_eq!((s.cqes, cq.pop()), (1, None));
    assert!(read_vec(emu, &mc, 0, size).unwrap() == data);
    z.assert_no_leaks("one pass");
}

#[test]
fn an_async_hang_fails_its_request_and_the_next_ones_complete() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let cq = z.cq();
    let va = z.map(32, Placement::Scattered { seed: 4 });
    z.mm.fill(va, 32 * PAGE, 0x5a).unwrap();
    let mc = alloc(dev, false, 32 * PAGE, 0).unwrap();
    z.emu().fault_plan().add(ndma_emu::PlannedFault::Hang { engine: eng, qid, persistent: false });
    for seq in 1..=3u64 {
        let op = BatchOp { offset: (seq - 1) * 8 * PAGE, size: 8 * PAGE, buffer: va + (seq - 1) * 8 * PAGE };
        dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, seq, 0).unwrap();
    }
    let got = take(&cq, 3);
    assert_eq!(got[0].sequence_num, 1);
    assert_eq!(got[0].compl_ret, -110, "the hung request times out");
    assert_eq!(
        got[1..],
        [CqEntry { sequence_num: 2, compl_ret: 0, context: 0 }, CqEntry { sequence_num: 3, compl_ret: 0, context: 0 }]
    );
    let back = read_vec(z.emu(), &mc, 8 * PAGE, 16 * PAGE).unwrap();
    assert!(back.iter().all(|&b| b == 0x5a), "the requests behind it were re-issued and landed");
    z.assert_no_leaks("async hang");
}

#[test]
fn deferred_pieces_of_an_exited_process_complete_with_an_error_and_free_their_pins() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let cq = z.cq();
    // No pin budget: every async piece is queued unpinned, holding the captured address space.
    dev.set_zerocopy_pin_budget(0);
    let va = z.map(256, Placement::Contiguous);
    let mc = alloc(dev, false, 256 * PAGE, 0).unwrap();
    for seq in 1..=3u64 {
        let op = BatchOp { offset: (seq - 1) * 64 * PAGE, size: 64 * PAGE, buffer: va + (seq - 1) * 64 * PAGE };
        dev.zerocopy_submit(0, &[op], &mc, 0, -1, false, seq, seq).unwrap();
    }
    let s = dev.zerocopy_status(0).unwrap();
    assert_eq!((s.contexts, s.pinned_pages), (3, 0), "three deferred pieces");
    z.mm.exit();
    dev.set_zerocopy_pin_budget(1 << 20);
    let got = take(&cq, 3);
    for (k, e) in got.iter().enumerate() {
        let seq = k as u64 + 1;
        assert_eq!(*e, CqEntry { sequence_num: seq, compl_ret: -3, context: seq }, "-ESRCH");
    }
    assert_eq!(z.mm.pin_stats().pinned_pages, 0);
    z.assert_no_leaks("exit");
}

/// A request that is already over — `submit_completed`'s dummy, or an async request with nothing to move —
/// completes exactly once, in queue order: behind a request still waiting to be pinned, not ahead of it.
#[test]
fn requests_already_over_complete_in_order_behind_those_in_flight() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = (z.dev(), z.emu());
    let cq = z.cq();
    // No pin budget: the first request stays queued, unpinned, until the budget is raised.
    dev.set_zerocopy_pin_budget(0);
    let (va, data, mc) = z.source_and_target(16, 9);
    let op = BatchOp { offset: 0, size: 16 * PAGE, buffer: va };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 1, 10).unwrap();
    dev.zerocopy_submit_completed(0, -1, 2, -5, 20).unwrap();
    let nothing = BatchOp { offset: 0, size: 0, buffer: va };
    dev.zerocopy_submit(0, &[nothing, nothing], &mc, 0, -1, true, 3, 30).unwrap();
    dev.zerocopy_submit(0, &[], &mc, 0, -1, false, 4, 40).unwrap();
    let s = dev.zerocopy_status(0).unwrap();
    assert_eq!((s.contexts, s.pinned_pages), (4, 0), "one deferred piece, three requests already over");
    assert_eq!(cq.pop(), None, "nothing completes ahead of the request at the head");
    assert!(read_vec(emu, &mc, 0, 16 * PAGE).unwrap().iter().all(|&b| b == DST_FILL), "nothing moved yet");
    dev.set_zerocopy_pin_budget(1 << 20);
    let expect = [
        CqEntry { sequence_num: 1, compl_ret: 0, context: 10 },
        CqEntry { sequence_num: 2, compl_ret: -5, context: 20 },
        CqEntry { sequence_num: 3, compl_ret: 0, context: 30 },
        CqEntry { sequence_num: 4, compl_ret: 0, context: 40 },
    ];
    assert_eq!(take(&cq, 4), expect);
    assert_eq!(cq.pop(), None, "exactly one completion each");
    assert!(read_vec(emu, &mc, 0, 16 * PAGE).unwrap() == data);
    z.assert_no_leaks("requests already over");
}

/// A request already over carries its result as an s64 (FACTS §5.2) and its completion echoes it, every bit:
/// a result that is not an errno — 2^32, whose low half is 0, or i64::MIN — is not read as success or cut to
/// 32 bits.
#[test]
fn a_request_already_over_posts_its_result_as_it_is() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let (dev, cq) = (z.dev(), z.cq());
    let results = [1i64 << 32, -(1i64 << 32) - 5, i64::MIN, i64::MAX, 7, -5];
    for (k, &r) in results.iter().enumerate() {
        dev.zerocopy_submit_completed(0, -1, k as u64 + 1, r, 100 + k as u64).unwrap();
    }
    let expect: Vec<CqEntry> = results
        .iter()
        .enumerate()
        .map(|(k, &r)| CqEntry { sequence_num: k as u64 + 1, compl_ret: r, context: 100 + k as u64 })
        .collect();
    let mut spins = 0u64;
    while dev.zerocopy_status(0).unwrap().posted < results.len() as u32 {
        spins += 1;
        assert!(spins < 50_000_000, "completions lost");
        std::thread::yield_now();
    }
    assert_eq!(take(&cq, results.len()), expect);
    assert_eq!(cq.pop(), None);
    assert_eq!(dev.zerocopy_status(0).unwrap().posted, 0, "every completion taken");
    z.assert_no_leaks("results as they are");
}

/// The completion queue's wire layout, byte-exact in the memory a runtime maps (FACTS §5.7): a 16-byte header —
/// u32 capacity at +0, u32 head at +4, u32 tail at +8 — then 1024 entries of 24 bytes from +16, each u64
/// `sequence_num` at +0, s64 `compl_ret` at +8 and the context at +16, all little-endian; 24,592 bytes in all.
/// Producer and consumer share this crate's offsets, so only the raw bytes show a field moved or swapped.
#[test]
fn the_completion_queue_is_laid_out_byte_exact_as_the_runtime_maps_it() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let (dev, cq) = (z.dev(), z.cq());
    assert_eq!(ndma::zerocopy::NDMA_H2D_COMPL_QUEUE_SIZE, 16 + 1024 * 24);
    let chunk = dev.completion_queue(0).unwrap();
    let pa = chunk.pa() & !Arch::V3.pci_host_base();
    let raw = || {
        let mut b = vec![0u8; ndma::zerocopy::NDMA_H2D_COMPL_QUEUE_SIZE];
        z.tb.emu.host().space().read(pa, &mut b).unwrap();
        b
    };
    let u32_at = |b: &[u8], off: usize| u32::from_le_bytes(b[off..off + 4].try_into().unwrap());
    let u64_at = |b: &[u8], off: usize| u64::from_le_bytes(b[off..off + 8].try_into().unwrap());
    let fresh = raw();
    assert_eq!((u32_at(&fresh, 0), u32_at(&fresh, 4), u32_at(&fresh, 8)), (1024, 0, 0), "capacity, head, tail");
    assert!(fresh[16..].iter().all(|&b| b == 0), "every entry empty");
    // Two results already over (no DMA): the second carries a negative errno, sign-extended to 64 bits.
    dev.zerocopy_submit_completed(0, -1, 0x1122_3344_5566_7788, 0, 0xA0A1_A2A3_A4A5_A6A7).unwrap();
    dev.zerocopy_submit_completed(0, -1, 9, -5, 0x99).unwrap();
    let mut spins = 0u64;
    while dev.zerocopy_status(0).unwrap().posted < 2 {
        spins += 1;
        assert!(spins < 50_000_000, "completions lost");
        std::thread::yield_now();
    }
    let posted = raw();
    assert_eq!((u32_at(&posted, 0), u32_at(&posted, 4), u32_at(&posted, 8)), (1024, 0, 2), "tail published");
    assert_eq!(&posted[16..24], &0x1122_3344_5566_7788u64.to_le_bytes(), "entry 0: sequence_num at +16");
    assert_eq!(u64_at(&posted, 24), 0, "entry 0: compl_ret at +24");
    assert_eq!(u64_at(&posted, 32), 0xA0A1_A2A3_A4A5_A6A7, "entry 0: context at +32");
    assert_eq!((u64_at(&posted, 40), u64_at(&posted, 48), u64_at(&posted, 56)), (9, (-5i64) as u64, 0x99), "entry 1");
    assert!(posted[64..].iter().all(|&b| b == 0), "nothing else written");
    assert_eq!(cq.pop().map(|e| e.sequence_num), Some(0x1122_3344_5566_7788));
    let consumed = raw();
    assert_eq!((u32_at(&consumed, 4), u32_at(&consumed, 8)), (1, 2), "head advanced by the consumer");
    assert!(consumed[16..40].iter().all(|&b| b == 0), "the consumed entry is cleared");
    assert_eq!(cq.pop().map(|e| e.compl_ret), Some(-5));
    z.assert_no_leaks("completion queue layout");
}

/// Sequence numbers are the submitter's and need not be unique: a refused request drains only its own
/// pieces, never those of an accepted request that carries the same number (which still completes exactly
/// once). The refusal here is a full context queue in the middle of the second request.
#[test]
fn a_refused_request_does_not_drain_an_accepted_one_with_the_same_sequence_number() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = (z.dev(), z.emu());
    let cq = z.cq();
    // No pin budget: every piece stays queued, unpinned, until the budget is raised.
    dev.set_zerocopy_pin_budget(0);
    let (va, data, mc) = z.source_and_target(4, 12);
    // Request A (sequence 5): two pieces, one op per page.
    let page = |k: u64| BatchOp { offset: k * PAGE, size: PAGE, buffer: va + k * PAGE };
    dev.zerocopy_submit(0, &[page(0), page(1)], &mc, 0, -1, true, 5, 50).unwrap();
    // Fill the queue but one slot: 1023 usable, A holds two.
    let tiny = BatchOp { offset: 3 * PAGE, size: 64, buffer: va + 3 * PAGE };
    for seq in 100..1120u64 {
        dev.zerocopy_submit(0, &[tiny], &mc, 0, -1, true, seq, 0).unwrap();
    }
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 1022);
    // Request B, also sequence 5: its first piece takes the last slot, its second finds the queue full.
    let r = dev.zerocopy_submit(0, &[page(2), page(2)], &mc, 0, -1, true, 5, 51);
    assert_eq!(r, Err(NdmaError::QueueFull { nc: 0 }));
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 1022, "B's queued piece is drained, A's two are not");
    dev.set_zerocopy_pin_budget(1 << 20);
    let got = take(&cq, 1021);
    assert_eq!(got[0], CqEntry { sequence_num: 5, compl_ret: 0, context: 50 }, "A completes");
    assert!(got[1..]
        .iter()
        .zip(100u64..)
        .all(|(e, seq)| *e == CqEntry { sequence_num: seq, compl_ret: 0, context: 0 }));
    assert_eq!(cq.pop(), None, "the refused request posts nothing");
    let back = read_vec(emu, &mc, 0, 4 * PAGE).unwrap();
    assert!(back[..2 * PAGE as usize] == data[..2 * PAGE as usize], "A's pages landed");
    assert!(back[2 * PAGE as usize..3 * PAGE as usize].iter().all(|&b| b == DST_FILL), "B moved nothing");
    z.assert_no_leaks("duplicate sequence numbers");
}

/// The same in the completion thread: a request whose deferred pin fails completes with the error and drains
/// its own pieces only; an accepted request with the same sequence number, pinned just before it, completes.
#[test]
fn a_failed_pin_in_the_completion_thread_drains_only_its_own_request() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = (z.dev(), z.emu());
    let cq = z.cq();
    dev.set_zerocopy_pin_budget(0);
    // Pages 0 and 1 mapped, page 2 a hole.
    let va = z.mm.map(&MapSpec::new(3, Placement::Scattered { seed: 13 }).holes([2])).unwrap();
    let data = pattern(44, 0, 2 * PAGE as usize);
    z.mm.write(va, &data).unwrap();
    let mc = alloc(dev, false, 3 * PAGE, 0).unwrap();
    write_chunk(emu, &mc, 0, &vec![DST_FILL; 3 * PAGE as usize]).unwrap();
    let page = |k: u64| BatchOp { offset: k * PAGE, size: PAGE, buffer: va + k * PAGE };
    dev.zerocopy_submit(0, &[page(0), page(1)], &mc, 0, -1, true, 5, 50).unwrap();
    dev.zerocopy_submit(0, &[page(2)], &mc, 0, -1, true, 5, 51).unwrap();
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 3, "every piece deferred");
    // The thread pins A's two pieces, then fails B's at the hole, in one pass.
    let before = dev.ring_stats(0).unwrap();
    dev.set_zerocopy_pin_budget(1 << 20);
    let got = take(&cq, 2);
    assert_eq!(
        got,
        [
            CqEntry { sequence_num: 5, compl_ret: 0, context: 50 },
            CqEntry { sequence_num: 5, compl_ret: -14, context: 51 }
        ]
    );
    assert_eq!(cq.pop(), None);
    let back = read_vec(emu, &mc, 0, 3 * PAGE).unwrap();
    assert!(back[..2 * PAGE as usize] == data[..], "A's pages landed");
    assert!(back[2 * PAGE as usize..].iter().all(|&b| b == DST_FILL), "B moved nothing");
    let s = dev.ring_stats(0).unwrap().since(&before);
    assert_eq!(
        (s.batches, s.descriptors),
        (2, 4),
        "A's two pieces (a page and the marker each); B issued nothing to fence"
    );
    z.assert_no_leaks("a failed pin beside the same sequence number");
}

/// `submit_completed` has the async gates of a submit (owner, V2, a non-zero sequence number) and, like every
/// async request, never waits for room: a full context queue refuses it, and refuses an async request with
/// nothing to move, with -EBUSY.
#[test]
fn a_request_already_over_is_refused_by_the_gates_and_by_a_full_queue() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let cq = z.cq();
    assert_eq!(dev.zerocopy_submit_completed(0, 1, 1, 0, 0), Err(NdmaError::NotOwner { nc: 0, qid: 1 }));
    assert_eq!(dev.zerocopy_submit_completed(99, -1, 1, 0, 0), Err(NdmaError::NotOwner { nc: 99, qid: -1 }));
    // Sequence number 0 names a synchronous request; its entry would read as an empty slot (a departure: the
    // driver posts it).
    assert_eq!(dev.zerocopy_submit_completed(0, -1, 0, 0, 5), Err(NdmaError::ZeroSequence));
    assert_eq!(NdmaError::ZeroSequence.errno(), -22);
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 0, "nothing queued");
    dev.set_zerocopy_pin_budget(0);
    let va = z.map(1, Placement::Contiguous);
    let mc = alloc(dev, false, PAGE, 0).unwrap();
    let op = BatchOp { offset: 0, size: 64, buffer: va };
    // 1023 usable slots (capacity 1024), each holding a deferred piece.
    for seq in 1..=1023u64 {
        dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, seq, 0).unwrap();
    }
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 1023);
    let busy = NdmaError::QueueFull { nc: 0 };
    assert_eq!(dev.zerocopy_submit_completed(0, -1, 2000, 0, 0), Err(busy.clone()));
    assert_eq!(busy.errno(), -16);
    let nothing = BatchOp { size: 0, ..op };
    assert_eq!(dev.zerocopy_submit(0, &[nothing], &mc, 0, -1, true, 2001, 0), Err(busy.clone()));
    assert_eq!(dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 2002, 0), Err(busy));
    dev.set_zerocopy_pin_budget(1 << 20);
    let got = take(&cq, 1023);
    assert!(got
        .iter()
        .enumerate()
        .all(|(k, e)| *e == CqEntry { sequence_num: k as u64 + 1, compl_ret: 0, context: 0 }));
    assert_eq!(cq.pop(), None, "the refused requests post nothing");
    z.assert_no_leaks("full queue");

    let v2 = Zc::new(Arch::V2, ExecPolicy::Inline);
    assert_eq!(v2.dev().zerocopy_submit_completed(0, -1, 1, 0, 0), Err(NdmaError::AsyncZeroCopyUnsupported));
    v2.assert_no_leaks("V2");
}

#[test]
fn the_pin_budget_holds_and_deferred_pieces_are_pinned_remotely() {
    let z = Zc::new(Arch::V3, ExecPolicy::Threaded);
    let dev = z.dev();
    let cq = z.cq();
    dev.set_zerocopy_pin_budget(128);
    let va = z.map(1024, Placement::Scattered { seed: 12 });
    z.mm.write(va, &pattern(21, 0, 1024 * PAGE as usize)).unwrap();
    let mc = alloc(dev, false, 1024 * PAGE, 0).unwrap();
    let op = BatchOp { offset: 0, size: 1024 * PAGE, buffer: va };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 77, 0).unwrap();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 77, compl_ret: 0, context: 0 }]);
    assert!(read_vec(z.emu(), &mc, 0, 1024 * PAGE).unwrap() == pattern(21, 0, 1024 * PAGE as usize));
    let s = dev.zerocopy_status(0).unwrap();
    assert!(s.peak_pinned_pages <= 128, "{s:?}");
    assert!(z.mm.pin_stats().remote_calls > 0, "pieces over the budget were pinned by the completion thread");
    z.assert_no_leaks("budget");
}

/// A sync request larger than the pin budget pins what fits, then retires its own pieces to make room
/// (`should_wait`), never holding more than the budget pinned; with no budget at all nothing can ever move,
/// and it fails -EBUSY at once instead of waiting forever.
#[test]
fn a_sync_request_over_the_pin_budget_makes_room_from_its_own_pieces() {
    for exec in [ExecPolicy::Inline, ExecPolicy::Threaded] {
        let z = Zc::new(Arch::V3, exec);
        let dev = z.dev();
        let pages = 1024u64;
        let (va, data, mc) = z.source_and_target(pages, 31);
        let op = BatchOp { offset: 0, size: pages * PAGE, buffer: va };
        dev.set_zerocopy_pin_budget(0);
        assert_eq!(dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0), Err(NdmaError::QueueFull { nc: 0 }));
        z.assert_no_leaks("no budget");
        dev.set_zerocopy_pin_budget(128);
        dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0).unwrap();
        assert!(read_vec(z.emu(), &mc, 0, pages * PAGE).unwrap() == data, "{exec:?}");
        let s = dev.zerocopy_status(0).unwrap();
        assert_eq!(s.peak_pinned_pages, 128, "{exec:?}: two 64-page pieces at a time");
        let pins = z.mm.pin_stats();
        assert_eq!((pins.pinned_pages, pins.remote_calls), (pages, 0), "{exec:?}: every page pinned once, locally");
        z.assert_no_leaks("sync over the budget");
    }
}

/// A pin budget below a piece's pages: a sync request that cannot pin its piece and has nothing to retire
/// fails with `QueueFull` (-EBUSY) rather than waiting forever, and leaves nothing behind.
#[test]
fn a_sync_request_whose_piece_exceeds_the_pin_budget_fails_ebusy() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let (va, _, mc) = z.source_and_target(2, 34);
    dev.set_zerocopy_pin_budget(1);
    let op = BatchOp { offset: 0, size: 2 * PAGE, buffer: va };
    assert_eq!(dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0), Err(NdmaError::QueueFull { nc: 0 }));
    assert_eq!(NdmaError::QueueFull { nc: 0 }.errno(), -16);
    assert_eq!(z.mm.pin_stats().pinned_pages, 0, "nothing was pinned");
    z.assert_no_leaks("a piece over the budget");
    dev.set_zerocopy_pin_budget(2);
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0).expect("fits once the budget is raised");
    z.assert_no_leaks("after the budget was raised");
}

/// A request refused before it issued anything (a full context queue at its first piece) leaves the ring
/// alone: none of its writes can be in flight, so no fence batch is staged. It used to stage one (a
/// descriptor and two doorbells) for every refused host → device request.
#[test]
fn a_request_refused_before_issuing_anything_stages_no_fence() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let cq = z.cq();
    let va = z.map(1, Placement::Contiguous);
    let mc = alloc(dev, false, PAGE, 0).unwrap();
    dev.set_zerocopy_pin_budget(0); // every piece waits, deferred: the queue fills
    let op = [BatchOp { offset: 0, size: 1, buffer: va }];
    let usable = u64::from(ndma::zerocopy::NDMA_CTX_QUEUE_DEFAULT_CAPACITY) - 1;
    for seq in 1..=usable {
        dev.zerocopy_submit(0, &op, &mc, 0, -1, true, seq, seq).unwrap();
    }
    let before = dev.ring_stats(0).unwrap();
    assert_eq!(dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 5000, 0), Err(NdmaError::QueueFull { nc: 0 }));
    let moved = dev.ring_stats(0).unwrap().since(&before);
    assert_eq!((moved.descriptors, moved.batches, moved.doorbells, moved.zc_pieces), (0, 0, 0, 0));
    dev.set_zerocopy_pin_budget(1 << 20);
    let got = take(&cq, usable as usize);
    assert!(got.iter().zip(1..).all(|(e, seq)| *e == CqEntry { sequence_num: seq, compl_ret: 0, context: seq }));
    z.assert_no_leaks("a full queue");
}

/// A sync request queued behind an async request whose pieces wait for pin budget moves them first: it pins,
/// issues and retires what is ahead of it (posting that request's completion, exactly once), then its own.
#[test]
fn a_sync_request_behind_deferred_async_pieces_completes_them_in_order() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = (z.dev(), z.emu());
    let cq = z.cq();
    let (va, data, mc) = z.source_and_target(8, 32);
    dev.set_zerocopy_pin_budget(0);
    let first = BatchOp { offset: 0, size: 4 * PAGE, buffer: va };
    dev.zerocopy_submit(0, &[first], &mc, 0, -1, true, 9, 90).unwrap();
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 1, "deferred");
    dev.set_zerocopy_pin_budget(8);
    let second = BatchOp { offset: 4 * PAGE, size: 4 * PAGE, buffer: va + 4 * PAGE };
    dev.zerocopy_submit(0, &[second], &mc, 0, -1, true, 0, 0).unwrap();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 9, compl_ret: 0, context: 90 }]);
    assert_eq!(cq.pop(), None);
    assert!(read_vec(emu, &mc, 0, 8 * PAGE).unwrap() == data);
    z.assert_no_leaks("sync behind deferred async");
}

/// Pins are taken in queue order: a piece queued behind a deferred one is deferred too, even when the budget
/// has room for it. Pinned there, it would hold budget the piece ahead needs while it cannot be issued before
/// that piece (its region's order): with a budget of 100 pages and pieces of 40, 64 and 60 pages, the 40 is
/// pinned, the 64 deferred (104 > 100), and a pinned 60 would leave the 64 short forever once the 40 retired
/// (124 > 100) — an accepted request that never completes.
#[test]
fn a_piece_behind_a_deferred_one_waits_for_it_to_pin_first() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = (z.dev(), z.emu());
    let cq = z.cq();
    let (va, data, mc) = z.source_and_target(164, 33);
    dev.set_zerocopy_pin_budget(100);
    let ops = [
        BatchOp { offset: 0, size: 40 * PAGE, buffer: va },
        BatchOp { offset: 40 * PAGE, size: 64 * PAGE, buffer: va + 40 * PAGE },
        BatchOp { offset: 104 * PAGE, size: 60 * PAGE, buffer: va + 104 * PAGE },
    ];
    dev.zerocopy_submit(0, &ops, &mc, 0, -1, true, 1, 11).unwrap();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 1, compl_ret: 0, context: 11 }]);
    assert!(read_vec(emu, &mc, 0, 164 * PAGE).unwrap() == data);
    assert!(dev.zerocopy_status(0).unwrap().peak_pinned_pages <= 100);
    assert_eq!(z.mm.pin_stats().pinned_pages, 164, "every page pinned once");
    z.assert_no_leaks("pins in queue order");
}

#[test]
fn a_full_completion_queue_holds_completions_back_without_losing_one() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let chunk = dev.completion_queue(0).unwrap();
    let va = z.map(1, Placement::Contiguous);
    let mc = alloc(dev, false, PAGE, 0).unwrap();
    let n = 1100u64;
    let mut busy = 0u64;
    for seq in 1..=n {
        let op = BatchOp { offset: 0, size: 64, buffer: va };
        loop {
            match dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, seq, !seq) {
                Ok(()) => break,
                // The context queue is full: the async path never waits; the completion thread makes room.
                Err(NdmaError::QueueFull { .. }) => {
                    busy += 1;
                    assert!(busy < 50_000_000);
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    // Nobody consumed: 1024 posted, the rest held in the backlog.
    let mut spins = 0u64;
    while dev.zerocopy_status(0).unwrap().contexts > 0 {
        spins += 1;
        assert!(spins < 50_000_000);
        std::thread::yield_now();
    }
    let s = dev.zerocopy_status(0).unwrap();
    assert_eq!(s.backlog, (n - 1024) as usize);
    let cq = CqConsumer::new(&chunk).unwrap();
    assert_eq!(cq.len(), 1024);
    let got = take(&cq, n as usize);
    let expect: Vec<CqEntry> = (1..=n).map(|s| CqEntry { sequence_num: s, compl_ret: 0, context: !s }).collect();
    assert!(got == expect, "every completion, in order");
    z.assert_no_leaks("full CQ");
}

/// A consumer that never consumes cannot make the driver hold completions without bound: once the queue is
/// full and a queue's worth waits behind it, new async requests (and `submit_completed`) are refused with
/// -EBUSY; sync requests, which post nothing, still run; one entry consumed lets one request in again; and
/// every accepted request's completion arrives, in order.
#[test]
fn a_consumer_that_never_consumes_gets_ebusy_once_the_backlog_is_full() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let cq = z.cq();
    let va = z.map(1, Placement::Contiguous);
    z.mm.fill(va, PAGE, 0x3c).unwrap();
    let mc = alloc(dev, false, PAGE, 0).unwrap();
    let op = BatchOp { offset: 0, size: 64, buffer: va };
    let limit = NDMA_H2D_COMPL_QUEUE_CAPACITY as u64 + NDMA_H2D_COMPL_BACKLOG_MAX as u64;
    let wait_idle = || {
        let mut spins = 0u64;
        while dev.zerocopy_status(0).unwrap().contexts > 0 {
            spins += 1;
            assert!(spins < 50_000_000, "the completion thread did not retire every request");
            std::thread::yield_now();
        }
    };
    let mut seq = 0u64;
    let submit = |seq: u64| loop {
        match dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, seq, !seq) {
            // The context queue is full: the completion thread makes room.
            Err(NdmaError::QueueFull { .. }) => std::thread::yield_now(),
            r => break r,
        }
    };
    // Fewer than `limit` accepted leave fewer than a queue's worth behind the full queue: every one is
    // accepted (waiting for the thread only when the context queue fills).
    while seq < limit {
        seq += 1;
        submit(seq).unwrap_or_else(|e| panic!("request {seq}: {e}"));
    }
    wait_idle();
    let s = dev.zerocopy_status(0).unwrap();
    assert_eq!((cq.len() as u64, s.backlog), (1024, NDMA_H2D_COMPL_BACKLOG_MAX));
    let full = NdmaError::CompletionBacklogFull { nc: 0, backlog: NDMA_H2D_COMPL_BACKLOG_MAX };
    assert_eq!(submit(seq + 1), Err(full.clone()));
    assert_eq!(full.errno(), -16);
    assert_eq!(dev.zerocopy_submit_completed(0, -1, seq + 1, 0, 0), Err(full.clone()));
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0).expect("a sync request posts nothing and still runs");
    assert_eq!(dev.zerocopy_status(0).unwrap().backlog, NDMA_H2D_COMPL_BACKLOG_MAX, "refusals added nothing");
    // One consumed: the submit posts one held-back completion into the freed slot and is accepted.
    assert_eq!(cq.pop(), Some(CqEntry { sequence_num: 1, compl_ret: 0, context: !1 }));
    seq += 1;
    submit(seq).expect("room again");
    let got = take(&cq, (seq - 1) as usize);
    assert!(got.iter().zip(2u64..).all(|(e, s)| *e == CqEntry { sequence_num: s, compl_ret: 0, context: !s }));
    assert_eq!(cq.pop(), None, "exactly one completion per accepted request");
    z.assert_no_leaks("backlog full");
}

#[test]
fn consumers_on_several_threads_take_every_completion_once() {
    let z = Zc::new(Arch::V3, ExecPolicy::Threaded);
    let dev = z.dev();
    let chunk = dev.completion_queue(0).unwrap();
    let va = z.map(4, Placement::Contiguous);
    let mc = alloc(dev, false, 4 * PAGE, 0).unwrap();
    let n = 600u64;
    let taken = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..3 {
            let (chunk, taken) = (&chunk, &taken);
            s.spawn(move || {
                let cq = CqConsumer::new(chunk).unwrap();
                let mut spins = 0u64;
                loop {
                    if taken.lock().unwrap().len() as u64 == n {
                        return;
                    }
                    match cq.pop() {
                        Some(e) => taken.lock().unwrap().push(e.sequence_num),
                        None => {
                            spins += 1;
                            assert!(spins < 100_000_000);
                            std::thread::yield_now();
                        }
                    }
                }
            });
        }
        for seq in 1..=n {
            let op = BatchOp { offset: 0, size: 4 * PAGE, buffer: va };
            while let Err(e) = dev.zerocopy_submit(0, &[op], &mc, 0, -1, seq % 2 == 0, seq, 0) {
                assert!(matches!(e, NdmaError::QueueFull { .. }), "{e}");
                std::thread::yield_now();
            }
        }
    });
    let mut got = taken.into_inner().unwrap();
    got.sort_unstable();
    assert_eq!(got, (1..=n).collect::<Vec<_>>(), "each completion taken exactly once");
    z.assert_no_leaks("consumers");
}

/// A completion queue's memory is shared with its producer and every other consumer, all of which access it
/// atomically: its chunk offers no plain CPU access (a copy racing them would be a data race), and a consumer
/// is made only of a completion queue (over other memory it would take a "lock word" that may never be 0,
/// and clear "entries").
#[test]
fn a_completion_queue_is_accessed_only_through_a_consumer() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let chunk = dev.completion_queue(0).unwrap();
    assert!(chunk.is_completion_queue() && chunk.host_buf().is_none() && chunk.cpu_ptr().is_some());
    let mut header = [0u8; 16];
    assert_eq!(chunk.read(0, &mut header), Err(NdmaError::CompletionQueueMemory { what: "host chunk read" }));
    assert_eq!(chunk.write(0, &header), Err(NdmaError::CompletionQueueMemory { what: "host chunk write" }));
    assert_eq!(chunk.fill(12, 4, 0xff), Err(NdmaError::CompletionQueueMemory { what: "host chunk fill" }));
    assert_eq!(NdmaError::CompletionQueueMemory { what: "x" }.errno(), -1);
    let other = dev.alloc_host(ndma::zerocopy::NDMA_H2D_COMPL_QUEUE_SIZE as u64, 0).unwrap();
    other.fill(0, other.size(), 0xff).unwrap();
    assert!(!other.is_completion_queue());
    assert_eq!(CqConsumer::new(&other).err(), Some(NdmaError::NotCompletionQueue));
    assert_eq!(NdmaError::NotCompletionQueue.errno(), -22);
    dev.zerocopy_submit_completed(0, -1, 3, 0, 30).unwrap();
    let cq = CqConsumer::new(&chunk).unwrap();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 3, compl_ret: 0, context: 30 }]);
    z.assert_no_leaks("consumer only");
}

/// A completion queue is no DMA window either, as source or target. A copy into it forged a completion
/// nobody requested and moved the shared tail past the producer's own: the consumer then stood ahead of the
/// producer, whose next completion stayed in its backlog for good (and every later one, until the ring refused
/// async requests with -EBUSY); and the engine's plain reads and writes raced the queue's atomics.
#[test]
fn a_completion_queue_is_refused_as_a_dma_window() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let chunk = dev.completion_queue(0).unwrap();
    let cq = CqConsumer::new(&chunk).unwrap();
    // A header with one entry posted (tail 1), and that entry: a completion nobody requested.
    let mut forged = Vec::new();
    for w in [1024u32, 0, 1, 0] {
        forged.extend_from_slice(&w.to_le_bytes());
    }
    for w in [99u64, 0, 0xdead] {
        forged.extend_from_slice(&w.to_le_bytes());
    }
    let src = dev.alloc_host(forged.len() as u64, 0).unwrap();
    src.write(0, &forged).unwrap();
    let refused = |what| Err(NdmaError::CompletionQueueMemory { what });
    assert_eq!(dev.memcpy_mc(&src, &chunk, 0, 0, 40), refused("destination chunk"));
    let back = dev.alloc_host(40, 0).unwrap();
    assert_eq!(dev.memcpy_mc(&chunk, &back, 0, 0, 40), refused("source chunk"));
    assert_eq!(dev.memset(&chunk, 0, 0xff, 16), refused("memset window"));
    let va = z.map(1, Placement::Contiguous);
    z.mm.write(va, &forged).unwrap();
    let op = BatchOp { offset: 0, size: 40, buffer: va };
    assert_eq!(dev.zerocopy_submit(0, &[op], &chunk, 0, -1, true, 0, 0), refused("zero-copy device chunk"));
    assert_eq!(cq.header(), ndma::zerocopy::CqHeader { capacity: 1024, head: 0, tail: 0, consumer_lock: 0 });
    assert_eq!(cq.pop(), None, "no forged completion");
    dev.zerocopy_submit_completed(0, -1, 3, 0, 30).unwrap();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 3, compl_ret: 0, context: 30 }]);
    z.assert_no_leaks("completion queue as a DMA window");
}

#[test]
fn a_pre_pinned_buffer_is_transferred_again_and_again_without_pinning() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let pages = 300;
    let va = z.map(pages, Placement::Runs { k: 7, seed: 3 });
    let mc = alloc(dev, false, pages as u64 * PAGE, 0).unwrap();
    // A range of ~2^52 pages: its page array cannot be allocated, which is -ENOMEM, not an abort.
    let huge = u64::MAX - va;
    assert_eq!(z.tb.system.pin_host_memory(va, huge), Err(NdmaError::Pin { va, errno: -12 }));
    assert_eq!(z.tb.system.pin_host_memory(va + 10, pages as u64 * PAGE - 10), Ok(None), "not contiguous");
    assert_eq!(
        z.tb.system.pin_host_memory(va + PAGE, 10),
        Err(NdmaError::PinnedRangeExists { va: va + PAGE, existing: va + 10 })
    );
    let pinned_once = z.mm.pin_stats();
    for round in 0..5u8 {
        z.mm.fill(va, pages as u64 * PAGE, round).unwrap();
        let op = BatchOp { offset: 0, size: pages as u64 * PAGE - 20, buffer: va + 10 };
        dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0).unwrap();
        let back = read_vec(z.emu(), &mc, 0, pages as u64 * PAGE - 20).unwrap();
        assert!(back.iter().all(|&b| b == round), "round {round}");
    }
    let s = z.mm.pin_stats();
    assert_eq!((s.fast_calls, s.slow_calls, s.unpinned_pages), (pinned_once.fast_calls, pinned_once.slow_calls, 0));
    assert_eq!(z.tb.emu.host().frames().leak_check().pinned_frames, pages, "the range stays pinned");
    z.tb.system.unpin_host_memory(va + 10).unwrap();
    assert_eq!(z.tb.system.unpin_host_memory(va + 10), Err(NdmaError::NoPinnedRange { va: va + 10 }));
    // FACTS §6 `ndma_pin_host_memory` / `_unpin_`: the errnos, and on physically contiguous pages the range's
    // device address — (first page PA + offset) | pci_host_base.
    let errnos = [
        NdmaError::PinnedRangeExists { va, existing: va }.errno(),
        NdmaError::NoPinnedRange { va }.errno(),
        NdmaError::InvalidPinRange { va: 0, size: 1 }.errno(),
    ];
    assert_eq!(errnos, [-17, -2, -22], "-EEXIST, -ENOENT, -EINVAL");
    assert_eq!(z.tb.system.pin_host_memory(va, 0), Err(NdmaError::InvalidPinRange { va, size: 0 }));
    let cva = z.map(3, Placement::Contiguous);
    let first = z.mm.frames_of(cva, 1)[0].unwrap();
    let pa = z.tb.system.pin_host_memory(cva + 100, 2 * PAGE).unwrap();
    assert_eq!(pa, Some((first + 100) | Arch::V3.pci_host_base()));
    z.tb.system.unpin_host_memory(cva + 100).unwrap();
    z.assert_no_leaks("pre-pinned");
}

/// A pre-pinned range belongs to the address space that registered it, not to its pid: a process that exited
/// without unregistering leaves ranges a new process reusing the pid must never DMA through (they hold the old
/// process's frames). The new process's transfer pins its own pages, and the stale range is released then.
#[test]
fn a_new_process_reusing_a_pid_never_transfers_through_the_old_ones_pre_pinned_pages() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let mc = alloc(dev, false, 8 * PAGE, 0).unwrap();
    let old = AddressSpace::new(z.tb.emu.host(), 777);
    let old_va = {
        let _as_old = old.enter();
        let va = old.map(&MapSpec::new(8, Placement::Scattered { seed: 21 })).unwrap();
        old.fill(va, 8 * PAGE, 0x0d).unwrap();
        z.tb.system.pin_host_memory(va, 8 * PAGE).unwrap();
        va
    };
    old.exit();
    assert_eq!(z.tb.emu.host().frames().leak_check().pinned_frames, 8, "the range outlives the process");
    let new = AddressSpace::new(z.tb.emu.host(), 777);
    let _as_new = new.enter();
    let va = new.map(&MapSpec::new(8, Placement::Scattered { seed: 22 })).unwrap();
    assert_eq!(va, old_va, "the same user addresses, so a lookup by pid and address would match");
    new.fill(va, 8 * PAGE, 0x4e).unwrap();
    let op = BatchOp { offset: 0, size: 8 * PAGE, buffer: va };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0).unwrap();
    assert!(read_vec(z.emu(), &mc, 0, 8 * PAGE).unwrap().iter().all(|&b| b == 0x4e), "the new process's bytes");
    assert_eq!(new.pin_stats().pinned_pages, 8, "its own pages were pinned");
    assert_eq!(z.tb.system.pinned_ranges(), 0, "the stale range is released");
    z.assert_no_leaks("pid reuse");
}

/// A piece over the pin budget that lies in a pre-pinned range waits like any other, then takes a reference on
/// the range in the completion thread: no remote pin, nothing unpinned, and the range stays registered.
#[test]
fn a_deferred_piece_in_a_pre_pinned_range_takes_a_reference_instead_of_a_remote_pin() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let cq = z.cq();
    let pages = 100;
    let len = pages as u64 * PAGE;
    let va = z.map(pages, Placement::Scattered { seed: 6 });
    let mc = alloc(dev, false, len, 0).unwrap();
    z.tb.system.pin_host_memory(va, len).unwrap();
    let pinned_once = z.mm.pin_stats();
    let data = pattern(55, 0, len as usize);
    write_chunk(z.emu(), &mc, 0, &data).unwrap();
    z.mm.fill(va, len, DST_FILL).unwrap();
    dev.set_zerocopy_pin_budget(0);
    let op = BatchOp { offset: 0, size: len, buffer: va };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, false, 9, 90).unwrap();
    let s = dev.zerocopy_status(0).unwrap();
    assert_eq!((u64::from(s.contexts), s.pinned_pages), (pieces(len, 0), 0), "every piece deferred");
    assert_eq!(cq.pop(), None);
    dev.set_zerocopy_pin_budget(1 << 20);
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 9, compl_ret: 0, context: 90 }]);
    let mut back = vec![0u8; len as usize];
    z.mm.read(va, &mut back).unwrap();
    assert!(back == data, "the device's bytes reached the user pages");
    let s = z.mm.pin_stats();
    let calls = |s: &ndma_emu::user::PinStats| (s.fast_calls, s.slow_calls, s.remote_calls, s.unpinned_pages);
    assert_eq!(calls(&s), calls(&pinned_once), "no pin and no unpin besides the range's own");
    assert_eq!(z.tb.emu.host().frames().leak_check().pinned_frames, pages, "the range stays pinned");
    z.tb.system.unpin_host_memory(va).unwrap();
    z.assert_no_leaks("deferred pre-pinned");
}

#[test]
fn a_sync_hang_times_out_after_exactly_the_async_budget() {
    let z = Zc::with(Arch::V3, ExecPolicy::Inline, ClockKind::Fake);
    let dev = z.dev();
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let va = z.map(2, Placement::Scattered { seed: 9 });
    let mc = alloc(dev, false, 2 * PAGE, 0).unwrap();
    z.emu().fault_plan().add(ndma_emu::PlannedFault::Hang { engine: eng, qid, persistent: false });
    let t0 = ndma::Platform::now_us(&*z.tb.platform);
    let op = [BatchOp { offset: 0, size: 2 * PAGE, buffer: va }];
    let err = dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 0, 0).unwrap_err();
    // 2 scattered pages: 2 data descriptors + the marker; the sync drain waits with the async budget.
    let budget = dev.dhal().wait_budget(3, true);
    let polls = budget.following_us + 2;
    assert_eq!(err, NdmaError::Timeout { eng, qid, count: 3, polls, state: ndma::RingSnapshot::NONE });
    assert_eq!(ndma::Platform::now_us(&*z.tb.platform) - t0, budget.first_wait_us + polls);
    z.assert_no_leaks("sync hang");
    dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 0, 0).unwrap();
}

/// A zero-copy request that fails re-initialises its ring; a classic async copy in flight on it is re-staged
/// and completes, byte-exact: the failure costs only the request that reports it.
#[test]
fn a_zero_copy_failure_restages_the_classic_copy_in_flight_on_its_ring() {
    let z = Zc::with(Arch::V3, ExecPolicy::Inline, ClockKind::Fake);
    let (dev, emu) = (z.dev(), z.emu());
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let (va, _, mc) = z.source_and_target(2, 11);
    let w = Window::new(dev, emu, Dir::D2h, 70_000, 0, 12).unwrap();
    // The classic copy takes the (one-shot) hang; the zero-copy request staged behind it times out.
    emu.fault_plan().add(ndma_emu::PlannedFault::Hang { engine: eng, qid, persistent: false });
    let h = dev.start(&w.transfer()).unwrap();
    let op = [BatchOp { offset: 0, size: 2 * PAGE, buffer: va }];
    let err = dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 0, 0).unwrap_err();
    assert!(matches!(err, NdmaError::Timeout { count: 3, .. }), "{err}");
    assert!(
        read_vec(emu, &mc, 0, 2 * PAGE).unwrap().iter().all(|&b| b == DST_FILL),
        "the failed request moved nothing"
    );
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.replays, s.aborts), (1, 1, 0), "{s:?}");
    h.wait().unwrap();
    w.verify("the classic copy re-staged by the zero-copy recovery", true).unwrap();
    z.assert_no_leaks("after the re-staged copy");
}

#[test]
fn async_zero_copy_and_classic_copies_share_a_ring() {
    let z = Zc::new(Arch::V3, ExecPolicy::Threaded);
    let (dev, emu) = (z.dev(), z.emu());
    let cq = z.cq();
    let va = z.map(64, Placement::Scattered { seed: 8 });
    z.mm.write(va, &pattern(5, 0, 64 * PAGE as usize)).unwrap();
    let zc_mc: Arc<MemChunk> = alloc(dev, false, 64 * PAGE, 0).unwrap();
    let w = Window::new(dev, emu, Dir::H2d, 1 << 20, 0, 6).unwrap();
    for seq in 1..=20u64 {
        let op = BatchOp { offset: 0, size: 64 * PAGE, buffer: va };
        dev.zerocopy_submit(0, &[op], &zc_mc, 0, -1, true, seq, 0).unwrap();
        w.copy_all().unwrap();
    }
    let got = take(&cq, 20);
    assert!(got.iter().enumerate().all(|(i, e)| e.sequence_num == i as u64 + 1 && e.compl_ret == 0));
    w.verify("classic copies between zero-copy requests", true).unwrap();
    assert!(read_vec(emu, &zc_mc, 0, 64 * PAGE).unwrap() == pattern(5, 0, 64 * PAGE as usize));
    z.assert_no_leaks("shared ring");
}

/// Zero-copy pieces issue while the ring has room for one more (65 slots), so one async request can leave
/// the ring nearly full; a classic copy on the same ring then needs more slots than are free. It makes room by
/// retiring the zero-copy pieces ahead of it (their completions are posted as the completion thread would),
/// instead of failing to stage — a failure nobody injected. (The completion thread may retire the pieces
/// first — then there is room anyway — so the scenario runs four times: before the fix, the copy failed to
/// stage in two runs of three.)
#[test]
fn a_classic_copy_behind_a_ring_full_of_zero_copy_pieces_makes_room() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = (z.dev(), z.emu());
    let cq = z.cq();
    // 130 pieces of 64 scattered pages: 65 slots each, 125 of them fill the 8176 free slots to 51.
    let pages = 130 * 64;
    let (va, data, zc_mc) = z.source_and_target(pages, 41);
    let w = Window::new(dev, emu, Dir::H2d, 4 << 20, 0, 42).unwrap();
    let op = BatchOp { offset: 0, size: pages * PAGE, buffer: va };
    for seq in 1..=4 {
        dev.zerocopy_submit(0, &[op], &zc_mc, 0, -1, true, seq, 10 * seq).unwrap();
        // 64 data descriptors and the marker: more than the ring has free right after the submit.
        w.copy_all().unwrap();
        w.verify("a 4 MiB classic copy behind the zero-copy pieces", true).unwrap();
        assert_eq!(take(&cq, 1), [CqEntry { sequence_num: seq, compl_ret: 0, context: 10 * seq }]);
    }
    assert!(read_vec(emu, &zc_mc, 0, pages * PAGE).unwrap() == data);
    assert_eq!(dev.ring_stats(0).unwrap().timeouts, 0);
    z.assert_no_leaks("classic behind zero-copy");
}

/// A device outlives its `System` when a caller keeps it, but dropping the system stopped its completion
/// thread: an async request, which only that thread completes, is refused (`-ENODEV`) instead of being queued
/// where nothing would ever complete it (the stopped thread used to be started again still stopping, and it
/// left at once); a sync request still works.
#[test]
fn a_device_kept_past_its_system_refuses_async_requests_and_serves_sync_ones() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let Zc { tb, mm, _enter } = z;
    let ndma_emu::Testbed { system, platform, emu } = tb;
    let dev = Arc::clone(&system.devices()[0]);
    drop(system);
    let va = mm.map(&MapSpec::new(64, Placement::Scattered { seed: 3 })).unwrap();
    mm.write(va, &pattern(44, 0, 64 * PAGE as usize)).unwrap();
    let mc = alloc(&dev, false, 64 * PAGE, 0).unwrap();
    let op = [BatchOp { offset: 0, size: 64 * PAGE, buffer: va }];
    let err = dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 5, 50).unwrap_err();
    assert_eq!((err.clone(), err.errno()), (NdmaError::CompletionThreadStopped { device: 0 }, -19));
    assert_eq!(dev.zerocopy_submit_completed(0, -1, 6, 0, 60), Err(err));
    assert!(!dev.zerocopy_status(0).unwrap().thread_running);
    dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 0, 0).unwrap();
    assert!(read_vec(emu.device(0), &mc, 0, 64 * PAGE).unwrap() == pattern(44, 0, 64 * PAGE as usize));
    let s = dev.zerocopy_status(0).unwrap();
    assert_eq!((s.contexts, s.pinned_pages), (0, 0));
    drop((mc, dev, platform));
    let leak = emu.host().frames().leak_check();
    assert!(leak.is_clean(), "{leak:?}");
    drop((mm, _enter));
}

/// Completions held in the backlog behind a full queue when the System drops are not waited for (nobody
/// might ever consume them) and not lost either: they stay with the ring of the device kept past it, counted,
/// and a later sync submit posts them, in order, into the room consumers made.
#[test]
fn a_backlog_left_when_the_system_drops_is_posted_by_a_later_sync_submit() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let Zc { tb, mm, _enter } = z;
    let ndma_emu::Testbed { system, platform, emu } = tb;
    let dev = Arc::clone(&system.devices()[0]);
    let cq = CqConsumer::new(&dev.completion_queue(0).unwrap()).unwrap();
    let va = mm.map(&MapSpec::new(1, Placement::Contiguous)).unwrap();
    mm.fill(va, PAGE, 0x5d).unwrap();
    let mc = alloc(&dev, false, PAGE, 0).unwrap();
    let op = [BatchOp { offset: 0, size: 64, buffer: va }];
    let n = NDMA_H2D_COMPL_QUEUE_CAPACITY as u64 + 5;
    for seq in 1..=n {
        loop {
            match dev.zerocopy_submit(0, &op, &mc, 0, -1, true, seq, !seq) {
                // The context queue is full: the completion thread makes room.
                Err(NdmaError::QueueFull { .. }) => std::thread::yield_now(),
                r => break r.unwrap_or_else(|e| panic!("request {seq}: {e}")),
            }
        }
    }
    let mut spins = 0u64;
    while dev.zerocopy_status(0).unwrap().contexts > 0 {
        spins += 1;
        assert!(spins < 50_000_000, "the completion thread did not retire every request");
        std::thread::yield_now();
    }
    drop(system);
    let s = dev.zerocopy_status(0).unwrap();
    assert_eq!((cq.len(), s.backlog, s.thread_running), (1024, 5, false), "the stop left the backlog as it was");
    // Three consumed: nothing posts into the room until a submit on the ring.
    let first = take(&cq, 3);
    assert!(first == (1..=3).map(|s| CqEntry { sequence_num: s, compl_ret: 0, context: !s }).collect::<Vec<_>>());
    assert_eq!((cq.len(), dev.zerocopy_status(0).unwrap().backlog), (1021, 5));
    dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 0, 0).unwrap();
    assert_eq!((cq.len(), dev.zerocopy_status(0).unwrap().backlog), (1024, 2), "three posted, in the room made");
    let got = take(&cq, 1024);
    assert!(got.iter().zip(4u64..).all(|(e, s)| *e == CqEntry { sequence_num: s, compl_ret: 0, context: !s }));
    assert_eq!(got.last().map(|e| e.sequence_num), Some(n - 2));
    dev.zerocopy_submit(0, &op, &mc, 0, -1, true, 0, 0).unwrap();
    let rest = take(&cq, 2);
    assert!(rest == [n - 1, n].map(|s| CqEntry { sequence_num: s, compl_ret: 0, context: !s }));
    assert_eq!((cq.pop(), dev.zerocopy_status(0).unwrap().backlog), (None, 0), "each completion exactly once");
    assert!(read_vec(emu.device(0), &mc, 0, 64).unwrap() == vec![0x5d; 64]);
    drop((mc, cq, dev, platform));
    let leak = emu.host().frames().leak_check();
    assert!(leak.is_clean(), "{leak:?}");
    drop((mm, _enter));
}

/// A System dropped while async pieces cannot move (a pin budget of 0) ends each of their requests with one
/// `-ENODEV` completion, in order, and releases them: nothing stays queued or pinned on the device kept past
/// it, and raising the budget afterwards brings nothing back to life.
#[test]
fn requests_that_cannot_move_when_the_system_drops_complete_with_enodev() {
    let z = Zc::new(Arch::V3, ExecPolicy::Threaded);
    let dev = Arc::clone(z.dev());
    let cq = z.cq();
    dev.set_zerocopy_pin_budget(0);
    let (va, data, mc) = z.source_and_target(128, 12);
    for seq in 1..=3u64 {
        let op = BatchOp { offset: 0, size: 128 * PAGE, buffer: va };
        dev.zerocopy_submit(0, &[op], &mc, 0, -1, seq != 2, seq, 10 * seq).unwrap();
    }
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 6, "two pieces a request, none pinned");
    let before = dev.ring_stats(0).unwrap();
    let Zc { tb, mm, _enter } = z;
    let ndma_emu::Testbed { system, platform, emu } = tb;
    drop(system);
    let want: Vec<CqEntry> =
        (1..=3u64).map(|seq| CqEntry { sequence_num: seq, compl_ret: -19, context: 10 * seq }).collect();
    assert_eq!(take(&cq, 3), want);
    assert_eq!(cq.pop(), None, "one completion a request");
    let s = dev.ring_stats(0).unwrap().since(&before);
    assert_eq!((s.cqes, s.zc_pieces, s.descriptors), (3, 0, 0), "nothing was issued");
    assert!(dev.zerocopy_status(0).unwrap().is_idle(), "{:?}", dev.zerocopy_status(0));
    let leak = emu.host().frames().leak_check();
    assert!(leak.is_clean(), "with the device still alive: {leak:?}");
    dev.set_zerocopy_pin_budget(1 << 20);
    assert_eq!(cq.pop(), None);
    let hbm = read_vec(emu.device(0), &mc, 0, 128 * PAGE).unwrap();
    assert!(hbm.iter().all(|&b| b == DST_FILL), "nothing reached the device");
    let mut back = vec![0u8; data.len()];
    mm.read(va, &mut back).unwrap();
    assert!(back == data, "nothing reached the user pages");
    drop((cq, mc, dev, platform, emu, mm, _enter));
}

#[test]
fn dropping_the_device_with_pieces_that_cannot_move_releases_them() {
    let z = Zc::new(Arch::V3, ExecPolicy::Threaded);
    let dev = z.dev();
    dev.set_zerocopy_pin_budget(0);
    let va = z.map(64, Placement::Contiguous);
    let mc = alloc(dev, false, 64 * PAGE, 0).unwrap();
    for seq in 1..=3u64 {
        dev.zerocopy_submit(0, &[BatchOp { offset: 0, size: 64 * PAGE, buffer: va }], &mc, 0, -1, true, seq, 0)
            .unwrap();
    }
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 3);
    drop(mc);
    let Zc { tb, mm, _enter } = z;
    let host = Arc::clone(tb.emu.host());
    drop(tb);
    let leak = host.frames().leak_check();
    assert!(leak.is_clean(), "{leak:?}");
    drop((mm, _enter));
}

/// Pages are unpinned dirty exactly when the device wrote them: after a device → host transfer, never after a
/// host → device one — on the fast path of a sync submit and on the remote pin of a deferred async piece.
#[test]
fn only_the_pages_the_device_wrote_are_unpinned_dirty() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let cq = z.cq();
    let va = z.map(32, Placement::Scattered { seed: 41 });
    let mc = alloc(dev, false, 32 * PAGE, 0).unwrap();
    let dirty = |from: usize, n: usize| -> Vec<bool> {
        (from..from + n).map(|p| z.mm.page(va + p as u64 * PAGE).unwrap().dirty).collect()
    };
    let stats = |s: ndma_emu::user::PinStats| (s.fast_calls, s.remote_calls, s.unpinned_pages, s.dirty_unpins);
    // Sync, fast path: pages 0..8 to the device, pages 8..16 from it.
    dev.zerocopy_submit(0, &[BatchOp { offset: 0, size: 8 * PAGE, buffer: va }], &mc, 0, -1, true, 0, 0).unwrap();
    assert_eq!(stats(z.mm.pin_stats()), (1, 0, 8, 0), "host → device: unpinned clean");
    let op = BatchOp { offset: 0, size: 8 * PAGE, buffer: va + 8 * PAGE };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, false, 0, 0).unwrap();
    assert_eq!(stats(z.mm.pin_stats()), (2, 0, 16, 8), "device → host: unpinned dirty");
    // Async and deferred (no pin budget): pinned remotely by the completion thread, pages 16..24 to the
    // device, pages 24..32 from it.
    dev.set_zerocopy_pin_budget(0);
    let op = BatchOp { offset: 0, size: 8 * PAGE, buffer: va + 16 * PAGE };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 1, 0).unwrap();
    let op = BatchOp { offset: 8 * PAGE, size: 8 * PAGE, buffer: va + 24 * PAGE };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, false, 2, 0).unwrap();
    dev.set_zerocopy_pin_budget(1 << 20);
    let done = |seq| CqEntry { sequence_num: seq, compl_ret: 0, context: 0 };
    assert_eq!(take(&cq, 2), [done(1), done(2)]);
    assert_eq!(stats(z.mm.pin_stats()), (2, 2, 32, 16), "remote pins: the same rule");
    let expect: Vec<bool> = [false, true, false, true].iter().flat_map(|&d| [d; 8]).collect();
    assert_eq!(dirty(0, 32), expect, "the frames the device wrote, and only those, are dirty");
    z.assert_no_leaks("dirty unpins");
}

/// A piece that starts in a pre-pinned range but runs past its last page is not covered by it: it pins its
/// own pages (all of them), and the range is left as it was.
#[test]
fn a_piece_running_one_page_past_a_pre_pinned_range_pins_its_own_pages() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let (va, data, mc) = z.source_and_target(8, 43);
    z.tb.system.pin_host_memory(va, 4 * PAGE).unwrap();
    let before = z.mm.pin_stats();
    let op = BatchOp { offset: 0, size: 5 * PAGE, buffer: va };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0).unwrap();
    let s = z.mm.pin_stats();
    assert_eq!((s.pinned_pages - before.pinned_pages, s.unpinned_pages - before.unpinned_pages), (5, 5));
    let back = read_vec(z.emu(), &mc, 0, 8 * PAGE).unwrap();
    assert!(back[..5 * PAGE as usize] == data[..5 * PAGE as usize], "five pages moved");
    assert!(back[5 * PAGE as usize..].iter().all(|&b| b == DST_FILL), "and nothing more");
    // Inside the range: a reference, no pin.
    let op = BatchOp { offset: 0, size: 4 * PAGE, buffer: va };
    dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0).unwrap();
    assert_eq!(z.mm.pin_stats().pinned_pages, s.pinned_pages, "covered by the range");
    assert_eq!(z.tb.system.pinned_ranges(), 1);
    z.tb.system.unpin_host_memory(va).unwrap();
    z.assert_no_leaks("past a pre-pinned range");
}

/// The completion thread pins a deferred piece through the address space that submitted it, which may have
/// exited since, its pid reused by a new process. Looking for pre-pinned pages on its behalf must not take the
/// new process's ranges for stale ones and release them: only a lookup for the calling task does that.
#[test]
fn a_deferred_piece_of_an_exited_process_leaves_the_ranges_of_its_pids_new_owner_registered() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let cq = z.cq();
    let mc = alloc(dev, false, 8 * PAGE, 0).unwrap();
    let old = AddressSpace::new(z.tb.emu.host(), 777);
    dev.set_zerocopy_pin_budget(0);
    {
        let _as_old = old.enter();
        let va = old.map(&MapSpec::new(8, Placement::Scattered { seed: 44 })).unwrap();
        let op = BatchOp { offset: 0, size: 8 * PAGE, buffer: va };
        dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 1, 10).unwrap();
    }
    old.exit();
    let new = AddressSpace::new(z.tb.emu.host(), 777);
    let _as_new = new.enter();
    let va = new.map(&MapSpec::new(8, Placement::Scattered { seed: 45 })).unwrap();
    z.tb.system.pin_host_memory(va, 8 * PAGE).unwrap();
    dev.set_zerocopy_pin_budget(1 << 20);
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 1, compl_ret: -3, context: 10 }], "-ESRCH: it exited");
    assert_eq!(z.tb.system.pinned_ranges(), 1, "the new process's range stays registered");
    assert_eq!((new.pin_stats().pinned_pages, new.pin_stats().unpinned_pages), (8, 0));
    z.tb.system.unpin_host_memory(va).unwrap();
    assert_eq!(new.pin_stats().unpinned_pages, 8);
    z.assert_no_leaks("pid reuse, deferred");
}

/// A hang of one piece of a multi-piece async request fails the whole request with one completion: the
/// request's other pieces — re-queued by the ring's re-initialisation — are drained, not re-issued (their last
/// piece would post a second completion), and the request behind it completes.
#[test]
fn a_hang_in_a_multi_piece_async_request_completes_it_once() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let dev = z.dev();
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let cq = z.cq();
    let (va, data, mc) = z.source_and_target(200, 46);
    z.emu().fault_plan().add(ndma_emu::PlannedFault::Hang { engine: eng, qid, persistent: false });
    let first = BatchOp { offset: 0, size: 192 * PAGE, buffer: va };
    assert_eq!(pieces(first.size, 0), 3);
    dev.zerocopy_submit(0, &[first], &mc, 0, -1, true, 1, 10).unwrap();
    let second = BatchOp { offset: 192 * PAGE, size: 8 * PAGE, buffer: va + 192 * PAGE };
    dev.zerocopy_submit(0, &[second], &mc, 0, -1, true, 2, 20).unwrap();
    let got = take(&cq, 2);
    assert_eq!(
        got,
        [
            CqEntry { sequence_num: 1, compl_ret: -110, context: 10 },
            CqEntry { sequence_num: 2, compl_ret: 0, context: 20 }
        ]
    );
    let back = read_vec(z.emu(), &mc, 192 * PAGE, 8 * PAGE).unwrap();
    assert!(back == data[(192 * PAGE) as usize..], "the request behind it landed");
    z.assert_no_leaks("multi-piece hang");
    assert_eq!(cq.pop(), None, "one completion per request");
}

/// FACTS §6 `ndma_pin_host_memory`: a pin that gets only part of the range is `-EFAULT` (unpinned first);
/// `-ENOMEM` is the page array that cannot be allocated.
#[test]
fn a_pre_pin_that_gets_only_part_of_its_range_is_efault() {
    let z = Zc::new(Arch::V3, ExecPolicy::Inline);
    let va = z.mm.map(&MapSpec::new(8, Placement::Contiguous).holes([5])).unwrap();
    assert_eq!(z.tb.system.pin_host_memory(va, 8 * PAGE), Err(NdmaError::Pin { va: va + 5 * PAGE, errno: -14 }));
    assert_eq!(z.tb.system.pinned_ranges(), 0);
    z.assert_no_leaks("partial pre-pin");
}

/// The model's platform, except that once armed its delays panic on the completion thread of device 0: a
/// platform bug (the op layer calls into a safe trait a user may implement) killing that thread.
struct PanickingDelays {
    inner: Arc<ndma_emu::EmuPlatform>,
    armed: std::sync::atomic::AtomicBool,
}

impl PanickingDelays {
    fn check(&self) {
        let on_thread = std::thread::current().name().is_some_and(|n| n.starts_with("ndma cmpltn d0"));
        if on_thread && self.armed.load(std::sync::atomic::Ordering::Relaxed) {
            panic!("injected: a platform delay panicked on the completion thread");
        }
    }
}

impl ndma::Platform for PanickingDelays {
    fn jiffies(&self) -> u64 {
        self.inner.jiffies()
    }
    fn now_us(&self) -> u64 {
        self.inner.now_us()
    }
    fn udelay(&self, us: u64) {
        self.check();
        self.inner.udelay(us);
    }
    fn delay_until(&self, word: &std::sync::atomic::AtomicU32, value: u32, us: u64) -> bool {
        self.check();
        self.inner.delay_until(word, value, us)
    }
    fn is_emulation(&self) -> bool {
        self.inner.is_emulation()
    }
    fn alloc_coherent(&self, len: usize) -> ndma::Result<ndma::HostBuf> {
        self.inner.alloc_coherent(len)
    }
    fn virt_to_phys(&self, cpu: *const u8, len: usize) -> Option<u64> {
        self.inner.virt_to_phys(cpu, len)
    }
    fn current_mm(&self) -> Option<Arc<dyn ndma::UserMm>> {
        self.inner.current_mm()
    }
}

/// A completion thread that dies (here: a platform delay panics on it) leaves no async request queued where
/// nothing would complete it: later async submits are refused with `-EIO`, the status stops showing the
/// thread running, and the request it had accepted is retired — its completion posted, its pins released — by
/// the next synchronous submit on its ring. The thread used to count as running for as long as its join
/// handle existed, so async requests kept being accepted and never completed.
#[test]
fn a_completion_thread_that_died_refuses_async_requests_and_a_sync_submit_completes_what_it_left() {
    let cfg = testbed_config(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Real);
    let emu = cfg.model().unwrap();
    let inner = Arc::clone(emu.platform());
    let platform = Arc::new(PanickingDelays { inner: Arc::clone(&inner), armed: false.into() });
    let hw = emu.devices().iter().map(ndma_emu::device_hw).collect::<Result<Vec<_>, _>>().unwrap();
    let system = ndma::System::new(Arch::V3, platform.clone(), hw).unwrap();
    // The op layer runs on the wrapper; the testbed's `platform` is the model's, which the wrapper forwards to.
    let z = Zc::on(Testbed { system, platform: inner, emu });
    let (dev, cq) = (z.dev(), z.cq());
    let (va, data, mc) = z.source_and_target(2, 31);
    let op = |page: u64| [BatchOp { offset: page * PAGE, size: PAGE, buffer: va + page * PAGE }];
    platform.armed.store(true, std::sync::atomic::Ordering::Relaxed);
    dev.zerocopy_submit(0, &op(0), &mc, 0, -1, true, 7, 70).unwrap();
    let mut spins = 0u64;
    while dev.zerocopy_status(0).unwrap().thread_running {
        spins += 1;
        assert!(spins < 50_000_000, "the completion thread never ran into the injected panic");
        std::thread::yield_now();
    }
    let died = NdmaError::CompletionThreadPanicked { device: 0 };
    assert_eq!(dev.zerocopy_submit(0, &op(1), &mc, 0, -1, true, 8, 80), Err(died.clone()));
    assert_eq!(died.errno(), -5, "-EIO");
    assert_eq!(dev.zerocopy_submit_completed(0, -1, 9, 0, 90), Err(died));
    assert_eq!((cq.len(), dev.zerocopy_status(0).unwrap().contexts), (0, 1), "request 7 is left queued");
    // The synchronous path does not need the thread, and retires what was queued ahead of it first.
    dev.zerocopy_submit(0, &op(1), &mc, 0, -1, true, 0, 0).unwrap();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 7, compl_ret: 0, context: 70 }]);
    assert_eq!(cq.pop(), None, "nothing for the refused requests");
    assert!(read_vec(z.emu(), &mc, 0, 2 * PAGE).unwrap() == data);
    z.assert_no_leaks("after the completion thread died");
}
