//! `ndma bench --plot FILE.svg`: throughput against copy size, one panel per direction, the op layer's
//! best and median samples beside single-thread memcpy of the same bytes (plotters' SVG backend).

use std::path::Path;

use plotters::prelude::*;

use super::size::fmt_size;
use crate::error::{CliError, CliResult};

/// One point of a curve: `(size, best GB/s, median GB/s, memcpy GB/s)`.
pub type Point = (u64, f64, f64, f64);

/// One direction's curve, by increasing size.
#[derive(Debug, Clone)]
pub struct Curve {
    /// Panel title, e.g. `h2d sync`.
    pub title: String,
    /// The points.
    pub points: Vec<Point>,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> CliError {
    CliError::Io(format!("cannot write the plot {}: {e}", path.display()))
}

/// Draws `curves` (up to four panels, two per row) into an SVG file at `path`.
///
/// # Errors
///
/// [`CliError::Io`] when the file cannot be written.
pub fn plot(path: &Path, title: &str, curves: &[Curve]) -> CliResult {
    let root = SVGBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| io_err(path, e))?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(|e| io_err(path, e))?;
    let rows = curves.len().div_ceil(2).max(1);
    let areas = root.split_evenly((rows, 2));
    for (area, c) in areas.iter().zip(curves) {
        panel(area, c).map_err(|e| io_err(path, e))?;
    }
    root.present().map_err(|e| io_err(path, e))
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A line of a panel: its label, colour and which figure of a point it draws.
type Series = (&'static str, RGBColor, fn(&Point) -> f64);

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn panel(area: &Area<'_>, c: &Curve) -> Result<(), String> {
    let lo = c.points.iter().map(|p| p.0).min().unwrap_or(1).max(1);
    let hi = c.points.iter().map(|p| p.0).max().unwrap_or(2).max(lo * 2);
    let top = c.points.iter().map(|p| p.1.max(p.2).max(p.3)).fold(1.0f64, f64::max) * 1.1;
    // Ticks at the sizes measured (4 KiB, 64 KiB, …), not at the log scale's powers of ten (9.77 KiB, …).
    let mut sizes: Vec<u64> = c.points.iter().map(|p| p.0).collect();
    sizes.dedup();
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d((lo..hi).log_scale().with_key_points(sizes), 0f64..top)
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc("bytes per copy")
        .y_desc("GB/s (10⁹ B/s)")
        .x_label_formatter(&|x| fmt_size(*x))
        .draw()
        .map_err(text)?;
    let series: [Series; 3] = [
        ("ndma, best sample", BLUE, |p| p.1),
        ("ndma, median sample", CYAN, |p| p.2),
        ("memcpy, best sample", RED, |p| p.3),
    ];
    for (label, color, pick) in series {
        let pts: Vec<(u64, f64)> = c.points.iter().map(|p| (p.0, pick(p))).collect();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(text)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(text)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .draw()
        .map_err(text)?;
    Ok(())
}
