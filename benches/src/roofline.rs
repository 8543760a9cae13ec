//! The machine's limits, measured in the same process as the kernels: copy bandwidth (read
//! `x`, write `y`) with ordinary or streaming stores, and the FMA peak, for each ISA.
//!
//! The loops are written with `std::arch` intrinsics rather than left to the compiler, so that
//! they use exactly the stated instructions: a plain copy loop may be turned into a `memcpy`
//! call, and glibc's `memcpy` switches to non-temporal stores (or `rep movsb`) on large sizes,
//! which is a different roofline. For the `Scalar` ISA the loops use the architecture's
//! baseline vectors (SSE2 on x86-64, NEON on aarch64): a roofline is the machine's limit, and
//! what the scalar kernels reach against it is the point of their rows.

use kernels::Isa;

/// How a copy writes its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stores {
    /// Plain vector stores: beyond the caches, each written line is read first.
    Ordinary,
    /// Non-temporal stores that bypass the caches (x86 only), followed by a fence.
    Streaming,
}

/// The vector instructions the roofline loops of `isa` use.
pub fn vectors(isa: Isa) -> &'static str {
    match isa {
        Isa::Avx512 => "avx512",
        Isa::Avx2 => "avx2",
        Isa::Neon => "neon",
        Isa::Scalar if cfg!(target_arch = "x86_64") => "sse2",
        Isa::Scalar if cfg!(target_arch = "aarch64") => "neon",
        Isa::Scalar => "portable",
    }
}

/// The name of a copy roofline, as the report prints it: `copy(avx512, ordinary stores)`.
pub fn copy_name(isa: Isa, stores: Stores) -> String {
    let kind = match stores {
        Stores::Ordinary => "ordinary",
        Stores::Streaming => "streaming",
    };
    format!("copy({}, {kind} stores)", vectors(isa))
}

/// Copies `x` into `y` (equal lengths) with the vectors of `isa` and the given stores.
///
/// Returns `false`, copying nothing, when the CPU lacks the ISA or the ISA has no such stores
/// (streaming stores exist only on x86-64 here).
///
/// # Panics
/// If `x.len() != y.len()`.
pub fn copy(isa: Isa, stores: Stores, x: &[f32], y: &mut [f32]) -> bool {
    assert_eq!(x.len(), y.len(), "copy: x and y must have the same length");
    if !isa.is_available() {
        return false;
    }
    let (src, dst, n) = (x.as_ptr(), y.as_mut_ptr(), x.len());
    let streaming = stores == Stores::Streaming;
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the ISA was checked just above; `src` and `dst` cover `n` floats each and do
        // not overlap (a shared and a mutable borrow).
        unsafe {
            match (isa, streaming) {
                (Isa::Avx512, false) => x86::copy_avx512::<false>(src, dst, n),
                (Isa::Avx512, true) => x86::copy_avx512::<true>(src, dst, n),
                (Isa::Avx2, false) => x86::copy_avx2::<false>(src, dst, n),
                (Isa::Avx2, true) => x86::copy_avx2::<true>(src, dst, n),
                (_, false) => x86::copy_sse2::<false>(src, dst, n),
                (_, true) => x86::copy_sse2::<true>(src, dst, n),
            }
        }
        true
    }
    #[cfg(target_arch = "aarch64")]
    {
        if streaming {
            return false;
        }
        // SAFETY: NEON is baseline on aarch64; `src` and `dst` cover `n` floats each and do not
        // overlap (a shared and a mutable borrow).
        unsafe { arm::copy_neon(src, dst, n) };
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (src, dst, n);
        if streaming {
            return false;
        }
        y.copy_from_slice(x);
        true
    }
}

/// Iterations of one call of [`fma_peak`] as the report times it (about 10–30 µs).
pub const FMA_ITERS: u64 = 10_000;

