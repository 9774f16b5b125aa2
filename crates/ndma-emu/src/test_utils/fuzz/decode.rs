//! Fuzz target `decode`: the 16-byte descriptor (`udma::desc`) and the register map (`udma::regs`) as a
//! device model decodes them.
//!
//! Decoding never panics and agrees, bit for bit, with the layouts of FACTS §1.2–§1.3 and §2.3 (written out
//! here as literal numbers, not taken from the code under test). Where an encoder exists, the round trips
//! hold: `decode(encode(x)) == x` for every builder argument the builders accept, and `encode(decode(d)) == d`
//! for every descriptor of the shape the builders make (the kernel's M2M halves; other bits, which no
//! builder sets, are only decoded). [`Register::decode`] is the inverse of [`Register::offset`].

use arbitrary::Arbitrary;
use udma::desc::META_CTRL_DEFAULT;
use udma::regs::{
    ptr_value, ChangeState, DoorbellCount, EngineReg, QueueCfg, QueueReg, QueueSwCtrl, RateLimitMask, Register,
    RingLength, RingPtr,
};
use udma::{Arch, Barrier, Desc, Direction, UdmaError, UdmaState};
use zerocopy::{FromBytes, IntoBytes};

/// One input: raw descriptor bytes, builder arguments, a register offset and a register value.
#[derive(Debug, Clone, Arbitrary)]
pub struct DecodeInput {
    /// A descriptor as it sits in a ring.
    pub raw: [u8; 16],
    /// Arguments for the TX and RX builders.
    pub build: Build,
    /// An offset inside (or beyond) an engine's register block, and a BAR0 offset.
    pub offset: u64,
    /// A register value.
    pub value: u32,
    /// A register named by its parts (any qid, any register index).
    pub named: (bool, u32, u8),
}

/// Builder arguments, unconstrained.
#[derive(Debug, Clone, Arbitrary)]
pub struct Build {
    /// TX source / RX destination.
    pub addr: u64,
    /// Byte count (valid: 1..=65536).
    pub len: u32,
    /// Ring id, any byte (the builders mask it to 2 bits).
    pub ring_id: u8,
    /// A raw barrier value (valid: 0..=3).
    pub barrier: u32,
    /// RX interrupt flag.
    pub set_int: bool,
}

/// FACTS §1.2: `len_ctrl` bits.
mod bit {
    pub const LEN: u32 = 0xffff;
    pub const META: u32 = 1 << 23;
    pub const RING_ID_SHIFT: u32 = 24;
    pub const FIRST: u32 = 1 << 26;
    pub const LAST: u32 = 1 << 27;
    pub const INT_EN: u32 = 1 << 28;
    pub const SOW: u32 = 1 << 29;
    pub const DMB: u32 = 1 << 30;
    pub const CONCAT: u32 = 1 << 31;
    pub const RING_ID: u32 = 3 << RING_ID_SHIFT;
    /// FACTS §1.3: `meta_ctrl` bit 26, the write barrier.
    pub const WRITE_BARRIER: u32 = 1 << 26;
}

