//! The normalization family on every ISA against the f64 oracle, under the documented bounds
//! (`reference::check_*` implement them), plus the rows hard on purpose and the errors.

mod common;

use std::sync::Mutex;

use common::{all_kernels, misaligned, misaligned_as, narrow, wide, Half, SPECIALS};
use kernels::{BatchNormOptions, Error, Kernels, LayerNormOptions, Residual, RmsNormOptions, RowStats, Stores};
use proptest::prelude::*;
use reference::BatchNormTrainOutputs;

/// The worst ratio of error to bound seen per kernel and ISA, printed by `zz_report_worst_ratios`
/// (run the tests with `--nocapture` to see it).
static WORST: Mutex<Vec<(String, f64)>> = Mutex::new(Vec::new());

fn record(what: &str, k: &Kernels, ratio: f64) {
    let key = format!("{what} {}", k.isa());
    let mut w = WORST.lock().unwrap();
    match w.iter_mut().find(|(n, _)| *n == key) {
        Some((_, r)) => *r = r.max(ratio),
        None => w.push((key, ratio)),
    }
}

/// Row shapes `(d, rows)`: every tail up to three AVX-512 vectors and a bit, longer rows, many
/// short rows, many rows of up to 300, and rows up to 16384.
fn shape() -> impl Strategy<Value = (usize, usize)> {
    prop_oneof![
        6 => (1usize..=50, 1usize..=4),
        2 => (51usize..=300, 1usize..=3),
        1 => (1usize..=16, 500usize..=3000),
        1 => (17usize..=300, 16usize..=80),
        1 => (3000usize..=16384, 1usize..=2),
    ]
}

/// Row values of one of several kinds: ordinary, far from 0, with the special values, of
/// mixed huge magnitudes, tiny.
fn values(n: usize) -> impl Strategy<Value = Vec<f32>> {
    (0u8..6).prop_flat_map(move |kind| {
        let v = match kind {
            0 => (-4.0f32..4.0).boxed(),
            1 => (-1.0f32..1.0).prop_map(|v| 1e4 + v).boxed(),
            2 => prop_oneof![60 => -30.0f32..30.0, 1 => proptest::sample::select(SPECIALS.to_vec())].boxed(),
            3 => proptest::sample::select(vec![1e30f32, -1e30, 1e-30, 3.0e38, -3.0e38, 1.0, -1.0, 0.0, 1e19]).boxed(),
            4 => (-1e-20f32..1e-20).boxed(),
            _ => (-1.0f32..1.0).prop_map(|v| 1e7 + v * 8.0).boxed(),
        };
        proptest::collection::vec(v, n)
    })
}

fn eps() -> impl Strategy<Value = f32> {
    proptest::sample::select(vec![1e-5f32, 1e-6, 1e-12, 1.0, 1e-30])
}

fn param(d: usize) -> impl Strategy<Value = Option<Vec<f32>>> {
    proptest::option::of(proptest::collection::vec(-2.0f32..2.0, d))
}

#[derive(Debug, Clone)]
struct LnCase {
    x: Vec<f32>,
    d: usize,
    gamma: Option<Vec<f32>>,
    beta: Option<Vec<f32>>,
    eps: f32,
    offset: usize,
    mode: u8,
}

fn ln_case() -> impl Strategy<Value = LnCase> {
    (shape(), 0usize..16, 0u8..3).prop_flat_map(|((d, rows), offset, mode)| {
        (values(d * rows), param(d), param(d), eps()).prop_map(move |(x, gamma, beta, eps)| LnCase {
            x,
            d,
            gamma,
            beta,
            eps,
            offset,
            mode,
        })
    })
}

/// Per-row means and rstd written by a kernel.
type Stats = (Vec<f32>, Vec<f32>);

/// Runs the case as `mode` says (0: out of place, 1: in place, 2: with the statistics);
/// returns `y`, and the statistics if asked for.
fn run_layer_norm(k: &Kernels, c: &LnCase) -> (Vec<f32>, Option<Stats>) {
    let opts = LayerNormOptions {
        gamma: c.gamma.as_deref(),
        beta: c.beta.as_deref(),
        eps: c.eps,
    };
    let rows = c.x.len() / c.d;
    let mut buf = misaligned(&c.x, c.offset);
    let o = (c.offset * 7) % 16;
    let mut out = misaligned(&vec![0.0; c.x.len()], o);
    match c.mode {
        1 => {
            k.layer_norm_inplace(&mut buf[c.offset..], c.d, &opts).unwrap();
            (buf[c.offset..].to_vec(), None)
        }
        2 => {
            let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
            let stats = RowStats {
                mean: Some(&mut mean),
                rstd: Some(&mut rstd),
            };
            k.layer_norm_with_stats(&buf[c.offset..], &mut out[o..], c.d, &opts, stats)
                .unwrap();
            assert!(out[..o].iter().all(|v| v.is_nan()), "wrote before the output slice");
            (out[o..].to_vec(), Some((mean, rstd)))
        }
        _ => {
            k.layer_norm(&buf[c.offset..], &mut out[o..], c.d, &opts).unwrap();
            assert!(out[..o].iter().all(|v| v.is_nan()), "wrote before the output slice");
            (out[o..].to_vec(), None)
        }
    }
}

fn check_ln(
    k: &Kernels,
    what: &str,
    h: &[f32],
    d: usize,
    opts: &LayerNormOptions,
    y: &[f32],
    stats: Option<&Stats>,
) -> Result<(), TestCaseError> {
    let ratio = reference::check_layer_norm(
        h,
        d,
        opts.gamma,
        opts.beta,
        opts.eps,
        y,
        stats.map(|s| &s.0[..]),
        stats.map(|s| &s.1[..]),
    )
    .map_err(|m| TestCaseError::fail(format!("{what} isa {} d {d} eps {}: {m}", k.isa(), opts.eps)))?;
    record(what, k, ratio);
    Ok(())
}

#[derive(Debug, Clone)]
struct AddCase {
    x: Vec<f32>,
    r: Vec<f32>,
    bias: Option<Vec<f32>>,
    alpha: f32,
    d: usize,
    gamma: Option<Vec<f32>>,
    beta: Option<Vec<f32>>,
    eps: f32,
    /// 0: no `h` output, 1: `h` output, 2: in place, 3: `h` output and statistics.
    mode: u8,
}

fn add_case() -> impl Strategy<Value = AddCase> {
    (shape(), 0u8..4).prop_flat_map(|((d, rows), mode)| {
        let alpha = prop_oneof![2 => Just(1.0f32), 1 => -3.0f32..3.0, 1 => Just(2.2134f32)];
        (
            values(d * rows),
            proptest::collection::vec(-4.0f32..4.0, d * rows),
            param(d),
            alpha,
            param(d),
            param(d),
            eps(),
        )
            .prop_map(move |(x, r, bias, alpha, gamma, beta, eps)| AddCase {
                x,
                r,
                bias,
                alpha,
                d,
                gamma,
                beta,
                eps,
                mode,
            })
    })
}

/// Runs an add case on the LayerNorm (`rms = false`) or RMSNorm form: returns `y`, `h` when
/// the mode outputs it, and the statistics (LayerNorm, mode 3).
type AddRun = (Vec<f32>, Option<Vec<f32>>, Option<Stats>);

fn run_add(k: &Kernels, c: &AddCase, rms: bool) -> AddRun {
    let residual = Residual {
        alpha: c.alpha,
        bias: c.bias.as_deref(),
    };
    let ln = LayerNormOptions {
        gamma: c.gamma.as_deref(),
        beta: c.beta.as_deref(),
        eps: c.eps,
    };
    let rn = RmsNormOptions {
        gain: c.gamma.as_deref(),
        eps: c.eps,
    };
    let n = c.x.len();
    let rows = n / c.d;
    let mut y = misaligned(&vec![0.0; n], 3);
    let yv = &mut y[3..];
    let (mut h, mut stats) = (None, None);
    match c.mode {
        0 if rms => k.add_rms_norm(&c.x, &c.r, yv, None, c.d, &residual, &rn).unwrap(),
        0 => k.add_layer_norm(&c.x, &c.r, yv, None, c.d, &residual, &ln).unwrap(),
        2 => {
            let mut x = misaligned(&c.x, 5);
            if rms {
                k.add_rms_norm_inplace(&mut x[5..], &c.r, yv, c.d, &residual, &rn)
                    .unwrap();
            } else {
                k.add_layer_norm_inplace(&mut x[5..], &c.r, yv, c.d, &residual, &ln)
                    .unwrap();
            }
            h = Some(x[5..].to_vec());
        }
        _ => {
            let mut hb = vec![0.0; n];
            if rms {
                k.add_rms_norm(&c.x, &c.r, yv, Some(&mut hb), c.d, &residual, &rn)
                    .unwrap();
            } else if c.mode == 3 {
                let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
                let s = RowStats {
                    mean: Some(&mut mean),
                    rstd: Some(&mut rstd),
                };
                k.add_layer_norm_with_stats(&c.x, &c.r, yv, Some(&mut hb), c.d, &residual, &ln, s)
                    .unwrap();
                stats = Some((mean, rstd));
            } else {
                k.add_layer_norm(&c.x, &c.r, yv, Some(&mut hb), c.d, &residual, &ln)
                    .unwrap();
            }
            h = Some(hb);
        }
    }
    assert!(y[..3].iter().all(|v| v.is_nan()), "wrote before the output slice");
    (y[3..].to_vec(), h, stats)
}

