//! `exp` on every ISA: random and special inputs against the f64 oracle (≤ 1 ulp). The
//! exhaustive check over all 2³² inputs is `exp_exhaustive.rs`.

mod common;

use common::{all_kernels, misaligned};
use proptest::prelude::*;

fn check_exp(x: &[f32], offset: usize, inplace: bool) -> Result<(), TestCaseError> {
    for k in all_kernels() {
        let mut buf = misaligned(x, offset);
        let got = if inplace {
            k.exp_inplace(&mut buf[offset..]).unwrap();
            buf[offset..].to_vec()
        } else {
            let mut out = vec![0.0; x.len()];
            k.exp(&buf[offset..], &mut out).unwrap();
            out
        };
        reference::check_exp(x, &got).map_err(|m| TestCaseError::fail(format!("{}: {m}", k.isa())))?;
    }
    Ok(())
}

proptest! {
    #[test]
    fn exp_within_1_ulp_on_every_isa(
        x in proptest::collection::vec(prop_oneof![4 => -110.0f32..90.0, 1 => common::value(1.0)], 0..70),
        offset in 0usize..16,
        inplace in any::<bool>(),
    ) {
        check_exp(&x, offset, inplace)?;
    }
}

#[test]
fn exp_special_values() {
    let x = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        88.72283,
        88.72284,
        -87.33655,
        -103.97,
        -103.98,
        -150.0,
        1e-45,
    ];
    check_exp(&x, 3, false).unwrap();
    for k in all_kernels() {
        let mut y = [0.0; 12];
        k.exp(&x, &mut y).unwrap();
        assert_eq!(&y[..4], &[1.0, 1.0, f32::INFINITY, 0.0], "{}", k.isa());
        assert!(y[4].is_nan());
        assert_eq!(y[6], f32::INFINITY);
        assert_eq!(y[10], 0.0);
    }
}

#[test]
fn exp_length_mismatch_is_an_error() {
    let err = kernels::exp(&[1.0; 3], &mut [0.0; 2]).unwrap_err();
    assert_eq!(err.to_string(), "`out`: expected length 3 (as x), got 2");
}
