//! Runtime dispatch: one table of entry points per ISA, chosen once and cached.
//!
//! Each table's entries are thin `#[target_feature]` functions that instantiate the generic
//! bodies with the ISA's token, so everything below them is compiled for that ISA. (LayerNorm
//! and RMSNorm pick their instance first, then enter one such function per instance: see
//! [`crate::norm::NormEntry`].) A
//! [`Kernels`] value holds a table only after its ISA was checked, which is what makes the
//! calls through it sound.

use std::sync::OnceLock;

use crate::attention::AttentionCall;
use crate::gau::GauCall;
use crate::norm::{BatchNormCall, NormCall};
use crate::softmax::SoftmaxCall;
use crate::{Element, Error, Isa, Stores};
use half::{bf16, f16};

/// The entry points of one ISA. Every function requires its ISA to be supported.
pub(crate) struct Table {
    pub isa: Isa,
    /// Packs `B[k, n]` (row stride `ldb`) into the panels of this ISA's GEMM tile.
    pub pack_panels: unsafe fn(*const f32, usize, usize, usize, *mut f32),
    /// Columns of one of those panels.
    pub panel: usize,
    pub f32: Entries<f32>,
    pub f16: Entries<f16>,
    pub bf16: Entries<bf16>,
}

/// The entry points of one ISA for tensors stored as `E` (see [`Element`]).
pub(crate) struct Entries<E> {
    pub exp: unsafe fn(*const E, *mut E, usize),
    pub sigmoid: unsafe fn(*const E, *mut E, usize),
    pub swish: unsafe fn(*const E, *mut E, usize),
    pub widen: unsafe fn(*const E, *mut f32, usize),
    pub narrow: unsafe fn(*const f32, *mut E, usize),
    pub softmax: unsafe fn(&SoftmaxCall<E>),
    pub attention: unsafe fn(&AttentionCall<E>),
    pub gau: unsafe fn(&GauCall<E>),
    pub norm: unsafe fn(&NormCall<E>),
    pub batch_norm: unsafe fn(&BatchNormCall<E>),
}

