//! Shared harness of the integration tests: the ISAs to run, and value strategies that reach
//! the special values.
#![allow(dead_code)]

use kernels::{available_isas, Isa, Kernels};
use proptest::prelude::*;

/// The kernels of every ISA this host can run: every kernel test loops over all of them.
pub fn all_kernels() -> Vec<Kernels> {
    available_isas()
        .into_iter()
        .map(|isa| Kernels::for_isa(isa).unwrap())
        .collect()
}

/// The ISAs this host should be able to run, read independently of the crate's detection:
/// from `/proc/cpuinfo` on x86-64, by definition on aarch64 (NEON is baseline).
pub fn isas_the_cpu_has() -> Vec<Isa> {
    let mut isas = vec![Isa::Scalar];
    if cfg!(target_arch = "aarch64") {
        isas.push(Isa::Neon);
    } else if cfg!(target_arch = "x86_64") {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let flags: Vec<&str> = info
            .lines()
            .find(|l| l.starts_with("flags"))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        let has = |all: &[&str]| all.iter().all(|f| flags.contains(f));
        if has(&["avx2", "fma", "f16c"]) {
            isas.push(Isa::Avx2);
        }
        if has(&["avx512f", "avx512bw", "avx512dq", "avx512vl", "fma"]) {
            isas.push(Isa::Avx512);
        }
    }
    isas
}

/// Special values every float strategy mixes in.
pub const SPECIALS: [f32; 16] = [
    0.0,
    -0.0,
    1e-45,  // smallest subnormal
    -3e-39, // a negative subnormal
    1.0e-38,
    1e30,
    -1e30,
    88.0,
    -88.0,
    88.8,
    -104.0,
    f32::MAX,
    f32::MIN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
];

/// Mostly ordinary values in `[-range, range]`, sometimes a special one.
pub fn value(range: f32) -> impl Strategy<Value = f32> {
    prop_oneof![
        20 => -range..range,
        1 => proptest::sample::select(SPECIALS.to_vec()),
    ]
}

/// A row length: mostly every tail up to three AVX-512 vectors and a bit, sometimes long.
pub fn row_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 0usize..=50,
        2 => 51usize..=300,
        1 => 32768usize..=33000,
    ]
}

/// Copies `data` into a fresh buffer at an offset of `offset` floats, so that the slice the
/// kernel sees starts at any alignment. Returns the buffer; the slice is `buf[offset..]`.
pub fn misaligned(data: &[f32], offset: usize) -> Vec<f32> {
    let mut buf = vec![f32::NAN; offset];
    buf.extend_from_slice(data);
    buf
}

/// Proptest cases: `default`, or `PROPTEST_CASES` when set (the aarch64 run under qemu, which is
/// slower by an order of magnitude, asks for fewer).
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The half storage types, with what the tests need of both crates' traits.
pub trait Half: kernels::Element + reference::Element {}
impl Half for kernels::half::f16 {}
impl Half for kernels::half::bf16 {}

/// `xs` rounded to `E`.
pub fn narrow<E: kernels::Element>(xs: &[f32]) -> Vec<E> {
    xs.iter().map(|&x| E::from_f32(x)).collect()
}

/// The values of `xs`, widened exactly.
pub fn wide<E: kernels::Element>(xs: &[E]) -> Vec<f32> {
    xs.iter().map(|&x| x.to_f32()).collect()
}

/// `xs` rounded to `E`, and those values widened back (what a kernel reading `E` sees).
pub fn to_half<E: kernels::Element>(xs: &[f32]) -> (Vec<E>, Vec<f32>) {
    let h = narrow(xs);
    let w = wide(&h);
    (h, w)
}

/// Equal bits, or both NaN.
pub fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// [`misaligned`] for any storage type: `data` at an offset of `offset` elements in a fresh
/// buffer, NaN before it; the slice the kernel sees is `buf[offset..]`.
pub fn misaligned_as<E: kernels::Element>(data: &[E], offset: usize) -> Vec<E> {
    let mut buf = vec![E::from_f32(f32::NAN); offset];
    buf.extend_from_slice(data);
    buf
}
