//! The BERT encoder block (Post-LN) from `kernels` calls alone:
//!
//! ```text
//! qkv = X·W_qkv + b_qkv                      one fused projection, [B, L, 3·hidden]
//! ctx = Attention(q, k, v; key padding)      read in place from qkv, written as [B, L, hidden]
//! h   = LN₁(ctx·W_o + b_o + X)               the residual fused into the projection
//! Y   = LN₂(gelu(h·W_up + b_up)·W_down + b_down + h)
//! ```

use kernels::{
    Activation, AttentionArgs, AttentionOptions, AttentionShape, AttentionWorkspace, Kernels, LayerNormOptions,
    LinearOptions, LinearWeights, MaskShape, PackedLinear, WeightLayout, WeightType,
};

/// The sizes of an encoder layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EncoderConfig {
    /// The model width, `heads · head_dim`.
    pub hidden: usize,
    /// The attention heads.
    pub heads: usize,
    /// The FFN's inner width.
    pub intermediate: usize,
    /// The layer norms' ε.
    pub eps: f32,
}

impl EncoderConfig {
    /// `hidden / heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// One layer's parameters as a checkpoint stores them: every weight `[out, in]` (`nn.Linear`),
/// the query, key and value projections already stacked into `[3·hidden, hidden]`.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// `[3·hidden, hidden]`: the query rows, then the key rows, then the value rows.
    pub qkv: Vec<f32>,
    /// `[3·hidden]`.
    pub qkv_bias: Vec<f32>,
    /// The attention's output projection, `[hidden, hidden]`.
    pub out: Vec<f32>,
    /// `[hidden]`.
    pub out_bias: Vec<f32>,
    /// The first layer norm's gain and bias, `[hidden]` each.
    pub ln1: (Vec<f32>, Vec<f32>),
    /// The FFN's first projection, `[intermediate, hidden]`.
    pub up: Vec<f32>,
    /// `[intermediate]`.
    pub up_bias: Vec<f32>,
    /// The FFN's second projection, `[hidden, intermediate]`.
    pub down: Vec<f32>,
    /// `[hidden]`.
    pub down_bias: Vec<f32>,
    /// The second layer norm's gain and bias, `[hidden]` each.
    pub ln2: (Vec<f32>, Vec<f32>),
}

impl LayerWeights {
    /// Checks every length against `config`, naming the first parameter that differs.
    pub fn check(&self, config: &EncoderConfig) -> Result<(), String> {
        let (h, f) = (config.hidden, config.intermediate);
        let sizes: [(&str, usize, usize); 12] = [
            ("qkv", self.qkv.len(), 3 * h * h),
            ("qkv_bias", self.qkv_bias.len(), 3 * h),
            ("out", self.out.len(), h * h),
            ("out_bias", self.out_bias.len(), h),
            ("ln1 gain", self.ln1.0.len(), h),
            ("ln1 bias", self.ln1.1.len(), h),
            ("up", self.up.len(), f * h),
            ("up_bias", self.up_bias.len(), f),
            ("down", self.down.len(), h * f),
            ("down_bias", self.down_bias.len(), h),
            ("ln2 gain", self.ln2.0.len(), h),
            ("ln2 bias", self.ln2.1.len(), h),
        ];
        match sizes.iter().find(|(_, got, want)| got != want) {
            Some((name, got, want)) => Err(format!("{name} has {got} values, expected {want}")),
            None => Ok(()),
        }
    }
}

/// A layer packed for one [`Kernels`]: the four linear layers packed once, the norms' parameters.
#[derive(Debug, Clone)]
struct PackedLayer {
    qkv: PackedLinear,
    out: PackedLinear,
    up: PackedLinear,
    down: PackedLinear,
    ln1: (Vec<f32>, Vec<f32>),
    ln2: (Vec<f32>, Vec<f32>),
}

/// A stack of Post-LN encoder layers on one ISA.
#[derive(Debug, Clone)]
pub struct Encoder {
    kernels: Kernels,
    config: EncoderConfig,
    layers: Vec<PackedLayer>,
}

/// The activations one [`Encoder::forward`] works in, kept between calls so that a stream of
/// batches allocates once.
#[derive(Debug, Default)]
pub struct Scratch {
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    h: Vec<f32>,
    up: Vec<f32>,
    attention: AttentionWorkspace,
}

