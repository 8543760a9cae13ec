//! The validated form of a LayerNorm or RMSNorm call, and the public parameters it is built
//! from.

use crate::error::Error;
use crate::parallel::{advance, advance_mut};

/// The residual add in front of the norm of [`add_layer_norm`](crate::add_layer_norm()) and
/// [`add_rms_norm`](crate::add_rms_norm()): `h = α·x + (r + b)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Residual<'a> {
    /// Scales the residual stream `x`; DeepNorm uses `α = (2N)^¼` for an N-layer encoder.
    /// Must be finite. Default 1.
    pub alpha: f32,
    /// A bias of length `d` added to `r` (the last bias of the sublayer, fused here), shared by
    /// all rows.
    pub bias: Option<&'a [f32]>,
}

impl Default for Residual<'_> {
    fn default() -> Self {
        Residual { alpha: 1.0, bias: None }
    }
}

/// Optional per-row statistics written by the `_with_stats` forms (per channel for
/// BatchNorm training): each slice has one entry per row.
#[derive(Debug, Default)]
pub struct RowStats<'a> {
    /// The mean `μ`, rounded to f32.
    pub mean: Option<&'a mut [f32]>,
    /// `rstd = 1/√(σ² + ε)`, rounded to f32.
    pub rstd: Option<&'a mut [f32]>,
}

/// Which norm a [`NormCall`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NormKind {
    Layer,
    Rms,
}

/// A validated LayerNorm or RMSNorm call, plain or with the residual add, in raw form.
#[derive(Clone, Copy)]
pub(crate) struct NormCall<E> {
    pub kind: NormKind,
    pub x: *const E,
    /// The residual branch; null for the plain forms.
    pub r: *const E,
    /// The bias of the residual add (length `d`); null for none.
    pub bias: *const f32,
    pub alpha: f32,
    /// Where the add forms store `h`: the `h` output, `y` (as scratch, f32 only) or `x` (in
    /// place); null for the plain forms and, without an `h` output, for a half type and for
    /// f32 with `stream`.
    pub h: *mut E,
    pub y: *mut E,
    /// `γ` (or RMSNorm's `g`); null for none.
    pub gamma: *const f32,
    /// `β`; null for none (always for RMSNorm).
    pub beta: *const f32,
    /// Per-row outputs; null for none (`mean` always for RMSNorm).
    pub mean: *mut f32,
    pub rstd: *mut f32,
    pub rows: usize,
    pub d: usize,
    pub eps: f32,
    /// Whether the normalize sweeps write `y` (f32) with streaming stores; see [`Stores`].
    ///
    /// [`Stores`]: crate::Stores
    pub stream: bool,
    /// Whether an add form goes by blocks of rows ([`by_blocks`]).
    pub blocks: bool,
    /// Whether short rows of a plain call (or of a block of an add form) go by groups of
    /// rows ([`by_groups`]) where the norm does so.
    pub groups: bool,
    /// Whether rows prefetch the next row's inputs during their statistics sweep; see
    /// [`PREFETCH_MIN`](super::PREFETCH_MIN).
    pub prefetch: bool,
}

impl<E> NormCall<E> {
    /// The call over rows `rows` alone: the same plan (walk, stores, prefetch), so every row
    /// gets the bits it gets in the whole call.
    pub(crate) fn rows(&self, rows: std::ops::Range<usize>) -> NormCall<E> {
        let skip = rows.start * self.d;
        NormCall {
            x: advance(self.x, skip),
            r: advance(self.r, skip),
            h: advance_mut(self.h, skip),
            y: advance_mut(self.y, skip),
            mean: advance_mut(self.mean, rows.start),
            rstd: advance_mut(self.rstd, rows.start),
            rows: rows.len(),
            ..*self
        }
    }
}

/// The arguments of a norm call before validation.
pub(crate) struct NormArgs<'a, 's, E> {
    pub kind: NormKind,
    /// `x` and its length.
    pub x: (*const E, usize),
    /// `out` and its length (equal to `x` in place).
    pub y: (*mut E, usize),
    /// The residual branch `r` with the add's parameters; `None` for the plain forms.
    pub add: Option<(&'a [E], Residual<'a>)>,
    /// The `h` output and its length, if asked for (`x` itself in the in-place add forms).
    pub h: Option<(*mut E, usize)>,
    pub d: usize,
    pub gamma: Option<&'a [f32]>,
    pub beta: Option<&'a [f32]>,
    pub eps: f32,
    pub stats: RowStats<'s>,
}

/// The number of rows of a `[rows, d]` matrix stored in `len` floats.
pub(crate) fn rows_of(len: usize, d: usize) -> Result<usize, Error> {
    if d == 0 {
        if len != 0 {
            return Err(Error::shape("d", format!("a row length dividing x.len() = {len}"), "0"));
        }
        return Ok(0);
    }
    if !len.is_multiple_of(d) {
        return Err(Error::shape(
            "x",
            format!("a length that is a multiple of d = {d}"),
            len,
        ));
    }
    Ok(len / d)
}

/// `Error::Param` naming `eps` unless it is finite and positive.
pub(crate) fn check_eps(eps: f32) -> Result<(), Error> {
    if eps > 0.0 && eps.is_finite() {
        Ok(())
    } else {
        Err(Error::param("eps", "a finite number > 0", eps))
    }
}

/// `Error::Shape` naming `arg` unless `len == want`.
pub(crate) fn check_len(arg: &'static str, len: usize, want: usize, what: &str) -> Result<(), Error> {
    if len == want {
        Ok(())
    } else {
        Err(Error::shape(arg, format!("length {want} ({what})"), len))
    }
}

/// The optional slice `v` has length `want`.
pub(crate) fn check_opt(arg: &'static str, v: Option<&[f32]>, want: usize, what: &str) -> Result<(), Error> {
    v.map_or(Ok(()), |v| check_len(arg, v.len(), want, what))
}

/// The pointer of an optional slice, null when absent.
pub(crate) fn ptr_of(v: Option<&[f32]>) -> *const f32 {
    v.map_or(std::ptr::null(), |v| v.as_ptr())
}

/// The pointer of an optional output slice, null when absent.
pub(crate) fn mut_ptr_of(v: Option<&mut [f32]>) -> *mut f32 {
    v.map_or(std::ptr::null_mut(), |v| v.as_mut_ptr())
}
