//! Differential fuzzing of softmax and log-softmax: any shape, option and bit pattern, on
//! every ISA the host has, against the f64 oracle under the documented bound. Invalid shapes
//! must come back as `Err`, never as a panic or an out-of-bounds access.
#![no_main]

use arbitrary::Arbitrary;
use kernels::{available_isas, Kernels, MaskedRows, SoftmaxOptions};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    n: u16,
    rows: u8,
    /// Raw bits: NaN, ±∞, subnormals and ±1e38 are all reachable.
    values: Vec<u32>,
    mask: Option<Vec<u32>>,
    scale_bits: Option<u32>,
    nan_policy: bool,
    log: bool,
    inplace: bool,
    /// Extra elements appended to `out` (or dropped from it) to exercise the length checks.
    out_skew: i8,
}

fuzz_target!(|input: Input| {
    // Rows of up to 599 values: rows of at most 256 run in groups, longer f32 rows scale each
    // row inside the next row's exponentials; both, and the switch between them, are reachable.
    let n = (input.n % 600) as usize;
    // Up to 39 rows: short rows run in groups of up to 16 (at most 2048 values), so several
    // groups and a partial last one are reachable.
    let rows = (input.rows % 40) as usize;
    let x: Vec<f32> = (0..rows * n).map(|i| f32::from_bits(*input.values.get(i % input.values.len().max(1)).unwrap_or(&0))).collect();
    let mask: Option<Vec<f32>> = input.mask.as_ref().map(|m| m.iter().map(|&b| f32::from_bits(b)).collect());
    let scale = input.scale_bits.map_or(1.0, f32::from_bits);
    let policy = if input.nan_policy { MaskedRows::Nan } else { MaskedRows::Zero };
    let opts = SoftmaxOptions { scale, mask: mask.as_deref(), masked_rows: policy };
    let out_len = (x.len() as isize + if input.inplace { 0 } else { input.out_skew as isize }).max(0) as usize;

    let valid_shape = mask.as_ref().is_none_or(|m| m.len() == n) && out_len == x.len();
    let valid = valid_shape && scale.is_finite();
    let ref_policy = if input.nan_policy { reference::MaskedRows::Nan } else { reference::MaskedRows::Zero };

    for isa in available_isas() {
        let k = Kernels::for_isa(isa).unwrap();
        let mut out = vec![0.0f32; out_len];
        let result = match (input.inplace, input.log) {
            (true, false) => {
                out.copy_from_slice(&x);
                k.softmax_inplace(&mut out, n, &opts)
            }
            (true, true) => {
                out.copy_from_slice(&x);
                k.log_softmax_inplace(&mut out, n, &opts)
            }
            (false, false) => k.softmax(&x, &mut out, n, &opts),
            (false, true) => k.log_softmax(&x, &mut out, n, &opts),
        };
        match result {
            Ok(()) => {
                assert!(valid, "{isa}: accepted an invalid call");
                if let Err(m) = reference::check_softmax(&x, n, scale, mask.as_deref(), ref_policy, input.log, &out) {
                    panic!("{isa}: log {} n {n}: {m}", input.log);
                }
            }
            Err(e) => {
                assert!(!valid, "{isa}: refused a valid call: {e}");
                assert!(e.arg().is_some(), "{isa}: error names no argument: {e}");
            }
        }
    }
});
