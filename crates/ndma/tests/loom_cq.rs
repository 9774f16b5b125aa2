//! Loom model of the zero-copy completion queue (FACTS §5.7): the real `CqProducer::put`/`flush` and
//! `consume` run over loom's atomics through the queue's memory traits, with one producer and two consumers
//! on a queue small enough that the producer's backlog fills and drains while consumers take entries.
//!
//! Properties, in every interleaving loom explores: no entry is lost, none is taken twice, each consumer
//! takes entries in the order they were posted, every entry is read whole (never a half-written or
//! half-cleared one), and a taken slot is left cleared; and an observer counting what is pending never sees
//! more than the queue holds. And a consumer that dies holding the lock, at any step of taking an entry,
//! leaves nothing lost or taken twice: the survivor takes the lock over (the process table is an atomic
//! standing in for the kernel's).
//!
//! Only built with `--cfg loom` (`.ci/run` runs it):
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test -p ndma --test loom_cq --release`
#![cfg(loom)]

use std::sync::atomic::Ordering;

use loom::sync::atomic::{AtomicU32, AtomicU64};
use loom::sync::Arc;
use loom::thread;
use ndma::zerocopy::cq::{consume, pending, Atomic32, Atomic64, CqEntry, CqMemory, CqProducer};

/// A header word on a loom atomic.
struct W32(AtomicU32);

impl Atomic32 for W32 {
    fn load(&self, order: Ordering) -> u32 {
        self.0.load(order)
    }
    fn store(&self, value: u32, order: Ordering) {
        self.0.store(value, order)
    }
    fn compare_exchange_weak(&self, current: u32, new: u32, success: Ordering, failure: Ordering) -> Result<u32, u32> {
        self.0.compare_exchange_weak(current, new, success, failure)
    }
}

/// An entry field on a loom atomic.
struct W64(AtomicU64);

impl Atomic64 for W64 {
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.0.store(value, order)
    }
}

/// The queue's words: the 4-word header and `capacity` entries of 3 fields; and, standing in for the
/// kernel's process table, which consumer exited.
struct Words {
    header: [W32; 4],
    entries: Vec<[W64; 3]>,
    /// The owner id of a consumer that exited (0: none).
    exited: AtomicU32,
}

/// The shared memory as consumer process `owner` sees it.
#[derive(Clone)]
struct Mem(Arc<Words>, u32);

impl Mem {
    fn new(capacity: u32) -> Mem {
        assert!(capacity.is_power_of_two());
        let w32 = || W32(AtomicU32::new(0));
        let w64 = || W64(AtomicU64::new(0));
        Mem(
            Arc::new(Words {
                header: [w32(), w32(), w32(), w32()],
                entries: (0..capacity).map(|_| [w64(), w64(), w64()]).collect(),
                exited: AtomicU32::new(0),
            }),
            1,
        )
    }

    /// The same memory as process `owner` sees it.
    fn as_owner(&self, owner: u32) -> Mem {
        Mem(Arc::clone(&self.0), owner)
    }

    /// Every field of every entry, read after all threads joined.
    fn all_entry_words(&self) -> Vec<u64> {
        self.0.entries.iter().flat_map(|e| e.iter().map(|w| w.0.load(Ordering::Relaxed))).collect()
    }
}

impl CqMemory for Mem {
    type W32 = W32;
    type W64 = W64;

    fn word(&self, off: usize) -> &W32 {
        &self.0.header[off / 4]
    }
    fn entry_word(&self, slot: u32, field: usize) -> &W64 {
        &self.0.entries[(slot & (self.capacity() - 1)) as usize][field]
    }
    fn capacity(&self) -> u32 {
        self.0.entries.len() as u32
    }
    fn spin(&self) {
        // A consumer waiting for the lock must let loom schedule the holder.
        thread::yield_now();
    }
    fn owner(&self) -> u32 {
        self.1
    }
    fn owner_gone(&self, owner: u32) -> bool {
        // Acquire: pairs with the exiting consumer's Release, as the kernel's exit path orders a process's
        // stores before its pid is reported gone.
        self.0.exited.load(Ordering::Acquire) == owner
    }
    fn spins_per_owner_check(&self) -> u32 {
        1
    }
}

/// Completion `i` (1-based): every field differs from an empty slot and from every other completion, so a
/// torn or stale read shows.
fn entry(i: u64) -> CqEntry {
    CqEntry { sequence_num: i, compl_ret: -(i as i64), context: 0x100 + i }
}

/// Header word offsets (the layout of FACTS §5.7).
const HEAD: usize = 4;
const TAIL: usize = 8;
const LOCK: usize = 12;

/// One producer (the model's main thread) posts `entries` completions into a queue of `capacity` while two
/// consumers each try `tries` times to take one; then the main thread drains what is left. Checks every
/// property of the module doc.
fn model(capacity: u32, entries: u64, tries: usize) {
    // Exhaustive (no preemption bound): a few seconds in release.
    loom::model(move || {
        let mem = Mem::new(capacity);
        let mut producer = CqProducer::new(mem.clone());
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let m = mem.clone();
                thread::spawn(move || (0..tries).filter_map(|_| consume(&m)).collect::<Vec<_>>())
            })
            .collect();
        for i in 1..=entries {
            producer.put(entry(i));
        }
        // Posts what waited in the backlog, as far as the consumers have made room by now.
        producer.flush();
        let mut taken: Vec<Vec<CqEntry>> = consumers.into_iter().map(|c| c.join().unwrap()).collect();

        // Alone now: post the rest and take it.
        let mut rest = Vec::new();
        loop {
            let flushed = producer.flush();
            match consume(&mem) {
                Some(e) => rest.push(e),
                None if flushed => break,
                None => panic!("backlog of {} but nothing to take", producer.backlog_len()),
            }
        }
        taken.push(rest);

        for (who, got) in taken.iter().enumerate() {
            for e in got {
                assert!((1..=entries).contains(&e.sequence_num), "taker {who} read an empty or unknown slot: {e:?}");
                assert_eq!(*e, entry(e.sequence_num), "taker {who} read a torn entry");
            }
            assert!(got.windows(2).all(|w| w[0].sequence_num < w[1].sequence_num), "taker {who} out of order: {got:?}");
        }
        let mut all: Vec<u64> = taken.iter().flatten().map(|e| e.sequence_num).collect();
        all.sort_unstable();
        assert_eq!(all, (1..=entries).collect::<Vec<_>>(), "every completion taken exactly once");
        assert!(mem.all_entry_words().iter().all(|&w| w == 0), "every taken slot is cleared");
        let header = |off| mem.word(off).load(Ordering::Relaxed);
        assert_eq!((header(HEAD), header(TAIL), header(LOCK)), (entries as u32, entries as u32, 0));
    });
}

#[test]
fn two_consumers_and_a_backlogged_producer_lose_nothing() {
    // Capacity 2, three completions: the third waits in the backlog until a consumer frees a slot.
    model(2, 3, 1);
}

#[test]
fn a_slot_is_reused_only_after_its_consumer_released_it() {
    // Capacity 1: every completion after the first reuses the slot a consumer has just cleared, so the
    // producer's overwrite races the clear unless the head's release/acquire orders them.
    model(1, 3, 2);
}

#[test]
fn the_pending_count_never_exceeds_the_capacity() {
    // While the producer posts and a consumer takes, an observer counts: tail read before head would let the
    // consumer take entries posted after the tail read, and the count would wrap to about 2^32.
    loom::model(|| {
        let mem = Mem::new(2);
        let mut producer = CqProducer::new(mem.clone());
        let m = mem.clone();
        let consumer = thread::spawn(move || (0..2).filter_map(|_| consume(&m)).count());
        let m = mem.clone();
        let observer = thread::spawn(move || pending(&m));
        producer.put(entry(1));
        producer.put(entry(2));
        let seen = observer.join().unwrap();
        let taken = consumer.join().unwrap();
        assert!(seen <= 2, "pending() saw {seen} in a queue of 2");
        assert_eq!(pending(&mem), 2 - taken as u32);
    });
}

/// A consumer (process 9) dies holding the lock after `steps` steps of taking the head entry, by the protocol
/// of the module doc (0: locked only; 1: cleared the sequence number; 2: cleared the entry; 3: moved the
/// head), while another consumer (process 1) waits for the lock and the producer posts a third completion.
/// In every interleaving the survivor takes over, and between them the two take each completion exactly
/// once, whole: the dying one's only if it got as far as clearing its sequence number.
fn dies_holding_the_lock(steps: u32) {
    loom::model(move || {
        let mem = Mem::new(4);
        let mut producer = CqProducer::new(mem.clone());
        producer.put(entry(1));
        producer.put(entry(2));
        let dying = mem.as_owner(9);
        let dier = thread::spawn(move || {
            let lock = dying.word(LOCK);
            while lock.compare_exchange_weak(0, 9, Ordering::Acquire, Ordering::Relaxed).is_err() {
                thread::yield_now();
            }
            let tail = dying.word(TAIL).load(Ordering::Acquire);
            let head = dying.word(HEAD).load(Ordering::Relaxed);
            if head == tail {
                // Nothing to take (the survivor was first): it dies holding the lock of an empty queue.
                dying.0.exited.store(9, Ordering::Release);
                return None;
            }
            let e = CqEntry {
                sequence_num: dying.entry_word(head, 0).load(Ordering::Relaxed),
                compl_ret: dying.entry_word(head, 1).load(Ordering::Relaxed) as i64,
                context: dying.entry_word(head, 2).load(Ordering::Relaxed),
            };
            let cleared = match steps {
                0 => 0,
                1 => 1, // the sequence number only
                _ => 3,
            };
            for field in 0..cleared {
                dying.entry_word(head, field).store(0, Ordering::Relaxed);
            }
            if steps >= 3 {
                dying.word(HEAD).store(head + 1, Ordering::Release);
            }
            // The process exits, lock held.
            dying.0.exited.store(9, Ordering::Release);
            (steps >= 1).then_some(e)
        });
        let survivor = mem.as_owner(1);
        let taker = thread::spawn(move || (0..2).filter_map(|_| consume(&survivor)).collect::<Vec<_>>());
        producer.put(entry(3));
        let died_with = dier.join().unwrap();
        let mut got = taker.join().unwrap();
        let alone = mem.as_owner(1);
        while let Some(e) = consume(&alone) {
            got.push(e);
        }
        for e in &got {
            assert_eq!(*e, entry(e.sequence_num), "a torn, empty or half-cleared entry: {e:?}");
        }
        let mut all: Vec<u64> = got.iter().map(|e| e.sequence_num).chain(died_with.map(|e| e.sequence_num)).collect();
        all.sort_unstable();
        assert_eq!(all, [1, 2, 3], "each completion once (died after step {steps}, survivor got {got:?})");
        // The dead holder's lock is taken over only by a consumer that needs it: one that found the queue
        // empty never asked. A completion posted now is taken, whatever happened before.
        let header = |off| mem.word(off).load(Ordering::Relaxed);
        assert!(matches!(header(LOCK), 0 | 9), "lock word {}", header(LOCK));
        producer.put(entry(4));
        assert_eq!(consume(&alone), Some(entry(4)));
        assert_eq!((header(HEAD), header(TAIL), header(LOCK)), (4, 4, 0));
        assert!(mem.all_entry_words().iter().all(|&w| w == 0), "every slot cleared");
    });
}

#[test]
fn a_consumer_that_dies_holding_the_lock_before_touching_an_entry_loses_nothing() {
    dies_holding_the_lock(0);
}

#[test]
fn a_consumer_that_dies_while_clearing_an_entry_takes_only_that_entry() {
    dies_holding_the_lock(1);
    dies_holding_the_lock(2);
}

#[test]
fn a_consumer_that_dies_after_moving_the_head_takes_only_its_entry() {
    dies_holding_the_lock(3);
}