/// `h` is the f32 residual of the definition, bit for bit.
fn check_h(k: &Kernels, want: &[f32], got: &[f32]) -> Result<(), TestCaseError> {
    for (j, (a, b)) in want.iter().zip(got).enumerate() {
        prop_assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "isa {}: h[{j}] = {b:e}, want {a:e}",
            k.isa()
        );
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct RmsCase {
    x: Vec<f32>,
    d: usize,
    gain: Option<Vec<f32>>,
    eps: f32,
    inplace: bool,
    offset: usize,
}

fn rms_case() -> impl Strategy<Value = RmsCase> {
    (shape(), any::<bool>(), 0usize..16).prop_flat_map(|((d, rows), inplace, offset)| {
        (values(d * rows), param(d), eps()).prop_map(move |(x, gain, eps)| RmsCase {
            x,
            d,
            gain,
            eps,
            inplace,
            offset,
        })
    })
}

#[derive(Debug, Clone)]
struct BnCase {
    x: Vec<f32>,
    shape: [usize; 3],
    mean: Vec<f32>,
    var: Vec<f32>,
    gamma: Option<Vec<f32>>,
    beta: Option<Vec<f32>>,
    eps: f32,
    momentum: f32,
    stats: bool,
}

/// `[N, C, S]` with short and long segments on every vector width (both training paths).
fn bn_case() -> impl Strategy<Value = BnCase> {
    let s = prop_oneof![
        3 => 1usize..=20,
        1 => proptest::sample::select(vec![31usize, 64, 100, 255, 256, 300, 1030, 2000]),
    ];
    (1usize..=40, 1usize..=12, s, any::<bool>()).prop_flat_map(|(n, c, s, stats)| {
        let n = if n * s < 2 { 2 } else { n };
        let len = n * c * s;
        (
            values(len),
            proptest::collection::vec(-3.0f32..3.0, c),
            proptest::collection::vec(0.0f32..4.0, c),
            param(c),
            param(c),
            eps(),
            prop_oneof![Just(0.1f32), 0.0f32..=1.0],
        )
            .prop_map(move |(x, mean, var, gamma, beta, eps, momentum)| BnCase {
                x,
                shape: [n, c, s],
                mean,
                var,
                gamma,
                beta,
                eps,
                momentum,
                stats,
            })
    })
}

fn bn_opts(c: &BnCase) -> BatchNormOptions<'_> {
    BatchNormOptions {
        gamma: c.gamma.as_deref(),
        beta: c.beta.as_deref(),
        eps: c.eps,
        momentum: c.momentum,
    }
}

/// Runs the property `f` over `cases` cases of `strategy` (failures are shrunk and reported as
/// proptest does), then prints the worst ratio of error to bound it recorded per ISA.
fn run_prop<S: Strategy>(name: &str, cases: u32, strategy: S, f: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: common::cases(cases),
        ..ProptestConfig::default()
    });
    if let Err(e) = runner.run(&strategy, f) {
        panic!("{name}: {e}");
    }
    for (key, ratio) in WORST.lock().unwrap().iter() {
        if key.rsplit_once(' ').map(|(n, _)| n) == Some(name) {
            eprintln!("{key:>32}: worst error/bound {ratio:.3}");
        }
    }
}

/// Every ISA, each with its default stores and with streaming stores forced (which the rows
/// of at least 512 values take).
fn with_both_stores() -> Vec<Kernels> {
    all_kernels()
        .into_iter()
        .flat_map(|k| [k, k.with_stores(Stores::Streaming)])
        .collect()
}

#[test]
fn layer_norm_matches_oracle_on_every_isa() {
    run_prop("layer_norm", 200, ln_case(), |c| {
        let opts = LayerNormOptions {
            gamma: c.gamma.as_deref(),
            beta: c.beta.as_deref(),
            eps: c.eps,
        };
        for k in with_both_stores() {
            let (y, stats) = run_layer_norm(&k, &c);
            check_ln(&k, "layer_norm", &c.x, c.d, &opts, &y, stats.as_ref())?;
        }
        Ok(())
    });
}

#[test]
fn add_layer_norm_matches_oracle_on_every_isa() {
    run_prop("add_layer_norm", 200, add_case(), |c| {
        let opts = LayerNormOptions {
            gamma: c.gamma.as_deref(),
            beta: c.beta.as_deref(),
            eps: c.eps,
        };
        let h = reference::residual(&c.x, &c.r, c.bias.as_deref(), c.alpha, c.d);
        for k in with_both_stores() {
            let (y, got_h, stats) = run_add(&k, &c, false);
            if let Some(got_h) = &got_h {
                check_h(&k, &h, got_h)?;
            }
            check_ln(&k, "add_layer_norm", &h, c.d, &opts, &y, stats.as_ref())?;
            if c.mode != 0 {
                // Writing `h` or not does not change `y`.
                let (y0, _, _) = run_add(&k, &AddCase { mode: 0, ..c.clone() }, false);
                prop_assert!(y
                    .iter()
                    .zip(&y0)
                    .all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan()));
            }
        }
        Ok(())
    });
}

#[test]
fn rms_norm_matches_oracle_on_every_isa() {
    run_prop("rms_norm", 200, rms_case(), |c| {
        let opts = RmsNormOptions {
            gain: c.gain.as_deref(),
            eps: c.eps,
        };
        for k in with_both_stores() {
            let mut buf = misaligned(&c.x, c.offset);
            let y = if c.inplace {
                k.rms_norm_inplace(&mut buf[c.offset..], c.d, &opts).unwrap();
                buf[c.offset..].to_vec()
            } else {
                let mut out = vec![0.0; c.x.len()];
                k.rms_norm(&buf[c.offset..], &mut out, c.d, &opts).unwrap();
                out
            };
            let ratio = reference::check_rms_norm(&c.x, c.d, opts.gain, c.eps, &y)
                .map_err(|m| TestCaseError::fail(format!("isa {} d {}: {m}", k.isa(), c.d)))?;
            record("rms_norm", &k, ratio);
        }
        Ok(())
    });
}

#[test]
fn add_rms_norm_matches_oracle_on_every_isa() {
    run_prop("add_rms_norm", 200, add_case(), |c| {
        let c = AddCase { mode: c.mode % 3, ..c };
        let h = reference::residual(&c.x, &c.r, c.bias.as_deref(), c.alpha, c.d);
        for k in with_both_stores() {
            let (y, got_h, _) = run_add(&k, &c, true);
            if let Some(got_h) = &got_h {
                check_h(&k, &h, got_h)?;
            }
            let ratio = reference::check_rms_norm(&h, c.d, c.gamma.as_deref(), c.eps, &y)
                .map_err(|m| TestCaseError::fail(format!("isa {} d {}: {m}", k.isa(), c.d)))?;
            record("add_rms_norm", &k, ratio);
        }
        Ok(())
    });
}

#[test]
fn batch_norm_matches_oracle_on_every_isa() {
    run_prop("batch_norm", 200, bn_case(), |c| {
        let opts = bn_opts(&c);
        for k in all_kernels() {
            let mut y = vec![0.0; c.x.len()];
            k.batch_norm(&c.x, &mut y, c.shape, &c.mean, &c.var, &opts).unwrap();
            let mut z = c.x.clone();
            k.batch_norm_inplace(&mut z, c.shape, &c.mean, &c.var, &opts).unwrap();
            prop_assert!(y
                .iter()
                .zip(&z)
                .all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan()));
            let ratio = reference::check_batch_norm(&c.x, c.shape, &c.mean, &c.var, opts.gamma, opts.beta, c.eps, &y)
                .map_err(|m| TestCaseError::fail(format!("isa {} shape {:?}: {m}", k.isa(), c.shape)))?;
            record("batch_norm", &k, ratio);
        }
        Ok(())
    });
}

#[test]
fn batch_norm_train_matches_oracle_on_every_isa() {
    run_prop("batch_norm_train", 200, bn_case(), |c| {
        let opts = bn_opts(&c);
        let ch = c.shape[1];
        for k in all_kernels() {
            let mut y = vec![0.0; c.x.len()];
            let (mut rm, mut rv) = (c.mean.clone(), c.var.clone());
            let (mut mean, mut rstd) = (vec![0.0; ch], vec![0.0; ch]);
            if c.stats {
                let s = RowStats {
                    mean: Some(&mut mean),
                    rstd: Some(&mut rstd),
                };
                k.batch_norm_train_with_stats(&c.x, &mut y, c.shape, &mut rm, &mut rv, &opts, s)
                    .unwrap();
            } else {
                k.batch_norm_train(&c.x, &mut y, c.shape, &mut rm, &mut rv, &opts)
                    .unwrap();
            }
            let got = BatchNormTrainOutputs {
                y: &y,
                running_mean: &rm,
                running_var: &rv,
                mean: c.stats.then_some(&mean[..]),
                rstd: c.stats.then_some(&rstd[..]),
            };
            let ratio = reference::check_batch_norm_train(
                &c.x, c.shape, &c.mean, &c.var, opts.gamma, opts.beta, c.eps, c.momentum, got,
            )
            .map_err(|m| TestCaseError::fail(format!("isa {} shape {:?}: {m}", k.isa(), c.shape)))?;
            record("batch_norm_train", &k, ratio);
        }
        Ok(())
    });
}

/// A deterministic generator of `N(0, 1)` samples (xorshift64* and Box–Muller).
struct Normal(u64);

