//! The BERT encoder block from `kernels` calls alone, Post-LN ([`Block::PostLn`]):
//!
//! ```text
//! qkv = X·W_qkv + b_qkv                      one fused projection, [B, L, 3·hidden]
//! ctx = Attention(q, k, v; key padding)      read in place from qkv, written as [B, L, hidden]
//! h   = LN₁(ctx·W_o + b_o + X)               the residual fused into the projection
//! Y   = LN₂(gelu(h·W_up + b_up)·W_down + b_down + h)
//! ```
//!
//! and its Pre-LN ([`Block::PreLn`]) and RealFormer ([`Block::RealFormer`]) variants.

use std::time::{Duration, Instant};

use kernels::{
    Activation, AttentionArgs, AttentionOptions, AttentionShape, AttentionWorkspace, Kernels, LayerNormOptions,
    LinearOptions, LinearWeights, MaskShape, PackedLinear, WeightLayout, WeightType,
};

/// Where the layer norms sit, and whether attention scores carry from layer to layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Block {
    /// BERT: `x = LN₁(x + Attn(x))`, `x = LN₂(x + FFN(x))`.
    #[default]
    PostLn,
    /// GPT-2 style: `x = x + Attn(LN₁(x))`, `x = x + FFN(LN₂(x))`; the residual stream is
    /// never normalized (a final layer norm, where a model has one, is the caller's).
    PreLn,
    /// Post-LN with residual attention (RealFormer): each layer's raw scores
    /// `S = Q·Kᵀ/√D + S_prev` are added to the next layer's, before the mask.
    RealFormer,
}

/// The kinds of step of a forward pass, for a [`Profile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A linear layer (with whatever its epilogue fuses: bias, GELU, residual).
    Linear,
    /// Attention, from the projected Q, K, V to the context.
    Attention,
    /// A layer norm (with the residual add where it is a pass of its own).
    Norm,
    /// An activation pass of its own (none in [`Encoder`]: its GELU is fused into a linear
    /// layer).
    Activation,
}

impl Step {
    /// Every kind, in the order of [`Profile::times`].
    pub const ALL: [Step; 4] = [Step::Linear, Step::Attention, Step::Norm, Step::Activation];

    /// Its name as printed.
    pub fn name(self) -> &'static str {
        match self {
            Step::Linear => "linear",
            Step::Attention => "attention",
            Step::Norm => "norms",
            Step::Activation => "activation",
        }
    }
}

/// Wall time per [`Step`] kind, summed over the forward passes that filled it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Profile {
    /// Indexed as [`Step::ALL`].
    pub times: [Duration; 4],
}

impl Profile {
    /// The time of every step together.
    pub fn total(&self) -> Duration {
        self.times.iter().sum()
    }

    /// The time of `step` as a fraction of [`Profile::total`].
    pub fn share(&self, step: Step) -> f64 {
        self.times[step as usize].as_secs_f64() / self.total().as_secs_f64()
    }
}

/// Charges the time since the previous lap to a step of a [`Profile`], when there is one.
pub struct Laps<'a> {
    profile: Option<&'a mut Profile>,
    last: Instant,
}

impl<'a> Laps<'a> {
    /// Starts timing into `profile` (nothing is read from the clock without one).
    pub fn new(profile: Option<&'a mut Profile>) -> Self {
        Laps {
            profile,
            last: Instant::now(),
        }
    }

    /// The time since the previous lap (or the start) was spent in `step`.
    pub fn lap(&mut self, step: Step) {
        if let Some(p) = self.profile.as_deref_mut() {
            let now = Instant::now();
            p.times[step as usize] += now - self.last;
            self.last = now;
        }
    }
}

