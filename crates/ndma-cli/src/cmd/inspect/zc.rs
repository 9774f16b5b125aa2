//! `ndma inspect --zerocopy`: the descriptors one zero-copy piece writes. A user buffer is mapped with the
//! chosen layout, one synchronous `zerocopy_submit` of at most one piece (64 pages) runs on an inline engine,
//! and the ring is read back (`NeuronDevice::ring_descriptors`): the data descriptors — one or more per run of
//! physically consecutive frames, the first run starting at the page offset — and the marker, each with its
//! barrier. The read-back must be exactly what the op layer's `plan_descriptors` plans over the frames the
//! pages map to; the bytes are verified and the leak check must be clean.
//!
//! Without `--instance` it shows V2 (trn1.2xlarge, with `zerocopy_trn1_override` on) and V3 (trn2.48xlarge)
//! side by side: the one place their descriptors differ is the barrier of a write — V2 puts WRITE_BARRIER on
//! the last data descriptor, V3 puts SOW on the marker.

use ndma::zerocopy::{plan_descriptors, NEURON_DMA_H2T_DEFAULT_QID};
use ndma::{Instance, PAGE_SIZE};
use ndma_emu::ExecPolicy;
use serde::Serialize;
use udma::{Barrier, Desc};

use super::{is_marker, mem, rx_flags, tx_flags, words};
use crate::cli::InspectArgs;
use crate::cli::{testbed, BedOpts};
use crate::error::{CliError, CliResult, OpContext};
use crate::util::output::Out;
use crate::util::report::Counters;
use crate::util::size::fmt_size;
use crate::util::table::Table;
use crate::util::user::{Process, UserDir, UserWindow};
use crate::util::zc::{barrier_name, enable_override, Leaks};
use ndma_emu::test_utils::{Dir, GUARD};

/// Bytes of one full piece (64 pages).
const PIECE_BYTES: u64 = ndma::zerocopy::NDMA_ZC_PAGES_PER_XFER * PAGE_SIZE;
/// Pid of the user process.
const PID: u32 = 4243;
/// Seed of the frame placement and the data.
const SEED: u64 = 1;

/// One run of physically consecutive frames.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Position in the piece.
    pub index: usize,
    /// Physical address of its first frame.
    pub first_frame: u64,
    /// Frames in it.
    pub frames: u64,
    /// Device address of its first byte moved (frame + page offset for the first run, `| pci_host_base`).
    pub start: u64,
    /// Bytes moved from (or to) it.
    pub bytes: u64,
    /// Ring slots of its data descriptors.
    pub descriptors: Vec<usize>,
}

/// One descriptor pair read back.
#[derive(Debug, Clone, Serialize)]
pub struct ZcDescriptor {
    /// Ring slot.
    pub index: usize,
    /// `data` or `marker`.
    pub kind: &'static str,
    /// Bytes.
    pub len: u32,
    /// Source address; `src_mem`: `host` or `hbm`.
    pub src: u64,
    /// `host` or `hbm`.
    pub src_mem: &'static str,
    /// Destination address.
    pub dst: u64,
    /// `host` or `hbm`.
    pub dst_mem: &'static str,
    /// `none`, `write_barrier` (TX meta_ctrl), `sow` (RX len_ctrl) or `dmb`.
    pub barrier: &'static str,
    /// Set TX flags.
    pub tx_flags: Vec<&'static str>,
    /// Set RX flags.
    pub rx_flags: Vec<&'static str>,
    /// The run a data descriptor moves (absent for the marker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<usize>,
    /// TX raw words.
    pub tx_words: [u64; 3],
    /// RX raw words.
    pub rx_words: [u64; 3],
}

/// The piece on one arch.
#[derive(Debug, Clone, Serialize)]
pub struct ArchPiece {
    /// Instance preset.
    pub instance: String,
    /// `v2` or `v3`.
    pub arch: String,
    /// `zerocopy_trn1_override` was turned on.
    #[serde(rename = "override")]
    pub override_on: bool,
    /// H2T engine.
    pub engine: u32,
    /// H2T queue.
    pub queue: u32,
    /// User address of the piece's first byte.
    pub user_va: u64,
    /// Device address of its first byte.
    pub device_pa: u64,
    /// Frames of the pages it pinned, in page order.
    pub frames: Vec<u64>,
    /// Its runs.
    pub runs: Vec<Run>,
    /// The descriptor pairs it staged, data then the marker.
    pub descriptors: Vec<ZcDescriptor>,
    /// The barrier of the marker.
    pub marker_barrier: &'static str,
    /// The read-back is exactly `plan_descriptors`' plan (always true in a written report).
    pub plan_matches: bool,
    /// Both windows and their guards checked byte for byte.
    pub verified: bool,
    /// Ring counters over the submit.
    pub counters: Counters,
    /// The leak check after it.
    pub leak_check: Leaks,
}

