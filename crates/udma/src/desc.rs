//! The 16-byte UDMA descriptor (`union udma_desc`, FACTS §1) with its TX (M2S) and RX (S2M) views.
//!
//! A copy is always a *pair*: a TX descriptor on the queue's M2S ring reads the source, an RX descriptor on
//! the S2M ring of the same qid writes the destination. Both share the `len_ctrl` word; word 1 is the TX
//! `meta_ctrl` or the RX `buf2_ptr_lo` (always 0 on the M2M path); the last 8 bytes are the TX source
//! (`buf_ptr`) or the RX destination (`buf1_ptr`).
//!
//! ```
//! use udma::{Barrier, Desc};
//!
//! // The first pair staged after a ring init (phase 1): 64 KiB from host memory (bit 44 on V2) to HBM.
//! let tx = Desc::m2m_tx(0x1000_0000_4000, 65536, 1, Barrier::None)?;
//! let rx = Desc::m2m_rx(0x2000, 65536, 1, Barrier::None, false)?;
//! assert_eq!(format!("{tx:?}"), "Desc(0x0d000000, 0x01080003, 0x0000100000004000)");
//! assert_eq!(format!("{rx:?}"), "Desc(0x01000000, 0x00000000, 0x0000000000002000)");
//! // Decoding words read back from a ring.
//! let seen = Desc::from_words(0x0D00_0000, 0x0108_0003, 0x1000_0000_4000).tx();
//! assert!(seen.len_ctrl.first() && seen.len_ctrl.last());
//! assert_eq!((seen.src, seen.len_ctrl.len_bytes(), seen.len_ctrl.ring_id()), (0x1000_0000_4000, 65536, 1));
//! # Ok::<(), udma::UdmaError>(())
//! ```

use bitfield_struct::bitfield;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{UdmaError, DMA_RING_ID_MASK, MAX_DMA_DESC_SIZE};

/// The `len_ctrl` word shared by both views (FACTS §1.2). Bit 29 is SOW on RX only; bit 30 is DMB on TX only.
///
/// ```
/// use udma::LenCtrl;
///
/// let w = LenCtrl::new().with_len_field(4096).with_ring_id(2).with_first(true).with_last(true).with_dmb(true);
/// assert_eq!(w.into_bits(), 0x4E00_1000);
/// assert_eq!(LenCtrl::from_bits(0x0D00_0000).len_bytes(), 65536, "a length field of 0 is 64 KiB");
/// ```
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct LenCtrl {
    /// Length in bytes, bits 15:0; **0 encodes 65536** (see [`LenCtrl::len_bytes`]).
    #[bits(16)]
    pub len_field: u16,
    #[bits(7)]
    __: u8,
    /// Bit 23, userspace HAL META; the kernel never sets it.
    pub meta: bool,
    /// Bits 25:24, the 2-bit ring id (phase).
    #[bits(2)]
    pub ring_id: u8,
    /// Bit 26, `M2S_DESC_FIRST` (TX only on the kernel path).
    pub first: bool,
    /// Bit 27, `M2S_DESC_LAST` (TX only on the kernel path).
    pub last: bool,
    /// Bit 28, interrupt on completion (never used for H2T completion).
    pub int_en: bool,
    /// Bit 29, `S2M_DESC_STRONG_ORDER_WR` — strong-ordered write (RX only).
    pub sow: bool,
    /// Bit 30, `M2S_DESC_DMB` — data memory barrier (TX only).
    pub dmb: bool,
    /// Bit 31, userspace HAL CONCAT; the kernel never sets it.
    pub concat: bool,
}

impl LenCtrl {
    /// The byte count this word describes: the 16-bit field, with 0 meaning 65536 (example on [`LenCtrl`]).
    pub fn len_bytes(&self) -> u32 {
        match self.len_field() {
            0 => MAX_DMA_DESC_SIZE,
            n => u32::from(n),
        }
    }
}