impl Normal {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn sample(&mut self) -> f64 {
        let (a, b) = (self.uniform(), self.uniform());
        (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
    }
}

/// Rows of an add-form call with hard rows among ordinary ones: `x ~ 3·N(0, 1) + 1` with a
/// NaN at `nan_at` and row `huge_row` of ±10³⁰, `r ~ N(0, 1)`, and `γ`, `β` and the residual
/// bias drawn with scales 1, 0.5 and 0.1.
struct MixedRows {
    x: Vec<f32>,
    r: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    bias: Vec<f32>,
}

fn mixed_rows(g: &mut Normal, d: usize, rows: usize, nan_at: usize, huge_row: usize) -> MixedRows {
    let n = d * rows;
    let mut x: Vec<f32> = (0..n).map(|_| (3.0 * g.sample() + 1.0) as f32).collect();
    x[nan_at] = f32::NAN;
    for j in 0..d {
        x[huge_row * d + j] = if j % 3 == 0 { 1e30 } else { -1e30 };
    }
    let r: Vec<f32> = (0..n).map(|_| g.sample() as f32).collect();
    let mut param = |scale: f64| -> Vec<f32> { (0..d).map(|_| (scale * g.sample()) as f32).collect() };
    let (gamma, beta, bias) = (param(1.0), param(0.5), param(0.1));
    MixedRows {
        x,
        r,
        gamma,
        beta,
        bias,
    }
}

/// `|y − ŷ| ≤ 10⁻⁵·max(|ŷ|, 1)` for every element (γ = 1, β = 0: the outputs are in units of
/// the row's standard deviation), and the documented bound.
fn assert_hard(k: &Kernels, name: &str, x: &[f32], d: usize, y: &[f32]) {
    let exact = reference::layer_norm(x, d, None, None, 1e-5);
    let mut worst = 0.0f64;
    for (j, (&got, &e)) in y.iter().zip(&exact.y).enumerate() {
        if e.is_nan() {
            assert!(got.is_nan(), "{name} isa {}: y[{j}] = {got}, want NaN", k.isa());
            continue;
        }
        let rel = (got as f64 - e).abs() / e.abs().max(1.0);
        worst = worst.max(rel);
        assert!(
            rel <= 1e-5,
            "{name} isa {}: y[{j}] = {got:e}, exact {e:e}: {rel:e} > 1e-5",
            k.isa()
        );
    }
    reference::check_layer_norm(x, d, None, None, 1e-5, y, None, None)
        .unwrap_or_else(|m| panic!("{name} isa {}: {m}", k.isa()));
    eprintln!("{name:>26} {:>7}: worst error {worst:.2e}·max(|ŷ|, 1)", k.isa().name());
}

/// The rows known to break `E[x²] − E[x]²`, on every ISA, through `layer_norm` and
/// through `add_layer_norm` (as `x + 0`, with and without the `h` output).
#[test]
fn hard_rows() {
    let mut g = Normal(0x9e37_79b9_7f4a_7c15);
    let big: Vec<f32> = (0..4096).map(|_| (1e7 + g.sample()) as f32).collect();
    let huge: Vec<f32> = (0..1000)
        .map(|j| if (j * 7) % 3 == 0 { 1e30 } else { -1e30 } * (1.0 + j as f32 / 1000.0))
        .collect();
    let mut nan_row: Vec<f32> = (0..300).map(|j| j as f32).collect();
    nan_row[123] = f32::NAN;
    let cases: Vec<(&str, Vec<f32>, usize)> = vec![
        (
            "[40000, 40001, 40002, 40003]",
            vec![40000.0, 40001.0, 40002.0, 40003.0],
            4,
        ),
        ("1e7 + N(0, 1), d = 4096", big, 4096),
        ("±1e30, d = 1000", huge, 1000),
        (
            "NaN row and a finite one",
            [nan_row.clone(), nan_row.iter().map(|v| v.min(5.0)).collect()].concat(),
            300,
        ),
    ];
    for k in all_kernels() {
        for (name, x, d) in &cases {
            let mut y = vec![0.0; x.len()];
            k.layer_norm(x, &mut y, *d, &LayerNormOptions::default()).unwrap();
            assert_hard(&k, name, x, *d, &y);
            let zero = vec![0.0; x.len()];
            let mut h = vec![0.0; x.len()];
            let mut y2 = vec![0.0; x.len()];
            k.add_layer_norm(
                x,
                &zero,
                &mut y2,
                Some(&mut h),
                *d,
                &Residual::default(),
                &Default::default(),
            )
            .unwrap();
            assert!(h.iter().zip(x).all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan()));
            // The add forms gather their statistics by Welford chunks, `layer_norm` two-pass:
            // not the same bits, each held to the same bound.
            assert_hard(&k, name, x, *d, &y2);
        }
        if let Some(nan) = cases.iter().find(|c| c.0.starts_with("NaN")) {
            let mut y = vec![0.0; nan.1.len()];
            let (mut mean, mut rstd) = (vec![0.0; 2], vec![0.0; 2]);
            let s = RowStats {
                mean: Some(&mut mean),
                rstd: Some(&mut rstd),
            };
            k.layer_norm_with_stats(&nan.1, &mut y, 300, &Default::default(), s)
                .unwrap();
            assert!(y[..300].iter().all(|v| v.is_nan()) && y[300..].iter().all(|v| v.is_finite()));
            assert!(mean[0].is_nan() && rstd[0].is_nan() && mean[1].is_finite());
        }
    }
}

/// A kernel called on one row: `(x, r, y)`.
type RowCall<'a> = dyn Fn(&[f32], &[f32], &mut [f32]) + 'a;

/// Bitwise equality, NaN matching NaN.
fn same_bits_f32(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan())
}

/// The inputs of [`every_form`]: rows `x` of length `d`, the residual branch `r` and its bias.
struct Rows<'a> {
    x: &'a [f32],
    r: &'a [f32],
    bias: &'a [f32],
    d: usize,
}

/// Runs LayerNorm on `k` in its every mode (out of place, in place, with statistics) and
/// Add & LayerNorm (α = 0.75, with the bias) in its every mode, checks each against the oracle
/// (and the `h` output bit for bit), and hands each `y` to `also(add, mode, y)`.
fn every_form(k: &Kernels, what: &str, rows: &Rows, opts: &LayerNormOptions, mut also: impl FnMut(bool, u8, &[f32])) {
    let Rows { x, r, bias, d } = *rows;
    for mode in 0..3 {
        let c = LnCase {
            x: x.to_vec(),
            d,
            gamma: opts.gamma.map(<[f32]>::to_vec),
            beta: opts.beta.map(<[f32]>::to_vec),
            eps: opts.eps,
            offset: 3,
            mode,
        };
        let (y, stats) = run_layer_norm(k, &c);
        check_ln(k, &format!("layer_norm {what}"), x, d, opts, &y, stats.as_ref()).unwrap();
        also(false, mode, &y);
    }
    let h = reference::residual(x, r, Some(bias), 0.75, d);
    for mode in 0..4 {
        let c = AddCase {
            x: x.to_vec(),
            r: r.to_vec(),
            bias: Some(bias.to_vec()),
            alpha: 0.75,
            d,
            gamma: opts.gamma.map(<[f32]>::to_vec),
            beta: opts.beta.map(<[f32]>::to_vec),
            eps: opts.eps,
            mode,
        };
        let (y, got_h, stats) = run_add(k, &c, false);
        if let Some(got_h) = &got_h {
            check_h(k, &h, got_h).unwrap();
        }
        check_ln(k, &format!("add_layer_norm {what}"), &h, d, opts, &y, stats.as_ref()).unwrap();
        also(true, mode, &y);
    }
}

/// RMSNorm of the rows of `x` with the gain `gamma` (ε = 10⁻⁶), and LayerNorm of them in f16
/// with `gamma`, `beta` (ε = 10⁻⁵), on `k`, each checked against the oracle: returns the
/// RMSNorm output, the f16 output and the f16 input.
fn rms_and_f16(
    k: &Kernels,
    x: &[f32],
    d: usize,
    gamma: &[f32],
    beta: &[f32],
) -> (Vec<f32>, Vec<half::f16>, Vec<half::f16>) {
    let rn = RmsNormOptions {
        gain: Some(gamma),
        eps: 1e-6,
    };
    let mut y = vec![0.0; x.len()];
    k.rms_norm(x, &mut y, d, &rn).unwrap();
    reference::check_rms_norm(x, d, Some(gamma), 1e-6, &y).unwrap();
    let opts = LayerNormOptions {
        gamma: Some(gamma),
        beta: Some(beta),
        eps: 1e-5,
    };
    let halves: Vec<half::f16> = narrow(x);
    let mut y16 = vec![half::f16::ZERO; x.len()];
    k.layer_norm(&halves, &mut y16, d, &opts).unwrap();
    reference::check_layer_norm(&halves, d, opts.gamma, opts.beta, opts.eps, &y16, None, None)
        .unwrap_or_else(|m| panic!("{} f16 layer_norm d {d}: {m}", k.isa()));
    (y, y16, halves)
}

