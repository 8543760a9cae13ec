//! The f64 counterpart of [`Encoder`](crate::Encoder), from the `reference` crate: the same
//! stack (each [`Block`]), each operation exact in f64.
//!
//! The reference functions take their operands in f32, so each operation's f64 result is
//! rounded once to f32 where the next one reads it (one relative error `u = 2⁻²⁴` per operand,
//! as the kernels' own stores make); inside an operation nothing is rounded. The stack's output
//! is the last operation's f64 value.

use crate::encoder::{Block, EncoderConfig, LayerWeights};
use reference::{Activation, AttentionOptions, AttentionShape, MaskShape};

fn round(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&v| v as f32).collect()
}

/// `[out, in]` to the `[in, out]` that `reference::linear` multiplies by.
fn transpose(w: &[f32], out: usize, inp: usize) -> Vec<f32> {
    let mut t = vec![0.0; w.len()];
    for o in 0..out {
        for i in 0..inp {
            t[i * out + o] = w[o * inp + i];
        }
    }
    t
}

/// The columns `[offset, offset + heads·dim)` of `qkv` `[B, L, width]`, as `[B, H, L, D]`.
fn heads_first(
    qkv: &[f32],
    (batch, len, width): (usize, usize, usize),
    offset: usize,
    heads: usize,
    dim: usize,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(batch * heads * len * dim);
    for b in 0..batch {
        for h in 0..heads {
            for t in 0..len {
                let at = (b * len + t) * width + offset + h * dim;
                out.extend_from_slice(&qkv[at..at + dim]);
            }
        }
    }
    out
}

/// `Attention(qkv)` `[B, L, 3·hidden]` → `[B, L, hidden]` in f64, rounded to f32, and the raw
/// scores `[B, H, L, L]` (rounded to f32, as the kernels carry them).
fn attention(
    config: &EncoderConfig,
    qkv: &[f32],
    (batch, len): (usize, usize),
    padding: &[f32],
    prev_scores: Option<&[f32]>,
) -> (Vec<f32>, Vec<f32>) {
    let (h, heads, d) = (config.hidden, config.heads, config.head_dim());
    let part = |i| heads_first(qkv, (batch, len, 3 * h), i * h, heads, d);
    let shape = AttentionShape {
        batch,
        heads,
        kv_heads: heads,
        q_len: len,
        kv_len: len,
        head_dim: d,
        value_dim: d,
    };
    let options = AttentionOptions {
        mask: Some((padding, MaskShape::KeyPadding)),
        prev_scores,
        ..Default::default()
    };
    let r = reference::attention(&shape, &part(0), &part(1), &part(2), &options);
    // [B, H, L, D] back to [B, L, H·D].
    let mut ctx = vec![0.0f32; batch * len * h];
    for b in 0..batch {
        for hd in 0..heads {
            for t in 0..len {
                let from = ((b * heads + hd) * len + t) * d;
                let to = (b * len + t) * h + hd * d;
                for j in 0..d {
                    ctx[to + j] = r.out[from + j] as f32;
                }
            }
        }
    }
    (ctx, round(&r.scores))
}

/// `x·Wᵀ + b (+ residual)`, `w` `[out, in]`, with the activation, in f64.
fn linear(
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    (inp, out): (usize, usize),
    act: Activation,
    residual: Option<&[f32]>,
) -> Vec<f64> {
    reference::linear(x, &transpose(w, out, inp), (inp, out), Some(bias), act, residual).y
}

fn norm(x: &[f32], d: usize, (gamma, beta): &(Vec<f32>, Vec<f32>), eps: f32) -> Vec<f64> {
    reference::layer_norm(x, d, Some(gamma), Some(beta), eps).y
}

/// [`Encoder::forward`](crate::Encoder::forward) in f64 (see the module docs for where it
/// rounds), for each [`Block`]: `x` `[B, L, hidden]`, `padding` `[B, L]` (0 or −∞). Returns
/// `[B, L, hidden]`.
///
/// # Panics
/// If a length does not match `config`.
pub fn forward_f64(
    config: &EncoderConfig,
    layers: &[LayerWeights],
    x: &[f32],
    batch: usize,
    len: usize,
    padding: &[f32],
) -> Vec<f64> {
    let EncoderConfig {
        block,
        hidden: h,
        intermediate: f,
        eps,
        ..
    } = *config;
    let mut x32 = x.to_vec();
    let mut y = x.iter().map(|&v| v as f64).collect::<Vec<_>>();
    let mut scores: Option<Vec<f32>> = None;
    for w in layers {
        y = match block {
            Block::PostLn | Block::RealFormer => {
                let qkv = round(&linear(
                    &x32,
                    &w.qkv,
                    &w.qkv_bias,
                    (h, 3 * h),
                    Activation::Identity,
                    None,
                ));
                let prev = scores.as_deref().filter(|_| block == Block::RealFormer);
                let (ctx, s) = attention(config, &qkv, (batch, len), padding, prev);
                scores = Some(s);
                let attn = linear(&ctx, &w.out, &w.out_bias, (h, h), Activation::Identity, Some(&x32));
                let h1 = round(&norm(&round(&attn), h, &w.ln1, eps));
                let up = linear(&h1, &w.up, &w.up_bias, (h, f), Activation::Gelu, None);
                let down = linear(
                    &round(&up),
                    &w.down,
                    &w.down_bias,
                    (f, h),
                    Activation::Identity,
                    Some(&h1),
                );
                norm(&round(&down), h, &w.ln2, eps)
            }
            Block::PreLn => {
                let n1 = round(&norm(&x32, h, &w.ln1, eps));
                let qkv = round(&linear(
                    &n1,
                    &w.qkv,
                    &w.qkv_bias,
                    (h, 3 * h),
                    Activation::Identity,
                    None,
                ));
                let (ctx, _) = attention(config, &qkv, (batch, len), padding, None);
                let h1 = round(&linear(
                    &ctx,
                    &w.out,
                    &w.out_bias,
                    (h, h),
                    Activation::Identity,
                    Some(&x32),
                ));
                let n2 = round(&norm(&h1, h, &w.ln2, eps));
                let up = linear(&n2, &w.up, &w.up_bias, (h, f), Activation::Gelu, None);
                linear(
                    &round(&up),
                    &w.down,
                    &w.down_bias,
                    (f, h),
                    Activation::Identity,
                    Some(&h1),
                )
            }
        };
        x32 = round(&y);
    }
    y
}
