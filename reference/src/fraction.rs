//! How close a result comes to its documented bound: the largest error over the elements a
//! `check_*` function checks, each divided by the bound it is held to there.
//!
//! Each function here takes the arguments of the check of the same name and walks the output
//! the same way (the two share one walk per kernel, so they cannot state a bound differently),
//! but sees every element instead of stopping at the first one outside its bound. The result is
//! a number a report can print for any kernel alike:
//!
//! - `0`: every element equals its exact value (rounded, where the contract says so);
//! - `≤ 1`: within the bound, exactly where the check returns `Ok`;
//! - `> 1`: outside it, where the check returns `Err`; `+∞` for a NaN where a number was due,
//!   or a failed exact match (NaN rows, masked entries, results beyond the f32 range).
//!
//! For an f16 or bf16 result the contract is the f32 bound plus one rounding to the type; the
//! fraction counts the rounding as free: it is the smallest error an f32 result rounding to
//! the stored value would have had, over the f32 bound. A result that is the exact value
//! correctly rounded to its type reads 0, however far that rounding moved it: a probability
//! that underflows f16 is not an error of 100%.

use crate::attention::{AttentionOptions, AttentionShape};
use crate::check::{walk_activation, walk_attention, walk_exp, walk_gau, walk_softmax, Worst};
use crate::element::Element;
use crate::gau::{GauParams, GauShape};
use crate::gelu::{walk_gelu, walk_gelu_tanh};
use crate::linear::{walk_linear, Activation};
use crate::norm::{walk_batch_norm, walk_batch_norm_train, walk_layer_norm, walk_rms_norm, BatchNormTrainOutputs};
use crate::softmax::MaskedRows;

/// Runs a walk with a [`Worst`] judge (which never stops it) and returns the worst fraction.
fn worst<T, M>(walk: impl FnOnce(&mut Worst) -> Result<T, M>) -> f64 {
    let mut judge = Worst::default();
    // The judge never returns an error, so the walk runs to its end.
    let _ = walk(&mut judge);
    judge.0
}

/// The fraction of the bound of [`crate::check_softmax`] (same arguments).
pub fn softmax<E: Element>(
    x: &[E],
    n: usize,
    scale: f32,
    mask: Option<&[f32]>,
    policy: MaskedRows,
    log: bool,
    got: &[E],
) -> f64 {
    worst(|j| walk_softmax(x, n, scale, mask, policy, log, got, j))
}

/// The fraction of the bound of [`crate::check_exp`] (same arguments): ulps over 1.
pub fn exp<E: Element>(x: &[E], got: &[E]) -> f64 {
    worst(|j| walk_exp(x, got, j))
}

/// The fraction of the bound of [`crate::check_activation`] (same arguments): ulps over 3,
/// or the absolute error over `2⁻¹²⁶` where that rule is the looser one.
pub fn activation<E: Element>(x: &[E], swish: bool, got: &[E]) -> f64 {
    worst(|j| walk_activation(x, swish, got, j))
}

/// The fraction of the bound of [`crate::check_gelu`] (same arguments): ulps over 6, or the
/// absolute error over `2⁻¹²⁶` where that rule is the looser one.
pub fn gelu<E: Element>(x: &[E], got: &[E]) -> f64 {
    worst(|j| walk_gelu(x, got, j))
}

/// The fraction of the bound of [`crate::check_gelu_tanh`] (same arguments): ulps over
/// `4 + 3|v|`, or the absolute error over `2⁻¹²⁶` where that rule is the looser one.
pub fn gelu_tanh<E: Element>(x: &[E], got: &[E]) -> f64 {
    worst(|j| walk_gelu_tanh(x, got, j))
}

/// The fraction of the bound of [`crate::check_linear`] (same arguments).
#[allow(clippy::too_many_arguments)]
pub fn linear<E: Element>(
    x: &[E],
    w: &[f32],
    shape: (usize, usize),
    bias: Option<&[f32]>,
    activation: Activation,
    residual: Option<&[E]>,
    got: &[E],
) -> f64 {
    worst(|j| walk_linear(x, w, shape, bias, activation, residual, got, j))
}

/// The fraction of the bound of [`crate::check_attention`] (same arguments), over the output
/// and the scores output if given.
pub fn attention<E: Element>(
    shape: &AttentionShape,
    q: &[E],
    k: &[E],
    v: &[E],
    opts: &AttentionOptions,
    out: &[E],
    scores: Option<&[f32]>,
) -> f64 {
    worst(|j| walk_attention(shape, q, k, v, opts, out, scores, j))
}

/// The fraction of the bound of [`crate::check_gau`] (same arguments).
pub fn gau<E: Element>(shape: &GauShape, x: &[E], params: &GauParams, out: &[E]) -> f64 {
    worst(|j| walk_gau(shape, x, params, out, j))
}

/// The fraction of the bound of [`crate::check_layer_norm`] (same arguments), over `y` and
/// the statistics if given.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm<H: Element, E: Element>(
    h: &[H],
    d: usize,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    y: &[E],
    mean: Option<&[f32]>,
    rstd: Option<&[f32]>,
) -> f64 {
    worst(|j| walk_layer_norm(h, d, gamma, beta, eps, y, mean, rstd, j))
}

/// The fraction of the bound of [`crate::check_rms_norm`] (same arguments).
pub fn rms_norm<H: Element, E: Element>(h: &[H], d: usize, gain: Option<&[f32]>, eps: f32, y: &[E]) -> f64 {
    worst(|j| walk_rms_norm(h, d, gain, eps, y, j))
}

/// The fraction of the bound of [`crate::check_batch_norm`] (same arguments).
#[allow(clippy::too_many_arguments)]
pub fn batch_norm<E: Element>(
    x: &[E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    y: &[E],
) -> f64 {
    worst(|j| walk_batch_norm(x, shape, running_mean, running_var, gamma, beta, eps, y, j))
}

/// The fraction of the bound of [`crate::check_batch_norm_train`] (same arguments), over `y`,
/// the statistics if given and the running averages.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_train<E: Element>(
    x: &[E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    momentum: f32,
    got: BatchNormTrainOutputs<E>,
) -> f64 {
    worst(|j| walk_batch_norm_train(x, shape, running_mean, running_var, gamma, beta, eps, momentum, got, j))
}
