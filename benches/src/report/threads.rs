//! Rows of `threads`: the headline kernels on the best ISA split over N threads
//! ([`Parallelism::Rayon`], inside a rayon pool of N threads) for each N of `--threads`, timed
//! interleaved with the same kernels on one thread over the same buffers. A row's `vs` holds
//! `1 thread`: the one-thread time ÷ the N-thread time (the speed-up), and every row checks that
//! each N gives the bits of one thread.
//!
//! Memory-bound kernels beyond L2 share the machine's memory bandwidth: the `copy` row times
//! the best ISA's copy of 64 MiB (32 MiB in, 32 MiB out) split in N contiguous parts on the
//! same pool, against one thread: its speed-up is their ceiling. Compute-bound kernels share
//! the power budget of the cores (a core's clock falls as more of them run wide FMAs): the
//! `fma peak` row splits the FMA-peak loop of the roofline in N equal parts likewise.
//!
//! Shapes (default run): softmax and LayerNorm at 4096×1024 (beyond L2) and 512×1024 (in L2
//! of two cores); linear at 128×384→1536 with GELU and at 16×384→1536; attention B = 1, H = 8,
//! D = 64 at L = 512 and 2048; the GAU at B = 4, T = 512 (split by sequences) and B = 1,
//! T = 1024 (split within the sequence); the MiniLM
//! encoder of the `encoder` rows at 1×128 and 8×128. `--full` adds the shapes that keep 16
//! threads and more busy: attention B = 4, H = 16, L = 2048 and the GAU at B = 1, T = 2048.
//! `--quick`: softmax 4096×1024, linear 128×384→1536, attention L = 512.

use std::hint::black_box;

use examples::{Encoder, Scratch};
use kernels::{
    Activation, AttentionOptions, AttentionShape, AttentionWorkspace, GauOptions, GauShape, GauWeights, GauWorkspace,
    Isa, Kernels, LayerNormOptions, LinearOptions, LinearWeights, Parallelism, SoftmaxOptions, WeightLayout,
    WeightType,
};

use super::case::{Context, Custom};
use super::output::{self, Row};
use super::timing::{self, Timing};
use super::{encoder, no_cases, Family, Plan, ReportError};
use crate::data;
use crate::roofline::{self, Stores};

/// The kernel name of the rows (what `--kernel` selects them by).
pub const KERNEL: &str = "threads";

/// The rows of this module, for the registry of the report.
pub const FAMILY: Family = Family {
    kernels: &[KERNEL],
    cases: no_cases,
    custom,
    headlines: &[],
};

/// One call of a row: runs the kernel with `k`, and returns its output's bits when asked
/// (outside the timing: the copy would weigh on the small rows).
type Call = Box<dyn FnMut(Kernels, bool) -> Option<Vec<u32>> + Send>;

/// A row: its shape, FLOPs or elements per call, and how to build its call.
struct Spec {
    shape: &'static str,
    flops: Option<f64>,
    elements: Option<f64>,
    make: fn(Kernels) -> Result<Call, String>,
}

