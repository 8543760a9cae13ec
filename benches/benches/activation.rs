//! Criterion benches of the element-wise activations sigmoid, swish, gelu (erf form) and
//! gelu_tanh: one group per ISA of this CPU (`activation/{isa}`) and one for the plain Rust
//! versions (`activation/plain`: libm's `f32::exp`, the `libm` crate's `erff`, `f32::tanh`),
//! in cache (16 Ki elements, 128 KiB working set) and beyond L2 (4 Mi elements, 16 MiB in and
//! 16 MiB out); throughput in bytes (x read + y written), as the softmax benches.
//!
//! `cargo bench -p benches --bench activation [-- FILTER]`, e.g. `-- activation/avx512/gelu/`.

use std::hint::black_box;
use std::time::Duration;

use benches::buffers::{Pair, DEFAULT_OUT_OFFSET};
use benches::{data, plain};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use kernels::Kernels;

/// Lengths: in cache and beyond L2.
const LENS: [usize; 2] = [16 * 1024, 4 << 20];

/// Which implementation a group runs.
#[derive(Clone, Copy)]
enum Impl {
    Plain,
    Isa(Kernels),
}

/// Benches `f` on a [`Pair`] filled with `input`, placed as the report places its buffers.
fn bench_io(g: &mut BenchmarkGroup<'_, WallTime>, id: BenchmarkId, input: &[f32], f: impl Fn(&[f32], &mut [f32])) {
    let len = input.len();
    let mut pair = Pair::new(len, len, DEFAULT_OUT_OFFSET);
    pair.x_mut().copy_from_slice(input);
    g.throughput(Throughput::Bytes((2 * len * std::mem::size_of::<f32>()) as u64));
    g.sampling_mode(if len > 1 << 16 {
        SamplingMode::Flat
    } else {
        SamplingMode::Auto
    });
    g.bench_function(id, |b| {
        b.iter(|| {
            let (x, y) = pair.io();
            f(black_box(x), black_box(&mut *y));
            black_box(y);
        })
    });
}

fn group(c: &mut Criterion, name: &str, imp: Impl) {
    let mut g = c.benchmark_group(format!("activation/{name}"));
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for len in LENS {
        // Pre-activations, as in the report.
        let x = data::uniform(len, -10.0, 10.0, 0x5eed_0003);
        match imp {
            Impl::Plain => {
                bench_io(&mut g, BenchmarkId::new("sigmoid", len), &x, plain::sigmoid);
                bench_io(&mut g, BenchmarkId::new("swish", len), &x, plain::swish);
                bench_io(&mut g, BenchmarkId::new("gelu", len), &x, plain::gelu);
                bench_io(&mut g, BenchmarkId::new("gelu_tanh", len), &x, plain::gelu_tanh);
            }
            Impl::Isa(k) => {
                // Equal lengths by construction; a failure would be a kernels bug.
                bench_io(&mut g, BenchmarkId::new("sigmoid", len), &x, |x, y| {
                    k.sigmoid(x, y).expect("sigmoid of equal lengths")
                });
                bench_io(&mut g, BenchmarkId::new("swish", len), &x, |x, y| {
                    k.swish(x, y).expect("swish of equal lengths")
                });
                bench_io(&mut g, BenchmarkId::new("gelu", len), &x, |x, y| {
                    k.gelu(x, y).expect("gelu of equal lengths")
                });
                bench_io(&mut g, BenchmarkId::new("gelu_tanh", len), &x, |x, y| {
                    k.gelu_tanh(x, y).expect("gelu_tanh of equal lengths")
                });
            }
        }
    }
    g.finish();
}

fn activation(c: &mut Criterion) {
    for isa in kernels::available_isas() {
        match Kernels::for_isa(isa) {
            Ok(k) => group(c, isa.name(), Impl::Isa(k)),
            Err(e) => eprintln!("activation benches: skipping {isa}: {e}"),
        }
    }
    group(c, "plain", Impl::Plain);
}

criterion_group!(benches, activation);
criterion_main!(benches);