/// The name of the FMA-peak roofline of `isa`, as the report prints it: `fma peak(avx512)`.
pub fn fma_name(isa: Isa) -> String {
    format!("fma peak({})", vectors(isa))
}

/// The shape of the FMA-peak loop of `isa`: independent accumulators, f32 lanes per
/// accumulator, and a label. Enough accumulators to cover the FMA latency on every port
/// (4 cycles × 2 ports on the project's machines needs 8) without spilling registers.
pub fn fma_shape(isa: Isa) -> (u64, u64, String) {
    let (accs, lanes) = match isa {
        Isa::Avx512 => (16, 16),
        Isa::Avx2 => (12, 8),
        Isa::Neon => (16, 4),
        Isa::Scalar => (8, 1),
    };
    let op = if isa == Isa::Scalar { "mul+add" } else { "fma" };
    (accs, lanes, format!("{op} {accs} acc x {lanes} lanes"))
}

/// Floating-point operations of one iteration of [`fma_peak`]'s loop (an FMA counts two).
pub fn fma_flops_per_iter(isa: Isa) -> u64 {
    let (accs, lanes, _) = fma_shape(isa);
    2 * accs * lanes
}

/// Runs `iters` iterations of the FMA-peak loop of `isa` and returns a value that depends on
/// all of them (to be consumed); `None` if the CPU lacks the ISA.
///
/// The scalar loop is plain `a·b + c` on f32 (no FMA in the x86-64 baseline); the compiler may
/// vectorize it with baseline vectors, which is then what the scalar path could reach.
pub fn fma_peak(isa: Isa, iters: u64) -> Option<f32> {
    let (a, b) = (std::hint::black_box(0.5f32), std::hint::black_box(0.5f32));
    if !isa.is_available() {
        return None;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has the ISA (checked above), which includes AVX-512F.
        Isa::Avx512 => Some(unsafe { x86::fma_avx512(iters, a, b) }),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has the ISA (checked above): AVX2 and FMA.
        Isa::Avx2 => Some(unsafe { x86::fma_avx2(iters, a, b) }),
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline on aarch64.
        Isa::Neon => Some(unsafe { arm::fma_neon(iters, a, b) }),
        _ => Some(fma_scalar(iters, a, b)),
    }
}

