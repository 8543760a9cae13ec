//! The checks on f16 and bf16 results: the f32 bound plus one rounding to the storage type.

use reference::{
    bf16, check_activation, check_attention, check_batch_norm, check_batch_norm_train, check_exp, check_gau,
    check_layer_norm, check_rms_norm, check_softmax, f16, layer_norm, log_softmax, residual, softmax, widen,
    AttentionOptions, AttentionShape, BatchNormTrainOutputs, Element, GauParams, GauShape, MaskedRows, Normalizer,
    ScoreScale,
};

/// `E` values `k` steps away in the bit pattern (away from zero for positive `k` on positive values).
trait Bits: Element {
    fn step(self, k: i32) -> Self;
}
impl Bits for f16 {
    fn step(self, k: i32) -> Self {
        f16::from_bits((self.to_bits() as i32 + k) as u16)
    }
}
impl Bits for bf16 {
    fn step(self, k: i32) -> Self {
        bf16::from_bits((self.to_bits() as i32 + k) as u16)
    }
}

fn round<E: Element>(exact: &[f64]) -> Vec<E> {
    exact.iter().map(|&v| E::from_f64(v)).collect()
}

fn input<E: Element>(x: &[f32]) -> Vec<E> {
    x.iter().map(|&v| E::from_f32(v)).collect()
}

const X: [f32; 8] = [0.5, -1.25, 3.0, 2.0, -0.75, 1.5, 0.125, -2.5];

fn softmax_rounded_passes_and_two_ulps_off_fails<E: Bits>() {
    let x = input::<E>(&X);
    for log in [false, true] {
        let xs = widen(&x);
        let exact = if log {
            log_softmax(&xs, 4, 0.7, None, MaskedRows::Zero)
        } else {
            softmax(&xs, 4, 0.7, None, MaskedRows::Zero)
        };
        let y = round::<E>(&exact);
        check_softmax(&x, 4, 0.7, None, MaskedRows::Zero, log, &y).unwrap();
        for at in 0..y.len() {
            for k in [-2, 2] {
                let mut bad = y.clone();
                bad[at] = bad[at].step(k);
                let m = check_softmax(&x, 4, 0.7, None, MaskedRows::Zero, log, &bad).unwrap_err();
                assert_eq!((m.index, m.ty), (at, E::NAME));
                assert_eq!(m.got, bad[at].to_f32());
            }
        }
    }
}

#[test]
fn softmax_f16() {
    softmax_rounded_passes_and_two_ulps_off_fails::<f16>();
}

#[test]
fn softmax_bf16() {
    softmax_rounded_passes_and_two_ulps_off_fails::<bf16>();
}

/// Masked entries and NaN rows match the f32 value rounded to E exactly.
fn softmax_exact_matches<E: Bits>() {
    let mask = [0.0, f32::NEG_INFINITY, 0.0];
    let x = input::<E>(&[1.0, 2.0, 1.0, f32::NAN, 0.0, 0.0]);
    let mut y = round::<E>(&softmax(&widen(&x), 3, 1.0, Some(&mask), MaskedRows::Zero));
    check_softmax(&x, 3, 1.0, Some(&mask), MaskedRows::Zero, false, &y).unwrap();
    // A masked entry must be 0, not the smallest subnormal.
    y[1] = E::from_f32(0.0).step(1);
    assert_eq!(
        check_softmax(&x, 3, 1.0, Some(&mask), MaskedRows::Zero, false, &y)
            .unwrap_err()
            .index,
        1
    );
    y[1] = E::from_f32(-0.0);
    check_softmax(&x, 3, 1.0, Some(&mask), MaskedRows::Zero, false, &y).unwrap();
    y[4] = E::from_f32(0.5);
    assert_eq!(
        check_softmax(&x, 3, 1.0, Some(&mask), MaskedRows::Zero, false, &y)
            .unwrap_err()
            .index,
        4
    );
}

#[test]
fn softmax_exact_matches_f16_bf16() {
    softmax_exact_matches::<f16>();
    softmax_exact_matches::<bf16>();
}

