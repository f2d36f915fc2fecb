#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run):
#   1. set up and build the release preset (warnings are errors), run every test, including those
#      on the real default model (label "model": they fail, never skip, if it is missing);
#   2. build the asan preset (AddressSanitizer + UBSan) and run the unit tests under it.
# MNEMO_TEST_SKIP_ASAN=1 runs step 1 only (for quick local iterations; CI never sets it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
JOBS=${MNEMO_TEST_JOBS:-$(nproc)}

scripts/setup.sh
echo "== release: all tests"
ctest --preset release -j"$JOBS" --timeout 900

if [ "${MNEMO_TEST_SKIP_ASAN:-0}" != 1 ]; then
  echo "== asan+ubsan: unit tests"
  cmake --preset asan > /dev/null
  cmake --build --preset asan
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --preset asan -L unit -j"$JOBS" --timeout 900
fi
echo "== all tests passed"
