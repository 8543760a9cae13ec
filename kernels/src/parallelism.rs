//! The thread setting of a [`Kernels`] value: one thread, or a rayon pool (see
//! `parallel.rs` for how calls are split).
//!
//! [`Kernels`]: crate::Kernels

use crate::error::Error;

/// Whether a [`Kernels`] value runs each call on one thread or spreads it over several; see
/// [`Kernels::with_parallelism`].
///
/// The outputs are the same bits for every setting: a call is split only into parts that
/// compute their outputs exactly as the whole call would (no reduction is split), and the
/// parts write disjoint outputs.
///
/// [`Kernels`]: crate::Kernels
/// [`Kernels::with_parallelism`]: crate::Kernels::with_parallelism
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Parallelism {
    /// Every call on the calling thread.
    #[default]
    Sequential,
    /// Calls large enough to pay for it are split into up to this many parts, run on the rayon
    /// pool the call is made from: the caller's own pool inside `ThreadPool::install`, the
    /// global pool elsewhere. 0 means one part per thread of that pool.
    #[cfg(feature = "rayon")]
    Rayon(usize),
}

impl Parallelism {
    /// The most parts a call is split into: 1 for [`Parallelism::Sequential`].
    pub fn threads(self) -> usize {
        match self {
            Parallelism::Sequential => 1,
            #[cfg(feature = "rayon")]
            Parallelism::Rayon(0) => rayon::current_num_threads(),
            #[cfg(feature = "rayon")]
            Parallelism::Rayon(n) => n,
        }
    }

    /// The setting `KERNELS_THREADS` names for the free functions: unset or empty for
    /// [`Parallelism::Sequential`], a count of threads otherwise (0: all of the pool's).
    pub(crate) fn from_env() -> Result<Parallelism, Error> {
        match std::env::var("KERNELS_THREADS") {
            Ok(v) if !v.trim().is_empty() => {
                let n: usize = v
                    .trim()
                    .parse()
                    .map_err(|_| Error::param("KERNELS_THREADS", "a count of threads", &v))?;
                Parallelism::with_threads(n)
            }
            _ => Ok(Parallelism::Sequential),
        }
    }

    /// `Rayon(n)`, or `Sequential` for `n = 1`; without the `rayon` feature, an error for any
    /// other `n`.
    fn with_threads(n: usize) -> Result<Parallelism, Error> {
        #[cfg(feature = "rayon")]
        {
            Ok(if n == 1 {
                Parallelism::Sequential
            } else {
                Parallelism::Rayon(n)
            })
        }
        #[cfg(not(feature = "rayon"))]
        {
            if n == 1 {
                Ok(Parallelism::Sequential)
            } else {
                Err(Error::param(
                    "KERNELS_THREADS",
                    "1 (this build has no rayon feature)",
                    n,
                ))
            }
        }
    }
}
