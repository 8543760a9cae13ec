//! Softmax and log-softmax on every ISA against the f64 oracle, under the documented bound.

mod common;

use common::{all_kernels, misaligned, row_len, value};
use kernels::half::bf16;
use kernels::{Error, Kernels, MaskedRows, SoftmaxOptions};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    x: Vec<f32>,
    n: usize,
    scale: f32,
    mask: Option<Vec<f32>>,
    policy: MaskedRows,
    offset: usize,
    inplace: bool,
}

fn case() -> impl Strategy<Value = Case> {
    // Short rows come in groups of up to 16: enough rows to fill one and start another.
    let shape = row_len().prop_flat_map(|n| (Just(n), if n <= 300 { 1usize..40 } else { 1usize..4 }));
    (shape, 0usize..16, any::<bool>(), any::<bool>(), 0u8..4).prop_flat_map(
        |((n, rows), offset, inplace, nan_policy, kind)| {
            let range = [4.0f32, 30.0, 100.0, 1.0][kind as usize];
            let scale = prop_oneof![3 => Just(1.0f32), 1 => -3.0f32..3.0, 1 => Just(0.125f32)];
            let mask = proptest::option::weighted(
                0.4,
                proptest::collection::vec(
                    prop_oneof![4 => -5.0f32..5.0, 1 => Just(f32::NEG_INFINITY), 1 => Just(-1e4f32)],
                    n,
                ),
            );
            (proptest::collection::vec(value(range), n * rows), scale, mask).prop_map(move |(x, scale, mask)| Case {
                x,
                n,
                scale,
                mask,
                policy: if nan_policy { MaskedRows::Nan } else { MaskedRows::Zero },
                offset,
                inplace,
            })
        },
    )
}

fn ref_policy(p: MaskedRows) -> reference::MaskedRows {
    match p {
        MaskedRows::Zero => reference::MaskedRows::Zero,
        MaskedRows::Nan => reference::MaskedRows::Nan,
    }
}

fn run(k: &Kernels, c: &Case, log: bool) -> Vec<f32> {
    let opts = SoftmaxOptions {
        scale: c.scale,
        mask: c.mask.as_deref(),
        masked_rows: c.policy,
    };
    let mut buf = misaligned(&c.x, c.offset);
    if c.inplace {
        let x = &mut buf[c.offset..];
        if log {
            k.log_softmax_inplace(x, c.n, &opts)
        } else {
            k.softmax_inplace(x, c.n, &opts)
        }
        .unwrap();
        buf[c.offset..].to_vec()
    } else {
        let mut out = misaligned(&vec![0.0; c.x.len()], (c.offset * 7) % 16);
        let o = (c.offset * 7) % 16;
        if log {
            k.log_softmax(&buf[c.offset..], &mut out[o..], c.n, &opts)
        } else {
            k.softmax(&buf[c.offset..], &mut out[o..], c.n, &opts)
        }
        .unwrap();
        assert!(out[..o].iter().all(|v| v.is_nan()), "wrote before the output slice");
        out[o..].to_vec()
    }
}

/// Checks every element of `got` against the oracle under the documented bound.
fn check(k: &Kernels, c: &Case, log: bool, got: &[f32]) -> Result<(), TestCaseError> {
    reference::check_softmax(&c.x, c.n, c.scale, c.mask.as_deref(), ref_policy(c.policy), log, got)
        .map_err(|m| TestCaseError::fail(format!("isa {} log {log} n {}: {m}", k.isa(), c.n)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(400), ..ProptestConfig::default() })]

    #[test]
    fn softmax_matches_oracle_on_every_isa(c in case()) {
        for k in all_kernels() {
            let got = run(&k, &c, false);
            check(&k, &c, false, &got)?;
        }
    }

    #[test]
    fn log_softmax_matches_oracle_on_every_isa(c in case()) {
        for k in all_kernels() {
            let got = run(&k, &c, true);
            check(&k, &c, true, &got)?;
        }
    }
}

