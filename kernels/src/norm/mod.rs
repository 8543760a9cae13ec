//! The normalization family: LayerNorm, Add & LayerNorm (Post-LN, Pre-LN, DeepNorm), RMSNorm,
//! Add & RMSNorm, and BatchNorm (inference and training).
//!
//! # Algorithm: one read for the statistics, one sweep to normalize
//!
//! A row `h` of length `d` is read once from memory to gather its mean and variance, then swept
//! once more (from L1 or L2) to write `y`. The statistics go by *chunks* of 512 values on AVX2
//! (1024 on AVX-512; `STEPS` steps of `ACC` vectors), each small enough to stay in L1
//! between two passes over it, shifted by the row's first value `K = h₀`:
//!
//! ```text
//! z = h − K                          (exact when h and K are within a factor 2 of each other)
//! mean_c = Σ z / n                   first pass: four vector accumulators, lanes summed in f64
//! M_c = Σ (h − c)² − n·(K + mean_c − c)²   second pass, from L1: c = f32(K + f32(mean_c))
//! ```
//!
//! and each chunk is merged into the row's f64 moments with Chan's pairwise formula. The last
//! `< ACC·LANES` values of the row, too few for a step, are held in registers and reduced
//! two-pass the same way; so is a whole row of at most `2·ACC` vectors (64 values on AVX2, 128
//! on AVX-512; for plain LayerNorm up to `4·ACC`, see `is_short`), centred on
//! `m = f32(mean_c)` as `z − m`, its lanes summed in f32 before the f64 merge. `E[x²] − E[x]²` is never formed: the
//! second pass sums squared deviations from a centre within rounding of the chunk's mean, and
//! the correction `n·(K + mean_c − c)²` is of the second order in the rounding unit (where `c`
//! rounds by a unit of `|μ|` more than the spread, the deviations `h − c` are a few units of
//! it, and their squares sum exactly). Finally, in f64, `μ = K + mean`, `σ² = M2/d`,
//! `rstd = 1/√(σ² + ε)`, and the normalize sweep computes
//!
//! ```text
//! y = ((h − μ_hi)·rstd − μ_lo·rstd)·γ + β       μ_hi = f32(μ), μ_lo = μ − μ_hi
//! ```
//!
//! with two FMAs: `h − μ_hi` is exact whenever `h` is within a factor 2 of `μ_hi`, so a row
//! such as `10⁷ + N(0, 1)`, whose mean f32 cannot hold, still normalizes to a relative
//! error of about 10⁻⁷.
//!
//! The shift is what keeps the sums accurate on rows far from 0 (the first value is a good
//! guess of the mean); the chunking bounds how far rounding errors can grow (with the chunk
//! length, not with `d`); f64 beyond the chunk makes the merges exact for practical purposes.
//!
//! **Two passes over L1 rather than Welford.** DESIGN.md names a per-lane Welford recurrence
//! (a running mean and `M2` per lane, `1/k` from a table), and the rows went that way until
//! measured against this: the recurrence costs a broadcast, three subtractions and two
//! FMAs a vector, on one dependency chain per accumulator; the two passes cost two additions
//! a vector, then a subtraction and an FMA, with the loads as memory operands, and their chains
//! are independent. The row is still read once from memory (the second pass reads the chunk back
//! from L1), and the error bound below holds for both with room to spare. Measured on Zen 3
//! (AVX2, best of 3 in alternating runs) against the Welford chunks, together with the
//! normalize sweep's memory operand (see `Normalize`) and the early exit of short rows (see
//! `moments`): LayerNorm 16×1024 −9%, 64×256 −13%, 256×64 −9%, 4096×1024 −9%, with 4×4096
//! and 1024×4096 even. Of the instructions at 16×1024 (−13% in all), the two passes took
//! away 5 points and the normalize sweep 8.
//!
//! The add forms keep the per-lane Welford recurrence over their chunks, read once: their
//! first pass builds `h` and stores it, so a second pass would load it back (a third load a
//! vector, beside `x` and `r`) or, where nothing is stored (streamed outputs, half types),
//! build it again. Measured that way (Zen 3, AVX2, best of 3) they ran 6–10% slower than with
//! Welford in cache (16×1024, 4×4096) and 10–17% slower beyond the last-level cache with the
//! `h` output (4096×1024, 1024×4096), though 2–6% faster at 64×256 and 256×64. So does
//! BatchNorm where its channels are short columns (there a second pass would be a second
//! strided sweep), per position. Each of the four accumulators holds one vector of lanes;
//! every lane has seen the same number `k` of values, so one broadcast `1/k` (from the table
//! `RECIP`, no division) serves them all:
//!
//! ```text
//! m_k = m_{k−1} + (z − m_{k−1})·(1/k)        M_k = M_{k−1} + (z − m_{k−1})·(z − m_k)
//! ```
//!
//! and the lanes of a chunk are merged with the k-way form of Chan's formula,
//! `mean = Σ_l m_l / L`, `M2 = Σ_l M_l + k·Σ_l (m_l − mean)²`. The blocks of short add rows
//! (see below) run the plain row loop over their stored `h` with the same Welford chunks, so
//! they stay bit for bit equal to the row loop. `layer_norm` and `add_layer_norm` with `r = 0`
//! are therefore not bit for bit equal on rows of more than `2·ACC` vectors; both are within
//! the bound below.
//!
//! RMSNorm needs no mean: `Σh²` is accumulated in the same chunked way (sums of squares have
//! no cancellation), a short row as one tree of squares from registers, then `y = h·rstd·g`.
//!
//! The add forms build `h = α·x + (r + b)` inside the statistics sweep and, for f32, store it
//! (to the `h` output, or to `y` as scratch), so the normalize sweep reads `h` back from cache.
//! For a half type a stored `h` would be rounded, so nothing is stored then: the normalize sweep
//! rebuilds the same f32 `h` from `x`, `r`, `b` (in cache for the row) and writes the `h` output,
//! if any, rounded once.
//!
//! # Storage types
//!
//! The tensors `x`, `r` (the residual), `y` and the `h` output are stored as any [`Element`]
//! (`f32`, `f16`, `bf16`); the parameters stay f32: `γ`, `β`, the RMSNorm gain, the residual
//! bias `b`, `α`, `ε`, the momentum, the per-row (per-channel) mean and rstd outputs, and the
//! running mean and variance. Inputs are widened exactly as they are loaded, everything is
//! computed in f32 (f64 where the f32 kernel uses f64) exactly as the f32 kernel computes it, and
//! each output element is rounded once to `E` as it is stored. For a half type,
//! `h = fl32(α·x + fl32(r + b))` is formed in f32 from the widened inputs, the statistics and `y`
//! come from that f32 `h`, and the `h` output is that `h` rounded once; no intermediate is ever
//! stored rounded and read back. So the bound for a half output is the f32 bound below plus one
//! rounding to `E` (an f32 result within the f32 bound `B` of `ŷ` rounds into
//! `[E(ŷ − B), E(ŷ + B)]`, ±∞ beyond the type's range, gradually through its subnormals).
//!
//! # Row pipeline
//!
//! Rows go through a two-stage pipeline: the normalize sweep of row `r − 1` runs inside the
//! statistics sweep of row `r`, behind it, in spans of at least 256 values, between the
//! chunks' passes (see `Trail::upto`). Each sweep still sees its row once; what changes is that
//! reading one row from memory overlaps writing the other, as in a copy, and that the long
//! dependency chain that ends a row's statistics (lane reductions, square root, division)
//! overlaps the next row's work. Rows of at least 512 floats, in calls beyond the last-level
//! cache, also prefetch the next row during their statistics sweep (see `PREFETCH_MIN` for
//! why not in cache). (Measured with 32 MiB of rows, d = 4096, AVX-512: the
//! pipeline and the prefetch took LayerNorm from 35% to about 70% of the copy bandwidth and
//! RMSNorm to about 90%. Spans of 256 rather than one Welford step of 4 vectors: 13–15%
//! faster in cache on AVX-512 at d = 1024, the same beyond L2; 128 and 1024 were slower,
//! with the trail looked at every step.) LayerNorm's rows spread those prefetches over both
//! passes of each chunk, half the lines in each, rather than all of them in the first pass
//! (Zen 3, AVX2, 4 Mi elements, three alternating runs each timed against a streaming copy
//! of the same bytes in the same rounds): 4096×1024 from 0.79 to 0.85 of the copy with the
//! calls back to back and from 0.62 to 0.72 with the caches swept before each call,
//! 1024×4096 swept from 0.56–0.60 to 0.66–0.68 (and 1–3% faster in cache, where calls still
//! prefetched then). Neither a longer prefetch distance (two or three rows ahead) nor no software
//! prefetch at all changed the swept 4096×1024 beyond the noise before that. On Zen 4 with
//! AVX-512 the prefetch gains too (LayerNorm against the same calls with it forced off, three
//! rounds in one process, each timed against a streaming copy of the same bytes):
//! 4096×1024 0.65–0.66 of the copy against 0.50–0.55 with the caches swept before each call,
//! 0.76–0.81 against 0.57–0.70 back to back; 1024×4096 swept 0.48–0.51 against 0.42–0.46.
//! Those calls ran the trail of a chunk at once; LayerNorm's two-pass chunks now also run it
//! between the halves of their passes where a chunk is long enough (see `two_pass_chunk`: on
//! AVX-512 a chunk of 1024 values is a whole row at `d = 1024`, whose trail then ran only at
//! the row's end). With that, the prefetch gains less (two runs of the same comparison, the
//! contenders interleaved call by call): swept 4096×1024 0.63–0.66 against 0.60–0.63,
//! 1024×4096 0.56–0.57 against 0.50–0.54; back to back 0.69–0.82 against 0.60–0.64.
//! LayerNorm's rows now prefetch into the level-2 cache rather than the level-1, which on
//! Zen 4 took add_layer_norm with `h` at 4096×1024 1.33–1.39× faster on AVX-512 and
//! 1.29–1.56× on AVX2 (see `PREFETCH_MIN`).
//!
//! In cache the pipeline wins nothing on Zen 4. A standalone AVX-512 model of LayerNorm
//! without it (per row a sum pass, a pass of squared deviations, both from L1, then the
//! normalize; no shift, f32 sums) took 2.51 µs a call at 16×1024 against the kernel's 2.73
//! (medians of 4001 calls, interleaved). Its statistics alone took 1.24 µs and its normalize
//! alone 1.45: they add up to the whole, and the normalize alone takes about as long as a copy
//! of the same bytes (1.2 µs in the report), since `y` is written through L2. The kernel does
//! more per value than the model: the shift, which its error bound needs (two more additions
//! per vector), and a chunk's merges in f64 (not timed apart). Holding each chunk of
//! 8 vectors in registers (a per-lane two-pass, merged per lane by Chan's formula: one load of
//! each value fewer) gained nothing at 16×1024 (2.60 µs), 5% at 4×4096 (2.97 against 3.14),
//! and lost 50% at 64×256.
//!
//! Long rows with parameters once went by pairs: the normalize sweeps of rows `r − 2` and
//! `r − 1` ran span by span inside the statistics sweeps of rows `r` and `r + 1`, so that each
//! span of `γ` and `β` (16 KiB each at `d = 4096`) came from L2 once for two rows. On a Zen 5
//! (48 KiB 12-way L1) that gave LayerNorm 4.4 Gelem/s at 1024×4096 against 3.7 (AVX-512).
//! On a Zen 3 (32 KiB 8-way L1) it lost badly: at 1024×4096 (AVX2, best of 5, three
//! alternating runs) LayerNorm ran at 1.8 Gelem/s by pairs against 2.8–3.1 by rows, RMSNorm with
//! a gain at 1.6–1.9 against 3.8–4.0, add_layer_norm with `h` at 0.70–0.74 against 1.11–1.20;
//! 512×8192 LayerNorm 1.7–2.0 against 2.8–2.9. Two rows' `h` and `y` and the `γ`, `β` spans all
//! sit at the same offsets modulo 4 KiB, six streams in one set of an 8-way cache. A gain on
//! one cache geometry and a loss of up to 2.4× on another: every row length goes by rows.
//! Retried on Zen 4 (32 KiB 8-way L1, 1 MiB L2) for LayerNorm's rows of at least 4096 values
//! in calls beyond 1 MiB, where `by_columns` does not go: the sweeps of rows `r − 2` and
//! `r − 1` ran over the first half of the columns behind the statistics of row `r` and over
//! the second behind those of row `r + 1`, both rows a span at a time (the same bits). A model
//! of the traffic had gained: per span of 256 values a sum and a squares pass of the row, the
//! next row prefetched into L2 8 KiB ahead, and the streamed normalize of both rows half a
//! span at a time, `γ` and `β` loaded once for the two, took 0.84–1.11 ms at 1024×4096
//! against 1.10–1.21 for the same model by rows. The kernel did not follow (harness, 25th
//! percentiles of 5 rounds of 20 calls, three alternating runs, ms, by pairs against by rows):
//! LayerNorm 1024×4096 1.24–1.42 against 1.17–1.37 on AVX-512 and 1.08–1.20 against
//! 1.04–1.35 on AVX2, 512×8192 1.44–1.80 against 1.26–1.41 and 1.32–1.58 against 1.14–1.72;
//! add_layer_norm with `h` 1024×4096 3.16–3.49 against 3.02–3.29 and 2.81–3.48 against
//! 3.10–3.90. A profile (AVX-512, 1024×4096) puts most of its time on the first pass's loads
//! of the row and on the streaming stores.
//!
//! The f32 add forms with rows of at most 128 values, in calls within the last-level cache, go
//! by blocks of rows instead (8 KiB per operand): the add for the whole block, storing `h`,
//! then the plain row loop over the block's `h`, still in L1. The same values go through the
//! same operations, so the bits are those of the row loop; but a short row's statistics no
//! longer wait behind its add, and the adds of a block run back to back. Measured on x86-64:
//! 1.12–1.56× at 32 to 128 values a row, in cache and up to 4 MiB per operand (AVX-512 and
//! AVX2); not used beyond the last-level cache, where it loses the row loop's overlap of
//! memory and computation, nor for longer rows, where the gain is small or a loss. For
//! LayerNorm, where its rows are short enough to go by groups (below), the add goes into the
//! groups' first pass instead: each row's `h` is built, stored and summed in one go, and the
//! second pass and the normalize sweep read it back from L1 (same bits again; `add_layer_norm`
//! 256×64 on AVX-512 1.11–1.13× faster than the add for the block, then the groups over its
//! `h`, with or without the `h` output; AVX2 even; Intel Xeon, report, best of two runs each).
//!
//! Short rows keep the row layout. At `d = 64` a row is one block of registers, so much of its
//! cost is the chain of reductions, square root and division that ends it (4.2 Gelem/s at
//! 256×64 on AVX-512 with the Welford step of the time, 15 ns a row; the plain two-pass loop
//! took about 4.4 times as long). Such rows leave `moments` before its chunk loop: with the
//! two-pass loop in the same body they ran 6% slower than before it (Zen 3, 256×64, AVX2;
//! register allocation, since the instructions were the same to 0.3%), leaving early 9%
//! faster. LayerNorm's short plain rows (rows of at most `2·ACC` vectors, up to `4·ACC` for
//! plain calls: see `is_short`; and the blocks of the add forms) go by groups of 16 rows,
//! pass by pass over the group: the sums of every row, then their reductions, then the
//! squared deviations of every row, then theirs (see `layer_norm::by_groups`, which gives the
//! bits of the row loop), in calls of at most 1 MiB. A group's passes are as many independent
//! chains as rows, where one row at a time its chain filled the out-of-order window, and its
//! reductions and square roots go in vectors across rows: 1.13–1.24× on AVX-512 and
//! 1.08–1.23× on AVX2 at 32 to 128 values a row (Intel Xeon). Where the rows fill their block,
//! the groups are pipelined, each row of one group normalized beside the second pass of a row
//! of the next and the first pass of a row of the one after: 1.08–1.14× more at 64 and 128
//! values on AVX-512 (1.18–1.20× at 2048×64, 1.03× at 256 values), 1.06–1.18× at 64 and 128
//! values on AVX2 (1.00–1.17× at 512×32, two runs apart).
//! A layout with the rows across the lanes was measured and dropped: `LANES` rows transposed
//! in L1 a `LANES × LANES` block at a time, the per-lane Welford of the time with one row per lane,
//! and the rows' f64 merges, square roots and divisions in f64 vectors. It gained 17% at
//! `d = 64` on AVX-512 (LayerNorm and RMSNorm), but lost 12% at `d = 256`, 4–18% on AVX2,
//! and 8–26% on the add forms; the transposes alone (four shuffles per vector) took about a
//! quarter of its time at `d = 64`. At the other end, LayerNorm's rows of at least 4096
//! values (plain and add forms) go by columns in calls of at most 1 MiB (`by_columns`): the
//! statistics of 16 rows, then their normalize sweeps a span of 1024 columns at a time, so
//! that `γ` and `β` stay in L1 across the rows (plain: 1.04–1.15× on AVX-512, 1.03–1.08× on
//! AVX2; the add forms 1.04–1.09× on AVX-512, 0.99–1.07× on AVX2).
//!
//! # Streaming stores
//!
//! LayerNorm and RMSNorm (with the add forms) write their f32 output `y` with streaming stores
//! on AVX2 and AVX-512 when [`Stores`](crate::Stores) says so: by default, for calls whose
//! working set (`x`, `r`, `y` and `h` where they are distinct) is at least the last-level
//! cache and rows of at least 512 values. Only whole, vector-aligned lines are streamed;
//! the partial lines where a row's ends are not aligned are stored ordinarily, and the one at
//! the end of the next row is prefetched (see `write_span`). The add forms then build `h`
//! from `x` and `r` again in the normalize sweep instead of reading it back: without an `h`
//! output, `h` is no longer kept in `y` between the sweeps; with one, the normalize sweep
//! streams the `h` output too, ahead of `y`, each on its own alignment. In place, `h` is
//! still stored by the statistics sweep, over the `x` it has just read (in cache).
//!
//! Measured against ordinary stores, AVX-512, 16 MiB per operand, best of 5 alternating runs
//! of back-to-back calls:
//! - LayerNorm at 4096×1024: 1.6× with `y` aligned, 1.5× with `x` and `y` 16 bytes off
//!   alignment (as `malloc` returns large blocks);
//! - RMSNorm with a gain at 1024×4096: 1.7× aligned, 1.6× 16 bytes off;
//! - add_layer_norm without `h`: 1.37× at 4096×1024 and 1.08× at 1024×4096;
//! - add_layer_norm with `h`: 1.36× at 1024×4096 (rows then went by pairs, see above).
//!   Against streaming `y` alone, with `h` stored by the statistics sweep: 1.28× at
//!   4096×1024 and 1.33× at 1024×4096, and 1.31× and 1.48× with `x` and `y` 16 bytes off (the
//!   `h` output 16 bytes off throughout);
//! - add_layer_norm in place: 1.56× at 4096×1024, 1.45× at 1024×4096;
//! - on AVX2, LayerNorm: 1.5× at 4096×1024 and 1.1× at 1024×4096; add_layer_norm with `h`
//!   1.43× and 1.25×, in place 1.44× and 1.25×.
//!
//! Part of the gain on back-to-back calls is that `x`, no longer evicted by `y`, stays in the
//! last-level cache. With the caches flushed between calls, LayerNorm gained 1.15× and 1.44×
//! (4096×1024, 1024×4096) and RMSNorm 1.38× and 1.09×. The report holds these rows against a
//! copy with streaming stores, which gains the same way.
//!
//! # Against the copy beyond L2
//!
//! Where LayerNorm's time goes in the report's calls beyond L2 (16 MiB per operand, `y`
//! streamed, `x` left in the last-level cache between calls as in a streaming copy). Zen 4
//! (AMD EPYC, 32 KiB L1, 1 MiB L2, 32 MiB L3), harness, page-aligned operands, 25th
//! percentiles of 5 rounds of 20 back-to-back calls, three alternating runs, AVX-512 and AVX2:
//! - The streaming copy is bound by its stores: 0.60–0.63 ms, against 0.59–0.60 for the
//!   streaming stores alone and 0.24–0.28 for the reads of `x` alone.
//! - At `d = 4096`, `γ` and `β` make most of the gap. LayerNorm with both took 0.99–1.21 ms
//!   at 1024×4096 (0.50–0.53 of the copy on AVX-512, 0.53–0.62 on AVX2), with `γ` alone
//!   0.80–1.02, with neither 0.67–0.74 (0.82–0.90 of the copy on both ISAs). A row's `γ` and
//!   `β` are 32 KiB, the whole L1, so in the row loop they come from L2 for every row. No
//!   order that keeps them in L1 across rows has won beyond 1 MiB on every shape and ISA:
//!   by columns gained LayerNorm at 1024×4096 but lost at 512×8192 and add_layer_norm with
//!   `h` on AVX2, its pipelined variants lost (see `layer_norm::by_columns`), and so did
//!   rows by pairs (above).
//! - At `d = 1024` the computation alone is about as long as the copy: in cache (16×1024)
//!   LayerNorm took 2.17–2.42 µs, 0.56–0.62 ms at the 4 Mi elements of 4096×1024, where the
//!   copy took 0.60–0.63. Beyond L2 it took 0.79–1.15 ms (0.54–0.77 of the copy), and
//!   0.70–0.86 with neither `γ` nor `β`: 0.85 of the copy would need nearly all of its
//!   computation hidden under the stores.
//!
//! # Error bound
//!
//! With `u = 2⁻²⁴`, for one row (the exact `μ`, biased `σ²`, `rstd = 1/√(σ² + ε)` of the f32
//! values `h` the kernel normalizes), `R = max_j |h_j − μ|` (its spread) and
//! `Z = max_j |h_j − h₀|` (its distance from the shift, `Z ≤ 2R`):
//!
//! ```text
//! E_μ = (4R + 12Z)·u + 2⁻¹⁴⁰                              mean
//! E_v = (20σ² + 9R² + 27R·Z)·u + 2⁻¹⁴⁰·(1 + R)             variance
//! e   = E_v/(σ² + ε),  ε_r = e/2 + e² + 2u                 rstd, relative (for e ≤ 1/2)
//! |y_j − ŷ_j| ≤ |γ_j|·rstd·E_μ + |ŷ_j − β_j|·(ε_r + 3u) + u·|ŷ_j| + 2⁻¹⁴⁸·(1 + |γ_j|)
//! ```
//!
//! Derivation, to first order in `u`, for a chunk of a row (`n ≤ 16` values per lane and
//! accumulator). The shift rounds each `z` by at most `uZ`. Each lane of an accumulator sums
//! its `n` values in order, rounding partial sums of at most `kZ` (`k = 2..n`): at most
//! `(n(n+1)/2 − 1)·uZ`, or `8.44uZ` per value; the tree of the four accumulators adds `2uZ`,
//! the f64 sum of the lanes nothing: `11.44uZ ≤ E_μ`. In the second pass a deviation
//! `t = z − m` (`|t| ≤ 2R`) carries the shift's `uZ` and its own rounding `u|t|`, which move
//! its square by `4uRZ + 2u·t²`; the FMAs that sum `n` squares per lane round at most
//! `n·u` of their sum, the tree `2u`, so with `Σ t² = M2 + O(u²)` (the chunk's sum of squared
//! deviations is at most its share of the row's `d·σ²`) the chunk's `M2` is within
//! `(n + 4)u·σ² + 4uRZ` per value of its own. Centring on `m` instead of the exact chunk mean
//! costs nothing at first order: `Σ(z − m)² = M2 + n·(mean − m)²` exactly, and the correction
//! uses the computed mean, off by `O(uZ)`, in a term that is itself `O(u²)`. So the rows meet
//! `E_v` with `9R² + 23RZ` of room. A block reduced two-pass (a short row, or a row's last
//! values) stays within the same terms. Its sums go as one tree in f32, over its vectors (at
//! most four levels, sixteen vectors) and then its lanes (at most four levels, on AVX-512),
//! before they are widened: its mean carries the shift and at most eight roundings per value
//! (`≤ 9uZ`); its `M2` carries one rounding per deviation (`2u` on its square), at most nine
//! per square in its sum (the product, the FMA, three levels of vectors, four of lanes), and
//! the centring offset to second order (`≤ 11u·σ²`).
//!
//! The bound's `9R² + 27RZ` are for the Welford chunks (the add forms' rows, per lane, and
//! BatchNorm's short channels, per position down the rows): there a rounding in the update
//! of a running mean is the same as perturbing the value just added by
//! `p_k ≤ 2u|z_k − m_{k−1}| + k·u·|m_k| ≤ 4uR + k·u·Z`; averaged over a chunk of `n ≤ 16` steps that moves the mean by
//! `≤ 4uR + (n+1)/2·uZ`; with the shift (`uZ`) and the f32 sum of the four accumulators
//! (`2uZ`): `E_μ`. Such a perturbation moves `M2` by
//! `|2(m_{k−1} − z̄) + (z_k − m_{k−1})/k|·p_k ≤ 2R(1 + 1/k)·p_k` (the recurrence is first-order
//! sensitive to its running mean, unlike a two-pass sum), which over a chunk averages to
//! `≤ 8.7uR² + 18.75uRZ` per value; the shift adds `2uRZ`, the rounding of chunk means
//! `2R·3uZ`, and the roundings of the `M` increments, of their sums and of the between-lane
//! term at most `(n + 4)u·σ²`.
//!
//! In both, `μ_hi + μ_lo` holds `μ` to `2⁻⁵³|μ|`, which is below `2⁻²⁹·uZ`. The normalize
//! sweep rounds `h − μ_hi` (only where it is not exact), the first FMA and `rstd` (`3u` on
//! `ŷ − β`) and the second FMA (`u·|ŷ|`). The `2⁻¹⁴⁰` terms cover results that fall into the
//! subnormals.
//!
//! For RMSNorm (`ms = mean(h²)`): `e = (10u·ms + 2⁻¹⁴⁹)/(ms + ε)`, `ε_r = e/2 + e² + 2u`, and
//! `|y_j − ŷ_j| ≤ |ŷ_j|·(ε_r + 2u) + 2⁻¹⁴⁸·(1 + |g_j|)` — about `9u` relative: 8 roundings per
//! lane in a chunk and 2 in the sum of the accumulators, halved by the square root, then the
//! f32 `rstd` and two products.
//!
//! These bounds are worst cases over the rounding errors (they assume every rounding in a
//! chunk errs the same way); measured errors are far smaller, a few `u·|ŷ|` on
//! ordinary rows (`kernels/tests/norm.rs` prints the worst ratio to the bound).
//!
//! # Special values
//!
//! A row (a channel for BatchNorm training) holding a NaN or ±∞ gives NaN for all of its
//! outputs (`y`, mean, rstd). Rows whose spread makes the f32 statistics overflow (beyond
//! about 10¹⁷) are detected (the statistics come out non-finite while the row is finite) and
//! recomputed two-pass in f64, as is their normalization: they are exact to the f32 rounding.

