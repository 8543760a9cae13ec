//! Rows of `encoder`: a whole forward pass of a 6-layer BERT-style Post-LN encoder with
//! all-MiniLM-L6-v2's sizes (hidden 384, 12 heads of 32, FFN 1536) and random weights, built
//! from this crate's kernels alone ([`examples::Encoder`]: a fused QKV projection that
//! attention reads in place, bias, GELU and residuals in the linear layers' epilogues).
//!
//! Shapes `BxL`: batch × tokens, every sequence full; `1x16`, `1x128`, `8x128` (`--quick`:
//! `1x16`). Each case times, interleaved: the encoder on every printed SIMD ISA; the same
//! model composed of unfused steps ([`Unfused`]: the gemm crate's products, then a bias loop,
//! a GELU pass, a residual-add loop and a layer norm pass, attention as in the encoder), with
//! the ISA's kernels for the passes; the FMA peak of each ISA (FLOPs: the linear layers'
//! `2·tokens·K·N` and attention's `4·B·L²·hidden`). A row gives the sentences per second,
//! `xunfused` (the composition's time ÷ the encoder's) and the share of the time spent in each
//! step (linear, attention, norms, activation), from a few profiled passes after the timing.
//! `encoder_gemm` rows give the composition's own figures.
//!
//! Errors: at `1x16` both are compared with the f64 stack of `reference`
//! ([`examples::forward_f64`]), `max_rel` the normwise `max|Y − Ŷ| / max|Ŷ|`; at the other
//! shapes (where the f64 stack would outlast the timing) the two must agree to 1e-4 normwise,
//! or the report stops.

use std::hint::black_box;

use examples::{forward_f64, Block, Encoder, EncoderConfig, Laps, LayerWeights, Profile, Scratch, Step};
use kernels::{
    AttentionArgs, AttentionOptions, AttentionShape, AttentionWorkspace, Isa, Kernels, LayerNormOptions, Layout,
    MaskShape,
};

use super::accuracy::normwise;
use super::case::{fma_call_flops, fma_ratio, Context, Custom};
use super::output::Row;
use super::timing::{self, Timing};
use super::{no_cases, Family, Headline, Plan, ReportError};
use crate::composed::Gemm;
use crate::data;
use crate::roofline::{self, FMA_ITERS};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["encoder"],
    cases: no_cases,
    custom,
    headlines: &[Headline::flops("encoder", "1x128")],
};

/// all-MiniLM-L6-v2's sizes.
pub const CONFIG: EncoderConfig = EncoderConfig {
    block: Block::PostLn,
    hidden: 384,
    heads: 12,
    intermediate: 1536,
    eps: 1e-12,
};
/// Its layers.
pub const LAYERS: usize = 6;
/// `(batch, tokens)` of the default run and `--full`.
const SHAPES: [(usize, usize); 3] = [(1, 16), (1, 128), (8, 128)];
/// Of `--quick`.
const QUICK: [(usize, usize); 1] = [(1, 16)];
/// Rounds where a pass takes a hundred milliseconds (8x128 on one core).
const LONG_ROUNDS: usize = 7;
/// Profiled passes per contender, after the timing.
const PROFILED: usize = 3;
/// How far the two compositions may disagree (normwise) where the f64 stack is not run.
const AGREE: f64 = 1e-4;

fn custom(plan: &Plan) -> Vec<Custom> {
    plan.pick(&SHAPES, &SHAPES, &QUICK)
        .iter()
        .map(|&(b, l)| Custom {
            kernel: "encoder",
            shape: format!("{b}x{l}"),
            measure: Box::new(move |ctx| measure(b, l, ctx)),
        })
        .collect()
}

/// FLOPs of a pass: the linear layers' `2·T·K·N` and attention's `4·B·L²·hidden`, per layer.
pub fn flops(c: &EncoderConfig, batch: usize, len: usize) -> f64 {
    let (t, h, f) = ((batch * len) as f64, c.hidden as f64, c.intermediate as f64);
    let linear = 2.0 * t * (3.0 * h * h + h * h + 2.0 * h * f);
    let attention = 4.0 * batch as f64 * (len * len) as f64 * h;
    LAYERS as f64 * (linear + attention)
}