fn specs(plan: &Plan) -> Vec<Spec> {
    let all = vec![
        spec_rows("softmax 4096x1024", 4096, 1024, softmax_call::<4096>),
        spec_rows("softmax 512x1024", 512, 1024, softmax_call::<512>),
        spec_rows("layer_norm 4096x1024", 4096, 1024, layer_norm_call::<4096>),
        spec_rows("layer_norm 512x1024", 512, 1024, layer_norm_call::<512>),
        spec_flops(
            "linear 128x384→1536 gelu",
            2.0 * 128.0 * 384.0 * 1536.0,
            linear_call::<128>,
        ),
        spec_flops(
            "linear 16x384→1536 gelu",
            2.0 * 16.0 * 384.0 * 1536.0,
            linear_call::<16>,
        ),
        spec_flops(
            "attention 1x8x512x64",
            4.0 * 8.0 * 512.0 * 512.0 * 64.0,
            attention_call::<1, 8, 512>,
        ),
        spec_flops(
            "attention 1x8x2048x64",
            4.0 * 8.0 * 2048.0 * 2048.0 * 64.0,
            attention_call::<1, 8, 2048>,
        ),
        spec_flops("gau 4x512 d512 e1024 s128", gau_flops(4, 512), gau_call::<4, 512>),
        spec_flops("gau 1x1024 d512 e1024 s128", gau_flops(1, 1024), gau_call::<1, 1024>),
        spec_flops(
            "encoder 1x128",
            encoder::flops(&encoder::CONFIG, 1, 128),
            encoder_call::<1>,
        ),
        spec_flops(
            "encoder 8x128",
            encoder::flops(&encoder::CONFIG, 8, 128),
            encoder_call::<8>,
        ),
    ];
    // The shapes of many-core machines: enough heads and sequence for 16 threads and more.
    let many = [
        spec_flops(
            "attention 4x16x2048x64",
            4.0 * 4.0 * 16.0 * 2048.0 * 2048.0 * 64.0,
            attention_call::<4, 16, 2048>,
        ),
        spec_flops("gau 1x2048 d512 e1024 s128", gau_flops(1, 2048), gau_call::<1, 2048>),
    ];
    let quick = ["softmax 4096x1024", "linear 128x384→1536 gelu", "attention 1x8x512x64"];
    match plan.scope {
        super::Scope::Quick => all.into_iter().filter(|s| quick.contains(&s.shape)).collect(),
        super::Scope::Default => all,
        super::Scope::Full => all.into_iter().chain(many).collect(),
    }
}

fn spec_flops(shape: &'static str, flops: f64, make: fn(Kernels) -> Result<Call, String>) -> Spec {
    Spec {
        shape,
        flops: Some(flops),
        elements: None,
        make,
    }
}

fn spec_rows(shape: &'static str, rows: usize, n: usize, make: fn(Kernels) -> Result<Call, String>) -> Spec {
    Spec {
        shape,
        flops: None,
        elements: Some((rows * n) as f64),
        make,
    }
}

fn custom(plan: &Plan) -> Vec<Custom> {
    let mut out: Vec<Custom> = specs(plan)
        .into_iter()
        .map(|spec| Custom {
            kernel: KERNEL,
            shape: spec.shape.to_string(),
            measure: Box::new(move |ctx| measure(&spec, ctx)),
        })
        .collect();
    out.push(Custom {
        kernel: KERNEL,
        shape: COPY_SHAPE.to_string(),
        measure: Box::new(copy_rows),
    });
    out.push(Custom {
        kernel: KERNEL,
        shape: FMA_SHAPE.to_string(),
        measure: Box::new(fma_rows),
    });
    out
}

const COLUMNS: [(&str, usize, bool); 6] = [
    ("what", 34, false),
    ("isa", 6, false),
    ("time", 8, true),
    ("GFLOP/s", 7, true),
    ("GB/s", 6, true),
    ("x1 thread", 9, true),
];

/// The rows as the lines of their own table.
pub fn table(rows: &[&Row]) -> Vec<String> {
    let f = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let mut lines = vec![output::header(&COLUMNS)];
    for r in rows {
        // Elements of a memory-bound row move as f32 in and out.
        let bytes = r.bytes.or(r.elements.map(|e| 8.0 * e));
        let cells = [
            r.shape.clone(),
            r.isa.clone(),
            output::duration(r.ns_per_iter),
            f(r.gflop_per_s(), 1),
            f(bytes.filter(|_| r.flops.is_none()).map(|b| b / r.ns_per_iter), 1),
            f(r.vs("1 thread"), 2),
        ];
        lines.push(output::cells(&cells, &COLUMNS));
    }
    lines
}

fn bits(xs: &[f32]) -> Vec<u32> {
    xs.iter().map(|x| x.to_bits()).collect()
}

