#!/usr/bin/env bash
# Mnemo's model benchmark and llama.cpp's on the same GGUF with the same threads, interleaved
# round by round (bench/compare_interleaved.py): prefill of a 512-token prompt, and decode at
# batch 1, 8 and 32 (128-token contexts); medians and their ratios.
#   bench/compare_llama_cpp.sh [MODEL] [THREADS]
# REPEATS (rounds, default 3), BATCHES (default 1,8,32), PROMPT (default 512; 0: decode only),
# JSON (a file for the rounds and medians). Needs build/release (scripts/setup.sh; MNEMO_BIN
# overrides the binary) and llama.cpp (bench/build_llama_cpp.sh). On a shared machine, run it
# when `uptime` shows little load.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${1:-${MNEMO_CACHE:-$HOME/.cache/mnemo}/models/gemma-3-270m-q4_k_m.gguf}
THREADS=${2:-2}
LLAMA_BIN=${LLAMA_BIN:-$HOME/.cache/mnemo/llama.cpp/build/bin}
MNEMO_BIN=${MNEMO_BIN:-$ROOT/build/release/bin/mnemo}

echo "== machine"
lscpu | grep -E '^Model name|^CPU\(s\)' || true
uptime
exec python3 "$ROOT/bench/compare_interleaved.py" --model "$MODEL" --threads "$THREADS" --rounds "${REPEATS:-3}" \
  --batches "${BATCHES:-1,8,32}" --prompt "${PROMPT:-512}" --mnemo "$MNEMO_BIN" --llama-bin "$LLAMA_BIN" \
  ${JSON:+--json "$JSON"}
