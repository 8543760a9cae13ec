//! Rows of `linear`: [`Kernels::linear`] over the layers of two encoders, with their weights
//! packed once ([`Kernels::pack_linear`]) in f32 and in bf16.
//!
//! Layers `K → N` ([`LAYERS`]): all-MiniLM-L6-v2's QKV projection 384 → 1152, attention
//! output 384 → 384, FFN 384 → 1536 → 384; BERT-base's FFN 768 → 3072 → 768. Every layer has
//! a bias; the FFN's first layer applies the erf GELU (`gelu` in the shape), the others none,
//! as in the models. `M ∈ {16, 128, 1024}` rows (tokens: a sentence, a batch, a long batch)
//! under `--full`; the default run takes M = 16 and 128 at 384 → 1536 and 1536 → 384 and
//! M = 1024 at 384 → 1536, `--quick` M = 16 and 128 at 384 → 1536. A shape prints as
//! `MxK→N`, then `gelu` where the layer has it and `bf16w` for bf16 weights. `X` is uniform in
//! [−1, 1), the weights (`[K, N]`, [`WeightLayout::InOut`]) in `±1/√K`, the bias in ±0.1.
//!
//! Each case times, interleaved over the same buffers: the kernel of every printed ISA with
//! f32 and with bf16 weights (the scalar path only where a call costs at most
//! [`SCALAR_MAX_FLOPS`]; `xscalar` "-" elsewhere); the unfused composition a user would write
//! ([`composition`]: the gemm crate's `X·W`, then a plain loop adding the bias, then
//! this crate's [`Kernels::gelu_inplace`] of the row's ISA where the layer has GELU: the
//! `xunfused` column, on the f32-weight rows); the FMA peak of each ISA (every row's roofline,
//! FLOPs `2·M·K·N`); and at M = 16 the copy of the packed weights' bytes
//! ([`PackedLinear::weight_bytes`]) on each ISA, for each weight type. A row's `vs` holds
//! `gemm` (the composition), `copy` (at M = 16: the copy's time ÷ the kernel's, the kernel's
//! weight bytes per second as a fraction of the copy bandwidth of that many bytes) and, on the
//! bf16-weight rows, `f32 weights` (the same ISA's kernel with f32 weights). The copy moves
//! `weight_bytes` in all (half read, half written: the working set of the weights, the
//! report's convention for copies); its bandwidth is the limit of streaming the weights from
//! the level of the memory they sit in (L3 here, across repeated calls, as in an engine that
//! runs the layer again; [`linear_streamed`](super::linear_streamed) gives the rows whose
//! weights come from memory). `linear_gemm` rows give the composition's own throughput.
//!
//! Errors: `Y` is checked with `reference::fraction::linear` (the fraction of the documented
//! bound, against the product with the weights the kernel multiplies by: their bf16 rounding
//! for bf16 weights) on [`checked_rows`] of it (the f64 oracle over the whole output at
//! M = 1024 would take longer than the timing); `max_rel` (in `--json`) is the normwise
//! `max |Y − Ŷ| / max |Ŷ|` over those rows. The composition is held to the same bound (a
//! wrong baseline would make the ratio wrong).

use std::hint::black_box;
use std::ops::Range;

use kernels::{Activation, Isa, Kernels, LinearOptions, LinearWeights, PackedLinear, WeightLayout, WeightType};

use super::accuracy::normwise;
use super::case::{fma_call_flops, fma_ratio, Context, Custom};
use super::output::Row;
use super::timing::{self, Timing};
use super::{no_cases, Family, Headline, Plan, ReportError};
use crate::buffers::Pair;
use crate::composed::Gemm;
use crate::data;
use crate::roofline::{self, Stores, FMA_ITERS};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["linear"],
    cases: no_cases,
    custom,
    headlines: &[Headline::flops("linear", "128x384→1536 gelu")],
};

/// A layer: `K`, `N`, and whether it applies GELU.
pub type Layer = (usize, usize, bool);

