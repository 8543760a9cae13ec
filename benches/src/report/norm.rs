//! Rows of the normalization family (issue 3), under these kernel names (the table's kernel
//! column is 11 wide):
//!
//! - `layer_norm`: [`Kernels::layer_norm`] with γ and β;
//! - `add_ln_h`: [`Kernels::add_layer_norm`] with the `h` output (Pre-LN residual stream);
//! - `add_ln`: [`Kernels::add_layer_norm`] without `h` (Post-LN);
//! - `add+ln`: the unfused "add, then layer_norm": a plain add loop writing `h`, then our
//!   [`Kernels::layer_norm`] of `h` (the baseline of the fusion goal);
//! - `rms_norm`: [`Kernels::rms_norm`] with a gain;
//! - `batch_norm`: [`Kernels::batch_norm`] (inference, running statistics, γ, β);
//! - `bn_train`: [`Kernels::batch_norm_train`] (batch statistics, running averages updated).
//!
//! Shapes: rows of d ∈ {64, 256, 1024, 4096} in cache (16 Ki elements: x + y = 128 KiB), and
//! beyond L2 (4096×1024, 1024×4096: 16 MiB per operand). Every row is held against the copy
//! roofline of its bytes, in cache too (a norm has no exp to compare with): layer_norm and
//! rms_norm read x and write y; add_ln_h and add+ln read x and r and write y and h; add_ln
//! reads x and r and writes y. The operands of the add forms are packed into the case's one
//! input and one output buffer (`[x | r]`, `[y | h]`). Where the f32 kernel of an ISA streams
//! its output ([`Kernels::streams`] at the row's bytes: beyond the last-level cache), the copy
//! streams too, so that both gain the same from the input staying in cache between calls.
//!
//! γ is uniform in [0.5, 1.5), β in [−0.5, 0.5) (the gain of rms_norm as γ), ε = 1e−5; inputs
//! uniform in [−2, 2) plus a per-row offset in [−4, 4). The plain versions ([`plain_layer_norm`]
//! and the others below) are what a user would write: a two-pass LayerNorm, an add loop
//! followed by it. `max_rel` is against the f64 oracle (large near y = 0: read it with the `!`
//! flag, which is the documented bound checked by `reference::check_layer_norm`,
//! `check_rms_norm` and `check_batch_norm` on every ISA's output).

use std::cell::RefCell;

use kernels::half::{bf16, f16};
use kernels::{BatchNormOptions, Element, Kernels, LayerNormOptions, Residual, RmsNormOptions};

use super::case::{self, Case, Context, Custom, Rule};
use super::output::Row;
use super::{Family, Plan, ReportError};
use crate::{data, storage};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &[
        "layer_norm",
        "add_ln_h",
        "add_ln",
        "add+ln",
        "rms_norm",
        "batch_norm",
        "bn_train",
    ],
    cases: no_cases,
    custom,
    issue: 3,
    goals,
};

/// ε of every case.
pub const EPS: f32 = 1e-5;

/// `(rows, d)`: in cache (16 Ki elements), then beyond L2 (4 Mi elements).
pub const ROWS: [(usize, usize); 6] = [(256, 64), (64, 256), (16, 1024), (4, 4096), (4096, 1024), (1024, 4096)];
const ROWS_QUICK: [(usize, usize); 2] = [(16, 1024), (4096, 1024)];
/// BatchNorm shapes `[N, C, S]`: in cache, beyond L2.
pub const BN_SHAPES: [[usize; 3]; 2] = [[8, 64, 32], [16, 256, 1024]];
const BN_SHAPES_QUICK: [[usize; 3]; 1] = [[8, 64, 32]];

fn no_cases(_: &Plan) -> Vec<Case> {
    Vec::new()
}

