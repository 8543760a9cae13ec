//! Rows of softmax, log-softmax and exp.
//!
//! Shapes: rows that stay in cache (working set 128 KiB: in L2, beyond L1), held against the
//! bare vectorized exp of the same ISA; and 16 MiB in + 16 MiB out, beyond L2, held against the
//! copy of the same bytes. Inputs are uniform in [−10, 10) (attention-like logits; the
//! exponents then span [−20, 0]); exp's inputs are uniform in [−80, 80) (normal results).

use kernels::half::{bf16, f16};
use kernels::{Element, Kernels, SoftmaxOptions};
use reference::MaskedRows;

use super::case::{Case, Rule};
use super::output::Row;
use super::{no_custom, Family, Plan};
use crate::{data, plain};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["softmax", "log_softmax", "exp"],
    cases,
    custom: no_custom,
    issue: 2,
    goals,
};

/// `(rows, n)`: in cache (128 KiB working set), then beyond L2 (32 MiB working set).
const ROWS: [(usize, usize); 5] = [(128, 128), (16, 1024), (4, 4096), (4096, 1024), (1024, 4096)];
const ROWS_QUICK: [(usize, usize); 3] = [(128, 128), (4, 4096), (4096, 1024)];
const LOG_ROWS_QUICK: [(usize, usize); 2] = [(16, 1024), (4096, 1024)];
/// exp lengths: in cache, beyond L2.
const EXP_LENS: [usize; 2] = [16 * 1024, 4 * 1024 * 1024];

fn cases(plan: &Plan) -> Vec<Case> {
    let mut cases = Vec::new();
    for &(rows, n) in plan.pick(&ROWS, &ROWS_QUICK) {
        cases.push(softmax(rows, n));
    }
    for &(rows, n) in plan.pick(&ROWS, &LOG_ROWS_QUICK) {
        cases.push(log_softmax(rows, n));
    }
    for &len in &EXP_LENS {
        cases.push(exp(len));
    }
    // Issue 7: the same kernels over f16 and bf16 tensors.
    for &(rows, n) in plan.pick(&HALF_ROWS, &HALF_ROWS_QUICK) {
        cases.push(softmax_as::<f16>(rows, n));
        cases.push(softmax_as::<bf16>(rows, n));
    }
    for &(rows, n) in plan.pick(&HALF_LOG_ROWS, &[]) {
        cases.push(log_softmax_as::<f16>(rows, n));
        cases.push(log_softmax_as::<bf16>(rows, n));
    }
    if !plan.quick {
        cases.push(exp_as::<f16>(EXP_LENS[1]));
        cases.push(exp_as::<bf16>(EXP_LENS[1]));
    }
    cases
}

/// Half-typed shapes: in cache, and the two beyond-L2 shapes of f32 (16 MiB in + 16 MiB out
/// there, 8 + 8 MiB here: still beyond L2).
const HALF_ROWS: [(usize, usize); 3] = [(16, 1024), (4096, 1024), (1024, 4096)];
const HALF_ROWS_QUICK: [(usize, usize); 1] = [(4096, 1024)];
const HALF_LOG_ROWS: [(usize, usize); 1] = [(4096, 1024)];

fn softmax_as<E: Element>(rows: usize, n: usize) -> Case {
    Case::elementwise_as::<E>(
        "softmax",
        format!("{rows}x{n}"),
        rows * n,
        move || logits(rows * n),
        move |k: Kernels, x: &[E], y: &mut [E]| k.softmax(x, y, n, &SoftmaxOptions::default()),
        move |x, y| plain::softmax(x, y, n),
        move |x| reference::softmax(x, n, 1.0, None, MaskedRows::Zero),
    )
}

fn exp_as<E: Element>(len: usize) -> Case {
    Case::elementwise_as::<E>(
        "exp",
        len.to_string(),
        len,
        // Within the f16 range of the results: e^±11 (bf16 would take ±88).
        move || data::uniform(len, -11.0, 11.0, 0x5eed_0002),
        |k: Kernels, x: &[E], y: &mut [E]| k.exp(x, y),
        plain::exp,
        reference::exp,
    )
}

fn log_softmax_as<E: Element>(rows: usize, n: usize) -> Case {
    Case::elementwise_as::<E>(
        "log_softmax",
        format!("{rows}x{n}"),
        rows * n,
        move || logits(rows * n),
        move |k: Kernels, x: &[E], y: &mut [E]| k.log_softmax(x, y, n, &SoftmaxOptions::default()),
        move |x, y| plain::log_softmax(x, y, n),
        move |x| reference::log_softmax(x, n, 1.0, None, MaskedRows::Zero),
    )
}

fn logits(len: usize) -> Vec<f32> {
    data::uniform(len, -10.0, 10.0, 0x5eed_0001)
}