/// Defines `mod $name` with the entry points of one ISA and its `TABLE`.
macro_rules! isa_table {
    ($name:ident, $isa:expr, $token:ty $(, features = $features:literal)?) => {
        pub(crate) mod $name {
            use super::*;
            use crate::simd::Token;

            type S = $token;

            /// # Safety
            /// The CPU supports the ISA of `S`, and the callers' pointer contracts hold.
            #[inline(always)]
            unsafe fn token() -> S {
                // SAFETY: forwarded from the entry points' callers.
                unsafe { S::new_unchecked() }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn exp<E: Element>(src: *const E, dst: *mut E, n: usize) {
                // SAFETY: reached only through a `Kernels` of this ISA, with checked slices.
                unsafe { crate::math::exp::exp_row(token(), src, dst, n) }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn sigmoid<E: Element>(src: *const E, dst: *mut E, n: usize) {
                // SAFETY: reached only through a `Kernels` of this ISA, with checked slices.
                unsafe { crate::math::activation::sigmoid_row(token(), src, dst, n) }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn swish<E: Element>(src: *const E, dst: *mut E, n: usize) {
                // SAFETY: reached only through a `Kernels` of this ISA, with checked slices.
                unsafe { crate::math::activation::swish_row(token(), src, dst, n) }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn softmax<E: Element>(call: &SoftmaxCall<E>) {
                // SAFETY: reached only through a `Kernels` of this ISA, with a checked call.
                unsafe { crate::softmax::softmax_rows(token(), call) }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn widen<E: Element>(src: *const E, dst: *mut f32, n: usize) {
                // SAFETY: reached only through a `Kernels` of this ISA, with checked slices.
                unsafe { crate::math::map_row(token(), src, dst, n, crate::math::Identity) }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn narrow<E: Element>(src: *const f32, dst: *mut E, n: usize) {
                // SAFETY: reached only through a `Kernels` of this ISA, with checked slices.
                unsafe { crate::math::map_row(token(), src, dst, n, crate::math::Identity) }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn attention<E: Element>(call: &AttentionCall<E>) {
                // SAFETY: reached only through a `Kernels` of this ISA, with a checked call.
                unsafe { crate::gemm::Tile::attention(token(), call) }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn gau<E: Element>(call: &GauCall<E>) {
                // SAFETY: reached only through a `Kernels` of this ISA, with a checked call.
                unsafe { crate::gemm::Tile::gau(token(), call) }
            }

            /// The LayerNorm and RMSNorm instances of this ISA, each a function of its own.
            struct Norms;

            impl crate::norm::NormEntry for Norms {
                #[inline(always)]
                unsafe fn run<E: Element, Op: crate::norm::RowOp, W: crate::norm::Walk>(call: &NormCall<E>) {
                    // SAFETY: forwarded from `norm_rows`, reached only through `norm` below.
                    unsafe { norm_instance::<E, Op, W>(call) }
                }
            }

            $(#[target_feature(enable = $features)])?
            #[inline(never)]
            unsafe fn norm_instance<E: Element, Op: crate::norm::RowOp, W: crate::norm::Walk>(
                call: &NormCall<E>,
            ) {
                // SAFETY: forwarded.
                unsafe { crate::norm::walk_rows::<S, E, Op, W>(token(), call) }
            }

            unsafe fn norm<E: Element>(call: &NormCall<E>) {
                // SAFETY: reached only through a `Kernels` of this ISA, with a checked call.
                unsafe { crate::norm::norm_rows::<E, Norms>(call) }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn batch_norm<E: Element>(call: &BatchNormCall<E>) {
                // SAFETY: reached only through a `Kernels` of this ISA, with a checked call.
                unsafe { crate::norm::batch_norm_call(token(), call) }
            }

            $(#[target_feature(enable = $features)])?
            unsafe fn pack_panels(b: *const f32, ldb: usize, k: usize, n: usize, dst: *mut f32) {
                // SAFETY: reached only through a `Kernels` of this ISA, with checked slices.
                unsafe { crate::gemm::Tile::pack_panels(token(), b, ldb, k, n, dst) }
            }

            const fn entries<E: Element>() -> Entries<E> {
                Entries {
                    exp: exp::<E>,
                    sigmoid: sigmoid::<E>,
                    swish: swish::<E>,
                    widen: widen::<E>,
                    narrow: narrow::<E>,
                    softmax: softmax::<E>,
                    attention: attention::<E>,
                    gau: gau::<E>,
                    norm: norm::<E>,
                    batch_norm: batch_norm::<E>,
                }
            }

            pub(crate) static TABLE: Table = Table {
                isa: $isa,
                pack_panels,
                panel: <S as crate::gemm::Tile>::NR,
                f32: entries::<f32>(),
                f16: entries::<f16>(),
                bf16: entries::<bf16>(),
            };
        }
    };
}

isa_table!(scalar, Isa::Scalar, crate::simd::scalar::Scalar);
#[cfg(target_arch = "x86_64")]
isa_table!(avx2, Isa::Avx2, crate::simd::avx2::Avx2, features = "avx2,fma,f16c");
#[cfg(target_arch = "x86_64")]
isa_table!(
    avx512,
    Isa::Avx512,
    crate::simd::avx512::Avx512,
    features = "avx512f,avx512bw,avx512dq,avx512vl,fma"
);
#[cfg(target_arch = "aarch64")]
isa_table!(neon, Isa::Neon, crate::simd::neon::Neon, features = "neon");

/// The table of `isa`, if this build has one.
fn table_of(isa: Isa) -> Option<&'static Table> {
    match isa {
        Isa::Scalar => Some(&scalar::TABLE),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => Some(&avx2::TABLE),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Some(&avx512::TABLE),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => Some(&neon::TABLE),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// A handle on the kernels of one ISA.
///
/// Obtaining one checks that the CPU supports the ISA; after that, every call is one indirect
/// call into code compiled for it. `Kernels` is `Copy`, `Send` and `Sync`: keep one, or call
/// the free functions of the crate, which use [`Kernels::detected`].
///
/// ```
/// use kernels::{Isa, Kernels, SoftmaxOptions};
///
/// // Run the portable path explicitly, e.g. to reproduce a result bit for bit.
/// let k = Kernels::for_isa(Isa::Scalar)?;
/// let mut y = [0.0; 4];
/// k.softmax(&[1.0, 2.0, 3.0, 4.0], &mut y, 4, &SoftmaxOptions::default())?;
/// assert!((y.iter().sum::<f32>() - 1.0).abs() < 1e-6);
/// # Ok::<(), kernels::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Kernels {
    table: &'static Table,
    stores: Stores,
    /// The last-level cache size the heuristics assume; see [`Kernels::with_cache_size`].
    cache: Option<usize>,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("isa", &self.isa())
            .field("stores", &self.stores)
            .field("cache", &self.cache)
            .finish()
    }
}

impl Kernels {
    /// The kernels of `isa`, or [`Error::IsaUnavailable`] naming the missing CPU features.
    pub fn for_isa(isa: Isa) -> Result<Kernels, Error> {
        isa.check()?;
        let table = table_of(isa).ok_or_else(|| Error::IsaUnavailable {
            isa,
            reason: format!("this build for {} has no {isa} path", std::env::consts::ARCH),
        })?;
        Ok(Kernels {
            table,
            stores: Stores::Auto,
            cache: crate::stores::last_level_cache(),
        })
    }

    /// The kernels of the most capable ISA of this CPU, ignoring `KERNELS_ISA`.
    pub fn best() -> Kernels {
        Kernels::for_isa(crate::best_isa()).expect("the best ISA is available by construction")
    }

    /// The kernels the free functions use: the ISA named by the `KERNELS_ISA` environment
    /// variable if it is set (an error if it names an unknown ISA or one this CPU lacks),
    /// else [`Kernels::best`]. Decided on the first call and cached for the process.
    pub fn detected() -> Result<Kernels, Error> {
        static DETECTED: OnceLock<Result<Kernels, Error>> = OnceLock::new();
        DETECTED.get_or_init(Kernels::from_env).clone()
    }

    /// What [`Kernels::detected`] would choose now, without the cache.
    pub fn from_env() -> Result<Kernels, Error> {
        match std::env::var("KERNELS_ISA") {
            Ok(name) if !name.trim().is_empty() => Kernels::for_isa(name.parse()?),
            _ => Ok(Kernels::best()),
        }
    }

    /// The ISA these kernels run on.
    pub fn isa(&self) -> Isa {
        self.table.isa
    }

    /// These kernels, writing their outputs as `stores` says (the default is
    /// [`Stores::Auto`]). Only where the output goes in the memory hierarchy changes, never
    /// a value.
    ///
    /// ```
    /// use kernels::{Kernels, LayerNormOptions, Stores};
    ///
    /// // An engine whose next layer reads `y` at once keeps it in cache.
    /// let k = Kernels::best().with_stores(Stores::Cached);
    /// let (x, mut y) = (vec![1.0f32, 2.0, 3.0, 4.0], vec![0.0; 4]);
    /// k.layer_norm(&x, &mut y, 4, &LayerNormOptions::default())?;
    /// assert!(!k.streams(usize::MAX));
    /// # Ok::<(), kernels::Error>(())
    /// ```
    pub fn with_stores(self, stores: Stores) -> Kernels {
        Kernels { stores, ..self }
    }

    /// How these kernels write their outputs.
    pub fn stores(&self) -> Stores {
        self.stores
    }

    /// These kernels, assuming a last-level cache of `bytes` in place of the one the CPU
    /// describes ([`last_level_cache`](crate::last_level_cache)). The size decides, for each
    /// call by its working set: the streaming stores of [`Stores::Auto`], and in the norms
    /// whether long rows prefetch the next row and short rows of the add forms go by blocks.
    /// For a machine that reports a cache it does not have to itself: a virtual machine
    /// shown the whole L3 of a host it shares. Like [`Kernels::with_stores`], it changes
    /// where data goes and in what order it is read, never a value: the results are the same
    /// bit for bit.
    ///
    /// ```
    /// use kernels::Kernels;
    ///
    /// let k = Kernels::best().with_cache_size(32 << 20);
    /// assert_eq!(k.cache_size(), Some(32 << 20));
    /// assert!(!k.streams((32 << 20) - 1));
    /// ```
    pub fn with_cache_size(self, bytes: usize) -> Kernels {
        Kernels {
            cache: Some(bytes),
            ..self
        }
    }

    /// The last-level cache size these kernels assume: the one given to
    /// [`Kernels::with_cache_size`], else the one the CPU describes, if any.
    pub fn cache_size(&self) -> Option<usize> {
        self.cache
    }

    /// Whether a call of these kernels whose working set (the bytes it reads and writes) is
    /// `bytes` writes its outputs with streaming stores, in the kernels that honour
    /// [`Stores`]: never on an ISA without them (scalar, NEON).
    pub fn streams(&self, bytes: usize) -> bool {
        matches!(self.isa(), Isa::Avx2 | Isa::Avx512) && self.stores.streams(bytes, self.cache)
    }

    /// Packs `B[k, n]` (row stride `ldb`) into the panels of this ISA's GEMM tile, into
    /// `dst`, which it resizes to their length.
    pub(crate) fn pack_panels(&self, b: &[f32], ldb: usize, k: usize, n: usize, dst: &mut Vec<f32>) {
        assert!(
            ldb >= n && (k == 0 || n == 0 || (k - 1) * ldb + n <= b.len()),
            "pack_panels: B too short"
        );
        dst.clear();
        dst.resize(crate::gemm::packed_len(k, n, self.table.panel), 0.0);
        // SAFETY: the table's ISA was checked when `self` was made; `b` covers `k` rows of
        // `ldb ≥ n` floats (asserted); `dst` holds `packed_len` floats.
        unsafe { (self.table.pack_panels)(b.as_ptr(), ldb, k, n, dst.as_mut_ptr()) }
    }

    /// The entry points for tensors stored as `E`.
    pub(crate) fn entries<E: Element>(&self) -> &'static Entries<E> {
        E::entries(self.table)
    }
}
