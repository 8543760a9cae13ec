//! Rows of the gated attention unit: [`Kernels::gau`] at B = 1 and (T, d, e, s) =
//! (256, 512, 1024, 128) and (1024, 512, 1024, 128) (`--full`; T = 256 otherwise), causal and not,
//! with the paper's options (c = 1/√s, l = T, biases on both projections).
//!
//! Each case times, interleaved over the same buffers: the kernel of every printed vector ISA,
//! and the same with its weights packed once before the timing ([`Kernels::gau_packed`], the
//! `gau_packed` rows, checked bit for bit against the kernel);
//! the unfused composition on the gemm crate ([`GauComposition`], with the swish of the same
//! ISA; the `xgemm` column); and the FMA peak of each ISA ([`Rule::Fma`](super::Rule::Fma)).
//! The scalar path (≈ 1 GFLOP/s) runs one timed call at T = 256 without the causal mask, not
//! under `--quick` (`xscalar` "-" elsewhere).
//!
//! FLOPs per batch: `2·T·d·(2e+s) + 2·T²·s + 2·T²·e + 2·T·e·d` (the projections, Q·Kᵀ, A·V);
//! causal rows count the visible pairs `T(T+1)/2` for the two T² terms and carry the dense count
//! too (the goal lines give both; PyTorch's figures count causal as dense).
//!
//! Errors: at T = 256 the output is checked against the f64 oracle with its running error bound
//! (`reference::fraction::gau`: the fraction of the bound); `max_rel` (in `--json`) is
//! `max |O − Ô| / max |Ô|` (normwise: the output's elements cross zero). At T = 1024 the oracle
//! (O(T²·(s+e)) in f64 with bounds) is too slow for the report: the error is "-" there. The
//! composition is checked against the kernel of the same ISA on every case (a wrong baseline
//! would make the ratio wrong).
//!
//! The `gau_options` rows run, at T = 256 dense, each option of the public implementations
//! (Laplace, softmax, GAU-α's softmax-plus, 32 rotated dimensions with a prefix-LM mask and
//! per-row key counts) interleaved with the paper's options on every vector ISA: their speed
//! relative to the paper's (`vs paper` in `--json`, and a target line) and their error as a
//! fraction of the oracle's bound.

use std::hint::black_box;
use std::time::Instant;

use kernels::{
    AdditiveMask, GauAttention, GauOptions, GauShape, GauWeights, GauWorkspace, Isa, Kernels, MaskShape, Normalizer,
    PackedGauWeights, Rope,
};

use super::accuracy::normwise;
use super::case::{fma_call_flops, fma_ratio, Context, Custom};
use super::output::Row;
use super::timing::{self, Timing};
use super::{no_cases, Family, Headline, Plan, ReportError, Scope};
use crate::composed::Gemm;
use crate::data;
use crate::roofline::{self, FMA_ITERS};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["gau", "gau_options"],
    cases: no_cases,
    custom,
    headlines: &[Headline::flops("gau", "T=256 dense")],
};

/// `d`.
pub const DIM: usize = 512;
/// `e`.
pub const EXPAND: usize = 1024;
/// `s`.
pub const QK_DIM: usize = 128;
const LENS: [usize; 2] = [256, 1024];
const LENS_DEFAULT: [usize; 1] = [256];
/// The scalar path and the oracle run at lengths up to this.
const SMALL_LEN: usize = 256;
/// Rounds at lengths above `SMALL_LEN` (a round takes ~0.3 s at T = 1024).
const LONG_ROUNDS: usize = 9;
/// The composition's normwise difference from the kernel above which it is wrong.
const COMPOSITION_TOLERANCE: f64 = 1e-3;

fn shape_name(len: usize, causal: bool) -> String {
    format!("T={len} {}", if causal { "causal" } else { "dense" })
}

