//! The system platform's delays: exact virtual time on the fake clock for both timings, and a waiting thread
//! executing pending work that no worker runs (`ExecPolicy::Deferred`: no worker exists, so whatever executes
//! the work is the delay — deterministic, no timing involved).

use std::sync::atomic::AtomicU32;

use ndma::Platform;
use ndma_emu::test_utils::pattern;
use ndma_emu::test_utils::rig::{config, h2t_engine, ring, Rig, MARKER};
use ndma_emu::{ClockKind, EmuConfig, EmuPlatform, ExecPolicy, OrderingMode, WaitTiming};
use udma::{Arch, Barrier, Direction, DmaMemory};

fn rig(clock: ClockKind, ordering: OrderingMode) -> Rig {
    let cfg = EmuConfig { clock, ..config(Arch::V2, ExecPolicy::Deferred, ordering) };
    Rig::with(cfg, h2t_engine(Arch::V2), 0, 256)
}

/// The marker's poll word (+4) of the rig.
fn poll_word(r: &Rig) -> &AtomicU32 {
    r.marker.word(4).unwrap()
}

/// A submitted copy: the source bytes, the HBM window (after a 4 KiB guard), the pairs rung, and the source
/// buffer (kept alive until the copy executed).
struct Submitted {
    data: Vec<u8>,
    pa: u64,
    n: u32,
    _src: ndma_emu::HostBuf,
}

/// Stages `len` bytes host → HBM plus the marker and rings both doorbells.
fn submit(r: &mut Rig, len: usize, seed: u8) -> Submitted {
    let src = r.dev.host().alloc(len, 4096).unwrap();
    let data = pattern(u64::from(seed), 0, len);
    src.write_bytes(0, &data).unwrap();
    let dst = r.dev.alloc_hbm(len as u64 + 8192, 4096).unwrap();
    r.dev.hbm_fill(dst.pa, len as u64 + 8192, 0xEE).unwrap();
    let s = r.host_addr(&src, 0);
    let n = r.stage(s, dst.pa + 4096, len as u64, Barrier::WriteBarrier) + 1;
    r.stage_marker();
    r.q.copy_start(&*r.dev, n, n).unwrap();
    Submitted { data, pa: dst.pa, n, _src: src }
}

/// The HBM window holds `data` with untouched (0xEE) guards of 4 KiB on both sides.
fn assert_landed(r: &Rig, data: &[u8], pa: u64) {
    let mut got = vec![0u8; data.len() + 8192];
    r.dev.hbm_read(pa, &mut got).unwrap();
    assert!(got[..4096].iter().all(|&b| b == 0xEE), "bytes before the window changed");
    assert!(got[4096 + data.len()..].iter().all(|&b| b == 0xEE), "bytes after the window changed");
    assert!(got[4096..4096 + data.len()] == *data, "window differs from the source");
}

#[test]
fn fake_clock_marker_timing_returns_at_once_once_the_word_holds_else_waits_exactly() {
    let r = rig(ClockKind::Fake, OrderingMode::Strict);
    let p = r.sys.platform();
    assert_eq!((p.clock_kind(), p.timing()), (ClockKind::Fake, WaitTiming::Marker));
    let w = poll_word(&r);
    let t0 = p.now_us();
    assert!(!p.delay_until(w, MARKER, 7));
    assert_eq!(p.now_us() - t0, 7, "a word that does not hold waits the whole delay");
    r.marker.store_u32(4, MARKER, std::sync::atomic::Ordering::Release).unwrap();
    assert!(p.delay_until(w, MARKER, 7));
    assert_eq!(p.now_us() - t0, 7, "a word that holds returns without advancing the clock");
    assert!(!p.delay_until(w, MARKER ^ 1, 3));
    assert_eq!(p.now_us() - t0, 10);
    p.udelay(5);
    assert_eq!(p.now_us() - t0, 15);
}

#[test]
fn fake_clock_driver_timing_always_waits_the_whole_delay() {
    let r = rig(ClockKind::Fake, OrderingMode::Strict);
    let p = r.sys.platform();
    p.set_timing(WaitTiming::Driver);
    assert_eq!(p.timing(), WaitTiming::Driver);
    let w = poll_word(&r);
    let t0 = p.now_us();
    assert!(!p.delay_until(w, MARKER, 61));
    assert_eq!(p.now_us() - t0, 61);
    r.marker.store_u32(4, MARKER, std::sync::atomic::Ordering::Release).unwrap();
    assert!(p.delay_until(w, MARKER, 61));
    assert_eq!(p.now_us() - t0, 122, "the driver's timing waits even when the word already holds");
}

