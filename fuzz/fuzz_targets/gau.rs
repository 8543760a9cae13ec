//! Differential fuzzing of the GAU on every ISA: small shapes, every option, values in
//! [−4, 4] (and −∞ biases) checked against the oracle's running error bound; then the same call with one raw
//! bit pattern (NaN, ±∞, 1e38, subnormal) injected, where only memory safety is asserted (ASan)
//! because the bound excludes overflow. Inconsistent lengths must come back as `Err`.
#![no_main]

use arbitrary::Arbitrary;
use kernels::{
    available_isas, AdditiveMask, GauAttention, GauOptions, GauShape, GauWeights, GauWorkspace, Kernels, MaskShape, Normalizer, Rope,
    RopePairs, ScoreScale,
};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    dims: [u8; 5],
    values: Vec<i16>,
    options: [u8; 6],
    key_lengths: Vec<u8>,
    causal: bool,
    bias: bool,
    inject: Option<(u16, u32)>,
    skew: bool,
}

fuzz_target!(|input: Input| {
    let [b, t, d, e, s] = input.dims;
    let s = (s % 10) as usize + 1;
    // Every pairing, over the whole width or an even part of it, with the usual base or another.
    let part = 2 * (input.options[5] as usize % (s + 1));
    let rope = [None, Some(Rope::INTERLEAVED), Some(Rope::HALF_SPLIT)][input.options[0] as usize % 3].map(|r| {
        let r = if input.options[5] & 0x80 != 0 { r.with_width(part.min(2 * s)) } else { r };
        if input.options[5] & 0x40 != 0 { r.with_base(500.0) } else { r }
    });
    let shape = GauShape {
        batch: (b % 3) as usize,
        seq_len: (t % 40) as usize,
        dim: (d % 20) as usize + 1,
        expand: (e % 40) as usize + 1,
        qk_dim: if rope.is_some() { 2 * s } else { s },
    };
    let GauShape { batch, seq_len, dim, expand, qk_dim } = shape;
    let w = 2 * expand + qk_dim;
    let mut next = 0usize;
    let mut take = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| {
                next += 1;
                input.values.get(next % input.values.len().max(1)).map_or(0.5, |&v| v as f32 / 8192.0) * scale
            })
            .collect()
    };
    let mut x = take(batch * seq_len * dim, 1.0);
    let w_in = take(dim * w, 1.0 / (dim as f32).sqrt());
    let b_in = take(w, 0.5);
    let (gq, bq, gk, bk) = (take(qk_dim, 1.0), take(qk_dim, 0.5), take(qk_dim, 1.0), take(qk_dim, 0.5));
    let w_out = take(expand * dim, 1.0 / (expand as f32).sqrt());
    let b_out = take(dim, 0.5);
    // The bias in each layout; a value below −0.45 becomes −∞ (a masked key).
    let bias_shape = [MaskShape::Shared, MaskShape::PerBatch, MaskShape::KeyPadding][input.options[4] as usize % 3];
    let bias_len = match bias_shape {
        MaskShape::Shared => seq_len * seq_len,
        MaskShape::KeyPadding => batch * seq_len,
        _ => batch * seq_len * seq_len,
    };
    let bias = input.bias.then(|| {
        let mut v = take(bias_len, 0.5);
        if input.options[4] & 0x80 != 0 {
            v.iter_mut().filter(|x| **x < -0.45).for_each(|x| *x = f32::NEG_INFINITY);
        }
        v
    });
    let lens: Vec<usize> = (0..batch).map(|i| input.key_lengths.get(i).map_or(seq_len, |&l| l as usize % (seq_len + 1))).collect();
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
    let scale = [ScoreScale::InvSqrtQkDim, ScoreScale::InvSeqLen, ScoreScale::Value(0.7)][input.options[1] as usize % 3];
    let normalizer = [Normalizer::SeqLen, Normalizer::ValidKeys, Normalizer::Value(3.0)][input.options[2] as usize % 3];
    let opts = GauOptions {
        scale,
        normalizer,
        key_lengths: (input.options[3] % 2 == 1).then_some(lens.as_slice()),
        causal: input.causal,
        bias: bias.as_deref().map(|values| AdditiveMask { values, shape: bias_shape }),
        rope,
        attention: match input.options[3] >> 6 {
            0 => GauAttention::Relu2,
            1 => GauAttention::Laplace,
            2 => GauAttention::Softmax,
            _ => GauAttention::SoftmaxPlus { min_len: (input.options[0] % 16) as usize + 1 },
        },
    };
    let out_len = batch * seq_len * dim;
    let mut ws = GauWorkspace::new();
    let rshape = reference::GauShape { batch, seq_len, dim, expand, qk_dim };
    let rparams = reference::GauParams {
        w_in: &w_in,
        b_in: Some(&b_in),
        gamma_q: &gq,
        beta_q: &bq,
        gamma_k: &gk,
        beta_k: &bk,
        w_out: &w_out,
        b_out: Some(&b_out),
        scale: match scale {
            ScoreScale::InvSqrtQkDim => reference::ScoreScale::InvSqrtQkDim,
            ScoreScale::InvSeqLen => reference::ScoreScale::InvSeqLen,
            ScoreScale::Value(v) => reference::ScoreScale::Value(v),
        },
        normalizer: match normalizer {
            Normalizer::SeqLen => reference::Normalizer::SeqLen,
            Normalizer::ValidKeys => reference::Normalizer::ValidKeys,
            Normalizer::Value(v) => reference::Normalizer::Value(v),
        },
        key_lengths: opts.key_lengths,
        causal: input.causal,
        bias: bias.as_deref().map(|v| {
            let shape = match bias_shape {
                MaskShape::Shared => reference::MaskShape::Shared,
                MaskShape::KeyPadding => reference::MaskShape::KeyPadding,
                _ => reference::MaskShape::PerBatch,
            };
            (v, shape)
        }),
        rope: rope.map(|r| reference::Rope {
            pairs: match r.pairs {
                RopePairs::Interleaved => reference::RopePairs::Interleaved,
                RopePairs::HalfSplit => reference::RopePairs::HalfSplit,
            },
            width: r.width.unwrap_or(qk_dim),
            base: r.base,
        }),
        attention: match opts.attention {
            GauAttention::Relu2 => reference::Attention::Relu2,
            GauAttention::Laplace => reference::Attention::Laplace,
            GauAttention::Softmax => reference::Attention::Softmax,
            GauAttention::SoftmaxPlus { min_len } => reference::Attention::SoftmaxPlus(min_len),
        },
    };
    for isa in available_isas() {
        let k = Kernels::for_isa(isa).unwrap();
        if input.skew {
            let err = k.gau(&shape, &x, &weights, &opts, &mut vec![0.0; out_len + 1], &mut ws).unwrap_err();
            assert_eq!(err.arg(), Some("out"));
            continue;
        }
        let mut out = vec![0.0f32; out_len];
        k.gau(&shape, &x, &weights, &opts, &mut out, &mut ws).unwrap_or_else(|e| panic!("{isa}: {e}"));
        if let Err(m) = reference::check_gau(&rshape, &x, &rparams, &out) {
            panic!("{isa}: {m}");
        }
        // Weights packed once: the same bits.
        let packed = k.pack_gau_weights(&shape, &weights).unwrap_or_else(|e| panic!("{isa}: {e}"));
        let mut again = vec![0.0f32; out_len];
        k.gau_packed(&shape, &x, &packed, &opts, &mut again, &mut ws)
            .unwrap_or_else(|e| panic!("{isa}: {e}"));
        assert!(
            out.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan()),
            "{isa}: packed weights differ"
        );
    }
    if let (Some((at, bits)), false) = (input.inject, x.is_empty()) {
        let n = x.len();
        x[at as usize % n] = f32::from_bits(bits);
        for isa in available_isas() {
            let mut out = vec![0.0f32; out_len];
            Kernels::for_isa(isa).unwrap().gau(&shape, &x, &weights, &opts, &mut out, &mut ws).unwrap();
        }
    }
});