/// Calls of long rows beyond L2 (`d ≥ 4096`, at least 2¹⁸ elements): the row loop with each
/// normalize sweep behind the next row's statistics (the next row prefetched where the call
/// is beyond the last-level cache, or where its size is unknown). Every form,
/// on every ISA, with an odd number of rows, an odd row length, and rows taking the f64 path (a
/// NaN, an f32 overflow) among them: within the bound of the oracle, and bit for bit what the
/// same rows give one at a time.
#[test]
fn long_rows_match_the_oracle_and_single_rows() {
    let mut g = Normal(0x2545_f491_4f6c_dd1d);
    for (d, rows) in [(4096usize, 64usize), (4097, 65)] {
        let n = d * rows;
        let MixedRows {
            x,
            r,
            gamma,
            beta,
            bias,
        } = mixed_rows(&mut g, d, rows, 5 * d + 17, 6);
        let by_row = |f: &RowCall| -> Vec<f32> {
            let mut y = vec![0.0; n];
            for row in 0..rows {
                let at = row * d..(row + 1) * d;
                f(&x[at.clone()], &r[at.clone()], &mut y[at]);
            }
            y
        };
        for k in all_kernels() {
            for (gm, bt) in [(true, true), (true, false), (false, true)] {
                let opts = LayerNormOptions {
                    gamma: gm.then_some(&gamma[..]),
                    beta: bt.then_some(&beta[..]),
                    eps: 1e-5,
                };
                let single = by_row(&|x, _, y| k.layer_norm(x, y, d, &opts).unwrap());
                let residual = Residual {
                    alpha: 0.75,
                    bias: Some(&bias),
                };
                let single_add = by_row(&|x, r, y| k.add_layer_norm(x, r, y, None, d, &residual, &opts).unwrap());
                let rows = Rows {
                    x: &x,
                    r: &r,
                    bias: &bias,
                    d,
                };
                every_form(&k, "long rows", &rows, &opts, |add, mode, y| {
                    let (name, single) = if add {
                        ("add_layer_norm", &single_add)
                    } else {
                        ("layer_norm", &single)
                    };
                    assert!(same_bits_f32(y, single), "{} {name} mode {mode} d {d}", k.isa());
                });
            }
            let (y, y16, halves) = rms_and_f16(&k, &x, d, &gamma, &beta);
            let rn = RmsNormOptions {
                gain: Some(&gamma),
                eps: 1e-6,
            };
            let single = by_row(&|x, _, y| k.rms_norm(x, y, d, &rn).unwrap());
            assert!(same_bits_f32(&y, &single), "{} rms_norm d {d}", k.isa());
            let opts = LayerNormOptions {
                gamma: Some(&gamma),
                beta: Some(&beta),
                eps: 1e-5,
            };
            let mut one = vec![half::f16::ZERO; d];
            for row in 0..rows {
                k.layer_norm(&halves[row * d..(row + 1) * d], &mut one, d, &opts)
                    .unwrap();
                assert!(
                    same_bits_f32(&wide(&one), &wide(&y16[row * d..(row + 1) * d])),
                    "{} f16 layer_norm row {row} d {d}",
                    k.isa()
                );
            }
        }
    }
}

/// Many short rows, among them rows that are hard (`10⁷ + N(0, 1)`, values 40000 apart by 1,
/// constant) or take the f64 path (a NaN, ±10³⁰), which must not disturb their neighbours:
/// every row length around the vector widths, the steps and chunks (64 values) and the
/// tail of fewer than a step, up to 257, with 37 rows, against the oracle, through every form.
#[test]
fn short_rows_with_hard_rows_among_them() {
    let mut g = Normal(0x5851_f42d_4c95_7f2d);
    let count = 37;
    for d in [
        1usize, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 128, 129, 191, 255, 256, 257,
    ] {
        let n = d * count;
        let mut x: Vec<f32> = (0..n).map(|_| (2.0 * g.sample() - 1.0) as f32).collect();
        for j in 0..d {
            x[d + j] = (1e7 + g.sample()) as f32;
            x[3 * d + j] = 40000.0 + (j % 4) as f32;
            x[4 * d + j] = 1234.0;
            x[20 * d + j] = if j % 3 == 0 { 1e30 } else { -1e30 };
        }
        x[9 * d + d / 2] = f32::NAN;
        let r: Vec<f32> = (0..n).map(|_| g.sample() as f32).collect();
        let param = |g: &mut Normal, scale: f64| -> Vec<f32> { (0..d).map(|_| (scale * g.sample()) as f32).collect() };
        let (gamma, beta, bias) = (param(&mut g, 1.0), param(&mut g, 0.5), param(&mut g, 0.1));
        for k in all_kernels() {
            for (gm, bt) in [(true, true), (false, false)] {
                let opts = LayerNormOptions {
                    gamma: gm.then_some(&gamma[..]),
                    beta: bt.then_some(&beta[..]),
                    eps: 1e-5,
                };
                let rows = Rows {
                    x: &x,
                    r: &r,
                    bias: &bias,
                    d,
                };
                every_form(&k, "short rows", &rows, &opts, |_, _, _| {});
                let h = reference::residual(&x, &r, Some(&bias), 0.75, d);
                let residual = Residual {
                    alpha: 0.75,
                    bias: Some(&bias),
                };
                let rn = RmsNormOptions {
                    gain: opts.gamma,
                    eps: 1e-5,
                };
                let mut y = vec![0.0; n];
                k.add_rms_norm(&x, &r, &mut y, None, d, &residual, &rn).unwrap();
                reference::check_rms_norm(&h, d, opts.gamma, 1e-5, &y).unwrap();
            }
            rms_and_f16(&k, &x, d, &gamma, &beta);
        }
    }
}

/// Runs the add case `all` and its first `few` rows alone, through both add forms
/// (LayerNorm and RMSNorm), and asserts the same bits on those rows: `y`, `h` and the
/// statistics where the mode gives them.
fn assert_first_rows_alone(k: &Kernels, all: &AddCase, few: usize) {
    let d = all.d;
    let part = AddCase {
        x: all.x[..few * d].to_vec(),
        r: all.r[..few * d].to_vec(),
        ..all.clone()
    };
    for rms in [false, true] {
        let form = format!("{} add (rms {rms}) mode {} d {d}", k.isa(), all.mode);
        let (big, big_h, big_stats) = run_add(k, all, rms);
        let (small, small_h, small_stats) = run_add(k, &part, rms);
        assert!(same_bits_f32(&big[..few * d], &small), "{form}");
        if let (Some(big_h), Some(small_h)) = (big_h, small_h) {
            assert!(same_bits_f32(&big_h[..few * d], &small_h), "{form}: h");
        }
        if let (Some(big), Some(small)) = (big_stats, small_stats) {
            assert!(same_bits_f32(&big.0[..few], &small.0), "{form}: mean");
            assert!(same_bits_f32(&big.1[..few], &small.1), "{form}: rstd");
        }
    }
}

/// The last-level cache the tests of the paths chosen by cache size assume
/// ([`Kernels::with_cache_size`]): small, so that a call beyond it takes little time and
/// memory whatever the machine's cache (a virtual machine may report hundreds of MiB).
const TEST_CACHE: usize = 1 << 20;

/// The f32 add forms with short rows go their own way in calls that fit the last-level cache
/// (for LayerNorm, groups of rows whose first pass builds `h` where the ISA holds the rows in
/// registers; for RMSNorm, the add for a block of rows, then the plain row loop over it), and
/// through the fused row loop beyond it. Both must give the same bits: the rows of a call
/// beyond the cache are held against the same rows run alone, with the kernels assuming a
/// cache of [`TEST_CACHE`].
#[test]
fn add_forms_by_blocks_match_the_row_loop_bit_for_bit() {
    let llc = TEST_CACHE;
    let mut g = Normal(0x2545_f491_4f6c_dd1d);
    for d in [13usize, 64, 128] {
        // Beyond the cache with three operands (the smallest working set of the add forms).
        let rows = llc / (3 * 4 * d) + 1;
        let few = 300.min(rows);
        let MixedRows {
            x,
            r,
            gamma,
            beta,
            bias,
        } = mixed_rows(&mut g, d, rows, d + d / 2, 2);
        for k in all_kernels().into_iter().map(|k| k.with_cache_size(llc)) {
            for mode in 0..4 {
                let all = AddCase {
                    x: x.clone(),
                    r: r.clone(),
                    bias: (mode != 1).then(|| bias.clone()),
                    alpha: 0.75,
                    d,
                    gamma: Some(gamma.clone()),
                    beta: Some(beta.clone()),
                    eps: 1e-5,
                    mode,
                };
                assert_first_rows_alone(&k, &all, few);
            }
        }
    }
}

/// Rows of at least 512 values prefetch the next row's inputs only in calls beyond the
/// last-level cache (in cache the hardware prefetchers do better). A prefetch changes no
/// value: the rows of such a call, through every form on every ISA (in place, LayerNorm's one
/// operand stays within the cache at this size), with rows taking the f64 path (a NaN,
/// ±10³⁰) among them and a row length with a tail, are held bit for bit against the same rows
/// in a call within the cache, with the kernels assuming a cache of [`TEST_CACHE`].
#[test]
fn prefetching_rows_match_rows_in_cache_bit_for_bit() {
    let llc = TEST_CACHE;
    let mut g = Normal(0x6a09_e667_f3bc_c909);
    for d in [1024usize, 1031] {
        // Beyond the cache with two operands (`x` and `y`: the smallest working set).
        let rows = llc / (2 * 4 * d) + 1;
        let m = mixed_rows(&mut g, d, rows, 7 * d + 3, 11);
        for k in all_kernels().into_iter().map(|k| k.with_cache_size(llc)) {
            assert_mixed_rows_alone(&k, &m, d, 0.75, 40);
        }
    }
}

/// The first `few` rows of `m` (of `d` values) through every form of `layer_norm` and of
/// `add_layer_norm` (with `m.r`, `m.bias` and the scale `alpha`), held bit for bit against the
/// same rows in a call of their own.
fn assert_mixed_rows_alone(k: &Kernels, m: &MixedRows, d: usize, alpha: f32, few: usize) {
    assert_layer_norm_rows_alone(k, &m.x, d, &m.gamma, &m.beta, few);
    let add = AddCase {
        x: m.x.clone(),
        r: m.r.clone(),
        bias: Some(m.bias.clone()),
        alpha,
        d,
        gamma: Some(m.gamma.clone()),
        beta: Some(m.beta.clone()),
        eps: 1e-5,
        mode: 0,
    };
    for mode in 0..4 {
        assert_first_rows_alone(k, &AddCase { mode, ..add.clone() }, few);
    }
}