/// Default TX `meta_ctrl`: first block, last block, copy_source_data, ssmae_op = 0b010
/// (`tdma_m2s_meta_ctrl_default_value`, FACTS §1.3). Decoded in [`MetaCtrl`]'s example.
pub const META_CTRL_DEFAULT: u32 = 0x0108_0003;

/// The TX `meta_ctrl` word, both overlays (FACTS §1.3). Bit 26 is `write_barrier` from the
/// `sdma_cme_desc_word` overlay — not to be confused with FIRST, which is bit 26 of `len_ctrl`.
///
/// ```
/// use udma::desc::{MetaCtrl, META_CTRL_DEFAULT};
///
/// let m = MetaCtrl::from_bits(META_CTRL_DEFAULT);
/// assert!(m.first_block() && m.last_block() && m.copy_source_data() && !m.write_barrier());
/// assert_eq!(m.ssmae_op(), 0b010);
/// assert_eq!(m.with_write_barrier(true).into_bits(), 0x0508_0003);
/// ```
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct MetaCtrl {
    /// Bit 0.
    pub last_block: bool,
    /// Bit 1.
    pub first_block: bool,
    #[bits(1)]
    __: u8,
    /// Bits 5:3.
    #[bits(3)]
    pub crc_iv_index: u8,
    /// Bits 13:6, eight endianness-swap flags.
    #[bits(8)]
    pub swap_flags: u8,
    /// Bit 14.
    pub validate_crc: bool,
    /// Bit 15.
    pub use_stored_crc_iv: bool,
    /// Bit 16.
    pub send_crc_result: bool,
    /// Bit 17.
    pub store_crc_result: bool,
    /// Bit 18.
    pub store_source_crc: bool,
    /// Bit 19.
    pub copy_source_data: bool,
    /// Bits 22:20.
    #[bits(3)]
    pub op_type: u8,
    /// Bits 25:23.
    #[bits(3)]
    pub ssmae_op: u8,
    /// Bit 26, the write barrier: this descriptor's writes drain all earlier writes before later ones.
    pub write_barrier: bool,
    #[bits(5)]
    __: u8,
}

/// The M2M barrier a descriptor pair carries (`UDMA_M2M_BARRIER_*`, FACTS §1.4). A raw value converts with
/// [`TryFrom<u32>`].
///
/// ```
/// use udma::{Barrier, Desc, UdmaError};
///
/// assert_eq!(Barrier::try_from(2), Ok(Barrier::WriteBarrier));
/// assert_eq!(Barrier::try_from(4), Err(UdmaError::InvalidBarrier(4)));
/// // Each barrier lands on its own bit of its own half of the pair.
/// assert!(Desc::m2m_tx(0, 4, 1, Barrier::Dmb)?.len_ctrl().dmb());
/// assert!(Desc::m2m_tx(0, 4, 1, Barrier::WriteBarrier)?.tx().meta_ctrl.write_barrier());
/// assert!(Desc::m2m_rx(0, 4, 1, Barrier::Sow, false)?.len_ctrl().sow());
/// # Ok::<(), UdmaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum Barrier {
    /// No ordering requirement.
    #[default]
    None = 0,
    /// Data memory barrier: TX `len_ctrl` bit 30.
    Dmb = 1,
    /// Write barrier: TX `meta_ctrl` bit 26.
    WriteBarrier = 2,
    /// Strong-ordered write: RX `len_ctrl` bit 29 (V3+).
    Sow = 3,
}

impl TryFrom<u32> for Barrier {
    type Error = UdmaError;

    fn try_from(raw: u32) -> Result<Self, UdmaError> {
        match raw {
            0 => Ok(Barrier::None),
            1 => Ok(Barrier::Dmb),
            2 => Ok(Barrier::WriteBarrier),
            3 => Ok(Barrier::Sow),
            other => Err(UdmaError::InvalidBarrier(other)),
        }
    }
}

