//! The GAU-α encoder layer (Su et al., 2022, the gated attention unit of "Transformer Quality
//! in Linear Time" with softmax-plus attention and rotary positions) from `kernels` calls
//! alone, and its f64 counterpart from `reference`:
//!
//! ```text
//! x = RMSNorm(x + GAU(x))
//! GAU(x): [U | V | Z] = swish(x·W_in + b_in);  Q, K = RoPE(Z⊙γ + β)
//!         A = softmax-plus(Q·Kᵀ/√s) over each sequence's tokens;  out = (U ⊙ A·V)·W_o + b_o
//! ```
//!
//! One layer is two calls: [`Kernels::gau_packed`](kernels::Kernels::gau_packed) (the whole
//! unit, its weights packed once) and [`Kernels::add_and_rms_norm`](kernels::Kernels::add_and_rms_norm).
//! Softmax-plus is run as the released GAU-α does it, with no lower clamp on the length
//! (`min_len = 1`: the factor is `ln(n)/ln 512` for a row that sees `n` keys); RoPE rotates the
//! pairs `(2m, 2m+1)`, as its bert4keras code does. The released model's norm has no gain
//! (`gain` all ones reproduces it); a gain is kept so that the test exercises one.

use kernels::{
    AddNorm, GauAttention, GauOptions, GauShape, GauWeights, GauWorkspace, Kernels, PackedGauWeights, RmsNormOptions,
    Rope,
};

/// The sizes of a GAU-α layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GauAlphaConfig {
    /// `d`, the model width.
    pub hidden: usize,
    /// `e`, the width of U and V (GAU-α base: 1536 for `d = 768`).
    pub expand: usize,
    /// `s`, the width of the shared query/key projection (128), even for RoPE.
    pub qk_dim: usize,
    /// The RMS norm's ε.
    pub eps: f32,
}

/// One GAU-α layer's parameters, row-major as [`GauWeights`] takes them.
#[derive(Debug, Clone)]
pub struct GauAlphaWeights {
    /// `W_in [d, 2e + s]`: the columns of U, then V, then Z.
    pub w_in: Vec<f32>,
    /// `[2e + s]`.
    pub b_in: Vec<f32>,
    /// `γ_q`, `β_q`, `γ_k`, `β_k`, `[s]` each.
    pub qk_affine: [Vec<f32>; 4],
    /// `W_o [e, d]`.
    pub w_out: Vec<f32>,
    /// `[d]`.
    pub b_out: Vec<f32>,
    /// The RMS norm's gain, `[d]`.
    pub gain: Vec<f32>,
}

impl GauAlphaWeights {
    fn gau(&self) -> GauWeights<'_> {
        let [gamma_q, beta_q, gamma_k, beta_k] = &self.qk_affine;
        GauWeights {
            w_in: &self.w_in,
            b_in: Some(&self.b_in),
            gamma_q,
            beta_q,
            gamma_k,
            beta_k,
            w_out: &self.w_out,
            b_out: Some(&self.b_out),
        }
    }
}

/// The unit's options for a batch whose sequence `b` has `lengths[b]` tokens.
fn options(lengths: &[usize]) -> GauOptions<'_> {
    GauOptions {
        key_lengths: Some(lengths),
        rope: Some(Rope::INTERLEAVED),
        attention: GauAttention::SoftmaxPlus { min_len: 1 },
        ..GauOptions::default()
    }
}

fn shape(c: &GauAlphaConfig, batch: usize, len: usize) -> GauShape {
    GauShape {
        batch,
        seq_len: len,
        dim: c.hidden,
        expand: c.expand,
        qk_dim: c.qk_dim,
    }
}

/// A stack of GAU-α layers on one ISA, each unit's weights packed once.
#[derive(Debug, Clone)]
pub struct GauAlpha {
    kernels: Kernels,
    config: GauAlphaConfig,
    layers: Vec<(PackedGauWeights, Vec<f32>)>,
}

/// The activations and workspace of [`GauAlpha::forward`], kept between calls.
#[derive(Debug, Default)]
pub struct GauScratch {
    unit: Vec<f32>,
    /// The layer's input, the skip operand of Add & Norm (whose output is `x` itself).
    skip: Vec<f32>,
    workspace: GauWorkspace,
}