fn custom(plan: &Plan) -> Vec<Custom> {
    let mut out = Vec::new();
    let rows = plan.pick(&ROWS, &ROWS_QUICK);
    for &(r, d) in rows {
        out.push(layer_norm_as::<f32>(r, d));
    }
    for &(r, d) in rows {
        out.push(add_layer_norm(r, d, true));
        if !plan.quick {
            out.push(add_layer_norm(r, d, false));
        }
        out.push(add_then_layer_norm(r, d));
    }
    // --quick: rms_norm in cache only (the scalar path costs ~25 ms a call beyond L2).
    for &(r, d) in rows.iter().filter(|&&(r, d)| !plan.quick || r * d < 1 << 20) {
        out.push(rms_norm_as::<f32>(r, d));
    }
    for &shape in plan.pick(&BN_SHAPES, &BN_SHAPES_QUICK) {
        out.push(batch_norm_as::<f32>(shape));
        if !plan.quick {
            out.push(batch_norm_train(shape));
        }
    }
    // Issue 7: f16 and bf16 tensors beyond L2 (8 + 8 MiB; the f32 rows of the same shape move
    // 16 + 16 MiB), against the f32 rows above.
    for &(r, d) in plan.pick(&HALF_ROWS, &HALF_ROWS_QUICK) {
        out.push(layer_norm_as::<f16>(r, d));
        out.push(layer_norm_as::<bf16>(r, d));
        out.push(rms_norm_as::<f16>(r, d));
        out.push(rms_norm_as::<bf16>(r, d));
        out.push(add_layer_norm_as::<f16>(r, d));
        out.push(add_layer_norm_as::<bf16>(r, d));
    }
    let shape = BN_SHAPES[1];
    out.push(batch_norm_as::<f16>(shape));
    out.push(batch_norm_as::<bf16>(shape));
    out
}

/// Half-typed shapes (beyond L2 in f32 and in the half types).
const HALF_ROWS: [(usize, usize); 2] = [(4096, 1024), (1024, 4096)];
const HALF_ROWS_QUICK: [(usize, usize); 1] = [(4096, 1024)];

/// The storage types (f32 included: its rows come from the same constructors), with what
/// the checks need of both crates' traits.
trait Half: Element + reference::Element {}
impl Half for f32 {}
impl Half for f16 {}
impl Half for bf16 {}

fn layer_norm_as<E: Half>(rows: usize, d: usize) -> Custom {
    let n = rows * d;
    let (g, b) = affine(d);
    let (g1, b1, g2, b2, g3, b3) = (g.clone(), b.clone(), g.clone(), b.clone(), g.clone(), b.clone());
    let case = Case {
        streams: <E as Element>::NAME == "f32",
        ..Case::elementwise_as::<E>(
            "layer_norm",
            format!("{rows}x{d}"),
            n,
            move || rows_input(rows, d, 0x5eed_0310),
            move |k: Kernels, x: &[E], y: &mut [E]| {
                let opts = LayerNormOptions {
                    gamma: Some(&g1),
                    beta: Some(&b1),
                    eps: EPS,
                };
                k.layer_norm(x, y, d, &opts)
            },
            move |x, y| plain_layer_norm(x, y, d, &g2, &b2, EPS),
            move |x| reference::layer_norm(x, d, Some(&g3), Some(&b3), EPS).y,
        )
    };
    checked(case, move |x, y| {
        let (x, y) = (storage::view::<E>(x, n), storage::view::<E>(y, n));
        reference::check_layer_norm(x, d, Some(&g), Some(&b), EPS, y, None, None).is_ok()
    })
}