/// The `--json` document of `inspect --zerocopy`.
#[derive(Debug, Serialize)]
pub struct InspectZcReport {
    /// `"inspect"`.
    pub command: &'static str,
    /// `"zerocopy"`.
    pub mode: &'static str,
    /// `h2d` or `d2h`.
    pub dir: &'static str,
    /// NeuronCore.
    pub nc: u32,
    /// Bytes in the piece.
    pub size: u64,
    /// Page offset of its first byte.
    pub offset: u64,
    /// Layout of the user buffer.
    pub layout: String,
    /// One entry per arch shown.
    pub archs: Vec<ArchPiece>,
}

/// The barrier a read-back pair carries: SOW on the RX side, else the TX side's.
fn barrier_of(tx: &Desc, rx: &Desc) -> Barrier {
    if rx.rx().len_ctrl.sow() {
        Barrier::Sow
    } else {
        tx.tx().barrier()
    }
}

/// The runs of `frames` for a piece of `size` bytes from page offset `offset`.
fn runs_of(frames: &[u64], offset: u64, size: u64, host_base: u64) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let (mut left, mut at) = (size, offset);
    let mut i = 0;
    while i < frames.len() && left > 0 {
        let first = frames[i];
        let mut n = 1;
        while i + n < frames.len() && frames[i + n] == frames[i + n - 1] + PAGE_SIZE {
            n += 1;
        }
        let bytes = (n as u64 * PAGE_SIZE - at).min(left);
        runs.push(Run {
            index: runs.len(),
            first_frame: first,
            frames: n as u64,
            start: (first + at) | host_base,
            bytes,
            descriptors: Vec::new(),
        });
        (left, at, i) = (left - bytes, 0, i + n);
    }
    runs
}

