#!/usr/bin/env bash
# Builds the libFuzzer targets with the "fuzz" preset (clang) and fuzzes the GGUF reader.
#   fuzz/run.sh [seconds=60]
# Seeds: fuzz/corpus/gguf (small valid files written by gguf_seed_corpus; never modified here).
# New inputs go to build/fuzz/corpus/gguf and crashes to build/fuzz/artifacts/; replay one with
#   build/fuzz/fuzz/gguf_reader_fuzz build/fuzz/artifacts/crash-...
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/fuzz"

(cd "$root" && cmake --preset fuzz >/dev/null)
ninja -C "$build" -j"${JOBS:-2}" gguf_reader_fuzz gguf_seed_corpus

seeds="$root/fuzz/corpus/gguf"
if [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
  mkdir -p "$seeds"
  "$build/fuzz/gguf_seed_corpus" "$seeds"
fi

corpus="$build/corpus/gguf"
artifacts="$build/artifacts/"
mkdir -p "$corpus" "$artifacts"
"$build/fuzz/gguf_reader_fuzz" "$corpus" "$seeds" \
  -dict="$root/fuzz/gguf.dict" -max_len=4096 -max_total_time="$seconds" \
  -artifact_prefix="$artifacts" -print_final_stats=1
