//! `gelu` and `gelu_tanh` on every ISA: a dense sample of all floats, every f16 and bf16
//! input, random rows at every offset and length, and the special values.

mod common;

use common::{all_kernels, misaligned_as};
use kernels::half::{bf16, f16};
use kernels::{Element, Kernels};
use proptest::prelude::*;

/// The form of GELU a test runs.
#[derive(Clone, Copy, Debug)]
enum Form {
    Erf,
    Tanh,
}

/// `form` of `x` on `k`, in place or not.
fn apply<E: Element>(k: &Kernels, form: Form, x: &[E], offset: usize, inplace: bool) -> Vec<E> {
    let mut buf = misaligned_as(x, offset);
    let xs = &mut buf[offset..];
    if inplace {
        match form {
            Form::Erf => k.gelu_inplace(xs),
            Form::Tanh => k.gelu_tanh_inplace(xs),
        }
        .unwrap();
        xs.to_vec()
    } else {
        let mut out = vec![E::default(); x.len()];
        match form {
            Form::Erf => k.gelu(xs, &mut out),
            Form::Tanh => k.gelu_tanh(xs, &mut out),
        }
        .unwrap();
        out
    }
}

fn check<E: Element + reference::Element>(x: &[E], form: Form, offset: usize, inplace: bool) -> Result<(), String> {
    for k in all_kernels() {
        let got = apply(&k, form, x, offset, inplace);
        match form {
            Form::Erf => reference::check_gelu(x, &got),
            Form::Tanh => reference::check_gelu_tanh(x, &got),
        }
        .map_err(|m| {
            format!(
                "{} {form:?} {}: x = {:?}: {m}",
                k.isa(),
                <E as Element>::NAME,
                x[m.index]
            )
        })?;
    }
    Ok(())
}

proptest! {
    #[test]
    fn within_the_bound_on_every_isa(
        x in proptest::collection::vec(prop_oneof![4 => -12.0f32..12.0, 1 => common::value(100.0)], 0..70),
        offset in 0usize..16,
        tanh in any::<bool>(),
        inplace in any::<bool>(),
    ) {
        let form = if tanh { Form::Tanh } else { Form::Erf };
        check(&x, form, offset, inplace).map_err(TestCaseError::fail)?;
    }
}

/// Every 251st bit pattern: all exponents and signs, 17 million inputs per form and ISA.
#[test]
fn dense_sample_of_all_floats() {
    let x: Vec<f32> = (0..=u32::MAX).step_by(251).map(f32::from_bits).collect();
    for form in [Form::Erf, Form::Tanh] {
        check(&x, form, 0, false).unwrap();
    }
}

/// Every 509th f32 of `[−16, 16]`: the range where GELU is neither `x` nor below 2⁻¹²⁶, twice
/// as densely again as the whole sample above.
#[test]
fn dense_in_the_range_that_matters() {
    let x: Vec<f32> = (0..=16.0f32.to_bits())
        .step_by(509)
        .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
        .collect();
    for form in [Form::Erf, Form::Tanh] {
        check(&x, form, 0, false).unwrap();
    }
}

/// Every f16 and every bf16 input, in place and not: the f32 bound plus one rounding.
#[test]
fn every_half_input() {
    let f16s: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    let bf16s: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
    for form in [Form::Erf, Form::Tanh] {
        for inplace in [false, true] {
            check(&f16s, form, 3, inplace).unwrap();
            check(&bf16s, form, 5, inplace).unwrap();
        }
    }
}

#[test]
fn special_values() {
    let inf = f32::INFINITY;
    for k in all_kernels() {
        for form in [Form::Erf, Form::Tanh] {
            let y = apply(&k, form, &[f32::NAN, inf, -inf, 0.0, -0.0], 0, false);
            assert!(
                y[0].is_nan() && y[1] == inf && y[2] == 0.0 && y[2].is_sign_negative() && y[3] == 0.0,
                "{} {form:?}: {y:?}",
                k.isa()
            );
        }
    }
    assert_eq!(
        kernels::gelu(&[1.0f32; 3], &mut [0.0; 2]).unwrap_err().arg(),
        Some("out")
    );
    assert_eq!(
        kernels::gelu_tanh(&[1.0f32; 3], &mut [0.0; 4]).unwrap_err().arg(),
        Some("out")
    );
}

/// A GELU that computes `½x(1 + erf(x/√2))` in f32 (PyTorch's) fails the erf form's bound in the
/// negative half: the check catches the cancellation it exists to rule out.
#[test]
fn the_bound_rejects_the_cancelling_formula() {
    let x: Vec<f32> = (1..=60).map(|i| -0.1 * i as f32).collect();
    let exact = reference::gelu(&x);
    // `1 + erf(x/√2)` in f32 from the exact erf rounded to f32: the best that formula can do.
    let naive: Vec<f32> = x
        .iter()
        .zip(&exact)
        .map(|(&v, &e)| {
            let erf = (2.0 * e / v as f64 - 1.0) as f32;
            0.5 * v * (1.0 + erf)
        })
        .collect();
    assert!(reference::check_gelu(&x, &naive).is_err());
}

/// Rows run two vectors in lockstep and their tail one vector, or part of one, at a time:
/// every value of a row gets the bits it gets alone, on every ISA, storage type and form.
#[test]
fn a_row_gives_each_value_the_bits_it_gets_alone() {
    fn each_alone<E: Element>(k: &Kernels, form: Form, x: &[E]) {
        let row = apply(k, form, x, 0, false);
        for (i, (&v, &got)) in x.iter().zip(&row).enumerate() {
            let alone = apply(k, form, &[v], 0, false)[0];
            assert_eq!(
                got.to_f32().to_bits(),
                alone.to_f32().to_bits(),
                "{} {form:?} {}: x[{i}] = {v:?} in a row of {}",
                k.isa(),
                E::NAME,
                x.len()
            );
        }
    }
    // Values spread over the whole range, the specials among them.
    let mut state = 0x9e37_79b9_u32;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        match state % 16 {
            0 => common::SPECIALS[(state >> 4) as usize % common::SPECIALS.len()],
            1 => f32::from_bits(state),
            _ => (state >> 8) as f32 / (1 << 24) as f32 * 28.0 - 14.0,
        }
    };
    for k in all_kernels() {
        for form in [Form::Erf, Form::Tanh] {
            for len in [1, 7, 16, 31, 32, 33, 64, 97, 200] {
                let x: Vec<f32> = (0..len).map(|_| next()).collect();
                each_alone(&k, form, &x);
                each_alone(&k, form, &x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>());
                each_alone(&k, form, &x.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>());
            }
        }
    }
}
