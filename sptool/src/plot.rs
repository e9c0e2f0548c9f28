//! `sptool plot roofline` and `sptool plot regions`: PNG or SVG charts drawn
//! with plotters, rendered in memory and written in one go.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{Error, Result};
use crate::export::write_output;
use crate::fmt;
use crate::font;
use crate::inspect::RegionRow;
use crate::roofline::Roofline;

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Png,
    Svg,
}

fn kind_of(out: &Path) -> Result<Kind> {
    match out.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("png") => Ok(Kind::Png),
        Some("svg") => Ok(Kind::Svg),
        _ => Err(Error::in_file(out, "the plot output must end in .png or .svg")),
    }
}

/// Something that can draw itself on any plotters backend.
trait Drawer {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String>;
}

fn de<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn encode_png(rgb: &[u8], (w, h): (u32, u32)) -> std::result::Result<Vec<u8>, String> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(de)?;
        writer.write_image_data(rgb).map_err(de)?;
    }
    Ok(out)
}

/// Check the output name and size before any work is done.
pub fn check_output(out: &Path, size: (u32, u32)) -> Result<()> {
    kind_of(out)?;
    if size.0 < 200 || size.1 < 150 || size.0 > 10000 || size.1 > 10000 {
        return Err(Error::new(format!(
            "plot size {}x{} is out of range (200x150 to 10000x10000 pixels)",
            size.0, size.1
        )));
    }
    Ok(())
}

fn render(out: &Path, size: (u32, u32), drawer: &impl Drawer) -> Result<()> {
    let fail = |e: String| Error::in_file(out, format!("cannot draw the plot: {e}"));
    let bytes = match kind_of(out)? {
        Kind::Png => {
            let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
                drawer.draw(&root).map_err(fail)?;
                root.present().map_err(|e| fail(de(e)))?;
            }
            encode_png(&rgb, size).map_err(fail)?
        }
        Kind::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                drawer.draw(&root).map_err(fail)?;
                root.present().map_err(|e| fail(de(e)))?;
            }
            svg.into_bytes()
        }
    };
    write_output(out, &bytes)
}

struct RooflinePlot<'a> {
    roof: &'a Roofline,
    title: String,
    text: bool,
}

fn ceiling_note(value: f64, unit: &str, empirical: bool) -> String {
    let kind = if empirical { " (empirical)" } else { "" };
    format!("{} {unit}{kind}", fmt::g(value, 4, false))
}

impl Drawer for RooflinePlot<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        let roof = self.roof;
        root.fill(&WHITE).map_err(de)?;
        let (xlo, xhi) = roof.x_range();
        let ymin = roof.points.iter().map(|p| p.gflops).chain([roof.roof(xlo)]).fold(f64::MAX, f64::min);
        let ymax = roof.points.iter().map(|p| p.gflops).chain([roof.peak_gflops]).fold(0.0, f64::max);
        let (ylo, yhi) = (ymin / 4.0, ymax * 4.0);

        let mut builder = ChartBuilder::on(root);
        builder.margin(24);
        if self.text {
            builder.caption(&self.title, ("sans-serif", 22)).x_label_area_size(56).y_label_area_size(80);
        }
        let mut chart =
            builder.build_cartesian_2d((xlo..xhi).log_scale(), (ylo..yhi).log_scale()).map_err(de)?;
        let mut mesh = chart.configure_mesh();
        if self.text {
            mesh.x_desc("arithmetic intensity [FLOP/byte]")
                .y_desc("performance [GFLOP/s]")
                .label_style(("sans-serif", 15))
                .axis_desc_style(("sans-serif", 17));
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(de)?;

        // The roof is two straight lines in log-log space: up to the ridge
        // point, then flat.
        let ridge = roof.ridge().clamp(xlo, xhi);
        let curve = [(xlo, roof.roof(xlo)), (ridge, roof.roof(ridge)), (xhi, roof.roof(xhi))];
        let roof_style = ShapeStyle::from(&BLACK).stroke_width(3);
        let series = chart.draw_series(LineSeries::new(curve, roof_style)).map_err(de)?;
        if self.text {
            series.label("roofline").legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], roof_style));
        }

        let mut regions: Vec<&str> = roof.points.iter().map(|p| p.region.as_str()).collect();
        regions.sort_unstable();
        regions.dedup();
        for (i, region) in regions.iter().enumerate() {
            let c = colour(i);
            let pts = roof.points.iter().filter(|p| p.region == *region);
            let series = chart
                .draw_series(pts.map(|p| Circle::new((p.intensity, p.gflops), 7, c.filled())))
                .map_err(de)?;
            if self.text {
                series.label(fmt::clip(region, 40)).legend(move |(x, y)| Circle::new((x + 10, y), 6, c.filled()));
            }
        }
        if self.text {
            let style = ("sans-serif", 13).into_font().color(&BLACK);
            chart
                .draw_series(roof.points.iter().map(|p| {
                    Text::new(format!("   r{}", p.rank), (p.intensity, p.gflops), style.clone())
                }))
                .map_err(de)?;
            let grey = RGBColor(80, 80, 80);
            let note = ("sans-serif", 15).into_font().color(&grey);
            let flat = ceiling_note(roof.peak_gflops, "GFLOP/s", roof.empirical_flops);
            let bw = ceiling_note(roof.peak_gbs, "GB/s", roof.empirical_bandwidth);
            let (rx, ry) = chart.backend_coord(&(xhi, roof.peak_gflops));
            let right = note.clone().pos(Pos::new(HPos::Right, VPos::Bottom));
            root.draw(&Text::new(format!("compute ceiling {flat}"), (rx - 6, ry - 6), right)).map_err(de)?;
            let x = xlo * (ridge / xlo).powf(0.1);
            let (bx, by) = chart.backend_coord(&(x, roof.roof(x)));
            root.draw(&Text::new(format!("bandwidth ceiling {bw}"), (bx + 10, by + 10), note.clone()))
                .map_err(de)?;
            if roof.empirical_flops || roof.empirical_bandwidth {
                let (w, h) = root.dim_in_pixel();
                let text = "empirical ceiling = highest observed value, not a machine limit \
                            (give --peak-flops/--peak-bandwidth)";
                let foot = ("sans-serif", 13).into_font().color(&grey).pos(Pos::new(HPos::Right, VPos::Bottom));
                root.draw(&Text::new(text, (w as i32 - 8, h as i32 - 6), foot)).map_err(de)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .draw()
                .map_err(de)?;
        }
        Ok(())
    }
}