/// One 16-byte, 16-byte-aligned, little-endian UDMA descriptor as it sits in a ring. Built by
/// [`Desc::m2m_tx`] / [`Desc::m2m_rx`] (or from raw words), read through its [`TxDesc`] / [`RxDesc`] views; see
/// the [module example](self).
#[derive(Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(16))]
pub struct Desc {
    len_ctrl: U32,
    word1: U32,
    buf_ptr: U64,
}

const _: () = assert!(core::mem::size_of::<Desc>() == 16);
const _: () = assert!(core::mem::align_of::<Desc>() == 16);

/// Converts a byte count to the 16-bit length field, refusing 0 and anything above 64 KiB.
fn len_field(len: u32) -> Result<u16, UdmaError> {
    match len {
        MAX_DMA_DESC_SIZE => Ok(0),
        1..MAX_DMA_DESC_SIZE => Ok(len as u16),
        _ => Err(UdmaError::InvalidLength { len }),
    }
}

impl Desc {
    /// Builds a descriptor from its three raw words (`len_ctrl`, word 1, the 64-bit address).
    ///
    /// ```
    /// let d = udma::Desc::from_words(0x0100_0004, 0, 0x2000);
    /// assert_eq!((d.len_ctrl().len_bytes(), d.word1(), d.buf_ptr()), (4, 0, 0x2000));
    /// ```
    pub const fn from_words(len_ctrl: u32, word1: u32, buf_ptr: u64) -> Self {
        Desc { len_ctrl: U32::new(len_ctrl), word1: U32::new(word1), buf_ptr: U64::new(buf_ptr) }
    }

    /// Builds the TX (M2S) half of an M2M pair as `udma_m2m_copy_prepare_one` does (FACTS §1.5):
    /// `len_ctrl` = FIRST | LAST | (DMB if `barrier` is DMB) | ring_id << 24 | len, `meta_ctrl` = 0x01080003
    /// plus bit 26 for WRITE_BARRIER, `buf_ptr` = `src`.
    ///
    /// ```
    /// use udma::{Barrier, Desc, UdmaError};
    ///
    /// let d = Desc::m2m_tx(0x4000, 4, 2, Barrier::WriteBarrier)?;
    /// assert_eq!((d.len_ctrl().into_bits(), d.word1(), d.buf_ptr()), (0x0E00_0004, 0x0508_0003, 0x4000));
    /// assert_eq!(Desc::m2m_tx(0x4000, 0, 2, Barrier::None), Err(UdmaError::InvalidLength { len: 0 }));
    /// # Ok::<(), UdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`UdmaError::InvalidLength`] for a length of 0 or above 65536.
    pub fn m2m_tx(src: u64, len: u32, ring_id: u8, barrier: Barrier) -> Result<Self, UdmaError> {
        let len_ctrl = LenCtrl::new()
            .with_len_field(len_field(len)?)
            .with_ring_id(ring_id & DMA_RING_ID_MASK)
            .with_first(true)
            .with_last(true)
            .with_dmb(barrier == Barrier::Dmb);
        let meta = MetaCtrl::from_bits(META_CTRL_DEFAULT).with_write_barrier(barrier == Barrier::WriteBarrier);
        Ok(Desc::from_words(len_ctrl.into_bits(), meta.into_bits(), src))
    }