/// Add & LayerNorm with the `h` output over `E`: input `[x | r]`, output `[y | h]`.
fn add_layer_norm_as<E: Half>(rows: usize, d: usize) -> Custom {
    let n = rows * d;
    let (g, b) = affine(d);
    let (g1, b1, g2, b2, g3, b3) = (g.clone(), b.clone(), g.clone(), b.clone(), g.clone(), b.clone());
    let case = Case::stored_as::<E>(
        "add_ln_h",
        format!("{rows}x{d}"),
        [2 * n, 2 * n, n],
        move || residual_input(rows, d),
        move |k: Kernels, xr: &[E], yh: &mut [E]| {
            let opts = LayerNormOptions {
                gamma: Some(&g1),
                beta: Some(&b1),
                eps: EPS,
            };
            let (x, r) = xr.split_at(n);
            let (y, h) = yh.split_at_mut(n);
            k.add_layer_norm(x, r, y, Some(h), d, &Residual::default(), &opts)
        },
        move |xr, yh| {
            let (x, r) = xr.split_at(n);
            let (y, h) = yh.split_at_mut(n);
            plain_add(x, r, h);
            plain_layer_norm(h, y, d, &g2, &b2, EPS);
        },
        move |xr| {
            let (x, r) = xr.split_at(n);
            reference::add_layer_norm(x, r, None, 1.0, d, Some(&g3), Some(&b3), EPS)
                .1
                .y
        },
    );
    checked(case, move |xr, yh| {
        let (xr, yh) = (storage::view::<E>(xr, 2 * n), storage::view::<E>(yh, 2 * n));
        let wide = |v: &[E]| -> Vec<f32> { v.iter().map(|e| <E as Element>::to_f32(*e)).collect() };
        let h = reference::residual(&wide(&xr[..n]), &wide(&xr[n..]), None, 1.0, d);
        reference::check_layer_norm(&h, d, Some(&g), Some(&b), EPS, &yh[..n], None, None).is_ok()
    })
}

/// BatchNorm inference over `E`.
fn batch_norm_as<E: Half>(shape: [usize; 3]) -> Custom {
    let [n, c, s] = shape;
    let len = n * c * s;
    let (g, b) = affine(c);
    let (m, v) = running(c);
    let (g1, b1, m1, v1) = (g.clone(), b.clone(), m.clone(), v.clone());
    let (g2, b2, m2, v2) = (g.clone(), b.clone(), m.clone(), v.clone());
    let (g3, b3, m3, v3) = (g.clone(), b.clone(), m.clone(), v.clone());
    let case = Case::elementwise_as::<E>(
        "batch_norm",
        bn_name(shape),
        len,
        move || rows_input(n * c, s, 0x5eed_0322),
        move |k: Kernels, x: &[E], y: &mut [E]| {
            let opts = BatchNormOptions {
                gamma: Some(&g1),
                beta: Some(&b1),
                eps: EPS,
                ..BatchNormOptions::default()
            };
            k.batch_norm(x, y, shape, &m1, &v1, &opts)
        },
        move |x, y| plain_batch_norm(x, y, shape, &m2, &v2, &g2, &b2, EPS),
        move |x| reference::batch_norm(x, shape, &m3, &v3, Some(&g3), Some(&b3), EPS),
    );
    checked(case, move |x, y| {
        let (x, y) = (storage::view::<E>(x, len), storage::view::<E>(y, len));
        reference::check_batch_norm(x, shape, &m, &v, Some(&g), Some(&b), EPS, y).is_ok()
    })
}

fn rms_norm_as<E: Half>(rows: usize, d: usize) -> Custom {
    let n = rows * d;
    let g = affine(d).0;
    let (g1, g2, g3) = (g.clone(), g.clone(), g.clone());
    let case = Case {
        streams: <E as Element>::NAME == "f32",
        ..Case::elementwise_as::<E>(
            "rms_norm",
            format!("{rows}x{d}"),
            n,
            move || rows_input(rows, d, 0x5eed_0313),
            move |k: Kernels, x: &[E], y: &mut [E]| {
                let opts = RmsNormOptions {
                    gain: Some(&g1),
                    eps: EPS,
                };
                k.rms_norm(x, y, d, &opts)
            },
            move |x, y| plain_rms_norm(x, y, d, &g2, EPS),
            move |x| reference::rms_norm(x, d, Some(&g3), EPS).y,
        )
    };
    checked(case, move |x, y| {
        let (x, y) = (storage::view::<E>(x, n), storage::view::<E>(y, n));
        reference::check_rms_norm(x, d, Some(&g), EPS, y).is_ok()
    })
}