pub struct RooflineOptions<'a> {
    pub out: &'a Path,
    pub size: (u32, u32),
    pub file_label: String,
}

pub fn roofline(roof: &Roofline, options: &RooflineOptions) -> Result<()> {
    let text = font::available();
    let title = format!("Roofline: {}", options.file_label);
    render(options.out, options.size, &RooflinePlot { roof, title, text })
}

struct RegionsPlot<'a> {
    title: String,
    rows: &'a [RegionRow],
    ranks: &'a [u32],
    text: bool,
    label_width: u32,
}

impl Drawer for RegionsPlot<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        root.fill(&WHITE).map_err(de)?;
        let n = self.rows.len();
        let nranks = self.ranks.len().max(1);
        let xmax = self
            .rows
            .iter()
            .flat_map(|r| r.per_rank.iter().map(|(_, s, _)| s.total_s()))
            .fold(0.0, f64::max);
        let xmax = if xmax > 0.0 { xmax * 1.05 } else { 1.0 };

        let mut builder = ChartBuilder::on(root);
        builder.margin(24);
        if self.text {
            builder.caption(&self.title, ("sans-serif", 22)).x_label_area_size(50).y_label_area_size(self.label_width);
        }
        let mut chart = builder.build_cartesian_2d(0.0..xmax, 0.0..n as f64).map_err(de)?;
        let mut mesh = chart.configure_mesh();
        mesh.disable_y_mesh().y_labels(0);
        if self.text {
            mesh.x_desc("total time [s]").label_style(("sans-serif", 15)).axis_desc_style(("sans-serif", 17));
        } else {
            mesh.x_labels(0);
        }
        mesh.draw().map_err(de)?;

        // Costliest region on top; each region's band holds one bar per rank.
        let band = 0.8 / nranks as f64;
        for (k, rank) in self.ranks.iter().enumerate() {
            let c = colour(k);
            let bars = self.rows.iter().enumerate().filter_map(|(i, row)| {
                let (_, s, _) = row.per_rank.iter().find(|(r, _, _)| r == rank)?;
                let top = (n - i) as f64 - 0.1 - k as f64 * band;
                Some(Rectangle::new([(0.0, top - band), (s.total_s(), top)], c.filled()))
            });
            let series = chart.draw_series(bars).map_err(de)?;
            if self.text && nranks <= 24 {
                series.label(format!("rank {rank}")).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
            }
        }
        if self.text {
            let style = ("sans-serif", 14).into_font().color(&BLACK).pos(Pos::new(HPos::Right, VPos::Center));
            let chars = (self.label_width as usize / 8).max(8);
            for (i, row) in self.rows.iter().enumerate() {
                let (px, py) = chart.backend_coord(&(0.0, (n - i) as f64 - 0.5));
                root.draw(&Text::new(fmt::clip(&row.name, chars), (px - 8, py), style.clone())).map_err(de)?;
            }
            if nranks <= 24 {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::LowerRight)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 14))
                    .draw()
                    .map_err(de)?;
            }
        }
        Ok(())
    }
}

pub struct RegionsOptions<'a> {
    pub out: &'a Path,
    pub size: (u32, u32),
    pub file_label: String,
}

/// Total time per region and rank, `rows` costliest first.
pub fn regions(rows: &[RegionRow], ranks: &[u32], options: &RegionsOptions) -> Result<()> {
    let text = font::available();
    let longest = rows.iter().map(|r| r.name.chars().count()).max().unwrap_or(8) as u32;
    let label_width = (longest * 8 + 24).clamp(80, options.size.0 * 2 / 5);
    let title = format!("Total time per region and rank: {}", options.file_label);
    render(options.out, options.size, &RegionsPlot { title, rows, ranks, text, label_width })
}
