//! Rows of attention: `Kernels::attention` at B = 1, H = 8, Dk = Dv = 64, Lq = Lk = L ∈ {512,
//! 2048} (`--full`; 512 otherwise), in four variants:
//!
//! - `plain`: no mask, no P, no S;
//! - `realformer`: the previous scores `P` in, the scores `S = scale·Q·Kᵀ + P` out;
//! - `causal`: bottom-right aligned (the same as top-left here, Lq = Lk);
//! - `padded`: `key_lengths = [3L/4]`.
//!
//! Each case times, interleaved over the same buffers: the kernel of every printed ISA; the
//! unfused compositions ([`crate::composed`]: gemm-crate and matrixmultiply GEMMs around the
//! `Kernels::softmax` of the same ISA); for the variants other than `plain`, the same ISA's
//! kernel without the variant's options (for the causal and RealFormer goals, as per-round
//! ratios); for `plain`, the gemm-crate composition around the plain scalar softmax
//! ([`RowSoftmax::Plain`], the peer "gemm crate + scalar softmax" of the speed-up target);
//! and the FMA peak of each ISA
//! ([`Rule::Fma`](super::Rule::Fma)). The scalar path (≈ 0.6 GFLOP/s) runs one timed call, not
//! interleaved, and only at L ≤ 512.
//!
//! FLOPs: 4·D per visible (query, key) pair and head (`2·Dk` for `Q·Kᵀ`, `2·Dv` for `P·V`):
//! `4·Lq·Lk·D·H` for plain and RealFormer; causal and padded rows count the pairs left after
//! masking, and carry the dense count too ([`Row::flops_dense`], PyTorch's convention).
//!
//! Errors: the f64 oracle is O(L²·D) per head and slow at L = 2048 × 8 heads, so every kernel's
//! output (and S) is checked on sampled rows: heads 0 and H−1, rows 0–15, L/2−8…L/2+7 and
//! L−16…L−1, as a sub-problem the oracle solves exactly (one head, those query rows, every key;
//! causality becomes an additive mask of the rows' original positions). The error is the
//! fraction of the documented bound ([`reference::fraction::attention`] on those rows, the
//! scores output included); `max_rel` (in `--json`) is `max |O − Ô| / Σ_j ŵ_ij·|V_jd|`, the
//! error relative to the magnitude the output averages. The compositions are checked the same way
//! (a wrong baseline would make every ratio wrong).
//!
//! # Strided views
//!
//! Rows `strided D=… L=…`: `Kernels::attention_args` at B = 1, H = 12, Lq = Lk = L ∈ {128, 512},
//! Dk = Dv = D ∈ {64, 32} (BERT-base, MiniLM; `--quick`: D = 32, L = 128 only), with Q, K and
//! V read in place from one fused QKV projection `[B, L, 3·H·D]` and O written into
//! `[B, L, H·D]` (what an encoder layer hands to its output projection). Timed interleaved, on
//! each printed vector ISA: the strided call, the contiguous `Kernels::attention` on
//! `[B, H, L, D]` copies of the same Q, K, V, and the FMA peak. The row shows the strided
//! call's GFLOP/s and fraction of the FMA peak (D = 32 beside D = 64 at each L: narrow heads
//! should not waste work on the 64-key tiles), and in [`Row::vs`] (`contiguous`) the speed-up
//! over the contiguous call, a per-round ratio; the target reads its inverse,
//! time(strided) ÷ time(contiguous). The strided output must equal the contiguous one bit for
//! bit (both are filled with NaN first, so both calls must write every element), else the row
//! fails; the error against the oracle is that of the contiguous output on the sampled rows
//! above. The scalar path is not run on these rows.

use std::hint::black_box;
use std::time::Instant;

use kernels::{AttentionArgs, AttentionOptions, AttentionShape, AttentionWorkspace, Isa, Kernels, Layout};

use super::case::{fma_call_flops, fma_ratio, Context, Custom};
use super::output::Row;
use super::timing::{self, Timing};
use super::{no_cases, Family, Headline, Plan, ReportError};
use crate::buffers::Staggered;
use crate::composed::{Composition, Gemm, RowSoftmax};
use crate::data;
use crate::roofline::{self, FMA_ITERS};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["attention"],
    cases: no_cases,
    custom,
    headlines: &[Headline::flops("attention", "plain L=512")],
};

/// Query heads (as many K/V heads).
pub const HEADS: usize = 8;
/// `Dk = Dv`.
pub const DIM: usize = 64;
/// `Lq = Lk`.
const LENS: [usize; 2] = [512, 2048];
const LENS_DEFAULT: [usize; 1] = [512];
/// The scalar path runs (one call) only at lengths up to this.
const SCALAR_MAX_LEN: usize = 512;
/// Rounds at lengths above `SCALAR_MAX_LEN` (a round takes about a second at L = 2048).
pub const LONG_ROUNDS: usize = 7;
/// Rows per sampled block of the error check.
const SAMPLE_ROWS: usize = 16;
/// A composition whose sampled error exceeds this is wrong, not imprecise.
const COMPOSITION_TOLERANCE: f64 = 1e-3;

