//! The one error type of the crate.

use std::fmt;

use crate::Isa;

/// Why a kernel refused its arguments, or why an ISA cannot be used.
///
/// Every variant names the argument at fault, what was expected and what came,
/// so that the message alone is enough to fix the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A slice length or a shape does not fit the others.
    Shape {
        /// The argument at fault, as named in the function's signature.
        arg: &'static str,
        /// What the other arguments require of it.
        expected: String,
        /// What was passed.
        actual: String,
    },
    /// A scalar parameter is outside its domain (ε ≤ 0, a NaN scale, …).
    Param {
        /// The argument at fault.
        arg: &'static str,
        /// The domain it must lie in.
        expected: String,
        /// What was passed.
        actual: String,
    },
    /// The requested ISA is not supported by this CPU or this build.
    IsaUnavailable {
        /// The ISA that was asked for.
        isa: Isa,
        /// Which features are missing, or why the build lacks the path.
        reason: String,
    },
    /// `KERNELS_ISA` holds a name that is not an ISA.
    UnknownIsa {
        /// The value found.
        name: String,
    },
}

impl Error {
    pub(crate) fn shape(arg: &'static str, expected: impl fmt::Display, actual: impl fmt::Display) -> Self {
        Error::Shape {
            arg,
            expected: expected.to_string(),
            actual: actual.to_string(),
        }
    }

    pub(crate) fn param(arg: &'static str, expected: impl fmt::Display, actual: impl fmt::Display) -> Self {
        Error::Param {
            arg,
            expected: expected.to_string(),
            actual: actual.to_string(),
        }
    }

    /// `Ok` if a length is what its shape gives, else a shape error naming `arg` and `what` the
    /// expected length is made of (`"B·H·Lq·Dk"`).
    pub(crate) fn check_len(arg: &'static str, what: &str, expected: usize, actual: usize) -> Result<(), Error> {
        if expected == actual {
            Ok(())
        } else {
            Err(Error::shape(arg, format!("length {expected} ({what})"), actual))
        }
    }

    /// `a·b·…`, or a shape error naming `arg` if the product overflows `usize`.
    pub(crate) fn product(arg: &'static str, dims: &[usize]) -> Result<usize, Error> {
        dims.iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| Error::shape(arg, "a size that fits in memory", format!("{dims:?} elements")))
    }

    /// The argument this error is about, if it is about one.
    pub fn arg(&self) -> Option<&'static str> {
        match self {
            Error::Shape { arg, .. } | Error::Param { arg, .. } => Some(arg),
            Error::IsaUnavailable { .. } | Error::UnknownIsa { .. } => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Shape { arg, expected, actual } => {
                write!(f, "`{arg}`: expected {expected}, got {actual}")
            }
            Error::Param { arg, expected, actual } => {
                write!(f, "`{arg}`: expected {expected}, got {actual}")
            }
            Error::IsaUnavailable { isa, reason } => write!(f, "ISA `{isa}` is unavailable: {reason}"),
            Error::UnknownIsa { name } => write!(
                f,
                "KERNELS_ISA: expected one of `scalar`, `avx2`, `avx512`, `neon`, got `{name}`"
            ),
        }
    }
}

impl std::error::Error for Error {}