pub fn parse_shape(shape: &str) -> Option<(usize, bool)> {
    let (len, kind) = shape.strip_prefix("T=")?.split_once(' ')?;
    Some((len.parse().ok()?, kind == "causal"))
}

fn custom(plan: &Plan) -> Vec<Custom> {
    let mut out = Vec::new();
    let full = plan.scope != Scope::Quick;
    for &len in plan.pick(&LENS, &LENS_DEFAULT, &LENS_DEFAULT) {
        for causal in [false, true] {
            out.push(Custom {
                kernel: "gau",
                shape: shape_name(len, causal),
                measure: Box::new(move |ctx| measure(len, causal, full, ctx)),
            });
        }
    }
    out.push(Custom {
        kernel: "gau_options",
        shape: format!("T={SMALL_LEN} {}", OPTIONS.map(|o| o.0).join(", ")),
        measure: Box::new(measure_options),
    });
    out
}

/// The options the public implementations use, each against the paper's in the same run:
/// `(name, attention, partial RoPE and a prefix-LM mask)`.
const OPTIONS: [(&str, GauAttention, bool); 4] = [
    ("laplace", GauAttention::Laplace, false),
    ("softmax", GauAttention::Softmax, false),
    ("softmax-plus", GauAttention::SoftmaxPlus { min_len: 1 }, false),
    ("rope32+prefix", GauAttention::Relu2, true),
];

/// The prefix of the prefix-LM rows: row `i` sees keys `j < PREFIX` or `j ≤ i`.
const PREFIX: usize = 64;

