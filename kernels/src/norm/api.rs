//! The `Kernels` methods of LayerNorm and RMSNorm: validation, the plan of a call, and the
//! choice of instance (a row op and a walk) run on the ISA.

use super::call::{
    check_eps, check_len, check_opt, mut_ptr_of, ptr_of, rows_of, NormArgs, NormCall, NormKind, Residual, RowStats,
};
use super::layer_norm::{Layer, LayerNormOptions};
use super::rms_norm::{Rms, RmsNormOptions};
use super::rows::{walks, BLOCKS_MAX_D, GROUPS_MAX_BYTES};
use super::stats::PREFETCH_MIN;
use crate::dispatch::Kernels;
use crate::element::{in_place, Element, PerElement, Typed};
use crate::error::Error;

/// Rows shorter than this are never streamed: a row whose ends are not vector-aligned leaves
/// a partial line at each end, written by ordinary stores, and in short rows those stall the
/// streaming stores around them.
const STREAM_MIN_D: usize = 512;

/// The bytes a norm call reads and writes: `x`, `r`, and the outputs `y` and `h` where they
/// are not `x` itself.
fn working_set<E>(a: &NormArgs<E>, x: *const E, len: usize) -> usize {
    let distinct = |p: *mut E| usize::from(p.cast_const() != x);
    let operands = 1 + distinct(a.y.0) + usize::from(a.add.is_some()) + a.h.map_or(0, |(h, _)| distinct(h));
    (operands * std::mem::size_of::<E>()).saturating_mul(len)
}

impl Kernels {
    /// Validates `a` and runs the call.
    pub(crate) fn norm<E: Element>(&self, a: NormArgs<E>) -> Result<(), Error> {
        let (x, len) = a.x;
        let rows = rows_of(len, a.d)?;
        check_len("out", a.y.1, len, "as x")?;
        let mut r = std::ptr::null();
        let mut bias = std::ptr::null();
        let mut alpha = 1.0;
        if let Some((rr, res)) = a.add {
            check_len("r", rr.len(), len, "as x")?;
            check_opt("bias", res.bias, a.d, "d")?;
            if !res.alpha.is_finite() {
                return Err(Error::param("alpha", "a finite number", res.alpha));
            }
            r = rr.as_ptr();
            bias = ptr_of(res.bias);
            alpha = res.alpha;
        }
        if let Some((_, h_len)) = a.h {
            check_len("h", h_len, len, "as x")?;
        }
        check_opt(
            if a.kind == NormKind::Layer { "gamma" } else { "gain" },
            a.gamma,
            a.d,
            "d",
        )?;
        check_opt("beta", a.beta, a.d, "d")?;
        check_eps(a.eps)?;
        let bytes = working_set(&a, x, len);
        let stream = E::IS_F32 && a.d >= STREAM_MIN_D && self.streams(bytes);
        // Where the cache size is unknown, the rows prefetch and the add forms go by blocks.
        let llc = self.cache_size();
        let prefetch = a.d >= PREFETCH_MIN && llc.is_none_or(|llc| bytes >= llc);
        // Short f32 rows of the add forms go by blocks when the call fits the last-level
        // cache (see `by_blocks`; `h` then always has a place: the output, `y` or `x`).
        let blocks = E::IS_F32 && a.add.is_some() && a.d <= BLOCKS_MAX_D && llc.is_none_or(|llc| bytes < llc);
        let groups = bytes <= GROUPS_MAX_BYTES;
        let RowStats { mean, rstd } = a.stats;
        check_opt("mean", mean.as_deref(), rows, "rows")?;
        check_opt("rstd", rstd.as_deref(), rows, "rows")?;
        let h = match (a.add.is_some(), a.h) {
            (false, _) => std::ptr::null_mut(),
            (true, Some((h, _))) => h,
            // Without an `h` output, `y` holds `h` between the two sweeps in f32; a half type
            // rebuilds `h` in the normalize sweep instead (a stored `h` would be rounded), and
            // so does f32 when `y` is streamed (its lines would be cached as scratch first).
            (true, None) if E::IS_F32 && !stream => a.y.0,
            (true, None) => std::ptr::null_mut(),
        };
        let call = NormCall {
            kind: a.kind,
            x,
            r,
            bias,
            alpha,
            h,
            y: a.y.0,
            gamma: ptr_of(a.gamma),
            beta: ptr_of(a.beta),
            mean: mut_ptr_of(mean),
            rstd: mut_ptr_of(rstd),
            rows,
            d: a.d,
            eps: a.eps,
            stream,
            blocks,
            groups,
            prefetch,
        };
        if rows > 0 {
            // SAFETY: every pointer covers what `NormCall` says, as checked above; outputs alias
            // inputs only where the in-place forms put `y` (or `h`) on `x`, which the sweeps
            // allow.
            unsafe { self.run_norm(E::typed(call)) }
        }
        Ok(())
    }