mod add_norm;
mod batch_norm;
mod layer_norm;
mod rms_norm;

pub use add_norm::AddNorm;
pub use batch_norm::BatchNormOptions;
pub(crate) use layer_norm::NormCall;
pub use layer_norm::{LayerNormOptions, Residual, RowStats};
pub use rms_norm::RmsNormOptions;

use crate::simd::Simd;
use crate::{Element, Error};

/// Independent accumulators of the statistics sweep: a chunk's first pass adds into each
/// (3-cycle chains), its second accumulates squares into each with FMAs (4-cycle chains); a
/// Welford step is a subtract and an FMA deep (8 cycles). Issued at about two
/// vectors a cycle, four chains keep them busy.
pub(crate) const ACC: usize = 4;

/// Steps (of [`ACC`] vectors) per chunk: 512 values on AVX2, 1024 on AVX-512, read twice from
/// L1 when two-pass; Welford steps per lane otherwise (the length of [`RECIP`]). The rounding
/// error of a chunk grows with it (see the module docs); 16 keeps the merges below 15% of the
/// sweep.
pub(crate) const STEPS: usize = 16;

/// `RECIP[k] = 1/k` rounded to f32: the weight of the k-th value of a running mean, and the
/// scale of a chunk's sum (no division in the sweeps).
static RECIP: [f32; STEPS + 1] = {
    let mut t = [0.0f32; STEPS + 1];
    let mut k = 1;
    while k <= STEPS {
        t[k] = 1.0 / k as f32;
        k += 1;
    }
    t
};

