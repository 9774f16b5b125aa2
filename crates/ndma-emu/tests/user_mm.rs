//! User address spaces: placement policies give exactly the frames they promise, CPU access goes through
//! the page table, and pinning behaves as the kernel's (fast/slow paths, short pins, holes, read-only pages,
//! exit with pins outstanding, dirty marking, planned pin faults). Every test ends with the leak check.

use std::collections::HashSet;
use std::sync::Arc;

use ndma::{NdmaError, Platform, UserMm, PAGE_SIZE};
use ndma_emu::test_utils::pattern;
use ndma_emu::user::{current, FrameInfo};
use ndma_emu::{
    AddressSpace, ClockKind, EmuPlatform, HostMemory, MapSpec, MmError, PinFault, PinPath, Placement, HOST_DRAM_BASE,
};
use udma::DmaMemory;

const PAGE: u64 = PAGE_SIZE;
const EFAULT: i32 = -14;
const EINVAL: i32 = -22;
const ENOMEM: i32 = -12;
const ESRCH: i32 = -3;

fn host() -> Arc<HostMemory> {
    Arc::new(HostMemory::new(256 << 20).expect("host DRAM"))
}

/// Frames of `n` pages from `va`, all mapped.
fn frames(mm: &AddressSpace, va: u64, n: usize) -> Vec<u64> {
    mm.frames_of(va, n).into_iter().map(|f| f.expect("mapped")).collect()
}

/// Lengths (in pages) of the runs of physically consecutive frames.
fn run_lengths(frames: &[u64]) -> Vec<usize> {
    let mut runs: Vec<usize> = Vec::new();
    for (i, &pa) in frames.iter().enumerate() {
        if i > 0 && frames[i - 1] + PAGE == pa {
            *runs.last_mut().expect("a run is open") += 1;
        } else {
            runs.push(1);
        }
    }
    runs
}

fn assert_clean(host: &HostMemory) {
    let leaks = host.frames().leak_check();
    assert!(leaks.is_clean(), "leak check failed: {leaks:?}");
}

fn pin_err(r: ndma::Result<usize>) -> (u64, i32) {
    match r {
        Err(NdmaError::Pin { va, errno }) => (va, errno),
        other => panic!("expected a pin error, got {other:?}"),
    }
}

#[test]
fn contiguous_placement_is_one_run_of_zeroed_frames() {
    let host = host();
    let free0 = host.free_bytes();
    let mm = AddressSpace::new(&host, 100);
    let va = mm.map(&MapSpec::new(40, Placement::Contiguous)).unwrap();
    assert_eq!(va % PAGE, 0);
    let f = frames(&mm, va, 40);
    assert_eq!(f[0] % PAGE, 0);
    assert!(f[0] >= HOST_DRAM_BASE);
    for (i, &pa) in f.iter().enumerate() {
        assert_eq!(pa, f[0] + i as u64 * PAGE, "page {i}");
    }
    assert_eq!(host.free_bytes(), free0 - 40 * PAGE, "exactly the frames, no more");
    let mut back = vec![0xEEu8; 40 * PAGE as usize];
    mm.read(va, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0), "a fresh mapping reads zero");
    assert_eq!(mm.frames_of(va + 40 * PAGE, 1), vec![None], "the guard page after the mapping is a hole");
    drop(mm);
    assert_eq!(host.free_bytes(), free0, "dropping the address space frees its frames");
    assert_clean(&host);
}

#[test]
fn runs_of_k_coalesce_into_exactly_the_promised_runs() {
    let host = host();
    let mm = AddressSpace::new(&host, 101);
    for (pages, k) in [(100usize, 8usize), (64, 16), (5, 7), (33, 1)] {
        let va = mm.map(&MapSpec::new(pages, Placement::Runs { k, seed: 7 })).unwrap();
        let f = frames(&mm, va, pages);
        let k = k.min(pages);
        let mut want = vec![k; pages / k];
        if pages % k != 0 {
            want.push(pages % k);
        }
        assert_eq!(run_lengths(&f), want, "{pages} pages in runs of {k}");
        assert_eq!(f.iter().collect::<HashSet<_>>().len(), pages, "distinct frames");
        assert!(f.iter().all(|pa| pa % PAGE == 0));
    }
    drop(mm);
    assert_clean(&host);
}

