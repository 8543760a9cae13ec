//! How a LayerNorm or RMSNorm call runs: one pure function of its shape and the machine.

use super::stats::short_vectors;
use crate::element::Element;
use crate::isa::Isa;
use crate::stores::{Caches, Stores};

/// The operands of a LayerNorm or RMSNorm call, as [`plan`] counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NormForm {
    /// `layer_norm`, `rms_norm`: `x` in, `y` out (`inplace`: `y` is `x`).
    Plain { inplace: bool },
    /// `add_layer_norm`, `add_rms_norm`: `x` and `r` in, `y` and the `h` output, if any, out.
    Add { h: HOutput },
}

/// The `h` output of an add form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HOutput {
    /// None (Post-LN).
    None,
    /// A slice of its own (Pre-LN, keeping `x`).
    Separate,
    /// Over `x` (the `_inplace` forms).
    InPlace,
}

/// How a call runs. No field changes a value, only the order of the rows' work and where
/// data goes: every row's bits are those of the row alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NormPlan {
    /// The working set: the bytes the call reads and writes (saturating).
    pub bytes: usize,
    /// Rows short enough to be held in registers go by groups of 16, pass by pass.
    pub groups: bool,
    /// `y`, and a separate `h` output, are written with streaming stores.
    pub stream: bool,
    /// Each row prefetches the next row's inputs into L2 during its statistics sweep.
    pub prefetch: bool,
    /// The add forms: the statistics sweep stores the f32 `h` (to the `h` output, to `y` as
    /// scratch, or over `x`) and the later passes read it back; else they rebuild it.
    pub keep_h: bool,
}

/// Rows shorter than this many lines of f32 (512 values) neither stream nor prefetch: their
/// partial lines, stored ordinarily, stall the streaming stores between them, and such rows
/// come in sequence fast enough for the hardware prefetchers.
const ROW_MIN_LINES: usize = 32;