/// The options an attention case exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// No mask, no P, no S.
    Plain,
    /// P in, S out.
    RealFormer,
    /// Causal (bottom-right aligned).
    Causal,
    /// Key padding: the first 3/4 of the keys are valid.
    Padded,
}

impl Variant {
    /// Every variant, in printing order.
    pub const ALL: [Variant; 4] = [Variant::Plain, Variant::RealFormer, Variant::Causal, Variant::Padded];

    /// The name printed in the shape column.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::RealFormer => "realformer",
            Variant::Causal => "causal",
            Variant::Padded => "padded",
        }
    }

    /// The valid keys per batch for `len` keys (all but for `Padded`).
    pub fn valid_keys(self, len: usize) -> usize {
        if self == Variant::Padded {
            len * 3 / 4
        } else {
            len
        }
    }

    /// The kernel's options, with `prev` as P and `lens` as the key lengths where the variant
    /// uses them.
    pub fn options<'a>(self, prev: Option<&'a [f32]>, lens: &'a [usize]) -> AttentionOptions<'a> {
        let mut opts = AttentionOptions::default().causal(self == Variant::Causal);
        opts.prev_scores = if self == Variant::RealFormer { prev } else { None };
        opts.key_lengths = (self == Variant::Padded).then_some(lens);
        opts
    }

    /// Visible (query, key) pairs of one head at `Lq = Lk = len`.
    pub fn pairs(self, len: usize) -> usize {
        match self {
            Variant::Plain | Variant::RealFormer => len * len,
            // Query i sees keys 0..=i.
            Variant::Causal => len * (len + 1) / 2,
            Variant::Padded => len * self.valid_keys(len),
        }
    }
}

fn shape_name(variant: Variant, len: usize) -> String {
    format!("{} L={len}", variant.name())
}

/// The variant and length of an attention row's shape.
pub fn parse_shape(shape: &str) -> Option<(&str, usize)> {
    let (variant, len) = shape.split_once(" L=")?;
    Some((variant, len.parse().ok()?))
}

fn custom(plan: &Plan) -> Vec<Custom> {
    let mut cases = Vec::new();
    for &len in plan.pick(&LENS, &LENS_DEFAULT, &LENS_DEFAULT) {
        for variant in Variant::ALL {
            cases.push(Custom {
                kernel: "attention",
                shape: shape_name(variant, len),
                measure: Box::new(move |ctx| measure(variant, len, ctx)),
            });
        }
    }
    for &(len, dim) in plan.pick(&STRIDED, &STRIDED, &STRIDED_QUICK) {
        cases.push(Custom {
            kernel: "attention",
            shape: strided_name(dim, len),
            measure: Box::new(move |ctx| measure_strided(len, dim, ctx)),
        });
    }
    cases
}

/// Query heads (as many K/V heads) of the strided rows: BERT-base and MiniLM-L12.
pub const STRIDED_HEADS: usize = 12;
/// The strided cases, `(L, D)`: each length's two head sizes side by side.
const STRIDED: [(usize, usize); 4] = [(128, 64), (128, 32), (512, 64), (512, 32)];
const STRIDED_QUICK: [(usize, usize); 1] = [(128, 32)];
/// The name in [`Row::vs`] of the contiguous call at the same shape.
pub const CONTIGUOUS: &str = "contiguous";

fn strided_name(dim: usize, len: usize) -> String {
    format!("strided D={dim} L={len}")
}

/// `(D, L)` of a strided row's shape.
pub fn parse_strided(shape: &str) -> Option<(usize, usize)> {
    let (variant, len) = parse_shape(shape)?;
    Some((variant.strip_prefix("strided D=")?.parse().ok()?, len))
}

/// Whether `r` is an f32 row of attention on strided views.
pub fn strided_row(r: &Row) -> bool {
    r.dtype == "f32" && parse_strided(&r.shape).is_some()
}

/// A strided row's time ÷ the contiguous call's at the same shape.
pub fn time_vs_contiguous(r: &Row, _: &[Row]) -> Option<f64> {
    Some(1.0 / r.vs(CONTIGUOUS)?)
}

/// Buffer indices in [`Bench::bufs`].
const Q: usize = 0;
const K: usize = 1;
const V: usize = 2;
const P: usize = 3;
const O: usize = 4;
const S: usize = 5;

/// The index of the gemm crate in [`Gemm::ALL`].
const GEMM_CRATE: usize = 0;