/// `gau_options` rows: at T = 256 dense, every printed vector ISA runs the paper's options and
/// each of [`OPTIONS`], interleaved; a row per option gives its time, its speed-up over the
/// paper's options (`vs paper`; below 1 is what the option costs) and its error as a fraction
/// of the oracle's bound.
fn measure_options(ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let fail = |msg: String| ReportError::new(format!("gau_options: {msg}"));
    let len = SMALL_LEN;
    let shape = shape(len);
    let weights = Weights::new(&shape);
    let w = weights.view();
    let x = input(len);
    let prefix: Vec<f32> = (0..len * len)
        .map(|n| {
            if n % len < PREFIX || n % len <= n / len {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    let opts = |o: Option<usize>| -> GauOptions<'_> {
        let Some(o) = o else { return GauOptions::default() };
        let (_, attention, masked) = OPTIONS[o];
        GauOptions {
            attention,
            rope: masked.then_some(Rope::INTERLEAVED.with_width(32)),
            bias: masked.then_some(AdditiveMask {
                values: &prefix,
                shape: MaskShape::Shared,
            }),
            normalizer: if masked {
                Normalizer::ValidKeys
            } else {
                Normalizer::SeqLen
            },
            ..GauOptions::default()
        }
    };
    let isas: Vec<usize> = (0..ctx.kernels.len())
        .filter(|&i| ctx.kernels[i].isa() != Isa::Scalar && ctx.printed.contains(&ctx.kernels[i].isa()))
        .collect();
    // Contender `c`: ISA `isas[c / 5]`, options `c % 5` (0: the paper's, then `OPTIONS`).
    let variant = |c: usize| (c % 5).checked_sub(1);
    let mut workspaces: Vec<GauWorkspace> = isas.iter().map(|_| GauWorkspace::new()).collect();
    let mut out = vec![0.0f32; len * DIM];
    let mut run = |c: usize, out: &mut [f32]| {
        let k = ctx.kernels[isas[c / 5]];
        k.gau(
            &shape,
            black_box(&x[..]),
            &w,
            &opts(variant(c)),
            out,
            &mut workspaces[c / 5],
        )
        .map_err(|e| {
            fail(format!(
                "{} on {}: {e}",
                variant(c).map_or("paper", |o| OPTIONS[o].0),
                k.isa()
            ))
        })
    };
    let mut fractions = vec![None; isas.len() * 5];
    for (o, (name, attention, masked)) in OPTIONS.iter().enumerate() {
        let mut params = weights.params(false);
        params.attention = match attention {
            GauAttention::Laplace => reference::Attention::Laplace,
            GauAttention::Softmax => reference::Attention::Softmax,
            GauAttention::SoftmaxPlus { min_len } => reference::Attention::SoftmaxPlus(*min_len),
            _ => reference::Attention::Relu2,
        };
        if *masked {
            params.rope = Some(reference::Rope {
                pairs: reference::RopePairs::Interleaved,
                width: 32,
                base: 10000.0,
            });
            params.bias = Some((&prefix, reference::MaskShape::Shared));
            params.normalizer = reference::Normalizer::ValidKeys;
        }
        let exact = reference::gau(&to_reference(&shape), &x, &params);
        for (i, &k) in isas.iter().enumerate() {
            let c = i * 5 + o + 1;
            run(c, &mut out)?;
            let fraction = fraction_of(&exact, &out);
            if fraction.is_nan() || fraction > 1.0 {
                let isa = ctx.kernels[k].isa();
                return Err(fail(format!("{name} on {isa}: {fraction} of the bound")));
            }
            fractions[c] = Some(fraction);
        }
    }
    let samples = timing::interleaved(isas.len() * 5, &ctx.timing, |c| {
        // Every call succeeded above.
        let _ = run(c, &mut out);
    });
    let (flops, _) = flops(len, false);
    let mut rows = Vec::new();
    for (i, &k) in isas.iter().enumerate() {
        for (o, (name, ..)) in OPTIONS.iter().enumerate() {
            let c = i * 5 + o + 1;
            rows.push(Row {
                kernel: "gau_options".to_string(),
                dtype: "f32".to_string(),
                shape: format!("T={len} {name}"),
                isa: ctx.kernels[k].isa().to_string(),
                ns_per_iter: samples.median(c),
                elements: Some((len * DIM) as f64),
                flops: Some(flops),
                bound_fraction: fractions[c],
                within_bound: fractions[c].map(|f| f <= 1.0),
                vs: vec![("paper".to_string(), samples.speedup(c, i * 5))],
                rel_iqr: samples.rel_iqr(c),
                rounds: samples.rounds(),
                ..Row::default()
            });
        }
    }
    Ok(rows)
}

/// The GAU's shape at B = 1.
pub fn shape(len: usize) -> GauShape {
    GauShape {
        batch: 1,
        seq_len: len,
        dim: DIM,
        expand: EXPAND,
        qk_dim: QK_DIM,
    }
}

/// The weights of a GAU, owned: uniform, scaled by `1/√fan_in`.
pub struct Weights {
    /// `W_in[d, 2e+s]`.
    pub w_in: Vec<f32>,
    /// `b_in[2e+s]`.
    pub b_in: Vec<f32>,
    /// `γ_q[s]`.
    pub gamma_q: Vec<f32>,
    /// `β_q[s]`.
    pub beta_q: Vec<f32>,
    /// `γ_k[s]`.
    pub gamma_k: Vec<f32>,
    /// `β_k[s]`.
    pub beta_k: Vec<f32>,
    /// `W_o[e, d]`.
    pub w_out: Vec<f32>,
    /// `b_o[d]`.
    pub b_out: Vec<f32>,
}

impl Weights {
    /// Deterministic weights for `shape`.
    pub fn new(shape: &GauShape) -> Weights {
        let (d, e, s) = (shape.dim, shape.expand, shape.qk_dim);
        let w = 2 * e + s;
        let a = 1.0 / (d as f32).sqrt();
        let b = 1.0 / (e as f32).sqrt();
        Weights {
            w_in: data::uniform(d * w, -a, a, 0x5eed_0501),
            b_in: data::uniform(w, -0.1, 0.1, 0x5eed_0502),
            gamma_q: data::uniform(s, 0.5, 1.5, 0x5eed_0503),
            beta_q: data::uniform(s, -0.1, 0.1, 0x5eed_0504),
            gamma_k: data::uniform(s, 0.5, 1.5, 0x5eed_0505),
            beta_k: data::uniform(s, -0.1, 0.1, 0x5eed_0506),
            w_out: data::uniform(e * d, -b, b, 0x5eed_0507),
            b_out: data::uniform(d, -0.1, 0.1, 0x5eed_0508),
        }
    }

    /// The kernel's view of them.
    pub fn view(&self) -> GauWeights<'_> {
        GauWeights {
            w_in: &self.w_in,
            b_in: Some(&self.b_in),
            gamma_q: &self.gamma_q,
            beta_q: &self.beta_q,
            gamma_k: &self.gamma_k,
            beta_k: &self.beta_k,
            w_out: &self.w_out,
            b_out: Some(&self.b_out),
        }
    }

    /// The oracle's parameters with the paper's options (c = 1/√s, l = T) and `causal`.
    pub fn params(&self, causal: bool) -> reference::GauParams<'_> {
        reference::GauParams {
            w_in: &self.w_in,
            b_in: Some(&self.b_in),
            gamma_q: &self.gamma_q,
            beta_q: &self.beta_q,
            gamma_k: &self.gamma_k,
            beta_k: &self.beta_k,
            w_out: &self.w_out,
            b_out: Some(&self.b_out),
            scale: reference::ScoreScale::InvSqrtQkDim,
            normalizer: reference::Normalizer::SeqLen,
            key_lengths: None,
            causal,
            bias: None,
            rope: None,
            attention: reference::Attention::Relu2,
        }
    }
}