/// LayerNorm and RMSNorm calls with a working set of at least four times the level-2 cache
/// fetch `y` for ownership ahead of their stores on AVX2 and AVX-512, up to two spans past the
/// row (and past the call, for its last rows). A hint, never a value: the rows of such a call
/// (short rows, a row length of whole chunks and one with a tail, rows taking the f64 path
/// among them) are held bit for bit against the same rows in a small call, through every form
/// of `layer_norm` and `add_layer_norm`, `rms_norm`, and `layer_norm` in f16 and bf16, on
/// every ISA.
#[test]
fn rows_prefetching_y_match_rows_in_cache_bit_for_bit() {
    let l2 = kernels::level2_cache().unwrap_or(2 << 20);
    let mut g = Normal(0x3c6e_f372_fe94_f82b);
    for d in [64usize, 1024, 4099] {
        // `x` and `y`: the smallest working set.
        let rows = 4 * l2 / (2 * 4 * d) + 1;
        let few = 12;
        let m = mixed_rows(&mut g, d, rows, 5 * d + 7, 9);
        let rn = RmsNormOptions {
            gain: Some(&m.gamma),
            eps: 1e-5,
        };
        for k in all_kernels() {
            assert_mixed_rows_alone(&k, &m, d, 1.25, few);
            let mut all = vec![0.0; m.x.len()];
            k.rms_norm(&m.x, &mut all, d, &rn).unwrap();
            let mut part = vec![0.0; few * d];
            k.rms_norm(&m.x[..few * d], &mut part, d, &rn).unwrap();
            assert!(same_bits_f32(&all[..few * d], &part), "{} rms_norm d {d}", k.isa());
            half_rows_alone::<half::f16>(&k, &m, d, few);
            half_rows_alone::<half::bf16>(&k, &m, d, few);
        }
    }
}

/// LayerNorm in `H` of the rows of `m` twice over (narrowed: as many bytes as the f32 rows,
/// so past the same size) and of their first `few` rows alone: the same bits on those rows.
fn half_rows_alone<H: Half>(k: &Kernels, m: &MixedRows, d: usize, few: usize) {
    let opts = LayerNormOptions {
        gamma: Some(&m.gamma),
        beta: Some(&m.beta),
        eps: 1e-5,
    };
    let x: Vec<H> = narrow(&[m.x.as_slice(), m.x.as_slice()].concat());
    let mut all = vec![<H as kernels::Element>::from_f32(0.0); x.len()];
    k.layer_norm(&x, &mut all, d, &opts).unwrap();
    let mut part = vec![<H as kernels::Element>::from_f32(0.0); few * d];
    k.layer_norm(&x[..few * d], &mut part, d, &opts).unwrap();
    // Widened exactly: equal values are equal bits (a NaN matching any NaN, as elsewhere).
    let (all, part) = (wide(&all[..few * d]), wide(&part));
    let name = std::any::type_name::<H>();
    assert!(same_bits_f32(&all, &part), "{} layer_norm {name} d {d}", k.isa());
}

/// LayerNorm's short rows go by groups of rows in calls of at most 1 MiB (`x` and `y`) and
/// through the row loop beyond; both must give the same bits. The rows of a call beyond
/// (every short row length of AVX-512 and AVX2, with and without a tail, rows that fill a
/// block of 4, 8 or 16 vectors exactly on each ISA, and rows taking the f64 path among them) are
/// held against the same rows in a call of 60 rows (three whole groups of 16, pipelined where
/// the rows fill their block, and a short fourth), through every form (in place, with the
/// statistics), on every ISA.
#[test]
fn short_rows_by_groups_match_the_row_loop_bit_for_bit() {
    let mut g = Normal(0x1f83_d9ab_fb41_bd6b);
    for d in [1usize, 7, 16, 32, 33, 64, 100, 128, 129, 200, 256] {
        let rows = (1 << 20) / (2 * 4 * d) + 1;
        let few = 60;
        let MixedRows { x, gamma, beta, .. } = mixed_rows(&mut g, d, rows, 7 * d + d / 2, 11);
        for k in all_kernels() {
            assert_layer_norm_rows_alone(&k, &x, d, &gamma, &beta, few);
        }
    }
}

/// LayerNorm's long rows (`d ≥ 4096`) go by columns in calls of at most 1 MiB (all operands,
/// on AVX-512) and through the row loop beyond, plain and add forms; both must give the same
/// bits. The first rows of a call beyond (for `layer_norm` 20 rows, two groups of columns, the
/// second one short, in f32, f16 and bf16; for `add_layer_norm` as many as 1 MiB holds with
/// four operands; a row with a NaN and one of ±10³⁰, which take the f64 path, among them) are
/// held against the same rows alone, through every form, on every ISA, with rows that fill
/// their vectors and rows with a tail.
#[test]
fn long_rows_by_columns_match_the_row_loop_bit_for_bit() {
    let mut g = Normal(0x6a09_e667_f3bc_c908);
    for d in [4096usize, 5000] {
        let rows = (1 << 20) / (2 * 4 * d) + 1;
        let m = mixed_rows(&mut g, d, rows, 3 * d + d / 2, 9);
        let add = AddCase {
            x: m.x.clone(),
            r: m.r.clone(),
            bias: Some(m.bias.clone()),
            alpha: 0.75,
            d,
            gamma: Some(m.gamma.clone()),
            beta: Some(m.beta.clone()),
            eps: 1e-5,
            mode: 0,
        };
        let few_add = (1 << 20) / (4 * 4 * d);
        for k in all_kernels() {
            assert_layer_norm_rows_alone(&k, &m.x, d, &m.gamma, &m.beta, 20);
            half_rows_alone::<half::f16>(&k, &m, d, 20);
            half_rows_alone::<half::bf16>(&k, &m, d, 20);
            for mode in 0..4 {
                assert_first_rows_alone(&k, &AddCase { mode, ..add.clone() }, few_add);
            }
        }
    }
}

/// LayerNorm of the rows `x` (of `d` values) and of their first `few` rows alone, through
/// every form (out of place, in place, with the statistics): asserts the same bits on those
/// rows.
fn assert_layer_norm_rows_alone(k: &Kernels, x: &[f32], d: usize, gamma: &[f32], beta: &[f32], few: usize) {
    for mode in 0..3 {
        let all = LnCase {
            x: x.to_vec(),
            d,
            gamma: Some(gamma.to_vec()),
            beta: Some(beta.to_vec()),
            eps: 1e-5,
            offset: 1,
            mode,
        };
        let part = LnCase {
            x: x[..few * d].to_vec(),
            ..all.clone()
        };
        let form = format!("{} layer_norm mode {mode} d {d}", k.isa());
        let (big, big_stats) = run_layer_norm(k, &all);
        let (small, small_stats) = run_layer_norm(k, &part);
        assert!(same_bits_f32(&big[..few * d], &small), "{form}");
        if let (Some(big), Some(small)) = (big_stats, small_stats) {
            assert!(same_bits_f32(&big.0[..few], &small.0), "{form}: mean");
            assert!(same_bits_f32(&big.1[..few], &small.1), "{form}: rstd");
        }
    }
}

/// Streaming stores change where `y` goes, never a bit of it: every form, on every ISA, with
/// rows long enough to stream (`d ≥ 512`), `y` at several alignments, long rows beyond L2
/// (`d ≥ 4096`, 2¹⁸ elements), and rows taking the f64 path (a NaN, ±10³⁰) among them.
#[test]
fn streaming_stores_change_no_bit() {
    let mut g = Normal(0x9e37_79b9_7f4a_7c15);
    for (d, rows) in [
        (512usize, 3usize),
        (515, 4),
        (1000, 5),
        (1024, 3),
        (4096, 64),
        (4097, 65),
    ] {
        let MixedRows {
            x,
            r,
            gamma,
            beta,
            bias,
        } = mixed_rows(&mut g, d, rows, d + 7, 2);
        for k in all_kernels() {
            let (cached, streamed) = (k.with_stores(Stores::Cached), k.with_stores(Stores::Streaming));
            let what = |form: &str| format!("{} {form} d {d}", k.isa());
            for (offset, mode) in [(0, 0), (1, 0), (4, 1), (9, 2), (2, 0)] {
                let c = LnCase {
                    x: x.clone(),
                    d,
                    gamma: Some(gamma.clone()),
                    beta: (offset != 2).then(|| beta.clone()),
                    eps: 1e-5,
                    offset,
                    mode,
                };
                let (want, want_stats) = run_layer_norm(&cached, &c);
                let (got, got_stats) = run_layer_norm(&streamed, &c);
                let form = what(&format!("layer_norm offset {offset} mode {mode}"));
                assert!(same_bits_f32(&got, &want), "{form}");
                assert_eq!(format!("{got_stats:?}"), format!("{want_stats:?}"), "{form}");
            }
            for mode in 0..4 {
                let c = AddCase {
                    x: x.clone(),
                    r: r.clone(),
                    bias: Some(bias.clone()),
                    alpha: 0.75,
                    d,
                    gamma: Some(gamma.clone()),
                    beta: Some(beta.clone()),
                    eps: 1e-5,
                    mode,
                };
                for rms in [false, true] {
                    let (want, want_h, want_stats) = run_add(&cached, &c, rms);
                    let (got, got_h, got_stats) = run_add(&streamed, &c, rms);
                    let form = what(&format!("add (rms {rms}) mode {mode}"));
                    assert!(same_bits_f32(&got, &want), "{form}");
                    assert_eq!(got_h.is_some(), want_h.is_some(), "{form}");
                    if let (Some(got_h), Some(want_h)) = (got_h, want_h) {
                        assert!(same_bits_f32(&got_h, &want_h), "{form}: h");
                    }
                    assert_eq!(format!("{got_stats:?}"), format!("{want_stats:?}"), "{form}");
                }
            }
            let (y, _, _) = rms_and_f16(&streamed, &x, d, &gamma, &beta);
            let (want, _, _) = rms_and_f16(&cached, &x, d, &gamma, &beta);
            assert!(same_bits_f32(&y, &want), "{}", what("rms_norm"));
        }
    }
}