/// One thing timed on a case's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// The kernel of `ctx.kernels[i]` with the variant's options.
    Kernel(usize),
    /// The kernel of `ctx.kernels[i]` without them (plain attention).
    Dense(usize),
    /// The composition on `Gemm::ALL[g]` with the GEMMs and the softmax of `ctx.kernels[i]`'s
    /// ISA.
    Composed(usize, usize),
    /// The gemm-crate composition on the GEMMs of `ctx.kernels[i]`'s ISA, with the plain
    /// scalar softmax.
    ComposedPlain(usize),
    /// The FMA-peak loop of an ISA.
    Fma(Isa),
}

/// A case's data and state: every contender runs on the same buffers.
struct Bench<'c> {
    ctx: &'c Context,
    variant: Variant,
    shape: AttentionShape,
    lens: [usize; 1],
    /// Q, K, V, P, O, S (P and S empty unless RealFormer), staggered in one allocation.
    bufs: Staggered,
    workspaces: Vec<AttentionWorkspace>,
    compositions: Vec<Composition>,
}

impl Bench<'_> {
    fn run(&mut self, c: Contender) -> Result<(), String> {
        let shape = self.shape;
        let [q, k, v, p, o, s]: [&mut [f32]; 6] = self.bufs.all_mut().try_into().expect("six buffers");
        let (q, k, v) = (black_box(&*q), black_box(&*k), black_box(&*v));
        let p = (!p.is_empty()).then_some(black_box(&*p));
        let s = (!s.is_empty()).then_some(s);
        match c {
            Contender::Kernel(i) => {
                let opts = self.variant.options(p, &self.lens);
                self.ctx.kernels[i]
                    .attention(&shape, q, k, v, o, s, &opts, &mut self.workspaces[i])
                    .map_err(|e| e.to_string())?;
            }
            Contender::Dense(i) => {
                self.ctx.kernels[i]
                    .attention(
                        &shape,
                        q,
                        k,
                        v,
                        o,
                        None,
                        &AttentionOptions::default(),
                        &mut self.workspaces[i],
                    )
                    .map_err(|e| e.to_string())?;
            }
            Contender::Composed(g, i) => {
                let kernels = self.ctx.kernels[i];
                self.compositions[g]
                    .run(kernels.isa(), kernels, q, k, v, p, o, s)
                    .map_err(|e| e.to_string())?;
            }
            Contender::ComposedPlain(i) => {
                self.compositions[GEMM_CRATE]
                    .run(self.ctx.kernels[i].isa(), RowSoftmax::Plain, q, k, v, p, o, s)
                    .map_err(|e| e.to_string())?;
            }
            Contender::Fma(isa) => {
                black_box(roofline::fma_peak(isa, black_box(FMA_ITERS)));
            }
        }
        black_box(self.bufs.get(O).as_ptr());
        Ok(())
    }

    fn name(&self, c: Contender) -> String {
        match c {
            Contender::Kernel(i) => format!("kernel on {}", self.ctx.kernels[i].isa()),
            Contender::Dense(i) => format!("plain attention on {}", self.ctx.kernels[i].isa()),
            Contender::Composed(g, i) => format!(
                "{} + softmax({}) composition",
                Gemm::ALL[g].name(),
                self.ctx.kernels[i].isa()
            ),
            Contender::ComposedPlain(i) => format!(
                "{}({}) + plain softmax composition",
                Gemm::GemmCrate.name(),
                self.ctx.kernels[i].isa()
            ),
            Contender::Fma(isa) => roofline::fma_name(isa),
        }
    }

    fn scores(&self) -> Option<&[f32]> {
        let s = self.bufs.get(S);
        (!s.is_empty()).then_some(s)
    }
}

/// Sampled rows of one head, as a sub-problem the oracle solves exactly.
struct Sample {
    head: usize,
    rows: Vec<usize>,
    shape: reference::AttentionShape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    prev: Vec<f32>,
    mask: Vec<f32>,
    lens: [usize; 1],
    padded: bool,
    exact: reference::AttentionResult,
}

/// The oracle's options for a sub-problem: the causal mask (if not empty), P (if not empty),
/// the key lengths (if padded).
fn oracle_options<'a>(
    mask: &'a [f32],
    prev: &'a [f32],
    lens: &'a [usize],
    padded: bool,
) -> reference::AttentionOptions<'a> {
    reference::AttentionOptions {
        mask: (!mask.is_empty()).then_some((mask, reference::MaskShape::Shared)),
        key_lengths: padded.then_some(lens),
        prev_scores: (!prev.is_empty()).then_some(prev),
        ..reference::AttentionOptions::default()
    }
}

/// What the check of one output found.
#[derive(Debug, Clone, Copy)]
struct Checked {
    max_rel: f64,
    /// The worst error as a fraction of the documented bound.
    fraction: f64,
}

