#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run):
#   1. set up and build the release preset (warnings are errors), run every test, including those
#      on the real default model (label "model": they fail, never skip, if it is missing);
#   2. build the asan preset's unit tests (AddressSanitizer + UBSan) and run them under it;
#   3. build the tsan preset's concurrent tests (label "concurrent") and run them under TSan;
#   4. build the parsers' libFuzzer targets (fuzz preset, clang) and fuzz each for
#      MNEMO_FUZZ_SECONDS (default 30) seconds (fuzz/ci.sh): a crash fails the run.
# MNEMO_TEST_SKIP_ASAN=1 / MNEMO_TEST_SKIP_TSAN=1 / MNEMO_TEST_SKIP_FUZZ=1 skip steps 2 / 3 / 4
# (for quick local iterations; CI never sets them).
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
  cmake --build --preset asan --target unit_tests
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --preset asan -L unit -j"$JOBS" --timeout 900
fi
if [ "${MNEMO_TEST_SKIP_TSAN:-0}" != 1 ]; then
  # The unit tests with threads of their own (label unit-concurrent): the thread pool, cluster
  # membership on a real etcd, the KV transport, the HTTP layer, the disk tier's writer. Not the
  # engine: a TSan build of the model stack would double CI's time.
  echo "== tsan: concurrent unit tests"
  cmake --preset tsan > /dev/null
  cmake --build --preset tsan --target util_test etcd_client_test membership_test transfer_test kv_replicator_test http_server_test relay_test disk_tier_test
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --preset tsan -L concurrent -j"$JOBS" --timeout 900
fi
if [ "${MNEMO_TEST_SKIP_FUZZ:-0}" != 1 ]; then
  # What clients and peers send: OpenAI request bodies, the bounded JSON parser under them,
  # grammars and pipeline stage frames. A fixed time per target, so a run finds what it finds;
  # the seeds are in fuzz/corpus.
  echo "== fuzz: request parsers"
  JOBS="$JOBS" fuzz/ci.sh "${MNEMO_FUZZ_SECONDS:-30}"
fi
echo "== all tests passed"
