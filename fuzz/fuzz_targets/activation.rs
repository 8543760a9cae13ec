//! Differential fuzzing of `sigmoid` and `swish` on every ISA: any bit pattern, length and
//! offset, within 3 ulp of the f64 oracle; in place and out of place agree.
#![no_main]

use kernels::{available_isas, Kernels};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (bool, u8, Vec<u32>)| {
    let (swish, offset, bits) = input;
    let offset = (offset % 16) as usize;
    let mut buf = vec![0.0f32; offset];
    buf.extend(bits.iter().map(|&b| f32::from_bits(b)));
    let x = &buf[offset..];
    for isa in available_isas() {
        let k = Kernels::for_isa(isa).unwrap();
        let mut out = vec![0.0f32; x.len()];
        let mut inplace = x.to_vec();
        if swish {
            k.swish(x, &mut out).unwrap();
            k.swish_inplace(&mut inplace).unwrap();
        } else {
            k.sigmoid(x, &mut out).unwrap();
            k.sigmoid_inplace(&mut inplace).unwrap();
        }
        if let Err(m) = reference::check_activation(x, swish, &out) {
            panic!("{isa} swish {swish}: x = {:e}: {m}", x[m.index]);
        }
        assert!(inplace.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits()), "{isa}: in place differs");
    }
});