/// Sums of squares per lane and accumulator before they are reduced: bounds the RMS error by
/// 8 roundings per lane (see the module docs).
const SQUARE_STEPS: usize = 8;

/// Rows at least this long, in calls whose working set is at least the last-level cache (or
/// where its size is unknown), prefetch the inputs of the next row during their statistics
/// sweep, one row ahead of the loads (measured on AVX2 and AVX-512 with rows beyond L2: about
/// 1.5× on LayerNorm at d = 4096); other calls are left to the hardware prefetchers.
///
/// Within the last-level cache the prefetch cost more than it gave. Zen 3, AVX2, best of 5 in
/// three alternating runs, µs, with it and without it: in L2, LayerNorm 8×2048 4.11–4.13
/// against 3.85–3.86, 4×4096 4.31–4.35 against 4.12–4.15, 16×1024 even;
/// add_layer_norm with `h` 16×1024 5.93–6.37 against 5.08–5.19, 4×4096 5.99–6.34 against
/// 5.39–5.85; RMSNorm with a gain 4×4096 2.99–3.03 against 2.66–2.68. In L3, 256×1024
/// add_layer_norm 107–112 against 90–99, LayerNorm even (256×1024, 1024×1024) or 4% slower
/// with it (128×4096). Beyond the last-level cache it gains: LayerNorm 4096×1024 957–988
/// against 1051–1123 (back to back, `x` left in L3 by the streaming stores).
///
/// Zen 4 (AVX-512 and AVX2, 32 MiB L3), best of 5 in three alternating runs, µs, prefetch
/// forced on against off, within the last-level cache: add_layer_norm with `h` 256×1024
/// 87.1–87.8 against 72.1–75.9 (AVX-512) and 94.5–96.0 against 75.6–79.0 (AVX2), 128×4096
/// 190.9–192.1 against 171.6–178.2 (AVX-512); RMSNorm with a gain 128×4096 106.2–109.8 against
/// 96.2–97.6 (AVX-512); LayerNorm even at 128×4096, 5–12% faster with it only at 256×1024 on
/// AVX-512 (48.4–48.5 against 51.2–55.0). So the rule holds there too. Beyond it the runs
/// spread by 10–40% and point both ways (LayerNorm 4096×1024 on AVX-512 1108–1138 against
/// 1277–2158, add_layer_norm with `h` on AVX2 2909–3038 against 2542–2689): kept as it is.
///
/// Intel Xeon with AVX512-FP16 (2 MiB L2, 480 MiB L3 as the hypervisor reports it, so the
/// report's 16 MiB operands never prefetch there): forced on for every call with `d ≥ 512`,
/// the distance capped at 1024 values (a quarter row at `d = 4096`), two report runs of each
/// setting, alternating, fraction of the copy: LayerNorm 4096×1024 0.91–0.98 against
/// 0.91–0.94, 1024×4096 0.83–0.93 against 0.85–0.90; add_layer_norm with `h` 0.95–0.98
/// against 0.71–0.98 and 0.89–0.94 against 0.77–0.92; in cache even. Within the noise
/// between runs, so nothing changed. At the full row's distance, `d = 4096` lost (a harness,
/// medians of 41 calls back to back, two runs: 0.86–0.90× on AVX-512, 0.94–0.96× on AVX2),
/// `d = 1024` gained 1.06–1.08×: a row ahead of 16 KiB with `γ`, `β` and the previous row
/// overflows the 48 KiB L1.
///
/// LayerNorm's rows (the two-pass chunks of the plain calls, the Welford chunks of the add
/// forms) prefetch into the level-2 cache ([`Simd::prefetch_l2`], `prefetcht1`); RMSNorm's
/// into the level-1. On Zen 4 (AMD EPYC, 1 MiB L2, 32 MiB L3) a model of LayerNorm's traffic
/// at 4096×1024 (per span of 256 values a sum pass and a squares pass, then the streamed
/// normalize of the same span of the row before) took 1.09–1.33 times as long as a streaming
/// copy of the same bytes with its prefetches into L1 a row ahead, and 0.97–1.03 times with
/// them into L2 4 to 8 KiB ahead (two runs); reading one row over and over (in L1) rather
/// than the rows from L3, it took as long as its streaming stores alone. The kernels, in a
/// harness (µs, the 25th percentile of 7 rounds of 41 back-to-back calls, three alternating
/// runs of each build, level-2 against level-1): add_layer_norm with `h` 4096×1024 2396–2587 against
/// 3247–3453 on AVX-512 and 2015–2517 against 2602–3914 on AVX2, 1024×4096 3162–3325
/// against 3401–3783 on AVX2 and even on AVX-512; LayerNorm 4096×1024 738–922 against
/// 852–1392 on AVX2 and even on AVX-512, 1024×4096 1284–1297 against 1338–1727 on AVX-512 and
/// even on AVX2. RMSNorm with a gain lost with it on AVX-512 at 4096×1024 (1288–1635 against
/// 820–1245, four runs of four), gained on AVX2 (706–827 against 822–1123 at both shapes) and
/// was mixed on AVX-512 at 1024×4096: it keeps the level-1 hint. The level-2 hint was not
/// measured on Intel.
pub(crate) const PREFETCH_MIN: usize = 512;

/// Vectors of a row short enough to be held in registers by [`merge_block`], which gathers its
/// statistics two-pass, without chunks: `2·ACC`, 64 values on AVX2, 128 on AVX-512.
pub(crate) const BLOCK: usize = 2 * ACC;

/// Vectors of the longest short rows of LayerNorm ([`is_short`]): `2·BLOCK`, 256 values on
/// AVX-512, 128 on AVX2.
pub(crate) const WIDE: usize = 2 * BLOCK;

/// Floats per cache line: one prefetch per line.
const LINE: usize = 16;

/// The most lanes of any ISA (AVX-512); sizes the stack buffers that spill vectors.
pub(crate) const MAX_LANES: usize = 16;

/// Count, mean and sum of squared deviations of a set of values, in f64.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Moments {
    pub n: f64,
    pub mean: f64,
    pub m2: f64,
}

impl Moments {
    /// Adds a set of `n` values with mean `mean` and sum of squared deviations `m2` (Chan's
    /// pairwise formula).
    #[inline(always)]
    pub fn merge(&mut self, n: f64, mean: f64, m2: f64) {
        if self.n == 0.0 {
            *self = Moments { n, mean, m2 };
            return;
        }
        let total = self.n + n;
        let delta = mean - self.mean;
        let w = n / total;
        self.mean += delta * w;
        self.m2 += m2 + delta * delta * self.n * w;
        self.n = total;
    }

    /// [`merge`](Self::merge) with the weight `w = n/(self.n + n)` given (the same for many
    /// merges of equal counts).
    #[inline(always)]
    pub fn merge_weighted(&mut self, n: f64, mean: f64, m2: f64, w: f64) {
        let delta = mean - self.mean;
        self.mean += delta * w;
        self.m2 += m2 + delta * delta * self.n * w;
        self.n += n;
    }

    /// The statistics are finite (neither a NaN or ±∞ value nor an f32 overflow reached them)
    /// and the f32 normalize sweep cannot overflow: every `|h − μ| ≤ √M2 < 10³⁸`.
    #[inline(always)]
    pub fn fits_f32(&self) -> bool {
        fits_f32(self.mean, self.m2)
    }
}

/// [`Moments::fits_f32`] of a row's `mean` and `m2`.
#[inline(always)]
pub(crate) fn fits_f32(mean: f64, m2: f64) -> bool {
    mean.is_finite() & (m2 < 1e76)
}

/// Where the statistics sweep gets a row's values `h` from: read from `x`, or built as
/// `α·x + (r + b)` (and, for f32, stored on the way).
pub(crate) trait Source<S: Simd> {
    /// Whether the statistics sweep reads each chunk twice (its sum, then its squared
    /// deviations from its mean, the second pass from L1, calling [`Source::full`] again), or
    /// runs the per-lane Welford recurrence over it once (see the module docs). Two passes
    /// only where `full` is a bare load.
    const TWO_PASS: bool;
    /// `h₀`, computed exactly as the vector lanes compute it.
    ///
    /// # Safety
    /// The row is not empty.
    unsafe fn first(&self) -> f32;
    /// `h[i..i + LANES]`.
    ///
    /// # Safety
    /// `i + LANES ≤ d`.
    unsafe fn full(&self, s: S, i: usize) -> S::V;
    /// `h[i..i + n]` for `n < LANES`; the other lanes are unspecified.
    ///
    /// # Safety
    /// `i + n ≤ d`.
    unsafe fn partial(&self, s: S, i: usize, n: usize) -> S::V;
    /// Whether this source prefetches the inputs of the next row.
    fn prefetches(&self) -> bool;
    /// Prefetches element `i` of the inputs of the next row, into the level-2 cache where `l2`
    /// and into the level-1 otherwise (LayerNorm's chunk loops ask for the level-2, RMSNorm's
    /// for the level-1: see [`Accumulate::PREFETCH_L2`] and [`PREFETCH_MIN`]); only where
    /// [`Source::prefetches`]. (The sweeps test that once per chunk, not once per line:
    /// measured on AVX2, the test in the Welford step took 4 of its 36 instructions.)
    fn prefetch(&self, s: S, i: usize, l2: bool);
}

/// A [`Source`] over the rows of a [`NormCall`], with what the normalize sweep of a row reads.
pub(crate) trait RowSource<S: Simd, E: Element>: Source<S> + Sized {
    /// Where the normalize sweep gets the row's `h`.
    type Back: Values<S>;
    /// The source of the row at offset `off` of `call`, and where its `h` is read back.
    ///
    /// # Safety
    /// `off + d` is within the call's rows.
    unsafe fn row(s: S, call: &NormCall<E>, off: usize) -> (Self, Self::Back);
}

/// Where the normalize sweep (and the f64 path) of a row gets its f32 values `h`: exactly the
/// values the statistics sweep saw, never a copy rounded to a half type.
pub(crate) trait Values<S: Simd>: Copy {
    /// `h[i..i + n]`, `n ≤ LANES` (the other lanes unspecified). The half-typed add forms
    /// rebuild `h` here from `x`, `r`, `b` and write the `h` output (rounded once) after reading
    /// them.
    ///
    /// # Safety
    /// `i + n ≤ d`; called once per span, in the normalize sweep.
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V;
    /// Writes the span `i..i + n` of the `h` output of a row of `d` values where the normalize
    /// sweep streams it (see [`AddResidual::stream_h`]), before `y` is written there; else
    /// nothing.
    ///
    /// # Safety
    /// As [`write_span`].
    #[inline(always)]
    unsafe fn write_h(&self, s: S, d: usize, i: usize, n: usize) {
        let _ = (s, d, i, n);
    }
    /// `h_j`, for the f64 path (which may call it several times per `j`).
    ///
    /// # Safety
    /// `j < d`, and `finish` has not run.
    unsafe fn at(&self, j: usize) -> f32;
    /// Ends the f64 path of a row, after its last `at`: writes the `h` output where the
    /// statistics sweep did not (the half-typed add forms).
    ///
    /// # Safety
    /// The row holds `d` values.
    #[inline(always)]
    unsafe fn finish(&self, d: usize) {
        let _ = d;
    }
}

/// The inputs to prefetch during the row at `off`: those of the next row (`x`, and `r` for the
/// add forms), when rows are long and there is one.
///
/// # Safety
/// `off + d` is within the call's rows.
#[inline(always)]
unsafe fn ahead_of<E: Element>(call: &NormCall<E>, off: usize) -> [*const E; 2] {
    let next = off + call.d;
    if !call.prefetch || next >= call.rows * call.d {
        return [std::ptr::null(); 2];
    }
    // SAFETY: `next` starts a row of the call.
    unsafe {
        [
            call.x.add(next),
            if call.r.is_null() { call.r } else { call.r.add(next) },
        ]
    }
}

/// Prefetches element `i` of the first `N` rows at `ahead`, which are not null, into the
/// level-2 cache where `l2`, else into the level-1.
#[inline(always)]
fn prefetch_ahead<S: Simd, E, const N: usize>(s: S, i: usize, ahead: &[*const E; 2], l2: bool) {
    for p in &ahead[..N] {
        debug_assert!(!p.is_null());
        let p = p.wrapping_add(i).cast();
        if l2 {
            s.prefetch_l2(p);
        } else {
            s.prefetch(p);
        }
    }
}

/// A row read as it is (widened exactly to f32).
pub(crate) struct Plain<E, const TWO_PASS: bool = true> {
    pub x: *const E,
    /// The inputs of the next row, prefetched during this row's statistics sweep (null: none).
    pub ahead: [*const E; 2],
}

impl<S: Simd, E: Element, const TWO_PASS: bool> Source<S> for Plain<E, TWO_PASS> {
    const TWO_PASS: bool = TWO_PASS;
    #[inline(always)]
    unsafe fn first(&self) -> f32 {
        // SAFETY: the row is not empty.
        unsafe { (*self.x).to_f32() }
    }
    #[inline(always)]
    unsafe fn full(&self, s: S, i: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe { E::load(s, self.x.add(i)) }
    }
    #[inline(always)]
    unsafe fn partial(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe { E::load_partial(s, self.x.add(i), n, 0.0) }
    }
    #[inline(always)]
    fn prefetches(&self) -> bool {
        !self.ahead[0].is_null()
    }
    #[inline(always)]
    fn prefetch(&self, s: S, i: usize, l2: bool) {
        prefetch_ahead::<S, E, 1>(s, i, &self.ahead, l2);
    }
}

impl<S: Simd, E: Element, const TWO_PASS: bool> RowSource<S, E> for Plain<E, TWO_PASS> {
    type Back = Reread<E>;
    #[inline(always)]
    unsafe fn row(_: S, call: &NormCall<E>, off: usize) -> (Self, Reread<E>) {
        // SAFETY: in bounds by the caller's promise.
        unsafe {
            let x = call.x.add(off);
            (
                Plain {
                    x,
                    ahead: ahead_of(call, off),
                },
                Reread { p: x },
            )
        }
    }
}

/// `h` read back from memory: `x` itself for the plain forms, the stored f32 `h` for the f32
/// add forms.
pub(crate) struct Reread<E> {
    p: *const E,
}

impl<E> Clone for Reread<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for Reread<E> {}

