//! Instruction sets and their detection.

use std::fmt;

/// An instruction set the kernels are compiled for.
///
/// - `Avx512` needs `avx512f`, `avx512bw`, `avx512dq`, `avx512vl` and `fma`.
/// - `Avx2` needs `avx2`, `fma` and `f16c` (the binary16 conversions).
/// - `Neon` is baseline on aarch64 and needs no detection.
/// - `Scalar` is portable Rust and always available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust, one lane at a time.
    Scalar,
    /// x86-64 AVX2 + FMA, 8 lanes of f32.
    Avx2,
    /// x86-64 AVX-512 (f, bw, dq, vl) + FMA, 16 lanes of f32.
    Avx512,
    /// aarch64 Advanced SIMD, 4 lanes of f32.
    Neon,
}

impl Isa {
    /// Every ISA, from the least to the most capable on its architecture.
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon];

    /// The lower-case name used by `KERNELS_ISA` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// Number of f32 lanes in one vector of this ISA.
    pub fn lanes(self) -> usize {
        match self {
            Isa::Scalar => 1,
            Isa::Avx2 => 8,
            Isa::Avx512 => 16,
            Isa::Neon => 4,
        }
    }

    /// Whether this CPU and this build can run the ISA.
    pub fn is_available(self) -> bool {
        missing_features(self).is_empty()
    }
}

/// The features of `isa` that this CPU or build lacks, as a readable list; empty if none.
pub(crate) fn missing_features(isa: Isa) -> String {
    match isa {
        Isa::Scalar => String::new(),
        Isa::Avx2 | Isa::Avx512 => x86_missing(isa),
        Isa::Neon => {
            if cfg!(target_arch = "aarch64") {
                String::new()
            } else {
                format!("NEON is only built for aarch64; this is {}", std::env::consts::ARCH)
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn x86_missing(isa: Isa) -> String {
    macro_rules! missing {
        ($($feature:tt),*) => {{
            let mut v: Vec<&str> = Vec::new();
            $(if !std::arch::is_x86_feature_detected!($feature) { v.push($feature); })*
            v
        }};
    }
    let lacking = match isa {
        Isa::Avx2 => missing!("avx2", "fma", "f16c"),
        _ => missing!("avx512f", "avx512bw", "avx512dq", "avx512vl", "fma"),
    };
    if lacking.is_empty() {
        String::new()
    } else {
        format!("this CPU lacks {}", lacking.join(", "))
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn x86_missing(isa: Isa) -> String {
    format!(
        "{} is only built for x86_64; this is {}",
        isa.name(),
        std::env::consts::ARCH
    )
}

/// The ISAs this CPU and build can run, least capable first (`Scalar` is always there).
pub fn available_isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|isa| isa.is_available()).collect()
}

/// The most capable ISA this CPU can run, ignoring `KERNELS_ISA`.
pub fn best_isa() -> Isa {
    *available_isas().last().expect("Scalar is always available")
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
