//! What needs the platform wrapped: interleavings with another thread held at an exact point — a gate parks a
//! named thread in one of the platform's calls until the test opens it (the completion thread in its first
//! marker-aware delay, a submitter in the allocation of a ring's zero-copy state; no sleeps: the test waits
//! until the thread is parked), an engine that runs a moment too late (after a wait's last poll), and what
//! the op layer does at the moment it unpins user pages (the calling task's address space is handed out
//! wrapped in turn, and every unpin records what the ring's queue still held then).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use ndma::zerocopy::{CqConsumer, CqEntry};
use ndma::{
    dhal, poll_plan, BatchOp, CtxHandle, HostBuf, NdmaError, NeuronDevice, Platform, System, Transfer, UserMm,
    PAGE_SIZE,
};
use ndma_emu::test_utils::take_completions as take;
use ndma_emu::test_utils::*;
use ndma_emu::user::EnterGuard;
use ndma_emu::{AddressSpace, ClockKind, EmuDevice, EmuPlatform, EmuSystem, ExecPolicy, MapSpec};
use ndma_emu::{OrderingMode, Placement, PlannedFault};
use udma::{Arch, Direction};

const PAGE: u64 = PAGE_SIZE;

/// Holds the threads whose name starts with `prefix`, the first time one passes, until opened.
struct Gate {
    prefix: &'static str,
    /// (open, a thread is parked)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl Gate {
    fn new(prefix: &'static str) -> Arc<Gate> {
        Arc::new(Gate { prefix, state: Mutex::new((false, false)), cv: Condvar::new() })
    }

    fn pass(&self) {
        if !std::thread::current().name().is_some_and(|n| n.starts_with(self.prefix)) {
            return;
        }
        let mut s = self.state.lock().unwrap();
        s.1 = true;
        self.cv.notify_all();
        while !s.0 {
            s = self.cv.wait(s).unwrap();
        }
    }

    fn wait_parked(&self) {
        let mut s = self.state.lock().unwrap();
        while !s.1 {
            s = self.cv.wait(s).unwrap();
        }
    }

    fn open(&self) {
        self.state.lock().unwrap().0 = true;
        self.cv.notify_all();
    }
}

/// Opens its gates when dropped: a failed assertion must not leave a thread parked (the op layer's drop would
/// then wait for it forever, turning a failure into a hang).
struct OpenOnDrop(Vec<Arc<Gate>>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(|g| g.open());
    }
}

/// One unpin: pages let go, TX descriptors still pending on NC 0's H2T queue then, and whether it was hung.
type Unpin = (usize, u32, bool);

/// What the address-space spies share: the queue they look at and what they saw.
#[derive(Default)]
struct Watch {
    emu: OnceLock<Arc<EmuDevice>>,
    queue: OnceLock<(u32, u32)>,
    unpins: Mutex<Vec<Unpin>>,
}

impl Watch {
    fn note(&self, pages: usize) {
        let (emu, &(eng, qid)) = (self.emu.get().expect("set"), self.queue.get().expect("set"));
        self.unpins.lock().unwrap().push((pages, emu.pending(eng, qid, Direction::Tx), emu.is_hung(eng, qid)));
    }
}

/// The calling task's address space, recording every unpin.
struct SpyMm {
    inner: Arc<dyn UserMm>,
    watch: Arc<Watch>,
}