/// The input `X[1, T, d]`, uniform in [−1, 1).
pub fn input(len: usize) -> Vec<f32> {
    data::uniform(len * DIM, -1.0, 1.0, 0x5eed_0500)
}

/// The unfused GAU a user would compose on the gemm crate (single-threaded, on its kernels for
/// the ISA of the run), with separate passes between the GEMMs, per batch:
///
/// 1. `P = X·W_in` (GEMM), then `P += b_in` (a loop) and `P = swish(P)` ([`Kernels::swish`]
///    in place);
/// 2. `Q = Z⊙γ_q + β_q`, `K = Z⊙γ_k + β_k` (a loop);
/// 3. `S = c·Q·Kᵀ` (GEMM into a `T × T` matrix), then `S = relu(S)²/T` (a loop; causal: the
///    upper triangle zeroed — the GEMM computes every score);
/// 4. `AV = S·V` (GEMM, V read in place in P);
/// 5. `G = U ⊙ AV` (a loop);
/// 6. `O = G·W_o` (GEMM), then `O += b_o` (a loop).
pub struct GauComposition {
    shape: GauShape,
    causal: bool,
    p: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    s: Vec<f32>,
    av: Vec<f32>,
}

impl GauComposition {
    /// The composition of `shape` (the paper's options, `causal` or not), scratch made once.
    pub fn new(shape: &GauShape, causal: bool) -> GauComposition {
        let GauShape {
            seq_len: t,
            expand: e,
            qk_dim: s,
            ..
        } = *shape;
        GauComposition {
            shape: *shape,
            causal,
            p: vec![0.0; t * (2 * e + s)],
            q: vec![0.0; t * s],
            k: vec![0.0; t * s],
            s: vec![0.0; t * t],
            av: vec![0.0; t * e],
        }
    }