/// Checks one input; panics on a broken invariant.
pub fn check(input: &DecodeInput) {
    check_desc(&input.raw);
    check_build(&input.build);
    check_register(input.offset, input.named);
    check_value(input.value);
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn check_desc(raw: &[u8; 16]) {
    let d = Desc::read_from_bytes(raw).expect("any 16 bytes are a descriptor");
    let (w0, w1) = (le32(&raw[0..4]), le32(&raw[4..8]));
    let w2 = u64::from(le32(&raw[8..12])) | u64::from(le32(&raw[12..16])) << 32;
    assert_eq!(d.as_bytes(), raw, "decode keeps every byte");
    assert_eq!((d.len_ctrl().into_bits(), d.word1(), d.buf_ptr()), (w0, w1, w2), "little-endian words");
    assert_eq!(Desc::from_words(w0, w1, w2), d);

    let l = d.len_ctrl();
    let len = match w0 & bit::LEN {
        0 => 65536,
        n => n,
    };
    assert_eq!(l.len_bytes(), len, "a length field of 0 is 64 KiB");
    assert_eq!(u32::from(l.len_field()), w0 & bit::LEN);
    assert_eq!(u32::from(l.ring_id()), (w0 & bit::RING_ID) >> bit::RING_ID_SHIFT);
    let flags = [
        (l.meta(), bit::META),
        (l.first(), bit::FIRST),
        (l.last(), bit::LAST),
        (l.int_en(), bit::INT_EN),
        (l.sow(), bit::SOW),
        (l.dmb(), bit::DMB),
        (l.concat(), bit::CONCAT),
    ];
    for (got, mask) in flags {
        assert_eq!(got, w0 & mask != 0, "len_ctrl bit {}", mask.trailing_zeros());
    }

    let tx = d.tx();
    assert_eq!((tx.len_ctrl, tx.meta_ctrl.into_bits(), tx.src), (l, w1, w2));
    let wb = w1 & bit::WRITE_BARRIER != 0;
    assert_eq!(tx.meta_ctrl.write_barrier(), wb);
    let barrier = match (wb, w0 & bit::DMB != 0) {
        (true, _) => Barrier::WriteBarrier,
        (false, true) => Barrier::Dmb,
        (false, false) => Barrier::None,
    };
    assert_eq!(tx.barrier(), barrier, "WRITE_BARRIER wins over DMB");
    let rx = d.rx();
    assert_eq!((rx.len_ctrl, rx.buf2_ptr_lo, rx.dst), (l, w1, w2));

    // The printed forms never panic, and the debug form is the three words.
    assert_eq!(format!("{d:?}"), format!("Desc({w0:#010x}, {w1:#010x}, {w2:#018x})"));
    let shown = tx.to_string();
    assert!(shown.starts_with(&format!("src {w2:#x} len {len} ring id {} ", l.ring_id())), "{shown}");
    let shown = rx.to_string();
    assert!(shown.starts_with(&format!("dst {w2:#x} len {len} ring id {} ", l.ring_id())), "{shown}");

    // encode(decode(d)) == d for the shapes the builders make.
    let ring_id = l.ring_id();
    let tx_shape = bit::LEN | bit::RING_ID | bit::FIRST | bit::LAST | bit::DMB;
    let tx_meta = w1 == META_CTRL_DEFAULT || w1 == META_CTRL_DEFAULT | bit::WRITE_BARRIER;
    let both_barriers = wb && l.dmb();
    if w0 & !tx_shape == 0 && l.first() && l.last() && tx_meta && !both_barriers {
        assert_eq!(Desc::m2m_tx(w2, len, ring_id, barrier), Ok(d), "TX re-encodes");
    }
    let rx_shape = bit::LEN | bit::RING_ID | bit::SOW | bit::INT_EN;
    if w0 & !rx_shape == 0 && w1 == 0 {
        let b = if l.sow() { Barrier::Sow } else { Barrier::None };
        assert_eq!(Desc::m2m_rx(w2, len, ring_id, b, l.int_en()), Ok(d), "RX re-encodes");
    }
}

fn check_build(b: &Build) {
    let barrier = match Barrier::try_from(b.barrier) {
        Ok(x) => {
            assert!(b.barrier <= 3);
            assert_eq!(x as u32, b.barrier);
            x
        }
        Err(e) => {
            assert!(b.barrier > 3);
            assert_eq!(e, UdmaError::InvalidBarrier(b.barrier));
            return;
        }
    };
    let valid = (1..=65536).contains(&b.len);
    let (tx, rx) =
        (Desc::m2m_tx(b.addr, b.len, b.ring_id, barrier), Desc::m2m_rx(b.addr, b.len, b.ring_id, barrier, b.set_int));
    if !valid {
        assert_eq!(tx, Err(UdmaError::InvalidLength { len: b.len }));
        assert_eq!(rx, Err(UdmaError::InvalidLength { len: b.len }));
        return;
    }
    let (tx, rx) = (tx.expect("a valid TX half"), rx.expect("a valid RX half"));
    let field = b.len & bit::LEN;
    let id = u32::from(b.ring_id & 3) << bit::RING_ID_SHIFT;
    let dmb = if barrier == Barrier::Dmb { bit::DMB } else { 0 };
    let wb = if barrier == Barrier::WriteBarrier { bit::WRITE_BARRIER } else { 0 };
    assert_eq!(tx.len_ctrl().into_bits(), field | id | bit::FIRST | bit::LAST | dmb);
    assert_eq!((tx.word1(), tx.buf_ptr()), (META_CTRL_DEFAULT | wb, b.addr));
    let sow = if barrier == Barrier::Sow { bit::SOW } else { 0 };
    let int = if b.set_int { bit::INT_EN } else { 0 };
    assert_eq!((rx.len_ctrl().into_bits(), rx.word1(), rx.buf_ptr()), (field | id | sow | int, 0, b.addr));
    // decode(encode(x)) == x, through the bytes a ring holds.
    let t = Desc::read_from_bytes(tx.as_bytes()).expect("16 bytes").tx();
    assert_eq!((t.src, t.len_ctrl.len_bytes(), t.len_ctrl.ring_id()), (b.addr, b.len, b.ring_id & 3));
    let expect = if barrier == Barrier::Sow { Barrier::None } else { barrier };
    assert_eq!(t.barrier(), expect, "SOW does not touch the TX half");
    let r = Desc::read_from_bytes(rx.as_bytes()).expect("16 bytes").rx();
    assert_eq!((r.dst, r.len_ctrl.len_bytes(), r.len_ctrl.ring_id()), (b.addr, b.len, b.ring_id & 3));
    assert_eq!((r.len_ctrl.sow(), r.len_ctrl.int_en(), r.buf2_ptr_lo), (barrier == Barrier::Sow, b.set_int, 0));
}

/// FACTS §2.3, literally: the per-queue register words of each direction and the engine-level registers.
fn model_queue_reg(dir: Direction, off: u64) -> Option<&'static str> {
    let common: &[(u64, &str)] = &[
        (0x20, "Cfg"),
        (0x24, "Status"),
        (0x28, "DrbpLow"),
        (0x2c, "DrbpHigh"),
        (0x30, "Drl"),
        (0x34, "Drhp"),
        (0x38, "DrtpInc"),
        (0x3c, "Drtp"),
        (0x40, "Dcp"),
        (0x44, "CrbpLow"),
        (0x48, "CrbpHigh"),
        (0x4c, "Crhp"),
    ];
    let own: &[(u64, &str)] = match dir {
        Direction::Tx => &[(0x00, "DescPrefCfg"), (0x74, "RlimitMask"), (0xa0, "CompCfg"), (0xb0, "QSwCtrl")],
        Direction::Rx => &[(0x54, "CompCfg"), (0x64, "QSwCtrl")],
    };
    common.iter().chain(own).find(|(o, _)| *o == off).map(|(_, n)| *n)
}