fn softmax(rows: usize, n: usize) -> Case {
    // The f32 row in cache is held against the bare exp (the half rows against the copy).
    Case {
        rule: Rule::CopyBeyondL2ElseExp,
        ..softmax_as::<f32>(rows, n)
    }
}

fn log_softmax(rows: usize, n: usize) -> Case {
    // The f32 row in cache is held against the bare exp (the half rows against the copy).
    Case {
        rule: Rule::CopyBeyondL2ElseExp,
        ..log_softmax_as::<f32>(rows, n)
    }
}

fn exp(len: usize) -> Case {
    Case {
        // The bare exp is the in-cache roofline itself: hold it against the copy everywhere.
        rule: Rule::Copy,
        ..Case::elementwise(
            "exp",
            len.to_string(),
            len,
            move || data::uniform(len, -80.0, 80.0, 0x5eed_0002),
            |k: Kernels, x, y| k.exp(x, y),
            plain::exp,
            reference::exp,
        )
    }
}

/// The goals of issue 2 as read from the rows (shared/PERF.md explains them).
fn goals(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    let held_against = |r: &Row, prefix: &str| r.roofline.as_deref().is_some_and(|n| n.starts_with(prefix));
    for kernel in ["softmax", "log_softmax"] {
        let of = |isa: &'static str| {
            rows.iter()
                .filter(move |r| r.kernel == kernel && r.isa == isa && r.dtype == "f32")
        };
        for isa in ["avx2", "avx512", "neon"] {
            let list = |f: &dyn Fn(&Row) -> Option<String>| of(isa).filter_map(f).collect::<Vec<_>>().join(", ");
            let vs_exp = list(&|r| {
                held_against(r, "exp(")
                    .then_some(r.roofline_ratio?)
                    .map(|q| format!("{} {:.2}x", r.shape, 1.0 / q))
            });
            let vs_copy = list(&|r| {
                held_against(r, "copy(")
                    .then_some(r.roofline_ratio?)
                    .map(|q| format!("{} {:.2}", r.shape, q))
            });
            let vs_plain = list(&|r| r.vs_plain.map(|q| format!("{} {:.1}x", r.shape, q)));
            if !vs_exp.is_empty() {
                out.push(format!(
                    "{kernel} {isa}: time per element / bare exp (goal <= 1.5x): {vs_exp}"
                ));
            }
            if !vs_copy.is_empty() {
                out.push(format!(
                    "{kernel} {isa}: fraction of copy roofline (goal >= 0.85): {vs_copy}"
                ));
            }
            if !vs_plain.is_empty() {
                out.push(format!(
                    "{kernel} {isa}: speedup over plain Rust (goal >= 8x): {vs_plain}"
                ));
            }
        }
        let wide: Vec<String> = of("avx512")
            .filter(|r| held_against(r, "exp("))
            .filter_map(|r| {
                let q = r.vs_isa.iter().find(|(isa, _)| isa == "avx2")?.1;
                Some(format!("{} {q:.2}x", r.shape))
            })
            .collect();
        if !wide.is_empty() {
            out.push(format!(
                "{kernel}: avx512 / avx2 speed in cache (goal >= 1.6x): {}",
                wide.join(", ")
            ));
        }
    }
    out.extend(half_goals(rows, &["softmax", "log_softmax", "exp"]));
    out
}

/// The goals of issue 7 for memory-bound kernels, beyond L2: a half-typed row's elements/s
/// against the f32 row of the same kernel, ISA and shape (goal ≥ 1.6×), and its fraction of
/// the copy of its own bytes (goal ≥ 0.8).
pub fn half_goals(rows: &[Row], kernels: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for &kernel in kernels {
        for dtype in ["f16", "bf16"] {
            for isa in ["avx2", "avx512", "neon"] {
                let figures: Vec<String> = rows
                    .iter()
                    .filter(|r| r.kernel == kernel && r.isa == isa && r.dtype == dtype)
                    .filter(|r| r.roofline.as_deref().is_some_and(|n| n.starts_with("copy(")))
                    .filter(|r| r.bytes.unwrap_or(0.0) > (1 << 22) as f64)
                    .filter_map(|r| {
                        let f32_row = rows
                            .iter()
                            .find(|o| o.kernel == kernel && o.isa == isa && o.dtype == "f32" && o.shape == r.shape)?;
                        Some(format!(
                            "{} {:.2}x f32, {:.2} of copy",
                            r.shape,
                            f32_row.ns_per_iter / r.ns_per_iter,
                            r.roofline_ratio?
                        ))
                    })
                    .collect();
                if !figures.is_empty() {
                    out.push(format!(
                        "{kernel} {dtype} {isa} beyond L2 (issue 7 goals >= 1.6x f32, >= 0.8 of copy): {}",
                        figures.join(", ")
                    ));
                }
            }
        }
    }
    out
}