#[test]
fn deferred_work_stays_pending_until_a_delay_executes_it() {
    for timing in [WaitTiming::Marker, WaitTiming::Driver] {
        let mut r = rig(ClockKind::Fake, OrderingMode::Adversarial);
        let p = std::sync::Arc::clone(r.sys.platform());
        p.set_timing(timing);
        let Submitted { data, pa, n, .. } = submit(&mut r, 100_000, 3);
        assert_eq!(r.dev.pending(r.eng, 0, Direction::Tx), n, "{timing:?}: the doorbell only hands work over");
        assert_eq!(r.dev.pending(r.eng, 0, Direction::Rx), n);
        assert!(!r.marker_landed());
        let t0 = p.now_us();
        assert!(p.delay_until(poll_word(&r), MARKER, 10), "{timing:?}: the delay executed the batch");
        let waited = if timing == WaitTiming::Marker { 0 } else { 10 };
        assert_eq!(p.now_us() - t0, waited, "{timing:?}: virtual time");
        assert_eq!(r.dev.pending(r.eng, 0, Direction::Tx), 0);
        assert_eq!(r.dev.engine_stats(r.eng).unwrap().descriptors, u64::from(n));
        // The last data pair carries WRITE_BARRIER: posted HBM writes landed before the marker.
        assert_landed(&r, &data, pa);
        r.q.ack(n);
    }
}

#[test]
fn a_plain_udelay_also_executes_deferred_work() {
    let mut r = rig(ClockKind::Fake, OrderingMode::Strict);
    let Submitted { data, pa, n, .. } = submit(&mut r, 5000, 4);
    r.sys.platform().udelay(1);
    assert!(r.marker_landed());
    assert_eq!(r.dev.pending(r.eng, 0, Direction::Rx), 0);
    assert_landed(&r, &data, pa);
    r.q.ack(n);
}

#[test]
fn on_the_real_clock_a_waiting_thread_runs_work_no_worker_runs() {
    for timing in [WaitTiming::Marker, WaitTiming::Driver] {
        let mut r = rig(ClockKind::Real, OrderingMode::Relaxed);
        r.sys.platform().set_timing(timing);
        // A zero-length delay still offers once: nobody else will ever execute this work.
        let Submitted { data, pa, n, .. } = submit(&mut r, 70_000, 5);
        assert!(r.sys.platform().delay_until(poll_word(&r), MARKER, 0), "{timing:?}");
        assert_eq!(r.dev.pending(r.eng, 0, Direction::Tx), 0);
        assert_landed(&r, &data, pa);
        r.q.ack(n);
        // And a longer one returns with the word holding.
        let Submitted { data, pa, n, .. } = submit(&mut r, 4096, 6);
        assert!(r.sys.platform().delay_until(poll_word(&r), MARKER, 50), "{timing:?}");
        assert_landed(&r, &data, pa);
        r.q.ack(n);
    }
}

#[test]
fn a_bare_platform_knows_no_engines_and_only_waits() {
    let mut r = rig(ClockKind::Fake, OrderingMode::Strict);
    let bare = EmuPlatform::new(r.sys.host().clone(), ClockKind::Fake);
    let Submitted { n, .. } = submit(&mut r, 4096, 7);
    let t0 = bare.now_us();
    assert!(!bare.delay_until(poll_word(&r), MARKER, 9));
    assert_eq!(bare.now_us() - t0, 9);
    assert_eq!(r.dev.pending(r.eng, 0, Direction::Tx), n, "the bare platform executed nothing");
    // The system's platform does.
    assert!(r.sys.platform().delay_until(poll_word(&r), MARKER, 9));
    r.q.ack(n);
}

#[test]
fn a_marker_delay_stops_executing_once_its_word_holds() {
    let mut r = rig(ClockKind::Real, OrderingMode::Strict);
    // Another queue pair of the same engine, with a 64-pair copy of its own.
    let engine = udma::Udma::init(&*r.dev, r.arch, r.eng).unwrap();
    let mut other = engine.init_queue(&*r.dev, 1, ring(&r.dev, 256), ring(&r.dev, 256), 256).unwrap();
    let src = r.dev.host().alloc(64 * 4096, 4096).unwrap();
    let dst = r.dev.alloc_hbm(64 * 4096, 4096).unwrap();
    let s = r.host_addr(&src, 0);
    for i in 0..64 {
        other.copy_prepare_one(s + i * 4096, dst.pa + i * 4096, 4096, Barrier::None, false).unwrap();
    }
    // Ours first in round-robin order (queue 0), then the other queue's doorbells.
    let Submitted { data, pa, n, .. } = submit(&mut r, 4096, 8);
    other.copy_start(&*r.dev, 64, 64).unwrap();
    assert!(r.sys.platform().delay_until(poll_word(&r), MARKER, 1_000_000));
    assert_landed(&r, &data, pa);
    assert_eq!(r.dev.pending(r.eng, 1, Direction::Tx), 64, "the other queue's work was left pending");
    assert_eq!(r.dev.engine_stats(r.eng).unwrap().descriptors, u64::from(n));
    // A plain delay watches no word: it runs the engine until idle.
    r.sys.platform().udelay(0);
    assert_eq!(r.dev.pending(r.eng, 1, Direction::Tx), 0);
    assert_eq!(r.dev.engine_stats(r.eng).unwrap().descriptors, u64::from(n) + 64);
    r.q.ack(n);
}