    /// Runs it with the swish of `k`: `out[B, T, d]`.
    pub fn run(&mut self, k: Kernels, x: &[f32], w: &GauWeights, out: &mut [f32]) -> Result<(), kernels::Error> {
        let GauShape {
            batch,
            seq_len: t,
            dim: d,
            expand: e,
            qk_dim: s,
        } = self.shape;
        let width = 2 * e + s;
        let gemm = Gemm::GemmCrate;
        let scale = 1.0 / (s as f32).sqrt();
        let inv_l = 1.0 / t as f32;
        for b in 0..batch {
            let x = &x[b * t * d..][..t * d];
            let out = &mut out[b * t * d..][..t * d];
            gemm.matmul(
                k.isa(),
                (t, width, d),
                1.0,
                x,
                (d, 1),
                w.w_in,
                (width, 1),
                &mut self.p,
                false,
            );
            if let Some(bias) = w.b_in {
                for row in self.p.chunks_exact_mut(width) {
                    for (v, &b) in row.iter_mut().zip(bias) {
                        *v += b;
                    }
                }
            }
            k.swish_inplace(&mut self.p)?;
            for ((row, q), kk) in self
                .p
                .chunks_exact(width)
                .zip(self.q.chunks_exact_mut(s))
                .zip(self.k.chunks_exact_mut(s))
            {
                let z = &row[2 * e..];
                for j in 0..s {
                    q[j] = z[j] * w.gamma_q[j] + w.beta_q[j];
                    kk[j] = z[j] * w.gamma_k[j] + w.beta_k[j];
                }
            }
            gemm.matmul(
                k.isa(),
                (t, t, s),
                scale,
                &self.q,
                (s, 1),
                &self.k,
                (1, s),
                &mut self.s,
                false,
            );
            for (i, row) in self.s.chunks_exact_mut(t).enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    let r = v.max(0.0);
                    *v = if self.causal && j > i { 0.0 } else { r * r * inv_l };
                }
            }
            gemm.matmul(
                k.isa(),
                (t, e, t),
                1.0,
                &self.s,
                (t, 1),
                &self.p[e..],
                (width, 1),
                &mut self.av,
                false,
            );
            for (row, av) in self.p.chunks_exact(width).zip(self.av.chunks_exact_mut(e)) {
                for (a, &u) in av.iter_mut().zip(&row[..e]) {
                    *a *= u;
                }
            }
            gemm.matmul(k.isa(), (t, d, e), 1.0, &self.av, (e, 1), w.w_out, (d, 1), out, false);
            if let Some(bias) = w.b_out {
                for row in out.chunks_exact_mut(d) {
                    for (v, &b) in row.iter_mut().zip(bias) {
                        *v += b;
                    }
                }
            }
        }
        Ok(())
    }
}

/// One thing timed on a case's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// The kernel of `ctx.kernels[i]`.
    Kernel(usize),
    /// The same with its weights packed before the timing ([`Kernels::gau_packed`]).
    Packed(usize),
    /// The composition with the swish of `ctx.kernels[i]`.
    Composed(usize),
    /// The FMA-peak loop of an ISA.
    Fma(Isa),
}

/// FLOPs per call: `(counted, dense)`.
pub fn flops(len: usize, causal: bool) -> (f64, f64) {
    let (t, d, e, s) = (len as f64, DIM as f64, EXPAND as f64, QK_DIM as f64);
    let proj = 2.0 * t * d * (2.0 * e + s) + 2.0 * t * e * d;
    let pairs = if causal { t * (t + 1.0) / 2.0 } else { t * t };
    (proj + 2.0 * pairs * (s + e), proj + 2.0 * t * t * (s + e))
}