#[test]
fn scattered_placement_never_puts_consecutive_pages_on_consecutive_frames() {
    let host = host();
    let mm = AddressSpace::new(&host, 102);
    let va = mm.map(&MapSpec::new(500, Placement::Scattered { seed: 42 })).unwrap();
    let f = frames(&mm, va, 500);
    assert_eq!(run_lengths(&f), vec![1; 500]);
    assert_eq!(f.iter().collect::<HashSet<_>>().len(), 500);
    // Spread over a bounded window, not sorted: some page lies below its predecessor.
    let (lo, hi) = (f.iter().min().unwrap(), f.iter().max().unwrap());
    assert!(hi - lo < 4 * 500 * PAGE);
    assert!(f.windows(2).any(|w| w[1] < w[0]));
    drop(mm);
    assert_clean(&host);
}

#[test]
fn seeded_placements_are_reproducible() {
    let place = |placement| {
        let host = host();
        let _before = host.alloc(12345, 256).unwrap(); // same allocation history on both hosts
        let mm = AddressSpace::new(&host, 1);
        let va = mm.map(&MapSpec::new(300, placement)).unwrap();
        frames(&mm, va, 300)
    };
    for placement in [Placement::Scattered { seed: 9 }, Placement::Runs { k: 4, seed: 9 }] {
        assert_eq!(place(placement), place(placement), "{placement:?}");
    }
    assert_ne!(place(Placement::Scattered { seed: 9 }), place(Placement::Scattered { seed: 10 }));

    // Unmapping gives every frame back, so mapping again with the same seed gets the same frames — zeroed.
    let host = host();
    let mm = AddressSpace::new(&host, 2);
    let spec = MapSpec::new(64, Placement::Scattered { seed: 3 });
    let va = mm.map(&spec).unwrap();
    let first = frames(&mm, va, 64);
    mm.fill(va, 64 * PAGE, 0x77).unwrap();
    mm.unmap(va, 64 * PAGE).unwrap();
    assert_eq!(mm.mapped_pages(), 0);
    let va2 = mm.map(&spec).unwrap();
    assert_ne!(va2, va, "a new mapping gets a new address");
    assert_eq!(frames(&mm, va2, 64), first);
    let mut back = vec![1u8; 64 * PAGE as usize];
    mm.read(va2, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0), "a reused frame is zeroed again");
    drop(mm);
    assert_clean(&host);
}

#[test]
fn cpu_access_goes_through_the_page_table() {
    let host = host();
    let mm = AddressSpace::new(&host, 103);
    let pages = 6;
    let va = mm.map(&MapSpec::new(pages, Placement::Scattered { seed: 5 })).unwrap();
    let f = frames(&mm, va, pages);
    // A window from offset 1 to 1 byte before the end, crossing every page boundary.
    let len = pages * PAGE as usize - 2;
    let data = pattern(3, 0, len);
    mm.fill(va, pages as u64 * PAGE, 0xAB).unwrap();
    mm.write(va + 1, &data).unwrap();
    let mut whole = vec![0u8; pages * PAGE as usize];
    mm.read(va, &mut whole).unwrap();
    assert_eq!(whole[0], 0xAB, "byte before the window");
    assert_eq!(&whole[1..1 + len], &data[..]);
    assert_eq!(whole[1 + len], 0xAB, "byte after the window");
    // Each page's bytes sit in its own frame.
    for (p, &pa) in f.iter().enumerate() {
        let mut frame = vec![0u8; PAGE as usize];
        host.space().read(pa, &mut frame).unwrap();
        assert_eq!(frame, whole[p * PAGE as usize..(p + 1) * PAGE as usize], "page {p}");
        assert_eq!(mm.translate(va + p as u64 * PAGE + 17), Some(pa + 17));
    }
    drop(mm);
    assert_clean(&host);
}

