//! The async double buffer (spec §3): handle FSM, first-call/no-wait, waits on the previous context, misuse,
//! the one-batch limit, and the pipeline.

use ndma::{AsyncPipeline, CtxHandle, NdmaError, Transfer, MAX_BATCH_BYTES};
use ndma_emu::test_utils::*;
use ndma_emu::{ClockKind, ExecPolicy, OrderingMode, PlannedFault};
use udma::Arch;

#[test]
fn first_call_stages_without_waiting_and_the_chain_toggles() {
    for arch in Arch::ALL {
        let tb = adversarial(arch, ExecPolicy::Inline);
        let (dev, emu) = tb.device(0);
        let ws: Vec<Window> =
            (0..5).map(|i| Window::new(dev, emu, Dir::H2d, 70_000 + i * 1000, 0, i).unwrap()).collect();
        let h = dev.memcpy_mc_async(&ws[0].src, &ws[0].dst, GUARD, GUARD, ws[0].len, 0, CtxHandle::None).unwrap();
        assert_eq!(h, CtxHandle::Async1);
        let s = dev.ring_stats(0).unwrap();
        assert_eq!((s.batches, s.polls, s.transfers), (1, 0, 0), "{arch}: staged, nothing waited");
        let mut prev = h;
        let mut expected = vec![CtxHandle::Async2, CtxHandle::Async1, CtxHandle::Async2, CtxHandle::Async1].into_iter();
        for (i, w) in ws.iter().enumerate().skip(1) {
            let h = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0, prev).unwrap();
            assert_eq!(Some(h), expected.next());
            assert_eq!(dev.ring_stats(0).unwrap().transfers, i as u64, "{arch}: each call completes the previous copy");
            prev = h;
        }
        dev.memcpy_mc_wait(&ws[4].src, &ws[4].dst, prev).unwrap();
        for (i, w) in ws.iter().enumerate() {
            w.verify(&format!("{arch} async copy {i}"), true).unwrap();
        }
        assert_eq!(dev.ring_stats(0).unwrap().transfers, 5);
    }
}

#[test]
fn pipeline_of_mixed_sizes_and_directions_is_byte_exact() {
    for (arch, exec) in [(Arch::V2, ExecPolicy::Threaded), (Arch::V3, ExecPolicy::Inline)] {
        let tb = adversarial(arch, exec);
        let (dev, emu) = tb.device(0);
        let sizes = [1u64, 4096, 65536, 65537, 1 << 20, 3 * 65536 + 11, 0, 17, 2 << 20];
        let ws: Vec<Window> = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| Window::new(dev, emu, Dir::ALL[i % 4], size, (i as u32) % 2, 100 + i as u64).unwrap())
            .collect();
        let mut p = AsyncPipeline::new(dev);
        for w in &ws {
            p.submit(&w.transfer()).unwrap();
        }
        p.finish().unwrap();
        for (i, w) in ws.iter().enumerate() {
            w.verify(&format!("{arch} pipeline copy {i} ({} bytes)", w.len), true).unwrap();
        }
        assert!(emu.faults().is_empty());
    }
}

#[test]
fn handle_misuse_is_einval_and_leaves_the_ring_usable() {
    let tb = adversarial(Arch::V2, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::H2d, 10_000, 0, 1).unwrap();
    let h = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0, CtxHandle::None).unwrap();
    dev.memcpy_mc_wait(&w.src, &w.dst, h).unwrap();
    // Wait twice.
    assert_eq!(dev.memcpy_mc_wait(&w.src, &w.dst, h), Err(NdmaError::ContextNotInUse(1)));
    assert_eq!(NdmaError::ContextNotInUse(1).errno(), -22, "FACTS §6: a ctx not in use is -EINVAL");
    // Wait on NONE.
    assert_eq!(dev.memcpy_mc_wait(&w.src, &w.dst, CtxHandle::None), Err(NdmaError::InvalidHandle(-1)));
    // Chain from a context nobody staged.
    assert_eq!(
        dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, 16, 0, CtxHandle::Async2),
        Err(NdmaError::ContextNotInUse(2))
    );
    // Out-of-range integers.
    for raw in [-2, 3, 1000] {
        let err = dev.memcpy_mc_async_raw(&w.src, &w.dst, GUARD, GUARD, 16, 0, raw).unwrap_err();
        assert_eq!(err, NdmaError::InvalidHandle(raw));
        assert_eq!(err.errno(), -22);
    }
    // Staging onto a context that still holds an unwaited copy.
    let h1 = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, 100, 0, CtxHandle::None).unwrap();
    assert_eq!(
        dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, 100, 0, CtxHandle::None),
        Err(NdmaError::ContextInUse(1))
    );
    dev.memcpy_mc_wait(&w.src, &w.dst, h1).unwrap();
    w.verify("after misuse", true).unwrap();
    let w2 = Window::new(dev, emu, Dir::D2h, 300_000, 0, 2).unwrap();
    w2.copy_all().unwrap();
    w2.verify("sync copy after misuse", true).unwrap();
    assert_eq!(dev.memcpy_mc_async_raw(&w2.src, &w2.dst, GUARD, GUARD, 5, 0, -1), Ok(1));
    assert_eq!(dev.memcpy_mc_wait(&w2.src, &w2.dst, CtxHandle::Async1), Ok(()));
}