fn measure(len: usize, causal: bool, full: bool, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let what = format!("gau {}", shape_name(len, causal));
    let fail = |msg: String| ReportError::new(format!("{what}: {msg}"));
    let shape = shape(len);
    let weights = Weights::new(&shape);
    let w = weights.view();
    let x = input(len);
    let mut out = vec![0.0f32; len * DIM];
    let opts = GauOptions {
        causal,
        ..GauOptions::default()
    };
    let mut workspaces: Vec<GauWorkspace> = ctx.kernels.iter().map(|_| GauWorkspace::new()).collect();
    let mut composition = GauComposition::new(&shape, causal);

    let scalar = ctx
        .kernels
        .iter()
        .position(|k| k.isa() == Isa::Scalar)
        .ok_or_else(|| fail("the scalar path is not among the measured ISAs".to_string()))?;
    let printed = |i: usize| ctx.printed.contains(&ctx.kernels[i].isa());
    let small = len <= SMALL_LEN;
    let time_scalar = small && !causal && full && printed(scalar);

    let mut contenders = Vec::new();
    for (i, k) in ctx.kernels.iter().enumerate() {
        if i == scalar || !printed(i) {
            continue;
        }
        contenders.extend([
            Contender::Kernel(i),
            Contender::Packed(i),
            Contender::Composed(i),
            Contender::Fma(k.isa()),
        ]);
    }
    if time_scalar {
        contenders.push(Contender::Fma(Isa::Scalar));
    }

    let packed: Vec<Option<PackedGauWeights>> = ctx
        .kernels
        .iter()
        .map(|k| {
            (k.isa() != Isa::Scalar)
                .then(|| k.pack_gau_weights(&shape, &w))
                .transpose()
        })
        .collect::<Result<_, _>>()
        .map_err(|e| fail(format!("packing the weights: {e}")))?;
    let mut run = |c: Contender, out: &mut [f32]| -> Result<(), String> {
        let x = black_box(&x[..]);
        match c {
            Contender::Kernel(i) => ctx.kernels[i]
                .gau(&shape, x, &w, &opts, out, &mut workspaces[i])
                .map_err(|e| e.to_string())?,
            Contender::Packed(i) => {
                let p = packed[i].as_ref().ok_or("no packed weights for the scalar path")?;
                ctx.kernels[i]
                    .gau_packed(&shape, x, p, &opts, out, &mut workspaces[i])
                    .map_err(|e| e.to_string())?
            }
            Contender::Composed(i) => composition.run(ctx.kernels[i], x, &w, out).map_err(|e| e.to_string())?,
            Contender::Fma(isa) => {
                black_box(roofline::fma_peak(isa, black_box(FMA_ITERS)));
            }
        }
        black_box(out.as_ptr());
        Ok(())
    };

    // The oracle at T ≤ 256 only.
    let exact = small.then(|| reference::gau(&to_reference(&shape), &x, &weights.params(causal)));
    let check = |out: &[f32]| -> (Option<f64>, Option<f64>) {
        match &exact {
            Some(res) => (
                Some(normwise(out, &res.out)),
                Some(reference::fraction::gau(
                    &to_reference(&shape),
                    &x,
                    &weights.params(causal),
                    out,
                )),
            ),
            None => (None, None),
        }
    };

    // Every contender once: errors surface here; outputs are checked.
    let mut checked: Vec<(Option<f64>, Option<f64>)> = vec![(None, None); contenders.len()];
    let mut kernel_out: Vec<Option<Vec<f32>>> = vec![None; ctx.kernels.len()];
    for (c, &contender) in contenders.iter().enumerate() {
        out.fill(f32::NAN);
        run(contender, &mut out).map_err(|e| fail(format!("{contender:?}: {e}")))?;
        match contender {
            Contender::Kernel(i) => {
                checked[c] = check(&out);
                kernel_out[i] = Some(out.clone());
            }
            Contender::Packed(i) => {
                let same = kernel_out[i].as_ref().is_some_and(|k| {
                    k.iter()
                        .zip(&out)
                        .all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan())
                });
                if !same {
                    return Err(fail(format!(
                        "the kernel with packed weights differs from the kernel on {}",
                        ctx.kernels[i].isa()
                    )));
                }
            }
            Contender::Composed(i) => {
                let reference: Vec<f64> = kernel_out[i]
                    .as_ref()
                    .expect("the kernel runs before its composition")
                    .iter()
                    .map(|&v| v as f64)
                    .collect();
                let diff = normwise(&out, &reference);
                if diff.is_nan() || diff > COMPOSITION_TOLERANCE {
                    return Err(fail(format!(
                        "the gemm composition disagrees with the kernel on {} (normwise {diff:e}): a bug in the report",
                        ctx.kernels[i].isa()
                    )));
                }
            }
            Contender::Fma(_) => {}
        }
    }

    // The scalar path: one timed call, checked like the others.
    let scalar_time = if time_scalar {
        let start = Instant::now();
        run(Contender::Kernel(scalar), &mut out).map_err(|e| fail(format!("kernel on scalar: {e}")))?;
        Some((start.elapsed().as_nanos() as f64, check(&out)))
    } else {
        None
    };

    let timing = Timing {
        rounds: if small {
            ctx.timing.rounds
        } else {
            ctx.timing.rounds.min(LONG_ROUNDS)
        },
        ..ctx.timing
    };
    let samples = timing::interleaved(contenders.len(), &timing, |c| {
        // Checked above; a failure here cannot differ from the first call's.
        let _ = run(contenders[c], &mut out);
    });

    let (flops, dense) = flops(len, causal);
    let at = |c: Contender| contenders.iter().position(|&x| x == c);
    let roof = |isa: Isa, kernel_ns: f64| -> Option<(f64, f64)> {
        let r = at(Contender::Fma(isa))?;
        let scale = flops / fma_call_flops(isa);
        Some((samples.min(r) * scale, fma_ratio(samples.min(r), kernel_ns, scale)))
    };
    let bytes = ((2 * len * DIM + DIM * (2 * EXPAND + QK_DIM) + EXPAND * DIM) * std::mem::size_of::<f32>()) as f64;
    let base = Row {
        kernel: "gau".to_string(),
        dtype: "f32".to_string(),
        shape: shape_name(len, causal),
        bytes: Some(bytes),
        elements: Some((len * DIM) as f64),
        flops: Some(flops),
        flops_dense: causal.then_some(dense),
        ..Row::default()
    };
    let mut rows = Vec::new();
    for (i, k) in ctx.kernels.iter().enumerate() {
        let isa = k.isa();
        if !printed(i) {
            continue;
        }
        if i == scalar {
            let Some((ns, (rel, fraction))) = scalar_time else {
                continue;
            };
            let roof = roof(Isa::Scalar, ns);
            rows.push(Row {
                isa: isa.to_string(),
                ns_per_iter: ns,
                max_rel_err: rel,
                bound_fraction: fraction,
                within_bound: fraction.map(|f| f <= 1.0),
                vs_scalar: Some(1.0),
                roofline: Some(roofline::fma_name(isa)),
                roofline_ns_per_iter: roof.map(|r| r.0),
                roofline_ratio: roof.map(|r| r.1),
                rounds: 1,
                ..base.clone()
            });
            continue;
        }
        let c = at(Contender::Kernel(i)).expect("every printed vector ISA has a kernel contender");
        let median = samples.median(c);
        let mut vs_isa: Vec<(String, f64)> = contenders
            .iter()
            .enumerate()
            .filter_map(|(o, &x)| match x {
                Contender::Kernel(j) if j != i => Some((ctx.kernels[j].isa().to_string(), samples.speedup(c, o))),
                _ => None,
            })
            .collect();
        if let Some((ns, _)) = scalar_time {
            vs_isa.push(("scalar".to_string(), ns / median));
        }
        let vs = at(Contender::Composed(i))
            .map(|o| vec![("gemm".to_string(), samples.speedup(c, o))])
            .unwrap_or_default();
        let roof = roof(isa, median);
        rows.push(Row {
            isa: isa.to_string(),
            ns_per_iter: median,
            max_rel_err: checked[c].0,
            bound_fraction: checked[c].1,
            within_bound: checked[c].1.map(|f| f <= 1.0),
            vs_scalar: scalar_time.map(|(ns, _)| ns / median),
            vs_isa,
            vs,
            roofline: Some(roofline::fma_name(isa)),
            roofline_ns_per_iter: roof.map(|r| r.0),
            roofline_ratio: roof.map(|r| r.1),
            rel_iqr: samples.rel_iqr(c),
            rounds: samples.rounds(),
            ..base.clone()
        });
    }
    // The kernel with its weights packed once (what an engine that reuses them runs), against
    // the same composition and peak.
    for (i, k) in ctx.kernels.iter().enumerate() {
        let Some(c) = at(Contender::Packed(i)) else {
            continue;
        };
        let median = samples.median(c);
        let roof = roof(k.isa(), median);
        rows.push(Row {
            kernel: "gau_packed".to_string(),
            isa: k.isa().to_string(),
            ns_per_iter: median,
            vs: at(Contender::Composed(i))
                .map(|o| vec![("gemm".to_string(), samples.speedup(c, o))])
                .unwrap_or_default(),
            vs_isa: at(Contender::Kernel(i))
                .map(|o| vec![("unpacked".to_string(), samples.speedup(c, o))])
                .unwrap_or_default(),
            roofline: Some(roofline::fma_name(k.isa())),
            roofline_ns_per_iter: roof.map(|r| r.0),
            roofline_ratio: roof.map(|r| r.1),
            rel_iqr: samples.rel_iqr(c),
            rounds: samples.rounds(),
            ..base.clone()
        });
    }
    // The composition's own throughput, for the record: a row per ISA, held against that ISA's
    // FMA peak (its GEMMs run the gemm crate's kernels for the ISA, its swish this crate's).
    for (i, k) in ctx.kernels.iter().enumerate() {
        let Some(o) = at(Contender::Composed(i)) else {
            continue;
        };
        let median = samples.median(o);
        let roof = roof(k.isa(), median);
        rows.push(Row {
            kernel: "gau_gemm".to_string(),
            isa: k.isa().to_string(),
            ns_per_iter: median,
            roofline: roof.map(|_| roofline::fma_name(k.isa())),
            roofline_ns_per_iter: roof.map(|r| r.0),
            roofline_ratio: roof.map(|r| r.1),
            rel_iqr: samples.rel_iqr(o),
            rounds: samples.rounds(),
            ..base.clone()
        });
    }
    Ok(rows)
}

