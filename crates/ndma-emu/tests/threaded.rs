//! The threaded policy under concurrency: several queues of one engine driven from several threads, a reset
//! that is synchronous with the engine, and shutdown with work still pending.

use std::sync::Arc;
use std::thread;

use ndma_emu::test_utils::pattern;
use ndma_emu::test_utils::rig::{config, h2t_engine, poll, ring, Rig, MARKER};
use ndma_emu::{EmuSystem, ExecPolicy, OrderingMode, PlannedFault};
use udma::{Arch, Barrier, Direction, DmaMemory, Udma};

#[test]
fn queues_of_one_engine_run_concurrently_from_several_threads() {
    for arch in Arch::ALL {
        let sys = EmuSystem::new(config(arch, ExecPolicy::Threaded, OrderingMode::Relaxed)).unwrap();
        let dev = Arc::clone(sys.device(0));
        let eng = 5;
        let engine = Udma::init(&*dev, arch, eng).unwrap();
        let phb = arch.pci_host_base();
        let workers: Vec<_> = (0..4u32)
            .map(|qid| {
                let dev = Arc::clone(&dev);
                thread::spawn(move || {
                    let mut q = engine.init_queue(&*dev, qid, ring(&dev, 64), ring(&dev, 64), 64).unwrap();
                    let src = dev.host().alloc(65536 * 2, 4096).unwrap();
                    let marker = dev.host().alloc(256, 256).unwrap();
                    let dst = dev.alloc_hbm(65536 * 2, 4096).unwrap();
                    let m = marker.phys_addr() | phb;
                    for iter in 0..60u32 {
                        let len = 1000 + (iter as usize * 977 + qid as usize * 31) % 100_000;
                        let data = pattern(u64::from(iter + qid * 64), 0, len);
                        src.write_bytes(0, &data).unwrap();
                        let s = src.phys_addr() | phb;
                        let mut n = 0;
                        let mut off = 0;
                        while off < len {
                            let chunk = (len - off).min(65536);
                            let b = if off + chunk == len { Barrier::WriteBarrier } else { Barrier::None };
                            q.copy_prepare_one(s + off as u64, dst.pa + off as u64, chunk as u32, b, false).unwrap();
                            off += chunk;
                            n += 1;
                        }
                        marker.store_u32(0, MARKER, std::sync::atomic::Ordering::Relaxed).unwrap();
                        marker.store_u32(4, 0, std::sync::atomic::Ordering::Relaxed).unwrap();
                        q.copy_prepare_one(m, m + 4, 4, Barrier::None, false).unwrap();
                        q.copy_start(&*dev, n + 1, n + 1).unwrap();
                        assert!(poll(|| marker.load_u32(4, std::sync::atomic::Ordering::Acquire).unwrap() == MARKER));
                        q.ack(n + 1);
                        let mut got = vec![0; len];
                        dev.hbm_read(dst.pa, &mut got).unwrap();
                        assert!(got == data, "{arch} q{qid} iter {iter}");
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert!(dev.faults().is_empty(), "{:?}", dev.faults());
    }
}

#[test]
fn reset_is_synchronous_with_the_engine() {
    let mut rig = Rig::new(Arch::V2, ExecPolicy::Threaded, OrderingMode::Strict);
    let src = rig.dev.host().alloc(64 * 4096, 4096).unwrap();
    let dst = rig.dev.alloc_hbm(64 * 4096, 4096).unwrap();
    let s = rig.host_addr(&src, 0);
    // Slow the engine down so the reset lands in the middle of the batch.
    rig.dev.fault_plan().add(PlannedFault::Delay { engine: Some(rig.eng), per_desc_us: 300 });
    for i in 0..64 {
        rig.q.copy_prepare_one(s + i * 4096, dst.pa + i * 4096, 4096, Barrier::None, false).unwrap();
    }
    rig.q.copy_start(&*rig.dev, 64, 64).unwrap();
    assert!(poll(|| rig.dev.engine_stats(rig.eng).unwrap().descriptors >= 2));
    rig.q.reinit(&*rig.dev);
    // When the reset returned, the engine had finished its in-flight descriptor and dropped the rest.
    // (Usually it interrupts the batch; even if a starved test thread let it finish, what follows holds.)
    let done = rig.dev.engine_stats(rig.eng).unwrap().descriptors;
    assert_eq!(rig.dev.pending(rig.eng, 0, Direction::Tx), 0);
    rig.dev.fault_plan().clear();
    // New work completes; the engine executed exactly it, nothing of the abandoned batch.
    rig.copy(s, dst.pa, 4096, Barrier::WriteBarrier);
    assert_eq!(rig.dev.engine_stats(rig.eng).unwrap().descriptors, done + 2);
}

#[test]
fn dropping_the_system_with_a_hung_queue_joins_the_workers() {
    let mut rig = Rig::new(Arch::V3, ExecPolicy::Threaded, OrderingMode::Relaxed);
    let (src, dst, s) = rig.page_pair();
    rig.dev.fault_plan().add(PlannedFault::Hang { engine: rig.eng, qid: 0, persistent: true });
    let n = rig.stage(s, dst.pa, 4096, Barrier::WriteBarrier) + 1;
    rig.stage_marker();
    rig.q.copy_start(&*rig.dev, n, n).unwrap();
    assert!(poll(|| rig.dev.is_hung(rig.eng, 0)));
    let Rig { sys, dev, q, marker, .. } = rig;
    drop(sys);
    // The device outlives the system through our Arc; its workers are already joined, shutting down again
    // is a no-op.
    dev.shutdown();
    assert!(dev.is_hung(128, 0));
    drop((q, marker, src, dev));
}

#[test]
fn shutdown_does_not_wait_for_a_delayed_backlog() {
    let mut rig = Rig::new(Arch::V2, ExecPolicy::Threaded, OrderingMode::Relaxed);
    let (_src, dst, s) = rig.page_pair();
    // 200 pairs at 50 ms each would keep a worker busy for 10 s.
    rig.dev.fault_plan().add(PlannedFault::Delay { engine: Some(rig.eng), per_desc_us: 50_000 });
    for _ in 0..200 {
        rig.q.copy_prepare_one(s, dst.pa, 64, Barrier::None, false).unwrap();
    }
    rig.q.copy_start(&*rig.dev, 200, 200).unwrap();
    assert!(poll(|| rig.dev.engine_stats(rig.eng).unwrap().descriptors >= 1));
    // Shutdown stops the worker after its in-flight descriptor; the backlog stays pending.
    rig.dev.shutdown();
    assert!(rig.dev.pending(rig.eng, 0, Direction::Tx) > 0);
}

/// A marker written in the middle of a batch lets the driver reuse every slot up to it while the engine is still
/// executing the rest of the batch: a doorbell that refills those slots is accepted, although the batch has not
/// retired them yet. (The zero-copy path keeps the ring this full with pieces of 65 descriptors.)
#[test]
fn a_doorbell_may_refill_the_slots_a_running_batch_has_passed() {
    const RING: u32 = 4096;
    let cfg = config(Arch::V3, ExecPolicy::Threaded, OrderingMode::Strict);
    let mut rig = Rig::with(cfg, h2t_engine(Arch::V3), 0, RING);
    let src = rig.dev.host().alloc(65536, 4096).unwrap();
    let dst = rig.dev.alloc_hbm(65536, 4096).unwrap();
    let s = rig.host_addr(&src, 0);
    // One doorbell for a full ring: 99 small pairs and a marker, then 64 KiB copies that keep the engine busy
    // for milliseconds after the marker lands.
    let (head, total) = (100, rig.q.available());
    assert!(total + head > RING, "the refill must overfill the ring unless the running batch's slots count as free");
    for _ in 0..head - 1 {
        rig.q.copy_prepare_one(s, dst.pa, 64, Barrier::None, false).unwrap();
    }
    rig.stage_marker();
    for _ in head..total {
        rig.q.copy_prepare_one(s, dst.pa, 65536, Barrier::None, false).unwrap();
    }
    rig.q.copy_start(&*rig.dev, total, total).unwrap();
    assert!(rig.poll_marker());
    // The driver saw the marker: the first 100 slots are free again, and it refills them at once.
    rig.q.ack(head);
    let free = rig.q.available();
    assert_eq!(free, head, "every slot the marker freed");
    for _ in 0..free {
        rig.q.copy_prepare_one(s, dst.pa, 64, Barrier::None, false).unwrap();
    }
    rig.q.copy_start(&*rig.dev, free, free).unwrap();
    assert!(poll(|| rig.dev.pending(rig.eng, 0, Direction::Tx) == 0));
    assert!(rig.dev.faults().is_empty(), "{:?}", rig.dev.faults());
    assert_eq!(rig.dev.engine_stats(rig.eng).unwrap().descriptors, u64::from(total + free));
}

/// After a batch, the worker spins for the next doorbell only when nobody else would execute it: with the
/// platform's assist on (waiting threads execute pending work) it goes back to dozing, so it does not take
/// the next doorbell's work from the thread about to wait for it; with the assist off it spins.
#[test]
fn the_worker_spins_after_a_batch_only_when_waiters_do_not_execute_work() {
    for assist in [true, false] {
        let mut rig = Rig::new(Arch::V3, ExecPolicy::Threaded, OrderingMode::Strict);
        rig.sys.platform().set_assist(assist);
        assert_eq!(rig.sys.platform().assist(), assist);
        let (src, dst, s) = rig.page_pair();
        for i in 0..3 {
            let data = pattern(i, 0, 4096);
            src.write_bytes(0, &data).unwrap();
            // Polled without executing anything: only the worker runs these copies.
            rig.copy(s, dst.pa, 4096, Barrier::WriteBarrier);
            let mut got = vec![0; 4096];
            rig.dev.hbm_read(dst.pa, &mut got).unwrap();
            assert!(got == data, "assist {assist}, copy {i}");
        }
        assert!(poll(|| rig.dev.engine_stats(rig.eng).unwrap().worker_runs >= 1));
        let st = rig.dev.engine_stats(rig.eng).unwrap();
        assert_eq!(st.descriptors, 6, "assist {assist}");
        if assist {
            assert_eq!(st.worker_spins, 0, "{} runs", st.worker_runs);
        } else {
            // A run counts its spin first: a snapshot may see the spin of a run it does not count yet.
            assert!((st.worker_runs..=st.worker_runs + 1).contains(&st.worker_spins), "{st:?}");
        }
    }
}

/// A thread reading `posted_writes` (a statistics read that holds the engine's exec lock for a moment and
/// executes nothing) while a rig copies, polling its marker without the platform's assist: a doorbell whose
/// worker finds the lock held by the reader must still be executed. The worker used to leave the work to the
/// "executor" and park, and the copy never completed.
#[test]
fn reading_posted_writes_never_strands_a_doorbell() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let mut rig = Rig::new(Arch::V3, ExecPolicy::Threaded, OrderingMode::Strict);
    let (_src, dst, s) = rig.page_pair();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (dev, stop, eng) = (Arc::clone(&rig.dev), Arc::clone(&stop), rig.eng);
        thread::spawn(move || {
            // Relaxed: the flag only ends the loop.
            while !stop.load(Ordering::Relaxed) {
                std::hint::black_box(dev.posted_writes(eng));
            }
        })
    };
    let mut stranded = None;
    for i in 0..2000 {
        let n = rig.stage(s, dst.pa, 64, Barrier::WriteBarrier) + 1;
        rig.stage_marker();
        rig.q.copy_start(&*rig.dev, n, n).unwrap();
        if !rig.poll_marker() {
            stranded = Some((i, rig.dev.pending(rig.eng, 0, Direction::Tx)));
            break;
        }
        rig.q.ack(n);
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert_eq!(stranded, None, "(copy, descriptors still pending)");
}