/// A constant row of 1234.0 (d = 256) gives `y = β` exactly, whatever `γ`, on every form.
#[test]
fn constant_row_gives_beta() {
    let d = 256;
    let x = vec![1234.0f32; 2 * d];
    let gamma: Vec<f32> = (0..d).map(|j| 0.5 + j as f32 / 100.0).collect();
    let beta: Vec<f32> = (0..d).map(|j| j as f32 - 100.5).collect();
    let opts = LayerNormOptions {
        gamma: Some(&gamma),
        beta: Some(&beta),
        eps: 1e-5,
    };
    let want: Vec<f32> = [beta.clone(), beta.clone()].concat();
    for k in all_kernels() {
        let mut y = vec![0.0; 2 * d];
        k.layer_norm(&x, &mut y, d, &opts).unwrap();
        assert_eq!(y, want, "{}", k.isa());
        let r: Vec<f32> = vec![234.0; 2 * d];
        k.add_layer_norm(&vec![1000.0; 2 * d], &r, &mut y, None, d, &Residual::default(), &opts)
            .unwrap();
        assert_eq!(y, want, "{}", k.isa());
        let mut y = vec![0.0; 2 * d];
        let (mut rm, mut rv) = (vec![0.0; 2], vec![0.0; 2]);
        let bn = BatchNormOptions {
            gamma: Some(&gamma[..2]),
            beta: Some(&beta[..2]),
            ..Default::default()
        };
        k.batch_norm_train(&x, &mut y, [2, 2, d / 2], &mut rm, &mut rv, &bn)
            .unwrap();
        assert!(y[..d / 2].iter().all(|&v| v == beta[0]) && y[d / 2..d].iter().all(|&v| v == beta[1]));
        assert_eq!((rm[0], rv[0]), (123.4, 0.0));
        let mut y = vec![0.0; 2 * d];
        k.batch_norm_train(&x, &mut y, [d, 2, 1], &mut rm, &mut rv, &bn)
            .unwrap();
        assert!(y.iter().enumerate().all(|(j, &v)| v == beta[j % 2]));
    }
}

/// Ordinary rows, measured: the errors are far inside the bound.
#[test]
fn ordinary_rows_measured() {
    let mut g = Normal(7);
    let d = 1000;
    let x: Vec<f32> = (0..64 * d).map(|_| (g.sample() * 3.0 + 1.0) as f32).collect();
    let gamma: Vec<f32> = (0..d).map(|_| g.sample() as f32).collect();
    let beta: Vec<f32> = (0..d).map(|_| g.sample() as f32).collect();
    let opts = LayerNormOptions {
        gamma: Some(&gamma),
        beta: Some(&beta),
        eps: 1e-5,
    };
    let exact = reference::layer_norm(&x, d, opts.gamma, opts.beta, opts.eps);
    for k in all_kernels() {
        let mut y = vec![0.0; x.len()];
        k.layer_norm(&x, &mut y, d, &opts).unwrap();
        let ratio = reference::check_layer_norm(&x, d, opts.gamma, opts.beta, opts.eps, &y, None, None).unwrap();
        // In units of u·(|ŷ| + |γ|): the final rounding, and γ times the normalized value's.
        let worst = (0..x.len())
            .map(|j| {
                let scale = exact.y[j].abs() + (gamma[j % d] as f64).abs();
                (y[j] as f64 - exact.y[j]).abs() / scale / reference::U
            })
            .fold(0.0, f64::max);
        eprintln!(
            "layer_norm N(1, 9), d = {d} {:>7}: worst error/bound {ratio:.4}, worst error {worst:.2} u·(|ŷ| + |γ|)",
            k.isa().name()
        );
    }
}

#[test]
fn errors_name_the_argument() {
    let k = Kernels::best();
    let x = [1.0f32; 8];
    let mut y = [0.0f32; 8];
    let ln = LayerNormOptions::default();
    // Empty inputs are no-ops.
    k.layer_norm::<f32>(&[], &mut [], 0, &ln).unwrap();
    k.layer_norm::<f32>(&[], &mut [], 4, &ln).unwrap();
    k.rms_norm_inplace::<f32>(&mut [], 3, &Default::default()).unwrap();

    for eps in [0.0, -1e-5, f32::NAN, f32::INFINITY] {
        let bad = LayerNormOptions { eps, ..ln };
        let err = k.layer_norm(&x, &mut y, 4, &bad).unwrap_err();
        assert!(matches!(err, Error::Param { arg: "eps", .. }), "{err}");
        let err = k
            .add_layer_norm(&x, &x, &mut y, None, 4, &Residual::default(), &bad)
            .unwrap_err();
        assert_eq!(err.arg(), Some("eps"));
        let err = k
            .rms_norm(&x, &mut y, 4, &RmsNormOptions { gain: None, eps })
            .unwrap_err();
        assert_eq!(err.arg(), Some("eps"));
        let bn = BatchNormOptions {
            eps,
            ..Default::default()
        };
        let err = k
            .batch_norm(&x, &mut y, [2, 2, 2], &[0.0; 2], &[1.0; 2], &bn)
            .unwrap_err();
        assert_eq!(err.arg(), Some("eps"));
    }
    let err = k.layer_norm(&x, &mut y, 3, &ln).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`x`: expected a length that is a multiple of d = 3, got 8"
    );
    assert_eq!(k.layer_norm(&x, &mut y, 0, &ln).unwrap_err().arg(), Some("d"));
    let err = k.layer_norm(&x, &mut y[..7], 4, &ln).unwrap_err();
    assert_eq!(err.to_string(), "`out`: expected length 8 (as x), got 7");
    let g3 = [1.0; 3];
    let err = k
        .layer_norm(&x, &mut y, 4, &LayerNormOptions { gamma: Some(&g3), ..ln })
        .unwrap_err();
    assert_eq!(err.to_string(), "`gamma`: expected length 4 (d), got 3");
    let err = k
        .layer_norm(&x, &mut y, 4, &LayerNormOptions { beta: Some(&g3), ..ln })
        .unwrap_err();
    assert_eq!(err.to_string(), "`beta`: expected length 4 (d), got 3");
    let mut m1 = [0.0; 1];
    let err = k
        .layer_norm_with_stats(
            &x,
            &mut y,
            4,
            &ln,
            RowStats {
                mean: Some(&mut m1),
                rstd: None,
            },
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "`mean`: expected length 2 (rows), got 1");
    let err = k
        .layer_norm_with_stats(
            &x,
            &mut y,
            4,
            &ln,
            RowStats {
                mean: None,
                rstd: Some(&mut m1),
            },
        )
        .unwrap_err();
    assert_eq!(err.arg(), Some("rstd"));

    let res = Residual::default();
    let err = k.add_layer_norm(&x, &x[..4], &mut y, None, 4, &res, &ln).unwrap_err();
    assert_eq!(err.to_string(), "`r`: expected length 8 (as x), got 4");
    let mut h = [0.0; 9];
    let err = k
        .add_layer_norm(&x, &x, &mut y, Some(&mut h), 4, &res, &ln)
        .unwrap_err();
    assert_eq!(err.to_string(), "`h`: expected length 8 (as x), got 9");
    let bad_bias = Residual { bias: Some(&g3), ..res };
    let err = k
        .add_rms_norm(&x, &x, &mut y, None, 4, &bad_bias, &Default::default())
        .unwrap_err();
    assert_eq!(err.to_string(), "`bias`: expected length 4 (d), got 3");
    let err = k
        .add_layer_norm(
            &x,
            &x,
            &mut y,
            None,
            4,
            &Residual {
                alpha: f32::NAN,
                bias: None,
            },
            &ln,
        )
        .unwrap_err();
    assert!(matches!(err, Error::Param { arg: "alpha", .. }));
    let err = k
        .rms_norm(
            &x,
            &mut y,
            4,
            &RmsNormOptions {
                gain: Some(&g3),
                eps: 1e-6,
            },
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "`gain`: expected length 4 (d), got 3");

    let bn = BatchNormOptions::default();
    let err = k
        .batch_norm(&x, &mut y, [2, 2, 3], &[0.0; 2], &[1.0; 2], &bn)
        .unwrap_err();
    assert_eq!(err.to_string(), "`x`: expected length 12 (N·C·S), got 8");
    let err = k
        .batch_norm(&x, &mut y, [2, 2, 2], &[0.0; 3], &[1.0; 2], &bn)
        .unwrap_err();
    assert_eq!(err.to_string(), "`running_mean`: expected length 2 (C), got 3");
    let err = k
        .batch_norm(&x, &mut y, [2, 2, 2], &[0.0; 2], &[1.0; 1], &bn)
        .unwrap_err();
    assert_eq!(err.arg(), Some("running_var"));
    let err = k
        .batch_norm(
            &x,
            &mut y,
            [2, 2, 2],
            &[0.0; 2],
            &[1.0; 2],
            &BatchNormOptions { gamma: Some(&g3), ..bn },
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "`gamma`: expected length 2 (C), got 3");
    let err = k
        .batch_norm(&x, &mut y, [usize::MAX, 2, 2], &[0.0; 2], &[1.0; 2], &bn)
        .unwrap_err();
    assert_eq!(err.arg(), Some("shape"));
    let (mut rm, mut rv) = ([0.0; 8], [1.0; 8]);
    let err = k
        .batch_norm_train(&x, &mut y, [1, 8, 1], &mut rm, &mut rv, &bn)
        .unwrap_err();
    assert_eq!(err.arg(), Some("shape"));
    for momentum in [-0.1, 1.5, f32::NAN] {
        let err = k
            .batch_norm_train(
                &x,
                &mut y,
                [2, 2, 2],
                &mut rm[..2],
                &mut rv[..2],
                &BatchNormOptions { momentum, ..bn },
            )
            .unwrap_err();
        assert!(matches!(err, Error::Param { arg: "momentum", .. }), "{err}");
    }
}