/// One submit on `instance` and what its ring holds afterwards.
fn piece_on(instance: Instance, opts: BedOpts, a: &InspectArgs, dir: UserDir, out: Out) -> CliResult<ArchPiece> {
    let tb = testbed(BedOpts { instance, ..opts }, ExecPolicy::Inline)?;
    let (dev, emu) = tb.device(0);
    let arch = dev.dhal().arch();
    let override_on = enable_override(dev, out);
    let (engine, queue) = dev.h2t_queue(a.nc).op_ctx(|| "choosing the H2T ring")?;
    let proc = Process::enter(tb.emu.host(), PID);
    let w = UserWindow::new(dev, emu, &proc.mm, dir, a.size_bytes(), a.offset % PAGE_SIZE, a.layout, SEED, &[], a.nc)?;
    let what = format!("{} zero-copy piece of {} bytes on {}", dir.name(), a.size_bytes(), instance.name);
    let op = w.op(0..a.size_bytes());
    dev.zerocopy_submit(a.nc, &[op], &w.mc, 0, NEURON_DMA_H2T_DEFAULT_QID, dir.to_device(), 0, 0)
        .op_ctx(|| what.clone())?;
    w.verify(emu, &what)?;
    let counters = Counters::from(&dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?);
    let ring = dev.ring_descriptors(a.nc).op_ctx(|| "reading the H2T ring")?;
    let offset = w.va % PAGE_SIZE;
    let pages = (offset + a.size_bytes()).div_ceil(PAGE_SIZE) as usize;
    let frames: Vec<u64> = proc.mm.frames_of(w.va - offset, pages).into_iter().flatten().collect();
    let device_pa = dev.mc_to_pa(&w.mc) + GUARD;
    let plan = plan_descriptors(arch, &frames, offset, a.size_bytes(), device_pa, dir.to_device(), true);
    let host_base = arch.pci_host_base();
    let mut runs = runs_of(&frames, offset, a.size_bytes(), host_base);
    let mut descriptors = Vec::with_capacity(ring.len());
    let mut mismatch = Vec::new();
    if ring.len() != plan.data.len() + 1 || plan.runs as usize != runs.len() {
        mismatch.push(format!(
            "{} pairs read back, {} data + 1 marker planned; {} runs planned, {} found",
            ring.len(),
            plan.data.len(),
            plan.runs,
            runs.len()
        ));
    }
    for (i, (tx, rx)) in ring.iter().enumerate() {
        let (len, src, dst, barrier) = (tx.tx().len_ctrl.len_bytes(), tx.tx().src, rx.rx().dst, barrier_of(tx, rx));
        let marker = i + 1 == ring.len();
        let run = if marker {
            if !is_marker(tx, rx) || barrier != plan.marker_barrier {
                mismatch.push(format!("slot {i}: not the planned marker (barrier {barrier:?})"));
            }
            None
        } else {
            match plan.data.get(i) {
                Some(p) if (p.src, p.dst, p.len, p.barrier) == (src, dst, len, barrier) => {}
                p => mismatch
                    .push(format!("slot {i}: read back ({src:#x}, {dst:#x}, {len}, {barrier:?}), planned {p:?}")),
            }
            let host = if dir.to_device() { src } else { dst };
            let r = runs.iter().position(|r| (r.start..r.start + r.bytes).contains(&host));
            if let Some(r) = r {
                runs[r].descriptors.push(i);
            }
            r
        };
        descriptors.push(ZcDescriptor {
            index: i,
            kind: if marker { "marker" } else { "data" },
            len,
            src,
            src_mem: mem(arch, src),
            dst,
            dst_mem: mem(arch, dst),
            barrier: barrier_name(barrier),
            tx_flags: tx_flags(tx),
            rx_flags: rx_flags(rx),
            run,
            tx_words: words(tx),
            rx_words: words(rx),
        });
    }
    if !mismatch.is_empty() {
        return Err(CliError::Verify(format!(
            "{what}: the ring is not plan_descriptors' plan: {}",
            mismatch.join("; ")
        )));
    }
    let leak_check = Leaks::check(&tb.system, dev, tb.emu.host())?;
    leak_check.ensure_clean(&what)?;
    Ok(ArchPiece {
        instance: instance.name.into(),
        arch: arch.to_string(),
        override_on,
        engine,
        queue,
        user_va: w.va,
        device_pa,
        frames,
        runs,
        descriptors,
        marker_barrier: barrier_name(plan.marker_barrier),
        plan_matches: true,
        verified: true,
        counters,
        leak_check,
    })
}

/// What the barrier rule says for `arch` and the direction.
fn barrier_rule(arch: &str, to_device: bool) -> &'static str {
    match (to_device, arch) {
        (false, _) => "no barrier: a read's completion write follows its data in order",
        (true, "v2") => "WRITE_BARRIER on the last data descriptor of a write's last piece",
        (true, _) => "SOW on the marker of a write's last piece",
    }
}

/// Runs `ndma inspect --zerocopy`; `instance_given`: `--instance` was on the command line (show only it).
///
/// # Errors
///
/// Bad arguments, set-up, submit and verification failures (bytes, the plan, leaks), and failure to write the
/// JSON.
pub fn run(opts: BedOpts, a: &InspectArgs, instance_given: bool) -> CliResult {
    let dir = match a.dir {
        Dir::H2d => UserDir::H2d,
        Dir::D2h => UserDir::D2h,
        d => {
            return Err(CliError::Usage(format!(
                "--zerocopy moves a user buffer to or from the device: --dir h2d or d2h, not {}",
                d.name()
            )))
        }
    };
    let page_offset = a.offset % PAGE_SIZE;
    if a.size_bytes() == 0 || a.size_bytes() > PIECE_BYTES - page_offset {
        return Err(CliError::Usage(format!(
            "--zerocopy shows one piece: --size must be 1 ..= {} bytes at page offset {page_offset} (a piece pins at \
             most 64 pages)",
            PIECE_BYTES - page_offset
        )));
    }
    let instances =
        if instance_given { vec![opts.instance] } else { vec![Instance::TRN1_2XLARGE, Instance::TRN2_48XLARGE] };
    let out = a.json.out();
    out.say(format_args!(
        "zero-copy piece: {} of {} bytes ({}) at page offset {page_offset} of a {} user buffer, one synchronous \
         zerocopy_submit on an inline engine, NC {}",
        dir.long_name(),
        a.size_bytes(),
        fmt_size(a.size_bytes()),
        a.layout.name(),
        a.nc
    ));
    let archs: Vec<ArchPiece> =
        instances.into_iter().map(|i| piece_on(i, opts, a, dir, out)).collect::<CliResult<_>>()?;
    let report = InspectZcReport {
        command: "inspect",
        mode: "zerocopy",
        dir: dir.name(),
        nc: a.nc,
        size: a.size_bytes(),
        offset: page_offset,
        layout: a.layout.name(),
        archs,
    };
    print_report(out, &report, dir.to_device(), a.raw);
    out.wrote(a.json.write(&report)?);
    Ok(())
}

