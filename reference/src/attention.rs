//! Scaled-dot-product attention with an additive mask and RealFormer residual scores, in f64,
//! straight from the formulas: materialized scores, two-pass softmax.

use crate::MaskedRows;

/// Shapes of one attention call: `Q[B,H,Lq,Dk]`, `K[B,Hkv,Lk,Dk]`, `V[B,Hkv,Lk,Dv]`,
/// `O[B,H,Lq,Dv]`, scores `[B,H,Lq,Lk]`. `H` must be a multiple of `Hkv`: query head `h`
/// reads key/value head `h / (H/Hkv)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// `B`.
    pub batch: usize,
    /// `H`, the query heads.
    pub heads: usize,
    /// `Hkv`, the key/value heads.
    pub kv_heads: usize,
    /// `Lq`.
    pub q_len: usize,
    /// `Lk`.
    pub kv_len: usize,
    /// `Dk`.
    pub head_dim: usize,
    /// `Dv`.
    pub value_dim: usize,
}

/// Which scores an additive mask gives: one `[Lq,Lk]` matrix for everything, one per batch
/// (`[B,1,Lq,Lk]`), or one per batch and head (`[B,H,Lq,Lk]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskShape {
    /// `[Lq, Lk]`, broadcast over B and H.
    Shared,
    /// `[B, 1, Lq, Lk]`, broadcast over H.
    PerBatch,
    /// `[B, H, Lq, Lk]`.
    PerHead,
    /// `[B, Lk]`, broadcast over H and the queries (a key-padding mask).
    KeyPadding,
}

/// The options of an attention call, as the oracle takes them.
#[derive(Debug, Clone, Copy)]
pub struct AttentionOptions<'a> {
    /// Multiplies `Q·Kᵀ`; `None` means `1/√Dk`.
    pub scale: Option<f32>,
    /// Additive mask and its shape.
    pub mask: Option<(&'a [f32], MaskShape)>,
    /// Valid keys per batch: key `j ≥ key_lengths[b]` is masked.
    pub key_lengths: Option<&'a [usize]>,
    /// Masks key `j` for query `i` when `j > i + Lk − Lq` (bottom-right aligned).
    pub causal: bool,
    /// Previous layer's scores `P[B,H,Lq,Lk]`, added to `scale·Q·Kᵀ`.
    pub prev_scores: Option<&'a [f32]>,
    /// RealFormer's running mean: the softmax sees `S/(ℓ+1)`.
    pub running_mean_layer: Option<u32>,
    /// Carry the post-mask scores `Z` instead of `S` in the scores output.
    pub carry_masked: bool,
    /// Fully masked rows: 0 or NaN.
    pub masked_rows: MaskedRows,
}

impl Default for AttentionOptions<'_> {
    fn default() -> Self {
        AttentionOptions {
            scale: None,
            mask: None,
            key_lengths: None,
            causal: false,
            prev_scores: None,
            running_mean_layer: None,
            carry_masked: false,
            masked_rows: MaskedRows::Zero,
        }
    }
}

/// What the oracle computes: the output, the scores it would carry, and per score the exact
/// attention weight and the magnitude `A_ij = |scale|·Σ_d |Q_id·K_jd| + |P_ij|` that bounds
/// the rounding error of the score (for error bounds).
#[derive(Debug, Clone)]
pub struct AttentionResult {
    /// `O[B,H,Lq,Dv]`.
    pub out: Vec<f64>,
    /// `S` (or `Z` with `carry_masked`) `[B,H,Lq,Lk]`; −∞ where `Z` is masked.
    pub scores: Vec<f64>,
    /// The softmax weights `w_ij = exp(z_ij − m_i)/d_i` `[B,H,Lq,Lk]` (0 where masked).
    pub weights: Vec<f64>,
    /// `A_ij` as above, `[B,H,Lq,Lk]`.
    pub magnitude: Vec<f64>,
    /// `Σ_d |Q_id·K_jd|`, the magnitude of the unscaled dot product, `[B,H,Lq,Lk]`.
    pub dot_magnitude: Vec<f64>,
    /// `Z_ij` (−∞ where masked), `[B,H,Lq,Lk]`.
    pub masked_scores: Vec<f64>,
    /// `1/(ℓ+1)` with a running mean, else 1: the factor between `S` and `L`.
    pub mean_factor: f64,
}

