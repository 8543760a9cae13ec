//! How the memory-bound kernels write their outputs: through the caches, or around them.
//!
//! An ordinary store to a line that is not in cache first reads the line from memory (a
//! read for ownership), then the line takes a place in every cache level. For an output
//! larger than the last-level cache both are waste: the line is read only to be overwritten,
//! and it evicts data the call still needs (its own input, on a repeated call) before anyone
//! reads it back. A streaming (non-temporal) store writes whole lines to memory without
//! reading them and without keeping them in cache.

use std::sync::OnceLock;

/// How the kernels that honour it write their outputs; see [`Kernels::with_stores`].
///
/// Honoured by the f32 outputs `y` of the LayerNorm and RMSNorm family (`layer_norm`,
/// `add_layer_norm`, `rms_norm`, `add_rms_norm` and their in-place and `with_stats` forms),
/// and by the `h` output of the add forms, on AVX2 and AVX-512, in rows of at least 512
/// values. The scalar and NEON paths, the half types, the in-place `h` (written over the `x`
/// just read) and every other kernel always store ordinarily.
///
/// The choice changes where the output is in the memory hierarchy, never its value: the
/// results are the same bit for bit.
///
/// [`Kernels::with_stores`]: crate::Kernels::with_stores
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Stores {
    /// Streaming stores for calls whose working set (the bytes they read and write) is at
    /// least the size of the last-level cache (the CPU's, or the one given to
    /// [`Kernels::with_cache_size`]), ordinary stores below it: what such a call writes first
    /// is evicted by what it touches last anyway. Where the cache size is unknown, ordinary
    /// stores.
    ///
    /// [`Kernels::with_cache_size`]: crate::Kernels::with_cache_size
    #[default]
    Auto,
    /// Ordinary stores whatever the size: for outputs that the next step reads at once.
    Cached,
    /// Streaming stores whatever the size: for outputs that are not read again soon.
    Streaming,
}

impl Stores {
    /// Whether a call whose working set is `bytes` streams its outputs, on an ISA that has
    /// streaming stores, with a last-level cache of `llc` bytes (`None`: unknown).
    pub(crate) fn streams(self, bytes: usize, llc: Option<usize>) -> bool {
        match self {
            Stores::Auto => llc.is_some_and(|llc| bytes >= llc),
            Stores::Cached => false,
            Stores::Streaming => true,
        }
    }
}

/// The data-cache sizes the kernels plan with, in bytes: what a call's blocking and its
/// stores are derived from (see [`Kernels::with_caches`]).
///
/// [`Kernels::with_caches`]: crate::Kernels::with_caches
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Caches {
    /// The level-1 data cache of one core.
    pub l1: usize,
    /// The level-2 cache of one core.
    pub l2: usize,
    /// The last-level cache, if known: [`Stores::Auto`] streams the outputs of calls whose
    /// working set exceeds it, and stores ordinarily where it is unknown.
    pub llc: Option<usize>,
}

impl Caches {
    /// What a level the CPU does not describe is taken to be: the smallest of current x86 and
    /// Arm server cores, so that blocks sized from it fit everywhere.
    pub const DEFAULT_L1: usize = 32 << 10;
    /// See [`Caches::DEFAULT_L1`].
    pub const DEFAULT_L2: usize = 256 << 10;

    /// The caches this CPU describes (CPUID on x86-64, read once), with the defaults above for
    /// a level it does not describe.
    pub fn detect() -> Caches {
        static CACHES: OnceLock<Caches> = OnceLock::new();
        *CACHES.get_or_init(|| Caches {
            l1: detect(Some(1)).unwrap_or(Caches::DEFAULT_L1),
            l2: detect(Some(2)).unwrap_or(Caches::DEFAULT_L2),
            llc: detect(None),
        })
    }
}

/// The size in bytes of the largest data or unified cache the CPU describes, read once:
/// [`Caches::detect`]'s `llc`.
pub fn last_level_cache() -> Option<usize> {
    Caches::detect().llc
}

/// The size in bytes of the largest data or unified cache of level 2 the CPU describes (each
/// core's own on current x86), read once.
pub fn level2_cache() -> Option<usize> {
    static SIZE: OnceLock<Option<usize>> = OnceLock::new();
    *SIZE.get_or_init(|| detect(Some(2)))
}

/// The largest data or unified cache of CPUID's deterministic cache parameters, of `level`
/// if given: leaf 4 (Intel), else leaf `0x8000_001D` (AMD, whose leaf 4 is reserved and
/// reads as zeros).
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn detect(level: Option<u32>) -> Option<usize> {
    use std::arch::x86_64::__cpuid_count;
    // CPUID is safe on x86-64; the intrinsics became safe functions after this crate's
    // minimum Rust version, hence the `unsafe` that newer compilers find unnecessary.
    #[allow(unused_unsafe)]
    let cpuid = |leaf: u32, sub: u32| unsafe { __cpuid_count(leaf, sub) };
    let largest = |leaf: u32| {
        (0..16)
            .map(|sub| cpuid(leaf, sub))
            // EAX[4:0]: 0 ends the list; 1 data, 2 instruction, 3 unified.
            .take_while(|r| r.eax & 0x1f != 0)
            .filter(|r| r.eax & 0x1f != 2)
            // EAX[7:5]: the level.
            .filter(|r| level.is_none_or(|level| (r.eax >> 5) & 7 == level))
            .map(|r| {
                let ways = (r.ebx >> 22) as usize + 1;
                let partitions = ((r.ebx >> 12) & 0x3ff) as usize + 1;
                let line = (r.ebx & 0xfff) as usize + 1;
                let sets = r.ecx as usize + 1;
                ways * partitions * line * sets
            })
            .max()
    };
    let (basic, extended) = (cpuid(0, 0).eax, cpuid(0x8000_0000, 0).eax);
    (if basic >= 4 { largest(4) } else { None })
        .or_else(|| (extended >= 0x8000_001d).then(|| largest(0x8000_001d)).flatten())
}

/// No cache description is read on other architectures (nor under Miri, which interprets no
/// CPUID): [`Stores::Auto`] stores ordinarily
/// there, which is all their paths do anyway.
#[cfg(any(not(target_arch = "x86_64"), miri))]
fn detect(_level: Option<u32>) -> Option<usize> {
    None
}
