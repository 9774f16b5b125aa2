//! Fuzz target `bar0_gate`: the BAR0 write gate ([`bar0_write_blocked`], [`bar0_blocked_one_engine`]).
//!
//! For any arch, offset and length: no panic; the hardened gate refuses a write iff one of its bytes
//! overlaps a blocked register (`drbp_low`, `drbp_high`, `crbp_low`, `crbp_high`, `drtp_inc`) of any queue of
//! any engine, or its end overflows; the driver's exact rule matches exactly the blocked offsets of the
//! engine at the base it is given; and every 32-bit register a passed write touches decodes
//! ([`Arch::engine_at`], [`Register::decode`]) to no blocked register. The model is written from the FACTS
//! tables (§4 engine bases, §6 the blocked set), not from `udma`'s constants.

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use ndma::validate::{bar0_blocked_one_engine, bar0_write_blocked};
use udma::regs::{QueueReg, Register};
use udma::Arch;

/// One write: an arch, where it lands, how long it is.
#[derive(Debug, Clone, Arbitrary)]
pub struct Bar0Input {
    /// V3 rather than V2.
    pub v3: bool,
    /// Where the write starts.
    pub at: At,
    /// Its length.
    pub len: Len,
    /// A base for the driver's exact rule, besides the arch's engine bases.
    pub base: u64,
}

/// A BAR0 offset, mostly near the registers that matter.
#[derive(Debug, Clone, Arbitrary)]
pub enum At {
    /// Any offset.
    Raw(u64),
    /// `rel` bytes into engine `engine`'s block (modulo the engine count), plus `delta`.
    Engine {
        /// Engine index (modulo the arch's engine count).
        engine: u8,
        /// Offset in the block (taken modulo 0x40000).
        rel: u32,
        /// Nudge, possibly below the block.
        delta: i8,
    },
    /// Register word `word` of queue `qid` in one direction of engine `engine`, plus `delta`.
    Queue {
        /// Engine index (modulo the arch's engine count).
        engine: u8,
        /// S2M rather than M2S.
        rx: bool,
        /// Queue (modulo 17: one past the last).
        qid: u8,
        /// Register word (modulo 64).
        word: u8,
        /// Nudge.
        delta: i8,
    },
}

/// A write length.
#[derive(Debug, Clone, Arbitrary)]
pub enum Len {
    /// Up to 255 bytes.
    Small(u8),
    /// Any length.
    Any(u64),
}

/// FACTS §4: every engine's BAR0 base.
fn model_engine_bases(arch: Arch) -> Vec<u64> {
    match arch {
        Arch::V2 => {
            let seng0 = (0..16).map(|n| 0x3000_0000 + n * 0x4_0000);
            let seng1 = (0..16).map(|n| 0x3070_0000 + n * 0x4_0000);
            seng0.chain(seng1).chain([0x3060_0000, 0x30D0_0000]).collect()
        }
        Arch::V3 => {
            let se = [0x8200_0000u64, 0x9400_0000, 0xA200_0000, 0xB400_0000];
            let seng = (0..128u64).map(|e| se[(e / 32) as usize] + (e % 32) * 0x10_0000);
            seng.chain([0x0680_0000, 0x0690_0000, 0x4680_0000, 0x4690_0000]).collect()
        }
    }
}

/// FACTS §6 (`udma_blocked[]`): the blocked words of a queue block.
const MODEL_BLOCKED: [u64; 5] = [0x28, 0x2c, 0x44, 0x48, 0x38];

/// Engine-relative offsets of every blocked register: M2S queue q at 0x1000 + q·0x1000, S2M at 0x21000 + ….
fn model_blocked_rel() -> impl Iterator<Item = u64> {
    [0x1000u64, 0x2_1000]
        .into_iter()
        .flat_map(|dir| (0..16u64).flat_map(move |q| MODEL_BLOCKED.iter().map(move |r| dir + q * 0x1000 + r)))
}

