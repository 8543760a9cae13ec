//! Rows of the compute-bound kernels over f16 and bf16 tensors: attention and GAU.
//!
//! Each case times, interleaved over the same shapes, the kernel of every printed SIMD ISA on
//! f32, f16 and bf16 tensors (each type in its own staggered buffers, see [`Staggered`]) and
//! the ISA's FMA peak; a half row's `xf32` (`vs` entry `f32`) is the median over rounds of
//! `time(f32 kernel) / time(half kernel)` on the same ISA, and its `xroof` the fraction of the
//! FMA peak (FLOPs as in the f32 rows: attention `4·L²·D·H`, GAU as in [`super::gau::flops`]).
//! The scalar path is not timed here (minutes per call at these shapes).
//!
//! Shapes: attention as the f32 plain rows (B = 1, H = 8, Dk = Dv = 64, L = 512, and 2048
//! under `--full`); GAU as the f32 non-causal rows (T = 256, and 1024 under `--full`; d = 512,
//! e = 1024, s = 128). Accuracy: attention's head 0 is checked against the oracle as a one-head
//! problem with [`reference::fraction::attention`] (heads are independent, so the kernel's head
//! 0 is that problem's output); the GAU at T = 256 with [`reference::fraction::gau`]: the
//! fraction of the bound, the one rounding to the half type free. `max_rel` (in `--json`) is
//! the normwise error `max |O − Ô| / max |Ô|`, which for a half output includes its one
//! rounding (about 2⁻¹² for f16, 2⁻⁹ for bf16 relative to the largest element).

use std::hint::black_box;

use kernels::half::{bf16, f16};
use kernels::{AttentionOptions, AttentionShape, AttentionWorkspace, Element, GauOptions, GauWorkspace, Isa};

use super::accuracy::normwise;
use super::case::{fma_call_flops, fma_ratio, Context, Custom};
use super::output::Row;
use super::timing;
use super::{gau, Family, Plan, ReportError};
use crate::buffers::Staggered;
use crate::roofline::{self, FMA_ITERS};
use crate::storage::Typed;
use crate::{data, storage};

/// The kernels of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &["attention", "gau"],
    cases: no_cases,
    custom,
    headlines: &[],
};

fn no_cases(_: &Plan) -> Vec<super::Case> {
    Vec::new()
}

const ATTENTION_LENS: [usize; 2] = [512, 2048];
const ATTENTION_LENS_DEFAULT: [usize; 1] = [512];
const GAU_LENS: [usize; 2] = [256, 1024];
const GAU_LENS_DEFAULT: [usize; 1] = [256];
/// The GAU oracle runs at this length and below.
const GAU_CHECK_MAX_LEN: usize = 256;
/// Rounds at the large shapes (a round takes about a second there).
const LONG_ROUNDS: usize = 7;

fn custom(plan: &Plan) -> Vec<Custom> {
    let mut out = Vec::new();
    for &len in plan.pick(&ATTENTION_LENS, &ATTENTION_LENS_DEFAULT, &ATTENTION_LENS_DEFAULT) {
        out.push(Custom {
            kernel: "attention",
            shape: format!("plain L={len}"),
            measure: Box::new(move |ctx| attention(len, ctx)),
        });
    }
    for &len in plan.pick(&GAU_LENS, &GAU_LENS_DEFAULT, &GAU_LENS_DEFAULT) {
        out.push(Custom {
            kernel: "gau",
            shape: format!("T={len}"),
            measure: Box::new(move |ctx| gau(len, ctx)),
        });
    }
    out
}

/// The storage types of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    const ALL: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

    fn name(self) -> &'static str {
        match self {
            Dtype::F32 => f32::NAME,
            Dtype::F16 => f16::NAME,
            Dtype::Bf16 => bf16::NAME,
        }
    }

    /// f32 slots for `len` elements.
    fn slots(self, len: usize) -> usize {
        match self {
            Dtype::F32 => len,
            Dtype::F16 => storage::slots::<f16>(len),
            Dtype::Bf16 => storage::slots::<bf16>(len),
        }
    }
}

/// One thing timed.
#[derive(Debug, Clone, Copy)]
enum Contender {
    /// The kernel of `ctx.kernels[i]` on tensors of a type.
    Kernel(usize, Dtype),
    Fma(Isa),
}

