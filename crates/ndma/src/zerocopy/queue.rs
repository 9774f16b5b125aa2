//! The context queue (`struct ndma_ctx_queue`, FACTS §5.3): a ring of contexts split by four cursors into
//! three live regions.
//!
//! # Regions
//!
//! ```text
//!   head ──── first_pinned_unsubmitted (FPU) ──── first_unpinned (FU) ──── tail
//!   [head, FPU)  submitted: doorbell rung, waiting for the marker           (Submitted, Completed)
//!   [FPU, FU)    pinned, descriptors not built                               (PinnedUnsubmitted, Completed)
//!   [FU, tail)   queued behind a piece that is not pinned yet                (Unpinned, PinnedUnsubmitted, Completed)
//!   [tail, head) free                                                        (Invalid)
//! ```
//!
//! Any live region may also hold tombstones (`Invalid`, left by [`CtxQueue::drain_request`]). The cursors
//! never cross: head ≤ FPU ≤ FU ≤ tail in queue order. Contexts only ever move forward through the regions,
//! and they leave in queue order, which is what keeps completions in submission order.
//!
//! A piece that is already pinned (or already over) but is queued behind an unpinned one joins the unpinned
//! region: the driver instead seeds FPU at the new piece, after FU, breaking the order (FACTS §7.5). The region
//! steps treat such a piece as done for them: pinning skips it, and it is issued once FU has passed it. The
//! submit path pins in queue order, so only a completed dummy gets there: a pinned piece behind an unpinned one
//! would hold pin budget that piece may need while it cannot be issued before it — a queue stopped for good.

use super::context::{ZcContext, ZcState};
use crate::Result;

/// The context queue.
pub(crate) struct CtxQueue {
    entries: Vec<ZcContext>,
    mask: u32,
    head: u32,
    tail: u32,
    /// `first_pinned_unsubmitted`.
    fpu: u32,
    /// `first_unpinned`.
    fu: u32,
    /// Pages held pinned by contexts in the queue (the pin budget's use).
    nr_pinned_pages: u64,
    /// The most pages the queue may hold pinned (`NDMA_CTX_QUEUE_MAX_PINNED_PAGES`).
    pin_budget: u64,
    /// The most pages it ever held pinned at once.
    peak_pinned_pages: u64,
    /// The last request number given out ([`CtxQueue::new_request`]).
    last_request: u64,
}

/// The contexts of a request [`CtxQueue::drain_request`] waited for (or could not wait for), still holding
/// their pins until [`CtxQueue::release_drained`], and the drain's first error.
#[must_use = "the drained contexts hold their pins until they are released"]
pub(crate) struct Drained {
    slots: Vec<u32>,
    /// The first failed wait or fence.
    pub result: Result<()>,
}

/// What [`CtxQueue::drain_request`] asks of its caller.
#[derive(Debug)]
pub(crate) enum DrainStep<'a> {
    /// Wait for the submitted context in this slot.
    Wait(u32, &'a ZcContext),
    /// Make the writes of the request's issued pieces land (a fence batch using this free slot's marker).
    Fence(u32),
}

impl CtxQueue {
    /// An empty queue of `capacity` slots (a power of two; one slot always stays free).
    pub(crate) fn new(capacity: u32, pin_budget: u64) -> CtxQueue {
        assert!(capacity.is_power_of_two(), "context queue capacity {capacity} is not a power of two");
        let entries = (0..capacity).map(|_| ZcContext::default()).collect();
        CtxQueue {
            entries,
            mask: capacity - 1,
            head: 0,
            tail: 0,
            fpu: 0,
            fu: 0,
            nr_pinned_pages: 0,
            pin_budget,
            peak_pinned_pages: 0,
            last_request: 0,
        }
    }

    /// A number for a new request, which its pieces carry in [`ZcContext::request`]: unique on the ring
    /// (a u64 counter), unlike the submitter's sequence numbers.
    pub(crate) fn new_request(&mut self) -> u64 {
        self.last_request += 1;
        self.last_request
    }

    fn next(&self, i: u32) -> u32 {
        (i + 1) & self.mask
    }

    /// Distance of `i` from the head, in queue order.
    fn pos(&self, i: u32) -> u32 {
        i.wrapping_sub(self.head) & self.mask
    }

    /// `(head, FPU, FU, tail)`.
    pub(crate) fn cursors(&self) -> (u32, u32, u32, u32) {
        (self.head, self.fpu, self.fu, self.tail)
    }

