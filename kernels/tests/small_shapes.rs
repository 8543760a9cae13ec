//! Every kernel once, at small shapes with tails in every dimension, on every ISA, against the
//! oracle's bound. Cheap enough for Miri, which runs it over the scalar path (the only ISA it
//! interprets) to check the pointer logic for undefined behaviour:
//! `cargo +nightly miri test -p kernels --test small_shapes`.

mod common;

use common::all_kernels;
use kernels::half::f16;
use kernels::{
    AddNorm, AttentionArgs, AttentionOptions, AttentionShape, AttentionWorkspace, BatchNormOptions, Caches,
    GauAttention, GauOptions, GauShape, GauWeights, GauWorkspace, Kernels, LayerNormOptions, Layout, LinearOptions,
    LinearWeights, MaskShape, Residual, RmsNormOptions, RowStats, SoftmaxOptions, WeightLayout, WeightType,
};
use reference::fraction;

/// `n` values in about [−2, 2), deterministic.
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let h = (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)).rotate_left(13);
            (h % 4001) as f32 / 1000.0 - 2.0
        })
        .collect()
}

fn within(what: &str, k: &Kernels, fraction: f64) {
    assert!(fraction <= 1.0, "{what} on {}: {fraction} of the bound", k.isa());
}

#[test]
fn softmax_and_elementwise() {
    for k in &all_kernels() {
        // 20 rows: a group of 16 short rows and a partial one.
        let (n, x) = (11, values(11 * 20, 1));
        let mask: Vec<f32> = (0..n).map(|j| if j == 3 { f32::NEG_INFINITY } else { 0.0 }).collect();
        let o = SoftmaxOptions {
            mask: Some(&mask),
            ..SoftmaxOptions::default()
        };
        let mut y = vec![0.0f32; x.len()];
        k.softmax(&x, &mut y, n, &o).unwrap();
        within(
            "softmax",
            k,
            fraction::softmax(&x, n, 1.0, Some(&mask), reference::MaskedRows::default(), false, &y),
        );
        let mut z = x.clone();
        k.log_softmax_inplace(&mut z, n, &o).unwrap();
        within(
            "log_softmax",
            k,
            fraction::softmax(&x, n, 1.0, Some(&mask), reference::MaskedRows::default(), true, &z),
        );
        k.exp(&x, &mut y).unwrap();
        within("exp", k, fraction::exp(&x, &y));
        k.gelu(&x, &mut y).unwrap();
        within("gelu", k, fraction::gelu(&x, &y));
        k.gelu_tanh(&x, &mut y).unwrap();
        within("gelu_tanh", k, fraction::gelu_tanh(&x, &y));
        k.swish(&x, &mut y).unwrap();
        within("swish", k, fraction::activation(&x, true, &y));
        let mut h = vec![f16::ZERO; x.len()];
        k.narrow(&x, &mut h).unwrap();
        k.gelu_inplace(&mut h).unwrap();
        let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        within("gelu f16", k, fraction::gelu(&xh, &h));
    }
}

/// Attention with its keys in blocks of 64 (a level-2 cache too small for any head) over 70
/// keys, 9 query rows in one query block: RealFormer scores in and out, a key-padding mask,
/// f32 and f16 storage; the row walk's bits.
#[test]
fn attention_key_blocks() {
    for k in &all_kernels() {
        let blocked = k.with_caches(Caches { l2: 0, ..k.caches() });
        let shape = AttentionShape {
            q_len: 9,
            kv_len: 70,
            ..AttentionShape::self_attention(1, 1, 70, 4)
        };
        let (q, kk, v) = (values(9 * 4, 5), values(70 * 4, 6), values(70 * 4, 7));
        let prev = values(9 * 70, 8);
        let padding: Vec<f32> = (0..70)
            .map(|j| if j % 9 == 4 { f32::NEG_INFINITY } else { 0.0 })
            .collect();
        let mut o = AttentionOptions::default().mask(&padding, MaskShape::KeyPadding);
        o.prev_scores = Some(&prev);
        let mut ws = AttentionWorkspace::new();
        let mut run = |k: &Kernels| {
            let (mut out, mut scores) = (vec![0.0f32; 9 * 4], vec![0.0f32; 9 * 70]);
            k.attention(&shape, &q, &kk, &v, &mut out, Some(&mut scores), &o, &mut ws)
                .unwrap();
            let (qh, kh, vh): (Vec<f16>, Vec<f16>, Vec<f16>) = (
                q.iter().map(|&x| f16::from_f32(x)).collect(),
                kk.iter().map(|&x| f16::from_f32(x)).collect(),
                v.iter().map(|&x| f16::from_f32(x)).collect(),
            );
            let mut half = vec![f16::ZERO; 9 * 4];
            k.attention(&shape, &qh, &kh, &vh, &mut half, None, &o, &mut ws)
                .unwrap();
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            (
                bits(&out),
                bits(&scores),
                half.iter().map(|h| h.to_bits()).collect::<Vec<_>>(),
            )
        };
        assert!(
            run(k) == run(&blocked),
            "attention by key blocks on {}: other bits",
            k.isa()
        );
    }
}

