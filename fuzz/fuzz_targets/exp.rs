//! Differential fuzzing of `exp` on every ISA: any bit pattern, any length and offset, within
//! 1 ulp of the f64 oracle; in place and out of place agree.
#![no_main]

use kernels::{available_isas, Kernels};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u8, Vec<u32>)| {
    let (offset, bits) = input;
    let offset = (offset % 16) as usize;
    let mut buf = vec![0.0f32; offset];
    buf.extend(bits.iter().map(|&b| f32::from_bits(b)));
    let x = &buf[offset..];
    for isa in available_isas() {
        let k = Kernels::for_isa(isa).unwrap();
        let mut out = vec![0.0f32; x.len()];
        k.exp(x, &mut out).unwrap();
        if let Err(m) = reference::check_exp(x, &out) {
            panic!("{isa}: {m}");
        }
        let mut inplace = x.to_vec();
        k.exp_inplace(&mut inplace).unwrap();
        assert!(inplace.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits()), "{isa}: in place differs");
        assert!(k.exp(x, &mut vec![0.0; x.len() + 1]).is_err());
    }
});
