//! The verdict the report opens with: one line per kernel and SIMD ISA, from the kernel's
//! headline row (the shape a family names in its [`Headline`]s), the worst error over all of
//! the kernel's rows, and the targets read on them.
//!
//! A kernel without a roofline, plain Rust version or unfused composition shows "-" there.

use super::output::{self, Row};
use super::targets::{Goal, Outcome};

/// What a headline's throughput counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throughput {
    /// Output elements per second (memory-bound kernels).
    Elements,
    /// Floating-point operations per second (attention, GAU).
    Flops,
}

/// The row of a kernel that speaks for it in the summary: its f32 row of this shape.
#[derive(Debug, Clone, Copy)]
pub struct Headline {
    /// The kernel (the rows' `kernel`).
    pub kernel: &'static str,
    /// The shape as the rows print it.
    pub shape: &'static str,
    /// What its throughput counts.
    pub throughput: Throughput,
}

impl Headline {
    /// A headline counted in elements per second.
    pub const fn elements(kernel: &'static str, shape: &'static str) -> Headline {
        Headline {
            kernel,
            shape,
            throughput: Throughput::Elements,
        }
    }

    /// A headline counted in FLOP per second.
    pub const fn flops(kernel: &'static str, shape: &'static str) -> Headline {
        Headline {
            kernel,
            shape,
            throughput: Throughput::Flops,
        }
    }
}

/// The summary's columns: title, width, right-aligned.
pub const COLUMNS: [(&str, usize, bool); 9] = [
    ("kernel", 11, false),
    ("isa", 6, false),
    ("headline", 11, false),
    ("throughput", 13, true),
    ("of roof", 9, true),
    ("xplain", 6, true),
    ("xunfused", 8, true),
    ("err/bound", 15, false),
    ("targets", 0, false),
];

/// The short name of a roofline: `copy`, `exp` or `fma`.
fn roof_kind(name: &str) -> &str {
    match name.split('(').next().unwrap_or(name) {
        "fma peak" => "fma",
        other => other,
    }
}

/// The worst fraction of the bound among `rows`, if any has one.
fn worst_fraction<'a>(rows: impl Iterator<Item = &'a Row>) -> Option<f64> {
    rows.filter_map(|r| r.bound_fraction).reduce(f64::max)
}

/// The summary table: a header, then one line per headline and SIMD ISA with rows.
pub fn table<'h>(headlines: impl Iterator<Item = &'h Headline>, rows: &[Row], outcomes: &[Outcome]) -> Vec<String> {
    let mut lines = vec![output::header(&COLUMNS)];
    lines.extend(
        cells(headlines, rows, outcomes)
            .iter()
            .map(|c| output::cells(c, &COLUMNS)),
    );
    lines
}

/// The summary's cells (as [`COLUMNS`]): one line per headline and SIMD ISA with rows.
pub fn cells<'h>(
    headlines: impl Iterator<Item = &'h Headline>,
    rows: &[Row],
    outcomes: &[Outcome],
) -> Vec<Vec<String>> {
    let isas = super::targets::simd_isas(rows);
    let mut lines = Vec::new();
    for h in headlines {
        for isa in &isas {
            let of: Vec<&Row> = rows.iter().filter(|r| r.kernel == h.kernel && &r.isa == isa).collect();
            if of.is_empty() {
                continue;
            }
            let head = of
                .iter()
                .find(|r| r.dtype == "f32" && r.shape == h.shape && r.input.is_none());
            let f = |v: Option<f64>, digits: usize, suffix: &str| {
                v.map_or("-".to_string(), |v| format!("{v:.digits$}{suffix}"))
            };
            let throughput = head.map_or("-".to_string(), |r| match h.throughput {
                Throughput::Elements => f(r.gelem_per_s(), 2, " Gelem/s"),
                Throughput::Flops => f(r.gflop_per_s(), 1, " GFLOP/s"),
            });
            let roof = head
                .and_then(|r| {
                    Some(format!(
                        "{:.2} {}",
                        r.roofline_ratio?,
                        roof_kind(r.roofline.as_deref()?)
                    ))
                })
                .unwrap_or_else(|| "-".to_string());
            let mut err = output::fraction(worst_fraction(of.iter().copied().filter(|r| r.input.is_none())));
            if let Some(hard) = worst_fraction(of.iter().copied().filter(|r| r.input.is_some())) {
                err.push_str(&format!(" hard {}", output::fraction(Some(hard))));
            }
            let targets: Vec<String> = outcomes
                .iter()
                .filter(|o| o.kernel == h.kernel && &o.isa == isa && o.target.goal != Goal::None)
                .filter_map(|o| match o.met()? {
                    true => Some(format!("✓ {}", o.target.label)),
                    false => Some(format!("✗ {} {}", o.target.label, o.target.unit.format(o.worst()?))),
                })
                .collect();
            lines.push(vec![
                h.kernel.to_string(),
                isa.clone(),
                h.shape.to_string(),
                throughput,
                roof,
                f(head.and_then(|r| r.vs_plain), 1, "×"),
                f(head.and_then(|r| r.vs_unfused()), 2, "×"),
                err,
                if targets.is_empty() {
                    "-".to_string()
                } else {
                    targets.join("  ")
                },
            ]);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::super::targets::{read, TARGETS};
    use super::*;

    #[test]
    fn a_line_per_kernel_and_simd_isa() {
        let row = |isa: &str, shape: &str, ratio: f64, fraction: f64, hard: bool| Row {
            kernel: "layer_norm".into(),
            isa: isa.into(),
            dtype: "f32".into(),
            shape: shape.into(),
            bytes: Some((32 << 20) as f64),
            elements: Some((4 << 20) as f64),
            ns_per_iter: 2e6,
            roofline: Some("copy(avx512, streaming stores)".into()),
            roofline_ratio: Some(ratio),
            vs_plain: Some(4.0),
            bound_fraction: Some(fraction),
            input: hard.then(|| "mean 1e6".to_string()),
            ..Row::default()
        };
        let rows = vec![
            row("avx512", "4096x1024", 0.9, 0.25, false),
            row("avx512", "16x4096", 0.9, 0.5, true),
            row("scalar", "4096x1024", 0.1, 0.1, false),
        ];
        let outcomes = read(TARGETS, &rows);
        let lines = table([Headline::elements("layer_norm", "4096x1024")].iter(), &rows, &outcomes);
        assert_eq!(lines.len(), 2, "header (with its rule) and one line: {lines:?}");
        let line = &lines[1];
        for want in [
            "layer_norm",
            "avx512",
            "2.10 Gelem/s",
            "0.90 copy",
            "4.0×",
            "0.25 hard 0.50",
            "✓ copy",
        ] {
            assert!(line.contains(want), "{want} in {line}");
        }
        assert!(line.contains("   -  "), "no unfused composition: {line}");
    }
}