/// `γ`, `β` of length `d`.
pub fn affine(d: usize) -> (Vec<f32>, Vec<f32>) {
    (
        data::uniform(d, 0.5, 1.5, 0x5eed_0301),
        data::uniform(d, -0.5, 0.5, 0x5eed_0302),
    )
}

/// `rows × d` inputs: uniform in [−2, 2) plus a per-row offset in [−4, 4).
pub fn rows_input(rows: usize, d: usize, seed: u64) -> Vec<f32> {
    let offsets = data::uniform(rows, -4.0, 4.0, seed ^ 0xff);
    let mut x = data::uniform(rows * d, -2.0, 2.0, seed);
    for (row, off) in x.chunks_exact_mut(d).zip(offsets) {
        row.iter_mut().for_each(|v| *v += off);
    }
    x
}

/// Plain Rust two-pass LayerNorm of each row of `x` into `y`.
pub fn plain_layer_norm(x: &[f32], y: &mut [f32], d: usize, gamma: &[f32], beta: &[f32], eps: f32) {
    for (x, y) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        let mean = x.iter().sum::<f32>() / d as f32;
        let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let rstd = 1.0 / (var + eps).sqrt();
        for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(gamma).zip(beta) {
            *y = (x - mean) * rstd * g + b;
        }
    }
}

/// Plain Rust two-pass LayerNorm of each row of `h`, in place.
pub fn plain_layer_norm_inplace(h: &mut [f32], d: usize, gamma: &[f32], beta: &[f32], eps: f32) {
    for h in h.chunks_exact_mut(d) {
        let mean = h.iter().sum::<f32>() / d as f32;
        let var = h.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let rstd = 1.0 / (var + eps).sqrt();
        for ((h, &g), &b) in h.iter_mut().zip(gamma).zip(beta) {
            *h = (*h - mean) * rstd * g + b;
        }
    }
}

/// Plain Rust `h = x + r`.
pub fn plain_add(x: &[f32], r: &[f32], h: &mut [f32]) {
    for ((h, &x), &r) in h.iter_mut().zip(x).zip(r) {
        *h = x + r;
    }
}

/// Plain Rust RMSNorm with a gain.
pub fn plain_rms_norm(x: &[f32], y: &mut [f32], d: usize, gain: &[f32], eps: f32) {
    for (x, y) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        let ms = x.iter().map(|&v| v * v).sum::<f32>() / d as f32;
        let rstd = 1.0 / (ms + eps).sqrt();
        for ((y, &x), &g) in y.iter_mut().zip(x).zip(gain) {
            *y = x * rstd * g;
        }
    }
}

/// Plain Rust BatchNorm (inference) over `[N, C, S]`.
#[allow(clippy::too_many_arguments)]
pub fn plain_batch_norm(
    x: &[f32],
    y: &mut [f32],
    [_, c, s]: [usize; 3],
    mean: &[f32],
    var: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) {
    for (i, (x, y)) in x.chunks_exact(s).zip(y.chunks_exact_mut(s)).enumerate() {
        let ch = i % c;
        let scale = gamma[ch] / (var[ch] + eps).sqrt();
        for (y, &x) in y.iter_mut().zip(x) {
            *y = (x - mean[ch]) * scale + beta[ch];
        }
    }
}

/// Plain Rust BatchNorm (training) over `[N, C, S]`: two-pass batch statistics per channel,
/// normalization, running averages updated (unbiased variance).
#[allow(clippy::too_many_arguments)]
pub fn plain_batch_norm_train(
    x: &[f32],
    y: &mut [f32],
    [n, c, s]: [usize; 3],
    running_mean: &mut [f32],
    running_var: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    momentum: f32,
) {
    let count = (n * s) as f32;
    for ch in 0..c {
        let plane = |i: usize| (i * c + ch) * s..(i * c + ch + 1) * s;
        let mean = (0..n).map(|i| x[plane(i)].iter().sum::<f32>()).sum::<f32>() / count;
        let var = (0..n)
            .map(|i| x[plane(i)].iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>())
            .sum::<f32>()
            / count;
        let scale = gamma[ch] / (var + eps).sqrt();
        for i in 0..n {
            for (y, &x) in y[plane(i)].iter_mut().zip(&x[plane(i)]) {
                *y = (x - mean) * scale + beta[ch];
            }
        }
        running_mean[ch] = (1.0 - momentum) * running_mean[ch] + momentum * mean;
        running_var[ch] = (1.0 - momentum) * running_var[ch] + momentum * var * count / (count - 1.0);
    }
}