/// The SIMD ISAs of the context that are printed, as indices into `ctx.kernels`, and the
/// contenders: each one's kernel on every type, then its FMA peak.
fn contenders(ctx: &Context) -> (Vec<usize>, Vec<Contender>) {
    let isas: Vec<usize> = (0..ctx.kernels.len())
        .filter(|&i| ctx.kernels[i].isa() != Isa::Scalar && ctx.printed.contains(&ctx.kernels[i].isa()))
        .collect();
    let mut list = Vec::new();
    for &i in &isas {
        list.extend(Dtype::ALL.map(|t| Contender::Kernel(i, t)));
        list.push(Contender::Fma(ctx.kernels[i].isa()));
    }
    (isas, list)
}

/// The rows of one case from its timings: a row per printed ISA and half type.
fn rows(
    ctx: &Context,
    kernel: &str,
    shape: &str,
    flops: f64,
    list: &[Contender],
    samples: &timing::Samples,
    checked: &[(Dtype, usize, (f64, f64))],
) -> Vec<Row> {
    let find = |want: &dyn Fn(&Contender) -> bool| list.iter().position(want).expect("timed");
    let mut out = Vec::new();
    for (c, &contender) in list.iter().enumerate() {
        let Contender::Kernel(i, dtype) = contender else {
            continue;
        };
        if dtype == Dtype::F32 {
            continue;
        }
        let isa = ctx.kernels[i].isa();
        let f32_at = find(&|o| matches!(o, Contender::Kernel(j, Dtype::F32) if *j == i));
        let fma_at = find(&|o| matches!(o, Contender::Fma(f) if *f == isa));
        let scale = flops / fma_call_flops(isa);
        let check = checked.iter().find(|(t, j, _)| *t == dtype && *j == i).map(|c| c.2);
        out.push(Row {
            kernel: kernel.to_string(),
            isa: isa.to_string(),
            dtype: dtype.name().to_string(),
            shape: shape.to_string(),
            flops: Some(flops),
            ns_per_iter: samples.median(c),
            max_rel_err: check.map(|c| c.0),
            bound_fraction: check.map(|c| c.1),
            within_bound: check.map(|c| c.1 <= 1.0),
            vs: vec![("f32".to_string(), samples.speedup(c, f32_at))],
            roofline: Some(roofline::fma_name(isa)),
            roofline_ratio: Some(fma_ratio(samples.min(fma_at), samples.median(c), scale)),
            roofline_ns_per_iter: Some(samples.min(fma_at) * scale),
            rel_iqr: samples.rel_iqr(c),
            rounds: samples.rounds(),
            ..Row::default()
        });
    }
    out
}

/// Q, K, V, O of one type, staggered.
fn attention_buffers(dtype: Dtype, shape: &AttentionShape, q: &[f32], k: &[f32], v: &[f32]) -> Staggered {
    let lens = [
        q.len(),
        k.len(),
        v.len(),
        shape.batch * shape.heads * shape.q_len * shape.value_dim,
    ];
    let mut bufs = Staggered::new(&lens.map(|n| dtype.slots(n)));
    for (b, src) in [q, k, v].into_iter().enumerate() {
        let packed = match dtype {
            Dtype::F32 => src.to_vec(),
            Dtype::F16 => storage::pack::<f16>(src),
            Dtype::Bf16 => storage::pack::<bf16>(src),
        };
        bufs.get_mut(b).copy_from_slice(&packed);
    }
    bufs
}

/// One attention call on tensors of `E` in `bufs`.
fn attention_call<E: Element>(
    k: kernels::Kernels,
    shape: &AttentionShape,
    bufs: &mut Staggered,
    ws: &mut AttentionWorkspace,
) -> Result<Vec<f32>, kernels::Error> {
    let lens = [
        shape.batch * shape.heads * shape.q_len * shape.head_dim,
        shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim,
        shape.batch * shape.kv_heads * shape.kv_len * shape.value_dim,
        shape.batch * shape.heads * shape.q_len * shape.value_dim,
    ];
    let [q, kk, v, o]: [&mut [f32]; 4] = bufs.all_mut().try_into().expect("four buffers");
    let (q, kk, v) = (
        storage::view::<E>(black_box(q), lens[0]),
        storage::view::<E>(black_box(kk), lens[1]),
        storage::view::<E>(black_box(v), lens[2]),
    );
    k.attention(
        shape,
        q,
        kk,
        v,
        storage::view_mut::<E>(o, lens[3]),
        None,
        &AttentionOptions::default(),
        ws,
    )?;
    Ok(storage::unpack::<E>(bufs.get(3), lens[3]))
}

