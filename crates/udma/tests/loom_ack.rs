//! Loom model of the completion-counter CAS (`udma_cdesc_ack`, FACTS §2.2): concurrent ackers never lose an
//! update, and a concurrent reader only ever sees a value some interleaving of whole acks produces.
//!
//! Only built with `--cfg loom`:
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test -p udma --test loom_ack --release`
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use udma::CompletionCounter;

#[test]
fn two_ackers_never_lose_an_update() {
    loom::model(|| {
        // Ring of 8: 5 + 6 = 11 wraps to 3.
        let c = Arc::new(CompletionCounter::new(7));
        let a = {
            let c = c.clone();
            thread::spawn(move || c.ack(5))
        };
        c.ack(6);
        a.join().unwrap();
        assert_eq!(c.get(), 3);
    });
}

#[test]
fn three_ackers_never_lose_an_update() {
    loom::model(|| {
        // Ring of 4: 1 + 2 + 3 = 6 wraps to 2.
        let c = Arc::new(CompletionCounter::new(3));
        let handles: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|n| {
                let c = c.clone();
                thread::spawn(move || c.ack(n))
            })
            .collect();
        c.ack(3);
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(c.get(), 2);
    });
}

#[test]
fn a_reader_sees_only_sums_of_whole_acks() {
    loom::model(|| {
        // Ring of 32: acks of 4 and 16; a reader may see 0, 4, 16 or 20 and nothing else.
        let c = Arc::new(CompletionCounter::new(31));
        let a = {
            let c = c.clone();
            thread::spawn(move || c.ack(4))
        };
        let b = {
            let c = c.clone();
            thread::spawn(move || c.ack(16))
        };
        let seen = c.get();
        assert!([0, 4, 16, 20].contains(&seen), "reader saw {seen}");
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(c.get(), 20);
    });
}