#[test]
fn holes_are_unmapped_and_refuse_access_without_side_effects() {
    let host = host();
    let free0 = host.free_bytes();
    let mm = AddressSpace::new(&host, 104);
    let va = mm.map(&MapSpec::new(10, Placement::Contiguous).holes([3, 7])).unwrap();
    let f = mm.frames_of(va, 10);
    assert_eq!(f.iter().filter(|x| x.is_none()).count(), 2);
    assert!(f[3].is_none() && f[7].is_none());
    assert_eq!(host.free_bytes(), free0 - 8 * PAGE, "holes take no frames");
    let mapped: Vec<u64> = f.iter().flatten().copied().collect();
    assert_eq!(run_lengths(&mapped), vec![8], "placement applies to the mapped pages, holes skipped");

    mm.fill(va, 3 * PAGE, 0x11).unwrap();
    let hole = va + 3 * PAGE;
    match mm.write(va + 100, &vec![0x22; 4 * PAGE as usize]) {
        Err(e @ MmError::Unmapped { va }) if va == hole => assert_eq!(e.errno(), EFAULT),
        other => panic!("write across a hole: {other:?}"),
    }
    let mut back = vec![0u8; 3 * PAGE as usize];
    mm.read(va, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0x11), "a refused write writes nothing");
    assert!(matches!(mm.read(hole - 1, &mut [0u8; 2]), Err(MmError::Unmapped { va }) if va == hole));
    assert!(matches!(mm.fill(va + 7 * PAGE, 1, 0), Err(MmError::Unmapped { .. })));
    assert!(mm.read(va + 8 * PAGE, &mut [0u8; 16]).is_ok());
    drop(mm);
    assert_eq!(host.free_bytes(), free0);
    assert_clean(&host);
}

#[test]
fn read_only_pages_refuse_writes_and_write_pins() {
    let host = host();
    let mm = AddressSpace::new(&host, 105);
    let va = mm.map(&MapSpec::new(4, Placement::Contiguous).read_only()).unwrap();
    match mm.write(va, &[1]) {
        Err(e @ MmError::ReadOnly { .. }) => assert_eq!(e.errno(), EFAULT),
        other => panic!("{other:?}"),
    }
    assert_eq!(pin_err(mm.pin_pages_fast(va, 4, true, &mut Vec::new())), (va, EFAULT));
    let mut pages = Vec::new();
    assert_eq!(mm.pin_pages_fast(va, 4, false, &mut pages).unwrap(), 4, "a read pin is fine");
    mm.unpin_pages(&pages, false);

    // Writable, fill, then page 2 read-only: a write pin stops short before it.
    mm.protect(va, 4 * PAGE, true).unwrap();
    mm.fill(va, 4 * PAGE, 0x5A).unwrap();
    mm.protect(va + 2 * PAGE, PAGE, false).unwrap();
    assert!(mm.page(va + 2 * PAGE).is_some_and(|p| !p.writable));
    let mut pages = Vec::new();
    assert_eq!(mm.pin_pages(va, 4, true, &mut pages).unwrap(), 2);
    assert_eq!(pages, frames(&mm, va, 2));
    mm.unpin_pages(&pages, false);
    assert_eq!(pin_err(mm.pin_pages(va + 2 * PAGE, 2, true, &mut Vec::new())), (va + 2 * PAGE, EFAULT));
    assert!(matches!(mm.protect(va, 5 * PAGE, true), Err(MmError::Unmapped { va: v }) if v == va + 4 * PAGE));
    assert!(mm.page(va).is_some_and(|p| p.writable), "a refused protect changes nothing");
    drop(mm);
    assert_clean(&host);
}

