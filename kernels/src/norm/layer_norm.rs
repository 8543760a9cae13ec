//! LayerNorm and the fused Add & LayerNorm; the call shared with RMSNorm and its row loops.

use super::{
    check_eps, check_len, check_opt, fits_f32, group_m2_of, group_means_of, group_row_dev, group_row_sum, is_short,
    load_n, moments, moments_f64, mut_ptr_of, ptr_of, rstd_of, short_block, write_span, AddResidual, Affine,
    GroupMeans, Idle, Output, Pending, Plain, RowSource, Source, Values, ACC, BLOCK, GROUP, WIDE,
};
use std::marker::PhantomData;

use crate::dispatch::Kernels;
use crate::element::{Element, PerElement, Typed};
use crate::error::Error;
use crate::simd::Simd;

/// Options of [`layer_norm`](crate::layer_norm()) and
/// [`add_layer_norm`](crate::add_layer_norm()): the affine parameters and ε.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerNormOptions<'a> {
    /// The gain `γ`, length `d`; absent means 1 (and saves its loads and multiplications).
    pub gamma: Option<&'a [f32]>,
    /// The bias `β`, length `d`; absent means 0.
    pub beta: Option<&'a [f32]>,
    /// Added to the variance; must be finite and > 0. Default `1e-5` (PyTorch's).
    pub eps: f32,
}

impl Default for LayerNormOptions<'_> {
    fn default() -> Self {
        LayerNormOptions {
            gamma: None,
            beta: None,
            eps: 1e-5,
        }
    }
}

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
    /// Whether the normalize sweeps fetch the lines of `y` they write next for ownership
    /// ahead of their stores; see [`PREFETCH_Y_L2S`].
    pub prefetch_y: bool,
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

/// f32 LayerNorm and RMSNorm calls on AVX2 and AVX-512 whose working set is at least this
/// many times the level-2 cache fetch the lines of `y` for ownership ahead of the normalize
/// sweep's stores, where they store ordinarily: with each vector stored, the line two spans
/// of the trail ahead (see `write_span`). Plain calls, and LayerNorm's add forms where `y`
/// does not hold `h` between the sweeps; plain LayerNorm of the half types too (their add
/// forms and RMSNorm are unmeasured); only where the CPU has the instruction
/// ([`prefetchw`](crate::stores::prefetchw)).
///
/// Not RMSNorm's add forms: with the `h` output (the only case where `y` is not scratch for
/// `h`) the prefetch was mixed (harness, fraction of a copy of `x` into `y`, medians of 41
/// calls, against the same calls without it in the same runs): short rows gained, 65536×64
/// 0.48–0.50 against 0.44–0.46 on AVX-512 and 0.48–0.49 against 0.42–0.44 on AVX2 (three
/// runs), 16384×256 0.47–0.48 against 0.44–0.46 on AVX-512 and even on AVX2 (two runs); long
/// rows lost a little, 4096×1024 on AVX2 0.46–0.49 against 0.48–0.49 (1–3% down in each of
/// three runs), 1024×4096 on AVX-512 2% down, 1% down and 1.5% up.
///
/// The half types, where a vector stored is half a line or less (so a line is fetched two or
/// four times), report, fraction of the copy roofline, two runs, against the same build
/// without it: f16 1024×4096 on AVX-512 0.76–0.77 against 0.66–0.70, on AVX2 0.68–0.69
/// against 0.60–0.62; bf16 1024×4096 0.61–0.62 against 0.54–0.56 and 0.40–0.42 against
/// 0.37–0.38; bf16 4096×1024 0.59–0.60 against 0.55–0.57 and 0.39–0.40 against 0.37–0.38;
/// f16 4096×1024 even on AVX-512 (0.76–0.80 against 0.78–0.80), 3% down on AVX2
/// (0.61–0.63 against 0.64–0.65).
///
/// A two-pass chunk reads its first pass from memory and its second from L1, and the trail
/// normalizes a quarter of the previous row's chunk after each half pass: the spans after
/// the fast second pass store lines that are not in cache, with few reads of memory left to
/// overlap them, and wait on them (the samples of a profile at 1024×4096 gather on the
/// instruction after their stores, on both ISAs). Fetched two spans ahead, during the first
/// pass, their lines are there. Intel Xeon with AVX512-FP16 (2 MiB L2), LayerNorm with `γ`,
/// `β`, fraction of a copy of the same bytes in the same run, medians of 41 calls, three
/// runs: on AVX2 1024×4096 0.92–0.93 against 0.79–0.80, 4096×1024 0.97–1.00 against
/// 0.87–0.91; on AVX-512 1024×4096 0.92–0.95 against 0.83–0.85 (prefetching that far is
/// worth it there only one line at a time: a burst of a span's prefetches after its stores
/// waited, at 0.89–0.94, and lost on AVX2). Rows of one chunk or less gained as much: 8192×512
/// 0.99–1.00 against 0.95–0.96 on both ISAs, 16384×256 on AVX2 0.98 against 0.83, 32768×128
/// 1.00 against 0.79–0.93, 65536×64 0.85–0.89 against 0.75–0.78. Smaller sets (medians of 201
/// calls) lose: 256×1024 (2 MiB) 0.65–0.83 against 0.68–0.85, 8192×64 (4 MiB) on AVX2 0.90–0.91
/// against 0.96–0.97; 4 MiB elsewhere even. add_layer_norm with the `h` output gained too
/// (fraction of the copy of `x` into `y`, two runs, both ISAs: 1024×4096 0.41–0.46 against
/// 0.39–0.44, 4096×1024 0.42–0.45 against 0.38–0.44, 16384×256 0.46–0.47 against 0.41–0.47,
/// 65536×64 0.29–0.32 against 0.27–0.30); without it, `y` holds `h` between the sweeps, its
/// lines already owned, and the prefetches went from 3% slower to 7% faster. RMSNorm with a
/// gain (two runs, both ISAs): 1024×4096 1.00–1.01 against 0.99–1.00, 4096×1024 1.00
/// against 0.95–0.99, 65536×64 1.00 against 0.93–0.95.
const PREFETCH_Y_L2S: usize = 4;