#[test]
fn free_functions_use_the_detected_isa() {
    let x: Vec<f32> = (0..40).map(|j| (j as f32).sin()).collect();
    let r: Vec<f32> = (0..40).map(|j| (j as f32).cos()).collect();
    let k = Kernels::detected().unwrap();
    let (mut a, mut b) = (vec![0.0; 40], vec![0.0; 40]);
    kernels::layer_norm(&x, &mut a, 20, &Default::default()).unwrap();
    k.layer_norm(&x, &mut b, 20, &Default::default()).unwrap();
    assert_eq!(a, b);
    kernels::add_rms_norm(&x, &r, &mut a, None, 10, &Residual::default(), &Default::default()).unwrap();
    k.add_rms_norm(&x, &r, &mut b, None, 10, &Residual::default(), &Default::default())
        .unwrap();
    assert_eq!(a, b);
    let mut c = x.clone();
    kernels::rms_norm_inplace(&mut c, 8, &Default::default()).unwrap();
    kernels::rms_norm(&x, &mut a, 8, &Default::default()).unwrap();
    assert_eq!(a, c);
}

/// Regression (fuzz): a folded BatchNorm scale `γ/√(v + ε)` below 2⁻¹²⁶ is rounded absolutely
/// (2⁻¹⁵⁰), and `|x − μ|` near 10³⁸ carries that into `y`; the bound has a term for it.
#[test]
fn batch_norm_with_a_subnormal_folded_scale() {
    let x = [4.2537e37f32, -1.0e37, 3.0];
    let (mean, var) = ([1.0855e21f32], [4.2537e37f32]);
    let (gamma, beta) = ([-4.172e-21f32], [-6.58e-21f32]);
    let opts = BatchNormOptions {
        gamma: Some(&gamma),
        beta: Some(&beta),
        eps: 1.4157e21,
        ..Default::default()
    };
    let scale = gamma[0] as f64 / (var[0] as f64 + opts.eps as f64).sqrt();
    assert!(
        scale.abs() < f32::MIN_POSITIVE as f64,
        "the case needs a subnormal scale: {scale:e}"
    );
    for k in all_kernels() {
        let mut y = [0.0; 3];
        k.batch_norm(&x, &mut y, [3, 1, 1], &mean, &var, &opts).unwrap();
        reference::check_batch_norm(&x, [3, 1, 1], &mean, &var, Some(&gamma), Some(&beta), opts.eps, &y)
            .unwrap_or_else(|e| panic!("{}: {e:?}", k.isa()));
    }
}

/// More channels than inference folds at a time, segments shorter than a vector, of whole
/// vectors and in between: in place and out of place give the same bits, within the bound.
#[test]
fn batch_norm_over_many_channels() {
    let c = 600;
    let mean: Vec<f32> = (0..c).map(|i| (i % 13) as f32 * 0.25 - 1.5).collect();
    let var: Vec<f32> = (0..c).map(|i| 0.5 + (i % 7) as f32 * 0.3).collect();
    let gamma: Vec<f32> = (0..c).map(|i| 1.0 + (i % 5) as f32 * 0.1).collect();
    let beta: Vec<f32> = (0..c).map(|i| (i % 3) as f32 - 1.0).collect();
    let opts = BatchNormOptions {
        gamma: Some(&gamma),
        beta: Some(&beta),
        ..Default::default()
    };
    for sp in [3, 16, 23, 64, 70] {
        let shape = [3, c, sp];
        let x: Vec<f32> = (0..3 * c * sp).map(|i| ((i * 37) % 101) as f32 * 0.07 - 3.0).collect();
        for k in all_kernels() {
            let mut y = vec![0.0; x.len()];
            k.batch_norm(&x, &mut y, shape, &mean, &var, &opts).unwrap();
            let mut z = x.clone();
            k.batch_norm_inplace(&mut z, shape, &mean, &var, &opts).unwrap();
            assert!(
                y.iter().zip(&z).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{} S = {sp}: in place differs",
                k.isa()
            );
            reference::check_batch_norm(&x, shape, &mean, &var, Some(&gamma), Some(&beta), opts.eps, &y)
                .unwrap_or_else(|e| panic!("{} S = {sp}: {e:?}", k.isa()));
        }
    }
}

// ---- f16 and bf16 storage ----------------------------------------------------------------
//
// The same cases, with the tensors (`x`, `r`, `y`, `h`) stored as f16 or bf16 and the
// parameters in f32. The reference checks widen the inputs exactly and accept each half
// output iff it lies between the roundings to the type of the ends of the f32 bound; the `h`
// output must be the f32 residual (of the widened inputs) rounded once, bit for bit.

/// The output scales of the half cases: ordinary, beyond f16's range (γ large: `|y| > 65504`
/// while the inputs fit), f16 subnormals, and bf16 (= f32) subnormals. `β` is scaled alike so
/// that small outputs stay small.
fn half_scale() -> impl Strategy<Value = f32> {
    prop_oneof![3 => Just(1.0f32), 1 => Just(3.0e4f32), 1 => Just(1.0e-6f32), 1 => Just(1.0e-39f32)]
}

/// `p` (1 where absent) times `scale`; unchanged when `scale` is 1.
fn scaled(p: &Option<Vec<f32>>, d: usize, scale: f32) -> Option<Vec<f32>> {
    if scale == 1.0 {
        return p.clone();
    }
    Some(
        p.clone()
            .unwrap_or_else(|| vec![1.0; d])
            .iter()
            .map(|v| v * scale)
            .collect(),
    )
}

/// The bit-for-bit comparison of half outputs (NaN matching NaN).
fn same_bits<E: Half>(a: &[E], b: &[E]) -> bool {
    wide(a)
        .iter()
        .zip(&wide(b))
        .all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan())
}

fn half_layer_norm<E: Half>(k: &Kernels, c: &LnCase, scale: f32) -> Result<(), TestCaseError> {
    let x: Vec<E> = narrow(&c.x);
    let (gamma, beta) = (scaled(&c.gamma, c.d, scale), scaled(&c.beta, c.d, scale));
    let opts = LayerNormOptions {
        gamma: gamma.as_deref(),
        beta: beta.as_deref(),
        eps: c.eps,
    };
    let rows = x.len() / c.d;
    let zero = <E as kernels::Element>::from_f32(0.0);
    let mut buf = misaligned_as(&x, c.offset);
    let o = (c.offset * 7) % 16;
    let mut out = misaligned_as(&vec![zero; x.len()], o);
    let (mut mean, mut rstd) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    let y = match c.mode {
        1 => {
            k.layer_norm_inplace(&mut buf[c.offset..], c.d, &opts).unwrap();
            buf[c.offset..].to_vec()
        }
        2 => {
            let stats = RowStats {
                mean: Some(&mut mean),
                rstd: Some(&mut rstd),
            };
            k.layer_norm_with_stats(&buf[c.offset..], &mut out[o..], c.d, &opts, stats)
                .unwrap();
            out[o..].to_vec()
        }
        _ => {
            k.layer_norm(&buf[c.offset..], &mut out[o..], c.d, &opts).unwrap();
            out[o..].to_vec()
        }
    };
    prop_assert!(
        wide(&out[..o]).iter().all(|v| v.is_nan()),
        "wrote before the output slice"
    );
    let (m, r) = if c.mode == 2 {
        (Some(&mean[..]), Some(&rstd[..]))
    } else {
        (None, None)
    };
    reference::check_layer_norm(&x, c.d, opts.gamma, opts.beta, c.eps, &y, m, r).map_err(|m| {
        TestCaseError::fail(format!(
            "{} layer_norm isa {} d {} scale {scale:e}: {m}",
            <E as kernels::Element>::NAME,
            k.isa(),
            c.d
        ))
    })?;
    Ok(())
}