/// Short rows run in groups (every sweep over several rows before the next sweep), and a long
/// f32 row's last sweep runs inside the next row's second: a call over many rows gives each
/// row the bits of a call over that row alone, whatever its neighbours are (fully masked,
/// NaN), on every ISA, for f32 and bf16, in place or not.
#[test]
fn rows_of_a_call_give_the_bits_of_single_rows() {
    let rows = 37;
    for n in [1, 3, 16, 17, 31, 32, 64, 100, 128, 255, 256, 257, 300, 1000] {
        let mut x: Vec<f32> = (0..rows * n)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.02 - 10.0)
            .collect();
        // Row 5 fully masked, row 20 NaN among −∞, row 21 with one NaN.
        x[5 * n..6 * n].fill(f32::NEG_INFINITY);
        x[20 * n..21 * n].fill(f32::NEG_INFINITY);
        x[20 * n + n / 2] = f32::NAN;
        x[21 * n + n / 3] = f32::NAN;
        let mask: Vec<f32> = (0..n)
            .map(|j| if j % 7 == 6 { f32::NEG_INFINITY } else { 0.5 })
            .collect();
        for k in all_kernels() {
            for opts in [
                SoftmaxOptions::default(),
                SoftmaxOptions {
                    scale: 0.25,
                    mask: Some(&mask),
                    masked_rows: MaskedRows::Nan,
                },
            ] {
                for log in [false, true] {
                    let call = |x: &[f32], inplace: bool| -> Vec<u32> {
                        let mut y = x.to_vec();
                        let mut out = vec![0.0; x.len()];
                        match (log, inplace) {
                            (false, false) => k.softmax(x, &mut out, n, &opts),
                            (true, false) => k.log_softmax(x, &mut out, n, &opts),
                            (false, true) => k.softmax_inplace(&mut y, n, &opts),
                            (true, true) => k.log_softmax_inplace(&mut y, n, &opts),
                        }
                        .unwrap();
                        let got = if inplace { y } else { out };
                        got.iter().map(|v| v.to_bits()).collect()
                    };
                    let half = |x: &[f32]| -> Vec<u16> {
                        let x: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
                        let mut out = vec![bf16::ZERO; x.len()];
                        if log {
                            k.log_softmax(&x, &mut out, n, &opts).unwrap();
                        } else {
                            k.softmax(&x, &mut out, n, &opts).unwrap();
                        }
                        out.iter().map(|v| v.to_bits()).collect()
                    };
                    for inplace in [false, true] {
                        let whole = call(&x, inplace);
                        for r in 0..rows {
                            let one = call(&x[r * n..(r + 1) * n], inplace);
                            assert_eq!(
                                &whole[r * n..(r + 1) * n],
                                &one[..],
                                "{} n {n} row {r} log {log} in place {inplace}",
                                k.isa()
                            );
                        }
                    }
                    let whole = half(&x);
                    for r in 0..rows {
                        let one = half(&x[r * n..(r + 1) * n]);
                        assert_eq!(&whole[r * n..(r + 1) * n], &one[..], "{} bf16 n {n} row {r}", k.isa());
                    }
                }
            }
        }
    }
}

/// Rows reduced together keep their own maximum and sum: neighbouring rows sit 160 apart, so
/// a maximum taken from another row overflows or underflows `exp`, and a sum from another row
/// is off by orders of magnitude, whatever the row's place in its group.
#[test]
fn rows_reduced_together_keep_their_own_reductions() {
    for n in [1, 5, 8, 24, 32, 40, 64, 100, 256] {
        for rows in [1, 7, 16, 23, 40] {
            let x: Vec<f32> = (0..rows * n)
                .map(|i| {
                    let (r, j) = (i / n, i % n);
                    let centre = if r % 2 == 0 { 80.0 } else { -80.0 };
                    // Rows differ in length scale too, so that their sums differ.
                    centre - ((j * 37 + r * 11) % 23) as f32 * (0.1 + 0.05 * (r % 5) as f32)
                })
                .collect();
            let c = Case {
                x,
                n,
                scale: 1.0,
                mask: None,
                policy: MaskedRows::Zero,
                offset: 0,
                inplace: false,
            };
            for k in all_kernels() {
                for log in [false, true] {
                    let got = run(&k, &c, log);
                    check(&k, &c, log, &got).unwrap_or_else(|e| panic!("rows {rows}: {e}"));
                }
            }
        }
    }
}

/// Hand-picked rows, on every ISA, at a length with full vectors and a tail.
#[test]
fn special_rows() {
    let inf = f32::INFINITY;
    let n = 37;
    let mut rows: Vec<(&str, Vec<f32>)> = vec![
        ("all −∞", vec![-inf; n]),
        (
            "one NaN",
            (0..n).map(|j| if j == 20 { f32::NAN } else { j as f32 }).collect(),
        ),
        ("one +∞", (0..n).map(|j| if j == 3 { inf } else { 0.0 }).collect()),
        ("±1e30", (0..n).map(|j| if j % 2 == 0 { 1e30 } else { -1e30 }).collect()),
        ("subnormals", (0..n).map(|j| f32::from_bits(j as u32 + 1)).collect()),
        ("equal", vec![7.5; n]),
        (
            "NaN and −∞ only",
            (0..n).map(|j| if j == 36 { f32::NAN } else { -inf }).collect(),
        ),
    ];
    rows.push((
        "one finite among −∞",
        (0..n).map(|j| if j == 36 { -5.0 } else { -inf }).collect(),
    ));
    for k in all_kernels() {
        for (name, x) in &rows {
            for policy in [MaskedRows::Zero, MaskedRows::Nan] {
                let c = Case {
                    x: x.clone(),
                    n,
                    scale: 1.0,
                    mask: None,
                    policy,
                    offset: 1,
                    inplace: false,
                };
                for log in [false, true] {
                    let got = run(&k, &c, log);
                    check(&k, &c, log, &got).unwrap_or_else(|e| panic!("{name}: {e}"));
                }
            }
        }
        // Spot values the bound alone would not pin down.
        let got = run(
            &k,
            &Case {
                x: rows[0].1.clone(),
                n,
                scale: 1.0,
                mask: None,
                policy: MaskedRows::Zero,
                offset: 0,
                inplace: false,
            },
            false,
        );
        assert!(got.iter().all(|&v| v == 0.0));
        let got = run(
            &k,
            &Case {
                x: rows[5].1.clone(),
                n,
                scale: 1.0,
                mask: None,
                policy: MaskedRows::Zero,
                offset: 0,
                inplace: true,
            },
            false,
        );
        assert!(
            got.iter().all(|&v| (v as f64 - 1.0 / n as f64).abs() < 1e-8),
            "{}: {got:?}",
            k.isa()
        );
    }
}

