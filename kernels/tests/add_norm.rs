//! Add & Norm on named operands is the positional call, bit for bit, on every ISA; its errors
//! name the operands by their names.

mod common;

use common::{all_kernels, same};
use kernels::{AddNorm, Kernels, LayerNormOptions, Residual, RmsNormOptions};
use proptest::prelude::*;

fn bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| same(x, y))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(64), ..ProptestConfig::default() })]

    #[test]
    fn named_operands_are_the_positional_call(
        rows in 0usize..5,
        width in 1usize..70,
        seed in any::<u64>(),
        alpha in prop_oneof![Just(1.0f32), 0.5f32..3.0],
        with_bias in any::<bool>(),
        with_sum in any::<bool>(),
    ) {
        let n = rows * width;
        let value = |i: usize, salt: u64| ((i as u64 * 2654435761 + seed + salt) % 2001) as f32 / 500.0 - 2.0;
        let x: Vec<f32> = (0..n).map(|i| value(i, 1)).collect();
        let r: Vec<f32> = (0..n).map(|i| value(i, 2)).collect();
        let bias: Vec<f32> = (0..width).map(|i| value(i, 3)).collect();
        let gamma: Vec<f32> = (0..width).map(|i| value(i, 4)).collect();
        let residual = Residual { alpha, bias: with_bias.then_some(&bias[..]) };
        let ln = LayerNormOptions { gamma: Some(&gamma), ..Default::default() };
        let rms = RmsNormOptions { gain: Some(&gamma), ..Default::default() };
        for k in all_kernels() {
            for layer in [true, false] {
                let (mut want, mut want_h) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                let (mut got, mut got_h) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                let h = with_sum.then_some(&mut want_h[..]);
                let mut step = AddNorm::new(&x, &r, &mut got, width).alpha(alpha);
                if with_bias {
                    step = step.bias(&bias);
                }
                if with_sum {
                    step = step.sum(&mut got_h);
                }
                if layer {
                    k.add_layer_norm(&x, &r, &mut want, h, width, &residual, &ln).unwrap();
                    k.add_and_layer_norm(step, &ln).unwrap();
                } else {
                    k.add_rms_norm(&x, &r, &mut want, h, width, &residual, &rms).unwrap();
                    k.add_and_rms_norm(step, &rms).unwrap();
                }
                prop_assert!(bits_equal(&got, &want), "{} layer={layer}: out differs", k.isa());
                prop_assert!(bits_equal(&got_h, &want_h), "{} layer={layer}: sum differs", k.isa());
            }
        }
    }
}

#[test]
fn errors_name_the_operands() {
    let k = Kernels::best();
    let (x, r) = (vec![1.0f32; 8], vec![2.0f32; 8]);
    let ln = LayerNormOptions::default();
    let err = |step: AddNorm<f32>| k.add_and_layer_norm(step, &ln).unwrap_err().to_string();
    let mut out = vec![0.0f32; 8];
    assert_eq!(
        err(AddNorm::new(&x, &r, &mut out, 0)),
        "`width`: expected at least 1, got 0"
    );
    assert_eq!(
        err(AddNorm::new(&x, &r, &mut out, 3)),
        "`skip`: expected a length that is a multiple of width = 3, got 8"
    );
    assert_eq!(
        err(AddNorm::new(&x, &r[1..], &mut out, 4)),
        "`sublayer`: expected length 8 (the length of skip), got 7"
    );
    let mut short = vec![0.0f32; 7];
    assert_eq!(
        err(AddNorm::new(&x, &r, &mut short, 4)),
        "`out`: expected length 8 (the length of skip), got 7"
    );
    let mut sum = vec![0.0f32; 9];
    assert_eq!(
        err(AddNorm::new(&x, &r, &mut out, 4).sum(&mut sum)),
        "`sum`: expected length 8 (the length of skip), got 9"
    );
    let bias = [0.0f32; 3];
    assert!(err(AddNorm::new(&x, &r, &mut out, 4).bias(&bias)).contains("bias"));
    assert!(err(AddNorm::new(&x, &r, &mut out, 4).alpha(f32::NAN)).starts_with("`alpha`"));
}