#[test]
fn pins_count_per_frame_and_unpins_release_exactly_once() {
    let host = host();
    let mm = AddressSpace::new(&host, 106);
    let va = mm.map(&MapSpec::new(8, Placement::Runs { k: 3, seed: 1 })).unwrap();
    let f = frames(&mm, va, 8);
    let mut a = Vec::new();
    assert_eq!(mm.pin_pages_fast(va, 5, true, &mut a).unwrap(), 5);
    assert_eq!(a, f[..5]);
    let mut b = vec![0xdead]; // pins are appended
    assert_eq!(mm.pin_pages(va + 3 * PAGE, 5, false, &mut b).unwrap(), 5);
    assert_eq!(b[1..], f[3..]);
    let counts: Vec<u64> = f.iter().map(|&pa| host.frames().pin_count(pa)).collect();
    assert_eq!(counts, vec![1, 1, 1, 2, 2, 1, 1, 1]);
    assert_eq!(host.frames().pinned_frames(), 8);
    assert_eq!(host.frames().leak_check().pins, 10);
    mm.unpin_pages(&a, false);
    let counts: Vec<u64> = f.iter().map(|&pa| host.frames().pin_count(pa)).collect();
    assert_eq!(counts, vec![0, 0, 0, 1, 1, 1, 1, 1]);
    mm.unpin_pages(&b[1..], false);
    assert_clean(&host);
    assert_eq!(mm.pin_pages_fast(va, 0, false, &mut Vec::new()).unwrap(), 0, "nothing asked, nothing pinned");
    let s = mm.pin_stats();
    assert_eq!((s.fast_calls, s.slow_calls, s.pinned_pages, s.unpinned_pages), (2, 1, 10, 10));
    assert_eq!((s.short_pins, s.failed_calls, s.dirty_unpins), (0, 0, 0));
    drop(mm);
    assert_clean(&host);
}

#[test]
fn a_hole_fails_the_first_page_or_shortens_the_pin() {
    let host = host();
    let mm = AddressSpace::new(&host, 107);
    let va = mm.map(&MapSpec::new(10, Placement::Contiguous).holes([6])).unwrap();
    for fast in [true, false] {
        let pin = |va, n, pages: &mut Vec<u64>| {
            if fast {
                mm.pin_pages_fast(va, n, false, pages)
            } else {
                mm.pin_pages(va, n, false, pages)
            }
        };
        let mut pages = Vec::new();
        assert_eq!(pin(va, 10, &mut pages).unwrap(), 6, "short: stops at the hole");
        assert_eq!(pages, frames(&mm, va, 6));
        mm.unpin_pages(&pages, false);
        let mut none = Vec::new();
        assert_eq!(pin_err(pin(va + 6 * PAGE, 4, &mut none)), (va + 6 * PAGE, EFAULT));
        assert!(none.is_empty());
        assert_eq!(pin_err(pin(va + 10 * PAGE, 1, &mut none)), (va + 10 * PAGE, EFAULT), "the guard page");
    }
    assert_eq!(pin_err(mm.pin_pages_fast(va + 1, 1, false, &mut Vec::new())), (va + 1, EINVAL), "unaligned");
    assert_eq!(pin_err(mm.pin_pages(!(PAGE - 1), 2, false, &mut Vec::new())).1, EINVAL, "overflow");
    let s = mm.pin_stats();
    assert_eq!((s.short_pins, s.failed_calls), (2, 6));
    drop(mm);
    assert_clean(&host);
}

#[test]
fn unpin_dirty_marks_frames_and_bad_unpins_are_refused() {
    let host = host();
    let mm = AddressSpace::new(&host, 108);
    let other = AddressSpace::new(&host, 109);
    let va = mm.map(&MapSpec::new(4, Placement::Contiguous)).unwrap();
    let mut pages = Vec::new();
    mm.pin_pages_fast(va, 4, true, &mut pages).unwrap();
    mm.unpin_pages(&pages[..2], true);
    mm.unpin_pages(&pages[2..], false);
    let dirty: Vec<bool> = (0..4).map(|i| mm.page(va + i * PAGE).unwrap().dirty).collect();
    assert_eq!(dirty, vec![true, true, false, false]);
    assert!(host.frames().is_dirty(pages[0]) && !host.frames().is_dirty(pages[3]));
    assert_eq!(mm.pin_stats().dirty_unpins, 2);
    assert_clean(&host);

    // A second unpin, an unpin through another address space, an unpin of a non-user frame: ignored,
    // counted, and no pin count underflows.
    mm.pin_pages(va, 1, false, &mut Vec::new()).unwrap();
    mm.unpin_pages(&pages[1..2], false);
    other.unpin_pages(&pages[..1], false);
    mm.unpin_pages(&[HOST_DRAM_BASE + (200 << 20)], false);
    assert_eq!(host.frames().pin_count(pages[0]), 1);
    let leaks = host.frames().leak_check();
    assert_eq!((leaks.bad_unpins, leaks.pinned_frames), (3, 1));
    assert!(!leaks.is_clean());
    mm.unpin_pages(&pages[..1], false);
    assert_eq!(host.frames().leak_check().pinned_frames, 0);
}

