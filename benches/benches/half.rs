//! Criterion benches of the kernels over f16 and bf16 tensors: one group per ISA of
//! this CPU and storage type, the f32 kernel alongside for comparison, throughput in bytes
//! (each tensor read or written once, at the storage type's width) or in elements.
//!
//! `cargo bench -p benches --bench half [-- FILTER]`, e.g. `-- half/avx512/f16`. The `report`
//! binary gives the same-run ratios to f32 and the rooflines.

use std::hint::black_box;
use std::time::Duration;

use benches::{data, report};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use kernels::half::{bf16, f16};
use kernels::{
    AttentionOptions, AttentionShape, AttentionWorkspace, Element, GauOptions, GauWorkspace, Kernels, LayerNormOptions,
    RmsNormOptions, SoftmaxOptions,
};

/// `(rows, n)` of the row kernels: in cache, and beyond L2.
const ROWS: [(usize, usize); 2] = [(16, 1024), (4096, 1024)];
const ATTENTION_LEN: usize = 512;
const GAU_LEN: usize = 256;

fn narrow<E: Element>(x: &[f32]) -> Vec<E> {
    x.iter().map(|&v| E::from_f32(v)).collect()
}

/// Benches `f(x, y)` over `len` elements of `E` in and out.
fn bench_rows<E: Element>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    input: &[f32],
    f: impl Fn(&[E], &mut [E]),
) {
    let x: Vec<E> = narrow(input);
    let mut y = vec![E::from_f32(0.0); x.len()];
    g.throughput(Throughput::Bytes((2 * x.len() * std::mem::size_of::<E>()) as u64));
    g.sampling_mode(if x.len() > 1 << 16 {
        SamplingMode::Flat
    } else {
        SamplingMode::Auto
    });
    g.bench_function(id, |b| {
        b.iter(|| {
            f(black_box(&x), black_box(&mut y));
            black_box(&y);
        })
    });
}

fn group<E: Element>(c: &mut Criterion, k: Kernels) {
    let mut g = c.benchmark_group(format!("half/{}/{}", k.isa(), E::NAME));
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (rows, n) in ROWS {
        let shape = format!("{rows}x{n}");
        let logits = data::uniform(rows * n, -10.0, 10.0, 0x5eed_0001);
        bench_rows::<E>(&mut g, BenchmarkId::new("softmax", &shape), &logits, |x, y| {
            k.softmax(x, y, n, &SoftmaxOptions::default()).expect("a valid shape")
        });
        bench_rows::<E>(&mut g, BenchmarkId::new("log_softmax", &shape), &logits, |x, y| {
            k.log_softmax(x, y, n, &SoftmaxOptions::default())
                .expect("a valid shape")
        });
        bench_rows::<E>(&mut g, BenchmarkId::new("swish", &shape), &logits, |x, y| {
            k.swish(x, y).expect("equal lengths")
        });
        let input = report::norm::rows_input(rows, n, 0x5eed_0310);
        let (gamma, beta) = report::norm::affine(n);
        let ln = LayerNormOptions {
            gamma: Some(&gamma),
            beta: Some(&beta),
            eps: report::norm::EPS,
        };
        bench_rows::<E>(&mut g, BenchmarkId::new("layer_norm", &shape), &input, |x, y| {
            k.layer_norm(x, y, n, &ln).expect("a valid shape")
        });
        let rms = RmsNormOptions {
            gain: Some(&gamma),
            eps: report::norm::EPS,
        };
        bench_rows::<E>(&mut g, BenchmarkId::new("rms_norm", &shape), &input, |x, y| {
            k.rms_norm(x, y, n, &rms).expect("a valid shape")
        });
    }

    // Attention, the report's plain shape at L = 512: throughput in FLOPs-as-elements would
    // mislead criterion's units, so in query·key pairs (×4·D·H FLOPs each).
    let (heads, dim) = (report::attention::HEADS, report::attention::DIM);
    let shape = AttentionShape::self_attention(1, heads, ATTENTION_LEN, dim);
    let n = heads * ATTENTION_LEN * dim;
    let q: Vec<E> = narrow(&data::uniform(n, -1.0, 1.0, 0x5eed_0701));
    let kk: Vec<E> = narrow(&data::uniform(n, -1.0, 1.0, 0x5eed_0702));
    let v: Vec<E> = narrow(&data::uniform(n, -1.0, 1.0, 0x5eed_0703));
    let mut o = vec![E::from_f32(0.0); n];
    let mut ws = AttentionWorkspace::for_shape(&shape);
    g.throughput(Throughput::Elements((heads * ATTENTION_LEN * ATTENTION_LEN) as u64));
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function(BenchmarkId::new("attention", format!("L={ATTENTION_LEN}")), |b| {
        b.iter(|| {
            k.attention(
                &shape,
                black_box(&q),
                &kk,
                &v,
                &mut o,
                None,
                &AttentionOptions::default(),
                &mut ws,
            )
            .expect("a valid shape");
            black_box(&o);
        })
    });

    // GAU, the report's shape at T = 256: throughput in tokens.
    let shape = report::gau::shape(GAU_LEN);
    let weights = report::gau::Weights::new(&shape);
    let x: Vec<E> = narrow(&report::gau::input(GAU_LEN));
    let mut out = vec![E::from_f32(0.0); x.len()];
    let mut ws = GauWorkspace::new();
    g.throughput(Throughput::Elements(GAU_LEN as u64));
    g.bench_function(BenchmarkId::new("gau", format!("T={GAU_LEN}")), |b| {
        b.iter(|| {
            k.gau(
                &shape,
                black_box(&x),
                &weights.view(),
                &GauOptions::default(),
                &mut out,
                &mut ws,
            )
            .expect("a valid shape");
            black_box(&out);
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    for isa in kernels::available_isas() {
        if isa == kernels::Isa::Scalar {
            continue; // minutes per group at these shapes
        }
        let k = Kernels::for_isa(isa).expect("available");
        group::<f32>(c, k);
        group::<f16>(c, k);
        group::<bf16>(c, k);
    }
}

criterion_group!(half, benches);
criterion_main!(half);
