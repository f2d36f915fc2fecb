#!/usr/bin/env bash
# A bounded fuzzing pass over the request parsers, as scripts/test.sh runs it: builds
# openai_request_fuzz, responses_request_fuzz, internal_request_fuzz, bounded_json_fuzz,
# grammar_fuzz, stage_frame_fuzz, disk_tier_fuzz (the disk tier's extents, read back after a
# crash or a damaged disk) and model_loader_fuzz (every architecture's config reader and the
# weight loader) with
# the "fuzz" preset (clang, ASan + UBSan) and runs each for a fixed time from its seeds
# (fuzz/corpus/openai, responses, internal, grammar, stage or disk). Fails on any crash, sanitizer
# report, leak or input slower than 10 s.
#   fuzz/ci.sh [seconds per target, default $MNEMO_FUZZ_SECONDS or 30]
# New inputs go to build/fuzz/corpus/<target> (kept between runs), crashes to
# build/fuzz/artifacts/; replay one with build/fuzz/fuzz/<target> build/fuzz/artifacts/crash-...
set -euo pipefail
seconds="${1:-${MNEMO_FUZZ_SECONDS:-30}}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/fuzz"
targets=(openai_request_fuzz responses_request_fuzz internal_request_fuzz bounded_json_fuzz grammar_fuzz stage_frame_fuzz
         disk_tier_fuzz model_loader_fuzz)

(cd "$root" && cmake --preset fuzz > /dev/null)
ninja -C "$build" -j"${JOBS:-$(nproc)}" "${targets[@]}"

mkdir -p "$build/artifacts" "$build/logs"
for target in "${targets[@]}"; do
  corpus="$build/corpus/$target"
  log="$build/logs/$target.log"
  mkdir -p "$corpus"
  echo "fuzz: $target for ${seconds}s"
  seeds="$root/fuzz/corpus/openai"
  [ "$target" = responses_request_fuzz ] && seeds="$root/fuzz/corpus/responses"
  [ "$target" = internal_request_fuzz ] && seeds="$root/fuzz/corpus/internal"
  [ "$target" = grammar_fuzz ] && seeds="$root/fuzz/corpus/grammar"
  [ "$target" = stage_frame_fuzz ] && seeds="$root/fuzz/corpus/stage"
  [ "$target" = disk_tier_fuzz ] && seeds="$root/fuzz/corpus/disk"
  max_len=4096
  dict="$root/fuzz/openai.dict"
  if [ "$target" = model_loader_fuzz ]; then seeds="$root/fuzz/corpus/model"; max_len=65536; dict="$root/fuzz/gguf.dict"; fi
  if ! "$build/fuzz/$target" "$corpus" "$seeds" -dict="$dict" -max_len="$max_len" \
      -timeout=10 -max_total_time="$seconds" -artifact_prefix="$build/artifacts/$target-" -print_final_stats=1 \
      > "$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $target FAILED (log: $log; the input is in $build/artifacts/)" >&2
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' "$log" | sed "s/^/fuzz: $target /"
done