#[test]
fn exit_with_pins_outstanding_keeps_pinned_frames_until_the_last_unpin() {
    let host = host();
    let free0 = host.free_bytes();
    let mm = AddressSpace::new(&host, 110);
    let va = mm.map(&MapSpec::new(8, Placement::Scattered { seed: 11 })).unwrap();
    mm.write(va + 2 * PAGE, &pattern(9, 0, 3 * PAGE as usize)).unwrap();
    // The op layer's reference (mmget) and a pin on pages 2..5.
    let op: Arc<dyn UserMm> = mm.clone();
    let mut pinned = Vec::new();
    assert_eq!(op.pin_pages_fast(va + 2 * PAGE, 3, true, &mut pinned).unwrap(), 3);

    mm.exit();
    assert!(mm.has_exited());
    assert_eq!(host.free_bytes(), free0 - 3 * PAGE, "unpinned frames freed at exit, pinned ones kept");
    for &pa in &pinned {
        assert_eq!(host.frames().info(pa), Some(FrameInfo { pins: 1, dirty: false, mapped: false }));
    }
    assert_eq!(host.frames().leak_check().orphaned_frames, 3);
    // The kept frames still hold the process's data: nothing reused them.
    let mut frame = vec![0u8; PAGE as usize];
    host.space().read(pinned[1], &mut frame).unwrap();
    assert_eq!(frame, pattern(9, 0, 3 * PAGE as usize)[PAGE as usize..2 * PAGE as usize]);

    // Everything else fails now.
    assert_eq!(pin_err(op.pin_pages_fast(va, 1, false, &mut Vec::new())), (va, ESRCH));
    assert_eq!(pin_err(op.pin_pages(va, 1, false, &mut Vec::new())), (va, ESRCH));
    assert!(matches!(mm.read(va, &mut [0u8; 1]), Err(e @ MmError::Exited { pid: 110 }) if e.errno() == ESRCH));
    assert!(matches!(mm.map(&MapSpec::new(1, Placement::Contiguous)), Err(MmError::Exited { .. })));
    assert_eq!(mm.translate(va), None);
    assert_eq!(host.free_bytes(), free0 - 3 * PAGE, "a refused map takes no frames");
    drop(mm);

    // The request completes later: unpin (dirty, after a device write) through the reference it held.
    op.unpin_pages(&pinned[..1], true);
    assert_eq!(host.free_bytes(), free0 - 2 * PAGE);
    op.unpin_pages(&pinned[1..], true);
    assert_eq!(host.free_bytes(), free0, "the last unpin frees the orphaned frames");
    assert_eq!(host.frames().leak_check().user_frames, 0);
    assert_clean(&host);
}

#[test]
fn unmapping_a_pinned_page_keeps_its_frame_out_of_reach() {
    let host = host();
    let mm = AddressSpace::new(&host, 111);
    let va = mm.map(&MapSpec::new(4, Placement::Contiguous)).unwrap();
    let mut pinned = Vec::new();
    mm.pin_pages_fast(va + PAGE, 1, true, &mut pinned).unwrap();
    mm.unmap(va, 4 * PAGE).unwrap();
    assert_eq!(mm.mapped_pages(), 0);
    assert_eq!(host.frames().info(pinned[0]).map(|f| f.mapped), Some(false));
    // New memory (a mapping and a host buffer) never lands on the pinned frame.
    let va2 = mm.map(&MapSpec::new(4, Placement::Contiguous)).unwrap();
    assert!(!frames(&mm, va2, 4).contains(&pinned[0]));
    let buf = host.alloc(4 * PAGE as usize, PAGE as usize).unwrap();
    assert!(buf.phys_addr() + 4 * PAGE <= pinned[0] || buf.phys_addr() >= pinned[0] + PAGE);
    mm.unpin_pages(&pinned, false);
    assert_eq!(host.frames().info(pinned[0]), None, "freed at the last unpin");
    assert!(matches!(mm.unmap(va + 1, PAGE), Err(MmError::InvalidRange { .. })));
    drop(mm);
    assert_clean(&host);
}