    /// Builds the RX (S2M) half of an M2M pair (FACTS §1.5): `len_ctrl` = ring_id << 24 | len | (SOW if
    /// `barrier` is SOW) | (INT_EN if `set_int`), `buf2_ptr_lo` = 0, `buf1_ptr` = `dst`. No FIRST/LAST.
    ///
    /// ```
    /// use udma::{Barrier, Desc, UdmaError};
    ///
    /// let d = Desc::m2m_rx(0x8000, 4, 1, Barrier::Sow, true)?;
    /// assert_eq!((d.len_ctrl().into_bits(), d.word1(), d.buf_ptr()), (0x3100_0004, 0, 0x8000));
    /// assert_eq!(Desc::m2m_rx(0, 65537, 1, Barrier::None, false), Err(UdmaError::InvalidLength { len: 65537 }));
    /// # Ok::<(), UdmaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`UdmaError::InvalidLength`] for a length of 0 or above 65536.
    pub fn m2m_rx(dst: u64, len: u32, ring_id: u8, barrier: Barrier, set_int: bool) -> Result<Self, UdmaError> {
        let len_ctrl = LenCtrl::new()
            .with_len_field(len_field(len)?)
            .with_ring_id(ring_id & DMA_RING_ID_MASK)
            .with_sow(barrier == Barrier::Sow)
            .with_int_en(set_int);
        Ok(Desc::from_words(len_ctrl.into_bits(), 0, dst))
    }

    /// The computed words of an M2M pair, `(tx len_ctrl, tx meta_ctrl, rx len_ctrl)`, exactly as
    /// [`Desc::m2m_tx`] and [`Desc::m2m_rx`] build them (a property test checks it); the remaining words are
    /// `src`, 0 and `dst`.
    ///
    /// `copy_prepare_one`'s hot path: plain shifts and masks of constants taken from the bitfield layouts, all
    /// `#[inline]`, so the generic caller — instantiated in the user's crate — compiles it to a handful of
    /// instructions with no call.
    ///
    /// # Errors
    ///
    /// [`UdmaError::InvalidLength`] for a length of 0 or above 65536.
    #[inline]
    pub(crate) fn m2m_pair_words(
        len: u32,
        tx_ring_id: u8,
        rx_ring_id: u8,
        barrier: Barrier,
        set_int: bool,
    ) -> Result<(u32, u32, u32), UdmaError> {
        const FIRST_LAST: u32 = LenCtrl::new().with_first(true).with_last(true).into_bits();
        const DMB: u32 = LenCtrl::new().with_dmb(true).into_bits();
        const SOW: u32 = LenCtrl::new().with_sow(true).into_bits();
        const INT_EN: u32 = LenCtrl::new().with_int_en(true).into_bits();
        const RING_ID_SHIFT: u32 = LenCtrl::new().with_ring_id(1).into_bits().trailing_zeros();
        const WRITE_BARRIER: u32 = MetaCtrl::new().with_write_barrier(true).into_bits();
        let len = match len {
            MAX_DMA_DESC_SIZE => 0,
            1..MAX_DMA_DESC_SIZE => len,
            _ => return Err(UdmaError::InvalidLength { len }),
        };
        let id = |ring_id: u8| u32::from(ring_id & DMA_RING_ID_MASK) << RING_ID_SHIFT;
        let tx = FIRST_LAST | id(tx_ring_id) | len | if barrier == Barrier::Dmb { DMB } else { 0 };
        let meta = META_CTRL_DEFAULT | if barrier == Barrier::WriteBarrier { WRITE_BARRIER } else { 0 };
        let rx =
            id(rx_ring_id) | len | if barrier == Barrier::Sow { SOW } else { 0 } | if set_int { INT_EN } else { 0 };
        Ok((tx, meta, rx))
    }

    /// The `len_ctrl` word.
    pub fn len_ctrl(&self) -> LenCtrl {
        LenCtrl::from_bits(self.len_ctrl.get())
    }

    /// Word 1 raw: TX `meta_ctrl` or RX `buf2_ptr_lo`.
    pub fn word1(&self) -> u32 {
        self.word1.get()
    }

    /// The 64-bit address word: TX source or RX destination.
    pub fn buf_ptr(&self) -> u64 {
        self.buf_ptr.get()
    }

    /// Decodes the descriptor as a TX (M2S) descriptor.
    pub fn tx(&self) -> TxDesc {
        TxDesc { len_ctrl: self.len_ctrl(), meta_ctrl: MetaCtrl::from_bits(self.word1()), src: self.buf_ptr() }
    }

