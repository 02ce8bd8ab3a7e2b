#!/usr/bin/env bash
# Builds everything (CUDA sources too when nvcc exists) and runs every CPU test via ctest:
# the release build with all tests, then ASan+UBSan and TSan builds of the host code with
# their tests. STRATA_TEST_SANITIZERS=0 skips the sanitizer builds (for quick local runs).
# From a clean clone on 2 cores: about 52 minutes (2026-12-03: release build + its ctest ~24 min,
# ASan+UBSan build + ctest ~19, TSan ~10; CI took 49-50 min; the sanitizer presets build at -O1 -g1).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh test
jobs=${STRATA_JOBS:-$(nproc)}
start=$(date +%s)

run_preset() {
  local preset=$1 label=${2:-}
  echo "== $preset: configure + build"
  cmake --preset "$preset" >/dev/null
  if [ -n "$label" ]; then
    # Sanitizer builds: only the test executables of the labelled folders (and what they link).
    local targets
    targets=$(ninja -C "build/$preset" -t targets all | sed -n 's/^\([a-z]*_[a-z0-9_]*_test\): .*/\1/p' |
              grep -E "^(${label})_" | sort -u)
    cmake --build --preset "$preset" -j "$jobs" --target $targets
  else
    cmake --build --preset "$preset" -j "$jobs"
  fi
  echo "== $preset: ctest"
  if [ -n "$label" ]; then
    ctest --preset "$preset" -j "$jobs" -L "$label"
  else
    ctest --preset "$preset" -j "$jobs"
  fi
}

run_preset release
if [ "${STRATA_TEST_SANITIZERS:-1}" != 0 ]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  run_preset asan 'runtime|cache|actors|api'
  run_preset tsan 'actors|api'
  # The TCP collectives and rank links of separate-process tensor parallelism (threads over
  # sockets) run under TSan too.
  cmake --build --preset tsan -j "$jobs" --target runtime_tp_process_test
  ctest --preset tsan -j "$jobs" -R '^(TpWire|TcpComm|TpProcess)\.'
fi
echo "== tools/test.sh: all passed in $(( $(date +%s) - start ))s"
