//! The f64 counterpart of [`Encoder`](crate::Encoder), from the `reference` crate: the same
//! Post-LN stack, each operation exact in f64.
//!
//! The reference functions take their operands in f32, so each operation's f64 result is
//! rounded once to f32 where the next one reads it (one relative error `u = 2⁻²⁴` per operand,
//! as the kernels' own stores make); inside an operation nothing is rounded. The stack's output
//! is the last layer norm's f64 value.

use crate::encoder::{EncoderConfig, LayerWeights};
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

/// [`Encoder::forward`](crate::Encoder::forward) in f64 (see the module docs for where it
/// rounds): `x` `[B, L, hidden]`, `padding` `[B, L]` (0 or −∞). Returns `[B, L, hidden]`.
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
        hidden: h,
        heads,
        intermediate: f,
        eps,
    } = *config;
    let d = config.head_dim();
    let mut x32 = x.to_vec();
    let mut y = x.iter().map(|&v| v as f64).collect::<Vec<_>>();
    for w in layers {
        let qkv = reference::linear(
            &x32,
            &transpose(&w.qkv, 3 * h, h),
            (h, 3 * h),
            Some(&w.qkv_bias),
            Activation::Identity,
            None,
        );
        let qkv = round(&qkv.y);
        let part = |i| heads_first(&qkv, (batch, len, 3 * h), i * h, heads, d);
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
            ..Default::default()
        };
        let o = reference::attention(&shape, &part(0), &part(1), &part(2), &options).out;
        // [B, H, L, D] back to [B, L, H·D].
        let mut ctx = vec![0.0f32; batch * len * h];
        for b in 0..batch {
            for hd in 0..heads {
                for t in 0..len {
                    let from = ((b * heads + hd) * len + t) * d;
                    let to = (b * len + t) * h + hd * d;
                    for j in 0..d {
                        ctx[to + j] = o[from + j] as f32;
                    }
                }
            }
        }
        let attn = reference::linear(
            &ctx,
            &transpose(&w.out, h, h),
            (h, h),
            Some(&w.out_bias),
            Activation::Identity,
            Some(&x32),
        );
        let h1 = reference::layer_norm(&round(&attn.y), h, Some(&w.ln1.0), Some(&w.ln1.1), eps);
        let h1 = round(&h1.y);
        let up = reference::linear(
            &h1,
            &transpose(&w.up, f, h),
            (h, f),
            Some(&w.up_bias),
            Activation::Gelu,
            None,
        );
        let down = reference::linear(
            &round(&up.y),
            &transpose(&w.down, h, f),
            (f, h),
            Some(&w.down_bias),
            Activation::Identity,
            Some(&h1),
        );
        y = reference::layer_norm(&round(&down.y), h, Some(&w.ln2.0), Some(&w.ln2.1), eps).y;
        x32 = round(&y);
    }
    y
}