fn print_report(out: Out, r: &InspectZcReport, to_device: bool, raw: bool) {
    for p in &r.archs {
        out.say(format_args!(
            "{} ({}): H2T ring engine {} queue {}; user window {:#x} → {} frames; device window {:#x}; {} descriptor \
             pairs, {} doorbells",
            p.arch,
            p.instance,
            p.engine,
            p.queue,
            p.user_va,
            p.frames.len(),
            p.device_pa,
            p.counters.descriptors,
            p.counters.doorbells
        ));
    }
    out.say("runs (physically consecutive frames; the first starts at the page offset):");
    let mut t = Table::new(&["arch", ">run", ">frames", "first frame", "first byte", ">bytes", "descriptors"]);
    for p in &r.archs {
        for run in &p.runs {
            let descs: Vec<String> = run.descriptors.iter().map(ToString::to_string).collect();
            t.row(vec![
                p.arch.clone(),
                run.index.to_string(),
                run.frames.to_string(),
                format!("{:#x}", run.first_frame),
                format!("{:#x}", run.start),
                run.bytes.to_string(),
                descs.join(","),
            ]);
        }
    }
    out.text(&t.render());
    out.say("descriptors (data pairs ≤ 64 KiB, then the marker):");
    let mut cols = vec![">idx".to_string(), "kind".into(), ">len".into()];
    for p in &r.archs {
        cols.extend([format!("{} src", p.arch), format!("{} dst", p.arch), format!("{} barrier", p.arch)]);
        if raw {
            cols.extend([format!("{} TX words", p.arch), format!("{} RX words", p.arch)]);
        }
    }
    let col_refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    let mut t = Table::new(&col_refs);
    let rows = r.archs.iter().map(|p| p.descriptors.len()).max().unwrap_or(0);
    let raw_words = |w: &[u64; 3]| format!("{:#010x},{:#010x},{:#x}", w[0], w[1], w[2]);
    for i in 0..rows {
        let first = r.archs.iter().find_map(|p| p.descriptors.get(i));
        let mut cells = vec![
            i.to_string(),
            first.map_or(String::new(), |d| d.kind.to_string()),
            first.map_or(String::new(), |d| d.len.to_string()),
        ];
        for p in &r.archs {
            match p.descriptors.get(i) {
                Some(d) => {
                    cells.extend([format!("{:#x}", d.src), format!("{:#x}", d.dst), d.barrier.to_string()]);
                    if raw {
                        cells.extend([raw_words(&d.tx_words), raw_words(&d.rx_words)]);
                    }
                }
                None => cells.extend(std::iter::repeat_n(String::new(), if raw { 5 } else { 3 })),
            }
        }
        t.row(cells);
    }
    out.text(&t.render());
    for p in &r.archs {
        out.say(format_args!(
            "{} barrier: {} — marker barrier {}; {}",
            p.arch,
            barrier_rule(&p.arch, to_device),
            p.marker_barrier,
            p.leak_check.line()
        ));
    }
    out.say(
        "cross-check: every descriptor read back from the ring is exactly plan_descriptors' plan over the pinned \
         frames; both windows and their guards verified byte-exact",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_start_at_the_page_offset_and_end_with_the_piece() {
        let p = PAGE_SIZE;
        let frames = [10 * p, 11 * p, 12 * p, 40 * p, 7 * p, 8 * p];
        let runs = runs_of(&frames, 100, 6 * p - 100 - 50, 1 << 60);
        let got: Vec<(u64, u64, u64, u64)> = runs.iter().map(|r| (r.first_frame, r.frames, r.start, r.bytes)).collect();
        assert_eq!(
            got,
            [
                (10 * p, 3, (10 * p + 100) | 1 << 60, 3 * p - 100),
                (40 * p, 1, (40 * p) | 1 << 60, p),
                (7 * p, 2, (7 * p) | 1 << 60, 2 * p - 50)
            ]
        );
    }
}