impl<S: Simd, E: Element> Values<S> for Reread<E> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe { load_n(s, self.p, i, n) }
    }
    #[inline(always)]
    unsafe fn at(&self, j: usize) -> f32 {
        // SAFETY: in bounds by the caller's promise.
        unsafe { (*self.p.add(j)).to_f32() }
    }
}

/// `h = α·x + (r + b)` (one FMA, after one addition when there is a bias), from the inputs
/// widened exactly. For f32, `h` is stored to `h` as it is produced and the normalize sweep
/// reads it back. Elsewhere nothing is stored here, and the normalize sweep rebuilds the same
/// f32 `h` from the inputs: for a half type, which writes the `h` output (if any) rounded
/// once; for f32 with `h` null; and for f32 with `stream_h`, which streams the `h` output.
/// `h` may equal `x` (the in-place forms): each vector is read before it is written.
pub(crate) struct AddResidual<S: Simd, E, const BIAS: bool> {
    pub x: *const E,
    pub r: *const E,
    /// Length `d`, shared by all rows; unused without `BIAS`.
    pub b: *const f32,
    /// For f32: where `h` goes (the `h` output, `y` as scratch, or `x`), or null (no `h`
    /// output, and `y` streamed: scratch lines in `y` would be cached, then overwritten); for
    /// a half type: the `h` output, or null.
    pub h: *mut E,
    /// f32 only: the `h` output (not `x`) is written by the normalize sweep, ahead of `y`,
    /// with streaming stores, instead of by the statistics sweep: its lines are then never
    /// read from memory before being overwritten.
    pub stream_h: bool,
    pub alpha: f32,
    pub alpha_v: S::V,
    /// As [`Plain::ahead`].
    pub ahead: [*const E; 2],
}

impl<S: Simd, E, const BIAS: bool> Clone for AddResidual<S, E, BIAS> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Simd, E, const BIAS: bool> Copy for AddResidual<S, E, BIAS> {}

impl<S: Simd, E: Element, const BIAS: bool> AddResidual<S, E, BIAS> {
    /// Whether the statistics sweep stores `h` for the normalize sweep to read back.
    #[inline(always)]
    fn stores_h(&self) -> bool {
        E::IS_F32 && !self.h.is_null() && !self.stream_h
    }

    #[inline(always)]
    fn combine(&self, s: S, x: S::V, r: S::V, b: S::V) -> S::V {
        let t = if BIAS { s.add(r, b) } else { r };
        s.mul_add(self.alpha_v, x, t)
    }

    /// `h[i..i + n]`, `n ≤ LANES`, built from the inputs.
    ///
    /// # Safety
    /// `i + n ≤ d`.
    #[inline(always)]
    unsafe fn build(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise.
        unsafe {
            let b = if BIAS { load_n(s, self.b, i, n) } else { s.splat(0.0) };
            self.combine(s, load_n(s, self.x, i, n), load_n(s, self.r, i, n), b)
        }
    }

    /// `h_j` built from the inputs: scalar IEEE addition and FMA round exactly as the lanes do.
    ///
    /// # Safety
    /// `j < d`, and `x[j]` not yet overwritten by `h`.
    #[inline(always)]
    unsafe fn scalar(&self, j: usize) -> f32 {
        // SAFETY: in bounds by the caller's promise.
        unsafe {
            let r = (*self.r.add(j)).to_f32();
            let t = if BIAS { r + *self.b.add(j) } else { r };
            self.alpha.mul_add((*self.x.add(j)).to_f32(), t)
        }
    }
}

impl<S: Simd, E: Element, const BIAS: bool> Source<S> for AddResidual<S, E, BIAS> {
    const TWO_PASS: bool = false;
    #[inline(always)]
    unsafe fn first(&self) -> f32 {
        // SAFETY: the row is not empty, and nothing of it was stored yet.
        unsafe { self.scalar(0) }
    }
    #[inline(always)]
    unsafe fn full(&self, s: S, i: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise; `h` is written after `x` is read.
        unsafe {
            let b = if BIAS { s.load(self.b.add(i)) } else { s.splat(0.0) };
            let h = self.combine(s, E::load(s, self.x.add(i)), E::load(s, self.r.add(i)), b);
            if self.stores_h() {
                E::store(s, self.h.add(i), h);
            }
            h
        }
    }
    #[inline(always)]
    unsafe fn partial(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise; partial accesses stop at `n`.
        unsafe {
            let b = if BIAS {
                s.load_partial(self.b.add(i), n, 0.0)
            } else {
                s.splat(0.0)
            };
            let h = self.combine(
                s,
                E::load_partial(s, self.x.add(i), n, 0.0),
                E::load_partial(s, self.r.add(i), n, 0.0),
                b,
            );
            if self.stores_h() {
                E::store_partial(s, self.h.add(i), n, h);
            }
            h
        }
    }
    #[inline(always)]
    fn prefetches(&self) -> bool {
        !self.ahead[0].is_null()
    }
    #[inline(always)]
    fn prefetch(&self, s: S, i: usize, l2: bool) {
        // `r` is not null in the add forms, nor then its row ahead.
        prefetch_ahead::<S, E, 2>(s, i, &self.ahead, l2);
    }
}

impl<S: Simd, E: Element, const BIAS: bool> RowSource<S, E> for AddResidual<S, E, BIAS> {
    type Back = Self;
    #[inline(always)]
    unsafe fn row(s: S, call: &NormCall<E>, off: usize) -> (Self, Self) {
        // SAFETY: in bounds by the caller's promise; `h` is null only for a half type without
        // an `h` output, and then neither offset nor written.
        unsafe {
            let src = AddResidual {
                x: call.x.add(off),
                r: call.r.add(off),
                b: call.bias,
                h: if call.h.is_null() { call.h } else { call.h.add(off) },
                // A separate `h` output (neither null nor `x`) of a streaming call; in place,
                // `h` goes where `x` was just read, in cache.
                stream_h: call.stream && !call.h.is_null() && call.h.cast_const() != call.x,
                alpha: call.alpha,
                alpha_v: s.splat(call.alpha),
                ahead: ahead_of(call, off),
            };
            (src, src)
        }
    }
}

impl<S: Simd, E: Element, const BIAS: bool> Values<S> for AddResidual<S, E, BIAS> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: in bounds by the caller's promise. Where `h` is rebuilt, the inputs at
        // `i..i + n` are read before the `h` output (possibly `x`) is written there.
        unsafe {
            if self.stores_h() {
                load_n(s, self.h.cast_const(), i, n)
            } else {
                let h = self.build(s, i, n);
                if !(self.h.is_null() || self.stream_h) {
                    store_n(s, self.h, i, n, h);
                }
                h
            }
        }
    }
    #[inline(always)]
    unsafe fn write_h(&self, s: S, d: usize, i: usize, n: usize) {
        if self.stream_h {
            // SAFETY: forwarded; `h` is not `x`, so the inputs stay intact for `y`.
            unsafe { write_span(s, &Rebuilt(*self), self.h, d, i, n, true, false) }
        }
    }
    #[inline(always)]
    unsafe fn at(&self, j: usize) -> f32 {
        // SAFETY: in bounds by the caller's promise. Where the statistics sweep stored `h`, `x`
        // may be overwritten (in place); elsewhere `x` is intact until `finish`.
        unsafe {
            if self.stores_h() {
                (*self.h.add(j)).to_f32()
            } else {
                self.scalar(j)
            }
        }
    }
    #[inline(always)]
    unsafe fn finish(&self, d: usize) {
        if !(self.stores_h() || self.h.is_null()) {
            for j in 0..d {
                // SAFETY: `j < d`; `x[j]` is read before `h[j]` (possibly `x[j]`) is written.
                unsafe { *self.h.add(j) = E::from_f32(self.scalar(j)) };
            }
        }
    }
}

/// The `h` of an [`AddResidual`] row built again from its inputs, as an [`Output`].
struct Rebuilt<S: Simd, E, const BIAS: bool>(AddResidual<S, E, BIAS>);

impl<S: Simd, E: Element, const BIAS: bool> Output<S> for Rebuilt<S, E, BIAS> {
    #[inline(always)]
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V {
        // SAFETY: forwarded.
        unsafe { self.0.build(s, i, n) }
    }
}

/// Work done alongside a statistics sweep: the normalize sweep of the previous row, behind it
/// (in spans of [`TRAIL_SPAN`] values, each ending where the current step begins), so that the
/// reads of one row stream together with the writes of the other (as in a copy) instead of
/// alternating with them row by row. (Behind rather than at the same offset: the previous
/// row's `h` is then never loaded at the offsets where this row's `h` is being stored,
/// 4 KiB-aliased to it in rows of a multiple of 1024 floats.)
pub(crate) trait Pending<S: Simd> {
    /// Normalizes the span `i..i + n` of the previous row.
    ///
    /// # Safety
    /// `i + n` is within the row.
    unsafe fn run(&self, s: S, i: usize, n: usize);
}

/// Nothing pending: the first row, or a previous row that takes the f64 path.
pub(crate) struct Idle;

impl<S: Simd> Pending<S> for Idle {
    #[inline(always)]
    unsafe fn run(&self, _: S, _: usize, _: usize) {}
}

/// Values of the previous row normalized at a time during the statistics sweep of the next:
/// the least [`Trail::upto`] runs.
///
/// At 128, rather than 256, the AVX2 two-pass chunks (512 values) are four spans long and
/// split in halves as those of AVX-512 are (see `two_pass_chunk`), and rows of 256 values
/// run the trail between their passes. Intel Xeon with AVX512-FP16, LayerNorm with `γ`,
/// `β`, fraction of a copy of the same bytes in the same run (medians of 41 calls beyond L2,
/// 2001 in cache; two runs): on AVX2 1024×4096 0.97 and 0.88 against 0.91 and 0.84,
/// 4096×1024 0.87 and 0.89 against 0.85 and 0.83, 64×256 0.44 against 0.40, 16×1024 0.51
/// against 0.49; on AVX-512 even beyond L2 (0.88 and 0.82 against 0.88 and 0.81; 0.80 and
/// 0.81 against 0.80 and 0.80) and in cache (32×512 0.58 against 0.59, 16×1024 0.66
/// against 0.64). The add forms' Welford chunks run the trail only between chunks, and went
/// even.
const TRAIL_SPAN: usize = 128;

/// Runs a [`Pending`] sweep in order over a row of `d` values, as far as asked.
struct Trail<'a, P> {
    pending: &'a P,
    done: usize,
    d: usize,
}

impl<'a, P> Trail<'a, P> {
    fn new(pending: &'a P, d: usize) -> Self {
        Trail { pending, done: 0, d }
    }

    /// Runs the pending sweep up to `to` once at least [`TRAIL_SPAN`] values wait and `to < d`
    /// (the rest is for [`Trail::finish`]): each
    /// call of the sweep costs a loop setup, and calling it per Welford step (4 vectors) made
    /// LayerNorm 13–15% slower in cache on AVX-512 (d = 1024).
    ///
    /// The statistics sweeps call it between chunks (every 512 values on AVX2, 1024 on
    /// AVX-512; 256 and 512 for `Σh²`), and LayerNorm's two-pass chunks also between their
    /// passes and, where a chunk is at least four spans long (512 values: both x86 ISAs),
    /// between the halves of each pass, the trail going half as far as the passes (see
    /// `two_pass_chunk`). Called per step, its test kept the normalize
    /// constants live inside the Welford loop, which then spilled three accumulators and
    /// copied two (AVX2): per chunk, the step is 36 instructions instead of 47, and LayerNorm
    /// ran 9–11% fewer instructions (16×1024, 64×256, 4×4096) and 3–8% faster (Zen 3, best of
    /// 4 alternating runs). The Welford chunks of the add forms run it only between chunks, so
    /// rows of one chunk (`d ≤ 1024` on AVX-512) normalize the previous row at their end, in
    /// one span: splitting the chunk in two, the trail between the halves, measured even in
    /// cache and 3–5% slower beyond L2 (Zen 4, add_layer_norm with `h`, AVX-512).
    #[inline(always)]
    fn upto<S: Simd>(&mut self, s: S, to: usize)
    where
        P: Pending<S>,
    {
        if to < self.d && to >= self.done + TRAIL_SPAN {
            // SAFETY: `done < to < d`.
            unsafe { self.pending.run(s, self.done, to - self.done) };
            self.done = to;
        }
    }

    /// Runs the rest of the pending sweep, up to `d`.
    #[inline(always)]
    fn finish<S: Simd>(&mut self, s: S)
    where
        P: Pending<S>,
    {
        if self.done < self.d {
            // SAFETY: `done < d`.
            unsafe { self.pending.run(s, self.done, self.d - self.done) };
            self.done = self.d;
        }
    }
}

/// Mean and sum of squared deviations of `h − k` over a row of `d ≥ 1` values, in chunks of
/// [`STEPS`] steps, two-pass from L1 or by per-lane Welford (see [`Source::TWO_PASS`] and the
/// module docs). The mean is relative to `k`.
/// `pending` runs over the row behind it (see [`Trail::upto`]).
///
/// # Safety
/// `src` covers `d` values, and so does the row of `pending`.
#[inline(always)]
pub(crate) unsafe fn moments<S: Simd, R: Source<S>, P: Pending<S>>(
    s: S,
    src: &R,
    d: usize,
    k: f32,
    pending: &P,
) -> Moments {
    let lanes = S::LANES;
    let group = ACC * lanes;
    let kv = s.splat(k);
    let mut total = Moments::default();
    let mut trail = Trail::new(pending, d);
    if is_short::<S, R>(d) {
        // A short row, held in registers and merged two-pass.
        // SAFETY: `src` covers `0..d`, at most `WIDE` vectors.
        unsafe { merge_short(s, src, 0, d, kv, &mut total) };
        trail.finish(s);
        return total;
    }
    let mut left = d / group;
    let mut i = 0;
    while left > 0 {
        let steps = left.min(STEPS);
        let end = i + steps * group;
        if R::TWO_PASS {
            // SAFETY: the chunk `i..end` is within `0..d`.
            unsafe { two_pass_chunk(s, src, i, end, steps, k, &mut trail, &mut total) };
        } else {
            // SAFETY: as above.
            let (m, m2) = unsafe {
                if src.prefetches() {
                    welford_chunk::<S, R, true>(s, src, i, steps, kv)
                } else {
                    welford_chunk::<S, R, false>(s, src, i, steps, kv)
                }
            };
            // The trail between chunks, not inside them (see `Trail::upto`); before the
            // merge, whose chain of reductions it gives independent work to overlap.
            trail.upto(s, end);
            merge_lanes(s, &m, &m2, steps, &mut total);
        }
        i = end;
        left -= steps;
    }
    if i < d {
        // SAFETY: `src` covers `i..d`, fewer than `ACC` vectors after the chunks. (Over
        // `ACC` vectors directly: `merge_short` would bring its wider blocks into the loop
        // of long rows too.)
        unsafe { merge_block::<S, R, ACC>(s, src, i, d, kv, &mut total) };
    }
    trail.finish(s);
    total
}