    /// LayerNorm of each row of `x` (`[rows, d]`) into `out`. See
    /// [`layer_norm`](crate::layer_norm()).
    pub fn layer_norm<E: Element>(
        &self,
        x: &[E],
        out: &mut [E],
        d: usize,
        opts: &LayerNormOptions,
    ) -> Result<(), Error> {
        self.layer_norm_with_stats(x, out, d, opts, RowStats::default())
    }

    /// LayerNorm of each row of `x` (`[rows, d]`), in place.
    pub fn layer_norm_inplace<E: Element>(&self, x: &mut [E], d: usize, opts: &LayerNormOptions) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        self.norm(NormArgs {
            kind: NormKind::Layer,
            x: (src, len),
            y: (dst, len),
            add: None,
            h: None,
            d,
            gamma: opts.gamma,
            beta: opts.beta,
            eps: opts.eps,
            stats: RowStats::default(),
        })
    }

    /// LayerNorm of each row of `x` into `out`, with the per-row mean and rstd. See
    /// [`layer_norm`](crate::layer_norm()).
    pub fn layer_norm_with_stats<E: Element>(
        &self,
        x: &[E],
        out: &mut [E],
        d: usize,
        opts: &LayerNormOptions,
        stats: RowStats,
    ) -> Result<(), Error> {
        self.norm(NormArgs {
            kind: NormKind::Layer,
            x: (x.as_ptr(), x.len()),
            y: (out.as_mut_ptr(), out.len()),
            add: None,
            h: None,
            d,
            gamma: opts.gamma,
            beta: opts.beta,
            eps: opts.eps,
            stats,
        })
    }

    /// `h = α·x + (r + b)`, `out = LayerNorm(h)`, `h` written to `h` if given. See
    /// [`add_layer_norm`](crate::add_layer_norm()).
    #[allow(clippy::too_many_arguments)]
    pub fn add_layer_norm<E: Element>(
        &self,
        x: &[E],
        r: &[E],
        out: &mut [E],
        h: Option<&mut [E]>,
        d: usize,
        residual: &Residual,
        opts: &LayerNormOptions,
    ) -> Result<(), Error> {
        self.add_layer_norm_with_stats(x, r, out, h, d, residual, opts, RowStats::default())
    }

    /// [`add_layer_norm`](Self::add_layer_norm) with the residual stream updated in place:
    /// `x ← α·x + (r + b)` (that is, `h`), `out = LayerNorm(x)`.
    pub fn add_layer_norm_inplace<E: Element>(
        &self,
        x: &mut [E],
        r: &[E],
        out: &mut [E],
        d: usize,
        residual: &Residual,
        opts: &LayerNormOptions,
    ) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        self.norm(NormArgs {
            kind: NormKind::Layer,
            x: (src, len),
            y: (out.as_mut_ptr(), out.len()),
            add: Some((r, *residual)),
            h: Some((dst, len)),
            d,
            gamma: opts.gamma,
            beta: opts.beta,
            eps: opts.eps,
            stats: RowStats::default(),
        })
    }

    /// [`add_layer_norm`](Self::add_layer_norm) with the per-row mean and rstd of `h`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_layer_norm_with_stats<E: Element>(
        &self,
        x: &[E],
        r: &[E],
        out: &mut [E],
        h: Option<&mut [E]>,
        d: usize,
        residual: &Residual,
        opts: &LayerNormOptions,
        stats: RowStats,
    ) -> Result<(), Error> {
        self.norm(NormArgs {
            kind: NormKind::Layer,
            x: (x.as_ptr(), x.len()),
            y: (out.as_mut_ptr(), out.len()),
            add: Some((r, *residual)),
            h: h.map(|h| (h.as_mut_ptr(), h.len())),
            d,
            gamma: opts.gamma,
            beta: opts.beta,
            eps: opts.eps,
            stats,
        })
    }
}

/// The LayerNorm and RMSNorm calls of every storage type.
struct Norm;

impl PerElement for Norm {
    type Of<E: Element> = NormCall<E>;
}

impl Kernels {
    /// Runs a validated call. Not generic: the kernel is compiled in this crate (see
    /// [`Typed`]).
    ///
    /// # Safety
    /// As [`norm_rows`].
    unsafe fn run_norm(&self, call: Typed<Norm>) {
        // SAFETY: forwarded.
        unsafe {
            match call {
                Typed::F32(call) => norm_rows(self, &call),
                Typed::F16(call) => norm_rows(self, &call),
                Typed::Bf16(call) => norm_rows(self, &call),
            }
        }
    }
}

