//! One operation as drawn: everything about it is a function of the campaign seed and its index.

use rand::RngExt;
use serde::Serialize;

use super::bystander::{self, Bystander};
use super::config::FaultMode;
use super::fault::{FaultKind, FaultSpec};
use super::path::{self, PathKind};
use super::plan;
use super::rng::{op_rng, OpRng};
use super::size;
use ndma_emu::test_utils::Dir;

/// One transfer of an operation (an async chain has several; every other path one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// The NC whose H2T ring the transfer uses (the device side's chunk's NC; host→host: the destination's).
    pub nc: u32,
    /// NC owning the source chunk.
    pub src_nc: u32,
    /// NC owning the destination chunk.
    pub dst_nc: u32,
    /// Bytes.
    pub size: u64,
    /// Offset of the source window beyond its guard.
    pub src_off: u64,
    /// Offset of the destination window beyond its guard.
    pub dst_off: u64,
}

/// A `copy_descriptors` operation's own draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DescriptorDraw {
    /// `NEURON_DMA_QUEUE_TYPE_TX` (0), `_RX` (1), or an invalid type.
    pub queue_type: u32,
    /// Descriptors (per 1000) whose address is a host chunk of this device rather than device memory.
    pub host_permille: u32,
    /// The index of the one descriptor whose host range crosses the end of its chunk (refused), if any.
    pub invalid_at: Option<u64>,
}

/// How the frames of a zero-copy user buffer are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ZcLayout {
    /// One physically contiguous run.
    Contiguous,
    /// No two pages on consecutive frames.
    Scattered,
    /// Runs of this many consecutive frames.
    Runs(u32),
}

/// A zero-copy operation's own draws (the segment's `src_off` is the user window's page offset, `dst_off` the
/// device window's offset beyond its guard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ZcDraw {
    /// An async request (one completion) rather than a synchronous one.
    pub is_async: bool,
    /// The user buffer's frames.
    pub layout: ZcLayout,
}

/// What a path draws beyond its segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Detail {
    /// A synchronous copy: through `memcpy_mc`, or the idiomatic `NeuronDevice::copy(&Transfer)`.
    Classic {
        /// Through `copy(&Transfer)`.
        idiomatic: bool,
    },
    /// An `AsyncPipeline` chain.
    Async,
    /// A memset of the destination window.
    Memset {
        /// The byte (bit 7 set, so a byte not written is told from a written one).
        value: u8,
    },
    /// User descriptors copied in through `copy_descriptors`.
    CopyDescriptors(DescriptorDraw),
    /// `zerocopy_submit` of a user buffer.
    ZeroCopy(ZcDraw),
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpSpec {
    /// Its index in the campaign.
    pub index: u64,
    /// Its own seed: patterns, descriptor contents, the fault plan's stream.
    pub seed: u64,
    /// The path.
    pub path: PathKind,
    /// The direction (memset: `h2d` into a device chunk, `h2h` into a host chunk; `copy_descriptors`: `h2d`
    /// or `h2h` by the destination chunk).
    #[serde(serialize_with = "ser_dir")]
    pub dir: Dir,
    /// The device.
    pub device: u32,
    /// Its transfers, in order.
    pub segments: Vec<Segment>,
    /// Path-specific draws.
    pub detail: Detail,
    /// The fault injected on the first segment's ring, if any.
    pub fault: Option<FaultSpec>,
    /// `--bystanders`: an unfaulted async copy in flight on the faulted ring while the operation runs.
    pub bystander: Option<Bystander>,
}

fn ser_dir<S: serde::Serializer>(d: &Dir, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.name())
}

impl OpSpec {
    /// Total bytes of its segments.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// The NC of the ring the operation (and its fault) starts on.
    pub fn nc(&self) -> u32 {
        self.segments.first().map_or(0, |s| s.nc)
    }

    /// One line for people: `classic-sync h2d 65537 B on device 0 NC 1, fault hang`.
    pub fn describe(&self) -> String {
        let sizes: Vec<String> = self.segments.iter().map(|s| s.size.to_string()).collect();
        let segs: Vec<String> = self
            .segments
            .iter()
            .map(|s| format!("NC {} (src NC {} +{}, dst NC {} +{})", s.nc, s.src_nc, s.src_off, s.dst_nc, s.dst_off))
            .collect();
        let mut fault = self.fault.map_or_else(|| "none".to_string(), |f| f.describe());
        if let Some(b) = &self.bystander {
            fault.push_str(&format!("; bystander: {}", b.describe()));
        }
        format!(
            "{} {} of {} B on device {} — {}; {:?}; fault: {fault}",
            self.path.name(),
            self.dir.name(),
            sizes.join(" + "),
            self.device,
            segs.join(", "),
            self.detail
        )
    }
}

/// What operations are drawn from: the campaign's choices and the instance's shape.
#[derive(Debug, Clone)]
pub struct DrawContext {
    /// The campaign seed.
    pub seed: u64,
    /// Paths to draw from.
    pub paths: Vec<PathKind>,
    /// Devices of the instance.
    pub devices: u32,
    /// NCs per device.
    pub ncs: u32,
    /// Faults or not.
    pub faults: FaultMode,
    /// Share of faulted operations.
    pub fault_rate: f64,
    /// Fault kinds to draw from.
    pub fault_kinds: Vec<FaultKind>,
    /// Share of segments drawn from the large size classes.
    pub big_rate: f64,
    /// The instance has async zero-copy (V3): a faulted async zero-copy operation must reach the engine.
    pub async_zerocopy: bool,
    /// `--bystanders`: a faulted operation of a classic path gets a bystander on its ring.
    pub bystanders: bool,
}

