#!/usr/bin/env bash
# Installs what accord needs, builds it and runs the whole test suite twice:
# a Release build, then a build under AddressSanitizer and
# UndefinedBehaviorSanitizer; then runs every fuzz target for a bounded time
# (scripts/fuzz.sh; ACCORD_FUZZ_SECONDS per target, default 20). Tests read
# the shared models from ../shared, or beside the repository this one was
# cloned from (ACCORD_SHARED=DIR overrides both; scripts/shared_dir.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The tests compare against real models and reference outputs; without them
# say so once, before building, rather than fail a hundred tests.
source "$root/scripts/shared_dir.sh"
shared=$(shared_dir "$root")
if [ ! -f "$shared/models/stories260K.bin" ]; then
  echo "accord: $shared/models/stories260K.bin not found: the tests need the shared models and" \
    "reference outputs beside the checkout (../shared), beside the repository it was cloned from," \
    "or in ACCORD_SHARED=DIR" >&2
  exit 1
fi
export ACCORD_SHARED=$shared
"$root/scripts/setup.sh"

passed=0
run_suite() {
  local build=$1
  shift
  echo "== accord: building $build"
  "$root/scripts/build.sh" "$build" "$@"
  echo "== accord: testing $build"
  ctest --test-dir "$build" --output-on-failure -j "$(nproc)" | tee "$build/ctest.log"
  # ctest exits non-zero on any failure (set -e stops here); count the rest.
  passed=$((passed + $(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\).*/\1/p' "$build/ctest.log")))
}

# The Release build also compiles the benchmarks, so they cannot rot.
run_suite "$root/build" -DCMAKE_BUILD_TYPE=Release -DACCORD_BUILD_BENCH=ON -DACCORD_WERROR=ON
# The CUDA code builds once, in the Release build: nothing here runs it, and nvcc knows no sanitizer.
run_suite "$root/build-sanitize" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DACCORD_SANITIZE=ON -DACCORD_WERROR=ON -DACCORD_BUILD_BENCH=OFF \
  -DACCORD_CUDA=OFF
"$root/scripts/fuzz.sh"
echo "accord: $passed passed, 0 failed"
