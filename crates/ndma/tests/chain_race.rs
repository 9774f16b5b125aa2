//! A chain's handle names a context of its ring, and the ring is shared: once a call has released a context,
//! another chain may take it at once. `InFlight::then` must therefore learn whether its copy was consumed from
//! the call that consumed it, not by looking at the context again after the ring lock was released.
//!
//! The window is opened deterministically: a tracing subscriber runs a hook when the double-buffer call's
//! `memcpy_async` span exits, which is after the call released the ring lock and before it returns to `then`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ndma::{CtxHandle, NdmaError};
use ndma_emu::test_utils::*;
use ndma_emu::{ClockKind, ExecPolicy, OrderingMode, PlannedFault};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use udma::Arch;

type Hook = Box<dyn FnOnce() + Send>;

/// Runs its hook once, when a span named `memcpy_async` exits.
struct OnAsyncExit {
    next: AtomicU64,
    names: Mutex<HashMap<u64, &'static str>>,
    hook: Mutex<Option<Hook>>,
}

impl OnAsyncExit {
    fn new(hook: Hook) -> OnAsyncExit {
        OnAsyncExit { next: AtomicU64::new(0), names: Mutex::default(), hook: Mutex::new(Some(hook)) }
    }
}

impl Subscriber for OnAsyncExit {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.names.lock().unwrap().insert(id, attrs.metadata().name());
        Id::from_u64(id)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, id: &Id) {
        if self.names.lock().unwrap().get(&id.into_u64()) == Some(&"memcpy_async") {
            if let Some(hook) = self.hook.lock().unwrap().take() {
                hook();
            }
        }
    }
}

/// `then(b)` stages b and times out waiting for a (a one-shot hang): the call releases both contexts. Right
/// then, before `then` has returned, another user of the ring starts a chain and is given ASYNC1 — a's old
/// context. `then` must report its timeout and leave that copy alone: its owner waits for it and gets `Ok`
/// (before the fix, `then` found ASYNC1 in use, took it for its own copy refused before staging, and waited
/// for and released the other chain's copy: its owner's wait was `ContextNotInUse`).
#[test]
fn then_never_consumes_a_copy_another_chain_started_on_the_ring() {
    let tb = testbed(Arch::V3, ExecPolicy::Inline, OrderingMode::Adversarial, ClockKind::Fake);
    let (dev, emu) = tb.device(0);
    let (eng, qid) = dev.h2t_queue(0).unwrap();
    let a = Window::new(dev, emu, Dir::H2d, 10_000, 0, 1).unwrap();
    let b = Window::new(dev, emu, Dir::H2d, 10_000, 0, 2).unwrap();
    let c = Window::new(dev, emu, Dir::H2d, 10_000, 0, 3).unwrap();
    emu.fault_plan().add(PlannedFault::Hang { engine: eng, qid, persistent: false });
    let first = dev.start(&a.transfer()).unwrap();
    assert_eq!(first.handle(), CtxHandle::Async1);
    let other: Arc<Mutex<Option<ndma::Result<CtxHandle>>>> = Arc::default();
    let hook: Hook = {
        let (dev, other) = (Arc::clone(dev), Arc::clone(&other));
        let (src, dst, len) = (Arc::clone(&c.src), Arc::clone(&c.dst), c.len);
        // On another thread: the ring lock must be free by now, or this join never returns.
        Box::new(move || {
            let started =
                std::thread::spawn(move || dev.memcpy_mc_async(&src, &dst, GUARD, GUARD, len, 0, CtxHandle::None));
            *other.lock().unwrap() = Some(started.join().unwrap());
        })
    };
    let r = tracing::subscriber::with_default(OnAsyncExit::new(hook), || first.then(&b.transfer()).map(|h| h.handle()));
    assert!(matches!(r, Err(NdmaError::Timeout { .. })), "{r:?}");
    let h = other.lock().unwrap().take().expect("the hook ran").expect("the other chain started");
    assert_eq!(h, CtxHandle::Async1, "the other chain took a's released context");
    assert_eq!(dev.wait_handle(0, h), Ok(()), "the other chain's copy is its owner's to wait for");
    c.verify("the other chain's copy", true).unwrap();
    assert_eq!(dev.ring_slot_accounting(0).unwrap(), (0, 0));
}
