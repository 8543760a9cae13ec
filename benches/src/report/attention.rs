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

use std::hint::black_box;
use std::time::Instant;

use kernels::{AttentionOptions, AttentionShape, AttentionWorkspace, Isa};

use super::case::{fma_call_flops, fma_ratio, Context, Custom};
use super::output::Row;
use super::timing::{self, Timing};
use super::{Family, Headline, Plan, ReportError};
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

fn no_cases(_: &Plan) -> Vec<super::Case> {
    Vec::new()
}

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
    cases
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
    /// The composition on `Gemm::ALL[g]` with the softmax of `ctx.kernels[i]`.
    Composed(usize, usize),
    /// The gemm-crate composition with the plain scalar softmax.
    ComposedPlain,
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
                self.compositions[g]
                    .run(self.ctx.kernels[i], q, k, v, p, o, s)
                    .map_err(|e| e.to_string())?;
            }
            Contender::ComposedPlain => {
                self.compositions[GEMM_CRATE]
                    .run(RowSoftmax::Plain, q, k, v, p, o, s)
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
            Contender::ComposedPlain => format!("{} + plain softmax composition", Gemm::GemmCrate.name()),
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
    // variants' goals), the two compositions and its FMA peak; the scalar FMA peak for the
    // scalar row.
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
        contenders.push(Contender::Fma(k.isa()));
    }
    if variant == Variant::Plain && !contenders.is_empty() {
        contenders.push(Contender::ComposedPlain);
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
            Contender::Composed(..) | Contender::ComposedPlain => {
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
        if let Some(q) = ratio(Contender::ComposedPlain) {
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
}