/// `(input, output) → within the documented bound`.
type Check = dyn Fn(&[f32], &[f32]) -> bool;

/// A [`Custom`] case: the shared driver ([`case::measure`]) on `case`, then each printed ISA's
/// output checked against the documented bound by `check(input, output)`.
fn checked(case: Case, check: impl Fn(&[f32], &[f32]) -> bool + 'static) -> Custom {
    let (kernel, shape) = (case.kernel, case.shape.clone());
    let check: Box<Check> = Box::new(check);
    Custom {
        kernel,
        shape,
        measure: Box::new(move |ctx: &Context| -> Result<Vec<Row>, ReportError> {
            let mut rows = case::measure(&case, ctx)?;
            let input = (case.input)();
            for row in rows.iter_mut() {
                let Some(&k) = ctx.kernels.iter().find(|k| k.isa().to_string() == row.isa) else {
                    continue;
                };
                let mut y = vec![0.0f32; case.y_len];
                (case.run)(k, &input, &mut y)
                    .map_err(|e| ReportError::new(format!("{} {}: {e}", case.kernel, case.shape)))?;
                row.within_bound = Some(check(&input, &y));
            }
            Ok(rows)
        }),
    }
}

/// Fused Add & LayerNorm: input `[x | r]`, output `[y | h]` (or `[y]` without `h`).
fn add_layer_norm(rows: usize, d: usize, with_h: bool) -> Custom {
    let n = rows * d;
    let (g, b) = affine(d);
    let (g1, b1, g2, b2, g3, b3) = (g.clone(), b.clone(), g.clone(), b.clone(), g.clone(), b.clone());
    let y_len = if with_h { 2 * n } else { n };
    let case = Case {
        rule: Rule::Copy,
        streams: true,
        x_len: 2 * n,
        y_len,
        elements: n,
        ..Case::elementwise(
            if with_h { "add_ln_h" } else { "add_ln" },
            format!("{rows}x{d}"),
            n,
            move || residual_input(rows, d),
            move |k: Kernels, xr, yh| {
                let opts = LayerNormOptions {
                    gamma: Some(&g1),
                    beta: Some(&b1),
                    eps: EPS,
                };
                let (x, r) = xr.split_at(n);
                let (y, h) = yh.split_at_mut(n);
                let h = if with_h { Some(h) } else { None };
                k.add_layer_norm(x, r, y, h, d, &Residual::default(), &opts)
            },
            move |xr, yh| {
                let (x, r) = xr.split_at(n);
                if with_h {
                    let (y, h) = yh.split_at_mut(n);
                    plain_add(x, r, h);
                    plain_layer_norm(h, y, d, &g2, &b2, EPS);
                } else {
                    // Without a buffer for h, the user adds into y and normalizes it in place.
                    plain_add(x, r, yh);
                    plain_layer_norm_inplace(yh, d, &g2, &b2, EPS);
                }
            },
            move |xr| {
                let (x, r) = xr.split_at(n);
                let (h, norm) = reference::add_layer_norm(x, r, None, 1.0, d, Some(&g3), Some(&b3), EPS);
                let mut out = norm.y;
                if with_h {
                    out.extend(h.iter().map(|&v| v as f64));
                }
                out
            },
        )
    };
    checked(case, move |xr, yh| {
        let (x, r) = xr.split_at(n);
        let h = reference::residual(x, r, None, 1.0, d);
        let h_ok = !with_h || yh[n..] == h[..];
        h_ok && reference::check_layer_norm(&h, d, Some(&g), Some(&b), EPS, &yh[..n], None, None).is_ok()
    })
}