impl GauAlpha {
    /// Packs `layers` for `kernels`.
    ///
    /// # Errors
    /// A length that does not match `config` (as [`kernels::Error`] from the packing).
    pub fn new(kernels: Kernels, config: GauAlphaConfig, layers: &[GauAlphaWeights]) -> Result<Self, kernels::Error> {
        let any = shape(&config, 1, 1);
        let layers = layers
            .iter()
            .map(|w| Ok((kernels.pack_gau_weights(&any, &w.gau())?, w.gain.clone())))
            .collect::<Result<_, kernels::Error>>()?;
        Ok(GauAlpha {
            kernels,
            config,
            layers,
        })
    }

    /// Runs every layer over `x` `[B, L, hidden]` in place; sequence `b` has `lengths[b]`
    /// tokens, the rest of its `L` rows are padding (computed, attending to its tokens only).
    ///
    /// # Errors
    /// Lengths that do not match (`x` not `B·L·hidden`, `lengths` not `B` values ≤ `L`).
    pub fn forward(
        &self,
        x: &mut [f32],
        batch: usize,
        len: usize,
        lengths: &[usize],
        s: &mut GauScratch,
    ) -> Result<(), kernels::Error> {
        let (shape, opts) = (shape(&self.config, batch, len), options(lengths));
        let norm = |gain| RmsNormOptions {
            gain: Some(gain),
            eps: self.config.eps,
        };
        s.unit.resize(x.len(), 0.0);
        for (unit, gain) in &self.layers {
            self.kernels
                .gau_packed(&shape, x, unit, &opts, &mut s.unit, &mut s.workspace)?;
            s.skip.clear();
            s.skip.extend_from_slice(x);
            self.kernels
                .add_and_rms_norm(AddNorm::new(&s.skip, &s.unit, x, self.config.hidden), &norm(gain))?;
        }
        Ok(())
    }
}

/// [`GauAlpha::forward`] in f64: each layer's unit and norm exact, the unit's output and the
/// sum `x + GAU(x)` rounded to f32 where the kernels round them, and each layer's worst
/// absolute error bound of the unit from `reference::gau` (for the exact input of that layer).
/// Returns the output `[B, L, hidden]` and, per layer, `(max bound of GAU(x), min RMS of a
/// row of h = x + GAU(x), max |h|)`.
///
/// # Panics
/// If a length does not match `config`.
pub fn gau_alpha_f64(
    config: &GauAlphaConfig,
    layers: &[GauAlphaWeights],
    x: &[f32],
    batch: usize,
    len: usize,
    lengths: &[usize],
) -> (Vec<f64>, Vec<(f64, f64, f64)>) {
    let d = config.hidden;
    let mut x32 = x.to_vec();
    let mut y: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let mut per_layer = Vec::new();
    let shape = reference::GauShape {
        batch,
        seq_len: len,
        dim: d,
        expand: config.expand,
        qk_dim: config.qk_dim,
    };
    for w in layers {
        let [gamma_q, beta_q, gamma_k, beta_k] = &w.qk_affine;
        let params = reference::GauParams {
            w_in: &w.w_in,
            b_in: Some(&w.b_in),
            gamma_q,
            beta_q,
            gamma_k,
            beta_k,
            w_out: &w.w_out,
            b_out: Some(&w.b_out),
            scale: reference::ScoreScale::InvSqrtQkDim,
            normalizer: reference::Normalizer::SeqLen,
            key_lengths: Some(lengths),
            causal: false,
            bias: None,
            rope: Some(reference::Rope {
                pairs: reference::RopePairs::Interleaved,
                width: config.qk_dim,
                base: 10000.0,
            }),
            attention: reference::Attention::SoftmaxPlus(1),
        };
        let unit = reference::gau(&shape, &x32, &params);
        let unit32: Vec<f32> = unit.out.iter().map(|&v| v as f32).collect();
        let (sum, normed) = reference::add_rms_norm(&x32, &unit32, None, 1.0, d, Some(&w.gain), config.eps);
        let min_rms = normed.mean_square.iter().fold(f64::INFINITY, |m, &ms| m.min(ms.sqrt()));
        let max_sum = sum.iter().fold(0.0f64, |m, &h| m.max(h.abs() as f64));
        per_layer.push((unit.bound.iter().fold(0.0f64, |m, &b| m.max(b)), min_rms, max_sum));
        y = normed.y;
        x32 = y.iter().map(|&v| v as f32).collect();
    }
    (y, per_layer)
}
