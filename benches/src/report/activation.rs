//! Rows of the element-wise activations `sigmoid` and `swish` (the GAU's gate).
//!
//! Shapes as exp's: 16 Ki elements (128 KiB working set: in L2, beyond L1), held against the
//! bare vectorized exp of the same ISA (an activation is one exp plus a division, so the ratio
//! says what the rest costs); and 4 Mi elements (16 MiB in + 16 MiB out, beyond L2), held
//! against the copy of the same bytes. Inputs are uniform in [−10, 10) (pre-activations; σ
//! spans [4.5e−5, 1 − 4.5e−5] there). The plain versions are `1/(1 + (−x).exp())` and
//! `x/(1 + (−x).exp())` with libm's `f32::exp`; max_ulp is measured against
//! `reference::sigmoid` / `reference::swish` (f64).

use kernels::half::{bf16, f16};
use kernels::Kernels;

use super::case::{Case, Rule};
use super::{no_custom, Family, Headline, Plan};
use crate::storage::{self, Typed};
use crate::{data, plain};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["sigmoid", "swish"],
    cases,
    custom: no_custom,
    headlines: &[
        Headline::elements("sigmoid", "4194304"),
        Headline::elements("swish", "4194304"),
    ],
};

/// Lengths: in cache, beyond L2.
const LENS: [usize; 2] = [16 * 1024, 4 * 1024 * 1024];

fn cases(plan: &Plan) -> Vec<Case> {
    let mut cases = Vec::new();
    // --quick: the large shape (where the scalar path costs ~0.2 s a call) for swish only.
    for &len in plan.pick(&LENS, &LENS, &LENS[..1]) {
        cases.push(sigmoid(len));
    }
    for &len in &LENS {
        cases.push(swish(len));
    }
    // f16 and bf16 tensors, beyond L2.
    let len = LENS[1];
    cases.push(swish_as::<f16>(len));
    cases.push(swish_as::<bf16>(len));
    for &len in plan.pick(&LENS[1..], &[], &[]) {
        cases.push(sigmoid_as::<f16>(len));
        cases.push(sigmoid_as::<bf16>(len));
    }
    cases
}

fn sigmoid_as<E: Typed>(len: usize) -> Case {
    Case::elementwise_as::<E>(
        "sigmoid",
        len.to_string(),
        len,
        move || input(len),
        |k: Kernels, x: &[E], y: &mut [E]| k.sigmoid(x, y),
        plain::sigmoid,
        reference::sigmoid,
    )
    .with_bound(activation_bound::<E>(len, false))
}

fn swish_as<E: Typed>(len: usize) -> Case {
    Case::elementwise_as::<E>(
        "swish",
        len.to_string(),
        len,
        move || input(len),
        |k: Kernels, x: &[E], y: &mut [E]| k.swish(x, y),
        plain::swish,
        reference::swish,
    )
    .with_bound(activation_bound::<E>(len, true))
}

/// The fraction of the bound of a sigmoid (or swish) output.
fn activation_bound<E: Typed>(len: usize, swish: bool) -> impl Fn(&[f32], &[f32]) -> f64 {
    move |x, y| reference::fraction::activation(storage::view::<E>(x, len), swish, storage::view::<E>(y, len))
}

fn input(len: usize) -> Vec<f32> {
    data::uniform(len, -10.0, 10.0, 0x5eed_0003)
}

fn sigmoid(len: usize) -> Case {
    // The f32 row in cache is held against the bare exp (the half rows against the copy).
    Case {
        rule: Rule::CopyBeyondL2ElseExp,
        ..sigmoid_as::<f32>(len)
    }
}

fn swish(len: usize) -> Case {
    // The f32 row in cache is held against the bare exp (the half rows against the copy).
    Case {
        rule: Rule::CopyBeyondL2ElseExp,
        ..swish_as::<f32>(len)
    }
}