impl UserMm for SpyMm {
    fn pid(&self) -> u32 {
        self.inner.pid()
    }
    fn pin_pages_fast(&self, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> ndma::Result<usize> {
        self.inner.pin_pages_fast(va, n, write, pages)
    }
    fn pin_pages(&self, va: u64, n: usize, write: bool, pages: &mut Vec<u64>) -> ndma::Result<usize> {
        self.inner.pin_pages(va, n, write, pages)
    }
    fn unpin_pages(&self, pages: &[u64], dirty: bool) {
        self.watch.note(pages.len());
        self.inner.unpin_pages(pages, dirty)
    }
}

/// The model's platform, with a gate in `delay_until` and one in `alloc_coherent` (which can also hand out
/// a buffer shorter than asked, as a safe `Platform` may), handing out address spaces that record their unpins — one spy per address space, as `current_mm` must (the op layer tells
/// address spaces apart by their `Arc`).
struct GatedPlatform {
    inner: Arc<EmuPlatform>,
    delay: Arc<Gate>,
    alloc: Arc<Gate>,
    watch: Arc<Watch>,
    spies: Mutex<Vec<Spied>>,
    /// A length `alloc_coherent` answers with a 256-byte buffer (0: none).
    short: AtomicUsize,
    late: Late,
}

/// A late engine: while `swallow` > 0, a delay on the thread named "chain" does nothing (with deferred
/// engines, which run only when a thread delays, nothing runs) and counts down; the delay that brings it to 0
/// moves the clock on by `late_us` first, then delays for real.
#[derive(Default)]
struct Late {
    swallow: AtomicU64,
    late_us: AtomicU64,
}

impl Late {
    /// Whether this delay is swallowed.
    fn swallowed(&self, inner: &EmuPlatform) -> bool {
        if std::thread::current().name() != Some("chain") {
            return false;
        }
        match self.swallow.load(Ordering::SeqCst) {
            0 => false,
            1 => {
                self.swallow.store(0, Ordering::SeqCst);
                inner.advance_us(self.late_us.load(Ordering::SeqCst));
                false
            }
            left => {
                self.swallow.store(left - 1, Ordering::SeqCst);
                true
            }
        }
    }
}

/// An address space and the spy handed out for it.
type Spied = (Arc<dyn UserMm>, Arc<dyn UserMm>);

impl Platform for GatedPlatform {
    fn jiffies(&self) -> u64 {
        self.inner.jiffies()
    }
    fn now_us(&self) -> u64 {
        self.inner.now_us()
    }
    fn udelay(&self, us: u64) {
        self.inner.udelay(us)
    }
    fn delay_until(&self, word: &AtomicU32, value: u32, us: u64) -> bool {
        self.delay.pass();
        if self.late.swallowed(&self.inner) {
            return false;
        }
        self.inner.delay_until(word, value, us)
    }
    fn is_emulation(&self) -> bool {
        self.inner.is_emulation()
    }
    fn alloc_coherent(&self, len: usize) -> ndma::Result<HostBuf> {
        self.alloc.pass();
        // Relaxed: a knob the test thread sets before the allocations it is for.
        let short = self.short.load(Ordering::Relaxed);
        self.inner.alloc_coherent(if len == short { 256 } else { len })
    }
    fn virt_to_phys(&self, cpu: *const u8, len: usize) -> Option<u64> {
        self.inner.virt_to_phys(cpu, len)
    }
    fn current_mm(&self) -> Option<Arc<dyn UserMm>> {
        let inner = self.inner.current_mm()?;
        let mut spies = self.spies.lock().unwrap();
        if let Some((_, spy)) = spies.iter().find(|(mm, _)| Arc::ptr_eq(mm, &inner)) {
            return Some(Arc::clone(spy));
        }
        let spy: Arc<dyn UserMm> = Arc::new(SpyMm { inner: Arc::clone(&inner), watch: Arc::clone(&self.watch) });
        spies.push((inner, Arc::clone(&spy)));
        Some(spy)
    }
    fn device_diagnostics(&self, device: u32, engine: u32, qid: u32) -> Option<String> {
        self.inner.device_diagnostics(device, engine, qid)
    }
}

/// A model (fake clock, the tests' sizes and silicon budgets; V3 with inline engines unless said) whose op
/// layer runs over a [`GatedPlatform`] holding the completion thread in `delay_until` and threads named
/// "submitter" in `alloc_coherent`. Fields drop in order: the op layer, then the model.
struct Gated {
    system: System,
    emu: EmuSystem,
    platform: Arc<GatedPlatform>,
    delay: Arc<Gate>,
    alloc: Arc<Gate>,
    watch: Arc<Watch>,
}

impl Gated {
    fn new() -> Gated {
        Gated::with(Arch::V3, ExecPolicy::Inline)
    }

    fn with(arch: Arch, exec: ExecPolicy) -> Gated {
        let cfg = testbed_config(arch, exec, OrderingMode::Adversarial, ClockKind::Fake);
        let emu = cfg.model().unwrap();
        let (delay, alloc, watch) = (Gate::new("ndma cmpltn"), Gate::new("submitter"), Arc::new(Watch::default()));
        let inner = Arc::clone(emu.platform());
        let (d, a, w) = (Arc::clone(&delay), Arc::clone(&alloc), Arc::clone(&watch));
        let platform = Arc::new(GatedPlatform {
            inner,
            delay: d,
            alloc: a,
            watch: w,
            spies: Mutex::default(),
            short: AtomicUsize::new(0),
            late: Late::default(),
        });
        let hw = emu.devices().iter().map(|d| ndma_emu::device_hw(d).unwrap()).collect();
        let system = System::new(arch, Arc::clone(&platform) as Arc<dyn Platform>, hw).unwrap();
        watch.emu.set(Arc::clone(emu.device(0))).ok().unwrap();
        watch.queue.set(system.devices()[0].h2t_queue(0).unwrap()).unwrap();
        Gated { system, emu, platform, delay, alloc, watch }
    }

    /// A guard that opens both gates when it goes (declare it after the `Gated`, so it goes first).
    fn open_on_drop(&self) -> OpenOnDrop {
        OpenOnDrop(vec![Arc::clone(&self.delay), Arc::clone(&self.alloc)])
    }

    /// A process (address space `pid`, entered on this thread) with NC 0's completion queue mapped, and the
    /// completion thread parked on NC 1 ([`Gated::park_completion_thread`]).
    fn parked_process(&self, pid: u32) -> (Arc<AddressSpace>, EnterGuard, CqConsumer) {
        let dev = &self.system.devices()[0];
        let mm = AddressSpace::new(self.emu.host(), pid);
        let enter = mm.enter();
        let cq = CqConsumer::new(&dev.completion_queue(0).unwrap()).unwrap();
        self.park_completion_thread(&mm);
        (mm, enter, cq)
    }