#[test]
fn f16_overflow_of_a_finite_f32_result_is_infinity() {
    // log_softmax: scores [10⁵, 0] (scale 100): y₁ ≈ −10⁵, finite in f32, −∞ in f16.
    let x = input::<f16>(&[1000.0, 0.0]);
    let exact = log_softmax(&widen(&x), 2, 100.0, None, MaskedRows::Zero);
    assert!(exact[1] < -65504.0 && (exact[1] as f32).is_finite());
    let mut y = vec![f16::from_f32(0.0), f16::NEG_INFINITY];
    check_softmax(&x, 2, 100.0, None, MaskedRows::Zero, true, &y).unwrap();
    for wrong in [f16::MIN, f16::NAN, f16::INFINITY] {
        y[1] = wrong;
        assert_eq!(
            check_softmax(&x, 2, 100.0, None, MaskedRows::Zero, true, &y)
                .unwrap_err()
                .index,
            1
        );
    }
    // exp(12) ≈ 162755: +∞ in f16 through the ulp bracket; f16::MAX is wrong.
    let x = [f16::from_f32(12.0)];
    check_exp(&x, &[f16::INFINITY]).unwrap();
    assert!(check_exp(&x, &[f16::MAX]).is_err());
    // The same in bf16 is finite, and must be the rounding of a result within 1 ulp.
    let x = [bf16::from_f32(12.0)];
    let y = bf16::from_f64(12f64.exp());
    check_exp(&x, &[y]).unwrap();
    assert!(check_exp(&x, &[bf16::INFINITY]).is_err());
    assert!(check_exp(&x, &[y.step(2)]).is_err() && check_exp(&x, &[y.step(-2)]).is_err());
    // Beyond the f32 range (exp(100)): +∞ in both, through the same bracket.
    check_exp(&[f16::from_f32(100.0)], &[f16::INFINITY]).unwrap();
    check_exp(&[bf16::from_f32(100.0)], &[bf16::INFINITY]).unwrap();
    assert!(check_exp(&[bf16::from_f32(100.0)], &[bf16::MAX]).is_err());
}

#[test]
fn bf16_subnormal_outputs() {
    // exp(−88.5) ≈ 3.7·10⁻³⁹: an f32 and a bf16 subnormal (bf16 subnormals are multiples of 2⁻¹³³).
    let x = [bf16::from_f32(-88.5)];
    let exact = (-88.5f64).exp();
    let y = bf16::from_f64(exact);
    assert!(y.to_bits() < 0x0080 && y.to_bits() > 2);
    check_exp(&x, &[y]).unwrap();
    assert!(check_exp(&x, &[y.step(2)]).is_err() && check_exp(&x, &[y.step(-2)]).is_err());
    // exp(−95) ≈ 5.5·10⁻⁴²: an f32 subnormal, below half the smallest bf16 subnormal: 0 in bf16.
    let x = [bf16::from_f32(-95.0)];
    check_exp(&x, &[bf16::from_f32(0.0)]).unwrap();
    assert!(check_exp(&x, &[bf16::from_bits(1)]).is_err());
    // swish(−100) ≈ −3.7·10⁻⁴²: the tiny-absolute rule (within 2⁻¹²⁶), then rounded to bf16.
    let x = [bf16::from_f32(-100.0)];
    check_activation(&x, true, &[bf16::from_f32(-0.0)]).unwrap();
    check_activation(&x, true, &[bf16::from_f32(-f32::MIN_POSITIVE)]).unwrap();
    assert!(check_activation(&x, true, &[bf16::from_f32(-2.0 * f32::MIN_POSITIVE)]).is_err());
    // The same input in f16 is −100, whose swish rounds to −0 in f16.
    check_activation(&[f16::from_f32(-100.0)], true, &[f16::from_f32(-0.0)]).unwrap();
    assert!(check_activation(&[f16::from_f32(-100.0)], true, &[f16::from_bits(0x8001)]).is_err());
}

fn activation_rounded_passes<E: Bits>() {
    let x = input::<E>(&X);
    for swish in [false, true] {
        let xs = widen(&x);
        let exact = if swish {
            reference::swish(&xs)
        } else {
            reference::sigmoid(&xs)
        };
        let y = round::<E>(&exact);
        check_activation(&x, swish, &y).unwrap();
        for at in 0..y.len() {
            let mut bad = y.clone();
            bad[at] = bad[at].step(2);
            assert_eq!(check_activation(&x, swish, &bad).unwrap_err().index, at);
        }
    }
    let x = input::<E>(&[f32::NAN]);
    check_exp(&x, &x).unwrap();
    assert!(check_exp(&x, &[E::from_f32(0.0)]).is_err());
}

#[test]
fn activation_f16_bf16() {
    activation_rounded_passes::<f16>();
    activation_rounded_passes::<bf16>();
}

