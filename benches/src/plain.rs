//! The plain Rust a user would write without this crate: the "plain" baselines.
//!
//! Idiomatic, safe, single-threaded code over slices with the standard library's `f32::exp`
//! and `f32::tanh` (libm), the `libm` crate's `erff` where the standard library has none, and
//! nothing clever: the compiler vectorizes what it can on its own.

/// Softmax of each row of length `n`: max, then `exp(x − m)` stored and summed, then scaled.
pub fn softmax(x: &[f32], y: &mut [f32], n: usize) {
    for (x, y) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for (y, &x) in y.iter_mut().zip(x) {
            *y = (x - m).exp();
            sum += *y;
        }
        let inv = 1.0 / sum;
        for y in y.iter_mut() {
            *y *= inv;
        }
    }
}

/// Softmax of each row of length `n` in place, as [`softmax`]; a row of −∞ (fully masked)
/// becomes 0, the policy of the kernels it is compared with.
pub fn softmax_inplace(x: &mut [f32], n: usize) {
    for x in x.chunks_exact_mut(n) {
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if m == f32::NEG_INFINITY {
            x.fill(0.0);
            continue;
        }
        let mut sum = 0.0;
        for x in x.iter_mut() {
            *x = (*x - m).exp();
            sum += *x;
        }
        let inv = 1.0 / sum;
        for x in x.iter_mut() {
            *x *= inv;
        }
    }
}

/// Log-softmax of each row of length `n`: max, sum of `exp(x − m)`, then `x − m − ln(sum)`.
pub fn log_softmax(x: &[f32], y: &mut [f32], n: usize) {
    for (x, y) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = x.iter().map(|&x| (x - m).exp()).sum();
        let ln_sum = sum.ln();
        for (y, &x) in y.iter_mut().zip(x) {
            *y = x - m - ln_sum;
        }
    }
}

/// `y = eˣ` element by element.
pub fn exp(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x.exp();
    }
}

/// `y = σ(x) = 1/(1 + e⁻ˣ)` element by element.
pub fn sigmoid(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = 1.0 / (1.0 + (-x).exp());
    }
}

/// `y = swish(x) = x·σ(x)` element by element.
pub fn swish(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x / (1.0 + (-x).exp());
    }
}

/// `y = gelu(x) = ½x·(1 + erf(x/√2))` element by element, with the `libm` crate's `erff` (the
/// textbook formula: `1 + erf` cancels for negative `x`, and is 0 below `x ≈ −5.9`).
pub fn gelu(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = 0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// `y = ½x·(1 + tanh(√(2/π)·(x + 0.044715x³)))` element by element, with `f32::tanh`.
pub fn gelu_tanh(x: &[f32], y: &mut [f32]) {
    // √(2/π).
    const C: f32 = 0.797_884_6;
    for (y, &x) in y.iter_mut().zip(x) {
        *y = 0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh());
    }
}