    /// Parks the completion thread in the marker wait of an async request on NC 1 (its queue hung, so the
    /// wait is entered), where it holds no lock NC 0's ring needs.
    fn park_completion_thread(&self, mm: &AddressSpace) {
        let dev = &self.system.devices()[0];
        let (eng, qid) = dev.h2t_queue(1).unwrap();
        self.emu.device(0).fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
        let va = mm.map(&MapSpec::new(1, Placement::Contiguous)).unwrap();
        let mc = dev.alloc_device(PAGE, 1).unwrap();
        dev.zerocopy_submit(1, &[BatchOp { offset: 0, size: PAGE, buffer: va }], &mc, 0, -1, true, 77, 0).unwrap();
        self.delay.wait_parked();
    }

    /// Fills NC 0's ring with one async request (`seq`, `context`) of 130 pieces of 64 scattered pages (65 slots
    /// each): 125 issue, leaving 51 of the ring's 8176 slots free. Returns the request's bytes (a pattern of
    /// `seed`, written to the user pages) and the device chunk they go to.
    fn fill_ring(&self, mm: &AddressSpace, seed: u64, seq: u64, context: u64) -> (Vec<u8>, Arc<ndma::MemChunk>) {
        let dev = &self.system.devices()[0];
        let pages = 130 * 64;
        let va = mm.map(&MapSpec::new(pages as usize, Placement::Scattered { seed })).unwrap();
        let data = pattern(seed, 0, (pages * PAGE) as usize);
        mm.write(va, &data).unwrap();
        let zc_mc = dev.alloc_device(pages * PAGE, 0).unwrap();
        let op = BatchOp { offset: 0, size: pages * PAGE, buffer: va };
        dev.zerocopy_submit(0, &[op], &zc_mc, 0, -1, true, seq, context).unwrap();
        (data, zc_mc)
    }
}

/// A classic copy on a ring that zero-copy pieces fill retires the pieces ahead of it until its batch fits —
/// as many as that takes, and not one more: with 51 slots free and pieces of 65, a batch of 181 slots retires
/// exactly two. The completion thread is parked elsewhere, so only the copy's staging retires anything.
#[test]
fn a_classic_copy_retires_exactly_the_zero_copy_pieces_it_needs_room_for() {
    let g = Gated::new();
    let _open = g.open_on_drop();
    let dev = &g.system.devices()[0];
    let emu = g.emu.device(0);
    let (mm, _enter, cq) = g.parked_process(4243);
    let (data, zc_mc) = g.fill_ring(&mm, 43, 6, 60);
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (125 * 65, 125 * 65));
    // 180 descriptors and the marker: 181 slots = 51 + 2 × 65.
    let size = 180 << 16;
    let (src, dst) = (dev.alloc_host(size, 0).unwrap(), dev.alloc_device(size + 2 * PAGE, 0).unwrap());
    let bytes = pattern(44, 0, size as usize);
    write_chunk(emu, &src, 0, &bytes).unwrap();
    let fill = vec![0xa5; (size + 2 * PAGE) as usize];
    write_chunk(emu, &dst, 0, &fill).unwrap();
    dev.memcpy_mc(&src, &dst, 0, PAGE, size).unwrap();
    let got = read_vec(emu, &dst, 0, size + 2 * PAGE).unwrap();
    assert!(got[..PAGE as usize] == fill[..PAGE as usize], "bytes before the window");
    assert!(got[PAGE as usize..(PAGE + size) as usize] == bytes[..], "the window");
    assert!(got[(PAGE + size) as usize..] == fill[..PAGE as usize], "bytes after the window");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (123 * 65, 123 * 65), "two pieces retired, no more");
    assert_eq!(cq.len(), 0, "the request's last piece is still queued");
    g.delay.open();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 6, compl_ret: 0, context: 60 }]);
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    assert!(read_vec(emu, &zc_mc, 0, data.len() as u64).unwrap() == data);
}