/// Merges the values `i..d` of `src` (minus `k`, splat in `kv`; at most [`WIDE`] vectors)
/// into `total` with [`merge_block`], over `ACC` vectors where they fit, else `BLOCK` where
/// they fit, else `WIDE`.
///
/// Over `BLOCK` vectors, a row that fits `ACC` pays for the zero vectors in its sums and
/// trees. With `ACC`, short rows ran faster (Intel Xeon with AVX512-FP16, 2 cores; median of
/// 2001 calls, the two forms alternating in one process): LayerNorm 256×64 on AVX-512
/// 4.64–4.65 µs against 5.67–5.68 (1.22×), 512×32 1.22× on AVX-512 and 1.16× on AVX2.
///
/// # Safety
/// `src` covers `i..d`, `i < d ≤ i + WIDE·LANES`.
#[inline(always)]
unsafe fn merge_short<S: Simd, R: Source<S>>(s: S, src: &R, i: usize, d: usize, kv: S::V, total: &mut Moments) {
    // SAFETY: forwarded.
    unsafe {
        match short_block::<S>(d - i).0 {
            ACC => merge_block::<S, R, ACC>(s, src, i, d, kv, total),
            BLOCK => merge_block::<S, R, BLOCK>(s, src, i, d, kv, total),
            _ => merge_block::<S, R, WIDE>(s, src, i, d, kv, total),
        }
    }
}

/// Merges the chunk `i..end` of `steps` steps into `total`, two-pass (see the module docs),
/// running `trail` between the passes.
///
/// # Safety
/// `src` covers `i..end`, and `trail` a row of at least `end` values.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn two_pass_chunk<S: Simd, R: Source<S>, P: Pending<S>>(
    s: S,
    src: &R,
    i: usize,
    end: usize,
    steps: usize,
    k: f32,
    trail: &mut Trail<'_, P>,
    total: &mut Moments,
) {
    // Each pass prefetches half of the next row's lines under the chunk: spread over both,
    // the prefetches keep memory busier than in a burst in the first (module docs, "Row
    // pipeline"). Both compute `k − h` rather than `h − k` (the same value negated, exactly),
    // so that the load of `h` is the subtraction's memory operand on x86.
    //
    // The trail normalizes the previous row once while this sweep reads the row twice: it
    // goes half as far as the passes, between them and, in chunks long enough for two of its
    // spans a pass, between their halves too. The stores of the normalize sweep then come in
    // bursts of a quarter of a chunk rather than of all of it. Zen 4, µs, median of 21
    // (beyond L2) or 2001 calls, three alternating runs, against the chunk's trail run after
    // its first pass up to its end: LayerNorm 16×1024 2.34–2.36 against 2.58–2.62 (AVX-512),
    // 2.42–2.46 against 2.60–2.66 (AVX2); 8×2048 3.10–3.12 against 3.33–3.38 (AVX-512);
    // 4×4096 3.35–3.38 against 3.52–3.56 (AVX-512); 64×256 even; beyond L2, 4096×1024 with
    // `x` left in the L3 between calls, 0.84–0.91 of a streaming copy of the same bytes
    // against 0.75–0.82 (AVX-512; AVX2 even), 1024×4096 0.58 against 0.56–0.57.
    let group = ACC * S::LANES;
    let len = end - i;
    let mid = if len >= 4 * TRAIL_SPAN {
        i + steps / 2 * group
    } else {
        end
    };
    // Where the trail goes between the halves of the passes: a quarter of the chunk each.
    let quarter = (mid - i) / 2;
    let op = Deviations(s.splat(k));
    // SAFETY (both passes): forwarded.
    let sum = unsafe { chunk_pass(s, src, i, mid, end, Lines::Even, &op, trail, i + quarter) };
    let sum = tree(s, sum);
    // The sum is of `k − h`: the chunk's mean of `h − k` is minus its mean. `mc` is the same
    // in f32 (`1/group` is a power of two; `RECIP[steps]` exact when `steps` is one).
    let n = (steps * group) as f64;
    let mean = -s.reduce_add_f64(sum) / n;
    let mc = s.reduce_add(sum) * -RECIP[steps] * (1.0 / group as f32);
    // The trail between the passes: independent work while the sum above goes through its
    // reductions.
    trail.upto(s, i + len / 2);
    // The second pass is centred on `c = f32(k + mc)`, within rounding of the chunk's mean
    // `k + mean`: one subtraction a vector, `c − h` (against two for `(k − h) + mc`: LayerNorm
    // in cache, fraction of a same-run copy, two runs, Intel Xeon with AVX512-FP16, on AVX-512
    // 16×1024 0.65–0.69 against 0.61–0.64, 8×2048 0.61–0.63 against 0.58–0.59, 64×256 0.53
    // against 0.50, 4×4096 0.45–0.46 against 0.44; on AVX2 3–6% faster at each). The offset of
    // `c` from the mean is removed below, in f64, where `c − k` is exact.
    let c = k + mc;
    let op = Centred(s.splat(c));
    // SAFETY: forwarded.
    let squares = unsafe { chunk_pass(s, src, i, mid, end, Lines::Odd, &op, trail, i + len / 2 + quarter) };
    trail.upto(s, end);
    let m2 = s.reduce_add_f64(tree(s, squares));
    let off = mean - (c as f64 - k as f64);
    total.merge(n, mean, m2 - n * off * off);
}

/// One pass of [`two_pass_chunk`] over `i..end` with `op`, in two loops split at `mid` (one
/// where `mid = end`), between which `trail` goes on up to `to`.
///
/// # Safety
/// `src` covers `i..end`, `i ≤ mid ≤ end` on multiples of `ACC·LANES` from `i`, and `trail` a
/// row of at least `end` values.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn chunk_pass<S: Simd, R: Source<S>, A: Accumulate<S>, P: Pending<S>>(
    s: S,
    src: &R,
    i: usize,
    mid: usize,
    end: usize,
    lines: Lines,
    op: &A,
    trail: &mut Trail<'_, P>,
    to: usize,
) -> [S::V; ACC] {
    let mut acc = [s.splat(0.0); ACC];
    // SAFETY: forwarded.
    unsafe { accumulate(s, src, i, mid, lines, &mut acc, op) };
    if mid < end {
        trail.upto(s, to);
        // SAFETY: forwarded.
        unsafe { accumulate(s, src, mid, end, lines, &mut acc, op) };
    }
    acc
}

/// What a chunk loop sums: [`Accumulate::step`] folds a vector `v` of the row into an
/// accumulator.
trait Accumulate<S: Simd> {
    /// Whether the loop's prefetches of the next row go to the level-2 cache
    /// ([`Simd::prefetch_l2`]) rather than the level-1 ([`Simd::prefetch`]); see
    /// [`PREFETCH_MIN`].
    const PREFETCH_L2: bool;
    fn step(&self, s: S, acc: S::V, v: S::V) -> S::V;
}

/// `Σ(k − h)`, `k` splat: the first pass of [`two_pass_chunk`].
struct Deviations<V>(V);

impl<S: Simd> Accumulate<S> for Deviations<S::V> {
    const PREFETCH_L2: bool = true;
    #[inline(always)]
    fn step(&self, s: S, acc: S::V, v: S::V) -> S::V {
        s.add(acc, s.sub(self.0, v))
    }
}

/// `Σ(h − c)²`, computed as `Σ(c − h)²` (`c` splat, so that `h` is the memory operand): the
/// second pass of [`two_pass_chunk`].
struct Centred<V>(V);

impl<S: Simd> Accumulate<S> for Centred<S::V> {
    const PREFETCH_L2: bool = true;
    #[inline(always)]
    fn step(&self, s: S, acc: S::V, v: S::V) -> S::V {
        let t = s.sub(self.0, v);
        s.mul_add(t, t, acc)
    }
}

/// `Σh²`: RMSNorm's sweep ([`sum_squares`]).
struct Squared;

impl<S: Simd> Accumulate<S> for Squared {
    const PREFETCH_L2: bool = false;
    #[inline(always)]
    fn step(&self, s: S, acc: S::V, v: S::V) -> S::V {
        s.mul_add(v, v, acc)
    }
}

/// The lines of the next row that a chunk loop prefetches, of those under its chunk.
#[derive(Clone, Copy)]
enum Lines {
    All,
    /// Those at even multiples of [`LINE`] in each group of `ACC` vectors (every line where a
    /// group is one line).
    Even,
    /// The others.
    Odd,
}

impl Lines {
    /// Whether the vector at `off` in a group of `ACC` vectors starts a line taken.
    #[inline(always)]
    fn take(self, off: usize) -> bool {
        match self {
            Lines::All => off.is_multiple_of(LINE),
            Lines::Even => off.is_multiple_of(2 * LINE),
            Lines::Odd => off % (2 * LINE) == LINE,
        }
    }
}

/// Folds the vectors of the chunk `i..end` (a multiple of `ACC·LANES` values) into the
/// [`ACC`] accumulators in turn with `op`, prefetching the next row's `lines` where the
/// source prefetches.
///
/// # Safety
/// `src` covers `i..end`.
#[inline(always)]
unsafe fn accumulate<S: Simd, R: Source<S>, A: Accumulate<S>>(
    s: S,
    src: &R,
    i: usize,
    end: usize,
    lines: Lines,
    acc: &mut [S::V; ACC],
    op: &A,
) {
    // SAFETY: forwarded; each loop prefetches only where the source does.
    unsafe {
        if src.prefetches() {
            accumulate_with::<S, R, A, true>(s, src, i, end, lines, acc, op)
        } else {
            accumulate_with::<S, R, A, false>(s, src, i, end, lines, acc, op)
        }
    }
}

/// [`accumulate`], prefetching where `PREFETCH`.
///
/// # Safety
/// As [`accumulate`]; `PREFETCH` only where `src.prefetches()`.
#[inline(always)]
unsafe fn accumulate_with<S: Simd, R: Source<S>, A: Accumulate<S>, const PREFETCH: bool>(
    s: S,
    src: &R,
    mut i: usize,
    end: usize,
    lines: Lines,
    acc: &mut [S::V; ACC],
    op: &A,
) {
    let lanes = S::LANES;
    while i < end {
        for (a, acc) in acc.iter_mut().enumerate() {
            if PREFETCH && lines.take(a * lanes) {
                src.prefetch(s, i + a * lanes, A::PREFETCH_L2);
            }
            // SAFETY: inside the chunk.
            *acc = op.step(s, *acc, unsafe { src.full(s, i + a * lanes) });
        }
        i += ACC * lanes;
    }
}

/// The per-lane Welford accumulators `(m, M)` of the chunk of `steps ≤ STEPS` steps from `i`
/// (values minus `k`, splat in `kv`), prefetching the next row's into the level-2 cache where
/// `PREFETCH` (the Welford chunks are those of LayerNorm's add forms; see [`PREFETCH_MIN`]).
///
/// # Safety
/// `src` covers `i..i + steps·ACC·LANES`; `PREFETCH` only where `src.prefetches()`.
#[inline(always)]
unsafe fn welford_chunk<S: Simd, R: Source<S>, const PREFETCH: bool>(
    s: S,
    src: &R,
    mut i: usize,
    steps: usize,
    kv: S::V,
) -> ([S::V; ACC], [S::V; ACC]) {
    let lanes = S::LANES;
    let group = ACC * lanes;
    // The first step: m = z, M = 0, exactly.
    let mut m = [kv; ACC];
    for (a, m) in m.iter_mut().enumerate() {
        if PREFETCH && Lines::All.take(a * lanes) {
            src.prefetch(s, i + a * lanes, true);
        }
        // SAFETY (all loads): step `i` reads `i..i + ACC·LANES`, inside the chunk.
        *m = s.sub(unsafe { src.full(s, i + a * lanes) }, kv);
    }
    let mut m2 = [s.splat(0.0); ACC];
    i += group;
    for &rk in &RECIP[2..=steps] {
        let rk = s.splat(rk);
        for a in 0..ACC {
            if PREFETCH && Lines::All.take(a * lanes) {
                src.prefetch(s, i + a * lanes, true);
            }
            let z = s.sub(unsafe { src.full(s, i + a * lanes) }, kv);
            let delta = s.sub(z, m[a]);
            m[a] = s.mul_add(delta, rk, m[a]);
            m2[a] = s.mul_add(delta, s.sub(z, m[a]), m2[a]);
        }
        i += group;
    }
    (m, m2)
}

/// Merges the [`ACC`] Welford accumulators of a chunk of `steps` steps into `total`, by the
/// k-way form of Chan's formula: `M2 = Σ_l M_l + steps·Σ_l (m_l − mean)²`. The two sums share
/// one reduction (`M_l + steps·(m_l − mc)²` per lane), so a chunk costs two: the mean, then that.
///
/// The lanes are centred on `mc`, their mean as an f32 sum: any value near the mean serves,
/// since the offset `mean − mc` is removed below, and its rounding enters `M2` only to second
/// order in `u`. The f32 sum ends sooner than the f64 mean, which the deviations no longer
/// wait for: the chain of reductions, square root and division that ends a row is what short
/// rows wait on (256×64 and 64×256, AVX2 on Zen 3, best of 5 in six alternating runs: 4–5%
/// faster than centring on the f64 mean rounded to f32).
#[inline(always)]
fn merge_lanes<S: Simd>(s: S, m: &[S::V; ACC], m2: &[S::V; ACC], steps: usize, total: &mut Moments) {
    let lanes = (ACC * S::LANES) as f64;
    let n = steps as f64 * lanes;
    let means = s.add(s.add(m[0], m[1]), s.add(m[2], m[3]));
    let mean = s.reduce_add_f64(means) / lanes;
    let mc = s.reduce_add(means) * (1.0 / lanes as f32);
    let mv = s.splat(mc);
    let t = [s.sub(m[0], mv), s.sub(m[1], mv), s.sub(m[2], mv), s.sub(m[3], mv)];
    let dev = s.add(
        s.mul_add(t[0], t[0], s.mul(t[1], t[1])),
        s.mul_add(t[2], t[2], s.mul(t[3], t[3])),
    );
    let sum = if steps > 1 {
        let within = s.add(s.add(m2[0], m2[1]), s.add(m2[2], m2[3]));
        s.mul_add(dev, s.splat(steps as f32), within)
    } else {
        dev
    };
    // Σ(m_l − mc)² = Σ(m_l − mean)² + lanes·(mean − mc)²: remove the second term.
    let off = mean - mc as f64;
    total.merge(n, mean, s.reduce_add_f64(sum) - n * off * off);
}

