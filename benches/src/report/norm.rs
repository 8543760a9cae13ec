//! Rows of the normalization family, under these kernel names (the table's kernel column is
//! 10 wide):
//!
//! - `layer_norm`: [`Kernels::layer_norm`] with γ and β;
//! - `add_ln_h`: [`Kernels::add_layer_norm`] with the `h` output (Pre-LN residual stream),
//!   timed beside the unfused "add, then layer_norm" of the same ISA (a plain add loop writing
//!   `h`, then our [`Kernels::layer_norm`] of `h`: the `add+ln` entry of its `vs`);
//! - `add_ln`: [`Kernels::add_layer_norm`] without `h` (Post-LN);
//! - `rms_norm`: [`Kernels::rms_norm`] with a gain;
//! - `batch_norm`: [`Kernels::batch_norm`] (inference, running statistics, γ, β);
//! - `bn_train`: [`Kernels::batch_norm_train`] (batch statistics, running averages updated).
//!
//! Shapes: rows of d ∈ {64, 256, 1024, 4096} in cache (16 Ki elements: x + y = 128 KiB), and
//! beyond L2 (4096×1024, 1024×4096: 16 MiB per operand). Every row is held against the copy
//! roofline of its bytes, in cache too (a norm has no exp to compare with): layer_norm and
//! rms_norm read x and write y; add_ln_h reads x and r and writes y and h; add_ln reads x and r
//! and writes y. The operands of the add forms are packed into the case's one input and one
//! output buffer (`[x | r]`, `[y | h]`). Where the f32 kernel of an ISA streams its output
//! ([`Kernels::streams`] at the row's bytes: beyond the last-level cache), the copy streams
//! too, so that both gain the same from the input staying in cache between calls.
//!
//! γ is uniform in [0.5, 1.5), β in [−0.5, 0.5) (the gain of rms_norm as γ), ε = 1e−5; inputs
//! uniform in [−2, 2) plus a per-row offset in [−4, 4). One LayerNorm row is hard on purpose:
//! a mean of 10⁶ against a spread of ±2 (the inputs that break `E[x²] − E[x]²`, and a plain
//! f32 two-pass's mean). The plain versions ([`plain_layer_norm`] and the others below) are
//! what a user would write: a two-pass LayerNorm, an add loop followed by it. The error is the
//! fraction of the documented bound (`reference::fraction::layer_norm`, `rms_norm`,
//! `batch_norm`, `batch_norm_train` on every output).

use std::cell::RefCell;

use kernels::half::{bf16, f16};
use kernels::{BatchNormOptions, Kernels, LayerNormOptions, Residual, RmsNormOptions};

use super::case::{Case, Rule};
use super::{no_custom, Family, Headline, Plan};
use crate::data;
use crate::storage::{self, Typed};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["layer_norm", "add_ln_h", "add_ln", "rms_norm", "batch_norm", "bn_train"],
    cases,
    custom: no_custom,
    headlines: &[
        Headline::elements("layer_norm", "4096x1024"),
        Headline::elements("add_ln_h", "4096x1024"),
        Headline::elements("rms_norm", "4096x1024"),
        Headline::elements("batch_norm", "16x256x1024"),
    ],
};

/// ε of every case.
pub const EPS: f32 = 1e-5;

/// `(rows, d)`: in cache (16 Ki elements), then beyond L2 (4 Mi elements).
pub const ROWS: [(usize, usize); 6] = [(256, 64), (64, 256), (16, 1024), (4, 4096), (4096, 1024), (1024, 4096)];
const ROWS_DEFAULT: [(usize, usize); 2] = [(16, 1024), (4096, 1024)];
/// BatchNorm shapes `[N, C, S]`: in cache, beyond L2.
pub const BN_SHAPES: [[usize; 3]; 2] = [[8, 64, 32], [16, 256, 1024]];
const BN_SHAPES_QUICK: [[usize; 3]; 1] = [[8, 64, 32]];
/// The hard LayerNorm rows: `(rows, d)` (in cache), and what makes them hard.
const HARD: ((usize, usize), &str) = ((16, 4096), "mean 1e6, spread +-2");

