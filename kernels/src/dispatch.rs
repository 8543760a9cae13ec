//! Runtime dispatch: runs an operation on the ISA of a [`Kernels`] value.
//!
//! An operation is a value that can run itself on any vector ISA: [`Op::eval`] is generic over
//! [`Simd`]. [`Kernels::run`] hands it to one `#[target_feature]` function per ISA, which makes
//! the ISA's token and calls `eval`; everything `eval` inlines is then compiled for that ISA.
//! This file names no operation: a kernel module defines its op type, validates its arguments,
//! builds the op and runs it. Each op type gets a function of its own per ISA, so a kernel that
//! picks an instance (a mask or no mask, a bias or none) does so by building a different op.
//! A [`Kernels`] value exists only for an ISA the CPU was checked for, which is what makes the
//! calls sound.

use std::str::FromStr;
use std::sync::OnceLock;

use crate::error::Error;
use crate::isa::{best_isa, missing_features, Isa};
use crate::parallelism::Parallelism;
use crate::simd::Simd;
use crate::stores::{Caches, Stores};

/// An operation the kernels run: the generic body of a kernel with its validated arguments.
pub(crate) trait Op {
    /// What the operation returns.
    type Output;

    /// Runs the operation with the vector ISA of `S`.
    ///
    /// # Safety
    /// What the operation's type documents of its fields (pointers that cover their shapes,
    /// outputs that do not alias inputs).
    unsafe fn eval<S: Simd>(self, s: S) -> Self::Output;
}

/// Defines `mod $module` with the entry function of one ISA, `on`: `op.eval` with that ISA's
/// token. A module each, because the compiler gives the instances of a generic function to the
/// code-generation unit of the module that defines it: so each ISA's kernels are compiled in a
/// unit of their own, in parallel.
macro_rules! entry {
    ($module:ident, $token:ty $(, $features:literal)?) => {
        mod $module {
            use super::Op;
            use crate::simd::Token;

            /// # Safety
            /// The CPU supports the ISA of the token; as [`Op::eval`].
            $(#[target_feature(enable = $features)])?
            #[inline(never)]
            pub(super) unsafe fn on<O: Op>(op: O) -> O::Output {
                // SAFETY: forwarded from the caller; the CPU supports the ISA.
                unsafe { op.eval(<$token as Token>::new_unchecked()) }
            }
        }
    };
}

entry!(scalar, crate::simd::scalar::Scalar);
#[cfg(target_arch = "x86_64")]
entry!(avx2, crate::simd::avx2::Avx2, "avx2,fma,f16c");
#[cfg(target_arch = "x86_64")]
entry!(
    avx512,
    crate::simd::avx512::Avx512,
    "avx512f,avx512bw,avx512dq,avx512vl,fma"
);
#[cfg(target_arch = "aarch64")]
entry!(neon, crate::simd::neon::Neon, "neon");

impl Isa {
    /// `Ok` if this CPU and this build can run the ISA, else an error that says what is missing.
    pub fn check(self) -> Result<(), Error> {
        let missing = missing_features(self);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Error::IsaUnavailable {
                isa: self,
                reason: missing,
            })
        }
    }
}

impl FromStr for Isa {
    type Err = Error;

    /// Parses a name as `KERNELS_ISA` spells it (case-insensitive, surrounding blanks ignored).
    fn from_str(s: &str) -> Result<Self, Error> {
        let name = s.trim().to_ascii_lowercase();
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name() == name)
            .ok_or_else(|| Error::UnknownIsa { name: s.to_string() })
    }
}

/// Whether this build has code for `isa`.
fn built_for(isa: Isa) -> bool {
    match isa {
        Isa::Scalar => true,
        Isa::Avx2 | Isa::Avx512 => cfg!(target_arch = "x86_64"),
        Isa::Neon => cfg!(target_arch = "aarch64"),
    }
}

/// A handle on the kernels of one ISA.
///
/// Obtaining one checks that the CPU supports the ISA; after that, every call runs code
/// compiled for it. `Kernels` is `Copy`, `Send` and `Sync`: keep one, or call the free
/// functions of the crate, which use [`Kernels::detected`].
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
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    isa: Isa,
    stores: Stores,
    /// The caches the plans assume; see [`Kernels::with_caches`].
    caches: Caches,
    parallelism: Parallelism,
}

impl Kernels {
    /// The kernels of `isa`, or [`Error::IsaUnavailable`] naming the missing CPU features.
    pub fn for_isa(isa: Isa) -> Result<Kernels, Error> {
        isa.check()?;
        if !built_for(isa) {
            return Err(Error::IsaUnavailable {
                isa,
                reason: format!("this build for {} has no {isa} path", std::env::consts::ARCH),
            });
        }
        Ok(Kernels {
            isa,
            stores: Stores::Auto,
            caches: Caches::detect(),
            parallelism: Parallelism::Sequential,
        })
    }

    /// The kernels of the most capable ISA of this CPU, ignoring `KERNELS_ISA`.
    pub fn best() -> Kernels {
        Kernels {
            isa: best_isa(),
            stores: Stores::Auto,
            caches: Caches::detect(),
            parallelism: Parallelism::Sequential,
        }
    }

