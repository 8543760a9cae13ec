//! Rows of softmax, log-softmax and exp.
//!
//! Shapes: rows that stay in cache (working set 128 KiB: in L2, beyond L1), held against the
//! bare vectorized exp of the same ISA; and 16 MiB in + 16 MiB out, beyond L2, held against the
//! copy of the same bytes. Both from short rows (32 to 256 values, attention's rows in
//! encoders, where the per-row reductions weigh most) to long ones. Inputs are uniform in [−10, 10) (attention-like logits; the
//! exponents then span [−20, 0]); exp's inputs are uniform in [−80, 80) (normal results).

use kernels::half::{bf16, f16};
use kernels::{Kernels, SoftmaxOptions};
use reference::MaskedRows;

use super::case::{Case, Rule};
use super::{no_custom, Family, Headline, Plan};
use crate::storage::{self, Typed};
use crate::{data, plain};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["softmax", "log_softmax", "exp"],
    cases,
    custom: no_custom,
    headlines: &[
        Headline::elements("softmax", "4096x1024"),
        Headline::elements("log_softmax", "4096x1024"),
        Headline::elements("exp", "4194304"),
    ],
};

/// `(rows, n)`: in cache (128 KiB working set), then beyond L2 (32 MiB working set).
const ROWS: [(usize, usize); 11] = [
    (512, 32),
    (256, 64),
    (128, 128),
    (64, 256),
    (16, 1024),
    (4, 4096),
    (65536, 64),
    (16384, 256),
    (4096, 1024),
    (1024, 4096),
    (131072, 32),
];
const ROWS_DEFAULT: [(usize, usize); 5] = [(512, 32), (256, 64), (128, 128), (64, 256), (4096, 1024)];
const ROWS_QUICK: [(usize, usize); 3] = [(128, 128), (4, 4096), (4096, 1024)];
const LOG_ROWS_QUICK: [(usize, usize); 2] = [(16, 1024), (4096, 1024)];
/// exp lengths: in cache, beyond L2.
const EXP_LENS: [usize; 2] = [16 * 1024, 4 * 1024 * 1024];

fn cases(plan: &Plan) -> Vec<Case> {
    let mut cases = Vec::new();
    for &(rows, n) in plan.pick(&ROWS, &ROWS_DEFAULT, &ROWS_QUICK) {
        cases.push(softmax(rows, n));
    }
    for &(rows, n) in plan.pick(&ROWS, &ROWS_DEFAULT, &LOG_ROWS_QUICK) {
        cases.push(log_softmax(rows, n));
    }
    for &len in &EXP_LENS {
        cases.push(exp(len));
    }
    // The same kernels over f16 and bf16 tensors.
    for &(rows, n) in plan.pick(&HALF_ROWS, &HALF_ROWS_QUICK, &HALF_ROWS_QUICK) {
        cases.push(softmax_as::<f16>(rows, n));
        cases.push(softmax_as::<bf16>(rows, n));
    }
    for &(rows, n) in plan.pick(&HALF_LOG_ROWS, &[], &[]) {
        cases.push(log_softmax_as::<f16>(rows, n));
        cases.push(log_softmax_as::<bf16>(rows, n));
    }
    for &len in plan.pick(&EXP_LENS[1..], &[], &[]) {
        cases.push(exp_as::<f16>(len));
        cases.push(exp_as::<bf16>(len));
    }
    cases
}

/// Half-typed shapes: in cache, and the two beyond-L2 shapes of f32 (16 MiB in + 16 MiB out
/// there, 8 + 8 MiB here: still beyond L2).
const HALF_ROWS: [(usize, usize); 3] = [(16, 1024), (4096, 1024), (1024, 4096)];
const HALF_ROWS_QUICK: [(usize, usize); 1] = [(4096, 1024)];
const HALF_LOG_ROWS: [(usize, usize); 1] = [(4096, 1024)];

/// The fraction of the bound of a softmax (or log-softmax) output, with the report's options.
fn softmax_bound<E: Typed>(len: usize, n: usize, log: bool) -> impl Fn(&[f32], &[f32]) -> f64 {
    move |x, y| {
        let (x, y) = (storage::view::<E>(x, len), storage::view::<E>(y, len));
        reference::fraction::softmax(x, n, 1.0, None, MaskedRows::Zero, log, y)
    }
}

fn softmax_as<E: Typed>(rows: usize, n: usize) -> Case {
    Case::elementwise_as::<E>(
        "softmax",
        format!("{rows}x{n}"),
        rows * n,
        move || logits(rows * n),
        move |k: Kernels, x: &[E], y: &mut [E]| k.softmax(x, y, n, &SoftmaxOptions::default()),
        move |x, y| plain::softmax(x, y, n),
        move |x| reference::softmax(x, n, 1.0, None, MaskedRows::Zero),
    )
    .with_bound(softmax_bound::<E>(rows * n, n, false))
}

fn exp_as<E: Typed>(len: usize) -> Case {
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
    .with_bound(move |x, y| reference::fraction::exp(storage::view::<E>(x, len), storage::view::<E>(y, len)))
}

fn log_softmax_as<E: Typed>(rows: usize, n: usize) -> Case {
    Case::elementwise_as::<E>(
        "log_softmax",
        format!("{rows}x{n}"),
        rows * n,
        move || logits(rows * n),
        move |k: Kernels, x: &[E], y: &mut [E]| k.log_softmax(x, y, n, &SoftmaxOptions::default()),
        move |x, y| plain::log_softmax(x, y, n),
        move |x| reference::log_softmax(x, n, 1.0, None, MaskedRows::Zero),
    )
    .with_bound(softmax_bound::<E>(rows * n, n, true))
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
        .with_bound(reference::fraction::exp)
    }
}