fn pack(
    k: &Kernels,
    w: &[f32],
    bias: &[f32],
    in_features: usize,
    out_features: usize,
) -> Result<PackedLinear, kernels::Error> {
    let layer = LinearWeights {
        weights: w,
        layout: WeightLayout::OutIn,
        in_features,
        out_features,
        bias: Some(bias),
    };
    k.pack_linear(&layer, WeightType::F32)
}

impl Encoder {
    /// Packs `layers` for `kernels`.
    ///
    /// # Errors
    /// A length that does not match `config` (as [`kernels::Error`] from the packing).
    pub fn new(kernels: Kernels, config: EncoderConfig, layers: &[LayerWeights]) -> Result<Encoder, kernels::Error> {
        let (h, f) = (config.hidden, config.intermediate);
        let layers = layers
            .iter()
            .map(|w| {
                Ok(PackedLayer {
                    qkv: pack(&kernels, &w.qkv, &w.qkv_bias, h, 3 * h)?,
                    out: pack(&kernels, &w.out, &w.out_bias, h, h)?,
                    up: pack(&kernels, &w.up, &w.up_bias, h, f)?,
                    down: pack(&kernels, &w.down, &w.down_bias, f, h)?,
                    ln1: w.ln1.clone(),
                    ln2: w.ln2.clone(),
                })
            })
            .collect::<Result<_, kernels::Error>>()?;
        Ok(Encoder {
            kernels,
            config,
            layers,
        })
    }

    /// The kernels it runs on.
    pub fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// Its sizes.
    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// Runs every layer over `x` `[B, L, hidden]` in place. `padding` `[B, L]` is 0 for a token
    /// and −∞ for padding: padded keys get no attention weight, padded rows are computed but
    /// attend only to the tokens of their sequence.
    ///
    /// # Errors
    /// Lengths that do not match (`x` not `B·L·hidden`, `padding` not `B·L`).
    pub fn forward(
        &self,
        x: &mut [f32],
        batch: usize,
        len: usize,
        padding: &[f32],
        s: &mut Scratch,
    ) -> Result<(), kernels::Error> {
        let EncoderConfig {
            hidden,
            heads,
            intermediate,
            eps,
        } = self.config;
        let (k, d, tokens) = (&self.kernels, self.config.head_dim(), batch * len);
        s.qkv.resize(tokens * 3 * hidden, 0.0);
        s.ctx.resize(tokens * hidden, 0.0);
        s.h.resize(tokens * hidden, 0.0);
        s.up.resize(tokens * intermediate, 0.0);
        let block = |i| kernels::Layout::tokens_first(len, 3 * hidden, i * hidden, d);
        for layer in &self.layers {
            k.linear(x, &layer.qkv, &mut s.qkv, &LinearOptions::default())?;
            let args = AttentionArgs {
                shape: AttentionShape::self_attention(batch, heads, len, d),
                q: &s.qkv,
                q_layout: block(0),
                k: &s.qkv,
                k_layout: block(1),
                v: &s.qkv,
                v_layout: block(2),
                out: &mut s.ctx,
                out_layout: kernels::Layout::tokens_first(len, hidden, 0, d),
                scores: None,
                options: AttentionOptions::default().mask(padding, MaskShape::KeyPadding),
            };
            k.attention_args(args, &mut s.attention)?;
            // h = LN₁(x + ctx·W_o + b_o)
            k.linear(&s.ctx, &layer.out, &mut s.h, &LinearOptions::default().residual(x))?;
            let ln1 = LayerNormOptions {
                gamma: Some(&layer.ln1.0),
                beta: Some(&layer.ln1.1),
                eps,
            };
            k.layer_norm_inplace(&mut s.h, hidden, &ln1)?;
            // x = LN₂(h + FFN(h))
            let up = LinearOptions::default().activation(Activation::Gelu);
            k.linear(&s.h, &layer.up, &mut s.up, &up)?;
            k.linear(&s.up, &layer.down, x, &LinearOptions::default().residual(&s.h))?;
            let ln2 = LayerNormOptions {
                gamma: Some(&layer.ln2.0),
                beta: Some(&layer.ln2.1),
                eps,
            };
            k.layer_norm_inplace(x, hidden, &ln2)?;
        }
        Ok(())
    }
}