/// Staging a double-buffer call's copy on a ring that zero-copy pieces fill retires pieces to make room; when
/// a retired piece's wait fails, the ring is re-initialised, and the chain's own `prev` — a copy over its own
/// source, which cannot run again — is aborted under the call. The call must report it (`-EIO`), not wait for
/// a context with nothing in flight and call it done (it returned `Ok`, and `prev`'s bytes never moved).
#[test]
fn a_prev_aborted_while_its_call_makes_room_is_reported() {
    let g = Gated::new();
    let _open = g.open_on_drop();
    let dev = &g.system.devices()[0];
    let emu = g.emu.device(0);
    let (mm, _enter, cq) = g.parked_process(4242);
    // NC 0's queue hangs at its next doorbell: the zero-copy pieces and `prev` stay pending.
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let _pieces = g.fill_ring(&mm, 41, 5, 50);
    // `prev`: a device copy over its own source, 2 slots.
    let own = dev.alloc_device(2 * PAGE, 0).unwrap();
    let before = pattern(7, 0, (2 * PAGE) as usize);
    write_chunk(emu, &own, 0, &before).unwrap();
    let prev = dev.memcpy_mc_async(&own, &own, 0, 64, PAGE, 0, CtxHandle::None).unwrap();
    // The next copy needs 65 slots: its staging retires the hung head piece, whose wait times out.
    let (src, dst) = (dev.alloc_host(4 << 20, 0).unwrap(), dev.alloc_device(4 << 20, 0).unwrap());
    assert_eq!(dev.memcpy_mc_async(&src, &dst, 0, 0, 4 << 20, 0, prev), Err(NdmaError::Aborted(prev.raw())));
    assert!(read_vec(emu, &own, 0, 2 * PAGE).unwrap() == before, "prev never ran");
    assert_eq!(dev.ring_stats(0).unwrap().aborts, 1);
    g.delay.open();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 5, compl_ret: -110, context: 50 }]);
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    // The device is usable: the same chain again.
    let prev = dev.memcpy_mc_async(&own, &own, 0, 64, PAGE, 0, CtxHandle::None).unwrap();
    let cur = dev.memcpy_mc_async(&src, &dst, 0, 0, 4 << 20, 0, prev).unwrap();
    dev.memcpy_mc_wait(&src, &dst, cur).unwrap();
    let once: Vec<u8> =
        before[..64].iter().chain(&before[..PAGE as usize]).chain(&before[64 + PAGE as usize..]).copied().collect();
    assert!(read_vec(emu, &own, 0, 2 * PAGE).unwrap() == once, "prev ran once");
}

/// Runs `submit` on a thread named "submitter" that parks allocating NC 0's zero-copy state (the ring's first
/// zero-copy use: under the ring lock, past the submit's stopped-check), drops `system` meanwhile, waits for
/// the completion thread to stop, then lets the submit go on. Returns its result.
fn submit_across_system_drop(
    system: System,
    alloc: &Gate,
    submit: impl FnOnce(&NeuronDevice) -> ndma::Result<()> + Send + 'static,
) -> ndma::Result<()> {
    let dev = Arc::clone(&system.devices()[0]);
    let submitter = {
        let dev = Arc::clone(&dev);
        std::thread::Builder::new().name("submitter".into()).spawn(move || submit(&dev)).unwrap()
    };
    alloc.wait_parked();
    assert!(dev.zerocopy_status(1).unwrap().thread_running, "the submit started the thread");
    // The system goes (the caller keeps the device): its drop stops the completion thread.
    let dropper = std::thread::spawn(move || drop(system));
    while dev.zerocopy_status(1).unwrap().thread_running {
        std::thread::yield_now();
    }
    alloc.open();
    let result = submitter.join().unwrap();
    dropper.join().unwrap();
    result
}

/// A System dropped while an async submit is between its checks and its enqueue (held here allocating the
/// ring's zero-copy state, under the ring lock): the stopping completion thread must still complete what that
/// submit queued — it looks at every ring once more before it leaves — instead of leaving an accepted request
/// that nothing completes.
#[test]
fn an_async_request_accepted_while_its_system_drops_still_completes() {
    let Gated { system, emu, alloc, delay, .. } = Gated::new();
    let _open = OpenOnDrop(vec![Arc::clone(&alloc)]);
    delay.open(); // the completion thread runs freely here
    let dev = Arc::clone(&system.devices()[0]);
    let mm = AddressSpace::new(emu.host(), 4242);
    let va = mm.map(&MapSpec::new(4, Placement::Contiguous)).unwrap();
    mm.write(va, &pattern(12, 0, 4 * PAGE as usize)).unwrap();
    let mc = dev.alloc_device(4 * PAGE, 0).unwrap();
    let submit = {
        let (mm, mc) = (Arc::clone(&mm), Arc::clone(&mc));
        move |dev: &NeuronDevice| {
            let _enter = mm.enter();
            let op = BatchOp { offset: 0, size: 4 * PAGE, buffer: va };
            dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 9, 90)
        }
    };
    assert_eq!(submit_across_system_drop(system, &alloc, submit), Ok(()), "the submit had passed its checks");
    let cq = CqConsumer::new(&dev.completion_queue(0).unwrap()).unwrap();
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 9, compl_ret: 0, context: 90 }]);
    assert!(read_vec(emu.device(0), &mc, 0, 4 * PAGE).unwrap() == pattern(12, 0, 4 * PAGE as usize));
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 0);
    // Later async requests are refused: nothing would complete them.
    let _enter = mm.enter();
    let op = BatchOp { offset: 0, size: PAGE, buffer: va };
    assert_eq!(
        dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 10, 0),
        Err(NdmaError::CompletionThreadStopped { device: 0 })
    );
    drop((cq, mc, dev));
    assert!(emu.host().frames().leak_check().is_clean());
}