fn attention(len: usize, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let (heads, dim) = (super::attention::HEADS, super::attention::DIM);
    let fail = |msg: String| ReportError::new(format!("attention half L={len}: {msg}"));
    let shape = AttentionShape::self_attention(1, heads, len, dim);
    let n = heads * len * dim;
    let (q, k, v) = (
        data::uniform(n, -1.0, 1.0, 0x5eed_0701),
        data::uniform(n, -1.0, 1.0, 0x5eed_0702),
        data::uniform(n, -1.0, 1.0, 0x5eed_0703),
    );
    let mut bufs: Vec<Staggered> = Dtype::ALL
        .iter()
        .map(|&t| attention_buffers(t, &shape, &q, &k, &v))
        .collect();
    let mut workspaces: Vec<AttentionWorkspace> = ctx
        .kernels
        .iter()
        .map(|_| AttentionWorkspace::for_shape(&shape))
        .collect();
    let (_, list) = contenders(ctx);
    let mut run = |c: Contender| -> Result<Vec<f32>, String> {
        match c {
            Contender::Kernel(i, t) => {
                let (kern, ws, b) = (ctx.kernels[i], &mut workspaces[i], &mut bufs[t as usize]);
                match t {
                    Dtype::F32 => attention_call::<f32>(kern, &shape, b, ws),
                    Dtype::F16 => attention_call::<f16>(kern, &shape, b, ws),
                    Dtype::Bf16 => attention_call::<bf16>(kern, &shape, b, ws),
                }
                .map_err(|e| e.to_string())
            }
            Contender::Fma(isa) => {
                black_box(roofline::fma_peak(isa, black_box(FMA_ITERS)));
                Ok(Vec::new())
            }
        }
    };

    // Head 0 as a one-head problem for the oracle, on the values each type holds.
    let head = len * dim;
    let one = reference::AttentionShape {
        batch: 1,
        heads: 1,
        kv_heads: 1,
        q_len: len,
        kv_len: len,
        head_dim: dim,
        value_dim: dim,
    };
    let mut checked = Vec::new();
    for &contender in &list {
        let out = run(contender).map_err(|e| fail(format!("{contender:?}: {e}")))?;
        let (qh, kh, vh, oh) = (&q[..head], &k[..head], &v[..head], &out[..head.min(out.len())]);
        match contender {
            Contender::Kernel(i, Dtype::F16) => checked.push((Dtype::F16, i, check_head::<f16>(&one, qh, kh, vh, oh))),
            Contender::Kernel(i, Dtype::Bf16) => {
                checked.push((Dtype::Bf16, i, check_head::<bf16>(&one, qh, kh, vh, oh)))
            }
            _ => {}
        }
    }

    let samples = timing::interleaved(list.len(), &timing_for(ctx, len), |c| {
        let _ = run(list[c]);
    });
    let flops = 4.0 * (len * len * dim * heads) as f64;
    Ok(rows(
        ctx,
        "attention",
        &format!("plain L={len}"),
        flops,
        &list,
        &samples,
        &checked,
    ))
}

/// The context's timing, with at most [`LONG_ROUNDS`] rounds beyond length 512.
fn timing_for(ctx: &Context, len: usize) -> timing::Timing {
    let rounds = if len > 512 {
        ctx.timing.rounds.min(LONG_ROUNDS)
    } else {
        ctx.timing.rounds
    };
    timing::Timing { rounds, ..ctx.timing }
}

/// `(normwise error, fraction of the documented bound)` of `out`, the one-head attention of
/// the f32 values `q`, `k`, `v` as stored in `E` (`out` holds the kernel's `E` results,
/// widened).
fn check_head<E: Typed>(one: &reference::AttentionShape, q: &[f32], k: &[f32], v: &[f32], out: &[f32]) -> (f64, f64) {
    let opts = reference::AttentionOptions::default();
    let exact = reference::attention(one, &widen::<E>(q), &widen::<E>(k), &widen::<E>(v), &opts);
    let (qe, ke, ve, oe): (Vec<E>, Vec<E>, Vec<E>, Vec<E>) = (narrow(q), narrow(k), narrow(v), narrow(out));
    let fraction = reference::fraction::attention(one, &qe, &ke, &ve, &opts, &oe, None);
    (normwise(out, &exact.out), fraction)
}