/// Merges the values `i..d` of `src` (minus `k`, splat in `kv`; at most `B ≤` [`WIDE`]
/// vectors) into `total`, two-pass from registers: their sum, then the squares of their
/// deviations from `mc`, an f32 mean, as in [`moments`]. Both sums are reduced across the
/// lanes in f32 ([`Simd::reduce_add`]), then widened: [`group_means_of`] and [`group_m2_of`]
/// reduce sixteen rows at a time the same way (in f64 that cost more than the groups' other
/// reductions together: see `layer_norm::by_groups`).
///
/// Only the loads depend on `n = d − i`: the vectors past the end are zero, the sums run as
/// trees over all `B` of them, and the deviations are `z − mc·w` with `w` 1 on the
/// values and 0 past them (from [`WEIGHTS`]), which is `z − mc` rounded once, or exactly 0.
/// (Masking the deviations by branches on `n` instead cost more than the Welford chunk it
/// replaced: LLVM kept the branch conditions in spilled flags.)
///
/// # Safety
/// `src` covers `i..d`, `i < d ≤ i + B·LANES`.
#[inline(always)]
unsafe fn merge_block<S: Simd, R: Source<S>, const B: usize>(
    s: S,
    src: &R,
    i: usize,
    d: usize,
    kv: S::V,
    total: &mut Moments,
) {
    let n = d - i;
    debug_assert!(B.is_power_of_two() && B >= 2 && B <= WIDE && 0 < n && n <= B * S::LANES);
    // SAFETY: forwarded.
    let z = unsafe { load_block::<S, R, B, false>(s, src, i, n, kv) };
    // The lanes reduced in f32, then widened, as `group_means_of` does for sixteen rows.
    let centre = block_mean(s.reduce_add(tree(s, z)) as f64, n);
    let m2 = block_m2(
        s.reduce_add(tree_deviations::<S, B, false>(s, z, n, centre)) as f64,
        n,
        centre,
    );
    total.merge(n as f64, centre.0, m2);
}

/// The mean of a block of `n ≤ WIDE·MAX_LANES` values from the sum of its lanes, and
/// `mc`, the same rounded to f32: [`merge_block`]'s first pass.
#[inline(always)]
fn block_mean(sum: f64, n: usize) -> (f64, f32) {
    // `n ≤ WIDE·MAX_LANES`: exact as u32.
    let mean = sum * (1.0 / n as u32 as f64);
    (mean, mean as f32)
}

/// The squares of the deviations `z − mc` of the `n` values of a block `z` (zero past them),
/// summed as a tree: [`merge_block`]'s second pass, before its reduction. `FULL` where
/// `n = B·LANES`: then every weight is 1, and `z − mc` is the same as `fma(1, −mc, z)`.
#[inline(always)]
fn tree_deviations<S: Simd, const B: usize, const FULL: bool>(
    s: S,
    z: [S::V; B],
    n: usize,
    (_, mc): (f64, f32),
) -> S::V {
    let mut t = z;
    if FULL {
        let m = s.splat(mc);
        for t in t.iter_mut() {
            *t = s.sub(*t, m);
        }
        return tree_squares(s, t);
    }
    let neg = s.splat(-mc);
    // `w` lane `l` of vector `j` is `WEIGHTS[WIDE·MAX_LANES − n + j·LANES + l]`: 1 where
    // `j·LANES + l < n`. Offsets stay within `0..2·WIDE·MAX_LANES`.
    let w = WEIGHTS[WIDE * MAX_LANES - n..].as_ptr();
    for (j, t) in t.iter_mut().enumerate() {
        // SAFETY: `j·LANES + LANES ≤ B·LANES ≤ WIDE·LANES` values from `w`.
        *t = s.mul_add(unsafe { s.load(w.add(j * S::LANES)) }, neg, *t);
    }
    tree_squares(s, t)
}

/// The sum of squared deviations from the mean of a block of `n` values, from the f64 sum of
/// the lanes of [`tree_deviations`] (centred on `mc`): it less `n·(mean − mc)²`.
#[inline(always)]
fn block_m2(dev: f64, n: usize, (mean, mc): (f64, f32)) -> f64 {
    let off = mean - mc as f64;
    dev - n as f64 * off * off
}

/// Rows gathered at once by groups (`layer_norm::by_groups`; as many as
/// [`Simd::reduce_add_16`] reduces).
pub(crate) const GROUP: usize = 16;

/// Whether rows of `d` values read through `R` are short: held in registers by
/// [`merge_block`] (in [`moments`]), and gathered by groups of rows (`layer_norm::by_groups`,
/// with [`group_row_sum`] and [`group_row_dev`]) where the source is plain. Rows of up to
/// [`BLOCK`] vectors are. For a two-pass source (plain LayerNorm) so are rows of up to
/// [`WIDE`] where the ISA has 32 registers, and where it has 16, rows that fill `WIDE`
/// exactly (no weights to hold).
///
/// Measured on an Intel Xeon with AVX512-FP16 (LayerNorm with `γ`, `β`, harness, medians of
/// 2001 calls in cache, 201 beyond, runs alternating with the rule of `BLOCK` alone, two to
/// five each): on AVX-512 64×256 2.31–2.37 µs against 2.40–2.41, 96×192 3.03–3.07 against
/// 3.09–3.20, 4096×256 (the row loop) 0.995–0.997 of a copy against 0.975–0.979; on AVX2
/// 128×128 3.01–3.04 against 3.52, 8192×128 0.997 against 0.962. Rows of 96 values on AVX2,
/// twelve vectors in a block of sixteen, ran 0.91× (170×96). The Welford sources (the add
/// forms, and the blocks that follow their bits) keep `BLOCK`: in their row loop, wide
/// blocks ran add_layer_norm with `h` at 0.75× on AVX-512 (64×256) and 0.86× (4096×256).
#[inline(always)]
pub(crate) fn is_short<S: Simd, R: Source<S>>(d: usize) -> bool {
    let lanes = S::LANES;
    d <= BLOCK * lanes || R::TWO_PASS && d <= WIDE * lanes && (S::REGISTERS >= 32 || d == WIDE * lanes)
}

/// The block `(B, FULL)` that [`merge_block`] and the groups hold a short row of `d` values
/// in ([`is_short`]): `B` vectors ([`ACC`], [`BLOCK`] or [`WIDE`], the fewest that hold it),
/// `FULL` where the row fills them exactly.
#[inline(always)]
pub(crate) fn short_block<S: Simd>(d: usize) -> (usize, bool) {
    let b = if d <= ACC * S::LANES {
        ACC
    } else if d <= BLOCK * S::LANES {
        BLOCK
    } else {
        WIDE
    };
    (b, d == b * S::LANES)
}

/// The first pass of a short row of a group: the sum, as a tree of vectors, of the row's
/// values minus `k`, read through `R` (for the f32 add forms: `h` built, stored and summed
/// in one go). Its lanes are reduced with those of the group's other rows by
/// [`group_means_of`]. The same values through the same operations as [`merge_block`]'s
/// first pass, so the same bits.
///
/// # Safety
/// Row `row` lies in `call`, of `d ≤ B·LANES` values (equal where `FULL`).
#[inline(always)]
pub(crate) unsafe fn group_row_sum<S: Simd, E: Element, R: RowSource<S, E>, const B: usize, const FULL: bool>(
    s: S,
    call: &NormCall<E>,
    row: usize,
    k: f32,
) -> S::V {
    let d = call.d;
    // SAFETY: by the caller's promise.
    let (src, _) = unsafe { R::row(s, call, row * d) };
    tree(s, unsafe { load_block::<S, R, B, FULL>(s, &src, 0, d, s.splat(k)) })
}

/// The means of the rows of a group of `d` values from their sums by [`group_row_sum`]
/// (zero past the group's rows): the lanes of the sixteen reduced at once
/// ([`Simd::reduce_add_16`]), then [`block_mean`] of each, as a loop over arrays that the
/// compiler runs in vectors.
#[inline(always)]
pub(crate) fn group_means_of<S: Simd>(s: S, d: usize, sums: &[S::V; GROUP]) -> GroupMeans {
    let mut sum = [0.0; GROUP];
    s.reduce_add_16(sums, &mut sum);
    let (mut mean, mut mc) = ([0.0; GROUP], [0.0; GROUP]);
    for j in 0..GROUP {
        (mean[j], mc[j]) = block_mean(sum[j] as f64, d);
    }
    GroupMeans { mean, mc }
}

/// The second pass of a short row of a group: the squares of its deviations from its mean
/// `(mean, mc)` ([`block_mean`]), summed as a tree of vectors ([`tree_deviations`]), from
/// row `row` of the values at `again` (`x`, or the `h` the first pass stored), read again
/// from L1.
///
/// # Safety
/// Row `row` of `d ≤ B·LANES` values (equal where `FULL`) lies at `again`.
#[inline(always)]
pub(crate) unsafe fn group_row_dev<S: Simd, E: Element, const B: usize, const FULL: bool>(
    s: S,
    again: *const E,
    d: usize,
    row: usize,
    k: f32,
    mean: (f64, f32),
) -> S::V {
    // SAFETY: by the caller's promise.
    let z = unsafe { row_block::<S, E, B, FULL>(s, again, d, row, k) };
    tree_deviations::<S, B, FULL>(s, z, d, mean)
}

/// The sums of squared deviations from the mean of the rows of a group of `d` values, from
/// their trees by [`group_row_dev`] (zero past the group's rows) and their means: reduced
/// and finished as in [`group_means_of`].
#[inline(always)]
pub(crate) fn group_m2_of<S: Simd>(s: S, d: usize, devs: &[S::V; GROUP], means: &GroupMeans) -> [f64; GROUP] {
    let mut sum = [0.0; GROUP];
    s.reduce_add_16(devs, &mut sum);
    let mut m2 = [0.0; GROUP];
    for j in 0..GROUP {
        m2[j] = block_m2(sum[j] as f64, d, (means.mean[j], means.mc[j]));
    }
    m2
}

/// The means of the rows of a group ([`group_means_of`]), row `j`'s in entry `j` of each
/// array (an array each, so that the loops over them run in vectors).
#[derive(Clone, Copy, Default)]
pub(crate) struct GroupMeans {
    /// The means, in f64.
    pub mean: [f64; GROUP],
    /// The same, rounded to f32.
    pub mc: [f32; GROUP],
}

/// Row `j` of the rows of `d ≤ B·LANES` values at `x` (equal where `FULL`), minus `k`, in
/// `B` vectors (zero past the row), as [`load_block`] loads it.
///
/// # Safety
/// Row `j` lies in `x`.
#[inline(always)]
unsafe fn row_block<S: Simd, E: Element, const B: usize, const FULL: bool>(
    s: S,
    x: *const E,
    d: usize,
    j: usize,
    k: f32,
) -> [S::V; B] {
    let src = Plain::<E> {
        // SAFETY: by the caller's promise.
        x: unsafe { x.add(j * d) },
        ahead: [std::ptr::null(); 2],
    };
    // SAFETY: the row holds `d ≤ B·LANES` values.
    unsafe { load_block::<S, Plain<E>, B, FULL>(s, &src, 0, d, s.splat(k)) }
}

/// The values `i..i + n` of `src` minus `kv`, in `B` vectors, zero past them; `FULL` where
/// `n = B·LANES` (the same values, without the tests for a tail).
///
/// # Safety
/// `src` covers `i..i + n`, `n ≤ B·LANES`, equal where `FULL`.
#[inline(always)]
unsafe fn load_block<S: Simd, R: Source<S>, const B: usize, const FULL: bool>(
    s: S,
    src: &R,
    i: usize,
    n: usize,
    kv: S::V,
) -> [S::V; B] {
    debug_assert!(!FULL || n == B * S::LANES);
    let lanes = S::LANES;
    let (full, part) = if FULL { (B, 0) } else { (n / lanes, n % lanes) };
    let zero = s.splat(0.0);
    let mut z = [zero; B];
    // (Loops, not closures: a closure carries no target features, and where LLVM declines
    // to inline it its intrinsics become calls.)
    for (j, z) in z.iter_mut().enumerate() {
        // SAFETY: vector `j < full` reads `i + j·LANES .. + LANES ≤ i + n`, the partial one
        // `..i + n`.
        if j < full {
            *z = s.sub(unsafe { src.full(s, i + j * lanes) }, kv);
        } else if j == full && part > 0 {
            let v = s.sub(unsafe { src.partial(s, i + j * lanes, part) }, kv);
            *z = s.select(s.first_lanes(part), v, zero);
        }
    }
    z
}

/// `WIDE·MAX_LANES` ones, then as many zeros: the weights of [`merge_block`].
static WEIGHTS: [f32; 2 * WIDE * MAX_LANES] = {
    let mut w = [0.0f32; 2 * WIDE * MAX_LANES];
    let mut j = 0;
    while j < WIDE * MAX_LANES {
        w[j] = 1.0;
        j += 1;
    }
    w
};

/// The sum of `N` (a power of two) vectors, as a tree.
#[inline(always)]
fn tree<S: Simd, const N: usize>(s: S, mut v: [S::V; N]) -> S::V {
    tree_of(s, &mut v, N)
}

/// The sum of the first `n` (a power of two) vectors of `v`, as a tree.
#[inline(always)]
fn tree_of<S: Simd>(s: S, v: &mut [S::V], mut n: usize) -> S::V {
    while n > 1 {
        n /= 2;
        for j in 0..n {
            v[j] = s.add(v[j], v[j + n]);
        }
    }
    v[0]
}