/// The state of one operation's draw, handed to its path.
pub struct Draw<'a> {
    /// The operation's RNG.
    pub rng: OpRng,
    /// The campaign's choices.
    pub ctx: &'a DrawContext,
    /// The operation carries a fault: it must reach the engine (no size 0, no refusal), stay small and stay
    /// on one ring.
    pub faulted: bool,
}

impl Draw<'_> {
    /// A `(device, NC)`: half the time the hot ring (device 0, NC 0), so threads meet on it.
    pub fn ring(&mut self) -> (u32, u32) {
        if self.rng.random_bool(0.5) {
            (0, 0)
        } else {
            (self.rng.random_range(0..self.ctx.devices), self.rng.random_range(0..self.ctx.ncs))
        }
    }

    /// The NC of the other chunk of a transfer whose ring is `nc`'s: mostly the same, sometimes another.
    pub fn other_nc(&mut self, nc: u32) -> u32 {
        if self.rng.random_bool(0.7) {
            nc
        } else {
            self.rng.random_range(0..self.ctx.ncs)
        }
    }

    /// A size: small edges for a faulted operation, the whole distribution otherwise.
    pub fn size(&mut self) -> u64 {
        if self.faulted {
            size::draw_small(&mut self.rng)
        } else {
            size::draw(&mut self.rng, self.ctx.big_rate)
        }
    }

    /// A segment of `dir` on NC `nc`'s ring with a drawn size and offsets.
    pub fn segment(&mut self, dir: Dir, nc: u32, size: u64) -> Segment {
        let other = self.other_nc(nc);
        // mc_pair_to_nc: a device source wins; a host source uses the destination's NC.
        let (src_nc, dst_nc) = match dir {
            Dir::H2d | Dir::H2h => (other, nc),
            Dir::D2h | Dir::D2d => (nc, other),
        };
        let (src_off, dst_off) = (size::draw_offset(&mut self.rng), size::draw_offset(&mut self.rng));
        Segment { nc, src_nc, dst_nc, size, src_off, dst_off }
    }
}

impl OpSpec {
    /// Operation `index` of the campaign `ctx` describes.
    pub fn draw(ctx: &DrawContext, index: u64) -> OpSpec {
        let mut rng = op_rng(ctx.seed, index);
        let seed = rng.random();
        let mut faulted = ctx.faults == FaultMode::Mix
            && !ctx.fault_kinds.is_empty()
            && rng.random_bool(ctx.fault_rate.clamp(0.0, 1.0));
        let path = ctx.paths[rng.random_range(0..ctx.paths.len())];
        // The kinds that apply to the path (pin faults to zero-copy, engine faults to the rest); an async
        // zero-copy request on an arch without it is refused before any pin.
        let kinds: Vec<FaultKind> = ctx.fault_kinds.iter().copied().filter(|k| k.applies_to(path)).collect();
        faulted &= !kinds.is_empty() && (path != PathKind::ZeroCopyAsync || ctx.async_zerocopy);
        let mut d = Draw { rng, ctx, faulted };
        let (device, nc) = d.ring();
        let drawn = path::draw(path, &mut d, nc);
        let mut spec = OpSpec {
            index,
            seed,
            path,
            dir: drawn.dir,
            device,
            segments: drawn.segments,
            detail: drawn.detail,
            fault: None,
            bystander: None,
        };
        if faulted {
            let kind = kinds[d.rng.random_range(0..kinds.len())];
            spec.fault = Some(if kind.is_pin_fault() {
                path::zerocopy_fault(&mut d.rng, kind, &mut spec)
            } else {
                let pairs = plan::fetch_order(&spec).len() as u64;
                FaultSpec::draw(&mut d.rng, kind, pairs)
            });
            // Drawn last, and only with the flag: without it every operation draws as before.
            if ctx.bystanders && bystander::applies(path, kind) {
                spec.bystander = Some(Bystander::draw(&mut d, nc));
            }
        }
        spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(faults: FaultMode) -> DrawContext {
        DrawContext {
            seed: 42,
            paths: PathKind::ALL.to_vec(),
            devices: 2,
            ncs: 8,
            faults,
            fault_rate: 0.5,
            fault_kinds: FaultKind::ALL.to_vec(),
            big_rate: 0.0,
            async_zerocopy: true,
            bystanders: false,
        }
    }

    #[test]
    fn an_operation_is_a_function_of_seed_and_index() {
        let c = ctx(FaultMode::Mix);
        for i in [0, 1, 999, 123_456_789] {
            assert_eq!(OpSpec::draw(&c, i), OpSpec::draw(&c, i));
        }
        assert_ne!(OpSpec::draw(&c, 1), OpSpec::draw(&c, 2));
    }

    #[test]
    fn faulted_operations_stay_small_and_on_one_ring() {
        let c = ctx(FaultMode::Mix);
        let mut faulted = 0;
        for i in 0..2000 {
            let s = OpSpec::draw(&c, i);
            if let Some(f) = s.fault {
                faulted += 1;
                if f.kind.is_pin_fault() {
                    // Pin faults need no timeout: an async one may span several pieces.
                    continue;
                }
                // copy_descriptors rounds a faulted size up to whole descriptors.
                assert!(s.segments.iter().all(|g| g.nc == s.nc() && g.size > 0 && g.size <= 131_088), "{s:?}");
                if f.kind == FaultKind::Corrupt {
                    assert!(f.param < plan::fetch_order(&s).len() as u64, "{s:?}");
                }
            }
        }
        assert!(faulted > 500, "{faulted}");
        assert!((0..500).all(|i| OpSpec::draw(&ctx(FaultMode::None), i).fault.is_none()));
    }
}