/// As [`check_head`], for the GAU on `x`.
fn check_gau<E: Typed>(
    shape: &reference::GauShape,
    params: &reference::GauParams,
    x: &[f32],
    out: &[f32],
) -> (f64, f64) {
    let exact = reference::gau(shape, &widen::<E>(x), params);
    let fraction = reference::fraction::gau(shape, &narrow::<E>(x), params, &narrow::<E>(out));
    (normwise(out, &exact.out), fraction)
}

/// `values` rounded to `E`.
fn narrow<E: Element>(values: &[f32]) -> Vec<E> {
    values.iter().map(|&v| E::from_f32(v)).collect()
}

/// `values` rounded to `E` and widened back: what a kernel reading `E` sees.
fn widen<E: Element>(values: &[f32]) -> Vec<f32> {
    values.iter().map(|&v| E::from_f32(v).to_f32()).collect()
}

/// One GAU call on `x` stored as `E` (in `x_buf`), into `out_buf`.
fn gau_call<E: Element>(
    k: kernels::Kernels,
    len: usize,
    x_buf: &[f32],
    out_buf: &mut [f32],
    weights: &gau::Weights,
    ws: &mut GauWorkspace,
) -> Result<Vec<f32>, kernels::Error> {
    let shape = gau::shape(len);
    let n = len * shape.dim;
    let x = storage::view::<E>(black_box(x_buf), n);
    k.gau(
        &shape,
        x,
        &weights.view(),
        &GauOptions::default(),
        storage::view_mut::<E>(out_buf, n),
        ws,
    )?;
    Ok(storage::unpack::<E>(out_buf, n))
}

fn gau(len: usize, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let fail = |msg: String| ReportError::new(format!("gau half T={len}: {msg}"));
    let shape = gau::shape(len);
    let weights = gau::Weights::new(&shape);
    let x = gau::input(len);
    let n = x.len();
    let xs: Vec<Vec<f32>> = vec![x.clone(), storage::pack::<f16>(&x), storage::pack::<bf16>(&x)];
    let mut outs: Vec<Vec<f32>> = Dtype::ALL.iter().map(|t| vec![0.0f32; t.slots(n)]).collect();
    let mut workspaces: Vec<GauWorkspace> = ctx.kernels.iter().map(|_| GauWorkspace::new()).collect();
    let (_, list) = contenders(ctx);
    let mut run = |c: Contender| -> Result<Vec<f32>, String> {
        match c {
            Contender::Kernel(i, t) => {
                let (kern, ws) = (ctx.kernels[i], &mut workspaces[i]);
                let (xb, ob) = (&xs[t as usize], &mut outs[t as usize]);
                match t {
                    Dtype::F32 => gau_call::<f32>(kern, len, xb, ob, &weights, ws),
                    Dtype::F16 => gau_call::<f16>(kern, len, xb, ob, &weights, ws),
                    Dtype::Bf16 => gau_call::<bf16>(kern, len, xb, ob, &weights, ws),
                }
                .map_err(|e| e.to_string())
            }
            Contender::Fma(isa) => {
                black_box(roofline::fma_peak(isa, black_box(FMA_ITERS)));
                Ok(Vec::new())
            }
        }
    };

    let rshape = reference::GauShape {
        batch: shape.batch,
        seq_len: shape.seq_len,
        dim: shape.dim,
        expand: shape.expand,
        qk_dim: shape.qk_dim,
    };
    let params = weights.params(false);
    let mut checked = Vec::new();
    for &contender in &list {
        let out = run(contender).map_err(|e| fail(format!("{contender:?}: {e}")))?;
        let Contender::Kernel(i, t) = contender else { continue };
        if t == Dtype::F32 || len > GAU_CHECK_MAX_LEN {
            continue;
        }
        let result = match t {
            Dtype::F16 => check_gau::<f16>(&rshape, &params, &x, &out),
            _ => check_gau::<bf16>(&rshape, &params, &x, &out),
        };
        checked.push((t, i, result));
    }

    let samples = timing::interleaved(list.len(), &timing_for(ctx, len), |c| {
        let _ = run(list[c]);
    });
    let (flops, _) = gau::flops(len, false);
    Ok(rows(ctx, "gau", &format!("T={len}"), flops, &list, &samples, &checked))
}
