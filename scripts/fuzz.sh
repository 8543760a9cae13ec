#!/usr/bin/env bash
# Differential fuzzing of every kernel under AddressSanitizer.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, every target)
#
# Uses the nightly toolchain when rustup has one, else the stable toolchain with
# RUSTC_BOOTSTRAP=1 (which accepts the same -Z flags). Installs cargo-fuzz when missing.
# New corpus entries go to fuzz/corpus/<target> (not committed); the small committed seeds
# are in fuzz/seeds/<target>. A crash leaves its input in fuzz/artifacts/<target> and fails.
#
# FUZZ_NO_DEBUG_ASSERTIONS=1 builds the targets without debug assertions and overflow checks
# (cargo fuzz -O), AddressSanitizer kept but with its checks as calls rather than inline code,
# for the CI smoke run; longer runs keep both. On a clean checkout (Intel Xeon, 2 cores) the
# build took 4 minutes alone; with inline checks it took 25 beside the other CI steps.
#
# FUZZ_JOBS=N fuzzes N targets at a time (default: one per core).
#
# FUZZ_BUILD_ONLY=1 builds the targets and stops: .ci/run builds them in the background while
# other steps run (cargo-fuzz compiles with one codegen unit, so the build keeps one core busy:
# 7-8 minutes alone on a Zen 5, 19 beside the other CI steps on a 2-core Zen 3), then runs this
# script again to fuzz.
set -euo pipefail

secs=${1:-60}
shift || true
parallel=${FUZZ_JOBS:-$(nproc)}
if ! [[ "$parallel" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: FUZZ_JOBS must be a positive integer, got '$parallel'" >&2
  exit 2
fi
cd "$(dirname "$0")/.."

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

toolchain=()
if rustup run nightly rustc --version >/dev/null 2>&1; then
  toolchain=(+nightly)
else
  echo "fuzz.sh: no nightly toolchain; using stable with RUSTC_BOOTSTRAP=1" >&2
  export RUSTC_BOOTSTRAP=1
fi

build=()
if [ "${FUZZ_NO_DEBUG_ASSERTIONS:-}" = 1 ]; then
  build=(-O)
  # AddressSanitizer's checks as calls, not inline code, in every function: LLVM does that
  # by itself only in functions of over 7000 memory accesses, and compiling the inline checks
  # of the norm instances took most of the build time.
  export RUSTFLAGS="${RUSTFLAGS:-} -Cllvm-args=-asan-instrumentation-with-call-threshold=0"
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo "${toolchain[@]}" fuzz list --fuzz-dir fuzz)
fi

# Build every target first (ASan, release), so that the time budget is spent fuzzing.
cargo "${toolchain[@]}" fuzz build "${build[@]}" --fuzz-dir fuzz
if [ "${FUZZ_BUILD_ONLY:-}" = 1 ]; then
  exit 0
fi

logs=$(mktemp -d)
# Each fuzzer in its own process group (job control on), so that an exit on one target's
# failure also stops the fuzzers still running beside it, not only their cargo.
set -m
stop_all() {
  local pid
  for pid in $(jobs -p); do
    kill -- -"$pid" 2>/dev/null || true
  done
  rm -rf "$logs"
}
trap stop_all EXIT

# Fuzzes one target (one process, one core), its output in $logs/<target>, the lines worth
# reading in $logs/<target>.summary; returns the fuzzer's status.
fuzz_one() {
  local t=$1 status=0 start
  start=$(date +%s)
  cargo "${toolchain[@]}" fuzz run "${build[@]}" --fuzz-dir fuzz "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
    -max_total_time="$secs" -rss_limit_mb=4096 -print_final_stats=1 >"$logs/$t" 2>&1 || status=$?
  {
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|ERROR|panicked|SUMMARY|Test unit written' "$logs/$t" || true
    echo "== $t: exit $status after $(( $(date +%s) - start ))s, corpus $(ls "fuzz/corpus/$t" | wc -l) entries"
  } >"$logs/$t.summary"
  return "$status"
}

# The targets FUZZ_JOBS at a time (default: one per core), reported in order.
for ((i = 0; i < ${#targets[@]}; i += parallel)); do
  batch=("${targets[@]:i:parallel}")
  pids=()
  for t in "${batch[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/seeds/$t"
    echo "== fuzz $t for ${secs}s"
    fuzz_one "$t" &
    pids+=($!)
  done
  for k in "${!batch[@]}"; do
    t=${batch[$k]}
    status=0
    wait "${pids[$k]}" || status=$?
    cat "$logs/$t.summary"
    if [ "$status" -ne 0 ]; then
      tail -n 40 "$logs/$t" >&2
      echo "fuzz.sh: $t failed; the input is in fuzz/artifacts/$t" >&2
      exit "$status"
    fi
  done
done