fn fma_scalar(iters: u64, a: f32, b: f32) -> f32 {
    let mut acc = [1.0f32; 8];
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = *v * a + b;
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Copies with 512-bit loads and stores, four vectors per step.
    ///
    /// # Safety
    /// AVX-512F is available; `src` is readable and `dst` writable for `n` floats; no overlap.
    #[target_feature(enable = "avx512f")]
    #[inline(never)]
    pub unsafe fn copy_avx512<const STREAM: bool>(src: *const f32, dst: *mut f32, n: usize) {
        // SAFETY (every access): indices stay below `n`, as the loop conditions show; the
        // streaming stores are reached only once `dst + i` is 64-byte aligned.
        unsafe {
            let mut i = 0;
            if STREAM {
                while i < n && !(dst.add(i) as usize).is_multiple_of(64) {
                    dst.add(i).write(src.add(i).read());
                    i += 1;
                }
            }
            while i + 64 <= n {
                let v = [0, 16, 32, 48].map(|k| _mm512_loadu_ps(src.add(i + k)));
                for (k, v) in [0, 16, 32, 48].into_iter().zip(v) {
                    if STREAM {
                        _mm512_stream_ps(dst.add(i + k), v);
                    } else {
                        _mm512_storeu_ps(dst.add(i + k), v);
                    }
                }
                i += 64;
            }
            while i + 16 <= n {
                _mm512_storeu_ps(dst.add(i), _mm512_loadu_ps(src.add(i)));
                i += 16;
            }
            while i < n {
                dst.add(i).write(src.add(i).read());
                i += 1;
            }
            if STREAM {
                _mm_sfence();
            }
        }
    }

    /// Copies with 256-bit loads and stores, four vectors per step.
    ///
    /// # Safety
    /// AVX2 is available; `src` is readable and `dst` writable for `n` floats; no overlap.
    #[target_feature(enable = "avx2")]
    #[inline(never)]
    pub unsafe fn copy_avx2<const STREAM: bool>(src: *const f32, dst: *mut f32, n: usize) {
        // SAFETY (every access): as `copy_avx512`, with 32-byte alignment for streaming.
        unsafe {
            let mut i = 0;
            if STREAM {
                while i < n && !(dst.add(i) as usize).is_multiple_of(32) {
                    dst.add(i).write(src.add(i).read());
                    i += 1;
                }
            }
            while i + 32 <= n {
                let v = [0, 8, 16, 24].map(|k| _mm256_loadu_ps(src.add(i + k)));
                for (k, v) in [0, 8, 16, 24].into_iter().zip(v) {
                    if STREAM {
                        _mm256_stream_ps(dst.add(i + k), v);
                    } else {
                        _mm256_storeu_ps(dst.add(i + k), v);
                    }
                }
                i += 32;
            }
            while i + 8 <= n {
                _mm256_storeu_ps(dst.add(i), _mm256_loadu_ps(src.add(i)));
                i += 8;
            }
            while i < n {
                dst.add(i).write(src.add(i).read());
                i += 1;
            }
            if STREAM {
                _mm_sfence();
            }
        }
    }

    /// Copies with 128-bit SSE loads and stores (baseline on x86-64), four vectors per step.
    ///
    /// # Safety
    /// `src` is readable and `dst` writable for `n` floats; no overlap.
    #[inline(never)]
    pub unsafe fn copy_sse2<const STREAM: bool>(src: *const f32, dst: *mut f32, n: usize) {
        // SAFETY (every access): as `copy_avx512`, with 16-byte alignment for streaming.
        unsafe {
            let mut i = 0;
            if STREAM {
                while i < n && !(dst.add(i) as usize).is_multiple_of(16) {
                    dst.add(i).write(src.add(i).read());
                    i += 1;
                }
            }
            while i + 16 <= n {
                let v = [0, 4, 8, 12].map(|k| _mm_loadu_ps(src.add(i + k)));
                for (k, v) in [0, 4, 8, 12].into_iter().zip(v) {
                    if STREAM {
                        _mm_stream_ps(dst.add(i + k), v);
                    } else {
                        _mm_storeu_ps(dst.add(i + k), v);
                    }
                }
                i += 16;
            }
            while i < n {
                dst.add(i).write(src.add(i).read());
                i += 1;
            }
            if STREAM {
                _mm_sfence();
            }
        }
    }

    /// 16 independent chains of 512-bit FMAs.
    #[target_feature(enable = "avx512f")]
    #[inline(never)]
    pub fn fma_avx512(iters: u64, a: f32, b: f32) -> f32 {
        let (va, vb) = (_mm512_set1_ps(a), _mm512_set1_ps(b));
        let mut acc = [_mm512_set1_ps(1.0); 16];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm512_fmadd_ps(*v, va, vb);
            }
        }
        let mut sum = _mm512_setzero_ps();
        for v in acc {
            sum = _mm512_add_ps(sum, v);
        }
        _mm512_reduce_add_ps(sum)
    }

    /// 12 independent chains of 256-bit FMAs (16 ymm registers: 12 + the 2 operands).
    #[target_feature(enable = "avx2,fma")]
    #[inline(never)]
    pub fn fma_avx2(iters: u64, a: f32, b: f32) -> f32 {
        let (va, vb) = (_mm256_set1_ps(a), _mm256_set1_ps(b));
        let mut acc = [_mm256_set1_ps(1.0); 12];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm256_fmadd_ps(*v, va, vb);
            }
        }
        let mut sum = _mm256_setzero_ps();
        for v in acc {
            sum = _mm256_add_ps(sum, v);
        }
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` holds 8 writable floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
        lanes.iter().sum()
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    /// Copies with 128-bit NEON loads and stores, four vectors per step.
    ///
    /// # Safety
    /// `src` is readable and `dst` writable for `n` floats; no overlap.
    #[inline(never)]
    pub unsafe fn copy_neon(src: *const f32, dst: *mut f32, n: usize) {
        // SAFETY (every access): indices stay below `n`, as the loop conditions show.
        unsafe {
            let mut i = 0;
            while i + 16 <= n {
                let v = [0, 4, 8, 12].map(|k| vld1q_f32(src.add(i + k)));
                for (k, v) in [0, 4, 8, 12].into_iter().zip(v) {
                    vst1q_f32(dst.add(i + k), v);
                }
                i += 16;
            }
            while i < n {
                dst.add(i).write(src.add(i).read());
                i += 1;
            }
        }
    }

    /// 16 independent chains of 128-bit FMAs (32 vector registers on aarch64).
    #[target_feature(enable = "neon")]
    #[inline(never)]
    pub fn fma_neon(iters: u64, a: f32, b: f32) -> f32 {
        let (va, vb) = (vdupq_n_f32(a), vdupq_n_f32(b));
        let mut acc = [vdupq_n_f32(1.0); 16];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = vfmaq_f32(vb, *v, va);
            }
        }
        let mut sum = vdupq_n_f32(0.0);
        for v in acc {
            sum = vaddq_f32(sum, v);
        }
        vaddvq_f32(sum)
    }
}

/// The size in bytes of this CPU's level-`level` data or unified cache, from Linux's sysfs.
pub fn cache_size(level: u32) -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    for entry in dir.flatten() {
        let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
        let (Some(l), Some(kind), Some(size)) = (read("level"), read("type"), read("size")) else {
            continue;
        };
        if l.trim().parse() != Ok(level) || kind.trim() == "Instruction" {
            continue;
        }
        let size = size.trim();
        let (digits, unit) = match size.find(|c: char| !c.is_ascii_digit()) {
            Some(i) => size.split_at(i),
            None => (size, ""),
        };
        let scale = match unit {
            "" => 1,
            "K" => 1 << 10,
            "M" => 1 << 20,
            "G" => 1 << 30,
            _ => continue,
        };
        if let Ok(v) = digits.parse::<usize>() {
            return Some(v * scale);
        }
    }
    None
}

/// The CPU's model name from `/proc/cpuinfo`, or the architecture's name.
pub fn cpu_name() -> String {
    cpuinfo_field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The x86 CPU's family and model numbers from `/proc/cpuinfo`, if it gives them. Virtual
/// machines often name the CPU only "AMD EPYC": a Zen 4 (family 25) and a Zen 5 (family 26)
/// are told apart by these.
pub fn cpu_family_model() -> Option<(u32, u32)> {
    let number = |key: &str| cpuinfo_field(key)?.parse().ok();
    Some((number("cpu family")?, number("model")?))
}

/// The value of the first `/proc/cpuinfo` line whose key is `key`.
fn cpuinfo_field(key: &str) -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_copy_on_every_available_isa() {
        for isa in kernels::available_isas() {
            for stores in [Stores::Ordinary, Stores::Streaming] {
                for n in [0, 1, 15, 16, 63, 64, 65, 200] {
                    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
                    // Misaligned output to exercise the streaming head.
                    let mut y = vec![-1.0f32; n + 1];
                    if copy(isa, stores, &x, &mut y[1..]) {
                        assert_eq!(&y[1..], &x[..], "{isa} {stores:?} n={n}");
                    }
                }
            }
        }
    }

    #[test]
    fn fma_peak_runs_on_every_available_isa() {
        for isa in kernels::available_isas() {
            let v = fma_peak(isa, 100).expect("available");
            assert!(v.is_finite(), "{isa}: {v}");
        }
    }
}