#[test]
fn dropping_every_reference_tears_the_address_space_down() {
    let host = host();
    let free0 = host.free_bytes();
    let mm = AddressSpace::new(&host, 112);
    mm.map(&MapSpec::new(16, Placement::Runs { k: 4, seed: 2 })).unwrap();
    let op: Arc<dyn UserMm> = mm.clone();
    drop(mm);
    assert_eq!(host.free_bytes(), free0 - 16 * PAGE, "the op layer's reference keeps the address space");
    drop(op);
    assert_eq!(host.free_bytes(), free0);
    assert_clean(&host);
}

#[test]
fn planned_pin_faults_fail_or_shorten_the_chosen_calls() {
    let host = host();
    let mm = AddressSpace::new(&host, 113);
    let va = mm.map(&MapSpec::new(8, Placement::Contiguous)).unwrap();
    let f = frames(&mm, va, 8);

    // The second fast pin fails with -ENOMEM and pins nothing; the calls around it are untouched.
    mm.pin_faults().add(PinFault::Fail { path: Some(PinPath::Fast), nth: 1, errno: ENOMEM });
    let mut pages = Vec::new();
    assert_eq!(mm.pin_pages_fast(va, 2, false, &mut pages).unwrap(), 2);
    assert_eq!(pin_err(mm.pin_pages_fast(va, 8, false, &mut pages)), (va, ENOMEM));
    assert_eq!(pages.len(), 2);
    assert_eq!(f.iter().map(|&pa| host.frames().pin_count(pa)).sum::<u64>(), 2);
    assert_eq!(mm.pin_pages_fast(va + 2 * PAGE, 1, false, &mut pages).unwrap(), 1);
    mm.unpin_pages(&pages, false);
    assert!(mm.pin_faults().entries().is_empty(), "one-shot");

    // A short fast pin on a fully mapped range; the slow path then gets everything.
    mm.pin_faults().add(PinFault::Short { nth: 0, pages: 3 });
    let mut pages = Vec::new();
    assert_eq!(mm.pin_pages_fast(va, 8, true, &mut pages).unwrap(), 3);
    assert_eq!(pages, f[..3]);
    mm.unpin_pages(&pages, false);
    pages.clear();
    assert_eq!(mm.pin_pages(va, 8, true, &mut pages).unwrap(), 8);
    mm.unpin_pages(&pages, false);

    // A failure aimed at the slow path (the completion thread's remote pin) leaves fast pins alone.
    mm.pin_faults().add(PinFault::Fail { path: Some(PinPath::Slow), nth: 0, errno: EFAULT });
    let mut pages = Vec::new();
    assert_eq!(mm.pin_pages_fast(va, 1, false, &mut pages).unwrap(), 1);
    assert_eq!(pin_err(mm.pin_pages(va, 1, false, &mut pages)), (va, EFAULT));
    mm.unpin_pages(&pages, false);

    let s = mm.pin_stats();
    assert_eq!((s.fast_calls, s.slow_calls, s.short_pins, s.failed_calls), (5, 2, 1, 2));
    drop(mm);
    assert_clean(&host);
}