/// The layers of the encoders (see the module docs).
pub const LAYERS: [Layer; 6] = [
    (384, 1152, false),
    (384, 384, false),
    (384, 1536, true),
    (1536, 384, false),
    (768, 3072, true),
    (3072, 768, false),
];
/// Rows of `X`.
const ROWS: [usize; 3] = [16, 128, 1024];
/// The shapes of the default run.
const DEFAULT: [(usize, Layer); 5] = [
    (16, LAYERS[2]),
    (16, LAYERS[3]),
    (128, LAYERS[2]),
    (128, LAYERS[3]),
    (1024, LAYERS[2]),
];
/// The shapes of `--quick`.
const QUICK: [(usize, Layer); 2] = [(16, LAYERS[2]), (128, LAYERS[2])];
/// The scalar path is timed where a call costs at most this many FLOPs (≈ 0.1 s a call on the
/// project's machines): M = 16 and 128 at the MiniLM layers.
pub const SCALAR_MAX_FLOPS: f64 = 2e8;
/// Rows of `Y` checked against the oracle: all of them up to this many, else this many split
/// between the first and the last rows (the first tile and the tail).
const CHECKED_ROWS: usize = 16;
/// Rounds where a call of the largest contender takes tens of milliseconds (M = 1024).
const LONG_ROUNDS: usize = 9;

/// The shape as printed: `MxK→N`, ` gelu` where the layer has it, ` bf16w` for bf16 weights.
pub fn shape_name(m: usize, (k, n, gelu): Layer, ty: WeightType) -> String {
    let mut s = format!("{m}x{k}→{n}");
    if gelu {
        s.push_str(" gelu");
    }
    if ty == WeightType::Bf16 {
        s.push_str(" bf16w");
    }
    s
}

/// [`shape_name`] then ` streamed`: the shape of a row whose weights come from memory
/// ([`linear_streamed`](super::linear_streamed)).
pub fn streamed_name(m: usize, layer: Layer, ty: WeightType) -> String {
    shape_name(m, layer, ty) + " streamed"
}

/// A printed shape read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Rows of `X`.
    pub m: usize,
    /// The layer.
    pub layer: Layer,
    /// bf16 weights.
    pub bf16: bool,
    /// Weights streamed from memory.
    pub streamed: bool,
}

/// A printed shape ([`shape_name`], [`streamed_name`]) read back.
pub fn parse_shape(shape: &str) -> Option<Shape> {
    let mut words = shape.split(' ');
    let (m, rest) = words.next()?.split_once('x')?;
    let (k, n) = rest.split_once('→')?;
    let (mut gelu, mut bf16, mut streamed) = (false, false, false);
    for w in words {
        match w {
            "gelu" => gelu = true,
            "bf16w" => bf16 = true,
            "streamed" => streamed = true,
            _ => return None,
        }
    }
    Some(Shape {
        m: m.parse().ok()?,
        layer: (k.parse().ok()?, n.parse().ok()?, gelu),
        bf16,
        streamed,
    })
}

fn custom(plan: &Plan) -> Vec<Custom> {
    let full: Vec<(usize, Layer)> = ROWS.iter().flat_map(|&m| LAYERS.iter().map(move |&l| (m, l))).collect();
    let mut cases: Vec<Custom> = plan
        .pick(&full, &DEFAULT, &QUICK)
        .iter()
        .map(|&(m, layer)| Custom {
            kernel: "linear",
            shape: shape_name(m, layer, WeightType::F32),
            measure: Box::new(move |ctx| measure(m, layer, ctx)),
        })
        .collect();
    cases.extend(super::linear_streamed::custom(plan));
    cases
}

/// FLOPs of a call: `2·M·K·N`.
pub fn flops(m: usize, (k, n, _): Layer) -> f64 {
    2.0 * (m * k * n) as f64
}

