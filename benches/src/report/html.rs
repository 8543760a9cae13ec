//! The report as a page for people: `index.html` with the summary, the targets and three kinds
//! of chart (SVG, drawn with plotters, written beside the page and inlined in it):
//!
//! - a roofline per SIMD ISA: on the left the compute-bound rows (attention, GAU, linear, the
//!   encoder) as GFLOP/s, a colour per kernel, against arithmetic intensity under the same-run FMA peak and copy bandwidths; on the
//!   right the memory-bound rows (which have no FLOP count) as GB/s against their working set,
//!   under the same-run copy bandwidth at three sizes;
//! - the speed-ups of each kernel's headline row over plain Rust and over the unfused
//!   composition;
//! - every kernel row's worst error as a fraction of its documented bound.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::output::{self, Row};
use super::record::Run;
use super::summary;
use super::targets::{self, Goal, Outcome};
use super::FAMILIES;

/// A chart's error, as text.
fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The default folder of the page: `report/` in the target directory of the running binary
/// (`target/release/report` → `target/report/`).
fn default_folder() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(err)?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the binary has no target directory above it")?;
    Ok(target.join("report"))
}

/// Writes the page and its charts into `folder` (or the default one); returns the page's path.
pub fn write(folder: Option<PathBuf>, run: &Run, rows: &[Row], outcomes: &[Outcome]) -> Result<PathBuf, String> {
    let folder = match folder {
        Some(f) => f,
        None => default_folder()?,
    };
    std::fs::create_dir_all(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    let mut charts: Vec<(String, String, String)> = Vec::new();
    for isa in targets::simd_isas(rows) {
        charts.push((
            format!("roofline-{isa}.svg"),
            format!("Roofline of {isa}"),
            roofline(&isa, rows).map_err(|e| format!("the {isa} roofline: {e}"))?,
        ));
    }
    charts.push((
        "speedup.svg".to_string(),
        "Speed-ups".to_string(),
        speedups(rows).map_err(|e| format!("the speed-up chart: {e}"))?,
    ));
    charts.push((
        "errors.svg".to_string(),
        "Errors".to_string(),
        errors(rows).map_err(|e| format!("the error chart: {e}"))?,
    ));
    for (file, _, svg) in &charts {
        std::fs::write(folder.join(file), svg).map_err(|e| format!("{file}: {e}"))?;
    }
    let path = folder.join("index.html");
    std::fs::write(&path, page(run, rows, outcomes, &charts)).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// `s` with `&`, `<`, `>` and `"` escaped for HTML.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page: a heading, the summary, the charts, the targets, the rows.
fn page(run: &Run, rows: &[Row], outcomes: &[Outcome], charts: &[(String, String, String)]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kernels report</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 24px; color: #222; max-width: 1200px; }}\n\
         table {{ border-collapse: collapse; font-size: 13px; }}\n\
         th, td {{ padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }}\n\
         th {{ background: #f3f3f3; }} td.l, th.l {{ text-align: left; }}\n\
         .ok {{ color: #17803d; }} .no {{ color: #c0282d; font-weight: bold; }}\n\
         figure {{ margin: 16px 0; }} figcaption {{ font-size: 13px; color: #555; max-width: 1100px; }}\n\
         pre {{ font-size: 11px; }} li {{ font-size: 13px; margin: 2px 0; }}\n\
         </style></head><body>\n<h1>kernels report</h1>\n<p>{}</p>\n",
        escape(&run.headline())
    );

    // The summary, as a table.
    h.push_str(
        "<h2>Summary</h2>\n<p>Each kernel's headline row on each SIMD ISA: its throughput, its fraction of the \
         same-run roofline, its speed-up over plain Rust and over the unfused composition; the worst error of all \
         its rows as a fraction of the documented bound (1 = at the bound; rows on inputs hard on purpose \
         apart); and each target met (✓) or not (✗, with the worst figure).</p>\n<table>\n",
    );
    let headlines = FAMILIES.iter().flat_map(|f| f.headlines.iter());
    h.push_str("<tr>");
    for (title, _, right) in summary::COLUMNS {
        let _ = write!(
            h,
            "<th{}>{}</th>",
            if right { "" } else { " class=\"l\"" },
            escape(title)
        );
    }
    h.push_str("</tr>\n");
    for line in summary::cells(headlines, rows, outcomes) {
        h.push_str("<tr>");
        for (cell, (_, _, right)) in line.iter().zip(summary::COLUMNS) {
            let left = !right;
            let mut text = escape(cell)
                .replace('✓', "<span class=\"ok\">✓</span>")
                .replace('✗', "<span class=\"no\">✗</span>");
            if cell.ends_with('!') {
                text = format!("<span class=\"no\">{text}</span>");
            }
            let _ = write!(h, "<td{}>{text}</td>", if left { " class=\"l\"" } else { "" });
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");

    // The charts, inlined.
    let captions = |file: &str| -> &str {
        if file.starts_with("roofline-") {
            "Left: compute-bound kernels, GFLOP/s against FLOP per byte moved, a point per row, under the FMA \
             peak and the copy bandwidths measured in this run (log-log). Right: memory-bound kernels (no FLOP count), GB/s against \
             their working set (input and output bytes), under the copy bandwidth measured in this run at three \
             sizes (hollow: f16/bf16 rows). A point on a ceiling runs at the machine's limit."
        } else if file == "speedup.svg" {
            "Speed-up of each kernel's headline row over plain Rust (what a user writes without this crate) and \
             over the unfused composition (attention, GAU: the gemm crate around this crate's pieces; Add & \
             LayerNorm: a plain add loop, then layer_norm), medians of per-round ratios in this run (log scale)."
        } else {
            "The worst error of every kernel row against the f64 oracle, as a fraction of the kernel's \
             documented bound (log scale; exact results on the left edge). Right of the red line would break the \
             bound. Triangles: inputs hard on purpose. f16/bf16: the one rounding to the type is free."
        }
    };
    h.push_str("<h2>Charts</h2>\n");
    for (file, title, svg) in charts {
        let svg = svg.split_once("<svg").map_or(svg.as_str(), |(_, rest)| rest);
        let _ = write!(
            h,
            "<figure><h3>{}</h3>\n<svg{svg}\n<figcaption>{} (<a href=\"{file}\">{file}</a>)</figcaption></figure>\n",
            escape(title),
            escape(captions(file)),
        );
    }

    // The targets.
    h.push_str("<h2>Targets</h2>\n<ul>\n");
    let groups = targets::groups(outcomes);
    for g in groups.iter().filter(|g| g[0].target.goal != Goal::None) {
        let Some(line) = targets::line(g) else { continue };
        let class = match g.iter().filter_map(|o| o.met()).reduce(|a, b| a && b) {
            Some(true) => "ok",
            Some(false) => "no",
            None => "",
        };
        let _ = writeln!(h, "<li class=\"{class}\">{}</li>", escape(&line));
    }
    let missing = targets::unmeasured(outcomes);
    if !missing.is_empty() {
        let _ = writeln!(h, "<li>not measured in this run: {}</li>", escape(&missing.join("; ")));
    }
    h.push_str("</ul>\n<h2>Other figures</h2>\n<ul>\n");
    for g in groups.iter().filter(|g| g[0].target.goal == Goal::None) {
        if let Some(line) = targets::line(g) {
            let _ = writeln!(h, "<li>{}</li>", escape(&line));
        }
    }
    h.push_str("</ul>\n<details><summary>Every row</summary>\n<pre>");
    h.push_str(&escape(&output::table_header()));
    h.push('\n');
    for r in rows {
        h.push_str(&escape(&output::table_line(r)));
        h.push('\n');
    }
    h.push_str("</pre></details>\n</body></html>\n");
    h
}

/// The colour of the `i`-th series: twenty apart (a dark and a light tone of ten hues).
fn colour(i: usize) -> RGBColor {
    const COLOURS: [RGBColor; 20] = [
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
        RGBColor(174, 199, 232),
        RGBColor(255, 187, 120),
        RGBColor(152, 223, 138),
        RGBColor(255, 152, 150),
        RGBColor(197, 176, 213),
        RGBColor(196, 156, 148),
        RGBColor(247, 182, 210),
        RGBColor(199, 199, 199),
        RGBColor(219, 219, 141),
        RGBColor(158, 218, 229),
    ];
    COLOURS[i % COLOURS.len()]
}

/// The grey of the `i`-th copy ceiling, darker for larger copies.
fn grey(i: usize) -> RGBColor {
    let level = 190u8.saturating_sub(60 * i as u8);
    RGBColor(level, level, level)
}

/// The kernels among `rows`, in order.
fn kernels_of<'a>(rows: impl Iterator<Item = &'a Row>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows {
        if !out.contains(&r.kernel) {
            out.push(r.kernel.clone());
        }
    }
    out
}

/// The same-run limits of `isa` from the `roofline` rows: the FMA peak in GFLOP/s, and the
/// copy bandwidths (bytes, GB/s, label), fastest stores at each size.
fn limits(isa: &str, rows: &[Row]) -> (Option<f64>, Vec<(f64, f64, String)>) {
    let machine = || rows.iter().filter(move |r| r.kernel == "roofline" && r.isa == isa);
    let peak = machine().find(|r| r.shape == "fma peak").and_then(Row::gflop_per_s);
    let mut copies: Vec<(f64, f64, String)> = Vec::new();
    for r in machine().filter(|r| r.shape.starts_with("copy ")) {
        let (Some(bytes), Some(bw)) = (r.bytes, r.gb_per_s()) else {
            continue;
        };
        match copies.iter_mut().find(|c| c.0 == bytes) {
            Some(c) if c.1 < bw => {
                *c = (bytes, bw, r.shape.clone());
            }
            Some(_) => {}
            None => copies.push((bytes, bw, r.shape.clone())),
        }
    }
    (peak, copies)
}

/// The roofline chart of `isa`: compute-bound rows left, memory-bound rows right.
fn roofline(isa: &str, rows: &[Row]) -> Result<String, String> {
    let (peak, copies) = limits(isa, rows);
    let of_isa: Vec<&Row> = rows.iter().filter(|r| r.isa == isa && r.is_kernel()).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1150, 470)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (left, right) = root.split_horizontally(575);

        // Compute-bound: GFLOP/s against FLOP/byte, the rows held against this ISA's peak.
        let own_peak = format!("fma peak({})", crate::roofline::vectors(isa.parse().map_err(err)?));
        let compute: Vec<&Row> = of_isa
            .iter()
            .copied()
            .filter(|r| r.flops.is_some() && r.bytes.is_some() && r.roofline.as_deref() == Some(&own_peak))
            .collect();
        let top = peak.unwrap_or(100.0) * 2.0;
        let mut chart = ChartBuilder::on(&left)
            .caption(format!("{isa}: compute-bound rows"), ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(58)
            .build_cartesian_2d((0.1f64..1000f64).log_scale(), (top / 1000.0..top).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity (FLOP per byte)")
            .y_desc("GFLOP/s")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        if let Some(p) = peak {
            chart
                .draw_series(LineSeries::new([(0.1, p), (1000.0, p)], BLACK.stroke_width(2)))
                .map_err(err)?
                .label(format!("FMA peak {p:.0} GFLOP/s"))
                .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.stroke_width(2)));
        }
        for (i, (_, bw, label)) in copies.iter().enumerate() {
            let style = grey(i).stroke_width(1);
            let end = peak.map_or(1000.0, |p| (p / bw).min(1000.0));
            chart
                .draw_series(LineSeries::new([(0.1, 0.1 * bw), (end, end * bw)], style))
                .map_err(err)?
                .label(format!("{label}: {bw:.0} GB/s"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], style));
        }
        // One series per kernel, as on the right: a series per row (dozens of shapes) gave a
        // legend taller than the chart.
        for (i, kernel) in kernels_of(compute.iter().copied()).iter().enumerate() {
            let colour = colour(i);
            let points: Vec<(f64, f64, bool)> = compute
                .iter()
                .filter(|r| &r.kernel == kernel)
                .filter_map(|r| Some((r.flops? / r.bytes?, r.gflop_per_s()?, r.dtype != "f32")))
                .collect();
            chart
                .draw_series(points.iter().map(|&(x, y, half)| {
                    // Half-typed rows hollow.
                    let style = if half { colour.stroke_width(2) } else { colour.filled() };
                    Circle::new((x, y), 5, style)
                }))
                .map_err(err)?
                .label(kernel.clone())
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, colour.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;

        // Memory-bound: GB/s against the working set.
        let memory: Vec<&Row> = of_isa
            .iter()
            .copied()
            .filter(|r| r.flops.is_none() && r.bytes.is_some())
            .collect();
        let fastest = copies.iter().map(|c| c.1).fold(10.0, f64::max);
        let mut chart = ChartBuilder::on(&right)
            .caption(format!("{isa}: memory-bound rows"), ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(58)
            .build_cartesian_2d(10f64..30f64, (fastest / 300.0..fastest * 2.0).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("working set (bytes read + written, log scale)")
            .y_desc("GB/s")
            .x_labels(11)
            .x_label_formatter(&|e| bytes_label(e.exp2()))
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        let steps: Vec<(f64, f64)> = copies.iter().map(|c| (c.0.log2(), c.1)).collect();
        chart
            .draw_series(LineSeries::new(steps.clone(), BLACK.stroke_width(2)))
            .map_err(err)?
            .label("copy (this run)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.stroke_width(2)));
        chart
            .draw_series(steps.iter().map(|&p| Cross::new(p, 5, BLACK.stroke_width(2))))
            .map_err(err)?;
        for (i, kernel) in kernels_of(memory.iter().copied()).iter().enumerate() {
            let colour = colour(i);
            let points: Vec<(f64, f64, bool)> = memory
                .iter()
                .filter(|r| &r.kernel == kernel)
                .filter_map(|r| Some((r.bytes?.log2(), r.gb_per_s()?, r.dtype != "f32")))
                .collect();
            chart
                .draw_series(points.iter().map(|&(x, y, half)| {
                    // Half-typed rows hollow.
                    let style = if half { colour.stroke_width(2) } else { colour.filled() };
                    Circle::new((x, y), 4, style)
                }))
                .map_err(err)?
                .label(kernel.clone())
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, colour.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::LowerLeft)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Draws the legend of `chart` at `position`.
fn legend<'a, 'b: 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, CT>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(err)
}

/// `16KiB`, `32MiB`: a byte count for an axis.
fn bytes_label(b: f64) -> String {
    if b >= (1u64 << 30) as f64 {
        format!("{:.0}GiB", b / (1u64 << 30) as f64)
    } else if b >= (1 << 20) as f64 {
        format!("{:.0}MiB", b / (1 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.0}KiB", b / 1024.0)
    } else {
        format!("{b:.0}B")
    }
}

/// A chart of `labels` down the side (the first at the top: category `i` at `y = n − 1 − i`)
/// against a logarithmic `x` axis, its mesh drawn.
fn categories<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    x: std::ops::Range<f64>,
    labels: &[String],
    x_desc: &str,
) -> Result<ChartContext<'a, SVGBackend<'b>, Cartesian2d<LogCoord<f64>, RangedCoordf64>>, String> {
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(150)
        .build_cartesian_2d(x.log_scale(), -0.5f64..n as f64 - 0.5)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                labels.get(n - 1 - i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc(x_desc)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// Horizontal bars: per headline row and SIMD ISA, the speed-up over plain Rust and over the
/// unfused composition.
fn speedups(rows: &[Row]) -> Result<String, String> {
    let mut bars: Vec<(String, Option<f64>, Option<f64>)> = Vec::new();
    for h in FAMILIES.iter().flat_map(|f| f.headlines.iter()) {
        for isa in targets::simd_isas(rows) {
            if let Some(r) = rows
                .iter()
                .find(|r| r.kernel == h.kernel && r.isa == isa && r.dtype == "f32" && r.shape == h.shape)
            {
                bars.push((format!("{} {isa}", h.kernel), r.vs_plain, r.vs_unfused()));
            }
        }
    }
    let n = bars.len().max(1);
    let most = bars.iter().flat_map(|b| [b.1, b.2]).flatten().fold(2.0, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 70 + 26 * n as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let mut chart = categories(&root, 0.25..most * 1.5, &labels, "speed-up (×, log scale)")?;
        for (k, name) in ["over plain Rust", "over the unfused composition"]
            .into_iter()
            .enumerate()
        {
            let style = colour(k).filled();
            let top = if k == 0 { -0.38 } else { 0.02 };
            chart
                .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                    let v = if k == 0 { b.1 } else { b.2 }?;
                    let y = (n - 1 - i) as f64 + top;
                    Some(Rectangle::new([(0.25, y), (v, y + 0.36)], style))
                }))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], style));
        }
        chart
            .draw_series(LineSeries::new(
                [(1.0, -0.5), (1.0, n as f64 - 0.5)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The smallest fraction of the bound the error chart shows; exact results sit there.
const FLOOR: f64 = 1e-3;

/// Points: per kernel and type, each kernel row's fraction of the bound, coloured by ISA.
fn errors(rows: &[Row]) -> Result<String, String> {
    let checked: Vec<&Row> = rows
        .iter()
        .filter(|r| r.is_kernel() && r.bound_fraction.is_some())
        .collect();
    let mut groups: Vec<String> = Vec::new();
    for r in &checked {
        let g = format!("{} {}", r.kernel, r.dtype);
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    let mut isas: Vec<String> = Vec::new();
    for r in &checked {
        if !isas.contains(&r.isa) {
            isas.push(r.isa.clone());
        }
    }
    let n = groups.len().max(1);
    let most = checked
        .iter()
        .filter_map(|r| r.bound_fraction)
        .filter(|f| f.is_finite())
        .fold(2.0, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 80 + 24 * n as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = categories(
            &root,
            FLOOR / 2.0..most * 2.0,
            &groups,
            "worst error ÷ documented bound (log scale; ≤ 1 holds)",
        )?;
        chart
            .draw_series(LineSeries::new(
                [(1.0, -0.5), (1.0, n as f64 - 0.5)],
                RED.stroke_width(2),
            ))
            .map_err(err)?
            .label("the bound")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], RED.stroke_width(2)));
        for (k, isa) in isas.iter().enumerate() {
            let colour = colour(k);
            // Each ISA a little apart vertically, so that equal fractions stay visible.
            let offset = (k as f64 - (isas.len() as f64 - 1.0) / 2.0) * 0.18;
            let points: Vec<(f64, f64, bool)> = checked
                .iter()
                .filter(|r| &r.isa == isa)
                .filter_map(|r| {
                    let g = groups.iter().position(|g| *g == format!("{} {}", r.kernel, r.dtype))?;
                    let f = r.bound_fraction?;
                    let x = if f.is_finite() { f.max(FLOOR) } else { most * 1.9 };
                    Some((x, (n - 1 - g) as f64 + offset, r.input.is_some()))
                })
                .collect();
            chart
                .draw_series(points.iter().map(|&(x, y, hard)| {
                    if hard {
                        TriangleMarker::new((x, y), 6, colour.filled()).into_dyn()
                    } else {
                        Circle::new((x, y), 4, colour.filled()).into_dyn()
                    }
                }))
                .map_err(err)?
                .label(isa.clone())
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, colour.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::super::targets::{read, TARGETS};
    use super::super::Scope;
    use super::*;

    fn row(kernel: &str, isa: &str, shape: &str) -> Row {
        Row {
            kernel: kernel.into(),
            isa: isa.into(),
            dtype: "f32".into(),
            shape: shape.into(),
            ns_per_iter: 1e6,
            rounds: 3,
            ..Row::default()
        }
    }

    /// A run's worth of rows, without measuring: the machine's limits and a few kernels.
    fn rows() -> Vec<Row> {
        let mut rows = vec![Row {
            flops: Some(2.6e8),
            ..row("roofline", "avx512", "fma peak")
        }];
        for (label, bytes, ns) in [("copy 16KiB", 32768.0, 65.0), ("copy 64MiB", 1.3e8, 2.8e6)] {
            rows.push(Row {
                bytes: Some(bytes),
                ns_per_iter: ns,
                ..row("roofline", "avx512", label)
            });
        }
        rows.push(Row {
            bytes: Some(3.3e7),
            elements: Some(4.2e6),
            roofline: Some("copy(avx512, ordinary stores)".into()),
            roofline_ratio: Some(0.6),
            vs_plain: Some(14.0),
            bound_fraction: Some(0.5),
            within_bound: Some(true),
            ..row("softmax", "avx512", "4096x1024")
        });
        rows.push(Row {
            bytes: Some(4.2e6),
            flops: Some(5.4e8),
            roofline: Some("fma peak(avx512)".into()),
            roofline_ratio: Some(0.7),
            vs: vec![("gemm".into(), 0.98)],
            bound_fraction: Some(0.0),
            within_bound: Some(true),
            ..row("attention", "avx512", "plain L=512")
        });
        rows
    }

    #[test]
    fn the_page_and_its_charts_are_written() {
        let dir = std::env::temp_dir().join(format!("kernels-report-html-{}", std::process::id()));
        let rows = rows();
        let outcomes = read(TARGETS, &rows);
        let run = Run {
            cpu: "Test CPU".into(),
            family_model: None,
            l2: Some(1 << 20),
            isas: vec!["avx512".into(), "scalar".into()],
            scope: Scope::Quick,
            unix: 0,
            rounds: 3,
            batch_ms: 1.0,
            kernels: None,
            threads: vec![2],
        };
        let page = write(Some(dir.clone()), &run, &rows, &outcomes).expect("written");
        let html = std::fs::read_to_string(&page).expect("readable");
        for file in ["roofline-avx512.svg", "speedup.svg", "errors.svg"] {
            let svg = std::fs::read_to_string(dir.join(file)).expect(file);
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{file}");
            assert!(html.contains(&format!("href=\"{file}\"")), "{file} linked");
        }
        assert_eq!(html.matches("<svg").count(), 3, "the charts inlined");
        assert!(html.contains("<td class=\"l\">softmax</td>"), "the summary as a table");
        assert!(
            html.contains("4.20 Gelem/s") && html.contains("0.50"),
            "figures of the rows"
        );
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
