//! Differential fuzzing of the normalization family: LayerNorm (with and without γ, β and the
//! per-row statistics), Add & LayerNorm (α, bias, the `h` output, the in-place form), RMSNorm and
//! Add & RMSNorm (rows of up to 591 values, with streaming stores forced or not), BatchNorm
//! inference and training. Any shape, option and bit pattern (NaN, ±∞, subnormals, ±1e38 are
//! all reachable), on every ISA the host has, against the f64 oracle under the documented
//! bound. A call with one wrong length, a bad ε, α or momentum must come back as `Err` naming
//! that argument, never as a panic or an out-of-bounds access.
#![no_main]

use arbitrary::Arbitrary;
use kernels::{available_isas, BatchNormOptions, Kernels, LayerNormOptions, Residual, RmsNormOptions, RowStats, Stores};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    op: u8,
    d: u8,
    rows: u8,
    /// Batch shape `[N, C, S]` (reduced modulo small sizes).
    batch: [u8; 3],
    /// Raw bits, or (with `ordinary`) small integers around `offset` in steps of `step`.
    values: Vec<u32>,
    ordinary: bool,
    offset_bits: u32,
    step_bits: u32,
    gamma: bool,
    beta: bool,
    bias: bool,
    h_out: bool,
    want_mean: bool,
    want_rstd: bool,
    eps_bits: Option<u32>,
    alpha_bits: Option<u32>,
    momentum_bits: Option<u32>,
    /// Perturbs the length of one argument: (which, by how much).
    skew: Option<(u8, u8)>,
    /// Rows of 512 values and more (row norms), which streaming stores apply to.
    long: bool,
    /// Streaming stores forced ([`Stores::Streaming`]) rather than the default.
    stream: bool,
}

/// The values of the call, drawn cyclically from the input.
struct Pool<'a> {
    input: &'a Input,
    at: usize,
}

