//! Rows of the GELU activations: `gelu` (the erf form, BERT's) and `gelu_tanh` (the tanh form,
//! GPT-2's).
//!
//! Shapes as the other activations': 16 Ki elements (128 KiB working set: in L2, beyond L1),
//! held against the bare vectorized exp of the same ISA (GELU costs about one exp and a
//! division a value: the ratio says what the rest costs); and 4 Mi elements (16 MiB in + 16 MiB
//! out, beyond L2), held against the copy of the same bytes; f16 and bf16 tensors beyond L2
//! under `--full`. Inputs are uniform in [−10, 10) (pre-activations; GELU's negative tail is
//! below 2⁻⁷⁰ at −10). The plain versions are the textbook formulas: `½x·(1 + erf(x/√2))` with
//! the `libm` crate's `erff`, and `½x·(1 + tanh(√(2/π)·(x + 0.044715x³)))` with `f32::tanh`;
//! the error is measured against `reference::gelu` / `reference::gelu_tanh` (f64) as a fraction
//! of each form's bound (`reference::fraction::gelu`, `gelu_tanh`).

use kernels::half::{bf16, f16};
use kernels::Kernels;

use super::case::{Case, Rule};
use super::{no_custom, Family, Headline, Plan};
use crate::storage::{self, Typed};
use crate::{data, plain};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["gelu", "gelu_tanh"],
    cases,
    custom: no_custom,
    headlines: &[
        Headline::elements("gelu", "4194304"),
        Headline::elements("gelu_tanh", "4194304"),
    ],
};

/// Lengths: in cache, beyond L2.
const LENS: [usize; 2] = [16 * 1024, 4 * 1024 * 1024];

/// The two forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Erf,
    Tanh,
}

fn cases(plan: &Plan) -> Vec<Case> {
    let mut cases = Vec::new();
    // --quick: the erf form at both lengths (both targets), the tanh form in cache.
    for &len in &LENS {
        cases.push(f32_case(Form::Erf, len));
    }
    for &len in plan.pick(&LENS, &LENS, &LENS[..1]) {
        cases.push(f32_case(Form::Tanh, len));
    }
    // f16 and bf16 tensors, beyond L2.
    for &len in plan.pick(&LENS[1..], &[], &[]) {
        for form in [Form::Erf, Form::Tanh] {
            cases.push(case_as::<f16>(form, len));
            cases.push(case_as::<bf16>(form, len));
        }
    }
    cases
}

fn case_as<E: Typed>(form: Form, len: usize) -> Case {
    let case = match form {
        Form::Erf => Case::elementwise_as::<E>(
            "gelu",
            len.to_string(),
            len,
            move || input(len),
            |k: Kernels, x: &[E], y: &mut [E]| k.gelu(x, y),
            plain::gelu,
            reference::gelu,
        ),
        Form::Tanh => Case::elementwise_as::<E>(
            "gelu_tanh",
            len.to_string(),
            len,
            move || input(len),
            |k: Kernels, x: &[E], y: &mut [E]| k.gelu_tanh(x, y),
            plain::gelu_tanh,
            reference::gelu_tanh,
        ),
    };
    case.with_bound(move |x, y| {
        let (x, y) = (storage::view::<E>(x, len), storage::view::<E>(y, len));
        match form {
            Form::Erf => reference::fraction::gelu(x, y),
            Form::Tanh => reference::fraction::gelu_tanh(x, y),
        }
    })
}

/// The f32 case: in cache held against the bare exp (the half rows against the copy).
fn f32_case(form: Form, len: usize) -> Case {
    Case {
        rule: Rule::CopyBeyondL2ElseExp,
        ..case_as::<f32>(form, len)
    }
}

fn input(len: usize) -> Vec<f32> {
    data::uniform(len, -10.0, 10.0, 0x5eed_0901)
}
