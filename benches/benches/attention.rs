//! Criterion benches of attention at B = 1, H = 8, Dk = Dv = 64, Lq = Lk = L ∈ {128, 512}:
//! one group per ISA of this CPU (`attention/{isa}`), each with `plain` (no mask, no P, no S)
//! and `realformer` (P in, S out); and `attention/composed` with the unfused compositions
//! (gemm crate or matrixmultiply GEMMs around the softmax of the best ISA, and the gemm crate
//! around the plain scalar softmax, the peer of the report's attention target; see
//! `benches::composed`).
//!
//! Throughput is in elements = FLOPs, `4·L²·D·H` per call (`2·Dk` for Q·Kᵀ and `2·Dv` for P·V per
//! query, key and head, the count of the report's GFLOP/s), so criterion's "elem/s" reads as
//! FLOP/s. The scalar path (≈ 0.6 GFLOP/s, a second a call at L = 512) runs at L = 128 only.
//!
//! `cargo bench -p benches --bench attention [-- FILTER]`, e.g. `-- attention/avx512/realformer`.

use std::hint::black_box;
use std::time::Duration;

use benches::buffers::Staggered;
use benches::composed::{Composition, Gemm, RowSoftmax};
use benches::data;
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use kernels::{AttentionOptions, AttentionShape, AttentionWorkspace, Isa, Kernels};

const HEADS: usize = 8;
const DIM: usize = 64;
const LENS: [usize; 2] = [128, 512];
/// The scalar path runs at lengths up to this.
const SCALAR_MAX_LEN: usize = 128;

/// Which implementation a bench runs.
#[derive(Clone, Copy)]
enum Impl {
    Fused(Kernels),
    Composed(Gemm, RowSoftmax),
}

/// Q, K, V, P, O, S for `len` (P and S empty unless `realformer`), staggered as the report
/// places them.
fn buffers(len: usize, realformer: bool) -> Staggered {
    let n = HEADS * len * DIM;
    let n_scores = if realformer { HEADS * len * len } else { 0 };
    let mut bufs = Staggered::new(&[n, n, n, n_scores, n, n_scores]);
    for (i, seed) in [0x5eed_0a01, 0x5eed_0a02, 0x5eed_0a03, 0x5eed_0a04]
        .into_iter()
        .enumerate()
    {
        let l = bufs.get(i).len();
        bufs.get_mut(i).copy_from_slice(&data::uniform(l, -1.0, 1.0, seed));
    }
    bufs
}

fn bench(g: &mut BenchmarkGroup<'_, WallTime>, imp: Impl, len: usize, realformer: bool) {
    let shape = AttentionShape::self_attention(1, HEADS, len, DIM);
    let mut bufs = buffers(len, realformer);
    let mut workspace = AttentionWorkspace::for_shape(&shape);
    let mut composition = match imp {
        Impl::Composed(gemm, _) => {
            Some(Composition::new(gemm, &shape, &AttentionOptions::default()).expect("plain options are supported"))
        }
        Impl::Fused(_) => None,
    };
    g.throughput(Throughput::Elements((4 * len * len * DIM * HEADS) as u64));
    g.sampling_mode(if len > 128 {
        SamplingMode::Flat
    } else {
        SamplingMode::Auto
    });
    let variant = if realformer { "realformer" } else { "plain" };
    let id = match imp {
        Impl::Fused(_) => BenchmarkId::new(variant, len),
        Impl::Composed(gemm, softmax) => BenchmarkId::new(format!("{}+{}/{variant}", gemm.name(), softmax.name()), len),
    };
    // The compositions' GEMMs run on the best ISA, as their softmax.
    let best = Kernels::best().isa();
    g.bench_function(id, |b| {
        b.iter(|| {
            let [q, k, v, p, o, s]: [&mut [f32]; 6] = bufs.all_mut().try_into().expect("six buffers");
            let (q, k, v) = (black_box(&*q), black_box(&*k), black_box(&*v));
            let p = (!p.is_empty()).then_some(black_box(&*p));
            let s = (!s.is_empty()).then_some(s);
            // Valid shapes by construction; a failure would be a bug.
            match (imp, composition.as_mut()) {
                (Impl::Fused(kernels), _) => {
                    let mut opts = AttentionOptions::default();
                    opts.prev_scores = p;
                    kernels
                        .attention(&shape, q, k, v, o, s, &opts, &mut workspace)
                        .expect("attention of a valid shape");
                }
                (Impl::Composed(_, softmax), Some(c)) => {
                    c.run(best, softmax, q, k, v, p, o, s)
                        .expect("composition of a valid shape");
                }
                (Impl::Composed(..), None) => unreachable!("made above"),
            }
            black_box(bufs.get(4).as_ptr());
        })
    });
}

fn group(c: &mut Criterion, name: &str, imps: &[Impl], max_len: usize) {
    let mut g = c.benchmark_group(format!("attention/{name}"));
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for &imp in imps {
        for len in LENS.into_iter().filter(|&l| l <= max_len) {
            for realformer in [false, true] {
                bench(&mut g, imp, len, realformer);
            }
        }
    }
    g.finish();
}

fn attention(c: &mut Criterion) {
    for isa in kernels::available_isas() {
        match Kernels::for_isa(isa) {
            Ok(k) => {
                let max_len = if isa == Isa::Scalar { SCALAR_MAX_LEN } else { usize::MAX };
                group(c, isa.name(), &[Impl::Fused(k)], max_len);
            }
            Err(e) => eprintln!("attention benches: skipping {isa}: {e}"),
        }
    }
    let best = Kernels::best();
    let composed: Vec<Impl> = Gemm::ALL
        .iter()
        .map(|&gemm| Impl::Composed(gemm, best.into()))
        .chain([Impl::Composed(Gemm::GemmCrate, RowSoftmax::Plain)])
        .collect();
    group(c, "composed", &composed, usize::MAX);
}

criterion_group!(benches, attention);
criterion_main!(benches);