impl Pool<'_> {
    fn next(&mut self) -> f32 {
        let bits = self
            .input
            .values
            .get(self.at % self.input.values.len().max(1))
            .copied()
            .unwrap_or(0);
        self.at += 1;
        if self.input.ordinary {
            let step = f32::from_bits(self.input.step_bits);
            f32::from_bits(self.input.offset_bits) + (bits as i8 as f32) * step
        } else {
            f32::from_bits(bits)
        }
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// The lengths of the call's slices, one of them possibly skewed.
struct Lengths {
    skew: Option<(&'static str, usize)>,
}

impl Lengths {
    fn of(&self, name: &'static str, want: usize) -> usize {
        match self.skew {
            Some((n, by)) if n == name => {
                if want > 0 && by % 2 == 0 {
                    want - 1
                } else {
                    want + 1 + by % 3
                }
            }
            _ => want,
        }
    }
}

const ROW_OPS: u8 = 8;

fuzz_target!(|input: Input| {
    let op = input.op % (ROW_OPS + 3);
    if op < ROW_OPS {
        row_norm(&input, op);
    } else {
        batch_norm(&input, op - ROW_OPS);
    }
});

fn eps_of(input: &Input, default: f32) -> f32 {
    input.eps_bits.map_or(default, f32::from_bits)
}

/// The oracle's bound is NaN where its relative rstd bound `ε_r` is infinite (`e > 1/2`: rows
/// of subnormal values with a tiny ε) and the element's `ŷ − β` (LayerNorm) or `ŷ` (RMSNorm) is
/// exactly 0: `0·∞`. The documented bound makes no claim there; only a NaN result is wrong.
fn no_claim_is_ok(r: Result<f64, reference::NormMismatch>) -> Result<(), reference::NormMismatch> {
    match r {
        Err(m) if m.at.bound.is_nan() && m.at.exact.is_finite() && !m.at.got.is_nan() => Ok(()),
        r => r.map(|_| ()),
    }
}

/// Every channel's folded scale `γ/√(v + ε)` and shift `β − μ·s` is a finite f32. Where one is
/// not (also for ±∞ or NaN parameters: `γ = −∞` makes the fold `∞ − ∞` = NaN where the exact
/// `(x − μ)·γ/√(v + ε)` is −∞), the kernel's results are outside the documented bound.
fn folds_in_f32(mean: &[f32], var: &[f32], gamma: Option<&[f32]>, beta: Option<&[f32]>, eps: f32) -> bool {
    (0..mean.len()).all(|c| {
        let g = gamma.map_or(1.0, |g| g[c] as f64);
        let b = beta.map_or(0.0, |b| b[c] as f64);
        let sc = g / (var[c] as f64 + eps as f64).sqrt();
        let sh = b - mean[c] as f64 * sc;
        (sc as f32).is_finite() && (sh as f32).is_finite()
    })
}

fn equal_or_nan(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// LayerNorm (op bit 0 clear) or RMSNorm; plain or add (bit 1); out of place or in place (bit 2).
fn row_norm(input: &Input, op: u8) {
    let rms = op & 1 != 0;
    let add = op & 2 != 0;
    let inplace = op & 4 != 0;
    let d = match (input.d % 80) as usize {
        d if d > 0 && input.long => 512 + d,
        d => d,
    };
    // With d = 0 there are no rows (and the statistics have length 0).
    let rows = if d == 0 { 0 } else { (input.rows % 6) as usize };
    let len = rows * d;

    let mut names: Vec<&'static str> = vec!["x"];
    if !inplace {
        names.push("out");
    }
    if add {
        names.push("r");
        if input.bias {
            names.push("bias");
        }
        if input.h_out && !inplace {
            names.push("h");
        }
    }
    let g_name = if rms { "gain" } else { "gamma" };
    if input.gamma {
        names.push(g_name);
    }
    if input.beta && !rms {
        names.push("beta");
    }
    // Statistics outputs: only the out-of-place LayerNorm forms take them.
    let stats = !rms && !inplace;
    if stats && input.want_mean {
        names.push("mean");
    }
    if stats && input.want_rstd {
        names.push("rstd");
    }
    // With d = 1 every length of `x` is valid: no skew of `x` then.
    let skew = input
        .skew
        .map(|(w, by)| (names[w as usize % names.len()], by as usize))
        .filter(|&(name, _)| !(name == "x" && d == 1));
    let lens = Lengths { skew };

    // `x` skewed: a length that is not a multiple of `d` (with d = 0, any non-zero length, named `d`).
    let (x_len, x_fault) = match skew {
        Some(("x", by)) if d == 0 => (1 + by % 4, "d"),
        Some(("x", by)) => (len + 1 + by % (d - 1), "x"),
        _ => (len, ""),
    };

    let mut pool = Pool { input, at: 0 };
    let x = pool.vec(x_len);
    let r = pool.vec(if add { lens.of("r", len) } else { 0 });
    let bias = (add && input.bias).then(|| pool.vec(lens.of("bias", d)));
    let gamma = input.gamma.then(|| pool.vec(lens.of(g_name, d)));
    let beta = (input.beta && !rms).then(|| pool.vec(lens.of("beta", d)));
    let eps = eps_of(input, if rms { 1e-6 } else { 1e-5 });
    let alpha = input.alpha_bits.map_or(1.0, f32::from_bits);
    let out_len = if inplace { x_len } else { lens.of("out", len) };
    let h_len = lens.of("h", len);
    let mean_len = lens.of("mean", rows);
    let rstd_len = lens.of("rstd", rows);

    // Every argument at fault; the error must name one of them.
    let mut faults: Vec<&'static str> = Vec::new();
    if let Some((name, _)) = skew {
        faults.push(if name == "x" { x_fault } else { name });
    }
    if !(eps > 0.0 && eps.is_finite()) {
        faults.push("eps");
    }
    if add && !alpha.is_finite() {
        faults.push("alpha");
    }

    let residual = Residual {
        alpha,
        bias: bias.as_deref(),
    };
    let ln = LayerNormOptions {
        gamma: gamma.as_deref(),
        beta: beta.as_deref(),
        eps,
    };
    let rn = RmsNormOptions {
        gain: gamma.as_deref(),
        eps,
    };
    // The values normalized: `x`, or the f32 residual stream of the add forms.
    let h_ref = (add && faults.is_empty()).then(|| reference::residual(&x, &r, bias.as_deref(), alpha, d));

    for isa in available_isas() {
        let stores = if input.stream { Stores::Streaming } else { Stores::Auto };
        let k = Kernels::for_isa(isa).unwrap().with_stores(stores);
        let mut out = vec![0.0f32; out_len];
        let mut h = vec![0.0f32; h_len];
        let mut mean = vec![0.0f32; mean_len];
        let mut rstd = vec![0.0f32; rstd_len];
        let mut xm = x.clone();
        let want_h = add && input.h_out && !inplace;
        let result = match (rms, add, inplace) {
            (false, false, false) => {
                let st = RowStats {
                    mean: input.want_mean.then_some(&mut mean[..]),
                    rstd: input.want_rstd.then_some(&mut rstd[..]),
                };
                k.layer_norm_with_stats(&x, &mut out, d, &ln, st)
            }
            (false, false, true) => k.layer_norm_inplace(&mut xm, d, &ln),
            (false, true, false) => {
                let st = RowStats {
                    mean: input.want_mean.then_some(&mut mean[..]),
                    rstd: input.want_rstd.then_some(&mut rstd[..]),
                };
                let h = want_h.then_some(&mut h[..]);
                k.add_layer_norm_with_stats(&x, &r, &mut out, h, d, &residual, &ln, st)
            }
            (false, true, true) => k.add_layer_norm_inplace(&mut xm, &r, &mut out, d, &residual, &ln),
            (true, false, false) => k.rms_norm(&x, &mut out, d, &rn),
            (true, false, true) => k.rms_norm_inplace(&mut xm, d, &rn),
            (true, true, false) => {
                let h = want_h.then_some(&mut h[..]);
                k.add_rms_norm(&x, &r, &mut out, h, d, &residual, &rn)
            }
            (true, true, true) => k.add_rms_norm_inplace(&mut xm, &r, &mut out, d, &residual, &rn),
        };
        match result {
            Ok(()) => {
                assert!(
                    faults.is_empty(),
                    "{isa}: op {op}: accepted a call with faults {faults:?}"
                );
                let y: &[f32] = if inplace && !add { &xm } else { &out };
                let hv: &[f32] = h_ref.as_deref().unwrap_or(&x);
                if let Some(h_ref) = &h_ref {
                    let got: &[f32] = if inplace {
                        &xm
                    } else if want_h {
                        &h
                    } else {
                        h_ref
                    };
                    for (j, (&a, &b)) in got.iter().zip(h_ref).enumerate() {
                        assert!(equal_or_nan(a, b), "{isa}: op {op}: h[{j}] = {a:e}, oracle {b:e}");
                    }
                }
                // Row by row, so that a row where the bound makes no claim hides no other row.
                for i in 0..rows {
                    let (hr, yr) = (&hv[i * d..][..d], &y[i * d..][..d]);
                    let checked = if rms {
                        reference::check_rms_norm(hr, d, gamma.as_deref(), eps, yr)
                    } else {
                        let m = (stats && input.want_mean).then_some(&mean[i..i + 1]);
                        let rs = (stats && input.want_rstd).then_some(&rstd[i..i + 1]);
                        reference::check_layer_norm(hr, d, gamma.as_deref(), beta.as_deref(), eps, yr, m, rs)
                    };
                    if let Err(m) = no_claim_is_ok(checked) {
                        panic!("{isa}: op {op} (rms {rms}, add {add}, inplace {inplace}) d {d} row {i} of {rows}: {m}");
                    }
                }
            }
            Err(e) => {
                assert!(!faults.is_empty(), "{isa}: op {op}: refused a valid call: {e}");
                assert!(
                    e.arg().is_some_and(|a| faults.contains(&a)),
                    "{isa}: op {op}: error names {:?}, the faults are {faults:?}: {e}",
                    e.arg()
                );
            }
        }
    }
}

/// BatchNorm inference (op 0), in place (1), training with statistics (2).
fn batch_norm(input: &Input, op: u8) {
    let train = op == 2;
    let inplace = op == 1;
    let [n, c, s] = [
        (input.batch[0] % 5) as usize,
        (input.batch[1] % 6) as usize,
        (input.batch[2] % 20) as usize,
    ];
    let len = n * c * s;

    let mut names: Vec<&'static str> = vec!["x", "running_mean", "running_var"];
    if !inplace {
        names.push("out");
    }
    if input.gamma {
        names.push("gamma");
    }
    if input.beta {
        names.push("beta");
    }
    if train && input.want_mean {
        names.push("mean");
    }
    if train && input.want_rstd {
        names.push("rstd");
    }
    let skew = input.skew.map(|(w, by)| (names[w as usize % names.len()], by as usize));
    let lens = Lengths { skew };

    let mut pool = Pool { input, at: 0 };
    let x = pool.vec(lens.of("x", len));
    let running_mean = pool.vec(lens.of("running_mean", c));
    let running_var = pool.vec(lens.of("running_var", c));
    let gamma = input.gamma.then(|| pool.vec(lens.of("gamma", c)));
    let beta = input.beta.then(|| pool.vec(lens.of("beta", c)));
    let eps = eps_of(input, 1e-5);
    let momentum = input.momentum_bits.map_or(0.1, f32::from_bits);
    let out_len = if inplace { x.len() } else { lens.of("out", len) };

    let mut faults: Vec<&'static str> = Vec::new();
    if let Some((name, _)) = skew {
        faults.push(name);
    }
    if !(eps > 0.0 && eps.is_finite()) {
        faults.push("eps");
    }
    if train && !(0.0..=1.0).contains(&momentum) {
        faults.push("momentum");
    }
    if train && c > 0 && n * s < 2 {
        faults.push("shape");
    }
    let opts = BatchNormOptions {
        gamma: gamma.as_deref(),
        beta: beta.as_deref(),
        eps,
        momentum,
    };

    for isa in available_isas() {
        let k = Kernels::for_isa(isa).unwrap();
        let mut out = vec![0.0f32; out_len];
        let mut xm = x.clone();
        let mut rm = running_mean.clone();
        let mut rv = running_var.clone();
        let mut mean = vec![0.0f32; lens.of("mean", c)];
        let mut rstd = vec![0.0f32; lens.of("rstd", c)];
        let result = match op {
            0 => k.batch_norm(&x, &mut out, [n, c, s], &rm, &rv, &opts),
            1 => k.batch_norm_inplace(&mut xm, [n, c, s], &rm, &rv, &opts),
            _ => {
                let st = RowStats {
                    mean: input.want_mean.then_some(&mut mean[..]),
                    rstd: input.want_rstd.then_some(&mut rstd[..]),
                };
                k.batch_norm_train_with_stats(&x, &mut out, [n, c, s], &mut rm, &mut rv, &opts, st)
            }
        };
        match result {
            Ok(()) => {
                assert!(
                    faults.is_empty(),
                    "{isa}: batch op {op}: accepted a call with faults {faults:?}"
                );
                let y: &[f32] = if inplace { &xm } else { &out };
                let checked = if train {
                    let got = reference::BatchNormTrainOutputs {
                        y,
                        running_mean: &rm,
                        running_var: &rv,
                        mean: input.want_mean.then_some(&mean[..]),
                        rstd: input.want_rstd.then_some(&rstd[..]),
                    };
                    reference::check_batch_norm_train(
                        &x,
                        [n, c, s],
                        &running_mean,
                        &running_var,
                        gamma.as_deref(),
                        beta.as_deref(),
                        eps,
                        momentum,
                        got,
                    )
                } else if !folds_in_f32(&running_mean, &running_var, gamma.as_deref(), beta.as_deref(), eps) {
                    // The kernel computes `y = fma(x, s_c, b_c)` with `s_c = γ/√(v + ε)` and
                    // `b_c = β − μ·s_c` rounded to f32; where they overflow, `y` may be ±∞ or NaN
                    // although the exact `(x − μ)·s_c + β` is finite (found by this target: μ ≈ 1e38,
                    // x = μ). The documented bound assumes both finite: only memory safety here.
                    Ok(0.0)
                } else {
                    reference::check_batch_norm(
                        &x,
                        [n, c, s],
                        &running_mean,
                        &running_var,
                        gamma.as_deref(),
                        beta.as_deref(),
                        eps,
                        y,
                    )
                };
                if let Err(m) = no_claim_is_ok(checked) {
                    panic!("{isa}: batch op {op} shape {:?}: {m}", [n, c, s]);
                }
            }
            Err(e) => {
                assert!(!faults.is_empty(), "{isa}: batch op {op}: refused a valid call: {e}");
                assert!(
                    e.arg().is_some_and(|a| faults.contains(&a)),
                    "{isa}: batch op {op}: error names {:?}, the faults are {faults:?}: {e}",
                    e.arg()
                );
            }
        }
    }
}