/// The weights and bias of a layer, owned: `w[K, N]` uniform in `±1/√K`, `b[N]` in ±0.1.
pub struct Weights {
    /// `K`.
    pub k: usize,
    /// `N`.
    pub n: usize,
    /// `W[K, N]`.
    pub w: Vec<f32>,
    /// `b[N]`.
    pub bias: Vec<f32>,
}

impl Weights {
    /// Deterministic weights of `layer`.
    pub fn new((k, n, _): Layer) -> Weights {
        let a = 1.0 / (k as f32).sqrt();
        Weights {
            k,
            n,
            w: data::uniform(k * n, -a, a, 0x5eed_0a01),
            bias: data::uniform(n, -0.1, 0.1, 0x5eed_0a02),
        }
    }

    /// The kernel's view of them.
    pub fn view(&self) -> LinearWeights<'_> {
        LinearWeights {
            weights: &self.w,
            layout: WeightLayout::InOut,
            in_features: self.k,
            out_features: self.n,
            bias: Some(&self.bias),
        }
    }

    /// The weights as the kernel multiplies by them: as given for f32, rounded to bf16 for
    /// [`WeightType::Bf16`].
    pub fn effective(&self, ty: WeightType) -> Vec<f32> {
        match ty {
            WeightType::Bf16 => self
                .w
                .iter()
                .map(|&v| kernels::half::bf16::from_f32(v).to_f32())
                .collect(),
            _ => self.w.clone(),
        }
    }
}

/// `X[M, K]`, uniform in [−1, 1).
pub fn input(m: usize, k: usize) -> Vec<f32> {
    data::uniform(m * k, -1.0, 1.0, 0x5eed_0a00)
}

/// The activation of a layer, for the kernel.
pub fn activation(gelu: bool) -> Activation {
    if gelu {
        Activation::Gelu
    } else {
        Activation::Identity
    }
}

/// The unfused layer a user would write with the gemm crate (single-threaded): `Y = X·W`
/// (GEMM, on the crate's kernels for `k`'s ISA), then `Y += b` (a plain loop over the rows),
/// then, where the layer has it, `Y = gelu(Y)` ([`Kernels::gelu_inplace`] of `k`).
pub fn composition(k: Kernels, x: &[f32], w: &Weights, gelu: bool, out: &mut [f32]) -> Result<(), kernels::Error> {
    let m = x.len() / w.k;
    Gemm::GemmCrate.matmul(k.isa(), (m, w.n, w.k), 1.0, x, (w.k, 1), &w.w, (w.n, 1), out, false);
    for row in out.chunks_exact_mut(w.n) {
        for (v, &b) in row.iter_mut().zip(&w.bias) {
            *v += b;
        }
    }
    if gelu {
        k.gelu_inplace(out)?;
    }
    Ok(())
}

/// The rows of `Y` checked against the oracle (see `CHECKED_ROWS`): two ranges, the second
/// empty where the first covers them all.
pub fn checked_rows(m: usize) -> [Range<usize>; 2] {
    if m <= CHECKED_ROWS {
        [0..m, m..m]
    } else {
        let half = CHECKED_ROWS / 2;
        [0..half, m - half..m]
    }
}

/// The rows `rows` of a row-major matrix of row length `len`, gathered.
fn gather(v: &[f32], len: usize, rows: &[Range<usize>]) -> Vec<f32> {
    rows.iter()
        .flat_map(|r| &v[r.start * len..r.end * len])
        .copied()
        .collect()
}

/// One thing timed on a case's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// The kernel of `ctx.kernels[i]` with weights of a type.
    Kernel(usize, WeightType),
    /// The composition with the GELU of `ctx.kernels[i]`.
    Composed(usize),
    /// The FMA-peak loop of an ISA.
    Fma(Isa),
    /// The copy of the weight bytes packed for `ctx.kernels[i]` in a type, with its vectors.
    Copy(usize, WeightType),
}

pub const TYPES: [WeightType; 2] = [WeightType::F32, WeightType::Bf16];