/// Deterministic layers: weights and biases uniform in `±1/√K`, gains in [0.5, 1.5), norm
/// biases in ±0.5.
pub fn weights(c: &EncoderConfig) -> Vec<LayerWeights> {
    let (h, f) = (c.hidden, c.intermediate);
    let mut seed = 0x5eed_e000;
    let mut uniform = |n: usize, lo: f32, hi: f32| {
        seed += 1;
        data::uniform(n, lo, hi, seed)
    };
    (0..LAYERS)
        .map(|_| {
            let mut linear = |out: usize, inp: usize| {
                let r = 1.0 / (inp as f32).sqrt();
                (uniform(out * inp, -r, r), uniform(out, -r, r))
            };
            let (qkv, qkv_bias) = linear(3 * h, h);
            let (out, out_bias) = linear(h, h);
            let (up, up_bias) = linear(f, h);
            let (down, down_bias) = linear(h, f);
            let mut norm = || (uniform(h, 0.5, 1.5), uniform(h, -0.5, 0.5));
            let (ln1, ln2) = (norm(), norm());
            LayerWeights {
                qkv,
                qkv_bias,
                out,
                out_bias,
                ln1,
                up,
                up_bias,
                down,
                down_bias,
                ln2,
            }
        })
        .collect()
}

/// A linear layer of the composition: `W[K, N]` (transposed once from the checkpoint's
/// `[N, K]`) and its bias.
struct Dense {
    k: usize,
    n: usize,
    w: Vec<f32>,
    bias: Vec<f32>,
}

impl Dense {
    fn new(w: &[f32], bias: &[f32], k: usize, n: usize) -> Dense {
        let mut t = vec![0.0; k * n];
        for o in 0..n {
            for i in 0..k {
                t[i * n + o] = w[o * k + i];
            }
        }
        Dense {
            k,
            n,
            w: t,
            bias: bias.to_vec(),
        }
    }

    /// `y = x·W` (the gemm crate, on its kernels for `isa`), then `y += b` (a loop over the
    /// rows).
    fn apply(&self, isa: Isa, x: &[f32], y: &mut [f32]) {
        let m = x.len() / self.k;
        Gemm::GemmCrate.matmul(
            isa,
            (m, self.n, self.k),
            1.0,
            x,
            (self.k, 1),
            &self.w,
            (self.n, 1),
            y,
            false,
        );
        for row in y.chunks_exact_mut(self.n) {
            for (v, &b) in row.iter_mut().zip(&self.bias) {
                *v += b;
            }
        }
    }
}

/// One layer of [`Unfused`].
struct UnfusedLayer {
    qkv: Dense,
    out: Dense,
    up: Dense,
    down: Dense,
    ln1: (Vec<f32>, Vec<f32>),
    ln2: (Vec<f32>, Vec<f32>),
}

/// The Post-LN encoder as a user composes it from unfused steps: each linear layer the gemm
/// crate's product then a bias loop; the GELU a pass of its own ([`Kernels::gelu_inplace`]);
/// each residual an add loop, then [`Kernels::layer_norm_inplace`]; attention the same call
/// as [`Encoder`]'s (strided views of the QKV projection, a key-padding mask).
pub struct Unfused {
    kernels: Kernels,
    layers: Vec<UnfusedLayer>,
}

/// The activations of [`Unfused::forward`].
#[derive(Default)]
pub struct UnfusedScratch {
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    h: Vec<f32>,
    up: Vec<f32>,
    attention: AttentionWorkspace,
}

fn norm((gamma, beta): &(Vec<f32>, Vec<f32>)) -> LayerNormOptions<'_> {
    LayerNormOptions {
        gamma: Some(gamma),
        beta: Some(beta),
        eps: CONFIG.eps,
    }
}

/// `y += r`.
fn add(y: &mut [f32], r: &[f32]) {
    for (v, &r) in y.iter_mut().zip(r) {
        *v += r;
    }
}

impl Unfused {
    /// The composition of `layers` with the passes of `kernels`.
    pub fn new(kernels: Kernels, layers: &[LayerWeights]) -> Unfused {
        let (h, f) = (CONFIG.hidden, CONFIG.intermediate);
        let layers = layers
            .iter()
            .map(|w| UnfusedLayer {
                qkv: Dense::new(&w.qkv, &w.qkv_bias, h, 3 * h),
                out: Dense::new(&w.out, &w.out_bias, h, h),
                up: Dense::new(&w.up, &w.up_bias, h, f),
                down: Dense::new(&w.down, &w.down_bias, f, h),
                ln1: w.ln1.clone(),
                ln2: w.ln2.clone(),
            })
            .collect();
        Unfused { kernels, layers }
    }