/// A request whose deferred piece is drained (its issued piece failed) leaves the first-unpinned cursor at
/// what is queued behind it — here a request already over. Passing that is progress: a sync request stepping
/// the queue forward must go on from there, not conclude that nothing can move and fail `-EBUSY`. The
/// completion thread, which would pass it too, is held on another ring.
#[test]
fn a_sync_request_steps_past_a_request_already_over_left_at_the_unpinned_cursor() {
    let g = Gated::new();
    let _open = g.open_on_drop();
    let dev = &g.system.devices()[0];
    let (mm, _enter, cq) = g.parked_process(4242);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    dev.set_zerocopy_pin_budget(64);
    let va = mm.map(&MapSpec::new(129, Placement::Contiguous)).unwrap();
    let mc = dev.alloc_device(129 * PAGE, 0).unwrap();
    // Request 1: two pieces of 64 pages; the first is pinned and issued onto a queue that hangs, the second
    // waits for pin budget. Request 2, already over, queues behind it.
    g.emu.device(0).fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let ops = [
        BatchOp { offset: 0, size: 64 * PAGE, buffer: va },
        BatchOp { offset: 64 * PAGE, size: 64 * PAGE, buffer: va + 64 * PAGE },
    ];
    dev.zerocopy_submit(0, &ops, &mc, 0, -1, true, 1, 10).unwrap();
    dev.zerocopy_submit_completed(0, -1, 2, 0, 20).unwrap();
    // A sync request of one page: behind the deferred piece it first retires request 1's issued piece (which
    // times out, draining request 1), then must step past request 2.
    let op = BatchOp { offset: 128 * PAGE, size: PAGE, buffer: va + 128 * PAGE };
    assert_eq!(dev.zerocopy_submit(0, &[op], &mc, 0, -1, true, 0, 0), Ok(()));
    g.delay.open();
    let want = [
        CqEntry { sequence_num: 1, compl_ret: -110, context: 10 },
        CqEntry { sequence_num: 2, compl_ret: 0, context: 20 },
    ];
    assert_eq!(take(&cq, 2), want);
    assert_eq!(dev.zerocopy_status(0).unwrap().contexts, 0);
}

/// A synchronous device → host request whose first two pieces are issued onto a queue that hangs and whose
/// third cannot be pinned (a hole): the request fails and is drained. The drain's wait for the first piece
/// times out; the two issued pieces' pages must be unpinned only after the ring was re-initialised, when the
/// engine holds none of their descriptors (they were unpinned while the hung queue still held them).
#[test]
fn a_failed_drain_unpins_only_after_the_engine_let_go_of_the_pages() {
    let g = Gated::new();
    let _open = g.open_on_drop();
    let dev = &g.system.devices()[0];
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let mm = AddressSpace::new(g.emu.host(), 4242);
    let _enter = mm.enter();
    // 200 pages, a hole at page 150: pieces [0, 64) and [64, 128) pin and are issued, [128, 192) does not pin.
    let va = mm.map(&MapSpec::new(200, Placement::Contiguous).holes([150])).unwrap();
    let mc = dev.alloc_device(200 * PAGE, 0).unwrap();
    g.emu.device(0).fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let op = BatchOp { offset: 0, size: 200 * PAGE, buffer: va };
    let err = dev.zerocopy_submit(0, &[op], &mc, 0, -1, false, 0, 0).unwrap_err();
    assert_eq!(err.errno(), -12, "{err}: the third piece's partial pin");
    let unpins = g.watch.unpins.lock().unwrap().clone();
    // The 22-page unpins are the third piece's short pins, which never reached the ring.
    let issued: Vec<Unpin> = unpins.iter().copied().filter(|&(n, _, _)| n == 64).collect();
    assert_eq!(issued, [(64, 0, false), (64, 0, false)], "every unpin: {unpins:?}");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    assert!(g.emu.host().frames().leak_check().is_clean());
}

/// Process A (pid 4242) queues an async request whose second piece waits for pin budget, then exits; process
/// B reuses the pid and pre-pins a range. The completion thread pinning A's deferred piece looks it up in the
/// pre-pinned store on behalf of A's captured address space: that lookup must neither take B's pages nor
/// evict B's range as stale (it released it; B's own unpin then failed `-ENOENT`).
#[test]
fn a_deferred_piece_of_an_exited_process_leaves_its_pid_successors_pinned_range_alone() {
    let g = Gated::new();
    let _open = g.open_on_drop();
    let dev = &g.system.devices()[0];
    let cq = CqConsumer::new(&dev.completion_queue(0).unwrap()).unwrap();
    dev.set_zerocopy_pin_budget(64);
    let a = AddressSpace::new(g.emu.host(), 4242);
    let mc = dev.alloc_device(128 * PAGE, 0).unwrap();
    {
        let _enter = a.enter();
        g.park_completion_thread(&a);
        let va = a.map(&MapSpec::new(128, Placement::Contiguous)).unwrap();
        // Two pieces of 64 pages: the first pinned, the second deferred (budget 64).
        dev.zerocopy_submit(0, &[BatchOp { offset: 0, size: 128 * PAGE, buffer: va }], &mc, 0, -1, true, 1, 10)
            .unwrap();
        let s = dev.zerocopy_status(0).unwrap();
        assert_eq!((s.contexts, s.pinned_pages), (2, 64));
    }
    a.exit();
    let b = AddressSpace::new(g.emu.host(), 4242);
    let _enter = b.enter();
    let vb = b.map(&MapSpec::new(128, Placement::Contiguous)).unwrap();
    g.system.pin_host_memory(vb, 128 * PAGE).unwrap();
    g.delay.open();
    // A's deferred piece cannot be pinned remotely: A exited (-ESRCH).
    assert_eq!(take(&cq, 1), [CqEntry { sequence_num: 1, compl_ret: -3, context: 10 }]);
    assert_eq!(g.system.pinned_ranges(), 1, "B's range is B's");
    assert_eq!(g.system.unpin_host_memory(vb), Ok(()));
}