/// The worst `|O − Ô|` over the oracle's bound (NaN if an output is NaN), without running the
/// oracle again for each ISA.
fn fraction_of(exact: &reference::GauResult, out: &[f32]) -> f64 {
    out.iter()
        .zip(exact.out.iter().zip(&exact.bound))
        .map(|(&o, (&e, &b))| (o as f64 - e).abs() / b)
        .fold(0.0, |m, f| if f.is_nan() || m.is_nan() { f64::NAN } else { m.max(f) })
}

/// The oracle's shape.
fn to_reference(s: &GauShape) -> reference::GauShape {
    reference::GauShape {
        batch: s.batch,
        seq_len: s.seq_len,
        dim: s.dim,
        expand: s.expand,
        qk_dim: s.qk_dim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composition_matches_the_oracle() {
        let shape = GauShape {
            batch: 2,
            seq_len: 13,
            dim: 8,
            expand: 12,
            qk_dim: 6,
        };
        let weights = Weights::new(&shape);
        let x = data::uniform(2 * 13 * 8, -1.0, 1.0, 7);
        for causal in [false, true] {
            let exact = reference::gau(&to_reference(&shape), &x, &weights.params(causal));
            let mut out = vec![0.0; x.len()];
            GauComposition::new(&shape, causal)
                .run(Kernels::best(), &x, &weights.view(), &mut out)
                .expect("valid");
            assert!(normwise(&out, &exact.out) < 1e-5, "causal={causal}");
        }
        assert_eq!(parse_shape(&shape_name(1024, true)), Some((1024, true)));
    }
}
