#!/usr/bin/env bash
# Runs Mnemo's model benchmark and llama.cpp's on the same GGUF with the same threads, in one
# run: prefill of a 512-token prompt, and decode at batch 1, 8 and 32 (128-token contexts).
#   bench/compare_llama_cpp.sh [MODEL] [THREADS]
# Needs build/release (scripts/setup.sh; MNEMO_BIN overrides the binary) and llama.cpp
# (bench/build_llama_cpp.sh). On a shared machine, run it when `uptime` shows little load: every
# figure is a median, but two programs timed minutes apart see different neighbours.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${1:-${MNEMO_CACHE:-$HOME/.cache/mnemo}/models/gemma-3-270m-q4_k_m.gguf}
THREADS=${2:-2}
LLAMA_BIN=${LLAMA_BIN:-$HOME/.cache/mnemo/llama.cpp/build/bin}
REPEATS=${REPEATS:-3}
MNEMO_BIN=${MNEMO_BIN:-$ROOT/build/release/bin/mnemo}

echo "== machine"
lscpu | grep -E '^Model name|^CPU\(s\)' || true
uptime
echo "== mnemo"
"$MNEMO_BIN" bench -m "$MODEL" -t "$THREADS" -p 512 -c 128 -n 32 -b 1,8,32 -r "$REPEATS"
echo "== llama.cpp: llama-bench (prefill pp512, decode tg32 at batch 1)"
"$LLAMA_BIN/llama-bench" -m "$MODEL" -t "$THREADS" -p 512 -n 32 -r "$REPEATS" -o md
echo "== llama.cpp: llama-batched-bench (128-token contexts, 32 new tokens, batch 1/8/32)"
"$LLAMA_BIN/llama-batched-bench" -m "$MODEL" -t "$THREADS" -c 8192 -b 2048 -ub 512 -npp 128 -ntg 32 -npl 1,8,32 2>/dev/null \
  | grep -E '^\|' || true