/// The add forms in `E`: `y` against the norm of the f32 `h` of the widened inputs, the `h`
/// output (modes 1–3) equal to that `h` rounded once, and `y` independent of the mode.
fn half_add<E: Half>(k: &Kernels, c: &AddCase, scale: f32, rms: bool) -> Result<(), TestCaseError> {
    let name = <E as kernels::Element>::NAME;
    let (x, r): (Vec<E>, Vec<E>) = (narrow(&c.x), narrow(&c.r));
    let h = reference::residual(&wide(&x), &wide(&r), c.bias.as_deref(), c.alpha, c.d);
    let want_h: Vec<E> = narrow(&h);
    let (gamma, beta) = (scaled(&c.gamma, c.d, scale), scaled(&c.beta, c.d, scale));
    let residual = Residual {
        alpha: c.alpha,
        bias: c.bias.as_deref(),
    };
    let ln = LayerNormOptions {
        gamma: gamma.as_deref(),
        beta: beta.as_deref(),
        eps: c.eps,
    };
    let rn = RmsNormOptions {
        gain: gamma.as_deref(),
        eps: c.eps,
    };
    let n = x.len();
    let rows = n / c.d;
    let zero = <E as kernels::Element>::from_f32(0.0);
    let run = |mode: u8| -> (Vec<E>, Option<Vec<E>>, Option<Stats>) {
        let mut yb = misaligned_as(&vec![zero; n], 3);
        let y = &mut yb[3..];
        let (mut got_h, mut stats) = (None, None);
        match mode {
            0 if rms => k.add_rms_norm(&x, &r, y, None, c.d, &residual, &rn).unwrap(),
            0 => k.add_layer_norm(&x, &r, y, None, c.d, &residual, &ln).unwrap(),
            2 => {
                let mut xb = misaligned_as(&x, 5);
                if rms {
                    k.add_rms_norm_inplace(&mut xb[5..], &r, y, c.d, &residual, &rn)
                        .unwrap();
                } else {
                    k.add_layer_norm_inplace(&mut xb[5..], &r, y, c.d, &residual, &ln)
                        .unwrap();
                }
                got_h = Some(xb[5..].to_vec());
            }
            _ => {
                let mut hb = vec![zero; n];
                if rms {
                    k.add_rms_norm(&x, &r, y, Some(&mut hb), c.d, &residual, &rn).unwrap();
                } else if mode == 3 {
                    let (mut mean, mut rstd) = (vec![0.0f32; rows], vec![0.0f32; rows]);
                    let s = RowStats {
                        mean: Some(&mut mean),
                        rstd: Some(&mut rstd),
                    };
                    k.add_layer_norm_with_stats(&x, &r, y, Some(&mut hb), c.d, &residual, &ln, s)
                        .unwrap();
                    stats = Some((mean, rstd));
                } else {
                    k.add_layer_norm(&x, &r, y, Some(&mut hb), c.d, &residual, &ln).unwrap();
                }
                got_h = Some(hb);
            }
        }
        assert!(
            wide(&yb[..3]).iter().all(|v| v.is_nan()),
            "wrote before the output slice"
        );
        (yb[3..].to_vec(), got_h, stats)
    };
    let mode = if rms { c.mode % 3 } else { c.mode };
    let (y, got_h, stats) = run(mode);
    if let Some(got_h) = &got_h {
        for (j, (a, b)) in wide(&want_h).iter().zip(&wide(got_h)).enumerate() {
            prop_assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{name} isa {}: h[{j}] = {b:e}, want {a:e} (f32 h {:e})",
                k.isa(),
                h[j]
            );
        }
    }
    let checked = if rms {
        reference::check_rms_norm(&h, c.d, rn.gain, c.eps, &y)
    } else {
        let (m, r) = (stats.as_ref().map(|s| &s.0[..]), stats.as_ref().map(|s| &s.1[..]));
        reference::check_layer_norm(&h, c.d, ln.gamma, ln.beta, c.eps, &y, m, r)
    };
    checked.map_err(|m| {
        TestCaseError::fail(format!(
            "{name} add (rms {rms}, mode {mode}) isa {} d {} scale {scale:e}: {m}",
            k.isa(),
            c.d
        ))
    })?;
    if mode != 0 {
        // Writing `h` (even over `x`) does not change `y`.
        prop_assert!(
            same_bits(&y, &run(0).0),
            "{name} isa {}: y depends on the h output",
            k.isa()
        );
    }
    Ok(())
}

fn half_rms_norm<E: Half>(k: &Kernels, c: &RmsCase, scale: f32) -> Result<(), TestCaseError> {
    let x: Vec<E> = narrow(&c.x);
    let gain = scaled(&c.gain, c.d, scale);
    let opts = RmsNormOptions {
        gain: gain.as_deref(),
        eps: c.eps,
    };
    let mut buf = misaligned_as(&x, c.offset);
    let y = if c.inplace {
        k.rms_norm_inplace(&mut buf[c.offset..], c.d, &opts).unwrap();
        buf[c.offset..].to_vec()
    } else {
        let mut out = vec![<E as kernels::Element>::from_f32(0.0); x.len()];
        k.rms_norm(&buf[c.offset..], &mut out, c.d, &opts).unwrap();
        out
    };
    reference::check_rms_norm(&x, c.d, opts.gain, c.eps, &y).map_err(|m| {
        TestCaseError::fail(format!(
            "{} rms_norm isa {} d {} scale {scale:e}: {m}",
            <E as kernels::Element>::NAME,
            k.isa(),
            c.d
        ))
    })?;
    Ok(())
}

fn half_batch_norm<E: Half>(k: &Kernels, c: &BnCase, scale: f32) -> Result<(), TestCaseError> {
    let name = <E as kernels::Element>::NAME;
    let x: Vec<E> = narrow(&c.x);
    let ch = c.shape[1];
    let (gamma, beta) = (scaled(&c.gamma, ch, scale), scaled(&c.beta, ch, scale));
    let opts = BatchNormOptions {
        gamma: gamma.as_deref(),
        beta: beta.as_deref(),
        eps: c.eps,
        momentum: c.momentum,
    };
    let zero = <E as kernels::Element>::from_f32(0.0);
    // Inference, out of place and in place.
    let mut y = vec![zero; x.len()];
    k.batch_norm(&x, &mut y, c.shape, &c.mean, &c.var, &opts).unwrap();
    let mut z = x.clone();
    k.batch_norm_inplace(&mut z, c.shape, &c.mean, &c.var, &opts).unwrap();
    prop_assert!(same_bits(&y, &z), "{name} isa {}: batch_norm in place differs", k.isa());
    reference::check_batch_norm(&x, c.shape, &c.mean, &c.var, opts.gamma, opts.beta, c.eps, &y).map_err(|m| {
        TestCaseError::fail(format!(
            "{name} batch_norm isa {} shape {:?} scale {scale:e}: {m}",
            k.isa(),
            c.shape
        ))
    })?;
    // Training.
    let mut y = vec![zero; x.len()];
    let (mut rm, mut rv) = (c.mean.clone(), c.var.clone());
    let (mut mean, mut rstd) = (vec![0.0f32; ch], vec![0.0f32; ch]);
    if c.stats {
        let s = RowStats {
            mean: Some(&mut mean),
            rstd: Some(&mut rstd),
        };
        k.batch_norm_train_with_stats(&x, &mut y, c.shape, &mut rm, &mut rv, &opts, s)
            .unwrap();
    } else {
        k.batch_norm_train(&x, &mut y, c.shape, &mut rm, &mut rv, &opts)
            .unwrap();
    }
    let got = BatchNormTrainOutputs {
        y: &y,
        running_mean: &rm,
        running_var: &rv,
        mean: c.stats.then_some(&mean[..]),
        rstd: c.stats.then_some(&rstd[..]),
    };
    reference::check_batch_norm_train(
        &x, c.shape, &c.mean, &c.var, opts.gamma, opts.beta, c.eps, c.momentum, got,
    )
    .map_err(|m| {
        TestCaseError::fail(format!(
            "{name} batch_norm_train isa {} shape {:?} scale {scale:e}: {m}",
            k.isa(),
            c.shape
        ))
    })?;
    Ok(())
}

#[test]
fn half_layer_norm_matches_oracle_on_every_isa() {
    run_prop("half_layer_norm", 100, (ln_case(), half_scale()), |(c, scale)| {
        for k in all_kernels() {
            half_layer_norm::<half::f16>(&k, &c, scale)?;
            half_layer_norm::<half::bf16>(&k, &c, scale)?;
        }
        Ok(())
    });
}

#[test]
fn half_add_layer_norm_matches_oracle_on_every_isa() {
    run_prop("half_add_layer_norm", 100, (add_case(), half_scale()), |(c, scale)| {
        for k in all_kernels() {
            half_add::<half::f16>(&k, &c, scale, false)?;
            half_add::<half::bf16>(&k, &c, scale, false)?;
        }
        Ok(())
    });
}

#[test]
fn half_rms_norm_matches_oracle_on_every_isa() {
    run_prop("half_rms_norm", 100, (rms_case(), half_scale()), |(c, scale)| {
        for k in all_kernels() {
            half_rms_norm::<half::f16>(&k, &c, scale)?;
            half_rms_norm::<half::bf16>(&k, &c, scale)?;
        }
        Ok(())
    });
}

#[test]
fn half_add_rms_norm_matches_oracle_on_every_isa() {
    run_prop("half_add_rms_norm", 100, (add_case(), half_scale()), |(c, scale)| {
        for k in all_kernels() {
            half_add::<half::f16>(&k, &c, scale, true)?;
            half_add::<half::bf16>(&k, &c, scale, true)?;
        }
        Ok(())
    });
}

#[test]
fn half_batch_norm_matches_oracle_on_every_isa() {
    run_prop("half_batch_norm", 100, (bn_case(), half_scale()), |(c, scale)| {
        for k in all_kernels() {
            half_batch_norm::<half::f16>(&k, &c, scale)?;
            half_batch_norm::<half::bf16>(&k, &c, scale)?;
        }
        Ok(())
    });
}
