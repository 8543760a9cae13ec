#!/usr/bin/env bash
# Cross-compiles the `kernels` and `reference` tests for aarch64 and runs them under qemu, so the
# NEON path is tested on an x86-64 CI machine.
#
#   scripts/test-aarch64.sh                 # everything
#   scripts/test-aarch64.sh --install-only  # step 1 only (e.g. a CI setup step)
#
# Steps:
#   1. installs Debian's Rust toolchain with its aarch64 std, the cross linker and qemu-user, if
#      any of them is missing (Debian 12, as root or through sudo; idempotent);
#   2. builds and runs every test of `kernels` and `reference` (doc-tests included) for
#      aarch64-unknown-linux-gnu with Debian's /usr/bin/cargo and /usr/bin/rustc: the rustup
#      toolchain cannot fetch the aarch64 standard library here, Debian's ships one;
#   3. runs the exhaustive `exp` test on every KERNELS_EXP_STRIDE-th bit pattern (default 127),
#      in the same (test) profile, so nothing is built twice;
#   4. prints the ISAs the kernel tests exercised and fails unless NEON is one of them.
#
# Environment:
#   KERNELS_EXP_STRIDE   stride of the exp sample (default 127: 34·10⁶ inputs per ISA, under a
#                        minute under qemu on two cores; 1 = all 2³², hours)
#   AARCH64_TARGET_DIR   cargo target directory (default target/aarch64, apart from the x86
#                        builds so the two never wait on each other's lock)
#   AARCH64_FORCE_INSTALL=1    run the apt-get steps even when everything is present
#   AARCH64_FORCE_LOCK_COPY=1  test a copy with a v3 lock file, as for a cargo older than 1.78
set -euo pipefail

readonly TARGET=aarch64-unknown-linux-gnu
readonly SYSROOT=/usr/aarch64-linux-gnu
readonly PACKAGES=(rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu
    libc6-dev-arm64-cross qemu-user-static)
readonly DEBIAN_CARGO=/usr/bin/cargo
readonly DEBIAN_RUSTC=/usr/bin/rustc
readonly DEBIAN_RUSTDOC=/usr/bin/rustdoc

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STRIDE="${KERNELS_EXP_STRIDE:-127}"
INSTALL_ONLY=
case "${1:-}" in
"") ;;
--install-only) INSTALL_ONLY=1 ;;
*)
    echo "usage: $0 [--install-only]" >&2
    exit 2
    ;;
esac
START=$SECONDS

say() { printf '\n==> %s\n' "$*" >&2; }
die() {
    printf 'test-aarch64: error: %s\n' "$*" >&2
    exit 1
}

# --- 1. Tools -------------------------------------------------------------------------------

missing_tools() {
    local missing=()
    dpkg --print-foreign-architectures 2>/dev/null | grep -qx arm64 || missing+=("arch:arm64")
    local pkg
    for pkg in "${PACKAGES[@]}"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    local tool
    for tool in "$DEBIAN_CARGO" "$DEBIAN_RUSTC" "$DEBIAN_RUSTDOC" aarch64-linux-gnu-gcc qemu-aarch64-static; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
    done
    [[ -d "$SYSROOT/lib" ]] || missing+=("$SYSROOT/lib")
    echo "${missing[@]:-}"
}