fn layer_norm_rounded_passes_and_two_ulps_off_fails<E: Bits>() {
    let x = input::<E>(&X);
    let gamma = [1.5f32, -0.5, 2.0, 1.0];
    let beta = [0.25f32, 0.0, -1.0, 0.5];
    let exact = layer_norm(&widen(&x), 4, Some(&gamma), Some(&beta), 1e-5);
    let y = round::<E>(&exact.y);
    let mean: Vec<f32> = exact.mean.iter().map(|&v| v as f32).collect();
    let rstd: Vec<f32> = exact.rstd.iter().map(|&v| v as f32).collect();
    check_layer_norm(&x, 4, Some(&gamma), Some(&beta), 1e-5, &y, Some(&mean), Some(&rstd)).unwrap();
    for at in 0..y.len() {
        for k in [-2, 2] {
            let mut bad = y.clone();
            bad[at] = bad[at].step(k);
            let m = check_layer_norm(&x, 4, Some(&gamma), Some(&beta), 1e-5, &bad, None, None).unwrap_err();
            assert_eq!((m.output, m.at.index, m.at.ty), ("y", at, E::NAME));
            assert!(m.to_string().contains(E::NAME));
        }
    }
    // RMSNorm and BatchNorm, the same way.
    let r = reference::rms_norm(&widen(&x), 4, Some(&gamma), 1e-6);
    let y = round::<E>(&r.y);
    check_rms_norm(&x, 4, Some(&gamma), 1e-6, &y).unwrap();
    let mut bad = y.clone();
    bad[5] = bad[5].step(2);
    assert_eq!(check_rms_norm(&x, 4, Some(&gamma), 1e-6, &bad).unwrap_err().at.index, 5);
    let (rm, rv) = ([0.5f32, -1.0], [2.0f32, 0.25]);
    let shape = [2, 2, 2];
    let b = reference::batch_norm(&widen(&x), shape, &rm, &rv, Some(&gamma[..2]), Some(&beta[..2]), 1e-5);
    let y = round::<E>(&b);
    check_batch_norm(&x, shape, &rm, &rv, Some(&gamma[..2]), Some(&beta[..2]), 1e-5, &y).unwrap();
    let mut bad = y.clone();
    bad[3] = bad[3].step(-2);
    assert!(check_batch_norm(&x, shape, &rm, &rv, Some(&gamma[..2]), Some(&beta[..2]), 1e-5, &bad).is_err());
    let t = reference::batch_norm_train(&widen(&x), shape, &rm, &rv, None, None, 1e-5, 0.1);
    let y = round::<E>(&t.y);
    let f = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
    let (nrm, nrv) = (f(&t.running_mean), f(&t.running_var));
    let got = BatchNormTrainOutputs {
        y: &y,
        running_mean: &nrm,
        running_var: &nrv,
        mean: None,
        rstd: None,
    };
    check_batch_norm_train(&x, shape, &rm, &rv, None, None, 1e-5, 0.1, got).unwrap();
    let mut bad = y.clone();
    bad[6] = bad[6].step(2);
    let got = BatchNormTrainOutputs { y: &bad, ..got };
    assert!(check_batch_norm_train(&x, shape, &rm, &rv, None, None, 1e-5, 0.1, got).is_err());
}

#[test]
fn layer_norm_f16() {
    layer_norm_rounded_passes_and_two_ulps_off_fails::<f16>();
}

#[test]
fn layer_norm_bf16() {
    layer_norm_rounded_passes_and_two_ulps_off_fails::<bf16>();
}

#[test]
fn add_layer_norm_checks_the_f32_residual_against_a_half_output() {
    // The kernel's h is the f32 residual of the widened inputs; y is rounded to bf16.
    let x = input::<bf16>(&X);
    let r = input::<bf16>(&[0.3, 0.1, -0.2, 0.7, 1.1, -0.9, 0.05, 0.4]);
    let h = residual(&widen(&x), &widen(&r), None, 1.5, 4);
    let exact = layer_norm(&h, 4, None, None, 1e-5);
    let mut y = round::<bf16>(&exact.y);
    check_layer_norm(&h, 4, None, None, 1e-5, &y, None, None).unwrap();
    check_rms_norm(
        &h,
        4,
        None,
        1e-5,
        &round::<bf16>(&reference::rms_norm(&h, 4, None, 1e-5).y),
    )
    .unwrap();
    y[2] = y[2].step(2);
    assert!(check_layer_norm(&h, 4, None, None, 1e-5, &y, None, None).is_err());
}