#[test]
fn current_mm_is_the_entered_address_space_of_this_host() {
    let host = host();
    let platform = EmuPlatform::new(host.clone(), ClockKind::Fake);
    assert!(platform.current_mm().is_none(), "a thread that entered nothing is a kernel thread");
    let a = AddressSpace::new(&host, 200);
    let b = AddressSpace::new(&host, 201);
    let va = a.map(&MapSpec::new(2, Placement::Contiguous)).unwrap();
    {
        let _in_a = a.enter();
        assert_eq!(platform.current_mm().map(|mm| mm.pid()), Some(200));
        {
            let _in_b = b.enter();
            assert_eq!(platform.current_mm().map(|mm| mm.pid()), Some(201));
        }
        assert_eq!(platform.current_mm().map(|mm| mm.pid()), Some(200), "the inner guard restores");
        // A local slow pin (this thread runs in `a`), then a remote one from a thread that entered nothing.
        let mm = platform.current_mm().unwrap();
        let mut pages = Vec::new();
        mm.pin_pages(va, 1, false, &mut pages).unwrap();
        let captured = Arc::clone(&mm);
        std::thread::spawn(move || {
            assert!(current().is_none());
            let mut p = Vec::new();
            captured.pin_pages(va + PAGE, 1, false, &mut p).unwrap();
            captured.unpin_pages(&p, false);
        })
        .join()
        .unwrap();
        mm.unpin_pages(&pages, false);
        assert_eq!((a.pin_stats().slow_calls, a.pin_stats().remote_calls), (2, 1));

        // Another machine's platform does not see this address space; an exited process has no mm.
        let other = EmuPlatform::new(Arc::new(HostMemory::new(1 << 20).unwrap()), ClockKind::Fake);
        assert!(other.current_mm().is_none());
        a.exit();
        assert!(platform.current_mm().is_none());
        assert!(current().is_some_and(|mm| mm.pid() == 200), "still entered, but exited");
    }
    assert!(platform.current_mm().is_none());
    drop((a, b));
    assert_clean(&host);
}

#[test]
fn bad_mapping_requests_are_refused() {
    let host = host();
    let mm = AddressSpace::new(&host, 114);
    let free0 = host.free_bytes();
    for spec in [
        MapSpec::new(0, Placement::Contiguous),
        MapSpec::new(4, Placement::Contiguous).holes([4]),
        MapSpec::new(4, Placement::Runs { k: 0, seed: 0 }),
    ] {
        match mm.map(&spec) {
            Err(e @ MmError::InvalidMapping(_)) => assert_eq!(e.errno(), EINVAL),
            other => panic!("{spec:?}: {other:?}"),
        }
    }
    match mm.map(&MapSpec::bytes(1 << 30, Placement::Contiguous)) {
        Err(e @ MmError::Host(_)) => assert_eq!(e.errno(), ENOMEM),
        other => panic!("{other:?}"),
    }
    match mm.map(&MapSpec::bytes(130 << 20, Placement::Scattered { seed: 0 })) {
        Err(MmError::Host(_)) => {}
        other => panic!("no window of twice 130 MiB in 256 MiB of DRAM: {other:?}"),
    }
    assert_eq!(host.free_bytes(), free0, "a refused mapping takes nothing");
    let va = mm.map(&MapSpec::bytes(1, Placement::Contiguous).holes([0])).unwrap();
    assert_eq!(mm.frames_of(va, 1), vec![None], "a mapping of holes only reserves addresses");
    assert_eq!(MapSpec::bytes(PAGE + 1, Placement::Contiguous).pages, 2);
    drop(mm);
    assert_clean(&host);
}

#[test]
fn frames_pinned_when_the_last_reference_drops_are_freed_by_an_unpin_without_the_mm() {
    let host = host();
    let free0 = host.free_bytes();
    let mm = AddressSpace::new(&host, 115);
    let va = mm.map(&MapSpec::new(4, Placement::Contiguous)).unwrap();
    let mut pinned = Vec::new();
    mm.pin_pages_fast(va, 2, true, &mut pinned).unwrap();
    drop(mm);
    assert_eq!(host.free_bytes(), free0 - 2 * PAGE, "the drop freed only the unpinned frames");
    assert_eq!(host.frames().leak_check().orphaned_frames, 2);
    ndma_emu::user::unpin_user_pages(&host, &pinned, true);
    assert_eq!(host.free_bytes(), free0);
    ndma_emu::user::unpin_user_pages(&host, &pinned[..1], false);
    assert_eq!(host.frames().leak_check().bad_unpins, 1, "a second unpin is refused and counted");
}