    /// Decodes the descriptor as an RX (S2M) descriptor.
    pub fn rx(&self) -> RxDesc {
        RxDesc { len_ctrl: self.len_ctrl(), buf2_ptr_lo: self.word1(), dst: self.buf_ptr() }
    }
}

impl core::fmt::Debug for Desc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Desc({:#010x}, {:#010x}, {:#018x})", self.len_ctrl.get(), self.word1.get(), self.buf_ptr.get())
    }
}

/// A descriptor read through its TX (M2S, memory-to-stream) view ([`Desc::tx`]).
///
/// ```
/// use udma::{Barrier, Desc};
///
/// let tx = Desc::m2m_tx(0x4000, 512, 1, Barrier::Dmb)?.tx();
/// assert_eq!((tx.src, tx.len_ctrl.len_bytes(), tx.barrier()), (0x4000, 512, Barrier::Dmb));
/// # Ok::<(), udma::UdmaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxDesc {
    /// Length, phase and flags.
    pub len_ctrl: LenCtrl,
    /// Meta word (default 0x01080003; bit 26 is the write barrier).
    pub meta_ctrl: MetaCtrl,
    /// Source address (`buf_ptr`).
    pub src: u64,
}

impl TxDesc {
    /// The barrier this TX descriptor carries (DMB or WRITE_BARRIER; both set reads as WRITE_BARRIER).
    pub fn barrier(&self) -> Barrier {
        if self.meta_ctrl.write_barrier() {
            Barrier::WriteBarrier
        } else if self.len_ctrl.dmb() {
            Barrier::Dmb
        } else {
            Barrier::None
        }
    }
}

/// A descriptor read through its RX (S2M, stream-to-memory) view ([`Desc::rx`]).
///
/// ```
/// use udma::{Barrier, Desc};
///
/// let rx = Desc::m2m_rx(0x8000, 512, 3, Barrier::None, false)?.rx();
/// assert_eq!((rx.dst, rx.len_ctrl.len_bytes(), rx.len_ctrl.ring_id(), rx.buf2_ptr_lo), (0x8000, 512, 3, 0));
/// # Ok::<(), udma::UdmaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxDesc {
    /// Length, phase and flags.
    pub len_ctrl: LenCtrl,
    /// Second buffer low word; 0 on the M2M path.
    pub buf2_ptr_lo: u32,
    /// Destination address (`buf1_ptr`).
    pub dst: u64,
}

/// Writes the set flags of `flags` joined by `|`, or `-` when none is set.
fn write_flags(f: &mut core::fmt::Formatter<'_>, flags: &[(bool, &str)]) -> core::fmt::Result {
    let mut any = false;
    for (_, name) in flags.iter().filter(|(set, _)| *set) {
        f.write_str(if any { "|" } else { "" })?;
        f.write_str(name)?;
        any = true;
    }
    if !any {
        f.write_str("-")?;
    }
    Ok(())
}

/// One line a DMA engineer reads: source, length, ring id and the set flags.
///
/// ```
/// use udma::{Barrier, Desc};
///
/// let tx = Desc::m2m_tx(0x4000, 512, 1, Barrier::WriteBarrier)?.tx();
/// assert_eq!(tx.to_string(), "src 0x4000 len 512 ring id 1 FIRST|LAST|WRITE_BARRIER");
/// let rx = Desc::m2m_rx(0x8000, 65536, 2, Barrier::None, false)?.rx();
/// assert_eq!(rx.to_string(), "dst 0x8000 len 65536 ring id 2 -");
/// # Ok::<(), udma::UdmaError>(())
/// ```
impl core::fmt::Display for TxDesc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let l = self.len_ctrl;
        write!(f, "src {:#x} len {} ring id {} ", self.src, l.len_bytes(), l.ring_id())?;
        let flags = [
            (l.first(), "FIRST"),
            (l.last(), "LAST"),
            (l.dmb(), "DMB"),
            (self.meta_ctrl.write_barrier(), "WRITE_BARRIER"),
            (l.int_en(), "INT"),
        ];
        write_flags(f, &flags)
    }
}