#[test]
fn an_async_request_larger_than_one_batch_is_rejected_before_staging() {
    let tb = adversarial(Arch::V3, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::D2d, MAX_BATCH_BYTES + 1, 0, 3).unwrap();
    let before = dev.ring_stats(0).unwrap();
    let err = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0, CtxHandle::None).unwrap_err();
    assert_eq!(err, NdmaError::AsyncTooLarge { size: MAX_BATCH_BYTES + 1, max: MAX_BATCH_BYTES });
    assert_eq!(err.errno(), -22);
    assert_eq!(dev.ring_stats(0).unwrap(), before, "nothing staged");
    // Exactly one batch is fine.
    let h = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, MAX_BATCH_BYTES, 0, CtxHandle::None).unwrap();
    dev.memcpy_mc_wait(&w.src, &w.dst, h).unwrap();
}

#[test]
fn a_hang_in_an_async_chain_times_out_releases_both_contexts_and_recovers() {
    for arch in Arch::ALL {
        let tb = testbed(arch, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
        let (dev, emu) = tb.device(0);
        let (eng, qid) = dev.h2t_queue(0).unwrap();
        let a = Window::new(dev, emu, Dir::H2d, 5000, 0, 1).unwrap();
        let b = Window::new(dev, emu, Dir::H2d, 6000, 0, 2).unwrap();
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let h = dev.memcpy_mc_async(&a.src, &a.dst, GUARD, GUARD, a.len, 0, CtxHandle::None).unwrap();
        let err = dev.memcpy_mc_async(&b.src, &b.dst, GUARD, GUARD, b.len, 0, h).unwrap_err();
        assert!(matches!(err, NdmaError::Timeout { count: 2, .. }), "{arch}: {err}");
        assert_eq!(dev.ring_stats(0).unwrap().retries, 0, "{arch}: no reset window, no retry");
        // Both contexts were released: a new chain starts cleanly.
        assert_eq!(dev.memcpy_mc_wait(&a.src, &a.dst, CtxHandle::Async1), Err(NdmaError::ContextNotInUse(1)));
        assert_eq!(dev.memcpy_mc_wait(&a.src, &a.dst, CtxHandle::Async2), Err(NdmaError::ContextNotInUse(2)));
        let mut p = AsyncPipeline::new(dev);
        p.submit(&a.transfer()).unwrap();
        p.submit(&b.transfer()).unwrap();
        p.finish().unwrap();
        a.verify("a after recovery", true).unwrap();
        b.verify("b after recovery", true).unwrap();
        // A pipeline reports the failure of the copy it drains: from `drain` (and stays usable), from `finish`.
        let mut p = AsyncPipeline::new(dev);
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        p.submit(&a.transfer()).unwrap();
        assert!(matches!(p.drain(), Err(NdmaError::Timeout { .. })), "{arch}: drain");
        assert!(p.is_idle(), "{arch}: nothing in flight after a failed drain");
        p.submit(&b.transfer()).unwrap();
        p.drain().unwrap();
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        p.submit(&a.transfer()).unwrap();
        assert!(matches!(p.finish(), Err(NdmaError::Timeout { .. })), "{arch}: finish");
        assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0), "{arch}");
        // `then` onto a copy that hangs: the failure of the wait it did is reported, not a second wait's.
        emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let first = dev.start(&a.transfer()).unwrap();
        assert!(matches!(first.then(&b.transfer()), Err(NdmaError::Timeout { .. })), "{arch}: then");
        assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0), "{arch}");
        // The accessors name what the copy moves.
        let t = a.transfer();
        assert_eq!((t.len(), t.is_empty(), t.src_offset_bytes(), t.dst_offset_bytes()), (a.len, false, GUARD, GUARD));
        assert!(Transfer::new(&a.src, &a.dst, 0).src_offset(3).is_empty());
        a.copy_all().unwrap();
        a.verify("a after the pipeline's failures", true).unwrap();
        b.verify("b between them", true).unwrap();
    }
}

