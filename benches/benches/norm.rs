//! Criterion benches of the normalization family: one group per ISA of this CPU
//! (`norm/{isa}`) and one for the plain Rust versions (`norm/plain`), each with `layer_norm`,
//! `add_layer_norm` with the `h` output (`add_ln_h`), `rms_norm` at `(rows, d)` = (16, 1024)
//! (in cache) and (4096, 1024) (beyond L2), and `batch_norm` (inference) at `[N, C, S]` =
//! [16, 256, 1024]. Throughput in bytes an ideal kernel moves (layer_norm, rms_norm, batch_norm:
//! x read + y written; add_ln_h: x and r read, y and h written). The scalar path runs the
//! in-cache shapes only.
//!
//! `cargo bench -p benches --bench norm [-- FILTER]`, e.g. `-- norm/avx512/layer_norm`. The
//! `report` binary is the main tool (same-run ratios against the copy roofline).

use std::hint::black_box;
use std::time::Duration;

use benches::buffers::{Pair, DEFAULT_OUT_OFFSET};
use benches::report::norm::{
    affine, plain_add, plain_batch_norm, plain_layer_norm, plain_rms_norm, rows_input, running, EPS,
};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use kernels::{BatchNormOptions, Isa, Kernels, LayerNormOptions, Residual, RmsNormOptions};

/// `(rows, d)`: in cache, beyond L2.
const ROWS: [(usize, usize); 2] = [(16, 1024), (4096, 1024)];
/// BatchNorm's `[N, C, S]`.
const BN_SHAPE: [usize; 3] = [16, 256, 1024];

/// Which implementation a group runs.
#[derive(Clone, Copy)]
enum Impl {
    Plain,
    Isa(Kernels),
}

/// Benches `f` on a [`Pair`] of `x_len` in, `y_len` out floats, `x` filled by `input`, placed
/// as the report places its buffers.
fn bench_io(
    g: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    input: Vec<f32>,
    y_len: usize,
    f: impl Fn(&[f32], &mut [f32]),
) {
    let len = input.len();
    let mut pair = Pair::new(len, y_len, DEFAULT_OUT_OFFSET);
    pair.x_mut().copy_from_slice(&input);
    g.throughput(Throughput::Bytes(((len + y_len) * std::mem::size_of::<f32>()) as u64));
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

fn group(c: &mut Criterion, name: &str, imp: Impl, max_len: usize) {
    let mut g = c.benchmark_group(format!("norm/{name}"));
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (rows, d) in ROWS {
        let n = rows * d;
        if n > max_len {
            continue;
        }
        let shape = format!("{rows}x{d}");
        let (gamma, beta) = affine(d);
        let opts = LayerNormOptions {
            gamma: Some(&gamma),
            beta: Some(&beta),
            eps: EPS,
        };
        let rms = RmsNormOptions {
            gain: Some(&gamma),
            eps: EPS,
        };
        let x = rows_input(rows, d, 0x5eed_0310);
        let mut xr = x.clone();
        xr.extend(benches::data::uniform(n, -1.0, 1.0, 0x5eed_0312));
        let id = |k: &str| BenchmarkId::new(k, &shape);
        // Valid shapes by construction; a failure would be a kernels bug.
        match imp {
            Impl::Plain => {
                bench_io(&mut g, id("layer_norm"), x.clone(), n, |x, y| {
                    plain_layer_norm(x, y, d, &gamma, &beta, EPS)
                });
                bench_io(&mut g, id("add_ln_h"), xr, 2 * n, |xr, yh| {
                    let (x, r) = xr.split_at(n);
                    let (y, h) = yh.split_at_mut(n);
                    plain_add(x, r, h);
                    plain_layer_norm(h, y, d, &gamma, &beta, EPS);
                });
                bench_io(&mut g, id("rms_norm"), x, n, |x, y| {
                    plain_rms_norm(x, y, d, &gamma, EPS)
                });
            }
            Impl::Isa(k) => {
                bench_io(&mut g, id("layer_norm"), x.clone(), n, |x, y| {
                    k.layer_norm(x, y, d, &opts).expect("layer_norm of a valid shape")
                });
                bench_io(&mut g, id("add_ln_h"), xr, 2 * n, |xr, yh| {
                    let (x, r) = xr.split_at(n);
                    let (y, h) = yh.split_at_mut(n);
                    k.add_layer_norm(x, r, y, Some(h), d, &Residual::default(), &opts)
                        .expect("add_layer_norm of a valid shape")
                });
                bench_io(&mut g, id("rms_norm"), x, n, |x, y| {
                    k.rms_norm(x, y, d, &rms).expect("rms_norm of a valid shape")
                });
            }
        }
    }
    let [bn, bc, bs] = BN_SHAPE;
    if bn * bc * bs <= max_len {
        let (gamma, beta) = affine(bc);
        let (mean, var) = running(bc);
        let x = rows_input(bn * bc, bs, 0x5eed_0322);
        let id = BenchmarkId::new("batch_norm", format!("{bn}x{bc}x{bs}"));
        match imp {
            Impl::Plain => bench_io(&mut g, id, x, bn * bc * bs, |x, y| {
                plain_batch_norm(x, y, BN_SHAPE, &mean, &var, &gamma, &beta, EPS)
            }),
            Impl::Isa(k) => {
                let opts = BatchNormOptions {
                    gamma: Some(&gamma),
                    beta: Some(&beta),
                    eps: EPS,
                    ..BatchNormOptions::default()
                };
                bench_io(&mut g, id, x, bn * bc * bs, |x, y| {
                    k.batch_norm(x, y, BN_SHAPE, &mean, &var, &opts)
                        .expect("batch_norm of a valid shape")
                })
            }
        }
    }
    g.finish();
}

fn norm(c: &mut Criterion) {
    for isa in kernels::available_isas() {
        match Kernels::for_isa(isa) {
            Ok(k) => {
                let max_len = if isa == Isa::Scalar { 1 << 16 } else { usize::MAX };
                group(c, isa.name(), Impl::Isa(k), max_len);
            }
            Err(e) => eprintln!("norm benches: skipping {isa}: {e}"),
        }
    }
    group(c, "plain", Impl::Plain, usize::MAX);
}

criterion_group!(benches, norm);
criterion_main!(benches);