/// As [`TxDesc`]'s: destination, length, ring id and the set flags.
impl core::fmt::Display for RxDesc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let l = self.len_ctrl;
        write!(f, "dst {:#x} len {} ring id {} ", self.dst, l.len_bytes(), l.ring_id())?;
        write_flags(f, &[(l.sow(), "SOW"), (l.int_en(), "INT")])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pair_words_are_the_builders_words(len in 0u32..=65537, tx_id in 0u8..8, rx_id in 0u8..8, b in barrier(), int: bool) {
            let words = Desc::m2m_pair_words(len, tx_id, rx_id, b, int);
            match (Desc::m2m_tx(7, len, tx_id, b), Desc::m2m_rx(9, len, rx_id, b, int)) {
                (Ok(tx), Ok(rx)) => prop_assert_eq!(words, Ok((tx.len_ctrl().into_bits(), tx.word1(), rx.len_ctrl().into_bits()))),
                (Err(e), _) => prop_assert_eq!(words, Err(e)),
                (_, Err(e)) => prop_assert_eq!(words, Err(e)),
            }
        }
    }

    #[test]
    fn layout_is_pinned() {
        assert_eq!(offset_of!(Desc, len_ctrl), 0);
        assert_eq!(offset_of!(Desc, word1), 4);
        assert_eq!(offset_of!(Desc, buf_ptr), 8);
        let d = Desc::from_words(0x0403_0201, 0x0807_0605, 0x100f_0e0d_0c0b_0a09);
        assert_eq!(d.as_bytes(), &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
    }

    #[test]
    fn first_64k_pair_after_ring_init_matches_facts() {
        // FACTS §1.5: TX len_ctrl 0x0D000000 (FIRST|LAST, ring id 1, len 0), RX 0x01000000.
        let tx = Desc::m2m_tx(0x1000_0000_4000, 65536, 1, Barrier::None).unwrap();
        let rx = Desc::m2m_rx(0x2000, 65536, 1, Barrier::None, false).unwrap();
        assert_eq!(tx.len_ctrl().into_bits(), 0x0D00_0000);
        assert_eq!(tx.word1(), 0x0108_0003);
        assert_eq!(tx.buf_ptr(), 0x1000_0000_4000);
        assert_eq!(rx.len_ctrl().into_bits(), 0x0100_0000);
        assert_eq!(rx.word1(), 0);
        assert_eq!(rx.buf_ptr(), 0x2000);
    }

    #[test]
    fn barriers_land_on_their_bits() {
        let wb = Desc::m2m_tx(0, 4, 2, Barrier::WriteBarrier).unwrap();
        assert_eq!(wb.word1(), 0x0508_0003);
        assert_eq!(wb.len_ctrl().into_bits(), 0x0E00_0004);
        let dmb = Desc::m2m_tx(0, 4, 3, Barrier::Dmb).unwrap();
        assert_eq!(dmb.len_ctrl().into_bits(), 0x4F00_0004);
        assert_eq!(dmb.word1(), 0x0108_0003);
        let sow_tx = Desc::m2m_tx(0, 4, 0, Barrier::Sow).unwrap();
        assert_eq!(sow_tx.len_ctrl().into_bits(), 0x0C00_0004, "SOW does not touch the TX half");
        let sow = Desc::m2m_rx(0, 4, 1, Barrier::Sow, false).unwrap();
        assert_eq!(sow.len_ctrl().into_bits(), 0x2100_0004);
        let int = Desc::m2m_rx(0, 4, 1, Barrier::WriteBarrier, true).unwrap();
        assert_eq!(int.len_ctrl().into_bits(), 0x1100_0004, "WRITE_BARRIER does not touch the RX half");
    }

    #[test]
    fn meta_default_decodes_as_facts_say() {
        let m = MetaCtrl::from_bits(META_CTRL_DEFAULT);
        assert!(m.first_block() && m.last_block() && m.copy_source_data());
        assert_eq!(m.ssmae_op(), 0b010);
        assert!(!m.write_barrier());
        assert_eq!(m.op_type(), 0);
    }

    #[test]
    fn lengths_outside_one_to_64k_are_refused() {
        assert_eq!(Desc::m2m_tx(0, 0, 1, Barrier::None), Err(UdmaError::InvalidLength { len: 0 }));
        assert_eq!(Desc::m2m_rx(0, 65537, 1, Barrier::None, false), Err(UdmaError::InvalidLength { len: 65537 }));
        assert_eq!(UdmaError::InvalidLength { len: 65537 }.errno(), -1);
    }

    #[test]
    fn raw_barrier_values() {
        assert_eq!(Barrier::try_from(2), Ok(Barrier::WriteBarrier));
        assert_eq!(Barrier::try_from(4), Err(UdmaError::InvalidBarrier(4)));
        assert_eq!(UdmaError::InvalidBarrier(4).errno(), -22);
    }

    fn barrier() -> impl Strategy<Value = Barrier> {
        prop_oneof![Just(Barrier::None), Just(Barrier::Dmb), Just(Barrier::WriteBarrier), Just(Barrier::Sow)]
    }

    proptest! {
        #[test]
        fn tx_round_trips(src: u64, len in 1u32..=65536, ring_id in 0u8..4, b in barrier()) {
            let d = Desc::m2m_tx(src, len, ring_id, b).unwrap();
            let back = Desc::read_from_bytes(d.as_bytes()).unwrap().tx();
            prop_assert_eq!(back.len_ctrl.len_bytes(), len);
            prop_assert_eq!(back.len_ctrl.ring_id(), ring_id);
            prop_assert!(back.len_ctrl.first() && back.len_ctrl.last());
            prop_assert!(!back.len_ctrl.sow() && !back.len_ctrl.int_en());
            prop_assert_eq!(back.src, src);
            let expect = if b == Barrier::Sow { Barrier::None } else { b };
            prop_assert_eq!(back.barrier(), expect);
            prop_assert_eq!(back.meta_ctrl.with_write_barrier(false).into_bits(), META_CTRL_DEFAULT);
        }

        #[test]
        fn rx_round_trips(dst: u64, len in 1u32..=65536, ring_id in 0u8..4, b in barrier(), int: bool) {
            let d = Desc::m2m_rx(dst, len, ring_id, b, int).unwrap();
            let back = Desc::read_from_bytes(d.as_bytes()).unwrap().rx();
            prop_assert_eq!(back.len_ctrl.len_bytes(), len);
            prop_assert_eq!(back.len_ctrl.ring_id(), ring_id);
            prop_assert_eq!(back.len_ctrl.sow(), b == Barrier::Sow);
            prop_assert_eq!(back.len_ctrl.int_en(), int);
            prop_assert!(!back.len_ctrl.first() && !back.len_ctrl.last() && !back.len_ctrl.dmb());
            prop_assert_eq!(back.buf2_ptr_lo, 0);
            prop_assert_eq!(back.dst, dst);
        }

        #[test]
        fn raw_words_round_trip(a: u32, b: u32, c: u64) {
            let d = Desc::from_words(a, b, c);
            prop_assert_eq!(d.len_ctrl().into_bits(), a);
            prop_assert_eq!(d.word1(), b);
            prop_assert_eq!(d.buf_ptr(), c);
            prop_assert_eq!(Desc::read_from_bytes(d.as_bytes()).unwrap(), d);
        }
    }
}