fn attention_and_gau<E: Bits>() {
    let shape = AttentionShape {
        batch: 1,
        heads: 2,
        kv_heads: 1,
        q_len: 2,
        kv_len: 3,
        head_dim: 2,
        value_dim: 2,
    };
    let q = input::<E>(&X);
    let k = input::<E>(&X[..6]);
    let v = input::<E>(&X[2..]);
    let opts = AttentionOptions::default();
    let res = reference::attention(&shape, &widen(&q), &widen(&k), &widen(&v), &opts);
    let scores: Vec<f32> = res.scores.iter().map(|&s| s as f32).collect();
    let mut out = round::<E>(&res.out);
    check_attention(&shape, &q, &k, &v, &opts, &out, Some(&scores)).unwrap();
    out[3] = out[3].step(2);
    let m = check_attention(&shape, &q, &k, &v, &opts, &out, Some(&scores)).unwrap_err();
    assert_eq!((m.index, m.ty), (3, E::NAME));

    let gshape = GauShape {
        batch: 1,
        seq_len: 2,
        dim: 2,
        expand: 2,
        qk_dim: 2,
    };
    let w_in: Vec<f32> = (0..12).map(|i| (i as f32 - 5.5) / 8.0).collect();
    let w_out: Vec<f32> = (0..4).map(|i| (i as f32 - 1.5) / 2.0).collect();
    let ones = [1.0f32; 2];
    let zeros = [0.0f32; 2];
    let params = GauParams {
        w_in: &w_in,
        b_in: None,
        gamma_q: &ones,
        beta_q: &zeros,
        gamma_k: &ones,
        beta_k: &zeros,
        w_out: &w_out,
        b_out: None,
        scale: ScoreScale::InvSqrtQkDim,
        normalizer: Normalizer::SeqLen,
        key_lengths: None,
        causal: false,
        bias: None,
        rope: None,
        attention: reference::Attention::Relu2,
    };
    let x = input::<E>(&X[..4]);
    let res = reference::gau(&gshape, &widen(&x), &params);
    let mut out = round::<E>(&res.out);
    check_gau(&gshape, &x, &params, &out).unwrap();
    // Two ulps of E off is far outside the f32 bound, even where the output is small.
    let at = (0..out.len())
        .max_by(|&a, &b| res.out[a].abs().total_cmp(&res.out[b].abs()))
        .unwrap();
    out[at] = out[at].step(2);
    assert_eq!(check_gau(&gshape, &x, &params, &out).unwrap_err().index, at);
}

#[test]
fn attention_and_gau_f16_bf16() {
    attention_and_gau::<f16>();
    attention_and_gau::<bf16>();
}

/// The f32 call forms of the kernels' tests, fuzz targets and benches still infer `E = f32`,
/// and the f32 rule is the f32 contract (no rounding allowance).
#[test]
fn f32_call_sites_infer_f32() {
    let x: Vec<f32> = X.to_vec();
    let mask: Option<Vec<f32>> = None;
    let y: Vec<f32> = softmax(&x, 4, 1.0, None, MaskedRows::Zero)
        .iter()
        .map(|&v| v as f32)
        .collect();
    check_softmax(&x, 4, 1.0, mask.as_deref(), MaskedRows::Zero, false, &y).unwrap();
    check_softmax(&X, 4, 1.0, None, MaskedRows::Zero, false, &y[..]).unwrap();
    let mut bad = y.clone();
    bad[0] = f32::from_bits(bad[0].to_bits() + 40);
    let m = check_softmax(&x, 4, 1.0, None, MaskedRows::Zero, false, &bad).unwrap_err();
    assert_eq!(m.ty, "f32");
    let e: Vec<f32> = x.iter().map(|&v| v.exp()).collect();
    check_exp(&x, &e).unwrap();
    check_exp(&x[..], &e).unwrap();
    let big = [f32::MAX.ln() + 0.5];
    check_exp(&big, &[f32::INFINITY]).unwrap();
    check_exp(&big, &[f32::MAX]).unwrap();
    let ln = layer_norm(&x, 4, None, None, 1e-5);
    let y: Vec<f32> = ln.y.iter().map(|&v| v as f32).collect();
    let none: Option<&[f32]> = None;
    check_layer_norm(&x, 4, none, None, 1e-5, &y, None, None).unwrap();
    check_layer_norm(&x[..], 4, None, None, 1e-5, &y[..], None, None).unwrap();
    let y: Vec<f32> = reference::rms_norm(&x, 4, None, 1e-5)
        .y
        .iter()
        .map(|&v| v as f32)
        .collect();
    check_rms_norm(&x, 4, None, 1e-5, &y).unwrap();
}
