//! f16 and bf16 storage on every ISA: the row kernels (softmax, log-softmax, exp, sigmoid,
//! swish) and the conversions, against the oracle under "the f32 bound plus one rounding to
//! the storage type" (`reference`'s checks with `E = f16, bf16`). The norms, attention and
//! GAU test their half-typed forms in their own files.

mod common;

use common::{all_kernels, misaligned_as, narrow, row_len, value, Half};
use kernels::half::{bf16, f16};
use kernels::{available_isas, Kernels, MaskedRows, SoftmaxOptions};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Rows {
    x: Vec<f32>,
    n: usize,
    scale: f32,
    mask: Option<Vec<f32>>,
    nan_policy: bool,
    offset: usize,
    inplace: bool,
}

fn rows() -> impl Strategy<Value = Rows> {
    (row_len(), 1usize..4, 0usize..33, any::<bool>(), any::<bool>(), 0u8..4).prop_flat_map(
        |(n, rows, offset, inplace, nan_policy, kind)| {
            let range = [4.0f32, 30.0, 100.0, 60000.0][kind as usize];
            let scale = prop_oneof![3 => Just(1.0f32), 1 => -3.0f32..3.0];
            let mask = proptest::option::weighted(
                0.3,
                proptest::collection::vec(prop_oneof![4 => -5.0f32..5.0, 1 => Just(f32::NEG_INFINITY)], n),
            );
            (proptest::collection::vec(value(range), n * rows), scale, mask).prop_map(move |(x, scale, mask)| Rows {
                x,
                n,
                scale,
                mask,
                nan_policy,
                offset,
                inplace,
            })
        },
    )
}

fn softmax_as<E: Half>(k: &Kernels, c: &Rows, log: bool) -> Result<(), TestCaseError> {
    let x: Vec<E> = narrow(&c.x);
    let policy = if c.nan_policy {
        MaskedRows::Nan
    } else {
        MaskedRows::Zero
    };
    let opts = SoftmaxOptions {
        scale: c.scale,
        mask: c.mask.as_deref(),
        masked_rows: policy,
    };
    let mut buf = misaligned_as(&x, c.offset);
    let got: Vec<E> = if c.inplace {
        let xs = &mut buf[c.offset..];
        if log {
            k.log_softmax_inplace(xs, c.n, &opts)
        } else {
            k.softmax_inplace(xs, c.n, &opts)
        }
        .unwrap();
        xs.to_vec()
    } else {
        let mut out = misaligned_as(&vec![<E as kernels::Element>::from_f32(0.0); x.len()], 3);
        if log {
            k.log_softmax(&buf[c.offset..], &mut out[3..], c.n, &opts)
        } else {
            k.softmax(&buf[c.offset..], &mut out[3..], c.n, &opts)
        }
        .unwrap();
        assert!(
            out[..3].iter().all(|v| <E as kernels::Element>::to_f32(*v).is_nan()),
            "wrote before out"
        );
        out[3..].to_vec()
    };
    let ref_policy = if c.nan_policy {
        reference::MaskedRows::Nan
    } else {
        reference::MaskedRows::Zero
    };
    reference::check_softmax(&x, c.n, c.scale, c.mask.as_deref(), ref_policy, log, &got).map_err(|m| {
        TestCaseError::fail(format!(
            "{} {} log {log} n {}: {m}",
            k.isa(),
            <E as kernels::Element>::NAME,
            c.n
        ))
    })
}