impl Sample {
    fn new(bench: &Bench, head: usize) -> Sample {
        let AttentionShape {
            q_len: lq,
            kv_len: lk,
            head_dim: dk,
            value_dim: dv,
            ..
        } = bench.shape;
        let mut rows: Vec<usize> = Vec::new();
        for start in [
            0,
            (lq / 2).saturating_sub(SAMPLE_ROWS / 2),
            lq.saturating_sub(SAMPLE_ROWS),
        ] {
            for i in start..(start + SAMPLE_ROWS).min(lq) {
                if !rows.contains(&i) {
                    rows.push(i);
                }
            }
        }
        let r = rows.len();
        let gather = |buf: usize, width: usize| -> Vec<f32> {
            let b = &bench.bufs.get(buf)[head * lq * width..][..lq * width];
            rows.iter().flat_map(|&i| &b[i * width..][..width]).copied().collect()
        };
        let q = gather(Q, dk);
        let k = bench.bufs.get(K)[head * lk * dk..][..lk * dk].to_vec();
        let v = bench.bufs.get(V)[head * lk * dv..][..lk * dv].to_vec();
        let prev = if bench.bufs.get(P).is_empty() {
            Vec::new()
        } else {
            gather(P, lk)
        };
        // Causality of the original rows as an additive mask: query i sees keys j ≤ i + Lk − Lq.
        let mask = if bench.variant == Variant::Causal {
            rows.iter()
                .flat_map(|&i| (0..lk).map(move |j| if j + lq > i + lk { f32::NEG_INFINITY } else { 0.0 }))
                .collect()
        } else {
            Vec::new()
        };
        let shape = reference::AttentionShape {
            batch: 1,
            heads: 1,
            kv_heads: 1,
            q_len: r,
            kv_len: lk,
            head_dim: dk,
            value_dim: dv,
        };
        let padded = bench.variant == Variant::Padded;
        let exact = reference::attention(&shape, &q, &k, &v, &oracle_options(&mask, &prev, &bench.lens, padded));
        Sample {
            head,
            rows,
            shape,
            q,
            k,
            v,
            prev,
            mask,
            lens: bench.lens,
            padded,
            exact,
        }
    }

    fn options(&self) -> reference::AttentionOptions<'_> {
        oracle_options(&self.mask, &self.prev, &self.lens, self.padded)
    }

    /// Checks the sampled rows of the full outputs `out` (and `scores`).
    fn check(&self, out: &[f32], scores: Option<&[f32]>, full: &AttentionShape) -> Checked {
        let (lq, lk, dv) = (full.q_len, full.kv_len, full.value_dim);
        let got: Vec<f32> = self
            .rows
            .iter()
            .flat_map(|&i| &out[(self.head * lq + i) * dv..][..dv])
            .copied()
            .collect();
        let got_scores: Option<Vec<f32>> = scores.map(|s| {
            self.rows
                .iter()
                .flat_map(|&i| &s[(self.head * lq + i) * lk..][..lk])
                .copied()
                .collect()
        });
        let mut max_rel = 0.0f64;
        for (r, row) in got.chunks_exact(dv).enumerate() {
            let w = &self.exact.weights[r * lk..][..lk];
            for (d, &g) in row.iter().enumerate() {
                let exact = self.exact.out[r * dv + d];
                let magnitude: f64 = w
                    .iter()
                    .enumerate()
                    .map(|(j, &w)| w * (self.v[j * dv + d] as f64).abs())
                    .sum();
                let err = (g as f64 - exact).abs();
                let rel = if err == 0.0 {
                    0.0
                } else if magnitude > 0.0 {
                    err / magnitude
                } else {
                    f64::INFINITY
                };
                max_rel = max_rel.max(if rel.is_nan() { f64::INFINITY } else { rel });
            }
        }
        let fraction = reference::fraction::attention(
            &self.shape,
            &self.q,
            &self.k,
            &self.v,
            &self.options(),
            &got,
            got_scores.as_deref(),
        );
        Checked { max_rel, fraction }
    }
}

/// Checks `out` (and `scores`) on every sample; the worst of them.
fn check_all(samples: &[Sample], bench: &Bench) -> Checked {
    samples
        .iter()
        .map(|s| s.check(bench.bufs.get(O), bench.scores(), &bench.shape))
        .fold(
            Checked {
                max_rel: 0.0,
                fraction: 0.0,
            },
            |a, b| Checked {
                max_rel: a.max_rel.max(b.max_rel),
                fraction: a.fraction.max(b.fraction),
            },
        )
}