/// Completions held back behind a full completion queue when the System is dropped: the stopping thread
/// leaves them (nobody may read them, and the drop must not wait for a consumer), but a caller that keeps the
/// device and keeps reading gets them — every later sync zero-copy request on the ring posts what the
/// consumer made room for (classic copies and status reads do not).
#[test]
fn completions_held_back_when_the_system_drops_reach_a_consumer_that_keeps_the_device() {
    let Gated { system, emu, delay, alloc, .. } = Gated::new();
    let _open = OpenOnDrop(vec![Arc::clone(&alloc), Arc::clone(&delay)]);
    delay.open(); // the completion thread runs freely
    let dev = Arc::clone(&system.devices()[0]);
    let cq = CqConsumer::new(&dev.completion_queue(0).unwrap()).unwrap();
    let n = 1030u64;
    for seq in 1..=n {
        while let Err(e) = dev.zerocopy_submit_completed(0, -1, seq, 0, !seq) {
            assert_eq!(e, NdmaError::QueueFull { nc: 0 }, "the context queue makes room as the thread posts");
            std::thread::yield_now();
        }
    }
    while dev.zerocopy_status(0).unwrap().contexts > 0 {
        std::thread::yield_now();
    }
    assert_eq!(dev.zerocopy_status(0).unwrap().backlog, 6, "1024 posted, 6 held back");
    drop(system);
    let mut got = take(&cq, 1024);
    let mm = AddressSpace::new(emu.host(), 4242);
    let _enter = mm.enter();
    let va = mm.map(&MapSpec::new(1, Placement::Contiguous)).unwrap();
    let mc = dev.alloc_device(PAGE, 0).unwrap();
    dev.zerocopy_submit(0, &[BatchOp { offset: 0, size: PAGE, buffer: va }], &mc, 0, -1, true, 0, 0).unwrap();
    got.extend(take(&cq, 6));
    let want: Vec<CqEntry> = (1..=n).map(|seq| CqEntry { sequence_num: seq, compl_ret: 0, context: !seq }).collect();
    assert!(got == want, "every completion once, in order");
    assert_eq!(dev.zerocopy_status(0).unwrap().backlog, 0);
}

/// Runs, on a thread named "chain", copy 1 then (chained) copy 2 on a V2 device whose deferred engine runs
/// both only after copy 1's wait made its last poll — the marker lands a moment too late — while copy 1
/// started inside a reset window, so the V2 retry re-initialises the ring. Hands the chain's result to
/// `check`, with the model and what `setup` kept.
fn late_chain<K>(
    setup: impl FnOnce(&ndma::NeuronDevice, &ndma_emu::EmuDevice) -> (Transfer, Transfer, K),
    check: impl FnOnce(&ndma_emu::EmuDevice, ndma::Result<()>, K),
) {
    let g = Gated::with(Arch::V2, ExecPolicy::Deferred);
    let _open = g.open_on_drop();
    g.delay.open();
    // Copy 1's wait (a 2-descriptor async batch) delays 1 + (loops + 1) times before it times out.
    let (_, loops) = poll_plan(dhal(Arch::V2), false, 2, true, false);
    g.platform.late.swallow.store(loops + 2, Ordering::SeqCst);
    g.platform.late.late_us.store(5_000, Ordering::SeqCst);
    let (dev, model) = (&g.system.devices()[0], g.emu.device(0));
    let (first, second, kept) = setup(dev, model);
    let result = std::thread::scope(|scope| {
        let run = || {
            let copy = dev.start(&first)?;
            // The reset begins after copy 1's doorbell and is over before the engine runs (the clock moves
            // 5 ms first): nothing hangs, but copy 1 started inside the window.
            assert!(model.reset_nc(0, 1));
            copy.then(&second)?.wait()
        };
        std::thread::Builder::new().name("chain".into()).spawn_scoped(scope, run).unwrap().join().unwrap()
    });
    assert_eq!(g.platform.late.swallow.load(Ordering::SeqCst), 0, "the engine ran late");
    let s = dev.ring_stats(0).unwrap();
    assert_eq!((s.timeouts, s.retries, s.replays, s.transfers), (1, 1, 0, 2), "{s:?}");
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
    check(model, result, kept);
}