#[test]
fn an_nc_without_an_h2t_ring_refuses_copies_and_its_waits_return_at_once() {
    use std::sync::Arc;
    let emu = ndma_emu::EmuSystem::new(ndma_emu::EmuConfig {
        exec: ExecPolicy::Inline,
        hbm_size: Some(1 << 30),
        host_dram_size: 1 << 30,
        ..ndma_emu::EmuConfig::new(Arch::V2)
    })
    .unwrap();
    let platform = Arc::new(ndma_emu::EmuPlatform::new(emu.host().clone(), ClockKind::Real));
    let hw = ndma::DeviceHw { nc_map: 0b01, ..ndma_emu::device_hw(emu.device(0)).unwrap() };
    let sys = ndma::System::new(Arch::V2, platform, vec![hw]).unwrap();
    let dev = &sys.devices()[0];
    let src = dev.alloc_host(4096, 1).unwrap();
    let dst = dev.alloc_device(4096, 1).unwrap();
    assert_eq!(dev.memcpy_mc(&src, &dst, 0, 0, 4096), Err(NdmaError::NoH2tRing { nc: 1 }));
    assert_eq!(NdmaError::NoH2tRing { nc: 1 }.errno(), -22);
    assert_eq!(dev.memcpy_mc_wait(&src, &dst, CtxHandle::Async1), Ok(()));
    assert_eq!(dev.wait_handle(1, CtxHandle::None), Ok(()));
    assert_eq!(dev.wait_handle(2, CtxHandle::Async1), Err(NdmaError::InvalidNc { nc: 2, ncs: 2 }));
    // NC 0 was brought up and works.
    let dst0 = dev.alloc_device(4096, 0).unwrap();
    src.fill(0, 4096, 0x5a).unwrap();
    dev.memcpy_mc(&src, &dst0, 0, 0, 4096).unwrap();
    let mut back = vec![0u8; 4096];
    emu.device(0).hbm_read(dst0.pa(), &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0x5a));
}

#[test]
fn prefetch_runs_once_per_staged_copy_and_its_failure_is_only_logged() {
    let tb = adversarial(Arch::V2, ExecPolicy::Inline);
    let (dev, emu) = tb.device(0);
    let w = Window::new(dev, emu, Dir::D2h, 300_000, 0, 4).unwrap();
    let h = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0x7f00_0000_0000, CtxHandle::None).unwrap();
    assert_eq!(tb.platform.prefetches(), vec![(0x7f00_0000_0000, 300_000)]);
    tb.platform.set_fail_prefetch(true);
    let h = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0x7f00_1000_0000, h).unwrap();
    assert_eq!(tb.platform.prefetches().len(), 2, "attempted, failed, not returned");
    let h = dev.memcpy_mc_async(&w.src, &w.dst, GUARD, GUARD, w.len, 0, h).unwrap();
    assert_eq!(tb.platform.prefetches().len(), 2, "no prefetch address, no prefetch");
    dev.memcpy_mc_wait(&w.src, &w.dst, h).unwrap();
    w.verify("copies with prefetch", true).unwrap();
    // FACTS §7.2: the prefetch runs after the *first* batch of a transfer (offset 0), over the whole range —
    // once for a sync copy of two batches, not once per batch.
    tb.platform.set_fail_prefetch(false);
    let big = Window::new(dev, emu, Dir::D2d, MAX_BATCH_BYTES + 1, 0, 5).unwrap();
    let before = dev.ring_stats(0).unwrap().batches;
    let h = dev.memcpy_mc_async(&big.src, &big.dst, GUARD, GUARD, big.len, 0x7f00_2000_0000, CtxHandle::Sync).unwrap();
    assert_eq!(h, CtxHandle::Sync);
    assert_eq!(dev.ring_stats(0).unwrap().batches - before, 2, "two batches");
    assert_eq!(tb.platform.prefetches()[2..], [(0x7f00_2000_0000, MAX_BATCH_BYTES + 1)], "one prefetch, whole range");
    big.verify("two batches with prefetch", true).unwrap();
}
