//! Detection, the explicit ISA handle, and the `KERNELS_ISA` override.

mod common;

use kernels::{available_isas, best_isa, last_level_cache, Error, Isa, Kernels, Parallelism, Stores};

/// Paths that are silently never dispatched hide bugs: every ISA the CPU has (read from
/// `/proc/cpuinfo`, not from the crate's detection) must be available, hence exercised by the
/// kernel tests, which loop over `available_isas()`.
#[test]
fn every_isa_the_cpu_has_is_available_and_tested() {
    let tested: Vec<Isa> = common::all_kernels().iter().map(|k| k.isa()).collect();
    for isa in common::isas_the_cpu_has() {
        assert!(
            tested.contains(&isa),
            "the CPU has {isa} but the tests would not run it (tested: {tested:?})"
        );
    }
    assert_eq!(tested, available_isas());
    // The line CI prints at its end: what this host ran, and what it could not.
    let arch: &[Isa] = if cfg!(target_arch = "x86_64") {
        &[Isa::Avx2, Isa::Avx512]
    } else {
        &[Isa::Neon]
    };
    let lacking: Vec<Isa> = arch.iter().copied().filter(|i| !tested.contains(i)).collect();
    eprintln!("ISAs exercised by the kernel tests: {tested:?}; not on this host: {lacking:?}");
}

#[test]
fn scalar_is_always_available_and_best_is_the_last() {
    assert_eq!(available_isas()[0], Isa::Scalar);
    assert_eq!(best_isa(), *available_isas().last().unwrap());
    assert_eq!(Kernels::best().isa(), best_isa());
}

#[test]
fn isa_names_round_trip() {
    for isa in Isa::ALL {
        assert_eq!(isa.name().parse::<Isa>().unwrap(), isa);
        assert_eq!(format!(" {} ", isa.name().to_uppercase()).parse::<Isa>().unwrap(), isa);
    }
    let err = "sse9".parse::<Isa>().unwrap_err();
    assert_eq!(err, Error::UnknownIsa { name: "sse9".into() });
    assert!(err.to_string().contains("sse9") && err.to_string().contains("avx512"));
}

#[test]
fn unavailable_isa_is_refused_with_the_reason() {
    let other_arch = if cfg!(target_arch = "aarch64") {
        Isa::Avx2
    } else {
        Isa::Neon
    };
    let err = Kernels::for_isa(other_arch).unwrap_err();
    assert!(matches!(err, Error::IsaUnavailable { isa, .. } if isa == other_arch));
    assert!(err.to_string().contains(other_arch.name()), "{err}");
}

/// `KERNELS_ISA` is read by `from_env` (the uncached form of `detected`). Environment changes
/// are process-wide, so this one test does all of them in sequence.
#[test]
fn kernels_isa_override() {
    std::env::set_var("KERNELS_ISA", "scalar");
    assert_eq!(Kernels::from_env().unwrap().isa(), Isa::Scalar);
    std::env::set_var("KERNELS_ISA", "no-such-isa");
    assert!(matches!(Kernels::from_env(), Err(Error::UnknownIsa { .. })));
    let other_arch = if cfg!(target_arch = "aarch64") {
        "avx512"
    } else {
        "neon"
    };
    std::env::set_var("KERNELS_ISA", other_arch);
    let err = Kernels::from_env().unwrap_err();
    assert!(err.to_string().contains("unavailable"), "{err}");
    std::env::set_var("KERNELS_ISA", "");
    assert_eq!(Kernels::from_env().unwrap().isa(), best_isa());
    std::env::remove_var("KERNELS_ISA");
    assert_eq!(Kernels::from_env().unwrap().isa(), best_isa());

    // `KERNELS_THREADS` likewise: unset, empty or 1 for sequential, a count (0: the whole
    // pool) with the rayon feature, anything else an error naming it.
    let parallelism = || Kernels::from_env().map(|k| k.parallelism());
    assert_eq!(parallelism().unwrap(), Parallelism::Sequential);
    std::env::set_var("KERNELS_THREADS", " 1 ");
    assert_eq!(parallelism().unwrap(), Parallelism::Sequential);
    #[cfg(feature = "rayon")]
    {
        std::env::set_var("KERNELS_THREADS", "3");
        assert_eq!(parallelism().unwrap(), Parallelism::Rayon(3));
        std::env::set_var("KERNELS_THREADS", "0");
        assert_eq!(parallelism().unwrap(), Parallelism::Rayon(0));
    }
    std::env::set_var("KERNELS_THREADS", "many");
    assert_eq!(parallelism().unwrap_err().arg(), Some("KERNELS_THREADS"));
    std::env::set_var("KERNELS_THREADS", "");
    assert_eq!(parallelism().unwrap(), Parallelism::Sequential);
    std::env::remove_var("KERNELS_THREADS");
}

#[test]
fn detected_is_cached_and_thread_safe() {
    let first = Kernels::detected().map(|k| k.isa());
    let seen: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| Kernels::detected().map(|k| k.isa())))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(seen.iter().all(|s| *s == first));
}

/// `Kernels::streams` follows the `Stores` setting and the last-level cache (the CPU's, or
/// the one given to `Kernels::with_cache_size`), on the ISAs that have streaming stores (AVX2, AVX-512); the others never stream.
#[test]
fn the_choice_follows_the_setting_and_the_cache() {
    for k in common::all_kernels() {
        let has = matches!(k.isa(), Isa::Avx2 | Isa::Avx512);
        assert_eq!(k.stores(), Stores::Auto, "{}", k.isa());
        assert!(!k.with_stores(Stores::Cached).streams(usize::MAX));
        assert_eq!(k.with_stores(Stores::Streaming).streams(0), has, "{}", k.isa());
        match last_level_cache() {
            Some(llc) => {
                assert!(llc >= 1 << 16, "a last-level cache of {llc} bytes");
                assert!(!k.streams(llc - 1));
                assert_eq!(k.streams(llc), has, "{}", k.isa());
            }
            None => assert!(!k.streams(usize::MAX)),
        }
        assert_eq!(k.cache_size(), last_level_cache(), "{}", k.isa());
        // A cache size given in place of the CPU's moves the threshold, and only it.
        let small = k.with_cache_size(4096);
        assert_eq!(small.cache_size(), Some(4096));
        assert!(!small.streams(4095));
        assert_eq!(small.streams(4096), has, "{}", k.isa());
        assert!(!small.with_stores(Stores::Cached).streams(usize::MAX));
        assert_eq!(small.stores(), Stores::Auto);
    }
}

/// On Linux the kernel's own description of the caches is at hand: CPUID must agree with it,
/// on the largest cache and on the largest of level 2.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn cpuid_agrees_with_sysfs() {
    let largest = |level: Option<u32>| {
        let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
        dir.flatten()
            .filter_map(|e| {
                let read = |name: &str| std::fs::read_to_string(e.path().join(name)).ok();
                if read("type")?.trim() == "Instruction" {
                    return None;
                }
                if level.is_some_and(|level| read("level").and_then(|l| l.trim().parse().ok()) != Some(level)) {
                    return None;
                }
                let size = read("size")?;
                let kib: usize = size.trim().strip_suffix('K')?.parse().ok()?;
                Some(kib << 10)
            })
            .max()
    };
    if let Some(sysfs) = largest(None) {
        assert_eq!(last_level_cache(), Some(sysfs));
    }
    if let Some(sysfs) = largest(Some(2)) {
        assert_eq!(kernels::level2_cache(), Some(sysfs));
    }
}