/// Two host pages holding 0x11 and 0x22 and a device page holding 0xee.
fn three_pages(
    dev: &ndma::NeuronDevice,
    emu: &ndma_emu::EmuDevice,
) -> (Arc<ndma::MemChunk>, Arc<ndma::MemChunk>, Arc<ndma::MemChunk>) {
    let page = |host, byte| {
        let c = alloc(dev, host, 4096, 0).unwrap();
        fill_chunk(emu, &c, 0, 4096, byte).unwrap();
        c
    };
    (page(true, 0x11), page(true, 0x22), page(false, 0xee))
}

/// Both copies write one destination: the later one's bytes must stay. The V2 replay ran copy 1 again after
/// copy 2, completed in place, and the destination held copy 1's bytes.
#[test]
fn a_late_marker_in_a_reset_window_does_not_rerun_the_waited_copy_after_a_later_one() {
    late_chain(
        |dev, emu| {
            let (s1, s2, d) = three_pages(dev, emu);
            (Transfer::new(&s1, &d, 4096), Transfer::new(&s2, &d, 4096), Arc::clone(&d))
        },
        |emu, r, d| {
            assert_eq!(r, Ok(()));
            let out = read_vec(emu, &d, 0, 4096).unwrap();
            assert!(out.iter().all(|&b| b == 0x22), "the chain's last copy wrote 0x22, found {:#x}", out[0]);
        },
    );
}

/// Drain then refill: copy 1 moves `a` to `b`, copy 2 refills `a`. `b` must hold what `a` held.
#[test]
fn a_late_marker_in_a_reset_window_does_not_rerun_a_copy_whose_source_a_later_one_refilled() {
    late_chain(
        |dev, emu| {
            let (a, c, b) = three_pages(dev, emu);
            (Transfer::new(&a, &b, 4096), Transfer::new(&c, &a, 4096), (Arc::clone(&a), Arc::clone(&b)))
        },
        |emu, r, (a, b)| {
            assert_eq!(r, Ok(()));
            assert!(read_vec(emu, &a, 0, 4096).unwrap().iter().all(|&x| x == 0x22), "copy 2 refilled a");
            let out = read_vec(emu, &b, 0, 4096).unwrap();
            assert!(out.iter().all(|&x| x == 0x11), "copy 1 moved a's 0x11 to b, found {:#x}", out[0]);
        },
    );
}

/// Polls `cq` a bounded number of times for one entry (the completion thread may still be posting it).
fn poll_one(cq: &CqConsumer) -> Option<CqEntry> {
    for _ in 0..200_000 {
        if let Some(e) = cq.pop() {
            return Some(e);
        }
        std::thread::yield_now();
    }
    None
}

/// A System dropped while the completion thread re-polls a ring whose work cannot move (pin
/// budget 1 page: NC 1's 64-page async piece stays deferred), and an async request on NC 0 that passed its
/// stopped-check is between that check and its enqueue (held allocating NC 0's zero-copy state, under the
/// ring lock). The stopping pass looks only at NC 1's bit and moves nothing; before it leaves it must take
/// the last look at every ring that the idle (`bits == 0`) path takes. It did not: NC 0's accepted request
/// was never completed and its page stayed pinned.
#[test]
fn an_async_request_accepted_while_the_thread_stops_on_stuck_work_still_completes() {
    let Gated { system, emu, alloc, delay, .. } = Gated::new();
    let _open = OpenOnDrop(vec![Arc::clone(&alloc), Arc::clone(&delay)]);
    delay.open(); // the completion thread runs freely here
    let dev = Arc::clone(&system.devices()[0]);
    let mm = AddressSpace::new(emu.host(), 4242);
    let va = mm.map(&MapSpec::new(65, Placement::Contiguous)).unwrap();
    dev.set_zerocopy_pin_budget(1);
    // NC 1: a 64-page async piece that never fits the budget: the thread re-polls it every millisecond.
    let mc1 = dev.alloc_device(64 * PAGE, 1).unwrap();
    {
        let _enter = mm.enter();
        let op = BatchOp { offset: 0, size: 64 * PAGE, buffer: va };
        dev.zerocopy_submit(1, &[op], &mc1, 0, -1, true, 1, 10).unwrap();
    }
    assert!(dev.zerocopy_status(1).unwrap().thread_running);
    // NC 0: a one-page async request (fits the budget), on the ring's first zero-copy use.
    let mc0 = dev.alloc_device(PAGE, 0).unwrap();
    let submitter = {
        let (dev, mm, mc0) = (Arc::clone(&dev), Arc::clone(&mm), Arc::clone(&mc0));
        std::thread::Builder::new()
            .name("submitter".into())
            .spawn(move || {
                let _enter = mm.enter();
                let op = BatchOp { offset: 0, size: PAGE, buffer: va + 64 * PAGE };
                dev.zerocopy_submit(0, &[op], &mc0, 0, -1, true, 9, 90)
            })
            .unwrap()
    };
    alloc.wait_parked();
    let dropper = std::thread::spawn(move || drop(system));
    // Give the stopping thread every chance to finish (bounded: a thread that takes NC 0's lock for a last
    // look waits for the submitter, so the drop cannot finish before the gate opens).
    for _ in 0..2_000_000 {
        if dropper.is_finished() {
            break;
        }
        std::thread::yield_now();
    }
    alloc.open();
    assert_eq!(submitter.join().unwrap(), Ok(()), "the request was accepted");
    dropper.join().unwrap();
    let cq = CqConsumer::new(&dev.completion_queue(0).unwrap()).unwrap();
    let got = poll_one(&cq);
    let s = dev.zerocopy_status(0).unwrap();
    assert_eq!(
        got,
        Some(CqEntry { sequence_num: 9, compl_ret: 0, context: 90 }),
        "accepted async request never completed; NC 0 still holds {} context(s), {} page(s) pinned",
        s.contexts,
        s.pinned_pages
    );
}