/// `exp`, `sigmoid` or `swish` (0, 1, 2) of `x`, stored as `E`, in place or not.
fn map_as<E: Half>(k: &Kernels, which: u8, x: &[f32], offset: usize, inplace: bool) -> Result<(), TestCaseError> {
    let x: Vec<E> = narrow(x);
    let mut buf = misaligned_as(&x, offset);
    let got: Vec<E> = if inplace {
        let xs = &mut buf[offset..];
        match which {
            0 => k.exp_inplace(xs),
            1 => k.sigmoid_inplace(xs),
            _ => k.swish_inplace(xs),
        }
        .unwrap();
        xs.to_vec()
    } else {
        let mut out = vec![<E as kernels::Element>::from_f32(0.0); x.len()];
        let xs = &buf[offset..];
        match which {
            0 => k.exp(xs, &mut out),
            1 => k.sigmoid(xs, &mut out),
            _ => k.swish(xs, &mut out),
        }
        .unwrap();
        out
    };
    match which {
        0 => reference::check_exp(&x, &got),
        w => reference::check_activation(&x, w == 2, &got),
    }
    .map_err(|m| {
        TestCaseError::fail(format!(
            "{} {} map {which}: {m}",
            k.isa(),
            <E as kernels::Element>::NAME
        ))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(200), ..ProptestConfig::default() })]

    #[test]
    fn softmax_and_log_softmax_on_every_isa(c in rows(), log in any::<bool>()) {
        for k in all_kernels() {
            softmax_as::<f16>(&k, &c, log)?;
            softmax_as::<bf16>(&k, &c, log)?;
        }
    }

    #[test]
    fn exp_sigmoid_swish_on_every_isa(
        x in proptest::collection::vec(prop_oneof![4 => -100.0f32..100.0, 1 => value(1.0)], 0..70),
        which in 0u8..3,
        offset in 0usize..33,
        inplace in any::<bool>(),
    ) {
        for k in all_kernels() {
            map_as::<f16>(&k, which, &x, offset, inplace)?;
            map_as::<bf16>(&k, which, &x, offset, inplace)?;
        }
    }
}

/// Every f16 and every bf16 input through exp, sigmoid and swish: overflow of f16 (exp of
/// more than 11.09), bf16 subnormal results (exp near −88.5), NaN, ±∞.
#[test]
fn every_half_input_of_the_row_maps() {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    for k in all_kernels() {
        for which in 0..3 {
            let x: Vec<f32> = all.iter().map(|&b| f16::from_bits(b).to_f32()).collect();
            map_as::<f16>(&k, which, &x, 1, false).unwrap();
            let x: Vec<f32> = all.iter().map(|&b| bf16::from_bits(b).to_f32()).collect();
            map_as::<bf16>(&k, which, &x, 1, false).unwrap();
        }
    }
}

/// Results that leave the storage type's range: log-softmax below −65504 is −∞ in f16; exp
/// results among the bf16 subnormals are kept, below half the least of them they are 0.
#[test]
fn outputs_beyond_the_storage_range() {
    for k in all_kernels() {
        let x = [-60000.0f32, 60000.0, 0.0];
        let x16: Vec<f16> = narrow(&x);
        let mut y = vec![f16::ZERO; 3];
        k.log_softmax(&x16, &mut y, 3, &Default::default()).unwrap();
        assert_eq!(y[0], f16::NEG_INFINITY, "{}", k.isa());
        assert_eq!(y[1], f16::ZERO, "{}", k.isa());
        reference::check_softmax(&x16, 3, 1.0, None, reference::MaskedRows::Zero, true, &y).unwrap();

        // exp underflows gradually (softmax flushes below 2⁻¹²⁶, within its bound).
        let xb: Vec<bf16> = narrow(&[-88.5, -92.0, -100.0]);
        let mut y = vec![bf16::ZERO; 3];
        k.exp(&xb, &mut y).unwrap();
        for v in &y[..2] {
            let v = v.to_f32();
            assert!(
                v > 0.0 && v < f32::MIN_POSITIVE,
                "{}: {v:e} is a bf16 subnormal",
                k.isa()
            );
        }
        assert_eq!(
            y[2],
            bf16::ZERO,
            "{}: e^-100 is below half the least bf16 subnormal",
            k.isa()
        );
        reference::check_exp(&xb, &y).unwrap();
    }
}

/// A half-typed softmax is the f32 kernel's result rounded once: bit for bit, on rows that
/// keep `exp` in the f32 stack buffer and on rows too long for it (which recompute `exp`).
#[test]
fn half_softmax_is_the_f32_result_rounded_once() {
    for n in [100, 8192, 8192 + 77] {
        let x: Vec<f32> = (0..2 * n).map(|i| ((i * 7919) % 1000) as f32 / 50.0 - 10.0).collect();
        for k in all_kernels() {
            for log in [false, true] {
                let xs: Vec<f16> = narrow(&x);
                let wide: Vec<f32> = xs.iter().map(|v| v.to_f32()).collect();
                let mut want = vec![0.0f32; 2 * n];
                let mut got = vec![f16::ZERO; 2 * n];
                if log {
                    k.log_softmax(&wide, &mut want, n, &Default::default()).unwrap();
                    k.log_softmax(&xs, &mut got, n, &Default::default()).unwrap();
                } else {
                    k.softmax(&wide, &mut want, n, &Default::default()).unwrap();
                    k.softmax(&xs, &mut got, n, &Default::default()).unwrap();
                }
                for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        f16::from_f32(*w).to_bits(),
                        "{} n {n} log {log} at {j}",
                        k.isa()
                    );
                }
            }
        }
    }
}