/// The model of [`Register::decode`]: `(direction, qid or None for an engine register, name)`.
fn model_decode(off: u64) -> Option<(Direction, Option<u32>, &'static str)> {
    if off % 4 != 0 || off >= 0x3_8000 {
        return None;
    }
    let (dir, block) = if off < 0x2_0000 { (Direction::Tx, 0) } else { (Direction::Rx, 0x2_0000) };
    let rel = off - block;
    if rel < 0x1000 {
        let name = match (dir, rel) {
            (_, 0x200) => "State",
            (_, 0x204) => "ChangeState",
            (Direction::Tx, 0x254) => "CfgLen",
            _ => return None,
        };
        return Some((dir, None, name));
    }
    let q = (rel - 0x1000) / 0x1000;
    if q >= 16 {
        return None;
    }
    model_queue_reg(dir, (rel - 0x1000) % 0x1000).map(|n| (dir, Some(q as u32), n))
}

fn check_register(off: u64, (rx, qid, reg): (bool, u32, u8)) {
    let got = Register::decode(off);
    let seen = got.map(|r| match r {
        Register::Engine { dir, reg } => (dir, None, reg.name()),
        Register::Queue { dir, qid, reg } => (dir, Some(qid), reg.name()),
    });
    assert_eq!(seen, model_decode(off), "decode({off:#x})");
    if let Some(r) = got {
        assert_eq!(r.offset(), Some(off), "offset(decode({off:#x}))");
    }
    // offset then decode, for a register named by arbitrary parts.
    let dir = if rx { Direction::Rx } else { Direction::Tx };
    let q = QueueReg::ALL[usize::from(reg) % QueueReg::COUNT];
    let named = Register::Queue { dir, qid, reg: q };
    match named.offset() {
        Some(o) => assert_eq!(Register::decode(o), Some(named)),
        None => assert!(qid >= 16 || q.offset(dir).is_none(), "{named:?} has an offset"),
    }
    let e = EngineReg::ALL[usize::from(reg) % EngineReg::COUNT];
    let named = Register::Engine { dir, reg: e };
    match named.offset() {
        Some(o) => assert_eq!(Register::decode(o), Some(named)),
        None => assert_eq!(e.offset(dir), None),
    }
    // BAR0 offset → engine: a hit lies inside that engine's block, a miss inside none.
    for arch in Arch::ALL {
        let blocks = (0..arch.num_engines()).filter_map(|e| arch.engine_base(e).map(|b| (e, b)));
        let mut inside = blocks.filter(|&(_, b)| off >= b && off - b < 0x3_c800);
        let expect = inside.next().map(|(e, b)| (e, off - b));
        assert_eq!(inside.next(), None, "{arch}: {off:#x} in two engine blocks");
        assert_eq!(arch.engine_at(off), expect, "{arch}: engine_at({off:#x})");
    }
}

fn check_value(v: u32) {
    assert_eq!(QueueCfg::from_bits(v).into_bits(), v, "cfg keeps undocumented bits");
    assert_eq!(QueueCfg::from_bits(v).enabled(), v & 0x3_0000 == 0x3_0000);
    let p = RingPtr::from_bits(v);
    assert_eq!((p.into_bits(), p.offset(), u32::from(p.ring_id())), (v, v & 0xff_ffff, v >> 30));
    assert_eq!(ptr_value(v, (v >> 8) as u8), (v & 0xff_ffff) | ((v >> 8) & 3) << 30);
    assert_eq!(RingLength::from_bits(v).descs(), v & 0xff_ffff);
    assert_eq!(RingLength::from_bits(v).into_bits(), v);
    assert_eq!(DoorbellCount::from_bits(v).into_bits(), v);
    assert_eq!(QueueSwCtrl::from_bits(v).rst_q(), v & 0x100 != 0);
    assert_eq!(QueueSwCtrl::from_bits(v).into_bits(), v);
    assert_eq!(RateLimitMask::from_bits(v).internal_pause_dmb(), v & 0b100 != 0);
    assert_eq!(RateLimitMask::from_bits(v).into_bits(), v);
    assert_eq!(ChangeState::from_bits(v).into_bits(), v);
    match UdmaState::from_bits(v) {
        Some(s) => assert_eq!(s as u32, v),
        None => assert!(v > 4, "state {v} has a name"),
    }
}
