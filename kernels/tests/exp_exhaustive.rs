//! `exp` on every f32 input, every ISA: ≤ 1 ulp against f64 `exp` rounded to f32, NaN for
//! NaN. About a minute and a half in the test profile on two cores (opt-level 2; 99 s for the
//! scalar and AVX2 paths on a Zen 3); ignored in the default test run, and run by CI as
//! `cargo test -p kernels --test exp_exhaustive -- --ignored`.
//! `KERNELS_EXP_STRIDE=k` checks every k-th bit pattern instead (used under qemu).

mod common;

use reference::ulp_distance;

// Ignored because it checks 4.3·10⁹ inputs: a minute or two, where all the other tests of
// the workspace run in under a minute (46 s in CI). `.ci/run` runs it on every CI run, in the
// test profile that `cargo test --workspace` has already built:
// `cargo test -p kernels --test exp_exhaustive -- --ignored`; the aarch64 script runs a
// strided sample under qemu.
#[test]
#[ignore = "4.3e9 inputs: run by CI with --ignored (see the module docs)"]
fn exp_is_within_1_ulp_for_every_f32() {
    let stride: u64 = std::env::var("KERNELS_EXP_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let kernels = common::all_kernels();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    const BLOCK: u64 = 1 << 16;
    let blocks = (1u64 << 32) / BLOCK;
    let worst = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let kernels = &kernels;
                scope.spawn(move || {
                    let mut worst = vec![(0u64, 0f32); kernels.len()];
                    let mut x = Vec::with_capacity(BLOCK as usize);
                    let mut y = vec![0.0f32; BLOCK as usize];
                    for b in (t..blocks).step_by(threads as usize) {
                        x.clear();
                        x.extend(
                            (b * BLOCK..(b + 1) * BLOCK)
                                .step_by(stride as usize)
                                .map(|i| f32::from_bits(i as u32)),
                        );
                        let exact: Vec<f32> = x.iter().map(|&v| (v as f64).exp() as f32).collect();
                        for (k, w) in kernels.iter().zip(worst.iter_mut()) {
                            let y = &mut y[..x.len()];
                            k.exp(&x, y).unwrap();
                            for ((&xi, &yi), &ei) in x.iter().zip(y.iter()).zip(&exact) {
                                let d = ulp_distance(yi, ei);
                                if d > w.0 {
                                    *w = (d, xi);
                                }
                            }
                        }
                    }
                    worst
                })
            })
            .collect();
        let per_thread: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (0..kernels.len())
            .map(|i| per_thread.iter().map(|w| w[i]).max_by_key(|w| w.0).unwrap())
            .collect::<Vec<_>>()
    });
    for (k, (ulps, at)) in kernels.iter().zip(&worst) {
        eprintln!("{}: max error {ulps} ulp (at x = {at:e}), stride {stride}", k.isa());
    }
    for (k, (ulps, at)) in kernels.iter().zip(&worst) {
        assert!(*ulps <= 1, "{}: {ulps} ulp at x = {at:e}", k.isa());
    }
}