/// Every blocked register's BAR0 offset for `arch`, sorted.
fn model_blocked(arch: Arch) -> &'static [u64] {
    static V2: OnceLock<Vec<u64>> = OnceLock::new();
    static V3: OnceLock<Vec<u64>> = OnceLock::new();
    let cell = if arch == Arch::V2 { &V2 } else { &V3 };
    cell.get_or_init(|| {
        let mut all: Vec<u64> =
            model_engine_bases(arch).into_iter().flat_map(|b| model_blocked_rel().map(move |r| b + r)).collect();
        all.sort_unstable();
        all
    })
}

/// The model of the hardened gate: does `[off, off + max(len, 1))` share a byte with a blocked register, or
/// does its end overflow?
pub fn model_write_blocked(arch: Arch, off: u64, len: u64) -> bool {
    let Some(end) = off.checked_add(len.max(1)) else { return true };
    let all = model_blocked(arch);
    // The first register that ends after `off`: the write overlaps a register iff that one starts before `end`.
    let i = all.partition_point(|&r| r + 4 <= off);
    i < all.len() && all[i] < end
}

/// The model of the driver's exact rule.
fn model_exact(base: u64, off: u64) -> bool {
    off.checked_sub(base).is_some_and(|rel| model_blocked_rel().any(|r| r == rel))
}

fn offset(arch: Arch, at: &At) -> u64 {
    let bases = model_engine_bases(arch);
    match *at {
        At::Raw(off) => off,
        At::Engine { engine, rel, delta } => {
            let base = bases[usize::from(engine) % bases.len()];
            (base + u64::from(rel % 0x4_0000)).wrapping_add_signed(i64::from(delta))
        }
        At::Queue { engine, rx, qid, word, delta } => {
            let base = bases[usize::from(engine) % bases.len()];
            let dir = if rx { 0x2_1000 } else { 0x1000 };
            let q = u64::from(qid % 17);
            (base + dir + q * 0x1000 + u64::from(word % 64) * 4).wrapping_add_signed(i64::from(delta))
        }
    }
}

/// Checks one input and returns whether the gate blocked the write; panics on a broken invariant.
pub fn check(input: &Bar0Input) -> bool {
    let arch = if input.v3 { Arch::V3 } else { Arch::V2 };
    let off = offset(arch, &input.at);
    let len = match input.len {
        Len::Small(n) => u64::from(n),
        Len::Any(n) => n,
    };
    let blocked = bar0_write_blocked(arch, off, len);
    assert_eq!(blocked, model_write_blocked(arch, off, len), "{arch}: write of {len} bytes at {off:#x}");

    // The driver's exact rule, at every engine base and at an arbitrary one.
    let bases = model_engine_bases(arch);
    let mut exact_somewhere = false;
    for &base in bases.iter().chain([&input.base]) {
        let exact = bar0_blocked_one_engine(base, off);
        assert_eq!(exact, model_exact(base, off), "exact rule, base {base:#x}, offset {off:#x}");
        exact_somewhere |= exact && base != input.base;
    }
    assert!(!exact_somewhere || blocked, "{arch}: {off:#x} is a blocked register the hardened gate passes");
    if off % 4 == 0 && len == 4 {
        assert_eq!(blocked, exact_somewhere, "{arch}: an aligned word write is blocked iff its offset is");
    }

    // A write the gate passes touches no blocked register, as the register decoder names them.
    if !blocked && len <= 4096 {
        let end = off + len.max(1);
        let mut word = off & !3;
        while word < end {
            if let Some((eng, rel)) = arch.engine_at(word) {
                if let Some(Register::Queue { dir, qid, reg }) = Register::decode(rel) {
                    let blocked_reg = matches!(
                        reg,
                        QueueReg::DrbpLow
                            | QueueReg::DrbpHigh
                            | QueueReg::CrbpLow
                            | QueueReg::CrbpHigh
                            | QueueReg::DrtpInc
                    );
                    assert!(!blocked_reg, "{arch}: the gate passed {len} bytes at {off:#x}, onto engine {eng} {dir:?} queue {qid} {reg:?}");
                }
            }
            // The last word of the address space has no successor (the first run of this target wrapped here).
            match word.checked_add(4) {
                Some(next) => word = next,
                None => break,
            }
        }
    }
    blocked
}