/// The pools of a run's rows, one per thread count of `--threads`, and the kernels split over
/// them: the best ISA of the run.
fn setup(ctx: &Context) -> Result<(Vec<(usize, rayon::ThreadPool)>, Kernels), ReportError> {
    let best = ctx
        .kernels
        .iter()
        .copied()
        .filter(|k| ctx.printed.contains(&k.isa()))
        .max_by_key(|k| Isa::ALL.iter().position(|&i| i == k.isa()))
        .ok_or_else(|| ReportError::new("threads: no printed ISA"))?;
    let pools = ctx
        .threads
        .iter()
        .map(|&n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map(|pool| (n, pool))
                .map_err(|e| ReportError::new(format!("threads: cannot start a pool of {n}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    Ok((pools, best))
}

/// Batches of back-to-back calls lasting about [`BATCH_NS`].
fn batches(ctx: &Context) -> Timing {
    Timing {
        sample_ns: ctx.timing.sample_ns.max(BATCH_NS),
        ..ctx.timing
    }
}

/// How long a batch of calls of one setting lasts, at least: ten times the report's batches,
/// so that waking the pool at the start of a batch (see the module docs) weighs as little as it
/// does in a model's run of kernels, one call after the other.
const BATCH_NS: f64 = 30e6;

/// One row per thread count: setting 0 of the interleaved timing is one thread, setting
/// `1 + i` the pool of `--threads`' `i`-th count, so every count is held against the same
/// one-thread samples.
fn measure(spec: &Spec, ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let fail = |msg: String| ReportError::new(format!("threads {}: {msg}", spec.shape));
    let (pools, k) = setup(ctx)?;
    let mut call = (spec.make)(k).map_err(fail)?;
    let one = k.with_parallelism(Parallelism::Sequential);
    let want = call(one, true);
    for (n, pool) in &pools {
        let got = pool.install(|| call(k.with_parallelism(Parallelism::Rayon(*n)), true));
        if want != got {
            return Err(fail(format!("{n} threads give other bits than one: a bug")));
        }
    }
    let samples = timing::interleaved(1 + pools.len(), &batches(ctx), |c| match c {
        0 => {
            black_box(call(one, false));
        }
        c => {
            let (n, pool) = &pools[c - 1];
            pool.install(|| black_box(call(k.with_parallelism(Parallelism::Rayon(*n)), false)));
        }
    });
    let row = Row {
        isa: k.isa().to_string(),
        shape: spec.shape.to_string(),
        flops: spec.flops,
        elements: spec.elements,
        ..Row::default()
    };
    Ok(rows_per_count(&pools, &samples, row))
}

/// The rows of `row`'s shape, one per pool: setting `1 + i` of `samples` against setting 0
/// (one thread), named `<shape> on <N>`.
fn rows_per_count(pools: &[(usize, rayon::ThreadPool)], samples: &timing::Samples, row: Row) -> Vec<Row> {
    pools
        .iter()
        .enumerate()
        .map(|(i, (n, _))| Row {
            kernel: KERNEL.to_string(),
            dtype: "f32".to_string(),
            shape: format!("{} on {n}", row.shape),
            ns_per_iter: samples.median(1 + i),
            vs: vec![("1 thread".to_string(), samples.speedup(1 + i, 0))],
            rel_iqr: samples.rel_iqr(1 + i),
            rounds: samples.rounds(),
            ..row.clone()
        })
        .collect()
}

const COPY_SHAPE: &str = "copy 32 MiB";

/// The copy of 32 MiB on one thread and split over each pool: the bandwidth ceiling.
fn copy_rows(ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let (pools, k) = setup(ctx)?;
    let isa = k.isa();
    let len = 8 << 20;
    let x = data::uniform(len, -1.0, 1.0, 0xc09e);
    let mut y = vec![0.0f32; len];
    // Streaming stores where the ISA has them, as the memory-bound kernels use beyond the LLC.
    let stores = if roofline::copy(isa, Stores::Streaming, &x[..64], &mut y[..64]) {
        Stores::Streaming
    } else {
        Stores::Ordinary
    };
    let run = |c: usize, y: &mut [f32]| {
        if c == 0 {
            roofline::copy(isa, stores, &x, y);
        } else {
            let (n, pool) = &pools[c - 1];
            let chunk = len.div_ceil(*n);
            pool.install(|| {
                rayon::scope(|s| {
                    for (xs, ys) in x.chunks(chunk).zip(y.chunks_mut(chunk)) {
                        s.spawn(move |_| {
                            roofline::copy(isa, stores, xs, ys);
                        });
                    }
                })
            });
        }
        black_box(&*y);
    };
    let samples = timing::interleaved(1 + pools.len(), &batches(ctx), |c| run(c, &mut y));
    let row = Row {
        isa: isa.to_string(),
        shape: COPY_SHAPE.to_string(),
        bytes: Some((2 * len * 4) as f64),
        elements: Some(len as f64),
        method: Some(roofline::copy_name(isa, stores)),
        ..Row::default()
    };
    Ok(rows_per_count(&pools, &samples, row))
}

const FMA_SHAPE: &str = "fma peak";

/// Iterations of the FMA-peak loop of a row, split over the threads: tens of milliseconds on
/// one core, so that even 16 parts last milliseconds each and waking the pool weighs as little
/// as in the compute-bound rows it bounds.
const FMA_TOTAL_ITERS: u64 = 16 << 20;

/// The FMA-peak loop on one thread and split in N equal parts over each pool: the ceiling of
/// the compute-bound rows, where cores that share a power budget slow down together.
fn fma_rows(ctx: &Context) -> Result<Vec<Row>, ReportError> {
    let (pools, k) = setup(ctx)?;
    let isa = k.isa();
    let run = |c: usize| {
        if c == 0 {
            black_box(roofline::fma_peak(isa, FMA_TOTAL_ITERS));
        } else {
            let (n, pool) = &pools[c - 1];
            let part = FMA_TOTAL_ITERS.div_ceil(*n as u64);
            pool.install(|| {
                rayon::scope(|s| {
                    for _ in 0..*n {
                        s.spawn(move |_| {
                            black_box(roofline::fma_peak(isa, part));
                        });
                    }
                })
            });
        }
    };
    let samples = timing::interleaved(1 + pools.len(), &batches(ctx), run);
    let row = Row {
        isa: isa.to_string(),
        shape: FMA_SHAPE.to_string(),
        flops: Some((FMA_TOTAL_ITERS * roofline::fma_flops_per_iter(isa)) as f64),
        method: Some(roofline::fma_name(isa)),
        ..Row::default()
    };
    Ok(rows_per_count(&pools, &samples, row))
}

fn softmax_call<const ROWS: usize>(_: Kernels) -> Result<Call, String> {
    let x = data::uniform(ROWS * 1024, -4.0, 4.0, 1);
    let mut y = vec![0.0f32; x.len()];
    Ok(Box::new(move |k, check| {
        k.softmax(&x, &mut y, 1024, &SoftmaxOptions::default()).unwrap();
        check.then(|| bits(&y))
    }))
}

fn layer_norm_call<const ROWS: usize>(_: Kernels) -> Result<Call, String> {
    let x = data::uniform(ROWS * 1024, -4.0, 4.0, 2);
    let (gamma, beta) = (data::uniform(1024, 0.5, 1.5, 3), data::uniform(1024, -0.5, 0.5, 4));
    let mut y = vec![0.0f32; x.len()];
    Ok(Box::new(move |k, check| {
        let opts = LayerNormOptions {
            gamma: Some(&gamma),
            beta: Some(&beta),
            eps: 1e-5,
        };
        k.layer_norm(&x, &mut y, 1024, &opts).unwrap();
        check.then(|| bits(&y))
    }))
}

fn linear_call<const M: usize>(k: Kernels) -> Result<Call, String> {
    let (kk, n) = (384, 1536);
    let w = data::uniform(kk * n, -0.05, 0.05, 5);
    let b = data::uniform(n, -0.1, 0.1, 6);
    let layer = LinearWeights {
        weights: &w,
        layout: WeightLayout::InOut,
        in_features: kk,
        out_features: n,
        bias: Some(&b),
    };
    let packed = k.pack_linear(&layer, WeightType::F32).map_err(|e| e.to_string())?;
    let x = data::uniform(M * kk, -1.0, 1.0, 7);
    let mut y = vec![0.0f32; M * n];
    Ok(Box::new(move |k, check| {
        let opts = LinearOptions::default().activation(Activation::Gelu);
        k.linear(&x, &packed, &mut y, &opts).unwrap();
        check.then(|| bits(&y))
    }))
}

fn attention_call<const B: usize, const H: usize, const L: usize>(_: Kernels) -> Result<Call, String> {
    let shape = AttentionShape::self_attention(B, H, L, 64);
    let len = B * H * L * 64;
    let (q, kk, v) = (
        data::uniform(len, -1.0, 1.0, 8),
        data::uniform(len, -1.0, 1.0, 9),
        data::uniform(len, -1.0, 1.0, 10),
    );
    let mut out = vec![0.0f32; len];
    let mut ws = AttentionWorkspace::new();
    Ok(Box::new(move |k, check| {
        k.attention(
            &shape,
            &q,
            &kk,
            &v,
            &mut out,
            None,
            &AttentionOptions::default(),
            &mut ws,
        )
        .unwrap();
        check.then(|| bits(&out))
    }))
}

/// The GAU of the rows: `B` sequences of `T`, `d = 512`, `e = 1024`, `s = 128`.
const fn gau_shape(batch: usize, seq_len: usize) -> GauShape {
    GauShape {
        batch,
        seq_len,
        dim: 512,
        expand: 1024,
        qk_dim: 128,
    }
}

/// `2·T·d·(2e + s)` in, `2·T²·(s + e)` for the attention, `2·T·e·d` out, per sequence.
fn gau_flops(b: usize, t: usize) -> f64 {
    let GauShape {
        dim: d,
        expand: e,
        qk_dim: s,
        ..
    } = gau_shape(b, t);
    (b * 2 * t * (d * (2 * e + s) + t * (s + e) + e * d)) as f64
}

fn gau_call<const B: usize, const T: usize>(_: Kernels) -> Result<Call, String> {
    let shape = gau_shape(B, T);
    let GauShape {
        batch: b,
        seq_len: t,
        dim: d,
        expand: e,
        qk_dim: s,
    } = shape;
    let x = data::uniform(b * t * d, -1.0, 1.0, 11);
    let w_in = data::uniform(d * (2 * e + s), -0.04, 0.04, 12);
    let w_out = data::uniform(e * d, -0.03, 0.03, 13);
    let (gq, bq) = (data::uniform(s, 0.5, 1.5, 14), data::uniform(s, -0.1, 0.1, 15));
    let (gk, bk) = (data::uniform(s, 0.5, 1.5, 16), data::uniform(s, -0.1, 0.1, 17));
    let mut out = vec![0.0f32; b * t * d];
    let mut ws = GauWorkspace::new();
    Ok(Box::new(move |k, check| {
        let weights = GauWeights {
            w_in: &w_in,
            b_in: None,
            gamma_q: &gq,
            beta_q: &bq,
            gamma_k: &gk,
            beta_k: &bk,
            w_out: &w_out,
            b_out: None,
        };
        k.gau(&shape, &x, &weights, &GauOptions::default(), &mut out, &mut ws)
            .unwrap();
        check.then(|| bits(&out))
    }))
}

fn encoder_call<const B: usize>(k: Kernels) -> Result<Call, String> {
    let len = 128;
    let layers = encoder::weights(&encoder::CONFIG);
    let input = data::uniform(B * len * encoder::CONFIG.hidden, -1.7, 1.7, 0x5eed_e0ff);
    let padding = vec![0.0f32; B * len];
    // One encoder per setting: its weights are packed for the ISA, and it keeps its kernels.
    let one = Encoder::new(k, encoder::CONFIG, &layers).map_err(|e| e.to_string())?;
    let many =
        Encoder::new(k.with_parallelism(Parallelism::Rayon(0)), encoder::CONFIG, &layers).map_err(|e| e.to_string())?;
    let mut x = input.clone();
    let mut scratch = Scratch::default();
    Ok(Box::new(move |k, check| {
        let model = if k.parallelism() == Parallelism::Sequential {
            &one
        } else {
            &many
        };
        x.copy_from_slice(&input);
        model.forward(&mut x, B, len, &padding, &mut scratch).unwrap();
        check.then(|| bits(&x))
    }))
}
