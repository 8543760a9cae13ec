//! Criterion benches of the GAU at B = 1, (d, e, s) = (512, 1024, 128), T ∈ {256, 1024}, causal
//! and not: one group per vector ISA of this CPU (`gau/{isa}`), and `gau/composed` with the
//! unfused composition on the gemm crate around the swish of the best ISA
//! (`benches::report::gau::GauComposition`), and `gau/{isa}-packed` with the weights packed
//! once ([`Kernels::gau_packed`]). The scalar path (≈ 1 GFLOP/s, about a second a
//! call) is left out: the report times it once.
//!
//! Throughput is in elements = FLOPs, `2·T·d·(2e+s) + 2·T²·s + 2·T²·e + 2·T·e·d` per call (causal
//! counted as if dense), so criterion's "elem/s" reads as FLOP/s.
//!
//! `cargo bench -p benches --bench gau [-- FILTER]`, e.g. `-- gau/avx512/dense`.

use std::hint::black_box;
use std::time::Duration;

use benches::report::gau::{flops, input, shape, GauComposition, Weights};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
use kernels::{GauOptions, GauWorkspace, Isa, Kernels};

const LENS: [usize; 2] = [256, 1024];

/// Which implementation a group runs.
#[derive(Clone, Copy)]
enum Impl {
    Fused(Kernels),
    Packed(Kernels),
    Composed(Kernels),
}

fn group(c: &mut Criterion, name: &str, imp: Impl) {
    let mut g = c.benchmark_group(format!("gau/{name}"));
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sampling_mode(SamplingMode::Flat);
    for len in LENS {
        let shape = shape(len);
        let weights = Weights::new(&shape);
        let w = weights.view();
        let x = input(len);
        let mut out = vec![0.0f32; x.len()];
        for causal in [false, true] {
            let opts = GauOptions {
                causal,
                ..GauOptions::default()
            };
            let mut workspace = GauWorkspace::new();
            let packed = match imp {
                Impl::Packed(k) => Some(k.pack_gau_weights(&shape, &w).expect("weights of a valid shape")),
                _ => None,
            };
            let mut composition = GauComposition::new(&shape, causal);
            g.throughput(Throughput::Elements(flops(len, causal).1 as u64));
            let id = BenchmarkId::new(if causal { "causal" } else { "dense" }, len);
            // Valid shapes by construction; a failure would be a bug.
            g.bench_function(id, |b| {
                b.iter(|| {
                    match imp {
                        Impl::Fused(k) => k
                            .gau(&shape, black_box(&x), &w, &opts, &mut out, &mut workspace)
                            .expect("gau of a valid shape"),
                        Impl::Packed(k) => k
                            .gau_packed(
                                &shape,
                                black_box(&x),
                                packed.as_ref().expect("packed above"),
                                &opts,
                                &mut out,
                                &mut workspace,
                            )
                            .expect("gau of a valid shape"),
                        Impl::Composed(k) => composition
                            .run(k, black_box(&x), &w, &mut out)
                            .expect("composition of a valid shape"),
                    }
                    black_box(out.as_ptr());
                })
            });
        }
    }
    g.finish();
}

fn gau(c: &mut Criterion) {
    for isa in kernels::available_isas() {
        if isa == Isa::Scalar {
            continue;
        }
        match Kernels::for_isa(isa) {
            Ok(k) => {
                group(c, isa.name(), Impl::Fused(k));
                group(c, &format!("{}-packed", isa.name()), Impl::Packed(k));
            }
            Err(e) => eprintln!("gau benches: skipping {isa}: {e}"),
        }
    }
    group(c, "composed", Impl::Composed(Kernels::best()));
}

criterion_group!(benches, gau);
criterion_main!(benches);