/// Rows shorter than this are never streamed: a row whose ends are not vector-aligned leaves
/// a partial line at each end, written by ordinary stores, and in short rows those stall the
/// streaming stores around them (measured on AVX-512, 16 MiB per operand: LayerNorm with
/// `d = 64` 0.87× with `y` aligned, 0.45× 16 bytes off; `d = 256` 1.2× and 0.88×; `d = 512`
/// 1.09× and 1.07×; `d = 1024` 1.6× and 1.5×).
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
        let prefetch = a.d >= super::PREFETCH_MIN && llc.is_none_or(|llc| bytes >= llc);
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
        // (Not where `y` holds `h` between the sweeps: its lines are in cache by then.)
        // (Measured: f32 LayerNorm, plain or add form, and plain RMSNorm; plain LayerNorm of
        // the half types.)
        let measured = if E::IS_F32 {
            a.kind == NormKind::Layer || a.add.is_none()
        } else {
            a.kind == NormKind::Layer && a.add.is_none()
        };
        let prefetch_y = measured
            && h != a.y.0
            && !stream
            && matches!(self.isa(), crate::Isa::Avx2 | crate::Isa::Avx512)
            && crate::stores::prefetchw()
            && crate::stores::level2_cache().is_some_and(|l2| bytes >= PREFETCH_Y_L2S * l2);
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
            prefetch_y,
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
        self.norm(NormArgs {
            kind: NormKind::Layer,
            x: (x.as_ptr(), x.len()),
            y: (x.as_mut_ptr(), x.len()),
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
        self.norm(NormArgs {
            kind: NormKind::Layer,
            x: (x.as_ptr(), x.len()),
            y: (out.as_mut_ptr(), out.len()),
            add: Some((r, *residual)),
            h: Some((x.as_mut_ptr(), x.len())),
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

/// One instance of the LayerNorm and RMSNorm bodies, an op ([`RowOp`]) and a walk over the
/// rows ([`Walk`]), as a dispatch operation: each instance is compiled as a function of its
/// own per ISA (inlined into one function per ISA and storage type, the 30 instances made
/// functions of about a megabyte of machine code each, which LLVM optimized in minutes).
struct Instance<E, Op, W> {
    call: NormCall<E>,
    instance: PhantomData<(Op, W)>,
}

impl<E: Element, Op: RowOp, W: Walk> crate::dispatch::Op for Instance<E, Op, W> {
    type Output = ();

    #[inline(always)]
    unsafe fn eval<S: Simd>(self, s: S) {
        // SAFETY: `walks` builds an instance only under its walk's conditions.
        unsafe { walk_rows::<S, E, Op, W>(s, &self.call) }
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
unsafe fn norm_rows<E: Element>(k: &Kernels, call: &NormCall<E>) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match (call.kind, !call.gamma.is_null(), !call.beta.is_null()) {
            (NormKind::Layer, false, false) => walks::<E, Layer<false, false>>(k, call),
            (NormKind::Layer, false, true) => walks::<E, Layer<false, true>>(k, call),
            (NormKind::Layer, true, false) => walks::<E, Layer<true, false>>(k, call),
            (NormKind::Layer, true, true) => walks::<E, Layer<true, true>>(k, call),
            (NormKind::Rms, false, _) => walks::<E, super::rms_norm::Rms<false>>(k, call),
            (NormKind::Rms, true, _) => walks::<E, super::rms_norm::Rms<true>>(k, call),
        }
    }
}

/// Runs `Op` on the ISA of `k` with the walk over the rows the call asks for.
///
/// # Safety
/// As [`norm_rows`].
#[inline(always)]
unsafe fn walks<E: Element, Op: RowOp>(k: &Kernels, call: &NormCall<E>) {
    fn instance<E: Element, Op, W>(call: &NormCall<E>) -> Instance<E, Op, W> {
        Instance {
            call: *call,
            instance: PhantomData,
        }
    }
    // SAFETY: forwarded from the caller; each walk's own conditions are those checked here.
    unsafe {
        if call.r.is_null() {
            k.run(instance::<E, Op, PlainWalk>(call));
        } else if E::IS_F32 && Blocks::<false>::takes(call) {
            // (`E::IS_F32` first and by itself: a constant, so the other storage types do
            // not instantiate the blocks at all.)
            if call.bias.is_null() {
                k.run(instance::<E, Op, Blocks<false>>(call));
            } else {
                k.run(instance::<E, Op, Blocks<true>>(call));
            }
        } else if call.bias.is_null() {
            k.run(instance::<E, Op, AddWalk<false>>(call));
        } else {
            k.run(instance::<E, Op, AddWalk<true>>(call));
        }
    }
}

/// Runs the instance `(Op, W)` over every row of the call, for the ISA of `S`.
///
/// # Safety
/// As [`norm_rows`], with the conditions of [`walks`] for `W`.
#[inline(always)]
unsafe fn walk_rows<S: Simd, E: Element, Op: RowOp, W: Walk>(s: S, call: &NormCall<E>) {
    // SAFETY: forwarded from the caller.
    unsafe { W::rows::<S, E, Op>(s, call) };
    if call.stream {
        s.fence();
    }
}

/// A walk over the rows of a call: which source the rows are read through, and in what order
/// the sweeps of the rows run.
pub(crate) trait Walk {
    /// Runs `Op` over every row of `call`.
    ///
    /// # Safety
    /// As [`norm_rows`], with the conditions under which [`walks`] picks this walk.
    unsafe fn rows<S: Simd, E: Element, Op: RowOp>(s: S, call: &NormCall<E>);
}

/// Plain calls (no residual add): [`plain_rows`], two-pass chunks.
pub(crate) struct PlainWalk;

impl Walk for PlainWalk {
    #[inline(always)]
    unsafe fn rows<S: Simd, E: Element, Op: RowOp>(s: S, call: &NormCall<E>) {
        // SAFETY: forwarded; `call.r` is null.
        unsafe { plain_rows::<S, E, Op, true>(s, call) }
    }
}

/// The f32 add forms with short rows and an `h` to build them in: [`by_blocks`].
pub(crate) struct Blocks<const BIAS: bool>;

impl Blocks<false> {
    /// Whether the call goes by blocks. (`blocks` implies the rest; restated, the rest lets
    /// the compiler drop the branches for long rows, streaming and a null `h` from the
    /// block's sweeps: without that those ran 15% slower at 256×64.)
    #[inline(always)]
    fn takes<E: Element>(call: &NormCall<E>) -> bool {
        E::IS_F32 && call.blocks && call.d <= BLOCKS_MAX_D && !call.stream && !call.h.is_null()
    }
}

impl<const BIAS: bool> Walk for Blocks<BIAS> {
    #[inline(always)]
    unsafe fn rows<S: Simd, E: Element, Op: RowOp>(s: S, call: &NormCall<E>) {
        // SAFETY: `walks` picks this walk only where `takes` holds (and `call.bias` is null
        // exactly when `!BIAS`); forwarded.
        unsafe {
            std::hint::assert_unchecked(Blocks::<false>::takes(call));
            if Op::GROUPS && is_short::<S, AddResidual<S, E, BIAS>>(call.d) {
                // The blocks' add fused into the groups' first pass.
                by_groups::<S, E, Op, AddResidual<S, E, BIAS>>(s, call, call.h.cast_const());
            } else {
                by_blocks::<S, E, Op, BIAS>(s, call);
            }
        }
    }
}

/// The other add forms: the row loop over [`AddResidual`].
pub(crate) struct AddWalk<const BIAS: bool>;

impl<const BIAS: bool> Walk for AddWalk<BIAS> {
    #[inline(always)]
    unsafe fn rows<S: Simd, E: Element, Op: RowOp>(s: S, call: &NormCall<E>) {
        // SAFETY: forwarded; `call.r` is not null, `call.bias` is exactly when `BIAS`.
        unsafe { each_row_of::<S, E, Op, AddResidual<S, E, BIAS>>(s, call) }
    }
}

/// What is done with one row: a statistics sweep, then a normalize sweep, which the row loop
/// runs alongside the statistics sweep of the next row.
pub(crate) trait RowOp {
    /// What the statistics sweep leaves for the normalize sweep.
    type Stats: Copy + Default;
    /// The vector normalize sweep of a row, writing `E`, reading `h` from `V`.
    type Sweep<S: Simd, E: Element, V: Values<S>>: Pending<S>;
    /// The statistics sweep, from `src` (which also stores `h` for the f32 add forms), with
    /// `pending` run at the same offsets.
    ///
    /// # Safety
    /// `src` covers `call.d ≥ 1` values; so does the row of `pending`.
    unsafe fn stats<S: Simd, E: Element, R: Source<S>, P: Pending<S>>(
        s: S,
        call: &NormCall<E>,
        src: &R,
        pending: &P,
    ) -> Self::Stats;
    /// Whether short rows go by groups ([`by_groups`]): those of plain calls, and those of
    /// the f32 add forms that go by blocks.
    const GROUPS: bool = false;
    /// The first pass of short row `row` by groups ([`by_groups`], rows held in blocks of `B`
    /// vectors, `FULL` where they fill it): the sum of the row's values minus its shift `k`
    /// (its first value, [`Source::first`]) as a vector ([`group_row_sum`]). By default
    /// nothing: the default [`RowOp::group_stats`] gathers each row's statistics from its
    /// source as the row loop does.
    ///
    /// # Safety
    /// Row `row` lies in `call`, short, of `d ≤ B·LANES` values (equal where `FULL`).
    #[inline(always)]
    unsafe fn group_sum<S: Simd, E: Element, R: RowSource<S, E>, const B: usize, const FULL: bool>(
        s: S,
        call: &NormCall<E>,
        row: usize,
        k: f32,
    ) -> S::V {
        let _ = (call, row, k);
        s.splat(0.0)
    }
    /// The second pass of short row `row` by groups, read back at `again`, its shift `k` and
    /// its mean from the first ([`group_row_dev`]). By default nothing, as
    /// [`RowOp::group_sum`].
    ///
    /// # Safety
    /// Row `row` lies at `again`, as for [`RowOp::group_sum`], and its first pass has run.
    #[inline(always)]
    unsafe fn group_dev<S: Simd, E: Element, const B: usize, const FULL: bool>(
        s: S,
        call: &NormCall<E>,
        again: *const E,
        row: usize,
        k: f32,
        mean: (f64, f32),
    ) -> S::V {
        let _ = (call, again, row, k, mean);
        s.splat(0.0)
    }
    /// The statistics of the `n ≤ GROUP` short rows `r0..r0 + n` of `call` ([`is_short`]),
    /// each row's exactly as [`RowOp::stats`] gathers them from its source `R`: from the
    /// shifts `k` and means of their first passes and the `devs` of their second (zero past
    /// `n`); by default, one row after the other from `R`, as the row loop does.
    ///
    /// # Safety
    /// Rows `r0..r0 + n` lie in `call`, of `call.d ≥ 1` values, and they are short; their
    /// second passes have run, or by default, none of their values has been written yet.
    #[inline(always)]
    unsafe fn group_stats<S: Simd, E: Element, R: RowSource<S, E>>(
        s: S,
        call: &NormCall<E>,
        r0: usize,
        n: usize,
        k: &[f32; GROUP],
        means: &GroupMeans,
        devs: &[S::V; GROUP],
    ) -> [Self::Stats; GROUP] {
        let _ = (k, means, devs);
        let mut out = [Self::Stats::default(); GROUP];
        for (j, o) in out[..n].iter_mut().enumerate() {
            // SAFETY: row `r0 + j` lies in `call` and holds `d ≥ 1` values.
            *o = unsafe {
                let (src, _) = R::row(s, call, (r0 + j) * call.d);
                Self::stats(s, call, &src, &Idle)
            };
        }
        out
    }
    /// The vector normalize sweep of a row from the values `h` into `y`, or `None` if the row
    /// takes the f64 path.
    fn sweep<S: Simd, E: Element, V: Values<S>>(
        s: S,
        call: &NormCall<E>,
        st: Self::Stats,
        h: V,
        y: *mut E,
    ) -> Option<Self::Sweep<S, E, V>>;
    /// The f64 path of a row: normalizes it into `y` (and ends `h`, see [`Values::finish`]),
    /// returns its `(mean, rstd)`.
    ///
    /// # Safety
    /// `h` gives the `call.d` values the statistics were gathered on, `y` covers as many writable
    /// ones (equal to where `h` reads if they overlap).
    unsafe fn wide<S: Simd, E: Element, V: Values<S>>(call: &NormCall<E>, h: V, y: *mut E) -> (f32, f32);
    /// The per-row outputs `(mean, rstd)` of a row on the vector path.
    fn outputs(st: Self::Stats) -> (f32, f32);
}

/// Rows of the f32 add forms at most this long go by blocks ([`by_blocks`]) in calls that fit
/// the last-level cache.
///
/// Measured against the row loop (`prof_ln`, best of 5 alternating runs, `h` output, `h`
/// into `y`, in place): on AVX-512 1.17–1.21× at 512×32, 1.36–1.42× at 256×64, 1.20–1.29×
/// at 128×128, 1.20–1.33× at 4096 and 16384 rows of 64; on AVX2 1.56×, 1.36–1.40×,
/// 1.25–1.32×, 1.26–1.33×. Longer rows gain less and not everywhere (d = 256: 1.06–1.19× in
/// L1, 0.90–0.97× with an `h` output at 1024 rows), and beyond the last-level cache the
/// blocks lose the row loop's overlap of reading one row with computing another (d = 256,
/// 16 MiB per operand: 0.63–0.86×; d = 64: 0.87–1.15×).
const BLOCKS_MAX_D: usize = 128;

/// Rows of a block of [`by_blocks`]: as many as this many values hold (8 KiB of f32 per
/// operand, so that `x`, `r`, `h` and `y` of a block fit L1 together).
const ADD_BLOCK: usize = 2048;

/// The f32 add forms with short rows, where they do not go by groups, a block of rows at a
/// time: `h = α·x + (r + b)` for the whole block (stored to `h`, which is the `h` output, `y`
/// as scratch, or `x` in place), then the plain row loop over the block's `h`, still in L1.
/// The values, and every operation on them, are those of the row loop of the add forms, so
/// the bits are too; what changes is that a short row's statistics no longer wait behind
/// its add (see [`BLOCKS_MAX_D`]).
///
/// # Safety
/// As [`norm_rows`], with `call.blocks`: f32, `h` not null, `y` equal to `h` or distinct.
#[inline(always)]
unsafe fn by_blocks<S: Simd, E: Element, Op: RowOp, const BIAS: bool>(s: S, call: &NormCall<E>) {
    let d = call.d;
    let lanes = S::LANES;
    let block = (ADD_BLOCK / d).max(1);
    let mut r0 = 0;
    while r0 < call.rows {
        let n = block.min(call.rows - r0);
        for row in r0..r0 + n {
            // SAFETY: the row lies inside the `rows·d` elements of every operand; `h` is not
            // null, so the source stores each vector of `h` after reading its inputs.
            unsafe {
                let (src, _) = AddResidual::<S, E, BIAS>::row(s, call, row * d);
                let mut i = 0;
                while i + lanes <= d {
                    src.full(s, i);
                    i += lanes;
                }
                if i < d {
                    src.partial(s, i, d - i);
                }
            }
        }
        let at = |p: *mut f32| if p.is_null() { p } else { p.wrapping_add(r0) };
        // SAFETY: rows `r0..r0 + n` of `h` hold the block's `h`; `y` equals `h` (scratch) or
        // is distinct from it; `mean`, `rstd` are offset to the block's first row.
        let sub = unsafe {
            NormCall {
                x: call.h.add(r0 * d).cast_const(),
                r: std::ptr::null(),
                bias: std::ptr::null(),
                h: std::ptr::null_mut(),
                y: call.y.add(r0 * d),
                mean: at(call.mean),
                rstd: at(call.rstd),
                rows: n,
                blocks: false,
                // The block's `h`, just stored, is in L1.
                groups: true,
                ..*call
            }
        };
        // SAFETY: `sub` is a plain call over the block. (Welford chunks as the add forms' row
        // loop, or groups of short rows, which give the row loop's bits.)
        unsafe { plain_rows::<S, E, Op, false>(s, &sub) };
        r0 += n;
    }
}

/// The rows of a plain call (no residual add): by groups where they are short ([`by_groups`]),
/// else by the row loop or by columns ([`each_row_of`]), with two-pass chunks where
/// `TWO_PASS` and Welford chunks otherwise (see [`Source::TWO_PASS`]).
///
/// # Safety
/// As [`norm_rows`], with `call.r` null.
#[inline(always)]
unsafe fn plain_rows<S: Simd, E: Element, Op: RowOp, const TWO_PASS: bool>(s: S, call: &NormCall<E>) {
    // SAFETY: forwarded.
    unsafe {
        if Op::GROUPS && call.groups && is_short::<S, Plain<E, TWO_PASS>>(call.d) {
            by_groups::<S, E, Op, Plain<E>>(s, call, call.x);
        } else {
            each_row_of::<S, E, Op, Plain<E, TWO_PASS>>(s, call);
        }
    }
}

/// Plain calls whose working set (`x` and `y`) is at most this many bytes go by groups
/// ([`by_groups`]) where their rows are short; the blocks of the add forms always do.
///
/// Beyond it the row loop, which overlaps the reads of one row with the work of others,
/// kept more loads in flight (Intel Xeon with AVX512-FP16, 2 MiB L2, LayerNorm against the
/// row loop as in [`by_groups`]): rows of 64 values by groups ran 1.14–1.22× faster at
/// 2048 rows (1 MiB), but 0.95–0.97× at 4096 rows (2 MiB), 0.83–0.84× at 16384 and
/// 0.84–0.86× at 65536 (16 MiB per operand). Prefetching the next group's rows during the
/// normalize sweeps took back 1.12–1.18× at 4096 rows but lost 2–7% in L2 (2048×64,
/// 4096×32, 256×64 on AVX-512), so the rule is a size instead.
const GROUPS_MAX_BYTES: usize = 1 << 20;

/// Short rows ([`is_short`]), [`GROUP`] rows at a time, stage by stage: the first pass of
/// every row of a group ([`RowOp::group_sum`], from the source `R`, which reads `x`, or
/// builds `h` from `x` and `r` and stores it), their means; the second pass of every row
/// ([`RowOp::group_dev`], the rows read again at `again`: `x`, or the stored `h`), their
/// statistics ([`RowOp::group_stats`]); then the normalize sweep of each row. Each row's
/// statistics are exactly those [`RowOp::stats`] gathers for it alone (the same values
/// through the same operations), so the bits are those of the row loop over `R`.
///
/// One row at a time, a short row's work is a chain: its sum, the reductions, its deviations
/// (which wait on the mean), theirs, then the square root and division that end it; the
/// rows that follow fill the out-of-order window behind it. By passes, each pass is as many
/// independent chains as rows. The reductions of a pass run together
/// (`Simd::reduce_add_16`: on AVX-512 the sixteen rows' lanes transposed into one vector
/// level by level, 47 instructions for the sixteen, and no scalar results to gather), and
/// what follows them
/// runs as loops over all the rows' results, which the compiler vectorizes: LayerNorm's
/// square roots and divisions then go eight rows to an instruction. It does so only where
/// each result has an array of its own ([`GroupMeans`], and the three arrays of
/// `Layer::group_stats`): with the rows' `Moments` as structs, a `std::array::map` left as
/// a call, and selects that shared a branch, AVX2 ran those loops in scalars, a division and
/// a square root per row, and AVX-512 half of them (Intel Xeon, 256×64, harness, medians of
/// 2001 calls, runs of the two builds alternating: the arrays took AVX-512 from 3.96–4.11 µs
/// to 3.61, AVX2 from 3.94–4.05 to 3.72; the statistics alone, without the normalize sweeps,
/// from 2.4–2.6 to 2.2 on both).
///
/// Measured on an Intel Xeon with AVX512-FP16 (LayerNorm with `γ`, `β`, median of 1001
/// calls, by groups and by the row loop alternating call by call in one process): on AVX-512
/// 1.16× at 256×64 (3997 against 4625 ns), 1.24× at 512×32, 1.16× at 170×96, 1.13× at
/// 128×128, 1.21× at 1024×48, 1.17× at 2048×64; on AVX2 (short rows up to 64 values) 1.09×,
/// 1.23×, –, –, 1.13×, 1.08×. Steps on the way, at 256×64 on AVX-512: the passes alone,
/// each row's reductions and square root as in the row loop, 1.05×; finishing each row as
/// its last reduction came rather than through an array (whose vector loads, by the
/// compiler, of values just stored one at a time waited on store forwarding) 1.11×; the
/// reductions together and the square roots in vectors, the rest. RMSNorm, whose rows have
/// one reduction and nothing waiting on it but the square root, lost by groups (0.81–0.95×
/// on AVX-512, 0.87–0.91× on AVX2, the passes alone) and keeps the row loop.
///
/// Rows that fill their block exactly (64 and 128 values on both ISAs, 256 on AVX-512) have
/// a copy of the passes of their own, with no test for a tail and no weights in the
/// deviations: 3.51–3.54 µs against 3.58–3.61 on AVX-512 at 256×64, 3.63 against 3.71–3.73
/// on AVX2 (the same way).
///
/// The lanes are reduced in f32, then widened (they were widened first, and reduced in f64:
/// the largest part of the statistics left then). `merge_block` reduces a row's the same
/// way, so the row loop keeps the same bits, and the error bound holds with the extra
/// roundings (module docs). Harness, medians of 2001 calls, runs of the two builds
/// alternating, two each, against f64: on AVX-512 3.27–3.32 µs against 3.46 at 256×64,
/// 5.83–5.84 against 6.34–6.43 at 512×32, 12.25–12.29 against 13.15–13.36 at 1024×48,
/// 2.64–2.65 against 2.69–2.70 at 128×128; on AVX2 3.52–3.53 against 3.58 at 256×64,
/// 4.72–4.75 against 4.87–4.91 at 512×32, even at 1024×48. The row loop's short rows
/// (8192×64, 4 MiB) went from 0.76–0.78 of a copy to 0.81–0.82 (AVX-512) and from
/// 0.93–0.95 to 0.97–0.98 (AVX2); rows with a tail (16×1000, 64×200) even.
///
/// What was left then, before the pipeline below: a standalone model of the same passes with
/// `d` fixed at 64 (no tails, `γ`, `β` held in registers, the rows' sums reduced sixteen at a
/// time in f32) took 2.46 µs at 256×64 against 3.8 for the kernel of the time (same process,
/// medians of 4001 calls; its normalize sweeps alone 1.30 µs, a copy of the same bytes 1.34).
/// The kernel's normalize sweeps alone took 1.8–1.9 µs, and a copy of them for rows that fill
/// their block (whole vectors, no loop over the row) ran no faster.
///
/// Rows that fill their block (64 and 128 values, and 256 on AVX-512) are pipelined
/// ([`pipelined`]): each row of a group is normalized beside the second pass of the same row
/// of the next group and the first pass of that of the group after it ([`stage`]), so that
/// the loads of the first passes (from L2 beyond 48 KiB), the stores of the sweeps and the
/// arithmetic of the second passes overlap, and each group's reductions, square roots and
/// divisions have a stage's work beside them before anything waits on them. Harness, medians
/// of 2001 calls, runs of the two builds alternating, two each: on AVX-512 2.95–3.02 µs
/// against 3.26–3.33 at 256×64, 2.38 against 2.71 at 128×128, 2.31 against 2.37 at 64×256,
/// 21.7–22.2 against 26.1–26.3 at 2048×64 (1 MiB), 0.745 against 0.80 at 64×64 (in L1); on
/// AVX2 3.30–3.33 against 3.67–3.73 at 256×64, 2.91–2.95 against 3.14 at 128×128, 25.1
/// against 28.8–29.5 at 2048×64, 4.33–5.04 against 5.04–5.06 at 512×32, 0.82 against
/// 0.88–0.90 at 64×64. Rows with a tail go one group at a time, their blocks sharing one
/// sweep loop: pipelined, AVX-512 lost at 96×192 (3.03–3.36 µs against 2.98–3.05) and
/// 512×32 (5.93–5.96 against 5.72–5.79), where the tails' selects and weights add to the
/// registers that three rows in flight hold; one group at a time but with a sweep loop for
/// each block, at 64×200 (2.41–2.50 against 2.20–2.26) and 96×192 (3.14–3.22 against
/// 2.99–3.01). As they are, 96×192 3.03–3.05 µs against 3.00–3.05, 64×200 2.29–2.30 against
/// 2.24–2.32, 512×32 5.79–5.84 against 5.87–5.90.
///
/// # Safety
/// As [`norm_rows`], with short rows, and `R` a plain source with `again` equal to `call.x`,
/// or the f32 add source storing `h` with `again` equal to `call.h`.
#[inline(always)]
unsafe fn by_groups<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>>(s: S, call: &NormCall<E>, again: *const E) {
    // SAFETY: forwarded; the rows are short, so `short_block` gives their block.
    unsafe {
        match short_block::<S>(call.d) {
            (ACC, true) => pipelined::<S, E, Op, R, ACC>(s, call, again),
            (BLOCK, true) => pipelined::<S, E, Op, R, BLOCK>(s, call, again),
            (_, true) => pipelined::<S, E, Op, R, WIDE>(s, call, again),
            (b, false) => {
                let mut r0 = 0;
                while r0 < call.rows {
                    let n = GROUP.min(call.rows - r0);
                    let stats = match b {
                        ACC => group_stats_of::<S, E, Op, R, ACC>(s, call, again, r0, n),
                        BLOCK => group_stats_of::<S, E, Op, R, BLOCK>(s, call, again, r0, n),
                        _ => group_stats_of::<S, E, Op, R, WIDE>(s, call, again, r0, n),
                    };
                    for (j, &st) in stats[..n].iter().enumerate() {
                        sweep_row::<S, E, Op, R>(s, call, r0 + j, st);
                    }
                    r0 += n;
                }
            }
        }
    }
}

/// The statistics of the `n ≤ GROUP` rows `r0..r0 + n` of a group, one pass after the other
/// over the group, for rows with a tail in blocks of `B` vectors.
///
/// # Safety
/// As [`by_groups`], rows `r0..r0 + n` lying in `call`, none of them written yet, with
/// `d < B·LANES`.
#[inline(always)]
unsafe fn group_stats_of<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const B: usize>(
    s: S,
    call: &NormCall<E>,
    again: *const E,
    r0: usize,
    n: usize,
) -> [Op::Stats; GROUP] {
    // The rows' sums, then their deviations (zero past `n`).
    let (mut v, mut k) = ([s.splat(0.0); GROUP], [0.0; GROUP]);
    // SAFETY: by the caller's promise; each row's first pass runs before its second.
    unsafe {
        for (j, k) in k[..n].iter_mut().enumerate() {
            *k = shift::<S, E, R>(s, call, r0 + j);
        }
        for j in 0..n {
            v[j] = Op::group_sum::<S, E, R, B, false>(s, call, r0 + j, k[j]);
        }
        let means = group_means_of(s, call.d, &v);
        for j in 0..n {
            let mean = (means.mean[j], means.mc[j]);
            v[j] = Op::group_dev::<S, E, B, false>(s, call, again, r0 + j, k[j], mean);
        }
        Op::group_stats::<S, E, R>(s, call, r0, n, &k, &means, &v)
    }
}

/// [`by_groups`] pipelined, for rows that fill their block of `B` vectors: stage `t`
/// ([`stage`]) sweeps group `t`, runs the second passes of group `t + 1` and the first of
/// group `t + 2`.
///
/// # Safety
/// As [`by_groups`], with `d = B·LANES`.
#[inline(always)]
unsafe fn pipelined<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const B: usize>(
    s: S,
    call: &NormCall<E>,
    again: *const E,
) {
    let groups = call.rows.div_ceil(GROUP) as isize;
    // Rows in group `g`: none before the first or past the last.
    let n = |g: isize| {
        if (0..groups).contains(&g) {
            GROUP.min(call.rows - g as usize * GROUP)
        } else {
            0
        }
    };
    let mut p = Stages::<Op> {
        stats: [Op::Stats::default(); GROUP],
        k: [0.0; GROUP],
        means: GroupMeans::default(),
    };
    for t in -2..groups {
        let n = [n(t), n(t + 1), n(t + 2)];
        // SAFETY: each group's first passes run in the stage before its second, and those
        // in the stage before its sweeps, whose rows are disjoint from those of the passes
        // beside them.
        unsafe {
            if n == [GROUP; 3] {
                stage::<S, E, Op, R, B, true>(s, call, again, t, n, &mut p);
            } else {
                stage::<S, E, Op, R, B, false>(s, call, again, t, n, &mut p);
            }
        }
    }
}

/// What one stage of [`pipelined`] leaves for the next: the statistics of the group it
/// sweeps, and the shifts and means of the group whose second passes it runs.
struct Stages<Op: RowOp> {
    stats: [Op::Stats; GROUP],
    k: [f32; GROUP],
    means: GroupMeans,
}

/// Stage `t` of [`pipelined`] over the first `n[u]` rows of group `t + u`: for each row `j`,
/// the sweep of row `j` of group `t` (from `p.stats`), the second pass of row `j` of group
/// `t + 1` (from `p.k`, `p.means`), the first pass of row `j` of group `t + 2`; then the
/// statistics of group `t + 1` and the means of group `t + 2` into `p`, for the next stage.
/// `ALL` where every `n[u]` is [`GROUP`].
///
/// # Safety
/// As [`pipelined`]; the first passes of group `t + 1` have run in an earlier stage, and so
/// have both passes of group `t`.
#[inline(always)]
unsafe fn stage<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const B: usize, const ALL: bool>(
    s: S,
    call: &NormCall<E>,
    again: *const E,
    t: isize,
    n: [usize; 3],
    p: &mut Stages<Op>,
) {
    let zero = s.splat(0.0);
    let [n0, n1, n2] = if ALL { [GROUP; 3] } else { n };
    // The first row of group `t + u` (used only where that group has rows).
    let r = |u: isize| (t + u) as usize * GROUP;
    let (mut sums, mut devs, mut k) = ([zero; GROUP], [zero; GROUP], [0.0; GROUP]);
    // SAFETY: by the caller's promise.
    unsafe {
        for j in 0..GROUP {
            if j < n0 {
                sweep_row::<S, E, Op, R>(s, call, r(0) + j, p.stats[j]);
            }
            if j < n1 {
                let mean = (p.means.mean[j], p.means.mc[j]);
                devs[j] = Op::group_dev::<S, E, B, true>(s, call, again, r(1) + j, p.k[j], mean);
            }
            if j < n2 {
                k[j] = shift::<S, E, R>(s, call, r(2) + j);
                sums[j] = Op::group_sum::<S, E, R, B, true>(s, call, r(2) + j, k[j]);
            }
        }
        if n1 > 0 {
            p.stats = Op::group_stats::<S, E, R>(s, call, r(1), n1, &p.k, &p.means, &devs);
        }
    }
    if n2 > 0 {
        p.means = group_means_of(s, call.d, &sums);
        p.k = k;
    }
}

/// The shift of row `row` of `call` through `R`: its first value, as [`RowOp::stats`] takes it.
///
/// # Safety
/// Row `row` lies in `call`, of `d ≥ 1` values.
#[inline(always)]
unsafe fn shift<S: Simd, E: Element, R: RowSource<S, E>>(s: S, call: &NormCall<E>, row: usize) -> f32 {
    // SAFETY: by the caller's promise.
    unsafe { R::row(s, call, row * call.d).0.first() }
}

/// The normalize sweep of row `row` of `call` from its statistics `st` (or its f64 path),
/// and its per-row outputs.
///
/// # Safety
/// Row `row` lies in `call`; `st` are its statistics, from its values through `R`, and
/// none of them has been written since.
#[inline(always)]
unsafe fn sweep_row<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>>(
    s: S,
    call: &NormCall<E>,
    row: usize,
    st: Op::Stats,
) {
    let off = row * call.d;
    // SAFETY: by the caller's promise; the sweep reads `h` before writing `y` at each offset.
    unsafe {
        let (_, h) = R::row(s, call, off);
        let y = call.y.add(off);
        match Op::sweep(s, call, st, h, y) {
            Some(sweep) => {
                sweep.run(s, 0, call.d);
                write_stats(call, row, Op::outputs(st));
            }
            None => write_stats(call, row, Op::wide::<S, E, R::Back>(call, h, y)),
        }
    }
}

/// The rows of a call through the source `R` where they do not go by groups or blocks:
/// LayerNorm's long rows by columns in calls that fit ([`by_columns`]), else [`each_row`],
/// with a loop of its own for LayerNorm's short rows ([`is_short`]) and one for its long
/// rows: in one loop, the blocks of the short rows (up to 16 vectors) made the long rows
/// 1.5–2.5% slower on AVX-512 (16×1024, 4×4096, harness, three alternating runs).
///
/// # Safety
/// As [`norm_rows`], with `R` the call's source (plain, or the add source of [`AddWalk`]).
#[inline(always)]
unsafe fn each_row_of<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>>(s: S, call: &NormCall<E>) {
    // SAFETY: forwarded.
    unsafe {
        if Op::GROUPS && call.groups && call.d >= COLUMNS_MIN_D {
            by_columns::<S, E, Op, R>(s, call);
        } else if Op::GROUPS && is_short::<S, R>(call.d) {
            each_row::<S, E, Op, R, true>(s, call);
        } else {
            each_row::<S, E, Op, R, false>(s, call);
        }
    }
}

/// LayerNorm's rows at least this long go by columns ([`by_columns`]) in calls of at most
/// [`GROUPS_MAX_BYTES`] (every operand counted), plain and add forms.
///
/// In the row loop a row of 4096 values (16 KiB), the row before it read again by the
/// normalize sweep, its `y` and `γ`, `β` (32 KiB) overflow the 48 KiB L1, so that the
/// normalize sweep reads `x`, `γ` and `β` from L2 for every row: in cache LayerNorm ran at
/// 0.45 of a copy of the same bytes at 4×4096 against 0.66 at 16×1024 (AVX-512). By columns,
/// against the row loop (Intel Xeon with AVX512-FP16, harness, medians of 2001 calls, two
/// runs alternating): on AVX-512 4×4096 2.49–2.50 µs against 2.63–2.64, 16×4096 9.30–9.31
/// against 10.28, 32×4096 (1 MiB) 19.2–19.7 against 22.3–22.6, 3×5000 2.53 against 2.62; on
/// AVX2 3.10 against 3.24, 11.88 against 12.24–12.25, 23.8–24.4 against 25.7, 2.84–2.85
/// against 3.04. Rows of 2048 values lost (8×2048: 0.83× on AVX-512, 0.84× on AVX2; in
/// groups of two to four rows, as many as 32 KiB hold, no better): there the row loop reads
/// most of them from L1 already, and the statistics no longer overlap the stores.
/// add_layer_norm the same way: with the `h` output on AVX-512 4×4096 4.04–4.05 µs against
/// 4.22, 8×4096 (1 MiB) 7.51–7.54 against 7.91–8.19, 3×5000 3.59–3.60 against 3.77–3.78; on
/// AVX2 4.14–4.15 against 4.18–4.19, 8.62–8.64 against 8.55–8.56 (the one loss, 1%),
/// 3.84–3.85 against 3.99–4.01; without it, 4×4096 3.11–3.15 against 3.31–3.34 and 8×4096
/// 6.14–6.15 against 6.70–6.74 on AVX-512, 3.74–3.82 against 3.88–3.99 and 7.17–7.20 against
/// 7.24–7.27 on AVX2.
const COLUMNS_MIN_D: usize = 4096;

/// Values of each row normalized at a time by [`by_columns`]: `γ` and `β` for them (8 KiB)
/// stay in L1 across the rows.
const COLUMN_SPAN: usize = 1024;

/// Long rows ([`COLUMNS_MIN_D`]) in a call that fits L2, [`GROUP`] rows at a time: the
/// statistics of each row, then the normalize sweeps of the rows by columns of
/// [`COLUMN_SPAN`] values, all the rows of the group over one column before the next, so
/// that `γ` and `β` are read from L1 by all but the first row. The bits are those of the
/// row loop: the same statistics, and the same sweep of each value.
///
/// Beyond 1 MiB the row loop stays. Forced on there, by columns was mixed (Zen 4, harness,
/// 25th percentiles, ms): LayerNorm at 1024×4096 gained (AVX-512 0.99–1.08 against
/// 1.11–1.22, AVX2 0.97–0.98 against 1.07–1.17), but lost at 512×8192 (AVX-512 1.25–1.27
/// against 1.06–1.11), as did add_layer_norm with `h` on AVX2 at 1024×4096 (2.35–2.48
/// against 2.14–2.17). It gives up the row loop's overlap of reading one row with writing
/// another; a variant that keeps it was measured too, and lost. In that variant, each
/// group's sweeps by columns ran as the trail of the next group's statistics, in shares
/// proportional to how far those statistics were, and a group had as many rows as 128 KiB
/// holds. Zen 4, harness, 25th percentiles of 5 rounds, two to four alternating processes
/// each:
/// - Beyond the last-level cache (1024×4096, `y` streamed, AVX-512), against the row loop,
///   as a multiple of a same-process streaming copy: 2.95–3.21× against 1.70–2.06×.
/// - Groups of 256 KiB instead: 2.83–3.19×.
/// - With one row a group, where the order is the row loop's: 3.07–3.17×.
/// - With ordinary stores it was even (2.44–2.89 ms against 2.43–2.70).
/// - In the L3, it gained on AVX-512 (LayerNorm 64×4096 51.6–52.6 µs against 57.3–57.7,
///   256×4096 229 against 243; add_layer_norm with `h` 64×4096 75.6–76.0 against
///   85.5–85.8) and lost on AVX2 (LayerNorm 64×4096 80.4–81.0 against 57.7–58.0, 256×4096
///   355–363 against 241).
///
/// Even with one row a group it was slower in the L3 (128×4096: 134–144 µs against 110–121).
/// A profile (AVX2, 256×4096) shows the trail's cursor, inlined into the two-pass chunks,
/// spilling about fifteen general registers to the stack at each call, with the samples
/// piling up just after those stores.
///
/// A variant without a cursor lost as well, so the cursor is not the whole cause. In it,
/// groups of `g` rows are split into `g` spans of `d/g` values, and the statistics of row
/// `j` of a group have span `j` of every row of the group before as their trail (same
/// harness, `g` 8 or 4 at `d = 4096`):
/// - beyond the last-level cache, 2.68–3.52× a streaming copy against 1.90–1.92×;
/// - in the L3 on AVX-512, LayerNorm 64×4096 59.4–60.6 µs against 57.8 and 256×4096
///   251.6–256.7 against 237.7–239.6;
/// - on AVX2, 64×4096 64.1–65.4 against 57.2–57.7.
///
/// What the two have in common: a row is swept up to two groups of rows after its
/// statistics, where the row loop sweeps it during the statistics of the next row. Whether
/// that is the cause was not measured.
///
/// # Safety
/// As [`norm_rows`], with `R` the source the row loop would read the call through.
#[inline(always)]
unsafe fn by_columns<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>>(s: S, call: &NormCall<E>) {
    let d = call.d;
    let mut r0 = 0;
    while r0 < call.rows {
        let n = GROUP.min(call.rows - r0);
        let mut stats = [Op::Stats::default(); GROUP];
        for (j, st) in stats[..n].iter_mut().enumerate() {
            // SAFETY: row `r0 + j` lies in `call`; no `y` of the group is written yet (the
            // source of an add form stores the row's `h` as it reads it, as in the row loop).
            *st = unsafe {
                let (src, _) = R::row(s, call, (r0 + j) * d);
                Op::stats(s, call, &src, &Idle)
            };
        }
        let mut c = 0;
        while c < d {
            let m = COLUMN_SPAN.min(d - c);
            for (j, &st) in stats[..n].iter().enumerate() {
                let off = (r0 + j) * d;
                // SAFETY: the row lies in `call`; its sweep reads `h` before writing `y` at
                // each offset, within `c..c + m ≤ d`.
                unsafe {
                    let (_, h) = R::row(s, call, off);
                    if let Some(sweep) = Op::sweep(s, call, st, h, call.y.add(off)) {
                        sweep.run(s, c, m);
                    }
                }
            }
            c += m;
        }
        for (j, &st) in stats[..n].iter().enumerate() {
            let (row, off) = (r0 + j, (r0 + j) * d);
            // SAFETY: as above; a row on the f64 path was not swept, and its values are intact.
            unsafe {
                let (_, h) = R::row(s, call, off);
                let y = call.y.add(off);
                match Op::sweep(s, call, st, h, y) {
                    Some(_) => write_stats(call, row, Op::outputs(st)),
                    None => write_stats(call, row, Op::wide::<S, E, R::Back>(call, h, y)),
                }
            }
        }
        r0 += n;
    }
}

/// The row loop, pipelined: the normalize sweep of row `r − 1` runs inside the statistics sweep
/// of row `r`. Both sweeps of a row still see it once each; only their order across rows
/// changes. `SHORT` where the rows are LayerNorm's short rows.
///
/// # Safety
/// As [`norm_rows`], and for LayerNorm (`Op::GROUPS`) `SHORT` is whether the rows are short.
#[inline(always)]
unsafe fn each_row<S: Simd, E: Element, Op: RowOp, R: RowSource<S, E>, const SHORT: bool>(s: S, call: &NormCall<E>) {
    if Op::GROUPS {
        // SAFETY: by the caller's promise. (So that the statistics drop the other path.)
        unsafe { std::hint::assert_unchecked(is_short::<S, R>(call.d) == SHORT) };
    }
    let d = call.d;
    // SAFETY (below): every row lies inside the `rows·d` elements of every operand, and rows are
    // disjoint, so the sweep of one row never touches what the other reads or writes.
    let (src, h) = unsafe { R::row(s, call, 0) };
    let mut prev = (unsafe { Op::stats(s, call, &src, &Idle) }, h, call.y);
    for row in 1..call.rows {
        let off = row * d;
        let (src, h) = unsafe { R::row(s, call, off) };
        let (pst, ph, py) = prev;
        let st = match Op::sweep(s, call, pst, ph, py) {
            Some(sweep) => {
                let st = unsafe { Op::stats(s, call, &src, &sweep) };
                write_stats(call, row - 1, Op::outputs(pst));
                st
            }
            None => {
                write_stats(call, row - 1, unsafe { Op::wide::<S, E, R::Back>(call, ph, py) });
                unsafe { Op::stats(s, call, &src, &Idle) }
            }
        };
        prev = (st, h, unsafe { call.y.add(off) });
    }
    let (pst, ph, py) = prev;
    match Op::sweep(s, call, pst, ph, py) {
        Some(sweep) => {
            unsafe { sweep.run(s, 0, d) };
            write_stats(call, call.rows - 1, Op::outputs(pst));
        }
        None => write_stats(call, call.rows - 1, unsafe { Op::wide::<S, E, R::Back>(call, ph, py) }),
    }
}

/// Writes a row's `(mean, rstd)` to the per-row outputs the call has.
#[inline(always)]
fn write_stats<E>(call: &NormCall<E>, row: usize, (mean, rstd): (f32, f32)) {
    debug_assert!(row < call.rows);
    // SAFETY: `row < rows`, and `mean`, `rstd` hold `rows` entries when not null.
    unsafe {
        if !call.mean.is_null() {
            *call.mean.add(row) = mean;
        }
        if !call.rstd.is_null() {
            *call.rstd.add(row) = rstd;
        }
    }
}

/// LayerNorm of one row, with or without `γ`, `β`.
pub(crate) struct Layer<const GAMMA: bool, const BETA: bool>;

impl<const GAMMA: bool, const BETA: bool> Layer<GAMMA, BETA> {
    /// A row's normalize constants from the `mean` (about `k`) and `m2` of its moments, NaN
    /// where it takes the f64 path. Without branches, so that the groups' loop over it runs
    /// in vectors (see `group_stats`).
    #[inline(always)]
    fn of<E>(call: &NormCall<E>, k: f32, mean: f64, m2: f64) -> Affine {
        let a = Affine::new(k as f64 + mean, rstd_of(m2 * (1.0 / call.d as f64), call.eps));
        if fits_f32(mean, m2) {
            a
        } else {
            Affine::NAN
        }
    }
}

impl<const GAMMA: bool, const BETA: bool> RowOp for Layer<GAMMA, BETA> {
    /// The normalize constants, NaN where the row needs the f64 path (a NaN or ±∞ in it, or
    /// an f32 overflow of its statistics).
    type Stats = Affine;
    type Sweep<S: Simd, E: Element, V: Values<S>> = Normalize<S, E, V, GAMMA, BETA>;
    const GROUPS: bool = true;

    #[inline(always)]
    unsafe fn stats<S: Simd, E: Element, R: Source<S>, P: Pending<S>>(
        s: S,
        call: &NormCall<E>,
        src: &R,
        pending: &P,
    ) -> Affine {
        // SAFETY: the row holds `d ≥ 1` values.
        unsafe {
            let k = src.first();
            let mo = moments(s, src, call.d, k, pending);
            Self::of(call, k, mo.mean, mo.m2)
        }
    }

    #[inline(always)]
    unsafe fn group_sum<S: Simd, E: Element, R: RowSource<S, E>, const B: usize, const FULL: bool>(
        s: S,
        call: &NormCall<E>,
        row: usize,
        k: f32,
    ) -> S::V {
        // SAFETY: forwarded.
        unsafe { group_row_sum::<S, E, R, B, FULL>(s, call, row, k) }
    }

    #[inline(always)]
    unsafe fn group_dev<S: Simd, E: Element, const B: usize, const FULL: bool>(
        s: S,
        call: &NormCall<E>,
        again: *const E,
        row: usize,
        k: f32,
        mean: (f64, f32),
    ) -> S::V {
        unsafe { group_row_dev::<S, E, B, FULL>(s, again, call.d, row, k, mean) }
    }

    #[inline(always)]
    unsafe fn group_stats<S: Simd, E: Element, R: RowSource<S, E>>(
        s: S,
        call: &NormCall<E>,
        r0: usize,
        n: usize,
        k: &[f32; GROUP],
        means: &GroupMeans,
        devs: &[S::V; GROUP],
    ) -> [Affine; GROUP] {
        let _ = (r0, n);
        let m2 = group_m2_of(s, call.d, devs, means);
        let mean = &means.mean;
        let (mut mean_hi, mut rstd, mut shift) = ([0.0; GROUP], [0.0; GROUP], [0.0; GROUP]);
        for j in 0..GROUP {
            let a = Self::of(call, k[j], mean[j], m2[j]);
            (mean_hi[j], rstd[j], shift[j]) = (a.mean_hi, a.rstd, a.shift);
        }
        std::array::from_fn(|j| Affine {
            mean_hi: mean_hi[j],
            rstd: rstd[j],
            shift: shift[j],
        })
    }

    #[inline(always)]
    fn sweep<S: Simd, E: Element, V: Values<S>>(
        s: S,
        call: &NormCall<E>,
        a: Affine,
        h: V,
        y: *mut E,
    ) -> Option<Normalize<S, E, V, GAMMA, BETA>> {
        (!a.mean_hi.is_nan()).then(|| Normalize::new(s, call, h, y, a))
    }

    unsafe fn wide<S: Simd, E: Element, V: Values<S>>(call: &NormCall<E>, h: V, y: *mut E) -> (f32, f32) {
        let d = call.d;
        // SAFETY: the row holds `d` values at `h` and `y`; `h` is read in full before `y` is
        // written, except by `normalize_f64`, which reads `h_j` before writing `y_j`.
        unsafe {
            let out = match moments_f64(|j| h.at(j), d) {
                Some(mo) => {
                    let rstd = rstd_of(mo.m2 / d as f64, call.eps);
                    normalize_f64::<S, E, V>(&h, y, d, call.gamma, call.beta, mo.mean, rstd);
                    (mo.mean as f32, rstd as f32)
                }
                None => {
                    std::slice::from_raw_parts_mut(y, d).fill(E::from_f32(f32::NAN));
                    (f32::NAN, f32::NAN)
                }
            };
            h.finish(d);
            out
        }
    }

    #[inline(always)]
    fn outputs(a: Affine) -> (f32, f32) {
        (a.mean_hi, a.rstd)
    }
}

/// The normalize sweep of one row: `y = fma(fma(h − μ_hi, rstd, shift), γ, β)`, computed as
/// `fma(fma(μ_hi − h, −rstd, shift), γ, β)`, the same bits (a rounded difference changes sign
/// with its operands, and so does a product with both of its factors). In that order the load
/// of `h` is the subtraction's memory operand on x86: one instruction a vector fewer.
pub(crate) struct Normalize<S: Simd, E, V, const GAMMA: bool, const BETA: bool> {
    h: V,
    y: *mut E,
    gamma: *const f32,
    beta: *const f32,
    mean_hi: S::V,
    /// `−rstd`.
    neg_rstd: S::V,
    shift: S::V,
    /// Whether `y` is written with streaming stores.
    stream: bool,
    /// Whether each span fetches the lines of `y` two spans ahead for ownership
    /// ([`PREFETCH_Y_L2S`]).
    prefetch_y: bool,
    d: usize,
}

impl<S: Simd, E: Element, V: Values<S>, const GAMMA: bool, const BETA: bool> Normalize<S, E, V, GAMMA, BETA> {
    #[inline(always)]
    fn new(s: S, call: &NormCall<E>, h: V, y: *mut E, a: Affine) -> Self {
        Normalize {
            h,
            y,
            gamma: call.gamma,
            beta: call.beta,
            mean_hi: s.splat(a.mean_hi),
            neg_rstd: s.splat(-a.rstd),
            shift: s.splat(a.shift),
            stream: call.stream,
            prefetch_y: call.prefetch_y,
            d: call.d,
        }
    }
}

impl<S: Simd, E: Element, V: Values<S>, const GAMMA: bool, const BETA: bool> Pending<S>
    for Normalize<S, E, V, GAMMA, BETA>
{
    #[inline(always)]
    unsafe fn run(&self, s: S, i: usize, n: usize) {
        // SAFETY: forwarded; `y` covers the row.
        unsafe {
            self.h.write_h(s, self.d, i, n);
            write_span(s, self, self.y, self.d, i, n, self.stream, self.prefetch_y)
        }
    }
}

impl<S: Simd, E: Element, V: Values<S>, const GAMMA: bool, const BETA: bool> Output<S>
    for Normalize<S, E, V, GAMMA, BETA>
{
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: `i + n ≤ d` for every operand; `h[i..]` is read before `y[i..]` is written.
        unsafe {
            let v = s.mul_add(s.sub(self.mean_hi, self.h.get(s, i, n)), self.neg_rstd, self.shift);
            match (GAMMA, BETA) {
                (true, true) => s.mul_add(v, load_n(s, self.gamma, i, n), load_n(s, self.beta, i, n)),
                (true, false) => s.mul(v, load_n(s, self.gamma, i, n)),
                (false, true) => s.add(v, load_n(s, self.beta, i, n)),
                (false, false) => v,
            }
        }
    }
}

/// The normalize sweep in f64, for the rows the f32 statistics cannot handle.
///
/// # Safety
/// `h` gives `d` values, `y` covers `d` writable elements (equal to where `h` reads if they
/// overlap); `gamma`, `beta` cover `d` or are null when absent.
pub(crate) unsafe fn normalize_f64<S: Simd, E: Element, V: Values<S>>(
    h: &V,
    y: *mut E,
    d: usize,
    gamma: *const f32,
    beta: *const f32,
    mean: f64,
    rstd: f64,
) {
    for j in 0..d {
        // SAFETY: `j < d` for every operand; `h[j]` is read before `y[j]` is written.
        unsafe {
            let mut v = (h.at(j) as f64 - mean) * rstd;
            if !gamma.is_null() {
                v *= *gamma.add(j) as f64;
            }
            if !beta.is_null() {
                v += *beta.add(j) as f64;
            }
            *y.add(j) = E::from_f32(v as f32);
        }
    }
}
