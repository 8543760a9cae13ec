//! Differential fuzzing of attention: any shape (small), every mask and residual option, raw
//! f32 bit patterns, on every ISA the host has, planned for this machine's caches or with the
//! keys in blocks, against the f64 oracle under the documented bound. Inconsistent shapes must come back as `Err`.
#![no_main]

use arbitrary::Arbitrary;
use kernels::{
    available_isas, AdditiveMask, AttentionOptions, AttentionShape, AttentionWorkspace, Caches, CarriedScores, Kernels,
    MaskShape, MaskedRows,
};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    dims: [u8; 7],
    values: Vec<u32>,
    scale_bits: Option<u32>,
    mask: Option<(u8, Vec<u32>)>,
    key_lengths: Option<Vec<u8>>,
    causal: bool,
    prev: bool,
    want_scores: bool,
    running_mean_layer: Option<u8>,
    carry_masked: bool,
    nan_policy: bool,
    /// Plan for a level-2 cache too small for any head: keys in blocks of 64, swept by query
    /// blocks of 48 rows.
    small_l2: bool,
    /// Nonzero: perturb one length to check the errors.
    skew: u8,
}

fn take(values: &[u32], n: usize, salt: usize) -> Vec<f32> {
    (0..n).map(|i| f32::from_bits(values.get((i + salt) % values.len().max(1)).copied().unwrap_or(0x3f80_0000))).collect()
}

fuzz_target!(|input: Input| {
    let [b, h, hkv, lq, lk, dk, dv] = input.dims;
    let kv_heads = (hkv % 3) as usize + 1;
    let shape = AttentionShape {
        batch: (b % 3) as usize,
        heads: kv_heads * ((h % 3) as usize + 1),
        kv_heads,
        q_len: (lq % 40) as usize,
        kv_len: (lk % 70) as usize,
        head_dim: (dk % 40) as usize + 1,
        value_dim: (dv % 40) as usize + 1,
    };
    let n_scores = shape.batch * shape.heads * shape.q_len * shape.kv_len;
    let v = &input.values;
    let q = take(v, shape.batch * shape.heads * shape.q_len * shape.head_dim, 0);
    let k = take(v, shape.batch * shape.kv_heads * shape.kv_len * shape.head_dim, 7);
    let vv = take(v, shape.batch * shape.kv_heads * shape.kv_len * shape.value_dim, 13);
    let prev = input.prev.then(|| take(v, n_scores, 29));
    let mask = input.mask.as_ref().map(|(kind, bits)| {
        let (mshape, len) = match kind % 4 {
            0 => (MaskShape::Shared, shape.q_len * shape.kv_len),
            1 => (MaskShape::PerBatch, shape.batch * shape.q_len * shape.kv_len),
            2 => (MaskShape::KeyPadding, shape.batch * shape.kv_len),
            _ => (MaskShape::PerHead, n_scores),
        };
        (take(bits, len, 0), mshape)
    });
    let lens: Option<Vec<usize>> =
        input.key_lengths.as_ref().map(|l| (0..shape.batch).map(|i| l.get(i).map_or(0, |&x| x as usize % (shape.kv_len + 1))).collect());
    let mut opts = AttentionOptions::default()
        .causal(input.causal)
        .carried(if input.carry_masked { CarriedScores::Masked } else { CarriedScores::Raw })
        .masked_rows(if input.nan_policy { MaskedRows::Nan } else { MaskedRows::Zero });
    opts.scale = input.scale_bits.map(f32::from_bits);
    opts.mask = mask.as_ref().map(|(values, shape)| AdditiveMask { values, shape: *shape });
    opts.key_lengths = lens.as_deref();
    opts.prev_scores = prev.as_deref();
    opts.running_mean_layer = input.running_mean_layer.map(u32::from);
    let out_len = shape.batch * shape.heads * shape.q_len * shape.value_dim;
    // A perturbed output length must be refused.
    let skew = (input.skew % 3) as usize;
    let valid_scale = opts.scale.is_none_or(f32::is_finite);
    let mut ws = AttentionWorkspace::new();
    for isa in available_isas() {
        let mut kern = Kernels::for_isa(isa).unwrap();
        if input.small_l2 {
            kern = kern.with_caches(Caches { l2: 0, ..kern.caches() });
        }
        let mut out = vec![0.0f32; out_len + skew];
        let mut scores = input.want_scores.then(|| vec![0.0f32; n_scores]);
        let r = kern.attention(&shape, &q, &k, &vv, &mut out, scores.as_deref_mut(), &opts, &mut ws);
        if skew > 0 || !valid_scale {
            let e = r.expect_err("accepted an invalid call");
            assert!(e.arg().is_some(), "{e}");
            continue;
        }
        r.unwrap_or_else(|e| panic!("{isa}: refused a valid call: {e}"));
        let rshape = reference::AttentionShape {
            batch: shape.batch,
            heads: shape.heads,
            kv_heads: shape.kv_heads,
            q_len: shape.q_len,
            kv_len: shape.kv_len,
            head_dim: shape.head_dim,
            value_dim: shape.value_dim,
        };
        let ropts = reference::AttentionOptions {
            scale: opts.scale,
            mask: mask.as_ref().map(|(m, s)| {
                let s = match s {
                    MaskShape::Shared => reference::MaskShape::Shared,
                    MaskShape::PerBatch => reference::MaskShape::PerBatch,
                    MaskShape::PerHead => reference::MaskShape::PerHead,
                    MaskShape::KeyPadding => reference::MaskShape::KeyPadding,
                    _ => unreachable!("a mask shape the oracle does not know"),
                };
                (m.as_slice(), s)
            }),
            key_lengths: lens.as_deref(),
            causal: input.causal,
            prev_scores: prev.as_deref(),
            running_mean_layer: opts.running_mean_layer,
            carry_masked: input.carry_masked,
            masked_rows: if input.nan_policy { reference::MaskedRows::Nan } else { reference::MaskedRows::Zero },
        };
        if let Err(m) = reference::check_attention(&rshape, &q, &k, &vv, &ropts, &out, scores.as_deref()) {
            panic!("{isa}: {m}");
        }
    }
});