/// A −∞ mask entry hides a NaN or +∞ score; the mask is broadcast over rows.
#[test]
fn mask_hides_nan_and_is_broadcast() {
    let n = 21;
    let mask: Vec<f32> = (0..n)
        .map(|j| if j % 3 == 0 { f32::NEG_INFINITY } else { 0.0 })
        .collect();
    let mut x: Vec<f32> = (0..2 * n).map(|j| (j % 5) as f32).collect();
    x[0] = f32::NAN;
    x[n + 3] = f32::INFINITY;
    for k in all_kernels() {
        let mut y = vec![0.0; 2 * n];
        k.softmax(
            &x,
            &mut y,
            n,
            &SoftmaxOptions {
                mask: Some(&mask),
                ..Default::default()
            },
        )
        .unwrap();
        for (j, v) in y.iter().enumerate() {
            assert!(v.is_finite(), "{}: y[{j}] = {v}", k.isa());
            if j % n % 3 == 0 {
                assert_eq!(*v, 0.0);
            }
        }
        for row in y.chunks(n) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
    }
}

#[test]
fn empty_and_errors_name_the_argument() {
    let k = Kernels::best();
    let opts = SoftmaxOptions::default();
    k.softmax::<f32>(&[], &mut [], 0, &opts).unwrap();
    k.softmax::<f32>(&[], &mut [], 5, &opts).unwrap();
    k.log_softmax_inplace::<f32>(&mut [], 0, &opts).unwrap();
    // An empty call is still checked.
    assert_eq!(
        k.softmax(&[], &mut [0.0f32; 2], 0, &opts).unwrap_err().arg(),
        Some("out")
    );
    let mask = [0.0; 3];
    assert_eq!(
        k.softmax::<f32>(
            &[],
            &mut [],
            0,
            &SoftmaxOptions {
                mask: Some(&mask),
                ..opts
            }
        )
        .unwrap_err()
        .arg(),
        Some("mask")
    );
    assert_eq!(
        k.softmax::<f32>(
            &[],
            &mut [],
            4,
            &SoftmaxOptions {
                scale: f32::NAN,
                ..opts
            }
        )
        .unwrap_err()
        .arg(),
        Some("scale")
    );

    let err = k.softmax(&[1.0f32; 6], &mut [0.0f32; 6], 4, &opts).unwrap_err();
    assert_eq!(err.arg(), Some("x"));
    assert_eq!(
        err.to_string(),
        "`x`: expected a length that is a multiple of n = 4, got 6"
    );
    let err = k.softmax(&[1.0f32; 6], &mut [0.0f32; 5], 3, &opts).unwrap_err();
    assert_eq!(err.to_string(), "`out`: expected length 6 (as x), got 5");
    let err = k.softmax(&[1.0f32; 6], &mut [0.0f32; 6], 0, &opts).unwrap_err();
    assert_eq!(err.arg(), Some("n"));
    let mask = [0.0; 2];
    let err = k
        .log_softmax(
            &[1.0f32; 6],
            &mut [0.0f32; 6],
            3,
            &SoftmaxOptions {
                mask: Some(&mask),
                ..opts
            },
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "`mask`: expected length 3 (n), got 2");
    for scale in [f32::NAN, f32::INFINITY] {
        let err = k
            .softmax_inplace(&mut [1.0f32; 6], 3, &SoftmaxOptions { scale, ..opts })
            .unwrap_err();
        assert!(matches!(err, Error::Param { arg: "scale", .. }), "{err}");
    }
}

#[test]
fn free_functions_use_the_detected_isa() {
    let x = [1.0f32, 2.0, 3.0];
    let mut a = [0.0; 3];
    let mut b = [0.0; 3];
    kernels::softmax(&x, &mut a, 3, &Default::default()).unwrap();
    Kernels::detected()
        .unwrap()
        .softmax(&x, &mut b, 3, &Default::default())
        .unwrap();
    assert_eq!(a, b);
    let mut c = x;
    kernels::log_softmax_inplace(&mut c, 3, &Default::default()).unwrap();
    kernels::log_softmax(&x, &mut b, 3, &Default::default()).unwrap();
    assert_eq!(c, b);
}