/// Attention in f64:
///
/// ```text
/// S = scale·Q·Kᵀ + P
/// L = S/(ℓ+1) with a running mean, else S
/// Z = L + M, and −∞ where M = −∞, where j ≥ key_lengths[b], or (causal) where j > i + Lk − Lq
/// O = softmax_j(Z)·V          (a fully masked row: 0, or NaN under MaskedRows::Nan)
/// ```
///
/// A row with a NaN or +∞ among its unmasked `Z` is NaN. The scores output is `S` (or `Z`),
/// computed for every key, padded or not. `O` sums over the unmasked keys only: a masked key
/// contributes nothing, whatever its K and V hold.
///
/// # Panics
/// If a slice does not have the length its shape gives.
pub fn attention(shape: &AttentionShape, q: &[f32], k: &[f32], v: &[f32], opts: &AttentionOptions) -> AttentionResult {
    let AttentionShape {
        batch,
        heads,
        kv_heads,
        q_len,
        kv_len,
        head_dim,
        value_dim,
    } = *shape;
    assert_eq!(q.len(), batch * heads * q_len * head_dim, "q");
    assert_eq!(k.len(), batch * kv_heads * kv_len * head_dim, "k");
    assert_eq!(v.len(), batch * kv_heads * kv_len * value_dim, "v");
    assert!(
        kv_heads > 0 && heads % kv_heads == 0,
        "heads must be a multiple of kv_heads"
    );
    let group = heads / kv_heads;
    let scale = opts.scale.map_or(1.0 / (head_dim as f64).sqrt(), |s| s as f64);
    let n_scores = batch * heads * q_len * kv_len;
    let mut res = AttentionResult {
        out: vec![0.0; batch * heads * q_len * value_dim],
        scores: vec![0.0; n_scores],
        weights: vec![0.0; n_scores],
        magnitude: vec![0.0; n_scores],
        dot_magnitude: vec![0.0; n_scores],
        masked_scores: vec![0.0; n_scores],
        mean_factor: opts.running_mean_layer.map_or(1.0, |layer| 1.0 / (layer as f64 + 1.0)),
    };
    let mut z = vec![0.0f64; kv_len];
    for b in 0..batch {
        for h in 0..heads {
            let hk = h / group;
            for i in 0..q_len {
                let qi = &q[((b * heads + h) * q_len + i) * head_dim..][..head_dim];
                let row = ((b * heads + h) * q_len + i) * kv_len;
                for (j, zj) in z.iter_mut().enumerate() {
                    let kj = &k[((b * kv_heads + hk) * kv_len + j) * head_dim..][..head_dim];
                    let dot: f64 = qi.iter().zip(kj).map(|(&a, &c)| a as f64 * c as f64).sum();
                    let abs: f64 = qi.iter().zip(kj).map(|(&a, &c)| (a as f64 * c as f64).abs()).sum();
                    let p = opts.prev_scores.map_or(0.0, |p| p[row + j] as f64);
                    let s = scale * dot + p;
                    res.magnitude[row + j] = scale.abs() * abs + p.abs();
                    res.dot_magnitude[row + j] = abs;
                    let l = opts.running_mean_layer.map_or(s, |layer| s / (layer as f64 + 1.0));
                    let m = opts.mask.map_or(0.0, |(mask, mshape)| {
                        let at = match mshape {
                            MaskShape::Shared => i * kv_len + j,
                            MaskShape::PerBatch => (b * q_len + i) * kv_len + j,
                            MaskShape::PerHead => row + j,
                            MaskShape::KeyPadding => b * kv_len + j,
                        };
                        mask[at] as f64
                    });
                    let padded = opts.key_lengths.is_some_and(|lens| j >= lens[b]);
                    let above = opts.causal && (j as i64) > i as i64 + kv_len as i64 - q_len as i64;
                    *zj = if m == f64::NEG_INFINITY || padded || above {
                        f64::NEG_INFINITY
                    } else {
                        l + m
                    };
                    res.scores[row + j] = if opts.carry_masked { *zj } else { s };
                    res.masked_scores[row + j] = *zj;
                }
                let out = &mut res.out[((b * heads + h) * q_len + i) * value_dim..][..value_dim];
                if z.iter().any(|v| v.is_nan() || *v == f64::INFINITY) {
                    out.fill(f64::NAN);
                    continue;
                }
                let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    out.fill(if opts.masked_rows == MaskedRows::Zero {
                        0.0
                    } else {
                        f64::NAN
                    });
                    continue;
                }
                let d: f64 = z.iter().map(|&v| (v - m).exp()).sum();
                // Masked keys contribute nothing, whatever their V holds.
                for (j, &zj) in z.iter().enumerate().filter(|(_, zj)| **zj != f64::NEG_INFINITY) {
                    let w = (zj - m).exp() / d;
                    res.weights[row + j] = w;
                    let vj = &v[((b * kv_heads + hk) * kv_len + j) * value_dim..][..value_dim];
                    for (o, &vv) in out.iter_mut().zip(vj) {
                        *o += w * vv as f64;
                    }
                }
            }
        }
    }
    res
}