fn cases(plan: &Plan) -> Vec<Case> {
    let mut out = Vec::new();
    let rows = plan.pick(&ROWS, &ROWS_DEFAULT, &ROWS_DEFAULT);
    for &(r, d) in rows {
        out.push(layer_norm_as::<f32>(r, d));
    }
    out.push(hard_layer_norm());
    for &(r, d) in rows {
        out.push(add_layer_norm_as::<f32>(r, d));
    }
    for &(r, d) in plan.pick(&ROWS, &[], &[]) {
        out.push(add_layer_norm(r, d));
    }
    // --quick: rms_norm in cache only (the scalar path costs ~25 ms a call beyond L2).
    for &(r, d) in plan.pick(&ROWS, &ROWS_DEFAULT, &ROWS_DEFAULT[..1]) {
        out.push(rms_norm_as::<f32>(r, d));
    }
    for &shape in plan.pick(&BN_SHAPES, &BN_SHAPES, &BN_SHAPES_QUICK) {
        out.push(batch_norm_as::<f32>(shape));
    }
    for &shape in plan.pick(&BN_SHAPES, &[], &[]) {
        out.push(batch_norm_train(shape));
    }
    // f16 and bf16 tensors beyond L2 (8 + 8 MiB; the f32 rows of the same shape move
    // 16 + 16 MiB), against the f32 rows above.
    for &(r, d) in plan.pick(&HALF_ROWS, &HALF_ROWS[..1], &HALF_ROWS[..1]) {
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

fn layer_norm_as<E: Typed>(rows: usize, d: usize) -> Case {
    layer_norm_of::<E>(rows, d, move || rows_input(rows, d, 0x5eed_0310))
}

/// LayerNorm rows whose mean is far larger than their spread, labelled as hard.
fn hard_layer_norm() -> Case {
    let ((rows, d), what) = HARD;
    Case {
        hard: Some(what),
        ..layer_norm_of::<f32>(rows, d, move || {
            data::uniform(rows * d, -2.0, 2.0, 0x5eed_0314)
                .into_iter()
                .map(|v| 1e6 + v)
                .collect()
        })
    }
}

fn layer_norm_of<E: Typed>(rows: usize, d: usize, input: impl Fn() -> Vec<f32> + 'static) -> Case {
    let n = rows * d;
    let (g, b) = affine(d);
    let (g1, b1, g2, b2, g3, b3) = (g.clone(), b.clone(), g.clone(), b.clone(), g.clone(), b.clone());
    Case {
        streams: <E as kernels::Element>::NAME == "f32",
        ..Case::elementwise_as::<E>(
            "layer_norm",
            format!("{rows}x{d}"),
            n,
            input,
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
        .with_bound(move |x, y| {
            let (x, y) = (storage::view::<E>(x, n), storage::view::<E>(y, n));
            reference::fraction::layer_norm(x, d, Some(&g), Some(&b), EPS, y, None, None)
        })
    }
}

/// The fraction of the bound of an add form's `[y | h]` (or `[y]`) from `[x | r]`: `h` must be
/// the residual exactly (∞ otherwise), `y` its LayerNorm within the bound.
fn add_bound<E: Typed>(
    n: usize,
    d: usize,
    with_h: bool,
    (g, b): (Vec<f32>, Vec<f32>),
) -> impl Fn(&[f32], &[f32]) -> f64 {
    move |xr, yh| {
        let out = if with_h { 2 * n } else { n };
        let (xr, yh) = (storage::view::<E>(xr, 2 * n), storage::view::<E>(yh, out));
        let wide = |v: &[E]| -> Vec<f32> { v.iter().map(|e| kernels::Element::to_f32(*e)).collect() };
        let h = reference::residual(&wide(&xr[..n]), &wide(&xr[n..]), None, 1.0, d);
        let h_exact = !with_h
            || yh[n..]
                .iter()
                .zip(&h)
                .all(|(&got, &want)| got == <E as kernels::Element>::from_f32(want));
        if !h_exact {
            return f64::INFINITY;
        }
        reference::fraction::layer_norm(&h, d, Some(&g), Some(&b), EPS, &yh[..n], None, None)
    }
}

/// Add & LayerNorm with the `h` output over `E`: input `[x | r]`, output `[y | h]`; for f32,
/// with the unfused composition (a plain add loop into `h`, then [`Kernels::layer_norm`]).
fn add_layer_norm_as<E: Typed>(rows: usize, d: usize) -> Case {
    let n = rows * d;
    let (g, b) = affine(d);
    let (g1, b1, g2, b2, g3, b3, g4, b4) = (
        g.clone(),
        b.clone(),
        g.clone(),
        b.clone(),
        g.clone(),
        b.clone(),
        g.clone(),
        b.clone(),
    );
    let case = Case {
        streams: <E as kernels::Element>::NAME == "f32",
        ..Case::stored_as::<E>(
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
        )
        .with_bound(add_bound::<E>(n, d, true, (g, b)))
    };
    if <E as kernels::Element>::NAME != "f32" {
        return case;
    }
    Case {
        unfused: Some((
            "add+ln",
            Box::new(move |k: Kernels, xr: &[f32], yh: &mut [f32]| {
                let opts = LayerNormOptions {
                    gamma: Some(&g4),
                    beta: Some(&b4),
                    eps: EPS,
                };
                let (x, r) = xr.split_at(n);
                let (y, h) = yh.split_at_mut(n);
                plain_add(x, r, h);
                k.layer_norm(h, y, d, &opts)
            }),
        )),
        ..case
    }
}

/// BatchNorm inference over `E`.
fn batch_norm_as<E: Typed>(shape: [usize; 3]) -> Case {
    let [n, c, s] = shape;
    let len = n * c * s;
    let (g, b) = affine(c);
    let (m, v) = running(c);
    let (g1, b1, m1, v1) = (g.clone(), b.clone(), m.clone(), v.clone());
    let (g2, b2, m2, v2) = (g.clone(), b.clone(), m.clone(), v.clone());
    let (g3, b3, m3, v3) = (g.clone(), b.clone(), m.clone(), v.clone());
    Case::elementwise_as::<E>(
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
    )
    .with_bound(move |x, y| {
        let (x, y) = (storage::view::<E>(x, len), storage::view::<E>(y, len));
        reference::fraction::batch_norm(x, shape, &m, &v, Some(&g), Some(&b), EPS, y)
    })
}

fn rms_norm_as<E: Typed>(rows: usize, d: usize) -> Case {
    let n = rows * d;
    let g = affine(d).0;
    let (g1, g2, g3) = (g.clone(), g.clone(), g.clone());
    Case {
        streams: <E as kernels::Element>::NAME == "f32",
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
        .with_bound(move |x, y| {
            let (x, y) = (storage::view::<E>(x, n), storage::view::<E>(y, n));
            reference::fraction::rms_norm(x, d, Some(&g), EPS, y)
        })
    }
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

/// Fused Add & LayerNorm without `h` (Post-LN): input `[x | r]`, output `[y]`.
fn add_layer_norm(rows: usize, d: usize) -> Case {
    let n = rows * d;
    let (g, b) = affine(d);
    let (g1, b1, g2, b2, g3, b3) = (g.clone(), b.clone(), g.clone(), b.clone(), g.clone(), b.clone());
    Case {
        rule: Rule::Copy,
        streams: true,
        x_len: 2 * n,
        y_len: n,
        elements: n,
        ..Case::elementwise(
            "add_ln",
            format!("{rows}x{d}"),
            n,
            move || residual_input(rows, d),
            move |k: Kernels, xr, y| {
                let opts = LayerNormOptions {
                    gamma: Some(&g1),
                    beta: Some(&b1),
                    eps: EPS,
                };
                let (x, r) = xr.split_at(n);
                k.add_layer_norm(x, r, y, None, d, &Residual::default(), &opts)
            },
            move |xr, y| {
                // Without a buffer for h, the user adds into y and normalizes it in place.
                let (x, r) = xr.split_at(n);
                plain_add(x, r, y);
                plain_layer_norm_inplace(y, d, &g2, &b2, EPS);
            },
            move |xr| {
                let (x, r) = xr.split_at(n);
                reference::add_layer_norm(x, r, None, 1.0, d, Some(&g3), Some(&b3), EPS)
                    .1
                    .y
            },
        )
        .with_bound(add_bound::<f32>(n, d, false, (g, b)))
    }
}

/// `[x | r]` for the add forms.
fn residual_input(rows: usize, d: usize) -> Vec<f32> {
    let mut xr = rows_input(rows, d, 0x5eed_0311);
    xr.extend(data::uniform(rows * d, -1.0, 1.0, 0x5eed_0312));
    xr
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

fn batch_norm_train(shape: [usize; 3]) -> Case {
    let [n, c, s] = shape;
    let len = n * c * s;
    let (g, b) = affine(c);
    let (m, v) = running(c);
    // The running averages move with every call; y depends on the batch statistics only.
    let state = RefCell::new((m.clone(), v.clone()));
    let plain_state = RefCell::new((m.clone(), v.clone()));
    let (g1, b1, g2, b2, g3, b3) = (g.clone(), b.clone(), g.clone(), b.clone(), g.clone(), b.clone());
    let (m3, v3) = (m.clone(), v.clone());
    let momentum = BatchNormOptions::default().momentum;
    Case {
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
            move |x| reference::batch_norm_train(x, shape, &m3, &v3, Some(&g3), Some(&b3), EPS, momentum).y,
        )
        .with_bound(move |x, y| {
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
            reference::fraction::batch_norm_train(x, shape, &m, &v, Some(&g), Some(&b), EPS, momentum, got)
        })
    }
}