/// The sum of the squares of `N` (a power of two) vectors, as a tree whose first level
/// pairs a product with an FMA.
#[inline(always)]
fn tree_squares<S: Simd, const N: usize>(s: S, mut v: [S::V; N]) -> S::V {
    let n = N / 2;
    for j in 0..n {
        v[j] = s.mul_add(v[j], v[j], s.mul(v[j + n], v[j + n]));
    }
    tree_of(s, &mut v, n)
}

/// `Σ h²` over a row of `d` values, in chunks of [`SQUARE_STEPS`] steps reduced in f64;
/// `pending` runs over the same offsets.
///
/// # Safety
/// `src` covers `d` values, and so does the row of `pending`.
#[inline(always)]
pub(crate) unsafe fn sum_squares<S: Simd, R: Source<S>, P: Pending<S>>(s: S, src: &R, d: usize, pending: &P) -> f64 {
    let lanes = S::LANES;
    let group = ACC * lanes;
    let main = d - d % group;
    let mut trail = Trail::new(pending, d);
    if d <= BLOCK * lanes {
        // A short row, held in registers as in `merge_short`: one tree of squares, over `ACC`
        // vectors where it fits (RMSNorm with a gain, AVX-512, as in `merge_short`: 256×64
        // 1.10×, 512×32 1.14×, on AVX2 1.15×). (`x − 0` is `x`, and the compiler drops it.)
        // SAFETY: `src` covers `0..d`, `d ≤ BLOCK·LANES`.
        let squares = unsafe {
            let zero = s.splat(0.0);
            if d <= group {
                tree_squares(s, load_block::<S, R, ACC, false>(s, src, 0, d, zero))
            } else {
                tree_squares(s, load_block::<S, R, BLOCK, false>(s, src, 0, d, zero))
            }
        };
        trail.finish(s);
        return s.reduce_add_f64(squares);
    }
    let mut total = 0.0f64;
    let mut acc = [s.splat(0.0); ACC];
    let mut i = 0;
    // SAFETY (all loads): full loads read `i..i + LANES ≤ d`, the partial one `i..d`.
    while i < main {
        let end = main.min(i + SQUARE_STEPS * group);
        unsafe { accumulate(s, src, i, end, Lines::All, &mut acc, &Squared) };
        i = end;
        total += reduce_sum(s, &mut acc);
        // The trail between chunks, as in `moments`.
        trail.upto(s, i);
    }
    trail.finish(s);
    let mut a = 0;
    while i + lanes <= d {
        let v = unsafe { src.full(s, i) };
        acc[a] = s.mul(v, v);
        a += 1;
        i += lanes;
    }
    if i < d {
        let v = s.select(s.first_lanes(d - i), unsafe { src.partial(s, i, d - i) }, s.splat(0.0));
        acc[a] = s.mul(v, v);
    }
    total + reduce_sum(s, &mut acc)
}

/// Adds the accumulators as a tree (in f32, then the lanes in f64) and zeroes them.
#[inline(always)]
fn reduce_sum<S: Simd>(s: S, acc: &mut [S::V; ACC]) -> f64 {
    let v = s.add(s.add(acc[0], acc[1]), s.add(acc[2], acc[3]));
    *acc = [s.splat(0.0); ACC];
    s.reduce_add_f64(v)
}

/// The constants of the normalize sweep `y = ((h − μ_hi)·rstd − μ_lo·rstd)·γ + β`.
#[derive(Clone, Copy, Default)]
pub(crate) struct Affine {
    /// `f32(μ)`.
    pub mean_hi: f32,
    /// `f32(rstd)`.
    pub rstd: f32,
    /// `−(μ − μ_hi)·rstd`, rounded once.
    pub shift: f32,
}

impl Affine {
    /// All NaN: the mark of a row that takes the f64 path.
    pub const NAN: Affine = Affine {
        mean_hi: f32::NAN,
        rstd: f32::NAN,
        shift: f32::NAN,
    };

    /// The constants for `mean` and `rstd` (f64).
    #[inline(always)]
    pub fn new(mean: f64, rstd: f64) -> Affine {
        let mean_hi = mean as f32;
        Affine {
            mean_hi,
            rstd: rstd as f32,
            shift: (-(mean - mean_hi as f64) * rstd) as f32,
        }
    }
}

/// `rstd = 1/√(var + ε)`, in f64.
#[inline(always)]
pub(crate) fn rstd_of(var: f64, eps: f32) -> f64 {
    1.0 / (var + eps as f64).sqrt()
}

/// Loads `n ≤ LANES` elements at `p + i`, widened to f32: a full load when `n = LANES`.
///
/// # Safety
/// `p + i .. p + i + n` is readable.
#[inline(always)]
pub(crate) unsafe fn load_n<S: Simd, E: Element>(s: S, p: *const E, i: usize, n: usize) -> S::V {
    // SAFETY: forwarded.
    unsafe {
        if n == S::LANES {
            E::load(s, p.add(i))
        } else {
            E::load_partial(s, p.add(i), n, 0.0)
        }
    }
}

/// Stores `n ≤ LANES` elements at `p + i`, each rounded once to `E`.
///
/// # Safety
/// `p + i .. p + i + n` is writable.
#[inline(always)]
pub(crate) unsafe fn store_n<S: Simd, E: Element>(s: S, p: *mut E, i: usize, n: usize, v: S::V) {
    // SAFETY: forwarded.
    unsafe {
        if n == S::LANES {
            E::store(s, p.add(i), v)
        } else {
            E::store_partial(s, p.add(i), n, v)
        }
    }
}

/// Runs `$body` with `$i` (the start) and `$n` (the length) of every vector of a row of `$d`
/// values: `n = LANES`, unrolled by four so that the latencies of neighbouring vectors overlap,
/// then a last partial one. A macro rather than a function taking a closure: a closure carries
/// no target features, and where LLVM declines to inline it its intrinsics become calls.
macro_rules! for_each_vector {
    ($lanes:expr, $d:expr, |$i:ident, $n:ident| $body:block) => {{
        let (lanes, d): (usize, usize) = ($lanes, $d);
        let mut at = 0;
        // Tested against `at < whole`, not `at + 4·lanes <= d`: LLVM then keeps one
        // induction variable (3 instructions of loop control per 4 vectors, not 5).
        let whole = d - d % (4 * lanes);
        while at < whole {
            for u in 0..4 {
                let ($i, $n) = (at + u * lanes, lanes);
                $body
            }
            at += 4 * lanes;
        }
        while at + lanes <= d {
            let ($i, $n) = (at, lanes);
            $body
            at += lanes;
        }
        if at < d {
            let ($i, $n) = (at, d - at);
            $body
        }
    }};
}
pub(crate) use for_each_vector;

/// A normalize sweep's output: the vector of `n ≤ LANES` values at offset `i` of its row.
pub(crate) trait Output<S: Simd> {
    /// # Safety
    /// `i + n ≤ d`; called once per offset, in increasing order (an output may read back
    /// what the statistics sweep stored there).
    unsafe fn get(&self, s: S, i: usize, n: usize) -> S::V;
}

/// Writes the outputs of the span `i..i + n` of a row of `d` values to `y`.
///
/// With ordinary stores: a vector at a time from `i`, unrolled by four. With `stream` (f32
/// only): streaming stores of the row's vector-aligned vectors, so that each of their lines
/// is written whole, once; ordinary stores for the partial vectors before the first aligned
/// element and after the last whole vector. A span writes the aligned vectors that start
/// from its first aligned element up to (not including) the first aligned element after it,
/// so a vector may reach past the span's end; the row's first span writes the head, its last
/// the tail. Each output is computed the same either way: only where it goes differs.
///
/// A line written by ordinary stores is read from memory first, and stores leave the store
/// buffer in order: one such read in a stream of streaming stores holds them all up. So
/// partial lines are left only at the ends of rows, and the line at the end of the next row
/// is prefetched when a row starts. (Measured with `y` 16 bytes off alignment, 4096×1024,
/// AVX-512: with partial lines at every span's ends, unprefetched, LayerNorm ran at 5.4
/// Gelem/s, against 10.2 with `y` aligned.)
///
/// # Safety
/// `y..y + d` is writable, `out` gives `d` values, `i + n ≤ d`, and the spans of a row come
/// in order, each starting where the previous one ended.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn write_span<S: Simd, E: Element, O: Output<S>>(
    s: S,
    out: &O,
    y: *mut E,
    d: usize,
    i: usize,
    n: usize,
    stream: bool,
    prefetch_y: bool,
) {
    if prefetch_y {
        // (Ordinary stores.) With each vector stored, the line of `y` two spans ahead is
        // fetched for ownership: past the row's end, a line of the next row's `y`, or none of
        // the call's, harmlessly (a prefetch never faults).
        let ahead = y.wrapping_add(2 * n);
        for_each_vector!(S::LANES, n, |j, m| {
            // SAFETY: `i + j + m ≤ i + n ≤ d`.
            unsafe { store_n(s, y, i + j, m, out.get(s, i + j, m)) };
            s.prefetch_write(ahead.wrapping_add(i + j).cast_const().cast());
        });
        return;
    }
    if !(E::IS_F32 && stream) {
        for_each_vector!(S::LANES, n, |j, m| {
            // SAFETY: `i + j + m ≤ i + n ≤ d`.
            unsafe { store_n(s, y, i + j, m, out.get(s, i + j, m)) };
        });
        return;
    }
    // `black_box`: without it LLVM hoists the set-up below, loop-invariant and cheap to
    // speculate, out of the statistics loop into every row, streamed or not (measured: 35
    // instructions a row, 15% of LayerNorm's time at 256×64 on AVX2).
    let y = std::hint::black_box(y).cast::<f32>();
    let (lanes, size) = (S::LANES, 4 * S::LANES);
    // The first index from `j` on whose address is vector-aligned (`j` itself if it is).
    let aligned = |j: usize| j + (size - y.wrapping_add(j) as usize % size) % size / 4;
    let head = aligned(0).min(d);
    let whole_end = head + (d - head) / lanes * lanes;
    let bound = |j: usize| aligned(j).clamp(head, whole_end);
    let end = i + n;
    // SAFETY: every offset written lies in `0..d`; streamed ones are aligned by construction.
    unsafe {
        if i == 0 {
            let next_end = y.wrapping_add(2 * d);
            if !(next_end as usize).is_multiple_of(size) {
                s.prefetch(next_end.wrapping_sub(1));
            }
            if head > 0 {
                store_n(s, y, 0, head, out.get(s, 0, head));
            }
        }
        let mut at = bound(i);
        while at < bound(end) {
            s.store_stream(y.add(at), out.get(s, at, lanes));
            at += lanes;
        }
        if end == d && whole_end < d {
            store_n(s, y, whole_end, d - whole_end, out.get(s, whole_end, d - whole_end));
        }
    }
}

/// The two-pass f64 statistics of a row of `d ≥ 1` values `at(j)`: `None` if the row holds a
/// NaN or ±∞. The fallback for rows whose f32 statistics overflow, and for non-finite rows.
pub(crate) fn moments_f64(at: impl Fn(usize) -> f32, d: usize) -> Option<Moments> {
    let at = |j: usize| at(j) as f64;
    let mut sum = 0.0;
    for j in 0..d {
        let v = at(j);
        if !v.is_finite() {
            return None;
        }
        sum += v;
    }
    let mean = sum / d as f64;
    let m2 = (0..d).map(|j| (at(j) - mean) * (at(j) - mean)).sum();
    Some(Moments { n: d as f64, mean, m2 })
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

/// LayerNorm of each row of the row-major `[rows, d]` matrix `x`, into `out`:
///
/// ```text
/// μ = mean(x),  σ² = mean((x − μ)²)  (biased),  rstd = 1/√(σ² + ε)
/// y_j = (x_j − μ)·rstd·γ_j + β_j
/// ```
///
/// The statistics take one read of the row from memory (two passes over each chunk of it in
/// L1, see the [module docs](self)), the normalization one more sweep. A constant row gives
/// `y = β` exactly.
///
/// Error bound (`u = 2⁻²⁴`; per row: `R = max |x_j − μ|`, `Z = max |x_j − x₀|`; derived in the
/// [module docs](self)):
///
/// ```text
/// |y_j − ŷ_j| ≤ |γ_j|·rstd·E_μ + |ŷ_j − β_j|·(ε_r + 3u) + u·|ŷ_j| + 2⁻¹⁴⁸·(1 + |γ_j|)
/// E_μ = (4R + 12Z)·u + 2⁻¹⁴⁰,   E_v = (20σ² + 9R² + 27R·Z)·u + 2⁻¹⁴⁰·(1 + R)
/// ε_r = e/2 + e² + 2u,  e = E_v/(σ² + ε)
/// ```
///
/// On ordinary rows (`R, Z` a few σ) that is several hundred `u` relative to `|ŷ − β|`; the
/// measured error is a few `u`. On the rows DESIGN.md lists as hard (`[40000, 40001, 40002,
/// 40003]`, a constant row, `10⁷ + N(0, 1)` at `d = 4096`, rows mixing ±10³⁰) the measured
/// error is below `10⁻⁵·max(|ŷ_j|, 1)` with `γ = 1, β = 0`, which the tests assert.
///
/// NaN policy: a row holding a NaN or ±∞ becomes NaN. Rows whose spread overflows the f32
/// statistics (beyond about 10¹⁷) are computed in f64, exactly rounded in practice.
///
/// # Errors
/// [`Error::Shape`] if `x.len()` is not a multiple of `d`, or `out`, `gamma`, `beta` have the
/// wrong length (each named); [`Error::Param`] naming `eps` unless `ε` is finite and > 0.
///
/// ```
/// use kernels::LayerNormOptions;
///
/// let x = [1.0, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0];
/// let (gamma, beta) = ([1.0; 4], [0.5; 4]);
/// let mut y = [0.0; 8];
/// let opts = LayerNormOptions { gamma: Some(&gamma), beta: Some(&beta), ..Default::default() };
/// kernels::layer_norm(&x, &mut y, 4, &opts)?;
/// assert!((y[0] - (0.5 - 1.5 / (1.25f32 + 1e-5).sqrt())).abs() < 1e-6);
/// assert_eq!(&y[4..], &[0.5; 4]); // a constant row gives β
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn layer_norm<E: Element>(x: &[E], out: &mut [E], d: usize, opts: &LayerNormOptions) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.layer_norm(x, out, d, opts))
}

/// [`layer_norm()`] in place.
pub fn layer_norm_inplace<E: Element>(x: &mut [E], d: usize, opts: &LayerNormOptions) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.layer_norm_inplace(x, d, opts))
}