fn measure(variant: Variant, len: usize, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let what = format!("attention {}", shape_name(variant, len));
    let fail = |msg: String| ReportError::new(format!("{what}: {msg}"));

    let shape = AttentionShape::self_attention(1, HEADS, len, DIM);
    let n_qkv = HEADS * len * DIM;
    let n_scores = if variant == Variant::RealFormer {
        HEADS * len * len
    } else {
        0
    };
    let mut bufs = Staggered::new(&[n_qkv, n_qkv, n_qkv, n_scores, n_qkv, n_scores]);
    for (buf, seed) in [(Q, 0x5eed_0a01), (K, 0x5eed_0a02), (V, 0x5eed_0a03), (P, 0x5eed_0a04)] {
        let len = bufs.get(buf).len();
        bufs.get_mut(buf).copy_from_slice(&data::uniform(len, -1.0, 1.0, seed));
    }
    let lens = [variant.valid_keys(len)];
    let compositions = Gemm::ALL
        .iter()
        .map(|&g| Composition::new(g, &shape, &variant.options(None, &lens)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(fail)?;
    let mut bench = Bench {
        ctx,
        variant,
        shape,
        lens,
        bufs,
        workspaces: ctx
            .kernels
            .iter()
            .map(|_| AttentionWorkspace::for_shape(&shape))
            .collect(),
        compositions,
    };
    let samples: Vec<Sample> = [0, HEADS - 1].iter().map(|&h| Sample::new(&bench, h)).collect();

    let scalar = ctx
        .kernels
        .iter()
        .position(|k| k.isa() == Isa::Scalar)
        .ok_or_else(|| fail("the scalar path is not among the measured ISAs".to_string()))?;
    let printed = |i: usize| ctx.printed.contains(&ctx.kernels[i].isa());
    let time_scalar = len <= SCALAR_MAX_LEN;

    // Interleaved contenders: per printed vector ISA, its kernel, the plain kernel (for the
    // variants' goals), the two compositions (and, plain, the gemm crate's with the plain
    // softmax) and its FMA peak; the scalar FMA peak for the scalar row.
    let mut contenders = Vec::new();
    for (i, k) in ctx.kernels.iter().enumerate() {
        if i == scalar || !printed(i) {
            continue;
        }
        contenders.push(Contender::Kernel(i));
        if variant != Variant::Plain {
            contenders.push(Contender::Dense(i));
        }
        contenders.extend((0..Gemm::ALL.len()).map(|g| Contender::Composed(g, i)));
        if variant == Variant::Plain {
            contenders.push(Contender::ComposedPlain(i));
        }
        contenders.push(Contender::Fma(k.isa()));
    }
    let scalar_row = time_scalar && printed(scalar);
    if scalar_row {
        contenders.push(Contender::Fma(Isa::Scalar));
    }

    // Every contender once: errors surface here with a message; outputs are checked.
    let mut checked: Vec<Option<Checked>> = vec![None; contenders.len()];
    for (c, &contender) in contenders.iter().enumerate() {
        bench
            .run(contender)
            .map_err(|e| fail(format!("{}: {e}", bench.name(contender))))?;
        match contender {
            Contender::Kernel(_) => checked[c] = Some(check_all(&samples, &bench)),
            Contender::Composed(..) | Contender::ComposedPlain(_) => {
                let e = check_all(&samples, &bench);
                if e.max_rel.is_nan() || e.max_rel > COMPOSITION_TOLERANCE {
                    return Err(fail(format!(
                        "the {} disagrees with the oracle (max_rel {:e}): a bug in the report",
                        bench.name(contender),
                        e.max_rel
                    )));
                }
            }
            _ => {}
        }
    }

    // The scalar path: one timed call (≈ 1 s at L = 512), checked like the others.
    let scalar_time = if time_scalar {
        let start = Instant::now();
        bench
            .run(Contender::Kernel(scalar))
            .map_err(|e| fail(format!("kernel on scalar: {e}")))?;
        Some((start.elapsed().as_nanos() as f64, check_all(&samples, &bench)))
    } else {
        None
    };

    let timing = Timing {
        rounds: if len > SCALAR_MAX_LEN {
            ctx.timing.rounds.min(LONG_ROUNDS)
        } else {
            ctx.timing.rounds
        },
        ..ctx.timing
    };
    let samples_ns = timing::interleaved(contenders.len(), &timing, |c| {
        // Checked above; a failure here cannot differ from the first call's.
        let _ = bench.run(contenders[c]);
    });

    let flops = (4 * DIM * HEADS * variant.pairs(len)) as f64;
    let dense = (4 * DIM * HEADS * len * len) as f64;
    let bytes = (4 * n_qkv + 2 * n_scores) * std::mem::size_of::<f32>();
    let at = |c: Contender| contenders.iter().position(|&x| x == c);
    // The FMA peak's time for the case's FLOPs, and the kernel's fraction of it.
    // The FMA peak's fastest round scaled to the case's FLOPs, and the kernel's fraction of it.
    let roof = |isa: Isa, kernel_ns: f64| -> Option<(f64, f64)> {
        let r = at(Contender::Fma(isa))?;
        let scale = flops / fma_call_flops(isa);
        Some((
            samples_ns.min(r) * scale,
            fma_ratio(samples_ns.min(r), kernel_ns, scale),
        ))
    };
    let base = Row {
        kernel: "attention".to_string(),
        dtype: "f32".to_string(),
        shape: shape_name(variant, len),
        bytes: Some(bytes as f64),
        flops: Some(flops),
        flops_dense: (variant.pairs(len) != len * len).then_some(dense),
        ..Row::default()
    };

    let mut rows = Vec::new();
    for (i, k) in ctx.kernels.iter().enumerate() {
        let isa = k.isa();
        if !printed(i) {
            continue;
        }
        if i == scalar {
            let (Some((ns, checked)), true) = (scalar_time, scalar_row) else {
                continue;
            };
            let roof = roof(Isa::Scalar, ns);
            rows.push(Row {
                isa: isa.to_string(),
                ns_per_iter: ns,
                max_rel_err: Some(checked.max_rel),
                bound_fraction: Some(checked.fraction),
                within_bound: Some(checked.fraction <= 1.0),
                vs_scalar: Some(1.0),
                vs_isa: contenders
                    .iter()
                    .enumerate()
                    .filter_map(|(c, &x)| match x {
                        Contender::Kernel(j) => Some((ctx.kernels[j].isa().to_string(), samples_ns.median(c) / ns)),
                        _ => None,
                    })
                    .collect(),
                roofline: Some(roofline::fma_name(isa)),
                roofline_ns_per_iter: roof.map(|r| r.0),
                roofline_ratio: roof.map(|r| r.1),
                rel_iqr: 0.0,
                rounds: 1,
                ..base.clone()
            });
            continue;
        }
        let c = at(Contender::Kernel(i)).expect("every printed vector ISA has a kernel contender");
        let ratio = |other: Contender| at(other).map(|o| samples_ns.speedup(c, o));
        let mut vs_isa: Vec<(String, f64)> = contenders
            .iter()
            .enumerate()
            .filter_map(|(o, &x)| match x {
                Contender::Kernel(j) if j != i => Some((ctx.kernels[j].isa().to_string(), samples_ns.speedup(c, o))),
                _ => None,
            })
            .collect();
        let median = samples_ns.median(c);
        if let Some((ns, _)) = scalar_time {
            vs_isa.push(("scalar".to_string(), ns / median));
        }
        let mut vs: Vec<(String, f64)> = Gemm::ALL
            .iter()
            .enumerate()
            .filter_map(|(g, gemm)| Some((gemm.name().to_string(), ratio(Contender::Composed(g, i))?)))
            .collect();
        if let Some(q) = ratio(Contender::ComposedPlain(i)) {
            vs.push(("gemm+plain".to_string(), q));
        }
        if let Some(q) = ratio(Contender::Dense(i)) {
            vs.push(("attention plain".to_string(), q));
        }
        let roof = roof(isa, median);
        rows.push(Row {
            isa: isa.to_string(),
            ns_per_iter: median,
            max_rel_err: checked[c].map(|e| e.max_rel),
            bound_fraction: checked[c].map(|e| e.fraction),
            within_bound: checked[c].map(|e| e.fraction <= 1.0),
            vs_scalar: scalar_time.map(|(ns, _)| ns / median),
            vs_isa,
            vs,
            roofline: Some(roofline::fma_name(isa)),
            roofline_ns_per_iter: roof.map(|r| r.0),
            roofline_ratio: roof.map(|r| r.1),
            rel_iqr: samples_ns.rel_iqr(c),
            rounds: samples_ns.rounds(),
            ..base.clone()
        });
    }
    Ok(rows)
}

/// One thing timed in a strided case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StridedContender {
    /// `attention_args` of `ctx.kernels[i]` on the fused QKV buffer.
    Strided(usize),
    /// `attention` of `ctx.kernels[i]` on the contiguous copies.
    Contiguous(usize),
    /// The FMA-peak loop of an ISA.
    Fma(Isa),
}

/// Buffer indices in the strided case's second [`Staggered`].
const QKV: usize = 0;
const OUT: usize = 1;

/// Attention of `kernels` reading Q, K, V in place from `fused[QKV]` (`[B = 1, L, 3·H·D]`) and
/// writing O into `fused[OUT]` (`[L, H·D]`).
fn run_strided(
    kernels: Kernels,
    shape: &AttentionShape,
    fused: &mut Staggered,
    workspace: &mut AttentionWorkspace,
) -> Result<(), String> {
    let (l, h, d) = (shape.q_len, shape.heads, shape.head_dim);
    let [qkv, out]: [&mut [f32]; 2] = fused.all_mut().try_into().expect("two buffers");
    let qkv = black_box(&*qkv);
    let block = |b: usize| Layout::tokens_first(l, 3 * h * d, b * h * d, d);
    let args = AttentionArgs {
        shape: *shape,
        q: qkv,
        q_layout: block(0),
        k: qkv,
        k_layout: block(1),
        v: qkv,
        v_layout: block(2),
        out,
        out_layout: Layout::tokens_first(l, h * d, 0, d),
        scores: None,
        options: AttentionOptions::default(),
    };
    kernels.attention_args(args, workspace).map_err(|e| e.to_string())?;
    black_box(fused.get(OUT).as_ptr());
    Ok(())
}

/// The first element where the strided output `[L, H·D]` and the contiguous `[H, L, D]`
/// differ in bits: `(head, row, column, strided, contiguous)`.
fn first_difference(
    strided: &[f32],
    contiguous: &[f32],
    shape: &AttentionShape,
) -> Option<(usize, usize, usize, f32, f32)> {
    let (l, h, d) = (shape.q_len, shape.heads, shape.value_dim);
    (0..h)
        .flat_map(|hh| (0..l).map(move |ll| (hh, ll)))
        .find_map(|(hh, ll)| {
            let s = &strided[(ll * h + hh) * d..][..d];
            let c = &contiguous[(hh * l + ll) * d..][..d];
            (0..d)
                .find(|&j| s[j].to_bits() != c[j].to_bits())
                .map(|j| (hh, ll, j, s[j], c[j]))
        })
}

fn measure_strided(len: usize, dim: usize, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let what = format!("attention {}", strided_name(dim, len));
    let fail = |msg: String| ReportError::new(format!("{what}: {msg}"));

    let heads = STRIDED_HEADS;
    let shape = AttentionShape::self_attention(1, heads, len, dim);
    let n = heads * len * dim;
    let mut bufs = Staggered::new(&[n, n, n, 0, n, 0]);
    for (buf, seed) in [(Q, 0x5eed_0b01), (K, 0x5eed_0b02), (V, 0x5eed_0b03)] {
        bufs.get_mut(buf).copy_from_slice(&data::uniform(n, -1.0, 1.0, seed));
    }
    // The same Q, K, V as the three column blocks of one fused projection [L, 3·H·D].
    let width = 3 * heads * dim;
    let mut fused = Staggered::new(&[len * width, n]);
    for (block, buf) in [Q, K, V].into_iter().enumerate() {
        let (src, qkv) = (bufs.get(buf), fused.get_mut(QKV));
        for h in 0..heads {
            for l in 0..len {
                qkv[l * width + (block * heads + h) * dim..][..dim].copy_from_slice(&src[(h * len + l) * dim..][..dim]);
            }
        }
    }
    let mut bench = Bench {
        ctx,
        variant: Variant::Plain,
        shape,
        lens: [len],
        bufs,
        workspaces: ctx
            .kernels
            .iter()
            .map(|_| AttentionWorkspace::for_shape(&shape))
            .collect(),
        compositions: Vec::new(),
    };
    let samples: Vec<Sample> = [0, heads - 1].iter().map(|&h| Sample::new(&bench, h)).collect();

    let vector: Vec<usize> = (0..ctx.kernels.len())
        .filter(|&i| ctx.kernels[i].isa() != Isa::Scalar && ctx.printed.contains(&ctx.kernels[i].isa()))
        .collect();
    let contenders: Vec<StridedContender> = vector
        .iter()
        .flat_map(|&i| {
            [
                StridedContender::Strided(i),
                StridedContender::Contiguous(i),
                StridedContender::Fma(ctx.kernels[i].isa()),
            ]
        })
        .collect();
    if contenders.is_empty() {
        return Ok(Vec::new());
    }

    // Each ISA once, both outputs filled with NaN first: the contiguous output is checked
    // against the oracle, the strided one against it bit for bit.
    let mut checked = Vec::new();
    for &i in &vector {
        let isa = ctx.kernels[i].isa();
        bench.bufs.get_mut(O).fill(f32::NAN);
        fused.get_mut(OUT).fill(f32::NAN);
        bench
            .run(Contender::Kernel(i))
            .map_err(|e| fail(format!("contiguous kernel on {isa}: {e}")))?;
        run_strided(ctx.kernels[i], &shape, &mut fused, &mut bench.workspaces[i])
            .map_err(|e| fail(format!("strided kernel on {isa}: {e}")))?;
        if let Some((h, l, d, s, c)) = first_difference(fused.get(OUT), bench.bufs.get(O), &shape) {
            return Err(fail(format!(
                "on {isa} the strided output differs from the contiguous one at head {h}, row {l}, column {d}: \
                 {s:e} vs {c:e}"
            )));
        }
        checked.push(check_all(&samples, &bench));
    }

    let samples_ns = timing::interleaved(contenders.len(), &ctx.timing, |c| {
        // Each ran above; a failure here cannot differ from the first call's.
        let _ = match contenders[c] {
            StridedContender::Strided(i) => run_strided(ctx.kernels[i], &shape, &mut fused, &mut bench.workspaces[i]),
            StridedContender::Contiguous(i) => bench.run(Contender::Kernel(i)),
            StridedContender::Fma(isa) => bench.run(Contender::Fma(isa)),
        };
    });

    let flops = (4 * dim * heads * len * len) as f64;
    let at = |c: StridedContender| contenders.iter().position(|&x| x == c);
    let mut rows = Vec::new();
    for (&i, checked) in vector.iter().zip(&checked) {
        let isa = ctx.kernels[i].isa();
        let c = at(StridedContender::Strided(i)).expect("a strided contender per ISA");
        let contiguous = at(StridedContender::Contiguous(i)).expect("a contiguous contender per ISA");
        let fma = at(StridedContender::Fma(isa)).expect("an FMA peak per ISA");
        let median = samples_ns.median(c);
        let scale = flops / fma_call_flops(isa);
        let vs_isa = vector
            .iter()
            .filter(|&&j| j != i)
            .filter_map(|&j| {
                let o = at(StridedContender::Strided(j))?;
                Some((ctx.kernels[j].isa().to_string(), samples_ns.speedup(c, o)))
            })
            .collect();
        rows.push(Row {
            kernel: "attention".to_string(),
            isa: isa.to_string(),
            dtype: "f32".to_string(),
            shape: strided_name(dim, len),
            bytes: Some((4 * n * std::mem::size_of::<f32>()) as f64),
            flops: Some(flops),
            ns_per_iter: median,
            max_rel_err: Some(checked.max_rel),
            bound_fraction: Some(checked.fraction),
            within_bound: Some(checked.fraction <= 1.0),
            vs_isa,
            vs: vec![(CONTIGUOUS.to_string(), samples_ns.speedup(c, contiguous))],
            roofline: Some(roofline::fma_name(isa)),
            roofline_ns_per_iter: Some(samples_ns.min(fma) * scale),
            roofline_ratio: Some(fma_ratio(samples_ns.min(fma), median, scale)),
            rel_iqr: samples_ns.rel_iqr(c),
            rounds: samples_ns.rounds(),
            ..Row::default()
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_back_and_pairs_count_the_visible_keys() {
        for v in Variant::ALL {
            assert_eq!(parse_shape(&shape_name(v, 2048)), Some((v.name(), 2048)));
        }
        assert_eq!(Variant::Causal.pairs(4), 10);
        assert_eq!(Variant::Padded.pairs(8), 48);
    }

    #[test]
    fn strided_shapes_parse_back_and_are_no_variant() {
        for &(len, dim) in STRIDED.iter().chain(&STRIDED_QUICK) {
            let name = strided_name(dim, len);
            assert_eq!(parse_strided(&name), Some((dim, len)));
            let (variant, _) = parse_shape(&name).expect("parses as an attention shape");
            assert!(!Variant::ALL.iter().any(|v| v.name() == variant), "{name}");
        }
        assert_eq!(parse_strided(&shape_name(Variant::Plain, 512)), None);
    }

    #[test]
    fn strided_and_contiguous_outputs_compare_by_position() {
        let shape = AttentionShape::self_attention(1, 2, 3, 2);
        // Contiguous [H, L, D] holding h·100 + l·10 + d; strided [L, H·D] the same values.
        let contiguous: Vec<f32> = (0..12)
            .map(|i| ((i / 6) * 100 + (i / 2 % 3) * 10 + i % 2) as f32)
            .collect();
        let mut strided: Vec<f32> = (0..12)
            .map(|i| ((i / 2 % 2) * 100 + (i / 4) * 10 + i % 2) as f32)
            .collect();
        assert_eq!(first_difference(&strided, &contiguous, &shape), None);
        strided[4 * 2 + 2 + 1] = -0.0; // l = 2, h = 1, d = 1
        let diff = first_difference(&strided, &contiguous, &shape);
        assert_eq!(diff.map(|(h, l, d, ..)| (h, l, d)), Some((1, 2, 1)));
    }

    #[test]
    fn strided_views_give_the_contiguous_output_bit_for_bit() {
        // Two heads of 32 over 70 keys: a partial 64-key tile on every ISA.
        let (heads, len, dim) = (2, 70, 32);
        let shape = AttentionShape::self_attention(1, heads, len, dim);
        let n = heads * len * dim;
        let qkv = data::uniform(3 * n, -1.0, 1.0, 7);
        let width = 3 * heads * dim;
        // The contiguous [H, L, D] copies of the fused buffer's three blocks.
        let block = |b: usize| -> Vec<f32> {
            (0..n)
                .map(|i| qkv[(i / dim % len) * width + (b * heads + i / (len * dim)) * dim + i % dim])
                .collect()
        };
        let (q, k, v) = (block(0), block(1), block(2));
        for isa in Isa::ALL {
            let Ok(kern) = Kernels::for_isa(isa) else { continue };
            let mut fused = Staggered::new(&[len * width, n]);
            fused.get_mut(QKV).copy_from_slice(&qkv);
            fused.get_mut(OUT).fill(f32::NAN);
            let mut ws = AttentionWorkspace::new();
            run_strided(kern, &shape, &mut fused, &mut ws).expect("strided call");
            let mut out = vec![f32::NAN; n];
            let opts = AttentionOptions::default();
            kern.attention(&shape, &q, &k, &v, &mut out, None, &opts, &mut ws)
                .expect("contiguous call");
            assert_eq!(first_difference(fused.get(OUT), &out, &shape), None, "{isa}");
        }
    }
}