/// The sizes of an encoder layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EncoderConfig {
    /// The block's form.
    pub block: Block,
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
    /// Pre-LN: the normalized input of a sublayer.
    normed: Vec<f32>,
    /// RealFormer: the scores of the layer below and of this one, `[B, H, L, L]`.
    scores: (Vec<f32>, Vec<f32>),
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
        self.forward_profiled(x, batch, len, padding, s, None)
    }

    /// [`Encoder::forward`], adding the time of each step to `profile` where given.
    ///
    /// # Errors
    /// As [`Encoder::forward`].
    pub fn forward_profiled(
        &self,
        x: &mut [f32],
        batch: usize,
        len: usize,
        padding: &[f32],
        s: &mut Scratch,
        profile: Option<&mut Profile>,
    ) -> Result<(), kernels::Error> {
        let EncoderConfig {
            block,
            hidden,
            heads,
            intermediate,
            ..
        } = self.config;
        let tokens = batch * len;
        s.qkv.resize(tokens * 3 * hidden, 0.0);
        s.ctx.resize(tokens * hidden, 0.0);
        s.h.resize(tokens * hidden, 0.0);
        s.up.resize(tokens * intermediate, 0.0);
        if block == Block::PreLn {
            s.normed.resize(tokens * hidden, 0.0);
        }
        if block == Block::RealFormer {
            s.scores.0.resize(batch * heads * len * len, 0.0);
            s.scores.1.resize(batch * heads * len * len, 0.0);
        }
        let mut laps = Laps::new(profile);
        for (i, layer) in self.layers.iter().enumerate() {
            match block {
                Block::PostLn | Block::RealFormer => self.post_ln(layer, i, x, (batch, len), padding, s, &mut laps)?,
                Block::PreLn => self.pre_ln(layer, x, (batch, len), padding, s, &mut laps)?,
            }
        }
        Ok(())
    }

    fn norm<'a>(&self, (gamma, beta): &'a (Vec<f32>, Vec<f32>)) -> LayerNormOptions<'a> {
        LayerNormOptions {
            gamma: Some(gamma),
            beta: Some(beta),
            eps: self.config.eps,
        }
    }

    /// `s.ctx = Attention(s.qkv)`; RealFormer's layer `i` adds `s.scores.0` (from layer
    /// `i − 1`) and writes its own into `s.scores.1`, then swaps them.
    fn attention(
        &self,
        i: usize,
        batch: usize,
        len: usize,
        padding: &[f32],
        s: &mut Scratch,
    ) -> Result<(), kernels::Error> {
        let EncoderConfig { hidden, heads, .. } = self.config;
        let d = self.config.head_dim();
        let block = |i| kernels::Layout::tokens_first(len, 3 * hidden, i * hidden, d);
        let real = self.config.block == Block::RealFormer;
        let mut options = AttentionOptions::default().mask(padding, MaskShape::KeyPadding);
        if real && i > 0 {
            options = options.prev_scores(&s.scores.0);
        }
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
            scores: real.then_some(&mut s.scores.1[..]),
            options,
        };
        self.kernels.attention_args(args, &mut s.attention)?;
        if real {
            std::mem::swap(&mut s.scores.0, &mut s.scores.1);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn post_ln(
        &self,
        layer: &PackedLayer,
        i: usize,
        x: &mut [f32],
        (batch, len): (usize, usize),
        padding: &[f32],
        s: &mut Scratch,
        laps: &mut Laps,
    ) -> Result<(), kernels::Error> {
        let (k, hidden) = (&self.kernels, self.config.hidden);
        k.linear(x, &layer.qkv, &mut s.qkv, &LinearOptions::default())?;
        laps.lap(Step::Linear);
        self.attention(i, batch, len, padding, s)?;
        laps.lap(Step::Attention);
        // h = LN₁(x + ctx·W_o + b_o)
        k.linear(&s.ctx, &layer.out, &mut s.h, &LinearOptions::default().residual(x))?;
        laps.lap(Step::Linear);
        k.layer_norm_inplace(&mut s.h, hidden, &self.norm(&layer.ln1))?;
        laps.lap(Step::Norm);
        // x = LN₂(h + FFN(h))
        let up = LinearOptions::default().activation(Activation::Gelu);
        k.linear(&s.h, &layer.up, &mut s.up, &up)?;
        k.linear(&s.up, &layer.down, x, &LinearOptions::default().residual(&s.h))?;
        laps.lap(Step::Linear);
        k.layer_norm_inplace(x, hidden, &self.norm(&layer.ln2))?;
        laps.lap(Step::Norm);
        Ok(())
    }

    fn pre_ln(
        &self,
        layer: &PackedLayer,
        x: &mut [f32],
        (batch, len): (usize, usize),
        padding: &[f32],
        s: &mut Scratch,
        laps: &mut Laps,
    ) -> Result<(), kernels::Error> {
        let (k, hidden) = (&self.kernels, self.config.hidden);
        k.layer_norm(x, &mut s.normed, hidden, &self.norm(&layer.ln1))?;
        laps.lap(Step::Norm);
        k.linear(&s.normed, &layer.qkv, &mut s.qkv, &LinearOptions::default())?;
        laps.lap(Step::Linear);
        self.attention(0, batch, len, padding, s)?;
        laps.lap(Step::Attention);
        // h = x + Attn(LN₁(x))
        k.linear(&s.ctx, &layer.out, &mut s.h, &LinearOptions::default().residual(x))?;
        laps.lap(Step::Linear);
        // x = h + FFN(LN₂(h))
        k.layer_norm(&s.h, &mut s.normed, hidden, &self.norm(&layer.ln2))?;
        laps.lap(Step::Norm);
        let up = LinearOptions::default().activation(Activation::Gelu);
        k.linear(&s.normed, &layer.up, &mut s.up, &up)?;
        k.linear(&s.up, &layer.down, x, &LinearOptions::default().residual(&s.h))?;
        laps.lap(Step::Linear);
        Ok(())
    }
}