/// `[x | r]` for the add forms.
fn residual_input(rows: usize, d: usize) -> Vec<f32> {
    let mut xr = rows_input(rows, d, 0x5eed_0311);
    xr.extend(data::uniform(rows * d, -1.0, 1.0, 0x5eed_0312));
    xr
}

/// The unfused composition with our LayerNorm: a plain add loop writing `h`, then
/// [`Kernels::layer_norm`] of `h`. Input `[x | r]`, output `[y | h]`.
fn add_then_layer_norm(rows: usize, d: usize) -> Custom {
    let n = rows * d;
    let (g, b) = affine(d);
    let (g1, b1, g2, b2, g3, b3) = (g.clone(), b.clone(), g.clone(), b.clone(), g.clone(), b.clone());
    let case = Case {
        rule: Rule::Copy,
        streams: true,
        x_len: 2 * n,
        y_len: 2 * n,
        elements: n,
        ..Case::elementwise(
            "add+ln",
            format!("{rows}x{d}"),
            n,
            move || residual_input(rows, d),
            move |k: Kernels, xr, yh| {
                let opts = LayerNormOptions {
                    gamma: Some(&g1),
                    beta: Some(&b1),
                    eps: EPS,
                };
                let (x, r) = xr.split_at(n);
                let (y, h) = yh.split_at_mut(n);
                plain_add(x, r, h);
                k.layer_norm(h, y, d, &opts)
            },
            move |xr, yh| {
                let (x, r) = xr.split_at(n);
                let (y, h) = yh.split_at_mut(n);
                plain_add(x, r, h);
                plain_layer_norm(h, y, d, &g2, &b2, EPS);
            },
            move |xr| {
                let (x, r) = xr.split_at(n);
                let (h, norm) = reference::add_layer_norm(x, r, None, 1.0, d, Some(&g3), Some(&b3), EPS);
                let mut out = norm.y;
                out.extend(h.iter().map(|&v| v as f64));
                out
            },
        )
    };
    checked(case, move |xr, yh| {
        let (x, r) = xr.split_at(n);
        let h = reference::residual(x, r, None, 1.0, d);
        reference::check_layer_norm(&h, d, Some(&g), Some(&b), EPS, &yh[..n], None, None).is_ok()
    })
}

/// Running statistics of `c` channels: means in [−1, 1), variances in [0.5, 2).
pub fn running(c: usize) -> (Vec<f32>, Vec<f32>) {
    (
        data::uniform(c, -1.0, 1.0, 0x5eed_0320),
        data::uniform(c, 0.5, 2.0, 0x5eed_0321),
    )
}

fn bn_name(shape: [usize; 3]) -> String {
    format!("{}x{}x{}", shape[0], shape[1], shape[2])
}

fn batch_norm_train(shape: [usize; 3]) -> Custom {
    let [n, c, s] = shape;
    let len = n * c * s;
    let (g, b) = affine(c);
    let (m, v) = running(c);
    // The running averages move with every call; y depends on the batch statistics only.
    let state = RefCell::new((m.clone(), v.clone()));
    let plain_state = RefCell::new((m.clone(), v.clone()));
    let (g1, b1, g2, b2, g3, b3) = (g.clone(), b.clone(), g.clone(), b.clone(), g.clone(), b.clone());
    let momentum = BatchNormOptions::default().momentum;
    let case = Case {
        rule: Rule::Copy,
        ..Case::elementwise(
            "bn_train",
            bn_name(shape),
            len,
            move || rows_input(n * c, s, 0x5eed_0323),
            move |k: Kernels, x, y| {
                let opts = BatchNormOptions {
                    gamma: Some(&g1),
                    beta: Some(&b1),
                    eps: EPS,
                    momentum,
                };
                let (m, v) = &mut *state.borrow_mut();
                k.batch_norm_train(x, y, shape, m, v, &opts)
            },
            move |x, y| {
                let (m, v) = &mut *plain_state.borrow_mut();
                plain_batch_norm_train(x, y, shape, m, v, &g2, &b2, EPS, momentum)
            },
            move |x| reference::batch_norm_train(x, shape, &m, &v, Some(&g3), Some(&b3), EPS, momentum).y,
        )
    };
    let (m, v) = running(c);
    checked(case, move |x, y| {
        // The running averages are not checked here (the timed calls moved them); the batch
        // statistics and y are, through the reference's bound on y.
        let exact = reference::batch_norm_train(x, shape, &m, &v, Some(&g), Some(&b), EPS, momentum);
        let (rm, rv): (Vec<f32>, Vec<f32>) = (
            exact.running_mean.iter().map(|&v| v as f32).collect(),
            exact.running_var.iter().map(|&v| v as f32).collect(),
        );
        let got = reference::BatchNormTrainOutputs {
            y,
            running_mean: &rm,
            running_var: &rv,
            mean: None,
            rstd: None,
        };
        reference::check_batch_norm_train(x, shape, &m, &v, Some(&g), Some(&b), EPS, momentum, got).is_ok()
    })
}