    /// Pages pinned by the queue's contexts.
    pub(crate) fn nr_pinned_pages(&self) -> u64 {
        self.nr_pinned_pages
    }

    /// Counts `pages` newly pinned by a context of the queue.
    pub(crate) fn add_pinned_pages(&mut self, pages: u64) {
        self.nr_pinned_pages += pages;
        self.peak_pinned_pages = self.peak_pinned_pages.max(self.nr_pinned_pages);
    }

    /// The pin budget, in pages.
    pub(crate) fn pin_budget(&self) -> u64 {
        self.pin_budget
    }

    /// Sets the pin budget (pieces already pinned keep their pins).
    pub(crate) fn set_pin_budget(&mut self, pages: u64) {
        self.pin_budget = pages;
    }

    /// May `pages` more be pinned within the budget?
    pub(crate) fn can_pin(&self, pages: u64) -> bool {
        self.nr_pinned_pages + pages <= self.pin_budget
    }

    /// The most pages ever held pinned at once.
    pub(crate) fn peak_pinned_pages(&self) -> u64 {
        self.peak_pinned_pages
    }

    /// No live slot.
    pub(crate) fn is_empty(&self) -> bool {
        self.head == self.tail
    }

    /// No free slot (the one before the head stays free).
    pub(crate) fn is_full(&self) -> bool {
        self.head == self.next(self.tail)
    }

    /// Nothing waits for the engine.
    pub(crate) fn submitted_empty(&self) -> bool {
        self.head == self.fpu
    }

    /// Nothing is pinned and waiting for descriptors.
    pub(crate) fn pinned_unsubmitted_empty(&self) -> bool {
        self.fpu == self.fu
    }

    /// Nothing waits to be pinned.
    pub(crate) fn unpinned_empty(&self) -> bool {
        self.fu == self.tail
    }

    /// The context in slot `i`.
    pub(crate) fn entry(&self, i: u32) -> &ZcContext {
        &self.entries[i as usize]
    }

    /// The context in slot `i`, mutably.
    pub(crate) fn entry_mut(&mut self, i: u32) -> &mut ZcContext {
        &mut self.entries[i as usize]
    }