/// Entry of the generic bodies of LayerNorm and RMSNorm: picks the instance for the call, an
/// op ([`RowOp`]) and a walk over the rows ([`Walk`]), and runs it on the ISA of `k`.
///
/// # Safety
/// `call` is validated: `x`, `y` (and `r`, and `h` unless null, for the add forms) cover `rows·d` elements,
/// `gamma`, `beta`, `bias` are null or cover `d`, `mean`, `rstd` null or cover `rows`; `y`
/// and `h` overlap `x` only by being equal to it.
///
/// One instance per norm serves every combination of parameters: an absent `γ` (or gain)
/// becomes a row of ones and an absent `β` a row of −0, whose operations leave every bit as
/// it would be without them (`v·1 = v`, `v + (−0) = v`, also for ±0 and in the f64 path).
/// Instances per combination made the norms the largest part of the crate's build (its time
/// and peak memory); the neutral rows cost the calls that omit a parameter one allocation of
/// `d` floats and the loads, nothing to the others.
unsafe fn norm_rows<E: Element>(k: &Kernels, call: &NormCall<E>) {
    let neutral = |p: *const f32, v: f32| p.is_null().then(|| vec![v; call.d]);
    let ones = neutral(call.gamma, 1.0);
    let neg_zeros = match call.kind {
        NormKind::Layer => neutral(call.beta, -0.0),
        NormKind::Rms => None,
    };
    let call = NormCall {
        gamma: ones.as_ref().map_or(call.gamma, |v| v.as_ptr()),
        beta: neg_zeros.as_ref().map_or(call.beta, |v| v.as_ptr()),
        ..*call
    };
    // SAFETY: forwarded from the caller; `gamma` (and `beta` for LayerNorm) now cover `d`.
    unsafe {
        match call.kind {
            NormKind::Layer => walks::<E, Layer>(k, &call),
            NormKind::Rms => walks::<E, Rms>(k, &call),
        }
    }
}

impl Kernels {
    /// RMSNorm of each row of `x` (`[rows, d]`) into `out`. See [`rms_norm`](crate::rms_norm()).
    pub fn rms_norm<E: Element>(&self, x: &[E], out: &mut [E], d: usize, opts: &RmsNormOptions) -> Result<(), Error> {
        self.norm(rms_args(
            (x.as_ptr(), x.len()),
            (out.as_mut_ptr(), out.len()),
            None,
            None,
            d,
            opts,
        ))
    }

    /// RMSNorm of each row of `x` (`[rows, d]`), in place.
    pub fn rms_norm_inplace<E: Element>(&self, x: &mut [E], d: usize, opts: &RmsNormOptions) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        self.norm(rms_args((src, len), (dst, len), None, None, d, opts))
    }

    /// `h = α·x + (r + b)`, `out = RMSNorm(h)`, `h` written to `h` if given. See
    /// [`add_rms_norm`](crate::add_rms_norm()).
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm<E: Element>(
        &self,
        x: &[E],
        r: &[E],
        out: &mut [E],
        h: Option<&mut [E]>,
        d: usize,
        residual: &Residual,
        opts: &RmsNormOptions,
    ) -> Result<(), Error> {
        self.norm(rms_args(
            (x.as_ptr(), x.len()),
            (out.as_mut_ptr(), out.len()),
            Some((r, *residual)),
            h.map(|h| (h.as_mut_ptr(), h.len())),
            d,
            opts,
        ))
    }

    /// [`add_rms_norm`](Self::add_rms_norm) with the residual stream updated in place:
    /// `x ← α·x + (r + b)`, `out = RMSNorm(x)`.
    pub fn add_rms_norm_inplace<E: Element>(
        &self,
        x: &mut [E],
        r: &[E],
        out: &mut [E],
        d: usize,
        residual: &Residual,
        opts: &RmsNormOptions,
    ) -> Result<(), Error> {
        let (src, dst, len) = in_place(x);
        self.norm(rms_args(
            (src, len),
            (out.as_mut_ptr(), out.len()),
            Some((r, *residual)),
            Some((dst, len)),
            d,
            opts,
        ))
    }
}

fn rms_args<'a, E>(
    x: (*const E, usize),
    y: (*mut E, usize),
    add: Option<(&'a [E], Residual<'a>)>,
    h: Option<(*mut E, usize)>,
    d: usize,
    opts: &RmsNormOptions<'a>,
) -> NormArgs<'a, 'static, E> {
    NormArgs {
        kind: NormKind::Rms,
        x,
        y,
        add,
        h,
        d,
        gamma: opts.gain,
        beta: None,
        eps: opts.eps,
        stats: RowStats::default(),
    }
}