install_tools() {
    local sudo=()
    if [[ $EUID -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install ${PACKAGES[*]} (arch arm64 added)"
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" dpkg --add-architecture arm64
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
}

say "checking the cross toolchain"
missing="$(missing_tools)"
if [[ -n "${missing// /}" || -n "${AARCH64_FORCE_INSTALL:-}" ]]; then
    echo "missing: ${missing:-nothing (AARCH64_FORCE_INSTALL)}; installing" >&2
    install_tools
    missing="$(missing_tools)"
    [[ -z "${missing// /}" ]] || die "still missing after the install: $missing"
else
    echo "all present: ${PACKAGES[*]}" >&2
fi
"$DEBIAN_CARGO" --version >&2
"$DEBIAN_RUSTC" --version >&2
qemu-aarch64-static --version | head -n 1 >&2
[[ -z "$INSTALL_ONLY" ]] || exit 0

# The workspace's rust-version must be met by Debian's compiler (it is 1.96 on Debian 12 today).
need="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)"
have="$("$DEBIAN_RUSTC" --version | awk '{print $2}')"
if [[ -n "$need" ]] && [[ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]]; then
    die "Debian's rustc is $have, the workspace needs $need (rust-version in Cargo.toml)"
fi

# --- Workspace: lock-file format ------------------------------------------------------------
# Cargo.lock `version = 4` needs cargo ≥ 1.78. Debian's cargo is newer than that today, so the
# tests run in place; an older one gets a throw-away copy of the workspace with the lock
# rewritten to version 3 (identical for registry-only dependencies), so the committed lock
# stays what the rustup cargo wrote.
WORKDIR="$ROOT"
lock_version="$(sed -n 's/^version = \([0-9]*\)$/\1/p' Cargo.lock | head -n 1)"
cargo_minor="$("$DEBIAN_CARGO" --version | awk '{split($2, v, "."); print v[2]}')"
if [[ "${lock_version:-3}" -ge 4 && "$cargo_minor" -lt 78 ]] || [[ -n "${AARCH64_FORCE_LOCK_COPY:-}" ]]; then
    WORKDIR="$(mktemp -d "${TMPDIR:-/tmp}/kernels-aarch64.XXXXXX")"
    trap 'rm -rf "$WORKDIR"' EXIT
    say "testing a copy in $WORKDIR, Cargo.lock as v3 (cargo 1.$cargo_minor, lock v$lock_version)"
    tar -C "$ROOT" --exclude=./target --exclude=./fuzz/target --exclude=./.git -cf - . | tar -C "$WORKDIR" -xf -
    sed -i 's/^version = 4$/version = 3/' "$WORKDIR/Cargo.lock"
fi
cd "$WORKDIR"

# --- 2. Build and run the tests -------------------------------------------------------------

export RUSTC="$DEBIAN_RUSTC"
export RUSTDOC="$DEBIAN_RUSTDOC" # doc-tests are cross-compiled and run under the runner too
export CARGO_TARGET_DIR="${AARCH64_TARGET_DIR:-$ROOT/target/aarch64}"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# `-E LD_LIBRARY_PATH=…`: libstd-rust-web-dev:arm64 pulls in the native libc6:arm64, which puts
# /lib/aarch64-linux-gnu in the host's ld.so.cache. Without the variable the guest's loader
# (the cross one, from $SYSROOT) would load that other build of libc.so.6, whose private ABI
# differs: the first pthread_create then spins forever in the stack cache.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64-static -L $SYSROOT -E LD_LIBRARY_PATH=$SYSROOT/lib"
# Tests that start a child process of their own binary (the dispatch-cache race) run it
# through the same emulator command.
export KERNELS_TEST_RUNNER="$CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER"
unset RUSTFLAGS CARGO_BUILD_TARGET CARGO_BUILD_RUSTFLAGS RUSTC_WRAPPER CARGO_BUILD_RUSTC_WRAPPER || true

cargo_test() { "$DEBIAN_CARGO" test --target "$TARGET" -p kernels -p reference "$@"; }

# Emulation is 10–30× slower than native: the property tests run 48 random cases each here
# (instead of their 200–400 on x86), on top of every deterministic test. Override to taste.
export PROPTEST_CASES="${PROPTEST_CASES:-48}"

LOG="$(mktemp -d "${TMPDIR:-/tmp}/kernels-aarch64-log.XXXXXX")"
trap 'rm -rf "$LOG"; [[ "$WORKDIR" == "$ROOT" ]] || rm -rf "$WORKDIR"' EXIT

say "building the tests for $TARGET (profile test, opt-level 2)"
build_start=$SECONDS
cargo_test --no-run
build_s=$((SECONDS - build_start))

say "running the tests under qemu"
test_start=$SECONDS
cargo_test 2>&1 | tee "$LOG/tests"
test_s=$((SECONDS - test_start))

# --- 3. exp over a strided sample of all 2³² inputs -----------------------------------------

say "exp on every ${STRIDE}th f32 bit pattern under qemu"
exp_start=$SECONDS
KERNELS_EXP_STRIDE="$STRIDE" "$DEBIAN_CARGO" test --target "$TARGET" -p kernels --test exp_exhaustive \
    -- --ignored --nocapture 2>&1 | tee "$LOG/exp"
exp_s=$((SECONDS - exp_start))

# --- 4. The ISAs exercised ------------------------------------------------------------------

say "ISAs exercised"
isa_line="$("$DEBIAN_CARGO" test --target "$TARGET" -p kernels --test isa -- --exact \
    every_isa_the_cpu_has_is_available_and_tested --nocapture 2>&1 | tee "$LOG/isa" |
    grep 'ISAs exercised by the kernel tests' || true)"
[[ -n "$isa_line" ]] || die "the ISA test printed no list of exercised ISAs"
echo "$isa_line"
grep -q '\bNeon\b' <<<"$isa_line" || die "NEON was not exercised: $isa_line"

# --- Summary --------------------------------------------------------------------------------

# "N passed; N failed; N ignored" summed over the binaries (and doc-tests) of one log.
count() {
    awk '/^test result:/ {
        for (i = 2; i <= NF; i++) {
            if ($(i) ~ /^passed;?$/) p += $(i - 1)
            if ($(i) ~ /^failed;?$/) f += $(i - 1)
            if ($(i) ~ /^ignored;?$/) g += $(i - 1)
        }
    } END { printf "%d passed, %d failed, %d ignored\n", p, f, g }' "$1"
}
say "summary"
echo "tests of kernels + reference (doc-tests included): $(count "$LOG/tests"), $(grep -c '^test result:' "$LOG/tests") binaries"
echo "exp sample (stride $STRIDE): $(count "$LOG/exp")"
grep -E '^[a-z0-9]+: max error [0-9]+ ulp' "$LOG/exp" | sed 's/^/  /'
echo "$isa_line"
echo "time: build ${build_s}s, tests ${test_s}s, exp sample ${exp_s}s, total $((SECONDS - START))s wall"
times >"$LOG/times" # not in $(…): a subshell starts with no children
echo "cpu time of the children (user, system): $(tail -n 1 "$LOG/times")"