/// [`layer_norm()`], also writing each row's mean `μ` and `rstd` (rounded to f32) to the
/// slices of `stats` that are present (length `rows` each).
///
/// Their bounds (notation of [`layer_norm()`]): `|μ_out − μ| ≤ E_μ + u·|μ|`,
/// `|rstd_out − rstd| ≤ ε_r·rstd + 2⁻¹⁴⁹`. NaN rows give NaN.
///
/// # Errors
/// As [`layer_norm()`], and [`Error::Shape`] naming `mean` or `rstd` when not of length `rows`.
pub fn layer_norm_with_stats<E: Element>(
    x: &[E],
    out: &mut [E],
    d: usize,
    opts: &LayerNormOptions,
    stats: RowStats,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.layer_norm_with_stats(x, out, d, opts, stats))
}

/// Add & LayerNorm, fused: for each row of the `[rows, d]` matrices `x` and `r`,
///
/// ```text
/// h = α·x + (r + b)        (f32: r + b rounded, then one FMA; without b, one FMA)
/// y = LayerNorm(h)         (γ, β, ε of `opts`)
/// ```
///
/// `h` is built and its statistics gathered in the same sweep; `h` is written to `h` when
/// given (the Pre-LN residual stream), else (f32) it only passes through `out`. `residual`
/// holds `α` (1 by default; DeepNorm's `(2N)^¼`) and the optional bias `b` (length `d`). For
/// f16/bf16 tensors, `h` is formed in f32 from the widened `x`, `r` and the f32 `b`; `y` comes
/// from that f32 `h`, and the `h` output is it rounded once (see the
/// [storage types](self#storage-types)).
///
/// Error bound: `y` is within the bound of [`layer_norm()`] of the exact LayerNorm of the f32
/// `h` (which is exactly the rounded value above: `reference::residual` reproduces it bit for
/// bit), plus one rounding for a half `y`. NaN policy as [`layer_norm()`], on `h` (an `h` that overflows to ±∞ makes its row NaN).
///
/// # Errors
/// [`Error::Shape`] naming `x`, `r`, `out`, `h`, `bias`, `gamma` or `beta` on a length mismatch;
/// [`Error::Param`] naming `eps` or `alpha` (which must be finite).
///
/// Post-LN ("Add & Norm" after each sublayer, the original Transformer and BERT),
/// `x_{l+1} = LN(x_l + f(x_l))`:
///
/// ```
/// use kernels::{LayerNormOptions, Residual};
///
/// let d = 4;
/// let x = vec![0.5f32; 2 * d]; // the block input, [rows, d]
/// let fx: Vec<f32> = (0..2 * d).map(|i| i as f32).collect(); // f(x): attention or FFN output
/// let mut next = vec![0.0; 2 * d];
/// kernels::add_layer_norm(&x, &fx, &mut next, None, d, &Residual::default(), &LayerNormOptions::default())?;
/// // `next` = LN(x + f(x)) is the input of the next block.
/// assert!((next[0] + 1.3416).abs() < 1e-3);
/// # Ok::<(), kernels::Error>(())
/// ```
///
/// Pre-LN (GPT-2, most LLMs), `x_{l+1} = x_l + f(LN(x_l))`: the residual stream goes on
/// unnormalized and each sublayer reads its LN. Fusing the residual add of one sublayer with
/// the LN in front of the next writes both in one pass:
///
/// ```
/// use kernels::{LayerNormOptions, Residual};
///
/// let d = 4;
/// let mut stream = vec![1.0f32; d]; // the residual stream x_l
/// let fx = vec![0.0, 1.0, 2.0, 3.0]; // f(LN(x_{l-1})), the previous sublayer's output
/// let mut ln = vec![0.0; d];
/// // stream ← stream + f(…) (that is, h), ln = LN(stream): the next sublayer's input.
/// kernels::add_layer_norm_inplace(&mut stream, &fx, &mut ln, d, &Residual::default(), &LayerNormOptions::default())?;
/// assert_eq!(stream, [1.0, 2.0, 3.0, 4.0]);
/// // The same, keeping the input: h goes to its own slice.
/// let mut h = vec![0.0; d];
/// kernels::add_layer_norm(&[1.0; 4], &fx, &mut ln, Some(&mut h), d, &Residual::default(), &LayerNormOptions::default())?;
/// assert_eq!(h, stream);
/// // DeepNorm: x_{l+1} = LN(α·x_l + f(x_l)).
/// let deep = Residual { alpha: (2.0f32 * 12.0).powf(0.25), ..Default::default() };
/// kernels::add_layer_norm(&[1.0; 4], &fx, &mut ln, None, d, &deep, &LayerNormOptions::default())?;
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn add_layer_norm<E: Element>(
    x: &[E],
    r: &[E],
    out: &mut [E],
    h: Option<&mut [E]>,
    d: usize,
    residual: &Residual,
    opts: &LayerNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_layer_norm(x, r, out, h, d, residual, opts))
}

/// [`add_layer_norm()`] with the residual stream updated in place: `x ← h = α·x + (r + b)`,
/// `out = LayerNorm(h)`.
pub fn add_layer_norm_inplace<E: Element>(
    x: &mut [E],
    r: &[E],
    out: &mut [E],
    d: usize,
    residual: &Residual,
    opts: &LayerNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_layer_norm_inplace(x, r, out, d, residual, opts))
}

/// [`add_layer_norm()`], also writing the per-row mean and rstd of `h` (see
/// [`layer_norm_with_stats()`]).
#[allow(clippy::too_many_arguments)]
pub fn add_layer_norm_with_stats<E: Element>(
    x: &[E],
    r: &[E],
    out: &mut [E],
    h: Option<&mut [E]>,
    d: usize,
    residual: &Residual,
    opts: &LayerNormOptions,
    stats: RowStats,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_layer_norm_with_stats(x, r, out, h, d, residual, opts, stats))
}

/// RMSNorm of each row of the row-major `[rows, d]` matrix `x`, into `out`:
///
/// ```text
/// ms = mean(x²),  y_j = x_j/√(ms + ε)·g_j        (g optional: 1)
/// ```
///
/// One read for `Σx²` (chunked, reduced in f64), one sweep for `y`.
///
/// Error bound (`u = 2⁻²⁴`, derived in the [module docs](self)):
/// `|y_j − ŷ_j| ≤ |ŷ_j|·(ε_r + 2u) + 2⁻¹⁴⁸·(1 + |g_j|)` with `ε_r = e/2 + e² + 2u`,
/// `e = (10u·ms + 2⁻¹⁴⁹)/(ms + ε)`: about `9u` relative.
///
/// NaN policy: a row holding a NaN or ±∞ becomes NaN; rows whose `Σx²` overflows f32 are
/// computed in f64.
///
/// # Errors
/// [`Error::Shape`] naming `x`, `out` or `gain` on a length mismatch; [`Error::Param`] naming
/// `eps` unless it is finite and > 0.
///
/// ```
/// let x = [3.0, -4.0];
/// let mut y = [0.0; 2];
/// kernels::rms_norm(&x, &mut y, 2, &Default::default())?;
/// let rms = (12.5f32 + 1e-6).sqrt();
/// assert!((y[0] - 3.0 / rms).abs() < 1e-6 && (y[1] + 4.0 / rms).abs() < 1e-6);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn rms_norm<E: Element>(x: &[E], out: &mut [E], d: usize, opts: &RmsNormOptions) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.rms_norm(x, out, d, opts))
}

/// [`rms_norm()`] in place.
pub fn rms_norm_inplace<E: Element>(x: &mut [E], d: usize, opts: &RmsNormOptions) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.rms_norm_inplace(x, d, opts))
}

/// Add & RMSNorm, fused: `h = α·x + (r + b)` (as in [`add_layer_norm()`]), `y = RMSNorm(h)`,
/// `h` written to `h` when given. GAU-α's block is `rms_norm(x + O)` without gain:
/// `add_rms_norm(x, o, out, None, d, &Residual::default(), &RmsNormOptions::default())`.
///
/// Error bound: that of [`rms_norm()`] on the f32 `h`. NaN policy as [`rms_norm()`], on `h`.
///
/// # Errors
/// As [`add_layer_norm()`], with `gain` for `gamma`.
pub fn add_rms_norm<E: Element>(
    x: &[E],
    r: &[E],
    out: &mut [E],
    h: Option<&mut [E]>,
    d: usize,
    residual: &Residual,
    opts: &RmsNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_rms_norm(x, r, out, h, d, residual, opts))
}

/// [`add_rms_norm()`] with the residual stream updated in place: `x ← h`.
pub fn add_rms_norm_inplace<E: Element>(
    x: &mut [E],
    r: &[E],
    out: &mut [E],
    d: usize,
    residual: &Residual,
    opts: &RmsNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.add_rms_norm_inplace(x, r, out, d, residual, opts))
}

/// BatchNorm in inference mode over `x` of shape `shape = [N, C, S]` (row-major; `S` the
/// spatial positions flattened, 1 for `[N, C]`), with the running statistics `μ_c, v_c`:
///
/// ```text
/// y = (x − μ_c)/√(v_c + ε)·γ_c + β_c,  computed folded:  y = fma(x, s_c, b_c),
/// s_c = f32(γ_c/√(v_c + ε)),  b_c = f32(β_c − μ_c·s_c)   (per channel, in f64)
/// ```
///
/// Error bound (`u = 2⁻²⁴`, `s_c`, `b_c` exact): `|y − ŷ| ≤ u·(|x − μ_c|·|s_c| + |b_c| + |ŷ|) +
/// 2⁻⁴⁰·(|μ_c·s_c| + |b_c| + |ŷ|) + 2⁻¹⁴⁸ + |x − μ_c|·2⁻¹⁵⁰` (the rounding of `s_c`, of `b_c`
/// and of the FMA; the second term covers the second-order and f64 roundings, the last an `s_c`
/// rounded into the subnormals). Elementwise: a NaN `x` gives NaN,
/// ±∞ gives ±∞ (NaN if `s_c = 0`); a negative or NaN `v_c` makes its channel NaN; the fold
/// requires `|μ_c·s_c|` below the f32 range.
///
/// # Errors
/// [`Error::Shape`] naming `shape` (if `N·C·S` overflows), `x`, `out`, `running_mean`,
/// `running_var`, `gamma` or `beta`; [`Error::Param`] naming `eps`.
///
/// ```
/// use kernels::BatchNormOptions;
///
/// // N = 2, C = 2, S = 1.
/// let x = [1.0, 10.0, 3.0, 30.0];
/// let mut y = [0.0; 4];
/// kernels::batch_norm(&x, &mut y, [2, 2, 1], &[2.0, 20.0], &[1.0, 100.0], &BatchNormOptions::default())?;
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[3] - 1.0).abs() < 1e-4);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn batch_norm<E: Element>(
    x: &[E],
    out: &mut [E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    opts: &BatchNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.batch_norm(x, out, shape, running_mean, running_var, opts))
}

/// [`batch_norm()`] in place.
pub fn batch_norm_inplace<E: Element>(
    x: &mut [E],
    shape: [usize; 3],
    running_mean: &[f32],
    running_var: &[f32],
    opts: &BatchNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.batch_norm_inplace(x, shape, running_mean, running_var, opts))
}

/// BatchNorm in training mode over `x` of shape `[N, C, S]`: the statistics of each channel
/// over its `N·S` values, in a single read from memory (see the [module docs](self)), then
///
/// ```text
/// y = (x − μ_c)·rstd_c·γ_c + β_c,        rstd_c = 1/√(σ²_c + ε)   (σ² biased)
/// running_mean_c ← (1 − m)·running_mean_c + m·μ_c
/// running_var_c  ← (1 − m)·running_var_c  + m·σ²_c·N·S/(N·S − 1)   (unbiased, as PyTorch)
/// ```
///
/// with the momentum `m` of `opts` (0.1 by default).
///
/// Error bound: that of [`layer_norm()`] per channel (`d = N·S`), with `Z = 2R` (the shifts are
/// per position when `S` is short); the running averages are within `m·E_μ + u·|r|` and
/// `m·E_v·N·S/(N·S − 1) + u·|r|` (+ 2⁻¹⁴⁹) of the update with exact statistics.
///
/// NaN policy: a channel holding a NaN or ±∞ gives NaN for its `y`, its statistics and its
/// running averages.
///
/// # Errors
/// As [`batch_norm()`], and [`Error::Shape`] naming `shape` if a channel has fewer than 2
/// values (`N·S < 2`, the unbiased variance is undefined); [`Error::Param`] naming `momentum`
/// unless it is in `[0, 1]`.
///
/// ```
/// use kernels::BatchNormOptions;
///
/// let x = [1.0, 10.0, 3.0, 30.0]; // [N = 2, C = 2, S = 1]
/// let mut y = [0.0; 4];
/// let (mut mean, mut var) = ([0.0; 2], [1.0; 2]);
/// kernels::batch_norm_train(&x, &mut y, [2, 2, 1], &mut mean, &mut var, &BatchNormOptions::default())?;
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[1] + 1.0).abs() < 1e-4);
/// assert!((mean[1] - 2.0).abs() < 1e-6 && (var[0] - (0.9 + 0.1 * 2.0)).abs() < 1e-6);
/// # Ok::<(), kernels::Error>(())
/// ```
pub fn batch_norm_train<E: Element>(
    x: &[E],
    out: &mut [E],
    shape: [usize; 3],
    running_mean: &mut [f32],
    running_var: &mut [f32],
    opts: &BatchNormOptions,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| k.batch_norm_train(x, out, shape, running_mean, running_var, opts))
}

/// [`batch_norm_train()`], also writing each channel's batch mean and rstd (rounded to f32;
/// what a backward pass keeps) to the slices of `stats` that are present (length `C` each).
///
/// # Errors
/// As [`batch_norm_train()`], and [`Error::Shape`] naming `mean` or `rstd` when not of length
/// `C`.
pub fn batch_norm_train_with_stats<E: Element>(
    x: &[E],
    out: &mut [E],
    shape: [usize; 3],
    running_mean: &mut [f32],
    running_var: &mut [f32],
    opts: &BatchNormOptions,
    stats: RowStats,
) -> Result<(), Error> {
    crate::dispatch::with_detected(|k| {
        k.batch_norm_train_with_stats(x, out, shape, running_mean, running_var, opts, stats)
    })
}
