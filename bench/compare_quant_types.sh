#!/usr/bin/env bash
# Decode at batch 1 on each quantisation type against llama.cpp on the same file (issue 41):
# quantises an F16 GGUF with llama.cpp's own llama-quantize into each type's usual mix, then
# runs bench/compare_llama_cpp.sh decode-only on each, one after the other.
#   bench/compare_quant_types.sh F16.gguf [THREADS] [TYPE...]
# (bench/make_bench_model.py writes a Qwen3-1.7B-shape F16 file; default types: Q2_K Q3_K_M
# IQ4_NL IQ4_XS MXFP4_MOE Q4_K_M). The quantised files go beside the F16 one.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
F16=$1
THREADS=${2:-2}
shift $(( $# >= 2 ? 2 : $# ))
TYPES=("$@")
[ ${#TYPES[@]} -gt 0 ] || TYPES=(Q2_K Q3_K_M IQ4_NL IQ4_XS MXFP4_MOE Q4_K_M)
LLAMA_BIN=${LLAMA_BIN:-$HOME/.cache/mnemo/llama.cpp/build/bin}
for type in "${TYPES[@]}"; do
  out="${F16%-f16.gguf}-$(echo "$type" | tr 'A-Z' 'a-z').gguf"
  [ -f "$out" ] || "$LLAMA_BIN/llama-quantize" "$F16" "$out" "$type" "$THREADS" > "$out.log" 2>&1
  echo "== $type: $out"
  PROMPT=0 BATCHES=1 "$ROOT/bench/compare_llama_cpp.sh" "$out" "$THREADS" | tail -n +4
done
