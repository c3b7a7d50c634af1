//! The bench's picture: µs per step (median) against K, log-log, one line per row id, one panel
//! per shape (chain left, fan right), written as SVG.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

use super::{LEGEND, Row, Shape};

/// Width and height of the whole picture, pixels.
const SIZE: (u32, u32) = (1400, 620);

/// The line colour of row `id`: the raw driver rows black and greys (c is the floor), cudarc's
/// rows warm, `graph!`'s cool, the builder's pinks, the event-tracking rows dark.
fn colour(id: &str) -> RGBColor {
    match id {
        "a" => RGBColor(214, 39, 40),
        "b" => RGBColor(255, 127, 14),
        "c" => RGBColor(0, 0, 0),
        "c1" => RGBColor(90, 90, 90),
        "cA" => RGBColor(160, 160, 160),
        "d" => RGBColor(31, 119, 180),
        "e" => RGBColor(23, 190, 207),
        "f" => RGBColor(44, 160, 44),
        "g" => RGBColor(148, 103, 189),
        "do" => RGBColor(0, 110, 110),
        "dc" => RGBColor(140, 86, 75),
        "h" => RGBColor(227, 119, 194),
        "hf" => RGBColor(160, 30, 120),
        "a*" => RGBColor(110, 15, 15),
        "d*" => RGBColor(15, 35, 110),
        _ => RGBColor(128, 128, 0),
    }
}

/// Writes the plot of `rows` to `path` (SVG). An error if no row was measured.
pub fn write(path: &Path, rows: &[Row]) -> Result<(), Box<dyn Error>> {
    if rows.is_empty() {
        return Err("no steady row was measured, so there is nothing to plot".into());
    }
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(40);
    title.titled(
        "cudagraph bench: µs per step (median) against K kernels per step, log-log",
        ("sans-serif", 22),
    )?;
    // One K axis for both panels, with room around the points (a single K still gives an axis).
    let k0 = rows.iter().map(|r| r.k).min().unwrap_or(1) as f64 / 1.6;
    let k1 = rows.iter().map(|r| r.k).max().unwrap_or(1) as f64 * 1.6;
    let (left, right) = body.split_horizontally(SIZE.0 / 2);
    for (area, shape) in [(left, Shape::Chain), (right, Shape::Fan)] {
        panel(&area, shape, rows, k0..k1)?;
    }
    root.present()?;
    Ok(())
}

/// One shape's panel: a line (with points) per row id that has a value at some K of this shape.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    shape: Shape,
    rows: &[Row],
    ks: std::ops::Range<f64>,
) -> Result<(), Box<dyn Error>>
where
    DB::ErrorType: 'static,
{
    let mine: Vec<&Row> = rows.iter().filter(|r| r.shape == shape && r.t.median > 0.0).collect();
    let caption = match shape {
        Shape::Chain => "chain: K dependent kernels on one buffer",
        Shape::Fan => "fan: producer -> K-2 independent kernels -> consumer",
    };
    if mine.is_empty() {
        area.titled(&format!("{caption} (not measured)"), ("sans-serif", 18))?;
        return Ok(());
    }
    let (mut y0, mut y1) = (f64::MAX, 0f64);
    for r in &mine {
        y0 = y0.min(r.t.median);
        y1 = y1.max(r.t.median);
    }
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(ks.log_scale(), (y0 / 1.6..y1 * 1.6).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("K (kernels per step)")
        .y_desc("µs per step (median)")
        .x_label_formatter(&|k| format!("{k}"))
        .y_label_formatter(&|y| if *y >= 10.0 { format!("{y:.0}") } else { format!("{y:.1}") })
        .draw()?;
    for id in LEGEND.iter().chain(["do"].iter()) {
        let mut points: Vec<(f64, f64)> =
            mine.iter().filter(|r| r.id == *id).map(|r| (r.k as f64, r.t.median)).collect();
        if points.is_empty() {
            continue;
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let colour = colour(id);
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?
            .label(*id)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()?;
    Ok(())
}