/// The stopping thread's last look (the idle path) finds a request already over
/// (`zerocopy_submit_completed`) that a submit queued after passing its stopped-check. A pass moves such a
/// dummy from the pinned to the submitted region (step 2) and retires it in the next pass; that move is
/// progress. It was not counted as such, and a stopping pass that "moved nothing" leaves: the accepted request
/// was never completed. (On a running thread the same dummy cost a 1 ms idle wait.)
#[test]
fn a_completed_request_queued_while_the_system_drops_still_completes() {
    let Gated { system, alloc, delay, .. } = Gated::new();
    let _open = OpenOnDrop(vec![Arc::clone(&alloc), Arc::clone(&delay)]);
    delay.open();
    let dev = Arc::clone(&system.devices()[0]);
    let submit = |dev: &NeuronDevice| dev.zerocopy_submit_completed(0, -1, 9, 0, 90);
    assert_eq!(submit_across_system_drop(system, &alloc, submit), Ok(()), "the request was accepted");
    let cq = CqConsumer::new(&dev.completion_queue(0).unwrap()).unwrap();
    let got = poll_one(&cq);
    assert_eq!(
        (got, dev.zerocopy_status(0).unwrap().contexts),
        (Some(CqEntry { sequence_num: 9, compl_ret: 0, context: 90 }), 0),
        "the accepted request was never completed"
    );
}

// What the op layer relies on from a `Platform` it cannot trust: `alloc_coherent` promises at least the
// length asked for, 256-byte aligned, but `Platform` is a safe trait. A buffer that falls short is refused
// (`NoMemory`): the op layer used to record the size it asked for, and its bounds checks, its completion
// queue and DMA windows ran past the buffer into the next allocation.

/// The allocation a short buffer's refusal names.
const SHORT_WHAT: &str = "coherent host (short or misaligned buffer)";

#[test]
fn a_pool_refuses_a_host_buffer_shorter_than_asked() {
    let g = Gated::new();
    g.platform.short.store(8192, Ordering::Relaxed);
    let pool = ndma::memory::MemPool::new(0x10_0000_0000, 1 << 20, 0).unwrap();
    assert_eq!(
        pool.alloc_host(&*g.platform, 8192, 0).err(),
        Some(NdmaError::NoMemory { what: SHORT_WHAT, size: 8192 })
    );
    let fine = pool.alloc_host(&*g.platform, 4096, 0).unwrap();
    assert_eq!((fine.size(), fine.host_buf().unwrap().len()), (4096, 4096));
}

#[test]
fn a_device_on_a_short_platform_refuses_the_chunk_and_the_completion_queue_and_stays_usable() {
    let g = Gated::new();
    let dev = &g.system.devices()[0];
    g.platform.short.store(8192, Ordering::Relaxed);
    assert_eq!(dev.alloc_host(8192, 0).err(), Some(NdmaError::NoMemory { what: SHORT_WHAT, size: 8192 }));
    let (src, dst) = (dev.alloc_host(4096, 0).unwrap(), dev.alloc_device(8192, 0).unwrap());
    src.fill(0, 4096, 0x5c).unwrap();
    dev.memcpy_mc(&src, &dst, 0, 0, 4096).unwrap();
    let back = dev.alloc_host(4096, 0).unwrap();
    dev.memcpy_mc(&dst, &back, 0, 0, 4096).unwrap();
    let mut out = vec![0u8; 4096];
    back.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x5c));
    // The ring's zero-copy state (and its completion queue) is made on first use.
    let cq = ndma::zerocopy::NDMA_H2D_COMPL_QUEUE_SIZE;
    g.platform.short.store(cq, Ordering::Relaxed);
    assert_eq!(dev.completion_queue(0).err(), Some(NdmaError::NoMemory { what: SHORT_WHAT, size: cq as u64 }));
}