/// The plan of a call of `rows` rows of `d` values of `E` in `form`, on `isa` with `caches`,
/// storing as `stores` says.
///
/// - By groups where a row fits in half the vector registers ([`short_vectors`]): one row
///   at a time, such a row is one chain of dependent steps longer than its loads.
/// - Streaming stores where `stores` asks for them (by default: a working set of at least the
///   last-level cache, whose outputs would be evicted unread), on f32 outputs on AVX2 and
///   AVX-512, in rows of at least 512 values.
/// - The next row prefetched where the working set reaches the last-level cache (or its size
///   is unknown), in rows of at least 512 values: within the cache the hardware prefetchers
///   do as well without the instructions.
/// - `h` kept for f32 where its place is read back from cache: not where it is streamed.
pub(crate) fn plan<E: Element>(
    form: NormForm,
    rows: usize,
    d: usize,
    isa: Isa,
    caches: Caches,
    stores: Stores,
) -> NormPlan {
    let operands = match form {
        NormForm::Plain { inplace } => 2 - usize::from(inplace),
        NormForm::Add { h } => 3 + usize::from(h == HOutput::Separate),
    };
    let bytes = (operands * size_of::<E>()).saturating_mul(rows.saturating_mul(d));
    let registers = if matches!(isa, Isa::Avx512 | Isa::Neon) { 32 } else { 16 };
    let groups = d <= short_vectors(registers) * isa.lanes();
    let long = d >= ROW_MIN_LINES * 64 / size_of::<f32>();
    let stream = E::IS_F32 && matches!(isa, Isa::Avx2 | Isa::Avx512) && long && stores.streams(bytes, caches.llc);
    let prefetch = long && caches.llc.is_none_or(|llc| bytes >= llc);
    let keep_h = E::IS_F32 && matches!(form, NormForm::Add { h } if h == HOutput::InPlace || !stream);
    NormPlan {
        bytes,
        groups,
        stream,
        prefetch,
        keep_h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    const ZEN3: Caches = Caches {
        l1: 32 << 10,
        l2: 512 << 10,
        llc: Some(32 << 20),
    };
    const ZEN5: Caches = Caches {
        l1: 48 << 10,
        l2: 1 << 20,
        llc: Some(32 << 20),
    };
    const XEON: Caches = Caches {
        l1: 48 << 10,
        l2: 2 << 20,
        llc: Some(105 << 20),
    };
    const ARM: Caches = Caches {
        l1: 64 << 10,
        l2: 1 << 20,
        llc: None,
    };
    const PLAIN: NormForm = NormForm::Plain { inplace: false };
    const X86: [Isa; 2] = [Isa::Avx2, Isa::Avx512];

    fn f32(form: NormForm, rows: usize, d: usize, isa: Isa, caches: Caches) -> NormPlan {
        plan::<f32>(form, rows, d, isa, caches, Stores::Auto)
    }

    #[test]
    fn calls_beyond_the_last_level_cache_stream_and_prefetch() {
        for (caches, isa) in [ZEN3, ZEN5].into_iter().flat_map(|c| X86.map(|i| (c, i))) {
            let p = f32(PLAIN, 4096, 1024, isa, caches);
            assert_eq!(p.bytes, 32 << 20);
            assert!(p.stream && p.prefetch && !p.groups, "{caches:?} {isa}");
            let add = f32(NormForm::Add { h: HOutput::Separate }, 1024, 4096, isa, caches);
            assert!(add.stream && add.prefetch && !add.keep_h);
        }
        // The same bytes fit a Xeon's last-level cache.
        let p = f32(PLAIN, 4096, 1024, Isa::Avx512, XEON);
        assert!(!p.stream && !p.prefetch);
        assert!(f32(PLAIN, 16384, 2048, Isa::Avx512, XEON).stream);
    }

    #[test]
    fn calls_in_cache_store_ordinarily_without_prefetch() {
        for caches in [ZEN3, ZEN5, XEON] {
            for isa in X86 {
                for (rows, d) in [(16, 1024), (4, 4096), (256, 1024)] {
                    let p = f32(NormForm::Add { h: HOutput::None }, rows, d, isa, caches);
                    assert!(!p.stream && !p.prefetch && p.keep_h, "{caches:?} {isa} {rows}x{d}");
                }
            }
        }
    }

    #[test]
    fn short_rows_go_by_groups_as_far_as_half_the_registers_hold() {
        for caches in [ZEN3, ZEN5, XEON, ARM] {
            let groups = |isa, d| f32(PLAIN, 256, d, isa, caches).groups;
            assert!(groups(Isa::Avx512, 64) && groups(Isa::Avx512, 256) && !groups(Isa::Avx512, 257));
            assert!(groups(Isa::Avx2, 64) && !groups(Isa::Avx2, 65));
            assert!(groups(Isa::Neon, 64) && !groups(Isa::Neon, 65));
            assert!(groups(Isa::Scalar, 8) && !groups(Isa::Scalar, 9));
        }
    }

    #[test]
    fn short_rows_neither_stream_nor_prefetch() {
        for caches in [ZEN3, ZEN5, ARM] {
            let p = f32(PLAIN, 1 << 17, 256, Isa::Avx512, caches);
            assert!(!p.stream && !p.prefetch);
            assert!(f32(PLAIN, 1 << 15, 512, Isa::Avx512, caches).prefetch);
        }
    }

    #[test]
    fn streaming_needs_an_isa_that_has_it_and_f32_outputs() {
        let p = f32(PLAIN, 4096, 1024, Isa::Neon, ARM);
        assert!(!p.stream && p.prefetch, "an unknown last-level cache prefetches");
        for isa in [Isa::Scalar, Isa::Neon] {
            assert!(!plan::<f32>(PLAIN, 1, 1024, isa, ZEN5, Stores::Streaming).stream);
        }
        assert!(plan::<f32>(PLAIN, 1, 1024, Isa::Avx2, ZEN5, Stores::Streaming).stream);
        assert!(!plan::<f32>(PLAIN, 1 << 20, 1024, Isa::Avx2, ZEN5, Stores::Cached).stream);
        let half = plan::<f16>(
            NormForm::Add { h: HOutput::InPlace },
            8192,
            1024,
            Isa::Avx512,
            ZEN3,
            Stores::Auto,
        );
        assert!(!half.stream && !half.keep_h && half.prefetch);
    }

    #[test]
    fn in_place_add_forms_keep_h_even_streaming() {
        for caches in [ZEN3, ZEN5] {
            let p = f32(NormForm::Add { h: HOutput::InPlace }, 4096, 1024, Isa::Avx512, caches);
            assert!(p.stream && p.keep_h && p.bytes == 48 << 20);
            assert!(!f32(NormForm::Add { h: HOutput::None }, 4096, 1024, Isa::Avx2, caches).keep_h);
        }
        assert_eq!(
            f32(NormForm::Plain { inplace: true }, 4096, 1024, Isa::Avx2, ZEN5).bytes,
            16 << 20
        );
    }
}