    /// The pass over `x` `[B, L, hidden]` in place, timing each step into `profile`.
    pub fn forward(
        &self,
        x: &mut [f32],
        (batch, len): (usize, usize),
        padding: &[f32],
        s: &mut UnfusedScratch,
        profile: Option<&mut Profile>,
    ) -> Result<(), kernels::Error> {
        let (k, hidden, heads) = (&self.kernels, CONFIG.hidden, CONFIG.heads);
        let d = CONFIG.head_dim();
        let tokens = batch * len;
        s.qkv.resize(tokens * 3 * hidden, 0.0);
        s.ctx.resize(tokens * hidden, 0.0);
        s.h.resize(tokens * hidden, 0.0);
        s.up.resize(tokens * CONFIG.intermediate, 0.0);
        let mut laps = Laps::new(profile);
        for layer in &self.layers {
            layer.qkv.apply(k.isa(), x, &mut s.qkv);
            laps.lap(Step::Linear);
            let part = |i| Layout::tokens_first(len, 3 * hidden, i * hidden, d);
            let args = AttentionArgs {
                shape: AttentionShape::self_attention(batch, heads, len, d),
                q: &s.qkv,
                q_layout: part(0),
                k: &s.qkv,
                k_layout: part(1),
                v: &s.qkv,
                v_layout: part(2),
                out: &mut s.ctx,
                out_layout: Layout::tokens_first(len, hidden, 0, d),
                scores: None,
                options: AttentionOptions::default().mask(padding, MaskShape::KeyPadding),
            };
            k.attention_args(args, &mut s.attention)?;
            laps.lap(Step::Attention);
            layer.out.apply(k.isa(), &s.ctx, &mut s.h);
            laps.lap(Step::Linear);
            add(&mut s.h, x);
            k.layer_norm_inplace(&mut s.h, hidden, &norm(&layer.ln1))?;
            laps.lap(Step::Norm);
            layer.up.apply(k.isa(), &s.h, &mut s.up);
            laps.lap(Step::Linear);
            k.gelu_inplace(&mut s.up)?;
            laps.lap(Step::Activation);
            layer.down.apply(k.isa(), &s.up, x);
            laps.lap(Step::Linear);
            add(x, &s.h);
            k.layer_norm_inplace(x, hidden, &norm(&layer.ln2))?;
            laps.lap(Step::Norm);
        }
        Ok(())
    }
}

/// One thing timed on a case's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// [`Encoder`] on `ctx.kernels[i]`.
    Fused(usize),
    /// [`Unfused`] with the passes of `ctx.kernels[i]`.
    Unfused(usize),
    /// The FMA-peak loop of an ISA.
    Fma(Isa),
}

/// The models of one ISA and their activations.
struct Models {
    fused: Encoder,
    unfused: Unfused,
    scratch: Scratch,
    unfused_scratch: UnfusedScratch,
}

