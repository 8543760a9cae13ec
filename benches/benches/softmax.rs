//! Criterion benches of softmax, log-softmax and exp: one group per ISA of this CPU (and one
//! for the plain Rust versions), a few shapes each, throughput in bytes (x read + y written).
//!
//! `cargo bench -p benches --bench softmax [-- FILTER]`, e.g. `-- softmax/avx512`. The
//! `report` binary is the main tool (same-run ratios and rooflines); these benches give
//! criterion's statistics and its history between runs.

use std::hint::black_box;
use std::time::Duration;

use benches::buffers::{Pair, DEFAULT_OUT_OFFSET};
use benches::{data, plain};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use kernels::{Kernels, SoftmaxOptions};

/// `(rows, n)`: in cache (128 KiB working set) and beyond L2 (16 MiB in, 16 MiB out).
const ROWS: [(usize, usize); 3] = [(128, 128), (4, 4096), (4096, 1024)];
/// exp lengths: in cache and beyond L2.
const EXP_LENS: [usize; 2] = [16 * 1024, 4 << 20];

/// Which implementation a group runs.
#[derive(Clone, Copy)]
enum Impl {
    Plain,
    Isa(Kernels),
}

/// Benches `f` on a [`Pair`] of `len` floats filled by `input`, placed as the report places
/// its buffers.
fn bench_io(g: &mut BenchmarkGroup<'_, WallTime>, id: BenchmarkId, input: Vec<f32>, f: impl Fn(&[f32], &mut [f32])) {
    let len = input.len();
    let mut pair = Pair::new(len, len, DEFAULT_OUT_OFFSET);
    pair.x_mut().copy_from_slice(&input);
    g.throughput(Throughput::Bytes((2 * len * std::mem::size_of::<f32>()) as u64));
    // Large shapes take milliseconds per call: flat sampling keeps the run short.
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
    let mut g = c.benchmark_group(format!("softmax/{name}"));
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let opts = SoftmaxOptions::default();
    for (rows, n) in ROWS {
        let shape = format!("{rows}x{n}");
        let logits = data::uniform(rows * n, -10.0, 10.0, 0x5eed_0001);
        match imp {
            Impl::Plain => {
                bench_io(&mut g, BenchmarkId::new("softmax", &shape), logits.clone(), |x, y| {
                    plain::softmax(x, y, n)
                });
                bench_io(&mut g, BenchmarkId::new("log_softmax", &shape), logits, |x, y| {
                    plain::log_softmax(x, y, n)
                });
            }
            Impl::Isa(k) => {
                // The shapes are valid by construction; a failure would be a kernels bug.
                bench_io(&mut g, BenchmarkId::new("softmax", &shape), logits.clone(), |x, y| {
                    k.softmax(x, y, n, &opts).expect("softmax of a valid shape")
                });
                bench_io(&mut g, BenchmarkId::new("log_softmax", &shape), logits, |x, y| {
                    k.log_softmax(x, y, n, &opts).expect("log_softmax of a valid shape")
                });
            }
        }
    }
    for len in EXP_LENS {
        let x = data::uniform(len, -80.0, 80.0, 0x5eed_0002);
        let id = BenchmarkId::new("exp", len);
        match imp {
            Impl::Plain => bench_io(&mut g, id, x, plain::exp),
            Impl::Isa(k) => bench_io(&mut g, id, x, |x, y| k.exp(x, y).expect("exp of equal lengths")),
        }
    }
    g.finish();
}

fn softmax(c: &mut Criterion) {
    for isa in kernels::available_isas() {
        match Kernels::for_isa(isa) {
            Ok(k) => group(c, isa.name(), Impl::Isa(k)),
            Err(e) => eprintln!("softmax benches: skipping {isa}: {e}"),
        }
    }
    group(c, "plain", Impl::Plain);
}

criterion_group!(benches, softmax);
criterion_main!(benches);
