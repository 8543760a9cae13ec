//! Criterion benches of `linear` over encoder layers (all-MiniLM-L6-v2's FFN, 384 → 1536 with
//! GELU and 1536 → 384, and its QKV projection 384 → 1152) at M = 16 and 128 rows, with the
//! weights packed once: one group per vector ISA of this CPU and weight type
//! (`linear/{isa}-f32w`, `linear/{isa}-bf16w`), and `linear/composed`, the gemm crate's `X·W`
//! then a bias loop and the GELU of the best ISA (`benches::report::linear::composition`). The
//! scalar path is left out (the report times it at the small shapes).
//!
//! Throughput is in elements = FLOPs, `2·M·K·N` per call, so criterion's "elem/s" reads as
//! FLOP/s.
//!
//! `cargo bench -p benches --bench linear [-- FILTER]`, e.g. `-- linear/avx512-bf16w/16x`.

use std::hint::black_box;
use std::time::Duration;

use benches::report::linear::{activation, composition, flops, input, shape_name, Layer, Weights, LAYERS};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kernels::{Isa, Kernels, LinearOptions, WeightType};

/// `(M, layer)`: the FFN at a sentence and a batch of tokens, the QKV projection at a sentence.
const SHAPES: [(usize, Layer); 5] = [
    (16, LAYERS[2]),
    (16, LAYERS[3]),
    (16, LAYERS[0]),
    (128, LAYERS[2]),
    (128, LAYERS[3]),
];

/// Which implementation a group runs.
#[derive(Clone, Copy)]
enum Impl {
    Fused(Kernels, WeightType),
    Composed(Kernels),
}

fn group(c: &mut Criterion, name: &str, imp: Impl) {
    let mut g = c.benchmark_group(format!("linear/{name}"));
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (m, layer) in SHAPES {
        let (k, n, gelu) = layer;
        let weights = Weights::new(layer);
        let x = input(m, k);
        let mut out = vec![0.0f32; m * n];
        let opts = LinearOptions::default().activation(activation(gelu));
        g.throughput(Throughput::Elements(flops(m, layer) as u64));
        let id = BenchmarkId::from_parameter(shape_name(m, layer, WeightType::F32));
        match imp {
            Impl::Fused(kern, ty) => {
                // Valid shapes by construction; a failure would be a bug.
                let packed = kern.pack_linear(&weights.view(), ty).expect("weights of a valid shape");
                g.bench_function(id, |b| {
                    b.iter(|| {
                        kern.linear(black_box(&x), &packed, &mut out, &opts)
                            .expect("linear of a valid shape");
                        black_box(out.as_ptr());
                    })
                });
            }
            Impl::Composed(kern) => {
                g.bench_function(id, |b| {
                    b.iter(|| {
                        composition(kern, black_box(&x), &weights, gelu, &mut out)
                            .expect("composition of a valid shape");
                        black_box(out.as_ptr());
                    })
                });
            }
        }
    }
    g.finish();
}

fn linear(c: &mut Criterion) {
    for isa in kernels::available_isas() {
        if isa == Isa::Scalar {
            continue;
        }
        match Kernels::for_isa(isa) {
            Ok(k) => {
                group(c, &format!("{}-f32w", isa.name()), Impl::Fused(k, WeightType::F32));
                group(c, &format!("{}-bf16w", isa.name()), Impl::Fused(k, WeightType::Bf16));
            }
            Err(e) => eprintln!("linear benches: skipping {isa}: {e}"),
        }
    }
    group(c, "composed", Impl::Composed(Kernels::best()));
}

criterion_group!(benches, linear);
criterion_main!(benches);