    /// The kernels the free functions use: the ISA named by the `KERNELS_ISA` environment
    /// variable if it is set (an error if it names an unknown ISA or one this CPU lacks),
    /// else [`Kernels::best`]; sequential unless `KERNELS_THREADS` names a thread count
    /// (see [`Kernels::with_parallelism`]). Decided on the first call and cached for the
    /// process.
    pub fn detected() -> Result<Kernels, Error> {
        static DETECTED: OnceLock<Result<Kernels, Error>> = OnceLock::new();
        DETECTED.get_or_init(Kernels::from_env).clone()
    }

    /// What [`Kernels::detected`] would choose now, without the cache.
    pub fn from_env() -> Result<Kernels, Error> {
        let k = match std::env::var("KERNELS_ISA") {
            Ok(name) if !name.trim().is_empty() => Kernels::for_isa(name.parse()?)?,
            _ => Kernels::best(),
        };
        Ok(k.with_parallelism(Parallelism::from_env()?))
    }

    /// The ISA these kernels run on.
    pub fn isa(&self) -> Isa {
        self.isa
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

    /// These kernels, spreading each call over threads as `parallelism` says. Every value
    /// [`Kernels`] makes starts [`Parallelism::Sequential`]: an engine that runs requests on
    /// threads of its own, the usual server, wants no second level of threads below them, and
    /// a library should not start a pool its caller did not ask for. The results are the same
    /// bits for every setting.
    ///
    /// Each kernel splits its work into independent parts (rows, tiles, heads and query
    /// blocks) only where each part is large enough to pay for waking a thread, so small calls
    /// stay on the calling thread. Inside `pool.install(..)` of a rayon `ThreadPool` the parts
    /// run on that pool.
    ///
    /// ```
    /// use kernels::{Kernels, Parallelism, SoftmaxOptions};
    ///
    /// let x: Vec<f32> = (0..1 << 20).map(|i| (i % 97) as f32 * 0.01).collect();
    /// let (mut one, mut all) = (vec![0.0; x.len()], vec![0.0; x.len()]);
    /// let k = Kernels::best();
    /// k.softmax(&x, &mut one, 256, &SoftmaxOptions::default())?;
    /// let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    /// pool.install(|| k.with_parallelism(Parallelism::Rayon(0)).softmax(&x, &mut all, 256, &SoftmaxOptions::default()))?;
    /// assert!(one.iter().zip(&all).all(|(a, b)| a.to_bits() == b.to_bits()));
    /// # Ok::<(), kernels::Error>(())
    /// ```
    pub fn with_parallelism(self, parallelism: Parallelism) -> Kernels {
        Kernels { parallelism, ..self }
    }

    /// How these kernels spread a call over threads.
    pub fn parallelism(&self) -> Parallelism {
        self.parallelism
    }

    /// These kernels, planning for the caches `caches` in place of the ones the CPU describes
    /// ([`Caches::detect`]). The caches decide the blocking of each call and, by its working
    /// set, the streaming stores of [`Stores::Auto`]: for a machine that reports caches it
    /// does not have to itself (a virtual machine shown the whole L3 of a host it shares), or
    /// to see what another machine would run. Like [`Kernels::with_stores`], it changes where
    /// data goes and in what order it is read, never a value: the results are the same bit
    /// for bit.
    ///
    /// ```
    /// use kernels::{Caches, Kernels};
    ///
    /// let zen3 = Caches { l1: 32 << 10, l2: 512 << 10, llc: Some(32 << 20) };
    /// let k = Kernels::best().with_caches(zen3);
    /// assert_eq!(k.caches(), zen3);
    /// assert!(!k.streams((32 << 20) - 1));
    /// ```
    pub fn with_caches(self, caches: Caches) -> Kernels {
        Kernels { caches, ..self }
    }

    /// The caches these kernels plan for.
    pub fn caches(&self) -> Caches {
        self.caches
    }

    /// These kernels, assuming a last-level cache of `bytes` (the other levels unchanged):
    /// [`Kernels::with_caches`] for the last level alone.
    pub fn with_cache_size(self, bytes: usize) -> Kernels {
        let caches = Caches {
            llc: Some(bytes),
            ..self.caches
        };
        Kernels { caches, ..self }
    }

    /// The last-level cache size these kernels assume, if any.
    pub fn cache_size(&self) -> Option<usize> {
        self.caches.llc
    }

    /// Whether a call of these kernels whose working set (the bytes it reads and writes) is
    /// `bytes` writes its outputs with streaming stores, in the kernels that honour
    /// [`Stores`]: never on an ISA without them (scalar, NEON).
    pub fn streams(&self, bytes: usize) -> bool {
        matches!(self.isa, Isa::Avx2 | Isa::Avx512) && self.stores.streams(bytes, self.caches.llc)
    }

    /// Runs `op` on the ISA of these kernels.
    ///
    /// # Safety
    /// As [`Op::eval`] for `op`.
    pub(crate) unsafe fn run<O: Op>(&self, op: O) -> O::Output {
        // SAFETY: `self.isa` was checked against the CPU and this build when `self` was made
        // (`for_isa`, or `best`, which takes an available ISA); the rest is the caller's.
        unsafe {
            match self.isa {
                Isa::Scalar => scalar::on(op),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => avx2::on(op),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => avx512::on(op),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => neon::on(op),
                #[allow(unreachable_patterns)]
                _ => unreachable!("a Kernels value is only made for an ISA of this build"),
            }
        }
    }
}

/// Runs `f` with the kernels of [`Kernels::detected`]: the body of every free function.
pub(crate) fn with_detected<T>(f: impl FnOnce(Kernels) -> Result<T, Error>) -> Result<T, Error> {
    f(Kernels::detected()?)
}
