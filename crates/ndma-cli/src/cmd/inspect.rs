//! `ndma inspect`: run one real `memcpy_mc` on an inline engine and print the descriptor pairs the op layer
//! wrote into the NC's H2T ring — data pairs (≤ 64 KiB each, the last of a batch with the DHAL's write
//! barrier) and the 4-byte marker self-copy that ends every batch.

use ndma::DMA_COMPLETION_MARKER;
use ndma_emu::ExecPolicy;
use udma::{Arch, Desc};

use crate::cli::InspectArgs;
use crate::error::{CliResult, OpContext};
use crate::util::bed::{testbed, BedOpts, Window, GUARD};
use crate::util::size::fmt_size;
use crate::util::table::Table;

/// Is this pair the completion marker: a 4-byte copy from a word to the word after it?
pub fn is_marker(tx: &Desc, rx: &Desc) -> bool {
    tx.len_ctrl().len_bytes() == 4 && rx.buf_ptr() == tx.buf_ptr().wrapping_add(4)
}

fn tx_flags(d: &Desc) -> String {
    let (l, m) = (d.len_ctrl(), d.tx().meta_ctrl);
    let flags = [
        (l.first(), "FIRST"),
        (l.last(), "LAST"),
        (l.dmb(), "DMB"),
        (m.write_barrier(), "WRITE_BARRIER"),
        (l.int_en(), "INT"),
    ];
    join(&flags)
}

fn rx_flags(d: &Desc) -> String {
    let l = d.len_ctrl();
    join(&[(l.sow(), "SOW"), (l.int_en(), "INT")])
}

fn join(flags: &[(bool, &str)]) -> String {
    let set: Vec<&str> = flags.iter().filter(|f| f.0).map(|f| f.1).collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join("|")
    }
}

fn addr(arch: Arch, a: u64) -> String {
    format!("{a:#x} {}", if arch.is_host_addr(a) { "host" } else { "hbm" })
}

/// Runs `ndma inspect`.
///
/// # Errors
///
/// Set-up, copy and verification failures.
pub fn run(opts: BedOpts, a: &InspectArgs) -> CliResult {
    let tb = testbed(opts, ExecPolicy::Inline)?;
    let (dev, emu) = tb.device(0);
    let arch = dev.dhal().arch();
    let (eng, qid) = dev.h2t_queue(a.nc).op_ctx(|| "choosing the H2T ring")?;
    let w = Window::new(dev, emu, a.dir, a.size, a.nc, 0x1d5)?;
    w.copy(0, a.size).op_ctx(|| format!("{} copy of {} bytes", a.dir.name(), a.size))?;
    w.verify("inspect", true)?;
    let stats = dev.ring_stats(a.nc).op_ctx(|| "reading ring counters")?;
    let pairs = dev.ring_descriptors(a.nc).op_ctx(|| "reading the H2T ring")?;

    println!(
        "{} copy of {} bytes ({}) on {} ({arch}), NC {}: H2T ring = engine {eng} queue {qid}, inline engine",
        a.dir.long_name(),
        a.size,
        fmt_size(a.size),
        opts.instance.name,
        a.nc
    );
    println!(
        "memcpy_mc(src {:#x} + {GUARD:#x}, dst {:#x} + {GUARD:#x}, {} bytes): {} batch(es), {} descriptor pairs, {} \
         doorbells, {} polls — destination verified byte-exact",
        dev.mc_to_pa(&w.src),
        dev.mc_to_pa(&w.dst),
        a.size,
        stats.batches,
        stats.descriptors,
        stats.doorbells,
        stats.polls
    );
    if pairs.is_empty() {
        println!("no descriptors staged (a 0-byte copy moves nothing)");
        return Ok(());
    }
    println!("ring slots [0, {}):", pairs.len());
    let mut cols = vec![">idx", ">phase", "TX flags", "RX flags", ">len", "src", "dst", "pair"];
    if a.raw {
        cols.extend(["TX words (len_ctrl, meta_ctrl, src)", "RX words (len_ctrl, buf2_ptr_lo, dst)"]);
    }
    let mut t = Table::new(&cols);
    let (mut data, mut markers, mut barriers_ok) = (0u64, 0u64, true);
    for (i, (tx, rx)) in pairs.iter().enumerate() {
        let marker = is_marker(tx, rx);
        let kind = if marker {
            markers += 1;
            format!("marker: completion+0 → +4 (writes {DMA_COMPLETION_MARKER:#x})")
        } else {
            data += 1;
            let next_is_marker = pairs.get(i + 1).is_some_and(|(t, r)| is_marker(t, r));
            if next_is_marker {
                barriers_ok &= tx.tx().meta_ctrl.write_barrier();
                "data, last of batch".into()
            } else {
                "data".into()
            }
        };
        let phase = match (tx.len_ctrl().ring_id(), rx.len_ctrl().ring_id()) {
            (t, r) if t == r => t.to_string(),
            (t, r) => format!("{t}/{r}"),
        };
        let mut cells = vec![
            i.to_string(),
            phase,
            tx_flags(tx),
            rx_flags(rx),
            tx.len_ctrl().len_bytes().to_string(),
            addr(arch, tx.buf_ptr()),
            addr(arch, rx.buf_ptr()),
            kind,
        ];
        if a.raw {
            cells.extend([format!("{tx:?}"), format!("{rx:?}")]);
        }
        t.row(cells);
    }
    print!("{}", t.render());
    println!(
        "{data} data pairs + {markers} marker pair(s); last data descriptor of every batch carries WRITE_BARRIER: {}",
        if barriers_ok { "yes" } else { "NO" }
    );
    Ok(())
}