#[test]
fn attention() {
    for k in &all_kernels() {
        let shape = AttentionShape::self_attention(2, 2, 5, 8);
        let len = 2 * 2 * 5 * 8;
        let (q, kk, v) = (values(len, 2), values(len, 3), values(len, 4));
        let padding = [
            0.0,
            0.0,
            0.0,
            f32::NEG_INFINITY,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            f32::NEG_INFINITY,
        ];
        let o = AttentionOptions::default().mask(&padding, MaskShape::KeyPadding);
        let (mut out, mut scores) = (vec![0.0f32; len], vec![0.0f32; 2 * 2 * 5 * 5]);
        let mut ws = AttentionWorkspace::for_shape(&shape);
        k.attention(&shape, &q, &kk, &v, &mut out, Some(&mut scores), &o, &mut ws)
            .unwrap();
        let ro = reference::AttentionOptions {
            mask: Some((&padding, reference::MaskShape::KeyPadding)),
            ..Default::default()
        };
        let rs = reference::AttentionShape {
            batch: 2,
            heads: 2,
            kv_heads: 2,
            q_len: 5,
            kv_len: 5,
            head_dim: 8,
            value_dim: 8,
        };
        within(
            "attention",
            k,
            fraction::attention(&rs, &q, &kk, &v, &ro, &out, Some(&scores)),
        );
        // The same heads read in place from a fused [B, L, 3·H·D] projection, written as [B, L, H·D].
        let width = 3 * 2 * 8;
        let mut qkv = vec![0.0f32; 2 * 5 * width];
        for (part, src) in [&q, &kk, &v].into_iter().enumerate() {
            for bb in 0..2 {
                for hh in 0..2 {
                    for l in 0..5 {
                        for d in 0..8 {
                            qkv[(bb * 5 + l) * width + part * 16 + hh * 8 + d] = src[((bb * 2 + hh) * 5 + l) * 8 + d];
                        }
                    }
                }
            }
        }
        let mut tokens = vec![0.0f32; 2 * 5 * 16];
        let view = |i: usize| Layout::tokens_first(5, width, i * 16, 8);
        k.attention_args(
            AttentionArgs {
                shape,
                q: &qkv,
                q_layout: view(0),
                k: &qkv,
                k_layout: view(1),
                v: &qkv,
                v_layout: view(2),
                out: &mut tokens,
                out_layout: Layout::tokens_first(5, 16, 0, 8),
                scores: None,
                options: o,
            },
            &mut ws,
        )
        .unwrap();
        for bb in 0..2 {
            for hh in 0..2 {
                for l in 0..5 {
                    for d in 0..8 {
                        assert_eq!(
                            tokens[(bb * 5 + l) * 16 + hh * 8 + d],
                            out[((bb * 2 + hh) * 5 + l) * 8 + d],
                            "strided attention on {}",
                            k.isa()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn gau() {
    for k in &all_kernels() {
        let shape = GauShape {
            batch: 2,
            seq_len: 5,
            dim: 6,
            expand: 7,
            qk_dim: 4,
        };
        let width = 2 * 7 + 4;
        let (w_in, w_out) = (values(6 * width, 5), values(7 * 6, 6));
        let (b_in, b_out) = (values(width, 7), values(6, 8));
        let (gq, bq, gk, bk) = (values(4, 9), values(4, 10), values(4, 11), values(4, 12));
        let weights = GauWeights {
            w_in: &w_in,
            b_in: Some(&b_in),
            gamma_q: &gq,
            beta_q: &bq,
            gamma_k: &gk,
            beta_k: &bk,
            w_out: &w_out,
            b_out: Some(&b_out),
        };
        let x: Vec<f32> = values(2 * 5 * 6, 13).iter().map(|v| v / 4.0).collect();
        let lengths = [5, 3];
        for attention in [
            GauAttention::Relu2,
            GauAttention::SoftmaxPlus { min_len: 1 },
            GauAttention::Laplace,
        ] {
            let o = GauOptions {
                key_lengths: Some(&lengths),
                rope: Some(kernels::Rope::INTERLEAVED.with_width(2)),
                attention,
                ..GauOptions::default()
            };
            let mut out = vec![0.0f32; x.len()];
            k.gau(&shape, &x, &weights, &o, &mut out, &mut GauWorkspace::new())
                .unwrap();
            let params = reference::GauParams {
                w_in: &w_in,
                b_in: Some(&b_in),
                gamma_q: &gq,
                beta_q: &bq,
                gamma_k: &gk,
                beta_k: &bk,
                w_out: &w_out,
                b_out: Some(&b_out),
                scale: reference::ScoreScale::InvSqrtQkDim,
                normalizer: reference::Normalizer::SeqLen,
                key_lengths: Some(&lengths),
                causal: false,
                bias: None,
                rope: Some(reference::Rope {
                    pairs: reference::RopePairs::Interleaved,
                    width: 2,
                    base: 10000.0,
                }),
                attention: match attention {
                    GauAttention::SoftmaxPlus { min_len } => reference::Attention::SoftmaxPlus(min_len),
                    GauAttention::Laplace => reference::Attention::Laplace,
                    GauAttention::Softmax => reference::Attention::Softmax,
                    _ => reference::Attention::Relu2,
                },
            };
            let rs = reference::GauShape {
                batch: 2,
                seq_len: 5,
                dim: 6,
                expand: 7,
                qk_dim: 4,
            };
            within("gau", k, fraction::gau(&rs, &x, &params, &out));
        }
    }
}

#[test]
fn linear() {
    for k in &all_kernels() {
        let (m, kk, n) = (3, 7, 9);
        let (w, bias, x, r) = (values(kk * n, 14), values(n, 15), values(m * kk, 16), values(m * n, 17));
        let layer = LinearWeights {
            weights: &w,
            layout: WeightLayout::InOut,
            in_features: kk,
            out_features: n,
            bias: Some(&bias),
        };
        for ty in [WeightType::F32, WeightType::Bf16] {
            let packed = k.pack_linear(&layer, ty).unwrap();
            let mut y = vec![0.0f32; m * n];
            let o = LinearOptions::default()
                .activation(kernels::Activation::Gelu)
                .residual(&r);
            k.linear(&x, &packed, &mut y, &o).unwrap();
            let effective: Vec<f32> = match ty {
                WeightType::Bf16 => w.iter().map(|&v| kernels::half::bf16::from_f32(v).to_f32()).collect(),
                _ => w.clone(),
            };
            let f = fraction::linear(
                &x,
                &effective,
                (kk, n),
                Some(&bias),
                reference::Activation::Gelu,
                Some(&r),
                &y,
            );
            within("linear", k, f);
        }
    }
}

#[test]
fn norms() {
    for k in &all_kernels() {
        let (d, x, r) = (20, values(60, 18), values(60, 19));
        let (gamma, beta) = (values(d, 20), values(d, 21));
        let ln = LayerNormOptions {
            gamma: Some(&gamma),
            beta: Some(&beta),
            eps: 1e-5,
        };
        let (mut y, mut mean, mut rstd) = (vec![0.0f32; 60], [0.0f32; 3], [0.0f32; 3]);
        let stats = RowStats {
            mean: Some(&mut mean),
            rstd: Some(&mut rstd),
        };
        k.layer_norm_with_stats(&x, &mut y, d, &ln, stats).unwrap();
        within(
            "layer_norm",
            k,
            fraction::layer_norm(&x, d, Some(&gamma), Some(&beta), 1e-5, &y, Some(&mean), Some(&rstd)),
        );
        let mut h = vec![0.0f32; 60];
        k.add_and_layer_norm(AddNorm::new(&x, &r, &mut y, d).sum(&mut h), &ln)
            .unwrap();
        let sum: Vec<f32> = x.iter().zip(&r).map(|(a, b)| a + b).collect();
        assert_eq!(h, sum, "the h of add_layer_norm on {}", k.isa());
        within(
            "add_layer_norm",
            k,
            fraction::layer_norm(&sum, d, Some(&gamma), Some(&beta), 1e-5, &y, None, None),
        );
        let rms = RmsNormOptions {
            gain: Some(&gamma),
            eps: 1e-6,
        };
        let mut stream = x.clone();
        k.add_rms_norm_inplace(&mut stream, &r, &mut y, d, &Residual::default(), &rms)
            .unwrap();
        assert_eq!(stream, sum);
        within("add_rms_norm", k, fraction::rms_norm(&sum, d, Some(&gamma), 1e-6, &y));
        let (gamma, beta) = (values(3, 22), values(3, 23));
        let bn = BatchNormOptions {
            gamma: Some(&gamma),
            beta: Some(&beta),
            ..BatchNormOptions::default()
        };
        let (mut m, mut v) = ([0.1f32; 3], [1.5f32; 3]);
        let shape = [2, 3, 10];
        k.batch_norm(&x, &mut y, shape, &m, &v, &bn).unwrap();
        within(
            "batch_norm",
            k,
            fraction::batch_norm(&x, shape, &m, &v, Some(&gamma), Some(&beta), bn.eps, &y),
        );
        let (m0, v0) = (m, v);
        k.batch_norm_train(&x, &mut y, shape, &mut m, &mut v, &bn).unwrap();
        let got = reference::BatchNormTrainOutputs {
            y: &y,
            running_mean: &m,
            running_var: &v,
            mean: None,
            rstd: None,
        };
        within(
            "batch_norm_train",
            k,
            fraction::batch_norm_train(&x, shape, &m0, &v0, Some(&gamma), Some(&beta), bn.eps, bn.momentum, got),
        );
    }
}
