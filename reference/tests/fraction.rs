//! The fractions of the bound agree with the checks: at most 1 exactly where the check passes,
//! and they measure what the bound allows (a correctly rounded half result reads 0).

use reference::{
    bf16, check_activation, check_exp, check_gelu, check_gelu_tanh, check_layer_norm, check_linear, check_rms_norm,
    check_softmax, f16, fraction, gelu, gelu_tanh, layer_norm, linear, rms_norm, softmax, widen, Activation,
    MaskedRows,
};

/// Deterministic values in `[lo, hi)`.
fn values(len: usize, lo: f32, hi: f32, mut seed: u64) -> Vec<f32> {
    (0..len)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((seed >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// `y` with element `at` moved by `steps` f32 ulps.
fn nudge(y: &[f32], at: usize, steps: i32) -> Vec<f32> {
    let mut out = y.to_vec();
    out[at] = f32::from_bits((out[at].to_bits() as i32 + steps) as u32);
    out
}

#[test]
fn softmax_fraction_agrees_with_the_check() {
    let n = 16;
    let x = values(4 * n, -30.0, 30.0, 1);
    let exact = softmax(&x, n, 1.0, None, MaskedRows::Zero);
    let y: Vec<f32> = exact.iter().map(|&v| v as f32).collect();
    let f = fraction::softmax(&x, n, 1.0, None, MaskedRows::Zero, false, &y);
    assert!(f <= 1.0 && check_softmax(&x, n, 1.0, None, MaskedRows::Zero, false, &y).is_ok());
    for at in [0, 7, 33, 63] {
        for steps in [1, 20, 60, 400, 100_000] {
            let bad = nudge(&y, at, steps);
            let ok = check_softmax(&x, n, 1.0, None, MaskedRows::Zero, false, &bad).is_ok();
            let f = fraction::softmax(&x, n, 1.0, None, MaskedRows::Zero, false, &bad);
            assert_eq!(ok, f <= 1.0, "at {at}, {steps} ulps: fraction {f}");
        }
    }
    let mut nan = y.clone();
    nan[5] = f32::NAN;
    assert_eq!(
        fraction::softmax(&x, n, 1.0, None, MaskedRows::Zero, false, &nan),
        f64::INFINITY
    );
}

#[test]
fn a_correctly_rounded_half_result_reads_zero() {
    // Logits spread over ±30: many probabilities underflow f16 (below 2⁻²⁴ ≈ 6e−8), whose
    // relative error is then 100%, within the bound plus the one rounding.
    let n = 64;
    let x: Vec<f16> = values(2 * n, -30.0, 30.0, 2)
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let exact = softmax(&widen(&x), n, 1.0, None, MaskedRows::Zero);
    let y: Vec<f16> = exact.iter().map(|&v| f16::from_f32(v as f32)).collect();
    assert!(y.iter().any(|v| v.to_f32() == 0.0), "some outputs underflow f16");
    check_softmax(&x, n, 1.0, None, MaskedRows::Zero, false, &y).expect("within the bound");
    assert_eq!(fraction::softmax(&x, n, 1.0, None, MaskedRows::Zero, false, &y), 0.0);
    // One step of f16 off is far outside: the f32 bound is a few ulps of f32.
    let mut bad = y.clone();
    let at = y.iter().position(|v| v.to_f32() > 0.01).expect("a large probability");
    bad[at] = f16::from_bits(bad[at].to_bits() + 1);
    assert!(check_softmax(&x, n, 1.0, None, MaskedRows::Zero, false, &bad).is_err());
    assert!(fraction::softmax(&x, n, 1.0, None, MaskedRows::Zero, false, &bad) > 1.0);
}

#[test]
fn ulp_bounds_read_as_ulps_over_the_bound() {
    let x = values(64, -80.0, 80.0, 3);
    let y: Vec<f32> = x.iter().map(|&v| (v as f64).exp() as f32).collect();
    assert_eq!(fraction::exp(&x, &y), 0.0);
    assert_eq!(fraction::exp(&x, &nudge(&y, 9, 1)), 1.0);
    assert!(fraction::exp(&x, &nudge(&y, 9, 2)) > 1.0 && check_exp(&x, &nudge(&y, 9, 2)).is_err());
    let s: Vec<f32> = reference::sigmoid(&x).iter().map(|&v| v as f32).collect();
    assert_eq!(fraction::activation(&x, false, &nudge(&s, 3, 2)), 2.0 / 3.0);
    for steps in [1, 3, 4] {
        let bad = nudge(&s, 3, steps);
        assert_eq!(
            check_activation(&x, false, &bad).is_ok(),
            fraction::activation(&x, false, &bad) <= 1.0
        );
    }
    let h: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let e: Vec<bf16> = h.iter().map(|v| bf16::from_f32(v.to_f64().exp() as f32)).collect();
    assert_eq!(fraction::exp(&h, &e), 0.0);
}

#[test]
fn norm_fractions_cover_every_output_and_agree_with_the_checks() {
    let d = 32;
    // Hard rows: a large mean against a small spread.
    let x: Vec<f32> = values(4 * d, -1.0, 1.0, 4).iter().map(|&v| 1e4 + v).collect();
    let g = values(d, 0.5, 1.5, 5);
    let b = values(d, -0.5, 0.5, 6);
    let exact = layer_norm(&x, d, Some(&g), Some(&b), 1e-5);
    let y: Vec<f32> = exact.y.iter().map(|&v| v as f32).collect();
    let f = fraction::layer_norm(&x, d, Some(&g), Some(&b), 1e-5, &y, None, None);
    assert!(f <= 1.0, "{f}");
    for steps in [1, 10, 100, 10_000, 1_000_000] {
        let bad = nudge(&y, 17, steps);
        let ok = check_layer_norm(&x, d, Some(&g), Some(&b), 1e-5, &bad, None, None).is_ok();
        assert_eq!(
            ok,
            fraction::layer_norm(&x, d, Some(&g), Some(&b), 1e-5, &bad, None, None) <= 1.0
        );
    }
    // A wrong statistic counts as much as a wrong y.
    let mean: Vec<f32> = exact.mean.iter().map(|&m| m as f32 + 1.0).collect();
    assert!(fraction::layer_norm(&x, d, Some(&g), Some(&b), 1e-5, &y, Some(&mean), None) > 1.0);
    let r = rms_norm(&x, d, Some(&g), 1e-5);
    let y: Vec<f32> = r.y.iter().map(|&v| v as f32).collect();
    for steps in [0, 1, 100, 10_000] {
        let bad = nudge(&y, 3, steps);
        let ok = check_rms_norm(&x, d, Some(&g), 1e-5, &bad).is_ok();
        assert_eq!(ok, fraction::rms_norm(&x, d, Some(&g), 1e-5, &bad) <= 1.0);
    }
}

#[test]
fn gelu_fractions_read_as_ulps_over_the_bound() {
    let x = values(64, -12.0, 12.0, 7);
    let y: Vec<f32> = gelu(&x).iter().map(|&v| v as f32).collect();
    let at = x.iter().position(|&v| v > 1.0).expect("a positive input");
    assert_eq!(fraction::gelu(&x, &y), 0.0);
    assert_eq!(fraction::gelu(&x, &nudge(&y, at, 3)), 0.5);
    for steps in [1, 6, 7, 1000] {
        let bad = nudge(&y, at, steps);
        assert_eq!(
            check_gelu(&x, &bad).is_ok(),
            fraction::gelu(&x, &bad) <= 1.0,
            "{steps} ulps"
        );
    }
    let t: Vec<f32> = gelu_tanh(&x).iter().map(|&v| v as f32).collect();
    assert_eq!(fraction::gelu_tanh(&x, &t), 0.0);
    // The bound grows with |v| on the negative side: a far negative input allows more ulps.
    let far = x.iter().position(|&v| v < -4.0).expect("a far negative input");
    for (at, steps) in [(at, 4), (at, 5), (far, 20), (far, 5000)] {
        let bad = nudge(&t, at, steps);
        assert_eq!(
            check_gelu_tanh(&x, &bad).is_ok(),
            fraction::gelu_tanh(&x, &bad) <= 1.0,
            "{steps} ulps at {}",
            x[at]
        );
    }
    let h: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let g: Vec<bf16> = gelu(&widen(&h)).iter().map(|&v| bf16::from_f32(v as f32)).collect();
    assert_eq!(fraction::gelu(&h, &g), 0.0);
}

#[test]
fn linear_fraction_agrees_with_the_check() {
    let (m, k, n) = (3, 40, 9);
    let x = values(m * k, -2.0, 2.0, 8);
    let w = values(k * n, -0.2, 0.2, 9);
    let b = values(n, -0.5, 0.5, 10);
    let r = values(m * n, -1.0, 1.0, 11);
    for act in [Activation::Identity, Activation::Gelu, Activation::GeluTanh] {
        let exact = linear(&x, &w, (k, n), Some(&b), act, Some(&r));
        let y: Vec<f32> = exact.y.iter().map(|&v| v as f32).collect();
        let f = fraction::linear(&x, &w, (k, n), Some(&b), act, Some(&r), &y);
        assert!(f <= 1.0, "{act:?}: {f}");
        for steps in [1, 100, 10_000, 1_000_000] {
            let bad = nudge(&y, 13, steps);
            let ok = check_linear(&x, &w, (k, n), Some(&b), act, Some(&r), &bad).is_ok();
            let f = fraction::linear(&x, &w, (k, n), Some(&b), act, Some(&r), &bad);
            assert_eq!(ok, f <= 1.0, "{act:?}, {steps} ulps: fraction {f}");
        }
        let mut nan = y.clone();
        nan[4] = f32::NAN;
        assert_eq!(
            fraction::linear(&x, &w, (k, n), Some(&b), act, Some(&r), &nan),
            f64::INFINITY
        );
    }
    // A half result that is the exact value correctly rounded reads 0.
    let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let exact = linear(&widen(&xh), &w, (k, n), Some(&b), Activation::Gelu, None);
    let y: Vec<f16> = exact.y.iter().map(|&v| f16::from_f32(v as f32)).collect();
    assert_eq!(
        fraction::linear(&xh, &w, (k, n), Some(&b), Activation::Gelu, None, &y),
        0.0
    );
}