    /// Live slots from the head to the tail, tombstones included.
    pub(crate) fn live_slots(&self) -> impl Iterator<Item = u32> + '_ {
        let n = self.pos(self.tail);
        (0..n).map(move |k| (self.head + k) & self.mask)
    }

    /// `ndma_ctx_queue_advance_to_valid`: from `i`, skip tombstones until a live context or `stop`.
    fn advance_to_valid(&self, mut i: u32, stop: u32) -> u32 {
        while i != stop && self.entries[i as usize].state == ZcState::Invalid {
            i = self.next(i);
        }
        i
    }

    /// `inc_first_pinned_unsubmitted`: the context at FPU moved to the submitted region (no-op when the pinned
    /// region is empty).
    pub(crate) fn inc_fpu(&mut self) {
        if self.fpu != self.fu {
            self.fpu = self.advance_to_valid(self.next(self.fpu), self.fu);
        }
    }

    /// `inc_first_unpinned`: the context at FU moved to the pinned region (no-op when the unpinned region is
    /// empty).
    pub(crate) fn inc_fu(&mut self) {
        if self.fu != self.tail {
            self.fu = self.advance_to_valid(self.next(self.fu), self.tail);
        }
    }

    /// `peek_tail`: the free slot a new context is built in, or `None` when the queue is full.
    pub(crate) fn peek_tail(&mut self) -> Option<(u32, &mut ZcContext)> {
        if self.is_full() {
            return None;
        }
        let t = self.tail;
        Some((t, &mut self.entries[t as usize]))
    }

    /// `inc_tail`: the context just built at the tail joins the queue. A pinned (or completed) one extends the
    /// pinned region when nothing unpinned is queued, else it joins the unpinned region (module doc).
    pub(crate) fn inc_tail(&mut self) {
        let t = self.tail;
        let state = self.entries[t as usize].state;
        debug_assert!(!self.is_full() && state != ZcState::Invalid && state != ZcState::Submitted);
        let joins_pinned = matches!(state, ZcState::PinnedUnsubmitted | ZcState::Completed) && self.unpinned_empty();
        self.tail = self.next(t);
        if joins_pinned {
            self.fu = self.tail;
        }
    }

    /// `peek_pinned_unsubmitted`: the first context of the pinned region.
    pub(crate) fn peek_pinned_unsubmitted(&self) -> Option<u32> {
        (!self.pinned_unsubmitted_empty()).then_some(self.fpu)
    }

    /// `peek_first_unpinned`: the first context of the unpinned region.
    pub(crate) fn peek_first_unpinned(&self) -> Option<u32> {
        (!self.unpinned_empty()).then_some(self.fu)
    }

    /// `pop_head`: takes the head context out of the queue (the caller releases it with
    /// [`CtxQueue::release`] before anything else touches the queue). Cursors the head passed move with it.
    pub(crate) fn pop_head(&mut self) -> Option<u32> {
        if self.is_empty() {
            return None;
        }
        let old = self.head;
        let new = self.advance_to_valid(self.next(old), self.tail);
        // A cursor the head overtook restarts at the new head; the others keep their place.
        let overtaken = |c: u32| c.wrapping_sub(old) & self.mask < new.wrapping_sub(old) & self.mask;
        let (fpu_behind, fu_behind) = (overtaken(self.fpu), overtaken(self.fu));
        self.head = new;
        if fpu_behind {
            self.fpu = new;
        }
        if fu_behind {
            self.fu = new;
        }
        Some(old)
    }

    /// The slot `pop_submitted` would pop, if any.
    pub(crate) fn peek_submitted(&self) -> Option<u32> {
        (!self.submitted_empty()).then_some(self.head)
    }

    /// `pop_submitted`: pops the head only when it is in the submitted region (no unchecked pop).
    pub(crate) fn pop_submitted(&mut self) -> Option<u32> {
        if self.submitted_empty() {
            return None;
        }
        self.pop_head()
    }

    /// `ndma_zc_release_ctx` on slot `i`: unpin, tombstone, and give its pages back to the pin budget.
    pub(crate) fn release(&mut self, i: u32) {
        let pages = self.entries[i as usize].release();
        self.nr_pinned_pages -= pages;
    }

    /// `ndma_ctx_queue_drain_sequence`, keyed by request: the failure path of one request, first half. Every
    /// context of `request` (see [`ZcContext::request`]; the driver matches sequence numbers, so a failed
    /// request with a reused number drains another's pieces) except slot `keep` is to be released. First each
    /// submitted one is waited for with `step(DrainStep::Wait(slot, ctx))` — until a wait fails, after which
    /// the rest are not waited for (the caller must then re-initialise the ring). Then, when every wait
    /// succeeded and the request wrote device memory (`fence`, or a waited piece that did),
    /// `step(DrainStep::Fence(slot))` must make the writes of its pieces land — those waited here and those
    /// retired before: only a request's last piece carries the write barrier, and a failed request never
    /// issues it. The slot is the tail's, which is never in use.
    ///
    /// Nothing is released here: after a failed wait the engine may still hold descriptors pointing at the
    /// pieces' pages, so the caller re-initialises the ring first and then hands the result to
    /// [`CtxQueue::release_drained`], which releases (unpins) them.
    pub(crate) fn drain_request(
        &mut self,
        request: u64,
        keep: Option<u32>,
        fence: bool,
        mut step: impl FnMut(DrainStep<'_>) -> Result<()>,
    ) -> Drained {
        let slots: Vec<u32> = self
            .live_slots()
            .filter(|&i| Some(i) != keep)
            .filter(|&i| {
                let c = &self.entries[i as usize];
                c.state != ZcState::Invalid && c.request == request
            })
            .collect();
        let mut result = Ok(());
        let mut fence = fence;
        for &i in &slots {
            let ctx = &self.entries[i as usize];
            if ctx.state == ZcState::Submitted && result.is_ok() {
                result = step(DrainStep::Wait(i, ctx));
                fence |= ctx.to_device;
            }
        }
        if result.is_ok() && fence {
            result = step(DrainStep::Fence(self.tail));
        }
        Drained { slots, result }
    }

    /// The failure path of one request, second half: releases (tombstones, unpins) the contexts
    /// [`CtxQueue::drain_request`] drained; the cursors then skip the tombstones. Returns the drain's first
    /// error.
    pub(crate) fn release_drained(&mut self, drained: Drained) -> Result<()> {
        for i in drained.slots {
            self.release(i);
        }
        self.fu = self.advance_to_valid(self.fu, self.tail);
        self.fpu = self.advance_to_valid(self.fpu, self.fu);
        self.head = self.advance_to_valid(self.head, self.tail);
        drained.result
    }

    /// Drops the pin of slot `i` in place (the context stays queued), giving its pages back to the budget.
    pub(crate) fn unpin_in_place(&mut self, i: u32) {
        let c = &mut self.entries[i as usize];
        if c.pinned.take().is_some() {
            self.nr_pinned_pages -= u64::from(c.nr_pages);
        }
    }

    /// `ndma_ctx_queue_drain`: pops and releases everything, waiting for submitted contexts until a wait
    /// fails. Returns the first wait error.
    pub(crate) fn drain(&mut self, mut wait: impl FnMut(u32, &ZcContext) -> Result<()>) -> Result<()> {
        let mut result = Ok(());
        while let Some(i) = self.pop_head() {
            if self.entries[i as usize].state == ZcState::Submitted && result.is_ok() {
                result = wait(i, &self.entries[i as usize]);
            }
            self.release(i);
        }
        result
    }

    /// After the ring was re-initialised under them: every submitted context goes back to the pinned region
    /// (still pinned, descriptors to be built again), so it is re-issued rather than lost.
    pub(crate) fn requeue_submitted(&mut self) {
        let slots: Vec<u32> = self.live_slots().take_while(|&i| i != self.fpu).collect();
        for i in slots {
            let ctx = &mut self.entries[i as usize];
            if ctx.state == ZcState::Submitted {
                ctx.state = ZcState::PinnedUnsubmitted;
                ctx.nr_desc = 0;
            }
        }
        self.fpu = self.head;
    }

    /// Descriptor slots the submitted contexts hold on the ring (data descriptors + marker each).
    pub(crate) fn slots_in_flight(&self) -> u32 {
        self.live_slots()
            .take_while(|&i| i != self.fpu)
            .map(|i| &self.entries[i as usize])
            .filter(|c| c.state == ZcState::Submitted)
            .map(|c| c.nr_desc + 1)
            .sum()
    }

    /// Checks the invariants of the module doc (for tests and debug assertions): the cursor order, and every
    /// state in a region that allows it.
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        let (h, f, u, t) = (self.pos(self.head), self.pos(self.fpu), self.pos(self.fu), self.pos(self.tail));
        if !(h <= f && f <= u && u <= t) {
            return Err(format!(
                "cursor order broken: head {} fpu {} fu {} tail {}",
                self.head, self.fpu, self.fu, self.tail
            ));
        }
        for k in 0..=self.mask {
            let i = (self.head + k) & self.mask;
            let s = self.entries[i as usize].state;
            let ok = match k {
                k if k < f => matches!(s, ZcState::Submitted | ZcState::Completed | ZcState::Invalid),
                k if k < u => matches!(s, ZcState::PinnedUnsubmitted | ZcState::Completed | ZcState::Invalid),
                k if k < t => s != ZcState::Submitted,
                _ => s == ZcState::Invalid,
            };
            if !ok {
                return Err(format!("slot {i} ({k} from the head) is {s:?}, outside its region: {:?}", self.cursors()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;

    fn push(q: &mut CtxQueue, state: ZcState, id: u64, request: u64) -> bool {
        match q.peek_tail() {
            Some((_, c)) => {
                *c = ZcContext { state, host_addr: id, request, ..ZcContext::default() };
                q.inc_tail();
                true
            }
            None => false,
        }
    }

    #[test]
    fn a_pinned_piece_behind_unpinned_ones_keeps_the_cursor_order() {
        // The driver's inc_tail seeds FPU at the new piece, after FU (FACTS §7.5).
        let mut q = CtxQueue::new(8, 1 << 20);
        push(&mut q, ZcState::Unpinned, 1, 7);
        push(&mut q, ZcState::PinnedUnsubmitted, 2, 8);
        assert_eq!(q.cursors(), (0, 0, 0, 2));
        q.check_invariants().unwrap();
        assert_eq!(q.peek_pinned_unsubmitted(), None, "the pinned piece waits behind the unpinned one");
        q.entry_mut(0).state = ZcState::PinnedUnsubmitted;
        q.inc_fu();
        assert_eq!(q.peek_first_unpinned(), Some(1));
        q.inc_fu();
        assert_eq!(q.cursors(), (0, 0, 2, 2));
        q.check_invariants().unwrap();
    }

    #[test]
    fn pops_are_checked_and_cursors_follow_the_head() {
        let mut q = CtxQueue::new(4, 1 << 20);
        assert_eq!(q.pop_submitted(), None);
        assert_eq!(q.pop_head(), None);
        assert!(push(&mut q, ZcState::PinnedUnsubmitted, 1, 1));
        assert!(push(&mut q, ZcState::PinnedUnsubmitted, 2, 1));
        assert!(push(&mut q, ZcState::Unpinned, 3, 1));
        assert!(!push(&mut q, ZcState::Unpinned, 4, 1), "capacity 4 holds 3");
        assert_eq!(q.pop_submitted(), None, "nothing submitted");
        assert_eq!(q.pop_head(), Some(0));
        q.release(0);
        assert_eq!(q.cursors(), (1, 1, 2, 3));
        q.check_invariants().unwrap();
    }

    /// The checker the property test relies on rejects each breakage: a cursor out of order, and a state
    /// outside each of the four regions.
    #[test]
    fn the_invariant_check_rejects_what_it_names() {
        // Head 0, FPU 1, FU 2, tail 3: one submitted, one pinned, one unpinned piece.
        let fresh = || {
            let mut q = CtxQueue::new(8, 1 << 20);
            push(&mut q, ZcState::PinnedUnsubmitted, 1, 1);
            push(&mut q, ZcState::PinnedUnsubmitted, 2, 1);
            push(&mut q, ZcState::Unpinned, 3, 1);
            q.entry_mut(0).state = ZcState::Submitted;
            q.inc_fpu();
            assert_eq!(q.cursors(), (0, 1, 2, 3));
            q
        };
        fresh().check_invariants().unwrap();
        let broken = |q: &CtxQueue| q.check_invariants().unwrap_err();

        let mut order = fresh();
        (order.fpu, order.fu) = (2, 1);
        assert!(broken(&order).starts_with("cursor order broken"), "{}", broken(&order));
        let mut past = fresh();
        past.fu = 4;
        assert!(broken(&past).starts_with("cursor order broken"));

        for (slot, state) in [
            (0, ZcState::PinnedUnsubmitted), // the submitted region
            (0, ZcState::Unpinned),
            (1, ZcState::Submitted), // the pinned region
            (1, ZcState::Unpinned),
            (2, ZcState::Submitted), // the unpinned region
            (3, ZcState::Completed), // past the tail
        ] {
            let mut bad = fresh();
            bad.entries[slot].state = state;
            let why = broken(&bad);
            assert!(why.starts_with(&format!("slot {slot} ")), "slot {slot} as {state:?}: {why}");
        }
        // What each region allows passes.
        for (slot, state) in [
            (0, ZcState::Completed),
            (0, ZcState::Invalid),
            (1, ZcState::Completed),
            (2, ZcState::PinnedUnsubmitted),
            (2, ZcState::Completed),
        ] {
            let mut ok = fresh();
            ok.entries[slot].state = state;
            ok.check_invariants().unwrap();
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u8, u64),
        Issue,
        Pin,
        PopSubmitted,
        PopHead,
        DrainRequest(u64),
        Requeue,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..3, 0u64..4).prop_map(|(s, q)| Op::Push(s, q)),
            3 => Just(Op::Issue),
            3 => Just(Op::Pin),
            2 => Just(Op::PopSubmitted),
            1 => Just(Op::PopHead),
            1 => (0u64..4).prop_map(Op::DrainRequest),
            1 => Just(Op::Requeue),
        ]
    }

    /// The plain reference: contexts in queue order, the first `sub` submitted, the next `pin` pinned.
    #[derive(Default)]
    struct Model {
        items: VecDeque<(u64, ZcState, u64)>,
        sub: usize,
        pin: usize,
    }

    proptest! {
        #[test]
        fn the_queue_behaves_like_a_fifo_with_three_regions(ops in proptest::collection::vec(op(), 1..300)) {
            let mut q = CtxQueue::new(8, 1 << 20);
            let mut m = Model::default();
            let mut id = 0u64;
            for op in ops {
                match op {
                    Op::Push(s, request) => {
                        let state = [ZcState::Unpinned, ZcState::PinnedUnsubmitted, ZcState::Completed][s as usize];
                        id += 1;
                        let unpinned_empty = m.items.len() == m.sub + m.pin;
                        if push(&mut q, state, id, request) {
                            m.items.push_back((id, state, request));
                            if state != ZcState::Unpinned && unpinned_empty {
                                m.pin += 1;
                            }
                        } else {
                            // Full: every slot but one is between head and tail (tombstones included).
                            prop_assert_eq!(q.live_slots().count(), 7);
                            prop_assert!(m.items.len() <= 7);
                        }
                    }
                    Op::Issue => {
                        if let Some(i) = q.peek_pinned_unsubmitted() {
                            prop_assert!(m.pin > 0);
                            let e = q.entry_mut(i);
                            prop_assert_eq!(e.host_addr, m.items[m.sub].0);
                            if e.state == ZcState::PinnedUnsubmitted {
                                e.state = ZcState::Submitted;
                                m.items[m.sub].1 = ZcState::Submitted;
                            }
                            q.inc_fpu();
                            m.sub += 1;
                            m.pin -= 1;
                        } else {
                            prop_assert_eq!(m.pin, 0);
                        }
                    }
                    Op::Pin => {
                        if let Some(i) = q.peek_first_unpinned() {
                            let k = m.sub + m.pin;
                            let e = q.entry_mut(i);
                            prop_assert_eq!(e.host_addr, m.items[k].0);
                            if e.state == ZcState::Unpinned {
                                e.state = ZcState::PinnedUnsubmitted;
                                m.items[k].1 = ZcState::PinnedUnsubmitted;
                            }
                            q.inc_fu();
                            m.pin += 1;
                        } else {
                            prop_assert_eq!(m.items.len(), m.sub + m.pin);
                        }
                    }
                    Op::PopSubmitted | Op::PopHead => {
                        let submitted_only = matches!(op, Op::PopSubmitted);
                        let popped = if submitted_only { q.pop_submitted() } else { q.pop_head() };
                        let expected = if submitted_only && m.sub == 0 { None } else { m.items.pop_front() };
                        prop_assert_eq!(popped.map(|i| q.entry(i).host_addr), expected.map(|e| e.0));
                        if let Some(i) = popped {
                            q.release(i);
                            if m.sub > 0 { m.sub -= 1 } else if m.pin > 0 { m.pin -= 1 }
                        }
                    }
                    Op::DrainRequest(request) => {
                        let mut waited = Vec::new();
                        let drained = q.drain_request(request, None, false, |step| {
                            if let DrainStep::Wait(_, c) = step {
                                waited.push(c.host_addr);
                            }
                            Ok(())
                        });
                        q.release_drained(drained).unwrap();
                        let expect_waited: Vec<u64> =
                            m.items.iter().filter(|e| e.2 == request && e.1 == ZcState::Submitted).map(|e| e.0).collect();
                        prop_assert_eq!(waited, expect_waited);
                        let (sub, pin) = (m.sub, m.pin);
                        let mut k = 0;
                        m.items.retain(|e| {
                            let keep = e.2 != request;
                            if !keep {
                                if k < sub { m.sub -= 1 } else if k < sub + pin { m.pin -= 1 }
                            }
                            k += 1;
                            keep
                        });
                    }
                    Op::Requeue => {
                        q.requeue_submitted();
                        for e in m.items.iter_mut().take(m.sub) {
                            if e.1 == ZcState::Submitted { e.1 = ZcState::PinnedUnsubmitted; }
                        }
                        m.pin += m.sub;
                        m.sub = 0;
                    }
                }
                if let Err(why) = q.check_invariants() {
                    return Err(TestCaseError::fail(why));
                }
                let live: Vec<(u64, ZcState)> = q.live_slots()
                    .map(|i| q.entry(i))
                    .filter(|c| c.state != ZcState::Invalid)
                    .map(|c| (c.host_addr, c.state))
                    .collect();
                let model: Vec<(u64, ZcState)> = m.items.iter().map(|e| (e.0, e.1)).collect();
                prop_assert_eq!(live, model);
                let count = |from: u32, to: u32| {
                    let (a, b) = (from.wrapping_sub(q.head) & q.mask, to.wrapping_sub(q.head) & q.mask);
                    (a..b).filter(|&k| q.entry((q.head + k) & q.mask).state != ZcState::Invalid).count()
                };
                let (h, f, u, _) = q.cursors();
                prop_assert_eq!((count(h, f), count(f, u)), (m.sub, m.pin));
            }
        }
    }
}