/// `(rows, d)` of a shape `RxD`.
fn parse_rows(shape: &str) -> Option<(usize, usize)> {
    let (r, d) = shape.split_once('x')?;
    Some((r.parse().ok()?, d.parse().ok()?))
}

/// The goals of issue 3 as read from the rows (shared/PERF.md explains them).
fn goals(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    let beyond = |r: &Row| r.bytes.is_some_and(|b| b > 4.0 * (1 << 20) as f64);
    for isa in ["avx2", "avx512", "neon"] {
        let of = |kernel: &'static str| {
            rows.iter().filter(move |r| {
                r.kernel == kernel && r.isa == isa && r.dtype == "f32" && parse_rows(&r.shape).is_some()
            })
        };
        let mut push = |what: &str, values: Vec<String>| {
            if !values.is_empty() {
                out.push(format!("{isa}: {what}: {}", values.join(", ")));
            }
        };
        for (kernel, goal) in [("layer_norm", "0.85"), ("add_ln_h", "0.80")] {
            push(
                &format!("{kernel} fraction of the copy roofline beyond L2 (goal >= {goal})"),
                of(kernel)
                    .filter(|r| beyond(r))
                    .filter_map(|r| Some(format!("{} {:.2}", r.shape, r.roofline_ratio?)))
                    .collect(),
            );
        }
        for kernel in ["add_ln", "rms_norm"] {
            push(
                &format!("{kernel} fraction of the copy roofline beyond L2 (no goal)"),
                of(kernel)
                    .filter(|r| beyond(r))
                    .filter_map(|r| Some(format!("{} {:.2}", r.shape, r.roofline_ratio?)))
                    .collect(),
            );
        }
        push(
            "layer_norm speedup over plain scalar two-pass in cache (goal >= 10x)",
            of("layer_norm")
                .filter(|r| !beyond(r))
                .filter_map(|r| Some(format!("{} {:.1}x", r.shape, r.vs_plain?)))
                .collect(),
        );
        push(
            "add_ln_h (add_layer_norm with h) speedup over plain add + two-pass in cache (no goal)",
            of("add_ln_h")
                .filter(|r| !beyond(r))
                .filter_map(|r| Some(format!("{} {:.1}x", r.shape, r.vs_plain?)))
                .collect(),
        );
        // Fused vs the plain add loop + our layer_norm (both write y and h): separate cases of
        // the same run, so a ratio of medians rather than of rounds.
        let composed: Vec<&Row> = of("add+ln").collect();
        push(
            "add_ln_h (fused add_layer_norm with h) / add+ln (plain add loop, then our layer_norm) speed (goal >= 1.3x)",
            of("add_ln_h")
                .filter_map(|r| {
                    let c = composed.iter().find(|c| c.shape == r.shape)?;
                    Some(format!("{} {:.2}x", r.shape, c.ns_per_iter / r.ns_per_iter))
                })
                .collect(),
        );
    }
    out.extend(super::softmax::half_goals(
        rows,
        &["layer_norm", "add_ln_h", "rms_norm", "batch_norm"],
    ));
    out
}