fn measure(batch: usize, len: usize, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let shape = format!("{batch}x{len}");
    let fail = |msg: String| ReportError::new(format!("encoder {shape}: {msg}"));
    let layers = weights(&CONFIG);
    let flops = flops(&CONFIG, batch, len);
    let input = data::uniform(batch * len * CONFIG.hidden, -1.7, 1.7, 0x5eed_e0ff);
    let padding = vec![0.0f32; batch * len];

    // Every printed SIMD ISA: the scalar path would take seconds a pass.
    let isas: Vec<usize> = (0..ctx.kernels.len())
        .filter(|&i| ctx.kernels[i].isa() != Isa::Scalar && ctx.printed.contains(&ctx.kernels[i].isa()))
        .collect();
    let mut models: Vec<Option<Models>> = Vec::new();
    for (i, &k) in ctx.kernels.iter().enumerate() {
        models.push(if isas.contains(&i) {
            Some(Models {
                fused: Encoder::new(k, CONFIG, &layers).map_err(|e| fail(format!("packing on {}: {e}", k.isa())))?,
                unfused: Unfused::new(k, &layers),
                scratch: Scratch::default(),
                unfused_scratch: UnfusedScratch::default(),
            })
        } else {
            None
        });
    }
    let mut contenders = Vec::new();
    for &i in &isas {
        contenders.extend([
            Contender::Fused(i),
            Contender::Unfused(i),
            Contender::Fma(ctx.kernels[i].isa()),
        ]);
    }

    let mut x = input.clone();
    let mut run = |c: Contender, x: &mut [f32], profile: Option<&mut Profile>| -> Result<(), String> {
        match c {
            Contender::Fused(i) | Contender::Unfused(i) => {
                let m = models[i].as_mut().ok_or("no model")?;
                x.copy_from_slice(&input);
                let done = match c {
                    Contender::Fused(_) => {
                        m.fused
                            .forward_profiled(black_box(x), batch, len, &padding, &mut m.scratch, profile)
                    }
                    _ => m
                        .unfused
                        .forward(black_box(x), (batch, len), &padding, &mut m.unfused_scratch, profile),
                };
                done.map_err(|e| e.to_string())?;
                black_box(x);
            }
            Contender::Fma(isa) => {
                black_box(roofline::fma_peak(isa, black_box(FMA_ITERS)));
            }
        }
        Ok(())
    };

    // Every contender once: errors surface here; outputs are checked.
    let exact = (batch * len <= 16).then(|| forward_f64(&CONFIG, &layers, &input, batch, len, &padding));
    let mut errors = vec![None; contenders.len()];
    let mut first: Option<Vec<f32>> = None;
    for (c, &contender) in contenders.iter().enumerate() {
        if matches!(contender, Contender::Fma(_)) {
            continue;
        }
        run(contender, &mut x, None).map_err(|e| fail(format!("{contender:?}: {e}")))?;
        match (&exact, &first) {
            (Some(exact), _) => errors[c] = Some(normwise(&x, exact)),
            (None, Some(first)) => {
                let wide: Vec<f64> = first.iter().map(|&v| v as f64).collect();
                let apart = normwise(&x, &wide);
                if apart.is_nan() || apart > AGREE {
                    return Err(fail(format!(
                        "{contender:?} differs from the first contender by {apart:.2e} (normwise): a bug"
                    )));
                }
            }
            (None, None) => first = Some(x.clone()),
        }
    }

    let timing = Timing {
        rounds: if batch * len > 128 {
            ctx.timing.rounds.min(LONG_ROUNDS)
        } else {
            ctx.timing.rounds
        },
        ..ctx.timing
    };
    let samples = timing::interleaved(contenders.len(), &timing, |c| {
        // Checked above; a failure here cannot differ from the first call's.
        let _ = run(contenders[c], &mut x, None);
    });
    let mut profiles = vec![Profile::default(); contenders.len()];
    for (c, &contender) in contenders.iter().enumerate() {
        for _ in 0..PROFILED {
            let _ = run(contender, &mut x, Some(&mut profiles[c]));
        }
    }

    let at = |c: Contender| contenders.iter().position(|&x| x == c);
    let base = Row {
        dtype: "f32".to_string(),
        shape: shape.clone(),
        flops: Some(flops),
        units: Some((batch as f64, "sentences".to_string())),
        ..Row::default()
    };
    let mut out = Vec::new();
    for kind in ["encoder", "encoder_gemm"] {
        for (c, &contender) in contenders.iter().enumerate() {
            let i = match (kind, contender) {
                ("encoder", Contender::Fused(i)) | ("encoder_gemm", Contender::Unfused(i)) => i,
                _ => continue,
            };
            // Both run on the row's ISA (the composition's products on the gemm crate's kernels
            // for it): each is held against that ISA's peak.
            let isa = ctx.kernels[i].isa();
            let median = samples.median(c);
            let roof = at(Contender::Fma(isa)).map(|r| {
                let scale = flops / fma_call_flops(isa);
                (samples.min(r) * scale, fma_ratio(samples.min(r), median, scale))
            });
            let mut vs = Vec::new();
            if let (Contender::Fused(_), Some(o)) = (contender, at(Contender::Unfused(i))) {
                vs.push(("gemm".to_string(), samples.speedup(c, o)));
            }
            let vs_isa = contenders
                .iter()
                .enumerate()
                .filter_map(|(o, &other)| match (contender, other) {
                    (Contender::Fused(_), Contender::Fused(j)) | (Contender::Unfused(_), Contender::Unfused(j))
                        if j != i =>
                    {
                        Some((ctx.kernels[j].isa().to_string(), samples.speedup(c, o)))
                    }
                    _ => None,
                })
                .collect();
            out.push(Row {
                kernel: kind.to_string(),
                isa: isa.to_string(),
                ns_per_iter: median,
                max_rel_err: errors[c],
                vs,
                vs_isa,
                steps: Step::ALL
                    .iter()
                    .map(|&s| (s.name().to_string(), profiles[c].share(s)))
                    .collect(),
                roofline: roof.map(|_| roofline::fma_name(isa)),
                roofline_ns_per_iter: roof.map(|r| r.0),
                roofline_ratio: roof.map(|r| r.1),
                rel_iqr: samples.rel_iqr(c),
                rounds: samples.rounds(),
                ..base.clone()
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfused_matches_the_encoder() {
        let layers = weights(&CONFIG);
        let (b, l) = (2, 5);
        let input = data::uniform(b * l * CONFIG.hidden, -1.7, 1.7, 1);
        let padding = [
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
        ];
        let exact = forward_f64(&CONFIG, &layers, &input, b, l, &padding);
        for isa in kernels::available_isas() {
            let k = Kernels::for_isa(isa).expect("available");
            let mut x = input.clone();
            Unfused::new(k, &layers)
                .forward(&mut x, (b, l), &padding, &mut UnfusedScratch::default(), None)
                .expect("valid");
            let err = normwise(&x, &exact);
            assert!(err < 1e-5, "{isa}: {err:e}");
        }
    }

    #[test]
    fn flops_count_every_product() {
        // One token: the linear layers' 2·(3h² + h² + 2hf) and attention's 4·h, per layer.
        let (h, f) = (384.0, 1536.0);
        let one = 6.0 * (2.0 * (4.0 * h * h + 2.0 * h * f) + 4.0 * h);
        assert_eq!(flops(&CONFIG, 1, 1), one);
    }
}