#[test]
fn widen_and_narrow_check_lengths() {
    let k = Kernels::best();
    let err = k.widen(&[f16::ONE; 3], &mut [0.0f32; 2]).unwrap_err();
    assert_eq!(err.to_string(), "`out`: expected length 3 (as x), got 2");
    let err = k.narrow(&[1.0f32; 3], &mut [bf16::ONE; 4]).unwrap_err();
    assert_eq!(err.arg(), Some("out"));
    let mut wide = [0.0f32; 3];
    kernels::widen(&[f16::ONE, f16::MAX, f16::NAN], &mut wide).unwrap();
    assert_eq!(wide[..2], [1.0, 65504.0]);
    assert!(wide[2].is_nan());
}

/// Every f16 and bf16 bit pattern survives widen → narrow on every ISA (NaN as a NaN), and
/// the narrowing of f32 values around every rounding boundary matches `half` (RNE).
#[test]
fn conversions_match_half_on_every_isa() {
    for isa in available_isas() {
        let k = Kernels::for_isa(isa).unwrap();
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let f16s: Vec<f16> = all.iter().map(|&b| f16::from_bits(b)).collect();
        let bf16s: Vec<bf16> = all.iter().map(|&b| bf16::from_bits(b)).collect();
        let mut wide = vec![0.0f32; all.len()];
        k.widen(&f16s, &mut wide).unwrap();
        for (h, w) in f16s.iter().zip(&wide) {
            assert!(
                h.to_f32().to_bits() == w.to_bits() || (h.is_nan() && w.is_nan()),
                "{isa}: f16 {h:?}"
            );
        }
        let mut back = vec![f16::ZERO; all.len()];
        k.narrow(&wide, &mut back).unwrap();
        for (h, b) in f16s.iter().zip(&back) {
            assert!(
                h.to_bits() == b.to_bits() || (h.is_nan() && b.is_nan()),
                "{isa}: f16 {h:?}"
            );
        }
        k.widen(&bf16s, &mut wide).unwrap();
        for (h, w) in bf16s.iter().zip(&wide) {
            assert!(
                h.to_f32().to_bits() == w.to_bits() || (h.is_nan() && w.is_nan()),
                "{isa}: bf16 {h:?}"
            );
        }
        let mut back = vec![bf16::ZERO; all.len()];
        k.narrow(&wide, &mut back).unwrap();
        for (h, b) in bf16s.iter().zip(&back) {
            assert!(
                h.to_bits() == b.to_bits() || (h.is_nan() && b.is_nan()),
                "{isa}: bf16 {h:?}"
            );
        }
        // f32 values at, just below and just above every halfway point between
        // neighbouring values of each type, and a sweep of bit patterns with every tail.
        let mut xs = Vec::new();
        for b in (0..=u32::MAX).step_by(65_537) {
            xs.push(f32::from_bits(b));
        }
        for b in 0..=u16::MAX {
            for base in [(b as u32) << 16, ((b as u32) << 13) + (112 << 23)] {
                for off in [0x7fffu32, 0x8000, 0x8001, 0xfff, 0x1000, 0x1001] {
                    xs.push(f32::from_bits(base.wrapping_add(off)));
                }
            }
        }
        let mut got16 = vec![f16::ZERO; xs.len()];
        let mut gotb = vec![bf16::ZERO; xs.len()];
        k.narrow(&xs, &mut got16).unwrap();
        k.narrow(&xs, &mut gotb).unwrap();
        for (i, &x) in xs.iter().enumerate() {
            let (w16, wb) = (f16::from_f32(x), bf16::from_f32(x));
            assert!(
                got16[i].to_bits() == w16.to_bits() || (x.is_nan() && got16[i].is_nan()),
                "{isa}: f16 of {x:e} ({:#x}): {:#x} != {:#x}",
                x.to_bits(),
                got16[i].to_bits(),
                w16.to_bits()
            );
            assert!(
                gotb[i].to_bits() == wb.to_bits() || (x.is_nan() && gotb[i].is_nan()),
                "{isa}: bf16 of {x:e} ({:#x}): {:#x} != {:#x}",
                x.to_bits(),
                gotb[i].to_bits(),
                wb.to_bits()
            );
        }
    }
}