fn measure(m: usize, layer: Layer, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let (k, n, gelu) = layer;
    let what = format!("linear {}", shape_name(m, layer, WeightType::F32));
    let fail = |msg: String| ReportError::new(format!("{what}: {msg}"));
    let weights = Weights::new(layer);
    let opts = LinearOptions::default().activation(activation(gelu));
    let flops = flops(m, layer);

    let printed = |i: usize| ctx.printed.contains(&ctx.kernels[i].isa());
    let scalar = ctx.kernels.iter().position(|k| k.isa() == Isa::Scalar);
    let time_scalar = flops <= SCALAR_MAX_FLOPS;
    let timed = |i: usize| printed(i) && (Some(i) != scalar || time_scalar);

    // Weights packed once per ISA and type, outside the timing.
    let mut packed: Vec<[Option<PackedLinear>; 2]> = Vec::new();
    for (i, kern) in ctx.kernels.iter().enumerate() {
        let mut p = [None, None];
        if timed(i) {
            for (t, &ty) in TYPES.iter().enumerate() {
                p[t] = Some(
                    kern.pack_linear(&weights.view(), ty)
                        .map_err(|e| fail(format!("packing the weights for {}: {e}", kern.isa())))?,
                );
            }
        }
        packed.push(p);
    }
    let layer_of = |i: usize, ty: WeightType| packed[i][TYPES.iter().position(|&t| t == ty).unwrap_or(0)].as_ref();

    let mut contenders = Vec::new();
    for (i, kern) in ctx.kernels.iter().enumerate() {
        if !timed(i) {
            continue;
        }
        contenders.extend(TYPES.map(|ty| Contender::Kernel(i, ty)));
        if kern.isa() != Isa::Scalar {
            contenders.push(Contender::Composed(i));
        }
        contenders.push(Contender::Fma(kern.isa()));
        if m == ROWS[0] && kern.isa() != Isa::Scalar {
            contenders.extend(TYPES.map(|ty| Contender::Copy(i, ty)));
        }
    }

    // The copies' buffers: the weight bytes of each ISA and type, half read and half written.
    let mut copies: Vec<(Contender, Pair)> = Vec::new();
    for &c in &contenders {
        if let Contender::Copy(i, ty) = c {
            let bytes = layer_of(i, ty).map_or(0, PackedLinear::weight_bytes);
            let floats = bytes / (2 * std::mem::size_of::<f32>());
            copies.push((c, Pair::new(floats, floats, ctx.out_offset)));
        }
    }

    let mut io = Pair::new(m * k, m * n, ctx.out_offset);
    io.x_mut().copy_from_slice(&input(m, k));
    let mut run = |c: Contender, io: &mut Pair| -> Result<(), String> {
        match c {
            Contender::Kernel(i, ty) => {
                let layer = layer_of(i, ty).ok_or("no packed weights")?;
                let (x, y) = io.io();
                ctx.kernels[i]
                    .linear(black_box(x), layer, y, &opts)
                    .map_err(|e| e.to_string())?;
                black_box(y);
            }
            Contender::Composed(i) => {
                let (x, y) = io.io();
                composition(ctx.kernels[i], black_box(x), &weights, gelu, y).map_err(|e| e.to_string())?;
                black_box(y);
            }
            Contender::Fma(isa) => {
                black_box(roofline::fma_peak(isa, black_box(FMA_ITERS)));
            }
            Contender::Copy(i, _) => {
                let isa = ctx.kernels[i].isa();
                let (_, pair) = copies
                    .iter_mut()
                    .find(|(d, _)| *d == c)
                    .ok_or("no buffers for the copy")?;
                let (x, y) = pair.io();
                if !roofline::copy(isa, Stores::Ordinary, black_box(x), y) {
                    return Err(format!("no {}", roofline::copy_name(isa, Stores::Ordinary)));
                }
                black_box(y);
            }
        }
        Ok(())
    };

    // The oracle on the checked rows, once per weight type.
    let rows = checked_rows(m);
    let x_checked = gather(io.x(), k, &rows);
    let exact: Vec<Vec<f64>> = TYPES
        .iter()
        .map(|&ty| {
            let w = weights.effective(ty);
            reference::linear(
                &x_checked,
                &w,
                (k, n),
                Some(&weights.bias),
                oracle_activation(gelu),
                None,
            )
            .y
        })
        .collect();
    let check = |y: &[f32], ty: WeightType| -> (f64, f64) {
        let t = TYPES.iter().position(|&u| u == ty).unwrap_or(0);
        let got = gather(y, n, &rows);
        let w = weights.effective(ty);
        let fraction = reference::fraction::linear(
            &x_checked,
            &w,
            (k, n),
            Some(&weights.bias),
            oracle_activation(gelu),
            None,
            &got,
        );
        (normwise(&got, &exact[t]), fraction)
    };

    // Every contender once: errors surface here; outputs are checked.
    let mut checked: Vec<Option<(f64, f64)>> = vec![None; contenders.len()];
    for (c, &contender) in contenders.iter().enumerate() {
        io.io().1.fill(f32::NAN);
        run(contender, &mut io).map_err(|e| fail(format!("{contender:?}: {e}")))?;
        match contender {
            Contender::Kernel(_, ty) => checked[c] = Some(check(io.y(), ty)),
            Contender::Composed(i) => {
                let (_, f) = check(io.y(), WeightType::F32);
                if f.is_nan() || f > 1.0 {
                    return Err(fail(format!(
                        "the gemm composition on {} is outside the kernel's bound ({f:.3} of it): a bug in the report",
                        ctx.kernels[i].isa()
                    )));
                }
            }
            Contender::Fma(_) | Contender::Copy(..) => {}
        }
    }

    let timing = Timing {
        rounds: if m >= ROWS[2] {
            ctx.timing.rounds.min(LONG_ROUNDS)
        } else {
            ctx.timing.rounds
        },
        ..ctx.timing
    };
    let samples = timing::interleaved(contenders.len(), &timing, |c| {
        // Checked above; a failure here cannot differ from the first call's.
        let _ = run(contenders[c], &mut io);
    });

    let at = |c: Contender| contenders.iter().position(|&x| x == c);
    let roof = |isa: Isa, kernel_ns: f64| -> Option<(f64, f64)> {
        let r = at(Contender::Fma(isa))?;
        let scale = flops / fma_call_flops(isa);
        Some((samples.min(r) * scale, fma_ratio(samples.min(r), kernel_ns, scale)))
    };
    let moved = |weight_bytes: usize| (weight_bytes + (m * k + m * n + n) * std::mem::size_of::<f32>()) as f64;
    let base = Row {
        kernel: "linear".to_string(),
        dtype: "f32".to_string(),
        elements: Some((m * n) as f64),
        flops: Some(flops),
        ..Row::default()
    };

    let mut out = Vec::new();
    for (c, &contender) in contenders.iter().enumerate() {
        let Contender::Kernel(i, ty) = contender else {
            continue;
        };
        let isa = ctx.kernels[i].isa();
        let median = samples.median(c);
        let weight_bytes = layer_of(i, ty).map_or(0, PackedLinear::weight_bytes);
        let vs_isa: Vec<(String, f64)> = contenders
            .iter()
            .enumerate()
            .filter_map(|(o, &x)| match x {
                Contender::Kernel(j, t) if j != i && t == ty => {
                    Some((ctx.kernels[j].isa().to_string(), samples.speedup(c, o)))
                }
                _ => None,
            })
            .collect();
        let vs_scalar = scalar
            .and_then(|s| at(Contender::Kernel(s, ty)))
            .map(|s| samples.speedup(c, s));
        let mut vs = Vec::new();
        match ty {
            WeightType::F32 => {
                if let Some(o) = at(Contender::Composed(i)) {
                    vs.push(("gemm".to_string(), samples.speedup(c, o)));
                }
            }
            _ => {
                if let Some(o) = at(Contender::Kernel(i, WeightType::F32)) {
                    vs.push(("f32 weights".to_string(), samples.speedup(c, o)));
                }
            }
        }
        if let Some(o) = at(Contender::Copy(i, ty)) {
            vs.push(("copy".to_string(), samples.speedup(c, o)));
        }
        let roof = roof(isa, median);
        let (rel, fraction) = checked[c].map_or((None, None), |(r, f)| (Some(r), Some(f)));
        out.push(Row {
            isa: isa.to_string(),
            shape: shape_name(m, layer, ty),
            bytes: Some(moved(weight_bytes)),
            ns_per_iter: median,
            max_rel_err: rel,
            bound_fraction: fraction,
            within_bound: fraction.map(|f| f <= 1.0),
            vs_scalar,
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
    // The composition's own throughput, for the record: a row per ISA, held against that ISA's
    // FMA peak (its GEMM runs the gemm crate's kernels for the ISA, its GELU this crate's).
    for (c, &contender) in contenders.iter().enumerate() {
        let Contender::Composed(i) = contender else {
            continue;
        };
        let isa = ctx.kernels[i].isa();
        let median = samples.median(c);
        let roof = roof(isa, median);
        out.push(Row {
            kernel: "linear_gemm".to_string(),
            isa: isa.to_string(),
            shape: shape_name(m, layer, WeightType::F32),
            bytes: Some(moved(k * n * std::mem::size_of::<f32>())),
            ns_per_iter: median,
            roofline: roof.map(|_| roofline::fma_name(isa)),
            roofline_ns_per_iter: roof.map(|r| r.0),
            roofline_ratio: roof.map(|r| r.1),
            rel_iqr: samples.rel_iqr(c),
            rounds: samples.rounds(),
            ..base.clone()
        });
    }
    Ok(out)
}

/// The activation of a layer, for the oracle.
pub fn oracle_activation(gelu: bool) -> reference::Activation {
    if gelu {
        reference::Activation::Gelu
    } else {
        reference::Activation::Identity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_read_back() {
        for &(m, layer) in &DEFAULT {
            for ty in TYPES {
                let s = shape_name(m, layer, ty);
                let bf16 = ty == WeightType::Bf16;
                let shape = Shape {
                    m,
                    layer,
                    bf16,
                    streamed: false,
                };
                assert_eq!(parse_shape(&s), Some(shape), "{s}");
                let streamed = Shape {
                    streamed: true,
                    ..shape
                };
                assert_eq!(parse_shape(&streamed_name(m, layer, ty)), Some(streamed));
            }
        }
        assert_eq!(shape_name(128, LAYERS[2], WeightType::F32), "128x384→1536 gelu");
        assert_eq!(parse_shape("T=256 dense"), None);
        assert_eq!(parse_shape("16x384→1536 relu"), None);
    }

    #[test]
    fn composition_matches_the_oracle() {
        let layer = (37, 21, true);
        let w = Weights::new(layer);
        let x = input(5, 37);
        let mut out = vec![0.0; 5 * 21];
        for k in kernels::available_isas() {
            let k = Kernels::for_isa(k).expect("available");
            composition(k, &x, &w, true, &mut out).expect("valid");
            let f = reference::fraction::linear(
                &x,
                &w.w,
                (37, 21),
                Some(&w.bias),
                reference::Activation::Gelu,
                None,
                &out,
            );
            assert!(f <= 1.0, "{}: {f}", k.isa());
        }
    }

    #[test]
    fn checked_rows_cover_the_ends() {
        assert_eq!(checked_rows(16), [0..16, 16..16]);
        assert_eq!(checked_rows(1024), [0..8, 1016..1024]);
        let v: Vec<f32> = (0..6).map(|i| i as f32).collect();
        assert_eq!(gather(&v, 2, &[0..1, 2..3]), vec![0.0, 1.0, 4.0, 5.0]);
    }
}
