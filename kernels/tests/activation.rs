//! `sigmoid` and `swish` on every ISA: a dense sample of all floats, random rows at every
//! offset and length, and the special values.

mod common;

use common::{all_kernels, misaligned};
use proptest::prelude::*;

fn run(x: &[f32], swish: bool, offset: usize, inplace: bool) -> Result<(), TestCaseError> {
    for k in all_kernels() {
        let mut buf = misaligned(x, offset);
        let got = if inplace {
            let xs = &mut buf[offset..];
            if swish {
                k.swish_inplace(xs)
            } else {
                k.sigmoid_inplace(xs)
            }
            .unwrap();
            xs.to_vec()
        } else {
            let mut out = vec![0.0; x.len()];
            if swish {
                k.swish(&buf[offset..], &mut out)
            } else {
                k.sigmoid(&buf[offset..], &mut out)
            }
            .unwrap();
            out
        };
        reference::check_activation(x, swish, &got)
            .map_err(|m| TestCaseError::fail(format!("{} swish {swish}: x = {:e}: {m}", k.isa(), x[m.index])))?;
    }
    Ok(())
}

proptest! {
    #[test]
    fn within_3_ulp_on_every_isa(
        x in proptest::collection::vec(prop_oneof![4 => -100.0f32..100.0, 1 => common::value(1.0)], 0..70),
        offset in 0usize..16,
        swish in any::<bool>(),
        inplace in any::<bool>(),
    ) {
        run(&x, swish, offset, inplace)?;
    }
}

/// Every 251st bit pattern: all exponents and signs, 17 million inputs per function and ISA.
#[test]
fn dense_sample_of_all_floats() {
    let x: Vec<f32> = (0..=u32::MAX).step_by(251).map(f32::from_bits).collect();
    for swish in [false, true] {
        run(&x, swish, 0, false).unwrap();
    }
}

#[test]
fn special_values() {
    let inf = f32::INFINITY;
    for k in all_kernels() {
        let mut y = [0.0; 4];
        k.sigmoid(&[f32::NAN, inf, -inf, 0.0], &mut y).unwrap();
        assert!(
            y[0].is_nan() && y[1] == 1.0 && y[2] == 0.0 && y[3] == 0.5,
            "{}: {y:?}",
            k.isa()
        );
        k.swish(&[f32::NAN, inf, -inf, 0.0], &mut y).unwrap();
        assert!(
            y[0].is_nan() && y[1] == inf && y[2] == 0.0 && y[2].is_sign_negative() && y[3] == 0.0,
            "{}: {y:?}",
            k.isa()
        );
    }
    assert_eq!(kernels::swish(&[1.0; 3], &mut [0.0; 2]).unwrap_err().arg(), Some("out"));
}
